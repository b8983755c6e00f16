//! The network allowlist proxy: the only way out of a sandboxed command's network namespace.
//!
//! A sandboxed command has no route anywhere. Its `HTTP_PROXY` / `HTTPS_PROXY` point at a
//! listener on loopback inside its own network namespace, whose connections the sandbox side
//! ([`crate::netbridge`]) forwards, bytes only, to this proxy's unix socket for that command
//! ([`Proxy::listen_unix`]); the proxy lets through exactly what the
//! [`Allowlist`] allows. The agent's model traffic will use
//! a second instance with a one-host list, which is why the allowlist is a constructor argument
//! ([`ProxyConfig`]) and never a global.
//!
//! # Shape
//!
//! - [`Proxy::new`] starts one proxy: its own small tokio runtime (two worker threads by
//!   default), so the synchronous supervisor can own it and drop it.
//! - [`Proxy::listen_unix`] / [`Proxy::listen_tcp`] give each command its own listener and
//!   return a [`CommandScope`]. Everything refused on that listener is recorded in the scope:
//!   [`CommandScope::blocked`] lists each blocked host once, in order, and prints as
//!   `evil.test (not in allowlist), 169.254.169.254 (metadata address)`. Closing (or dropping)
//!   the scope stops its listener and ends its connections and tunnels.
//! - Traffic: HTTP/1 absolute-form requests (`GET http://host/path`), forwarded with a fresh
//!   upstream connection per request and hop-by-hop headers removed, and `CONNECT host:port`
//!   tunnels (how HTTPS goes through: the proxy never sees inside TLS). An origin-form request
//!   (`GET /`) or an `https://` absolute-form request is a `400`: the proxy neither serves
//!   content itself nor originates TLS.
//!
//! # Checks, and the attack each stops
//!
//! Every decision is made by one function, `gate::admit`, for every tunnel and every request:
//!
//! | check | attack it stops |
//! |---|---|
//! | a command has no network but the proxy (sandbox side) | plain HTTP or raw TCP straight out, unfiltered |
//! | the allowlist is checked **before** any lookup, on the name as written | a refused name leaking through the DNS query itself; the resolver reading the name differently than the check |
//! | hosts are parsed as clients parse them: `0x7f000001`, `2130706433`, `0177.0.0.1`, `127.1`, `[::ffff:127.0.0.1]`, zone ids all become the address they mean | `CONNECT 2130706433:22` passing a name check and reaching loopback |
//! | an IP literal passes only when that exact address is listed | `CONNECT 127.0.0.1:6379`, `CONNECT [::1]:22`, `GET http://169.254.169.254/latest/meta-data/` |
//! | each request on a keep-alive connection is checked again | one allowed request opening a connection that later requests reuse for another host |
//! | the `Host` header of an absolute-form request must name the URL's host and port | a request that passes the check on its URL while the upstream (a shared server or CDN) routes on `Host` to another site |
//! | every address an allowed name resolves to must be public, or listed itself | an allowed (or wildcard-matched, attacker-owned) name resolving to `127.0.0.1` or `169.254.169.254` |
//! | the connection goes to exactly the checked addresses; nothing resolves twice | DNS rebinding: a first answer that passes, a second one that points inside |
//! | metadata addresses (`169.254.169.254`, `fd00:ec2::254`, `100.100.100.200`, …) are their own class, never public | stealing the machine's cloud credentials |
//! | a port other than 80/443 needs an entry with that port | an allowed host's SSH, database or admin port |
//!
//! A refusal is a `403 Forbidden` with `X-Garuda-Refused: <code>` (see
//! [`RefusalReason::code`](garuda_policy::network::RefusalReason::code)) and a one-line text
//! body; a name that was allowed but could not be resolved or reached is a `502` and is not a
//! refusal: its body names the host and the reason in plain words, its `Proxy-Status` header
//! (RFC 9209) the error type (`dns_error`, `connection_refused`, …), and the scope records it
//! in [`CommandScope::unreachable`] (see [`upstream`]). Unknown hosts follow [`UnknownHost`]: refused ([`UnknownHost::Deny`], for
//! non-interactive runs) or put to the user ([`UnknownHost::Ask`]) off the async runtime. Only
//! names are ever asked about; an IP literal, a malformed host, a mismatched `Host` header or
//! a name resolving inside is refused without a question, since "allow 169.254.169.254?" is a
//! question a user should never be trapped into answering.
//!
//! # Bounds
//!
//! [`ProxyLimits`]: connections per scope (the listener stops accepting while full), request
//! header bytes and count, a header read timeout (slow-loris), an idle timeout on every
//! connection and tunnel, connect and DNS timeouts, and at most
//! [`MAX_BLOCKED_ENTRIES`](scope_state::MAX_BLOCKED_ENTRIES) blocked hosts recorded per scope. Every
//! task of a scope is owned by its accept loop, so closing the scope frees every descriptor.
//!
//! # What it does not do
//!
//! It does not look inside TLS: once a tunnel to an allowed host is open, what the command
//! sends in it (for instance a different SNI or `Host` inside TLS, "domain fronting") is out
//! of reach. It does not pool upstream connections (each request is admitted on its own).
//! See `docs/network.md`.

