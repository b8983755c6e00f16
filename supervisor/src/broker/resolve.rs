//! The path resolver: a project path the model wrote, to the file it names, never outside the
//! project.
//!
//! # The threat
//!
//! The model chooses every path the file tools get, and a sandboxed command (direct mode) can
//! change the project's folders while the supervisor works on them: rename a folder and put a
//! symbolic link to `/home/u` in its place, between the check and the use. A path resolved by
//! name (`root.join(path)`, then `open`) follows that link, with the user's rights.
//!
//! # How a path is resolved
//!
//! 1. [`ProjectPath::parse`]: one spelling only (no `..`, `.`, `//`, trailing `/`, NUL,
//!    absolute path, over-long name); anything else is refused before the filesystem is
//!    touched.
//! 2. The project root is held open as a folder descriptor for the whole session
//!    ([`ProjectRoot::open`]), and every lookup starts from it with `openat2(RESOLVE_BENEATH |
//!    RESOLVE_NO_MAGICLINKS)`: the kernel resolves the whole path in one call and refuses
//!    (`EXDEV`) any step that would leave the root — an absolute link, a `..` in a link's
//!    target that climbs above the root — and every `/proc` magic link. A swap during the call
//!    cannot take it out: the kernel checks containment while it walks (and answers `EAGAIN`
//!    when a rename raced a `..`; the lookup is retried a few times, then refused).
//! 3. **Links inside the project are followed, within it.** A link whose target stays beneath
//!    the root (`docs/README.md -> ../README.md`, a linked folder of a monorepo) works as it
//!    does for the developer's own tools; a link out of the project is refused
//!    ([`ResolveError::Outside`]). The place a link leads to is then found from the opened
//!    descriptor itself (its `/proc/self/fd` name, the kernel's record of where the opened
//!    object is, checked to lie beneath the root and to still name the same inode), and the
//!    caller judges the policy on *that* path as well as on the one written, so `notes.txt ->
//!    .env` is judged as `.env`. A path with no link on it (the first, cheaper attempt uses
//!    `RESOLVE_NO_SYMLINKS`) is its own resolved path.
//! 4. Writes never go *through* a link: [`ProjectRoot::lookup_parent`] resolves the folder and
//!    reports a link in the final component, which the writer refuses.
//! 5. No `openat2` (Linux before 5.6, `ENOSYS`, or a seccomp filter that denies it): the file
//!    tools refuse every request ([`ResolveError::NoOpenat2`]). There is no fallback to
//!    checks on names.
//!
//! What stays out of scope: a hard link is the same file under two names, and is judged by the
//! name it is reached by (a sandboxed command cannot make one to a secret: the secrets are
//! hidden behind mounts in its view, and `link(2)` across mounts fails); a mount point inside
//! the project is crossed (the user made it; a sandboxed command's mounts live in its own
//! namespace).

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use garuda_ipc::{PathError, ProjectPath};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;

/// How often a lookup that raced a rename (`EAGAIN`, or a name that no longer matches its
/// inode) is tried again before it is refused.
const RETRIES: usize = 16;

/// Every lookup: beneath the root, no `/proc` magic link.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// A lookup that refuses every link on the way.
const BENEATH_NO_LINKS: ResolveFlags = BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// Why a project path could not be resolved. Each names the path as the model wrote it.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Not a [`ProjectPath`].
    #[error("{0}")]
    Invalid(#[from] PathError),
    /// Nothing there.
    #[error("{0} does not exist")]
    NotFound(String),
    /// A component on the way is a file, not a folder.
    #[error("{0}: a component on the way is not a folder")]
    NotDir(String),
    /// A link on the way leads out of the project, or is absolute.
    #[error(
        "{0}: a symbolic link on the way leads out of the project (or is absolute); \
         only files inside the project can be reached"
    )]
    Outside(String),
    /// Too many links, or a link where none may be.
    #[error("{0}: too many symbolic links on the way")]
    Loop(String),
    /// The project changed under the lookup again and again.
    #[error("{0}: the project changed while the path was looked up; try again")]
    Changed(String),
    /// The real path is not UTF-8 (a link leads to such a name).
    #[error("{0} leads to a name that is not UTF-8, which the file tools cannot name")]
    NotUtf8(String),
    /// The kernel has no `openat2`.
    #[error(
        "this kernel has no openat2 (Linux 5.6 or later): the file tools refuse every path \
         rather than check names"
    )]
    NoOpenat2,
    /// Any other failure.
    #[error("{path}: {source}")]
    Io {
        /// The path as written.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
}

