//! The one error type of this crate.
//!
//! Errors are for the *writer*, the key store and the witness: something could not be done.
//! Verification never returns an error for what it finds in the files; it reports
//! [`crate::Finding`]s instead, because a damaged log is an answer, not a failure.

use std::io;
use std::path::PathBuf;

/// Why an audit operation could not be carried out.
///
/// Every variant names the path or value that failed. Any error from
/// [`crate::SessionWriter::append`] poisons the writer: later appends return
/// [`AuditError::Poisoned`], so the supervisor stops running commands it cannot record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// A file or folder could not be created, opened, read, written or synced.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A path that must be a real file or folder is a symbolic link.
    #[error("{}: is a symbolic link; the audit log never follows links", path.display())]
    Symlink {
        /// The link.
        path: PathBuf,
    },

    /// A file or folder is of the wrong type (a folder where a file is expected, a FIFO...).
    #[error("{}: expected a {expected}", path.display())]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What it should be ("regular file", "folder").
        expected: &'static str,
    },

    /// A file or folder has permissions other than the private ones the log needs.
    #[error("{}: mode {mode:04o}, expected {expected:04o}", path.display())]
    UnsafeMode {
        /// The path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The permission bits it must have.
        expected: u32,
    },

    /// A file or folder belongs to another user.
    #[error("{}: owned by uid {owner}, not by the current user (uid {expected})", path.display())]
    WrongOwner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The current user.
        expected: u32,
    },

    /// The project root could not be resolved to a canonical path.
    #[error("{}: cannot resolve the project root: {source}", path.display())]
    ProjectRoot {
        /// The configured project root.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A key file does not hold a valid key.
    #[error("{}: not an audit key ({reason})", path.display())]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// No install secret exists where one was expected.
    #[error("{}: no install secret", path.display())]
    NoKey {
        /// The expected key file.
        path: PathBuf,
    },

    /// A file that must be new already exists (an export target, a session file).
    #[error("{}: already exists", path.display())]
    Exists {
        /// The path.
        path: PathBuf,
    },

    /// Another process holds the lock on a file that must have a single writer.
    #[error("{}: locked by another writer", path.display())]
    Locked {
        /// The locked file.
        path: PathBuf,
    },

    /// Every journal lane of a project is held by a running session: no new session can be
    /// recorded there until one of them closes (or its process dies).
    #[error(
        "{}: all {lanes} journal lanes of this project are held by running sessions; wait for one to end",
        dir.display()
    )]
    LanesFull {
        /// The project's audit folder.
        dir: PathBuf,
        /// How many lanes a project may have.
        lanes: u64,
    },

    /// The event kind passed to `append` is not allowed.
    #[error("event kind {kind:?} is invalid ({reason})")]
    InvalidKind {
        /// The kind.
        kind: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// A line would exceed [`crate::MAX_LINE_BYTES`].
    #[error("a {kind:?} line would be {len} bytes, more than the limit of {limit}")]
    LineTooLong {
        /// The event kind.
        kind: String,
        /// The line's length.
        len: usize,
        /// The limit.
        limit: usize,
    },

    /// The writer configuration is unusable (an epoch of zero lines or zero seconds).
    #[error("invalid audit configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: &'static str,
    },

    /// An earlier failure poisoned the writer; nothing more is written to this session.
    #[error("audit session {session} stopped after an earlier failure: {reason}")]
    Poisoned {
        /// The session id.
        session: String,
        /// The first failure.
        reason: String,
    },

    /// The witness could not be run, did not answer in time, or answered something unreadable.
    #[error("witness {witness}: {reason}")]
    Witness {
        /// The witness command or folder.
        witness: String,
        /// What went wrong.
        reason: String,
    },

    /// The witness refused the checkpoint: it holds another tree for this origin.
    #[error("witness {witness} refused {origin} at size {size}: {answer}")]
    WitnessRefused {
        /// The witness command or folder.
        witness: String,
        /// The checkpoint's origin.
        origin: String,
        /// The size that was submitted.
        size: u64,
        /// The witness's answer.
        answer: String,
    },

    /// A file the writer or the witness must read back (the index, a stored checkpoint, a
    /// request) is not in the expected format.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file (or `-` for standard input).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl AuditError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        AuditError::Io {
            path: path.into(),
            source,
        }
    }
}
