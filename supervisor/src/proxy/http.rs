//! HTTP/1 on one client connection: CONNECT tunnels and absolute-form requests.
//!
//! hyper parses the requests (with bounded header size and count, and a header read timeout);
//! this module decides what each one means and calls [`gate::admit`] for it. Every request is
//! handled on its own: the second request on a keep-alive connection goes through the same
//! checks as the first, and no upstream connection is reused between requests.
//!
//! - **CONNECT** `host:port`: admitted, connected, then `200` and bytes copied both ways until
//!   either side closes or the connection idles out. The proxy never looks inside the tunnel.
//! - **Absolute-form** `GET http://host[:port]/path`: the `Host` header, if present, must name
//!   the same host and port as the URL (a header that differs is how a request would pass the
//!   check on its URL and be routed by a shared upstream on its `Host`); admitted, connected,
//!   then forwarded in origin form with `Host` set from the URL and hop-by-hop headers
//!   (`Connection` and what it names, `Keep-Alive`, `Proxy-*`, `TE`, `Trailer`,
//!   `Transfer-Encoding`, `Upgrade`) removed in both directions. Message framing is rebuilt by
//!   hyper from the body, so a request cannot smuggle a second one past the proxy's checks.
//! - Anything else: origin-form (`GET /`, the proxy serves nothing itself), `https://` in
//!   absolute form (the proxy does not originate TLS: use CONNECT), other schemes: `400`.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use garuda_policy::network::{HostProblem, Refusal, RefusalReason, TargetHost};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, PathAndQuery};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::gate::{self, Denied};
use super::idle::IdleTimeout;
use super::scope_state::ScopeState;
use super::upstream::{UpstreamFailure, PROXY_STATUS_HEADER};
use super::Shared;

/// The header that marks a refusal by the proxy; its value is
/// [`RefusalReason::code`](garuda_policy::network::RefusalReason::code).
pub const REFUSED_HEADER: &str = "x-garuda-refused";

type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// One client connection.
struct Connection {
    shared: Arc<Shared>,
    scope: Arc<ScopeState>,
    cancelled: watch::Receiver<bool>,
    /// A CONNECT that was admitted and dialled: taken over once hyper hands the connection
    /// back after the `200`.
    tunnel: Mutex<Option<Tunnel>>,
}

struct Tunnel {
    upgrade: hyper::upgrade::OnUpgrade,
    upstream: TcpStream,
}

