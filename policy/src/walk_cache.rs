//! What the project walk learned about each folder, kept between runs so that a run lists only
//! the folders that changed (issue 12: the walk cost about 1.1 µs per file, 13–22 ms on a
//! 20,000-file project, on every run), and the walk itself ([`walk`]).
//!
//! # What is kept
//!
//! For each folder the walk visited: its identity and times as `statx` reports them (device,
//! inode, modification and change time, to the nanosecond), when it was listed, and what the
//! walk takes from its entries — the names of `.env` entries, the kind of a `.git` entry, whether
//! there is a `.garuda` entry, and its sub-folders (as records of their own). Nothing else of
//! the folder matters to the walk, and nothing here depends on the policy: the walk still judges
//! what it finds on every run.
//!
//! # When a folder's entry is believed
//!
//! Only when all of these hold (otherwise the folder is listed again, as without a cache):
//! 1. `lstat` of the folder now gives the same device, inode, modification time and change
//!    time. Creating, removing or renaming an entry in a folder changes both of its times;
//!    replacing the folder (or putting a link where it was) changes its inode. The change time
//!    cannot be set by a process (only the clock can), so a command that restores a folder's
//!    modification time with `utimes` still changes its change time.
//! 2. The folder's times were already [`RACY_MARGIN`] older than the moment it was listed.
//!    File times come from a clock that may lag by a tick, so an entry created in the same tick
//!    just after the listing could leave both times unchanged: such a "racily clean" folder (as
//!    git calls the same case in its index) is listed again on the next run, until it has been
//!    still for longer than the margin.
//! 3. Its times are not in the future (a clock set back makes every time suspect).
//!
//! A folder listed is opened once, without following a link in its last component, and its
//! stamp and entries both come from that descriptor: a link swapped in while the walk runs
//! (another sandbox of the same project) can make one walk list the wrong folder, as without
//! a cache, but never stores a folder's entries under another folder's stamp, which later
//! runs would believe.
//!
//! # The file, and why it is laid out so
//!
//! A run on an unchanged project does one `statx` per folder (and, for each folder with
//! sub-folders, one `O_PATH` handle to look at them from): no hashing, no record built per
//! folder, no decoding of names into strings (on the 20,000-file project the
//! hash maps and strings of an earlier layout cost more than the `statx` calls themselves).
//! So the file is used where it lies, read into one buffer:
//!
//! ```text
//! MAGIC  root (u32 length, bytes)  count (u32)  strings length (u32)
//! count records of RECORD bytes, in breadth-first order, each folder's sub-folders sorted by name
//! strings: the folders' names and their `.env` names (each a u16 length and the bytes)
//! ```
//!
//! Breadth-first order puts a folder's sub-folders side by side, so a record names them by a
//! count alone (the first is found by adding up the counts before it); sorted, a sub-folder of
//! a folder that changed is found again by a binary search of its name. The records are checked
//! once when read (every offset inside the file, every name plain, sub-folders strictly sorted,
//! the counts making exactly one tree); a file that fails any check is ignored as a whole.
//!
//! # Where it lives, and who can write it
//!
//! `$GARUDA_HOME/cache/walk/<hash of the root>` (folders mode 0700, file 0600; each folder
//! opened without following a link, the file read only if it is a regular file of this
//! user's), holding the root it was made for (a different root, a bad magic, or a short or
//! malformed file: the cache is ignored and rewritten). Garuda's home is unreadable inside
//! every sandbox, so a command cannot plant entries; a process outside the sandbox that can
//! write the user's home can already change the policy files there. Still, a name no folder
//! listing gives (empty, `.`, `..`, holding `/` or NUL, or `.git` among the folders to walk)
//! makes the whole file ignored: joined to a folder's path it would take the walk out of the
//! project. The file is replaced (temporary file, `rename`) only when a folder was listed: an
//! unchanged project writes nothing.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read as _, Write as _};
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{Mode, OFlags};

/// How long a folder must have been still before its listing is believed on a later run.
pub(crate) const RACY_MARGIN: Duration = Duration::from_secs(2);

/// The format, and what a listing keeps. Change it when either changes, the `.env` test
/// (`is_env_file_name`) included: a file written under a narrower test would hide a newly
/// matched secret in every folder that has not changed since.
const MAGIC: &[u8; 8] = b"GRDWALK2";
/// The cache's folder under Garuda's home, one component at a time.
const CACHE_FOLDER: [&str; 2] = ["cache", "walk"];
/// A larger file is not one Garuda wrote for a project it can walk in reasonable time.
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Bytes of one folder's record; the offsets of its fields (little-endian) are in [`at`].
const RECORD: usize = 68;

/// Where each field of a record starts.
mod at {
    /// u64: the folder's device.
    pub(super) const DEV: usize = 0;
    /// u64: its inode.
    pub(super) const INO: usize = 8;
    /// i64 seconds and u32 nanoseconds of its modification time.
    pub(super) const MTIME_S: usize = 16;
    pub(super) const MTIME_NS: usize = 32;
    /// i64 seconds and u32 nanoseconds of its change time.
    pub(super) const CTIME_S: usize = 24;
    pub(super) const CTIME_NS: usize = 36;
    /// i64: when it was listed, nanoseconds since the epoch.
    pub(super) const LISTED_AT: usize = 40;
    /// u32: where its name starts in the strings (the root's name is empty).
    pub(super) const NAME: usize = 48;
    /// u32: where its `.env` names start in the strings.
    pub(super) const ENV: usize = 52;
    /// u32: how many sub-folders it has (their records follow those of the folders before).
    pub(super) const CHILDREN: usize = 56;
    /// u32: how many `.env` names it has.
    pub(super) const ENV_COUNT: usize = 60;
    /// u16: its name's length.
    pub(super) const NAME_LEN: usize = 64;
    /// u8: the kind of its `.git` entry (0: none).
    pub(super) const GIT: usize = 66;
    /// u8: 1 when it has a `.garuda` entry.
    pub(super) const GARUDA: usize = 67;
}

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

