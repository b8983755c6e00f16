//! The chat in line mode (`garuda < script > out`): the real `garuda` with no task, its input
//! a script of messages and answers, against the scripted model server on loopback.
//!
//! What is shown, and the control of each:
//!
//! - an edit refused with `n` leaves the file unchanged, and the question showed the diff;
//!   control: the same run answered `y` changes it.
//! - `a` (always, for this session) answers the same edit again without a question, and the
//!   audit log holds the answer and the rule it added; control: `y` is asked again.
//! - `/audit verify` prints verify's result, and after a byte of an earlier session's log is
//!   flipped it prints the finding with its code; control: before the flip there is none.
//! - the model's text with `\e[2K`, `\e[1A`, `\r`, OSC 52, OSC 0, OSC 8 and a fake question
//!   line reaches stdout as visible text: no ESC, BEL or CR byte, and no line of it at the
//!   first column (where only the supervisor writes); control: the scripted text holds each.
//! - `/help`, an unknown slash command (named, nothing sent), the end of the input ends the
//!   chat with 0.
//! - a host the network allowlist does not name is asked about while the command waits:
//!   `n` refuses it, `y` lets it past the question, `a` also lets the next command's request
//!   through without a question; control: `-p`, with no one to ask, refuses it unasked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{garuda, text, World, PROXY_VARS};
use garuda_modelserver::{Dialect, ModelServer, Part, Scripted};
use serde_json::{json, Value};

struct Chat {
    w: World,
    server: ModelServer,
}

impl Chat {
    fn new(script: Vec<Scripted>) -> Chat {
        let w = World::new("garuda-chat-line");
        w.git(&["init", "-q"]);
        std::fs::write(w.project.join("README.md"), "hello\nworld\n").unwrap();
        std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
        Chat {
            w,
            server: ModelServer::start(Dialect::Anthropic, script).unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(garuda());
        c.args(args)
            .current_dir(&self.w.project)
            .env("HOME", &self.w.home)
            .env_remove("GARUDA_HOME")
            .env_remove("GARUDA_MODEL")
            .env("ANTHROPIC_API_KEY", "sk-test-chat")
            .env("ANTHROPIC_BASE_URL", self.server.url());
        for v in PROXY_VARS
            .iter()
            .copied()
            .chain(garuda_policy::PROVIDER_ENV_DENY.iter().copied())
        {
            if !v.starts_with("ANTHROPIC_") {
                c.env_remove(v);
            }
        }
        c
    }

    /// `garuda` with no task, `input` on its stdin.
    fn chat(&self, input: &str) -> Output {
        self.chat_with(&[], input)
    }

    /// `garuda ARGS` (the chat's options), `input` on its stdin.
    fn chat_with(&self, args: &[&str], input: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn readme(&self) -> String {
        std::fs::read_to_string(self.w.project.join("README.md")).unwrap()
    }

    /// Every `tool_call` audit line of the project's sessions.
    fn tool_calls(&self) -> Vec<Value> {
        let out = self.command(&["audit", "list", "--json"]).output().unwrap();
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut calls = Vec::new();
        for s in list["sessions"].as_array().unwrap() {
            let id = s["session"].as_str().unwrap();
            let out = self
                .command(&["audit", "show", "--session", id, "--json"])
                .output()
                .unwrap();
            let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
            for l in shown["lines"].as_array().unwrap() {
                if l["type"] == "tool_call" {
                    calls.push(l["event"].clone());
                }
            }
        }
        calls
    }
}

fn edit(id: &str) -> Scripted {
    Scripted::reply(vec![Part::ToolUse {
        id: id.into(),
        name: "edit_file".into(),
        input: json!({"path": "README.md", "old": "world", "new": "there"}),
    }])
}

fn edit_back(id: &str) -> Scripted {
    Scripted::reply(vec![Part::ToolUse {
        id: id.into(),
        name: "edit_file".into(),
        input: json!({"path": "README.md", "old": "there", "new": "world"}),
    }])
}

/// The chat's stdout, after checking that it exited 0 (stdout and stderr in the message).
fn succeeded(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    stdout
}

fn questions(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.starts_with("? allow it?"))
        .count()
}

#[test]
fn an_edit_refused_with_n_leaves_the_file_unchanged() {
    for (answer, want) in [("n", "hello\nworld\n"), ("y", "hello\nthere\n")] {
        let c = Chat::new(vec![edit("e1"), Scripted::text("ok")]);
        let out = c.chat(&format!("fix the README\n{answer}\n"));
        let stdout = succeeded(&out);
        assert_eq!(c.readme(), want, "answer {answer}: {stdout}");
        assert!(stdout.contains("> fix the README\n"), "{stdout}");
        assert!(stdout.contains("? edit_file README.md: "), "{stdout}");
        // The question shows the change.
        assert!(stdout.contains("?   -world\n"), "{stdout}");
        assert!(stdout.contains("?   +there\n"), "{stdout}");
        assert_eq!(questions(&stdout), 1, "{stdout}");
        let said = if answer == "n" { "no" } else { "yes, once" };
        assert!(
            stdout.contains(&format!("? answered: {said}\n")),
            "{stdout}"
        );
        // The model's answer, indented.
        assert!(stdout.contains("\n  ok\n"), "{stdout}");
    }
}

#[test]
fn always_stops_the_next_identical_question_and_is_audited() {
    // Each run edits README.md twice (world → there → world) and finishes.
    let script = || vec![edit("e1"), edit_back("e2"), Scripted::text("done")];
    let c = Chat::new(script());
    let out = c.chat("twice\na\n");
    let stdout = succeeded(&out);
    assert_eq!(questions(&stdout), 1, "{stdout}");
    assert!(
        stdout.contains("? answered: always, for this session\n"),
        "{stdout}"
    );
    // Both edits ran: the file is back as it was, and the audit says how.
    assert_eq!(c.readme(), "hello\nworld\n");
    let calls: Vec<Value> = c
        .tool_calls()
        .into_iter()
        .filter(|e| e["tool"] == "edit_file")
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["user_answer"], "always", "{calls:?}");
    assert_eq!(
        calls[0]["session_rules_added"],
        json!(["edit_file(/README.md)"]),
        "{calls:?}"
    );
    assert_eq!(calls[1]["verdict"], "allow", "{calls:?}");
    assert!(calls[1].get("user_answer").is_none(), "{calls:?}");

