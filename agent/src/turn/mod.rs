//! One turn of the agent: the loop of seed §3, the tool pipeline of seed §4, the shared token
//! budget of seed T9, compaction, and the journal records that let a session be resumed.
//!
//! - [`agent_loop`]: [`Agent`] runs turns; the stop reasons, `explore` subagents, compaction.
//! - [`tools`]: the tools offered to the model, their schemas and validation, describe, the
//!   request to the supervisor and the result as text.
//! - [`budget`]: one [`Budget`] for the parent and its children.
//! - [`compact`]: which messages are old, trimming, the summary request.
//! - [`journal`]: the records, and [`messages_from_journal`] for resume.
//! - [`link`]: the [`Supervisor`] trait the loop talks through, and [`SocketSupervisor`], its
//!   implementation over the IPC channel.
//!
//! `docs/agent.md` describes the behaviour.

pub mod agent_loop;
pub mod budget;
pub mod compact;
pub mod journal;
pub mod link;
pub mod tools;

#[cfg(test)]
mod loop_tests;
#[cfg(test)]
mod testkit;

pub use agent_loop::{Agent, LoopConfig, TurnOutcome};
pub use budget::{Budget, Refused, Reservation};
pub use journal::{messages_from_journal, rebuild, Rebuilt, Record};
pub use link::{Control, LinkError, SocketSupervisor, Supervisor};
pub use tools::{Call, ToolOutput, ToolSet};
