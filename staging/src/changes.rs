//! The change list: what a command changed in the staged view, compared with the project.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::fsutil::{
    has_overlay_xattr, join, kind_of, looks_binary, lstat, lstat_rel, same_content, shown_mode,
    Fingerprint, FsTime, Kind, PERM_MASK,
};
use crate::rules::Rules;
use crate::sensitive::{is_sensitive_change, is_sensitive_path};
use crate::view::Layout;

/// How many entries one change list may walk (upper folder, copy, project, lower subtrees of
/// deleted folders, all counted). Past it the list is incomplete and only discard is offered.
pub const ENTRY_LIMIT: usize = 50_000;

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// A regular file that the project does not have.
    Added,
    /// A regular file whose content changed (its mode may have changed too), or that replaced
    /// a link.
    Modified,
    /// A regular file or link the command removed.
    Deleted,
    /// Same content, other permission bits.
    ModeChanged,
    /// A symbolic link where the project has none (or has a file).
    LinkAdded,
    /// A symbolic link whose target changed.
    LinkChanged,
    /// A symbolic link (new or changed) that points outside the project. Refused by apply.
    LinkOutOfRoot,
}

/// One shown change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Project-relative, `/`-separated.
    pub path: String,
    /// What happened.
    pub kind: ChangeKind,
    /// The old or new content has a NUL byte in its first 8,000 bytes: shown as "binary file
    /// changed", not diffed.
    pub binary: bool,
    /// File type and permission bits before (`0o100644`), `None` when the project had no file
    /// or link there.
    pub mode_before: Option<u32>,
    /// File type and permission bits after, `None` for a deletion.
    pub mode_after: Option<u32>,
    /// The new target of a link.
    pub link_target: Option<String>,
}

/// Everything a command changed, as shown to the user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// Shown and appliable: tracked files, and untracked files git does not ignore. Sorted by
    /// path.
    pub changes: Vec<Change>,
    /// Ignored changes (gitignore rules, `.git/`, and special files such as FIFOs), counted per
    /// top folder (`"target/"`, `".git/"`; a top-level file counts under its own name). Never
    /// applied; they stay in staging for the next command.
    pub ignored_counts: BTreeMap<String, u64>,
    /// Sensitive files that changed (see [`crate::is_sensitive_name`]), ignored or not, and
    /// links whose target names one. Sorted.
    pub sensitive: Vec<String>,
    /// Why the list is incomplete (entry limit, unreadable file, failed walk). Only discard is
    /// possible then.
    pub incomplete: Option<String>,
}

impl ChangeSet {
    /// Nothing to show or ask: no change and no sensitive file. (Ignored changes alone do not
    /// ask: they are never applied.) An incomplete list is never empty.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.sensitive.is_empty() && self.incomplete.is_none()
    }

    /// True when apply is possible: the list is complete and no link points out of the
    /// project. (Apply still checks for conflicts.)
    pub fn can_apply(&self) -> bool {
        self.incomplete.is_none()
            && !self
                .changes
                .iter()
                .any(|c| c.kind == ChangeKind::LinkOutOfRoot)
    }

    /// The shown changes under `.garuda/` (Garuda's project settings), which
    /// [`crate::Session::apply`] refuses: they need a question of their own.
    pub fn garuda_settings(&self) -> Vec<&Change> {
        self.guarded(Guard::GarudaSettings)
    }

    /// The shown changes that `guard` keeps out of an apply unless it is approved (see
    /// [`Guard`]), in list order.
    pub fn guarded(&self, guard: Guard) -> Vec<&Change> {
        self.changes
            .iter()
            .filter(|c| match guard {
                Guard::GarudaSettings => crate::rules::is_garuda_settings_path(&c.path),
                // The path's own test, and the set's sensitive names: a set built by hand
                // cannot drop a secret from the guard by leaving it out of `sensitive`.
                Guard::Sensitive => is_sensitive_change(c) || self.sensitive.contains(&c.path),
            })
            .collect()
    }

    /// Total number of ignored changes.
    pub fn ignored_total(&self) -> u64 {
        self.ignored_counts.values().sum()
    }
}

