//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

/// Why staging could not be set up, a change list could not be built, or an apply or discard
/// did not happen.
///
/// Every variant names what failed (a path, a size, the reason) so the message alone tells
/// the user what to fix. None of them is a reason to fall back to direct mode: a caller that
/// cannot stage refuses to run the command.
#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    /// A filesystem operation failed.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// What was being done ("create the staging folder", "read", "rename", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The project is not a directory.
    #[error("{}: the project is not a folder", path.display())]
    ProjectNotDir {
        /// The project path.
        path: PathBuf,
    },

    /// The staging folder would lie inside the project (or the project inside it): a copy
    /// would copy itself and overlayfs refuses overlapping layers.
    #[error(
        "the staging folder {} and the project {} overlap; set GARUDA_HOME outside the project",
        staging.display(),
        project.display()
    )]
    Overlapping {
        /// `<garuda_home>/staging`.
        staging: PathBuf,
        /// The project.
        project: PathBuf,
    },

    /// `staging.backend` is `overlay` but overlayfs cannot be mounted in a user namespace
    /// here. There is no silent fallback to a copy.
    #[error("the overlay staging backend was selected but overlayfs is not usable in a user namespace on this system (kernel 5.11 or later is needed); choose \"auto\" or \"copy\"")]
    OverlayUnavailable,

    /// A plain copy of the project would exceed the cap.
    #[error(
        "{}: the project holds {size} bytes, more than the {cap}-byte limit of a plain staging copy (this filesystem has no reflink copies, so staging would duplicate every byte); use a filesystem with reflink or overlayfs, or direct mode",
        project.display()
    )]
    TooLarge {
        /// The project.
        project: PathBuf,
        /// Bytes measured (at least `cap + 1`).
        size: u64,
        /// The cap.
        cap: u64,
    },

    /// The project has more entries than a copy backend can compare after each command.
    #[error(
        "{}: the project has more than {limit} files and folders; a staging copy compares the whole project after each command and could never list a complete change",
        project.display()
    )]
    TooManyFiles {
        /// The project.
        project: PathBuf,
        /// The limit.
        limit: usize,
    },

    /// `cp` failed to copy the project.
    #[error("copying {} to {} failed: {reason}", project.display(), dest.display())]
    CopyFailed {
        /// The project.
        project: PathBuf,
        /// Where the copy was going.
        dest: PathBuf,
        /// Exit status and the start of `cp`'s error output.
        reason: String,
    },

    /// The change list is incomplete: only discard is possible.
    #[error("the change list is incomplete ({reason}): it can only be discarded")]
    Incomplete {
        /// Why.
        reason: String,
    },

    /// A staged symbolic link points outside the project.
    #[error("{path}: the staged symbolic link points outside the project; nothing was applied")]
    LinkOutOfRoot {
        /// Project-relative path of the link.
        path: String,
    },

    /// Project files changed since the command started; nothing was applied.
    #[error("these project files changed while the command ran, so nothing was applied: {}", paths.join(", "))]
    Conflict {
        /// Project-relative paths.
        paths: Vec<String>,
    },

    /// A staged file differs from what the change list showed (or the path was never listed).
    #[error("{path}: the staged file changed after the change list was shown (or was never listed); nothing was applied")]
    StagedChanged {
        /// Project-relative path.
        path: String,
    },

    /// The change touches Garuda's project settings (`.garuda/`), which [`crate::Session::apply`]
    /// never applies: they need a question of their own
    /// ([`crate::Session::apply_with_garuda_settings`]).
    #[error(
        "the change touches Garuda's project settings ({}), which are applied only after a \
         question of their own; nothing was applied",
        paths.iter().map(|p| crate::render::escape_text(p)).collect::<Vec<_>>().join(", ")
    )]
    GarudaSettings {
        /// Project-relative paths under `.garuda`.
        paths: Vec<String>,
    },

    /// A change that this crate does not apply (and so refuses as a whole).
    #[error("{path}: {reason}; nothing was applied")]
    Unsupported {
        /// Project-relative path.
        path: String,
        /// Why.
        reason: String,
    },

    /// A journal could not be understood. The project may be half-applied: the journal is
    /// kept for a person to look at.
    #[error("{}: unreadable apply journal ({reason}); it was left in place", path.display())]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// Why.
        reason: String,
    },

    /// The apply passed its commit point but could not finish. The journal stays; the next
    /// [`crate::recover`] (every session start runs it) finishes the apply.
    #[error("{}: the apply was committed but not finished ({source}); it will be finished at the next start", journal.display())]
    CommitUnfinished {
        /// The journal left behind.
        journal: PathBuf,
        /// What stopped it.
        #[source]
        source: Box<StagingError>,
    },
}

/// Result alias.
pub type Result<T, E = StagingError> = std::result::Result<T, E>;

/// `map_err` helper: wraps an `io::Error` with the operation and path.
pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(io::Error) -> StagingError {
    let path = path.into();
    move |source| StagingError::Io { op, path, source }
}