impl ResolveError {
    /// The same error, naming `path` (a lookup of a folder on the way reports the whole path).
    fn at(self, path: &str) -> ResolveError {
        let p = path.to_owned();
        match self {
            ResolveError::NotFound(_) => ResolveError::NotFound(p),
            ResolveError::NotDir(_) => ResolveError::NotDir(p),
            ResolveError::Outside(_) => ResolveError::Outside(p),
            ResolveError::Loop(_) => ResolveError::Loop(p),
            ResolveError::Changed(_) => ResolveError::Changed(p),
            ResolveError::NotUtf8(_) => ResolveError::NotUtf8(p),
            ResolveError::Io { source, .. } => ResolveError::Io { path: p, source },
            e @ (ResolveError::Invalid(_) | ResolveError::NoOpenat2) => e,
        }
    }
}

/// What `statx` says about a file: enough to tell one file from another and to see it change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Device (major, minor).
    pub dev: (u32, u32),
    /// Inode.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes.
    pub size: u64,
    /// Last change of the content (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Last change of the inode.
    pub ctime: (i64, u32),
}

impl Meta {
    fn from_statx(s: &rustix::fs::Statx) -> Meta {
        Meta {
            dev: (s.stx_dev_major, s.stx_dev_minor),
            ino: s.stx_ino,
            mode: u32::from(s.stx_mode),
            uid: s.stx_uid,
            gid: s.stx_gid,
            size: s.stx_size,
            mtime: (s.stx_mtime.tv_sec, s.stx_mtime.tv_nsec),
            ctime: (s.stx_ctime.tv_sec, s.stx_ctime.tv_nsec),
        }
    }

    /// The same inode.
    pub fn same_file(&self, other: &Meta) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }

    /// Same inode, size and times: nothing wrote it in between.
    pub fn unchanged(&self, other: &Meta) -> bool {
        self.same_file(other)
            && self.size == other.size
            && self.mtime == other.mtime
            && self.ctime == other.ctime
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.mode & 0o170_000 == 0o100_000
    }

    /// A folder.
    pub fn is_dir(&self) -> bool {
        self.mode & 0o170_000 == 0o040_000
    }

    /// A symbolic link.
    pub fn is_link(&self) -> bool {
        self.mode & 0o170_000 == 0o120_000
    }
}

/// `statx` of an open descriptor (an `O_PATH` one too).
pub fn meta_of(fd: BorrowedFd<'_>) -> std::io::Result<Meta> {
    let s = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)?;
    Ok(Meta::from_statx(&s))
}

/// `statx` of `name` in the folder `dir`, not following a final link.
pub fn meta_at(dir: BorrowedFd<'_>, name: &str) -> std::io::Result<Meta> {
    let s = rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )?;
    Ok(Meta::from_statx(&s))
}

/// What a path names: an `O_PATH` descriptor of it, where it really is, and its metadata.
#[derive(Debug)]
pub struct Found {
    /// `O_PATH` (or, for [`ProjectRoot::lookup_dir`], a readable folder).
    pub fd: OwnedFd,
    /// The project-relative path of what was opened, with no link in it; empty for the root.
    pub resolved: String,
    /// Its metadata at the lookup.
    pub meta: Meta,
}

/// The folder a file is written in, and what is there now.
#[derive(Debug)]
pub struct Parent {
    /// The deepest folder of the path that exists, opened readable (for `fsync` and the `*at`
    /// calls of the writer).
    pub dir: OwnedFd,
    /// Its project-relative real path; empty for the root.
    pub dir_resolved: String,
    /// Folders below it that do not exist yet, outermost first (plain names).
    pub missing: Vec<String>,
    /// The file's own name.
    pub name: String,
    /// What the name holds now, when `missing` is empty: `None` when nothing.
    pub existing: Option<Meta>,
}

