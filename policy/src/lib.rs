//! Garuda's settings files and the [`ExecPolicy`] every sandboxed command runs under.
//!
//! This crate answers two questions for the supervisor, and nothing else touches either:
//! *which settings are in force* ([`load_settings`]) and *what exactly may a command see,
//! write and inherit* ([`build_exec_policy`]). It performs no confinement itself: executors in
//! the supervisor enforce the [`ExecPolicy`] it produces.
//!
//! # Settings sources
//!
//! Three JSON files are read, strictest first:
//!
//! | source | path | who writes it |
//! |---|---|---|
//! | managed | [`MANAGED_POLICY_PATH`] (`/etc/garuda/managed-policy.json`) | the team lead, as root |
//! | user | `$GARUDA_HOME/policy.json` (default `~/.garuda/policy.json`) | the developer |
//! | project | `<project>/.garuda/settings.json` | whoever wrote the repository |
//!
//! The managed path is a constant: no environment variable, flag or setting relocates or
//! disables it, because the people it constrains control all of those.
//!
//! Every file has the same format, and every key is optional:
//!
//! ```json
//! { "executor": "auto",
//!   "sandbox": { "unreadable": ["~/.config/secret-tool", "/opt/keys", "secrets/prod.pem"],
//!                "writable": ["~/.cache/mytool"] },
//!   "env": { "allow": ["NPM_TOKEN"] } }
//! ```
//!
//! Loading fails closed. A file that does not exist is simply absent; a file that exists but
//! cannot be read, is larger than [`MAX_SETTINGS_BYTES`], is not UTF-8, or does not parse (an
//! unknown key, a wrong type, a duplicate key, truncated JSON) is an error that names the file,
//! line and column. A broken managed file in particular is never skipped: skipping it would
//! silently drop the team's rules.
//!
//! # Merge: a project can only tighten
//!
//! A repository is untrusted input: cloning one must not weaken the sandbox. So:
//!
//! - `executor` comes from the highest-precedence file that sets it (managed, then user, then
//!   project), and a project file that says `"host"` is an error.
//! - `sandbox.unreadable` is the union of all three files. Relative entries are relative to the
//!   project root, `~/` is the home directory, absolute paths are used as is; `..` is refused
//!   so an entry cannot point somewhere other than it appears to.
//! - `sandbox.writable` and `env.allow` widen the sandbox, so they are accepted only from the
//!   managed and user files; in a project file they are an error naming the file and key.
//!
//! Every merged value keeps its [`Origin`], so `garuda policy` can say where it came from.
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
//!   dotfiles that the host later runs, or reach a secret.
//! - **Unreadable paths**: the secrets of [`HOME_SECRETS`] that exist, Garuda's own home (audit
//!   keys), the ssh-agent socket, `sandbox.unreadable`, and every `.env` / `.env.*` file or
//!   directory in the project.
//! - **Read-only paths** inside writable roots: `.git/hooks` and `.git/config` of every
//!   repository in the project (worktrees and submodules included), and every `.garuda`
//!   directory. A command that could write these could make the host's `git` run its code after
//!   the sandbox is gone.
//! - **Hidden directories**: `/run`, `/var/run` and `$XDG_RUNTIME_DIR`, where host daemons keep
//!   their sockets.
//! - **Environment**: an allowlist (see [`DEFAULT_ENV_ALLOW`]) minus anything that looks like a
//!   credential, plus `TMPDIR=/tmp`.
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
pub mod command;
mod env;
mod error;
mod exec;
mod host;
mod paths;
pub mod rule;
mod sensitive;
mod settings;
mod walk;

#[cfg(test)]
mod test_support;

pub use assemble::build_exec_policy;
pub use command::{SimpleCommand, SplitError};
pub use env::DEFAULT_ENV_ALLOW;
pub use error::PolicyError;
mod git_guard;
pub use exec::{ExecPolicy, Limits, NetworkMode, StagedView};
pub use git_guard::{GitGuard, GuardViolation};
pub use host::HostEnv;
pub use rule::{Rule, RuleError};
pub use sensitive::{is_env_file_name, HomeEntry, HOME_SECRETS, PACKAGE_CACHES};
pub use settings::{
    load_settings, load_settings_from, CommandMode, EffectiveSettings, ExecutorChoice, Origin,
    SourceKind, StagingBackend, MAX_SETTINGS_BYTES,
};

/// Where the team's managed policy lives. Fixed on purpose: nothing (no environment variable,
/// no flag, no other settings file) relocates or disables it.
pub const MANAGED_POLICY_PATH: &str = "/etc/garuda/managed-policy.json";
