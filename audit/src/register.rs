//! The install-wide register: `<garuda_home>/audit.register.jsonl` (next to the audit root),
//! one MACed line per session start
//! and close in any project, with the project index's head right after that session's entry.
//!
//! Lines have the index format (`seq` and `prev` chain the register, `epoch` 0); each is MACed
//! under the register key of the session it names, derived from the install secret, the
//! project folder name and the session id. The register is what lets verify see a project
//! folder that was deleted, or rolled back to an older copy (its index no longer reaches the
//! head the register recorded), and each session's first line records the `seq` of its own
//! register line, so cutting the register's tail contradicts the sessions that remain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::events::{RegisterEvent, INDEX_CLOSE, INDEX_START};
use crate::json;
use crate::keys::InstallSecret;
use crate::layout::split_lines;
use crate::line;
use crate::report::{Code, Finding, Severity};
use crate::util::{ct_eq, hex, parse_time, sha256, Hash, ZERO_HASH};

/// Where the register of an audit root lives: next to the audit root, not in it
/// (`~/.garuda/audit.register.jsonl` for `~/.garuda/audit`), so that swapping the audit folder
/// for an older copy leaves the register's newer records in place.
pub(crate) fn register_path(audit_root: &Path) -> PathBuf {
    let name = audit_root
        .file_name()
        .map_or_else(|| "audit".into(), |n| n.to_string_lossy().into_owned());
    let parent = audit_root.parent().unwrap_or(Path::new("."));
    parent.join(format!("{name}.register.jsonl"))
}

/// What the authentic lines of the register say.
#[derive(Debug, Default)]
pub(crate) struct RegisterInfo {
    /// Number of complete lines.
    pub lines: u64,
    /// Authentic lines by `seq`: type, project, session.
    pub by_seq: HashMap<u64, (String, String, String)>,
    /// The last authentic record of each project, of either layout.
    pub last: HashMap<String, RegisterEvent>,
    /// The last authentic old-layout record (about `index.jsonl`) of each project.
    pub legacy: HashMap<String, RegisterEvent>,
    /// The last authentic record of each journal lane of each project.
    pub lanes: HashMap<(String, u64), RegisterEvent>,
    /// Time of the last authentic line.
    pub last_time_ms: Option<u64>,
    /// Line number (from 1) of the last authentic line, 0 if none.
    pub last_authentic_line: u64,
    /// Lines under a key not given that were collected anyway (`accept_unknown_keys`): line
    /// number, claimed key id, hash, time. They feed neither `last`, `by_seq` nor
    /// `last_time_ms`.
    pub unknown: Vec<UnknownLine>,
    /// Every key id a readable line claims.
    pub key_ids: std::collections::HashSet<String>,
    /// Every project a readable line names, MAC checked or not: verify says a project without
    /// an audit folder has no sessions only when no line names it.
    pub projects: std::collections::HashSet<String>,
}

/// A line under a key id that was not given.
#[derive(Debug, Clone)]
pub(crate) struct UnknownLine {
    pub line: u64,
    pub key_id: String,
    pub hash: Hash,
    pub time_ms: Option<u64>,
}

