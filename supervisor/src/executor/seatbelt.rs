//! The Seatbelt executor: macOS `sandbox-exec` with a profile generated from the [`ExecPolicy`].
//!
//! # Layers
//!
//! 1. [`profile`] turns the policy into an SBPL profile and a list of parameters. The text
//!    depends only on the *shape* of the policy (how many paths of each kind, the network mode);
//!    every path travels as a parameter: the text says `(subpath (param "WRITABLE_ROOT_0"))` and
//!    the value goes to `sandbox-exec` as its own `-D WRITABLE_ROOT_0=/path` argument. A path
//!    holding `"`, `)` or `;` therefore cannot close a string and add a rule: no path is ever
//!    spliced into the text. Parameter names are fixed ASCII, built from a list name and an index.
//! 2. [`argv`] builds the `sandbox-exec` command line as a vector (`-p`, the text, the `-D`
//!    pairs, `--`, the command), never as a shell string.
//! 3. [`SeatbeltExecutor`] runs that vector with a cleared environment (then exactly
//!    `policy.env`), the checked working directory and the requested stdio. `sandbox-exec`
//!    applies the profile to itself and then execs the command, so the command and all its
//!    descendants run under the profile; a profile can only be tightened from inside, never
//!    removed.
//!
//! The profile denies by default, then allows: running programs; signalling and inspecting the
//! command's own processes; `sysctl` reads (except other processes' arguments and environment);
//! two Mach services; reading files everywhere; writing under the writable roots and the
//! temp dir. Later rules win in SBPL, so the denials come last: writes to the read-only paths
//! (with the writable holes inside them allowed again, and read-only paths inside a hole denied
//! again) and to the directories above protected paths, reads and writes of the unreadable
//! paths and hidden directories, and all networking.
//!
//! # Known limits
//!
//! Seatbelt confines what a process may *do*, but gives it no namespaces of its own:
//!
//! - **No PID namespace.** Other processes stay visible: their pids, names and owners are listed
//!   through `sysctl kern.proc` and `proc_listpids`, which `(allow sysctl-read)` needs to leave
//!   open for ordinary tools. (`/bin/ps` itself is setuid and refuses to run in any sandbox, but
//!   any program can list processes the same way.) What is closed: their arguments and
//!   environment (`kern.procargs*`), their details (`process-info*`), and signals to them.
//! - **No private `/tmp`.** The writable temp dir is the per-user one: the `TMPDIR` that the
//!   policy's environment gives the command (`/var/folders/…/T`), written as its `/private`
//!   form because Seatbelt compares resolved paths. `/private/tmp`, shared by every user, stays
//!   read-only. Without a usable `TMPDIR` in `policy.env` no temp dir is writable.
//! - **No network namespace.** [`NetworkMode::Isolated`]: `(deny network*)` refuses every
//!   socket connection, unix sockets included, and with it DNS (so the command's own loopback
//!   servers are unreachable too). [`NetworkMode::Proxy`]: the same, plus outbound TCP to
//!   `localhost:<port>` only, where the supervisor itself listens on the host's loopback and
//!   forwards to the proxy ([`crate::netbridge::Bridge::on_host_loopback`]; the port must be
//!   free on the host). Any other program listening on the host's loopback at that port
//!   would be reachable instead, which is why the run fails when the supervisor cannot take
//!   the port. The port is a number Garuda formats, so it is written into the text; no path
//!   is.
//! - **Hidden directories are unreadable, not empty.** There are no mounts, so
//!   `policy.hidden_dirs` get the same rule as the unreadable paths: listing them fails with
//!   `EPERM` instead of showing an empty directory.
//! - **Path rules, not mounts.** Seatbelt checks the path used. Renaming a directory above a
//!   protected path would carry the path out from under its rule, so every such directory inside
//!   a writable root is itself write-protected (it cannot be renamed, removed or `chmod`ed;
//!   files can still be created inside it). A hard link that already exists inside a writable
//!   root still reaches the file it links to; the command cannot create new ones to protected
//!   files.
//! - **No process limit, no contained tree.** `limits.max_processes` is not enforced (macOS's
//!   `RLIMIT_NPROC` counts all of the user's processes, not the command's), and a child that
//!   leaves the process group can outlive the command. The contract suite lists both as this
//!   executor's exceptions.
//! - **Terminal.** In [`StdioMode::Inherit`] the command may write to terminal devices but has
//!   no `file-ioctl` on them, so it cannot push input into the user's terminal (`TIOCSTI`);
//!   programs may then not recognise their output as a terminal.
//! - **Tested live only where macOS exists.** The unit tests below run everywhere and check the
//!   profile text, the parameters and the argv; whether macOS enforces them is checked by the
//!   contract suite on a macOS machine. `sandbox-exec` is deprecated by Apple but still shipped.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use garuda_policy::{ExecPolicy, NetworkMode};

use super::{CommandSpec, ExecError, Executor, ExecutorKind, Outcome, StdioMode};

/// The only `sandbox-exec` we run: a fixed path, so the policy's `PATH` cannot substitute
/// another program for the sandbox itself.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Parameter list names. Each parameter is `<LIST>_<index>`; both parts are ours, so the
/// names never need quoting.
const WRITABLE_ROOT: &str = "WRITABLE_ROOT";
const TEMP_DIR: &str = "TEMP_DIR";
const READ_ONLY_PATH: &str = "READ_ONLY_PATH";
const WRITABLE_HOLE: &str = "WRITABLE_HOLE";
const PROTECTED_ANCESTOR: &str = "PROTECTED_ANCESTOR";
const UNREADABLE_PATH: &str = "UNREADABLE_PATH";
const HIDDEN_DIR: &str = "HIDDEN_DIR";

