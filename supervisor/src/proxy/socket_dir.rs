//! The folder of a run's proxy socket: private to the user, out of every sandbox's reach; and
//! the fresh private folder it is made with ([`fresh_dir`], also the demo's and the replay's).

use std::path::{Path, PathBuf};

/// A new folder only this user can enter, under the host's `/tmp`. Never `$TMPDIR`: the
/// bridge connects to the socket by path for every connection, and a command runs as the same
/// user, so the folder must be out of every sandbox's reach. Both Linux executors give the
/// command a private `/tmp`, so the host's `/tmp` is invisible to it (a `$TMPDIR` inside the
/// project, a cache or another visible folder would let the command swap the socket for a link
/// to any host socket, or let other sandboxes use this run's proxy).
pub(crate) fn private_dir() -> std::io::Result<PathBuf> {
    let base = Path::new("/tmp");
    remove_stale_proxy_dirs(base);
    fresh_dir(base, "garuda-proxy")
}

/// A new folder `<parent>/<prefix>-<pid>-<nanos><attempt>` only this user can enter (0700,
/// or less by the umask). `create_dir` fails on an existing path, a link included, so a folder
/// or link someone else planted at a name (in a shared `/tmp` or `/var/tmp`) is never used:
/// the next name is tried, up to 16.
pub(crate) fn fresh_dir(parent: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(attempt);
        let dir = parent.join(format!(
            "{prefix}-{}-{nanos:08x}{attempt}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no attempt made")))
}

/// Removes the socket folders of earlier runs that were killed before they could clean up
/// (a signal ends `garuda sandbox` without running its destructors): folders named
/// `garuda-proxy-<pid>-…`, owned by this user, whose process is gone.
fn remove_stale_proxy_dirs(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("garuda-proxy-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let path = entry.path();
        let ours =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && Some(m.uid()) == me);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}
