//! The network-off resolver stub: how Garuda knows that a command without network tried to
//! use it, and which names it asked for.
//!
//! # Why
//!
//! A command whose policy allows no host runs in a network namespace with nothing but
//! loopback. It fails at once, with the tool's own words ("Could not resolve host", "Temporary
//! failure in name resolution"), and a user who does not know the network is off cannot tell
//! it from a broken network. Garuda should say "the network is off for this run, and this is
//! how to allow a host", but only when the command did try the network: printed after every
//! failing command, the line would be noise that users learn to skip.
//!
//! Nearly every program reaches a host by name, and nearly every resolver (glibc, musl, Go,
//! c-ares) asks the servers of `/etc/resolv.conf` over UDP port 53 first. So the sandbox's
//! network namespace gets a listener there: a UDP socket on port 53 of each resolver address,
//! which the supervisor reads. Each query is answered `REFUSED` at once (the command fails as
//! fast as before, with the same "could not resolve" message) and its name is recorded; when
//! the command ends and a name was asked, `garuda sandbox` prints the hint
//! ([`hint`]).
//!
//! # How
//!
//! As with the proxy bridge ([`crate::netbridge`]), the sockets are made inside the command's
//! network namespace by the sandbox's setup code, before the command exists, and handed to the
//! supervisor over a unix socket pair ([`crate::sys::dns_handoff`]): `landlock`'s outer
//! process right after it brings up loopback, `bubblewrap`'s spawn hook, which now makes the
//! network namespace itself in both network modes. The addresses ([`resolver_addresses`]) are
//! `127.0.0.1` (what glibc uses when `/etc/resolv.conf` names no server, which is what a
//! sandbox sees when the file is a link into the hidden `/run`, as with systemd-resolved) and
//! the first three `nameserver` lines of the host's `/etc/resolv.conf`. An IPv4 address
//! outside `127.0.0.0/8` is first added to the namespace's `lo` (as `lo:N`, a `/32`), so the
//! resolver's address is local there; `::1` is bound when listed, other IPv6 servers are
//! skipped. Nothing is added to the sandbox but these local sockets: no route, no process, no
//! file. Every step is best effort: an address that cannot be bound is skipped, and a stub
//! that cannot be set up leaves the command exactly as isolated as before, only without the
//! hint.
//!
//! # Hostile input
//!
//! The command chooses the query bytes. The stub reads at most [`MAX_DATAGRAM`] bytes of a
//! datagram, parses only the header and the first question (labels bounded by the packet and
//! by 255 bytes, no compression pointers), drops anything else, and keeps at most
//! [`MAX_NAMES`] distinct names. A name is kept as text already made printable: each label
//! through [`garuda_text::visible_bytes`], with a dot or a comma inside a label as `\u{002e}`
//! or `\u{002c}`, so that one name can neither forge a line nor pass for two names.
//!
//! # What it does not see
//!
//! A command that connects to an address without a lookup (`curl http://10.0.0.1/`), reads a
//! name from `/etc/hosts`, or uses its own DNS (DNS over HTTPS, a server named on its command
//! line) gets no hint; its own error still says that the network is unreachable. `host` and
//! `seatbelt` have no network namespace, so no stub.

use std::fmt;
use std::io::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::sys;

/// Resolver addresses the stub listens on, at most: `127.0.0.1` and glibc's three servers.
pub const MAX_RESOLVERS: usize = sys::MAX_STUB_RESOLVERS;

/// Distinct names kept (and printed) per command; more only mark the list as truncated.
pub const MAX_NAMES: usize = 16;

/// Bytes of one datagram read; the question of a query is at its start.
pub const MAX_DATAGRAM: usize = 4096;

/// How long the supervisor waits for the sandbox's setup to hand over the sockets.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(30);

