//! The loop against a scripted model and an in-memory supervisor: each stop reason reached,
//! the order of concurrent and sequential calls, continuation, compaction, the shared budget
//! with `explore` subagents, and the journal read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use garuda_ipc::{Answer, CommandDone, ErrorCode, GrepMatch, Request, StopReason, UiEvent};
use serde_json::json;

use crate::model::{Block, FinishReason, Message, ModelError, ModelResponse, Role, TokenUsage};
use crate::turn::agent_loop::{
    CONTINUE_PROMPT, EXPLORE_SYSTEM, NOT_RUN_SESSION_ENDED, WRAP_UP_PROMPT,
};
use crate::turn::compact::{SUMMARY_PREFIX, SUMMARY_SYSTEM};
use crate::turn::journal::{rebuild, Record};
use crate::turn::testkit::{calls, text, Event, MockSupervisor, Reply, ScriptedModel};
use crate::turn::{Agent, LinkError, LoopConfig, Supervisor, TurnOutcome};

const SYS: &str = "SYS";

/// Answers every tool: a file's content is its path repeated, a command prints "ok".
fn answer(request: &Request) -> Answer {
    match request {
        Request::ReadFile { path, .. } => Answer::FileText {
            text: format!("content of {path}\n"),
            first_line: 1,
            total_lines: 1,
            unchanged: false,
        },
        Request::WriteFile { content, .. } => Answer::Written {
            bytes: content.len() as u64,
            created: true,
            replacements: 0,
        },
        Request::EditFile { .. } => Answer::Written {
            bytes: 10,
            created: false,
            replacements: 1,
        },
        Request::Glob { pattern, .. } => Answer::Paths {
            paths: vec![format!("match-of-{pattern}")],
            truncated: false,
        },
        Request::Grep { pattern, .. } => Answer::Matches {
            matches: vec![GrepMatch {
                path: "a.rs".into(),
                line: 1,
                text: format!("line with {pattern}"),
            }],
            truncated: false,
        },
        Request::RunCommand { .. } => Answer::CommandDone(CommandDone {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            output: "ok\n".into(),
            output_truncated: false,
            blocked_hosts: vec![],
            staged: None,
        }),
        Request::JournalAppend { .. } => Answer::Stored,
    }
}

fn supervisor() -> MockSupervisor {
    MockSupervisor::new(answer)
}

async fn one_turn(model: &ScriptedModel, sup: &MockSupervisor, config: LoopConfig) -> TurnOutcome {
    let mut agent = Agent::new(model, sup, config, SYS.into());
    let out = agent.run_turn("go").await.unwrap();
    // Whatever the ending, the journal rebuilds the conversation the loop holds.
    let lines = sup.journal_lines();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let rebuilt = rebuild(&refs).unwrap();
    assert_eq!(rebuilt.messages, agent.messages());
    assert_eq!(
        rebuilt.spent,
        agent.budget().spent(),
        "the journal's charges are the budget's"
    );
    every_tool_use_has_a_result(agent.messages());
    out
}

/// A resumed conversation must be well-formed: each tool call answered in the next message.
fn every_tool_use_has_a_result(messages: &[Message]) {
    for (i, m) in messages.iter().enumerate() {
        for b in &m.content {
            if let Block::ToolUse { id, .. } = b {
                let next = messages.get(i + 1).expect("a message after a tool call");
                assert!(
                    next.content.iter().any(
                        |r| matches!(r, Block::ToolResult { tool_use_id, .. } if tool_use_id == id)
                    ),
                    "tool call {id} has no result"
                );
            }
        }
    }
}

/// The tool results of the last message of a request, as (id, content, is_error).
fn results_in(request: &crate::model::ModelRequest) -> Vec<(String, String, bool)> {
    request
        .messages
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

fn records(sup: &MockSupervisor) -> Vec<Record> {
    sup.journal_lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn usage(input: u64, output: u64) -> Option<TokenUsage> {
    Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
    })
}

// ---------------------------------------------------------------------------------------
// Stop reasons
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn done_streams_the_text_and_journals_each_message() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::Respond(text("hello", (100, 5)))]);
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(out.text, "hello");
    assert_eq!((out.usage.input_tokens, out.usage.output_tokens), (100, 5));
    assert!(sup.ui.borrow().contains(&UiEvent::TextDelta {
        text: "hello".into()
    }));
    let kinds: Vec<&str> = records(&sup)
        .iter()
        .map(|r| match r {
            Record::Message { .. } => "message",
            Record::Usage { .. } => "usage",
            Record::TurnEnd { .. } => "turn_end",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["message", "usage", "message", "turn_end"]);
    // The request carried the system prompt and the seven tools.
    let r = &model.requests.borrow()[0];
    assert_eq!(r.system, SYS);
    assert_eq!(r.tools.len(), 7);
}

#[tokio::test]
async fn a_tool_step_runs_and_its_results_go_back_to_the_model() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[("t1", "read_file", json!({"path": "a.rs"}))],
                (50, 5),
            )),
            Reply::Respond(calls(
                &[(
                    "t2",
                    "edit_file",
                    json!({"path": "a.rs", "old": "x", "new": "y"}),
                )],
                (80, 5),
            )),
            Reply::Respond(text("done", (90, 2))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(out.steps, 3);
    let requests = model.requests.borrow();
    assert_eq!(
        results_in(&requests[1]),
        [("t1".into(), "     1\tcontent of a.rs\n".into(), false)]
    );
    assert_eq!(
        results_in(&requests[2]),
        [(
            "t2".into(),
            "Edited a.rs: 1 replacement; the file is now 10 bytes.".into(),
            false
        )]
    );
    assert!(sup.ui.borrow().contains(&UiEvent::ToolProgress {
        id: 1 + 3, // ids 1..3 went to the journal (prompt, usage, response)
        text: "read_file a.rs".into()
    }));
}

