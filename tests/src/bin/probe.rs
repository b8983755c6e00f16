//! `garuda-probe`: the program the executor contract suite runs inside each sandbox.
//!
//! Every subcommand attempts exactly one thing and prints one line: `ok`, or `errno=NAME` with
//! the error of the first step that failed (`errno=EPERM`, `errno=EROFS`, …). It exits 0 either
//! way, so a probe that did not run at all (exit 127, "not found") can never look like a pass;
//! bad usage exits 2. A few subcommands report a measurement instead (`status`, `procs`,
//! `env`, `forkbomb`, `spam`).
//!
//! Where the real call would be dangerous on the host, the probe passes a bad argument that
//! the kernel rejects with a harmless, specific error (`EBADF`, `EINVAL`, `EFAULT`, `ESRCH`):
//! the host executor then shows that error, while seccomp answers `EPERM` before the kernel
//! ever looks at the arguments. That tells the filter apart from the kernel.
#![allow(unsafe_code)] // raw system calls through `libc`, each block with a SAFETY note

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// The errno names the suite asserts on; anything else prints as a number.
const ERRNO_NAMES: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::ESRCH, "ESRCH"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::E2BIG, "E2BIG"),
    (libc::EBADF, "EBADF"),
    (libc::ECHILD, "ECHILD"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::EXDEV, "EXDEV"),
    (libc::ENODEV, "ENODEV"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENFILE, "ENFILE"),
    (libc::EMFILE, "EMFILE"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::EROFS, "EROFS"),
    (libc::EPIPE, "EPIPE"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENOTSUP, "EOPNOTSUPP"),
    (libc::EAFNOSUPPORT, "EAFNOSUPPORT"),
    (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
    (libc::ENETDOWN, "ENETDOWN"),
    (libc::ENETUNREACH, "ENETUNREACH"),
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
    (libc::EHOSTUNREACH, "EHOSTUNREACH"),
    (libc::ENODATA, "ENODATA"),
    (libc::ENOTSOCK, "ENOTSOCK"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::ENOEXEC, "ENOEXEC"),
    (libc::EOVERFLOW, "EOVERFLOW"),
    (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    (libc::ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::ENOKEY, "ENOKEY"),
    (libc::ENOTBLK, "ENOTBLK"),
    (libc::ENOPKG, "ENOPKG"),
];

fn errno_name(e: i32) -> String {
    ERRNO_NAMES
        .iter()
        .find(|(n, _)| *n == e)
        .map_or_else(|| e.to_string(), |(_, name)| (*name).to_string())
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The one line a probe prints: `ok` for a non-negative return, else `errno=NAME`.
fn outcome(ret: libc::c_long) -> String {
    if ret < 0 {
        format!("errno={}", errno_name(last_errno()))
    } else {
        "ok".to_string()
    }
}

/// The `fds` line: descriptors above 2 open in this process, by number and target. The
/// numbers are listed first and the listing closed; a number whose link is then gone was the
/// listing's own handle. Nothing else is left out (a handle on some `/proc/N/fd` is reported
/// like any other).
fn inherited_fds() -> String {
    let numbers: Vec<u32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|n| *n > 2)
            .collect(),
        Err(_) => return "fds:unreadable".to_string(),
    };
    let mut fds: Vec<(u32, String)> = numbers
        .into_iter()
        .filter_map(|n| {
            let target = std::fs::read_link(format!("/proc/self/fd/{n}")).ok()?;
            Some((n, target.display().to_string()))
        })
        .collect();
    fds.sort();
    if fds.is_empty() {
        "fds:none".to_string()
    } else {
        let list: Vec<String> = fds.iter().map(|(n, t)| format!("{n}={t}")).collect();
        format!("fds:{}", list.join(","))
    }
}

fn cstr(arg: &OsString) -> Result<CString, String> {
    CString::new(arg.as_bytes()).map_err(|_| "argument contains a NUL byte".to_string())
}

fn close(fd: libc::c_long) {
    if fd >= 0 {
        // SAFETY: closing a descriptor this process opened; no memory is involved.
        unsafe { libc::close(fd as libc::c_int) };
    }
}

/// Run `step`; if it returned a descriptor, close it. The line is `outcome(step)`.
fn one_fd(ret: libc::c_long) -> String {
    let line = outcome(ret);
    close(ret);
    line
}

fn open(path: &CString, flags: libc::c_int) -> libc::c_long {
    // SAFETY: `path` is a valid NUL-terminated string; the mode is a constant.
    libc::c_long::from(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0o644) })
}

