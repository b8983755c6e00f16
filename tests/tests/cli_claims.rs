//! Claims of the docs proven through the real `garuda sandbox` binary, each with its negative
//! control, on both Linux executors:
//!
//! - host daemons' sockets are out of reach (`/run`, `$XDG_RUNTIME_DIR`, the ssh-agent socket):
//!   real listening unix sockets, `connect(2)` from the probe inside the sandbox; the host
//!   executor connects to the same sockets;
//! - a real failure of an executor's own setup exits 125 and names the stage; the same command
//!   without the fault exits with its own code;
//! - a project folder that cannot be listed stops Garuda (exit 125, the folder named); the same
//!   project with the folder listable runs.
//!
//! Every base folder lives under the real user's `~/.cache`, never under `/tmp`: every Linux
//! executor gives the command a private `/tmp`, so a socket under `/tmp` would be out of reach
//! for the wrong reason.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // shared with the contract suite, which uses the rest
mod util;

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use util::{garuda_bin, is_root, PROBE, SANDBOX_PATH};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fake home and a project under `~/.cache/garuda-cli-claims/`.
struct World {
    base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn world() -> World {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let parent = real_home.join(".cache/garuda-cli-claims");
    std::fs::create_dir_all(&parent).unwrap();
    let base = tempfile::tempdir_in(&parent).unwrap();
    let root = base.path().canonicalize().unwrap();
    assert!(!root.starts_with("/tmp"), "{}", root.display());
    let home = root.join("home");
    let project = root.join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README"), "project\n").unwrap();
    World {
        base,
        home,
        project,
    }
}

impl World {
    fn root(&self) -> PathBuf {
        self.base.path().canonicalize().unwrap()
    }

