//! The confined agent's seccomp filter, kept as data: one row per refused system call, with
//! the condition and the reason (the same shape as the executors' table,
//! [`crate::executor::seccomp::DENIED`], and compiled by the same code,
//! [`program_for`]).
//!
//! The agent needs far less than a sandboxed command: it never executes a program, never
//! opens a file after it has confined itself, and talks only over its inherited socket pair
//! and TCP to the proxy bridge on its own loopback. So beyond the executors' table it refuses
//! `execve`/`execveat` outright, every socket family but `AF_INET`, and `socketpair`. The
//! program starts with the executors' prologue: x32 numbers refused, `clone3` answered
//! `ENOSYS` (its flags live in memory BPF cannot read; the C library then falls back to
//! `clone`, whose flags are checked here), so threads still start.
//!
//! Every refusal is `EPERM` (`ENOSYS` for `clone3`). `docs/agent-confinement.md` lists the
//! same rows.

use seccompiler::BpfProgram;

use crate::executor::seccomp::{program_for, Denied, FilterError, When};

const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// The one socket family the agent may create: IPv4, for the TCP connection to the proxy
/// bridge's listener on `127.0.0.1` inside its own network namespace.
pub const ALLOWED_SOCKET_FAMILIES: &[u64] = &[libc::AF_INET as u64];

// The ioctl request type differs between C libraries; the cast is needed on some.
#[allow(clippy::unnecessary_cast)]
const TERMINAL_INJECTION_IOCTLS: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

const PRCTL_DUMPABLE: &[u64] = &[libc::PR_SET_DUMPABLE as u64];

