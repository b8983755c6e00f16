//! Apply (crash-safe, all or nothing), discard, and recovery of interrupted applies.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::beneath::{split, stat_in, Beneath, Walk};
use crate::changes::{ChangeKind, ChangeSet, StagedRef};
use crate::error::{io_err, FoundKind, Result, StagingError};
use crate::fsutil::{
    ancestors_rel, clear_opaque, copy_entry_into, fsync_dir, has_overlay_xattr, is_plain_rel, join,
    kind_of, lstat, lstat_rel, mkdir_mode, parent_rel, real_dir_chain, remove_dir_if_empty,
    remove_entry, remove_tree, Fingerprint, FsTime, Kind, PERM_MASK,
};
use crate::rules::in_git_dir;
use crate::session::Session;
use crate::view::{Layout, ViewEntry};

/// The journal while the apply is being prepared: its presence after a crash means "roll back".
pub const JOURNAL_PENDING: &str = "apply.pending";
/// The journal after the commit point: its presence after a crash means "roll forward".
pub const JOURNAL_COMMIT: &str = "apply.commit";
/// Set to one of these to make an apply abort the process at that point (crash tests).
pub const FAILPOINT_ENV: &str = "GARUDA_FAILPOINT";
/// Temporary files next to their targets are named `.<name>.garuda-apply-<session id>`.
const TEMP_TAG: &str = "garuda-apply-";

/// What an apply did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Files and links written (added, modified, mode changed), project-relative.
    pub written: Vec<String>,
    /// Files and links deleted, project-relative.
    pub deleted: Vec<String>,
}

impl fmt::Display for Applied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.written.len();
        let d = self.deleted.len();
        write!(
            f,
            "{w} {} written, {d} {} deleted",
            if w == 1 { "file" } else { "files" },
            if d == 1 { "file" } else { "files" }
        )
    }
}

/// What [`recover`] did for one staging folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The staging folder.
    pub session_dir: PathBuf,
    /// The project the journal was applying to (`None` for a plain cleanup).
    pub project: Option<PathBuf>,
    /// What was done.
    pub action: RecoveryAction,
    /// Number of files written or deleted (roll forward) or temporary files removed (roll
    /// back).
    pub files: usize,
}

/// The three outcomes of recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryAction {
    /// The apply had passed its commit point: it was finished; the project is fully new.
    RolledForward,
    /// The apply had not committed: its temporary files were removed; the project is fully
    /// old.
    RolledBack,
    /// The folder of a session whose process has ended was removed.
    RemovedDeadSession,
}

impl fmt::Display for Recovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let project = self
            .project
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        match self.action {
            RecoveryAction::RolledForward => write!(
                f,
                "finished an interrupted apply to {project} ({} files; journal in {})",
                self.files,
                self.session_dir.display()
            ),
            RecoveryAction::RolledBack => write!(
                f,
                "rolled back an interrupted apply to {project}: the project is unchanged ({} temporary files removed)",
                self.files
            ),
            RecoveryAction::RemovedDeadSession => {
                write!(f, "removed the staging folder of an ended session: {}", self.session_dir.display())
            }
        }
    }
}

/// Version of the journal format. Version 1 (the only one so far) stores absolute paths, each
/// inside `project`; recovery turns them back into project-relative [`Steps`] and works
/// beneath the project's held root.
const JOURNAL_VERSION: u32 = 1;

/// The journal as written to disk.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    version: u32,
    project: PathBuf,
    /// In order: every `delete` entry is done first, then `rmdirs`, then every rename.
    entries: Vec<Entry>,
    /// Folders the change removed, deepest first; removed only when empty.
    rmdirs: Vec<PathBuf>,
    /// Folders created for new files before the commit, shallowest first (a roll back
    /// removes them when empty).
    created_dirs: Vec<PathBuf>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    target: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    temp: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    delete: bool,
}

/// What an apply does, project-relative (the journal's content, validated).
#[derive(Debug)]
struct Steps {
    project: PathBuf,
    /// In order: every `delete` entry is done first, then `rmdirs`, then every rename.
    entries: Vec<Step>,
    /// Folders the change removed, deepest first; removed only when empty.
    rmdirs: Vec<String>,
    /// Folders created for new files before the commit, shallowest first.
    created_dirs: Vec<String>,
}

#[derive(Debug)]
struct Step {
    target: String,
    /// The temporary file's name. It is always in the target's folder, so the rename never
    /// leaves that folder (one held descriptor for both names).
    temp: Option<String>,
    delete: bool,
}

impl Steps {
    fn to_journal(&self) -> Journal {
        let abs = |rel: &str| self.project.join(rel);
        Journal {
            version: JOURNAL_VERSION,
            project: self.project.clone(),
            entries: self
                .entries
                .iter()
                .map(|e| Entry {
                    target: abs(&e.target),
                    temp: e
                        .temp
                        .as_ref()
                        .map(|t| abs(&join_rel(split(&e.target).0, t))),
                    delete: e.delete,
                })
                .collect(),
            rmdirs: self.rmdirs.iter().map(|d| abs(d)).collect(),
            created_dirs: self.created_dirs.iter().map(|d| abs(d)).collect(),
        }
    }
}

