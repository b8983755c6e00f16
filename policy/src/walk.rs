//! The one walk of the project: `.env` secrets, git metadata and `.garuda` directories.
//!
//! Git runs code from a repository's metadata: hooks, and commands named in its config
//! (`core.hooksPath`, `core.fsmonitor`, `core.sshCommand`, filters). The developer's `git` runs
//! on the host, outside the sandbox, so a command that could write those files could run code
//! on the host later. Hence every repository's hooks and config are read-only to commands,
//! wherever git would look for them: `.git` directories, `.git` files (worktrees, submodules)
//! and the common directory those point to.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::PolicyError;
use crate::paths::{
    canonical_if_exists, canonical_if_present, create_dir_if_missing, create_file_if_missing,
};
use crate::sensitive::is_env_file_name;

/// Mode of a `hooks` directory created by the walk: what `git init` uses.
const HOOKS_DIR_MODE: u32 = 0o755;

/// A git pointer file is one short line; anything larger is not one.
const MAX_POINTER_BYTES: u64 = 64 * 1024;

/// What the walk found, canonical and unsorted.
#[derive(Debug, Default)]
pub(crate) struct ProjectScan {
    /// `.env` and `.env.*` files and directories.
    pub(crate) env_files: Vec<PathBuf>,
    /// Git hooks and config, and `.garuda` directories, that lie under a writable root.
    pub(crate) read_only: Vec<PathBuf>,
}

/// Walks `root` (canonical) once. Symbolic links are never followed into, and `.git`
/// directories are not descended into (their content is protected through hooks and config).
/// Creates a missing `hooks` directory (and an empty `config`) in each repository found under
/// a writable root.
pub(crate) fn scan_project(
    root: &Path,
    writable_roots: &[PathBuf],
) -> Result<ProjectScan, PolicyError> {
    let mut walker = Walker {
        writable_roots,
        scan: ProjectScan::default(),
    };
    // An explicit stack: a deeply nested tree must not overflow the supervisor's stack.
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        // An unlistable directory is an error, not a skip: the command runs as the same user,
        // can `chmod` it back (it is writable) and read a `.env` the walk never saw.
        let list_error = |source| PolicyError::ReadDir {
            path: dir.clone(),
            source,
        };
        for entry in fs::read_dir(&dir).map_err(list_error)? {
            let entry = entry.map_err(list_error)?;
            let name = entry.file_name();
            let path = entry.path();
            // `file_type` does not follow links: a link to `/` or to the home directory is
            // never walked, so the walk cannot list or create anything through it.
            let kind = entry.file_type().map_err(list_error)?;
            if is_env_file_name(&name) {
                // Through a link the secret is the target; a dangling link holds nothing.
                if let Some(secret) = canonical_if_exists(&path)? {
                    walker.scan.env_files.push(secret);
                }
            }
            if name == ".git" {
                walker.git_entry(&dir, &path)?;
                continue;
            }
            if name == ".garuda" {
                if let Some(target) = canonical_if_exists(&path)? {
                    if target.is_dir() {
                        walker.protect(target);
                    }
                }
            }
            if kind.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(walker.scan)
}

struct Walker<'a> {
    writable_roots: &'a [PathBuf],
    scan: ProjectScan,
}

