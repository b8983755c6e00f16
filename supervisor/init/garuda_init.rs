//! `garuda-init`: the two programs a sandbox runs before its command, as one small executable.
//!
//! Built by `supervisor/build.rs` with the same `rustc` as the rest, without the standard
//! library or libc (`#![no_std]`, its own `_start`, system calls by instruction), linked as a
//! static position-independent executable of a few kilobytes; the supervisor embeds the bytes
//! and hands them to the kernel from a sealed memory file (`sys::init_program`). Starting it
//! costs one `execve` and no dynamic linking, where executing the supervisor's own 19 MB,
//! dynamically linked file cost about a millisecond each time.
//!
//! Its command line picks the program:
//!
//! - `garuda-sandbox-init PID FD` (`argv[0]`, the supervisor's `sys::REAPER_ARGV0`) — the
//!   landlock executor's PID 1, after it has forked the command and given up its privileges:
//!   reap every child until `PID` exits, write an 8-byte record `(16, signal)` to `FD` if it
//!   was killed by a signal, and exit with its code (or 128 + N).
//! - `ANY garuda-exec-closed CMD ARGS…` (`argv[1]`, `sys::EXEC_CLOSED_ARGV1`; bwrap sets
//!   `argv[0]` to the path it executed) — the bubblewrap executor's last step: close every
//!   descriptor above stdio (bwrap hands its command all it inherited, among them `O_PATH`
//!   handles on the host's own mounts), then execute `CMD` as `execvp` would (`PATH`
//!   searched, a file without a `#!` line run by `/bin/sh`). Exits 127 if it is not found and
//!   126 if it cannot be executed.
//! - `ANY garuda-exec-released FD CMD ARGS…` (`sys::EXEC_RELEASED_ARGV1`) — the same, after
//!   one byte has been read from `FD`: the supervisor's go-ahead once the command's audit
//!   intent is on disk. The pipe's end without the byte exits 125 and `CMD` never runs.
//!
//! Anything else exits 125. It never allocates and keeps every buffer on its stack.
//!
//! The `unsafe` code is in four places: the start (the program relocates itself), the
//! `kernel` module (the kernel's strings, which nothing else can make, and the `execve` calls
//! that pass them on), the system calls (each in one small function with safe arguments), and
//! the two memory functions the compiler may call.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: usize = 0;
    pub const WRITE: usize = 1;
    pub const EXECVE: usize = 59;
    pub const WAIT4: usize = 61;
    pub const EXIT_GROUP: usize = 231;
    pub const CLOSE_RANGE: usize = 436;
}

#[cfg(target_arch = "aarch64")]
mod nr {
    pub const READ: usize = 63;
    pub const WRITE: usize = 64;
    pub const EXECVE: usize = 221;
    pub const WAIT4: usize = 260;
    pub const EXIT_GROUP: usize = 94;
    pub const CLOSE_RANGE: usize = 436;
}

const ENOENT: isize = 2;
const EINTR: isize = 4;
const ENOEXEC: isize = 8;
const EACCES: isize = 13;
const ENOTDIR: isize = 20;
const ENAMETOOLONG: isize = 36;
const ELOOP: isize = 40;

/// Exit code of a sandbox whose setup failed (the supervisor's `SETUP_FAILED_EXIT`).
const SETUP_FAILED: i32 = 125;
/// The report record's stage for a command killed by a signal (`sys::Stage::Signaled`).
const STAGE_SIGNALED: u32 = 16;
/// Most arguments the `/bin/sh FILE ARGS…` fallback passes on.
const MAX_ARGS: usize = 1024;

// ---------------------------------------------------------------------------------------------
// System calls: one function each, safe to call.

/// A raw system call: its number and four arguments; the kernel's answer (a negative errno on
/// failure).
///
/// # Safety
/// The arguments must be what the kernel reads for that call (valid pointers where it takes
/// one).
#[cfg(target_arch = "x86_64")]
unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux system call convention; rcx and r11 are clobbered by `syscall`.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => ret, in("rdi") a, in("rsi") b,
             in("rdx") c, in("r10") d, lateout("rcx") _, lateout("r11") _,
             options(nostack));
    }
    ret
}

/// As the x86-64 one.
///
/// # Safety
/// As the x86-64 one.
#[cfg(target_arch = "aarch64")]
unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the AArch64 Linux system call convention.
    unsafe {
        asm!("svc 0", in("x8") n, inlateout("x0") a as isize => ret, in("x1") b, in("x2") c,
             in("x3") d, options(nostack));
    }
    ret
}

fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes an integer and does not return.
        unsafe { syscall(nr::EXIT_GROUP, code as usize, 0, 0, 0) };
    }
}

/// `write(fd, buf)`; a failed or short write only loses the bytes.
fn write(fd: i32, buf: &[u8]) {
    // SAFETY: a valid buffer and its length.
    unsafe { syscall(nr::WRITE, fd as usize, buf.as_ptr() as usize, buf.len(), 0) };
}

/// `read(fd, buf)`: the bytes read, or a negative errno.
fn read(fd: i32, buf: &mut [u8]) -> isize {
    // SAFETY: a valid, writable buffer and its length.
    unsafe {
        syscall(
            nr::READ,
            fd as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            0,
        )
    }
}

/// `wait4(-1, &status, 0, NULL)`: the pid reaped (or a negative errno) and its status.
fn wait_any() -> (isize, i32) {
    let mut status: i32 = 0;
    // SAFETY: `status` is a valid int for the kernel to fill; no rusage is asked for.
    let r = unsafe {
        syscall(
            nr::WAIT4,
            usize::MAX,
            &mut status as *mut i32 as usize,
            0,
            0,
        )
    };
    (r, status)
}

/// `close_range(3, ~0, 0)`: 0, or a negative errno.
fn close_above_stdio() -> isize {
    // SAFETY: close_range takes integers.
    unsafe { syscall(nr::CLOSE_RANGE, 3, u32::MAX as usize, 0, 0) }
}

fn say(msg: &[u8]) {
    write(2, msg);
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(SETUP_FAILED)
}

// ---------------------------------------------------------------------------------------------
// The start: the kernel's stack, and the program's own relocations.

// The kernel starts the process with the stack pointer at `argc`, followed by `argv`, a null,
// `envp` and a null. Hand that address to `start` with the stack aligned as the ABI wants.
#[cfg(target_arch = "x86_64")]
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {start}",
    "ud2",
    start = sym start,
);

#[cfg(target_arch = "aarch64")]
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, xzr",
    "mov x30, xzr",
    "mov x0, sp",
    "bl {start}",
    "brk #0",
    start = sym start,
);

/// The kernel's strings and the calls that pass them on. Nothing outside this module can
/// make a [`KernelStr`]: every one is a string the kernel put on the initial stack (or the null
/// ending an array), so reading one is sound from safe code.
mod kernel {
    use super::{ENAMETOOLONG, ENOEXEC, MAX_ARGS, nr, syscall};

    /// A pointer to a NUL-terminated string on the initial stack, or the null ending an
    /// array.
    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub struct KernelStr(*const u8);

    impl KernelStr {
        /// The string's bytes, without the NUL; empty for the null.
        pub fn bytes(self) -> &'static [u8] {
            if self.0.is_null() {
                return &[];
            }
            let mut len = 0;
            // SAFETY: a `KernelStr` is the kernel's (see the module): NUL-terminated, on the
            // initial stack, never freed. A volatile read keeps the loop a loop (the compiler
            // would make it a call to `strlen`, which is not here).
            while unsafe { core::ptr::read_volatile(self.0.add(len)) } != 0 {
                len += 1;
            }
            // SAFETY: `len` bytes from the pointer were just read.
            unsafe { core::slice::from_raw_parts(self.0, len) }
        }

