//! What every executor does before it starts a command, and says when it cannot: the working
//! directory checked to lie inside the project, the program looked up on the sandbox's `PATH`,
//! and the outcome (exit 127 or 126, like a shell) for a program that cannot be executed.
//!
//! It lives apart from [`super::select`], which picks among the executors, so that the
//! executors depend on it and `select` on them, never the other way round.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Instant;

use garuda_policy::ExecPolicy;

use super::{Captured, CommandSpec, ExecError, ExitStatus, Outcome, StdioMode};

/// The working directory of `cmd`, checked to lie inside the project root.
pub fn checked_cwd(cmd: &CommandSpec, policy: &ExecPolicy) -> Result<PathBuf, ExecError> {
    match &cmd.cwd {
        None => Ok(policy.project_root.clone()),
        Some(cwd) => {
            let abs = if cwd.is_absolute() {
                cwd.clone()
            } else {
                policy.project_root.join(cwd)
            };
            let canon = std::fs::canonicalize(&abs).map_err(|_| ExecError::CwdOutsideProject {
                cwd: abs.clone(),
                root: policy.project_root.clone(),
            })?;
            if !canon.starts_with(&policy.project_root) {
                return Err(ExecError::CwdOutsideProject {
                    cwd: canon,
                    root: policy.project_root.clone(),
                });
            }
            Ok(canon)
        }
    }
}

/// Search `PATH` (the sandbox's, from the policy environment) for `program`.
pub fn resolve_program(program: &OsStr, env: &[(OsString, OsString)]) -> PathBuf {
    if program.as_bytes().contains(&b'/') {
        return PathBuf::from(program);
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    PathBuf::from(program)
}

/// The outcome reported when the program does not exist: exit 127, like a shell.
pub fn not_found_outcome(program: &OsStr, stdio: StdioMode, start: Instant) -> Outcome {
    exec_failure_outcome(program, libc::ENOENT, stdio, start)
}

/// The outcome for a program that could not be executed inside the sandbox (127 when it was
/// not found, 126 otherwise), with the reason on stderr.
pub fn exec_failure_outcome(
    program: &OsStr,
    errno: i32,
    stdio: StdioMode,
    start: Instant,
) -> Outcome {
    // The program name is the caller's (an agent's command line): printed visibly.
    let msg = format!(
        "garuda: cannot execute {}: {}\n",
        garuda_text::visible_os(program),
        std::io::Error::from_raw_os_error(errno)
    );
    let mut stderr = Captured::default();
    match stdio {
        StdioMode::Capture => stderr.bytes = msg.into_bytes(),
        StdioMode::Inherit => eprint!("{msg}"),
    }
    Outcome {
        status: ExitStatus::Code(if errno == libc::ENOENT { 127 } else { 126 }),
        stdout: Captured::default(),
        stderr,
        duration: start.elapsed(),
        lookups: crate::dnsstub::Lookups::default(),
        namespaces_made_ahead: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn program_resolution_uses_sandbox_path() {
        let env = vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
        assert_eq!(
            resolve_program(OsStr::new("sh"), &env).parent(),
            Some(Path::new("/usr/bin"))
        );
        assert_eq!(
            resolve_program(OsStr::new("./x"), &env),
            PathBuf::from("./x")
        );
        assert_eq!(
            resolve_program(OsStr::new("no-such-garuda-prog"), &env),
            PathBuf::from("no-such-garuda-prog")
        );
    }
}
