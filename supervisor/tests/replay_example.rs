//! The README's first command: `garuda -p --replay examples/fix-the-test` replays the shipped
//! session end to end with no API key — the confined agent, the supervisor's tools, a staged
//! command applied — and prints `matches`. A recording whose tool result differs from what
//! the tools now answer prints the difference and exits 1 (the negative control: the compare
//! can fail).
//!
//! A recording is data from elsewhere: the rules it allowed are taken only where they cannot
//! reach past the replay's own copy (see `run_agent::prepare_replay`). A journal file whose
//! record allows `Bash(touch *)` and `Edit(notes.txt)` and whose model runs `touch` outside
//! the sandbox and writes `notes.txt` does neither, as a file or as an example folder.
//! Negative control: the same replay with those rules given by `--allow` does both.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fix-the-test")
}

fn replay(world: &common::World, what: &Path) -> Output {
    replay_with(world, what, &[])
}

fn replay_with(world: &common::World, what: &Path, flags: &[&str]) -> Output {
    Command::new(common::garuda())
        .args(["-p", "--replay"])
        .arg(what)
        .args(flags)
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

/// A journal whose supervisor record allows a command rule and a file rule, and whose model
/// writes `notes.txt` and then runs `touch MARKER` outside the sandbox.
fn loosening_journal(marker: &Path) -> String {
    use serde_json::json;
    let message = |role: &str, content: serde_json::Value| {
        json!({"type": "message", "message": {"role": role, "content": content}}).to_string()
    };
    let touch = format!("touch {}", marker.display());
    [
        json!({"type": "supervisor", "model": "anthropic/claude-sonnet-4-5", "staged": false,
               "staged_changes": "discard", "allow": ["Bash(touch *)", "Edit(notes.txt)"]})
        .to_string(),
        message("user", json!([{"type": "text", "text": "take notes"}])),
        message(
            "assistant",
            json!([{"type": "tool_use", "id": "t1", "name": "write_file",
                    "input": {"path": "notes.txt", "content": "noted\n"}}]),
        ),
        message(
            "user",
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "written",
                    "is_error": false}]),
        ),
        message(
            "assistant",
            json!([{"type": "tool_use", "id": "t2", "name": "bash",
                    "input": {"command": touch, "outside_sandbox": true}}]),
        ),
        message(
            "user",
            json!([{"type": "tool_result", "tool_use_id": "t2", "content": "[exit code 0]",
                    "is_error": false}]),
        ),
        message("assistant", json!([{"type": "text", "text": "Done."}])),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn a_recordings_rules_never_run_a_command_outside_the_sandbox() {
    let world = common::World::new("garuda-replay-tests");
    world.git(&["init", "-q"]);
    let marker = world.base.path().join("outside-marker");
    let file = world.base.path().join("loosening.jsonl");
    std::fs::write(&file, loosening_journal(&marker)).unwrap();
    // The same recording as an example folder (replayed on a fresh copy of its project).
    let example = world.base.path().join("loosening-example");
    std::fs::create_dir_all(example.join("project")).unwrap();
    std::fs::write(example.join("session.jsonl"), loosening_journal(&marker)).unwrap();

    let out = replay(&world, &file);
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !marker.exists(),
        "a recorded rule ran a command on the host: {stderr}"
    );
    assert!(!world.project.join("notes.txt").exists(), "{stderr}");
    assert!(
        stderr.contains("the recording allowed Bash(touch *); the replay does not"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "the recording allowed Edit(notes.txt); the replay of a journal file does not"
        ),
        "{stderr}"
    );

    let out = replay(&world, &example);
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !marker.exists(),
        "a recorded rule ran a command on the host: {stderr}"
    );
    // The example's file rule is taken: it writes only the fresh copy.
    assert!(
        stderr.contains("the recording allowed Edit(notes.txt); the replay does too"),
        "{stderr}"
    );
    let copy = ran_in(&out);
    assert_eq!(
        std::fs::read_to_string(copy.join("notes.txt")).unwrap(),
        "noted\n"
    );
    let _ = std::fs::remove_dir_all(copy);

    // Negative control: the person running the replay gives the rules, and both happen.
    let out = replay_with(
        &world,
        &file,
        &["--allow", "Bash(touch *)", "--allow", "Edit(notes.txt)"],
    );
    assert!(marker.exists(), "{}", common::text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(world.project.join("notes.txt")).unwrap(),
        "noted\n"
    );
}

/// The `git init` of an example's copy gets none of the supervisor's variables but where
/// programs and git settings are: a provider key in garuda's environment is not in git's.
/// Control: the `git` on the path is the one that ran (it wrote its environment), and it saw
/// `HOME`.
#[test]
fn the_copys_git_init_gets_no_provider_key() {
    let world = common::World::new("garuda-replay-tests");
    let bin = world.base.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let seen = world.base.path().join("git-environ");
    let git = bin.join("git");
    std::fs::write(
        &git,
        format!(
            "#!/bin/sh\nenv > '{}'\nPATH=/usr/local/bin:/usr/bin:/bin exec git \"$@\"\n",
            seen.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = "sk-ant-api03-NotARealKeyOnlyForTheReplayGit0123";
    let out = Command::new(common::garuda())
        .args(["-p", "--replay"])
        .arg(example())
        .current_dir(&world.project)
        .env_clear()
        .env("HOME", &world.home)
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        )
        .env("GARUDA_HOME", world.home.join(".garuda"))
        .env("ANTHROPIC_API_KEY", key)
        .output()
        .expect("run garuda");
    let environ = std::fs::read_to_string(&seen)
        .unwrap_or_else(|e| panic!("the git on the path did not run ({e}): {out:?}"));
    assert!(environ.lines().any(|l| l.starts_with("HOME=")), "{environ}");
    assert!(!environ.contains(key), "{environ}");
    assert!(!environ.contains("ANTHROPIC_API_KEY"), "{environ}");
    let _ = std::fs::remove_dir_all(ran_in(&out));
}
