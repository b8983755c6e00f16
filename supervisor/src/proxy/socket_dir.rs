//! The folder of a run's proxy socket: private to the user, out of every sandbox's reach.

use std::path::{Path, PathBuf};

/// A new folder only this user can enter, under the host's `/tmp`. Never `$TMPDIR`: the
/// bridge connects to the socket by path for every connection, and a command runs as the same
/// user, so the folder must be out of every sandbox's reach. Both Linux executors give the
/// command a private `/tmp`, so the host's `/tmp` is invisible to it (a `$TMPDIR` inside the
/// project, a cache or another visible folder would let the command swap the socket for a link
/// to any host socket, or let other sandboxes use this run's proxy). `create_dir` fails on an
/// existing path, so a folder planted by someone else is never used.
pub(crate) fn private_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = PathBuf::from("/tmp");
    remove_stale_proxy_dirs(&base);
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(attempt);
        let dir = base.join(format!(
            "garuda-proxy-{}-{nanos:08x}{attempt}",
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