/// The fixed part of every profile, before the path rules. Each rule says why it is there.
const PREAMBLE: &str = r#"(version 1)
(deny default)

; Run programs; children inherit this profile and cannot leave it.
(allow process-exec)
(allow process-fork)
; Signal and inspect the command's own processes, nobody else's.
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(deny process-info* (target others))

; Host facts that runtimes read: CPU count, page size, OS version.
(allow sysctl-read)
; Not other processes' arguments and environment, where secrets live.
(deny sysctl-read (sysctl-name-prefix "kern.procargs"))
; CPU details for Node's os.cpus.
(allow mach-host*)
; Named semaphores for Python's multiprocessing locks.
(allow ipc-posix-sem)

; Mach services act outside the sandbox, so only two:
; libinfo answers getpwuid and getgrgid for git, ssh, id and Python's expanduser;
; notification_center serves libc's time-zone check when local times are formatted.
(allow mach-lookup
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.notification_center"))

; Files: read everywhere except the denials below.
(allow file-read*)
; Output to /dev/null, and to the terminal in inherit mode, without file-ioctl: no TIOCSTI.
(allow file-write-data
  (require-all (literal "/dev/null") (vnode-type CHARACTER-DEVICE))
  (require-all (regex #"^/dev/ttys[0-9]+$") (vnode-type CHARACTER-DEVICE)))
"#;

/// A generated profile: the SBPL text and the values of the parameters it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltProfile {
    /// The SBPL text. Holds no path taken from the policy.
    pub text: String,
    /// `(name, value)` for each `(param "name")` in the text, in order of first use; passed to
    /// `sandbox-exec` as `-D name=value`. Each distinct path appears exactly once.
    pub params: Vec<(String, PathBuf)>,
}

/// Build the Seatbelt profile that enforces `policy`.
///
/// Paths are used as they are: the policy builder makes them absolute and canonical, which is
/// what Seatbelt compares against (it resolves symbolic links before checking).
pub fn profile(policy: &ExecPolicy) -> SeatbeltProfile {
    // Destructured so that a new field of `ExecPolicy` fails to compile here until this
    // executor decides how to enforce it.
    let ExecPolicy {
        // The working directory only (see `preflight`); write access comes from
        // `writable_roots`, which lists the project root when the command may write it.
        project_root: _,
        writable_roots,
        read_only_paths,
        writable_holes,
        unreadable_paths,
        hidden_dirs,
        network,
        // Refused before a profile is built (`run`): Seatbelt cannot move a path.
        staged: _,
        // Only `TMPDIR` matters to the profile; the whole environment is set at spawn.
        env,
        // Timeout and output cap are applied by the runner; `max_processes` has no Seatbelt
        // equivalent (module docs, Known limits).
        limits: _,
    } = policy;

    let temp_dirs: Vec<PathBuf> = user_temp_dir(env).into_iter().collect();
    let write_roots: Vec<&Path> = writable_roots
        .iter()
        .chain(&temp_dirs)
        .map(PathBuf::as_path)
        .collect();
    let protected: Vec<&Path> = read_only_paths
        .iter()
        .chain(unreadable_paths)
        .chain(hidden_dirs)
        .map(PathBuf::as_path)
        .collect();
    let ancestors = protected_ancestors(&protected, &write_roots);

    let mut params = Params::default();
    let writable = params.filters("subpath", WRITABLE_ROOT, writable_roots);
    let temp = params.filters("subpath", TEMP_DIR, &temp_dirs);
    let read_only = params.filters("subpath", READ_ONLY_PATH, read_only_paths);
    // Holes reopen part of a read-only path only (never a path of their own), and a
    // read-only path inside a hole is denied again after it.
    let holes_in: Vec<PathBuf> = writable_holes
        .iter()
        .filter(|h| read_only_paths.iter().any(|r| h.starts_with(r) && h != &r))
        .cloned()
        .collect();
    let hole = params.filters("subpath", WRITABLE_HOLE, &holes_in);
    let read_only_in_holes: Vec<PathBuf> = read_only_paths
        .iter()
        .filter(|r| holes_in.iter().any(|h| r.starts_with(h)))
        .cloned()
        .collect();
    let read_only_again = params.filters("subpath", READ_ONLY_PATH, &read_only_in_holes);
    let ancestor = params.filters("literal", PROTECTED_ANCESTOR, &ancestors);
    let unreadable = params.filters("subpath", UNREADABLE_PATH, unreadable_paths);
    let hidden = params.filters("subpath", HIDDEN_DIR, hidden_dirs);

    let mut text = String::from(PREAMBLE);
    push_rule(
        &mut text,
        "Write only under the writable roots and the per-user temp dir.",
        "allow file-write*",
        &[writable, temp].concat(),
    );
    push_rule(
        &mut text,
        "Protected paths inside the writable roots stay read-only.",
        "deny file-write*",
        &read_only,
    );
    push_rule(
        &mut text,
        "Inside them, the parts a command may write (a git directory's objects, refs, logs).",
        "allow file-write*",
        &hole,
    );
    push_rule(
        &mut text,
        "Protected paths inside those parts stay read-only.",
        "deny file-write*",
        &read_only_again,
    );
    push_rule(
        &mut text,
        "Directories above a protected path: renaming one would move the path out of its rule.",
        "deny file-write*",
        &ancestor,
    );
    push_rule(
        &mut text,
        "Secrets and hidden directories: neither read nor written.",
        "deny file-read* file-write*",
        &[unreadable, hidden].concat(),
    );
    text.push('\n');
    text.push_str(&network_rules(network));

    SeatbeltProfile {
        text,
        params: params.entries,
    }
}

/// The network rules for `mode`, placed last so that no earlier allow can reopen anything.
fn network_rules(mode: &NetworkMode) -> String {
    // No unix-socket or loopback exception: a host daemon's socket is a way out.
    let none = "; Network: none, unix sockets and DNS included.\n(deny network*)\n";
    match mode {
        NetworkMode::Isolated => none.to_string(),
        NetworkMode::Proxy { port, .. } => format!(
            "{none}; Except the proxy bridge on the loopback (HTTP_PROXY and the others).\n\
             (allow network-outbound (remote tcp \"localhost:{port}\"))\n"
        ),
    }
}

/// The `sandbox-exec` command line that runs `cmd` under `policy`:
/// `[SANDBOX_EXEC, "-p", text, "-D", "NAME=value", …, "--", cmd.argv…]`.
pub fn argv(policy: &ExecPolicy, cmd: &CommandSpec) -> Vec<OsString> {
    let SeatbeltProfile { text, params } = profile(policy);
    let mut out = Vec::with_capacity(4 + 2 * params.len() + cmd.argv.len());
    out.push(OsString::from(SANDBOX_EXEC));
    out.push(OsString::from("-p"));
    out.push(OsString::from(text));
    for (name, value) in params {
        let mut definition = OsString::from(name);
        definition.push("=");
        definition.push(value.as_os_str());
        out.push(OsString::from("-D"));
        out.push(definition);
    }
    // Ends sandbox-exec's options: a command starting with `-` is still the command.
    out.push(OsString::from("--"));
    out.extend(cmd.argv.iter().cloned());
    out
}

/// Runs commands under macOS Seatbelt through `sandbox-exec`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeatbeltExecutor;

impl Executor for SeatbeltExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Seatbelt
    }

    fn run_released(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
        release: super::Release<'_>,
    ) -> Result<Outcome, ExecError> {
        // Nothing to overlap: the release first.
        release().map_err(|reason| ExecError::NotReleased { reason })?;
        if policy.staged.is_some() {
            return Err(unavailable(
                "staged commands are not supported by the seatbelt executor yet".into(),
            ));
        }
        #[cfg(target_os = "macos")]
        {
            macos::run(cmd, policy, stdio)
        }
        #[cfg(not(target_os = "macos"))]
        {
            let _ = (cmd, policy, stdio);
            Err(unavailable(
                "Seatbelt (sandbox-exec) exists only on macOS".into(),
            ))
        }
    }
}

fn unavailable(reason: String) -> ExecError {
    ExecError::Unavailable {
        executor: ExecutorKind::Seatbelt,
        reason,
    }
}

/// Parameters in order of first use; a path already named keeps its first name.
#[derive(Default)]
struct Params {
    entries: Vec<(String, PathBuf)>,
}

impl Params {
    /// Name each path of one list and return one `(<filter> (param "<NAME>"))` per path.
    fn filters(&mut self, filter: &str, list: &'static str, paths: &[PathBuf]) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(paths.len());
        for path in paths {
            let name = self.name_for(list, path);
            let expr = format!("({filter} (param \"{name}\"))");
            if !out.contains(&expr) {
                out.push(expr);
            }
        }
        out
    }

    fn name_for(&mut self, list: &'static str, path: &Path) -> String {
        if let Some((name, _)) = self.entries.iter().find(|(_, known)| known == path) {
            return name.clone();
        }
        let prefix = format!("{list}_");
        let index = self
            .entries
            .iter()
            .filter(|(name, _)| {
                name.strip_prefix(&prefix)
                    .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_digit()))
            })
            .count();
        let name = format!("{prefix}{index}");
        self.entries.push((name.clone(), path.to_path_buf()));
        name
    }
}

