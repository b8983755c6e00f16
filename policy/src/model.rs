//! The policy's own model of what a sandboxed command may do to a path: the oracle of the
//! executors' differential fuzzer (`tests/tests/executor_diff.rs`, `docs/fuzzing.md`).
//!
//! An [`ExecPolicy`] is a list of paths with a meaning each; the executors turn it into mount
//! plans (bubblewrap) or mounts plus Landlock rules (landlock), two very different mechanisms.
//! This module reads the same lists the plain way, with no mechanism at all, so that a
//! generated case can be checked against it: whatever an executor lets a command do that
//! [`decide`] denies is a break, whichever mechanism let it through.
//!
//! The path given is the one the kernel acts on: for a read or a write of a file's content,
//! the file after every link is followed; for a create, a delete or a rename, the entry itself
//! (its folder resolved, its own name not followed). Resolving is the caller's job, on the
//! host, before the command runs.
//!
//! What the model says, for a canonical path `p`:
//!
//! - **read** and **exec**: allowed unless `p` is at or under an unreadable path (a secret) or
//!   a hidden folder (a host daemon's sockets, replaced by an empty folder);
//! - **write** (content, mode, times, extended attributes), **create** and **delete**:
//!   allowed only at or under a writable root, and then not at or under a read-only path
//!   unless also at or under one of the writable holes inside that read-only path, and never
//!   at or under a secret or a hidden folder.
//!
//! Paths the Linux executors replace with their own content (`/tmp`, `/dev`, `/proc`) are not
//! the host's inside the sandbox; the model answers for host paths and says so
//! ([`Denial::ReplacedBySandbox`]) for those.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::exec::ExecPolicy;
use crate::paths::replaced_by_sandbox;

/// What a command does to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read the content (or list a folder).
    Read,
    /// Execute the file.
    Exec,
    /// Change the content, mode, times or extended attributes of what is there.
    Write,
    /// Make a new entry (file, folder, link) at the path.
    Create,
    /// Remove the entry at the path, or rename it away.
    Delete,
}

impl Access {
    /// Every access, for tables and tests.
    pub const ALL: [Access; 5] = [
        Access::Read,
        Access::Exec,
        Access::Write,
        Access::Create,
        Access::Delete,
    ];

    /// True for the accesses that change the host's tree.
    pub fn changes(self) -> bool {
        matches!(self, Access::Write | Access::Create | Access::Delete)
    }
}

/// Why the model denies an access; each names the policy entry that decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// At or under a secret ([`ExecPolicy::unreadable_paths`]).
    Unreadable(PathBuf),
    /// At or under a folder the sandbox replaces with an empty one
    /// ([`ExecPolicy::hidden_dirs`]).
    Hidden(PathBuf),
    /// At or under a read-only path inside a writable root ([`ExecPolicy::read_only_paths`]),
    /// and not in one of its writable holes.
    ReadOnly(PathBuf),
    /// Under no writable root.
    NotWritable,
    /// Not a host path inside the sandbox (`/tmp`, `/dev`, `/proc` are the sandbox's own).
    ReplacedBySandbox,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::Unreadable(p) => write!(f, "a secret ({})", p.display()),
            Denial::Hidden(p) => write!(f, "in a hidden folder ({})", p.display()),
            Denial::ReadOnly(p) => write!(f, "read-only ({})", p.display()),
            Denial::NotWritable => f.write_str("under no writable root"),
            Denial::ReplacedBySandbox => f.write_str("replaced by the sandbox's own"),
        }
    }
}

