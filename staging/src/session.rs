//! A staging session: its folder, its backend, and the per-command bookkeeping.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, Metadata};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use garuda_policy::StagedView;

use crate::apply::{self, Applied, Recovered};
use crate::beneath::{list_in, source_in, times_of, Beneath, Source, Walk};
use crate::changes::{collect, ChangeSet, Guard, Listing, ENTRY_LIMIT};
use crate::error::{io_err, Result, StagingError};
use crate::fsutil::{
    copy_entry_into, has_overlay_xattr, join, kind_of, lstat, mkdir_mode, real_dir_chain,
    remove_entry, remove_tree, set_opaque, FsTime, Kind,
};
use crate::rules::Rules;
use crate::view::Layout;

/// The most a plain (non-reflink) copy may hold: 2 GiB.
pub const PLAIN_COPY_CAP: u64 = 2 * 1024 * 1024 * 1024;

/// The `staging.backend` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Overlay when usable, else a reflink copy when the filesystem has them, else a plain
    /// copy.
    #[default]
    Auto,
    /// overlayfs only; an error when it is not usable (no silent fallback).
    Overlay,
    /// A copy: reflink when the filesystem has them, else plain.
    Copy,
}

/// The backend a session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// overlayfs in the command's user namespace: lower = the project, upper/work in the
    /// session folder. O(1) to start, change list O(changed files).
    Overlay,
    /// `cp --reflink=always -a`: copy-on-write clones, cheap to start; change list O(project).
    ReflinkCopy,
    /// `cp -a`: a full copy (at most [`PLAIN_COPY_CAP`]); change list O(project).
    PlainCopy,
}

impl Backend {
    /// A short name for messages: `overlay`, `reflink copy`, `plain copy`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Overlay => "overlay",
            Backend::ReflinkCopy => "reflink copy",
            Backend::PlainCopy => "plain copy",
        }
    }
}

/// Returned by [`Session::prepare`]: when the command started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandMark {
    pub(crate) start: FsTime,
}

impl CommandMark {
    /// The start time, as the filesystem's clock recorded it.
    pub fn started_at(&self) -> SystemTime {
        let nsec = u32::try_from(self.start.nsec).unwrap_or(0);
        match u64::try_from(self.start.sec) {
            Ok(sec) => UNIX_EPOCH + Duration::new(sec, nsec),
            Err(_) => UNIX_EPOCH,
        }
    }
}

/// One staging session: a folder under `<garuda_home>/staging/` that lives as long as the
/// Garuda session. See the crate doc.
#[derive(Debug)]
pub struct Session {
    pub(crate) id: String,
    pub(crate) dir: PathBuf,
    pub(crate) backend: Backend,
    pub(crate) layout: Layout,
    /// Project changes at or after this time are brought into staging by the next prepare.
    last_sync: FsTime,
    /// The current command's start (set by prepare).
    pub(crate) mark: Option<FsTime>,
    pub(crate) entry_limit: usize,
    /// What the last change list showed, so apply copies exactly that.
    listing: Mutex<Listing>,
    recovered: Vec<Recovered>,
}

impl Session {
    /// Creates a session (see the crate doc) with the plain-copy cap [`PLAIN_COPY_CAP`].
    /// `overlay_usable` is the caller's probe: can overlayfs be mounted in a user namespace
    /// here (with `userxattr`)?
    pub fn create(
        garuda_home: &Path,
        project: &Path,
        choice: BackendChoice,
        overlay_usable: bool,
    ) -> Result<Session> {
        Session::create_with_cap(garuda_home, project, choice, overlay_usable, PLAIN_COPY_CAP)
    }

