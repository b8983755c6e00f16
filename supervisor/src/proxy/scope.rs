//! One command's view of the proxy: its listener, its connections and what it was refused.
//!
//! The supervisor runs one [`Proxy`](super::Proxy) and gives every command its own listener,
//! so "which hosts did this command try and fail to reach" has an exact answer: everything
//! refused on that listener, and nothing refused for another command running at the same time.
//!
//! The accept loop owns every connection task of its scope (a `JoinSet`), and each connection
//! task owns its tunnel. Closing the scope aborts the accept loop, which drops the listener and
//! the `JoinSet`, which aborts every connection and tunnel: nothing of the command's traffic
//! outlives its scope. Upstream HTTP connections, which hyper drives on their own task, watch
//! the scope's cancel signal and end with it.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use garuda_policy::network::{Refusal, RefusalReason, DEFAULT_PORTS};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::upstream::{FailureLog, UnreachableHosts, UpstreamFailure};
use super::{http, ProxyError, Shared};

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

/// A host as one entry of a `host (reason), host (reason)` line: [`garuda_text::visible`],
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

/// Where a scope listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address (with the port actually bound).
    Tcp(SocketAddr),
    /// A unix socket path.
    Unix(PathBuf),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(addr) => addr.fmt(f),
            Self::Unix(path) => path.display().fmt(f),
        }
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

    fn unreachable(&self) -> UnreachableHosts {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot()
    }

    fn snapshot(&self) -> BlockedHosts {
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

/// One command's listener on the proxy. Dropping it (or [`CommandScope::close`]) stops the
/// listener, ends its connections and tunnels, and removes its unix socket.
pub struct CommandScope {
    addr: ListenAddr,
    state: Arc<ScopeState>,
    accept: tokio::task::JoinHandle<()>,
    cancel: watch::Sender<bool>,
    open: Arc<AtomicUsize>,
}

impl fmt::Debug for CommandScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandScope")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl CommandScope {
    /// Where this scope listens: give it to the command (`HTTP_PROXY=http://ADDR`, or the
    /// sandbox bridge for a unix socket).
    #[must_use]
    pub fn local_addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// Every host refused on this scope so far, each once, in order.
    #[must_use]
    pub fn blocked(&self) -> BlockedHosts {
        self.state.snapshot()
    }

    /// Every allowed host that could not be reached on this scope so far (the name did not
    /// resolve, the connection failed, the upstream broke off), per host, port and kind, in
    /// order, with a count.
    #[must_use]
    pub fn unreachable(&self) -> UnreachableHosts {
        self.state.unreachable()
    }

    /// Connections open on this scope now (each tunnel counts once).
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Stops the scope (as dropping it does) and returns its final blocked list.
    pub fn close(self) -> BlockedHosts {
        self.blocked()
    }
}

impl Drop for CommandScope {
    fn drop(&mut self) {
        let _ = self.cancel.send(true);
        self.accept.abort();
        if let ListenAddr::Unix(path) = &self.addr {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(crate) fn listen_tcp(
    runtime: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    addr: SocketAddr,
) -> Result<CommandScope, ProxyError> {
    let bind_error = |source| ProxyError::BindTcp { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    let _context = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_error)?;
    Ok(start(
        runtime,
        shared,
        ListenAddr::Tcp(local),
        Listener::Tcp(listener),
    ))
}

pub(crate) fn listen_unix(
    runtime: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    path: &Path,
) -> Result<CommandScope, ProxyError> {
    let bind_error = |source| ProxyError::BindUnix {
        path: path.to_owned(),
        source,
    };
    // bind() refuses an existing path, so nothing already there (a file, a link planted by
    // someone else) is ever replaced or followed.
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_error)?;
    if let Err(source) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(ProxyError::Chmod {
            path: path.to_owned(),
            source,
        });
    }
    let setup = listener.set_nonblocking(true).and_then(|()| {
        let _context = runtime.enter();
        tokio::net::UnixListener::from_std(listener)
    });
    let listener = match setup {
        Ok(listener) => listener,
        Err(source) => {
            let _ = std::fs::remove_file(path);
            return Err(bind_error(source));
        }
    };
    Ok(start(
        runtime,
        shared,
        ListenAddr::Unix(path.to_owned()),
        Listener::Unix(listener),
    ))
}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

fn start(
    runtime: &tokio::runtime::Runtime,
    shared: &Arc<Shared>,
    addr: ListenAddr,
    listener: Listener,
) -> CommandScope {
    let state = Arc::new(ScopeState::default());
    let (cancel, cancelled) = watch::channel(false);
    let open = Arc::new(AtomicUsize::new(0));
    let accept = runtime.spawn(accept_loop(
        listener,
        Arc::clone(shared),
        Arc::clone(&state),
        Arc::clone(&open),
        cancelled,
    ));
    CommandScope {
        addr,
        state,
        accept,
        cancel,
        open,
    }
}

/// Accepts connections while the scope has room, each served on a task the loop owns.
async fn accept_loop(
    listener: Listener,
    shared: Arc<Shared>,
    state: Arc<ScopeState>,
    open: Arc<AtomicUsize>,
    cancelled: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(shared.config.limits.max_connections));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        // Full: wait for a connection to end before accepting (the kernel's backlog holds
        // the rest), rather than accepting and dropping.
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Accepted::Tcp(s)),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Accepted::Unix(s)),
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: back off instead
                // of spinning, the listener itself is fine.
                drop(permit);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let state = Arc::clone(&state);
        let cancelled = cancelled.clone();
        let slot = Slot::take(permit, &open);
        match stream {
            Accepted::Tcp(stream) => {
                // Small writes (a CONNECT reply, interactive traffic) must not wait for Nagle.
                let _ = stream.set_nodelay(true);
                connections.spawn(async move {
                    http::serve(stream, shared, state, cancelled).await;
                    drop(slot);
                });
            }
            Accepted::Unix(stream) => {
                connections.spawn(async move {
                    http::serve(stream, shared, state, cancelled).await;
                    drop(slot);
                });
            }
        }
    }
}

/// A connection's place in its scope: released when the connection task ends or is aborted.
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: Arc<AtomicUsize>,
}

impl Slot {
    fn take(permit: OwnedSemaphorePermit, open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::SeqCst);
        Self {
            _permit: permit,
            open: Arc::clone(open),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
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