/// A tool step does not wait for the journal's answers (they are read once the model has
/// answered the next request), and a record the journal could not store is still shown, once
/// per record, before the turn returns. Control: the records precede the tool request on the
/// channel, so the supervisor has written them before it runs the call.
#[tokio::test]
async fn journal_answers_are_read_after_the_model_and_failures_are_shown() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[("t1", "read_file", json!({"path": "a.rs"}))],
                (50, 5),
            )),
            Reply::Respond(text("done", (90, 2))),
        ],
    );
    let sup = supervisor();
    sup.journal_fails.set(true);
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let out = agent.run_turn("go").await.unwrap();
    assert_eq!(out.reason, StopReason::Done);
    // The prompt, the first usage and the model's message were journaled before the call;
    // of their answers only the prompt's (sent before the first model request) was read.
    assert_eq!(sup.journal_read_at_send.borrow().as_slice(), [1]);
    let records = sup.journal_lines().len();
    // prompt, usage, call, result, usage, answer, turn end
    assert_eq!(records, 7, "{records} records");
    let notices = sup
        .ui
        .borrow()
        .iter()
        .filter(|e| matches!(e, UiEvent::Notice { text } if text.contains("the journal did not store a record (disk full)")))
        .count();
    assert_eq!(
        notices, records,
        "one notice per record, all before the turn returned"
    );
    assert_eq!(sup.journal_read.get(), records);
}

/// A cancel the supervisor sent before it answered the prompt's record (a Ctrl-C right behind
/// the prompt) stops the turn before it calls the model: the loop reads that answer first.
/// Control: the same cancel arriving with a later record's answer comes after the model call.
#[tokio::test]
async fn a_cancel_before_the_prompts_answer_stops_the_turn_before_the_model() {
    for (nth, model_calls) in [(1, 0), (2, 1)] {
        let model = ScriptedModel::default();
        model.script(SYS, vec![Reply::Respond(text("hello", (10, 1)))]);
        let sup = supervisor();
        sup.cancel_on_journal_read.set(nth);
        let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
        let out = agent.run_turn("go").await.unwrap();
        assert_eq!(
            model.requests.borrow().len(),
            model_calls,
            "cancel with answer {nth}"
        );
        if model_calls == 0 {
            assert_eq!(out.reason, StopReason::Cancelled);
        }
    }
}

#[tokio::test]
async fn an_invalid_call_is_an_error_result_not_a_failure() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[
                    ("t1", "read_file", json!({"path": "a", "mode": "w"})),
                    ("t2", "rm_rf", json!({})),
                ],
                (50, 5),
            )),
            Reply::Respond(text("ok", (60, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let r = results_in(&model.requests.borrow()[1]);
    assert_eq!(
        r[0].1,
        "read_file has no field `mode`; its fields are path, offset, limit"
    );
    assert!(r[1].1.starts_with("unknown tool `rm_rf`"));
    assert!(r[0].2 && r[1].2);
    assert!(
        sup.tool_requests().is_empty(),
        "nothing reached the supervisor"
    );
}

#[tokio::test]
async fn max_steps_stops_the_turn() {
    let model = ScriptedModel::default();
    let replies = (0..10)
        .map(|i| {
            Reply::Respond(calls(
                &[("t", "glob", json!({ "pattern": format!("p{i}") }))],
                (10, 1),
            ))
        })
        .collect();
    model.script(SYS, replies);
    let sup = supervisor();
    let config = LoopConfig {
        max_steps: 3,
        ..LoopConfig::default()
    };
    let out = one_turn(&model, &sup, config).await;
    assert_eq!(out.reason, StopReason::MaxSteps);
    assert_eq!(out.steps, 3);
    assert_eq!(model.requests.borrow().len(), 3);
    assert_eq!(sup.tool_requests().len(), 3);
}

#[tokio::test]
async fn the_token_budget_refuses_a_call_that_may_not_fit() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::Respond(text("hi", (10, 1)))]);
    let sup = supervisor();
    let config = LoopConfig {
        token_budget: 1_000,
        max_output_tokens: 8_192,
        ..LoopConfig::default()
    };
    let out = one_turn(&model, &sup, config).await;
    assert_eq!(out.reason, StopReason::TokenBudget);
    assert_eq!(out.steps, 0, "a refused call is not a step");
    assert_eq!(model.refused.get(), 1);
    assert!(sup.ui.borrow().iter().any(
        |e| matches!(e, UiEvent::Notice { text } if text.starts_with("the token budget cannot cover this request"))
    ));

    // Control: with room, the same call is sent.
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::Respond(text("hi", (10, 1)))]);
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
}

