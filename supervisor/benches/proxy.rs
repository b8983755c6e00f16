//! Cost of the network allowlist proxy over a direct loopback connection.
//!
//! Run: `cargo bench -p garuda --bench proxy` (optionally `-- REQUESTS MIB`, default 5000
//! requests and 512 MiB per throughput run).
//!
//! - **Latency per request**: one keep-alive client connection sends `GET` requests one after
//!   another and reads each response (a 128-byte body) from an HTTP upstream on loopback.
//!   Variants: straight to the upstream (keep-alive, the floor); straight to the upstream
//!   with a new connection per request (what the proxy does upstream); through the proxy with
//!   the upstream listed as `127.0.0.1:PORT`; through the proxy with a name
//!   (`bench.test:PORT`) resolved by a DNS server on loopback (a lookup per request). Prints
//!   p50 and p99 in microseconds and the proxy's added p50.
//! - **Tunnel throughput**: the upstream sends `MIB` MiB as fast as it can; the client reads
//!   it straight, or through a `CONNECT` tunnel. Prints MB/s (10^6 bytes per second).
//!
//! Everything (client, upstream, DNS server, proxy) runs in this process on the same two
//! cores, so the proxy's figures include its competition for CPU with both ends.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use garuda_policy::network::Allowlist;
use garuda_supervisor::proxy::{
    ListenAddr, Proxy, ProxyConfig, ProxyLimits, Resolver, UnknownHost,
};
use hickory_proto::op::{Message, OpCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const BODY: &[u8] = &[b'x'; 128];

/// An HTTP upstream answering every request with [`BODY`].
async fn http_upstream() -> SocketAddr {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                        Bytes::from_static(BODY),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A server that sends `bytes` zero bytes to every connection, then closes it.
async fn source_upstream(bytes: usize) -> SocketAddr {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let chunk = vec![0u8; 64 * 1024];
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    addr
}

/// A DNS server answering every `A` query with 127.0.0.1 and every other query with nothing.
fn dns_server() -> SocketAddr {
    let socket = std::net::UdpSocket::bind((LOOPBACK, 0)).unwrap();
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        loop {
            let (len, from) = socket.recv_from(&mut buf).unwrap();
            let Ok(query) = Message::from_vec(&buf[..len]) else {
                continue;
            };
            let mut reply = Message::response(query.metadata.id, OpCode::Query);
            for q in &query.queries {
                reply.add_query(q.clone());
                if q.query_type() == RecordType::A {
                    reply.add_answer(Record::from_rdata(
                        q.name().clone(),
                        1,
                        RData::A(A(Ipv4Addr::LOCALHOST)),
                    ));
                }
            }
            let _ = socket.send_to(&reply.to_vec().unwrap(), from);
        }
    });
    addr
}

/// Reads one response head and its `Content-Length` body.
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap();
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed in a body");
                buf.extend_from_slice(&chunk[..n]);
            }
            return;
        }
    }
}

fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (
        us(samples[samples.len() / 2]),
        us(samples[samples.len() * 99 / 100]),
    )
}

/// `requests` requests on one keep-alive connection to `target`, after a warm-up.
async fn keep_alive_latency(target: SocketAddr, request: &str, requests: usize) -> (f64, f64) {
    let mut stream = TcpStream::connect(target).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut samples = Vec::with_capacity(requests);
    for i in 0..requests + requests / 10 {
        let started = Instant::now();
        stream.write_all(request.as_bytes()).await.unwrap();
        read_response(&mut stream, &mut buf).await;
        if i >= requests / 10 {
            samples.push(started.elapsed());
        }
    }
    percentiles(samples)
}

