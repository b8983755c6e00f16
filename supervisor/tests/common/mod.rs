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
