//! The one walk of the project: `.env` secrets, git repositories and `.garuda` directories.
//!
//! Git runs code from a repository's metadata: hooks, and commands named in its configuration
//! (`core.fsmonitor`, `core.hooksPath`, filters). The developer's `git` runs on the host, after
//! the sandbox is gone, so a command that could write what git reads there could run code on
//! the host. Protecting the files that exist today is not enough: git also reads files that do
//! not exist yet (`config.worktree`, `commondir`, a hooks folder, files of future versions),
//! and a link can be replaced by a real file. So every git directory under a writable root is
//! read-only **as a whole**, with writable holes only for what a command legitimately writes
//! and git never executes: `objects/`, `refs/` and `logs/` (real folders only; one that is a
//! link stays read-only). A git directory is a `.git` folder, the `gitdir:` target of a `.git`
//! file, the common directory named by `commondir`, a linked worktree's private folder and a
//! submodule's repository under `modules/`. Links inside a git directory cannot be changed any
//! more (their folder is read-only), so their targets are protected instead, resolved by
//! [`Protected::resolve`], which refuses a link on the way that a command could rewrite.
//!
//! `.git` itself as a link in a folder a direct-mode command can write is refused: the command
//! could replace the link, and a mount cannot sit on one. `<project>/.garuda` is read-only
//! whether it exists or not: a missing one is created empty (mode 0755, invisible to git) so
//! that it can be. What git's configuration names (hooks paths, included files, commands) is
//! protected afterwards by `gitexec.rs`, from the [`Repo`]s found here.

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::PolicyError;
use crate::paths::{canonical_if_exists, create_dir_if_missing};
use crate::protect::{Protected, Resolved};
use crate::sensitive::is_env_file_name;
use crate::walk_cache::{self, EntryKind};

/// Mode of a folder the walk creates (`.garuda`, a hooks path): what `git init` uses.
pub(crate) const CREATED_DIR_MODE: u32 = 0o755;

/// A git pointer file is one short line; anything larger is not one.
const MAX_POINTER_BYTES: u64 = 64 * 1024;

/// The parts of a git directory a command may write: data git reads, never runs.
pub(crate) const WRITABLE_HOLES: [&str; 3] = ["objects", "refs", "logs"];

/// How deep submodule repositories are looked for under `modules/` (a submodule named
/// `libs/a` lives in `modules/libs/a`, and submodules nest).
const MAX_MODULE_DEPTH: usize = 16;

/// One git directory the walk found, for the configuration pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repo {
    /// The git directory (canonical): a `.git` folder, a `gitdir:` target, a linked
    /// worktree's private folder or a submodule's repository.
    pub(crate) git_dir: PathBuf,
    /// Its common directory (the git directory itself unless `commondir` names another).
    pub(crate) common_dir: PathBuf,
    /// Where git runs for it: the folders holding a `.git` entry that leads here (the
    /// worktree tops), as far as the walk knows.
    pub(crate) tops: Vec<PathBuf>,
}

/// What the walk found.
#[derive(Debug)]
pub(crate) struct ProjectScan {
    /// `.env` and `.env.*` files and directories, canonical.
    pub(crate) env_files: Vec<PathBuf>,
    /// Read-only paths and holes found so far.
    pub(crate) protected: Protected,
    /// Every git directory found, in the project and the one holding it.
    pub(crate) repos: Vec<Repo>,
}

