//! What the server plays: a list of responses, each said once at the provider-neutral level
//! (text, tool calls, a stop reason, usage) plus the faults a real API shows (a cut stream, an
//! `error` event, an error status with `retry-after`, delays, no usage). The same script
//! serves either dialect; [`crate::encode`] turns an entry into that dialect's events.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Which wire format the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// Anthropic Messages: `POST …/v1/messages`, named SSE events.
    Anthropic,
    /// OpenAI Chat Completions: `POST …/chat/completions`, `data:` chunks and `[DONE]`.
    Openai,
}

impl Dialect {
    /// Whether `path` is this dialect's endpoint. A prefix is allowed (an OpenAI-compatible
    /// base URL often ends in `/v1`, Ollama's and llama.cpp's included).
    pub fn serves(self, path: &str) -> bool {
        match self {
            Dialect::Anthropic => path.ends_with("/v1/messages"),
            Dialect::Openai => path.ends_with("/chat/completions"),
        }
    }
}

/// One block of a scripted response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Part {
    /// Text, streamed in small pieces.
    Text {
        /// The whole text.
        text: String,
    },
    /// A tool call whose arguments are `input` serialized, streamed in small fragments.
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments (normally a JSON object).
        input: serde_json::Value,
    },
    /// A tool call whose arguments text is sent exactly as given, for example malformed
    /// JSON, to show what a client does with it.
    RawToolUse {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments text, sent verbatim in fragments.
        arguments: String,
    },
}

/// Why the scripted response stops, encoded per dialect (see [`Stop::anthropic`],
/// [`Stop::openai`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Done: `end_turn` / `stop`.
    EndTurn,
    /// Run the tool calls: `tool_use` / `tool_calls`.
    ToolUse,
    /// Cut at the output limit: `max_tokens` / `length`.
    MaxTokens,
    /// Anthropic's `pause_turn` (OpenAI has none: `stop`).
    PauseTurn,
    /// Refused: `refusal` / `content_filter`.
    Refusal,
    /// A stop sequence: `stop_sequence` / `stop`.
    StopSequence,
}

impl Stop {
    /// The Anthropic `stop_reason`.
    pub fn anthropic(self) -> &'static str {
        match self {
            Stop::EndTurn => "end_turn",
            Stop::ToolUse => "tool_use",
            Stop::MaxTokens => "max_tokens",
            Stop::PauseTurn => "pause_turn",
            Stop::Refusal => "refusal",
            Stop::StopSequence => "stop_sequence",
        }
    }

    /// The OpenAI `finish_reason`.
    pub fn openai(self) -> &'static str {
        match self {
            Stop::EndTurn | Stop::PauseTurn | Stop::StopSequence => "stop",
            Stop::ToolUse => "tool_calls",
            Stop::MaxTokens => "length",
            Stop::Refusal => "content_filter",
        }
    }
}

/// Tokens the response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            input_tokens: 10,
            output_tokens: 5,
        }
    }
}

/// What goes wrong with a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Send this many events (a `ping` counts), then close the connection in the middle of
    /// the chunked body: the client sees a broken stream, not an end.
    Cut {
        /// Events sent before the cut.
        after_events: usize,
    },
    /// Send this many events, then an error in the stream (Anthropic: an `error` event, such
    /// as `overloaded_error`; OpenAI: a `data: {"error": …}` chunk), then end the body.
    ErrorEvent {
        /// Events sent before the error.
        after_events: usize,
        /// The error's type, for example `overloaded_error`.
        error_type: String,
        /// The error's message.
        message: String,
    },
    /// Answer with this HTTP status instead of a stream.
    Status {
        /// The status, for example 429, 529, 500 or 401.
        status: u16,
        /// The body; `None` gives the dialect's error JSON with a short message.
        #[serde(default)]
        body: Option<String>,
        /// A `retry-after` header (seconds or an HTTP date), sent as given.
        #[serde(default)]
        retry_after: Option<String>,
    },
}

fn default_pieces() -> usize {
    3
}

/// One scripted response: played for one request, in script order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scripted {
    /// The blocks, in order.
    #[serde(default)]
    pub content: Vec<Part>,
    /// Why it stops; absent: `tool_use` when there is a tool call, else `end_turn`.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// The usage reported.
    #[serde(default)]
    pub usage: Usage,
    /// Report no usage at all (Anthropic: no `usage` objects; OpenAI: no usage chunk even
    /// when `stream_options.include_usage` asks for it).
    #[serde(default)]
    pub no_usage: bool,
    /// What goes wrong, if anything.
    #[serde(default)]
    pub fault: Option<Fault>,
    /// Wait this long before the response's status line.
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait this long between events.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Characters per text delta and per arguments fragment (at least 1).
    #[serde(default = "default_pieces")]
    pub piece_chars: usize,
    /// Re-cut the byte stream into writes of this many bytes, so that events, lines and
    /// UTF-8 sequences straddle writes; `None`: one write per event.
    #[serde(default)]
    pub write_bytes: Option<usize>,
}

