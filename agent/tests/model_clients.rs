//! The model clients against the scripted model server (`garuda-modelserver`): real HTTP on
//! loopback, real SSE split into many chunks, both dialects for every case.
//!
//! Each case is an `async fn case(dialect)`; the `both!` macro makes one test per dialect.
//! Timing is never asserted as a speed: where a wait matters (`retry-after`), the check is
//! the server's own record of when the failed response finished and when the next request
//! arrived, a lower bound that only honouring the header can meet.
//!
//! # Negative controls
//!
//! - two cuts then a complete response succeeds; three cuts give up (`stream_retries` = 2).
//! - `retry-after: 1` makes the client wait a second; the same 429 without the header waits
//!   the policy's 10 ms (shown by the notice, which says how long it waits).
//! - 401/400/403/404 are sent once; 500/503/529 are sent again.
//! - the key is on the server's record of the request, so a search for it in the errors would
//!   find it if it were there; a provider body that quotes the key is on the server too.
//! - through the proxy, a name that cannot resolve still works (the proxy gets it); without
//!   the proxy the same client fails to resolve it.
//! - environment proxies: a default `reqwest` client in the same environment does go to the
//!   decoy proxy; ours does not.
//! - a `307` to another server: a default `reqwest` client follows it with the key; ours
//!   does not.
//! - a meter that accepts every attempt lets the retry through; one that refuses the second
//!   ends the request with its own error.
//! - a cancelled request leaves the server with a client gone; the same request not
//!   cancelled completes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::time::Duration;

use garuda_agent::model::{
    Attempt, Block, FinishReason, Message, Model, ModelClient, ModelError, ModelRequest,
    ModelResponse, RetryPolicy, Role, StreamEvent, TokenUsage, Tool,
};
use garuda_ipc::{ModelApi, ModelEndpoint};
use garuda_modelserver::{Dialect, ModelServer, Outcome, Part, Scripted, Stop};
use serde_json::json;

/// A recognisable key: searched for in every error.
const KEY: &str = "sk-garuda-TEST-KEY-d41d8cd98f00b204";

fn api(d: Dialect) -> ModelApi {
    match d {
        Dialect::Anthropic => ModelApi::AnthropicMessages,
        Dialect::Openai => ModelApi::OpenaiChat,
    }
}

/// The base URL a user would write for a server at `root` (OpenAI-compatible ones carry
/// `/v1`, as Ollama's `http://127.0.0.1:11434/v1`).
fn base(d: Dialect, root: &str) -> String {
    match d {
        Dialect::Anthropic => root.to_string(),
        Dialect::Openai => format!("{root}/v1"),
    }
}

fn endpoint(d: Dialect, root: &str, proxy: &str) -> ModelEndpoint {
    ModelEndpoint {
        api: api(d),
        base_url: base(d, root),
        model: "test-model".into(),
        api_key: KEY.into(),
        proxy: proxy.into(),
    }
}

/// Backoff of 10 ms so that a wait of a second can only come from `retry-after`.
fn fast() -> RetryPolicy {
    RetryPolicy {
        backoff_start: Duration::from_millis(10),
        ..RetryPolicy::default()
    }
}

fn client(d: Dialect, server: &ModelServer) -> ModelClient {
    client_with(d, server, fast())
}

/// A direct client of `server` with this retry policy.
fn client_with(d: Dialect, server: &ModelServer, policy: RetryPolicy) -> ModelClient {
    ModelClient::new(&endpoint(d, &server.url(), ""))
        .unwrap()
        .with_retry_policy(policy)
}

fn start(d: Dialect, script: Vec<Scripted>) -> ModelServer {
    ModelServer::start(d, script).unwrap()
}

fn request() -> ModelRequest {
    ModelRequest {
        system: "You are a test.".into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text {
                text: "hello".into(),
            }],
        }],
        tools: vec![Tool {
            name: "read_file".into(),
            description: "Read a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_tokens: 1000,
    }
}

/// What one `complete` call gave.
struct Run {
    result: Result<ModelResponse, ModelError>,
    events: Vec<StreamEvent>,
    attempts: Vec<Attempt>,
}

