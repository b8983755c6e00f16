//! The proxy bridge: how a command in a network namespace of its own reaches the supervisor's
//! allowlist proxy, and nothing else.
//!
//! # Wiring (what the supervisor does)
//!
//! For each command that may use the network, the supervisor starts its proxy on a unix socket
//! of its own (mode 0600; HTTP absolute-form and `CONNECT`) and runs the command with
//! `policy.network = NetworkMode::Proxy { socket, port }` ([`proxy_mode`] builds it and checks
//! the values). The executor does everything else, for the duration of [`Executor::run`]:
//!
//! - the command gets a network namespace with only loopback, as in
//!   [`NetworkMode::Isolated`]: no route anywhere;
//! - a listener on `127.0.0.1:port` *inside that namespace* forwards each TCP connection to
//!   `socket` (bytes both ways, nothing parsed);
//! - the command's environment is [`ExecPolicy::command_env`]: `HTTP_PROXY`, `HTTPS_PROXY`,
//!   `ALL_PROXY` and their lower-case forms are `http://127.0.0.1:<port>`, and
//!   `NO_PROXY`/`no_proxy` are `localhost,127.0.0.1,::1` (the loopback in the namespace is the
//!   command's own; see [`NetworkMode::NO_PROXY`]). Proxy variables already in `policy.env`
//!   are replaced.
//!
//! A command that unsets the variables or opens a socket of its own has no route: `connect` to
//! any address but its own loopback fails with `ENETUNREACH`, and its loopback has nothing but
//! its own servers and the bridge.
//!
//! # How the bridge works
//!
//! The listening socket is made *inside* the command's network namespace by the sandbox's own
//! setup code, before the command exists, and handed to the supervisor over a unix socket pair
//! (`SCM_RIGHTS`). A socket stays in the namespace it was made in, wherever its descriptor
//! goes, so the supervisor accepts connections that were made inside the sandbox and forwards
//! each one to the proxy's socket from a thread of its own ([`Bridge`]). The setup code waits
//! for the supervisor's one-byte go-ahead (sent once the forwarder runs) before it goes on, so
//! the command never starts without a bridge; if the bridge cannot be set up, the run fails
//! with [`BridgeError`] and the command does not start.
//!
//! | executor | who makes the listener |
//! |---|---|
//! | `landlock` | outer, right after it brings up loopback in the new network namespace |
//! | `bubblewrap` | the spawn hook: it makes the user and network namespaces itself (loopback up, listener handed over), then execs bwrap without `--unshare-net`, which keeps that namespace |
//! | `host`, `seatbelt` | nobody in a sandbox (they have no network namespace): the supervisor listens on the host's `127.0.0.1:port` itself, which must be free |
//!
//! Why not a helper process inside the sandbox (re-exec `garuda __net-bridge -- CMD`)? The
//! forwarder would then share the command's PID namespace, rights and lifetime (the command
//! could kill it), the `garuda` binary would have to be reachable and executable from inside
//! every sandbox, the proxy's unix socket would have to be bound into the view, the command
//! would no longer be the sandbox's first process (exit codes, signals, `execve` errors would
//! pass through a wrapper), and the native executor would need an extra `exec`. With the
//! handoff, nothing is added to the sandbox: no process, no mount, no seccomp exception (the
//! listener is made before seccomp applies, by code that runs before the command).
//!
//! # Limits
//!
//! At most [`MAX_CONNECTIONS`] connections are forwarded at once; further ones wait in the
//! listener's backlog until one ends. Each connection holds two buffers of [`BUFFER_BYTES`].
//! A connection the proxy does not take at once (socket gone, backlog full) is closed. When
//! the command ends, [`Bridge::stop`] closes the listener and every connection and joins the
//! thread: nothing of the bridge outlives [`Executor::run`].
//!
//! [`Executor::run`]: crate::executor::Executor::run
//! [`ExecPolicy::command_env`]: garuda_policy::ExecPolicy::command_env

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use garuda_policy::NetworkMode;

use crate::sys;

/// Connections forwarded at once; more wait in the listener's backlog.
pub const MAX_CONNECTIONS: usize = 128;

