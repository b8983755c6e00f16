//! The broker: the supervisor's side of the agent's one channel.
//!
//! The agent asks; the broker decides, does and records. [`state`] is the table of which
//! frame each state of the conversation allows (OpenSSH's monitor is the model); [`server`]
//! reads frames, applies the table, hands allowed tool requests to a
//! [`server::ToolHost`], answers and audits. The wire types are `garuda-ipc`'s; the
//! messages, states and checks are listed in `docs/ipc.md`.

pub mod server;
pub mod state;
