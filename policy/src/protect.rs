//! The protected paths being collected, and the one way a path that must be protected is
//! resolved.
//!
//! A read-only mount protects a *file or folder*, never the *name* that leads to it: when the
//! name goes through a symbolic link that a command can rewrite, the command points the link
//! elsewhere and the host's git follows it to a file of the command's choosing. A mount cannot
//! sit on a link to stop that. So every path that must be protected is resolved here, one
//! component at a time, and a link met on the way that lies where a command can write (under a
//! writable root, outside every read-only path, or in a writable hole) is refused with
//! [`PolicyError::SwappableLink`]. A link inside a read-only folder (`.git/hooks -> ../tools/
//! hooks` inside a read-only `.git`) cannot be changed, so it is followed, and its target is
//! protected in turn.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::error::PolicyError;

/// The kernel's own limit on links followed while resolving one path.
const MAX_LINKS: usize = 40;

/// What [`Protected::resolve`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// The path exists; canonical.
    Exists(PathBuf),
    /// Nothing is there: `existing` (canonical) is the deepest folder that exists, `tail` the
    /// missing names below it (plain names only).
    Missing {
        existing: PathBuf,
        tail: Vec<OsString>,
    },
}

impl Resolved {
    /// The canonical path, existing or not.
    pub(crate) fn path(&self) -> PathBuf {
        match self {
            Resolved::Exists(p) => p.clone(),
            Resolved::Missing { existing, tail } => {
                let mut p = existing.clone();
                p.extend(tail);
                p
            }
        }
    }
}

/// Read-only paths and writable holes inside the writable roots, as they are found.
#[derive(Debug, Default)]
pub(crate) struct Protected {
    writable_roots: Vec<PathBuf>,
    /// Canonical paths bound read-only.
    pub(crate) read_only: Vec<PathBuf>,
    /// Canonical folders inside read-only paths bound read-write again.
    pub(crate) holes: Vec<PathBuf>,
}

impl Protected {
    pub(crate) fn new(writable_roots: &[PathBuf]) -> Protected {
        Protected {
            writable_roots: writable_roots.to_vec(),
            read_only: Vec::new(),
            holes: Vec::new(),
        }
    }

    /// Inside (or equal to) a writable root.
    pub(crate) fn under_writable_root(&self, path: &Path) -> bool {
        self.writable_roots
            .iter()
            .any(|root| path.starts_with(root))
    }

    /// Inside a read-only path and not inside a writable hole deeper than it.
    fn covered(&self, path: &Path) -> bool {
        let deepest = |list: &[PathBuf]| {
            list.iter()
                .filter(|p| path.starts_with(p))
                .map(|p| p.as_os_str().len())
                .max()
        };
        match (deepest(&self.read_only), deepest(&self.holes)) {
            (Some(ro), Some(hole)) => ro > hole,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// A command can write here: under a writable root, and not made read-only (or reopened
    /// by a hole).
    pub(crate) fn is_writable(&self, path: &Path) -> bool {
        self.under_writable_root(path) && !self.covered(path)
    }

    /// Makes a canonical path read-only, when a command could otherwise write it. (One
    /// outside every writable root is read-only anyway; one inside a read-only folder is
    /// protected by it.)
    pub(crate) fn protect(&mut self, path: PathBuf) {
        if self.is_writable(&path) && !self.read_only.contains(&path) {
            self.read_only.push(path);
        }
    }

    /// The read-only paths without those another one already covers (a worktree's private
    /// folder inside a read-only `.git`), so the executors bind each place once.
    pub(crate) fn minimal_read_only(&self) -> Vec<PathBuf> {
        self.read_only
            .iter()
            .filter(|p| {
                let above = self
                    .read_only
                    .iter()
                    .filter(|r| r != p && p.starts_with(r))
                    .map(|r| r.as_os_str().len())
                    .max();
                let hole = self
                    .holes
                    .iter()
                    .filter(|h| p.starts_with(h))
                    .map(|h| h.as_os_str().len())
                    .max();
                match (above, hole) {
                    (Some(ro), Some(hole)) => ro < hole,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
            })
            .cloned()
            .collect()
    }

    /// Reopens a real folder inside a read-only path for writing.
    pub(crate) fn open_hole(&mut self, path: PathBuf) {
        if self.under_writable_root(&path) && !self.holes.contains(&path) {
            self.holes.push(path);
        }
    }

    /// Resolves `path` (absolute, as git would name it: it may hold `..` and links) one
    /// component at a time. A link on the way that a command could rewrite is an error naming
    /// it and `protecting`. A missing part is returned as [`Resolved::Missing`]; a `..` below
    /// a missing folder cannot be resolved and is an error.
    pub(crate) fn resolve(&self, path: &Path, protecting: &Path) -> Result<Resolved, PolicyError> {
        let unresolvable = |reason| PolicyError::ProtectedPathUnresolvable {
            path: protecting.to_path_buf(),
            reason,
        };
        if !path.is_absolute() {
            return Err(unresolvable("not an absolute path"));
        }
        // Components still to walk, first at the end.
        let mut pending: Vec<OsString> = Vec::new();
        push_components(&mut pending, path);
        let mut current = PathBuf::from("/");
        let mut links = 0;
        while let Some(name) = pending.pop() {
            if name == "/" {
                current = PathBuf::from("/");
                continue;
            }
            if name == ".." {
                current.pop();
                continue;
            }
            let next = current.join(&name);
            match fs::symlink_metadata(&next) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(unresolvable("too many symbolic links"));
                    }
                    if self.is_writable(&next) {
                        return Err(PolicyError::SwappableLink {
                            link: next,
                            protecting: protecting.to_path_buf(),
                        });
                    }
                    let target =
                        fs::read_link(&next).map_err(|source| PolicyError::Canonicalize {
                            path: next.clone(),
                            source,
                        })?;
                    // Relative to the link's folder (`current`); an absolute one restarts.
                    push_components(&mut pending, &target);
                }
                Ok(meta) => {
                    if !meta.is_dir() && pending.iter().any(|c| c != ".") {
                        return Err(PolicyError::Canonicalize {
                            path: next,
                            source: io::Error::from(io::ErrorKind::NotADirectory),
                        });
                    }
                    current = next;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let mut tail = vec![name];
                    while let Some(rest) = pending.pop() {
                        if rest == ".." || rest == "/" {
                            return Err(unresolvable("`..` below a folder that does not exist"));
                        }
                        tail.push(rest);
                    }
                    return Ok(Resolved::Missing {
                        existing: current,
                        tail,
                    });
                }
                Err(source) => return Err(PolicyError::Canonicalize { path: next, source }),
            }
        }
        Ok(Resolved::Exists(current))
    }
}

