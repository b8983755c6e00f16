//! Where the staged view's entries live on disk: how overlayfs would resolve a path, read
//! back from the upper folder while nothing is mounted.

use std::collections::HashSet;
use std::fs::Metadata;
use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil::{has_overlay_xattr, join, kind_of, lstat, lstat_rel, Kind};

/// The two places a session's files are in.
#[derive(Debug, Clone)]
pub(crate) enum Layout {
    /// overlayfs: the project is the lower layer, the command's writes are in `upper`.
    Overlay { lower: PathBuf, upper: PathBuf },
    /// A full copy of the project.
    Copy { project: PathBuf, copy: PathBuf },
}

/// Where the staged view takes a path from.
#[derive(Debug)]
pub(crate) enum ViewEntry {
    /// From the upper folder (overlay) or the copy.
    Staged(PathBuf, Metadata),
    /// From the project (overlay lower layer, unchanged).
    Lower(PathBuf, Metadata),
    /// Not in the view.
    Absent,
}

impl Layout {
    pub(crate) fn project(&self) -> &Path {
        match self {
            Layout::Overlay { lower, .. } => lower,
            Layout::Copy { project, .. } => project,
        }
    }

    /// The staging folder that holds the command's writes (`upper/` or `copy/`).
    pub(crate) fn staged_root(&self) -> &Path {
        match self {
            Layout::Overlay { upper, .. } => upper,
            Layout::Copy { copy, .. } => copy,
        }
    }

    /// What the command would see at `rel`. Symbolic links are entries, never followed.
    pub(crate) fn view(&self, rel: &str) -> io::Result<ViewEntry> {
        match self {
            Layout::Copy { copy, .. } => {
                let mut known = HashSet::new();
                Ok(match lstat_rel(copy, rel, &mut known)? {
                    Some(m) => ViewEntry::Staged(join(copy, rel), m),
                    None => ViewEntry::Absent,
                })
            }
            Layout::Overlay { lower, upper } => {
                let parts: Vec<&str> = rel.split('/').collect();
                let mut hidden = false;
                let mut prefix = String::new();
                for (i, part) in parts.iter().enumerate() {
                    if !prefix.is_empty() {
                        prefix.push('/');
                    }
                    prefix.push_str(part);
                    let last = i + 1 == parts.len();
                    let path = join(upper, &prefix);
                    let Some(m) = lstat(&path)? else {
                        // Nothing deeper is in upper either.
                        if hidden {
                            return Ok(ViewEntry::Absent);
                        }
                        break;
                    };
                    match kind_of(&path, &m, true) {
                        Kind::Whiteout => return Ok(ViewEntry::Absent),
                        Kind::Dir => {
                            if last {
                                return Ok(ViewEntry::Staged(path, m));
                            }
                            if has_overlay_xattr(&path, "opaque", Some(b"y")) {
                                hidden = true;
                            }
                        }
                        _ if last => return Ok(ViewEntry::Staged(path, m)),
                        // A file or link in upper hides everything the lower had below it.
                        _ => return Ok(ViewEntry::Absent),
                    }
                }
                let mut known = HashSet::new();
                Ok(match lstat_rel(lower, rel, &mut known)? {
                    Some(m) => ViewEntry::Lower(join(lower, rel), m),
                    None => ViewEntry::Absent,
                })
            }
        }
    }

    /// The on-disk path of the regular file the view shows at `rel`, if it shows one.
    pub(crate) fn staged_regular_file(&self, rel: &str) -> Option<PathBuf> {
        match self.view(rel).ok()? {
            ViewEntry::Staged(p, m) | ViewEntry::Lower(p, m) if m.file_type().is_file() => Some(p),
            _ => None,
        }
    }

    /// True when the view has a directory at `rel`.
    pub(crate) fn has_dir(&self, rel: &str) -> bool {
        matches!(self.view(rel), Ok(ViewEntry::Staged(_, m) | ViewEntry::Lower(_, m)) if m.file_type().is_dir())
    }
}