/// Bytes buffered per direction of one connection.
pub const BUFFER_BYTES: usize = 32 * 1024;

/// How long the supervisor waits for the sandbox setup to hand over the listener.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest socket path a unix socket address holds (`sun_path` is 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Name of the forwarder thread (one per proxied command). At most 15 bytes: Linux keeps no
/// more of a thread's name (`/proc/self/task/*/comm`).
pub const THREAD_NAME: &str = "garuda-bridge";

/// Why the bridge could not be set up. The command did not run.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// Port 0 would let the kernel pick, and the command is told a fixed port.
    #[error("proxy port 0 cannot be used: the command is told one fixed port")]
    PortZero,
    /// The socket path is relative.
    #[error("proxy socket path {} is not absolute", .0.display())]
    RelativeSocket(PathBuf),
    /// The socket path does not fit a unix socket address.
    #[error("proxy socket path {} is {len} bytes long; a unix socket address holds at most {MAX_SOCKET_PATH}", path.display())]
    SocketPathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The socket cannot be looked at (missing, or a directory on the way is unreadable).
    #[error("proxy socket {}: {error}", path.display())]
    SocketUnavailable {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: io::Error,
    },
    /// The path exists but is not a unix socket.
    #[error("proxy socket {} is not a unix socket", .0.display())]
    NotASocket(PathBuf),
    /// The `host` and `seatbelt` executors listen on the host's loopback; that failed.
    #[error("listen on {addr} on the host loopback: {error}")]
    HostListen {
        /// The address.
        addr: SocketAddrV4,
        /// The OS error.
        error: io::Error,
    },
    /// The sandbox setup ended without handing over a listener (its own report says why).
    #[error("the sandbox setup ended before it handed over the listener for 127.0.0.1:{port}")]
    NoListener {
        /// The port.
        port: u16,
    },
    /// Receiving the listener, or sending the go-ahead, failed.
    #[error("handing over the listener for 127.0.0.1:{port}: {error}")]
    Handoff {
        /// The port.
        port: u16,
        /// The OS error.
        error: io::Error,
    },
    /// The descriptor the setup handed over is not the expected listener.
    #[error("the listener handed over is bound to {got}, not 127.0.0.1:{port}")]
    WrongListener {
        /// The port asked for.
        port: u16,
        /// What the socket is bound to.
        got: String,
    },
    /// The forwarder could not be started (pipe, thread).
    #[error("starting the forwarder: {0}")]
    Start(io::Error),
}

/// Check the values of a proxy mode: `port` is not 0, `socket` is absolute, fits a unix socket
/// address and is a unix socket now.
pub fn check(socket: &Path, port: u16) -> Result<(), BridgeError> {
    if port == 0 {
        return Err(BridgeError::PortZero);
    }
    if !socket.is_absolute() {
        return Err(BridgeError::RelativeSocket(socket.to_path_buf()));
    }
    let len = socket.as_os_str().as_bytes().len();
    if len > MAX_SOCKET_PATH {
        return Err(BridgeError::SocketPathTooLong {
            path: socket.to_path_buf(),
            len,
        });
    }
    let meta = std::fs::metadata(socket).map_err(|error| BridgeError::SocketUnavailable {
        path: socket.to_path_buf(),
        error,
    })?;
    if !meta.file_type().is_socket() {
        return Err(BridgeError::NotASocket(socket.to_path_buf()));
    }
    Ok(())
}

/// [`NetworkMode::Proxy`] for the proxy listening on `socket`, announced to the command as
/// `http://127.0.0.1:<port>`, after [`check`].
pub fn proxy_mode(socket: impl Into<PathBuf>, port: u16) -> Result<NetworkMode, BridgeError> {
    let socket = socket.into();
    check(&socket, port)?;
    Ok(NetworkMode::Proxy { socket, port })
}

/// The proxy of `mode`, checked ([`check`]); `None` when the mode has no proxy. Every executor
/// calls this before it starts anything.
pub fn checked_proxy(mode: &NetworkMode) -> Result<Option<(&Path, u16)>, BridgeError> {
    match mode {
        NetworkMode::Isolated => Ok(None),
        NetworkMode::Proxy { socket, port } => {
            check(socket, *port)?;
            Ok(Some((socket.as_path(), *port)))
        }
    }
}

