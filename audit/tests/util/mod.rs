//! Helpers shared by the audit integration tests: a private Garuda home and project in a
//! temporary folder, session writing, line surgery, and assertions on reports.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use garuda_audit::{
    project_audit_dir, AuditConfig, Code, InstallSecret, Outcome, Report, SessionWriter, Severity,
    VerifyOptions, VerifyTarget, WitnessConfig,
};
use serde_json::json;

/// A Garuda home, a project and (optionally) a witness folder, all in one temporary folder.
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub cfg: AuditConfig,
    pub witness_dir: PathBuf,
}

impl Env {
    /// Checkpoints on, no witness, 4 lines per epoch, no time-based epochs, no fsync.
    pub fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let project = tmp.path().join("project");
        fs::create_dir(&project).unwrap();
        let mut cfg = AuditConfig::new(&tmp.path().join("garuda"), &project);
        cfg.epoch_max_lines = 4;
        cfg.epoch_max_age = Duration::from_secs(3600);
        cfg.fsync = false;
        let witness_dir = tmp.path().join("witness");
        Env {
            tmp,
            cfg,
            witness_dir,
        }
    }

    pub fn with_witness(mut self) -> Env {
        self.cfg.witness = Some(WitnessConfig::Dir(self.witness_dir.clone()));
        self
    }

    pub fn without_checkpoints(mut self) -> Env {
        self.cfg.checkpoints = false;
        self
    }

    /// The project's audit folder.
    pub fn dir(&self) -> PathBuf {
        project_audit_dir(&self.cfg.audit_root, &self.cfg.project_root).unwrap()
    }

    /// The project's audit folder name.
    pub fn dir_name(&self) -> String {
        self.dir()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    pub fn key(&self) -> InstallSecret {
        InstallSecret::load(&self.cfg.keys_dir).unwrap().unwrap()
    }

    pub fn options(&self) -> VerifyOptions {
        let mut o = VerifyOptions::new(VerifyTarget::Project(self.dir()), vec![self.key()]);
        o.keys_dir = Some(self.cfg.keys_dir.clone());
        o
    }

    /// Verify with the witness folder as witness.
    pub fn options_with_witness(&self) -> VerifyOptions {
        let mut o = self.options();
        o.witness = Some(WitnessConfig::Dir(self.witness_dir.clone()));
        o
    }

    pub fn verify(&self) -> Report {
        garuda_audit::verify(&self.options())
    }

    /// Writes a session of `events` appended lines; closes it when `close`, else drops the
    /// writer (as a crash would). Returns the session's log path.
    pub fn session(&self, events: usize, close: bool) -> PathBuf {
        let mut w = SessionWriter::open(&self.cfg, json!({"argv": ["garuda", "sandbox"]})).unwrap();
        for i in 0..events {
            if i % 3 == 0 {
                w.append_durable("command_intent", json!({"cmd": format!("cmd-{i}")}))
                    .unwrap();
            } else {
                w.append(
                    "command_result",
                    json!({"cmd": format!("cmd-{i}"), "exit": 0}),
                )
                .unwrap();
            }
        }
        let path = w.path().to_path_buf();
        if close {
            w.close(json!({"reason": "done"})).unwrap();
        }
        path
    }
}

/// The lines of a file, each without its newline (a torn tail is returned as a last line).
pub fn read_lines(path: &Path) -> Vec<Vec<u8>> {
    let data = fs::read(path).unwrap();
    let mut lines: Vec<Vec<u8>> = data.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
    if lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    lines
}

