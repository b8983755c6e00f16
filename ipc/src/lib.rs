//! Wire types of the narrow API between the Garuda supervisor and the confined agent.
//!
//! The agent process talks to the model; the supervisor owns every side effect. The only
//! channel between them is one `socketpair` carrying length-prefixed frames. This crate will
//! hold the one request enum (`hello`, `read_file`, `write_file`, `edit_file`, `glob`, `grep`,
//! `run_command`, `ui_event`, `journal_append`, `turn_end`), the one response enum
//! (`user_prompt`, `cancel`, `shutdown` from the supervisor), the frame codec with its hard
//! size cap, and the protocol version carried by the first message.
//!
//! Status: a stub. The foundation issue builds the executors first; the IPC API comes with the
//! agent. Nothing here performs I/O policy: both sides share these types, and the supervisor
//! alone decides what a request may do.
#![forbid(unsafe_code)]

/// Version of the wire protocol, carried in the first message of a connection.
pub const PROTOCOL_VERSION: u32 = 1;

/// Hard cap on one frame, request or response. A larger length prefix ends the connection.
pub const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;
