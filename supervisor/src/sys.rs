//! Every raw system call of the supervisor, in one module.
//!
//! This is the only place in the supervisor where `unsafe` is allowed. Each block says why it is
//! sound. Most calls go through `rustix` (one system call each, no libc state, no allocation:
//! fit for a forked child too), the `landlock` crate (rulesets, in the parent) and
//! `seccompiler`; what stays raw is listed, with the reason, in `docs/executors.md`, "Raw
//! system calls that stay". Two kinds of code live here:
//!
//! - thin wrappers (memory files, pidfds, pipes, sockets, `prctl`) returning `io::Result`;
//! - [`spawn_native`], the fork of the native (`landlock`) executor. The supervisor is
//!   multi-threaded, so after `fork` the child may only make async-signal-safe calls: it must
//!   not allocate, lock or format. Everything it needs — C strings, the mount steps, the
//!   seccomp program, the Landlock ruleset — is prepared by the parent in a [`NativePlan`], and
//!   the child only walks that plan with single system calls (`rustix`, or `libc` where no
//!   crate serves; its descriptors are borrowed through `plan_fd`). A failure is reported as a fixed-size
//!   record on a pipe, never with a panic. The sandbox's PID 1 then executes the small
//!   start-up program [`INIT_PROGRAM`] to shed its copy of the supervisor (see
//!   `become_reaper`); that program reaps.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use seccompiler::sock_filter;

// ---------------------------------------------------------------------------------------------
// Small wrappers.

fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A pipe whose both ends are close-on-exec: `(read, write)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Open `path` with `O_PATH | O_NOFOLLOW | O_CLOEXEC`: a handle that names an inode without
/// granting any access, used as a Landlock rule anchor and as a bind-mount source.
pub fn open_path(path: &CStr) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Open `path` read-only (close-on-exec).
pub fn open_read(path: &CStr) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// An anonymous memory file holding `data`, positioned at offset 0 (close-on-exec).
pub fn memfd_with(name: &CStr, data: &[u8]) -> io::Result<OwnedFd> {
    let memory = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    fill(&memory, data)?;
    Ok(memory)
}

/// Write all of `data` to a fresh memory file and go back to its start.
fn fill(memory: &OwnedFd, data: &[u8]) -> io::Result<()> {
    let mut written = 0;
    while written < data.len() {
        written += rustix::io::retry_on_intr(|| rustix::io::write(memory, &data[written..]))?;
    }
    rustix::fs::seek(memory, rustix::fs::SeekFrom::Start(0))?;
    Ok(())
}

/// Clear `FD_CLOEXEC` on `fd`. Only for use between fork and exec (see [`keep_fds_pre_exec`]).
fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    Ok(rustix::io::fcntl_setfd(
        plan_fd(fd),
        rustix::io::FdFlags::empty(),
    )?)
}

/// Send `signal` to `pid`.
pub fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    use rustix::process::{Pid, Signal};
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let signal = Signal::from_named_raw(signal).ok_or_else(invalid)?;
    let target = Pid::from_raw(pid.checked_abs().ok_or_else(invalid)?).ok_or_else(invalid)?;
    if pid < 0 {
        Ok(rustix::process::kill_process_group(target, signal)?)
    } else {
        Ok(rustix::process::kill_process(target, signal)?)
    }
}

// ---------------------------------------------------------------------------------------------
// Forwarding SIGINT, SIGTERM and SIGHUP to the running command.

/// The signals `garuda sandbox` turns into "kill the command, then finish normally".
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The process (or, negative, process group) the handler kills; 0 while no command runs.
static FORWARD_TARGET: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// The first forwarded signal received, 0 for none.
static FORWARD_RECEIVED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The handler: only atomics and one `kill` system call, all async-signal-safe. rustix's call
/// does not touch `errno`, so the interrupted code's `errno` survives without saving it.
extern "C" fn on_forwarded_signal(signal: libc::c_int) {
    use rustix::process::{kill_process, kill_process_group, Pid, Signal};
    use std::sync::atomic::Ordering;
    let _ = FORWARD_RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
    let target = FORWARD_TARGET.load(Ordering::SeqCst);
    // A negative target is a process group.
    if let Some(pid) = target.checked_abs().and_then(Pid::from_raw) {
        let _ = if target < 0 {
            kill_process_group(pid, Signal::KILL)
        } else {
            kill_process(pid, Signal::KILL)
        };
    }
}

/// While alive, SIGINT, SIGTERM and SIGHUP do not end the supervisor: they kill the command
/// registered with [`forward_signals_to`] (its whole sandbox goes with it) and are remembered,
/// so the supervisor reports, records and cleans up before it exits. A signal the supervisor
/// was started ignoring (`nohup` ignores SIGHUP) stays ignored. Dropping it restores the
/// actions it replaced.
pub struct SignalForwarding {
    /// The actions replaced, to put back.
    replaced: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalForwarding {
    /// Installs the handlers.
    pub fn install() -> io::Result<SignalForwarding> {
        // One forwarded run per process at a time: a signal of an earlier run is forgotten.
        FORWARD_RECEIVED.store(0, std::sync::atomic::Ordering::SeqCst);
        FORWARD_TARGET.store(0, std::sync::atomic::Ordering::SeqCst);
        let mut forwarding = SignalForwarding {
            replaced: Vec::new(),
        };
        for signal in FORWARDED {
            let old = current_action(signal)?;
            if old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let handler: extern "C" fn(libc::c_int) = on_forwarded_signal;
            set_action(signal, handler as *const () as libc::sighandler_t)?;
            forwarding.replaced.push((signal, old));
        }
        Ok(forwarding)
    }

    /// The signal received since [`SignalForwarding::install`], if any.
    pub fn received(&self) -> Option<libc::c_int> {
        forwarded_signal()
    }
}

impl Drop for SignalForwarding {
    fn drop(&mut self) {
        FORWARD_TARGET.store(0, std::sync::atomic::Ordering::SeqCst);
        for (signal, old) in &self.replaced {
            // SAFETY: `old` is the action sigaction returned for this signal; restoring it
            // passes only valid pointers (the old action, no output).
            unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
        }
    }
}

/// The action currently installed for `signal`.
fn current_action(signal: libc::c_int) -> io::Result<libc::sigaction> {
    // SAFETY: sigaction is plain data; all-zero is a valid value for the kernel to fill.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only queries; `old` is a valid sigaction to fill.
    cvt(unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } as libc::c_long)?;
    Ok(old)
}

/// Puts `SIGPIPE` back to its default action (the Rust runtime ignores it), so that a write
/// to a closed pipe ends the process silently. Only for commands that only read and print.
pub fn default_sigpipe() {
    // SAFETY: `signal` with a constant disposition; the old one is not needed.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The signal the forwarding handlers received since they were installed, if any.
pub fn forwarded_signal() -> Option<libc::c_int> {
    match FORWARD_RECEIVED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Registers the command the handler kills (`0` to clear). A negative value names a process
/// group. If a signal already arrived, the command is killed at once.
pub fn forward_signals_to(target: libc::pid_t) {
    use std::sync::atomic::Ordering;
    FORWARD_TARGET.store(target, Ordering::SeqCst);
    if target != 0 && FORWARD_RECEIVED.load(Ordering::SeqCst) != 0 {
        let _ = kill(target, libc::SIGKILL);
    }
}

/// Kills the command registered with [`forward_signals_to`] now, as a forwarded signal would,
/// without marking a signal as received: the chat's Esc and first Ctrl-C stop the running
/// command and the turn, and the session goes on (its next commands run).
pub fn kill_forward_target() {
    let target = FORWARD_TARGET.load(std::sync::atomic::Ordering::SeqCst);
    if target != 0 {
        let _ = kill(target, libc::SIGKILL);
    }
}

fn set_action(signal: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: sigaction is plain data; all-zero is a valid value that we then fill.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    // SA_RESTART: reads and waits elsewhere in the supervisor resume instead of failing with
    // EINTR; the command's death ends the wait that matters.
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is a fully initialised sigaction; the old action is not wanted (null).
    cvt(unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } as libc::c_long).map(drop)
}

/// Raw wait status of a reaped child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawExit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

fn decode_status(status: libc::c_int) -> RawExit {
    if libc::WIFSIGNALED(status) {
        RawExit::Signal(libc::WTERMSIG(status))
    } else {
        RawExit::Code(libc::WEXITSTATUS(status))
    }
}

/// Wait for `pid`; if `timeout` passes first, SIGKILL it (and so, through the death signal,
/// its whole sandbox), reap it and return `None`.
/// Meanwhile it answers `serving`'s descriptors (see [`WhileWaiting`]).
pub fn wait_pid_serving(
    pid: libc::pid_t,
    timeout: Option<Duration>,
    serving: Option<&mut dyn WhileWaiting>,
) -> io::Result<Option<RawExit>> {
    let exited = wait_exited_serving(pid, timeout, serving)?;
    if !exited {
        let _ = kill(pid, libc::SIGKILL);
        wait_exited(pid, None)?;
    }
    // The child is a zombie: its pid cannot be reused yet. Stop forwarding signals to it
    // before it is reaped, so a late signal never reaches a process that took the pid.
    forward_signals_to(0);
    let status = reap(pid)?;
    Ok(exited.then_some(status))
}

/// Descriptors the thread that waits for a sandbox answers while it waits: the resolver
/// stub's sockets ([`crate::dnsstub::Answering`]). Served there instead of on a thread of
/// their own, whose start and join (about 0.3 ms, after the command) the run would wait for.
pub trait WhileWaiting {
    /// The descriptors to poll beside the child (readable: [`WhileWaiting::ready`]).
    fn fds(&self) -> Vec<RawFd>;
    /// The descriptor at `index` of [`WhileWaiting::fds`] has something to read (or an
    /// error to collect).
    fn ready(&mut self, index: usize);
}

/// Waits until `pid` (a child of this process) has exited, without reaping it; `false` when
/// `timeout` passed first (the child still runs).
pub fn wait_exited(pid: libc::pid_t, timeout: Option<Duration>) -> io::Result<bool> {
    wait_exited_serving(pid, timeout, None)
}

/// [`wait_exited`], answering `serving`'s descriptors meanwhile.
pub fn wait_exited_serving(
    pid: libc::pid_t,
    timeout: Option<Duration>,
    serving: Option<&mut dyn WhileWaiting>,
) -> io::Result<bool> {
    Ok(wait_exited_or_finished(pid, timeout, serving, None)? == WaitEnd::Exited)
}

/// How [`wait_exited_or_finished`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The child exited (it is not reaped).
    Exited,
    /// Every holder of the write end of `finished` closed it (or exited); the child may still
    /// be on its way out.
    Finished,
    /// The timeout passed first; the child still runs.
    TimedOut,
}

/// [`wait_exited_serving`], ending early when the pipe whose read end is `finished` hangs up:
/// a sandbox's last process can tell the supervisor its end that way before its own exit
/// (which waits for the teardown of the sandbox's namespaces), see `executor::wait_sandbox`.
pub fn wait_exited_or_finished(
    pid: libc::pid_t,
    timeout: Option<Duration>,
    mut serving: Option<&mut dyn WhileWaiting>,
    finished: Option<RawFd>,
) -> io::Result<WaitEnd> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
    let deadline = timeout.map(|limit| Instant::now() + limit);
    let extra = serving.as_ref().map(|s| s.fds()).unwrap_or_default();
    let entry = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(2 + extra.len());
    loop {
        // Whole milliseconds, rounded up: poll never wakes before the deadline.
        let left_ms = deadline.map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now());
            libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX)
        });
        fds.clear();
        fds.push(entry(pidfd.as_raw_fd()));
        // No event asked: a pipe's read end reports its hang-up (POLLHUP) regardless, and
        // the data before it is not what is waited for.
        fds.extend(finished.map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        }));
        let first_extra = fds.len();
        fds.extend(extra.iter().map(|fd| entry(*fd)));
        match poll(&mut fds, left_ms) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let end = if fds[0].revents != 0 {
            Some(WaitEnd::Exited)
        } else if first_extra > 1 && fds[1].revents != 0 {
            Some(WaitEnd::Finished)
        } else {
            None
        };
        if let Some(end) = end {
            // What the child sent just before it ended is answered (and recorded) too.
            if let Some(serving) = serving.as_deref_mut() {
                for index in 0..extra.len() {
                    serving.ready(index);
                }
            }
            return Ok(end);
        }
        if let Some(serving) = serving.as_deref_mut() {
            for (index, fd) in fds[first_extra..].iter().enumerate() {
                if fd.revents != 0 {
                    serving.ready(index);
                }
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(WaitEnd::TimedOut);
        }
    }
}

/// Reap `pid` (a child of this process), waiting for it to exit. Unlike [`wait_pid_serving`] it leaves
/// the signal forwarding of [`forward_signals_to`] alone: the agent's sandbox ends while a
/// command may still be registered there.
pub fn reap_child(pid: libc::pid_t) -> io::Result<RawExit> {
    reap(pid)
}

fn reap(pid: libc::pid_t) -> io::Result<RawExit> {
    use rustix::process::{Pid, WaitOptions};
    let target = Pid::from_raw(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::ECHILD))?;
    loop {
        match rustix::process::waitpid(Some(target), WaitOptions::empty()) {
            Ok(Some((_, status))) => return Ok(decode_status(status.as_raw())),
            Ok(None) => continue,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Read everything available from `fd` until EOF.
pub fn read_to_end(fd: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        match rustix::io::retry_on_intr(|| rustix::io::read(fd, &mut buf))? {
            0 => return Ok(out),
            n => out.extend_from_slice(&buf[..n]),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Landlock.

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C, packed)]
struct LandlockPathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel, or the error (`ENOSYS`: not built in;
/// `EOPNOTSUPP`: built in but disabled at boot).
pub fn landlock_abi() -> io::Result<u32> {
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the call only returns a number.
    let v = cvt(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    })?;
    Ok(v as u32)
}

// ---------------------------------------------------------------------------------------------
// Probes used by `garuda doctor` and executor selection. Each runs in a forked child that does
// nothing but system calls on pre-built data and exits, so it is safe from a threaded parent.

/// What a probe child should try.
#[derive(Debug, Clone, Copy)]
pub enum ProbeKind {
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET)`.
    UserNamespace,
    /// The same, then `mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)` on `/`.
    RecursiveReadOnly,
}

