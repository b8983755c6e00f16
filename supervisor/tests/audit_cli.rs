//! End-to-end tests of the audit log as `garuda sandbox` writes it and `garuda audit` reads it.
//! The tamper suite of the log format itself is in `audit/tests/tamper.rs`; these tests show
//! the supervisor's side: every run is recorded, the intent is on disk before the command
//! starts, secrets are redacted, a log that cannot be written stops the command, and
//! `garuda audit verify` / `show` / `witness-serve` work from the command line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{base_dir, garuda, text};

use std::path::{Path, PathBuf};

use std::process::{Command, Output};

struct World {
    _base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn world() -> World {
    let base = base_dir("garuda-audit-cli-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    World {
        home,
        project,
        _base: base,
    }
}

impl World {
    fn garuda(&self, args: &[&str]) -> Output {
        Command::new(garuda())
            .args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap()
    }
    fn audit_dir(&self) -> PathBuf {
        let root = self.home.join(".garuda/audit");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs.pop().unwrap()
    }
    /// The project's journal (every session of the project, one after the other).
    fn journal(&self) -> PathBuf {
        self.audit_dir().join("journal.jsonl")
    }
    /// The sessions' lines, oldest first: the journal cut at every `session_start`.
    fn sessions(&self) -> Vec<Vec<serde_json::Value>> {
        let mut out: Vec<Vec<serde_json::Value>> = Vec::new();
        for v in lines_of(&self.journal()) {
            if v["type"] == "session_start" || out.is_empty() {
                out.push(Vec::new());
            }
            out.last_mut().unwrap().push(v);
        }
        out
    }
    fn verify(&self) -> (i32, String) {
        let out = self.garuda(&["audit", "verify"]);
        (
            out.status.code().unwrap(),
            text(&out.stdout) + &text(&out.stderr),
        )
    }
}

fn lines_of(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_run_is_a_verified_session_with_intent_before_result() {
    let w = world();
    let out = w.garuda(&["sandbox", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = w.garuda(&["sandbox", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let logs = w.sessions();
    assert_eq!(logs.len(), 2);
    let kinds: Vec<String> = logs[0]
        .iter()
        .map(|l| l["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_start",
            "command_intent",
            "command_result",
            "session_end",
            "seal"
        ]
    );
    let first = &logs[0];
    assert_eq!(
        first[1]["event"]["argv"],
        serde_json::json!(["sh", "-c", "exit 3"])
    );
    assert_eq!(first[2]["event"]["exit_code"], 3);
    // The second session is linked to the first: its first line carries the first's head.
    let second = &logs[1];
    assert!(
        second[0]["event"]["prev_session"].is_object(),
        "{}",
        second[0]
    );

    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(report.contains("VERIFIED"), "{report}");
    let out = w.garuda(&["audit", "verify", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.is_object(), "{v}");
    let out = w.garuda(&["audit", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("command_intent"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn the_intent_is_on_disk_before_the_command_starts() {
    let w = world();
    // The host executor can read the log (the negative control of the sandbox below): the
    // command finds its own intent already written, and no result yet.
    let script = "cat \"$HOME\"/.garuda/audit/*/*.jsonl | grep -c '\"type\":\"command_intent\"'; \
                  cat \"$HOME\"/.garuda/audit/*/*.jsonl | grep -c '\"type\":\"command_result\"'; true";
    let out = w.garuda(&["sandbox", "--executor", "host", "--", "sh", "-c", script]);
    assert_eq!(
        text(&out.stdout).split_whitespace().collect::<Vec<_>>(),
        ["1", "0"],
        "{}",
        text(&out.stderr)
    );
    // Inside a sandbox the log (and the key) cannot be read at all.
    for executor in ["landlock", "bubblewrap"] {
        let out = w.garuda(&[
            "sandbox",
            "--executor",
            executor,
            "--",
            "sh",
            "-c",
            "cat \"$HOME\"/.garuda/keys/install.key; ls \"$HOME\"/.garuda/audit",
        ]);
        let err = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{executor}: {err}");
        assert!(err.contains("Permission denied"), "{executor}: {err}");
    }
}

#[test]
fn secrets_in_commands_are_redacted() {
    let w = world();
    let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let out = w.garuda(&[
        "sandbox",
        "--",
        "echo",
        &format!("Authorization: Bearer {token}"),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let raw = std::fs::read_to_string(w.journal()).unwrap();
    assert!(!raw.contains(token), "{raw}");
    assert!(raw.contains("[REDACTED"), "{raw}");
    // Negative control: the command itself saw the token.
    assert!(text(&out.stdout).contains(token));
}

#[test]
fn a_flipped_byte_is_found_with_its_line() {
    let w = world();
    assert!(w.garuda(&["sandbox", "--", "true"]).status.success());
    let log = w.journal();
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(6).position(|win| win == b"\"argv\"").unwrap();
    bytes[at + 9] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let (code, report) = w.verify();
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("BAD_MAC"), "{report}");
    assert!(report.contains(".jsonl:2"), "{report}");
}

/// The session opens in the executor's release, while the sandbox is being built (each
/// executor has its own way to hold the command back until then): an open that fails stops
/// the command under every executor.
#[test]
fn a_log_that_cannot_be_written_stops_the_command() {
    for executor in ["landlock", "bubblewrap", "host"] {
        let w = world();
        // Garuda's audit folder is a file: no session can be opened.
        std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
        std::fs::write(w.home.join(".garuda/audit"), "not a folder").unwrap();
        let marker = w.project.join("ran");
        let run = [
            "sandbox",
            "--executor",
            executor,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ];
        let out = w.garuda(&run);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{executor}: {err}");
        assert!(
            err.contains("cannot open the audit log"),
            "{executor}: {err}"
        );
        assert!(
            !marker.exists(),
            "{executor}: the command ran without a record"
        );
        // Negative control: with a working log the same command runs.
        std::fs::remove_file(w.home.join(".garuda/audit")).unwrap();
        let out = w.garuda(&run);
        assert!(out.status.success(), "{executor}: {}", text(&out.stderr));
        assert!(marker.exists(), "{executor}");
    }
}

/// A program that is not found never runs, but it was tried: its intent is on record before
/// its result (exit 127), under every executor. Bubblewrap answers 127 itself, without the
/// release that opens the session and writes the intent. Control: the session's other lines
/// are there, so a missing intent is not a missing session.
#[test]
fn a_program_that_is_not_found_has_its_intent_recorded() {
    for executor in ["landlock", "bubblewrap", "host"] {
        let w = world();
        let run = [
            "sandbox",
            "--executor",
            executor,
            "--",
            "garuda-no-such-program-7d1",
        ];
        let out = w.garuda(&run);
        assert_eq!(
            out.status.code(),
            Some(127),
            "{executor}: {}",
            text(&out.stderr)
        );
        let sessions = w.sessions();
        let kinds: Vec<&str> = sessions[0]
            .iter()
            .map(|v| v["type"].as_str().unwrap())
            .collect();
        let intent = kinds.iter().position(|k| *k == "command_intent");
        let result = kinds.iter().position(|k| *k == "command_result");
        assert!(result.is_some(), "{executor}: {kinds:?}");
        assert!(intent.is_some() && intent < result, "{executor}: {kinds:?}");
    }
}

#[test]
fn refusals_are_recorded() {
    let w = world();
    let out = w.garuda(&["sandbox", "--strict", "--executor", "host", "--", "true"]);
    // This one is refused while the policy loads, before a session can say which policy it
    // runs under: no session.
    assert_eq!(out.status.code(), Some(125));
    assert!(!w.home.join(".garuda/audit").exists());
    // A refusal after the policy loaded (staged mode on the host executor) is recorded.
    let out = w.garuda(&["sandbox", "--staged", "--executor", "host", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let lines = w.sessions().remove(0);
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["session_start", "refusal", "session_end", "seal"]);
    assert!(lines[1]["event"]["error"]
        .as_str()
        .unwrap()
        .contains("staged mode"));
    assert_eq!(w.verify().0, 0);
}

#[test]
fn a_witness_sees_the_newest_session_cut() {
    let w = world();
    let witness = w.home.join("witness");
    let policy = serde_json::json!({
        "audit": { "witness": [garuda().to_str().unwrap(), "audit", "witness-serve", witness.to_str().unwrap()] }
    });
    std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
    std::fs::write(w.home.join(".garuda/policy.json"), policy.to_string()).unwrap();
    for _ in 0..2 {
        let out = w.garuda(&["sandbox", "--", "true"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(w.verify().0, 0, "{}", w.verify().1);
    // Later (past the ctime slack verify allows for the writer's own last write), delete the
    // newest session, its checkpoint and its index entries: the local evidence of it is gone,
    // the witness still has it.
    std::thread::sleep(std::time::Duration::from_secs(3));
    // (Journal layout: the newest session's lines are the journal's last lines; the lane's
    // checkpoint and tail state name it.)
    let journal = w.journal();
    std::fs::remove_file(journal.with_extension("ckpt")).unwrap();
    std::fs::remove_file(journal.with_extension("tail")).unwrap();
    let text = std::fs::read_to_string(&journal).unwrap();
    let all: Vec<&str> = text.lines().collect();
    let first_of_newest = all
        .iter()
        .rposition(|l| l.contains("\"type\":\"session_start\""))
        .unwrap();
    let kept: String = all[..first_of_newest]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&journal, kept).unwrap();
    let (code, report) = w.verify();
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("WITNESS_AHEAD"), "{report}");

    // Without the witness, the install-wide register (outside the project's folder) still
    // knows the session existed: tampered, but no WITNESS_AHEAD.
    std::fs::write(w.home.join(".garuda/policy.json"), "{}").unwrap();
    let (code, report) = w.verify();
    assert_eq!(code, 1, "{report}");
    assert!(!report.contains("WITNESS_AHEAD"), "{report}");
}

/// `garuda audit verify` gives each of its three answers through the command line, on the same
/// log: 0 verified; 2 when the evidence cannot decide (the install secret moved off disk with
/// `key export --remove`: every line is KEY_UNKNOWN, "cannot tell", never "verified"); 0 again
/// with that key given (the negative control of the 2: the log itself is intact, the missing
/// key was the only reason); 1 once a byte of it is flipped. A verify that cannot run at all
/// (a project folder that does not exist) is 2, never 0.
#[test]
fn verify_exits_0_verified_2_cannot_decide_1_tampered() {
    let w = world();
    let out = w.garuda(&["sandbox", "--", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(
        report.starts_with("audit log: VERIFIED (exit 0)\n"),
        "{report}"
    );

    let key = w.home.join("exported.key");
    let out = w.garuda(&["audit", "key", "export", key.to_str().unwrap(), "--remove"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, report) = w.verify();
    assert_eq!(code, 2, "{report}");
    assert!(
        report.starts_with("audit log: UNDECIDABLE (the evidence cannot tell) (exit 2)\n"),
        "{report}"
    );
    assert!(report.contains("KEY_UNKNOWN [cannot tell]"), "{report}");
    assert!(!report.contains("[error]"), "{report}");

    let with_key = |w: &World| {
        let out = w.garuda(&["audit", "verify", "--key", key.to_str().unwrap()]);
        (
            out.status.code().unwrap(),
            text(&out.stdout) + &text(&out.stderr),
        )
    };
    let (code, report) = with_key(&w);
    assert_eq!(code, 0, "{report}");
    assert!(
        report.starts_with("audit log: VERIFIED (exit 0)\n"),
        "{report}"
    );

    let missing = w.home.join("no-such-project");
    let out = w.garuda(&["audit", "verify", "--project", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "garuda: project folder {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );

    let log = w.journal();
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(6).position(|win| win == b"\"argv\"").unwrap();
    bytes[at + 9] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let (code, report) = with_key(&w);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("BAD_MAC"), "{report}");
}

#[test]
fn retention_in_the_user_policy_prunes_and_verify_says_so() {
    let w = world();
    std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
    std::fs::write(
        w.home.join(".garuda/policy.json"),
        r#"{"audit": {"retention": {"sessions": 1}}}"#,
    )
    .unwrap();
    // A session is pruned once 64 are due (garuda's batch): the 66th run finds 65 before it,
    // keeps the newest one and itself.
    for _ in 0..66 {
        let out = w.garuda(&["sandbox", "--executor", "host", "--", "true"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(w.sessions().len(), 3, "the pruned record and two sessions");
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(
        report.contains("journal.jsonl:1 (byte 0) PRUNED [warning]: 64 session(s) from "),
        "{report}"
    );
    // Negative control: a project file cannot prune the log.
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        r#"{"audit": {"retention": {"sessions": 1}}}"#,
    )
    .unwrap();
    let out = w.garuda(&["sandbox", "--executor", "host", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("audit.retention"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 11, point 3: every sentence of `garuda audit verify`'s report is computed from what it
/// checked. On a fresh home there is no key and no session: the report says exactly that,
/// exits 0 ("no sessions recorded", nothing is wrong), and claims nothing about forgery. The
/// wording of every variant is pinned in `garuda_audit`'s `report::facts_tests`; these are
/// the situations a user meets.
#[test]
fn verify_on_a_fresh_home_says_no_sessions_and_no_key() {
    let w = world();
    let project = w.project.canonicalize().unwrap();
    let key = w.home.join(".garuda/keys/install.key");
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(
        report.starts_with(&format!(
            "audit log: NO SESSIONS (exit 0): no sessions recorded for project {} yet\n",
            project.display()
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "  note: there is no install secret ({} does not exist): the first `garuda sandbox` run creates one\n",
            key.display()
        )),
        "{report}"
    );
    assert!(!report.contains("FILE_MISSING"), "{report}");
    assert!(!report.contains("cannot forge"), "{report}");
    assert!(!report.contains("off disk,"), "{report}");
    let out = w.garuda(&["audit", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "no_sessions", "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["facts"]["disk_key"]["file"]["state"], "absent", "{v}");
    // `--all` on the same home: nothing recorded anywhere, not "cannot list the audit folder".
    let out = w.garuda(&["audit", "verify", "--all"]);
    let all = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(
        all.starts_with(&format!(
            "audit log: NO SESSIONS (exit 0): no sessions recorded in {} yet\n",
            w.home.join(".garuda/audit").display()
        )),
        "{all}"
    );
    // Negative control: once a command ran, the same verify has a session and verifies it.
    assert!(w.garuda(&["sandbox", "--", "true"]).status.success());
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(
        report.starts_with("audit log: VERIFIED (exit 0)\n"),
        "{report}"
    );
}

/// The false sentence of issue 11: with `keys/install.key` on disk (created by a run in
/// another project), verify said "the install secret is off disk, so a process with your
/// rights cannot forge lines". Now it names the file, its mode and key id, and says it is on
/// disk; in the project with sessions, that they are under it. Negative control: after `key
/// export --remove` and with `--key`, the report does say the lines cannot be forged by a
/// process with your rights — the sentence exists, and appears only when it is true.
#[test]
fn verify_says_the_key_is_on_disk_when_it_is() {
    let w = world();
    let key = w.home.join(".garuda/keys/install.key");
    let other = w.project.parent().unwrap().join("other");
    std::fs::create_dir_all(other.join(".git")).unwrap();
    let out = w.garuda(&[
        "sandbox",
        "--project",
        other.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(key.exists());

    // This project: no session, the key on disk.
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(
        report.starts_with("audit log: NO SESSIONS (exit 0)"),
        "{report}"
    );
    let on_disk = format!("  note: {} (mode 0600, key id ", key.display());
    assert!(report.contains(&on_disk), "{report}");
    assert!(
        report.contains(") is on disk: a process with your rights can read it, and could rewrite any session written under it; `garuda audit key export FILE --remove` moves it off disk (verify then needs --key FILE)\n"),
        "{report}"
    );
    assert!(
        report.contains("which names no session of this project"),
        "{report}"
    );
    assert!(!report.contains("cannot forge"), "{report}");
    assert!(!report.contains("off disk,"), "{report}");

    // A project with a session under it.
    assert!(w.garuda(&["sandbox", "--", "true"]).status.success());
    let (code, report) = w.verify();
    assert_eq!(code, 0, "{report}");
    assert!(report.contains(&on_disk), "{report}");
    assert!(
        report.contains(") is on disk and every session checked (1) is under it: a process with your rights could have rewritten those consistently;"),
        "{report}"
    );
    assert!(
        report.contains("  processes with your rights: no\n"),
        "{report}"
    );
    assert!(!report.contains("cannot forge"), "{report}");

    // Negative control: the secret moved off disk (the supported setup, docs/audit.md).
    let exported = w.home.join("exported.key");
    let out = w.garuda(&[
        "audit",
        "key",
        "export",
        exported.to_str().unwrap(),
        "--remove",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, report) = w.verify();
    assert_eq!(code, 2, "{report}");
    assert!(
        report.contains(&format!(
            "  note: there is no install secret on disk ({} does not exist)\n",
            key.display()
        )),
        "{report}"
    );
    assert!(
        report.contains("  note: 1 session(s) are under a secret that was not given, so their lines could not be checked: give the exported secret with --key FILE\n"),
        "{report}"
    );
    assert!(!report.contains("cannot forge"), "{report}");
    let out = w.garuda(&["audit", "verify", "--key", exported.to_str().unwrap()]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains(", which is not in the keys folder: a process with your rights cannot forge their lines unless it can read the file you gave"),
        "{report}"
    );
    assert!(!report.contains(&on_disk), "{report}");

    // Tampered (last: rewriting the journal moves its ctime): the sentences about the keys
    // stay what they are.
    let log = garuda_audit::project_audit_dir(
        &w.home.join(".garuda/audit"),
        &w.project.canonicalize().unwrap(),
    )
    .unwrap()
    .join("journal.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes.windows(6).position(|win| win == b"\"argv\"").unwrap();
    bytes[at + 9] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let out = w.garuda(&["audit", "verify", "--key", exported.to_str().unwrap()]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.starts_with("audit log: TAMPERED (exit 1)\n"),
        "{report}"
    );
    assert!(report.contains("BAD_MAC"), "{report}");
    assert!(
        report.contains(&format!(
            "  note: there is no install secret on disk ({} does not exist)\n",
            key.display()
        )),
        "{report}"
    );
}
