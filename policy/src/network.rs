//! The network allowlist: which hosts a sandboxed command (or the agent) may reach through
//! Garuda's proxy, and how a request's target is read before it is checked.
//!
//! Three types carry the whole decision:
//!
//! - [`HostPattern`]: one entry of `"network": {"allow": [...]}` as the user wrote it, parsed
//!   once (so a bad entry is an error at load time, never a silent non-match later);
//! - [`TargetHost`]: the host a request names (a CONNECT authority or the host of an
//!   absolute-form URL), parsed the way the clients and resolvers that will act on it parse it;
//! - [`Allowlist`]: the entries, and the two questions the proxy asks of them —
//!   [`Allowlist::check`] (may this host and port be reached at all?) and
//!   [`Allowlist::check_resolved`] (may an allowed name be reached *at this address*?).
//!
//! # Entries
//!
//! | entry | allows |
//! |---|---|
//! | `crates.io` | `crates.io` on ports 80 and 443 |
//! | `*.npmjs.org` | every name below `npmjs.org` (`registry.npmjs.org`, `a.b.npmjs.org`) on 80 and 443, **not** `npmjs.org` itself |
//! | `example.test:8443` | `example.test` on port 8443 only (a port replaces the defaults, it does not add to them) |
//! | `127.0.0.1:8080` | exactly that address on port 8080, as a literal and as what an allowed name resolves to |
//! | `[::1]:9000` | the same for an IPv6 address (always in brackets) |
//!
//! Names are compared in one canonical form: lower-cased, one trailing dot removed, and
//! internationalised names in their A-label (`xn--`) form by UTS 46 processing ([`idna`]), so
//! `BÜCHER.example.` and `xn--bcher-kva.example` are the same entry. The same processing
//! maps full-width digits and the ideographic full stop to ASCII, so `１２７。０。０。１` is read
//! as the address it is, never as a name.
//!
//! An entry is refused, with [`HostPatternError`] naming it and the [`HostProblem`], when it is
//! empty, holds blanks, starts with a scheme (`https://…`), holds a path or user info, has an
//! empty label (`a..b`, `.a`), a label over 63 bytes or a name over 253, a character other
//! than letters, digits, `-` and `_`, a `*` anywhere but as the whole first label, a wildcard
//! over a single label (`*.com`, `*.test`: that is a whole top-level domain, almost the whole
//! internet), a wildcard over an address, a port that is not a number in 1..=65535, an IPv6
//! address without brackets or with a zone, or an address not written in its plain form
//! (`0x7f000001`, `127.1`, `[::ffff:127.0.0.1]`: write `127.0.0.1`). The last rule keeps the
//! file readable: what a reviewer sees is the address that is allowed.
//!
//! # Targets, and the attacks their parsing stops
//!
//! [`TargetHost::parse`] reads a host the way curl, browsers (the WHATWG URL standard) and
//! glibc's `inet_aton` do, because those are what will connect to it:
//!
//! - **Numeric forms.** A host whose last label is a number (`2130706433`, `0x7f000001`,
//!   `0x7f.0.0.1`, `0177.0.0.1`, `127.1`, `127.0.0.1.`) *is* an IPv4 address to those clients:
//!   it is normalised to that address ([`TargetHost::Ip`]) before anything is checked. A host
//!   that ends in a number but is not a valid address (`1.2.3.4.5`, `foo.0x7g`, `999.1.1.1`)
//!   is malformed and refused; reading it as a name would let a resolver read it as an address
//!   later. This stops "the allowlist saw a name, the resolver saw 127.0.0.1".
//! - **IPv6 forms.** `[::1]`, `[0:0:0:0:0:0:0:1]`, zone ids (`[fe80::1%25eth0]`, the zone is
//!   dropped: the address decides) and IPv4-mapped addresses (`[::ffff:127.0.0.1]`,
//!   `[::ffff:7f00:1]`), which the kernel delivers to the IPv4 address and which are therefore
//!   normalised to it.
//! - **Names** go through UTS 46 and the character rules above, so a name the proxy allowed is
//!   the same string the resolver is asked about.
//!
//! # Addresses
//!
//! [`classify`] sorts every address into an [`AddressClass`]. Only [`AddressClass::Public`]
//! addresses are reachable without being listed. Everything else is refused unless an entry
//! names that exact address: loopback (`127.0.0.0/8`, `::1`: the developer's own services),
//! unspecified (`0.0.0.0/8`, `::`, which Linux connects to the local host), link-local
//! (`169.254.0.0/16`, `fe80::/10`), private (RFC 1918, `fc00::/7`, the deprecated `fec0::/10`),
//! cloud metadata services (`169.254.169.254`, `169.254.170.2`, `fd00:ec2::254`,
//! `100.100.100.200`, Azure's `168.63.129.16`: credentials of the machine), shared CGNAT space
//! (`100.64.0.0/10`), multicast, broadcast, and reserved space (documentation, benchmarking,
//! `240.0.0.0/4`, IETF assignments, Teredo, discard-only). IPv6 addresses that embed an IPv4
//! address — IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4
//! `2002::/16` — take the class of the embedded address when that is not public, so
//! `[::127.0.0.1]` is loopback and `2002:a9fe:a9fe::` is the metadata service.
//!
//! # Checks
//!
//! [`Allowlist::check`] runs before any DNS lookup: a refused name is never sent to a
//! resolver (a lookup alone leaks data through DNS). A name must match an entry and the port
//! the entry allows. An address ([`TargetHost::Ip`]) must be named by an address entry: an IP
//! literal is never allowed by a name entry nor by being public, since the allowlist is a list
//! of services, and the refusal says which class the address is in.
//!
//! [`Allowlist::check_resolved`] runs on *every* address an allowed name resolves to: a public
//! address passes, any other must itself be listed. This stops an allowed (or attacker-owned,
//! wildcard-matched) name that resolves to `127.0.0.1` or `169.254.169.254`. The proxy then
//! connects to exactly the checked address, so a second answer (DNS rebinding) is never used.
//!
//! ```
//! use garuda_policy::network::{Allowlist, RefusalReason, TargetHost};
//! let list = Allowlist::parse(["crates.io", "*.npmjs.org", "127.0.0.1:8080"]).unwrap();
//! let npm = TargetHost::parse("registry.npmjs.org").unwrap();
//! assert!(list.check(&npm, 443).is_ok());
//! let apex = TargetHost::parse("npmjs.org").unwrap();
//! assert_eq!(list.check(&apex, 443).unwrap_err().reason, RefusalReason::NotInAllowlist);
//! let sneaky = TargetHost::parse("0x7f000001").unwrap();
//! assert_eq!(sneaky.to_string(), "127.0.0.1");
//! assert!(list.check(&sneaky, 8080).is_ok()); // listed as 127.0.0.1:8080
//! assert!(list.check(&sneaky, 80).is_err());
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The ports an entry without a port allows: plain HTTP and HTTPS.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// The longest host text read at all, in bytes. Longer input is refused before any processing
/// (no name is longer than 253 bytes; the bound keeps the IDNA work on hostile input small).
pub const MAX_HOST_INPUT_BYTES: usize = 1024;

