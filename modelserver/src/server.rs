//! The HTTP/1.1 server: one thread with its own tokio runtime, so that sync tests (the CLI's
//! end-to-end tests) and async tests (the clients') use it alike, and dropping it inside an
//! async test never drops a runtime there.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::encode::{error_body, error_event, stream_events};
use crate::script::{Dialect, Fault, Script, Scripted};

/// How the response to a recorded request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Still being sent.
    Sending,
    /// Sent to its end.
    Complete,
    /// Cut on purpose by a [`Fault::Cut`]: the connection was closed mid-body.
    Cut,
    /// The client went away before the end (it closed the connection: a cancelled request).
    ClientGone,
}

/// One request the server got, as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `CONNECT`…
    pub method: String,
    /// The request target as sent: `/v1/messages` in origin form, or
    /// `http://host/v1/messages` in absolute form (the server was used as a proxy), or
    /// `host:443` for a `CONNECT`.
    pub target: String,
    /// The target's path.
    pub path: String,
    /// Every header, names lower-case, values as sent (the key headers included, so that a
    /// test can check them).
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub body: Value,
    /// When the request's head arrived.
    pub arrived: Instant,
    /// When its response was finished (the last byte handed to the connection, the cut, or
    /// the client gone); `None` while it is sent.
    pub finished: Option<Instant>,
    /// How the response ended.
    pub outcome: Outcome,
    /// Which script entry answered it (`None`: not the dialect's endpoint, or the script
    /// was used up).
    pub entry: Option<usize>,
}

impl Recorded {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The request came in absolute form: the client used this server as its HTTP proxy.
    pub fn absolute_form(&self) -> bool {
        self.target.starts_with("http://") || self.target.starts_with("https://")
    }
}

struct State {
    script: Vec<Scripted>,
    next: usize,
    requests: Vec<Recorded>,
}

