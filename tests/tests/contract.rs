//! The executor contract suite: every executor runs the same table of cases.
//!
//! Each case runs `garuda-probe` (or, where the probe cannot do it alone, `/bin/sh` around it)
//! through [`garuda_supervisor::executor::Executor::run`] with [`StdioMode::Capture`], under a policy built from a fake home
//! and project by `garuda_policy`, and checks the probe's exact answer (`ok`, `errno=EROFS`, …)
//! plus, where the case tries to change something, whether the change happened.
//!
//! - The sandbox executors (`landlock`, `bubblewrap`) must pass every case.
//! - `host` is the negative control: it must *fail* every case in which isolation is the
//!   control, and show a specific host answer (so a probe that did not run never counts). The
//!   cases it passes by construction, or that are not run on it, are listed with the reason in
//!   [`HOST_PASSES`] and [`HOST_NOT_RUN`]; nothing is dropped silently.
//! - An executor this machine cannot run fails its test with the probe's reason, unless
//!   `GARUDA_CONTRACT_ALLOW_MISSING` names it (comma-separated). [`NOT_RUNNABLE_ON_LINUX`] is
//!   the one place that says seatbelt is not run here.
//!
//! The supervisor's own memory under 1 GiB of output is measured through the `garuda` binary
//! (`garuda sandbox --capture`), polling its `VmRSS`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

mod util;

use std::ffi::OsString;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use garuda_supervisor::executor::capture::truncation_marker;
use garuda_supervisor::executor::select::executor_of;
use garuda_supervisor::executor::{
    probe_executors, CommandSpec, ExecutorKind, ExitStatus, Outcome, StdioMode,
};
use util::{is_root, Fixture, PROBE};

/// Target of the fork bomb; the sandbox must stop it well below this.
const FORK_BOMB: usize = 1000;
/// Output of the spam case: 1 GiB.
const SPAM_BYTES: u64 = 1 << 30;
/// Highest resident size the supervisor may reach while capturing 1 GiB.
const SUPERVISOR_RSS_LIMIT: u64 = 64 << 20;

/// Executors this suite runs on Linux. Together with [`NOT_RUNNABLE_ON_LINUX`] they must cover
/// [`ExecutorKind::ALL`] (checked by `every_executor_is_accounted_for`).
const RUN_ON_LINUX: [ExecutorKind; 3] = [
    ExecutorKind::Landlock,
    ExecutorKind::Bubblewrap,
    ExecutorKind::Host,
];

/// Executors that cannot run on Linux at all, and why. The only such list in the suite.
const NOT_RUNNABLE_ON_LINUX: &[(ExecutorKind, &str)] = &[(
    ExecutorKind::Seatbelt,
    "macOS `sandbox-exec` exists only on macOS; its generated profile is unit-tested in \
     supervisor/src/executor/seatbelt.rs",
)];

/// For which users an exception holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Users {
    Any,
    Root,
    NonRoot,
}

impl Users {
    fn now(self) -> bool {
        match self {
            Users::Any => true,
            Users::Root => is_root(),
            Users::NonRoot => !is_root(),
        }
    }
}

/// A case the host executor does not fail, with the reason.
struct Exception {
    case: &'static str,
    users: Users,
    why: &'static str,
}

/// Cases the host executor passes, and why that proves nothing about isolation. The suite
/// asserts the host really passes them (so this table cannot go stale).
const HOST_PASSES: &[Exception] = &[
    Exception {
        case: "env-has-no-secrets",
        users: Users::Any,
        why: "the environment allowlist is computed by garuda-policy (ExecPolicy.env) and \
              every executor, host included, starts the command with exactly that environment",
    },
    Exception {
        case: "output-capped",
        users: Users::Any,
        why: "the output cap is applied by the shared capture layer (executor::capture) that \
              reads every executor's pipes",
    },
    Exception {
        case: "no-capabilities",
        users: Users::NonRoot,
        // Root has every capability on the host; an ordinary user has none to begin with.
        why: "an unprivileged user has no effective capabilities on the host either",
    },
    Exception {
        case: "seccomp-fsopen",
        users: Users::NonRoot,
        // fsopen checks CAP_SYS_ADMIN before its arguments, so no bad-argument trick exists.
        why: "the host kernel refuses fsopen to a user without CAP_SYS_ADMIN with the same \
              EPERM; as root the host answers `ok`, which shows the sandbox's refusal",
    },
    Exception {
        case: "seccomp-move-mount",
        users: Users::NonRoot,
        why: "the host kernel refuses move_mount to a user without CAP_SYS_ADMIN with the same \
              EPERM (checked before the arguments); as root the host answers ENOENT",
    },
];