/// Overlay probe data: the three directories and the option string, prepared by the caller.
pub struct OverlayProbe {
    /// Mount point.
    pub merged: CString,
    /// `lowerdir=..,upperdir=..,workdir=..,userxattr`.
    pub options: CString,
    /// A file to create through the overlay.
    pub probe_file: CString,
}

/// Run a probe in a forked child; `Ok(())` when every step succeeded, else the errno of the
/// first failing step.
pub fn probe(kind: ProbeKind, overlay: Option<&OverlayProbe>) -> io::Result<()> {
    let uid_map = id_map(current_uid());
    let gid_map = id_map(current_gid());
    let root = c"/";
    // SAFETY: fork in a threaded process: the child below only makes async-signal-safe system
    // calls on data prepared before the fork, then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = probe_child(kind, overlay, &uid_map, &gid_map, root);
        // `_exit` ends the child without running the parent's destructors.
        exit_now(code)
    }
    match reap(pid)? {
        RawExit::Code(0) => Ok(()),
        RawExit::Code(errno) => Err(io::Error::from_raw_os_error(errno)),
        RawExit::Signal(s) => Err(io::Error::other(format!("probe killed by signal {s}"))),
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn probe_child(
    kind: ProbeKind,
    overlay: Option<&OverlayProbe>,
    uid_map: &[u8],
    gid_map: &[u8],
    root: &CStr,
) -> i32 {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET;
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } != 0 {
        return errno();
    }
    if let Err(e) = write_id_maps(uid_map, gid_map) {
        return e;
    }
    if let ProbeKind::RecursiveReadOnly = kind {
        use rustix::mount::MountPropagationFlags;
        let private = MountPropagationFlags::REC | MountPropagationFlags::PRIVATE;
        if let Err(e) = rustix::mount::mount_change(root, private) {
            return e.raw_os_error();
        }
        if let Err(e) = mount_setattr_readonly(root) {
            return e;
        }
    }
    if let Some(o) = overlay {
        use rustix::fs::{Mode, OFlags};
        let overlay = rustix::mount::mount(
            c"overlay",
            o.merged.as_c_str(),
            c"overlay",
            rustix::mount::MountFlags::empty(),
            Some(o.options.as_c_str()),
        );
        if let Err(e) = overlay {
            return e.raw_os_error();
        }
        // Creating a file through the overlay proves `userxattr` works.
        let created = rustix::fs::open(
            o.probe_file.as_c_str(),
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        );
        if let Err(e) = created {
            return e.raw_os_error();
        }
    }
    0
}

// ---------------------------------------------------------------------------------------------
// Identity helpers.

/// The real user id of this process.
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// The real group id of this process.
pub fn current_gid() -> u32 {
    rustix::process::getgid().as_raw()
}

/// This process's id.
pub fn current_pid() -> libc::pid_t {
    rustix::process::getpid().as_raw_pid()
}

/// `"ID ID 1\n"`: map the user to itself inside the new user namespace. Mapping to root would
/// make files owned by the user look foreign (and `git status` rehash every file).
pub fn id_map(id: u32) -> Vec<u8> {
    format!("{id} {id} 1\n").into_bytes()
}

fn write_file(path: &CStr, data: &[u8]) -> Result<(), i32> {
    use rustix::fs::{Mode, OFlags};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let file =
        rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
    match rustix::io::write(&file, data) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(errno(e)),
    }
}

fn write_id_maps(uid_map: &[u8], gid_map: &[u8]) -> Result<(), i32> {
    // `setgroups` must be denied before an unprivileged process may write its gid map.
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", uid_map)?;
    write_file(c"/proc/self/gid_map", gid_map)
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;

fn mount_setattr_readonly(path: &CStr) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` and `attr` are valid for the duration of the call; size matches.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The native executor's fork.

/// One step of the mount plan, executed in order inside the new mount namespace.
#[derive(Debug)]
pub enum MountStep {
    /// Stop mount events propagating back to the host.
    MakeRootPrivate,
    /// Make every mount under `/` read-only and nosuid in one call (`mount_setattr`).
    RecursiveReadOnly,
    /// Mount a fresh tmpfs.
    Tmpfs {
        /// Mount point.
        target: CString,
        /// Mount flags (`MS_RDONLY`, `MS_NOSUID`, …).
        flags: libc::c_ulong,
        /// tmpfs options (`mode=…,size=…`).
        options: CString,
    },
    /// Mount overlayfs (used for the staged view of the project).
    Overlay {
        /// Mount point.
        target: CString,
        /// `lowerdir=…,upperdir=…,workdir=…,userxattr`.
        options: CString,
    },
    /// Mount a new devpts instance.
    Devpts {
        /// Mount point.
        target: CString,
    },
    /// Create a directory (an existing one is fine).
    Mkdir {
        /// Path.
        path: CString,
        /// Mode.
        mode: libc::mode_t,
    },
    /// Create an empty regular file (an existing one is fine).
    CreateFile {
        /// Path.
        path: CString,
        /// Mode.
        mode: libc::mode_t,
    },
    /// Create a symbolic link.
    Symlink {
        /// What the link points to.
        target: CString,
        /// The link's path.
        link: CString,
    },
    /// Bind `source` (usually `/proc/self/fd/N` of an `O_PATH` handle opened by the parent)
    /// on `target`, recursively, then remount the top mount with `remount_flags`.
    Bind {
        /// Source path.
        source: CString,
        /// Mount point.
        target: CString,
        /// Flags for the remount (`MS_RDONLY` for read-only binds; none clears read-only).
        remount_flags: libc::c_ulong,
    },
    /// Open `path` with `O_PATH` and place the handle at descriptor `fd`, so a later
    /// [`MountStep::Bind`] can use `/proc/self/fd/<fd>` as its source after the path itself
    /// has been covered by another mount. (Handles opened by the parent would name mounts of
    /// the host's namespace, which `mount(2)` refuses as bind sources.)
    Hold {
        /// Path to open.
        path: CString,
        /// Descriptor number to place the handle at (close-on-exec).
        fd: RawFd,
    },
    /// Remove a file (the empty placeholder used for unreadable files).
    Unlink {
        /// Path.
        path: CString,
    },
    /// Make `new_root` (a mount point) the root of the mount namespace and detach the old
    /// root entirely (`pivot_root(".", ".")`, then `umount2(".", MNT_DETACH)`): nothing of the
    /// host's tree stays reachable by path. Used by the confined agent's view.
    PivotRoot {
        /// The new root.
        new_root: CString,
    },
}

/// Everything the native executor's child needs, prepared by the parent before `fork`.
pub struct NativePlan {
    /// Absolute path of the program to execute.
    pub program: CString,
    /// NULL-terminated `argv` pointers into `argv_storage`.
    pub argv: Vec<*const libc::c_char>,
    /// Owns the argument strings.
    #[allow(dead_code)] // kept alive for the pointers in `argv`
    pub argv_storage: Vec<CString>,
    /// NULL-terminated `envp` pointers into `envp_storage`.
    pub envp: Vec<*const libc::c_char>,
    /// Owns the environment strings.
    #[allow(dead_code)] // kept alive for the pointers in `envp`
    pub envp_storage: Vec<CString>,
    /// Working directory.
    pub cwd: CString,
    /// Contents of `/proc/self/uid_map`.
    pub uid_map: Vec<u8>,
    /// Contents of `/proc/self/gid_map`.
    pub gid_map: Vec<u8>,
    /// Mount steps, run by the first child in the new mount namespace.
    pub mounts: Vec<MountStep>,
    /// Contents written to the new PID namespace's `/proc/sys/kernel/pid_max`, bounding the
    /// number of processes (a fork bomb).
    pub pid_max: Vec<u8>,
    /// The Landlock ruleset to enforce.
    pub landlock_ruleset: RawFd,
    /// Landlock rules added inside the new mount namespace, after the mounts: paths whose
    /// inode only exists there (the private `/tmp` and `/dev`). Landlock does not look at a
    /// covered mount point, so a rule on the host's `/tmp` would not reach the new tmpfs.
    pub late_rules: Vec<(CString, u64)>,
    /// The seccomp program.
    pub seccomp: Vec<sock_filter>,
    /// Descriptors for 0, 1, 2 (dup2'ed in the child).
    pub stdio: [RawFd; 3],
    /// Highest capability number (`/proc/sys/kernel/cap_last_cap`).
    pub cap_last_cap: u32,
    /// The parent's pid: the child dies with it (`PR_SET_PDEATHSIG`) and checks it is alive.
    pub parent_pid: libc::pid_t,
    /// Write end of the report pipe (close-on-exec).
    pub report_fd: RawFd,
    /// In proxy mode: outer makes the bridge's listener in the new network namespace and hands
    /// it to the supervisor (see [`BridgeHandoff`]) before anything else runs there.
    pub bridge: Option<BridgeHandoff>,
    /// With the network off: outer makes the resolver stub's sockets in the new network
    /// namespace and hands them to the supervisor (see [`DnsHandoff`]).
    pub dns: Option<DnsHandoff>,
    /// The start-up program ([`init_program`], close-on-exec): PID 1 executes it as the
    /// reaper ([`REAPER_ARGV0`]) once its setup is done.
    pub reaper_exe: RawFd,
    /// Mount steps PID 1 runs after it has mounted the new `/proc` and before it forks the
    /// command (steps that need that `/proc`, like binding it into a new root before a
    /// [`MountStep::PivotRoot`]). Empty for the executors.
    pub pid1_mounts: Vec<MountStep>,
    /// A descriptor the command gets at [`CHANNEL_FD`] (not close-on-exec), placed there
    /// right before `execve`: the confined agent's end of its socket pair. `None` for the
    /// executors.
    pub pass_fd: Option<RawFd>,
    /// The release pipe (read end, write end; both close-on-exec), or `None` when the command
    /// may start as soon as its sandbox is ready. The command closes its copy of the write end,
    /// then waits for one byte on the read end before it executes its program: the supervisor
    /// sends it once what must precede the command is done (the audit intent on disk, see
    /// [`crate::executor::Executor::run_released`]), and kills the sandbox instead if that
    /// failed. A closed pipe without the byte also stops the command.
    pub release: Option<(RawFd, RawFd)>,
    /// A user namespace and a network namespace made ahead by [`spawn_namespace_helper`]
    /// (user, net; both close-on-exec): outer joins them instead of making its own, and its
    /// id maps, loopback and resolver stub are already there. `None`: outer makes them.
    pub namespaces: Option<(RawFd, RawFd)>,
    /// The CPUs the supervisor's thread may run on, read before the fork. `Some`: outer is
    /// moved off the supervisor's CPU once forked ([`move_off_this_cpu`]), and the command
    /// takes these back first thing, so that it runs where it would have without the move
    /// (outer's and PID 1's own CPUs matter to nobody). `None`: nothing is moved.
    pub affinity: Option<rustix::thread::CpuSet>,
    /// Outer keeps the report pipe after PID 1's start and, once PID 1 is reaped (every
    /// process of the sandbox gone), reports [`Stage::Finished`] with the exit code and closes
    /// every descriptor before it exits: the supervisor learns the end from the pipe's hang-up
    /// instead of outer's exit, which waits for the teardown of the sandbox's namespaces
    /// ("The end told early", docs/executors.md).
    pub report_end: bool,
}

/// The descriptor number at which [`NativePlan::pass_fd`] reaches the command.
pub const CHANNEL_FD: RawFd = 3;

/// `argv[0]` under which the landlock executor's PID 1 executes [`INIT_PROGRAM`] to become
/// the reaper: `[REAPER_ARGV0, command pid, report fd]`, with an empty environment.
pub const REAPER_ARGV0: &CStr = c"garuda-sandbox-init";

/// The bubblewrap executor's last step before the command: bwrap executes [`INIT_PROGRAM`]
/// through `/proc/self/fd/N` with `argv = [that path, EXEC_CLOSED_ARGV1, command…]`, and the
/// program closes every descriptor above stdio and executes the command. bwrap hands the
/// command every descriptor it inherited, among them the spawn hook's held bind sources:
/// `O_PATH` handles on the host's own mounts, through which `/proc/self/fd/N/...` reaches
/// past every read-only bind and mask (a command wrote the host's `.git/config` through one).
/// bwrap 0.8 has no option to close them.
pub const EXEC_CLOSED_ARGV1: &CStr = c"garuda-exec-closed";

/// [`EXEC_CLOSED_ARGV1`] with a release: `argv = [that path, EXEC_RELEASED_ARGV1, FD,
/// command…]`. The program first reads one byte from `FD`, the supervisor's go-ahead once the
/// command's audit intent is on disk (`Executor::run_released`); the end of the pipe without
/// it exits 125 and the command never runs. bwrap's own `--block-fd` would not do: it carries
/// on when its pipe ends without a byte.
pub const EXEC_RELEASED_ARGV1: &CStr = c"garuda-exec-released";

/// The sandboxes' start-up program (`supervisor/init/garuda_init.rs`, built by `build.rs`): a
/// static executable of a few kilobytes with no libc, which is the landlock executor's reaper
/// ([`REAPER_ARGV0`]) and the bubblewrap executor's exec step ([`EXEC_CLOSED_ARGV1`]).
/// Executing it costs about 0.05 ms where the supervisor's own dynamically linked file cost
/// about 1 ms.
#[cfg(garuda_init)]
pub const INIT_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/garuda-init"));

/// See the Linux version: no start-up program is built for this platform.
#[cfg(not(garuda_init))]
pub const INIT_PROGRAM: &[u8] = &[];

/// [`INIT_PROGRAM`] as an executable descriptor (close-on-exec, read-only), made once per
/// process: a memory file holding the program, sealed against every change (`F_SEAL_WRITE`,
/// `F_SEAL_SHRINK`, `F_SEAL_GROW`, `F_SEAL_SEAL`), then opened again read-only through
/// `/proc/self/fd` (a descriptor open for writing would make `execve` fail with `ETXTBSY`) and
/// the writable one closed. Nothing on disk, nothing another process can replace.
pub fn init_program() -> io::Result<std::os::fd::BorrowedFd<'static>> {
    use std::os::fd::AsFd;
    static PROGRAM: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    if let Some(fd) = PROGRAM.get() {
        return Ok(fd.as_fd());
    }
    if INIT_PROGRAM.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the sandbox start-up program is not built for this platform",
        ));
    }
    let memory = sealed_memfd(c"garuda-init", INIT_PROGRAM)?;
    let path = CString::new(format!("/proc/self/fd/{}", memory.as_raw_fd()))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let program = open_read(&path)?;
    drop(memory);
    // Two threads may both get here: one keeps its descriptor, the other's is closed.
    Ok(PROGRAM.get_or_init(|| program).as_fd())
}

