//! The unprivileged Garuda agent.
//!
//! Started by the supervisor as `garuda agent` with one end of a `socketpair`, the agent runs
//! confined (an empty root, a loopback-only network, no capabilities, Landlock and seccomp:
//! `docs/agent-confinement.md`) and checks it before it reads any model output. It then talks
//! to the model through the supervisor's proxy and reaches everything else through the IPC
//! API of `garuda-ipc` only.
//!
//! [`run`] serves the channel: `hello`, `start`, one turn of [`turn::Agent`] per prompt, with
//! the model reached through [`model::ModelClient`]. The confinement itself is applied by
//! `garuda agent` (the supervisor binary's hidden subcommand, `supervisor/src/agent/`) before
//! it calls [`run`]. Dependency rule (checked by a test): this crate depends on `garuda-ipc`
//! and model/HTTP crates only, never on `policy`, `staging`, `audit` or the supervisor.
#![forbid(unsafe_code)]

pub mod model;
pub mod turn;

pub use garuda_ipc::PROTOCOL_VERSION;

use std::os::unix::net::UnixStream;

/// Why the agent stopped before the supervisor said `shutdown`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The channel to the supervisor failed.
    #[error("the channel to the supervisor: {0}")]
    Link(#[from] turn::LinkError),
    /// The channel failed before the session began.
    #[error("the channel to the supervisor: {0}")]
    Io(#[from] std::io::Error),
    /// The supervisor's first frame was not `start`, or the channel closed before it.
    #[error("expected the supervisor's start, got {0}")]
    NoStart(String),
    /// The model endpoint in `start` cannot be used.
    #[error(transparent)]
    Model(#[from] model::ModelError),
    /// `start` carried a journal that does not rebuild.
    #[error("the session's journal cannot be resumed: {0}")]
    Journal(#[from] turn::journal::JournalError),
    /// `start` named no proxy for the model.
    #[error(
        "the supervisor's start names no model proxy: the agent reaches the model only through it"
    )]
    NoProxy,
}

/// Serve the channel to the supervisor, once `garuda agent` has confined and checked itself:
/// send `hello`, take `start` (the model endpoint, the limits, the system prompt, and for a
/// resumed session its journal), then run one turn per `user_prompt` until `shutdown` or the
/// end of the channel. Everything runs on one thread (a current-thread runtime), the link's
/// reader included.
pub fn run(channel: UnixStream) -> Result<(), RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(channel))
}

async fn serve(channel: UnixStream) -> Result<(), RunError> {
    let link = turn::SocketSupervisor::new(channel)?;
    let result = session(&link).await;
    // Whatever the agent wrote last (the turn's end, the journal's records) reaches the
    // supervisor before the runtime that writes it goes.
    link.flush().await;
    result
}

async fn session(link: &turn::SocketSupervisor) -> Result<(), RunError> {
    use turn::{Agent, Control, LoopConfig};
    link.hello()?;
    let start = match link.next_control().await {
        Control::Start(start) => start,
        // The supervisor may end the session before it begins.
        Control::Shutdown => return Ok(()),
        other => return Err(RunError::NoStart(format!("{other:?}"))),
    };
    // The agent reaches the model only through the supervisor's proxy. `ModelClient` alone
    // takes an empty proxy as a direct connection (tests, runs without the supervisor): a
    // session's start without one is refused, not tried directly.
    if start.model.proxy.trim().is_empty() {
        return Err(RunError::NoProxy);
    }
    let client = model::ModelClient::new(&start.model)?;
    let config = LoopConfig::from_start(&start);
    let lines: Vec<&str> = start.resume.iter().map(String::as_str).collect();
    let journal = turn::rebuild(&lines)?;
    let mut agent = Agent::resume(&client, link, config, start.system_prompt.clone(), journal);
    loop {
        match link.next_control().await {
            Control::UserPrompt(text) => {
                // The link cleared any cancel from before this prompt (in frame order).
                let outcome = agent.run_turn(&text).await?;
                link.turn_end(outcome.reason, outcome.usage)?;
            }
            Control::Shutdown | Control::Closed(_) => return Ok(()),
            // A second start is refused by the supervisor's state table; ignore it here.
            Control::Start(_) => {}
        }
    }
}
