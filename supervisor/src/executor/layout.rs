//! The filesystem view of a sandboxed command, shared by both Linux executors.
//!
//! [`layout`] turns an [`ExecPolicy`] into an ordered list of [`Op`]s. `bubblewrap` turns each
//! op into arguments, `landlock` into mount steps; the order is the same, so both executors
//! show the command the same tree:
//!
//! 1. the host's `/`, read-only (and nosuid);
//! 2. a fresh `/dev` with only `null`, `zero`, `full`, `random`, `urandom`, `tty`, a private
//!    `devpts` and `/dev/shm` — no disks, no host terminals;
//! 3. a fresh `/proc` for the command's own PID namespace;
//! 4. a private, empty `/tmp` (mode 1777). A writable root *under* `/tmp` (a project in
//!    `/tmp/proj`) is bound into it at its own path from the host, so it is shared, and the
//!    rest of `/tmp` stays private. `/tmp` itself is never a writable root: the policy refuses
//!    it, and the layout drops it, so the host's `/tmp` (other programs' files and sockets) is
//!    never bound over the private one;
//! 5. hidden directories (`/run`, `$XDG_RUNTIME_DIR`): empty and read-only, so host daemons'
//!    sockets (docker, D-Bus, ssh-agent) are out of reach — a read-only mount does not stop
//!    `connect` on a unix socket, only hiding it does;
//! 6. writable roots (the project, package caches), bound read-write;
//! 7. read-only paths inside them (every git directory as a whole, `.git` pointer files, what
//!    git's configuration names, `.garuda/`), after "pinning" every directory between the
//!    writable root and the read-only path: each becomes a mount point of its own (bound on
//!    itself, still writable), and a mount point cannot be renamed or removed. Without the pins
//!    a command could `mv sub old && cp -r old sub` and write a fresh, writable `sub/.git` that
//!    the developer's next `git commit` there runs on the host;
//! 8. writable holes inside those read-only paths (each git directory's `objects`, `refs`,
//!    `logs`), bound read-write again; then the read-only paths that lie inside a hole, with
//!    their own pins. A hole that is not inside a read-only path of the layout is dropped: it
//!    must never open anything else;
//! 9. unreadable paths (secrets): the folders between their writable place and them pinned as
//!    in step 7 (so a rename above a secret cannot carry it out from under the path the next
//!    command's policy names), then a directory becomes an empty, read-only tmpfs with mode 000,
//!    a file an empty read-only file with mode 000 — reading fails with `EACCES`, and neither
//!    `chmod` nor `unlink` can undo it (read-only mount, busy mount point).
//!
//! Later ops win over earlier ones at the same path, so a secret inside the project stays
//! unreadable although the project is writable.
//!
//! A command on a staged view gets one step before all of these, the same for both executors:
//! `staged_mount` puts the view (overlayfs, or a bind of the copy) at the project's path.
//!
//! Proxy mode adds nothing to the view: the proxy's unix socket is not bound into the sandbox.
//! The bridge's listener is a socket of the command's network namespace that the supervisor
//! serves from outside ([`crate::netbridge`]), so the command reaches the proxy only through
//! `127.0.0.1:<port>`, never through a path.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use garuda_policy::{ExecPolicy, StagedView};

use super::ExecError;
use crate::sys::MountStep;

/// Directories every Linux executor replaces with its own content (steps 2–4). A policy path
/// under one of them is not visible to the command anyway and is dropped from the layout.
pub const REPLACED_DIRS: [&str; 3] = ["/dev", "/proc", "/tmp"];

/// Device nodes bound from the host into the fresh `/dev`.
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// One step of the filesystem view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Bind the host root read-only.
    RootReadOnly,
    /// Fresh minimal `/dev`.
    Dev,
    /// Fresh `/proc`.
    Proc,
    /// Private empty `/tmp`.
    Tmp,
    /// Replace a directory with an empty read-only one.
    Hide(PathBuf),
    /// Bind a path read-write.
    Writable(PathBuf),
    /// Bind a directory on itself, still writable, so it cannot be renamed or removed.
    Pin(PathBuf),
    /// Re-bind a path inside a writable root read-only.
    ReadOnly(PathBuf),
    /// Re-bind a folder inside a read-only path read-write (a git directory's `objects`).
    WritableHole(PathBuf),
    /// Replace a directory with an empty, mode-000, read-only one.
    UnreadableDir(PathBuf),
    /// Replace a file (or socket, or device) with an empty, mode-000, read-only file.
    UnreadableFile(PathBuf),
}