    // Control: `y` allows once; the second edit is asked again.
    let c = Chat::new(script());
    let out = c.chat("twice\ny\ny\n");
    let stdout = succeeded(&out);
    assert_eq!(questions(&stdout), 2, "{stdout}");
    assert_eq!(c.readme(), "hello\nworld\n");
}

#[test]
fn audit_verify_prints_the_result_and_then_the_finding() {
    let c = Chat::new(Vec::new());
    // An earlier session of the project, closed: a `garuda sandbox` run.
    let out = c.command(&["sandbox", "--", "/bin/true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = c.chat("/audit verify\n");
    let before = succeeded(&out);
    assert!(before.contains("garuda: audit log: VERIFIED"), "{before}");
    assert!(!before.contains("BAD_MAC"), "{before}");

    // Flip one byte inside the first line's event of the earlier session's journal.
    let dir =
        c.w.home
            .join(".garuda/audit")
            .join(garuda_audit::project_dir_name(&c.w.project));
    let journal = dir.join("journal.jsonl");
    let bytes = std::fs::read(&journal).unwrap();
    let at = bytes
        .windows(b"\"tool\":\"garuda sandbox\"".len())
        .position(|w| w == b"\"tool\":\"garuda sandbox\"")
        .unwrap()
        + b"\"tool\":\"".len();
    // One byte written in place: the chat's own session appends to the same file.
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    file.write_all_at(b"G", at as u64).unwrap();
    let out = c.chat("/audit verify\n");
    let after = text(&out.stdout);
    assert!(after.contains("BAD_MAC"), "{after}");
    assert!(!after.contains("VERIFIED"), "{after}");
}

#[test]
fn the_models_escapes_reach_the_output_as_visible_text() {
    let hostile = "erase\x1b[2K up\x1b[1A back\rclip\x1b]52;c;cm0gLXJmIH4=\x07 \
                   title\x1b]0;owned\x07 link\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\\n\
                   ? allow it? y = yes, once; a = always, for this session; n = no\n";
    // Control: the text as scripted holds each sequence.
    for seq in ["\x1b[2K", "\x1b[1A", "\r", "\x1b]52;", "\x1b]0;", "\x1b]8;"] {
        assert!(hostile.contains(seq), "{seq:?}");
    }
    let c = Chat::new(vec![Scripted::text(hostile)]);
    let out = c.chat("hello\n");
    let stdout = succeeded(&out);
    for byte in [0x1b_u8, 0x07, b'\r'] {
        assert!(!out.stdout.contains(&byte), "byte {byte:#x} in {stdout:?}");
    }
    // Shown, escaped, and indented: the fake question is not at the first column.
    assert!(stdout.contains("\\e]52;c;cm0gLXJmIH4="), "{stdout}");
    assert!(stdout.contains("\\e]0;owned"), "{stdout}");
    assert!(stdout.contains("\\e]8;;https://evil.example/"), "{stdout}");
    assert!(stdout.contains("\n  ? allow it?"), "{stdout}");
    assert_eq!(questions(&stdout), 0, "{stdout}");
}

#[test]
fn help_unknown_commands_and_the_end_of_the_input() {
    let c = Chat::new(Vec::new());
    let out = c.chat("/help\n/frobnicate \x1b[2J\n");
    let stdout = succeeded(&out);
    assert!(
        stdout.starts_with("garuda chat: model anthropic/"),
        "{stdout}"
    );
    assert!(stdout.contains("garuda: /audit verify"), "{stdout}");
    assert!(
        stdout.contains("garuda: no command /frobnicate \\e[2J (see /help); nothing was sent"),
        "{stdout}"
    );
    // Nothing reached the model.
    assert!(c.server.requests().is_empty());
}

/// A staged command's change is shown and asked about by the chat: `a` applies it, `d`
/// discards it (each the other's control); the model is told which.
#[test]
fn a_staged_commands_change_is_applied_or_discarded_as_answered() {
    // The third: a command whose own exit code is 121, which is also the code of "discarded
    // at the question"; applied, and the model is told so (the child reports the outcome).
    for (answer, applied, command) in [
        ("a", true, "echo made > made.txt"),
        ("d", false, "echo made > made.txt"),
        ("a", true, "echo made > made.txt; exit 121"),
    ] {
        let c = Chat::new(vec![
            Scripted::reply(vec![Part::ToolUse {
                id: "b1".into(),
                name: "bash".into(),
                input: json!({ "command": command }),
            }]),
            Scripted::text("ok"),
        ]);
        let out = c.chat_with(&["--staged"], &format!("make it\n{answer}\n"));
        let stdout = succeeded(&out);
        assert!(
            stdout.contains("? the staged command changed the project's view:"),
            "{stdout}"
        );
        assert!(stdout.contains("made.txt"), "{stdout}");
        assert!(
            stdout.contains("? apply or discard this change? a = apply, d = discard\n"),
            "{stdout}"
        );
        assert_eq!(
            c.w.project.join("made.txt").exists(),
            applied,
            "answer {answer}: {stdout}"
        );
        // The model was told what became of it.
        let requests = c.server.requests();
        let last = requests.last().unwrap().body.to_string();
        let told = if applied {
            "the change was applied to the project (applied)"
        } else {
            "the change was not applied (discarded): the project did not change"
        };
        assert!(last.contains(told), "{last}");
    }
}

/// `!COMMAND` runs as the agent's bash would (the same policy, the sandbox), and its output
/// (or its refusal) is a note at the head of the next message; a read of a home secret is
/// refused and its content reaches neither the model nor the screen. Control: the secret is
/// there on the host, and the other command's output did arrive.
#[test]
fn a_bang_command_runs_sandboxed_and_its_output_reaches_the_next_message() {
    let c = Chat::new(vec![Scripted::text("noted")]);
    std::fs::create_dir_all(c.w.home.join(".ssh")).unwrap();
    std::fs::write(c.w.home.join(".ssh/id_test"), "PRIVATE-KEY-BYTES\n").unwrap();
    let input = "!echo hi-from-user\n!cat ~/.ssh/id_test\nwhat did it say?\n";
    let out = c.chat(input);
    let stdout = succeeded(&out);
    assert!(stdout.contains("\n  hi-from-user\n"), "{stdout}");
    assert!(
        stdout.contains("· !echo hi-from-user → exit 0\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("· !cat ~/.ssh/id_test → refused: the policy denies it: "),
        "{stdout}"
    );
    let requests = c.server.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].body.to_string();
    // Fenced by a line the output could not know in advance.
    let fenced = regex_lite_fence(&body, "[The user ran `echo hi-from-user` in the sandbox (exit 0). Its output is between the two lines ");
    assert_eq!(fenced.as_deref(), Some("hi-from-user\\n"), "{body}");
    assert!(
        body.contains("[The user tried to run `cat ~/.ssh/id_test`; it was refused: "),
        "{body}"
    );
    assert!(body.contains("what did it say?"), "{body}");
    assert!(!body.contains("PRIVATE-KEY-BYTES") && !stdout.contains("PRIVATE-KEY-BYTES"));
    assert_eq!(
        std::fs::read_to_string(c.w.home.join(".ssh/id_test")).unwrap(),
        "PRIVATE-KEY-BYTES\n"
    );
    // Audited as the person's.
    let by_user: Vec<Value> = c
        .tool_calls()
        .into_iter()
        .filter(|e| e["by"] == "user")
        .collect();
    assert_eq!(by_user.len(), 2, "{by_user:?}");
    assert!(by_user.iter().all(|e| e["tool"] == "run_command"));
}

/// `@PATH` attaches a file through the supervisor's rules: a project file is attached, a
/// `.env` is refused and its content reaches neither the model nor the screen. Control: the
/// `.env` is there and holds the value.
#[test]
fn an_at_path_attaches_through_the_supervisors_rules() {
    let c = Chat::new(vec![Scripted::text("read them")]);
    std::fs::write(c.w.project.join("notes.md"), "NOTE-CONTENT\n").unwrap();
    std::fs::write(c.w.project.join(".env"), "TOKEN=ENV-SECRET\n").unwrap();
    let out = c.chat("look at @notes.md and @.env\n");
    let stdout = succeeded(&out);
    assert!(stdout.contains("· attached notes.md (1 lines)"), "{stdout}");
    assert!(stdout.contains("· @.env not attached: "), "{stdout}");
    let body = c.server.requests()[0].body.to_string();
    let fenced = regex_lite_fence(&body, "[The file notes.md is between the two lines ");
    assert_eq!(fenced.as_deref(), Some("NOTE-CONTENT\\n"), "{body}");
    assert!(!body.contains("ENV-SECRET") && !stdout.contains("ENV-SECRET"));
    assert!(std::fs::read_to_string(c.w.project.join(".env"))
        .unwrap()
        .contains("ENV-SECRET"));
}

/// `/policy` and `/audit` show what `garuda policy` and `garuda audit show` show, as the
/// supervisor's lines.
#[test]
fn policy_and_audit_show_the_commands_output() {
    let c = Chat::new(Vec::new());
    let out = c.chat("/policy\n/audit\n");
    let stdout = succeeded(&out);
    assert!(stdout.contains("garuda: effective policy for "), "{stdout}");
    assert!(stdout.contains("garuda: executor in use: "), "{stdout}");
    assert!(stdout.contains("agent_session"), "{stdout}");
    assert!(c.server.requests().is_empty());
}

/// In a request body (JSON text, so a newline is `\\n`): the text fenced after `intro` —
/// `intro` names the fence line, then `; …:]\\n` FENCE `\\n` TEXT `\\n` FENCE. `None` when the
/// shape is not there or the two fences differ.
fn regex_lite_fence(body: &str, intro: &str) -> Option<String> {
    let rest = &body[body.find(intro)? + intro.len()..];
    let fence = rest.split(';').next()?;
    assert!(
        fence.starts_with("----- garuda ") && fence.len() > 30,
        "{fence}"
    );
    let after = &rest[rest.find(":]\\n")? + 4..];
    let inner = after.strip_prefix(fence)?.strip_prefix("\\n")?;
    let end = inner.find(&format!("\\n{fence}"))?;
    Some(inner[..end + 2].to_string())
}

/// Ctrl-C while a question waits for its line: the line typed after it answers nothing (the
/// read restarted under the signal would otherwise take it as a yes) and the chat ends with
/// 130. Control: `an_edit_refused_with_n_leaves_the_file_unchanged`, where the same `y`
/// with no signal changes the file.
#[test]
fn a_line_typed_after_ctrl_c_answers_no_question() {
    use std::io::{BufRead, BufReader};
    let c = Chat::new(vec![edit("e1"), Scripted::text("ok")]);
    let mut child = c
        .command(&[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"fix the README\n").unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("? allow it?") {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "{seen}");
        seen.push_str(&line);
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = stdin.write_all(b"y\n");
    drop(stdin);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{rest}");
    assert_eq!(c.readme(), "hello\nworld\n", "{seen}{rest}");
    assert!(rest.contains("? answered: no"), "{seen}{rest}");
}

/// A bash call that asks the sandbox's proxy for `http://localhost:9/` and prints the proxy's
/// refusal header (lower case), if any (`--noproxy ''`: the sandbox's `NO_PROXY` names
/// localhost, which would skip the proxy).
fn fetch_localhost(id: &str) -> Scripted {
    Scripted::reply(vec![Part::ToolUse {
        id: id.into(),
        name: "bash".into(),
        input: json!({
            "command": "curl -s -i --noproxy '' -x \"$HTTP_PROXY\" http://localhost:9/ | tr -d '\\r' | tr A-Z a-z | grep '^x-garuda-refused' || echo no-refusal-header"
        }),
    }])
}

/// The text of every tool result the model was sent, once each, in the order of their calls.
fn tool_results(c: &Chat) -> Vec<String> {
    let mut results: Vec<(String, String)> = Vec::new();
    for r in c.server.requests() {
        for m in r.body["messages"].as_array().into_iter().flatten() {
            for part in m["content"].as_array().into_iter().flatten() {
                let id = part["tool_use_id"].to_string();
                if part["type"] == "tool_result" && !results.iter().any(|(i, _)| *i == id) {
                    results.push((id, part["content"].to_string()));
                }
            }
        }
    }
    results.into_iter().map(|(_, text)| text).collect()
}

/// A host the allowlist does not name is put to the person while the command waits for the
/// answer, as the supervisor's question: `n` refuses it (`denied-by-user`); `y` lets it past
/// the question (the proxy then refuses `localhost` for what it resolves to, its own check:
/// `resolves-to-unlisted-address`); `a` does too, and the next command's request for the same
/// host and port goes through without a question. Each answer is in the tool call's audit
/// record. Control: `-p` has no one to ask: the same request is refused at once,
/// `not-in-allowlist`, and nothing is asked.
#[test]
fn an_unlisted_host_is_asked_about_while_the_command_waits() {
    for (answer, refusal, recorded) in [
        ("n", "x-garuda-refused: denied-by-user", "denied"),
        (
            "y",
            "x-garuda-refused: resolves-to-unlisted-address",
            "allowed once",
        ),
    ] {
        let c = Chat::new(vec![fetch_localhost("h1"), Scripted::text("done")]);
        let out = c.chat(&format!("fetch it\n{answer}\n"));
        let stdout = succeeded(&out);
        assert!(
            stdout.contains("? network access localhost:9: the network allowlist does not name it; the command waits for the answer\n"),
            "{stdout}"
        );
        assert_eq!(questions(&stdout), 1, "{stdout}");
        let results = tool_results(&c);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].contains(refusal), "answer {answer}: {results:?}");
        let calls = c.tool_calls();
        let asked: Vec<&Value> = calls
            .iter()
            .filter_map(|e| e["hosts_asked"].as_array())
            .flatten()
            .collect();
        assert_eq!(
            asked,
            vec![&json!({"host": "localhost", "port": 9, "answer": recorded})],
            "{calls:?}"
        );
    }

    // Always, for this session: the second command is not asked.
    let c = Chat::new(vec![
        fetch_localhost("h1"),
        fetch_localhost("h2"),
        Scripted::text("done"),
    ]);
    let out = c.chat("fetch it twice\na\n");
    let stdout = succeeded(&out);
    assert_eq!(questions(&stdout), 1, "{stdout}");
    let results = tool_results(&c);
    assert_eq!(results.len(), 2, "{results:?}");
    for r in &results {
        assert!(
            r.contains("x-garuda-refused: resolves-to-unlisted-address"),
            "{results:?}"
        );
    }
    let answers: Vec<Value> = c
        .tool_calls()
        .iter()
        .filter_map(|e| e["hosts_asked"].as_array())
        .flatten()
        .map(|h| h["answer"].clone())
        .collect();
    assert_eq!(
        answers,
        vec![
            json!("allowed for this session"),
            json!("allowed earlier for this session")
        ]
    );

    // Control: -p asks no one. (With an allowlist, so that the proxy runs: with none, -p's
    // command has no network at all.)
    let c = Chat::new(vec![fetch_localhost("h1"), Scripted::text("done")]);
    std::fs::write(
        c.w.home.join(".garuda/policy.json"),
        r#"{"network": {"allow": ["example.com"]}}"#,
    )
    .unwrap();
    let out = c.chat_with(&["-p", "fetch it"], "y\n");
    let stdout = succeeded(&out);
    assert!(!stdout.contains("network access"), "{stdout}");
    let results = tool_results(&c);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("x-garuda-refused: not-in-allowlist"),
        "{results:?}"
    );
}