fn read_file(path: &CString) -> String {
    let fd = open(path, libc::O_RDONLY);
    if fd < 0 {
        return outcome(fd);
    }
    let mut byte = [0u8; 1];
    // SAFETY: `byte` is a valid one-byte buffer; `fd` is open.
    let n = unsafe { libc::read(fd as libc::c_int, byte.as_mut_ptr().cast(), 1) };
    let line = outcome(n as libc::c_long);
    close(fd);
    line
}

/// Reads the whole file (its first 1 MiB): `ok:<FNV-1a 64 of the bytes, hex>`, so that the
/// differential fuzzer can tell a secret's content from an empty file put in its place (it
/// hashes the same prefix, `garuda_tests::diff::fnv`).
fn read_all(path: &CString) -> String {
    const LIMIT: usize = 1 << 20;
    let fd = open(path, libc::O_RDONLY);
    if fd < 0 {
        return outcome(fd);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = [0u8; 4096];
    let mut total = 0usize;
    let line = loop {
        let want = buf.len().min(LIMIT - total);
        if want == 0 {
            break format!("ok:{hash:016x}");
        }
        // SAFETY: `buf` is a valid buffer of at least `want` bytes; `fd` is open.
        let n = unsafe { libc::read(fd as libc::c_int, buf.as_mut_ptr().cast(), want) };
        if n < 0 {
            break outcome(-1);
        }
        if n == 0 {
            break format!("ok:{hash:016x}");
        }
        let n = n as usize;
        total += n;
        for b in &buf[..n] {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    close(fd);
    line
}

fn write_fd(fd: libc::c_long) -> String {
    if fd < 0 {
        return outcome(fd);
    }
    let data = b"garuda-probe\n";
    // SAFETY: `data` is a valid buffer of the given length; `fd` is open.
    let n = unsafe { libc::write(fd as libc::c_int, data.as_ptr().cast(), data.len()) };
    let line = outcome(n as libc::c_long);
    close(fd);
    line
}

/// Creates (or truncates) `path` with mode 0755, so that a planted hook can run, and writes
/// `text` into it.
fn put(path: &CString, text: &OsString) -> String {
    // SAFETY: `path` is a valid NUL-terminated string; flags and mode are constants.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o755,
        )
    };
    if fd < 0 {
        return outcome(-1);
    }
    let data = text.as_bytes();
    // SAFETY: `data` is a valid buffer of the given length; `fd` is open.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let m = if n < 0 {
        -1
    } else {
        // SAFETY: `fd` is open; the mode is a constant (the umask may have removed bits).
        unsafe { libc::fchmod(fd, 0o755) }
    };
    let line = outcome(libc::c_long::from(m));
    close(libc::c_long::from(fd));
    line
}

fn unlink(path: &CString) -> libc::c_long {
    // SAFETY: valid C string.
    libc::c_long::from(unsafe { libc::unlink(path.as_ptr()) })
}

fn mkdir(path: &CString) -> libc::c_long {
    // SAFETY: valid C string; the mode is a constant.
    libc::c_long::from(unsafe { libc::mkdir(path.as_ptr(), 0o755) })
}

fn parse_addr(arg: &OsString) -> Result<std::net::SocketAddrV4, String> {
    arg.to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an IPv4 ADDR:PORT: {arg:?}"))
}

fn sockaddr(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn inet_socket(kind: libc::c_int, addr: std::net::SocketAddrV4, connect: bool) -> String {
    // SAFETY: socket takes integers only.
    let fd = unsafe { libc::socket(libc::AF_INET, kind | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return outcome(-1);
    }
    let sa = sockaddr(addr);
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let ret = if connect {
        // SAFETY: `sa` is a valid sockaddr_in of `len` bytes that outlives the call.
        unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_in).cast(), len) }
    } else {
        let data = b"garuda-probe";
        // SAFETY: `data` and `sa` are valid for the given lengths.
        unsafe {
            libc::sendto(
                fd,
                data.as_ptr().cast(),
                data.len(),
                0,
                (&sa as *const libc::sockaddr_in).cast(),
                len,
            ) as libc::c_int
        }
    };
    let line = outcome(libc::c_long::from(ret));
    close(libc::c_long::from(fd));
    line
}

/// `connect(2)` on a unix stream socket at `path` (what a client of a host daemon does).
fn unix_connect(path: &CString) -> String {
    let bytes = path.as_bytes();
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= sa.sun_path.len() {
        return format!("errno={}", errno_name(libc::ENAMETOOLONG));
    }
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in sa.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: socket takes integers only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return outcome(-1);
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes that outlives the call.
    let ret = unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_un).cast(), len) };
    let line = outcome(libc::c_long::from(ret));
    close(libc::c_long::from(fd));
    line
}

