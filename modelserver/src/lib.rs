//! The scripted model server: the model every test of Garuda's agent talks to.
//!
//! A real HTTP/1.1 server on `127.0.0.1` (tokio + hyper) that plays a script of responses in
//! order and records every request it got. It speaks both wire formats the agent's clients
//! speak, with real streaming (server-sent events, many small chunks, a flush between them):
//!
//! - **Anthropic Messages** (`POST …/v1/messages`): `message_start`, `ping`,
//!   `content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`) /
//!   `content_block_stop`, `message_delta` with `stop_reason` and `usage`, `message_stop`;
//!   and the `error` event.
//! - **OpenAI Chat Completions** (`POST …/chat/completions`): `data: {…}` chunks with
//!   `choices[0].delta.content` and `delta.tool_calls[i]` (index, id, `function.name`, the
//!   `arguments` in fragments), `finish_reason`, a last chunk with `usage` when the request
//!   asks `stream_options.include_usage`, then `data: [DONE]`.
//!
//! A script entry ([`Scripted`]) says a response once, at the level of the conversation (text
//! blocks, tool calls, a stop reason, usage); [`encode`] turns it into the request's dialect.
//! An entry can also carry a fault ([`Fault`]): the connection closed after N events, an
//! `error` event mid-stream, an HTTP status (429, 529, 500, 401…) with a body and an optional
//! `retry-after` header; and a delay before the response or between events, or no usage
//! reported at all. The n-th request to the dialect's endpoint gets the n-th entry; a request
//! past the end of the script gets a 500, a request to another path a 404, and a `CONNECT` a
//! 405 (all recorded).
//!
//! Each request is recorded ([`Recorded`]) as it arrived: method, request target, every header
//! (including `x-api-key` and `authorization`: a test checks the key went where it should),
//! the JSON body, the time its head arrived and the time its response finished, and how the
//! response ended ([`Outcome`]: complete, cut on purpose, or the client went away). The times
//! are the server's own, so a test can check that a client honoured `retry-after` from the
//! server's point of view rather than timing the client.
//!
//! The server accepts requests in absolute form (`POST http://model.invalid/v1/messages`), so
//! a test can name it as the client's HTTP proxy and see the request arrive through the
//! proxy path, with the host the client asked for.
//!
//! It runs on its own thread with its own runtime: usable from sync tests (the CLI's
//! end-to-end tests start `garuda` as a process and point it here) and from async tests alike,
//! and stopped when dropped. A script can be written in Rust ([`Scripted::text`],
//! [`Scripted::reply`], [`Scripted::status`] and the `with_…` builders) or loaded from a JSON
//! file ([`Script::load`]: `{"dialect": "anthropic", "responses": [ … ]}`, the fields of
//! [`Scripted`]); the `garuda-modelserver` binary serves such a file for manual runs.
//!
//! This crate is test tooling: it is never part of the `garuda` binary nor of the agent.
#![forbid(unsafe_code)]

pub mod encode;
pub mod script;
mod server;

pub use script::{Dialect, Fault, Part, Script, ScriptError, Scripted, Stop, Usage};
pub use server::{ModelServer, Outcome, Recorded};
