//! The probe program the contract suite runs inside each sandbox.
fn main() {}
