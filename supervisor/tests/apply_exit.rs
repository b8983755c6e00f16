//! The exit code of a staged command says whether its change landed (issue 10, item 5), on
//! both Linux sandboxes, through the real `garuda` binary and the way a script uses it:
//! `garuda sandbox --staged --apply -- … && next`. Applied (or `--discard`): the command's own
//! code. Discarded at the question or for want of a terminal: 121. Apply refused (a conflict,
//! an incomplete list, a link out of the project): 122. Apply failed (an I/O error): 123.
//! Interrupted by a signal to garuda: 128 + N, the change discarded.
//!
//! Negative control of each case: the next command of an `&&` chain runs after an applied
//! change and does not run after a refused or failed one (before this fix every one of these
//! exited 0, so `&& git commit` committed a change that was not there); and the project is
//! unchanged exactly when the code says "not applied".

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];
const DISCARDED: i32 = 121;
const REFUSED: i32 = 122;
const FAILED: i32 = 123;

fn world() -> World {
    let w = World::new("garuda-apply-exit-tests");
    w.git(&["init", "-q"]);
    std::fs::write(w.project.join("a.txt"), "a old\n").unwrap();
    w.git(&["add", "-A"]);
    w.git(&["commit", "-qm", "init"]);
    // The overlay (auto's choice here) is named so the failure case below is the same
    // everywhere.
    std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
    std::fs::write(
        w.home.join(".garuda/policy.json"),
        "{\"staging\": {\"backend\": \"overlay\"}}",
    )
    .unwrap();
    w
}

impl World {
    /// Created by the `&&`-chained command, outside the project.
    fn marker(&self) -> PathBuf {
        self.base.path().join("next-command-ran")
    }

    /// `garuda sandbox --executor EX ARGS… -- /bin/sh -c SCRIPT && touch MARKER`, run by a
    /// real shell as a script would, with `wrap` (a program and its arguments) in front of
    /// garuda.
    fn chained(&self, wrap: &[&str], ex: &str, args: &[&str], script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg("\"$@\" && touch \"$NEXT_MARKER\"")
            .arg("sh")
            .args(wrap)
            .arg(garuda())
            .args(["sandbox", "--executor", ex, "--project"])
            .arg(&self.project)
            .args(args)
            .args(["--", "/bin/sh", "-c", script])
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env("NEXT_MARKER", self.marker())
            .env_remove("GARUDA_HOME");
        c
    }

