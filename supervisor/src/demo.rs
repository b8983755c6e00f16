//! `garuda demo`: the sandbox at work on any machine, on files the demo makes itself.
//!
//! It makes a fresh folder under `/var/tmp` holding a home with a demo secret
//! (`~/.ssh/id_ed25519`, not a key) and a throwaway project, and runs one `garuda sandbox` over
//! them with that home — so the user's policy is not read and Garuda's home (audit log
//! included) is in the folder too; the machine's managed policy applies, as in every run.
//! The sandboxed command is this program's hidden `demo-probe`, which tries four things and
//! prints what happened to each with its errno: write in the project, read the secret, write
//! in the home, connect to a port this process listens on at the host's loopback. The demo
//! then checks the files from outside and prints a short report.
//!
//! Not `/tmp`: both Linux executors give the command a private `/tmp`, so a secret there would
//! be out of reach for the wrong reason (ENOENT, not EACCES), and a running `garuda` that lives
//! under `/tmp` (a fresh clone there) would be invisible to the sandbox: the probe runs from a
//! copy in the demo folder.
//!
//! Exit codes: 0 when every expectation held, [`NOT_HELD`] when one did not (the host executor
//! always: it is the negative control), [`crate::cli::SETUP_FAILED`] when the demo could not
//! run.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use garuda_policy::ExecutorChoice;
use garuda_text::{visible, visible_path};

/// Exit code of a demo whose sandbox did not hold (one expectation or more failed).
pub const NOT_HELD: i32 = 1;

/// Where the demo makes its folder: not `/tmp` (see the module doc).
const DEMO_PARENT: &str = "/var/tmp";

/// The demo secret's content: the sandbox must keep it unreadable.
const SECRET: &[u8] = b"garuda demo secret: not a real key\n";

/// What the probe writes in the project.
const WRITTEN: &[u8] = b"written by garuda demo inside the sandbox\n";

/// The demo's folder, removed when dropped.
struct DemoDir(PathBuf);

impl Drop for DemoDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!(
                "garuda demo: could not remove {}: {e}",
                visible_path(&self.0)
            );
        }
    }
}

/// The four results the probe prints, one `KEY RESULT` line each: `ok` or an errno name.
const PROBE_KEYS: [&str; 4] = ["write-inside", "read-secret", "write-outside", "connect"];

/// `garuda demo-probe SECRET INSIDE OUTSIDE PORT`, run inside the sandbox.
pub fn probe(secret: &Path, inside: &Path, outside: &Path, port: u16) -> i32 {
    let write = |path: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(WRITTEN))
    };
    let results = [
        write(inside),
        std::fs::read(secret).map(|_| ()),
        write(outside),
        TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Duration::from_secs(5),
        )
        .map(|_| ()),
    ];
    for (key, result) in PROBE_KEYS.iter().zip(results) {
        match result {
            Ok(()) => println!("{key} ok"),
            Err(e) => println!("{key} {}", errno_name(&e)),
        }
    }
    0
}

/// The symbolic name of an I/O error's errno (the ones the probe can meet), else `errno N`.
fn errno_name(e: &std::io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return format!("{:?}", e.kind());
    };
    let name = match n {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EROFS => "EROFS",
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::ENOSPC => "ENOSPC",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        _ => return format!("errno {n}"),
    };
    name.to_string()
}