/// A command run outside the sandbox is never asked about: it has the host's whole network,
/// so the chat hands it neither a proxy nor the supervisor's question socket (a proxy on the
/// host's loopback that asks would take questions from any local process). Control: the same
/// line in the sandbox gets the asking proxy.
#[test]
fn a_command_outside_the_sandbox_gets_no_asking_proxy() {
    let show = "echo \"proxy=${HTTP_PROXY:-none}\"";
    for (outside, expected) in [(true, "proxy=none"), (false, "proxy=http://")] {
        let c = Chat::new(vec![
            Scripted::reply(vec![Part::ToolUse {
                id: "o1".into(),
                name: "bash".into(),
                input: json!({"command": show, "outside_sandbox": outside}),
            }]),
            Scripted::text("done"),
        ]);
        let out = c.chat("show the proxy\ny\n");
        let stdout = succeeded(&out);
        assert!(!stdout.contains("? network access"), "{stdout}");
        let results = tool_results(&c);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(
            results[0].contains(expected),
            "outside {outside}: {results:?}"
        );
    }
}

/// The session id of each `garuda chat:` header line in `stdout`, in order.
fn session_ids(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("garuda chat: "))
        .filter_map(|l| l.split(", session ").nth(1))
        .filter_map(|rest| rest.split(';').next())
        .map(str::to_string)
        .collect()
}