/// `parent/name`, or `name` at the top.
fn join_rel(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

fn failpoint(name: &str) {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == name) {
        std::process::abort();
    }
}

/// See [`Session::apply`].
pub(crate) fn apply(session: &mut Session, set: &ChangeSet) -> Result<Applied> {
    if let Some(reason) = &set.incomplete {
        return Err(StagingError::Incomplete {
            reason: reason.clone(),
        });
    }
    if let Some(c) = set
        .changes
        .iter()
        .find(|c| c.kind == ChangeKind::LinkOutOfRoot)
    {
        return Err(StagingError::LinkOutOfRoot {
            path: c.path.clone(),
        });
    }
    if set.changes.is_empty() {
        return Ok(Applied::default());
    }
    let Some(mark) = session.mark else {
        return Err(StagingError::Unsupported {
            path: String::new(),
            reason: "apply before any command was prepared (no start time for the conflict check)"
                .into(),
        });
    };
    let layout = session.layout().clone();
    let project = layout.project().to_path_buf();

    // A hand-made or stale list must not reach outside the project or into `.git`.
    for c in &set.changes {
        if !is_plain_rel(&c.path) || in_git_dir(&c.path) {
            return Err(StagingError::Unsupported {
                path: c.path.clone(),
                reason: "not a plain path inside the project (or inside .git)".into(),
            });
        }
    }

    // What is in staging must be what was listed (and shown).
    {
        let listing = session.listing();
        for c in &set.changes {
            let ok = match (listing.get(&c.path), layout.view(&c.path)) {
                (Some(StagedRef::File(fp)), Ok(ViewEntry::Staged(_, m))) => {
                    m.file_type().is_file() && Fingerprint::of(&m) == *fp
                }
                (Some(StagedRef::Link(t)), Ok(ViewEntry::Staged(p, m))) => {
                    m.file_type().is_symlink() && fs::read_link(&p).ok().as_ref() == Some(t)
                }
                (Some(StagedRef::Gone), Ok(ViewEntry::Absent)) => true,
                (Some(StagedRef::Gone), Ok(ViewEntry::Staged(_, m))) => m.file_type().is_dir(),
                _ => false,
            };
            if !ok {
                return Err(StagingError::StagedChanged {
                    path: c.path.clone(),
                });
            }
        }
    }

    // From here on the project is only reached through descriptors, from its root down,
    // never through a link (see `beneath`). One descriptor per folder of the change stays
    // open from the conflict check to the last rename.
    let mut beneath = Beneath::open(&project)?;
    let folders: BTreeSet<&str> = set
        .changes
        .iter()
        .flat_map(|c| ancestors_rel(&c.path))
        .collect();
    beneath.reserve(folders.len() + 1)?;

    // Conflict check: the project path must be as it was when the command started. The
    // folder it is in is pinned here, and the plan and the writes use that same folder.
    let mut conflicts = Vec::new();
    for c in &set.changes {
        let (parent, name) = split(&c.path);
        let now = match beneath.pin(parent, &c.path) {
            Ok(Some(fd)) => stat_in(fd.as_fd(), OsStr::new(name))
                .map_err(io_err("read", project.join(&c.path)))?,
            Ok(None) => None,
            // Nothing can be below a file; the plan refuses to put a folder there.
            Err(StagingError::UnsafeProjectPath {
                found: FoundKind::File | FoundKind::Special,
                ..
            }) => None,
            // A link (or an entry swapped while it was opened) on the way: refused as a whole.
            Err(e) => return Err(e),
        };
        let now_entry = now.as_ref().filter(|m| !m.file_type().is_dir());
        let existed = c.mode_before.is_some();
        let conflict = match now_entry {
            Some(m) => !existed || FsTime::ctime(m).at_or_after(mark),
            None => existed,
        };
        if conflict {
            conflicts.push(c.path.clone());
        }
    }
    if !conflicts.is_empty() {
        return Err(StagingError::Conflict { paths: conflicts });
    }

    let plan = plan(session, set, &layout, &mut beneath)?;
    run_plan(session, &plan, &mut beneath)?;
    let applied = Applied {
        written: set
            .changes
            .iter()
            .filter(|c| c.kind != ChangeKind::Deleted)
            .map(|c| c.path.clone())
            .collect(),
        deleted: set
            .changes
            .iter()
            .filter(|c| c.kind == ChangeKind::Deleted)
            .map(|c| c.path.clone())
            .collect(),
    };
    drop(beneath);
    // The project now has these changes; staging stops holding them (best effort: an entry
    // left behind equals the project and lists as no change).
    if let Layout::Overlay { lower, upper } = &layout {
        let _ = overlay_after_apply(lower, upper, set);
    }
    session.listing().clear();
    Ok(applied)
}

struct Plan {
    steps: Steps,
    /// For each write: (target, temp, staged source, fingerprint or link target, mode).
    writes: Vec<PlannedWrite>,
    /// Permission bits of each of `steps.created_dirs`: the staged folder's.
    created_modes: Vec<u32>,
}

struct PlannedWrite {
    rel: String,
    /// File name of the temporary file, in the target's folder.
    temp: String,
    source: PlannedSource,
}

