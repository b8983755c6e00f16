//! The per-project index: `index.jsonl`, one MACed line per session start and close.
//!
//! Lines have the log line format (`seq` counts index lines, `epoch` is always 0, `prev`
//! chains the index). Each line is MACed under the index key of the session its event names,
//! so a running writer can forge entries only for its own session.
//!
//! Order of writes, chosen so a crash never looks like tampering:
//! 1. `start` entry (synced) — *before* the session file exists;
//! 2. the session file and its first line (synced);
//! 3. ... the session ...
//! 4. final seal, checkpoint, then the `close` entry.
//!
//! So a session file without a `start` entry means the index lost lines (tampering), while a
//! `start` entry without a file is a crash between steps 1 and 2 or a deletion (undecidable,
//! unless a `close` entry or a later session says the file had lines).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::AuditError;
use crate::events::{IndexCloseEvent, IndexStartEvent, INDEX_CLOSE, INDEX_START};
use crate::keys::MacKey;
use crate::layout::{split_lines, INDEX_FILE};
use crate::line::{self, NewLine};
use crate::util::{now_ms, sha256, Hash, ZERO_HASH};
use crate::{fsx, json};

/// The event of an index line.
#[derive(Debug, Clone)]
pub(crate) enum IndexEvent {
    Start(IndexStartEvent),
    Close(IndexCloseEvent),
}

impl IndexEvent {
    pub(crate) fn session(&self) -> &str {
        match self {
            IndexEvent::Start(s) => &s.session,
            IndexEvent::Close(c) => &c.session,
        }
    }
}

/// Parses an index event by its line type, strictly (duplicate keys, unknown fields refused).
pub(crate) fn parse_event(kind: &str, event: &[u8]) -> Result<IndexEvent, String> {
    let v = json::parse(event)?;
    match kind {
        INDEX_START => serde_json::from_value(v)
            .map(IndexEvent::Start)
            .map_err(|e| e.to_string()),
        INDEX_CLOSE => serde_json::from_value(v)
            .map(IndexEvent::Close)
            .map_err(|e| e.to_string()),
        other => Err(format!("unknown index line type {other:?}")),
    }
}

/// The index, opened for appending and locked (`flock`, exclusive) until dropped.
pub(crate) struct LockedIndex {
    file: File,
    path: PathBuf,
    next_seq: u64,
    prev: Hash,
    /// Events of the complete lines, read without checking MACs (the writer records what it
    /// finds; verify judges it).
    pub events: Vec<IndexEvent>,
    /// The complete lines as read (before anything is appended).
    pub data: Vec<u8>,
}

impl LockedIndex {
    /// Opens (creating) and locks the index, and reads it. A torn last line (a writer died in
    /// the middle of an append) is cut off: it holds no complete entry, and appending after it
    /// would glue two entries into one malformed line.
    pub(crate) fn open(dir: &Path, uid: u32, sync: bool) -> Result<Self, AuditError> {
        Self::open_path(dir.join(INDEX_FILE), uid, sync)
    }

    /// Like [`Self::open`] for any file of index-format lines (the register).
    pub(crate) fn open_path(path: PathBuf, uid: u32, sync: bool) -> Result<Self, AuditError> {
        let mut file = fsx::open_append(&path, uid)?;
        file.lock().map_err(|e| AuditError::io(&path, e))?;
        let mut data = Vec::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_end(&mut data))
            .map_err(|e| AuditError::io(&path, e))?;
        let (lines, torn) = split_lines(&data);
        if let Some((offset, _)) = torn {
            file.set_len(offset).map_err(|e| AuditError::io(&path, e))?;
            if sync {
                file.sync_data().map_err(|e| AuditError::io(&path, e))?;
            }
        }
        let mut events = Vec::new();
        for (_, l) in &lines {
            let Some((prefix, _)) = line::split_mac(l) else {
                continue;
            };
            let Some(h) = line::parse_header(prefix) else {
                continue;
            };
            if let Ok(ev) = parse_event(h.kind, h.event) {
                events.push(ev);
            }
        }
        Ok(LockedIndex {
            file,
            path,
            next_seq: lines.len() as u64,
            prev: lines.last().map_or(ZERO_HASH, |(_, l)| sha256(l)),
            events,
            data: lines.last().map_or(Vec::new(), |(o, l)| {
                data[..*o as usize + l.len() + 1].to_vec()
            }),
        })
    }

    /// Number of lines (the `seq` the next entry gets).
    pub(crate) fn lines(&self) -> u64 {
        self.next_seq
    }

    /// SHA-256 of the last line (zeros for none).
    pub(crate) fn head(&self) -> Hash {
        self.prev
    }

    /// Appends one entry, MACed under `key`, and syncs it when `sync`.
    pub(crate) fn append(
        &mut self,
        kind: &str,
        event: &Value,
        key: &MacKey,
        sync: bool,
    ) -> Result<(), AuditError> {
        let mut buf = Vec::new();
        line::build(
            &mut buf,
            &NewLine {
                seq: self.next_seq,
                epoch: 0,
                time_ms: now_ms(),
                prev: &self.prev,
                kind,
                event,
            },
            key.bytes(),
        )
        .map_err(|e| AuditError::Format {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        self.file
            .write_all(&buf)
            .map_err(|e| AuditError::io(&self.path, e))?;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| AuditError::io(&self.path, e))?;
        }
        self.prev = sha256(&buf[..buf.len() - 1]);
        self.next_seq += 1;
        Ok(())
    }
}

impl Drop for LockedIndex {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// An old-layout index read (not locked, not written: the journal layout never writes it).
pub(crate) struct ReadIndex {
    /// Events of the complete lines (MACs not checked).
    pub events: Vec<IndexEvent>,
    /// The complete lines' bytes.
    pub data: Vec<u8>,
    /// Number of complete lines.
    pub lines: u64,
    /// SHA-256 of the last complete line.
    pub head: Hash,
    /// Latest time a line claims.
    pub last_time_ms: Option<u64>,
}

impl ReadIndex {
    pub(crate) fn read(path: &Path, uid: u32) -> Result<Self, AuditError> {
        let data = fsx::read_private(path, uid)?.unwrap_or_default();
        let (lines, _) = split_lines(&data);
        let mut events = Vec::new();
        let mut last_time_ms = None;
        for (_, l) in &lines {
            let Some((prefix, _)) = line::split_mac(l) else {
                continue;
            };
            let Some(h) = line::parse_header(prefix) else {
                continue;
            };
            last_time_ms = last_time_ms.max(crate::util::parse_time(h.time));
            if let Ok(ev) = parse_event(h.kind, h.event) {
                events.push(ev);
            }
        }
        let end = lines.last().map_or(0, |(o, l)| *o as usize + l.len() + 1);
        Ok(ReadIndex {
            events,
            lines: lines.len() as u64,
            head: lines.last().map_or(ZERO_HASH, |(_, l)| sha256(l)),
            data: data[..end].to_vec(),
            last_time_ms,
        })
    }
}