/// A kind of change that [`crate::Session::apply`] leaves out of a plain apply: the whole
/// change is refused unless the caller approves the kind, after a question of its own
/// ([`crate::Session::apply_approved`]). A false match only asks one question more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    /// Garuda's project settings: a change under a `.garuda` folder, file or link at any
    /// depth ([`crate::is_garuda_settings_path`]). They can loosen what later commands may do.
    GarudaSettings,
    /// Files that hold secrets ([`crate::is_sensitive_path`]: `.env*`, keys, `.npmrc`, …,
    /// folded for case and lookalikes), and links whose target names one. Their content is
    /// never shown, so a yes to the change list is no yes to them.
    Sensitive,
}

impl Guard {
    /// Every guard, in the order a caller asks about them.
    pub const ALL: [Guard; 2] = [Guard::GarudaSettings, Guard::Sensitive];

    /// What the guarded files are, for messages: "Garuda's project settings".
    pub fn what(self) -> &'static str {
        match self {
            Guard::GarudaSettings => "Garuda's project settings",
            Guard::Sensitive => "sensitive files",
        }
    }
}

/// What apply must find in staging for a listed path, so it applies exactly what was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StagedRef {
    File(Fingerprint),
    Link(PathBuf),
    Gone,
}

pub(crate) type Listing = HashMap<String, StagedRef>;

struct Raw {
    change: Change,
    staged: StagedRef,
}

struct Collector<'a> {
    layout: &'a Layout,
    project: &'a Path,
    limit: usize,
    seen: usize,
    over_limit: bool,
    incomplete: Option<String>,
    raw: Vec<Raw>,
    specials: Vec<String>,
    lower_known: HashSet<String>,
}

/// Builds the change list of `layout` (see the crate doc for the semantics). `mark` is the
/// command's start: a copy file changed at or after it is compared by content.
pub(crate) fn collect(layout: &Layout, mark: FsTime, limit: usize) -> (ChangeSet, Listing) {
    let mut c = Collector {
        layout,
        project: layout.project(),
        limit,
        seen: 0,
        over_limit: false,
        incomplete: None,
        raw: Vec::new(),
        specials: Vec::new(),
        lower_known: HashSet::new(),
    };
    match layout {
        Layout::Overlay { upper, .. } => c.walk_overlay(upper),
        Layout::Copy { copy, project } => c.walk_copy(project, copy, mark),
    }
    c.classify()
}