/// Cases not run on the host executor at all, and why.
const HOST_NOT_RUN: &[Exception] = &[
    Exception {
        case: "write-etc",
        users: Users::Root,
        why: "on the host, root would really create a file in /etc; the case exists only as \
              root because for other users file permissions refuse /etc on any executor",
    },
    Exception {
        case: "write-usr",
        users: Users::Root,
        why: "on the host, root would really create a file in /usr (as non-root the host runs \
              it and answers EACCES, where the sandbox's read-only mount answers EROFS)",
    },
];

fn exception(table: &'static [Exception], case: &str) -> Option<&'static Exception> {
    table.iter().find(|e| e.case == case && e.users.now())
}

/// What a run must show, in words and as a check.
struct Expect {
    what: String,
    check: Box<dyn Fn(&Outcome) -> bool + Send + Sync>,
}

fn stdout_line(out: &Outcome) -> String {
    out.stdout.text().trim_end_matches('\n').to_string()
}

/// stdout is exactly one of these lines.
fn line(any_of: &[&str]) -> Expect {
    let want: Vec<String> = any_of.iter().map(|s| s.to_string()).collect();
    Expect {
        what: format!("one of {want:?}"),
        check: Box::new(move |out| want.contains(&stdout_line(out))),
    }
}

fn errno(name: &str) -> Expect {
    line(&[&format!("errno={name}")])
}

fn ok() -> Expect {
    line(&["ok"])
}

/// An unreadable secret: permission denied, exactly. Every secret of the fixture exists and is
/// covered by a mode-000 mount, so `ENOENT` would mean the secret was missing (a case that
/// proves nothing), never that it was protected.
fn unreadable() -> Expect {
    errno("EACCES")
}

/// `status` reports `field=value`.
fn status_field(field: &'static str, value: &'static str) -> Expect {
    let want = format!("{field}={value}");
    Expect {
        what: format!("status with {want}"),
        check: Box::new(move |out| stdout_line(out).split(' ').any(|w| w == want)),
    }
}

/// `status` reports `field` with a value other than `value`.
fn status_field_not(field: &'static str, value: &'static str) -> Expect {
    Expect {
        what: format!("status with {field} present and not {value}"),
        check: Box::new(move |out| {
            stdout_line(out).split(' ').any(|w| {
                w.strip_prefix(field)
                    .and_then(|r| r.strip_prefix('='))
                    .is_some_and(|v| v != value && v != "missing")
            })
        }),
    }
}

fn count_of(out: &Outcome) -> Option<usize> {
    stdout_line(out).strip_prefix("count=")?.parse().ok()
}

fn procs_at_most(n: usize) -> Expect {
    Expect {
        what: format!("count=K with K <= {n}"),
        check: Box::new(move |out| count_of(out).is_some_and(|k| k <= n)),
    }
}

fn procs_more_than(n: usize) -> Expect {
    Expect {
        what: format!("count=K with K > {n}"),
        check: Box::new(move |out| count_of(out).is_some_and(|k| k > n)),
    }
}

/// The fork bomb stopped at fewer than `below` processes, with `EAGAIN`.
fn fork_bounded(below: usize) -> Expect {
    Expect {
        what: format!("count=K errno=EAGAIN with K < {below}"),
        check: Box::new(move |out| {
            let text = stdout_line(out);
            let Some((count, err)) = text.split_once(' ') else {
                return false;
            };
            err == "errno=EAGAIN"
                && count
                    .strip_prefix("count=")
                    .and_then(|k| k.parse::<usize>().ok())
                    .is_some_and(|k| k > 0 && k < below)
        }),
    }
}

/// The environment holds none of the secret variables (by name or by value), and does hold
/// the innocent one.
fn env_without_secrets(home: &Path) -> Expect {
    let home = home.display().to_string();
    Expect {
        what: "no secret variable; LANG, HOME (fake) and TMPDIR=/tmp present".into(),
        check: Box::new(move |out| {
            let text = out.stdout.text();
            let vars: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once('=')).collect();
            let has = |k: &str, v: &str| vars.contains(&(k, v));
            let leaked = util::SECRET_VARS
                .iter()
                .any(|(k, v)| vars.iter().any(|(n, val)| n == k || val.contains(v)));
            !leaked
                && has(util::INNOCENT_VAR.0, util::INNOCENT_VAR.1)
                && has("HOME", &home)
                && has("TMPDIR", "/tmp")
        }),
    }
}

/// 1 GiB was written; exactly the cap is kept, the marker follows, the rest is counted.
fn capped(cap: usize, total: u64) -> Expect {
    Expect {
        what: format!(
            "{cap} bytes of 'x', then the marker; dropped = {}",
            total - cap as u64
        ),
        check: Box::new(move |out| {
            let dropped = total - cap as u64;
            let marker = truncation_marker(dropped);
            let bytes = &out.stdout.bytes;
            out.stdout.dropped == dropped
                && bytes.len() == cap + marker.len()
                && bytes[..cap].iter().all(|b| *b == b'x')
                && bytes[cap..] == *marker.as_bytes()
        }),
    }
}

