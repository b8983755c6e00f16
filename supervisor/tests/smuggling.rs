//! Request smuggling end to end: raw bytes sent from inside a real sandbox (`garuda sandbox
//! --allow-host`, the bridge, the proxy as the supervisor starts it) to an upstream on the
//! host's loopback that frames requests the naive way and records every request it parses.
//!
//! Each attack is one client request whose framing is ambiguous (CL.TE, TE.CL, two
//! `Content-Length`s that differ, `Transfer-Encoding` spelled so that one parser sees chunked
//! and another does not) with a second request, to `evil.test` (not on the allowlist), hidden
//! in its body. The proxy must refuse the request (`400`) or forward it with framing it
//! rebuilt, so the upstream parses exactly one request per forwarded client request, and never
//! the hidden one.
//!
//! Negative control, per attack: the same bytes sent straight to the same upstream (no proxy)
//! make it parse two requests, the second one for `evil.test`. So each attack really smuggles
//! against that upstream, and only the proxy stands in between.
//!
//! Two equal `Content-Length`s are no attack by themselves (RFC 9112 lets a recipient treat
//! them as one); the proxy must still not pass an ambiguous head on: the upstream sees one
//! request with one `Content-Length`, where the same bytes sent straight show it two.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World, PROXY_VARS};

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];
const PYTHON: &str = "/usr/bin/python3";

// ---------------------------------------------------------------------------------------------
// A naive upstream

/// How the naive upstream finds the end of a request's body: the two ways that real servers
/// have disagreed with front ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Chunked when any header whose name is `Transfer-Encoding` once trimmed mentions
    /// `chunked` anywhere in its value (so `xchunked`, `chunked, identity` and
    /// `Transfer-Encoding : chunked` all count); otherwise the first `Content-Length`.
    LooseChunked,
    /// The first `Content-Length` when there is one; otherwise chunked as above.
    FirstContentLength,
}

/// A request the upstream parsed.
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    host: String,
    content_lengths: usize,
    body: Vec<u8>,
}

impl Seen {
    fn for_evil(&self) -> bool {
        self.target.contains("evil.test") || self.host.contains("evil.test")
    }
}