/// A memory file holding `data`, sealed against any change, executable where the kernel asks
/// for that to be said (`MFD_EXEC`, Linux 6.3; older kernels refuse the flag and need none).
fn sealed_memfd(name: &CStr, data: &[u8]) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    let memory = match rustix::fs::memfd_create(name, flags | MemfdFlags::EXEC) {
        Err(rustix::io::Errno::INVAL) => rustix::fs::memfd_create(name, flags)?,
        other => other?,
    };
    fill(&memory, data)?;
    rustix::fs::fcntl_add_seals(
        &memory,
        SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE,
    )?;
    Ok(memory)
}

/// Open this process's own executable (`/proc/self/exe`, followed) as an `O_PATH`,
/// close-on-exec handle. Executing the handle runs the very file the supervisor runs, even if
/// the path was replaced or removed since, and needs no path inside the sandbox.
pub fn open_own_executable() -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(
        c"/proc/self/exe",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The sandbox side of the proxy bridge's listener handoff (`crate::netbridge`): in the new
/// network namespace, after loopback is up, the setup code listens on `127.0.0.1:port`, sends
/// the listening socket to the supervisor over `channel` (`SCM_RIGHTS`), and waits for one
/// byte, the supervisor's go-ahead that its forwarder runs. End of stream instead of the byte
/// means the supervisor could not start the bridge: the setup fails and the command never
/// starts.
#[derive(Debug, Clone, Copy)]
pub struct BridgeHandoff {
    /// Loopback port to listen on inside the sandbox.
    pub port: u16,
    /// The sandbox's end of a unix socket pair (close-on-exec); closed after the handoff.
    pub channel: RawFd,
}

/// Resolver addresses the network-off stub listens on, at most (`crate::dnsstub`).
pub const MAX_STUB_RESOLVERS: usize = 4;

/// The sandbox side of the network-off resolver stub (`crate::dnsstub`): in the new network
/// namespace, after loopback is up, the setup code binds a UDP socket on port 53 of each
/// address and sends it to the supervisor over `channel` (`SCM_RIGHTS`), then closes its
/// copies and the channel. An IPv4 address outside `127.0.0.0/8` is first added to `lo` as
/// the alias `lo:N` with a `/32` mask, so it is local in the namespace and nothing else
/// becomes routable. Best effort: an address that cannot be set up is skipped, and nothing
/// here fails the setup (the stub only makes a message better; the isolation does not depend
/// on it).
#[derive(Debug, Clone, Copy)]
pub struct DnsHandoff {
    /// The addresses (`None` slots are unused).
    pub addrs: [Option<std::net::IpAddr>; MAX_STUB_RESOLVERS],
    /// The sandbox's end of a unix socket pair (close-on-exec); closed after the handoff.
    pub channel: RawFd,
}

/// Where in the child a setup step failed. Numbers are stable: the parent decodes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stage {
    /// The parent died before the child started.
    ParentGone = 1,
    /// `setsid`.
    Setsid = 2,
    /// `dup2` of stdio.
    Stdio = 3,
    /// `unshare` of the namespaces.
    Unshare = 4,
    /// Writing the id maps.
    IdMaps = 5,
    /// Starting the PID namespace's init: its stacks, its `clone` (the name is historical).
    ForkInit = 6,
    /// Mounting `/proc`.
    MountProc = 7,
    /// Writing `pid_max`.
    PidMax = 8,
    /// Starting the command's process: its `clone` (the name is historical).
    ForkCommand = 9,
    /// `chdir` to the working directory.
    Chdir = 10,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 11,
    /// Dropping capabilities.
    DropCaps = 12,
    /// `landlock_restrict_self`.
    Landlock = 13,
    /// Installing the seccomp filter.
    Seccomp = 14,
    /// `execve` (the program could not be executed).
    Exec = 15,
    /// Not a failure: the command was killed by the signal in the errno field.
    Signaled = 16,
    /// Resetting signal dispositions.
    Signals = 17,
    /// Bringing up the new network namespace's loopback interface.
    Loopback = 18,
    /// Adding a Landlock rule inside the new mount namespace.
    LandlockRule = 19,
    /// Making the proxy bridge's listener on the sandbox's loopback.
    BridgeListen = 20,
    /// Handing the listener to the supervisor, or the supervisor refusing to go ahead.
    BridgeHandoff = 21,
    /// PID 1: the pipe that holds the command back until PID 1 has become the reaper.
    Pid1Sync = 22,
    /// PID 1: putting `/dev/null` on its stdio, marking its descriptors close-on-exec.
    Pid1Stdio = 23,
    /// PID 1: `PR_SET_NO_NEW_PRIVS`.
    Pid1NoNewPrivs = 24,
    /// PID 1: dropping capabilities.
    Pid1DropCaps = 25,
    /// PID 1: installing the seccomp filter.
    Pid1Seccomp = 26,
    /// PID 1: executing the reaper.
    Pid1Exec = 27,
    /// Marking every descriptor above stdio close-on-exec before `execve`.
    CloseOnExec = 28,
    /// PID 1: one of [`NativePlan::pid1_mounts`].
    Pid1Mount = 29,
    /// Placing [`NativePlan::pass_fd`] at [`CHANNEL_FD`].
    PassFd = 30,
    /// Waiting for the supervisor's release ([`NativePlan::release`]).
    Release = 31,
    /// Joining the user and network namespaces made ahead ([`NativePlan::namespaces`]).
    JoinNamespaces = 32,
    /// Not a failure: outer's last report, the sandbox's exit code (the value), written once
    /// PID 1 is reaped ([`NativePlan::report_end`]).
    Finished = 33,
    /// Mount step N is reported as `MOUNT_BASE + N`.
    MountBase = 1000,
}

/// A decoded report record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Stage code (see [`Stage`]; `>= 1000` is mount step `code - 1000`).
    pub stage: u32,
    /// The errno (or the signal number for [`Stage::Signaled`]).
    pub value: i32,
}

