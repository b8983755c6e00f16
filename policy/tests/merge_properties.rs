//! "Strictest wins" as a property: over generated (managed, user, project, flags)
//! combinations, the effective policy is never looser than the managed file alone on any axis.
//!
//! Each axis is checked on the merged settings (rules, paths, profile, modes, executor) and on
//! the decisions of the permission engine for a fixed set of requests: a request the managed
//! file denies is denied, and under `managedRulesOnly` no request is allowed that the managed
//! file alone would not allow.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::path::{Path, PathBuf};

use garuda_policy::engine::{Context, Engine, Request, Step, Verdict};
use garuda_policy::{
    merge_texts, CommandMode, EffectiveSettings, ExecutorChoice, Flags, HostEnv, PolicyError,
    RuleList, SourceKind,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const RULES: &[&str] = &[
    "Bash(git status)",
    "Bash(rm *)",
    "Bash(curl *)",
    "Bash",
    "Read(~/.ssh/**)",
    "Read(.env)",
    "Read(secrets/**)",
    "Edit(src/**)",
    "Write(.github/**)",
    "WebFetch(docs.rs)",
    "WebFetch(*.example.com)",
    "mcp__github__*",
];

const HOSTS: &[&str] = &["crates.io", "*.npmjs.org", "example.test:8443", "evil.test"];

const UNREADABLE: &[&str] = &["secrets", "/opt/keys", "~/.config/tool"];

fn subset(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(pool, 0..=pool.len().min(4))
}

fn maybe<T: Clone + std::fmt::Debug + 'static>(
    values: &'static [T],
) -> impl Strategy<Value = Option<T>> {
    proptest::option::of(proptest::sample::select(values))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Managed,
    User,
    Project,
}

