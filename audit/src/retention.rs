//! Retention: the oldest sessions of a journal lane are pruned, and leave their sealed head.
//!
//! A closing session whose lane holds at least `prune_batch` sessions that retention lets go
//! (older than `days` and beyond the newest `sessions`, whichever keeps more) rewrites the lane:
//! a new journal whose first line is a `pruned` record, MACed under the pruning session's index
//! key, followed byte for byte by the sessions kept. The record names the last pruned session's
//! end (its id, line count and final line hash), which is exactly what the first kept session's
//! first line already attests (`prev_session`) and chains to (`prev`): verify links the kept
//! sessions to it and reports the pruned range as PRUNED (a warning), not as a missing session.
//! Counts and times are cumulative over every prune of the lane.
//!
//! The new journal is written to a temporary file that is locked before it gets the journal's
//! name (so no other writer can take the lane in between), synced, and renamed over the old one.

use std::io::Write;
use std::path::Path;

use crate::error::AuditError;
use crate::events::{
    head_hex, ArchiveRef, Attest, AttestState, PrunedEvent, Retention, KIND_PRUNED,
};
use crate::fsx;
use crate::journal::{self, segments};
use crate::keys::MacKey;
use crate::layout::split_lines;
use crate::line;
use crate::util::{format_time, now_ms, parse_time, sha256};

/// What a rewrite of the lane does with the sessions it takes out of the journal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// Retention: the due sessions are dropped, once at least a batch of them is due. Archives
    /// of the lane (all older than what is dropped) go with them.
    Prune(Retention),
    /// Every session before the closing one is moved into a new archive (`archive.rs`).
    Archive,
}

/// What the writer gives.
pub(crate) struct PruneArgs<'a> {
    pub dir: &'a Path,
    pub lane: u64,
    pub path: &'a Path,
    pub file: &'a std::fs::File,
    pub uid: u32,
    pub fsync: bool,
    pub mode: Mode,
    pub batch: u64,
    pub by: &'a str,
    pub key_id: &'a str,
    pub index_key: &'a MacKey,
}

/// The lane after a prune: its new file (locked), length, line count, last line's offset.
pub(crate) struct Pruned {
    pub file: std::fs::File,
    pub bytes: u64,
    pub lines: u64,
    pub last_at: u64,
    /// Sessions kept.
    pub sessions: u64,
}

fn line_kind_time(bytes: &[u8]) -> Option<(String, u64)> {
    let (prefix, _) = line::split_mac(bytes)?;
    let h = line::parse_header(prefix)?;
    Some((h.kind.to_string(), parse_time(h.time)?))
}

