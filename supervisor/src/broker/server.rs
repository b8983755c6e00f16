//! The supervisor's end of the IPC channel: reads the agent's frames, applies the state table
//! ([`super::state`]), hands allowed tool requests to a [`ToolHost`], answers, and records.
//!
//! Fail closed: a frame that does not parse, a length outside the cap, a frame that stalls
//! half-sent (either way: one the agent does not read is as bad as one it does not finish),
//! or a frame the table does not allow in the current state is a protocol
//! violation. The broker then audits it (state, frame, reason), kills the agent through the
//! [`Killer`] it was given, closes the socket and returns [`BrokerError::Violation`] so the
//! caller can tell the user. A request the policy refuses is not a violation: the tool host
//! answers it with `Answer::Error`, which the model reads.
//!
//! Requests are handled in the order they arrive, and each id is answered in that order. A
//! step's read-only requests that the agent marks `more` (each but the last) are gathered as
//! one batch (at most [`MAX_BATCH`]; the agent's display events between them pass through)
//! and handed to [`ToolHost::call_batch`], which may run them concurrently; anything else that
//! arrives while gathering ends the batch and is handled after it, as it came.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use garuda_ipc::{
    body_len, decode, encode_into, AgentFrame, Answer, ErrorCode, FrameError, Request, Start,
    StopReason, SupervisorFrame, UiEvent, Usage, PROTOCOL_VERSION,
};
use serde_json::{json, Value};

use super::state::{after_agent, rule, Kind, Rule, State};

/// How long the agent has to send `hello` after it starts.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// How long a frame may take to arrive once its first byte has: a half-sent frame would
/// otherwise hold the broker (and the user's Ctrl-C) forever.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(10);
/// How long the agent has to end the turn after `cancel`.
pub const CANCEL_DEADLINE: Duration = Duration::from_secs(10);
/// How often the broker looks at the cancel flag while it waits for a frame.
const POLL: Duration = Duration::from_millis(50);

/// What runs an allowed tool request: the file tools, the executors, the journal.
pub trait ToolHost {
    /// Runs `request` (already allowed by the state table) and returns its answer and the
    /// audit event that describes the decision and the effect (`None`: nothing to record,
    /// for the journal).
    fn call(&mut self, request: &Request) -> (Answer, Option<Value>);

    /// [`ToolHost::call`] for a `run_command`, with `release` called before the command's
    /// program may start (the audit intent's sync: see
    /// [`crate::executor::Executor::run_released`]); a command that does not run never calls
    /// it. By default `release` runs first, and its failure is the answer.
    fn call_released(
        &mut self,
        request: &Request,
        release: crate::executor::Release<'_>,
    ) -> (Answer, Option<Value>) {
        match release() {
            Ok(()) => self.call(request),
            Err(reason) => (not_released(&reason), None),
        }
    }

    /// Called once a command's answer has been sent: a host may get ready for the next
    /// command here, off the path of every answer. By default nothing.
    fn after_command(&mut self) {}

    /// Runs a batch of read-only requests (`read_file`, `glob`, `grep`) the agent sent
    /// together; the answers in the same order. A host may run them concurrently; by default
    /// one after the other.
    fn call_batch(&mut self, requests: &[Request]) -> Vec<(Answer, Option<Value>)> {
        requests.iter().map(|r| self.call(r)).collect()
    }
}

/// Most requests run as one batch.
pub const MAX_BATCH: usize = 16;

/// The requests the agent may send as a batch (`more`): they only read.
fn batchable(request: &Request) -> bool {
    matches!(
        request,
        Request::ReadFile { .. } | Request::Glob { .. } | Request::Grep { .. }
    )
}

/// Where the broker writes its audit events (the session's audit log).
pub trait AuditSink {
    /// Appends one event of `kind`.
    fn record(&mut self, kind: &str, event: Value) -> Result<(), String>;

    /// Appends one event of `kind` and makes it durable before returning: the intent of a
    /// command, written before the command can do anything. By default an ordinary append.
    fn record_durable(&mut self, kind: &str, event: Value) -> Result<(), String> {
        self.record(kind, event)
    }

    /// Makes everything recorded so far durable (`fdatasync`): the release of a command
    /// whose intent was recorded with [`AuditSink::record`]. Required: a sink that forgot it
    /// would silently run commands with their intent not on disk.
    fn make_durable(&mut self) -> Result<(), String>;
}

