//! Project-side file operations that never follow a link.
//!
//! The supervisor applies, recovers and copies from the project with the user's rights, and a
//! command of another sandbox may be running in direct mode in the same project at that very
//! moment. Such a command can rename a folder on a path Garuda is about to use and put a
//! symbolic link to any folder in its place. A path resolved by name (`project.join(rel)`)
//! would follow that link: a write would land outside the project, a copy would read a file
//! from outside into the staged view. So nothing here resolves a project path by name:
//!
//! - the project root is opened once ([`Beneath::open`]) and every path is walked from it one
//!   component at a time with `openat(O_DIRECTORY | O_NOFOLLOW)`, each from the descriptor of
//!   the folder above. A component that is a link or not a folder stops the walk; the caller
//!   refuses with [`StagingError::UnsafeProjectPath`] saying what was found where;
//! - names are plain (no `..`, no `/`, no NUL; checked again here), so each step stays beneath
//!   the folder it starts from. `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` would give the
//!   same guarantee for a whole path in one call; one component at a time gives it on every
//!   kernel and says which component was the link;
//! - folders Garuda writes in are *pinned* ([`Beneath::pin`]): the descriptor opened for the
//!   check is the one every later `*at` call uses (`openat(O_CREAT | O_EXCL | O_NOFOLLOW)`,
//!   `mkdirat`, `symlinkat`, `renameat` within that folder, `unlinkat`), so the inode that was
//!   checked is the inode written in;
//! - mount points inside the project are crossed, as a path walk would (there is no
//!   `RESOLVE_NO_XDEV`): a mount inside the project (a cache bound there, a tmpfs for build
//!   output) was made by the user and is still beneath the project, and a sandboxed command
//!   cannot add one that the supervisor sees (its mounts live in its own mount namespace);
//! - a pinned folder that the command renames after it was opened takes Garuda's write with
//!   it. The command can only move it where it can write itself: inside the project, which
//!   is a mount point of its own in the sandbox (a rename across mount points fails with
//!   `EXDEV`). The write stays inside the project.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::error::{io_err, FoundKind, Result, StagingError};
use crate::fsutil::parent_rel;

/// A real folder, opened without following a link; the only way to look at or below it.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Descriptors kept back for everything else the process does while many folders are pinned.
const FD_RESERVE: u64 = 256;

/// The open-file limit is one for every thread of the process. It is raised for the
/// [`Beneath`]s that reserved room and restored when the last of them is dropped, so one
/// finishing never lowers it under another still at work (its next `openat` would fail).
struct RaisedNofile {
    /// [`Beneath`]s that called [`Beneath::reserve`] and are not dropped yet.
    holders: usize,
    /// The limit before the first raise among them.
    saved: Option<rustix::process::Rlimit>,
}

static RAISED_NOFILE: Mutex<RaisedNofile> = Mutex::new(RaisedNofile {
    holders: 0,
    saved: None,
});

fn raised_nofile() -> MutexGuard<'static, RaisedNofile> {
    // A panic while the lock was held leaves plain numbers, still right.
    RAISED_NOFILE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The project root held open, and the folders pinned under it.
pub(crate) struct Beneath {
    root_path: PathBuf,
    root: Rc<OwnedFd>,
    pinned: HashMap<String, Rc<OwnedFd>>,
    /// Counted among [`RaisedNofile::holders`] (after [`Beneath::reserve`]).
    holds_nofile: bool,
}

/// Why a walk stopped.
enum Stop {
    /// A component does not exist.
    Missing,
    /// A component is not a real folder.
    Unsafe { at: String, found: FoundKind },
}

/// What [`Beneath::open_source`] found at a project path.
#[derive(Debug)]
pub(crate) enum Source {
    /// A regular file, opened for reading (`O_NOFOLLOW`), and its metadata (`fstat`).
    File(File, Metadata),
    /// A symbolic link's target (read as a link, never followed).
    Link(PathBuf),
    /// Nothing there, or a folder above it is missing or not a real folder.
    Missing,
}