        fn is_null(self) -> bool {
            self.0.is_null()
        }
    }

    /// The environment as the kernel gave it: a null-terminated array of [`KernelStr`].
    #[derive(Clone, Copy)]
    pub struct EnvList(*const KernelStr);

    /// The process's arguments and environment, as the kernel laid them out.
    pub struct Args {
        /// `argv[0..argc]` and the null after them.
        argv: &'static [KernelStr],
        env: EnvList,
    }

    impl Args {
        /// # Safety
        /// `sp` is the stack pointer the kernel started the process with.
        pub unsafe fn from_stack(sp: *const usize) -> Args {
            // SAFETY: the kernel's initial stack: argc, then argc pointers and a null, then
            // the environment's pointers and a null; none of it is ever freed.
            unsafe {
                let argc = *sp;
                let argv = sp.add(1) as *const KernelStr;
                Args {
                    argv: core::slice::from_raw_parts(argv, argc + 1),
                    env: EnvList(argv.add(argc + 1)),
                }
            }
        }

        /// `argv` with the null after it.
        pub fn argv(&self) -> &'static [KernelStr] {
            self.argv
        }

        pub fn env(&self) -> EnvList {
            self.env
        }

        pub fn argc(&self) -> usize {
            self.argv.len() - 1
        }

        pub fn arg(&self, i: usize) -> &'static [u8] {
            self.argv.get(i).map_or(&[][..], |a| a.bytes())
        }

        /// The value of `NAME=` in the environment, if set.
        pub fn env_var(&self, prefix: &[u8]) -> Option<&'static [u8]> {
            let mut at = self.env.0;
            loop {
                // SAFETY: the environment array is null-terminated and `at` has not passed
                // its null (the loop stops there).
                let entry = unsafe { *at };
                if entry.is_null() {
                    return None;
                }
                if let Some(value) = entry.bytes().strip_prefix(prefix) {
                    return Some(value);
                }
                at = at.wrapping_add(1);
            }
        }
    }

    /// `execve(path, argv, env)`: returns only on failure, with the negative errno. `path`
    /// must end with its NUL and `argv` with the null (else `-ENAMETOOLONG`, nothing called).
    pub fn execve(path: &[u8], argv: &[KernelStr], env: EnvList) -> isize {
        if path.last() != Some(&0) || argv.last().is_none_or(|a| !a.is_null()) {
            return -ENAMETOOLONG;
        }
        // SAFETY: `path` is NUL-terminated (checked), `argv` a null-terminated array of the
        // kernel's strings (checked; a `KernelStr` is nothing else), `env` the kernel's own
        // null-terminated environment.
        unsafe {
            syscall(
                nr::EXECVE,
                path.as_ptr() as usize,
                argv.as_ptr() as usize,
                env.0 as usize,
                0,
            )
        }
    }

    /// `execve("/bin/sh", ["/bin/sh", path, rest…], env)`, as `execvp` does for a file with
    /// no `#!` line; `rest` is `argv[1..]` with its null. Returns the negative errno.
    pub fn execve_sh(path: &[u8], rest: &[KernelStr], env: EnvList) -> isize {
        const SH: &[u8] = b"/bin/sh\0";
        if path.last() != Some(&0) || rest.last().is_none_or(|a| !a.is_null()) {
            return -ENAMETOOLONG;
        }
        if rest.len() + 2 > MAX_ARGS {
            return -ENOEXEC;
        }
        let mut argv = [core::ptr::null::<u8>(); MAX_ARGS];
        argv[0] = SH.as_ptr();
        argv[1] = path.as_ptr();
        for (slot, arg) in argv[2..].iter_mut().zip(rest) {
            *slot = arg.0;
        }
        // SAFETY: `SH` and `path` are NUL-terminated and alive for the call, the rest are
        // the kernel's strings, and the array ends with `rest`'s null (copied above).
        unsafe {
            syscall(
                nr::EXECVE,
                SH.as_ptr() as usize,
                argv.as_ptr() as usize,
                env.0 as usize,
                0,
            )
        }
    }
}

use kernel::{Args, EnvList, KernelStr};

unsafe extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: runs first, once, before anything reads a relocated pointer.
    unsafe { relocate() };
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    // SAFETY: the kernel's stack pointer, as `_start` passed it.
    run(&unsafe { Args::from_stack(sp) })
}

/// Relocation type "base + addend" of this architecture.
#[cfg(target_arch = "x86_64")]
const R_RELATIVE: u32 = 8;
#[cfg(target_arch = "aarch64")]
const R_RELATIVE: u32 = 1027;

/// The load address (where the ELF header is: the linker puts the first segment at address 0)
/// and the address of the dynamic section (where the linker says the relocations are), both
/// computed from the instruction pointer: through the global offset table they would be
/// read unrelocated.
#[cfg(target_arch = "x86_64")]
fn base_and_dynamic() -> (usize, usize) {
    let (base, dynamic): (usize, usize);
    // SAFETY: two address computations, no memory access.
    unsafe {
        asm!("lea {b}, [rip + __ehdr_start]", "lea {d}, [rip + _DYNAMIC]",
             b = out(reg) base, d = out(reg) dynamic, options(nostack, nomem, pure));
    }
    (base, dynamic)
}