const MAX_NAME_BYTES: usize = 253;
const MAX_LABEL_BYTES: usize = 63;

// ---------------------------------------------------------------------------------------------
// Errors

/// What is wrong with a host, as written in an entry or in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum HostProblem {
    /// Nothing was written.
    #[error("empty host")]
    Empty,
    /// More than [`MAX_HOST_INPUT_BYTES`] bytes.
    #[error("longer than {MAX_HOST_INPUT_BYTES} bytes")]
    TooLong,
    /// A blank (space, tab, newline).
    #[error("contains whitespace")]
    Whitespace,
    /// A control character.
    #[error("contains a control character")]
    ControlCharacter,
    /// A scheme such as `https://`: an entry is a host, not a URL.
    #[error(
        "starts with a scheme: write the host only (`example.com`, not `https://example.com`)"
    )]
    Scheme,
    /// A `/`: an entry is a host, not a URL.
    #[error("contains a path: write the host only")]
    Path,
    /// An `@`: user info makes the host ambiguous.
    #[error("contains user info (`@`)")]
    UserInfo,
    /// A `*` in a target, or not as the whole first label of an entry.
    #[error("`*` is allowed only as the whole first label (`*.example.com`)")]
    MisplacedWildcard,
    /// A wildcard over a single label (`*.com`): a whole top-level domain.
    #[error("a wildcard over a top-level domain allows almost everything: list names below it")]
    BroadWildcard,
    /// A wildcard over an address (`*.1.2.3`).
    #[error("a wildcard must stand before a name, not an address")]
    WildcardOverAddress,
    /// An empty label (`a..b`, `.a`).
    #[error("empty label")]
    EmptyLabel,
    /// A label longer than 63 bytes.
    #[error("label longer than 63 bytes")]
    LabelTooLong,
    /// A name longer than 253 bytes.
    #[error("name longer than 253 bytes")]
    NameTooLong,
    /// A character other than letters, digits, `-` and `_` in a name.
    #[error("character {0:?} is not allowed in a name (letters, digits, `-`, `_`)")]
    BadCharacter(char),
    /// UTS 46 processing failed (invalid punycode, a disallowed code point, bad bidi).
    #[error("not a valid internationalised name")]
    Idna,
    /// `[` without `]`.
    #[error("`[` without `]`")]
    UnclosedBracket,
    /// Text other than `:port` after `]`.
    #[error("unexpected text after `]`")]
    TextAfterBracket,
    /// Brackets that do not hold an IPv6 address.
    #[error("not an IPv6 address")]
    BadIpv6,
    /// An IPv6 address without brackets in an entry.
    #[error("write IPv6 addresses in brackets (`[::1]:9000`)")]
    Ipv6NeedsBrackets,
    /// An IPv6 zone id in an entry.
    #[error("an entry cannot name an IPv6 zone")]
    ZoneId,
    /// The last label is a number but the host is not a valid IPv4 address.
    #[error("ends in a number but is not an IPv4 address")]
    NumericNotAddress,
    /// An entry that names an address in a form other than its plain one.
    #[error("write the address in its plain form (a dotted quad such as 127.0.0.1, or [v6])")]
    NonCanonicalAddress,
    /// A port that is not a decimal number.
    #[error("the port is not a number")]
    BadPort,
    /// Port 0.
    #[error("port 0 cannot be connected to")]
    PortZero,
    /// A port above 65535.
    #[error("port above 65535")]
    PortOutOfRange,
}

/// An allowlist entry that cannot be parsed: the entry as written and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network allowlist entry {entry:?}: {problem}")]
pub struct HostPatternError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub problem: HostProblem,
}

/// A request's host that cannot be parsed: the host as received and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed host {host:?}: {problem}")]
pub struct HostError {
    /// The host as received.
    pub host: String,
    /// What is wrong with it.
    pub problem: HostProblem,
}

// ---------------------------------------------------------------------------------------------
// Names and targets

/// A DNS name in canonical form: ASCII (A-labels for internationalised names), lower-case, no
/// trailing dot, 1..=253 bytes, labels of 1..=63 letters, digits, `-` or `_`, and not ending
/// in a numeric label (that would be an address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(String);

impl DomainName {
    /// The name as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` lies strictly below `parent` (`a.b.example` below `example`).
    fn is_below(&self, parent: &DomainName) -> bool {
        self.0.len() > parent.0.len() + 1
            && self.0.ends_with(parent.0.as_str())
            && self.0.as_bytes()[self.0.len() - parent.0.len() - 1] == b'.'
    }

