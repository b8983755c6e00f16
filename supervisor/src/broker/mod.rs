//! The broker: the supervisor's side of the agent's one channel (`garuda-ipc`). The agent
//! can only ask; the broker decides (the permission engine of `garuda-policy`), does and
//! records.
//!
//! - [`state`]: the table of which frame each state of the conversation allows (OpenSSH's
//!   monitor is the model);
//! - [`server`]: reads frames, applies the table, hands allowed tool requests to a
//!   [`server::ToolHost`], answers and audits;
//! - [`resolve`]: project paths to files, beneath the held project root (`openat2`), never
//!   outside it;
//! - [`files`]: the file tools (`read_file`, `write_file`, `edit_file`, `glob`, `grep`) on top
//!   of it, each returning its answer with the engine's decision for the audit log;
//! - [`host`]: the tool host of a session: file tools, commands through `garuda sandbox`, the
//!   journal; "ask" verdicts go to the supervisor's approver, never to the agent;
//! - `judge`: what `files` and `search` share (the tool, the engine's judgement of a path,
//!   what is text, error answers);
//! - `search`: the walk, glob and regular-expression half of `glob` and `grep`.
//!
//! `docs/ipc.md` lists the messages, states and checks; `docs/broker.md` gives the file
//! tools' rules and why.

pub mod files;
pub mod host;
mod judge;
pub mod resolve;
mod search;
pub mod server;
pub mod state;

#[doc(hidden)]
pub mod exercise;

pub use files::{FileTools, Outcome, Pending, Prepared, Tool};
pub use resolve::{ProjectRoot, ResolveError};
pub use search::{
    MAX_GLOB_PATHS, MAX_GREP_FILE_BYTES, MAX_GREP_LINE_BYTES, MAX_GREP_MATCHES, MAX_WALK_ENTRIES,
};