fn procs() -> Result<String, String> {
    let entries = std::fs::read_dir("/proc").map_err(|e| format!("listing /proc: {e}"))?;
    let count = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().as_bytes().iter().all(u8::is_ascii_digit))
        .count();
    Ok(format!("count={count}"))
}

/// Fork children that wait in `pause()` until `fork` fails or `n` exist; report, then kill
/// them all.
fn forkbomb(n: usize) -> String {
    let mut children: Vec<libc::pid_t> = Vec::with_capacity(n);
    let mut failure = None;
    while children.len() < n {
        // SAFETY: the child only calls async-signal-safe functions (prctl, pause, _exit).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            failure = Some(last_errno());
            break;
        }
        if pid == 0 {
            // SAFETY: prctl, pause and _exit with integer arguments; the child dies with the
            // probe even if the probe is killed before it cleans up.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                loop {
                    libc::pause();
                }
            }
        }
        children.push(pid);
    }
    for &pid in &children {
        // SAFETY: kill and waitpid on our own children; `status` is not needed.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    format!(
        "count={} errno={}",
        children.len(),
        failure.map_or_else(|| "none".to_string(), errno_name)
    )
}

fn spam(total: u64) -> Result<Option<String>, String> {
    let chunk = [b'x'; 64 * 1024];
    let mut out = std::io::stdout().lock();
    let mut left = total;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        // A reader that went away ends the probe quietly: that is the reader's choice.
        if out.write_all(&chunk[..n]).is_err() {
            return Ok(None);
        }
        left -= n as u64;
    }
    let _ = out.flush();
    Ok(None)
}

/// The attacker of the apply race test (issue 10, item 1): exchanges `a` (a folder) and `b`
/// (a link to a folder outside the project) with `renameat2(RENAME_EXCHANGE)` over and over,
/// so the name `a` is a folder and a link in turn with no moment where it is missing, until
/// `stop` exists. Ends with `a` the folder again and prints `swaps=N`, or the first error.
/// Swaps between progress lines (`at=N` on stdout), so a test can keep racing until enough
/// swaps were made against its work.
const SWAP_PROGRESS_EVERY: u64 = 500;

fn swap_loop(a: &CString, b: &CString, stop: &CString) -> String {
    let mut swaps: u64 = 0;
    loop {
        if swaps > 0 && swaps.is_multiple_of(SWAP_PROGRESS_EVERY) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "at={swaps}");
            let _ = out.flush();
        }
        // SAFETY: valid C string.
        if unsafe { libc::access(stop.as_ptr(), libc::F_OK) } == 0 && swaps.is_multiple_of(2) {
            return format!("swaps={swaps}");
        }
        // SAFETY: valid C strings.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r < 0 {
            return format!("{} after swaps={swaps}", outcome(-1));
        }
        swaps += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// `syscall`: raw system calls with integer arguments, for the seccomp rule-by-rule suite.

/// Size of the scratch buffer an argument `buf` points at (zeroed for every call).
const SCRATCH: usize = 4096;

/// One argument of a spec: an integer (decimal, possibly negative, or `0x` hex: the raw 64
/// bits), or `buf`, a pointer to a fresh zeroed, writable buffer of [`SCRATCH`] bytes.
enum Arg {
    Int(u64),
    Buf,
}

fn parse_int(s: &str) -> Result<u64, String> {
    let parsed = if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some(neg) = s.strip_prefix('-') {
        neg.parse::<i64>().ok().map(|v| v.wrapping_neg() as u64)
    } else {
        s.parse::<u64>().ok()
    };
    parsed.ok_or_else(|| format!("not an integer: {s:?}"))
}