/// Walks `root` (canonical) once. Symbolic links are never followed into, and git
/// directories are not descended into. `staged`: the command will see a staged view of the
/// project, so a link *inside the project* cannot be replaced in the real one.
///
/// Side effect: a missing `<root>/.garuda` is created (mode 0755).
pub(crate) fn scan_project(
    root: &Path,
    writable_roots: &[PathBuf],
    staged: bool,
    garuda_home: Option<&Path>,
) -> Result<ProjectScan, PolicyError> {
    let mut walker = Walker {
        root: root.to_path_buf(),
        staged,
        protected: Protected::new(writable_roots),
        repos: Vec::new(),
        seen: HashSet::new(),
    };
    let mut env_files = Vec::new();
    let mut git_entries: Vec<(PathBuf, PathBuf, EntryKind)> = Vec::new();
    let mut nested_garuda = Vec::new();
    // What each folder holds, from the cache when the folder has not changed since it was
    // listed (`walk_cache`): the closure below judges it the same way either way.
    walk_cache::walk(
        garuda_home,
        root,
        is_env_file_name,
        // An unlistable directory is an error, not a skip: the command runs as the same user,
        // can `chmod` it back (it is writable) and read a `.env` the walk never saw.
        |dir, source| {
            // Opened without following links: a folder its parent listed that is now a link
            // (ELOOP, ENOTDIR) or a file (ENOTDIR) changed under the walk.
            if dir != root && matches!(source.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) {
                PolicyError::FolderChangedDuringWalk {
                    path: dir.to_path_buf(),
                }
            } else {
                PolicyError::ReadDir {
                    path: dir.to_path_buf(),
                    source,
                }
            }
        },
        |dir, folder| {
            for name in folder.env() {
                // Through a link the secret is the target; a dangling link holds nothing.
                if let Some(secret) = canonical_if_exists(&dir.join(name))? {
                    env_files.push(secret);
                }
            }
            if let Some(kind) = folder.git {
                git_entries.push((dir.to_path_buf(), dir.join(".git"), kind));
            }
            if folder.garuda && dir != root {
                nested_garuda.push(dir.join(".garuda"));
            }
            Ok(())
        },
    )?;
    walker.root_garuda()?;
    for path in nested_garuda {
        // An existing nested `.garuda` folder (through a link, its target) is read-only. It
        // matters when garuda runs with that folder as the project, and then it is the root
        // `.garuda` of that run, with the full treatment.
        if let Some(target) = canonical_if_exists(&path)? {
            if target.is_dir() {
                walker.protected.protect(target);
            }
        }
    }
    // Real folders first, so that links and pointers resolved afterwards know which folders
    // are read-only.
    git_entries.sort_by_key(|(_, _, kind)| (*kind != EntryKind::Dir, *kind != EntryKind::File));
    for (parent, path, kind) in &git_entries {
        walker.git_entry(parent, path, *kind)?;
    }
    walker.enclosing_repository()?;
    Ok(ProjectScan {
        env_files,
        protected: walker.protected,
        repos: walker.repos,
    })
}

struct Walker {
    root: PathBuf,
    staged: bool,
    protected: Protected,
    repos: Vec<Repo>,
    /// Git directories already handled (each is handled once; a second way to it only adds a
    /// worktree top).
    seen: HashSet<PathBuf>,
}

impl Walker {
    /// A link at `path` that a command could replace with a folder of its own. In staged mode
    /// the project is a view, so a link inside it cannot be replaced in the real project (a
    /// change under `.git` is never applied, one under `.garuda` needs its own question).
    fn replaceable_link(&self, path: &Path) -> bool {
        self.protected.is_writable(path) && !(self.staged && path.starts_with(&self.root))
    }

    /// `<root>/.garuda`: read-only whether it exists or not.
    fn root_garuda(&mut self) -> Result<(), PolicyError> {
        let path = self.root.join(".garuda");
        // A command could create it and plant settings (and, once the agent has them, hooks
        // and commands that run later). An empty folder is what "no settings" already means,
        // and git does not show an empty folder. Whatever is there afterwards, also a link a
        // command running at the same time put there first, is then judged as found.
        create_dir_if_missing(&path, CREATED_DIR_MODE)?;
        let meta = fs::symlink_metadata(&path).map_err(|source| PolicyError::Canonicalize {
            path: path.clone(),
            source,
        })?;
        if !meta.file_type().is_symlink() {
            // A folder, or a file (protected as a file: nothing can be created inside it).
            self.protected.protect(path);
            return Ok(());
        }
        if self.replaceable_link(&path) {
            return Err(PolicyError::ProtectedLinkInDirectMode {
                path,
                what: "the project's .garuda",
                fix: "move the folder it names to .garuda",
            });
        }
        let target = self.link_target(&path)?;
        self.protected.protect(target);
        Ok(())
    }

