//! What the project walk learned about each folder, kept between runs so that a run lists only
//! the folders that changed (issue 12: the walk cost about 1.1 µs per file, 13–22 ms on a
//! 20,000-file project, on every run).
//!
//! # What is kept
//!
//! For each folder the walk visited: its identity and times as `statx` reports them (device,
//! inode, modification and change time, to the nanosecond), when it was listed, and what the
//! walk takes from its entries — the names of `.env` entries, the kind of a `.git` entry, whether
//! there is a `.garuda` entry, and the names of its sub-folders. Nothing else of the folder
//! matters to the walk, and nothing here depends on the policy: the walk still judges what it
//! finds on every run.
//!
//! # When a folder's entry is believed
//!
//! Only when all of these hold (otherwise the folder is listed again, as without a cache):
//! 1. `lstat` of the folder's path now gives the same device, inode, modification time and
//!    change time. Creating, removing or renaming an entry in a folder changes both of its
//!    times; replacing the folder (or putting a link where it was) changes its inode. The
//!    change time cannot be set by a process (only the clock can), so a command that restores
//!    a folder's modification time with `utimes` still changes its change time.
//! 2. The folder's times were already [`RACY_MARGIN`] older than the moment it was listed.
//!    File times come from a clock that may lag by a tick, so an entry created in the same tick
//!    just after the listing could leave both times unchanged: such a "racily clean" folder (as
//!    git calls the same case in its index) is listed again on the next run, until it has been
//!    still for longer than the margin.
//! 3. Its time is not in the future (a clock set back makes every time suspect).
//!
//! A folder listed is opened once, without following a link in its last component, and its
//! stamp and entries both come from that descriptor: a link swapped in while the walk runs
//! (another sandbox of the same project) can make one walk list the wrong folder, as without
//! a cache, but never stores a folder's entries under another folder's stamp, which later
//! runs would believe.
//!
//! # Where it lives, and who can write it
//!
//! `$GARUDA_HOME/cache/walk/<hash of the root>` (folders mode 0700, file 0600; each folder
//! opened without following a link, the file read only if it is a regular file of this user's), holding the root
//! it was made for (a different root, a bad magic, or a short or malformed file: the cache is
//! ignored and rewritten). Garuda's home is unreadable inside every sandbox, so a command
//! cannot plant entries; a process outside the sandbox that can write the user's home can
//! already change the policy files there. Still, a name no folder listing gives (empty, `.`,
//! `..`, holding `/` or NUL, or `.git` among the folders to walk) makes the whole file
//! ignored: joined to a folder's path it would take the walk out of the project. The file is
//! replaced (temporary file, `rename`) only when a folder was listed: an unchanged project
//! writes nothing.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;

use rustix::fs::{Mode, OFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a folder must have been still before its listing is believed on a later run.
pub(crate) const RACY_MARGIN: Duration = Duration::from_secs(2);

/// The format, and what a listing keeps. Change it when either changes, the `.env` test
/// (`is_env_file_name`) included: a file written under a narrower test would hide a newly
/// matched secret in every folder that has not changed since.
const MAGIC: &[u8; 8] = b"GRDWALK1";
/// The cache's folder under Garuda's home, one component at a time.
const CACHE_FOLDER: [&str; 2] = ["cache", "walk"];
/// A larger file is not one Garuda wrote for a project it can walk in reasonable time.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The kind of an entry, as the walk needs it (`lstat`: links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    Dir,
    File,
    Symlink,
    Other,
}

impl EntryKind {
    pub(crate) fn of(kind: fs::FileType) -> EntryKind {
        if kind.is_dir() {
            EntryKind::Dir
        } else if kind.is_file() {
            EntryKind::File
        } else if kind.is_symlink() {
            EntryKind::Symlink
        } else {
            EntryKind::Other
        }
    }

    fn of_raw(kind: rustix::fs::FileType) -> EntryKind {
        use rustix::fs::FileType;
        match kind {
            FileType::Directory => EntryKind::Dir,
            FileType::RegularFile => EntryKind::File,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }

    fn code(self) -> u8 {
        match self {
            EntryKind::Dir => 1,
            EntryKind::File => 2,
            EntryKind::Symlink => 3,
            EntryKind::Other => 4,
        }
    }

    fn from_code(code: u8) -> Option<EntryKind> {
        Some(match code {
            1 => EntryKind::Dir,
            2 => EntryKind::File,
            3 => EntryKind::Symlink,
            4 => EntryKind::Other,
            _ => return None,
        })
    }
}

/// What the walk takes from one folder's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Names of entries that are `.env` files (any kind).
    pub(crate) env: Vec<OsString>,
    /// The kind of the `.git` entry, if any.
    pub(crate) git: Option<EntryKind>,
    /// There is a `.garuda` entry.
    pub(crate) garuda: bool,
    /// Names of the sub-folders to walk (every folder entry but `.git`).
    pub(crate) subdirs: Vec<OsString>,
}