/// Decode the report pipe's contents (a sequence of 8-byte records).
pub fn decode_reports(bytes: &[u8]) -> Vec<Report> {
    bytes
        .chunks_exact(8)
        .map(|c| Report {
            stage: u32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
            value: i32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

fn report(fd: RawFd, stage: u32, value: i32) {
    let mut rec = [0u8; 8];
    rec[..4].copy_from_slice(&stage.to_ne_bytes());
    rec[4..].copy_from_slice(&value.to_ne_bytes());
    // A short or failed write only loses the report.
    let _ = rustix::io::write(plan_fd(fd), &rec);
}

fn fail(fd: RawFd, stage: u32) -> ! {
    report(fd, stage, errno());
    exit_now(125)
}

/// End this process at once (`_exit`: no destructors, no `atexit` handlers, no buffered
/// output): the only way a forked child of the threaded supervisor may end, and how the start
/// code of a process ends before the Rust runtime would.
fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

/// A descriptor of a forked child's plan as a borrowed one, for rustix's calls.
///
/// The plans give descriptors as numbers (`RawFd`): they are made before the fork and their
/// owners live in the parent. Every use here is within one call, in a child where the
/// descriptor stays open until that child executes or exits; this is the one place that
/// vouches for that, instead of an `unsafe` block at each call.
fn plan_fd(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: see above: the plan's descriptors are open in the forked child for as long as
    // it runs this code (they close at its `execve` or `_exit`), and no caller keeps the
    // borrow past the call it is made for.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// Close a plan's descriptor in a forked child (see [`plan_fd`]). `close` itself, not an
/// `OwnedFd`'s drop, which would abort a debug build on an already closed descriptor.
fn close_raw(fd: RawFd) {
    // SAFETY: `close` on an integer: the descriptor is the plan's, and nothing uses it after.
    unsafe { libc::close(fd) };
}

/// `dup2` of a descriptor onto 0, 1 and 2, in that order.
const STDIO_DUPS: [fn(std::os::fd::BorrowedFd<'static>) -> rustix::io::Result<()>; 3] = [
    rustix::stdio::dup2_stdin::<std::os::fd::BorrowedFd<'static>>,
    rustix::stdio::dup2_stdout::<std::os::fd::BorrowedFd<'static>>,
    rustix::stdio::dup2_stderr::<std::os::fd::BorrowedFd<'static>>,
];

/// Exit code of a child whose setup failed before the command ran.
pub const SETUP_FAILED_EXIT: i32 = 125;

/// Fork the native sandbox. Returns the pid of the outer child; wait for it with [`wait_pid_serving`].
///
/// Process layout: `outer` (new user, mount, net, IPC, UTS, cgroup namespaces; builds the
/// mounts; waits) → `init` (a `clone(CLONE_VM)` of outer, see [`SandboxStacks`]: PID 1 of a
/// new PID namespace: mounts `/proc`, bounds `pid_max`, clones the command, then hardens
/// itself and executes the reaper ([`become_reaper`], [`INIT_PROGRAM`]), which reaps and exits
/// when the command exits, making the kernel kill every process left in the namespace) →
/// `command` (drops capabilities, Landlock, seccomp, waits for PID 1's exec, `execve`). Both
/// children die with their parent (`PR_SET_PDEATHSIG`, kept across the reaper's exec), so
/// killing `outer` kills the whole tree.
pub fn spawn_native(plan: &NativePlan) -> io::Result<libc::pid_t> {
    // SAFETY: fork from a possibly multi-threaded process. The child runs `outer_main`, which
    // only makes async-signal-safe system calls on memory prepared before the fork (the plan
    // is borrowed, never mutated, and nothing is allocated or freed), and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        outer_main(plan)
    }
    if plan.affinity.is_some() {
        move_off_this_cpu(pid);
    }
    Ok(pid)
}

fn outer_main(plan: &NativePlan) -> ! {
    let rep = plan.report_fd;
    // The supervisor's signal forwarding handler is inherited across fork; this process never
    // execs and the sandbox's PID 1 only at the end of its setup.
    default_forwarded_signals();
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid().map(rustix::process::Pid::as_raw_pid) != Some(plan.parent_pid) {
        report(rep, Stage::ParentGone as u32, 0);
        exit_now(SETUP_FAILED_EXIT)
    }
    // A new session: the command has no controlling terminal, so TIOCSTI cannot inject input.
    if let Err(e) = rustix::process::setsid() {
        report(rep, Stage::Setsid as u32, e.raw_os_error());
        exit_now(SETUP_FAILED_EXIT)
    }
    for (target, (&fd, dup)) in plan.stdio.iter().zip(STDIO_DUPS).enumerate() {
        if fd == target as RawFd {
            continue;
        }
        if let Err(e) = dup(plan_fd(fd)) {
            report(rep, Stage::Stdio as u32, e.raw_os_error());
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    let rest = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if let Some((user, net)) = plan.namespaces {
        // The user namespace first: it owns the network namespace, and joining it gives this
        // process the capabilities that joining the network namespace and the `unshare` below
        // need. Each call names the type it expects, so a descriptor of another kind of
        // namespace is refused (EINVAL), not joined.
        // SAFETY: setns on the plan's descriptors (open here until this process exits) with
        // a namespace type; no memory is passed.
        let joined = unsafe {
            libc::setns(user, libc::CLONE_NEWUSER) == 0 && libc::setns(net, libc::CLONE_NEWNET) == 0
        };
        if !joined {
            fail(rep, Stage::JoinNamespaces as u32);
        }
        // SAFETY: unshare takes flags only.
        if unsafe { libc::unshare(rest) } != 0 {
            fail(rep, Stage::Unshare as u32);
        }
    } else {
        // SAFETY: unshare takes flags only.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | rest) } != 0 {
            fail(rep, Stage::Unshare as u32);
        }
        if let Err(e) = write_id_maps(&plan.uid_map, &plan.gid_map) {
            report(rep, Stage::IdMaps as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
        if let Err(e) = loopback_up() {
            report(rep, Stage::Loopback as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    if let Some(bridge) = &plan.bridge {
        if let Err((stage, e)) = bridge_handoff(bridge) {
            report(rep, stage as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    if let Some(dns) = &plan.dns {
        dns_handoff(dns);
    }
    for (i, step) in plan.mounts.iter().enumerate() {
        if let Err(e) = run_mount_step(step) {
            report(rep, Stage::MountBase as u32 + i as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    for (path, access) in &plan.late_rules {
        if let Err(e) = add_rule_at(plan.landlock_ruleset, path, *access) {
            report(rep, Stage::LandlockRule as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    // PID 1 and the command share this process's memory (a copy of the supervisor's) instead
    // of each copying it again: see `SandboxStacks`.
    let stacks = match SandboxStacks::map() {
        Ok(stacks) => stacks,
        Err(e) => {
            report(rep, Stage::ForkInit as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    };
    // The command waits for the end of this pipe before it executes its program. PID 1's
    // write end is close-on-exec: it closes when PID 1 has executed the reaper (or has died),
    // so the program never runs beside a PID 1 that still shares a copy of the supervisor's
    // memory. This process closes its copies right after PID 1's clone (`close_from`), the
    // command its copy of the write end first thing (`command_entry`).
    let (sync_read, sync_write) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok((read, write)) => (
            std::os::fd::IntoRawFd::into_raw_fd(read),
            std::os::fd::IntoRawFd::into_raw_fd(write),
        ),
        Err(e) => {
            report(rep, Stage::Pid1Sync as u32, e.raw_os_error());
            exit_now(SETUP_FAILED_EXIT)
        }
    };
    let init_args = SandboxArgs {
        plan,
        command_stack_top: stacks.top(1),
        sync_read,
        sync_write,
    };
    // SAFETY: PID 1 runs on the first stack mapped above, which outer never unmaps; `init_args`
    // stays on this stack frame until PID 1 is reaped below; `init_main` writes only its own
    // stack (see `SandboxStacks`).
    let init = match unsafe { clone_sharing_memory(init_entry, stacks.top(0), &init_args) } {
        Ok(pid) => pid,
        Err(e) => {
            report(rep, Stage::ForkInit as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    };
    // Keep only stdio (and the report pipe, to tell the end): no handle of the supervisor
    // outlives the setup in this process.
    if plan.report_end && rep >= 3 {
        let rep = rep as u32;
        if rep > 3 {
            // SAFETY: close_range with integer arguments (3 < rep: a valid range).
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, rep - 1, 0u32) };
        }
        close_from(rep + 1);
    } else {
        close_from(3);
    }
    // `init_args` and the stacks stay in place until PID 1 is reaped: by then every process
    // of the PID namespace has ended (its PID 1 leaving waits for them), so nothing runs on
    // this memory any more. They are never freed: `exit_now` ends this process.
    let code = match reap(init) {
        Ok(RawExit::Code(c)) => c,
        Ok(RawExit::Signal(s)) => 128 + s,
        Err(_) => SETUP_FAILED_EXIT,
    };
    if plan.report_end && rep >= 3 {
        report(rep, Stage::Finished as u32, code);
        // Closed here, not by the exit: an exiting process's descriptors are released only
        // after its namespaces are torn down, and the supervisor waits for the hang-up.
        close_from(0);
    }
    exit_now(code)
}

/// The stacks of the sandbox's PID 1 and command, mapped by outer in its own memory.
///
/// PID 1 and the command are `clone(CLONE_VM)` children (outer → PID 1 → command) that share
/// outer's memory, itself a copy of the supervisor's, instead of `fork`s that would each copy
/// its page tables and then tear the copy down again when they execute: two copies of the
/// supervisor's address space on the path to the command's start, and two teardowns (one of
/// them inside PID 1's `execve`, which the command waits for). Sharing is sound here because:
///
/// - outer only waits (in `wait4`) while they run, and its memory is not the supervisor's
///   (the supervisor's is untouched by anything they do);
/// - each runs on a stack of its own, mapped here, with a guard page below it;
/// - they read the plan and the argument block their parent left for them, and write only
///   their own stacks: no allocation, no lock, as in any forked child of the supervisor;
/// - their descriptor tables, signal handlers, credentials, seccomp filters and Landlock
///   domains are their own (no `CLONE_FILES`, `CLONE_SIGHAND` or `CLONE_THREAD`);
/// - the one piece of memory they write in common is `errno` (the supervisor's thread's, in
///   the copy), through libc calls that fail: only two failures at the same moment in PID 1
///   and the command could report one's errno for the other's stage; glibc's per-thread
///   data (its cached thread id) is outer's too, so an `abort` in either would signal outer,
///   which ends the whole sandbox (fails closed; these paths do not panic);
/// - PID 1 executes the start-up program and the command its program, which gives each a
///   new address space: neither the reaper nor the command ever runs on shared memory (the
///   command still waits for PID 1's `execve`, as before).
///
/// The mapping is never unmapped: outer ends with `_exit` once PID 1 is reaped, after which
/// no process of the sandbox remains.
struct SandboxStacks {
    base: usize,
}

/// Each stack's size, its guard page included (pages are only faulted in as they are used).
const SANDBOX_STACK: usize = 256 * 1024;

impl SandboxStacks {
    /// Two stacks, each with its lowest page made inaccessible. Errno on failure.
    fn map() -> Result<SandboxStacks, i32> {
        Ok(SandboxStacks {
            base: map_guarded_stacks(2, SANDBOX_STACK)?,
        })
    }

    /// The top (highest address, 16-byte aligned) of stack `index`.
    fn top(&self, index: usize) -> usize {
        self.base + (index + 1) * SANDBOX_STACK
    }
}

/// Maps `count` stacks of `size` bytes each (a multiple of the page size) in one anonymous
/// mapping and makes the lowest page of each a guard (`PROT_NONE`): an overflow faults instead
/// of writing into the next stack or below. Returns the mapping's address; its length is
/// `count * size`. Async-signal-safe (outer maps its children's stacks after `fork`); errno on
/// failure, the mapping then released.
fn map_guarded_stacks(count: usize, size: usize) -> Result<usize, i32> {
    // SAFETY: a fresh anonymous private mapping; no address hint, nothing refers to it yet.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            count * size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(errno());
    }
    let page = page_size();
    for i in 0..count {
        let guard = (base as usize + i * size) as *mut libc::c_void;
        // SAFETY: the lowest page of stack `i`, inside the mapping made above, becomes its
        // guard.
        if unsafe { libc::mprotect(guard, page, libc::PROT_NONE) } != 0 {
            let e = errno();
            // SAFETY: the mapping made above, which nothing uses yet.
            unsafe { libc::munmap(base, count * size) };
            return Err(e);
        }
    }
    Ok(base as usize)
}

/// What outer leaves on its own stack for PID 1 and the command, in place until PID 1 is
/// reaped (outer only waits meanwhile).
struct SandboxArgs<'a> {
    plan: &'a NativePlan,
    command_stack_top: usize,
    /// The pipe that holds the command back until PID 1 has executed the reaper.
    sync_read: RawFd,
    sync_write: RawFd,
}

/// `clone(CLONE_VM | SIGCHLD)`: a child process that shares this process's memory and runs
/// `entry(args)` on the stack ending at `stack_top`. Errno on failure. Used for the namespace
/// helper ([`spawn_namespace_helper`]) and for the sandbox's PID 1 and command
/// ([`SandboxStacks`]), whose docs argue the sharing.
///
/// # Safety
///
/// `stack_top` is the 16-byte aligned top of a stack mapping that nothing else uses and that
/// outlives the child; `args` stays in place, unmodified, for as long as the child may read
/// it; `entry` writes no memory but that stack (no allocation, no lock, no `errno` the parent
/// relies on) until the child executes or exits.
unsafe fn clone_sharing_memory<T>(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack_top: usize,
    args: &T,
) -> Result<libc::pid_t, i32> {
    let arg = std::ptr::from_ref(args).cast_mut().cast::<libc::c_void>();
    // SAFETY: the caller's contract above: the child runs `entry` on its own stack with a
    // pointer to `args`, and writes nothing else of the memory it shares.
    let pid = unsafe {
        libc::clone(
            entry,
            stack_top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            arg,
        )
    };
    if pid < 0 {
        return Err(errno());
    }
    Ok(pid)
}

extern "C" fn init_entry(args: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `args` is outer's `SandboxArgs`, in place until PID 1 is reaped.
    let args = unsafe { &*(args as *const SandboxArgs<'_>) };
    init_main(args)
}

extern "C" fn command_entry(args: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `args` is outer's `SandboxArgs`, in place until PID 1 is reaped, which is after
    // the command has executed its program or ended (PID 1 outlives every process of its
    // namespace).
    let args = unsafe { &*(args as *const SandboxArgs<'_>) };
    // The command keeps only the read end.
    close_raw(args.sync_write);
    command_main(args.plan, args.sync_read)
}

/// Put the default actions of the forwarded signals back in a forked child (sigaction is
/// async-signal-safe; the all-zero action is SIG_DFL with an empty mask, on the stack).
fn default_forwarded_signals() {
    for signal in FORWARDED {
        // SAFETY: sigaction is plain data and all-zero is SIG_DFL; no allocation after fork.
        let default: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `default` is a valid action; the old one is not wanted (null).
        unsafe { libc::sigaction(signal, &default, std::ptr::null_mut()) };
    }
}

/// What the helper of [`spawn_namespace_helper`] needs, made before it starts.
#[derive(Debug)]
pub struct NamespacePlan {
    /// Contents of the new user namespace's `/proc/self/uid_map`.
    pub uid_map: Vec<u8>,
    /// Contents of its `/proc/self/gid_map`.
    pub gid_map: Vec<u8>,
    /// The parent's pid: the helper dies with it and checks it is alive.
    pub parent_pid: libc::pid_t,
    /// The resolver stub's addresses, and the helper's end of the channel over which it
    /// sends, in this order, its user namespace, its network namespace, then the stub's
    /// sockets (see [`dns_handoff`]); it closes the channel when done.
    pub handoff: DnsHandoff,
}

/// How long [`NamespaceHelper::finish`] waits for a helper that has sent its namespaces.
const HELPER_FINISH: Duration = Duration::from_secs(1);

/// Size of a namespace helper's stack (it needs a few KiB; the lowest page is a guard).
const HELPER_STACK: usize = 128 * 1024;

/// A running (or finished) namespace helper: its pid, and the plan and stack it uses, which
/// live until it is reaped. Dropping it kills and reaps the helper first.
#[derive(Debug)]
pub struct NamespaceHelper {
    pid: libc::pid_t,
    /// Read by the helper: never touched until it is reaped.
    plan: Box<NamespacePlan>,
    /// The helper's stack mapping (address, length); unmapped once it is reaped.
    stack: (usize, usize),
    reaped: bool,
}

impl NamespaceHelper {
    /// Wait for the helper to exit (it does right after its last socket), then release its
    /// stack. One that has not exited within [`HELPER_FINISH`] (stopped by another process of
    /// the user) is killed rather than waited for: the sandbox's run must not hang on it.
    pub fn finish(mut self) {
        if !matches!(wait_exited(self.pid, Some(HELPER_FINISH)), Ok(true)) {
            let _ = kill(self.pid, libc::SIGKILL);
        }
        let _ = reap(self.pid);
        self.reaped = true;
    }
}

impl Drop for NamespaceHelper {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, libc::SIGKILL);
            let _ = reap(self.pid);
        }
        // SAFETY: the mapping is the one made for the helper's stack, and the helper, the
        // only user of it, has exited (reaped above or by `finish`).
        unsafe { libc::munmap(self.stack.0 as *mut libc::c_void, self.stack.1) };
    }
}

/// Start a helper that makes, ahead of the next sandbox, what its setup (landlock's outer,
/// bubblewrap's hook) would otherwise make first: a user namespace with the user mapped to itself and a network
/// namespace with loopback up and the resolver stub's sockets bound. The helper sends both
/// namespaces and the sockets over the plan's channel and exits (the descriptors keep the
/// namespaces alive). A helper that fails just ends the channel early: the sandbox then
/// makes its own namespaces, and reports any failure at its own stage.
///
/// Why: making a network namespace is the largest single cost of a sandbox's setup (about
/// half a millisecond here); the helper makes it on another CPU while the supervisor loads
/// the policy and opens the audit session (see `crate::executor::ahead`). It is moved off the
/// supervisor's CPU when there is another one to run on ([`move_off_this_cpu`]): left to the
/// kernel it waited on the supervisor's. Its own children (none) and the namespaces it makes
/// carry no CPU mask, so nothing needs to be given back.
///
/// The helper is a `clone(CLONE_VM)` child on a stack of its own, not a `fork`: a forked
/// copy would make every page the supervisor writes meanwhile a copy-on-write fault, which
/// cost the supervisor more than the helper saved (measured: its own work 1.1 → 2.0 ms).
/// Sharing the memory is sound because the helper only reads its plan (boxed here, untouched
/// until it is reaped) and makes raw system calls through rustix, which set no `errno` (the
/// one piece of the supervisor's thread state it would otherwise write); every signal is
/// blocked in it, so no handler of the supervisor's runs on its stack.
pub fn spawn_namespace_helper(plan: NamespacePlan) -> io::Result<NamespaceHelper> {
    let plan = Box::new(plan);
    let base = map_guarded_stacks(1, HELPER_STACK).map_err(io::Error::from_raw_os_error)?;
    let mut helper = NamespaceHelper {
        pid: 0,
        plan,
        stack: (base, HELPER_STACK),
        reaped: true,
    };
    let old = block_all_signals()?;
    // SAFETY: the child runs on the stack mapped above with the boxed plan; both stay valid
    // and unmodified until it is reaped (`NamespaceHelper` owns them and reaps before it
    // releases them); see above for why the shared memory is sound.
    let spawned =
        unsafe { clone_sharing_memory(namespace_helper_entry, base + HELPER_STACK, &*helper.plan) };
    restore_signals(&old);
    helper.pid = spawned.map_err(io::Error::from_raw_os_error)?;
    helper.reaped = false;
    move_off_this_cpu(helper.pid);
    Ok(helper)
}

/// Let a child this process has just started run beside it: see [`garuda_policy::beside`],
/// which says why (the namespace helper and landlock's outer).
pub fn move_off_this_cpu(pid: libc::pid_t) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        garuda_policy::beside::move_off_this_cpu(pid);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// Block every signal in this thread; returns the mask to restore.
fn block_all_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `all` is a valid sigset_t.
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: as above; `old` receives the current mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to two sigset_t.
    let r = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(old)
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: `old` is the mask `block_all_signals` saved; no output wanted.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

extern "C" fn namespace_helper_entry(plan: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `plan` is the boxed plan of `spawn_namespace_helper`, alive and unmodified until
    // this process has exited and been reaped.
    let plan = unsafe { &*(plan as *const NamespacePlan) };
    namespace_helper_main(plan)
}

/// The helper: raw system calls through rustix only (see [`spawn_namespace_helper`]); any
/// failure ends it, which ends the channel.
fn namespace_helper_main(plan: &NamespacePlan) -> ! {
    use rustix::thread::UnshareFlags;
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid().map(rustix::process::Pid::as_raw_pid) != Some(plan.parent_pid) {
        exit_now(SETUP_FAILED_EXIT)
    }
    // Its descriptor table is a copy of the supervisor's: keep only the channel, so that no
    // pipe or socket of the supervisor's stays open in it (a reader would wait for its end).
    // `close_range` with first ≤ last does not fail, so `errno` is never written.
    let channel = plan.handoff.channel as u32;
    // SAFETY: close_range with integer arguments, in this process's own descriptor table.
    unsafe {
        if channel > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, channel - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, channel + 1, u32::MAX, 0u32);
    }
    // SAFETY: a new user and network namespace for this process alone (it shares its memory
    // with the supervisor, not its thread group or files).
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
        .is_err()
    {
        exit_now(SETUP_FAILED_EXIT)
    }
    if write_id_maps(&plan.uid_map, &plan.gid_map).is_err() || loopback_up().is_err() {
        exit_now(SETUP_FAILED_EXIT)
    }
    for namespace in [c"/proc/self/ns/user", c"/proc/self/ns/net"] {
        let sent = open_read(namespace)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
            .and_then(|fd| send_fd(plan.handoff.channel, &fd));
        if sent.is_err() {
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    dns_handoff(&plan.handoff);
    exit_now(0)
}

fn add_rule_at(ruleset: RawFd, path: &CStr, access: u64) -> Result<(), i32> {
    use rustix::fs::{Mode, OFlags};
    let anchor = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| e.raw_os_error())?;
    let attr = LandlockPathBeneathAttr {
        allowed_access: access,
        parent_fd: anchor.as_raw_fd(),
    };
    // SAFETY: `attr` is a valid packed attribute that outlives the call; its descriptor is
    // open (held by `anchor`). No crate serves here: the `landlock` crate allocates.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const LandlockPathBeneathAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(())
}

/// `struct ifreq` with the flags member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfreqFlags {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// A UDP socket to make interface `ioctl`s on (close-on-exec).
fn ioctl_socket() -> Result<OwnedFd, i32> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| e.raw_os_error())
}

/// An interface `ioctl` on `socket` with `req` (read and written), through rustix: a raw
/// system call that sets no `errno`, so it is fit for the helper of
/// [`spawn_namespace_helper`], which shares the supervisor's memory (and its thread's `errno`).
///
/// # Safety
///
/// `OPCODE` must be an interface request that takes a `T` (a `struct ifreq` layout).
unsafe fn interface_ioctl<const OPCODE: rustix::ioctl::Opcode, T>(
    socket: &OwnedFd,
    req: &mut T,
) -> Result<(), i32> {
    // SAFETY: the caller vouches that OPCODE takes a T; `req` is valid and writable.
    unsafe { rustix::ioctl::ioctl(socket, rustix::ioctl::Updater::<OPCODE, T>::new(req)) }
        .map_err(|e| e.raw_os_error())
}

const SIOCGIFFLAGS: rustix::ioctl::Opcode = libc::SIOCGIFFLAGS as rustix::ioctl::Opcode;
const SIOCSIFFLAGS: rustix::ioctl::Opcode = libc::SIOCSIFFLAGS as rustix::ioctl::Opcode;
const SIOCSIFADDR: rustix::ioctl::Opcode = libc::SIOCSIFADDR as rustix::ioctl::Opcode;
const SIOCSIFNETMASK: rustix::ioctl::Opcode = libc::SIOCSIFNETMASK as rustix::ioctl::Opcode;

/// Bring up `lo` in the new network namespace, so servers the command starts on its own
/// loopback (tests of a web project) work; nothing else is reachable from the namespace.
fn loopback_up() -> Result<(), i32> {
    let sock = ioctl_socket()?;
    let mut req = IfreqFlags {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: both requests take a `struct ifreq` with the flags member (`IfreqFlags`).
    unsafe { interface_ioctl::<SIOCGIFFLAGS, _>(&sock, &mut req)? };
    req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: as above.
    unsafe { interface_ioctl::<SIOCSIFFLAGS, _>(&sock, &mut req) }
}

fn close_from(first: u32) {
    // SAFETY: close_range with integer arguments.
    unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
}

/// Mark every descriptor from `first` up close-on-exec. An error is the caller's to refuse:
/// where `close_range` is refused (a container runtime's seccomp profile older than the call
/// answers `EPERM`), going on would hand inherited descriptors to what is executed next.
fn cloexec_from(first: u32) -> Result<(), i32> {
    // SAFETY: close_range with integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r != 0 {
        return Err(errno());
    }
    Ok(())
}

fn init_main(args: &SandboxArgs<'_>) -> ! {
    let plan = args.plan;
    let rep = plan.report_fd;
    // The death signal reaches PID 1 because it comes from outside the namespace.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    {
        use rustix::mount::MountFlags;
        let flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
        if let Err(e) = rustix::mount::mount(c"proc", c"/proc", c"proc", flags, None) {
            report(rep, Stage::MountProc as u32, e.raw_os_error());
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    if let Err(e) = write_file(c"/proc/sys/kernel/pid_max", &plan.pid_max) {
        report(rep, Stage::PidMax as u32, e);
        exit_now(SETUP_FAILED_EXIT)
    }
    for step in &plan.pid1_mounts {
        if let Err(e) = run_mount_step(step) {
            report(rep, Stage::Pid1Mount as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    }
    // SAFETY: the command runs on the second stack outer mapped; `args` is outer's, in place
    // until PID 1 is reaped; `command_main` writes only its own stack (see `SandboxStacks`).
    let cmd = match unsafe { clone_sharing_memory(command_entry, args.command_stack_top, args) } {
        Ok(pid) => pid,
        Err(e) => {
            report(rep, Stage::ForkCommand as u32, e);
            exit_now(SETUP_FAILED_EXIT)
        }
    };
    // PID 1 keeps only the write end (close-on-exec), open until `exit_now` or the exec.
    close_raw(args.sync_read);
    let (stage, e) = become_reaper(plan, cmd);
    report(rep, stage as u32, e);
    // The command must not run under a PID 1 that failed to harden: it is still waiting on
    // the pipe, which closes only when this process is gone.
    if let Some(cmd) = rustix::process::Pid::from_raw(cmd) {
        let _ = rustix::process::kill_process(cmd, rustix::process::Signal::KILL);
    }
    // The write end closes with this process, not before.
    exit_now(SETUP_FAILED_EXIT)
}

/// Format `value` in decimal, NUL-terminated, at the end of `buf`; returns where it starts.
/// No allocation: used after fork.
fn decimal(value: u32, buf: &mut [u8; 12]) -> *const libc::c_char {
    let mut at = buf.len() - 1;
    buf[at] = 0;
    let mut v = value;
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf[at..].as_ptr().cast()
}

/// PID 1, once the command is forked: give up everything it inherited from the supervisor,
/// then execute the start-up program as the reaper ([`REAPER_ARGV0`], [`INIT_PROGRAM`]).
/// Returns only on failure, with the stage and errno.
///
/// Until here PID 1 runs on outer's copy of the supervisor's whole memory (the user's
/// environment, the policy, whatever the allocator freed but did not clear, other threads'
/// stacks), all capabilities in the sandbox's user namespace, no seccomp, no no-new-privs.
/// In a forked child of a multi-threaded process the heap cannot be walked or scrubbed
/// (another thread may have held the allocator's lock at the fork, and freed blocks keep their
/// bytes), so the only sound scrub is `execve`: it replaces the whole address space. Before
/// it, with calls that are async-signal-safe and touch only the plan and the stack:
///
/// - stdio becomes `/dev/null` (PID 1 writes nothing to the command's streams or terminal);
/// - every descriptor above 2 but the report pipe is marked close-on-exec;
/// - `PR_SET_NO_NEW_PRIVS`, every capability dropped as for the command (bounding, ambient,
///   effective, permitted, inheritable; securebits locked);
/// - the command's seccomp program: the reaper needs nothing it refuses (checked by
///   `seccomp::tests::pid1_reaper_calls_are_allowed`);
/// - `execveat` of the start-up program with an empty environment.
fn become_reaper(plan: &NativePlan, cmd: libc::pid_t) -> (Stage, i32) {
    let rep = plan.report_fd;
    let null = match rustix::fs::open(
        c"/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(null) => null,
        Err(e) => return (Stage::Pid1Stdio, e.raw_os_error()),
    };
    // The copies on 0, 1 and 2 are not close-on-exec; `null` itself closes when dropped.
    for dup in STDIO_DUPS {
        if let Err(e) = dup(plan_fd(null.as_raw_fd())) {
            return (Stage::Pid1Stdio, e.raw_os_error());
        }
    }
    drop(null);
    // Every descriptor above 2 closes at exec (the executable's handle is used by the exec
    // itself, the sync pipe's end must close then), except the report pipe.
    if let Err(e) = cloexec_from(3) {
        return (Stage::Pid1Stdio, e);
    }
    if let Err(e) = rustix::io::fcntl_setfd(plan_fd(rep), rustix::io::FdFlags::empty()) {
        return (Stage::Pid1Stdio, e.raw_os_error());
    }
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        return (Stage::Pid1NoNewPrivs, e.raw_os_error());
    }
    if let Err(e) = drop_capabilities(plan.cap_last_cap) {
        return (Stage::Pid1DropCaps, e);
    }
    if let Err(e) = install_seccomp(&plan.seccomp) {
        return (Stage::Pid1Seccomp, e);
    }
    let mut pid_buf = [0u8; 12];
    let mut fd_buf = [0u8; 12];
    let argv = [
        REAPER_ARGV0.as_ptr(),
        decimal(cmd as u32, &mut pid_buf),
        decimal(rep as u32, &mut fd_buf),
        std::ptr::null(),
    ];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: argv and envp are NULL-terminated arrays of NUL-terminated strings on this
    // stack (or static); the empty path with AT_EMPTY_PATH executes the handle itself.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            plan.reaper_exe,
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    (Stage::Pid1Exec, errno())
}

// SECBIT_NOROOT | _LOCKED, NO_SETUID_FIXUP | _LOCKED, KEEP_CAPS_LOCKED,
// NO_CAP_AMBIENT_RAISE | _LOCKED: uid 0 inside the sandbox never regains capabilities.
const SECURE_BITS_LOCKED_DOWN: u32 = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;

fn drop_capabilities(cap_last_cap: u32) -> Result<(), i32> {
    use rustix::thread::{CapabilitiesSecureBits, CapabilitySet, CapabilitySets};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    for cap in 0..=cap_last_cap.min(63) {
        rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(
            1 << cap,
        ))
        .map_err(errno)?;
    }
    rustix::thread::set_capabilities_secure_bits(CapabilitiesSecureBits::from_bits_retain(
        SECURE_BITS_LOCKED_DOWN,
    ))
    .map_err(errno)?;
    rustix::thread::clear_ambient_capability_set().map_err(errno)?;
    rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(errno)
}

fn install_seccomp(program: &[sock_filter]) -> Result<(), i32> {
    // seccompiler's call sets no-new-privs (already set by both callers) and installs the
    // prepared program: two system calls on the plan's data, nothing allocated.
    match seccompiler::apply_filter(program) {
        Ok(()) => Ok(()),
        Err(seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e)) => {
            Err(e.raw_os_error().unwrap_or(libc::EINVAL))
        }
        Err(_) => Err(libc::EINVAL),
    }
}

fn command_main(plan: &NativePlan, sync: RawFd) -> ! {
    let rep = plan.report_fd;
    // The command dies if init dies.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // The supervisor ignores SIGPIPE and may block signals in its threads; a command must
    // start with default dispositions and an empty mask, as after a normal spawn.
    // SAFETY: resetting dispositions and the mask with valid arguments.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            fail(rep, Stage::Signals as u32);
        }
    }
    // The supervisor's CPUs (outer, whose mask this process inherited, was moved off one of
    // them). Best effort, as the move: only a CPU gone offline since can refuse it.
    if let Some(cpus) = &plan.affinity {
        let _ = rustix::thread::sched_setaffinity(None, cpus);
    }
    if let Err(e) = rustix::process::chdir(plan.cwd.as_c_str()) {
        report(rep, Stage::Chdir as u32, e.raw_os_error());
        exit_now(SETUP_FAILED_EXIT)
    }
    if let Err(e) = rustix::thread::set_no_new_privs(true) {
        report(rep, Stage::NoNewPrivs as u32, e.raw_os_error());
        exit_now(SETUP_FAILED_EXIT)
    }
    if let Err(e) = drop_capabilities(plan.cap_last_cap) {
        report(rep, Stage::DropCaps as u32, e);
        exit_now(SETUP_FAILED_EXIT)
    }
    // SAFETY: the ruleset descriptor was created by the parent and is inherited.
    if unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            plan.landlock_ruleset,
            0u32,
        )
    } != 0
    {
        fail(rep, Stage::Landlock as u32);
    }
    // No descriptor of the supervisor reaches the command: everything above stdio is closed at
    // exec (the report pipe too, which tells the parent exec succeeded).
    if let Err(e) = cloexec_from(3) {
        report(rep, Stage::CloseOnExec as u32, e);
        exit_now(SETUP_FAILED_EXIT)
    }
    // The filter is the last step before execve and allows execve.
    if let Err(e) = install_seccomp(&plan.seccomp) {
        report(rep, Stage::Seccomp as u32, e);
        exit_now(SETUP_FAILED_EXIT)
    }
    // Wait until PID 1 has executed the reaper: its end of the pipe closes then.
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(plan_fd(sync), &mut byte) {
            Ok(0) => break,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                report(rep, Stage::Pid1Sync as u32, e.raw_os_error());
                exit_now(SETUP_FAILED_EXIT)
            }
        }
    }
    if let Some((read_end, write_end)) = plan.release {
        close_raw(write_end);
        let mut go = [0u8; 1];
        match rustix::io::retry_on_intr(|| rustix::io::read(plan_fd(read_end), &mut go)) {
            Ok(1) => {}
            // The supervisor closed the pipe without releasing the command.
            Ok(_) => {
                report(rep, Stage::Release as u32, libc::ECANCELED);
                exit_now(SETUP_FAILED_EXIT)
            }
            Err(e) => {
                report(rep, Stage::Release as u32, e.raw_os_error());
                exit_now(SETUP_FAILED_EXIT)
            }
        }
    }
    let rep = match plan.pass_fd {
        None => rep,
        Some(fd) => match place_channel(fd, rep) {
            Ok(rep) => rep,
            Err(e) => {
                report(rep, Stage::PassFd as u32, e);
                exit_now(SETUP_FAILED_EXIT)
            }
        },
    };
    // SAFETY: program, argv and envp are NUL-terminated strings and NULL-terminated pointer
    // arrays owned by the plan.
    unsafe {
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        )
    };
    let e = errno();
    report(rep, Stage::Exec as u32, e);
    let code = if e == libc::ENOENT { 127 } else { 126 };
    exit_now(code)
}

/// Puts `fd` at [`CHANNEL_FD`], not close-on-exec, as the last step before `execve` (every
/// other descriptor is close-on-exec by then). The report pipe `rep` is moved first if it sits
/// at that number, so a failed `execve` is still reported on the pipe, never on the channel.
/// Returns where the report pipe is now. Async-signal-safe.
fn place_channel(fd: RawFd, rep: RawFd) -> Result<RawFd, i32> {
    use std::os::fd::IntoRawFd;
    let raw = |e: rustix::io::Errno| e.raw_os_error();
    let mut rep = rep;
    if rep == CHANNEL_FD {
        // The copy is close-on-exec like the original, and stays open until the exec.
        rep = rustix::io::fcntl_dupfd_cloexec(plan_fd(rep), CHANNEL_FD + 1)
            .map_err(raw)?
            .into_raw_fd();
    }
    if fd == CHANNEL_FD {
        // Already in place: clear close-on-exec.
        return rustix::io::fcntl_setfd(plan_fd(fd), rustix::io::FdFlags::empty())
            .map(|()| rep)
            .map_err(raw);
    }
    // SAFETY: dup2 on integer descriptors: `fd` is the plan's, open, and `CHANNEL_FD` is the
    // slot the command gets it at; the copy is not close-on-exec.
    if unsafe { libc::dup2(fd, CHANNEL_FD) } < 0 {
        return Err(errno());
    }
    Ok(rep)
}

/// Opens `path` with `O_PATH` (close-on-exec) and places the handle at descriptor `fd`, for a
/// bind whose source must be the place the policy named ([`open_path_no_links`]).
fn hold_at(path: &CStr, fd: RawFd) -> Result<(), i32> {
    let held = open_path_no_links(path)?;
    if held.as_raw_fd() == fd {
        // Already where it must be: keep it open past this function.
        let _ = std::os::fd::IntoRawFd::into_raw_fd(held);
        return Ok(());
    }
    // SAFETY: dup3 on integer descriptors: `held` is open, and `fd` is the slot the executor
    // reserved for this handle (rustix's dup3 needs the target as an owned descriptor).
    if unsafe { libc::dup3(held.as_raw_fd(), fd, libc::O_CLOEXEC) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Opens the absolute `path` with `O_PATH` (close-on-exec), refusing a symbolic link in any
/// of its components (`ELOOP`). The policy's paths are canonical, so a link there now was put
/// there after the policy was built: by a command running at the same time, which swaps a
/// writable hole (`sub/.git/objects`) or a pinned folder for a link to the main repository's
/// hooks or to the home, so that the read-write bind would land there. Async-signal-safe: no
/// allocation.
///
/// One `openat2` with `RESOLVE_NO_SYMLINKS` does it (Linux 5.6); where that call is missing or
/// refused by an outer seccomp filter (`ENOSYS`, `EPERM`: older container runtimes), the path
/// is walked one component at a time instead ([`open_path_no_links_by_walk`]).
fn open_path_no_links(path: &CStr) -> Result<OwnedFd, i32> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, CWD};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let bytes = path.to_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(libc::EINVAL);
    }
    // A canonical path has neither `.` nor `..`; either would walk around the check.
    if bytes.split(|b| *b == b'/').any(|p| p == b"." || p == b"..") {
        return Err(libc::EINVAL);
    }
    // Without `O_NOFOLLOW`: with it and `O_PATH`, a final link would be opened as itself.
    let held = match rustix::fs::openat2(
        CWD,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(held) => held,
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            return open_path_no_links_by_walk(path)
        }
        Err(e) => return Err(errno(e)),
    };
    // Belt and braces: the call above never returns a link.
    let st = rustix::fs::fstat(&held).map_err(errno)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(libc::ELOOP);
    }
    Ok(held)
}

/// [`open_path_no_links`] without `openat2`: one `openat(O_PATH | O_NOFOLLOW)` per component
/// from `/` (`ENOTDIR` for a link on the way, `ELOOP` at the end). The path is absolute and
/// has no `.` or `..` (checked by the caller).
fn open_path_no_links_by_walk(path: &CStr) -> Result<OwnedFd, i32> {
    use rustix::fs::{FileType, Mode, OFlags};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let mut dir = rustix::fs::open(
        c"/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let mut parts = path
        .to_bytes()
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .peekable();
    // Each name is copied to this stack buffer and passed as a `CStr`: nothing is allocated.
    let mut name = [0u8; 256];
    while let Some(part) = parts.next() {
        if part.len() >= name.len() {
            return Err(libc::ENAMETOOLONG);
        }
        name[..part.len()].copy_from_slice(part);
        name[part.len()] = 0;
        let name = CStr::from_bytes_with_nul(&name[..=part.len()]).map_err(|_| libc::EINVAL)?;
        // `O_NOFOLLOW` with `O_PATH` opens a link as itself, which `O_DIRECTORY` refuses.
        let on_the_way = if parts.peek().is_some() {
            OFlags::DIRECTORY
        } else {
            OFlags::empty()
        };
        dir = rustix::fs::openat(
            &dir,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC | on_the_way,
            Mode::empty(),
        )
        .map_err(errno)?;
    }
    let st = rustix::fs::fstat(&dir).map_err(errno)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        return Err(libc::ELOOP);
    }
    Ok(dir)
}

fn run_mount_step(step: &MountStep) -> Result<(), i32> {
    use rustix::fs::{Mode, OFlags};
    use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
    // rustix's calls are one system call each on the plan's C strings (no copy, no allocation:
    // a `&CStr` path is passed as it is), so they are fit for this forked child.
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let flags = |bits: libc::c_ulong| MountFlags::from_bits_retain(bits as libc::c_uint);
    match step {
        MountStep::MakeRootPrivate => rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )
        .map_err(errno),
        MountStep::RecursiveReadOnly => mount_setattr_readonly(c"/"),
        MountStep::Tmpfs {
            target,
            flags: tmpfs_flags,
            options,
        } => rustix::mount::mount(
            c"tmpfs",
            target.as_c_str(),
            c"tmpfs",
            flags(*tmpfs_flags),
            Some(options.as_c_str()),
        )
        .map_err(errno),
        MountStep::Overlay { target, options } => rustix::mount::mount(
            c"overlay",
            target.as_c_str(),
            c"overlay",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(options.as_c_str()),
        )
        .map_err(errno),
        MountStep::Devpts { target } => rustix::mount::mount(
            c"devpts",
            target.as_c_str(),
            c"devpts",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            Some(c"newinstance,ptmxmode=0666,mode=620"),
        )
        .map_err(errno),
        MountStep::Mkdir { path, mode } => {
            match rustix::fs::mkdir(path.as_c_str(), Mode::from_raw_mode(*mode)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
                Err(e) => Err(errno(e)),
            }
        }
        MountStep::CreateFile { path, mode } => rustix::fs::open(
            path.as_c_str(),
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(*mode),
        )
        .map(drop)
        .map_err(errno),
        MountStep::Symlink { target, link } => {
            rustix::fs::symlink(target.as_c_str(), link.as_c_str()).map_err(errno)
        }
        MountStep::Bind {
            source,
            target,
            remount_flags,
        } => {
            rustix::mount::mount_bind_recursive(source.as_c_str(), target.as_c_str())
                .map_err(errno)?;
            // A bind remount changes only the new mount's flags.
            rustix::mount::mount_remount(
                target.as_c_str(),
                MountFlags::BIND | flags(*remount_flags),
                c"",
            )
            .map_err(errno)
        }
        MountStep::Hold { path, fd } => hold_at(path, *fd),
        MountStep::Unlink { path } => rustix::fs::unlink(path.as_c_str()).map_err(errno),
        MountStep::PivotRoot { new_root } => {
            rustix::process::chdir(new_root.as_c_str()).map_err(errno)?;
            // Stacking the old root under the new one and detaching it needs no directory
            // for the old root inside the view (see pivot_root(2), "pivot_root(\".\", \".\")").
            rustix::process::pivot_root(c".", c".").map_err(errno)?;
            rustix::mount::unmount(c".", UnmountFlags::DETACH).map_err(errno)?;
            rustix::process::chdir(c"/").map_err(errno)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy bridge (`crate::netbridge`): the sandbox side runs in forked children (no
// allocation); the supervisor side are ordinary wrappers.

/// Backlog of the bridge's listener: connections wait there until the forwarder takes them.
const BRIDGE_BACKLOG: libc::c_int = 128;

/// In a child of the supervisor, inside the new network namespace (loopback up): listen on
/// `127.0.0.1:port`, send the listener over the channel, close it, and wait for the
/// supervisor's go-ahead byte. Async-signal-safe: system calls on stack data only.
pub(crate) fn bridge_handoff(bridge: &BridgeHandoff) -> Result<(), (Stage, i32)> {
    let result = bridge_handoff_inner(bridge);
    // Closing our end of the channel: the command must not inherit it.
    close_raw(bridge.channel);
    result
}

fn bridge_handoff_inner(bridge: &BridgeHandoff) -> Result<(), (Stage, i32)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let listen_err = |e: rustix::io::Errno| (Stage::BridgeListen, e.raw_os_error());
    let listener = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(listen_err)?;
    let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, bridge.port);
    rustix::net::bind(&listener, &addr).map_err(listen_err)?;
    rustix::net::listen(&listener, BRIDGE_BACKLOG).map_err(listen_err)?;
    // The supervisor has its own copy once sent (or the send failed); ours closes on return.
    send_fd(bridge.channel, &listener).map_err(|e| (Stage::BridgeHandoff, e))?;
    let mut go = [0u8; 1];
    match rustix::io::retry_on_intr(|| rustix::io::read(plan_fd(bridge.channel), &mut go)) {
        Ok(1) => Ok(()),
        // The supervisor closed the channel: it could not start the forwarder.
        Ok(_) => Err((Stage::BridgeHandoff, libc::ECONNABORTED)),
        Err(e) => Err((Stage::BridgeHandoff, e.raw_os_error())),
    }
}

/// Port of the resolver stub's sockets (DNS).
const DNS_PORT: u16 = 53;

/// In a child of the supervisor, inside the new network namespace (loopback up): make the
/// resolver stub's sockets and send them over the channel, then close it (see
/// [`DnsHandoff`]). Never fails: an address that cannot be set up is skipped.
/// Async-signal-safe: system calls on stack data only.
pub(crate) fn dns_handoff(dns: &DnsHandoff) {
    for (index, address) in dns.addrs.iter().enumerate() {
        let Some(address) = address else {
            continue;
        };
        if let Ok(socket) = dns_socket(index, *address) {
            // The supervisor has its own copy once sent (or the send failed); ours closes.
            let _ = send_fd(dns.channel, &socket);
        }
    }
    // Closing our end of the channel: the supervisor sees the end of the handoff, and the
    // command must not inherit it.
    close_raw(dns.channel);
}

/// A UDP socket bound to port 53 of `address` in the current network namespace; an IPv4
/// address outside loopback is added to `lo` first (alias number `index + 1`).
fn dns_socket(index: usize, address: std::net::IpAddr) -> Result<OwnedFd, i32> {
    use std::net::{IpAddr, SocketAddr};
    match address {
        IpAddr::V4(v4) => {
            if !v4.is_loopback() {
                add_loopback_alias(index, v4.octets())?;
            }
            bound_udp(SocketAddr::new(IpAddr::V4(v4), DNS_PORT))
        }
        IpAddr::V6(v6) if v6.is_loopback() => bound_udp(SocketAddr::new(IpAddr::V6(v6), DNS_PORT)),
        // No way to make another IPv6 address local without netlink: not listened on.
        IpAddr::V6(_) => Err(libc::EADDRNOTAVAIL),
    }
}

fn sockaddr_v4(octets: [u8; 4], port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes(octets).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A close-on-exec UDP socket bound to `addr` (IPv6 sockets are IPv6 only).
fn bound_udp(addr: std::net::SocketAddr) -> Result<OwnedFd, i32> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let errno = |e: rustix::io::Errno| e.raw_os_error();
    let family = if addr.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let socket = rustix::net::socket_with(family, SocketType::DGRAM, SocketFlags::CLOEXEC, None)
        .map_err(errno)?;
    if addr.is_ipv6() {
        let _ = rustix::net::sockopt::set_ipv6_v6only(&socket, true);
    }
    rustix::net::bind(&socket, &addr).map_err(errno)?;
    Ok(socket)
}

/// `struct ifreq` with the address member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfreqAddr {
    name: [u8; 16],
    addr: libc::sockaddr_in,
    _pad: [u8; 8],
}

/// Add `octets` to `lo` as the alias `lo:N` (N = `index + 1`) with a `/32` mask: the address
/// becomes local in this network namespace, and no other. `SIOCSIFADDR` gives a new alias the
/// classful mask of its address (a `/8` for `10.x`, which on a loopback device would make the
/// whole `/8` local), so `SIOCSIFNETMASK` narrows it right after, before anything runs in the
/// namespace. The label must carry the `:N`: `SIOCSIFADDR` on plain `lo` would replace
/// `127.0.0.1`.
fn add_loopback_alias(index: usize, octets: [u8; 4]) -> Result<(), i32> {
    let digit = u8::try_from(index + 1)
        .ok()
        .filter(|d| *d <= 9)
        .ok_or(libc::EINVAL)?;
    let mut req = IfreqAddr {
        name: [0; 16],
        addr: sockaddr_v4(octets, 0),
        _pad: [0; 8],
    };
    req.name[..4].copy_from_slice(&[b'l', b'o', b':', b'0' + digit]);
    let sock = ioctl_socket()?;
    // SAFETY: both requests take a `struct ifreq` with the address member (`IfreqAddr`).
    unsafe { interface_ioctl::<SIOCSIFADDR, _>(&sock, &mut req)? };
    req.addr = sockaddr_v4([255; 4], 0);
    // SAFETY: as above.
    unsafe { interface_ioctl::<SIOCSIFNETMASK, _>(&sock, &mut req) }
}

/// Send `fd` over the unix socket `channel` (`SCM_RIGHTS`, with a one-byte payload).
/// Async-signal-safe.
fn send_fd(channel: RawFd, fd: &OwnedFd) -> Result<(), i32> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::os::fd::AsFd;
    // The control message's room is on this stack: nothing is allocated.
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(libc::ENOBUFS);
    }
    let payload = [b'L'];
    match rustix::io::retry_on_intr(|| {
        rustix::net::sendmsg(
            plan_fd(channel),
            &[io::IoSlice::new(&payload)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
    }) {
        Ok(1) => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e.raw_os_error()),
    }
}

/// Receive one descriptor sent with `SCM_RIGHTS` on `channel` (made close-on-exec on
/// arrival). `Ok(None)` at end of stream: the sender ended without sending. Any further
/// descriptor in the same message is closed.
pub fn recv_fd(channel: &impl std::os::fd::AsFd) -> io::Result<Option<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::io::retry_on_intr(|| {
        rustix::net::recvmsg(
            channel,
            &mut [io::IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
    })?;
    // Every descriptor the kernel installed is owned from here on; extra ones (none are ever
    // sent) are closed when `received` drops.
    let mut received: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            received.extend(fds);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::other("the descriptor message was truncated"));
    }
    let mut received = received.into_iter();
    match received.next() {
        Some(fd) => Ok(Some(fd)),
        None if msg.bytes == 0 => Ok(None),
        None => Err(io::Error::other("a message without a descriptor")),
    }
}

/// `poll(2)` on `fds` for at most `timeout_ms` milliseconds (-1: no limit); returns how many
/// entries have events. `EINTR` is returned as an error of kind `Interrupted`.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfd entries.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    cvt(n as libc::c_long).map(|n| n as usize)
}

/// A non-blocking, close-on-exec unix stream socket connected to `path`. A unix connect
/// completes at once or fails; `WouldBlock` means the listener's backlog is full.
pub fn unix_connect_nonblocking(path: &std::path::Path) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} cannot be a unix socket address", path.display()),
        )
    };
    if path.as_os_str().is_empty() {
        return Err(invalid());
    }
    let addr = SocketAddrUnix::new(path).map_err(|_| invalid())?;
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::io::retry_on_intr(|| rustix::net::connect(&sock, &addr))?;
    Ok(sock)
}