/// Observed from outside after the run: did the action the case attempted take effect?
type Effect = Box<dyn Fn() -> bool + Send + Sync>;

/// Which policy a case runs under.
#[derive(Debug, Clone, Copy)]
enum Project {
    /// The project under the fake base (outside /tmp).
    Main,
    /// The project under /tmp.
    Tmp,
}

/// What a case shows.
enum Role {
    /// Isolation is the control: the sandboxes pass; the host must fail the case, showing
    /// `host`, and when `host_effect` the attempted action must take effect on the host.
    Isolation { host: Expect, host_effect: bool },
    /// Everything passes: the fixture works (the sandbox is not simply broken).
    Positive,
    /// Enforced by a layer every executor shares, so the host passes too; must be listed in
    /// [`HOST_PASSES`].
    SharedLayer,
}

struct Case {
    name: &'static str,
    argv: Vec<OsString>,
    project: Project,
    /// What the sandboxes must show.
    expect: Expect,
    effect: Option<Effect>,
    role: Role,
}

fn probe_argv(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    std::iter::once(OsString::from(PROBE))
        .chain(args.iter().map(|a| a.as_ref().to_os_string()))
        .collect()
}

fn content_is(path: PathBuf, want: &'static str) -> Effect {
    Box::new(move || std::fs::read_to_string(&path).is_ok_and(|c| c == want))
}

fn content_changed(path: PathBuf) -> Effect {
    Box::new(move || std::fs::read_to_string(&path).is_ok_and(|c| c != "home file\n"))
}

fn exists(path: PathBuf) -> Effect {
    Box::new(move || std::fs::symlink_metadata(&path).is_ok())
}

const PROBE_WROTE: &str = "garuda-probe\n";