/// Writes lines back, each with a newline, keeping the file's mode.
pub fn write_lines(path: &Path, lines: &[Vec<u8>]) {
    let mut data = Vec::new();
    for l in lines {
        data.extend_from_slice(l);
        data.push(b'\n');
    }
    fs::write(path, data).unwrap();
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

pub fn hex(b: &[u8]) -> String {
    garuda_audit::hex(b)
}

/// The `prev` field of a line.
pub fn prev_of(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(line);
    let i = s.find("\"prev\":\"").unwrap() + 8;
    s[i..i + 64].to_string()
}

/// Replaces the `prev` field of a line (leaving its MAC stale).
pub fn set_prev(line: &[u8], prev: &[u8; 32]) -> Vec<u8> {
    let s = String::from_utf8_lossy(line).into_owned();
    let i = s.find("\"prev\":\"").unwrap() + 8;
    format!("{}{}{}", &s[..i], hex(prev), &s[i + 64..]).into_bytes()
}

/// Replaces `from` by `to` in a line (once).
pub fn replace(line: &[u8], from: &str, to: &str) -> Vec<u8> {
    let s = String::from_utf8_lossy(line);
    assert!(s.contains(from), "{from:?} not in {s}");
    s.replacen(from, to, 1).into_bytes()
}

/// Recomputes a line's MAC under `key` (what an attacker holding that key can do).
pub fn remac(line: &[u8], key: &garuda_audit::keys::EpochKey) -> Vec<u8> {
    let cut = line.len() - 74;
    let prefix = &line[..cut];
    let mut out = prefix.to_vec();
    out.extend_from_slice(b",\"mac\":\"");
    out.extend_from_slice(hex(&key.mac(prefix)).as_bytes());
    out.extend_from_slice(b"\"}");
    out
}

/// The seed design's check: each line's `prev` is the SHA-256 of the line before.
pub fn plain_chain_ok(lines: &[Vec<u8>]) -> bool {
    lines
        .windows(2)
        .all(|w| prev_of(&w[1]) == hex(&sha256(&w[0])))
}

/// The session id of an old-layout session file; for a journal (the layout sessions are
/// written in now), the id of its newest session.
pub fn session_id(path: &Path) -> String {
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    if !stem.starts_with("journal") {
        return stem;
    }
    session_ids(path).pop().expect("a session in the journal")
}

/// The sessions of a journal, in order (the `session` of every `session_start` line).
pub fn session_ids(journal: &Path) -> Vec<String> {
    read_lines(journal)
        .iter()
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "session_start")
        .map(|v| v["event"]["session"].as_str().unwrap().to_string())
        .collect()
}

/// Asserts that the report has a finding with `code` at `line` in `file` (any file if None).
#[track_caller]
pub fn assert_finding(report: &Report, code: Code, line: Option<u64>, file: Option<&Path>) {
    let hit = report
        .findings
        .iter()
        .any(|f| f.code == code && f.line == line && file.is_none_or(|p| f.file == p));
    assert!(
        hit,
        "expected {code} at line {line:?} in {file:?}; report:\n{}",
        report.render_text()
    );
}

#[track_caller]
pub fn assert_outcome(report: &Report, outcome: Outcome) {
    assert_eq!(
        report.outcome(),
        outcome,
        "report:\n{}",
        report.render_text()
    );
}

/// Asserts that no finding is an error.
#[track_caller]
pub fn assert_no_errors(report: &Report) {
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.severity == Severity::Error),
        "report:\n{}",
        report.render_text()
    );
}

/// The 1-based line of a file where its newest session starts: 1 for an old-layout session
/// file, the newest `session_start` line's number in a journal.
pub fn start_line(path: &Path) -> u64 {
    read_lines(path)
        .iter()
        .rposition(|l| String::from_utf8_lossy(l).contains("\"type\":\"session_start\""))
        .map_or(1, |i| i as u64 + 1)
}

/// The lines (0-based indices) of the `k`-th session of a journal.
pub fn segment(journal: &Path, k: usize) -> std::ops::Range<usize> {
    let lines = read_lines(journal);
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| String::from_utf8_lossy(l).contains("\"type\":\"session_start\""))
        .map(|(i, _)| i)
        .collect();
    starts[k]..starts.get(k + 1).copied().unwrap_or(lines.len())
}

/// The `k`-th session's lines of a journal.
pub fn session_lines(journal: &Path, k: usize) -> Vec<Vec<u8>> {
    read_lines(journal)[segment(journal, k)].to_vec()
}