impl Scripted {
    /// A response with these blocks; stop reason inferred, default usage.
    pub fn reply(content: Vec<Part>) -> Self {
        Scripted {
            content,
            stop: None,
            usage: Usage::default(),
            no_usage: false,
            fault: None,
            delay_ms: 0,
            chunk_delay_ms: 0,
            piece_chars: default_pieces(),
            write_bytes: None,
        }
    }

    /// A text-only response.
    pub fn text(text: &str) -> Self {
        Scripted::reply(vec![Part::Text { text: text.into() }])
    }

    /// An error status instead of a response (the dialect's error body).
    pub fn status(status: u16) -> Self {
        Scripted::reply(Vec::new()).with_fault(Fault::Status {
            status,
            body: None,
            retry_after: None,
        })
    }

    /// Set the stop reason.
    pub fn with_stop(mut self, stop: Stop) -> Self {
        self.stop = Some(stop);
        self
    }

    /// Set the reported usage.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Usage {
            input_tokens,
            output_tokens,
        };
        self
    }

    /// Report no usage.
    pub fn without_usage(mut self) -> Self {
        self.no_usage = true;
        self
    }

    /// Set the fault.
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// Close the connection after `n` events.
    pub fn cut_after(self, n: usize) -> Self {
        self.with_fault(Fault::Cut { after_events: n })
    }

    /// An in-stream error of `error_type` after `n` events.
    pub fn error_event_after(self, n: usize, error_type: &str, message: &str) -> Self {
        self.with_fault(Fault::ErrorEvent {
            after_events: n,
            error_type: error_type.into(),
            message: message.into(),
        })
    }

    /// Add a `retry-after` header to a status fault (no effect on other entries).
    pub fn retry_after(mut self, value: &str) -> Self {
        if let Some(Fault::Status { retry_after, .. }) = &mut self.fault {
            *retry_after = Some(value.into());
        }
        self
    }

    /// Set a status fault's body.
    pub fn body(mut self, text: &str) -> Self {
        if let Some(Fault::Status { body, .. }) = &mut self.fault {
            *body = Some(text.into());
        }
        self
    }

    /// Wait `ms` before answering.
    pub fn delay(mut self, ms: u64) -> Self {
        self.delay_ms = ms;
        self
    }

    /// Wait `ms` between events.
    pub fn chunk_delay(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = ms;
        self
    }

    /// Characters per delta.
    pub fn pieces(mut self, chars: usize) -> Self {
        self.piece_chars = chars;
        self
    }

    /// Re-cut the byte stream into writes of `n` bytes.
    pub fn write_bytes(mut self, n: usize) -> Self {
        self.write_bytes = Some(n);
        self
    }

    /// The stop reason sent: the one set, else inferred from the content.
    pub fn effective_stop(&self) -> Stop {
        self.stop.unwrap_or_else(|| {
            if self
                .content
                .iter()
                .any(|p| matches!(p, Part::ToolUse { .. } | Part::RawToolUse { .. }))
            {
                Stop::ToolUse
            } else {
                Stop::EndTurn
            }
        })
    }
}

/// A script file: the dialect and the responses in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The wire format served.
    pub dialect: Dialect,
    /// The responses, one per request, in order.
    pub responses: Vec<Scripted>,
}

/// A script file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a script.
    #[error("script {path} is not valid: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
}

impl Script {
    /// Read a script from a JSON file.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| ScriptError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn a_script_file_loads() {
        let dir = std::env::temp_dir().join(format!("modelserver-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("script.json");
        std::fs::write(
            &path,
            json!({
                "dialect": "openai",
                "responses": [
                    {"content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 1, "output_tokens": 2}},
                    {"fault": {"kind": "status", "status": 429, "retry_after": "1"}},
                    {"content": [{"type": "tool_use", "id": "c", "name": "glob", "input": {"pattern": "*"}}],
                     "fault": {"kind": "cut", "after_events": 3}, "no_usage": true},
                ],
            })
            .to_string(),
        )
        .unwrap();
        let script = Script::load(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(script.dialect, Dialect::Openai);
        assert_eq!(script.responses[0], Scripted::text("hi").with_usage(1, 2));
        assert_eq!(script.responses[0].effective_stop(), Stop::EndTurn);
        assert_eq!(script.responses[1], Scripted::status(429).retry_after("1"));
        assert_eq!(script.responses[2].effective_stop(), Stop::ToolUse);
        assert!(script.responses[2].no_usage);
        assert_eq!(script.responses[2].piece_chars, 3);
        // Control: an unknown field is refused, not ignored.
        let bad: Result<Script, _> =
            serde_json::from_value(json!({"dialect": "openai", "responses": [{"txt": "x"}]}));
        assert!(bad.is_err());
    }
}