/// The text of every message of a model request, joined.
fn request_text(body: &Value) -> String {
    body["messages"].to_string()
}

/// `/clear` starts a new session: the next message reaches the model without the earlier
/// ones, under a new session id. `/resume ID` goes back to a session: the next message carries
/// that session's history (the control of `/clear`: the same history is there when it is
/// asked for). `/model REF` goes on in the same session with another model: the next request
/// names it and still carries the history; a model that does not resolve is refused and
/// nothing changes; `/resume` of an unknown id is refused.
#[test]
fn clear_resume_and_model_switch_sessions() {
    let c = Chat::new(vec![
        Scripted::text("one"),
        Scripted::text("two"),
        Scripted::text("three"),
        Scripted::text("four"),
    ]);
    let out = c.chat("first words\n/clear\nsecond words\n");
    let stdout = succeeded(&out);
    let ids = session_ids(&stdout);
    assert_eq!(ids.len(), 2, "{stdout}");
    assert_ne!(ids[0], ids[1]);
    assert!(
        stdout.contains(&format!(
            "garuda: a new session; this one is kept (/resume {} goes back to it)\n",
            ids[0]
        )),
        "{stdout}"
    );
    let requests = c.server.requests();
    assert_eq!(requests.len(), 2);
    assert!(request_text(&requests[0].body).contains("first words"));
    let second = request_text(&requests[1].body);
    assert!(second.contains("second words"), "{second}");
    assert!(!second.contains("first words"), "{second}");

    let input = format!(
        "/resume no-such-session\n/resume {}\nthird words\n/model nosuchprovider/x\n/model anthropic/claude-test-other\nfourth words\n",
        ids[0]
    );
    let out = c.chat(&input);
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("garuda: cannot resume no-such-session: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("garuda: no model nosuchprovider/x: "),
        "{stdout}"
    );
    let ids2 = session_ids(&stdout);
    // A new session at the start, then the resumed one, then the same one with the new model.
    assert_eq!(ids2.len(), 3, "{stdout}");
    assert_eq!(ids2[1], ids[0]);
    assert_eq!(ids2[2], ids[0]);
    let requests = c.server.requests();
    assert_eq!(requests.len(), 4);
    let third = request_text(&requests[2].body);
    assert!(
        third.contains("first words") && third.contains("third words"),
        "{third}"
    );
    assert!(!third.contains("second words"), "{third}");
    let fourth = &requests[3].body;
    assert_eq!(fourth["model"], "claude-test-other", "{fourth}");
    let fourth = request_text(fourth);
    assert!(
        fourth.contains("first words")
            && fourth.contains("third words")
            && fourth.contains("fourth words"),
        "{fourth}"
    );
    assert_ne!(requests[2].body["model"], "claude-test-other");
}
