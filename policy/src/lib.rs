//! Garuda's policy: its sources and merge, the permission engine, and the [`ExecPolicy`] every
//! sandboxed command runs under.
//!
//! This crate answers three questions for the supervisor, and nothing else touches them:
//! *which policy is in force* ([`load_policy`]), *may this request run*
//! ([`engine::Engine::decide`]) and *what exactly may a command see, write and inherit*
//! ([`build_exec_policy`]). It performs no confinement itself: executors in the supervisor
//! enforce the [`ExecPolicy`] it produces.
//!
//! # Sources
//!
//! Read strictest first:
//!
//! | source | path | who writes it |
//! |---|---|---|
//! | managed | [`MANAGED_POLICY_PATH`], then [`MANAGED_DROPIN_DIR`]`/*.json` in name order | the team lead, as root |
//! | user | `$GARUDA_HOME/policy.json` (default `~/.garuda/policy.json`) | the developer |
//! | project | `<project>/.garuda/settings.json` | whoever wrote the repository |
//! | flags | [`Flags`]: `--strict`, `--staged`, `--executor`, `--allow-host` | the person at the keyboard |
//!
//! The managed paths are constants: no environment variable, flag or setting relocates or
//! disables them, because the people they constrain control all of those.
//!
//! Loading fails closed. A file that does not exist is simply absent; a file that exists but
//! cannot be read, is larger than [`MAX_SETTINGS_BYTES`], is not UTF-8, or does not parse (an
//! unknown key, a wrong type, a duplicate key, truncated JSON), or holds a value that is
//! refused, is an error that names the file, line and column.
//!
//! # Merge: strictest wins
//!
//! Every key takes the strictest source: deny and ask rules and unreadable paths are unions;
//! `profile: strict`, `requireSandbox`, staged commands and audit checkpoints are on when any
//! source turns them on; allow rules and network hosts from the user and project are dropped
//! when the managed file says `managedRulesOnly` / `managedHostsOnly`. A project file may only
//! tighten: `executor: "host"`, `sandbox.writable`, `env.allow`, `permissions.allow`,
//! `network.allow` and `audit.witness` in it are errors. The strict profile implies
//! `requireSandbox`, under which the host executor is an error wherever it is chosen. Every
//! value keeps its [`Origin`] (file and line), so `garuda policy` can say where it came from.
//! `docs/policy.md` has the full table; `tests/merge_properties.rs` checks it as a property.
//!
//! # The permission engine
//!
//! [`engine`] decides one request in the source design's order: sensitive path, write into
//! `.git` or `.garuda`, deny rule, sandbox requirement, plan mode, ask rule, read-only tool, sandboxed
//! command, allow or session rule, otherwise ask. Command lines are split by [`command::split`]
//! on a real shell parser; rules are [`rule::Rule`].
//!
//! # The ExecPolicy
//!
//! [`build_exec_policy`] turns the effective settings and the host environment into one
//! [`ExecPolicy`]. Every path in it is canonical (no symbolic link in any component), so an
//! executor never resolves links itself and a link planted by a command cannot redirect a rule.
//!
//! - **Writable roots**: the project, the package caches of [`PACKAGE_CACHES`] that exist, and
//!   `sandbox.writable`. A writable entry that is `/`, the home directory or one of its
//!   ancestors, or that overlaps an unreadable path, is refused: it would let a command rewrite
//!   dotfiles that the host later runs, or reach a secret. So is `/tmp` itself (commands get a
//!   private one; a folder under it is shared at its own path). An entry with nothing at its
//!   path is skipped with a [`PolicyNotice`] ([`build_exec_policy_noting`], [`check_writable`]),
//!   except under the strict profile, where it is an error.
//! - **Unreadable paths**: the secrets of [`HOME_SECRETS`] that exist, Garuda's own home (audit
//!   keys), the ssh-agent socket, `sandbox.unreadable`, and every `.env` / `.env.*` file or
//!   directory in the project.
//! - **Read-only paths** inside writable roots: every git directory in the project (and the
//!   common, worktree and submodule directories they lead to) as a whole, `.git` pointer files,
//!   the files git runs or reads because a link or its configuration names them
//!   (`core.hooksPath`, `include.path`, `core.fsmonitor`, …), and `<project>/.garuda`, created
//!   empty when missing. A command that could write these could make the host's `git` run its
//!   code after the sandbox is gone, or plant project settings.
//! - **Writable holes** inside them: each git directory's `objects`, `refs` and `logs`.
//! - **Hidden directories**: `/run`, `/var/run` and `$XDG_RUNTIME_DIR`, where host daemons keep
//!   their sockets.
//! - **Environment**: an allowlist (see [`DEFAULT_ENV_ALLOW`]) minus anything that looks like a
//!   credential, never a model provider's key or base URL ([`PROVIDER_ENV_DENY`]), plus
//!   `TMPDIR=/tmp`.
//! - **Network** isolated, and default [`Limits`].
//!
//! ```no_run
//! # fn main() -> Result<(), garuda_policy::PolicyError> {
//! use std::path::Path;
//! let host = garuda_policy::HostEnv::from_process()?;
//! let root = Path::new(".");
//! let settings = garuda_policy::load_settings(root, &host)?;
//! let policy = garuda_policy::build_exec_policy(root, &settings, &host)?;
//! assert!(policy.is_under_writable_root(&policy.project_root));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod assemble;
pub mod beside;
pub mod command;
mod describe;
pub mod engine;
mod env;
mod error;
mod exec;
mod gitconfig;
mod gitexec;
mod host;
mod locate;
pub mod model;
pub mod network;
mod paths;
mod protect;
pub mod rule;
mod sensitive;
mod settings;
mod walk;
mod walk_cache;

#[cfg(test)]
mod test_support;

pub use assemble::{build_exec_policy, build_exec_policy_noting, check_writable, PolicyNotice};
pub use command::{SimpleCommand, SplitError};
pub use describe::{describe, render as render_entries, Entry};
pub use env::{DEFAULT_ENV_ALLOW, PROVIDER_ENV_DENY};
pub use error::PolicyError;
pub use exec::{ExecPolicy, Limits, NetworkMode, StagedView};
pub use host::HostEnv;
pub use rule::{Rule, RuleError};
pub use sensitive::{
    is_env_file_name, names_garuda_folder, names_git_folder, HomeEntry, HOME_SECRETS,
    PACKAGE_CACHES,
};
pub use settings::{
    exercise_policy, load_policy, load_policy_from, load_settings, load_settings_from, merge_texts,
    CommandMode, Dropped, EffectiveSettings, ExecutorChoice, Flags, Origin, Profile, RuleList,
    SourceKind, SourcePaths, SourcedRule, StagingBackend, MAX_SETTINGS_BYTES,
};

/// Where the team's managed policy lives. Fixed on purpose: nothing (no environment variable,
/// no flag, no other settings file) relocates or disables it.
pub const MANAGED_POLICY_PATH: &str = "/etc/garuda/managed-policy.json";

/// Where the team's managed drop-ins live (`*.json`, merged after [`MANAGED_POLICY_PATH`] in
/// name order). Fixed for the same reason.
pub const MANAGED_DROPIN_DIR: &str = "/etc/garuda/managed-policy.d";