/// Prunes the lane if enough sessions are due, or archives every session before the closing
/// one. `None`: nothing done.
pub(crate) fn prune_if_due(a: &PruneArgs<'_>) -> Result<Option<Pruned>, AuditError> {
    let r = match a.mode {
        Mode::Prune(r) => r,
        Mode::Archive => Retention::default(),
    };
    let archiving = matches!(a.mode, Mode::Archive);
    if !archiving && r.days.is_none() && r.sessions.is_none() {
        return Ok(None);
    }
    let size = a
        .file
        .metadata()
        .map_err(|e| AuditError::io(a.path, e))?
        .len();
    let data = journal::read_from(a.file, a.path, 0, size)?;
    let segs = segments(&data);
    let mut earlier: Option<PrunedEvent> = None;
    let mut sessions = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if s.session.is_empty() {
            if i == 0 {
                let first = s.data.split(|&c| c == b'\n').next().unwrap_or(b"");
                earlier = line::split_mac(first)
                    .and_then(|(p, _)| line::parse_header(p))
                    .filter(|h| h.kind == KIND_PRUNED)
                    .and_then(|h| crate::json::parse(h.event).ok())
                    .and_then(|v| serde_json::from_value(v).ok());
                if earlier.is_none() {
                    // Not a journal this writer can prune safely: leave it to verify.
                    return Ok(None);
                }
            }
            continue;
        }
        sessions.push(s);
    }
    // Never the pruning session itself (the newest).
    let n = sessions.len().saturating_sub(1);
    let keep_newest = usize::try_from(r.sessions.unwrap_or(0)).unwrap_or(usize::MAX);
    let cutoff = r
        .days
        .map(|d| now_ms().saturating_sub(d.saturating_mul(86_400_000)));
    let mut due = 0usize;
    for (i, s) in sessions.iter().take(n).enumerate() {
        if archiving {
            due = n;
            break;
        }
        if r.sessions.is_some() && i + keep_newest >= n {
            break;
        }
        if let Some(cutoff) = cutoff {
            let (lines, _) = split_lines(s.data);
            let end = lines
                .last()
                .and_then(|(_, l)| line_kind_time(l))
                .map(|x| x.1);
            if end.is_none_or(|t| t >= cutoff) {
                break;
            }
        }
        due = i + 1;
    }
    if (!archiving && (due as u64) < a.batch) || due == 0 {
        return Ok(None);
    }
    let last = sessions[due - 1];
    let (last_lines, _) = split_lines(last.data);
    let last_closed = {
        let k = |i: usize| {
            last_lines
                .get(i)
                .and_then(|(_, l)| line_kind_time(l))
                .map(|x| x.0)
        };
        let m = last_lines.len();
        m >= 2
            && k(m - 1).as_deref() == Some(crate::events::KIND_SEAL)
            && k(m - 2).as_deref() == Some(crate::events::KIND_END)
    };
    let last_head = last_lines
        .last()
        .map_or(crate::util::ZERO_HASH, |(_, l)| sha256(l));
    let keep_from = sessions[due].offset as usize;
    let pruned_part = &data[..keep_from];
    let pruned_lines = split_lines(pruned_part).0.len() as u64;
    let first_time = {
        let first = sessions[0]
            .data
            .split(|&c| c == b'\n')
            .next()
            .unwrap_or(b"");
        line_kind_time(first).map_or(0, |x| x.1)
    };
    let to_time = last_lines
        .last()
        .and_then(|(_, l)| line_kind_time(l))
        .map_or(0, |x| x.1);
    let (prev_count, prev_lines, prev_bytes, first, from_time) = match &earlier {
        // The earlier record is one of the lines pruned now: not counted as a session line.
        Some(e) => (
            e.sessions,
            e.journal_lines
                .saturating_add(pruned_lines)
                .saturating_sub(1),
            e.journal_bytes
                .saturating_add(pruned_part.len() as u64)
                .saturating_sub(segs[0].data.len() as u64),
            e.first.clone(),
            e.from_time.clone(),
        ),
        None => (
            0,
            pruned_lines,
            pruned_part.len() as u64,
            sessions[0].session.clone(),
            format_time(first_time),
        ),
    };
    let archive = if archiving {
        let seq = earlier
            .as_ref()
            .and_then(|e| e.archive.as_ref())
            .map_or(0, |x| x.seq.saturating_add(1));
        crate::archive::write(a.dir, a.lane, seq, pruned_part, a.uid, a.fsync)?;
        Some(ArchiveRef {
            seq,
            bytes: pruned_part.len() as u64,
            lines: pruned_lines,
            sha256: head_hex(&sha256(pruned_part)),
        })
    } else {
        None
    };
    let ev = PrunedEvent {
        by: a.by.to_string(),
        key_id: a.key_id.to_string(),
        sessions: prev_count.saturating_add(due as u64),
        first,
        last: Attest {
            session: last.session.clone(),
            state: if last_closed {
                AttestState::Closed
            } else {
                AttestState::Recovered
            },
            lines: last_lines.len() as u64,
            head: head_hex(&last_head),
        },
        journal_lines: prev_lines,
        journal_bytes: prev_bytes,
        from_time,
        to_time: format_time(to_time),
        retention: r,
        archive,
    };
    let record = line::record(
        a.path,
        &last_head,
        KIND_PRUNED,
        &serde_json::to_value(&ev).unwrap_or(serde_json::Value::Null),
        a.index_key,
    )?;
    let kept = &data[keep_from..];
    let tmp = a
        .dir
        .join(format!(".{}.prune.tmp", journal::journal_file_name(a.lane)));
    // One left by a crash during an earlier prune is replaced.
    let mut out = fsx::create_temp(&tmp, a.uid)?;
    // Locked before it has the journal's name: no other writer can take the lane meanwhile.
    out.lock().map_err(|e| AuditError::io(&tmp, e))?;
    let mut all = Vec::with_capacity(record.len() + kept.len());
    all.extend_from_slice(&record);
    all.extend_from_slice(kept);
    out.write_all(&all).map_err(|e| AuditError::io(&tmp, e))?;
    if a.fsync {
        out.sync_all().map_err(|e| AuditError::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, a.path).map_err(|e| AuditError::io(a.path, e))?;
    if a.fsync {
        fsx::fsync_dir(a.dir)?;
    }
    if !archiving {
        // The lane's archives held sessions older than those pruned now: no record names
        // them any more. A file left behind (an error here) is named by nothing and verify
        // only checks its mode.
        remove_archives(a.dir, a.lane);
    }
    let (lines, _) = split_lines(&all);
    Ok(Some(Pruned {
        file: out,
        bytes: all.len() as u64,
        lines: lines.len() as u64,
        last_at: lines.last().map_or(0, |(o, _)| *o),
        sessions: (sessions.len() - due) as u64,
    }))
}

/// Removes every archive file of `lane` in `dir` (after a prune made them unnamed).
fn remove_archives(dir: &Path, lane: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let is_ours = name
            .to_str()
            .and_then(crate::archive::parse_archive_name)
            .is_some_and(|(l, _)| l == lane);
        if is_ours {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
