//! Which executors this machine can run, and which one a setting selects.
//!
//! `auto` picks the strongest available backend and says why: `landlock` (namespaces, mounts,
//! Landlock and seccomp, with a PID limit) over `bubblewrap` (namespaces, mounts and seccomp,
//! no Landlock) over `seatbelt` (macOS) over `host`. A named executor that is not available is
//! an error: a setting never silently downgrades.

use std::fmt;
use std::path::Path;

use garuda_policy::{EffectiveSettings, ExecutorChoice, SourceKind};
use serde::Serialize;

use super::bubblewrap::{self, BubblewrapExecutor};
use super::host::HostExecutor;
use super::landlock::{self as native, LandlockExecutor};
use super::probe_cache::{CachedExecutor, ProbeCache};
use super::seatbelt::SeatbeltExecutor;
use super::{ExecError, Executor, ExecutorKind};

/// Whether one executor can run here, and why (not).
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Which executor.
    pub kind: ExecutorKind,
    /// Usable on this machine.
    pub available: bool,
    /// What was found, or why it is not usable.
    pub detail: String,
}

/// Probe every executor.
pub fn probe_executors() -> Vec<Probe> {
    ExecutorKind::ALL.iter().map(|k| probe_one(*k)).collect()
}

fn probe_one(kind: ExecutorKind) -> Probe {
    let (available, detail) = match kind {
        ExecutorKind::Landlock => match native::availability() {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        },
        ExecutorKind::Bubblewrap => match bubblewrap::availability() {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        },
        ExecutorKind::Seatbelt => {
            if cfg!(target_os = "macos") && std::path::Path::new("/usr/bin/sandbox-exec").exists() {
                (true, "/usr/bin/sandbox-exec".to_string())
            } else {
                (
                    false,
                    "Seatbelt (sandbox-exec) exists only on macOS".to_string(),
                )
            }
        }
        ExecutorKind::Host => (true, super::host::NOTICE.to_string()),
    };
    Probe {
        kind,
        available,
        detail,
    }
}

/// The OS sandboxes that can run here, strongest first.
pub fn available_sandboxes() -> Vec<ExecutorKind> {
    probe_executors()
        .into_iter()
        .filter(|p| p.available && p.kind.is_sandbox())
        .map(|p| p.kind)
        .collect()
}

/// What to do on a machine where no OS sandbox can run. Installing bubblewrap is advised only
/// where it is not installed: where it is, the probe's own reason (shown beside this) says
/// what stops it.
pub fn no_sandbox_fix(bwrap_installed: bool) -> String {
    let namespaces = "allow unprivileged user namespaces (sysctl \
         kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)";
    let first = if bwrap_installed {
        format!(
            "{namespaces} so that bubblewrap (installed, but it cannot run here: see why above)"
        )
    } else {
        format!(
            "install bubblewrap 0.8 or later (apt-get install bubblewrap), or {namespaces} so \
             that bubblewrap"
        )
    };
    format!(
        "{first} or the native Landlock executor (Linux 6.14 or later) can run; `garuda doctor` \
         shows what is missing"
    )
}

/// [`no_sandbox_fix`] for this machine.
pub fn no_sandbox_fix_here() -> String {
    no_sandbox_fix(bubblewrap::bwrap_path().is_some())
}

/// The executor chosen for a setting, and the sentence that says why.
pub struct Selection {
    /// The executor.
    pub executor: Box<dyn Executor>,
    /// Why this one.
    pub reason: String,
}

impl fmt::Debug for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selection")
            .field("executor", &self.executor.kind())
            .field("reason", &self.reason)
            .finish()
    }
}

/// Build the executor of a kind (without probing).
pub fn executor_of(kind: ExecutorKind) -> Box<dyn Executor> {
    match kind {
        ExecutorKind::Bubblewrap => Box::new(BubblewrapExecutor),
        ExecutorKind::Landlock => Box::new(LandlockExecutor),
        ExecutorKind::Seatbelt => Box::new(SeatbeltExecutor),
        ExecutorKind::Host => Box::new(HostExecutor),
    }
}

