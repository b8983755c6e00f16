//! `garuda-modelserver SCRIPT.json [--port N] [--exit-when-done]`: serve a script file on
//! `127.0.0.1`, print the base URL on stdout, and one line per request on stderr. With
//! `--exit-when-done` it exits once every entry has been played and answered.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use garuda_modelserver::{ModelServer, Outcome, Script};

const USAGE: &str = "usage: garuda-modelserver SCRIPT.json [--port N] [--exit-when-done]";

fn main() -> ExitCode {
    let mut script = None;
    let mut port = 0u16;
    let mut exit_when_done = false;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--port") => match args.next().and_then(|p| p.to_str()?.parse().ok()) {
                Some(p) => port = p,
                None => {
                    eprintln!("{USAGE}");
                    return ExitCode::from(2);
                }
            },
            Some("--exit-when-done") => exit_when_done = true,
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ if script.is_none() => script = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(path) = script else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let script = match Script::load(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("garuda-modelserver: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = match ModelServer::start_on(port, script.dialect, script.responses) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("garuda-modelserver: cannot listen on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", server.url());
    let _ = std::io::stdout().flush();
    let mut shown = 0;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let requests = server.requests();
        for r in requests.iter().skip(shown) {
            let entry = r
                .entry
                .map_or("no entry".to_string(), |e| format!("entry {e}"));
            eprintln!(
                "{:>8.3}s {} {} ({entry})",
                r.arrived.duration_since(server.started()).as_secs_f64(),
                r.method,
                one_line(&r.target),
            );
        }
        shown = requests.len();
        let (played, total) = server.played();
        if exit_when_done
            && played == total
            && requests.iter().all(|r| r.outcome != Outcome::Sending)
        {
            return ExitCode::SUCCESS;
        }
    }
}

/// The request target as one printable line (a client chose it).
fn one_line(s: &str) -> String {
    s.chars().flat_map(char::escape_default).collect()
}
