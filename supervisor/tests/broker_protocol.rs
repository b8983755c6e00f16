//! The broker against an "evil client": a test that speaks the wire protocol directly,
//! bypassing the agent's own client code, and breaks it in every way the state table and the
//! codec name. Each violation must stop the conversation (the agent killed, the socket
//! closed), be written to the session's audit log, and leave a log that `garuda audit verify`
//! still verifies. Negative control: a client that keeps the protocol is served to the end,
//! never killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use garuda_audit::{AuditConfig, SessionWriter};
use garuda_ipc::{
    decode, encode, read_frame, AgentFrame, Answer, Limits, ModelApi, ModelEndpoint, Request,
    Start, StopReason, SupervisorFrame, UiEvent, Usage, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use garuda_supervisor::broker::server::{AuditSink, Broker, BrokerError, ToolHost};
use garuda_supervisor::broker::state::State;
use serde_json::{json, Value};

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

/// Answers every request with a fixed text; records what it was asked.
struct EchoTools(Vec<Request>);

impl ToolHost for EchoTools {
    fn call(&mut self, request: &Request) -> (Answer, Option<Value>) {
        self.0.push(request.clone());
        (
            Answer::FileText {
                text: "hi\n".into(),
                first_line: 1,
                total_lines: 1,
                unchanged: false,
            },
            Some(json!({"tool": "read_file"})),
        )
    }
}

struct World {
    _w: common::World,
    garuda_home: std::path::PathBuf,
    project: std::path::PathBuf,
    audit: common::SharedAudit,
}

impl World {
    fn new() -> World {
        let w = common::World::new("garuda-broker-protocol");
        let garuda_home = w.home.join(".garuda");
        let project = w.project.clone();
        let cfg = AuditConfig::new(&garuda_home, &project);
        let writer = SessionWriter::open(&cfg, json!({"tool": "broker test"})).unwrap();
        World {
            _w: w,
            garuda_home,
            project,
            audit: common::SharedAudit(Arc::new(std::sync::Mutex::new(Some(writer)))),
        }
    }

    /// Closes the session and runs `garuda audit verify` on it; returns the events of kind
    /// `protocol_violation` (from `garuda audit show --json`).
    fn close_and_verify(&self) -> Vec<Value> {
        let w = self.audit.0.lock().unwrap().take().unwrap();
        w.close(json!({})).unwrap();
        let verify = Command::new(common::garuda())
            .args(["audit", "verify", "--project"])
            .arg(&self.project)
            .env("GARUDA_HOME", &self.garuda_home)
            .output()
            .unwrap();
        let out = common::text(&verify.stdout);
        assert_eq!(
            verify.status.code(),
            Some(0),
            "{out}{}",
            common::text(&verify.stderr)
        );
        assert!(out.starts_with("audit log: VERIFIED"), "{out}");
        let show = Command::new(common::garuda())
            .args(["audit", "show", "--json", "--project"])
            .arg(&self.project)
            .env("GARUDA_HOME", &self.garuda_home)
            .output()
            .unwrap();
        assert_eq!(
            show.status.code(),
            Some(0),
            "{}",
            common::text(&show.stderr)
        );
        let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
        shown["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["type"] == "protocol_violation")
            .cloned()
            .collect()
    }
}

/// Runs the broker on one end of a socket pair: accept, then one turn if `turn`. Returns the
/// client's end, the broker's thread and the flag its killer sets.
fn serve(
    world: &World,
    turn: bool,
) -> (
    UnixStream,
    thread::JoinHandle<Result<State, BrokerError>>,
    Arc<AtomicBool>,
) {
    serve_with(world, turn, EchoTools(vec![]))
}

/// [`serve`] with the tool host `tools`.
fn serve_with(
    world: &World,
    turn: bool,
    mut tools: impl ToolHost + Send + 'static,
) -> (
    UnixStream,
    thread::JoinHandle<Result<State, BrokerError>>,
    Arc<AtomicBool>,
) {
    let (client, server) = UnixStream::pair().unwrap();
    let killed = Arc::new(AtomicBool::new(false));
    let k = killed.clone();
    let audit = world.audit.clone();
    let handle = thread::spawn(move || {
        let kill = Box::new(move || k.store(true, Ordering::SeqCst));
        let mut broker = Broker::accept(server, &start(), audit, kill)?;
        if turn {
            let cancel = AtomicBool::new(false);
            broker.turn("go", &mut tools, &mut |_: &UiEvent| {}, &cancel)?;
        }
        Ok(broker.state())
    });
    (client, handle, killed)
}

fn send(client: &mut UnixStream, frame: &AgentFrame) {
    client.write_all(&encode(frame).unwrap()).unwrap();
}

fn receive(client: &mut UnixStream) -> SupervisorFrame {
    let body = read_frame(client).unwrap().unwrap();
    decode(&body).unwrap()
}

fn hello() -> AgentFrame {
    AgentFrame::Hello {
        protocol: PROTOCOL_VERSION,
    }
}

fn read_file(id: u64, path: &str) -> AgentFrame {
    AgentFrame::Request {
        id,
        more: false,
        request: Request::ReadFile {
            path: path.into(),
            offset: None,
            limit: None,
        },
    }
}

/// Opens the conversation: hello, start, and (for a turn) the prompt.
fn open(client: &mut UnixStream, turn: bool) {
    send(client, &hello());
    assert!(matches!(receive(client), SupervisorFrame::Start(_)));
    if turn {
        assert!(matches!(
            receive(client),
            SupervisorFrame::UserPrompt { .. }
        ));
    }
}

/// The broker stopped with a violation naming `reason`, killed the agent and closed the
/// channel.
fn assert_violation(
    name: &str,
    mut client: UnixStream,
    handle: thread::JoinHandle<Result<State, BrokerError>>,
    killed: &AtomicBool,
    reason: &str,
) {
    let result = handle.join().unwrap();
    match result {
        Err(BrokerError::Violation { reason: r, .. }) => {
            assert!(r.contains(reason), "{name}: {r}")
        }
        other => panic!("{name}: expected a violation, got {other:?}"),
    }
    assert!(
        killed.load(Ordering::SeqCst),
        "{name}: the agent was not killed"
    );
    let mut rest = Vec::new();
    // The socket is closed: whatever was in flight, then the end.
    let _ = client.read_to_end(&mut rest);
    let after = client.write_all(b"x");
    assert!(after.is_err(), "{name}: the channel is still open");
}

/// What an evil client does to its end of the channel.
type Attack = Box<dyn Fn(&mut UnixStream)>;

#[test]
fn every_protocol_violation_stops_the_agent_and_is_audited() {
    let world = World::new();
    let over = u32::try_from(MAX_FRAME_BYTES + 1).unwrap().to_be_bytes();
    let cases: Vec<(&str, bool, Attack, &str)> = vec![
        (
            "a request before hello",
            false,
            Box::new(|c: &mut UnixStream| send(c, &read_file(1, "a"))),
            "a request before hello",
        ),
        (
            "a frame over the cap",
            false,
            Box::new(move |c: &mut UnixStream| c.write_all(&over).unwrap()),
            "frame length 8388609 is outside",
        ),
        (
            "a zero-length frame",
            false,
            Box::new(|c: &mut UnixStream| c.write_all(&[0, 0, 0, 0]).unwrap()),
            "frame length 0 is outside",
        ),
        (
            "a truncated frame",
            false,
            Box::new(|c: &mut UnixStream| {
                c.write_all(&[0, 0, 0, 100]).unwrap();
                c.write_all(b"{\"type\":").unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
            }),
            "the connection ended inside a frame (8 of 100 bytes)",
        ),
        (
            "invalid JSON",
            false,
            Box::new(|c: &mut UnixStream| {
                let body = b"{\"type\":\"hello\",";
                c.write_all(&u32::try_from(body.len()).unwrap().to_be_bytes())
                    .unwrap();
                c.write_all(body).unwrap();
            }),
            "malformed frame",
        ),
        (
            "another protocol version",
            false,
            Box::new(|c: &mut UnixStream| send(c, &AgentFrame::Hello { protocol: 99 })),
            "protocol 99, expected 1",
        ),
        (
            "an unknown request",
            true,
            Box::new(|c: &mut UnixStream| {
                open(c, true);
                let body =
                    br#"{"type":"request","id":1,"request":{"tool":"fetch_url","url":"http://x"}}"#;
                c.write_all(&u32::try_from(body.len()).unwrap().to_be_bytes())
                    .unwrap();
                c.write_all(body).unwrap();
            }),
            "unknown variant `fetch_url`",
        ),
        (
            "an unknown field",
            true,
            Box::new(|c: &mut UnixStream| {
                open(c, true);
                let body = br#"{"type":"request","id":1,"request":{"tool":"read_file","path":"a","as_root":true}}"#;
                c.write_all(&u32::try_from(body.len()).unwrap().to_be_bytes())
                    .unwrap();
                c.write_all(body).unwrap();
            }),
            "unknown field `as_root`",
        ),
        (
            "a second hello",
            true,
            Box::new(|c: &mut UnixStream| {
                open(c, true);
                send(c, &hello());
            }),
            "a second hello",
        ),
    ];
    let mut expected = 0;
    for (name, turn, attack, reason) in cases {
        let (mut client, handle, killed) = serve(&world, turn);
        attack(&mut client);
        assert_violation(name, client, handle, &killed, reason);
        expected += 1;
    }
    let recorded = world.close_and_verify();
    assert_eq!(recorded.len(), expected, "{recorded:#?}");
}

/// A tool request while idle (after `start`, before any prompt) is a violation too: the
/// broker serves an idle agent through `serve_idle`, and the same table applies.
#[test]
fn a_tool_request_outside_a_turn_is_a_violation() {
    let world = World::new();
    let (mut client, server) = UnixStream::pair().unwrap();
    let killed = Arc::new(AtomicBool::new(false));
    let k = killed.clone();
    let audit = world.audit.clone();
    let handle = thread::spawn(move || {
        let kill = Box::new(move || k.store(true, Ordering::SeqCst));
        let mut broker = Broker::accept(server, &start(), audit, kill)?;
        let mut tools = EchoTools(vec![]);
        broker.serve_idle(&mut tools, std::time::Duration::from_secs(20))?;
        Ok(broker.state())
    });
    open(&mut client, false);
    send(&mut client, &read_file(1, "a"));
    let result = handle.join().unwrap();
    match result {
        Err(BrokerError::Violation { reason, state }) => {
            assert_eq!(state, State::Idle);
            assert_eq!(reason, "a tool request outside a turn");
        }
        other => panic!("expected a violation, got {other:?}"),
    }
    assert!(killed.load(Ordering::SeqCst));
    assert_eq!(world.close_and_verify().len(), 1);
}

/// Negative control: a client that keeps the protocol gets its answers and ends its turn;
/// nobody is killed and no violation is recorded.
#[test]
fn a_client_that_keeps_the_protocol_is_served_to_the_end() {
    let world = World::new();
    let (mut client, handle, killed) = serve(&world, true);
    open(&mut client, true);
    send(
        &mut client,
        &AgentFrame::Ui {
            event: UiEvent::TextDelta { text: "hi".into() },
        },
    );
    send(&mut client, &read_file(7, "src/main.rs"));
    match receive(&mut client) {
        SupervisorFrame::Answer { id: 7, answer } => {
            assert!(matches!(answer, Answer::FileText { .. }), "{answer:?}")
        }
        other => panic!("{other:?}"),
    }
    send(
        &mut client,
        &AgentFrame::TurnEnd {
            reason: StopReason::Done,
            usage: Usage {
                input_tokens: 3,
                output_tokens: 4,
            },
        },
    );
    assert_eq!(handle.join().unwrap().unwrap(), State::Idle);
    assert!(!killed.load(Ordering::SeqCst));
    assert!(world.close_and_verify().is_empty());
}

/// A frame that begins and never ends holds nothing: after the frame deadline it is a
/// violation (a Ctrl-C would otherwise wait forever).
#[test]
fn a_frame_that_stalls_half_sent_is_a_violation() {
    let world = World::new();
    let (mut client, handle, killed) = serve(&world, false);
    client.write_all(&[0, 0, 0, 50, b'{']).unwrap();
    assert_violation(
        "stall",
        client,
        handle,
        &killed,
        "a frame stalled half-sent",
    );
    assert_eq!(world.close_and_verify().len(), 1);
}

/// End to end: the real confined agent (spawned as the supervisor spawns it) says `hello` to
/// the real broker, gets `start`, and exits 0 on `shutdown`; nobody is killed and nothing is
/// recorded as a violation.
#[test]
fn the_confined_agent_and_the_broker_shake_hands() {
    use garuda_supervisor::agent::spawn::{spawn_agent, AgentExit, AgentSpawn};
    let world = World::new();
    let mut agent = spawn_agent(AgentSpawn {
        exe: Some(common::garuda()),
        args: vec![],
        proxy: None,
    })
    .expect("the agent starts (this machine confines it: see garuda doctor)");
    let channel = agent.take_channel().unwrap();
    let agent = Arc::new(std::sync::Mutex::new(agent));
    let killed = Arc::new(AtomicBool::new(false));
    let (k, a) = (killed.clone(), agent.clone());
    let kill = Box::new(move || {
        k.store(true, Ordering::SeqCst);
        let _ = a.lock().unwrap().kill();
    });
    let broker = Broker::accept(channel, &start(), world.audit.clone(), kill).unwrap();
    assert_eq!(broker.state(), State::Idle);
    broker.shutdown().unwrap();
    let agent = Arc::try_unwrap(agent).unwrap().into_inner().unwrap();
    match agent.wait().unwrap() {
        AgentExit::Code(0) => {}
        other => panic!("the agent ended {other:?}"),
    }
    assert!(!killed.load(Ordering::SeqCst));
    assert!(world.close_and_verify().is_empty());
}

/// Answers each request with a text of the next size in its list.
struct BigTools(Vec<usize>);

impl ToolHost for BigTools {
    fn call(&mut self, _: &Request) -> (Answer, Option<Value>) {
        let bytes = self.0.remove(0);
        (
            Answer::FileText {
                text: "x".repeat(bytes),
                first_line: 1,
                total_lines: 1,
                unchanged: false,
            },
            Some(json!({"tool": "read_file"})),
        )
    }
}

/// Waits for the broker's thread, failing (rather than hanging the suite) if it is stuck.
fn finished<T>(handle: &thread::JoinHandle<T>) {
    for _ in 0..600 {
        if handle.is_finished() {
            return;
        }
        thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the broker is still blocked a minute later");
}

/// An agent that asks for a large answer and never reads it would fill the socket's buffer
/// and hold the supervisor in its write forever: the write has the frame deadline, then it
/// is a violation. Negative control: a client that reads gets the same answer whole.
#[test]
fn an_agent_that_never_reads_its_answer_is_a_violation() {
    let world = World::new();
    let big = 4 * 1024 * 1024;
    let (mut client, handle, killed) = serve_with(&world, true, BigTools(vec![big]));
    open(&mut client, true);
    send(&mut client, &read_file(1, "a"));
    // ... and never read again.
    finished(&handle);
    assert_violation(
        "never reads",
        client,
        handle,
        &killed,
        "the agent did not read a frame sent to it",
    );

    let (mut client, handle, killed) = serve_with(&world, true, BigTools(vec![big]));
    open(&mut client, true);
    send(&mut client, &read_file(1, "a"));
    match receive(&mut client) {
        SupervisorFrame::Answer {
            id: 1,
            answer: Answer::FileText { text, .. },
        } => assert_eq!(text.len(), big),
        other => panic!("{other:?}"),
    }
    send(
        &mut client,
        &AgentFrame::TurnEnd {
            reason: StopReason::Done,
            usage: Usage::default(),
        },
    );
    assert_eq!(handle.join().unwrap().unwrap(), State::Idle);
    assert!(!killed.load(Ordering::SeqCst));
    assert_eq!(world.close_and_verify().len(), 1);
}

/// An answer whose frame would be over the cap is not a reason to end the session unaudited:
/// the agent gets a `too_large` error answer and the turn goes on. Control: the next answer,
/// within the cap, arrives whole.
#[test]
fn an_answer_over_the_frame_cap_is_an_error_answer() {
    let world = World::new();
    let tools = BigTools(vec![MAX_FRAME_BYTES, 1024 * 1024]);
    let (mut client, handle, killed) = serve_with(&world, true, tools);
    open(&mut client, true);
    send(&mut client, &read_file(1, "a"));
    match receive(&mut client) {
        SupervisorFrame::Answer {
            id: 1,
            answer: Answer::Error { code, message },
        } => {
            assert_eq!(code, garuda_ipc::ErrorCode::TooLarge);
            assert!(
                message.contains("over the channel's frame cap"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    send(&mut client, &read_file(2, "a"));
    match receive(&mut client) {
        SupervisorFrame::Answer {
            id: 2,
            answer: Answer::FileText { text, .. },
        } => assert_eq!(text.len(), 1024 * 1024),
        other => panic!("{other:?}"),
    }
    send(
        &mut client,
        &AgentFrame::TurnEnd {
            reason: StopReason::Done,
            usage: Usage::default(),
        },
    );
    assert_eq!(handle.join().unwrap().unwrap(), State::Idle);
    assert!(!killed.load(Ordering::SeqCst));
    assert!(world.close_and_verify().is_empty());
}

/// The reason of a violation quotes what the agent sent (an unknown variant's name): it is
/// escaped before it reaches the error the user is shown, so the agent cannot write terminal
/// escapes there. Control: the parser's own message carries the raw escape.
#[test]
fn a_violation_reason_carries_no_terminal_escape() {
    let world = World::new();
    let body = br#"{"type":"request","id":1,"request":{"tool":"\u001b]0;owned\u0007"}}"#;
    let raw = decode::<AgentFrame>(body).unwrap_err().to_string();
    assert!(raw.contains('\u{1b}'), "{raw:?}");
    let (mut client, handle, killed) = serve(&world, true);
    open(&mut client, true);
    client
        .write_all(&u32::try_from(body.len()).unwrap().to_be_bytes())
        .unwrap();
    client.write_all(body).unwrap();
    let result = handle.join().unwrap();
    match &result {
        Err(e @ BrokerError::Violation { reason, .. }) => {
            assert!(reason.contains("unknown variant"), "{reason}");
            assert!(!reason.contains(['\u{1b}', '\u{7}']), "{reason:?}");
            assert!(!e.to_string().contains('\u{1b}'), "{e}");
        }
        other => panic!("expected a violation, got {other:?}"),
    }
    assert!(killed.load(Ordering::SeqCst));
    assert_eq!(world.close_and_verify().len(), 1);
}

/// The session's audit log, whose sync fails (a full or failing disk) when `fail` is set.
#[derive(Clone)]
struct SyncFails {
    log: common::SharedAudit,
    fail: bool,
}

impl AuditSink for SyncFails {
    fn record(&mut self, kind: &str, event: Value) -> Result<(), String> {
        self.log.record(kind, event)
    }

    fn make_durable(&mut self) -> Result<(), String> {
        if self.fail {
            return Err("fdatasync: no space left on device".into());
        }
        self.log.make_durable()
    }
}

/// A command's intent is recorded before the tools see the request, and its sync is the
/// command's release: when the sync fails the command never reaches the tools and the broker
/// stops (nothing runs unrecorded). Control: with a working sync the same request is run.
#[test]
fn a_command_whose_intent_cannot_be_made_durable_never_runs() {
    for fail in [true, false] {
        let world = World::new();
        let (mut client, server) = UnixStream::pair().unwrap();
        let audit = SyncFails {
            log: world.audit.clone(),
            fail,
        };
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = ran.clone();
        let handle = thread::spawn(move || {
            struct Recording(Arc<std::sync::Mutex<Vec<Request>>>);
            impl ToolHost for Recording {
                fn call(&mut self, request: &Request) -> (Answer, Option<Value>) {
                    self.0.lock().unwrap().push(request.clone());
                    (Answer::Stored, None)
                }
            }
            let mut broker = Broker::accept(server, &start(), audit, Box::new(|| {}))?;
            let cancel = AtomicBool::new(false);
            broker.turn("go", &mut Recording(seen), &mut |_: &UiEvent| {}, &cancel)?;
            Ok::<_, BrokerError>(broker.state())
        });
        open(&mut client, true);
        send(
            &mut client,
            &AgentFrame::Request {
                id: 3,
                more: false,
                request: Request::RunCommand {
                    command: "touch x".into(),
                    timeout_secs: None,
                    outside_sandbox: false,
                },
            },
        );
        if fail {
            match handle.join().unwrap() {
                Err(BrokerError::Audit(reason)) => {
                    assert!(reason.contains("no space left"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
            assert!(
                ran.lock().unwrap().is_empty(),
                "the command reached the tools"
            );
        } else {
            assert!(matches!(
                receive(&mut client),
                SupervisorFrame::Answer { id: 3, .. }
            ));
            assert_eq!(ran.lock().unwrap().len(), 1);
            drop(client);
            let _ = handle.join().unwrap();
        }
        // The intent is on record either way, ahead of whatever followed.
        let w = world.audit.0.lock().unwrap().take().unwrap();
        let path = w.path().to_path_buf();
        drop(w);
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.contains("\"command_intent\""), "{log}");
    }
}

/// A tool host that runs a command without calling its release (the intent not made durable
/// first) stops the broker instead of going on. Control: the test above, where a host that
/// calls the release is answered.
#[test]
fn a_command_run_without_its_release_stops_the_broker() {
    let world = World::new();
    let (mut client, server) = UnixStream::pair().unwrap();
    let audit = world.audit.clone();
    let handle = thread::spawn(move || {
        struct SkipsRelease;
        impl ToolHost for SkipsRelease {
            fn call(&mut self, _: &Request) -> (Answer, Option<Value>) {
                (
                    Answer::CommandDone(garuda_ipc::CommandDone {
                        exit_code: Some(0),
                        signal: None,
                        timed_out: false,
                        output: String::new(),
                        output_truncated: false,
                        blocked_hosts: vec![],
                        staged: None,
                    }),
                    None,
                )
            }
            fn call_released(
                &mut self,
                request: &Request,
                _release: garuda_supervisor::executor::Release<'_>,
            ) -> (Answer, Option<Value>) {
                self.call(request)
            }
        }
        let mut broker = Broker::accept(server, &start(), audit, Box::new(|| {}))?;
        let cancel = AtomicBool::new(false);
        broker.turn("go", &mut SkipsRelease, &mut |_: &UiEvent| {}, &cancel)?;
        Ok::<_, BrokerError>(broker.state())
    });
    open(&mut client, true);
    send(
        &mut client,
        &AgentFrame::Request {
            id: 4,
            more: false,
            request: Request::RunCommand {
                command: "true".into(),
                timeout_secs: None,
                outside_sandbox: false,
            },
        },
    );
    match handle.join().unwrap() {
        Err(BrokerError::Audit(reason)) => {
            assert!(
                reason.contains("without its intent being made durable"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}