/// Pushes the components of `path` onto `pending` so that the first is popped first. `.` is
/// dropped; the root is pushed as `/`.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(OsString::from("/")),
            Component::CurDir => None,
            Component::ParentDir => Some(OsString::from("..")),
            Component::Normal(n) => Some(n.to_os_string()),
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(t.path()).unwrap();
        (t, base)
    }

    #[test]
    fn resolves_links_outside_writable_roots_and_refuses_writable_ones() {
        let (_t, base) = setup();
        let project = base.join("project");
        fs::create_dir_all(project.join("real/hooks")).unwrap();
        fs::create_dir_all(base.join("outside/dir")).unwrap();
        symlink("real", project.join("alias")).unwrap();
        symlink(base.join("outside"), base.join("out-link")).unwrap();
        let prot = Protected::new(std::slice::from_ref(&project));

        // A link outside the writable roots cannot be changed by a command: followed.
        let r = prot
            .resolve(&base.join("out-link/dir"), Path::new("x"))
            .unwrap();
        assert_eq!(r, Resolved::Exists(base.join("outside/dir")));

        // A link in the project can: refused, naming the link.
        let e = prot
            .resolve(&project.join("alias/hooks"), Path::new("the hooks"))
            .unwrap_err();
        assert!(
            matches!(&e, PolicyError::SwappableLink { link, .. } if *link == project.join("alias")),
            "{e:?}"
        );

        // Inside a read-only folder it cannot, again: followed.
        let mut prot = prot;
        prot.read_only.push(project.clone());
        let r = prot
            .resolve(&project.join("alias/hooks"), Path::new("x"))
            .unwrap();
        assert_eq!(r, Resolved::Exists(project.join("real/hooks")));
        // ... unless a writable hole reopens the folder that holds it.
        prot.holes.push(project.clone());
        assert!(prot
            .resolve(&project.join("alias/hooks"), Path::new("x"))
            .is_err());
    }

    #[test]
    fn missing_tails_dot_dots_and_loops() {
        let (_t, base) = setup();
        fs::create_dir_all(base.join("a")).unwrap();
        let prot = Protected::new(&[]);
        assert_eq!(
            prot.resolve(&base.join("a/../a/b/c"), Path::new("x"))
                .unwrap(),
            Resolved::Missing {
                existing: base.join("a"),
                tail: vec!["b".into(), "c".into()],
            }
        );
        assert!(matches!(
            prot.resolve(&base.join("a/b/../c"), Path::new("x")),
            Err(PolicyError::ProtectedPathUnresolvable { .. })
        ));
        symlink("loop", base.join("loop")).unwrap();
        assert!(matches!(
            prot.resolve(&base.join("loop"), Path::new("x")),
            Err(PolicyError::ProtectedPathUnresolvable { .. })
        ));
        fs::write(base.join("file"), "").unwrap();
        assert!(prot.resolve(&base.join("file/x"), Path::new("x")).is_err());
        // A relative link restarts from its folder, an absolute one from the root.
        symlink("../a", base.join("a/up")).unwrap();
        symlink(base.join("a"), base.join("abs")).unwrap();
        assert_eq!(
            prot.resolve(&base.join("a/up"), Path::new("x")).unwrap(),
            Resolved::Exists(base.join("a"))
        );
        assert_eq!(
            prot.resolve(&base.join("abs/up/up"), Path::new("x"))
                .unwrap(),
            Resolved::Exists(base.join("a"))
        );
    }

    #[test]
    fn protect_skips_what_is_already_read_only() {
        let mut prot = Protected::new(&[PathBuf::from("/p")]);
        prot.protect("/elsewhere/x".into());
        prot.protect("/p/.git".into());
        prot.protect("/p/.git/hooks".into());
        prot.open_hole("/p/.git/objects".into());
        prot.protect("/p/.git/objects/info".into());
        assert_eq!(
            prot.read_only,
            [
                PathBuf::from("/p/.git"),
                PathBuf::from("/p/.git/objects/info")
            ]
        );
        prot.read_only.push("/p/.git/worktrees/x".into());
        assert_eq!(
            prot.minimal_read_only(),
            [
                PathBuf::from("/p/.git"),
                PathBuf::from("/p/.git/objects/info")
            ]
        );
        assert!(prot.is_writable(Path::new("/p/src")));
        assert!(!prot.is_writable(Path::new("/p/.git/config")));
        assert!(prot.is_writable(Path::new("/p/.git/objects/ab")));
        assert!(!prot.is_writable(Path::new("/p/.git/objects/info/alternates")));
    }
}
