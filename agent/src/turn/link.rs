//! The loop's side of the channel to the supervisor: send a request, await its answer, show
//! something, learn of a cancel.
//!
//! [`Supervisor`] is what the loop needs and nothing more, so the loop runs the same against
//! the real socket ([`SocketSupervisor`]) and against an in-memory double in the tests.
//! Answers are matched by id: several requests may be outstanding (the read-only calls of a
//! step) and their answers may arrive in any order.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use garuda_ipc::{
    body_len, decode, encode_into, AgentFrame, Answer, FrameError, Request, Start, StopReason,
    SupervisorFrame, UiEvent, Usage, PROTOCOL_VERSION,
};
use tokio::sync::{mpsc, oneshot, watch};

/// The channel failed: the supervisor is gone or a frame could not be written. The turn
/// cannot go on (every tool and the journal are behind the channel).
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A frame could not be written or read.
    #[error("the channel to the supervisor failed: {0}")]
    Frame(#[from] FrameError),
    /// The supervisor closed the channel (or ended the session) with this request open.
    #[error("the supervisor closed the channel")]
    Closed,
}

/// What the loop asks of the supervisor. Methods take `&self`: the concurrent parts of a step
/// (read-only calls, explore subagents) share one link on one thread.
pub trait Supervisor {
    /// Writes request `id`. Returns at once: the answer is awaited with [`Supervisor::answer`].
    fn send(&self, id: u64, request: Request) -> Result<(), LinkError>;

    /// [`Supervisor::send`] for one read-only request of a step's batch; `more` says that
    /// another of the same batch follows at once, so the supervisor may run them together.
    fn send_more(&self, id: u64, request: Request, more: bool) -> Result<(), LinkError> {
        let _ = more;
        self.send(id, request)
    }

    /// The answer to request `id`, whenever it arrives; answers to other ids that arrive
    /// first are kept for their own callers.
    fn answer(&self, id: u64) -> impl Future<Output = Result<Answer, LinkError>>;

    /// Shows something to the user (display only; a failure to show is not the loop's).
    fn ui(&self, event: UiEvent);

    /// Resolves once the supervisor has asked to cancel the turn (at once if it already has).
    fn cancelled(&self) -> impl Future<Output = ()>;

    /// Whether the supervisor has asked to cancel the turn.
    fn is_cancelled(&self) -> bool;
}

/// A frame from the supervisor that is not about one request: for the code that drives
/// sessions and turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The answer to `hello`.
    Start(Box<Start>),
    /// A turn begins.
    UserPrompt(String),
    /// The session is over.
    Shutdown,
    /// The channel ended or failed (the reason, for a diagnostic).
    Closed(String),
}

/// Buffers past this capacity are given back once they are this empty again: one large frame
/// must not keep its memory for the rest of the session.
const KEEP_BYTES: usize = 64 * 1024;

/// Bytes asked for per read: most frames fit; a longer one is read in several.
const READ_CHUNK: usize = 64 * 1024;

/// Gives `buf`'s memory back after a large frame, once it holds little again.
fn shrink(buf: &mut Vec<u8>) {
    if buf.capacity() > 16 * KEEP_BYTES && buf.len() <= KEEP_BYTES {
        buf.shrink_to(KEEP_BYTES);
    }
}

/// What the reader and the loop share: the open requests and the channel's end, the bytes read
/// that are not a whole frame yet, and where each frame goes. Frames are read by the reader task
/// when the runtime sees the socket readable, and by the loop itself when it asks whether the
/// turn was cancelled ([`SocketSupervisor::is_cancelled`] reads what the socket already holds:
/// a cancel that arrived while the loop was busy is seen before it calls the model again).
#[derive(Debug)]
struct Inbox {
    /// Open requests: the answer goes to the sender.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The channel has ended: no answer will come.
    closed: AtomicBool,
    /// Bytes read that are not a whole frame yet.
    buf: Mutex<Vec<u8>>,
    /// Set and cleared in frame order (a prompt clears it, a cancel sets it).
    cancel: watch::Sender<bool>,
    control: mpsc::UnboundedSender<Control>,
}