fn under_any(path: &Path, dirs: &[PathBuf]) -> bool {
    dirs.iter().any(|d| path.starts_with(d))
}

/// The ordered view for `policy`.
pub fn layout(policy: &ExecPolicy) -> Vec<Op> {
    let replaced: Vec<PathBuf> = REPLACED_DIRS.iter().map(PathBuf::from).collect();
    let mut ops = vec![Op::RootReadOnly, Op::Dev, Op::Proc, Op::Tmp];
    // A writable root under /tmp (a project in a temporary folder) is bound into the private
    // /tmp from the host's path: it stays visible. /tmp itself would put the host's /tmp back
    // (`build_exec_policy` refuses it; a policy made by hand loses it here).
    let writable: Vec<PathBuf> = policy
        .writable_roots
        .iter()
        .filter(|w| !w.starts_with("/dev") && !w.starts_with("/proc") && *w != Path::new("/tmp"))
        .cloned()
        .collect();
    let visible = |p: &Path| !under_any(p, &replaced) || under_any(p, &writable);
    let hidden: Vec<PathBuf> = policy
        .hidden_dirs
        .iter()
        .filter(|h| !under_any(h, &replaced))
        .cloned()
        .collect();
    ops.extend(hidden.iter().cloned().map(Op::Hide));
    ops.extend(writable.iter().cloned().map(Op::Writable));
    let read_only: Vec<&PathBuf> = policy
        .read_only_paths
        .iter()
        .filter(|p| visible(p) && !under_any(p, &hidden))
        .collect();
    // Holes only where they reopen part of a read-only path (never a path of their own).
    let holes: Vec<&PathBuf> = policy
        .writable_holes
        .iter()
        .filter(|h| read_only.iter().any(|r| h.starts_with(r) && h != r))
        .collect();
    // The innermost writable place holding `p` (a root or a hole), and whether it is a hole.
    let container = |p: &Path| -> Option<(PathBuf, bool)> {
        writable
            .iter()
            .map(|w| (w, false))
            .chain(holes.iter().map(|h| (*h, true)))
            .filter(|(c, _)| p.starts_with(c) && p != c.as_path())
            .max_by_key(|(c, _)| c.as_os_str().len())
            .map(|(c, hole)| (c.clone(), hole))
    };
    // Inside a read-only path and not reopened below it: cannot be renamed, needs no pin.
    let covered = |a: &Path| {
        let deepest = |list: &mut dyn Iterator<Item = &PathBuf>| {
            list.filter(|p| a.starts_with(p))
                .map(|p| p.as_os_str().len())
                .max()
        };
        match (
            deepest(&mut read_only.iter().copied()),
            deepest(&mut holes.iter().copied()),
        ) {
            (Some(ro), Some(hole)) => ro > hole,
            (Some(_), None) => true,
            (None, _) => false,
        }
    };
    let read_only_steps = |in_hole: bool| -> Vec<Op> {
        let mine: Vec<&PathBuf> = read_only
            .iter()
            .copied()
            .filter(|p| match container(p) {
                Some((_, hole)) => hole == in_hole,
                // Outside every writable place (or a whole root): bound read-only anyway.
                None => !in_hole,
            })
            .collect();
        let mut pins: Vec<PathBuf> = Vec::new();
        for p in &mine {
            let Some((root, _)) = container(p) else {
                continue;
            };
            for a in p.ancestors().skip(1) {
                if a == root.as_path() || !a.starts_with(&root) {
                    break;
                }
                if !covered(a) {
                    pins.push(a.to_path_buf());
                }
            }
        }
        pins.sort_by_key(|p| (p.components().count(), p.clone()));
        pins.dedup();
        let mut steps: Vec<Op> = pins.into_iter().map(Op::Pin).collect();
        steps.extend(mine.into_iter().cloned().map(Op::ReadOnly));
        steps
    };
    ops.extend(read_only_steps(false));
    ops.extend(holes.iter().map(|h| Op::WritableHole((*h).clone())));
    ops.extend(read_only_steps(true));
    // A secret named by its path (`sandbox.unreadable`) inside a writable place: every folder
    // between that place and the secret is pinned too, or `mv d d2` would carry the secret out
    // from under its path, and the next command, whose policy still names `d/secret`, would
    // read `d2/secret` (found by the differential fuzzer). Secrets found by name (`.env`) are
    // found again wherever they go; the pins cost nothing there either.
    let mut secret_pins: Vec<PathBuf> = Vec::new();
    for p in &policy.unreadable_paths {
        if !visible(p) || under_any(p, &hidden) {
            continue;
        }
        let Some((root, _)) = container(p) else {
            continue;
        };
        for a in p.ancestors().skip(1) {
            if a == root.as_path() || !a.starts_with(&root) {
                break;
            }
            if !covered(a) && !ops.contains(&Op::Pin(a.to_path_buf())) {
                secret_pins.push(a.to_path_buf());
            }
        }
    }
    secret_pins.sort_by_key(|p| (p.components().count(), p.clone()));
    secret_pins.dedup();
    ops.extend(secret_pins.into_iter().map(Op::Pin));
    for p in &policy.unreadable_paths {
        if !visible(p) || under_any(p, &hidden) {
            continue;
        }
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => ops.push(Op::UnreadableDir(p.clone())),
            Ok(_) => ops.push(Op::UnreadableFile(p.clone())),
            // Gone since the policy was built: nothing left to hide.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Cannot tell what it is: still mask it. If it is a directory the file mount fails
            // and the command does not start (fail closed), never an unmasked secret.
            Err(_) => ops.push(Op::UnreadableFile(p.clone())),
        }
    }
    ops
}

