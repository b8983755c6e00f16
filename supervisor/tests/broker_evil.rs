//! The evil client against the broker with the real tool host (file tools beneath the held
//! root, commands through `garuda sandbox`, the permission engine, the audit log): every
//! policy refusal is an ordinary error answer the model can read (the conversation goes on),
//! it is in the audit log, `garuda audit verify` passes, and nothing outside the project is
//! read or written. Each refusal has its negative control: the same request in a shape the
//! policy allows does its work (a project file read, a file written, a command run), and a
//! command outside the sandbox runs on the host when the profile is not strict and the user
//! says yes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;

use garuda_audit::{AuditConfig, SessionWriter};
use garuda_ipc::{
    decode, encode, read_frame, AgentFrame, Answer, ErrorCode, Limits, ModelApi, ModelEndpoint,
    Request, Start, StopReason, SupervisorFrame, UiEvent, Usage, PROTOCOL_VERSION,
};
use garuda_policy::engine::{Context, Engine};
use garuda_policy::{Flags, HostEnv, SourceKind};
use garuda_supervisor::broker::host::{Approval, Approver, CommandRunner, SessionTools};
use garuda_supervisor::broker::server::Broker;
use garuda_supervisor::broker::FileTools;
use serde_json::{json, Value};

/// Answers every question with `yes` and counts them.
struct Says {
    yes: bool,
    asked: Arc<Mutex<Vec<Approval>>>,
}

impl Approver for Says {
    fn approve(&mut self, question: &Approval) -> bool {
        self.asked.lock().unwrap().push(question.clone());
        self.yes
    }
}

struct World {
    _w: common::World,
    home: PathBuf,
    project: PathBuf,
    outside: PathBuf,
}

