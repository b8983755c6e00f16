//! Upstream failures: a host the allowlist let through that could not be reached.
//!
//! A refusal (`403`) is Garuda's own decision; an upstream failure is not, and a user who gets
//! a bare `502 Bad Gateway` cannot tell "the name does not resolve" from "nothing listens
//! there" from "Garuda broke it". So each failure is answered with
//!
//! - `502 Bad Gateway`, to a `CONNECT` as to a forwarded request;
//! - a one-line body: `Garuda's proxy could not reach HOST port PORT: REASON`;
//! - a `Proxy-Status` header (RFC 9209) with the RFC's error type and the same words as
//!   `details`: `garuda; error=connection_refused; details="127.0.0.1 port 9: connection
//!   refused"`. A client that shows headers (`curl -v`) shows it even for a `CONNECT`, whose
//!   body curl never prints;
//!
//! and recorded in the command's scope, per host, port and error type with a count, so that
//! `garuda sandbox` prints them when the command ends (`garuda: could not reach: …`), as it
//! prints refused hosts.
//!
//! What is visible here: the name lookup, the TCP connection, and for a forwarded `http://`
//! request the upstream's response. What is not: anything inside a `CONNECT` tunnel once it is
//! open (TLS failures included, since the proxy never sees inside TLS); the client reports
//! those itself.
//!
//! Every text is printable: the host is canonical by the time it fails here (a name that
//! parsed, or an address), but it and the library's words go through
//! [`garuda_text::visible`] for the body and the end-of-run line, and through
//! [`garuda_text::structured_string`] for the header, so no value can end the header or
//! drive a terminal.

use std::fmt;
use std::io;
use std::time::Duration;

use garuda_policy::network::DEFAULT_PORTS;

use super::resolve::ResolveError;

/// The response header of RFC 9209.
pub const PROXY_STATUS_HEADER: &str = "proxy-status";

/// How the proxy names itself in `Proxy-Status` (an `sf-token`).
pub const PROXY_NAME: &str = "garuda";

/// The most hosts one scope records as unreachable; later ones only mark the list as
/// truncated (a command that tries a million names cannot grow the supervisor's memory).
pub const MAX_UNREACHABLE_ENTRIES: usize = 256;

/// The error types of RFC 9209 §2.3 the proxy reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The name lookup failed or found no address (`dns_error`).
    DnsError,
    /// The name lookup got no answer in time (`dns_timeout`).
    DnsTimeout,
    /// Nothing accepts connections at the address and port (`connection_refused`).
    ConnectionRefused,
    /// The connection was not made in time (`connection_timeout`).
    ConnectionTimeout,
    /// The network or host is unreachable from the proxy (`destination_ip_unroutable`).
    DestinationIpUnroutable,
    /// Any other error while connecting (`destination_unavailable`).
    DestinationUnavailable,
    /// The upstream closed or broke the connection before a whole response
    /// (`connection_terminated`).
    ConnectionTerminated,
    /// The upstream's response is not HTTP/1 the proxy can read (`http_protocol_error`).
    HttpProtocolError,
}

impl FailureKind {
    /// The RFC 9209 error type.
    #[must_use]
    pub fn proxy_status(self) -> &'static str {
        match self {
            Self::DnsError => "dns_error",
            Self::DnsTimeout => "dns_timeout",
            Self::ConnectionRefused => "connection_refused",
            Self::ConnectionTimeout => "connection_timeout",
            Self::DestinationIpUnroutable => "destination_ip_unroutable",
            Self::DestinationUnavailable => "destination_unavailable",
            Self::ConnectionTerminated => "connection_terminated",
            Self::HttpProtocolError => "http_protocol_error",
        }
    }
}

/// One failure to reach an allowed host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamFailure {
    /// The host, canonical (as the allowlist compared it).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The RFC 9209 error type.
    pub kind: FailureKind,
    /// Why, in plain words (`connection refused`, `the name does not resolve`), with the
    /// system's own message where it adds to them.
    pub reason: String,
}

