//! The agent's side: `garuda agent` confines itself, then proves it, before it reads a frame.
//!
//! [`confine`] runs first thing in `garuda agent`, while the process is single-threaded:
//!
//! 1. facts only the spawner can have made true are read while files can still be opened
//!    ([`Outside`]): the environment, the user namespace's map, the network interfaces, PID 1,
//!    whether the host's `/etc/hostname` is in the view; `/proc/self/status` is opened for
//!    the checks after the lock;
//! 2. the preload hook: whatever the agent must read from disk (TLS roots, config) is read
//!    now — nothing can be opened afterwards;
//! 3. `PR_SET_DUMPABLE 0`, `PR_SET_NO_NEW_PRIVS`, every capability set cleared;
//! 4. Landlock (the `landlock` crate, [`CompatLevel::HardRequirement`]): every filesystem
//!    right of the kernel's ABI handled with no path rule; from ABI 4 TCP bind and connect
//!    handled with one rule, connect to the proxy bridge's port; from ABI 6 signals and
//!    abstract unix sockets scoped. Anything short of fully enforced is a refusal;
//! 5. the agent's seccomp filter ([`super::seccomp`]).
//!
//! Then [`self_check`] (the layers, seen from inside) decides. A failure is a [`Refusal`]:
//! `garuda agent` prints it on stderr and exits with [`super::CANNOT_CONFINE`] or
//! [`super::SELF_CHECK_FAILED`]. There is no switch to skip a layer or a check.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::net::UnixDatagram;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::sys;

/// Why the agent will not run. Printed on stderr, one line per problem.
#[derive(Debug)]
pub enum Refusal {
    /// A layer could not be put in place (the kernel lacks it, or a call failed).
    CannotConfine(String),
    /// Confined, but at least one check saw something wrong.
    CheckFailed(Vec<String>),
}

impl Refusal {
    /// The exit code of `garuda agent` for this refusal.
    pub fn exit_code(&self) -> i32 {
        match self {
            Refusal::CannotConfine(_) => super::CANNOT_CONFINE,
            Refusal::CheckFailed(_) => super::SELF_CHECK_FAILED,
        }
    }

    /// The lines to print.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Refusal::CannotConfine(why) => vec![format!("cannot confine itself: {why}")],
            Refusal::CheckFailed(failed) => failed
                .iter()
                .map(|f| format!("self-check failed: {f}"))
                .collect(),
        }
    }
}

/// What the agent saw of its surroundings before the lock, when it could still open files.
#[derive(Debug, Clone)]
pub struct Outside {
    /// Names of the environment variables.
    pub env_names: Vec<String>,
    /// `/proc/self/uid_map`.
    pub uid_map: String,
    /// `/proc/net/dev`.
    pub net_dev: String,
    /// `/proc/1/cmdline`.
    pub pid1_cmdline: Vec<u8>,
    /// The outcome of opening `/etc/hostname`.
    pub etc_hostname: Result<(), i32>,
    /// `Threads:` of `/proc/self/status`.
    pub threads: Option<u64>,
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Outside {
    /// Read the facts (before the lock).
    pub fn read() -> Outside {
        let text = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Outside {
            env_names: std::env::vars_os()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect(),
            uid_map: text("/proc/self/uid_map"),
            net_dev: text("/proc/net/dev"),
            pid1_cmdline: pid1_cmdline(),
            etc_hostname: File::open("/etc/hostname")
                .map(drop)
                .map_err(|e| errno_of(&e)),
            threads: status_field(&text("/proc/self/status"), "Threads"),
        }
    }

    /// What the spawner must have made true; each failure as one line.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.env_names.is_empty() {
            out.push(format!(
                "the environment is not empty ({} variables; the spawner gives none)",
                self.env_names.len()
            ));
        }
        let map: Vec<&str> = self.uid_map.split_whitespace().collect();
        if !(map.len() == 3 && map[2] == "1") {
            out.push(format!(
                "not in a user namespace of its own (uid_map is {:?}, the spawner maps one id)",
                self.uid_map.trim()
            ));
        }
        let interfaces: Vec<&str> = self
            .net_dev
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        if interfaces != ["lo"] {
            out.push(format!(
                "not in a network namespace of its own (interfaces: {})",
                interfaces.join(", ")
            ));
        }
        if !self
            .pid1_cmdline
            .starts_with(sys::REAPER_ARGV0.to_bytes_with_nul())
        {
            out.push(
                "not in a PID namespace of its own (PID 1 is not the sandbox's reaper)".into(),
            );
        }
        match self.etc_hostname {
            Err(libc::ENOENT) => {}
            Ok(()) => out.push("the host's /etc/hostname is in its view (opened)".into()),
            Err(e) => out.push(format!(
                "opening /etc/hostname failed with {} instead of ENOENT (not in the view)",
                errno_name(e)
            )),
        }
        if self.threads != Some(1) {
            out.push(format!(
                "{:?} threads before the lock (Landlock and seccomp cover one thread: it must be the only one)",
                self.threads
            ));
        }
        out
    }
}

