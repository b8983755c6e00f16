//! The confined agent process: `garuda agent` and the supervisor code that starts it.
//!
//! The agent reads model output, so it holds no right at all: it can only ask the supervisor,
//! over one socket pair, through the API of `garuda-ipc`. Two halves live here, because the
//! agent is the same binary re-executed (`garuda agent`, hidden):
//!
//! - [`spawn`] — the supervisor's side: [`spawn_agent`] starts it in its own user, mount,
//!   PID, IPC, UTS and network namespaces, with a view that holds nothing of the user's, an
//!   empty environment, and its end of the socket pair at descriptor 3;
//! - [`confine`] — the agent's side, run by [`main`] before anything else: dumpable off, no
//!   new privileges, capabilities cleared, Landlock with no path rule, the seccomp filter of
//!   [`seccomp`]; then the self-check, and a refusal to run if any part of it fails;
//! - [`probe`] — `garuda agent --probe`, the tests' view from inside.
//!
//! After the checks, the socket goes to `garuda_agent::run` (the model loop, in its own crate,
//! which never links the supervisor's trusted code). See `docs/agent-confinement.md`.

pub mod confine;
pub mod probe;
pub mod seccomp;
pub mod spawn;

use std::ffi::OsString;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::net::UnixStream;

pub use spawn::{
    availability, spawn_agent, AgentExit, AgentProcess, AgentProxy, AgentSpawn, AgentSpawnError,
    CHANNEL_FD,
};

/// Exit code of `garuda agent` when a layer of its confinement cannot be put in place.
pub const CANNOT_CONFINE: i32 = 118;
/// Exit code of `garuda agent` when it confined itself but its self-check failed.
pub const SELF_CHECK_FAILED: i32 = 119;
/// Exit code of `garuda agent` for arguments it does not understand.
pub const BAD_ARGUMENTS: i32 = 2;

/// The landlock crate's and the spawner's view of the kernel's Landlock ABI (`None`:
/// unavailable). Tests use it to know which errno a TCP probe gets.
pub fn kernel_landlock_abi() -> Option<u32> {
    crate::sys::landlock_abi().ok()
}

fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// `garuda agent [--proxy-port N] [--probe PROBE-ARGS…]`.
struct Args {
    proxy_port: Option<u16>,
    probe: Option<probe::ProbeSpec>,
}

fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut out = Args {
        proxy_port: None,
        probe: None,
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--proxy-port") => {
                let v = it.next().unwrap_or_default();
                out.proxy_port = Some(spawn::proxy_port_arg(&v).ok_or("--proxy-port 1-65535")?);
            }
            Some("--probe") => {
                out.probe = Some(probe::ProbeSpec::parse(it.by_ref()).map_err(|e| e.to_string())?);
            }
            _ => return Err(format!("unknown argument {}", a.to_string_lossy())),
        }
    }
    Ok(out)
}

/// The body of `garuda agent`: confine, check, then serve the channel (or, with `--probe`,
/// write the probes' lines to it). Returns the exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("garuda agent: {e}");
            return BAD_ARGUMENTS;
        }
    };
    let refuse = |r: confine::Refusal| {
        for line in r.lines() {
            eprintln!("garuda agent: refusing to run: {line}");
        }
        r.exit_code()
    };
    // Claimed before the lock; whether the spawner put a socket there is part of the check.
    let channel = crate::sys::take_channel_fd();
    // The preload hook: TLS roots and configuration are read here (the model loop's issue);
    // probe mode needs nothing.
    let (mut confined, outside) = match confine::confine(args.proxy_port, || Ok(())) {
        Ok(c) => c,
        Err(r) => return refuse(r),
    };
    let mut failed = match confine::self_check(&mut confined, &outside) {
        Ok(()) => Vec::new(),
        Err(confine::Refusal::CheckFailed(failed)) => failed,
        Err(other) => return refuse(other),
    };
    if let Err(e) = &channel {
        failed.push(format!("no channel at descriptor 3: {e}"));
    }
    if !failed.is_empty() {
        return refuse(confine::Refusal::CheckFailed(failed));
    }
    let Ok(channel) = channel else {
        return SELF_CHECK_FAILED;
    };
    let mut channel = UnixStream::from(channel);
    match args.probe {
        Some(mut spec) => {
            spec.proxy = args
                .proxy_port
                .map(|p| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, p)));
            let mut text = String::new();
            for r in probe::run(&spec, confined.status()) {
                text.push_str(&format!("{r}\n"));
            }
            match channel.write_all(text.as_bytes()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("garuda agent: writing the probes: {e}");
                    1
                }
            }
        }
        None => match garuda_agent::run(channel) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("garuda agent: {e}");
                1
            }
        },
    }
}