/// Checks the register's chain and MACs (lines under keys not given are KEY_UNKNOWN) and
/// collects what it records; with `accept_unknown_keys` (the writer, which holds only the
/// current secret) lines under other keys still continue the chain and are listed in
/// `unknown`, but nothing they claim (times, records) is taken: anyone can write a line under a
/// made-up key id.
/// `base`: where the chain starts when `data` is not the whole register: the `seq` and `prev`
/// of `data`'s first line after an archive record, which is then skipped (its first line).
pub(crate) fn check_register(
    path: &Path,
    data: &[u8],
    keys: &[InstallSecret],
    accept_unknown_keys: bool,
    exclude_session: Option<&str>,
    base: Option<(u64, Hash)>,
    findings: &mut Vec<Finding>,
) -> RegisterInfo {
    let mut info = RegisterInfo::default();
    let (lines, torn) = split_lines(data);
    let skip = usize::from(base.is_some());
    let (seq0, mut prev) = base.unwrap_or((0, ZERO_HASH));
    info.lines = seq0 + lines.len().saturating_sub(skip) as u64;
    let mut prev_bad = false;
    for (k, (offset, bytes)) in lines.iter().enumerate().skip(skip) {
        let line_no = k as u64 + 1;
        // Position in the register's chain (archived lines included).
        let i = seq0 + (k - skip) as u64;
        let at = |code: Code, sev: Severity, msg: String| {
            Finding::new(path, code, sev, msg).at(Some(*offset), line_no)
        };
        let hash = sha256(bytes);
        let mut bad = true;
        let parsed = line::split_mac(bytes)
            .and_then(|(prefix, mac)| line::parse_header(prefix).map(|h| (prefix, mac, h)));
        match parsed {
            None => findings.push(at(
                Code::Malformed,
                Severity::Error,
                "not a register line as Garuda writes them".into(),
            )),
            Some((prefix, mac, h)) => {
                let ev = json::parse(h.event).and_then(|v| {
                    serde_json::from_value::<RegisterEvent>(v).map_err(|e| e.to_string())
                });
                match ev {
                    Err(e) => findings.push(at(Code::Malformed, Severity::Error, e)),
                    Ok(_) if h.kind != INDEX_START && h.kind != INDEX_CLOSE => findings.push(at(
                        Code::Malformed,
                        Severity::Error,
                        format!("unknown register line type {:?}", h.kind),
                    )),
                    Ok(ev) => {
                        info.key_ids.insert(ev.key_id.clone());
                        info.projects.insert(ev.project.clone());
                        let authentic = crate::layout::valid_session_id(&ev.session)
                            && keys.iter().any(|k| {
                                ct_eq(&k.register_key(&ev.project, &ev.session).mac(prefix), &mac)
                            });
                        let mut usable = authentic;
                        if !authentic {
                            if keys.iter().any(|k| hex(&k.key_id()) == ev.key_id) {
                                findings.push(at(
                                    Code::BadMac,
                                    Severity::Error,
                                    "the MAC does not match the register line".into(),
                                ));
                            } else {
                                findings.push(at(
                                    Code::KeyUnknown,
                                    Severity::Undecidable,
                                    format!(
                                        "register line of session {} is under key {}, which was not given",
                                        ev.session, ev.key_id
                                    ),
                                ));
                                usable = accept_unknown_keys;
                            }
                        }
                        if usable {
                            bad = false;
                            if h.seq != i {
                                findings.push(at(
                                    if h.seq > i {
                                        Code::SeqGap
                                    } else {
                                        Code::SeqDup
                                    },
                                    Severity::Error,
                                    format!("register seq {} on line {line_no}", h.seq),
                                ));
                            }
                            if !prev_bad && h.prev != prev {
                                findings.push(at(
                                    Code::PrevMismatch,
                                    Severity::Error,
                                    "register prev is not the hash of the line before".into(),
                                ));
                            }
                            if exclude_session == Some(ev.session.as_str()) {
                                // The caller's own line (the writer's "creating project"
                                // record): chained, but not evidence of what was before.
                            } else if !authentic {
                                // Not checkable here: the caller may build on it only by
                                // naming it (the writer's `unverified`).
                                info.unknown.push(UnknownLine {
                                    line: line_no,
                                    key_id: ev.key_id.clone(),
                                    hash,
                                    time_ms: parse_time(h.time),
                                });
                            } else {
                                if let Some(t) = parse_time(h.time) {
                                    info.last_time_ms =
                                        Some(info.last_time_ms.map_or(t, |m| m.max(t)));
                                }
                                info.last_authentic_line = line_no;
                                info.by_seq.insert(
                                    h.seq,
                                    (h.kind.to_string(), ev.project.clone(), ev.session.clone()),
                                );
                                match ev.lane {
                                    Some(lane) => {
                                        info.lanes.insert((ev.project.clone(), lane), ev.clone());
                                    }
                                    None => {
                                        info.legacy.insert(ev.project.clone(), ev.clone());
                                    }
                                }
                                info.last.insert(ev.project.clone(), ev);
                            }
                        }
                    }
                }
            }
        }
        prev = hash;
        prev_bad = bad;
    }
    if let Some((offset, rest)) = torn {
        findings.push(Finding::torn_tail(
            path,
            "register",
            offset,
            rest.len(),
            lines.len() as u64 + 1,
        ));
    }
    info
}