#[tokio::test]
async fn three_identical_calls_in_a_row_stop_the_turn() {
    let same = || Reply::Respond(calls(&[("t", "read_file", json!({"path": "a"}))], (10, 1)));
    let model = ScriptedModel::default();
    model.script(SYS, vec![same(), same(), same(), same()]);
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::RepeatedCalls);
    assert_eq!(out.steps, 3);
    assert_eq!(sup.tool_requests().len(), 2, "the third is not run");

    // Control: the same call with another in between is not "in a row".
    let other = || Reply::Respond(calls(&[("t", "glob", json!({"pattern": "*"}))], (10, 1)));
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            same(),
            same(),
            other(),
            same(),
            same(),
            Reply::Respond(text("fine", (10, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(sup.tool_requests().len(), 5);
}

fn cut(t: &str) -> ModelResponse {
    ModelResponse {
        content: vec![Block::Text { text: t.into() }],
        finish: FinishReason::MaxTokens,
        usage: usage(10, 5),
    }
}

#[tokio::test]
async fn a_cut_response_continues_with_a_raised_limit_and_keeps_its_text() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(cut("Hel")),
            Reply::Respond(cut("lo ")),
            Reply::Respond(text("world", (10, 5))),
        ],
    );
    let sup = supervisor();
    let config = LoopConfig {
        max_output_tokens: 1_000,
        ..LoopConfig::default()
    };
    let out = one_turn(&model, &sup, config).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(out.text, "Hello world");
    let requests = model.requests.borrow();
    let limits: Vec<u32> = requests.iter().map(|r| r.max_tokens).collect();
    assert_eq!(limits, [1_000, 32_000, 32_000]);
    // The partial text is in the conversation, followed by the request to go on.
    let second = &requests[1].messages;
    assert_eq!(
        second[second.len() - 2].content,
        [Block::Text { text: "Hel".into() }]
    );
    assert_eq!(
        second[second.len() - 1].content,
        [Block::Text {
            text: CONTINUE_PROMPT.into()
        }]
    );
}

#[tokio::test]
async fn max_tokens_stops_after_three_continuations() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(cut("a")),
            Reply::Respond(cut("b")),
            Reply::Respond(cut("c")),
            Reply::Respond(cut("d")),
            Reply::Respond(text("never", (1, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::MaxTokens);
    assert_eq!(out.text, "abcd");
    assert_eq!(model.requests.borrow().len(), 4);
}

#[tokio::test]
async fn a_refusal_stops_the_turn() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![Reply::Respond(ModelResponse {
            content: vec![Block::Text {
                text: "I can't help with that.".into(),
            }],
            finish: FinishReason::Refusal,
            usage: usage(10, 3),
        })],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Refusal);
    assert_eq!(out.text, "I can't help with that.");
}

#[tokio::test]
async fn a_refusal_with_a_tool_call_keeps_its_text_and_runs_nothing() {
    // Anthropic can stop with `refusal` in the middle of a tool call, and an OpenAI-compatible
    // server can send a refusal next to tool calls: the call is not run, and the conversation
    // must not keep it without a result (`one_turn` checks that, and that the journal rebuilds
    // it), or the next turn's request would be refused by the provider.
    let model = ScriptedModel::default();
    let mut refused = calls(&[("t1", "bash", json!({"command": "rm -rf /"}))], (10, 3));
    refused.content.insert(
        0,
        Block::Text {
            text: "I won't do that.".into(),
        },
    );
    refused.finish = FinishReason::Refusal;
    model.script(SYS, vec![Reply::Respond(refused)]);
    let sup = supervisor();
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let out = agent.run_turn("go").await.unwrap();
    assert_eq!(out.reason, StopReason::Refusal);
    assert_eq!(out.text, "I won't do that.");
    assert!(
        sup.tool_requests().is_empty(),
        "the refused call is not run"
    );
    every_tool_use_has_a_result(agent.messages());
    assert_eq!(
        agent.messages().last().unwrap().content,
        [Block::Text {
            text: "I won't do that.".into()
        }]
    );
    // The next turn sends a well-formed conversation: its last two messages are the kept
    // text and the new prompt.
    model.script(SYS, vec![Reply::Respond(text("ok", (10, 1)))]);
    agent.run_turn("something else").await.unwrap();
    let requests = model.requests.borrow();
    let sent = &requests[1].messages;
    assert_eq!(sent.len(), 3);
    assert!(!sent
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, Block::ToolUse { .. })));
}

#[tokio::test]
async fn pause_turn_sends_the_conversation_again() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(ModelResponse {
                content: vec![Block::Text {
                    text: "searching… ".into(),
                }],
                finish: FinishReason::PauseTurn,
                usage: usage(10, 3),
            }),
            Reply::Respond(text("found", (20, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(out.text, "searching… found");
    let requests = model.requests.borrow();
    let last = requests[1].messages.last().unwrap();
    assert_eq!(
        last.role,
        Role::Assistant,
        "the paused response is sent back as is"
    );
}

#[tokio::test]
async fn a_model_error_stops_the_turn_and_keeps_the_reservation_spent() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![Reply::Fail(ModelError::Transport(
            "connection reset".into(),
        ))],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::ModelError);
    assert_eq!(
        out.error.as_deref(),
        Some("the model's API could not be reached or its stream broke: connection reset")
    );
    let charged: Vec<(bool, u64)> = records(&sup)
        .into_iter()
        .filter_map(|r| match r {
            Record::Usage {
                reported, charged, ..
            } => Some((reported, charged)),
            _ => None,
        })
        .collect();
    assert_eq!(charged.len(), 1);
    assert!(!charged[0].0);
    assert!(
        charged[0].1 > 8_192,
        "the whole reservation, output limit included"
    );
}

#[tokio::test]
async fn retries_each_reserve_and_only_the_last_attempt_settles() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::RetryThen(2, text("ok", (100, 10)))]);
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(model.attempts.get(), 3);
    let need = {
        let r = &model.requests.borrow()[0];
        crate::turn::budget::reservation_for(r, None)
    };
    let charged = records(&sup)
        .into_iter()
        .find_map(|r| match r {
            Record::Usage { charged, .. } => Some(charged),
            _ => None,
        })
        .unwrap();
    // Two broken attempts kept whole, the third settled to its usage.
    assert_eq!(charged, 2 * need + 110);
}