/// The addresses to listen on, from the text of `/etc/resolv.conf`: `127.0.0.1`, then each
/// `nameserver` (the first three, as glibc reads them) that is IPv4, or `::1`; no duplicates.
#[must_use]
pub fn resolver_addresses(resolv_conf: &str) -> Vec<IpAddr> {
    let mut addresses = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let servers = resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
        })
        .take(3);
    for server in servers {
        let Ok(address) = server.parse::<IpAddr>() else {
            continue;
        };
        let usable = match address {
            IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_broadcast() && !v4.is_multicast(),
            IpAddr::V6(v6) => v6.is_loopback(),
        };
        if usable && !addresses.contains(&address) && addresses.len() < MAX_RESOLVERS {
            addresses.push(address);
        }
    }
    addresses
}

/// The names a command without network asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookups {
    names: Vec<String>,
    truncated: bool,
    queries: u64,
}

impl Lookups {
    /// Whether the command asked for nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queries == 0
    }

    /// The distinct names asked for, in order, printable (see the module doc), at most
    /// [`MAX_NAMES`].
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether more than [`MAX_NAMES`] names were asked for.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// Queries answered.
    #[must_use]
    pub fn queries(&self) -> u64 {
        self.queries
    }

    fn record(&mut self, name: String) {
        self.queries = self.queries.saturating_add(1);
        if self.names.contains(&name) {
            return;
        }
        if self.names.len() >= MAX_NAMES {
            self.truncated = true;
            return;
        }
        self.names.push(name);
    }
}

impl fmt::Display for Lookups {
    /// `example.test, pypi.org`, then `, and more` when truncated.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names.join(", "))?;
        if self.truncated {
            f.write_str(", and more")?;
        }
        Ok(())
    }
}

/// The end-of-run line (without `garuda: `) for a command that ran with the network off and
/// asked for `lookups`; `None` when it asked for nothing. `user_policy` is the user's policy
/// file as this run found it (`$GARUDA_HOME/policy.json`); `managed_hosts_only` is where the
/// managed policy set `managedHostsOnly`, if it did: then only that policy can allow hosts, and
/// the line says so instead of advice that would be refused.
#[must_use]
pub fn hint(
    lookups: &Lookups,
    user_policy: &Path,
    managed_hosts_only: Option<&str>,
) -> Option<String> {
    if lookups.is_empty() {
        return None;
    }
    let how = match managed_hosts_only {
        Some(origin) => format!(
            "Only the managed policy can allow hosts here (managedHostsOnly, set in {})",
            garuda_text::visible(origin)
        ),
        None => format!(
            "To allow a host, pass --allow-host HOST or add it to network.allow in {}",
            garuda_text::visible_path(user_policy)
        ),
    };
    Some(format!(
        "the network is off for this run; the command tried to look up {lookups}. {how}"
    ))
}

/// The supervisor's end of a handoff: receives the sockets, then runs the stub.
#[derive(Debug)]
pub(crate) struct Receiver {
    channel: UnixStream,
}

/// A socket pair for a handoff and the plan for the sandbox's setup code: listen on each of
/// `addresses` (at most [`MAX_RESOLVERS`] are used). The sandbox's end is close-on-exec; the
/// supervisor drops it once the sandbox's setup has been started.
pub(crate) fn handoff(addresses: &[IpAddr]) -> io::Result<(Receiver, OwnedFd, sys::DnsHandoff)> {
    let (ours, theirs) = UnixStream::pair()?;
    let mut addrs = [None; MAX_RESOLVERS];
    for (slot, address) in addrs.iter_mut().zip(addresses) {
        *slot = Some(*address);
    }
    let plan = sys::DnsHandoff {
        addrs,
        channel: theirs.as_raw_fd(),
    };
    Ok((Receiver { channel: ours }, OwnedFd::from(theirs), plan))
}

impl Receiver {
    /// One descriptor sent ahead of the sockets (the namespaces of
    /// [`crate::executor::ahead`]), waiting at most `timeout`; `None` when the sender ended
    /// or failed first.
    pub(crate) fn receive_fd(&self, timeout: Duration) -> Option<OwnedFd> {
        self.channel.set_read_timeout(Some(timeout)).ok()?;
        sys::recv_fd(&self.channel).ok().flatten()
    }

