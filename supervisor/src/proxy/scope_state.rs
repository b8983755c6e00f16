//! What one command's scope records while it runs: the hosts refused (the blocked list), the
//! allowed hosts that could not be reached, and the hosts the user refused.
//!
//! It lives apart from the listener ([`super::scope`]), so that the request handling that
//! records into it does not depend on the listener that starts the request handling.

use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Mutex, PoisonError};

use garuda_policy::network::{Refusal, RefusalReason, DEFAULT_PORTS};

use super::upstream::{entry_host, FailureLog, UnreachableHosts, UpstreamFailure};

/// The most blocked hosts one scope records; later ones only mark the list as truncated. A
/// command cannot grow the supervisor's memory by trying a million names.
pub const MAX_BLOCKED_ENTRIES: usize = 256;

/// A host refused during a command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Blocked {
    /// The host, canonical (lower-case, A-labels; an address in its plain form, IPv6 in
    /// brackets), or as received when it could not be parsed.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Why.
    pub reason: RefusalReason,
}

impl From<Refusal> for Blocked {
    fn from(refusal: Refusal) -> Self {
        Self {
            host: refusal.host,
            port: refusal.port,
            reason: refusal.reason,
        }
    }
}

impl fmt::Display for Blocked {
    /// `evil.test (not in allowlist)`; the port is shown when it is not 80 or 443. The host is
    /// what the command sent when it could not be parsed (a `Host` header that names another
    /// host may hold a tab, C1 controls such as U+009B, bidirectional overrides): it is
    /// printed through [`garuda_text::Visible`], so it can neither drive the terminal nor
    /// pass for another name.
    ///
    /// A comma or a parenthesis, which no host name holds, is written as `\u{…}` too: the
    /// entries of a [`BlockedHosts`] line are joined by `, ` and end in `(reason)`, so a host
    /// sent as `a.test (not in allowlist), b.test` would otherwise read as two entries.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = entry_host(&self.host);
        if DEFAULT_PORTS.contains(&self.port) {
            write!(f, "{host} ({})", self.reason)
        } else {
            write!(f, "{host}:{} ({})", self.port, self.reason)
        }
    }
}

/// Every host refused during one command, each once, in the order first refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedHosts {
    entries: Vec<Blocked>,
    truncated: bool,
}

impl BlockedHosts {
    /// The entries.
    #[must_use]
    pub fn into_vec(self) -> Vec<Blocked> {
        self.entries
    }

    /// Whether more than [`MAX_BLOCKED_ENTRIES`] hosts were refused (the rest are not listed).
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl Deref for BlockedHosts {
    type Target = [Blocked];

    fn deref(&self) -> &[Blocked] {
        &self.entries
    }
}

impl fmt::Display for BlockedHosts {
    /// `evil.test (not in allowlist), 169.254.169.254 (metadata address)`; entries that print
    /// the same (one host on ports 80 and 443) are printed once.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut printed: Vec<String> = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let text = entry.to_string();
            if !printed.contains(&text) {
                printed.push(text);
            }
        }
        f.write_str(&printed.join(", "))?;
        if self.truncated {
            f.write_str(", and more")?;
        }
        Ok(())
    }
}

/// What a scope records while it runs.
#[derive(Default)]
pub(crate) struct ScopeState {
    blocked: Mutex<BlockedLog>,
    /// Allowed hosts that could not be reached.
    failures: Mutex<FailureLog>,
    /// Host and port pairs the user refused during this command.
    denied: Mutex<HashSet<(String, u16)>>,
}

#[derive(Default)]
struct BlockedLog {
    entries: Vec<Blocked>,
    seen: HashSet<Blocked>,
    truncated: bool,
}

impl ScopeState {
    pub(crate) fn record(&self, refusal: Refusal) {
        let blocked = Blocked::from(refusal);
        let mut log = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        if log.seen.contains(&blocked) {
            return;
        }
        if log.entries.len() >= MAX_BLOCKED_ENTRIES {
            log.truncated = true;
            return;
        }
        log.seen.insert(blocked.clone());
        log.entries.push(blocked);
    }