impl UpstreamFailure {
    /// A name that could not be resolved.
    pub(crate) fn from_resolve(host: &str, port: u16, e: &ResolveError) -> Self {
        let (kind, reason) = match e {
            ResolveError::NoAddress { .. } => (
                FailureKind::DnsError,
                "the name does not resolve".to_owned(),
            ),
            // The system resolver's own words say which (`Name or service not known`,
            // `Temporary failure in name resolution`).
            ResolveError::Lookup { source, .. } => (
                FailureKind::DnsError,
                format!("the name does not resolve ({source})"),
            ),
            ResolveError::Timeout { timeout, .. } => (
                FailureKind::DnsTimeout,
                format!("the name lookup got no answer within {timeout:?}"),
            ),
            ResolveError::ServerError { server, code, .. } => (
                FailureKind::DnsError,
                format!("the DNS server {server} answered {code}"),
            ),
            ResolveError::Truncated { server, .. } => (
                FailureKind::DnsError,
                format!("the answer from the DNS server {server} was truncated"),
            ),
            ResolveError::BadQuery { message, .. } => (
                FailureKind::DnsError,
                format!("the name cannot be looked up ({message})"),
            ),
        };
        Self {
            host: host.to_owned(),
            port,
            kind,
            reason,
        }
    }

    /// A connection that could not be made (the last error of the addresses tried).
    pub(crate) fn from_connect(host: &str, port: u16, e: &io::Error, timeout: Duration) -> Self {
        let (kind, reason) = match (e.kind(), e.raw_os_error()) {
            (io::ErrorKind::ConnectionRefused, _) => (
                FailureKind::ConnectionRefused,
                "connection refused".to_owned(),
            ),
            (io::ErrorKind::TimedOut, _) => (
                FailureKind::ConnectionTimeout,
                format!("no connection within {timeout:?}"),
            ),
            (_, Some(libc::ENETUNREACH)) => (
                FailureKind::DestinationIpUnroutable,
                "network unreachable".to_owned(),
            ),
            (_, Some(libc::EHOSTUNREACH)) => (
                FailureKind::DestinationIpUnroutable,
                "host unreachable".to_owned(),
            ),
            _ => (
                FailureKind::DestinationUnavailable,
                format!("cannot connect ({e})"),
            ),
        };
        Self {
            host: host.to_owned(),
            port,
            kind,
            reason,
        }
    }

    /// A forwarded request whose upstream failed after the connection was made. `None` when
    /// the error is the client's side (its request body broke off) or the scope's (closed):
    /// not an upstream failure.
    pub(crate) fn from_http(host: &str, port: u16, e: &hyper::Error) -> Option<Self> {
        if e.is_user() || e.is_canceled() {
            return None;
        }
        let (kind, reason) = if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
            (
                FailureKind::HttpProtocolError,
                format!("the response is not valid HTTP ({e})"),
            )
        } else {
            (
                FailureKind::ConnectionTerminated,
                format!("the connection broke before a whole response ({e})"),
            )
        };
        Some(Self {
            host: host.to_owned(),
            port,
            kind,
            reason,
        })
    }

    /// `HOST port PORT: REASON`, printable.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} port {}: {}",
            garuda_text::visible(&self.host),
            self.port,
            garuda_text::visible(&self.reason)
        )
    }

    /// The `502`'s body: `Garuda's proxy could not reach HOST port PORT: REASON` and a newline.
    #[must_use]
    pub fn body(&self) -> String {
        format!("Garuda's proxy could not reach {}\n", self.summary())
    }

    /// The `Proxy-Status` header's value: `garuda; error=TYPE; details="HOST port PORT:
    /// REASON"`. Printable ASCII only.
    #[must_use]
    pub fn proxy_status(&self) -> String {
        format!(
            "{PROXY_NAME}; error={}; details={}",
            self.kind.proxy_status(),
            garuda_text::structured_string(&format!(
                "{} port {}: {}",
                self.host, self.port, self.reason
            ))
        )
    }
}

/// An allowed host that could not be reached during a command: the first failure of its kind
/// for that host and port (80 and 443 count as one), and how many requests failed that way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// The host, canonical.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The RFC 9209 error type.
    pub kind: FailureKind,
    /// The reason of the first such failure.
    pub reason: String,
    /// Requests and tunnels that failed this way.
    pub count: u64,
}

