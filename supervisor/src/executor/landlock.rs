//! The native `landlock` executor: namespaces, mounts, Landlock and seccomp, with no helper
//! program on disk (the sandbox's PID 1 executes the start-up program embedded in the
//! supervisor, `sys::INIT_PROGRAM`, to shed its copy of the supervisor: see
//! `sys::become_reaper`).
//!
//! The parent prepares a [`sys::NativePlan`] (every string, the mount steps, the Landlock
//! ruleset, the seccomp program) and forks once; see [`sys::spawn_native`] for the process
//! layout. Layers, outermost first:
//!
//! 1. user, mount, PID, network, IPC, UTS and cgroup namespaces; the user is mapped to itself;
//! 2. the filesystem view of [`super::layout`], built with `mount(2)` and one recursive
//!    `mount_setattr(2)` that makes the whole host tree read-only;
//! 3. a PID limit: the new PID namespace's `pid_max` (namespaced since Linux 6.14), which works
//!    for root too, unlike `RLIMIT_NPROC`;
//! 4. all capabilities dropped (bounding, ambient, effective, permitted) and locked securebits,
//!    `PR_SET_NO_NEW_PRIVS`;
//! 5. Landlock handling every filesystem right of the kernel's ABI (at least ABI 3, so
//!    truncation is mediated): read and execute everywhere, write only in the writable roots,
//!    the private `/tmp` and the private `/dev`; scoped signals and abstract unix sockets
//!    (ABI 6) — this is the second, independent wall behind the read-only mounts;
//! 6. the seccomp program of [`super::seccomp`], installed last before `execve`.
//!
//! Landlock's network rights are not handled: the command's network namespace has no route
//! anywhere, and handling them would forbid test servers on the sandbox's own loopback.
//!
//! In proxy mode ([`garuda_policy::NetworkMode::Proxy`]) outer also makes the proxy bridge's
//! listener on `127.0.0.1:port` right after loopback is up, hands it to the supervisor and
//! waits for the go-ahead before it goes on (see [`crate::netbridge`]); nothing else changes
//! in the sandbox. With the network off, outer makes the resolver stub's sockets there
//! instead and hands them over ([`crate::dnsstub`]), without waiting.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::time::Instant;

use garuda_policy::ExecPolicy;

use super::capture::{join_reader, spawn_reader};
use super::layout::{cpath, cstring, layout, staged_mount, Op, DEVICES};
use super::{CommandSpec, ExecError, Executor, ExecutorKind, ExitStatus, Outcome, StdioMode};
use crate::netbridge;
use crate::sys::{self, MountStep, NativePlan, Stage};

pub use super::pidns::{kernel_version, MIN_KERNEL, MIN_PID_MAX};

/// Oldest Landlock ABI the executor accepts: ABI 3 handles truncation, so every way of
/// changing a file's content is mediated.
pub const MIN_ABI: u32 = 3;

// Landlock filesystem rights (include/uapi/linux/landlock.h).
const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const REMOVE_DIR: u64 = 1 << 4;
const REMOVE_FILE: u64 = 1 << 5;
const MAKE_CHAR: u64 = 1 << 6;
const MAKE_DIR: u64 = 1 << 7;
const MAKE_REG: u64 = 1 << 8;
// 1 << 9 MAKE_SOCK, 1 << 10 MAKE_FIFO: granted with the other write rights.
const MAKE_BLOCK: u64 = 1 << 11;
// 1 << 12 MAKE_SYM: likewise.
const REFER: u64 = 1 << 13;
const TRUNCATE: u64 = 1 << 14;
const IOCTL_DEV: u64 = 1 << 15;

/// Every filesystem right the kernel's ABI knows.
pub fn handled_fs(abi: u32) -> u64 {
    let mut rights = (1 << 13) - 1; // ABI 1: EXECUTE..MAKE_SYM
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

/// Rights granted under writable roots and the private `/tmp`: everything but creating device
/// nodes (which needs a capability anyway).
fn write_rights(abi: u32) -> u64 {
    handled_fs(abi) & !(MAKE_CHAR | MAKE_BLOCK)
}

const READ_RIGHTS: u64 = EXECUTE | READ_FILE | READ_DIR;

/// Rights under the private `/dev`: read, write and use devices; make and remove regular files
/// (`/dev/shm`). The `/dev` tmpfs is the sandbox's own.
fn dev_rights(abi: u32) -> u64 {
    let mut r = READ_FILE | READ_DIR | WRITE_FILE | MAKE_REG | MAKE_DIR | REMOVE_FILE | REMOVE_DIR;
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= IOCTL_DEV;
    }
    r
}

/// `Ok(description)` when the executor can run here, else `Err(reason and fix)`.
pub fn availability() -> Result<String, String> {
    let abi = sys::landlock_abi().map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel has no Landlock (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK)".to_string()
        }
        Some(libc::EOPNOTSUPP) => {
            "Landlock is disabled at boot (add landlock to the lsm= kernel parameter)".to_string()
        }
        _ => format!("Landlock probe failed: {e}"),
    })?;
    if abi < MIN_ABI {
        return Err(too_old(abi));
    }
    kernel_supported()?;
    super::start_up_program()?;
    sys::probe(sys::ProbeKind::RecursiveReadOnly, None).map_err(|e| {
        format!("cannot create user and mount namespaces or make mounts read-only: {e} (unprivileged user namespaces may be disabled: sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)")
    })?;
    Ok(format!(
        "Landlock ABI {abi}, user namespaces, mount_setattr"
    ))
}