    fn label_count(&self) -> usize {
        self.0.split('.').count()
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host a request wants to reach, parsed as a client would (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetHost {
    /// A DNS name, to be resolved after it passed the allowlist.
    Name(DomainName),
    /// An address, in whatever form it was written (IPv4-mapped IPv6 addresses become IPv4).
    Ip(IpAddr),
}

impl TargetHost {
    /// Parses the host part of an authority (`example.com`, `[::1]`, `0x7f000001`). A trailing
    /// dot, upper case and non-ASCII (UTS 46) are normalised; numeric forms become addresses.
    ///
    /// # Errors
    ///
    /// [`HostError`] when the text is not a valid name or address (see [`HostProblem`]).
    pub fn parse(host: &str) -> Result<Self, HostError> {
        let fail = |problem| HostError {
            host: truncated(host),
            problem,
        };
        if host.contains('*') {
            return Err(fail(HostProblem::MisplacedWildcard));
        }
        match parse_host(host).map_err(fail)? {
            Parsed::Name(name) => Ok(Self::Name(name)),
            Parsed::Ip { addr, .. } => Ok(Self::Ip(addr)),
        }
    }

    /// The address, for [`TargetHost::Ip`].
    #[must_use]
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Self::Ip(addr) => Some(*addr),
            Self::Name(_) => None,
        }
    }
}

impl fmt::Display for TargetHost {
    /// Names as they are, IPv4 as a dotted quad, IPv6 in brackets (authority form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => name.fmt(f),
            Self::Ip(IpAddr::V4(v4)) => v4.fmt(f),
            Self::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// At most [`MAX_HOST_INPUT_BYTES`] of hostile text kept in an error.
fn truncated(text: &str) -> String {
    let mut end = text.len().min(MAX_HOST_INPUT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// A host read by [`parse_host`].
enum Parsed {
    Name(DomainName),
    Ip {
        addr: IpAddr,
        /// Written as a plain dotted quad, or as a bracketed IPv6 address that is not
        /// IPv4-mapped.
        plain: bool,
        /// An IPv6 zone id was written (and dropped).
        zone: bool,
    },
}

/// The one host parser behind both entries and targets, so the two can never disagree.
fn parse_host(text: &str) -> Result<Parsed, HostProblem> {
    if text.is_empty() {
        return Err(HostProblem::Empty);
    }
    if text.len() > MAX_HOST_INPUT_BYTES {
        return Err(HostProblem::TooLong);
    }
    if text.chars().any(char::is_whitespace) {
        return Err(HostProblem::Whitespace);
    }
    if text.chars().any(char::is_control) {
        return Err(HostProblem::ControlCharacter);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let inner = rest.strip_suffix(']').ok_or(HostProblem::UnclosedBracket)?;
        let (v6, zone) = parse_ipv6(inner)?;
        return Ok(match v6.to_ipv4_mapped() {
            // The kernel delivers a mapped address to the IPv4 address: check that one.
            Some(v4) => Parsed::Ip {
                addr: IpAddr::V4(v4),
                plain: false,
                zone,
            },
            None => Parsed::Ip {
                addr: IpAddr::V6(v6),
                plain: true,
                zone,
            },
        });
    }
    if text.contains(':') {
        // A bare IPv6 address: a valid target, never plain in an entry.
        let (v6, zone) = parse_ipv6(text)?;
        let addr = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
        return Ok(Parsed::Ip {
            addr,
            plain: false,
            zone,
        });
    }
    for (c, problem) in [
        ('/', HostProblem::Path),
        ('@', HostProblem::UserInfo),
        (']', HostProblem::BadCharacter(']')),
        ('%', HostProblem::BadCharacter('%')),
    ] {
        if text.contains(c) {
            return Err(problem);
        }
    }
    // UTS 46 first: it lower-cases and maps full-width digits and dots, and what comes out is
    // what a resolver would be asked, so every later rule sees that text.
    let ascii = idna::domain_to_ascii_cow(text.as_bytes(), idna::AsciiDenyList::URL)
        .map_err(|_| HostProblem::Idna)?;
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err(HostProblem::Empty);
    }
    let last = name.rsplit('.').next().unwrap_or(name);
    if ends_in_number(last) {
        let v4 = parse_ipv4_loose(name).ok_or(HostProblem::NumericNotAddress)?;
        let plain = name == v4.to_string();
        return Ok(Parsed::Ip {
            addr: IpAddr::V4(v4),
            plain,
            zone: false,
        });
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(HostProblem::NameTooLong);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostProblem::EmptyLabel);
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(HostProblem::LabelTooLong);
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(HostProblem::BadCharacter(c));
        }
    }
    Ok(Parsed::Name(DomainName(name.to_owned())))
}

/// The WHATWG URL standard's "ends in a number": a last label of decimal digits, or `0x`
/// followed by hex digits. Such a host is an IPv4 address or nothing.
fn ends_in_number(last_label: &str) -> bool {
    if !last_label.is_empty() && last_label.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last_label
        .strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// IPv4 in every form `inet_aton` and the URL standard accept: one to four parts, each
/// decimal, octal (leading `0`) or hex (`0x`), the last part filling the remaining bytes
/// (`127.1` is `127.0.0.1`, `2130706433` is too).
fn parse_ipv4_loose(name: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let numbers = parts
        .iter()
        .map(|p| parse_ipv4_number(p))
        .collect::<Option<Vec<u64>>>()?;
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) {
        return None;
    }
    let last_bits = 8 * (5 - numbers.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut value = *last;
    for (i, n) in init.iter().enumerate() {
        value |= n << (24 - 8 * i as u32);
    }
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// One part of a loose IPv4 address. `0x` alone is 0, as in the URL standard.
fn parse_ipv4_number(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
        if hex.is_empty() {
            return Some(0);
        }
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    // from_str_radix accepts a sign; a long run of digits would overflow anyway.
    if digits.is_empty() || digits.len() > 32 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// An IPv6 address with an optional zone id (`%eth0` or the URI-encoded `%25eth0`), which is
/// reported and dropped.
fn parse_ipv6(text: &str) -> Result<(Ipv6Addr, bool), HostProblem> {
    let (addr, zone) = match text.split_once('%') {
        Some((addr, zone)) => {
            let zone = zone
                .strip_prefix("25")
                .filter(|z| !z.is_empty())
                .unwrap_or(zone);
            if zone.is_empty()
                || !zone
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                return Err(HostProblem::BadIpv6);
            }
            (addr, true)
        }
        None => (text, false),
    };
    let v6 = Ipv6Addr::from_str(addr).map_err(|_| HostProblem::BadIpv6)?;
    Ok((v6, zone))
}

// ---------------------------------------------------------------------------------------------
// Entries

/// One allowlist entry: an exact name, `*.` and a name (names strictly below it), or an
/// address; with an optional port (see the module docs for the forms and what each allows).
///
/// Parsed with [`FromStr`]; prints in canonical form ([`fmt::Display`]), which parses back to
/// the same entry. Serialised as that string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    host: PatternHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PatternHost {
    Exact(DomainName),
    Below(DomainName),
    Address(IpAddr),
}

impl HostPattern {
    /// The port the entry is limited to; `None` means [`DEFAULT_PORTS`].
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The address, for an entry that names one.
    #[must_use]
    pub fn address(&self) -> Option<IpAddr> {
        match self.host {
            PatternHost::Address(addr) => Some(addr),
            _ => None,
        }
    }

    /// Whether the entry is a wildcard (`*.example.com`).
    #[must_use]
    pub fn is_wildcard(&self) -> bool {
        matches!(self.host, PatternHost::Below(_))
    }

    /// Whether this entry allows `port`: its own port, or [`DEFAULT_PORTS`] without one.
    #[must_use]
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(own) => own == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether this entry names `host` (ports aside). A name entry never matches an address
    /// and an address entry never matches a name.
    #[must_use]
    pub fn matches_host(&self, host: &TargetHost) -> bool {
        match (&self.host, host) {
            (PatternHost::Exact(own), TargetHost::Name(name)) => own == name,
            (PatternHost::Below(parent), TargetHost::Name(name)) => name.is_below(parent),
            (PatternHost::Address(own), TargetHost::Ip(addr)) => own == addr,
            _ => false,
        }
    }

    /// Whether this entry allows `host` on `port`.
    #[must_use]
    pub fn matches(&self, host: &TargetHost, port: u16) -> bool {
        self.matches_host(host) && self.allows_port(port)
    }
}

impl FromStr for HostPattern {
    type Err = HostPatternError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        parse_pattern(entry).map_err(|problem| HostPatternError {
            entry: truncated(entry),
            problem,
        })
    }
}

fn parse_pattern(entry: &str) -> Result<HostPattern, HostProblem> {
    if entry.is_empty() {
        return Err(HostProblem::Empty);
    }
    if entry.len() > MAX_HOST_INPUT_BYTES {
        return Err(HostProblem::TooLong);
    }
    let lower = entry.to_ascii_lowercase();
    if lower.contains("://") || lower.starts_with("http:") || lower.starts_with("https:") {
        return Err(HostProblem::Scheme);
    }
    if entry.chars().any(char::is_whitespace) {
        return Err(HostProblem::Whitespace);
    }
    if entry.contains('/') {
        return Err(HostProblem::Path);
    }
    if entry.contains('@') {
        return Err(HostProblem::UserInfo);
    }
    let (host, port) = if entry.starts_with('[') {
        let close = entry.find(']').ok_or(HostProblem::UnclosedBracket)?;
        let (host, after) = entry.split_at(close + 1);
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(HostProblem::TextAfterBracket),
        }
    } else {
        match entry.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => return Err(HostProblem::Ipv6NeedsBrackets),
            Some((host, port)) => (host, Some(port)),
            None => (entry, None),
        }
    };
    let port = port.map(parse_port).transpose()?;
    let host = if let Some(parent) = host.strip_prefix("*.") {
        if parent.contains('*') {
            return Err(HostProblem::MisplacedWildcard);
        }
        match parse_host(parent)? {
            Parsed::Name(name) if name.label_count() < 2 => return Err(HostProblem::BroadWildcard),
            Parsed::Name(name) => PatternHost::Below(name),
            Parsed::Ip { .. } => return Err(HostProblem::WildcardOverAddress),
        }
    } else {
        if host.contains('*') {
            return Err(HostProblem::MisplacedWildcard);
        }
        match parse_host(host)? {
            Parsed::Name(name) => PatternHost::Exact(name),
            Parsed::Ip { zone: true, .. } => return Err(HostProblem::ZoneId),
            Parsed::Ip { plain: false, .. } => return Err(HostProblem::NonCanonicalAddress),
            Parsed::Ip { addr, .. } => PatternHost::Address(addr),
        }
    };
    Ok(HostPattern { host, port })
}

