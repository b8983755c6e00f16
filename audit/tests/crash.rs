//! Crash safety: a writer killed (SIGKILL) at any point must never make verify say
//! "tampered". At most a torn last line (a warning) or "cannot tell" for the session that was
//! cut short; and once the project's next session has recorded the dead one as found,
//! everything verifies.
//!
//! The writer is this test binary itself, re-executed to run only `crash_child` (an ignored
//! test that does nothing unless the environment variable names its folder). It opens
//! sessions, appends lines (every fourth durable), closes them, and starts again, with a
//! checkpoint file and a witness folder, until it is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use garuda_audit::{
    project_audit_dir, AuditConfig, Code, InstallSecret, Outcome, SessionWriter, Severity,
    VerifyOptions, VerifyTarget, WitnessConfig,
};
use serde_json::json;

const DIR_VAR: &str = "GARUDA_AUDIT_CRASH_DIR";
const FSYNC_VAR: &str = "GARUDA_AUDIT_CRASH_FSYNC";
const RUNS: u64 = 200;
const RUNS_PER_PROJECT: u64 = 20;

fn config(base: &Path, fsync: bool) -> AuditConfig {
    let mut cfg = AuditConfig::new(&base.join("garuda"), &base.join("project"));
    cfg.epoch_max_lines = 5;
    cfg.epoch_max_age = Duration::from_millis(7);
    cfg.witness = Some(WitnessConfig::Dir(base.join("witness")));
    cfg.fsync = fsync;
    // Archives every few sessions, so that kills also land inside an archive's rewrite.
    cfg.archive_at_bytes = Some(16 * 1024);
    cfg
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
#[ignore = "the writer process of a_writer_killed_at_random_points_never_looks_tampered"]
fn crash_child() {
    let Some(base) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let cfg = config(Path::new(&base), std::env::var_os(FSYNC_VAR).is_some());
    let mut rng = u64::from(std::process::id()) | 1;
    loop {
        let Ok(mut w) = SessionWriter::open(&cfg, json!({"pid": std::process::id()})) else {
            return;
        };
        for i in 0..xorshift(&mut rng) % 40 {
            let event =
                json!({"i": i, "cmd": ["cargo", "test"], "out": "x".repeat((i % 7) as usize * 30)});
            let r = if i % 4 == 0 {
                w.append_durable("command_intent", event)
            } else {
                w.append("command_result", event)
            };
            if r.is_err() {
                return;
            }
        }
        if w.close(json!({"reason": "done"})).is_err() {
            return;
        }
    }
}

/// Every file of a folder, for a failure message.
fn dump(dir: &Path) -> String {
    let mut out = String::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let data = fs::read(&p).unwrap_or_default();
        out += &format!("{}:\n{}\n", p.display(), String::from_utf8_lossy(&data));
    }
    out
}

fn verify(base: &Path, cfg: &AuditConfig) -> garuda_audit::Report {
    let key = InstallSecret::load(&cfg.keys_dir).unwrap();
    let dir = project_audit_dir(&cfg.audit_root, &cfg.project_root).unwrap();
    let mut o = VerifyOptions::new(VerifyTarget::Project(dir), key.into_iter().collect());
    o.witness = Some(WitnessConfig::Dir(base.join("witness")));
    garuda_audit::verify(&o)
}

#[test]
fn a_writer_killed_at_random_points_never_looks_tampered() {
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut tally: BTreeMap<String, u64> = BTreeMap::new();
    let mut tmp: Option<tempfile::TempDir> = None;
    let mut base = PathBuf::new();
    let mut cfg = config(Path::new("/nonexistent"), false);
    for run in 0..RUNS {
        if run.is_multiple_of(RUNS_PER_PROJECT) {
            let t = tempfile::tempdir().unwrap();
            fs::set_permissions(t.path(), fs::Permissions::from_mode(0o700)).unwrap();
            base = t.path().to_path_buf();
            fs::create_dir(base.join("project")).unwrap();
            // Half the projects sync, half do not: SIGKILL keeps the page cache either way,
            // and without syncs the child gets further per run.
            cfg = config(&base, (run / RUNS_PER_PROJECT).is_multiple_of(2));
            tmp = Some(t);
        }
        let mut state = run.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let delay = xorshift(&mut state) % 31;
        let mut cmd = Command::new(&exe);
        cmd.args(["--exact", "crash_child", "--nocapture", "--ignored"])
            .env(DIR_VAR, &base)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cfg.fsync {
            cmd.env(FSYNC_VAR, "1");
        }
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        child.wait().unwrap();

        if !cfg.keys_dir.join("install.key").exists() {
            *tally
                .entry("killed before the first session".into())
                .or_default() += 1;
            continue;
        }
        let report = verify(&base, &cfg);
        assert_ne!(
            report.outcome(),
            Outcome::Tampered,
            "run {run} (killed after {delay} ms):\n{}\n{}",
            report.render_text(),
            dump(&project_audit_dir(&cfg.audit_root, &cfg.project_root).unwrap())
        );
        *tally.entry(format!("{:?}", report.outcome())).or_default() += 1;
        for f in &report.findings {
            assert!(
                f.severity != Severity::Error,
                "run {run}: {}",
                report.render_text()
            );
            *tally.entry(f.code.to_string()).or_default() += 1;
        }

        if run % RUNS_PER_PROJECT == RUNS_PER_PROJECT - 1 {
            // The next session records every dead one as found: then nothing is undecidable.
            let w = SessionWriter::open(&cfg, json!({})).unwrap();
            w.close(json!({})).unwrap();
            let report = verify(&base, &cfg);
            assert_eq!(
                report.outcome(),
                Outcome::Verified,
                "after recovery, run {run}:\n{}",
                report.render_text()
            );
            assert!(report
                .findings
                .iter()
                .all(|f| matches!(f.code, Code::TornTail | Code::FileMissing)
                    && f.severity == Severity::Warning));
            *tally
                .entry("projects verified after recovery".into())
                .or_default() += 1;
        }
    }
    drop(tmp);
    eprintln!(
        "{RUNS} kills in {:.1} s: {tally:?}",
        started.elapsed().as_secs_f64()
    );
}
