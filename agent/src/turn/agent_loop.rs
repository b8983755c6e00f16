//! The agent loop (seed §3): build the request, reserve it in the budget, call the model,
//! stream its text out, run the tool calls it asks for, append the results, repeat, until
//! the model is done or a limit stops the turn.
//!
//! The loop is generic over the [`Model`] and the [`Supervisor`] link, and single-threaded:
//! concurrency (the read-only calls of a step, `explore` subagents) is futures joined on one
//! thread, so the shared [`Budget`] needs no lock and one reservation is taken at a time.
//!
//! Invariants a reviewer can check here:
//! - every model attempt is reserved before it is sent (the meter), and a reservation is
//!   released only by a reported usage;
//! - every `tool_use` the conversation holds is followed by a result for it, also when the
//!   turn stops in the middle of a step (cancel, repeated calls): a resumed session sends a
//!   well-formed conversation;
//! - the read-only calls of one step are all sent before the first answer is awaited, and
//!   their results are put back in call order; a write call is sent only after the previous
//!   call's answer came.

use std::cell::{Cell, RefCell};
use std::future::{ready, Future};
use std::pin::Pin;

use futures_util::future::join_all;
use garuda_ipc::{Start, StopReason, UiEvent, Usage};
use serde_json::Value;

use crate::model::{
    Attempt, Block, FinishReason, Message, Model, ModelError, ModelRequest, ModelResponse, Role,
    StreamEvent, TokenUsage, Tool,
};
use crate::turn::budget::{
    input_estimate, reservation_for, tokens_of_chars, Budget, Measured, Refused,
};
use crate::turn::compact::{self, SUMMARY_PREFIX, TRIM_MIN_CHARS};
use crate::turn::journal::{Rebuilt, Record};
use crate::turn::link::{LinkError, Supervisor};
use crate::turn::tools::{
    cap, definitions, format_answer, outside_sandbox_offered, Call, ToolOutput, ToolSet,
};

/// The `explore` subagent's system prompt.
pub const EXPLORE_SYSTEM: &str = "You are a read-only research helper of a coding agent. \
Answer the question you are given by reading the project with read_file, glob and grep; you \
cannot change anything or run commands. Work efficiently, then end with a concise answer that \
names the files and lines that matter.";

/// The user message that asks the model to go on after a response cut at the output limit.
pub const CONTINUE_PROMPT: &str = "Your previous response was cut at the output limit. \
Continue exactly where it stopped, without repeating anything.";

/// The note that asks a subagent at its step limit for its answer.
pub const WRAP_UP_PROMPT: &str = "You have used all your steps. Do not call any more tools: \
answer the question now with what you have found.";

/// A tool result's bound in the floor (seed T9): its cap at the worst JSON escaping (six
/// characters per character, `\u00XX`) plus this much structure.
const RESULT_OVERHEAD_CHARS: u64 = 200;

/// The loop's settings. [`LoopConfig::from_start`] takes the session's limits from the
/// supervisor's `start`; the rest are the defaults of the source design.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopConfig {
    /// Model calls in one turn (default 50).
    pub max_steps: u32,
    /// Tokens of the whole session, every agent, retry and summary included (default 20 M).
    pub token_budget: u64,
    /// `max_tokens` of a call.
    pub max_output_tokens: u32,
    /// `max_tokens` after a response was cut at the output limit.
    pub continue_max_tokens: u32,
    /// Continuations after a cut, per turn, before the turn stops with `max_tokens`.
    pub max_continuations: u32,
    /// The model's context window in tokens; compaction runs at 80 % of it.
    pub context_window: u64,
    /// Steps compaction always keeps whole.
    pub keep_steps: usize,
    /// `max_tokens` of the compaction summary.
    pub summary_max_tokens: u32,
    /// Longest tool result, in characters.
    pub result_cap: usize,
    /// Longest `explore` answer, in characters, trailer included.
    pub explore_result_cap: usize,
    /// Steps of an `explore` subagent (then one wrap-up call).
    pub explore_max_steps: u32,
    /// An `explore` subagent's own token limit (it also gets no more than what is left).
    pub explore_token_limit: u64,
    /// `bash` offers `outside_sandbox`.
    pub outside_sandbox: bool,
}

impl Default for LoopConfig {
    fn default() -> LoopConfig {
        LoopConfig {
            max_steps: 50,
            token_budget: 20_000_000,
            max_output_tokens: 8_192,
            continue_max_tokens: 32_000,
            max_continuations: 3,
            context_window: 200_000,
            keep_steps: 4,
            summary_max_tokens: 4_096,
            result_cap: crate::turn::tools::RESULT_CAP,
            explore_result_cap: crate::turn::tools::EXPLORE_RESULT_CAP,
            explore_max_steps: 20,
            explore_token_limit: 1_000_000,
            outside_sandbox: false,
        }
    }
}

