//! Private files and folders: created 0600 / 0700, opened without following links, checked
//! for type, mode and owner before use.
//!
//! The threat here is a link or a loose mode planted where the log lives, so that the writer
//! appends to a file the attacker controls, or a key is readable by another user. Checks are
//! made on the opened descriptor where std allows it (`File::metadata` is `fstat`).

use std::fs::{self, DirBuilder, File, Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::AuditError;

/// Mode of every audit folder.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every audit file.
pub const FILE_MODE: u32 = 0o600;

/// The effective uid of this process (`geteuid`, through rustix's safe wrapper: this crate
/// has no `unsafe`). It used to read the `Uid:` line of `/proc/self/status`, which the kernel
/// builds whole for every read: tens of microseconds at every audit open.
pub(crate) fn current_uid() -> Result<u32, AuditError> {
    Ok(rustix::process::geteuid().as_raw())
}

/// What is wrong with a file or folder, if anything, as a short sentence.
pub(crate) fn meta_problem(meta: &Metadata, want_dir: bool, uid: u32) -> Option<String> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Some("is a symbolic link".into());
    }
    if want_dir && !ft.is_dir() {
        return Some("is not a folder".into());
    }
    if !want_dir && !ft.is_file() {
        return Some("is not a regular file".into());
    }
    let mode = meta.mode() & 0o7777;
    let want = if want_dir { DIR_MODE } else { FILE_MODE };
    if mode != want {
        return Some(format!("has mode {mode:04o}, expected {want:04o}"));
    }
    if meta.uid() != uid {
        return Some(format!(
            "is owned by uid {}, not by the current user (uid {uid})",
            meta.uid()
        ));
    }
    None
}

fn to_error(path: &Path, meta: &Metadata, want_dir: bool, uid: u32) -> Result<(), AuditError> {
    let ft = meta.file_type();
    let path = path.to_path_buf();
    if ft.is_symlink() {
        return Err(AuditError::Symlink { path });
    }
    if want_dir && !ft.is_dir() {
        return Err(AuditError::WrongType {
            path,
            expected: "folder",
        });
    }
    if !want_dir && !ft.is_file() {
        return Err(AuditError::WrongType {
            path,
            expected: "regular file",
        });
    }
    let mode = meta.mode() & 0o7777;
    let expected = if want_dir { DIR_MODE } else { FILE_MODE };
    if mode != expected {
        return Err(AuditError::UnsafeMode {
            path,
            mode,
            expected,
        });
    }
    if meta.uid() != uid {
        return Err(AuditError::WrongOwner {
            path,
            owner: meta.uid(),
            expected: uid,
        });
    }
    Ok(())
}

/// Creates `path` (and missing parents) as 0700 folders, then checks that `path` is a real
/// folder, 0700, owned by us. An existing folder with another mode is refused, not fixed:
/// someone changed it, and silently tightening it would hide that.
pub(crate) fn ensure_private_dir(path: &Path, uid: u32) -> Result<(), AuditError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => to_error(path, &meta, true, uid),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(path)
                .map_err(|e| AuditError::io(path, e))?;
            // The umask may have removed bits we asked for; never added any.
            fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| AuditError::io(path, e))?;
            let meta = fs::symlink_metadata(path).map_err(|e| AuditError::io(path, e))?;
            to_error(path, &meta, true, uid)
        }
        Err(e) => Err(AuditError::io(path, e)),
    }
}

fn nofollow() -> i32 {
    libc::O_NOFOLLOW | libc::O_CLOEXEC
}

/// Creates a new private file (`O_EXCL`, so neither an existing file nor a planted link is
/// reused) open for appending.
pub(crate) fn create_new_append(path: &Path, uid: u32) -> Result<File, AuditError> {
    let file = OpenOptions::new()
        .append(true)
        .read(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(nofollow())
        .open(path)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                AuditError::Exists {
                    path: path.to_path_buf(),
                }
            } else {
                AuditError::io(path, e)
            }
        })?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| AuditError::io(path, e))?;
    check_open_file(&file, path, uid)?;
    Ok(file)
}

