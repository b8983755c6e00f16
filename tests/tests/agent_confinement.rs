//! The confined agent (`garuda agent`), started the way the supervisor starts it
//! (`garuda_supervisor::agent::spawn_agent`), probed from inside.
//!
//! - `confined_agent_probes_each_fail_with_their_errno`: the real `garuda` binary, spawned in
//!   its namespaces with the proxy bridge, runs `--probe` after confining and checking itself,
//!   and reports each probe on its channel. Every probe fails with its exact errno; the proxy
//!   lets the model's host through (the control of the proxy path) and refuses another.
//! - `unconfined_probes_succeed`: the negative control. `garuda-agent-probe` runs the very
//!   same probe function with no confinement: every probe succeeds.
//! - `agent_started_without_the_spawner_refuses_to_run`: `garuda agent` started directly
//!   (no namespaces, no view, no channel, an environment) confines itself just the same, but
//!   its self-check sees what only the spawner could have provided is missing, and it refuses
//!   with exit code 119 before it reads anything. Its control is the first test: the same
//!   binary through the spawner passes the same self-check.
//! - `agent_says_hello_after_confining`: without `--probe`, the confined agent hands its
//!   channel to the agent crate, whose first frame is `hello`; `shutdown` ends it.
//!
//! Every test runs as root and as an unprivileged user.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // helpers shared with the contract suite; this one uses a few
mod util;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use garuda_supervisor::agent::probe::ProbeSpec;
use garuda_supervisor::agent::{spawn_agent, AgentExit, AgentProxy, AgentSpawn, SELF_CHECK_FAILED};

/// Port of the proxy bridge's listener inside the agent's network namespace.
const BRIDGE_PORT: u16 = 3128;

/// What a probe reported: `Ok(detail)` or `Err(errno name)`.
type Outcomes = BTreeMap<String, Result<String, String>>;

fn parse(text: &str) -> Outcomes {
    let mut out = Outcomes::new();
    for line in text.lines() {
        let mut f = line.splitn(3, '\t');
        let (Some(name), Some(kind), Some(detail)) = (f.next(), f.next(), f.next()) else {
            panic!("not a probe line: {line:?}");
        };
        let outcome = match kind {
            "ok" => Ok(detail.to_string()),
            "err" => Err(detail.to_string()),
            _ => panic!("not a probe line: {line:?}"),
        };
        assert!(
            out.insert(name.to_string(), outcome).is_none(),
            "{name} twice"
        );
    }
    out
}

/// The files and servers the probes aim at.
struct Targets {
    _base: tempfile::TempDir,
    project_file: PathBuf,
    ssh_key: PathBuf,
    /// A TCP server on the host's loopback (the test's own).
    loopback: TcpListener,
    /// The stand-in for the model's host, the one host the proxy allows.
    model: TcpListener,
    socket: PathBuf,
}

fn targets() -> Targets {
    let base = tempfile::tempdir().unwrap();
    let project_file = base.path().join("project/src/main.rs");
    std::fs::create_dir_all(project_file.parent().unwrap()).unwrap();
    std::fs::write(&project_file, "fn main() {}\n").unwrap();
    // A stand-in for ~/.ssh/id_ed25519 (the real one is never touched): the agent's view has
    // no home at all, so where the home is does not matter to it.
    let ssh_key = base.path().join("home/.ssh/id_ed25519");
    std::fs::create_dir_all(ssh_key.parent().unwrap()).unwrap();
    std::fs::write(&ssh_key, "-----BEGIN OPENSSH PRIVATE KEY----- (test)\n").unwrap();
    Targets {
        socket: base.path().join("proxy.sock"),
        _base: base,
        project_file,
        ssh_key,
        loopback: TcpListener::bind("127.0.0.1:0").unwrap(),
        model: TcpListener::bind("127.0.0.1:0").unwrap(),
    }
}

fn addr(l: &TcpListener) -> SocketAddr {
    l.local_addr().unwrap()
}

