//! OpenAI's Chat Completions API, and the servers compatible with it (Ollama, vLLM,
//! llama.cpp's server, OpenRouter): the request body and the streamed response.
//!
//! Request: `POST {base}/chat/completions` (the base URL carries the `/v1`) with `model`,
//! `messages` (`system`, `user`, `assistant` with `tool_calls`, one `tool` message per
//! result), `tools` (`type: function`), `max_tokens`, `stream: true` and
//! `stream_options: {include_usage: true}`. Response: `data: {…}` chunks whose
//! `choices[0].delta` carries `content` and `tool_calls[i]` fragments (`index`, `id`,
//! `function.name`, `function.arguments` in pieces), a `finish_reason`, a last chunk with
//! `usage` (when the server honours `include_usage`), then `data: [DONE]`. A chunk
//! `{"error": …}` (sent by some servers mid-stream) is a broken stream.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::decode::{parse_data, tool_input, Decode, DecodeError};
use super::sse::SseEvent;
use super::types::{
    Block, FinishReason, Message, ModelRequest, ModelResponse, Role, StreamEvent, TokenUsage,
};

/// The path added to the base URL.
pub const PATH: &str = "/chat/completions";

fn push_messages(m: &Message, out: &mut Vec<Value>) {
    let text: Vec<&str> = m
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    match m.role {
        Role::User => {
            // Results first: a `tool` message must follow the assistant message that made
            // the call.
            for b in &m.content {
                if let Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } = b
                {
                    // The format has no error flag: say it in the text.
                    let content = if *is_error {
                        format!("Error: {content}")
                    } else {
                        content.clone()
                    };
                    out.push(
                        json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}),
                    );
                }
            }
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text.join("\n\n")}));
            }
        }
        Role::Assistant => {
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, name, input } => Some(json!({
                        "id": id,
                        "type": "function",
                        "function": {
                            "name": name,
                            // Arguments that did not parse go back as the model wrote them.
                            "arguments": match input {
                                Value::String(raw) => raw.clone(),
                                other => other.to_string(),
                            },
                        },
                    })),
                    _ => None,
                })
                .collect();
            let mut msg = json!({"role": "assistant"});
            msg["content"] = if text.is_empty() {
                Value::Null
            } else {
                json!(text.join("\n\n"))
            };
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            } else if text.is_empty() {
                msg["content"] = json!("");
            }
            out.push(msg);
        }
    }
}

/// The request body for `model`.
pub fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for m in &request.messages {
        push_messages(m, &mut messages);
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": request.max_tokens,
        "stream": true,
        // Without it the stream carries no usage and the budget keeps whole reservations.
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                })
            })
            .collect();
    }
    body
}

/// A provider message from an error body: `{"error": {"message": …}}`, or the
/// `{"error": "…"}` some compatible servers (Ollama) send.
pub fn error_message(body: &Value) -> Option<String> {
    match body.get("error")? {
        Value::String(s) => Some(s.clone()),
        error => {
            let message = error.get("message")?.as_str()?;
            Some(match error.get("type").and_then(Value::as_str) {
                Some(kind) if !kind.is_empty() => format!("{kind}: {message}"),
                _ => message.to_string(),
            })
        }
    }
}

