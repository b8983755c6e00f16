//! `garuda-agent-probe`: the confined agent's probes (`garuda agent --probe`), run here with
//! no confinement at all: the negative control of `tests/agent_confinement.rs`. It calls the
//! very function the agent calls ([`garuda_supervisor::agent::probe::run`]) and prints its
//! lines on stdout. Arguments: those of `garuda agent --probe` (see `ProbeSpec::parse`).

use std::process::ExitCode;

use garuda_supervisor::agent::probe::{run, ProbeSpec};

fn main() -> ExitCode {
    let spec = match ProbeSpec::parse(std::env::args_os().skip(1)) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("garuda-agent-probe: {e}");
            return ExitCode::from(2);
        }
    };
    for line in run(&spec, std::fs::read_to_string("/proc/self/status")) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}
