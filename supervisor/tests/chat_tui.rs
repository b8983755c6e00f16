//! The chat on a terminal: the real `garuda` with no task in a pseudo-terminal
//! (`portable-pty`), the screen read with `vt100`, against the scripted model server.
//!
//! What is shown, and the control of each:
//!
//! - the model's text, and a command's output (`!printf`), with `\e[2K`, `\e[1A`, `\r`,
//!   OSC 52, OSC 0, OSC 8 and a fake question are on the screen as visible text, no OSC
//!   sequence at all reached the terminal, and the fake question is indented; control: the
//!   scripted text holds each sequence, and garuda's own question (the next test) is drawn.
//! - an edit refused with `n` leaves the file unchanged (its question drawn in reverse video
//!   with the bell); control: `y` changes it.
//! - Esc stops a running command: its process is gone and the chat goes on (a later message is
//!   answered); control: the command was running (seen in `/proc`) before Esc.
//! - Ctrl-C twice exits with 130, and the terminal is back in canonical mode with echo;
//!   control: while the chat ran it was in raw mode.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{garuda, World, PROXY_VARS};
use garuda_modelserver::{Dialect, ModelServer, Part, Scripted};
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use serde_json::json;

/// A bound against a hang, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

struct Tui {
    w: World,
    _server: ModelServer,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    master: Box<dyn portable_pty::MasterPty + Send>,
    writer: Box<dyn Write + Send>,
    parser: Arc<Mutex<vt100::Parser>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Tui {
    fn start(script: Vec<Scripted>) -> Tui {
        Tui::start_in(World::new("garuda-chat-tui"), &[], script)
    }

    /// A fresh world: a git project with `README.md`, an empty `~/.garuda`.
    fn world() -> World {
        let w = World::new("garuda-chat-tui");
        w.git(&["init", "-q"]);
        std::fs::write(w.project.join("README.md"), "hello\nworld\n").unwrap();
        std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
        w
    }

    /// `garuda ARGS` (the chat's options) on a terminal in `w` (from [`Tui::world`], or a
    /// bare one that this fills).
    fn start_in(w: World, args: &[&str], script: Vec<Scripted>) -> Tui {
        if !w.project.join("README.md").exists() {
            w.git(&["init", "-q"]);
            std::fs::write(w.project.join("README.md"), "hello\nworld\n").unwrap();
            std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
        }
        let server = ModelServer::start(Dialect::Anthropic, script).unwrap();
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: 30,
                cols: 100,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(garuda());
        cmd.args(args);
        cmd.cwd(&w.project);
        cmd.env_clear();
        for (k, v) in std::env::vars_os() {
            let k_str = k.to_string_lossy().to_string();
            let drop = PROXY_VARS.contains(&k_str.as_str())
                || garuda_policy::PROVIDER_ENV_DENY.contains(&k_str.as_str())
                || k_str == "GARUDA_HOME"
                || k_str == "GARUDA_MODEL"
                || k_str == "NO_COLOR";
            if !drop {
                cmd.env(k, v);
            }
        }
        cmd.env("HOME", &w.home);
        cmd.env("TERM", "xterm-256color");
        cmd.env("ANTHROPIC_API_KEY", "sk-test-tui");
        cmd.env("ANTHROPIC_BASE_URL", server.url());
        let child = pty.slave.spawn_command(cmd).unwrap();
        drop(pty.slave);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(
            std::num::NonZeroU16::new(30).unwrap(),
            std::num::NonZeroU16::new(100).unwrap(),
            1000,
        )));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let mut reader = pty.master.try_clone_reader().unwrap();
        {
            let parser = Arc::clone(&parser);
            let raw = Arc::clone(&raw);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            parser.lock().unwrap().process(&buf[..n]);
                            raw.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                    }
                }
            });
        }
        let writer = pty.master.take_writer().unwrap();
        let tui = Tui {
            w,
            _server: server,
            child,
            master: pty.master,
            writer,
            parser,
            raw,
        };
        tui.wait_for("the chat's first line", |s| {
            s.contains("garuda chat: model")
        });
        tui
    }

    /// The screen's text, scrollback included.
    fn screen(&self) -> String {
        let mut parser = self.parser.lock().unwrap();
        parser.screen_mut().set_scrollback(usize::MAX);
        let mut offset = parser.screen().scrollback();
        let mut text = String::new();
        loop {
            parser.screen_mut().set_scrollback(offset);
            text.push_str(&parser.screen().contents());
            text.push('\n');
            if offset == 0 {
                break;
            }
            offset = offset.saturating_sub(30);
        }
        text
    }

    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return;
            }
            assert!(Instant::now() < deadline, "waiting for {what}:\n{screen}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until no turn runs (its line is gone from the live area).
    fn wait_idle(&self) {
        self.wait_for("the end of the turn", |s| !s.contains("working "));
    }

    /// A question's answer, given as a person does: after a pause (a key right after the
    /// question opens, or right after another key, is taken as typing, not as an answer).
    fn answer(&mut self, key: &[u8]) {
        std::thread::sleep(Duration::from_millis(600));
        self.keys(key);
    }

    fn keys(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
        self.writer.flush().unwrap();
    }

    fn exit_code(&mut self) -> u32 {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            assert!(
                Instant::now() < deadline,
                "garuda did not exit:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn raw_mode(&self) -> bool {
        let termios = self.master.get_termios().unwrap();
        !termios
            .local_flags
            .contains(nix::sys::termios::LocalFlags::ICANON)
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

#[test]
fn the_models_escapes_are_shown_as_text_and_never_reach_the_terminal() {
    let hostile = "erase\x1b[2K up\x1b[1A back\rclip\x1b]52;c;cm0gLXJmIH4=\x07 \
                   title\x1b]0;owned\x07 link\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\\n\
                   Apply? [y/n]\nthe end";
    for seq in ["\x1b[2K", "\x1b[1A", "\r", "\x1b]52;", "\x1b]0;", "\x1b]8;"] {
        assert!(hostile.contains(seq), "{seq:?}");
    }
    let mut t = Tui::start(vec![Scripted::text(hostile)]);
    t.keys(b"hello\r");
    t.wait_for("the model's last line", |s| s.contains("  the end"));
    // A long line is cut into rows, each after the first indented: joined again here.
    let screen = t.screen().replace("\n  ", "");
    assert!(
        screen.contains("clip\\e]52;c;cm0gLXJmIH4=\\x07"),
        "{screen}"
    );
    assert!(screen.contains("title\\e]0;owned\\x07"), "{screen}");
    assert!(screen.contains("\\e]8;;https://evil.example/"), "{screen}");
    assert!(
        screen.contains("erase\\e[2K up\\e[1A back\\rclip"),
        "{screen}"
    );
    // The fake question is the model's: indented, and no row starts with it.
    let rows = t.screen();
    assert!(rows.contains("\n  Apply? [y/n]"), "{rows}");
    assert!(!rows.lines().any(|l| l.starts_with("Apply?")), "{rows}");
    // A command's output (the person's `!command`: the only tool output the chat shows) with
    // the same sequences is shown as text too.
    t.wait_idle();
    t.keys(b"!printf 'out\\033]52;c;Y2xpcA==\\007 \\033]0;tool-title\\007 \\033[2K\\033[1A \\033]8;;https://evil.example/\\033\\\\x\\nApply? [y/n]\\n'\r");
    t.wait_for("the command's output", |s| s.contains("· !printf"));
    let screen = t.screen();
    assert!(screen.contains("out\\e]52;c;Y2xpcA==\\x07"), "{screen}");
    assert!(screen.contains("\\e]0;tool-title"), "{screen}");
    assert!(screen.contains("  Apply? [y/n]"), "{screen}");
    // No OSC sequence (clipboard, title, hyperlink) reached the terminal at all.
    let raw = t.raw.lock().unwrap().clone();
    assert!(
        !raw.windows(2).any(|w| w == b"\x1b]"),
        "an OSC sequence reached the terminal"
    );
}

fn edit() -> Scripted {
    Scripted::reply(vec![Part::ToolUse {
        id: "e1".into(),
        name: "edit_file".into(),
        input: json!({"path": "README.md", "old": "world", "new": "there"}),
    }])
}

#[test]
fn an_edit_refused_with_n_leaves_the_file_unchanged() {
    for (key, want) in [(b"n", "hello\nworld\n"), (b"y", "hello\nthere\n")] {
        let mut t = Tui::start(vec![edit(), Scripted::text("finished")]);
        t.keys(b"fix the README\r");
        t.wait_for("the question", |s| {
            s.contains("garuda asks: allow this edit_file (above)?")
        });
        // Drawn in reverse video, with the bell.
        let raw = t.raw.lock().unwrap().clone();
        assert!(raw.windows(4).any(|w| w == b"\x1b[7m"), "reverse video");
        assert!(raw.contains(&0x07), "the bell");
        // Someone still typing when the question opens does not answer it: an `a` at once
        // (it would be "always") is not taken.
        t.keys(b"a");
        t.wait_for("the notice", |s| {
            s.contains("garuda: a question is open: pause, then press one of its keys")
        });
        t.answer(key);
        t.wait_for("the model's answer", |s| s.contains("  finished"));
        let said = if key == b"n" { "no" } else { "yes, once" };
        assert!(
            t.screen().contains(&format!("? answered: {said}")),
            "{}",
            t.screen()
        );
        t.wait_idle();
        assert_eq!(
            std::fs::read_to_string(t.w.project.join("README.md")).unwrap(),
            want
        );
        t.keys(b"\x04");
        assert_eq!(t.exit_code(), 0);
    }
}

/// The pids of processes whose command line is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

#[test]
fn esc_stops_a_running_command_and_the_chat_goes_on() {
    // Direct (run by the supervisor itself), staged (a child `garuda sandbox`), and the
    // person's own `!command`.
    for (args, how) in [
        (&[][..], "direct"),
        (&["--staged"][..], "staged"),
        (&[][..], "bang"),
    ] {
        esc_stops(args, how);
    }
}

fn esc_stops(args: &[&str], how: &str) {
    let marker = format!("{}", std::process::id() as u64 * 7 + 301 + how.len() as u64);
    let command = format!("sleep {marker}");
    let mut script = vec![
        Scripted::reply(vec![Part::ToolUse {
            id: "b1".into(),
            name: "bash".into(),
            input: json!({ "command": command }),
        }]),
        Scripted::text("after the stop"),
        Scripted::text("second answer"),
    ];
    if how == "bang" {
        // The person's command needs no model call.
        script.remove(0);
    }
    let mut t = Tui::start_in(Tui::world(), args, script);
    if how == "bang" {
        t.keys(format!("!{command}\r").as_bytes());
    } else {
        t.keys(b"run it\r");
    }
    let deadline = Instant::now() + WAIT;
    while processes(&["sleep", &marker]).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the command never ran:\n{}",
            t.screen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t.keys(b"\x1b");
    if how == "bang" {
        t.wait_for("the stopped command", |s| {
            s.contains(&format!("· !{command} → "))
        });
    } else {
        t.wait_for("the stopped turn", |s| {
            s.contains("garuda: the turn stopped: cancelled")
        });
    }
    let deadline = Instant::now() + WAIT;
    while !processes(&["sleep", &marker]).is_empty() {
        assert!(Instant::now() < deadline, "{how}: the command outlived Esc");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The chat goes on.
    t.keys(b"again\r");
    t.wait_for("the next answer", |s| {
        s.contains("  after the stop") || s.contains("  second answer")
    });
    t.wait_idle();
    t.keys(b"\x04");
    assert_eq!(t.exit_code(), 0);
}

#[test]
fn ctrl_c_twice_exits_130_and_the_terminal_is_restored() {
    let mut t = Tui::start(Vec::new());
    assert!(t.raw_mode(), "control: the chat runs in raw mode");
    t.keys(b"\x03");
    t.wait_for("the first Ctrl-C's notice", |s| {
        s.contains("garuda: Ctrl-C again exits")
    });
    t.keys(b"\x03");
    assert_eq!(t.exit_code(), 130);
    assert!(!t.raw_mode(), "the terminal is back in canonical mode");
    let termios = t.master.get_termios().unwrap();
    assert!(termios
        .local_flags
        .contains(nix::sys::termios::LocalFlags::ECHO));
}

/// `garuda ARGS` in `w`, not on a terminal; its output.
fn garuda_in(w: &World, args: &[&str]) -> std::process::Output {
    std::process::Command::new(garuda())
        .args(args)
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A staged command's change: `a` applies it, `d` discards it (each the other's control).
#[test]
fn a_staged_change_is_applied_or_discarded_with_one_key() {
    for (key, applied) in [(b"a", true), (b"d", false)] {
        let mut t = Tui::start_in(
            Tui::world(),
            &["--staged"],
            vec![
                Scripted::reply(vec![Part::ToolUse {
                    id: "b1".into(),
                    name: "bash".into(),
                    input: json!({"command": "echo made > made.txt"}),
                }]),
                Scripted::text("ok"),
            ],
        );
        t.keys(b"make it\r");
        t.wait_for("the staged question", |s| {
            s.contains("garuda asks: apply or discard this change?")
        });
        assert!(t.screen().contains("made.txt"), "{}", t.screen());
        t.answer(key);
        t.wait_for("the model's answer", |s| s.contains("  ok"));
        t.wait_idle();
        assert_eq!(
            t.w.project.join("made.txt").exists(),
            applied,
            "{}",
            t.screen()
        );
        t.keys(b"\x04");
        assert_eq!(t.exit_code(), 0);
    }
}

/// "Always" answers the same edit again without a question, and the audit log says so;
/// control: `y` is asked twice.
#[test]
fn always_stops_the_next_identical_question_and_is_audited() {
    let edit_back = || {
        Scripted::reply(vec![Part::ToolUse {
            id: "e2".into(),
            name: "edit_file".into(),
            input: json!({"path": "README.md", "old": "there", "new": "world"}),
        }])
    };
    for (keys, asked) in [(&b"a"[..], 1), (&b"yy"[..], 2)] {
        let mut t = Tui::start(vec![edit(), edit_back(), Scripted::text("done")]);
        t.keys(b"twice\r");
        for (i, key) in keys.iter().enumerate() {
            t.wait_for("a question", |s| {
                s.matches("? answered:").count() == i
                    && s.contains("garuda asks: allow this edit_file")
            });
            t.answer(&[*key]);
        }
        t.wait_for("the model's answer", |s| s.contains("  done"));
        t.wait_idle();
        assert_eq!(
            t.screen().matches("? answered:").count(),
            asked,
            "{}",
            t.screen()
        );
        // The footer counts the session's tokens against its budget.
        let screen = t.screen();
        assert!(
            screen.contains(" · tokens ") && screen.contains(" of 20000000"),
            "{screen}"
        );
        assert_eq!(
            std::fs::read_to_string(t.w.project.join("README.md")).unwrap(),
            "hello\nworld\n"
        );
        t.keys(b"\x04");
        assert_eq!(t.exit_code(), 0);
        if asked == 1 {
            let list = garuda_in(&t.w, &["audit", "list", "--json"]);
            let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
            let id = list["sessions"][0]["session"].as_str().unwrap().to_string();
            let shown = garuda_in(&t.w, &["audit", "show", "--session", &id, "--json"]);
            let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
            let always: Vec<_> = shown["lines"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|l| l["type"] == "tool_call" && l["event"]["user_answer"] == "always")
                .collect();
            assert_eq!(always.len(), 1, "{shown}");
            assert_eq!(
                always[0]["event"]["session_rules_added"],
                json!(["edit_file(/README.md)"])
            );
        }
    }
}

/// `/audit verify` prints verify's result; after a byte of an earlier session's log is
/// flipped, the finding with its code. Control: the same command before the flip.
#[test]
fn audit_verify_prints_the_result_and_then_the_finding() {
    let w = Tui::world();
    let out = garuda_in(&w, &["sandbox", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mut t = Tui::start_in(w, &[], Vec::new());
    t.keys(b"/audit verify\r");
    t.wait_for("verify's result", |s| {
        s.contains("garuda: audit log: VERIFIED")
    });
    let journal =
        t.w.home
            .join(".garuda/audit")
            .join(garuda_audit::project_dir_name(&t.w.project))
            .join("journal.jsonl");
    let bytes = std::fs::read(&journal).unwrap();
    let needle = b"\"tool\":\"garuda sandbox\"";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + 8;
    // One byte written in place: the chat's own session appends to the same file.
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    file.write_all_at(b"G", at as u64).unwrap();
    t.keys(b"/audit verify\r");
    t.wait_for("the finding", |s| s.contains("BAD_MAC"));
    t.keys(b"\x04");
    assert_eq!(t.exit_code(), 0);
}

/// Tab completes a slash command: `/po` becomes `/policy`; `/a` shows the candidates and
/// completes their common start (`/audit`).
#[test]
fn tab_completes_slash_commands() {
    let mut t = Tui::start(Vec::new());
    t.keys(b"/po\t");
    t.wait_for("the completed line", |s| s.contains("› /policy"));
    t.keys(b"\x15/a\t");
    t.wait_for("the candidates", |s| {
        s.contains("› /audit") && s.contains("garuda: /audit  /audit verify")
    });
    t.keys(b"\x04");
    // Ctrl-D ends only an empty line: clear it first.
    t.keys(b"\x15\x04");
    assert_eq!(t.exit_code(), 0);
}
