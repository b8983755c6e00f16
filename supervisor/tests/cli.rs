//! End-to-end tests of the `garuda` binary: `garuda sandbox` and `garuda doctor`.
//!
//! Each test makes a fake home (with a fake SSH key) and a project *outside* `/tmp` — every
//! Linux executor gives the command a private `/tmp`, so a secret under `/tmp` would be
//! invisible for the wrong reason — and runs the real binary with `HOME` pointing there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{base_dir, garuda, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nfake-key-material\n";

struct World {
    _base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

/// A base folder outside /tmp that the running user owns: under the real home.
fn world() -> World {
    let base = base_dir("garuda-cli-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), KEY).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::write(project.join("README"), "hello\n").unwrap();
    World {
        home,
        project,
        _base: base,
    }
}

fn sandbox(w: &World, args: &[&str], cmd: &[&str]) -> Output {
    Command::new(garuda())
        .arg("sandbox")
        .args(args)
        .arg("--project")
        .arg(&w.project)
        .arg("--")
        .args(cmd)
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .output()
        .unwrap()
}

#[test]
fn ssh_key_unreadable_in_every_sandbox_but_printed_by_host() {
    let w = world();
    let cat = ["sh", "-c", "cat ~/.ssh/id_ed25519"];
    for executor in ["auto", "landlock", "bubblewrap"] {
        let out = sandbox(&w, &["--executor", executor], &cat);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{executor}: {err}");
        assert!(
            !text(&out.stdout).contains("fake-key-material"),
            "{executor}"
        );
        // Exactly EACCES: the key exists and is covered by a mode-000 mount (ENOENT would
        // mean the key was missing, which proves nothing).
        assert_eq!(
            err,
            format!(
                "cat: {}: Permission denied\n",
                w.home.join(".ssh/id_ed25519").display()
            ),
            "{executor}"
        );
    }
    // Negative control: without a sandbox the same command prints the key.
    let out = sandbox(&w, &["--executor", "host"], &cat);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), KEY);
    assert!(text(&out.stderr).contains("host executor: commands run with your full rights"));
}

#[test]
fn exit_code_and_streams_pass_through() {
    let w = world();
    for executor in ["landlock", "bubblewrap", "host"] {
        let out = sandbox(
            &w,
            &["--executor", executor],
            &["sh", "-c", "echo out; echo err >&2; exit 7"],
        );
        assert_eq!(out.status.code(), Some(7), "{executor}");
        assert_eq!(text(&out.stdout), "out\n", "{executor}");
        assert!(text(&out.stderr).ends_with("err\n"), "{executor}");
    }
}

#[test]
fn stdin_is_passed() {
    let w = world();
    for executor in ["landlock", "bubblewrap"] {
        let mut child = Command::new(garuda())
            .args(["sandbox", "--executor", executor, "--project"])
            .arg(&w.project)
            .args(["--", "tr", "a-z", "A-Z"])
            .env("HOME", &w.home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"garuda\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(text(&out.stdout), "GARUDA\n", "{executor}");
    }
}

#[test]
fn project_is_writable_home_is_not() {
    let w = world();
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(
            &w,
            &["--executor", executor],
            &["sh", "-c", "echo new > made.txt && touch ~/evil"],
        );
        assert_eq!(out.status.code(), Some(1), "{executor}");
        assert!(
            text(&out.stderr).contains("Read-only file system"),
            "{executor}"
        );
        assert_eq!(
            std::fs::read_to_string(w.project.join("made.txt")).unwrap(),
            "new\n"
        );
        assert!(!w.home.join("evil").exists(), "{executor}");
        std::fs::remove_file(w.project.join("made.txt")).unwrap();
    }
}

