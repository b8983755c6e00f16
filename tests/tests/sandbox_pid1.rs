//! The sandbox's PID 1, seen from the command and from the host.
//!
//! `garuda sandbox` runs `garuda-probe pid1 HEX --wait` with a canary variable
//! (`GARUDA_CANARY_SECRET`) in garuda's own environment, the stand-in for a token in the
//! user's environment. The probe gets the canary hex-encoded, so the literal value is in no
//! command line. From inside, the probe reports PID 1's credentials (`/proc/1/status`),
//! whether it can read PID 1's environment and memory (and find the canary there), and whether
//! a signal or `ptrace` reaches PID 1, next to the same attempts on itself and on a child of its
//! own (the controls: the calls work where nothing stands in the way). While the probe waits,
//! the test looks from the host at PID 1 (found by its `NSpid`) and scans its environment and
//! memory for the canary.
//!
//! Negative controls, in the same run:
//! - the garuda process itself holds the canary in its environment and memory, so the scanner
//!   finds it where it is;
//! - `landlock`: `outer`, the parent of PID 1 outside the PID namespace, is the fork of the
//!   supervisor that PID 1 was a copy of before it hardened itself. It still shows what PID 1
//!   showed before: `NoNewPrivs: 0`, `Seccomp: 0`, every capability of the sandbox's user
//!   namespace, and the canary in its environment and memory. It is not reachable from the
//!   sandbox (it has no pid in the sandbox's namespace).
//! - `bubblewrap` (Linux 6.14 and later): the waiter, bwrap's parent, is likewise a fork of
//!   the supervisor holding the canary; it catches none of the signals garuda's forwarding
//!   catches (a copy of that handler would kill whatever pid garuda had registered), while
//!   garuda itself catches them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // helpers shared with the contract suite; this one uses a few
mod util;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use garuda_supervisor::executor::ExecutorKind;
use util::{descendants, Fixture, PROBE};

/// Lines the probe prints before it waits.
const LINES_BEFORE_WAIT: usize = 8;

const CANARY_VAR: &str = "GARUDA_CANARY_SECRET";

const ZERO_CAPS: &str = "0000000000000000";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Field `name` of `/proc/PID/status`.
fn status_field(pid: u32, name: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("/proc/{pid}/status has no {name}"))
}

/// Whether `needle` is in `pid`'s environment; `Err` is the error reading it.
fn environ_holds(pid: u32, needle: &[u8]) -> Result<bool, std::io::Error> {
    let env = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(env.windows(needle.len()).any(|w| w == needle))
}

/// Whether `needle` is in the memory `pid` made itself (`garuda_tests::scan_memory`, shared
/// with the probe); a scan that read nothing would prove nothing.
fn memory_holds(pid: u32, needle: &[u8]) -> Result<bool, std::io::Error> {
    let scan = garuda_tests::scan_memory(&pid.to_string(), needle)?;
    assert!(scan.bytes > 0, "nothing of {pid}'s memory could be read");
    Ok(scan.found)
}

/// The two checks of the canary in `who` (`pid`): in its environment and in its memory, each
/// `want` (found or not); `(what, as expected)`.
fn canary_checks(who: &str, pid: u32, needle: &[u8], want: bool) -> [(String, bool); 2] {
    let env = environ_holds(pid, needle).map_err(|e| e.to_string());
    let mem = memory_holds(pid, needle).map_err(|e| e.to_string());
    [
        (
            format!("{who}'s environment: canary found {env:?}"),
            env == Ok(want),
        ),
        (
            format!("{who}'s memory: canary found {mem:?}"),
            mem == Ok(want),
        ),
    ]
}

