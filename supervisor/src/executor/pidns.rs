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
    let (release, _) = kernel_release_and_build();
    let mut it = release.split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The running kernel's release (`6.18.44-…`, as `/proc/sys/kernel/osrelease`) and build
/// (`#1 SMP PREEMPT_DYNAMIC …`, as `/proc/sys/kernel/version`), from one `uname` call: the
/// two `/proc` files cost an open, a size query, two reads and a close each, every run.
pub fn kernel_release_and_build() -> (String, String) {
    let names = rustix::system::uname();
    (
        names.release().to_string_lossy().into_owned(),
        names.version().to_string_lossy().into_owned(),
    )
}

/// Whether `pid_max` is per PID namespace on the running kernel (Linux [`MIN_KERNEL`] or later).
pub fn pid_max_is_namespaced() -> bool {
    kernel_version().is_some_and(|v| v >= MIN_KERNEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `uname` gives what the two `/proc` files say: the probe cache's key (`probe_cache::Key`)
    /// was made from the files, and a key written by a build that read them must still match.
    #[test]
    fn uname_says_what_the_proc_files_say() {
        let (release, build) = kernel_release_and_build();
        let file = |p| std::fs::read_to_string(p).unwrap().trim().to_string();
        assert_eq!(release, file("/proc/sys/kernel/osrelease"));
        assert_eq!(build, file("/proc/sys/kernel/version"));
        let (major, minor) = kernel_version().unwrap();
        assert!(
            release.starts_with(&format!("{major}.{minor}")),
            "{release}"
        );
    }
}
