//! Executors: the one place where a command meets the operating system.
//!
//! Every backend implements [`Executor`] and receives the same [`ExecPolicy`]. The contract
//! suite in `tests/` runs every available backend through the same cases; the `host` backend
//! runs them too, as the negative control that shows each case can fail.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use garuda_policy::ExecPolicy;
use serde::Serialize;

pub mod ahead;
pub mod bubblewrap;
pub mod capture;
pub mod host;
pub mod landlock;
pub mod layout;
pub mod pidns;
pub mod probe_cache;
pub mod program;
pub mod seatbelt;
pub mod seccomp;
pub mod select;

pub use select::{probe_executors, select_executor, Probe, Selection};

/// The sandboxes' start-up program (the landlock executor's PID 1 reaper and the bubblewrap
/// executor's exec step), as the bytes the supervisor executes from a sealed memory file;
/// public so that tests can run it on its own.
pub use crate::sys::INIT_PROGRAM;

/// Whether the sandboxes' start-up program can be made here (both Linux executors need it):
/// built for this platform, and a sealed memory file that may be executed (a kernel with
/// `vm.memfd_noexec = 2` refuses one). Part of each executor's availability, so that `doctor`
/// and `auto` say so instead of every run failing its setup.
pub(crate) fn start_up_program() -> Result<(), String> {
    crate::sys::init_program().map(drop).map_err(|e| {
        format!(
            "cannot make the sandbox's start-up program: {e} (it is executed from a sealed memory file; vm.memfd_noexec = 2 forbids that)"
        )
    })
}

/// The outermost processes of sandboxes whose end was told early ("The end told early" in
/// docs/executors.md): their command has exited and everything left of the sandbox is being
/// killed, but they are still exiting (their exit waits for the teardown of the sandbox's
/// namespaces). Reaped by [`reap_finished`].
static FINISHING: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// Reap `pid` (a child of this process whose sandbox has ended) later, with [`reap_finished`].
/// Signals must no longer be forwarded to it.
pub(crate) fn reap_later(pid: libc::pid_t) {
    match FINISHING.lock() {
        Ok(mut pending) => pending.push(pid),
        // Never poisoned (nothing panics under it); if it were, reap now rather than never.
        Err(_) => {
            let _ = crate::sys::reap_child(pid);
        }
    }
}

/// Where a sandbox tells its end before its outermost process has exited ("The end told
/// early", docs/executors.md): a pipe only that process still holds, and how to read the exit
/// code from what it wrote there before it closed it.
pub(crate) struct ToldEnd<'a> {
    pub pipe: &'a std::os::fd::OwnedFd,
    pub exit_code: fn(&[u8]) -> Option<i32>,
}

/// Wait for the sandbox's outermost process `pid` as [`crate::sys::wait_pid_serving`] does
/// (killed at the timeout, forwarding stopped, reaped), or, with `told`, until its pipe hangs
/// up with the exit code in it: then the process is left to [`reap_finished`] and signals are
/// no longer forwarded to it. A hang-up without the exit code (the process died, or its setup
/// ended) goes back to waiting for the exit, within what is left of the timeout. Returns the
/// exit (`None`: timed out) and what was read from the pipe, if it was read.
pub(crate) fn wait_sandbox(
    pid: libc::pid_t,
    timeout: Option<std::time::Duration>,
    mut serving: Option<&mut dyn crate::sys::WhileWaiting>,
    told: Option<ToldEnd<'_>>,
) -> std::io::Result<(Option<crate::sys::RawExit>, Option<Vec<u8>>)> {
    use std::os::fd::AsRawFd;
    let deadline = timeout.map(|limit| std::time::Instant::now() + limit);
    let mut written = None;
    if let Some(told) = told {
        let end = crate::sys::wait_exited_or_finished(
            pid,
            timeout,
            // A reborrow for this wait (the trait object's lifetime shortened to it).
            serving
                .as_mut()
                .map(|s| &mut **s as &mut dyn crate::sys::WhileWaiting),
            Some(told.pipe.as_raw_fd()),
        )?;
        if end == crate::sys::WaitEnd::Finished {
            let bytes = crate::sys::read_to_end(told.pipe).unwrap_or_default();
            if let Some(code) = (told.exit_code)(&bytes) {
                crate::sys::forward_signals_to(0);
                reap_later(pid);
                return Ok((Some(crate::sys::RawExit::Code(code)), Some(bytes)));
            }
            written = Some(bytes);
        }
    }
    // Exited, timed out (then nothing is left of the timeout: killed at once), or hung up
    // without the end.
    let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
    Ok((crate::sys::wait_pid_serving(pid, left, serving)?, written))
}

