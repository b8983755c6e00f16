//! The executor probe's positive answers, kept in Garuda's home so that `garuda sandbox` does
//! not probe on every run (`$GARUDA_HOME/cache/executors.json`).
//!
//! Probing is the costly part of choosing an executor: `landlock` forks a child into new user
//! and mount namespaces, `bubblewrap` runs `bwrap --version` and a whole bwrap run (about
//! 4 ms). What a probe finds depends on the machine state in [`Key`] (the boot, the kernel,
//! the user and user namespace, the namespace sysctls, the Landlock ABI, the bwrap binary's
//! identity, the caller's seccomp state, the `pids` cgroup); the cache is used only while every
//! field of the key is what this process sees now.
//!
//! The file is the user's to write, so it is read as hostile input. It can only ever say that
//! an executor **is** available:
//! - a negative is never written and never believed: an executor the cache does not list as
//!   available is probed live, so the cache cannot make `auto` pick a weaker executor than a
//!   live probe would, nor the host;
//! - a false positive (a poisoned or stale file) makes Garuda run that executor, which then
//!   fails at setup: exit 125, with a message naming the cache, and the cache is removed so
//!   that the next run probes again ([`CachedExecutor`]). It never weakens the sandbox: the
//!   executors check what they need when they run;
//! - a missing, unreadable, oversized, malformed, foreign-owned file, or one written under
//!   another key, is ignored (probe live) and rewritten — never an error that stops the run;
//! - the file and its folder are opened without following links; the file is written to a new
//!   temporary file (`O_EXCL`, mode 0600) and renamed over the old one, which replaces a link
//!   planted there instead of writing through it. Two runs writing at once each rename a
//!   whole file: the last one wins, and both were right.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use garuda_policy::ExecPolicy;
use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::{CommandSpec, ExecError, Executor, ExecutorKind, Outcome, StdioMode};
use crate::sys;

/// The cache's folder, under Garuda's home.
pub const DIR: &str = "cache";
/// The cache's file, in [`DIR`].
pub const FILE: &str = "executors.json";
/// Format version; a file of another version is ignored. 2: bubblewrap's detail names its
/// process limit as a PID namespace's `pid_max` (issue 12), and on Linux 6.14 and later root
/// without a `pids` cgroup no longer makes it unavailable, so answers cached before are probed
/// again.
const VERSION: u32 = 2;
/// A longer file is not read (it is not one Garuda wrote).
const MAX_BYTES: u64 = 64 * 1024;
/// A cached detail longer than this is not believed (Garuda's are under 100 characters).
const MAX_DETAIL: usize = 300;

/// The executors whose probe is worth caching (the others are a path check or nothing).
pub fn cacheable(kind: ExecutorKind) -> bool {
    matches!(kind, ExecutorKind::Landlock | ExecutorKind::Bubblewrap)
}

/// Everything a probe's answer depends on. A change of any field (a reboot, a kernel upgrade,
/// another user or user namespace, a sysctl, a new bwrap binary) makes the cache stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// `/proc/sys/kernel/random/boot_id`: a cache copied from another machine, or kept across
    /// a reboot, is stale.
    pub boot_id: Option<String>,
    /// `uname -r`.
    pub kernel_release: Option<String>,
    /// `uname -v`.
    pub kernel_version: Option<String>,
    /// Real user and group ids.
    pub uid: u32,
    /// Real group id.
    pub gid: u32,
    /// The user namespace this process is in (`/proc/self/ns/user`): a nested run (inside a
    /// container or another sandbox) may not create namespaces.
    pub user_ns: Option<String>,
    /// The caller's `Seccomp:` and `Seccomp_filters:` lines: a filter may forbid namespaces.
    pub seccomp: Option<String>,
    /// The sysctls that allow or limit unprivileged namespaces (`None`: no such file).
    pub sysctls: BTreeMap<String, Option<String>>,
    /// The Landlock ABI (`None`: no Landlock).
    pub landlock_abi: Option<u32>,
    /// The bwrap binary the bubblewrap executor would run.
    pub bwrap: Option<BinaryId>,
    /// The `pids` cgroup root bubblewrap as root needs for its process limit.
    pub pids_cgroup: Option<String>,
}

