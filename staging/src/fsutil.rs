//! Small filesystem helpers shared by the backends, the change list and apply.
//!
//! The rule for every helper that writes or removes inside a staging folder (`upper/`,
//! `copy/`): never follow a symbolic link the command may have planted. The supervisor runs
//! unconfined, so a write through `copy/src -> /home/me` would land in the home directory.
//! Hence [`real_dir_chain`] checks every ancestor with `lstat` before a path is touched.

use std::collections::HashSet;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::beneath::{Beneath, Source};
use crate::error::{io_err, Result};

/// A file's change time (`st_ctime`), comparable. User space can set mtime back but not ctime,
/// so ctime is what the conflict check trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FsTime {
    pub(crate) sec: i64,
    pub(crate) nsec: i64,
}

impl FsTime {
    pub(crate) fn ctime(m: &Metadata) -> FsTime {
        FsTime {
            sec: m.ctime(),
            nsec: m.ctime_nsec(),
        }
    }

    /// True when an entry with this ctime may have changed at or after `mark`. A filesystem
    /// with whole-second timestamps (ctime nanoseconds 0) is compared by seconds, so a change
    /// in the same second as the mark still counts: false conflicts over missed ones.
    pub(crate) fn at_or_after(self, mark: FsTime) -> bool {
        self >= mark || (self.nsec == 0 && self.sec >= mark.sec)
    }
}