fn parse_port(text: &str) -> Result<u16, HostProblem> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostProblem::BadPort);
    }
    let digits = text.trim_start_matches('0');
    if digits.is_empty() {
        return Err(HostProblem::PortZero);
    }
    if digits.len() > 5 {
        return Err(HostProblem::PortOutOfRange);
    }
    let value: u32 = digits.parse().map_err(|_| HostProblem::BadPort)?;
    u16::try_from(value).map_err(|_| HostProblem::PortOutOfRange)
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            PatternHost::Exact(name) => name.fmt(f)?,
            PatternHost::Below(name) => write!(f, "*.{name}")?,
            PatternHost::Address(IpAddr::V4(v4)) => v4.fmt(f)?,
            PatternHost::Address(IpAddr::V6(v6)) => write!(f, "[{v6}]")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for HostPattern {
    type Error = HostPatternError;

    fn try_from(entry: String) -> Result<Self, Self::Error> {
        entry.parse()
    }
}

impl From<HostPattern> for String {
    fn from(pattern: HostPattern) -> Self {
        pattern.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Address classes

/// What kind of address an IP address is, for the refusal of anything not public.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Globally routable unicast: reachable when a listed name resolves to it.
    Public,
    /// `127.0.0.0/8`, `::1`: services of the developer's own machine.
    Loopback,
    /// `0.0.0.0/8`, `::`: Linux connects these to the local host.
    Unspecified,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// RFC 1918, `fc00::/7` unique local, `fec0::/10` site-local: the local network.
    Private,
    /// Cloud instance metadata services (`169.254.169.254`, `169.254.170.2`,
    /// `fd00:ec2::254`, `100.100.100.200`, `168.63.129.16`): the machine's credentials.
    Metadata,
    /// `100.64.0.0/10`, carrier-grade NAT: the provider's internal network.
    SharedCgnat,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Special-purpose space that no public service uses: documentation, benchmarking,
    /// `240.0.0.0/4`, IETF protocol assignments, Teredo, discard-only, IPv4-compatible.
    Reserved,
}

impl AddressClass {
    /// How a refusal names the class (`"loopback address"`).
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::Public => "public address",
            Self::Loopback => "loopback address",
            Self::Unspecified => "unspecified address",
            Self::LinkLocal => "link-local address",
            Self::Private => "private address",
            Self::Metadata => "metadata address",
            Self::SharedCgnat => "shared (CGNAT) address",
            Self::Multicast => "multicast address",
            Self::Broadcast => "broadcast address",
            Self::Reserved => "reserved address",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// Cloud metadata services: a command that reaches one gets the machine's credentials.
const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task credentials
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer (a public address)
];
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)];

