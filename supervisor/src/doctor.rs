//! `garuda doctor`: what this machine offers the sandbox, and why something is missing.

use std::ffi::CString;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::executor::probe_cache::{self, ProbeCache, State};
use crate::executor::{landlock, probe_executors, Probe};
use crate::sys;

/// One capability of the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// Whether it works.
    pub ok: bool,
    /// What was found, or why not.
    pub detail: String,
}

/// Everything `garuda doctor` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Each executor.
    pub executors: Vec<Probe>,
    /// What `auto` would pick.
    pub auto: Option<String>,
    /// Landlock ABI (`None`: unavailable).
    pub landlock_abi: Option<u32>,
    /// Kernel facilities.
    pub checks: Vec<Check>,
}

fn check(name: &'static str, r: Result<String, String>) -> Check {
    match r {
        Ok(detail) => Check {
            name,
            ok: true,
            detail,
        },
        Err(detail) => Check {
            name,
            ok: false,
            detail,
        },
    }
}

/// Whether overlayfs can be mounted in a user namespace here (`Ok(detail)`), or why not.
pub fn overlay_in_userns() -> Result<String, String> {
    let base: PathBuf = std::env::temp_dir().join(format!("garuda-doctor-{}", std::process::id()));
    let dirs = ["lower", "upper", "work", "merged"].map(|d| base.join(d));
    let result = (|| {
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},userxattr",
            dirs[0].display(),
            dirs[1].display(),
            dirs[2].display()
        );
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string());
        let probe = sys::OverlayProbe {
            merged: c(&dirs[3])?,
            options: CString::new(opts).map_err(|e| e.to_string())?,
            probe_file: c(&dirs[3].join("probe"))?,
        };
        sys::probe(sys::ProbeKind::UserNamespace, Some(&probe))
            .map(|()| "overlayfs mounts in a user namespace (userxattr)".to_string())
            .map_err(|e| format!("overlayfs in a user namespace failed: {e} (Linux 5.11+ needed)"))
    })();
    // overlayfs leaves work/work with mode 000; make it removable.
    let _ = std::fs::set_permissions(
        dirs[2].join("work"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    );
    let _ = std::fs::remove_dir_all(&base);
    result
}

/// What `"staging": {"backend": "auto"}` picks here, and why.
fn staging_backend() -> Result<String, String> {
    match overlay_in_userns() {
        Ok(_) => Ok("overlay: overlayfs works in a user namespace (session start O(1), change list O(changed files))".into()),
        Err(why) => Ok(format!(
            "copy (reflink where the filesystem has it, else a plain copy up to 2 GiB): {why}"
        )),
    }
}

fn seccomp_filter() -> Result<String, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    if status.lines().any(|l| l.starts_with("Seccomp:")) {
        Ok("seccomp filters (SECCOMP_SET_MODE_FILTER)".into())
    } else {
        Err("the kernel has no seccomp (CONFIG_SECCOMP_FILTER)".into())
    }
}

fn pid_max_namespaced() -> Result<String, String> {
    let (major, minor) = landlock::kernel_version().ok_or("cannot read the kernel version")?;
    if (major, minor) >= (6, 14) {
        Ok(format!(
            "Linux {major}.{minor}: pid_max is per PID namespace (process limit for root too)"
        ))
    } else {
        Err(format!(
            "Linux {major}.{minor}: pid_max is not per PID namespace before 6.14"
        ))
    }
}