/// Opens (creating if missing) a private file for reading and appending, never through a link.
pub(crate) fn open_append(path: &Path, uid: u32) -> Result<File, AuditError> {
    let file = OpenOptions::new()
        .append(true)
        .read(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(nofollow())
        .open(path)
        .map_err(|e| link_error(path, e))?;
    check_open_file(&file, path, uid)?;
    Ok(file)
}

/// Opens an existing file read-only, never through a link.
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nofollow())
        .open(path)
}

fn link_error(path: &Path, e: io::Error) -> AuditError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        AuditError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        AuditError::io(path, e)
    }
}

pub(crate) fn check_open_file(file: &File, path: &Path, uid: u32) -> Result<(), AuditError> {
    let meta = file.metadata().map_err(|e| AuditError::io(path, e))?;
    to_error(path, &meta, false, uid)
}

/// Reads a whole private file (checked on the descriptor), `None` if it does not exist.
pub(crate) fn read_private(path: &Path, uid: u32) -> Result<Option<Vec<u8>>, AuditError> {
    let mut file = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(link_error(path, e)),
    };
    check_open_file(&file, path, uid)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| AuditError::io(path, e))?;
    Ok(Some(data))
}

/// Creates `tmp` afresh (0600, not following links, owned by `uid`), open to read and append,
/// for a file that is then renamed into place: one left by a crash during an earlier rewrite
/// is removed first (a link there is removed, not followed).
pub(crate) fn create_temp(tmp: &Path, uid: u32) -> Result<File, AuditError> {
    if std::fs::symlink_metadata(tmp).is_ok() {
        std::fs::remove_file(tmp).map_err(|e| AuditError::io(tmp, e))?;
    }
    let out = OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)
        .map_err(|e| AuditError::io(tmp, e))?;
    out.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| AuditError::io(tmp, e))?;
    check_open_file(&out, tmp, uid)?;
    Ok(out)
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<(), AuditError> {
    let d = File::open(dir).map_err(|e| AuditError::io(dir, e))?;
    d.sync_all().map_err(|e| AuditError::io(dir, e))
}