#[test]
fn missing_program_is_127_not_a_setup_failure() {
    let w = world();
    for executor in ["landlock", "bubblewrap", "host"] {
        let out = sandbox(&w, &["--executor", executor], &["no-such-program-garuda"]);
        assert_eq!(
            out.status.code(),
            Some(127),
            "{executor}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn broken_project_settings_stop_with_125_and_the_place() {
    let w = world();
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        "{\n  \"executor\": \"landlock\",\n  \"surprise\": 1\n}\n",
    )
    .unwrap();
    let marker = w.project.join("ran");
    let out = sandbox(&w, &[], &["touch", marker.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(err.contains("settings.json"), "{err}");
    assert!(err.contains(":3:"), "line number missing: {err}");
    assert!(err.contains("surprise"), "{err}");
    assert!(
        !marker.exists(),
        "the command must not run when the policy is broken"
    );
}

#[test]
fn project_cannot_select_the_host_executor() {
    let w = world();
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        "{\"executor\": \"host\"}",
    )
    .unwrap();
    let out = sandbox(&w, &[], &["true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
}

#[test]
fn capture_mode_caps_output_with_a_marker() {
    let w = world();
    for executor in ["landlock", "bubblewrap", "host"] {
        let out = sandbox(
            &w,
            &["--executor", executor, "--capture"],
            &["head", "-c", "3000000", "/dev/zero"],
        );
        assert_eq!(out.status.code(), Some(0), "{executor}");
        let kept = 256 * 1024;
        assert!(
            out.stdout.len() < kept + 200,
            "{executor}: {}",
            out.stdout.len()
        );
        assert!(
            text(&out.stdout[kept..]).contains("output truncated: 2737856 more bytes"),
            "{executor}"
        );
    }
}

#[test]
fn timeout_kills_the_command() {
    let w = world();
    for executor in ["landlock", "bubblewrap"] {
        let start = std::time::Instant::now();
        let out = sandbox(
            &w,
            &["--executor", executor, "--timeout", "1"],
            &["sleep", "30"],
        );
        assert_eq!(out.status.code(), Some(124), "{executor}");
        assert!(start.elapsed().as_secs() < 10, "{executor}");
    }
}

#[test]
fn doctor_reports_both_linux_executors_and_the_landlock_abi() {
    let out = Command::new(garuda())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let available = |kind: &str| {
        v["executors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == kind && p["available"] == true)
    };
    assert!(available("landlock"), "{v}");
    assert!(available("bubblewrap"), "{v}");
    assert!(v["landlock_abi"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(v["auto"], "landlock");
    let human = Command::new(garuda()).arg("doctor").output().unwrap();
    assert!(text(&human.stdout).contains("Landlock ABI"));
}

#[test]
fn project_defaults_to_the_git_root() {
    let w = world();
    let sub = w.project.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let out = Command::new(garuda())
        .args(["sandbox", "--", "sh", "-c", "pwd; echo x > ../../at-root"])
        .current_dir(&sub)
        .env("HOME", &w.home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        sub.canonicalize().unwrap().to_str().unwrap()
    );
    assert!(Path::new(&w.project.join("at-root")).exists());
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The machine's secrets are unreadable in the sandbox, for every user, root included.
///
/// For every user: inside the sandbox `/etc/shadow` is the empty mode-000 placeholder, not the
/// host's file (the host executor shows the host's mode and size). That is what proves the mask
/// for a non-root user, for whom file permissions already refuse the content on the host.
/// As root, also the content: refused inside, read by the host executor. (As another user that
/// part would show nothing: the host refuses it too.)
#[test]
fn machine_secrets_are_unreadable_even_for_root() {
    use std::os::unix::fs::MetadataExt;
    let w = world();
    let host = std::fs::metadata("/etc/shadow").expect("/etc/shadow exists on this machine");
    let on_host = format!("{:o} {}\n", host.mode() & 0o7777, host.size());
    assert_ne!(
        on_host, "0 0\n",
        "the host's /etc/shadow must differ from the mask"
    );
    let stat = ["stat", "-c", "%a %s", "/etc/shadow"];
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(&w, &["--executor", executor], &stat);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{executor}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "0 0\n", "{executor}");
    }
    // Negative control: the host executor sees the host's file.
    let out = sandbox(&w, &["--executor", "host"], &stat);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), on_host);
    if !is_root() {
        return;
    }
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(&w, &["--executor", executor], &["cat", "/etc/shadow"]);
        assert_eq!(out.status.code(), Some(1), "{executor}");
        assert!(out.stdout.is_empty(), "{executor}");
        assert_eq!(
            text(&out.stderr),
            "cat: /etc/shadow: Permission denied\n",
            "{executor}"
        );
    }
    // Negative control: the host executor, run by root, reads it.
    let out = sandbox(&w, &["--executor", "host"], &["cat", "/etc/shadow"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("root:"));
}

#[test]
fn a_project_cannot_pick_a_weaker_sandbox_than_auto() {
    let w = world();
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    let settings = w.project.join(".garuda/settings.json");
    std::fs::write(&settings, "{\"executor\": \"bubblewrap\"}").unwrap();
    let out = sandbox(&w, &[], &["true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("weaker than landlock"),
        "{}",
        text(&out.stderr)
    );
    // Naming the strongest one is fine (it only removes the fallback).
    std::fs::write(&settings, "{\"executor\": \"landlock\"}").unwrap();
    let out = sandbox(&w, &[], &["true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn inherited_descriptors_do_not_reach_the_command() {
    let w = world();
    let outside = w.home.join("outside.txt");
    // The shell opens fd 7 without close-on-exec and runs garuda with it; the command then
    // tries to write through it.
    let script = format!(
        "exec 7>>'{}'; exec \"$0\" sandbox --executor \"$1\" --project \"$2\" -- sh -c 'echo leaked >&7'",
        outside.display()
    );
    for executor in ["landlock", "bubblewrap"] {
        let out = Command::new("/bin/sh")
            .args(["-c", &script])
            .arg(garuda())
            .arg(executor)
            .arg(&w.project)
            .env("HOME", &w.home)
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{executor}");
        assert!(
            text(&out.stderr).contains("Bad file descriptor"),
            "{executor}: {}",
            text(&out.stderr)
        );
        assert!(!std::fs::read_to_string(&outside)
            .unwrap_or_default()
            .contains("leaked"));
    }
    // Negative control: the host executor passes the descriptor on.
    let out = Command::new("/bin/sh")
        .args(["-c", &script])
        .arg(garuda())
        .arg("host")
        .arg(&w.project)
        .env("HOME", &w.home)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&outside)
        .unwrap()
        .contains("leaked"));
}

/// A `commondir` would send the host's git to a config and hooks of the command's choosing.
/// The whole `.git` is read-only now, so a command cannot create one (before, it could, and a
/// guard removed it afterwards). The control: the host executor creates it.
#[test]
fn a_command_cannot_create_a_commondir() {
    let script = "echo ../../evil > .git/commondir && cat .git/commondir";
    for executor in ["landlock", "bubblewrap"] {
        let w = world();
        let out = sandbox(&w, &["--executor", executor], &["sh", "-c", script]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{executor}: {err}");
        assert!(err.contains("Read-only file system"), "{executor}: {err}");
        assert!(
            !w.project.join(".git/commondir").exists(),
            "{executor}: commondir created"
        );
    }
    let w = world();
    let out = sandbox(&w, &["--executor", "host"], &["sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "../../evil\n");
    assert!(w.project.join(".git/commondir").exists());
}

/// Both Linux executors' network and user namespaces are made ahead by a helper
/// (`executor::ahead`), and each `garuda sandbox` run gets its own: the audit log's
/// `command_result` says they were made ahead (so the test cannot pass on the other path),
/// the network namespace is never the host's nor an earlier run's, and the helper's resolver
/// stub answers in it (the network-off hint; loopback servers are
/// `netbridge::the_commands_own_loopback_servers_are_reached_directly`). Namespaces are told
/// apart by their `SO_NETNS_COOKIE`, which the kernel gives each network namespace once (an
/// inode number is reused once freed). Control: two sockets in one run report the same
/// cookie, so the probe does see sameness.
#[test]
fn each_run_gets_namespaces_of_its_own_made_ahead() {
    let w = world();
    const COOKIE: &str = "import socket\nfor _ in range(2):\n    s = socket.socket()\n    print(int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 71, 8), 'little'))\n";
    let host = Command::new("python3")
        .args(["-c", COOKIE])
        .output()
        .unwrap();
    let host_cookie = text(&host.stdout).lines().next().unwrap().to_string();
    let probe = [
        "sh",
        "-c",
        "python3 -c \"$1\"; getent hosts ahead.invalid; echo lookup $?",
        "sh",
        COOKIE,
    ];
    let mut seen = vec![host_cookie];
    for executor in ["landlock", "bubblewrap", "landlock", "bubblewrap"] {
        let out = sandbox(&w, &["--executor", executor], &probe);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{executor}: {stdout}{}",
            text(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        // The control: one namespace, asked twice, gives one cookie.
        assert_eq!(lines[0], lines[1], "{executor}: {stdout}");
        assert!(
            !seen.iter().any(|c| c == lines[0]),
            "{executor}: {} is the host's or an earlier run's: {seen:?}",
            lines[0]
        );
        seen.push(lines[0].to_string());
        // The stub, bound by the helper, refused the lookup and recorded it.
        assert_eq!(lines.last(), Some(&"lookup 2"), "{executor}: {stdout}");
        assert!(
            text(&out.stderr).contains("tried to look up ahead.invalid"),
            "{executor}: {}",
            text(&out.stderr)
        );
        let result = newest_command_result(&w);
        assert_eq!(
            result["namespaces_made_ahead"], true,
            "{executor}: {result}"
        );
    }
    // Not through the proxy: the helper's namespace has the stub's addresses on `lo` and its
    // sockets bound, and there a lookup would wait for an answer that never comes (the first
    // build took them in proxy mode too). (The sandbox that makes its own namespaces is the
    // executors' own tests': `Executor::run` called directly prepares nothing.)
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(
            &w,
            &["--executor", executor, "--allow-host", "example.invalid"],
            &["true"],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{executor}: {}",
            text(&out.stderr)
        );
        let result = newest_command_result(&w);
        assert_eq!(
            result["namespaces_made_ahead"], false,
            "{executor}: {result}"
        );
    }
}

/// The CPUs a command may run on are the supervisor's: landlock's outer is moved off the
/// supervisor's CPU (so that it builds the sandbox beside the supervisor's own work), and the
/// command takes the supervisor's CPUs back before its program starts. Control: the sandbox's
/// PID 1, a child of the moved outer, keeps outer's narrower set (on a machine with more than
/// one CPU, in at least one of up to twenty runs: the move races outer's clone of PID 1).
#[test]
fn a_command_runs_on_the_supervisors_cpus() {
    fn allowed(status: &str) -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status}"))
            .trim()
            .to_string()
    }
    let w = world();
    // `garuda` inherits this thread's set (a fork copies the forking thread's).
    let ours = allowed(&std::fs::read_to_string("/proc/thread-self/status").unwrap());
    let several = ours.contains(['-', ',']);
    let probe = [
        "sh",
        "-c",
        "cat /proc/self/status; echo ===; cat /proc/1/status",
    ];
    let mut pid1_moved = false;
    for _ in 0..20 {
        for executor in ["landlock", "bubblewrap"] {
            let out = sandbox(&w, &["--executor", executor], &probe);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{executor}: {}",
                text(&out.stderr)
            );
            let stdout = text(&out.stdout);
            let (command, pid1) = stdout.split_once("===").unwrap();
            assert_eq!(allowed(command), ours, "{executor}: the command's CPUs");
            if executor == "landlock" && allowed(pid1) != ours {
                pid1_moved = true;
            }
        }
        if pid1_moved || !several {
            break;
        }
    }
    assert_eq!(
        pid1_moved, several,
        "PID 1 moved with outer iff there is another CPU ({ours})"
    );
}

/// A sandbox whose end is told early (landlock's outer reports it before its exit, bwrap's
/// monitor writes the exit code before its own; docs/executors.md, "The end told early") is
/// still reaped by `garuda` before it exits, and nothing the command left running survives:
/// run under a child subreaper, `garuda` leaves it no orphan, not even a zombie. Control: the
/// host executor's background process, killed with the command's group but not `garuda`'s
/// child, is left to the subreaper, so the probe does see what is left behind.
#[test]
fn nothing_of_a_sandbox_is_left_when_garuda_exits() {
    const UNDER_A_SUBREAPER: &str = r#"
import ctypes, os, subprocess, sys, time
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
    sys.exit("PR_SET_CHILD_SUBREAPER failed")
code = subprocess.run(sys.argv[1:]).returncode
time.sleep(0.3)
left = 0
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        left += 1000
        break
    left += 1
print(f"exit {code} left {left}")
"#;
    let w = world();
    let run = |executor: &str| {
        let out = Command::new("python3")
            .args(["-c", UNDER_A_SUBREAPER])
            .arg(garuda())
            .args(["sandbox", "--executor", executor, "--project"])
            .arg(&w.project)
            .args(["--", "sh", "-c", "sleep 0.1 & exit 7"])
            .current_dir(&w.project)
            .env("HOME", &w.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap();
        assert!(out.status.success(), "{executor}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    for executor in ["landlock", "bubblewrap"] {
        assert_eq!(run(executor), "exit 7 left 0", "{executor}");
    }
    assert_eq!(run("host"), "exit 7 left 1", "the control");
}

/// The end told early comes only once the command has ended: a command that closes its
/// stdio and goes on still finishes its work before `garuda` returns, and its own exit code
/// is the run's. (Mutation-checked: outer telling its end before it reaps PID 1 made `garuda`
/// return while the command still ran.)
#[test]
fn the_end_is_told_only_after_the_command() {
    let w = world();
    for executor in ["landlock", "bubblewrap"] {
        let marker = w.project.join(format!("done-{executor}"));
        let script = "exec 0<&- 1>&- 2>&-; sleep 0.3; echo done > \"$0\"; exit 5";
        let out = sandbox(
            &w,
            &["--executor", executor],
            &["sh", "-c", script, marker.to_str().unwrap()],
        );
        assert_eq!(
            out.status.code(),
            Some(5),
            "{executor}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            std::fs::read_to_string(&marker).ok().as_deref(),
            Some("done\n"),
            "{executor}: the command's work is done when garuda returns"
        );
    }
}

/// The newest audit session's `command_result` event.
fn newest_command_result(w: &World) -> serde_json::Value {
    let shown = Command::new(garuda())
        .args(["audit", "show", "--json", "--project"])
        .arg(&w.project)
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let v: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["type"] == "command_result")
        .map(|l| l["event"].clone())
        .unwrap()
}