/// Append `(<head> <filter>…)` with a comment line, or nothing when `filters` is empty: an SBPL
/// rule without a filter applies to every path, so `(deny file-write*)` would forbid all writes
/// and `(allow file-write*)` would allow them all.
fn push_rule(text: &mut String, comment: &str, head: &str, filters: &[String]) {
    if filters.is_empty() {
        return;
    }
    text.push_str("; ");
    text.push_str(comment);
    text.push_str("\n(");
    text.push_str(head);
    for filter in filters {
        text.push_str("\n  ");
        text.push_str(filter);
    }
    text.push_str(")\n");
}

/// Every directory above a protected path that lies inside a writable root (the root itself
/// included), nearest first, without duplicates.
///
/// Seatbelt rules follow paths, not files: `mv .git g; edit g/hooks/pre-commit; mv g .git`
/// would rewrite a read-only hook, and renaming a directory above an unreadable `.env` would
/// make it readable under its new name. Denying writes to these directories themselves (a
/// `literal`, not a `subpath`) stops the rename and still lets files be created inside them.
fn protected_ancestors(protected: &[&Path], write_roots: &[&Path]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in protected {
        for ancestor in path.ancestors().skip(1) {
            let writable = write_roots.iter().any(|root| ancestor.starts_with(root));
            if writable && !out.iter().any(|known| known == ancestor) {
                out.push(ancestor.to_path_buf());
            }
        }
    }
    out
}

