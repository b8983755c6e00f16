//! Work started to run beside the thread that starts it: on another CPU, not queued behind it.
//!
//! Linux places a new thread or child process on a CPU when it is created, and on this
//! benchmark machine (2 vCPUs) it often chose the CPU of the thread that created it, where the
//! new one waited until that thread blocked, while the other CPU idled: its work then came
//! after the creator's instead of beside it. The kernel's own balancing did not move it in
//! time (an idle CPU pulls work only after it has been idle for a while). Three pieces of
//! Garuda's run path are started precisely to run beside the supervisor: the namespace helper
//! and landlock's outer process (`garuda_supervisor::sys`) and the project walk's second
//! thread ([`crate::walk_cache`]). Each is moved off its creator's CPU right after it starts
//! (docs/benchmarks.md, "Children on the other CPU").
//!
//! A process moved so hands its narrower CPU set to its own children: whoever runs a user's
//! program from it gives that program back the supervisor's set (landlock's command does).

use rustix::process::Pid;
use rustix::thread::CpuSet;

/// Let `id` (a thread or a child process this thread has just started) run on every CPU this
/// thread may use but the one it is on now. Best effort: one left here still runs, only later.
pub fn move_off_this_cpu(id: Pid) {
    if let Ok(allowed) = rustix::thread::sched_getaffinity(None) {
        if let Some(elsewhere) = cpus_but(allowed, rustix::thread::sched_getcpu()) {
            let _ = rustix::thread::sched_setaffinity(Some(id), &elsewhere);
        }
    }
}

/// The CPUs of `allowed` other than `here`, or `None` when `here` is the only one (or not one
/// of them: then the caller is already elsewhere and nothing needs moving).
fn cpus_but(mut allowed: CpuSet, here: usize) -> Option<CpuSet> {
    if !allowed.is_set(here) || allowed.count() < 2 {
        return None;
    }
    allowed.unset(here);
    Some(allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs left: all but the creator's; none to move to when it has only one.
    #[test]
    fn the_others_are_all_but_this_one() {
        let mut two = CpuSet::new();
        two.set(0);
        two.set(3);
        let elsewhere = cpus_but(two, 3).unwrap();
        assert!(elsewhere.is_set(0) && !elsewhere.is_set(3));
        assert_eq!(elsewhere.count(), 1);
        let mut one = CpuSet::new();
        one.set(2);
        assert!(cpus_but(one, 2).is_none());
        assert!(
            cpus_but(two, 1).is_none(),
            "not on one of them: nothing to move"
        );
    }
}
