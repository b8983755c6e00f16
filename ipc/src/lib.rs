//! The whole narrow API between the Garuda supervisor and the confined agent, in one file.
//!
//! The agent process talks to the model and holds no right of its own: the kernel stops it
//! from opening files, executing programs or reaching any host but the model's. Everything it
//! wants done it asks for here, over one `socketpair`, and the supervisor decides, does and
//! records. A reviewer who reads this file has read every message that can cross.
//!
//! # Wire format
//!
//! A connection is a sequence of **frames**: a 4-byte big-endian length, then that many bytes
//! of UTF-8 JSON (one [`AgentFrame`] from the agent, one [`SupervisorFrame`] from the
//! supervisor). A length of 0 or above [`MAX_FRAME_BYTES`] ends the connection before a
//! byte of the body is read or allocated. Every struct and enum here denies unknown fields,
//! so a message means exactly what this file says or it does not parse.
//!
//! # Conversation
//!
//! 1. The agent's first frame is [`AgentFrame::Hello`] carrying [`PROTOCOL_VERSION`]. The
//!    supervisor answers [`SupervisorFrame::Start`] (model endpoint and key, limits, system
//!    prompt material), or closes the connection if the version differs.
//! 2. The supervisor sends [`SupervisorFrame::UserPrompt`]; the turn runs. During it the agent
//!    sends [`AgentFrame::Request`]s, each with an id of its own choosing that is unique
//!    among its outstanding requests, and the supervisor sends one
//!    [`SupervisorFrame::Answer`] per request, with the same id, in any order (read-only
//!    tools may run in parallel). [`AgentFrame::Ui`] events are display only and get no
//!    answer.
//! 3. The agent ends the turn with [`AgentFrame::TurnEnd`]. [`SupervisorFrame::Cancel`] asks
//!    it to stop early (it still ends with `TurnEnd`); [`SupervisorFrame::Shutdown`] ends the
//!    session.
//!
//! Which frame is allowed in which state is the supervisor's table (`docs/ipc.md`): a
//! malformed, oversized, unknown or out-of-state frame ends the agent and is audited. A
//! request the policy refuses is an ordinary [`Answer::Error`] the model can read.
//!
//! # What is deliberately missing
//!
//! No request fetches a URL (the agent reaches the model, and only the model, through the
//! supervisor's allowlist proxy), and none asks the user anything: approvals are the
//! supervisor's alone, asked on the terminal it owns, so the agent can neither see, forge
//! nor answer them. The agent never names an absolute path: [`ProjectPath`] is relative to
//! the project and the supervisor resolves it beneath the project's root.
//!
//! # Codec
//!
//! [`write_frame`] and [`read_frame`] (blocking, `std::io`) and, with the `tokio` feature,
//! [`write_frame_async`] and [`read_frame_async`] share [`encode`] and [`decode`], so both
//! sides and both styles apply the same cap and the same parser. Nothing here performs I/O
//! policy.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Version of the wire protocol, carried by the agent's first frame. The supervisor runs
/// only an agent that speaks exactly its own version: both are the same binary, so a
/// difference means something replaced one of them.
pub const PROTOCOL_VERSION: u32 = 1;

/// Hard cap on one frame's body, request or answer. A larger length prefix ends the
/// connection before anything is allocated for it.
pub const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

/// Longest [`ProjectPath`] in bytes (Linux's `PATH_MAX` less room for the root).
pub const MAX_PATH_BYTES: usize = 4000;

/// Longest component of a [`ProjectPath`] in bytes (Linux's `NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_false(b: &bool) -> bool {
    !*b
}

// ---------------------------------------------------------------------------------------
// Agent → supervisor
// ---------------------------------------------------------------------------------------

/// Every frame the agent can send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum AgentFrame {
    /// The first frame of a connection, and only the first.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        protocol: u32,
    },
    /// A tool call; answered by exactly one [`SupervisorFrame::Answer`] with the same `id`.
    Request {
        /// Chosen by the agent; unique among its outstanding requests.
        id: u64,
        /// What is asked.
        request: Request,
        /// More read-only requests of the same step follow at once: the supervisor may run
        /// them together (concurrently) and answers each in the order sent. Only meaningful
        /// on `read_file`, `glob` and `grep`; absent means `false`.
        #[serde(default, skip_serializing_if = "is_false")]
        more: bool,
    },
    /// Something to show the user. Never answered; never changes anything.
    Ui {
        /// The event.
        event: UiEvent,
    },
    /// The turn is over (finished, stopped by a limit, or cancelled).
    TurnEnd {
        /// Why it ended.
        reason: StopReason,
        /// Tokens the turn used.
        usage: Usage,
    },
}