/// Serves one client connection until it closes, idles out or its scope is closed (the
/// scope's accept loop aborts this task).
pub(crate) async fn serve<S>(
    stream: S,
    shared: Arc<Shared>,
    scope: Arc<ScopeState>,
    cancelled: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.config.limits.clone();
    let io = TokioIo::new(IdleTimeout::new(stream, limits.idle_timeout));
    let connection = Arc::new(Connection {
        shared,
        scope,
        cancelled,
        tunnel: Mutex::new(None),
    });
    let service = {
        let connection = Arc::clone(&connection);
        hyper::service::service_fn(move |request| {
            let connection = Arc::clone(&connection);
            async move { Ok::<_, Infallible>(handle(&connection, request).await) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_headers(limits.max_headers)
        .keep_alive(true);
    if builder
        .serve_connection(io, service)
        .with_upgrades()
        .await
        .is_err()
    {
        return;
    }
    let tunnel = connection
        .tunnel
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(Tunnel {
        upgrade,
        mut upstream,
    }) = tunnel
    {
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let mut client = TokioIo::new(upgraded);
        // Both ends are timed: an upstream that stops reading (and sending) would otherwise
        // stall the copy with the client's side never polled, holding the slot forever.
        let mut upstream = IdleTimeout::new(&mut upstream, limits.idle_timeout);
        let _ = tokio::io::copy_bidirectional_with_sizes(
            &mut client,
            &mut upstream,
            TUNNEL_BUFFER,
            TUNNEL_BUFFER,
        )
        .await;
    }
}

/// Bytes buffered per direction of a tunnel: with 1024 tunnels, 32 MiB at most.
const TUNNEL_BUFFER: usize = 16 * 1024;

async fn handle(connection: &Connection, request: Request<Incoming>) -> Response<ProxyBody> {
    if request.method() == Method::CONNECT {
        tunnel(connection, request).await
    } else {
        forward(connection, request).await
    }
}

/// The one path from an authority to an upstream connection, for CONNECT and for forwarded
/// requests alike: the gate's decision (refusals become `403` and enter the blocked list), then
/// a dial to exactly the admitted addresses (`502` when none answers).
async fn admit_and_dial(
    connection: &Connection,
    authority: &Authority,
    port: u16,
) -> Result<TcpStream, Response<ProxyBody>> {
    let admitted = gate::admit(
        &connection.shared,
        &connection.scope,
        authority.host(),
        port,
    )
    .await
    .map_err(|denied| denied_response(connection, denied, port))?;
    let timeout = connection.shared.config.limits.connect_timeout;
    dial(&admitted.addresses, timeout).await.map_err(|e| {
        unreachable(
            connection,
            &UpstreamFailure::from_connect(&admitted.host, port, &e, timeout),
        )
    })
}

async fn tunnel(connection: &Connection, mut request: Request<Incoming>) -> Response<ProxyBody> {
    let uri = request.uri();
    let authority = match uri.authority() {
        Some(a) if uri.scheme().is_none() && uri.path_and_query().is_none() => a.clone(),
        _ => return plain(StatusCode::BAD_REQUEST, "CONNECT takes host:port\n"),
    };
    let Some(port) = authority.port_u16() else {
        return plain(StatusCode::BAD_REQUEST, "CONNECT takes host:port\n");
    };
    if let Some(refusal) = user_info(&authority, port) {
        return refuse(connection, refusal);
    }
    let upstream = match admit_and_dial(connection, &authority, port).await {
        Ok(upstream) => upstream,
        Err(response) => return response,
    };
    let upgrade = hyper::upgrade::on(&mut request);
    *connection
        .tunnel
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(Tunnel { upgrade, upstream });
    Response::new(empty())
}

async fn forward(connection: &Connection, request: Request<Incoming>) -> Response<ProxyBody> {
    let uri = request.uri();
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return plain(
                StatusCode::BAD_REQUEST,
                "https:// URLs go through CONNECT: the proxy does not originate TLS\n",
            )
        }
        Some(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                "only http:// URLs and CONNECT are proxied\n",
            )
        }
        None => {
            return plain(
                StatusCode::BAD_REQUEST,
                "not a proxy request: send an absolute URL (http://host/path) or CONNECT\n",
            )
        }
    }
    let Some(authority) = uri.authority().cloned() else {
        return plain(StatusCode::BAD_REQUEST, "the URL has no host\n");
    };
    let port = authority.port_u16().unwrap_or(80);
    if let Some(refusal) = user_info(&authority, port) {
        return refuse(connection, refusal);
    }
    if let Err(refusal) = check_host_header(request.headers(), &authority, port) {
        return refuse(connection, refusal);
    }
    let upstream = match admit_and_dial(connection, &authority, port).await {
        Ok(upstream) => upstream,
        Err(response) => return response,
    };
    let limits = &connection.shared.config.limits;
    let Some(upstream_request) = origin_form(request, &authority) else {
        return plain(StatusCode::BAD_REQUEST, "cannot rewrite the request\n");
    };

    let io = TokioIo::new(IdleTimeout::new(upstream, limits.idle_timeout));
    let handshake = hyper::client::conn::http1::Builder::new()
        .max_headers(limits.max_headers)
        .max_header_size(limits.max_header_bytes)
        .handshake::<_, Incoming>(io)
        .await;
    let (mut sender, upstream_connection) = match handshake {
        Ok(parts) => parts,
        Err(e) => return upstream_broke(connection, &authority, port, &e),
    };
    // hyper drives the upstream connection on its own task; it ends with the response, or
    // with the scope.
    let mut cancelled = connection.cancelled.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = upstream_connection => {}
            _ = cancelled.wait_for(|closed| *closed) => {}
        }
    });
    let response = match sender.send_request(upstream_request).await {
        Ok(response) => response,
        Err(e) => return upstream_broke(connection, &authority, port, &e),
    };
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body.boxed_unsync())
}