/// Select the executor for a setting. A named sandbox that is unavailable is an error naming
/// the reason; `auto` falls back to `host` only when no sandbox exists, and says so.
pub fn select_executor(choice: ExecutorChoice) -> Result<Selection, ExecError> {
    let (kind, _, reason) = select_from(choice, |k| (probe_one(k), false))?;
    Ok(Selection {
        executor: executor_of(kind),
        reason,
    })
}

/// [`select_executor`], taking the probe's positive answers from the cache of Garuda's home
/// `home` ([`super::probe_cache`]) and probing live only what the cache does not say is
/// available; the live positives are written back. An executor chosen on the cache's word
/// runs as a [`CachedExecutor`] (a setup failure names the cache and removes it), and the
/// reason says it came from the cache.
pub fn select_executor_cached(
    choice: ExecutorChoice,
    home: Option<&Path>,
) -> Result<Selection, ExecError> {
    let mut cache = ProbeCache::load(home);
    let picked = select_from(choice, |k| lookup(&mut cache, k));
    // Best effort: a cache that cannot be written is only a slower next run.
    let _ = cache.save();
    let (kind, cached, mut reason) = picked?;
    let executor = match (cached, home) {
        (true, Some(home)) => {
            reason.push_str(&format!(
                " (cached probe: {})",
                super::probe_cache::path_in(home).display()
            ));
            Box::new(CachedExecutor {
                inner: executor_of(kind),
                home: home.to_path_buf(),
            }) as Box<dyn Executor>
        }
        _ => executor_of(kind),
    };
    Ok(Selection { executor, reason })
}

/// The strongest executor available here (what `auto` picks), by the cache's positives and
/// live probes as [`select_executor_cached`] takes them.
pub fn strongest_available_cached(home: Option<&Path>) -> Option<ExecutorKind> {
    let mut cache = ProbeCache::load(home);
    let strongest = ExecutorKind::ALL
        .into_iter()
        .find(|k| lookup(&mut cache, *k).0.available);
    let _ = cache.save();
    strongest
}

/// One executor's availability: the cache's positive if it has one, else a live probe (whose
/// positive is recorded for the file). The cache is never asked about a negative.
fn lookup(cache: &mut ProbeCache, kind: ExecutorKind) -> (Probe, bool) {
    if let Some(detail) = cache.cached(kind) {
        let probe = Probe {
            kind,
            available: true,
            detail: detail.to_string(),
        };
        return (probe, true);
    }
    let probe = probe_one(kind);
    cache.record(kind, probe.available, &probe.detail);
    (probe, false)
}

/// The selection rule, over any source of probes: `(kind, whether its probe was cached,
/// reason)`. `auto` asks about each executor strongest first and takes the first available,
/// so a source that only ever adds positives can never make it pick a weaker one.
fn select_from(
    choice: ExecutorChoice,
    mut find: impl FnMut(ExecutorKind) -> (Probe, bool),
) -> Result<(ExecutorKind, bool, String), ExecError> {
    let named = match choice {
        ExecutorChoice::Auto => None,
        ExecutorChoice::Bubblewrap => Some(ExecutorKind::Bubblewrap),
        ExecutorChoice::Landlock => Some(ExecutorKind::Landlock),
        ExecutorChoice::Seatbelt => Some(ExecutorKind::Seatbelt),
        ExecutorChoice::Host => Some(ExecutorKind::Host),
    };
    if let Some(kind) = named {
        let (p, cached) = find(kind);
        if !p.available {
            return Err(ExecError::Unavailable {
                executor: kind,
                reason: p.detail,
            });
        }
        let reason = format!("{kind} (selected by the executor setting): {}", p.detail);
        return Ok((kind, cached, reason));
    }
    let mut passed_over = Vec::new();
    for kind in ExecutorKind::ALL {
        let (p, cached) = find(kind);
        if p.available {
            let mut reason = format!("{} (auto: the strongest available): {}", p.kind, p.detail);
            if !passed_over.is_empty() {
                reason.push_str(&format!("; not available: {}", passed_over.join("; ")));
            }
            return Ok((p.kind, cached, reason));
        }
        passed_over.push(format!("{} ({})", p.kind, p.detail));
    }
    Err(ExecError::Unavailable {
        executor: ExecutorKind::Host,
        reason: "no executor is available".into(),
    })
}