/// The class of `addr` (see [`AddressClass`]). IPv4-mapped IPv6 addresses are classified as
/// their IPv4 address; other IPv6 forms that embed an IPv4 address take its class when that
/// class is not public.
#[must_use]
pub fn classify(addr: IpAddr) -> AddressClass {
    match addr {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(addr: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(addr) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(v4: Ipv4Addr) -> AddressClass {
    use AddressClass as C;
    if METADATA_V4.contains(&v4) {
        return C::Metadata;
    }
    let table: [([u8; 4], u32, AddressClass); 16] = [
        ([0, 0, 0, 0], 8, C::Unspecified),
        ([10, 0, 0, 0], 8, C::Private),
        ([100, 64, 0, 0], 10, C::SharedCgnat),
        ([127, 0, 0, 0], 8, C::Loopback),
        ([169, 254, 0, 0], 16, C::LinkLocal),
        ([172, 16, 0, 0], 12, C::Private),
        ([192, 0, 0, 0], 24, C::Reserved),
        ([192, 0, 2, 0], 24, C::Reserved),
        ([192, 88, 99, 0], 24, C::Reserved),
        ([192, 168, 0, 0], 16, C::Private),
        ([198, 18, 0, 0], 15, C::Reserved),
        ([198, 51, 100, 0], 24, C::Reserved),
        ([203, 0, 113, 0], 24, C::Reserved),
        ([224, 0, 0, 0], 4, C::Multicast),
        ([255, 255, 255, 255], 32, C::Broadcast),
        ([240, 0, 0, 0], 4, C::Reserved),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in_v4(v4, *net, *prefix))
        .map_or(C::Public, |(_, _, class)| *class)
}

fn in_v6(addr: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(addr) & mask == u128::from(net) & mask
}

/// The IPv4 address in bits `from..from + 32` of `v6`.
fn embedded_v4(v6: Ipv6Addr, from: u32) -> Ipv4Addr {
    let bits = (u128::from(v6) >> (96 - from)) as u32;
    Ipv4Addr::from(bits)
}

fn classify_v6(v6: Ipv6Addr) -> AddressClass {
    use AddressClass as C;
    if v6.is_unspecified() {
        return C::Unspecified;
    }
    if v6.is_loopback() {
        return C::Loopback;
    }
    if let Some(v4) = v6.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if METADATA_V6.contains(&v6) {
        return C::Metadata;
    }
    let v6net = |a: u16, b: u16, c: u16| Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0);
    // Forms that carry an IPv4 address: a non-public one decides the class.
    let embedded = if in_v6(v6, Ipv6Addr::UNSPECIFIED, 96) {
        // IPv4-compatible (deprecated): never a public service.
        Some((embedded_v4(v6, 96), C::Reserved))
    } else if in_v6(v6, v6net(0x64, 0xff9b, 0), 96) {
        Some((embedded_v4(v6, 96), C::Public))
    } else if in_v6(v6, v6net(0x64, 0xff9b, 1), 48) {
        Some((embedded_v4(v6, 96), C::Reserved))
    } else if in_v6(v6, v6net(0x2002, 0, 0), 16) {
        Some((embedded_v4(v6, 16), C::Public))
    } else {
        None
    };
    if let Some((v4, otherwise)) = embedded {
        return match classify_v4(v4) {
            C::Public => otherwise,
            class => class,
        };
    }
    let table: [(Ipv6Addr, u32, AddressClass); 9] = [
        (v6net(0x0100, 0, 0), 64, C::Reserved),      // discard-only
        (v6net(0x2001, 0, 0), 32, C::Reserved),      // Teredo
        (v6net(0x2001, 0x0db8, 0), 32, C::Reserved), // documentation
        (v6net(0x2001, 0, 0), 23, C::Reserved),      // IETF protocol assignments
        (v6net(0x3fff, 0, 0), 20, C::Reserved),      // documentation
        (v6net(0xfc00, 0, 0), 7, C::Private),        // unique local
        (v6net(0xfe80, 0, 0), 10, C::LinkLocal),
        (v6net(0xfec0, 0, 0), 10, C::Private), // site-local (deprecated)
        (v6net(0xff00, 0, 0), 8, C::Multicast),
    ];
    if let Some((_, _, class)) = table.iter().find(|(net, p, _)| in_v6(v6, *net, *p)) {
        return *class;
    }
    if in_v6(v6, v6net(0x2000, 0, 0), 3) {
        C::Public
    } else {
        C::Reserved
    }
}

// ---------------------------------------------------------------------------------------------
// The allowlist and its two checks

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// No entry names the host.
    NotInAllowlist,
    /// An entry names the host, but not on this port.
    PortNotAllowed,
    /// An address written as the target (in any form), not listed; with its class.
    IpLiteral(AddressClass),
    /// An allowed name resolved to an address that is not public and not listed.
    ResolvesTo {
        /// The address the name resolved to.
        address: IpAddr,
        /// Its class.
        class: AddressClass,
    },
    /// The host could not be parsed.
    MalformedHost(HostProblem),
    /// The `Host` header of an absolute-form request names another host than its URL (set by
    /// the proxy).
    HostHeaderMismatch,
    /// The host was not listed and the user said no (set by the proxy).
    DeniedByUser,
}

impl RefusalReason {
    /// A short stable code for machines (the proxy's `X-Garuda-Refused` header).
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::NotInAllowlist => "not-in-allowlist",
            Self::PortNotAllowed => "port-not-allowed",
            Self::IpLiteral(_) => "ip-literal",
            Self::ResolvesTo { .. } => "resolves-to-unlisted-address",
            Self::MalformedHost(_) => "malformed-host",
            Self::HostHeaderMismatch => "host-header-mismatch",
            Self::DeniedByUser => "denied-by-user",
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInAllowlist => f.write_str("not in allowlist"),
            Self::PortNotAllowed => f.write_str("port not allowed"),
            Self::IpLiteral(AddressClass::Public) => f.write_str("IP literal not in allowlist"),
            Self::IpLiteral(class) => class.fmt(f),
            Self::ResolvesTo { address, class } => {
                write!(f, "resolves to {address}, a {class}")
            }
            Self::MalformedHost(problem) => write!(f, "malformed host: {problem}"),
            Self::HostHeaderMismatch => f.write_str("Host header differs from the URL"),
            Self::DeniedByUser => f.write_str("denied by the user"),
        }
    }
}

/// A refused host and port, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} port {port} refused: {reason}")]
pub struct Refusal {
    /// The host in canonical form ([`TargetHost`]'s `Display`).
    pub host: String,
    /// The port.
    pub port: u16,
    /// Why.
    pub reason: RefusalReason,
}

/// The allowlist: the hosts a proxy lets through. Serialised as the list of its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Allowlist {
    /// The entries, in the order written (the first that allows a request is reported).
    pub entries: Vec<HostPattern>,
}