struct Shared {
    dialect: Dialect,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock must not hide the requests.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A scripted model server on `127.0.0.1`, running until dropped.
pub struct ModelServer {
    addr: SocketAddr,
    started: Instant,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ModelServer {
    /// Serve `script` in `dialect` on a free loopback port.
    pub fn start(dialect: Dialect, script: Vec<Scripted>) -> std::io::Result<ModelServer> {
        ModelServer::start_on(0, dialect, script)
    }

    /// Serve a script file's content on a free loopback port.
    pub fn start_script(script: Script) -> std::io::Result<ModelServer> {
        ModelServer::start(script.dialect, script.responses)
    }

    /// Serve on `127.0.0.1:port` (`0`: a free port).
    pub fn start_on(
        port: u16,
        dialect: Dialect,
        script: Vec<Scripted>,
    ) -> std::io::Result<ModelServer> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let shared = Arc::new(Shared {
            dialect,
            state: Mutex::new(State {
                script,
                next: 0,
                requests: Vec::new(),
            }),
        });
        let (stop, stopped) = oneshot::channel();
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("modelserver".into())
                .spawn(move || {
                    runtime.block_on(async move {
                        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                            return;
                        };
                        serve(listener, shared, stopped).await;
                    });
                })?
        };
        Ok(ModelServer {
            addr,
            started: Instant::now(),
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`: a base URL for a client (OpenAI-compatible clients add
    /// `/v1` themselves or through their base URL: the server accepts any prefix).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `127.0.0.1:PORT`, for a client's proxy setting.
    pub fn proxy(&self) -> String {
        self.addr.to_string()
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// When the server started (to print request times relative to it).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The dialect served.
    pub fn dialect(&self) -> Dialect {
        self.shared.dialect
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// How many script entries have been played, and how many there are.
    pub fn played(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (state.next, state.script.len())
    }

    /// Wait (blocking this thread) until `done` holds for the requests, at most `timeout`.
    /// For sync tests; an async test uses [`ModelServer::wait_for`].
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(&[Recorded]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.shared.lock().requests) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait (asynchronously: the caller's runtime keeps running its own connections) until
    /// `done` holds for the requests, at most `timeout`.
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&[Recorded]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.shared.lock().requests) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        handle(req, Arc::clone(&shared))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

/// What the body task hands the connection.
enum Chunk {
    Data(Bytes),
    /// Abort the connection mid-body.
    Cut,
}

/// A response body fed by a task, that records when and how it ended.
struct ScriptBody {
    rx: mpsc::Receiver<Chunk>,
    shared: Arc<Shared>,
    index: usize,
    ended: bool,
}

impl ScriptBody {
    fn end(&mut self, outcome: Outcome) {
        if self.ended {
            return;
        }
        self.ended = true;
        let mut state = self.shared.lock();
        if let Some(r) = state.requests.get_mut(self.index) {
            r.finished = Some(Instant::now());
            r.outcome = outcome;
        }
    }
}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Chunk::Data(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Poll::Ready(Some(Chunk::Cut)) => {
                self.end(Outcome::Cut);
                // An error from the body makes hyper close the connection without the
                // chunked terminator: the client sees a stream broken in the middle.
                Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "scripted cut",
                ))))
            }
            Poll::Ready(None) => {
                self.end(Outcome::Complete);
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ScriptBody {
    fn drop(&mut self) {
        // Dropped before its end: the connection went away under it.
        self.end(Outcome::ClientGone);
    }
}

/// A body made of `writes`, with `gap` between them, then the end or a cut.
fn body(
    shared: &Arc<Shared>,
    index: usize,
    writes: Vec<Bytes>,
    gap: Duration,
    cut: bool,
) -> ScriptBody {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        for (i, bytes) in writes.into_iter().enumerate() {
            if i > 0 {
                if gap.is_zero() {
                    // Let the connection write and flush what it has: real streaming.
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(gap).await;
                }
            }
            if tx.send(Chunk::Data(bytes)).await.is_err() {
                return;
            }
        }
        if cut {
            // Give the connection time to flush the events before it is aborted, so the
            // client sees exactly the events before the cut.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(Chunk::Cut).await;
        }
    });
    ScriptBody {
        rx,
        shared: Arc::clone(shared),
        index,
        ended: false,
    }
}

fn respond(
    status: u16,
    content_type: &str,
    extra: Option<(&str, &str)>,
    body: ScriptBody,
) -> Response<ScriptBody> {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    if let Ok(v) = content_type.parse() {
        headers.insert(hyper::header::CONTENT_TYPE, v);
    }
    if let Some((name, value)) = extra {
        if let (Ok(n), Ok(v)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            hyper::header::HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    response
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<Response<ScriptBody>, Infallible> {
    let arrived = Instant::now();
    let method = req.method().to_string();
    let target = req.uri().to_string();
    let path = req.uri().path().to_string();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let raw = match req.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let json: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let dialect = shared.dialect;
    let wanted = method == "POST" && dialect.serves(&path);
    let (index, entry) = {
        let mut state = shared.lock();
        let entry = if wanted && state.next < state.script.len() {
            let at = state.next;
            state.next += 1;
            Some((at, state.script[at].clone()))
        } else {
            None
        };
        state.requests.push(Recorded {
            method: method.clone(),
            target,
            path: path.clone(),
            headers,
            body: json.clone(),
            arrived,
            finished: None,
            outcome: Outcome::Sending,
            entry: entry.as_ref().map(|(at, _)| *at),
        });
        (state.requests.len() - 1, entry)
    };
    let once = |text: String| vec![Bytes::from(text)];
    let json_error = |status: u16, message: &str| {
        respond(
            status,
            "application/json",
            None,
            body(
                &shared,
                index,
                once(error_body(dialect, status, message)),
                Duration::ZERO,
                false,
            ),
        )
    };
    if method == "CONNECT" {
        // Recorded (a test sees the host an HTTPS client asked for), never tunnelled.
        return Ok(json_error(
            405,
            "the scripted model server opens no tunnels",
        ));
    }
    if !wanted {
        return Ok(json_error(
            404,
            &format!("no such endpoint: {method} {path}"),
        ));
    }
    let Some((_, entry)) = entry else {
        return Ok(json_error(500, "the script has no response left"));
    };
    if entry.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(entry.delay_ms)).await;
    }
    if let Some(Fault::Status {
        status,
        body: text,
        retry_after,
    }) = &entry.fault
    {
        let text = text
            .clone()
            .unwrap_or_else(|| error_body(dialect, *status, &format!("scripted status {status}")));
        return Ok(respond(
            *status,
            "application/json",
            retry_after.as_deref().map(|v| ("retry-after", v)),
            body(&shared, index, once(text), Duration::ZERO, false),
        ));
    }
    let include_usage = json["stream_options"]["include_usage"] == Value::Bool(true);
    let model = json["model"].as_str().unwrap_or("scripted");
    let mut events = stream_events(dialect, &entry, include_usage, model);
    let mut cut = false;
    match &entry.fault {
        Some(Fault::Cut { after_events }) => {
            events.truncate(*after_events);
            cut = true;
        }
        Some(Fault::ErrorEvent {
            after_events,
            error_type,
            message,
        }) => {
            events.truncate(*after_events);
            events.push(error_event(dialect, error_type, message));
        }
        _ => {}
    }
    let writes = match entry.write_bytes {
        Some(n) if n > 0 => events
            .concat()
            .into_bytes()
            .chunks(n)
            .map(Bytes::copy_from_slice)
            .collect(),
        _ => events.into_iter().map(Bytes::from).collect(),
    };
    Ok(respond(
        200,
        "text/event-stream",
        Some(("cache-control", "no-cache")),
        body(
            &shared,
            index,
            writes,
            Duration::from_millis(entry.chunk_delay_ms),
            cut,
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};

    use super::*;
    use crate::script::Part;

    /// One raw HTTP/1.1 exchange (connection closed by the client's `Connection: close`).
    fn exchange(server: &ModelServer, head: &str, body: &str) -> String {
        let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "{head}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn an_absolute_form_request_is_served_and_recorded() {
        let server = ModelServer::start(
            Dialect::Anthropic,
            vec![Scripted::reply(vec![Part::Text {
                text: "hello".into(),
            }])
            .pieces(2)],
        )
        .unwrap();
        let got = exchange(
            &server,
            "POST http://model.invalid/v1/messages HTTP/1.1\r\nHost: model.invalid\r\nx-api-key: k1",
            "{\"model\":\"m\",\"stream\":true}",
        );
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("content-type: text/event-stream"), "{got}");
        for piece in [
            "\"text\":\"he\"",
            "\"text\":\"ll\"",
            "\"text\":\"o\"",
            "event: message_stop",
        ] {
            assert!(got.contains(piece), "{piece} missing from {got}");
        }
        assert!(server.wait_until(Duration::from_secs(10), |r| r
            .first()
            .is_some_and(|r| r.outcome == Outcome::Complete)));
        let r = &server.requests()[0];
        assert_eq!(r.target, "http://model.invalid/v1/messages");
        assert!(r.absolute_form());
        assert_eq!(r.header("X-Api-Key"), Some("k1"));
        assert_eq!(r.body["model"], "m");
        assert_eq!(r.entry, Some(0));
        assert!(r.finished.unwrap() >= r.arrived);

        // Past the script: a 500; another path: a 404; both recorded, neither an entry.
        let got = exchange(&server, "POST /v1/messages HTTP/1.1\r\nHost: x", "{}");
        assert!(got.starts_with("HTTP/1.1 500"), "{got}");
        let got = exchange(
            &server,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x",
            "{}",
        );
        assert!(got.starts_with("HTTP/1.1 404"), "{got}");
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[1].entry, None);
        assert_eq!(requests[2].entry, None);
    }

    #[test]
    fn openai_chunks_end_with_usage_and_done() {
        let server = ModelServer::start(
            Dialect::Openai,
            vec![
                Scripted::text("hi").with_usage(4, 2),
                Scripted::text("hi").with_usage(4, 2),
            ],
        )
        .unwrap();
        let asked = exchange(
            &server,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x",
            "{\"stream_options\":{\"include_usage\":true}}",
        );
        assert!(asked.contains("\"prompt_tokens\":4"), "{asked}");
        assert!(asked.contains("\"finish_reason\":\"stop\""), "{asked}");
        let usage_at = asked.find("prompt_tokens").unwrap();
        assert!(asked[usage_at..].contains("data: [DONE]\n\n"), "{asked}");
        // Control: not asked, no usage chunk.
        let plain = exchange(
            &server,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x",
            "{}",
        );
        assert!(plain.contains("data: [DONE]"), "{plain}");
        assert!(!plain.contains("prompt_tokens"), "{plain}");
    }

    #[test]
    fn a_status_fault_carries_retry_after() {
        let server = ModelServer::start(
            Dialect::Anthropic,
            vec![Scripted::status(529).retry_after("7")],
        )
        .unwrap();
        let got = exchange(&server, "POST /v1/messages HTTP/1.1\r\nHost: x", "{}");
        assert!(got.starts_with("HTTP/1.1 529"), "{got}");
        assert!(got.contains("retry-after: 7\r\n"), "{got}");
        assert!(got.contains("\"type\":\"overloaded_error\""), "{got}");
    }

    #[test]
    fn a_cut_ends_without_the_chunked_terminator() {
        let server = ModelServer::start(
            Dialect::Anthropic,
            vec![Scripted::text("abcdefghij").pieces(1).cut_after(4)],
        )
        .unwrap();
        let got = exchange(&server, "POST /v1/messages HTTP/1.1\r\nHost: x", "{}");
        assert_eq!(got.matches("event: ").count(), 4, "{got}");
        assert!(!got.ends_with("0\r\n\r\n"), "{got}");
        assert!(server.wait_until(Duration::from_secs(10), |r| r
            .first()
            .is_some_and(|r| r.outcome == Outcome::Cut)));
    }
}