/// The register's first line as an archive record (`archive.rs`), unauthenticated.
pub(crate) struct ArchiveRecord {
    pub event: crate::events::RegisterArchiveEvent,
    /// The last archived line's hash: what the next line's `prev` names.
    pub prev: Hash,
    pub time_ms: Option<u64>,
    pub prefix: Vec<u8>,
    pub mac: Hash,
    /// The record's length with its newline.
    pub len: u64,
}

impl ArchiveRecord {
    /// Where the register's chain goes on after the record: the next line's `seq` and `prev`.
    pub(crate) fn base(&self) -> (u64, Hash) {
        (self.event.lines, self.prev)
    }

    /// Whether its MAC checks under one of `keys`; `None` when none of them is its key id.
    pub(crate) fn authentic(&self, keys: &[InstallSecret]) -> Option<bool> {
        let ev = &self.event;
        if !crate::layout::valid_session_id(&ev.by) {
            return Some(false);
        }
        let mut known = false;
        for k in keys {
            if ct_eq(
                &k.register_key(&ev.project, &ev.by).mac(&self.prefix),
                &self.mac,
            ) {
                return Some(true);
            }
            known |= hex(&k.key_id()) == ev.key_id;
        }
        known.then_some(false)
    }
}

/// The register's first line, if it is an archive record.
pub(crate) fn archive_record(data: &[u8]) -> Option<ArchiveRecord> {
    let end = crate::layout::find_newline(data)?;
    let bytes = &data[..end];
    let (prefix, mac) = line::split_mac(bytes)?;
    let h = line::parse_header(prefix)?;
    if h.kind != crate::events::KIND_REGISTER_ARCHIVE || h.seq != 0 || h.epoch != 0 {
        return None;
    }
    let event = serde_json::from_value(json::parse(h.event).ok()?).ok()?;
    Some(ArchiveRecord {
        event,
        prev: h.prev,
        time_ms: parse_time(h.time),
        prefix: prefix.to_vec(),
        mac,
        len: end as u64 + 1,
    })
}

/// Compares a project's index (its line hashes) with the register's last record for it.
pub(crate) fn index_against_register(
    index_path: &Path,
    index_hashes: &[Hash],
    rec: &RegisterEvent,
) -> Option<Finding> {
    let have = index_hashes.len() as u64;
    if have < rec.index_lines {
        return Some(Finding::new(
            index_path,
            Code::Truncated,
            Severity::Error,
            format!(
                "the register records {} index line(s) after session {}; the index has {have}: index lines were removed, or the project folder was rolled back",
                rec.index_lines, rec.session
            ),
        ));
    }
    let at = if rec.index_lines == 0 {
        ZERO_HASH
    } else {
        index_hashes[rec.index_lines as usize - 1]
    };
    if hex(&at) != rec.index_head {
        return Some(
            Finding::new(
                index_path,
                Code::RootMismatch,
                Severity::Error,
                format!(
                    "index line {} is not the one the register records after session {}: the index was rewritten or replaced",
                    rec.index_lines, rec.session
                ),
            )
            .at(None, rec.index_lines),
        );
    }
    None
}

/// The register's tail state file, next to the register.
pub(crate) fn register_tail_path(reg_path: &Path) -> PathBuf {
    reg_path.with_extension("tail")
}

/// What a writer knows of the register after [`LockedRegister::load`].
#[derive(Debug, Default)]
pub(crate) struct RegisterView {
    /// Number of complete lines.
    pub lines: u64,
    /// SHA-256 of the last line (zeros for none).
    pub head: Hash,
    /// Length in bytes (after any torn tail was cut).
    pub bytes: u64,
    /// Byte offset of the last line.
    pub last_at: u64,
    /// The last record of each project lane (and old-layout index).
    pub records: Vec<crate::events::LaneRecord>,
    /// Time of the last line under the writer's own secret (what ctimes are compared with).
    pub anchor_ms: Option<u64>,
    /// Lines under other key ids after the last own line (slow path only).
    pub unverified: Vec<crate::events::UnverifiedLine>,
    /// Whether `records` is every lane's last record (false: not learnt, so no tail state is
    /// written after an append).
    pub records_known: bool,
}

impl RegisterView {
    /// The last record of a project lane (`None` lane: the old-layout index).
    pub(crate) fn record(
        &self,
        project: &str,
        lane: Option<u64>,
    ) -> Option<&crate::events::LaneRecord> {
        self.records
            .iter()
            .find(|r| r.project == project && r.lane == lane)
    }