/// A folder's identity and times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The later of the two times, in nanoseconds since the epoch.
    fn latest_ns(&self) -> i128 {
        let ns = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
        ns(self.mtime).max(ns(self.ctime))
    }
}

#[derive(Debug, Clone)]
struct Entry {
    stamp: Stamp,
    /// When the folder was listed, in nanoseconds since the epoch.
    listed_at: i128,
    listing: Arc<Listing>,
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The cache of one walk: read at its start, written at its end if anything was listed.
#[derive(Debug)]
pub(crate) struct WalkCache {
    home: Option<PathBuf>,
    root: PathBuf,
    old: HashMap<Vec<u8>, Entry>,
    /// `lstat` of the cached folders, taken at the open ([`stat_tree`]); a folder missing
    /// here is looked at when listed.
    stamps: HashMap<Vec<u8>, Stamp>,
    new: Vec<(Vec<u8>, Entry)>,
    listed: usize,
}

/// Below this many cached folders the tree is looked at by the calling thread alone: a second
/// thread costs about 50 µs to start, about what 40 `statx` calls cost.
const SHARED_FROM_FOLDERS: usize = 256;

/// Most sub-folders one piece of work looks at: a folder with more (the benchmark project's
/// `src/` has 2,000) is shared out in pieces.
const PIECE: usize = 128;

/// `lstat` of every folder the cache knows, walking the cached tree: each folder's
/// sub-folders are looked at relative to a handle on it (one path component per call instead
/// of the whole path, which was most of a warm walk's cost). A folder that cannot be looked at
/// is left out, and is looked at (or listed) by path when the walk reaches it.
///
/// On a tree of [`SHARED_FROM_FOLDERS`] folders or more, two threads share the calls
/// ([`TreeWork`]): on the 20,000-file project this is about 2,000 `statx` calls, 2.3 ms on one
/// core (`docs/benchmarks.md`, "The walk cache's look shared by two threads"). Which thread
/// looks at a folder changes nothing: each stamp is of one folder, taken by one call, and is
/// judged alone when the walk reaches it. A second thread that cannot be started leaves the
/// whole tree to this one.
fn stat_tree(root: &Path, old: &HashMap<Vec<u8>, Entry>) -> HashMap<Vec<u8>, Stamp> {
    let mut stamps = HashMap::with_capacity(old.len());
    let Ok(meta) = fs::symlink_metadata(root) else {
        return stamps;
    };
    stamps.insert(Vec::new(), Stamp::of(&meta));
    let work = TreeWork::new(old);
    if old.len() < SHARED_FROM_FOLDERS {
        work.run(root, &mut stamps);
        return stamps;
    }
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("garuda-walk".into())
            .spawn_scoped(scope, || {
                let mut theirs = HashMap::with_capacity(old.len() / 2);
                work.run(root, &mut theirs);
                theirs
            });
        work.run(root, &mut stamps);
        if let Ok(Ok(theirs)) = helper.map(|h| h.join()) {
            stamps.extend(theirs);
        }
    });
    stamps
}

/// Folders of the cached tree whose sub-folders are still to be looked at, shared by the
/// threads of [`stat_tree`]: each takes a piece, looks at its sub-folders, and puts back the
/// pieces of those that have sub-folders of their own. A thread stops when no piece is left
/// and no other thread is looking at one (which could put back more).
struct TreeWork<'a> {
    old: &'a HashMap<Vec<u8>, Entry>,
    state: Mutex<TreeWorkState>,
    changed: Condvar,
}

struct TreeWorkState {
    /// A folder's key and the range of its sub-folders (`Listing::subdirs`) to look at.
    pieces: Vec<(Vec<u8>, usize, usize)>,
    /// Threads looking at a piece.
    busy: usize,
}