/// A binary's identity: any replacement or change of the file changes it (the change time
/// cannot be set back by the file's owner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinaryId {
    /// Where it was found.
    pub path: String,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Mode, with the set-user-id bit.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
}

/// The sysctls of [`Key::sysctls`] (files under `/proc/sys`).
const SYSCTLS: [&str; 6] = [
    "user/max_user_namespaces",
    "user/max_mnt_namespaces",
    "user/max_pid_namespaces",
    "user/max_net_namespaces",
    "kernel/unprivileged_userns_clone",
    "kernel/apparmor_restrict_unprivileged_userns",
];

/// A small `/proc` file's text, trimmed: an open and reads into a buffer, without the size
/// query (`statx`) `fs::read_to_string` makes first (a `/proc` file has no size to give).
fn read_trimmed(path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut text = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(text).ok().map(|s| s.trim().to_string())
}

fn time_ns(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

impl Key {
    /// The key of this process, now: a few small reads of `/proc`, one `stat`, a few system
    /// calls.
    pub fn current() -> Key {
        let seccomp = read_trimmed("/proc/self/status").map(|s| {
            s.lines()
                .filter(|l| l.starts_with("Seccomp"))
                .collect::<Vec<_>>()
                .join(" ")
        });
        let bwrap = super::bubblewrap::bwrap_path().and_then(|p| {
            let m = std::fs::metadata(&p).ok()?;
            Some(BinaryId {
                path: p.to_string_lossy().into_owned(),
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mode: m.mode(),
                uid: m.uid(),
                mtime_ns: time_ns(m.mtime(), m.mtime_nsec()),
                ctime_ns: time_ns(m.ctime(), m.ctime_nsec()),
            })
        });
        let (release, build) = super::pidns::kernel_release_and_build();
        Key {
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel_release: Some(release),
            kernel_version: Some(build),
            uid: sys::current_uid(),
            gid: sys::current_gid(),
            user_ns: std::fs::read_link("/proc/self/ns/user")
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            seccomp,
            sysctls: SYSCTLS
                .iter()
                .map(|s| (s.to_string(), read_trimmed(&format!("/proc/sys/{s}"))))
                .collect(),
            landlock_abi: sys::landlock_abi().ok(),
            bwrap,
            pids_cgroup: super::bubblewrap::pids_cgroup_base()
                .map(|p| p.to_string_lossy().into_owned()),
        }
    }

    /// The names of the fields that differ from `other`.
    pub fn differences(&self, other: &Key) -> Vec<&'static str> {
        let mut d = Vec::new();
        let mut check = |name, same: bool| {
            if !same {
                d.push(name);
            }
        };
        check("boot_id", self.boot_id == other.boot_id);
        check(
            "kernel",
            self.kernel_release == other.kernel_release
                && self.kernel_version == other.kernel_version,
        );
        check("uid", self.uid == other.uid && self.gid == other.gid);
        check("user_ns", self.user_ns == other.user_ns);
        check("seccomp", self.seccomp == other.seccomp);
        check("sysctls", self.sysctls == other.sysctls);
        check("landlock_abi", self.landlock_abi == other.landlock_abi);
        check("bwrap", self.bwrap == other.bwrap);
        check("pids_cgroup", self.pids_cgroup == other.pids_cgroup);
        d
    }
}

/// One cached answer. Only `available: true` entries are ever believed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// The executor's name (`landlock`, `bubblewrap`).
    pub kind: String,
    /// Always true in a file Garuda wrote.
    pub available: bool,
    /// What the probe found.
    pub detail: String,
}

/// The file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheFile {
    /// [`VERSION`].
    pub version: u32,
    /// The machine state the entries were probed under.
    pub key: Key,
    /// The executors found available.
    pub executors: Vec<Entry>,
}

/// What was found at the cache's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No file (or no folder, or no Garuda home).
    Missing,
    /// A file written under the current key.
    Current,
    /// A file written under another key: these fields differ.
    Stale(Vec<&'static str>),
    /// Not a file Garuda would have written: why.
    Malformed(String),
}

impl State {
    /// In words, for `garuda doctor`.
    pub fn describe(&self) -> String {
        match self {
            State::Missing => "missing".into(),
            State::Current => "written for this machine as it is now".into(),
            State::Stale(d) => format!(
                "written for another machine state ({} changed): ignored by runs",
                d.join(", ")
            ),
            State::Malformed(why) => format!("malformed ({why}): ignored by runs"),
        }
    }
}

