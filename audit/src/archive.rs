//! Journal archives: the older sessions of a lane, kept whole and compressed.
//!
//! A lane's journal grows by about 2 KB per short session, most of it hashes and MACs in hex
//! and the same JSON keys again and again. Once the journal passes
//! [`crate::AuditConfig::archive_at_bytes`] (and no retention is set), the closing session
//! moves every session before its own into an archive file and starts the journal again with a
//! `pruned` record that names the archive: exactly a retention prune (`retention.rs`) whose
//! pruned lines are kept, not dropped. The record is MACed under the closing session's index
//! key and carries the archive's sequence number, its decoded length and line count and the
//! SHA-256 of its decoded bytes, so verify checks an archive byte for byte and then every line
//! in it as if it had never left the journal.
//!
//! ```text
//! journal.jsonl      {"type":"pruned","event":{…,"archive":{"seq":3,"bytes":…,"lines":…,"sha256":…}}}  ← names journal.a3.z
//!                    the closing session's lines, then every later session's
//! journal.a3.z       the journal as it was: its first line names journal.a2.z, …
//! journal.a0.z       the first archive: sessions from the journal's start (or from a true prune)
//! ```
//!
//! The register is archived the same way (`audit.register.a<seq>.z`, named by its first line:
//! `register.rs`).
//!
//! The file format (`journal.a<seq>.z`, `journal.<lane>.a<seq>.z`, `audit.register.a<seq>.z`):
//! the magic [`MAGIC`], then a raw DEFLATE stream of the archived lines, each prefixed with one
//! byte: `=` when the 64 hex digits of the SHA-256 of the line before occur in it (its `prev`;
//! a session start's `prev_session` head too) and each occurrence is written as the single
//! byte `0x01` (the decoder computes them back), `+` when the line is kept as it was. Hashes are
//! what a compressor cannot shrink, and these are determined by the line before. Decoding is
//! bounded by the record's length; nothing in an archive is believed before its SHA-256
//! matches the MACed record.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::AuditError;
use crate::events::{ArchiveRef, PrunedEvent, KIND_PRUNED};
use crate::fsx;
use crate::journal::lane_stem;
use crate::layout::split_lines;
use crate::line;
use crate::util::{push_hex, sha256};

/// The first bytes of every archive file.
pub(crate) const MAGIC: &[u8] = b"garuda-archive-1\n";

/// DEFLATE level: 6 is within 3 % of 9 on journals and about twice as fast.
const LEVEL: u8 = 6;

/// In a `=` line, each of these bytes stands for the 64 hex digits of the SHA-256 of the line
/// before. No line the writer prints holds one (JSON escapes control characters); a line that
/// does is kept as it was (`+`).
const HASH_OF_PREVIOUS: u8 = 0x01;

/// Largest decoded archive accepted where no authenticated length bounds it (show, list).
pub(crate) const MAX_UNCHECKED_BYTES: u64 = 256 << 20;

/// An archive's file name: `journal.a<seq>.z` for lane 0, `journal.<lane>.a<seq>.z` after.
pub(crate) fn archive_file_name(lane: u64, seq: u64) -> String {
    format!("{}.a{seq}.z", lane_stem(lane))
}

/// The lane and sequence number of an archive's file name, if it is one Garuda writes.
pub(crate) fn parse_archive_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".z")?;
    let (lane_part, seq) = stem.rsplit_once(".a")?;
    let seq = crate::checkpoint::canonical_u64(seq)?;
    let lane = match lane_part {
        "journal" => 0,
        other => {
            let n = crate::checkpoint::canonical_u64(other.strip_prefix("journal.")?)?;
            (n > 0 && n < crate::journal::MAX_LANES).then_some(n)?
        }
    };
    Some((lane, seq))
}

/// Encodes complete lines (`data` ends with a newline) as an archive file's bytes.
pub(crate) fn encode(data: &[u8]) -> Vec<u8> {
    let (lines, _) = split_lines(data);
    let mut plain = Vec::with_capacity(data.len());
    let mut expected = Vec::with_capacity(64);
    let mut before: Option<&[u8]> = None;
    for (_, l) in &lines {
        expected.clear();
        if let Some(b) = before {
            push_hex(&mut expected, &sha256(b));
        }
        let first = (!expected.is_empty() && !l.contains(&HASH_OF_PREVIOUS))
            .then(|| l.windows(64).position(|w| w == &expected[..]))
            .flatten();
        match first {
            Some(mut at) => {
                // Every occurrence, left to right, each replaced by one byte.
                plain.push(b'=');
                let mut from = 0;
                loop {
                    plain.extend_from_slice(&l[from..at]);
                    plain.push(HASH_OF_PREVIOUS);
                    from = at + 64;
                    match l[from..].windows(64).position(|w| w == &expected[..]) {
                        Some(next) => at = from + next,
                        None => break,
                    }
                }
                plain.extend_from_slice(&l[from..]);
            }
            None => {
                plain.push(b'+');
                plain.extend_from_slice(l);
            }
        }
        plain.push(b'\n');
        before = Some(l);
    }
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&miniz_oxide::deflate::compress_to_vec(&plain, LEVEL));
    out
}