/// `NR[,ARG...]`, at most six arguments.
fn parse_spec(spec: &str) -> Result<(i64, Vec<Arg>), String> {
    let mut parts = spec.split(',');
    let nr = parse_int(parts.next().unwrap_or_default())? as i64;
    let args = parts
        .map(|a| {
            if a == "buf" {
                Ok(Arg::Buf)
            } else {
                parse_int(a).map(Arg::Int)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.len() > 6 {
        return Err(format!("{spec}: more than six arguments"));
    }
    Ok((nr, args))
}

/// Issue one raw system call. A call that makes a process (`clone`, `clone3`) is handled so
/// that the child exits at once and is reaped; a non-negative result above 2 of any other call
/// is closed, in case it is a descriptor (the specs are chosen so that nothing succeeds, but a
/// kernel that surprises us must not leave a socket or a mount context open).
fn raw_syscall(nr: i64, args: &[Arg]) -> Result<String, String> {
    let makes_process = nr == libc::SYS_clone || nr == libc::SYS_clone3;
    let mut buffers: Vec<Vec<u8>> = Vec::new();
    let mut words = [0u64; 6];
    for (i, a) in args.iter().enumerate() {
        words[i] = match a {
            Arg::Int(v) => *v,
            Arg::Buf => {
                buffers.push(vec![0u8; SCRATCH]);
                buffers.last().map_or(0, |b| b.as_ptr() as u64)
            }
        };
    }
    if nr == libc::SYS_clone && words[0] & libc::CLONE_VM as u64 != 0 {
        // A child sharing our memory and stack would corrupt the probe.
        return Err("clone with CLONE_VM is not allowed in a spec".into());
    }
    // SAFETY: the kernel validates every argument; pointers are either the scratch buffers,
    // alive until after the call, or integers the test chose so that the kernel rejects them
    // (NULL, 1, -1) without writing anywhere but the scratch buffers.
    let ret = unsafe {
        libc::syscall(
            nr, words[0], words[1], words[2], words[3], words[4], words[5],
        )
    };
    if makes_process && ret == 0 {
        // SAFETY: in the new child (no CLONE_VM): leave at once without running anything.
        unsafe { libc::_exit(0) };
    }
    let line = outcome(ret);
    if makes_process && ret > 0 {
        // SAFETY: waitpid on our own child; __WALL also finds a child with no exit signal.
        unsafe { libc::waitpid(ret as libc::pid_t, std::ptr::null_mut(), libc::__WALL) };
    } else if ret > 2 {
        close(ret);
    }
    drop(buffers);
    Ok(line)
}

/// Enter a new user and mount namespace: the probe then holds `CAP_SYS_ADMIN` over a mount
/// namespace of its own, so the kernel's mount-API privilege checks pass and its answer to the
/// arguments shows (used for the host's control run by a non-root user).
fn own_userns() -> String {
    // SAFETY: unshare takes flags only.
    outcome(libc::c_long::from(unsafe {
        libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS)
    }))
}

/// Install the seccomp program in `path` (raw `struct sock_filter[]`, as bubblewrap reads it)
/// on this process, after `PR_SET_NO_NEW_PRIVS`.
fn install_filter(path: &OsString) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {path:?}: {e}"))?;
    if bytes.is_empty() || bytes.len() % 8 != 0 {
        return Err(format!("{path:?} is not a BPF program"));
    }
    let program: Vec<libc::sock_filter> = bytes
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let prog = libc::sock_fprog {
        len: u16::try_from(program.len()).map_err(|_| "program too long".to_string())?,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Ok(outcome(-1));
    }
    // SAFETY: `prog` points at `program`, which outlives the call.
    Ok(outcome(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0u32,
            &prog as *const libc::sock_fprog,
        )
    }))
}

/// `syscall [--userns] [--filter FILE] SPEC...`: one line per setup step and per call,
/// `SPEC ok` or `SPEC errno=NAME`, in order.
fn syscalls(args: &[OsString]) -> Result<String, String> {
    let mut lines = Vec::new();
    let mut rest = args;
    loop {
        match rest.first().and_then(|a| a.to_str()) {
            Some("--userns") => {
                lines.push(format!("userns {}", own_userns()));
                rest = &rest[1..];
            }
            Some("--filter") => {
                let path = rest.get(1).ok_or("--filter needs a FILE")?;
                lines.push(format!("filter {}", install_filter(path)?));
                rest = &rest[2..];
            }
            _ => break,
        }
    }
    if rest.is_empty() {
        return Err("syscall: no SPEC".into());
    }
    for spec in rest {
        let spec = spec.to_str().ok_or("a SPEC is not UTF-8")?;
        let (nr, call_args) = parse_spec(spec)?;
        lines.push(format!("{spec} {}", raw_syscall(nr, &call_args)?));
    }
    Ok(lines.join("\n"))
}

/// `getpid` through the i386 entry (`int 0x80`): a foreign architecture for the filter, which
/// kills the process; on the host it answers `ok` (or `ENOSYS` without IA-32 emulation).
#[cfg(target_arch = "x86_64")]
fn i386_getpid() -> String {
    // __NR_getpid on i386.
    let mut eax: i64 = 20;
    // SAFETY: `int 0x80` with eax = getpid reads no memory (the switch to the kernel stack
    // leaves this stack alone); the registers the compat entry may clobber are declared.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("rax") eax,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
            options(nostack)
        );
    }
    let ret = eax as i32;
    if ret < 0 {
        format!("errno={}", errno_name(-ret))
    } else {
        "ok".to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// `pid1`: what the command can learn about, and do to, the sandbox's PID 1.

/// Fields of `/proc/PID/status`, as `Name=value` words.
fn status_of(pid: &str, fields: &[&str]) -> Result<String, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("reading /proc/{pid}/status: {e}"))?;
    Ok(fields
        .iter()
        .map(|name| {
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map_or("missing", str::trim);
            format!("{name}={value}")
        })
        .collect::<Vec<_>>()
        .join(" "))
}

