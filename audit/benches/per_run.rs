//! Audit cost per `garuda sandbox` run, in-process: open + durable intent + result + close of
//! one short session (what `supervisor/src/record.rs` does per run) after N = 0, 1,000 and
//! 10,000 prior sessions in the same project, and the size of the audit files after them.
//!
//! Run: `cargo bench -p garuda-audit --bench per_run` (release profile). Prior sessions are
//! written with fsync off (to build the history quickly); each measured session is timed with
//! fsync off (CPU and reads only) and with fsync on (the real cost on this disk). Medians of
//! `REPS` sessions; each measured session adds one to the history, which changes N by < 1 %.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use garuda_audit::{
    AuditConfig, InstallSecret, Outcome, SessionWriter, VerifyOptions, VerifyTarget,
};
use serde_json::json;

const REPS: usize = 41;

fn one_run(cfg: &AuditConfig, i: u64) {
    let start = json!({
        "tool": "garuda sandbox",
        "project": "/home/dev/project",
        "policy_sources": [],
        "profile": "default",
        "require_sandbox": false,
        "executor_setting": "auto",
    });
    let mut w = SessionWriter::open(cfg, start).unwrap();
    w.append_durable(
        "command_intent",
        json!({"argv": ["true"], "cwd": "/home/dev/project", "executor": "landlock",
               "mode": "direct", "network_allow": [], "timeout_s": null}),
    )
    .unwrap();
    w.append(
        "command_result",
        json!({"blocked": [], "code": 0, "duration_ms": 1 + i % 7, "exit_code": 0,
               "interrupted_by_signal": null, "staged": null, "status": "exited"}),
    )
    .unwrap();
    w.close(json!({"exit_code": 0})).unwrap();
}

fn median_us(cfg: &AuditConfig, fsync: bool, n: u64) -> f64 {
    let mut cfg = cfg.clone();
    cfg.fsync = fsync;
    let mut t: Vec<Duration> = (0..REPS)
        .map(|i| {
            let s = Instant::now();
            one_run(&cfg, n + i as u64);
            s.elapsed()
        })
        .collect();
    t.sort();
    t[REPS / 2].as_secs_f64() * 1e6
}

/// Apparent bytes and allocated bytes (512-byte blocks) of every file under `dir`, and the
/// number of files.
fn usage(dir: &Path) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            let (a, b, c) = usage(&e.path());
            out = (out.0 + a, out.1 + b, out.2 + c);
        } else {
            out = (out.0 + meta.len(), out.1 + meta.blocks() * 512, out.2 + 1);
        }
    }
    out
}

fn main() {
    let tmp =
        tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| ".".into())).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let home = tmp.path().join("garuda");
    let mut cfg = AuditConfig::new(&home, &project);
    cfg.fsync = false;
    let mut done = 0u64;
    for n in [0u64, 1_000, 10_000] {
        let t = Instant::now();
        while done < n {
            one_run(&cfg, done);
            done += 1;
        }
        let built = t.elapsed();
        let off = median_us(&cfg, false, n);
        let on = median_us(&cfg, true, n);
        done += 2 * REPS as u64;
        println!(
            "after {n:>6} prior sessions: open+intent+result+close {off:>9.1} us (fsync off), {on:>9.1} us (fsync on); history built in {:.1} s",
            built.as_secs_f64()
        );
    }
    // Full verification still reads and checks every line of every session.
    let key = InstallSecret::load(&cfg.keys_dir).unwrap().unwrap();
    let opts = VerifyOptions::new(VerifyTarget::All(cfg.audit_root.clone()), vec![key]);
    let t = Instant::now();
    let report = garuda_audit::verify(&opts);
    let lines: u64 = report.sessions.iter().map(|s| s.lines).sum();
    assert_eq!(
        report.outcome(),
        Outcome::Verified,
        "{}",
        report.render_text()
    );
    println!(
        "verify --all: {} sessions, {lines} lines, VERIFIED in {:.2} s",
        report.sessions.len(),
        t.elapsed().as_secs_f64()
    );
    let (bytes, alloc, files) = usage(&home);
    println!(
        "audit files after {done} sessions: {files} files, {:.2} MB apparent, {:.2} MB allocated",
        bytes as f64 / 1e6,
        alloc as f64 / 1e6
    );
}