/// Text a broken stream showed is withdrawn when the request is sent again, so a final
/// answer built from the deltas holds the answer once. Control: a retry after a status (no
/// text streamed) and a call that did not break withdraw nothing.
#[tokio::test]
async fn a_broken_streams_text_is_withdrawn_at_its_retry() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::BrokenWithText(
                vec!["The fix is ".into(), "The fíx".into()],
                calls(&[("t1", "glob", json!({"pattern": "*"}))], (10, 1)),
            ),
            Reply::RetryThen(1, text("done", (10, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let shown: String = sup.ui.borrow().iter().fold(String::new(), |mut acc, e| {
        match e {
            UiEvent::TextDelta { text } => acc.push_str(text),
            UiEvent::TextRetracted { bytes } => {
                let keep = acc.len() - usize::try_from(*bytes).unwrap();
                acc.truncate(keep);
            }
            _ => {}
        }
        acc
    });
    assert_eq!(shown, "done");
    let retracted: Vec<u64> = sup
        .ui
        .borrow()
        .iter()
        .filter_map(|e| match e {
            UiEvent::TextRetracted { bytes } => Some(*bytes),
            _ => None,
        })
        .collect();
    // "The fíx" is 8 bytes (í is two); the status retry streamed nothing.
    assert_eq!(retracted, vec![11, 8]);
}

#[tokio::test]
async fn an_absurd_reported_usage_is_charged_in_full_and_journaled_as_charged() {
    // The counts come from the server: a sum past u64 must not wrap (a release build would
    // journal a tiny charge, and a resumed session would start from it) nor panic.
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[("t1", "glob", json!({"pattern": "*"}))],
                (u64::MAX - 5, 100),
            )),
            Reply::Respond(text("never", (1, 1))),
        ],
    );
    let sup = supervisor();
    // `one_turn` also checks that the journal's charges rebuild the budget's spend.
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::TokenBudget, "nothing is left");
    let charged: Vec<u64> = records(&sup)
        .into_iter()
        .filter_map(|r| match r {
            Record::Usage { charged, .. } => Some(charged),
            _ => None,
        })
        .collect();
    assert_eq!(charged, [u64::MAX]);
}

#[tokio::test]
async fn cancel_before_a_step_stops_at_once() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::Respond(text("never", (1, 1)))]);
    let sup = supervisor();
    sup.cancel();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Cancelled);
    assert!(model.requests.borrow().is_empty());
}

/// Runs a turn for "go" and cancels it once a model call is in flight (a [`Reply::Hang`]).
async fn cancel_once_in_flight(
    agent: &mut Agent<'_, ScriptedModel, MockSupervisor>,
    model: &ScriptedModel,
    sup: &MockSupervisor,
) -> TurnOutcome {
    let canceller = async {
        while model.in_flight.get() == 0 {
            tokio::task::yield_now().await;
        }
        sup.cancel();
    };
    let (out, ()) = tokio::join!(agent.run_turn("go"), canceller);
    out.unwrap()
}

#[tokio::test]
async fn cancel_while_the_model_answers_drops_the_call_and_keeps_its_reservation() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![Reply::Hang]);
    let sup = supervisor();
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let out = cancel_once_in_flight(&mut agent, &model, &sup).await;
    assert_eq!(out.reason, StopReason::Cancelled);
    let need = crate::turn::budget::reservation_for(&model.requests.borrow()[0], None);
    assert_eq!(agent.budget().spent(), need);
}

#[tokio::test]
async fn cancel_while_a_command_runs_answers_every_call_and_stops() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[
                    ("t1", "bash", json!({"command": "sleep 100"})),
                    ("t2", "write_file", json!({"path": "a", "content": "x"})),
                ],
                (10, 1),
            )),
            Reply::Respond(text("never", (1, 1))),
        ],
    );
    let sup = supervisor();
    sup.hold_until.set(usize::MAX); // the command never finishes
    sup.cancel_on_request.set(1);
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let out = agent.run_turn("go").await.unwrap();
    assert_eq!(out.reason, StopReason::Cancelled);
    assert_eq!(
        sup.tool_requests().len(),
        1,
        "the write after it is not sent"
    );
    let last = agent.messages().last().unwrap();
    assert_eq!(last.content.len(), 2);
    for b in &last.content {
        assert!(
            matches!(b, Block::ToolResult { is_error: true, content, .. } if content.starts_with("not run: the turn was cancelled"))
        );
    }
    every_tool_use_has_a_result(agent.messages());
}

// ---------------------------------------------------------------------------------------
// Concurrency and order
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn read_only_calls_are_all_sent_first_and_come_back_in_call_order() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[
                    ("t1", "read_file", json!({"path": "one"})),
                    ("t2", "glob", json!({"pattern": "two"})),
                    ("t3", "grep", json!({"pattern": "three"})),
                ],
                (10, 1),
            )),
            Reply::Respond(text("ok", (10, 1))),
        ],
    );
    let sup = supervisor();
    // No answer arrives until all three requests are out; then they arrive reversed.
    sup.hold_until.set(3);
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let events = sup.events.borrow().clone();
    let sent: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Sent(id, _) => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(sent.len(), 3);
    assert!(
        events[..3].iter().all(|e| matches!(e, Event::Sent(..))),
        "every request is written before the first answer is read: {events:?}"
    );
    // They did arrive reversed…
    let arrival = sup.arrival.borrow().clone();
    assert_eq!(arrival, sent.iter().rev().copied().collect::<Vec<_>>());
    // …and the model sees them in call order.
    let r = results_in(&model.requests.borrow()[1]);
    let ids: Vec<&str> = r.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "t3"]);
    assert!(r[0].1.contains("content of one"));
    assert_eq!(r[1].1, "match-of-two");
    assert_eq!(r[2].1, "a.rs:1:line with three\n");
}