fn io_errno(e: &std::io::Error) -> String {
    format!(
        "errno={}",
        errno_name(e.raw_os_error().unwrap_or(libc::EIO))
    )
}

/// `pid1 HEX [--wait]`: PID 1's credentials, whether its environment and memory can be read
/// (and hold the canary, given hex-encoded so that its bytes are in no command line), whether
/// a signal or ptrace reaches it, each next to the same attempt on a process the command owns
/// (the control: the call works where nothing stands in the way). With `--wait`, blocks until
/// stdin ends, so that the test can look at the sandbox from outside meanwhile.
fn pid1(canary_hex: &OsString, wait: bool) -> Result<String, String> {
    let hex = canary_hex.to_str().unwrap_or_default();
    let needle: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<_>>()
        .filter(|n: &Vec<u8>| !n.is_empty())
        .ok_or("pid1: the canary must be non-empty hex")?;
    let needle = needle.as_slice();
    let mut lines = vec![format!(
        "status {}",
        status_of(
            "1",
            &[
                "NoNewPrivs",
                "Seccomp",
                "CapInh",
                "CapPrm",
                "CapEff",
                "CapBnd",
                "CapAmb"
            ]
        )?
    )];
    for (what, pid) in [("pid1", "1"), ("self", "self")] {
        let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(env) => format!(
                "ok canary={}",
                if env.windows(needle.len()).any(|w| w == needle) {
                    "present"
                } else {
                    "absent"
                }
            ),
            Err(e) => io_errno(&e),
        };
        lines.push(format!("environ-{what} {environ}"));
        let mem = match garuda_tests::scan_memory(pid, needle) {
            Ok(scan) if scan.found => "ok canary=present".to_string(),
            // "absent" only after something was read: an empty scan proves nothing.
            Ok(scan) if scan.bytes > 0 => "ok canary=absent".to_string(),
            Ok(_) => "ok nothing-readable".to_string(),
            Err(e) => io_errno(&e),
        };
        lines.push(format!("mem-{what} {mem}"));
    }
    // SAFETY: kill with integer arguments.
    let killed = unsafe { libc::kill(1, libc::SIGKILL) };
    lines.push(format!("kill-pid1 {}", outcome(libc::c_long::from(killed))));
    // SAFETY: ptrace with integer arguments (SEIZE does not stop the target).
    let traced = unsafe { libc::ptrace(libc::PTRACE_SEIZE, 1, 0usize, 0usize) };
    lines.push(format!("ptrace-pid1 {}", outcome(traced)));
    // The control for the signal: a child of our own.
    // SAFETY: the child only calls async-signal-safe functions (pause, _exit).
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above; the child waits for the signal.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            loop {
                libc::pause();
            }
        }
    }
    if child < 0 {
        return Err(format!("fork: {}", errno_name(last_errno())));
    }
    // SAFETY: kill and waitpid on our own child.
    let killed = unsafe { libc::kill(child, libc::SIGKILL) };
    lines.push(format!(
        "kill-child {}",
        outcome(libc::c_long::from(killed))
    ));
    // SAFETY: reaping our own child.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    if wait {
        println!("{}", lines.join("\n"));
        lines.clear();
        let _ = std::io::stdout().flush();
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    }
    // PID 1 still runs: had a signal killed it, the kernel would have killed this probe too.
    lines.push(format!("after {}", status_of("1", &["State"])?));
    Ok(lines.join("\n"))
}

fn number<T: std::str::FromStr>(arg: &OsString) -> Result<T, String> {
    arg.to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not a number: {arg:?}"))
}

