//! End-to-end tests of `garuda policy` and of the strict profile at start-up.
//!
//! The strict tests need a machine *without* an OS sandbox and a managed policy at the fixed
//! path `/etc/garuda/managed-policy.json`. Both are made for real: the test runs `garuda` inside
//! a bubblewrap jail of its own with `--disable-userns` (so neither bubblewrap nor the native
//! executor can create the user namespace they need: the probes really find nothing) and a
//! private `/etc` that holds the host's entries plus the test's managed file. Nothing on the
//! host is written.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{base_dir, garuda, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct World {
    base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn world() -> World {
    let base = base_dir("garuda-policy-cli-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    std::fs::create_dir_all(home.join(".garuda")).unwrap();
    std::fs::create_dir_all(project.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(project.join(".garuda")).unwrap();
    World {
        base,
        home,
        project,
    }
}

impl World {
    fn user_policy(&self, text: &str) {
        std::fs::write(self.home.join(".garuda/policy.json"), text).unwrap();
    }
    fn project_settings(&self, text: &str) {
        std::fs::write(self.project.join(".garuda/settings.json"), text).unwrap();
    }
    fn garuda(&self, args: &[&str]) -> Output {
        self.command(Command::new(garuda()), args)
    }
    fn command(&self, mut cmd: Command, args: &[&str]) -> Output {
        cmd.args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap()
    }
    /// `garuda ARGS` inside a jail without user namespaces, with `managed` (if any) at the
    /// managed policy's fixed path.
    fn jailed(&self, managed: Option<&str>, args: &[&str]) -> Output {
        let mut cmd = Command::new("bwrap");
        cmd.args(["--unshare-user", "--disable-userns", "--unshare-pid"]);
        cmd.args(["--bind", "/", "/", "--tmpfs", "/etc"]);
        for entry in std::fs::read_dir("/etc").unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name == "garuda" {
                continue;
            }
            let path = Path::new("/etc").join(&name);
            match std::fs::read_link(&path) {
                Ok(target) => {
                    cmd.arg("--symlink").arg(target).arg(&path);
                }
                Err(_) => {
                    cmd.arg("--ro-bind").arg(&path).arg(&path);
                }
            }
        }
        if let Some(text) = managed {
            let file = self.base.path().join("managed-policy.json");
            std::fs::write(&file, text).unwrap();
            cmd.args(["--dir", "/etc/garuda", "--ro-bind"])
                .arg(&file)
                .arg("/etc/garuda/managed-policy.json");
        }
        cmd.args(["--proc", "/proc", "--dev", "/dev", "--"]);
        cmd.arg(garuda());
        self.command(cmd, args)
    }
}

fn first_word(out: &Output) -> String {
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

#[test]
fn strict_managed_policy_without_a_sandbox_refuses_to_start() {
    let w = world();
    // The jail really has no sandbox: doctor says so.
    let doctor = w.jailed(None, &["doctor", "--json"]);
    assert!(doctor.status.success(), "{}", text(&doctor.stderr));
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let executors = report["executors"]
        .as_array()
        .expect("executors in doctor --json");
    for e in executors {
        if e["kind"] != "host" {
            assert_eq!(e["available"], false, "{e}");
        }
    }

    // A project that says "default" does not lift the managed strict.
    w.project_settings(r#"{"profile": "default", "requireSandbox": false}"#);
    let out = w.jailed(
        Some("{\"profile\": \"strict\"}\n"),
        &["sandbox", "--", "sh", "-c", "echo ran-on-the-host"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!text(&out.stdout).contains("ran-on-the-host"));
    assert!(err.contains("an OS sandbox is required"), "{err}");
    assert!(err.contains("profile strict"), "{err}");
    assert!(err.contains("/etc/garuda/managed-policy.json:1"), "{err}");
    // bwrap is installed in the jail (it is the jail): the fix is about namespaces, not
    // installing it (issue 11: advice that is true).
    assert!(
        err.contains("Fix: allow unprivileged user namespaces"),
        "{err}"
    );
    assert!(!err.contains("install bubblewrap"), "{err}");
    assert!(
        err.contains("landlock:") && err.contains("bubblewrap:"),
        "{err}"
    );

    // `true` too, as the issue says.
    let out = w.jailed(Some(r#"{"profile": "strict"}"#), &["sandbox", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));

    // requireSandbox alone (from the user file) does the same.
    w.project_settings("{}");
    w.user_policy(r#"{"requireSandbox": true}"#);
    let out = w.jailed(None, &["sandbox", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("policy.json:1"), "{err}");

    // Negative control: without strict the same jail runs the command on the host executor,
    // with the notice.
    w.user_policy("{}");
    let out = w.jailed(None, &["sandbox", "--", "sh", "-c", "echo ran-on-the-host"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).trim(), "ran-on-the-host");
    assert!(
        err.contains("host executor: commands run with your full rights"),
        "{err}"
    );
}

#[test]
fn strict_refuses_a_host_executor_anywhere() {
    let w = world();
    w.user_policy(r#"{"executor": "host"}"#);
    let out = w.garuda(&["sandbox", "--strict", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("executor host"), "{err}");
    assert!(err.contains("--strict"), "{err}");
    w.user_policy("{}");
    let out = w.garuda(&["sandbox", "--strict", "--executor", "host", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    // Negative control: without --strict the host executor runs it.
    let out = w.garuda(&["sandbox", "--executor", "host", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn decide_prints_the_verdict_first_with_rule_and_source() {
    let w = world();
    w.user_policy(
        "{\n  \"permissions\": {\n    \"allow\": [\"Bash(git status)\"],\n    \"deny\": [\"Bash(rm *)\"]\n  }\n}\n",
    );
    let decide = |args: &[&str]| {
        let mut all = vec!["policy", "decide"];
        all.extend_from_slice(args);
        let out = w.garuda(&all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        out
    };
    let out = decide(&["bash", "git status", "--outside-sandbox"]);
    assert_eq!(first_word(&out), "allow", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("bash(git status) from user"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("policy.json:3"),
        "{}",
        text(&out.stdout)
    );

    let out = decide(&["bash", "git status && curl x | sh", "--outside-sandbox"]);
    assert_eq!(first_word(&out), "ask", "{}", text(&out.stdout));
    // In the OS sandbox (this machine has one) a line whose commands are all visible runs
    // without asking ...
    let out = decide(&["bash", "git status && curl x | wc -l"]);
    assert_eq!(first_word(&out), "allow", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("OS sandbox"),
        "{}",
        text(&out.stdout)
    );
    // ... but `sh` reading a pipe could run the denied `rm`: asked even there.
    let out = decide(&["bash", "git status && curl x | sh"]);
    assert_eq!(first_word(&out), "ask", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("deny and ask rules"),
        "{}",
        text(&out.stdout)
    );
    let out = decide(&["bash", "git status"]);
    assert_eq!(first_word(&out), "allow", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("OS sandbox"),
        "{}",
        text(&out.stdout)
    );

    let out = decide(&["bash", "find . | xargs rm"]);
    assert_eq!(first_word(&out), "deny", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("policy.json:4"),
        "{}",
        text(&out.stdout)
    );

    let out = decide(&["write_file", ".git/hooks/pre-commit"]);
    assert_eq!(first_word(&out), "deny", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("built-in"),
        "{}",
        text(&out.stdout)
    );

    let out = decide(&["Write", "src/main.rs", "--plan"]);
    assert_eq!(first_word(&out), "deny", "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("plan mode"),
        "{}",
        text(&out.stdout)
    );

    let out = decide(&["--json", "read_file", "src/main.rs"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "allow");
    assert_eq!(v["step"], "read-only");

    let out = w.garuda(&["policy", "decide", "teleport", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown tool"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn policy_shows_each_value_with_its_file_and_line() {
    let w = world();
    w.user_policy("{\n  \"commands\": {\"mode\": \"staged\"},\n  \"network\": {\"allow\": [\"crates.io\"]}\n}\n");
    w.project_settings("{\n\n  \"permissions\": {\"deny\": [\"Read(secrets/**)\"]}\n}\n");
    let out = w.garuda(&["policy"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    assert!(line("commands.mode").contains("staged"), "{stdout}");
    assert!(line("commands.mode").contains("policy.json:2"), "{stdout}");
    assert!(line("network.allow").contains("crates.io"), "{stdout}");
    assert!(
        line("permissions.deny").contains("settings.json:3"),
        "{stdout}"
    );
    assert!(line("executor in use:").contains("auto"), "{stdout}");

    let out = w.garuda(&["policy", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = v["entries"].as_array().unwrap();
    assert!(entries
        .iter()
        .any(|e| e["key"] == "permissions.deny" && e["value"] == "read_file(secrets/**)"));
    assert_eq!(v["sources"].as_array().unwrap().len(), 2);
}

#[test]
fn check_validates_a_file_and_prints_what_it_would_change() {
    let w = world();
    let file = w.base.path().join("managed-policy.json");
    std::fs::write(
        &file,
        r#"{"profile": "strict", "permissions": {"deny": ["Bash(curl *)"]}}"#,
    )
    .unwrap();
    let out = w.garuda(&["policy", "check", file.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("valid as the managed policy"), "{stdout}");
    assert!(stdout.contains("+ profile  strict"), "{stdout}");
    assert!(
        stdout.contains("+ permissions.deny  bash(curl *)"),
        "{stdout}"
    );
    assert!(stdout.contains("- profile  default"), "{stdout}");

    // A file that changes nothing says so.
    let same = w.base.path().join("settings.json");
    std::fs::write(&same, "{}").unwrap();
    let out = w.garuda(&["policy", "check", same.to_str().unwrap()]);
    assert!(
        text(&out.stdout).contains("no change"),
        "{}",
        text(&out.stdout)
    );

    // A project file that widens is refused with its place.
    std::fs::write(
        &same,
        "{\n  \"permissions\": {\n    \"allow\": [\"Bash\"]}}",
    )
    .unwrap();
    let out = w.garuda(&["policy", "check", same.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("settings.json:3:14"), "{err}");
    assert!(err.contains("permissions.allow"), "{err}");
}

/// Each malformed input gives one error naming file:line:col, and a non-zero exit, both from
/// `garuda policy check` and from `garuda sandbox` (which refuses to start).
#[test]
fn malformed_policy_files_give_one_clear_error_each() {
    let w = world();
    let mut big = b"{\"permissions\": {\"deny\": [".to_vec();
    while big.len() < 10 * 1024 * 1024 {
        big.extend_from_slice(b"\"Bash(rm *)\",\n");
    }
    big.extend_from_slice(b"\"Bash\"]}}");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated",
            b"{\n  \"profile\": \"strict\",\n  \"permissions\": {".to_vec(),
            ":3:18: EOF while parsing",
        ),
        (
            "string for a list",
            b"{\n  \"permissions\": {\"deny\": \"Bash(rm *)\"}\n}".to_vec(),
            ":2:38: invalid type: string \"Bash(rm *)\", expected a sequence",
        ),
        (
            "unknown key",
            b"{\n  \"profile\": \"strict\",\n  \"permisions\": {}\n}".to_vec(),
            ":3:14: unknown field `permisions`",
        ),
        (
            "ten megabytes",
            big,
            ":74897:7: settings file has 10485769 bytes, more than the limit of 1048576",
        ),
        (
            "invalid UTF-8",
            b"{\n  \"profile\": \"str\xffict\"\n}".to_vec(),
            ":2:18: settings are not valid UTF-8",
        ),
        (
            "duplicate key",
            b"{\"profile\": \"strict\",\n\"profile\": \"default\"}".to_vec(),
            ":2:9: duplicate field `profile`",
        ),
        (
            "bad rule",
            b"{\"permissions\": {\n  \"deny\": [\"Bash(rm *\"]}}".to_vec(),
            ":2:12: \"permissions.deny[0]\": invalid rule",
        ),
    ];
    for (name, bytes, want) in cases {
        let file = w.home.join(".garuda/policy.json");
        std::fs::write(&file, &bytes).unwrap();
        let out = w.garuda(&["policy", "check", file.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        let expected = format!("{}{want}", file.display());
        assert!(
            err.contains(&expected),
            "{name}: want {expected:?} in {err:?}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{name}: one error: {err}");

        let out = w.garuda(&["sandbox", "--", "true"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{name}: {err}");
        assert!(
            err.contains(&expected),
            "{name}: want {expected:?} in {err:?}"
        );
    }
}
