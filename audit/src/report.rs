//! What verify says: findings with their codes and severities, the outcome and exit status,
//! whom the evidence covers, and the report's text and JSON forms.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    /// The line's MAC is wrong under its epoch's key: edited, forged, re-serialised, moved
    /// from another session, or MACed with a later key (CVE-2023-31439).
    BadMac,
    /// The line's `prev` is not the hash of the line before it (a line removed or inserted).
    PrevMismatch,
    /// `seq` jumps forward: lines are missing before this one.
    SeqGap,
    /// `seq` repeats or goes back: a line duplicated, replayed or moved.
    SeqDup,
    /// The line's epoch is not the number of seals before it.
    EpochMismatch,
    /// The line is authentic but for a later epoch: whole epochs (seals included) are
    /// missing before it (CVE-2023-31438's truncate-and-continue).
    EpochGap,
    /// Not a log line (broken JSON, duplicate keys, missing fields, bad structure).
    Malformed,
    /// The file has fewer lines than a piece of evidence recorded.
    Truncated,
    /// A checkpoint file is forged, altered, stale or does not match the log's structure.
    CkptBad,
    /// A recorded root or head does not match the lines.
    RootMismatch,
    /// A session file or checkpoint that evidence says existed is gone.
    FileMissing,
    /// The witness holds more of the log than the files have.
    WitnessAhead,
    /// The witness holds a different tree than the files give.
    WitnessFork,
    /// A file or folder is a link, has a loose mode or another owner.
    UnsafeMode,
    /// An incomplete last line without a newline (a crash mid-write). Warning only.
    TornTail,
    /// Lines after the session's recorded end.
    AfterEnd,
    /// The session is not closed and nothing records where it ended: its tail may have been
    /// cut, or it is still being written.
    OpenSession,
    /// The session's key is not among the keys given to verify.
    KeyUnknown,
    /// A folder or the index changed after the last write Garuda recorded: files may have
    /// been removed with every trace of them.
    ChangedAfterWrite,
    /// The witness could not be asked, or answered something unreadable.
    WitnessUnavailable,
    /// A file could not be read.
    Unreadable,
    /// A session's first line names another project than the folder it is in (a project
    /// given another project's history).
    ProjectMismatch,
    /// A later session's writer found the evidence already damaged when it started, and
    /// recorded it (MACed) in its first line: the damage stays reported even after the
    /// evidence itself was rewritten or overwritten.
    FoundAtStart,
    /// A session's writer built on a register or index line under a key id that no given key
    /// and no session vouches for (a line forged under a made-up key id).
    UnverifiedBase,
    /// A key given to verify was used by no session, index or register line: the sessions
    /// under it are gone (the audit folder and the register wiped).
    KeyUnused,
    /// Retention pruned the oldest sessions of a journal lane: their sealed head still links
    /// the sessions kept, but their lines can no longer be checked. Warning only.
    Pruned,
}

impl Code {
    /// The code as printed (`BAD_MAC`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BadMac => "BAD_MAC",
            Code::PrevMismatch => "PREV_MISMATCH",
            Code::SeqGap => "SEQ_GAP",
            Code::SeqDup => "SEQ_DUP",
            Code::EpochMismatch => "EPOCH_MISMATCH",
            Code::EpochGap => "EPOCH_GAP",
            Code::Malformed => "MALFORMED",
            Code::Truncated => "TRUNCATED",
            Code::CkptBad => "CKPT_BAD",
            Code::RootMismatch => "ROOT_MISMATCH",
            Code::FileMissing => "FILE_MISSING",
            Code::WitnessAhead => "WITNESS_AHEAD",
            Code::WitnessFork => "WITNESS_FORK",
            Code::UnsafeMode => "UNSAFE_MODE",
            Code::TornTail => "TORN_TAIL",
            Code::AfterEnd => "AFTER_END",
            Code::OpenSession => "OPEN_SESSION",
            Code::KeyUnknown => "KEY_UNKNOWN",
            Code::ChangedAfterWrite => "CHANGED_AFTER_WRITE",
            Code::WitnessUnavailable => "WITNESS_UNAVAILABLE",
            Code::Unreadable => "UNREADABLE",
            Code::ProjectMismatch => "PROJECT_MISMATCH",
            Code::FoundAtStart => "FOUND_AT_START",
            Code::UnverifiedBase => "UNVERIFIED_BASE",
            Code::KeyUnused => "KEY_UNUSED",
            Code::Pruned => "PRUNED",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a finding weighs on the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Evidence of tampering: the outcome is [`Outcome::Tampered`].
    Error,
    /// The evidence cannot tell: the outcome is at best [`Outcome::Undecidable`].
    Undecidable,
    /// Worth knowing, changes no verdict (a torn last line).
    Warning,
}