/// Why the executor a project's own file names is refused, when it is weaker than the
/// strongest this machine has (`auto`'s pick): a cloned repository must not be able to trade
/// Landlock for a lesser executor; a project file can only tighten the sandbox. `garuda
/// sandbox` refuses the run; the agent's in-process runner sends every command to it. `None`
/// when the executor does not come from a project file, or is not weaker.
pub fn weaker_project_executor(settings: &EffectiveSettings, home: &Path) -> Option<String> {
    let origin = settings.executor_origin.as_ref()?;
    if origin.kind != SourceKind::Project {
        return None;
    }
    let named = match settings.executor {
        ExecutorChoice::Auto => return None,
        ExecutorChoice::Landlock => ExecutorKind::Landlock,
        ExecutorChoice::Bubblewrap => ExecutorKind::Bubblewrap,
        ExecutorChoice::Seatbelt => ExecutorKind::Seatbelt,
        ExecutorChoice::Host => ExecutorKind::Host,
    };
    let rank = |k: ExecutorKind| ExecutorKind::ALL.iter().position(|x| *x == k);
    // The probe cache only adds positives: it can make this stricter, never looser.
    let best = strongest_available_cached(Some(home))?;
    (rank(named) > rank(best)).then(|| {
        format!(
            "{} asks for executor {named}, weaker than {best} which this machine has; a project file can only tighten the sandbox",
            origin.path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(kind: ExecutorKind, available: bool) -> (Probe, bool) {
        let detail = if available { "works" } else { "MARKER no" };
        (
            Probe {
                kind,
                available,
                detail: detail.into(),
            },
            false,
        )
    }

    /// The cache's rule: only its positives are taken, anything else is probed live. A planted
    /// cache saying both sandboxes are unavailable therefore changes nothing here; control: a
    /// rule that also believed the cache's negatives would send `auto` to the host.
    #[test]
    fn believing_the_cache_s_negatives_would_pick_the_host() {
        let live = |k: ExecutorKind| probe(k, k != ExecutorKind::Seatbelt);
        let planted = |k: ExecutorKind| match k {
            ExecutorKind::Landlock | ExecutorKind::Bubblewrap => Some(false),
            _ => None,
        };
        let rule = |k: ExecutorKind| match planted(k) {
            Some(true) => probe(k, true),
            _ => live(k),
        };
        let (kind, _, _) = select_from(ExecutorChoice::Auto, rule).unwrap();
        assert_eq!(kind, ExecutorKind::Landlock);
        let believing = |k: ExecutorKind| match planted(k) {
            Some(a) => probe(k, a),
            None => live(k),
        };
        let (kind, _, reason) = select_from(ExecutorChoice::Auto, believing).unwrap();
        assert_eq!(kind, ExecutorKind::Host, "{reason}");
    }

    /// "install bubblewrap" only where it is missing: where it is installed and cannot run,
    /// the advice is about namespaces.
    #[test]
    fn the_fix_advises_installing_bubblewrap_only_where_it_is_missing() {
        let missing = no_sandbox_fix(false);
        assert!(
            missing.starts_with("install bubblewrap 0.8 or later (apt-get install bubblewrap), or allow unprivileged user namespaces"),
            "{missing}"
        );
        let installed = no_sandbox_fix(true);
        assert!(!installed.contains("install bubblewrap"), "{installed}");
        assert_eq!(
            installed,
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, \
             user.max_user_namespaces > 0) so that bubblewrap (installed, but it cannot run \
             here: see why above) or the native Landlock executor (Linux 6.14 or later) can \
             run; `garuda doctor` shows what is missing"
        );
    }
}