/// What the walk takes from one folder's entries, listed now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Names of entries that are `.env` files (any kind), sorted.
    pub(crate) env: Vec<OsString>,
    /// The kind of the `.git` entry, if any.
    pub(crate) git: Option<EntryKind>,
    /// There is a `.garuda` entry.
    pub(crate) garuda: bool,
    /// Names of the sub-folders to walk (every folder entry but `.git`), sorted.
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

    fn of_statx(st: &rustix::fs::Statx) -> Stamp {
        Stamp {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mtime: (st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
            ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
        }
    }

    /// The later of the two times, in nanoseconds since the epoch.
    fn latest_ns(&self) -> i128 {
        let ns = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
        ns(self.mtime).max(ns(self.ctime))
    }

    /// Whether a folder with this stamp now, recorded with `then` when listed at `listed_at`,
    /// is believed (the module documentation's three conditions; `now` is taken before the
    /// stamps are, which makes the future check stricter, never weaker).
    fn believes(&self, then: &Stamp, listed_at: i128, now: i128) -> bool {
        let latest = self.latest_ns();
        self == then && latest + RACY_MARGIN.as_nanos() as i128 <= listed_at && latest <= now
    }
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// `N` bytes at `at`, zeros where the slice is too short (never, once a file is checked).
fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes
        .get(at..at.saturating_add(N))
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; N])
}

fn u16_at(bytes: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes(le(bytes, at)))
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(le(bytes, at)) as usize
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(le(bytes, at))
}

/// A name as a folder listing gives it: not empty, not `.` or `..`, without `/` or NUL. The
/// walk joins cached names to the folder's path: `..`, `../x` or `/etc` there would take it
/// out of the project, so a file holding such a name is not one Garuda wrote, and is ignored.
fn plain_name(name: &[u8]) -> bool {
    !matches!(name, b"" | b"." | b"..") && !name.iter().any(|b| matches!(b, b'/' | 0))
}

/// The cache file as read, checked: each folder's record, used where it lies.
#[derive(Debug)]
struct Tree {
    data: Vec<u8>,
    /// Where the records start, and the strings.
    records: usize,
    strings: usize,
    count: usize,
    /// Each record's first sub-folder (its sub-folders are the next [`at::CHILDREN`] records
    /// from there) and its folder (the root's: itself).
    first_child: Vec<u32>,
    parent: Vec<u32>,
}

impl Tree {
    fn record(&self, i: usize) -> &[u8] {
        let from = self.records + i * RECORD;
        self.data.get(from..from + RECORD).unwrap_or_default()
    }

    fn stamp(&self, i: usize) -> Stamp {
        let r = self.record(i);
        Stamp {
            dev: u64::from_le_bytes(le(r, at::DEV)),
            ino: u64::from_le_bytes(le(r, at::INO)),
            mtime: (i64_at(r, at::MTIME_S), u32_at(r, at::MTIME_NS) as i64),
            ctime: (i64_at(r, at::CTIME_S), u32_at(r, at::CTIME_NS) as i64),
        }
    }

    fn listed_at(&self, i: usize) -> i128 {
        i128::from(i64_at(self.record(i), at::LISTED_AT))
    }

    /// `len` bytes of the strings from `off` (empty when out of range: never, once checked).
    fn string(&self, off: usize, len: usize) -> &[u8] {
        let from = self.strings.saturating_add(off);
        self.data
            .get(from..from.saturating_add(len))
            .unwrap_or_default()
    }

    fn name(&self, i: usize) -> &[u8] {
        let r = self.record(i);
        self.string(u32_at(r, at::NAME), u16_at(r, at::NAME_LEN))
    }

    fn git(&self, i: usize) -> Option<EntryKind> {
        EntryKind::from_code(self.record(i)[at::GIT])
    }

    fn garuda(&self, i: usize) -> bool {
        self.record(i)[at::GARUDA] == 1
    }

    /// The `.env` names of folder `i`, as they lie in the strings.
    fn env(&self, i: usize) -> Packed<'_> {
        let r = self.record(i);
        let from = self.strings.saturating_add(u32_at(r, at::ENV));
        Packed {
            bytes: self.data.get(from..).unwrap_or_default(),
            left: u32_at(r, at::ENV_COUNT),
        }
    }

    fn children(&self, i: usize) -> Range<usize> {
        let first = self.first_child.get(i).map_or(0, |f| *f as usize);
        first..first + u32_at(self.record(i), at::CHILDREN)
    }

    /// The sub-folder of `i` called `name` (sub-folders are sorted by name).
    fn child_named(&self, i: usize, name: &[u8]) -> Option<usize> {
        let range = self.children(i);
        let mut span = range.clone();
        while !span.is_empty() {
            let mid = span.start + span.len() / 2;
            match self.name(mid).cmp(name) {
                std::cmp::Ordering::Equal => return Some(mid),
                std::cmp::Ordering::Less => span.start = mid + 1,
                std::cmp::Ordering::Greater => span.end = mid,
            }
        }
        None
    }

    /// Folder `i`'s path: the root's and the names of the folders down to it.
    fn path(&self, root: &Path, i: usize) -> Vec<u8> {
        let mut chain = Vec::new();
        let mut at = i;
        while at != 0 && chain.len() < self.count {
            chain.push(at);
            at = self.parent.get(at).map_or(0, |p| *p as usize);
        }
        let mut path = root.as_os_str().as_bytes().to_vec();
        for folder in chain.into_iter().rev() {
            push_name(&mut path, self.name(folder));
        }
        path
    }
}

/// `.env` names as they lie in the strings: each a u16 length and the bytes.
#[derive(Debug, Clone)]
struct Packed<'a> {
    bytes: &'a [u8],
    left: usize,
}

impl<'a> Iterator for Packed<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let len = u16_at(self.bytes, 0);
        let name = self.bytes.get(2..2 + len)?;
        self.bytes = self.bytes.get(2 + len..).unwrap_or_default();
        self.left -= 1;
        Some(name)
    }
}

/// Appends `/name` to a path (no second `/` after a root of `/`).
fn push_name(path: &mut Vec<u8>, name: &[u8]) {
    if !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

/// What [`walk`] shows of one folder: from the cache or listed now, the same either way.
pub(crate) struct Folder<'a> {
    /// The kind of the `.git` entry, if any.
    pub(crate) git: Option<EntryKind>,
    /// There is a `.garuda` entry.
    pub(crate) garuda: bool,
    from: FolderFrom<'a>,
}