/// The supervisor's side of a listener handoff from a sandbox's setup code.
#[derive(Debug)]
pub(crate) struct Receiver {
    channel: UnixStream,
    socket: PathBuf,
    port: u16,
}

/// A socket pair for a handoff: the supervisor's [`Receiver`] and the sandbox's end
/// (close-on-exec), to be described to the setup code as a [`sys::BridgeHandoff`] and dropped
/// by the supervisor once the sandbox's first process is forked.
pub(crate) fn handoff(socket: &Path, port: u16) -> Result<(Receiver, OwnedFd), BridgeError> {
    let (ours, theirs) = UnixStream::pair().map_err(BridgeError::Start)?;
    Ok((
        Receiver {
            channel: ours,
            socket: socket.to_path_buf(),
            port,
        },
        OwnedFd::from(theirs),
    ))
}

impl Receiver {
    /// Wait for the listener, start the forwarder on it, then send the go-ahead. On any error
    /// the channel is closed without the go-ahead, which makes the setup fail.
    pub(crate) fn receive(self) -> Result<Bridge, BridgeError> {
        let port = self.port;
        let handoff_err = |error| BridgeError::Handoff { port, error };
        self.channel
            .set_read_timeout(Some(HANDOFF_TIMEOUT))
            .map_err(handoff_err)?;
        let fd = match sys::recv_fd(&self.channel) {
            Ok(Some(fd)) => fd,
            Ok(None) => return Err(BridgeError::NoListener { port }),
            Err(e) => return Err(handoff_err(e)),
        };
        let listener = TcpListener::from(fd);
        let want = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
        match listener.local_addr() {
            Ok(got) if got == want => {}
            Ok(got) => {
                return Err(BridgeError::WrongListener {
                    port,
                    got: got.to_string(),
                })
            }
            Err(e) => {
                return Err(BridgeError::WrongListener {
                    port,
                    got: e.to_string(),
                })
            }
        }
        let bridge = Bridge::start(listener, &self.socket)?;
        (&self.channel).write_all(&[1]).map_err(handoff_err)?;
        Ok(bridge)
    }
}

/// What a bridge did, returned by [`Bridge::stop`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Connections accepted from the command.
    pub accepted: u64,
    /// Of those, connections the proxy's socket did not take (each was closed at once).
    pub proxy_unreachable: u64,
}

/// A running forwarder: one thread that accepts on a listener and copies every connection to
/// and from the proxy's unix socket. Stopped (listener and connections closed, thread joined)
/// by [`Bridge::stop`] or when dropped.
#[derive(Debug)]
pub struct Bridge {
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<BridgeStats>>,
}

