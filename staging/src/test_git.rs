//! Running real `git` in unit tests (never in the library: a repository's config could make
//! git run code). Hooks are disabled and the user's and system's config ignored.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir`; true when it succeeded.
pub(crate) fn git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .is_ok_and(|o| o.status.success())
}
