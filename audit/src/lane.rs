//! What a writer of the journal layout does at `open` before it writes its first line: take a
//! lane, learn where the lane's journal ends from its tail state (reading nothing before the
//! last line the tail names), recover the sessions that died after it, check the evidence
//! against the register's tail state and the ctimes, and say how the previous session ended.
//!
//! The cost does not grow with history: the tail state, the journal's last line, the lines of
//! sessions that died since the last close, the register's tail state and its last line, and
//! the tail states of the project's other lanes. Only when a tail state is missing, stale or
//! under another key (after a crash between an append and its tail, or a key change) does the
//! writer read a whole file — and then checks every line of it with its secret.

use std::path::Path;

use crate::error::AuditError;
use crate::events::{
    head_hex, Attest, AttestState, LegacyIndex, TailEvent, UnverifiedLine, KIND_END, KIND_SEAL,
    KIND_TAIL,
};
use crate::fsx;
use crate::journal::{self, LockedLane, Segment};
use crate::keys::InstallSecret;
use crate::layout::{self, split_lines};
use crate::line;
use crate::register::RegisterView;
use crate::report::{Code, Finding, Severity};
use crate::util::{ct_eq, hex, parse_time, sha256, Hash, ZERO_HASH};

/// Where the writer is and what it saw before it changed anything.
pub(crate) struct OpenCtx<'a> {
    pub root: &'a Path,
    pub reg_path: &'a Path,
    pub dir: &'a Path,
    pub dir_name: &'a str,
    pub session: &'a str,
    pub uid: u32,
    pub fsync: bool,
    pub root_meta: &'a Option<std::fs::Metadata>,
    pub register_meta: &'a Option<std::fs::Metadata>,
    pub dir_meta: &'a Option<std::fs::Metadata>,
}

/// The lane's state for the new session.
pub(crate) struct LaneStart {
    /// The journal's length, line count and last line's offset (after a torn tail was cut).
    pub bytes: u64,
    pub lines: u64,
    pub last_at: u64,
    pub prev_session: Option<Attest>,
    pub recovered: Vec<Attest>,
    pub found: Vec<Finding>,
    pub unverified: Vec<UnverifiedLine>,
    pub legacy_index: Option<LegacyIndex>,
    /// Whether the lane's checkpoint file exists.
    pub ckpt_exists: bool,
    /// Sessions in the journal before this one, and closes since retention last looked
    /// (`u64::MAX`: unknown, look at the next close).
    pub sessions: u64,
    pub unchecked: u64,
}

/// How a segment ended: its complete lines, its last line's hash, and whether its last two
/// lines are `session_end` and `seal` (closed).
fn segment_end(seg: &Segment<'_>) -> (u64, Hash, bool) {
    let (lines, _) = split_lines(seg.data);
    let kind = |l: &[u8]| {
        line::split_mac(l)
            .and_then(|(p, _)| line::parse_header(p))
            .map(|h| h.kind.to_string())
    };
    let n = lines.len();
    let closed = n >= 2
        && kind(lines[n - 1].1).as_deref() == Some(KIND_SEAL)
        && kind(lines[n - 2].1).as_deref() == Some(KIND_END);
    let head = lines.last().map_or(ZERO_HASH, |(_, l)| sha256(l));
    (n as u64, head, closed)
}

/// The time of a line, if it parses.
fn line_time(bytes: &[u8]) -> Option<u64> {
    let (prefix, _) = line::split_mac(bytes)?;
    parse_time(line::parse_header(prefix)?.time)
}