enum FolderFrom<'a> {
    Cache(&'a Tree, usize),
    Listing(&'a Listing),
}

impl<'a> Folder<'a> {
    /// Names of its entries that are `.env` files (any kind).
    pub(crate) fn env(&self) -> impl Iterator<Item = &'a OsStr> + 'a {
        let (packed, listed) = match self.from {
            FolderFrom::Cache(tree, i) => (Some(tree.env(i)), None),
            FolderFrom::Listing(listing) => (None, Some(listing.env.iter())),
        };
        let packed = packed.into_iter().flatten().map(OsStr::from_bytes);
        packed.chain(listed.into_iter().flatten().map(OsString::as_os_str))
    }

    /// Names of its sub-folders, sorted.
    #[cfg(test)]
    fn subdirs(&self) -> Vec<OsString> {
        match self.from {
            FolderFrom::Cache(tree, i) => tree
                .children(i)
                .map(|c| OsStr::from_bytes(tree.name(c)).to_os_string())
                .collect(),
            FolderFrom::Listing(listing) => listing.subdirs.clone(),
        }
    }
}

/// What a walk did.
#[derive(Debug)]
pub(crate) struct Walked {
    /// Folders listed (not taken from the cache).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) listed: usize,
}

/// A folder the walk reached, for the file written after it.
struct Node {
    /// The node of its folder (the root's: `u32::MAX`).
    parent: u32,
    from: NodeFrom,
}

enum NodeFrom {
    /// Record of the cache read, believed.
    Cache(u32),
    /// Listed now ([`Fresh`] at this index).
    Listed(u32),
}

/// A folder listed by this walk.
struct Fresh {
    name: Vec<u8>,
    stamp: Stamp,
    listed_at: i128,
    listing: Listing,
}

/// A folder of the walk whose sub-folders are still being walked.
struct Frame {
    node: u32,
    /// Its record in the cache read (also when it was listed again: its sub-folders' records
    /// are found there by name).
    cached: Option<usize>,
    /// Listed now: the [`Fresh`] holding its sub-folders; else they are the record's.
    listed: Option<usize>,
    /// Sub-folders walked so far.
    next: usize,
    /// The path's length before this folder's name was added to it.
    path_len: usize,
}

/// Walks the folders of `root` (canonical), the root first and each folder before its
/// sub-folders, sub-folders in the order of their names; calls `visit` with each folder's path
/// and what it holds. A folder is taken from the cache kept under Garuda's home `home` when
/// its entry is believed (the module documentation), else listed; `None`: no cache, every
/// folder is listed. Links are never followed into and `.git` is never entered. A folder that
/// cannot be listed stops the walk with `list_error`'s error, as does an error of `visit`; the
/// cache is written only after a whole walk in which a folder was listed.
pub(crate) fn walk<E>(
    home: Option<&Path>,
    root: &Path,
    is_env: impl Fn(&OsStr) -> bool,
    list_error: impl Fn(&Path, std::io::Error) -> E,
    mut visit: impl FnMut(&Path, &Folder<'_>) -> Result<(), E>,
) -> Result<Walked, E> {
    let file = file_name(root);
    let tree = home.and_then(|h| read(h, &file, root));
    let tree = tree.as_ref();
    let believed = tree.map_or_else(Vec::new, |t| check_tree(root, t));
    let mut nodes: Vec<Node> = Vec::with_capacity(tree.map_or(1, |t| t.count));
    let mut fresh: Vec<Fresh> = Vec::new();
    let mut path = root.as_os_str().as_bytes().to_vec();
    let mut name = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut parent = u32::MAX;
    let mut cached = tree.map(|_| 0);
    let mut path_len = path.len();
    loop {
        // Enter the folder at `path` (its record in the cache read: `cached`).
        let here = Path::new(OsStr::from_bytes(&path));
        let node = nodes.len() as u32;
        let believed_record = cached
            .zip(tree)
            .filter(|(i, _)| believed.get(*i) == Some(&true));
        let listed = match believed_record {
            Some((i, t)) => {
                visit(
                    here,
                    &Folder {
                        git: t.git(i),
                        garuda: t.garuda(i),
                        from: FolderFrom::Cache(t, i),
                    },
                )?;
                nodes.push(Node {
                    parent,
                    from: NodeFrom::Cache(i as u32),
                });
                None
            }
            None => {
                // Taken before the listing: an entry made after this instant changes the
                // folder's times to at least this (less a clock tick, which the margin covers).
                let listed_at = now_ns();
                let (stamp, listing) =
                    list_folder(here, &is_env).map_err(|e| list_error(here, e))?;
                visit(
                    here,
                    &Folder {
                        git: listing.git,
                        garuda: listing.garuda,
                        from: FolderFrom::Listing(&listing),
                    },
                )?;
                nodes.push(Node {
                    parent,
                    from: NodeFrom::Listed(fresh.len() as u32),
                });
                fresh.push(Fresh {
                    name: name.clone(),
                    stamp,
                    listed_at,
                    listing,
                });
                Some(fresh.len() - 1)
            }
        };
        stack.push(Frame {
            node,
            cached,
            listed,
            next: 0,
            path_len,
        });
        // The next folder to enter: the next sub-folder of the innermost folder that has one
        // left, leaving the folders done.
        let found = loop {
            let Some(top) = stack.last_mut() else {
                break false;
            };
            let child = match (top.listed, top.cached, tree) {
                (Some(f), _, _) => fresh
                    .get(f)
                    .and_then(|f| f.listing.subdirs.get(top.next))
                    .map(|n| {
                        let n = n.as_bytes();
                        (
                            n,
                            top.cached.zip(tree).and_then(|(i, t)| t.child_named(i, n)),
                        )
                    }),
                (None, Some(i), Some(t)) => {
                    let children = t.children(i);
                    (top.next < children.len()).then(|| {
                        (
                            t.name(children.start + top.next),
                            Some(children.start + top.next),
                        )
                    })
                }
                _ => None,
            };
            match child {
                Some((child_name, child_record)) => {
                    top.next += 1;
                    name.clear();
                    name.extend_from_slice(child_name);
                    parent = top.node;
                    cached = child_record;
                    break true;
                }
                None => {
                    let done = stack.pop();
                    if let Some(done) = done {
                        path.truncate(done.path_len);
                    }
                }
            }
        };
        if !found {
            break;
        }
        path_len = path.len();
        push_name(&mut path, &name);
    }
    let walked = Walked {
        listed: fresh.len(),
    };
    if let (Some(home), false) = (home, fresh.is_empty()) {
        if let Some(bytes) = encode(root, &new_records(tree, &nodes, &fresh)) {
            // Best effort: a cache that cannot be written only makes the next walk list
            // everything again.
            let _ = write(home, &file, &bytes);
        }
    }
    Ok(walked)
}

/// One folder's record as written: a believed record of the cache read, or a listing.
struct OutRecord<'a> {
    name: &'a [u8],
    stamp: Stamp,
    listed_at: i128,
    git: Option<EntryKind>,
    garuda: bool,
    env: Vec<&'a [u8]>,
    children: usize,
}

/// The records of the folders this walk reached, in the file's order: breadth-first, each
/// folder's sub-folders in the order the walk took them (by name).
fn new_records<'a>(
    tree: Option<&'a Tree>,
    nodes: &[Node],
    fresh: &'a [Fresh],
) -> Vec<OutRecord<'a>> {
    let n = nodes.len();
    // Each node's sub-folders, side by side: counted, then placed in the walk's order.
    let mut count = vec![0usize; n];
    for node in nodes.iter().skip(1) {
        if let Some(c) = count.get_mut(node.parent as usize) {
            *c += 1;
        }
    }
    let mut start = Vec::with_capacity(n + 1);
    let mut sum = 0;
    for c in &count {
        start.push(sum);
        sum += c;
    }
    start.push(sum);
    let mut fill = start.clone();
    let mut slots = vec![0usize; sum];
    for (i, node) in nodes.iter().enumerate().skip(1) {
        let p = node.parent as usize;
        slots[fill[p]] = i;
        fill[p] += 1;
    }
    let mut order = Vec::with_capacity(n);
    if n > 0 {
        order.push(0);
    }
    let mut k = 0;
    while let Some(&v) = order.get(k) {
        order.extend_from_slice(&slots[start[v]..start[v + 1]]);
        k += 1;
    }
    order
        .iter()
        .filter_map(|&v| {
            let children = count[v];
            Some(match nodes[v].from {
                NodeFrom::Cache(i) => {
                    let (t, i) = (tree?, i as usize);
                    OutRecord {
                        name: t.name(i),
                        stamp: t.stamp(i),
                        listed_at: t.listed_at(i),
                        git: t.git(i),
                        garuda: t.garuda(i),
                        env: t.env(i).collect(),
                        children,
                    }
                }
                NodeFrom::Listed(f) => {
                    let f = fresh.get(f as usize)?;
                    OutRecord {
                        name: &f.name,
                        stamp: f.stamp,
                        listed_at: f.listed_at,
                        git: f.listing.git,
                        garuda: f.listing.garuda,
                        env: f.listing.env.iter().map(|e| e.as_bytes()).collect(),
                        children,
                    }
                }
            })
        })
        .collect()
}