/// PID 1's command line. The agent starts once PID 1's `execve` of the reaper has passed the
/// point where its close-on-exec descriptors close, but the kernel sets the new program's
/// arguments a moment later: read in that window the file is empty. So an empty read is read
/// again, for up to about 100 ms; anything else (or still nothing) is what the check judges.
fn pid1_cmdline() -> Vec<u8> {
    reread_while_empty(|| std::fs::read("/proc/1/cmdline").unwrap_or_default(), 100)
}

/// `read`, again (1 ms apart, at most `tries` times in all) only while it gives nothing: the
/// first answer that is not empty is returned as it is, so a wrong one is judged, never read
/// again until it looks right; still nothing (or a read error) is returned empty.
fn reread_while_empty(mut read: impl FnMut() -> Vec<u8>, tries: usize) -> Vec<u8> {
    for _ in 0..tries {
        let answer = read();
        if !answer.is_empty() {
            return answer;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Vec::new()
}

/// A field of `/proc/self/status` as a number.
pub fn status_field(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// A field of `/proc/self/status` as its text.
pub fn status_text<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then_some(v.trim())
    })
}

/// `EACCES`, `EPERM`, … for the errnos the self-check and the probes meet; `errno N` otherwise.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::EROFS => "EROFS",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EIO => "EIO",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// Problems `/proc/self/status` shows after the lock.
pub fn status_problems(status: &str) -> Vec<String> {
    let mut out = Vec::new();
    match status_field(status, "NoNewPrivs") {
        Some(1) => {}
        other => out.push(format!("NoNewPrivs is {other:?}, not 1")),
    }
    match status_field(status, "Seccomp") {
        Some(2) => {}
        other => out.push(format!("Seccomp is {other:?}, not 2 (filter)")),
    }
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        match status_text(status, set) {
            Some(v) if !v.is_empty() && v.bytes().all(|b| b == b'0') => {}
            other => out.push(format!("{set} is {other:?}, not all zero")),
        }
    }
    out
}

/// The agent once confined: `/proc/self/status`, opened before the lock (Landlock refuses to
/// open it afterwards), read again at each use.
#[derive(Debug)]
pub struct Confined {
    status: File,
}

impl Confined {
    /// `/proc/self/status` now.
    pub fn status(&mut self) -> io::Result<String> {
        self.status.seek(SeekFrom::Start(0))?;
        let mut s = String::new();
        self.status.read_to_string(&mut s)?;
        Ok(s)
    }
}

fn crate_abi(kernel: u32) -> ABI {
    match kernel {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        9 => ABI::V9,
        // A newer kernel: every right the crate knows (a right added later is not named
        // here yet; see docs/agent-confinement.md).
        _ => ABI::V10,
    }
}

/// The agent's Landlock domain: every filesystem right of `abi` handled, no path rule; TCP
/// (and, from ABI 10, UDP) handled with one rule, connect to `proxy_port`; signals and
/// abstract unix sockets scoped.
fn landlock(abi: ABI, proxy_port: Option<u16>) -> Result<(), String> {
    let err = |e: landlock::RulesetError| e.to_string();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    let net = abi >= ABI::V4;
    if net {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    if let (true, Some(port)) = (net, proxy_port) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "Landlock is {:?}, not fully enforced",
            status.ruleset
        ));
    }
    Ok(())
}

/// Put every layer in place (see the module documentation). `preload` runs before the lock.
pub fn confine(
    proxy_port: Option<u16>,
    preload: impl FnOnce() -> Result<(), String>,
) -> Result<(Confined, Outside), Refusal> {
    let cannot = |what: &str| {
        let what = what.to_string();
        move |e: io::Error| Refusal::CannotConfine(format!("{what}: {e}"))
    };
    let outside = Outside::read();
    let status = File::open("/proc/self/status").map_err(cannot("open /proc/self/status"))?;
    preload().map_err(Refusal::CannotConfine)?;
    let kernel_abi = sys::landlock_abi().map_err(cannot("Landlock is not available"))?;
    sys::set_dumpable(false).map_err(cannot("PR_SET_DUMPABLE"))?;
    sys::set_no_new_privs().map_err(cannot("PR_SET_NO_NEW_PRIVS"))?;
    sys::clear_capabilities(super::cap_last_cap()).map_err(cannot("clearing capabilities"))?;
    landlock(crate_abi(kernel_abi), proxy_port).map_err(Refusal::CannotConfine)?;
    let program = super::seccomp::program().map_err(|e| Refusal::CannotConfine(e.to_string()))?;
    seccompiler::apply_filter_all_threads(&program)
        .map_err(|e| Refusal::CannotConfine(format!("installing the seccomp filter: {e}")))?;
    Ok((Confined { status }, outside))
}