/// One generated policy file as JSON. Project files never get the keys they may not set (those
/// are refusals tested elsewhere); the managed-only switches appear only in managed files.
fn policy_file(kind: Kind) -> impl Strategy<Value = Value> {
    (
        (
            maybe(&["default", "strict"]),
            maybe(&[true, false]),
            maybe(&["auto", "landlock", "bubblewrap", "host"]),
            maybe(&["direct", "staged"]),
            maybe(&[true, false]),
        ),
        (subset(RULES), subset(RULES), subset(RULES), subset(HOSTS)),
        (subset(UNREADABLE), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            move |(
                (profile, require, executor, mode, checkpoint),
                (allow, ask, deny, hosts),
                (unreadable, rules_only, hosts_only),
            )| {
                let mut o = Map::new();
                if let Some(p) = profile {
                    o.insert("profile".into(), json!(p));
                }
                if let Some(r) = require {
                    o.insert("requireSandbox".into(), json!(r));
                }
                match executor {
                    Some("host") if kind == Kind::Project => {}
                    Some(e) => {
                        o.insert("executor".into(), json!(e));
                    }
                    None => {}
                }
                if let Some(m) = mode {
                    o.insert("commands".into(), json!({ "mode": m }));
                }
                if let Some(c) = checkpoint {
                    o.insert("audit".into(), json!({ "checkpoint": c }));
                }
                let mut perms = Map::new();
                if kind != Kind::Project {
                    perms.insert("allow".into(), json!(allow));
                    o.insert("network".into(), json!({ "allow": hosts }));
                }
                perms.insert("ask".into(), json!(ask));
                perms.insert("deny".into(), json!(deny));
                o.insert("permissions".into(), Value::Object(perms));
                o.insert("sandbox".into(), json!({ "unreadable": unreadable }));
                if kind == Kind::Managed {
                    o.insert("managedRulesOnly".into(), json!(rules_only));
                    o.insert("managedHostsOnly".into(), json!(hosts_only));
                }
                Value::Object(o)
            },
        )
}

fn flags() -> impl Strategy<Value = Flags> {
    (
        maybe(&[
            ExecutorChoice::Auto,
            ExecutorChoice::Landlock,
            ExecutorChoice::Bubblewrap,
            ExecutorChoice::Host,
        ]),
        any::<bool>(),
        any::<bool>(),
        subset(HOSTS),
    )
        .prop_map(|(executor, staged, strict, hosts)| Flags {
            executor,
            staged,
            strict,
            allow_hosts: hosts.into_iter().map(String::from).collect(),
        })
}

fn host() -> HostEnv {
    HostEnv::from_vars(vec![("HOME".into(), "/home/dev".into())]).unwrap()
}

const ROOT: &str = "/work/project";

fn merge(
    managed: &str,
    others: &[(SourceKind, &str)],
    flags: &Flags,
) -> Result<EffectiveSettings, PolicyError> {
    let managed_path = PathBuf::from("/etc/garuda/managed-policy.json");
    let user_path = PathBuf::from("/home/dev/.garuda/policy.json");
    let project_path = PathBuf::from("/work/project/.garuda/settings.json");
    let mut texts = vec![(SourceKind::Managed, managed_path.as_path(), managed)];
    for (kind, text) in others {
        let path = match kind {
            SourceKind::User => user_path.as_path(),
            _ => project_path.as_path(),
        };
        texts.push((*kind, path, text));
    }
    merge_texts(&texts, &host(), Path::new(ROOT), flags)
}

fn requests() -> Vec<Request> {
    let mut out = Vec::new();
    for path in [
        "src/lib.rs",
        ".env",
        "secrets/a.pem",
        "/home/dev/.ssh/id_rsa",
        ".github/workflows/ci.yml",
        "/opt/keys/k",
        "/home/dev/.config/tool/token",
    ] {
        out.push(Request::ReadFile { path: path.into() });
        out.push(Request::EditFile { path: path.into() });
        out.push(Request::WriteFile { path: path.into() });
    }
    for line in [
        "git status",
        "git status && curl x | sh",
        "rm -rf /",
        "xargs rm",
        "curl https://example.com",
        "echo hi > src/x.rs",
    ] {
        for outside_sandbox in [false, true] {
            out.push(Request::Bash {
                line: line.into(),
                outside_sandbox,
            });
        }
    }
    for url in [
        "https://docs.rs/x",
        "https://a.example.com/",
        "https://evil.test/",
    ] {
        out.push(Request::WebFetch { url: url.into() });
    }
    out.push(Request::Mcp {
        name: "mcp__github__create_issue".into(),
    });
    out
}

fn contexts() -> Vec<Context> {
    let mut out = Vec::new();
    for plan_mode in [false, true] {
        for sandbox_available in [false, true] {
            out.push(Context {
                plan_mode,
                sandbox_available,
                session_rules: Vec::new(),
            });
        }
    }
    out
}

fn rule_set(s: &EffectiveSettings, list: RuleList) -> Vec<String> {
    s.rules_in(list).map(|r| r.rule.to_string()).collect()
}

/// Every axis on which `effective` must be at least as strict as `managed` (the managed file
/// merged alone, with no flags).
fn assert_not_looser(managed: &EffectiveSettings, effective: &EffectiveSettings) {
    for list in [RuleList::Deny, RuleList::Ask] {
        let have = rule_set(effective, list);
        for rule in rule_set(managed, list) {
            assert!(have.contains(&rule), "{list} rule {rule} was removed");
        }
    }
    if managed.managed_rules_only.is_some() {
        let allowed = rule_set(managed, RuleList::Allow);
        for r in effective.rules_in(RuleList::Allow) {
            assert_eq!(
                r.origin.kind,
                SourceKind::Managed,
                "allow {} from {}",
                r.rule,
                r.origin
            );
            assert!(allowed.contains(&r.rule.to_string()));
        }
    }
    if managed.managed_hosts_only.is_some() {
        for (h, origin) in &effective.network_allow {
            assert_eq!(origin.kind, SourceKind::Managed, "host {h} from {origin}");
        }
    }
    for (path, _) in &managed.extra_unreadable {
        assert!(
            effective.extra_unreadable.iter().any(|(p, _)| p == path),
            "unreadable {} was removed",
            path.display()
        );
    }
    if managed.is_strict() {
        assert!(effective.is_strict(), "strict was lifted");
    }
    if managed.require_sandbox || managed.is_strict() {
        assert!(effective.require_sandbox, "requireSandbox was lifted");
        assert_ne!(
            effective.executor,
            ExecutorChoice::Host,
            "host fallback under a required sandbox"
        );
    }
    if managed.command_mode == CommandMode::Staged {
        assert_eq!(
            effective.command_mode,
            CommandMode::Staged,
            "direct mode where staged is required"
        );
    }
    if managed.audit_checkpoint {
        assert!(effective.audit_checkpoint, "checkpoints were turned off");
    }
    if managed.executor_origin.is_some() {
        assert_eq!(
            effective.executor, managed.executor,
            "the managed executor was changed"
        );
    }

    let h = host();
    let root = Path::new(ROOT);
    let m_engine = Engine::new(managed, &h, root);
    let e_engine = Engine::new(effective, &h, root);
    for ctx in contexts() {
        for request in requests() {
            let m = m_engine.decide(&request, &ctx);
            let e = e_engine.decide(&request, &ctx);
            // A denial the managed file made: by one of its rules or paths, or by its sandbox
            // requirement. (A built-in secret a user's rule names is the user's to open.)
            let managed_denial = m.verdict == Verdict::Deny
                && (m.causes.iter().any(|c| c.source.starts_with("managed "))
                    || matches!(m.step, Step::StrictOutsideSandbox | Step::SandboxRequired));
            if managed_denial {
                assert_eq!(
                    e.verdict,
                    Verdict::Deny,
                    "{request:?} in {ctx:?}: managed says {m}, effective says {e}"
                );
            }
            if managed.managed_rules_only.is_some() {
                assert!(
                    e.verdict <= m.verdict,
                    "{request:?} in {ctx:?}: managed alone says {m}, effective says {e}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn effective_policy_is_never_looser_than_the_managed_one(
        managed in policy_file(Kind::Managed),
        user in policy_file(Kind::User),
        project in policy_file(Kind::Project),
        flags in flags(),
    ) {
        let managed_text = managed.to_string();
        let Ok(managed_alone) = merge(&managed_text, &[], &Flags::default()) else {
            // A contradictory managed file (strict with executor host) refuses to start: the
            // strictest outcome there is. Nothing else to compare.
            return Ok(());
        };
        let others = [
            (SourceKind::User, user.to_string()),
            (SourceKind::Project, project.to_string()),
        ];
        let others: Vec<(SourceKind, &str)> = others.iter().map(|(k, t)| (*k, t.as_str())).collect();
        match merge(&managed_text, &others, &flags) {
            Ok(effective) => assert_not_looser(&managed_alone, &effective),
            // Refusing to start is never looser. But it must be one of the refusals a lower
            // layer can cause: a host executor under a required sandbox, or a flag that would
            // loosen the managed file.
            Err(PolicyError::HostExecutorForbidden { .. } | PolicyError::FlagRefused { .. }) => {}
            Err(other) => panic!("unexpected error {other}"),
        }
    }
}

#[test]
fn a_project_default_profile_does_not_lift_a_managed_strict() {
    let managed = r#"{"profile": "strict"}"#;
    let project = r#"{"profile": "default", "requireSandbox": false}"#;
    let user = r#"{"profile": "default", "requireSandbox": false, "executor": "landlock"}"#;
    let e = merge(
        managed,
        &[(SourceKind::User, user), (SourceKind::Project, project)],
        &Flags::default(),
    )
    .unwrap();
    assert!(e.is_strict());
    assert!(e.require_sandbox);
    let origin = e.profile_origin.unwrap();
    assert_eq!(origin.kind, SourceKind::Managed);
    assert_eq!(origin.line, Some(1));
    // A user file choosing the host executor under a managed strict is refused at start.
    let err = merge(
        managed,
        &[(SourceKind::User, r#"{"executor": "host"}"#)],
        &Flags::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, PolicyError::HostExecutorForbidden { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("managed-policy.json:1"), "{err}");
    // So is the flag.
    let err = merge(
        managed,
        &[],
        &Flags {
            executor: Some(ExecutorChoice::Host),
            ..Flags::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("--executor"), "{err}");
    // Negative control: without the managed strict the same user file is accepted.
    let e = merge(
        "{}",
        &[(SourceKind::User, r#"{"executor": "host"}"#)],
        &Flags::default(),
    )
    .unwrap();
    assert_eq!(e.executor, ExecutorChoice::Host);
}

#[test]
fn managed_only_lists_drop_lower_allows_and_say_so() {
    let managed = r#"{"managedRulesOnly": true, "managedHostsOnly": true,
        "permissions": {"allow": ["Bash(git status)"]}, "network": {"allow": ["crates.io"]}}"#;
    let user =
        r#"{"permissions": {"allow": ["Bash(curl *)"]}, "network": {"allow": ["evil.test"]}}"#;
    let e = merge(managed, &[(SourceKind::User, user)], &Flags::default()).unwrap();
    assert_eq!(rule_set(&e, RuleList::Allow), ["bash(git status)"]);
    assert_eq!(e.network_allow.len(), 1);
    let dropped: Vec<_> = e
        .dropped
        .iter()
        .map(|d| (d.key, d.value.as_str()))
        .collect();
    assert_eq!(
        dropped,
        [
            ("permissions.allow", "bash(curl *)"),
            ("network.allow", "evil.test")
        ]
    );
    // --allow-host under managedHostsOnly is refused, not silently dropped.
    let err = merge(
        managed,
        &[],
        &Flags {
            allow_hosts: vec!["evil.test".into()],
            ..Flags::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("managedHostsOnly"), "{err}");
    // Negative control: without the switches the user's entries are in force.
    let e = merge(
        r#"{"permissions": {"allow": ["Bash(git status)"]}}"#,
        &[(SourceKind::User, user)],
        &Flags::default(),
    )
    .unwrap();
    assert_eq!(
        rule_set(&e, RuleList::Allow),
        ["bash(git status)", "bash(curl *)"]
    );
    assert_eq!(e.network_allow.len(), 1);
}