impl LoopConfig {
    /// The settings for a session the supervisor started: its limits, and `outside_sandbox`
    /// only when its tools offer it.
    pub fn from_start(start: &Start) -> LoopConfig {
        LoopConfig {
            max_steps: start.limits.max_steps,
            token_budget: start.limits.token_budget,
            max_output_tokens: start.limits.max_output_tokens,
            outside_sandbox: outside_sandbox_offered(&start.tools),
            context_window: start
                .context_window
                .unwrap_or(LoopConfig::default().context_window),
            ..LoopConfig::default()
        }
    }

    /// Compaction runs above this many input tokens (80 % of the window).
    fn compact_at(&self) -> u64 {
        self.context_window.saturating_mul(8) / 10
    }

    /// After trimming, a summary is made if the input is still above this (60 %).
    fn summarise_above(&self) -> u64 {
        self.context_window.saturating_mul(6) / 10
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// Why.
    pub reason: StopReason,
    /// The model's final answer (the text after its last tool step; with the parts kept
    /// from responses cut at the output limit).
    pub text: String,
    /// Model calls of the main loop.
    pub steps: u32,
    /// Tokens the turn used as reported (subagents and compaction included).
    pub usage: Usage,
    /// The model error, for `model_error`.
    pub error: Option<String>,
}

/// One agent session: the conversation, its budget, and what it runs on.
pub struct Agent<'a, M, S> {
    core: Core<'a, M, S>,
    conv: Conv,
}

impl<'a, M: Model, S: Supervisor> Agent<'a, M, S> {
    /// A new session.
    pub fn new(model: &'a M, link: &'a S, config: LoopConfig, system: String) -> Self {
        Agent::resume(model, link, config, system, Rebuilt::default())
    }

    /// A session that continues from its journal: the same messages, and a budget with what
    /// the journal charged already spent.
    pub fn resume(
        model: &'a M,
        link: &'a S,
        config: LoopConfig,
        system: String,
        journal: Rebuilt,
    ) -> Self {
        let set = ToolSet::Main {
            outside_sandbox: config.outside_sandbox,
        };
        let budget = Budget::with_spent(config.token_budget, journal.spent);
        Agent {
            conv: Conv {
                system,
                messages: journal.messages,
                set,
                tools: definitions(set),
                budget,
                measured: None,
                role: Who::Main,
            },
            core: Core {
                model,
                link,
                config,
                next_id: Cell::new(1),
                turn_usage: Cell::new(Usage::default()),
                session_usage: Cell::new(Usage::default()),
                unsettled: RefCell::new(Vec::new()),
            },
        }
    }

    /// The conversation.
    pub fn messages(&self) -> &[Message] {
        &self.conv.messages
    }

    /// The session's budget.
    pub fn budget(&self) -> &Budget {
        &self.conv.budget
    }

    /// Runs one turn for `prompt`. `Err` only when the channel to the supervisor failed;
    /// every other way a turn can end is a [`TurnOutcome`]. The caller sends `turn_end`.
    pub async fn run_turn(&mut self, prompt: &str) -> Result<TurnOutcome, LinkError> {
        let core = &self.core;
        core.turn_usage.set(Usage::default());
        if let Some(unanswered) = results_owed(&self.conv.messages) {
            core.push(&mut self.conv, unanswered).await?;
        }
        core.push(&mut self.conv, user_text(prompt)).await?;
        // Once per turn, the prompt's record is waited for: its answer comes after any cancel
        // the supervisor sent before it handled the record (a Ctrl-C right behind the prompt),
        // so the loop sees that cancel before it calls the model.
        core.settle_journal().await?;
        let limits = RunLimits {
            max_steps: core.config.max_steps,
            wrap_up: false,
        };
        let end = core.run(&mut self.conv, limits).await?;
        let usage = core.turn_usage.get();
        core.journal(Record::TurnEnd {
            reason: end.reason,
            usage,
            steps: end.steps,
        })
        .await?;
        core.settle_journal().await?;
        Ok(TurnOutcome {
            reason: end.reason,
            text: end.text,
            steps: end.steps,
            usage,
            error: end.error,
        })
    }
}

/// Which agent a conversation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// The main agent: streams its text, journals its messages, keeps the floor.
    Main,
    /// An `explore` subagent, shown as progress of the call with this id.
    Explore { call: u64 },
}

/// One agent's conversation.
struct Conv {
    system: String,
    messages: Vec<Message>,
    set: ToolSet,
    tools: Vec<Tool>,
    budget: Budget,
    measured: Option<Measured>,
    role: Who,
}