impl Inbox {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>>> {
        // A panic elsewhere while holding the lock leaves the map usable.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads whatever the socket holds now, without waiting, and hands out every whole frame.
    /// `false` once the channel has ended (then or before). `direct`: read the descriptor
    /// itself, not through the runtime, whose idea of the socket's readiness is only as new as
    /// the loop's last await (the loop asking between awaits); the reader task reads through
    /// the runtime, which then learns when the socket is empty.
    fn pump(&self, socket: &tokio::net::UnixStream, direct: bool) -> bool {
        let mut buf = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        loop {
            buf.reserve(READ_CHUNK);
            let got = if direct {
                // The socket is non-blocking: nothing there is `EAGAIN`, not a wait.
                rustix::io::read(socket, rustix::buffer::spare_capacity(&mut *buf))
                    .map_err(std::io::Error::from)
            } else {
                socket.try_read_buf(&mut *buf)
            };
            match got {
                Ok(0) => {
                    let why = if buf.is_empty() {
                        "the supervisor closed the channel".to_string()
                    } else {
                        let (got, want) = match buf.first_chunk::<4>() {
                            Some(prefix) => (buf.len() - 4, body_len(*prefix).unwrap_or(0)),
                            None => (buf.len(), 4),
                        };
                        FrameError::Truncated { got, want }.to_string()
                    };
                    drop(buf);
                    self.stop(why);
                    return false;
                }
                Ok(_) => {
                    // Every whole frame so far, before reading more: the buffer holds at most
                    // one frame (whose length was checked against the cap) and one read.
                    if let Some(why) = self.hand_out(&mut buf) {
                        drop(buf);
                        self.stop(why);
                        return false;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    drop(buf);
                    self.stop(FrameError::from(e).to_string());
                    return false;
                }
            }
        }
    }

    /// Takes every whole frame off the front of `buf` and hands it out; `Some(why)` when the
    /// reading is to stop.
    fn hand_out(&self, buf: &mut Vec<u8>) -> Option<String> {
        let mut at = 0;
        let stop = loop {
            match take_frame(buf, &mut at) {
                Ok(Some(body)) => match decode::<SupervisorFrame>(body) {
                    Ok(frame) => {
                        if let Some(why) = self.dispatch(frame) {
                            break Some(why);
                        }
                    }
                    Err(e) => break Some(e.to_string()),
                },
                Ok(None) => break None,
                Err(e) => break Some(e.to_string()),
            }
        };
        buf.drain(..at);
        shrink(buf);
        stop
    }

    /// Hands one frame to whoever it is for; `Some(why)` when the reading is to stop.
    fn dispatch(&self, frame: SupervisorFrame) -> Option<String> {
        match frame {
            SupervisorFrame::Answer { id, answer } => {
                // An answer nobody waits for (its turn was cancelled) is dropped.
                if let Some(tx) = self.waiting().remove(&id) {
                    let _ = tx.send(answer);
                }
            }
            SupervisorFrame::Cancel => {
                self.cancel.send_replace(true);
            }
            SupervisorFrame::Start(start) => {
                let _ = self.control.send(Control::Start(Box::new(start)));
            }
            SupervisorFrame::UserPrompt { text } => {
                // A new turn. A cancel read before its prompt was for no turn (a Ctrl-C
                // between turns) and is cleared; one read after it is this turn's and stays.
                // Cleared here, in frame order: the loop clearing it once it has taken the
                // prompt would also lose a cancel that came right behind the prompt.
                self.cancel.send_replace(false);
                let _ = self.control.send(Control::UserPrompt(text));
            }
            SupervisorFrame::Shutdown => {
                let _ = self.control.send(Control::Shutdown);
                return Some("the supervisor ended the session".into());
            }
        }
        None
    }

    /// The channel ended (`why`, for a diagnostic), once: no answer will come, and a turn in
    /// progress stops.
    fn stop(&self, why: String) {
        // Closed before the waiters go, so that a request registered after the drain sees the
        // flag (see `send`).
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.waiting().clear();
        self.cancel.send_replace(true);
        let _ = self.control.send(Control::Closed(why));
    }
}

/// The real link: frames over the socket pair with `garuda_ipc`'s codec, all on the loop's own
/// runtime. A frame is written at once when the socket takes it (nearly always: frames are
/// small beside the socket's buffer); what it does not take waits in an outbox, in order,
/// for a writer task. A reader task reads every frame from the supervisor and hands answers
/// to their waiters by id, cancels to the cancel flag, and the rest to
/// [`SocketSupervisor::next_control`].
///
/// The reader is a task, not a thread, so that an answer wakes the loop's thread once (the
/// runtime's poll sees the socket readable and runs the reader, which completes the waiter in
/// the same pass) instead of waking a reader thread that then wakes the loop's thread: one
/// thread wake-up less on every request's round trip (docs/benchmarks.md, "The agent's
/// reader on its runtime"). Writes never block the thread either: a loop blocked on a full
/// socket would stop its own reader, and the supervisor, blocked writing an answer the agent
/// does not read, would never read the frame the agent waits to write.
#[derive(Debug)]
pub struct SocketSupervisor {
    socket: Arc<tokio::net::UnixStream>,
    inbox: Arc<Inbox>,
    outbox: Arc<Outbox>,
    /// Reused to encode each frame.
    frame: RefCell<Vec<u8>>,
    receivers: RefCell<HashMap<u64, oneshot::Receiver<Answer>>>,
    cancel: watch::Receiver<bool>,
    control: tokio::sync::Mutex<mpsc::UnboundedReceiver<Control>>,
}

/// Bytes of frames the socket has not taken yet, and the writer task's state.
#[derive(Debug, Default)]
struct Outbox {
    /// The bytes, and how many of them the socket has taken.
    pending: Mutex<(Vec<u8>, usize)>,
    /// Something was queued; the writer task waits for it.
    queued: tokio::sync::Notify,
    /// The outbox is empty again (or the writer failed): for [`SocketSupervisor::flush`].
    drained: tokio::sync::Notify,
    /// Why writing failed; every later write fails with it.
    failed: Mutex<Option<String>>,
}

impl Outbox {
    fn pending(&self) -> std::sync::MutexGuard<'_, (Vec<u8>, usize)> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_empty(&self) -> bool {
        let p = self.pending();
        p.1 >= p.0.len()
    }

