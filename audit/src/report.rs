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
    /// Nothing is wrong and nothing is recorded: no session was found (a project that never
    /// ran a command, a fresh install). Exit status 0: nothing is wrong. Verify reaches this
    /// only when no evidence says a session existed (the register names none, or there is no
    /// register and no audit folder); otherwise the missing folder is a finding.
    NoSessions,
}

impl Outcome {
    /// The exit status of `garuda audit verify`: 0, 1 or 2.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Verified | Outcome::NoSessions => 0,
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
    /// What the evidence covers ([`Coverage::from_facts`] of `facts`).
    pub coverage: Coverage,
    /// What verify checked: the files and keys it found, what it read. Every sentence of the
    /// report's summary and coverage notes is computed from these.
    pub facts: Facts,
}

impl Report {
    /// Tampered if any error, else undecidable if any undecidable finding, else no sessions
    /// if no session was looked at, else verified.
    pub fn outcome(&self) -> Outcome {
        if self.findings.iter().any(|f| f.severity == Severity::Error) {
            Outcome::Tampered
        } else if self
            .findings
            .iter()
            .any(|f| f.severity == Severity::Undecidable)
        {
            Outcome::Undecidable
        } else if self.sessions.is_empty() {
            Outcome::NoSessions
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
            "facts": self.facts,
        })
    }

    /// The report for a terminal. A finding's file and message can quote what is in the
    /// files (a checkpoint's origin, a session's project, a parse error): both go through
    /// [`garuda_text::visible`], so a tampered file cannot print a line that reads as
    /// "audit log: VERIFIED" or send escape sequences to the terminal. Paths in the summary
    /// and notes (computed from [`Facts`]) go through it too.
    pub fn render_text(&self) -> String {
        use garuda_text::{visible, visible_path};
        use std::fmt::Write as _;
        let outcome = self.outcome();
        let mut out = String::new();
        let word = match outcome {
            Outcome::Verified => "VERIFIED",
            Outcome::Tampered => "TAMPERED",
            Outcome::Undecidable => "UNDECIDABLE (the evidence cannot tell)",
            Outcome::NoSessions => "NO SESSIONS",
        };
        let _ = write!(out, "audit log: {word} (exit {})", outcome.exit_code());
        if outcome == Outcome::NoSessions {
            let _ = write!(out, ": {}", self.facts.nothing_recorded());
        }
        out.push('\n');
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
        let _ = writeln!(out, "checked: {}", self.facts.checked());
        let yn = |b: bool| if b { "yes" } else { "no" };
        if self.sessions.is_empty() {
            let _ = writeln!(out, "whom this evidence can catch: no session to judge");
        } else {
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
        }
        for n in &self.coverage.notes {
            let _ = writeln!(out, "  note: {}", visible(n));
        }
        out
    }
}

/// What verify was pointed at, and whether it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TargetFacts {
    /// One project's audit folder.
    Project {
        /// The audit folder (`<audit_root>/<name>-<hash16>`).
        dir: PathBuf,
        /// The project folder it is for, when the caller named it ([`crate::VerifyOptions`]'s
        /// `project_root`; wording only).
        project: Option<PathBuf>,
        /// Whether the audit folder exists.
        exists: bool,
    },
    /// Every project folder under an audit root.
    All {
        /// The project folders found.
        projects: u64,
    },
}

/// The install secret file of the keys folder, as verify found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeyFileState {
    /// There is no such file.
    Absent,
    /// It is there and was read.
    Present {
        /// Its permission bits (`0o600` as Garuda writes it).
        mode: u32,
        /// The hex id of the secret in it.
        key_id: String,
    },
    /// It is there (or cannot be told absent) and could not be read: it counts as on disk.
    Unreadable {
        /// Why.
        error: String,
    },
}

/// The install secret on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskKeyFacts {
    /// `<keys>/install.key`.
    pub path: PathBuf,
    /// What is there.
    pub file: KeyFileState,
    /// Second copies of a secret left by a crash while it was created
    /// (`.install.key.*.tmp`): each counts as the secret on disk.
    pub temp_copies: Vec<PathBuf>,
}