/// The request as the upstream gets it: origin form, HTTP/1.1, `Host` from the URL, no
/// hop-by-hop headers, framing left to hyper.
fn origin_form(request: Request<Incoming>, authority: &Authority) -> Option<Request<Incoming>> {
    let (parts, body) = request.into_parts();
    let mut headers = parts.headers;
    let was_chunked = strip_hop_by_hop(&mut headers);
    // hyper answers `Expect: 100-continue` itself when the body is read.
    headers.remove(header::EXPECT);
    headers.remove(header::HOST);
    headers.insert(
        header::HOST,
        HeaderValue::from_str(authority.as_str()).ok()?,
    );
    if was_chunked && !body.is_end_stream() {
        // Without it hyper would send a GET's streamed body with no framing.
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut upstream = Request::new(body);
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = Uri::from(path);
    *upstream.version_mut() = Version::HTTP_11;
    *upstream.headers_mut() = headers;
    Some(upstream)
}

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), including those named by `Connection`.
/// Returns whether the message had a `Transfer-Encoding`; its `Content-Length` is then removed
/// too, since the two disagreeing is how requests are smuggled.
fn strip_hop_by_hop(headers: &mut HeaderMap) -> bool {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    if chunked {
        headers.remove(header::CONTENT_LENGTH);
    }
    chunked
}

/// User info (`user@host`) in an authority: refused, since parsers disagree about which host
/// such an authority names.
fn user_info(authority: &Authority, port: u16) -> Option<Refusal> {
    authority.as_str().contains('@').then(|| Refusal {
        host: authority.as_str().to_owned(),
        port,
        reason: RefusalReason::MalformedHost(HostProblem::UserInfo),
    })
}

/// The `Host` header, when present, must name the URL's host and port (exactly one header).
fn check_host_header(headers: &HeaderMap, url: &Authority, url_port: u16) -> Result<(), Refusal> {
    let mut values = headers.get_all(header::HOST).iter();
    let Some(value) = values.next() else {
        return Ok(());
    };
    let mismatch = |host: String, port: u16| Refusal {
        host,
        port,
        reason: RefusalReason::HostHeaderMismatch,
    };
    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
    if values.next().is_some() {
        return Err(mismatch(text, url_port));
    }
    let Ok(named) = Authority::from_str(&text) else {
        return Err(mismatch(text, url_port));
    };
    let port = named.port_u16().unwrap_or(80);
    if named.as_str().contains('@') {
        return Err(mismatch(text, port));
    }
    let header_host = TargetHost::parse(named.host());
    let same = matches!(
        (&header_host, TargetHost::parse(url.host())),
        (Ok(a), Ok(b)) if *a == b
    ) && port == url_port;
    if same {
        return Ok(());
    }
    let host = header_host.map_or_else(|_| named.host().to_owned(), |h| h.to_string());
    Err(mismatch(host, port))
}

/// Connects to the first address that answers, in order. Only the admitted addresses are
/// tried: nothing is resolved here.
async fn dial(addresses: &[SocketAddr], timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for address in addresses {
        match tokio::time::timeout(timeout, TcpStream::connect(*address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {address} timed out"),
                );
            }
        }
    }
    Err(last)
}

fn denied_response(connection: &Connection, denied: Denied, port: u16) -> Response<ProxyBody> {
    match denied {
        Denied::Refused(refusal) => refuse(connection, refusal),
        Denied::Unresolved { host, error } => unreachable(
            connection,
            &UpstreamFailure::from_resolve(&host, port, &error),
        ),
    }
}

