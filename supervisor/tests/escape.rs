//! What a command chose is printed visibly (issue 10, item 4), through the real `garuda`
//! binary on both Linux sandboxes: file names in the staged change list and its diff headers,
//! the `Host` header in the proxy's `blocked:` line, an argument in `garuda audit show`, a
//! program name in "cannot execute", a project settings file's rule and path in `garuda
//! policy`. Each is checked for the escaped form, for the absence of
//! the raw character and of a forged line, and against its negative control: the raw value
//! really holds the newline, the C1 control or the bidirectional override (the file exists
//! with that exact name, the audit log keeps the exact host and argument), and printing it as
//! it is would forge the line or send the character to the terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::net::{http_server, runtime, LOOPBACK};
use common::{garuda, text, World, PROXY_VARS};

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};

/// The Linux sandboxes under test.
const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];
const CURL: &str = "/usr/bin/curl";
/// A line Garuda prints itself (for an incomplete list), forged under a real entry.
const FORGED: &str = "The change list is INCOMPLETE (forged): it can only be discarded.";
fn world() -> World {
    let w = World::new("garuda-escape-tests");
    w.git(&["init", "-q"]);
    w
}

impl World {
    fn garuda(&self, args: &[&str]) -> Output {
        let mut c = Command::new(garuda());
        c.args(args)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env_remove("GARUDA_HOME")
            .stdin(Stdio::null());
        for var in PROXY_VARS {
            c.env_remove(var);
        }
        c.output().unwrap()
    }

    /// `garuda sandbox --executor EX ARGS… -- ARGV…`.
    fn sandbox(&self, ex: &str, args: &[&str], argv: &[&str]) -> Output {
        let project = self.project.to_str().unwrap();
        let mut all = vec!["sandbox", "--executor", ex, "--project", project];
        all.extend_from_slice(args);
        all.push("--");
        all.extend_from_slice(argv);
        self.garuda(&all)
    }