// ---------------------------------------------------------------------------------------------
// bubblewrap's spawn hook.

/// Namespaces the spawn hook makes before it execs bwrap inside them (no extra `exec`): a user
/// namespace (the user mapped to itself), plus
///
/// - a mount namespace with the staged view at the project's path, when `mount` is set (bwrap
///   0.8 has no `--overlay`);
/// - always a network namespace with loopback up, and in it the proxy bridge's listener
///   handed to the supervisor when `bridge` is set, or the resolver stub's sockets when `dns`
///   is (bwrap then runs without `--unshare-net` and inherits it; it has no way to hand out a
///   socket of the namespace it makes itself).
pub struct BwrapNamespaces {
    /// Contents of `/proc/self/uid_map` (the user mapped to itself).
    pub uid_map: Vec<u8>,
    /// Contents of `/proc/self/gid_map`.
    pub gid_map: Vec<u8>,
    /// The staged view: an [`MountStep::Overlay`] or a [`MountStep::Bind`] of a copy.
    pub mount: Option<MountStep>,
    /// The proxy bridge's listener handoff.
    pub bridge: Option<BridgeHandoff>,
    /// With the network off: the resolver stub's sockets handoff.
    pub dns: Option<DnsHandoff>,
    /// The process limit as a PID namespace of the hook's own (Linux 6.14 and later): the
    /// contents written to its `pid_max`. bwrap then runs as PID 1 of that namespace, and
    /// every process it makes (its own PID namespace is nested inside) takes a pid there.
    pub pid_max: Option<Vec<u8>>,
    /// A user and a network namespace made ahead by [`spawn_namespace_helper`] (user, net;
    /// close-on-exec), with their id maps, loopback and stub's sockets: the hook joins them
    /// instead of making its own (network off only).
    pub ahead: Option<(RawFd, RawFd)>,
}

