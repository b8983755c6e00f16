//! What a wire format's stream decoder gives the client: the seam between the two dialects
//! ([`super::anthropic`], [`super::openai`]) and the one retry loop ([`super::client`]).

use serde_json::Value;

use super::sse::SseEvent;
use super::types::{ModelResponse, StreamEvent};

/// Why a stream could not be turned into a response. The texts may quote the server
/// unescaped and uncut: the client makes them safe to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The stream broke before its end (an in-stream `error` event, an end of body before
    /// the last event): the request is sent again.
    Broken(String),
    /// The stream is not the API's format: sending it again would not help.
    Protocol(String),
}

/// A stream decoder: events in, one response out.
pub trait Decode: Default {
    /// One event. `display` gets the visible text as it comes. `Ok(true)`: that was the
    /// stream's last event.
    fn event(
        &mut self,
        event: &SseEvent,
        display: &mut dyn FnMut(StreamEvent),
    ) -> Result<bool, DecodeError>;

    /// The response, once the last event came (`ended`) or the body ended without it.
    fn finish(self, ended: bool) -> Result<ModelResponse, DecodeError>;

    /// The usage of this attempt was reported in full so far (for a broken attempt: whether
    /// the budget may settle it rather than keep its reservation).
    fn usage_reported(&self) -> bool;
}

/// A tool call's arguments as the model wrote them: the JSON value when it parses, an
/// empty object when there were none, else the text itself as a string, so that the loop
/// answers the call with an error result the model can read instead of failing the turn.
pub fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

/// The JSON of an event's data, or a protocol error naming what came.
pub fn parse_data(event: &SseEvent) -> Result<Value, DecodeError> {
    // The data is quoted whole: the client takes the key out, then escapes and cuts.
    serde_json::from_str(&event.data).map_err(|e| {
        DecodeError::Protocol(format!("an event's data is not JSON ({e}): {}", event.data))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_or_stay_text() {
        assert_eq!(tool_input(""), serde_json::json!({}));
        assert_eq!(tool_input(" "), serde_json::json!({}));
        assert_eq!(
            tool_input("{\"path\":\"a\"}"),
            serde_json::json!({"path": "a"})
        );
        assert_eq!(tool_input("{\"path\":"), Value::String("{\"path\":".into()));
    }
}