/// The cache as one run sees it: what the file held (when it was current), what this run
/// probed, and whether the file must be written.
#[derive(Debug)]
pub struct ProbeCache {
    home: Option<PathBuf>,
    key: Key,
    /// How the file was found.
    pub state: State,
    /// Executors believed available, with their detail: the file's current positives, then
    /// this run's live ones.
    positives: Vec<(ExecutorKind, String)>,
    dirty: bool,
}

/// Where the cache of Garuda's home `home` lives.
pub fn path_in(home: &Path) -> PathBuf {
    home.join(DIR).join(FILE)
}

fn kind_named(name: &str) -> Option<ExecutorKind> {
    ExecutorKind::ALL.into_iter().find(|k| k.name() == name)
}

fn io(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from(e)
}

/// The cache folder, opened without following a link at its own name; created (0700) when
/// `create`. `None`: no home, no folder, or a folder that is not ours.
fn open_dir(home: &Path, create: bool) -> Option<OwnedFd> {
    let home_fd = rustix::fs::open(
        home,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rustix::fs::openat(&home_fd, DIR, flags, Mode::empty()) {
        Err(rustix::io::Errno::NOENT) if create => {
            // Another run may make it at the same moment: EEXIST is fine.
            let _ = rustix::fs::mkdirat(&home_fd, DIR, Mode::from_raw_mode(0o700));
            rustix::fs::openat(&home_fd, DIR, flags, Mode::empty()).ok()?
        }
        r => r.ok()?,
    };
    // A folder someone else owns (a shared GARUDA_HOME) could hold a file they control.
    let st = rustix::fs::fstat(&dir).ok()?;
    (st.st_uid == sys::current_uid()).then_some(dir)
}

/// Read and check the file: `(state, its believable positives)`.
fn read(home: &Path, key: &Key) -> (State, Vec<(ExecutorKind, String)>) {
    let Some(dir) = open_dir(home, false) else {
        return (State::Missing, Vec::new());
    };
    // No link followed; O_NONBLOCK so that a FIFO planted there cannot block the run.
    let fd = match rustix::fs::openat(
        &dir,
        FILE,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return (State::Missing, Vec::new()),
        Err(rustix::io::Errno::LOOP) => {
            return (State::Malformed("a link, not a file".into()), Vec::new())
        }
        Err(e) => return (State::Malformed(io(e).to_string()), Vec::new()),
    };
    let bad = |why: &str| (State::Malformed(why.to_string()), Vec::new());
    let Ok(st) = rustix::fs::fstat(&fd) else {
        return bad("cannot stat it");
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return bad("not a regular file");
    }
    if st.st_uid != sys::current_uid() {
        return bad("owned by another user");
    }
    let mut bytes = Vec::new();
    if std::fs::File::from(fd)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return bad("cannot read it");
    }
    if bytes.len() as u64 > MAX_BYTES {
        return bad("too large");
    }
    let file: CacheFile = match serde_json::from_slice(&bytes) {
        Ok(f) => f,
        Err(_) => return bad("not the cache's JSON"),
    };
    if file.version != VERSION {
        return bad("another format version");
    }
    if file.key != *key {
        return (State::Stale(file.key.differences(key)), Vec::new());
    }
    let mut positives = Vec::new();
    for e in &file.executors {
        let Some(kind) = kind_named(&e.kind).filter(|k| cacheable(*k)) else {
            return bad("an unknown executor");
        };
        // The detail is shown to the user: nothing a terminal would interpret, nothing long.
        if e.detail.len() > MAX_DETAIL || matches!(garuda_text::visible(&e.detail), Cow::Owned(_)) {
            return bad("a detail that is not plain text");
        }
        // A negative is never believed: that executor is probed live.
        if e.available && !positives.iter().any(|(k, _)| *k == kind) {
            positives.push((kind, e.detail.clone()));
        }
    }
    (State::Current, positives)
}