/// The table. `kind` only names the files a case touches.
fn cases(fx: &Fixture, kind: ExecutorKind) -> Vec<Case> {
    let home = |rel: &str| fx.home.join(rel);
    let proj = |rel: &str| fx.project.join(rel);
    let mut cases = Vec::new();
    let mut add = |name, argv, expect, effect, role| {
        cases.push(Case {
            name,
            argv,
            project: Project::Main,
            expect,
            effect,
            role,
        })
    };
    let iso = |host| Role::Isolation {
        host,
        host_effect: true,
    };

    // Slow cases first, so that they overlap with the rest.
    add(
        "output-capped",
        probe_argv(&[&"spam", &SPAM_BYTES.to_string()]),
        capped(fx.policy.limits.output_cap, SPAM_BYTES),
        None,
        Role::SharedLayer,
    );
    let late = proj("late");
    add(
        "background-process-dies",
        // The command returns only once the background process has left its session and
        // process group (it has created `started`), so on the host nothing kills it.
        vec![
            "/bin/sh".into(),
            "-c".into(),
            "setsid /bin/sh -c ': > started; sleep 1; echo alive > late' \
             </dev/null >/dev/null 2>&1 &
             while [ ! -e started ]; do sleep 0.05; done"
                .into(),
        ],
        line(&[""]),
        Some(Box::new(move || {
            std::thread::sleep(Duration::from_secs(2));
            late.exists()
        })),
        iso(line(&[""])),
    );
    // Both Linux executors bound a PID namespace's `pid_max` (Linux 6.14 and later: `landlock`
    // its own, `bubblewrap` the one its spawn hook makes around bwrap), so both stop at the
    // policy's limit, for root and for any other user. (On an older kernel `bubblewrap` falls
    // back to a pids cgroup as root and to `RLIMIT_NPROC`, which counts all of the user's
    // processes, as another user: a looser bound, still well below the bomb.)
    let namespaced = garuda_supervisor::executor::pidns::pid_max_is_namespaced();
    let fork_limit = if kind == ExecutorKind::Bubblewrap && !is_root() && !namespaced {
        FORK_BOMB / 2
    } else {
        util::MAX_PROCESSES as usize + 1
    };
    add(
        "fork-bomb-bounded",
        probe_argv(&[&"forkbomb", &FORK_BOMB.to_string()]),
        fork_bounded(fork_limit),
        None,
        iso(line(&[&format!("count={FORK_BOMB} errno=none")])),
    );

    // Writes.
    add(
        "write-in-project",
        probe_argv(&[&"write", &proj("made-by-probe")]),
        ok(),
        Some(content_is(proj("made-by-probe"), PROBE_WROTE)),
        Role::Positive,
    );
    add(
        "write-home",
        probe_argv(&[&"write", &home("notes.txt")]),
        errno("EROFS"),
        Some(content_changed(home("notes.txt"))),
        iso(ok()),
    );
    add(
        "write-home-new-file",
        probe_argv(&[&"write", &home("new-file")]),
        errno("EROFS"),
        Some(exists(home("new-file"))),
        iso(ok()),
    );
    add(
        "write-sibling",
        probe_argv(&[&"write", &fx.sibling.join("file.txt")]),
        errno("EROFS"),
        Some(content_is(fx.sibling.join("file.txt"), PROBE_WROTE)),
        iso(ok()),
    );
    if is_root() {
        // As non-root, file permissions refuse /etc on every executor: the case shows nothing.
        let etc = PathBuf::from(format!(
            "/etc/garuda-contract-{}-{kind}",
            std::process::id()
        ));
        add(
            "write-etc",
            probe_argv(&[&"write", &etc]),
            errno("EROFS"),
            Some(exists(etc)),
            // Never run on the host (see HOST_NOT_RUN).
            iso(errno("EROFS")),
        );
    }
    let usr = PathBuf::from(format!(
        "/usr/garuda-contract-{}-{kind}",
        std::process::id()
    ));
    add(
        "write-usr",
        probe_argv(&[&"write", &usr]),
        errno("EROFS"),
        Some(exists(usr)),
        // Run on the host only as non-root (see HOST_NOT_RUN): file permissions answer EACCES
        // there (and nothing is written), where the sandbox's read-only mount answers EROFS.
        Role::Isolation {
            host: errno("EACCES"),
            host_effect: false,
        },
    );
    add(
        "write-through-symlink",
        probe_argv(&[
            &"symlink-write",
            &home("link-target.txt"),
            &proj("link-to-home"),
        ]),
        errno("EROFS"),
        Some(content_changed(home("link-target.txt"))),
        iso(ok()),
    );
    add(
        "hardlink-to-home",
        probe_argv(&[
            &"hardlink",
            &home("hardlink-src.txt"),
            &proj("hardlink-to-home"),
        ]),
        // Different mounts: the kernel refuses before any permission check.
        errno("EXDEV"),
        Some(exists(proj("hardlink-to-home"))),
        iso(ok()),
    );
    add(
        "chmod-home",
        probe_argv(&[&"chmod", &home("chmod.txt")]),
        errno("EROFS"),
        Some({
            let p = home("chmod.txt");
            Box::new(move || {
                std::fs::metadata(&p).is_ok_and(|m| m.permissions().mode() & 0o777 == 0o600)
            })
        }),
        iso(ok()),
    );
    add(
        "utimes-home",
        probe_argv(&[&"utimes", &home("utimes.txt")]),
        errno("EROFS"),
        Some({
            let p = home("utimes.txt");
            Box::new(move || std::fs::metadata(&p).is_ok_and(|m| m.mtime() == 0))
        }),
        iso(ok()),
    );
    add(
        "setxattr-home",
        probe_argv(&[&"setxattr", &home("xattr.txt")]),
        errno("EROFS"),
        None,
        iso(ok()),
    );

    // Git metadata: hooks and config stay read-only, in every repository (each git directory
    // is read-only as a whole).
    for (name_hooks, name_config, git) in [
        ("git-hooks", "git-config", proj(".git")),
        ("nested-git-hooks", "nested-git-config", proj("sub/.git")),
        ("gitfile-hooks", "gitfile-config", proj("gitdirs/wt")),
    ] {
        add(
            name_hooks,
            probe_argv(&[&"write", &git.join("hooks/pre-commit")]),
            errno("EROFS"),
            Some(exists(git.join("hooks/pre-commit"))),
            iso(ok()),
        );
        add(
            name_config,
            probe_argv(&[&"append", &git.join("config")]),
            errno("EROFS"),
            Some({
                let p = git.join("config");
                Box::new(move || std::fs::read_to_string(&p).is_ok_and(|c| c.contains("probe")))
            }),
            iso(ok()),
        );
    }

    // Replacing git metadata instead of writing it: renaming `.git` (or a folder above it)
    // away and putting a fresh copy with writable hooks in its place. Every folder between the
    // project root and a read-only path is a mount point in the sandbox, which cannot be
    // renamed (EBUSY), and so is `.git` itself, a read-only mount point. The `.git` pointer file
    // of a worktree is itself read-only.
    add(
        "git-dir-rename",
        probe_argv(&[
            &"rename",
            &proj("renameme/.git"),
            &proj("renameme/.git-old"),
        ]),
        errno("EBUSY"),
        Some(exists(proj("renameme/.git-old"))),
        iso(ok()),
    );
    add(
        "git-ancestor-rename",
        probe_argv(&[&"rename", &proj("moveme"), &proj("moveme-old")]),
        errno("EBUSY"),
        Some(exists(proj("moveme-old"))),
        iso(ok()),
    );
    add(
        "gitfile-rewrite",
        probe_argv(&[&"append", &proj("wt2/.git")]),
        errno("EROFS"),
        Some({
            let p = proj("wt2/.git");
            Box::new(move || std::fs::read_to_string(&p).is_ok_and(|c| c.contains("probe")))
        }),
        iso(ok()),
    );

    // Git directories are read-only as a whole: files git would read that do not exist yet
    // cannot be created either (`config.worktree` with `extensions.worktreeConfig`, a
    // `commondir` sending git to a config and hooks of the command's), while the data a
    // command legitimately writes (objects, refs) stays writable. `tests/git_metadata.rs` runs
    // the full attacks, with the host's git running what the negative control planted.
    for (name, path) in [
        ("git-config-worktree-created", proj(".git/config.worktree")),
        ("git-commondir-created", proj("sub/.git/commondir")),
        ("git-new-file-in-git-dir", proj(".git/future-config")),
    ] {
        add(
            name,
            probe_argv(&[&"write", &path]),
            errno("EROFS"),
            Some(exists(path)),
            iso(ok()),
        );
    }
    for (name, path) in [
        ("git-objects-writable", proj(".git/objects/made-by-probe")),
        ("git-refs-writable", proj(".git/refs/made-by-probe")),
    ] {
        add(
            name,
            probe_argv(&[&"write", &path]),
            ok(),
            Some(content_is(path, PROBE_WROTE)),
            Role::Positive,
        );
    }
    // `.garuda` is read-only whether it exists or not: the fixture has none, so the policy
    // created an empty one, and nothing can be planted in it.
    add(
        "garuda-settings-planted",
        probe_argv(&[&"write", &proj(".garuda/settings.json")]),
        errno("EROFS"),
        Some(exists(proj(".garuda/settings.json"))),
        iso(ok()),
    );

    // Secrets.
    let secrets = (util::HOME_SECRET_FILES.iter().map(|(n, r)| (*n, home(r)))).chain(
        util::PROJECT_SECRET_FILES
            .iter()
            .map(|(n, r)| (*n, proj(r))),
    );
    for (name, path) in secrets {
        add(
            name,
            probe_argv(&[&"read", &path]),
            unreadable(),
            None,
            iso(ok()),
        );
    }

    // Processes and /tmp.
    add(
        "tmp-is-private",
        probe_argv(&[&"read", &fx.host_tmp_file]),
        errno("ENOENT"),
        None,
        iso(ok()),
    );
    add(
        "proc-shows-only-the-sandbox",
        probe_argv(&[&"procs"]),
        // The namespace's init and the probe.
        procs_at_most(3),
        None,
        iso(procs_more_than(3)),
    );

    // Network: a server the test itself runs on the host's loopback.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    add(
        "tcp-to-host-loopback",
        probe_argv(&[&"tcp-connect", &listener.local_addr().unwrap().to_string()]),
        // Both executors bring up the sandbox's own loopback, where nothing listens.
        errno("ECONNREFUSED"),
        Some(Box::new(move || listener.accept().is_ok())),
        iso(ok()),
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    add(
        "udp-to-host-loopback",
        probe_argv(&[&"udp-send", &udp.local_addr().unwrap().to_string()]),
        // Sent into the sandbox's own loopback, where nobody receives it.
        ok(),
        Some(Box::new(move || {
            let mut buf = [0u8; 64];
            udp.recv_from(&mut buf)
                .is_ok_and(|(n, _)| &buf[..n] == b"garuda-probe")
        })),
        iso(ok()),
    );

    // Kernel interfaces closed by seccomp. Where the real call would be harmful on the host,
    // the probe passes a bad argument: the host kernel names the argument (EBADF, EINVAL,
    // EFAULT, ESRCH), the filter answers EPERM before the kernel looks.
    let seccomp: [(&'static str, &'static str, Expect); 15] = [
        ("seccomp-tiocsti", "tiocsti", errno("EBADF")),
        ("seccomp-ptrace-bogus", "ptrace-bogus", errno("ESRCH")),
        (
            "seccomp-process-vm-readv",
            "process-vm-readv",
            errno("EINVAL"),
        ),
        (
            "seccomp-io-uring",
            "io-uring",
            line(&["errno=EFAULT", "errno=EINVAL"]),
        ),
        ("seccomp-unshare-user", "unshare-user", ok()),
        // No vsock driver on the host answers EAFNOSUPPORT; either way not the filter.
        (
            "seccomp-vsock",
            "vsock",
            line(&["ok", "errno=EAFNOSUPPORT"]),
        ),
        ("seccomp-userfaultfd", "userfaultfd", ok()),
        (
            "seccomp-perf-event-open",
            "perf-event-open",
            errno("EFAULT"),
        ),
        ("seccomp-bpf", "bpf", errno("EINVAL")),
        ("seccomp-keyctl", "keyctl", errno("EOPNOTSUPP")),
        (
            "seccomp-fsopen",
            "fsopen",
            // Root may create a filesystem context (others: see HOST_PASSES).
            ok(),
        ),
        ("seccomp-open-tree", "open-tree", ok()),
        ("seccomp-mount-setattr", "mount-setattr", errno("EINVAL")),
        (
            "seccomp-move-mount",
            "move-mount",
            // Root: nothing to move (others: see HOST_PASSES).
            errno("ENOENT"),
        ),
        // Attach to the parent (a shell, see below) without stopping it; the attachment
        // ends with the probe.
        ("seccomp-ptrace-parent", "ptrace-parent", ok()),
    ];
    for (name, sub, host) in seccomp {
        let argv = if sub == "ptrace-parent" {
            // The shell stays the probe's parent (the probe is not its last command), so on
            // the host the probe attaches to a throwaway shell, not to the test process.
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "\"$0\" ptrace-parent; exit $?".into(),
                PROBE.into(),
            ]
        } else {
            probe_argv(&[&sub])
        };
        add(name, argv, errno("EPERM"), None, iso(host));
    }

    // Credentials of the process.
    add(
        "no-new-privs",
        probe_argv(&[&"status"]),
        status_field("NoNewPrivs", "1"),
        None,
        iso(status_field("NoNewPrivs", "0")),
    );
    add(
        "no-capabilities",
        probe_argv(&[&"status"]),
        status_field("CapEff", "0000000000000000"),
        None,
        // Root's host capabilities; an ordinary user has none (see HOST_PASSES).
        iso(status_field_not("CapEff", "0000000000000000")),
    );
    add(
        "seccomp-filter-installed",
        probe_argv(&[&"status"]),
        status_field("Seccomp", "2"),
        None,
        iso(status_field("Seccomp", "0")),
    );
    add(
        "env-has-no-secrets",
        probe_argv(&[&"env"]),
        env_without_secrets(&fx.home),
        None,
        Role::SharedLayer,
    );

    // A project under /tmp stays visible and writable inside the private /tmp.
    let tmp_proj = fx.tmp_policy.project_root.clone();
    for (name, argv, effect) in [
        (
            "tmp-project-readable",
            probe_argv(&[&"read", &tmp_proj.join("seed.txt")]),
            None,
        ),
        (
            "tmp-project-writable",
            probe_argv(&[&"write", &tmp_proj.join("made-by-probe")]),
            Some(content_is(tmp_proj.join("made-by-probe"), PROBE_WROTE)),
        ),
    ] {
        cases.push(Case {
            name,
            argv,
            project: Project::Tmp,
            expect: ok(),
            effect,
            role: Role::Positive,
        });
    }
    cases
}

