//! The witness as a separate process, spoken to over stdin/stdout exactly as a configured
//! witness command is. This is a `harness = false` test: run with `--serve-witness DIR` it *is*
//! the witness (`garuda_audit::witness_serve`, what `garuda audit witness-serve DIR` runs);
//! run without, it is the test. No test harness writes to stdout, which is the protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::path::Path;

use garuda_audit::{AuditError, Code, Outcome, SessionWriter, WitnessConfig};
use serde_json::json;
use util::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve-witness") {
        let dir = args.get(2).expect("witness folder");
        let result = garuda_audit::witness_serve(
            Path::new(dir),
            std::io::stdin().lock(),
            std::io::stdout().lock(),
        );
        std::process::exit(i32::from(result.is_err()));
    }
    a_witness_command_keeps_the_log_honest();
    a_refusing_or_missing_witness_stops_the_writer();
    eprintln!("witness_cmd: 2 tests ok");
}

fn witness(env: &Env) -> WitnessConfig {
    let exe = std::env::current_exe().unwrap();
    WitnessConfig::Command(vec![
        exe.display().to_string(),
        "--serve-witness".into(),
        env.witness_dir.display().to_string(),
    ])
}

fn a_witness_command_keeps_the_log_honest() {
    let mut env = Env::new();
    env.cfg.witness = Some(witness(&env));
    env.session(6, true);
    let path = env.session(9, true);
    let mut o = env.options();
    o.witness = Some(witness(&env));
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Verified);
    assert!(r.coverage.anyone, "{}", r.render_text());

    // Cut the tail and drop the local evidence: the witness still knows. (Journal layout: the
    // second session starts after the first's lines.)
    let lines = read_lines(&path);
    let base = segment(&path, 1).start;
    write_lines(&path, &lines[..base + 6]);
    std::fs::remove_file(path.with_extension("ckpt")).unwrap();
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::WitnessAhead, Some(base as u64 + 7), Some(&path));

    // Rewrite the start of the session (even with valid MACs, as someone holding the key
    // could): the witness's tree differs.
    let mut forged = lines.clone();
    forged[base + 2] = replace(&forged[base + 2], "cmd-1", "cmd-Y");
    write_lines(&path, &forged);
    let r = garuda_audit::verify(&o);
    assert_finding(&r, Code::WitnessFork, Some(lines.len() as u64), Some(&path));
}

fn a_refusing_or_missing_witness_stops_the_writer() {
    for argv in [
        vec![
            "sh".to_string(),
            "-c".into(),
            "cat >/dev/null; echo '409 99'".into(),
        ],
        vec!["/nonexistent/garuda-witness".to_string()],
    ] {
        let mut env = Env::new();
        env.cfg.witness = Some(WitnessConfig::Command(argv.clone()));
        let mut w = SessionWriter::open(&env.cfg, json!({})).unwrap();
        // The fourth line ends the epoch: the checkpoint goes to the witness, which fails.
        let mut failed = None;
        for i in 0..4 {
            if let Err(e) = w.append("x", json!({ "i": i })) {
                failed = Some(e);
                break;
            }
        }
        let err = failed.unwrap_or_else(|| panic!("{argv:?}: the witness failure went unnoticed"));
        assert!(
            matches!(
                err,
                AuditError::WitnessRefused { .. } | AuditError::Witness { .. }
            ),
            "{argv:?}: {err}"
        );
        assert!(matches!(
            w.append("x", json!({})),
            Err(AuditError::Poisoned { .. })
        ));
    }
}