enum PlannedSource {
    File {
        path: PathBuf,
        fingerprint: Fingerprint,
        mode: u32,
    },
    Link(PathBuf),
}

fn plan(
    session: &Session,
    set: &ChangeSet,
    layout: &Layout,
    beneath: &mut Beneath,
) -> Result<Plan> {
    let deleted: BTreeSet<&str> = set
        .changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Deleted)
        .map(|c| c.path.as_str())
        .collect();
    let mut entries = Vec::new();
    let mut writes = Vec::new();
    let mut created_dirs: Vec<String> = Vec::new();
    let mut rmdirs: BTreeSet<String> = BTreeSet::new();
    let listing = session.listing();
    for (i, c) in set.changes.iter().enumerate() {
        let (parent, name) = split(&c.path);
        if c.kind == ChangeKind::Deleted {
            entries.push(Step {
                target: c.path.clone(),
                temp: None,
                delete: true,
            });
            // Folders the command removed go too, once empty.
            for anc in ancestors_rel(&c.path).collect::<Vec<_>>().into_iter().rev() {
                if layout.has_dir(anc) {
                    break;
                }
                rmdirs.insert(anc.to_string());
            }
            continue;
        }
        // The folder the new entry goes in: the one the conflict check pinned, or, when that
        // one was missing, new folders made under the deepest one that exists (pinned now).
        let parent_fd = beneath.pinned(parent);
        if parent_fd.is_none() {
            let mut missing = false;
            for anc in ancestors_rel(&c.path) {
                if !missing && beneath.pin(anc, &c.path)?.is_none() {
                    missing = true;
                }
                if missing && !created_dirs.iter().any(|d| d == anc) {
                    created_dirs.push(anc.to_string());
                }
            }
            if !missing {
                // The folder appeared after the conflict check looked: it was not checked.
                return Err(StagingError::Conflict {
                    paths: vec![c.path.clone()],
                });
            }
        }
        // A file replacing a project folder: every file in that folder must be deleted by
        // this same change, so the folder can be removed before the rename.
        if let Some(fd) = &parent_fd {
            let here = stat_in(fd.as_fd(), OsStr::new(name))
                .map_err(io_err("read", beneath.root_path().join(&c.path)))?;
            if here.is_some_and(|m| m.file_type().is_dir()) {
                let inner = list_files(beneath, &c.path)?;
                if let Some(kept) = inner.files.iter().find(|f| !deleted.contains(f.as_str())) {
                    return Err(StagingError::Unsupported {
                        path: c.path.clone(),
                        reason: format!("the project folder there still holds {kept}, which the change does not delete"),
                    });
                }
                rmdirs.extend(inner.dirs);
                rmdirs.insert(c.path.clone());
            }
        }
        let temp = temp_name(name, &session.id, i);
        entries.push(Step {
            target: c.path.clone(),
            temp: Some(temp.clone()),
            delete: false,
        });
        let source = match listing.get(&c.path) {
            Some(StagedRef::File(fp)) => PlannedSource::File {
                path: join(layout.staged_root(), &c.path),
                fingerprint: *fp,
                mode: c.mode_after.unwrap_or(0o644) & PERM_MASK,
            },
            Some(StagedRef::Link(t)) => PlannedSource::Link(t.clone()),
            _ => {
                return Err(StagingError::StagedChanged {
                    path: c.path.clone(),
                })
            }
        };
        writes.push(PlannedWrite {
            rel: c.path.clone(),
            temp,
            source,
        });
    }
    // Deepest first.
    let mut rmdirs: Vec<String> = rmdirs.into_iter().collect();
    rmdirs.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    let created_modes = created_dirs
        .iter()
        .map(|d| match layout.view(d) {
            Ok(ViewEntry::Staged(_, m)) if m.file_type().is_dir() => (m.mode() & PERM_MASK) | 0o700,
            _ => 0o755,
        })
        .collect();
    Ok(Plan {
        created_modes,
        steps: Steps {
            project: beneath.root_path().to_path_buf(),
            entries,
            rmdirs,
            created_dirs,
        },
        writes,
    })
}

struct Listed {
    files: Vec<String>,
    dirs: Vec<String>,
}

/// Files (and links) and folders under a project folder, relative to the project, walked
/// from its pinned parent without following a link.
fn list_files(beneath: &Beneath, rel: &str) -> Result<Listed> {
    let mut out = Listed {
        files: Vec::new(),
        dirs: Vec::new(),
    };
    beneath.walk_tree(rel, |path, m, _, _| {
        let Some(r) = path.to_str() else {
            return Err(StagingError::Unsupported {
                path: rel.to_string(),
                reason: format!(
                    "the project folder there holds {}, whose name is not UTF-8",
                    path.display()
                ),
            });
        };
        if m.file_type().is_dir() {
            out.dirs.push(r.to_string());
        } else {
            out.files.push(r.to_string());
        }
        Ok(Walk::Descend)
    })?;
    Ok(out)
}