impl<'a> TreeWork<'a> {
    /// The work of looking at the whole tree, from the root's sub-folders.
    fn new(old: &'a HashMap<Vec<u8>, Entry>) -> TreeWork<'a> {
        let mut pieces = Vec::new();
        add_pieces(old, &mut pieces, Vec::new());
        TreeWork {
            old,
            state: Mutex::new(TreeWorkState { pieces, busy: 0 }),
            changed: Condvar::new(),
        }
    }

    /// Take pieces until none is left; each folder's stamp goes to `stamps`.
    fn run(&self, root: &Path, stamps: &mut HashMap<Vec<u8>, Stamp>) {
        while let Some((key, from, to)) = self.take() {
            // Handed back when this piece ends, however it ends: a thread that stopped in the
            // middle of one must not leave the other waiting for it.
            let mut piece = PieceDone {
                work: self,
                found: Vec::new(),
            };
            piece.found = self.look(root, &key, from, to, stamps);
        }
    }

    /// Look at sub-folders `from..to` of the cached folder `key`, relative to a handle on it;
    /// returns the keys of those looked at.
    fn look(
        &self,
        root: &Path,
        key: &[u8],
        from: usize,
        to: usize,
        stamps: &mut HashMap<Vec<u8>, Stamp>,
    ) -> Vec<Vec<u8>> {
        use rustix::fs::{AtFlags, StatxFlags};
        let mut found = Vec::new();
        let names = self
            .old
            .get(key)
            .and_then(|entry| entry.listing.subdirs.get(from..to))
            .unwrap_or_default();
        let path = root.join(OsStr::from_bytes(key));
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Ok(dir) = rustix::fs::open(&path, flags, Mode::empty()) else {
            return found;
        };
        for name in names {
            let Ok(st) = rustix::fs::statx(
                &dir,
                name.as_os_str(),
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MTIME | StatxFlags::CTIME,
            ) else {
                continue;
            };
            let mut child = key.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(name.as_bytes());
            stamps.insert(
                child.clone(),
                Stamp {
                    dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
                    ino: st.stx_ino,
                    mtime: (st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
                    ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
                },
            );
            found.push(child);
        }
        found
    }

    /// The next piece, waiting while another thread may still put some back; `None` when the
    /// tree is done.
    fn take(&self) -> Option<(Vec<u8>, usize, usize)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(piece) = state.pieces.pop() {
                state.busy += 1;
                return Some(piece);
            }
            if state.busy == 0 {
                return None;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// A piece done: the pieces of the sub-folders it found go back.
    fn finish(&self, found: Vec<Vec<u8>>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for child in found {
            add_pieces(self.old, &mut state.pieces, child);
        }
        state.busy -= 1;
        self.changed.notify_all();
    }
}

/// A piece being looked at; dropping it hands what it found back to the [`TreeWork`].
struct PieceDone<'w, 'a> {
    work: &'w TreeWork<'a>,
    found: Vec<Vec<u8>>,
}

impl Drop for PieceDone<'_, '_> {
    fn drop(&mut self) {
        self.work.finish(std::mem::take(&mut self.found));
    }
}

/// The pieces of the cached folder `key`'s sub-folders, [`PIECE`] at a time (none when the
/// cache does not know it or it has none).
fn add_pieces(
    old: &HashMap<Vec<u8>, Entry>,
    pieces: &mut Vec<(Vec<u8>, usize, usize)>,
    key: Vec<u8>,
) {
    let Some(entry) = old.get(&key) else { return };
    let n = entry.listing.subdirs.len();
    let mut from = 0;
    while from < n {
        let to = (from + PIECE).min(n);
        pieces.push((key.clone(), from, to));
        from = to;
    }
}

impl WalkCache {
    /// The cache for walks of `root` kept under Garuda's home `home` (`None`: no cache, every
    /// folder is listed).
    pub(crate) fn open(home: Option<&Path>, root: &Path) -> WalkCache {
        let home = home.map(Path::to_path_buf);
        let old: HashMap<Vec<u8>, Entry> = home
            .as_deref()
            .and_then(|h| read(h, &file_name(root), root))
            .unwrap_or_default();
        let stamps = stat_tree(root, &old);
        WalkCache {
            home,
            root: root.to_path_buf(),
            old,
            stamps,
            new: Vec::new(),
            listed: 0,
        }
    }

    /// Folders listed (not taken from the cache) so far.
    #[cfg(test)]
    pub(crate) fn listed(&self) -> usize {
        self.listed
    }

    /// What the walk needs of the folder `dir` (under the root): from the cache when its entry
    /// is believed (see the module documentation), else by listing it. `classify` turns an
    /// entry's name into whether it is a `.env` entry.
    pub(crate) fn list(
        &mut self,
        dir: &Path,
        is_env: impl Fn(&OsStr) -> bool,
    ) -> std::io::Result<Arc<Listing>> {
        let key = cache_key(&self.root, dir).to_vec();
        // Taken before the listing: an entry made after this instant changes the folder's
        // times to at least this (less a clock tick, which the margin covers).
        let listed_at = now_ns();
        if let Some(old) = self.old.remove(&key) {
            // A folder the cache does not know is not looked at twice: the listing below
            // takes its stamp.
            let stamp = match self.stamps.remove(&key) {
                Some(stamp) => stamp,
                None => Stamp::of(&fs::symlink_metadata(dir)?),
            };
            let still = stamp.latest_ns() + RACY_MARGIN.as_nanos() as i128 <= old.listed_at;
            if old.stamp == stamp && still && stamp.latest_ns() <= listed_at {
                let listing = Arc::clone(&old.listing);
                self.new.push((key, old));
                return Ok(listing);
            }
        }
        let (stamp, listing) = list_folder(dir, &is_env)?;
        let listing = Arc::new(listing);
        self.listed += 1;
        self.new.push((
            key,
            Entry {
                stamp,
                listed_at,
                listing: Arc::clone(&listing),
            },
        ));
        Ok(listing)
    }

    /// Writes the cache if a folder was listed (best effort: a cache that cannot be written
    /// only makes the next walk list everything again).
    pub(crate) fn save(self) {
        let Some(home) = &self.home else { return };
        if self.listed == 0 && self.old.is_empty() {
            return;
        }
        let _ = write(home, &file_name(&self.root), &self.root, &self.new);
    }
}

/// The cache's key of `dir`: its path below `root`, as bytes (empty for the root itself).
/// The walk makes every folder's path by joining names to the root, so the bytes after the
/// root's and a `/` are the key; comparing bytes costs a fraction of `Path::strip_prefix`'s
/// walk over components (about 0.3 ms on the 20,000-file project). A path of another shape
/// falls back to that walk.
fn cache_key<'d>(root: &Path, dir: &'d Path) -> &'d [u8] {
    let (root_bytes, dir_bytes) = (root.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if dir_bytes == root_bytes {
        return &[];
    }
    match dir_bytes.strip_prefix(root_bytes) {
        Some([b'/', below @ ..])
            if !root_bytes.ends_with(b"/") && below.split(|b| *b == b'/').all(plain_name) =>
        {
            below
        }
        _ => dir.strip_prefix(root).unwrap_or(dir).as_os_str().as_bytes(),
    }
}

fn file_name(root: &Path) -> String {
    // FNV-1a: stable across builds (unlike the standard hasher); the file also holds the root,
    // so a collision is only a miss.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in root.as_os_str().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The folder's stamp and what the walk takes from its entries, both from one descriptor,
/// taken in that order (the stamp kept is never newer than what was listed). One descriptor,
/// because the path is the project's, which a command running in another sandbox at the same
/// time can change: resolved twice (an `lstat`, then a listing), a link swapped in on the way
/// between the two would store one folder's entries under another folder's stamp, and as
/// that other folder does not change, every later run would believe them. The last component
/// is opened without following a link: the walk only reaches folders its parent's listing
/// showed as folders, so a link there now is such a swap, and an error (the walk stops).
fn list_folder(dir: &Path, is_env: &impl Fn(&OsStr) -> bool) -> std::io::Result<(Stamp, Listing)> {
    use rustix::fs::{AtFlags, FileType};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let folder = fs::File::from(rustix::fs::open(dir, flags, Mode::empty())?);
    let stamp = Stamp::of(&folder.metadata()?);
    let mut entries = rustix::fs::Dir::new(folder)?;
    let mut listing = Listing::default();
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        // Links are not followed: a link to `/` or to the home directory is never walked.
        let kind = match entry.file_type() {
            // The filesystem does not say in the listing: ask, still without following.
            FileType::Unknown => FileType::from_raw_mode(
                rustix::fs::statat(entries.fd()?, name, AtFlags::SYMLINK_NOFOLLOW)?.st_mode,
            ),
            known => known,
        };
        let kind = EntryKind::of_raw(kind);
        let name = name.to_os_string();
        if is_env(&name) {
            listing.env.push(name.clone());
        }
        if name == ".git" {
            listing.git = Some(kind);
            continue;
        }
        if name == ".garuda" {
            listing.garuda = true;
        }
        if kind == EntryKind::Dir {
            listing.subdirs.push(name);
        }
    }
    Ok((stamp, listing))
}

// ---------------------------------------------------------------------------------------------
// The file: MAGIC, the root, then one record per folder. Integers little-endian; byte strings
// as a u32 length and the bytes.

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_names(out: &mut Vec<u8>, names: &[OsString]) {
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    for name in names {
        put_bytes(out, name.as_bytes());
    }
}

fn encode(root: &Path, entries: &[(Vec<u8>, Entry)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + entries.len() * 96);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, root.as_os_str().as_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (key, entry) in entries {
        put_bytes(&mut out, key);
        let s = &entry.stamp;
        for v in [s.dev, s.ino] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&entry.listed_at.to_le_bytes());
        let l = &entry.listing;
        out.push(l.git.map_or(0, EntryKind::code));
        out.push(u8::from(l.garuda));
        put_names(&mut out, &l.env);
        put_names(&mut out, &l.subdirs);
    }
    out
}

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.data.len() < n {
            return None;
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn i128(&mut self) -> Option<i128> {
        Some(i128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        self.take(n).map(<[u8]>::to_vec)
    }

    fn names(&mut self) -> Option<Vec<OsString>> {
        let n = self.u32()? as usize;
        // Each name takes at least its 4-byte length: a count the rest cannot hold is a bad
        // file, not an allocation.
        if n > self.data.len() / 4 {
            return None;
        }
        (0..n)
            .map(|_| {
                let name = self.bytes()?;
                plain_name(&name).then(|| OsString::from_vec(name))
            })
            .collect()
    }
}

/// A name as a folder listing gives it: not empty, not `.` or `..`, without `/` or NUL. The
/// walk joins cached names to the folder's path: `..`, `../x` or `/etc` there would take it
/// out of the project, so a file holding such a name is not one Garuda wrote, and is ignored.
fn plain_name(name: &[u8]) -> bool {
    !matches!(name, b"" | b"." | b"..") && !name.iter().any(|b| matches!(b, b'/' | 0))
}

fn decode(data: &[u8], root: &Path) -> Option<HashMap<Vec<u8>, Entry>> {
    let mut r = Reader { data };
    if r.take(MAGIC.len())? != MAGIC || r.bytes()? != root.as_os_str().as_bytes() {
        return None;
    }
    let count = r.u32()? as usize;
    if count > data.len() / 64 {
        return None;
    }
    let mut entries = HashMap::with_capacity(count);
    for _ in 0..count {
        let key = r.bytes()?;
        let stamp = Stamp {
            dev: r.u64()?,
            ino: r.u64()?,
            mtime: (r.i64()?, r.i64()?),
            ctime: (r.i64()?, r.i64()?),
        };
        let listed_at = r.i128()?;
        let git = match r.u8()? {
            0 => None,
            code => Some(EntryKind::from_code(code)?),
        };
        let garuda = match r.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let env = r.names()?;
        let subdirs = r.names()?;
        // `list_folder` never counts `.git` among the folders to walk: the walk must not enter
        // one (it judges `.git` entries on their own).
        if subdirs.iter().any(|name| name == ".git") {
            return None;
        }
        entries.insert(
            key,
            Entry {
                stamp,
                listed_at,
                listing: Arc::new(Listing {
                    env,
                    git,
                    garuda,
                    subdirs,
                }),
            },
        );
    }
    r.data.is_empty().then_some(entries)
}

/// The folder `cache/walk` under Garuda's home, opened one component at a time without
/// following a link (a link planted at `cache` or `walk` must not send the cache's writes
/// elsewhere); with `create`, missing folders are made (mode 0700).
fn cache_folder(home: &Path, create: bool) -> Option<OwnedFd> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(home, dir_flags, Mode::empty()).ok()?;
    for name in CACHE_FOLDER {
        if create {
            // EEXIST (a folder, or anything else, which the open below then refuses).
            let _ = rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700));
        }
        dir = rustix::fs::openat(&dir, name, dir_flags | OFlags::NOFOLLOW, Mode::empty()).ok()?;
    }
    Some(dir)
}