/// `502` with the reason in the body and in `Proxy-Status` (RFC 9209), and the host recorded
/// in the scope's list of unreachable hosts.
fn unreachable(connection: &Connection, failure: &UpstreamFailure) -> Response<ProxyBody> {
    connection.scope.record_failure(failure);
    let mut response = plain(StatusCode::BAD_GATEWAY, &failure.body());
    // Printable ASCII by construction (`structured_string`); should it ever not be, the body
    // still says why.
    if let Ok(value) = HeaderValue::from_str(&failure.proxy_status()) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(PROXY_STATUS_HEADER), value);
    }
    response
}

/// A forwarded request whose upstream connection broke: `502`, recorded as unreachable unless
/// the client's side broke it.
fn upstream_broke(
    connection: &Connection,
    authority: &Authority,
    port: u16,
    e: &hyper::Error,
) -> Response<ProxyBody> {
    let host = TargetHost::parse(authority.host())
        .map_or_else(|_| authority.host().to_owned(), |t| t.to_string());
    match UpstreamFailure::from_http(&host, port, e) {
        Some(failure) => unreachable(connection, &failure),
        None => plain(
            StatusCode::BAD_GATEWAY,
            &format!("{}: {e}\n", garuda_text::visible(authority.as_str())),
        ),
    }
}

/// `403` with `X-Garuda-Refused`, and the host recorded in the scope's blocked list.
fn refuse(connection: &Connection, refusal: Refusal) -> Response<ProxyBody> {
    let mut response = plain(
        StatusCode::FORBIDDEN,
        &format!(
            "Garuda's network allowlist refused {} port {}: {}\n",
            refusal.host, refusal.port, refusal.reason
        ),
    );
    response.headers_mut().insert(
        HeaderName::from_static(REFUSED_HEADER),
        HeaderValue::from_static(refusal.reason.code()),
    );
    connection.scope.record(refusal);
    response
}

fn plain(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(text.to_owned()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn hop_by_hop_headers_are_removed() {
        let mut map = headers(&[
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic abc"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("transfer-encoding", "chunked"),
            ("content-length", "10"),
            ("accept", "*/*"),
        ]);
        assert!(strip_hop_by_hop(&mut map));
        let left: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["accept"]);

        let mut map = headers(&[("content-length", "10")]);
        assert!(!strip_hop_by_hop(&mut map));
        assert!(map.contains_key(header::CONTENT_LENGTH));
    }

    #[test]
    fn the_host_header_must_name_the_url() {
        let url = Authority::from_static("allowed.test:8080");
        let ok = [
            vec![],
            vec![("host", "allowed.test:8080")],
            vec![("host", "ALLOWED.test.:8080")],
        ];
        for case in ok {
            assert_eq!(
                check_host_header(&headers(&case), &url, 8080),
                Ok(()),
                "{case:?}"
            );
        }
        let default_port = Authority::from_static("allowed.test");
        assert_eq!(
            check_host_header(&headers(&[("host", "allowed.test:80")]), &default_port, 80),
            Ok(())
        );
        let refused = [
            (vec![("host", "evil.test:8080")], "evil.test", 8080),
            (vec![("host", "allowed.test")], "allowed.test", 80),
            (vec![("host", "allowed.test:8081")], "allowed.test", 8081),
            (
                vec![("host", "user@allowed.test:8080")],
                "user@allowed.test:8080",
                8080,
            ),
            (
                vec![("host", "allowed.test:8080"), ("host", "evil.test")],
                "allowed.test:8080",
                8080,
            ),
            (vec![("host", "0x7f000001:8080")], "127.0.0.1", 8080),
            (vec![("host", "a b")], "a b", 8080),
        ];
        for (case, host, port) in refused {
            let refusal = check_host_header(&headers(&case), &url, 8080).unwrap_err();
            assert_eq!(
                refusal.reason,
                RefusalReason::HostHeaderMismatch,
                "{case:?}"
            );
            assert_eq!(
                (refusal.host.as_str(), refusal.port),
                (host, port),
                "{case:?}"
            );
        }
    }
}
