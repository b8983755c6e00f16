//! The seccomp filter every Linux executor installs, kept as data.
//!
//! Each entry of [`DENIED`] names a system call, the condition under which it is refused and
//! the reason, so a reviewer reads one table instead of BPF. The filter allows by default:
//! the namespaces, mounts and Landlock already confine the filesystem and the network, and the
//! filter closes the kernel interfaces that those layers do not cover (debugging other
//! processes, kernel attack surface, nested namespaces, terminal injection).
//!
//! The program is `prologue ++ seccompiler(DENIED)`:
//! - the prologue refuses x32 system calls (numbers with bit 30 set) on x86-64, which would
//!   otherwise reach the same kernel code under numbers the table does not list, and answers
//!   `clone3` with `ENOSYS`: its flags live in memory that BPF cannot read, and `ENOSYS` makes
//!   the C library fall back to `clone`, whose flags the table does check;
//! - seccompiler then checks the architecture (a foreign one kills the process) and the table
//!   (a match returns `EPERM`).
//!
//! Both Linux executors install the identical program: `landlock` with `seccomp(2)` in the
//! command's own process just before `execve`, `bubblewrap` through `--add-seccomp-fd`.
//!
//! Proxy mode needs no exception: the bridge's listener is made by setup code before the
//! filter applies and served by the supervisor ([`crate::netbridge`]); the command only
//! connects an `AF_INET` socket to its loopback, which the table allows.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// When a denied system call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Always.
    Always,
    /// When argument `arg` (32-bit) equals one of the values.
    ArgEq(u8, &'static [u64]),
    /// When argument `arg` (64-bit) has any of these bits set (one rule per bit).
    ArgHasAnyBit(u8, &'static [u64]),
    /// When argument `arg` (32-bit) is none of the values.
    ArgNotIn(u8, &'static [u64]),
}

/// One refused system call, with the reason a reviewer can check.
#[derive(Debug, Clone, Copy)]
pub struct Denied {
    /// System call name (as in `man 2`).
    pub name: &'static str,
    /// Its number on the build architecture.
    pub nr: i64,
    /// When it is refused.
    pub when: When,
    /// Why.
    pub reason: &'static str,
}

const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

const ALLOWED_SOCKET_FAMILIES: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
];

// The ioctl request type differs between C libraries; the cast is needed on some.
#[allow(clippy::unnecessary_cast)]
const TERMINAL_INJECTION_IOCTLS: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

macro_rules! denied {
    ($name:ident, $when:expr, $reason:expr) => {
        Denied {
            name: stringify!($name),
            nr: paste_nr!($name),
            when: $when,
            reason: $reason,
        }
    };
}

macro_rules! paste_nr {
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (clone) => {
        libc::SYS_clone
    };
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (acct) => {
        libc::SYS_acct
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
    (fanotify_init) => {
        libc::SYS_fanotify_init
    };
    (socket) => {
        libc::SYS_socket
    };
    (socketpair) => {
        libc::SYS_socketpair
    };
    (ioctl) => {
        libc::SYS_ioctl
    };
}

/// The table: every system call the sandboxed command may not make, and why.
pub const DENIED: &[Denied] = &[
    denied!(ptrace, When::Always, "reads and writes other processes' memory and registers"),
    denied!(process_vm_readv, When::Always, "reads another process's memory"),
    denied!(process_vm_writev, When::Always, "writes another process's memory"),
    denied!(io_uring_setup, When::Always, "io_uring bypasses seccomp for the operations it submits and is a frequent source of kernel bugs"),
    denied!(io_uring_enter, When::Always, "see io_uring_setup"),
    denied!(io_uring_register, When::Always, "see io_uring_setup"),
    denied!(userfaultfd, When::Always, "used to win kernel race conditions in exploits"),
    denied!(perf_event_open, When::Always, "kernel attack surface and side channels"),
    denied!(bpf, When::Always, "loads programs into the kernel"),
    denied!(keyctl, When::Always, "the kernel keyring is shared outside the sandbox and holds credentials"),
    denied!(add_key, When::Always, "see keyctl"),
    denied!(request_key, When::Always, "see keyctl"),
    denied!(unshare, When::Always, "a nested user namespace regains capabilities and reaches kernel code meant for privileged users"),
    denied!(setns, When::Always, "joining another namespace leaves the sandbox"),
    denied!(clone, When::ArgHasAnyBit(0, NAMESPACE_FLAGS), "clone that creates namespaces: same as unshare"),
    denied!(mount, When::Always, "the sandbox's mounts are fixed before the command starts"),
    denied!(umount2, When::Always, "unmounting would reveal what the sandbox hides"),
    denied!(pivot_root, When::Always, "changes the root of the mount namespace"),
    denied!(fsopen, When::Always, "new mount API"),
    denied!(fsconfig, When::Always, "new mount API"),
    denied!(fsmount, When::Always, "new mount API"),
    denied!(fspick, When::Always, "new mount API: reconfigures existing mounts"),
    denied!(open_tree, When::Always, "new mount API: clones mounts"),
    denied!(move_mount, When::Always, "new mount API: attaches mounts"),
    denied!(mount_setattr, When::Always, "new mount API: would clear read-only flags"),
    denied!(open_by_handle_at, When::Always, "opens files by handle, bypassing the path (the 'shocker' escape)"),
    denied!(name_to_handle_at, When::Always, "the other half of open_by_handle_at"),
    denied!(kexec_load, When::Always, "replaces the kernel"),
    denied!(kexec_file_load, When::Always, "replaces the kernel"),
    denied!(init_module, When::Always, "loads kernel code"),
    denied!(finit_module, When::Always, "loads kernel code"),
    denied!(delete_module, When::Always, "unloads kernel code"),
    denied!(reboot, When::Always, "host control"),
    denied!(swapon, When::Always, "host control"),
    denied!(swapoff, When::Always, "host control"),
    denied!(acct, When::Always, "host control"),
    denied!(quotactl, When::Always, "host control"),
    denied!(fanotify_init, When::Always, "watches file access across the system"),
    denied!(socket, When::ArgNotIn(0, ALLOWED_SOCKET_FAMILIES), "only unix, IPv4 and IPv6 sockets: AF_VSOCK reaches the hypervisor, AF_NETLINK/AF_PACKET and the rest are kernel attack surface"),
    denied!(socketpair, When::ArgNotIn(0, ALLOWED_SOCKET_FAMILIES), "see socket"),
    denied!(ioctl, When::ArgEq(1, TERMINAL_INJECTION_IOCTLS), "TIOCSTI and TIOCLINUX push keystrokes into the user's terminal"),
];

/// Errors building the filter (a defect in the table, never a runtime condition).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct FilterError(String);

fn target_arch() -> Result<TargetArch, FilterError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else {
        Err(FilterError(format!(
            "unsupported architecture {}",
            std::env::consts::ARCH
        )))
    }
}

fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| FilterError(e.to_string()))
}

