//! Anthropic's Messages API: the request body and the streamed response.
//!
//! Request: `POST {base}/v1/messages` with `model`, `max_tokens`, `system`, `messages`
//! (blocks `text`, `tool_use`, `tool_result`), `tools` (`name`, `description`,
//! `input_schema`) and `stream: true`. Response: named server-sent events — `message_start`
//! (input usage), `content_block_start` / `content_block_delta` (`text_delta`,
//! `input_json_delta`) / `content_block_stop`, `message_delta` (`stop_reason`, output usage),
//! `message_stop`; `ping` and unknown events are ignored; an `error` event (for example
//! `overloaded_error`) is a broken stream.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::decode::{parse_data, tool_input, Decode, DecodeError};
use super::sse::SseEvent;
use super::types::{
    Block, FinishReason, Message, ModelRequest, ModelResponse, Role, StreamEvent, TokenUsage,
};

/// The path added to the base URL.
pub const PATH: &str = "/v1/messages";

/// The `anthropic-version` header sent.
pub const VERSION: &str = "2023-06-01";

fn block(b: &Block) -> Option<Value> {
    Some(match b {
        // The API refuses empty text blocks; an empty one carries nothing.
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::ToolUse { id, name, input } => {
            // The API takes only an object; arguments that did not parse (kept as text for the
            // loop's error result) go back as an empty object.
            let input = if input.is_object() {
                input.clone()
            } else {
                json!({})
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => json!({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": is_error,
        }),
    })
}

fn message(m: &Message) -> Value {
    json!({
        "role": match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        },
        "content": m.content.iter().filter_map(block).collect::<Vec<_>>(),
    })
}

/// The request body for `model`.
pub fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens,
        "stream": true,
        "messages": request.messages.iter().map(message).collect::<Vec<_>>(),
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
    }
    body
}

/// A provider message from an error body: `{"type":"error","error":{"type":…,"message":…}}`.
pub fn error_message(body: &Value) -> Option<String> {
    let error = body.get("error")?;
    let message = error.get("message")?.as_str()?;
    Some(match error.get("type").and_then(Value::as_str) {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_string(),
    })
}

/// The normalised finish reason of a `stop_reason`.
pub fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "tool_use" => FinishReason::ToolUse,
        // The context window filled up: the output was cut like at `max_tokens`.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        "pause_turn" => FinishReason::PauseTurn,
        "refusal" => FinishReason::Refusal,
        // `end_turn`, `stop_sequence`, and reasons added after this was written.
        _ => FinishReason::EndTurn,
    }
}

#[derive(Debug)]
enum Partial {
    Text(String),
    Tool {
        id: String,
        name: String,
        arguments: String,
    },
    /// A block kind this client does not use (thinking, server tools): dropped.
    Other,
}

/// The decoder of one Messages stream.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    blocks: BTreeMap<u64, Partial>,
    stop_reason: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

/// Input tokens of a `usage` object: plain input plus cache writes and reads (all are
/// input the request was charged for). `None` when `input_tokens` is absent.
fn input_of(usage: &Value) -> Option<u64> {
    let plain = usage.get("input_tokens")?.as_u64()?;
    let cached = ["cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
        .sum::<u64>();
    Some(plain.saturating_add(cached))
}

fn index_of(data: &Value) -> Result<u64, DecodeError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| DecodeError::Protocol("a content block event without an index".into()))
}