#[tokio::test]
async fn the_mock_catches_a_loop_that_awaits_before_sending_everything() {
    // Negative control of the test above: answers held until two requests are out, and a
    // step whose second call may only be sent after the first one's answer (a write after a
    // read). The loop must wait, so the mock reports the deadlock instead of hanging.
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![Reply::Respond(calls(
            &[
                ("t1", "read_file", json!({"path": "one"})),
                ("t2", "write_file", json!({"path": "two", "content": ""})),
            ],
            (10, 1),
        ))],
    );
    let sup = supervisor();
    sup.hold_until.set(2);
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let r = agent.run_turn("go").await;
    assert!(matches!(r, Err(LinkError::Closed)), "{r:?}");
    assert_eq!(sup.tool_requests().len(), 1);
}

#[tokio::test]
async fn more_is_false_on_the_last_request_of_a_batch_with_explore_and_invalid_calls() {
    // One run of read-only calls: explore, two reads, an invalid call, explore. Only the two
    // reads are requests to the supervisor: the first says `more`, the second (the batch's
    // last request, though not its last call) must not, or the supervisor would wait for a
    // request that never comes while the agent waits for its answers.
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            step_with(vec![
                explore_call("e1", "q1"),
                ("t1".into(), "read_file".into(), json!({"path": "a"})),
                ("t2".into(), "glob".into(), json!({"pattern": "*"})),
                ("t3".into(), "read_file".into(), json!({"path": ""})),
                explore_call("e2", "q2"),
            ]),
            // A step whose only request is followed by an invalid call.
            step_with(vec![
                ("t4".into(), "grep".into(), json!({"pattern": "x"})),
                ("t5".into(), "nope".into(), json!({})),
            ]),
            Reply::Respond(text("done", (10, 1))),
        ],
    );
    for q in ["q1", "q2"] {
        model.script(
            q,
            vec![
                step_with(vec![
                    (format!("{q}-a"), "glob".into(), json!({ "pattern": q })),
                    (format!("{q}-b"), "grep".into(), json!({ "pattern": q })),
                ]),
                Reply::Respond(text(&format!("answer to {q}"), (10, 1))),
            ],
        );
    }
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let mores = sup.mores.borrow().clone();
    let main: Vec<(String, bool)> = mores[..2].to_vec();
    assert_eq!(
        main,
        [("read_file".into(), true), ("glob".into(), false)],
        "{mores:?}"
    );
    // Each explore child's own batch of two: the first says more, the last does not.
    assert_eq!(
        mores[2..6].iter().map(|(_, m)| *m).collect::<Vec<_>>(),
        [true, false, true, false],
        "{mores:?}"
    );
    assert_eq!(mores[6..], [("grep".into(), false)], "{mores:?}");
    // Every batch was closed: no request is left saying `more`.
    assert!(!mores.last().unwrap().1);
    let r = results_in(&model.requests.borrow()[model.requests.borrow().len() - 2]);
    assert!(r[0].1.starts_with("answer to q1"), "{r:?}");
    assert!(r[3].1.contains("must not be empty"), "{r:?}");
    assert!(r[4].1.starts_with("answer to q2"), "{r:?}");
}

#[tokio::test]
async fn the_mock_holds_the_answers_of_a_batch_left_open() {
    // Negative control of the test above: like the supervisor, the mock answers a request
    // sent with `more` only once the batch is closed; a batch left open is a deadlock (the
    // mock reports it instead of hanging).
    let sup = supervisor();
    let glob = || Request::Glob {
        pattern: "*".into(),
        path: None,
    };
    sup.send_more(1, glob(), true).unwrap();
    assert!(matches!(sup.answer(1).await, Err(LinkError::Closed)));
    // Control: the batch's last request closes it, and both answers come.
    sup.send_more(2, glob(), true).unwrap();
    sup.send_more(3, glob(), false).unwrap();
    assert!(sup.answer(2).await.is_ok());
    assert!(sup.answer(3).await.is_ok());
}

#[tokio::test]
async fn write_calls_run_one_at_a_time_in_order() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[
                    ("t1", "read_file", json!({"path": "r1"})),
                    ("t2", "write_file", json!({"path": "w", "content": "x"})),
                    ("t3", "glob", json!({"pattern": "r2"})),
                    ("t4", "grep", json!({"pattern": "r3"})),
                    (
                        "t5",
                        "edit_file",
                        json!({"path": "w", "old": "x", "new": "y"}),
                    ),
                    ("t6", "bash", json!({"command": "make"})),
                ],
                (10, 1),
            )),
            Reply::Respond(text("ok", (10, 1))),
        ],
    );
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let shape: Vec<String> = sup
        .events
        .borrow()
        .iter()
        .map(|e| match e {
            Event::Sent(_, tool) => format!("send {tool}"),
            Event::Read(_) => "read".into(),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "send read_file",
            "read",
            "send write_file",
            "read",
            // the two reads between the writes go together
            "send glob",
            "send grep",
            "read",
            "read",
            "send edit_file",
            "read",
            "send run_command",
            "read",
        ]
    );
    let r = results_in(&model.requests.borrow()[1]);
    let ids: Vec<&str> = r.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "t3", "t4", "t5", "t6"]);
}

// ---------------------------------------------------------------------------------------
// Compaction
// ---------------------------------------------------------------------------------------