impl fmt::Display for Unreachable {
    /// `127.0.0.1:9 (connection refused)`, `, N times` when there were several; the port is
    /// shown when it is not 80 or 443. Printed as the blocked hosts are (see
    /// [`super::scope_state::Blocked`]'s `Display`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = entry_host(&self.host);
        if DEFAULT_PORTS.contains(&self.port) {
            write!(f, "{host} (")?;
        } else {
            write!(f, "{host}:{} (", self.port)?;
        }
        // The reason is the proxy's own words and the system's message, never the command's.
        f.write_str(&garuda_text::visible(&self.reason))?;
        if self.count > 1 {
            write!(f, ", {} times", self.count)?;
        }
        f.write_str(")")
    }
}

/// A host as one entry of a `host (reason), host (reason)` line (the could-not-reach line here,
/// the blocked line of [`super::scope_state`]): [`garuda_text::visible`],
/// and a comma or a parenthesis, which no host name holds, as `\u{…}` too, so that one host
/// cannot read as two entries.
pub(crate) fn entry_host(host: &str) -> String {
    let mut host = garuda_text::visible(host).into_owned();
    if host.contains([',', '(', ')']) {
        host = host
            .replace(',', "\\u{002c}")
            .replace('(', "\\u{0028}")
            .replace(')', "\\u{0029}");
    }
    host
}

/// Every allowed host that could not be reached during one command, in the order of first
/// failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnreachableHosts {
    pub(crate) entries: Vec<Unreachable>,
    pub(crate) truncated: bool,
}

impl UnreachableHosts {
    /// The entries.
    #[must_use]
    pub fn into_vec(self) -> Vec<Unreachable> {
        self.entries
    }

    /// Whether more than [`MAX_UNREACHABLE_ENTRIES`] hosts failed (the rest are not listed).
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl std::ops::Deref for UnreachableHosts {
    type Target = [Unreachable];

    fn deref(&self) -> &[Unreachable] {
        &self.entries
    }
}

impl fmt::Display for UnreachableHosts {
    /// `nothing.invalid (the name does not resolve), 127.0.0.1:9 (connection refused, 2 times)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let printed: Vec<String> = self.entries.iter().map(ToString::to_string).collect();
        f.write_str(&printed.join(", "))?;
        if self.truncated {
            f.write_str(", and more")?;
        }
        Ok(())
    }
}

/// What a scope keeps of its upstream failures.
#[derive(Default)]
pub(crate) struct FailureLog {
    entries: Vec<Unreachable>,
    truncated: bool,
}

impl FailureLog {
    /// Counts `failure` in the entry for its host, port and kind; ports 80 and 443 are one
    /// port here, as the line prints neither (`http://` and `https://` to a name that does not
    /// resolve are one entry, with a count of two).
    pub(crate) fn record(&mut self, failure: &UpstreamFailure) {
        let shown = |port: u16| (!DEFAULT_PORTS.contains(&port)).then_some(port);
        if let Some(entry) = self.entries.iter_mut().find(|e| {
            e.host == failure.host && shown(e.port) == shown(failure.port) && e.kind == failure.kind
        }) {
            entry.count = entry.count.saturating_add(1);
            return;
        }
        if self.entries.len() >= MAX_UNREACHABLE_ENTRIES {
            self.truncated = true;
            return;
        }
        self.entries.push(Unreachable {
            host: failure.host.clone(),
            port: failure.port,
            kind: failure.kind,
            reason: failure.reason.clone(),
            count: 1,
        });
    }