/// `.<name>.garuda-apply-<session id>`, or a short fallback when that is too long a name.
fn temp_name(name: &str, id: &str, i: usize) -> String {
    let candidate = format!(".{name}.{TEMP_TAG}{id}");
    if candidate.len() <= 255 {
        candidate
    } else {
        format!(".{TEMP_TAG}{id}-{i}")
    }
}

/// Steps 2–5 of the crate doc's apply.
fn run_plan(session: &Session, plan: &Plan, beneath: &mut Beneath) -> Result<()> {
    let pending = session.dir.join(JOURNAL_PENDING);
    let commit = session.dir.join(JOURNAL_COMMIT);
    for j in [&pending, &commit] {
        if j.exists() {
            return Err(StagingError::Journal {
                path: j.clone(),
                reason: "an earlier apply of this session is unfinished".into(),
            });
        }
    }
    // The plan is written before any temporary file exists, so a crash at any later moment
    // leaves a journal that names every temporary file to clean up.
    write_journal(&pending, &plan.steps.to_journal())?;
    fsync_dir(&session.dir)?;

    if let Err(e) = make_temps(plan, beneath) {
        roll_back(&plan.steps, beneath);
        let _ = fs::remove_file(&pending);
        return Err(e);
    }

    failpoint("apply-before-commit");
    // THE COMMIT POINT: from here a crash is rolled forward.
    if let Err(e) =
        fs::rename(&pending, &commit).map_err(io_err("commit the apply journal", &commit))
    {
        roll_back(&plan.steps, beneath);
        let _ = fs::remove_file(&pending);
        return Err(e);
    }
    let finish =
        fsync_dir(&session.dir).and_then(|()| roll_forward(&plan.steps, beneath, true).map(|_| ()));
    if let Err(e) = finish {
        return Err(StagingError::CommitUnfinished {
            journal: commit,
            source: Box::new(e),
        });
    }
    fs::remove_file(&commit).map_err(io_err("remove the apply journal", &commit))?;
    fsync_dir(&session.dir)
}

