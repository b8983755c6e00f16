//! Test doubles for the loop: a model that plays scripted responses, and an in-memory
//! supervisor that answers requests, can hold answers back and release them in another
//! order, and records what happened in what order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;

use garuda_ipc::{Answer, Request, UiEvent};
use tokio::sync::watch;

use crate::model::{
    Attempt, Block, FinishReason, Model, ModelError, ModelRequest, ModelResponse, StreamEvent,
    TokenUsage,
};
use crate::turn::link::{LinkError, Supervisor};

/// One scripted reply.
pub enum Reply {
    /// Meter once, stream the text, return the response.
    Respond(ModelResponse),
    /// Meter `failures + 1` times (retries after broken streams), then respond.
    RetryThen(u32, ModelResponse),
    /// One broken attempt per text (each streams its text, then breaks), then a last attempt
    /// that responds.
    BrokenWithText(Vec<String>, ModelResponse),
    /// Meter once, then fail with no usage.
    Fail(ModelError),
    /// Meter once, then never answer (a request in flight when the turn is cancelled).
    Hang,
}

/// A model that plays scripts. A request is matched to a script by its first user text
/// (an `explore` question), else by its system prompt.
#[derive(Default)]
pub struct ScriptedModel {
    scripts: RefCell<HashMap<String, VecDeque<Reply>>>,
    /// Every request, in the order the calls started.
    pub requests: RefCell<Vec<ModelRequest>>,
    /// Attempts metered (retries included), and how many were refused.
    pub attempts: Cell<u32>,
    pub refused: Cell<u32>,
    /// A call is in flight (for tests that cancel one).
    pub in_flight: Cell<u32>,
}

impl ScriptedModel {
    pub fn script(&self, key: &str, replies: Vec<Reply>) {
        self.scripts
            .borrow_mut()
            .entry(key.into())
            .or_default()
            .extend(replies);
    }

    fn next(&self, request: &ModelRequest) -> Option<Reply> {
        let first = request
            .messages
            .first()
            .and_then(|m| match m.content.first() {
                Some(Block::Text { text }) => Some(text.clone()),
                _ => None,
            });
        let mut scripts = self.scripts.borrow_mut();
        if let Some(q) = first.and_then(|f| scripts.get_mut(&f)) {
            if let Some(r) = q.pop_front() {
                return Some(r);
            }
        }
        scripts.get_mut(&request.system)?.pop_front()
    }

    fn meter(
        &self,
        meter: &mut dyn FnMut(Attempt) -> Result<(), ModelError>,
        retry: u32,
    ) -> Result<(), ModelError> {
        self.attempts.set(self.attempts.get() + 1);
        let r = meter(Attempt {
            retry,
            previous_unreported: retry > 0,
        });
        if r.is_err() {
            self.refused.set(self.refused.get() + 1);
        }
        r
    }
}

impl Model for ScriptedModel {
    fn complete(
        &self,
        request: &ModelRequest,
        meter: &mut dyn FnMut(Attempt) -> Result<(), ModelError>,
        events: &mut dyn FnMut(StreamEvent),
    ) -> impl Future<Output = Result<ModelResponse, ModelError>> {
        self.requests.borrow_mut().push(request.clone());
        let reply = self.next(request);
        async move {
            // Let other tasks (parallel subagents) run between calls.
            tokio::task::yield_now().await;
            let Some(reply) = reply else {
                self.meter(meter, 0)?;
                return Err(ModelError::Protocol(
                    "the script has no more replies".into(),
                ));
            };
            let response = match reply {
                Reply::Respond(r) => {
                    self.meter(meter, 0)?;
                    r
                }
                Reply::RetryThen(failures, r) => {
                    for retry in 0..=failures {
                        self.meter(meter, retry)?;
                        if retry < failures {
                            events(StreamEvent::Notice(
                                "the stream broke; sending again".into(),
                            ));
                        }
                    }
                    r
                }
                Reply::BrokenWithText(partials, r) => {
                    let mut retry = 0;
                    for partial in partials {
                        self.meter(meter, retry)?;
                        events(StreamEvent::TextDelta(partial));
                        events(StreamEvent::Notice(
                            "the stream broke; sending again".into(),
                        ));
                        retry += 1;
                    }
                    self.meter(meter, retry)?;
                    r
                }
                Reply::Fail(e) => {
                    self.meter(meter, 0)?;
                    return Err(e);
                }
                Reply::Hang => {
                    self.meter(meter, 0)?;
                    self.in_flight.set(self.in_flight.get() + 1);
                    return Ok(std::future::pending::<ModelResponse>().await);
                }
            };
            for b in &response.content {
                if let Block::Text { text } = b {
                    events(StreamEvent::TextDelta(text.clone()));
                }
            }
            tokio::task::yield_now().await;
            Ok(response)
        }
    }
}

