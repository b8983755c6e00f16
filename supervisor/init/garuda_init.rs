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
//!   handles on the host's own mounts), then execute `CMD` as `execvp` would (`PATH` searched, a file without a `#!`
//!   line run by `/bin/sh`). Exits 127 if it is not found and 126 if it cannot be executed.
//!
//! Anything else exits 125. It never allocates and keeps every buffer on its stack.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const WRITE: usize = 1;
    pub const EXECVE: usize = 59;
    pub const WAIT4: usize = 61;
    pub const EXIT_GROUP: usize = 231;
    pub const CLOSE_RANGE: usize = 436;
}

#[cfg(target_arch = "aarch64")]
mod nr {
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

fn say(msg: &[u8]) {
    // SAFETY: a valid buffer and its length; a failed write only loses the message.
    unsafe { syscall(nr::WRITE, 2, msg.as_ptr() as usize, msg.len(), 0) };
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(SETUP_FAILED)
}

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

/// A NUL-terminated string the kernel put on the stack.
type CStrPtr = *const u8;

unsafe extern "C" fn start(sp: *const usize) -> ! {
    // SAFETY: runs first, once, before anything reads a relocated pointer.
    unsafe { relocate() };
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    // SAFETY: the caller's stack pointer.
    unsafe { run(sp) }
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
        // SAFETY: the dynamic section is an array of (tag, value) pairs ending with DT_NULL.
        let [tag, value] = unsafe { core::ptr::read_volatile(entry) };
        match tag {
            DT_NULL => break,
            DT_RELA => rela = value,
            DT_RELASZ => size = value,
            DT_RELAENT => stride = value,
            DT_REL | DT_RELR => exit(SETUP_FAILED),
            _ => {}
        }
        // SAFETY: not past DT_NULL.
        entry = unsafe { entry.add(1) };
    }
    if stride != 24 {
        exit(SETUP_FAILED);
    }
    let mut at = 0;
    while at < size {
        // SAFETY: DT_RELA and DT_RELASZ describe an array of (offset, info, addend) triples.
        let [offset, info, addend] =
            unsafe { core::ptr::read_volatile((base + rela + at) as *const [usize; 3]) };
        if info as u32 != R_RELATIVE {
            exit(SETUP_FAILED);
        }
        // SAFETY: the linker's offset of a pointer-sized slot in a writable segment.
        unsafe { core::ptr::write_volatile((base + offset) as *mut usize, base + addend) };
        at += 24;
    }
}

/// Everything after [`relocate`].
///
/// # Safety
/// `sp` is the kernel's initial stack pointer.
#[inline(never)]
unsafe fn run(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack: argc, then argc pointers and a null, then the
    // environment's pointers and a null.
    let (argc, argv, envp) = unsafe {
        let argc = *sp;
        let argv = sp.add(1) as *const CStrPtr;
        (argc, argv, argv.add(argc + 1))
    };
    if argc < 2 {
        exit(SETUP_FAILED);
    }
    // SAFETY: argc >= 2: argv[0] and argv[1] are valid strings.
    let (name, mode) = unsafe { (bytes(*argv), bytes(*argv.add(1))) };
    if name == b"garuda-sandbox-init" {
        if argc != 3 {
            exit(SETUP_FAILED);
        }
        // SAFETY: argc == 3: argv[1] and argv[2] are valid strings.
        let (pid, fd) = unsafe { (number(*argv.add(1)), number(*argv.add(2))) };
        match (pid, fd) {
            (Some(pid), Some(fd)) => exit(reap(pid, fd)),
            _ => exit(SETUP_FAILED),
        }
    }
    if mode == b"garuda-exec-closed" && argc >= 3 {
        // SAFETY: argc >= 3: argv[2..] is a null-terminated array of strings.
        unsafe { exec_closed(argv.add(2), envp) }
    }
    exit(SETUP_FAILED)
}

/// The bytes of a NUL-terminated string, without the NUL.
///
/// # Safety
/// `s` points to a NUL-terminated string that outlives the result.
unsafe fn bytes<'a>(s: CStrPtr) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: the caller's string is NUL-terminated. A volatile read keeps the loop a loop
    // (the compiler would make it a call to `strlen`, which is not here).
    while unsafe { core::ptr::read_volatile(s.add(len)) } != 0 {
        len += 1;
    }
    // SAFETY: `len` bytes from `s` were just read.
    unsafe { core::slice::from_raw_parts(s, len) }
}

/// A decimal number of 1 to 9 digits.
///
/// # Safety
/// As [`bytes`].
unsafe fn number(s: CStrPtr) -> Option<i32> {
    // SAFETY: the caller's string.
    let digits = unsafe { bytes(s) };
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
    let mut status: i32 = 0;
    loop {
        // SAFETY: wait4 fills `status`, a valid int; no rusage is asked for.
        let r = unsafe {
            syscall(
                nr::WAIT4,
                usize::MAX,
                &mut status as *mut i32 as usize,
                0,
                0,
            )
        };
        if r == cmd as isize {
            break;
        }
        if r < 0 && r != -EINTR {
            return SETUP_FAILED;
        }
    }
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
    // SAFETY: an 8-byte buffer on this stack; a failed write only loses the report.
    unsafe { syscall(nr::WRITE, report_fd as usize, rec.as_ptr() as usize, 8, 0) };
    128 + signal
}