/// `lstat` of every folder the cache knows, walking the cached tree: each folder's
/// sub-folders are looked at relative to a handle on it (one path component per call instead
/// of the whole path). Returns, for each record, whether it is believed; a folder that cannot
/// be looked at is not (the walk lists it if it reaches it).
///
/// On a tree of [`SHARED_FROM_FOLDERS`] folders or more, two threads share the calls
/// ([`TreeWork`]): on the 20,000-file project this is about 2,000 `statx` calls, 1.9 ms on one
/// core (`docs/benchmarks.md`, "The walk cache's look shared by two threads"). Which thread
/// looks at a folder changes nothing: each stamp is of one folder, taken by one call, and is
/// judged alone. A second thread that cannot be started leaves the whole tree to this one.
fn check_tree(root: &Path, tree: &Tree) -> Vec<bool> {
    let mut believed = vec![false; tree.count];
    // `now` before any stamp is taken: a stamp after it is in the future.
    let work = TreeWork::new(tree, now_ns());
    let Ok(meta) = fs::symlink_metadata(root) else {
        return believed;
    };
    believed[0] =
        meta.is_dir() && Stamp::of(&meta).believes(&tree.stamp(0), tree.listed_at(0), work.now);
    let mut mine = Vec::with_capacity(tree.count);
    if tree.count < SHARED_FROM_FOLDERS {
        work.run(root, &mut mine);
    } else {
        std::thread::scope(|scope| {
            let (tell, told) = std::sync::mpsc::sync_channel(1);
            let work = &work;
            let helper = std::thread::Builder::new()
                .name("garuda-walk".into())
                .spawn_scoped(scope, move || {
                    let _ = tell.send(rustix::thread::gettid());
                    let mut theirs = Vec::with_capacity(tree.count / 2);
                    work.run(root, &mut theirs);
                    theirs
                });
            // Queued on this thread's CPU the second thread may wait for this one to block
            // (crate::beside): wait for its first step (it runs there at once, this thread
            // blocked), then send it to the other CPUs. Each thread takes pieces as it can,
            // so neither waits for the other's share.
            let several = rustix::thread::sched_getaffinity(None).is_ok_and(|s| s.count() > 1);
            if helper.is_ok() && several {
                if let Ok(tid) = told.recv() {
                    crate::beside::move_off_this_cpu(tid);
                    #[cfg(test)]
                    tests::note_second_thread(tid);
                }
            }
            work.run(root, &mut mine);
            if let Ok(Ok(theirs)) = helper.map(|h| h.join()) {
                mine.extend(theirs);
            }
        });
    }
    for i in mine {
        if let Some(b) = believed.get_mut(i as usize) {
            *b = true;
        }
    }
    believed
}

/// Below this many cached folders the tree is looked at by the calling thread alone: a second
/// thread costs about 50 µs to start, about what 40 `statx` calls cost.
const SHARED_FROM_FOLDERS: usize = 256;

/// Most sub-folders one piece of work looks at: a folder with more (the benchmark project's
/// `src/` has 2,000) is shared out in pieces.
const PIECE: usize = 128;

/// Folders of the cached tree whose sub-folders are still to be looked at, shared by the
/// threads of [`check_tree`]: each takes a piece, looks at its sub-folders, and puts back the
/// pieces of those that have sub-folders of their own. A thread stops when no piece is left
/// and no other thread is looking at one (which could put back more).
struct TreeWork<'a> {
    tree: &'a Tree,
    /// Taken before any folder is looked at: a time after it is in the future.
    now: i128,
    state: Mutex<TreeWorkState>,
    changed: Condvar,
}

struct TreeWorkState {
    /// A folder's record and the range of its sub-folders' records to look at.
    pieces: Vec<(usize, Range<usize>)>,
    /// Threads looking at a piece.
    busy: usize,
}

