//! The `bubblewrap` executor: the system's `bwrap` (0.8 or later) builds the namespaces and
//! the mounts; Garuda supplies the argument vector and the seccomp program.
//!
//! Layers: user, PID, network, IPC, UTS and cgroup namespaces; nested user namespaces disabled
//! (`--disable-userns`); a new session (`--new-session`: no controlling terminal, so no
//! `TIOCSTI`); `--die-with-parent`; all capabilities dropped; the filesystem view of
//! [`super::layout`]; the seccomp program of [`super::seccomp`] (`--add-seccomp-fd`). bwrap runs
//! its own PID 1 in the namespace, so every process of the command dies when the command ends.
//! bwrap cannot apply Landlock (a Landlock-restricted process may not mount), which is why
//! `auto` prefers the native executor.
//!
//! The argument vector is built as data ([`argv`]) and golden-tested; it is never a shell
//! string.
//!
//! The spawn hook makes the user and network namespaces itself (loopback up) and execs bwrap
//! inside them; the argument vector has no `--unshare-net`, so bwrap and the command stay in
//! that namespace. In it the hook hands the supervisor the proxy bridge's listener in proxy
//! mode ([`garuda_policy::NetworkMode::Proxy`], see [`crate::netbridge`]), or the resolver
//! stub's sockets with the network off ([`crate::dnsstub`]). bwrap cannot hand out a socket
//! of a namespace it makes itself.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use garuda_policy::{ExecPolicy, NetworkMode};

use super::capture::{join_reader, spawn_reader};
use super::layout::{layout, Op};
use super::{CommandSpec, ExecError, Executor, ExecutorKind, ExitStatus, Outcome, StdioMode};
use crate::netbridge;
use crate::sys;

/// Oldest bubblewrap with every option we use (`--disable-userns`, `--add-seccomp-fd`,
/// `--perms`, `--ro-bind-data`).
pub const MIN_VERSION: (u32, u32) = (0, 8);

/// Descriptors the argument vector refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fds {
    /// The seccomp program.
    pub seccomp: i32,
    /// One empty file per unreadable file (bwrap consumes each descriptor it reads).
    pub empty: Vec<i32>,
    /// One reserved descriptor per path of [`held_binds`], in its order: the spawn hook opens
    /// the path there (refusing a link in any component) and bwrap binds it
    /// (`--bind /proc/self/fd/N`, `--ro-bind /proc/self/fd/N`).
    pub binds: Vec<i32>,
    /// Where bwrap reports the command's start and, once it ran, its exit code as JSON lines
    /// (`--json-status-fd`, bubblewrap 0.3.2 and later): an exit with no `exit-code` line is
    /// bwrap's own setup failure, not the command's exit code. `None`: not asked for (the
    /// benchmarks' bare bwrap).
    pub status: Option<i32>,
    /// The exec step: the start-up program bwrap executes before the command. `None`: bwrap
    /// executes the command itself (the benchmarks' bare bwrap, which holds no handle the
    /// command could use).
    pub exec: Option<ExecStep>,
}

/// The bubblewrap sandbox's last step before the command ([`Fds::exec`]). A release exists
/// only with the step that waits for it: a command told to wait must never run without the
/// program that waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecStep {
    /// The start-up program (`sys::init_program`, a sealed memory file opened read-only):
    /// bwrap executes it through `/proc/self/fd/N` ([`sys::EXEC_CLOSED_ARGV1`]), which closes
    /// every descriptor above stdio, the held bind sources among them, before it executes the
    /// command.
    pub program: i32,
    /// The release pipe's read end: the step waits for one byte on it before the command
    /// ([`sys::EXEC_RELEASED_ARGV1`], `Executor::run_released`). `None`: it goes on at once.
    pub release: Option<i32>,
}