/// The running kernel's Landlock ABI version. Unit tests can lower it
/// ([`abi_fault::lower`]) to show that a kernel without a right the policy needs is refused.
fn kernel_abi() -> std::io::Result<u32> {
    let abi = sys::landlock_abi()?;
    #[cfg(test)]
    if let Some(lowered) = abi_fault::lowered() {
        return Ok(abi.min(lowered));
    }
    Ok(abi)
}

/// Why an ABI below [`MIN_ABI`] is refused, naming what it lacks.
fn too_old(abi: u32) -> String {
    let missing = if abi < 2 {
        "refer (ABI 2) and truncate (ABI 3)"
    } else {
        "truncate (ABI 3)"
    };
    format!(
        "Landlock ABI {abi} cannot enforce the policy: it does not handle {missing}, so a \
         read-only file could still be emptied; ABI {MIN_ABI} (Linux 6.2) or later is needed"
    )
}

/// Unit tests only: run the executor as if the kernel's Landlock ABI were lower.
#[cfg(test)]
pub(crate) mod abi_fault {
    use std::cell::Cell;

    thread_local! {
        static LOWERED: Cell<Option<u32>> = const { Cell::new(None) };
    }

    /// The ABI is lowered until this is dropped.
    pub(crate) struct Lowered;

    impl Drop for Lowered {
        fn drop(&mut self) {
            LOWERED.with(|l| l.set(None));
        }
    }

    pub(crate) fn lower(abi: u32) -> Lowered {
        LOWERED.with(|l| l.set(Some(abi)));
        Lowered
    }

    pub(super) fn lowered() -> Option<u32> {
        LOWERED.with(Cell::get)
    }
}

/// Unit tests only: leave the sandbox alive after a failed release, to show that its command
/// stops by itself when the release pipe ends without the byte.
#[cfg(test)]
pub(crate) mod release_fault {
    use std::cell::Cell;

    thread_local! {
        static KEEP: Cell<bool> = const { Cell::new(false) };
    }

    /// The sandbox is not killed on a failed release until this is dropped.
    pub(crate) struct Kept;

    impl Drop for Kept {
        fn drop(&mut self) {
            KEEP.with(|k| k.set(false));
        }
    }

    pub(crate) fn keep_sandbox() -> Kept {
        KEEP.with(|k| k.set(true));
        Kept
    }

    pub(super) fn kept() -> bool {
        KEEP.with(Cell::get)
    }
}

/// Whether a sandbox whose release failed is killed (always, but in the unit test above).
fn kill_unreleased() -> bool {
    #[cfg(test)]
    if release_fault::kept() {
        return false;
    }
    true
}

fn kernel_supported() -> Result<(), String> {
    match kernel_version() {
        Some(v) if v >= MIN_KERNEL => Ok(()),
        Some((major, minor)) => Err(format!(
            "Linux {major}.{minor} has no per-namespace pid_max (needed for the process limit): Linux {}.{} or later is needed",
            MIN_KERNEL.0, MIN_KERNEL.1
        )),
        None => Err("cannot read the kernel version".into()),
    }
}

/// Runs commands in the native sandbox.
#[derive(Debug, Default, Clone, Copy)]
pub struct LandlockExecutor;

fn setup_err(stage: impl Into<String>) -> impl FnOnce(std::io::Error) -> ExecError {
    let stage = stage.into();
    move |source| ExecError::Setup {
        stage,
        error: source,
    }
}

/// Mkdir steps for `target` and its missing ancestors below `/tmp` (the private tmpfs is
/// empty, so a writable root under `/tmp` needs its mount point made).
fn mkdirs_under_tmp(target: &Path, steps: &mut Vec<MountStep>) -> Result<(), ExecError> {
    if !target.starts_with("/tmp") || target == Path::new("/tmp") {
        return Ok(());
    }
    let mut chain: Vec<&Path> = target
        .ancestors()
        .take_while(|a| *a != Path::new("/tmp"))
        .collect();
    chain.reverse();
    for (i, dir) in chain.iter().enumerate() {
        let last = i + 1 == chain.len();
        if last && !target.is_dir() {
            steps.push(MountStep::CreateFile {
                path: cpath(dir)?,
                mode: 0o600,
            });
        } else {
            steps.push(MountStep::Mkdir {
                path: cpath(dir)?,
                mode: 0o755,
            });
        }
    }
    Ok(())
}

const RO_FLAGS: libc::c_ulong = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
const VOID_FILE: &str = "/tmp/.garuda-void";