impl Parent {
    /// The file's real project-relative path: the folder's real path, the missing folders and
    /// the name.
    pub fn resolved(&self) -> String {
        let mut out = self.dir_resolved.clone();
        for part in self.missing.iter().chain(std::iter::once(&self.name)) {
            if !out.is_empty() {
                out.push('/');
            }
            out.push_str(part);
        }
        out
    }
}

/// The project root, held open for the session.
#[derive(Debug)]
pub struct ProjectRoot {
    fd: OwnedFd,
}

impl ProjectRoot {
    /// Opens the project's root folder and checks that the kernel has `openat2` (refused
    /// otherwise: see the module's documentation). The path is the user's own choice, so a
    /// link in it is followed; from here on only the descriptor is used.
    pub fn open(root: &Path) -> Result<ProjectRoot, ResolveError> {
        let shown = root.display().to_string();
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ResolveError::Io {
            path: shown.clone(),
            source: e.into(),
        })?;
        let root = ProjectRoot { fd };
        match rustix::fs::openat2(
            &root.fd,
            ".",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            BENEATH_NO_LINKS,
        ) {
            Ok(_) => {}
            Err(Errno::NOSYS) => return Err(ResolveError::NoOpenat2),
            Err(e) => {
                return Err(ResolveError::Io {
                    path: shown,
                    source: e.into(),
                })
            }
        }
        // The real path must be knowable: every resolved path is measured against it.
        root.real_path().map_err(|source| ResolveError::Io {
            path: shown,
            source,
        })?;
        Ok(root)
    }

    /// The root's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Where the root is now (the kernel's record of the held folder).
    pub fn real_path(&self) -> std::io::Result<PathBuf> {
        proc_path(self.fd.as_fd())
    }

    /// Resolves `path` to what it names (see the module's documentation), opened `O_PATH`:
    /// nothing is read, a FIFO does not block, a device is not opened.
    pub fn lookup(&self, path: &ProjectPath) -> Result<Found, ResolveError> {
        self.lookup_with(path.as_str(), OFlags::PATH)
    }

    /// As [`ProjectRoot::lookup`], for a folder, opened readable. `None` is the root.
    pub fn lookup_dir(&self, path: Option<&ProjectPath>) -> Result<Found, ResolveError> {
        let rel = path.map_or(".", ProjectPath::as_str);
        let found = self.lookup_with(rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        Ok(found)
    }

    fn lookup_with(&self, rel: &str, kind: OFlags) -> Result<Found, ResolveError> {
        let shown = || rel.to_owned();
        for _ in 0..RETRIES {
            let flags = kind | OFlags::CLOEXEC | OFlags::NOFOLLOW;
            // Most paths have no link: then the path as written is where it leads.
            match openat2_retrying(self.fd(), rel, flags, BENEATH_NO_LINKS) {
                Ok(fd) => {
                    let meta = meta_of(fd.as_fd()).map_err(|e| io_error(rel, e))?;
                    // `O_PATH | O_NOFOLLOW` opens a final link itself: follow it below.
                    if !meta.is_link() {
                        let resolved = if rel == "." { "" } else { rel };
                        return Ok(Found {
                            fd,
                            resolved: resolved.to_owned(),
                            meta,
                        });
                    }
                }
                // A link on the way (`O_DIRECTORY | O_NOFOLLOW` on a final link says ENOTDIR).
                Err(Errno::LOOP | Errno::NOTDIR) => {}
                Err(e) => return Err(map_errno(rel, e)),
            }
            // A link on the way: the kernel follows it, beneath the root only.
            let fd = openat2_retrying(self.fd(), rel, kind | OFlags::CLOEXEC, BENEATH)
                .map_err(|e| map_errno(rel, e))?;
            if let Some(found) = self.place_of(rel, fd)? {
                return Ok(found);
            }
        }
        Err(ResolveError::Changed(shown()))
    }

    /// Where an opened descriptor is: its real path beneath the root, checked to still name
    /// the same inode (`None`: it moved meanwhile; look up again).
    fn place_of(&self, rel: &str, fd: OwnedFd) -> Result<Option<Found>, ResolveError> {
        let meta = meta_of(fd.as_fd()).map_err(|e| io_error(rel, e))?;
        let root = self.real_path().map_err(|e| io_error(rel, e))?;
        let real = proc_path(fd.as_fd()).map_err(|e| io_error(rel, e))?;
        let Ok(below) = real.strip_prefix(&root) else {
            // Renamed out of the project after the open (or never in it): not ours to touch.
            return Err(ResolveError::Outside(rel.to_owned()));
        };
        let Some(text) = below.to_str() else {
            return Err(ResolveError::NotUtf8(rel.to_owned()));
        };
        if !text.is_empty() && ProjectPath::parse(text).is_err() {
            // A " (deleted)" suffix, or a name the kernel printed that is no plain path.
            return Ok(None);
        }
        let check = if text.is_empty() { "." } else { text };
        let again = match openat2_retrying(
            self.fd(),
            check,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            BENEATH_NO_LINKS,
        ) {
            Ok(again) => again,
            Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(map_errno(rel, e)),
        };
        let now = meta_of(again.as_fd()).map_err(|e| io_error(rel, e))?;
        if !now.same_file(&meta) {
            return Ok(None);
        }
        Ok(Some(Found {
            fd,
            resolved: text.to_owned(),
            meta,
        }))
    }

    /// Resolves the folder `path` is in (creating nothing) and looks at its final name without
    /// following it. Missing folders on the way are reported in [`Parent::missing`] (the writer
    /// creates them); a file where a folder should be is [`ResolveError::NotDir`].
    pub fn lookup_parent(&self, path: &ProjectPath) -> Result<Parent, ResolveError> {
        let parts: Vec<&str> = path.components().collect();
        let Some((name, folders)) = parts.split_last() else {
            return Err(ResolveError::NotFound(path.to_string()));
        };
        // The deepest folder of the path that exists.
        let mut existing = folders.len();
        let dir = loop {
            let prefix = folders[..existing].join("/");
            let rel = if prefix.is_empty() { "." } else { &prefix };
            match self.lookup_with(rel, OFlags::RDONLY | OFlags::DIRECTORY) {
                Ok(found) => break found,
                Err(ResolveError::NotFound(_)) if existing > 0 => existing -= 1,
                Err(e) => return Err(e.at(path.as_str())),
            }
        };
        let missing: Vec<String> = folders[existing..].iter().map(|s| s.to_string()).collect();
        let existing_meta = if missing.is_empty() {
            match meta_at(dir.fd.as_fd(), name) {
                Ok(m) => Some(m),
                Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => None,
                Err(e) => return Err(io_error(path.as_str(), e)),
            }
        } else {
            None
        };
        Ok(Parent {
            dir: dir.fd,
            dir_resolved: dir.resolved,
            missing,
            name: (*name).to_owned(),
            existing: existing_meta,
        })
    }

    /// Opens what `found` names for reading: by its real path, with no link allowed on the way
    /// and `O_NONBLOCK` (a FIFO swapped in does not block), and checked to be the same inode.
    pub fn open_for_reading(&self, shown: &str, found: &Found) -> Result<File, ResolveError> {
        let rel = if found.resolved.is_empty() {
            "."
        } else {
            found.resolved.as_str()
        };
        let fd = openat2_retrying(
            self.fd(),
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            BENEATH_NO_LINKS,
        )
        .map_err(|e| match e {
            Errno::NOENT | Errno::LOOP | Errno::NOTDIR => ResolveError::Changed(shown.to_owned()),
            e => map_errno(shown, e),
        })?;
        let meta = meta_of(fd.as_fd()).map_err(|e| io_error(shown, e))?;
        if !meta.same_file(&found.meta) {
            return Err(ResolveError::Changed(shown.to_owned()));
        }
        Ok(File::from(fd))
    }
}