/// Identity and state of a staged file when it was listed, so apply copies exactly what the
/// user saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    dev: u64,
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Fingerprint {
    pub(crate) fn of(m: &Metadata) -> Fingerprint {
        Fingerprint {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mode: m.mode(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// What kind of entry a path is, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Link,
    Dir,
    /// An overlayfs whiteout: character device 0:0, or a zero-size file marked with the
    /// `overlay.whiteout` xattr.
    Whiteout,
    /// FIFO, socket, other devices: never applied.
    Special,
}

pub(crate) fn kind_of(path: &Path, m: &Metadata, overlay: bool) -> Kind {
    let ft = m.file_type();
    if ft.is_symlink() {
        Kind::Link
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() {
        if overlay && m.len() == 0 && has_overlay_xattr(path, "whiteout", None) {
            Kind::Whiteout
        } else {
            Kind::File
        }
    } else if overlay && ft.is_char_device() && m.rdev() == 0 {
        Kind::Whiteout
    } else {
        Kind::Special
    }
}

/// Reads an overlayfs xattr (`user.overlay.<name>` in `userxattr` mode, `trusted.overlay.<name>`
/// otherwise) without following links. With `value`, the attribute must equal it.
pub(crate) fn has_overlay_xattr(path: &Path, name: &str, value: Option<&[u8]>) -> bool {
    for prefix in ["user.overlay.", "trusted.overlay."] {
        if let Ok(Some(v)) = xattr::get(path, format!("{prefix}{name}")) {
            if value.is_none_or(|want| v == want) {
                return true;
            }
        }
    }
    false
}

/// Removes the opaque marker of an upper directory (both namespaces).
pub(crate) fn clear_opaque(path: &Path) -> Result<()> {
    for prefix in ["user.overlay.", "trusted.overlay."] {
        match xattr::remove(path, format!("{prefix}opaque")) {
            Ok(()) => {}
            Err(e) if is_no_xattr(&e) => {}
            Err(e)
                if prefix.starts_with("trusted") && e.kind() == io::ErrorKind::PermissionDenied => {
            }
            Err(e) => return Err(io_err("remove the opaque marker", path)(e)),
        }
    }
    Ok(())
}

/// Marks an upper directory opaque (userxattr form).
pub(crate) fn set_opaque(path: &Path) -> Result<()> {
    xattr::set(path, "user.overlay.opaque", b"y").map_err(io_err("mark the folder opaque", path))
}

fn is_no_xattr(e: &io::Error) -> bool {
    // ENODATA (61 on Linux) is reported as "no data available"; std has no kind for it.
    e.raw_os_error() == Some(61) || e.kind() == io::ErrorKind::NotFound
}

/// Joins a `/`-separated project-relative path.
pub(crate) fn join(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// The parent of a `/`-separated relative path ("" for a top-level name).
pub(crate) fn parent_rel(rel: &str) -> &str {
    rel.rfind('/').map_or("", |i| &rel[..i])
}

/// Every proper ancestor of `rel`, shortest first ("a", "a/b" for "a/b/c").
pub(crate) fn ancestors_rel(rel: &str) -> impl Iterator<Item = &str> {
    rel.match_indices('/').map(move |(i, _)| &rel[..i])
}

/// True when `rel` is a plain relative path: no empty, `.` or `..` component, no leading `/`.
pub(crate) fn is_plain_rel(rel: &str) -> bool {
    !rel.is_empty()
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0'))
}

/// `lstat` that maps "not found" (and "not a directory" on the way) to `None`.
pub(crate) fn lstat(path: &Path) -> io::Result<Option<Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Checks that every proper ancestor of `rel` under `root` is a real directory (not a link,
/// not missing). `known` caches ancestors already checked. Returns false when one is missing
/// or is not a directory.
pub(crate) fn real_dir_chain(
    root: &Path,
    rel: &str,
    known: &mut HashSet<String>,
) -> io::Result<bool> {
    for anc in ancestors_rel(rel) {
        if known.contains(anc) {
            continue;
        }
        match lstat(&join(root, anc))? {
            Some(m) if m.file_type().is_dir() => {
                known.insert(anc.to_string());
            }
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// `lstat` of `root/rel` that treats a path whose ancestors are not all real directories as
/// absent: the entry is not really at that place in the tree.
pub(crate) fn lstat_rel(
    root: &Path,
    rel: &str,
    known: &mut HashSet<String>,
) -> io::Result<Option<Metadata>> {
    if !real_dir_chain(root, rel, known)? {
        return Ok(None);
    }
    lstat(&join(root, rel))
}

/// Permission bits that are compared and applied. Set-user-ID, set-group-ID and sticky bits
/// are never carried from staging into the project.
pub(crate) const PERM_MASK: u32 = 0o777;

/// The mode recorded in a [`crate::Change`]: file type bits plus the permission bits.
pub(crate) fn shown_mode(m: &Metadata) -> u32 {
    (m.mode() & 0o170_000) | (m.mode() & PERM_MASK)
}

/// Byte-for-byte comparison of two regular files.
pub(crate) fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    let mut fa = File::open(a)?;
    let mut fb = File::open(b)?;
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The first `limit` bytes of a file (fewer if it is shorter).
pub(crate) fn read_prefix(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    File::open(path)?.take(limit as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Git's heuristic: a NUL byte in the first 8,000 bytes means binary.
pub(crate) fn looks_binary(path: &Path) -> io::Result<bool> {
    Ok(read_prefix(path, 8000)?.contains(&0))
}

/// fsync a directory, making the renames and creations inside it durable.
pub(crate) fn fsync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync the folder", path))
}

/// Creates a directory with `mode` (the umask may clear bits, so it is set again).
pub(crate) fn mkdir_mode(path: &Path, mode: u32) -> Result<()> {
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(io_err("create the folder", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(io_err("set the folder's mode", path))
}

/// Removes a tree without following links. overlayfs leaves `work/work` with mode 000 and a
/// command may `chmod 000` its own folders, which a non-root owner cannot list or empty; those
/// are given back `u+rwx` first.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    open_up(path);
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove the folder", path)(e)),
    }
}

/// Gives every directory of the tree `u+rwx`, never following a link.
fn open_up(root: &Path) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(Some(m)) = lstat(&dir) else { continue };
        if !m.file_type().is_dir() {
            continue;
        }
        if m.mode() & 0o700 != 0o700 {
            let _ = fs::set_permissions(
                &dir,
                fs::Permissions::from_mode((m.mode() & 0o7777) | 0o700),
            );
        }
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
}

/// Removes a file, link, whiteout or special file; "not found" is fine.
pub(crate) fn remove_entry(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// Removes a directory when it is empty; true when it was removed.
pub(crate) fn remove_dir_if_empty(path: &Path) -> bool {
    fs::remove_dir(path).is_ok()
}

/// Copies the project entry at `rel` (a regular file or a link) to `dest` inside a staging
/// folder, replacing what is there, through a temporary name and a rename. Keeps the
/// permission bits and the modification time, so the copy backend's size-and-mtime check
/// sees the two as equal.
///
/// The project side is read beneath its held root ([`Beneath::open_source`]): the file is
/// opened with `O_NOFOLLOW` from its folder's descriptor and a link is read as a link, so a
/// folder (or file) a concurrent command swapped for a link cannot bring a file from outside
/// the project into the staged view. Mode and time come from the opened file itself. The
/// staging side is a folder no command can write while this runs. `Ok(false)` when the entry
/// is gone.
pub(crate) fn copy_entry_into(project: &Beneath, rel: &str, dest: &Path) -> Result<bool> {
    let tmp = sibling_temp(dest, "garuda-sync");
    let _ = fs::remove_file(&tmp);
    match project.open_source(rel)? {
        Source::Missing => return Ok(false),
        Source::Link(target) => {
            std::os::unix::fs::symlink(&target, &tmp).map_err(io_err("create the link", &tmp))?;
        }
        Source::File(mut input, src_meta) => {
            let src = project.root_path().join(rel);
            let mut out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(io_err("create", &tmp))?;
            let copied = io::copy(&mut input, &mut out).map_err(io_err("copy", &src));
            let perms = fs::Permissions::from_mode(src_meta.mode() & PERM_MASK);
            let done = copied
                .and_then(|_| {
                    out.set_permissions(perms)
                        .map_err(io_err("set the mode", &tmp))
                })
                .and_then(|()| {
                    let mtime = src_meta.modified().map_err(io_err("read the time", &src))?;
                    out.set_modified(mtime)
                        .map_err(io_err("set the time", &tmp))
                });
            if let Err(e) = done {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        }
    }
    // A directory in the way (the command made one where the project has a file) goes first.
    if let Ok(Some(m)) = lstat(dest) {
        if m.file_type().is_dir() {
            remove_tree(dest)?;
        }
    }
    fs::rename(&tmp, dest).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("rename into place", dest)(e)
    })?;
    Ok(true)
}

/// `.<name>.<tag>` next to `path`, or a short fallback when that would be too long a name.
pub(crate) fn sibling_temp(path: &Path, tag: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let candidate = format!(".{name}.{tag}");
    let file = if candidate.len() <= 255 && !name.is_empty() {
        candidate
    } else {
        format!(".{tag}")
    };
    path.with_file_name(file)
}