    pub(crate) fn snapshot(&self) -> UnreachableHosts {
        UnreachableHosts {
            entries: self.entries.clone(),
            truncated: self.truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(host: &str, port: u16) -> UpstreamFailure {
        UpstreamFailure::from_connect(
            host,
            port,
            &io::Error::from_raw_os_error(libc::ECONNREFUSED),
            Duration::from_secs(10),
        )
    }

    #[test]
    fn each_failure_has_its_rfc_9209_type_and_plain_words() {
        let timeout = Duration::from_secs(10);
        let cases = [
            (
                libc::ECONNREFUSED,
                "connection_refused",
                "connection refused",
            ),
            (
                libc::ETIMEDOUT,
                "connection_timeout",
                "no connection within 10s",
            ),
            (
                libc::ENETUNREACH,
                "destination_ip_unroutable",
                "network unreachable",
            ),
            (
                libc::EHOSTUNREACH,
                "destination_ip_unroutable",
                "host unreachable",
            ),
        ];
        for (errno, kind, reason) in cases {
            let f = UpstreamFailure::from_connect(
                "a.test",
                443,
                &io::Error::from_raw_os_error(errno),
                timeout,
            );
            assert_eq!(
                (f.kind.proxy_status(), f.reason.as_str()),
                (kind, reason),
                "{errno}"
            );
        }
        let other = UpstreamFailure::from_connect(
            "a.test",
            443,
            &io::Error::from_raw_os_error(libc::EACCES),
            timeout,
        );
        assert_eq!(other.kind, FailureKind::DestinationUnavailable);
        assert_eq!(
            other.reason,
            "cannot connect (Permission denied (os error 13))"
        );
        let dns = UpstreamFailure::from_resolve(
            "nothing.invalid",
            80,
            &ResolveError::NoAddress {
                name: "nothing.invalid".into(),
            },
        );
        assert_eq!(
            dns.body(),
            "Garuda's proxy could not reach nothing.invalid port 80: the name does not resolve\n"
        );
        assert_eq!(
            dns.proxy_status(),
            "garuda; error=dns_error; details=\"nothing.invalid port 80: the name does not resolve\""
        );
        let slow = UpstreamFailure::from_resolve(
            "slow.test",
            443,
            &ResolveError::Timeout {
                name: "slow.test".into(),
                timeout: Duration::from_secs(5),
            },
        );
        assert_eq!(
            slow.proxy_status(),
            "garuda; error=dns_timeout; details=\"slow.test port 443: the name lookup got no answer within 5s\""
        );
    }

    #[test]
    fn a_hostile_reason_cannot_end_the_header_or_the_line() {
        let f = UpstreamFailure {
            host: "a.test".into(),
            port: 80,
            kind: FailureKind::DestinationUnavailable,
            reason: "x\"; error=none\r\nX-Injected: 1\u{1b}[2J".into(),
        };
        let status = f.proxy_status();
        assert_eq!(
            status,
            r#"garuda; error=destination_unavailable; details="a.test port 80: x\"; error=none\\r\\nX-Injected: 1\\e[2J""#
        );
        assert!(hyper::header::HeaderValue::from_str(&status).is_ok());
        assert_eq!(
            f.body(),
            "Garuda's proxy could not reach a.test port 80: x\"; error=none\\r\\nX-Injected: 1\\e[2J\n"
        );
        // Negative control: the reason as it is would split the header and the line.
        assert!(hyper::header::HeaderValue::from_str(&f.reason).is_err());
    }

    #[test]
    fn the_log_counts_per_host_port_and_kind_and_is_bounded() {
        let mut log = FailureLog::default();
        log.record(&refused("127.0.0.1", 9));
        log.record(&refused("127.0.0.1", 9));
        log.record(&refused("a.test", 80));
        log.record(&UpstreamFailure::from_resolve(
            "b.test",
            80,
            &ResolveError::NoAddress {
                name: "b.test".into(),
            },
        ));
        log.record(&refused("a.test", 443));
        log.record(&refused("a.test", 443));
        assert_eq!(
            log.snapshot().to_string(),
            "127.0.0.1:9 (connection refused, 2 times), a.test (connection refused, 3 times), \
             b.test (the name does not resolve)"
        );
        for i in 0..MAX_UNREACHABLE_ENTRIES + 5 {
            log.record(&refused(&format!("h{i}.test"), 443));
        }
        let all = log.snapshot();
        assert_eq!(all.len(), MAX_UNREACHABLE_ENTRIES);
        assert!(all.is_truncated());
        assert!(all.to_string().ends_with(", and more"));
    }

    #[test]
    fn a_host_cannot_pass_for_two_entries_of_the_line() {
        let mut log = FailureLog::default();
        log.record(&refused("a.test (connection refused), b\n.test", 443));
        let line = log.snapshot().to_string();
        assert_eq!(
            line,
            "a.test \\u{0028}connection refused\\u{0029}\\u{002c} b\\n.test (connection refused)"
        );
        assert_eq!(line.matches(", ").count(), 0);
    }
}
