//! The broker: the supervisor's side of the agent's narrow API (`garuda-ipc`). The agent can
//! only ask; the broker decides (the permission engine of `garuda-policy`), does and records.
//!
//! - [`resolve`]: project paths to files, beneath the held project root (`openat2`), never
//!   outside it;
//! - [`files`]: the file tools (`read_file`, `write_file`, `edit_file`, `glob`, `grep`) on top
//!   of it, each returning its answer with the engine's decision for the audit log;
//! - `search`: the walk, glob and regular-expression half of `glob` and `grep`.
//!
//! `docs/broker.md` gives the rules and why.

pub mod files;
pub mod resolve;
mod search;

#[doc(hidden)]
pub mod exercise;

pub use files::{FileTools, Outcome, Pending, Prepared, Tool};
pub use resolve::{ProjectRoot, ResolveError};
pub use search::{
    MAX_GLOB_PATHS, MAX_GREP_FILE_BYTES, MAX_GREP_LINE_BYTES, MAX_GREP_MATCHES, MAX_WALK_ENTRIES,
};
