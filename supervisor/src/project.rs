//! Which folder is the project: the one named with `--project`, else the nearest folder at or
//! above the current one that holds `.git`, else the current folder. `garuda sandbox`,
//! `garuda policy` and `garuda audit` all find it the same way.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The project folder, canonical: the one given, else the git root above `cwd`.
pub(crate) fn resolve_project(project: Option<PathBuf>, cwd: &Path) -> Result<PathBuf> {
    let project = project.unwrap_or_else(|| project_root_from(cwd));
    std::fs::canonicalize(&project).with_context(|| format!("project folder {}", project.display()))
}

/// The git root above `start` (the nearest folder holding `.git`), else `start` itself.
pub fn project_root_from(start: &Path) -> PathBuf {
    git_root_above(start).unwrap_or(start).to_path_buf()
}

/// The nearest folder at or above `start` that holds `.git`.
pub(crate) fn git_root_above(start: &Path) -> Option<&Path> {
    start.ancestors().find(|d| d.join(".git").exists())
}
