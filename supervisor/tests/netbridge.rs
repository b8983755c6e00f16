//! Proxy mode through the real executors: a command in its own network namespace reaches an
//! upstream HTTP server only through the bridge to a proxy's unix socket, and nothing else.
//!
//! The upstream is a real HTTP server on the host's loopback; the proxy is a minimal HTTP
//! forward proxy of this test on a unix socket (absolute-form `GET` and `CONNECT`, one host
//! name, `upstream.garuda.test`, mapped to the upstream). It tests the bridge, not the
//! allowlist (that proxy is tested on its own). Every case runs on `landlock` and
//! `bubblewrap`; `host` is the negative control (it reaches the upstream around the proxy).
//! Errors are asserted by their exact errno text (curl `-v`), never by "it failed".
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::base_dir;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use garuda_policy::{build_exec_policy, load_settings_from, ExecPolicy, HostEnv, NetworkMode};
use garuda_supervisor::executor::{
    self, probe_executors, CommandSpec, ExecError, ExecutorKind, ExitStatus, Outcome, StdioMode,
};
use garuda_supervisor::netbridge::{BridgeError, THREAD_NAME};

/// The sandbox executors under test.
const SANDBOXES: [ExecutorKind; 2] = [ExecutorKind::Landlock, ExecutorKind::Bubblewrap];

/// The port the command is told about. Inside a network namespace any port is free.
const BRIDGE_PORT: u16 = 3128;

/// The one host name the test proxy knows.
const UPSTREAM_HOST: &str = "upstream.garuda.test";

/// The cases share the process (bridge threads are counted), so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The upstream: a real HTTP/1.1 server on the host's loopback.

struct Upstream {
    port: u16,
    /// Request lines seen.
    seen: Arc<Mutex<Vec<String>>>,
}

fn read_head(r: &mut impl BufRead) -> Option<Vec<String>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            return Some(lines);
        }
        lines.push(line);
    }
}

fn upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let log = log.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let Some(head) = read_head(&mut reader) else {
                    return;
                };
                log.lock().unwrap().push(head[0].clone());
                let path = head[0].split(' ').nth(1).unwrap_or("").to_string();
                let mut out = stream;
                if path == "/hold" {
                    // Headers and a first chunk, then nothing: the connection stays open
                    // until the other side closes it.
                    let _ = out.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nconnected\n",
                    );
                    let mut sink = Vec::new();
                    let _ = reader.read_to_end(&mut sink);
                    return;
                }
                let body = format!("upstream says hi to {path}\n");
                let _ = write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Upstream { port, seen }
}

// ---------------------------------------------------------------------------------------------
// The test proxy: a minimal HTTP forward proxy on a unix socket (mode 0600).

struct TestProxy {
    socket: PathBuf,
    /// Request lines seen (`GET http://…`, `CONNECT host:port`).
    seen: Arc<Mutex<Vec<String>>>,
    /// Connections from the bridge not yet closed by it.
    open: Arc<AtomicUsize>,
}

/// Copy `from` to `to` until end of stream, then shut `to` for writing.
fn pump(mut from: impl Read, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

fn serve_proxy_client(client: UnixStream, log: Arc<Mutex<Vec<String>>>, open: Arc<AtomicUsize>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let Some(head) = read_head(&mut reader) else {
        open.fetch_sub(1, Ordering::SeqCst);
        return;
    };
    log.lock().unwrap().push(head[0].clone());
    let mut parts = head[0].split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut client_out = client;
    // host:port and the origin-form path.
    let (authority, path) = if method == "CONNECT" {
        (target.to_string(), None)
    } else {
        let rest = target.strip_prefix("http://").unwrap_or("");
        let (auth, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        (auth.to_string(), Some(path.to_string()))
    };
    let upstream = match authority.rsplit_once(':') {
        Some((UPSTREAM_HOST, port)) => TcpStream::connect(("127.0.0.1", port.parse().unwrap())),
        _ => Err(std::io::Error::other("unknown host")),
    };
    let Ok(mut upstream) = upstream else {
        let _ = client_out.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        open.fetch_sub(1, Ordering::SeqCst);
        return;
    };
    match path {
        None => {
            let _ = client_out.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        }
        Some(path) => {
            let mut request = format!("{method} {path} HTTP/1.1\r\n");
            for h in &head[1..] {
                if !h.to_ascii_lowercase().starts_with("proxy-") {
                    request.push_str(h);
                    request.push_str("\r\n");
                }
            }
            request.push_str("\r\n");
            upstream.write_all(request.as_bytes()).unwrap();
        }
    }
    let up = upstream.try_clone().unwrap();
    let down = std::thread::spawn(move || {
        let mut from = upstream;
        let _ = std::io::copy(&mut from, &mut client_out);
        let _ = client_out.shutdown(Shutdown::Write);
    });
    // Bridge → upstream; its end is the bridge closing the connection.
    pump(reader, up);
    open.fetch_sub(1, Ordering::SeqCst);
    let _ = down.join();
}

fn test_proxy(dir: &Path) -> TestProxy {
    let socket = dir.join("proxy.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let open = Arc::new(AtomicUsize::new(0));
    let (log, count) = (seen.clone(), open.clone());
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let (log, count) = (log.clone(), count.clone());
            std::thread::spawn(move || serve_proxy_client(client, log, count));
        }
    });
    TestProxy { socket, seen, open }
}

