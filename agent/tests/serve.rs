//! `garuda_agent::run`, the agent's side of a session, against a fake supervisor on a socket
//! pair and the scripted model server: how it handles `start`, `user_prompt`, `cancel`,
//! `shutdown` and a channel that closes.
//!
//! # Negative controls
//!
//! - a cancel right behind a prompt cancels that turn (no model call); the cancel before the
//!   first prompt (between turns) does not, and that turn calls the model.
//! - a `start` with a good endpoint runs; the same with a bad base URL ends `run` with a
//!   config error that does not carry the key, and the same without a proxy is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use garuda_agent::RunError;
use garuda_ipc::{
    decode, read_frame, write_frame, AgentFrame, Answer, Limits, ModelApi, ModelEndpoint, Request,
    Start, StopReason, SupervisorFrame, PROTOCOL_VERSION,
};
use garuda_modelserver::{Dialect, ModelServer, Scripted};

const KEY: &str = "sk-garuda-TEST-KEY-serve-0123456789";

/// The model's base URL: a name only the proxy can resolve.
const MODEL: &str = "http://model.invalid";

/// A start whose model is `base_url`, reached through the proxy at `proxy` (the scripted
/// server serves requests in absolute form, as a proxy gets them).
fn start_frame(base_url: &str, proxy: &str) -> SupervisorFrame {
    SupervisorFrame::Start(Start {
        model: ModelEndpoint {
            api: ModelApi::AnthropicMessages,
            base_url: base_url.into(),
            model: "test-model".into(),
            api_key: KEY.into(),
            proxy: proxy.into(),
        },
        limits: Limits {
            max_steps: 10,
            token_budget: 1_000_000,
            max_output_tokens: 1_000,
        },
        system_prompt: "You are a test.".into(),
        tools: Vec::new(),
        context_window: None,
        resume: Vec::new(),
    })
}

/// `run` on a thread of its own, and the supervisor's end of the channel.
fn agent() -> (JoinHandle<Result<(), RunError>>, UnixStream) {
    let (agent, sup) = UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || garuda_agent::run(agent));
    (handle, sup)
}

fn read(sup: &mut UnixStream) -> AgentFrame {
    let body = read_frame(sup)
        .unwrap()
        .expect("the agent closed the channel");
    decode(&body).unwrap()
}

fn expect_hello(sup: &mut UnixStream) {
    match read(sup) {
        AgentFrame::Hello { protocol } => assert_eq!(protocol, PROTOCOL_VERSION),
        other => panic!("expected hello, got {other:?}"),
    }
}

/// Answers the agent's requests (journal appends) until its `turn_end`; returns its reason.
fn until_turn_end(sup: &mut UnixStream) -> StopReason {
    loop {
        match read(sup) {
            AgentFrame::Request {
                id,
                request: Request::JournalAppend { .. },
                ..
            } => write_frame(
                sup,
                &SupervisorFrame::Answer {
                    id,
                    answer: Answer::Stored,
                },
            )
            .unwrap(),
            AgentFrame::Request { request, .. } => panic!("no tool is scripted: {request:?}"),
            AgentFrame::Ui { .. } => {}
            AgentFrame::TurnEnd { reason, .. } => return reason,
            AgentFrame::Hello { .. } => panic!("a second hello"),
        }
    }
}

#[test]
fn a_cancel_right_behind_a_prompt_cancels_that_turn() {
    let server = ModelServer::start(
        Dialect::Anthropic,
        vec![
            Scripted::text("first answer"),
            Scripted::text("second answer"),
        ],
    )
    .unwrap();
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    write_frame(&mut sup, &start_frame(MODEL, &server.proxy())).unwrap();

    // Control: a cancel between turns (before the prompt) is not the next turn's.
    write_frame(&mut sup, &SupervisorFrame::Cancel).unwrap();
    let prompt = |text: &str| SupervisorFrame::UserPrompt { text: text.into() };
    write_frame(&mut sup, &prompt("first")).unwrap();
    assert_eq!(until_turn_end(&mut sup), StopReason::Done);
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        server.requests()[0].target,
        "http://model.invalid/v1/messages"
    );

    // Ctrl-C as the turn starts: the cancel is written right behind the prompt, so the
    // agent's reader has both before its loop takes the prompt. The turn is cancelled
    // before it calls the model.
    write_frame(&mut sup, &prompt("second")).unwrap();
    write_frame(&mut sup, &SupervisorFrame::Cancel).unwrap();
    assert_eq!(until_turn_end(&mut sup), StopReason::Cancelled);
    assert_eq!(
        server.requests().len(),
        1,
        "the cancelled turn called the model"
    );

    write_frame(&mut sup, &SupervisorFrame::Shutdown).unwrap();
    handle.join().unwrap().unwrap();
}

#[test]
fn shutdown_or_a_closed_channel_ends_the_session() {
    // Shutdown instead of start: the session ends before it begins, cleanly.
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    write_frame(&mut sup, &SupervisorFrame::Shutdown).unwrap();
    handle.join().unwrap().unwrap();

    // The channel closed instead of start: an error that says so.
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    drop(sup);
    match handle.join().unwrap() {
        Err(RunError::NoStart(got)) => assert!(got.starts_with("Closed("), "{got}"),
        other => panic!("{other:?}"),
    }

    // The channel closed between turns: the session is over, cleanly.
    let server = ModelServer::start(Dialect::Anthropic, vec![]).unwrap();
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    write_frame(&mut sup, &start_frame(MODEL, &server.proxy())).unwrap();
    drop(sup);
    handle.join().unwrap().unwrap();
    assert!(server.requests().is_empty());
}

#[test]
fn a_start_with_a_bad_endpoint_ends_run_without_the_key() {
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    write_frame(&mut sup, &start_frame("ftp://model.invalid", "127.0.0.1:9")).unwrap();
    let e = handle.join().unwrap().unwrap_err();
    assert!(matches!(e, RunError::Model(_)), "{e:?}");
    let shown = format!("{e} / {e:?}");
    assert!(shown.contains("http:// or https://"), "{shown}");
    assert!(
        !shown.contains("TEST-KEY"),
        "the key is in an error: {shown}"
    );
    // Control: the same start with a good base URL runs (the test above).
}

#[test]
fn a_start_without_a_proxy_is_refused_not_tried_directly() {
    // The model server would answer a direct request (the base URL is its own).
    let server = ModelServer::start(Dialect::Anthropic, vec![Scripted::text("direct")]).unwrap();
    let (handle, mut sup) = agent();
    expect_hello(&mut sup);
    write_frame(&mut sup, &start_frame(&server.url(), "  ")).unwrap();
    let e = handle.join().unwrap().unwrap_err();
    assert!(matches!(e, RunError::NoProxy), "{e:?}");
    assert!(server.requests().is_empty());
    // Control: the same session with the proxy runs (`a_cancel_right_behind_a_prompt…`).
}