    /// [`Session::create`] with another plain-copy cap (tests use a small one).
    pub fn create_with_cap(
        garuda_home: &Path,
        project: &Path,
        choice: BackendChoice,
        overlay_usable: bool,
        plain_copy_cap: u64,
    ) -> Result<Session> {
        let project_c = fs::canonicalize(project).map_err(io_err("open the project", project))?;
        if !project_c.is_dir() {
            return Err(StagingError::ProjectNotDir { path: project_c });
        }
        let root = garuda_home.join("staging");
        fs::create_dir_all(&root).map_err(io_err("create the staging folder", &root))?;
        let root_meta =
            fs::symlink_metadata(&root).map_err(io_err("open the staging folder", &root))?;
        if !root_meta.is_dir() {
            return Err(StagingError::Io {
                op: "open the staging folder",
                path: root,
                source: std::io::Error::other("not a folder (a link?)"),
            });
        }
        // Staging holds a copy of the project and the commands' output: owner only.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700))
            .map_err(io_err("set the mode", &root))?;
        let root = fs::canonicalize(&root).map_err(io_err("open the staging folder", &root))?;
        if root.starts_with(&project_c) || project_c.starts_with(&root) {
            return Err(StagingError::Overlapping {
                staging: root,
                project: project_c,
            });
        }
        if choice == BackendChoice::Overlay && !overlay_usable {
            return Err(StagingError::OverlayUnavailable);
        }
        let recovered = apply::recover(garuda_home)?;

        let id = format!("{}-{}", std::process::id(), random_hex());
        let dir = root.join(&id);
        mkdir_mode(&dir, 0o700)?;
        match Session::fill(&dir, &project_c, choice, overlay_usable, plain_copy_cap) {
            Ok((backend, layout, baseline)) => Ok(Session {
                id,
                dir,
                backend,
                layout,
                last_sync: baseline,
                mark: None,
                entry_limit: ENTRY_LIMIT,
                listing: Mutex::new(Listing::new()),
                recovered,
            }),
            Err(e) => {
                // A failed setup leaves no folder behind.
                let _ = remove_tree(&dir);
                Err(e)
            }
        }
    }