impl Conv {
    fn request(&self, max_tokens: u32) -> ModelRequest {
        ModelRequest {
            system: self.system.clone(),
            messages: self.messages.clone(),
            tools: self.tools.clone(),
            max_tokens,
        }
    }

    fn label(&self) -> &'static str {
        match self.role {
            Who::Main => "main",
            Who::Explore { .. } => "explore",
        }
    }
}

/// What is shared by the main agent and its subagents during a session.
struct Core<'a, M, S> {
    model: &'a M,
    link: &'a S,
    config: LoopConfig,
    next_id: Cell<u64>,
    turn_usage: Cell<Usage>,
    session_usage: Cell<Usage>,
    /// Journal records sent whose answers have not been looked at (see [`Core::journal`]).
    unsettled: RefCell<Vec<u64>>,
}

/// More journal answers than this waiting are looked at before the next record is sent, so
/// that a session of many records without a model call between them keeps a bounded list.
const UNSETTLED_MAX: usize = 64;

struct RunLimits {
    max_steps: u32,
    /// At the step limit, one more call asks for the answer (subagents).
    wrap_up: bool,
}

struct RunEnd {
    reason: StopReason,
    text: String,
    steps: u32,
    error: Option<String>,
}

fn end(reason: StopReason, text: String, steps: u32) -> Result<RunEnd, LinkError> {
    Ok(RunEnd {
        reason,
        text,
        steps,
        error: None,
    })
}

/// What a model call came to.
enum Called {
    Response(ModelResponse),
    /// The budget refused an attempt.
    Refused(Refused),
    Cancelled,
    Failed(ModelError),
}

/// Three identical calls in a row stop the turn.
#[derive(Default)]
struct Repeats {
    last: Option<(String, Value)>,
    count: u32,
}

impl Repeats {
    fn see(&mut self, name: &str, input: &Value) -> u32 {
        match &self.last {
            Some((n, i)) if n == name && i == input => self.count += 1,
            _ => {
                self.last = Some((name.to_owned(), input.clone()));
                self.count = 1;
            }
        }
        self.count
    }
}

/// What a tool call left without a result says: the session ended (a kill, a crash) after
/// the call was journaled and before its result was.
pub const NOT_RUN_SESSION_ENDED: &str =
    "not run: the session ended before this call ran; run it again if it is still needed";

/// The results owed to a conversation that ends with tool calls: every provider refuses a
/// request whose tool calls have no results, so a resumed session could send nothing. Each
/// call gets an error result saying it did not run (`None` when nothing is owed).
fn results_owed(messages: &[Message]) -> Option<Message> {
    let last = messages.last().filter(|m| m.role == Role::Assistant)?;
    let content: Vec<Block> = last
        .content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse { id, .. } => Some(Block::ToolResult {
                tool_use_id: id.clone(),
                content: NOT_RUN_SESSION_ENDED.into(),
                is_error: true,
            }),
            _ => None,
        })
        .collect();
    (!content.is_empty()).then_some(Message {
        role: Role::User,
        content,
    })
}

fn user_text(text: &str) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::Text { text: text.into() }],
    }
}