/// Close every descriptor above stdio, then execute `argv[0]` as `execvp` would.
///
/// # Safety
/// `argv` and `envp` are the process's own null-terminated arrays of strings.
unsafe fn exec_closed(argv: *const CStrPtr, envp: *const CStrPtr) -> ! {
    // SAFETY: close_range takes integers. Fail closed: a command must never run with the
    // descriptors this step exists to close.
    if unsafe { syscall(nr::CLOSE_RANGE, 3, u32::MAX as usize, 0, 0) } != 0 {
        say(b"garuda: the sandbox could not close inherited descriptors\n");
        exit(SETUP_FAILED);
    }
    // SAFETY: argv[0] is a valid string (the caller checked there is one).
    let name = unsafe { bytes(*argv) };
    let err = if name.is_empty() {
        -ENOENT
    } else if name.contains(&b'/') {
        // SAFETY: the process's own strings and arrays.
        unsafe { execve_or_sh(*argv, argv, envp) }
    } else {
        // SAFETY: as above.
        unsafe { search_path(name, argv, envp) }
    };
    if err == -ENOENT || err == -ENOTDIR {
        say(b"garuda: the command was not found in the sandbox\n");
        exit(127);
    }
    say(b"garuda: the command could not be executed in the sandbox\n");
    exit(126)
}

/// `execve`, and for a file the kernel does not know how to run (`ENOEXEC`: no `#!`),
/// `/bin/sh FILE ARGS…` as `execvp` does. Returns the negative errno of the failure.
///
/// # Safety
/// As [`exec_closed`]; `path` is a NUL-terminated string.
unsafe fn execve_or_sh(path: CStrPtr, argv: *const CStrPtr, envp: *const CStrPtr) -> isize {
    // SAFETY: valid string and arrays.
    let err = unsafe { syscall(nr::EXECVE, path as usize, argv as usize, envp as usize, 0) };
    if err != -ENOEXEC {
        return err;
    }
    const MAX: usize = 1024;
    let mut sh_argv: [CStrPtr; MAX] = [core::ptr::null(); MAX];
    sh_argv[0] = b"/bin/sh\0".as_ptr();
    sh_argv[1] = path;
    let mut i = 1;
    // SAFETY: argv is null-terminated; copies stop before the array's last slot.
    while unsafe { !(*argv.add(i)).is_null() } {
        if i + 2 >= MAX {
            return -ENOEXEC;
        }
        // SAFETY: argv[i] exists (checked not null above).
        sh_argv[i + 1] = unsafe { *argv.add(i) };
        i += 1;
    }
    // SAFETY: a static path and a null-terminated array of the process's strings.
    unsafe {
        syscall(
            nr::EXECVE,
            sh_argv[0] as usize,
            sh_argv.as_ptr() as usize,
            envp as usize,
            0,
        )
    };
    -ENOEXEC
}

/// Try `DIR/name` for each directory of `PATH` (unset: `/bin:/usr/bin`, glibc's default), as
/// glibc's `execvp`: go on past a missing file or a permission error, stop at any other.
///
/// # Safety
/// As [`exec_closed`].
unsafe fn search_path(name: &[u8], argv: *const CStrPtr, envp: *const CStrPtr) -> isize {
    let mut path: &[u8] = b"/bin:/usr/bin";
    let mut e = envp;
    // SAFETY: envp is null-terminated; each entry is a string.
    while unsafe { !(*e).is_null() } {
        // SAFETY: as above.
        let var = unsafe { bytes(*e) };
        if let Some(value) = var.strip_prefix(b"PATH=") {
            path = value;
            break;
        }
        // SAFETY: not past the null (checked above).
        e = unsafe { e.add(1) };
    }
    let mut buf = [0u8; 4096];
    let mut seen_eacces = false;
    let mut last = -ENOENT;
    for dir in path.split(|b| *b == b':') {
        // An empty entry is the current folder, as in glibc.
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        let len = dir.len() + 1 + name.len();
        if len + 1 > buf.len() {
            last = -ENAMETOOLONG;
            continue;
        }
        buf[..dir.len()].copy_from_slice(dir);
        buf[dir.len()] = b'/';
        buf[dir.len() + 1..len].copy_from_slice(name);
        buf[len] = 0;
        // SAFETY: `buf` is NUL-terminated; argv and envp are the process's.
        let err = unsafe { execve_or_sh(buf.as_ptr(), argv, envp) };
        match err {
            e if e == -EACCES => seen_eacces = true,
            e if e == -ENOENT || e == -ENOTDIR || e == -ELOOP || e == -ENAMETOOLONG => last = e,
            e => return e,
        }
    }
    if seen_eacces { -EACCES } else { last }
}

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