#[cfg(target_arch = "aarch64")]
fn base_and_dynamic() -> (usize, usize) {
    let (base, dynamic): (usize, usize);
    // SAFETY: two address computations, no memory access.
    unsafe {
        asm!("adrp {b}, __ehdr_start", "add {b}, {b}, :lo12:__ehdr_start",
             "adrp {d}, _DYNAMIC", "add {d}, {d}, :lo12:_DYNAMIC",
             b = out(reg) base, d = out(reg) dynamic, options(nostack, nomem, pure));
    }
    (base, dynamic)
}

/// Apply this file's own relocations, as the dynamic linker would for a program that has one:
/// a position-independent executable keeps a few absolute addresses (`core`'s tables, the
/// global offset table) that the kernel loads unrelocated at a random base. Only "base +
/// addend" relocations exist in a static executable; anything else ends the process.
///
/// # Safety
/// Called once at start, before any relocated pointer is read; the segments it writes are the
/// writable ones the kernel mapped (nothing made them read-only: that is the dynamic linker's
/// `RELRO` step, and there is none).
unsafe fn relocate() {
    const DT_NULL: usize = 0;
    const DT_RELA: usize = 7;
    const DT_RELASZ: usize = 8;
    const DT_RELAENT: usize = 9;
    const DT_REL: usize = 17;
    const DT_RELR: usize = 36;
    let (base, dynamic) = base_and_dynamic();
    let mut entry = dynamic as *const [usize; 2];
    let (mut rela, mut size, mut stride) = (0usize, 0usize, 24usize);
    loop {
        // SAFETY: the dynamic section is an array of (tag, value) pairs ending with DT_NULL,
        // and `entry` has not passed it (the loop stops there).
        let [tag, value] = unsafe { core::ptr::read_volatile(entry) };
        match tag {
            DT_NULL => break,
            DT_RELA => rela = value,
            DT_RELASZ => size = value,
            DT_RELAENT => stride = value,
            DT_REL | DT_RELR => exit(SETUP_FAILED),
            _ => {}
        }
        entry = entry.wrapping_add(1);
    }
    if stride != 24 {
        exit(SETUP_FAILED);
    }
    let mut at = 0;
    while at < size {
        // SAFETY: DT_RELA and DT_RELASZ describe an array of (offset, info, addend) triples;
        // each offset is a pointer-sized slot in a writable segment.
        unsafe {
            let [offset, info, addend] =
                core::ptr::read_volatile((base + rela + at) as *const [usize; 3]);
            if info as u32 != R_RELATIVE {
                exit(SETUP_FAILED);
            }
            core::ptr::write_volatile((base + offset) as *mut usize, base + addend);
        }
        at += 24;
    }
}

// ---------------------------------------------------------------------------------------------
// The two programs: no `unsafe` in them.

fn run(args: &Args) -> ! {
    if args.argc() < 2 {
        exit(SETUP_FAILED);
    }
    if args.arg(0) == b"garuda-sandbox-init" {
        if args.argc() != 3 {
            exit(SETUP_FAILED);
        }
        match (number(args.arg(1)), number(args.arg(2))) {
            (Some(pid), Some(fd)) => exit(reap(pid, fd)),
            _ => exit(SETUP_FAILED),
        }
    }
    if args.arg(1) == b"garuda-exec-closed" && args.argc() >= 3 {
        exec_closed(&args.argv()[2..], args)
    }
    if args.arg(1) == b"garuda-exec-released" && args.argc() >= 4 {
        match number(args.arg(2)) {
            Some(fd) if released(fd) => exec_closed(&args.argv()[3..], args),
            _ => {
                say(b"garuda: the command was not released by the supervisor\n");
                exit(SETUP_FAILED)
            }
        }
    }
    exit(SETUP_FAILED)
}

/// A decimal number of 1 to 9 digits.
fn number(digits: &[u8]) -> Option<i32> {
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    let mut n = 0i32;
    for d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i32::from(d - b'0');
    }
    Some(n)
}

/// Reap every child until `cmd` exits; its exit code, or 128 + the signal after reporting it.
fn reap(cmd: i32, report_fd: i32) -> i32 {
    let status = loop {
        let (r, status) = wait_any();
        if r == cmd as isize {
            break status;
        }
        if r < 0 && r != -EINTR {
            return SETUP_FAILED;
        }
    };
    let signal = status & 0x7f;
    if signal == 0 {
        return (status >> 8) & 0xff;
    }
    let mut rec = [0u8; 8];
    let stage = STAGE_SIGNALED.to_ne_bytes();
    let value = signal.to_ne_bytes();
    let mut i = 0;
    while i < 4 {
        rec[i] = stage[i];
        rec[4 + i] = value[i];
        i += 1;
    }
    write(report_fd, &rec);
    128 + signal
}