impl<'a> TreeWork<'a> {
    /// The work of looking at the whole tree, from the root's sub-folders.
    fn new(tree: &'a Tree, now: i128) -> TreeWork<'a> {
        let mut pieces = Vec::new();
        add_pieces(tree, &mut pieces, 0);
        TreeWork {
            tree,
            now,
            state: Mutex::new(TreeWorkState { pieces, busy: 0 }),
            changed: Condvar::new(),
        }
    }

    /// Take pieces until none is left; the records believed go to `believed`.
    fn run(&self, root: &Path, believed: &mut Vec<u32>) {
        while let Some((folder, range)) = self.take() {
            // Handed back when this piece ends, however it ends: a thread that stopped in the
            // middle of one must not leave the other waiting for it.
            let mut piece = PieceDone {
                work: self,
                found: Vec::new(),
            };
            piece.found = self.look(root, folder, range, believed);
        }
    }

    /// Look at the sub-folders `range` of folder `folder`, relative to a handle on it; returns
    /// those of them that have sub-folders of their own.
    fn look(
        &self,
        root: &Path,
        folder: usize,
        range: Range<usize>,
        believed: &mut Vec<u32>,
    ) -> Vec<usize> {
        use rustix::fs::{AtFlags, StatxFlags};
        let mut found = Vec::new();
        let path = self.tree.path(root, folder);
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Ok(dir) = rustix::fs::open(OsStr::from_bytes(&path), flags, Mode::empty()) else {
            return found;
        };
        for i in range {
            let Ok(st) = rustix::fs::statx(
                &dir,
                OsStr::from_bytes(self.tree.name(i)),
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MTIME | StatxFlags::CTIME,
            ) else {
                continue;
            };
            let then = self.tree.stamp(i);
            // Only a folder is believed: a planted record for a link (with the link's own
            // stamp) would otherwise lead the walk through it.
            let folder = rustix::fs::FileType::from_raw_mode(u32::from(st.stx_mode))
                == rustix::fs::FileType::Directory;
            if folder && Stamp::of_statx(&st).believes(&then, self.tree.listed_at(i), self.now) {
                believed.push(i as u32);
            }
            if !self.tree.children(i).is_empty() {
                found.push(i);
            }
        }
        found
    }

    /// The next piece, waiting while another thread may still put some back; `None` when the
    /// tree is done.
    fn take(&self) -> Option<(usize, Range<usize>)> {
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
    fn finish(&self, found: Vec<usize>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for folder in found {
            add_pieces(self.tree, &mut state.pieces, folder);
        }
        state.busy -= 1;
        self.changed.notify_all();
    }
}

/// A piece being looked at; dropping it hands what it found back to the [`TreeWork`].
struct PieceDone<'w, 'a> {
    work: &'w TreeWork<'a>,
    found: Vec<usize>,
}

impl Drop for PieceDone<'_, '_> {
    fn drop(&mut self) {
        self.work.finish(std::mem::take(&mut self.found));
    }
}

/// The pieces of folder `folder`'s sub-folders, [`PIECE`] at a time.
fn add_pieces(tree: &Tree, pieces: &mut Vec<(usize, Range<usize>)>, folder: usize) {
    let children = tree.children(folder);
    let mut from = children.start;
    while from < children.end {
        let to = (from + PIECE).min(children.end);
        pieces.push((folder, from..to));
        from = to;
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
    // In name order, as the file keeps sub-folders (`Tree::child_named` searches them so).
    listing.env.sort_unstable();
    listing.subdirs.sort_unstable();
    Ok((stamp, listing))
}

// ---------------------------------------------------------------------------------------------
// The file (the module documentation, "The file"). Integers little-endian.

/// The file for `root` holding `records` (breadth-first); `None` when a name or the file is too
/// long for the format (nothing is written then, and every run lists every folder).
fn encode(root: &Path, records: &[OutRecord<'_>]) -> Option<Vec<u8>> {
    let root = root.as_os_str().as_bytes();
    let mut strings = Vec::new();
    let mut out = Vec::with_capacity(64 + root.len() + records.len() * (RECORD + 16));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&u32::try_from(root.len()).ok()?.to_le_bytes());
    out.extend_from_slice(root);
    out.extend_from_slice(&u32::try_from(records.len()).ok()?.to_le_bytes());
    let strings_len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    for r in records {
        let mut rec = [0u8; RECORD];
        let s = &r.stamp;
        rec[at::DEV..at::DEV + 8].copy_from_slice(&s.dev.to_le_bytes());
        rec[at::INO..at::INO + 8].copy_from_slice(&s.ino.to_le_bytes());
        rec[at::MTIME_S..at::MTIME_S + 8].copy_from_slice(&s.mtime.0.to_le_bytes());
        rec[at::CTIME_S..at::CTIME_S + 8].copy_from_slice(&s.ctime.0.to_le_bytes());
        let nanos = |n: i64| u32::try_from(n).ok().map(u32::to_le_bytes);
        rec[at::MTIME_NS..at::MTIME_NS + 4].copy_from_slice(&nanos(s.mtime.1)?);
        rec[at::CTIME_NS..at::CTIME_NS + 4].copy_from_slice(&nanos(s.ctime.1)?);
        // A listing time past 2262 does not fit: stored as the earliest time, never "still".
        let listed_at = i64::try_from(r.listed_at).unwrap_or(i64::MIN);
        rec[at::LISTED_AT..at::LISTED_AT + 8].copy_from_slice(&listed_at.to_le_bytes());
        let name_off = u32::try_from(strings.len()).ok()?;
        strings.extend_from_slice(r.name);
        let env_off = u32::try_from(strings.len()).ok()?;
        for env in &r.env {
            strings.extend_from_slice(&u16::try_from(env.len()).ok()?.to_le_bytes());
            strings.extend_from_slice(env);
        }
        rec[at::NAME..at::NAME + 4].copy_from_slice(&name_off.to_le_bytes());
        rec[at::ENV..at::ENV + 4].copy_from_slice(&env_off.to_le_bytes());
        let children = u32::try_from(r.children).ok()?;
        rec[at::CHILDREN..at::CHILDREN + 4].copy_from_slice(&children.to_le_bytes());
        let env_count = u32::try_from(r.env.len()).ok()?;
        rec[at::ENV_COUNT..at::ENV_COUNT + 4].copy_from_slice(&env_count.to_le_bytes());
        let name_len = u16::try_from(r.name.len()).ok()?;
        rec[at::NAME_LEN..at::NAME_LEN + 2].copy_from_slice(&name_len.to_le_bytes());
        rec[at::GIT] = r.git.map_or(0, EntryKind::code);
        rec[at::GARUDA] = u8::from(r.garuda);
        out.extend_from_slice(&rec);
    }
    let strings_len = u32::try_from(strings.len()).ok()?;
    out[strings_len_at..strings_len_at + 4].copy_from_slice(&strings_len.to_le_bytes());
    out.extend_from_slice(&strings);
    Some(out)
}

/// The file `data`, checked, for walks of `root`; `None` when it is for another root or is
/// not exactly what [`encode`] writes: every offset inside the file, the strings laid out in
/// record order with nothing between or after them (so checking them is linear in the file),
/// every name plain, no `.git` among the folders to walk, each folder's sub-folders strictly
/// sorted, and the counts making exactly one tree.
fn decode(data: Vec<u8>, root: &Path) -> Option<Tree> {
    let root = root.as_os_str().as_bytes();
    if data.get(..MAGIC.len())? != MAGIC {
        return None;
    }
    let root_at = MAGIC.len() + 4;
    let root_len = u32_at(&data, MAGIC.len());
    if data.get(root_at..root_at.checked_add(root_len)?)? != root {
        return None;
    }
    let counts_at = root_at + root_len;
    data.get(counts_at..counts_at + 8)?;
    let count = u32_at(&data, counts_at);
    let strings_len = u32_at(&data, counts_at + 4);
    let records = counts_at + 8;
    let strings = records.checked_add(count.checked_mul(RECORD)?)?;
    if count == 0 || data.len() != strings.checked_add(strings_len)? {
        return None;
    }
    let mut first_child = Vec::with_capacity(count);
    let mut parent = Vec::with_capacity(count);
    parent.push(0u32);
    // The next record not yet any folder's sub-folder, and the next string byte not yet read.
    let mut next = 1usize;
    let mut cursor = 0usize;
    let mut previous_name: &[u8] = &[];
    for i in 0..count {
        // Every record but the root's is a sub-folder of one before it.
        if i > 0 && i >= next {
            return None;
        }
        let r = data.get(records + i * RECORD..records + (i + 1) * RECORD)?;
        let children = u32_at(r, at::CHILDREN);
        first_child.push(u32::try_from(next).ok()?);
        next = next.checked_add(children)?;
        if next > count {
            return None;
        }
        parent.extend(std::iter::repeat_n(u32::try_from(i).ok()?, children));
        // The name, where the strings are up to.
        let name_len = u16_at(r, at::NAME_LEN);
        if u32_at(r, at::NAME) != cursor {
            return None;
        }
        let name = data.get(strings + cursor..strings.checked_add(cursor + name_len)?)?;
        cursor += name_len;
        if i == 0 {
            if !name.is_empty() {
                return None;
            }
        } else {
            if !plain_name(name) || name == b".git" {
                return None;
            }
            if i > 1 && parent[i - 1] == parent[i] && previous_name >= name {
                return None;
            }
        }
        previous_name = name;
        // The `.env` names, right after it.
        if u32_at(r, at::ENV) != cursor {
            return None;
        }
        for _ in 0..u32_at(r, at::ENV_COUNT) {
            let len = u16_at(data.get(strings + cursor..)?, 0);
            let env = data.get(strings + cursor + 2..strings.checked_add(cursor + 2 + len)?)?;
            if !plain_name(env) {
                return None;
            }
            cursor += 2 + len;
        }
        match r[at::GIT] {
            0 => {}
            code => {
                EntryKind::from_code(code)?;
            }
        }
        if r[at::GARUDA] > 1 || u32_at(r, at::MTIME_NS) >= 1_000_000_000 {
            return None;
        }
        if u32_at(r, at::CTIME_NS) >= 1_000_000_000 {
            return None;
        }
    }
    if next != count || cursor != strings_len {
        return None;
    }
    Some(Tree {
        data,
        records,
        strings,
        count,
        first_child,
        parent,
    })
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

fn read(home: &Path, name: &str, root: &Path) -> Option<Tree> {
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
    decode(data, root)
}

fn write(home: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
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
    let written = f.write_all(bytes).and_then(|()| {
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
    use std::os::unix::ffi::OsStringExt;
    use std::path::PathBuf;

    fn is_env(name: &OsStr) -> bool {
        name.as_bytes().starts_with(b".env")
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

    /// A whole walk: what it showed of each folder, in its order, and how many it listed.
    fn walk(cache_dir: &Path, root: &Path) -> (Vec<Listing>, usize) {
        let mut out = Vec::new();
        let walked = super::walk(
            Some(cache_dir),
            root,
            is_env,
            |_, e| e,
            |_, folder| {
                out.push(Listing {
                    env: folder.env().map(OsStr::to_os_string).collect(),
                    git: folder.git,
                    garuda: folder.garuda,
                    subdirs: folder.subdirs(),
                });
                Ok(())
            },
        )
        .unwrap();
        (out, walked.listed)
    }

    /// A record of the file, owned, to change and write back.
    #[derive(Debug, Clone)]
    struct Owned {
        name: Vec<u8>,
        stamp: Stamp,
        listed_at: i128,
        git: Option<EntryKind>,
        garuda: bool,
        env: Vec<Vec<u8>>,
        children: usize,
    }

    fn records(home: &Path, root: &Path) -> Vec<Owned> {
        let tree = read(home, &file_name(root), root).unwrap();
        (0..tree.count)
            .map(|i| Owned {
                name: tree.name(i).to_vec(),
                stamp: tree.stamp(i),
                listed_at: tree.listed_at(i),
                git: tree.git(i),
                garuda: tree.garuda(i),
                env: tree.env(i).map(<[u8]>::to_vec).collect(),
                children: tree.children(i).len(),
            })
            .collect()
    }

    fn encode_owned(root: &Path, records: &[Owned]) -> Vec<u8> {
        let out: Vec<OutRecord<'_>> = records
            .iter()
            .map(|r| OutRecord {
                name: &r.name,
                stamp: r.stamp,
                listed_at: r.listed_at,
                git: r.git,
                garuda: r.garuda,
                env: r.env.iter().map(Vec::as_slice).collect(),
                children: r.children,
            })
            .collect();
        encode(root, &out).unwrap()
    }

    /// The cache file's records for `root`, changed by `change`, written back (not checked:
    /// `change` may make a file `read` refuses).
    fn plant(home: &Path, root: &Path, change: impl FnOnce(&mut Vec<Owned>)) {
        let mut all = records(home, root);
        change(&mut all);
        write(home, &file_name(root), &encode_owned(root, &all)).unwrap();
    }

    /// Sets the listing times ten seconds later, so that the folders' listings are believed
    /// next time (without waiting out the racy margin; a change time cannot be set back).
    fn age(home: &Path, root: &Path) {
        plant(home, root, |all| {
            for r in all {
                r.listed_at += 10 * 1_000_000_000;
            }
        });
    }

    /// Adds a sub-folder record called `name` to the root, where sorting puts it.
    fn add_root_child(all: &mut Vec<Owned>, name: &[u8]) {
        let children = 1..1 + all[0].children;
        let at = children
            .clone()
            .find(|i| all[*i].name.as_slice() > name)
            .unwrap_or(children.end);
        let mut planted = all[0].clone();
        planted.name = name.to_vec();
        planted.children = 0;
        planted.env.clear();
        all.insert(at, planted);
        all[0].children += 1;
    }

    #[test]
    fn an_unchanged_tree_is_taken_from_the_cache_and_a_new_secret_is_seen() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a/b/c")).unwrap();
        fs::write(root.join("a/.env"), "K=v").unwrap();
        let (first, listed) = walk(cache.path(), root);
        assert_eq!(listed, 4);
        // Just listed: still racy, so listed again.
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 4, "racily clean folders are listed again");
        age(cache.path(), root);
        let (second, listed) = walk(cache.path(), root);
        assert_eq!(listed, 0, "an aged, unchanged tree is read from the cache");
        assert_eq!(first, second);
        // A secret created since: its folder's times changed, so it is listed again; the
        // folders below it, unchanged, are still believed.
        fs::write(root.join("a/b/.env.local"), "K=v").unwrap();
        let (third, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1);
        assert!(third
            .iter()
            .any(|l| l.env == vec![OsString::from(".env.local")]));
        assert_eq!(third.len(), 4, "{third:?}");
        // The file written after that walk: the same four folders, the new secret with them.
        age(cache.path(), root);
        let (fourth, listed) = walk(cache.path(), root);
        assert_eq!((fourth, listed), (third, 0));
    }

    /// A secret added to a folder whose modification time is then put back (`utimes`, as a
    /// command could) is still seen: the change time moved, and no process can set it back.
    /// Control: the modification time is exactly the one the cache holds.
    #[test]
    fn a_folder_whose_mtime_is_put_back_is_listed_again() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a")).unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        let before = fs::symlink_metadata(root.join("a"))
            .unwrap()
            .modified()
            .unwrap();
        fs::write(root.join("a/.env"), "K=v").unwrap();
        fs::File::open(root.join("a"))
            .unwrap()
            .set_modified(before)
            .unwrap();
        let after = fs::symlink_metadata(root.join("a")).unwrap();
        assert_eq!(
            after.modified().unwrap(),
            before,
            "the control: mtime put back"
        );
        let (listed_now, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1, "only `a`, by its change time");
        assert!(listed_now
            .iter()
            .any(|l| l.env == vec![OsString::from(".env")]));
    }

    /// `believes` wants every field of the stamp unchanged: any one of device, inode,
    /// modification and change time that differs is a folder to list again.
    #[test]
    fn every_field_of_a_stamp_counts() {
        let then = Stamp {
            dev: 1,
            ino: 2,
            mtime: (100, 0),
            ctime: (100, 0),
        };
        let listed_at = 200 * 1_000_000_000;
        let now = 300 * 1_000_000_000;
        assert!(
            then.believes(&then, listed_at, now),
            "the control: unchanged"
        );
        for changed in [
            Stamp { dev: 9, ..then },
            Stamp { ino: 9, ..then },
            Stamp {
                mtime: (100, 1),
                ..then
            },
            Stamp {
                ctime: (100, 1),
                ..then
            },
        ] {
            assert!(!changed.believes(&then, listed_at, now), "{changed:?}");
        }
    }

    /// A tree large enough for two threads, with a folder of more sub-folders than one piece
    /// holds: every folder's stamp in the file is what a plain `lstat` gives, every folder is
    /// believed (a folder missed between the threads would be listed again), and a secret made
    /// deep in it is still seen. (Which thread looks at which piece is the scheduler's choice;
    /// the stop rule is tested on its own below.)
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
        let tree = read(cache.path(), &file_name(root), root).unwrap();
        assert!(tree.count >= SHARED_FROM_FOLDERS, "{} folders", tree.count);
        for i in 0..tree.count {
            let path = PathBuf::from(OsString::from_vec(tree.path(root, i)));
            let meta = fs::symlink_metadata(&path).unwrap();
            assert_eq!(tree.stamp(i), Stamp::of(&meta), "{path:?}");
        }
        let believed = check_tree(root, &tree);
        assert!(believed.iter().all(|b| *b), "{believed:?}");
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 0, "an aged, unchanged tree is read from the cache");
        fs::write(root.join("wide/f250/x/y/.env"), "K=v").unwrap();
        let (after, listed) = walk(cache.path(), root);
        assert_eq!(listed, 1);
        assert!(after.iter().any(|l| l.env == vec![OsString::from(".env")]));
    }

    thread_local! {
        /// The CPUs of the walk's second thread right after it was moved, as its starter saw
        /// them (per test thread: tests run side by side).
        static SECOND_THREAD_CPUS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    }

    pub(super) fn note_second_thread(tid: rustix::process::Pid) {
        // A second thread that already ended (its share was done at once) tells nothing.
        if let Ok(cpus) = rustix::thread::sched_getaffinity(Some(tid)) {
            SECOND_THREAD_CPUS.with(|c| c.set(Some(cpus.count())));
        }
    }

    /// The walk's second thread may run on every CPU but the first thread's (it is started to
    /// run beside it, `crate::beside`); with one CPU it is not moved.
    #[test]
    fn the_second_thread_runs_off_the_first_ones_cpu() {
        let Scene { cache, root, .. } = &scene();
        for i in 0..2 * SHARED_FROM_FOLDERS {
            fs::create_dir_all(root.join(format!("d{i:03}/x"))).unwrap();
        }
        walk(cache.path(), root);
        age(cache.path(), root);
        let tree = read(cache.path(), &file_name(root), root).unwrap();
        let allowed = rustix::thread::sched_getaffinity(None).unwrap().count();
        let mut seen = None;
        for _ in 0..20 {
            SECOND_THREAD_CPUS.with(|c| c.set(None));
            check_tree(root, &tree);
            seen = SECOND_THREAD_CPUS.with(std::cell::Cell::get);
            if seen.is_some() {
                break;
            }
        }
        // With one CPU there is nowhere to move it, and nothing is tried.
        let expected = (allowed >= 2).then(|| allowed - 1);
        assert_eq!(seen, expected, "{allowed} CPUs allowed");
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
        age(cache.path(), root);
        let tree = read(cache.path(), &file_name(root), root).unwrap();
        let work = TreeWork::new(&tree, now_ns());
        // This thread holds the only piece there is at first: the root's sub-folders.
        let (folder, range) = work.take().unwrap();
        assert_eq!(folder, 0);
        let mut mine = Vec::new();
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let mut theirs = Vec::new();
                work.run(root, &mut theirs);
                theirs
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !other.is_finished(),
                "the other thread stopped while a piece was still out"
            );
            let found = work.look(root, folder, range, &mut mine);
            work.finish(found);
            let theirs = other.join().unwrap();
            assert_eq!(mine, [1], "`a`, the root's only sub-folder");
            assert_eq!(theirs.len(), tree.count - 2, "all but the root and `a`");
            let deep = root.join("a/f000/x");
            assert!(theirs
                .iter()
                .any(|i| tree.path(root, *i as usize) == deep.as_os_str().as_bytes()));
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
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(root.join("a/.env"), "").unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        let file = cache.path().join("cache/walk").join(file_name(root));
        let good = fs::read(&file).unwrap();
        assert!(decode(good.clone(), root).is_some());
        assert!(decode(good.clone(), Path::new("/elsewhere")).is_none());
        for cut in 0..good.len() {
            assert!(decode(good[..cut].to_vec(), root).is_none(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(longer, root).is_none());
        // Counts and lengths the file cannot hold are refused: the number of folders, the
        // strings' length, and in the second record (`a`) its sub-folders, its `.env` names
        // and its name's length.
        let count_at = MAGIC.len() + 4 + root.as_os_str().len();
        let a = count_at + 8 + RECORD;
        for (at, width) in [
            (count_at, 4),
            (count_at + 4, 4),
            (a + at::CHILDREN, 4),
            (a + at::ENV_COUNT, 4),
            (a + at::NAME_LEN, 2),
            (a + at::NAME, 4),
            (a + at::ENV, 4),
        ] {
            for value in [u32::MAX, 9] {
                let mut bad = good.clone();
                bad[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
                assert!(decode(bad, root).is_none(), "{value} at {at}");
            }
        }
        fs::write(&file, b"not a cache").unwrap();
        let (_, listed) = walk(cache.path(), root);
        assert_eq!(listed, 2);
    }

    /// Sub-folders out of order or named twice: the binary search that finds a changed
    /// folder's sub-folders again would miss one, so the file is refused.
    #[test]
    fn sub_folders_out_of_order_are_refused() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(root.join("b")).unwrap();
        walk(cache.path(), root);
        age(cache.path(), root);
        let all = records(cache.path(), root);
        assert_eq!(all[1].name, b"a");
        assert!(decode(encode_owned(root, &all), root).is_some(), "control");
        let mut swapped = all.clone();
        swapped.swap(1, 2);
        assert!(decode(encode_owned(root, &swapped), root).is_none());
        let mut twice = all.clone();
        twice[2].name = b"a".to_vec();
        assert!(decode(encode_owned(root, &twice), root).is_none());
        // More sub-folders counted than records follow, and a record that is no folder's.
        let mut more = all.clone();
        more[0].children = 3;
        assert!(decode(encode_owned(root, &more), root).is_none());
        let mut orphan = all;
        orphan[0].children = 1;
        assert!(decode(encode_owned(root, &orphan), root).is_none());
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
            plant(&cache, &root, |all| match field {
                "subdir" => add_root_child(all, name),
                _ => all[0].env.push(name.to_vec()),
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
        // record keeps the folder's real stamp), so only the name check refuses the ones above.
        plant(&cache, &root, |all| {
            all[0].env.push(b".env.planted".to_vec())
        });
        let (listings, listed) = walk(&cache, &root);
        assert_eq!(listed, 0);
        assert_eq!(listings[0].env, [OsString::from(".env.planted")]);
        assert_eq!(listings[0].subdirs, [OsString::from("inside")]);
    }

    /// A record planted for a link, with the link's own stamp, is not believed: only a folder
    /// is. Believed, the walk would list what is below it through the link, outside the
    /// project; refused, the walk lists the link itself without following it, and stops.
    #[test]
    fn a_record_planted_for_a_link_is_not_believed() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let (cache, root, outside) = (base.join("home"), base.join("project"), base.join("out"));
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(outside.join("x")).unwrap();
        fs::create_dir_all(&cache).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("lnk")).unwrap();
        walk(&cache, &root);
        age(&cache, &root);
        let link = Stamp::of(&fs::symlink_metadata(root.join("lnk")).unwrap());
        let inner = Stamp::of(&fs::symlink_metadata(outside.join("x")).unwrap());
        plant(&cache, &root, |all| {
            add_root_child(all, b"lnk");
            let at = all.iter().position(|r| r.name == b"lnk").unwrap();
            all[at].stamp = link;
            all[at].children = 1;
            let mut x = all[at].clone();
            (x.name, x.stamp, x.children) = (b"x".to_vec(), inner, 0);
            all.push(x);
        });
        let planted = records(&cache, &root);
        let at = planted.iter().position(|r| r.name == b"lnk").unwrap();
        // Control: by its stamp alone the record would be believed.
        assert!(link.believes(&planted[at].stamp, planted[at].listed_at, now_ns()));
        let mut visited = Vec::new();
        let refused = super::walk(
            Some(&cache),
            &root,
            is_env,
            |_, e| e,
            |dir, _| {
                visited.push(dir.to_path_buf());
                Ok(())
            },
        )
        .unwrap_err();
        // Opened as a folder without following a link: ENOTDIR.
        assert_eq!(refused.raw_os_error(), Some(libc::ENOTDIR), "{refused}");
        assert!(
            !visited.iter().any(|d| d.starts_with(root.join("lnk"))),
            "{visited:?}"
        );
    }

    /// A folder swapped for a link after its parent was listed (a command in another sandbox of
    /// the same project, racing this walk) is not listed through the link: the walk stops.
    #[test]
    fn a_folder_swapped_for_a_link_during_the_walk_is_not_listed_through_it() {
        let Scene { cache, root, .. } = &scene();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(root.join("decoy")).unwrap();
        fs::write(root.join("decoy/listed-through-the-link"), "").unwrap();
        let mut listed_through = false;
        let refused = super::walk(
            Some(cache.path()),
            root,
            is_env,
            |_, e| e,
            |dir, folder| {
                if dir == root.as_path() {
                    // The root was listed: now `a` becomes a link before the walk reaches it.
                    assert!(folder.subdirs().contains(&OsString::from("a")));
                    fs::remove_dir(root.join("a")).unwrap();
                    std::os::unix::fs::symlink("decoy", root.join("a")).unwrap();
                } else if dir == root.join("a") {
                    listed_through = true;
                }
                Ok(())
            },
        )
        .unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ENOTDIR), "{refused}");
        assert!(!listed_through);
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
        plant(cache.path(), root, |all| {
            for r in all {
                r.listed_at += 2 * 3600 * 1_000_000_000;
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
