//! One command's view of the proxy: its listener and its connections. What it was refused
//! and could not reach is recorded in its [`ScopeState`](super::scope_state).
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

use std::fmt;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::scope_state::{BlockedHosts, ScopeState};
use super::upstream::UnreachableHosts;
use super::{http, ProxyError, Shared};

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