const USAGE: &str = "usage: garuda-probe SUBCOMMAND [ARGS]
  batch SUBCOMMAND [ARGS] [; SUBCOMMAND [ARGS]]...   (one line each)
  readall PATH (ok:HASH)    symlink TARGET LINK    rmdir PATH
  read|write|append|chmod|utimes|setxattr PATH
  symlink-write TARGET LINK    hardlink SRC DST
  swap-loop A B STOP
  unlink|mkdir PATH    put PATH TEXT    replace PATH TEXT    replace-dir PATH NAME TEXT
  tcp-connect ADDR:PORT        udp-send ADDR:PORT
  unix-connect PATH
  tiocsti | ptrace-parent | ptrace-bogus | process-vm-readv | io-uring | unshare-user
  vsock | userfaultfd | perf-event-open | bpf | keyctl
  fsopen | open-tree | mount-setattr | move-mount
  status | procs | env | forkbomb N | spam BYTES
  syscall [--userns] [--filter FILE] NR[,ARG...]...   (ARG: integer, 0x hex, or buf)
  exec-filtered FILE PROG [ARG...]   (PROG under the seccomp program in FILE)
  i386-getpid (x86-64)          pid1 HEX [--wait]";

/// Run one subcommand; `Ok(Some(line))` is printed, `Err` is bad usage.
fn run(args: &[OsString]) -> Result<Option<String>, String> {
    let sub = args
        .first()
        .and_then(|s| s.to_str())
        .ok_or("missing subcommand")?;
    let rest = &args[1..];
    let arg = |i: usize| {
        rest.get(i)
            .ok_or_else(|| format!("{sub}: missing argument"))
    };
    let expect_args = |n: usize| {
        if rest.len() == n {
            Ok(())
        } else {
            Err(format!("{sub}: expected {n} argument(s)"))
        }
    };
    let line = match sub {
        // Several subcommands in one process, separated by `;` arguments: one line each.
        "batch" => {
            let mut lines = Vec::new();
            for group in rest.split(|a| a.as_bytes() == b";") {
                if group.is_empty() {
                    continue;
                }
                lines.push(match run(group) {
                    Ok(Some(line)) => line,
                    Ok(None) => "ok".to_string(),
                    Err(e) => format!("usage-error: {e}"),
                });
            }
            lines.join("\n")
        }
        "readall" => {
            expect_args(1)?;
            read_all(&cstr(arg(0)?)?)
        }
        "symlink" => {
            expect_args(2)?;
            let (target, link) = (cstr(arg(0)?)?, cstr(arg(1)?)?);
            // SAFETY: valid C strings.
            outcome(libc::c_long::from(unsafe {
                libc::symlink(target.as_ptr(), link.as_ptr())
            }))
        }
        "rmdir" => {
            expect_args(1)?;
            let p = cstr(arg(0)?)?;
            // SAFETY: valid C string.
            outcome(libc::c_long::from(unsafe { libc::rmdir(p.as_ptr()) }))
        }
        "read" => {
            expect_args(1)?;
            read_file(&cstr(arg(0)?)?)
        }
        "write" => {
            expect_args(1)?;
            write_fd(open(
                &cstr(arg(0)?)?,
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
            ))
        }
        "append" => {
            expect_args(1)?;
            write_fd(open(&cstr(arg(0)?)?, libc::O_WRONLY | libc::O_APPEND))
        }
        "chmod" => {
            expect_args(1)?;
            let p = cstr(arg(0)?)?;
            // SAFETY: valid C string.
            outcome(libc::c_long::from(unsafe {
                libc::chmod(p.as_ptr(), 0o600)
            }))
        }
        "utimes" => {
            // Like `touch -d @0`: set both times to the epoch.
            expect_args(1)?;
            let p = cstr(arg(0)?)?;
            let times = [libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }; 2];
            // SAFETY: valid C string and a two-element timespec array.
            outcome(libc::c_long::from(unsafe {
                libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0)
            }))
        }
        "setxattr" => {
            expect_args(1)?;
            let p = cstr(arg(0)?)?;
            // SAFETY: valid C strings and a one-byte value.
            outcome(libc::c_long::from(unsafe {
                libc::setxattr(p.as_ptr(), c"user.x".as_ptr(), b"1".as_ptr().cast(), 1, 0)
            }))
        }
        "symlink-write" => {
            // Plant a link (in a writable place) to a file elsewhere, then write through it.
            expect_args(2)?;
            let (target, link) = (cstr(arg(0)?)?, cstr(arg(1)?)?);
            // SAFETY: valid C strings.
            let r = unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) };
            if r < 0 {
                outcome(-1)
            } else {
                write_fd(open(&link, libc::O_WRONLY | libc::O_APPEND))
            }
        }
        "hardlink" => {
            expect_args(2)?;
            let (src, dst) = (cstr(arg(0)?)?, cstr(arg(1)?)?);
            // SAFETY: valid C strings.
            outcome(libc::c_long::from(unsafe {
                libc::link(src.as_ptr(), dst.as_ptr())
            }))
        }
        "rename" => {
            expect_args(2)?;
            let (src, dst) = (cstr(arg(0)?)?, cstr(arg(1)?)?);
            // SAFETY: valid C strings.
            outcome(libc::c_long::from(unsafe {
                libc::rename(src.as_ptr(), dst.as_ptr())
            }))
        }
        "swap-loop" => {
            expect_args(3)?;
            swap_loop(&cstr(arg(0)?)?, &cstr(arg(1)?)?, &cstr(arg(2)?)?)
        }
        "unlink" => {
            expect_args(1)?;
            outcome(unlink(&cstr(arg(0)?)?))
        }
        "mkdir" => {
            expect_args(1)?;
            outcome(mkdir(&cstr(arg(0)?)?))
        }
        "put" => {
            expect_args(2)?;
            put(&cstr(arg(0)?)?, arg(1)?)
        }
        // Replacing a link (or file) instead of writing through it: remove the entry, then
        // put a file of the command's own in its place. The first failing step answers.
        "replace" => {
            expect_args(2)?;
            let path = cstr(arg(0)?)?;
            match unlink(&path) {
                r if r < 0 => outcome(r),
                _ => put(&path, arg(1)?),
            }
        }
        // The same with a folder: remove the entry, make a folder there, put NAME in it.
        "replace-dir" => {
            expect_args(3)?;
            let path = cstr(arg(0)?)?;
            let mut file = arg(0)?.clone();
            file.push("/");
            file.push(arg(1)?);
            if unlink(&path) < 0 || mkdir(&path) < 0 {
                outcome(-1)
            } else {
                put(&cstr(&file)?, arg(2)?)
            }
        }
        // Every descriptor above stdio this process holds, with what it names
        // (`fds:none`, or `fds:3=/path,7=socket:[…]`): a sandbox hands its command none (the
        // differential fuzzer checks it).
        "fds" => {
            expect_args(0)?;
            inherited_fds()
        }
        "tcp-connect" => {
            expect_args(1)?;
            inet_socket(libc::SOCK_STREAM, parse_addr(arg(0)?)?, true)
        }
        "udp-send" => {
            expect_args(1)?;
            inet_socket(libc::SOCK_DGRAM, parse_addr(arg(0)?)?, false)
        }
        "unix-connect" => {
            expect_args(1)?;
            unix_connect(&cstr(arg(0)?)?)
        }
        "tiocsti" => {
            // fd -1: the host kernel answers EBADF; the filter answers EPERM first.
            expect_args(0)?;
            let c: libc::c_char = b'x' as libc::c_char;
            // SAFETY: `c` is a valid byte for the (never reached) injection.
            outcome(libc::c_long::from(unsafe {
                libc::ioctl(-1, libc::TIOCSTI, &c as *const libc::c_char)
            }))
        }
        "ptrace-parent" => {
            // Attach without stopping (SEIZE); the attachment ends when the probe exits.
            expect_args(0)?;
            // SAFETY: getppid cannot fail; ptrace with integer arguments.
            outcome(unsafe { libc::ptrace(libc::PTRACE_SEIZE, libc::getppid(), 0usize, 0usize) })
        }
        "ptrace-bogus" => {
            // A pid that cannot exist: ESRCH from the host kernel, EPERM from the filter.
            expect_args(0)?;
            // SAFETY: ptrace with integer arguments.
            outcome(unsafe { libc::ptrace(libc::PTRACE_SEIZE, 0x7fff_ffff, 0usize, 0usize) })
        }
        "process-vm-readv" => {
            // Unknown flags: EINVAL from the host kernel before any memory is touched.
            expect_args(0)?;
            // SAFETY: no iovecs are passed; the kernel rejects the flags first.
            outcome(unsafe {
                libc::syscall(
                    libc::SYS_process_vm_readv,
                    libc::getppid(),
                    std::ptr::null::<libc::iovec>(),
                    0usize,
                    std::ptr::null::<libc::iovec>(),
                    0usize,
                    1usize,
                )
            })
        }
        "io-uring" => {
            // 0 entries and no params: EFAULT/EINVAL from the host kernel.
            expect_args(0)?;
            // SAFETY: a NULL params pointer is rejected by the kernel, never dereferenced here.
            one_fd(unsafe { libc::syscall(libc::SYS_io_uring_setup, 0u32, std::ptr::null::<u8>()) })
        }
        "unshare-user" => {
            // What `unshare -Ur` starts with. On the host it only affects this probe process.
            expect_args(0)?;
            // SAFETY: unshare takes flags only.
            outcome(libc::c_long::from(unsafe {
                libc::unshare(libc::CLONE_NEWUSER)
            }))
        }
        "vsock" => {
            expect_args(0)?;
            // SAFETY: socket takes integers only.
            one_fd(libc::c_long::from(unsafe {
                libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
            }))
        }
        "userfaultfd" => {
            // UFFD_USER_MODE_ONLY (1) is allowed to every user on the host.
            expect_args(0)?;
            // SAFETY: userfaultfd takes flags only; the descriptor is closed.
            one_fd(unsafe { libc::syscall(libc::SYS_userfaultfd, 1 | libc::O_CLOEXEC) })
        }
        "perf-event-open" => {
            // NULL attributes: EFAULT from the host kernel.
            expect_args(0)?;
            // SAFETY: the NULL attribute pointer is rejected by the kernel.
            one_fd(unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    std::ptr::null::<u8>(),
                    0,
                    -1,
                    -1,
                    0usize,
                )
            })
        }
        "bpf" => {
            // An unknown command with no attributes: EINVAL from the host kernel.
            expect_args(0)?;
            // SAFETY: size 0, so the kernel reads nothing through the NULL pointer.
            one_fd(unsafe { libc::syscall(libc::SYS_bpf, 0xffffi32, std::ptr::null::<u8>(), 0u32) })
        }
        "keyctl" => {
            // An unknown operation: EOPNOTSUPP from the host kernel.
            expect_args(0)?;
            // SAFETY: keyctl with integer arguments.
            outcome(unsafe { libc::syscall(libc::SYS_keyctl, 0x7fff_ffffi32, 0, 0, 0, 0) })
        }
        "fsopen" => {
            // A tmpfs context: harmless (nothing is mounted) but needs CAP_SYS_ADMIN.
            expect_args(0)?;
            // SAFETY: valid C string; the descriptor is closed.
            one_fd(unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), 0u32) })
        }
        "open-tree" => {
            // Without OPEN_TREE_CLONE this is an O_PATH open any user may make on the host.
            expect_args(0)?;
            // SAFETY: valid C string; the descriptor is closed.
            one_fd(unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    libc::O_CLOEXEC as u32,
                )
            })
        }
        "mount-setattr" => {
            // Unknown flags: EINVAL from the host kernel before any privilege check.
            expect_args(0)?;
            // SAFETY: the kernel rejects the flags before reading either pointer.
            outcome(unsafe {
                libc::syscall(
                    libc::SYS_mount_setattr,
                    -1,
                    std::ptr::null::<libc::c_char>(),
                    0xffff_ffffu32,
                    std::ptr::null::<u8>(),
                    0usize,
                )
            })
        }
        "move-mount" => {
            // Empty paths from fd -1: nothing to move (ENOENT/EBADF for root on the host).
            expect_args(0)?;
            // SAFETY: valid (empty) C strings.
            outcome(unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    -1,
                    c"".as_ptr(),
                    -1,
                    c"".as_ptr(),
                    0u32,
                )
            })
        }
        "status" => {
            // `NoNewPrivs=… CapEff=… Seccomp=…`
            expect_args(0)?;
            status_of("self", &["NoNewPrivs", "CapEff", "Seccomp"])?
        }
        "procs" => {
            expect_args(0)?;
            procs()?
        }
        "env" => {
            expect_args(0)?;
            std::env::vars_os()
                .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                .collect::<Vec<_>>()
                .join("\n")
        }
        "syscall" => syscalls(rest)?,
        // Run PROG under a seccomp program of the test's (a stand-in for a container runtime's
        // profile); prints a line only when the program cannot be installed or PROG executed.
        "exec-filtered" => {
            let (file, prog) = (arg(0)?, arg(1)?);
            match install_filter(file)? {
                installed if installed != "ok" => installed,
                _ => {
                    use std::os::unix::process::CommandExt;
                    io_errno(&std::process::Command::new(prog).args(&rest[2..]).exec())
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        "i386-getpid" => {
            expect_args(0)?;
            i386_getpid()
        }
        "pid1" => match rest {
            [canary] => pid1(canary, false)?,
            [canary, flag] if flag == "--wait" => pid1(canary, true)?,
            _ => return Err("pid1: expected HEX [--wait]".into()),
        },
        "forkbomb" => {
            expect_args(1)?;
            forkbomb(number(arg(0)?)?)
        }
        "spam" => {
            expect_args(1)?;
            return spam(number(arg(0)?)?);
        }
        other => return Err(format!("unknown subcommand {other:?}")),
    };
    Ok(Some(line))
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&args) {
        Ok(Some(line)) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("garuda-probe: {msg}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