/// `garuda demo [--executor E]`; returns the exit code.
pub fn demo(executor: Option<ExecutorChoice>) -> Result<i32> {
    let parent = std::fs::canonicalize(DEMO_PARENT)
        .with_context(|| format!("the demo makes its folder in {DEMO_PARENT}"))?;
    let dir = DemoDir(
        crate::proxy::socket_dir::fresh_dir(&parent, "garuda-demo")
            .with_context(|| format!("making the demo's folder in {}", parent.display()))?,
    );
    let home = dir.0.join("home");
    let project = dir.0.join("project");
    let bin = dir.0.join("bin");
    let secret = home.join(".ssh/id_ed25519");
    let inside = project.join("written-in-the-sandbox.txt");
    let outside = home.join("written-outside-the-project.txt");
    make_files(&home, &project, &bin, &secret)?;
    let probe = bin.join("garuda");
    copy_self(&probe)?;
    // A port open on the host's loopback: a command with network reaches it, a sandboxed one
    // (in its own network namespace) cannot.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("listening on 127.0.0.1 for the network check")?;
    let port = listener.local_addr()?.port();

    println!(
        "garuda demo: a throwaway project and a home with a demo secret in {}; none of your files is used",
        visible_path(&dir.0)
    );
    let garuda = std::env::current_exe().context("finding this program")?;
    let mut cmd = Command::new(garuda);
    cmd.args(["sandbox", "-v", "--timeout", "60", "--project"])
        .arg(&project);
    if let Some(choice) = executor {
        cmd.arg("--executor").arg(choice.to_string());
    }
    cmd.arg("--")
        .arg(&probe)
        .arg("demo-probe")
        .args([&secret, &inside, &outside])
        .arg(port.to_string())
        .current_dir(&project)
        .env("HOME", &home)
        // Garuda's home follows HOME into the demo folder: the user's policy, audit log and
        // keys are neither read nor written.
        .env_remove("GARUDA_HOME");
    let out = cmd.output().context("running garuda sandbox")?;
    drop(listener);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The probe's four lines, in order; anything else means it did not run as planned.
    let results: Vec<&str> = stdout
        .lines()
        .zip(PROBE_KEYS)
        .filter_map(|(l, key)| l.strip_prefix(key)?.strip_prefix(' '))
        .collect();
    let executor_line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("garuda: executor "));
    let (Some(reason), Some(0), [write_inside, read_secret, write_outside, connect]) =
        (executor_line, out.status.code(), results.as_slice())
    else {
        eprint!("{}", visible(&stderr));
        return Err(anyhow!(
            "the sandboxed probe did not report ({}): see garuda's messages above",
            match out.status.code() {
                Some(code) => format!("exit {code}"),
                None => "killed by a signal".to_string(),
            }
        ));
    };
    println!("executor: {}", visible(reason));

    let mut failed = 0;
    let mut line = |what: &str, held: bool, said: String| {
        if held {
            println!("{what}: {said}");
        } else {
            failed += 1;
            println!("{what}: {said} -- NOT as expected");
        }
    };
    // Each file result is checked from outside too: the probe's word alone proves nothing.
    let wrote_inside = std::fs::read(&inside).is_ok_and(|b| b == WRITTEN);
    let what = "wrote inside the project";
    match *write_inside {
        "ok" if wrote_inside => line(what, true, "yes".into()),
        "ok" => line(
            what,
            false,
            "the probe said yes, but the file is not in the project".into(),
        ),
        errno => line(what, false, format!("no ({errno})")),
    }
    let what = "read the demo secret (~/.ssh/id_ed25519)";
    match *read_secret {
        "ok" => line(what, false, "yes".into()),
        errno => line(what, true, format!("no ({errno})")),
    }
    let what = "wrote outside the project (~/written-outside-the-project.txt)";
    match *write_outside {
        errno if errno != "ok" && !outside.exists() => line(what, true, format!("no ({errno})")),
        _ => line(what, false, "yes".into()),
    }
    match *connect {
        "ok" => line(
            "network",
            false,
            "on (reached a port open on this machine's loopback)".into(),
        ),
        errno => line(
            "network",
            true,
            format!("off (a port open on this machine's loopback is out of reach: {errno})"),
        ),
    }
    if failed == 0 {
        println!("the sandbox held: every expectation was met");
        return Ok(0);
    }
    println!("the sandbox did NOT hold: {failed} of 4 expectations failed");
    if reason.starts_with("host ") {
        println!(
            "(the host executor runs commands with your full rights: it has no sandbox{})",
            if executor == Some(ExecutorChoice::Host) {
                ""
            } else {
                " and it ran because no OS sandbox can run here; `garuda doctor` shows why"
            }
        );
    }
    Ok(NOT_HELD)
}

/// The demo's home (with the secret, mode 0600 in a 0700 `.ssh`, as a real key is), project
/// and folder for the probe.
fn make_files(home: &Path, project: &Path, bin: &Path, secret: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let ssh = home.join(".ssh");
    for d in [home, project, bin] {
        std::fs::create_dir(d).with_context(|| format!("making {}", d.display()))?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&ssh)
        .with_context(|| format!("making {}", ssh.display()))?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(secret)
        .and_then(|mut f| f.write_all(SECRET))
        .with_context(|| format!("writing the demo secret {}", secret.display()))?;
    std::fs::write(
        project.join("README"),
        "a throwaway project made by garuda demo\n",
    )
    .with_context(|| format!("writing in {}", project.display()))?;
    Ok(())
}

/// This program, linked (or else copied) into the demo folder, which the sandbox shows: where
/// it was built may be hidden from the command (a clone under `/tmp`).
fn copy_self(to: &Path) -> Result<()> {
    let me = std::env::current_exe().context("finding this program")?;
    if std::fs::hard_link(&me, to).is_ok() {
        return Ok(());
    }
    // /proc/self/exe is this very program even if its file was replaced meanwhile.
    std::fs::copy("/proc/self/exe", to)
        .or_else(|_| std::fs::copy(&me, to))
        .with_context(|| format!("copying {} to {}", me.display(), to.display()))?;
    Ok(())
}
