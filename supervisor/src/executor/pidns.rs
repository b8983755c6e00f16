//! The process limit both Linux executors use: the `pid_max` of a PID namespace of their own,
//! which is per namespace since Linux 6.14 (before, the file is the host's global setting).
//! `landlock`'s init writes it for the namespace it is PID 1 of; `bubblewrap`'s spawn hook
//! makes a namespace around bwrap and writes it there ([`crate::sys::bwrap_pre_exec`]).

/// Smallest process limit the executors can set: the kernel refuses a `pid_max` below
/// 301. A smaller `max_processes` is raised to this.
pub const MIN_PID_MAX: u32 = 301;

/// Oldest kernel whose `pid_max` is per PID namespace (the process limit); on an older kernel
/// the write would reach the host's global limit, so `landlock` refuses to run there and
/// `bubblewrap` falls back to `RLIMIT_NPROC` or a pids cgroup.
pub const MIN_KERNEL: (u32, u32) = (6, 14);

/// `(major, minor)` of the running kernel.
pub fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = release.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Whether `pid_max` is per PID namespace on the running kernel (Linux [`MIN_KERNEL`] or later).
pub fn pid_max_is_namespaced() -> bool {
    kernel_version().is_some_and(|v| v >= MIN_KERNEL)
}