/// A step whose response carries `talk` characters of text and one read of `path`.
fn talky_read(i: usize, talk: usize) -> Reply {
    let mut r = calls(
        &[(
            &format!("t{i}"),
            "read_file",
            json!({ "path": format!("f{i}") }),
        )],
        (10, 1),
    );
    r.content.insert(
        0,
        Block::Text {
            text: "t".repeat(talk),
        },
    );
    Reply::Respond(r)
}

fn big_files(request: &Request) -> Answer {
    match request {
        Request::ReadFile { path, .. } => Answer::FileText {
            text: format!("{}\n", path.repeat(1_500)),
            first_line: 1,
            total_lines: 1,
            unchanged: false,
        },
        other => answer(other),
    }
}

#[tokio::test]
async fn compaction_trims_old_outputs_then_summarises_and_keeps_the_last_four_steps() {
    let model = ScriptedModel::default();
    model.script(SYS, (0..10).map(|i| talky_read(i, 4_000)).collect());
    model.script(SYS, vec![Reply::Respond(text("final", (10, 1)))]);
    model.script(
        SUMMARY_SYSTEM,
        vec![Reply::Respond(text("read f0..f3", (10, 10)))],
    );
    let sup = MockSupervisor::new(big_files);
    let config = LoopConfig {
        context_window: 20_000,
        ..LoopConfig::default()
    };
    let out = one_turn(&model, &sup, config).await;
    assert_eq!(out.reason, StopReason::Done);
    let recs = records(&sup);
    let trim = recs.iter().position(|r| matches!(r, Record::Trim { .. }));
    let summary = recs
        .iter()
        .position(|r| matches!(r, Record::Summary { .. }));
    let (Some(trim), Some(summary)) = (trim, summary) else {
        panic!("a trim and a summary: {recs:?}")
    };
    assert!(trim < summary, "trimming comes first");
    let requests = model.requests.borrow();
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.system == SUMMARY_SYSTEM)
            .count(),
        1
    );
    // The request after the summary: the summary, then the last four steps whole.
    let after = requests
        .iter()
        .skip_while(|r| r.system != SUMMARY_SYSTEM)
        .nth(1)
        .unwrap();
    let Block::Text { text: first } = &after.messages[0].content[0] else {
        panic!()
    };
    assert_eq!(first, &format!("{SUMMARY_PREFIX}read f0..f3"));
    let steps: Vec<&Message> = after.messages[1..]
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .collect();
    assert_eq!(steps.len(), 4);
    for m in &after.messages[1..] {
        for b in &m.content {
            if let Block::ToolResult { content, .. } = b {
                assert!(
                    !content.starts_with("[old tool output trimmed"),
                    "kept whole"
                );
                assert!(content.len() > 1_500);
            }
        }
    }
    // The summary call was reserved in the budget and journaled as compaction's.
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::Usage { agent, .. } if agent == "compaction")));
}

#[tokio::test]
async fn trimming_alone_is_enough_when_it_brings_the_context_down() {
    let model = ScriptedModel::default();
    // Little talk: the outputs are the bulk.
    model.script(SYS, (0..12).map(|i| talky_read(i, 10)).collect());
    model.script(SYS, vec![Reply::Respond(text("final", (10, 1)))]);
    let sup = MockSupervisor::new(big_files);
    let config = LoopConfig {
        context_window: 10_000,
        ..LoopConfig::default()
    };
    let out = one_turn(&model, &sup, config).await;
    assert_eq!(out.reason, StopReason::Done);
    let recs = records(&sup);
    assert!(recs.iter().any(|r| matches!(r, Record::Trim { .. })));
    assert!(!recs.iter().any(|r| matches!(r, Record::Summary { .. })));
    assert!(model
        .requests
        .borrow()
        .iter()
        .all(|r| r.system != SUMMARY_SYSTEM));
    // Control: with a large window nothing is compacted.
    let model = ScriptedModel::default();
    model.script(SYS, (0..12).map(|i| talky_read(i, 10)).collect());
    model.script(SYS, vec![Reply::Respond(text("final", (10, 1)))]);
    let sup = MockSupervisor::new(big_files);
    one_turn(&model, &sup, LoopConfig::default()).await;
    assert!(!records(&sup)
        .iter()
        .any(|r| matches!(r, Record::Trim { .. })));
}

// ---------------------------------------------------------------------------------------
// explore and the shared budget
// ---------------------------------------------------------------------------------------

fn explore_call(id: &str, q: &str) -> (String, String, serde_json::Value) {
    (id.into(), "explore".into(), json!({ "question": q }))
}

fn step_with(list: Vec<(String, String, serde_json::Value)>) -> Reply {
    let borrowed: Vec<(&str, &str, serde_json::Value)> = list
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    Reply::Respond(calls(&borrowed, (10, 1)))
}