/// Serialises the fork bombs against every other run: a non-root `bubblewrap` run is bounded
/// by `RLIMIT_NPROC`, which counts all of the user's processes, so a host fork bomb running
/// beside it would make it fail for the wrong reason (and inflate its limit).
static FORK_BOMB_LOCK: RwLock<()> = RwLock::new(());

/// The result of one case: `Ok(None)` passed, `Ok(Some(note))` passed or not run as listed
/// (the note says why), `Err` failed.
type CaseResult = Result<Option<String>, String>;

/// Run one case on `kind`.
fn run_case(kind: ExecutorKind, fx: &Fixture, case: &Case) -> CaseResult {
    let not_run = (!kind.is_sandbox())
        .then(|| exception(HOST_NOT_RUN, case.name))
        .flatten();
    if let Some(e) = not_run {
        return Ok(Some(format!("not run on {kind}: {}", e.why)));
    }
    let policy = match case.project {
        Project::Main => &fx.policy,
        Project::Tmp => &fx.tmp_policy,
    };
    let out = {
        let _guard = if case.name == "fork-bomb-bounded" {
            (
                None,
                Some(FORK_BOMB_LOCK.write().unwrap_or_else(|e| e.into_inner())),
            )
        } else {
            (
                Some(FORK_BOMB_LOCK.read().unwrap_or_else(|e| e.into_inner())),
                None,
            )
        };
        executor_of(kind)
            .run(
                &CommandSpec::new(case.argv.clone()),
                policy,
                StdioMode::Capture,
            )
            .map_err(|e| format!("{kind} could not run {:?}: {e}", case.argv))?
    };
    let shown = format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status,
        truncate(&out.stdout.text()),
        truncate(&out.stderr.text())
    );
    // The probe always exits 0: anything else (127 not found, 126, a signal, the timeout) means
    // the case did not run, which is never a pass.
    if out.status != ExitStatus::Code(0) || !out.stderr.bytes.is_empty() {
        return Err(format!("the probe did not run cleanly: {shown}"));
    }
    // Shown with `--nocapture`: what each executor answered.
    eprintln!(
        "contract {kind}: {:<28} {}",
        case.name,
        truncate(&stdout_line(&out).replace('\n', " "))
    );
    let passes = (case.expect.check)(&out);
    let effect = case.effect.as_ref().map(|f| f());
    let fail = |msg: String| Err(format!("{msg}; got {shown}; effect observed: {effect:?}"));
    match (&case.role, kind.is_sandbox()) {
        (Role::Positive, _) => {
            if !passes || effect == Some(false) {
                return fail(format!("expected {} with its effect", case.expect.what));
            }
        }
        (Role::Isolation { .. } | Role::SharedLayer, true) => {
            if !passes || effect == Some(true) {
                return fail(format!("expected {} and no effect", case.expect.what));
            }
        }
        (Role::SharedLayer, false) => {
            let Some(e) = exception(HOST_PASSES, case.name) else {
                return fail("a shared-layer case must be listed in HOST_PASSES".into());
            };
            if !passes || effect == Some(true) {
                return fail(format!(
                    "listed as passing on the host ({}) but it did not: expected {}",
                    e.why, case.expect.what
                ));
            }
            return Ok(Some(format!("passes on {kind} by construction: {}", e.why)));
        }
        (Role::Isolation { host, host_effect }, false) => {
            if let Some(e) = exception(HOST_PASSES, case.name) {
                if !passes || effect == Some(true) {
                    return fail(format!(
                        "listed as passing on the host ({}) but it did not: expected {}",
                        e.why, case.expect.what
                    ));
                }
                return Ok(Some(format!("passes on {kind} here, as listed: {}", e.why)));
            }
            // The negative control: the host shows its own specific answer, the attempted
            // action takes effect, and so the case, which the sandboxes pass, fails here.
            if !(host.check)(&out) || effect.is_some_and(|e| e != *host_effect) {
                return fail(format!(
                    "the host control must show {} (effect: {host_effect})",
                    host.what
                ));
            }
            let host_passed_the_case = passes && effect != Some(true);
            if host_passed_the_case {
                return fail("the host executor passed an isolation case: it cannot fail".into());
            }
        }
    }
    Ok(None)
}

