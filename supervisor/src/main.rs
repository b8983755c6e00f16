//! `garuda`: the supervisor binary.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(garuda_supervisor::cli::main());
}