#[tokio::test]
async fn explore_is_read_only_and_stops_at_twenty_steps_with_a_wrap_up() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            step_with(vec![explore_call("e1", "where is main?")]),
            Reply::Respond(text("main is in a.rs", (10, 1))),
        ],
    );
    let mut child = vec![step_with(vec![(
        "c0".into(),
        "write_file".into(),
        json!({"path": "x", "content": "pwned"}),
    )])];
    for i in 1..30 {
        child.push(step_with(vec![(
            format!("c{i}"),
            "grep".into(),
            json!({ "pattern": format!("p{i}") }),
        )]));
    }
    model.script("where is main?", child);
    // The wrap-up call gets this (it is the 21st reply: the script has 30 tool steps).
    let sup = supervisor();
    let out = one_turn(&model, &sup, LoopConfig::default()).await;
    assert_eq!(out.reason, StopReason::Done);
    let requests = model.requests.borrow();
    let child_requests: Vec<_> = requests
        .iter()
        .filter(|r| r.system == EXPLORE_SYSTEM)
        .collect();
    assert_eq!(child_requests.len(), 21, "20 steps and one wrap-up");
    for r in &child_requests {
        let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read_file", "glob", "grep"]);
    }
    let last = child_requests[20].messages.last().unwrap();
    assert_eq!(
        last.content.last(),
        Some(&Block::Text {
            text: WRAP_UP_PROMPT.into()
        })
    );
    // The write never reached the supervisor; the model was told the tool does not exist.
    assert!(!sup
        .tool_requests()
        .iter()
        .any(|r| matches!(r, Request::WriteFile { .. })));
    assert_eq!(sup.tool_requests().len(), 19, "19 greps");
    let second = &results_in(child_requests[1])[0];
    assert!(
        second.1.starts_with("unknown tool `write_file`"),
        "{second:?}"
    );
    // The parent's result: the wrap-up's text (a tool call here, so none) and the trailer.
    let r = results_in(&requests[requests.len() - 1]);
    assert_eq!(r[0].0, "e1");
    assert!(
        r[0].1
            .contains("[explore: 20 steps; stopped at its step limit]"),
        "{}",
        r[0].1
    );
    // Progress lines go under the explore call.
    assert!(sup
        .ui
        .borrow()
        .iter()
        .any(|e| matches!(e, UiEvent::ToolProgress { text, .. } if text == "explore · grep /p1/")));
}

#[tokio::test]
async fn a_failed_wrap_up_call_says_why_in_the_explore_result() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            step_with(vec![explore_call("e1", "q")]),
            Reply::Respond(text("ok", (10, 1))),
        ],
    );
    model.script(
        "q",
        vec![
            step_with(vec![("c1".into(), "glob".into(), json!({"pattern": "*"}))]),
            // The wrap-up call at the step limit fails.
            Reply::Fail(ModelError::Status {
                status: 529,
                message: "overloaded_error: Overloaded".into(),
            }),
        ],
    );
    let sup = supervisor();
    let config = LoopConfig {
        explore_max_steps: 1,
        ..LoopConfig::default()
    };
    one_turn(&model, &sup, config).await;
    let requests = model.requests.borrow();
    let r = results_in(requests.last().unwrap());
    let want = "[explore: 1 step; model error: the model's API answered 529: overloaded_error: Overloaded]";
    assert!(r[0].1.ends_with(want), "{}", r[0].1);
    assert!(r[0].2, "no answer: an error result");
    assert!(sup.ui.borrow().iter().any(
        |e| matches!(e, UiEvent::Notice { text } if text == "the model's API answered 529: overloaded_error: Overloaded")
    ));
}

#[tokio::test]
async fn an_explore_answer_is_capped_with_its_trailer_inside_the_cap() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            step_with(vec![explore_call("e1", "q")]),
            Reply::Respond(text("ok", (10, 1))),
        ],
    );
    model.script(
        "q",
        vec![Reply::Respond(text(&"z".repeat(50_000), (10, 1)))],
    );
    let sup = supervisor();
    one_turn(&model, &sup, LoopConfig::default()).await;
    let requests = model.requests.borrow();
    let r = results_in(requests.last().unwrap());
    let chars = r[0].1.chars().count();
    assert!(chars <= 20_000, "{chars}");
    assert!(r[0].1.ends_with("[explore: 1 step]"));
    assert!(r[0].1.contains("more characters not shown]"));
    assert!(!r[0].2);
}