/// The bwrap arguments (without the program name) for `cmd` under `policy`.
///
/// `--unshare-net` is left out in both network modes: the spawn hook ([`sys::bwrap_pre_exec`],
/// which always makes the network namespace) has already put bwrap in a network namespace of
/// its own with only loopback, plus the bridge's listener or the resolver stub's sockets (see
/// the module documentation).
pub fn argv(policy: &ExecPolicy, cwd: &Path, cmd: &CommandSpec, fds: &Fds) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&[
        "--new-session".as_ref(),
        "--die-with-parent".as_ref(),
        "--unshare-user".as_ref(),
        "--unshare-pid".as_ref(),
    ]);
    push(&[
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--disable-userns".as_ref(),
        "--cap-drop".as_ref(),
        "ALL".as_ref(),
    ]);
    let mut empty = fds.empty.iter();
    let mut binds = fds.binds.iter();
    // Every bind source is the spawn hook's handle, never a path: a command running at the
    // same time could have swapped a folder of a writable root (a pinned `sub`, a hole
    // `sub/.git/objects`, a `sandbox.writable` entry inside a package cache, a `.git` to be
    // bound read-only) for a link to the main repository's hooks, the home or a secret since
    // the policy was built, and bwrap follows links in a source path. The hook opened each one
    // component at a time, refusing a link (as `MountStep::Hold` does for `landlock`), and the
    // kernel binds the handle's own folder. (`--bind-fd` would do the same, but bwrap has it
    // only since 0.10.) A missing handle names no file: bwrap fails.
    let mut source = || format!("/proc/self/fd/{}", binds.next().map_or(-1, |fd| *fd));
    for op in view(policy) {
        match op {
            Op::RootReadOnly => push(&["--ro-bind".as_ref(), "/".as_ref(), "/".as_ref()]),
            Op::Dev => push(&["--dev".as_ref(), "/dev".as_ref()]),
            Op::Proc => push(&["--proc".as_ref(), "/proc".as_ref()]),
            // The same mode as `landlock`'s private /tmp (bwrap's default is 0755).
            Op::Tmp => push(&[
                "--perms".as_ref(),
                "1777".as_ref(),
                "--tmpfs".as_ref(),
                "/tmp".as_ref(),
            ]),
            Op::Hide(p) => push(&[
                "--tmpfs".as_ref(),
                p.as_os_str(),
                "--remount-ro".as_ref(),
                p.as_os_str(),
            ]),
            Op::Writable(p) | Op::Pin(p) | Op::WritableHole(p) => {
                push(&["--bind".as_ref(), source().as_ref(), p.as_os_str()])
            }
            Op::ReadOnly(p) => push(&["--ro-bind".as_ref(), source().as_ref(), p.as_os_str()]),
            Op::UnreadableDir(p) => push(&[
                "--perms".as_ref(),
                "0000".as_ref(),
                "--tmpfs".as_ref(),
                p.as_os_str(),
                "--remount-ro".as_ref(),
                p.as_os_str(),
            ]),
            Op::UnreadableFile(p) => {
                if let Some(fd) = empty.next() {
                    let fd = fd.to_string();
                    push(&[
                        "--perms".as_ref(),
                        "0000".as_ref(),
                        "--ro-bind-data".as_ref(),
                        fd.as_ref(),
                        p.as_os_str(),
                    ]);
                }
            }
        }
    }
    let seccomp = fds.seccomp.to_string();
    push(&[
        "--chdir".as_ref(),
        cwd.as_os_str(),
        "--add-seccomp-fd".as_ref(),
        seccomp.as_ref(),
    ]);
    if let Some(fd) = fds.status {
        let fd = fd.to_string();
        push(&["--json-status-fd".as_ref(), fd.as_ref()]);
    }
    push(&["--".as_ref()]);
    if let Some(step) = fds.exec {
        a.push(format!("/proc/self/fd/{}", step.program).into());
        match step.release {
            None => a.push(
                std::ffi::OsStr::from_bytes(sys::EXEC_CLOSED_ARGV1.to_bytes()).to_os_string(),
            ),
            Some(release) => {
                a.push(
                    std::ffi::OsStr::from_bytes(sys::EXEC_RELEASED_ARGV1.to_bytes()).to_os_string(),
                );
                a.push(release.to_string().into());
            }
        }
    }
    a.extend(cmd.argv.iter().cloned());
    a
}

/// The filesystem view of `policy`, as [`argv`] and [`held_binds`] both read it.
fn view(policy: &ExecPolicy) -> Vec<Op> {
    let ops = layout(policy);
    // Unit tests only: the mount-layer mistake of `layout::fault` (bwrap has no second wall).
    #[cfg(test)]
    let ops = super::layout::fault::apply(ops);
    ops
}

