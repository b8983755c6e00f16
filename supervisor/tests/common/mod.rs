//! Helpers shared by the supervisor's integration tests.
#![allow(dead_code)] // each test binary uses a part

use std::path::PathBuf;
use std::process::Command;

/// The `garuda` binary under test (`GARUDA_BIN` overrides, for CI's unprivileged run).
pub fn garuda() -> PathBuf {
    std::env::var_os("GARUDA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_garuda")))
}

/// A fresh folder for one test, outside `/tmp`: every Linux executor gives the command a
/// private `/tmp`, so a secret or project under `/tmp` would be invisible for the wrong reason.
/// It lives under the real user's `~/.cache/<suite>`.
pub fn base_dir(suite: &str) -> tempfile::TempDir {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let parent = real_home.join(".cache").join(suite);
    std::fs::create_dir_all(&parent).expect("create the test base");
    tempfile::tempdir_in(&parent).expect("tempdir")
}

/// The proxy variables of the test process, which a `garuda` under test must not inherit: a
/// sandbox that shows one must have set it itself.
pub const PROXY_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// A fake home and a project folder under one fresh [`base_dir`], removed when dropped.
pub struct World {
    pub base: tempfile::TempDir,
    pub home: PathBuf,
    /// Canonical.
    pub project: PathBuf,
}

impl World {
    /// `home/` and `project/`, both empty, under a fresh `base_dir(suite)`.
    pub fn new(suite: &str) -> World {
        let base = base_dir(suite);
        let home = base.path().join("home");
        let project = base.path().join("project");
        std::fs::create_dir_all(&home).expect("create the home");
        std::fs::create_dir_all(&project).expect("create the project");
        World {
            project: project.canonicalize().expect("canonical project"),
            home,
            base,
        }
    }

    /// `git ARGS…` in the project, with this world's home, a fixed identity and branch name;
    /// a failure fails the test.
    pub fn git(&self, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(["-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

/// Bytes as text, lossily.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
pub mod net;
pub mod script;

/// Whether `script` (util-linux) is here to give garuda a terminal. When it is not, the test
/// prints `NOT TESTED: <what>` and fails unless `GARUDA_ALLOW_NO_SCRIPT=1`; the caller returns.
pub fn have_script(what: &str) -> bool {
    let here = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !here {
        assert!(
            std::env::var("GARUDA_ALLOW_NO_SCRIPT").is_ok_and(|v| v == "1"),
            "`script` (util-linux) is needed to give garuda a terminal; set GARUDA_ALLOW_NO_SCRIPT=1 to accept NOT TESTED"
        );
        eprintln!("NOT TESTED: {what} (no `script`)");
    }
    here
}

/// Runs the shell `line` on a terminal (`script -qec LINE /dev/null`) in `world`'s project
/// with its home, no `GARUDA_HOME`, `SHELL=/bin/sh` and `env`, with `answers` typed in
/// advance. Its stdout is the terminal's transcript (stdout and stderr both).
pub fn on_a_terminal(
    world: &World,
    line: &str,
    env: &[(&str, &std::ffi::OsStr)],
    answers: &str,
) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new("script")
        .args(["-qec", line, "/dev/null"])
        .current_dir(&world.project)
        .env("HOME", &world.home)
        .env("SHELL", "/bin/sh")
        .envs(env.iter().copied())
        .env_remove("GARUDA_HOME")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run script");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answers.as_bytes())
        .expect("type the answers");
    child.wait_with_output().expect("wait for script")
}

/// The audit session a broker under test writes into, shared with the test (which closes it
/// and verifies the log afterwards).
#[derive(Clone)]
pub struct SharedAudit(pub std::sync::Arc<std::sync::Mutex<Option<garuda_audit::SessionWriter>>>);

impl garuda_supervisor::broker::server::AuditSink for SharedAudit {
    fn record(&mut self, kind: &str, event: serde_json::Value) -> Result<(), String> {
        let mut w = self.0.lock().expect("audit lock");
        w.as_mut()
            .expect("an open audit session")
            .append(kind, event)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn make_durable(&mut self) -> Result<(), String> {
        let mut w = self.0.lock().expect("audit lock");
        w.as_mut()
            .expect("an open audit session")
            .make_durable()
            .map_err(|e| e.to_string())
    }
}