/// Run the probe in `kind` through the `garuda` binary and check PID 1 from inside and outside.
fn check(kind: ExecutorKind) {
    let fx = Fixture::new(&format!("pid1-{kind}"));
    let canary = format!(
        "garuda-canary-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let needle = canary.as_bytes();
    let mut child = Command::new(util::garuda_bin().unwrap())
        .args(["sandbox", "--executor", kind.name(), "--timeout"])
        .arg(util::RUN_TIMEOUT.as_secs().to_string())
        .arg("--project")
        .arg(&fx.project)
        .arg("--")
        .args([PROBE, "pid1", &hex(needle), "--wait"])
        .current_dir(&fx.project)
        .env_clear()
        .envs(fx.vars.iter().map(|(k, v)| (k, v)))
        .env(CANARY_VAR, &canary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let garuda = child.id();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut inside: Vec<String> = Vec::new();
    for _ in 0..LINES_BEFORE_WAIT {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        inside.push(line.trim_end().to_string());
    }
    if inside.len() < LINES_BEFORE_WAIT {
        let _ = child.kill();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("{kind}: the probe stopped early: {inside:?}, garuda's stderr {err:?}");
    }

    // From the host, while the probe waits.
    // The command's PID 1: PID 1 of the deepest PID namespace among garuda's descendants
    // (`bubblewrap` runs bwrap as PID 1 of a namespace of the spawn hook's, for the process
    // limit, and bwrap's own namespace, the command's, is nested inside it).
    let tree = descendants(garuda);
    let pid1 = *tree
        .iter()
        .filter(|p| {
            let nspid = status_field(**p, "NSpid");
            let ids: Vec<&str> = nspid.split_whitespace().collect();
            ids.len() > 1 && ids.last() == Some(&"1")
        })
        .max_by_key(|p| status_field(**p, "NSpid").split_whitespace().count())
        .unwrap_or_else(|| panic!("{kind}: no PID 1 among garuda's descendants {tree:?}"));
    let mut failures = Vec::new();
    let mut expect = |what: String, ok: bool| {
        eprintln!(
            "pid1 {kind}: {what}: {}",
            if ok { "as expected" } else { "WRONG" }
        );
        if !ok {
            failures.push(what);
        }
    };
    for (field, want) in [
        ("NoNewPrivs", "1"),
        ("Seccomp", "2"),
        ("CapInh", ZERO_CAPS),
        ("CapPrm", ZERO_CAPS),
        ("CapEff", ZERO_CAPS),
        ("CapBnd", ZERO_CAPS),
        ("CapAmb", ZERO_CAPS),
    ] {
        let got = status_field(pid1, field);
        expect(
            format!("host view of PID 1: {field} {got} (want {want})"),
            got == want,
        );
    }
    for (what, ok) in canary_checks("host view of PID 1", pid1, needle, false) {
        expect(what, ok);
    }
    // Controls: the supervisor itself holds the canary, and the scanner finds it there.
    for (what, ok) in canary_checks("control, garuda", garuda, needle, true) {
        expect(what, ok);
    }
    if kind == ExecutorKind::Landlock {
        // outer: PID 1's parent, the unhardened fork PID 1 was a copy of.
        let outer: u32 = status_field(pid1, "PPid").parse().unwrap();
        expect(
            format!("control, outer ({outer}) is garuda's child"),
            status_field(outer, "PPid") == garuda.to_string(),
        );
        for (field, unhardened) in [
            ("NoNewPrivs", Some("0")),
            ("Seccomp", Some("0")),
            ("CapEff", None),
            ("CapPrm", None),
            ("CapBnd", None),
        ] {
            let got = status_field(outer, field);
            let ok = match unhardened {
                Some(want) => got == want,
                None => got != ZERO_CAPS,
            };
            expect(format!("control, outer's {field} {got} (unhardened)"), ok);
        }
        for (what, ok) in canary_checks("control, outer", outer, needle, true) {
            expect(what, ok);
        }
    }
    // (Where `pid_max` is per PID namespace: elsewhere bwrap is garuda's child itself.)
    if kind == ExecutorKind::Bubblewrap
        && garuda_supervisor::executor::pidns::pid_max_is_namespaced()
    {
        // bwrap is PID 1 of the spawn hook's PID namespace (PID 1's parent); its parent, the
        // process `std` spawned, is a fork of garuda that waits for bwrap and never executes
        // anything: a copy of garuda's signal forwarding handler must not run there.
        let bwrap: u32 = status_field(pid1, "PPid").parse().unwrap();
        let waiter: u32 = status_field(bwrap, "PPid").parse().unwrap();
        expect(
            format!("waiter ({waiter}), bwrap's parent, is garuda's child"),
            status_field(waiter, "PPid") == garuda.to_string(),
        );
        let mask =
            |pid: u32, field: &str| u64::from_str_radix(&status_field(pid, field), 16).unwrap();
        let this = std::process::id();
        for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
            let bit = 1u64 << (signal - 1);
            expect(
                format!("waiter does not catch signal {signal}"),
                mask(waiter, "SigCgt") & bit == 0,
            );
            // Control: garuda catches it (its forwarding), unless this test was started
            // ignoring it (garuda then leaves it ignored).
            expect(
                format!("control, garuda catches signal {signal}"),
                mask(garuda, "SigCgt") & bit != 0 || mask(this, "SigIgn") & bit != 0,
            );
        }
        // Like landlock's `outer`, the waiter is a copy of garuda, the canary included; it has
        // no pid in the command's namespace (the inside view above), so the command cannot
        // reach it.
        for (what, ok) in canary_checks("control, waiter", waiter, needle, true) {
            expect(what, ok);
        }
    }

    // Let the probe finish.
    drop(child.stdin.take());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    inside.extend(rest.lines().map(str::to_string));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    expect(
        format!("garuda exit {status}, stderr {err:?}"),
        status.success(),
    );

    // From inside.
    let zero = format!(
        "status NoNewPrivs=1 Seccomp=2 CapInh={ZERO_CAPS} CapPrm={ZERO_CAPS} CapEff={ZERO_CAPS} \
         CapBnd={ZERO_CAPS} CapAmb={ZERO_CAPS}"
    );
    let want: Vec<String> = match kind {
        // Landlock's ptrace rule keeps a sandboxed process away from one outside its domain,
        // and its signal scope (ABI 6, always there on Linux >= 6.14) refuses the signal.
        ExecutorKind::Landlock => vec![
            zero,
            "environ-pid1 errno=EACCES".into(),
            "mem-pid1 errno=EACCES".into(),
            "environ-self ok canary=absent".into(),
            // The probe decoded the canary itself: the scanner finds it where it is.
            "mem-self ok canary=present".into(),
            "kill-pid1 errno=EPERM".into(),
            "ptrace-pid1 errno=EPERM".into(),
            "kill-child ok".into(),
            "after State=S (sleeping)".into(),
        ],
        // bwrap's own PID 1 has the command's credentials and was started with the command's
        // environment only: the command may read it, and there is nothing of garuda in it.
        // A signal from inside the namespace to its PID 1, which handles none, is dropped.
        _ => vec![
            zero,
            "environ-pid1 ok canary=absent".into(),
            "mem-pid1 ok canary=absent".into(),
            "environ-self ok canary=absent".into(),
            "mem-self ok canary=present".into(),
            "kill-pid1 ok".into(),
            "ptrace-pid1 errno=EPERM".into(),
            "kill-child ok".into(),
            "after State=S (sleeping)".into(),
        ],
    };
    let same = inside == want;
    expect(
        if same {
            format!("inside view: {}", inside.join("; "))
        } else {
            format!("inside view {inside:#?}, want {want:#?}")
        },
        same,
    );
    assert!(failures.is_empty(), "{kind}: {failures:#?}");
}

/// `landlock`: PID 1 has no-new-privs, the seccomp filter and no capability, and nothing of
/// the supervisor's environment or memory; the command cannot read it or signal it.
#[test]
fn landlock_pid1_is_hardened_and_scrubbed() {
    check(ExecutorKind::Landlock);
}

/// `bubblewrap`: bwrap's own PID 1, checked the same way.
#[test]
fn bubblewrap_pid1_is_hardened_and_scrubbed() {
    check(ExecutorKind::Bubblewrap);
}

/// The canary never reaches the command's own environment (the allowlist drops it), so a
/// canary found in PID 1 could only come from the supervisor.
#[test]
fn the_canary_is_not_in_the_command_environment() {
    let fx = Fixture::new("pid1-env");
    let out = Command::new(util::garuda_bin().unwrap())
        .args(["sandbox", "--executor", "landlock", "--project"])
        .arg(&fx.project)
        .arg("--")
        .args([PROBE, "env"])
        .current_dir(&fx.project)
        .env_clear()
        .envs(fx.vars.iter().map(|(k, v)| (k, v)))
        .env(CANARY_VAR, "canary-value")
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(env.contains("PATH="), "{env}");
    assert!(
        !env.contains(CANARY_VAR) && !env.contains("canary-value"),
        "{env}"
    );
}

/// The start-up program (`garuda_supervisor::executor::INIT_PROGRAM`) in a file of its own
/// in a scratch folder, so that a test can execute it without the supervisor.
fn init_program_file() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garuda-init");
    std::fs::write(&path, garuda_supervisor::executor::INIT_PROGRAM).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, path)
}