/// The install-wide register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterFacts {
    /// `<garuda_home>/audit.register.jsonl`.
    pub path: PathBuf,
    /// Whether it was there and read.
    pub present: bool,
    /// Its complete lines.
    pub lines: u64,
    /// Whether any of its lines names the project verified (MAC checked or not): for a
    /// project without an audit folder, whether the register says it had sessions.
    pub names_project: bool,
}

/// The witness verify asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WitnessFacts {
    /// None configured (no `audit.witness` in the policy, no `--witness-dir`).
    None,
    /// Asked; whether it holds the final checkpoint of every session.
    Asked {
        /// It holds the final checkpoint of every session verified.
        holds_all: bool,
    },
}

/// What verify checked, as facts. [`Coverage::from_facts`], [`Facts::checked`] and
/// [`Facts::nothing_recorded`] compute every sentence of the report from them, so a sentence
/// cannot claim what was not checked (issue 11: a fresh home once read "the install secret is
/// off disk" while `keys/install.key` was on disk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// One project or all.
    pub target: TargetFacts,
    /// The audit root (`<garuda_home>/audit`).
    pub audit_root: PathBuf,
    /// Whether the audit root exists.
    pub audit_root_exists: bool,
    /// The install secret on disk; `None` when no keys folder was given (not checked).
    pub disk_key: Option<DiskKeyFacts>,
    /// Key ids of the secrets given (`--key`) other than the one on disk.
    pub given_keys: Vec<String>,
    /// The register.
    pub register: RegisterFacts,
    /// Journal lanes read (`journal*.jsonl`).
    pub journals: u64,
    /// Checkpoint files found (a lane's `journal*.ckpt`, an old-layout session's `.ckpt`).
    pub checkpoints: u64,
    /// Old-layout project indexes read (`index.jsonl`).
    pub legacy_indexes: u64,
    /// Old-layout session files read.
    pub legacy_sessions: u64,
    /// Sessions looked at (read, or named by evidence).
    pub sessions: u64,
    /// Of those, the sessions whose lines were read under the secret on disk.
    pub under_disk_key: u64,
    /// Under a secret given with `--key` that is not on disk.
    pub under_given_key: u64,
    /// With lines, under no secret given (KEY_UNKNOWN).
    pub key_not_given: u64,
    /// The witness.
    pub witness: WitnessFacts,
    /// How many checkpoint origins the witness holds of a project without an audit folder
    /// (or, for every project, in all): `None` when it was not asked that.
    pub witness_origins: Option<u64>,
    /// Journals retention pruned (PRUNED).
    pub pruned_journals: u64,
    /// Sessions not closed and with no recorded end (OPEN_SESSION).
    pub open_sessions: u64,
    /// Findings that are errors or "cannot tell".
    pub problems: u64,
}

impl Facts {
    /// Facts of a verification that has checked nothing yet.
    pub fn new(target: TargetFacts, audit_root: &Path, register: &Path) -> Self {
        Facts {
            target,
            audit_root: audit_root.to_path_buf(),
            audit_root_exists: false,
            disk_key: None,
            given_keys: Vec::new(),
            register: RegisterFacts {
                path: register.to_path_buf(),
                present: false,
                lines: 0,
                names_project: false,
            },
            journals: 0,
            checkpoints: 0,
            legacy_indexes: 0,
            legacy_sessions: 0,
            sessions: 0,
            under_disk_key: 0,
            under_given_key: 0,
            key_not_given: 0,
            witness: WitnessFacts::None,
            witness_origins: None,
            pruned_journals: 0,
            open_sessions: 0,
            problems: 0,
        }
    }

    /// Whether the secret of some session looked at may be on disk: its file holds the key of
    /// a session read, or cannot be read, or a leftover copy is there, or the keys folder was
    /// not checked.
    pub fn secret_of_sessions_on_disk(&self) -> bool {
        match &self.disk_key {
            None => true,
            Some(k) => {
                !k.temp_copies.is_empty()
                    || matches!(k.file, KeyFileState::Unreadable { .. })
                    || self.under_disk_key > 0
            }
        }
    }

