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
    decode, read_frame, write_frame, AgentFrame, Answer, FrameError, Request, Start, StopReason,
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

/// What the reader thread and the loop share.
#[derive(Debug, Default)]
struct Shared {
    /// Open requests: the answer goes to the sender.
    waiting: Mutex<HashMap<u64, oneshot::Sender<Answer>>>,
    /// The reader has stopped; no answer will come.
    closed: AtomicBool,
}

impl Shared {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answer>>> {
        // A panic elsewhere while holding the lock leaves the map usable.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The real link: frames over the socket pair with `garuda_ipc`'s codec. Writes happen on
/// the loop's thread (blocking, one whole frame at a time); one reader thread reads every
/// frame from the supervisor and hands answers to their waiters by id, cancels to the cancel
/// flag, and the rest to [`SocketSupervisor::next_control`].
#[derive(Debug)]
pub struct SocketSupervisor {
    writer: RefCell<UnixStream>,
    shared: Arc<Shared>,
    receivers: RefCell<HashMap<u64, oneshot::Receiver<Answer>>>,
    /// Set and cleared by the reader only (the sender is its own), in frame order.
    cancel: watch::Receiver<bool>,
    control: tokio::sync::Mutex<mpsc::UnboundedReceiver<Control>>,
}

impl SocketSupervisor {
    /// Starts reading `channel` on a thread of its own. Nothing is written yet: the caller
    /// sends [`SocketSupervisor::hello`] first.
    pub fn new(channel: UnixStream) -> std::io::Result<SocketSupervisor> {
        let mut reader = channel.try_clone()?;
        let shared = Arc::new(Shared::default());
        let (cancel_tx, cancel) = watch::channel(false);
        let (control_tx, control) = mpsc::unbounded_channel();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("garuda-agent-reader".into())
            .spawn(move || {
                let why = read_loop(&mut reader, &thread_shared, &cancel_tx, &control_tx);
                // Closed before the waiters go, so that a request registered after the drain
                // sees the flag (see `send`).
                thread_shared.closed.store(true, Ordering::SeqCst);
                thread_shared.waiting().clear();
                // A turn in progress stops: nothing it asks can be answered any more.
                cancel_tx.send_replace(true);
                let _ = control_tx.send(Control::Closed(why));
            })?;
        Ok(SocketSupervisor {
            writer: RefCell::new(channel),
            shared,
            receivers: RefCell::new(HashMap::new()),
            cancel,
            control: tokio::sync::Mutex::new(control),
        })
    }

    fn write(&self, frame: &AgentFrame) -> Result<(), LinkError> {
        let mut w = self.writer.borrow_mut();
        write_frame(&mut *w, frame)?;
        Ok(())
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

/// The reader thread's loop; returns why it stopped.
fn read_loop(
    reader: &mut UnixStream,
    shared: &Shared,
    cancel: &watch::Sender<bool>,
    control: &mpsc::UnboundedSender<Control>,
) -> String {
    loop {
        let body = match read_frame(reader) {
            Ok(Some(body)) => body,
            Ok(None) => return "the supervisor closed the channel".into(),
            Err(e) => return e.to_string(),
        };
        let frame = match decode::<SupervisorFrame>(&body) {
            Ok(f) => f,
            Err(e) => return e.to_string(),
        };
        match frame {
            SupervisorFrame::Answer { id, answer } => {
                // An answer nobody waits for (its turn was cancelled) is dropped.
                if let Some(tx) = shared.waiting().remove(&id) {
                    let _ = tx.send(answer);
                }
            }
            SupervisorFrame::Cancel => {
                cancel.send_replace(true);
            }
            SupervisorFrame::Start(start) => {
                let _ = control.send(Control::Start(Box::new(start)));
            }
            SupervisorFrame::UserPrompt { text } => {
                // A new turn. A cancel read before its prompt was for no turn (a Ctrl-C
                // between turns) and is cleared; one read after it is this turn's and stays.
                // Cleared here, in frame order: the loop clearing it once it has taken the
                // prompt would also lose a cancel that came right behind the prompt.
                cancel.send_replace(false);
                let _ = control.send(Control::UserPrompt(text));
            }
            SupervisorFrame::Shutdown => {
                let _ = control.send(Control::Shutdown);
                return "the supervisor ended the session".into();
            }
        }
    }
}

impl Supervisor for SocketSupervisor {
    fn send(&self, id: u64, request: Request) -> Result<(), LinkError> {
        self.send_more(id, request, false)
    }

    fn send_more(&self, id: u64, request: Request, more: bool) -> Result<(), LinkError> {
        let (tx, rx) = oneshot::channel();
        self.shared.waiting().insert(id, tx);
        if self.shared.closed.load(Ordering::SeqCst) {
            // The reader may have drained the map before this insert: no answer will come.
            self.shared.waiting().remove(&id);
            return Err(LinkError::Closed);
        }
        self.receivers.borrow_mut().insert(id, rx);
        if let Err(e) = self.write(&AgentFrame::Request { id, request, more }) {
            self.shared.waiting().remove(&id);
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
        *self.cancel.borrow()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
