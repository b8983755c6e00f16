//! The one error type of this crate.

use std::io;
use std::path::PathBuf;

use crate::settings::Origin;

/// Why settings could not be loaded or an [`crate::ExecPolicy`] could not be built.
///
/// Every variant names what failed (the file, line and column, the path or the value) so the
/// user can fix it. None of them is ever downgraded to a warning: Garuda refuses to start
/// rather than run with a policy it could not fully read. (A `sandbox.writable` path that does
/// not exist is not an error outside the strict profile: it narrows nothing, so it is skipped
/// with a [`crate::PolicyNotice`].)
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// `HOME` is not set (or empty): the secrets under it could not be found.
    #[error("HOME is not set: Garuda needs it to find the secrets it must hide")]
    HomeUnset,

    /// `HOME` is a relative path.
    #[error("HOME must be an absolute path, not {}", value.display())]
    HomeNotAbsolute {
        /// The value of `HOME`.
        value: PathBuf,
    },

    /// `GARUDA_HOME` is a relative path.
    #[error("GARUDA_HOME must be an absolute path, not {}", value.display())]
    GarudaHomeNotAbsolute {
        /// The value of `GARUDA_HOME`.
        value: PathBuf,
    },

    /// A settings file exists but could not be read.
    #[error("{}: cannot read settings: {source}", path.display())]
    SettingsRead {
        /// The settings file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A settings path exists but is not a regular file (a directory, a FIFO, a device).
    #[error("{}: settings must be a regular file", path.display())]
    SettingsNotFile {
        /// The settings path.
        path: PathBuf,
    },

    /// A settings file is larger than [`crate::MAX_SETTINGS_BYTES`].
    #[error(
        "{}:{line}:{column}: settings file has {size} bytes, more than the limit of {limit} \
         (reached here)",
        path.display()
    )]
    SettingsTooLarge {
        /// The settings file.
        path: PathBuf,
        /// Bytes seen (at least `limit + 1`).
        size: u64,
        /// The limit.
        limit: u64,
        /// Line where the limit is crossed.
        line: usize,
        /// Column where the limit is crossed.
        column: usize,
    },

    /// A settings file is not valid UTF-8.
    #[error("{}:{line}:{column}: settings are not valid UTF-8", path.display())]
    SettingsNotUtf8 {
        /// The settings file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based column (in bytes) of the first invalid byte.
        column: usize,
    },

    /// A settings file is not valid JSON or does not match the format (unknown key, wrong
    /// type, duplicate key).
    #[error("{}:{line}:{column}: {message}", path.display())]
    SettingsParse {
        /// The settings file.
        path: PathBuf,
        /// 1-based line reported by the parser.
        line: usize,
        /// Column reported by the parser.
        column: usize,
        /// What the parser found wrong.
        message: String,
    },

    /// A value of a settings file parses but is refused: a project widening the policy, a rule
    /// or host that does not parse, a path with `..`, a key reserved to the managed file.
    #[error("{}:{line}:{column}: \"{key}\": {message}", path.display())]
    SettingsValue {
        /// The settings file.
        path: PathBuf,
        /// 1-based line of the value.
        line: usize,
        /// 1-based column of the value.
        column: usize,
        /// The dotted key (`permissions.allow[2]`).
        key: String,
        /// Why it is refused.
        message: String,
    },

    /// A command-line flag would loosen the policy files.
    #[error("{flag} is refused: {reason}")]
    FlagRefused {
        /// The flag and its value.
        flag: String,
        /// Why.
        reason: String,
    },

    /// The host executor was chosen where an OS sandbox is required.
    #[error(
        "executor host ({chosen_by}) is not allowed: {required_by} requires an OS sandbox \
         (profile strict or requireSandbox); remove the host executor setting"
    )]
    HostExecutorForbidden {
        /// Where the host executor was chosen.
        chosen_by: String,
        /// Where the sandbox was required.
        required_by: String,
    },

    /// An existing path could not be resolved to its canonical form.
    #[error("cannot resolve {}: {source}", path.display())]
    Canonicalize {
        /// The path as given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The project root is not a directory.
    #[error("project root {} is not a directory", path.display())]
    ProjectRootNotDirectory {
        /// The canonical project root.
        path: PathBuf,
    },

    /// The project root is the home directory or one of its ancestors.
    #[error(
        "project root {} contains the home directory {}: commands could rewrite dotfiles the host runs",
        path.display(),
        home.display()
    )]
    ProjectRootTooBroad {
        /// The canonical project root.
        path: PathBuf,
        /// The canonical home directory.
        home: PathBuf,
    },

    /// A package cache resolves to the home directory or one of its ancestors (a symbolic
    /// link such as `~/.cache -> ~`).
    #[error(
        "package cache {} contains the home directory {}: it cannot be made writable",
        path.display(),
        home.display()
    )]
    CacheTooBroad {
        /// The canonical cache path.
        path: PathBuf,
        /// The canonical home directory.
        home: PathBuf,
    },

    /// The project root is a folder every Linux sandbox replaces with its own: `/tmp` itself,
    /// or a folder at or under `/dev` or `/proc`.
    #[error(
        "project root {} is refused: {}; put the project in a folder of its own (mkdir /tmp/proj) and run there, or pass --project DIR",
        path.display(),
        replaced_reason(path)
    )]
    ProjectRootReplaced {
        /// The canonical project root.
        path: PathBuf,
    },

    /// A `sandbox.writable` entry does not exist, under the strict profile. (Outside strict it
    /// is skipped with a [`crate::PolicyNotice::WritableSkipped`].)
    #[error(
        "writable path {} (sandbox.writable, {origin}) does not exist, and the strict profile ({}) does not skip a missing writable path: create it, or remove the entry",
        path.display(),
        strict.as_ref().map_or_else(|| "in force".to_string(), |o| o.to_string())
    )]
    WritableMissing {
        /// The entry, resolved against the project root or home.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
        /// The source that made the profile strict.
        strict: Option<Origin>,
    },

    /// A `sandbox.writable` entry is a symbolic link whose target does not exist.
    #[error(
        "writable path {} (sandbox.writable, {origin}) is refused: it is a symbolic link to {}, which does not exist, so whatever is made there later would become writable; fix the link or remove the entry",
        path.display(),
        target.display()
    )]
    WritableDanglingLink {
        /// The entry, resolved against the project root or home.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
        /// What the link says.
        target: PathBuf,
    },

    /// A `sandbox.writable` entry is `/`, the home directory or one of its ancestors.
    #[error(
        "writable path {} (sandbox.writable, {origin}) is refused: it is the home directory or contains it, \
         so commands could rewrite dotfiles the host runs",
        path.display()
    )]
    WritableTooBroad {
        /// The canonical entry.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
    },

    /// A `sandbox.writable` entry is a folder every Linux sandbox replaces with its own:
    /// `/tmp` itself, or a path at or under `/dev` or `/proc`.
    #[error(
        "writable path {} (sandbox.writable, {origin}) is refused: {}; name a folder of its own instead (/tmp/shared)",
        path.display(),
        replaced_reason(path)
    )]
    WritableReplaced {
        /// The canonical entry.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
    },

    /// A `sandbox.writable` entry contains an unreadable path, or lies inside one.
    #[error(
        "writable path {} (sandbox.writable, {origin}) is refused: it overlaps the unreadable path {}",
        path.display(),
        secret.display()
    )]
    WritableExposesSecret {
        /// The canonical entry.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
        /// The unreadable path it overlaps.
        secret: PathBuf,
    },

    /// A folder of the project was a folder when its parent was listed and is not one when
    /// the walk opens it (swapped for a link or a file: another process is changing the
    /// project). The walk does not go through what took its place, nor skip it: a secret in
    /// the folder that moved could be missed.
    #[error(
        "{} stopped being a folder while the project was walked (another process changed it); nothing was run: try again once it is still",
        path.display()
    )]
    FolderChangedDuringWalk {
        /// The folder.
        path: PathBuf,
    },

    /// A directory needed by the policy could not be listed.
    #[error("cannot list {}: {source}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A directory or file the policy creates (`.git/hooks`, Garuda's home) could not be
    /// created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The path to create.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A git pointer file (`.git` file, `commondir`) could not be read.
    #[error("{}: cannot read git pointer file: {source}", path.display())]
    GitPointerRead {
        /// The pointer file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A git pointer file does not hold a usable path.
    #[error("{}: invalid git pointer file: {reason}", path.display())]
    GitPointerInvalid {
        /// The pointer file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A git pointer file names a directory that does not exist. A command could create it
    /// and plant hooks there, so this is refused rather than skipped.
    #[error(
        "{}: points to {}, which cannot be resolved ({source}); fix or remove the stale \
         pointer (for a worktree: git worktree prune)",
        path.display(),
        target.display()
    )]
    GitPointerTarget {
        /// The pointer file.
        path: PathBuf,
        /// The directory it names.
        target: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A git configuration file exists but could not be read.
    #[error("{}: cannot read git configuration: {source}", path.display())]
    GitConfigRead {
        /// The configuration file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A git configuration file could not be parsed (see `gitconfig.rs` for what is
    /// accepted). Refused rather than skipped: a key read wrongly could leave a file that git
    /// runs writable.
    #[error("{}:{line}: git configuration not understood: {reason}", path.display())]
    GitConfigInvalid {
        /// The configuration file.
        path: PathBuf,
        /// 1-based line (0: the file as a whole).
        line: usize,
        /// What is wrong.
        reason: &'static str,
    },

    /// A git configuration key names a file that git would run or read, in a folder a command
    /// can write, and the file does not exist: the command could create it.
    #[error(
        "{}:{line}: {key} names {}, which does not exist in a folder that sandboxed commands          can write: a command could create it and the host's git would {use_}. Create the file          (or remove the key) before running garuda",
        config.display(),
        target.display()
    )]
    GitConfigTargetMissing {
        /// The configuration file.
        config: PathBuf,
        /// 1-based line of the key.
        line: usize,
        /// The key (`include.path`, `core.fsmonitor`).
        key: String,
        /// The missing file.
        target: PathBuf,
        /// What git does with it ("read it as configuration", "run it").
        use_: &'static str,
    },

    /// `include.path` files include each other deeper than git allows.
    #[error("{}: git configuration includes are nested too deeply (more than {limit})", path.display())]
    GitConfigIncludeDepth {
        /// The file that would be included one level too deep.
        path: PathBuf,
        /// The depth limit.
        limit: usize,
    },

    /// A git configuration file and what it includes, transitively, are more files than the
    /// reader reads: includes can fan out (each file naming the next many times), and the
    /// policy build must end.
    #[error("{}: git configuration includes more than {limit} files, counting repeats", path.display())]
    GitConfigTooManyIncludes {
        /// The configuration file whose includes were being read.
        path: PathBuf,
        /// The limit.
        limit: usize,
    },

    /// `.git` or `.garuda` is a symbolic link in a folder a direct-mode command can write: the
    /// command could replace the link with a folder of its own (with hooks, config, settings),
    /// and a mount cannot be placed on a link to stop it.
    #[error(
        "{}: {what} is a symbolic link in a folder that sandboxed commands can write, so a          command could replace it with one of its own; refusing to run in direct mode. Run with          --staged (the real project is then read-only to the command), or replace the link: {fix}",
        path.display()
    )]
    ProtectedLinkInDirectMode {
        /// The link.
        path: PathBuf,
        /// What it is (`the repository's .git`, `the project's .garuda`).
        what: &'static str,
        /// How to replace it.
        fix: &'static str,
    },

    /// A symbolic link in a writable folder lies on the way to a file git runs or reads (or to
    /// Garuda's settings): a command could point it elsewhere, and a mount cannot sit on a
    /// link.
    #[error(
        "{}: a symbolic link in a folder that sandboxed commands can write leads to {}, which          git runs or reads (or Garuda's settings): a command could point it elsewhere. Replace          the link with the folder or file it names",
        link.display(),
        protecting.display()
    )]
    SwappableLink {
        /// The link.
        link: PathBuf,
        /// The protected path it leads to (as named before resolution).
        protecting: PathBuf,
    },

    /// A path that must be protected cannot be resolved safely (a `..` after a missing folder,
    /// too many links).
    #[error("{}: cannot resolve a path that must be protected: {reason}", path.display())]
    ProtectedPathUnresolvable {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
}

/// Why a path that [`crate::paths::replaced_by_sandbox`] names cannot be shared with commands.
fn replaced_reason(path: &std::path::Path) -> &'static str {
    if path == std::path::Path::new("/tmp") {
        "every sandbox gives commands a private, empty /tmp, and sharing the host's whole /tmp \
         would hand them every other program's temporary files and sockets (the X server's among \
         them); a folder under /tmp is shared at its own path"
    } else {
        "every sandbox gives commands a fresh /dev and /proc of their own, so nothing there is \
         shared with them"
    }
}