/// The table: every system call the confined agent may not make, and why.
pub const AGENT_DENIED: &[Denied] = &[
    Denied { name: "execve", nr: libc::SYS_execve, when: When::Always, reason: "the agent never runs a program: a command is a run_command request that the supervisor runs through an executor" },
    Denied { name: "execveat", nr: libc::SYS_execveat, when: When::Always, reason: "see execve" },
    Denied { name: "ptrace", nr: libc::SYS_ptrace, when: When::Always, reason: "reads and writes other processes' memory and registers (the supervisor's, the commands')" },
    Denied { name: "process_vm_readv", nr: libc::SYS_process_vm_readv, when: When::Always, reason: "reads another process's memory" },
    Denied { name: "process_vm_writev", nr: libc::SYS_process_vm_writev, when: When::Always, reason: "writes another process's memory" },
    Denied { name: "io_uring_setup", nr: libc::SYS_io_uring_setup, when: When::Always, reason: "io_uring performs operations that this filter never sees, and is a frequent source of kernel bugs" },
    Denied { name: "io_uring_enter", nr: libc::SYS_io_uring_enter, when: When::Always, reason: "see io_uring_setup" },
    Denied { name: "io_uring_register", nr: libc::SYS_io_uring_register, when: When::Always, reason: "see io_uring_setup" },
    Denied { name: "mount", nr: libc::SYS_mount, when: When::Always, reason: "the agent's view is fixed by the spawner; a mount would change what it can reach" },
    Denied { name: "umount2", nr: libc::SYS_umount2, when: When::Always, reason: "see mount" },
    Denied { name: "pivot_root", nr: libc::SYS_pivot_root, when: When::Always, reason: "see mount" },
    Denied { name: "fsopen", nr: libc::SYS_fsopen, when: When::Always, reason: "new mount API: see mount" },
    Denied { name: "fsconfig", nr: libc::SYS_fsconfig, when: When::Always, reason: "new mount API: see mount" },
    Denied { name: "fsmount", nr: libc::SYS_fsmount, when: When::Always, reason: "new mount API: see mount" },
    Denied { name: "fspick", nr: libc::SYS_fspick, when: When::Always, reason: "new mount API: reconfigures existing mounts" },
    Denied { name: "move_mount", nr: libc::SYS_move_mount, when: When::Always, reason: "new mount API: attaches mounts" },
    Denied { name: "open_tree", nr: libc::SYS_open_tree, when: When::Always, reason: "new mount API: clones mounts" },
    Denied { name: "mount_setattr", nr: libc::SYS_mount_setattr, when: When::Always, reason: "new mount API: would clear read-only flags" },
    Denied { name: "unshare", nr: libc::SYS_unshare, when: When::Always, reason: "a nested user namespace regains capabilities and reaches kernel code meant for privileged users" },
    Denied { name: "setns", nr: libc::SYS_setns, when: When::Always, reason: "joining another namespace leaves the sandbox" },
    Denied { name: "clone", nr: libc::SYS_clone, when: When::ArgHasAnyBit(0, NAMESPACE_FLAGS), reason: "clone that creates namespaces: same as unshare (plain clone stays: threads)" },
    Denied { name: "bpf", nr: libc::SYS_bpf, when: When::Always, reason: "loads programs into the kernel" },
    Denied { name: "perf_event_open", nr: libc::SYS_perf_event_open, when: When::Always, reason: "kernel attack surface and side channels" },
    Denied { name: "userfaultfd", nr: libc::SYS_userfaultfd, when: When::Always, reason: "used to win kernel race conditions in exploits" },
    Denied { name: "keyctl", nr: libc::SYS_keyctl, when: When::Always, reason: "the kernel keyring is shared outside the sandbox and holds credentials" },
    Denied { name: "add_key", nr: libc::SYS_add_key, when: When::Always, reason: "see keyctl" },
    Denied { name: "request_key", nr: libc::SYS_request_key, when: When::Always, reason: "see keyctl" },
    Denied { name: "socket", nr: libc::SYS_socket, when: When::ArgNotIn(0, ALLOWED_SOCKET_FAMILIES), reason: "only AF_INET, for the proxy bridge on the agent's own loopback: no unix socket can reach a listener of the host, no netlink, packet or vsock socket reaches the kernel's or hypervisor's surface" },
    Denied { name: "socketpair", nr: libc::SYS_socketpair, when: When::Always, reason: "the agent's one channel is inherited; new unix socket pairs are of no use to it" },
    Denied { name: "ioctl", nr: libc::SYS_ioctl, when: When::ArgEq(1, TERMINAL_INJECTION_IOCTLS), reason: "TIOCSTI and TIOCLINUX push keystrokes into a terminal (the agent has none; this is depth)" },
    Denied { name: "prctl", nr: libc::SYS_prctl, when: When::ArgEq(0, PRCTL_DUMPABLE), reason: "PR_SET_DUMPABLE stays 0 for the agent's life: its memory, where the model key lives, is not readable by the user's other processes" },
    Denied { name: "open_by_handle_at", nr: libc::SYS_open_by_handle_at, when: When::Always, reason: "opens files by handle, bypassing the path (the 'shocker' escape)" },
    Denied { name: "name_to_handle_at", nr: libc::SYS_name_to_handle_at, when: When::Always, reason: "the other half of open_by_handle_at" },
    Denied { name: "kexec_load", nr: libc::SYS_kexec_load, when: When::Always, reason: "replaces the kernel" },
    Denied { name: "kexec_file_load", nr: libc::SYS_kexec_file_load, when: When::Always, reason: "replaces the kernel" },
    Denied { name: "init_module", nr: libc::SYS_init_module, when: When::Always, reason: "loads kernel code" },
    Denied { name: "finit_module", nr: libc::SYS_finit_module, when: When::Always, reason: "loads kernel code" },
    Denied { name: "delete_module", nr: libc::SYS_delete_module, when: When::Always, reason: "unloads kernel code" },
    Denied { name: "reboot", nr: libc::SYS_reboot, when: When::Always, reason: "host control" },
    Denied { name: "swapon", nr: libc::SYS_swapon, when: When::Always, reason: "host control" },
    Denied { name: "swapoff", nr: libc::SYS_swapoff, when: When::Always, reason: "host control" },
    Denied { name: "acct", nr: libc::SYS_acct, when: When::Always, reason: "host control" },
    Denied { name: "quotactl", nr: libc::SYS_quotactl, when: When::Always, reason: "host control" },
    Denied { name: "fanotify_init", nr: libc::SYS_fanotify_init, when: When::Always, reason: "watches file access across the system" },
];