/// Install a `pre_exec` hook on a `std::process::Command` that, in the child, clears
/// close-on-exec on `keep` (the descriptors bubblewrap reads, like `--add-seccomp-fd`), sets
/// `RLIMIT_NPROC` when given, joins a cgroup by writing `0` to `cgroup_procs` when given,
/// makes the namespaces of [`BwrapNamespaces`] (always: bwrap's argument vector has no
/// `--unshare-net`, so the network namespace is this one), then (inside the staged view, if
/// any) opens each path of `holds` at its descriptor (one the caller reserved), refusing a
/// link in any component, for bwrap to bind from `/proc/self/fd/N`: it would follow a link in
/// a path; and last, with [`BwrapNamespaces::pid_max`], makes bwrap PID 1 of a PID namespace
/// of its own with that `pid_max` ([`enter_pid_namespace`]).
pub fn bwrap_pre_exec(
    cmd: &mut std::process::Command,
    keep: Vec<RawFd>,
    nproc: Option<u64>,
    cgroup_procs: Option<CString>,
    namespaces: BwrapNamespaces,
    holds: Vec<(CString, RawFd)>,
) {
    use std::os::unix::process::CommandExt;
    // Taken here, in the supervisor: the hook runs in its child.
    let supervisor = current_pid();
    let hook = move || -> io::Result<()> {
        // No descriptor the supervisor inherited or opened reaches bwrap (and so the command)
        // except the ones bwrap must read.
        cloexec_from(3).map_err(io::Error::from_raw_os_error)?;
        for fd in &keep {
            clear_cloexec(*fd)?;
        }
        if let Some(limit) = nproc {
            let rl = rustix::process::Rlimit {
                current: Some(limit),
                maximum: Some(limit),
            };
            rustix::process::setrlimit(rustix::process::Resource::Nproc, rl)?;
        }
        if let Some(path) = &cgroup_procs {
            write_file(path, b"0").map_err(io::Error::from_raw_os_error)?;
        }
        let ns = &namespaces;
        // The network namespace is always the hook's: bwrap runs without `--unshare-net`.
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
        if ns.mount.is_some() {
            flags |= libc::CLONE_NEWNS;
        }
        if ns.pid_max.is_some() {
            flags |= libc::CLONE_NEWPID;
        }
        if let Some((user, net)) = ns.ahead {
            // As `outer_main` does: the user namespace first (it owns the network namespace),
            // each call naming the type it expects.
            // SAFETY: setns on descriptors open in this child (close-on-exec: they close at
            // bwrap's exec) with a namespace type; no memory is passed.
            let joined = unsafe {
                libc::setns(user, libc::CLONE_NEWUSER) == 0
                    && libc::setns(net, libc::CLONE_NEWNET) == 0
            };
            if !joined {
                return Err(io::Error::last_os_error());
            }
            let rest = flags & !(libc::CLONE_NEWUSER | libc::CLONE_NEWNET);
            if rest != 0 {
                // SAFETY: unshare takes flags only.
                cvt(unsafe { libc::unshare(rest) } as libc::c_long)?;
            }
        } else {
            // SAFETY: unshare takes flags only.
            cvt(unsafe { libc::unshare(flags) } as libc::c_long)?;
            write_id_maps(&ns.uid_map, &ns.gid_map).map_err(io::Error::from_raw_os_error)?;
        }
        if let Some(mount) = &ns.mount {
            run_mount_step(&MountStep::MakeRootPrivate).map_err(io::Error::from_raw_os_error)?;
            run_mount_step(mount).map_err(io::Error::from_raw_os_error)?;
        }
        if ns.ahead.is_none() {
            loopback_up().map_err(io::Error::from_raw_os_error)?;
        }
        if let Some(bridge) = &ns.bridge {
            bridge_handoff(bridge).map_err(|(_, e)| io::Error::from_raw_os_error(e))?;
        }
        if let Some(dns) = &ns.dns {
            dns_handoff(dns);
        }
        for (path, fd) in &holds {
            hold_at(path, *fd).map_err(io::Error::from_raw_os_error)?;
            clear_cloexec(*fd)?;
        }
        if let Some(pid_max) = &ns.pid_max {
            // Returns only in the new namespace's PID 1, which goes on to execute bwrap.
            enter_pid_namespace(pid_max, supervisor)?;
        }
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only calls close_range, fcntl, setrlimit,
    // open, openat, fstat, dup3, write, read, close, setns, unshare, mount, socket, ioctl, setsockopt,
    // bind, listen, sendmsg, prctl, getppid, pipe2, fork, poll, sigaction, waitpid, kill and
    // _exit on data captured before the fork; it allocates nothing.
    unsafe { cmd.pre_exec(hook) };
}

/// The bubblewrap spawn hook's last step when the process limit is a PID namespace of its own
/// (already unshared with the hook's other namespaces): fork, so that the child is PID 1 of
/// that namespace. The child bounds the namespace's `pid_max` and returns, and the spawn
/// executes bwrap in it. This process (the one `std` spawned, whose pid the executor waits
/// for and kills) never returns: it waits for bwrap and exits as bwrap did.
///
/// Why not the `pids` cgroup bubblewrap used to join as root: joining a cgroup on this
/// machine's cgroup v1 hierarchy waits for an RCU grace period after any idle moment (6–14 ms
/// per command), and `RLIMIT_NPROC` does not bind root. A namespace's `pid_max` binds
/// everyone, costs one fork, and its PID 1 leaving kills everything still in it.
fn enter_pid_namespace(pid_max: &[u8], supervisor: libc::pid_t) -> io::Result<()> {
    // This process, not bwrap, is now the supervisor's child, and bwrap's `--die-with-parent`
    // ties bwrap to it: it must die with the supervisor as bwrap did, or a supervisor killed
    // outright (`SIGKILL`, the OOM killer) would leave the command running, unwatched and
    // with no timeout. If the supervisor died before the death signal was set, this process
    // has another parent by now.
    use rustix::process::{set_parent_process_death_signal, Signal};
    set_parent_process_death_signal(Some(Signal::KILL))?;
    if rustix::process::getppid().map(rustix::process::Pid::as_raw_pid) != Some(supervisor) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // The life line: while this process lives, the child's read end sees no hang-up.
    let (life_read, life_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: fork in the spawned child, which has one thread; both sides make only
    // async-signal-safe calls on data prepared before the spawn.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // PID 1 of the namespace. Its parent's death (a SIGKILL at the timeout or from the
        // supervisor's signal forwarding) kills it, and with it the whole namespace.
        set_parent_process_death_signal(Some(Signal::KILL))?;
        drop(life_write);
        // The parent may have died before the death signal was set: then the write end has
        // no holder left and the read end reports a hang-up. (`getppid` cannot tell: PID 1 of
        // a namespace always sees 0.)
        let mut probe = [rustix::event::PollFd::new(
            &life_read,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if rustix::event::poll(&mut probe, Some(&zero))? != 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Kept open (close-on-exec) until bwrap executes, as the write end's holder expects.
        let _ = std::os::fd::IntoRawFd::into_raw_fd(life_read);
        write_file(c"/proc/sys/kernel/pid_max", pid_max).map_err(io::Error::from_raw_os_error)?;
        return Ok(());
    }
    drop(life_read);
    wait_for_pid1(pid, std::os::fd::IntoRawFd::into_raw_fd(life_write))
}

/// The spawned process's part once PID 1 of its namespace exists: keep nothing but the life
/// line, wait for PID 1 (bwrap), and end the way it ended.
fn wait_for_pid1(pid1: libc::pid_t, life_write: RawFd) -> ! {
    // Terminal signals are the supervisor's to handle (it forwards a SIGKILL here); the
    // supervisor's own handlers are still installed in this copy of it, so set each one this
    // process could receive from the terminal or a dying pipe to "ignore".
    for signal in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGHUP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        // SAFETY: `signal` with a constant disposition.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    // SIGTERM, the one forwarded signal not ignored above, gets its default: the copy of the
    // supervisor's forwarding handler must not run here (it would SIGKILL whatever pid the
    // supervisor had registered when it forked, maybe another command's). A SIGTERM sent to
    // this process then ends it, and bwrap through the death signal, as one sent to bwrap did
    // when bwrap was the spawned process.
    // SAFETY: `signal` with a constant disposition.
    unsafe { libc::signal(libc::SIGTERM, libc::SIG_DFL) };
    // Only bwrap's copies of std's exec-error pipe, the output pipes and the handles stay
    // open: the executor's readers see the end when bwrap's tree is gone.
    let life = life_write as libc::c_uint;
    // SAFETY: close_range with integer arguments.
    unsafe {
        if life > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, life - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, life + 1, u32::MAX, 0u32);
    }
    let Some(target) = rustix::process::Pid::from_raw(pid1) else {
        exit_now(SETUP_FAILED_EXIT)
    };
    let status = loop {
        match rustix::process::waitpid(Some(target), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => break status.as_raw(),
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => exit_now(SETUP_FAILED_EXIT),
        }
    };
    match decode_status(status) {
        RawExit::Code(code) => exit_now(code),
        RawExit::Signal(signal) => {
            // End by the same signal, without a core file of this copy of the supervisor;
            // `exit_now` ends the process if the signal did not.
            let _ = set_dumpable(false);
            // SAFETY: `signal` with an integer and the default disposition.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
            let _ = kill(current_pid(), signal);
            exit_now(128 + signal)
        }
    }
}

/// Put the spawned host-executor command in its own process group so the whole group can be
/// killed when it ends.
pub fn own_process_group(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
}

// ---------------------------------------------------------------------------------------------
// The confined agent (`crate::agent`): the calls `garuda agent` makes on itself to confine and
// check itself, and the probes of its tests. Ordinary code (no fork): the agent is
// single-threaded when it makes them.

/// `PR_SET_DUMPABLE`: with `false`, no process of the user (not even one with the same uid)
/// can ptrace this one or read its memory through `/proc/PID/mem`, and it leaves no core dump.
pub fn set_dumpable(dumpable: bool) -> io::Result<()> {
    use rustix::process::DumpableBehavior;
    Ok(rustix::process::set_dumpable_behavior(if dumpable {
        DumpableBehavior::Dumpable
    } else {
        DumpableBehavior::NotDumpable
    })?)
}

/// `PR_GET_DUMPABLE`.
pub fn is_dumpable() -> io::Result<bool> {
    Ok(rustix::process::dumpable_behavior()? != rustix::process::DumpableBehavior::NotDumpable)
}

/// `PR_SET_NO_NEW_PRIVS`: no `execve` can grant privileges again (set-user-ID, file
/// capabilities), and seccomp filters can be installed without a capability.
pub fn set_no_new_privs() -> io::Result<()> {
    Ok(rustix::thread::set_no_new_privs(true)?)
}

/// Clear every capability set of this thread: the bounding set (each capability still in it,
/// up to `cap_last_cap`), the ambient set, then inheritable, permitted and effective; and lock
/// the securebits so that uid 0 never regains capabilities. Steps that are already done are
/// skipped, so it succeeds in a process whose parent already dropped everything.
///
/// Dropping a bounding capability and setting securebits need `CAP_SETPCAP`. A process that
/// lacks it (an ordinary user's process outside a user namespace of its own) cannot do either;
/// that `EPERM` is not an error here: the bounding set then stays visibly non-empty in
/// `/proc/self/status` (`CapBnd`), which the agent's self-check refuses.
pub fn clear_capabilities(cap_last_cap: u32) -> io::Result<()> {
    use rustix::thread::{CapabilitiesSecureBits, CapabilitySet, CapabilitySets};
    let tolerated = |r: rustix::io::Result<()>| -> io::Result<()> {
        match r {
            Err(rustix::io::Errno::PERM) => Ok(()),
            other => Ok(other?),
        }
    };
    for cap in 0..=cap_last_cap.min(63) {
        let one = CapabilitySet::from_bits_retain(1 << cap);
        if rustix::thread::capability_is_in_bounding_set(one)? {
            tolerated(rustix::thread::remove_capability_from_bounding_set(one))?;
        }
    }
    let locked = CapabilitiesSecureBits::from_bits_retain(SECURE_BITS_LOCKED_DOWN);
    if !rustix::thread::capabilities_secure_bits()?.contains(locked) {
        tolerated(rustix::thread::set_capabilities_secure_bits(locked))?;
    }
    rustix::thread::clear_ambient_capability_set()?;
    Ok(rustix::thread::set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?)
}

/// `execveat(AT_FDCWD, "", [], [], AT_EMPTY_PATH)`: asks to execute the working directory,
/// which can never succeed (a directory is not executable: `EACCES`). The agent's self-check
/// expects `EPERM`, the seccomp filter's answer, which comes before the kernel looks at the
/// file at all. Returns the error.
pub fn execveat_cwd() -> io::Error {
    let argv = [std::ptr::null::<libc::c_char>()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: an empty path and NULL-terminated, empty argv and envp arrays on the stack.
    let r = unsafe {
        libc::syscall(
            libc::SYS_execveat,
            libc::AT_FDCWD,
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        // Unreachable: a successful execveat does not return.
        return io::Error::other("execveat returned 0");
    }
    io::Error::last_os_error()
}

/// `ptrace(PTRACE_ATTACH, pid)`; on success waits for the attach stop and detaches again
/// (suppressing the `SIGSTOP`), so the target goes on as before. A probe of the agent's tests.
pub fn ptrace_attach_detach(pid: libc::pid_t) -> io::Result<()> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: PTRACE_ATTACH takes a pid; address and data are ignored.
    cvt(unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) })?;
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int for waitpid to fill; __WALL waits for a tracee that is
        // not our child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid || errno() != libc::EINTR {
            break;
        }
    }
    // SAFETY: PTRACE_DETACH with signal 0: the tracee resumes and the SIGSTOP is dropped.
    cvt(unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, null, null) }).map(drop)
}