impl From<crate::sys::RawExit> for ExitStatus {
    fn from(raw: crate::sys::RawExit) -> ExitStatus {
        match raw {
            crate::sys::RawExit::Code(c) => ExitStatus::Code(c),
            crate::sys::RawExit::Signal(s) => ExitStatus::Signal(s),
        }
    }
}

/// How long [`reap_finished`] waits for a sandbox process on its way out before it kills it.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Reap every sandbox process left by [`reap_later`]. Its command is over and it is only on
/// its way out, so it is waited for, at most [`FINISH_WAIT`], then killed: one stopped there
/// (`SIGSTOP` from another process of the user) must neither hang `garuda` nor keep what it
/// would have killed alive. Not killed at once: bubblewrap's spawned process reaps bwrap on
/// its way out, and killed it would leave bwrap to init. The pid is still this process's
/// unreaped child, so the signal cannot reach another process. Called before the process ends
/// (`cli::main`) and before each sandbox starts, so that nothing Garuda started outlives it,
/// not even as a zombie, and none piles up in a long session.
pub fn reap_finished() {
    let pending = FINISHING
        .lock()
        .map(|mut p| std::mem::take(&mut *p))
        .unwrap_or_default();
    for pid in pending {
        if !matches!(crate::sys::wait_exited(pid, Some(FINISH_WAIT)), Ok(true)) {
            let _ = crate::sys::kill(pid, libc::SIGKILL);
        }
        let _ = crate::sys::reap_child(pid);
    }
}

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

/// A command to run: the program and its arguments, and the working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// `argv[0]` (looked up in the policy's `PATH` when it has no slash) and its arguments.
    pub argv: Vec<OsString>,
    /// Working directory; must be inside the project root. `None` means the project root.
    pub cwd: Option<PathBuf>,
}

impl CommandSpec {
    /// A command with the project root as its working directory.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        CommandSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
        }
    }
}

/// Where the command's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioMode {
    /// stdin, stdout and stderr are the caller's own (`garuda sandbox` streams).
    Inherit,
    /// stdin is empty; stdout and stderr are captured, each capped at
    /// [`garuda_policy::Limits::output_cap`] with a truncation marker (what the agent gets).
    Capture,
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Killed by the executor because [`garuda_policy::Limits::timeout`] passed.
    TimedOut,
}

impl ExitStatus {
    /// The exit code a shell would report (128 + signal for a signal, 124 for a timeout).
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
            ExitStatus::TimedOut => 124,
        }
    }

    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

/// Captured bytes of one stream: at most the cap, and how many were dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The kept bytes (the head of the stream), followed by a truncation marker when
    /// `dropped > 0`.
    pub bytes: Vec<u8>,
    /// Bytes read but not kept.
    pub dropped: u64,
}

impl Captured {
    /// The kept bytes as text, lossily.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub status: ExitStatus,
    /// Captured stdout (empty in [`StdioMode::Inherit`]).
    pub stdout: Captured,
    /// Captured stderr (empty in [`StdioMode::Inherit`]).
    pub stderr: Captured,
    /// Wall-clock time from spawn to the end of the whole process tree.
    pub duration: Duration,
    /// With the network off, the names the command asked the resolver stub for
    /// ([`crate::dnsstub`]); empty for other runs and for executors without a network
    /// namespace.
    pub lookups: crate::dnsstub::Lookups,
    /// The landlock sandbox joined a user and network namespace made ahead
    /// ([`ahead`]) instead of making its own; `false` for every other executor.
    pub namespaces_made_ahead: bool,
}

