//! Network failures explain themselves (issue 11, point 1), through the real `garuda sandbox`
//! on both Linux sandboxes, with curl, getent and python3 inside and real servers on the
//! host's loopback only:
//!
//! - an allowed host that cannot be reached gets a `502` whose body names the host and the
//!   reason and whose `Proxy-Status` header (RFC 9209) carries the error type, for a forwarded
//!   request and for a `CONNECT`; the end of the run lists it (`garuda: could not reach: …`)
//!   and the audit log's `command_result` records it;
//! - with the network off, a command that looks a name up gets the line that says the network
//!   is off and how to allow a host, naming the policy file this run uses; a command that does
//!   not touch the network does not;
//! - the names a command asked for are printed escaped, one line, at most 16.
//!
//! No traffic leaves loopback: the unreachable upstream is a port this test holds without
//! listening, the name that does not resolve is under `.invalid` (which the proxy never
//! looks up, RFC 6761), and with the network off every query is answered inside the
//! sandbox's own network namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::net::{http_server, runtime, LOOPBACK};
use common::script::{self, Run, Script, BASH};
use common::{garuda, text, World};

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// The Linux sandboxes under test.
const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

const PYTHON: &str = "/usr/bin/python3";
const GETENT: &str = "/usr/bin/getent";

/// Say `NOT TESTED: line` and fail unless `GARUDA_ALLOW_NOT_TESTED` names `case`.
fn not_tested(case: &str, line: &str) {
    let _ = writeln!(std::io::stderr(), "NOT TESTED: {line}");
    let allowed = std::env::var("GARUDA_ALLOW_NOT_TESTED")
        .unwrap_or_default()
        .split([',', ' '])
        .any(|n| n.trim() == case);
    assert!(
        allowed,
        "NOT TESTED: {line}; set GARUDA_ALLOW_NOT_TESTED={case} to accept that"
    );
}

fn world() -> World {
    let w = World::new("garuda-network-hints-tests");
    std::fs::create_dir_all(w.project.join(".git")).unwrap();
    w
}

/// `garuda sandbox` as [`script::sandbox`] runs it.
fn sandbox(
    w: &World,
    executor: &str,
    allow: &[String],
    garuda_home: Option<&Path>,
    script: &Script,
) -> Run {
    script::sandbox(w, executor, allow, garuda_home, script)
}

/// The newest audit session's `command_result` event.
fn command_result(w: &World, garuda_home: Option<&Path>) -> serde_json::Value {
    let mut command = Command::new(garuda());
    command
        .args(["audit", "show", "--json", "--project"])
        .arg(&w.project)
        .current_dir(&w.project)
        .env("HOME", &w.home);
    match garuda_home {
        Some(dir) => command.env("GARUDA_HOME", dir),
        None => command.env_remove("GARUDA_HOME"),
    };
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["type"] == "command_result")
        .map(|l| l["event"].clone())
        .unwrap()
}