fn text_of(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A response's text blocks only (its tool calls dropped).
fn only_text(content: Vec<Block>) -> Vec<Block> {
    content
        .into_iter()
        .filter(|b| matches!(b, Block::Text { .. }))
        .collect()
}

fn add(a: Usage, u: TokenUsage) -> Usage {
    Usage {
        input_tokens: a.input_tokens.saturating_add(u.input_tokens),
        output_tokens: a.output_tokens.saturating_add(u.output_tokens),
    }
}

/// A call of a concurrent batch: its result, or `None` when the turn was cancelled first.
type ToolFuture<'f> = Pin<Box<dyn Future<Output = Result<Option<ToolOutput>, LinkError>> + 'f>>;

impl<M: Model, S: Supervisor> Core<'_, M, S> {
    fn id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    /// Appends one record to the journal. A record the supervisor could not store is shown
    /// (resume would miss it) but does not stop the turn.
    ///
    /// The answer is not awaited here: the supervisor serves the channel's frames in order,
    /// so the record is written before any request sent after it is handled, and waiting
    /// would only put a round trip of the channel (two thread wake-ups in each process) on
    /// every step's path, up to three per tool step. The answers are looked at in
    /// [`Core::settle_journal`]: once the model has answered the next request (they are in by
    /// then), at the end of a turn, and when [`UNSETTLED_MAX`] wait.
    async fn journal(&self, record: Record) -> Result<(), LinkError> {
        if self.unsettled.borrow().len() >= UNSETTLED_MAX {
            self.settle_journal().await?;
        }
        let id = self.id();
        self.link.send(
            id,
            garuda_ipc::Request::JournalAppend {
                record: record.to_line(),
            },
        )?;
        self.unsettled.borrow_mut().push(id);
        Ok(())
    }

    /// Looks at the answers of the journal records sent so far, in order: each record the
    /// supervisor could not store is shown.
    async fn settle_journal(&self) -> Result<(), LinkError> {
        let ids = std::mem::take(&mut *self.unsettled.borrow_mut());
        for id in ids {
            if let garuda_ipc::Answer::Error { message, .. } = self.link.answer(id).await? {
                self.link.ui(UiEvent::Notice {
                    text: format!("the journal did not store a record ({message}): a resume of this session will miss it"),
                });
            }
        }
        Ok(())
    }

    /// Adds a complete message to a conversation (and, for the main agent, to the journal).
    async fn push(&self, conv: &mut Conv, message: Message) -> Result<(), LinkError> {
        if conv.role == Who::Main {
            self.journal(Record::Message {
                message: message.clone(),
            })
            .await?;
        }
        conv.messages.push(message);
        Ok(())
    }

    /// A journal record about the main conversation only.
    async fn journal_main(&self, conv: &Conv, record: Record) -> Result<(), LinkError> {
        if conv.role == Who::Main {
            self.journal(record).await?;
        }
        Ok(())
    }

    fn notice(&self, text: String) {
        self.link.ui(UiEvent::Notice { text });
    }

    /// A call's line for the user: its own for the main agent, under its `explore` call for
    /// a subagent.
    fn show(&self, conv: &Conv, id: u64, describe: String) {
        let event = match conv.role {
            Who::Main => UiEvent::ToolProgress { id, text: describe },
            Who::Explore { call } => UiEvent::ToolProgress {
                id: call,
                text: format!("explore · {describe}"),
            },
        };
        self.link.ui(event);
    }

    /// One model call with every attempt reserved in `budget`, cancellable. Charges: the
    /// last attempt settles to its reported usage; every other reservation (a failed,
    /// cancelled or unreported attempt) stays spent.
    async fn call_model(
        &self,
        budget: &Budget,
        request: &ModelRequest,
        need: u64,
        agent: &str,
        stream_text: bool,
    ) -> Result<Called, LinkError> {
        let mut held = Vec::new();
        let mut refused = None;
        // Bytes of text shown from the current attempt: a retried attempt withdraws them (its
        // stream broke; the answer starts over), so a final answer holds each text once.
        let streamed = std::cell::Cell::new(0u64);
        let link = self.link;
        let outcome = {
            let mut meter = |attempt: Attempt| match budget.reserve(need) {
                Ok(r) => {
                    if attempt.retry > 0 && streamed.get() > 0 {
                        link.ui(UiEvent::TextRetracted {
                            bytes: streamed.replace(0),
                        });
                    }
                    held.push(r);
                    Ok(())
                }
                Err(e) => {
                    refused = Some(e);
                    // The one error every client treats as final: no retry follows. The
                    // loop reads the refusal from `refused`, whatever the client returns.
                    Err(ModelError::Cancelled)
                }
            };
            let mut events = |e: StreamEvent| match e {
                StreamEvent::TextDelta(text) if stream_text => {
                    streamed.set(streamed.get().saturating_add(text.len() as u64));
                    link.ui(UiEvent::TextDelta { text });
                }
                StreamEvent::TextDelta(_) => {}
                StreamEvent::Notice(text) => link.ui(UiEvent::Notice { text }),
            };
            let call = self.model.complete(request, &mut meter, &mut events);
            // A cancel drops the model's future: its open reservation stays spent.
            tokio::select! {
                biased;
                () = link.cancelled() => None,
                r = call => Some(r),
            }
        };
        // The journal's answers to the records sent before this request are in by now.
        self.settle_journal().await?;
        let mut charged: u64 = held.iter().map(|r| r.tokens()).sum();
        let mut reported = None;
        if let Some(Ok(response)) = &outcome {
            if let Some(u) = response.usage {
                // A client that reported usage without metering still gets charged.
                let last = match held.pop() {
                    Some(r) => Some(r),
                    None => budget.reserve(0).ok(),
                };
                if let Some(last) = last {
                    // Saturating: the counts are the server's, and a wrapped sum would
                    // journal a tiny charge that a resumed session then starts from.
                    charged = charged
                        .saturating_sub(last.tokens())
                        .saturating_add(u.input_tokens.saturating_add(u.output_tokens));
                    budget.settle(last, u);
                }
                reported = Some(u);
            }
        }
        // What remains in `held` is kept as spent (seed T9).
        drop(held);
        if let Some(u) = reported {
            self.turn_usage.set(add(self.turn_usage.get(), u));
            self.session_usage.set(add(self.session_usage.get(), u));
            self.link.ui(UiEvent::Usage {
                usage: self.session_usage.get(),
            });
        }
        if charged > 0 || reported.is_some() {
            let u = reported.unwrap_or_default();
            self.journal(Record::Usage {
                agent: agent.into(),
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                reported: reported.is_some(),
                charged,
            })
            .await?;
        }
        Ok(match (refused, outcome) {
            (Some(e), _) => Called::Refused(e),
            (None, None) | (None, Some(Err(ModelError::Cancelled))) => Called::Cancelled,
            (None, Some(Err(e))) => Called::Failed(e),
            (None, Some(Ok(r))) => Called::Response(r),
        })
    }

    /// Records the provider's measure of the context after a response.
    fn measure(conv: &mut Conv, usage: Option<TokenUsage>) {
        if let Some(u) = usage {
            conv.measured = Some(Measured {
                tokens: u.input_tokens.saturating_add(u.output_tokens),
                messages: conv.messages.len(),
            });
        }
    }

    /// The loop of one agent.
    async fn run(&self, conv: &mut Conv, limits: RunLimits) -> Result<RunEnd, LinkError> {
        let mut steps = 0u32;
        let mut continuations = 0u32;
        let mut max_tokens = self.config.max_output_tokens;
        // Text of responses cut at the output limit, kept as the start of the answer.
        let mut answer = String::new();
        let mut repeats = Repeats::default();
        loop {
            if self.link.is_cancelled() {
                return end(StopReason::Cancelled, answer, steps);
            }
            if steps >= limits.max_steps {
                if limits.wrap_up {
                    return self.wrap_up(conv, steps, max_tokens, answer).await;
                }
                return end(StopReason::MaxSteps, answer, steps);
            }
            if let Some((reason, error)) = self.compact_if_due(conv, max_tokens).await? {
                return Ok(RunEnd {
                    reason,
                    text: answer,
                    steps,
                    error,
                });
            }
            let request = conv.request(max_tokens);
            let need = reservation_for(&request, conv.measured);
            let stream = conv.role == Who::Main;
            let response = match self
                .call_model(&conv.budget, &request, need, conv.label(), stream)
                .await?
            {
                Called::Response(r) => r,
                // A refused call is not a step.
                Called::Refused(e) => {
                    self.notice(e.to_string());
                    return end(StopReason::TokenBudget, answer, steps);
                }
                Called::Cancelled => return end(StopReason::Cancelled, answer, steps + 1),
                Called::Failed(e) => {
                    self.notice(e.to_string());
                    return Ok(RunEnd {
                        reason: StopReason::ModelError,
                        text: answer,
                        steps: steps + 1,
                        error: Some(e.to_string()),
                    });
                }
            };
            steps += 1;
            let ModelResponse {
                content,
                finish,
                usage,
            } = response;
            let uses: Vec<(String, String, Value)> = content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, name, input } => {
                        Some((id.clone(), name.clone(), input.clone()))
                    }
                    _ => None,
                })
                .collect();
            match finish {
                FinishReason::MaxTokens => {
                    // A cut response's tool calls may be incomplete: only its text is kept.
                    let text = only_text(content);
                    let kept = !text.is_empty();
                    self.keep_reply(conv, &mut answer, text).await?;
                    Self::measure(conv, usage);
                    if continuations >= self.config.max_continuations {
                        return end(StopReason::MaxTokens, answer, steps);
                    }
                    continuations += 1;
                    max_tokens = max_tokens.max(self.config.continue_max_tokens);
                    self.notice(format!(
                        "the response was cut at the output limit; asking the model to go on \
                         with max_tokens {max_tokens} ({continuations} of {})",
                        self.config.max_continuations
                    ));
                    if kept {
                        self.push(conv, user_text(CONTINUE_PROMPT)).await?;
                    }
                }
                FinishReason::Refusal => {
                    // A refused response's tool calls are not run (and may be cut short): kept
                    // without a result they would make every later request of the session
                    // ill-formed. Only its text is kept.
                    self.keep_reply(conv, &mut answer, only_text(content))
                        .await?;
                    return end(StopReason::Refusal, answer, steps);
                }
                FinishReason::PauseTurn => {
                    // The server paused a long turn: send the conversation again.
                    self.keep_reply(conv, &mut answer, content).await?;
                    Self::measure(conv, usage);
                }
                _ if !uses.is_empty() => {
                    self.push(
                        conv,
                        Message {
                            role: Role::Assistant,
                            content,
                        },
                    )
                    .await?;
                    Self::measure(conv, usage);
                    // Text before a tool step is not the final answer.
                    answer.clear();
                    let (results, stop) = self
                        .run_calls(conv, &uses, &mut repeats, max_tokens)
                        .await?;
                    self.push(
                        conv,
                        Message {
                            role: Role::User,
                            content: results,
                        },
                    )
                    .await?;
                    if let Some(reason) = stop {
                        return end(reason, answer, steps);
                    }
                }
                _ => {
                    self.keep_reply(conv, &mut answer, content).await?;
                    return end(StopReason::Done, answer, steps);
                }
            }
        }
    }

    /// A response that ends or pauses the step without running tools: its text goes on the
    /// answer, and its blocks, if any, into the conversation as the model's message.
    async fn keep_reply(
        &self,
        conv: &mut Conv,
        answer: &mut String,
        content: Vec<Block>,
    ) -> Result<(), LinkError> {
        answer.push_str(&text_of(&content));
        if !content.is_empty() {
            self.push(
                conv,
                Message {
                    role: Role::Assistant,
                    content,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// A subagent at its step limit: one more call, reserved like any other, asks for the
    /// answer (its tools stay offered: the conversation holds tool calls).
    async fn wrap_up(
        &self,
        conv: &mut Conv,
        steps: u32,
        max_tokens: u32,
        answer: String,
    ) -> Result<RunEnd, LinkError> {
        let note = Block::Text {
            text: WRAP_UP_PROMPT.into(),
        };
        match conv.messages.last_mut() {
            Some(m) if m.role == Role::User => m.content.push(note),
            _ => conv.messages.push(Message {
                role: Role::User,
                content: vec![note],
            }),
        }
        let request = conv.request(max_tokens);
        let need = reservation_for(&request, conv.measured);
        let called = self
            .call_model(&conv.budget, &request, need, conv.label(), false)
            .await?;
        // As in `run`: a refusal and a model error are shown, and the error is kept for the
        // explore result's trailer.
        let (reason, text, error) = match called {
            Called::Response(r) => (StopReason::MaxSteps, answer + &text_of(&r.content), None),
            Called::Refused(e) => {
                self.notice(e.to_string());
                (StopReason::TokenBudget, answer, None)
            }
            Called::Cancelled => (StopReason::Cancelled, answer, None),
            Called::Failed(e) => {
                self.notice(e.to_string());
                (StopReason::ModelError, answer, Some(e.to_string()))
            }
        };
        Ok(RunEnd {
            reason,
            text,
            steps,
            error,
        })
    }

    /// Compaction when the next request is above 80 % of the window: trim old tool outputs,
    /// then, if still above 60 %, summarise the older messages with one reserved call. The
    /// last steps stay whole. `Some` when the summary call stopped the turn.
    async fn compact_if_due(
        &self,
        conv: &mut Conv,
        max_tokens: u32,
    ) -> Result<Option<(StopReason, Option<String>)>, LinkError> {
        let input = input_estimate(&conv.request(max_tokens), conv.measured);
        if input <= self.config.compact_at() {
            return Ok(None);
        }
        let keep = compact::keep_from(&conv.messages, self.config.keep_steps);
        if keep == 0 {
            return Ok(None);
        }
        let trimmed = compact::trim_old_outputs(&mut conv.messages, keep, TRIM_MIN_CHARS);
        if !trimmed.is_empty() {
            conv.measured = None;
            self.notice(format!(
                "compaction: trimmed {} old tool output(s)",
                trimmed.len()
            ));
            self.journal_main(conv, Record::Trim { blocks: trimmed })
                .await?;
        }
        let after = input_estimate(&conv.request(max_tokens), conv.measured);
        if after <= self.config.summarise_above() {
            return Ok(None);
        }
        let request =
            compact::summary_request(&conv.messages[..keep], self.config.summary_max_tokens);
        let need = input
            .max(input_estimate(&request, None))
            .saturating_add(u64::from(self.config.summary_max_tokens));
        let called = self
            .call_model(&conv.budget, &request, need, "compaction", false)
            .await?;
        match called {
            Called::Response(r) => {
                let text = text_of(&r.content);
                if text.trim().is_empty() {
                    self.notice(
                        "compaction: the summary came back empty; kept the messages".into(),
                    );
                    return Ok(None);
                }
                let message = user_text(&format!("{SUMMARY_PREFIX}{text}"));
                conv.messages.splice(..keep, [message.clone()]);
                conv.measured = None;
                self.notice(format!("compaction: summarised {keep} older message(s)"));
                self.journal_main(
                    conv,
                    Record::Summary {
                        replaced: keep,
                        message,
                    },
                )
                .await?;
                Ok(None)
            }
            Called::Refused(e) => {
                self.notice(e.to_string());
                Ok(Some((StopReason::TokenBudget, None)))
            }
            Called::Cancelled => Ok(Some((StopReason::Cancelled, None))),
            Called::Failed(e) => {
                self.notice(e.to_string());
                Ok(Some((StopReason::ModelError, Some(e.to_string()))))
            }
        }
    }

    /// The bound of the main agent's next request once these calls' results are in (seed
    /// T9's floor): the request as it stands, a bound per result, the output limit, and the
    /// summary call when a compaction would be due first.
    fn floor(&self, conv: &Conv, calls: &[Result<Call, String>], max_tokens: u32) -> u64 {
        let mut input = input_estimate(&conv.request(max_tokens), conv.measured);
        for c in calls {
            let cap = match c {
                Ok(Call::Explore { .. }) => self.config.explore_result_cap,
                _ => self.config.result_cap,
            } as u64;
            input = input.saturating_add(tokens_of_chars(6 * cap + RESULT_OVERHEAD_CHARS));
        }
        // Saturating: `input` may hold a measure the server reported.
        let mut floor = input.saturating_add(u64::from(max_tokens));
        if input > self.config.compact_at() {
            floor = floor
                .saturating_add(input)
                .saturating_add(u64::from(self.config.summary_max_tokens));
        }
        floor
    }

    /// Runs a step's calls: consecutive read-only calls together, each write call alone in
    /// order. Returns a result for every call, in call order, and why the turn stops if it
    /// does.
    async fn run_calls(
        &self,
        conv: &Conv,
        uses: &[(String, String, Value)],
        repeats: &mut Repeats,
        max_tokens: u32,
    ) -> Result<(Vec<Block>, Option<StopReason>), LinkError> {
        let result = |i: usize, out: ToolOutput| Block::ToolResult {
            tool_use_id: uses[i].0.clone(),
            content: out.content,
            is_error: out.is_error,
        };
        let most = uses
            .iter()
            .map(|(_, name, input)| repeats.see(name, input))
            .max()
            .unwrap_or(0);
        if most >= 3 {
            self.notice("the same tool call came 3 times in a row: the turn stops".into());
            let results =
                (0..uses.len())
                    .map(|i| {
                        result(i, ToolOutput::error(
                        "not run: the same call came 3 times in a row, so the turn stopped \
                         (repeated_calls)",
                    ))
                    })
                    .collect();
            return Ok((results, Some(StopReason::RepeatedCalls)));
        }
        let calls: Vec<Result<Call, String>> = uses
            .iter()
            .map(|(_, name, input)| Call::parse(conv.set, name, input))
            .collect();
        if conv.role == Who::Main {
            conv.budget.set_floor(self.floor(conv, &calls, max_tokens));
        }
        let mut outputs: Vec<Option<ToolOutput>> = vec![None; calls.len()];
        let mut cancelled = false;
        let mut i = 0;
        while i < calls.len() && !cancelled {
            let concurrent = |c: &Result<Call, String>| c.as_ref().map_or(true, Call::read_only);
            if concurrent(&calls[i]) {
                let mut j = i;
                while j < calls.len() && concurrent(&calls[j]) {
                    j += 1;
                }
                cancelled = !self
                    .run_batch(conv, &calls[i..j], &mut outputs[i..j])
                    .await?;
                i = j;
            } else {
                cancelled = !self.run_one(conv, &calls[i], &mut outputs[i]).await?;
                i += 1;
            }
        }
        if conv.role == Who::Main {
            conv.budget.set_floor(0);
        }
        let results = outputs
            .into_iter()
            .enumerate()
            .map(|(i, out)| {
                result(
                    i,
                    out.unwrap_or_else(|| {
                        ToolOutput::error(
                            "not run: the turn was cancelled before this call finished",
                        )
                    }),
                )
            })
            .collect();
        Ok((results, cancelled.then_some(StopReason::Cancelled)))
    }

    /// Read-only calls: every request is written first, then the answers (and subagents) are
    /// awaited together. `false` when cancelled.
    ///
    /// A cancel does not drop the batch from outside: each call notices it itself (a read
    /// stops waiting, a subagent stops its loop after journaling what its open call
    /// charged), so every charge of the batch is recorded before the turn ends.
    async fn run_batch(
        &self,
        conv: &Conv,
        calls: &[Result<Call, String>],
        outputs: &mut [Option<ToolOutput>],
    ) -> Result<bool, LinkError> {
        let mut futures: Vec<ToolFuture<'_>> = Vec::with_capacity(calls.len());
        // The last call of the batch that is a request to the supervisor: every one before
        // it says `more`, so the supervisor can run the batch's reads together.
        let last_request = calls
            .iter()
            .rposition(|c| matches!(c, Ok(call) if call.request().is_some()));
        for (index, c) in calls.iter().enumerate() {
            let call = match c {
                Err(why) => {
                    futures.push(Box::pin(ready(Ok(Some(ToolOutput::error(why.clone()))))));
                    continue;
                }
                Ok(call) => call.clone(),
            };
            let id = self.id();
            self.show(conv, id, call.describe());
            match (call.request(), &call) {
                (Some(request), _) => {
                    self.link
                        .send_more(id, request, Some(index) != last_request)?;
                    let cap = self.config.result_cap;
                    futures.push(Box::pin(async move {
                        let answer = tokio::select! {
                            biased;
                            () = self.link.cancelled() => return Ok(None),
                            a = self.link.answer(id) => a?,
                        };
                        Ok(Some(format_answer(&call, answer).capped(cap)))
                    }));
                }
                (None, Call::Explore { question }) => {
                    futures.push(self.explore(question.clone(), id, conv.budget.clone()));
                }
                (None, _) => {
                    futures.push(Box::pin(ready(Ok(Some(ToolOutput::error(
                        "this tool has no runner",
                    ))))));
                }
            }
        }
        for (slot, r) in outputs.iter_mut().zip(join_all(futures).await) {
            *slot = r?;
        }
        Ok(!self.link.is_cancelled())
    }

    /// One call that changes something: sent only now, its answer awaited before anything
    /// else is sent. `false` when cancelled.
    async fn run_one(
        &self,
        conv: &Conv,
        call: &Result<Call, String>,
        output: &mut Option<ToolOutput>,
    ) -> Result<bool, LinkError> {
        let call = match call {
            Err(why) => {
                *output = Some(ToolOutput::error(why.clone()));
                return Ok(true);
            }
            Ok(c) => c,
        };
        let Some(request) = call.request() else {
            *output = Some(ToolOutput::error("this tool has no runner"));
            return Ok(true);
        };
        let id = self.id();
        self.show(conv, id, call.describe());
        self.link.send(id, request)?;
        let answer = tokio::select! {
            biased;
            () = self.link.cancelled() => None,
            a = self.link.answer(id) => Some(a?),
        };
        match answer {
            Some(a) => {
                *output = Some(format_answer(call, a).capped(self.config.result_cap));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// An `explore` subagent: its own conversation and loop with the read-only tools, a child
    /// of the budget, its final text (capped, trailer included) as the result.
    fn explore<'f>(&'f self, question: String, call: u64, parent: Budget) -> ToolFuture<'f> {
        Box::pin(async move {
            let set = ToolSet::Explore;
            let mut conv = Conv {
                system: EXPLORE_SYSTEM.into(),
                messages: vec![user_text(&question)],
                set,
                tools: definitions(set),
                budget: parent.child(self.config.explore_token_limit),
                measured: None,
                role: Who::Explore { call },
            };
            let limits = RunLimits {
                max_steps: self.config.explore_max_steps,
                wrap_up: true,
            };
            let end = self.run(&mut conv, limits).await?;
            if end.reason == StopReason::Cancelled {
                return Ok(None);
            }
            Ok(Some(explore_output(end, self.config.explore_result_cap)))
        })
    }
}

/// A subagent's end as its tool result: its answer cut so that the trailer fits the cap.
fn explore_output(end: RunEnd, limit: usize) -> ToolOutput {
    let why = match end.reason {
        StopReason::Done => String::new(),
        StopReason::MaxSteps => "; stopped at its step limit".into(),
        StopReason::TokenBudget => "; stopped: the token budget".into(),
        StopReason::RepeatedCalls => "; stopped: repeated calls".into(),
        StopReason::MaxTokens => "; stopped: output limit".into(),
        StopReason::Refusal => "; the model refused".into(),
        StopReason::Cancelled => "; cancelled".into(),
        StopReason::ModelError => format!(
            "; model error: {}",
            end.error.as_deref().unwrap_or("unknown")
        ),
    };
    let trailer = format!(
        "\n[explore: {} step{}{why}]",
        end.steps,
        if end.steps == 1 { "" } else { "s" }
    );
    let room = limit.saturating_sub(trailer.chars().count());
    if end.text.trim().is_empty() {
        return ToolOutput::error(cap(&format!("explore found no answer{trailer}"), limit));
    }
    ToolOutput::ok(format!("{}{trailer}", cap(&end.text, room)))
}