/// A tool call. The supervisor checks each against the policy's permission engine, writes the
/// decision and its effect to the session's audit log, and answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Read a text file of the project, or a range of its lines.
    ReadFile {
        /// Relative to the project root.
        path: String,
        /// First line to return, 1-based; the file's start when absent.
        #[serde(default)]
        offset: Option<u64>,
        /// Most lines to return; the supervisor's own cap when absent.
        #[serde(default)]
        limit: Option<u64>,
    },
    /// Create or replace a file with `content`.
    WriteFile {
        /// Relative to the project root.
        path: String,
        /// The whole new content.
        content: String,
    },
    /// Replace `old` by `new` in a file: once (and `old` must occur exactly once) or, with
    /// `replace_all`, everywhere.
    EditFile {
        /// Relative to the project root.
        path: String,
        /// Text to find; not empty.
        old: String,
        /// Replacement.
        new: String,
        /// Replace every occurrence instead of exactly one.
        #[serde(default)]
        replace_all: bool,
    },
    /// Paths of the project matching a glob, `.gitignore` respected.
    Glob {
        /// A glob such as `src/**/*.rs`.
        pattern: String,
        /// Folder to search under, relative to the project root; the root when absent.
        #[serde(default)]
        path: Option<String>,
    },
    /// Lines of the project's files matching a regular expression, `.gitignore` respected.
    Grep {
        /// A regular expression (Rust `regex` syntax).
        pattern: String,
        /// Folder or file to search, relative to the project root; the root when absent.
        #[serde(default)]
        path: Option<String>,
        /// Only files whose path matches this glob.
        #[serde(default)]
        glob: Option<String>,
        /// Match without regard to case.
        #[serde(default)]
        case_insensitive: bool,
    },
    /// Run a command line through the executor, exactly as `garuda sandbox` does.
    RunCommand {
        /// The command line, as the model wrote it.
        command: String,
        /// Seconds before the command is killed; the policy's default when absent.
        #[serde(default)]
        timeout_secs: Option<u64>,
        /// Ask to run outside the sandbox. The user is asked; the strict profile refuses.
        #[serde(default)]
        outside_sandbox: bool,
    },
    /// Append one record to the session's journal (the conversation, for resume and replay).
    /// The supervisor stores it with its secrets redacted (the audit log's redactor); it
    /// never decides anything on it. A record that is not one JSON value is refused.
    JournalAppend {
        /// One JSON record, as text.
        record: String,
    },
}

impl Request {
    /// The tool's wire name (the `tool` field: `read_file`, `run_command`…).
    pub fn tool(&self) -> &'static str {
        match self {
            Request::ReadFile { .. } => "read_file",
            Request::WriteFile { .. } => "write_file",
            Request::EditFile { .. } => "edit_file",
            Request::Glob { .. } => "glob",
            Request::Grep { .. } => "grep",
            Request::RunCommand { .. } => "run_command",
            Request::JournalAppend { .. } => "journal_append",
        }
    }
}

/// Display-only events of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum UiEvent {
    /// More of the model's visible answer.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// A tool call's progress line.
    ToolProgress {
        /// The request this is about.
        id: u64,
        /// One line of progress.
        text: String,
    },
    /// Tokens used so far in the session.
    Usage {
        /// The running total.
        usage: Usage,
    },
    /// The last `bytes` of visible text sent in this model call are withdrawn: its stream
    /// broke and the request is sent again, so the answer starts over. A display that already
    /// showed them keeps them (a notice said why); a final answer (`garuda -p`'s `result`)
    /// drops them.
    TextRetracted {
        /// Bytes of UTF-8 text withdrawn, counted from the end of what was sent.
        bytes: u64,
    },
    /// A notice to show once (a retried stream, a raised output limit).
    Notice {
        /// The notice.
        text: String,
    },
}