/// A string for a mount step; a NUL byte (which no path holds) is refused.
pub(crate) fn cstring(bytes: &[u8]) -> Result<CString, ExecError> {
    CString::new(bytes)
        .map_err(|_| ExecError::InvalidCommand("a string contains a NUL byte".into()))
}

/// A path for a mount step.
pub(crate) fn cpath(p: &Path) -> Result<CString, ExecError> {
    cstring(p.as_os_str().as_bytes())
}

/// overlayfs splits its options at `,` and its layer lists at `:`; a backslash escapes both.
fn escape_overlay_path(p: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for &b in p.as_os_str().as_bytes() {
        if matches!(b, b'\\' | b',' | b':') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// The mount that puts the staged view at the project's path (first step, before anything
/// else opens a path in the project, so every later bind sees the view, never the project).
pub(crate) fn staged_mount(view: &StagedView, project: &Path) -> Result<MountStep, ExecError> {
    match view {
        StagedView::Overlay { lower, upper, work } => {
            let mut opts = b"lowerdir=".to_vec();
            opts.extend(escape_overlay_path(lower));
            opts.extend(b",upperdir=");
            opts.extend(escape_overlay_path(upper));
            opts.extend(b",workdir=");
            opts.extend(escape_overlay_path(work));
            // userxattr: the only way overlayfs works in a user namespace (whiteouts and
            // opaque markers are kept in user.* extended attributes).
            opts.extend(b",userxattr");
            Ok(MountStep::Overlay {
                target: cpath(project)?,
                options: cstring(&opts)?,
            })
        }
        StagedView::Copy { dir } => Ok(MountStep::Bind {
            source: cpath(dir)?,
            target: cpath(project)?,
            remount_flags: libc::MS_NOSUID | libc::MS_NODEV,
        }),
    }
}

/// Test-only fault injection for the claim that Landlock is a second, independent wall for
/// writes (docs/executors.md, "What Landlock adds"): a mount-layer mistake, a read-write bind
/// of a path outside every writable root, that the mount plan (`landlock`) or bwrap's
/// argument vector (`bubblewrap`) gets and Landlock's rules do not.
///
/// `#[cfg(test)]`: it exists only in this crate's own unit-test build. No other build, flag,
/// setting or environment variable can reach it (a variable a release binary honoured would be
/// a way to punch a hole in every sandbox). Thread-local: it affects only runs started on the
/// thread of the test that set it.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    use super::Op;

    thread_local! {
        static MISTAKEN_WRITABLE: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
        static LANDLOCK_WRITE: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
    }

    /// The fault is in place until this is dropped.
    pub(crate) struct Injected;

    impl Drop for Injected {
        fn drop(&mut self) {
            MISTAKEN_WRITABLE.with(|m| m.borrow_mut().take());
            LANDLOCK_WRITE.with(|m| m.borrow_mut().take());
        }
    }

    /// The mount layer binds `path` read-write by mistake. With `landlock_too`, Landlock also
    /// grants writes under it (the control: only the mount layer is left).
    pub(crate) fn inject(path: &Path, landlock_too: bool) -> Injected {
        MISTAKEN_WRITABLE.with(|m| *m.borrow_mut() = Some(path.to_path_buf()));
        if landlock_too {
            LANDLOCK_WRITE.with(|m| *m.borrow_mut() = Some(path.to_path_buf()));
        }
        Injected
    }

    /// `ops` with the mistaken read-write bind after the last writable root.
    pub(crate) fn apply(mut ops: Vec<Op>) -> Vec<Op> {
        if let Some(path) = MISTAKEN_WRITABLE.with(|m| m.borrow().clone()) {
            let at = ops
                .iter()
                .rposition(|op| matches!(op, Op::Writable(_)))
                .map_or(ops.len(), |i| i + 1);
            ops.insert(at, Op::Writable(path));
        }
        ops
    }

    /// The path Landlock grants writes to on top of the policy's writable roots, if any.
    pub(crate) fn landlock_write() -> Option<PathBuf> {
        LANDLOCK_WRITE.with(|m| m.borrow().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use garuda_policy::{Limits, NetworkMode};

    fn policy(root: &Path) -> ExecPolicy {
        ExecPolicy {
            project_root: root.to_path_buf(),
            writable_roots: vec![root.to_path_buf()],
            read_only_paths: vec![
                root.join(".git"),
                root.join("sub/.git"),
                root.join(".git/objects/pack/keep"),
                PathBuf::from("/tmp/other/.git"),
            ],
            writable_holes: vec![
                root.join(".git/objects"),
                root.join(".git/refs"),
                root.join("sub/.git/logs"),
                // Not inside any read-only path: never opened.
                root.join("src"),
            ],
            unreadable_paths: vec![
                root.join(".env"),
                root.join("secrets"),
                PathBuf::from("/run/user/1/x"),
            ],
            hidden_dirs: vec![PathBuf::from("/run")],
            network: NetworkMode::Isolated,
            staged: None,
            env: vec![],
            limits: Limits::default(),
        }
    }

    #[test]
    fn a_root_under_tmp_is_bound_and_tmp_itself_never() {
        let mut p = policy(Path::new("/tmp/proj"));
        p.read_only_paths.clear();
        p.writable_holes.clear();
        p.unreadable_paths.clear();
        p.writable_roots = vec!["/tmp".into(), "/tmp/a/cache".into(), "/tmp/proj".into()];
        assert_eq!(
            layout(&p),
            vec![
                Op::RootReadOnly,
                Op::Dev,
                Op::Proc,
                Op::Tmp,
                Op::Hide("/run".into()),
                Op::Writable("/tmp/a/cache".into()),
                Op::Writable("/tmp/proj".into()),
            ]
        );
    }

    #[test]
    fn order_and_filters() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".env"), "X=1").unwrap();
        std::fs::create_dir(root.join("secrets")).unwrap();
        let ops = layout(&policy(&root));
        assert_eq!(
            ops,
            vec![
                Op::RootReadOnly,
                Op::Dev,
                Op::Proc,
                Op::Tmp,
                Op::Hide("/run".into()),
                Op::Writable(root.clone()),
                Op::Pin(root.join("sub")),
                Op::ReadOnly(root.join(".git")),
                Op::ReadOnly(root.join("sub/.git")),
                Op::WritableHole(root.join(".git/objects")),
                Op::WritableHole(root.join(".git/refs")),
                Op::WritableHole(root.join("sub/.git/logs")),
                // A read-only path inside a hole comes after the hole, with its own pins.
                Op::Pin(root.join(".git/objects/pack")),
                Op::ReadOnly(root.join(".git/objects/pack/keep")),
                Op::UnreadableFile(root.join(".env")),
                Op::UnreadableDir(root.join("secrets")),
            ]
        );
    }
}

#[cfg(test)]
mod staged_tests {
    use super::*;

    #[test]
    fn overlay_options_escape_separators() {
        let view = StagedView::Overlay {
            lower: "/p,x:y".into(),
            upper: "/s/upper".into(),
            work: "/s/work".into(),
        };
        let MountStep::Overlay { options, .. } = staged_mount(&view, Path::new("/p,x:y")).unwrap()
        else {
            panic!("not an overlay");
        };
        assert_eq!(
            options.to_str().unwrap(),
            "lowerdir=/p\\,x\\:y,upperdir=/s/upper,workdir=/s/work,userxattr"
        );
    }
}