mod gate;
mod http;
mod idle;
pub mod resolve;
pub mod scope;
pub mod scope_state;
pub(crate) mod socket_dir;
pub mod upstream;

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use garuda_policy::network::Allowlist;

pub use resolve::{ResolveError, Resolver};
pub use scope::{CommandScope, ListenAddr};
pub use scope_state::{Blocked, BlockedHosts};
pub use upstream::{FailureKind, Unreachable, UnreachableHosts, UpstreamFailure};

/// What the user answered about a host that is not in the allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskAnswer {
    /// Let this one request or tunnel through.
    AllowOnce,
    /// Let this host and port through for the rest of the proxy's life (every scope).
    AllowSession,
    /// Refuse; the same host and port are refused without asking again in this scope.
    Deny,
}

/// Asks the user about a host that is not in the allowlist. Called on a blocking thread (it may
/// wait for the user as long as it likes), one question at a time.
pub trait Ask: Send + Sync {
    /// The answer for `host` (canonical form: lower-case, A-labels) on `port`.
    fn ask(&self, host: &str, port: u16) -> AskAnswer;
}

impl<F> Ask for F
where
    F: Fn(&str, u16) -> AskAnswer + Send + Sync,
{
    fn ask(&self, host: &str, port: u16) -> AskAnswer {
        self(host, port)
    }
}

/// Whether a host the allowlist does not name may be put to a person at all (where there is
/// one): not under the strict profile, nor when a managed policy says its hosts are the only
/// ones (`managedHostsOnly`).
pub fn hosts_may_be_asked(settings: &garuda_policy::EffectiveSettings) -> bool {
    !settings.is_strict() && settings.managed_hosts_only.is_none()
}

/// What to do with a host the allowlist does not name.
#[derive(Clone, Default)]
pub enum UnknownHost {
    /// Refuse (non-interactive runs, jobs). The safe default.
    #[default]
    Deny,
    /// Ask the user (the chat).
    Ask(Arc<dyn Ask>),
}

impl fmt::Debug for UnknownHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deny => f.write_str("Deny"),
            Self::Ask(_) => f.write_str("Ask(..)"),
        }
    }
}

/// Resource bounds of a proxy. Every field is a hard limit; [`Default`] gives the values used
/// for sandboxed commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Connections open at once on one scope (each tunnel is one). The listener stops
    /// accepting while the scope is full. Default 1024.
    pub max_connections: usize,
    /// Bytes of one request's line and headers (and of an upstream response's). Default
    /// 64 KiB; a larger request gets `431`.
    pub max_header_bytes: usize,
    /// Header fields in one request or response. Default 100.
    pub max_headers: usize,
    /// Time for a client to send a request's headers. Default 30 s.
    pub header_read_timeout: Duration,
    /// A connection or tunnel with no traffic in either direction for this long is closed.
    /// Default 300 s.
    pub idle_timeout: Duration,
    /// Time to connect to an upstream address. Default 10 s.
    pub connect_timeout: Duration,
    /// Time for one name resolution. Default 5 s.
    pub dns_timeout: Duration,
    /// Worker threads of the proxy's runtime. Default 2.
    pub worker_threads: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            dns_timeout: Duration::from_secs(5),
            worker_threads: 2,
        }
    }
}