/// The per-user temp dir the command is told about (`TMPDIR` in the policy's environment), in
/// the form Seatbelt compares against, or `None` when it is unset or not a plain absolute path.
///
/// `/tmp`, `/var` and `/etc` are symbolic links into `/private` on macOS, and Seatbelt checks
/// resolved paths, so `/var/folders/x/T/` becomes `/private/var/folders/x/T`. This is a fixed
/// fact of the macOS layout, not a link lookup on this machine. `..` is refused rather than
/// normalised (it could name a directory the policy never meant), and so is `/` itself, which
/// would make every path writable.
fn user_temp_dir(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    // The last definition wins, as it does when the environment is applied at spawn.
    let (_, value) = env.iter().rev().find(|(key, _)| key == "TMPDIR")?;
    let mut components = Path::new(value).components();
    if components.next() != Some(Component::RootDir) {
        return None;
    }
    let mut normal: Vec<&OsStr> = Vec::new();
    for component in components {
        match component {
            Component::Normal(part) => normal.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    let first = normal.first()?;
    let mut out = PathBuf::from("/");
    if ["tmp", "var", "etc"].iter().any(|link| first == link) {
        out.push("private");
    }
    out.extend(normal);
    Some(out)
}

/// Checks made before anything is spawned; returns the working directory.
#[cfg(any(target_os = "macos", test))]
fn preflight(cmd: &CommandSpec, policy: &ExecPolicy) -> Result<PathBuf, ExecError> {
    if cmd.argv.first().is_none_or(|program| program.is_empty()) {
        return Err(ExecError::InvalidCommand(
            "the command line is empty".into(),
        ));
    }
    // A relative path in an SBPL filter would not name what the policy means; a policy built
    // by hand (not by the builder) is refused rather than half enforced.
    let policy_paths = policy
        .writable_roots
        .iter()
        .chain(&policy.read_only_paths)
        .chain(&policy.writable_holes)
        .chain(&policy.unreadable_paths)
        .chain(&policy.hidden_dirs);
    for path in policy_paths {
        if !path.is_absolute() {
            return Err(ExecError::Setup {
                stage: "seatbelt profile".into(),
                error: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("policy path {} is not absolute", path.display()),
                ),
            });
        }
    }
    let root = &policy.project_root;
    let cwd = match &cmd.cwd {
        None => root.clone(),
        // An absolute cwd replaces the root in `join`; the check below applies to both.
        Some(dir) => root.join(dir),
    };
    // `starts_with` is lexical: `/project/../etc` starts with `/project`, so `..` is refused.
    let climbs = cwd.components().any(|c| c == Component::ParentDir);
    if climbs || !cwd.starts_with(root) {
        return Err(ExecError::CwdOutsideProject {
            cwd,
            root: root.clone(),
        });
    }
    Ok(cwd)
}

#[cfg(target_os = "macos")]
mod macos {
    //! Spawning `sandbox-exec`; compiled on macOS only.

    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use garuda_policy::ExecPolicy;

    use super::{argv, preflight, unavailable, SANDBOX_EXEC};
    use crate::executor::capture::{capture_child, map_status};
    use crate::executor::{Captured, CommandSpec, ExecError, ExitStatus, Outcome, StdioMode};

    /// How often an inherited-stdio command is polled while a timeout runs.
    const POLL: Duration = Duration::from_millis(20);

    pub(super) fn run(
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
    ) -> Result<Outcome, ExecError> {
        let cwd = preflight(cmd, policy)?;
        if !Path::new(SANDBOX_EXEC).is_file() {
            return Err(unavailable(format!(
                "{SANDBOX_EXEC} is missing on this Mac"
            )));
        }
        let args = argv(policy, cmd);
        let Some((_, sandbox_args)) = args.split_first() else {
            return Err(ExecError::InvalidCommand(
                "the sandbox command line is empty".into(),
            ));
        };
        let mut command = Command::new(SANDBOX_EXEC);
        command
            .args(sandbox_args)
            // Nothing of the supervisor's environment (API keys, tokens) reaches the command.
            .env_clear()
            .envs(policy.command_env())
            .current_dir(&cwd);
        match stdio {
            StdioMode::Inherit => {
                // Same process group as the supervisor, so the terminal's Ctrl-C and job
                // control reach the command and it can read the terminal.
                command
                    .stdin(Stdio::inherit())
                    .stdout(Stdio::inherit())
                    .stderr(Stdio::inherit());
            }
            StdioMode::Capture => {
                // A group of its own: no terminal signals, and the whole group can be killed.
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0);
            }
        }

        // Proxy mode: the supervisor listens on the host's loopback port the profile allows;
        // stopped when it drops, on every way out of this function.
        let _bridge = crate::netbridge::checked_proxy(&policy.network)?
            .map(|(socket, port)| crate::netbridge::Bridge::on_host_loopback(port, socket))
            .transpose()?;
        let start = Instant::now();
        let child = command.spawn().map_err(|source| ExecError::Setup {
            stage: format!("spawn {SANDBOX_EXEC}"),
            error: source,
        })?;
        let (status, stdout, stderr) = match stdio {
            StdioMode::Capture => {
                capture_child(child, policy.limits.output_cap, policy.limits.timeout)?
            }
            StdioMode::Inherit => (
                wait_inherited(child, policy.limits.timeout)?,
                Captured::default(),
                Captured::default(),
            ),
        };
        Ok(Outcome {
            status,
            stdout,
            stderr,
            duration: start.elapsed(),
            lookups: crate::dnsstub::Lookups::default(),
            namespaces_made_ahead: false,
        })
    }

    /// Wait for a command whose stdio is the caller's, killing it when `timeout` passes.
    fn wait_inherited(
        mut child: Child,
        timeout: Option<Duration>,
    ) -> Result<ExitStatus, ExecError> {
        let waited = |source| ExecError::Io {
            what: "waiting for the sandboxed command",
            error: source,
        };
        let Some(timeout) = timeout else {
            return child.wait().map(map_status).map_err(waited);
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().map_err(waited)? {
                return Ok(map_status(status));
            }
            if Instant::now() >= deadline {
                // `kill` fails only when the child has already exited, which `wait` reports.
                if child.kill().is_err() {
                    return child.wait().map(map_status).map_err(waited);
                }
                child.wait().map_err(waited)?;
                return Ok(ExitStatus::TimedOut);
            }
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use garuda_policy::{ExecPolicy, Limits, NetworkMode};

    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    fn policy(
        writable: &[&str],
        read_only: &[&str],
        unreadable: &[&str],
        hidden: &[&str],
        tmpdir: Option<&str>,
    ) -> ExecPolicy {
        let mut env = vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
        if let Some(dir) = tmpdir {
            env.push((OsString::from("TMPDIR"), OsString::from(dir)));
        }
        ExecPolicy {
            project_root: writable
                .first()
                .map_or_else(|| PathBuf::from("/p"), PathBuf::from),
            writable_roots: paths(writable),
            read_only_paths: paths(read_only),
            writable_holes: Vec::new(),
            unreadable_paths: paths(unreadable),
            hidden_dirs: paths(hidden),
            network: NetworkMode::Isolated,
            staged: None,
            env,
            limits: Limits::default(),
        }
    }

    fn small_policy() -> ExecPolicy {
        policy(
            &["/work/proj", "/cache/cargo"],
            &["/work/proj/.git/hooks"],
            &["/home/u/.ssh", "/work/proj/.env"],
            &["/run/user/1000"],
            Some("/var/folders/ab/xyz/T/"),
        )
    }

    const GOLDEN: &str = r#"(version 1)
(deny default)

; Run programs; children inherit this profile and cannot leave it.
(allow process-exec)
(allow process-fork)
; Signal and inspect the command's own processes, nobody else's.
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(deny process-info* (target others))

; Host facts that runtimes read: CPU count, page size, OS version.
(allow sysctl-read)
; Not other processes' arguments and environment, where secrets live.
(deny sysctl-read (sysctl-name-prefix "kern.procargs"))
; CPU details for Node's os.cpus.
(allow mach-host*)
; Named semaphores for Python's multiprocessing locks.
(allow ipc-posix-sem)

; Mach services act outside the sandbox, so only two:
; libinfo answers getpwuid and getgrgid for git, ssh, id and Python's expanduser;
; notification_center serves libc's time-zone check when local times are formatted.
(allow mach-lookup
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.notification_center"))

; Files: read everywhere except the denials below.
(allow file-read*)
; Output to /dev/null, and to the terminal in inherit mode, without file-ioctl: no TIOCSTI.
(allow file-write-data
  (require-all (literal "/dev/null") (vnode-type CHARACTER-DEVICE))
  (require-all (regex #"^/dev/ttys[0-9]+$") (vnode-type CHARACTER-DEVICE)))
; Write only under the writable roots and the per-user temp dir.
(allow file-write*
  (subpath (param "WRITABLE_ROOT_0"))
  (subpath (param "WRITABLE_ROOT_1"))
  (subpath (param "TEMP_DIR_0")))
; Protected paths inside the writable roots stay read-only.
(deny file-write*
  (subpath (param "READ_ONLY_PATH_0")))
; Directories above a protected path: renaming one would move the path out of its rule.
(deny file-write*
  (literal (param "PROTECTED_ANCESTOR_0"))
  (literal (param "WRITABLE_ROOT_0")))
; Secrets and hidden directories: neither read nor written.
(deny file-read* file-write*
  (subpath (param "UNREADABLE_PATH_0"))
  (subpath (param "UNREADABLE_PATH_1"))
  (subpath (param "HIDDEN_DIR_0")))

; Network: none, unix sockets and DNS included.
(deny network*)
"#;

    #[test]
    fn golden_profile_of_a_small_policy() {
        let profile = profile(&small_policy());
        assert_eq!(profile.text, GOLDEN);
        let expected: Vec<(String, PathBuf)> = [
            ("WRITABLE_ROOT_0", "/work/proj"),
            ("WRITABLE_ROOT_1", "/cache/cargo"),
            ("TEMP_DIR_0", "/private/var/folders/ab/xyz/T"),
            ("READ_ONLY_PATH_0", "/work/proj/.git/hooks"),
            ("PROTECTED_ANCESTOR_0", "/work/proj/.git"),
            ("UNREADABLE_PATH_0", "/home/u/.ssh"),
            ("UNREADABLE_PATH_1", "/work/proj/.env"),
            ("HIDDEN_DIR_0", "/run/user/1000"),
        ]
        .iter()
        .map(|(name, path)| (name.to_string(), PathBuf::from(path)))
        .collect();
        assert_eq!(profile.params, expected);
    }

    /// Writable holes are allowed after the read-only paths they reopen, only when they lie
    /// inside one, and a read-only path inside a hole is denied again right after.
    #[test]
    fn holes_reopen_only_parts_of_read_only_paths() {
        let mut policy = small_policy();
        policy.read_only_paths = paths(&["/work/proj/.git", "/work/proj/.git/objects/keep"]);
        policy.writable_holes = paths(&["/work/proj/.git/objects", "/work/proj/src"]);
        let profile = profile(&policy);
        let at = |needle: &str| {
            profile
                .text
                .find(needle)
                .unwrap_or_else(|| panic!("{needle:?} not in\n{}", profile.text))
        };
        let read_only = at("(deny file-write*\n  (subpath (param \"READ_ONLY_PATH_0\"))\n  (subpath (param \"READ_ONLY_PATH_1\")))");
        let hole = at("(allow file-write*\n  (subpath (param \"WRITABLE_HOLE_0\")))");
        let again = at("(deny file-write*\n  (subpath (param \"READ_ONLY_PATH_1\")))");
        let ancestors = at("; Directories above a protected path");
        assert!(read_only < hole && hole < again && again < ancestors);
        assert!(profile.params.contains(&(
            "WRITABLE_HOLE_0".to_string(),
            PathBuf::from("/work/proj/.git/objects")
        )));
        assert!(!profile
            .params
            .iter()
            .any(|(_, p)| p == Path::new("/work/proj/src")));
        assert_no_dangling_rule(&profile.text);
    }

    /// Proxy mode: the same profile, plus outbound TCP to the bridge's loopback port only. The
    /// socket path appears neither in the text nor in the parameters (the supervisor connects
    /// to it, the command never does).
    #[test]
    fn proxy_mode_allows_only_the_bridge_port() {
        let mut policy = small_policy();
        policy.network = NetworkMode::Proxy {
            socket: "/Users/u/.garuda/proxy/\")(allow network*).sock".into(),
            port: 3128,
        };
        let profile = profile(&policy);
        let want = GOLDEN.replace(
            "(deny network*)\n",
            "(deny network*)\n\
             ; Except the proxy bridge on the loopback (HTTP_PROXY and the others).\n\
             (allow network-outbound (remote tcp \"localhost:3128\"))\n",
        );
        assert_eq!(profile.text, want);
        assert!(profile.text.ends_with(
            "(deny network*)\n; Except the proxy bridge on the loopback (HTTP_PROXY and the others).\n(allow network-outbound (remote tcp \"localhost:3128\"))\n"
        ));
        assert_eq!(profile.params, super::profile(&small_policy()).params);
        assert!(!profile.text.contains(".garuda"));
        assert!(!profile.text.contains("(allow network*)"));
        assert_no_dangling_rule(&profile.text);
        // The environment tells the command the same port.
        let env = policy.command_env();
        assert!(env.contains(&(
            OsString::from("HTTPS_PROXY"),
            OsString::from("http://127.0.0.1:3128")
        )));
    }

    /// Paths that would break out of an SBPL string or add a rule if they were spliced.
    const HOSTILE: [&str; 5] = [
        "/w/pro\"ject (one)/with spaces",
        "/w/x\")) (allow default) ; \"",
        "/w/paren(s)/and\\back\\slash",
        "/w/x\"ro\" (deny)",
        "/h/\"quoted\" secret;(allow network*)",
    ];

    fn hostile_policy() -> ExecPolicy {
        policy(
            &[HOSTILE[0], HOSTILE[1], HOSTILE[2]],
            &["/w/pro\"ject (one)/with spaces/.git/con\"fig"],
            &[HOSTILE[4], "/w/paren(s)/and\\back\\slash/.env \"x\""],
            &[HOSTILE[3]],
            Some("/var/folders/\"tmp\" (x)/T"),
        )
    }

    #[test]
    fn no_policy_path_appears_in_the_text() {
        let policy = hostile_policy();
        let profile = profile(&policy);
        let all = policy
            .writable_roots
            .iter()
            .chain(&policy.read_only_paths)
            .chain(&policy.unreadable_paths)
            .chain(&policy.hidden_dirs)
            .chain(profile.params.iter().map(|(_, value)| value));
        for path in all {
            let path = path.to_str().expect("test paths are UTF-8");
            assert!(
                !profile.text.contains(path),
                "{path:?} spliced into the text"
            );
        }
        for fragment in [
            "pro\"ject",
            "(one)",
            "(allow default)",
            "con\"fig",
            "quoted",
            "\"tmp\"",
            "back\\",
        ] {
            assert!(!profile.text.contains(fragment), "{fragment:?} in the text");
        }
        // Only our own rules: the one `(allow network*)`-looking text was in a path.
        assert!(!profile.text.contains("(allow default)"));
        assert!(!profile.text.contains("(allow network"));
    }

    #[test]
    fn text_depends_only_on_the_shape_of_the_policy() {
        let plain = policy(
            &["/a", "/b", "/c"],
            &["/a/d/e"],
            &["/f", "/c/g"],
            &["/h"],
            Some("/var/i/T"),
        );
        assert_eq!(profile(&plain).text, profile(&hostile_policy()).text);
    }

    #[test]
    fn params_hold_each_path_once_under_its_list_name() {
        let policy = hostile_policy();
        let profile = profile(&policy);
        let lists = [
            ("WRITABLE_ROOT", &policy.writable_roots),
            ("READ_ONLY_PATH", &policy.read_only_paths),
            ("UNREADABLE_PATH", &policy.unreadable_paths),
            ("HIDDEN_DIR", &policy.hidden_dirs),
        ];
        for (list, paths) in lists {
            for (index, path) in paths.iter().enumerate() {
                let holders: Vec<&String> = profile
                    .params
                    .iter()
                    .filter(|(_, value)| value == path)
                    .map(|(name, _)| name)
                    .collect();
                assert_eq!(holders, [&format!("{list}_{index}")], "{path:?}");
                assert!(profile
                    .text
                    .contains(&format!("(param \"{list}_{index}\")")));
            }
        }
        let mut names: Vec<&str> = profile.params.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), profile.params.len(), "a name used twice");
        for (name, _) in &profile.params {
            assert!(name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
            assert!(
                profile.text.contains(&format!("(param \"{name}\")")),
                "{name} unused"
            );
        }
        let temp = profile.params.iter().find(|(name, _)| name == "TEMP_DIR_0");
        assert_eq!(
            temp.map(|(_, value)| value.as_path()),
            Some(Path::new("/private/var/folders/\"tmp\" (x)/T"))
        );
    }

    #[test]
    fn argv_is_profile_then_params_then_command() {
        let policy = small_policy();
        let cmd = CommandSpec::new(["-rf", "--", "a b"]);
        let args = argv(&policy, &cmd);
        let profile = profile(&policy);
        let mut expected: Vec<OsString> = vec![
            "/usr/bin/sandbox-exec".into(),
            "-p".into(),
            profile.text.clone().into(),
        ];
        for (name, value) in &profile.params {
            expected.push("-D".into());
            expected.push(format!("{name}={}", value.display()).into());
        }
        expected.extend(["--", "-rf", "--", "a b"].map(OsString::from));
        assert_eq!(args, expected);
        assert_eq!(args[3], OsString::from("-D"));
        assert_eq!(args[4], OsString::from("WRITABLE_ROOT_0=/work/proj"));
        assert_eq!(args.len(), 3 + 2 * 8 + 1 + 3);
    }

    #[test]
    fn argv_keeps_a_hostile_path_in_one_argument() {
        let policy = hostile_policy();
        let args = argv(&policy, &CommandSpec::new(["true"]));
        let define = OsString::from(format!("WRITABLE_ROOT_1={}", HOSTILE[1]));
        let at = args
            .iter()
            .position(|arg| *arg == define)
            .expect("definition present");
        assert_eq!(args[at - 1], OsString::from("-D"));
    }

    /// Rules that may stand without a filter; any other head without one would apply to every
    /// path or operation.
    const UNFILTERED: [&str; 8] = [
        "(deny default)",
        "(allow process-exec)",
        "(allow process-fork)",
        "(allow sysctl-read)",
        "(allow mach-host*)",
        "(allow ipc-posix-sem)",
        "(allow file-read*)",
        "(deny network*)",
    ];

    fn assert_no_dangling_rule(text: &str) {
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            if !(line.starts_with("(allow") || line.starts_with("(deny")) {
                continue;
            }
            if UNFILTERED.contains(line) {
                continue;
            }
            let filtered_here = line.matches('(').count() > 1;
            let filtered_next = lines
                .get(at + 1)
                .is_some_and(|next| next.starts_with("  ("));
            assert!(
                filtered_here || filtered_next,
                "rule without filter: {line}"
            );
        }
        let code: String = text
            .lines()
            .map(|line| line.split(';').next().unwrap_or_default())
            .collect();
        assert_eq!(code.matches('(').count(), code.matches(')').count());
    }

    #[test]
    fn empty_lists_produce_no_rule() {
        let policy = policy(&["/work/proj"], &[], &[], &[], None);
        let profile = profile(&policy);
        assert_no_dangling_rule(&profile.text);
        assert!(
            !profile.text.contains("deny file-write*"),
            "{}",
            profile.text
        );
        assert!(!profile.text.contains("deny file-read*"));
        assert!(!profile.text.contains("READ_ONLY_PATH"));
        assert_eq!(
            profile.params,
            [("WRITABLE_ROOT_0".to_string(), PathBuf::from("/work/proj"))]
        );

        let nothing = profile_of_nothing();
        assert_no_dangling_rule(&nothing.text);
        assert!(
            !nothing.text.contains("(allow file-write*"),
            "{}",
            nothing.text
        );
        assert!(nothing.params.is_empty());

        assert_no_dangling_rule(GOLDEN);
        assert_no_dangling_rule(&super::profile(&hostile_policy()).text);
    }

    fn profile_of_nothing() -> SeatbeltProfile {
        profile(&policy(&[], &[], &[], &[], None))
    }

    #[test]
    fn ancestors_of_protected_paths_are_write_protected_inside_writable_roots_only() {
        let roots = [Path::new("/p"), Path::new("/tmpdir")];
        let got = protected_ancestors(
            &[
                Path::new("/p/.git/hooks"),
                Path::new("/p/.git/config"),
                Path::new("/p/sub/.env"),
                Path::new("/home/u/.ssh"),
                Path::new("/p"),
            ],
            &roots,
        );
        assert_eq!(got, paths(&["/p/.git", "/p", "/p/sub"]));
    }

    #[test]
    fn temp_dir_comes_from_tmpdir_in_its_private_form() {
        let env = |value: &str| vec![(OsString::from("TMPDIR"), OsString::from(value))];
        let cases: [(&str, Option<&str>); 9] = [
            (
                "/var/folders/ab/cd/T/",
                Some("/private/var/folders/ab/cd/T"),
            ),
            ("/tmp", Some("/private/tmp")),
            ("/private/var/folders/x/T", Some("/private/var/folders/x/T")),
            ("/Users/u/tmp/./x", Some("/Users/u/tmp/x")),
            ("/variable/x", Some("/variable/x")),
            ("/", None),
            ("relative/T", None),
            ("/var/folders/../../Users/u", None),
            ("", None),
        ];
        for (value, expected) in cases {
            assert_eq!(
                user_temp_dir(&env(value)),
                expected.map(PathBuf::from),
                "{value:?}"
            );
        }
        assert_eq!(user_temp_dir(&[]), None);
        let twice = [
            (OsString::from("TMPDIR"), OsString::from("/a")),
            (OsString::from("TMPDIR"), OsString::from("/b")),
        ];
        assert_eq!(user_temp_dir(&twice), Some(PathBuf::from("/b")));
    }

    #[test]
    fn preflight_checks_command_and_working_directory() {
        let policy = small_policy();
        let ok = |cwd: Option<&str>| {
            let mut cmd = CommandSpec::new(["ls"]);
            cmd.cwd = cwd.map(PathBuf::from);
            preflight(&cmd, &policy)
        };
        assert_eq!(ok(None).expect("root"), PathBuf::from("/work/proj"));
        assert_eq!(
            ok(Some("src")).expect("relative"),
            PathBuf::from("/work/proj/src")
        );
        assert_eq!(
            ok(Some("/work/proj/a")).expect("inside"),
            PathBuf::from("/work/proj/a")
        );
        for outside in [
            "/etc",
            "..",
            "/work/proj/../x",
            "src/../../x",
            "/work/project",
        ] {
            assert!(
                matches!(ok(Some(outside)), Err(ExecError::CwdOutsideProject { .. })),
                "{outside}"
            );
        }
        let empty = CommandSpec::new(Vec::<OsString>::new());
        assert!(matches!(
            preflight(&empty, &policy),
            Err(ExecError::InvalidCommand(_))
        ));
        let blank = CommandSpec::new([""]);
        assert!(matches!(
            preflight(&blank, &policy),
            Err(ExecError::InvalidCommand(_))
        ));

        let mut relative = small_policy();
        relative.unreadable_paths.push(PathBuf::from(".ssh"));
        assert!(matches!(
            preflight(&CommandSpec::new(["ls"]), &relative),
            Err(ExecError::Setup { .. })
        ));
    }

    #[test]
    fn kind_is_seatbelt() {
        assert!(matches!(SeatbeltExecutor.kind(), ExecutorKind::Seatbelt));
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn run_is_unavailable_off_macos() {
        let result = SeatbeltExecutor.run(
            &CommandSpec::new(["true"]),
            &small_policy(),
            StdioMode::Capture,
        );
        match result {
            Err(ExecError::Unavailable { executor, reason }) => {
                assert!(matches!(executor, ExecutorKind::Seatbelt));
                assert_eq!(reason, "Seatbelt (sandbox-exec) exists only on macOS");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    /// The SBPL text's parentheses, outside strings (`"…"` with backslash escapes, and `#"…"`
    /// regex literals) and comments (`;` to the end of the line): `Err` at the first one that
    /// closes nothing, or when some stay open at the end.
    fn sbpl_balance(text: &str) -> Result<(), String> {
        let mut depth: i64 = 0;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                ';' => {
                    for c in chars.by_ref() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                '"' => loop {
                    match chars.next() {
                        Some('\\') => {
                            chars.next();
                        }
                        Some('"') => break,
                        Some(_) => {}
                        None => return Err("a string is not closed".into()),
                    }
                },
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth < 0 {
                        return Err("a `)` closes nothing".into());
                    }
                }
                _ => {}
            }
        }
        if depth == 0 {
            Ok(())
        } else {
            Err(format!("{depth} `(` left open"))
        }
    }

    /// A path component with the characters that would break SBPL if spliced (quotes,
    /// parentheses, `;`, `#`, backslashes, newlines, spaces, non-ASCII), and a marker (`qz`)
    /// that the fixed text never holds.
    fn hostile_component() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::string::string_regex("qz[a-z\"()#;|\\\\ \n\té\u{202e}]{0,8}")
            .expect("a valid regex")
    }

    fn hostile_paths(max: usize) -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(
            proptest::collection::vec(hostile_component(), 1..4)
                .prop_map(|parts| format!("/{}", parts.join("/"))),
            0..max,
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 256,
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// The profile generator under generated policies (issue 16): whatever the paths hold,
        /// the text is well formed (balanced outside strings and comments), holds no path of
        /// the policy (every path is a parameter: the marker `qz` every generated component
        /// starts with never reaches the text), names only parameters it passes, passes only
        /// parameters it names, and names them with fixed ASCII.
        #[test]
        fn generated_policies_give_well_formed_profiles_with_every_path_a_parameter(
            writable in hostile_paths(4),
            read_only in hostile_paths(4),
            unreadable in hostile_paths(4),
            hidden in hostile_paths(3),
            tmpdir in proptest::option::of(hostile_paths(2)),
            proxy in proptest::bool::ANY,
        ) {
            fn refs(v: &[String]) -> Vec<&str> {
                v.iter().map(String::as_str).collect()
            }
            let tmp = tmpdir.as_ref().and_then(|t| t.first().cloned());
            let mut policy = policy(
                &refs(&writable),
                &refs(&read_only),
                &refs(&unreadable),
                &refs(&hidden),
                tmp.as_deref(),
            );
            if proxy {
                policy.network = NetworkMode::Proxy {
                    socket: PathBuf::from("/qz\"proxy(socket)"),
                    port: 3128,
                };
            }
            let got = profile(&policy);
            proptest::prop_assert!(sbpl_balance(&got.text).is_ok(), "{:?}\n{}", sbpl_balance(&got.text), got.text);
            proptest::prop_assert!(!got.text.contains("qz"), "a path reached the text:\n{}", got.text);
            let named: std::collections::BTreeSet<&str> = got
                .text
                .split("(param \"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
                .collect();
            let passed: std::collections::BTreeSet<&str> =
                got.params.iter().map(|(name, _)| name.as_str()).collect();
            proptest::prop_assert_eq!(&named, &passed);
            for name in &passed {
                proptest::prop_assert!(
                    name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                    "parameter name {:?}",
                    name
                );
            }
            // Every path of the policy travels as a parameter's value.
            let values: std::collections::BTreeSet<&Path> =
                got.params.iter().map(|(_, v)| v.as_path()).collect();
            for path in writable.iter().chain(&read_only).chain(&unreadable).chain(&hidden) {
                proptest::prop_assert!(
                    values.contains(Path::new(path)),
                    "{:?} is not a parameter",
                    path
                );
            }
        }
    }

    #[test]
    fn the_balance_check_can_fail() {
        assert!(sbpl_balance("(allow (x \")\"))").is_ok());
        assert!(sbpl_balance("(allow (x)").is_err());
        assert!(sbpl_balance("(allow x))").is_err());
        assert!(sbpl_balance("(allow x) ; )").is_ok());
        assert!(sbpl_balance("(allow \"x)").is_err());
        assert!(sbpl_balance(GOLDEN).is_ok());
    }
}
