//! Table-driven tests of the decision order: every step, with the rule and source that decided.

use std::path::{Path, PathBuf};

use super::*;
use crate::settings::{merge_texts, Flags, SourceKind};
use crate::test_support::{fake_host, write};

/// A project under a temporary folder, a hand-built host, and the three policy texts.
struct World {
    _tmp: tempfile::TempDir,
    host: HostEnv,
    root: PathBuf,
    settings: EffectiveSettings,
}

const MANAGED: &str = "/etc/garuda/managed-policy.json";
const USER: &str = "/home/u/.garuda/policy.json";
const PROJECT: &str = "/p/.garuda/settings.json";

fn world(managed: &str, user: &str, project: &str) -> World {
    let tmp = tempfile::TempDir::new().unwrap();
    let tmp_path = std::fs::canonicalize(tmp.path()).unwrap();
    let host = fake_host(&tmp_path);
    let root = tmp_path.join("project");
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    let mut texts = Vec::new();
    for (kind, path, text) in [
        (SourceKind::Managed, MANAGED, managed),
        (SourceKind::User, USER, user),
        (SourceKind::Project, PROJECT, project),
    ] {
        if !text.is_empty() {
            texts.push((kind, Path::new(path), text));
        }
    }
    let settings = merge_texts(&texts, &host, &root, &Flags::default()).unwrap();
    World {
        _tmp: tmp,
        host,
        root,
        settings,
    }
}

impl World {
    fn decide(&self, request: Request, ctx: &Context) -> Decision {
        Engine::new(&self.settings, &self.host, &self.root).decide(&request, ctx)
    }
}

fn read(p: &str) -> Request {
    Request::ReadFile { path: p.into() }
}
fn write_req(p: &str) -> Request {
    Request::WriteFile { path: p.into() }
}
fn edit(p: &str) -> Request {
    Request::EditFile { path: p.into() }
}
fn bash(line: &str) -> Request {
    Request::Bash {
        line: line.into(),
        outside_sandbox: false,
    }
}
fn bash_outside(line: &str) -> Request {
    Request::Bash {
        line: line.into(),
        outside_sandbox: true,
    }
}
fn fetch(url: &str) -> Request {
    Request::WebFetch { url: url.into() }
}
fn mcp(name: &str) -> Request {
    Request::Mcp { name: name.into() }
}

fn sandbox() -> Context {
    Context {
        sandbox_available: true,
        ..Context::default()
    }
}
fn host_only() -> Context {
    Context::default()
}
fn plan() -> Context {
    Context {
        plan_mode: true,
        sandbox_available: true,
        ..Context::default()
    }
}
fn plan_no_sandbox() -> Context {
    Context {
        plan_mode: true,
        ..Context::default()
    }
}
fn with_session(rules: &[&str]) -> Context {
    Context {
        session_rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
        ..Context::default()
    }
}

/// One row: the request, the context, the expected verdict and step, and the expected first
/// cause as (rule, source) where `source` is `managed:LINE`, `user:LINE`, `project:LINE`,
/// `session`, `built-in` or `-` for none.
struct Row {
    name: &'static str,
    request: Request,
    ctx: Context,
    verdict: Verdict,
    step: Step,
    cause: (&'static str, &'static str),
}

fn source_label(source: &str) -> String {
    for (prefix, label) in [
        (format!("managed {MANAGED}:"), "managed:"),
        (format!("user {USER}:"), "user:"),
        (format!("project {PROJECT}:"), "project:"),
    ] {
        if let Some(line) = source.strip_prefix(&prefix) {
            return format!("{label}{line}");
        }
    }
    source.to_string()
}

fn check(w: &World, rows: Vec<Row>) {
    for row in rows {
        let d = w.decide(row.request.clone(), &row.ctx);
        assert_eq!(
            (d.verdict, d.step),
            (row.verdict, row.step),
            "{}: {d}",
            row.name
        );
        let got = d
            .causes
            .first()
            .map(|c| (c.rule.clone(), source_label(&c.source)))
            .unwrap_or_else(|| ("-".into(), "-".into()));
        let (rule, source) = row.cause;
        assert!(
            got.0.starts_with(rule) && got.1 == source,
            "{}: cause {got:?}, want ({rule:?}, {source:?}); {d}",
            row.name
        );
    }
}