    /// What "no sessions" means here, for the verdict line.
    pub fn nothing_recorded(&self) -> String {
        use garuda_text::visible_path;
        match &self.target {
            TargetFacts::Project {
                project: Some(p), ..
            } => format!("no sessions recorded for project {} yet", visible_path(p)),
            TargetFacts::Project { dir, .. } => {
                format!("no sessions recorded in {} yet", visible_path(dir))
            }
            TargetFacts::All { .. } => format!(
                "no sessions recorded in {} yet",
                visible_path(&self.audit_root)
            ),
        }
    }

    /// One sentence: what was read (folders, journals, checkpoints, the register).
    pub fn checked(&self) -> String {
        use garuda_text::visible_path;
        let mut parts: Vec<String> = Vec::new();
        let files = |f: &Facts| {
            let mut v = vec![
                format!("{} journal(s)", f.journals),
                format!("{} checkpoint(s)", f.checkpoints),
            ];
            if f.legacy_indexes > 0 || f.legacy_sessions > 0 {
                v.push(format!(
                    "the old layout: {} index(es), {} session file(s)",
                    f.legacy_indexes, f.legacy_sessions
                ));
            }
            v.join(", ")
        };
        match &self.target {
            TargetFacts::Project { dir, exists, .. } => {
                if *exists {
                    parts.push(format!(
                        "the audit folder {} ({})",
                        visible_path(dir),
                        files(self)
                    ));
                } else {
                    parts.push(format!("there is no audit folder {}", visible_path(dir)));
                }
            }
            TargetFacts::All { projects } => {
                if self.audit_root_exists {
                    parts.push(format!(
                        "{projects} project folder(s) in {} ({})",
                        visible_path(&self.audit_root),
                        files(self)
                    ));
                } else {
                    parts.push(format!(
                        "there is no audit folder {}",
                        visible_path(&self.audit_root)
                    ));
                }
            }
        }
        let reg = &self.register;
        if reg.present {
            let mut s = format!(
                "the register {} ({} lines)",
                visible_path(&reg.path),
                reg.lines
            );
            if let TargetFacts::Project { exists: false, .. } = self.target {
                s.push_str(if reg.names_project {
                    ", which names this project"
                } else {
                    ", which names no session of this project"
                });
            }
            parts.push(s);
        } else {
            parts.push(format!("there is no register {}", visible_path(&reg.path)));
        }
        parts.join("; ")
    }
}