/// Decodes an archive file's bytes to the lines it holds, refusing anything that would decode
/// to more than `limit` bytes (checked before each line grows the output). The error says what
/// is wrong, for a finding.
pub(crate) fn decode(file: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let body = file
        .strip_prefix(MAGIC)
        .ok_or("not an archive Garuda writes (its first bytes)")?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    // The plain form is never longer than the lines plus one marker byte per line.
    let plain = miniz_oxide::inflate::decompress_to_vec_with_limit(
        body,
        limit.saturating_add(limit / 2).saturating_add(64),
    )
    .map_err(|e| format!("its compressed data does not decode ({:?})", e.status))?;
    let too_long = || "it holds more than its record says".to_string();
    let mut out: Vec<u8> = Vec::with_capacity(plain.len().min(limit).saturating_mul(2).min(limit));
    let mut before: Option<std::ops::Range<usize>> = None;
    let mut rest = &plain[..];
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or("its last line has no end")?;
        let Some((&marker, l)) = rest[..end].split_first() else {
            return Err("a line has no marker".into());
        };
        let start = out.len();
        match marker {
            b'+' => {
                if start + l.len() + 1 > limit {
                    return Err(too_long());
                }
                out.extend_from_slice(l);
            }
            b'=' => {
                let b = before
                    .clone()
                    .ok_or("its first line names no line before it")?;
                let hashes = l.iter().filter(|&&c| c == HASH_OF_PREVIOUS).count();
                if hashes == 0 {
                    return Err("a line said to name the line before it does not".into());
                }
                if start + l.len() + hashes * 63 + 1 > limit {
                    return Err(too_long());
                }
                let mut hex = Vec::with_capacity(64);
                push_hex(&mut hex, &sha256(&out[b]));
                for &c in l {
                    if c == HASH_OF_PREVIOUS {
                        out.extend_from_slice(&hex);
                    } else {
                        out.push(c);
                    }
                }
            }
            _ => return Err("a line has no marker".into()),
        }
        before = Some(start..out.len());
        out.push(b'\n');
        rest = &rest[end + 1..];
    }
    Ok(out)
}

/// Writes `data` (complete lines) as archive `seq` of `lane` in `dir`: a temporary file,
/// synced, renamed to its name, the folder synced. An archive of that name left by a crash
/// before its journal named it is replaced.
pub(crate) fn write(
    dir: &Path,
    lane: u64,
    seq: u64,
    data: &[u8],
    uid: u32,
    fsync: bool,
) -> Result<PathBuf, AuditError> {
    write_named(dir, &archive_file_name(lane, seq), data, uid, fsync)
}