fn rules_for(when: When) -> Result<Vec<SeccompRule>, FilterError> {
    let rule = |conds: Vec<SeccompCondition>| {
        SeccompRule::new(conds).map_err(|e| FilterError(e.to_string()))
    };
    match when {
        When::Always => Ok(vec![]),
        When::ArgEq(arg, values) => values
            .iter()
            .map(|v| {
                rule(vec![cond(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    *v,
                )?])
            })
            .collect(),
        When::ArgHasAnyBit(arg, bits) => bits
            .iter()
            .map(|b| {
                rule(vec![cond(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(*b),
                    *b,
                )?])
            })
            .collect(),
        When::ArgNotIn(arg, values) => {
            let conds = values
                .iter()
                .map(|v| cond(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *v))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(vec![rule(conds)?])
        }
    }
}

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The hand-written prologue (see the module documentation).
fn prologue() -> Vec<sock_filter> {
    let errno = |e: i32| stmt(BPF_RET_K, SECCOMP_RET_ERRNO | (e as u32 & 0xffff));
    vec![
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
        jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1),
        errno(libc::ENOSYS),
        jump(BPF_JEQ_K, libc::SYS_clone3 as u32, 0, 1),
        errno(libc::ENOSYS),
    ]
}

/// Build the complete BPF program.
pub fn program() -> Result<BpfProgram, FilterError> {
    program_for(DENIED)
}

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// Offset of `seccomp_data.arch`.
const ARCH_OFFSET: u32 = 4;
/// `seccomp_data.arch` of the build architecture (`AUDIT_ARCH_X86_64`, `AUDIT_ARCH_AARCH64`).
const NATIVE_AUDIT_ARCH: u32 = if cfg!(target_arch = "x86_64") {
    62 | 0x8000_0000 | 0x4000_0000
} else {
    183 | 0x8000_0000 | 0x4000_0000
};

