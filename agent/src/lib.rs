//! The unprivileged Garuda agent.
//!
//! Planned (see `docs/hld.md`): started by the supervisor as `garuda agent` with one end of a
//! `socketpair`, the agent confines itself (no new privileges, no capabilities, Landlock with
//! every filesystem right handled and no path rule, seccomp denying `execve` and the other
//! escape routes) and proves it before it reads any model output. It then talks to the model
//! through the supervisor's proxy and reaches everything else through the IPC API of
//! `garuda-ipc` only.
//!
//! Status: a stub. Dependency rule (checked by a test): this crate depends on `garuda-ipc` and
//! model/HTTP crates only, never on `policy`, `staging`, `audit` or the supervisor.
#![forbid(unsafe_code)]

pub use garuda_ipc::PROTOCOL_VERSION;