/// Token counts as the model's API reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    Done,
    /// The step limit of [`Limits::max_steps`] was reached.
    MaxSteps,
    /// The token budget of [`Limits::token_budget`] was spent.
    TokenBudget,
    /// The same tool call came three times in a row.
    RepeatedCalls,
    /// The answer hit the output limit after every recovery.
    MaxTokens,
    /// The model refused.
    Refusal,
    /// [`SupervisorFrame::Cancel`] arrived.
    Cancelled,
    /// The model's API failed after its retries.
    ModelError,
}

// ---------------------------------------------------------------------------------------
// Supervisor → agent
// ---------------------------------------------------------------------------------------

/// Every frame the supervisor can send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SupervisorFrame {
    /// The answer to [`AgentFrame::Hello`]: everything the agent needs to work.
    Start(Start),
    /// The user's prompt: a turn begins.
    UserPrompt {
        /// The prompt.
        text: String,
    },
    /// The answer to the request with the same id.
    Answer {
        /// The request's id.
        id: u64,
        /// Its result.
        answer: Answer,
    },
    /// Stop the turn early (the user pressed Ctrl-C). The agent ends it with
    /// [`AgentFrame::TurnEnd`] and [`StopReason::Cancelled`].
    Cancel,
    /// The session is over: the agent exits without another frame.
    Shutdown,
}

/// What the agent needs to talk to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// The model's API.
    pub model: ModelEndpoint,
    /// The session's limits.
    pub limits: Limits,
    /// Text the system prompt is built from (rules, the sandbox note, instruction files).
    pub system_prompt: String,
    /// Tools offered to the model; `run_command`'s `outside_sandbox` is absent under strict.
    pub tools: Vec<ToolSpec>,
    /// The model's context window in tokens (compaction runs at 80 % of it); the agent's
    /// default when absent.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// `--resume`: the session's journal records so far, oldest first, from which the agent
    /// rebuilds the same messages and what the budget already spent. Empty for a new session.
    #[serde(default)]
    pub resume: Vec<String>,
}

/// One model API. The key travels only here: never in an environment, journal or audit line.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEndpoint {
    /// Which wire format.
    pub api: ModelApi,
    /// Base URL, for example `https://api.anthropic.com`.
    pub base_url: String,
    /// Model name as the API knows it.
    pub model: String,
    /// The API key; empty for a local server that needs none.
    pub api_key: String,
    /// `host:port` of the supervisor's proxy, which allows exactly the model's host.
    pub proxy: String,
}

impl std::fmt::Debug for ModelEndpoint {
    /// Never prints the key: a `{:?}` of a frame may reach a log or an error message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEndpoint")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &"<redacted>")
            .field("proxy", &self.proxy)
            .finish()
    }
}

/// Wire format of a model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// Anthropic's Messages API.
    AnthropicMessages,
    /// OpenAI's Chat Completions API and the servers compatible with it.
    OpenaiChat,
}

/// Limits of a session, enforced by the agent and checked again by the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most model calls in one turn.
    pub max_steps: u32,
    /// Most tokens, input and output, in the session.
    pub token_budget: u64,
    /// `max_tokens` of a model call.
    pub max_output_tokens: u32,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Name, for example `read_file`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input, as text.
    pub input_schema: String,
}

/// The result of a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// [`Request::ReadFile`]'s result.
    FileText {
        /// The lines asked for, each with its newline; empty when `unchanged`.
        text: String,
        /// First line returned, 1-based.
        first_line: u64,
        /// Lines in the whole file.
        total_lines: u64,
        /// These lines of this file were already sent in this session and the file has not
        /// changed since, so they are not sent again.
        unchanged: bool,
    },
    /// [`Request::WriteFile`]'s or [`Request::EditFile`]'s result.
    Written {
        /// Bytes of the file now.
        bytes: u64,
        /// The file did not exist before.
        created: bool,
        /// Occurrences replaced (0 for a write).
        replacements: u64,
    },
    /// [`Request::Glob`]'s result: project-relative paths, sorted.
    Paths {
        /// The paths.
        paths: Vec<String>,
        /// More matched than were returned.
        truncated: bool,
    },
    /// [`Request::Grep`]'s result.
    Matches {
        /// The matching lines.
        matches: Vec<GrepMatch>,
        /// More matched than were returned.
        truncated: bool,
    },
    /// [`Request::RunCommand`]'s result.
    CommandDone(CommandDone),
    /// [`Request::JournalAppend`]'s result: the record is stored.
    Stored,
    /// The request was refused or failed; `message` is written for the model to read.
    Error {
        /// The class of failure.
        code: ErrorCode,
        /// What happened and, where there is one, what would be allowed instead.
        message: String,
    },
}