/// Everything a proxy is built from.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The hosts it lets through.
    pub allowlist: Allowlist,
    /// How allowed names are resolved.
    pub resolver: Resolver,
    /// What happens to a host the allowlist does not name.
    pub unknown_host: UnknownHost,
    /// Resource bounds.
    pub limits: ProxyLimits,
}

/// Why a proxy or a listener could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A limit is out of range.
    #[error("proxy limit {limit} = {value} is out of range ({expected})")]
    BadLimit {
        /// The field of [`ProxyLimits`].
        limit: &'static str,
        /// Its value.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The runtime could not be started.
    #[error("cannot start the proxy's runtime: {0}")]
    Runtime(#[source] io::Error),
    /// A TCP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    BindTcp {
        /// The address.
        addr: SocketAddr,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A unix socket could not be bound (an existing file at the path is never replaced).
    #[error("cannot listen on {}: {source}", path.display())]
    BindUnix {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The unix socket's mode could not be set to 0600 (the socket was removed again).
    #[error("cannot restrict {} to mode 0600: {source}", path.display())]
    Chmod {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// State shared by every scope of one proxy.
pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    /// Host and port pairs the user allowed for the session.
    session: Mutex<HashSet<(String, u16)>>,
    /// One question to the user at a time.
    pub(crate) ask_turn: Arc<tokio::sync::Mutex<()>>,
}

impl Shared {
    pub(crate) fn session_allowed(&self, key: &(String, u16)) -> bool {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    pub(crate) fn allow_for_session(&self, key: (String, u16)) {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
    }
}

/// A running proxy. Dropping it stops its runtime, and with it every listener and connection.
pub struct Proxy {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Starts a proxy for `config`. It listens nowhere until [`Proxy::listen_unix`] or
    /// [`Proxy::listen_tcp`].
    ///
    /// # Errors
    ///
    /// [`ProxyError::BadLimit`] for a limit out of range, [`ProxyError::Runtime`] when the
    /// runtime's threads cannot be started.
    pub fn new(config: ProxyConfig) -> Result<Self, ProxyError> {
        check_limits(&config.limits)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.limits.worker_threads)
            .max_blocking_threads(32)
            .thread_name("garuda-proxy")
            .enable_io()
            .enable_time()
            .build()
            .map_err(ProxyError::Runtime)?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                session: Mutex::new(HashSet::new()),
                ask_turn: Arc::new(tokio::sync::Mutex::new(())),
            }),
            runtime: Some(runtime),
        })
    }

    /// The configuration the proxy runs with.
    #[must_use]
    pub fn config(&self) -> &ProxyConfig {
        &self.shared.config
    }

    /// A listener for one command on a new unix socket at `path`, mode 0600, owned by the
    /// supervisor's user. The socket is created (never an existing file replaced), then
    /// restricted; keep it in a directory only the supervisor can write, so nobody can connect
    /// in between. The scope removes the socket when it is closed.
    ///
    /// # Errors
    ///
    /// [`ProxyError::BindUnix`] (the path exists, the directory is missing, …) or
    /// [`ProxyError::Chmod`].
    pub fn listen_unix(&self, path: &Path) -> Result<CommandScope, ProxyError> {
        let runtime = self.runtime()?;
        scope::listen_unix(runtime, &self.shared, path)
    }

    /// A listener for one command on `addr` (tests, and a command that reaches the proxy over
    /// TCP). Port 0 picks a free port: see [`CommandScope::local_addr`].
    ///
    /// # Errors
    ///
    /// [`ProxyError::BindTcp`].
    pub fn listen_tcp(&self, addr: SocketAddr) -> Result<CommandScope, ProxyError> {
        let runtime = self.runtime()?;
        scope::listen_tcp(runtime, &self.shared, addr)
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime, ProxyError> {
        // Only `Drop` takes the runtime.
        self.runtime.as_ref().ok_or_else(|| {
            ProxyError::Runtime(io::Error::new(io::ErrorKind::NotConnected, "proxy stopped"))
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                // Inside another runtime, blocking to wait is not allowed.
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

fn check_limits(limits: &ProxyLimits) -> Result<(), ProxyError> {
    let bad = |limit, value: String, expected| {
        Err(ProxyError::BadLimit {
            limit,
            value,
            expected,
        })
    };
    if limits.max_connections == 0 || limits.max_connections > 1 << 20 {
        return bad(
            "max_connections",
            limits.max_connections.to_string(),
            "1..=1048576",
        );
    }
    if !(1024..=1 << 20).contains(&limits.max_header_bytes) {
        return bad(
            "max_header_bytes",
            limits.max_header_bytes.to_string(),
            "1024..=1048576",
        );
    }
    if !(1..=10_000).contains(&limits.max_headers) {
        return bad("max_headers", limits.max_headers.to_string(), "1..=10000");
    }
    if !(1..=64).contains(&limits.worker_threads) {
        return bad(
            "worker_threads",
            limits.worker_threads.to_string(),
            "1..=64",
        );
    }
    for (limit, value) in [
        ("header_read_timeout", limits.header_read_timeout),
        ("idle_timeout", limits.idle_timeout),
        ("connect_timeout", limits.connect_timeout),
        ("dns_timeout", limits.dns_timeout),
    ] {
        if value.is_zero() || value > Duration::from_secs(24 * 3600) {
            return bad(limit, format!("{value:?}"), "more than 0, at most a day");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_out_of_range_are_refused() {
        type Change = fn(&mut ProxyLimits);
        let cases: [(&str, Change); 5] = [
            ("max_connections", |l| l.max_connections = 0),
            ("max_header_bytes", |l| l.max_header_bytes = 10),
            ("max_headers", |l| l.max_headers = 0),
            ("idle_timeout", |l| l.idle_timeout = Duration::ZERO),
            ("worker_threads", |l| l.worker_threads = 0),
        ];
        for (name, change) in cases {
            let mut limits = ProxyLimits::default();
            change(&mut limits);
            let config = ProxyConfig {
                allowlist: Allowlist::default(),
                resolver: Resolver::System,
                unknown_host: UnknownHost::Deny,
                limits,
            };
            match Proxy::new(config) {
                Err(ProxyError::BadLimit { limit, .. }) => assert_eq!(limit, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_handles_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Proxy>();
        shared::<CommandScope>();
        shared::<ProxyConfig>();
    }

    #[test]
    fn a_closure_is_an_ask_callback() {
        let ask: Arc<dyn Ask> = Arc::new(|host: &str, port: u16| {
            if host == "ok.test" && port == 443 {
                AskAnswer::AllowOnce
            } else {
                AskAnswer::Deny
            }
        });
        assert_eq!(ask.ask("ok.test", 443), AskAnswer::AllowOnce);
        assert_eq!(ask.ask("ok.test", 80), AskAnswer::Deny);
        assert_eq!(format!("{:?}", UnknownHost::Ask(ask)), "Ask(..)");
    }

    /// Hosts may be asked about by default; the strict profile and a managed
    /// `managedHostsOnly` each forbid it (each the default's control).
    #[test]
    fn strict_and_managed_hosts_only_never_ask() {
        use garuda_policy::{EffectiveSettings, Origin, Profile, SourceKind};
        let open = EffectiveSettings::default();
        assert!(hosts_may_be_asked(&open));
        let strict = EffectiveSettings {
            profile: Profile::Strict,
            ..EffectiveSettings::default()
        };
        assert!(!hosts_may_be_asked(&strict));
        let managed = EffectiveSettings {
            managed_hosts_only: Some(Origin::file(
                SourceKind::Managed,
                "/etc/garuda/managed-policy.json",
            )),
            ..EffectiveSettings::default()
        };
        assert!(!hosts_may_be_asked(&managed));
    }
}