/// The agent's BPF program.
pub fn program() -> Result<BpfProgram, FilterError> {
    program_for(AGENT_DENIED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::seccomp::tests::{errno, native_arch, run, SECCOMP_RET_ALLOW};

    /// The search ahead of seccompiler's checks decides nothing for this table either (see
    /// `executor::seccomp::tests::the_search_changes_no_answer_and_shortens_the_unlisted`).
    #[test]
    fn the_search_changes_no_answer() {
        crate::executor::seccomp::tests::search_changes_no_answer(AGENT_DENIED);
    }

    fn with(i: u8, v: u64) -> [u64; 6] {
        let mut a = [0u64; 6];
        a[usize::from(i)] = v;
        a
    }

    /// Each row through the program as built, in the test interpreter of the executors'
    /// filter: refused where the row says, allowed right next to it.
    #[test]
    fn every_row_in_the_interpreter() {
        let p = program().unwrap();
        let arch = native_arch();
        let eperm = errno(libc::EPERM);
        for d in AGENT_DENIED {
            assert!(!d.reason.is_empty(), "{}", d.name);
            match d.when {
                When::Always => {
                    for args in [[0; 6], [u64::MAX; 6]] {
                        assert_eq!(run(&p, d.nr, arch, args), eperm, "{}", d.name);
                    }
                }
                When::ArgEq(i, values) => {
                    for v in values {
                        assert_eq!(run(&p, d.nr, arch, with(i, *v)), eperm, "{}", d.name);
                    }
                    let other = with(i, values[0] + 1);
                    assert_eq!(run(&p, d.nr, arch, other), SECCOMP_RET_ALLOW, "{}", d.name);
                }
                When::ArgHasAnyBit(i, bits) => {
                    for b in bits {
                        let args = with(i, b | libc::SIGCHLD as u64);
                        assert_eq!(run(&p, d.nr, arch, args), eperm, "{}", d.name);
                    }
                    // A thread: what pthread_create passes to clone once clone3 is ENOSYS.
                    let thread = (libc::CLONE_VM
                        | libc::CLONE_FS
                        | libc::CLONE_FILES
                        | libc::CLONE_SIGHAND
                        | libc::CLONE_THREAD
                        | libc::CLONE_SYSVSEM
                        | libc::CLONE_SETTLS
                        | libc::CLONE_PARENT_SETTID
                        | libc::CLONE_CHILD_CLEARTID) as u64;
                    assert_eq!(run(&p, d.nr, arch, with(i, thread)), SECCOMP_RET_ALLOW);
                }
                When::ArgNotIn(i, values) => {
                    for v in values {
                        assert_eq!(run(&p, d.nr, arch, with(i, *v)), SECCOMP_RET_ALLOW);
                    }
                    for v in [
                        libc::AF_UNIX as u64,
                        libc::AF_INET6 as u64,
                        libc::AF_NETLINK as u64,
                        libc::AF_PACKET as u64,
                        libc::AF_VSOCK as u64,
                        0,
                        0xffff_ffff,
                    ] {
                        assert_eq!(run(&p, d.nr, arch, with(i, v)), eperm, "{} {v}", d.name);
                    }
                }
            }
        }
        assert_eq!(run(&p, libc::SYS_clone3, arch, [0; 6]), errno(libc::ENOSYS));
        // What the agent does need stays open: its socket, TCP to the bridge, threads, memory.
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_recvfrom,
            libc::SYS_sendto,
            libc::SYS_connect,
            libc::SYS_mmap,
            libc::SYS_futex,
            libc::SYS_epoll_wait,
            libc::SYS_getrandom,
            libc::SYS_exit_group,
        ] {
            assert_eq!(run(&p, nr, arch, [0; 6]), SECCOMP_RET_ALLOW, "{nr}");
        }
    }

    /// `docs/agent-confinement.md` lists exactly the rows of the table.
    #[test]
    fn table_and_doc_agree() {
        let doc = include_str!("../../../docs/agent-confinement.md");
        let section = doc
            .split("## The seccomp table")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .unwrap();
        let documented: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .collect();
        let table: Vec<&str> = AGENT_DENIED.iter().map(|d| d.name).collect();
        assert_eq!(documented, table);
    }

    /// The issue's minimum, by name.
    #[test]
    fn issue_minimum_is_listed() {
        for name in [
            "execve",
            "execveat",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "mount",
            "umount2",
            "fsopen",
            "fsconfig",
            "fsmount",
            "move_mount",
            "open_tree",
            "mount_setattr",
            "pivot_root",
            "unshare",
            "setns",
            "bpf",
            "perf_event_open",
            "keyctl",
            "add_key",
            "request_key",
            "socket",
        ] {
            assert!(
                AGENT_DENIED.iter().any(|d| d.name == name),
                "{name} missing"
            );
        }
    }
}