    /// `[wrapper…] garuda sandbox --executor EXECUTOR --capture --project P -- CMD…` with a
    /// clean environment: the fake home, `PATH`, and `extra`.
    fn sandbox(
        &self,
        wrapper: &[&str],
        executor: &str,
        extra: &[(&str, &Path)],
        cmd: &[&dyn AsRef<std::ffi::OsStr>],
    ) -> Output {
        let garuda = garuda_bin().unwrap();
        let mut argv: Vec<OsString> = wrapper.iter().map(OsString::from).collect();
        argv.push(garuda.into());
        argv.extend(
            ["sandbox", "--executor", executor, "--capture", "--project"]
                .iter()
                .map(OsString::from),
        );
        argv.push(self.project.clone().into());
        argv.push("--".into());
        argv.extend(cmd.iter().map(|a| a.as_ref().to_os_string()));
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(&self.project)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", SANDBOX_PATH)
            .stdin(Stdio::null());
        for (k, v) in extra {
            command.env(k, v);
        }
        command.output().unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Host daemons' sockets

/// A listening unix socket at `path`, removed (with the folder the test made for it) when
/// dropped.
struct Socket {
    path: PathBuf,
    _listener: UnixListener,
}

impl Socket {
    fn at(path: PathBuf) -> Socket {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)
            .unwrap_or_else(|e| panic!("listen on {}: {e}", path.display()));
        Socket {
            path,
            _listener: listener,
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A folder under `/run` where this user can create a socket: `/run` itself as root, else
/// `/run/lock` (world-writable on Debian) or the user's own `/run/user/UID`.
fn writable_run_dir() -> Option<PathBuf> {
    let uid = util::uid();
    let mut candidates = vec![PathBuf::from("/run")];
    candidates.push(PathBuf::from("/run/lock"));
    candidates.push(PathBuf::from(format!("/run/user/{uid}")));
    candidates.into_iter().find(|dir| {
        let probe = dir.join(format!(".garuda-cli-claims-{}", std::process::id()));
        let ok = std::fs::write(&probe, "").is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    })
}

/// Variables given to `garuda`.
type Env<'a> = [(&'a str, &'a Path)];

/// One connect attempt: the probe's answer, asserting it ran cleanly.
fn connect(w: &World, executor: &str, env: &[(&str, &Path)], socket: &Path) -> String {
    let out = w.sandbox(&[], executor, env, &[&PROBE, &"unix-connect", &socket]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{executor} unix-connect {}: {}",
        socket.display(),
        text(&out.stderr)
    );
    text(&out.stdout).trim_end().to_string()
}

/// `/run`, `$XDG_RUNTIME_DIR` and the ssh-agent socket are out of reach: each holds a real
/// listening socket, which the host executor connects to (the negative control) and neither
/// sandbox can.
///
/// What each sandbox answers, and why exactly that:
/// - under `/run` (a hidden directory) and `$XDG_RUNTIME_DIR` (hidden too): `ENOENT`, the
///   folder is replaced by an empty one, so the socket is not there at all;
/// - `SSH_AUTH_SOCK` outside every hidden folder: `EACCES`, the socket is covered by the empty
///   mode-000 file that covers every unreadable path, and `connect` needs write permission on
///   it (no capability overrides that inside);
/// - `SSH_AUTH_SOCK` in `/tmp/ssh-XXXX/` (where `ssh-agent` puts it by default): `ENOENT`, the
///   command's `/tmp` is a private, empty one.
#[test]
fn host_daemon_sockets_are_out_of_reach() {
    let w = world();
    let root = w.root();
    let xdg = root.join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let agent_dir = root.join("agent");
    std::fs::create_dir(&agent_dir).unwrap();
    let tmp_agent_dir = tempfile::Builder::new()
        .prefix("ssh-garuda-test-")
        .tempdir_in("/tmp")
        .unwrap();

    let daemon = Socket::at(xdg.join("daemon.sock"));
    let agent = Socket::at(agent_dir.join("agent.sock"));
    let tmp_agent = Socket::at(tmp_agent_dir.path().join("agent.1"));
    let run = writable_run_dir()
        .map(|dir| Socket::at(dir.join(format!("garuda-test-{}.sock", std::process::id()))));
    if run.is_none() {
        util::not_tested(
            "run-socket",
            "a socket under /run (no folder under /run is writable by this user)",
        );
    }

    let env = [
        ("XDG_RUNTIME_DIR", xdg.as_path()),
        ("SSH_AUTH_SOCK", agent.path.as_path()),
    ];
    let tmp_env = [
        ("XDG_RUNTIME_DIR", xdg.as_path()),
        ("SSH_AUTH_SOCK", tmp_agent.path.as_path()),
    ];
    let mut cases: Vec<(&str, &Env, &Path, &str)> = vec![
        ("XDG_RUNTIME_DIR", &env, &daemon.path, "errno=ENOENT"),
        ("SSH_AUTH_SOCK", &env, &agent.path, "errno=EACCES"),
        (
            "SSH_AUTH_SOCK in /tmp",
            &tmp_env,
            &tmp_agent.path,
            "errno=ENOENT",
        ),
    ];
    if let Some(run) = &run {
        cases.push(("/run", &env, &run.path, "errno=ENOENT"));
    }
    for (what, env, socket, want) in cases {
        // Negative control: the socket is there and listening; the host executor reaches it.
        assert_eq!(connect(&w, "host", env, socket), "ok", "host: {what}");
        for executor in SANDBOXES {
            assert_eq!(
                connect(&w, executor, env, socket),
                want,
                "{executor}: {what} at {}",
                socket.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exit 125 on a real setup failure of the executor

/// The negative control of the tests below: `cmd` (which creates `marker`, then exits 7) run
/// by `garuda` under `executor`, started through `wrapper`, runs, and its own code comes back.
fn assert_runs_with_its_own_code(
    w: &World,
    wrapper: &[&str],
    executor: &str,
    cmd: &[&dyn AsRef<std::ffi::OsStr>],
    marker: &Path,
) {
    let out = w.sandbox(wrapper, executor, &[], cmd);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{executor}: {}",
        text(&out.stderr)
    );
    assert!(marker.exists(), "{executor}: the command did not run");
    std::fs::remove_file(marker).unwrap();
}

/// The descriptor limit of [`a_real_executor_setup_failure_exits_125_naming_the_stage`].
const FD_LIMIT: usize = 64;

/// The executor's own setup fails for real, and `garuda sandbox` exits 125 naming the stage;
/// the command never runs. The fault is a descriptor limit (`prlimit --nofile`, which binds
/// root too; garuda starts with stdio only) too low for what the executor must hold for this
/// project, whatever number of descriptors the supervisor itself holds below it (the project
/// asks for twice the limit):
///
/// - `landlock`: outer holds every bind source (each pinned folder and read-only path: here
///   [`FD_LIMIT`] `dN/.garuda` folders and as many pins) on a descriptor of its own, at
///   consecutive numbers above the supervisor's own; a handle is opened one path component
///   at a time, holding the folder and its next component at once, so once the numbers below
///   the limit run out the walk fails with `EMFILE` in the `Hold` mount step for descriptor
///   [`FD_LIMIT`] or the one before it (which, depends on whether a lower number is still
///   free for the walk's first handle), one of the project's folders;
/// - `bubblewrap`: one empty-file descriptor per unreadable file (here 2 × [`FD_LIMIT`]
///   `.env.N` files) for bwrap to read; the memfd past the limit fails with `EMFILE`.
///
/// Negative control: the same command without the limit exits with its own code, 7.
#[test]
fn a_real_executor_setup_failure_exits_125_naming_the_stage() {
    let w = world();
    for i in 0..FD_LIMIT {
        std::fs::create_dir_all(w.project.join(format!("d{i}/.garuda"))).unwrap();
    }
    for i in 0..2 * FD_LIMIT {
        std::fs::write(w.project.join(format!(".env.{i}")), "SECRET=1\n").unwrap();
    }
    let marker = w.project.join("ran");
    let script = format!("touch '{}'; exit 7", marker.display());
    let cmd: [&dyn AsRef<std::ffi::OsStr>; 3] = [&"/bin/sh", &"-c", &script];
    let nofile = format!("--nofile={FD_LIMIT}:{FD_LIMIT}");
    // Only stdio reaches garuda: a descriptor this test inherited (from a CI runner, say) just
    // below the limit would make the failing `Hold` the one before it.
    let limit = [
        "bash",
        "-c",
        r#"for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
exec "$@""#,
        "bash",
        "prlimit",
        nofile.as_str(),
        "--",
    ];
    for (executor, stage) in [
        ("landlock", "sandbox setup failed at mount step "),
        (
            "bubblewrap",
            "sandbox setup failed at empty-file memfd: Too many open files",
        ),
    ] {
        let out = w.sandbox(&limit, executor, &[], &cmd);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{executor}: {err}");
        assert!(err.contains(stage), "{executor}: {err}");
        if executor == "landlock" {
            let project_dir = format!("(Hold {{ path: \"{}/d", w.project.display());
            let at_fd = |fd: usize| err.contains(&format!(", fd: {fd} }}): Too many open files"));
            assert!(
                err.contains(&project_dir) && (at_fd(FD_LIMIT) || at_fd(FD_LIMIT - 1)),
                "{executor}: {err}"
            );
        }
        assert!(!marker.exists(), "{executor}: the command ran");
        // Negative control: without the fault the command runs and its own code comes back.
        assert_runs_with_its_own_code(&w, &[], executor, &cmd, &marker);
    }
}

/// The program of [`a_refused_close_range_stops_the_command`]: `close_range` answers `EPERM`,
/// as under a container runtime's seccomp profile that predates the call; everything else,
/// and any other architecture, is allowed. Raw `struct sock_filter[]`.
fn filter_refusing_close_range() -> Vec<u8> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let arch: u32 = if cfg!(target_arch = "x86_64") {
        62 | 0x8000_0000 | 0x4000_0000
    } else {
        183 | 0x8000_0000 | 0x4000_0000
    };
    let program: [(u16, u8, u8, u32); 6] = [
        (LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        (JEQ_K, 0, 3, arch),
        (LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        (JEQ_K, 0, 1, libc::SYS_close_range as u32),
        (RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        (RET_K, 0, 0, RET_ALLOW),
    ];
    let mut out = Vec::new();
    for (code, jt, jf, k) in program {
        out.extend_from_slice(&code.to_ne_bytes());
        out.extend_from_slice(&[jt, jf]);
        out.extend_from_slice(&k.to_ne_bytes());
    }
    out
}

/// Every descriptor above stdio must be closed before the command runs (a descriptor the
/// calling shell left open could reach a file outside the sandbox); both executors do it with
/// `close_range(CLOSE_RANGE_CLOEXEC)`. Where that call is refused (a seccomp profile that
/// predates it answers `EPERM`), Garuda stops with 125 naming the step instead of running the
/// command with whatever it inherited. `garuda` runs under such a program (the probe installs
/// it and executes `garuda`). Negative control: the same start without the program runs the
/// command, which exits with its own code.
#[test]
fn a_refused_close_range_stops_the_command() {
    let w = world();
    let filter = w.root().join("no-close-range.bpf");
    std::fs::write(&filter, filter_refusing_close_range()).unwrap();
    let filter = filter.to_str().unwrap().to_string();
    let wrapper = [PROBE, "exec-filtered", filter.as_str()];
    let marker = w.project.join("ran");
    let script = format!("touch '{}'; exit 7", marker.display());
    let cmd: [&dyn AsRef<std::ffi::OsStr>; 3] = [&"/bin/sh", &"-c", &script];
    // landlock: the command and PID 1 each mark their descriptors before they execute, and
    // both fail; whichever reports first is named.
    for (executor, stages) in [
        (
            "landlock",
            &[
                "sandbox setup failed at mark descriptors close-on-exec (close_range): \
                 Operation not permitted",
                "sandbox setup failed at PID 1: stdio to /dev/null, descriptors close-on-exec: \
                 Operation not permitted",
            ][..],
        ),
        (
            "bubblewrap",
            &["sandbox setup failed at spawn bwrap: Operation not permitted"][..],
        ),
    ] {
        let out = w.sandbox(&wrapper, executor, &[], &cmd);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{executor}: {err}");
        assert!(stages.iter().any(|s| err.contains(s)), "{executor}: {err}");
        assert!(!marker.exists(), "{executor}: the command ran");
        assert_runs_with_its_own_code(&w, &[], executor, &cmd, &marker);
    }
}

// ---------------------------------------------------------------------------------------------
// A folder that cannot be listed

/// A project folder that cannot be listed could hide a `.env` the policy never sees (and the
/// command, which can `chmod` it back, would read): Garuda refuses to start, exit 125, naming
/// the folder. Negative control: the same project with the folder listable (mode 755) runs
/// the command, which exits with its own code.
///
/// As root, file modes do not stop listing: `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH`
/// override them. The root case therefore runs `garuda` as uid 0 without those two
/// capabilities (`setpriv --bounding-set`, as a container runtime may start it), where a
/// mode-000 folder is unlistable for root too. With them, root lists every folder, so
/// nothing can be hidden from the walk.
#[test]
fn a_project_folder_that_cannot_be_listed_stops_garuda() {
    let w = world();
    let locked = w.project.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::write(locked.join(".env"), "SECRET=1\n").unwrap();
    let wrapper: &[&str] = if is_root() {
        &[
            "setpriv",
            "--bounding-set",
            "-dac_override,-dac_read_search",
            "--inh-caps",
            "-all",
            "--",
        ]
    } else {
        &[]
    };
    let marker = w.project.join("ran");
    let script = format!("touch '{}'; exit 7", marker.display());
    let cmd: [&dyn AsRef<std::ffi::OsStr>; 3] = [&"/bin/sh", &"-c", &script];
    for executor in SANDBOXES {
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let out = w.sandbox(wrapper, executor, &[], &cmd);
        // Put the mode back first, so the folder can be removed whatever happens next.
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{executor}: {err}");
        assert!(
            err.contains(&format!(
                "cannot list {}: Permission denied",
                locked.display()
            )),
            "{executor}: {err}"
        );
        assert!(!marker.exists(), "{executor}: the command ran");
        // Negative control: listable, the same start runs the command.
        assert_runs_with_its_own_code(&w, wrapper, executor, &cmd, &marker);
    }
}
