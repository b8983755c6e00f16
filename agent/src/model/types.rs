//! The conversation as the loop sees it, the same for every provider.
//!
//! The two wire formats (Anthropic Messages, OpenAI Chat Completions) are translated to and
//! from these types by their clients; the loop, the budget, compaction and the journal only
//! ever see these. A [`Message`] is what is sent again on the next request and what the
//! journal stores, so it holds only complete blocks: a stream that broke in the middle never
//! becomes a message.

use serde::{Deserialize, Serialize};

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user, and tool results (both providers send those in a user-side message).
    User,
    /// The model.
    Assistant,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Block {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call.
    ToolUse {
        /// The provider's id for the call; a tool result names it.
        id: String,
        /// Tool name as offered.
        name: String,
        /// The arguments, as the model wrote them (a JSON object when well-formed).
        input: serde_json::Value,
    },
    /// The result of a tool call, sent back to the model.
    ToolResult {
        /// The [`Block::ToolUse`] id this answers.
        tool_use_id: String,
        /// The result as text.
        content: String,
        /// The call failed or was refused; `content` says why.
        is_error: bool,
    },
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<Block>,
}

/// A tool as offered to the model (name, description, JSON Schema of its input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Name, for example `read_file`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
}

/// One request to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The system prompt (fixed for a session).
    pub system: String,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<Tool>,
    /// `max_tokens` of this call.
    pub max_tokens: u32,
}

/// Why the model stopped this response (the provider's reason, normalised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The answer is complete (`end_turn`, `stop`, `stop_sequence`).
    EndTurn,
    /// The model wants the tool calls in this response run (`tool_use`, `tool_calls`).
    ToolUse,
    /// Cut at `max_tokens` (`max_tokens`, `length`).
    MaxTokens,
    /// The server paused a long turn; send the conversation again to continue
    /// (Anthropic's `pause_turn`).
    PauseTurn,
    /// The model refused (`refusal`, `content_filter`).
    Refusal,
}

/// Tokens one response used, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Input tokens (cache reads and writes included).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// A complete response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The blocks (text and tool calls), complete, in order.
    pub content: Vec<Block>,
    /// Why it stopped.
    pub finish: FinishReason,
    /// What it used; `None` when the provider did not report a usable usage (the budget
    /// then keeps the whole reservation as spent: seed T9).
    pub usage: Option<TokenUsage>,
}

/// Something seen while a response streams: for display only, never for the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// More visible text.
    TextDelta(String),
    /// A notice for the user (a retried stream, a rate-limit wait).
    Notice(String),
}

/// Why a request to the model failed, after the client's own retries.
///
/// No variant carries the API key or a request header: an error reaches the user's terminal
/// and the journal.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The endpoint or proxy could not be set up (a malformed base URL, proxy address).
    #[error("model endpoint {url}: {reason}")]
    Config {
        /// The URL or address at fault.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server answered with an error status that is not retried (or after the retries).
    #[error("the model's API answered {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The provider's error message, escaped and cut for display.
        message: String,
    },
    /// The connection or the stream failed (after the retries).
    #[error("the model's API could not be reached or its stream broke: {0}")]
    Transport(String),
    /// The server sent something that is not the API's format.
    #[error("the model's API sent something unexpected: {0}")]
    Protocol(String),
    /// The request was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// A model: one request in, one complete response out, with display events on the way.
///
/// Implemented by the provider clients; the loop is generic over it.
pub trait Model {
    /// Send `request`, calling `events` with display events while the response streams, and
    /// return the complete response. Retries that the client owns (a broken stream, a rate
    /// limit) happen inside; each attempt is reported to `meter` before it is sent so that
    /// the budget can reserve it (seed T9: every provider request reserves).
    fn complete(
        &self,
        request: &ModelRequest,
        meter: &mut dyn FnMut(Attempt) -> Result<(), ModelError>,
        events: &mut dyn FnMut(StreamEvent),
    ) -> impl std::future::Future<Output = Result<ModelResponse, ModelError>>;
}

/// One attempt of a request, reported to the meter before it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 0 for the first send, then 1, 2… for retries.
    pub retry: u32,
    /// The previous attempt failed with no reported usage (its reservation stays spent).
    pub previous_unreported: bool,
}