/// The start-up program as PID 1 of a namespace of its own (`unshare`), started by a shell
/// that first forks a child and then executes the program under `argv0` with `args` (`CHILD`
/// stands for that child's pid): the exit code and stdout and stderr. The child exits 3 once
/// PID 1 runs the program (before that, the shell could reap it itself).
fn init_as_pid1(argv0: &str, args: &[&str]) -> (Option<i32>, String) {
    let (_dir, program) = init_program_file();
    let script = r#"a0=$1; g=$(readlink -f "$2"); shift 2
(until [ "$(readlink /proc/1/exe)" = "$g" ]; do :; done; exit 3) & child=$!
args=(); for a in "$@"; do [ "$a" = CHILD ] && a=$child; args+=("$a"); done
exec -a "$a0" "$g" "${args[@]}""#;
    let out = Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
            script,
            "sh",
            argv0,
        ])
        .arg(&program)
        .args(args)
        .env_clear()
        .env("PATH", util::SANDBOX_PATH)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The reaper's exact command line (`garuda-sandbox-init`, the child's pid, a report
/// descriptor) reaps the child and exits with its code (3); any other shape under that name,
/// and any other name without the exec step's marker, exits 125 with nothing said and
/// nothing reaped or run.
#[test]
fn the_start_up_program_reaps_only_with_the_reapers_command_line() {
    assert_eq!(
        init_as_pid1("garuda-sandbox-init", &["CHILD", "1"]),
        (Some(3), String::new())
    );
    for args in [
        &["--version"][..],
        &["CHILD", "1", "--version"],
        &[],
        &["CHILD", "x1"],
        &["CHILD", "1234567890"],
    ] {
        assert_eq!(
            init_as_pid1("garuda-sandbox-init", args),
            (Some(125), String::new()),
            "{args:?}"
        );
    }
    assert_eq!(
        init_as_pid1("garuda", &["CHILD", "1"]),
        (Some(125), String::new())
    );
}