/// The target the link `name` in the held folder `dir` holds, as text (for messages).
pub fn link_target(dir: BorrowedFd<'_>, name: &str) -> String {
    rustix::fs::readlinkat(dir, name, Vec::new())
        .map(|t: CString| t.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Opens a file (a plain name) in `dir` for reading, refusing a link, without blocking on a
/// FIFO.
pub fn open_file_in(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    openat2_retrying(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        BENEATH_NO_LINKS,
    )
}

/// Opens a folder (a plain name) beneath `dir`, refusing a link.
pub fn open_subdir(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, Errno> {
    openat2_retrying(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        BENEATH_NO_LINKS,
    )
}

/// `openat2`, tried again on `EAGAIN` (a rename raced the lookup) and `EINTR`.
fn openat2_retrying(
    dir: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let mut last = Errno::AGAIN;
    for _ in 0..RETRIES {
        match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
            Err(e @ (Errno::AGAIN | Errno::INTR)) => last = e,
            other => return other,
        }
    }
    Err(last)
}

/// The kernel's name for an open descriptor (`/proc/self/fd/N`, read, never followed).
fn proc_path(fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn map_errno(rel: &str, e: Errno) -> ResolveError {
    let rel = rel.to_owned();
    match e {
        Errno::NOENT => ResolveError::NotFound(rel),
        Errno::NOTDIR => ResolveError::NotDir(rel),
        Errno::XDEV => ResolveError::Outside(rel),
        Errno::LOOP => ResolveError::Loop(rel),
        Errno::AGAIN => ResolveError::Changed(rel),
        Errno::NOSYS => ResolveError::NoOpenat2,
        e => ResolveError::Io {
            path: rel,
            source: e.into(),
        },
    }
}

fn io_error(rel: &str, source: std::io::Error) -> ResolveError {
    ResolveError::Io {
        path: rel.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    fn project() -> (tempfile::TempDir, ProjectRoot) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("p/src")).unwrap();
        std::fs::write(t.path().join("p/src/a.rs"), "a").unwrap();
        std::fs::write(t.path().join("outside.txt"), "secret").unwrap();
        let root = ProjectRoot::open(&t.path().join("p")).unwrap();
        (t, root)
    }

    fn pp(s: &str) -> ProjectPath {
        ProjectPath::parse(s).unwrap()
    }

    #[test]
    fn a_plain_path_is_its_own_resolved_path() {
        let (_t, root) = project();
        let f = root.lookup(&pp("src/a.rs")).unwrap();
        assert_eq!(f.resolved, "src/a.rs");
        assert!(f.meta.is_file());
        let d = root.lookup_dir(None).unwrap();
        assert_eq!(d.resolved, "");
    }

    #[test]
    fn links_inside_are_followed_and_named_by_their_target() {
        let (t, root) = project();
        symlink("src/a.rs", t.path().join("p/l")).unwrap();
        symlink("src", t.path().join("p/d")).unwrap();
        assert_eq!(root.lookup(&pp("l")).unwrap().resolved, "src/a.rs");
        assert_eq!(root.lookup(&pp("d/a.rs")).unwrap().resolved, "src/a.rs");
        // `..` inside a link's target that stays inside is fine.
        symlink("../src/a.rs", t.path().join("p/src/up")).unwrap();
        assert_eq!(root.lookup(&pp("src/up")).unwrap().resolved, "src/a.rs");
    }

    #[test]
    fn links_out_of_the_root_are_refused() {
        let (t, root) = project();
        symlink("../../outside.txt", t.path().join("p/src/out")).unwrap();
        symlink(t.path().join("outside.txt"), t.path().join("p/abs")).unwrap();
        symlink(t.path().join("p/src/a.rs"), t.path().join("p/abs_inside")).unwrap();
        for p in ["src/out", "abs", "abs_inside"] {
            assert!(
                matches!(root.lookup(&pp(p)), Err(ResolveError::Outside(ref x)) if x == p),
                "{p}"
            );
        }
        // Control: the same file is there, by name, for anyone who follows links freely.
        assert_eq!(
            std::fs::read_to_string(t.path().join("p/src/out")).unwrap(),
            "secret"
        );
    }

    #[test]
    fn the_parent_and_the_missing_folders() {
        let (t, root) = project();
        let p = root.lookup_parent(&pp("src/new/deeper/x.rs")).unwrap();
        assert_eq!(p.dir_resolved, "src");
        assert_eq!(p.missing, ["new", "deeper"]);
        assert_eq!(p.resolved(), "src/new/deeper/x.rs");
        assert!(p.existing.is_none());
        let p = root.lookup_parent(&pp("src/a.rs")).unwrap();
        assert!(p.existing.unwrap().is_file());
        symlink("src/a.rs", t.path().join("p/l")).unwrap();
        assert!(root
            .lookup_parent(&pp("l"))
            .unwrap()
            .existing
            .unwrap()
            .is_link());
        assert!(matches!(
            root.lookup_parent(&pp("src/a.rs/x")),
            Err(ResolveError::NotDir(_))
        ));
    }
}