impl Run {
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t.as_str()),
                StreamEvent::Notice(_) => None,
            })
            .collect()
    }

    fn deltas(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, StreamEvent::TextDelta(_)))
            .count()
    }

    fn notices(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Notice(n) => Some(n.clone()),
                StreamEvent::TextDelta(_) => None,
            })
            .collect()
    }

    fn ok(&self) -> &ModelResponse {
        match &self.result {
            Ok(r) => r,
            Err(e) => panic!("request failed: {e}"),
        }
    }

    fn err(&self) -> &ModelError {
        match &self.result {
            Ok(r) => panic!("request succeeded: {r:?}"),
            Err(e) => e,
        }
    }
}

/// Run one request with a meter that accepts every attempt.
async fn ask(client: &ModelClient) -> Run {
    ask_metered(client, |_| Ok(())).await
}

async fn ask_metered(
    client: &ModelClient,
    mut decide: impl FnMut(Attempt) -> Result<(), ModelError>,
) -> Run {
    let mut events = Vec::new();
    let mut attempts = Vec::new();
    let result = client
        .complete(
            &request(),
            &mut |a| {
                attempts.push(a);
                decide(a)
            },
            &mut |e| events.push(e),
        )
        .await;
    Run {
        result,
        events,
        attempts,
    }
}

fn assert_no_key(e: &ModelError) {
    let shown = format!("{e} / {e:?}");
    assert!(!shown.contains(KEY), "the key is in an error: {shown}");
    assert!(
        !shown.contains("TEST-KEY"),
        "part of the key is in an error: {shown}"
    );
}