/// Takes ownership of [`CHANNEL_FD`], where the spawner put the agent's end of its socket
/// pair, after checking that the descriptor is open and is a socket (anything else means the
/// process was not started by the spawner). Call it once.
pub fn take_channel_fd() -> io::Result<OwnedFd> {
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(io::Error::other(format!(
            "descriptor {CHANNEL_FD} was already taken"
        )));
    }
    // SAFETY: `stat` is plain integers; all-zero is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an integer descriptor with a valid buffer.
    cvt(unsafe { libc::fstat(CHANNEL_FD, &mut st) } as libc::c_long)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other(format!(
            "descriptor {CHANNEL_FD} is not a socket"
        )));
    }
    // SAFETY: fcntl with integer arguments; keeps the channel from reaching anything executed
    // (nothing is: execve is refused once confined).
    cvt(unsafe { libc::fcntl(CHANNEL_FD, libc::F_SETFD, libc::FD_CLOEXEC) } as libc::c_long)?;
    // SAFETY: the descriptor is open (fstat succeeded), and this function is the only place
    // that claims it, once per process (`TAKEN`).
    Ok(unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) })
}

/// A close-on-exec copy of `fd` at the lowest free number not below `min`
/// (`F_DUPFD_CLOEXEC`): the spawner keeps the binary's handle off [`CHANNEL_FD`], which the
/// channel takes right before `execve` executes that handle.
pub fn dup_at_least(fd: &OwnedFd, min: RawFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, min)?)
}

