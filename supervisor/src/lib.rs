//! The Garuda supervisor: the trusted half of Garuda.
//!
//! The supervisor owns every side effect. This crate holds:
//!
//! - [`executor`]: the one [`executor::Executor`] trait and its backends — `landlock` (native
//!   namespaces, mounts, Landlock and seccomp), `bubblewrap` (the system's `bwrap` with our
//!   argument vector and seccomp program), `seatbelt` (macOS `sandbox-exec` with a generated
//!   profile) and `host` (no isolation: the negative control);
//! - [`doctor`]: what this machine offers (executors, Landlock ABI, bwrap version, user
//!   namespaces, overlayfs in a user namespace, seccomp);
//! - [`cli`]: `garuda sandbox` and `garuda doctor`;
//! - [`demo`]: `garuda demo`, the sandbox at work on a throwaway project;
//! - [`agent`]: the confined agent process — its spawner, and `garuda agent`'s own
//!   confinement and self-check;
//! - [`models`]: which model a session talks to (built-in providers, `models.json`, the SDKs'
//!   variables) and its key (`credentials`), kept out of every child's environment;
//! - [`sessions`]: the agent sessions' journals (redacted, private, reached without following
//!   links) and `garuda sessions`;
//! - [`broker`]: the supervisor's side of the agent's API: the state table and server, the file tools, which resolve every
//!   path beneath the held project root and ask the permission engine before they touch it;
//! - `sys`: the only module of the workspace with `unsafe` code, every block with a
//!   `// SAFETY:` note.
//!
//! The policy every command runs under comes from `garuda-policy`
//! ([`garuda_policy::ExecPolicy`]); executors only enforce it.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod agent;
pub mod audit_cmd;
pub mod broker;
pub mod chat;
pub mod chat_tui;
pub mod cli;
pub mod demo;
pub mod dnsstub;
pub mod doctor;
pub mod executor;
pub mod exit_codes;
pub mod models;
pub mod netbridge;
pub mod project;
pub mod proxy;
pub mod record;
pub mod replay;
pub mod run_agent;
pub mod sessions;
pub mod staged_ask;
pub(crate) mod sys;

#[doc(hidden)]
pub use sys::answer_on_this_thread;