impl Coverage {
    /// Whom the evidence can catch, and why not, from what verify checked. A pure function:
    /// each note states only what `facts` holds.
    pub fn from_facts(f: &Facts) -> Coverage {
        use garuda_text::visible_path;
        let mut notes = Vec::new();
        let sessions = f.sessions;
        let witness_all = matches!(f.witness, WitnessFacts::Asked { holds_all: true });
        let on_disk = f.secret_of_sessions_on_disk();
        let export_hint = "`garuda audit key export FILE --remove` moves it off disk (verify then needs --key FILE)";
        match &f.disk_key {
            None => notes.push(
                "whether the install secret is on disk was not checked (no keys folder was given)"
                    .to_string(),
            ),
            Some(k) => {
                let path = visible_path(&k.path);
                match &k.file {
                    KeyFileState::Unreadable { error } => notes.push(format!(
                        "{path} is there but could not be read ({error}): it counts as on disk, and a process with your rights may read it"
                    )),
                    KeyFileState::Present { mode, key_id } => {
                        let what = format!("{path} (mode {mode:04o}, key id {key_id}) is on disk");
                        if sessions == 0 {
                            notes.push(format!(
                                "{what}: a process with your rights can read it, and could rewrite any session written under it; {export_hint}"
                            ));
                        } else if f.under_disk_key > 0 {
                            let which = if f.under_disk_key == sessions {
                                format!("every session checked ({sessions}) is under it")
                            } else {
                                format!(
                                    "{} of the {sessions} sessions checked are under it",
                                    f.under_disk_key
                                )
                            };
                            notes.push(format!(
                                "{what} and {which}: a process with your rights could have rewritten those consistently; {export_hint}"
                            ));
                        } else {
                            notes.push(format!(
                                "{what}, but none of the {sessions} session(s) is under it"
                            ));
                        }
                    }
                    KeyFileState::Absent => {
                        if sessions == 0 && f.given_keys.is_empty() {
                            notes.push(format!(
                                "there is no install secret ({path} does not exist): the first `garuda sandbox` run creates one"
                            ));
                        } else {
                            notes.push(format!("there is no install secret on disk ({path} does not exist)"));
                        }
                    }
                }
                for t in &k.temp_copies {
                    notes.push(format!(
                        "{} is a second copy of an install secret, left by a crash while it was created: it counts as on disk",
                        visible_path(t)
                    ));
                }
            }
        }
        if f.under_given_key > 0 {
            let given = if f.given_keys.is_empty() {
                String::new()
            } else {
                format!(" (key id {})", f.given_keys.join(", "))
            };
            // Known not to be in the keys folder only when the folder was read, its file
            // is not unreadable, and no leftover copy (of unknown key id) is there.
            let keys_dir_clean = f.disk_key.as_ref().is_some_and(|k| {
                k.temp_copies.is_empty() && !matches!(k.file, KeyFileState::Unreadable { .. })
            });
            if f.disk_key.is_none() {
                // The keys folder was not read: which secret is on disk is unknown.
                notes.push(format!(
                    "{} session(s) are under a secret given to verify{given}",
                    f.under_given_key
                ));
            } else if keys_dir_clean {
                notes.push(format!(
                    "{} session(s) are under a secret given with --key{given}, which is not in the keys folder: a process with your rights cannot forge their lines unless it can read the file you gave (keep it off this machine, e.g. on removable media)",
                    f.under_given_key
                ));
            } else {
                notes.push(format!(
                    "{} session(s) are under a secret given with --key{given}",
                    f.under_given_key
                ));
            }
        }
        if f.key_not_given > 0 {
            notes.push(format!(
                "{} session(s) are under a secret that was not given, so their lines could not be checked: give the exported secret with --key FILE",
                f.key_not_given
            ));
        }
        // Without the secret such a process cannot forge anything, but it can still remove
        // the newest sessions with every local trace (only ctimes show that, and a restored
        // copy of the whole folder shows only as "cannot tell"): only a witness holding the
        // newest state rules that out.
        let off_disk = sessions > 0 && !on_disk && f.key_not_given == 0;
        if off_disk && !witness_all {
            notes.push("without a witness holding every session's final checkpoint, a process with your rights can still remove the newest session(s) with their register entries, which shows only as CHANGED_AFTER_WRITE (ctimes) until the next session records it".to_string());
        }
        match f.witness {
            // Nothing to rewrite: the note about a wipe below says what a witness would add.
            WitnessFacts::None if sessions == 0 => {}
            WitnessFacts::None => notes.push(
                "no witness (`audit.witness` in the policy, or --witness-dir): root, or anyone holding the secret, can rewrite the log together with all local evidence"
                    .to_string(),
            ),
            WitnessFacts::Asked { holds_all: true } if sessions > 0 => {
                notes.push("the witness holds the final checkpoint of every session".to_string());
            }
            WitnessFacts::Asked { holds_all: false } if sessions > 0 => notes.push(
                "the witness does not hold the final checkpoint of every session".to_string(),
            ),
            // Holding some is WITNESS_AHEAD, no answer WITNESS_UNAVAILABLE: findings say so.
            WitnessFacts::Asked { .. } => {
                if f.witness_origins == Some(0) {
                    notes.push(
                        "the witness was asked and holds no checkpoint of these logs either"
                            .to_string(),
                    );
                }
            }
        }
        if sessions == 0
            && f.problems == 0
            && f.given_keys.is_empty()
            && f.witness == WitnessFacts::None
        {
            notes.push("an audit folder wiped together with its register looks the same: only a witness, or verify given an exported secret (--key), could tell".to_string());
        }
        if f.pruned_journals > 0 {
            notes.push(format!(
                "retention pruned the oldest sessions of {} journal(s): only their sealed heads remain, and nothing about their lines can be checked any more",
                f.pruned_journals
            ));
        }
        if f.open_sessions > 0 {
            notes.push(
                "lines an open session wrote after its last checkpoint are covered by no evidence"
                    .to_string(),
            );
        }
        Coverage {
            commands_and_agent: true,
            same_user_processes: sessions > 0 && !on_disk && f.key_not_given == 0 && witness_all,
            anyone: sessions > 0 && witness_all,
            notes,
        }
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
            facts: Facts::new(
                TargetFacts::All { projects: 0 },
                Path::new("/h/audit"),
                Path::new("/h/audit.register.jsonl"),
            ),
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

/// Every sentence verify prints about keys, the witness and what it read is a pure function
/// of [`Facts`]: one case per situation, each pinned whole (issue 11: a fresh home once read
/// "the install secret is off disk, so a process with your rights cannot forge lines" while
/// `keys/install.key` was on disk, or when there was no key at all).
#[cfg(test)]
mod facts_tests {
    use super::*;

    const KEY: &str = "/h/keys/install.key";
    const NO_WITNESS: &str = "no witness (`audit.witness` in the policy, or --witness-dir): root, or anyone holding the secret, can rewrite the log together with all local evidence";
    const WIPE: &str = "an audit folder wiped together with its register looks the same: only a witness, or verify given an exported secret (--key), could tell";
    const REMOVAL: &str = "without a witness holding every session's final checkpoint, a process with your rights can still remove the newest session(s) with their register entries, which shows only as CHANGED_AFTER_WRITE (ctimes) until the next session records it";
    const HINT: &str =
        "`garuda audit key export FILE --remove` moves it off disk (verify then needs --key FILE)";

    /// One project, its folder present, the key folder read with `file` in it, no witness.
    fn facts(file: KeyFileState, sessions: u64) -> Facts {
        let mut f = Facts::new(
            TargetFacts::Project {
                dir: "/h/audit/p-0011223344556677".into(),
                project: Some("/src/p".into()),
                exists: sessions > 0,
            },
            Path::new("/h/audit"),
            Path::new("/h/audit.register.jsonl"),
        );
        f.audit_root_exists = sessions > 0;
        f.disk_key = Some(DiskKeyFacts {
            path: KEY.into(),
            file,
            temp_copies: Vec::new(),
        });
        f.sessions = sessions;
        f
    }

    fn present() -> KeyFileState {
        KeyFileState::Present {
            mode: 0o600,
            key_id: "d65a7cdb".into(),
        }
    }

    /// Nothing said a process with your rights cannot forge lines, or that the secret is off
    /// disk.
    fn claims_no_forgery(c: &Coverage) -> bool {
        c.notes
            .iter()
            .any(|n| n.contains("cannot forge") || n.contains("off disk,"))
    }

    #[test]
    fn a_fresh_home_without_a_key_says_there_is_none() {
        let f = facts(KeyFileState::Absent, 0);
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("there is no install secret ({KEY} does not exist): the first `garuda sandbox` run creates one"),
                WIPE.to_string(),
            ]
        );
        assert!(!c.same_user_processes && !c.anyone && !claims_no_forgery(&c));
        assert_eq!(
            f.nothing_recorded(),
            "no sessions recorded for project /src/p yet"
        );
        assert_eq!(
            f.checked(),
            "there is no audit folder /h/audit/p-0011223344556677; there is no register /h/audit.register.jsonl"
        );
    }