/// A binary search over the table's system call numbers, placed between the prologue and
/// seccompiler's program: a number the table does not list is allowed after about
/// log2(entries) comparisons; a listed one, or a foreign architecture, goes on to
/// seccompiler's program, which decides exactly as before (its default action is the same
/// allow).
///
/// Why: when a filter is installed the kernel runs it for every system call number of every
/// architecture it serves, to cache the numbers it always allows (`seccomp_cache_prepare`),
/// with interrupts off. seccompiler's program compares the number with each entry in turn, so
/// that emulation took about a tenth of a millisecond per install, and every landlock sandbox
/// installs the filter twice on its start-up path (PID 1 and the command).
fn search(numbers: &[u32]) -> Result<Vec<sock_filter>, FilterError> {
    if numbers.is_empty() {
        return Ok(Vec::new());
    }
    // Layout: load arch; foreign → body; load nr; the tree (2n − 1 jumps); allow; body.
    let tree_at = 3;
    let allow = tree_at + 2 * numbers.len() - 1;
    let body = allow + 1;
    let offset = |target: usize, from: usize| -> Result<u8, FilterError> {
        u8::try_from(target - from - 1).map_err(|_| {
            FilterError(format!(
                "the search over {} system call numbers is too long for a BPF jump",
                numbers.len()
            ))
        })
    };
    let mut out = vec![
        stmt(BPF_LD_W_ABS, ARCH_OFFSET),
        jump(BPF_JEQ_K, NATIVE_AUDIT_ARCH, 0, offset(body, 1)?),
        stmt(BPF_LD_W_ABS, 0),
    ];
    fn tree(
        values: &[u32],
        targets: (usize, usize),
        out: &mut Vec<sock_filter>,
        offset: &dyn Fn(usize, usize) -> Result<u8, FilterError>,
    ) -> Result<(), FilterError> {
        let (body, allow) = targets;
        let at = out.len();
        if let [value] = values {
            out.push(jump(
                BPF_JEQ_K,
                *value,
                offset(body, at)?,
                offset(allow, at)?,
            ));
            return Ok(());
        }
        let (left, right) = values.split_at(values.len() / 2);
        let right_at = at + 1 + (2 * left.len() - 1);
        out.push(jump(BPF_JGE_K, right[0], offset(right_at, at)?, 0));
        tree(left, targets, out, offset)?;
        tree(right, targets, out, offset)
    }
    tree(numbers, (body, allow), &mut out, &offset)?;
    out.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    debug_assert_eq!(out.len(), body);
    Ok(out)
}

/// The program for another table of the same shape: the prologue (x32 refused, `clone3`
/// answered `ENOSYS`), the architecture check, `EPERM` for each entry. The confined agent's
/// table (`crate::agent::seccomp`) is built with it.
pub fn program_for(table: &[Denied]) -> Result<BpfProgram, FilterError> {
    program_with(table, true)
}

/// [`program_for`], with or without the [`search`] (without: the tests' reference).
fn program_with(table: &[Denied], with_search: bool) -> Result<BpfProgram, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for d in table {
        let mut r = rules_for(d.when)?;
        let entry = rules.entry(d.nr).or_default();
        if !entry.is_empty() && r.is_empty() {
            return Err(FilterError(format!("{} listed twice", d.name)));
        }
        entry.append(&mut r);
    }
    // The listed numbers, ascending (the map's order), for the search.
    let mut numbers: Vec<u32> = Vec::with_capacity(rules.len());
    for nr in rules.keys() {
        numbers
            .push(u32::try_from(*nr).map_err(|_| FilterError(format!("system call number {nr}")))?);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(|e| FilterError(e.to_string()))?;
    let body: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| FilterError(e.to_string()))?;
    let mut program = prologue();
    if with_search {
        program.extend(search(&numbers)?);
    }
    program.extend(body);
    Ok(program)
}