fn world() -> World {
    let w = common::World::new("garuda-broker-evil");
    w.git(&["init", "-q"]);
    let project = w.project.clone();
    let outside = w.base.path().canonicalize().unwrap().join("outside");
    for (path, text) in [
        (project.join("src/a.rs"), "fn a() {}\n"),
        (project.join(".env"), "TOKEN=from-dotenv\n"),
        (project.join(".garuda/settings.json"), "{}\n"),
        (outside.join("secret"), "outside-secret\n"),
        (w.home.join(".ssh/id_ed25519"), "ssh-secret\n"),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::os::unix::fs::symlink(&outside, project.join("out")).unwrap();
    World {
        home: w.home.clone(),
        project,
        outside,
        _w: w,
    }
}

/// What the conversation produced.
struct Run {
    answers: Vec<(u64, Answer)>,
    asked: Vec<Approval>,
    tool_calls: Vec<Value>,
}

/// Runs one turn in which the client sends `requests` (ids 1, 2, …) and reads each answer;
/// the user policy is `user` ("" for none) and every question is answered `yes`. Returns the
/// answers, the questions and the audit log's `tool_call` events, after checking that
/// `garuda audit verify` verifies the log.
fn converse(world: &World, user: &str, yes: bool, requests: Vec<Request>) -> Run {
    let host = HostEnv::from_vars(vec![
        ("HOME".into(), world.home.clone().into_os_string()),
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
    ])
    .unwrap();
    let user_path = world.home.join(".garuda/policy.json");
    let texts: Vec<(SourceKind, &Path, &str)> = if user.is_empty() {
        vec![]
    } else {
        vec![(SourceKind::User, user_path.as_path(), user)]
    };
    let settings =
        garuda_policy::merge_texts(&texts, &host, &world.project, &Flags::default()).unwrap();
    let garuda_home = world.home.join(".garuda");
    // Each conversation's session is found again by this mark.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mark = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let writer = SessionWriter::open(
        &AuditConfig::new(&garuda_home, &world.project),
        json!({"tool": "broker evil-client test", "conversation": mark}),
    )
    .unwrap();
    let audit = common::SharedAudit(Arc::new(Mutex::new(Some(writer))));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (mut client, server) = UnixStream::pair().unwrap();

    let project = world.project.clone();
    let home = world.home.clone();
    let audit2 = audit.clone();
    let asked2 = asked.clone();
    let broker = thread::spawn(move || {
        let engine = Engine::new(&settings, &host, &project);
        let mut approver = Says { yes, asked: asked2 };
        let runner = CommandRunner {
            exe: common::garuda(),
            project: project.clone(),
            env: vec![
                ("HOME".into(), home.into_os_string()),
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ],
            staged: false,
            staged_apply: false,
            ask_staged: false,
            ask_hosts: false,
            in_process: None,
        };
        let mut tools = SessionTools::new(
            FileTools::open(&project).unwrap(),
            engine,
            Context {
                sandbox_available: true,
                ..Context::default()
            },
            settings.is_strict(),
            &mut approver,
            runner,
            None,
        );
        let mut broker = Broker::accept(server, &start(), audit2, Box::new(|| {})).unwrap();
        let summary = broker
            .turn(
                "go",
                &mut tools,
                &mut |_: &UiEvent| {},
                &AtomicBool::new(false),
            )
            .unwrap();
        broker.shutdown().unwrap();
        summary
    });

    send(
        &mut client,
        &AgentFrame::Hello {
            protocol: PROTOCOL_VERSION,
        },
    );
    assert!(matches!(receive(&mut client), SupervisorFrame::Start(_)));
    assert!(matches!(
        receive(&mut client),
        SupervisorFrame::UserPrompt { .. }
    ));
    let mut answers = Vec::new();
    for (i, request) in requests.into_iter().enumerate() {
        let id = i as u64 + 1;
        send(
            &mut client,
            &AgentFrame::Request {
                id,
                request,
                more: false,
            },
        );
        match receive(&mut client) {
            SupervisorFrame::Answer { id: got, answer } => {
                assert_eq!(got, id);
                answers.push((id, answer));
            }
            other => panic!("expected an answer, got {other:?}"),
        }
    }
    send(
        &mut client,
        &AgentFrame::TurnEnd {
            reason: StopReason::Done,
            usage: Usage::default(),
        },
    );
    let summary = broker.join().unwrap();
    assert_eq!(summary.requests, answers.len() as u64);

    let writer = audit.0.lock().unwrap().take().unwrap();
    writer.close(json!({})).unwrap();
    let verify = Command::new(common::garuda())
        .args(["audit", "verify", "--project"])
        .arg(&world.project)
        .env("GARUDA_HOME", &garuda_home)
        .output()
        .unwrap();
    let out = common::text(&verify.stdout);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{out}{}",
        common::text(&verify.stderr)
    );
    // The child `garuda sandbox` runs of a command request are sessions of their own, so
    // find ours by its start.
    let tool_calls = sessions_tool_calls(&world.project, &garuda_home, mark);
    let asked = asked.lock().unwrap().clone();
    Run {
        answers,
        asked,
        tool_calls,
    }
}

/// The `tool_call` events of the broker's own session (found through `audit list --json`).
fn sessions_tool_calls(project: &Path, garuda_home: &Path, mark: u64) -> Vec<Value> {
    let list = Command::new(common::garuda())
        .args(["audit", "list", "--json", "--project"])
        .arg(project)
        .env("GARUDA_HOME", garuda_home)
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&list.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::text(&list.stdout)));
    let sessions = list
        .as_array()
        .or_else(|| list["sessions"].as_array())
        .cloned()
        .unwrap_or_default();
    for s in sessions {
        let id = s["session"]
            .as_str()
            .or_else(|| s["id"].as_str())
            .unwrap_or("");
        let show = Command::new(common::garuda())
            .args(["audit", "show", "--json", "--session", id, "--project"])
            .arg(project)
            .env("GARUDA_HOME", garuda_home)
            .output()
            .unwrap();
        let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
        let lines = shown["lines"].as_array().cloned().unwrap_or_default();
        if lines
            .iter()
            .any(|l| l["event"]["info"]["conversation"] == mark)
        {
            return lines
                .into_iter()
                .filter(|l| l["type"] == "tool_call")
                .map(|l| l["event"].clone())
                .collect();
        }
    }
    panic!("the broker's session is not in the audit list");
}

