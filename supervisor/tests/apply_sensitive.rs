//! Sensitive files in a staged change (issue 11, point 8), through the real `garuda` binary
//! on both Linux sandboxes: a `.env` (or a key, or a lookalike of either) that the command
//! writes is listed with its size and SHA-256, never its content, and is applied only with
//! `--apply --apply-sensitive` or after a question of its own on a terminal. `--apply` alone
//! refuses the whole change (122, nothing applied); a no at the question discards it (121).
//!
//! Negative controls: the ordinary file of the same change is shown in full; a change with
//! no sensitive file is applied by `--apply` alone; `--apply-sensitive` (or `y`) applies the
//! same change that `--apply` alone (or `n`) refuses.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World};

use std::io::Write;
use std::process::{Command, Output, Stdio};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];
const DISCARDED: i32 = 121;
const REFUSED: i32 = 122;
/// In the secret's content only: it must never reach garuda's output.
const MARK: &str = "SECRET-MARK-7f3a91";
/// The secret's content as the command writes it (`echo TOKEN=… > .env`).
const SECRET_LINE: &str = "TOKEN=SECRET-MARK-7f3a91\n";

/// A git project that does not ignore `.env` (many don't), with one tracked file.
fn world() -> World {
    let w = World::new("garuda-apply-sensitive-tests");
    w.git(&["init", "-q"]);
    std::fs::write(w.project.join("a.txt"), "a old\n").unwrap();
    w.git(&["add", "-A"]);
    w.git(&["commit", "-qm", "init"]);
    w
}