impl Bridge {
    /// Forward every connection accepted on `listener` to the unix socket `socket`.
    pub fn start(listener: TcpListener, socket: &Path) -> Result<Bridge, BridgeError> {
        listener.set_nonblocking(true).map_err(BridgeError::Start)?;
        let (stop_rx, stop_tx) = sys::pipe().map_err(BridgeError::Start)?;
        let socket = socket.to_path_buf();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || forward(&listener, &stop_rx, &socket))
            .map_err(BridgeError::Start)?;
        Ok(Bridge {
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Listen on the host's `127.0.0.1:port` and forward to `socket` (the `host` and
    /// `seatbelt` executors, which have no network namespace of their own).
    pub fn on_host_loopback(port: u16, socket: &Path) -> Result<Bridge, BridgeError> {
        let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let listener =
            TcpListener::bind(addr).map_err(|error| BridgeError::HostListen { addr, error })?;
        Bridge::start(listener, socket)
    }

    /// Close the listener and every connection, and wait for the thread to end.
    pub fn stop(mut self) -> BridgeStats {
        self.shutdown()
    }

    fn shutdown(&mut self) -> BridgeStats {
        // Closing the pipe's only write end wakes the thread (POLLHUP on the read end).
        drop(self.stop.take());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One direction of a connection: bytes read from one socket, not yet written to the other.
struct Flow {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The source reached end of stream.
    eof: bool,
    /// The destination was shut down for writing (after `eof` and an empty buffer).
    closed: bool,
}

fn again(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl Flow {
    fn new() -> Flow {
        Flow {
            buf: vec![0; BUFFER_BYTES],
            start: 0,
            end: 0,
            eof: false,
            closed: false,
        }
    }

    fn wants_read(&self) -> bool {
        !self.eof && self.end < self.buf.len()
    }

    fn wants_write(&self) -> bool {
        self.start < self.end
    }

    /// One non-blocking read and one write; then, at the end of the stream, shut the
    /// destination for writing. An error ends the connection.
    fn pump<R: Read, W: Write>(
        &mut self,
        src: &mut R,
        dst: &mut W,
        shut: impl FnOnce(&mut W) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.wants_read() {
            match src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if again(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if self.wants_write() {
            match dst.write(&self.buf[self.start..self.end]) {
                Ok(n) => {
                    self.start += n;
                    if self.start == self.end {
                        self.start = 0;
                        self.end = 0;
                    }
                }
                Err(e) if again(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if self.eof && !self.wants_write() && !self.closed {
            self.closed = true;
            match shut(dst) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// One forwarded connection: the command's TCP side and the proxy's unix side.
struct Conn {
    tcp: TcpStream,
    unix: UnixStream,
    /// Command → proxy.
    up: Flow,
    /// Proxy → command.
    down: Flow,
    dead: bool,
}

fn pollfd(fd: libc::c_int, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        // A negative descriptor is skipped by poll (no events, not even POLLHUP).
        fd: if events == 0 { -1 } else { fd },
        events,
        revents: 0,
    }
}

impl Conn {
    fn new(tcp: TcpStream, unix: UnixStream) -> Conn {
        Conn {
            tcp,
            unix,
            up: Flow::new(),
            down: Flow::new(),
            dead: false,
        }
    }

    /// Poll entries for the TCP and the unix side: read where a buffer has room, write where
    /// one has bytes.
    fn interest(&self) -> [libc::pollfd; 2] {
        let flag = |on: bool, bit: libc::c_short| if on { bit } else { 0 };
        [
            pollfd(
                self.tcp.as_raw_fd(),
                flag(self.up.wants_read(), libc::POLLIN)
                    | flag(self.down.wants_write(), libc::POLLOUT),
            ),
            pollfd(
                self.unix.as_raw_fd(),
                flag(self.down.wants_read(), libc::POLLIN)
                    | flag(self.up.wants_write(), libc::POLLOUT),
            ),
        ]
    }

    fn pump(&mut self) {
        let Conn {
            tcp,
            unix,
            up,
            down,
            dead,
        } = self;
        let up_result = up.pump(&mut &*tcp, &mut &*unix, |u| u.shutdown(Shutdown::Write));
        let down_result = down.pump(&mut &*unix, &mut &*tcp, |t| t.shutdown(Shutdown::Write));
        if up_result.is_err() || down_result.is_err() {
            *dead = true;
        }
    }

    fn finished(&self) -> bool {
        self.dead || (self.up.closed && self.down.closed)
    }
}

/// Accept what is waiting (up to the connection limit) and connect each to the proxy.
fn accept_waiting(
    listener: &TcpListener,
    socket: &Path,
    conns: &mut Vec<Conn>,
    stats: &mut BridgeStats,
) {
    while conns.len() < MAX_CONNECTIONS {
        match listener.accept() {
            Ok((tcp, _)) => {
                stats.accepted += 1;
                if tcp.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = tcp.set_nodelay(true);
                match sys::unix_connect_nonblocking(socket) {
                    Ok(fd) => conns.push(Conn::new(tcp, UnixStream::from(fd))),
                    // Dropping `tcp` closes it: the command sees the connection end.
                    Err(_) => stats.proxy_unreachable += 1,
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(_) => {
                // Out of descriptors or memory: try again later instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
                return;
            }
        }
    }
}

/// The forwarder thread: until `stop` becomes readable (its write end closed), accept and
/// copy. Returning drops the listener and every connection.
fn forward(listener: &TcpListener, stop: &OwnedFd, socket: &Path) -> BridgeStats {
    let mut stats = BridgeStats::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    loop {
        fds.clear();
        fds.push(pollfd(stop.as_raw_fd(), libc::POLLIN));
        let room = conns.len() < MAX_CONNECTIONS;
        fds.push(pollfd(
            listener.as_raw_fd(),
            if room { libc::POLLIN } else { 0 },
        ));
        for c in &conns {
            fds.extend(c.interest());
        }
        let polled = conns.len();
        match sys::poll(&mut fds, -1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Cannot wait: stop forwarding (the command keeps no more network than before).
            Err(_) => break,
        }
        if fds[0].revents != 0 {
            break;
        }
        if fds[1].revents != 0 {
            accept_waiting(listener, socket, &mut conns, &mut stats);
        }
        for (i, c) in conns.iter_mut().enumerate().take(polled) {
            if fds[2 + 2 * i].revents != 0 || fds[3 + 2 * i].revents != 0 {
                c.pump();
            }
        }
        conns.retain(|c| !c.finished());
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn checks_name_the_offending_value() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let _listener = UnixListener::bind(&sock).unwrap();
        assert!(check(&sock, 3128).is_ok());
        assert_eq!(
            check(&sock, 0).unwrap_err().to_string(),
            "proxy port 0 cannot be used: the command is told one fixed port"
        );
        assert_eq!(
            check(Path::new("p.sock"), 1).unwrap_err().to_string(),
            "proxy socket path p.sock is not absolute"
        );
        let long = PathBuf::from(format!("/{}", "x".repeat(107)));
        assert!(matches!(
            check(&long, 1),
            Err(BridgeError::SocketPathTooLong { len: 108, .. })
        ));
        let missing = dir.path().join("missing.sock");
        let err = check(&missing, 1).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("proxy socket {}: ", missing.display())),
            "{err}"
        );
        assert!(err.contains("No such file"), "{err}");
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(check(&file, 1), Err(BridgeError::NotASocket(_))));
        assert_eq!(
            proxy_mode(&sock, 8).unwrap(),
            NetworkMode::Proxy {
                socket: sock.clone(),
                port: 8
            }
        );
        assert_eq!(checked_proxy(&NetworkMode::Isolated).unwrap(), None);
    }

    /// An echo server on a unix socket that upper-cases what it reads.
    fn upper_server(path: &Path) -> std::thread::JoinHandle<()> {
        let listener = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                let up = buf[..n].to_ascii_uppercase();
                                if s.write_all(&up).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        })
    }

    #[test]
    fn forwards_both_ways_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let _server = upper_server(&sock);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let bridge = Bridge::start(listener, &sock).unwrap();
        // Several connections at once, a payload larger than the buffers.
        let payload: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut clients = Vec::new();
        for _ in 0..4 {
            let payload = payload.clone();
            clients.push(std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                let mut r = c.try_clone().unwrap();
                let reader = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    r.read_to_end(&mut got).unwrap();
                    got
                });
                c.write_all(&payload).unwrap();
                c.shutdown(Shutdown::Write).unwrap();
                reader.join().unwrap()
            }));
        }
        for c in clients {
            assert_eq!(c.join().unwrap(), payload.to_ascii_uppercase());
        }
        // A connection still open when the bridge stops is closed by it.
        let mut open = TcpStream::connect(addr).unwrap();
        open.write_all(b"ping").unwrap();
        let mut four = [0u8; 4];
        open.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"PING");
        let stats = bridge.stop();
        assert_eq!(stats.accepted, 5);
        assert_eq!(stats.proxy_unreachable, 0);
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let end = open.read_to_end(&mut rest);
        assert!(
            matches!(&end, Ok(0))
                || end
                    .as_ref()
                    .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionReset),
            "{end:?}"
        );
        // The listener is closed too. The port is free for anyone again, and the tests of
        // this binary run at once: another one's listener can have it already (seen once in
        // CI). Whatever answers there now is not this bridge: it does not echo as it did.
        match TcpStream::connect(addr) {
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
            Ok(mut other) => {
                other
                    .set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let _ = other.write_all(b"ping");
                let mut four = [0u8; 4];
                let answered = other.read_exact(&mut four).map(|()| four);
                assert!(
                    answered.as_ref().map_or(true, |a| a != b"PING"),
                    "the stopped bridge still answers at {addr}"
                );
            }
        }
    }

    /// Run the sandbox side of a handoff for `port` on a thread (in this network namespace),
    /// as outer or the bwrap hook would.
    fn sandbox_side(
        port: u16,
        theirs: OwnedFd,
    ) -> std::thread::JoinHandle<Result<(), (sys::Stage, i32)>> {
        use std::os::fd::IntoRawFd;
        let channel = theirs.into_raw_fd();
        std::thread::spawn(move || sys::bridge_handoff(&sys::BridgeHandoff { port, channel }))
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn a_handoff_starts_the_forwarder_before_the_go_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let _server = upper_server(&sock);
        // This test runs in the host's network namespace: a port found free can be taken by
        // another test before the sandbox side binds it (`NoListener`); take another then.
        let mut attempts = 0;
        let (port, bridge, setup) = loop {
            attempts += 1;
            let port = free_port();
            let (receiver, theirs) = handoff(&sock, port).unwrap();
            let setup = sandbox_side(port, theirs);
            match receiver.receive() {
                Ok(bridge) => break (port, bridge, setup),
                Err(BridgeError::NoListener { .. }) if attempts < 10 => {
                    let _ = setup.join();
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(setup.join().unwrap(), Ok(()));
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"through").unwrap();
        let mut got = [0u8; 7];
        c.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"THROUGH");
        assert_eq!(bridge.stop().accepted, 1);
    }

    #[test]
    fn a_refused_handoff_fails_the_setup() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("p.sock");
        let _server = upper_server(&sock);
        // The port is free when picked, but another test of this binary may take it before
        // the setup binds it (EADDRINUSE at BridgeListen): then try another, a few times.
        let mut attempts = 0;
        let port = loop {
            attempts += 1;
            let port = free_port();
            // The supervisor expects another port: no go-ahead, the setup gives up.
            let (receiver, theirs) = handoff(&sock, port.wrapping_add(1).max(1)).unwrap();
            let setup = sandbox_side(port, theirs);
            let err = receiver.receive().unwrap_err();
            let ended = setup.join().unwrap();
            if ended == Err((sys::Stage::BridgeListen, libc::EADDRINUSE)) && attempts < 5 {
                continue;
            }
            assert!(matches!(err, BridgeError::WrongListener { .. }), "{err}");
            assert_eq!(ended, Err((sys::Stage::BridgeHandoff, libc::ECONNABORTED)));
            break port;
        };
        // The setup ended before handing anything over: the supervisor says so.
        let (receiver, theirs) = handoff(&sock, port).unwrap();
        drop(theirs);
        assert!(matches!(
            receiver.receive(),
            Err(BridgeError::NoListener { .. })
        ));
    }

    #[test]
    fn the_thread_is_named_in_full() {
        assert!(THREAD_NAME.len() <= 15);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let bridge = Bridge::start(listener, Path::new("/nonexistent.sock")).unwrap();
        let names = || -> Vec<String> {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .map(|c| c.trim_end().to_string())
                .collect()
        };
        // The new thread names itself once it runs.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !names().iter().any(|n| n == THREAD_NAME) {
            assert!(std::time::Instant::now() < deadline, "{:?}", names());
            std::thread::sleep(Duration::from_millis(5));
        }
        bridge.stop();
    }

    #[test]
    fn a_missing_proxy_closes_the_connection() {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let bridge = Bridge::start(listener, &dir.path().join("gone.sock")).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        assert_eq!(c.read_to_end(&mut buf).unwrap(), 0);
        let stats = bridge.stop();
        assert_eq!(
            stats,
            BridgeStats {
                accepted: 1,
                proxy_unreachable: 1
            }
        );
    }
}