/// Why an executor could not run a command. The command did not run (or ran no user code).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The backend is not usable on this machine.
    #[error("executor {executor} is not available: {reason}")]
    Unavailable {
        /// Which executor.
        executor: ExecutorKind,
        /// Why, in words a user can act on.
        reason: String,
    },
    /// The command line is empty or not representable.
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// The working directory is outside the project root.
    #[error("working directory {} is outside the project root {}", cwd.display(), root.display())]
    CwdOutsideProject {
        /// Requested working directory.
        cwd: PathBuf,
        /// Project root.
        root: PathBuf,
    },
    /// A setup step failed before the command's own program started.
    #[error("sandbox setup failed at {stage}: {error}")]
    Setup {
        /// The step that failed (for example `mount /tmp`, `landlock_restrict_self`).
        stage: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The proxy bridge of [`garuda_policy::NetworkMode::Proxy`] could not be set up
    /// (see [`crate::netbridge`]); the command did not run.
    #[error("proxy bridge: {0}")]
    Bridge(#[from] crate::netbridge::BridgeError),
    /// An executor chosen on the word of the probe cache ([`probe_cache`]) could not start:
    /// the cache may be stale or planted. It has been removed; the run fails rather than fall
    /// back to another executor.
    #[error("{source} ({executor} was chosen because the executor probe cache {} says it is available here; that cache is now removed, so the next run probes this machine again; `garuda doctor` shows what is available)", cache.display())]
    CachedProbe {
        /// The executor the cache named.
        executor: ExecutorKind,
        /// The cache file.
        cache: PathBuf,
        /// Its setup error.
        source: Box<ExecError>,
    },
    /// What had to happen before the command could start (the audit intent reaching the
    /// disk: [`Executor::run_released`]) failed; the sandbox was killed before its program
    /// started.
    #[error("the command was not started: {reason}")]
    NotReleased {
        /// Why (the release's own error).
        reason: String,
    },
    /// Reading the command's output or waiting for it failed.
    #[error("{what}: {error}")]
    Io {
        /// What Garuda was doing.
        what: &'static str,
        /// The OS error.
        error: std::io::Error,
    },
}

/// A way to run a command under an [`ExecPolicy`].
pub trait Executor: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> ExecutorKind;

    /// Run `cmd` under `policy` and wait for the whole process tree to end.
    ///
    /// Returns `Err` only when the command could not be started inside the sandbox; a command
    /// that starts and fails is an `Ok` outcome with its exit status.
    fn run(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
    ) -> Result<Outcome, ExecError> {
        self.run_released(cmd, policy, stdio, &mut || Ok(()))
    }

    /// [`Executor::run`], with `release` called before the command's program may start; its
    /// error stops the command, which then never runs ([`ExecError::NotReleased`]).
    ///
    /// What it is for: the audit intent must be on disk before the command can do anything,
    /// and neither the audit session's open nor the intent's `fdatasync` (0.3–0.5 ms) need
    /// hold up the sandbox's setup (`garuda sandbox` opens the session in its release). The Landlock
    /// executor calls `release` while its children build the sandbox, and the command waits on
    /// a pipe for the go-ahead (`sys::NativePlan::release`); the bubblewrap executor calls it
    /// while bwrap builds the sandbox, and its exec step waits (`sys::EXEC_RELEASED_ARGV1`).
    /// The others call it before they start anything.
    fn run_released(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
        release: Release<'_>,
    ) -> Result<Outcome, ExecError>;
}

/// What must be done before a command's program may start (see [`Executor::run_released`]):
/// `Err` with the reason stops the command.
pub type Release<'a> = &'a mut dyn FnMut() -> Result<(), String>;

/// Runs `release` and, when it succeeded, writes the go-ahead byte on `go` (the write end of
/// the release pipe, closed on return). `Err`: the release failed. `Ok(false)`: no one could
/// read the byte (the sandbox's setup had already ended; its own report says why). Unless it
/// returns `Ok(true)` the caller kills the sandbox, whose command cannot start without the
/// byte anyway.
pub(crate) fn send_release(release: Release<'_>, go: std::os::fd::OwnedFd) -> Result<bool, String> {
    release()?;
    let mut go = std::fs::File::from(go);
    Ok(std::io::Write::write_all(&mut go, b"!").is_ok())
}

#[cfg(test)]
mod tests {
    /// A sandbox process left to [`super::reap_finished`] that someone stopped on its way out
    /// is killed and reaped, not waited for forever. Control: it was stopped (state `T`).
    #[test]
    #[allow(clippy::zombie_processes)] // reaped by pid, through `reap_finished`: what is tested
    fn a_stopped_process_left_to_reap_is_killed_and_reaped() {
        let child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        crate::sys::kill(pid, libc::SIGSTOP).unwrap();
        let stopped = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('T'))
            })
        });
        assert!(stopped, "the control: sleep was stopped");
        super::reap_later(pid);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            super::reap_finished();
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reap_finished returned");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "reaped: no /proc entry left"
        );
    }
}