/// One line [`Request::Grep`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepMatch {
    /// Project-relative path.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line, without its newline.
    pub text: String,
}

/// How a command ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandDone {
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// It was killed at its timeout.
    pub timed_out: bool,
    /// Its standard output and error, interleaved, possibly cut.
    pub output: String,
    /// `output` was cut to the supervisor's cap.
    pub output_truncated: bool,
    /// Hosts the proxy refused, escaped for display.
    pub blocked_hosts: Vec<String>,
    /// In staged mode, what became of the change (for example "kept for review").
    pub staged: Option<String>,
}

/// Class of a refused or failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The policy denied it (a secret, `.git` internals, `.garuda/`, a deny rule, strict).
    Denied,
    /// The user said no.
    Rejected,
    /// The path or argument is malformed (absolute, `..`, too long, a bad pattern).
    InvalidArgument,
    /// No such file.
    NotFound,
    /// A link on the way leads out of the project.
    OutsideProject,
    /// The file is not text.
    NotText,
    /// `edit_file`'s `old` occurs zero times, or more than once without `replace_all`.
    EditMismatch,
    /// Too large to read or write in one request.
    TooLarge,
    /// Any other failure of the supervisor's I/O.
    Io,
}

// ---------------------------------------------------------------------------------------
// Project paths
// ---------------------------------------------------------------------------------------

/// A path relative to the project root, in its one accepted spelling: non-empty components
/// separated by single `/`, none of them `.` or `..`, no NUL, not absolute, no trailing
/// slash, at most [`MAX_PATH_BYTES`] bytes and [`MAX_NAME_BYTES`] per component. Anything
/// else is refused rather than normalised, so that the path the supervisor checks is the
/// one the model wrote. Links are not this type's concern: the supervisor resolves the path
/// beneath the project root and refuses one that leaves it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProjectPath(String);

/// Why a string is not a [`ProjectPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `""`.
    #[error("the path is empty")]
    Empty,
    /// Starts with `/`.
    #[error("{0:?} is absolute: paths are relative to the project root")]
    Absolute(String),
    /// Has a `..` component.
    #[error("{0:?} has a '..' component: paths may not leave the project")]
    ParentComponent(String),
    /// Has a `.` component, an empty one (`a//b`) or a trailing slash.
    #[error("{0:?} is not in its plain form (no '.', '//' or trailing '/')")]
    NotPlain(String),
    /// Has a NUL byte.
    #[error("the path has a NUL byte")]
    Nul,
    /// Longer than [`MAX_PATH_BYTES`] or with a component longer than [`MAX_NAME_BYTES`].
    #[error("the path is too long ({0} bytes, or a component over 255)")]
    TooLong(usize),
}

impl ProjectPath {
    /// Parses the one accepted spelling; see the type's documentation.
    pub fn parse(path: &str) -> Result<ProjectPath, PathError> {
        if path.is_empty() {
            return Err(PathError::Empty);
        }
        if path.contains('\0') {
            return Err(PathError::Nul);
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(path.len()));
        }
        if path.starts_with('/') {
            return Err(PathError::Absolute(path.to_owned()));
        }
        for part in path.split('/') {
            match part {
                ".." => return Err(PathError::ParentComponent(path.to_owned())),
                "" | "." => return Err(PathError::NotPlain(path.to_owned())),
                _ if part.len() > MAX_NAME_BYTES => return Err(PathError::TooLong(path.len())),
                _ => {}
            }
        }
        Ok(ProjectPath(path.to_owned()))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components, in order.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for ProjectPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

// ---------------------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------------------

/// Why a frame could not be read, written or understood. Every one of these ends the
/// connection: the two sides no longer agree on where a frame starts.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix is 0 or above [`MAX_FRAME_BYTES`].
    #[error("frame length {0} is outside 1..={MAX_FRAME_BYTES}")]
    BadLength(u64),
    /// The stream ended inside a frame.
    #[error("the connection ended inside a frame ({got} of {want} bytes)")]
    Truncated {
        /// Bytes read.
        got: usize,
        /// Bytes the frame needed (prefix included when the prefix itself was cut).
        want: usize,
    },
    /// The body is not one message of this protocol.
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    /// A message to send encodes above [`MAX_FRAME_BYTES`].
    #[error("message of {0} bytes is over the frame cap")]
    TooLarge(usize),
    /// The socket failed.
    #[error("i/o on the channel: {0}")]
    Io(#[from] std::io::Error),
}

/// One message as a whole frame: length prefix and body.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut frame = Vec::new();
    encode_into(&mut frame, message)?;
    Ok(frame)
}