/// Write `file` atomically: a new temporary file (O_EXCL, 0600), renamed over the old name.
/// Best effort: a cache that cannot be written is only a slower next run.
fn write(home: &Path, file: &CacheFile) -> std::io::Result<()> {
    let dir = open_dir(home, true)
        .ok_or_else(|| std::io::Error::other("no cache folder in Garuda's home"))?;
    let bytes = serde_json::to_vec(file).map_err(std::io::Error::other)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = format!(".{FILE}.{}.{nanos}.tmp", sys::current_pid());
    let fd = rustix::fs::openat(
        &dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(io)?;
    let written = std::fs::File::from(fd).write_all(&bytes);
    // rename replaces the directory entry itself: a link planted at the name is replaced,
    // never written through.
    let renamed =
        written.and_then(|()| rustix::fs::renameat(&dir, tmp.as_str(), &dir, FILE).map_err(io));
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
    }
    renamed
}

/// Remove the cache (after a cached executor failed to start): the next run probes again.
pub fn remove(home: &Path) {
    if let Some(dir) = open_dir(home, false) {
        // unlinkat removes the entry, whatever it is; it follows nothing.
        let _ = rustix::fs::unlinkat(&dir, FILE, AtFlags::empty());
    }
}

impl ProbeCache {
    /// Read the cache of Garuda's home (`None`: no home, no cache) for the current key.
    pub fn load(home: Option<&Path>) -> ProbeCache {
        let key = Key::current();
        let (state, positives) = match home {
            Some(h) => read(h, &key),
            None => (State::Missing, Vec::new()),
        };
        ProbeCache {
            home: home.map(Path::to_path_buf),
            key,
            dirty: state != State::Current,
            state,
            positives,
        }
    }

    /// The cached positive for `kind`, if the cache holds one.
    pub fn cached(&self, kind: ExecutorKind) -> Option<&str> {
        self.positives
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, d)| d.as_str())
    }

    /// Record a live probe's answer: a positive is kept for the file, a negative never.
    pub fn record(&mut self, kind: ExecutorKind, available: bool, detail: &str) {
        if available && cacheable(kind) && self.cached(kind).is_none() {
            self.positives.push((kind, detail.to_string()));
            self.dirty = true;
        }
    }

    /// Replace every positive with a live probe's (what `garuda doctor` found).
    pub fn replace(&mut self, live: &[(ExecutorKind, bool, String)]) {
        self.positives = live
            .iter()
            .filter(|(k, available, _)| *available && cacheable(*k))
            .map(|(k, _, d)| (*k, d.clone()))
            .collect();
        self.dirty = true;
    }

    /// Write the file when it was missing, stale or malformed, or this run learned something.
    /// False when it had to be written and could not be (no Garuda home yet, say).
    pub fn save(&mut self) -> bool {
        let Some(home) = self.home.as_deref() else {
            return false;
        };
        if !self.dirty {
            return true;
        }
        let file = CacheFile {
            version: VERSION,
            key: self.key.clone(),
            executors: self
                .positives
                .iter()
                .map(|(k, d)| Entry {
                    kind: k.name().to_string(),
                    available: true,
                    detail: d.clone(),
                })
                .collect(),
        };
        if write(home, &file).is_ok() {
            self.dirty = false;
        }
        !self.dirty
    }

    /// The file's path (`None`: no Garuda home).
    pub fn path(&self) -> Option<PathBuf> {
        self.home.as_deref().map(path_in)
    }
}

/// An executor chosen on the cache's word. If it cannot start, the cache may be wrong (a
/// poisoned or stale file): the error says so, and the cache is removed so that the next run
/// probes the machine again. The run itself fails (exit 125); it never falls back to another
/// executor.
pub struct CachedExecutor {
    /// The executor.
    pub inner: Box<dyn Executor>,
    /// Garuda's home, whose cache chose it.
    pub home: PathBuf,
}

impl Executor for CachedExecutor {
    fn kind(&self) -> ExecutorKind {
        self.inner.kind()
    }

    fn run_released(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
        release: super::Release<'_>,
    ) -> Result<Outcome, ExecError> {
        match self.inner.run_released(cmd, policy, stdio, release) {
            Err(e @ (ExecError::Unavailable { .. } | ExecError::Setup { .. })) => {
                remove(&self.home);
                Err(ExecError::CachedProbe {
                    executor: self.inner.kind(),
                    cache: path_in(&self.home),
                    source: Box::new(e),
                })
            }
            other => other,
        }
    }
}