/// For tests: from now on `syscall` answers `errno` on the calling thread (a seccomp filter
/// on this thread alone, as an old kernel or a container runtime's filter would answer), so
/// that a fallback can be shown to run. It only ever takes a call away.
#[doc(hidden)]
pub fn answer_on_this_thread(syscall: libc::c_long, errno: i32) -> io::Result<()> {
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(syscall, vec![]);
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| io::Error::other(e.to_string()))?;
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| io::Error::other(e.to_string()))?;
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| io::Error::other(e.to_string()))?;
    seccompiler::apply_filter(&program).map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    fn c(path: &std::path::Path) -> std::ffi::CString {
        std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap()
    }

    /// A started helper may run on every allowed CPU but the one its parent ran on at the
    /// clone; control: a plain `clone(CLONE_VM)` child keeps all of its parent's CPUs. With a
    /// single allowed CPU the helper keeps it.
    #[test]
    fn a_started_helper_is_off_the_supervisors_cpu() {
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        let (_ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let helper = spawn_namespace_helper(NamespacePlan {
            uid_map: id_map(current_uid()),
            gid_map: id_map(current_gid()),
            parent_pid: current_pid(),
            handoff: DnsHandoff {
                addrs: [None; MAX_STUB_RESOLVERS],
                channel: theirs.as_raw_fd(),
            },
        })
        .unwrap();
        drop(theirs);
        let pid = rustix::process::Pid::from_raw(helper.pid).unwrap();
        // Read before `finish` reaps it (an exited, unreaped helper keeps its mask).
        let given = rustix::thread::sched_getaffinity(Some(pid)).unwrap();
        helper.finish();
        let inside =
            (0..rustix::thread::CpuSet::MAX_CPU).all(|c| !given.is_set(c) || allowed.is_set(c));
        assert!(inside, "the helper may only lose CPUs");
        if allowed.count() >= 2 {
            assert_eq!(given.count(), allowed.count() - 1);
        } else {
            assert_eq!(given.count(), allowed.count());
        }
        // Control: a child cloned the same way, not moved, keeps every CPU.
        let stack = map_guarded_stacks(1, HELPER_STACK).unwrap();
        extern "C" fn exit_at_once(_: *mut libc::c_void) -> libc::c_int {
            exit_now(0)
        }
        // SAFETY: the child runs on the stack mapped above and exits at once, writing nothing
        // but that stack; `allowed` is not read by it.
        let child =
            unsafe { clone_sharing_memory(exit_at_once, stack + HELPER_STACK, &allowed) }.unwrap();
        let kept =
            rustix::thread::sched_getaffinity(rustix::process::Pid::from_raw(child)).unwrap();
        reap(child).unwrap();
        // SAFETY: the stack mapped above; its only user has been reaped.
        unsafe { libc::munmap(stack as *mut libc::c_void, HELPER_STACK) };
        assert_eq!(kept.count(), allowed.count());
    }

    /// `real/inner`, `link` → `real` and `last` → `real/inner` in a fresh folder (canonical).
    fn linked_tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        std::os::unix::fs::symlink("real/inner", root.join("last")).unwrap();
        (dir, root)
    }

    /// Both ways of holding a bind source refuse a link anywhere in the path and hold the
    /// real folder; control: the same paths through the links open with a plain `open`.
    #[test]
    fn a_held_path_with_a_link_in_it_is_refused_both_ways() {
        let (_dir, root) = linked_tree();
        let on_the_way = c(&root.join("link/inner"));
        let at_the_end = c(&root.join("last"));
        let real = c(&root.join("real/inner"));
        for path in ["link/inner", "last"] {
            assert!(std::fs::metadata(root.join(path)).unwrap().is_dir());
        }
        assert_eq!(open_path_no_links(&on_the_way).err(), Some(libc::ELOOP));
        assert_eq!(open_path_no_links(&at_the_end).err(), Some(libc::ELOOP));
        assert_eq!(
            open_path_no_links_by_walk(&on_the_way).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            open_path_no_links_by_walk(&at_the_end).err(),
            Some(libc::ELOOP)
        );
        let inode = std::fs::metadata(root.join("real/inner")).unwrap().ino();
        for held in [
            open_path_no_links(&real).unwrap(),
            open_path_no_links_by_walk(&real).unwrap(),
        ] {
            assert_eq!(rustix::fs::fstat(&held).unwrap().st_ino, inode);
        }
        for dotted in ["/tmp/../etc", "/tmp/./x", "relative"] {
            let dotted = std::ffi::CString::new(dotted).unwrap();
            assert_eq!(open_path_no_links(&dotted).err(), Some(libc::EINVAL));
        }
    }

    /// Where `openat2` answers `ENOSYS` (an old kernel) or `EPERM` (an outer seccomp filter),
    /// holding a path walks it instead and still refuses the links: the walk's own errno
    /// (`ENOTDIR` for a link on the way) shows it ran. Control: beside the filter, `openat2`
    /// answers (`ELOOP`). Each filter is installed on a thread of its own.
    #[test]
    fn without_openat2_a_held_path_is_walked_and_links_are_still_refused() {
        let (_dir, root) = linked_tree();
        let on_the_way = c(&root.join("link/inner"));
        let real = c(&root.join("real/inner"));
        assert_eq!(open_path_no_links(&on_the_way).err(), Some(libc::ELOOP));
        for answer in [libc::ENOSYS, libc::EPERM] {
            let (link, held) = std::thread::scope(|s| {
                s.spawn(|| {
                    answer_on_this_thread(libc::SYS_openat2, answer).unwrap();
                    (
                        open_path_no_links(&on_the_way).err(),
                        open_path_no_links(&real).map(drop),
                    )
                })
                .join()
                .unwrap()
            });
            assert_eq!(link, Some(libc::ENOTDIR), "openat2 answering {answer}");
            assert_eq!(held, Ok(()), "openat2 answering {answer}");
        }
    }
}