fn run(w: &World, ex: &str, args: &[&str], script: &str) -> Output {
    Command::new(garuda())
        .args(["sandbox", "--executor", ex, "--project"])
        .arg(&w.project)
        .args(args)
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The first 16 hex digits of the SHA-256 of `content`, by `sha256sum` (not the code under
/// test).
fn sha256_16(content: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(content.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    text(&out.stdout)[..16].to_string()
}

/// stdout and stderr never hold the secret's content, and stderr lists `path` with the size
/// and hash of what the command wrote.
fn assert_masked(out: &Output, path: &str, what: &str) {
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(!o.contains(MARK) && !e.contains(MARK), "{what}: {o}{e}");
    let hash = sha256_16(SECRET_LINE);
    assert!(
        e.contains(&format!(
            "  {path}: before: none; after: {} bytes, sha256 {hash}",
            SECRET_LINE.len()
        )),
        "{what}: {e}"
    );
}

#[test]
fn apply_alone_refuses_a_new_env_file_with_122_and_applies_nothing() {
    for ex in SANDBOXES {
        let w = world();
        let out = run(
            &w,
            ex,
            &["--staged", "--apply"],
            "echo TOKEN=SECRET-MARK-7f3a91 > .env && echo plain-note > note.txt",
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(REFUSED), "{ex}: {err}");
        assert!(
            err.contains("garuda: nothing was applied: the change touches sensitive files (.env), which --apply alone never applies; add --apply-sensitive to apply them too"),
            "{ex}: {err}"
        );
        assert!(
            err.contains("  added     .env (sensitive: content not shown, needs its own yes)"),
            "{ex}: {err}"
        );
        assert_masked(&out, ".env", ex);
        // The control of the masking: the ordinary file of the same change is shown in full.
        assert!(err.contains("+plain-note"), "{ex}: {err}");
        // All or nothing: neither file reached the project.
        assert!(!w.project.join(".env").exists(), "{ex}");
        assert!(!w.project.join("note.txt").exists(), "{ex}");
    }
}

#[test]
fn apply_sensitive_applies_the_same_change_and_still_shows_no_content() {
    for ex in SANDBOXES {
        let w = world();
        let out = run(
            &w,
            ex,
            &["--staged", "--apply", "--apply-sensitive"],
            "echo TOKEN=SECRET-MARK-7f3a91 > .env && echo plain-note > note.txt",
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{ex}: {err}");
        assert!(
            err.contains("garuda: applied: 2 files written"),
            "{ex}: {err}"
        );
        assert_masked(&out, ".env", ex);
        assert_eq!(
            std::fs::read_to_string(w.project.join(".env")).unwrap(),
            SECRET_LINE
        );
        assert_eq!(
            std::fs::read_to_string(w.project.join("note.txt")).unwrap(),
            "plain-note\n"
        );
    }
}

/// The negative control: without a sensitive file in the change, `--apply` alone applies it
/// and the content is shown.
#[test]
fn a_change_without_sensitive_files_is_applied_by_apply_alone_and_shown() {
    for ex in SANDBOXES {
        let w = world();
        let out = run(
            &w,
            ex,
            &["--staged", "--apply"],
            "echo CONTROL-MARK > note.txt && echo CONTROL-MARK > .envrc",
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{ex}: {err}");
        assert!(err.contains("+CONTROL-MARK"), "{ex}: {err}");
        assert!(!err.contains("Sensitive files changed"), "{ex}: {err}");
        assert_eq!(
            std::fs::read_to_string(w.project.join(".envrc")).unwrap(),
            "CONTROL-MARK\n"
        );
    }
}

/// The ways around the name an attacker would try: another case (one file on a
/// case-insensitive filesystem), a rename of an ordinary file to `.env`, a folder named
/// `.env`, a link named `.env` pointing elsewhere, an ordinary name linking to a secret. Each
/// is refused by `--apply` alone (122, project unchanged) and applied with
/// `--apply-sensitive` (the control).
#[test]
fn lookalikes_renames_folders_and_links_are_sensitive_too() {
    let rows = [
        (
            "case variant",
            "echo TOKEN=SECRET-MARK-7f3a91 > .ENV",
            ".ENV",
            true,
        ),
        (
            "renamed to .env",
            "echo TOKEN=SECRET-MARK-7f3a91 > a.txt && mv a.txt .env",
            ".env",
            true,
        ),
        (
            "folder named .env",
            "mkdir .env && echo TOKEN=SECRET-MARK-7f3a91 > .env/prod",
            ".env/prod",
            true,
        ),
        ("link named .env", "ln -s a.txt .env", ".env", false),
        ("link to a secret", "ln -s .env.prod conf", "conf", false),
    ];
    for ex in SANDBOXES {
        for (what, script, path, content) in rows {
            let w = world();
            let out = run(&w, ex, &["--staged", "--apply"], script);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(REFUSED), "{ex} {what}: {err}");
            assert!(
                err.contains(&format!(
                    "the change touches sensitive files ({path}), which --apply alone never applies"
                )),
                "{ex} {what}: {err}"
            );
            if content {
                assert_masked(&out, path, &format!("{ex} {what}"));
            }
            assert!(!w.project.join(path).exists(), "{ex} {what}");
            assert_eq!(
                std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
                "a old\n",
                "{ex} {what}"
            );

            let w = world();
            let out = run(
                &w,
                ex,
                &["--staged", "--apply", "--apply-sensitive"],
                script,
            );
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{ex} {what}: {err}");
            assert!(
                std::fs::symlink_metadata(w.project.join(path)).is_ok(),
                "{ex} {what}: applied with the flag"
            );
        }
    }
}

/// `--apply-sensitive` is an addition to `--apply`, never a way to apply on its own: alone it
/// is a usage error and the command does not run.
#[test]
fn apply_sensitive_without_apply_is_a_usage_error() {
    let w = world();
    let ran = w.base.path().join("the-command-ran");
    let out = Command::new(garuda())
        .args(["sandbox", "--staged", "--apply-sensitive", "--project"])
        .arg(&w.project)
        .arg("--")
        .arg("/bin/sh")
        .arg("-c")
        .arg("touch \"$1\"")
        .arg("sh")
        .arg(&ran)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the following required arguments were not provided")
            && err.contains("--apply"),
        "{err}"
    );
    assert!(!ran.exists());
}

/// On a terminal, a change to a sensitive file gets a question of its own after "apply":
/// `n` (or anything but `y`) applies nothing and exits 121, `y` applies the whole change (the
/// control that the question decides), and `d` at the first question discards without the
/// second. `script` gives garuda the terminal; the answers are typed in advance. The
/// transcript (stdout and stderr both go to the terminal) never holds the content.
#[test]
fn on_a_terminal_sensitive_files_get_a_question_of_their_own() {
    if !common::have_script("the terminal question for sensitive files") {
        return;
    }
    const QUESTION: &str = "This change also writes sensitive files (listed above under \"Sensitive files changed\"), whose content is not shown. Apply them too? [y/N]";
    let plant = "echo TOKEN=SECRET-MARK-7f3a91 > .env && echo plain-note > note.txt";
    for ex in SANDBOXES {
        for (answers, asked, code, applied) in [
            ("a\nn\n", true, DISCARDED, false),
            ("a\ny\n", true, 0, true),
            ("d\n", false, DISCARDED, false),
        ] {
            let w = world();
            let line = format!(
                "\"$GARUDA_UNDER_TEST\" sandbox --staged --executor {ex} --project \"$PWD\" -- sh -c '{plant}'"
            );
            let garuda_bin = garuda();
            let out = common::on_a_terminal(
                &w,
                &line,
                &[("GARUDA_UNDER_TEST", garuda_bin.as_os_str())],
                answers,
            );
            let shown = text(&out.stdout);
            assert!(!shown.contains(MARK), "{ex} {answers:?}: {shown}");
            assert!(
                shown.contains(&sha256_16(SECRET_LINE)),
                "{ex} {answers:?}: {shown}"
            );
            assert!(shown.contains("+plain-note"), "{ex} {answers:?}: {shown}");
            assert_eq!(
                shown.contains(QUESTION),
                asked,
                "{ex} {answers:?}: the separate question: {shown}"
            );
            // `script -e` returns garuda's code.
            assert_eq!(out.status.code(), Some(code), "{ex} {answers:?}: {shown}");
            let env = w.project.join(".env");
            let note = w.project.join("note.txt");
            if applied {
                assert_eq!(std::fs::read_to_string(&env).unwrap(), SECRET_LINE);
                assert_eq!(std::fs::read_to_string(&note).unwrap(), "plain-note\n");
            } else {
                assert!(!env.exists(), "{ex} {answers:?}");
                assert!(!note.exists(), "{ex} {answers:?}: all or nothing");
            }
            if answers == "a\nn\n" {
                assert!(
                    shown.contains("garuda: not applied: the change touches sensitive files (.env); it was discarded and the project did not change"),
                    "{ex}: {shown}"
                );
            }
        }
    }
}
