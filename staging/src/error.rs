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

    /// The staging copy of the project could not be made.
    #[error("copying {} to {} failed: {reason}", project.display(), dest.display())]
    CopyFailed {
        /// The project.
        project: PathBuf,
        /// Where the copy was going.
        dest: PathBuf,
        /// What failed.
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

    /// The change touches files that a guard keeps out of a plain apply (Garuda's project
    /// settings, sensitive files: see [`crate::Guard`]) and the caller did not approve that
    /// guard ([`crate::Session::apply_approved`]).
    #[error(
        "the change touches {} ({}), which are applied only after a question of their own; \
         nothing was applied",
        guard.what(),
        paths.iter().map(|p| garuda_text::visible(p)).collect::<Vec<_>>().join(", ")
    )]
    Guarded {
        /// The guard that refused.
        guard: crate::Guard,
        /// Project-relative paths it covers.
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

    /// A project path could not be reached without following a link: on the way to it (or at
    /// it), the project has a symbolic link, or an entry of another kind than the one Garuda
    /// needs there. A command running in direct mode in the same project can swap a folder
    /// for a link while Garuda works; nothing is ever written, read or removed through such
    /// an entry, and an apply that meets one is refused as a whole.
    #[error("{path}: the project has {found} at {at} where {wanted} was expected; Garuda never writes through it{}", found.hint())]
    UnsafeProjectPath {
        /// Project-relative path that was being applied, copied or recovered.
        path: String,
        /// Project-relative path of the entry that was found (`path` itself or an ancestor).
        at: String,
        /// What was found there.
        found: FoundKind,
        /// What was needed there ("a real folder", "a file or a link").
        wanted: &'static str,
    },

    /// Recovery could not finish a committed apply without following a link (or failed
    /// otherwise). The journal stays where it is; every start retries it.
    #[error("{}: an interrupted apply could not be finished ({source}); the journal was left in place and the next start tries again (restore the folder, or move the journal away to give up the rest of that apply)", journal.display())]
    RecoveryStopped {
        /// The journal left behind.
        journal: PathBuf,
        /// What stopped it.
        #[source]
        source: Box<StagingError>,
    },
}

/// What [`StagingError::UnsafeProjectPath`] found in the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundKind {
    /// A symbolic link.
    Link,
    /// A regular file.
    File,
    /// A folder.
    Folder,
    /// A FIFO, socket or device.
    Special,
    /// An entry that changed kind while it was being opened (a link swapped in and out).
    Changing,
}

impl FoundKind {
    fn hint(self) -> &'static str {
        match self {
            FoundKind::Link | FoundKind::Changing => {
                " (a link there may have been swapped in by a command running in the same project)"
            }
            FoundKind::File => " (a file replaced by a folder cannot be applied in one change: discard and make that change in two commands)",
            FoundKind::Folder | FoundKind::Special => "",
        }
    }
}

impl std::fmt::Display for FoundKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FoundKind::Link => "a symbolic link",
            FoundKind::File => "a file",
            FoundKind::Folder => "a folder",
            FoundKind::Special => "a special file",
            FoundKind::Changing => "an entry that changed while it was opened",
        })
    }
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
