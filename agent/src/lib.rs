//! The unprivileged Garuda agent.
//!
//! Planned (see `docs/hld.md`): started by the supervisor as `garuda agent` with one end of a
//! `socketpair`, the agent confines itself (no new privileges, no capabilities, Landlock with
//! every filesystem right handled and no path rule, seccomp denying `execve` and the other
//! escape routes) and proves it before it reads any model output. It then talks to the model
//! through the supervisor's proxy and reaches everything else through the IPC API of
//! `garuda-ipc` only.
//!
//! Status: [`run`] is a stub until the agent loop's issue: it says `hello` and waits for
//! `shutdown`. The confinement itself is applied by `garuda agent` (the supervisor binary's
//! hidden subcommand, `supervisor/src/agent/`) before it calls [`run`]. Dependency rule (checked by a test): this crate depends on `garuda-ipc` and
//! model/HTTP crates only, never on `policy`, `staging`, `audit` or the supervisor.
#![forbid(unsafe_code)]

pub mod model;
pub mod turn;

pub use garuda_ipc::PROTOCOL_VERSION;

use std::os::unix::net::UnixStream;

use garuda_ipc::{decode, read_frame, write_frame, AgentFrame, FrameError, SupervisorFrame};

/// Serve the channel to the supervisor, once `garuda agent` has confined and checked itself:
/// send `hello`, then read frames until `shutdown` or the end of the stream. The model loop
/// comes with its own issue; until then every other frame is read and ignored.
pub fn run(mut channel: UnixStream) -> Result<(), FrameError> {
    write_frame(
        &mut channel,
        &AgentFrame::Hello {
            protocol: PROTOCOL_VERSION,
        },
    )?;
    while let Some(body) = read_frame(&mut channel)? {
        if let SupervisorFrame::Shutdown = decode::<SupervisorFrame>(&body)? {
            break;
        }
    }
    Ok(())
}