fn write_journal(path: &Path, journal: &Journal) -> Result<()> {
    let text = serde_json::to_vec_pretty(journal).map_err(|e| StagingError::Journal {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err("create the apply journal", path))?;
    f.write_all(&text)
        .and_then(|()| f.sync_all())
        .map_err(io_err("write the apply journal", path))
}

/// The folder pinned at `rel`. Every folder an apply writes in was pinned when the change
/// was checked (or made); one that was not is never looked up by name instead.
fn held(beneath: &Beneath, rel: &str, for_path: &str) -> Result<Rc<OwnedFd>> {
    beneath
        .pinned(rel)
        .ok_or_else(|| StagingError::Unsupported {
            path: for_path.to_string(),
            reason: format!(
                "the folder {rel:?} was not checked before the write (a bug in Garuda)"
            ),
        })
}

/// Step 2: created folders, then every temporary file, written and synced, each with `*at`
/// calls in its pinned folder.
fn make_temps(plan: &Plan, beneath: &mut Beneath) -> Result<()> {
    let project = beneath.root_path().to_path_buf();
    let mut to_sync: BTreeMap<String, Rc<OwnedFd>> = BTreeMap::new();
    for (d, mode) in plan.steps.created_dirs.iter().zip(&plan.created_modes) {
        let (parent, name) = split(d);
        let pfd = held(beneath, parent, d)?;
        match rustix::fs::mkdirat(pfd.as_fd(), name, Mode::from_raw_mode(*mode)) {
            // Made meanwhile by someone else: used if it is a real folder (checked next).
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err("create the folder", project.join(d))(e.into())),
        }
        let fd = beneath.pin_new(d, d)?;
        // The umask may have cleared bits.
        rustix::fs::fchmod(fd.as_fd(), Mode::from_raw_mode(*mode))
            .map_err(|e| io_err("set the folder's mode", project.join(d))(e.into()))?;
        to_sync.insert(parent.to_string(), pfd);
    }
    for w in &plan.writes {
        let (parent, _) = split(&w.rel);
        let pfd = held(beneath, parent, &w.rel)?;
        let temp_path = project.join(join_rel(parent, &w.temp));
        match &w.source {
            PlannedSource::Link(target) => {
                rustix::fs::symlinkat(target, pfd.as_fd(), w.temp.as_str())
                    .map_err(|e| io_err("create the link", &temp_path)(e.into()))?;
            }
            PlannedSource::File {
                path,
                fingerprint,
                mode,
            } => {
                let mut src = File::open(path).map_err(io_err("read", path))?;
                let before = src.metadata().map_err(io_err("read", path))?;
                if Fingerprint::of(&before) != *fingerprint {
                    return Err(StagingError::StagedChanged {
                        path: w.rel.clone(),
                    });
                }
                // O_EXCL | O_NOFOLLOW: a name planted in the folder meanwhile (a link to
                // elsewhere) makes this fail instead of being written through.
                let out = rustix::fs::openat(
                    pfd.as_fd(),
                    w.temp.as_str(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| io_err("create", &temp_path)(e.into()))?;
                let mut out = File::from(out);
                io::copy(&mut src, &mut out).map_err(io_err("copy", path))?;
                out.set_permissions(fs::Permissions::from_mode(*mode))
                    .map_err(io_err("set the mode", &temp_path))?;
                out.sync_all().map_err(io_err("sync", &temp_path))?;
                // Unchanged while it was copied, so the temp holds what was shown.
                let after = src.metadata().map_err(io_err("read", path))?;
                if Fingerprint::of(&after) != *fingerprint {
                    return Err(StagingError::StagedChanged {
                        path: w.rel.clone(),
                    });
                }
            }
        }
        to_sync.insert(parent.to_string(), pfd);
    }
    for (d, fd) in to_sync {
        rustix::fs::fsync(fd.as_fd())
            .map_err(|e| io_err("sync the folder", project.join(d))(e.into()))?;
    }
    Ok(())
}

/// Step 4 (and recovery after the commit point). Idempotent: a rename already done has no
/// temporary file left, a deletion already done finds nothing. Every folder it writes in is
/// opened (or found pinned) first, so a link on the way stops it before it changes anything.
fn roll_forward(steps: &Steps, beneath: &mut Beneath, with_failpoint: bool) -> Result<usize> {
    let project = beneath.root_path().to_path_buf();
    let mut folders: BTreeMap<&str, Option<Rc<OwnedFd>>> = BTreeMap::new();
    for e in &steps.entries {
        let parent = split(&e.target).0;
        if !folders.contains_key(parent) {
            let fd = beneath.pin(parent, &e.target)?;
            folders.insert(parent, fd);
        }
    }
    let mut done = 0;
    let mut to_sync: BTreeMap<String, Rc<OwnedFd>> = BTreeMap::new();
    for e in steps.entries.iter().filter(|e| e.delete) {
        let (parent, name) = split(&e.target);
        if let Some(Some(fd)) = folders.get(parent) {
            match rustix::fs::unlinkat(fd.as_fd(), name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(err) => return Err(io_err("remove", project.join(&e.target))(err.into())),
            }
            to_sync.insert(parent.to_string(), Rc::clone(fd));
        }
        done += 1;
    }
    for d in &steps.rmdirs {
        // Best effort, never through a link. A folder that still holds ignored files (never
        // deleted by an apply) stays.
        let (parent, name) = split(d);
        if let Ok(Some(fd)) = beneath.dir(parent, d) {
            if rustix::fs::unlinkat(fd.as_fd(), name, AtFlags::REMOVEDIR).is_ok() {
                to_sync.insert(parent.to_string(), fd);
            }
        }
    }
    let mut first = true;
    for e in steps.entries.iter().filter(|e| !e.delete) {
        let Some(temp) = &e.temp else { continue };
        let (parent, name) = split(&e.target);
        if let Some(Some(fd)) = folders.get(parent) {
            let here = stat_in(fd.as_fd(), OsStr::new(temp))
                .map_err(io_err("read", project.join(join_rel(parent, temp))))?;
            if here.is_some() {
                // Both names in the same held folder: the rename replaces the entry at the
                // target (a link there is replaced, not followed).
                rustix::fs::renameat(fd.as_fd(), temp.as_str(), fd.as_fd(), name).map_err(
                    |err| io_err("rename into place", project.join(&e.target))(err.into()),
                )?;
                if with_failpoint && first {
                    failpoint("apply-after-first-rename");
                }
                first = false;
            }
            to_sync.insert(parent.to_string(), Rc::clone(fd));
        }
        done += 1;
    }
    for (d, fd) in to_sync {
        rustix::fs::fsync(fd.as_fd())
            .map_err(|e| io_err("sync the folder", project.join(d))(e.into()))?;
    }
    Ok(done)
}

/// Undoes step 2: temporary files and the folders created for them. Best effort, never
/// through a link (a temporary file behind one stays where it is); returns how many
/// temporary files were removed.
fn roll_back(steps: &Steps, beneath: &mut Beneath) -> usize {
    let mut removed = 0;
    let mut to_sync: BTreeMap<String, Rc<OwnedFd>> = BTreeMap::new();
    for e in &steps.entries {
        let Some(t) = &e.temp else { continue };
        let parent = split(&e.target).0;
        if let Ok(Some(fd)) = beneath.dir(parent, &e.target) {
            if rustix::fs::unlinkat(fd.as_fd(), t.as_str(), AtFlags::empty()).is_ok() {
                removed += 1;
            }
            to_sync.insert(parent.to_string(), fd);
        }
    }
    for d in steps.created_dirs.iter().rev() {
        let (parent, name) = split(d);
        if let Ok(Some(fd)) = beneath.dir(parent, d) {
            let _ = rustix::fs::unlinkat(fd.as_fd(), name, AtFlags::REMOVEDIR);
            to_sync.insert(parent.to_string(), fd);
        }
    }
    for fd in to_sync.values() {
        let _ = rustix::fs::fsync(fd.as_fd());
    }
    removed
}

/// True when the file holds JSON of any shape (a journal cut short by a crash does not).
fn is_json(path: &Path) -> bool {
    fs::read(path).is_ok_and(|t| serde_json::from_slice::<serde::de::IgnoredAny>(&t).is_ok())
}

fn read_journal(path: &Path) -> Result<Steps> {
    let text = fs::read(path).map_err(io_err("read the apply journal", path))?;
    let bad = |reason: String| StagingError::Journal {
        path: path.to_path_buf(),
        reason,
    };
    let j: Journal = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    if j.version != JOURNAL_VERSION {
        return Err(bad(format!(
            "format version {} is not one this Garuda reads (it reads version {JOURNAL_VERSION}); finish or undo that apply with the Garuda that wrote it",
            j.version
        )));
    }
    if !j.project.is_absolute() {
        return Err(bad(format!(
            "{} is not an absolute path",
            j.project.display()
        )));
    }
    // The journal lives where commands cannot write, but a recovery runs renames and
    // deletions from it unattended: every path must be a plain path inside its project, and
    // every temporary file must carry the apply tag and sit in its target's folder.
    let rel = |p: &Path| -> Result<String> {
        p.strip_prefix(&j.project)
            .ok()
            .and_then(Path::to_str)
            .filter(|r| is_plain_rel(r))
            .map(str::to_string)
            .ok_or_else(|| {
                bad(format!(
                    "{} is outside {}",
                    p.display(),
                    j.project.display()
                ))
            })
    };
    let mut entries = Vec::new();
    for e in &j.entries {
        let target = rel(&e.target)?;
        let temp = match &e.temp {
            None => None,
            Some(t) => {
                let name = t.file_name().and_then(|n| n.to_str());
                let ok = rel(t).is_ok()
                    && t.parent() == e.target.parent()
                    && name.is_some_and(|n| n.contains(TEMP_TAG));
                match name {
                    Some(n) if ok => Some(n.to_string()),
                    _ => {
                        return Err(bad(format!(
                            "{} is not a temporary file of an apply next to {}",
                            t.display(),
                            e.target.display()
                        )))
                    }
                }
            }
        };
        entries.push(Step {
            target,
            temp,
            delete: e.delete,
        });
    }
    let rmdirs = j.rmdirs.iter().map(|d| rel(d)).collect::<Result<_>>()?;
    let created_dirs = j
        .created_dirs
        .iter()
        .map(|d| rel(d))
        .collect::<Result<_>>()?;
    Ok(Steps {
        project: j.project,
        entries,
        rmdirs,
        created_dirs,
    })
}

/// Finishes or rolls back the journal of one session folder, if it has one. The project is
/// opened once and worked on beneath its root, like an apply: a link on the way stops a roll
/// forward before it changes anything ([`StagingError::RecoveryStopped`], the journal stays),
/// and a roll back leaves a temporary file behind a link where it is.
pub(crate) fn finish_journal(dir: &Path) -> Result<Option<Recovered>> {
    let commit = dir.join(JOURNAL_COMMIT);
    let pending = dir.join(JOURNAL_PENDING);
    if lstat(&commit).map_err(io_err("read", &commit))?.is_some() {
        let steps = read_journal(&commit)?;
        let files = match Beneath::open(&steps.project) {
            Ok(mut b) => b
                .reserve(steps.entries.len() + 1)
                .and_then(|()| roll_forward(&steps, &mut b, false)),
            // The project was removed since: nothing of it is left to finish.
            Err(StagingError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(0)
            }
            Err(e) => Err(e),
        }
        .map_err(|e| StagingError::RecoveryStopped {
            journal: commit.clone(),
            source: Box::new(e),
        })?;
        fs::remove_file(&commit).map_err(io_err("remove the apply journal", &commit))?;
        let _ = fs::remove_file(&pending);
        fsync_dir(dir)?;
        return Ok(Some(Recovered {
            session_dir: dir.to_path_buf(),
            project: Some(steps.project),
            action: RecoveryAction::RolledForward,
            files,
        }));
    }
    if lstat(&pending).map_err(io_err("read", &pending))?.is_some() {
        // The pending journal is synced before any temporary file is made, so one that is not
        // JSON at all was torn before anything else happened. One that is JSON but not a
        // journal this Garuda reads (another format version, a path outside its project) is
        // kept, like a committed one: it may name temporary files a person should remove.
        let (project, files) = match read_journal(&pending) {
            Ok(steps) => {
                let n = match Beneath::open(&steps.project) {
                    Ok(mut b) => roll_back(&steps, &mut b),
                    // The project is gone: no temporary file of it is left to remove.
                    Err(_) => 0,
                };
                (Some(steps.project), n)
            }
            Err(StagingError::Journal { .. }) if !is_json(&pending) => (None, 0),
            Err(e) => return Err(e),
        };
        fs::remove_file(&pending).map_err(io_err("remove the apply journal", &pending))?;
        fsync_dir(dir)?;
        return Ok(Some(Recovered {
            session_dir: dir.to_path_buf(),
            project,
            action: RecoveryAction::RolledBack,
            files,
        }));
    }
    Ok(None)
}

/// Finishes (after the commit point) or rolls back (before it) the interrupted applies of
/// every session whose process has ended, then removes those sessions' folders. Sessions of
/// live processes are left alone. [`Session::create`] runs it first.
pub fn recover(garuda_home: &Path) -> Result<Vec<Recovered>> {
    let root = garuda_home.join("staging");
    let rd = match fs::read_dir(&root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list the staging folder", &root)(e)),
    };
    let mut names: Vec<(String, u32)> = Vec::new();
    for e in rd {
        let e = e.map_err(io_err("list the staging folder", &root))?;
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        if let Some(pid) = session_pid(&name) {
            names.push((name, pid));
        }
    }
    names.sort();
    let mut out = Vec::new();
    for (name, pid) in names {
        if process_alive(pid) {
            continue;
        }
        let dir = root.join(&name);
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        if let Some(r) = finish_journal(&dir)? {
            out.push(r);
        }
        remove_tree(&dir)?;
        out.push(Recovered {
            session_dir: dir,
            project: None,
            action: RecoveryAction::RemovedDeadSession,
            files: 0,
        });
    }
    Ok(out)
}

/// `<pid>-<hex>` → pid.
fn session_pid(name: &str) -> Option<u32> {
    let (pid, hex) = name.split_once('-')?;
    if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process exists. Without `/proc` nothing can be told, so every process counts as
/// alive (and no folder is removed).
fn process_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    Path::new("/proc").join(pid.to_string()).exists()
}

// ---- staging-side cleanup --------------------------------------------------------------

/// Upper folders that are opaque, among the ancestors of `rel` (shallowest first).
fn opaque_ancestors(upper: &Path, rel: &str) -> Vec<String> {
    let mut out = Vec::new();
    for anc in ancestors_rel(rel) {
        let p = upper.join(anc);
        match lstat(&p) {
            Ok(Some(m)) if m.file_type().is_dir() => {
                if has_overlay_xattr(&p, "opaque", Some(b"y")) {
                    out.push(anc.to_string());
                }
            }
            _ => break,
        }
    }
    out
}

/// The nearest ancestor of `rel` that upper has as a non-folder (a whiteout, or a file that
/// replaced a folder), with its kind.
fn covering_entry(upper: &Path, rel: &str) -> Option<(String, Kind)> {
    for anc in ancestors_rel(rel) {
        let p = upper.join(anc);
        match lstat(&p) {
            Ok(Some(m)) if m.file_type().is_dir() => {}
            Ok(Some(m)) => return Some((anc.to_string(), kind_of(&p, &m, true))),
            _ => return None,
        }
    }
    None
}

/// True when some project entry under the opaque upper folder `dir` has no upper
/// counterpart (an ignored file the command deleted: still hidden, still in the project).
fn hidden_lower_remains(lower: &Path, upper: &Path, dir: &str) -> bool {
    let mut stack = vec![dir.to_string()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(lower.join(&d)) else {
            continue;
        };
        for e in rd.flatten() {
            let rel = format!("{d}/{}", e.file_name().to_string_lossy());
            let lm = e.file_type();
            match lstat(&upper.join(&rel)) {
                Ok(Some(um)) => {
                    if um.file_type().is_dir() && lm.is_ok_and(|t| t.is_dir()) {
                        stack.push(rel);
                    }
                }
                _ => return true,
            }
        }
    }
    false
}

/// Removes upper folders emptied by a cleanup, walking up from each of `parents`.
/// `keep_if` says which empty folders must stay.
fn prune_upper(upper: &Path, parents: BTreeSet<String>, keep_if: impl Fn(&str) -> bool) {
    let mut parents: Vec<String> = parents.into_iter().collect();
    parents.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
    for p in parents {
        let mut d = p;
        while !d.is_empty() {
            let mut known = HashSet::new();
            if !real_dir_chain(upper, &d, &mut known).unwrap_or(false)
                || !lstat(&upper.join(&d))
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.file_type().is_dir())
                || keep_if(&d)
                || !remove_dir_if_empty(&upper.join(&d))
            {
                break;
            }
            d = parent_rel(&d).to_string();
        }
    }
}

