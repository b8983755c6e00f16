//! Staged commands: a command's effect on the project becomes a proposal.
//!
//! With `"commands": {"mode": "staged"}` a command runs over a *staged view* of the project,
//! mounted by the executor at the project's own path. Every write, including one to the
//! project's absolute path, lands in a staging folder. Afterwards Garuda lists what changed,
//! shows it, and the developer applies it (all or nothing) or discards it. Until then the
//! project is untouched.
//!
//! ```text
//! Session::create ─► prepare ─► (executor runs the command over view()) ─► changes ─► render
//!                      ▲                                                        │
//!                      └──────────────── apply | discard ◄──────────────────────┘
//! ```
//!
//! # Backends
//!
//! | backend | start | change list | how the command sees it |
//! |---|---|---|---|
//! | [`Backend::Overlay`] | O(1): `mkdir upper/ work/` | O(changed files): walks `upper/` only | overlayfs, lower = the project, mounted with `userxattr` in the command's user namespace |
//! | [`Backend::ReflinkCopy`] | a copy of copy-on-write clones (`FICLONE`) | O(project): walks the copy and the project | the copy, bound at the project's path |
//! | [`Backend::PlainCopy`] | a copy, refused over [`PLAIN_COPY_CAP`] (2 GiB) | O(project) | the copy, bound at the project's path |
//!
//! [`BackendChoice::Auto`] takes the overlay when the caller's probe says overlayfs works in a
//! user namespace, else a reflink copy when a one-file probe works (ext4 has no reflink), else
//! a plain copy. [`BackendChoice::Overlay`] on a system without it is an error, never a silent
//! fallback. A copy backend refuses projects of more than [`ENTRY_LIMIT`] entries (each change
//! list would be incomplete). A failed copy leaves no folder.
//!
//! Session folders are `<garuda_home>/staging/<pid>-<random hex>/`, mode 0700. Creating a
//! session first runs [`recover`]: interrupted applies of ended sessions are finished or
//! rolled back, and the folders of ended sessions are removed (overlayfs leaves `work/work`
//! with mode 000; it is given `u+rwx` before removal).
//!
//! # Between commands
//!
//! [`Session::prepare`] runs before each command. It takes the command's start *mark* (a
//! ctime on the filesystem's clock) and brings staging up to date with the project, so
//! Garuda's own edits and the developer's edits are visible to the next command: with the
//! overlay the project is the lower layer and shows through by itself, except where upper
//! keeps an entry over it (an ignored file, a change kept after a conflict): such an entry is
//! dropped when the project changed that path since the last command. With a copy, every
//! project path changed since the last command is copied in. Either way the project wins for
//! the paths it changed.
//!
//! # The change list
//!
//! [`Session::changes`] returns a [`ChangeSet`]:
//!
//! - **Overlay**: only `upper/` is walked. A regular file is [`ChangeKind::Added`] when the
//!   project has nothing there, [`ChangeKind::Modified`] when its content differs,
//!   [`ChangeKind::ModeChanged`] when only the permission bits differ, and nothing at all
//!   when both are equal (overlayfs copies a file up on `touch` or an open for writing). A
//!   whiteout (a character device 0:0, or a zero-size file with the xattr
//!   `user.overlay.whiteout`) is a [`ChangeKind::Deleted`]; over a project folder, every file
//!   under it is. An opaque folder (`user.overlay.opaque` = `y`) hides the project's folder:
//!   every project file under it without an upper counterpart is deleted. A link is
//!   [`ChangeKind::LinkAdded`] or [`ChangeKind::LinkChanged`]. `redirect` and `metacopy`
//!   xattrs (never produced by the mount Garuda makes) make the list incomplete.
//! - **Copy**: the copy and the project are both walked; a file whose size, mtime and mode are
//!   equal and whose ctime is before the mark is unchanged without being read, else the
//!   contents are compared.
//! - A link that resolves outside the project (an absolute target elsewhere, a `..` above the
//!   root, or a `..` after one of the target's own folders, which could be a link) is
//!   [`ChangeKind::LinkOutOfRoot`], shown and refused by apply.
//! - **Ignored** changes are counted per top folder in [`ChangeSet::ignored_counts`]
//!   (`target/: 212 files`): anything in a `.git` folder (`.git/`), anything git's exclude
//!   rules match (every `.gitignore` from the repository root down, and `info/exclude`) unless
//!   git tracks it (read from `.git/index`, versions 2–4, never by running git: a repository's
//!   config can make git run programs), and special files (FIFOs, sockets, devices). They are
//!   never applied and stay in staging, so the next command sees its build output.
//! - **Sensitive** files (see [`is_sensitive_name`]: `.env*` — the policy's own test, the one
//!   that hides them in the sandbox — keys, `.npmrc`, `.netrc`, …, by any name a filesystem may
//!   open them by: `.ENV`, `ENV~1`) that changed, and links whose target names one, are named
//!   in [`ChangeSet::sensitive`], ignored or not. A shown one is covered by
//!   [`Guard::Sensitive`].
//! - **Garuda's settings**: a shown change under a `.garuda` folder (or a `.garuda` file or
//!   link) at any depth, by any name a filesystem may open `.garuda` by (`.GARUDA` on a
//!   case-insensitive one), see [`is_garuda_settings_path`] and [`ChangeSet::garuda_settings`],
//!   is covered by [`Guard::GarudaSettings`].
//! - A change a **guard** covers ([`ChangeSet::guarded`]) is marked in the list and never
//!   applied by [`Session::apply`], which refuses the whole change
//!   ([`StagingError::Guarded`]); only [`Session::apply_approved`] with that guard approved,
//!   called after a question of its own (or, for sensitive files, the CLI's
//!   `--apply-sensitive`), applies it.
//! - Past [`ENTRY_LIMIT`] walked entries, an unreadable file, a failed walk or a non-UTF-8 name
//!   makes the list **incomplete** ([`ChangeSet::incomplete`]): only discard is possible.
//!
//! [`render`] prints the summary, unified diffs (every name through `garuda_text::visible`,
//! so a newline in a name cannot forge a line; control and bidirectional characters made
//! visible in names and content, binary files marked, diff text cut at [`DIFF_CHAR_LIMIT`]
//! characters with the file list always complete), sensitive names, ignored counts and the
//! incomplete reason. The content of a sensitive file, old or new, is never printed: it is
//! listed with its size and the first 16 hex digits of its SHA-256 before and after, and a
//! file with the same content as a deleted sensitive file (a secret renamed to an ordinary
//! name) is not diffed either.
//!
//! # Apply, discard, conflicts
//!
//! [`Session::apply`] is all or nothing. It refuses (and changes nothing, keeping the staged
//! change) when the list is incomplete, holds a link out of the root, when a staged file is not
//! what the list showed (its inode, size, times or mode changed since), or on a **conflict**:
//! a project path that changed since the mark (its ctime is at or after the mark — user space
//! cannot set a ctime back), one the change modifies or deletes that no longer exists, or one
//! the change adds that now exists. Then:
//!
//! 1. the **plan** is written to `<session>/apply.pending` (JSON: the project, each target with
//!    its temporary file or `delete`, folders to remove, folders to create) and synced;
//! 2. each new file is written to `.<name>.garuda-apply-<session id>` next to its target
//!    (folders created as needed; mode from the staged file without set-id bits; links
//!    recreated as links), synced, and the folders synced;
//! 3. `apply.pending` is renamed to `apply.commit` and the session folder synced: **this rename
//!    is the commit point**;
//! 4. deletions are unlinked, folders the change removed are removed when empty, each temporary
//!    file is renamed over its target, and the parent folders are synced;
//! 5. `apply.commit` is removed.
//!
//! The project is never reached by path name: it is opened once and walked beneath its root
//! without following a link, the folders written in are held open from the conflict check to
//! the last rename, and every write is an `*at` call in them. A link (or a changed kind) on the
//! way refuses the whole apply with [`StagingError::UnsafeProjectPath`]; recovery stops before
//! changing anything and keeps its journal ([`StagingError::RecoveryStopped`]). The copy
//! backend's copies read the project the same way. See `beneath.rs`.
//!
//! Then the applied entries leave staging (overlay: from `upper/`, so the project shows
//! through). [`recover`] (run by every [`Session::create`], and by [`Session::close`] for its
//! own folder) rolls an `apply.commit` forward — renames the temporary files that remain,
//! unlinks the deletions; idempotent — leaving the project fully new, and rolls an
//! `apply.pending` back — deletes the temporary files and the folders made for them — leaving
//! it fully old. A crash test uses the `GARUDA_FAILPOINT` environment variable
//! (`apply-before-commit`, `apply-after-first-rename`) to abort at those two points.
//!
//! [`Session::discard`] drops the shown changes from staging (overlay: their upper entries,
//! whiteouts and opaque markers; copy: each path restored from the project). Ignored changes
//! stay. Discarding an incomplete list resets the whole staging layer, since it was never fully
//! listed.
//!
//! # Threat model
//!
//! The command is untrusted; the supervisor that lists, applies and discards runs unconfined.
//!
//! - **No write without a yes.** The real project is not reachable from the command (the
//!   staged view is mounted over it), and only an apply, after the developer saw the list,
//!   writes to it.
//! - **What can reach the project**: regular file contents, symbolic links whose target stays
//!   inside the project, permission bits (`0o777` only: no set-user-ID, set-group-ID or sticky
//!   bit), and deletions of files and links. Nothing else: no devices, FIFOs or sockets, no
//!   ownership, no xattrs or ACLs, no hard links (content is copied), no empty folders.
//! - **Links out of the root are refused**, so a planted `config -> ~/.ssh/config` cannot make
//!   a later host program write or read outside the project.
//! - **Garuda's settings and secrets need their own question**: a change under `.garuda/`
//!   (project settings, which can loosen later runs) or to a sensitive file (whose content is
//!   not shown) is refused by [`Session::apply`].
//! - **Ignored files never reach the project** (a command cannot plant
//!   `node_modules/.bin/x` for a host program to run), and **`.git` never does** (no hook,
//!   no config that makes the host's git run code). Renaming a `.gitignore` does not help a
//!   command either: ignoring a change only keeps it out of the project.
//! - **Sensitive names are always shown**, even when ignored, and a sensitive file's content is
//!   never printed, old or new (the change list goes to terminals, logs and transcripts; the
//!   old content of a `.env` is one the command could not even read).
//! - **What is applied is what was shown**: apply checks each staged file's identity and
//!   times against the listing, before and after copying it.
//! - **The supervisor never follows a link the command planted** while reading, writing or
//!   removing inside staging (every ancestor is checked with `lstat`), so a `copy/src ->
//!   /home/me` link cannot redirect a discard or a sync.
//! - **A command running in direct mode in the same project cannot race an apply** into
//!   writing outside the project by swapping a folder for a link: apply, recovery and the
//!   copies reach the project beneath its held root, never through a link.
//! - **Hidden text**: control characters, invalid UTF-8 and bidirectional or zero-width
//!   characters are shown as escapes, in the diff and in paths.
//! - **Crashes** never leave the project half-applied: the journal is completed or rolled back.
//!
//! Assumed: no process of the command is alive while Garuda lists, applies or discards (the
//! executor kills the whole process tree, in its own PID namespace), the developer does not
//! race an apply in the instant between its conflict check and its renames (a racing command
//! can lose an edit inside the project, not make Garuda write outside it), and the project
//! does not change under a running overlay mount (overlayfs leaves that undefined; Garuda
//! reports such a change as a conflict).
//!
//! Not handled: on a filesystem with one-second timestamps a change in the same second as
//! the mark is reported as a conflict (a false conflict, never a missed one).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod apply;
mod beneath;
mod changes;
mod error;
mod fsutil;
mod gitindex;
mod render;
mod rules;
mod sensitive;
mod session;
mod view;

pub use apply::{
    recover, Applied, Recovered, RecoveryAction, FAILPOINT_ENV, JOURNAL_COMMIT, JOURNAL_PENDING,
};
pub use changes::{Change, ChangeKind, ChangeSet, Guard, ENTRY_LIMIT};
pub use error::{FoundKind, Result, StagingError};
pub use render::{render, DIFF_CHAR_LIMIT};
pub use rules::is_garuda_settings_path;
pub use sensitive::{is_sensitive_name, is_sensitive_path};
pub use session::{Backend, BackendChoice, CommandMark, Session, PLAIN_COPY_CAP};

#[cfg(test)]
mod test_git;