    /// An allowed host that could not be reached (counted per host, port and kind).
    pub(crate) fn record_failure(&self, failure: &UpstreamFailure) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(failure);
    }

    pub(crate) fn unreachable(&self) -> UnreachableHosts {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot()
    }

    pub(crate) fn snapshot(&self) -> BlockedHosts {
        let log = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        BlockedHosts {
            entries: log.entries.clone(),
            truncated: log.truncated,
        }
    }

    pub(crate) fn user_denied(&self, key: &(String, u16)) -> bool {
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(key)
    }

    pub(crate) fn deny(&self, key: (String, u16)) {
        self.denied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use garuda_policy::network::AddressClass;

    fn refusal(host: &str, port: u16, reason: RefusalReason) -> Refusal {
        Refusal {
            host: host.into(),
            port,
            reason,
        }
    }

    #[test]
    fn the_log_keeps_each_host_once_in_order() {
        let state = ScopeState::default();
        state.record(refusal("evil.test", 443, RefusalReason::NotInAllowlist));
        state.record(refusal(
            "169.254.169.254",
            80,
            RefusalReason::IpLiteral(AddressClass::Metadata),
        ));
        state.record(refusal("evil.test", 443, RefusalReason::NotInAllowlist));
        state.record(refusal("evil.test", 80, RefusalReason::NotInAllowlist));
        state.record(refusal("ok.test", 8081, RefusalReason::PortNotAllowed));
        let blocked = state.snapshot();
        assert_eq!(blocked.len(), 4);
        assert_eq!(blocked[0].host, "evil.test");
        assert_eq!(
            blocked.to_string(),
            "evil.test (not in allowlist), 169.254.169.254 (metadata address), \
             ok.test:8081 (port not allowed)"
        );
    }

    #[test]
    fn a_host_the_command_sent_is_printed_visibly() {
        let state = ScopeState::default();
        let host = "ok.test\ngaruda: blocked: nothing\t\u{9b}2J\u{202e}lmth.exe\x1b[0m";
        state.record(refusal(host, 80, RefusalReason::HostHeaderMismatch));
        let blocked = state.snapshot();
        assert_eq!(
            blocked.to_string(),
            "ok.test\\ngaruda: blocked: nothing\\t\\u{009b}2J\\u{202e}lmth.exe\\e[0m \
             (Host header differs from the URL)"
        );
        // Negative control: the host as recorded (and as the audit log keeps it) is raw.
        assert_eq!(blocked[0].host, host);
        assert_eq!(
            format!("garuda: blocked: {}", blocked[0].host)
                .lines()
                .count(),
            2
        );
    }

    #[test]
    fn a_host_cannot_pass_for_two_entries_of_the_line() {
        let state = ScopeState::default();
        let host = "a.test (not in allowlist), b.test";
        state.record(refusal(host, 80, RefusalReason::HostHeaderMismatch));
        let blocked = state.snapshot();
        let line = blocked.to_string();
        assert_eq!(
            line,
            "a.test \\u{0028}not in allowlist\\u{0029}\\u{002c} b.test \
             (Host header differs from the URL)"
        );
        assert_eq!(line.matches(", ").count(), 0, "{line}");
        // Negative control: the raw host, printed as an entry, reads as two.
        let raw = format!("{host} (Host header differs from the URL)");
        assert_eq!(raw.matches(", ").count(), 1);
        assert!(raw.starts_with("a.test (not in allowlist), "));
    }

    #[test]
    fn the_log_is_bounded() {
        let state = ScopeState::default();
        for i in 0..MAX_BLOCKED_ENTRIES + 10 {
            state.record(refusal(
                &format!("h{i}.test"),
                443,
                RefusalReason::NotInAllowlist,
            ));
        }
        let blocked = state.snapshot();
        assert_eq!(blocked.len(), MAX_BLOCKED_ENTRIES);
        assert!(blocked.is_truncated());
        assert!(blocked.to_string().ends_with(", and more"));
    }
}