impl Beneath {
    /// Opens the project root (`O_DIRECTORY | O_NOFOLLOW`: the root itself must be a real
    /// folder; the folders above it are the user's own path).
    pub(crate) fn open(project: &Path) -> Result<Beneath> {
        let root = rustix::fs::open(project, DIR_FLAGS, Mode::empty())
            .map_err(|e| io_err("open the project", project)(e.into()))?;
        Ok(Beneath {
            root_path: project.to_path_buf(),
            root: Rc::new(root),
            pinned: HashMap::new(),
            holds_nofile: false,
        })
    }

    /// The project's path (for messages and the journal).
    pub(crate) fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The project root's descriptor.
    pub(crate) fn root(&self) -> Rc<OwnedFd> {
        Rc::clone(&self.root)
    }

    /// Makes room for `folders` more pinned descriptors: raises the soft open-file limit
    /// towards the hard one when needed (restored when the last `Beneath` that reserved room
    /// is dropped, see [`RaisedNofile`]). A change spread over more folders than the hard
    /// limit allows is refused before anything is written.
    pub(crate) fn reserve(&mut self, folders: usize) -> Result<()> {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let need = (folders as u64).saturating_add(FD_RESERVE);
        let mut raised = raised_nofile();
        if !self.holds_nofile {
            raised.holders += 1;
            self.holds_nofile = true;
        }
        let now = getrlimit(Resource::Nofile);
        let Some(soft) = now.current else {
            return Ok(());
        };
        if soft >= need {
            return Ok(());
        }
        let hard = now.maximum.unwrap_or(u64::MAX);
        if hard < need {
            return Err(StagingError::Io {
                op: "hold the folders of the change open",
                path: self.root_path.clone(),
                source: io::Error::other(format!(
                    "the change touches {folders} folders, more than the open-file limit ({hard}) allows; apply it in smaller parts"
                )),
            });
        }
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(need),
                maximum: now.maximum,
            },
        )
        .map_err(|e| io_err("raise the open-file limit", &self.root_path)(e.into()))?;
        if raised.saved.is_none() {
            raised.saved = Some(now);
        }
        Ok(())
    }

    /// The real folder at `rel` ("" is the project), walked from the nearest pinned folder
    /// above it (or the root). `Ok(None)` when a component is missing;
    /// [`StagingError::UnsafeProjectPath`] (naming `for_path`) when one is a link or not a
    /// folder.
    pub(crate) fn dir(&self, rel: &str, for_path: &str) -> Result<Option<Rc<OwnedFd>>> {
        match self.walk(rel) {
            Ok(fd) => Ok(Some(fd)),
            Err(Ok(Stop::Missing)) => Ok(None),
            Err(Ok(Stop::Unsafe { at, found })) => Err(StagingError::UnsafeProjectPath {
                path: for_path.to_string(),
                at,
                found,
                wanted: "a real folder",
            }),
            Err(Err((at, e))) => Err(io_err("open the folder", self.root_path.join(at))(e)),
        }
    }

    /// [`Beneath::dir`], and the folder stays open: every later call for `rel` or a path
    /// below it starts from this same inode.
    pub(crate) fn pin(&mut self, rel: &str, for_path: &str) -> Result<Option<Rc<OwnedFd>>> {
        let fd = self.dir(rel, for_path)?;
        if let Some(fd) = &fd {
            self.pinned.insert(rel.to_string(), Rc::clone(fd));
        }
        Ok(fd)
    }

    /// The folder pinned at `rel`, if it is.
    pub(crate) fn pinned(&self, rel: &str) -> Option<Rc<OwnedFd>> {
        if rel.is_empty() {
            return Some(self.root());
        }
        self.pinned.get(rel).cloned()
    }

    /// Pins a folder Garuda just made with `mkdirat` in `parent` (its parent's pin). A link or
    /// a file put there in the meantime is refused like any other.
    pub(crate) fn pin_new(&mut self, rel: &str, for_path: &str) -> Result<Rc<OwnedFd>> {
        match self.pin(rel, for_path)? {
            Some(fd) => Ok(fd),
            None => Err(StagingError::UnsafeProjectPath {
                path: for_path.to_string(),
                at: rel.to_string(),
                found: FoundKind::Changing,
                wanted: "the folder Garuda had just made",
            }),
        }
    }

    fn walk(
        &self,
        rel: &str,
    ) -> std::result::Result<Rc<OwnedFd>, std::result::Result<Stop, (String, io::Error)>> {
        if rel.is_empty() {
            return Ok(self.root());
        }
        // Start from the deepest pinned folder above (or at) `rel`.
        let mut start = 0;
        let mut fd = self.root();
        let ends: Vec<usize> = rel
            .match_indices('/')
            .map(|(i, _)| i)
            .chain(std::iter::once(rel.len()))
            .collect();
        for &end in ends.iter().rev() {
            if let Some(p) = self.pinned.get(&rel[..end]) {
                if end == rel.len() {
                    return Ok(Rc::clone(p));
                }
                fd = Rc::clone(p);
                start = end + 1;
                break;
            }
        }
        let mut at = rel[..start].trim_end_matches('/').to_string();
        for name in rel[start..].split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(name);
            match open_dir_in(fd.as_fd(), OsStr::new(name)) {
                Ok(next) => fd = Rc::new(next),
                Err(Ok(Stop::Unsafe { found, .. })) => return Err(Ok(Stop::Unsafe { at, found })),
                Err(Ok(Stop::Missing)) => return Err(Ok(Stop::Missing)),
                Err(Err((_, e))) => return Err(Err((at, e))),
            }
        }
        Ok(fd)
    }

    /// `lstat` of a project path, walked from the root. `None` when nothing is there or when a
    /// folder above it is missing or is not a real folder (a link there is not followed: the
    /// entry is not at that place in the tree).
    pub(crate) fn stat(&self, rel: &str) -> Result<Option<Metadata>> {
        let (parent, name) = split(rel);
        let fd = match self.dir(parent, rel) {
            Ok(Some(fd)) => fd,
            Ok(None) | Err(StagingError::UnsafeProjectPath { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        stat_in(fd.as_fd(), OsStr::new(name)).map_err(io_err("read", self.root_path.join(rel)))
    }

    /// Opens a project file or link to copy it: a regular file is opened with `O_NOFOLLOW`
    /// (never a link's target), a link is read as a link. A folder or special file there is
    /// [`StagingError::UnsafeProjectPath`]; a link on the way is too.
    pub(crate) fn open_source(&self, rel: &str) -> Result<Source> {
        let (parent, name) = split(rel);
        let Some(fd) = self.dir(parent, rel)? else {
            return Ok(Source::Missing);
        };
        source_in(fd.as_fd(), OsStr::new(name), rel, &self.root_path)
    }

    /// Depth-first walk of the project folder `from` ("" for the whole project), never
    /// following a link. `visit` gets
    /// each entry (a folder before what it holds), its `lstat`, the descriptor of the folder
    /// it is in and its name; for a folder, [`Walk::Descend`] enters it. Entries that vanish
    /// during the walk are skipped; a folder swapped for a link between its `lstat` and its
    /// opening is [`StagingError::UnsafeProjectPath`]. At most one descriptor per level is
    /// open.
    pub(crate) fn walk_tree(
        &self,
        from: &str,
        mut visit: impl FnMut(&Path, &Metadata, BorrowedFd<'_>, &OsStr) -> Result<Walk>,
    ) -> Result<()> {
        struct Frame {
            rel: PathBuf,
            fd: Rc<OwnedFd>,
            entries: std::vec::IntoIter<(OsString, Metadata)>,
        }
        let Some(start) = self.dir(from, from)? else {
            return Ok(());
        };
        let entries = list_in(start.as_fd()).map_err(io_err("list", self.root_path.join(from)))?;
        let mut stack = vec![Frame {
            rel: PathBuf::from(from),
            fd: start,
            entries: entries.into_iter(),
        }];
        while let Some(top) = stack.last_mut() {
            let Some((name, m)) = top.entries.next() else {
                stack.pop();
                continue;
            };
            let rel = top.rel.join(&name);
            let fd = Rc::clone(&top.fd);
            match visit(&rel, &m, fd.as_fd(), &name)? {
                Walk::Stop => return Ok(()),
                Walk::Skip => {}
                Walk::Descend if m.file_type().is_dir() => match open_dir_in(fd.as_fd(), &name) {
                    Ok(sub) => {
                        let entries = list_in(sub.as_fd())
                            .map_err(io_err("list", self.root_path.join(&rel)))?;
                        stack.push(Frame {
                            rel,
                            fd: Rc::new(sub),
                            entries: entries.into_iter(),
                        });
                    }
                    Err(Ok(Stop::Missing)) => {}
                    Err(Ok(Stop::Unsafe { found, .. })) => {
                        let rel = rel.to_string_lossy().into_owned();
                        return Err(StagingError::UnsafeProjectPath {
                            path: rel.clone(),
                            at: rel,
                            found,
                            wanted: "a real folder",
                        });
                    }
                    Err(Err((_, e))) => {
                        return Err(io_err("open the folder", self.root_path.join(&rel))(e))
                    }
                },
                Walk::Descend => {}
            }
        }
        Ok(())
    }
}

impl Drop for Beneath {
    fn drop(&mut self) {
        if !self.holds_nofile {
            return;
        }
        let mut raised = raised_nofile();
        raised.holders = raised.holders.saturating_sub(1);
        if raised.holders == 0 {
            if let Some(old) = raised.saved.take() {
                // Best effort: a limit left raised only lets this process (and what it
                // starts) open more files; the descriptors still open stay valid either way.
                let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, old);
            }
        }
    }
}

/// What [`Beneath::walk_tree`] does after visiting an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Enter it (folders only; ignored for other entries).
    Descend,
    /// Do not enter it.
    Skip,
    /// End the walk.
    Stop,
}

/// `("a/b", "c")` for `"a/b/c"`.
pub(crate) fn split(rel: &str) -> (&str, &str) {
    let parent = parent_rel(rel);
    let name = if parent.is_empty() {
        rel
    } else {
        &rel[parent.len() + 1..]
    };
    (parent, name)
}

/// A name that stays in the folder it is looked up in.
fn plain_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

/// Opens `name` in `parent` as a real folder, without following a link.
fn open_dir_in(
    parent: BorrowedFd<'_>,
    name: &OsStr,
) -> std::result::Result<OwnedFd, std::result::Result<Stop, (String, io::Error)>> {
    if !plain_name(name) {
        return Err(Err((
            name.to_string_lossy().into_owned(),
            io::Error::new(io::ErrorKind::InvalidInput, "not a plain file name"),
        )));
    }
    match rustix::fs::openat(parent, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(Ok(Stop::Missing)),
        // O_DIRECTORY | O_NOFOLLOW on a link gives ENOTDIR (ELOOP on some paths): say what
        // is there now.
        Err(Errno::NOTDIR | Errno::LOOP) => Err(Ok(Stop::Unsafe {
            at: String::new(),
            found: classify_in(parent, name),
        })),
        Err(e) => Err(Err((name.to_string_lossy().into_owned(), e.into()))),
    }
}

/// [`Beneath::open_source`] for `name` in the folder `parent` (`rel` and `root` are for
/// messages). Whatever the entry was when its folder was listed, what is opened is what is
/// there now, and only a regular file or a link is accepted.
pub(crate) fn source_in(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    rel: &str,
    root: &Path,
) -> Result<Source> {
    let path = || root.join(rel);
    let unsafe_here = |found| StagingError::UnsafeProjectPath {
        path: rel.to_string(),
        at: rel.to_string(),
        found,
        wanted: "a file or a link",
    };
    if !plain_name(name) {
        return Err(io_err("read", path())(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a plain file name",
        )));
    }
    // O_NONBLOCK: a FIFO swapped in must not block the supervisor; it is refused below.
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(f) => {
            let file = File::from(f);
            let m = file.metadata().map_err(io_err("read", path()))?;
            if m.file_type().is_file() {
                Ok(Source::File(file, m))
            } else {
                Err(unsafe_here(kind_of_meta(&m)))
            }
        }
        Err(Errno::NOENT) => Ok(Source::Missing),
        // ELOOP: a link (O_NOFOLLOW). ENXIO: a socket. Look at the entry itself.
        Err(Errno::LOOP | Errno::NXIO) => {
            let path_fd = match rustix::fs::openat(
                parent,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(p) => p,
                Err(Errno::NOENT) => return Ok(Source::Missing),
                Err(e) => return Err(io_err("read", path())(e.into())),
            };
            let m = File::from(path_fd.try_clone().map_err(io_err("read", path()))?)
                .metadata()
                .map_err(io_err("read", path()))?;
            if !m.file_type().is_symlink() {
                return Err(unsafe_here(kind_of_meta(&m)));
            }
            // The link this descriptor holds, read through the descriptor itself.
            let target = rustix::fs::readlinkat(&path_fd, "", Vec::new())
                .map_err(|e| io_err("read the link", path())(e.into()))?;
            Ok(Source::Link(PathBuf::from(OsString::from_vec(
                target.into_bytes(),
            ))))
        }
        Err(e) => Err(io_err("read", path())(e.into())),
    }
}