fn text_of(r: &ModelResponse) -> String {
    r.content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

macro_rules! both {
    ($case:ident) => {
        mod $case {
            #[tokio::test]
            async fn anthropic() {
                super::$case(garuda_modelserver::Dialect::Anthropic).await
            }
            #[tokio::test]
            async fn openai() {
                super::$case(garuda_modelserver::Dialect::Openai).await
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Streaming, tool calls, usage, headers

const LONG: &str = "The quick brown fox jumps over the lazy dog — twice, with a café ✓.";

async fn text_streams_in_many_chunks(d: Dialect) {
    // Pieces of 3 characters, and the byte stream cut every 5 bytes: events, lines and UTF-8
    // sequences straddle writes.
    let server = start(
        d,
        vec![Scripted::text(LONG)
            .pieces(3)
            .write_bytes(5)
            .with_usage(321, 45)],
    );
    let run = ask(&client(d, &server)).await;
    let response = run.ok();
    assert_eq!(
        response.content,
        vec![Block::Text {
            text: LONG.to_string()
        }]
    );
    assert_eq!(response.finish, FinishReason::EndTurn);
    assert_eq!(
        response.usage,
        Some(TokenUsage {
            input_tokens: 321,
            output_tokens: 45
        })
    );
    assert_eq!(run.text(), LONG);
    assert_eq!(run.deltas(), LONG.chars().count().div_ceil(3));
    assert!(run.notices().is_empty());
    assert_eq!(
        run.attempts,
        vec![Attempt {
            retry: 0,
            previous_unreported: false
        }]
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert!(!r.absolute_form());
    assert_eq!(r.body["model"], "test-model");
    assert_eq!(r.body["stream"], true);
    assert_eq!(r.body["max_tokens"], 1000);
    match d {
        Dialect::Anthropic => {
            assert_eq!(r.path, "/v1/messages");
            assert_eq!(r.header("x-api-key"), Some(KEY));
            assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(r.header("authorization"), None);
            assert_eq!(r.body["system"], "You are a test.");
            assert_eq!(r.body["tools"][0]["input_schema"]["type"], "object");
        }
        Dialect::Openai => {
            assert_eq!(r.path, "/v1/chat/completions");
            assert_eq!(
                r.header("authorization"),
                Some(format!("Bearer {KEY}").as_str())
            );
            assert_eq!(r.header("x-api-key"), None);
            assert_eq!(r.body["stream_options"]["include_usage"], true);
            assert_eq!(r.body["messages"][0]["role"], "system");
            assert_eq!(r.body["tools"][0]["function"]["name"], "read_file");
        }
    }
    assert_eq!(r.outcome, Outcome::Complete);
}
both!(text_streams_in_many_chunks);

async fn an_empty_key_sends_no_auth_header(d: Dialect) {
    let server = start(d, vec![Scripted::text("local")]);
    let mut e = endpoint(d, &server.url(), "");
    e.api_key = String::new();
    let run = ask(&ModelClient::new(&e).unwrap()).await;
    assert_eq!(text_of(run.ok()), "local");
    let r = &server.requests()[0];
    assert_eq!(r.header("x-api-key"), None);
    assert_eq!(r.header("authorization"), None);
    // The control, with a key, is `text_streams_in_many_chunks`.
}
both!(an_empty_key_sends_no_auth_header);

async fn two_tool_calls_with_arguments_in_fragments(d: Dialect) {
    let read = json!({"path": "src/main.rs", "limit": 200});
    let grep = json!({"pattern": "fn main\\(", "path": ".", "glob": ["*.rs", "*.toml"]});
    let server = start(
        d,
        vec![Scripted::reply(vec![
            Part::Text {
                text: "Let me look.".into(),
            },
            Part::ToolUse {
                id: "call_a".into(),
                name: "read_file".into(),
                input: read.clone(),
            },
            Part::ToolUse {
                id: "call_b".into(),
                name: "grep".into(),
                input: grep.clone(),
            },
        ])
        .pieces(4)],
    );
    let run = ask(&client(d, &server)).await;
    let response = run.ok();
    assert_eq!(
        response.content,
        vec![
            Block::Text {
                text: "Let me look.".into()
            },
            Block::ToolUse {
                id: "call_a".into(),
                name: "read_file".into(),
                input: read
            },
            Block::ToolUse {
                id: "call_b".into(),
                name: "grep".into(),
                input: grep
            },
        ]
    );
    assert_eq!(response.finish, FinishReason::ToolUse);
    assert!(response.usage.is_some());
    // Arguments are not display text.
    assert_eq!(run.text(), "Let me look.");
}
both!(two_tool_calls_with_arguments_in_fragments);

async fn malformed_arguments_are_kept_as_text(d: Dialect) {
    let server = start(
        d,
        vec![Scripted::reply(vec![
            Part::RawToolUse {
                id: "call_bad".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"src/ma".into(),
            },
            Part::RawToolUse {
                id: "call_good".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"ok\"}".into(),
            },
        ])],
    );
    let response = ask(&client(d, &server)).await.ok().clone();
    assert_eq!(
        response.content,
        vec![
            Block::ToolUse {
                id: "call_bad".into(),
                name: "read_file".into(),
                input: serde_json::Value::String("{\"path\": \"src/ma".into()),
            },
            // Control: well-formed arguments in the same response parse.
            Block::ToolUse {
                id: "call_good".into(),
                name: "read_file".into(),
                input: json!({"path": "ok"}),
            },
        ]
    );
}
both!(malformed_arguments_are_kept_as_text);

async fn usage_reported_and_not(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::text("counted").with_usage(7, 3),
            Scripted::text("not counted").without_usage(),
        ],
    );
    let c = client(d, &server);
    assert_eq!(
        ask(&c).await.ok().usage,
        Some(TokenUsage {
            input_tokens: 7,
            output_tokens: 3
        })
    );
    let second = ask(&c).await;
    assert_eq!(second.ok().usage, None);
    assert_eq!(text_of(second.ok()), "not counted");
}
both!(usage_reported_and_not);

async fn finish_reasons_map(d: Dialect) {
    let mut cases = vec![
        (Stop::EndTurn, FinishReason::EndTurn),
        (Stop::StopSequence, FinishReason::EndTurn),
        (Stop::MaxTokens, FinishReason::MaxTokens),
        (Stop::Refusal, FinishReason::Refusal),
    ];
    if d == Dialect::Anthropic {
        // OpenAI has no pause_turn.
        cases.push((Stop::PauseTurn, FinishReason::PauseTurn));
    }
    let server = start(
        d,
        cases
            .iter()
            .map(|(stop, _)| Scripted::text("cut here").with_stop(*stop))
            .collect(),
    );
    let c = client(d, &server);
    for (stop, want) in cases {
        let run = ask(&c).await;
        assert_eq!(run.ok().finish, want, "{stop:?}");
        assert_eq!(text_of(run.ok()), "cut here");
    }
    let requests = server.requests();
    let sent: Vec<_> = requests.iter().map(|r| r.entry).collect();
    assert_eq!(sent, (0..requests.len()).map(Some).collect::<Vec<_>>());
}
both!(finish_reasons_map);

// ---------------------------------------------------------------------------------------------
// Broken streams

async fn a_cut_stream_is_sent_again_and_only_the_complete_response_kept(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::text("this attempt breaks in the middle").cut_after(5),
            Scripted::text("and so does this one").cut_after(5),
            Scripted::text("the complete answer"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    assert_eq!(
        run.ok().content,
        vec![Block::Text {
            text: "the complete answer".into()
        }]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].outcome, Outcome::Cut);
    assert_eq!(requests[1].outcome, Outcome::Cut);
    assert_eq!(requests[2].outcome, Outcome::Complete);
    // The same request each time.
    assert_eq!(requests[0].body, requests[2].body);
    let notices = run.notices();
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(
        notices[0].contains("sending the request again (1 of 2)"),
        "{notices:?}"
    );
    assert!(notices[1].contains("(2 of 2)"), "{notices:?}");
    // The broken attempts' text was shown (it streamed), then the notice; the result has
    // none of it.
    let first_notice = run
        .events
        .iter()
        .position(|e| matches!(e, StreamEvent::Notice(_)))
        .unwrap();
    assert!(run.events[..first_notice]
        .iter()
        .any(|e| matches!(e, StreamEvent::TextDelta(_))));
    assert!(run.text().ends_with("the complete answer"));
    // Broken attempts reported no full usage: their reservations stay spent.
    assert_eq!(
        run.attempts,
        vec![
            Attempt {
                retry: 0,
                previous_unreported: false
            },
            Attempt {
                retry: 1,
                previous_unreported: true
            },
            Attempt {
                retry: 2,
                previous_unreported: true
            },
        ]
    );
}
both!(a_cut_stream_is_sent_again_and_only_the_complete_response_kept);

async fn a_third_cut_gives_up(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::text("one two three four five").cut_after(4),
            Scripted::text("one two three four five").cut_after(4),
            Scripted::text("one two three four five").cut_after(4),
            Scripted::text("never sent"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    let e = run.err();
    assert!(matches!(e, ModelError::Transport(_)), "{e:?}");
    assert!(e.to_string().contains("(sent 3 times)"), "{e}");
    assert_no_key(e);
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.played(), (3, 4));
    assert_eq!(run.notices().len(), 2);
}
both!(a_third_cut_gives_up);

async fn an_error_in_the_stream_is_sent_again(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::text("partial answer, then overloaded").error_event_after(
                4,
                "overloaded_error",
                "Overloaded",
            ),
            Scripted::text("whole"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()), "whole");
    assert_eq!(server.requests().len(), 2);
    let notices = run.notices();
    assert_eq!(notices.len(), 1);
    assert!(
        notices[0].contains("overloaded_error: Overloaded"),
        "{notices:?}"
    );
}
both!(an_error_in_the_stream_is_sent_again);

async fn a_body_that_is_not_a_stream_is_a_protocol_error(d: Dialect) {
    // A 200 with a JSON body where a stream was asked: not retried, quoted escaped.
    let server = start(
        d,
        vec![
            Scripted::status(200).body("{\"oops\": \"not\u{1b}[2J a stream\"}"),
            Scripted::text("never sent"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    let e = run.err();
    assert!(matches!(e, ModelError::Protocol(_)), "{e:?}");
    let shown = e.to_string();
    assert!(
        shown.contains("expected an event stream, got application/json"),
        "{shown}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown}");
    assert!(
        shown.contains("\\u001b[2J") || shown.contains("\\e[2J"),
        "{shown}"
    );
    assert_eq!(server.requests().len(), 1);
}
both!(a_body_that_is_not_a_stream_is_a_protocol_error);

// ---------------------------------------------------------------------------------------------
// Status answers

async fn retry_after_is_honoured(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::status(429).retry_after("1"),
            Scripted::text("after the wait"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()), "after the wait");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let gap = requests[1]
        .arrived
        .duration_since(requests[0].finished.unwrap());
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
    let notices = run.notices();
    assert_eq!(notices.len(), 1);
    assert!(notices[0].contains("answered 429"), "{notices:?}");
    assert!(notices[0].contains("waiting 1.0 s"), "{notices:?}");
    assert_eq!(
        run.attempts,
        vec![
            Attempt {
                retry: 0,
                previous_unreported: false
            },
            Attempt {
                retry: 1,
                previous_unreported: true
            },
        ]
    );

    // Control: the same 429 without the header waits the policy's first backoff (10 ms).
    let server = start(d, vec![Scripted::status(429), Scripted::text("soon")]);
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()), "soon");
    assert!(
        run.notices()[0].contains("waiting 0.0 s"),
        "{:?}",
        run.notices()
    );
}
both!(retry_after_is_honoured);

async fn a_long_retry_after_is_capped(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::status(529).retry_after("3600"),
            Scripted::text("capped"),
        ],
    );
    let c = client_with(
        d,
        &server,
        RetryPolicy {
            backoff_cap: Duration::from_millis(200),
            ..fast()
        },
    );
    let run = ask(&c).await;
    assert_eq!(text_of(run.ok()), "capped");
    assert!(
        run.notices()[0].contains("waiting 0.2 s"),
        "{:?}",
        run.notices()
    );
}
both!(a_long_retry_after_is_capped);

async fn busy_statuses_back_off_and_give_up(d: Dialect) {
    let server = start(
        d,
        vec![
            Scripted::status(529),
            Scripted::status(503).retry_after("0"),
            Scripted::status(500),
            Scripted::text("through"),
        ],
    );
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()), "through");
    assert_eq!(server.requests().len(), 4);
    assert_eq!(run.notices().len(), 3);

    // With two retries allowed, a third 429 is the answer.
    let server = start(
        d,
        vec![
            Scripted::status(429),
            Scripted::status(429),
            Scripted::status(429),
            Scripted::text("never sent"),
        ],
    );
    let c = client_with(
        d,
        &server,
        RetryPolicy {
            status_retries: 2,
            ..fast()
        },
    );
    let run = ask(&c).await;
    match run.err() {
        ModelError::Status { status, message } => {
            assert_eq!(status, &429);
            assert_eq!(message, "rate_limit_error: scripted status 429");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 3);
}
both!(busy_statuses_back_off_and_give_up);