impl Collector<'_> {
    fn fail(&mut self, reason: String) {
        if self.incomplete.is_none() {
            self.incomplete = Some(reason);
        }
    }

    /// Counts one entry; false once past the limit (the walk then stops).
    fn tick(&mut self) -> bool {
        if self.over_limit {
            return false;
        }
        self.seen += 1;
        if self.seen > self.limit {
            self.over_limit = true;
            self.fail(format!(
                "more than {} entries to compare, the limit",
                self.limit
            ));
            return false;
        }
        true
    }

    /// Sorted entry names of a directory, as UTF-8. Non-UTF-8 names make the list incomplete:
    /// a lossy name could not be applied to the right file.
    fn list_dir(&mut self, dir: &Path, rel: &str) -> Vec<String> {
        let rd = match fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                self.fail(format!("cannot list {}: {e}", dir.display()));
                return Vec::new();
            }
        };
        let mut names = Vec::new();
        for e in rd {
            match e {
                Ok(e) => match e.file_name().into_string() {
                    Ok(n) => names.push(n),
                    Err(n) => self.fail(format!(
                        "a file name that is not UTF-8 in {}: {}",
                        if rel.is_empty() { "." } else { rel },
                        n.to_string_lossy()
                    )),
                },
                Err(e) => self.fail(format!("cannot list {}: {e}", dir.display())),
            }
        }
        names.sort();
        names
    }

    fn lower_meta(&mut self, rel: &str) -> Option<Metadata> {
        let project = self.project.to_path_buf();
        match lstat_rel(&project, rel, &mut self.lower_known) {
            Ok(m) => m,
            Err(e) => {
                self.fail(format!("cannot read {}: {e}", project.join(rel).display()));
                None
            }
        }
    }

    fn binary(&mut self, paths: &[&Path]) -> bool {
        let mut any = false;
        for p in paths {
            match looks_binary(p) {
                Ok(b) => any |= b,
                Err(e) => self.fail(format!("cannot read {}: {e}", p.display())),
            }
        }
        any
    }

    fn push(&mut self, change: Change, staged: StagedRef) {
        self.raw.push(Raw { change, staged });
    }

    fn deleted(&mut self, rel: &str, lm: &Metadata) {
        if !(lm.file_type().is_file() || lm.file_type().is_symlink()) {
            if !lm.file_type().is_dir() {
                self.specials.push(rel.to_string());
            }
            return;
        }
        let link_target = if lm.file_type().is_symlink() {
            fs::read_link(self.project.join(rel))
                .ok()
                .map(|t| t.to_string_lossy().into_owned())
        } else {
            None
        };
        self.push(
            Change {
                path: rel.to_string(),
                kind: ChangeKind::Deleted,
                binary: false,
                mode_before: Some(shown_mode(lm)),
                mode_after: None,
                link_target,
            },
            StagedRef::Gone,
        );
    }

    /// Every file and link under the project folder `rel` is deleted (a whiteout, a file or a
    /// link in staging replaced the whole folder).
    fn lower_subtree_deleted(&mut self, rel: &str) {
        let mut stack = vec![rel.to_string()];
        while let Some(dir) = stack.pop() {
            for name in self.list_dir(&join(self.project, &dir), &dir) {
                let e = format!("{dir}/{name}");
                if !self.tick() {
                    return;
                }
                match lstat(&self.project.join(&e)) {
                    Ok(Some(m)) if m.file_type().is_dir() => stack.push(e),
                    Ok(Some(m)) => self.deleted(&e, &m),
                    Ok(None) => {}
                    Err(err) => self.fail(format!(
                        "cannot read {}: {err}",
                        self.project.join(&e).display()
                    )),
                }
            }
        }
    }

    // ---- overlay -------------------------------------------------------------------------

    fn walk_overlay(&mut self, upper: &Path) {
        // An explicit stack: a command can nest folders deeper than the supervisor's stack.
        let mut stack: Vec<(String, bool)> = vec![(String::new(), false)];
        while let Some((dir, hidden)) = stack.pop() {
            for name in self.list_dir(&join(upper, &dir), &dir) {
                let rel = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if !self.tick() {
                    return;
                }
                let path = upper.join(&rel);
                let m = match lstat(&path) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        self.fail(format!("cannot read {}: {e}", path.display()));
                        continue;
                    }
                };
                match kind_of(&path, &m, true) {
                    Kind::Dir => {
                        // redirect_dir and metacopy would put a file's data or a folder's
                        // origin elsewhere; Garuda mounts without them, so finding one means
                        // the list cannot be trusted.
                        if has_overlay_xattr(&path, "redirect", None)
                            || has_overlay_xattr(&path, "metacopy", None)
                        {
                            self.fail(format!(
                                "{rel}: overlayfs redirect or metacopy is not supported"
                            ));
                        }
                        let opaque = has_overlay_xattr(&path, "opaque", Some(b"y"));
                        match self.lower_meta(&rel) {
                            Some(lm) if lm.file_type().is_dir() => {
                                // Nested opaque folders are covered by the outermost one.
                                let outermost = opaque && !hidden;
                                if outermost {
                                    self.opaque_deletions(upper, &rel);
                                }
                            }
                            Some(lm) => self.deleted(&rel, &lm),
                            None => {}
                        }
                        stack.push((rel, hidden || opaque));
                    }
                    Kind::File => {
                        if has_overlay_xattr(&path, "metacopy", None) {
                            self.fail(format!("{rel}: overlayfs metacopy is not supported"));
                        }
                        self.staged_file(&rel, &path, &m);
                    }
                    Kind::Link => self.staged_link(&rel, &path, &m),
                    Kind::Whiteout => match self.lower_meta(&rel) {
                        Some(lm) if lm.file_type().is_dir() => self.lower_subtree_deleted(&rel),
                        Some(lm) => self.deleted(&rel, &lm),
                        None => {}
                    },
                    Kind::Special => self.specials.push(rel),
                }
            }
        }
    }

    /// An opaque upper folder hides the whole lower folder: every lower entry with no upper
    /// counterpart is deleted.
    fn opaque_deletions(&mut self, upper: &Path, rel: &str) {
        let mut stack = vec![rel.to_string()];
        while let Some(dir) = stack.pop() {
            for name in self.list_dir(&join(self.project, &dir), &dir) {
                let e = format!("{dir}/{name}");
                if !self.tick() {
                    return;
                }
                let lm = match lstat(&self.project.join(&e)) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(err) => {
                        self.fail(format!(
                            "cannot read {}: {err}",
                            self.project.join(&e).display()
                        ));
                        continue;
                    }
                };
                match lstat(&upper.join(&e)) {
                    Ok(Some(um)) => {
                        if um.file_type().is_dir() && lm.file_type().is_dir() {
                            stack.push(e);
                        }
                        // Otherwise the upper entry is listed by the upper walk.
                    }
                    Ok(None) if lm.file_type().is_dir() => self.lower_subtree_deleted(&e),
                    Ok(None) => self.deleted(&e, &lm),
                    Err(err) => {
                        self.fail(format!("cannot read {}: {err}", upper.join(&e).display()))
                    }
                }
            }
        }
    }

    /// A regular file in staging (upper or copy) compared with the project.
    fn staged_file(&mut self, rel: &str, path: &Path, m: &Metadata) {
        let lower = self.lower_meta(rel);
        self.staged_file_vs(rel, path, m, lower.as_ref(), true);
    }

    fn staged_file_vs(
        &mut self,
        rel: &str,
        path: &Path,
        m: &Metadata,
        lower: Option<&Metadata>,
        compare: bool,
    ) {
        let staged = StagedRef::File(Fingerprint::of(m));
        let lower_path = self.project.join(rel);
        let (kind, mode_before, binary) = match lower {
            None => (ChangeKind::Added, None, self.binary(&[path])),
            Some(lm) if lm.file_type().is_file() => {
                let perm_changed = lm.mode() & PERM_MASK != m.mode() & PERM_MASK;
                let same = if compare {
                    match same_content(path, &lower_path) {
                        Ok(s) => s,
                        Err(e) => {
                            self.fail(format!("cannot compare {rel}: {e}"));
                            false
                        }
                    }
                } else {
                    true
                };
                if !same {
                    (
                        ChangeKind::Modified,
                        Some(shown_mode(lm)),
                        self.binary(&[path, &lower_path]),
                    )
                } else if perm_changed {
                    (ChangeKind::ModeChanged, Some(shown_mode(lm)), false)
                } else {
                    return;
                }
            }
            Some(lm) if lm.file_type().is_symlink() => (
                ChangeKind::Modified,
                Some(shown_mode(lm)),
                self.binary(&[path]),
            ),
            Some(lm) => {
                if lm.file_type().is_dir() {
                    self.lower_subtree_deleted(rel);
                } else {
                    self.specials.push(rel.to_string());
                }
                (ChangeKind::Added, None, self.binary(&[path]))
            }
        };
        self.push(
            Change {
                path: rel.to_string(),
                kind,
                binary,
                mode_before,
                mode_after: Some(shown_mode(m)),
                link_target: None,
            },
            staged,
        );
    }

    fn staged_link(&mut self, rel: &str, path: &Path, m: &Metadata) {
        let lower = self.lower_meta(rel);
        self.staged_link_vs(rel, path, m, lower.as_ref());
    }

    fn staged_link_vs(&mut self, rel: &str, path: &Path, m: &Metadata, lower: Option<&Metadata>) {
        let target = match fs::read_link(path) {
            Ok(t) => t,
            Err(e) => {
                self.fail(format!("cannot read the link {rel}: {e}"));
                return;
            }
        };
        let Some(target_text) = target.to_str().map(str::to_string) else {
            self.fail(format!("{rel}: a link target that is not UTF-8"));
            return;
        };
        let (kind, mode_before) = match lower {
            None => (ChangeKind::LinkAdded, None),
            Some(lm) if lm.file_type().is_symlink() => {
                if fs::read_link(self.project.join(rel)).ok().as_deref() == Some(target.as_path()) {
                    return;
                }
                (ChangeKind::LinkChanged, Some(shown_mode(lm)))
            }
            Some(lm) if lm.file_type().is_file() => (ChangeKind::LinkAdded, Some(shown_mode(lm))),
            Some(lm) => {
                if lm.file_type().is_dir() {
                    self.lower_subtree_deleted(rel);
                } else {
                    self.specials.push(rel.to_string());
                }
                (ChangeKind::LinkAdded, None)
            }
        };
        let kind = if link_escapes(rel, &target, self.project) {
            ChangeKind::LinkOutOfRoot
        } else {
            kind
        };
        self.push(
            Change {
                path: rel.to_string(),
                kind,
                binary: false,
                mode_before,
                mode_after: Some(shown_mode(m)),
                link_target: Some(target_text),
            },
            StagedRef::Link(target),
        );
    }

    // ---- copy ----------------------------------------------------------------------------

    /// Every entry of a tree, links not followed.
    fn walk_tree(&mut self, root: &Path) -> BTreeMap<String, Metadata> {
        let mut out = BTreeMap::new();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            for name in self.list_dir(&join(root, &dir), &dir) {
                let rel = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if !self.tick() {
                    return out;
                }
                match lstat(&root.join(&rel)) {
                    Ok(Some(m)) => {
                        // Git's own storage is never applied and would dominate the walk
                        // (every loose object): the copy backend does not compare it.
                        let git_store = rel == ".git" || rel.ends_with("/.git");
                        if m.file_type().is_dir() && !git_store {
                            stack.push(rel.clone());
                        }
                        out.insert(rel, m);
                    }
                    Ok(None) => {}
                    Err(e) => self.fail(format!("cannot read {}: {e}", root.join(&rel).display())),
                }
            }
        }
        out
    }

    fn walk_copy(&mut self, project: &Path, copy: &Path, mark: FsTime) {
        let pmap = self.walk_tree(project);
        if self.over_limit {
            return;
        }
        // The limit bounds one tree's walk: the copy has as many entries as the project.
        self.seen = 0;
        let cmap = self.walk_tree(copy);
        if self.over_limit {
            return;
        }
        for (rel, cm) in &cmap {
            let pm = pmap.get(rel);
            let path = copy.join(rel);
            match kind_of(&path, cm, false) {
                Kind::Dir => {
                    if let Some(pm) = pm {
                        if !pm.file_type().is_dir() {
                            self.deleted(rel, pm);
                        }
                    }
                }
                Kind::File => {
                    // Same size, mtime and mode, and not touched since the command started
                    // (ctime cannot be set back): unchanged without reading it.
                    let compare = match pm {
                        Some(pm) if pm.file_type().is_file() => {
                            pm.len() != cm.len()
                                || pm.mtime() != cm.mtime()
                                || pm.mtime_nsec() != cm.mtime_nsec()
                                || FsTime::ctime(cm).at_or_after(mark)
                        }
                        _ => true,
                    };
                    if pm.is_some_and(|pm| pm.file_type().is_dir()) {
                        // The project's files under it are listed as deleted below.
                        self.push_added_over_dir(rel, &path, cm);
                    } else {
                        self.staged_file_vs(rel, &path, cm, pm, compare);
                    }
                }
                Kind::Link => {
                    if pm.is_some_and(|pm| pm.file_type().is_dir()) {
                        self.push_link_over_dir(rel, &path, cm);
                    } else {
                        self.staged_link_vs(rel, &path, cm, pm);
                    }
                }
                Kind::Whiteout | Kind::Special => self.specials.push(rel.clone()),
            }
        }
        for (rel, pm) in &pmap {
            if !cmap.contains_key(rel) && !pm.file_type().is_dir() {
                self.deleted(rel, pm);
            }
        }
    }

    fn push_added_over_dir(&mut self, rel: &str, path: &Path, cm: &Metadata) {
        let binary = self.binary(&[path]);
        self.push(
            Change {
                path: rel.to_string(),
                kind: ChangeKind::Added,
                binary,
                mode_before: None,
                mode_after: Some(shown_mode(cm)),
                link_target: None,
            },
            StagedRef::File(Fingerprint::of(cm)),
        );
    }

    fn push_link_over_dir(&mut self, rel: &str, path: &Path, cm: &Metadata) {
        self.staged_link_vs(rel, path, cm, None);
    }

    // ---- classification ------------------------------------------------------------------

    fn classify(mut self) -> (ChangeSet, Listing) {
        let mut set = ChangeSet::default();
        let mut listing = Listing::new();
        let mut rules = Rules::new(self.layout);
        let mut seen = HashSet::new();
        let raw = std::mem::take(&mut self.raw);
        for r in raw {
            if !seen.insert(r.change.path.clone()) {
                continue;
            }
            let path = r.change.path.clone();
            if is_sensitive_change(&r.change) {
                set.sensitive.push(path.clone());
            }
            match rules.is_ignored(&path, false) {
                Ok(true) => *set.ignored_counts.entry(top_key(&path)).or_default() += 1,
                Ok(false) => {
                    listing.insert(path, r.staged);
                    set.changes.push(r.change);
                }
                Err(e) => {
                    // Unknown whether it is tracked: shown, and the list cannot be applied.
                    self.fail(format!("cannot read git's index: {e}"));
                    listing.insert(path, r.staged);
                    set.changes.push(r.change);
                }
            }
        }
        for s in std::mem::take(&mut self.specials) {
            if seen.insert(s.clone()) {
                if is_sensitive_path(&s) {
                    set.sensitive.push(s.clone());
                }
                *set.ignored_counts.entry(top_key(&s)).or_default() += 1;
            }
        }
        set.changes.sort_by(|a, b| a.path.cmp(&b.path));
        set.sensitive.sort();
        set.sensitive.dedup();
        set.incomplete = self.incomplete;
        (set, listing)
    }
}