/// Whether the executor probe cache of Garuda's home agrees with this live probe; then the
/// cache is rewritten with this probe's positives (so `garuda doctor` also repairs a stale or
/// planted cache). Not ok only where runs would believe the cache and fail: it says an
/// executor is available that the live probe finds unavailable.
fn probe_cache_check(live: &[Probe]) -> Check {
    let home = garuda_policy::HostEnv::from_vars(std::env::vars_os().collect())
        .ok()
        .map(|h| h.garuda_home);
    let mut cache = ProbeCache::load(home.as_deref());
    let (Some(path), Some(home)) = (cache.path(), home) else {
        return check("executor probe cache", Ok("no Garuda home".into()));
    };
    if !home.is_dir() {
        return check(
            "executor probe cache",
            Ok(format!(
                "none yet ({} does not exist; the first run makes it)",
                garuda_text::visible_path(&home)
            )),
        );
    }
    let wrong: Vec<String> = live
        .iter()
        .filter(|p| !p.available && cache.cached(p.kind).is_some())
        .map(|p| p.kind.to_string())
        .collect();
    let unlisted: Vec<String> = live
        .iter()
        .filter(|p| p.available && probe_cache::cacheable(p.kind) && cache.cached(p.kind).is_none())
        .map(|p| p.kind.to_string())
        .collect();
    let state = cache.state.clone();
    let found = match &state {
        State::Current if !wrong.is_empty() => format!(
            "DISAGREES: it says {} available, which this probe finds unavailable (runs would fail at setup with exit 125)",
            wrong.join(" and ")
        ),
        State::Current if !unlisted.is_empty() => format!(
            "agrees (it does not list {} yet: runs probe it live)",
            unlisted.join(" and ")
        ),
        State::Current => "agrees with this probe".to_string(),
        other => other.describe(),
    };
    let live_answers: Vec<_> = live
        .iter()
        .map(|p| (p.kind, p.available, p.detail.clone()))
        .collect();
    cache.replace(&live_answers);
    let written = if cache.save() {
        "rewritten from this probe"
    } else {
        "not written (no Garuda home yet, or its cache folder is not usable)"
    };
    let detail = format!("{}: {found}; {written}", garuda_text::visible_path(&path));
    if wrong.is_empty() {
        check("executor probe cache", Ok(detail))
    } else {
        check("executor probe cache", Err(detail))
    }
}

/// Gather the report.
pub fn report() -> Report {
    let executors = probe_executors();
    let cache = probe_cache_check(&executors);
    let auto = executors
        .iter()
        .find(|p| p.available)
        .map(|p| p.kind.to_string());
    let landlock_abi = sys::landlock_abi().ok();
    let checks = vec![
        check(
            "landlock",
            sys::landlock_abi()
                .map(|v| format!("ABI {v}"))
                .map_err(|e| format!("unavailable: {e}")),
        ),
        check(
            "user namespaces",
            sys::probe(sys::ProbeKind::UserNamespace, None)
                .map(|()| "unprivileged user, mount, PID and network namespaces".to_string())
                .map_err(|e| format!("cannot create namespaces: {e}")),
        ),
        check(
            "recursive read-only mounts",
            sys::probe(sys::ProbeKind::RecursiveReadOnly, None)
                .map(|()| "mount_setattr(AT_RECURSIVE)".to_string())
                .map_err(|e| format!("mount_setattr failed: {e} (Linux 5.12+ needed)")),
        ),
        check("overlayfs in a user namespace", overlay_in_userns()),
        check("staging backend (auto)", staging_backend()),
        check("seccomp", seccomp_filter()),
        check("pid_max per namespace", pid_max_namespaced()),
        check(
            "agent confinement",
            crate::agent::availability().map_err(|why| {
                format!("the agent cannot be confined here ({why}); it will not be started")
            }),
        ),
        cache,
    ];
    Report {
        executors,
        auto,
        landlock_abi,
        checks,
    }
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::from("executors:\n");
    for p in &r.executors {
        let _ = writeln!(
            s,
            "  {:<11} {:<13} {}",
            p.kind.to_string(),
            if p.available {
                "available"
            } else {
                "unavailable"
            },
            p.detail
        );
    }
    let _ = writeln!(
        s,
        "auto selects: {}",
        r.auto
            .as_deref()
            .unwrap_or("nothing (no executor available)")
    );
    let _ = writeln!(s, "checks:");
    for c in &r.checks {
        let _ = writeln!(
            s,
            "  {:<30} {:<4} {}",
            c.name,
            if c.ok { "ok" } else { "no" },
            c.detail
        );
    }
    s
}
