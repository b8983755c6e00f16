//! The journal layout: the sessions of a project, one after the other, in one append-only file
//! per *lane*, and small MACed tail states that let a writer start without reading history.
//!
//! ```text
//! <audit_root>/<project-name>-<hash16>/
//!   journal.jsonl        lane 0: every session's lines, in the line format, back to back
//!   journal.ckpt         the checkpoint the lane's newest publishing session wrote last
//!   journal.tail         the lane's tail state: length, line count, last line, last session
//!   journal.<n>.jsonl    lane n: used only while lanes 0..n are held by running sessions
//!   (old layout, read only: index.jsonl, <session>.jsonl, <session>.ckpt)
//! <garuda_home>/audit.register.jsonl   one line per session close (and per project creation)
//! <garuda_home>/audit.register.tail    the register's tail state, with each lane's last record
//! ```
//!
//! A session holds its lane's `flock` from `open` to `close`, so a lane's sessions never
//! interleave: a lane is the concatenation of its sessions' files as the old layout wrote them,
//! each session's first line chained (`prev`, `prev_session`) to the final line of the one
//! before it. A second session running at the same time takes the next free lane.
//!
//! Tail states are single lines in the line format (`type` `tail` or `register_tail`), MACed
//! under the index key of the session that wrote them (lane) or the install-wide register tail
//! key (register), and written in place without a sync: a stale, torn or missing tail only sends the next writer
//! down the slow path (reading the whole file), never to a wrong conclusion, because the tail is
//! checked against the file's last line before it is believed. Verify reads every line anyway.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::AuditError;
use crate::events::KIND_START;
use crate::fsx;
use crate::keys::MacKey;
use crate::layout::split_lines;
use crate::line::{self, MAX_LINE_BYTES};
use crate::util::Hash;

/// How many lanes a project may have: sessions running at the same time in one project.
pub(crate) const MAX_LANES: u64 = 64;

/// The file name stem of a lane: `journal` for lane 0, `journal.<n>` after.
pub(crate) fn lane_stem(lane: u64) -> String {
    if lane == 0 {
        "journal".to_string()
    } else {
        format!("journal.{lane}")
    }
}

/// The journal of a lane.
pub fn journal_file_name(lane: u64) -> String {
    format!("{}.jsonl", lane_stem(lane))
}

/// The tail state of a lane.
pub(crate) fn tail_file_name(lane: u64) -> String {
    format!("{}.tail", lane_stem(lane))
}

/// The checkpoint of a lane.
pub(crate) fn lane_ckpt_file_name(lane: u64) -> String {
    format!("{}.ckpt", lane_stem(lane))
}

/// Whether a file name belongs to the journal layout (never an old-layout session file).
pub(crate) fn is_journal_name(name: &str) -> bool {
    name == "journal" || name.starts_with("journal.")
}

/// The lane and extension of a journal-layout file name (`journal.3.ckpt` → 3, `ckpt`).
pub(crate) fn parse_lane_file(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("journal.")?;
    match rest.split_once('.') {
        None => Some((0, rest)),
        Some((n, ext)) => {
            let lane = crate::checkpoint::canonical_u64(n)?;
            (lane > 0 && lane < MAX_LANES && !ext.contains('.')).then_some((lane, ext))
        }
    }
}

/// One session's part of a journal: its bytes (the last one's include a torn tail), where they
/// start, and the session id its first line names (unauthenticated).
#[derive(Debug, Clone)]
pub(crate) struct Segment<'a> {
    /// The session id the first line claims (empty when the first line is not a
    /// `session_start`: lines before the first session, or a damaged one).
    pub session: String,
    /// Byte offset of the first line in the journal.
    pub offset: u64,
    /// Number of journal lines before it.
    pub line: u64,
    /// The bytes.
    pub data: &'a [u8],
}

/// The session id a `session_start` line names, unauthenticated; `None` for any other line.
pub(crate) fn start_session_of(bytes: &[u8]) -> Option<String> {
    let (prefix, _) = line::split_mac(bytes)?;
    let h = line::parse_header(prefix)?;
    if h.kind != KIND_START {
        return None;
    }
    let v = crate::json::parse(h.event).ok()?;
    Some(v.get("session")?.as_str()?.to_string())
}

/// Cuts journal bytes into sessions: a segment starts at every line that reads as a
/// `session_start`. Lines before the first one form a segment with an empty session id (the
/// caller decides what they are: a retention record, or damage).
pub(crate) fn segments(data: &[u8]) -> Vec<Segment<'_>> {
    let (lines, torn) = split_lines(data);
    let mut out: Vec<Segment<'_>> = Vec::new();
    let mut starts: Vec<(usize, u64, String)> = Vec::new();
    for (i, (offset, bytes)) in lines.iter().enumerate() {
        if let Some(id) = start_session_of(bytes) {
            starts.push((i, *offset, id));
        } else if i == 0 {
            starts.push((0, 0, String::new()));
        }
    }
    if lines.is_empty() && torn.is_some() {
        starts.push((0, 0, String::new()));
    }
    for (k, (i, offset, id)) in starts.iter().enumerate() {
        let end = starts
            .get(k + 1)
            .map_or(data.len(), |(_, o, _)| *o as usize);
        out.push(Segment {
            session: id.clone(),
            offset: *offset,
            line: *i as u64,
            data: &data[*offset as usize..end],
        });
    }
    out
}