fn start() -> Start {
    Start {
        model: ModelEndpoint {
            api: ModelApi::AnthropicMessages,
            base_url: "http://127.0.0.1:9".into(),
            model: "test".into(),
            api_key: "sk-test".into(),
            proxy: "127.0.0.1:9".into(),
        },
        limits: Limits {
            max_steps: 5,
            token_budget: 1000,
            max_output_tokens: 100,
        },
        system_prompt: String::new(),
        tools: vec![],
        context_window: None,
        resume: Vec::new(),
    }
}

fn send(client: &mut UnixStream, frame: &AgentFrame) {
    client.write_all(&encode(frame).unwrap()).unwrap();
}

fn receive(client: &mut UnixStream) -> SupervisorFrame {
    let body = read_frame(client).unwrap().unwrap();
    decode(&body).unwrap()
}

fn read(path: &str) -> Request {
    Request::ReadFile {
        path: path.into(),
        offset: None,
        limit: None,
    }
}

fn write(path: &str, content: &str) -> Request {
    Request::WriteFile {
        path: path.into(),
        content: content.into(),
    }
}

fn run(command: &str, outside_sandbox: bool) -> Request {
    Request::RunCommand {
        command: command.into(),
        timeout_secs: Some(60),
        outside_sandbox,
    }
}

fn code(answer: &Answer) -> Option<ErrorCode> {
    match answer {
        Answer::Error { code, .. } => Some(*code),
        _ => None,
    }
}

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
    }
    out.sort();
    out
}