/// The model's answer for `access` to the canonical path `path` under `policy`.
pub fn decide(policy: &ExecPolicy, access: Access, path: &Path) -> Result<(), Denial> {
    // A writable root under `/tmp` (a project in `/tmp/proj`) is bound into the private
    // `/tmp` at its own path: shared, judged like any other.
    if replaced_by_sandbox(path)
        || (path.starts_with("/tmp") && !policy.is_under_writable_root(path))
    {
        return Err(Denial::ReplacedBySandbox);
    }
    if let Some(secret) = policy.unreadable_paths.iter().find(|s| path.starts_with(s)) {
        return Err(Denial::Unreadable(secret.clone()));
    }
    if let Some(hidden) = policy.hidden_dirs.iter().find(|h| path.starts_with(h)) {
        return Err(Denial::Hidden(hidden.clone()));
    }
    if !access.changes() {
        return Ok(());
    }
    if !policy.is_under_writable_root(path) {
        return Err(Denial::NotWritable);
    }
    let read_only = policy.read_only_paths.iter().find(|ro| {
        path.starts_with(ro)
            && !policy
                .writable_holes
                .iter()
                .any(|hole| hole.starts_with(ro) && path.starts_with(hole))
    });
    match read_only {
        Some(ro) => Err(Denial::ReadOnly(ro.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{Limits, NetworkMode};

    fn policy() -> ExecPolicy {
        ExecPolicy {
            project_root: "/w/p".into(),
            writable_roots: vec!["/w/p".into(), "/w/cache".into()],
            read_only_paths: vec!["/w/p/.git".into(), "/w/p/.garuda".into()],
            writable_holes: vec!["/w/p/.git/objects".into(), "/w/elsewhere/objects".into()],
            unreadable_paths: vec!["/w/p/.env".into(), "/h/.ssh".into()],
            hidden_dirs: vec!["/run".into()],
            network: NetworkMode::default(),
            staged: None,
            env: Vec::new(),
            limits: Limits::default(),
        }
    }

    #[test]
    fn each_list_decides_what_it_names() {
        let p = policy();
        let ok = |a, path: &str| decide(&p, a, Path::new(path));
        // Reads: everywhere but secrets and hidden folders.
        assert_eq!(ok(Access::Read, "/usr/bin/sh"), Ok(()));
        assert_eq!(ok(Access::Exec, "/w/p/run.sh"), Ok(()));
        assert_eq!(
            ok(Access::Read, "/h/.ssh/id"),
            Err(Denial::Unreadable("/h/.ssh".into()))
        );
        assert_eq!(
            ok(Access::Read, "/run/docker.sock"),
            Err(Denial::Hidden("/run".into()))
        );
        // Changes: only in writable roots, not in read-only paths, except their holes.
        for a in [Access::Write, Access::Create, Access::Delete] {
            assert_eq!(ok(a, "/w/p/src/main.rs"), Ok(()));
            assert_eq!(ok(a, "/w/cache/x"), Ok(()));
            assert_eq!(ok(a, "/usr/bin/sh"), Err(Denial::NotWritable));
            assert_eq!(
                ok(a, "/w/pp"),
                Err(Denial::NotWritable),
                "component-wise prefix"
            );
            assert_eq!(
                ok(a, "/w/p/.git/config"),
                Err(Denial::ReadOnly("/w/p/.git".into()))
            );
            assert_eq!(
                ok(a, "/w/p/.git"),
                Err(Denial::ReadOnly("/w/p/.git".into())),
                "the read-only path itself"
            );
            assert_eq!(ok(a, "/w/p/.git/objects/ab/cd"), Ok(()));
            assert_eq!(
                ok(a, "/w/p/.env"),
                Err(Denial::Unreadable("/w/p/.env".into()))
            );
            assert_eq!(ok(a, "/tmp/x"), Err(Denial::ReplacedBySandbox));
        }
        // A project under /tmp is the host's, shared into the private /tmp (control: the rest
        // of /tmp is the sandbox's own).
        let mut in_tmp = policy();
        in_tmp.writable_roots.push("/tmp/proj".into());
        assert_eq!(
            decide(&in_tmp, Access::Write, Path::new("/tmp/proj/x")),
            Ok(())
        );
        assert_eq!(
            decide(&in_tmp, Access::Write, Path::new("/tmp/other")),
            Err(Denial::ReplacedBySandbox)
        );
        // A hole outside the read-only path opens nothing.
        assert_eq!(
            ok(Access::Write, "/w/p/.garuda/objects"),
            Err(Denial::ReadOnly("/w/p/.garuda".into()))
        );
    }

    #[test]
    fn only_write_create_and_delete_change_the_tree() {
        let changing: Vec<Access> = Access::ALL.into_iter().filter(|a| a.changes()).collect();
        assert_eq!(changing, [Access::Write, Access::Create, Access::Delete]);
    }
}
