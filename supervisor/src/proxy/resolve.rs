//! Name resolution for names that already passed the allowlist.
//!
//! The proxy calls [`Resolver::resolve`] only after [`garuda_policy::network::Allowlist::check`]
//! accepted the name, and it connects only to addresses that came back from this one call and
//! passed [`garuda_policy::network::Allowlist::check_resolved`]. Nothing else in the proxy
//! resolves anything, so a refused name never produces a DNS query and a second, different
//! answer (DNS rebinding) is never used.
//!
//! Two resolvers:
//!
//! - [`Resolver::System`]: the C library's `getaddrinfo` (through `tokio::net::lookup_host`),
//!   i.e. `/etc/hosts`, `nsswitch.conf` and the system's DNS servers, as every other program
//!   on the machine resolves;
//! - [`Resolver::Dns`]: real DNS queries (UDP, `A` and `AAAA` in parallel, recursion desired)
//!   sent to one server, bypassing the system's configuration. Tests use it with a server of
//!   their own on loopback that counts the queries it receives; it also suits a supervisor
//!   that wants one known upstream. Replies are accepted only from that server (the socket is
//!   connected), with the random id and the exact question of a query in flight; anything
//!   else on the socket is ignored. A truncated reply is an error (there is no TCP fallback).
//!
//! Both fail at once, without a query, for a name under `.invalid`, which RFC 6761 reserves
//! as never resolving ([`ResolveError::NoAddress`]).

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use garuda_policy::network::DomainName;
use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// The most addresses kept from one resolution; every one is checked before use.
pub const MAX_ADDRESSES: usize = 32;

/// How the proxy turns an allowed name into addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resolver {
    /// The system resolver (`getaddrinfo`).
    #[default]
    System,
    /// DNS over UDP to this server (`A` and `AAAA` queries).
    Dns(SocketAddr),
}

/// Why a name could not be resolved. The proxy answers such a request with `502`; it is not a
/// refusal and is not reported as a blocked host.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The system resolver, or the socket to the DNS server, failed.
    #[error("cannot resolve {name}: {source}")]
    Lookup {
        /// The name.
        name: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// No answer in time.
    #[error("cannot resolve {name}: no answer within {timeout:?}")]
    Timeout {
        /// The name.
        name: String,
        /// How long the proxy waited.
        timeout: Duration,
    },
    /// The name exists nowhere, or has neither an IPv4 nor an IPv6 address.
    #[error("{name} has no address")]
    NoAddress {
        /// The name.
        name: String,
    },
    /// The DNS server answered with an error code.
    #[error("cannot resolve {name}: DNS server {server} answered {code}")]
    ServerError {
        /// The name.
        name: String,
        /// The server.
        server: SocketAddr,
        /// Its response code.
        code: String,
    },
    /// The DNS server's answer did not fit in a UDP reply.
    #[error("cannot resolve {name}: the answer from {server} was truncated")]
    Truncated {
        /// The name.
        name: String,
        /// The server.
        server: SocketAddr,
    },
    /// The query could not be built (a name the DNS library does not accept).
    #[error("cannot resolve {name}: {message}")]
    BadQuery {
        /// The name.
        name: String,
        /// What the DNS library said.
        message: String,
    },
}

impl Resolver {
    /// The addresses of `name` (at most [`MAX_ADDRESSES`], without duplicates, in the order
    /// given), within `timeout`.
    ///
    /// # Errors
    ///
    /// [`ResolveError`] when the lookup fails, times out or finds no address.
    pub async fn resolve(
        &self,
        name: &DomainName,
        timeout: Duration,
    ) -> Result<Vec<IpAddr>, ResolveError> {
        // RFC 6761 §6.4: a name under `.invalid` never resolves, and resolvers should say so
        // at once. Not asking also keeps such a name from leaving the machine as a query.
        if name.as_str() == "invalid" || name.as_str().ends_with(".invalid") {
            return Err(ResolveError::NoAddress {
                name: name.to_string(),
            });
        }
        let found = match self {
            Self::System => tokio::time::timeout(timeout, system_lookup(name))
                .await
                .map_err(|_| ResolveError::Timeout {
                    name: name.to_string(),
                    timeout,
                })??,
            Self::Dns(server) => dns_lookup(*server, name, timeout).await?,
        };
        let mut seen = BTreeSet::new();
        let addresses: Vec<IpAddr> = found
            .into_iter()
            .filter(|a| seen.insert(*a))
            .take(MAX_ADDRESSES)
            .collect();
        if addresses.is_empty() {
            return Err(ResolveError::NoAddress {
                name: name.to_string(),
            });
        }
        Ok(addresses)
    }
}

