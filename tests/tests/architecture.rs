//! Architecture rules of `../shared/DESIGN.md`, checked on the manifests and crate roots
//! (embedded at compile time, so the test needs no access to the source tree at run time).
//!
//! - `agent` depends on `ipc` (and model/HTTP crates) only, never on `policy`, `staging`,
//!   `audit` or the supervisor: the confined process must not carry the trusted code.
//! - `ipc`, `policy`, `audit` depend on no other workspace crate; `staging` may use `policy`.
//! - `text` (`garuda-text`, the one rule for printing text a command chose) depends on no
//!   crate at all, and every crate may depend on it: it is a leaf that carries no trusted
//!   decision, only escaping.
//! - every crate root forbids `unsafe` except the supervisor's, which denies it and allows it
//!   in its `sys` module only.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

const WORKSPACE_CRATES: [&str; 7] = [
    "garuda-text",
    "garuda-ipc",
    "garuda-policy",
    "garuda-audit",
    "garuda-staging",
    "garuda",
    "garuda-agent",
];

struct Crate {
    name: &'static str,
    manifest: &'static str,
    root: &'static str,
    allowed: &'static [&'static str],
}

/// A crate every crate may depend on.
const ANY_CRATE_MAY_USE: [&str; 1] = ["garuda-text"];