fn read(home: &Path, name: &str, root: &Path) -> Option<HashMap<Vec<u8>, Entry>> {
    let dir = cache_folder(home, false)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let mut f = fs::File::from(rustix::fs::openat(&dir, name, flags, Mode::empty()).ok()?);
    let meta = f.metadata().ok()?;
    // Only a regular file of this user's: anything else is not one Garuda wrote.
    if !meta.is_file()
        || meta.len() > MAX_FILE_BYTES
        || meta.uid() != rustix::process::geteuid().as_raw()
    {
        return None;
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    f.read_to_end(&mut data).ok()?;
    decode(&data, root)
}

fn write(
    home: &Path,
    name: &str,
    root: &Path,
    entries: &[(Vec<u8>, Entry)],
) -> std::io::Result<()> {
    let dir = cache_folder(home, true)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    let tmp = format!(".{name}.{}.tmp", std::process::id());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut f = fs::File::from(rustix::fs::openat(
        &dir,
        tmp.as_str(),
        flags,
        Mode::from_raw_mode(0o600),
    )?);
    let written = f.write_all(&encode(root, entries)).and_then(|()| {
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name).map_err(std::io::Error::from)
    });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    written
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn is_env(name: &OsStr) -> bool {
        name.as_bytes().starts_with(b".env")
    }

    /// Sets a folder's times into the past, so that its listing is believed next time
    /// (without waiting out the racy margin). The change time cannot be set: the test makes
    /// the cache's own listing time later instead.
    fn age(home: &Path, root: &Path) {
        plant(home, root, |entries| {
            for e in entries.values_mut() {
                e.listed_at += 10 * 1_000_000_000;
            }
        });
    }

    /// A cache folder (a stand-in for Garuda's home) and a project root (canonical).
    struct Scene {
        cache: tempfile::TempDir,
        _project: tempfile::TempDir,
        root: PathBuf,
    }

    fn scene() -> Scene {
        let cache = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        Scene {
            cache,
            _project: project,
            root,
        }
    }

    /// The cache file's entries for `root`, changed by `change`, written back.
    fn plant(home: &Path, root: &Path, change: impl Fn(&mut HashMap<Vec<u8>, Entry>)) {
        let mut entries = read(home, &file_name(root), root).unwrap();
        change(&mut entries);
        let entries: Vec<_> = entries.into_iter().collect();
        write(home, &file_name(root), root, &entries).unwrap();
    }

    fn walk(cache_dir: &Path, root: &Path) -> (Vec<Listing>, usize) {
        let mut cache = WalkCache::open(Some(cache_dir), root);
        let mut pending = vec![root.to_path_buf()];
        let mut out = Vec::new();
        while let Some(dir) = pending.pop() {
            let l = cache.list(&dir, is_env).unwrap();
            pending.extend(l.subdirs.iter().map(|s| dir.join(s)));
            out.push((*l).clone());
        }
        let listed = cache.listed();
        cache.save();
        (out, listed)
    }

    #[test]
    fn an_unchanged_tree_is_taken_from_the_cache_and_a_new_secret_is_seen() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/.env"), "K=v").unwrap();
        let (first, listed) = walk(cache.path(), root);
        assert_eq!(listed, 3);
        // Just listed: still racy, so listed again.
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 3, "racily clean folders are listed again");
        age(cache.path(), root);
        let (second, listed) = walk(cache.path(), root);
        assert_eq!(listed, 0, "an aged, unchanged tree is read from the cache");
        assert_eq!(first, second);
        // A secret created since: its folder's times changed, so it is listed again.
        fs::write(root.join("a/b/.env.local"), "K=v").unwrap();
        let (third, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1);
        assert!(third
            .iter()
            .any(|l| l.env == vec![OsString::from(".env.local")]));
    }

    /// A tree large enough for two threads, with a folder of more sub-folders than one piece
    /// holds: every folder gets the stamp a plain `lstat` gives, none is lost between the
    /// threads (a stamp missing would make the walk list that folder again), and a secret
    /// made deep in it is still seen. (Which thread looks at which piece is the scheduler's
    /// choice; the stop rule is tested on its own below.)
    #[test]
    fn a_large_tree_is_looked_at_by_two_threads_alike() {
        let Scene { cache, root, .. } = &scene();
        let wide = 2 * PIECE + 44;
        for i in 0..wide {
            fs::create_dir_all(root.join(format!("wide/f{i:03}"))).unwrap();
            if i % 10 == 0 {
                fs::create_dir_all(root.join(format!("wide/f{i:03}/x/y"))).unwrap();
            }
        }
        fs::create_dir_all(root.join("other/z")).unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        let old = read(cache.path(), &file_name(root), root).unwrap();
        assert!(old.len() >= SHARED_FROM_FOLDERS, "{} folders", old.len());
        let stamps = stat_tree(root, &old);
        assert_eq!(stamps.len(), old.len());
        for key in old.keys() {
            let meta = fs::symlink_metadata(root.join(OsStr::from_bytes(key))).unwrap();
            assert_eq!(stamps.get(key), Some(&Stamp::of(&meta)), "{key:?}");
        }
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 0, "an aged, unchanged tree is read from the cache");
        fs::write(root.join("wide/f250/x/y/.env"), "K=v").unwrap();
        let (after, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1);
        assert!(after.iter().any(|l| l.env == vec![OsString::from(".env")]));
    }

    /// The key of a folder is what `Path::strip_prefix` gives, for the paths the walk makes and
    /// for others.
    #[test]
    fn a_folder_key_is_its_path_below_the_root() {
        let cases: &[(&str, &str)] = &[
            ("/p", "/p"),
            ("/p", "/p/a"),
            ("/p", "/p/a/b c/.d"),
            ("/p", "/pa/b"),
            ("/p/", "/p/a"),
            ("/", "/a/b"),
            ("/p", "/p//a"),
            ("/p", "/p/a//b"),
            ("/p", "/p/a/"),
            ("/p", "/p/./a"),
            ("/p", "/p/a/./b"),
            ("/p", "/p/a/."),
            ("/p", "/p/a/../b"),
            ("/p", "/q/a"),
        ];
        for (root, dir) in cases {
            let (root, dir) = (Path::new(root), Path::new(dir));
            let slow = dir.strip_prefix(root).unwrap_or(dir).as_os_str().as_bytes();
            assert_eq!(cache_key(root, dir), slow, "{root:?} {dir:?}");
        }
    }

    /// The threads' stop rule: a thread with no piece left waits while another is still at
    /// one (it may put back more), and looks at what that one puts back.
    #[test]
    fn a_thread_out_of_pieces_waits_for_the_pieces_another_puts_back() {
        let Scene { cache, root, .. } = &scene();
        for i in 0..PIECE + 3 {
            fs::create_dir_all(root.join(format!("a/f{i:03}/x"))).unwrap();
        }
        walk(cache.path(), root);
        let old = read(cache.path(), &file_name(root), root).unwrap();
        let work = TreeWork::new(&old);
        // This thread holds the only piece there is at first: the root's sub-folders.
        let (key, from, to) = work.take().unwrap();
        assert!(key.is_empty());
        let mut mine = HashMap::new();
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let mut theirs = HashMap::new();
                work.run(root, &mut theirs);
                theirs
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !other.is_finished(),
                "the other thread stopped while a piece was still out"
            );
            let found = work.look(root, &key, from, to, &mut mine);
            work.finish(found);
            let theirs = other.join().unwrap();
            assert_eq!(mine.keys().collect::<Vec<_>>(), vec![&b"a".to_vec()]);
            assert_eq!(theirs.len(), old.len() - 2, "all but the root and `a`");
            assert!(theirs.contains_key(b"a/f000/x".as_slice()));
        });
    }

    #[test]
    fn a_folder_swapped_for_a_link_is_listed_again() {
        let Scene { cache, root, .. } = &scene();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.join("a")).unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        fs::remove_dir(root.join("a")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.join("a")).unwrap();
        let (listings, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1, "the root changed and is listed again");
        assert!(
            listings[0].subdirs.is_empty(),
            "a link is not a folder to walk"
        );
    }

    #[test]
    fn a_cache_for_another_root_or_a_bad_file_is_ignored() {
        let Scene { cache, root, .. } = &scene();
        walk(cache.path(), root);
        age(cache.path(), root);
        let file = cache.path().join("cache/walk").join(file_name(root));
        let good = fs::read(&file).unwrap();
        assert!(decode(&good, root).is_some());
        assert!(decode(&good, Path::new("/elsewhere")).is_none());
        for cut in 0..good.len() {
            assert!(decode(&good[..cut], root).is_none(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer, root).is_none());
        // Counts the rest of the file cannot hold are refused before anything is allocated:
        // the number of folders (after the root), and the last list of names (the file's last
        // four bytes: the one folder's sub-folders).
        let count_at = MAGIC.len() + 4 + root.as_os_str().len();
        for at in [count_at, good.len() - 4] {
            let mut huge = good.clone();
            huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(decode(&huge, root).is_none(), "count at {at}");
        }
        fs::write(&file, b"not a cache").unwrap();
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1);
    }

    #[test]
    fn a_link_at_the_cache_folder_is_not_followed() {
        let Scene {
            cache: home, root, ..
        } = &scene();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), home.path().join("cache")).unwrap();
        walk(home.path(), root);
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        // Control: with a real folder there, the cache is written.
        fs::remove_file(home.path().join("cache")).unwrap();
        walk(home.path(), root);
        assert_eq!(
            fs::read_dir(home.path().join("cache/walk"))
                .unwrap()
                .count(),
            1
        );
    }

    /// Hostile bytes in the cache file: names that would take the walk out of the project
    /// (the walk joins cached names to the folder's path) make the whole file ignored.
    #[test]
    fn a_cached_name_that_leads_out_of_the_project_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let cache = base.join("home");
        let root = base.join("project");
        let outside = base.join("outside");
        fs::create_dir_all(root.join("inside")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::create_dir_all(&cache).unwrap();
        fs::write(outside.join(".env"), "K=v").unwrap();
        walk(&cache, &root);
        age(&cache, &root);
        let outside_name = outside.as_os_str().as_bytes().to_vec();
        let hostile: [(&str, &[u8]); 9] = [
            ("subdir", b".."),
            ("subdir", b"../outside"),
            ("subdir", &outside_name),
            ("subdir", b"inside/../../outside"),
            ("subdir", b""),
            ("subdir", b"."),
            ("subdir", b"ins\0ide"),
            ("subdir", b".git"),
            ("env", b"../outside/.env"),
        ];
        for (field, name) in hostile {
            plant(&cache, &root, |entries| {
                let top = entries.get_mut(&Vec::new()).unwrap();
                let mut listing = (*top.listing).clone();
                let name = OsString::from_vec(name.to_vec());
                match field {
                    "subdir" => listing.subdirs.push(name),
                    _ => listing.env.push(name),
                }
                top.listing = Arc::new(listing);
            });
            assert!(
                read(&cache, &file_name(&root), &root).is_none(),
                "{field} {name:?} decoded"
            );
            let (listings, listed) = walk(&cache, &root);
            assert_eq!(listed, 2, "{field} {name:?}: the project is listed again");
            assert_eq!(listings[0].subdirs, [OsString::from("inside")]);
            assert!(listings.iter().all(|l| l.env.is_empty()), "{listings:?}");
            age(&cache, &root);
        }
        // Negative control: the same planting with a plain name is believed (the planted
        // entry keeps the folder's real stamp), so only the name check refuses the ones above.
        plant(&cache, &root, |entries| {
            let top = entries.get_mut(&Vec::new()).unwrap();
            let mut listing = (*top.listing).clone();
            listing.env.push(".env.planted".into());
            top.listing = Arc::new(listing);
        });
        let (listings, listed) = walk(&cache, &root);
        assert_eq!(listed, 0);
        assert_eq!(listings[0].env, [OsString::from(".env.planted")]);
    }

    /// A folder swapped for a link after its parent was listed (a command in another sandbox of
    /// the same project, racing this walk) is not listed through the link: the walk stops.
    #[test]
    fn a_folder_swapped_for_a_link_during_the_walk_is_not_listed_through_it() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(root.join("decoy")).unwrap();
        fs::write(root.join("decoy/listed-through-the-link"), "").unwrap();
        let mut walk_cache = WalkCache::open(Some(cache.path()), root);
        let top = walk_cache.list(root, is_env).unwrap();
        assert!(top.subdirs.contains(&OsString::from("a")));
        fs::remove_dir(root.join("a")).unwrap();
        std::os::unix::fs::symlink("decoy", root.join("a")).unwrap();
        let refused = walk_cache.list(&root.join("a"), is_env).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ENOTDIR), "{refused}");
        // Negative control: listing by path, as the walk did before, goes through the link.
        let through: Vec<_> = fs::read_dir(root.join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(through, [OsString::from("listed-through-the-link")]);
    }

    /// Every kind of entry is classified without following links, also where the listing does
    /// not say (the `statat` fallback is what a filesystem without `d_type` takes).
    #[test]
    fn entries_are_classified_without_following_links() {
        let Scene { root, .. } = &scene();
        fs::create_dir_all(root.join("d/.git")).unwrap();
        fs::write(root.join("d/.env"), "").unwrap();
        fs::create_dir_all(root.join("d/.garuda")).unwrap();
        fs::create_dir_all(root.join("d/sub")).unwrap();
        std::os::unix::fs::symlink("/", root.join("d/to-root")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("d/.env.link")).unwrap();
        let (stamp, mut listing) = list_folder(&root.join("d"), &is_env).unwrap();
        assert_eq!(
            stamp,
            Stamp::of(&fs::symlink_metadata(root.join("d")).unwrap())
        );
        listing.env.sort();
        listing.subdirs.sort();
        assert_eq!(
            listing,
            Listing {
                env: vec![".env".into(), ".env.link".into()],
                git: Some(EntryKind::Dir),
                garuda: true,
                subdirs: vec![".garuda".into(), "sub".into()],
            }
        );
    }

    /// A folder time in the future (a clock set back since, or `utimes`) makes the entry
    /// suspect: listed again however long ago the listing was.
    #[test]
    fn a_folder_time_in_the_future_is_listed_again() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a")).unwrap();
        let hour = Duration::from_secs(3600);
        fs::File::open(root.join("a"))
            .unwrap()
            .set_modified(SystemTime::now() + hour)
            .unwrap();
        walk(cache.path(), root);
        // Listed two hours "later": without the future check the hour-ahead folder would count
        // as still, and be believed.
        plant(cache.path(), root, |entries| {
            for e in entries.values_mut() {
                e.listed_at += 2 * 3600 * 1_000_000_000;
            }
        });
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1, "the folder with a future time is listed again");
        // Negative control: its time back in the past, the same aging makes it believed.
        fs::File::open(root.join("a"))
            .unwrap()
            .set_modified(SystemTime::now() - hour)
            .unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 0);
    }
}