#[tokio::test]
async fn three_explore_children_stay_inside_the_budget_and_the_parent_still_answers() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            step_with(vec![
                explore_call("e1", "q1"),
                explore_call("e2", "q2"),
                explore_call("e3", "q3"),
            ]),
            Reply::Respond(text("the final answer", (3_000, 100))),
        ],
    );
    for q in ["q1", "q2", "q3"] {
        // Each child would work for 20 steps at about 1,400 tokens a call.
        let steps = (0..25)
            .map(|i| {
                let mut r = calls(
                    &[(
                        &format!("{q}-{i}"),
                        "grep",
                        json!({ "pattern": format!("{q}{i}") }),
                    )],
                    (1_300, 100),
                );
                r.usage = usage(1_300, 100);
                Reply::Respond(r)
            })
            .collect();
        model.script(q, steps);
    }
    let sup = supervisor();
    let config = LoopConfig {
        token_budget: 40_000,
        max_output_tokens: 500,
        explore_result_cap: 2_000,
        ..LoopConfig::default()
    };
    let mut agent = Agent::new(&model, &sup, config, SYS.into());
    let out = agent.run_turn("go").await.unwrap();
    assert_eq!(out.reason, StopReason::Done);
    assert_eq!(out.text, "the final answer");
    let spent = agent.budget().spent();
    assert!(spent <= 40_000, "spent {spent}");
    // The children were stopped by the budget, not by their step limit.
    let child_calls = model
        .requests
        .borrow()
        .iter()
        .filter(|r| r.system == EXPLORE_SYSTEM)
        .count();
    assert!(child_calls < 3 * 20, "{child_calls}");
    let requests = model.requests.borrow();
    let r = results_in(requests.last().unwrap());
    assert_eq!(r.len(), 3);
    for (_, content, _) in &r {
        assert!(content.contains("stopped: the token budget"), "{content}");
    }
    // The children ran interleaved: not all of q1's calls before q2's first.
    let order: Vec<String> = requests
        .iter()
        .filter(|r| r.system == EXPLORE_SYSTEM)
        .map(|r| match &r.messages[0].content[0] {
            Block::Text { text } => text.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(&order[..3], ["q1", "q2", "q3"]);
}

#[tokio::test]
async fn a_cancelled_explore_child_keeps_its_open_reservation() {
    let model = ScriptedModel::default();
    model.script(SYS, vec![step_with(vec![explore_call("e1", "q")])]);
    model.script("q", vec![Reply::Hang]);
    let sup = supervisor();
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    let out = cancel_once_in_flight(&mut agent, &model, &sup).await;
    assert_eq!(out.reason, StopReason::Cancelled);
    // The child's open charge is in the journal too: a resumed session counts it.
    let lines = sup.journal_lines();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(rebuild(&refs).unwrap().spent, agent.budget().spent());
    let requests = model.requests.borrow();
    let parent_charge: u64 = records(&sup)
        .iter()
        .filter_map(|r| match r {
            Record::Usage { agent, charged, .. } if agent == "main" => Some(*charged),
            _ => None,
        })
        .sum();
    let child_need = crate::turn::budget::reservation_for(&requests[1], None);
    assert_eq!(agent.budget().spent(), parent_charge + child_need);
    every_tool_use_has_a_result(agent.messages());
}

// ---------------------------------------------------------------------------------------
// Resume
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_resumed_session_sends_the_same_messages_and_keeps_its_spend() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(&[("t1", "read_file", json!({"path": "a"}))], (50, 5))),
            Reply::Respond(text("first answer", (60, 5))),
        ],
    );
    let sup = supervisor();
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    agent.run_turn("first").await.unwrap();
    let before = agent.messages().to_vec();
    let spent = agent.budget().spent();
    drop(agent);

    let lines = sup.journal_lines();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let rebuilt = rebuild(&refs).unwrap();
    let model2 = ScriptedModel::default();
    model2.script(SYS, vec![Reply::Respond(text("second", (70, 5)))]);
    let sup2 = supervisor();
    let mut resumed = Agent::resume(&model2, &sup2, LoopConfig::default(), SYS.into(), rebuilt);
    assert_eq!(resumed.budget().spent(), spent);
    resumed.run_turn("second").await.unwrap();
    let sent = &model2.requests.borrow()[0].messages;
    assert_eq!(&sent[..before.len()], &before[..]);
    assert_eq!(sent.len(), before.len() + 1);
    // Control: the journal was not empty and the first turn's tool result is there.
    assert!(before.iter().any(|m| m
        .content
        .iter()
        .any(|b| matches!(b, Block::ToolResult { .. }))));
}

/// A session killed after its tool calls were journaled and before their results were: the
/// resumed turn first gives each call a "not run" error result (journaled, so a later resume
/// has it too), then the prompt. Control: the cut journal alone leaves the calls unanswered,
/// a request every provider refuses.
#[tokio::test]
async fn a_resume_after_a_kill_answers_the_calls_left_without_results() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[
                    ("t1", "read_file", json!({"path": "a"})),
                    ("t2", "glob", json!({"pattern": "*"})),
                ],
                (50, 5),
            )),
            Reply::Respond(text("first answer", (60, 5))),
        ],
    );
    let sup = supervisor();
    let mut agent = Agent::new(&model, &sup, LoopConfig::default(), SYS.into());
    agent.run_turn("first").await.unwrap();
    drop(agent);
    // The kill: the journal ends at the assistant's tool calls.
    let lines = sup.journal_lines();
    let cut = lines
        .iter()
        .position(|l| l.contains("\"tool_use\""))
        .unwrap();
    let refs: Vec<&str> = lines[..=cut].iter().map(String::as_str).collect();
    let rebuilt = rebuild(&refs).unwrap();
    let last = rebuilt.messages.last().unwrap();
    assert!(
        last.role == Role::Assistant
            && last
                .content
                .iter()
                .any(|b| matches!(b, Block::ToolUse { .. })),
        "control: the cut journal ends with calls and no results"
    );

    let model2 = ScriptedModel::default();
    model2.script(SYS, vec![Reply::Respond(text("second", (70, 5)))]);
    let sup2 = supervisor();
    let mut resumed = Agent::resume(&model2, &sup2, LoopConfig::default(), SYS.into(), rebuilt);
    let out = resumed.run_turn("second").await.unwrap();
    assert_eq!(out.reason, StopReason::Done);
    let sent = model2.requests.borrow()[0].messages.clone();
    every_tool_use_has_a_result(&sent);
    let owed = &sent[sent.len() - 2];
    let results: Vec<(&str, &str, bool)> = owed
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.as_str(), content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("t1", NOT_RUN_SESSION_ENDED, true),
            ("t2", NOT_RUN_SESSION_ENDED, true)
        ]
    );
    // Journaled: the resumed session's own journal rebuilds to a valid conversation.
    let mut all = refs.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    all.extend(sup2.journal_lines());
    let again: Vec<&str> = all.iter().map(String::as_str).collect();
    every_tool_use_has_a_result(&rebuild(&again).unwrap().messages);
}

#[tokio::test]
async fn a_denied_call_reads_as_a_denial() {
    let model = ScriptedModel::default();
    model.script(
        SYS,
        vec![
            Reply::Respond(calls(
                &[("t1", "read_file", json!({"path": ".env"}))],
                (10, 1),
            )),
            Reply::Respond(text("ok", (10, 1))),
        ],
    );
    let sup = MockSupervisor::new(|_| Answer::Error {
        code: ErrorCode::Denied,
        message: ".env is a secret".into(),
    });
    one_turn(&model, &sup, LoopConfig::default()).await;
    let r = results_in(&model.requests.borrow()[1]);
    assert_eq!(
        r[0],
        (
            "t1".into(),
            "Permission denied for read_file: .env is a secret".into(),
            true
        )
    );
}
