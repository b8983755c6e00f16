//! Capturing a command's output with a hard cap, and waiting for `std` children.
//!
//! The supervisor's memory must not grow with what a command prints: each stream keeps at most
//! `cap` bytes and then only counts, reading through a fixed buffer, so a command that writes
//! a gigabyte costs the supervisor the cap and one buffer.

use std::io::Read;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Captured, ExecError, ExitStatus};

/// Marker appended to a capped stream.
pub fn truncation_marker(dropped: u64) -> String {
    format!("\n[garuda: output truncated: {dropped} more bytes not shown]\n")
}

/// Read `reader` to its end, keeping the first `cap` bytes.
pub fn read_capped(mut reader: impl Read, cap: usize) -> std::io::Result<Captured> {
    let mut kept = Vec::with_capacity(cap.min(64 * 1024));
    let mut dropped: u64 = 0;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let room = cap.saturating_sub(kept.len());
        let take = room.min(n);
        kept.extend_from_slice(&buf[..take]);
        dropped += (n - take) as u64;
    }
    if dropped > 0 {
        kept.extend_from_slice(truncation_marker(dropped).as_bytes());
    }
    Ok(Captured {
        bytes: kept,
        dropped,
    })
}

/// Start a thread that captures `reader`.
pub fn spawn_reader<R: Read + Send + 'static>(
    reader: R,
    cap: usize,
) -> JoinHandle<std::io::Result<Captured>> {
    std::thread::spawn(move || read_capped(reader, cap))
}

/// Join a reader thread.
pub fn join_reader(
    handle: Option<JoinHandle<std::io::Result<Captured>>>,
) -> Result<Captured, ExecError> {
    match handle {
        None => Ok(Captured::default()),
        Some(h) => h
            .join()
            .map_err(|_| ExecError::Io {
                what: "output reader thread panicked",
                error: std::io::Error::other("panic"),
            })?
            .map_err(|source| ExecError::Io {
                what: "reading command output",
                error: source,
            }),
    }
}

/// Map a `std` exit status.
pub fn map_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitStatus::Code(c),
        (None, Some(s)) => ExitStatus::Signal(s),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// Wait for a `std` child with an optional timeout. On timeout the child is killed with
/// `kill_group` (its process group, when the caller made one) or `SIGKILL` to the child.
pub fn wait_child(
    child: &mut std::process::Child,
    timeout: Option<Duration>,
    kill_group: bool,
) -> Result<ExitStatus, ExecError> {
    wait_child_serving(child, timeout, kill_group, None)
}

/// [`wait_child`], answering `serving`'s descriptors meanwhile (the resolver stub: see
/// [`crate::sys::WhileWaiting`]).
pub fn wait_child_serving(
    child: &mut std::process::Child,
    timeout: Option<Duration>,
    kill_group: bool,
    serving: Option<&mut dyn crate::sys::WhileWaiting>,
) -> Result<ExitStatus, ExecError> {
    let io = |source| ExecError::Io {
        what: "waiting for the command",
        error: source,
    };
    let pid = child.id() as libc::pid_t;
    let target = if kill_group { -pid } else { pid };
    // Wait for the exit without reaping: while the child is a zombie its pid (and process
    // group id) cannot be reused, so the signal forwarding is cleared and the group killed
    // before anything could take them over.
    let exited = crate::sys::wait_exited_serving(pid, timeout, serving).map_err(io)?;
    if !exited {
        let _ = crate::sys::kill(target, libc::SIGKILL);
        crate::sys::wait_exited(pid, None).map_err(io)?;
    }
    crate::sys::forward_signals_to(0);
    if kill_group {
        // Whatever the command left running in its group ends with it.
        let _ = crate::sys::kill(-pid, libc::SIGKILL);
    }
    let status = child.wait().map_err(io)?;
    Ok(if exited {
        map_status(status)
    } else {
        ExitStatus::TimedOut
    })
}

/// Wait for a `std` child and collect its capped output (the child must have been spawned with
/// piped stdout and stderr).
pub fn capture_child(
    mut child: std::process::Child,
    cap: usize,
    timeout: Option<Duration>,
) -> Result<(ExitStatus, Captured, Captured), ExecError> {
    let out = child.stdout.take().map(|s| spawn_reader(s, cap));
    let err = child.stderr.take().map(|s| spawn_reader(s, cap));
    let status = wait_child(&mut child, timeout, false)?;
    Ok((status, join_reader(out)?, join_reader(err)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_counts() {
        let data = vec![b'x'; 100_000];
        let c = read_capped(&data[..], 1000).unwrap();
        assert_eq!(c.dropped, 99_000);
        assert!(c.bytes.starts_with(&[b'x'; 1000]));
        assert!(c
            .text()
            .ends_with("[garuda: output truncated: 99000 more bytes not shown]\n"));
    }

    #[test]
    fn under_cap_is_untouched() {
        let c = read_capped(&b"hello"[..], 1000).unwrap();
        assert_eq!(c.bytes, b"hello");
        assert_eq!(c.dropped, 0);
    }
}
