//! Audit log throughput: appends per second without fsync (redaction, MAC, hashes, one
//! `write` per line), and verify speed in MB/s over one large session.
//!
//! Run: `cargo bench -p garuda-audit` (release profile). Targets (DESIGN.md): at least
//! 100,000 appends/s without fsync, verify at least 300 MB/s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use garuda_audit::{
    project_audit_dir, AuditConfig, InstallSecret, Outcome, SessionWriter, VerifyOptions,
    VerifyTarget,
};
use serde_json::json;

fn event(i: u64) -> serde_json::Value {
    json!({
        "cmd": ["cargo", "test", "--workspace"],
        "cwd": "/home/dev/project",
        "exit": 0,
        "ms": 1234 + i % 1000,
        "stdout_tail": "test result: ok. 128 passed; 0 failed; 0 ignored",
    })
}

fn setup(checkpoints: bool) -> (tempfile::TempDir, AuditConfig) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let mut cfg = AuditConfig::new(&tmp.path().join("garuda"), &project);
    cfg.fsync = false;
    cfg.checkpoints = checkpoints;
    cfg.epoch_max_age = Duration::from_secs(3600);
    (tmp, cfg)
}

fn append(checkpoints: bool, n: u64) -> (f64, tempfile::TempDir, AuditConfig) {
    let (tmp, cfg) = setup(checkpoints);
    let mut w = SessionWriter::open(&cfg, json!({})).unwrap();
    let t = Instant::now();
    for i in 0..n {
        w.append("command_result", event(i)).unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    w.close(json!({})).unwrap();
    (n as f64 / secs, tmp, cfg)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    const APPENDS: u64 = 300_000;
    let verify_only = std::env::args().any(|a| a == "verify");
    for checkpoints in [false, true] {
        if verify_only {
            break;
        }
        let (rate, _tmp, _) = append(checkpoints, APPENDS);
        println!(
            "append (no fsync, checkpoints {}): {APPENDS} lines, {:.0} lines/s",
            if checkpoints { "on" } else { "off" },
            rate
        );
    }

    let (_, tmp, cfg) = append(true, 600_000);
    let dir = project_audit_dir(&cfg.audit_root, &cfg.project_root).unwrap();
    let bytes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let key = InstallSecret::load(&cfg.keys_dir).unwrap().unwrap();
    let opts = VerifyOptions::new(VerifyTarget::Project(dir), vec![key]);
    let mut best = f64::MAX;
    for _ in 0..if verify_only { 10 } else { 3 } {
        let t = Instant::now();
        let report = garuda_audit::verify(&opts);
        best = best.min(t.elapsed().as_secs_f64());
        assert_eq!(
            report.outcome(),
            Outcome::Verified,
            "{}",
            report.render_text()
        );
    }
    println!(
        "verify: {:.1} MB in {:.3} s, {:.0} MB/s (best of 3, file in page cache)",
        bytes as f64 / 1e6,
        best,
        bytes as f64 / 1e6 / best
    );
    drop(tmp);
}