// ---------------------------------------------------------------------------------------------
// The world: a fake home and project, the policy built from them.

struct World {
    base: tempfile::TempDir,
    policy: ExecPolicy,
    upstream: Upstream,
    proxy: TestProxy,
}

fn world() -> World {
    let base = base_dir("garuda-netbridge-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    let vars = vec![
        ("HOME".into(), home.into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ];
    let host = HostEnv::from_vars(vars).unwrap();
    let none = base.path().join("none.json");
    let settings = load_settings_from(&none, &none, &none, &host, &project).unwrap();
    let mut policy = build_exec_policy(&project, &settings, &host).unwrap();
    policy.limits.timeout = Some(Duration::from_secs(60));
    let proxy = test_proxy(base.path());
    policy.network = NetworkMode::Proxy {
        socket: proxy.socket.clone(),
        port: BRIDGE_PORT,
    };
    World {
        base,
        policy,
        upstream: upstream(),
        proxy,
    }
}

fn require_available(kind: ExecutorKind) {
    let probe = probe_executors()
        .into_iter()
        .find(|p| p.kind == kind)
        .unwrap();
    assert!(probe.available, "{kind} is not available: {}", probe.detail);
}

fn run(kind: ExecutorKind, policy: &ExecPolicy, script: &str) -> Outcome {
    require_available(kind);
    let out = executor::select::executor_of(kind)
        .run(
            &CommandSpec::new(["/bin/bash", "-c", script]),
            policy,
            StdioMode::Capture,
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    // The bridge's thread is joined before `run` returns; a joined thread can still be listed
    // in /proc/self/task for a moment while the kernel finishes its exit (the join wakes on
    // the tid futex, cleared before the task is gone), so allow that moment and no more.
    wait_until(
        &format!("{kind}: the bridge thread to be gone after the run"),
        Duration::from_secs(2),
        || bridge_threads() == 0,
    );
    out
}

/// Forwarder threads alive in this process.
fn bridge_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == THREAD_NAME)
        .count()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn seen(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

// ---------------------------------------------------------------------------------------------
// The cases.

#[test]
fn the_env_proxy_reaches_the_upstream_over_http_and_connect() {
    let _serial = serial();
    for kind in SANDBOXES {
        let w = world();
        let up = w.upstream.port;
        let out = run(
            kind,
            &w.policy,
            &format!("curl -sS --max-time 20 http://{UPSTREAM_HOST}:{up}/plain"),
        );
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        assert_eq!(out.stdout.text(), "upstream says hi to /plain\n", "{kind}");
        let out = run(
            kind,
            &w.policy,
            &format!("curl -sS --max-time 20 --proxytunnel http://{UPSTREAM_HOST}:{up}/tunnel"),
        );
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        assert_eq!(out.stdout.text(), "upstream says hi to /tunnel\n", "{kind}");
        // Ten connections at once.
        let script = format!(
            "for i in $(seq 10); do curl -sS --max-time 20 -p http://{UPSTREAM_HOST}:{up}/many$i > many$i.out & done; wait; cat many*.out | sort"
        );
        let out = run(kind, &w.policy, &script);
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        let mut want: Vec<String> = (1..=10)
            .map(|i| format!("upstream says hi to /many{i}\n"))
            .collect();
        want.sort();
        assert_eq!(out.stdout.text(), want.concat(), "{kind}");
        let proxy = seen(&w.proxy.seen);
        assert!(
            proxy.contains(&format!("GET http://{UPSTREAM_HOST}:{up}/plain HTTP/1.1")),
            "{kind}: {proxy:?}"
        );
        let connects = proxy
            .iter()
            .filter(|l| **l == format!("CONNECT {UPSTREAM_HOST}:{up} HTTP/1.1"))
            .count();
        assert_eq!(connects, 11, "{kind}: {proxy:?}");
    }
}

#[test]
fn going_around_the_proxy_has_no_route() {
    let _serial = serial();
    for kind in SANDBOXES {
        let w = world();
        let up = w.upstream.port;
        // The host's loopback server, without the proxy: the sandbox's loopback is its own and
        // nothing listens there on that port.
        let out = run(
            kind,
            &w.policy,
            &format!("curl -v -sS --max-time 20 --noproxy '*' http://127.0.0.1:{up}/direct"),
        );
        assert_eq!(out.status, ExitStatus::Code(7), "{kind}: {out:?}");
        assert!(
            out.stderr.text().contains(&format!(
                "connect to 127.0.0.1 port {up} failed: Connection refused"
            )),
            "{kind}: {}",
            out.stderr.text()
        );
        // Any other address: no route.
        let out = run(
            kind,
            &w.policy,
            "curl -v -sS --max-time 20 --noproxy '*' http://10.0.0.1/",
        );
        assert_eq!(out.status, ExitStatus::Code(7), "{kind}: {out:?}");
        assert!(
            out.stderr
                .text()
                .contains("Immediate connect fail for 10.0.0.1: Network is unreachable"),
            "{kind}: {}",
            out.stderr.text()
        );
        // A raw socket.
        let out = run(kind, &w.policy, "exec 3<>/dev/tcp/10.0.0.1/80");
        assert_eq!(out.status, ExitStatus::Code(1), "{kind}: {out:?}");
        assert!(
            out.stderr
                .text()
                .contains("/dev/tcp/10.0.0.1/80: Network is unreachable"),
            "{kind}: {}",
            out.stderr.text()
        );
        // Without the variables there is not even name resolution.
        let out = run(
            kind,
            &w.policy,
            &format!(
                "unset http_proxy HTTP_PROXY ALL_PROXY all_proxy; curl -sS --max-time 20 http://{UPSTREAM_HOST}:{up}/unset"
            ),
        );
        assert_eq!(out.status, ExitStatus::Code(6), "{kind}: {out:?}");
        assert!(
            out.stderr
                .text()
                .contains(&format!("Could not resolve host: {UPSTREAM_HOST}")),
            "{kind}: {}",
            out.stderr.text()
        );
        let reached = seen(&w.upstream.seen);
        assert!(
            reached.is_empty(),
            "{kind}: the upstream was reached: {reached:?}"
        );
        assert!(seen(&w.proxy.seen).is_empty(), "{kind}");
    }
}

/// `NO_PROXY` lists loopback: a server the command starts on its own loopback is reached
/// directly (through the proxy it would be the host's loopback, or refused).
#[test]
fn the_commands_own_loopback_servers_are_reached_directly() {
    let _serial = serial();
    for kind in SANDBOXES {
        let w = world();
        let script = "mkdir www && echo own > www/index.html && \
             /usr/bin/python3 -m http.server 8000 --bind 127.0.0.1 --directory www 2>/dev/null & \
             until curl -s -o /dev/null http://127.0.0.1:8000/; do sleep 0.05; done; \
             curl -sS http://localhost:8000/index.html && curl -sS http://127.0.0.1:8000/index.html; \
             kill %1";
        let out = run(kind, &w.policy, script);
        assert_eq!(out.stdout.text(), "own\nown\n", "{kind}: {out:?}");
        assert!(seen(&w.proxy.seen).is_empty(), "{kind}");
    }
}

#[test]
fn the_environment_names_the_bridge_and_replaces_host_proxy_variables() {
    let _serial = serial();
    for kind in SANDBOXES {
        let mut w = world();
        // A proxy variable in the policy's own environment does not survive.
        w.policy
            .env
            .push(("https_proxy".into(), "http://evil.example:1".into()));
        let out = run(kind, &w.policy, "env | grep -i _proxy= | sort");
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        let url = format!("http://127.0.0.1:{BRIDGE_PORT}");
        let no = "localhost,127.0.0.1,::1";
        let want = format!(
            "ALL_PROXY={url}\nHTTPS_PROXY={url}\nHTTP_PROXY={url}\nNO_PROXY={no}\n\
             all_proxy={url}\nhttp_proxy={url}\nhttps_proxy={url}\nno_proxy={no}\n"
        );
        assert_eq!(out.stdout.text(), want, "{kind}");
    }
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let _serial = serial();
    for kind in SANDBOXES {
        let w = world();
        let up = w.upstream.port;
        let out = run(
            kind,
            &w.policy,
            &format!(
                "curl -sS -o /dev/null --max-time 20 http://{UPSTREAM_HOST}:{up}/x && exit 42"
            ),
        );
        assert_eq!(out.status, ExitStatus::Code(42), "{kind}: {out:?}");
        // Killed by a signal: the same status as in isolated mode (`landlock` reports the
        // signal, `bubblewrap` its PID 1's exit code 128 + N), shell code 143 either way.
        let out = run(kind, &w.policy, "kill -TERM $$");
        assert_eq!(out.status.code(), 128 + libc::SIGTERM, "{kind}: {out:?}");
        let mut isolated = w.policy.clone();
        isolated.network = NetworkMode::Isolated;
        assert_eq!(
            run(kind, &isolated, "kill -TERM $$").status,
            out.status,
            "{kind}"
        );
        // A program that does not exist is still "not found", not a bridge error.
        let out = executor::select::executor_of(kind)
            .run(
                &CommandSpec::new(["no-such-garuda-program"]),
                &w.policy,
                StdioMode::Capture,
            )
            .unwrap();
        assert_eq!(out.status, ExitStatus::Code(127), "{kind}: {out:?}");
    }
}

#[test]
fn a_timeout_kills_the_tree_and_closes_its_connections() {
    let _serial = serial();
    for kind in SANDBOXES {
        let mut w = world();
        let up = w.upstream.port;
        w.policy.limits.timeout = Some(Duration::from_secs(3));
        let script = format!(
            "curl -sSN -p http://{UPSTREAM_HOST}:{up}/hold > hold.out & \
             until [ -s hold.out ]; do sleep 0.05; done; echo connected; sleep 600"
        );
        let start = Instant::now();
        let out = run(kind, &w.policy, &script);
        assert_eq!(out.status, ExitStatus::TimedOut, "{kind}: {out:?}");
        assert_eq!(out.stdout.text(), "connected\n", "{kind}");
        assert!(start.elapsed() < Duration::from_secs(30), "{kind}");
        // The tunnel was open when the sandbox died; the bridge closed it.
        wait_until(
            "the proxy to see the bridge close",
            Duration::from_secs(5),
            || w.proxy.open.load(Ordering::SeqCst) == 0,
        );
        assert!(
            seen(&w.upstream.seen).contains(&"GET /hold HTTP/1.1".to_string()),
            "{kind}"
        );
    }
}

#[test]
fn nothing_of_the_bridge_outlives_the_command() {
    let _serial = serial();
    for kind in SANDBOXES {
        let w = world();
        let up = w.upstream.port;
        // A background download is still running when the command's main process exits.
        let script = format!(
            "(curl -sSN -p http://{UPSTREAM_HOST}:{up}/hold > hold.out &); \
             until [ -s hold.out ]; do sleep 0.05; done; echo started"
        );
        // Count the forwarder threads while the command runs: one (so the count after the
        // run, zero, means something).
        let most = Arc::new(AtomicUsize::new(0));
        let running = Arc::new(AtomicUsize::new(1));
        let sampler = {
            let (most, running) = (most.clone(), running.clone());
            std::thread::spawn(move || {
                while running.load(Ordering::SeqCst) == 1 {
                    most.fetch_max(bridge_threads(), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let out = run(kind, &w.policy, &script);
        running.store(0, Ordering::SeqCst);
        sampler.join().unwrap();
        assert_eq!(most.load(Ordering::SeqCst), 1, "{kind}");
        assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
        assert_eq!(out.stdout.text(), "started\n", "{kind}");
        wait_until(
            "the proxy to see the bridge close",
            Duration::from_secs(5),
            || w.proxy.open.load(Ordering::SeqCst) == 0,
        );
    }
}

#[test]
fn the_command_does_not_run_without_a_bridge() {
    let _serial = serial();
    for kind in SANDBOXES.into_iter().chain([ExecutorKind::Host]) {
        let w = world();
        let marker = w.policy.project_root.join("ran");
        let cases: [(NetworkMode, &str); 4] = [
            (
                NetworkMode::Proxy {
                    socket: w.base.path().join("missing.sock"),
                    port: BRIDGE_PORT,
                },
                "No such file or directory",
            ),
            (
                NetworkMode::Proxy {
                    socket: w.base.path().join("project"),
                    port: BRIDGE_PORT,
                },
                "is not a unix socket",
            ),
            (
                NetworkMode::Proxy {
                    socket: "proxy.sock".into(),
                    port: BRIDGE_PORT,
                },
                "proxy socket path proxy.sock is not absolute",
            ),
            (
                NetworkMode::Proxy {
                    socket: w.proxy.socket.clone(),
                    port: 0,
                },
                "proxy port 0 cannot be used",
            ),
        ];
        for (network, message) in cases {
            let mut policy = w.policy.clone();
            policy.network = network.clone();
            let err = executor::select::executor_of(kind)
                .run(
                    &CommandSpec::new(["/bin/touch", marker.to_str().unwrap()]),
                    &policy,
                    StdioMode::Capture,
                )
                .unwrap_err();
            assert!(
                matches!(err, ExecError::Bridge(_)),
                "{kind} {network:?}: {err:?}"
            );
            assert!(err.to_string().contains(message), "{kind}: {err}");
            assert!(!marker.exists(), "{kind} {network:?}: the command ran");
        }
    }
}

#[test]
fn a_busy_host_port_stops_the_host_executor() {
    let _serial = serial();
    let w = world();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut policy = w.policy.clone();
    policy.network = NetworkMode::Proxy {
        socket: w.proxy.socket.clone(),
        port: taken.local_addr().unwrap().port(),
    };
    let marker = policy.project_root.join("ran");
    let err = executor::select::executor_of(ExecutorKind::Host)
        .run(
            &CommandSpec::new(["/bin/touch", marker.to_str().unwrap()]),
            &policy,
            StdioMode::Capture,
        )
        .unwrap_err();
    assert!(
        matches!(err, ExecError::Bridge(BridgeError::HostListen { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("Address already in use"), "{err}");
    assert!(!marker.exists());
}

/// Negative control: the host executor has the host's network. The same commands that find no
/// route in a sandbox reach the upstream directly, and the bridge on the host's loopback works
/// for those that follow the variables.
#[test]
fn the_host_executor_reaches_the_upstream_around_the_proxy() {
    let _serial = serial();
    let mut w = world();
    let up = w.upstream.port;
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    w.policy.network = NetworkMode::Proxy {
        socket: w.proxy.socket.clone(),
        port,
    };
    let out = run(
        ExecutorKind::Host,
        &w.policy,
        &format!("curl -sS --max-time 20 --noproxy '*' http://127.0.0.1:{up}/direct"),
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    assert_eq!(out.stdout.text(), "upstream says hi to /direct\n");
    let out = run(
        ExecutorKind::Host,
        &w.policy,
        &format!("curl -sS --max-time 20 http://{UPSTREAM_HOST}:{up}/bridged"),
    );
    assert_eq!(out.status, ExitStatus::Code(0), "{out:?}");
    assert_eq!(out.stdout.text(), "upstream says hi to /bridged\n");
    assert_eq!(
        seen(&w.proxy.seen),
        [format!("GET http://{UPSTREAM_HOST}:{up}/bridged HTTP/1.1")]
    );
}

/// Negative control for the bridge itself: in isolated mode the same proxy URL finds nothing
/// on the sandbox's loopback, and no proxy variable is set.
#[test]
fn isolated_mode_has_no_bridge() {
    let _serial = serial();
    for kind in SANDBOXES {
        let mut w = world();
        w.policy.network = NetworkMode::Isolated;
        let up = w.upstream.port;
        let out = run(
            kind,
            &w.policy,
            &format!(
                "env | grep -ci _proxy= ; curl -v -sS --max-time 20 -x http://127.0.0.1:{BRIDGE_PORT} http://{UPSTREAM_HOST}:{up}/isolated"
            ),
        );
        assert_eq!(out.status, ExitStatus::Code(7), "{kind}: {out:?}");
        assert_eq!(out.stdout.text(), "0\n", "{kind}");
        assert!(
            out.stderr.text().contains(&format!(
                "connect to 127.0.0.1 port {BRIDGE_PORT} failed: Connection refused"
            )),
            "{kind}: {}",
            out.stderr.text()
        );
        assert!(seen(&w.proxy.seen).is_empty(), "{kind}");
    }
}
