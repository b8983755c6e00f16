//! Staged commands on a 20,000-file project (issue 3): session start, per-command overhead
//! (prepare + change list) for a command that changes 3 files, and apply of those 3 files, for
//! the overlay and the copy backends.
//!
//! Run: `cargo bench -p garuda --bench staging` (optionally `-- FILES`, default 20000).
//!
//! The project has the shape `benches/gen-project.sh` makes (files of 80 lines of eight words
//! in FILES/10 folders, a `.gitignore`, everything committed), generated here in Rust, under
//! the user's home, not /tmp, so that it sits on the same filesystem as `~/.garuda/staging`.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use garuda_policy::{build_exec_policy, load_settings_from, HostEnv};
use garuda_staging::{BackendChoice, Session};
use garuda_supervisor::executor::{self, CommandSpec, ExecutorKind, StdioMode};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    ms(v[v.len() / 2])
}

/// A deterministic generator (xorshift) of the same shape as gen-project.sh.
fn generate(dir: &Path, files: usize) {
    let words = [
        "alpha", "beta", "gamma", "delta", "fn", "let", "mut", "return", "struct", "impl",
    ];
    let folders = (files / 10).max(1);
    let mut state: u64 = 42;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..files {
        let d = dir.join(format!("src/m{:04}", i % folders));
        std::fs::create_dir_all(&d).unwrap();
        let mut text = String::with_capacity(4096);
        for _ in 0..80 {
            let line: Vec<&str> = (0..8).map(|_| words[(next() % 10) as usize]).collect();
            text.push_str(&line.join(" "));
            text.push('\n');
        }
        std::fs::write(d.join(format!("f{i:05}.rs")), text).unwrap();
    }
    std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    let git = |args: &[&str]| {
        let st = Command::new("git")
            .args([
                "-c",
                "user.name=bench",
                "-c",
                "user.email=bench@localhost",
                "-c",
                "gc.auto=0",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(st.status.success(), "git {args:?}: {st:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "generated project"]);
}

fn main() {
    let files: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let home = std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let base = tempfile::tempdir_in(&home).unwrap();
    let project = base.path().join("project");
    let garuda_home = base.path().join("garuda-home");
    std::fs::create_dir_all(&project).unwrap();
    let t = Instant::now();
    generate(&project, files);
    let project = project.canonicalize().unwrap();
    println!(
        "generated {files} files in {:.1} s under {}",
        t.elapsed().as_secs_f64(),
        project.display()
    );

    let host = HostEnv::from_vars(vec![
        (
            "HOME".into(),
            base.path().join("fake-home").into_os_string(),
        ),
        ("GARUDA_HOME".into(), garuda_home.clone().into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ])
    .unwrap();
    std::fs::create_dir_all(base.path().join("fake-home")).unwrap();
    let none = base.path().join("none.json");
    let settings = load_settings_from(&none, &none, &none, &host, &project).unwrap();
    let t = Instant::now();
    let policy = build_exec_policy(&project, &settings, &host).unwrap();
    println!(
        "policy for the project (one walk of {files} files): {:.1} ms",
        ms(t.elapsed())
    );
    let overlay_usable = garuda_supervisor::doctor::overlay_in_userns().is_ok();
    let ex = executor::select::executor_of(ExecutorKind::Landlock);
    let change3 = CommandSpec::new([
        "/bin/sh",
        "-c",
        "for f in src/m0001/f00001.rs src/m0002/f00002.rs src/m0003/f00003.rs; do echo changed >> $f; done",
    ]);

    println!("backend    session start   prepare   change list   prepare+list   apply 3 files   (median ms)");
    for (name, choice, runs_start) in [
        ("overlay", BackendChoice::Overlay, 20),
        ("copy", BackendChoice::Copy, 3),
    ] {
        let mut starts = Vec::new();
        for _ in 0..runs_start {
            let t = Instant::now();
            let s = Session::create(&garuda_home, &project, choice, overlay_usable).unwrap();
            starts.push(t.elapsed());
            s.close().unwrap();
        }
        let mut session = Session::create(&garuda_home, &project, choice, overlay_usable).unwrap();
        let (mut prep, mut list, mut both, mut apply) = (vec![], vec![], vec![], vec![]);
        for i in 0..15 {
            let t = Instant::now();
            let mark = session.prepare().unwrap();
            let p = t.elapsed();
            let mut pol = policy.clone();
            pol.staged = Some(session.view());
            let out = ex.run(&change3, &pol, StdioMode::Capture).unwrap();
            assert!(out.status.success(), "{out:?}");
            let t = Instant::now();
            let set = session.changes(&mark).unwrap();
            let l = t.elapsed();
            assert_eq!(
                set.changes.len(),
                3,
                "{name} run {i}: {:?} {:?}",
                set.changes,
                set.incomplete
            );
            prep.push(p);
            list.push(l);
            both.push(p + l);
            if i % 2 == 0 {
                session.discard(&set).unwrap();
            } else {
                let t = Instant::now();
                session.apply(&set).unwrap();
                apply.push(t.elapsed());
            }
        }
        session.close().unwrap();
        println!(
            "{name:<10} {:>13.2} {:>9.2} {:>13.2} {:>14.2} {:>15.2}",
            median(starts),
            median(prep),
            median(list),
            median(both),
            median(apply)
        );
    }
}
