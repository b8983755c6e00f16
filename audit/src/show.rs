//! `garuda audit show`: the lines of a session that verify, and nothing else.

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

/// The sessions of a project folder: in the index's order, then any file it does not list.
/// Reads only; the index is not checked here (that is [`crate::verify`]'s job).
pub fn list_sessions(project_dir: &Path) -> Result<Vec<String>, AuditError> {
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
    ids.extend(crate::journal::session_ids(project_dir));
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
    // The key that authenticates the first line; without one, nothing can be shown.
    let key = keys.iter().find(|k| {
        data.split(|&c| c == b'\n')
            .next()
            .and_then(line::split_mac)
            .is_some_and(|(prefix, mac)| k.session_key(&project, session_id).mac(prefix) == mac)
    });
    let Some(key) = key else {
        return Ok(Shown {
            session: session_id.to_string(),
            lines: Vec::new(),
            stopped: Some(Finding {
                file: path,
                offset: Some(0),
                line: Some(1),
                seq: None,
                epoch: None,
                code: crate::Code::KeyUnknown,
                severity: Severity::Undecidable,
                message: "no given key authenticates the first line".into(),
            }),
        });
    };
    let mut scan = scan_session(&path, Some(&project), session_id, &data, Some(key), true);
    crate::journal::rebase(&mut scan, base);
    let stopped = scan
        .findings
        .into_iter()
        .find(|f| f.severity == Severity::Error);
    Ok(Shown {
        session: session_id.to_string(),
        lines: scan.shown,
        stopped,
    })
}
