//! `garuda audit show`: the lines of a session that verify, and nothing else.
//!
//! A line's event holds what a command chose (its argument vector, the hosts it was refused),
//! so the display ([`Shown::render_text`]) prints it as JSON with every control,
//! bidirectional and invisible character as a JSON `\uXXXX` escape
//! ([`garuda_text::visible_json`]): an argument with a newline or an escape sequence cannot
//! add a line or drive the terminal, and the text is still the event's exact JSON.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::AuditError;
use crate::fsx;
use crate::index::{parse_event, IndexEvent};
use crate::keys::InstallSecret;
use crate::layout::{self, split_lines, INDEX_FILE};
use crate::line;
use crate::report::{Finding, Severity};
use crate::verify::{scan_session, ShownLine};

/// A session's verified lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shown {
    /// The session id.
    pub session: String,
    /// The lines, in order, up to the first line that does not verify.
    pub lines: Vec<ShownLine>,
    /// The first error, where showing stopped (`None`: every line verified).
    pub stopped: Option<Finding>,
}

impl Shown {
    /// The lines for a terminal, one per line, then where showing stopped.
    pub fn render_text(&self) -> String {
        use garuda_text::{visible, visible_json};
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "session {}", visible(&self.session));
        for l in &self.lines {
            let _ = writeln!(
                out,
                "{:>5} seq {:<5} epoch {:<3} {} {:<16} {}",
                l.line,
                l.seq,
                l.epoch,
                visible(&l.time),
                visible(&l.kind),
                visible_json(&l.event.to_string())
            );
        }
        if let Some(f) = &self.stopped {
            let _ = writeln!(
                out,
                "stopped at line {}: {}: {}",
                f.line.unwrap_or(0),
                f.code,
                visible(&f.message)
            );
        }
        out
    }
}

/// The sessions of a project folder: in the index's order, then any file it does not list,
/// then the journal's sessions, oldest first. Reads only; the index is not checked here (that
/// is [`crate::verify`]'s job).
pub fn list_sessions(project_dir: &Path) -> Result<Vec<String>, AuditError> {
    let mut ids = legacy_session_ids(project_dir)?;
    ids.extend(crate::journal::session_ids(project_dir));
    Ok(ids)
}

/// The old layout's sessions: in the index's order, then any session file it does not list.
fn legacy_session_ids(project_dir: &Path) -> Result<Vec<String>, AuditError> {
    let mut ids: Vec<String> = Vec::new();
    let index_path = project_dir.join(INDEX_FILE);
    match fsx::open_read(&index_path) {
        Ok(mut f) => {
            let mut data = Vec::new();
            f.read_to_end(&mut data)
                .map_err(|e| AuditError::io(&index_path, e))?;
            for (_, l) in split_lines(&data).0 {
                let Some(h) = line::split_mac(l).and_then(|(p, _)| line::parse_header(p)) else {
                    continue;
                };
                if let Ok(IndexEvent::Start(s)) = parse_event(h.kind, h.event) {
                    if layout::valid_session_id(&s.session) && !ids.contains(&s.session) {
                        ids.push(s.session);
                    }
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AuditError::io(&index_path, e)),
    }
    let mut extra = Vec::new();
    for e in std::fs::read_dir(project_dir).map_err(|e| AuditError::io(project_dir, e))? {
        let e = e.map_err(|e| AuditError::io(project_dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".jsonl") {
            if name != INDEX_FILE
                && !crate::journal::is_journal_name(&name)
                && layout::valid_session_id(id)
                && !ids.iter().any(|i| i == id)
            {
                extra.push(id.to_string());
            }
        }
    }
    extra.sort();
    ids.extend(extra);
    Ok(ids)
}

/// Reads a session and returns its lines that verify (MAC, `seq`, `prev`, `epoch`), stopping
/// at the first that does not. Evidence outside the file (index, checkpoint, witness) is not
/// consulted: run [`crate::verify`] for that.
pub fn show(
    project_dir: &Path,
    session_id: &str,
    keys: &[InstallSecret],
) -> Result<Shown, AuditError> {
    if !layout::valid_session_id(session_id) {
        return Err(AuditError::Format {
            path: project_dir.to_path_buf(),
            reason: format!("{session_id:?} is not a session id"),
        });
    }
    let path = project_dir.join(layout::log_file_name(session_id));
    let project = project_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The journal layout: the session's part of its lane (line numbers are the journal's).
    let (path, data, base) = match crate::journal::find_session(project_dir, session_id) {
        Some((p, d, base)) if !path.exists() => (p, d, base),
        _ => {
            let mut f = fsx::open_read(&path).map_err(|e| AuditError::io(&path, e))?;
            let mut data = Vec::new();
            f.read_to_end(&mut data)
                .map_err(|e| AuditError::io(&path, e))?;
            (path, data, (0, 0))
        }
    };
    Ok(shown_of(&path, &project, session_id, &data, base, keys))
}

/// Every session of a project folder with its lines that verify, as [`show`] gives one,
/// reading each file once: the old layout's session files (in [`list_sessions`]'s order),
/// then each journal lane, its sessions in the order they were written. For `garuda audit
/// list`, which reads the whole history; nothing on the writer's path calls it.
pub fn show_each(
    project_dir: &Path,
    keys: &[InstallSecret],
    mut each: impl FnMut(Shown),
) -> Result<(), AuditError> {
    let project = project_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The old layout: one file per session (the journal's sessions are in its lanes).
    for id in legacy_session_ids(project_dir)? {
        let path = project_dir.join(layout::log_file_name(&id));
        match fsx::open_read(&path) {
            Ok(mut f) => {
                let mut data = Vec::new();
                f.read_to_end(&mut data)
                    .map_err(|e| AuditError::io(&path, e))?;
                each(shown_of(&path, &project, &id, &data, (0, 0), keys));
            }
            // The index names it and its file is gone: listed as such (verify says more).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => each(Shown {
                session: id,
                lines: Vec::new(),
                stopped: Some(Finding {
                    file: path,
                    offset: None,
                    line: None,
                    seq: None,
                    epoch: None,
                    code: crate::Code::FileMissing,
                    severity: Severity::Error,
                    message: "the project index names this session; its file is gone".into(),
                }),
            }),
            Err(e) => return Err(AuditError::io(&path, e)),
        }
    }
    for lane in 0..crate::journal::MAX_LANES {
        let path = project_dir.join(crate::journal::journal_file_name(lane));
        let data = match fsx::open_read(&path) {
            Ok(mut f) => {
                let mut data = Vec::new();
                f.read_to_end(&mut data)
                    .map_err(|e| AuditError::io(&path, e))?;
                data
            }
            // Lanes are taken lowest first: the first one missing after lane 0 ends them.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if lane > 0 {
                    break;
                }
                continue;
            }
            Err(e) => return Err(AuditError::io(&path, e)),
        };
        // The lane's archives first (oldest first), then its journal.
        for (path, data) in crate::archive::lane_files(project_dir, lane, (path, data)) {
            for seg in crate::journal::segments(&data) {
                // Lines before the first session (a retention or archive record, or damage)
                // are verify's.
                if seg.session.is_empty() || !layout::valid_session_id(&seg.session) {
                    continue;
                }
                each(shown_of(
                    &path,
                    &project,
                    &seg.session,
                    seg.data,
                    (seg.offset, seg.line),
                    keys,
                ));
            }
        }
    }
    Ok(())
}

