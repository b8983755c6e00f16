//! Test servers on loopback shared by the network tests (`proxy.rs`, `network.rs`): an HTTP
//! upstream that describes every request it gets, an HTTPS upstream with a CA made at test
//! time (`rcgen`), a TCP echo server, and a DNS server that counts the queries it gets. Each
//! upstream counts the connections it accepted and logs the requests it served, so a test can
//! show that a refused request never reached it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::runtime::Runtime;

pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

// ---------------------------------------------------------------------------------------------
// A DNS server that counts queries

/// A real DNS server on loopback (UDP). `zone` maps a name to a sequence of answers: the n-th
/// `A` (or `AAAA`) query for a name gets the n-th entry's IPv4 (IPv6) addresses, the last entry
/// repeating. Unknown names get NXDOMAIN. Every query is logged.
pub struct DnsServer {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<(String, RecordType)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DnsServer {
    pub fn start(zone: &[(&str, Vec<Vec<IpAddr>>)]) -> Self {
        let socket = UdpSocket::bind((LOOPBACK, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let zone: HashMap<String, Vec<Vec<IpAddr>>> = zone
            .iter()
            .map(|(name, answers)| (name.to_string(), answers.clone()))
            .collect();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let log = Arc::clone(&log);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut counts: HashMap<(String, RecordType), usize> = HashMap::new();
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((len, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    let Ok(query) = Message::from_vec(&buf[..len]) else {
                        continue;
                    };
                    let mut reply = Message::response(query.metadata.id, OpCode::Query);
                    reply.metadata.recursion_desired = query.metadata.recursion_desired;
                    reply.metadata.recursion_available = true;
                    for q in &query.queries {
                        let name = q.name().to_ascii().trim_end_matches('.').to_lowercase();
                        let qtype = q.query_type();
                        log.lock().unwrap().push((name.clone(), qtype));
                        reply.add_query(q.clone());
                        let Some(answers) = zone.get(&name) else {
                            reply.metadata.response_code = ResponseCode::NXDomain;
                            continue;
                        };
                        let n = counts.entry((name, qtype)).or_default();
                        let set = &answers[(*n).min(answers.len() - 1)];
                        *n += 1;
                        for ip in set {
                            let data = match (ip, qtype) {
                                (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
                                (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
                                _ => continue,
                            };
                            reply.add_answer(Record::from_rdata(q.name().clone(), 1, data));
                        }
                    }
                    let _ = socket.send_to(&reply.to_vec().unwrap(), from);
                }
            })
        };
        Self {
            addr,
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// Queries (of any type) received for `name`.
    pub fn queries_for(&self, name: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .count()
    }

    pub fn queries_of(&self, name: &str, qtype: RecordType) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, t)| n == name && *t == qtype)
            .count()
    }

    pub fn total(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream servers

/// A server started by a test, with the number of connections it accepted and the requests it
/// served (`METHOD URI`, in order; the echo server serves none).
pub struct Upstream {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn accepted(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The requests served so far, as `METHOD URI` (`GET /path?q=1`).
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Answers every request with what it saw: which server, method, target, `Host`, body length,
/// and the names of all headers.
pub async fn describe(name: &'static str, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = request.method().clone();
    let uri = request.uri().clone();
    let host = request
        .headers()
        .get(hyper::header::HOST)
        .map(|h| h.to_str().unwrap_or("?").to_owned())
        .unwrap_or_default();
    let names: Vec<String> = request
        .headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .collect();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let text = format!(
        "upstream={name}\nmethod={method}\nuri={uri}\nhost={host}\nbody={}:{}\nheaders={}\n",
        body.len(),
        String::from_utf8_lossy(&body[..body.len().min(32)]),
        names.join(",")
    );
    Response::new(Full::new(Bytes::from(text)))
}

/// [`describe`], with the request logged in `requests` first.
async fn describe_logged(
    name: &'static str,
    requests: Arc<Mutex<Vec<String>>>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    requests
        .lock()
        .unwrap()
        .push(format!("{} {}", request.method(), request.uri()));
    describe(name, request).await
}

pub fn http_server(rt: &Runtime, bind: SocketAddr, name: &'static str) -> Upstream {
    let listener = rt.block_on(tokio::net::TcpListener::bind(bind)).unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let counter = Arc::clone(&connections);
    let log = Arc::clone(&requests);
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let log = Arc::clone(&log);
                    async move {
                        Ok::<_, std::convert::Infallible>(describe_logged(name, log, req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Upstream {
        addr,
        connections,
        requests,
    }
}

/// A test CA and an HTTPS server for `allowed.test` signed by it. Returns the server and the
/// CA's PEM file (for curl's `--cacert`).
pub fn https_server(rt: &Runtime, dir: &Path) -> (Upstream, PathBuf) {
    https_server_for(rt, dir, &["allowed.test"])
}

/// A test CA and an HTTPS server whose certificate, signed by it, names `names` (an entry that
/// parses as an IP address becomes an address name). Writes the CA's PEM file to
/// `dir/ca.pem` and returns the server and that path.
pub fn https_server_for(rt: &Runtime, dir: &Path, names: &[&str]) -> (Upstream, PathBuf) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Garuda proxy test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((LOOPBACK, 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let counter = Arc::clone(&connections);
    let log = Arc::clone(&requests);
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let log = Arc::clone(&log);
                    async move {
                        Ok::<_, std::convert::Infallible>(describe_logged("https", log, req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (
        Upstream {
            addr,
            connections,
            requests,
        },
        ca_file,
    )
}

/// A TCP server that echoes every byte back.
pub fn echo_server(rt: &Runtime) -> Upstream {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind((LOOPBACK, 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    rt.spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Upstream {
        addr,
        connections,
        requests: Arc::new(Mutex::new(Vec::new())),
    }
}