impl Decode for Decoder {
    fn event(
        &mut self,
        event: &SseEvent,
        display: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, DecodeError> {
        let data = parse_data(event)?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(usage) = data.pointer("/message/usage") {
                    self.input_tokens = input_of(usage);
                }
            }
            "content_block_start" => {
                let index = index_of(&data)?;
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let partial = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string();
                        if !text.is_empty() {
                            display(StreamEvent::TextDelta(text.clone()));
                        }
                        Partial::Text(text)
                    }
                    Some("tool_use") => Partial::Tool {
                        id: block
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        name: block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        arguments: String::new(),
                    },
                    _ => Partial::Other,
                };
                self.blocks.insert(index, partial);
            }
            "content_block_delta" => {
                let index = index_of(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let Some(partial) = self.blocks.get_mut(&index) else {
                    return Err(DecodeError::Protocol(format!(
                        "a delta for content block {index}, which was not started"
                    )));
                };
                match (delta.get("type").and_then(Value::as_str), partial) {
                    (Some("text_delta"), Partial::Text(text)) => {
                        let piece = delta
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        if !piece.is_empty() {
                            text.push_str(piece);
                            display(StreamEvent::TextDelta(piece.to_string()));
                        }
                    }
                    (Some("input_json_delta"), Partial::Tool { arguments, .. }) => {
                        arguments.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or_default(),
                        );
                    }
                    // Thinking, signatures, citations: not part of what this client keeps.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    if let Some(out) = usage.get("output_tokens").and_then(Value::as_u64) {
                        self.output_tokens = Some(out);
                    }
                    // Newer servers repeat the input counts here, final (larger after server
                    // tools). Some compatible servers put a 0 or leave the cache counts out:
                    // the larger count is kept, so the budget never settles below the input
                    // `message_start` reported.
                    if let Some(input) = input_of(usage) {
                        self.input_tokens = Some(self.input_tokens.map_or(input, |i| i.max(input)));
                    }
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return Err(DecodeError::Broken(format!(
                    "an error event in the stream: {kind}: {message}"
                )));
            }
            // `ping`, `content_block_stop` (blocks are closed at the end, in index order)
            // and event types added after this was written.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, ended: bool) -> Result<ModelResponse, DecodeError> {
        if !ended {
            return Err(DecodeError::Broken(
                "the stream ended before message_stop".into(),
            ));
        }
        if !self.started {
            return Err(DecodeError::Protocol(
                "the stream has no message_start".into(),
            ));
        }
        let Some(stop_reason) = self.stop_reason else {
            return Err(DecodeError::Protocol(
                "the stream ended with no stop_reason".into(),
            ));
        };
        let content = self
            .blocks
            .into_values()
            .filter_map(|p| match p {
                Partial::Text(text) if text.is_empty() => None,
                Partial::Text(text) => Some(Block::Text { text }),
                Partial::Tool {
                    id,
                    name,
                    arguments,
                } => Some(Block::ToolUse {
                    id,
                    name,
                    input: tool_input(&arguments),
                }),
                Partial::Other => None,
            })
            .collect();
        let usage = match (self.input_tokens, self.output_tokens) {
            (Some(input_tokens), Some(output_tokens)) => Some(TokenUsage {
                input_tokens,
                output_tokens,
            }),
            _ => None,
        };
        Ok(ModelResponse {
            content,
            finish: finish_reason(&stop_reason),
            usage,
        })
    }

    fn usage_reported(&self) -> bool {
        self.input_tokens.is_some() && self.output_tokens.is_some()
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
                            text: String::new(),
                        },
                        Block::ToolUse {
                            id: "t1".into(),
                            name: "read_file".into(),
                            input: json!({"path": "a"}),
                        },
                        Block::ToolUse {
                            id: "t2".into(),
                            name: "read_file".into(),
                            input: Value::String("{\"pa".into()),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "text".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![Tool {
                name: "read_file".into(),
                description: "read".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 100,
        };
        let body = request_body("claude-x", &request);
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 100,
                "stream": true,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
                        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "text", "is_error": false},
                    ]},
                ],
                "tools": [{"name": "read_file", "description": "read", "input_schema": {"type": "object"}}],
            })
        );
    }

    /// The usage a stream of these `(event, data)` pairs reports.
    fn usage_of(events: &[(&str, Value)]) -> Option<TokenUsage> {
        let mut d = Decoder::default();
        for (event, data) in events {
            let e = SseEvent {
                event: (*event).into(),
                data: data.to_string(),
            };
            d.event(&e, &mut |_| {}).unwrap();
        }
        d.finish(true).unwrap().usage
    }

    #[test]
    fn a_smaller_input_count_in_message_delta_does_not_lower_the_usage() {
        let stream = |delta_usage: Value| {
            vec![
                (
                    "message_start",
                    json!({"type": "message_start", "message": {"usage": {
                        "input_tokens": 1_000, "cache_read_input_tokens": 500, "output_tokens": 1}}}),
                ),
                (
                    "message_delta",
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage}),
                ),
                ("message_stop", json!({"type": "message_stop"})),
            ]
        };
        let usage = |input_tokens, output_tokens| {
            Some(TokenUsage {
                input_tokens,
                output_tokens,
            })
        };
        // A compatible server's 0, or the count without the cache reads: the start's 1,500.
        for delta in [
            json!({"input_tokens": 0, "output_tokens": 20}),
            json!({"input_tokens": 1_000, "output_tokens": 20}),
        ] {
            assert_eq!(usage_of(&stream(delta)), usage(1_500, 20));
        }
        // Control: a larger final count (server tools) is the one kept, and a delta with only
        // the output count keeps the start's input.
        assert_eq!(
            usage_of(&stream(
                json!({"input_tokens": 3_000, "cache_read_input_tokens": 500, "output_tokens": 20})
            )),
            usage(3_500, 20)
        );
        assert_eq!(
            usage_of(&stream(json!({"output_tokens": 20}))),
            usage(1_500, 20)
        );
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(finish_reason("end_turn"), FinishReason::EndTurn);
        assert_eq!(finish_reason("stop_sequence"), FinishReason::EndTurn);
        assert_eq!(finish_reason("tool_use"), FinishReason::ToolUse);
        assert_eq!(finish_reason("max_tokens"), FinishReason::MaxTokens);
        assert_eq!(finish_reason("pause_turn"), FinishReason::PauseTurn);
        assert_eq!(finish_reason("refusal"), FinishReason::Refusal);
    }
}
