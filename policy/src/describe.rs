//! The effective policy as a flat list of entries, each with the source that set it: what
//! `garuda policy` prints (as text or JSON) and what `garuda policy check` compares.

use serde::Serialize;

use crate::settings::{EffectiveSettings, Origin, RuleList};

/// One value of the effective policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The dotted key (`profile`, `permissions.deny`, `network.allow`).
    pub key: String,
    /// The value as text.
    pub value: String,
    /// Where it came from (`managed /etc/garuda/managed-policy.json:3`), or `default`.
    pub source: String,
    /// Left out by the merge, and why (`managedRulesOnly in managed …:2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

fn source(origin: Option<&Origin>) -> String {
    origin.map_or_else(|| "default".to_string(), Origin::to_string)
}

fn entry(key: &str, value: impl ToString, origin: Option<&Origin>) -> Entry {
    Entry {
        key: key.to_string(),
        value: value.to_string(),
        source: source(origin),
        dropped: None,
    }
}

/// Every value of `settings`, in a fixed order: the switches, then the lists.
pub fn describe(settings: &EffectiveSettings) -> Vec<Entry> {
    let s = settings;
    let mut out = vec![
        entry("profile", s.profile, s.profile_origin.as_ref()),
        entry(
            "requireSandbox",
            s.require_sandbox,
            s.require_sandbox_origin.as_ref(),
        ),
        entry("executor", s.executor, s.executor_origin.as_ref()),
        entry(
            "commands.mode",
            match s.command_mode {
                crate::CommandMode::Direct => "direct",
                crate::CommandMode::Staged => "staged",
            },
            s.command_mode_origin.as_ref(),
        ),
        entry(
            "staging.backend",
            match s.staging_backend {
                crate::StagingBackend::Auto => "auto",
                crate::StagingBackend::Overlay => "overlay",
                crate::StagingBackend::Copy => "copy",
            },
            s.staging_backend_origin.as_ref(),
        ),
        entry(
            "managedRulesOnly",
            s.managed_rules_only.is_some(),
            s.managed_rules_only.as_ref(),
        ),
        entry(
            "managedHostsOnly",
            s.managed_hosts_only.is_some(),
            s.managed_hosts_only.as_ref(),
        ),
        entry(
            "audit.checkpoint",
            s.audit_checkpoint,
            s.audit_checkpoint_origin.as_ref(),
        ),
    ];
    match &s.audit_witness {
        Some((argv, origin)) => out.push(entry("audit.witness", argv.join(" "), Some(origin))),
        None => out.push(entry("audit.witness", "none", None)),
    }
    for list in [RuleList::Deny, RuleList::Ask, RuleList::Allow] {
        for r in s.rules_in(list) {
            out.push(entry(
                &format!("permissions.{list}"),
                &r.rule,
                Some(&r.origin),
            ));
        }
    }
    for (host, origin) in &s.network_allow {
        out.push(entry("network.allow", host, Some(origin)));
    }
    for (path, origin) in &s.extra_unreadable {
        out.push(entry("sandbox.unreadable", path.display(), Some(origin)));
    }
    for (path, origin) in &s.extra_writable {
        out.push(entry("sandbox.writable", path.display(), Some(origin)));
    }
    for (name, origin) in &s.env_allow {
        out.push(entry("env.allow", name, Some(origin)));
    }
    for d in &s.dropped {
        out.push(Entry {
            key: d.key.to_string(),
            value: d.value.clone(),
            source: d.origin.to_string(),
            dropped: Some(format!(
                "{} in {}",
                if d.key == "network.allow" {
                    "managedHostsOnly"
                } else {
                    "managedRulesOnly"
                },
                d.because
            )),
        });
    }
    out
}

/// The entries as aligned text, one per line.
pub fn render(entries: &[Entry]) -> String {
    let key_width = entries.iter().map(|e| e.key.len()).max().unwrap_or(0);
    let value_width = entries
        .iter()
        .map(|e| e.value.chars().count())
        .max()
        .unwrap_or(0)
        .min(40);
    let mut out = String::new();
    for e in entries {
        let dropped = e
            .dropped
            .as_ref()
            .map(|why| format!("  (dropped: {why})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:key_width$}  {:value_width$}  {}{dropped}\n",
            e.key, e.value, e.source
        ));
    }
    out
}