/// `requests` requests, each on a new connection to `target`.
async fn new_connection_latency(target: SocketAddr, request: &str, requests: usize) -> (f64, f64) {
    let mut buf = Vec::new();
    let mut samples = Vec::with_capacity(requests);
    for i in 0..requests + requests / 10 {
        let started = Instant::now();
        let mut stream = TcpStream::connect(target).await.unwrap();
        stream.set_nodelay(true).unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        read_response(&mut stream, &mut buf).await;
        if i >= requests / 10 {
            samples.push(started.elapsed());
        }
    }
    percentiles(samples)
}

/// Reads everything `target` sends (through a tunnel when `connect` is the CONNECT request
/// to send first): MB/s.
async fn download(target: SocketAddr, connect: Option<String>, bytes: usize) -> f64 {
    let mut stream = TcpStream::connect(target).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let started = Instant::now();
    if let Some(connect) = connect {
        stream.write_all(connect.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"));
    }
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = stream.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert_eq!(total, bytes);
    bytes as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok());
    let requests = args.next().unwrap_or(5000);
    let mib = args.next().unwrap_or(512);
    let bytes = mib * 1024 * 1024;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let web = rt.block_on(http_upstream());
    let source = rt.block_on(source_upstream(bytes));
    let dns = dns_server();
    let proxy = Proxy::new(ProxyConfig {
        allowlist: Allowlist::parse([
            format!("127.0.0.1:{}", web.port()),
            format!("bench.test:{}", web.port()),
            format!("127.0.0.1:{}", source.port()),
        ])
        .unwrap(),
        resolver: Resolver::Dns(dns),
        unknown_host: UnknownHost::Deny,
        limits: ProxyLimits::default(),
    })
    .unwrap();
    let scope = proxy.listen_tcp((LOOPBACK, 0).into()).unwrap();
    let ListenAddr::Tcp(proxy_addr) = scope.local_addr().clone() else {
        unreachable!()
    };

    let direct_request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_owned();
    let by_address = format!(
        "GET http://127.0.0.1:{0}/ HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
        web.port()
    );
    let by_name = format!(
        "GET http://bench.test:{0}/ HTTP/1.1\r\nHost: bench.test:{0}\r\n\r\n",
        web.port()
    );
    println!("latency per request, {requests} requests each (after 10% warm-up), p50 / p99 in µs");
    let direct = rt.block_on(keep_alive_latency(web, &direct_request, requests));
    println!(
        "direct, keep-alive                 {:8.1} / {:8.1}",
        direct.0, direct.1
    );
    let fresh = rt.block_on(new_connection_latency(web, &direct_request, requests));
    println!(
        "direct, new connection each        {:8.1} / {:8.1}",
        fresh.0, fresh.1
    );
    let proxied = rt.block_on(keep_alive_latency(proxy_addr, &by_address, requests));
    println!(
        "proxy, listed address              {:8.1} / {:8.1}   (+{:.1} p50 over direct keep-alive)",
        proxied.0,
        proxied.1,
        proxied.0 - direct.0
    );
    let named = rt.block_on(keep_alive_latency(proxy_addr, &by_name, requests));
    println!(
        "proxy, name + DNS lookup           {:8.1} / {:8.1}   (+{:.1} p50 over direct keep-alive)",
        named.0,
        named.1,
        named.0 - direct.0
    );

    println!("tunnel throughput, {mib} MiB download, MB/s (best of 3)");
    let connect = format!(
        "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
        source.port()
    );
    let best = |tunnel: bool| {
        (0..3)
            .map(|_| {
                rt.block_on(download(
                    if tunnel { proxy_addr } else { source },
                    tunnel.then(|| connect.clone()),
                    bytes,
                ))
            })
            .fold(0.0f64, f64::max)
    };
    let straight = best(false);
    println!("direct                             {straight:8.0}");
    let tunneled = best(true);
    println!(
        "through a CONNECT tunnel           {tunneled:8.0}   ({:.0}% of direct)",
        tunneled / straight * 100.0
    );
    assert!(scope.blocked().is_empty(), "{}", scope.blocked());
    drop(scope);
    drop(proxy);
}