    /// The target of the link at `path`, resolved strictly; a dangling one is an error (a
    /// command could create the target).
    fn link_target(&self, path: &Path) -> Result<PathBuf, PolicyError> {
        match resolve_link(&self.protected, path)? {
            Resolved::Exists(target) => Ok(target),
            Resolved::Missing { .. } => Err(PolicyError::Canonicalize {
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        }
    }

    /// A `.git` entry in `parent`: a repository folder, a pointer file, or a link to either.
    fn git_entry(
        &mut self,
        parent: &Path,
        path: &Path,
        kind: EntryKind,
    ) -> Result<(), PolicyError> {
        match kind {
            EntryKind::Dir => return self.git_dir(Some(parent), path),
            EntryKind::File => return self.git_file(parent, path),
            EntryKind::Other => return Ok(()),
            EntryKind::Symlink => {}
        }
        if self.replaceable_link(path) {
            return Err(PolicyError::ProtectedLinkInDirectMode {
                path: path.to_path_buf(),
                what: "the repository's .git",
                fix: "`git init --separate-git-dir=<folder>` in the repository moves it there \
                      and leaves a `gitdir:` file, which garuda protects",
            });
        }
        // Followed once, as git follows it.
        let target = self.link_target(path)?;
        if target.is_dir() {
            self.git_dir(Some(parent), &target)
        } else if target.is_file() {
            self.git_file(parent, &target)
        } else {
            Ok(())
        }
    }

    /// A `.git` file (worktree or submodule) in `parent`: follow `gitdir:`.
    fn git_file(&mut self, parent: &Path, file: &Path) -> Result<(), PolicyError> {
        let text = read_pointer(file)?;
        let Some(gitdir) = text.strip_prefix("gitdir: ") else {
            return Err(PolicyError::GitPointerInvalid {
                path: file.to_path_buf(),
                reason: "does not start with `gitdir: `",
            });
        };
        // The pointer itself: rewritten, it would send the host's git to a repository (and
        // hooks) the command made. Relative paths are relative to the folder of the `.git`
        // entry, as git reads them.
        self.protected.protect(file.to_path_buf());
        let gitdir = self.pointer_target(file, parent, gitdir)?;
        self.git_dir(Some(parent), &gitdir)
    }

    /// A git directory (canonical), reached from the worktree top `top` when known.
    fn git_dir(&mut self, top: Option<&Path>, dir: &Path) -> Result<(), PolicyError> {
        if !self.seen.insert(dir.to_path_buf()) {
            if let Some(top) = top {
                for repo in self.repos.iter_mut().filter(|r| r.git_dir == dir) {
                    if !repo.tops.iter().any(|t| t == top) {
                        repo.tops.push(top.to_path_buf());
                    }
                }
            }
            return Ok(());
        }
        // The whole folder: what exists today and whatever git will look for tomorrow.
        self.protected.protect(dir.to_path_buf());
        for hole in WRITABLE_HOLES {
            let path = dir.join(hole);
            // A hole that is a link is not opened: its target is not a git directory's part.
            if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                self.protected.open_hole(path);
            }
        }
        self.link_targets(dir)?;
        let commondir = dir.join("commondir");
        let common = if fs::symlink_metadata(&commondir).is_ok() {
            let text = read_pointer(&commondir)?;
            let common = self.pointer_target(&commondir, dir, &text)?;
            self.git_dir(None, &common)?;
            common
        } else {
            dir.to_path_buf()
        };
        self.repos.push(Repo {
            git_dir: dir.to_path_buf(),
            common_dir: common.clone(),
            tops: top.map(Path::to_path_buf).into_iter().collect(),
        });
        if common != dir {
            return Ok(());
        }
        // Linked worktrees' private folders (git directories of their own, which git reads
        // for a worktree checked out elsewhere, maybe outside the project).
        for private in subdirs(&dir.join("worktrees"))? {
            let top = worktree_top(&private);
            self.git_dir(top.as_deref(), &private)?;
        }
        // Submodules' repositories, also those with no checkout in the project.
        self.modules(&dir.join("modules"), 0)
    }

    /// Submodule repositories under `dir` (a folder with a `HEAD` is one; any other folder is
    /// part of a submodule's name).
    fn modules(&mut self, dir: &Path, depth: usize) -> Result<(), PolicyError> {
        if depth > MAX_MODULE_DEPTH {
            return Ok(());
        }
        for sub in subdirs(dir)? {
            if sub.join("HEAD").is_file() {
                self.git_dir(None, &sub)?;
            } else {
                self.modules(&sub, depth + 1)?;
            }
        }
        Ok(())
    }

    /// Links directly inside a git directory (and inside its hooks folder) cannot be changed
    /// once the folder is read-only, but their targets can: each target is protected. The
    /// holes are skipped: a linked `objects` holds data, not code.
    fn link_targets(&mut self, dir: &Path) -> Result<(), PolicyError> {
        for (name, path) in link_entries(dir)? {
            if WRITABLE_HOLES.iter().any(|h| name == *h) {
                continue;
            }
            let target = protected_link_target(&mut self.protected, &path)?;
            if name == "hooks" {
                if let Some(target) = target {
                    hook_links(&mut self.protected, &target)?;
                }
            }
        }
        if fs::symlink_metadata(dir.join("hooks")).is_ok_and(|m| m.is_dir()) {
            hook_links(&mut self.protected, &dir.join("hooks"))?;
        }
        Ok(())
    }

    /// Resolves the path a pointer file names, relative to `base`. A missing target is an
    /// error: a command could create it and plant hooks there for the host's git to run.
    fn pointer_target(
        &self,
        file: &Path,
        base: &Path,
        target: &str,
    ) -> Result<PathBuf, PolicyError> {
        let named = base.join(target);
        match self.protected.resolve(&named, file)? {
            Resolved::Exists(dir) if dir.is_dir() => Ok(dir),
            _ => Err(PolicyError::GitPointerTarget {
                path: file.to_path_buf(),
                target: named,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            }),
        }
    }

    /// The repository that holds the project, when the project is a folder inside one: its
    /// configuration can name files in the project (`core.hooksPath = sub/hooks`). Not looked
    /// for when the project has a `.git` of its own: git stops there.
    fn enclosing_repository(&mut self) -> Result<(), PolicyError> {
        let root = self.root.clone();
        if fs::symlink_metadata(root.join(".git")).is_ok() {
            return Ok(());
        }
        for dir in root.ancestors().skip(1) {
            let path = dir.join(".git");
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            return self.git_entry(dir, &path, EntryKind::of(meta.file_type()));
        }
        Ok(())
    }
}

/// Protects the target of a link git follows (resolved strictly). `None` when it does not
/// exist and lies where no command can create it; an error when a command could.
pub(crate) fn protected_link_target(
    protected: &mut Protected,
    link: &Path,
) -> Result<Option<PathBuf>, PolicyError> {
    match resolve_link(protected, link)? {
        Resolved::Exists(target) => {
            protected.protect(target.clone());
            Ok(Some(target))
        }
        missing @ Resolved::Missing { .. } => {
            // Dangling: a command could create the target and git would follow the link to it.
            if protected.is_writable(&missing.path()) {
                return Err(PolicyError::Canonicalize {
                    path: link.to_path_buf(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            Ok(None)
        }
    }
}

/// The target of the link at `link` (relative to the link's folder, as the kernel reads it),
/// resolved by [`Protected::resolve`].
fn resolve_link(protected: &Protected, link: &Path) -> Result<Resolved, PolicyError> {
    let text = fs::read_link(link).map_err(|source| PolicyError::Canonicalize {
        path: link.to_path_buf(),
        source,
    })?;
    let parent = link.parent().unwrap_or(Path::new("/"));
    protected.resolve(&parent.join(text), link)
}

/// Hooks that are links (`pre-commit -> ../../scripts/pre-commit`): git runs the target, so
/// the target of every link directly inside the hooks folder `hooks` is protected.
pub(crate) fn hook_links(protected: &mut Protected, hooks: &Path) -> Result<(), PolicyError> {
    for (_, link) in link_entries(hooks)? {
        protected_link_target(protected, &link)?;
    }
    Ok(())
}

/// The entries of `dir` that are symbolic links, with their names; none when `dir` does not
/// exist or is not a folder.
fn link_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, PolicyError> {
    entries_of(dir, fs::FileType::is_symlink)
}

/// The real subdirectories (not links) of `dir`; none when `dir` does not exist.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let dirs = entries_of(dir, fs::FileType::is_dir)?;
    Ok(dirs.into_iter().map(|(_, path)| path).collect())
}

/// The entries of `dir` whose type (not followed) `keep` accepts, with their names, sorted;
/// none when `dir` does not exist or is not a folder.
fn entries_of(
    dir: &Path,
    keep: fn(&fs::FileType) -> bool,
) -> Result<Vec<(String, PathBuf)>, PolicyError> {
    let list_error = |source| PolicyError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Vec::new())
        }
        Err(e) => return Err(list_error(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(list_error)?;
        if keep(&entry.file_type().map_err(list_error)?) {
            out.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// The worktree top of a linked worktree's private folder: its `gitdir` file names
/// `<top>/.git`. `None` when that cannot be read or the top does not exist.
fn worktree_top(private: &Path) -> Option<PathBuf> {
    let text = read_pointer(&private.join("gitdir")).ok()?;
    let named = private.join(text);
    canonical_if_exists(named.parent()?).ok().flatten()
}

/// Reads a git pointer file and strips the line ending git strips.
fn read_pointer(file: &Path) -> Result<String, PolicyError> {
    let read_error = |source| PolicyError::GitPointerRead {
        path: file.to_path_buf(),
        source,
    };
    let invalid = |reason| PolicyError::GitPointerInvalid {
        path: file.to_path_buf(),
        reason,
    };
    // Non-blocking and regular files only: a FIFO planted in a repository a command made must
    // not hang the next policy build.
    let handle = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file)
        .map_err(read_error)?;
    if !handle.metadata().map_err(read_error)?.is_file() {
        return Err(invalid("not a regular file"));
    }
    let mut bytes = Vec::new();
    handle
        .take(MAX_POINTER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_POINTER_BYTES {
        return Err(invalid("too large"));
    }
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8"))?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.is_empty() || text.contains('\n') {
        return Err(invalid("expected exactly one path"));
    }
    Ok(text.to_string())
}
