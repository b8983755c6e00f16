//! The one policy a sandboxed command runs under.
//!
//! Every executor receives the same [`ExecPolicy`]; what differs between executors is only how
//! they enforce it. The struct is exhaustive on purpose: a new axis of confinement is a new
//! field that every executor must handle (and the contract suite must test), never an option
//! that one backend quietly ignores.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a command may use the network. The safest variant is the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// A network namespace of its own with only a loopback interface: no route anywhere,
    /// including the host's loopback services.
    #[default]
    Isolated,
}

/// Resource limits applied to the whole process tree of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Upper bound on the number of processes the command may have at once (fork bombs).
    pub max_processes: u32,
    /// Bytes of stdout and of stderr kept when output is captured; the rest is counted and
    /// replaced by a truncation marker.
    pub output_cap: usize,
    /// Wall-clock limit after which the whole process tree is killed.
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_processes: 512,
            output_cap: 256 * 1024,
            timeout: None,
        }
    }
}

/// The staged view of the project a staged command runs over (see the `staging` crate). The
/// executor mounts it at the project's own path, so the real project is not reachable from the
/// command at all: every write, including one to the project's absolute path, lands in the
/// staging folder and becomes a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagedView {
    /// overlayfs in the command's user namespace: `lower` is the project, writes go to
    /// `upper` (with `work` as overlayfs's scratch folder); mounted with `userxattr`.
    Overlay {
        /// The project (read-only lower layer).
        lower: PathBuf,
        /// Where the command's writes land.
        upper: PathBuf,
        /// overlayfs work folder (same filesystem as `upper`).
        work: PathBuf,
    },
    /// A full copy of the project (reflink or plain), bound at the project's path.
    Copy {
        /// The copy.
        dir: PathBuf,
    },
}

/// Everything an executor needs to confine one command.
///
/// Paths are absolute and canonical (no symbolic link in any component) when built by
/// [`crate::build_exec_policy`]; executors rely on that and never resolve links themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    /// The project root: the command's working directory and its main writable root.
    pub project_root: PathBuf,
    /// Directories (and files) the command may write: the project root and package caches.
    /// `/tmp` is not listed: every Linux executor gives the command a private, empty `/tmp`.
    pub writable_roots: Vec<PathBuf>,
    /// Paths inside writable roots that stay read-only (`.git/hooks`, `.git/config`,
    /// `.garuda/`). Each exists when the policy is built.
    pub read_only_paths: Vec<PathBuf>,
    /// Secrets: existing files and directories the command must not read at all.
    pub unreadable_paths: Vec<PathBuf>,
    /// Directories replaced by an empty directory, hiding host daemons' sockets (`/run`,
    /// `$XDG_RUNTIME_DIR`). Each exists when the policy is built.
    pub hidden_dirs: Vec<PathBuf>,
    /// Network access.
    pub network: NetworkMode,
    /// When set, the command sees this staged view at `project_root` instead of the project.
    pub staged: Option<StagedView>,
    /// The complete environment of the command (already filtered by the allowlist).
    pub env: Vec<(OsString, OsString)>,
    /// Resource limits.
    pub limits: Limits,
}

impl ExecPolicy {
    /// True when `path` lies inside one of the writable roots (component-wise prefix).
    pub fn is_under_writable_root(&self, path: &Path) -> bool {
        self.writable_roots
            .iter()
            .any(|root| path.starts_with(root))
    }
}