/// A session's verified lines from its bytes (`base`: where they start in their file).
fn shown_of(
    path: &Path,
    project: &str,
    session_id: &str,
    data: &[u8],
    base: (u64, u64),
    keys: &[InstallSecret],
) -> Shown {
    // The key that authenticates the first line; without one, nothing can be shown.
    let key = keys.iter().find(|k| {
        data.split(|&c| c == b'\n')
            .next()
            .and_then(line::split_mac)
            .is_some_and(|(prefix, mac)| k.session_key(project, session_id).mac(prefix) == mac)
    });
    let Some(key) = key else {
        return Shown {
            session: session_id.to_string(),
            lines: Vec::new(),
            stopped: Some(Finding {
                file: path.to_path_buf(),
                offset: Some(base.0),
                line: Some(base.1 + 1),
                seq: None,
                epoch: None,
                code: crate::Code::KeyUnknown,
                severity: Severity::Undecidable,
                message: "no given key authenticates the first line".into(),
            }),
        };
    };
    let mut scan = scan_session(path, Some(project), session_id, data, Some(key), true);
    crate::journal::rebase(&mut scan, base);
    let stopped = scan
        .findings
        .into_iter()
        .find(|f| f.severity == Severity::Error);
    Shown {
        session: session_id.to_string(),
        lines: scan.shown,
        stopped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_argument_cannot_forge_a_line_or_reach_the_terminal() {
        let argv = "a\nstopped at line 1: BadMac: forged\x1b[2K\u{202e}\u{9b}31m\x7f";
        let shown = Shown {
            session: "s1".into(),
            lines: vec![ShownLine {
                line: 2,
                seq: 1,
                epoch: 0,
                time: "2025-01-01T00:00:00.000Z".into(),
                kind: "command_intent".into(),
                event: serde_json::json!({ "argv": ["sh", argv] }),
            }],
            stopped: None,
        };
        let text = shown.render_text();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.lines().any(|l| l.starts_with("stopped")), "{text}");
        assert!(
            text.contains(
                r#"{"argv":["sh","a\nstopped at line 1: BadMac: forged\u001b[2K\u202e\u009b31m\u007f"]}"#
            ),
            "{text}"
        );
        assert!(!text.chars().any(|c| c != '\n' && garuda_text::is_hidden(c)));
        // What is printed is still the event's JSON, with the same value.
        let json = text
            .lines()
            .nth(1)
            .unwrap()
            .split_once("command_intent")
            .unwrap()
            .1;
        let back: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(back["argv"][1], argv);
        // Negative control: the event's own JSON text has the bidirectional override, the C1
        // CSI and DEL raw (JSON escapes only the C0 controls).
        let plain = shown.lines[0].event.to_string();
        assert!(plain.contains('\u{202e}') && plain.contains('\u{9b}') && plain.contains('\x7f'));
    }
}
