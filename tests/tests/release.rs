//! `Executor::run_released`: the release (the audit intent's `fdatasync`) runs while the
//! sandbox is built, the command's program starts only after it, and a failed release stops
//! the command. A binary of its own: its checks count this process's children, which no other
//! test may add to while it runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // helpers shared with the contract suite; this one uses a few
mod util;

use std::ffi::OsString;
use std::time::Duration;

use garuda_supervisor::executor::select::executor_of;
use garuda_supervisor::executor::{
    probe_executors, CommandSpec, ExecError, ExecutorKind, ExitStatus, StdioMode,
};
use util::Fixture;

/// Live processes other than this one that are a copy of this test binary or name `base` on
/// their command line.
fn left_anywhere(base: &std::path::Path) -> Vec<(u32, String)> {
    let me = std::process::id();
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let base = base.to_string_lossy().into_owned();
    let mut left = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        if zombie {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        let same_exe = std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe);
        if same_exe || cmdline.contains(&base) {
            left.push((pid, cmdline));
        }
    }
    left
}

/// Whether `kind` can run here; when it cannot, says so and fails unless
/// `GARUDA_ALLOW_NOT_TESTED` names `release-<kind>`.
fn available(kind: ExecutorKind) -> bool {
    let probe = probe_executors()
        .into_iter()
        .find(|p| p.kind == kind)
        .expect("every kind is probed");
    if !probe.available {
        util::not_tested(
            &format!("release-{}", kind.name()),
            &format!("the release on {kind} ({})", probe.detail),
        );
    }
    probe.available
}

/// `run_released`: the command's program starts only after the release, which runs while
/// the sandbox is built (the audit intent's sync overlaps the setup), and a failed release
/// stops the command. Landlock holds the command on a pipe; the host executor (the control)
/// calls the release before it starts anything, so no child exists while it runs.
#[test]
fn a_command_starts_only_after_its_release() {
    let fx = Fixture::new("release");
    for kind in [
        ExecutorKind::Landlock,
        ExecutorKind::Bubblewrap,
        ExecutorKind::Host,
    ] {
        if kind.is_sandbox() && !available(kind) {
            continue;
        }
        let marker = fx.project.join(format!("released-{}.txt", kind.name()));
        let spec = CommandSpec::new(vec![
            OsString::from("/bin/sh"),
            OsString::from("-c"),
            OsString::from(format!("echo ran > '{}'", marker.display())),
        ]);
        let executor = executor_of(kind);
        // Released after a pause: the command has not run meanwhile.
        let mut seen = None;
        let out = executor
            .run_released(&spec, &fx.policy, StdioMode::Capture, &mut || {
                std::thread::sleep(Duration::from_millis(300));
                seen = Some((marker.exists(), util::descendants(std::process::id()).len()));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        assert!(marker.exists(), "{kind}: the released command ran");
        let (ran_before, children) = seen.expect("the release was called");
        assert!(!ran_before, "{kind}: the command ran before its release");
        if kind.is_sandbox() {
            assert!(
                children > 0,
                "{kind}: the sandbox is built while the release runs"
            );
        } else {
            assert_eq!(
                children, 0,
                "{kind}: the release runs before anything starts"
            );
        }
        std::fs::remove_file(&marker).unwrap();
        // A failed release: the command never runs, and the run says why.
        let got = executor.run_released(&spec, &fx.policy, StdioMode::Capture, &mut || {
            Err(String::from("the audit log's disk is full"))
        });
        match got {
            Err(ExecError::NotReleased { reason }) => {
                assert_eq!(reason, "the audit log's disk is full", "{kind}")
            }
            other => panic!("{kind}: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "{kind}: an unreleased command ran");
        assert_eq!(
            util::descendants(std::process::id()).len(),
            0,
            "{kind}: nothing of the sandbox is left"
        );
        // Also none that outlived its parent (reparented away from this process): a copy of
        // this test binary (outer, PID 1 before its exec) or a bwrap of this fixture.
        let left = left_anywhere(&fx.base);
        assert!(left.is_empty(), "{kind}: left running: {left:?}");
    }
}