enum Parsed {
    /// A request and the bytes it used.
    Request(Seen, usize),
    Incomplete,
    Malformed,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A chunked body at the start of `buf`: the data and the bytes used.
fn dechunk(buf: &[u8]) -> Option<Result<(Vec<u8>, usize), ()>> {
    let mut at = 0;
    let mut data = Vec::new();
    loop {
        let end = find(&buf[at..], b"\r\n")?;
        let line = String::from_utf8_lossy(&buf[at..at + end]).into_owned();
        let size_text = line.split(';').next().unwrap_or("").trim().to_owned();
        let Ok(size) = usize::from_str_radix(&size_text, 16) else {
            return Some(Err(()));
        };
        at += end + 2;
        if size == 0 {
            // Trailers, up to an empty line.
            loop {
                let end = find(&buf[at..], b"\r\n")?;
                at += end + 2;
                if end == 0 {
                    return Some(Ok((data, at)));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        data.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// One request at the start of `buf`, framed the naive way.
fn parse_request(buf: &[u8], framing: Framing) -> Parsed {
    let skip = buf
        .iter()
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    let buf = &buf[skip..];
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return Parsed::Incomplete;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    if request_line.len() != 3 || !request_line[2].starts_with("HTTP/1.") {
        return Parsed::Malformed;
    }
    let mut host = String::new();
    let mut lengths = Vec::new();
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Parsed::Malformed;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "host" => host = value.to_owned(),
            "content-length" => match value.parse::<usize>() {
                Ok(n) => lengths.push(n),
                Err(_) => return Parsed::Malformed,
            },
            "transfer-encoding" => chunked |= value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let body_at = head_end + 4;
    let use_chunked = match framing {
        Framing::LooseChunked => chunked,
        Framing::FirstContentLength => chunked && lengths.is_empty(),
    };
    let (body, used) = if use_chunked {
        match dechunk(&buf[body_at..]) {
            None => return Parsed::Incomplete,
            Some(Err(())) => return Parsed::Malformed,
            Some(Ok((data, used))) => (data, body_at + used),
        }
    } else {
        let length = lengths.first().copied().unwrap_or(0);
        if buf.len() < body_at + length {
            return Parsed::Incomplete;
        }
        (buf[body_at..body_at + length].to_vec(), body_at + length)
    };
    Parsed::Request(
        Seen {
            target: request_line[1].to_owned(),
            host,
            content_lengths: lengths.len(),
            body,
        },
        skip + used,
    )
}

/// A server on the host's loopback that frames requests with `framing`, answers each with a
/// `200`, and records every request it parsed.
struct Upstream {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    accepted: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl Upstream {
    fn start(framing: Framing) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let (s, a, f) = (seen.clone(), accepted.clone(), finished.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                let (s, f) = (s.clone(), f.clone());
                std::thread::spawn(move || {
                    serve(stream, framing, &s);
                    f.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Upstream {
            port,
            seen,
            accepted,
            finished,
        }
    }

    /// Waits until every connection it accepted has ended (the proxy opens one per request
    /// and closes it after the response), then takes what it saw.
    fn take(&self) -> Vec<Seen> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.finished.load(Ordering::SeqCst) < self.accepted.load(Ordering::SeqCst) {
            assert!(
                Instant::now() < deadline,
                "an upstream connection stayed open"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

fn serve(mut stream: TcpStream, framing: Framing, seen: &Mutex<Vec<Seen>>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match parse_request(&buf, framing) {
            Parsed::Request(request, used) => {
                seen.lock().unwrap().push(request);
                buf.drain(..used);
                if stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                    .is_err()
                {
                    return;
                }
            }
            Parsed::Malformed => return,
            Parsed::Incomplete => match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The attacks

struct Attack {
    name: &'static str,
    /// The upstream's framing against which the bytes smuggle.
    framing: Framing,
    /// Whether the bytes hide a second request (all but the equal `Content-Length`s).
    smuggles: bool,
    /// The statuses the client gets from the proxy, in order.
    proxy: &'static [u16],
    /// What the upstream gets through the proxy: `(target, Content-Length headers, body)`.
    upstream: &'static [(&'static str, usize, &'static str)],
}

/// The body of `te-cl` as the proxy forwards it: the would-be hidden request, as data.
const TE_CL_BODY: &str = "GET http://evil.test/smuggled-te-cl HTTP/1.1\r\nHost: evil.test\r\n\r\n";

const ATTACKS: [Attack; 7] = [
    Attack {
        name: "cl-te",
        framing: Framing::LooseChunked,
        smuggles: true,
        proxy: &[200],
        upstream: &[("/cl-te", 0, "")],
    },
    Attack {
        name: "te-cl",
        framing: Framing::FirstContentLength,
        smuggles: true,
        proxy: &[200],
        upstream: &[("/te-cl", 0, TE_CL_BODY)],
    },
    Attack {
        name: "cl-cl-differing",
        framing: Framing::FirstContentLength,
        smuggles: true,
        proxy: &[400],
        upstream: &[],
    },
    Attack {
        name: "cl-cl-equal",
        framing: Framing::FirstContentLength,
        smuggles: false,
        proxy: &[200, 200],
        upstream: &[("/cl-cl-equal", 1, "hello"), ("/end-cl-cl-equal", 0, "")],
    },
    Attack {
        name: "te-xchunked",
        framing: Framing::LooseChunked,
        smuggles: true,
        proxy: &[400],
        upstream: &[],
    },
    Attack {
        name: "te-chunked-identity",
        framing: Framing::LooseChunked,
        smuggles: true,
        proxy: &[400],
        upstream: &[],
    },
    Attack {
        name: "te-space-before-colon",
        framing: Framing::LooseChunked,
        smuggles: true,
        proxy: &[400],
        upstream: &[],
    },
];

/// The request hidden in the body: to a host that is not on the allowlist.
fn hidden(name: &str) -> String {
    format!("GET http://evil.test/smuggled-{name} HTTP/1.1\r\nHost: evil.test\r\n\r\n")
}

/// The bytes of `attack` against an upstream on `port`, followed by a last, plain request on
/// the same connection (`/end-NAME`, `Connection: close`): where a parser's idea of the
/// framing went wrong, that one is misread too, and it ends the exchange without the client
/// having to half-close.
fn payload(attack: &Attack, port: u16) -> Vec<u8> {
    let mut bytes = attack_bytes(attack, port);
    bytes.extend_from_slice(
        format!(
            "GET http://127.0.0.1:{port}/end-{} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n",
            attack.name
        )
        .as_bytes(),
    );
    bytes
}

/// The attack alone.
fn attack_bytes(attack: &Attack, port: u16) -> Vec<u8> {
    let name = attack.name;
    let hidden = hidden(name);
    let start =
        format!("POST http://127.0.0.1:{port}/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    // A chunked body that ends at once, followed by the hidden request: a parser that reads it
    // as chunked stops before the hidden request; one that counts `Content-Length` takes all.
    let zero_then_hidden = format!("0\r\n\r\n{hidden}");
    let text = match name {
        "cl-te" => format!(
            "{start}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{zero_then_hidden}",
            zero_then_hidden.len()
        ),
        // The chunk-size line is the whole `Content-Length` body ("NN\r\n"); a parser that
        // reads it as chunked takes the hidden request as the chunk's data.
        "te-cl" => {
            let size = format!("{:x}", hidden.len());
            assert_eq!(size.len(), 2);
            format!(
                "{start}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\n{hidden}\r\n0\r\n\r\n"
            )
        }
        "cl-cl-differing" => format!(
            "{start}Content-Length: 0\r\nContent-Length: {}\r\n\r\n{hidden}",
            hidden.len()
        ),
        "cl-cl-equal" => format!("{start}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"),
        "te-xchunked" => format!(
            "{start}Content-Length: {}\r\nTransfer-Encoding: xchunked\r\n\r\n{zero_then_hidden}",
            zero_then_hidden.len()
        ),
        "te-chunked-identity" => format!(
            "{start}Content-Length: {}\r\nTransfer-Encoding: chunked, identity\r\n\r\n{zero_then_hidden}",
            zero_then_hidden.len()
        ),
        "te-space-before-colon" => format!(
            "{start}Content-Length: {}\r\nTransfer-Encoding : chunked\r\n\r\n{zero_then_hidden}",
            zero_then_hidden.len()
        ),
        other => panic!("unknown attack {other}"),
    };
    text.into_bytes()
}

/// The statuses of the responses in `bytes`, in order (bodies framed by `Content-Length` or
/// chunked, as the proxy sends them).
fn statuses(mut bytes: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let head_end =
            find(bytes, b"\r\n\r\n").unwrap_or_else(|| panic!("a cut response: {:?}", text(bytes)));
        let head = text(&bytes[..head_end]);
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not a response: {head:?}"));
        out.push(status);
        let lower = head.to_ascii_lowercase();
        let rest = &bytes[head_end + 4..];
        let used = if lower.contains("\r\ntransfer-encoding: chunked") {
            match dechunk(rest) {
                Some(Ok((_, used))) => used,
                _ => panic!("a cut chunked response: {:?}", text(rest)),
            }
        } else {
            lower
                .split("\r\n")
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap())
        };
        bytes = &rest[used..];
    }
    out
}

/// The same bytes straight to the upstream, no proxy: what it parses.
fn direct(upstream: &Upstream, bytes: &[u8]) -> Vec<Seen> {
    let mut stream = TcpStream::connect(("127.0.0.1", upstream.port)).unwrap();
    stream.write_all(bytes).unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    drop(stream);
    upstream.take()
}

// ---------------------------------------------------------------------------------------------
// Through the sandbox

/// Sends each file `cases/NAME.req` on a connection of its own to the proxy (the bridge's
/// port from `http_proxy`) and keeps all it gets back, until the proxy closes, in
/// `out/NAME.resp`.
const CLIENT: &str = r#"
import os, socket, sys
port = int(os.environ["http_proxy"].rsplit(":", 1)[1])
for name in sys.argv[1:]:
    data = open("cases/%s.req" % name, "rb").read()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(data)
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    open("out/%s.resp" % name, "wb").write(got)
print("client-done")
"#;

fn world() -> World {
    let w = World::new("garuda-smuggling-tests");
    std::fs::create_dir_all(w.project.join(".git")).unwrap();
    w
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every attack through `garuda sandbox --executor EXECUTOR`, each from a connection of its
/// own: the statuses the client got, per attack.
fn through_sandbox(
    w: &World,
    executor: &str,
    ports: &[u16],
    payloads: &[(&str, Vec<u8>)],
) -> Vec<Vec<u16>> {
    for dir in ["cases", "out"] {
        let _ = std::fs::remove_dir_all(w.project.join(dir));
        std::fs::create_dir(w.project.join(dir)).unwrap();
    }
    for (name, bytes) in payloads {
        std::fs::write(w.project.join(format!("cases/{name}.req")), bytes).unwrap();
    }
    let mut command = Command::new(garuda());
    command.args([
        "sandbox",
        "--executor",
        executor,
        "--timeout",
        "120",
        "--project",
    ]);
    command.arg(&w.project);
    for port in ports {
        command.args(["--allow-host", &format!("127.0.0.1:{port}")]);
    }
    command
        .args(["--", PYTHON, "-c", CLIENT])
        .args(payloads.iter().map(|(name, _)| name))
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME");
    for var in PROXY_VARS {
        command.env_remove(var);
    }
    let out = command.output().unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "client-done\n".to_owned()),
        "{executor}: {}",
        text(&out.stderr)
    );
    payloads
        .iter()
        .map(|(name, _)| statuses(&read(&w.project.join(format!("out/{name}.resp")))))
        .collect()
}

#[test]
fn smuggled_requests_never_reach_the_upstream() {
    let w = world();
    let loose = Upstream::start(Framing::LooseChunked);
    let first_cl = Upstream::start(Framing::FirstContentLength);
    let upstream = |framing| match framing {
        Framing::LooseChunked => &loose,
        Framing::FirstContentLength => &first_cl,
    };
    let payloads: Vec<(&str, Vec<u8>)> = ATTACKS
        .iter()
        .map(|a| (a.name, payload(a, upstream(a.framing).port)))
        .collect();

    // Negative control: straight to the upstream, each attack smuggles its hidden request.
    for (attack, (_, bytes)) in ATTACKS.iter().zip(&payloads) {
        let seen = direct(upstream(attack.framing), bytes);
        let targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
        let port = upstream(attack.framing).port;
        let first = format!("http://127.0.0.1:{port}/{}", attack.name);
        if attack.smuggles {
            // The attack, then the hidden request as a request of its own (what follows it
            // depends on the garbage the attack leaves).
            assert!(seen.len() >= 2, "{}: {seen:?}", attack.name);
            assert_eq!(targets[0], first, "{}", attack.name);
            assert_eq!(
                targets[1],
                format!("http://evil.test/smuggled-{}", attack.name),
                "{}",
                attack.name
            );
            assert!(seen[1].for_evil(), "{}: {seen:?}", attack.name);
        } else {
            let end = format!("http://127.0.0.1:{port}/end-{}", attack.name);
            assert_eq!(targets, [first, end], "{}", attack.name);
            assert_eq!(seen[0].content_lengths, 2, "{}: {seen:?}", attack.name);
        }
    }

    for executor in SANDBOXES {
        let got = through_sandbox(&w, executor, &[loose.port, first_cl.port], &payloads);
        let mut seen = loose.take();
        seen.extend(first_cl.take());
        assert!(
            seen.iter().all(|s| !s.for_evil()),
            "{executor}: a hidden request reached the upstream: {seen:?}"
        );
        for (attack, statuses) in ATTACKS.iter().zip(&got) {
            assert_eq!(statuses, attack.proxy, "{executor} {}", attack.name);
            let end = format!("/end-{}", attack.name);
            let forwarded: Vec<(&str, usize, String)> = seen
                .iter()
                .filter(|s| s.target == format!("/{}", attack.name) || s.target == end)
                .map(|s| (s.target.as_str(), s.content_lengths, text(&s.body)))
                .collect();
            let want: Vec<(&str, usize, String)> = attack
                .upstream
                .iter()
                .map(|(t, n, b)| (*t, *n, b.to_string()))
                .collect();
            // Exactly one upstream request per client request the proxy forwarded (each of
            // its 200s), framed as the proxy rebuilt it.
            assert_eq!(
                statuses.iter().filter(|s| **s == 200).count(),
                forwarded.len(),
                "{executor} {}",
                attack.name
            );
            assert_eq!(forwarded, want, "{executor} {}", attack.name);
        }
        assert_eq!(
            seen.len(),
            ATTACKS.iter().map(|a| a.upstream.len()).sum::<usize>(),
            "{executor}: {seen:?}"
        );
    }
}