/// After an apply: drop the applied entries from upper so the project shows through. Inside
/// an opaque folder the entries stay (the folder hides the project) unless nothing in the
/// project under it lacks an upper counterpart, in which case the folder stops being opaque
/// first. The view the next command sees is the same either way.
fn overlay_after_apply(lower: &Path, upper: &Path, set: &ChangeSet) -> Result<()> {
    let mut opaque: BTreeSet<String> = BTreeSet::new();
    for c in &set.changes {
        opaque.extend(opaque_ancestors(upper, &c.path));
    }
    // Shallowest first: an outer folder that must stay opaque keeps the inner ones as they are.
    let mut opaque: Vec<String> = opaque.into_iter().collect();
    opaque.sort_by_key(|d| d.matches('/').count());
    for o in &opaque {
        if !opaque_ancestors(upper, o).is_empty() {
            continue;
        }
        if !hidden_lower_remains(lower, upper, o) {
            clear_opaque(&upper.join(o))?;
        }
    }
    let mut parents = BTreeSet::new();
    for c in &set.changes {
        if !opaque_ancestors(upper, &c.path).is_empty() {
            continue;
        }
        let mut known = HashSet::new();
        match lstat_rel(upper, &c.path, &mut known).map_err(io_err("read", upper.join(&c.path)))? {
            Some(m) if !m.file_type().is_dir() => {
                remove_entry(&upper.join(&c.path))?;
                parents.insert(parent_rel(&c.path).to_string());
            }
            Some(_) => {}
            None => {
                if let Some((anc, Kind::Whiteout)) = covering_entry(upper, &c.path) {
                    if lstat(&lower.join(&anc)).ok().flatten().is_none() {
                        remove_entry(&upper.join(&anc))?;
                        parents.insert(parent_rel(&anc).to_string());
                    }
                }
            }
        }
    }
    // An empty upper folder over a project folder changes nothing; one that is opaque or has
    // no project folder under it is part of the view and stays.
    prune_upper(upper, parents, |d| {
        has_overlay_xattr(&upper.join(d), "opaque", Some(b"y"))
            || !lstat(&lower.join(d))
                .ok()
                .flatten()
                .is_some_and(|m| m.file_type().is_dir())
    });
    Ok(())
}