/// The program as the raw bytes of `struct sock_filter[]`, the format bubblewrap reads from
/// `--add-seccomp-fd`.
pub fn program_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for f in program {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn builds_and_every_entry_has_a_reason() {
        let p = program().unwrap();
        assert!(p.len() > DENIED.len());
        for d in DENIED {
            assert!(!d.reason.is_empty(), "{}", d.name);
        }
        assert_eq!(program_bytes(&p).len(), p.len() * 8);
    }

    pub(crate) const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
    const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;

    pub(crate) fn native_arch() -> u32 {
        // The program's own constant, checked against the table of architectures here.
        assert!([AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64].contains(&NATIVE_AUDIT_ARCH));
        NATIVE_AUDIT_ARCH
    }

    /// Runs the program as the kernel would on one `struct seccomp_data` and returns the
    /// action. A classic-BPF interpreter for exactly the instructions the program uses (loads
    /// of the data, AND, the conditional jumps, return); any other instruction fails the test.
    pub(crate) fn run(program: &[sock_filter], nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        run_counting(program, nr, arch, args, &std::cell::Cell::new(0))
    }

    /// [`run`], counting the instructions run in `count`.
    fn run_counting(
        program: &[sock_filter],
        nr: i64,
        arch: u32,
        args: [u64; 6],
        count: &std::cell::Cell<usize>,
    ) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&(nr as i32).to_ne_bytes());
        data[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        let mut acc: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = &program[pc];
            pc += 1;
            count.set(count.get() + 1);
            let k = ins.k;
            let jump = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
            match ins.code {
                0x20 => {
                    let at = k as usize;
                    acc = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                0x54 => acc &= k,
                0x05 => pc += k as usize,
                0x15 => pc += jump(acc == k),
                0x25 => pc += jump(acc > k),
                0x35 => pc += jump(acc >= k),
                0x45 => pc += jump(acc & k != 0),
                0x06 => return k,
                other => panic!("instruction {other:#x} at {} is not interpreted", pc - 1),
            }
        }
    }

    pub(crate) fn errno(e: i32) -> u32 {
        SECCOMP_RET_ERRNO | e as u32
    }

    /// Every rule of the table, every value of its condition and an allowed value next to it,
    /// the prologue and the architecture check, through the program as built.
    #[test]
    fn every_rule_in_the_interpreter() {
        let p = program().unwrap();
        let arch = native_arch();
        let eperm = errno(libc::EPERM);
        let with = |i: u8, v: u64| {
            let mut a = [0u64; 6];
            a[usize::from(i)] = v;
            a
        };
        for d in DENIED {
            let name = d.name;
            match d.when {
                When::Always => {
                    for args in [[0; 6], [u64::MAX; 6]] {
                        assert_eq!(run(&p, d.nr, arch, args), eperm, "{name}");
                    }
                }
                When::ArgEq(i, values) => {
                    for v in values {
                        assert_eq!(run(&p, d.nr, arch, with(i, *v)), eperm, "{name} {v:#x}");
                        // The kernel reads these as 32 bits; so does the filter.
                        let high = with(i, v | 1 << 32);
                        assert_eq!(run(&p, d.nr, arch, high), eperm, "{name} {v:#x} high");
                    }
                    assert_eq!(
                        run(&p, d.nr, arch, with(i, values[0] + 1)),
                        SECCOMP_RET_ALLOW,
                        "{name}"
                    );
                }
                When::ArgHasAnyBit(i, bits) => {
                    for b in bits {
                        let args = with(i, b | libc::SIGCHLD as u64);
                        assert_eq!(run(&p, d.nr, arch, args), eperm, "{name} {b:#x}");
                    }
                    let none = with(i, libc::SIGCHLD as u64 | libc::CLONE_VM as u64);
                    assert_eq!(run(&p, d.nr, arch, none), SECCOMP_RET_ALLOW, "{name}");
                }
                When::ArgNotIn(i, values) => {
                    for v in values {
                        assert_eq!(
                            run(&p, d.nr, arch, with(i, *v)),
                            SECCOMP_RET_ALLOW,
                            "{name} {v}"
                        );
                    }
                    for v in [
                        0,
                        libc::AF_NETLINK as u64,
                        libc::AF_VSOCK as u64,
                        0xffff_ffff,
                    ] {
                        assert_eq!(run(&p, d.nr, arch, with(i, v)), eperm, "{name} {v}");
                    }
                }
            }
        }
        // The prologue: any x32 number, and clone3 whatever its arguments.
        for nr in [libc::SYS_getpid, libc::SYS_ptrace, 521, 0x3fff_ffff] {
            let x32 = 0x4000_0000 | nr;
            assert_eq!(run(&p, x32, arch, [0; 6]), errno(libc::ENOSYS), "{x32:#x}");
        }
        assert_eq!(run(&p, libc::SYS_clone3, arch, [0; 6]), errno(libc::ENOSYS));
        // A foreign architecture kills the process.
        assert_eq!(
            run(&p, libc::SYS_getpid, AUDIT_ARCH_I386, [0; 6]),
            SECCOMP_RET_KILL_PROCESS
        );
    }

    /// What the landlock executor's PID 1 does after it installs the program, all let
    /// through, so the program needs no exception there: execute the start-up program
    /// (`sys::INIT_PROGRAM`), wait, write its report, exit; what the bubblewrap executor's
    /// exec step adds (`close_range`); and the calls a dynamically linked or
    /// signal-handling reaper would make.
    #[test]
    fn pid1_reaper_calls_are_allowed() {
        let p = program().unwrap();
        for nr in [
            libc::SYS_execveat,
            libc::SYS_execve,
            libc::SYS_set_tid_address,
            libc::SYS_set_robust_list,
            libc::SYS_rseq,
            libc::SYS_prlimit64,
            libc::SYS_getrandom,
            libc::SYS_pread64,
            libc::SYS_newfstatat,
            libc::SYS_wait4,
            libc::SYS_waitid,
            libc::SYS_write,
            libc::SYS_read,
            libc::SYS_close,
            libc::SYS_exit_group,
            libc::SYS_rt_sigaction,
            libc::SYS_rt_sigprocmask,
            libc::SYS_sigaltstack,
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_mprotect,
            libc::SYS_brk,
            libc::SYS_openat,
            libc::SYS_fcntl,
            libc::SYS_getpid,
            libc::SYS_prctl,
            libc::SYS_kill,
            libc::SYS_ppoll,
            libc::SYS_close_range,
        ] {
            assert_eq!(
                run(&p, nr, native_arch(), [0; 6]),
                SECCOMP_RET_ALLOW,
                "{nr}"
            );
        }
    }

    /// The search decides nothing: for every system call number (and the x32 ones, and
    /// numbers no table lists), on the native and two foreign architectures, with the
    /// arguments each rule tests, the program answers as the program without it. And it is
    /// what makes an unlisted number cheap: a few instructions instead of one per entry.
    /// Control: a search that leaves out one listed number lets that call through. (The
    /// agent's table: `agent::seccomp::tests::the_search_changes_no_answer`.)
    #[test]
    fn the_search_changes_no_answer_and_shortens_the_unlisted() {
        search_changes_no_answer(DENIED);
        // Control: a search over every number but ptrace's.
        let rest: Vec<u32> = {
            let mut n: Vec<u32> = DENIED
                .iter()
                .filter(|d| d.nr != libc::SYS_ptrace)
                .map(|d| d.nr as u32)
                .collect();
            n.sort_unstable();
            n.dedup();
            n
        };
        let mut broken = prologue();
        broken.extend(search(&rest).unwrap());
        broken.extend_from_slice(&program_with(DENIED, false).unwrap()[prologue().len()..]);
        assert_eq!(
            run(&broken, libc::SYS_ptrace, native_arch(), [0; 6]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&program().unwrap(), libc::SYS_ptrace, native_arch(), [0; 6]),
            errno(libc::EPERM)
        );
    }

    /// For `table`: the program with the search answers as the program without it, for
    /// every number, three architectures and each rule's arguments; an unlisted number runs
    /// at most 16 instructions, and fewer than half of what it runs without the search.
    pub(crate) fn search_changes_no_answer(table: &[Denied]) {
        let with = program_with(table, true).unwrap();
        let without = program_with(table, false).unwrap();
        let mut args: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
        for d in table {
            let (i, values): (u8, &[u64]) = match d.when {
                When::Always => (0, &[]),
                When::ArgEq(i, v) | When::ArgHasAnyBit(i, v) | When::ArgNotIn(i, v) => (i, v),
            };
            for v in values {
                let mut a = [0u64; 6];
                a[usize::from(i)] = *v;
                args.push(a);
            }
        }
        let numbers = (0..1100).chain([0x4000_0000, 0x4000_0065, 0x7fff_ffff, 0xffff_ffff]);
        for nr in numbers {
            for arch in [native_arch(), AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64 ^ 1] {
                for a in &args {
                    assert_eq!(
                        run(&with, nr, arch, *a),
                        run(&without, nr, arch, *a),
                        "{nr} {arch:#x} {a:?}"
                    );
                }
            }
        }
        let listed: Vec<i64> = table.iter().map(|d| d.nr).collect();
        let unlisted = (0..450).find(|nr| !listed.contains(nr)).unwrap();
        let (short, long) = (
            steps(&with, unlisted, native_arch()),
            steps(&without, unlisted, native_arch()),
        );
        assert!(short <= 16 && long > 2 * short, "{short} vs {long}");
    }

    /// How many instructions the program runs for `nr` (no arguments).
    fn steps(program: &[sock_filter], nr: i64, arch: u32) -> usize {
        let count = std::cell::Cell::new(0);
        run_counting(program, nr, arch, [0; 6], &count);
        count.get()
    }

    #[test]
    fn issue_minimum_is_listed() {
        for name in [
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "io_uring_setup",
            "userfaultfd",
            "perf_event_open",
            "bpf",
            "keyctl",
            "add_key",
            "unshare",
            "fsopen",
            "open_tree",
            "mount_setattr",
            "move_mount",
            "socket",
            "ioctl",
        ] {
            assert!(DENIED.iter().any(|d| d.name == name), "{name} missing");
        }
    }
}
