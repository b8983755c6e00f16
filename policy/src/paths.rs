//! Small path helpers shared by the policy builder and the project walk.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::PolicyError;

pub(crate) fn is_absent(e: &io::Error) -> bool {
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

/// True for a canonical path that every Linux executor replaces with its own content, so that
/// it cannot be shared with commands: `/tmp` itself (a private, empty tmpfs; a folder *under*
/// `/tmp` is bound into it at its own path), and anything at or under `/dev` or `/proc` (fresh
/// ones).
pub(crate) fn replaced_by_sandbox(path: &Path) -> bool {
    path == Path::new("/tmp") || path.starts_with("/dev") || path.starts_with("/proc")
}

/// The canonical form of `path`, or `None` when there is nothing to resolve (no entry, or a
/// dangling link: nothing can be read through it). Any other failure is an error, never a
/// silent omission.
pub(crate) fn canonical_if_exists(path: &Path) -> Result<Option<PathBuf>, PolicyError> {
    // Most of the paths asked about (the secrets of the default deny list) are absent: one
    // `lstat` says so, where `realpath` reads every component as a link first.
    match fs::symlink_metadata(path) {
        Err(e) if is_absent(&e) => return Ok(None),
        // Any other answer (even an error): resolved below, which reports what is wrong.
        _ => {}
    }
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
/// Whatever is there already (a folder, a file, a link) is left as it is.
pub(crate) fn create_dir_if_missing(path: &Path, mode: u32) -> Result<(), PolicyError> {
    use std::os::unix::fs::DirBuilderExt;
    let create_error = |source| PolicyError::Create {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(parent)
            .map_err(create_error)?;
    }
    // `mkdir` never follows a link at the last component: something there (a link a command
    // planted since it was looked at included) is `EEXIST`, and left alone.
    match fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(create_error(e)),
    }
    // The umask may have removed bits; the mode is part of the contract, so set it exactly.
    set_mode_no_follow(path, mode).map_err(create_error)
}

/// Sets the mode of the folder at `path` through a handle that cannot be a link: a command
/// running at the same time can replace the folder just made with a link to one of the user's
/// (`~/.gnupg`), and `chmod` by name would open that one up. The replacement makes it fail.
fn set_mode_no_follow(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?
        .set_permissions(fs::Permissions::from_mode(mode))
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
    fn the_mode_of_a_created_folder_is_never_set_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::TempDir::new().unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let private = tmp.path().join("private");
        fs::create_dir(&private).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("made");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        // What a racing command makes of the folder just created: a link to a private one.
        let e = set_mode_no_follow(&link, 0o755).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        assert_eq!(mode(&private), 0o700);
        // The control: a `chmod` by name opens the private folder up.
        fs::set_permissions(&link, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(mode(&private), 0o755);

        // A link already there is left alone (it is not created over, nor its target changed).
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        create_dir_if_missing(&link, 0o755).unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(mode(&private), 0o700);
        // A missing one is created with the mode, whatever the umask, parents too.
        let deep = tmp.path().join("a/b/c");
        create_dir_if_missing(&deep, 0o755).unwrap();
        assert_eq!(mode(&deep), 0o755);
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
