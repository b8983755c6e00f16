//! The git guard: what read-only mounts cannot protect.
//!
//! Git trusts a `commondir` file in any git directory: when it exists, git takes its config and
//! hooks from the directory it names. An existing `commondir` is bound read-only by the
//! executors, but a *missing* one has nothing to bind to, and a command may create it in the
//! writable `.git`, pointing at a config and hooks of its own that the developer's next `git`
//! would run. The guard closes that: before a command it records which of these files exist
//! (and their content), after it — when every process of the command is dead, so nothing can
//! race it — it removes what the command created and reports it.
//!
//! Staged commands need no guard (changes under `.git/` are never applied), but it does no
//! harm there either.

use std::path::{Path, PathBuf};

use crate::ExecPolicy;

/// Files git follows to another directory, relative to a git directory.
const REDIRECTS: [&str; 1] = ["commondir"];

/// A record of the redirect files before a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitGuard {
    entries: Vec<(PathBuf, Option<Vec<u8>>)>,
}

/// Something a command did that the guard undid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardViolation {
    /// The file.
    pub path: PathBuf,
    /// What was done about it.
    pub action: &'static str,
}

impl std::fmt::Display for GuardViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.action)
    }
}

/// The git directories of a policy: the parents of the protected `hooks` folders.
fn git_dirs(policy: &ExecPolicy) -> Vec<&Path> {
    let mut dirs: Vec<&Path> = policy
        .read_only_paths
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "hooks"))
        .filter_map(|p| p.parent())
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

impl GitGuard {
    /// Record the redirect files of every git directory the policy protects.
    pub fn snapshot(policy: &ExecPolicy) -> GitGuard {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for d in git_dirs(policy) {
            dirs.push(d.to_path_buf());
            // Linked worktrees' private folders redirect with their own `commondir`.
            if let Ok(entries) = std::fs::read_dir(d.join("worktrees")) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        dirs.push(e.path());
                    }
                }
            }
        }
        let entries = dirs
            .iter()
            .flat_map(|d| REDIRECTS.iter().map(move |r| d.join(r)))
            .map(|p| {
                let content = std::fs::read(&p).ok();
                (p, content)
            })
            .collect();
        GitGuard { entries }
    }

    /// After the command: remove redirect files it created and put back ones it changed.
    /// (An existing one is read-only in every sandbox, so only creation is expected.)
    pub fn restore(&self) -> Vec<GuardViolation> {
        let mut found = Vec::new();
        for (path, before) in &self.entries {
            let now = std::fs::symlink_metadata(path)
                .ok()
                .map(|_| std::fs::read(path).unwrap_or_default());
            if now.as_ref() == before.as_ref() {
                continue;
            }
            let action = match before {
                None => match std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path))
                {
                    Ok(()) => "created by the command (it would redirect git's config and hooks); removed",
                    Err(_) => "created by the command (it would redirect git's config and hooks); COULD NOT BE REMOVED",
                },
                Some(old) => match std::fs::write(path, old) {
                    Ok(()) => "changed by the command; restored",
                    Err(_) => "changed by the command; COULD NOT BE RESTORED",
                },
            };
            found.push(GuardViolation {
                path: path.clone(),
                action,
            });
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, NetworkMode};

    #[test]
    fn a_created_commondir_is_removed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        let policy = ExecPolicy {
            project_root: dir.path().to_path_buf(),
            writable_roots: vec![dir.path().to_path_buf()],
            read_only_paths: vec![git.join("config"), git.join("hooks")],
            unreadable_paths: vec![],
            hidden_dirs: vec![],
            network: NetworkMode::Isolated,
            staged: None,
            env: vec![],
            limits: Limits::default(),
        };
        let guard = GitGuard::snapshot(&policy);
        assert!(
            guard.restore().is_empty(),
            "nothing changed, nothing reported"
        );
        std::fs::write(git.join("commondir"), "../../evil\n").unwrap();
        let v = guard.restore();
        assert_eq!(v.len(), 1);
        assert!(v[0].action.contains("removed"));
        assert!(!git.join("commondir").exists());
    }
}