    fn fill(
        dir: &Path,
        project: &Path,
        choice: BackendChoice,
        overlay_usable: bool,
        cap: u64,
    ) -> Result<(Backend, Layout, FsTime)> {
        let baseline = take_mark(dir)?;
        if choice != BackendChoice::Copy && overlay_usable {
            let upper = dir.join("upper");
            let work = dir.join("work");
            // The merged root takes its attributes from upper's root.
            let mode = fs::metadata(project)
                .map(|m| m.mode() & 0o7777)
                .unwrap_or(0o755);
            mkdir_mode(&upper, mode)?;
            mkdir_mode(&work, 0o700)?;
            return Ok((
                Backend::Overlay,
                Layout::Overlay {
                    lower: project.to_path_buf(),
                    upper,
                },
                baseline,
            ));
        }
        let copy = dir.join("copy");
        let reflink = reflink_works(project, dir);
        let (count, size) = measure(project, ENTRY_LIMIT)?;
        if count > ENTRY_LIMIT {
            return Err(StagingError::TooManyFiles {
                project: project.to_path_buf(),
                limit: ENTRY_LIMIT,
            });
        }
        if !reflink && size > cap {
            return Err(StagingError::TooLarge {
                project: project.to_path_buf(),
                size,
                cap,
            });
        }
        copy_tree(project, &copy, reflink)?;
        let backend = if reflink {
            Backend::ReflinkCopy
        } else {
            Backend::PlainCopy
        };
        Ok((
            backend,
            Layout::Copy {
                project: project.to_path_buf(),
                copy,
            },
            baseline,
        ))
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The session folder (`<garuda_home>/staging/<pid>-<hex>`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The session id (`<pid>-<hex>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The project (canonical).
    pub fn project(&self) -> &Path {
        self.layout.project()
    }

    /// Interrupted applies that creating this session finished or rolled back, and the dead
    /// sessions it removed.
    pub fn recovered(&self) -> &[Recovered] {
        &self.recovered
    }

    /// Changes how many entries a change list may walk (default [`ENTRY_LIMIT`]). For tests
    /// and tuning; a higher limit makes each list slower, never less safe.
    pub fn set_entry_limit(&mut self, limit: usize) {
        self.entry_limit = limit;
    }

    /// What the executor mounts at the project's path.
    pub fn view(&self) -> StagedView {
        match &self.layout {
            Layout::Overlay { lower, upper } => StagedView::Overlay {
                lower: lower.clone(),
                upper: upper.clone(),
                work: self.dir.join("work"),
            },
            Layout::Copy { copy, .. } => StagedView::Copy { dir: copy.clone() },
        }
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(crate) fn listing(&self) -> MutexGuard<'_, Listing> {
        // A poisoned lock only means another thread panicked while listing; the map is still
        // a map, and apply verifies every entry against the disk anyway.
        self.listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Before each command: records the start time (the conflict check's reference) and
    /// brings staging up to date with every project path changed since the last command, so
    /// Garuda's own edits and the developer's are what the next command sees. The project
    /// wins over a change kept in staging (an ignored file, a change left after a conflict)
    /// for a path the project changed.
    pub fn prepare(&mut self) -> Result<CommandMark> {
        // The mark comes first: an edit made while staging is brought up to date is then
        // after the mark, so it is a conflict rather than a silently lost edit.
        let mark = take_mark(&self.dir)?;
        match self.layout.clone() {
            Layout::Overlay { lower, upper } => sync_overlay(&lower, &upper, self.last_sync)?,
            Layout::Copy { project, copy } => {
                sync_copy(&self.layout, &project, &copy, self.last_sync)?
            }
        }
        self.last_sync = mark;
        self.mark = Some(mark);
        self.listing().clear();
        Ok(CommandMark { start: mark })
    }

    /// After the command: what it changed (see the crate doc).
    pub fn changes(&self, mark: &CommandMark) -> Result<ChangeSet> {
        let (set, listing) = collect(&self.layout, mark.start, self.entry_limit);
        *self.listing() = listing;
        Ok(set)
    }

    /// Applies a change list to the project: all or nothing, after the conflict check,
    /// through the crash-safe journal (see the crate doc). On success the applied entries are
    /// removed from staging so the project shows through again.
    ///
    /// A change that a [`Guard`] covers (under `.garuda/`: Garuda's project settings; a
    /// sensitive file) is refused with [`StagingError::Guarded`] and nothing is applied: it
    /// needs a question of its own, after which the caller uses [`Session::apply_approved`].
    pub fn apply(&mut self, set: &ChangeSet) -> Result<Applied> {
        self.apply_approved(set, &[])
    }

    /// [`Session::apply`], changes covered by the `approved` guards included: the explicit
    /// opt-in, for a caller that asked the developer about each of them separately (or was
    /// told by a flag of its own, such as the CLI's `--apply-sensitive`). A guard not in
    /// `approved` that covers a change refuses the whole change, as in [`Session::apply`].
    pub fn apply_approved(&mut self, set: &ChangeSet, approved: &[Guard]) -> Result<Applied> {
        for guard in Guard::ALL {
            if approved.contains(&guard) {
                continue;
            }
            let paths: Vec<String> = set.guarded(guard).iter().map(|c| c.path.clone()).collect();
            if !paths.is_empty() {
                return Err(StagingError::Guarded { guard, paths });
            }
        }
        apply::apply(self, set)
    }

    /// Drops the shown changes from staging; ignored changes stay for the next command. An
    /// incomplete list resets the whole staging layer, ignored files included, since what it
    /// holds was never fully listed.
    pub fn discard(&mut self, set: &ChangeSet) -> Result<()> {
        let r = apply::discard(self, set);
        self.listing().clear();
        r
    }

    /// Removes the session folder, first finishing an apply of this session that was
    /// committed but not completed.
    pub fn close(self) -> Result<()> {
        apply::finish_journal(&self.dir)?;
        remove_tree(&self.dir)
    }

    /// Empties the staging layer (overlay: upper and work; copy: a new copy).
    pub(crate) fn reset(&mut self) -> Result<()> {
        match &self.layout {
            Layout::Overlay { lower, upper } => {
                let mode = fs::metadata(lower)
                    .map(|m| m.mode() & 0o7777)
                    .unwrap_or(0o755);
                let work = self.dir.join("work");
                remove_tree(upper)?;
                remove_tree(&work)?;
                mkdir_mode(upper, mode)?;
                mkdir_mode(&work, 0o700)
            }
            Layout::Copy { project, copy } => {
                remove_tree(copy)?;
                copy_tree(project, copy, self.backend == Backend::ReflinkCopy)
            }
        }
    }
}

/// A time on the filesystem's clock that every later change is at or after, and every
/// earlier change is before. Written as a file's ctime; written twice when needed so the
/// mark is strictly after anything written before the call (coarse kernel clocks tick every
/// few milliseconds; kernels with multigrain timestamps give a fine one on the second write).
fn take_mark(dir: &Path) -> Result<FsTime> {
    let p = dir.join("mark");
    let write = |p: &Path| -> Result<FsTime> {
        fs::write(p, b"m").map_err(io_err("write the command mark", p))?;
        let m = fs::symlink_metadata(p).map_err(io_err("read the command mark", p))?;
        Ok(FsTime::ctime(&m))
    };
    let first = write(&p)?;
    let deadline = Instant::now() + Duration::from_millis(50);
    loop {
        let next = write(&p)?;
        if next > first || Instant::now() > deadline {
            return Ok(next);
        }
        std::thread::sleep(Duration::from_micros(250));
    }
}

/// 16 hex digits from the kernel's random source (the time and pid when unavailable: the id
/// only has to be unique, not secret).
fn random_hex() -> String {
    let mut buf = [0u8; 8];
    let ok = fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mixed = (t as u64) ^ (u64::from(std::process::id()) << 32);
        buf = mixed.to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Probes a reflink clone (`FICLONE`) of one regular file of the project (opened beneath its
/// root, `O_NOFOLLOW`) into the session folder; ext4 has none. Without a file near the top of
/// the project, a file of the session folder is cloned instead.
fn reflink_works(project: &Path, dir: &Path) -> bool {
    let probe_dest = dir.join("reflink-probe");
    let source = match first_file(project) {
        Some(f) => Some(f),
        None => {
            let p = dir.join("reflink-source");
            let _ = fs::write(&p, b"probe");
            fs::File::open(&p).ok()
        }
    };
    let ok = source.is_some_and(|src| {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe_dest)
            .is_ok_and(|dst| rustix::fs::ioctl_ficlone(&dst, &src).is_ok())
    });
    let _ = fs::remove_file(&probe_dest);
    let _ = fs::remove_file(dir.join("reflink-source"));
    ok
}

/// The first non-empty regular file among the project's first 1,000 entries, opened.
fn first_file(project: &Path) -> Option<fs::File> {
    let beneath = Beneath::open(project).ok()?;
    let mut seen = 0;
    let mut found = None;
    let _ = beneath.walk_tree("", |rel, m, parent, name| {
        seen += 1;
        if seen > 1000 {
            return Ok(Walk::Stop);
        }
        if m.file_type().is_file() && m.len() > 0 {
            let rel = rel.to_string_lossy();
            if let Ok(Source::File(f, _)) = source_in(parent, name, &rel, project) {
                found = Some(f);
                return Ok(Walk::Stop);
            }
        }
        Ok(Walk::Descend)
    });
    found
}

/// Entries and bytes (apparent size of regular files) of the project, walked beneath its
/// root; stops counting past `limit` entries.
fn measure(project: &Path, limit: usize) -> Result<(usize, u64)> {
    let beneath = Beneath::open(project)?;
    let mut count = 0usize;
    let mut size = 0u64;
    beneath.walk_tree("", |_, m, _, _| {
        count += 1;
        if count > limit {
            return Ok(Walk::Stop);
        }
        if m.is_file() {
            size = size.saturating_add(m.len());
        }
        Ok(Walk::Descend)
    })?;
    Ok((count, size))
}

/// Copies the project into `dest` (which must not exist), the way `cp -a` would, but walking
/// the project beneath its held root: every folder is opened from the one above without
/// following a link, and every file with `O_NOFOLLOW` from its folder's descriptor. A
/// command running in direct mode in the same project that swaps a folder for a link while
/// the copy runs gets a refusal ([`StagingError::UnsafeProjectPath`]), never a file from
/// outside the project in the staged view. (`cp` walks by path name, so a swapped folder
/// would be followed.)
///
/// Copied: folders, regular files (a reflink clone with `reflink`, else the bytes), links as
/// links, FIFOs and sockets; all permission bits, owner and group where allowed (as root),
/// access and modification times. Devices that cannot be made (not root) are left out (the
/// change list counts them as ignored); hard links become separate files; xattrs and ACLs are
/// not copied (nothing compares or applies them). A failed copy leaves nothing at `dest`.
fn copy_tree(project: &Path, dest: &Path, reflink: bool) -> Result<()> {
    let r = copy_tree_inner(project, dest, reflink);
    if let Err(e) = r {
        let _ = remove_tree(dest);
        return Err(match e {
            e @ StagingError::UnsafeProjectPath { .. } => e,
            e => StagingError::CopyFailed {
                project: project.to_path_buf(),
                dest: dest.to_path_buf(),
                reason: e.to_string(),
            },
        });
    }
    Ok(())
}

fn copy_tree_inner(project: &Path, dest: &Path, reflink: bool) -> Result<()> {
    let beneath = Beneath::open(project)?;
    let root_meta = fs::File::from(
        rustix::io::dup(beneath.root().as_fd())
            .map_err(|e| io_err("open the project", project)(e.into()))?,
    )
    .metadata()
    .map_err(io_err("read", project))?;
    mkdir_mode(dest, 0o700)?;
    // Folder modes and times are set last (deepest first): writing inside a folder changes
    // its mtime, and a read-only folder could not be filled.
    let mut dirs: Vec<(PathBuf, Metadata)> = vec![(dest.to_path_buf(), root_meta)];
    beneath.walk_tree("", |rel, m, parent, name| {
        let to = dest.join(rel);
        let t = m.file_type();
        if t.is_dir() {
            mkdir_mode(&to, 0o700)?;
            dirs.push((to, m.clone()));
            return Ok(Walk::Descend);
        }
        if t.is_symlink() || t.is_file() {
            // Opened as what it is now, never followed: a link is read as a link, a file
            // with O_NOFOLLOW; anything else there now is refused.
            match source_in(parent, name, &rel.to_string_lossy(), project)? {
                Source::Missing => {}
                Source::Link(target) => {
                    std::os::unix::fs::symlink(&target, &to)
                        .map_err(io_err("create the link", &to))?;
                    let _ = rustix::fs::chownat(
                        rustix::fs::CWD,
                        &to,
                        Some(rustix::fs::Uid::from_raw(m.uid())),
                        Some(rustix::fs::Gid::from_raw(m.gid())),
                        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                    );
                    let _ = rustix::fs::utimensat(
                        rustix::fs::CWD,
                        &to,
                        &times_of(m),
                        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                    );
                }
                Source::File(mut src, sm) => {
                    let mut out = fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&to)
                        .map_err(io_err("create", &to))?;
                    if reflink {
                        rustix::fs::ioctl_ficlone(&out, &src)
                            .map_err(|e| io_err("clone (reflink)", &to)(e.into()))?;
                    } else {
                        std::io::copy(&mut src, &mut out)
                            .map_err(io_err("copy", project.join(rel)))?;
                    }
                    let _ = rustix::fs::fchown(
                        &out,
                        Some(rustix::fs::Uid::from_raw(sm.uid())),
                        Some(rustix::fs::Gid::from_raw(sm.gid())),
                    );
                    out.set_permissions(fs::Permissions::from_mode(sm.mode() & 0o7777))
                        .map_err(io_err("set the mode", &to))?;
                    rustix::fs::futimens(&out, &times_of(&sm))
                        .map_err(|e| io_err("set the time", &to)(e.into()))?;
                }
            }
            return Ok(Walk::Skip);
        }
        // FIFO, socket, device: made again (never opened). A device needs root.
        let made = rustix::fs::mknodat(
            rustix::fs::CWD,
            &to,
            rustix::fs::FileType::from_raw_mode(m.mode()),
            rustix::fs::Mode::from_raw_mode(m.mode() & 0o7777),
            m.rdev(),
        );
        match made {
            Ok(()) => {
                let _ = rustix::fs::utimensat(
                    rustix::fs::CWD,
                    &to,
                    &times_of(m),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            Err(rustix::io::Errno::PERM) if t.is_block_device() || t.is_char_device() => {}
            Err(e) => return Err(io_err("create the special file", &to)(e.into())),
        }
        Ok(Walk::Skip)
    })?;
    for (d, m) in dirs.iter().rev() {
        let _ = rustix::fs::chownat(
            rustix::fs::CWD,
            d,
            Some(rustix::fs::Uid::from_raw(m.uid())),
            Some(rustix::fs::Gid::from_raw(m.gid())),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        );
        fs::set_permissions(d, fs::Permissions::from_mode(m.mode() & 0o7777))
            .map_err(io_err("set the folder's mode", d))?;
        let _ = rustix::fs::utimensat(
            rustix::fs::CWD,
            d,
            &times_of(m),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        );
    }
    Ok(())
}

fn changed_since(m: &Metadata, since: FsTime) -> bool {
    FsTime::ctime(m).at_or_after(since)
}

/// Overlay: the project (lower) is live, so only entries that staging keeps over a project
/// path the project changed need work. A kept file or whiteout over a changed project path is
/// dropped (the project shows through); inside an opaque folder, where the project cannot
/// show through, the project's new version is copied into upper instead.
fn sync_overlay(lower: &Path, upper: &Path, since: FsTime) -> Result<()> {
    // The project is read beneath its held root: a folder swapped for a link is not followed.
    let beneath = Beneath::open(lower)?;
    let mut opaque_dirs = Vec::new();
    let mut stack: Vec<(String, bool)> = vec![(String::new(), false)];
    while let Some((dir, under_opaque)) = stack.pop() {
        let dpath = join(upper, &dir);
        let rd = fs::read_dir(&dpath).map_err(io_err("list", &dpath))?;
        for e in rd {
            let e = e.map_err(io_err("list", &dpath))?;
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let path = upper.join(&rel);
            let Some(m) = lstat(&path).map_err(io_err("read", &path))? else {
                continue;
            };
            let kind = kind_of(&path, &m, true);
            if kind == Kind::Dir {
                let opaque = has_overlay_xattr(&path, "opaque", Some(b"y"));
                if opaque && !under_opaque {
                    opaque_dirs.push(rel.clone());
                }
                stack.push((rel, under_opaque || opaque));
                continue;
            }
            let Some(lm) = beneath.stat(&rel)? else {
                continue;
            };
            if !changed_since(&lm, since) {
                continue;
            }
            if lm.file_type().is_dir() {
                if kind == Kind::Whiteout && !under_opaque {
                    remove_entry(&path)?;
                }
            } else if under_opaque {
                copy_entry_into(&beneath, &rel, &path)?;
            } else {
                remove_entry(&path)?;
            }
        }
    }
    for o in opaque_dirs {
        sync_hidden(&beneath, upper, &o, since)?;
    }
    Ok(())
}

/// Copies project entries changed since `since` that an opaque upper folder hides (and that
/// upper has no entry for) into upper, creating the folders between as opaque ones.
fn sync_hidden(project: &Beneath, upper: &Path, opaque: &str, since: FsTime) -> Result<()> {
    let mut stack = vec![opaque.to_string()];
    while let Some(dir) = stack.pop() {
        // Listed from the folder's own descriptor, reached without following a link.
        let Ok(Some(dfd)) = project.dir(&dir, &dir) else {
            continue;
        };
        let Ok(entries) = list_in(dfd.as_fd()) else {
            continue;
        };
        for (name, lm) in entries {
            let Ok(name) = name.into_string() else {
                continue;
            };
            let rel = format!("{dir}/{name}");
            let upath = upper.join(&rel);
            let um = lstat(&upath).map_err(io_err("read", &upath))?;
            if lm.file_type().is_dir() {
                if um.as_ref().is_none_or(|u| u.file_type().is_dir()) {
                    stack.push(rel);
                }
                continue;
            }
            if um.is_some() || !changed_since(&lm, since) {
                continue;
            }
            // Make the upper folders down to it; new ones are opaque, like the one above.
            let mut known = HashSet::new();
            for anc in crate::fsutil::ancestors_rel(&rel) {
                let ap = upper.join(anc);
                match lstat(&ap).map_err(io_err("read", &ap))? {
                    Some(m) if m.file_type().is_dir() => {}
                    Some(_) => return Ok(()),
                    None => {
                        let mode = project
                            .stat(anc)?
                            .map(|m| m.mode() & 0o777)
                            .unwrap_or(0o755);
                        mkdir_mode(&ap, mode)?;
                        set_opaque(&ap)?;
                    }
                }
            }
            if real_dir_chain(upper, &rel, &mut known).map_err(io_err("read", &upath))? {
                copy_entry_into(project, &rel, &upath)?;
            }
        }
    }
    Ok(())
}

/// Copy: every project entry changed since `since` is copied into the copy (the project wins
/// for the paths it changed). An entry only in the copy is removed unless it is ignored (an
/// ignored file a command made stays for the next command).
fn sync_copy(layout: &Layout, project: &Path, copy: &Path, since: FsTime) -> Result<()> {
    // The project is walked and read beneath its held root, never through a link.
    let beneath = Beneath::open(project)?;
    let pmap = walk_project(&beneath)?;
    let cmap = walk_all(copy)?;
    let mut known = HashSet::new();
    for (rel, pm) in &pmap {
        if !changed_since(pm, since) {
            continue;
        }
        let dest = copy.join(rel);
        // Make sure the folders down to it are real folders in the copy.
        let mut ok = true;
        for anc in crate::fsutil::ancestors_rel(rel) {
            let ap = copy.join(anc);
            match lstat(&ap).map_err(io_err("read", &ap))? {
                Some(m) if m.file_type().is_dir() => {}
                other => {
                    if other.is_some() {
                        remove_entry(&ap)?;
                    }
                    let mode = pmap.get(anc).map(|m| m.mode() & 0o777).unwrap_or(0o755);
                    if mkdir_mode(&ap, mode).is_err() {
                        ok = false;
                        break;
                    }
                }
            }
        }
        known.clear();
        if !ok || !real_dir_chain(copy, rel, &mut known).map_err(io_err("read", &dest))? {
            continue;
        }
        if pm.file_type().is_dir() {
            match lstat(&dest).map_err(io_err("read", &dest))? {
                Some(m) if m.file_type().is_dir() => {
                    let _ =
                        fs::set_permissions(&dest, fs::Permissions::from_mode(pm.mode() & 0o777));
                }
                other => {
                    if other.is_some() {
                        remove_entry(&dest)?;
                    }
                    mkdir_mode(&dest, pm.mode() & 0o777)?;
                }
            }
        } else if pm.file_type().is_file() || pm.file_type().is_symlink() {
            copy_entry_into(&beneath, rel, &dest)?;
        }
    }
    let mut rules = Rules::new(layout);
    for (rel, cm) in cmap.iter().rev() {
        if pmap.contains_key(rel) || cm.file_type().is_dir() {
            continue;
        }
        if !matches!(rules.is_ignored(rel, false), Ok(true)) {
            known.clear();
            if real_dir_chain(copy, rel, &mut known).unwrap_or(false) {
                remove_entry(&copy.join(rel))?;
            }
        }
    }
    Ok(())
}

/// Every project entry with a UTF-8 path, walked beneath the project's root.
fn walk_project(beneath: &Beneath) -> Result<BTreeMap<String, Metadata>> {
    let mut out = BTreeMap::new();
    beneath.walk_tree("", |rel, m, _, _| {
        let Some(rel) = rel.to_str() else {
            return Ok(Walk::Skip);
        };
        out.insert(rel.to_string(), m.clone());
        Ok(Walk::Descend)
    })?;
    Ok(out)
}

/// Every entry of a staging folder (no command can write there while this runs).
fn walk_all(root: &Path) -> Result<BTreeMap<String, Metadata>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let dpath = join(root, &dir);
        for e in fs::read_dir(&dpath).map_err(io_err("list", &dpath))? {
            let e = e.map_err(io_err("list", &dpath))?;
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let m = fs::symlink_metadata(e.path()).map_err(io_err("read", e.path()))?;
            if m.is_dir() {
                stack.push(rel.clone());
            }
            out.insert(rel, m);
        }
    }
    Ok(out)
}