    /// Receives the sockets the setup made (until it closes its end) and starts the stub on
    /// them; `None` when there are none or the stub cannot start (the command then simply
    /// gets no answer from a local port: an immediate error, as without a stub).
    pub(crate) fn receive_answering(self) -> Option<Answering> {
        Answering::new(self.sockets()?).ok()
    }

    fn sockets(self) -> Option<Vec<UdpSocket>> {
        let _ = self.channel.set_read_timeout(Some(HANDOFF_TIMEOUT));
        let mut sockets = Vec::new();
        while sockets.len() < MAX_RESOLVERS {
            match sys::recv_fd(&self.channel) {
                Ok(Some(fd)) => sockets.push(UdpSocket::from(fd)),
                Ok(None) | Err(_) => break,
            }
        }
        (!sockets.is_empty()).then_some(sockets)
    }
}

/// The stub served by the thread that waits for the sandbox (see [`sys::WhileWaiting`]):
/// the same answers as [`Stub`]'s, without a thread of its own.
#[derive(Debug)]
pub struct Answering {
    sockets: Vec<UdpSocket>,
    lookups: Lookups,
    buf: Vec<u8>,
}

impl Answering {
    /// Answer on `sockets` (UDP, bound) whenever the waiting thread finds them readable.
    ///
    /// # Errors
    ///
    /// When a socket cannot be made non-blocking.
    pub fn new(sockets: Vec<UdpSocket>) -> io::Result<Answering> {
        for socket in &sockets {
            socket.set_nonblocking(true)?;
        }
        Ok(Answering {
            sockets,
            lookups: Lookups::default(),
            buf: vec![0u8; MAX_DATAGRAM],
        })
    }

    /// Stop answering (the sockets close) and return what was asked.
    pub fn finish(self) -> Lookups {
        self.lookups
    }
}

impl sys::WhileWaiting for Answering {
    fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.sockets.iter().map(AsRawFd::as_raw_fd).collect()
    }

    fn ready(&mut self, index: usize) {
        if let Some(socket) = self.sockets.get(index) {
            answer_waiting(socket, &mut self.buf, &mut self.lookups);
        }
    }
}

/// Answer what waits on `socket`, at most a bounded batch.
fn answer_waiting(socket: &UdpSocket, buf: &mut [u8], lookups: &mut Lookups) {
    for _ in 0..64 {
        let (len, from) = match socket.recv_from(buf) {
            Ok(got) => got,
            Err(_) => break,
        };
        let Some(query) = parse_query(&buf[..len]) else {
            continue;
        };
        let _ = socket.send_to(&refused(&buf[..len], &query), from);
        if let Some(name) = query.name {
            lookups.record(name);
        }
    }
}

/// What the stub needs of a query.
#[derive(Debug, PartialEq, Eq)]
struct Query {
    /// The question's name, printable; `None` for another opcode than a standard query.
    name: Option<String>,
    /// Where the question (name, type, class) ends.
    question_end: usize,
}

/// The header flag of a response.
const QR: u16 = 0x8000;
/// The header flag "recursion desired", echoed.
const RD: u16 = 0x0100;
/// The response code REFUSED (RFC 1035 §4.1.1).
const RCODE_REFUSED: u16 = 5;
/// The longest name on the wire (RFC 1035 §2.3.4).
const MAX_NAME_WIRE: usize = 255;