/// The exec step with a release (`garuda-exec-released FD …`): the command runs only after a
/// byte arrives on `FD`; a pipe that ends without one exits 125 and the command never runs
/// (what the bubblewrap executor relies on when the audit intent cannot be synced: bwrap's own
/// `--block-fd` carries on at the end of its pipe). Control: the same pipe with a byte in it.
/// The byte comes 300 ms after the step started, and the writer first notes whether the
/// command had already run: the step waits for it, not only reads what is there.
#[test]
fn the_exec_step_waits_for_its_release() {
    let (dir, program) = init_program_file();
    let marker = dir.path().join("ran");
    let early = dir.path().join("ran-early");
    let run = |go: &str| {
        // fd 8 reads a pipe whose writer (a subshell) waits, notes a command that ran before
        // its byte, writes `go` and ends.
        let script = r#"p=$1; m=$2; go=$3; exec 8< <(sleep 0.3; [ -e "$m" ] && : > "$m-early"; printf "%s" "$go"); exec -a /proc/self/fd/9 "$p" garuda-exec-released 8 /bin/sh -c "echo ran > '$m'""#;
        let out = Command::new("/bin/bash")
            .args(["-c", script, "bash"])
            .arg(&program)
            .arg(&marker)
            .arg(go)
            .env_clear()
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run("");
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("the command was not released"), "{err}");
    assert!(!marker.exists(), "the command ran without its release");
    // The control: released, it runs, and not before the byte.
    let (code, err) = run("!");
    assert_eq!(code, Some(0), "{err}");
    assert!(marker.exists());
    assert!(!early.exists(), "the command ran before its release");
}