    fn run(&self, ex: &str, args: &[&str], script: &str) -> Output {
        self.chained(&[], ex, args, script)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn a(&self) -> String {
        std::fs::read_to_string(self.project.join("a.txt")).unwrap()
    }

    /// The exit code, and that the chained command ran exactly when it is 0.
    fn code(&self, out: &Output, what: &str) -> i32 {
        let code = out.status.code().unwrap();
        assert_eq!(
            self.marker().exists(),
            code == 0,
            "{what}: exit {code}, the next command {}: {}",
            if self.marker().exists() {
                "ran"
            } else {
                "did not run"
            },
            text(&out.stderr)
        );
        code
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_applied_change_exits_with_the_commands_code_and_the_chain_goes_on() {
    for ex in SANDBOXES {
        let w = world();
        let out = w.run(ex, &["--staged", "--apply"], "echo new > a.txt");
        assert_eq!(w.code(&out, ex), 0, "{ex}: {}", text(&out.stderr));
        assert_eq!(w.a(), "new\n", "{ex}");
        // The command's own failure is still its code when the change was applied.
        let w = world();
        let out = w.run(ex, &["--staged", "--apply"], "echo new > a.txt; exit 3");
        assert_eq!(w.code(&out, ex), 3, "{ex}");
        assert_eq!(w.a(), "new\n", "{ex}");
    }
}

#[test]
fn a_conflict_refuses_the_apply_with_122_and_stops_the_chain() {
    for ex in SANDBOXES {
        let w = world();
        // The command writes its change, says so, and waits; the developer then edits the
        // same file in the project; the command ends; apply finds the conflict.
        let mut child = w
            .chained(
                &[],
                ex,
                &["--staged", "--apply"],
                "echo from-the-command > a.txt && echo ready && read x",
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{ex}");
        std::fs::write(w.project.join("a.txt"), "edited during the command\n").unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(w.code(&out, ex), REFUSED, "{ex}: {err}");
        assert!(
            err.contains("garuda: nothing was applied: these project files changed while the command ran, so nothing was applied: a.txt"),
            "{ex}: {err}"
        );
        assert_eq!(w.a(), "edited during the command\n", "{ex}");
    }
}

#[test]
fn an_incomplete_list_or_a_link_out_refuses_the_apply_with_122_whatever_the_commands_code() {
    for ex in SANDBOXES {
        for (what, script, says) in [
            (
                "incomplete",
                "echo new > a.txt && touch \"$(printf 'bad\\377')\"; exit 7",
                "The change list is INCOMPLETE (a file name that is not UTF-8",
            ),
            (
                "link out",
                "echo new > a.txt && ln -s /etc/passwd out; exit 0",
                "  REFUSED   out -> /etc/passwd (a link out of the project: apply is refused)",
            ),
        ] {
            let w = world();
            let out = w.run(ex, &["--staged", "--apply"], script);
            let err = text(&out.stderr);
            assert_eq!(w.code(&out, what), REFUSED, "{ex} {what}: {err}");
            assert!(err.contains(says), "{ex} {what}: {err}");
            assert!(
                err.contains("garuda: the change cannot be applied (see above); it was discarded and the project did not change"),
                "{ex} {what}: {err}"
            );
            assert_eq!(w.a(), "a old\n", "{ex} {what}");
        }
    }
}

#[test]
fn an_apply_that_fails_on_io_exits_123_and_stops_the_chain() {
    // garuda may write files of at most 1 MiB (soft limit; SIGXFSZ ignored, so a longer
    // write fails with EFBIG, as a full disk would fail it with ENOSPC). Root is bound by it
    // too. The command raises its own soft limit and stages a 3 MB file; apply cannot copy it.
    let wrap = [
        "/bin/sh",
        "-c",
        "trap '' XFSZ; exec /usr/bin/prlimit --fsize=1048576:unlimited -- \"$@\"",
        "sh",
    ];
    for ex in SANDBOXES {
        let w = world();
        let out = w
            .chained(
                &wrap,
                ex,
                &["--staged", "--apply"],
                "ulimit -f unlimited && head -c 3000000 /dev/zero > big.bin && echo new > a.txt",
            )
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(w.code(&out, ex), FAILED, "{ex}: {err}");
        assert!(
            err.contains("garuda: nothing was applied: ") && err.contains("File too large"),
            "{ex}: {err}"
        );
        // Rolled back: the project is as before, no temporary file left.
        assert_eq!(w.a(), "a old\n", "{ex}");
        // (`.garuda` is the empty read-only placeholder every run makes: see docs/policy.md.)
        assert_eq!(files(&w.project), [".garuda", ".git", "a.txt"], "{ex}");
    }
    // Control: the same change without the limit applies (the failure is the limit's).
    let w = world();
    let out = w.run(
        "landlock",
        &["--staged", "--apply"],
        "ulimit -f unlimited && head -c 3000000 /dev/zero > big.bin && echo new > a.txt",
    );
    assert_eq!(w.code(&out, "control"), 0, "{}", text(&out.stderr));
    assert_eq!(
        std::fs::metadata(w.project.join("big.bin")).unwrap().len(),
        3_000_000
    );
}

#[test]
fn a_discard_asked_for_keeps_the_commands_code_and_one_not_asked_for_exits_121() {
    for ex in SANDBOXES {
        // `--discard`: the caller chose it and knows; the command's own code.
        let w = world();
        let out = w.run(ex, &["--staged", "--discard"], "echo new > a.txt");
        assert_eq!(w.code(&out, ex), 0, "{ex}: {}", text(&out.stderr));
        assert_eq!(w.a(), "a old\n");
        let w = world();
        let out = w.run(ex, &["--staged", "--discard"], "echo new > a.txt; exit 5");
        assert_eq!(w.code(&out, ex), 5, "{ex}");
        // No flag and no terminal: discarded for the caller, who must see "not applied".
        let w = world();
        let out = w.run(ex, &["--staged"], "echo new > a.txt");
        let err = text(&out.stderr);
        assert_eq!(w.code(&out, ex), DISCARDED, "{ex}: {err}");
        assert!(
            err.contains(
                "garuda: no terminal to ask on and neither --apply nor --discard: discarding"
            ),
            "{ex}: {err}"
        );
        assert_eq!(w.a(), "a old\n");
        // A command that changes nothing has nothing to apply: its own code.
        let w = world();
        let out = w.run(ex, &["--staged"], "cat a.txt > /dev/null");
        assert_eq!(w.code(&out, ex), 0, "{ex}: {}", text(&out.stderr));
    }
}

/// On a terminal: `d` at the question discards and exits 121, so the chain stops; `a` there
/// applies and exits with the command's code, so the chain goes on (the control: the answer
/// is what decides). `script` gives garuda the terminal; the answer is typed in advance, and
/// `script -e` returns the chain's code.
#[test]
fn a_discard_at_the_question_exits_121_and_an_apply_there_the_commands_code() {
    if !common::have_script("the exit code after the terminal question") {
        return;
    }
    for ex in SANDBOXES {
        for (answer, want, a) in [("d\n", DISCARDED, "a old\n"), ("a\n", 0, "new\n")] {
            let w = world();
            let line = format!(
                "\"$GARUDA_UNDER_TEST\" sandbox --executor {ex} --project \"$PWD\" --staged \
                 -- /bin/sh -c 'echo new > a.txt' && touch \"$NEXT_MARKER\""
            );
            let garuda_bin = garuda();
            let next_marker = w.marker();
            let out = common::on_a_terminal(
                &w,
                &line,
                &[
                    ("GARUDA_UNDER_TEST", garuda_bin.as_os_str()),
                    ("NEXT_MARKER", next_marker.as_os_str()),
                ],
                answer,
            );
            let shown = text(&out.stdout);
            assert!(
                shown.contains("Apply or discard this change? [a/d]"),
                "{ex}: the question: {shown}"
            );
            assert_eq!(w.code(&out, ex), want, "{ex} {answer:?}: {shown}");
            assert_eq!(w.a(), a, "{ex} {answer:?}");
        }
    }
}

/// A signal to garuda while a staged command runs kills the command, discards its half-made
/// change and exits 128 + N, whatever `--apply` says. The control: the same run left to end
/// (the command reads its go from stdin) applies and exits 0.
#[test]
fn a_staged_command_interrupted_by_a_signal_exits_128_plus_n_and_applies_nothing() {
    for ex in SANDBOXES {
        for signal in [Some(("TERM", 15)), None] {
            let w = world();
            let mut child = Command::new(garuda())
                .args(["sandbox", "--executor", ex, "--project"])
                .arg(&w.project)
                .args(["--staged", "--apply", "--", "/bin/sh", "-c"])
                .arg("echo new > a.txt && echo ready && read x")
                .current_dir(&w.project)
                .env("HOME", &w.home)
                .env_remove("GARUDA_HOME")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdout = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            assert_eq!(line, "ready\n", "{ex}");
            let mut stdin = child.stdin.take().unwrap();
            match signal {
                Some((name, _)) => {
                    let sent = Command::new("kill")
                        .args([format!("-{name}"), child.id().to_string()])
                        .status()
                        .unwrap();
                    assert!(sent.success(), "{ex}");
                }
                None => stdin.write_all(b"go\n").unwrap(),
            }
            let out = child.wait_with_output().unwrap();
            drop(stdin);
            let err = text(&out.stderr);
            match signal {
                Some((name, number)) => {
                    assert_eq!(out.status.code(), Some(128 + number), "{ex} {name}: {err}");
                    assert!(
                        err.contains("garuda: the command was interrupted: its change was discarded and the project did not change"),
                        "{ex} {name}: {err}"
                    );
                    assert_eq!(w.a(), "a old\n", "{ex} {name}");
                }
                None => {
                    assert_eq!(out.status.code(), Some(0), "{ex}: {err}");
                    assert_eq!(w.a(), "new\n", "{ex}");
                }
            }
        }
    }
}

/// A staged command killed at `--timeout` stopped wherever it was: its half-made change is
/// discarded whatever `--apply` says, and garuda exits 124, which stops the chain. The
/// control: the same command with time enough applies and exits 0.
#[test]
fn a_staged_command_killed_at_the_timeout_exits_124_and_applies_nothing() {
    for ex in SANDBOXES {
        let w = world();
        let out = w.run(
            ex,
            &["--staged", "--apply", "--timeout", "1"],
            "echo new > a.txt && sleep 30",
        );
        let err = text(&out.stderr);
        assert_eq!(w.code(&out, ex), 124, "{ex}: {err}");
        assert!(
            err.contains("garuda: the command was killed at the timeout: its change was discarded and the project did not change"),
            "{ex}: {err}"
        );
        assert_eq!(w.a(), "a old\n", "{ex}");

        let w = world();
        let out = w.run(
            ex,
            &["--staged", "--apply", "--timeout", "30"],
            "echo new > a.txt",
        );
        assert_eq!(w.code(&out, ex), 0, "{ex}: {}", text(&out.stderr));
        assert_eq!(w.a(), "new\n", "{ex}");
    }
}