/// Parses the header and the one question of a query; `None` for a response, a message
/// without exactly one question, a compressed or oversized name, or a packet cut short.
fn parse_query(packet: &[u8]) -> Option<Query> {
    let word = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]))
    };
    let flags = word(2)?;
    if flags & QR != 0 || word(4)? != 1 {
        return None;
    }
    let mut labels: Vec<&[u8]> = Vec::new();
    let mut at = 12;
    loop {
        let len = usize::from(*packet.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        // A pointer (0xC0) or an extended label type has no place in a query's only name.
        if len > 63 {
            return None;
        }
        labels.push(packet.get(at..at + len)?);
        at += len;
        if at - 12 > MAX_NAME_WIRE {
            return None;
        }
    }
    let question_end = at + 4;
    if packet.len() < question_end {
        return None;
    }
    let standard_query = (flags >> 11) & 0xf == 0;
    let name = standard_query.then(|| {
        if labels.is_empty() {
            return ".".to_owned();
        }
        labels
            .iter()
            .map(|label| {
                garuda_text::visible_bytes(&label.to_ascii_lowercase())
                    .replace('.', "\\u{002e}")
                    .replace(',', "\\u{002c}")
            })
            .collect::<Vec<_>>()
            .join(".")
    });
    Some(Query { name, question_end })
}

