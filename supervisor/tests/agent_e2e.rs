//! The whole product end to end: the real `garuda -p` (supervisor, proxy, confined agent,
//! broker, staging, audit, session journal) against the scripted model server
//! (`garuda-modelserver`) on loopback, in both wire formats (Anthropic Messages and OpenAI
//! Chat Completions). Each case is a `fn case(dialect)`; `both!` makes one test per dialect.
//!
//! What is shown, and the negative control of each:
//!
//! - the main scenario: the model reads a file, edits it, runs a staged command that changes
//!   a file with `--staged-changes apply`, and finishes; the project, stdout, the journal, the
//!   audit log (`garuda audit verify` VERIFIED, one `tool_call` line per call) and the
//!   server's record of the tool results are as expected; on `landlock` and `bubblewrap`.
//!   Control: the same staged command with `--staged` alone leaves the project unchanged and
//!   the tool result says discarded.
//! - exit codes: 0 done, 1 a 401 and a refusal, 2 `--max-steps 1`, 130 SIGINT during a slow
//!   response (and the agent process is gone afterwards). Each code is the control of the
//!   others: the same setup with a different script gives a different code.
//! - output formats: `json` is one object with Claude Code's fields; `stream-json` only JSON
//!   lines ending with the result; text mode only the model's text on stdout (the activity
//!   lines are on stderr, shown there: the control that they exist at all).
//! - `--resume`: the second run's request holds the first run's messages, then the new
//!   prompt. Control: the first run's requests do not hold the second prompt.
//! - secrets: the provider key is in no `/proc/<pid>/environ` of the agent or of a command
//!   the model runs, nor in the journal, the audit files, stdout or stderr. Controls: the key
//!   is in garuda's own environment and in the server's record of the key header; a marker
//!   variable allowed the same way (`env.allow`) does reach the command. On `landlock` and
//!   `bubblewrap`. A 401 whose body quotes the key does not print it (control: the key the
//!   server got is the quoted one).
//! - concurrency: three `read_file` calls in one response are sent as one batch, run by the
//!   supervisor as one (each audit line says `batch: 3` and when its work began and ended,
//!   printed) and come back in call order.
//!
//! - a provider added in `models.json` (its key and base URL in variables of its own, both
//!   named in `env.allow`): neither reaches the command the model runs, on `landlock` and
//!   `bubblewrap`. Control: the marker named the same way does, and the server got the key.
//! - a project file naming a weaker executor than this machine's strongest (`bubblewrap` where
//!   Landlock runs): `garuda sandbox` refuses it (the control), and so is the model's command
//!   in `-p`; the same file naming `landlock` runs it (the other control).
//! - the host executor (the user policy's `executor`): a command there is not a sandboxed one,
//!   so `-p` asks, is refused, and the command does not run (no file outside the project), as
//!   `garuda policy decide` says (`ask`). Control: with `--allow` for it, the same run does
//!   create the file.
//! - `-p --strict --staged`: the child `garuda sandbox` of a staged command runs under the strict
//!   profile too: a missing `sandbox.writable` path refuses the command (strict does not skip
//!   it). Control: the same run without `--strict` skips the path and runs the command.
//! - a base URL naming `localhost` (as a local server's docs write it) reaches the model: the
//!   proxy lists the name's loopback addresses with it (it refuses a name that resolves to a
//!   loopback address it does not list: what happened before). The unit test
//!   `the_proxy_entry_is_the_base_urls_host_and_port` shows another port stays refused.
//!
//! No timing is asserted: the only waits are the delays the script asks of the server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{garuda, text, World, PROXY_VARS};
use garuda_modelserver::{Dialect, ModelServer, Part, Recorded, Scripted, Stop};
use serde_json::{json, Value};

/// Variables of the test's own environment that would change which model garuda talks to:
/// the providers' own (the list no command gets) and `GARUDA_MODEL`.
fn model_vars() -> impl Iterator<Item = &'static str> {
    garuda_policy::PROVIDER_ENV_DENY
        .iter()
        .copied()
        .chain([garuda_supervisor::models::MODEL_VAR])
}