/// [`encode`] into `frame`, which is cleared first: a side that sends many frames keeps one
/// buffer, so a large answer costs no new allocation (and no page faults) each time.
pub fn encode_into<T: Serialize>(frame: &mut Vec<u8>, message: &T) -> Result<(), FrameError> {
    frame.clear();
    frame.extend_from_slice(&[0u8; 4]);
    serde_json::to_writer(&mut *frame, message)?;
    let body = frame.len() - 4;
    if body > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge(body));
    }
    let len = u32::try_from(body).map_err(|_| FrameError::TooLarge(body))?;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// The body length a prefix announces, if it is within the cap.
pub fn body_len(prefix: [u8; 4]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(prefix);
    match usize::try_from(len) {
        Ok(n) if (1..=MAX_FRAME_BYTES).contains(&n) => Ok(n),
        _ => Err(FrameError::BadLength(u64::from(len))),
    }
}

/// A frame's body as one message.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, FrameError> {
    Ok(serde_json::from_slice(body)?)
}

/// Writes `message` as one frame.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, message: &T) -> Result<(), FrameError> {
    w.write_all(&encode(message)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame's body; `Ok(None)` when the stream ends cleanly between frames.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>, FrameError> {
    let mut body = Vec::new();
    Ok(read_frame_into(r, &mut body)?.then_some(body))
}

/// [`read_frame`] into `body`, which is reused: `Ok(false)` when the stream ends cleanly
/// between frames. The length is checked against the cap before `body` grows.
pub fn read_frame_into<R: Read>(r: &mut R, body: &mut Vec<u8>) -> Result<bool, FrameError> {
    let mut prefix = [0u8; 4];
    let got = read_full(r, &mut prefix)?;
    if got == 0 {
        return Ok(false);
    }
    if got < 4 {
        return Err(FrameError::Truncated { got, want: 4 });
    }
    let len = body_len(prefix)?;
    body.clear();
    body.resize(len, 0);
    let got = read_full(r, body)?;
    if got < len {
        return Err(FrameError::Truncated { got, want: len });
    }
    Ok(true)
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// [`write_frame`] for tokio.
#[cfg(feature = "tokio")]
pub async fn write_frame_async<W, T>(w: &mut W, message: &T) -> Result<(), FrameError>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    use tokio::io::AsyncWriteExt;
    w.write_all(&encode(message)?).await?;
    w.flush().await?;
    Ok(())
}

/// [`read_frame`] for tokio.
#[cfg(feature = "tokio")]
pub async fn read_frame_async<R>(r: &mut R) -> Result<Option<Vec<u8>>, FrameError>
where
    R: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut prefix[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Truncated { got, want: 4 }),
            n => got += n,
        }
    }
    let len = body_len(prefix)?;
    let mut body = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match r.read(&mut body[got..]).await? {
            0 => return Err(FrameError::Truncated { got, want: len }),
            n => got += n,
        }
    }
    Ok(Some(body))
}

/// Reads `data` as a stream of frames and decodes each in both directions. The body of the
/// `ipc_frame` fuzz target and of the test that replays its corpus.
///
/// # Panics
///
/// When an invariant breaks: a body read is within the cap, and a message that decodes
/// encodes to a frame that decodes to the same message.
#[doc(hidden)]
pub fn exercise_frames(data: &[u8]) {
    let mut rest = data;
    while let Ok(Some(body)) = read_frame(&mut rest) {
        assert!(!body.is_empty() && body.len() <= MAX_FRAME_BYTES);
        if let Ok(m) = decode::<AgentFrame>(&body) {
            assert_eq!(reencode(&m), m);
        }
        if let Ok(m) = decode::<SupervisorFrame>(&body) {
            assert_eq!(reencode(&m), m);
        }
    }
}

