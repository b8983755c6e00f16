//! A scripted response as each dialect streams it: a list of complete SSE events, text and
//! tool arguments cut into many small deltas, as the real APIs send them.

use serde_json::{json, Value};

use crate::script::{Dialect, Part, Scripted};

/// One SSE event with an `event:` name (Anthropic's framing).
fn named(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// One `data:` event (OpenAI's framing).
fn data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// `text` cut into pieces of `n` characters (never inside a character).
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let n = n.max(1);
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// The arguments text of a tool call part.
fn arguments(part: &Part) -> String {
    match part {
        Part::ToolUse { input, .. } => input.to_string(),
        Part::RawToolUse { arguments, .. } => arguments.clone(),
        Part::Text { .. } => String::new(),
    }
}

/// The events of a complete response, in order, ending with `message_stop` (Anthropic) or
/// `[DONE]` (OpenAI). `include_usage` is the request's `stream_options.include_usage`.
pub fn stream_events(
    dialect: Dialect,
    s: &Scripted,
    include_usage: bool,
    model: &str,
) -> Vec<String> {
    match dialect {
        Dialect::Anthropic => anthropic_events(s, model),
        Dialect::Openai => openai_events(s, include_usage, model),
    }
}

fn anthropic_events(s: &Scripted, model: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut message = json!({
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if !s.no_usage {
        message["usage"] = json!({
            "input_tokens": s.usage.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        });
    }
    out.push(named(
        "message_start",
        &json!({"type": "message_start", "message": message}),
    ));
    out.push(named("ping", &json!({"type": "ping"})));
    for (index, part) in s.content.iter().enumerate() {
        let (block, deltas) = match part {
            Part::Text { text } => (
                json!({"type": "text", "text": ""}),
                pieces(text, s.piece_chars)
                    .into_iter()
                    .map(|p| json!({"type": "text_delta", "text": p}))
                    .collect::<Vec<_>>(),
            ),
            Part::ToolUse { id, name, .. } | Part::RawToolUse { id, name, .. } => (
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                pieces(&arguments(part), s.piece_chars)
                    .into_iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect(),
            ),
        };
        out.push(named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        for delta in deltas {
            out.push(named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out.push(named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": s.effective_stop().anthropic(), "stop_sequence": null},
    });
    if !s.no_usage {
        delta["usage"] = json!({"output_tokens": s.usage.output_tokens});
    }
    out.push(named("message_delta", &delta));
    out.push(named("message_stop", &json!({"type": "message_stop"})));
    out
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn openai_events(s: &Scripted, include_usage: bool, model: &str) -> Vec<String> {
    let mut out = vec![data(&chunk(
        model,
        json!({"role": "assistant", "content": ""}),
        None,
    ))];
    let mut tool_index = 0usize;
    for part in &s.content {
        match part {
            Part::Text { text } => {
                for p in pieces(text, s.piece_chars) {
                    out.push(data(&chunk(model, json!({"content": p}), None)));
                }
            }
            Part::ToolUse { id, name, .. } | Part::RawToolUse { id, name, .. } => {
                out.push(data(&chunk(
                    model,
                    json!({"tool_calls": [{
                        "index": tool_index,
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }]}),
                    None,
                )));
                for p in pieces(&arguments(part), s.piece_chars) {
                    out.push(data(&chunk(
                        model,
                        json!({"tool_calls": [{"index": tool_index, "function": {"arguments": p}}]}),
                        None,
                    )));
                }
                tool_index += 1;
            }
        }
    }
    out.push(data(&chunk(
        model,
        json!({}),
        Some(s.effective_stop().openai()),
    )));
    if include_usage && !s.no_usage {
        out.push(data(&json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": s.usage.input_tokens,
                "completion_tokens": s.usage.output_tokens,
                "total_tokens": s.usage.input_tokens + s.usage.output_tokens,
            },
        })));
    }
    out.push("data: [DONE]\n\n".to_string());
    out
}

/// An error inside the stream: Anthropic's `error` event, or the `data: {"error": …}` chunk
/// OpenAI-compatible servers send.
pub fn error_event(dialect: Dialect, error_type: &str, message: &str) -> String {
    match dialect {
        Dialect::Anthropic => named(
            "error",
            &json!({"type": "error", "error": {"type": error_type, "message": message}}),
        ),
        Dialect::Openai => data(&json!({"error": {"type": error_type, "message": message}})),
    }
}

/// The error type a status has in the Anthropic API (also used as OpenAI's `type`).
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The body of an error status in the dialect's format.
pub fn error_body(dialect: Dialect, status: u16, message: &str) -> String {
    let kind = error_type(status);
    match dialect {
        Dialect::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
        }
        Dialect::Openai => {
            json!({"error": {"message": message, "type": kind, "code": null}}).to_string()
        }
    }
}
