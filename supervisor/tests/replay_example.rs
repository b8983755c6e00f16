//! The README's first command: `garuda -p --replay examples/fix-the-test` replays the shipped
//! session end to end with no API key — the confined agent, the supervisor's tools, a staged
//! command applied — and prints `matches`. A recording whose tool result differs from what
//! the tools now answer prints the difference and exits 1 (the negative control: the compare
//! can fail).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fix-the-test")
}

fn replay(world: &common::World, what: &Path) -> Output {
    Command::new(common::garuda())
        .args(["-p", "--replay"])
        .arg(what)
        .current_dir(&world.project)
        .env_clear()
        .env("HOME", &world.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GARUDA_HOME", world.home.join(".garuda"))
        .output()
        .expect("run garuda")
}

/// The folder the replay ran in, from its last stderr line.
fn ran_in(out: &Output) -> PathBuf {
    let err = common::text(&out.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("garuda: the replay ran in "))
        .unwrap_or_else(|| panic!("no 'ran in' line: {err}"));
    PathBuf::from(line.trim())
}

#[test]
fn the_shipped_example_replays_and_matches() {
    let world = common::World::new("garuda-replay-tests");
    let before = std::fs::read(example().join("project/calc.sh")).unwrap();
    let out = replay(&world, &example());
    let stdout = common::text(&out.stdout);
    let stderr = common::text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {stdout}\nstderr {stderr}"
    );
    assert_eq!(stdout.lines().last(), Some("matches"), "{stdout}");
    assert!(
        stdout.starts_with("I'll start with the README."),
        "{stdout}"
    );
    for activity in [
        "garuda: read README.md",
        "garuda: grep add",
        "garuda: run sh test.sh → exit 1",
        "garuda: edit calc.sh",
        "garuda: run sh test.sh > test-results.txt; cat test-results.txt → exit 0",
    ] {
        assert!(stderr.contains(activity), "{activity:?} missing: {stderr}");
    }
    // The fix and the staged command's file are in the copy, applied; the shipped project
    // did not change.
    let copy = ran_in(&out);
    assert!(std::fs::read_to_string(copy.join("calc.sh"))
        .unwrap()
        .contains("$(($1 + $2))"));
    assert_eq!(
        std::fs::read_to_string(copy.join("test-results.txt")).unwrap(),
        "ok: add 2 3 = 5\n"
    );
    assert_eq!(
        std::fs::read(example().join("project/calc.sh")).unwrap(),
        before
    );
    assert!(!example().join("project/test-results.txt").exists());
    let _ = std::fs::remove_dir_all(copy);
}

#[test]
fn a_changed_tool_result_prints_the_difference() {
    let world = common::World::new("garuda-replay-tests");
    // The recording, with the first test run's output changed.
    let dir = world.base.path().join("changed");
    std::fs::create_dir_all(&dir).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(example().join("project"))
        .arg(dir.join("project"))
        .status()
        .unwrap();
    assert!(status.success());
    let session = std::fs::read_to_string(example().join("session.jsonl")).unwrap();
    let changed = session.replace("FAIL: add 2 3 = -1, want 5", "FAIL: add 2 3 = 7, want 5");
    assert_ne!(
        changed, session,
        "the recording holds the first test run's output"
    );
    std::fs::write(dir.join("session.jsonl"), changed).unwrap();
    let out = replay(&world, &dir);
    let stdout = common::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(!stdout.contains("matches"), "{stdout}");
    let diff = stdout
        .lines()
        .find(|l| l.starts_with("tool call 3 (bash"))
        .unwrap_or_else(|| panic!("no difference for call 3: {stdout}"));
    assert!(
        diff.contains("add 2 3 = 7") && diff.contains("add 2 3 = -1"),
        "{diff}"
    );
    let _ = std::fs::remove_dir_all(ran_in(&out));
}