/// What `name` in `parent` is right now (for a refusal's message; the refusal is already
/// decided).
fn classify_in(parent: BorrowedFd<'_>, name: &OsStr) -> FoundKind {
    match stat_in(parent, name) {
        Ok(Some(m)) if m.file_type().is_dir() => FoundKind::Changing,
        Ok(Some(m)) => kind_of_meta(&m),
        _ => FoundKind::Changing,
    }
}

fn kind_of_meta(m: &Metadata) -> FoundKind {
    let t = m.file_type();
    if t.is_symlink() {
        FoundKind::Link
    } else if t.is_dir() {
        FoundKind::Folder
    } else if t.is_file() {
        FoundKind::File
    } else {
        FoundKind::Special
    }
}

/// `lstat` of `name` in `parent`: `O_PATH | O_NOFOLLOW`, then `fstat` of that descriptor.
pub(crate) fn stat_in(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Metadata>> {
    if !plain_name(name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a plain file name",
        ));
    }
    match rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => File::from(fd).metadata().map(Some),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every entry of an open folder with its `lstat`; entries that vanish are left out.
pub(crate) fn list_in(dir: BorrowedFd<'_>) -> io::Result<Vec<(OsString, Metadata)>> {
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let name = OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        if let Some(m) = stat_in(dir, name)? {
            out.push((name.to_os_string(), m));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The `(seconds, nanoseconds)` pair of a time, as `*at` calls take it.
pub(crate) fn timespec(sec: i64, nsec: i64) -> rustix::fs::Timespec {
    rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    }
}

/// Access and modification times of `m`, to give a copy.
pub(crate) fn times_of(m: &Metadata) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: timespec(m.atime(), m.atime_nsec()),
        last_modification: timespec(m.mtime(), m.mtime_nsec()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// A project with `real/f`, `file`, and `d -> <outside>` (a folder holding `secret`), and
    /// `f -> <outside>/secret`.
    fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let project = t.path().join("project");
        let outside = t.path().join("outside");
        fs::create_dir_all(project.join("real")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(project.join("real/f"), "inside\n").unwrap();
        fs::write(project.join("file"), "a file\n").unwrap();
        fs::write(outside.join("secret"), "SECRET\n").unwrap();
        symlink(&outside, project.join("d")).unwrap();
        symlink(outside.join("secret"), project.join("f")).unwrap();
        (t, project, outside)
    }

    fn refusal(e: StagingError) -> (String, String, FoundKind) {
        match e {
            StagingError::UnsafeProjectPath {
                path, at, found, ..
            } => (path, at, found),
            other => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn a_link_on_the_way_is_refused_and_never_followed() {
        let (_t, project, _) = world();
        let b = Beneath::open(&project).unwrap();
        let (path, at, found) = refusal(b.dir("d", "d/secret").unwrap_err());
        assert_eq!(
            (path.as_str(), at.as_str(), found),
            ("d/secret", "d", FoundKind::Link)
        );
        let (_, at, found) = refusal(b.open_source("d/secret").unwrap_err());
        assert_eq!((at.as_str(), found), ("d", FoundKind::Link));
        // A stat through it sees nothing there (the entry is not at that place in the tree).
        assert!(b.stat("d/secret").unwrap().is_none());
        // A file where a folder is needed is refused with its kind.
        let (_, at, found) = refusal(b.dir("file/x", "file/x/y").unwrap_err());
        assert_eq!((at.as_str(), found), ("file", FoundKind::File));
        // The real folder works.
        assert!(matches!(b.open_source("real/f").unwrap(), Source::File(..)));
        // Negative control: the same path resolved by name reads the outside file.
        assert_eq!(
            fs::read_to_string(project.join("d/secret")).unwrap(),
            "SECRET\n"
        );
    }

    #[test]
    fn a_link_at_the_end_is_read_as_a_link() {
        let (_t, project, outside) = world();
        let b = Beneath::open(&project).unwrap();
        match b.open_source("f").unwrap() {
            Source::Link(target) => assert_eq!(target, outside.join("secret")),
            _ => panic!("the link was not read as a link"),
        }
        // Negative control: opened by name, it is the outside file.
        assert_eq!(fs::read_to_string(project.join("f")).unwrap(), "SECRET\n");
    }

    #[test]
    fn the_walk_lists_links_and_does_not_enter_them() {
        let (_t, project, _) = world();
        let b = Beneath::open(&project).unwrap();
        let mut seen = Vec::new();
        b.walk_tree("", |rel, _, _, _| {
            seen.push(rel.display().to_string());
            Ok(Walk::Descend)
        })
        .unwrap();
        seen.sort();
        assert_eq!(seen, ["d", "f", "file", "real", "real/f"]);
    }

    #[test]
    fn a_pinned_folder_is_the_inode_that_was_checked() {
        let (_t, project, _) = world();
        let mut b = Beneath::open(&project).unwrap();
        let pinned = b.pin("real", "real/f").unwrap().unwrap();
        // Renamed away and replaced by a link: the pin still means the checked folder.
        fs::rename(project.join("real"), project.join("moved")).unwrap();
        symlink(project.join("file"), project.join("real")).unwrap();
        let again = b.dir("real", "real/f").unwrap().unwrap();
        let ino = |fd: &OwnedFd| {
            File::from(fd.try_clone().unwrap())
                .metadata()
                .unwrap()
                .ino()
        };
        assert_eq!(ino(&pinned), ino(&again));
        assert_eq!(
            ino(&again),
            fs::metadata(project.join("moved")).unwrap().ino()
        );
        // An unpinned walk refuses the link.
        let fresh = Beneath::open(&project).unwrap();
        let (_, at, found) = refusal(fresh.dir("real", "real/f").unwrap_err());
        assert_eq!((at.as_str(), found), ("real", FoundKind::Link));
    }

    #[test]
    fn the_open_file_limit_stays_raised_until_the_last_holder_is_dropped() {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        /// Puts the test process's limit back, also when an assertion fails.
        struct Restore(Rlimit);
        impl Drop for Restore {
            fn drop(&mut self) {
                let _ = setrlimit(Resource::Nofile, self.0);
            }
        }
        let soft = || getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        let (_t, project, _) = world();
        let start = getrlimit(Resource::Nofile);
        assert!(
            start.maximum.unwrap_or(u64::MAX) >= 556,
            "NOT TESTED: the hard open-file limit {:?} is below 556",
            start.maximum
        );
        let _restore = Restore(start);
        // From a low soft limit (any hard limit allows lowering it): 400, raised to 556 for
        // the first holder's 300 folders; the second's 250 (506) fit in that.
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(400),
                maximum: start.maximum,
            },
        )
        .unwrap();
        let mut first = Beneath::open(&project).unwrap();
        let mut second = Beneath::open(&project).unwrap();
        first.reserve(300).unwrap();
        assert_eq!(soft(), 556);
        second.reserve(250).unwrap();
        assert_eq!(soft(), 556);
        drop(first);
        // Restored by the first holder alone, the limit (400) would be under the second's
        // need while it works.
        assert_eq!(soft(), 556, "lowered under a holder at work");
        drop(second);
        // The last holder gone, the limit is the one before the first raise.
        assert_eq!(soft(), 400);
    }

    #[test]
    fn the_project_root_itself_is_not_followed() {
        let (t, project, _) = world();
        let link = t.path().join("project-link");
        symlink(&project, &link).unwrap();
        assert!(matches!(Beneath::open(&link), Err(StagingError::Io { .. })));
    }
}
