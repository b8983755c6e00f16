//! Apply (crash-safe, all or nothing), discard, and recovery of interrupted applies.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::changes::{ChangeKind, ChangeSet, StagedRef};
use crate::error::{io_err, Result, StagingError};
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

    // Conflict check: the project path must be as it was when the command started.
    let mut conflicts = Vec::new();
    let mut known = HashSet::new();
    for c in &set.changes {
        let now = lstat_rel(&project, &c.path, &mut known)
            .map_err(io_err("read", project.join(&c.path)))?;
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

    let plan = plan(session, set, &layout, &project)?;
    run_plan(session, &plan)?;
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
    // The project now has these changes; staging stops holding them (best effort: an entry
    // left behind equals the project and lists as no change).
    if let Layout::Overlay { lower, upper } = &layout {
        let _ = overlay_after_apply(lower, upper, set);
    }
    session.listing().clear();
    Ok(applied)
}

struct Plan {
    journal: Journal,
    /// For each write: (target, temp, staged source, fingerprint or link target, mode).
    writes: Vec<PlannedWrite>,
    /// Permission bits of each of `journal.created_dirs`: the staged folder's.
    created_modes: Vec<u32>,
}

struct PlannedWrite {
    rel: String,
    temp: PathBuf,
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

fn plan(session: &Session, set: &ChangeSet, layout: &Layout, project: &Path) -> Result<Plan> {
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
        let target = project.join(&c.path);
        if c.kind == ChangeKind::Deleted {
            entries.push(Entry {
                target,
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
        // The folders down to the target: real folders in the project, or created.
        let mut missing = false;
        for anc in ancestors_rel(&c.path) {
            if missing {
                if !created_dirs.iter().any(|d| d == anc) {
                    created_dirs.push(anc.to_string());
                }
                continue;
            }
            match lstat(&project.join(anc)).map_err(io_err("read", project.join(anc)))? {
                Some(m) if m.file_type().is_dir() => {}
                Some(_) => {
                    return Err(StagingError::Unsupported {
                        path: c.path.clone(),
                        reason: format!("the project has a file or link at {anc} where the change needs a folder; discard and make that change in two commands"),
                    })
                }
                None => {
                    missing = true;
                    if !created_dirs.iter().any(|d| d == anc) {
                        created_dirs.push(anc.to_string());
                    }
                }
            }
        }
        // A file replacing a project folder: every file in that folder must be deleted by
        // this same change, so the folder can be removed before the rename.
        if !missing {
            if let Some(m) = lstat(&target).map_err(io_err("read", &target))? {
                if m.file_type().is_dir() {
                    let inner = list_files(project, &c.path)?;
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
        }
        let temp = temp_name(&target, &session.id, i);
        entries.push(Entry {
            target,
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
        journal: Journal {
            version: 1,
            project: project.to_path_buf(),
            entries,
            rmdirs: rmdirs.iter().map(|d| project.join(d)).collect(),
            created_dirs: created_dirs.iter().map(|d| project.join(d)).collect(),
        },
        writes,
    })
}

struct Listed {
    files: Vec<String>,
    dirs: Vec<String>,
}

/// Files (and links) and folders under a project folder, relative to the project.
fn list_files(project: &Path, rel: &str) -> Result<Listed> {
    let mut out = Listed {
        files: Vec::new(),
        dirs: Vec::new(),
    };
    let mut stack = vec![rel.to_string()];
    while let Some(d) = stack.pop() {
        let dp = project.join(&d);
        for e in fs::read_dir(&dp).map_err(io_err("list", &dp))? {
            let e = e.map_err(io_err("list", &dp))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let r = format!("{d}/{name}");
            if e.file_type().map_err(io_err("read", e.path()))?.is_dir() {
                out.dirs.push(r.clone());
                stack.push(r);
            } else {
                out.files.push(r);
            }
        }
    }
    Ok(out)
}

fn temp_name(target: &Path, id: &str, i: usize) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let candidate = format!(".{name}.{TEMP_TAG}{id}");
    if candidate.len() <= 255 {
        target.with_file_name(candidate)
    } else {
        target.with_file_name(format!(".{TEMP_TAG}{id}-{i}"))
    }
}

/// Steps 2–5 of the crate doc's apply.
fn run_plan(session: &Session, plan: &Plan) -> Result<()> {
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
    write_journal(&pending, &plan.journal)?;
    fsync_dir(&session.dir)?;

    if let Err(e) = make_temps(plan) {
        roll_back(&plan.journal);
        let _ = fs::remove_file(&pending);
        return Err(e);
    }

    failpoint("apply-before-commit");
    // THE COMMIT POINT: from here a crash is rolled forward.
    if let Err(e) =
        fs::rename(&pending, &commit).map_err(io_err("commit the apply journal", &commit))
    {
        roll_back(&plan.journal);
        let _ = fs::remove_file(&pending);
        return Err(e);
    }
    let finish =
        fsync_dir(&session.dir).and_then(|()| roll_forward(&plan.journal, true).map(|_| ()));
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

/// Step 2: created folders, then every temporary file, written and synced.
fn make_temps(plan: &Plan) -> Result<()> {
    let mut dirs_to_sync: BTreeSet<PathBuf> = BTreeSet::new();
    for (d, mode) in plan.journal.created_dirs.iter().zip(&plan.created_modes) {
        mkdir_mode(d, *mode)?;
        if let Some(p) = d.parent() {
            dirs_to_sync.insert(p.to_path_buf());
        }
    }
    for w in &plan.writes {
        match &w.source {
            PlannedSource::Link(target) => {
                std::os::unix::fs::symlink(target, &w.temp)
                    .map_err(io_err("create the link", &w.temp))?;
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
                let mut out = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&w.temp)
                    .map_err(io_err("create", &w.temp))?;
                io::copy(&mut src, &mut out).map_err(io_err("copy", path))?;
                out.set_permissions(fs::Permissions::from_mode(*mode))
                    .map_err(io_err("set the mode", &w.temp))?;
                out.sync_all().map_err(io_err("sync", &w.temp))?;
                // Unchanged while it was copied, so the temp holds what was shown.
                let after = src.metadata().map_err(io_err("read", path))?;
                if Fingerprint::of(&after) != *fingerprint {
                    return Err(StagingError::StagedChanged {
                        path: w.rel.clone(),
                    });
                }
            }
        }
        if let Some(p) = w.temp.parent() {
            dirs_to_sync.insert(p.to_path_buf());
        }
    }
    for d in dirs_to_sync {
        fsync_dir(&d)?;
    }
    Ok(())
}

/// Step 4 (and recovery after the commit point). Idempotent: a rename already done has no
/// temporary file left, a deletion already done finds nothing.
fn roll_forward(journal: &Journal, with_failpoint: bool) -> Result<usize> {
    let mut done = 0;
    let mut dirs_to_sync: BTreeSet<PathBuf> = BTreeSet::new();
    for e in journal.entries.iter().filter(|e| e.delete) {
        remove_entry(&e.target)?;
        done += 1;
        if let Some(p) = e.target.parent() {
            dirs_to_sync.insert(p.to_path_buf());
        }
    }
    for d in &journal.rmdirs {
        // A folder that still holds ignored files (never deleted by an apply) stays.
        if fs::remove_dir(d).is_ok() {
            if let Some(p) = d.parent() {
                dirs_to_sync.insert(p.to_path_buf());
            }
        }
    }
    let mut first = true;
    for e in journal.entries.iter().filter(|e| !e.delete) {
        let Some(temp) = &e.temp else { continue };
        if lstat(temp).map_err(io_err("read", temp))?.is_some() {
            fs::rename(temp, &e.target).map_err(io_err("rename into place", &e.target))?;
            if with_failpoint && first {
                failpoint("apply-after-first-rename");
            }
            first = false;
        }
        done += 1;
        if let Some(p) = e.target.parent() {
            dirs_to_sync.insert(p.to_path_buf());
        }
    }
    for d in dirs_to_sync {
        if d.exists() {
            fsync_dir(&d)?;
        }
    }
    Ok(done)
}

/// Undoes step 2: temporary files and the folders created for them. Best effort; returns
/// how many temporary files were removed.
fn roll_back(journal: &Journal) -> usize {
    let mut removed = 0;
    for e in &journal.entries {
        if let Some(t) = &e.temp {
            if fs::remove_file(t).is_ok() {
                removed += 1;
            }
        }
    }
    for d in journal.created_dirs.iter().rev() {
        let _ = fs::remove_dir(d);
    }
    let mut parents: BTreeSet<&Path> = BTreeSet::new();
    for e in &journal.entries {
        if let Some(p) = e.target.parent() {
            parents.insert(p);
        }
    }
    for p in parents {
        if p.exists() {
            let _ = fsync_dir(p);
        }
    }
    removed
}

fn read_journal(path: &Path) -> Result<Journal> {
    let text = fs::read(path).map_err(io_err("read the apply journal", path))?;
    let bad = |reason: String| StagingError::Journal {
        path: path.to_path_buf(),
        reason,
    };
    let j: Journal = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    // The journal lives where commands cannot write, but a recovery runs renames and
    // deletions from it unattended: every path must be inside its project, and every
    // temporary file must carry the apply tag.
    let inside = |p: &Path| {
        p.is_absolute()
            && p.starts_with(&j.project)
            && p != j.project
            && !p.components().any(|c| c == std::path::Component::ParentDir)
    };
    for e in &j.entries {
        if !inside(&e.target) {
            return Err(bad(format!(
                "{} is outside {}",
                e.target.display(),
                j.project.display()
            )));
        }
        if let Some(t) = &e.temp {
            let tagged = t
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains(TEMP_TAG));
            if !inside(t) || !tagged {
                return Err(bad(format!(
                    "{} is not a temporary file of an apply",
                    t.display()
                )));
            }
        }
    }
    for d in j.rmdirs.iter().chain(&j.created_dirs) {
        if !inside(d) {
            return Err(bad(format!(
                "{} is outside {}",
                d.display(),
                j.project.display()
            )));
        }
    }
    Ok(j)
}

/// Finishes or rolls back the journal of one session folder, if it has one.
pub(crate) fn finish_journal(dir: &Path) -> Result<Option<Recovered>> {
    let commit = dir.join(JOURNAL_COMMIT);
    let pending = dir.join(JOURNAL_PENDING);
    if lstat(&commit).map_err(io_err("read", &commit))?.is_some() {
        let j = read_journal(&commit)?;
        let files = roll_forward(&j, false)?;
        fs::remove_file(&commit).map_err(io_err("remove the apply journal", &commit))?;
        let _ = fs::remove_file(&pending);
        fsync_dir(dir)?;
        return Ok(Some(Recovered {
            session_dir: dir.to_path_buf(),
            project: Some(j.project),
            action: RecoveryAction::RolledForward,
            files,
        }));
    }
    if lstat(&pending).map_err(io_err("read", &pending))?.is_some() {
        // The pending journal is synced before any temporary file is made, so one that does
        // not parse was torn before anything else happened.
        let (project, files) = match read_journal(&pending) {
            Ok(j) => {
                let n = roll_back(&j);
                (Some(j.project), n)
            }
            Err(StagingError::Journal { .. }) => (None, 0),
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
/// first, so a file that replaced a folder is out of the way when the folder comes back.
fn copy_discard(project: &Path, copy: &Path, set: &ChangeSet) -> Result<()> {
    let mut known = HashSet::new();
    let mut parents = BTreeSet::new();
    let mut restores = Vec::new();
    for c in &set.changes {
        let pm = lstat_rel(project, &c.path, &mut known)
            .map_err(io_err("read", project.join(&c.path)))?;
        match pm {
            Some(pm) if !pm.file_type().is_dir() => restores.push((c.path.clone(), pm)),
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
            if lstat_rel(project, &d, &mut ck)
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
    for (rel, pm) in restores {
        for anc in ancestors_rel(&rel) {
            let ap = copy.join(anc);
            match lstat(&ap).map_err(io_err("read", &ap))? {
                Some(m) if m.file_type().is_dir() => {}
                other => {
                    if other.is_some() {
                        remove_entry(&ap)?;
                    }
                    let mode = fs::symlink_metadata(project.join(anc))
                        .map(|m| m.mode() & 0o777)
                        .unwrap_or(0o755);
                    mkdir_mode(&ap, mode)?;
                }
            }
        }
        copy_entry_into(&project.join(&rel), &pm, &copy.join(&rel))?;
    }
    Ok(())
}