    /// Whether the register knows the project at all, and its newest record's session and
    /// line count (0: only a "creating project" record).
    pub(crate) fn knows(&self, project: &str) -> Option<(String, u64)> {
        let mut best: Option<(String, u64)> = None;
        for r in self.records.iter().filter(|r| r.project == project) {
            let lines = best.as_ref().map_or(0, |b| b.1).max(r.lines);
            best = Some((r.session.clone(), lines));
        }
        best
    }

    fn set_record(&mut self, rec: crate::events::LaneRecord) {
        self.records
            .retain(|r| !(r.project == rec.project && r.lane == rec.lane));
        self.records.push(rec);
    }
}

fn lane_record(ev: &RegisterEvent) -> crate::events::LaneRecord {
    crate::events::LaneRecord {
        project: ev.project.clone(),
        lane: ev.lane,
        session: ev.session.clone(),
        lines: ev.index_lines,
        head: ev.index_head.clone(),
        bytes: ev.bytes,
    }
}

/// The register, open for appending and locked (`flock`, exclusive) until dropped.
pub(crate) struct LockedRegister {
    file: std::fs::File,
    path: PathBuf,
    uid: u32,
    pub view: RegisterView,
}

impl LockedRegister {
    /// Opens (creating) and locks the register, and learns its state: from the tail state when
    /// it matches the register's last line (reading nothing before it), else from every line
    /// (the slow path: the first run after a crash between an append and its tail, or after a
    /// key change). `session` is the caller's own session (its "creating project" line is not
    /// evidence of anything before it). Problems found on the slow path go to `findings`.
    pub(crate) fn open(
        path: &Path,
        uid: u32,
        tail_key: &crate::keys::MacKey,
        secret: Option<&InstallSecret>,
        session: &str,
        sync: bool,
        findings: &mut Vec<Finding>,
    ) -> Result<Self, crate::AuditError> {
        use crate::AuditError;
        use std::os::unix::fs::MetadataExt;
        // An archiving close replaces the register by rename while others wait for its lock:
        // a writer that then gets the lock on the old file opens the new one (or its line
        // would go to a file no name reaches any more).
        let mut tries = 0;
        let file = loop {
            let file = crate::fsx::open_append(path, uid)?;
            file.lock().map_err(|e| AuditError::io(path, e))?;
            let held = file.metadata().map_err(|e| AuditError::io(path, e))?;
            let named = std::fs::symlink_metadata(path).map_err(|e| AuditError::io(path, e))?;
            if (held.dev(), held.ino()) == (named.dev(), named.ino()) {
                break file;
            }
            tries += 1;
            if tries > 1000 {
                return Err(AuditError::io(
                    path,
                    std::io::Error::other(
                        "the register was replaced 1000 times while this writer waited for it",
                    ),
                ));
            }
        };
        let size = file.metadata().map_err(|e| AuditError::io(path, e))?.len();
        let tail: Option<crate::journal::TailLine<crate::events::RegisterTailEvent>> =
            crate::journal::read_tail(
                &register_tail_path(path),
                uid,
                crate::events::KIND_REGISTER_TAIL,
            );
        if let Some(t) = tail.filter(|t| t.event.bytes == size && t.mac_ok(tail_key)) {
            let last = crate::journal::line_ending_at(&file, size)
                .filter(|(at, bytes)| *at == t.event.last_at && ct_eq(&sha256(bytes), &t.head));
            if let Some((_, bytes)) = last {
                // The last line is the tail writer's own (it appended it, then wrote the tail
                // under a key only holders of the secret have): its time is an anchor.
                let anchor = line::split_mac(&bytes)
                    .and_then(|(p, _)| line::parse_header(p))
                    .and_then(|h| parse_time(h.time));
                let view = RegisterView {
                    lines: t.event.lines,
                    head: t.head,
                    bytes: size,
                    last_at: t.event.last_at,
                    records: t.event.records.clone(),
                    anchor_ms: anchor,
                    unverified: Vec::new(),
                    records_known: true,
                };
                return Ok(LockedRegister {
                    file,
                    path: path.to_path_buf(),
                    uid,
                    view,
                });
            }
        }
        // The slow path: every line.
        let data = crate::journal::read_from(&file, path, 0, size)?;
        let (lines, torn) = split_lines(&data);
        let mut bytes = size;
        if let Some((offset, _)) = torn {
            // A writer died in the middle of an append: the torn bytes hold no complete line,
            // and appending after them would glue two lines into one.
            file.set_len(offset).map_err(|e| AuditError::io(path, e))?;
            if sync {
                file.sync_data().map_err(|e| AuditError::io(path, e))?;
            }
            bytes = offset;
        }
        let complete = &data[..bytes as usize];
        // After an archive, the first line is its record: the chain goes on from what it names.
        let record = archive_record(complete);
        let (count, head) = match &record {
            Some(r) => (
                r.event.lines + (lines.len() as u64).saturating_sub(1),
                if lines.len() > 1 {
                    lines.last().map_or(r.prev, |(_, l)| sha256(l))
                } else {
                    r.prev
                },
            ),
            None => (
                lines.len() as u64,
                lines.last().map_or(ZERO_HASH, |(_, l)| sha256(l)),
            ),
        };
        let Some(secret) = secret else {
            // At close the writer no longer holds the secret: it chains its line to the last
            // one and leaves the tail state for the next writer to rebuild with the secret.
            return Ok(LockedRegister {
                file,
                path: path.to_path_buf(),
                uid,
                view: RegisterView {
                    lines: count,
                    head,
                    bytes,
                    last_at: lines.last().map_or(0, |(o, _)| *o),
                    ..RegisterView::default()
                },
            });
        };
        let keys = std::slice::from_ref(secret);
        let info = check_register(
            path,
            complete,
            keys,
            true,
            Some(session),
            record.as_ref().map(ArchiveRecord::base),
            findings,
        );
        if let Some(r) = record.as_ref().filter(|r| r.authentic(keys) == Some(false)) {
            findings.push(
                Finding::new(
                    path,
                    Code::BadMac,
                    Severity::Error,
                    format!(
                        "the MAC does not match the register's archive record (said to be session {}'s)",
                        r.event.by
                    ),
                )
                .at(Some(0), 1),
            );
        }
        let mut unverified = Vec::new();
        let anchor = crate::writer::anchor(
            "register",
            info.last_time_ms,
            info.last_authentic_line,
            &info.unknown,
            &mut unverified,
        );
        let own_record = record.as_ref().filter(|r| r.authentic(keys) == Some(true));
        let mut view = RegisterView {
            lines: count,
            head,
            bytes,
            last_at: lines.last().map_or(0, |(o, _)| *o),
            records: Vec::new(),
            // An archive record under this secret is an anchor too (all else went into the
            // archive).
            anchor_ms: anchor.max(own_record.and_then(|r| r.time_ms)),
            unverified,
            records_known: true,
        };
        // The records the archive took away, then the newer ones after it.
        for rec in own_record
            .map(|r| r.event.records.clone())
            .unwrap_or_default()
        {
            view.set_record(rec);
        }
        for ev in info.legacy.values().chain(info.lanes.values()) {
            view.set_record(lane_record(ev));
        }
        // Creating-project records are the only records of a project with no index yet.
        for (p, ev) in &info.last {
            if !view.records.iter().any(|r| &r.project == p) {
                view.set_record(lane_record(ev));
            }
        }
        let reg = LockedRegister {
            file,
            path: path.to_path_buf(),
            uid,
            view,
        };
        // Rebuilt with the secret: write the tail state again, or it would stay stale (a
        // closing writer, without the secret, cannot rebuild it).
        if reg.view.lines > 0 {
            reg.write_tail(session, tail_key)?;
        }
        Ok(reg)
    }