/// Decodes `data` as one agent frame and parses every path it names. The body of the
/// `ipc_request` fuzz target and of the test that replays its corpus.
///
/// # Panics
///
/// When an invariant breaks: a path that parses has no `..`, `.` or empty component, does
/// not start with `/`, has no NUL and is within the limits.
#[doc(hidden)]
pub fn exercise_request(data: &[u8]) {
    let Ok(AgentFrame::Request { request, .. }) = decode::<AgentFrame>(data) else {
        return;
    };
    let paths: Vec<&str> = match &request {
        Request::ReadFile { path, .. }
        | Request::WriteFile { path, .. }
        | Request::EditFile { path, .. } => vec![path],
        Request::Glob { path, .. } | Request::Grep { path, .. } => {
            path.iter().map(|p| p.as_str()).collect()
        }
        Request::RunCommand { .. } | Request::JournalAppend { .. } => vec![],
    };
    for path in paths {
        if let Ok(p) = ProjectPath::parse(path) {
            assert_eq!(p.as_str(), path);
            assert!(!p.as_str().starts_with('/') && !p.as_str().contains('\0'));
            assert!(p.as_str().len() <= MAX_PATH_BYTES);
            assert!(p
                .components()
                .all(|c| !matches!(c, "" | "." | "..") && c.len() <= MAX_NAME_BYTES));
        }
    }
}