/// A parsed tail state line: its event, the `prev` (hash of the file's last line), its time,
/// and whether its MAC checks under `key`.
#[derive(Debug, Clone)]
pub(crate) struct TailLine<T> {
    pub event: T,
    pub head: Hash,
    pub time_ms: Option<u64>,
    pub prefix: Vec<u8>,
    pub mac: Hash,
}

impl<T> TailLine<T> {
    pub(crate) fn mac_ok(&self, key: &MacKey) -> bool {
        crate::util::ct_eq(&key.mac(&self.prefix), &self.mac)
    }
}

/// Reads a tail state file of `kind` (only its first line counts: a crash between an in-place
/// write and the cut of the old bytes leaves junk after it). `None`: missing, not ours, or not
/// a tail line.
pub(crate) fn read_tail<T: DeserializeOwned>(
    path: &Path,
    uid: u32,
    kind: &str,
) -> Option<TailLine<T>> {
    let data = fsx::read_private(path, uid).ok()??;
    let end = crate::layout::find_newline(&data)?;
    let bytes = &data[..end];
    let (prefix, mac) = line::split_mac(bytes)?;
    let h = line::parse_header(prefix)?;
    if h.kind != kind || h.seq != 0 || h.epoch != 0 {
        return None;
    }
    let v = crate::json::parse(h.event).ok()?;
    let event: T = serde_json::from_value(v).ok()?;
    Some(TailLine {
        event,
        head: h.prev,
        time_ms: crate::util::parse_time(h.time),
        prefix: prefix.to_vec(),
        mac,
    })
}

/// Writes a tail state in place (no temporary file, and no sync unless `sync`: it is a cache,
/// checked against the file it describes before it is believed).
pub(crate) fn write_tail(
    path: &Path,
    kind: &str,
    event: &Value,
    head: &Hash,
    key: &MacKey,
    uid: u32,
    sync: bool,
) -> Result<(), AuditError> {
    let buf = line::record(path, head, kind, event, key)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(fsx::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| fsx_link_error(path, e))?;
    if file.metadata().is_ok_and(|m| m.len() == 0) {
        file.set_permissions(std::fs::Permissions::from_mode(fsx::FILE_MODE))
            .map_err(|e| AuditError::io(path, e))?;
    }
    fsx::check_open_file(&file, path, uid)?;
    file.write_all_at(&buf, 0)
        .map_err(|e| AuditError::io(path, e))?;
    file.set_len(buf.len() as u64)
        .map_err(|e| AuditError::io(path, e))?;
    if sync {
        file.sync_data().map_err(|e| AuditError::io(path, e))?;
    }
    Ok(())
}

fn fsx_link_error(path: &Path, e: io::Error) -> AuditError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        AuditError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        AuditError::io(path, e)
    }
}

/// Reads `[from, len)` of a file.
pub(crate) fn read_from(
    file: &File,
    path: &Path,
    from: u64,
    len: u64,
) -> Result<Vec<u8>, AuditError> {
    let want = usize::try_from(len.saturating_sub(from)).unwrap_or(usize::MAX);
    let mut data = Vec::with_capacity(want.min(64 << 20));
    let mut f = file;
    f.seek(SeekFrom::Start(from))
        .map_err(|e| AuditError::io(path, e))?;
    f.take(len.saturating_sub(from))
        .read_to_end(&mut data)
        .map_err(|e| AuditError::io(path, e))?;
    Ok(data)
}

/// The line that ends right before byte `end` (its newline at `end - 1`): its start offset and
/// bytes (without the newline), read backwards in chunks. `None`: `end` is not right after a
/// newline, or the line is longer than any line Garuda writes.
pub(crate) fn line_ending_at(file: &File, end: u64) -> Option<(u64, Vec<u8>)> {
    if end == 0 {
        return None;
    }
    let mut nl = [0u8; 1];
    file.read_exact_at(&mut nl, end - 1).ok()?;
    if nl[0] != b'\n' {
        return None;
    }
    let body_end = end - 1;
    let mut start = body_end;
    let mut buf: Vec<u8> = Vec::new();
    const CHUNK: u64 = 4096;
    loop {
        if start == 0 {
            return Some((0, buf));
        }
        let from = start.saturating_sub(CHUNK);
        let mut chunk = vec![0u8; (start - from) as usize];
        file.read_exact_at(&mut chunk, from).ok()?;
        if let Some(pos) = chunk.iter().rposition(|&c| c == b'\n') {
            let line_start = from + pos as u64 + 1;
            let mut out = chunk[pos + 1..].to_vec();
            out.extend_from_slice(&buf);
            return Some((line_start, out));
        }
        chunk.extend_from_slice(&buf);
        buf = chunk;
        start = from;
        if buf.len() > MAX_LINE_BYTES {
            return None;
        }
    }
}

