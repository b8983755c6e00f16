//! An idle timeout around a byte stream.
//!
//! A connection that neither reads nor writes for the idle time fails with
//! [`io::ErrorKind::TimedOut`], which ends the HTTP connection or the tunnel that uses it.
//! Without it a command could park thousands of silent connections (or one that never sends
//! its headers) and hold the proxy's slots and descriptors forever.
//!
//! Any progress in either direction counts as activity, so a long download through a tunnel
//! whose client never writes stays alive. Activity only stores an instant; the timer is
//! re-armed lazily when it fires early, which keeps the hot path free of timer operations.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// `inner`, failing with `TimedOut` after `timeout` without progress.
pub(crate) struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    last_activity: Instant,
    timer: Pin<Box<Sleep>>,
}

impl<S> IdleTimeout<S> {
    pub(crate) fn new(inner: S, timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            inner,
            timeout,
            last_activity: now,
            timer: Box::pin(tokio::time::sleep_until(now + timeout)),
        }
    }

    fn touch(&mut self) {
        self.last_activity = Instant::now();
    }

    /// Called when the inner stream is not ready: `Ready(Err)` once the connection has been
    /// idle for the whole timeout, else `Pending` with the timer armed.
    fn poll_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let deadline = self.last_activity + self.timeout;
            if Instant::now() >= deadline {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for too long",
                )));
            }
            // Activity since the timer was armed: re-arm and poll again to register the waker.
            self.timer.as_mut().reset(deadline);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.touch();
                Poll::Ready(result)
            }
            Poll::Pending => this.poll_idle(cx),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.touch();
                Poll::Ready(result)
            }
            Poll::Pending => this.poll_idle(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.touch();
                Poll::Ready(result)
            }
            Poll::Pending => this.poll_idle(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => this.poll_idle(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_shutdown(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => this.poll_idle(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_silent_stream_times_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut idle = IdleTimeout::new(a, Duration::from_secs(5));
        let mut buf = [0u8; 8];
        let started = Instant::now();
        let err = idle.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn activity_in_either_direction_keeps_it_alive() {
        let (a, _peer) = tokio::io::duplex(1 << 16);
        let idle = IdleTimeout::new(a, Duration::from_secs(5));
        let (mut reader, mut writer) = tokio::io::split(idle);
        let started = Instant::now();
        // Nothing ever arrives to read, but writes every 3 s for 12 s keep the stream alive:
        // the pending read fails only 5 s after the last write.
        let read = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            let err = reader.read(&mut buf).await.unwrap_err();
            (err.kind(), started.elapsed())
        });
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            writer.write_all(b"x").await.unwrap();
        }
        let (kind, elapsed) = read.await.unwrap();
        assert_eq!(kind, io::ErrorKind::TimedOut);
        assert!(elapsed >= Duration::from_secs(17), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(18), "{elapsed:?}");
    }
}