fn spec(t: &Targets, ptrace_pid: i32) -> ProbeSpec {
    ProbeSpec {
        opens: vec![
            ("open_project_file".into(), t.project_file.clone()),
            ("open_ssh_key".into(), t.ssh_key.clone()),
            ("open_etc_passwd".into(), "/etc/passwd".into()),
            ("open_view_root".into(), "/".into()),
        ],
        exec: Some("/bin/sh".into()),
        tcp: vec![("tcp_loopback".into(), addr(&t.loopback))],
        ptrace: Some(ptrace_pid),
        proxy_connects: Vec::new(),
        proxy: None,
    }
}

fn garuda() -> PathBuf {
    util::garuda_bin().unwrap()
}

fn own_status(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap()
        .trim()
        .to_string()
}

fn agent_available() -> bool {
    match garuda_supervisor::agent::availability() {
        Ok(_) => true,
        Err(why) => {
            util::not_tested(
                "agent-confinement",
                &format!("agent confinement (the kernel cannot confine the agent: {why})"),
            );
            false
        }
    }
}

#[test]
fn confined_agent_probes_each_fail_with_their_errno() {
    if !agent_available() {
        return;
    }
    let t = targets();
    let allow = format!("127.0.0.1:{}", addr(&t.model).port());
    let proxy = garuda_supervisor::proxy::Proxy::new(garuda_supervisor::proxy::ProxyConfig {
        allowlist: garuda_policy::network::Allowlist::parse([allow.as_str()]).unwrap(),
        resolver: garuda_supervisor::proxy::Resolver::System,
        unknown_host: garuda_supervisor::proxy::UnknownHost::Deny,
        limits: garuda_supervisor::proxy::ProxyLimits::default(),
    })
    .unwrap();
    let scope = proxy.listen_unix(&t.socket).unwrap();

    // The supervisor's own pid: the agent must not be able to ptrace it.
    let mut spec = spec(&t, std::process::id() as i32);
    spec.proxy_connects = vec![
        ("proxy_model_host".into(), allow.clone()),
        (
            "proxy_other_host".into(),
            format!("127.0.0.1:{}", addr(&t.loopback).port()),
        ),
    ];
    let mut args: Vec<OsString> = vec!["--probe".into()];
    args.extend(spec.to_args());
    let mut agent = spawn_agent(AgentSpawn {
        exe: Some(garuda()),
        args,
        proxy: Some(AgentProxy {
            socket: t.socket.clone(),
            port: BRIDGE_PORT,
        }),
    })
    .unwrap();
    let mut channel = agent.take_channel().unwrap();
    let mut stderr = agent.take_stderr().unwrap();
    let mut text = String::new();
    channel.read_to_string(&mut text).unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    let exit = agent.wait().unwrap();
    assert!(
        matches!(exit, AgentExit::Code(0)),
        "{exit:?}; stderr: {err}"
    );
    assert_eq!(err, "");
    let got = parse(&text);

    let tcp = match garuda_supervisor::agent::kernel_landlock_abi() {
        // Landlock handles TCP connect from ABI 4: only the bridge's port is allowed.
        Some(abi) if abi >= 4 => "EACCES",
        // Before it, the network namespace alone: nothing listens on the agent's loopback.
        _ => "ECONNREFUSED",
    };
    let err = |e: &str| Err(e.to_string());
    let want: Outcomes = [
        // Outside the view: the mount namespace answers before Landlock is asked.
        ("open_project_file", err("ENOENT")),
        ("open_ssh_key", err("ENOENT")),
        ("open_etc_passwd", err("ENOENT")),
        // In the view: Landlock refuses (no path rule at all).
        ("open_view_root", err("EACCES")),
        // seccomp, before the kernel looks at the path.
        ("exec", err("EPERM")),
        ("tcp_loopback", err(tcp)),
        ("ptrace", err("EPERM")),
        // Through the bridge and the proxy: exactly the model's host.
        ("proxy_model_host", Ok("200".into())),
        ("proxy_other_host", Ok("403".into())),
        ("status", Ok("NoNewPrivs=1 Seccomp=2".into())),
        ("env", Ok("vars=0 api_keys=".into())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want, "probe lines:\n{text}");
    let blocked = scope.close().into_vec();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
}

#[test]
fn unconfined_probes_succeed() {
    let t = targets();
    // A harmless process of the same user to attach to (stopping the multi-threaded test
    // harness itself would be a flaky way to prove the same thing).
    let mut target = Command::new("sleep").arg("60").spawn().unwrap();
    let spec = spec(&t, target.id() as i32);
    let out = Command::new(env!("CARGO_BIN_EXE_garuda-agent-probe"))
        .args(spec.to_args())
        .env_clear()
        .env("FAKE_TEST_API_KEY", "not-a-key")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = target.kill();
    let _ = target.wait();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let got = parse(&text);
    let ok = |d: &str| Ok(d.to_string());
    let status = format!(
        "NoNewPrivs={} Seccomp={}",
        own_status("NoNewPrivs"),
        own_status("Seccomp")
    );
    if status == "NoNewPrivs=1 Seccomp=2" {
        util::not_tested(
            "agent-control-status",
            "the unconfined status probe (this test runs under a seccomp filter and no_new_privs already)",
        );
    }
    let want: Outcomes = [
        ("open_project_file", ok("opened")),
        ("open_ssh_key", ok("opened")),
        ("open_etc_passwd", ok("opened")),
        ("open_view_root", ok("opened")),
        ("exec", ok("exit 0")),
        ("tcp_loopback", ok("connected")),
        ("ptrace", ok("attached")),
        ("status", Ok(status)),
        ("env", ok("vars=1 api_keys=FAKE_TEST_API_KEY")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want, "probe lines:\n{text}");
}

#[test]
fn agent_started_without_the_spawner_refuses_to_run() {
    // The agent's own layers need Landlock (the spawner's namespaces are not used here).
    if garuda_supervisor::agent::kernel_landlock_abi().is_none() {
        util::not_tested(
            "agent-confinement",
            "the agent's self-check refusal (the kernel has no Landlock)",
        );
        return;
    }
    let out = Command::new(garuda())
        .args(["agent", "--probe", "--open", "etc_passwd=/etc/passwd"])
        .env_clear()
        .env("FAKE_TEST_API_KEY", "not-a-key")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(SELF_CHECK_FAILED),
        "stderr: {stderr}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    // Every line is a refusal; each missing piece of the spawner's work is named. (Its own
    // layers were all in place: no "cannot confine itself" line, exit code 119 not 118.)
    for line in stderr.lines() {
        assert!(
            line.starts_with("garuda agent: refusing to run: self-check failed: "),
            "{line}"
        );
    }
    for named in [
        "the environment is not empty (1 variables",
        "not in a user namespace of its own",
        "not in a PID namespace of its own",
        "no channel at descriptor 3",
    ] {
        assert!(stderr.contains(named), "{named} missing from:\n{stderr}");
    }
    // The layers the agent puts in place itself were all there: only the spawner's part is
    // missing. Except, for an ordinary user, the bounding set: without a user namespace of
    // its own, dropping it needs a capability the user does not have.
    for layer in [
        "NoNewPrivs",
        "Seccomp is",
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapAmb",
    ] {
        assert!(!stderr.contains(layer), "{layer} in:\n{stderr}");
    }
    for check in ["Landlock", "seccomp", "dumpable"] {
        assert!(!stderr.contains(check), "{check} in:\n{stderr}");
    }
    assert_eq!(
        stderr.contains("CapBnd is"),
        !util::is_root(),
        "bounding set:\n{stderr}"
    );
}

#[test]
fn agent_says_hello_after_confining() {
    if !agent_available() {
        return;
    }
    use garuda_ipc::{decode, read_frame, write_frame, AgentFrame, SupervisorFrame};
    let mut agent = spawn_agent(AgentSpawn {
        exe: Some(garuda()),
        args: Vec::new(),
        proxy: None,
    })
    .unwrap();
    let mut channel = agent.take_channel().unwrap();
    let Some(body) = read_frame(&mut channel).unwrap() else {
        let mut err = String::new();
        agent
            .take_stderr()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("no frame: {:?}; stderr: {err}", agent.wait());
    };
    let hello: AgentFrame = decode(&body).unwrap();
    assert_eq!(
        hello,
        AgentFrame::Hello {
            protocol: garuda_ipc::PROTOCOL_VERSION
        }
    );
    write_frame(&mut channel, &SupervisorFrame::Shutdown).unwrap();
    let exit = agent.wait().unwrap();
    assert!(matches!(exit, AgentExit::Code(0)), "{exit:?}");
}
