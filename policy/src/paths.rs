//! Small path helpers shared by the policy builder and the project walk.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::PolicyError;

fn is_absent(e: &io::Error) -> bool {
    // ENOTDIR: a component is a file (`~/.docker` is a file, so `~/.docker/config.json` is
    // not there).
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

fn canonicalize(path: &Path) -> Result<PathBuf, PolicyError> {
    fs::canonicalize(path).map_err(|source| PolicyError::Canonicalize {
        path: path.to_path_buf(),
        source,
    })
}

/// The canonical form of `path`, or `None` when there is nothing to resolve (no entry, or a
/// dangling link: nothing can be read through it). Any other failure is an error, never a
/// silent omission.
pub(crate) fn canonical_if_exists(path: &Path) -> Result<Option<PathBuf>, PolicyError> {
    match fs::canonicalize(path) {
        Ok(canonical) => Ok(Some(canonical)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(source) => Err(PolicyError::Canonicalize {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The canonical form of `path`, or `None` when no directory entry exists there. Unlike
/// [`canonical_if_exists`], a dangling link is an error: for a path that must be protected, a
/// command could create the link's target and write through it.
pub(crate) fn canonical_if_present(path: &Path) -> Result<Option<PathBuf>, PolicyError> {
    match fs::symlink_metadata(path) {
        Ok(_) => canonicalize(path).map(Some),
        Err(e) if is_absent(&e) => Ok(None),
        Err(source) => Err(PolicyError::Canonicalize {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Creates the directory `path` (and missing parents) with `mode` when nothing is there yet.
pub(crate) fn create_dir_if_missing(path: &Path, mode: u32) -> Result<(), PolicyError> {
    let create_error = |source| PolicyError::Create {
        path: path.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(path) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(create_error(e)),
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
    builder.create(path).map_err(create_error)?;
    // The umask may have removed bits; the mode is part of the contract, so set it exactly.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(create_error)?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(())
}

/// Sorts by path (so a parent comes right before its children) and drops duplicates.
pub(crate) fn sorted_unique(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_unique_puts_parents_before_children() {
        let got = sorted_unique(
            ["/a-b", "/a/b", "/a", "/a/b", "/a.b", "/a/b/c"]
                .iter()
                .map(PathBuf::from)
                .collect(),
        );
        let want: Vec<PathBuf> = ["/a", "/a/b", "/a/b/c", "/a-b", "/a.b"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn dangling_links_are_absent_or_errors_depending_on_the_question() {
        let tmp = tempfile::TempDir::new().unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("missing"), &link).unwrap();
        assert_eq!(canonical_if_exists(&link).unwrap(), None);
        assert!(matches!(
            canonical_if_present(&link),
            Err(PolicyError::Canonicalize { path, .. }) if path == link
        ));
        assert_eq!(
            canonical_if_present(&tmp.path().join("none")).unwrap(),
            None
        );
    }
}