    /// Once the register is at least `at` bytes long, moves every line into an archive
    /// (`audit.register.a<k>.z`, `archive.rs`) and starts the register again with a record
    /// that names it, MACed under the register `key` of session `by` of `project`: the same
    /// rewrite as a lane's (docs/audit.md, "Archives"). Only with every lane's last record
    /// known (they go into the record). Returns whether it did; the caller's next line (its
    /// close record) must then be synced, as after a lane's rewrite.
    pub(crate) fn archive_if_due(
        &mut self,
        at: u64,
        by: &str,
        project: &str,
        key_id: &str,
        key: &crate::keys::MacKey,
        fsync: bool,
    ) -> Result<bool, crate::AuditError> {
        use crate::AuditError;
        if self.view.bytes < at || !self.view.records_known || self.view.lines == 0 {
            return Ok(false);
        }
        let data = crate::journal::read_from(&self.file, &self.path, 0, self.view.bytes)?;
        if data.last() != Some(&b'\n') {
            return Ok(false);
        }
        let previous = archive_record(&data);
        // The lines after the record, not the record itself (it lists every lane: with enough
        // of them it alone would pass the length and archive every close).
        let record_len = previous.as_ref().map_or(0, |r| r.len);
        if (data.len() as u64).saturating_sub(record_len) < at {
            return Ok(false);
        }
        let seq = previous.map_or(0, |r| r.event.archive.seq.saturating_add(1));
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let archive = crate::archive::register_archive_path(&self.path, seq);
        let name = archive
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        crate::archive::write_named(dir, &name, &data, self.uid, fsync)?;
        let (lines, _) = split_lines(&data);
        let event = crate::events::RegisterArchiveEvent {
            by: by.to_string(),
            project: project.to_string(),
            key_id: key_id.to_string(),
            lines: self.view.lines,
            archive: crate::events::ArchiveRef {
                seq,
                bytes: data.len() as u64,
                lines: lines.len() as u64,
                sha256: hex(&sha256(&data)),
            },
            records: self.view.records.clone(),
        };
        let record = line::record(
            &self.path,
            &self.view.head,
            crate::events::KIND_REGISTER_ARCHIVE,
            &serde_json::to_value(&event).unwrap_or(serde_json::Value::Null),
            key,
        )?;
        let reg_name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{reg_name}.rewrite.tmp"));
        let mut out = crate::fsx::create_temp(&tmp, self.uid)?;
        // Locked before it has the register's name: writers that open it wait for this one.
        out.lock().map_err(|e| AuditError::io(&tmp, e))?;
        std::io::Write::write_all(&mut out, &record).map_err(|e| AuditError::io(&tmp, e))?;
        if fsync {
            out.sync_all().map_err(|e| AuditError::io(&tmp, e))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| AuditError::io(&self.path, e))?;
        if fsync {
            crate::fsx::fsync_dir(dir)?;
        }
        let old = std::mem::replace(&mut self.file, out);
        let _ = old.unlock();
        self.view.bytes = record.len() as u64;
        self.view.last_at = 0;
        Ok(true)
    }