/// The exec step (`ANY garuda-exec-closed CMD…`, what bwrap runs in the sandbox) closes every
/// descriptor above stdio, then executes the command as `execvp` does: `PATH` searched, a file
/// with no `#!` line run by `/bin/sh`, 127 when not found, 126 when not executable. Control:
/// the same command started directly sees the descriptor the test left open (fd 7).
#[test]
fn the_exec_step_closes_inherited_descriptors_and_executes_as_execvp() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, program) = init_program_file();
    // bash opens fd 7 (not close-on-exec) and executes either the command itself (the
    // control) or the program under bwrap's kind of `argv[0]`, with the marker.
    let run = |direct: bool, args: &[&str], path: Option<&str>| {
        let mut c = Command::new("/bin/bash");
        c.arg("-c");
        if direct {
            c.args([r#"exec 7</etc/hostname; shift; exec "$@""#, "bash", "-"]);
        } else {
            c.args([
                r#"exec 7</etc/hostname; p=$1; shift; exec -a /proc/self/fd/9 "$p" garuda-exec-closed "$@""#,
                "bash",
            ]);
            c.arg(&program);
        }
        c.args(args).env_clear().current_dir(dir.path());
        if let Some(p) = path {
            c.env("PATH", p);
        }
        let out = c.stdin(Stdio::null()).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let list = ["/bin/ls", "/proc/self/fd"];
    // The control: the command started directly inherits fd 7 (and whatever else the test
    // harness left open).
    let (code, fds, _) = run(true, &list, None);
    let fds: Vec<&str> = fds.lines().collect();
    assert!(
        code == Some(0) && fds.contains(&"7"),
        "the control: {fds:?}"
    );
    // Through the exec step: stdio and `ls`'s own handle on the folder it lists.
    let (code, fds, err) = run(false, &list, None);
    assert_eq!(
        (code, fds.lines().collect::<Vec<_>>(), err.as_str()),
        (Some(0), vec!["0", "1", "2", "3"], "")
    );

    // PATH searched, past a folder where the name is not executable.
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    std::fs::write(dir.path().join("bin/hello"), "echo not this one\n").unwrap();
    // Mode 644: found first and not executable, so the search goes on to /usr/bin/echo.
    std::fs::write(dir.path().join("bin/echo"), "echo not this one\n").unwrap();
    let path = format!("{}/bin:/usr/bin:/bin", dir.path().display());
    let (code, out, _) = run(false, &["echo", "hi"], Some(&path));
    assert_eq!((code, out.as_str()), (Some(0), "hi\n"));
    // A script with no `#!` line runs under /bin/sh, with its arguments.
    let script = dir.path().join("bin/script");
    std::fs::write(&script, "echo ran \"$0\" \"$1\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, _) = run(false, &["script", "A"], Some(&path));
    assert_eq!(
        (code, out.as_str()),
        (Some(0), format!("ran {} A\n", script.display()).as_str())
    );
    // Not found: 127; found but not executable (the `hello` above, mode 644): 126.
    let (code, _, err) = run(false, &["no-such-command"], Some(&path));
    assert_eq!(
        (code, err.as_str()),
        (
            Some(127),
            "garuda: the command was not found in the sandbox\n"
        )
    );
    let (code, _, err) = run(false, &["hello"], Some(&path));
    assert_eq!(
        (code, err.as_str()),
        (
            Some(126),
            "garuda: the command could not be executed in the sandbox\n"
        )
    );
    // No PATH at all: glibc's default (/bin:/usr/bin).
    let (code, out, _) = run(false, &["echo", "default"], None);
    assert_eq!((code, out.as_str()), (Some(0), "default\n"));
}

/// State and start time of `pid` (`/proc/PID/stat`), `None` once it is gone.
fn state_and_start(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state is field 3, start time field 22.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((rest.first()?.chars().next()?, rest.get(19)?.parse().ok()?))
}

/// Runs `sh -c 'echo ready; exec sleep 300'` through `garuda sandbox` with `kind`, kills garuda
/// with `SIGKILL` (no handler runs, nothing is cleaned up) once the command is up, and returns
/// the command's pid and what of everything garuda had started is still running (pid,
/// command line) when every death signal had its chance (up to 5 s, which only the control
/// waits out; a zombie counts as gone).
fn survivors_of_a_killed_garuda(kind: ExecutorKind) -> (u32, Vec<(u32, String)>) {
    let fx = Fixture::new(&format!("killed-{kind}"));
    let mut child = Command::new(util::garuda_bin().unwrap())
        .args(["sandbox", "--executor", kind.name(), "--project"])
        .arg(&fx.project)
        .args(["--", "/bin/sh", "-c", "echo ready; exec sleep 300"])
        .current_dir(&fx.project)
        .env_clear()
        .envs(fx.vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n", "{kind}: the command did not start");
    let cmdline = |p: u32| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default())
            .replace('\0', " ")
    };
    // Not vacuous: the command itself (the shell, or the `sleep` it becomes) is among them.
    // Looked for again for a while: a process in the middle of its `exec` shows an empty
    // command line (seen once on a loaded machine).
    let is_command = |c: &str| c == "sleep 300 " || c.starts_with("/bin/sh -c echo ready");
    let mut tries = 0;
    let (started, command) = loop {
        let started: Vec<(u32, u64)> = descendants(child.id())
            .into_iter()
            .filter_map(|p| Some((p, state_and_start(p)?.1)))
            .collect();
        if let Some(command) = started
            .iter()
            .map(|(p, _)| *p)
            .find(|p| is_command(&cmdline(*p)))
        {
            break (started, command);
        }
        tries += 1;
        assert!(
            tries < 500,
            "{kind}: the command is not below garuda: {:?}",
            started.iter().map(|(p, _)| cmdline(*p)).collect::<Vec<_>>()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let alive = || -> Vec<(u32, String)> {
        started
            .iter()
            .filter(|(p, start)| {
                state_and_start(*p).is_some_and(|(state, now)| now == *start && state != 'Z')
            })
            .map(|(p, _)| (*p, cmdline(*p)))
            .collect()
    };
    for _ in 0..500 {
        if alive().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (command, alive())
}

/// T21: a supervisor killed outright (`SIGKILL`, the OOM killer) takes its sandbox with it:
/// every process it started dies by the death signals (`landlock`: the init and PID 1;
/// `bubblewrap`: the spawned process that waits for bwrap, then bwrap and its namespace).
/// Negative control: `host`'s command, only in a process group of its own, outlives garuda.
#[test]
fn a_killed_supervisor_takes_its_sandbox_with_it() {
    for kind in [ExecutorKind::Landlock, ExecutorKind::Bubblewrap] {
        assert_eq!(survivors_of_a_killed_garuda(kind).1, [], "{kind}");
    }
    let (command, left) = survivors_of_a_killed_garuda(ExecutorKind::Host);
    for (pid, _) in &left {
        // The control's survivors are this test's to end.
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(
        left.iter().any(|(pid, _)| *pid == command),
        "host: the command ({command}) did not outlive garuda: {left:?}"
    );
}