const CRATES: [Crate; 7] = [
    Crate {
        name: "garuda-text",
        manifest: include_str!("../../text/Cargo.toml"),
        root: include_str!("../../text/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-ipc",
        manifest: include_str!("../../ipc/Cargo.toml"),
        root: include_str!("../../ipc/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-policy",
        manifest: include_str!("../../policy/Cargo.toml"),
        root: include_str!("../../policy/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-audit",
        manifest: include_str!("../../audit/Cargo.toml"),
        root: include_str!("../../audit/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-staging",
        manifest: include_str!("../../staging/Cargo.toml"),
        root: include_str!("../../staging/src/lib.rs"),
        allowed: &["garuda-policy"],
    },
    Crate {
        name: "garuda-agent",
        manifest: include_str!("../../agent/Cargo.toml"),
        root: include_str!("../../agent/src/lib.rs"),
        allowed: &["garuda-ipc"],
    },
    Crate {
        name: "garuda",
        manifest: include_str!("../../supervisor/Cargo.toml"),
        root: include_str!("../../supervisor/src/lib.rs"),
        allowed: &[
            "garuda-ipc",
            "garuda-policy",
            "garuda-audit",
            "garuda-staging",
            // `garuda agent` hands its channel to the agent crate once confined; the other
            // direction stays forbidden.
            "garuda-agent",
        ],
    },
];

/// Workspace crates named in `[dependencies]` and `[build-dependencies]` (not dev).
fn workspace_deps(manifest: &str) -> Vec<String> {
    let doc: toml::Table = manifest.parse().expect("manifest parses");
    let mut found = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        if let Some(deps) = doc.get(section).and_then(|d| d.as_table()) {
            for (key, value) in deps {
                let name = value.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                if WORKSPACE_CRATES.contains(&name) {
                    found.push(name.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn dependency_rules_hold() {
    for c in &CRATES {
        let doc: toml::Table = c.manifest.parse().unwrap();
        assert_eq!(doc["package"]["name"].as_str(), Some(c.name));
        for dep in workspace_deps(c.manifest) {
            assert!(
                c.allowed.contains(&dep.as_str())
                    || (ANY_CRATE_MAY_USE.contains(&dep.as_str()) && c.name != dep),
                "{} may not depend on {dep} (allowed: {:?})",
                c.name,
                c.allowed
            );
        }
    }
}

#[test]
fn the_rule_checker_catches_a_violation() {
    // Negative control: an agent manifest that pulls in the policy crate is reported.
    let bad = "[package]\nname = \"garuda-agent\"\n[dependencies]\ngaruda-policy = { path = \"../policy\" }\n";
    assert_eq!(workspace_deps(bad), ["garuda-policy"]);
}

/// Every dependency (workspace or not, build included) a manifest names.
fn all_deps(manifest: &str) -> Vec<String> {
    let doc: toml::Table = manifest.parse().expect("manifest parses");
    ["dependencies", "build-dependencies"]
        .iter()
        .filter_map(|s| doc.get(*s).and_then(|d| d.as_table()))
        .flat_map(|t| t.keys().cloned())
        .collect()
}

#[test]
fn the_text_crate_is_a_leaf_that_any_crate_may_use() {
    // Any crate may depend on it only because it depends on nothing: no trusted code rides in.
    assert_eq!(
        all_deps(include_str!("../../text/Cargo.toml")),
        Vec::<String>::new()
    );
    // Negative control: a dependency in its manifest would be seen.
    let bad = "[package]\nname = \"garuda-text\"\n[dependencies]\nlibc = \"0.2\"\n";
    assert_eq!(all_deps(bad), ["libc"]);
    // The audit crate, which may use no other workspace crate, may use this one.
    let audit =
        "[package]\nname = \"garuda-audit\"\n[dependencies]\ngaruda-text.workspace = true\n";
    assert_eq!(workspace_deps(audit), ["garuda-text"]);
}

#[test]
fn unsafe_is_forbidden_outside_the_supervisor_sys_module() {
    for c in &CRATES {
        if c.name == "garuda" {
            assert!(c.root.contains("#![deny(unsafe_code)]"));
            assert!(c.root.contains("pub(crate) mod sys;"));
        } else {
            assert!(
                c.root.contains("#![forbid(unsafe_code)]"),
                "{} must forbid unsafe",
                c.name
            );
        }
    }
    let main = include_str!("../../supervisor/src/main.rs");
    assert!(main.contains("#![forbid(unsafe_code)]"));
    let sys = include_str!("../../supervisor/src/sys.rs");
    // Clippy's undocumented_unsafe_blocks checks each block; this only guards the count.
    let blocks = sys.matches("unsafe {").count();
    let notes = sys.matches("// SAFETY:").count();
    assert!(
        blocks > 0 && notes >= blocks,
        "{blocks} unsafe blocks, {notes} SAFETY notes"
    );
    // Every other supervisor module stays safe.
    for (name, src) in [
        ("cli.rs", include_str!("../../supervisor/src/cli.rs")),
        ("doctor.rs", include_str!("../../supervisor/src/doctor.rs")),
        (
            "executor/mod.rs",
            include_str!("../../supervisor/src/executor/mod.rs"),
        ),
        (
            "executor/landlock.rs",
            include_str!("../../supervisor/src/executor/landlock.rs"),
        ),
        (
            "executor/bubblewrap.rs",
            include_str!("../../supervisor/src/executor/bubblewrap.rs"),
        ),
        (
            "executor/seatbelt.rs",
            include_str!("../../supervisor/src/executor/seatbelt.rs"),
        ),
        (
            "executor/host.rs",
            include_str!("../../supervisor/src/executor/host.rs"),
        ),
        (
            "executor/layout.rs",
            include_str!("../../supervisor/src/executor/layout.rs"),
        ),
        (
            "executor/seccomp.rs",
            include_str!("../../supervisor/src/executor/seccomp.rs"),
        ),
        (
            "executor/select.rs",
            include_str!("../../supervisor/src/executor/select.rs"),
        ),
        (
            "executor/capture.rs",
            include_str!("../../supervisor/src/executor/capture.rs"),
        ),
        (
            "netbridge.rs",
            include_str!("../../supervisor/src/netbridge.rs"),
        ),
        (
            "proxy/mod.rs",
            include_str!("../../supervisor/src/proxy/mod.rs"),
        ),
        (
            "proxy/gate.rs",
            include_str!("../../supervisor/src/proxy/gate.rs"),
        ),
        (
            "proxy/http.rs",
            include_str!("../../supervisor/src/proxy/http.rs"),
        ),
        (
            "proxy/idle.rs",
            include_str!("../../supervisor/src/proxy/idle.rs"),
        ),
        (
            "proxy/resolve.rs",
            include_str!("../../supervisor/src/proxy/resolve.rs"),
        ),
        (
            "proxy/scope.rs",
            include_str!("../../supervisor/src/proxy/scope.rs"),
        ),
    ] {
        assert!(!src.contains("unsafe {"), "{name} contains an unsafe block");
        assert!(!src.contains("unsafe fn"), "{name} contains an unsafe fn");
    }
}