fn reencode<T>(m: &T) -> T
where
    T: Serialize + for<'a> Deserialize<'a>,
{
    let frame = encode(m).unwrap_or_default();
    let body = frame.get(4..).unwrap_or_default();
    match decode(body) {
        Ok(back) => back,
        Err(e) => panic!("a decoded message does not decode again: {e}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn round_trip<T>(m: &T) -> T
    where
        T: Serialize + for<'a> Deserialize<'a>,
    {
        let frame = encode(m).unwrap();
        let body = read_frame(&mut &frame[..]).unwrap().unwrap();
        decode(&body).unwrap()
    }

    /// `Request::tool` is the `tool` field serde writes, for every variant.
    #[test]
    fn the_tool_name_is_the_wire_tag() {
        let requests = [
            Request::ReadFile {
                path: "a".into(),
                offset: None,
                limit: None,
            },
            Request::WriteFile {
                path: "a".into(),
                content: String::new(),
            },
            Request::EditFile {
                path: "a".into(),
                old: "x".into(),
                new: "y".into(),
                replace_all: false,
            },
            Request::Glob {
                pattern: "*".into(),
                path: None,
            },
            Request::Grep {
                pattern: "x".into(),
                path: None,
                glob: None,
                case_insensitive: false,
            },
            Request::RunCommand {
                command: "true".into(),
                timeout_secs: None,
                outside_sandbox: false,
            },
            Request::JournalAppend {
                record: "{}".into(),
            },
        ];
        for r in &requests {
            let wire = serde_json::to_value(r).unwrap();
            assert_eq!(wire["tool"], r.tool(), "{r:?}");
        }
    }

    #[test]
    fn every_message_survives_the_codec() {
        let agent = [
            AgentFrame::Hello {
                protocol: PROTOCOL_VERSION,
            },
            AgentFrame::Request {
                id: 7,
                request: Request::ReadFile {
                    path: "src/main.rs".into(),
                    offset: Some(3),
                    limit: None,
                },
                more: true,
            },
            AgentFrame::Request {
                id: 8,
                request: Request::RunCommand {
                    command: "cargo test\n".into(),
                    timeout_secs: None,
                    outside_sandbox: false,
                },
                more: false,
            },
            AgentFrame::Ui {
                event: UiEvent::TextDelta {
                    text: "héllo \u{1b}[2J".into(),
                },
            },
            AgentFrame::TurnEnd {
                reason: StopReason::Done,
                usage: Usage::default(),
            },
        ];
        for m in &agent {
            assert_eq!(&round_trip(m), m);
        }
        let supervisor = [
            SupervisorFrame::Cancel,
            SupervisorFrame::Answer {
                id: 7,
                answer: Answer::Error {
                    code: ErrorCode::Denied,
                    message: "no".into(),
                },
            },
        ];
        for m in &supervisor {
            assert_eq!(&round_trip(m), m);
        }
    }

    #[test]
    fn unknown_fields_and_messages_do_not_parse() {
        // Control: the well-formed twin parses.
        assert!(decode::<AgentFrame>(br#"{"type":"hello","protocol":1}"#).is_ok());
        for bad in [
            &br#"{"type":"hello","protocol":1,"admin":true}"#[..],
            br#"{"type":"fetch_url","url":"http://x"}"#,
            br#"{"type":"request","id":1,"request":{"tool":"ask_user","q":"y?"}}"#,
            br#"{"type":"request","id":1,"request":{"tool":"read_file","path":"a","mode":"w"}}"#,
            br#"{"type":"hello","protocol":1}{"type":"hello","protocol":1}"#,
            b"\xff",
        ] {
            assert!(
                matches!(decode::<AgentFrame>(bad), Err(FrameError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_length_outside_the_cap_is_refused_before_the_body() {
        let over = u32::try_from(MAX_FRAME_BYTES + 1).unwrap().to_be_bytes();
        // Only the prefix is there: an attempt to read (or allocate) the body would fail
        // differently.
        assert!(matches!(
            read_frame(&mut &over[..]),
            Err(FrameError::BadLength(n)) if n == MAX_FRAME_BYTES as u64 + 1
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 0][..]),
            Err(FrameError::BadLength(0))
        ));
        // Control: the cap itself is allowed (a truncated body, not a bad length).
        let at = u32::try_from(MAX_FRAME_BYTES).unwrap().to_be_bytes();
        assert!(matches!(
            read_frame(&mut &at[..]),
            Err(FrameError::Truncated { got: 0, .. })
        ));
    }

    #[test]
    fn truncation_is_told_from_a_clean_end() {
        assert!(read_frame(&mut &[][..]).unwrap().is_none());
        assert!(matches!(
            read_frame(&mut &[0u8, 0][..]),
            Err(FrameError::Truncated { got: 2, want: 4 })
        ));
        let mut frame = encode(&SupervisorFrame::Shutdown).unwrap();
        frame.pop();
        assert!(matches!(
            read_frame(&mut &frame[..]),
            Err(FrameError::Truncated { .. })
        ));
    }

    #[test]
    fn an_oversized_message_is_not_sent() {
        let big = AgentFrame::Request {
            id: 1,
            more: false,
            request: Request::WriteFile {
                path: "a".into(),
                content: "x".repeat(MAX_FRAME_BYTES),
            },
        };
        assert!(matches!(encode(&big), Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let e = ModelEndpoint {
            api: ModelApi::AnthropicMessages,
            base_url: "https://api.example".into(),
            model: "m".into(),
            api_key: "sk-secret-123".into(),
            proxy: "127.0.0.1:1".into(),
        };
        let shown = format!(
            "{:?}",
            SupervisorFrame::Start(Start {
                model: e.clone(),
                limits: Limits {
                    max_steps: 1,
                    token_budget: 1,
                    max_output_tokens: 1
                },
                system_prompt: String::new(),
                tools: vec![],
                context_window: None,
                resume: Vec::new(),
            })
        );
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        // Control: the wire form does carry it (that is how the agent gets it).
        assert!(String::from_utf8_lossy(&encode(&e).unwrap()).contains("sk-secret-123"));
    }

    #[test]
    fn project_paths_have_one_spelling() {
        for ok in [
            "a",
            "src/main.rs",
            ".env",
            "a/.git",
            "...",
            "a b/c\nd",
            "é/ü",
        ] {
            assert_eq!(ProjectPath::parse(ok).unwrap().as_str(), ok);
        }
        let long_name = "n".repeat(256);
        let long_path = "d/".repeat(2001);
        let s = String::new;
        let cases = [
            ("", PathError::Empty),
            ("/etc/passwd", PathError::Absolute(s())),
            ("..", PathError::ParentComponent(s())),
            ("a/../../b", PathError::ParentComponent(s())),
            ("a/..", PathError::ParentComponent(s())),
            ("a//b", PathError::NotPlain(s())),
            ("a/./b", PathError::NotPlain(s())),
            ("./a", PathError::NotPlain(s())),
            ("a/", PathError::NotPlain(s())),
            ("a\0b", PathError::Nul),
            (&long_name, PathError::TooLong(0)),
            (&long_path, PathError::TooLong(0)),
        ];
        for (bad, want) in cases {
            let e = ProjectPath::parse(bad).unwrap_err();
            assert_eq!(
                std::mem::discriminant(&e),
                std::mem::discriminant(&want),
                "{bad:?}: {e:?}"
            );
        }
        // Control: a name of exactly 255 bytes is fine.
        assert!(ProjectPath::parse(&"n".repeat(255)).is_ok());
    }
}