/// A response with text only.
pub fn text(t: &str, usage: (u64, u64)) -> ModelResponse {
    ModelResponse {
        content: vec![Block::Text { text: t.into() }],
        finish: FinishReason::EndTurn,
        usage: Some(TokenUsage {
            input_tokens: usage.0,
            output_tokens: usage.1,
        }),
    }
}

/// A response that calls tools: `(id, name, input)` each.
pub fn calls(list: &[(&str, &str, serde_json::Value)], usage: (u64, u64)) -> ModelResponse {
    ModelResponse {
        content: list
            .iter()
            .map(|(id, name, input)| Block::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            })
            .collect(),
        finish: FinishReason::ToolUse,
        usage: Some(TokenUsage {
            input_tokens: usage.0,
            output_tokens: usage.1,
        }),
    }
}

/// What the in-memory supervisor saw, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A tool request was written (id, tool).
    Sent(u64, String),
    /// Its answer was handed to the loop.
    Read(u64),
}

/// How long a waiter spins for an answer that never comes before it calls it a deadlock.
const PATIENCE: u32 = 20_000;

/// An in-memory supervisor.
pub struct MockSupervisor {
    /// Answers a tool request.
    pub handler: Box<dyn Fn(&Request) -> Answer>,
    /// Tool answers are released only when this many tool requests are outstanding, then
    /// all of them, in reverse order of their requests. 1: each at once.
    pub hold_until: Cell<usize>,
    /// As the real supervisor does, a request sent with `more` opens a batch: no answer is
    /// released until a request without `more` (or another frame, a journal append) ends it.
    gathering: Cell<bool>,
    /// Each tool request's tool and `more` flag, in the order sent.
    pub mores: RefCell<Vec<(String, bool)>>,
    held: RefCell<Vec<(u64, Answer)>>,
    arrived: RefCell<HashMap<u64, Answer>>,
    /// Ids in the order their answers "arrived".
    pub arrival: RefCell<Vec<u64>>,
    pub events: RefCell<Vec<Event>>,
    pub requests: RefCell<Vec<(u64, Request)>>,
    pub journal: RefCell<Vec<String>>,
    pub ui: RefCell<Vec<UiEvent>>,
    cancel_tx: watch::Sender<bool>,
    cancel_rx: watch::Receiver<bool>,
    /// Cancel when the n-th tool request is sent (1-based; 0 never).
    pub cancel_on_request: Cell<usize>,
    /// Every journal append is answered with an error (the record is still listed in
    /// `journal`, as sent).
    pub journal_fails: Cell<bool>,
    /// Journal answers the loop has read, and how many it had read when each tool request
    /// was sent.
    pub journal_read: Cell<usize>,
    pub journal_read_at_send: RefCell<Vec<usize>>,
    journal_ids: RefCell<Vec<u64>>,
    /// Cancel when the n-th journal answer is read (1-based; 0 never): a cancel the
    /// supervisor sent before it answered that record.
    pub cancel_on_journal_read: Cell<usize>,
}