fn build_mounts(
    policy: &ExecPolicy,
    first_slot: i32,
) -> Result<(Vec<MountStep>, Vec<String>), ExecError> {
    let ops = layout(policy);
    // Unit tests only: a mount-layer mistake that Landlock must still catch.
    #[cfg(test)]
    let ops = super::layout::fault::apply(ops);
    let needs_void = ops.iter().any(|op| matches!(op, Op::UnreadableFile(_)));
    // Every bind source is opened inside the new mount namespace before anything covers it
    // (a project under /tmp is covered by the private /tmp; the devices by the new /dev).
    let mut holds: Vec<MountStep> = Vec::new();
    let mut hold = |p: &Path| -> Result<CString, ExecError> {
        let fd = first_slot + holds.len() as i32;
        holds.push(MountStep::Hold {
            path: cpath(p)?,
            fd,
        });
        cstring(format!("/proc/self/fd/{fd}").as_bytes())
    };
    let mut devices = Vec::new();
    for d in DEVICES {
        devices.push((d, hold(&Path::new("/dev").join(d))?));
    }
    let mut sources = Vec::new();
    for op in &ops {
        if let Op::Writable(p) | Op::Pin(p) | Op::ReadOnly(p) | Op::WritableHole(p) = op {
            sources.push(hold(p)?);
        }
    }
    let mut sources = sources.into_iter();
    let mut steps = vec![MountStep::MakeRootPrivate];
    let mut names = vec!["make / private".to_string()];
    if let Some(view) = &policy.staged {
        steps.push(staged_mount(view, &policy.project_root)?);
        names.push(format!("staged view {view:?}"));
    }
    for h in holds {
        names.push(format!("{h:?}"));
        steps.push(h);
    }
    let mut next_source = || {
        sources
            .next()
            .ok_or_else(|| ExecError::InvalidCommand("mount plan out of step".into()))
    };
    for op in &ops {
        let before = steps.len();
        match op {
            Op::RootReadOnly => steps.push(MountStep::RecursiveReadOnly),
            Op::Dev => {
                steps.push(MountStep::Tmpfs {
                    target: c"/dev".into(),
                    flags: libc::MS_NOSUID | libc::MS_NOEXEC,
                    options: c"mode=0755,size=65536k".into(),
                });
                for (name, src) in &devices {
                    let target = cstring(format!("/dev/{name}").as_bytes())?;
                    steps.push(MountStep::CreateFile {
                        path: target.clone(),
                        mode: 0o666,
                    });
                    steps.push(MountStep::Bind {
                        source: src.clone(),
                        target,
                        remount_flags: libc::MS_NOSUID | libc::MS_NOEXEC,
                    });
                }
                steps.push(MountStep::Mkdir {
                    path: c"/dev/pts".into(),
                    mode: 0o755,
                });
                steps.push(MountStep::Devpts {
                    target: c"/dev/pts".into(),
                });
                steps.push(MountStep::Symlink {
                    target: c"pts/ptmx".into(),
                    link: c"/dev/ptmx".into(),
                });
                steps.push(MountStep::Mkdir {
                    path: c"/dev/shm".into(),
                    mode: 0o1777,
                });
                steps.push(MountStep::Tmpfs {
                    target: c"/dev/shm".into(),
                    flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    options: c"mode=1777".into(),
                });
                for (link, target) in [
                    (c"/dev/fd", c"/proc/self/fd"),
                    (c"/dev/stdin", c"/proc/self/fd/0"),
                    (c"/dev/stdout", c"/proc/self/fd/1"),
                    (c"/dev/stderr", c"/proc/self/fd/2"),
                ] {
                    steps.push(MountStep::Symlink {
                        target: target.into(),
                        link: link.into(),
                    });
                }
            }
            // /proc is mounted by the PID namespace's init (see sys::spawn_native).
            Op::Proc => {}
            Op::Tmp => {
                steps.push(MountStep::Tmpfs {
                    target: c"/tmp".into(),
                    flags: libc::MS_NOSUID | libc::MS_NODEV,
                    options: c"mode=1777".into(),
                });
                if needs_void {
                    steps.push(MountStep::CreateFile {
                        path: cstring(VOID_FILE.as_bytes())?,
                        mode: 0,
                    });
                }
            }
            Op::Hide(p) => steps.push(MountStep::Tmpfs {
                target: cpath(p)?,
                flags: RO_FLAGS | libc::MS_NOEXEC,
                options: c"mode=0755,size=4k".into(),
            }),
            Op::Writable(p) => {
                let source = next_source()?;
                mkdirs_under_tmp(p, &mut steps)?;
                steps.push(MountStep::Bind {
                    source,
                    target: cpath(p)?,
                    remount_flags: libc::MS_NOSUID | libc::MS_NODEV,
                });
            }
            // A hole's source was opened before the read-only bind above it, so it is the
            // writable folder itself; the bind's remount drops the read-only flag it inherits.
            Op::Pin(p) | Op::WritableHole(p) => {
                let source = next_source()?;
                steps.push(MountStep::Bind {
                    source,
                    target: cpath(p)?,
                    remount_flags: libc::MS_NOSUID | libc::MS_NODEV,
                });
            }
            Op::ReadOnly(p) => {
                let source = next_source()?;
                steps.push(MountStep::Bind {
                    source,
                    target: cpath(p)?,
                    remount_flags: RO_FLAGS,
                });
            }
            Op::UnreadableDir(p) => steps.push(MountStep::Tmpfs {
                target: cpath(p)?,
                flags: RO_FLAGS | libc::MS_NOEXEC,
                options: c"mode=000,size=4k".into(),
            }),
            Op::UnreadableFile(p) => steps.push(MountStep::Bind {
                source: cstring(VOID_FILE.as_bytes())?,
                target: cpath(p)?,
                remount_flags: RO_FLAGS | libc::MS_NOEXEC,
            }),
        }
        for _ in before..steps.len() {
            names.push(format!("{op:?}"));
        }
    }
    if needs_void {
        // The placeholder's only remaining names are the read-only mounts over the secrets.
        steps.push(MountStep::Unlink {
            path: cstring(VOID_FILE.as_bytes())?,
        });
        names.push("remove the placeholder file".into());
    }
    Ok((steps, names))
}