/// See [`Session::discard`].
pub(crate) fn discard(session: &mut Session, set: &ChangeSet) -> Result<()> {
    if set.incomplete.is_some() {
        return session.reset();
    }
    match session.layout().clone() {
        Layout::Overlay { lower, upper } => overlay_discard(&lower, &upper, set),
        Layout::Copy { project, copy } => copy_discard(&project, &copy, set),
    }
}

/// Overlay discard: the project shows through again at every shown path. Opaque folders
/// above a shown change stop being opaque (an ignored file the command deleted there comes
/// back: discarding never loses a project file), whiteouts and upper files of shown changes
/// go, and upper folders emptied by that go.
fn overlay_discard(lower: &Path, upper: &Path, set: &ChangeSet) -> Result<()> {
    for c in &set.changes {
        for o in opaque_ancestors(upper, &c.path) {
            clear_opaque(&upper.join(o))?;
        }
    }
    let mut parents = BTreeSet::new();
    for c in &set.changes {
        let mut known = HashSet::new();
        let here =
            lstat_rel(upper, &c.path, &mut known).map_err(io_err("read", upper.join(&c.path)))?;
        match here {
            Some(m) if !m.file_type().is_dir() => {
                remove_entry(&upper.join(&c.path))?;
                parents.insert(parent_rel(&c.path).to_string());
            }
            Some(_) => {
                // A folder where the project has a file: it goes once empty.
                let p = upper.join(&c.path);
                clear_opaque(&p)?;
                if remove_dir_if_empty(&p) {
                    parents.insert(parent_rel(&c.path).to_string());
                }
            }
            None => {
                if let Some((anc, kind)) = covering_entry(upper, &c.path) {
                    if kind == Kind::Whiteout {
                        remove_entry(&upper.join(&anc))?;
                        parents.insert(parent_rel(&anc).to_string());
                    }
                }
            }
        }
    }
    let _ = lower;
    prune_upper(upper, parents, |_| false);
    Ok(())
}