/// The checks, from inside, after [`confine`]: every problem, or `Ok`.
pub fn self_check(confined: &mut Confined, outside: &Outside) -> Result<(), Refusal> {
    let mut failed = outside.problems();
    match confined.status() {
        Ok(status) => failed.extend(status_problems(&status)),
        Err(e) => failed.push(format!("cannot read /proc/self/status: {e}")),
    }
    match sys::is_dumpable() {
        Ok(false) => {}
        Ok(true) => failed.push("the process is still dumpable".into()),
        Err(e) => failed.push(format!("PR_GET_DUMPABLE: {e}")),
    }
    // Landlock: "/" exists in every view; only Landlock refuses to open it.
    let root = File::open("/").map(drop).map_err(|e| errno_of(&e));
    if root != Err(libc::EACCES) {
        failed.push(format!(
            "opening / gave {:?} instead of EACCES (Landlock)",
            root.map_err(errno_name)
        ));
    }
    // seccomp: EPERM comes before the kernel looks at the (never executable) directory.
    let exec = errno_of(&sys::execveat_cwd());
    if exec != libc::EPERM {
        failed.push(format!(
            "execveat gave {} instead of EPERM (seccomp)",
            errno_name(exec)
        ));
    }
    let unix = UnixDatagram::unbound().map(drop).map_err(|e| errno_of(&e));
    if unix != Err(libc::EPERM) {
        failed.push(format!(
            "socket(AF_UNIX) gave {:?} instead of EPERM (seccomp)",
            unix.map_err(errno_name)
        ));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Refusal::CheckFailed(failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFINED: &str = "Name:\tgaruda\nThreads:\t1\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\n";

    #[test]
    fn a_confined_status_passes_and_each_missing_layer_is_named() {
        assert!(status_problems(CONFINED).is_empty());
        let cases = [
            ("NoNewPrivs:\t1", "NoNewPrivs:\t0", "NoNewPrivs"),
            ("Seccomp:\t2", "Seccomp:\t0", "Seccomp"),
            (
                "CapBnd:\t0000000000000000",
                "CapBnd:\t000001ffffffffff",
                "CapBnd",
            ),
            (
                "CapEff:\t0000000000000000",
                "CapEff:\t0000000000000400",
                "CapEff",
            ),
            ("CapAmb:\t0000000000000000\n", "", "CapAmb"),
        ];
        for (from, to, named) in cases {
            let status = CONFINED.replace(from, to);
            let problems = status_problems(&status);
            assert_eq!(problems.len(), 1, "{named}: {problems:?}");
            assert!(problems[0].starts_with(named), "{problems:?}");
        }
    }

    fn spawned() -> Outside {
        Outside {
            env_names: vec![],
            uid_map: "      1000       1000          1\n".into(),
            net_dev: "Inter-| Receive\n face |bytes\n    lo: 0 0\n".into(),
            pid1_cmdline: b"garuda-sandbox-init\x002\x005\x00".to_vec(),
            etc_hostname: Err(libc::ENOENT),
            threads: Some(1),
        }
    }

    #[test]
    fn the_spawners_surroundings_pass_and_each_missing_one_is_named() {
        assert_eq!(spawned().problems(), Vec::<String>::new());
        let mut o = spawned();
        o.env_names = vec!["ANTHROPIC_API_KEY".into()];
        assert!(o.problems()[0].contains("environment"));
        let mut o = spawned();
        o.uid_map = "         0          0 4294967295\n".into();
        assert!(o.problems()[0].contains("user namespace"));
        let mut o = spawned();
        o.net_dev.push_str("  eth0: 0 0\n");
        assert!(o.problems()[0].contains("network namespace"));
        let mut o = spawned();
        o.pid1_cmdline = b"/sbin/init\0".to_vec();
        assert!(o.problems()[0].contains("PID namespace"));
        let mut o = spawned();
        o.etc_hostname = Ok(());
        assert!(o.problems()[0].contains("/etc/hostname"));
        let mut o = spawned();
        o.threads = Some(3);
        assert!(o.problems()[0].contains("threads"));
    }

    /// PID 1's command line is read again only while it is empty: a wrong one is judged as it
    /// first came (the retry cannot turn a failure into a pass), and endless emptiness ends.
    #[test]
    fn pid1_cmdline_is_read_again_only_while_empty() {
        let answers = |list: Vec<&'static [u8]>| {
            let mut it = list.into_iter();
            move || it.next().unwrap_or(b"").to_vec()
        };
        let judged = |cmdline: Vec<u8>| {
            let mut o = spawned();
            o.pid1_cmdline = cmdline;
            o.problems()
        };
        let reaper: &[u8] = b"garuda-sandbox-init\x002\x00";
        // The exec's window: empty twice, then the reaper's arguments: a pass.
        let got = reread_while_empty(answers(vec![b"", b"", reaper]), 100);
        assert_eq!(got, reaper);
        assert_eq!(judged(got), Vec::<String>::new());
        // Negative control: a wrong PID 1 first, the reaper after: the wrong one is judged.
        let got = reread_while_empty(answers(vec![b"/sbin/init\x00", reaper]), 100);
        assert_eq!(got, b"/sbin/init\x00");
        assert!(judged(got)[0].contains("PID namespace"));
        // Never anything: the reads stop after `tries`, and the empty answer fails.
        let mut reads = 0;
        let got = reread_while_empty(
            || {
                reads += 1;
                Vec::new()
            },
            5,
        );
        assert_eq!(reads, 5);
        assert!(judged(got)[0].contains("PID namespace"));
    }
}