/// Filesystem rights as the `landlock` crate's flags; the bits are the kernel's.
pub(crate) fn access_fs(bits: u64) -> Result<landlock::BitFlags<landlock::AccessFs>, ExecError> {
    landlock::BitFlags::from_bits(bits).map_err(|_| ExecError::Setup {
        stage: "landlock rights".into(),
        error: std::io::Error::other(format!("{bits:#x} names a right the crate does not know")),
    })
}

/// A `landlock` crate error as the executor's setup error.
pub(crate) fn ruleset_err(stage: &str) -> impl FnOnce(landlock::RulesetError) -> ExecError + '_ {
    move |e| ExecError::Setup {
        stage: format!("landlock: {stage}"),
        error: std::io::Error::other(e.to_string()),
    }
}

/// The command's ruleset, built with the `landlock` crate in the supervisor. Every right it
/// handles and every rule is a hard requirement (`CompatLevel::HardRequirement`): a right
/// the kernel does not handle makes this fail, never a ruleset that enforces less than asked.
/// The sandbox's child only enforces the returned descriptor (and adds the rules of paths that
/// exist only inside it, see `late_rules`).
fn build_ruleset(policy: &ExecPolicy, abi: u32) -> Result<OwnedFd, ExecError> {
    use landlock::{
        CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(access_fs(handled_fs(abi))?)
        .map_err(ruleset_err("handled rights"))?;
    if abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(ruleset_err("scopes"))?;
    }
    let mut created = ruleset.create().map_err(ruleset_err("create"))?;
    let mut rules: Vec<(&Path, u64)> = vec![(Path::new("/"), READ_RIGHTS)];
    // The private /dev and /tmp get their rules inside the sandbox (see `late_rules`).
    for w in &policy.writable_roots {
        // A staged project is another inode (the overlay's root, or the copy): its rule is
        // added inside the sandbox, after the view is mounted (see `late_rules`).
        if policy.staged.is_some() && w == &policy.project_root {
            continue;
        }
        rules.push((w, write_rights(abi)));
    }
    // Unit tests only: the control of the fault above (Landlock grants the mistaken path too).
    #[cfg(test)]
    let mistaken = super::layout::fault::landlock_write();
    #[cfg(test)]
    if let Some(path) = &mistaken {
        rules.push((path, write_rights(abi)));
    }
    for (path, rights) in rules {
        let fd =
            sys::open_path(&cpath(path)?).map_err(setup_err(format!("open {}", path.display())))?;
        // A file anchor may carry only file rights.
        let rights = if fd_is_dir(path) {
            rights
        } else {
            rights & (EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access_fs(rights)?))
            .map_err(ruleset_err(&format!("rule for {}", path.display())))?;
    }
    Option::<OwnedFd>::from(created).ok_or_else(|| ExecError::Setup {
        stage: "landlock: create".into(),
        error: std::io::Error::other("the ruleset has no descriptor"),
    })
}

fn fd_is_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .map(|m| m.is_dir())
        .unwrap_or(false)
}

fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The exit code in outer's last report ([`Stage::Finished`]), if that is what it wrote last:
/// the end is the last record outer writes, one anywhere else is not it.
fn finished_code(written: &[u8]) -> Option<i32> {
    sys::decode_reports(written)
        .last()
        .filter(|r| r.stage == Stage::Finished as u32)
        .map(|r| r.value)
}

/// Whether this run learns the command's end from outer's last report instead of outer's exit
/// ([`sys::NativePlan::report_end`]; "The end told early", docs/executors.md). Only with the
/// terminal's stdio (captured output is complete only when every writer is gone, which is
/// after the teardown anyway) and in a direct run (a staged run's view is read as soon as the
/// run returns).
fn told_early(stdio: StdioMode, policy: &ExecPolicy) -> bool {
    stdio == StdioMode::Inherit && policy.staged.is_none()
}