    /// Appends one record (MACed under the session's register `key`), syncs it when `sync`,
    /// and replaces the tail state (no sync: a cache).
    pub(crate) fn append(
        &mut self,
        kind: &str,
        ev: &RegisterEvent,
        key: &crate::keys::MacKey,
        tail_key: &crate::keys::MacKey,
        sync: bool,
    ) -> Result<(), crate::AuditError> {
        use crate::AuditError;
        let value = serde_json::to_value(ev).unwrap_or(serde_json::Value::Null);
        let mut buf = Vec::new();
        line::build(
            &mut buf,
            &line::NewLine {
                seq: self.view.lines,
                epoch: 0,
                time_ms: crate::util::now_ms(),
                prev: &self.view.head,
                kind,
                event: &value,
            },
            key.bytes(),
        )
        .map_err(|e| AuditError::Format {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        std::io::Write::write_all(&mut self.file, &buf)
            .map_err(|e| AuditError::io(&self.path, e))?;
        if sync {
            self.file
                .sync_data()
                .map_err(|e| AuditError::io(&self.path, e))?;
        }
        self.view.head = sha256(&buf[..buf.len() - 1]);
        self.view.last_at = self.view.bytes;
        self.view.bytes += buf.len() as u64;
        self.view.lines += 1;
        self.view.set_record(lane_record(ev));
        if !self.view.records_known {
            return Ok(());
        }
        self.write_tail(&ev.session, tail_key)
    }

    fn write_tail(
        &self,
        session: &str,
        tail_key: &crate::keys::MacKey,
    ) -> Result<(), crate::AuditError> {
        let tail = crate::events::RegisterTailEvent {
            session: session.to_string(),
            bytes: self.view.bytes,
            lines: self.view.lines,
            last_at: self.view.last_at,
            records: self.view.records.clone(),
        };
        crate::journal::write_tail(
            &register_tail_path(&self.path),
            crate::events::KIND_REGISTER_TAIL,
            &serde_json::to_value(&tail).unwrap_or(serde_json::Value::Null),
            &self.view.head,
            tail_key,
            self.uid,
            false,
        )
    }
}

impl Drop for LockedRegister {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}