/// One problem, located as precisely as the evidence allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The file concerned.
    pub file: PathBuf,
    /// Byte offset of the line in the file.
    pub offset: Option<u64>,
    /// 1-based line number.
    pub line: Option<u64>,
    /// The line's `seq` (as the line claims it).
    pub seq: Option<u64>,
    /// The line's `epoch` (as the line claims it).
    pub epoch: Option<u64>,
    /// What is wrong.
    pub code: Code,
    /// How much it weighs.
    pub severity: Severity,
    /// A sentence for a person.
    pub message: String,
}

impl Finding {
    pub(crate) fn new(
        file: &Path,
        code: Code,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            file: file.to_path_buf(),
            offset: None,
            line: None,
            seq: None,
            epoch: None,
            code,
            severity,
            message: message.into(),
        }
    }

    pub(crate) fn at(mut self, offset: Option<u64>, line: u64) -> Self {
        self.offset = offset;
        self.line = Some(line);
        self
    }

    /// The warning for bytes after the last newline of an append-only file (`what`: "index",
    /// "register"): what a crash while appending leaves.
    pub(crate) fn torn_tail(file: &Path, what: &str, offset: u64, bytes: usize, line: u64) -> Self {
        Finding::new(
            file,
            Code::TornTail,
            Severity::Warning,
            format!("{bytes} byte(s) of an incomplete last {what} line"),
        )
        .at(Some(offset), line)
    }

    pub(crate) fn claims(mut self, seq: Option<u64>, epoch: Option<u64>) -> Self {
        self.seq = seq;
        self.epoch = epoch;
        self
    }
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every check passed (warnings aside). Exit status 0.
    Verified,
    /// At least one error finding. Exit status 1.
    Tampered,
    /// No error, but the evidence cannot rule out tampering. Exit status 2.
    Undecidable,
}

impl Outcome {
    /// The exit status of `garuda audit verify`: 0, 1 or 2.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Verified => 0,
            Outcome::Tampered => 1,
            Outcome::Undecidable => 2,
        }
    }
}

/// One session as verify saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The project folder name.
    pub project: String,
    /// The session id.
    pub session: String,
    /// The log file.
    pub file: PathBuf,
    /// Complete lines in the file.
    pub lines: u64,
    /// Ends with `session_end` and its seal.
    pub closed: bool,
    /// Its end is established (closed, or attested by later evidence).
    pub complete: bool,
    /// Hex id of the install secret it is under, when known.
    pub key_id: Option<String>,
    /// Size of the witness's checkpoint, when a witness was asked and holds one.
    pub witnessed: Option<u64>,
}

/// Whom the evidence can catch: each field is a claim about the *kind* of evidence this
/// verification had (keys off disk, a witness), independent of what it found. The notes say
/// why a field is false, and name other limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Commands and the agent: they cannot reach the log folder or the keys (the sandbox
    /// keeps `~/.garuda` out of their view), and every line is MACed, so any change would
    /// have to come from elsewhere. Always true; it rests on the sandbox.
    pub commands_and_agent: bool,
    /// A process with the user's rights: only when no verified session's install secret is
    /// on disk (it could otherwise re-MAC everything). Even then, removing the newest sessions
    /// with all their traces shows only through the ctime check or a witness.
    pub same_user_processes: bool,
    /// Anyone, root included: only when a witness holds the final checkpoint of every session.
    pub anyone: bool,
    /// Why a field is false, and other limits.
    pub notes: Vec<String>,
}

/// The result of [`crate::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Every finding, in file order.
    pub findings: Vec<Finding>,
    /// Every session looked at.
    pub sessions: Vec<SessionSummary>,
    /// What the evidence covers.
    pub coverage: Coverage,
}

impl Report {
    /// Tampered if any error, else undecidable if any undecidable finding, else verified.
    pub fn outcome(&self) -> Outcome {
        if self.findings.iter().any(|f| f.severity == Severity::Error) {
            Outcome::Tampered
        } else if self
            .findings
            .iter()
            .any(|f| f.severity == Severity::Undecidable)
        {
            Outcome::Undecidable
        } else {
            Outcome::Verified
        }
    }