/// The sources of every bind ([`Op::Writable`], [`Op::Pin`], [`Op::ReadOnly`],
/// [`Op::WritableHole`]), in the order [`argv`] uses [`Fds::binds`] for them.
pub fn held_binds(policy: &ExecPolicy) -> Vec<PathBuf> {
    view(policy)
        .into_iter()
        .filter_map(|op| match op {
            Op::Writable(p) | Op::Pin(p) | Op::ReadOnly(p) | Op::WritableHole(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// Reserves one descriptor per path of [`held_binds`] for [`Fds::binds`] (close-on-exec: the
/// spawn hook puts the path's handle in its place).
pub fn reserve_binds(policy: &ExecPolicy) -> std::io::Result<Vec<OwnedFd>> {
    held_binds(policy)
        .iter()
        .map(|_| sys::open_read(c"/dev/null"))
        .collect()
}

/// The paths of [`held_binds`] paired with the descriptors of `binds`, for the spawn hook.
fn holds(policy: &ExecPolicy, binds: &[i32]) -> Vec<(CString, i32)> {
    held_binds(policy)
        .into_iter()
        .zip(binds)
        // A canonical path has no NUL byte; if one had, the empty path makes the hook fail
        // (`EINVAL`), never a bind by name.
        .map(|(p, fd)| {
            (
                CString::new(p.into_os_string().into_vec()).unwrap_or_default(),
                *fd,
            )
        })
        .collect()
}

/// How many empty-file descriptors [`argv`] needs.
pub fn empty_files_needed(policy: &ExecPolicy) -> usize {
    view(policy)
        .iter()
        .filter(|op| matches!(op, Op::UnreadableFile(_)))
        .count()
}

/// Parse `bubblewrap X.Y.Z`.
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.trim().strip_prefix("bubblewrap ")?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// Locate bwrap: `GARUDA_BWRAP` is deliberately not supported (a variable must not be able to
/// substitute the sandbox); only the system locations are used.
pub fn bwrap_path() -> Option<PathBuf> {
    ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// `Ok(description)` when bubblewrap is usable here, else `Err(reason and fix)`.
pub fn availability() -> Result<String, String> {
    let Some(path) = bwrap_path() else {
        return Err("bwrap not found (install the bubblewrap package)".into());
    };
    super::start_up_program()?;
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let Some((major, minor, patch)) = parse_version(&text) else {
        return Err(format!(
            "cannot read the version of {}: {text:?}",
            path.display()
        ));
    };
    if (major, minor) < MIN_VERSION {
        return Err(format!(
            "{} is version {major}.{minor}.{patch}; 0.8 or later is needed",
            path.display()
        ));
    }
    // `--as-pid-1`: `/bin/true` is the namespace's PID 1 and bwrap reaps it itself. With
    // bwrap's own PID 1 in between, bwrap exits as soon as `/bin/true` has, and that PID 1,
    // still exiting, is left to init (or the nearest subreaper) to reap: a zombie of Garuda's
    // that Garuda never reaps (cli.rs `nothing_of_a_sandbox_is_left_when_garuda_exits` saw it).
    let probe = Command::new(&path)
        .args([
            "--unshare-user",
            "--unshare-net",
            "--unshare-pid",
            "--as-pid-1",
            "--ro-bind",
            "/",
            "/",
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !probe.status.success() {
        return Err(format!(
            "bwrap {major}.{minor}.{patch} cannot create namespaces here: {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    let limit = if super::pidns::pid_max_is_namespaced() {
        "process limit: pid_max of a PID namespace"
    } else if sys::current_uid() != 0 {
        "process limit: RLIMIT_NPROC"
    } else if pids_cgroup_base().is_some() {
        "process limit: pids cgroup"
    } else {
        return Err(
            "as root, bubblewrap needs a pids cgroup for its process limit (root is exempt from RLIMIT_NPROC) and this machine has none".into(),
        );
    };
    Ok(format!(
        "{} {major}.{minor}.{patch}; {limit}",
        path.display()
    ))
}

/// The process limit for the command's tree.
///
/// On Linux 6.14 and later (where `pid_max` is per PID namespace) the spawn hook makes a PID
/// namespace of its own with `pid_max` bounded, and bwrap runs as its PID 1: this binds root
/// too, costs one fork, and joins no cgroup (see [`sys::bwrap_pre_exec`]). On older kernels:
/// for a non-root user `RLIMIT_NPROC` works, but the kernel counts every process of the user,
/// inside and outside the sandbox; the limit is therefore the number of processes now running
/// on the machine plus the policy's allowance. Root is exempt from `RLIMIT_NPROC`, so for root
/// the `pids` cgroup controller is used when the machine has one.
enum ProcessLimit {
    PidNamespace(u32),
    Rlimit(u64),
    Cgroup(PathBuf),
    None,
}

/// Processes of bubblewrap's own in the limit's namespace: bwrap itself (PID 1 there) and the
/// init of the PID namespace bwrap makes inside it.
const BWRAP_OWN_PROCESSES: u32 = 2;

/// `pid_max` of the hook's PID namespace for a policy allowing `max` processes: as the
/// `landlock` executor's, never below the kernel's minimum, plus bwrap's own two.
fn namespace_pid_max(max: u32) -> u32 {
    max.max(super::pidns::MIN_PID_MAX)
        .saturating_add(BWRAP_OWN_PROCESSES)
}

fn running_processes() -> u64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().nth(3).map(str::to_owned))
        .and_then(|f| f.split('/').nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(4096)
}

fn process_limit(max: u32) -> ProcessLimit {
    if super::pidns::pid_max_is_namespaced() {
        return ProcessLimit::PidNamespace(namespace_pid_max(max));
    }
    if sys::current_uid() != 0 {
        return ProcessLimit::Rlimit(running_processes() + u64::from(max));
    }
    match make_pids_cgroup(max) {
        Some(dir) => ProcessLimit::Cgroup(dir),
        None => ProcessLimit::None,
    }
}

pub(crate) fn pids_cgroup_base() -> Option<&'static Path> {
    ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .map(Path::new)
        .find(|b| b.join("cgroup.procs").exists() && (b.ends_with("pids") || has_pids_v2(b)))
}

fn make_pids_cgroup(max: u32) -> Option<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = pids_cgroup_base()?;
    let parent = base.join("garuda");
    std::fs::create_dir_all(&parent).ok()?;
    if !base.ends_with("pids") {
        // cgroup v2: the controller must be enabled for children of the parent.
        std::fs::write(base.join("cgroup.subtree_control"), "+pids").ok()?;
        std::fs::write(parent.join("cgroup.subtree_control"), "+pids").ok();
    }
    let dir = parent.join(format!(
        "{}-{}",
        sys::current_pid(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).ok()?;
    if std::fs::write(dir.join("pids.max"), max.to_string()).is_err() {
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

/// Remove a per-command cgroup. bwrap's PID 1 is gone, so the kernel is killing whatever is
/// left; kill it ourselves too and retry until the cgroup is empty (bounded: ~1 s).
fn remove_cgroup(dir: &Path) {
    // The namespace's processes are being torn down by the kernel right now: start polling
    // fast (teardown takes well under a millisecond) and back off to 10 ms, ~1 s in all.
    let mut pause = std::time::Duration::from_micros(50);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        if std::fs::remove_dir(dir).is_ok() || std::time::Instant::now() > deadline {
            return;
        }
        if let Ok(pids) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in pids
                .lines()
                .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
            {
                let _ = sys::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(10));
    }
}

fn remove_limit(limit: &ProcessLimit) {
    if let ProcessLimit::Cgroup(dir) = limit {
        remove_cgroup(dir);
    }
}

fn has_pids_v2(base: &Path) -> bool {
    std::fs::read_to_string(base.join("cgroup.controllers"))
        .map(|c| c.split_whitespace().any(|w| w == "pids"))
        .unwrap_or(false)
}

/// A `bwrap` command for `cmd` under `policy` reading the descriptors in `fds` (kept open
/// across exec), with the policy's environment — no process limit, no output handling. The
/// executor adds those; the spawn benchmark uses this alone as its "bare bwrap" baseline.
pub fn bare_command(
    bwrap: &Path,
    policy: &ExecPolicy,
    cwd: &Path,
    cmd: &CommandSpec,
    fds: &Fds,
) -> Command {
    let mut command = Command::new(bwrap);
    command
        .args(argv(policy, cwd, cmd, fds))
        .env_clear()
        .envs(policy.command_env());
    let mut keep = fds.empty.clone();
    keep.push(fds.seccomp);
    let holds = holds(policy, &fds.binds);
    // The network namespace is the hook's (loopback only): without it bwrap would share the
    // host's network.
    let namespaces = sys::BwrapNamespaces {
        uid_map: sys::id_map(sys::current_uid()),
        gid_map: sys::id_map(sys::current_gid()),
        mount: None,
        bridge: None,
        dns: None,
        pid_max: None,
        ahead: None,
    };
    sys::bwrap_pre_exec(&mut command, keep, None, None, namespaces, holds);
    command
}

/// Runs commands under the system's bubblewrap.
#[derive(Debug, Default, Clone, Copy)]
pub struct BubblewrapExecutor;

impl Executor for BubblewrapExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Bubblewrap
    }

    fn run_released(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
        release: super::Release<'_>,
    ) -> Result<Outcome, ExecError> {
        // An earlier sandbox of this process whose end was told early is gone by now.
        super::reap_finished();
        if cmd.argv.is_empty() {
            return Err(ExecError::InvalidCommand("empty command".into()));
        }
        let bwrap = bwrap_path().ok_or_else(|| ExecError::Unavailable {
            executor: ExecutorKind::Bubblewrap,
            reason: "bwrap not found (install the bubblewrap package)".into(),
        })?;
        let proxy = netbridge::checked_proxy(&policy.network)?;
        let cwd = super::program::checked_cwd(cmd, policy)?;
        // bwrap reports a missing program as its own failure (exit 1); answer like a shell.
        let program = super::program::resolve_program(&cmd.argv[0], &policy.env);
        if !cmd.argv[0].as_bytes().contains(&b'/') && !program.is_absolute() {
            return Ok(super::program::not_found_outcome(
                &cmd.argv[0],
                stdio,
                Instant::now(),
            ));
        }
        let setup = |stage: &str| {
            let stage = stage.to_string();
            move |source| ExecError::Setup {
                stage,
                error: source,
            }
        };
        let program = super::seccomp::program().map_err(|e| ExecError::Setup {
            stage: "seccomp program".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        let seccomp_fd =
            sys::memfd_with(c"garuda-seccomp", &super::seccomp::program_bytes(&program))
                .map_err(setup("seccomp memfd"))?;
        let empties: Vec<OwnedFd> = (0..empty_files_needed(policy))
            .map(|_| sys::memfd_with(c"garuda-empty", b""))
            .collect::<Result<_, _>>()
            .map_err(setup("empty-file memfd"))?;
        let reserved = reserve_binds(policy).map_err(setup("reserve bind descriptors"))?;
        let (status_read, status_write) = sys::pipe().map_err(setup("status pipe"))?;
        // The exec step waits on this for the go-ahead that follows `release`: bwrap builds
        // the sandbox meanwhile.
        let (release_read, release_write) = sys::pipe().map_err(setup("release pipe"))?;
        // The exec step: the start-up program closes bwrap's descriptors, then executes.
        let init = sys::init_program().map_err(setup("the sandbox start-up program"))?;
        let fds = Fds {
            seccomp: seccomp_fd.as_raw_fd(),
            empty: empties.iter().map(|f| f.as_raw_fd()).collect(),
            binds: reserved.iter().map(|f| f.as_raw_fd()).collect(),
            status: Some(status_write.as_raw_fd()),
            exec: Some(ExecStep {
                program: init.as_raw_fd(),
                release: Some(release_read.as_raw_fd()),
            }),
        };
        let mut command = Command::new(&bwrap);
        command
            .args(argv(policy, &cwd, cmd, &fds))
            .env_clear()
            .envs(policy.command_env());
        let mount = match &policy.staged {
            None => None,
            Some(view) => Some(super::layout::staged_mount(view, &policy.project_root)?),
        };
        let handoff = proxy
            .map(|(socket, port)| netbridge::handoff(socket, port).map(|h| (h, port)))
            .transpose()?;
        let bridge_plan = handoff
            .as_ref()
            .map(|((_, theirs), port)| sys::BridgeHandoff {
                port: *port,
                channel: theirs.as_raw_fd(),
            });
        let limit = process_limit(policy.limits.max_processes);
        let (nproc, cgroup_procs, pid_max) = match &limit {
            ProcessLimit::PidNamespace(max) => (None, None, Some(max.to_string().into_bytes())),
            ProcessLimit::Rlimit(n) => (Some(*n), None, None),
            // Fail closed: a path the hook cannot write to would mean no limit at all.
            ProcessLimit::Cgroup(dir) => {
                match CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()) {
                    Ok(procs) => (None, Some(procs), None),
                    Err(e) => {
                        remove_limit(&limit);
                        return Err(ExecError::Setup {
                            stage: "process limit".into(),
                            error: std::io::Error::other(e),
                        });
                    }
                }
            }
            // Fail closed: without a process limit a fork bomb would reach the host.
            ProcessLimit::None => {
                return Err(ExecError::Unavailable {
                    executor: ExecutorKind::Bubblewrap,
                    reason: "as root, bubblewrap needs a pids cgroup for the process limit (root is exempt from RLIMIT_NPROC) and none could be made; use the landlock executor".into(),
                })
            }
        };
        // With the network off: the user and network namespaces made ahead, with loopback up
        // and the resolver stub's sockets bound (see `super::ahead`), if a helper made them;
        // the hook makes them otherwise, and then also the stub's sockets.
        let setup = super::ahead::setup(matches!(policy.network, NetworkMode::Isolated));
        let namespaces_made_ahead = setup.namespaces.is_some();
        let mut keep = fds.empty.clone();
        keep.push(fds.seccomp);
        keep.push(status_write.as_raw_fd());
        keep.push(init.as_raw_fd());
        keep.push(release_read.as_raw_fd());
        let namespaces = sys::BwrapNamespaces {
            uid_map: sys::id_map(sys::current_uid()),
            gid_map: sys::id_map(sys::current_gid()),
            mount,
            bridge: bridge_plan,
            dns: setup.handoff.as_ref().map(|(_, plan)| *plan),
            pid_max,
            ahead: setup.namespace_fds(),
        };
        let holds = holds(policy, &fds.binds);
        sys::bwrap_pre_exec(&mut command, keep, nproc, cgroup_procs, namespaces, holds);
        if stdio == StdioMode::Capture {
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        // Proxy mode: the hook hands over the listener and waits for the go-ahead before it
        // execs bwrap, and `spawn` returns only after that exec, so the listener is received
        // (and the forwarder started) on a thread of its own while `spawn` waits.
        let (receiving, theirs) = match handoff {
            None => (None, None),
            Some(((receiver, theirs), _)) => {
                let thread = std::thread::Builder::new()
                    .name("garuda-handoff".into())
                    .spawn(move || receiver.receive());
                match thread {
                    Ok(thread) => (Some(thread), Some(theirs)),
                    Err(e) => {
                        remove_limit(&limit);
                        return Err(netbridge::BridgeError::Start(e).into());
                    }
                }
            }
        };
        let start = Instant::now();
        let spawned = command.spawn();
        // The hook's copy is closed (or the hook never ran): the receiver sees the end.
        drop(theirs);
        // The hook (or the helper) handed the stub's sockets over before bwrap's exec, which
        // `spawn` waited for: they are in the channel (or the hook failed and closed it).
        drop(setup.handoff);
        drop(setup.namespaces);
        let mut stub = setup
            .stub
            .and_then(crate::dnsstub::Receiver::receive_answering);
        // The helper is done once its last socket is in.
        if let Some(helper) = setup.helper {
            helper.finish();
        }
        drop(seccomp_fd);
        drop(empties);
        drop(reserved);
        // bwrap has its copy: ours must go for the read below to see the end.
        drop(status_write);
        drop(release_read);
        // While bwrap builds the sandbox: what must precede the command (the audit intent's
        // sync). Without the byte the exec step exits 125 when our end closes, whatever else
        // happens; the sandbox is also killed.
        let sent = match &spawned {
            Ok(_) => super::send_release(release, release_write),
            // Nothing to release: the spawn's own error is the answer.
            Err(_) => Ok(false),
        };
        let received = receiving.map(|thread| {
            thread.join().unwrap_or_else(|_| {
                Err(netbridge::BridgeError::Start(std::io::Error::other(
                    "the handoff thread panicked",
                )))
            })
        });
        let (bridge, bridge_failure) = match received {
            None => (None, None),
            Some(Ok(bridge)) => (Some(bridge), None),
            Some(Err(e)) => (None, Some(e)),
        };
        let mut child = match (spawned, bridge_failure) {
            (Ok(mut child), Some(e)) => {
                // Not reached: without the go-ahead the hook fails and bwrap never runs.
                let _ = child.kill();
                let _ = child.wait();
                remove_limit(&limit);
                return Err(e.into());
            }
            (Err(spawn_error), failure) => {
                remove_limit(&limit);
                return Err(match failure {
                    // The hook ended before the handoff: its own error says why.
                    None | Some(netbridge::BridgeError::NoListener { .. }) => ExecError::Setup {
                        stage: "spawn bwrap".into(),
                        error: spawn_error,
                    },
                    Some(e) => e.into(),
                });
            }
            (Ok(child), None) => child,
        };
        if let Err(reason) = sent {
            let _ = child.kill();
            let _ = child.wait();
            remove_limit(&limit);
            return Err(ExecError::NotReleased { reason });
        }
        if sent != Ok(true) {
            // No one could read the byte: bwrap's setup already ended; its status says how.
            let _ = child.kill();
        }
        let cap = policy.limits.output_cap;
        let out = child.stdout.take().map(|s| spawn_reader(s, cap));
        let err = child.stderr.take().map(|s| spawn_reader(s, cap));
        // A signal to the supervisor kills bwrap, and with it (PID 1 of the sandbox) the rest.
        sys::forward_signals_to(child.id() as libc::pid_t);
        // `wait_sandbox` stops the forwarding before it reaps (the pid cannot be reused
        // meanwhile), or before it leaves the process, done, to `reap_finished`. It reaps by
        // pid: `child` is never waited for by `std`.
        let waited = super::wait_sandbox(
            child.id() as libc::pid_t,
            policy.limits.timeout,
            stub.as_mut().map(|s| s as &mut dyn sys::WhileWaiting),
            told_early(&limit, stdio, policy).then_some(super::ToldEnd {
                pipe: &status_read,
                exit_code: told_exit_code,
            }),
        )
        .map_err(|source| ExecError::Io {
            what: "waiting for the command",
            error: source,
        });
        // bwrap is gone, and with it (--die-with-parent, PID 1) the whole sandbox.
        drop(bridge);
        let lookups = stub
            .map(crate::dnsstub::Answering::finish)
            .unwrap_or_default();
        remove_limit(&limit);
        let (waited, written) = waited?;
        let status = waited.map_or(ExitStatus::TimedOut, ExitStatus::from);
        let stdout = join_reader(out)?;
        let stderr = join_reader(err)?;
        let reported =
            written.unwrap_or_else(|| sys::read_to_end(&status_read).unwrap_or_default());
        if let Some(error) = setup_failure(status, &reported, stdio, &stderr.text()) {
            return Err(ExecError::Setup {
                stage: "bwrap".into(),
                error,
            });
        }
        Ok(Outcome {
            status,
            stdout,
            stderr,
            duration: start.elapsed(),
            lookups,
            namespaces_made_ahead,
        })
    }
}

/// Whether this run takes the command's end from bwrap's status pipe instead of waiting for
/// bwrap's exit ("The end told early", docs/executors.md). bwrap's monitor writes the
/// command's exit code there and closes it the moment the command has exited, then exits;
/// as PID 1 of the PID namespace the spawn hook made, its exit makes the kernel kill whatever
/// is left of the sandbox, and the exit completes only once the sandbox's namespaces are torn
/// down (about 0.3 ms here), which the supervisor's audit close need not wait for. Only:
///
/// - with that PID namespace (`ProcessLimit::PidNamespace`): otherwise processes the command
///   left behind could outlive bwrap's exit code;
/// - with the terminal's stdio: captured output is only complete when every writer is gone,
///   which is after that teardown anyway;
/// - in a direct run: a staged run's view is read as soon as the run returns, and must not
///   change under it while the sandbox is being killed.
fn told_early(limit: &ProcessLimit, stdio: StdioMode, policy: &ExecPolicy) -> bool {
    matches!(limit, ProcessLimit::PidNamespace(_))
        && stdio == StdioMode::Inherit
        && policy.staged.is_none()
}

/// The command's exit code in what bwrap wrote to its status pipe (`{ "exit-code": N }`, one
/// JSON object per line), if it wrote one.
fn told_exit_code(reported: &[u8]) -> Option<i32> {
    serde_json::Deserializer::from_slice(reported)
        .into_iter::<serde_json::Value>()
        .map_while(Result::ok)
        .find_map(|object| object.get("exit-code")?.as_i64())
        .and_then(|code| i32::try_from(code).ok())
}

/// bwrap's own setup failure, told apart from the command's exit code: bwrap exited normally
/// but never reported the command's exit (`--json-status-fd` writes `exit-code` only once the
/// command ran). A signal or the timeout that ended bwrap during its setup stays what it is.
/// The error carries bwrap's last line on stderr when it was captured.
fn setup_failure(
    status: ExitStatus,
    reported: &[u8],
    stdio: StdioMode,
    stderr: &str,
) -> Option<std::io::Error> {
    let ExitStatus::Code(code) = status else {
        return None;
    };
    if String::from_utf8_lossy(reported).contains("\"exit-code\"") {
        return None;
    }
    let said = match stdio {
        StdioMode::Capture => stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map_or_else(String::new, |l| format!(": {}", l.trim())),
        StdioMode::Inherit => " (its message is above)".into(),
    };
    Some(std::io::Error::other(format!(
        "bwrap exited {code} before the command started{said}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use garuda_policy::{Limits, NetworkMode};

    #[test]
    fn an_exit_bwrap_did_not_report_is_its_own_setup_failure() {
        let capture = StdioMode::Capture;
        let failed = setup_failure(
            ExitStatus::Code(1),
            b"{ \"child-pid\": 12 }\n",
            capture,
            "bwrap: Can't find source path /x: No such file or directory\n",
        );
        assert_eq!(
            failed.map(|e| e.to_string()).as_deref(),
            Some("bwrap exited 1 before the command started: bwrap: Can't find source path /x: No such file or directory")
        );
        // The command ran and exited 1: its own code (the control).
        assert!(setup_failure(
            ExitStatus::Code(1),
            b"{ \"child-pid\": 12 }\n{ \"exit-code\": 1 }\n",
            capture,
            "bwrap: looks like bwrap\n",
        )
        .is_none());
        // Ended by a signal or the timeout during setup: not a setup failure.
        assert!(setup_failure(ExitStatus::Signal(9), b"", capture, "").is_none());
        assert!(setup_failure(ExitStatus::TimedOut, b"", capture, "").is_none());
        assert_eq!(
            setup_failure(ExitStatus::Code(1), b"", StdioMode::Inherit, "")
                .map(|e| e.to_string())
                .as_deref(),
            Some("bwrap exited 1 before the command started (its message is above)")
        );
    }

    #[test]
    fn version_parsing() {
        assert_eq!(parse_version("bubblewrap 0.8.0\n"), Some((0, 8, 0)));
        assert_eq!(parse_version("bubblewrap 0.11"), Some((0, 11, 0)));
        assert_eq!(parse_version("bwrap 1"), None);
    }

    /// The argument vector for a policy with one of everything, with the project root shown
    /// as `$ROOT`.
    fn golden_for(network: NetworkMode) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".env"), "K=v").unwrap();
        std::fs::create_dir_all(root.join(".git/objects")).unwrap();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        let policy = ExecPolicy {
            project_root: root.clone(),
            writable_roots: vec![root.clone()],
            read_only_paths: vec![root.join(".git"), root.join("sub/.git")],
            writable_holes: vec![root.join(".git/objects")],
            unreadable_paths: vec![root.join(".env")],
            hidden_dirs: vec![PathBuf::from("/run")],
            network,
            staged: None,
            env: vec![],
            limits: Limits::default(),
        };
        let cmd = CommandSpec::new(["sh", "-c", "echo hi; rm -rf /"]);
        let fds = Fds {
            seccomp: 7,
            empty: vec![9],
            binds: vec![11, 12, 13, 14, 15],
            status: Some(16),
            exec: Some(ExecStep {
                program: 17,
                release: Some(18),
            }),
        };
        // The spawn hook opens these, in this order, at descriptors 11 to 15.
        assert_eq!(
            held_binds(&policy),
            [
                root.clone(),
                root.join("sub"),
                root.join(".git"),
                root.join("sub/.git"),
                root.join(".git/objects"),
            ]
        );
        argv(&policy, &root, &cmd, &fds)
            .into_iter()
            .map(|s| {
                s.to_string_lossy()
                    .replace(&*root.to_string_lossy(), "$ROOT")
            })
            .collect()
    }

    /// Golden test: the exact argument vector for a policy with one of everything. No
    /// `--unshare-net`: the spawn hook makes the network namespace (loopback only, and the
    /// resolver stub's sockets), and bwrap inherits it.
    #[test]
    fn golden_argv() {
        #[rustfmt::skip]
        let want = [
            "--new-session", "--die-with-parent", "--unshare-user", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--disable-userns", "--cap-drop", "ALL",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp",
            "--tmpfs", "/run", "--remount-ro", "/run",
            "--bind", "/proc/self/fd/11", "$ROOT",
            "--bind", "/proc/self/fd/12", "$ROOT/sub",
            "--ro-bind", "/proc/self/fd/13", "$ROOT/.git",
            "--ro-bind", "/proc/self/fd/14", "$ROOT/sub/.git",
            "--bind", "/proc/self/fd/15", "$ROOT/.git/objects",
            "--perms", "0000", "--ro-bind-data", "9", "$ROOT/.env",
            "--chdir", "$ROOT",
            "--add-seccomp-fd", "7",
            "--json-status-fd", "16",
            "--",
            "/proc/self/fd/17", "garuda-exec-released", "18",
            "sh", "-c", "echo hi; rm -rf /",
        ];
        assert_eq!(golden_for(NetworkMode::Isolated), want);
    }

    /// Golden test, proxy mode: the same vector (the spawn hook made the network namespace,
    /// with the bridge's listener in it); neither the socket path nor the port appears
    /// (nothing is mounted for the bridge).
    #[test]
    fn golden_argv_proxy_mode() {
        #[rustfmt::skip]
        let want = [
            "--new-session", "--die-with-parent", "--unshare-user", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--disable-userns", "--cap-drop", "ALL",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp",
            "--tmpfs", "/run", "--remount-ro", "/run",
            "--bind", "/proc/self/fd/11", "$ROOT",
            "--bind", "/proc/self/fd/12", "$ROOT/sub",
            "--ro-bind", "/proc/self/fd/13", "$ROOT/.git",
            "--ro-bind", "/proc/self/fd/14", "$ROOT/sub/.git",
            "--bind", "/proc/self/fd/15", "$ROOT/.git/objects",
            "--perms", "0000", "--ro-bind-data", "9", "$ROOT/.env",
            "--chdir", "$ROOT",
            "--add-seccomp-fd", "7",
            "--json-status-fd", "16",
            "--",
            "/proc/self/fd/17", "garuda-exec-released", "18",
            "sh", "-c", "echo hi; rm -rf /",
        ];
        let got = golden_for(NetworkMode::Proxy {
            socket: "/home/u/.garuda/proxy/1.sock".into(),
            port: 3128,
        });
        assert_eq!(got, want);
    }
}