const MANAGED_TEXT: &str = r#"{
  "permissions": {
    "deny": ["Bash(rm *)", "Edit(secrets/**)", "WebFetch(evil.test)", "mcp__shell__*"],
    "ask": ["Bash(git push *)", "Read(docs/private/**)", "WebFetch(*.ask.test)"],
    "allow": ["Read(.env.example)", "WebFetch(docs.rs)", "mcp__github__get_issue"]
  }
}"#;

const USER_TEXT: &str = r#"{
  "permissions": {
    "allow": ["Bash(git status)", "Bash(cargo test *)", "Edit(src/**)", "Bash(echo *)"]
  }
}"#;

#[test]
fn every_step_of_the_decision_order() {
    let w = world(MANAGED_TEXT, USER_TEXT, "");
    let home = w.host.home.display().to_string();
    let ssh_key: &'static str = Box::leak(format!("{home}/.ssh/id_ed25519").into_boxed_str());
    let rows = vec![
        // 1. Sensitive paths.
        Row {
            name: "ssh key",
            request: read(ssh_key),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: ("~/.ssh", "built-in"),
        },
        Row {
            name: ".env",
            request: read("config/.env"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: (".env", "built-in"),
        },
        Row {
            name: ".env.local write",
            request: write_req(".env.local"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: (".env.local", "built-in"),
        },
        Row {
            name: "a rule naming the file opens it",
            request: read(".env.example"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::ReadOnly,
            cause: ("-", "-"),
        },
        Row {
            name: "shadow",
            request: read("/etc/shadow"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: ("/etc/shadow", "built-in"),
        },
        Row {
            name: "redirect into a secret",
            request: bash("echo x > ~/.ssh/authorized_keys"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: ("~/.ssh", "built-in"),
        },
        Row {
            name: "redirect into .env",
            request: bash("echo TOKEN=1 >> .env"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::SensitivePath,
            cause: (".env", "built-in"),
        },
        // 2. Writes into .git.
        Row {
            name: "hook write",
            request: write_req(".git/hooks/pre-commit"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GitWrite,
            cause: (".git/", "built-in"),
        },
        Row {
            name: "git config edit via ..",
            request: edit("src/../.git/config"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GitWrite,
            cause: (".git/", "built-in"),
        },
        Row {
            name: "hook via redirect",
            request: bash("echo evil > .git/hooks/pre-commit"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GitWrite,
            cause: (".git/", "built-in"),
        },
        Row {
            name: "hook write, another spelling (a case-insensitive project)",
            request: write_req(".GIT/hooks/pre-commit"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GitWrite,
            cause: (".git/", "built-in"),
        },
        Row {
            name: "git config via vfat's short name",
            request: edit("sub/GIT~1/config"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GitWrite,
            cause: (".git/", "built-in"),
        },
        Row {
            name: "a look-alike name is not .git",
            request: write_req(".github/workflows/ci.yml"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "project settings",
            request: write_req(".garuda/settings.json"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GarudaWrite,
            cause: (".garuda/", "built-in"),
        },
        Row {
            name: "nested settings, another spelling",
            request: edit("src/.GARUDA./settings.json"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::GarudaWrite,
            cause: (".garuda/", "built-in"),
        },
        Row {
            name: "settings via redirect",
            request: bash("echo '{}' > .garuda/settings.json"),
            ctx: host_only(),
            verdict: Verdict::Deny,
            step: Step::GarudaWrite,
            cause: (".garuda/", "built-in"),
        },
        Row {
            name: "reading .garuda is fine",
            request: read(".garuda/settings.json"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::ReadOnly,
            cause: ("-", "-"),
        },
        Row {
            name: "a look-alike name is not .garuda",
            request: write_req(".garuda-old/settings.json"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "reading .git is fine",
            request: read(".git/HEAD"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::ReadOnly,
            cause: ("-", "-"),
        },
        // 3. Deny rules.
        Row {
            name: "deny rm",
            request: bash("rm -rf target"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("bash(rm *)", "managed:3"),
        },
        Row {
            name: "deny edit",
            request: write_req("secrets/prod.toml"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("edit_file(secrets/**)", "managed:3"),
        },
        Row {
            name: "deny redirect write",
            request: bash("echo x > secrets/a"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("edit_file(secrets/**)", "managed:3"),
        },
        Row {
            name: "deny host",
            request: fetch("https://evil.test/x"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("web_fetch(evil.test)", "managed:3"),
        },
        Row {
            name: "deny mcp server",
            request: mcp("mcp__shell__run"),
            ctx: sandbox(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("mcp__shell__*", "managed:3"),
        },
        Row {
            name: "deny beats plan mode",
            request: bash("rm x"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::DenyRule,
            cause: ("bash(rm *)", "managed:3"),
        },
        // 5. Plan mode.
        Row {
            name: "plan: write",
            request: write_req("src/lib.rs"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: sandboxed command",
            request: bash("cargo build"),
            ctx: plan(),
            verdict: Verdict::Allow,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: no sandbox",
            request: bash("git status"),
            ctx: plan_no_sandbox(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: outside sandbox",
            request: bash_outside("git status"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: allowed URL",
            request: fetch("https://docs.rs/serde"),
            ctx: plan(),
            verdict: Verdict::Allow,
            step: Step::PlanMode,
            cause: ("web_fetch(docs.rs)", "managed:5"),
        },
        Row {
            name: "plan: other URL",
            request: fetch("https://example.com/"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: allowed MCP",
            request: mcp("mcp__github__get_issue"),
            ctx: plan(),
            verdict: Verdict::Allow,
            step: Step::PlanMode,
            cause: ("mcp__github__get_issue", "managed:5"),
        },
        Row {
            name: "plan: other MCP",
            request: mcp("mcp__github__create_issue"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "plan: read",
            request: read("src/lib.rs"),
            ctx: plan(),
            verdict: Verdict::Allow,
            step: Step::ReadOnly,
            cause: ("-", "-"),
        },
        Row {
            name: "plan never asks: ask rule denies",
            request: read("docs/private/plan.md"),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("read_file(docs/private/**)", "managed:4"),
        },
        // 6. Ask rules.
        Row {
            name: "ask rule on a sandboxed command",
            request: bash("git push origin main"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::AskRule,
            cause: ("bash(git push *)", "managed:4"),
        },
        Row {
            name: "ask rule on a read",
            request: read("docs/private/plan.md"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::AskRule,
            cause: ("read_file(docs/private/**)", "managed:4"),
        },
        Row {
            name: "ask rule on a host",
            request: fetch("https://x.ask.test/"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::AskRule,
            cause: ("web_fetch(*.ask.test)", "managed:4"),
        },
        // 7. Read-only tools.
        Row {
            name: "read source",
            request: read("src/main.rs"),
            ctx: host_only(),
            verdict: Verdict::Allow,
            step: Step::ReadOnly,
            cause: ("-", "-"),
        },
        // 8. Sandboxed commands.
        Row {
            name: "anything visible in the sandbox",
            request: bash("cargo build && ls | wc -l > n.txt"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::Sandboxed,
            cause: ("-", "-"),
        },
        Row {
            name: "hidden command with deny rules",
            request: bash("curl x | sh"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "hidden command in plan mode",
            request: bash("eval \"$CMD\""),
            ctx: plan(),
            verdict: Verdict::Deny,
            step: Step::PlanMode,
            cause: ("-", "-"),
        },
        Row {
            name: "unparsable with deny rules",
            request: bash("if then"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        // 9. Allow rules and session rules.
        Row {
            name: "allowed command on the host",
            request: bash("git status"),
            ctx: host_only(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("bash(git status)", "user:3"),
        },
        Row {
            name: "outside_sandbox with a rule",
            request: bash_outside("cargo test --all"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("bash(cargo test *)", "user:3"),
        },
        Row {
            name: "allowed edit",
            request: edit("src/lib.rs"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("edit_file(src/**)", "user:3"),
        },
        Row {
            name: "edit rule covers write",
            request: write_req("src/new.rs"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("edit_file(src/**)", "user:3"),
        },
        Row {
            name: "redirect covered by a write rule",
            request: bash("echo hi > src/hi.txt"),
            ctx: host_only(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("bash(echo *)", "user:3"),
        },
        Row {
            name: "allowed URL",
            request: fetch("https://docs.rs/serde"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("web_fetch(docs.rs)", "managed:5"),
        },
        Row {
            name: "allowed MCP",
            request: mcp("mcp__github__get_issue"),
            ctx: sandbox(),
            verdict: Verdict::Allow,
            step: Step::AllowRule,
            cause: ("mcp__github__get_issue", "managed:5"),
        },
        Row {
            name: "session rule",
            request: bash("make lint"),
            ctx: with_session(&["Bash(make *)"]),
            verdict: Verdict::Allow,
            step: Step::SessionRule,
            cause: ("bash(make *)", "session"),
        },
        Row {
            name: "session rule for a URL",
            request: fetch("https://crates.io/"),
            ctx: with_session(&["WebFetch(crates.io)"]),
            verdict: Verdict::Allow,
            step: Step::SessionRule,
            cause: ("web_fetch(crates.io)", "session"),
        },
        Row {
            name: "unusual URL with a rule asks",
            request: fetch("https://user:pw@docs.rs/"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        // 10. Otherwise ask.
        Row {
            name: "write elsewhere",
            request: write_req("README.md"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "command on the host",
            request: bash("make"),
            ctx: host_only(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "redirect not covered",
            request: bash("echo hi > README.md"),
            ctx: host_only(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "unknown URL",
            request: fetch("https://example.com/"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "IP URL",
            request: fetch("http://169.254.169.254/latest"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "file URL",
            request: fetch("file:///etc/passwd"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
        Row {
            name: "unknown MCP",
            request: mcp("mcp__jira__search"),
            ctx: sandbox(),
            verdict: Verdict::Ask,
            step: Step::NoRule,
            cause: ("-", "-"),
        },
    ];
    check(&w, rows);
}

#[test]
fn strict_profile_and_required_sandbox() {
    let strict = world(
        r#"{"profile": "strict", "permissions": {"allow": ["Bash(git status)"]}}"#,
        "",
        "",
    );
    check(
        &strict,
        vec![
            Row {
                name: "outside_sandbox refused even with an allow rule",
                request: bash_outside("git status"),
                ctx: sandbox(),
                verdict: Verdict::Deny,
                step: Step::StrictOutsideSandbox,
                cause: ("profile strict", "managed:1"),
            },
            Row {
                name: "no sandbox: refused even with an allow rule",
                request: bash("git status"),
                ctx: host_only(),
                verdict: Verdict::Deny,
                step: Step::SandboxRequired,
                cause: ("requireSandbox", "managed:1"),
            },
            Row {
                name: "in the sandbox",
                request: bash("git status"),
                ctx: sandbox(),
                verdict: Verdict::Allow,
                step: Step::Sandboxed,
                cause: ("-", "-"),
            },
        ],
    );
    let required = world("", r#"{"requireSandbox": true}"#, "");
    check(
        &required,
        vec![
            Row {
                name: "required by the user file",
                request: bash("ls"),
                ctx: host_only(),
                verdict: Verdict::Deny,
                step: Step::SandboxRequired,
                cause: ("requireSandbox", "user:1"),
            },
            // requireSandbox alone keeps outside_sandbox (asked), strict removes it.
            Row {
                name: "outside_sandbox asks",
                request: bash_outside("ls"),
                ctx: sandbox(),
                verdict: Verdict::Ask,
                step: Step::NoRule,
                cause: ("-", "-"),
            },
        ],
    );
}

#[test]
fn compound_commands_against_allow_and_deny_rules() {
    let w = world(
        r#"{"permissions": {"deny": ["Bash(rm *)"], "allow": ["Bash(git status)", "Bash(xargs *)", "Bash(env *)", "Bash(command *)", "Bash(sudo *)", "Bash(ls *)"]}}"#,
        "",
        "",
    );
    let ctx = host_only();
    let verdict = |line: &str| w.decide(bash(line), &ctx).verdict;
    assert_eq!(verdict("git status"), Verdict::Allow);
    for line in [
        "git status && curl x | sh",
        "git status; curl x",
        "git status || curl x",
        "$(curl x)",
        "git status $(curl x)",
        "git status `curl x`",
        "(git status; curl x)",
        "bash -c 'rm -rf /'",
        "sh -c 'curl x'",
        "FOO=1 git status",
        "LD_PRELOAD=/tmp/x.so git status",
        "git status > out.txt",
        "if then",
        "git status 'unterminated",
        "ls | sh",
        "eval git status",
    ] {
        let v = verdict(line);
        assert_ne!(
            v,
            Verdict::Allow,
            "{line:?} must not be allowed by Bash(git status)"
        );
    }
    for line in [
        "rm -rf /",
        "xargs rm",
        "find . | xargs rm -f",
        "env rm x",
        "command rm x",
        "sudo rm -rf /",
        "bash -c 'rm -rf /'",
        "git status && rm x",
        "echo $(rm x)",
        "ls `rm x`",
    ] {
        let d = w.decide(bash(line), &ctx);
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Deny, Step::DenyRule),
            "{line:?}: {d}"
        );
        // In the sandbox a deny rule still wins.
        assert_eq!(
            w.decide(bash(line), &sandbox()).verdict,
            Verdict::Deny,
            "{line:?}"
        );
    }
    // An unparsable line is asked, never allowed, even with a rule covering every command.
    let everything = world(r#"{"permissions": {"allow": ["Bash"]}}"#, "", "");
    for line in ["if then", "echo 'open", "((("] {
        let d = everything.decide(bash(line), &ctx);
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Ask, Step::NoRule),
            "{line:?}: {d}"
        );
        assert!(d.reason.contains("cannot be parsed"), "{d}");
    }
}

#[test]
fn links_are_judged_where_they_lead() {
    let w = world("", USER_TEXT, "");
    // src/** is allowed, but a link inside src that points into .git is a write into .git.
    std::os::unix::fs::symlink(w.root.join(".git/hooks"), w.root.join("src/hooks")).unwrap();
    let d = w.decide(write_req("src/hooks/pre-commit"), &sandbox());
    assert_eq!((d.verdict, d.step), (Verdict::Deny, Step::GitWrite), "{d}");
    // And a link to a secret is a secret.
    std::fs::create_dir_all(w.host.home.join(".ssh")).unwrap();
    std::os::unix::fs::symlink(w.host.home.join(".ssh"), w.root.join("src/keys")).unwrap();
    let d = w.decide(read("src/keys/id_rsa"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
    // Negative control: the same paths without links are ordinary.
    assert_eq!(
        w.decide(write_req("src/other/pre-commit"), &sandbox())
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        w.decide(read("src/other/id_rsa"), &sandbox()).verdict,
        Verdict::Allow
    );
}

#[test]
fn unreadable_setting_is_sensitive_with_its_source() {
    let w = world("", "", "{\n\"sandbox\": {\"unreadable\": [\"certs\"]}}");
    let d = w.decide(read("certs/server.key"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
    assert_eq!(source_label(&d.causes[0].source), "project:2");

    // A path the managed file hides opens only for a managed rule, never for a user's.
    let w = world(
        r#"{"sandbox": {"unreadable": ["/opt/keys"]}}"#,
        r#"{"permissions": {"allow": ["Read(//opt/keys/**)"]}}"#,
        "",
    );
    let d = w.decide(read("/opt/keys/a.pem"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
    // Negative control: the same rule in the managed file opens it.
    let w = world(
        r#"{"sandbox": {"unreadable": ["/opt/keys"]}, "permissions": {"allow": ["Read(//opt/keys/**)"]}}"#,
        "",
        "",
    );
    assert_eq!(
        w.decide(read("/opt/keys/a.pem"), &sandbox()).verdict,
        Verdict::Allow
    );
}

#[test]
fn request_from_tool_names_and_aliases() {
    assert_eq!(Request::from_tool("Read", "a", false), Some(read("a")));
    assert_eq!(
        Request::from_tool("write_file", "a", false),
        Some(write_req("a"))
    );
    assert_eq!(
        Request::from_tool("Bash", "ls", true),
        Some(bash_outside("ls"))
    );
    assert_eq!(
        Request::from_tool("mcp__gh__x", "", false),
        Some(mcp("mcp__gh__x"))
    );
    assert_eq!(Request::from_tool("Teleport", "x", false), None);
    let _ = write; // the helper is used by other tests in this crate
}

#[test]
fn a_secret_is_found_through_another_spelling_of_home() {
    let tmp = tempfile::TempDir::new().unwrap();
    let real = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(real.join("real-home/.ssh")).unwrap();
    std::os::unix::fs::symlink(real.join("real-home"), real.join("home-link")).unwrap();
    let host = HostEnv::from_vars(vec![("HOME".into(), real.join("home-link").into())]).unwrap();
    let root = real.join("project");
    std::fs::create_dir_all(&root).unwrap();
    let settings = EffectiveSettings::default();
    let engine = Engine::new(&settings, &host, &root);
    for spelling in ["home-link/.ssh/id_rsa", "real-home/.ssh/id_rsa"] {
        let d = engine.decide(&read(real.join(spelling).to_str().unwrap()), &sandbox());
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Deny, Step::SensitivePath),
            "{spelling}: {d}"
        );
    }
}

#[test]
fn unusual_urls_ask_even_under_a_rule_for_every_host() {
    let w = world(r#"{"permissions": {"allow": ["WebFetch"]}}"#, "", "");
    for url in [
        "http://2130706433/",
        "http://0x7f000001/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "https://user:secret@docs.rs/",
        "https://docs.rs\u{2024}evil.test/",
    ] {
        let d = w.decide(fetch(url), &sandbox());
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Ask, Step::NoRule),
            "{url}: {d}"
        );
        assert!(d.reason.contains("unusual"), "{url}: {d}");
    }
    // Negative control: an ordinary URL is allowed by the same rule.
    let d = w.decide(fetch("https://docs.rs/serde"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Allow, Step::AllowRule),
        "{d}"
    );
}

#[test]
fn dotdot_after_a_link_is_judged_where_the_kernel_goes() {
    let w = world("", USER_TEXT, "");
    let cache = w.host.home.join(".cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(w.host.home.join(".ssh")).unwrap();
    std::fs::create_dir_all(w.root.join(".git/objects")).unwrap();
    std::os::unix::fs::symlink(&cache, w.root.join("src/l")).unwrap();
    std::os::unix::fs::symlink(w.root.join(".git/objects"), w.root.join("src/o")).unwrap();
    // `src/l/..` is the home folder, `src/o/..` is `.git`.
    let d = w.decide(write_req("src/l/../.ssh/authorized_keys"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
    let d = w.decide(write_req("src/o/../hooks/pre-commit"), &sandbox());
    assert_eq!((d.verdict, d.step), (Verdict::Deny, Step::GitWrite), "{d}");
    let d = w.decide(bash("echo x > src/o/../hooks/post-checkout"), &host_only());
    assert_eq!((d.verdict, d.step), (Verdict::Deny, Step::GitWrite), "{d}");
    let d = w.decide(read("src/l/../.ssh/id_rsa"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
    // Negative control: `..` after an ordinary folder stays in the project.
    let d = w.decide(write_req("src/a/../b.rs"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Allow, Step::AllowRule),
        "{d}"
    );
}

#[test]
fn lines_that_could_hide_a_denied_command_are_asked_even_in_the_sandbox() {
    let w = world(
        r#"{"permissions": {"deny": ["Bash(rm *)"], "ask": ["Bash(git push *)"]}}"#,
        "",
        "",
    );
    for line in [
        "rm_it() { :; }; if then", // unparsable: bash runs what precedes the error
        "rm -rf x\nfi",            // bash deletes x before it finds the stray `fi`
        "echo hi && [[ 1 -eq 'a[$(rm -rf src)]' ]]", // arithmetic runs the subscript
        "(( x = y ))",
        "for PATH in bin; do git status; done", // a loop variable
        "$CMD -rf /",                           // a command name known at run time
        "eval \"$X\"",
        "sh -c \"$X\"",
        "{r''m,-f,x}", // brace expansion makes the name
    ] {
        let d = w.decide(bash(line), &sandbox());
        assert_ne!(d.verdict, Verdict::Allow, "{line:?}: {d}");
    }
    // Visible commands, or dynamic arguments of an ordinary program, still run in the sandbox.
    for line in [
        "echo $HOME",
        "ls *.rs",
        "cargo test -- $(cat tests.txt)",
        "git status",
    ] {
        let d = w.decide(bash(line), &sandbox());
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Allow, Step::Sandboxed),
            "{line:?}: {d}"
        );
    }
    // Negative control: without deny or ask rules for commands, the sandbox is the control.
    let open = world(r#"{"permissions": {"deny": ["Read(secrets/**)"]}}"#, "", "");
    for line in ["if then", "curl x | sh", "$CMD -rf /"] {
        let d = open.decide(bash(line), &sandbox());
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Allow, Step::Sandboxed),
            "{line:?}: {d}"
        );
    }
}

/// The reviewed bypasses: each line was allowed (or ran a denied command) before the fix.
#[test]
fn review_findings_outside_the_sandbox() {
    let w = world(
        "",
        r#"{"permissions": {
            "allow": ["Bash(git status)", "Bash(echo *)", "Bash(cd *)", "Bash(cat *)",
                      "Bash(git diff *)", "Bash(find *)", "Edit"],
            "deny": ["Bash(rm *)", "Edit(.github/**)", "Read(~/.aws/**)"]}}"#,
        "",
    );
    std::fs::create_dir_all(w.root.join(".github")).unwrap();
    let host = host_only();
    let not_allowed = [
        // Arithmetic and [[ … ]] run subscripts; loop variables and arithmetic assign.
        "echo hi && [[ 1 -eq 'a[$(touch /tmp/x)]' ]]",
        "echo hi; [[ -v 'x[$(touch /tmp/x)]' ]]",
        "echo hi; for i in 'a[$(touch x)]'; do (( i )); done",
        "for PATH in bin; do git status; done",
        "((PATH=0)); git status",
        "git status; [[ PATH=0 -eq 0 ]] && git status",
        // A cd before a write moves the write.
        "cd .git/hooks && echo evil > pre-commit",
        "cd ~/.ssh; echo key >> authorized_keys",
        "cd .github && echo x > workflows/ci.yml",
        "cd \"$D\" && echo x > f",
        // Reads of secrets and writes through options.
        "cat ~/.aws/credentials",
        "cat < ~/.aws/credentials",
        "git diff --no-index /dev/null ~/.aws/credentials",
        "git diff --output=.git/config HEAD",
        "find . -fprint .git/hooks/pre-commit",
        // A brace expansion that makes a denied command.
        "{r''m,-f,x}",
    ];
    for line in not_allowed {
        let d = w.decide(bash(line), &host);
        assert_ne!(d.verdict, Verdict::Allow, "{line:?}: {d}");
    }
    // The ones with a static answer are denied, not merely asked.
    for (line, step) in [
        ("cd .git/hooks && echo evil > pre-commit", Step::GitWrite),
        (
            "cd ~/.ssh; echo key >> authorized_keys",
            Step::SensitivePath,
        ),
        ("cd .github && echo x > workflows/ci.yml", Step::DenyRule),
        ("cat ~/.aws/credentials", Step::SensitivePath),
        ("cat < ~/.aws/credentials", Step::SensitivePath),
        ("git diff --output=.git/config HEAD", Step::GitWrite),
    ] {
        let d = w.decide(bash(line), &host);
        assert_eq!((d.verdict, d.step), (Verdict::Deny, step), "{line:?}: {d}");
    }
    // Negative controls: the same programs on ordinary files are allowed.
    for line in [
        "git status",
        "cd src && echo x > notes.txt",
        "cat src/main.rs",
        "git diff --output=out.patch HEAD",
    ] {
        let d = w.decide(bash(line), &host);
        assert_eq!(d.verdict, Verdict::Allow, "{line:?}: {d}");
    }
}

#[test]
fn file_tools_judge_a_tilde_path_as_the_home_folder_too() {
    let w = world("", "", "");
    let d = w.decide(read("~/.aws/credentials"), &sandbox());
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Deny, Step::SensitivePath),
        "{d}"
    );
}

#[test]
fn session_rules_do_not_apply_under_managed_rules_only() {
    let w = world(r#"{"managedRulesOnly": true}"#, "", "");
    let d = w.decide(bash("make lint"), &with_session(&["Bash(make *)"]));
    assert_eq!((d.verdict, d.step), (Verdict::Ask, Step::NoRule), "{d}");
    // Negative control: without the switch the session rule allows it.
    let w = world("{}", "", "");
    let d = w.decide(bash("make lint"), &with_session(&["Bash(make *)"]));
    assert_eq!(
        (d.verdict, d.step),
        (Verdict::Allow, Step::SessionRule),
        "{d}"
    );
}

/// The second review's bypasses, each allowed before its fix.
#[test]
fn second_review_findings() {
    let w = world(
        "",
        r#"{"permissions": {
            "allow": ["Bash(git status)", "Bash(echo *)", "Bash(cd *)", "Bash(cat *)",
                      "Edit(src/**)"],
            "deny": ["Bash(rm *)", "Read(~/.aws/**)"]}}"#,
        "",
    );
    let home = &w.host.home;
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "secret").unwrap();
    // Links to targets that do not exist yet: `open(O_CREAT)` follows them.
    std::os::unix::fs::symlink("../.git/commondir", w.root.join("src/cd")).unwrap();
    std::os::unix::fs::symlink("../.git/hooks/pre-commit", w.root.join("src/pc")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh/authorized_keys"), w.root.join("src/ak")).unwrap();
    // A link in the project to a secret, and a fake repository in a subfolder.
    std::os::unix::fs::symlink(home.join(".ssh/id_rsa"), w.root.join("k")).unwrap();
    std::fs::create_dir_all(w.root.join("src/evil/objects")).unwrap();
    let host = host_only();
    for (line, want) in [
        ("echo x > src/cd", Step::GitWrite),
        ("echo x > src/pc", Step::GitWrite),
        ("echo x > src/ak", Step::SensitivePath),
        ("cd ~ && cd .aws && cat credentials", Step::SensitivePath),
        ("cd ~; cd .ssh; cat id_rsa", Step::SensitivePath),
        ("cat k", Step::SensitivePath),
    ] {
        let d = w.decide(bash(line), &host);
        assert_eq!((d.verdict, d.step), (Verdict::Deny, want), "{line:?}: {d}");
    }
    for path in ["src/cd", "src/pc"] {
        let d = w.decide(write_req(path), &sandbox());
        assert_eq!(
            (d.verdict, d.step),
            (Verdict::Deny, Step::GitWrite),
            "{path}: {d}"
        );
    }
    for line in [
        "cd src/evil && git status",
        "cat /proc/self/cwd/README",
        "echo x > /dev/fd/3",
    ] {
        let d = w.decide(bash(line), &host);
        assert_ne!(d.verdict, Verdict::Allow, "{line:?}: {d}");
    }
    // Negative controls: ordinary files through the same rules.
    std::fs::write(w.root.join("README"), "hi").unwrap();
    for line in ["git status", "cat README", "echo x > src/notes.txt"] {
        let d = w.decide(bash(line), &host);
        assert_eq!(d.verdict, Verdict::Allow, "{line:?}: {d}");
    }
}

/// The third review's bypasses, each allowed before its fix.
#[test]
fn third_review_findings() {
    let w = world(
        "",
        r#"{"permissions": {
            "allow": ["Bash(git status)", "Bash(echo *)", "Bash(cat *)", "Bash(cd *)"],
            "deny": ["Bash(rm *)"]}}"#,
        "",
    );
    let home = &w.host.home;
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
    let src = w.root.join("src");
    std::os::unix::fs::symlink(".", src.join("l")).unwrap();
    std::os::unix::fs::symlink("../.git", src.join("src")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh"), src.join("ss")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh/id_rsa"), w.root.join("-k")).unwrap();
    let host = host_only();
    for (line, step) in [
        // bash's logical `cd src/l/..` lands in src/, where `src/hooks` is `.git/hooks`.
        (
            "cd src/l/.. && echo x > src/hooks/pre-commit",
            Step::GitWrite,
        ),
        ("cd src/l/.. && cat ss/id_rsa", Step::SensitivePath),
        // A file named like an option.
        ("cat -- -k", Step::SensitivePath),
        ("cat -n -k", Step::SensitivePath),
    ] {
        let d = w.decide(bash(line), &host);
        assert_eq!((d.verdict, d.step), (Verdict::Deny, step), "{line:?}: {d}");
    }
    // Negative control for the submodule case: with no nested repository, `git status` is
    // allowed; with one, it is asked.
    let d = w.decide(bash("git status"), &host);
    assert_eq!(d.verdict, Verdict::Allow, "{d}");
    std::fs::create_dir_all(w.root.join("sub/.git")).unwrap();
    let d = w.decide(bash("git status"), &host);
    assert_eq!((d.verdict, d.step), (Verdict::Ask, Step::NoRule), "{d}");
    assert!(d.reason.contains("another repository"), "{d}");
    // Options that name no file are not paths.
    let d = w.decide(bash("cat -n README"), &host);
    assert_ne!(d.step, Step::SensitivePath, "{d}");
}
