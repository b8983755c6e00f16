//! Staged commands end to end (seed T5 and issue 3): `garuda sandbox --staged` on every Linux
//! executor and both staging backends, plus multi-command sessions through the library.
//!
//! Negative controls: the same command in direct mode changes the project; a direct-mode
//! start succeeds where staging cannot be set up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World};

use std::path::Path;
use std::process::{Command, Output};

fn world() -> World {
    let w = World::new("garuda-staged-tests");
    let project = &w.project;
    w.git(&["init", "-q"]);
    std::fs::write(project.join("a.txt"), "a old\n").unwrap();
    std::fs::write(project.join("b.txt"), "b old\n").unwrap();
    std::fs::write(project.join("c.txt"), "c old\n").unwrap();
    std::fs::write(project.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(project.join(".gitignore"), "target/\n.env\n").unwrap();
    w.git(&["add", "-A"]);
    w.git(&["commit", "-qm", "init"]);
    // Every run makes `<project>/.garuda` (empty, read-only to commands) when it is missing;
    // made here so that "byte-identical" compares the project as garuda leaves it.
    std::fs::create_dir_all(project.join(".garuda")).unwrap();
    w
}

fn garuda_in(w: &World, args: &[&str], cmd: &str, env: &[(&str, &str)]) -> Output {
    Command::new(garuda())
        .arg("sandbox")
        .args(args)
        .arg("--project")
        .arg(&w.project)
        .args(["--", "/bin/sh", "-c", cmd])
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// Every file of the project except `.git`, with its content: "byte-identical" means equal.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.file_name().unwrap() == ".git" {
                continue;
            }
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(p);
                out.push((rel + "/", Vec::new()));
            } else {
                out.push((rel, std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

const EXECUTORS: [&str; 2] = ["landlock", "bubblewrap"];
const BACKENDS: [&str; 2] = ["overlay", "copy"];

fn set_backend(w: &World, backend: &str) {
    std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
    std::fs::write(
        w.home.join(".garuda/policy.json"),
        format!("{{\"staging\": {{\"backend\": \"{backend}\"}}}}"),
    )
    .unwrap();
}

const EDIT: &str =
    "echo 'a new' > a.txt && rm gone.txt && echo fresh > new.txt && echo abs > \"$PWD/abs.txt\"";

#[test]
fn discard_leaves_the_project_byte_identical_and_direct_mode_does_not() {
    for executor in EXECUTORS {
        for backend in BACKENDS {
            let w = world();
            set_backend(&w, backend);
            let before = snapshot(&w.project);
            let out = garuda_in(
                &w,
                &["--executor", executor, "--staged", "--discard"],
                EDIT,
                &[],
            );
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{executor}/{backend}: {err}");
            assert!(
                err.contains("a.txt") && err.contains("+a new"),
                "{executor}/{backend}: {err}"
            );
            assert!(err.contains("gone.txt"), "the deletion is listed: {err}");
            assert!(err.contains("discarded"), "{err}");
            assert_eq!(snapshot(&w.project), before, "{executor}/{backend}");
        }
        // Negative control: direct mode changes the project.
        let w = world();
        let out = garuda_in(&w, &["--executor", executor], EDIT, &[]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(read(&w.project.join("a.txt")), "a new\n");
        assert!(!w.project.join("gone.txt").exists());
    }
}

#[test]
fn apply_brings_new_content_deletions_and_absolute_path_writes() {
    for executor in EXECUTORS {
        for backend in BACKENDS {
            let w = world();
            set_backend(&w, backend);
            let out = garuda_in(
                &w,
                &["--executor", executor, "--staged", "--apply"],
                EDIT,
                &[],
            );
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{executor}/{backend}: {err}");
            assert!(err.contains("applied"), "{err}");
            assert_eq!(read(&w.project.join("a.txt")), "a new\n");
            assert_eq!(read(&w.project.join("new.txt")), "fresh\n");
            assert_eq!(read(&w.project.join("abs.txt")), "abs\n");
            assert!(
                !w.project.join("gone.txt").exists(),
                "the deletion is applied"
            );
            assert_eq!(read(&w.project.join("b.txt")), "b old\n");
        }
    }
}

#[test]
fn without_a_terminal_or_a_flag_the_change_is_discarded() {
    let w = world();
    let before = snapshot(&w.project);
    let out = garuda_in(&w, &["--staged"], "echo x > a.txt", &[]);
    // 121: not applied (see apply_exit.rs).
    assert_eq!(out.status.code(), Some(121));
    assert!(
        text(&out.stderr).contains("no terminal to ask on"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(snapshot(&w.project), before);
}

#[test]
fn the_exit_code_is_the_commands() {
    let w = world();
    let out = garuda_in(&w, &["--staged", "--apply"], "echo x > a.txt; exit 3", &[]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(read(&w.project.join("a.txt")), "x\n");
}

#[test]
fn a_command_that_changes_nothing_asks_nothing() {
    for backend in BACKENDS {
        let w = world();
        set_backend(&w, backend);
        let out = garuda_in(&w, &["--staged"], "cat a.txt >/dev/null; ls", &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("changed nothing"), "{backend}: {err}");
        assert!(!err.contains("discard"), "{backend}: {err}");
    }
}

#[test]
fn ignored_output_never_reaches_the_project_and_sensitive_files_are_named() {
    for backend in BACKENDS {
        let w = world();
        set_backend(&w, backend);
        let out = garuda_in(
            &w,
            &["--staged", "--apply"],
            "mkdir -p target && for i in 1 2 3; do echo o > target/out$i; done && echo KEY=1 > .env && echo x > a.txt",
            &[],
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(
            err.contains("target/: 3"),
            "{backend}: ignored count missing: {err}"
        );
        assert!(
            err.contains(".env"),
            "{backend}: sensitive file not named: {err}"
        );
        assert!(
            !w.project.join("target").exists(),
            "{backend}: ignored output applied"
        );
        assert!(
            !w.project.join(".env").exists(),
            "{backend}: ignored .env applied"
        );
        assert_eq!(read(&w.project.join("a.txt")), "x\n");
    }
}

#[test]
fn staging_that_cannot_be_set_up_stops_before_the_command_runs() {
    let w = world();
    // GARUDA_HOME is a file: no staging folder can be made under it.
    let bad_home = w.home.join("not-a-dir");
    std::fs::write(&bad_home, "").unwrap();
    let marker = w.project.join("ran");
    let cmd = format!("touch '{}'", marker.display());
    let out = garuda_in(
        &w,
        &["--staged"],
        &cmd,
        &[("GARUDA_HOME", bad_home.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the command ran although staging failed");
    // Negative control: the same start in direct mode runs the command.
    let good_home = w.home.join(".garuda-direct");
    let out = garuda_in(
        &w,
        &[],
        &cmd,
        &[("GARUDA_HOME", good_home.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(marker.exists());
}

#[test]
fn staged_settings_turn_staging_on_and_host_is_refused() {
    let w = world();
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        "{\"commands\": {\"mode\": \"staged\"}}",
    )
    .unwrap();
    let before = snapshot(&w.project);
    let out = garuda_in(&w, &[], "echo x > a.txt", &[]);
    // 121: discarded for want of a terminal, not applied.
    assert_eq!(out.status.code(), Some(121), "{}", text(&out.stderr));
    assert_eq!(
        snapshot(&w.project),
        before,
        "a project's staged mode was not honoured"
    );
    let out = garuda_in(&w, &["--executor", "host"], "echo x > a.txt", &[]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(snapshot(&w.project), before);
}

/// Kill the process in the middle of an apply (a failpoint aborts it after the first of three
/// renames, or just before the commit point); the next start leaves the project fully new or
/// fully old, never half.
#[test]
fn an_interrupted_apply_is_completed_or_rolled_back_at_the_next_start() {
    let three = "echo 'a new' > a.txt && echo 'b new' > b.txt && echo 'c new' > c.txt";
    for (failpoint, want) in [
        ("apply-after-first-rename", "new"),
        ("apply-before-commit", "old"),
    ] {
        for backend in BACKENDS {
            let w = world();
            set_backend(&w, backend);
            let out = garuda_in(
                &w,
                &["--staged", "--apply"],
                three,
                &[("GARUDA_FAILPOINT", failpoint)],
            );
            assert_ne!(
                out.status.code(),
                Some(0),
                "{failpoint}: the failpoint did not fire"
            );
            // The next start (any garuda sandbox run) recovers first.
            let out = garuda_in(&w, &[], "true", &[]);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            for f in ["a", "b", "c"] {
                assert_eq!(
                    read(&w.project.join(format!("{f}.txt"))),
                    format!("{f} {want}\n"),
                    "{failpoint}/{backend}: {f}.txt"
                );
            }
            let leftovers: Vec<_> = snapshot(&w.project)
                .into_iter()
                .filter(|(p, _)| p.contains("garuda-apply"))
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
    }
}

/// A staged change under `.garuda/` (possible when `.garuda` is a link, which staged mode
/// allows: the command replaces the link in its view) is shown, and `--apply` alone never
/// applies it: the whole change is refused and the project does not change. The control: the
/// same change without `.garuda` is applied by `--apply`.
#[test]
fn apply_alone_never_applies_a_change_to_garuda_settings() {
    let plant = "rm .garuda && mkdir .garuda && echo '{\"x\": 1}' > .garuda/settings.json && echo note > note.txt";
    for executor in EXECUTORS {
        let w = world();
        std::fs::remove_dir(w.project.join(".garuda")).unwrap();
        std::fs::create_dir_all(w.project.join("cfg/garuda")).unwrap();
        std::os::unix::fs::symlink("cfg/garuda", w.project.join(".garuda")).unwrap();
        let before = snapshot(&w.project);
        let out = garuda_in(
            &w,
            &["--executor", executor, "--staged", "--apply"],
            plant,
            &[],
        );
        let err = text(&out.stderr);
        // 122: Garuda refused the change as it stands (docs/staging.md, "Exit codes").
        assert_eq!(out.status.code(), Some(122), "{executor}: {err}");
        assert!(
            err.contains(".garuda/settings.json (Garuda settings: needs its own question)"),
            "{executor}: {err}"
        );
        assert!(
            err.contains("--apply never applies on its own"),
            "{executor}: {err}"
        );
        assert_eq!(snapshot(&w.project), before, "{executor}: nothing applied");
        assert_eq!(
            std::fs::read_link(w.project.join(".garuda")).unwrap(),
            Path::new("cfg/garuda")
        );

        // The control: the same files under another name are applied.
        let w = world();
        let out = garuda_in(
            &w,
            &["--executor", executor, "--staged", "--apply"],
            "mkdir lookalike && echo '{}' > lookalike/settings.json && echo note > note.txt",
            &[],
        );
        assert!(
            text(&out.stderr).contains("applied"),
            "{}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("garuda: applied: "),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(read(&w.project.join("note.txt")), "note\n");
    }
}

/// On a terminal, a change to `.garuda/` gets a question of its own after "apply": `n` (or
/// anything but `y`) applies nothing at all, `y` applies the whole change (the control that
/// the question is what decides). `script` gives garuda the terminal; the answers are typed in
/// advance.
#[test]
fn on_a_terminal_garuda_settings_get_a_question_of_their_own() {
    if !common::have_script("the terminal question") {
        return;
    }
    // Re-points the `.garuda` link (possible in staged mode) to settings of the command's own.
    let plant = "mkdir other && echo x > other/settings.json && rm .garuda && ln -s other .garuda && echo note > note.txt";
    for executor in EXECUTORS {
        for (answers, applied) in [("a\nn\n", false), ("a\ny\n", true)] {
            let w = world();
            std::fs::remove_dir(w.project.join(".garuda")).unwrap();
            std::fs::create_dir_all(w.project.join("cfg/garuda")).unwrap();
            std::os::unix::fs::symlink("cfg/garuda", w.project.join(".garuda")).unwrap();
            let line = format!(
                "{} sandbox --staged --executor {executor} --project {} -- sh -c '{plant}'",
                garuda().display(),
                w.project.display()
            );
            let out = common::on_a_terminal(&w, &line, &[], answers);
            let shown = text(&out.stdout);
            assert!(
                shown.contains("Apply them too? [y/N]"),
                "{executor}: the separate question: {shown}"
            );
            // `script -e` returns garuda's code: a no at the question is a discard at the
            // question (121), a yes applies (the command's own, 0).
            let code = if applied { 0 } else { 121 };
            assert_eq!(out.status.code(), Some(code), "{executor}: {shown}");
            let link = std::fs::read_link(w.project.join(".garuda")).unwrap();
            if applied {
                assert_eq!(link, Path::new("other"), "{executor}: {shown}");
                assert_eq!(read(&w.project.join("note.txt")), "note\n");
            } else {
                assert_eq!(link, Path::new("cfg/garuda"), "{executor}: {shown}");
                assert!(
                    !w.project.join("note.txt").exists(),
                    "{executor}: all or nothing"
                );
            }
        }
    }
}