/// A TCP port on the host's loopback that this test holds, bound but not listening: a
/// connection to it is refused, and nothing else can take the port meanwhile.
fn refusing_port(rt: &tokio::runtime::Runtime) -> (tokio::net::TcpSocket, u16) {
    let _context = rt.enter();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((LOOPBACK, 0).into()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// A raw `CONNECT` to the proxy from inside the sandbox: what curl does not show of the answer
/// (its body).
fn raw_connect(authority: &str) -> String {
    format!(
        r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
got = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
    if b"\r\n\r\n" in got:
        head, _, body = got.partition(b"\r\n\r\n")
        length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        if length and len(body) >= length[0]:
            break
sys.stdout.write(got.decode())
"#
    )
}

// ---------------------------------------------------------------------------------------------
// (a) An allowed host with nothing listening

#[test]
fn an_allowed_host_that_refuses_the_connection_gets_a_502_that_says_why() {
    let rt = runtime();
    let w = world();
    for ex in SANDBOXES {
        let (_held, p) = refusing_port(&rt);
        let web = http_server(&rt, (LOOPBACK, 0).into(), "web");
        let ok = web.port();
        let url = format!("http://127.0.0.1:{p}/x");
        let run = sandbox(
            &w,
            ex,
            &[format!("127.0.0.1:{p}"), format!("127.0.0.1:{ok}")],
            None,
            Script::default()
                .curl("get", &["--noproxy", "", &url])
                .curl("connect", &["--noproxy", "", "-p", &url])
                .step(
                    "raw",
                    &[PYTHON, "-c", &raw_connect(&format!("127.0.0.1:{p}"))],
                )
                // Control, in the same run: a listening upstream answers, with no such header.
                .curl(
                    "control",
                    &["--noproxy", "", &format!("http://127.0.0.1:{ok}/ok")],
                ),
        );
        let status = format!(
            "proxy-status: garuda; error=connection_refused; \
             details=\"127.0.0.1 port {p}: connection refused\"\r\n"
        );
        let body =
            format!("Garuda's proxy could not reach 127.0.0.1 port {p}: connection refused\n");
        let get = run.curl("get");
        assert_eq!((get.exit, get.code), (0, 502), "{ex}: {get:?}");
        assert!(
            get.headers.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{ex}: {get:?}"
        );
        assert!(get.headers.contains(&status), "{ex}: {get:?}");
        assert_eq!(get.body, body, "{ex}");
        let connect = run.curl("connect");
        assert_eq!(
            (connect.exit, connect.connect, connect.code),
            (56, 502, 0),
            "{ex}: {connect:?}"
        );
        assert!(
            connect
                .stderr
                .contains("curl: (56) CONNECT tunnel failed, response 502"),
            "{ex}: {connect:?}"
        );
        assert!(connect.headers.contains(&status), "{ex}: {connect:?}");
        let raw = run.step("raw");
        assert_eq!(raw.exit, 0, "{ex}: {raw:?}");
        assert!(
            raw.stdout.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{ex}: {raw:?}"
        );
        assert!(raw.stdout.contains(&status), "{ex}: {raw:?}");
        assert!(
            raw.stdout.ends_with(&format!("\r\n\r\n{body}")),
            "{ex}: {raw:?}"
        );
        let control = run.curl("control");
        assert_eq!((control.exit, control.code), (0, 200), "{ex}: {control:?}");
        assert!(
            !control
                .headers
                .to_ascii_lowercase()
                .contains("proxy-status"),
            "{ex}: {control:?}"
        );
        assert_eq!(web.requests(), ["GET /ok"], "{ex}");
        // The end of the run names the host and the reason, once, with the count.
        assert_eq!(
            run.lines("garuda: could not reach: "),
            [format!("127.0.0.1:{p} (connection refused, 3 times)")],
            "{run:?}"
        );
        assert!(run.lines("garuda: blocked: ").is_empty(), "{run:?}");
        let result = command_result(&w, None);
        assert_eq!(
            result["unreachable"],
            serde_json::json!([{
                "host": "127.0.0.1",
                "port": p,
                "error": "connection_refused",
                "reason": "connection refused",
                "count": 3,
            }]),
            "{ex}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (b) An allowed name that does not resolve

#[test]
fn an_allowed_name_that_does_not_resolve_is_a_dns_error() {
    let w = world();
    for ex in SANDBOXES {
        let run = sandbox(
            &w,
            ex,
            &["nothing.invalid".to_owned()],
            None,
            Script::default()
                .curl("get", &["--noproxy", "", "http://nothing.invalid/path"])
                .curl("tls", &["--noproxy", "", "https://nothing.invalid/"])
                .step("raw", &[PYTHON, "-c", &raw_connect("nothing.invalid:443")])
                // Control: a name that is not allowed is refused (403), not looked up.
                .curl("unlisted", &["--noproxy", "", "http://other.invalid/"]),
        );
        let get = run.curl("get");
        assert_eq!((get.exit, get.code), (0, 502), "{ex}: {get:?}");
        assert!(
            get.headers.contains(
                "proxy-status: garuda; error=dns_error; \
                 details=\"nothing.invalid port 80: the name does not resolve\"\r\n"
            ),
            "{ex}: {get:?}"
        );
        assert_eq!(
            get.body,
            "Garuda's proxy could not reach nothing.invalid port 80: the name does not resolve\n",
            "{ex}"
        );
        let tls = run.curl("tls");
        assert_eq!(
            (tls.exit, tls.connect, tls.code),
            (56, 502, 0),
            "{ex}: {tls:?}"
        );
        let status_443 = "proxy-status: garuda; error=dns_error; \
                          details=\"nothing.invalid port 443: the name does not resolve\"\r\n";
        assert!(tls.headers.contains(status_443), "{ex}: {tls:?}");
        let raw = run.step("raw");
        assert!(raw.stdout.contains(status_443), "{ex}: {raw:?}");
        assert!(
            raw.stdout.ends_with(
                "\r\n\r\nGaruda's proxy could not reach nothing.invalid port 443: \
                 the name does not resolve\n"
            ),
            "{ex}: {raw:?}"
        );
        let unlisted = run.curl("unlisted");
        assert_eq!(unlisted.code, 403, "{ex}: {unlisted:?}");
        assert!(
            !unlisted
                .headers
                .to_ascii_lowercase()
                .contains("proxy-status"),
            "{ex}: {unlisted:?}"
        );
        assert_eq!(
            run.lines("garuda: could not reach: "),
            ["nothing.invalid (the name does not resolve, 3 times)"],
            "{run:?}"
        );
        assert_eq!(
            run.lines("garuda: blocked: "),
            ["other.invalid (not in allowlist)"],
            "{run:?}"
        );
        let result = command_result(&w, None);
        assert_eq!(result["unreachable"][0]["error"], "dns_error", "{ex}");
        assert_eq!(result["unreachable"][0]["count"], 3, "{ex}");
    }
}

// ---------------------------------------------------------------------------------------------
// (c) The network off

/// The hint for `names`, naming `policy` as the file to edit.
fn hint(names: &str, policy: &Path) -> String {
    format!(
        "garuda: the network is off for this run; the command tried to look up {names}. \
         To allow a host, pass --allow-host HOST or add it to network.allow in {}",
        policy.display()
    )
}

/// Inside the sandbox: for each IPv4 `nameserver` outside `127/8` (the stub made it local as a
/// `/32` alias), a TCP connection to it is refused and one to the next address has no route;
/// and `10.0.0.1` has no route. One line per check.
const ALIAS_CHECK: &str = r#"
import errno, socket
def err(a):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((a, 80))
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
try:
    servers = [l.split()[1] for l in open("/etc/resolv.conf") if l.split()[:1] == ["nameserver"]][:3]
except OSError:
    servers = []
for a in servers:
    if ":" in a or a.startswith("127."):
        continue
    p = a.split(".")
    n = ".".join(p[:3] + [str((int(p[3]) + 1) % 256)])
    print("alias", err(a), "next", err(n))
print("10.0.0.1", err("10.0.0.1"))
"#;

#[test]
fn with_the_network_off_a_lookup_gets_the_hint_and_nothing_else_does() {
    let w = world();
    let moved_home = w.base.path().join("elsewhere");
    for ex in SANDBOXES {
        // A trailing dot: the names are asked as they are, whatever search domains the
        // machine's resolv.conf has.
        let mut script = Script::default();
        script
            .curl("curl", &["http://example.test./"])
            .step("getent", &[GETENT, "hosts", "pypi.example."]);
        let run = sandbox(
            &w,
            ex,
            &[],
            None,
            Script {
                text: script.text.clone(),
            }
            .step("alias", &[PYTHON, "-c", ALIAS_CHECK]),
        );
        // The stub adds nothing routable: the aliased resolver address is local (refused),
        // the next address and 10.0.0.1 have no route.
        let alias = run.step("alias");
        let mut checks: Vec<&str> = alias.stdout.lines().collect();
        assert_eq!(
            checks.pop(),
            Some("10.0.0.1 ENETUNREACH"),
            "{ex}: {alias:?}"
        );
        for line in &checks {
            assert_eq!(
                *line, "alias ECONNREFUSED next ENETUNREACH",
                "{ex}: {alias:?}"
            );
        }
        if checks.is_empty() {
            not_tested(
                "dns-stub-alias",
                "the resolver stub's /32 alias (no IPv4 nameserver outside 127/8 in /etc/resolv.conf)",
            );
        }
        let curl = run.curl("curl");
        assert_eq!((curl.exit, curl.code), (6, 0), "{ex}: {curl:?}");
        assert!(
            curl.stderr
                .contains("curl: (6) Could not resolve host: example.test."),
            "{ex}: {curl:?}"
        );
        assert_eq!(run.step("getent").exit, 2, "{ex}");
        let lines = run.lines("garuda: the network is off");
        assert_eq!(lines.len(), 1, "{run:?}");
        assert!(
            run.stderr.lines().any(|l| l
                == hint(
                    "example.test, pypi.example",
                    &w.home.join(".garuda/policy.json")
                )),
            "{run:?}"
        );
        let result = command_result(&w, None);
        assert_eq!(
            result["lookups"],
            serde_json::json!(["example.test", "pypi.example"]),
            "{ex}"
        );
        assert_eq!(result["unreachable"], serde_json::json!([]), "{ex}");

        // GARUDA_HOME moves the policy file: the hint names the moved one.
        let run = sandbox(&w, ex, &[], Some(&moved_home), &script);
        assert!(
            run.stderr.lines().any(|l| l
                == hint(
                    "example.test, pypi.example",
                    &moved_home.join("policy.json")
                )),
            "{run:?}"
        );

        // Controls: a command that fails without touching the network, and one that
        // succeeds, get no hint.
        for argv in [[BASH, "-c", "exit 3"], [BASH, "-c", "true"]] {
            let output = Command::new(garuda())
                .args(["sandbox", "--executor", ex, "--project"])
                .arg(&w.project)
                .arg("--")
                .args(argv)
                .current_dir(&w.project)
                .env("HOME", &w.home)
                .env_remove("GARUDA_HOME")
                .output()
                .unwrap();
            let err = text(&output.stderr);
            assert_eq!(
                output.status.code(),
                Some(if argv[2] == "true" { 0 } else { 3 }),
                "{ex}: {err}"
            );
            assert!(!err.contains("network is off"), "{ex} {argv:?}: {err}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (d) Names the command chose

/// A raw DNS query for each of `names` (labels as Python byte strings) to the stub on
/// `127.0.0.1:53`; prints each answer's response code.
fn raw_queries(names: &[&str]) -> String {
    let names = names.join(", ");
    format!(
        r#"
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
for i, labels in enumerate([{names}]):
    q = struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0)
    for label in labels:
        q += bytes([len(label)]) + label
    q += b"\0\0\1\0\1"
    s.sendto(q, ("127.0.0.1", 53))
    reply = s.recv(512)
    print(struct.unpack(">H", reply[:2])[0], reply[3] & 15)
"#
    )
}

#[test]
fn the_names_a_command_asked_for_are_printed_escaped_and_capped() {
    let w = world();
    let mut names =
        vec![r#"[b"evil\ngaruda: blocked: nothing\x1b[2J", b"a,b", b"test"]"#.to_owned()];
    for i in 0..20 {
        names.push(format!(r#"[b"n{i}", b"test"]"#));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for ex in SANDBOXES {
        let run = sandbox(
            &w,
            ex,
            &[],
            None,
            Script::default().step("dns", &[PYTHON, "-c", &raw_queries(&names)]),
        );
        let dns = run.step("dns");
        assert_eq!(dns.exit, 0, "{ex}: {dns:?}");
        // Every query was answered REFUSED (5), with its own id.
        let want: String = (0..21).map(|i| format!("{i} 5\n")).collect();
        assert_eq!(dns.stdout, want, "{ex}: {dns:?}");
        let mut shown = vec![r"evil\ngaruda: blocked: nothing\e[2j.a\u{002c}b.test".to_owned()];
        shown.extend((0..15).map(|i| format!("n{i}.test")));
        let line = hint(
            &format!("{}, and more", shown.join(", ")),
            &w.home.join(".garuda/policy.json"),
        );
        assert_eq!(
            run.stderr
                .lines()
                .filter(|l| l.starts_with("garuda: "))
                .collect::<Vec<_>>(),
            [line.as_str()],
            "{run:?}"
        );
        assert!(
            !run.stderr
                .chars()
                .any(|c| c != '\n' && garuda_text::is_hidden(c)),
            "{run:?}"
        );
        // Negative control: printed as asked, the first name would forge a second line.
        assert_eq!("evil\ngaruda: blocked: nothing".lines().count(), 2);
        let result = command_result(&w, None);
        assert_eq!(result["lookups"].as_array().unwrap().len(), 16, "{ex}");
        assert_eq!(result["lookups"][0], shown[0].as_str(), "{ex}");
    }
}