pub(crate) fn stage_name(code: u32, mount_names: &[String]) -> String {
    const NAMES: [(Stage, &str); 33] = [
        (Stage::Finished, "the sandbox's end (not a failure)"),
        (
            Stage::Pid1Mount,
            "PID 1: a mount step after /proc (the agent's view)",
        ),
        (Stage::PassFd, "place the agent's channel at descriptor 3"),
        (
            Stage::Release,
            "wait for the supervisor's release (the audit intent on disk)",
        ),
        (
            Stage::LandlockRule,
            "landlock_add_rule for the private /tmp or /dev",
        ),
        (Stage::Loopback, "bring up loopback"),
        (
            Stage::JoinNamespaces,
            "join the user and network namespaces made ahead (setns)",
        ),
        (
            Stage::BridgeListen,
            "proxy bridge: listen on the sandbox's loopback",
        ),
        (
            Stage::BridgeHandoff,
            "proxy bridge: hand the listener to the supervisor",
        ),
        (Stage::ParentGone, "parent exited"),
        (Stage::Setsid, "setsid"),
        (Stage::Stdio, "stdio"),
        (Stage::Unshare, "unshare namespaces"),
        (Stage::IdMaps, "write uid/gid maps"),
        (Stage::ForkInit, "start PID 1 (mmap of its stacks, clone)"),
        (Stage::MountProc, "mount /proc"),
        (Stage::PidMax, "write pid_max"),
        (Stage::ForkCommand, "start the command's process (clone)"),
        (Stage::Chdir, "chdir"),
        (Stage::NoNewPrivs, "PR_SET_NO_NEW_PRIVS"),
        (Stage::DropCaps, "drop capabilities"),
        (Stage::Landlock, "landlock_restrict_self"),
        (Stage::Seccomp, "install seccomp filter"),
        (Stage::Exec, "execve"),
        (Stage::Signaled, "signaled"),
        (Stage::Signals, "reset signals"),
        (
            Stage::Pid1Sync,
            "PID 1: the pipe that holds the command back",
        ),
        (
            Stage::Pid1Stdio,
            "PID 1: stdio to /dev/null, descriptors close-on-exec",
        ),
        (Stage::Pid1NoNewPrivs, "PID 1: PR_SET_NO_NEW_PRIVS"),
        (Stage::Pid1DropCaps, "PID 1: drop capabilities"),
        (Stage::Pid1Seccomp, "PID 1: install seccomp filter"),
        (Stage::Pid1Exec, "PID 1: execute the reaper"),
        (
            Stage::CloseOnExec,
            "mark descriptors close-on-exec (close_range)",
        ),
    ];
    if code >= Stage::MountBase as u32 {
        let i = (code - Stage::MountBase as u32) as usize;
        return format!(
            "mount step {i} ({})",
            mount_names.get(i).map(String::as_str).unwrap_or("?")
        );
    }
    NAMES
        .iter()
        .find(|(s, _)| *s as u32 == code)
        .map(|(_, n)| (*n).to_string())
        .unwrap_or_else(|| format!("stage {code}"))
}