    fn failed(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn fail(&self, why: String) {
        *self.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
        let mut p = self.pending();
        p.0.clear();
        p.1 = 0;
        shrink(&mut p.0);
        drop(p);
        self.drained.notify_waiters();
    }
}

/// Writes as much of `bytes` as the socket takes now; how much that was.
fn write_now(socket: &tokio::net::UnixStream, bytes: &[u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < bytes.len() {
        match socket.try_write(&bytes[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The writer task: sends what [`SocketSupervisor::write`] queued, as the socket takes it. If
/// writing fails the channel is over for the reader too: a request whose frame was queued
/// gets no answer, and its caller must not wait for one.
async fn write_loop(socket: &tokio::net::UnixStream, outbox: &Outbox, inbox: &Inbox) {
    loop {
        outbox.queued.notified().await;
        loop {
            {
                let mut p = outbox.pending();
                let (bytes, sent) = &mut *p;
                if *sent >= bytes.len() {
                    bytes.clear();
                    *sent = 0;
                    shrink(bytes);
                    drop(p);
                    outbox.drained.notify_waiters();
                    break;
                }
                match write_now(socket, &bytes[*sent..]) {
                    Ok(n) => {
                        *sent += n;
                        if *sent >= bytes.len() {
                            continue;
                        }
                    }
                    Err(e) => {
                        drop(p);
                        let why = format!("writing to the supervisor failed: {e}");
                        outbox.fail(why.clone());
                        inbox.stop(why);
                        return;
                    }
                }
            }
            if let Err(e) = socket.writable().await {
                let why = format!("writing to the supervisor failed: {e}");
                outbox.fail(why.clone());
                inbox.stop(why);
                return;
            }
        }
    }
}

impl SocketSupervisor {
    /// Starts reading and writing `channel` on tasks of the current Tokio runtime (an error
    /// outside one). Nothing is written yet: the caller sends [`SocketSupervisor::hello`]
    /// first.
    pub fn new(channel: UnixStream) -> std::io::Result<SocketSupervisor> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| std::io::Error::other(format!("the link needs a Tokio runtime: {e}")))?;
        channel.set_nonblocking(true)?;
        let socket = {
            let _in = runtime.enter();
            Arc::new(tokio::net::UnixStream::from_std(channel)?)
        };
        let (cancel_tx, cancel) = watch::channel(false);
        let (control_tx, control) = mpsc::unbounded_channel();
        let inbox = Arc::new(Inbox {
            waiting: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            buf: Mutex::new(Vec::new()),
            cancel: cancel_tx,
            control: control_tx,
        });
        let outbox = Arc::new(Outbox::default());
        let (reader, reader_inbox) = (Arc::clone(&socket), Arc::clone(&inbox));
        runtime.spawn(async move {
            loop {
                if let Err(e) = reader.readable().await {
                    reader_inbox.stop(FrameError::from(e).to_string());
                    return;
                }
                if !reader_inbox.pump(&reader, false) {
                    return;
                }
            }
        });
        let (writer, task_outbox, task_inbox) =
            (Arc::clone(&socket), Arc::clone(&outbox), Arc::clone(&inbox));
        runtime.spawn(async move { write_loop(&writer, &task_outbox, &task_inbox).await });
        Ok(SocketSupervisor {
            socket,
            inbox,
            outbox,
            frame: RefCell::new(Vec::new()),
            receivers: RefCell::new(HashMap::new()),
            cancel,
            control: tokio::sync::Mutex::new(control),
        })
    }

    /// Writes `frame` now, or queues what the socket does not take for the writer task;
    /// frames leave in the order they were written either way.
    fn write(&self, frame: &AgentFrame) -> Result<(), LinkError> {
        if let Some(why) = self.outbox.failed() {
            return Err(LinkError::Frame(FrameError::Io(std::io::Error::other(why))));
        }
        let mut bytes = self.frame.borrow_mut();
        let encoded = encode_into(&mut bytes, frame);
        let result = match encoded {
            Ok(()) => self.write_encoded(&bytes),
            Err(e) => Err(e.into()),
        };
        bytes.clear();
        shrink(&mut bytes);
        result
    }

    fn write_encoded(&self, bytes: &[u8]) -> Result<(), LinkError> {
        let mut p = self.outbox.pending();
        if p.1 < p.0.len() {
            p.0.extend_from_slice(bytes);
            return Ok(());
        }
        let done = match write_now(&self.socket, bytes) {
            Ok(done) => done,
            Err(e) => {
                drop(p);
                self.outbox.fail(e.to_string());
                return Err(LinkError::Frame(FrameError::Io(e)));
            }
        };
        if done < bytes.len() {
            p.0.clear();
            p.0.extend_from_slice(&bytes[done..]);
            p.1 = 0;
            self.outbox.queued.notify_one();
        }
        Ok(())
    }

    /// Waits until every frame written so far is on the socket (or writing failed): before
    /// the agent ends, so that nothing it wrote is lost with its runtime.
    pub async fn flush(&self) {
        loop {
            let drained = self.outbox.drained.notified();
            if self.outbox.is_empty() || self.outbox.failed().is_some() {
                return;
            }
            drained.await;
        }
    }

    /// Sends `hello` with this build's protocol version.
    pub fn hello(&self) -> Result<(), LinkError> {
        self.write(&AgentFrame::Hello {
            protocol: PROTOCOL_VERSION,
        })
    }

    /// The next frame from the supervisor that is not an answer or a cancel.
    pub async fn next_control(&self) -> Control {
        match self.control.lock().await.recv().await {
            Some(c) => c,
            None => Control::Closed("the reader stopped".into()),
        }
    }

    /// Ends the turn: the last frame of a turn.
    pub fn turn_end(&self, reason: StopReason, usage: Usage) -> Result<(), LinkError> {
        self.write(&AgentFrame::TurnEnd { reason, usage })
    }
}

/// The first complete frame's body in `buf[*at..]`, moving `at` past it; `None` until the
/// whole frame is there. The length is checked against the cap before anything waits for it.
fn take_frame<'b>(buf: &'b [u8], at: &mut usize) -> Result<Option<&'b [u8]>, FrameError> {
    let rest = &buf[*at..];
    let Some(prefix) = rest.first_chunk::<4>() else {
        return Ok(None);
    };
    let len = body_len(*prefix)?;
    let Some(body) = rest.get(4..4 + len) else {
        return Ok(None);
    };
    *at += 4 + len;
    Ok(Some(body))
}

impl Supervisor for SocketSupervisor {
    fn send(&self, id: u64, request: Request) -> Result<(), LinkError> {
        self.send_more(id, request, false)
    }

    fn send_more(&self, id: u64, request: Request, more: bool) -> Result<(), LinkError> {
        let (tx, rx) = oneshot::channel();
        self.inbox.waiting().insert(id, tx);
        if self.inbox.closed.load(Ordering::SeqCst) {
            // The reader may have drained the map before this insert: no answer will come.
            self.inbox.waiting().remove(&id);
            return Err(LinkError::Closed);
        }
        self.receivers.borrow_mut().insert(id, rx);
        if let Err(e) = self.write(&AgentFrame::Request { id, request, more }) {
            self.inbox.waiting().remove(&id);
            self.receivers.borrow_mut().remove(&id);
            return Err(e);
        }
        Ok(())
    }

    fn answer(&self, id: u64) -> impl Future<Output = Result<Answer, LinkError>> {
        let rx = self.receivers.borrow_mut().remove(&id);
        async move {
            match rx {
                Some(rx) => rx.await.map_err(|_| LinkError::Closed),
                None => Err(LinkError::Closed),
            }
        }
    }

    fn ui(&self, event: UiEvent) {
        // Display only: a failed write shows up as a closed channel on the next request.
        let _ = self.write(&AgentFrame::Ui { event });
    }

    fn cancelled(&self) -> impl Future<Output = ()> {
        let mut rx = self.cancel.clone();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    fn is_cancelled(&self) -> bool {
        // What the socket already holds first: the reader task runs only when the loop
        // awaits, and a cancel read late would let one more model request go out.
        self.inbox.pump(&self.socket, true);
        *self.cancel.borrow()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use garuda_ipc::{read_frame, write_frame};

    /// The supervisor's end: reads `n` requests, then answers them in reverse order, then
    /// sends a cancel and, once `go` says so, a prompt; returns the ids in the order it read
    /// them, and its end of the channel (still open).
    fn fake_supervisor(
        mut s: UnixStream,
        n: usize,
        go: std::sync::mpsc::Receiver<()>,
    ) -> std::thread::JoinHandle<(Vec<u64>, UnixStream)> {
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            while ids.len() < n {
                let body = read_frame(&mut s).unwrap().unwrap();
                if let AgentFrame::Request { id, .. } = decode::<AgentFrame>(&body).unwrap() {
                    ids.push(id);
                }
            }
            for &id in ids.iter().rev() {
                let answer = Answer::Paths {
                    paths: vec![format!("answer-{id}")],
                    truncated: false,
                };
                write_frame(&mut s, &SupervisorFrame::Answer { id, answer }).unwrap();
            }
            write_frame(&mut s, &SupervisorFrame::Cancel).unwrap();
            go.recv().unwrap();
            write_frame(
                &mut s,
                &SupervisorFrame::UserPrompt {
                    text: "next".into(),
                },
            )
            .unwrap();
            (ids, s)
        })
    }

    #[tokio::test]
    async fn answers_are_matched_by_id_whatever_their_order() {
        let (agent, sup) = UnixStream::pair().unwrap();
        let (go, wait) = std::sync::mpsc::channel();
        let fake = fake_supervisor(sup, 3, wait);
        let link = SocketSupervisor::new(agent).unwrap();
        for id in [10, 11, 12] {
            link.send(
                id,
                Request::Glob {
                    pattern: "*".into(),
                    path: None,
                },
            )
            .unwrap();
        }
        // Awaited in call order although they arrive reversed.
        for id in [10, 11, 12] {
            match link.answer(id).await.unwrap() {
                Answer::Paths { paths, .. } => assert_eq!(paths, [format!("answer-{id}")]),
                other => panic!("{other:?}"),
            }
        }
        // A cancel between turns is seen…
        link.cancelled().await;
        assert!(link.is_cancelled());
        go.send(()).unwrap();
        let (ids, end) = fake.join().unwrap();
        assert_eq!(ids, [10, 11, 12]);
        assert_eq!(
            link.next_control().await,
            Control::UserPrompt("next".into())
        );
        // …and cleared by the next prompt.
        assert!(!link.is_cancelled());
        drop(end);
        // The fake closed its end: the reader says so, cancels, and no answer can come.
        assert!(matches!(link.next_control().await, Control::Closed(_)));
        assert!(link.is_cancelled());
        let sent = link.send(
            13,
            Request::Glob {
                pattern: "*".into(),
                path: None,
            },
        );
        assert!(matches!(sent, Err(LinkError::Closed)), "{sent:?}");
    }

    /// A frame far larger than the socket's buffer leaves while an answer just as large
    /// comes in: the supervisor's end writes its whole answer before it reads on. A loop that
    /// blocked its thread writing would stop its own reader, and both ends would wait on each
    /// other for ever (the timeout turns that into a failure).
    #[tokio::test]
    async fn a_large_frame_goes_out_while_a_large_answer_comes_in() {
        const BIG: usize = 3 << 20;
        let (agent, mut sup) = UnixStream::pair().unwrap();
        let fake = std::thread::spawn(move || {
            let body = read_frame(&mut sup).unwrap().unwrap();
            let AgentFrame::Request { id: 1, .. } = decode::<AgentFrame>(&body).unwrap() else {
                panic!("not request 1");
            };
            let answer = Answer::Paths {
                paths: vec!["a".repeat(BIG)],
                truncated: false,
            };
            write_frame(&mut sup, &SupervisorFrame::Answer { id: 1, answer }).unwrap();
            let body = read_frame(&mut sup).unwrap().unwrap();
            let AgentFrame::Request { id: 2, request, .. } = decode::<AgentFrame>(&body).unwrap()
            else {
                panic!("not request 2");
            };
            let Request::WriteFile { content, .. } = request else {
                panic!("{request:?}");
            };
            let answer = Answer::Paths {
                paths: vec![content.len().to_string()],
                truncated: false,
            };
            write_frame(&mut sup, &SupervisorFrame::Answer { id: 2, answer }).unwrap();
            sup
        });
        let link = SocketSupervisor::new(agent).unwrap();
        let glob = Request::Glob {
            pattern: "*".into(),
            path: None,
        };
        link.send(1, glob).unwrap();
        let write = Request::WriteFile {
            path: "big".into(),
            content: "b".repeat(BIG),
        };
        link.send(2, write).unwrap();
        let answers = async {
            let first = link.answer(1).await.unwrap();
            let second = link.answer(2).await.unwrap();
            (first, second)
        };
        let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(30), answers)
            .await
            .expect("the two ends waited on each other");
        assert!(matches!(first, Answer::Paths { paths, .. } if paths[0].len() == BIG));
        assert!(matches!(second, Answer::Paths { paths, .. } if paths[0] == BIG.to_string()));
        link.flush().await;
        drop(fake.join().unwrap());
    }

    /// A cancel that arrived while the loop was busy (it has not awaited since) is seen when
    /// the loop asks, before it calls the model again: the reader task alone would run only
    /// at the loop's next await, after that call went out.
    #[tokio::test]
    async fn a_cancel_that_came_while_the_loop_was_busy_is_seen_at_once() {
        let (agent, mut sup) = UnixStream::pair().unwrap();
        let link = SocketSupervisor::new(agent).unwrap();
        let prompt = SupervisorFrame::UserPrompt { text: "go".into() };
        write_frame(&mut sup, &prompt).unwrap();
        assert_eq!(link.next_control().await, Control::UserPrompt("go".into()));
        // No await from here on: the runtime does not run the reader task.
        write_frame(&mut sup, &SupervisorFrame::Cancel).unwrap();
        assert!(link.is_cancelled(), "a cancel on the socket was not seen");
        drop(sup);
    }

    #[tokio::test]
    async fn a_cancel_right_behind_the_prompt_is_kept_for_that_turn() {
        // Ctrl-C as the turn starts: the reader has read both frames before the loop takes
        // the prompt. The cancel is this turn's (the reverse order, a cancel between turns,
        // is cleared: the test above). `agent/tests/serve.rs` shows it through `run`.
        let (agent, mut sup) = UnixStream::pair().unwrap();
        let link = SocketSupervisor::new(agent).unwrap();
        let prompt = SupervisorFrame::UserPrompt { text: "go".into() };
        write_frame(&mut sup, &prompt).unwrap();
        write_frame(&mut sup, &SupervisorFrame::Cancel).unwrap();
        assert_eq!(link.next_control().await, Control::UserPrompt("go".into()));
        // A timeout only turns a hang (the cancel lost) into a failure.
        tokio::time::timeout(std::time::Duration::from_secs(20), link.cancelled())
            .await
            .expect("the cancel behind the prompt was lost");
        assert!(link.is_cancelled());
        drop(sup);
    }
}