/// The normalised finish reason. Some compatible servers say `stop` for a response with
/// tool calls: a response with calls is a tool-use response unless it was cut or refused.
pub fn finish_reason(finish: Option<&str>, has_calls: bool, refused: bool) -> FinishReason {
    match finish {
        Some("length") => FinishReason::MaxTokens,
        Some("content_filter") => FinishReason::Refusal,
        _ if refused => FinishReason::Refusal,
        Some("tool_calls" | "function_call") => FinishReason::ToolUse,
        _ if has_calls => FinishReason::ToolUse,
        _ => FinishReason::EndTurn,
    }
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

/// The decoder of one Chat Completions stream.
#[derive(Debug, Default)]
pub struct Decoder {
    text: String,
    refusal: String,
    calls: BTreeMap<u64, Call>,
    finish: Option<String>,
    usage: Option<TokenUsage>,
}

fn string_or_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Decode for Decoder {
    fn event(
        &mut self,
        event: &SseEvent,
        display: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, DecodeError> {
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let data = parse_data(event)?;
        if let Some(error) = data.get("error").filter(|e| !e.is_null()) {
            let message =
                error_message(&json!({ "error": error })).unwrap_or_else(|| error.to_string());
            return Err(DecodeError::Broken(format!(
                "an error in the stream: {message}"
            )));
        }
        if let Some(usage) = data.get("usage").filter(|u| !u.is_null()) {
            // Missing or partial counts are no usage: the budget then keeps the reservation.
            self.usage = match (
                usage.get("prompt_tokens").and_then(Value::as_u64),
                usage.get("completion_tokens").and_then(Value::as_u64),
            ) {
                (Some(input_tokens), Some(output_tokens)) => Some(TokenUsage {
                    input_tokens,
                    output_tokens,
                }),
                _ => None,
            };
        }
        let choices = data
            .get("choices")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for choice in choices {
            // One completion is asked for; others (n > 1) would not be ours.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(piece) = delta.get("content").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.text.push_str(piece);
                    display(StreamEvent::TextDelta(piece.to_string()));
                }
            }
            if let Some(piece) = delta.get("refusal").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.refusal.push_str(piece);
                    display(StreamEvent::TextDelta(piece.to_string()));
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, fragment) in calls.iter().enumerate() {
                    let index = fragment
                        .get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(position as u64);
                    let call = self.calls.entry(index).or_default();
                    if let Some(id) = fragment.get("id").and_then(Value::as_str) {
                        if call.id.is_empty() {
                            call.id = id.to_string();
                        }
                    }
                    let function = fragment.get("function").unwrap_or(&Value::Null);
                    if let Some(name) = function.get("name").and_then(Value::as_str) {
                        if call.name.is_empty() {
                            call.name = name.to_string();
                        }
                    }
                    if let Some(args) = function.get("arguments") {
                        call.arguments.push_str(&string_or_json(args));
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(reason.to_string());
            }
        }
        Ok(false)
    }

    fn finish(self, ended: bool) -> Result<ModelResponse, DecodeError> {
        // Some servers close the body right after the finishing chunk without `[DONE]`: the
        // response is whole then. A body that ends before any finish reason is broken.
        if !ended && self.finish.is_none() {
            return Err(DecodeError::Broken(
                "the stream ended before a finish_reason or [DONE]".into(),
            ));
        }
        let finish = finish_reason(
            self.finish.as_deref(),
            !self.calls.is_empty(),
            !self.refusal.is_empty(),
        );
        let mut content = Vec::new();
        let text = self.text + &self.refusal;
        if !text.is_empty() {
            content.push(Block::Text { text });
        }
        for (index, call) in self.calls {
            content.push(Block::ToolUse {
                id: if call.id.is_empty() {
                    format!("call_{index}")
                } else {
                    call.id
                },
                name: call.name,
                input: tool_input(&call.arguments),
            });
        }
        Ok(ModelResponse {
            content,
            finish,
            usage: self.usage,
        })
    }

    fn usage_reported(&self) -> bool {
        self.usage.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::types::Tool;

    #[test]
    fn the_request_has_the_api_shape() {
        let request = ModelRequest {
            system: "be brief".into(),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Block::Text { text: "hi".into() }],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text {
                            text: "reading".into(),
                        },
                        Block::ToolUse {
                            id: "c1".into(),
                            name: "read_file".into(),
                            input: json!({"path": "a"}),
                        },
                        Block::ToolUse {
                            id: "c2".into(),
                            name: "read_file".into(),
                            input: Value::String("{\"pa".into()),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        Block::ToolResult {
                            tool_use_id: "c1".into(),
                            content: "text".into(),
                            is_error: false,
                        },
                        Block::ToolResult {
                            tool_use_id: "c2".into(),
                            content: "bad arguments".into(),
                            is_error: true,
                        },
                        Block::Text {
                            text: "and then?".into(),
                        },
                    ],
                },
            ],
            tools: vec![Tool {
                name: "read_file".into(),
                description: "read".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 100,
        };
        assert_eq!(
            request_body("gpt-x", &request),
            json!({
                "model": "gpt-x",
                "max_tokens": 100,
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "reading", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"pa"}},
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "text"},
                    {"role": "tool", "tool_call_id": "c2", "content": "Error: bad arguments"},
                    {"role": "user", "content": "and then?"},
                ],
                "tools": [{"type": "function", "function": {"name": "read_file", "description": "read", "parameters": {"type": "object"}}}],
            })
        );
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(
            finish_reason(Some("stop"), false, false),
            FinishReason::EndTurn
        );
        assert_eq!(
            finish_reason(Some("stop"), true, false),
            FinishReason::ToolUse
        );
        assert_eq!(
            finish_reason(Some("tool_calls"), true, false),
            FinishReason::ToolUse
        );
        assert_eq!(
            finish_reason(Some("length"), true, false),
            FinishReason::MaxTokens
        );
        assert_eq!(
            finish_reason(Some("content_filter"), false, false),
            FinishReason::Refusal
        );
        assert_eq!(
            finish_reason(Some("stop"), false, true),
            FinishReason::Refusal
        );
        assert_eq!(finish_reason(None, false, false), FinishReason::EndTurn);
    }
}