/// A lane journal, open for appending and locked (`flock`, exclusive) by this process until
/// dropped.
pub(crate) struct LockedLane {
    pub lane: u64,
    pub path: PathBuf,
    pub file: File,
    /// The journal's metadata right after it was locked, before this writer changed anything.
    pub meta: std::fs::Metadata,
    /// Whether this writer created the file.
    pub created: bool,
}

/// Takes the first lane no running session holds, creating its journal if needed.
pub(crate) fn lock_free_lane(dir: &Path, uid: u32) -> Result<LockedLane, AuditError> {
    for lane in 0..MAX_LANES {
        let path = dir.join(journal_file_name(lane));
        let existed = std::fs::symlink_metadata(&path).is_ok();
        let file = fsx::open_append(&path, uid)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(AuditError::io(&path, e)),
        }
        // Retention replaces a journal by rename while holding its lock: the name may now be
        // another file than the one locked. Then the lock guards nothing; take it again.
        let meta = file.metadata().map_err(|e| AuditError::io(&path, e))?;
        match std::fs::symlink_metadata(&path) {
            Ok(now) if now.ino() == meta.ino() && now.dev() == meta.dev() => {}
            _ => {
                let _ = file.unlock();
                return lock_free_lane(dir, uid);
            }
        }
        return Ok(LockedLane {
            lane,
            path,
            file,
            meta,
            created: !existed,
        });
    }
    // Fail closed, and say why: more sessions at once than lanes is not "another writer".
    Err(AuditError::LanesFull {
        dir: dir.to_path_buf(),
        lanes: MAX_LANES,
    })
}

impl Drop for LockedLane {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// The sessions of a project's journal lanes, oldest first (by the start time in their ids,
/// lane order within a second).
pub(crate) fn session_ids(project_dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for lane in 0..MAX_LANES {
        let path = project_dir.join(journal_file_name(lane));
        let Ok(Some(data)) = read_plain(&path) else {
            if lane > 0 {
                break;
            }
            continue;
        };
        for (_, data) in crate::archive::lane_files(project_dir, lane, (path, data)) {
            for seg in segments(&data) {
                if !seg.session.is_empty() && seen.insert(seg.session.clone()) {
                    out.push(seg.session);
                }
            }
        }
    }
    out.sort_by(|a, b| a.get(..16).cmp(&b.get(..16)));
    out
}

pub(crate) fn read_plain(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fsx::open_read(path) {
        Ok(mut f) => {
            let mut data = Vec::new();
            f.read_to_end(&mut data)?;
            Ok(Some(data))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A session's bytes in the project's journals: the journal, the bytes, and where they start
/// (offset, lines before).
pub(crate) fn find_session(
    project_dir: &Path,
    session: &str,
) -> Option<(PathBuf, Vec<u8>, (u64, u64))> {
    for lane in 0..MAX_LANES {
        let path = project_dir.join(journal_file_name(lane));
        let Ok(Some(data)) = read_plain(&path) else {
            if lane > 0 {
                return None;
            }
            continue;
        };
        // The journal first: most sessions asked for are recent.
        let mut files = crate::archive::lane_files(project_dir, lane, (path, data));
        files.reverse();
        for (path, data) in files {
            if let Some(seg) = segments(&data).into_iter().find(|s| s.session == session) {
                let bytes = seg.data.to_vec();
                return Some((path, bytes, (seg.offset, seg.line)));
            }
        }
    }
    None
}

/// Moves a scan's line numbers and offsets to where the session starts in its journal.
pub(crate) fn rebase(scan: &mut crate::verify::Scan, (off, line): (u64, u64)) {
    for f in &mut scan.findings {
        f.offset = f.offset.map(|o| o + off);
        f.line = f.line.map(|l| l + line);
    }
    for l in &mut scan.shown {
        l.line += line;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_names() {
        assert_eq!(journal_file_name(0), "journal.jsonl");
        assert_eq!(journal_file_name(3), "journal.3.jsonl");
        assert_eq!(parse_lane_file("journal.jsonl"), Some((0, "jsonl")));
        assert_eq!(parse_lane_file("journal.3.ckpt"), Some((3, "ckpt")));
        assert_eq!(parse_lane_file("journal.03.ckpt"), None);
        assert_eq!(parse_lane_file("journal.0.ckpt"), None);
        assert!(is_journal_name("journal.tail"));
        assert!(!is_journal_name("20260101T000000Z-0011223344556677.jsonl"));
    }
}
