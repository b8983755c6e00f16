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
    /// The last authentic record of each project.
    pub last: HashMap<String, RegisterEvent>,
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
pub(crate) fn check_register(
    path: &Path,
    data: &[u8],
    keys: &[InstallSecret],
    accept_unknown_keys: bool,
    exclude_session: Option<&str>,
    findings: &mut Vec<Finding>,
) -> RegisterInfo {
    let mut info = RegisterInfo::default();
    let (lines, torn) = split_lines(data);
    info.lines = lines.len() as u64;
    let mut prev: Hash = ZERO_HASH;
    let mut prev_bad = false;
    for (i, (offset, bytes)) in lines.iter().enumerate() {
        let line_no = i as u64 + 1;
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
                            if h.seq != i as u64 {
                                findings.push(at(
                                    if h.seq > i as u64 {
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