async fn system_lookup(name: &DomainName) -> Result<Vec<IpAddr>, ResolveError> {
    // The name is a validated DomainName (never numeric), so getaddrinfo resolves it rather
    // than parsing it as an address in one of its lax forms.
    let found = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .map_err(|source| ResolveError::Lookup {
            name: name.to_string(),
            source,
        })?;
    Ok(found.map(|sa| sa.ip()).collect())
}

async fn dns_lookup(
    server: SocketAddr,
    name: &DomainName,
    timeout: Duration,
) -> Result<Vec<IpAddr>, ResolveError> {
    let text = name.to_string();
    let io_error = |source| ResolveError::Lookup {
        name: text.clone(),
        source,
    };
    let qname = Name::from_ascii(format!("{name}.")).map_err(|e| ResolveError::BadQuery {
        name: text.clone(),
        message: e.to_string(),
    })?;
    let local: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await.map_err(io_error)?;
    // Connected: the kernel drops datagrams from any other source.
    socket.connect(server).await.map_err(io_error)?;

    let mut in_flight: Vec<(u16, RecordType)> = Vec::with_capacity(2);
    for qtype in [RecordType::A, RecordType::AAAA] {
        let mut query = Message::query();
        while in_flight.iter().any(|(id, _)| *id == query.metadata.id) {
            query = Message::query();
        }
        query.metadata.recursion_desired = true;
        query.add_query(Query::query(qname.clone(), qtype));
        let bytes = query.to_vec().map_err(|e| ResolveError::BadQuery {
            name: text.clone(),
            message: e.to_string(),
        })?;
        socket.send(&bytes).await.map_err(io_error)?;
        in_flight.push((query.metadata.id, qtype));
    }

    let deadline = Instant::now() + timeout;
    let mut addresses = Vec::new();
    let mut buf = vec![0u8; 4096];
    while !in_flight.is_empty() {
        let received = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .map_err(|_| ResolveError::Timeout {
                name: text.clone(),
                timeout,
            })?;
        let len = match received {
            Ok(len) => len,
            // An ICMP error (nothing listening) surfaces here on a connected socket.
            Err(source) => return Err(io_error(source)),
        };
        let Ok(reply) = Message::from_vec(&buf[..len]) else {
            continue;
        };
        let Some(index) = in_flight.iter().position(|(id, qtype)| {
            reply.metadata.id == *id
                && reply.metadata.message_type == MessageType::Response
                && reply.queries.len() == 1
                && reply.queries[0].name() == &qname
                && reply.queries[0].query_type() == *qtype
        }) else {
            continue;
        };
        in_flight.swap_remove(index);
        if reply.metadata.truncation {
            return Err(ResolveError::Truncated { name: text, server });
        }
        match reply.metadata.response_code {
            ResponseCode::NoError | ResponseCode::NXDomain => {}
            code => {
                return Err(ResolveError::ServerError {
                    name: text,
                    server,
                    code: code.to_string(),
                })
            }
        }
        for record in &reply.answers {
            match &record.data {
                RData::A(a) => addresses.push(IpAddr::V4(a.0)),
                RData::AAAA(aaaa) => addresses.push(IpAddr::V6(aaaa.0)),
                _ => {}
            }
        }
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use garuda_policy::network::TargetHost;

    fn name(text: &str) -> DomainName {
        match TargetHost::parse(text).unwrap() {
            TargetHost::Name(name) => name,
            TargetHost::Ip(ip) => panic!("{text} parsed as {ip}"),
        }
    }

    /// A name under `.invalid` fails at once without a query (RFC 6761); another name is
    /// asked (the negative control: the same server sees that query).
    #[tokio::test]
    async fn a_name_under_invalid_is_never_asked() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server.set_nonblocking(true).unwrap();
        let resolver = Resolver::Dns(server.local_addr().unwrap());
        for text in ["nothing.invalid", "a.b.INVALID.", "invalid"] {
            let err = resolver
                .resolve(&name(text), Duration::from_millis(200))
                .await
                .unwrap_err();
            assert!(
                matches!(err, ResolveError::NoAddress { .. }),
                "{text}: {err}"
            );
        }
        let mut buf = [0u8; 512];
        assert_eq!(
            server.recv_from(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "a query was sent"
        );
        let err = resolver
            .resolve(&name("invalid.example"), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(err, ResolveError::Timeout { .. }), "{err}");
        assert!(
            server.recv_from(&mut buf).is_ok(),
            "no query for a normal name"
        );
    }
}