/// Checks the sessions of `data` (journal bytes from offset `base_off`, line `base_line`) with
/// the writer's secret: errors go to `found`, sessions under another key id to `unverified`.
/// Returns the time of the last authentic line.
fn check_segments(
    path: &Path,
    dir_name: &str,
    segs: &[Segment<'_>],
    (base_off, base_line): (u64, u64),
    secret: &InstallSecret,
    found: &mut Vec<Finding>,
    unverified: &mut Vec<UnverifiedLine>,
) -> Option<u64> {
    let mut last: Option<u64> = None;
    let own = hex(&secret.key_id());
    for seg in segs.iter().filter(|s| !s.session.is_empty()) {
        let first = seg.data.split(|&c| c == b'\n').next().unwrap_or(b"");
        let mac_ok = line::split_mac(first).is_some_and(|(prefix, mac)| {
            layout::valid_session_id(&seg.session)
                && ct_eq(
                    &secret.session_key(dir_name, &seg.session).mac(prefix),
                    &mac,
                )
        });
        let claimed = line::split_mac(first)
            .and_then(|(p, _)| line::parse_header(p))
            .and_then(|h| crate::json::parse(h.event).ok())
            .and_then(|v| {
                v.get("key_id")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        if !mac_ok && claimed != own {
            // Not checkable here, and anyone can write a line under a made-up key id: build on
            // it only by naming it, and take no time from it.
            unverified.push(UnverifiedLine {
                file: "journal".into(),
                line: base_line + seg.line + 1,
                key_id: claimed,
                hash: hex(&sha256(first)),
            });
            continue;
        }
        let scan = crate::verify::scan_session(
            path,
            Some(dir_name),
            &seg.session,
            seg.data,
            Some(secret),
            false,
        );
        for mut f in scan.findings {
            f.offset = f.offset.map(|o| o + base_off + seg.offset);
            f.line = f.line.map(|l| l + base_line + seg.line);
            found.push(f);
        }
        if let Some(t) = scan.last_time_ms {
            last = Some(last.map_or(t, |m: u64| m.max(t)));
        }
    }
    last
}

/// What another lane says about the project folder: whether a writer holds it, the time of
/// its last write Garuda recorded (its tail state's time, or a later authentic line), and, when
/// its last session's writer died, that session as found. The dead session is then written
/// into the lane's tail state (as recovered), so that it is recorded once, not by every run.
fn other_lane(
    ctx: &OpenCtx<'_>,
    lane: u64,
    secret: &InstallSecret,
) -> (bool, Option<u64>, Option<Attest>) {
    let path = ctx.dir.join(journal::journal_file_name(lane));
    let Ok(file) = fsx::open_read(&path) else {
        return (false, None, None);
    };
    // Exclusive: no writer can take the lane while its tail state is written here.
    if file.try_lock().is_err() {
        return (true, None, None);
    }
    let size = file.metadata().map_or(0, |m| m.len());
    let tail_path = ctx.dir.join(journal::tail_file_name(lane));
    let tail = journal::read_tail::<TailEvent>(&tail_path, ctx.uid, KIND_TAIL).filter(|t| {
        t.event.bytes <= size
            && layout::valid_session_id(&t.event.session)
            && t.mac_ok(&secret.index_key(ctx.dir_name, &t.event.session))
    });
    let from = tail.as_ref().map_or(0, |t| t.event.bytes);
    let mut last = tail.as_ref().and_then(|t| t.time_ms);
    let mut found = None;
    if from < size {
        if let Ok(data) = journal::read_from(&file, &path, from, size) {
            let segs = journal::segments(&data);
            let t = check_segments(
                &path,
                ctx.dir_name,
                &segs,
                (from, 0),
                secret,
                &mut Vec::new(),
                &mut Vec::new(),
            );
            last = last.max(t);
            let (lines, _) = split_lines(&data);
            let dead = segs.iter().rev().find(|s| !s.session.is_empty());
            if let (Some(seg), Some((at, l))) = (dead, lines.last()) {
                let (n, h, closed) = segment_end(seg);
                if !closed && n > 0 && layout::valid_session_id(&seg.session) {
                    let ev = TailEvent {
                        session: seg.session.clone(),
                        key_id: hex(&secret.key_id()),
                        bytes: from + at + l.len() as u64 + 1,
                        lines: tail.as_ref().map_or(0, |t| t.event.lines) + lines.len() as u64,
                        last_at: from + at,
                        session_lines: n,
                        sessions: tail.as_ref().map_or(0, |t| t.event.sessions)
                            + segs.iter().filter(|s| !s.session.is_empty()).count() as u64,
                        unchecked: tail.as_ref().map_or(u64::MAX, |t| t.event.unchecked),
                        recovered: true,
                    };
                    let written = journal::write_tail(
                        &tail_path,
                        KIND_TAIL,
                        &serde_json::to_value(&ev).unwrap_or(serde_json::Value::Null),
                        &h,
                        &secret.index_key(ctx.dir_name, &seg.session),
                        ctx.uid,
                        false,
                    );
                    if written.is_ok() {
                        found = Some(Attest {
                            session: seg.session.clone(),
                            state: AttestState::Recovered,
                            lines: n,
                            head: head_hex(&h),
                        });
                    }
                }
            }
        }
    }
    let _ = file.unlock();
    (false, last, found)
}

/// Learns the lane's state and surveys the evidence (see the module doc).
pub(crate) fn start(
    ctx: &OpenCtx<'_>,
    lock: &mut LockedLane,
    register: &RegisterView,
    secret: &InstallSecret,
) -> Result<LaneStart, AuditError> {
    let slack = u64::try_from(crate::verify::DEFAULT_CTIME_SLACK.as_millis()).unwrap_or(u64::MAX);
    let own = hex(&secret.key_id());
    let path = lock.path.clone();
    let mut found: Vec<Finding> = Vec::new();
    let mut unverified: Vec<UnverifiedLine> = register.unverified.clone();
    let size = lock.meta.len();
    let tail_path = ctx.dir.join(journal::tail_file_name(lock.lane));
    let tail = journal::read_tail::<TailEvent>(&tail_path, ctx.uid, KIND_TAIL);
    let tail = tail.filter(|t| {
        t.event.key_id == own
            && layout::valid_session_id(&t.event.session)
            && t.mac_ok(&secret.index_key(ctx.dir_name, &t.event.session))
    });
    let mut fast: Option<(u64, u64)> = None; // (last_at, lines before the last line)
    let mut tail_line_time = None;
    // A tail state or register record one archive rewrite behind the journal (its close was
    // killed between the rewrite and their successors) names the journal as it was: where its
    // lines went is checked before anything is reported (`archive::reached_before_rewrite`).
    // Only records this secret made are followed: a forged one could otherwise excuse a cut.
    let authentic = |first: &[u8]| {
        line::split_mac(first).is_some_and(|(prefix, mac)| {
            crate::archive::named_by(first).is_some_and(|(ev, _)| {
                layout::valid_session_id(&ev.by)
                    && ct_eq(&secret.index_key(ctx.dir_name, &ev.by).mac(prefix), &mac)
            })
        })
    };
    let before_rewrite = |end: u64, head: &str| {
        journal::read_from(&lock.file, &path, 0, size).is_ok_and(|all| {
            crate::archive::reached_before_rewrite(ctx.dir, lock.lane, &all, end, head, &authentic)
        })
    };
    if let Some(t) = &tail {
        let ev = &t.event;
        if ev.bytes > size && before_rewrite(ev.bytes, &hex(&t.head)) {
            // Stale, not cut: the whole journal is read below.
        } else if ev.bytes > size {
            found.push(Finding::new(
                &path,
                Code::Truncated,
                Severity::Error,
                format!(
                    "the journal has {size} bytes; its tail state, written when session {} closed, records {} ({} lines): lines were cut from its end",
                    ev.session, ev.bytes, ev.lines
                ),
            ));
        } else {
            match journal::line_ending_at(&lock.file, ev.bytes) {
                Some((at, bytes)) if at == ev.last_at && ct_eq(&sha256(&bytes), &t.head) => {
                    tail_line_time = line_time(&bytes);
                    fast = Some((ev.last_at, ev.lines.saturating_sub(1)));
                }
                _ if before_rewrite(ev.bytes, &hex(&t.head)) => {}
                _ => found.push(
                    Finding::new(
                        &path,
                        Code::RootMismatch,
                        Severity::Error,
                        format!(
                            "line {} of the journal is not the one its tail state records as the last line when session {} closed",
                            ev.lines, ev.session
                        ),
                    )
                    .at(Some(ev.last_at), ev.lines),
                ),
            }
        }
    }
    let (base_off, base_line) = fast.unwrap_or((0, 0));
    let mut data = journal::read_from(&lock.file, &path, base_off, size)?;
    let (lines, torn) = split_lines(&data);
    let n_lines = lines.len() as u64;
    let last_rel = lines.last().map(|(o, _)| *o);
    if let Some((offset, _)) = torn {
        // A writer died in the middle of a line: cut it, or the next line would be glued to it.
        let keep = base_off + offset;
        lock.file
            .set_len(keep)
            .map_err(|e| AuditError::io(&path, e))?;
        if ctx.fsync {
            lock.file
                .sync_data()
                .map_err(|e| AuditError::io(&path, e))?;
        }
        data.truncate(offset as usize);
    }
    let bytes = base_off + data.len() as u64;
    let total_lines = base_line + n_lines;
    let last_at = last_rel.map_or(0, |o| base_off + o);
    let segs = journal::segments(&data);
    // In the fast path the first segment is the tail's own last line (not a session start).
    let sessions: Vec<Segment<'_>> = segs
        .iter()
        .filter(|s| !s.session.is_empty())
        .cloned()
        .collect();
    if let (Some(t), Some(s)) = (&tail, segs.first().filter(|s| s.session.is_empty())) {
        // The fast path: the first segment starts with the tail's last line. A closed (or
        // recovered) session writes nothing after that line, and the next session starts
        // with a session_start: complete lines in between are someone else's, as the slow
        // path (which checks every session) finds too.
        let after = split_lines(s.data).0;
        if fast.is_some() && after.len() > 1 {
            found.push(
                Finding::new(
                    &path,
                    Code::AfterEnd,
                    Severity::Error,
                    format!(
                        "{} line(s) after the end the lane's tail state records (session {})",
                        after.len() - 1,
                        t.event.session
                    ),
                )
                .at(Some(base_off + after[1].0), base_line + 2),
            );
        }
    }
    if fast.is_none() {
        if let Some(s) = segs.first().filter(|s| s.session.is_empty()) {
            // Lines before the first session: a retention record is fine (verify checks it),
            // anything else is damage.
            let first = s.data.split(|&c| c == b'\n').next().unwrap_or(b"");
            let pruned = line::split_mac(first)
                .and_then(|(p, _)| line::parse_header(p))
                .is_some_and(|h| h.kind == crate::events::KIND_PRUNED);
            let lines_before = split_lines(s.data).0.len() as u64;
            if !pruned || lines_before > 1 {
                found.push(
                    Finding::new(
                        &path,
                        Code::Malformed,
                        Severity::Error,
                        "lines before the journal's first session_start",
                    )
                    .at(Some(0), 1),
                );
            }
        }
    }
    let last_time = check_segments(
        &path,
        ctx.dir_name,
        &sessions,
        (base_off, base_line),
        secret,
        &mut found,
        &mut unverified,
    );
    let journal_time = last_time.max(tail_line_time);

    // How the previous session of the lane ended.
    let mut prev_session = match sessions.last() {
        Some(seg) => {
            let (n, h, closed) = segment_end(seg);
            Some(Attest {
                session: seg.session.clone(),
                state: if closed {
                    AttestState::Closed
                } else {
                    AttestState::Recovered
                },
                lines: n,
                head: head_hex(&h),
            })
        }
        None => match (&tail, fast) {
            (Some(t), Some(_)) => Some(Attest {
                session: t.event.session.clone(),
                state: if t.event.recovered {
                    AttestState::Recovered
                } else {
                    AttestState::Closed
                },
                lines: t.event.session_lines,
                head: head_hex(&t.head),
            }),
            _ => None,
        },
    };
    if fast.is_none() && prev_session.is_none() {
        // An empty journal after a retention record cannot happen (the pruning session stays);
        // a journal of only a retention record links to the last pruned session.
        if let Some(s) = segs.first() {
            let first = s.data.split(|&c| c == b'\n').next().unwrap_or(b"");
            prev_session = line::split_mac(first)
                .and_then(|(p, _)| line::parse_header(p))
                .filter(|h| h.kind == crate::events::KIND_PRUNED)
                .and_then(|h| crate::json::parse(h.event).ok())
                .and_then(|v| serde_json::from_value::<crate::events::PrunedEvent>(v).ok())
                .map(|p| p.last);
        }
    }

    // The old layout: the first journal session of a project written before records the old
    // index as it finds it, and recovers the old sessions whose writer died, once.
    let mut recovered = Vec::new();
    let mut legacy_index = None;
    let index_path = ctx.dir.join(layout::INDEX_FILE);
    if lock.lane == 0 && bytes == 0 && std::fs::symlink_metadata(&index_path).is_ok() {
        let index = crate::index::ReadIndex::read(&index_path, ctx.uid)?;
        let (prev, rec) = crate::writer::attest_others(ctx.dir, &index.events);
        prev_session = prev;
        recovered = rec;
        legacy_index = Some(LegacyIndex {
            lines: index.lines,
            head: head_hex(&index.head),
        });
        let (problems, unv) =
            crate::writer::legacy_survey(ctx, &index, register.record(ctx.dir_name, None), secret);
        found.extend(problems);
        unverified.extend(unv);
    }

    // The register's last record of this lane: the journal must still reach it.
    if let Some(rec) = register
        .record(ctx.dir_name, Some(lock.lane))
        .filter(|r| r.session != ctx.session && r.lines > 0)
    {
        let rb = rec.bytes.unwrap_or(0);
        let stale = || {
            journal::read_from(&lock.file, &path, 0, bytes).is_ok_and(|all| {
                crate::archive::reached_before_rewrite(
                    ctx.dir, lock.lane, &all, rb, &rec.head, &authentic,
                )
            })
        };
        if rb > bytes && stale() {
            // One archive rewrite behind the journal (see the tail state above).
        } else if rb > bytes {
            found.push(Finding::new(
                &path,
                Code::Truncated,
                Severity::Error,
                format!(
                    "the register records {} line(s) ({rb} bytes) of this journal after session {}; it has {bytes} bytes: lines were removed, or the project folder was rolled back",
                    rec.lines, rec.session
                ),
            ));
        } else {
            let ok = journal::line_ending_at(&lock.file, rb)
                .is_some_and(|(_, b)| hex(&sha256(&b)) == rec.head);
            if !ok && !stale() {
                found.push(Finding::new(
                    &path,
                    Code::RootMismatch,
                    Severity::Error,
                    format!(
                        "the journal's line {} is not the one the register records after session {}: the journal was rewritten or replaced",
                        rec.lines, rec.session
                    ),
                ));
            }
        }
    }
    // ctimes against the last recorded writes.
    let late = |p: &Path, meta: &Option<std::fs::Metadata>, t: Option<u64>, what: &str| {
        let (Some(meta), Some(t)) = (meta, t) else {
            return None;
        };
        let c = fsx::ctime_ms(meta);
        (c > t.saturating_add(slack)).then(|| {
            Finding::new(
                p,
                Code::ChangedAfterWrite,
                Severity::Error,
                format!("changed {} ms after {what}", c - t),
            )
        })
    };
    found.extend(late(
        ctx.root,
        ctx.root_meta,
        register.anchor_ms,
        "the register's last entry",
    ));
    found.extend(late(
        ctx.reg_path,
        ctx.register_meta,
        register.anchor_ms,
        "its last entry",
    ));
    if !lock.created {
        // The tail state (MACed under this secret) is written after a close's rewrite of the
        // journal, whose rename moves the journal's ctime past its last line's time by the
        // archive's compression and syncs.
        found.extend(late(
            &path,
            &Some(lock.meta.clone()),
            journal_time.max(tail.as_ref().and_then(|t| t.time_ms)),
            "the journal's last line",
        ));
    }
    let mut recorded = journal_time.max(tail.as_ref().and_then(|t| t.time_ms));
    let mut live = false;
    // Lanes are created in order and never removed: probe them by name (not by listing the
    // folder, which may hold an old layout's thousands of files).
    for lane in (0..journal::MAX_LANES).filter(|&l| l != lock.lane) {
        if std::fs::symlink_metadata(ctx.dir.join(journal::journal_file_name(lane))).is_err() {
            if lane > lock.lane {
                break;
            }
            continue;
        }
        let (l, t, dead) = other_lane(ctx, lane, secret);
        live |= l;
        recorded = recorded.max(t);
        recovered.extend(dead);
    }
    if legacy_index.is_some() {
        // The old layout's files were written before: its own record is the index's.
        recorded = recorded.max(
            crate::index::ReadIndex::read(&index_path, ctx.uid)
                .ok()
                .and_then(|i| i.last_time_ms),
        );
    }
    if !live {
        found.extend(late(
            ctx.dir,
            ctx.dir_meta,
            recorded,
            "the last write Garuda recorded in it",
        ));
    }
    let ckpt_exists =
        std::fs::symlink_metadata(ctx.dir.join(journal::lane_ckpt_file_name(lock.lane))).is_ok();
    let (sessions_before, unchecked) = match (&tail, fast) {
        (Some(t), Some(_)) => (t.event.sessions + sessions.len() as u64, t.event.unchecked),
        _ => (sessions.len() as u64, u64::MAX),
    };
    Ok(LaneStart {
        bytes,
        lines: total_lines,
        last_at,
        prev_session,
        recovered,
        found,
        unverified,
        legacy_index,
        ckpt_exists,
        sessions: sessions_before,
        unchecked,
    })
}