fn truncate(s: &str) -> String {
    match s.char_indices().nth(400) {
        Some((end, _)) => format!("{}… ({} bytes)", &s[..end], s.len()),
        None => s.to_string(),
    }
}

/// Whether `kind` can run here; `false` only when `GARUDA_CONTRACT_ALLOW_MISSING` names it.
fn require_available(kind: ExecutorKind) -> bool {
    let probe = probe_executors()
        .into_iter()
        .find(|p| p.kind == kind)
        .expect("every kind is probed");
    if probe.available {
        return true;
    }
    let allowed = std::env::var("GARUDA_CONTRACT_ALLOW_MISSING").unwrap_or_default();
    if allowed
        .split([',', ' '])
        .any(|name| name.trim() == kind.name())
    {
        util::say_not_tested(&format!(
            "the contract suite on {kind} ({}; GARUDA_CONTRACT_ALLOW_MISSING allows it)",
            probe.detail
        ));
        return false;
    }
    panic!(
        "executor {kind} is not available on this machine: {} \
         (set GARUDA_CONTRACT_ALLOW_MISSING={kind} to accept that)",
        probe.detail
    );
}

/// Run the whole table on `kind` with a few worker threads; panic with every failure.
fn run_contract(kind: ExecutorKind) {
    assert!(
        !Path::new(PROBE).starts_with("/tmp"),
        "the probe {PROBE} lives under /tmp, which every sandbox replaces: build with a \
         CARGO_TARGET_DIR outside /tmp"
    );
    if !require_available(kind) {
        return;
    }
    let fx = Fixture::new(kind.name());
    let cases = cases(&fx, kind);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(&str, CaseResult)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let r = run_case(kind, &fx, case);
                results.lock().unwrap().push((case.name, r));
            });
        }
    });
    // A sandbox that let the write through must not leave the file behind.
    if is_root() {
        let _ = std::fs::remove_file(format!(
            "/etc/garuda-contract-{}-{kind}",
            std::process::id()
        ));
    }
    let _ = std::fs::remove_file(format!(
        "/usr/garuda-contract-{}-{kind}",
        std::process::id()
    ));
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(name, _)| *name);
    assert_eq!(results.len(), cases.len());
    let mut failures = Vec::new();
    for (name, r) in &results {
        match r {
            Ok(None) => {}
            Ok(Some(note)) => eprintln!("contract {kind}: {name}: {note}"),
            Err(e) => failures.push(format!("  {name}: {e}")),
        }
    }
    let memory = supervisor_memory(kind, &fx);
    if let Err(e) = memory {
        failures.push(format!("  supervisor-memory: {e}"));
    }
    assert!(
        failures.is_empty(),
        "{kind}: {} of {} cases failed:\n{}",
        failures.len(),
        cases.len() + 1,
        failures.join("\n")
    );
}

