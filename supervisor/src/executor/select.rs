//! Which executors this machine can run, and which one a setting selects.
//!
//! `auto` picks the strongest available backend and says why: `landlock` (namespaces, mounts,
//! Landlock and seccomp, with a PID limit) over `bubblewrap` (namespaces, mounts and seccomp,
//! no Landlock) over `seatbelt` (macOS) over `host`. A named executor that is not available is
//! an error: a setting never silently downgrades.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Instant;

use garuda_policy::{ExecPolicy, ExecutorChoice};
use serde::Serialize;

use super::bubblewrap::{self, BubblewrapExecutor};
use super::host::HostExecutor;
use super::landlock::{self as native, LandlockExecutor};
use super::seatbelt::SeatbeltExecutor;
use super::{Captured, CommandSpec, ExecError, Executor, ExitStatus, Outcome, StdioMode};

/// The executor backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// System bubblewrap.
    Bubblewrap,
    /// Native namespaces + Landlock + seccomp.
    Landlock,
    /// macOS `sandbox-exec`.
    Seatbelt,
    /// No isolation.
    Host,
}

impl ExecutorKind {
    /// All kinds, strongest first.
    pub const ALL: [ExecutorKind; 4] = [
        ExecutorKind::Landlock,
        ExecutorKind::Bubblewrap,
        ExecutorKind::Seatbelt,
        ExecutorKind::Host,
    ];

    /// The setting's name.
    pub fn name(self) -> &'static str {
        match self {
            ExecutorKind::Bubblewrap => "bubblewrap",
            ExecutorKind::Landlock => "landlock",
            ExecutorKind::Seatbelt => "seatbelt",
            ExecutorKind::Host => "host",
        }
    }

    /// True for every backend that isolates the command (all but `host`).
    pub fn is_sandbox(self) -> bool {
        self != ExecutorKind::Host
    }
}

impl fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether one executor can run here, and why (not).
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Which executor.
    pub kind: ExecutorKind,
    /// Usable on this machine.
    pub available: bool,
    /// What was found, or why it is not usable.
    pub detail: String,
}

/// Probe every executor.
pub fn probe_executors() -> Vec<Probe> {
    ExecutorKind::ALL.iter().map(|k| probe_one(*k)).collect()
}

fn probe_one(kind: ExecutorKind) -> Probe {
    let (available, detail) = match kind {
        ExecutorKind::Landlock => match native::availability() {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        },
        ExecutorKind::Bubblewrap => match bubblewrap::availability() {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        },
        ExecutorKind::Seatbelt => {
            if cfg!(target_os = "macos") && std::path::Path::new("/usr/bin/sandbox-exec").exists() {
                (true, "/usr/bin/sandbox-exec".to_string())
            } else {
                (
                    false,
                    "Seatbelt (sandbox-exec) exists only on macOS".to_string(),
                )
            }
        }
        ExecutorKind::Host => (true, super::host::NOTICE.to_string()),
    };
    Probe {
        kind,
        available,
        detail,
    }
}

/// The OS sandboxes that can run here, strongest first.
pub fn available_sandboxes() -> Vec<ExecutorKind> {
    probe_executors()
        .into_iter()
        .filter(|p| p.available && p.kind.is_sandbox())
        .map(|p| p.kind)
        .collect()
}

/// What to do on a machine where no OS sandbox can run. Installing bubblewrap is advised only
/// where it is not installed: where it is, the probe's own reason (shown beside this) says
/// what stops it.
pub fn no_sandbox_fix(bwrap_installed: bool) -> String {
    let namespaces = "allow unprivileged user namespaces (sysctl \
         kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)";
    let first = if bwrap_installed {
        format!(
            "{namespaces} so that bubblewrap (installed, but it cannot run here: see why above)"
        )
    } else {
        format!(
            "install bubblewrap 0.8 or later (apt-get install bubblewrap), or {namespaces} so \
             that bubblewrap"
        )
    };
    format!(
        "{first} or the native Landlock executor (Linux 6.14 or later) can run; `garuda doctor` \
         shows what is missing"
    )
}

/// [`no_sandbox_fix`] for this machine.
pub fn no_sandbox_fix_here() -> String {
    no_sandbox_fix(bubblewrap::bwrap_path().is_some())
}

/// The executor chosen for a setting, and the sentence that says why.
pub struct Selection {
    /// The executor.
    pub executor: Box<dyn Executor>,
    /// Why this one.
    pub reason: String,
}

impl fmt::Debug for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selection")
            .field("executor", &self.executor.kind())
            .field("reason", &self.reason)
            .finish()
    }
}

/// Build the executor of a kind (without probing).
pub fn executor_of(kind: ExecutorKind) -> Box<dyn Executor> {
    match kind {
        ExecutorKind::Bubblewrap => Box::new(BubblewrapExecutor),
        ExecutorKind::Landlock => Box::new(LandlockExecutor),
        ExecutorKind::Seatbelt => Box::new(SeatbeltExecutor),
        ExecutorKind::Host => Box::new(HostExecutor),
    }
}

/// Select the executor for a setting. A named sandbox that is unavailable is an error naming
/// the reason; `auto` falls back to `host` only when no sandbox exists, and says so.
pub fn select_executor(choice: ExecutorChoice) -> Result<Selection, ExecError> {
    let named = match choice {
        ExecutorChoice::Auto => None,
        ExecutorChoice::Bubblewrap => Some(ExecutorKind::Bubblewrap),
        ExecutorChoice::Landlock => Some(ExecutorKind::Landlock),
        ExecutorChoice::Seatbelt => Some(ExecutorKind::Seatbelt),
        ExecutorChoice::Host => Some(ExecutorKind::Host),
    };
    if let Some(kind) = named {
        let p = probe_one(kind);
        if !p.available {
            return Err(ExecError::Unavailable {
                executor: kind,
                reason: p.detail,
            });
        }
        return Ok(Selection {
            executor: executor_of(kind),
            reason: format!("{kind} (selected by the executor setting): {}", p.detail),
        });
    }
    let mut passed_over = Vec::new();
    for kind in ExecutorKind::ALL {
        let p = probe_one(kind);
        if p.available {
            let mut reason = format!("{} (auto: the strongest available): {}", p.kind, p.detail);
            if !passed_over.is_empty() {
                reason.push_str(&format!("; not available: {}", passed_over.join("; ")));
            }
            return Ok(Selection {
                executor: executor_of(p.kind),
                reason,
            });
        }
        passed_over.push(format!("{} ({})", p.kind, p.detail));
    }
    Err(ExecError::Unavailable {
        executor: ExecutorKind::Host,
        reason: "no executor is available".into(),
    })
}

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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// "install bubblewrap" only where it is missing: where it is installed and cannot run,
    /// the advice is about namespaces.
    #[test]
    fn the_fix_advises_installing_bubblewrap_only_where_it_is_missing() {
        let missing = no_sandbox_fix(false);
        assert!(
            missing.starts_with("install bubblewrap 0.8 or later (apt-get install bubblewrap), or allow unprivileged user namespaces"),
            "{missing}"
        );
        let installed = no_sandbox_fix(true);
        assert!(!installed.contains("install bubblewrap"), "{installed}");
        assert_eq!(
            installed,
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
             user.max_user_namespaces > 0) so that bubblewrap (installed, but it cannot run \
             here: see why above) or the native Landlock executor (Linux 6.14 or later) can \
             run; `garuda doctor` shows what is missing"
        );
    }

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