    /// The report as JSON, with the outcome and exit code added.
    pub fn to_json(&self) -> Value {
        let outcome = self.outcome();
        serde_json::json!({
            "outcome": outcome,
            "exit_code": outcome.exit_code(),
            "findings": self.findings,
            "sessions": self.sessions,
            "coverage": self.coverage,
        })
    }

    /// The report for a terminal. A finding's file and message can quote what is in the
    /// files (a checkpoint's origin, a session's project, a parse error): both go through
    /// [`garuda_text::visible`], so a tampered file cannot print a line that reads as
    /// "audit log: VERIFIED" or send escape sequences to the terminal.
    pub fn render_text(&self) -> String {
        use garuda_text::{visible, visible_path};
        use std::fmt::Write as _;
        let outcome = self.outcome();
        let mut out = String::new();
        let word = match outcome {
            Outcome::Verified => "VERIFIED",
            Outcome::Tampered => "TAMPERED",
            Outcome::Undecidable => "UNDECIDABLE (the evidence cannot tell)",
        };
        let _ = writeln!(out, "audit log: {word} (exit {})", outcome.exit_code());
        for f in &self.findings {
            let mut loc = visible_path(&f.file).into_owned();
            if let Some(l) = f.line {
                let _ = write!(loc, ":{l}");
            }
            let mut detail = Vec::new();
            if let Some(o) = f.offset {
                detail.push(format!("byte {o}"));
            }
            if let Some(s) = f.seq {
                detail.push(format!("seq {s}"));
            }
            if let Some(e) = f.epoch {
                detail.push(format!("epoch {e}"));
            }
            let detail = if detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", detail.join(", "))
            };
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Undecidable => "cannot tell",
                Severity::Warning => "warning",
            };
            let _ = writeln!(
                out,
                "  {loc}{detail} {} [{sev}]: {}",
                f.code,
                visible(&f.message)
            );
        }
        let lines: u64 = self.sessions.iter().map(|s| s.lines).sum();
        let closed = self.sessions.iter().filter(|s| s.closed).count();
        let projects: HashSet<&str> = self.sessions.iter().map(|s| s.project.as_str()).collect();
        let _ = writeln!(
            out,
            "sessions: {} in {} project(s), {lines} lines, {closed} closed",
            self.sessions.len(),
            projects.len()
        );
        let yn = |b: bool| if b { "yes" } else { "no" };
        let _ = writeln!(out, "whom this evidence can catch:");
        let _ = writeln!(
            out,
            "  commands and the agent: {}",
            yn(self.coverage.commands_and_agent)
        );
        let _ = writeln!(
            out,
            "  processes with your rights: {}",
            yn(self.coverage.same_user_processes)
        );
        let _ = writeln!(
            out,
            "  anyone (root included): {}",
            yn(self.coverage.anyone)
        );
        for n in &self.coverage.notes {
            let _ = writeln!(out, "  note: {}", visible(n));
        }
        out
    }
}

#[cfg(test)]
mod text_tests {
    use super::*;

    /// A finding that quotes a tampered file's content is one line of the report: a newline
    /// cannot add a line that reads as Garuda's verdict, and an escape sequence is printed,
    /// not sent.
    #[test]
    fn a_quoted_value_cannot_forge_a_line_of_the_report() {
        let forged = "x\naudit log: VERIFIED (exit 0)\x1b[1A\x1b[2K\u{202e}";
        let report = Report {
            findings: vec![Finding::new(
                Path::new("/a/b\nc.ckpt"),
                Code::CkptBad,
                Severity::Error,
                format!("origin {forged} is not this session's"),
            )],
            sessions: Vec::new(),
            coverage: Coverage {
                commands_and_agent: true,
                same_user_processes: false,
                anyone: false,
                notes: Vec::new(),
            },
        };
        let text = report.render_text();
        assert!(text.starts_with("audit log: TAMPERED (exit 1)\n"), "{text}");
        assert!(
            !text.lines().skip(1).any(|l| l.starts_with("audit log:")),
            "{text}"
        );
        assert!(
            text.contains(
                "/a/b\\nc.ckpt CKPT_BAD [error]: origin x\\naudit log: VERIFIED (exit 0)\\e[1A\\e[2K\\u{202e} is not"
            ),
            "{text}"
        );
        assert!(
            !text.contains('\x1b') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        // Negative control: the message printed as it is forges the verdict line.
        let raw = format!("  {}\n", report.findings[0].message);
        assert!(raw.lines().any(|l| l.starts_with("audit log: VERIFIED")));
    }
}