/// A fresh value, different in each test, so that a hit is this run's and no other.
fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// A tool call part.
fn call(id: &str, name: &str, input: Value) -> Part {
    Part::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

/// A text part.
fn say(text: &str) -> Part {
    Part::Text { text: text.into() }
}

/// One test's world: a project (a git repository with `README.md`), a home whose
/// `.garuda/policy.json` is `policy`, and the scripted server.
struct E2e {
    w: World,
    dialect: Dialect,
    server: ModelServer,
    key: String,
}

impl E2e {
    fn new(suite: &str, dialect: Dialect, script: Vec<Scripted>) -> E2e {
        E2e::with_key(suite, dialect, script, &format!("sk-test-{}", random_hex()))
    }

    fn with_key(suite: &str, dialect: Dialect, script: Vec<Scripted>, key: &str) -> E2e {
        let w = World::new(suite);
        w.git(&["init", "-q"]);
        std::fs::write(w.project.join("README.md"), "hello\nworld\n").unwrap();
        std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
        E2e {
            w,
            dialect,
            server: ModelServer::start(dialect, script).unwrap(),
            key: key.into(),
        }
    }

    /// The user policy (`~/.garuda/policy.json`).
    fn policy(&self, policy: Value) {
        std::fs::write(self.garuda_home().join("policy.json"), policy.to_string()).unwrap();
    }

    fn garuda_home(&self) -> PathBuf {
        self.w.home.join(".garuda")
    }

    /// `garuda ARGS…` in the project with this world's home; for `-p`, the dialect's key and
    /// base URL variables, and for OpenAI `-m openai/…` after `args`.
    fn command(&self, args: &[&str]) -> Command {
        self.command_via(None, args)
    }

    /// [`E2e::command`], started through `wrapper` (a program that execs the rest).
    fn command_via(&self, wrapper: Option<&[&str]>, args: &[&str]) -> Command {
        let mut c = match wrapper {
            Some(w) => {
                let mut c = Command::new(w[0]);
                c.args(&w[1..]).arg(garuda());
                c
            }
            None => Command::new(garuda()),
        };
        c.args(args)
            .current_dir(&self.w.project)
            .env("HOME", &self.w.home)
            .env_remove("GARUDA_HOME")
            .stdin(Stdio::null());
        for v in PROXY_VARS.iter().copied().chain(model_vars()) {
            c.env_remove(v);
        }
        if args.first() == Some(&"-p") {
            match self.dialect {
                Dialect::Anthropic => {
                    c.env("ANTHROPIC_API_KEY", &self.key)
                        .env("ANTHROPIC_BASE_URL", self.server.url());
                }
                Dialect::Openai => {
                    c.env("OPENAI_API_KEY", &self.key)
                        .env("OPENAI_BASE_URL", format!("{}/v1", self.server.url()))
                        .args(["-m", "openai/scripted-model"]);
                }
            }
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// The project's session journals (`garuda sessions --json`), as listed.
    fn sessions(&self) -> Vec<Value> {
        let out = self.run(&["sessions", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// The only session's id.
    fn only_session(&self) -> String {
        let sessions = self.sessions();
        assert_eq!(sessions.len(), 1, "{sessions:?}");
        sessions[0]["id"].as_str().unwrap().to_string()
    }

    /// The records of journal `id`, read from its file.
    fn journal(&self, id: &str) -> Vec<Value> {
        let path = self
            .garuda_home()
            .join("sessions")
            .join(garuda_audit::project_dir_name(&self.w.project))
            .join(format!("{id}.jsonl"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The audit lines of the `garuda -p` session whose journal is `journal_id`, and of the
    /// other sessions of the project (each staged command's `garuda sandbox`), from
    /// `garuda audit list --json` and `garuda audit show --session ID --json`.
    fn audit(&self, journal_id: &str) -> (Vec<Value>, Vec<Value>) {
        let out = self.run(&["audit", "list", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut ours = None;
        let mut others = Vec::new();
        for s in list["sessions"].as_array().unwrap() {
            assert_eq!(s["check"], "verified", "{s}");
            let id = s["session"].as_str().unwrap();
            let out = self.run(&["audit", "show", "--session", id, "--json"]);
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
            let lines = shown["lines"].as_array().unwrap().clone();
            if lines
                .iter()
                .any(|l| l["type"] == "agent_session" && l["event"]["journal"] == journal_id)
            {
                assert!(ours.is_none(), "two audit sessions for {journal_id}");
                ours = Some(lines);
            } else {
                others.push(s.clone());
            }
        }
        (
            ours.unwrap_or_else(|| panic!("no audit session for {journal_id}: {list}")),
            others,
        )
    }

    /// The model requests the server got (the dialect's endpoint only).
    fn model_requests(&self) -> Vec<Recorded> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.entry.is_some())
            .collect()
    }

    /// The first model request carried `key` in the dialect's key header.
    fn assert_key_header(&self, key: &str) {
        let first = &self.model_requests()[0];
        match self.dialect {
            Dialect::Anthropic => assert_eq!(first.header("x-api-key"), Some(key)),
            Dialect::Openai => assert_eq!(
                first.header("authorization"),
                Some(format!("Bearer {key}").as_str())
            ),
        }
    }

    /// The conversation each model request carried.
    fn conversations(&self) -> Vec<Vec<Msg>> {
        self.model_requests()
            .iter()
            .map(|r| conversation(self.dialect, &r.body))
            .collect()
    }

    /// The project's entries other than `.git` and an empty `.garuda` (every sandboxed
    /// command creates it empty when missing, so that the command cannot: docs/policy.md),
    /// sorted.
    fn project_files(&self) -> Vec<String> {
        let settings = self.w.project.join(".garuda");
        if settings.exists() {
            let inside: Vec<_> = std::fs::read_dir(&settings).unwrap().collect();
            assert!(inside.is_empty(), "{inside:?}");
        }
        let mut names: Vec<String> = std::fs::read_dir(&self.w.project)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".git" && n != ".garuda")
            .collect();
        names.sort();
        names
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.w.project.join(name)).unwrap()
    }
}

/// One message of a conversation, the same whichever format carried it.
#[derive(Debug, Clone, PartialEq)]
enum Msg {
    /// The user's words.
    User(String),
    /// The model's text (blocks joined by a blank line) and tool calls `(id, name, input)`.
    Assistant {
        text: String,
        calls: Vec<(String, String, Value)>,
    },
    /// Tool results `(tool_use_id, content)`, in the order sent.
    Results(Vec<(String, String)>),
}

fn assistant(text: &str, calls: &[(&str, &str, Value)]) -> Msg {
    Msg::Assistant {
        text: text.into(),
        calls: calls
            .iter()
            .map(|(id, name, input)| (id.to_string(), name.to_string(), input.clone()))
            .collect(),
    }
}

/// Messages in Anthropic's shape (`role`, `content` blocks): a request body's `messages` and
/// the journal's `message` records alike.
fn anthropic_messages<'a>(messages: impl Iterator<Item = &'a Value>) -> Vec<Msg> {
    let mut out = Vec::new();
    for m in messages {
        let blocks = m["content"].as_array().cloned().unwrap_or_else(|| {
            // A plain string content is one text block.
            vec![json!({"type": "text", "text": m["content"]})]
        });
        let texts: Vec<String> = blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .map(|b| b["text"].as_str().unwrap().to_string())
            .collect();
        if m["role"] == "assistant" {
            out.push(Msg::Assistant {
                text: texts.join("\n\n"),
                calls: blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| {
                        (
                            b["id"].as_str().unwrap().to_string(),
                            b["name"].as_str().unwrap().to_string(),
                            b["input"].clone(),
                        )
                    })
                    .collect(),
            });
        } else {
            let results: Vec<(String, String)> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| {
                    let content = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (b["tool_use_id"].as_str().unwrap().to_string(), content)
                })
                .collect();
            if !results.is_empty() {
                out.push(Msg::Results(results));
            }
            if !texts.is_empty() {
                out.push(Msg::User(texts.join("\n\n")));
            }
        }
    }
    out
}

/// The conversation a request body carries (the system prompt left out).
fn conversation(dialect: Dialect, body: &Value) -> Vec<Msg> {
    let messages = body["messages"].as_array().expect("messages");
    match dialect {
        Dialect::Anthropic => anthropic_messages(messages.iter()),
        Dialect::Openai => {
            let mut out: Vec<Msg> = Vec::new();
            for m in messages {
                match m["role"].as_str().unwrap() {
                    "system" => {}
                    "user" => out.push(Msg::User(m["content"].as_str().unwrap().into())),
                    "tool" => {
                        let r = (
                            m["tool_call_id"].as_str().unwrap().to_string(),
                            m["content"].as_str().unwrap().to_string(),
                        );
                        match out.last_mut() {
                            Some(Msg::Results(rs)) => rs.push(r),
                            _ => out.push(Msg::Results(vec![r])),
                        }
                    }
                    "assistant" => out.push(Msg::Assistant {
                        text: m["content"].as_str().unwrap_or("").to_string(),
                        calls: m["tool_calls"]
                            .as_array()
                            .map(|calls| {
                                calls
                                    .iter()
                                    .map(|c| {
                                        (
                                            c["id"].as_str().unwrap().to_string(),
                                            c["function"]["name"].as_str().unwrap().to_string(),
                                            serde_json::from_str(
                                                c["function"]["arguments"].as_str().unwrap(),
                                            )
                                            .unwrap(),
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                    }),
                    other => panic!("unexpected role {other} in {m}"),
                }
            }
            out
        }
    }
}

/// The tool results a conversation ends with.
fn last_results(conversation: &[Msg]) -> Vec<(String, String)> {
    match conversation.last() {
        Some(Msg::Results(r)) => r.clone(),
        other => panic!("the request does not end with tool results: {other:?}"),
    }
}

/// Each request's conversation is the previous one's, then what came after: nothing is
/// dropped, reordered or rewritten between steps.
fn assert_grows(conversations: &[Vec<Msg>]) {
    for pair in conversations.windows(2) {
        assert!(
            pair[1].len() > pair[0].len() && pair[1][..pair[0].len()] == pair[0][..],
            "a request does not extend the one before:\n{:#?}\n{:#?}",
            pair[0],
            pair[1]
        );
    }
}

/// The journal's conversation (its `message` records, in order).
fn journal_conversation(records: &[Value]) -> Vec<Msg> {
    anthropic_messages(
        records
            .iter()
            .filter(|r| r["type"] == "message")
            .map(|r| &r["message"]),
    )
}

fn assert_verified(e: &E2e) {
    let out = e.run(&["audit", "verify"]);
    let report = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.starts_with("audit log: VERIFIED (exit 0)\n"),
        "{report}"
    );
}

macro_rules! both {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[test]
                fn anthropic() {
                    super::$case(garuda_modelserver::Dialect::Anthropic)
                }
                #[test]
                fn openai() {
                    super::$case(garuda_modelserver::Dialect::Openai)
                }
            }
        )*
    };
}

both!(
    main_scenario_reads_edits_runs_staged_and_applies,
    a_staged_change_is_discarded_by_default,
    a_401_exits_1,
    a_401_quoting_the_key_does_not_print_it,
    a_refusal_exits_1,
    max_steps_exits_2,
    sigint_exits_130_and_the_agent_is_gone,
    json_output_is_one_result_object,
    stream_json_is_only_json_lines_ending_with_the_result,
    a_broken_streams_text_is_not_in_the_result,
    resume_continues_with_the_same_messages,
    the_key_reaches_no_environment_journal_audit_or_output,
    three_reads_come_back_in_call_order,
    a_models_json_providers_variables_reach_no_command,
    a_project_file_cannot_weaken_the_sandbox_of_the_agents_commands,
    a_command_on_the_host_executor_is_asked_not_run,
    strict_reaches_a_staged_commands_garuda_sandbox,
    a_localhost_base_url_reaches_the_model,
);

// ---------------------------------------------------------------------------------------------
// 1. The main scenario

const README_LINES: &str = "     1\thello\n     2\tworld\n";

/// The Linux executors a command of the model runs under (the user policy's `executor`).
const EXECUTORS: [&str; 2] = ["landlock", "bubblewrap"];

fn main_scenario_reads_edits_runs_staged_and_applies(d: Dialect) {
    for executor in EXECUTORS {
        main_scenario_on(d, executor);
    }
}

fn main_scenario_on(d: Dialect, executor: &str) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![
                say("I'll read it."),
                call("t1", "read_file", json!({"path": "README.md"})),
            ]),
            Scripted::reply(vec![call(
                "t2",
                "edit_file",
                json!({"path": "README.md", "old": "world", "new": "there"}),
            )]),
            Scripted::reply(vec![call(
                "t3",
                "bash",
                json!({"command": "echo x >> notes.txt"}),
            )]),
            Scripted::text("Done: README says hello there."),
        ],
    );
    // An edit needs a yes, and -p has no one to ask: the user's policy allows this one.
    e.policy(json!({"executor": executor, "permissions": {"allow": ["Edit(README.md)"]}}));
    let out = e.run(&[
        "-p",
        "fix the README",
        "--staged",
        "--staged-changes",
        "apply",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // stdout is the model's text and nothing else (the steps' texts, a blank line between).
    assert_eq!(
        text(&out.stdout),
        "I'll read it.\n\nDone: README says hello there.\n",
        "{stderr}"
    );
    // The activity is on stderr (the control that there was activity to keep off stdout).
    for line in [
        "garuda: read README.md\n",
        "garuda: edit README.md\n",
        "garuda: run echo x >> notes.txt → exit 0\n",
    ] {
        assert!(stderr.contains(line), "{line:?} not in {stderr}");
    }

    // The project: edited, and the staged command's change applied.
    assert_eq!(e.project_files(), ["README.md", "notes.txt"]);
    assert_eq!(e.read("README.md"), "hello\nthere\n");
    assert_eq!(e.read("notes.txt"), "x\n");

    // The server: four requests, each the one before plus the last step, each ending with
    // the result of the call the previous response made.
    let convs = e.conversations();
    assert_eq!(convs.len(), 4, "{convs:#?}");
    assert_grows(&convs);
    assert_eq!(convs[0], [Msg::User("fix the README".into())]);
    assert_eq!(
        last_results(&convs[1]),
        [("t1".to_string(), README_LINES.to_string())]
    );
    assert_eq!(
        last_results(&convs[2]),
        [(
            "t2".to_string(),
            "Edited README.md: 1 replacement; the file is now 12 bytes.".to_string()
        )]
    );
    let r3 = last_results(&convs[3]);
    assert_eq!(r3.len(), 1);
    assert_eq!(r3[0].0, "t3");
    for part in [
        "added     notes.txt",
        "+x\n",
        "garuda: applied: 1 file written, 0 files deleted\n",
        "[exit code 0]",
        "[staged change: the change (if any) was applied to the project]",
    ] {
        assert!(r3[0].1.contains(part), "{part:?} not in {}", r3[0].1);
    }

    // The journal: exactly the conversation, in order, then the final answer and the end.
    let id = e.only_session();
    let journal = e.journal(&id);
    let mut expected = convs[3].clone();
    expected.push(assistant("Done: README says hello there.", &[]));
    assert_eq!(journal_conversation(&journal), expected);
    assert_eq!(
        expected[1],
        assistant(
            "I'll read it.",
            &[("t1", "read_file", json!({"path": "README.md"}))]
        )
    );
    let end = journal.last().unwrap();
    assert_eq!(end["type"], "turn_end", "{end}");
    assert_eq!(end["reason"], "done", "{end}");
    assert_eq!(end["steps"], 4, "{end}");

    // The audit log verifies and holds each call, in order, with its decision.
    assert_verified(&e);
    let (lines, others) = e.audit(&id);
    let calls: Vec<(String, String, String, String)> = lines
        .iter()
        .filter(|l| l["type"] == "tool_call")
        .map(|l| {
            let ev = &l["event"];
            let s = |k: &str| ev[k].as_str().unwrap_or_default().to_string();
            (s("tool"), s("target"), s("verdict"), s("answer"))
        })
        .collect();
    // A read alone in its step is not a batch (the control of the batch test below).
    assert!(lines
        .iter()
        .filter(|l| l["type"] == "tool_call")
        .all(|l| l["event"].get("batch").is_none()));
    let row = |a: &str, b: &str, c: &str, d: &str| (a.into(), b.into(), c.into(), d.into());
    assert_eq!(
        calls,
        [
            row("read_file", "README.md", "allow", "file_text"),
            row("edit_file", "README.md", "allow", "written"),
            row(
                "run_command",
                "echo x >> notes.txt",
                "allow",
                "command_done"
            ),
        ]
    );
    let bash = lines
        .iter()
        .find(|l| l["event"]["tool"] == "run_command")
        .unwrap();
    assert_eq!(bash["event"]["exit_code"], 0, "{bash}");
    let turn_end = lines.iter().find(|l| l["type"] == "turn_end").unwrap();
    assert_eq!(turn_end["event"]["reason"], "done", "{turn_end}");
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"session_start"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"seal"), "{kinds:?}");
    // The staged command ran as its own `garuda sandbox` session, which applied its change.
    assert_eq!(others.len(), 1, "{others:?}");
    assert_eq!(others[0]["staged"], "applied", "{}", others[0]);
    assert_eq!(others[0]["executor"], executor, "{}", others[0]);
    assert_eq!(
        others[0]["command"],
        json!(["/bin/sh", "-c", "echo x >> notes.txt"]),
        "{}",
        others[0]
    );
}

// ---------------------------------------------------------------------------------------------
// 2. The default for a staged change: discard

fn a_staged_change_is_discarded_by_default(d: Dialect) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![call(
                "t1",
                "bash",
                json!({"command": "echo x >> notes.txt"}),
            )]),
            Scripted::text("Noted."),
        ],
    );
    let out = e.run(&["-p", "take a note", "--staged"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Noted.\n");
    // The project did not change (the control: the main scenario's `apply` of this very
    // command writes notes.txt).
    assert_eq!(e.project_files(), ["README.md"]);
    assert_eq!(e.read("README.md"), "hello\nworld\n");
    let convs = e.conversations();
    assert_eq!(convs.len(), 2);
    let r = last_results(&convs[1]);
    assert_eq!(r[0].0, "t1");
    for part in [
        "added     notes.txt",
        "garuda: discarded: the project did not change\n",
        "[exit code 0]",
        "[staged change: the change (if any) was discarded: the project did not change]",
    ] {
        assert!(r[0].1.contains(part), "{part:?} not in {}", r[0].1);
    }
    assert!(!r[0].1.contains("applied"), "{}", r[0].1);
}

// ---------------------------------------------------------------------------------------------
// 3. Exit codes (0 is the main scenario's)

fn a_401_exits_1(d: Dialect) {
    let e = E2e::new("garuda-agent-e2e", d, vec![Scripted::status(401)]);
    let out = e.run(&["-p", "hello"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(text(&out.stdout), "", "{stderr}");
    assert!(
        stderr.contains(
            "garuda: the model's API answered 401: authentication_error: scripted status 401\n"
        ),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("garuda: stopped: model_error\n"),
        "{stderr}"
    );
    // Sent once: a 401 is not retried.
    assert_eq!(e.model_requests().len(), 1);
    assert!(!stderr.contains(&e.key), "{stderr}");
}

/// A provider (or a gateway in front of it) that quotes the rejected key in its error body:
/// the error garuda prints must still not hold it.
fn a_401_quoting_the_key_does_not_print_it(d: Dialect) {
    let key = format!("sk-ant-quoted-{}", random_hex());
    let body = match d {
        Dialect::Anthropic => json!({"type": "error", "error": {
            "type": "authentication_error", "message": format!("invalid x-api-key: {key}")}}),
        Dialect::Openai => json!({"error": {
            "message": format!("Incorrect API key provided: {key}"),
            "type": "invalid_request_error", "code": "invalid_api_key"}}),
    };
    let e = E2e::with_key(
        "garuda-agent-e2e",
        d,
        vec![Scripted::status(401).body(&body.to_string())],
        &key,
    );
    let out = e.run(&["-p", "hello"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("garuda: the model's API answered 401"),
        "{stderr}"
    );
    // Control: the key is the one the server got (and so the one its body quoted).
    let first = &e.model_requests()[0];
    let sent = first
        .header("x-api-key")
        .or(first.header("authorization"))
        .unwrap();
    assert!(sent.ends_with(&key), "{sent}");
    assert!(!stderr.contains(&key), "{stderr}");
    assert!(!contains(&out.stdout, &key));
    for f in files_under(&e.garuda_home()) {
        assert!(
            !contains(&std::fs::read(&f).unwrap(), &key),
            "{}",
            f.display()
        );
    }
}

fn a_refusal_exits_1(d: Dialect) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![Scripted::text("I will not do that.").with_stop(Stop::Refusal)],
    );
    let out = e.run(&["-p", "something bad"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("garuda: stopped: refusal"), "{stderr}");
    assert_eq!(text(&out.stdout), "I will not do that.\n");
}

fn max_steps_exits_2(d: Dialect) {
    let glob = |id: &str| Scripted::reply(vec![call(id, "glob", json!({"pattern": "*.md"}))]);
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![glob("g1"), glob("g2"), glob("g3")],
    );
    let out = e.run(&["-p", "look around", "--max-steps", "1"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("garuda: stopped: max_steps"), "{stderr}");
    assert_eq!(text(&out.stdout), "");
    // One step: one model request, whose call did run.
    assert_eq!(e.model_requests().len(), 1);
    assert!(stderr.contains("garuda: glob *.md\n"), "{stderr}");
}

/// The parent pid of `pid` and its start time (clock ticks since boot), from
/// `/proc/PID/stat`; `None` when it is gone.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (which may hold spaces), in parentheses.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    Some((f[1].parse().ok()?, f[19].parse().ok()?))
}

/// Every process below `root` (children, their children…), found from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?.0)))
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (child, _) in all.iter().filter(|(_, parent)| *parent == p) {
            out.push(*child);
            frontier.push(*child);
        }
    }
    out
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| text(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// The confined agent below garuda (`garuda agent …`) and its start time.
fn agent_below(garuda_pid: u32) -> (u32, u64) {
    let found: Vec<u32> = descendants(garuda_pid)
        .into_iter()
        .filter(|p| cmdline(*p).starts_with("garuda agent "))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "the agent below garuda {garuda_pid}: {:?}",
        descendants(garuda_pid)
            .iter()
            .map(|p| (p, cmdline(*p)))
            .collect::<Vec<_>>()
    );
    (found[0], stat(found[0]).unwrap().1)
}

/// Wait until the server has the `n`-th model request (garuda is then blocked on it).
fn wait_for_request(e: &E2e, n: usize) {
    assert!(
        e.server.wait_until(Duration::from_secs(30), |r| r
            .iter()
            .filter(|r| r.entry.is_some())
            .count()
            >= n),
        "the model request {n} never came: {:?}",
        e.server.requests()
    );
}

fn sigint_exits_130_and_the_agent_is_gone(d: Dialect) {
    // Long enough that only the signal can end the run (the test never waits for it).
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![Scripted::text("too late").delay(60_000)],
    );
    // The SIGINT disposition is inherited: a test run from a shell's background job would
    // hand garuda an ignored SIGINT. `env --default-signal` gives it the default one.
    let child = e
        .command_via(Some(&["env", "--default-signal=INT"]), &["-p", "wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for_request(&e, 1);
    let (agent, agent_start) = agent_below(pid);
    // Every process below garuda (its fork, the sandbox's init, the agent), with its start
    // time: a pid reused after it is gone has another.
    let below: Vec<(u32, u64)> = descendants(pid)
        .into_iter()
        .filter_map(|p| Some((p, stat(p)?.1)))
        .collect();
    assert!(below.contains(&(agent, agent_start)), "{below:?}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        ignored & (1 << (2 - 1)),
        0,
        "garuda ignores SIGINT: {status}"
    );
    let sent = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("garuda: stopped: cancelled"), "{stderr}");
    assert_eq!(text(&out.stdout), "", "{stderr}");
    // The agent, and everything else garuda started, is gone.
    for (p, start) in below {
        assert!(
            stat(p).is_none_or(|(_, now)| now != start),
            "{p} ({}) outlived garuda{}",
            cmdline(p),
            if p == agent { ": it is the agent" } else { "" }
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Output formats (text: the main scenario)

fn json_output_is_one_result_object(d: Dialect) {
    let answer = "The answer is \"42\".\nSee README.md.";
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![
                say("Looking."),
                call("g1", "glob", json!({"pattern": "*.md"})),
            ]),
            Scripted::text(answer),
        ],
    );
    let out = e.run(&["-p", "what is it?", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // Exactly one JSON value, on one line.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["type"], "result", "{v}");
    assert_eq!(v["subtype"], "success", "{v}");
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["result"], format!("Looking.\n\n{answer}"), "{v}");
    assert_eq!(v["session_id"], e.only_session().as_str(), "{v}");
    // No activity line on stdout.
    assert!(!stdout.contains("garuda:"), "{stdout}");
}

fn stream_json_is_only_json_lines_ending_with_the_result(d: Dialect) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![
                say("Looking {\"not\": json}."),
                call("g1", "glob", json!({"pattern": "*.md"})),
            ]),
            Scripted::text("Found README.md."),
        ],
    );
    let out = e.run(&["-p", "find it", "--output-format", "stream-json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with('\n'), "{stdout}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    let id = e.only_session();
    assert!(lines.len() >= 3, "{stdout}");
    assert_eq!(lines[0]["type"], "system", "{stdout}");
    assert_eq!(lines[0]["subtype"], "init", "{stdout}");
    for l in &lines {
        assert_eq!(l["session_id"], id.as_str(), "{l}");
    }
    // The assistant lines carry the text, in order.
    let streamed: String = lines
        .iter()
        .filter(|l| l["type"] == "assistant")
        .flat_map(|l| l["message"]["content"].as_array().unwrap().clone())
        .map(|b| b["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streamed, "Looking {\"not\": json}.Found README.md.");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "result", "{last}");
    assert_eq!(
        last["result"], "Looking {\"not\": json}.\n\nFound README.md.",
        "{last}"
    );
    assert_eq!(
        lines.iter().filter(|l| l["type"] == "result").count(),
        1,
        "{stdout}"
    );
}

/// A stream that breaks after some text is sent again; the `result` holds the answer once.
/// Control: the streamed lines did carry the broken attempt's text (a result built from every
/// delta would start with it), and the `text_retracted` line names exactly its bytes.
fn a_broken_streams_text_is_not_in_the_result(d: Dialect) {
    let answer = "The answer is forty-two, as the README says.";
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::text(answer).pieces(3).cut_after(6),
            Scripted::text(answer).pieces(3),
        ],
    );
    let out = e.run(&["-p", "what is it?", "--output-format", "stream-json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the model's stream broke"),
        "{}",
        text(&out.stderr)
    );
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let streamed: String = lines
        .iter()
        .filter(|l| l["type"] == "assistant")
        .flat_map(|l| l["message"]["content"].as_array().unwrap().clone())
        .map(|b| b["text"].as_str().unwrap().to_string())
        .collect();
    let partial = streamed
        .strip_suffix(answer)
        .unwrap_or_else(|| panic!("{streamed:?}"));
    assert!(
        !partial.is_empty() && answer.starts_with(partial),
        "the broken attempt streamed text first: {streamed:?}"
    );
    let retracted: Vec<&Value> = lines
        .iter()
        .filter(|l| l["subtype"] == "text_retracted")
        .collect();
    assert_eq!(retracted.len(), 1, "{lines:?}");
    assert_eq!(retracted[0]["bytes"], partial.len(), "{lines:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "result", "{last}");
    assert_eq!(last["result"], answer, "{last}");
    assert_eq!(e.model_requests().len(), 2);
}

// ---------------------------------------------------------------------------------------------
// 5. --resume

fn resume_continues_with_the_same_messages(d: Dialect) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![call("t1", "read_file", json!({"path": "README.md"}))]),
            Scripted::text("It says hello world."),
            Scripted::text("Second answer."),
        ],
    );
    let out = e.run(&["-p", "what does README say?"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "It says hello world.\n");
    let first = e.only_session();
    let out = e.run(&["-p", "and in French?", "--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Second answer.\n");
    // The same session, continued.
    assert_eq!(e.only_session(), first);

    let convs = e.conversations();
    assert_eq!(convs.len(), 3);
    let mut expected = convs[1].clone();
    expected.push(assistant("It says hello world.", &[]));
    expected.push(Msg::User("and in French?".into()));
    assert_eq!(convs[2], expected);
    assert_eq!(
        convs[2][..3],
        [
            Msg::User("what does README say?".into()),
            assistant("", &[("t1", "read_file", json!({"path": "README.md"}))]),
            Msg::Results(vec![("t1".into(), README_LINES.into())]),
        ]
    );
    // Control: the first run's requests never carried the second prompt.
    for c in &convs[..2] {
        assert!(!c.contains(&Msg::User("and in French?".into())), "{c:?}");
    }
    // The journal holds both turns.
    let mut whole = expected;
    whole.push(assistant("Second answer.", &[]));
    assert_eq!(journal_conversation(&e.journal(&first)), whole);
}

// ---------------------------------------------------------------------------------------------
// 6. Secrets

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn the_key_reaches_no_environment_journal_audit_or_output(d: Dialect) {
    for executor in EXECUTORS {
        the_key_reaches_nothing_on(d, executor);
    }
}

fn the_key_reaches_nothing_on(d: Dialect, executor: &str) {
    let key = match d {
        Dialect::Anthropic => format!("sk-ant-canary-{}", random_hex()),
        Dialect::Openai => format!("sk-canary-{}", random_hex()),
    };
    let key_var = match d {
        Dialect::Anthropic => "ANTHROPIC_API_KEY",
        Dialect::Openai => "OPENAI_API_KEY",
    };
    let marker = format!("marker-{}", random_hex());
    let e = E2e::with_key(
        "garuda-agent-e2e",
        d,
        vec![
            // The delay holds the run while the test reads the processes' environments.
            Scripted::reply(vec![call(
                "t1",
                "bash",
                json!({"command": "cat /proc/self/environ | tr '\\0' '\\n'"}),
            )])
            .delay(1_000),
            Scripted::text("Checked."),
        ],
        &key,
    );
    // Even named in `env.allow`, the key must not pass; the marker named the same way does.
    e.policy(json!({"executor": executor, "env": {"allow": [key_var, "E2E_MARKER"]}}));
    let child = e
        .command(&["-p", "show me your environment"])
        .env("E2E_MARKER", &marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for_request(&e, 1);

    // Control: garuda's own environment holds the key (the user gave it).
    let own = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        contains(&own, &key),
        "the control: garuda's environ lacks the key"
    );
    // The agent's environment: empty of the key, or not readable at all.
    let (agent, _) = agent_below(pid);
    match std::fs::read(format!("/proc/{agent}/environ")) {
        Ok(environ) => {
            assert!(
                !contains(&environ, &key),
                "the key is in the agent's environment"
            );
            eprintln!("agent environ: readable ({} bytes), no key", environ.len());
        }
        Err(err) => {
            assert_eq!(
                err.raw_os_error(),
                Some(libc::EACCES),
                "the agent's environ is unreadable, and EACCES (the agent is not dumpable) is \
                 the only acceptable reason: {err}"
            );
            eprintln!("agent environ: unreadable (EACCES: the agent is not dumpable), a pass");
        }
    }
    // And every process garuda started that runs another program (the sandbox's init, the
    // agent and its threads' process). garuda's own forks, which have not exec'd, share its
    // image and so its environment block: they are the supervisor, not a child.
    let own_cmdline = cmdline(pid);
    for p in descendants(pid) {
        if cmdline(p) == own_cmdline {
            continue;
        }
        match std::fs::read(format!("/proc/{p}/environ")) {
            Ok(environ) => {
                assert!(
                    !contains(&environ, &key),
                    "the key is in {p} ({})",
                    cmdline(p)
                )
            }
            // Gone since the listing (a short-lived helper) is no environment to check.
            Err(err)
                if err.raw_os_error() == Some(libc::ENOENT)
                    || err.raw_os_error() == Some(libc::ESRCH) => {}
            Err(err) => assert_eq!(
                err.raw_os_error(),
                Some(libc::EACCES),
                "{p} ({}): unreadable only because it is not dumpable: {err}",
                cmdline(p)
            ),
        }
    }

    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Checked.\n");

    // The command's environment, as it printed it for the model.
    let convs = e.conversations();
    assert_eq!(convs.len(), 2);
    let env_out = &last_results(&convs[1])[0].1;
    assert!(env_out.contains("[exit code 0]"), "{env_out}");
    // Control: the command did print its environment, the allowed marker included.
    assert!(
        env_out.contains(&format!("E2E_MARKER={marker}\n")),
        "{env_out}"
    );
    assert!(!env_out.contains(&key), "{env_out}");
    assert!(!env_out.contains(key_var), "{env_out}");

    // Control: the key did reach the model server, in its header.
    e.assert_key_header(&key);

    // Nowhere on disk under garuda's home (journals, audit, register, caches), nor on the
    // outputs.
    let files = files_under(&e.garuda_home());
    assert!(
        files
            .iter()
            .any(|f| f.to_string_lossy().contains("/sessions/")),
        "{files:?}"
    );
    assert!(
        files
            .iter()
            .any(|f| f.to_string_lossy().contains("/audit/")),
        "{files:?}"
    );
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert!(!contains(&bytes, &key), "the key is in {}", f.display());
    }
    assert!(!contains(&out.stdout, &key));
    assert!(!contains(&out.stderr, &key), "{}", text(&out.stderr));
    // And not in the project.
    for f in files_under(&e.w.project) {
        assert!(
            !contains(&std::fs::read(&f).unwrap(), &key),
            "{}",
            f.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Three read-only calls in one response

fn three_reads_come_back_in_call_order(d: Dialect) {
    let e = E2e::new(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![
                call("r1", "read_file", json!({"path": "a.txt"})),
                call("r2", "read_file", json!({"path": "b.txt"})),
                call("r3", "read_file", json!({"path": "c.txt"})),
            ]),
            Scripted::text("Read all three."),
        ],
    );
    // Sizes that differ by orders of magnitude, so that a result sent in completion order
    // rather than call order would likely show.
    std::fs::write(e.w.project.join("a.txt"), "a\n".repeat(400_000)).unwrap();
    std::fs::write(e.w.project.join("b.txt"), "b\n").unwrap();
    std::fs::write(e.w.project.join("c.txt"), "c\n".repeat(200)).unwrap();
    let out = e.run(&["-p", "read a, b and c"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Read all three.\n");
    let convs = e.conversations();
    assert_eq!(convs.len(), 2);
    let results = last_results(&convs[1]);
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["r1", "r2", "r3"]);
    assert!(results[0].1.starts_with("     1\ta\n"), "{}", results[0].1);
    assert_eq!(results[1].1, "     1\tb\n");
    assert!(results[2].1.starts_with("     1\tc\n"), "{}", results[2].1);

    // What the supervisor's records show of the timing (printed, not asserted): the audit
    // line of each call, in the order the broker answered them.
    let id = e.only_session();
    let (lines, _) = e.audit(&id);
    let reads: Vec<&Value> = lines.iter().filter(|l| l["type"] == "tool_call").collect();
    assert_eq!(
        reads
            .iter()
            .map(|l| l["event"]["target"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["a.txt", "b.txt", "c.txt"]
    );
    // The agent sent them as one batch (`more`), and the supervisor ran them as one: each
    // call's record says so and carries when its work began and ended. Printed, not asserted
    // beyond that (no timing is asserted): the large a.txt is still being read when the
    // other two begin.
    for l in &reads {
        assert_eq!(l["event"]["batch"], 3, "{l}");
        let began = l["event"]["began_us"].as_u64().unwrap();
        let ended = l["event"]["ended_us"].as_u64().unwrap();
        assert!(began <= ended, "{l}");
        eprintln!(
            "timing: {} id {} ran {began}..{ended} µs",
            l["event"]["target"], l["event"]["id"]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. A provider of models.json: its variables reach no command

fn a_models_json_providers_variables_reach_no_command(d: Dialect) {
    for executor in EXECUTORS {
        models_json_variables_on(d, executor);
    }
}

fn models_json_variables_on(d: Dialect, executor: &str) {
    let key = format!("gw-canary-{}", random_hex());
    let marker = format!("marker-{}", random_hex());
    let e = E2e::with_key(
        "garuda-agent-e2e",
        d,
        vec![
            Scripted::reply(vec![call(
                "t1",
                "bash",
                json!({"command": "cat /proc/self/environ | tr '\\0' '\\n'"}),
            )]),
            Scripted::text("Checked."),
        ],
        &key,
    );
    let (api, url) = match d {
        Dialect::Anthropic => ("anthropic_messages", e.server.url()),
        Dialect::Openai => ("openai_chat", format!("{}/v1", e.server.url())),
    };
    std::fs::write(
        e.garuda_home().join("models.json"),
        json!({"providers": {"gateway": {
            "api": api,
            "base_url": "http://127.0.0.1:9/unused",
            "base_url_env": "E2E_GATEWAY_URL",
            "key_env": "E2E_GATEWAY_KEY",
        }}})
        .to_string(),
    )
    .unwrap();
    // Named in `env.allow`, as a user might to pass them on: they still must not pass.
    e.policy(json!({"executor": executor,
                    "env": {"allow": ["E2E_GATEWAY_URL", "E2E_GATEWAY_KEY", "E2E_MARKER"]}}));
    // `-m` first: the harness adds the built-in providers' variables only after `-p`.
    let out = e
        .command(&[
            "-m",
            "gateway/scripted-model",
            "-p",
            "show me your environment",
        ])
        .env("E2E_GATEWAY_URL", &url)
        .env("E2E_GATEWAY_KEY", &key)
        .env("E2E_MARKER", &marker)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{executor}: {}",
        text(&out.stderr)
    );
    let convs = e.conversations();
    assert_eq!(convs.len(), 2, "{executor}");
    let env_out = &last_results(&convs[1])[0].1;
    assert!(env_out.contains("[exit code 0]"), "{executor}: {env_out}");
    // Control: the command printed its environment, the marker allowed the same way included.
    assert!(
        env_out.contains(&format!("E2E_MARKER={marker}\n")),
        "{executor}: {env_out}"
    );
    for gone in ["E2E_GATEWAY_URL", "E2E_GATEWAY_KEY"] {
        assert!(!env_out.contains(gone), "{executor}: {gone} in {env_out}");
    }
    assert!(!env_out.contains(&key), "{executor}: {env_out}");
    // Control: the provider was the one used, with its key.
    e.assert_key_header(&key);
}

// ---------------------------------------------------------------------------------------------
// 9. A project file cannot weaken the sandbox of the model's commands

fn a_project_file_cannot_weaken_the_sandbox_of_the_agents_commands(d: Dialect) {
    for (named, runs) in [("bubblewrap", false), ("landlock", true)] {
        let e = E2e::new(
            "garuda-agent-e2e",
            d,
            vec![
                Scripted::reply(vec![call(
                    "t1",
                    "bash",
                    json!({"command": "echo $((6 * 7))"}),
                )]),
                Scripted::text("Done."),
            ],
        );
        std::fs::create_dir_all(e.w.project.join(".garuda")).unwrap();
        std::fs::write(
            e.w.project.join(".garuda/settings.json"),
            json!({"executor": named}).to_string(),
        )
        .unwrap();
        let weaker = format!("asks for executor {named}, weaker than");
        // Control: what `garuda sandbox` does with this project file.
        let sandbox = e.run(&["sandbox", "--", "true"]);
        let sandbox_err = text(&sandbox.stderr);
        if runs {
            assert_eq!(sandbox.status.code(), Some(0), "{named}: {sandbox_err}");
        } else {
            assert_eq!(sandbox.status.code(), Some(125), "{named}: {sandbox_err}");
            assert!(sandbox_err.contains(&weaker), "{named}: {sandbox_err}");
        }
        let out = e.run(&["-p", "compute"]);
        assert_eq!(out.status.code(), Some(0), "{named}: {}", text(&out.stderr));
        let convs = e.conversations();
        assert_eq!(convs.len(), 2, "{named}");
        let result = &last_results(&convs[1])[0].1;
        if runs {
            assert!(result.starts_with("42\n"), "{named}: {result}");
            assert!(result.contains("[exit code 0]"), "{named}: {result}");
        } else {
            // The command's own line, not any "42" (the error names a temporary folder,
            // whose random name can hold one).
            assert!(!result.lines().any(|l| l == "42"), "{named}: {result}");
            assert!(result.contains(&weaker), "{named}: {result}");
            assert!(result.contains("[exit code 125]"), "{named}: {result}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 10. The host executor: a command there is asked about, not run as if sandboxed

fn a_command_on_the_host_executor_is_asked_not_run(d: Dialect) {
    for allow in [None, Some("Bash(touch *)")] {
        // Outside the project, where only a command on the host can write.
        let outside = common::base_dir("garuda-agent-e2e");
        let marker = outside.path().join("outside-the-project");
        let touch = format!("touch {}", marker.display());
        let e = E2e::new(
            "garuda-agent-e2e",
            d,
            vec![
                Scripted::reply(vec![call("t1", "bash", json!({ "command": touch }))]),
                Scripted::text("Done."),
            ],
        );
        e.policy(json!({"executor": "host"}));
        // What the engine says of this command under this policy.
        let decided = e.run(&["policy", "decide", "bash", &touch]);
        assert!(
            text(&decided.stdout).starts_with("ask"),
            "{}",
            text(&decided.stdout)
        );
        let mut args = vec!["-p", "touch it"];
        if let Some(rule) = allow {
            args.extend(["--allow", rule]);
        }
        let out = e.run(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{allow:?}: {stderr}");
        let result = &last_results(&e.conversations()[1])[0].1;
        match allow {
            None => {
                assert!(
                    !marker.exists(),
                    "a command ran on the host unasked: {stderr}"
                );
                assert!(
                    stderr.contains("needs a yes and there is no one to ask (-p): refused"),
                    "{stderr}"
                );
                assert!(!result.contains("[exit code"), "{result}");
            }
            // Control: allowed by the person running it, the command does run on the host.
            Some(_) => {
                assert!(marker.exists(), "{stderr}");
                assert!(result.contains("[exit code 0]"), "{result}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 11. `--strict` reaches the child `garuda sandbox` of a staged command

fn strict_reaches_a_staged_commands_garuda_sandbox(d: Dialect) {
    for executor in EXECUTORS {
        for strict in [true, false] {
            let e = E2e::new(
                "garuda-agent-e2e",
                d,
                vec![
                    Scripted::reply(vec![call(
                        "t1",
                        "bash",
                        json!({"command": "echo $((6 * 7))"}),
                    )]),
                    Scripted::text("Done."),
                ],
            );
            let missing = e.w.base.path().join("missing-writable");
            e.policy(json!({"executor": executor,
                            "sandbox": {"writable": [missing.display().to_string()]}}));
            let mut args = vec!["-p", "compute", "--staged"];
            if strict {
                args.push("--strict");
            }
            let out = e.run(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{executor} {strict}: {stderr}");
            let result = &last_results(&e.conversations()[1])[0].1;
            if strict {
                assert!(
                    result.contains(
                        "the strict profile (command-line flag --strict) does not skip a missing writable path"
                    ),
                    "{executor}: {result}"
                );
                // The command's own line (the message names a temporary folder, whose
                // random name can hold "42").
                assert!(!result.lines().any(|l| l == "42"), "{executor}: {result}");
            } else {
                // Control: without the flag the path is skipped and the command runs.
                assert!(result.contains("so it is skipped"), "{executor}: {result}");
                assert!(result.starts_with("42\n"), "{executor}: {result}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 12. A base URL on `localhost`

fn a_localhost_base_url_reaches_the_model(d: Dialect) {
    let e = E2e::new("garuda-agent-e2e", d, vec![Scripted::text("Hi.")]);
    let url = e.server.url().replace("127.0.0.1", "localhost");
    assert!(url.starts_with("http://localhost:"), "{url}");
    let (var, url) = match d {
        Dialect::Anthropic => ("ANTHROPIC_BASE_URL", url),
        Dialect::Openai => ("OPENAI_BASE_URL", format!("{url}/v1")),
    };
    let out = e.command(&["-p", "hello"]).env(var, &url).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Hi.\n");
    e.assert_key_header(&e.key);
}