/// The answer to `packet`: its id, opcode, "recursion desired" and question, `REFUSED`.
fn refused(packet: &[u8], query: &Query) -> Vec<u8> {
    let flags = u16::from_be_bytes([packet[2], packet[3]]);
    let answer_flags = QR | (flags & 0x7800) | (flags & RD) | RCODE_REFUSED;
    let mut reply = Vec::with_capacity(query.question_end);
    let _ = reply.write_all(&packet[..2]);
    let _ = reply.write_all(&answer_flags.to_be_bytes());
    let _ = reply.write_all(&[0, 1, 0, 0, 0, 0, 0, 0]);
    let _ = reply.write_all(&packet[12..query.question_end]);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{Message, MessageType, Query as HQuery, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};
    use std::collections::HashSet;

    fn distinct(names: &[String]) -> bool {
        names.iter().collect::<HashSet<_>>().len() == names.len()
    }

    fn query_bytes(name: &str) -> Vec<u8> {
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        query.add_query(HQuery::query(
            Name::from_ascii(name).unwrap(),
            RecordType::AAAA,
        ));
        query.to_vec().unwrap()
    }

    /// A query with raw labels (any bytes), id 0x1234, RD set, type A, class IN.
    fn raw_query(labels: &[&[u8]]) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in labels {
            q.push(u8::try_from(label.len()).unwrap());
            q.extend_from_slice(label);
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    #[test]
    fn resolver_addresses_follow_glibc() {
        assert_eq!(resolver_addresses(""), [IpAddr::from([127, 0, 0, 1])]);
        let conf = "# comment\nsearch corp.test\nnameserver 10.255.255.53\n\
                    nameserver 127.0.0.53 # stub\nnameserver fd00::53\nnameserver ::1\n\
                    nameserver 10.0.0.9\n";
        // The first three lines only (the fourth, 10.0.0.9, is not read by glibc either);
        // fd00::53 is skipped (IPv6 other than ::1).
        assert_eq!(
            resolver_addresses(conf),
            [
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from([10, 255, 255, 53]),
                IpAddr::from([127, 0, 0, 53]),
            ]
        );
        assert_eq!(
            resolver_addresses("nameserver 127.0.0.1\nnameserver ::1\nnameserver x\n"),
            [
                IpAddr::from([127, 0, 0, 1]),
                "::1".parse::<IpAddr>().unwrap()
            ]
        );
    }

    #[test]
    fn a_query_is_answered_refused_with_its_question() {
        let q = query_bytes("Pypi.Example.");
        let parsed = parse_query(&q).unwrap();
        assert_eq!(parsed.name.as_deref(), Some("pypi.example"));
        let reply = Message::from_vec(&refused(&q, &parsed)).unwrap();
        let asked = Message::from_vec(&q).unwrap();
        assert_eq!(reply.metadata.id, asked.metadata.id);
        assert_eq!(reply.metadata.message_type, MessageType::Response);
        assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
        assert!(reply.metadata.recursion_desired);
        assert_eq!(reply.queries, asked.queries);
        assert!(reply.answers.is_empty());
    }

    #[test]
    fn what_is_not_a_query_is_dropped() {
        let q = query_bytes("a.test.");
        let mut response = q.clone();
        response[2] |= 0x80;
        assert_eq!(parse_query(&response), None);
        for cut in 0..q.len() {
            assert_eq!(parse_query(&q[..cut]), None, "cut at {cut}");
        }
        let mut two = q.clone();
        two[5] = 2;
        assert_eq!(parse_query(&two), None);
        // A compression pointer as the name.
        let mut pointer = q[..12].to_vec();
        pointer.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(parse_query(&pointer), None);
        // A name over 255 bytes.
        let long = [[b'a'; 63].as_slice(); 5];
        assert_eq!(parse_query(&raw_query(&long)), None);
        // Control: four such labels fit.
        assert!(parse_query(&raw_query(&long[..3])).is_some());
    }

    #[test]
    fn a_hostile_name_is_kept_printable_and_as_one_name() {
        let q = raw_query(&[
            b"evil\ngaruda: ok\x1b[2J",
            b"a.b, c",
            b"\xff\xe2\x80\xae",
            b"test",
        ]);
        let name = parse_query(&q).unwrap().name.unwrap();
        assert_eq!(
            name,
            "evil\\ngaruda: ok\\e[2j.a\\u{002e}b\\u{002c} c.\\xff\\u{202e}.test"
        );
        assert!(!name.chars().any(garuda_text::is_hidden));
        // Negative control: the raw label holds a newline and an escape.
        assert!(q.contains(&b'\n') && q.contains(&0x1b));
    }

    #[test]
    fn names_are_kept_once_and_bounded() {
        let mut lookups = Lookups::default();
        for _ in 0..3 {
            lookups.record("a.test".into());
        }
        lookups.record("b.test".into());
        assert_eq!(lookups.to_string(), "a.test, b.test");
        assert_eq!(lookups.queries(), 4);
        for i in 0..MAX_NAMES + 4 {
            lookups.record(format!("n{i}.test"));
        }
        assert_eq!(lookups.names().len(), MAX_NAMES);
        assert!(distinct(lookups.names()));
        assert!(lookups.is_truncated());
        assert!(lookups.to_string().ends_with("n13.test, and more"));
    }

    #[test]
    fn the_hint_names_the_flag_and_the_policy_file() {
        let mut lookups = Lookups::default();
        let policy = Path::new("/home/u/.garuda/policy.json");
        assert_eq!(hint(&lookups, policy, None), None);
        lookups.record("example.test".into());
        assert_eq!(
            hint(&lookups, policy, None).unwrap(),
            "the network is off for this run; the command tried to look up example.test. \
             To allow a host, pass --allow-host HOST or add it to network.allow in \
             /home/u/.garuda/policy.json"
        );
        assert_eq!(
            hint(
                &lookups,
                policy,
                Some("managed /etc/garuda/managed-policy.json:2")
            )
            .unwrap(),
            "the network is off for this run; the command tried to look up example.test. \
             Only the managed policy can allow hosts here (managedHostsOnly, set in managed \
             /etc/garuda/managed-policy.json:2)"
        );
    }

    /// The stub on a real socket: a query gets `REFUSED` and its name is recorded; nothing is
    /// recorded for a stub nobody asks (the control). `ready` is what the waiting thread
    /// calls when the socket is readable (a loopback datagram is there once `send_to` returns).
    #[test]
    fn the_stub_answers_and_records() {
        use crate::sys::WhileWaiting;
        let mut idle = Answering::new(vec![UdpSocket::bind("127.0.0.1:0").unwrap()]).unwrap();
        idle.ready(0);
        assert!(idle.finish().is_empty());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let mut stub = Answering::new(vec![socket]).unwrap();
        assert_eq!(stub.fds().len(), 1);
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client.send_to(&query_bytes("example.test."), addr).unwrap();
        stub.ready(0);
        let mut buf = [0u8; 512];
        let len = client.recv(&mut buf).unwrap();
        let reply = Message::from_vec(&buf[..len]).unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
        let lookups = stub.finish();
        assert_eq!(lookups.names(), ["example.test"]);
        assert_eq!(lookups.queries(), 1);
    }
}