/// Replaces `dir/name` atomically: a private temporary file in the same folder, written,
/// synced, renamed over the target, then the folder synced. A reader sees the old file or the
/// new one, never a mix; after a crash the target is one of the two.
pub(crate) fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    sync: bool,
    uid: u32,
) -> Result<(), AuditError> {
    let target = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    // A temporary left by a crash is ours to replace; a link there is refused by O_NOFOLLOW.
    match fs::symlink_metadata(&tmp) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(AuditError::Symlink { path: tmp });
        }
        Ok(_) => fs::remove_file(&tmp).map_err(|e| AuditError::io(&tmp, e))?,
        Err(_) => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(nofollow())
        .open(&tmp)
        .map_err(|e| AuditError::io(&tmp, e))?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| AuditError::io(&tmp, e))?;
    check_open_file(&file, &tmp, uid)?;
    file.write_all(bytes).map_err(|e| AuditError::io(&tmp, e))?;
    if sync {
        file.sync_all().map_err(|e| AuditError::io(&tmp, e))?;
    }
    drop(file);
    fs::rename(&tmp, &target).map_err(|e| AuditError::io(&target, e))?;
    if sync {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Replaces `dir/name` atomically, as [`write_atomic`] does, but without freeing a block on the
/// way: a checkpoint is replaced at every close, and on ext4 dropping the last name of a file
/// whose data is on disk frees its block (with `discard`, a device request), which made the
/// rename over the old checkpoint 0.2–0.3 ms of a whole run (docs/benchmarks.md, "The
/// checkpoint's inode reused").
///
/// Two inodes take turns. The new content goes into `.NAME.spare` (the checkpoint before
/// last): written in place when the caller allows it (`in_place`), it has the same length (a
/// checkpoint's length changes only when its line count gains a digit) and has settled, else
/// into a fresh file. The current `NAME` gets a
/// second name, `.NAME.keep`, before the spare is renamed over it, so the rename drops one of
/// its two names and frees nothing; then `.NAME.keep` becomes the next spare.
///
/// Readers of `NAME` see the old content or the new: the spare is written before it takes the
/// name, and only once it has been the spare for [`SPARE_SETTLED`], so that a reader that opened
/// it while it was `NAME` has read it (verify also re-reads a checkpoint whose times changed
/// while it read it). After a power loss (with `sync` off) `NAME` holds the new content, the
/// old, or what the spare held before its in-place write (the rename kept, the write lost:
/// that block's first sector holds the whole file, old or new), each a whole checkpoint; the
/// spare is only ever some session's last checkpoint (a session's later checkpoint leaves no
/// spare), which verify accepts as it accepts an old checkpoint. A leftover
/// `.NAME.keep` (a crash between the renames) is dropped and made again; a spare that is not
/// this user's private regular file is replaced, never written through.
pub(crate) fn replace_reusing_inodes(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    sync: bool,
    in_place: bool,
    uid: u32,
) -> Result<(), AuditError> {
    let target = dir.join(name);
    let spare = dir.join(format!(".{name}.spare"));
    let keep = dir.join(format!(".{name}.keep"));
    // Non-blocking: a FIFO planted there must not hold the close (it is refused below).
    let reusable = in_place
        .then(|| {
            OpenOptions::new()
                .write(true)
                .custom_flags(nofollow() | libc::O_NONBLOCK)
                .open(&spare)
                .ok()
        })
        .flatten()
        .filter(|f| {
            f.metadata().is_ok_and(|m| {
                to_error(&spare, &m, false, uid).is_ok()
                    && m.nlink() == 1
                    && m.len() == bytes.len() as u64
                    && settled(&m)
            })
        });
    let file = match reusable {
        Some(file) => {
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, 0)
                .map_err(|e| AuditError::io(&spare, e))?;
            file
        }
        None => {
            let mut file = create_temp(&spare, uid)?;
            file.write_all(bytes)
                .map_err(|e| AuditError::io(&spare, e))?;
            file
        }
    };
    if sync {
        file.sync_all().map_err(|e| AuditError::io(&spare, e))?;
    }
    drop(file);
    // The checkpoint being replaced keeps a name: the rename below then frees nothing. Where
    // no second name can be made (the first checkpoint; a filesystem without hard links), the
    // rename alone replaces it, as `write_atomic` does.
    let kept = match fs::hard_link(&target, &keep) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(&keep).map_err(|e| AuditError::io(&keep, e))?;
            fs::hard_link(&target, &keep).is_ok()
        }
        Err(_) => false,
    };
    fs::rename(&spare, &target).map_err(|e| AuditError::io(&target, e))?;
    if kept && in_place {
        // The new checkpoint is in place: a spare that cannot be named only makes the next
        // replacement write a fresh file.
        let _ = fs::rename(&keep, &spare);
    } else if kept {
        // A session's later checkpoint: the one it replaced may be the same session's
        // earlier one, which must never become the spare. Written into in place and its
        // rename kept across a power loss without the write, it would be what `NAME` shows,
        // and the log continues after its seal (CKPT_BAD, a false alarm). The spare that is
        // left is always some session's last checkpoint.
        let _ = fs::remove_file(&keep);
    }
    if sync {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// How long a checkpoint must have been the spare before it is written in place: a reader
/// that opened it while it was still the checkpoint reads it at once (verify also re-reads a
/// checkpoint that changed under it, `verify::read_settled`). Two replacements by one session
/// (microseconds apart when a close after an idle spell publishes twice) do not rely on this:
/// the caller asks for a fresh file for all but a session's first (`in_place`). 20 ms, not
/// the 2 ms a reader needs: the change time it is judged by comes from the kernel's coarse
/// clock on kernels and filesystems without fine-grained timestamps, which moves once per
/// timer tick (up to 10 ms), so a spare renamed a moment ago can look a tick old.
const SPARE_SETTLED: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether the file's last change (its rename to the spare's name) is at least
/// [`SPARE_SETTLED`] old.
fn settled(meta: &Metadata) -> bool {
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            u64::try_from(meta.ctime()).unwrap_or(0),
            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
        );
    std::time::SystemTime::now()
        .duration_since(changed)
        .is_ok_and(|age| age >= SPARE_SETTLED)
}