impl Allowlist {
    /// Parses every entry.
    ///
    /// # Errors
    ///
    /// The first entry that does not parse.
    pub fn parse<I, S>(entries: I) -> Result<Self, HostPatternError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries = entries
            .into_iter()
            .map(|e| e.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { entries })
    }

    /// Decides whether `host` may be reached on `port`, before anything is resolved: the entry
    /// that allows it, or the refusal.
    ///
    /// A name needs an entry naming it (exactly, or below a wildcard) that allows the port. An
    /// address needs an address entry naming exactly it, whatever its class; otherwise the
    /// refusal carries the class.
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: [`RefusalReason::NotInAllowlist`], [`RefusalReason::PortNotAllowed`] or
    /// [`RefusalReason::IpLiteral`].
    pub fn check(&self, host: &TargetHost, port: u16) -> Result<&HostPattern, Refusal> {
        let mut named = false;
        for entry in &self.entries {
            if entry.matches_host(host) {
                if entry.allows_port(port) {
                    return Ok(entry);
                }
                named = true;
            }
        }
        let reason = match host {
            _ if named => RefusalReason::PortNotAllowed,
            TargetHost::Name(_) => RefusalReason::NotInAllowlist,
            TargetHost::Ip(addr) => RefusalReason::IpLiteral(classify(*addr)),
        };
        Err(Refusal {
            host: host.to_string(),
            port,
            reason,
        })
    }

    /// Decides whether a connection for the allowed `host` may go to `address`, one of the
    /// addresses it resolved to. A public address passes; any other must be listed itself (an
    /// address entry for `address` that allows `port`).
    ///
    /// # Errors
    ///
    /// A [`Refusal`] for `host` with [`RefusalReason::ResolvesTo`].
    pub fn check_resolved(
        &self,
        host: &TargetHost,
        address: IpAddr,
        port: u16,
    ) -> Result<(), Refusal> {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            IpAddr::V4(_) => address,
        };
        let class = classify(address);
        if class == AddressClass::Public {
            return Ok(());
        }
        let listed = TargetHost::Ip(address);
        if self.entries.iter().any(|e| e.matches(&listed, port)) {
            return Ok(());
        }
        Err(Refusal {
            host: host.to_string(),
            port,
            reason: RefusalReason::ResolvesTo { address, class },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(text: &str) -> TargetHost {
        TargetHost::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn v4(text: &str) -> IpAddr {
        IpAddr::V4(text.parse().unwrap())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn entries_parse_and_print_canonically() {
        let cases = [
            ("crates.io", "crates.io"),
            ("Crates.IO.", "crates.io"),
            ("*.npmjs.org", "*.npmjs.org"),
            ("*.NPMJS.org.", "*.npmjs.org"),
            ("example.test:8443", "example.test:8443"),
            ("example.test:08443", "example.test:8443"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("127.0.0.1", "127.0.0.1"),
            ("[::1]:9000", "[::1]:9000"),
            ("[0:0:0:0:0:0:0:1]", "[::1]"),
            ("[FD00:EC2::254]", "[fd00:ec2::254]"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("BÜCHER.example", "xn--bcher-kva.example"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("*.bücher.example:8443", "*.xn--bcher-kva.example:8443"),
            ("_dmarc.example.com", "_dmarc.example.com"),
            ("a:65535", "a:65535"),
            ("localhost", "localhost"),
            ("*.co.uk", "*.co.uk"),
        ];
        for (entry, printed) in cases {
            let pattern: HostPattern = entry.parse().unwrap_or_else(|e| panic!("{entry}: {e}"));
            assert_eq!(pattern.to_string(), printed, "{entry}");
            let again: HostPattern = printed.parse().unwrap();
            assert_eq!(again, pattern, "{entry} round trip");
        }
    }

    #[test]
    fn malformed_entries_are_refused_with_the_reason() {
        use HostProblem as P;
        let cases = [
            ("", P::Empty),
            ("https://crates.io", P::Scheme),
            ("HTTP://crates.io", P::Scheme),
            ("http:crates.io", P::Scheme),
            ("ftp://crates.io", P::Scheme),
            ("crates.io/", P::Path),
            ("crates.io/api", P::Path),
            ("user@crates.io", P::UserInfo),
            ("crates .io", P::Whitespace),
            (" crates.io", P::Whitespace),
            ("crates.io\t", P::Whitespace),
            ("crates\u{0}.io", P::ControlCharacter),
            ("a..b", P::EmptyLabel),
            (".a.b", P::EmptyLabel),
            ("a.b..", P::EmptyLabel),
            ("..", P::EmptyLabel),
            (".", P::Empty),
            ("a.*.b", P::MisplacedWildcard),
            ("*", P::MisplacedWildcard),
            ("*a.b", P::MisplacedWildcard),
            ("*.*.b", P::MisplacedWildcard),
            ("a.b*", P::MisplacedWildcard),
            ("*.com", P::BroadWildcard),
            ("*.test.", P::BroadWildcard),
            ("*.", P::Empty),
            ("*.1.2.3", P::WildcardOverAddress),
            ("*.[::1]", P::Ipv6NeedsBrackets),
            ("a.b:0", P::PortZero),
            ("a.b:00", P::PortZero),
            ("a.b:65536", P::PortOutOfRange),
            ("a.b:99999999999", P::PortOutOfRange),
            ("a.b:", P::BadPort),
            ("a.b:+80", P::BadPort),
            ("a.b:http", P::BadPort),
            ("::1", P::Ipv6NeedsBrackets),
            ("fe80::1:443", P::Ipv6NeedsBrackets),
            ("[::1", P::UnclosedBracket),
            ("[::1]x", P::TextAfterBracket),
            ("[::1]:0", P::PortZero),
            ("[not-v6]", P::BadIpv6),
            ("[fe80::1%25eth0]", P::ZoneId),
            ("0x7f000001", P::NonCanonicalAddress),
            ("2130706433", P::NonCanonicalAddress),
            ("127.1", P::NonCanonicalAddress),
            ("0177.0.0.1", P::NonCanonicalAddress),
            ("[::ffff:127.0.0.1]", P::NonCanonicalAddress),
            ("1.2.3.4.5", P::NumericNotAddress),
            ("256.0.0.1", P::NumericNotAddress),
            ("example.123", P::NumericNotAddress),
            ("a!b.com", P::BadCharacter('!')),
            ("a%2eb.com", P::BadCharacter('%')),
            ("a\\b.com", P::Idna),
            ("xn--zz.example", P::Idna),
            (&"a".repeat(64), P::LabelTooLong),
        ];
        for (entry, problem) in cases {
            let err = entry.parse::<HostPattern>().unwrap_err();
            assert_eq!(err.problem, problem, "{entry:?}");
            assert_eq!(err.entry, entry);
        }
        let long = vec!["a".repeat(60); 5].join(".");
        assert_eq!(
            long.parse::<HostPattern>().unwrap_err().problem,
            HostProblem::NameTooLong
        );
        let huge = "a".repeat(MAX_HOST_INPUT_BYTES + 1);
        assert_eq!(
            huge.parse::<HostPattern>().unwrap_err().problem,
            HostProblem::TooLong
        );
    }

    #[test]
    fn the_error_names_the_entry() {
        let err = "https://crates.io".parse::<HostPattern>().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"https://crates.io\""), "{text}");
        assert!(text.contains("scheme"), "{text}");
    }

    #[test]
    fn serde_goes_through_the_string_form() {
        let list: Allowlist =
            serde_json::from_str(r#"["Crates.io", "*.npmjs.org", "[::1]:9000"]"#).unwrap();
        assert_eq!(list.entries.len(), 3);
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"["crates.io","*.npmjs.org","[::1]:9000"]"#
        );
        let bad = serde_json::from_str::<Allowlist>(r#"["https://x.com"]"#).unwrap_err();
        assert!(bad.to_string().contains("scheme"), "{bad}");
    }

    #[test]
    fn targets_in_every_numeric_form_are_addresses() {
        let loopback = v4("127.0.0.1");
        let cases = [
            ("127.0.0.1", loopback),
            ("127.0.0.1.", loopback),
            ("2130706433", loopback),
            ("0x7f000001", loopback),
            ("0X7F000001", loopback),
            ("0x7f.0.0.1", loopback),
            ("0x7f.0x0.0x0.0x1", loopback),
            ("0177.0.0.1", loopback),
            ("0177.0000.0.01", loopback),
            ("017700000001", loopback),
            ("127.1", loopback),
            ("127.0.1", loopback),
            ("127.000.000.001", loopback),
            ("0x7f.1", loopback),
            ("１２７.０.０.１", loopback),
            ("127。0。0。1", loopback),
            ("[::ffff:127.0.0.1]", loopback),
            ("[::ffff:7f00:1]", loopback),
            ("[0:0:0:0:0:ffff:7f00:1]", loopback),
            ("::ffff:127.0.0.1", loopback),
            ("0", v4("0.0.0.0")),
            ("0x", v4("0.0.0.0")),
            ("80", v4("0.0.0.80")),
            ("169.254.169.254", v4("169.254.169.254")),
            ("0xa9fea9fe", v4("169.254.169.254")),
            ("2852039166", v4("169.254.169.254")),
            ("0251.0376.0251.0376", v4("169.254.169.254")),
            ("169.16689662", v4("169.254.169.254")),
            ("[::1]", ip("::1")),
            ("[0:0:0:0:0:0:0:1]", ip("::1")),
            ("[::]", ip("::")),
            ("[fe80::1%25eth0]", ip("fe80::1")),
            ("[fe80::1%eth0]", ip("fe80::1")),
            ("[::127.0.0.1]", ip("::7f00:1")),
            ("[FD00:EC2::254]", ip("fd00:ec2::254")),
            ("255.255.255.255", v4("255.255.255.255")),
            ("4294967295", v4("255.255.255.255")),
        ];
        for (text, addr) in cases {
            assert_eq!(target(text), TargetHost::Ip(addr), "{text}");
        }
    }

    #[test]
    fn numeric_looking_targets_that_are_not_addresses_are_malformed() {
        use HostProblem as P;
        let cases = [
            ("4294967296", P::NumericNotAddress),
            ("1.2.3.4.5", P::NumericNotAddress),
            ("256.1.1.1", P::NumericNotAddress),
            ("1.2.3.256", P::NumericNotAddress),
            ("1.2.65536", P::NumericNotAddress),
            ("08.0.0.1", P::NumericNotAddress),
            ("0x7g.0.0.1", P::NumericNotAddress),
            ("foo.0x7f", P::NumericNotAddress),
            ("example.com.1", P::NumericNotAddress),
            ("127..1", P::NumericNotAddress),
            ("99999999999999999999999999999999999", P::NumericNotAddress),
            ("[::1", P::UnclosedBracket),
            ("[::1]:80", P::UnclosedBracket),
            ("[127.0.0.1]", P::BadIpv6),
            ("[fe80::1%]", P::BadIpv6),
            ("[::ffff:0x7f.1]", P::BadIpv6),
            ("*.example.com", P::MisplacedWildcard),
            ("ex ample.com", P::Whitespace),
            ("a@b.com", P::UserInfo),
            ("%31%32%37.0.0.1", P::BadCharacter('%')),
            ("a/b", P::Path),
            ("", P::Empty),
        ];
        for (text, problem) in cases {
            let err = TargetHost::parse(text).unwrap_err();
            assert_eq!(err.problem, problem, "{text:?}");
        }
    }

    #[test]
    fn names_are_canonical() {
        let cases = [
            ("Example.COM", "example.com"),
            ("example.com.", "example.com"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("ex\u{00AD}ample.com", "example.com"),
            ("ｅｘａｍｐｌｅ．com", "example.com"),
            ("0x7f.example", "0x7f.example"),
            ("127.0.0.1.nip.io", "127.0.0.1.nip.io"),
            ("1e100.net", "1e100.net"),
            ("localhost", "localhost"),
        ];
        for (text, name) in cases {
            assert_eq!(target(text).to_string(), name, "{text}");
            assert!(matches!(target(text), TargetHost::Name(_)), "{text}");
        }
    }

    #[test]
    fn classification_table() {
        use AddressClass as C;
        let cases = [
            ("8.8.8.8", C::Public),
            ("1.1.1.1", C::Public),
            ("127.0.0.1", C::Loopback),
            ("127.255.255.254", C::Loopback),
            ("0.0.0.0", C::Unspecified),
            ("0.1.2.3", C::Unspecified),
            ("10.1.2.3", C::Private),
            ("172.16.0.1", C::Private),
            ("172.31.255.255", C::Private),
            ("172.32.0.1", C::Public),
            ("192.168.1.1", C::Private),
            ("169.254.1.1", C::LinkLocal),
            ("169.254.169.254", C::Metadata),
            ("169.254.170.2", C::Metadata),
            ("100.100.100.200", C::Metadata),
            ("168.63.129.16", C::Metadata),
            ("100.64.0.1", C::SharedCgnat),
            ("100.127.255.255", C::SharedCgnat),
            ("100.128.0.1", C::Public),
            ("224.0.0.1", C::Multicast),
            ("239.255.255.250", C::Multicast),
            ("255.255.255.255", C::Broadcast),
            ("240.0.0.1", C::Reserved),
            ("255.255.255.254", C::Reserved),
            ("192.0.2.1", C::Reserved),
            ("198.51.100.1", C::Reserved),
            ("203.0.113.1", C::Reserved),
            ("198.18.0.1", C::Reserved),
            ("198.19.255.255", C::Reserved),
            ("192.0.0.8", C::Reserved),
            ("::", C::Unspecified),
            ("::1", C::Loopback),
            ("::ffff:127.0.0.1", C::Loopback),
            ("::ffff:169.254.169.254", C::Metadata),
            ("::ffff:8.8.8.8", C::Public),
            ("::127.0.0.1", C::Loopback),
            ("::10.0.0.1", C::Private),
            ("::8.8.8.8", C::Reserved),
            ("64:ff9b::7f00:1", C::Loopback),
            ("64:ff9b::a9fe:a9fe", C::Metadata),
            ("64:ff9b::808:808", C::Public),
            ("64:ff9b:1::808:808", C::Reserved),
            ("64:ff9b:1::a00:1", C::Private),
            ("2002:7f00:1::", C::Loopback),
            ("2002:a9fe:a9fe::1", C::Metadata),
            ("2002:808:808::1", C::Public),
            ("fd00:ec2::254", C::Metadata),
            ("fd00::1", C::Private),
            ("fc00::1", C::Private),
            ("fe80::1", C::LinkLocal),
            ("febf::1", C::LinkLocal),
            ("fec0::1", C::Private),
            ("ff02::1", C::Multicast),
            ("2001:db8::1", C::Reserved),
            ("2001::1", C::Reserved),
            ("100::1", C::Reserved),
            ("3fff::1", C::Reserved),
            ("2606:4700::1111", C::Public),
            ("2a00:1450:4001::1", C::Public),
            ("4000::1", C::Reserved),
        ];
        for (text, class) in cases {
            assert_eq!(classify(ip(text)), class, "{text}");
        }
    }

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(entries).unwrap()
    }

    #[test]
    fn check_table() {
        use AddressClass as C;
        use RefusalReason as R;
        let allow = list(&[
            "crates.io",
            "*.npmjs.org",
            "example.test:8443",
            "127.0.0.1:8080",
            "[::1]:9000",
            "10.0.0.5",
            "bücher.example",
        ]);
        let cases: [(&str, u16, Result<&str, R>); 32] = [
            ("crates.io", 443, Ok("crates.io")),
            ("crates.io", 80, Ok("crates.io")),
            ("CRATES.IO.", 443, Ok("crates.io")),
            ("crates.io", 8080, Err(R::PortNotAllowed)),
            ("crates.io", 22, Err(R::PortNotAllowed)),
            ("static.crates.io", 443, Err(R::NotInAllowlist)),
            ("registry.npmjs.org", 443, Ok("*.npmjs.org")),
            ("a.b.npmjs.org", 443, Ok("*.npmjs.org")),
            ("npmjs.org", 443, Err(R::NotInAllowlist)),
            ("evilnpmjs.org", 443, Err(R::NotInAllowlist)),
            ("npmjs.org.evil.test", 443, Err(R::NotInAllowlist)),
            ("registry.npmjs.org", 8443, Err(R::PortNotAllowed)),
            ("example.test", 8443, Ok("example.test:8443")),
            ("example.test", 443, Err(R::PortNotAllowed)),
            ("xn--bcher-kva.example", 443, Ok("xn--bcher-kva.example")),
            ("BÜCHER.example", 443, Ok("xn--bcher-kva.example")),
            ("127.0.0.1", 8080, Ok("127.0.0.1:8080")),
            ("0x7f000001", 8080, Ok("127.0.0.1:8080")),
            ("[::ffff:127.0.0.1]", 8080, Ok("127.0.0.1:8080")),
            ("127.0.0.1", 80, Err(R::PortNotAllowed)),
            ("127.0.0.2", 8080, Err(R::IpLiteral(C::Loopback))),
            ("2130706433", 443, Err(R::PortNotAllowed)),
            ("[::1]", 9000, Ok("[::1]:9000")),
            ("[::1]", 443, Err(R::PortNotAllowed)),
            ("10.0.0.5", 443, Ok("10.0.0.5")),
            ("10.0.0.6", 443, Err(R::IpLiteral(C::Private))),
            ("169.254.169.254", 80, Err(R::IpLiteral(C::Metadata))),
            ("[fd00:ec2::254]", 80, Err(R::IpLiteral(C::Metadata))),
            ("8.8.8.8", 443, Err(R::IpLiteral(C::Public))),
            ("[fe80::1%25eth0]", 443, Err(R::IpLiteral(C::LinkLocal))),
            ("0", 80, Err(R::IpLiteral(C::Unspecified))),
            ("localhost", 80, Err(R::NotInAllowlist)),
        ];
        for (host, port, expected) in cases {
            let got = allow
                .check(&target(host), port)
                .map(ToString::to_string)
                .map_err(|r| r.reason);
            assert_eq!(got, expected.map(str::to_owned), "{host}:{port}");
        }
    }

    #[test]
    fn a_name_entry_never_allows_an_address_and_back() {
        let allow = list(&["localhost", "127.0.0.1"]);
        assert!(allow.check(&target("localhost"), 80).is_ok());
        assert!(allow.check(&target("127.0.0.1"), 80).is_ok());
        let names_only = list(&["localhost"]);
        assert_eq!(
            names_only
                .check(&target("127.0.0.1"), 80)
                .unwrap_err()
                .reason,
            RefusalReason::IpLiteral(AddressClass::Loopback)
        );
        let addresses_only = list(&["127.0.0.1"]);
        assert_eq!(
            addresses_only
                .check(&target("localhost"), 80)
                .unwrap_err()
                .reason,
            RefusalReason::NotInAllowlist
        );
    }

    #[test]
    fn resolved_addresses_must_be_public_or_listed() {
        use AddressClass as C;
        let allow = list(&["allowed.test:8080", "127.0.0.1:8080", "[::1]"]);
        let host = target("allowed.test");
        let cases: [(&str, u16, Option<C>); 10] = [
            ("93.184.216.34", 8080, None),
            ("2606:4700::1111", 8080, None),
            ("127.0.0.1", 8080, None),
            ("::ffff:127.0.0.1", 8080, None),
            ("127.0.0.1", 8081, Some(C::Loopback)),
            ("127.0.0.2", 8080, Some(C::Loopback)),
            ("169.254.169.254", 8080, Some(C::Metadata)),
            ("10.0.0.1", 8080, Some(C::Private)),
            ("::1", 443, None),
            ("::1", 8080, Some(C::Loopback)),
        ];
        for (addr, port, refused) in cases {
            let got = allow.check_resolved(&host, ip(addr), port);
            match refused {
                None => assert_eq!(got, Ok(()), "{addr}:{port}"),
                Some(class) => {
                    let refusal = got.unwrap_err();
                    assert_eq!(refusal.host, "allowed.test");
                    let expected = match ip(addr) {
                        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip(addr), IpAddr::V4),
                        v4 => v4,
                    };
                    assert_eq!(
                        refusal.reason,
                        RefusalReason::ResolvesTo {
                            address: expected,
                            class
                        },
                        "{addr}:{port}"
                    );
                }
            }
        }
    }

    #[test]
    fn refusals_read_well() {
        let r = |reason: RefusalReason| reason.to_string();
        assert_eq!(r(RefusalReason::NotInAllowlist), "not in allowlist");
        assert_eq!(
            r(RefusalReason::IpLiteral(AddressClass::Metadata)),
            "metadata address"
        );
        assert_eq!(
            r(RefusalReason::IpLiteral(AddressClass::Public)),
            "IP literal not in allowlist"
        );
        assert_eq!(
            r(RefusalReason::ResolvesTo {
                address: v4("127.0.0.1"),
                class: AddressClass::Loopback
            }),
            "resolves to 127.0.0.1, a loopback address"
        );
        let refusal = list(&[]).check(&target("EVIL.test"), 443).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "evil.test port 443 refused: not in allowlist"
        );
        assert_eq!(refusal.reason.code(), "not-in-allowlist");
    }

    #[test]
    fn ipv6_targets_print_in_brackets() {
        assert_eq!(target("[::1]").to_string(), "[::1]");
        assert_eq!(target("::1").to_string(), "[::1]");
        assert_eq!(target("[fe80::1%25eth0]").to_string(), "[fe80::1]");
    }
}