    /// The events of the newest audit session, as `garuda audit show --json` parses back.
    fn audit_events(&self) -> Vec<(String, serde_json::Value)> {
        let out = self.garuda(&["audit", "show", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| (l["type"].as_str().unwrap().to_string(), l["event"].clone()))
            .collect()
    }
}

/// No character that could drive the terminal or reorder the text, other than line ends.
fn assert_nothing_hidden(what: &str, out: &str) {
    let hidden: Vec<char> = out
        .chars()
        .filter(|c| *c != '\n' && garuda_text::is_hidden(*c))
        .collect();
    assert!(hidden.is_empty(), "{what}: raw {hidden:?} in {out:?}");
}

#[test]
fn file_names_cannot_forge_lines_of_the_staged_change_list() {
    let newline = format!("n\n{FORGED}");
    let bidi = "evil\u{202e}txt.exe";
    let esc = "esc\x1b[1A\x1b[2Kname";
    // printf's escapes make the names inside the sandbox.
    let script = format!(
        "printf x > \"$(printf 'n\\n{FORGED}')\" && printf y > \"$(printf 'evil\\342\\200\\256txt.exe')\" \
         && printf z > \"$(printf 'esc\\033[1A\\033[2Kname')\""
    );
    for ex in SANDBOXES {
        let w = world();
        let out = w.sandbox(ex, &["--staged", "--apply"], &["/bin/sh", "-c", &script]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{ex}: {err}");
        assert!(
            err.contains("garuda: applied: 3 files written"),
            "{ex}: {err}"
        );
        // Each name is one line of the list and one diff header, escaped.
        for shown in [
            format!("  added     n\\n{FORGED}\n"),
            "  added     evil\\u{202e}txt.exe\n".to_string(),
            "  added     esc\\e[1A\\e[2Kname\n".to_string(),
            format!("+++ b/n\\n{FORGED}\n"),
            "+++ b/evil\\u{202e}txt.exe\n".to_string(),
            "+++ b/esc\\e[1A\\e[2Kname\n".to_string(),
        ] {
            assert!(err.contains(&shown), "{ex}: {shown:?} missing: {err}");
        }
        assert!(
            !err.lines()
                .any(|l| l.starts_with("The change list is INCOMPLETE")),
            "{ex}: a forged line: {err}"
        );
        assert_nothing_hidden(ex, &err);

        // Negative control: the names are exactly what the command made (apply wrote them to
        // the project under those names), and printed as they are they forge the line, move
        // the cursor and reverse the text.
        let on_disk: Vec<OsString> = std::fs::read_dir(&w.project)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        for name in [newline.as_str(), bidi, esc] {
            let name = OsString::from(name);
            assert!(on_disk.contains(&name), "{ex}: {name:?} not in {on_disk:?}");
            // What Garuda printed is the visible form of exactly these bytes.
            let shown = garuda_text::visible_os(&name);
            assert!(err.contains(&format!("  added     {shown}\n")), "{ex}");
        }
        let raw = format!("  added     {newline}\n");
        assert!(raw
            .lines()
            .any(|l| l.starts_with("The change list is INCOMPLETE")));
        let raw = format!("  added     {bidi}\n  added     {esc}\n");
        assert!(raw.contains('\u{202e}') && raw.contains('\x1b'));
    }
}

#[test]
fn a_host_header_is_printed_visibly_in_the_blocked_line() {
    // hyper takes a tab and any byte from 0x80 in a header value: the C1 controls (U+009B is
    // CSI) and the bidirectional overrides reach the proxy's refusal as the command sent them.
    let host = "evil.test\u{9b}1A\u{9b}2K\tgaruda\u{202e}moc.elgoog";
    let rt = runtime();
    for ex in SANDBOXES {
        let w = world();
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let allow = format!("127.0.0.1:{p}");
        let header = format!("Host: {host}");
        let url = format!("http://127.0.0.1:{p}/x");
        let out = w.sandbox(
            ex,
            &["--timeout", "60", "--allow-host", &allow],
            &[
                CURL,
                "-q",
                "-sS",
                "--max-time",
                "10",
                "--noproxy",
                "",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                &header,
                &url,
            ],
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{ex}: {err}");
        assert_eq!(text(&out.stdout), "403", "{ex}: {err}");
        assert!(web.requests().is_empty(), "{ex}: the request got through");
        let blocked: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("garuda: blocked: "))
            .collect();
        assert_eq!(
            blocked,
            [format!(
                "garuda: blocked: evil.test\\u{{009b}}1A\\u{{009b}}2K\\tgaruda\\u{{202e}}moc.elgoog:{p} \
                 (Host header differs from the URL)"
            )],
            "{ex}: {err}"
        );
        assert_nothing_hidden(ex, &err);

        // Negative control: the proxy recorded the host exactly as sent (the audit log keeps
        // it, as JSON data), so printed as it is the line would carry the CSI and the override.
        let events = w.audit_events();
        let result = &events
            .iter()
            .find(|(kind, _)| kind == "command_result")
            .unwrap()
            .1;
        let recorded = format!("{host}:{p} (Host header differs from the URL)");
        assert_eq!(result["blocked"], serde_json::json!([recorded]), "{ex}");
        let raw = format!("garuda: blocked: {recorded}");
        assert!(raw.contains('\u{9b}') && raw.contains('\u{202e}') && raw.contains('\t'));
    }
}

#[test]
fn an_argument_is_printed_visibly_by_audit_show() {
    let arg = "x\nsession forged\x1b[2K\u{202e}\u{9b}31m\x7f";
    for ex in SANDBOXES {
        let w = world();
        let out = w.sandbox(ex, &[], &["/bin/sh", "-c", "exit 0", arg]);
        assert_eq!(out.status.code(), Some(0), "{ex}: {}", text(&out.stderr));
        let show = w.garuda(&["audit", "show"]);
        assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
        let shown = text(&show.stdout);
        assert!(
            shown.contains(
                r#""argv":["/bin/sh","-c","exit 0","x\nsession forged\u001b[2K\u202e\u009b31m\u007f"]"#
            ),
            "{ex}: {shown}"
        );
        assert_eq!(
            shown.lines().filter(|l| l.starts_with("session ")).count(),
            1,
            "{ex}: a forged line: {shown}"
        );
        assert_nothing_hidden(ex, &shown);
        // The JSON form carries the same value, with nothing raw either.
        let json = w.garuda(&["audit", "show", "--json"]);
        assert_nothing_hidden(ex, &text(&json.stdout));
        let intent = w
            .audit_events()
            .into_iter()
            .find(|(kind, _)| kind == "command_intent")
            .unwrap()
            .1;
        assert_eq!(intent["argv"][3], arg, "{ex}");
        // Verify reads the same log: nothing raw in its report either.
        let verify = w.garuda(&["audit", "verify"]);
        assert_nothing_hidden(ex, &text(&verify.stdout));

        // Negative control: the log line on disk holds the override, the CSI and DEL raw (JSON
        // escapes only C0 controls), so printing the event's JSON as it is would send them.
        let dir = std::fs::read_dir(w.home.join(".garuda/audit"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let log: Vec<u8> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && !p.ends_with("index.jsonl"))
            .flat_map(|p| std::fs::read(p).unwrap())
            .collect();
        let log = String::from_utf8(log).unwrap();
        assert!(
            log.contains('\u{202e}') && log.contains('\u{9b}') && log.contains('\x7f'),
            "{ex}: the log does not hold the raw characters"
        );
    }
}

#[test]
fn a_program_name_is_printed_visibly_when_it_cannot_be_executed() {
    let name = "no-such\ngaruda: applied: 1 file written\x1b[2K";
    for ex in SANDBOXES {
        let w = world();
        let out = w.sandbox(ex, &[], &[name]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{ex}: {err}");
        assert_eq!(
            err,
            "garuda: cannot execute no-such\\ngaruda: applied: 1 file written\\e[2K: No such file or directory (os error 2)\n",
            "{ex}"
        );
        // Negative control: the name printed as it is adds a line that reads as Garuda's.
        let raw = format!(
            "garuda: cannot execute {}: x\n",
            std::ffi::OsStr::from_bytes(name.as_bytes()).to_string_lossy()
        );
        assert!(raw
            .lines()
            .any(|l| l.starts_with("garuda: applied: 1 file written")));
    }
}

#[test]
fn a_project_settings_value_is_printed_visibly_by_garuda_policy() {
    // A cloned repository's settings choose their rules and paths: a path with a newline that
    // forges the last line of `garuda policy`, a rule with a right-to-left override.
    let forged = "executor in use: none";
    let path = format!("/etc/a\n{forged}");
    let rule = "Read(x \u{202e}evil)";
    let w = world();
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    let settings = serde_json::json!({
        "permissions": {"deny": [rule]},
        "sandbox": {"unreadable": [path]},
    });
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        settings.to_string(),
    )
    .unwrap();

    let out = w.garuda(&["policy"]);
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        shown.contains("  /etc/a\\nexecutor in use: none  "),
        "{shown}"
    );
    assert!(shown.contains("  read_file(x \\u{202e}evil)  "), "{shown}");
    assert_eq!(
        shown
            .lines()
            .filter(|l| l.starts_with("executor in use:"))
            .count(),
        1,
        "a forged line: {shown}"
    );
    assert_nothing_hidden("policy", &shown);
    // `decide` quotes the rule (and the target) too.
    let decide = w.garuda(&["policy", "decide", "read_file", "x \u{202e}evil"]);
    let decided = text(&decide.stdout);
    assert_eq!(
        decided,
        format!(
            "deny (deny rule): a deny rule matches x \\u{{202e}}evil\n  rule read_file(x \\u{{202e}}evil) from project {}:1\n",
            w.project.join(".garuda/settings.json").display()
        ),
        "{}",
        text(&decide.stderr)
    );
    assert_nothing_hidden("decide", &decided);

    // Negative control: the policy as garuda loaded it (its JSON form, parsed back) holds the
    // raw newline and override, and printed as it is the path forges the last line.
    let json = w.garuda(&["policy", "--json"]);
    assert_nothing_hidden("policy --json", &text(&json.stdout));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let values: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert!(values.contains(&path.as_str()), "{values:?}");
    assert!(values.contains(&"read_file(x \u{202e}evil)"), "{values:?}");
    let raw = format!("sandbox.unreadable  {path}  project\n");
    assert!(raw.lines().any(|l| l.starts_with(forged)));
}