/// Copy discard: each shown path in the copy is restored from the project. Additions go
/// first, so a file that replaced a folder is out of the way when the folder comes back. The
/// project is read beneath its held root, never through a link.
fn copy_discard(project: &Path, copy: &Path, set: &ChangeSet) -> Result<()> {
    let beneath = Beneath::open(project)?;
    let mut parents = BTreeSet::new();
    let mut restores = Vec::new();
    for c in &set.changes {
        match beneath.stat(&c.path)? {
            Some(pm) if !pm.file_type().is_dir() => restores.push(c.path.clone()),
            _ => {
                let mut ck = HashSet::new();
                if real_dir_chain(copy, &c.path, &mut ck)
                    .map_err(io_err("read", copy.join(&c.path)))?
                {
                    let cp = copy.join(&c.path);
                    if let Some(m) = lstat(&cp).map_err(io_err("read", &cp))? {
                        if m.file_type().is_dir() {
                            remove_tree(&cp)?;
                        } else {
                            remove_entry(&cp)?;
                        }
                    }
                    parents.insert(parent_rel(&c.path).to_string());
                }
            }
        }
    }
    // Folders emptied by removing additions go unless the project has them.
    for p in parents {
        let mut d = p;
        while !d.is_empty() {
            let mut ck = HashSet::new();
            if beneath
                .stat(&d)
                .ok()
                .flatten()
                .is_some_and(|m| m.file_type().is_dir())
                || !real_dir_chain(copy, &d, &mut ck).unwrap_or(false)
                || !remove_dir_if_empty(&copy.join(&d))
            {
                break;
            }
            d = parent_rel(&d).to_string();
        }
    }
    for rel in restores {
        for anc in ancestors_rel(&rel) {
            let ap = copy.join(anc);
            match lstat(&ap).map_err(io_err("read", &ap))? {
                Some(m) if m.file_type().is_dir() => {}
                other => {
                    if other.is_some() {
                        remove_entry(&ap)?;
                    }
                    let mode = beneath
                        .stat(anc)?
                        .map(|m| m.mode() & 0o777)
                        .unwrap_or(0o755);
                    mkdir_mode(&ap, mode)?;
                }
            }
        }
        copy_entry_into(&beneath, &rel, &copy.join(&rel))?;
    }
    Ok(())
}
