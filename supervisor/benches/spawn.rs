//! Spawn overhead of each executor over a plain fork/exec of `/bin/true`.
//!
//! Run: `cargo bench -p garuda --bench spawn` (optionally `-- RUNS`, default 300).
//! Prints the median and p90 of each variant and the difference to its baseline:
//! - `plain`: `std::process::Command::new("/bin/true").status()`;
//! - `host`, `landlock`: the executors, compared with `plain`;
//! - `bwrap-bare`: the system bwrap with exactly the executor's argument vector (same mounts,
//!   same seccomp program), started directly — the baseline of the `bubblewrap` executor.
//!
//! The policy is the real one for a temporary project and the current user (about a dozen
//! mounts: caches, protected git paths, secrets).

#![allow(clippy::expect_used)] // benchmark code: a panic aborts the run

use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use garuda_policy::{build_exec_policy, load_settings, ExecPolicy, HostEnv};
use garuda_supervisor::executor::bubblewrap::{self, Fds};
use garuda_supervisor::executor::{self, CommandSpec, ExecutorKind, StdioMode};

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

fn time(runs: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..runs / 10 + 1 {
        f();
    }
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    stats(v)
}

fn file_with(data: &[u8]) -> std::fs::File {
    use std::io::{Seek, Write};
    let mut f = tempfile::tempfile().expect("tempfile");
    f.write_all(data).expect("write");
    f.rewind().expect("rewind");
    f
}

/// The bare baseline: bwrap with the executor's exact arguments and inputs, prepared once.
fn bare_bwrap<'a>(policy: &'a ExecPolicy, cmd: &'a CommandSpec) -> impl FnMut() + 'a {
    use std::io::Seek;
    let program = executor::seccomp::program().expect("seccomp");
    let mut seccomp = file_with(&executor::seccomp::program_bytes(&program));
    let empties: Vec<std::fs::File> = (0..bubblewrap::empty_files_needed(policy))
        .map(|_| file_with(b""))
        .collect();
    let binds = bubblewrap::reserve_binds(policy).expect("reserve");
    let fds = Fds {
        seccomp: seccomp.as_raw_fd(),
        empty: empties.iter().map(|f| f.as_raw_fd()).collect(),
        binds: binds.iter().map(|f| f.as_raw_fd()).collect(),
        status: None,
        exec: None,
    };
    let bwrap = bubblewrap::bwrap_path().expect("bwrap");
    move || {
        seccomp.rewind().expect("rewind");
        let st = bubblewrap::bare_command(&bwrap, policy, &policy.project_root, cmd, &fds)
            .status()
            .expect("bwrap");
        assert!(st.success());
        let _ = (&empties, &binds);
    }
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(300);
    let host = HostEnv::from_process().expect("environment");
    let dir = tempfile::tempdir_in(std::env::var_os("HOME").expect("HOME")).expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".git")).expect("mkdir");
    std::fs::write(project.join(".env"), "K=v").expect("write");
    let settings = load_settings(&project, &host).expect("settings");
    let policy = build_exec_policy(&project, &settings, &host).expect("policy");
    let cmd = CommandSpec::new(["/bin/true"]);
    println!(
        "spawn overhead, {runs} runs each, median / p90 in ms (mounts in the policy: {} ops)",
        executor::layout::layout(&policy).len()
    );
    let plain = time(runs, || {
        let st = Command::new("/bin/true").status().expect("true");
        assert!(st.success());
    });
    println!("plain fork/exec       {:7.3} / {:7.3}", plain.0, plain.1);
    let bare = time(runs, bare_bwrap(&policy, &cmd));
    println!("bwrap bare            {:7.3} / {:7.3}", bare.0, bare.1);
    for kind in [
        ExecutorKind::Host,
        ExecutorKind::Landlock,
        ExecutorKind::Bubblewrap,
    ] {
        let ex = executor::select::executor_of(kind);
        let r = time(runs, || {
            let o = ex.run(&cmd, &policy, StdioMode::Inherit).expect("run");
            assert!(o.status.success(), "{kind}: {o:?}");
        });
        let (base, name) = if kind == ExecutorKind::Bubblewrap {
            (bare.0, "bare bwrap")
        } else {
            (plain.0, "plain")
        };
        println!(
            "{:<21} {:7.3} / {:7.3}   (+{:.3} over {name})",
            format!("executor {kind}"),
            r.0,
            r.1,
            r.0 - base
        );
    }
}