#[test]
fn every_policy_refusal_is_an_answer_and_audited_and_nothing_outside_changes() {
    let w = world();
    let outside_before = snapshot(&w.outside);
    let marker = w.outside.join("ran-on-the-host");
    let requests = vec![
        read("../outside/secret"),
        read("/etc/passwd"),
        read("out/secret"),
        write(".git/hooks/pre-commit", "#!/bin/sh\ntouch /tmp/pwned\n"),
        write(".garuda/settings.json", "{\"sandbox\":{}}\n"),
        read(".env"),
        run(&format!("touch {}", marker.display()), true),
        // Controls in the same conversation: the policy allows these.
        read("src/a.rs"),
        write("src/new.rs", "fn new() {}\n"),
        run("echo made > made-by-command", false),
    ];
    let r = converse(&w, r#"{"profile": "strict"}"#, true, requests);
    let want = [
        Some(ErrorCode::InvalidArgument),
        Some(ErrorCode::InvalidArgument),
        Some(ErrorCode::OutsideProject),
        Some(ErrorCode::Denied),
        Some(ErrorCode::Denied),
        Some(ErrorCode::Denied),
        Some(ErrorCode::Denied),
        None,
        None,
        None,
    ];
    for ((id, answer), want) in r.answers.iter().zip(want) {
        assert_eq!(code(answer), want, "request {id}: {answer:?}");
    }
    match &r.answers[6].1 {
        Answer::Error { message, .. } => assert!(
            message.starts_with("the strict profile runs every command in the sandbox"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // Strict refuses before anything is asked.
    assert!(
        r.asked
            .iter()
            .all(|q| q.tool != "run_command" || !q.target.contains("ran-on-the-host")),
        "{:?}",
        r.asked
    );
    // Nothing outside the project was read into an answer or written.
    for (_, answer) in &r.answers {
        let shown = format!("{answer:?}");
        assert!(
            !shown.contains("outside-secret") && !shown.contains("root:x:0:0"),
            "{shown}"
        );
        assert!(!shown.contains("TOKEN=from-dotenv"), "{shown}");
    }
    assert_eq!(snapshot(&w.outside), outside_before);
    assert!(!marker.exists());
    assert!(!w.project.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(w.project.join(".garuda/settings.json")).unwrap(),
        "{}\n"
    );
    // The controls did their work.
    assert!(matches!(&r.answers[7].1, Answer::FileText { text, .. } if text == "fn a() {}\n"));
    assert_eq!(
        std::fs::read_to_string(w.project.join("src/new.rs")).unwrap(),
        "fn new() {}\n"
    );
    match &r.answers[9].1 {
        Answer::CommandDone(done) => assert_eq!(done.exit_code, Some(0), "{done:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(w.project.join("made-by-command")).unwrap(),
        "made\n"
    );
    // Every request is in the audit log, in order, with what decided it.
    let tools: Vec<&str> = r
        .tool_calls
        .iter()
        .map(|e| e["tool"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "read_file",
            "read_file",
            "read_file",
            "write_file",
            "write_file",
            "read_file",
            "run_command",
            "read_file",
            "write_file",
            "run_command"
        ]
    );
    assert_eq!(r.tool_calls[3]["verdict"], "deny", "{:?}", r.tool_calls[3]);
    assert_eq!(r.tool_calls[6]["verdict"], "deny", "{:?}", r.tool_calls[6]);
    assert_eq!(r.tool_calls[0]["answer"]["error"], "invalid_argument");
}

/// Negative control of the strict refusal: without strict, a command outside the sandbox is
/// asked, and when the user says yes it runs on the host (the marker lands outside the
/// project); when the user says no it is rejected and does not run.
#[test]
fn outside_the_sandbox_without_strict_asks_and_runs_on_the_host_after_a_yes() {
    let w = world();
    let marker = w.outside.join("ran-on-the-host");
    let request = run(&format!("touch {}", marker.display()), true);
    let no = converse(&w, "", false, vec![request.clone()]);
    assert_eq!(
        code(&no.answers[0].1),
        Some(ErrorCode::Rejected),
        "{:?}",
        no.answers
    );
    assert_eq!(no.asked.len(), 1);
    assert!(!marker.exists());
    assert_eq!(no.tool_calls[0]["user_answer"], "no");

    let yes = converse(&w, "", true, vec![request]);
    match &yes.answers[0].1 {
        Answer::CommandDone(done) => assert_eq!(done.exit_code, Some(0), "{done:?}"),
        other => panic!("{other:?}"),
    }
    assert!(marker.exists(), "the command did not run on the host");
    assert_eq!(yes.tool_calls[0]["user_answer"], "yes");
}

/// A command line with a NUL byte can never run as written (no argument carries one): it is
/// an `invalid_argument` answer, audited, and the user is not asked about it. Negative
/// control: the same line without the NUL is asked and runs.
#[test]
fn a_command_line_with_a_nul_byte_is_refused_before_anyone_is_asked() {
    let w = world();
    let r = converse(
        &w,
        "",
        true,
        vec![run("echo a\0b", false), run("echo ab", false)],
    );
    match &r.answers[0].1 {
        Answer::Error { code, message } => {
            assert_eq!(*code, ErrorCode::InvalidArgument, "{message}");
            assert!(message.contains("NUL byte"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        r.asked.iter().all(|q| !q.target.contains('\0')),
        "{:?}",
        r.asked
    );
    assert_eq!(
        r.tool_calls[0]["target"], "echo a\\x00b",
        "{:?}",
        r.tool_calls[0]
    );
    assert_eq!(r.tool_calls[0]["refused_before_policy"], true);
    match &r.answers[1].1 {
        Answer::CommandDone(done) => {
            assert_eq!(done.exit_code, Some(0), "{done:?}");
            assert!(done.output.contains("ab"), "{done:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.tool_calls.len(), 2);
}