/// `"target/"` for `target/debug/x`, the name itself for a top-level file.
fn top_key(rel: &str) -> String {
    match rel.find('/') {
        Some(i) => format!("{}/", &rel[..i]),
        None => rel.to_string(),
    }
}

/// True when the link at `rel` (project-relative) with `target` may resolve outside the
/// project: an absolute target outside it, a `..` that climbs above the root, or a `..`
/// that follows one of the target's own folders. That last one is refused even when it would
/// stay inside lexically: `vendor/../x` goes wherever `vendor` points if `vendor` is itself a
/// link, which the lexical reading cannot know.
pub(crate) fn link_escapes(rel: &str, target: &Path, project: &Path) -> bool {
    let mut stack: Vec<String> = Vec::new();
    let rest: &Path = if target.is_absolute() {
        match target.strip_prefix(project) {
            Ok(r) => r,
            Err(_) => return true,
        }
    } else {
        stack.extend(
            crate::fsutil::parent_rel(rel)
                .split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string),
        );
        target
    };
    let mut own = 0usize;
    for c in rest.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if own > 0 || stack.pop().is_none() {
                    return true;
                }
            }
            Component::Normal(n) => {
                stack.push(n.to_string_lossy().into_owned());
                own += 1;
            }
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_root() {
        let p = Path::new("/home/u/proj");
        for (rel, target, out) in [
            ("a", "b", false),
            ("a", "./b", false),
            ("sub/a", "../b", false),
            ("sub/a", "../../b", true),
            ("a", "../proj/b", true),
            ("a", "/etc/passwd", true),
            ("a", "/home/u/proj/b", false),
            ("a", "/home/u/proj/../x", true),
            ("a", "/home/u/projx/b", true),
            ("sub/deeper/a", "../../x/y", false),
            ("a", "vendor/../x", true),
            ("a", "/", true),
        ] {
            assert_eq!(
                link_escapes(rel, Path::new(target), p),
                out,
                "{rel} -> {target}"
            );
        }
    }

    #[test]
    fn top_keys() {
        assert_eq!(top_key("target/debug/x"), "target/");
        assert_eq!(top_key(".git/index"), ".git/");
        assert_eq!(top_key("app.log"), "app.log");
    }

    #[test]
    fn empty_and_appliable() {
        let mut s = ChangeSet::default();
        assert!(s.is_empty() && s.can_apply());
        s.ignored_counts.insert("target/".into(), 3);
        assert!(s.is_empty());
        s.sensitive.push(".env".into());
        assert!(!s.is_empty());
        s.incomplete = Some("x".into());
        assert!(!s.can_apply());
    }
}
