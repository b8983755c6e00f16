//! `garuda audit list` and `garuda audit show` as a user meets them (issue 11, point 4): one
//! line per session (time, id, result, command), the same as JSON for a script, a clear
//! message for a project without sessions or an unknown session id, and what a command chose
//! (its arguments) printed visibly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World, PROXY_VARS};

use std::process::{Command, Output, Stdio};

/// The Linux sandboxes under test.
const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

fn world() -> World {
    let w = World::new("garuda-audit-list-tests");
    w.git(&["init", "-q"]);
    w
}

fn run(w: &World, args: &[&str]) -> Output {
    let mut c = Command::new(garuda());
    c.args(args)
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .stdin(Stdio::null());
    for var in PROXY_VARS {
        c.env_remove(var);
    }
    c.output().unwrap()
}

/// `garuda audit list --json`: its exit code and sessions.
fn list_json(w: &World, extra: &[&str]) -> (i32, Vec<serde_json::Value>) {
    let mut args = vec!["audit", "list", "--json"];
    args.extend_from_slice(extra);
    let out = run(w, &args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", text(&out.stdout), text(&out.stderr)));
    assert_eq!(v["project"], w.project.to_str().unwrap(), "{v}");
    (
        out.status.code().unwrap(),
        v["sessions"].as_array().unwrap().clone(),
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, ISO 8601).
fn is_iso_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// No character that could drive the terminal or reorder the text, other than line ends.
fn assert_nothing_hidden(what: &str, out: &str) {
    let hidden: Vec<char> = out
        .chars()
        .filter(|c| *c != '\n' && garuda_text::is_hidden(*c))
        .collect();
    assert!(hidden.is_empty(), "{what}: raw {hidden:?} in {out:?}");
}

#[test]
fn list_prints_one_line_per_session_oldest_first() {
    let w = world();
    let out = run(&w, &["sandbox", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = run(&w, &["sandbox", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Refused after the session opened (staged mode on the host executor): recorded, with no
    // command.
    let out = run(
        &w,
        &["sandbox", "--staged", "--executor", "host", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let refusal_stderr = text(&out.stderr);

    let out = run(&w, &["audit", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    let (code, sessions) = list_json(&w, &[]);
    assert_eq!(code, 0);
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    // The refusal is recorded with the message the run printed.
    let error = sessions[2]["error"].as_str().unwrap();
    assert!(
        !error.is_empty() && refusal_stderr.contains(&format!("garuda: {error}\n")),
        "{error:?} {refusal_stderr}"
    );
    let refused = format!("({}", &error[..20]);
    let expected = [
        ("exit 3", "sh -c 'exit 3'"),
        ("exit 0", "true"),
        ("refused, garuda exit 125", refused.as_str()),
    ];
    for ((line, json), (result, command)) in lines.iter().zip(&sessions).zip(expected) {
        let id = json["session"].as_str().unwrap();
        let (time, rest) = line.split_once("  ").unwrap();
        assert!(is_iso_utc(time), "{line}");
        // The line's time is the session's first line's, to the second.
        assert_eq!(
            &json["time"].as_str().unwrap()[..19],
            time.trim_end_matches('Z'),
            "{line}"
        );
        let rest = rest.strip_prefix(id).unwrap().trim_start();
        assert!(rest.starts_with(result), "{line}");
        let command_col = rest[result.len()..].trim_start();
        assert!(command_col.starts_with(command), "{line}");
    }
    // Oldest first: times never go back.
    let times: Vec<&str> = sessions
        .iter()
        .map(|s| s["time"].as_str().unwrap())
        .collect();
    assert!(times.windows(2).all(|t| t[0] <= t[1]), "{times:?}");
    // What a script reads.
    assert_eq!(
        sessions[0]["command"],
        serde_json::json!(["sh", "-c", "exit 3"])
    );
    assert_eq!(sessions[0]["status"], "exited");
    assert_eq!(sessions[0]["code"], 3);
    assert_eq!(sessions[0]["exit_code"], 3);
    assert_eq!(sessions[0]["mode"], "direct");
    assert_eq!(sessions[0]["check"], "verified");
    assert_eq!(sessions[2]["status"], "refused");
    assert_eq!(sessions[2]["command"], serde_json::Value::Null);
    assert_eq!(sessions[2]["exit_code"], 125);

    // `show` without an id lists them too, then shows the newest session's lines.
    let out = run(&w, &["audit", "show"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!(
            "project {}: 3 session(s) recorded, oldest first; the newest one's lines below (`--session ID` shows another)\n{listed}\nsession {}\n",
            w.project.display(),
            sessions[2]["session"].as_str().unwrap()
        )),
        "{shown}"
    );
    // And any one by the id `list` gave.
    let first = sessions[0]["session"].as_str().unwrap();
    let out = run(&w, &["audit", "show", "--session", first]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("session {first}\n")),
        "{}",
        text(&out.stdout)
    );
}

/// A project that never ran a command: `list` and `show` say so and name the project (exit 0:
/// nothing is wrong); asking for a session there is Garuda's own failure (125), and says why.
#[test]
fn a_project_without_sessions_is_named_and_exits_0() {
    let w = world();
    let none = format!(
        "no sessions recorded for project {} yet (every `garuda sandbox` run records one)",
        w.project.display()
    );
    for args in [&["audit", "list"][..], &["audit", "show"][..]] {
        let out = run(&w, args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), format!("{none}\n"), "{args:?}");
        assert_eq!(text(&out.stderr), "", "{args:?}");
    }
    let (code, sessions) = list_json(&w, &[]);
    assert_eq!((code, sessions.len()), (0, 0));
    let id = "20260101T000000Z-0123456789abcdef";
    let out = run(&w, &["audit", "show", "--session", id]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!("garuda: no session {id} in the audit log: {none}\n")
    );
    // Negative control: the same project after one run has a session to list.
    assert!(run(&w, &["sandbox", "--", "true"]).status.success());
    let (code, sessions) = list_json(&w, &[]);
    assert_eq!((code, sessions.len()), (0, 1));
}

/// An id that is not the project's: the message names the project, how many sessions it has,
/// and `garuda audit list` (with the `--project` the user gave).
#[test]
fn an_unknown_session_is_named_with_the_project_and_a_hint() {
    let w = world();
    assert!(run(&w, &["sandbox", "--", "true"]).status.success());
    let id = "20200101T000000Z-0000000000000000";
    let out = run(&w, &["audit", "show", "--session", id]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        text(&out.stderr),
        format!(
            "garuda: no session {id} in the audit log of project {} (1 session(s) recorded); `garuda audit list` lists them\n",
            w.project.display()
        )
    );
    assert_eq!(text(&out.stdout), "");
    let project = w.project.to_str().unwrap();
    let out = run(
        &w,
        &["audit", "show", "--project", project, "--session", id],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).ends_with(&format!(
            "; `garuda audit list --project {project}` lists them\n"
        )),
        "{}",
        text(&out.stderr)
    );
    // Not an id at all (a path): refused before any file is opened.
    let out = run(&w, &["audit", "show", "--session", "../../x"]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        text(&out.stderr),
        format!(
            "garuda: \"../../x\" is not a session id (one looks like 20260515T120000Z-0123456789abcdef); `garuda audit list` lists the sessions of project {}\n",
            w.project.display()
        )
    );
    // Negative control: the id `list` gives is shown.
    let (_, sessions) = list_json(&w, &[]);
    let real = sessions[0]["session"].as_str().unwrap();
    let out = run(&w, &["audit", "show", "--session", real]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// An argument is what a command chose: with a newline, an escape sequence, a C1 control and
/// a bidirectional override it cannot add a line to the list, move the cursor or reverse the
/// text; a long one is cut to the column's width. Negative control: the JSON parses back to
/// the exact argument, so the log holds it raw and printing it as it is would forge a line.
#[test]
fn what_a_command_chose_is_listed_visibly_and_cut() {
    let arg = "x\n2026-01-01T00:00:00Z  forged\x1b[2K\u{202e}\u{9b}31m";
    let long = "a".repeat(200);
    for ex in SANDBOXES {
        let w = world();
        let out = run(
            &w,
            &["sandbox", "--executor", ex, "--", "sh", "-c", ":", arg],
        );
        assert_eq!(out.status.code(), Some(0), "{ex}: {}", text(&out.stderr));
        let out = run(&w, &["sandbox", "--executor", ex, "--", "/bin/echo", &long]);
        assert_eq!(out.status.code(), Some(0), "{ex}: {}", text(&out.stderr));
        let out = run(&w, &["audit", "list"]);
        let listed = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{ex}: {listed}");
        assert_eq!(listed.lines().count(), 2, "{ex}: a forged line: {listed}");
        assert_nothing_hidden(ex, &listed);
        assert!(
            listed.contains(
                r"exit 0          sh -c : 'x\n2026-01-01T00:00:00Z  forged\e[2K\u{202e}\u{009b}31m'"
            ),
            "{ex}: {listed}"
        );
        let second = listed.lines().nth(1).unwrap();
        let command = second.split_once("exit 0          ").unwrap().1;
        assert_eq!(command.chars().count(), 72, "{ex}: {second}");
        assert!(command.starts_with("/bin/echo aaaa") && command.ends_with('…'));
        let out = run(&w, &["audit", "list", "--json"]);
        assert_nothing_hidden(ex, &text(&out.stdout));
        let (_, sessions) = list_json(&w, &[]);
        assert_eq!(sessions[0]["command"][3], arg, "{ex}");
        assert_eq!(sessions[1]["command"][1], long.as_str(), "{ex}");
        assert_eq!(sessions[0]["executor"], ex);
        // Negative control: printed as it is, the argument adds a line that reads as a
        // session of the list, and sends the escape and override to the terminal.
        let raw = format!("sh -c : '{arg}'");
        assert_eq!(raw.lines().count(), 2);
        assert!(raw
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("2026-01-01T00:00:00Z  "));
        assert!(raw.contains('\x1b') && raw.contains('\u{202e}') && raw.contains('\u{9b}'));
    }
}

/// `list` checks each session's own lines: a flipped byte makes its row TAMPERED (exit 1); a
/// secret moved off disk makes every row NOT CHECKED (exit 2) until it is given with `--key`.
/// Negative control: the same log lists with exit 0 before the byte is flipped, and with the
/// key given.
#[test]
fn list_says_which_session_does_not_verify() {
    let w = world();
    for _ in 0..2 {
        assert!(run(&w, &["sandbox", "--", "true"]).status.success());
    }
    let (code, sessions) = list_json(&w, &[]);
    assert_eq!(code, 0);
    assert!(sessions.iter().all(|s| s["check"] == "verified"));

    let exported = w.home.join("exported.key");
    let out = run(
        &w,
        &[
            "audit",
            "key",
            "export",
            exported.to_str().unwrap(),
            "--remove",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&w, &["audit", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let listed = text(&out.stdout);
    assert_eq!(
        listed
            .lines()
            .filter(|l| l
                .contains("  NOT CHECKED: its secret was not given (--key FILE)  (not verified)"))
            .count(),
        2,
        "{listed}"
    );
    let key = ["--key", exported.to_str().unwrap()];
    let (code, sessions) = list_json(&w, &key);
    assert_eq!(code, 0, "{sessions:?}");

    // Flip a byte of the second session's command.
    let dir = std::fs::read_dir(w.home.join(".garuda/audit"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let journal = dir.join("journal.jsonl");
    let mut bytes = std::fs::read(&journal).unwrap();
    let at = bytes
        .windows(6)
        .rposition(|win| win == b"\"argv\"")
        .unwrap();
    bytes[at + 9] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();
    let mut args = vec!["audit", "list"];
    args.extend_from_slice(&key);
    let out = run(&w, &args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let listed = text(&out.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[0].contains("  exit 0          true"), "{listed}");
    assert!(
        lines[1].contains("  TAMPERED at line 7 (BAD_MAC)  (not verified)"),
        "{listed}"
    );
    let (code, sessions) = list_json(&w, &key);
    assert_eq!(code, 1);
    assert_eq!(sessions[1]["check"], "tampered");
    assert_eq!(sessions[1]["stopped"]["code"], "BAD_MAC");
}
