//! Helpers shared by the supervisor's integration tests.
#![allow(dead_code)] // each test binary uses a part

use std::path::PathBuf;

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

/// Bytes as text, lossily.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
pub mod net;