/// The register's archive `seq`: `audit.register.a<seq>.z` next to `audit.register.jsonl`.
pub(crate) fn register_archive_path(register: &Path, seq: u64) -> PathBuf {
    let name = register.file_name().map_or_else(
        || "audit.register.jsonl".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    register.with_file_name(format!("{stem}.a{seq}.z"))
}

/// [`write`] under any name in `dir`.
pub(crate) fn write_named(
    dir: &Path,
    name: &str,
    data: &[u8],
    uid: u32,
    fsync: bool,
) -> Result<PathBuf, AuditError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    // One left by a crash during an earlier archive is replaced.
    let mut out = fsx::create_temp(&tmp, uid)?;
    out.write_all(&encode(data))
        .map_err(|e| AuditError::io(&tmp, e))?;
    if fsync {
        out.sync_all().map_err(|e| AuditError::io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| AuditError::io(&path, e))?;
    if fsync {
        fsx::fsync_dir(dir)?;
    }
    Ok(path)
}

/// The archive a journal's first line names, unauthenticated: its sequence number and
/// record (`None` when the first line is not a `pruned` record with an archive).
pub(crate) fn named_by(first_line: &[u8]) -> Option<(PrunedEvent, ArchiveRef)> {
    let (prefix, _) = line::split_mac(first_line)?;
    let h = line::parse_header(prefix)?;
    if h.kind != KIND_PRUNED {
        return None;
    }
    let v = crate::json::parse(h.event).ok()?;
    let ev: PrunedEvent = serde_json::from_value(v).ok()?;
    let a = ev.archive.clone()?;
    Some((ev, a))
}

/// A lane's archived bytes and its journal, oldest first, following each first line's
/// archive, unauthenticated (for `show`, `list` and the key ids verify collects, which check
/// each session's lines themselves or report records that do not check): `(path, decoded
/// bytes)` per file. Stops at an archive that is missing, does not decode to its record's
/// SHA-256, was already read, or would pass [`MAX_UNCHECKED_BYTES`] in all.
pub(crate) fn lane_files(
    dir: &Path,
    lane: u64,
    journal: (PathBuf, Vec<u8>),
) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = vec![journal];
    let mut seen = std::collections::HashSet::new();
    let mut total: u64 = 0;
    while let Some((_, a)) = files
        .last()
        .and_then(|(_, data)| named_by(data.split(|&c| c == b'\n').next().unwrap_or(b"")))
    {
        // A chain that comes back to an archive already read, or more than the bound in all.
        if !seen.insert(a.seq) || total.saturating_add(a.bytes) > MAX_UNCHECKED_BYTES {
            break;
        }
        let path = dir.join(archive_file_name(lane, a.seq));
        let Ok(Some(raw)) = crate::journal::read_plain(&path) else {
            break;
        };
        let Ok(decoded) = decode(&raw, a.bytes) else {
            break;
        };
        if crate::util::hex(&sha256(&decoded)) != a.sha256 {
            break;
        }
        total += decoded.len() as u64;
        files.push((path, decoded));
    }
    files.reverse();
    files
}

/// How many archive rewrites back a stale record is looked for: a close that archives and
/// is killed before it rewrote its tail state and register record leaves them one rewrite
/// behind; the next close brings them up to date.
pub(crate) const STALE_REWRITES: usize = 4;

/// The journal as it was before its latest archive rewrite: the archive's lines, then the
/// journal's after its first (the record). `None` when the journal's first line names no
/// archive, or the archive is missing or not the one its record names.
fn before_rewrite(
    dir: &Path,
    lane: u64,
    journal: &[u8],
    authentic: &dyn Fn(&[u8]) -> bool,
) -> Option<Vec<u8>> {
    let first_len = journal.iter().position(|&c| c == b'\n')?;
    if !authentic(&journal[..first_len]) {
        return None;
    }
    let (_, a) = named_by(&journal[..first_len])?;
    let raw = crate::journal::read_plain(&dir.join(archive_file_name(lane, a.seq))).ok()??;
    let mut old = decode(&raw, a.bytes.min(MAX_UNCHECKED_BYTES)).ok()?;
    if crate::util::hex(&sha256(&old)) != a.sha256 {
        return None;
    }
    old.extend_from_slice(&journal[first_len + 1..]);
    Some(old)
}