/// `garuda sandbox --executor KIND --capture` with 1 GiB of output: the supervisor's resident
/// size stays under [`SUPERVISOR_RSS_LIMIT`] and it prints exactly the capped output.
fn supervisor_memory(kind: ExecutorKind, fx: &Fixture) -> Result<(), String> {
    let _guard = FORK_BOMB_LOCK.read().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(util::garuda_bin()?)
        .args([
            "sandbox",
            "--executor",
            kind.name(),
            "--capture",
            "--timeout",
        ])
        .arg(util::RUN_TIMEOUT.as_secs().to_string())
        // The /tmp project: the main one is changed by the host's negative controls.
        .arg("--project")
        .arg(fx.tmp_project.path())
        .arg("--")
        .args([PROBE, "spam", &SPAM_BYTES.to_string()])
        .current_dir(fx.tmp_project.path())
        .env_clear()
        .envs(fx.vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning garuda: {e}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + util::RUN_TIMEOUT + Duration::from_secs(10);
    let mut peak = 0;
    let status = loop {
        if let Some(rss) = util::vm_rss(pid) {
            peak = peak.max(rss);
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("garuda did not finish".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = out.join().unwrap().map_err(|e| e.to_string())?;
    let err = err.join().unwrap().map_err(|e| e.to_string())?;
    let cap = fx.policy.limits.output_cap;
    let marker = truncation_marker(SPAM_BYTES - cap as u64);
    if status.code() != Some(0)
        || out.len() != cap + marker.len()
        || !out.ends_with(marker.as_bytes())
    {
        return Err(format!(
            "garuda sandbox --capture: {status}, {} bytes of stdout (want {}), stderr {:?}",
            out.len(),
            cap + marker.len(),
            truncate(&err)
        ));
    }
    if peak == 0 || peak > SUPERVISOR_RSS_LIMIT {
        return Err(format!(
            "the supervisor's peak VmRSS was {peak} bytes (limit {SUPERVISOR_RSS_LIMIT})"
        ));
    }
    eprintln!("contract {kind}: supervisor peak VmRSS {} KiB", peak / 1024);
    Ok(())
}

#[test]
fn landlock_passes_the_contract() {
    run_contract(ExecutorKind::Landlock);
}

#[test]
fn bubblewrap_passes_the_contract() {
    run_contract(ExecutorKind::Bubblewrap);
}

/// The negative control: the host executor fails every isolation case.
#[test]
fn host_fails_every_isolation_case() {
    run_contract(ExecutorKind::Host);
}

/// No executor is left out: each is run here or listed as not runnable on Linux.
#[test]
fn every_executor_is_accounted_for() {
    for kind in ExecutorKind::ALL {
        let run = RUN_ON_LINUX.contains(&kind);
        let listed = NOT_RUNNABLE_ON_LINUX.iter().any(|(k, _)| *k == kind);
        assert!(
            run != listed,
            "{kind}: run {run}, listed as not runnable {listed}"
        );
    }
    for (kind, why) in NOT_RUNNABLE_ON_LINUX {
        let probe = probe_executors()
            .into_iter()
            .find(|p| p.kind == *kind)
            .unwrap();
        assert!(
            !probe.available,
            "{kind} is listed as not runnable on Linux ({why}) but probes available: {}",
            probe.detail
        );
        eprintln!("contract {kind}: not run on Linux: {why}");
    }
}

/// Every exception names a case of the table, so none can hide a renamed case.
#[test]
fn exceptions_name_real_cases() {
    let fx = Fixture::new("names");
    let names: Vec<&str> = cases(&fx, ExecutorKind::Host)
        .iter()
        .map(|c| c.name)
        .collect();
    let mut seen = names.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), names.len(), "case names must be unique");
    for e in HOST_PASSES.iter().chain(HOST_NOT_RUN) {
        // `write-etc` exists only as root.
        if e.case == "write-etc" && !is_root() {
            continue;
        }
        assert!(
            names.contains(&e.case),
            "exception for unknown case {}",
            e.case
        );
    }
}