/// The answer for a command that was not started because its intent could not be made
/// durable (the broker then stops: see [`BrokerError::Audit`]).
pub fn not_released(reason: &str) -> Answer {
    Answer::Error {
        code: garuda_ipc::ErrorCode::Io,
        message: format!("the command was not started: {reason}"),
    }
}

/// Ends the agent process (or, in a test, whatever stands for it).
pub type Killer = Box<dyn FnMut() + Send>;

/// Why the broker stopped.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The agent broke the protocol; it was killed and the violation audited.
    #[error("the agent broke the protocol in state {state:?}: {reason}; it was stopped")]
    Violation {
        /// The state the frame arrived in.
        state: State,
        /// What was wrong.
        reason: String,
    },
    /// The agent closed the channel (it exited or crashed).
    #[error("the agent closed its channel in state {0:?}")]
    Closed(State),
    /// The socket failed on the supervisor's side.
    #[error("the agent's channel failed: {0}")]
    Channel(#[source] std::io::Error),
    /// An audit event could not be written: the broker stops (nothing runs unrecorded).
    #[error("cannot write the audit log: {0}")]
    Audit(String),
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSummary {
    /// The agent's stop reason.
    pub reason: StopReason,
    /// Tokens the turn used.
    pub usage: Usage,
    /// Tool requests answered.
    pub requests: u64,
}

/// The supervisor's side of one agent's channel.
pub struct Broker<A: AuditSink> {
    stream: UnixStream,
    state: State,
    audit: A,
    kill: Killer,
    /// Reused for every frame received and sent: a 1 MB answer then costs no allocation.
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// The socket's read timeout is set to the poll interval.
    polling: bool,
    /// The socket's write timeout is set to the poll interval.
    write_timeout: bool,
}

impl<A: AuditSink> Broker<A> {
    /// The audit sink the broker records to.
    pub fn audit(&self) -> &A {
        &self.audit
    }

    /// The audit sink, to record what the person asked of the tools directly (the chat's
    /// `!command` and `@path`).
    pub fn audit_mut(&mut self) -> &mut A {
        &mut self.audit
    }

    /// Waits for the agent's `hello`, checks its version, and sends `start`.
    pub fn accept(
        stream: UnixStream,
        start: &Start,
        audit: A,
        kill: Killer,
    ) -> Result<Broker<A>, BrokerError> {
        let mut broker = Broker {
            stream,
            state: State::AwaitHello,
            audit,
            kill,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            polling: false,
            write_timeout: false,
        };
        let deadline = Instant::now() + HELLO_DEADLINE;
        let frame = match broker.next_frame(None, Some(deadline))? {
            Some(frame) => frame,
            None => return Err(broker.violation("no hello before the deadline".into(), None)),
        };
        broker.admit(&frame)?;
        match frame {
            AgentFrame::Hello { protocol } if protocol == PROTOCOL_VERSION => {}
            AgentFrame::Hello { protocol } => {
                return Err(broker.violation(
                    format!("protocol {protocol}, expected {PROTOCOL_VERSION}"),
                    Some(Kind::Hello),
                ))
            }
            // `admit` lets only hello through in this state.
            _ => return Err(broker.violation("not a hello".into(), None)),
        }
        broker.state = after_agent(broker.state, Kind::Hello);
        broker.record("agent_hello", json!({ "protocol": PROTOCOL_VERSION }))?;
        broker.send(&SupervisorFrame::Start(start.clone()))?;
        Ok(broker)
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Runs one turn: sends `prompt`, answers the agent's requests through `tools`, shows its
    /// display events through `ui`, and returns when the agent ends the turn. When `cancel`
    /// becomes true the agent is sent `cancel` and has [`CANCEL_DEADLINE`] to end the turn.
    pub fn turn(
        &mut self,
        prompt: &str,
        tools: &mut dyn ToolHost,
        ui: &mut dyn FnMut(&UiEvent),
        cancel: &AtomicBool,
    ) -> Result<TurnSummary, BrokerError> {
        if self.state != State::Idle {
            return Err(BrokerError::Violation {
                state: self.state,
                reason: "a prompt outside the idle state (a supervisor bug)".into(),
            });
        }
        self.send(&SupervisorFrame::UserPrompt {
            text: prompt.to_owned(),
        })?;
        self.state = State::InTurn;
        let mut requests = 0u64;
        let mut cancel_deadline = None;
        // A frame read while gathering a batch that is not part of it.
        let mut lookahead: Option<AgentFrame> = None;
        loop {
            let next = match lookahead.take() {
                Some(frame) => Some(frame),
                None => self.next_frame(Some(cancel), cancel_deadline)?,
            };
            let frame = match next {
                Some(frame) => frame,
                None if cancel_deadline.is_some() => {
                    return Err(self.violation("the turn did not end after cancel".into(), None))
                }
                None => {
                    // The cancel flag was raised.
                    self.send(&SupervisorFrame::Cancel)?;
                    self.record("turn_cancel", json!({}))?;
                    self.state = State::Cancelling;
                    cancel_deadline = Some(Instant::now() + CANCEL_DEADLINE);
                    continue;
                }
            };
            let kind = self.admit(&frame)?;
            match frame {
                AgentFrame::Request {
                    id,
                    request,
                    more: true,
                } if batchable(&request) && rule(self.state, kind) == Rule::Allow => {
                    // The agent sent more reads of the same step: gather them (its display
                    // events go through as they come) and run them together.
                    let mut batch = vec![(id, request)];
                    let mut more = true;
                    while more && batch.len() < MAX_BATCH {
                        let Some(next) = self.next_frame(Some(cancel), cancel_deadline)? else {
                            break;
                        };
                        let next_kind = self.admit(&next)?;
                        match next {
                            AgentFrame::Ui { event } => ui(&event),
                            AgentFrame::Request {
                                id,
                                request,
                                more: further,
                            } if batchable(&request)
                                && rule(self.state, next_kind) == Rule::Allow =>
                            {
                                batch.push((id, request));
                                more = further;
                            }
                            other => {
                                lookahead = Some(other);
                                break;
                            }
                        }
                    }
                    let (ids, batch): (Vec<u64>, Vec<Request>) = batch.into_iter().unzip();
                    let results = tools.call_batch(&batch);
                    for (id, (answer, event)) in ids.into_iter().zip(results) {
                        if let Some(mut event) = event {
                            if let Some(map) = event.as_object_mut() {
                                map.insert("id".into(), json!(id));
                                map.insert("answer".into(), json!(answer_kind(&answer)));
                                map.insert("batch".into(), json!(batch.len()));
                            }
                            self.record("tool_call", event)?;
                        }
                        requests += 1;
                        self.send_answer(id, answer)?;
                    }
                }
                AgentFrame::Request { id, request, .. } => {
                    let command = matches!(request, Request::RunCommand { .. });
                    let answer = if rule(self.state, kind) == Rule::RefuseCancelled {
                        self.record(
                            "tool_call",
                            json!({"id": id, "tool": request.tool(), "refused": "turn cancelled"}),
                        )?;
                        Answer::Error {
                            code: ErrorCode::Rejected,
                            message: "the turn was cancelled; nothing was done".into(),
                        }
                    } else {
                        let (answer, event) = if let Request::RunCommand { command, .. } = &request
                        {
                            // As `garuda sandbox` does: the command is on record, durably,
                            // before it can do anything (its decision and result follow).
                            // The sync is the release: it runs while the sandbox is built.
                            self.audit
                                .record(
                                    "command_intent",
                                    json!({"id": id, "command": garuda_text::visible(command)}),
                                )
                                .map_err(BrokerError::Audit)?;
                            let audit = &mut self.audit;
                            let mut unsynced = None;
                            let mut released = false;
                            let done = tools.call_released(&request, &mut || {
                                let synced = audit.make_durable();
                                match &synced {
                                    Ok(()) => released = true,
                                    Err(e) => unsynced = Some(e.clone()),
                                }
                                synced
                            });
                            if let Some(e) = unsynced {
                                // Nothing runs unrecorded: the command was stopped, and so
                                // is the broker.
                                return Err(BrokerError::Audit(e));
                            }
                            if matches!(done.0, Answer::CommandDone(_)) && !released {
                                // A tool host that ran a command without its release: the
                                // intent may not have been on disk. Fail loudly.
                                return Err(BrokerError::Audit(
                                    "a command ran without its intent being made durable first"
                                        .into(),
                                ));
                            }
                            done
                        } else {
                            tools.call(&request)
                        };
                        if let Some(mut event) = event {
                            if let Some(map) = event.as_object_mut() {
                                map.insert("id".into(), json!(id));
                                map.insert("answer".into(), json!(answer_kind(&answer)));
                            }
                            self.record("tool_call", event)?;
                        }
                        answer
                    };
                    requests += 1;
                    self.send_answer(id, answer)?;
                    if command {
                        tools.after_command();
                    }
                }
                AgentFrame::Ui { event } => ui(&event),
                AgentFrame::TurnEnd { reason, usage } => {
                    self.record(
                        "turn_end",
                        json!({
                            "reason": reason,
                            "input_tokens": usage.input_tokens,
                            "output_tokens": usage.output_tokens,
                            "requests": requests,
                        }),
                    )?;
                    self.state = after_agent(self.state, kind);
                    return Ok(TurnSummary {
                        reason,
                        usage,
                        requests,
                    });
                }
                AgentFrame::Hello { .. } => {
                    return Err(self.violation("a second hello".into(), Some(kind)))
                }
            }
        }
    }

    /// Serves the agent while no turn runs, for up to `wait`: what the table allows then
    /// (`journal_append`) is handed to `tools` and answered; anything else is a violation.
    /// The chat calls this while the user types.
    pub fn serve_idle(
        &mut self,
        tools: &mut dyn ToolHost,
        wait: Duration,
    ) -> Result<(), BrokerError> {
        let deadline = Instant::now() + wait;
        while let Some(frame) = self.next_frame(None, Some(deadline))? {
            let kind = self.admit(&frame)?;
            match frame {
                AgentFrame::Request { id, request, .. } => {
                    let (answer, _) = tools.call(&request);
                    self.send_answer(id, answer)?;
                }
                // `admit` lets only the journal through while idle.
                _ => return Err(self.violation("not allowed while idle".into(), Some(kind))),
            }
        }
        Ok(())
    }

    /// Ends the session: sends `shutdown` and closes the channel.
    pub fn shutdown(mut self) -> Result<(), BrokerError> {
        let sent = self.send(&SupervisorFrame::Shutdown);
        self.state = State::Closed;
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        sent
    }

    /// Applies the state table to `frame`: its kind if allowed (or refused as cancelled),
    /// else the violation.
    fn admit(&mut self, frame: &AgentFrame) -> Result<Kind, BrokerError> {
        let kind = Kind::of(frame);
        match rule(self.state, kind) {
            Rule::Allow | Rule::RefuseCancelled => Ok(kind),
            Rule::Violation(why) => Err(self.violation(why.into(), Some(kind))),
        }
    }

    /// Reads the next frame. `Ok(None)` when `cancel` became true (and `deadline` was not
    /// given) or when `deadline` passed, both only checked before a frame has begun; a frame
    /// that does not parse, or does not arrive whole within [`FRAME_DEADLINE`] of its first
    /// byte, is a violation.
    fn next_frame(
        &mut self,
        cancel: Option<&AtomicBool>,
        deadline: Option<Instant>,
    ) -> Result<Option<AgentFrame>, BrokerError> {
        let mut prefix = [0u8; 4];
        let mut got = 0;
        let mut began = None;
        while got < prefix.len() {
            if got == 0 {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                if deadline.is_none() && cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                    return Ok(None);
                }
            }
            match self.read_some(&mut prefix[got..], began)? {
                Some(0) if got == 0 => return Err(BrokerError::Closed(self.state)),
                Some(0) => {
                    return Err(
                        self.violation(FrameError::Truncated { got, want: 4 }.to_string(), None)
                    )
                }
                Some(n) => {
                    got += n;
                    began.get_or_insert_with(Instant::now);
                }
                None => {}
            }
        }
        let len = match body_len(prefix) {
            Ok(len) => len,
            Err(e) => return Err(self.violation(e.to_string(), None)),
        };
        let mut body = std::mem::take(&mut self.inbuf);
        body.clear();
        body.resize(len, 0);
        let mut got = 0;
        while got < len {
            match self.read_some(&mut body[got..], began)? {
                Some(0) => {
                    return Err(
                        self.violation(FrameError::Truncated { got, want: len }.to_string(), None)
                    )
                }
                Some(n) => got += n,
                None => {}
            }
        }
        let frame = decode::<AgentFrame>(&body);
        self.inbuf = body;
        match frame {
            Ok(frame) => Ok(Some(frame)),
            Err(e) => Err(self.violation(e.to_string(), None)),
        }
    }

    /// One `read` into `buf`: `Some(n)` bytes (0 at the end of the stream), `None` when
    /// nothing came within the poll interval. Once a frame has `began`, a frame that is not
    /// whole [`FRAME_DEADLINE`] later is a violation, however slowly its bytes trickle in.
    fn read_some(
        &mut self,
        buf: &mut [u8],
        began: Option<Instant>,
    ) -> Result<Option<usize>, BrokerError> {
        if began.is_some_and(|b| b.elapsed() >= FRAME_DEADLINE) {
            return Err(self.violation("a frame stalled half-sent".into(), None));
        }
        if !self.polling {
            // Set once: a syscall per read would be a measurable part of a small round trip.
            self.stream
                .set_read_timeout(Some(POLL))
                .map_err(BrokerError::Channel)?;
            self.polling = true;
        }
        match self.stream.read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(BrokerError::Channel(e)),
        }
    }

    /// Sends the answer to request `id`. An answer whose frame would be over the cap (a
    /// thousand long paths full of escaped control characters can be) becomes an error
    /// answer the model can read, rather than an unaudited end of the session.
    fn send_answer(&mut self, id: u64, answer: Answer) -> Result<(), BrokerError> {
        match encode_into(&mut self.outbuf, &SupervisorFrame::Answer { id, answer }) {
            Ok(()) => self.write_out(),
            Err(FrameError::TooLarge(bytes)) => self.send(&SupervisorFrame::Answer {
                id,
                answer: Answer::Error {
                    code: ErrorCode::TooLarge,
                    message: format!(
                        "the answer is {bytes} bytes, over the channel's frame cap: ask for less"
                    ),
                },
            }),
            Err(e) => Err(BrokerError::Channel(std::io::Error::other(e.to_string()))),
        }
    }

    fn send(&mut self, frame: &SupervisorFrame) -> Result<(), BrokerError> {
        // Only the supervisor's own frames are written: one over the cap is its bug, and the
        // conversation cannot go on in step.
        encode_into(&mut self.outbuf, frame)
            .map_err(|e| BrokerError::Channel(std::io::Error::other(e.to_string())))?;
        self.write_out()
    }

    /// Writes `outbuf` whole. An agent that never reads its end would otherwise hold the
    /// supervisor in a blocking write forever once the socket's buffer is full (a large
    /// answer): a frame must be taken whole within [`FRAME_DEADLINE`], as one sent to the
    /// broker must arrive whole within it.
    fn write_out(&mut self) -> Result<(), BrokerError> {
        if !self.write_timeout {
            // Set once, as the read timeout: each write then blocks at most the poll interval.
            self.stream
                .set_write_timeout(Some(POLL))
                .map_err(BrokerError::Channel)?;
            self.write_timeout = true;
        }
        let began = Instant::now();
        let mut sent = 0;
        while sent < self.outbuf.len() {
            if began.elapsed() >= FRAME_DEADLINE {
                return Err(
                    self.violation("the agent did not read a frame sent to it".into(), None)
                );
            }
            match self.stream.write(&self.outbuf[sent..]) {
                Ok(0) => return Err(BrokerError::Closed(self.state)),
                Ok(n) => sent += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                    return Err(BrokerError::Closed(self.state))
                }
                Err(e) => return Err(BrokerError::Channel(e)),
            }
        }
        Ok(())
    }

    fn record(&mut self, kind: &str, event: Value) -> Result<(), BrokerError> {
        self.audit.record(kind, event).map_err(BrokerError::Audit)
    }

    /// Kills the agent, closes the channel, audits the violation and returns it. The reason
    /// can quote what the agent sent (a parser's "unknown variant `…`"), so it is escaped
    /// here, once, for the audit line and for the error the user is shown.
    fn violation(&mut self, reason: String, kind: Option<Kind>) -> BrokerError {
        (self.kill)();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let state = self.state;
        self.state = State::Closed;
        let reason = garuda_text::visible(&reason).into_owned();
        let event = json!({
            "state": format!("{state:?}"),
            "frame": kind.map(|k| format!("{k:?}")),
            "reason": reason,
        });
        if let Err(e) = self.audit.record("protocol_violation", event) {
            return BrokerError::Audit(format!(
                "{e} (while recording a protocol violation: {reason})"
            ));
        }
        BrokerError::Violation { state, reason }
    }
}

/// The kind of an answer, for the audit line (never its content).
fn answer_kind(answer: &Answer) -> Value {
    match answer {
        Answer::Error { code, .. } => json!({ "error": code }),
        Answer::FileText { .. } => json!("file_text"),
        Answer::Written { .. } => json!("written"),
        Answer::Paths { .. } => json!("paths"),
        Answer::Matches { .. } => json!("matches"),
        Answer::CommandDone(_) => json!("command_done"),
        Answer::Stored => json!("stored"),
    }
}

impl AuditSink for garuda_audit::SessionWriter {
    fn record(&mut self, kind: &str, event: Value) -> Result<(), String> {
        self.append(kind, event)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn make_durable(&mut self) -> Result<(), String> {
        garuda_audit::SessionWriter::make_durable(self).map_err(|e| e.to_string())
    }
}