/// Whether the line ending at byte `end` of the journal as it was before one of its latest
/// archive rewrites has the SHA-256 `head`: a tail state or register record written before a
/// rewrite whose close was killed before it wrote their successors. Only records `authentic`
/// accepts (the caller checks their MAC) are followed.
pub(crate) fn reached_before_rewrite(
    dir: &Path,
    lane: u64,
    journal: &[u8],
    end: u64,
    head: &str,
    authentic: &dyn Fn(&[u8]) -> bool,
) -> bool {
    let mut cur = journal.to_vec();
    for _ in 0..STALE_REWRITES {
        let Some(old) = before_rewrite(dir, lane, &cur, authentic) else {
            return false;
        };
        let hit = usize::try_from(end)
            .ok()
            .filter(|&e| e > 0 && old.get(e - 1) == Some(&b'\n'))
            .is_some_and(|e| {
                let start = old[..e - 1]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                crate::util::hex(&sha256(&old[start..e - 1])) == head
            });
        if hit {
            return true;
        }
        cur = old;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(prev: &[u8], n: u64) -> Vec<u8> {
        let mut l = format!(
            "{{\"v\":1,\"seq\":{n},\"epoch\":0,\"time\":\"2026-12-04T02:22:22.995Z\",\"prev\":\""
        )
        .into_bytes();
        push_hex(&mut l, &sha256(prev));
        l.extend_from_slice(
            b"\",\"type\":\"x\",\"event\":{\"prev\":\"not this one\"},\"mac\":\"00\"}",
        );
        l
    }

    /// A journal whose first line names archive 0 with `sha256`, and that archive holding
    /// `held` (any bytes, as a planted file would).
    fn lane_with_archive(dir: &Path, held: &[u8], sha256_hex: String) {
        let event = PrunedEvent {
            by: "20261204T000000Z-0123456789abcdef".into(),
            key_id: "00000000".into(),
            sessions: 1,
            first: "20261204T000000Z-0123456789abcdef".into(),
            last: crate::events::Attest {
                session: "20261204T000000Z-0123456789abcdef".into(),
                state: crate::events::AttestState::Closed,
                lines: 1,
                head: "0".repeat(64),
            },
            journal_lines: 1,
            journal_bytes: held.len() as u64,
            from_time: String::new(),
            to_time: String::new(),
            retention: crate::events::Retention::default(),
            archive: Some(ArchiveRef {
                seq: 0,
                bytes: held.len() as u64,
                lines: 1,
                sha256: sha256_hex,
            }),
        };
        let mut record = Vec::new();
        line::build(
            &mut record,
            &line::NewLine {
                seq: 0,
                epoch: 0,
                time_ms: 0,
                prev: &[0; 32],
                kind: KIND_PRUNED,
                event: &serde_json::to_value(&event).unwrap(),
            },
            &[7; 32],
        )
        .unwrap();
        std::fs::write(dir.join("journal.jsonl"), &record).unwrap();
        std::fs::write(dir.join(archive_file_name(0, 0)), encode(held)).unwrap();
    }

    /// `show` and `list` follow a journal's archives unauthenticated: an archive that does not
    /// decode to the SHA-256 its record names is not read. Control: with the right SHA-256,
    /// the same archive is.
    #[test]
    fn unauthenticated_reading_believes_no_archive_its_record_does_not_name() {
        let held = b"an archived line\n";
        for (sha, files) in [(crate::util::hex(&sha256(held)), 2), ("0".repeat(64), 1)] {
            let dir = tempfile::tempdir().unwrap();
            lane_with_archive(dir.path(), held, sha);
            let journal = dir.path().join("journal.jsonl");
            let data = std::fs::read(&journal).unwrap();
            assert_eq!(lane_files(dir.path(), 0, (journal, data)).len(), files);
        }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(archive_file_name(0, 3), "journal.a3.z");
        assert_eq!(archive_file_name(5, 0), "journal.5.a0.z");
        assert_eq!(parse_archive_name("journal.a3.z"), Some((0, 3)));
        assert_eq!(parse_archive_name("journal.5.a0.z"), Some((5, 0)));
        for bad in [
            "journal.a03.z",
            "journal.0.a1.z",
            "journal.a.z",
            "journal.a1",
            "x.a1.z",
            "journal.64.a1.z",
        ] {
            assert_eq!(parse_archive_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn lines_come_back_byte_for_byte() {
        let mut data = Vec::new();
        let mut before = b"whatever came first".to_vec();
        for n in 0..50 {
            let l = if n == 20 {
                // A line whose prev is not the line before it is kept as it was.
                line(b"not the line before", n)
            } else {
                line(&before, n)
            };
            data.extend_from_slice(&l);
            data.push(b'\n');
            before = l;
        }
        data.extend_from_slice(b"a line in no layout at all\n");
        // A line that holds the byte standing for a hash is kept as it was.
        let mut odd = line(b"a line in no layout at all", 99);
        odd.push(HASH_OF_PREVIOUS);
        data.extend_from_slice(&odd);
        data.push(b'\n');
        let file = encode(&data);
        assert!(
            file.len() < data.len() / 3,
            "{} of {}",
            file.len(),
            data.len()
        );
        assert_eq!(decode(&file, data.len() as u64).unwrap(), data);
        // Bounded by the length it is given.
        assert!(decode(&file, data.len() as u64 - 1).is_err());
        // Any change to the file is refused or changes what it decodes to.
        let mut flipped = file.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        assert_ne!(decode(&flipped, data.len() as u64).ok(), Some(data.clone()));
        assert!(decode(&file[1..], data.len() as u64).is_err());
        // A line with no marker at all (the fuzzer's first find: it panicked).
        let empty_line = [MAGIC, &miniz_oxide::deflate::compress_to_vec(b"\n", 6)].concat();
        assert!(decode(&empty_line, 100).is_err());
    }
}