impl MockSupervisor {
    pub fn new(handler: impl Fn(&Request) -> Answer + 'static) -> MockSupervisor {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        MockSupervisor {
            handler: Box::new(handler),
            hold_until: Cell::new(1),
            gathering: Cell::new(false),
            mores: RefCell::default(),
            held: RefCell::default(),
            arrived: RefCell::default(),
            arrival: RefCell::default(),
            events: RefCell::default(),
            requests: RefCell::default(),
            journal: RefCell::default(),
            ui: RefCell::default(),
            cancel_tx,
            cancel_rx,
            cancel_on_request: Cell::new(0),
            journal_fails: Cell::new(false),
            journal_read: Cell::new(0),
            journal_read_at_send: RefCell::default(),
            journal_ids: RefCell::default(),
            cancel_on_journal_read: Cell::new(0),
        }
    }

    pub fn cancel(&self) {
        self.cancel_tx.send_replace(true);
    }

    /// Tool requests (journal appends left out), in the order sent.
    pub fn tool_requests(&self) -> Vec<Request> {
        self.requests
            .borrow()
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The journal lines, as `&str`.
    pub fn journal_lines(&self) -> Vec<String> {
        self.journal.borrow().clone()
    }

    fn release(&self) {
        let mut held = self.held.borrow_mut();
        if !self.gathering.get() && held.len() >= self.hold_until.get() {
            for (id, a) in held.drain(..).rev() {
                self.arrival.borrow_mut().push(id);
                self.arrived.borrow_mut().insert(id, a);
            }
        }
    }
}

impl Supervisor for MockSupervisor {
    fn send(&self, id: u64, request: Request) -> Result<(), LinkError> {
        self.send_more(id, request, false)
    }

    fn send_more(&self, id: u64, request: Request, more: bool) -> Result<(), LinkError> {
        if let Request::JournalAppend { record } = &request {
            self.journal.borrow_mut().push(record.clone());
            let answer = if self.journal_fails.get() {
                Answer::Error {
                    code: garuda_ipc::ErrorCode::Io,
                    message: "disk full".into(),
                }
            } else {
                Answer::Stored
            };
            self.arrived.borrow_mut().insert(id, answer);
            self.journal_ids.borrow_mut().push(id);
            // Another frame ends a batch being gathered.
            self.gathering.set(false);
            self.release();
            return Ok(());
        }
        self.journal_read_at_send
            .borrow_mut()
            .push(self.journal_read.get());
        self.events
            .borrow_mut()
            .push(Event::Sent(id, request.tool().into()));
        self.mores.borrow_mut().push((request.tool().into(), more));
        let answer = (self.handler)(&request);
        self.requests.borrow_mut().push((id, request));
        self.held.borrow_mut().push((id, answer));
        self.gathering.set(more);
        self.release();
        if self.requests.borrow().len() == self.cancel_on_request.get() {
            self.cancel();
        }
        Ok(())
    }

    async fn answer(&self, id: u64) -> Result<Answer, LinkError> {
        for _ in 0..PATIENCE {
            let got = self.arrived.borrow_mut().remove(&id);
            if let Some(a) = got {
                if self.journal_ids.borrow().contains(&id) {
                    self.journal_read.set(self.journal_read.get() + 1);
                    if self.journal_read.get() == self.cancel_on_journal_read.get() {
                        self.cancel();
                    }
                } else {
                    self.events.borrow_mut().push(Event::Read(id));
                }
                return Ok(a);
            }
            tokio::task::yield_now().await;
        }
        // The loop waits for an answer that is held until more requests are sent: it
        // awaited before sending them all. A test failure, not a hang.
        Err(LinkError::Closed)
    }

    fn ui(&self, event: UiEvent) {
        self.ui.borrow_mut().push(event);
    }

    fn cancelled(&self) -> impl Future<Output = ()> {
        let mut rx = self.cancel_rx.clone();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    fn is_cancelled(&self) -> bool {
        *self.cancel_rx.borrow()
    }
}
