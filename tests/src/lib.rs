//! Cross-crate test suites for Garuda. The code lives in `tests/` (integration tests) and
//! `src/bin/probe.rs` (the probe program the contract suite runs inside each sandbox).
#![forbid(unsafe_code)]