/// `n` bytes from the kernel's random source.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], AuditError> {
    let mut out = [0u8; N];
    let path = PathBuf::from("/dev/urandom");
    let mut f = File::open(&path).map_err(|e| AuditError::io(&path, e))?;
    f.read_exact(&mut out)
        .map_err(|e| AuditError::io(&path, e))?;
    Ok(out)
}

/// The ctime of a path in milliseconds since the epoch (what `utimensat` cannot set back).
pub(crate) fn ctime_ms(meta: &Metadata) -> u64 {
    let secs = u64::try_from(meta.ctime()).unwrap_or(0);
    let nanos = u64::try_from(meta.ctime_nsec()).unwrap_or(0);
    secs * 1000 + nanos / 1_000_000
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn uid() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn note(i: usize) -> Vec<u8> {
        format!("garuda-audit/p\n{i:03}\nroot\n\n— sig\n").into_bytes()
    }

    /// The checkpoint's inode over replacements: two take turns with `replace_reusing_inodes`
    /// (no close drops the last name of a file, so none frees a block); `write_atomic`, the
    /// control, leaves a new inode each time (the old one freed).
    #[test]
    fn a_checkpoint_replaced_again_and_again_takes_turns_between_two_inodes() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("journal.ckpt");
        let mut reused = std::collections::BTreeSet::new();
        for i in 0..6 {
            // One close after another, as runs are: each spare has settled.
            std::thread::sleep(SPARE_SETTLED + std::time::Duration::from_millis(5));
            replace_reusing_inodes(
                dir.path(),
                "journal.ckpt",
                &note(i),
                i % 2 == 0,
                true,
                uid(),
            )
            .unwrap();
            assert_eq!(fs::read(&target).unwrap(), note(i));
            let meta = fs::metadata(&target).unwrap();
            assert_eq!(meta.nlink(), 1, "no second name left on the checkpoint");
            reused.insert(meta.ino());
        }
        assert_eq!(reused.len(), 2, "{reused:?}");
        assert!(!dir.path().join(".journal.ckpt.keep").exists());
        let spare = fs::metadata(dir.path().join(".journal.ckpt.spare")).unwrap();
        assert_eq!(spare.mode() & 0o7777, FILE_MODE);
        let mut fresh = std::collections::BTreeSet::new();
        for i in 0..6 {
            write_atomic(dir.path(), "other.ckpt", &note(i), false, uid()).unwrap();
            // Held open, so that its number cannot be given to the next file.
            let f = File::open(dir.path().join("other.ckpt")).unwrap();
            fresh.insert(f.metadata().unwrap().ino());
            std::mem::forget(f);
        }
        assert_eq!(fresh.len(), 6, "control: a new inode per replacement");
    }

    /// A checkpoint that was replaced a moment ago (a reader may still be reading it) is not
    /// written in place: two replacements in a row leave it as it was. A FIFO at the spare does
    /// not hold the replacement, and a spare with a second name is not written through it.
    #[test]
    fn a_spare_just_replaced_a_fifo_or_a_second_name_is_not_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("journal.ckpt");
        let spare = dir.path().join(".journal.ckpt.spare");
        // `note(1)`'s inode is the spare after the second replacement, replaced a moment ago:
        // a reader holding it open still reads `note(1)` after the third. The three must come
        // within SPARE_SETTLED of each other to test that; a loaded machine may need tries.
        let mut tried = 0;
        loop {
            tried += 1;
            let start = std::time::Instant::now();
            replace_reusing_inodes(dir.path(), "journal.ckpt", &note(1), false, true, uid())
                .unwrap();
            replace_reusing_inodes(dir.path(), "journal.ckpt", &note(2), false, true, uid())
                .unwrap();
            let mut held = File::open(&spare).unwrap();
            replace_reusing_inodes(dir.path(), "journal.ckpt", &note(3), false, true, uid())
                .unwrap();
            if start.elapsed() >= SPARE_SETTLED {
                assert!(
                    tried < 100,
                    "never three replacements within {SPARE_SETTLED:?}"
                );
                continue;
            }
            let mut seen = Vec::new();
            held.read_to_end(&mut seen).unwrap();
            assert_eq!(seen, note(1), "written in place under a reader");
            assert_eq!(fs::read(&target).unwrap(), note(3));
            break;
        }
        // Control: once settled, the spare is reused in place.
        std::thread::sleep(SPARE_SETTLED + std::time::Duration::from_millis(5));
        let before = fs::metadata(&spare).unwrap().ino();
        replace_reusing_inodes(dir.path(), "journal.ckpt", &note(4), false, true, uid()).unwrap();
        assert_eq!(
            fs::metadata(&target).unwrap().ino(),
            before,
            "control: reused"
        );
        // A caller's later replacement (`in_place` false) writes a fresh file however settled.
        std::thread::sleep(SPARE_SETTLED + std::time::Duration::from_millis(5));
        let mut held = File::open(&spare).unwrap();
        let was = fs::read(&spare).unwrap();
        replace_reusing_inodes(dir.path(), "journal.ckpt", &note(7), false, false, uid()).unwrap();
        let mut seen = Vec::new();
        held.read_to_end(&mut seen).unwrap();
        assert_eq!(seen, was, "written in place");
        assert_eq!(fs::read(&target).unwrap(), note(7));
        // That later replacement's checkpoint may follow the same session's earlier one,
        // which must never be written into in place (a power loss could show it): no spare.
        assert!(
            fs::symlink_metadata(&spare).is_err(),
            "a session's later checkpoint leaves no spare"
        );
        // A FIFO at the spare (no reader): refused at once, a fresh file takes its place.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &spare,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::thread::sleep(SPARE_SETTLED + std::time::Duration::from_millis(5));
        // On a thread: opened blocking, the FIFO would hold it until a reader came, forever.
        let (done, finished) = std::sync::mpsc::channel();
        let at = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let r = replace_reusing_inodes(&at, "journal.ckpt", &note(5), false, true, uid());
            let _ = done.send(r.is_ok());
        });
        let ok = finished.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(
            ok,
            Ok(true),
            "the replacement was held by the FIFO or failed"
        );
        assert_eq!(fs::read(&target).unwrap(), note(5));
        // A spare that is also another file's name: that file is left as it was.
        let other = dir.path().join("journal.1.ckpt");
        fs::remove_file(&spare).ok();
        fs::write(&other, note(9)).unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(FILE_MODE)).unwrap();
        fs::hard_link(&other, &spare).unwrap();
        std::thread::sleep(SPARE_SETTLED + std::time::Duration::from_millis(5));
        replace_reusing_inodes(dir.path(), "journal.ckpt", &note(6), false, true, uid()).unwrap();
        assert_eq!(fs::read(&target).unwrap(), note(6));
        assert_eq!(fs::read(&other).unwrap(), note(9));
    }

    /// A new length is written to a fresh spare, not in place; leftovers of a crash between
    /// the steps, and a link planted at the spare, are dropped, never written through.
    #[test]
    fn a_new_length_a_leftover_or_a_link_at_the_spare_still_gives_the_whole_new_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("journal.ckpt");
        replace_reusing_inodes(dir.path(), "journal.ckpt", b"short\n", false, true, uid()).unwrap();
        replace_reusing_inodes(
            dir.path(),
            "journal.ckpt",
            b"longer one\n",
            false,
            true,
            uid(),
        )
        .unwrap();
        replace_reusing_inodes(dir.path(), "journal.ckpt", b"s\n", false, true, uid()).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"s\n");
        // A crash after the second name was made: `.keep` is the current checkpoint.
        fs::hard_link(&target, dir.path().join(".journal.ckpt.keep")).unwrap();
        replace_reusing_inodes(dir.path(), "journal.ckpt", b"t\n", false, true, uid()).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"t\n");
        assert!(!dir.path().join(".journal.ckpt.keep").exists());
        // A link at the spare, to a file of the same length elsewhere.
        let outside = dir.path().join("outside");
        fs::write(&outside, b"u\n").unwrap();
        fs::remove_file(dir.path().join(".journal.ckpt.spare")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.path().join(".journal.ckpt.spare")).unwrap();
        replace_reusing_inodes(dir.path(), "journal.ckpt", b"v\n", false, true, uid()).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"v\n");
        assert_eq!(
            fs::read(&outside).unwrap(),
            b"u\n",
            "not written through the link"
        );
        assert!(!fs::symlink_metadata(&target).unwrap().is_symlink());
    }
}