impl Executor for LandlockExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Landlock
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
        let Some(argv0) = cmd.argv.first() else {
            return Err(ExecError::InvalidCommand("empty command".into()));
        };
        let abi = kernel_abi().map_err(|e| ExecError::Unavailable {
            executor: ExecutorKind::Landlock,
            reason: format!("Landlock is not available: {e}"),
        })?;
        if abi < MIN_ABI {
            return Err(ExecError::Unavailable {
                executor: ExecutorKind::Landlock,
                reason: too_old(abi),
            });
        }
        kernel_supported().map_err(|reason| ExecError::Unavailable {
            executor: ExecutorKind::Landlock,
            reason,
        })?;
        let proxy = netbridge::checked_proxy(&policy.network)?;
        let cwd = super::program::checked_cwd(cmd, policy)?;
        let program = super::program::resolve_program(argv0, &policy.env);
        let argv_storage: Vec<CString> = cmd
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp_storage: Vec<CString> = policy
            .command_env()
            .iter()
            .map(|(k, v)| {
                let mut kv = k.clone().into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                cstring(&kv)
            })
            .collect::<Result<_, _>>()?;
        let ruleset = build_ruleset(policy, abi)?;
        let seccomp = super::seccomp::program().map_err(|e| ExecError::Setup {
            stage: "seccomp program".into(),
            error: std::io::Error::other(e.to_string()),
        })?;
        // PID 1 executes the start-up program to become the reaper (see `sys::become_reaper`).
        let reaper_exe = sys::init_program().map_err(setup_err("the sandbox start-up program"))?;
        let (report_read, report_write) = sys::pipe().map_err(setup_err("report pipe"))?;
        // The command waits on this for the go-ahead that follows `release` (see
        // `NativePlan::release`): the sandbox is built meanwhile.
        let (release_read, release_write) = sys::pipe().map_err(setup_err("release pipe"))?;
        let (stdin_fd, out_pipe, err_pipe) = match stdio {
            StdioMode::Inherit => (None, None, None),
            StdioMode::Capture => {
                let null = sys::open_read(c"/dev/null").map_err(setup_err("open /dev/null"))?;
                let out = sys::pipe().map_err(setup_err("stdout pipe"))?;
                let err = sys::pipe().map_err(setup_err("stderr pipe"))?;
                (Some(null), Some(out), Some(err))
            }
        };
        let raw =
            |fd: &Option<OwnedFd>, default: i32| fd.as_ref().map_or(default, |f| f.as_raw_fd());
        let stdio_fds = [
            raw(&stdin_fd, 0),
            out_pipe.as_ref().map_or(1, |(_, w)| w.as_raw_fd()),
            err_pipe.as_ref().map_or(2, |(_, w)| w.as_raw_fd()),
        ];
        let handoff = proxy
            .map(|(socket, port)| netbridge::handoff(socket, port))
            .transpose()?;
        let bridge_plan =
            handoff
                .as_ref()
                .zip(proxy)
                .map(|((_, theirs), (_, port))| sys::BridgeHandoff {
                    port,
                    channel: theirs.as_raw_fd(),
                });
        // The user and network namespaces, with loopback up and the stub's sockets bound, if a
        // helper made them ahead (see `super::ahead`; network off only); outer makes them
        // otherwise, and then with the network off also the stub's sockets (`dns_plan`).
        let setup = super::ahead::setup(proxy.is_none());
        let namespaces_made_ahead = setup.namespaces.is_some();
        let namespaces = setup.namespace_fds();
        let dns_plan = setup.handoff.as_ref().map(|(_, plan)| *plan);
        // Held handles go above every descriptor the child must keep.
        let first_slot = [
            report_write.as_raw_fd(),
            release_read.as_raw_fd(),
            release_write.as_raw_fd(),
            ruleset.as_raw_fd(),
            reaper_exe.as_raw_fd(),
        ]
        .into_iter()
        .chain(bridge_plan.map(|b| b.channel))
        .chain(dns_plan.map(|d| d.channel))
        .chain(namespaces.map(|(user, _)| user))
        .chain(namespaces.map(|(_, net)| net))
        .chain(stdio_fds)
        .max()
        .unwrap_or(2)
            + 1;
        let (mounts, mount_names) = build_mounts(policy, first_slot)?;
        let mut argv: Vec<*const libc::c_char> = argv_storage.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = envp_storage.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let plan = NativePlan {
            program: cpath(&program)?,
            argv,
            argv_storage,
            envp,
            envp_storage,
            cwd: cpath(&cwd)?,
            uid_map: sys::id_map(sys::current_uid()),
            gid_map: sys::id_map(sys::current_gid()),
            mounts,
            // The kernel refuses a pid_max below 301 (RESERVED_PIDS + 1).
            pid_max: policy
                .limits
                .max_processes
                .max(MIN_PID_MAX)
                .to_string()
                .into_bytes(),
            landlock_ruleset: ruleset.as_raw_fd(),
            late_rules: {
                let mut rules = vec![
                    (c"/dev".into(), dev_rights(abi)),
                    (c"/tmp".into(), write_rights(abi)),
                ];
                if policy.staged.is_some() {
                    rules.push((cpath(&policy.project_root)?, write_rights(abi)));
                }
                rules
            },
            seccomp,
            stdio: stdio_fds,
            cap_last_cap: cap_last_cap(),
            parent_pid: sys::current_pid(),
            report_fd: report_write.as_raw_fd(),
            bridge: bridge_plan,
            dns: dns_plan,
            reaper_exe: reaper_exe.as_raw_fd(),
            pid1_mounts: Vec::new(),
            pass_fd: None,
            release: Some((release_read.as_raw_fd(), release_write.as_raw_fd())),
            namespaces,
            affinity: rustix::thread::sched_getaffinity(None).ok(),
            report_end: told_early(stdio, policy),
        };
        let start = Instant::now();
        let pid = sys::spawn_native(&plan).map_err(setup_err("fork"))?;
        // The child has its copies; close ours so the readers see EOF when the sandbox ends.
        drop(report_write);
        drop(release_read);
        drop(stdin_fd);
        drop(ruleset);
        drop(setup.namespaces);
        drop(setup.handoff);
        // While the children build the sandbox: what must precede the command (the audit
        // intent's sync). On failure the sandbox is killed; its command never executes (it
        // also stops by itself when the pipe closes without the byte).
        let sent = super::send_release(release, release_write);
        if sent != Ok(true) && kill_unreleased() {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
        let release_failure = sent.err();
        let cap = policy.limits.output_cap;
        let out = out_pipe.map(|(r, w)| {
            drop(w);
            spawn_reader(std::fs::File::from(r), cap)
        });
        let err = err_pipe.map(|(r, w)| {
            drop(w);
            spawn_reader(std::fs::File::from(r), cap)
        });
        // Proxy mode: outer hands over the listener, then waits for the go-ahead, which
        // `receive` sends once the forwarder runs. Without it the command never starts.
        let mut bridge_failure = None;
        let bridge = match handoff {
            None => None,
            Some((receiver, theirs)) => {
                drop(theirs);
                match receiver.receive() {
                    Ok(bridge) => Some(bridge),
                    Err(e) => {
                        // Outer sees the channel close and gives up; make sure of it.
                        let _ = sys::kill(pid, libc::SIGKILL);
                        bridge_failure = Some(e);
                        None
                    }
                }
            }
        };
        // Network off: the stub's sockets are in the channel (the helper's, or outer's, which
        // closes its end after them or ends).
        let mut stub = setup
            .stub
            .and_then(crate::dnsstub::Receiver::receive_answering);
        // The helper is done once its last socket is in.
        if let Some(helper) = setup.helper {
            helper.finish();
        }
        // A signal to the supervisor kills the outer process, and through the death signal
        // the whole sandbox.
        sys::forward_signals_to(pid);
        // `wait_sandbox` stops the forwarding before it reaps (the pid cannot be reused
        // meanwhile), or before it leaves outer, done, to `reap_finished`.
        let waited = super::wait_sandbox(
            pid,
            policy.limits.timeout,
            stub.as_mut().map(|s| s as &mut dyn sys::WhileWaiting),
            plan.report_end.then_some(super::ToldEnd {
                pipe: &report_read,
                exit_code: finished_code,
            }),
        );
        // The whole sandbox is gone (outer exits after PID 1): close the bridge with it.
        drop(bridge);
        let lookups = stub
            .map(crate::dnsstub::Answering::finish)
            .unwrap_or_default();
        let (waited, written) = waited.map_err(|source| ExecError::Io {
            what: "waiting for the sandbox",
            error: source,
        })?;
        let written = written.unwrap_or_else(|| sys::read_to_end(&report_read).unwrap_or_default());
        let mut reports = sys::decode_reports(&written);
        // The end is not a failure.
        reports.retain(|r| r.stage != Stage::Finished as u32);
        if let Some(reason) = release_failure {
            // Readers end with the killed sandbox; their output is not the command's.
            let _ = join_reader(out);
            let _ = join_reader(err);
            return Err(ExecError::NotReleased { reason });
        }
        if let Some(e) = bridge_failure {
            // Outer's own report explains a setup that ended before the handoff.
            if let (netbridge::BridgeError::NoListener { .. }, Some(r)) = (&e, reports.first()) {
                return Err(ExecError::Setup {
                    stage: stage_name(r.stage, &mount_names),
                    error: std::io::Error::from_raw_os_error(r.value),
                });
            }
            return Err(e.into());
        }
        let stdout = join_reader(out)?;
        let mut stderr = join_reader(err)?;
        let status = match waited {
            None => ExitStatus::TimedOut,
            Some(raw) => {
                if let Some(r) = reports.iter().find(|r| r.stage == Stage::Signaled as u32) {
                    ExitStatus::Signal(r.value)
                } else if let Some(r) = reports.iter().find(|r| r.stage == Stage::Exec as u32) {
                    let mut o = super::program::exec_failure_outcome(argv0, r.value, stdio, start);
                    o.stdout = stdout;
                    stderr.bytes.extend_from_slice(&o.stderr.bytes);
                    o.stderr = stderr;
                    return Ok(o);
                } else if let Some(r) = reports.first() {
                    return Err(ExecError::Setup {
                        stage: stage_name(r.stage, &mount_names),
                        error: std::io::Error::from_raw_os_error(r.value),
                    });
                } else {
                    raw.into()
                }
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handled_rights_grow_with_abi() {
        assert_eq!(handled_fs(1).count_ones(), 13);
        assert_eq!(handled_fs(2).count_ones(), 14);
        assert_eq!(handled_fs(3).count_ones(), 15);
        assert_eq!(handled_fs(5).count_ones(), 16);
        assert_eq!(handled_fs(7), handled_fs(5));
        assert_eq!(write_rights(5) & (MAKE_CHAR | MAKE_BLOCK), 0);
    }
}

/// Landlock is a second, independent wall for writes: with a mount-layer mistake injected (a
/// path outside every writable root bound read-write, `layout::fault`), the write is still
/// refused, by Landlock (`EACCES`). Controls, on the same path: without the mistake the mounts
/// refuse it (`EROFS`); with Landlock granting the path too, the write goes through (so the
/// mistaken bind really is writable and the `EACCES` was Landlock's); `bubblewrap`, which has
/// no Landlock, lets the same mistake write.
#[cfg(test)]
mod write_wall_tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use garuda_policy::{Limits, NetworkMode};

    use super::*;
    use crate::executor::bubblewrap::BubblewrapExecutor;
    use crate::executor::layout::fault;

    /// A base folder under the real user's `~/.cache`, never under `/tmp` (which every Linux
    /// executor replaces, so a path there would be out of reach for the wrong reason).
    fn base() -> tempfile::TempDir {
        let home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
        let parent = home.join(".cache/garuda-supervisor-unit");
        std::fs::create_dir_all(&parent).unwrap();
        tempfile::tempdir_in(&parent).unwrap()
    }

    fn policy(project: &Path) -> ExecPolicy {
        ExecPolicy {
            project_root: project.to_path_buf(),
            writable_roots: vec![project.to_path_buf()],
            read_only_paths: vec![],
            writable_holes: vec![],
            unreadable_paths: vec![],
            hidden_dirs: vec![],
            network: NetworkMode::Isolated,
            staged: None,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            limits: Limits {
                timeout: Some(Duration::from_secs(60)),
                ..Limits::default()
            },
        }
    }

    /// Whether `sh -c ': > FILE'` failed with exactly the error text `what` (`strerror` of one
    /// errno) naming `file`, whatever shell `/bin/sh` is.
    fn failed_with(got: &(i32, String), file: &Path, what: &str) -> bool {
        got.0 != 0
            && got.1.lines().count() == 1
            && got.1.contains(&file.display().to_string())
            && got.1.ends_with(&format!(": {what}\n"))
    }

    /// `sh -c ': > FILE'`.
    fn write_command(file: &Path) -> CommandSpec {
        CommandSpec::new([
            "/bin/sh".as_ref(),
            "-c".as_ref(),
            ": > \"$1\"".as_ref(),
            "sh".as_ref(),
            file.as_os_str(),
        ])
    }

    /// `sh -c ': > FILE'` on `executor`: the exit code and stderr.
    fn write(executor: &dyn Executor, policy: &ExecPolicy, file: &Path) -> (i32, String) {
        let out = executor
            .run(&write_command(file), policy, StdioMode::Capture)
            .unwrap_or_else(|e| panic!("{:?}: {e}", executor.kind()));
        (out.status.code(), out.stderr.text())
    }

    #[test]
    fn landlock_refuses_a_write_that_a_mount_mistake_lets_through() {
        let base = base();
        let root = base.path().canonicalize().unwrap();
        let project = root.join("project");
        let outside = root.join("outside");
        std::fs::create_dir(&project).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let policy = policy(&project);
        let file = outside.join("written-by-the-command");

        // Control: without the mistake the read-only mounts refuse the write.
        let got = write(&LandlockExecutor, &policy, &file);
        assert!(failed_with(&got, &file, "Read-only file system"), "{got:?}");

        // The mistake: the mounts let the path through, Landlock still refuses.
        {
            let _fault = fault::inject(&outside, false);
            let got = write(&LandlockExecutor, &policy, &file);
            assert!(failed_with(&got, &file, "Permission denied"), "{got:?}");
            assert!(!file.exists(), "landlock let the write through");
        }

        // Control: with Landlock granting the path too, the mistaken bind writes.
        {
            let _fault = fault::inject(&outside, true);
            let got = write(&LandlockExecutor, &policy, &file);
            assert_eq!(got, (0, String::new()));
            assert!(file.exists(), "the mistaken bind was not writable");
            std::fs::remove_file(&file).unwrap();
        }

        // Control: bubblewrap has only the mounts; the same mistake writes.
        {
            let _fault = fault::inject(&outside, false);
            let got = write(&BubblewrapExecutor, &policy, &file);
            assert_eq!(got, (0, String::new()));
            assert!(file.exists(), "bubblewrap did not apply the mistaken bind");
        }
        // And without it, bubblewrap's mounts refuse.
        std::fs::remove_file(&file).unwrap();
        let got = write(&BubblewrapExecutor, &policy, &file);
        assert!(failed_with(&got, &file, "Read-only file system"), "{got:?}");
    }

    /// A kernel whose Landlock ABI lacks a right the policy needs (truncate, ABI 3: without it
    /// a read-only file could be emptied) is refused: the executor does not start and the
    /// command never runs, whatever else the kernel has. The ABI is lowered through a test
    /// hook (`abi_fault`). Control: lowered only to ABI 3, the same command runs and writes.
    #[test]
    fn a_landlock_abi_without_a_needed_right_is_refused() {
        let base = base();
        let project = base.path().canonicalize().unwrap().join("project");
        std::fs::create_dir(&project).unwrap();
        let policy = policy(&project);
        let file = project.join("written-by-the-command");
        for (abi, missing) in [
            (1, "refer (ABI 2) and truncate (ABI 3)"),
            (2, "truncate (ABI 3)"),
        ] {
            let _lowered = abi_fault::lower(abi);
            match LandlockExecutor.run(&write_command(&file), &policy, StdioMode::Capture) {
                Err(ExecError::Unavailable { executor, reason }) => {
                    assert_eq!(executor, ExecutorKind::Landlock);
                    assert!(
                        reason.starts_with(&format!("Landlock ABI {abi} cannot enforce"))
                            && reason.contains(&format!("does not handle {missing}")),
                        "{reason}"
                    );
                }
                Err(other) => panic!("ABI {abi}: another error: {other}"),
                Ok(out) => panic!("ABI {abi}: the executor started: {:?}", out.status),
            }
            assert!(!file.exists(), "the command ran under ABI {abi}");
        }
        let _lowered = abi_fault::lower(MIN_ABI);
        assert_eq!(write(&LandlockExecutor, &policy, &file), (0, String::new()));
        assert!(file.exists(), "the control did not write");
    }

    /// A command whose release failed stops by itself when the release pipe ends without the
    /// byte (stage `Release`), not only because the supervisor kills its sandbox: here the kill
    /// is left out (`release_fault`), and the run still ends without the command having run.
    /// Control: released, the same command writes.
    #[test]
    fn an_unreleased_command_stops_at_the_end_of_its_pipe() {
        let base = base();
        let project = base.path().canonicalize().unwrap().join("project");
        std::fs::create_dir(&project).unwrap();
        let policy = policy(&project);
        let file = project.join("written-by-the-command");
        {
            let _kept = release_fault::keep_sandbox();
            let got = LandlockExecutor.run_released(
                &write_command(&file),
                &policy,
                StdioMode::Capture,
                &mut || Err("the disk is full".into()),
            );
            match got {
                Err(ExecError::NotReleased { reason }) => assert_eq!(reason, "the disk is full"),
                Err(other) => panic!("another error: {other}"),
                Ok(out) => panic!("the run ended as the command's: {:?}", out.status),
            }
            assert!(!file.exists(), "the command ran without its release");
        }
        let out = LandlockExecutor
            .run_released(
                &write_command(&file),
                &policy,
                StdioMode::Capture,
                &mut || Ok(()),
            )
            .unwrap();
        assert_eq!(out.status, ExitStatus::Code(0));
        assert!(file.exists(), "the control did not write");
    }
}