    #[test]
    fn a_key_on_disk_without_sessions_is_said_to_be_on_disk() {
        let mut f = facts(present(), 0);
        f.register.present = true;
        f.register.lines = 2;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("{KEY} (mode 0600, key id d65a7cdb) is on disk: a process with your rights can read it, and could rewrite any session written under it; {HINT}"),
                WIPE.to_string(),
            ]
        );
        assert!(!claims_no_forgery(&c), "{:?}", c.notes);
        assert_eq!(
            f.checked(),
            "there is no audit folder /h/audit/p-0011223344556677; the register /h/audit.register.jsonl (2 lines), which names no session of this project"
        );
    }

    #[test]
    fn a_key_on_disk_under_which_sessions_are_is_named_with_them() {
        let mut f = facts(present(), 3);
        f.under_disk_key = 3;
        f.journals = 1;
        f.checkpoints = 1;
        f.register.present = true;
        f.register.lines = 6;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("{KEY} (mode 0600, key id d65a7cdb) is on disk and every session checked (3) is under it: a process with your rights could have rewritten those consistently; {HINT}"),
                NO_WITNESS.to_string(),
            ]
        );
        assert!(!claims_no_forgery(&c));
        assert!(c.commands_and_agent && !c.same_user_processes && !c.anyone);
        assert_eq!(
            f.checked(),
            "the audit folder /h/audit/p-0011223344556677 (1 journal(s), 1 checkpoint(s)); the register /h/audit.register.jsonl (6 lines)"
        );
        // Some under it, the others under an exported secret given with --key.
        f.under_disk_key = 1;
        f.under_given_key = 2;
        f.given_keys = vec!["0badf00d".into()];
        let c = Coverage::from_facts(&f);
        assert_eq!(c.notes[0], format!("{KEY} (mode 0600, key id d65a7cdb) is on disk and 1 of the 3 sessions checked are under it: a process with your rights could have rewritten those consistently; {HINT}"));
        assert_eq!(c.notes[1], "2 session(s) are under a secret given with --key (key id 0badf00d), which is not in the keys folder: a process with your rights cannot forge their lines unless it can read the file you gave (keep it off this machine, e.g. on removable media)");
        assert!(!c.same_user_processes);
        // None under it.
        f.under_disk_key = 0;
        f.under_given_key = 3;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes[0],
            format!("{KEY} (mode 0600, key id d65a7cdb) is on disk, but none of the 3 session(s) is under it")
        );
        assert_eq!(c.notes[2], REMOVAL);
    }

    /// The supported setup of docs/audit.md: `garuda audit key export FILE --remove`, then
    /// verify with `--key FILE`. Negative control of the tests above: here, and only here, the
    /// report says a process with your rights cannot forge the lines.
    #[test]
    fn a_secret_moved_off_disk_and_given_with_key_is_the_one_case_that_cannot_be_forged() {
        let mut f = facts(KeyFileState::Absent, 2);
        f.under_given_key = 2;
        f.given_keys = vec!["d65a7cdb".into()];
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("there is no install secret on disk ({KEY} does not exist)"),
                "2 session(s) are under a secret given with --key (key id d65a7cdb), which is not in the keys folder: a process with your rights cannot forge their lines unless it can read the file you gave (keep it off this machine, e.g. on removable media)".to_string(),
                REMOVAL.to_string(),
                NO_WITNESS.to_string(),
            ]
        );
        assert!(claims_no_forgery(&c));
        assert!(!c.same_user_processes, "no witness: removals stay possible");
        // With a witness holding every session's final checkpoint, they are covered.
        f.witness = WitnessFacts::Asked { holds_all: true };
        let c = Coverage::from_facts(&f);
        assert!(c.same_user_processes && c.anyone);
        assert_eq!(
            c.notes[2..],
            ["the witness holds the final checkpoint of every session".to_string()]
        );
        f.witness = WitnessFacts::Asked { holds_all: false };
        let c = Coverage::from_facts(&f);
        assert!(!c.same_user_processes && !c.anyone);
        assert_eq!(
            c.notes[2..],
            [
                REMOVAL.to_string(),
                "the witness does not hold the final checkpoint of every session".to_string()
            ]
        );
    }

    #[test]
    fn a_secret_moved_off_disk_and_not_given_says_the_lines_were_not_checked() {
        let mut f = facts(KeyFileState::Absent, 2);
        f.key_not_given = 2;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("there is no install secret on disk ({KEY} does not exist)"),
                "2 session(s) are under a secret that was not given, so their lines could not be checked: give the exported secret with --key FILE".to_string(),
                NO_WITNESS.to_string(),
            ]
        );
        assert!(!claims_no_forgery(&c) && !c.same_user_processes);
    }

    #[test]
    fn an_unreadable_key_or_a_leftover_copy_counts_as_on_disk() {
        let mut f = facts(
            KeyFileState::Unreadable {
                error: "Permission denied (os error 13)".into(),
            },
            1,
        );
        f.under_given_key = 1;
        f.witness = WitnessFacts::Asked { holds_all: true };
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("{KEY} is there but could not be read (Permission denied (os error 13)): it counts as on disk, and a process with your rights may read it"),
                "1 session(s) are under a secret given with --key".to_string(),
                "the witness holds the final checkpoint of every session".to_string(),
            ]
        );
        assert!(!c.same_user_processes && !claims_no_forgery(&c));
        let mut f = facts(KeyFileState::Absent, 1);
        f.under_given_key = 1;
        f.witness = WitnessFacts::Asked { holds_all: true };
        if let Some(k) = &mut f.disk_key {
            k.temp_copies = vec!["/h/keys/.install.key.0011.tmp".into()];
        }
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                format!("there is no install secret on disk ({KEY} does not exist)"),
                "/h/keys/.install.key.0011.tmp is a second copy of an install secret, left by a crash while it was created: it counts as on disk".to_string(),
                "1 session(s) are under a secret given with --key".to_string(),
                "the witness holds the final checkpoint of every session".to_string(),
            ]
        );
        assert!(!c.same_user_processes && !claims_no_forgery(&c));
    }

    #[test]
    fn a_keys_folder_not_given_is_said_to_be_unchecked() {
        let mut f = facts(KeyFileState::Absent, 1);
        f.disk_key = None;
        f.under_given_key = 1;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes,
            [
                "whether the install secret is on disk was not checked (no keys folder was given)"
                    .to_string(),
                "1 session(s) are under a secret given to verify".to_string(),
                NO_WITNESS.to_string(),
            ]
        );
        assert!(!claims_no_forgery(&c));
    }

    #[test]
    fn a_witness_asked_about_a_project_without_sessions_says_what_it_holds() {
        let mut f = facts(KeyFileState::Absent, 0);
        f.witness = WitnessFacts::Asked { holds_all: false };
        // Not asked about this project (its folder is missing for another reason): nothing
        // is said of what it holds.
        let c = Coverage::from_facts(&f);
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        f.witness_origins = Some(0);
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes[1],
            "the witness was asked and holds no checkpoint of these logs either"
        );
    }

    #[test]
    fn pruned_journals_and_open_sessions_are_noted() {
        let mut f = facts(present(), 2);
        f.under_disk_key = 2;
        f.pruned_journals = 1;
        f.open_sessions = 1;
        let c = Coverage::from_facts(&f);
        assert_eq!(
            c.notes[2..],
            [
                "retention pruned the oldest sessions of 1 journal(s): only their sealed heads remain, and nothing about their lines can be checked any more".to_string(),
                "lines an open session wrote after its last checkpoint are covered by no evidence".to_string(),
            ]
        );
    }

    #[test]
    fn no_sessions_is_its_own_outcome_with_exit_0() {
        let f = facts(KeyFileState::Absent, 0);
        let mut report = Report {
            findings: Vec::new(),
            sessions: Vec::new(),
            coverage: Coverage::from_facts(&f),
            facts: f,
        };
        assert_eq!(report.outcome(), Outcome::NoSessions);
        assert_eq!(report.outcome().exit_code(), 0);
        let text = report.render_text();
        assert!(
            text.starts_with(
                "audit log: NO SESSIONS (exit 0): no sessions recorded for project /src/p yet\n"
            ),
            "{text}"
        );
        assert!(text.contains("whom this evidence can catch: no session to judge\n"));
        assert_eq!(
            serde_json::to_value(report.outcome()).unwrap(),
            serde_json::json!("no_sessions")
        );
        // Negative control: the same report with a "cannot tell" finding is not "no sessions".
        report.findings.push(Finding::new(
            Path::new("/h/audit/p-0011223344556677"),
            Code::FileMissing,
            Severity::Undecidable,
            "no audit folder",
        ));
        assert_eq!(report.outcome(), Outcome::Undecidable);
    }
}