/// Waits for the supervisor's go-ahead: one byte on `fd`. The end of the pipe without it (the
/// supervisor killed the sandbox, or died) is no go-ahead.
fn released(fd: i32) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match read(fd, &mut byte) {
            1 => return true,
            r if r == -EINTR => {}
            _ => return false,
        }
    }
}

/// Close every descriptor above stdio, then execute `argv[0]` as `execvp` would. `argv` is the
/// command's part of this process's own arguments, with the null after it.
fn exec_closed(argv: &[KernelStr], args: &Args) -> ! {
    // Fail closed: a command must never run with the descriptors this step exists to close.
    if close_above_stdio() != 0 {
        say(b"garuda: the sandbox could not close inherited descriptors\n");
        exit(SETUP_FAILED);
    }
    let name = argv[0].bytes();
    let err = if name.is_empty() {
        -ENOENT
    } else if name.contains(&b'/') {
        let mut path = [0u8; 4096];
        match nul_terminated(&mut path, &[name]) {
            Some(path) => execve_or_sh(path, argv, args.env()),
            None => -ENAMETOOLONG,
        }
    } else {
        search_path(name, argv, args)
    };
    if err == -ENOENT || err == -ENOTDIR {
        say(b"garuda: the command was not found in the sandbox\n");
        exit(127);
    }
    say(b"garuda: the command could not be executed in the sandbox\n");
    exit(126)
}

/// `parts` joined into `buf` with a NUL after them; `None` if they do not fit.
fn nul_terminated<'a>(buf: &'a mut [u8], parts: &[&[u8]]) -> Option<&'a [u8]> {
    let mut len = 0;
    for part in parts {
        buf.get_mut(len..len + part.len())?.copy_from_slice(part);
        len += part.len();
    }
    *buf.get_mut(len)? = 0;
    Some(&buf[..=len])
}

/// `execve`, and for a file the kernel does not know how to run (`ENOEXEC`: no `#!`),
/// `/bin/sh FILE ARGS…` as `execvp` does. Returns the negative errno of the failure.
fn execve_or_sh(path: &[u8], argv: &[KernelStr], env: EnvList) -> isize {
    let err = kernel::execve(path, argv, env);
    if err != -ENOEXEC {
        return err;
    }
    kernel::execve_sh(path, &argv[1..], env);
    -ENOEXEC
}

/// Try `DIR/name` for each directory of `PATH` (unset: `/bin:/usr/bin`, glibc's default), as
/// glibc's `execvp`: go on past a missing file or a permission error, stop at any other.
fn search_path(name: &[u8], argv: &[KernelStr], args: &Args) -> isize {
    let path = args.env_var(b"PATH=").unwrap_or(b"/bin:/usr/bin");
    let mut buf = [0u8; 4096];
    let mut seen_eacces = false;
    let mut last = -ENOENT;
    for dir in path.split(|b| *b == b':') {
        // An empty entry is the current folder, as in glibc.
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let Some(full) = nul_terminated(&mut buf, &[dir, b"/", name]) else {
            last = -ENAMETOOLONG;
            continue;
        };
        match execve_or_sh(full, argv, args.env()) {
            e if e == -EACCES => seen_eacces = true,
            e if e == -ENOENT || e == -ENOTDIR || e == -ELOOP || e == -ENAMETOOLONG => last = e,
            e => return e,
        }
    }
    if seen_eacces { -EACCES } else { last }
}

// ---------------------------------------------------------------------------------------------
// What the compiler may call.

// `copy_from_slice` and the zeroed buffers may be lowered to these; with no libc they are
// here, written so that the compiler cannot turn them back into calls to themselves.
#[unsafe(no_mangle)]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    let mut i = 0;
    while i < n {
        // SAFETY: the caller's buffers hold `n` bytes and do not overlap.
        unsafe { core::ptr::write_volatile(dst.add(i), *src.add(i)) };
        i += 1;
    }
    dst
}

#[unsafe(no_mangle)]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    let mut i = 0;
    while i < n {
        // SAFETY: the caller's buffer holds `n` bytes.
        unsafe { core::ptr::write_volatile(dst.add(i), c as u8) };
        i += 1;
    }
    dst
}

/// The precompiled `core` names this for its unwinding tables; nothing here unwinds
/// (`panic = "abort"`), so it is never called.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}
