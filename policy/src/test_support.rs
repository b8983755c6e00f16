//! Helpers for unit tests: a hand-built host under a temporary directory, never the real one.

use std::fs;
use std::path::Path;

use crate::host::HostEnv;

/// A host whose home is `<tmp>/home` (created), with `HOME` and `PATH` in its environment.
pub(crate) fn fake_host(tmp: &Path) -> HostEnv {
    let home = tmp.join("home");
    fs::create_dir_all(&home).unwrap();
    HostEnv::from_vars(vec![
        ("HOME".into(), home.into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ])
    .unwrap()
}

/// Writes `bytes` to `path`, creating parent directories.
pub(crate) fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}