impl Walker<'_> {
    fn is_writable(&self, path: &Path) -> bool {
        self.writable_roots
            .iter()
            .any(|root| path.starts_with(root))
    }

    /// Records a canonical path; one outside every writable root is read-only anyway.
    fn protect(&mut self, path: PathBuf) {
        if self.is_writable(&path) {
            self.scan.read_only.push(path);
        }
    }

    fn protect_if_present(&mut self, path: &Path) -> Result<(), PolicyError> {
        if let Some(canonical) = canonical_if_present(path)? {
            self.protect(canonical);
        }
        Ok(())
    }

    /// A `.git` entry found in `parent`: a repository directory, or a pointer file.
    fn git_entry(&mut self, parent: &Path, path: &Path) -> Result<(), PolicyError> {
        // Followed once when it is a link: git follows it too. A dangling one is an error, as
        // a command could create its target.
        let Some(target) = canonical_if_present(path)? else {
            return Ok(());
        };
        if target.is_dir() {
            self.git_dir(&target)
        } else if target.is_file() {
            self.git_file(parent, &target)
        } else {
            Ok(())
        }
    }

    /// A repository directory (or a common directory): protect its hooks and config.
    fn git_dir(&mut self, dir: &Path) -> Result<(), PolicyError> {
        let hooks = dir.join("hooks");
        let config = dir.join("config");
        if self.is_writable(dir) {
            // Git runs whatever hooks exist. If `hooks` is missing, read-only protection has
            // nothing to bind to and a command could create `hooks/pre-commit`, which the
            // developer's next `git commit` runs on the host. So it is created, then protected.
            create_dir_if_missing(&hooks, HOOKS_DIR_MODE)?;
            // Same for `config`: a command could create one naming `core.fsmonitor` or
            // `core.hooksPath`. An empty config is what git assumes when there is none.
            create_file_if_missing(&config)?;
        }
        self.protect_if_present(&hooks)?;
        self.protect_if_present(&config)?;
        // `commondir` sends git to another directory for its config and hooks. An existing
        // one is bound read-only; a missing one cannot be (there is nothing to bind), so the
        // supervisor's git guard removes one that a command creates (see `GitGuard`).
        self.protect_if_present(&dir.join("commondir"))?;
        // Read by git when `extensions.worktreeConfig` is on (a config change, itself protected).
        self.protect_if_present(&dir.join("config.worktree"))?;
        // Linked worktrees' private folders: a rewritten `commondir` or `gitdir` there sends
        // the git of a worktree checked out elsewhere (maybe outside the project) to a
        // repository the command made.
        for private in subdirs(&dir.join("worktrees"))? {
            for name in ["commondir", "gitdir", "config.worktree", "config"] {
                self.protect_if_present(&private.join(name))?;
            }
            self.protect_if_present(&private.join("hooks"))?;
        }
        // Submodules' repositories, also those with no checkout in the project.
        for module in subdirs(&dir.join("modules"))? {
            self.git_dir(&module)?;
        }
        Ok(())
    }

    /// A `.git` file (worktree or submodule) in `parent`: follow `gitdir:` and, from there,
    /// `commondir`.
    fn git_file(&mut self, parent: &Path, file: &Path) -> Result<(), PolicyError> {
        let text = read_pointer(file)?;
        let Some(gitdir) = text.strip_prefix("gitdir: ") else {
            return Err(PolicyError::GitPointerInvalid {
                path: file.to_path_buf(),
                reason: "does not start with `gitdir: `",
            });
        };
        let gitdir = resolve_pointer(file, parent, gitdir)?;
        // The pointer itself: rewritten, it would send the host's git to a repository (and
        // hooks) the command made.
        self.protect(file.to_path_buf());
        let commondir_file = gitdir.join("commondir");
        if canonical_if_present(&commondir_file)?.is_none() {
            // A submodule's own repository: hooks and config live here.
            return self.git_dir(&gitdir);
        }
        // A linked worktree: its private directory holds `config.worktree` (and may hold
        // hooks and config); the shared ones live in the common directory.
        self.protect_if_present(&gitdir.join("hooks"))?;
        self.protect_if_present(&gitdir.join("config"))?;
        self.protect_if_present(&gitdir.join("config.worktree"))?;
        self.protect_if_present(&commondir_file)?;
        let text = read_pointer(&commondir_file)?;
        let common = resolve_pointer(&commondir_file, &gitdir, &text)?;
        self.git_dir(&common)
    }
}

/// The real subdirectories (not links) of `dir`; none when `dir` does not exist.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let list_error = |source| PolicyError::ReadDir {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(list_error(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(list_error)?;
        if entry.file_type().map_err(list_error)?.is_dir() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a git pointer file and strips the line ending git strips.
fn read_pointer(file: &Path) -> Result<String, PolicyError> {
    let read_error = |source| PolicyError::GitPointerRead {
        path: file.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    fs::File::open(file)
        .map_err(read_error)?
        .take(MAX_POINTER_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let invalid = |reason| PolicyError::GitPointerInvalid {
        path: file.to_path_buf(),
        reason,
    };
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

/// Resolves the path a pointer file names, relative to `base`. A missing target is an error:
/// a command could create it and plant hooks there for the host's git to run.
fn resolve_pointer(file: &Path, base: &Path, target: &str) -> Result<PathBuf, PolicyError> {
    let target = base.join(target);
    fs::canonicalize(&target).map_err(|source| PolicyError::GitPointerTarget {
        path: file.to_path_buf(),
        target,
        source,
    })
}