async fn client_errors_are_not_retried(d: Dialect) {
    for status in [400u16, 401, 403, 404] {
        let server = start(
            d,
            vec![Scripted::status(status), Scripted::text("never sent")],
        );
        let run = ask(&client(d, &server)).await;
        match run.err() {
            ModelError::Status {
                status: got,
                message,
            } => {
                assert_eq!(*got, status);
                assert!(
                    message.ends_with(&format!("scripted status {status}")),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(server.requests().len(), 1, "{status} was sent again");
        assert!(run.notices().is_empty());
    }
}
both!(client_errors_are_not_retried);

async fn the_key_is_in_no_error(d: Dialect) {
    // A provider that quotes the key back, with terminal escapes and a newline.
    let quoting = format!(
        "{{\"type\":\"error\",\"error\":{{\"type\":\"authentication_error\",\"message\":\"invalid key {KEY}\\n\\u001b[2Jforged line\"}},\"message\":\"invalid key {KEY}\"}}"
    );
    let server = start(
        d,
        vec![
            Scripted::status(429).body(&quoting),
            Scripted::status(401).body(&quoting),
        ],
    );
    let run = ask(&client(d, &server)).await;
    let mut errors = vec![run.err().to_string()];
    let e = run.err();
    assert_no_key(e);
    let shown = e.to_string();
    assert!(
        !shown.contains('\n') && !shown.contains('\u{1b}'),
        "{shown}"
    );
    assert!(shown.contains("[redacted]"), "{shown}");
    for n in run.notices() {
        assert!(!n.contains(KEY), "the key is in a notice: {n}");
        assert!(n.contains("[redacted]"), "{n}");
    }
    // Control: the key was sent, and the provider's body held it.
    let r = &server.requests()[0];
    let header = match d {
        Dialect::Anthropic => r.header("x-api-key").unwrap().to_string(),
        Dialect::Openai => r.header("authorization").unwrap().to_string(),
    };
    assert!(header.contains(KEY));
    assert!(quoting.contains(KEY));

    // The other kinds of error: a transport failure, a broken stream given up, a refusal.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let c = ModelClient::new(&endpoint(d, &dead, "")).unwrap();
    let run = ask(&c).await;
    assert!(
        matches!(run.err(), ModelError::Transport(_)),
        "{:?}",
        run.err()
    );
    assert_no_key(run.err());
    errors.push(run.err().to_string());
    let server = start(
        d,
        vec![
            Scripted::text("a b c d e f").cut_after(4),
            Scripted::text("a b c d e f").cut_after(4),
            Scripted::text("a b c d e f").cut_after(4),
        ],
    );
    let run = ask(&client(d, &server)).await;
    assert_no_key(run.err());
    errors.push(run.err().to_string());
    for e in &errors {
        assert!(!e.contains(KEY), "{e}");
    }
}
both!(the_key_is_in_no_error);

// ---------------------------------------------------------------------------------------------
// The proxy rule

async fn requests_go_through_the_proxy(d: Dialect) {
    let server = start(d, vec![Scripted::text("via the proxy")]);
    // A name that resolves nowhere: only the proxy can take it.
    let through = endpoint(d, "http://model.invalid", &server.proxy());
    let run = ask(&ModelClient::new(&through)
        .unwrap()
        .with_retry_policy(fast()))
    .await;
    assert_eq!(text_of(run.ok()), "via the proxy");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert!(r.absolute_form(), "{}", r.target);
    let want = match d {
        Dialect::Anthropic => "http://model.invalid/v1/messages",
        Dialect::Openai => "http://model.invalid/v1/chat/completions",
    };
    assert_eq!(r.target, want);
    assert_eq!(r.header("host"), Some("model.invalid"));

    // Control: the same client without the proxy must resolve the name itself, and cannot.
    let direct = endpoint(d, "http://model.invalid", "");
    let run = ask(&ModelClient::new(&direct).unwrap()).await;
    let e = run.err();
    match e {
        ModelError::Transport(m) => {
            assert!(m.starts_with("cannot connect to model.invalid: "), "{m}");
            assert!(m.contains("dns error"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    assert_no_key(e);
    assert_eq!(server.requests().len(), 1);
}
both!(requests_go_through_the_proxy);

async fn https_goes_through_connect(d: Dialect) {
    let server = start(d, vec![Scripted::text("never sent")]);
    let e = endpoint(d, "https://model.invalid", &server.proxy());
    let run = ask(&ModelClient::new(&e).unwrap()).await;
    // The scripted server refuses tunnels: the TLS connection cannot be made.
    match run.err() {
        ModelError::Transport(m) => {
            assert!(
                m.starts_with("cannot connect to the model proxy 127.0.0.1:"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "CONNECT");
    assert_eq!(requests[0].target, "model.invalid:443");
    // The key did not travel in the clear to the proxy.
    assert!(requests[0].headers.iter().all(|(_, v)| !v.contains(KEY)));
    // Control (a proxy that is not an IP address) is a config error: `client.rs`'s tests.
}
both!(https_goes_through_connect);

/// A server that answers one request with `307` to `location`, on a thread; returns its
/// base URL.
fn redirector(location: String) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // The request's head (the body is small and unread: the connection closes).
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        write!(
            s,
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
    });
    url
}

async fn a_redirect_is_not_followed(d: Dialect) {
    // A redirect to another host would take the key there (reqwest keeps `x-api-key` across
    // hosts): the client does not follow it.
    let elsewhere = start(d, vec![Scripted::text("followed")]);
    let path = match d {
        Dialect::Anthropic => "/v1/messages",
        Dialect::Openai => "/v1/chat/completions",
    };
    let target = format!("{}{path}", elsewhere.url());
    let run = ask(&ModelClient::new(&endpoint(d, &redirector(target.clone()), "")).unwrap()).await;
    match run.err() {
        ModelError::Status { status, .. } => assert_eq!(*status, 307),
        other => panic!("{other:?}"),
    }
    assert_no_key(run.err());
    assert!(elsewhere.requests().is_empty(), "the redirect was followed");

    // Control: a default client with the same key header follows it, key and all.
    let got = reqwest::Client::new()
        .post(redirector(target))
        .header("x-api-key", KEY)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let requests = elsewhere.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
}
both!(a_redirect_is_not_followed);

/// Environment variables that would send a default HTTP client elsewhere.
const PROXY_VARS: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// Set when this binary is started again by `environment_proxies_are_ignored`.
const CHILD: &str = "GARUDA_MODEL_CLIENTS_ENV_CHILD";

#[test]
fn environment_proxies_are_ignored() {
    // The environment is the process's: the checks run in a child started with it, so no
    // other test sees these variables.
    let decoy = start(Dialect::Anthropic, vec![Scripted::text("decoy")]);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "environment_proxies_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, decoy.proxy())
        .envs(PROXY_VARS.map(|v| (v, format!("http://{}", decoy.proxy()))))
        .envs([("NO_PROXY", "model.invalid"), ("no_proxy", "model.invalid")])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("child checks done"), "{stdout}");
    // Only the control's default client reached the decoy.
    let requests = decoy.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].header("x-control"), Some("default client"));
}

/// The child half of `environment_proxies_are_ignored` (does nothing unless started by it).
#[tokio::test]
async fn environment_proxies_child() {
    let Ok(decoy) = std::env::var(CHILD) else {
        return;
    };
    assert_eq!(
        std::env::var("HTTP_PROXY").unwrap(),
        format!("http://{decoy}")
    );
    for d in [Dialect::Anthropic, Dialect::Openai] {
        // A direct client reaches the server directly, not the decoy from HTTP_PROXY.
        let server = start(d, vec![Scripted::text("direct")]);
        assert_eq!(text_of(ask(&client(d, &server)).await.ok()), "direct");
        assert!(!server.requests()[0].absolute_form());
        // A proxied client uses its proxy even for a host NO_PROXY names.
        let server = start(d, vec![Scripted::text("proxied")]);
        let e = endpoint(d, "http://model.invalid", &server.proxy());
        assert_eq!(
            text_of(ask(&ModelClient::new(&e).unwrap()).await.ok()),
            "proxied"
        );
        assert!(server.requests()[0].absolute_form());
    }
    // Control: a default client in the same environment goes to the decoy.
    let target = start(Dialect::Anthropic, vec![Scripted::text("target")]);
    let got = reqwest::Client::new()
        .post(format!("{}/v1/messages", target.url()))
        .header("x-control", "default client")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    assert!(target.requests().is_empty());
    println!("child checks done");
}

// ---------------------------------------------------------------------------------------------
// The meter and cancellation

async fn a_meter_that_refuses_stops_the_retry(d: Dialect) {
    let script = || {
        vec![
            Scripted::text("broken in the middle").cut_after(4),
            Scripted::text("retried"),
        ]
    };
    let server = start(d, script());
    let run = ask_metered(&client(d, &server), |a| {
        if a.retry == 0 {
            Ok(())
        } else {
            Err(ModelError::Transport(
                "token budget: no room for a retry".into(),
            ))
        }
    })
    .await;
    match run.err() {
        ModelError::Transport(m) => assert_eq!(m, "token budget: no room for a retry"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
    assert_eq!(
        run.attempts,
        vec![
            Attempt {
                retry: 0,
                previous_unreported: false
            },
            Attempt {
                retry: 1,
                previous_unreported: true
            },
        ]
    );
    // Control: the same script with a meter that accepts retries.
    let server = start(d, script());
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()), "retried");
    assert_eq!(server.requests().len(), 2);
}
both!(a_meter_that_refuses_stops_the_retry);

async fn a_dropped_request_closes_its_connection(d: Dialect) {
    let slow = || {
        vec![Scripted::text(&"word ".repeat(40))
            .pieces(5)
            .chunk_delay(25)]
    };
    let server = start(d, slow());
    let c = client(d, &server);
    let (seen, mut first) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut events = |e: StreamEvent| {
        if matches!(e, StreamEvent::TextDelta(_)) {
            let _ = seen.send(());
        }
    };
    {
        let request = request();
        let mut meter = |_| Ok(());
        let call = c.complete(&request, &mut meter, &mut events);
        tokio::select! {
            r = call => panic!("finished before it was cancelled: {r:?}"),
            _ = first.recv() => {}
        }
        // `call` is dropped here: the request is cancelled.
    }
    let gone = server
        .wait_for(Duration::from_secs(20), |r| {
            r.len() == 1 && r[0].outcome != Outcome::Sending
        })
        .await;
    assert!(gone, "the server still streams: {:?}", server.requests());
    assert_eq!(server.requests()[0].outcome, Outcome::ClientGone);

    // Control: the same request, not cancelled, is streamed to its end.
    let server = start(d, slow());
    let run = ask(&client(d, &server)).await;
    assert_eq!(text_of(run.ok()).trim_end(), "word ".repeat(40).trim_end());
    assert_eq!(server.requests()[0].outcome, Outcome::Complete);
}
both!(a_dropped_request_closes_its_connection);
