//! `garuda audit verify`: every check, and the report.
//!
//! Verification reads files and never writes. It does not stop at the first problem: every
//! line is classified, every piece of evidence (index, checkpoints, later sessions' first
//! lines, a witness, a running writer's head) is compared with the files, and each
//! disagreement becomes a [`Finding`] with the file, byte offset, line, `seq`, `epoch` and a
//! [`Code`]. Findings that are mere consequences of an earlier one in the same session (the
//! `prev` of the line after a forged line, a seal root over a forged line) are not repeated.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::checkpoint::{self, Checkpoint, Note};
use crate::events::{
    Attest, AttestState, IndexCloseEvent, IndexStartEvent, SealEvent, StartEvent, INDEX_START,
    KIND_END, KIND_SEAL, KIND_START,
};
use crate::fsx;
use crate::index::{parse_event, IndexEvent};
use crate::journal;
use crate::json;
use crate::keys::{EpochKey, InstallSecret, KeyId, INSTALL_KEY_FILE};
use crate::layout::{self, split_lines, INDEX_FILE};
use crate::line::{self, MAX_LINE_BYTES};
use crate::merkle::{leaf_hash, root_of, Compact};
use crate::register::{check_register, index_against_register, register_path, RegisterInfo};
use crate::report::{
    Code, Coverage, DiskKeyFacts, Facts, Finding, KeyFileState, Report, SessionSummary, Severity,
    TargetFacts, WitnessFacts,
};
use crate::util::{ct_eq, finish, hex, keyed, parse_hex32, sha256, Hash, ZERO_HASH};
use crate::witness::{self, WitnessConfig};
use crate::writer::SessionHead;

/// How many epoch keys one step of the sequential pass, or one checkpoint beyond the seals in
/// its file, may derive (bounds the work a hostile file can cause).
const MAX_EPOCH_JUMP: u64 = 4096;

/// Default tolerance between a recorded write time and a file's ctime.
pub const DEFAULT_CTIME_SLACK: Duration = Duration::from_secs(2);

/// Which logs to verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyTarget {
    /// One project's audit folder (`<audit_root>/<name>-<hash>`, see
    /// [`crate::project_audit_dir`]).
    Project(PathBuf),
    /// Every project folder under an audit root.
    All(PathBuf),
}

/// What verify is given.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Which logs.
    pub target: VerifyTarget,
    /// Install secrets to try (the one on disk, exported ones given with `--key`).
    pub keys: Vec<InstallSecret>,
    /// The keys folder, to tell whether a session's secret is still on disk (which decides
    /// whether processes with the user's rights are covered). `None`: assume it may be.
    pub keys_dir: Option<PathBuf>,
    /// A witness to compare with.
    pub witness: Option<WitnessConfig>,
    /// Heads vouched for by running writers (a supervisor verifying its own live session).
    pub trusted_heads: Vec<SessionHead>,
    /// Tolerance for the ctime check (clock granularity, sync latency).
    pub ctime_slack: Duration,
    /// The project folder a [`VerifyTarget::Project`] is for: only named in the report's
    /// wording ("no sessions recorded for project …"), never used to find files.
    pub project_root: Option<PathBuf>,
}

impl VerifyOptions {
    /// Options for `target` with `keys`, no witness, default slack.
    pub fn new(target: VerifyTarget, keys: Vec<InstallSecret>) -> Self {
        VerifyOptions {
            target,
            keys,
            keys_dir: None,
            witness: None,
            trusted_heads: Vec::new(),
            ctime_slack: DEFAULT_CTIME_SLACK,
            project_root: None,
        }
    }
}

/// Per-epoch keyed HMAC states of one session, derived forward on demand.
struct EpochMacs {
    next: EpochKey,
    macs: Vec<Hmac<Sha256>>,
    /// How many epochs beyond those derived so far one request may derive.
    jump: u64,
}

impl EpochMacs {
    fn new(k0: EpochKey, jump: u64) -> Self {
        EpochMacs {
            next: k0,
            macs: Vec::new(),
            jump,
        }
    }

    fn get(&mut self, epoch: u64) -> Option<&Hmac<Sha256>> {
        let have = self.macs.len() as u64;
        if epoch >= have {
            if epoch - have > self.jump {
                return None;
            }
            while self.macs.len() as u64 <= epoch {
                self.macs.push(keyed(self.next.bytes()));
                self.next.evolve();
            }
        }
        self.macs.get(epoch as usize)
    }

    fn check(&mut self, epoch: u64, prefix: &[u8], mac: &Hash) -> bool {
        match self.get(epoch) {
            Some(m) => {
                let mut m = m.clone();
                m.update(prefix);
                ct_eq(&finish(m), mac)
            }
            None => false,
        }
    }
}

/// A line as shown by [`crate::show`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShownLine {
    /// 1-based line number.
    pub line: u64,
    /// `seq`.
    pub seq: u64,
    /// `epoch`.
    pub epoch: u64,
    /// `time` (UTC).
    pub time: String,
    /// `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `event`.
    pub event: Value,
}

/// What one pass over a session file found.
pub(crate) struct Scan {
    pub lines: u64,
    pub line_hashes: Vec<Hash>,
    pub leaves: Vec<Hash>,
    pub closed_at: Option<u64>,
    pub start: Option<StartEvent>,
    pub first_prev: Option<Hash>,
    pub ckpt_min: u64,
    /// Size after each authentic seal → its epoch and the tree root at that size (every
    /// checkpoint ends at a seal, so its root is looked up, not recomputed).
    pub seals: HashMap<u64, (u64, Hash)>,
    pub last_time_ms: Option<u64>,
    pub findings: Vec<Finding>,
    pub shown: Vec<ShownLine>,
    /// Index in `findings` of the AFTER_END finding for bytes after a closed session's final
    /// seal. In a journal, bytes after the LAST session's seal are the next session's first
    /// line cut by a crash, so the journal's reader turns that finding into a torn tail.
    /// With the offset of those bytes in the session's data.
    pub after_final_seal: Option<(usize, u64)>,
}

enum Verdict<'a> {
    Authentic {
        h: line::Header<'a>,
        at: u64,
    },
    BadMac {
        seq: Option<u64>,
        epoch: Option<u64>,
        why: &'static str,
        seal: bool,
    },
    Malformed {
        seq: Option<u64>,
        epoch: Option<u64>,
        why: String,
    },
}

/// What can be checked of a line without knowing its position: done for all lines up front,
/// on several threads for large files, then consumed by the sequential pass.
#[derive(Clone, Copy, Default)]
struct Pre {
    /// The line's hash (`prev` of the next line) and its Merkle leaf hash.
    line_hash: Hash,
    leaf: Hash,
    /// The claimed epoch, when the MAC is valid under that epoch's key.
    mac_at_claimed: Option<u64>,
    /// The event is one JSON value without duplicate keys (`None`: no header to find it).
    event_ok: Option<bool>,
}

/// Files with fewer lines are checked on the calling thread only.
const PARALLEL_MIN_LINES: usize = 8192;

fn precheck(lines: &[layout::Located<'_>], k0: Option<&EpochKey>, out: &mut [Pre]) {
    // A true epoch never exceeds the number of lines, so no claim beyond it is worth a key.
    let mut macs = k0.map(|k| EpochMacs::new(k.at(0), lines.len() as u64));
    for ((_, bytes), pre) in lines.iter().zip(out.iter_mut()) {
        pre.line_hash = sha256(bytes);
        pre.leaf = leaf_hash(bytes);
        if bytes.len() > MAX_LINE_BYTES {
            continue;
        }
        let Some((prefix, mac)) = line::split_mac(bytes) else {
            continue;
        };
        let Some(h) = line::parse_header(prefix) else {
            continue;
        };
        pre.event_ok = Some(json::check(h.event).is_ok());
        if let Some(m) = &mut macs {
            if m.check(h.epoch, prefix, &mac) {
                pre.mac_at_claimed = Some(h.epoch);
            }
        }
    }
}

fn precheck_all(lines: &[layout::Located<'_>], k0: Option<&EpochKey>) -> Vec<Pre> {
    let mut out = vec![Pre::default(); lines.len()];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || lines.len() < PARALLEL_MIN_LINES {
        precheck(lines, k0, &mut out);
        return out;
    }
    let chunk = lines.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (ls, os) in lines.chunks(chunk).zip(out.chunks_mut(chunk)) {
            s.spawn(move || precheck(ls, k0, os));
        }
    });
    out
}

fn classify<'a>(bytes: &'a [u8], pre: &Pre, macs: &mut EpochMacs, expected: u64) -> Verdict<'a> {
    if bytes.len() > MAX_LINE_BYTES {
        return Verdict::Malformed {
            seq: None,
            epoch: None,
            why: format!("line of {} bytes is over the limit", bytes.len()),
        };
    }
    if let Some((prefix, mac)) = line::split_mac(bytes) {
        if let Some(h) = line::parse_header(prefix) {
            // The MAC is checked under the key of the epoch the line's *position* implies;
            // the claimed epoch's key is only tried to tell an epoch gap from a forgery.
            let at = if h.epoch == expected {
                // Checked already under the claimed (here: the expected) epoch's key.
                pre.mac_at_claimed.filter(|&e| e == expected)
            } else if macs.check(expected, prefix, &mac) {
                Some(expected)
            } else {
                pre.mac_at_claimed.filter(|&e| e == h.epoch)
            };
            if pre.event_ok != Some(true) {
                let why = json::check(h.event).err().unwrap_or_default();
                return Verdict::Malformed {
                    seq: Some(h.seq),
                    epoch: Some(h.epoch),
                    why: format!("event is not one JSON value without duplicate keys: {why}"),
                };
            }
            return match at {
                Some(at) => Verdict::Authentic { h, at },
                None => Verdict::BadMac {
                    seq: Some(h.seq),
                    epoch: Some(h.epoch),
                    why: "the MAC does not match the line under its epoch's key",
                    seal: h.kind == KIND_SEAL,
                },
            };
        }
    }
    match line::parse_loose(bytes) {
        Some(l) => Verdict::BadMac {
            seq: l.seq,
            epoch: l.epoch,
            why: "the line is valid JSON but not the bytes Garuda wrote (re-serialised?)",
            seal: false,
        },
        None => Verdict::Malformed {
            seq: None,
            epoch: None,
            why: "not a log line (broken JSON, duplicate keys, or missing fields)".into(),
        },
    }
}

/// Verifies one session file's content line by line.
///
/// `project` is the folder name the session must belong to; `None` (bytes verified on their
/// own) takes the project the first line claims, for the key only.
pub(crate) fn scan_session(
    file: &Path,
    project: Option<&str>,
    session_id: &str,
    data: &[u8],
    key: Option<&InstallSecret>,
    collect: bool,
) -> Scan {
    let (lines, torn) = split_lines(data);
    let claimed;
    let key_project = match project {
        Some(p) => p,
        None => {
            claimed = claimed_project(data);
            claimed.as_str()
        }
    };
    let k0 = key.map(|k| k.session_key(key_project, session_id));
    let pres = precheck_all(&lines, k0.as_ref());
    let mut scan = Scan {
        lines: lines.len() as u64,
        line_hashes: pres.iter().map(|p| p.line_hash).collect(),
        leaves: pres.iter().map(|p| p.leaf).collect(),
        closed_at: None,
        start: None,
        first_prev: None,
        ckpt_min: 0,
        seals: HashMap::new(),
        last_time_ms: None,
        findings: Vec::new(),
        shown: Vec::new(),
        after_final_seal: None,
    };
    let mut macs = k0.map(|k| EpochMacs::new(k, MAX_EPOCH_JUMP));
    let mut compact = Compact::new();
    let mut next_seq = 0u64;
    let mut epoch = 0u64;
    let mut prev_hash = ZERO_HASH;
    let mut prev_bad = false;
    let mut prev_bad_seal = false;
    let mut prev_was_seal = false;
    let mut end_at: Option<usize> = None;
    let mut errors = false;

    for (i, (offset, bytes)) in lines.iter().enumerate() {
        let line_no = i as u64 + 1;
        let offset = Some(*offset);
        let pre = &pres[i];
        let (line_hash, leaf) = (pre.line_hash, pre.leaf);
        let before = scan.findings.len();
        let verdict = match &mut macs {
            Some(m) => classify(bytes, pre, m, epoch),
            None => {
                // No key: only the shape can be checked; the session is KEY_UNKNOWN.
                compact.push(leaf);
                continue;
            }
        };
        let mut sealed: Option<u64> = None;
        let mut this_bad = false;
        let mut this_bad_seal = false;
        let mut this_seal = false;
        match verdict {
            Verdict::Malformed { seq, epoch: e, why } => {
                scan.findings.push(
                    Finding::new(file, Code::Malformed, Severity::Error, why)
                        .at(offset, line_no)
                        .claims(seq, e),
                );
                this_bad = true;
                next_seq += 1;
            }
            Verdict::BadMac {
                seq,
                epoch: e,
                why,
                seal,
            } => {
                scan.findings.push(
                    Finding::new(file, Code::BadMac, Severity::Error, why)
                        .at(offset, line_no)
                        .claims(seq, e),
                );
                this_bad = true;
                this_bad_seal = seal;
                next_seq += 1;
            }
            Verdict::Authentic { h, at } => {
                let f = |code: Code, msg: String| {
                    Finding::new(file, code, Severity::Error, msg)
                        .at(offset, line_no)
                        .claims(Some(h.seq), Some(h.epoch))
                };
                if at > epoch {
                    // Right after a forged seal, the next epoch is the expected consequence.
                    if !(prev_bad_seal && at == epoch + 1) {
                        scan.findings.push(f(
                            Code::EpochGap,
                            format!(
                                "authentic line of epoch {at} after {epoch} seal(s): epochs {epoch}..{} are missing",
                                at - 1
                            ),
                        ));
                    }
                    epoch = at;
                } else if at < epoch {
                    scan.findings.push(f(
                        Code::EpochMismatch,
                        format!("line MACed for epoch {at} appears after {epoch} seal(s)"),
                    ));
                } else if h.epoch != at {
                    scan.findings.push(f(
                        Code::EpochMismatch,
                        format!("line says epoch {} but {at} seal(s) precede it", h.epoch),
                    ));
                }
                if h.seq > next_seq {
                    scan.findings.push(f(
                        Code::SeqGap,
                        format!(
                            "seq {} where {next_seq} was expected: {} line(s) missing",
                            h.seq,
                            h.seq - next_seq
                        ),
                    ));
                } else if h.seq < next_seq {
                    scan.findings.push(f(
                        Code::SeqDup,
                        format!("seq {} again or out of order (expected {next_seq})", h.seq),
                    ));
                }
                next_seq = next_seq.max(h.seq + 1);
                if i == 0 {
                    scan.first_prev = Some(h.prev);
                } else if !prev_bad && h.prev != prev_hash {
                    scan.findings.push(f(
                        Code::PrevMismatch,
                        "prev is not the hash of the line before: a line was removed, inserted or moved here".into(),
                    ));
                }
                if end_at.is_some() && scan.closed_at.is_some() {
                    scan.findings.push(f(
                        Code::AfterEnd,
                        "authentic line after the session's final seal".into(),
                    ));
                }
                match h.kind {
                    KIND_START if i == 0 => {
                        match json::parse(h.event).and_then(|v| {
                            serde_json::from_value::<StartEvent>(v).map_err(|e| e.to_string())
                        }) {
                            Ok(ev) if ev.session == session_id => {
                                if project.is_some_and(|p| p != ev.project) {
                                    scan.findings.push(f(
                                        Code::ProjectMismatch,
                                        format!(
                                            "the session was written for project {:?}, not for this folder: another project's history?",
                                            ev.project
                                        ),
                                    ));
                                }
                                scan.start = Some(ev);
                            }
                            Ok(ev) => scan.findings.push(f(
                                Code::Malformed,
                                format!(
                                    "first line names session {:?}, not this file's",
                                    ev.session
                                ),
                            )),
                            Err(e) => scan
                                .findings
                                .push(f(Code::Malformed, format!("bad session_start event: {e}"))),
                        }
                    }
                    KIND_START => scan.findings.push(f(
                        Code::Malformed,
                        "session_start that is not the first line".into(),
                    )),
                    _ if i == 0 => scan.findings.push(f(
                        Code::Malformed,
                        format!("first line is {:?}, not session_start", h.kind),
                    )),
                    KIND_SEAL => {
                        this_seal = true;
                        match json::parse(h.event).and_then(|v| {
                            serde_json::from_value::<SealEvent>(v).map_err(|e| e.to_string())
                        }) {
                            Err(e) => scan
                                .findings
                                .push(f(Code::Malformed, format!("bad seal event: {e}"))),
                            Ok(ev) => {
                                if ev.epoch != h.epoch || ev.lines != h.seq {
                                    scan.findings.push(f(
                                        Code::Malformed,
                                        "seal event disagrees with its line's epoch or seq".into(),
                                    ));
                                } else if parse_hex32(ev.root.as_bytes()) != Some(compact.root())
                                    && !errors
                                    && scan.findings.len() == before
                                {
                                    scan.findings.push(f(
                                        Code::RootMismatch,
                                        "the seal's root is not the root of the lines before it"
                                            .into(),
                                    ));
                                }
                            }
                        }
                        epoch = h.epoch + 1;
                        sealed = Some(h.epoch);
                        if end_at.is_some_and(|e| e + 1 == i) {
                            scan.closed_at = Some(line_no);
                        }
                    }
                    KIND_END => end_at = Some(i),
                    _ => {}
                }
                if h.kind != KIND_SEAL && prev_was_seal && !prev_bad {
                    // The writer publishes the checkpoint of a seal before writing anything
                    // after it, so a later checkpoint must cover at least this far.
                    scan.ckpt_min = i as u64;
                }
                if let Some(t) = crate::util::parse_time(h.time) {
                    scan.last_time_ms = Some(scan.last_time_ms.map_or(t, |m| m.max(t)));
                }
                if collect && !errors && scan.findings.len() == before {
                    if let Ok(event) = json::parse(h.event) {
                        scan.shown.push(ShownLine {
                            line: line_no,
                            seq: h.seq,
                            epoch: h.epoch,
                            time: String::from_utf8_lossy(h.time).into_owned(),
                            kind: h.kind.to_string(),
                            event,
                        });
                    }
                }
            }
        }
        if scan.findings[before..]
            .iter()
            .any(|f| f.severity == Severity::Error)
        {
            errors = true;
        }
        prev_hash = line_hash;
        prev_bad = this_bad;
        prev_bad_seal = this_bad_seal;
        prev_was_seal = this_seal;
        compact.push(leaf);
        if let Some(e) = sealed {
            scan.seals.insert(line_no, (e, compact.root()));
        }
    }
    if let Some((offset, rest)) = torn.filter(|_| scan.closed_at == Some(scan.lines)) {
        // A closed session writes nothing after its final seal: no crash explains these.
        scan.after_final_seal = Some((scan.findings.len(), offset));
        scan.findings.push(
            Finding::new(
                file,
                Code::AfterEnd,
                Severity::Error,
                format!(
                    "{} byte(s) after the closed session's final seal",
                    rest.len()
                ),
            )
            .at(Some(offset), scan.lines + 1),
        );
    } else if let Some((offset, rest)) = torn {
        scan.findings.push(
            Finding::new(
                file,
                Code::TornTail,
                Severity::Warning,
                format!(
                    "{} byte(s) after the last newline: an incomplete last line (a crash while writing); not counted",
                    rest.len()
                ),
            )
            .at(Some(offset), scan.lines + 1),
        );
    }
    scan
}

impl Scan {
    /// The tree root over the first `size` lines.
    fn root_at(&self, size: u64) -> Hash {
        match self.seals.get(&size) {
            Some((_, root)) => *root,
            None => root_of(&self.leaves[..size.min(self.lines) as usize]),
        }
    }
}

/// The project a session file's first line claims (unauthenticated; empty if none).
fn claimed_project(data: &[u8]) -> String {
    let first = data.split(|&c| c == b'\n').next().unwrap_or(b"");
    line::split_mac(first)
        .and_then(|(prefix, _)| line::parse_header(prefix))
        .and_then(|h| json::parse(h.event).ok())
        .and_then(|v| v.get("project").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// Verifies bytes as the content of session `session_id` (the fuzz target's entry point).
/// With no folder to compare with, the key is derived for the project the first line claims.
pub fn verify_session_bytes(session_id: &str, data: &[u8], keys: &[InstallSecret]) -> Vec<Finding> {
    let file = PathBuf::from(layout::log_file_name(session_id));
    let project = claimed_project(data);
    let key = pick_key(&project, session_id, data, keys, None);
    let mut scan = scan_session(&file, None, session_id, data, key.ok().flatten(), false);
    if key.is_err() {
        scan.findings.push(Finding::new(
            &file,
            Code::KeyUnknown,
            Severity::Undecidable,
            "none of the given keys is this session's",
        ));
    }
    scan.findings
}

/// Chooses the install secret of a session: the one that authenticates its first line; else
/// the one the (authentic) index or the first line names; else, with a single key, that one.
/// `Err(())`: the session is under a key we do not have.
fn pick_key<'k>(
    project: &str,
    session_id: &str,
    data: &[u8],
    keys: &'k [InstallSecret],
    index_key_id: Option<&str>,
) -> Result<Option<&'k InstallSecret>, ()> {
    if keys.is_empty() {
        return Err(());
    }
    let first = data.split(|&c| c == b'\n').next().unwrap_or(b"");
    let split = line::split_mac(first);
    if let Some((prefix, mac)) = split {
        for k in keys {
            if ct_eq(&k.session_key(project, session_id).mac(prefix), &mac) {
                return Ok(Some(k));
            }
        }
    }
    let by_id = |id: &str| keys.iter().find(|k| hex(&k.key_id()) == id);
    if let Some(id) = index_key_id {
        return by_id(id).map(Some).ok_or(());
    }
    let claimed = split
        .and_then(|(prefix, _)| line::parse_header(prefix))
        .and_then(|h| json::parse(h.event).ok())
        .and_then(|v| v.get("key_id").and_then(Value::as_str).map(str::to_string));
    match claimed {
        Some(id) => by_id(&id).map(Some).ok_or(()),
        None if keys.len() == 1 => Ok(keys.first()),
        None => Err(()),
    }
}

/// Verifies the target and reports. Never fails: unreadable evidence is a finding.
pub fn verify(opts: &VerifyOptions) -> Report {
    let (target, audit_root) = match &opts.target {
        VerifyTarget::Project(dir) => (
            TargetFacts::Project {
                dir: dir.clone(),
                project: opts.project_root.clone(),
                exists: false,
            },
            dir.parent().map(Path::to_path_buf).unwrap_or_default(),
        ),
        VerifyTarget::All(root) => (TargetFacts::All { projects: 0 }, root.clone()),
    };
    let mut report = Report {
        findings: Vec::new(),
        sessions: Vec::new(),
        coverage: Coverage {
            commands_and_agent: false,
            same_user_processes: false,
            anyone: false,
            notes: Vec::new(),
        },
        facts: Facts::new(target, &audit_root, &register_path(&audit_root)),
    };
    report.facts.audit_root_exists = fs::symlink_metadata(&audit_root).is_ok();
    let uid = match fsx::current_uid() {
        Ok(u) => u,
        Err(e) => {
            report.findings.push(Finding::new(
                Path::new("."),
                Code::Unreadable,
                Severity::Undecidable,
                format!("cannot tell the current user: {e}"),
            ));
            return report;
        }
    };
    let mut witnessed_all = opts.witness.is_some();
    let root = match &opts.target {
        VerifyTarget::Project(dir) => dir.parent().map(Path::to_path_buf),
        VerifyTarget::All(root) => Some(root.clone()),
    };
    let reg_path = root
        .as_deref()
        .map_or_else(|| register_path(Path::new("audit")), register_path);
    let reg = root
        .as_deref()
        .and_then(|r| load_register(r, opts, uid, &mut report.findings));
    if let Some(r) = &reg {
        report.facts.register.present = true;
        report.facts.register.lines = r.lines;
        if let VerifyTarget::Project(dir) = &opts.target {
            report.facts.register.names_project = dir
                .file_name()
                .is_some_and(|n| r.projects.contains(n.to_string_lossy().as_ref()));
        }
    }
    let claimed = root.as_deref().map(claimed_key_ids).unwrap_or_default();
    let reg_ctx = RegCtx {
        path: &reg_path,
        info: reg.as_ref(),
        session_key_ids: &claimed.sessions,
        given_key_ids: opts.keys.iter().map(|k| hex(&k.key_id())).collect(),
    };
    if let Some(root) = &root {
        key_unused(root, opts, &claimed, reg.as_ref(), &mut report.findings);
    }
    match &opts.target {
        VerifyTarget::Project(dir) => {
            witnessed_all &= verify_project(dir, opts, uid, &reg_ctx, &mut report);
        }
        VerifyTarget::All(root) => {
            check_meta(root, true, uid, &mut report.findings);
            let mut dirs: Vec<PathBuf> = match fs::read_dir(root) {
                // No audit folder: nothing recorded yet (a register or a given key that says
                // otherwise is reported below and by KEY_UNUSED).
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Ok(rd) => rd
                    .filter_map(Result::ok)
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(layout::valid_project_dir_name)
                    })
                    .map(|e| e.path())
                    .collect(),
                Err(e) => {
                    report.findings.push(Finding::new(
                        root,
                        Code::Unreadable,
                        Severity::Undecidable,
                        format!("cannot list the audit folder: {e}"),
                    ));
                    Vec::new()
                }
            };
            dirs.sort();
            report.facts.target = TargetFacts::All {
                projects: dirs.len() as u64,
            };
            let local: HashSet<String> = dirs
                .iter()
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            for d in &dirs {
                witnessed_all &= verify_project(d, opts, uid, &reg_ctx, &mut report);
            }
            if let Some(reg) = &reg {
                let mut gone: Vec<&String> =
                    reg.last.keys().filter(|p| !local.contains(*p)).collect();
                gone.sort();
                for p in gone {
                    // Only a "creating project" record (index length 0): the writer may have
                    // died before it created the folder.
                    let creating = reg.last.get(p).is_some_and(|e| e.index_lines == 0);
                    report.findings.push(Finding::new(
                        &root.join(p),
                        Code::FileMissing,
                        if creating {
                            Severity::Warning
                        } else {
                            Severity::Error
                        },
                        format!(
                            "the register records sessions of project {p} (the last one {}), whose audit folder is gone",
                            reg.last.get(p).map_or("", |e| e.session.as_str())
                        ),
                    ));
                }
            }
            if let Some(w) = &opts.witness {
                match witness::list(w, checkpoint::ORIGIN_PREFIX) {
                    Ok(origins) => {
                        report.facts.witness_origins = Some(origins.len() as u64);
                        let mut missing: Vec<String> = origins
                            .iter()
                            .filter_map(|o| o.strip_prefix(checkpoint::ORIGIN_PREFIX))
                            .filter_map(|rest| rest.split_once('/').map(|(p, _)| p.to_string()))
                            .filter(|p| !local.contains(p))
                            .collect();
                        missing.sort();
                        missing.dedup();
                        for p in missing {
                            report.findings.push(Finding::new(
                                &root.join(&p),
                                Code::WitnessAhead,
                                Severity::Error,
                                "the witness holds checkpoints of this project, whose audit folder is gone",
                            ));
                        }
                    }
                    Err(e) => report.findings.push(Finding::new(
                        root,
                        Code::WitnessUnavailable,
                        Severity::Undecidable,
                        e.to_string(),
                    )),
                }
            }
        }
    }
    report.facts = facts(opts, &report, witnessed_all);
    report.coverage = Coverage::from_facts(&report.facts);
    report
}

/// The register, and where it is.
struct RegCtx<'a> {
    path: &'a Path,
    /// `None`: there is no register (or it could not be read; that is reported).
    info: Option<&'a RegisterInfo>,
    /// Key ids claimed by the first line of any session file under the audit root.
    session_key_ids: &'a HashSet<String>,
    /// Key ids of the keys given.
    given_key_ids: HashSet<String>,
}

/// Key ids claimed anywhere under the audit root, read without checking MACs.
#[derive(Default)]
struct ClaimedKeys {
    /// By a session file's first line.
    sessions: HashSet<String>,
    /// By a session's first line or an index line.
    any: HashSet<String>,
}

fn claimed_key_ids(root: &Path) -> ClaimedKeys {
    let mut out = ClaimedKeys::default();
    let Ok(rd) = fs::read_dir(root) else {
        return out;
    };
    let key_of = |bytes: &[u8]| -> Option<String> {
        let (prefix, _) = line::split_mac(bytes)?;
        let h = line::parse_header(prefix)?;
        let v = crate::json::parse(h.event).ok()?;
        v.get("key_id")?.as_str().map(str::to_string)
    };
    for dir in rd.filter_map(Result::ok) {
        if !dir
            .file_name()
            .to_str()
            .is_some_and(layout::valid_project_dir_name)
        {
            continue;
        }
        let Ok(files) = fs::read_dir(dir.path()) else {
            continue;
        };
        for f in files.filter_map(Result::ok) {
            let name = f.file_name().to_string_lossy().into_owned();
            let Ok(file) = fsx::open_read(&f.path()) else {
                continue;
            };
            if let Some((lane, "jsonl")) = journal::parse_lane_file(&name) {
                let mut data = Vec::new();
                if std::io::Read::read_to_end(&mut &file, &mut data).is_ok() {
                    // Archives only as the journal names them (checked by verify, which
                    // reports a record or archive that does not check): an archive file no
                    // journal names claims nothing.
                    for (_, data) in crate::archive::lane_files(&dir.path(), lane, (f.path(), data))
                    {
                        for seg in journal::segments(&data) {
                            let first = seg.data.split(|&c| c == b'\n').next().unwrap_or(b"");
                            if let Some(k) = key_of(first) {
                                out.sessions.insert(k.clone());
                                out.any.insert(k);
                            }
                        }
                    }
                }
            } else if name == layout::INDEX_FILE {
                let mut data = Vec::new();
                if std::io::Read::read_to_end(&mut &file, &mut data).is_ok() {
                    let (lines, _) = layout::split_lines(&data);
                    out.any.extend(lines.iter().filter_map(|(_, l)| key_of(l)));
                }
            } else if name.ends_with(".jsonl") {
                let mut first = Vec::new();
                let mut r = std::io::BufReader::new(&file);
                let limit = crate::MAX_LINE_BYTES as u64 + 1;
                if std::io::BufRead::read_until(
                    &mut std::io::Read::take(&mut r, limit),
                    b'\n',
                    &mut first,
                )
                .is_ok()
                {
                    if first.last() == Some(&b'\n') {
                        first.pop();
                    }
                    if let Some(k) = key_of(&first) {
                        out.sessions.insert(k.clone());
                        out.any.insert(k);
                    }
                }
            }
        }
    }
    out
}

/// KEY_UNUSED: an exported secret given to verify (not the one on disk) that no session
/// first line, index line or register line names. The user kept it because sessions were
/// written under it; that none remains means they were removed with every trace. Checked only
/// when `keys_dir` is known (to tell the secret on disk from exported ones).
fn key_unused(
    root: &Path,
    opts: &VerifyOptions,
    claimed: &ClaimedKeys,
    reg: Option<&RegisterInfo>,
    findings: &mut Vec<Finding>,
) {
    let Some(keys_dir) = &opts.keys_dir else {
        return;
    };
    let on_disk = InstallSecret::load(keys_dir)
        .ok()
        .flatten()
        .map(|k| hex(&k.key_id()));
    for k in &opts.keys {
        let id = hex(&k.key_id());
        if on_disk.as_deref() == Some(id.as_str())
            || claimed.any.contains(&id)
            || reg.is_some_and(|r| r.key_ids.contains(&id))
        {
            continue;
        }
        findings.push(Finding::new(
            root,
            Code::KeyUnused,
            Severity::Error,
            format!(
                "the exported key {id} was given, but no session, index line or register line under it remains: its sessions were removed with every trace (the audit folder and the register wiped?)"
            ),
        ));
    }
}

/// The register's lines with those of its archives put back in front, oldest first, each
/// archive believed only if its record's MAC checks (or is under a key not given) and it
/// decodes to exactly the length, line count and SHA-256 the record names; line numbers in
/// findings then count the archived lines too. When the chain cannot be followed to its start
/// (an archive missing or not the one named: a finding), the lines from the last archive that
/// could be read are returned with where the chain goes on from there (`check_register`'s
/// `base`).
fn register_with_archives(
    path: &Path,
    live: Vec<u8>,
    opts: &VerifyOptions,
    uid: u32,
    findings: &mut Vec<Finding>,
) -> (Vec<u8>, Option<(u64, Hash)>) {
    // Newest first: the register, then each archive its first line names.
    let mut files: Vec<Vec<u8>> = vec![live];
    let mut broken: Option<(u64, Hash)> = None;
    while let Some(rec) = files
        .last()
        .and_then(|d| crate::register::archive_record(d))
    {
        if files.len() > MAX_ARCHIVES {
            broken = Some(rec.base());
            break;
        }
        let at = |f: Finding| f.at(Some(0), 1);
        match rec.authentic(&opts.keys) {
            Some(true) => {}
            Some(false) => {
                findings.push(at(Finding::new(
                    path,
                    Code::BadMac,
                    Severity::Error,
                    "the MAC does not match the register's archive record: register lines removed under a forged record",
                )));
                broken = Some(rec.base());
                break;
            }
            None => {
                // Not followed: what it names cannot be believed, and its length could be any.
                findings.push(at(Finding::new(
                    path,
                    Code::KeyUnknown,
                    Severity::Undecidable,
                    format!(
                        "the register's archive record is under key {}, which was not given",
                        rec.event.key_id
                    ),
                )));
                broken = Some(rec.base());
                break;
            }
        }
        let a = &rec.event.archive;
        let archive = crate::archive::register_archive_path(path, a.seq);
        check_meta(&archive, false, uid, findings);
        let raw = match read_nofollow(&archive, findings) {
            Some(Some(raw)) => raw,
            Some(None) => {
                findings.push(at(Finding::new(
                    path,
                    Code::FileMissing,
                    Severity::Error,
                    format!(
                        "the register's first line names archive {} ({} register lines), which is gone",
                        archive.display(),
                        a.lines
                    ),
                )));
                broken = Some(rec.base());
                break;
            }
            None => {
                broken = Some(rec.base());
                break;
            }
        };
        let checked = crate::archive::decode(&raw, a.bytes).and_then(|data| {
            let (lines, torn) = split_lines(&data);
            if data.len() as u64 != a.bytes || hex(&sha256(&data)) != a.sha256 {
                Err("its lines differ from what the record names (length or SHA-256)".to_string())
            } else if lines.len() as u64 != a.lines || torn.is_some() {
                Err("its line count differs from the record's".to_string())
            } else if lines.last().map(|(_, l)| sha256(l)) != Some(rec.prev) {
                Err("its last line is not the one the record chains to".to_string())
            } else {
                Ok(data)
            }
        });
        match checked {
            Ok(data) => files.push(data),
            Err(why) => {
                findings.push(Finding::new(
                    &archive,
                    Code::RootMismatch,
                    Severity::Error,
                    format!(
                        "not the archive the register's first line names: {why}; register lines were rewritten or replaced"
                    ),
                ));
                broken = Some(rec.base());
                break;
            }
        }
    }
    if files.len() == 1 && broken.is_none() {
        // No archive record: the register is the whole chain.
        return (files.pop().unwrap_or_default(), None);
    }
    // Oldest first; every file but the oldest starts with the record that names the one
    // before it, which is not a line of the chain, and so does the oldest one read when the
    // chain could not be followed further (`broken` then says where the chain goes on).
    let mut out = Vec::new();
    for (k, data) in files.iter().rev().enumerate() {
        let from = if k > 0 || broken.is_some() {
            crate::register::archive_record(data).map_or(0, |r| r.len as usize)
        } else {
            0
        };
        out.extend_from_slice(data.get(from..).unwrap_or_default());
    }
    (out, broken)
}

/// Reads and checks the install-wide register, and compares the audit root's and the
/// register's ctime with its last recorded write (a removed project folder, or the whole
/// audit folder swapped for an older copy, changes the root's ctime).
fn load_register(
    root: &Path,
    opts: &VerifyOptions,
    uid: u32,
    findings: &mut Vec<Finding>,
) -> Option<RegisterInfo> {
    let root_meta = fs::symlink_metadata(root).ok();
    let path = register_path(root);
    let reg_meta = fs::symlink_metadata(&path).ok();
    check_meta(&path, false, uid, findings);
    let data = read_nofollow(&path, findings)??;
    // The register's own archive record, when authentic, is its latest write until a line
    // follows it (a close killed right after the register's rewrite).
    let record_time = crate::register::archive_record(&data)
        .filter(|r| r.authentic(&opts.keys) == Some(true))
        .and_then(|r| r.time_ms);
    let (data, base) = register_with_archives(&path, data, opts, uid, findings);
    let mut info = check_register(&path, &data, &opts.keys, false, None, base, findings);
    info.last_time_ms = info.last_time_ms.max(record_time);
    let slack = u64::try_from(opts.ctime_slack.as_millis()).unwrap_or(u64::MAX);
    if let Some(t) = info.last_time_ms {
        for (p, meta) in [(root, &root_meta), (path.as_path(), &reg_meta)] {
            if let Some(meta) = meta {
                let c = fsx::ctime_ms(meta);
                if c > t.saturating_add(slack) {
                    findings.push(Finding::new(
                        p,
                        Code::ChangedAfterWrite,
                        Severity::Undecidable,
                        format!(
                            "changed {} ms after the register's last entry: a project folder removed or renamed, the audit folder replaced by a copy, or register lines cut?",
                            c - t
                        ),
                    ));
                }
            }
        }
    }
    Some(info)
}

fn check_meta(path: &Path, dir: bool, uid: u32, findings: &mut Vec<Finding>) -> bool {
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if let Some(problem) = fsx::meta_problem(&meta, dir, uid) {
                findings.push(Finding::new(
                    path,
                    Code::UnsafeMode,
                    Severity::Error,
                    problem,
                ));
                return false;
            }
            true
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(e) => {
            findings.push(Finding::new(
                path,
                Code::Unreadable,
                Severity::Undecidable,
                e.to_string(),
            ));
            false
        }
    }
}

/// Reads a file without following links. `Ok(None)`: it does not exist.
fn read_nofollow(path: &Path, findings: &mut Vec<Finding>) -> Option<Option<Vec<u8>>> {
    let mut unreadable = |e: io::Error| {
        findings.push(Finding::new(
            path,
            Code::Unreadable,
            Severity::Undecidable,
            e.to_string(),
        ));
        None
    };
    match fsx::open_read(path) {
        Ok(mut f) => {
            let len = f.metadata().map_or(0, |m| m.len());
            let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0).saturating_add(1));
            match f.read_to_end(&mut data) {
                Ok(_) => Some(Some(data)),
                Err(e) => unreadable(e),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(None),
        // A link was already reported as UNSAFE_MODE; its target is not read.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => None,
        Err(e) => unreadable(e),
    }
}

/// A lane's checkpoint, read as [`read_nofollow`] does, again (up to four times) when its size
/// or times changed while it was read: a closing session may be rewriting the file this one
/// opened, which two replacements earlier was the checkpoint (`fsx::replace_reusing_inodes`).
/// What is returned is then whole: the old checkpoint or a newer one, never a mix.
fn read_settled(path: &Path, findings: &mut Vec<Finding>) -> Option<Option<Vec<u8>>> {
    let stamp = |f: &fs::File| {
        f.metadata().ok().map(|m| {
            (
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
        })
    };
    for _ in 0..4 {
        let Ok(mut f) = fsx::open_read(path) else {
            break;
        };
        let before = stamp(&f);
        let mut data = Vec::new();
        if f.read_to_end(&mut data).is_err() {
            break;
        }
        if before.is_some() && before == stamp(&f) {
            return Some(Some(data));
        }
    }
    // Not found, a link, unreadable, or still changing: as a plain read reports it.
    read_nofollow(path, findings)
}

/// An authentic index line's evidence.
pub(crate) struct IndexInfo {
    /// SHA-256 of every complete line.
    pub line_hashes: Vec<Hash>,
    /// Sessions named by any readable start line, authentic or not.
    mentioned: HashSet<String>,
    pub starts: Vec<(u64, IndexStartEvent)>,
    pub closes: HashMap<String, (u64, IndexCloseEvent)>,
    /// Time of the last authentic line (lines under unknown keys do not count).
    pub last_time_ms: Option<u64>,
    /// Line number of the last authentic line, 0 if none.
    pub last_authentic_line: u64,
    /// Lines under keys not given, collected with `accept_unknown_keys`.
    pub unknown: Vec<crate::register::UnknownLine>,
}

/// Checks a project index's chain and MACs (also used by the writer at `open`).
///
/// `accept_unknown_keys`: lines under keys not given (still reported KEY_UNKNOWN) continue the
/// chain and their starts and closes are collected, but their times are not (`last_time_ms`
/// counts authentic lines only) and they are listed in `unknown`. The writer does so: it holds
/// only the current secret, and anyone can write a line under a made-up key id, so it names
/// the ones it builds on (`StartEvent::unverified`) for verify to check.
pub(crate) fn verify_index(
    path: &Path,
    project: &str,
    data: &[u8],
    keys: &[InstallSecret],
    accept_unknown_keys: bool,
    findings: &mut Vec<Finding>,
) -> IndexInfo {
    let mut info = IndexInfo {
        line_hashes: Vec::new(),
        mentioned: HashSet::new(),
        starts: Vec::new(),
        closes: HashMap::new(),
        last_time_ms: None,
        last_authentic_line: 0,
        unknown: Vec::new(),
    };
    let (lines, torn) = split_lines(data);
    let mut prev = ZERO_HASH;
    let mut prev_bad = false;
    let mut next_seq = 0u64;
    for (i, (offset, bytes)) in lines.iter().enumerate() {
        let line_no = i as u64 + 1;
        let offset = Some(*offset);
        let hash = sha256(bytes);
        info.line_hashes.push(hash);
        let parsed = line::split_mac(bytes)
            .and_then(|(prefix, mac)| line::parse_header(prefix).map(|h| (prefix, mac, h)));
        let mut bad = true;
        match parsed {
            None => {
                let code = if line::parse_loose(bytes).is_some() {
                    Code::BadMac
                } else {
                    Code::Malformed
                };
                findings.push(
                    Finding::new(
                        path,
                        code,
                        Severity::Error,
                        "not an index line as Garuda writes them",
                    )
                    .at(offset, line_no),
                );
            }
            Some((prefix, mac, h)) => {
                let f = |code: Code, sev: Severity, msg: String| {
                    Finding::new(path, code, sev, msg)
                        .at(offset, line_no)
                        .claims(Some(h.seq), Some(h.epoch))
                };
                match parse_event(h.kind, h.event) {
                    Err(e) => findings.push(f(Code::Malformed, Severity::Error, e)),
                    Ok(ev) => {
                        if let IndexEvent::Start(s) = &ev {
                            info.mentioned.insert(s.session.clone());
                        }
                        let claimed_key = match &ev {
                            IndexEvent::Start(s) => s.key_id.as_str(),
                            IndexEvent::Close(c) => c.key_id.as_str(),
                        };
                        let authentic = layout::valid_session_id(ev.session())
                            && keys.iter().any(|k| {
                                ct_eq(&k.index_key(project, ev.session()).mac(prefix), &mac)
                            });
                        let mut usable = authentic;
                        if !authentic {
                            if keys.iter().any(|k| hex(&k.key_id()) == claimed_key) {
                                findings.push(f(
                                    Code::BadMac,
                                    Severity::Error,
                                    "the MAC does not match the index line".into(),
                                ));
                            } else {
                                findings.push(f(
                                    Code::KeyUnknown,
                                    Severity::Undecidable,
                                    format!(
                                        "index line of session {} is under key {claimed_key}, which was not given",
                                        ev.session()
                                    ),
                                ));
                                usable = accept_unknown_keys;
                            }
                        }
                        if usable {
                            bad = false;
                            if h.seq != next_seq {
                                findings.push(f(
                                    if h.seq > next_seq {
                                        Code::SeqGap
                                    } else {
                                        Code::SeqDup
                                    },
                                    Severity::Error,
                                    format!("index seq {} where {next_seq} was expected", h.seq),
                                ));
                            }
                            next_seq = next_seq.max(h.seq + 1);
                            if h.epoch != 0 {
                                findings.push(f(
                                    Code::EpochMismatch,
                                    Severity::Error,
                                    "index lines have epoch 0".into(),
                                ));
                            }
                            if !prev_bad && h.prev != prev {
                                findings.push(f(
                                    Code::PrevMismatch,
                                    Severity::Error,
                                    "index prev is not the hash of the line before".into(),
                                ));
                            }
                            if authentic {
                                if let Some(t) = crate::util::parse_time(h.time) {
                                    info.last_time_ms =
                                        Some(info.last_time_ms.map_or(t, |m| m.max(t)));
                                }
                                info.last_authentic_line = line_no;
                            } else {
                                info.unknown.push(crate::register::UnknownLine {
                                    line: line_no,
                                    key_id: claimed_key.to_string(),
                                    hash,
                                    time_ms: crate::util::parse_time(h.time),
                                });
                            }
                            match ev {
                                IndexEvent::Start(s) => info.starts.push((line_no, s)),
                                IndexEvent::Close(c) => {
                                    info.closes.insert(c.session.clone(), (line_no, c));
                                }
                            }
                        }
                    }
                }
            }
        }
        if bad {
            next_seq += 1;
        }
        prev = hash;
        prev_bad = bad;
    }
    if let Some((offset, rest)) = torn {
        findings.push(Finding::torn_tail(
            path,
            "index",
            offset,
            rest.len(),
            lines.len() as u64 + 1,
        ));
    }
    info
}

struct SessionState {
    id: String,
    path: PathBuf,
    /// Where the session starts in its file: 0 for an old-layout session file, its first
    /// line's offset and the number of lines before it in a journal.
    base_off: u64,
    base_line: u64,
    /// The journal lane (`None`: an old-layout session file).
    lane: Option<u64>,
    exists: bool,
    live: bool,
    scan: Option<Scan>,
    key_id: Option<KeyId>,
    complete: bool,
    missing_attested: bool,
    witnessed: Option<u64>,
}

/// Verifies one project folder; returns whether a witness agreed with every session's end.
fn verify_project(
    dir: &Path,
    opts: &VerifyOptions,
    uid: u32,
    reg: &RegCtx<'_>,
    report: &mut Report,
) -> bool {
    let findings = &mut report.findings;
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The ctimes first: anything written after this point is read below and counted.
    let dir_meta = fs::symlink_metadata(dir);
    let index_path = dir.join(INDEX_FILE);
    let index_meta = fs::symlink_metadata(&index_path).ok();
    match &dir_meta {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match reg.info.and_then(|r| r.last.get(&dir_name)) {
                Some(rec) if rec.index_lines == 0 => findings.push(Finding::new(
                    dir,
                    Code::FileMissing,
                    Severity::Warning,
                    format!(
                        "the register records only that session {} was creating this project's audit folder, which is not there: its writer died before creating it?",
                        rec.session
                    ),
                )),
                Some(rec) => findings.push(Finding::new(
                    dir,
                    Code::FileMissing,
                    Severity::Error,
                    format!(
                        "the register records sessions of this project (the last one {}), but its audit folder is gone",
                        rec.session
                    ),
                )),
                // No authentic record of the project. A register line under a key not given
                // that names it, or an audit root without a register, leaves it open whether
                // the project had sessions; otherwise nothing says it had any: no finding, and
                // the report says that no session is recorded (`Outcome::NoSessions`).
                None if reg.info.is_some_and(|r| r.projects.contains(&dir_name)) => findings
                    .push(Finding::new(
                        dir,
                        Code::FileMissing,
                        Severity::Undecidable,
                        "no audit folder for this project, and the register names it only in lines that could not be checked (under a key not given)",
                    )),
                None if reg.info.is_none() && report.facts.audit_root_exists => {
                    findings.push(Finding::new(
                        dir,
                        Code::FileMissing,
                        Severity::Undecidable,
                        format!(
                            "no audit folder for this project, and no register to tell whether it had one, though the audit folder {} exists",
                            dir.parent().unwrap_or(dir).display()
                        ),
                    ));
                }
                None => {}
            }
            // The witness is outside the reach of whoever removed the folder: it may still
            // hold the project's checkpoints.
            if let Some(w) = &opts.witness {
                let prefix = format!("{}{dir_name}/", checkpoint::ORIGIN_PREFIX);
                match witness::list(w, &prefix) {
                    Ok(origins) => {
                        report.facts.witness_origins = Some(origins.len() as u64);
                        if !origins.is_empty() {
                            findings.push(Finding::new(
                                dir,
                                Code::WitnessAhead,
                                Severity::Error,
                                format!(
                                    "the witness holds checkpoints of {} session(s) of this project, whose audit folder is gone",
                                    origins.len()
                                ),
                            ));
                        }
                    }
                    Err(e) => findings.push(Finding::new(
                        dir,
                        Code::WitnessUnavailable,
                        Severity::Undecidable,
                        e.to_string(),
                    )),
                }
            }
            return false;
        }
        _ => {}
    }
    if let TargetFacts::Project { exists, .. } = &mut report.facts.target {
        *exists = true;
    }
    if !check_meta(dir, true, uid, findings)
        && fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink())
    {
        return false;
    }

    // Files present.
    let mut logs: HashSet<String> = HashSet::new();
    let mut ckpts: HashSet<String> = HashSet::new();
    let mut lanes: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    match fs::read_dir(dir) {
        Ok(rd) => {
            for e in rd.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == INDEX_FILE || name.starts_with('.') {
                    continue;
                }
                if journal::is_journal_name(&name) {
                    check_meta(&e.path(), false, uid, findings);
                    if crate::archive::parse_archive_name(&name).is_some() {
                        // Read where its journal names it (`archive_chain`); one named by
                        // nothing (a crash before its journal named it, or a prune's leftover)
                        // holds nothing verify relies on.
                        continue;
                    }
                    match journal::parse_lane_file(&name) {
                        Some((lane, "jsonl")) => {
                            lanes.insert(lane);
                        }
                        Some((_, "ckpt")) => report.facts.checkpoints += 1,
                        Some((_, "tail")) => {}
                        _ => findings.push(Finding::new(
                            &e.path(),
                            Code::Malformed,
                            Severity::Error,
                            "not a journal file name Garuda writes",
                        )),
                    }
                    continue;
                }
                if let Some(id) = name.strip_suffix(".jsonl") {
                    check_meta(&e.path(), false, uid, findings);
                    if layout::valid_session_id(id) {
                        logs.insert(id.to_string());
                    } else {
                        findings.push(Finding::new(
                            &e.path(),
                            Code::Malformed,
                            Severity::Error,
                            "not a session file name Garuda writes",
                        ));
                    }
                } else if let Some(id) = name.strip_suffix(".ckpt") {
                    check_meta(&e.path(), false, uid, findings);
                    if layout::valid_session_id(id) {
                        ckpts.insert(id.to_string());
                    }
                }
            }
        }
        Err(e) => {
            findings.push(Finding::new(
                dir,
                Code::Unreadable,
                Severity::Undecidable,
                format!("cannot list: {e}"),
            ));
            return false;
        }
    }

    report.facts.journals += lanes.len() as u64;
    report.facts.legacy_sessions += logs.len() as u64;
    report.facts.checkpoints += ckpts.len() as u64;
    if index_meta.is_some() {
        report.facts.legacy_indexes += 1;
    }

    // The index.
    check_meta(&index_path, false, uid, findings);
    let index = match read_nofollow(&index_path, findings) {
        Some(Some(data)) => Some(verify_index(
            &index_path,
            &dir_name,
            &data,
            &opts.keys,
            false,
            findings,
        )),
        Some(None) => {
            if !logs.is_empty() || !ckpts.is_empty() {
                findings.push(Finding::new(
                    &index_path,
                    Code::FileMissing,
                    Severity::Error,
                    "the project index is gone but sessions remain",
                ));
            }
            None
        }
        None => None,
    };
    let empty_index = IndexInfo {
        line_hashes: Vec::new(),
        mentioned: HashSet::new(),
        starts: Vec::new(),
        closes: HashMap::new(),
        last_time_ms: None,
        last_authentic_line: 0,
        unknown: Vec::new(),
    };
    let index = index.unwrap_or(empty_index);
    if let Some(rec) = reg.info.and_then(|r| r.legacy.get(&dir_name)) {
        if let Some(f) = index_against_register(&index_path, &index.line_hashes, rec) {
            findings.push(f);
        }
    }

    // Sessions: index order first, then files the index does not know.
    let mut order: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut index_key_ids: HashMap<String, String> = HashMap::new();
    for (_, s) in &index.starts {
        if seen.insert(s.session.clone()) {
            order.push(s.session.clone());
        }
        index_key_ids.insert(s.session.clone(), s.key_id.clone());
    }
    let mut extra: Vec<String> = logs
        .iter()
        .chain(ckpts.iter())
        .filter(|id| !seen.contains(*id))
        .cloned()
        .collect();
    extra.sort();
    extra.dedup();
    for id in &extra {
        if logs.contains(id)
            && !index.mentioned.contains(id)
            && fs::symlink_metadata(&index_path).is_ok()
        {
            findings.push(Finding::new(
                &index_path,
                Code::Truncated,
                Severity::Error,
                format!(
                    "the index has no start entry for session {id}, which Garuda writes before the session file: index lines were removed"
                ),
            ));
        }
        order.push(id.clone());
        seen.insert(id.clone());
    }

    let mut states: Vec<SessionState> = Vec::new();
    for id in &order {
        let path = dir.join(layout::log_file_name(id));
        let mut st = SessionState {
            id: id.clone(),
            path: path.clone(),
            exists: false,
            live: false,
            scan: None,
            key_id: None,
            complete: false,
            missing_attested: false,
            witnessed: None,
            base_off: 0,
            base_line: 0,
            lane: None,
        };
        if let Some(Some(data)) = read_nofollow(&path, findings) {
            st.exists = true;
            // A lock means a running writer only for a session that is not closed: a closed
            // session has no writer, whoever holds a lock on its file.
            if !index.closes.contains_key(id) {
                if let Ok(f) = fsx::open_read(&path) {
                    if let Err(fs::TryLockError::WouldBlock) = f.try_lock_shared() {
                        st.live = true;
                    } else {
                        let _ = f.unlock();
                    }
                }
            }
            match pick_key(
                &dir_name,
                id,
                &data,
                &opts.keys,
                index_key_ids.get(id).map(String::as_str),
            ) {
                Ok(key) => {
                    st.key_id = key.map(InstallSecret::key_id);
                    let scan = scan_session(&path, Some(&dir_name), id, &data, key, false);
                    st.scan = Some(scan);
                }
                Err(()) => {
                    findings.push(Finding::new(
                        &path,
                        Code::KeyUnknown,
                        Severity::Undecidable,
                        "none of the given keys is this session's (verify it with --key and the exported key)",
                    ));
                    st.scan = Some(scan_session(&path, Some(&dir_name), id, &data, None, false));
                }
            }
        } else if fs::symlink_metadata(&path).is_ok() {
            // Present but unreadable or a link: reported already; not "missing".
            st.exists = true;
        }
        if let Some(scan) = &mut st.scan {
            findings.append(&mut scan.findings);
        }
        states.push(st);
    }
    // The journal lanes. A lane the register records, whose journal is gone, is missing
    // evidence (its tail state or checkpoint left behind too).
    if let Some(r) = reg.info {
        let mut recorded: Vec<(&u64, &crate::events::RegisterEvent)> = r
            .lanes
            .iter()
            .filter(|((p, l), ev)| *p == dir_name && ev.index_lines > 0 && !lanes.contains(l))
            .map(|((_, l), ev)| (l, ev))
            .collect();
        recorded.sort_by_key(|(l, _)| **l);
        for (lane, ev) in recorded {
            findings.push(Finding::new(
                &dir.join(journal::journal_file_name(*lane)),
                Code::FileMissing,
                Severity::Error,
                format!(
                    "the register records {} line(s) of this journal after session {}; the journal is gone",
                    ev.index_lines, ev.session
                ),
            ));
        }
    }
    let mut lane_infos: Vec<LaneInfo> = Vec::new();
    for &lane in &lanes {
        if let Some(info) = read_lane(dir, &dir_name, lane, uid, opts, &mut states, findings) {
            lane_infos.push(info);
        }
    }
    // Every session of the journal layout writes a line to the install-wide register when it
    // closes (a close that cannot write it fails), so closed sessions with no register at all
    // mean the register was removed (with its tail state, the only other record of it).
    if reg.info.is_none() {
        let closed = states
            .iter()
            .filter(|s| {
                s.lane.is_some() && s.scan.as_ref().is_some_and(|sc| sc.closed_at.is_some())
            })
            .count();
        if closed > 0 {
            findings.push(Finding::new(
                reg.path,
                Code::FileMissing,
                Severity::Error,
                format!(
                    "this project's journal holds {closed} closed session(s), each of which wrote a line to the install-wide register when it closed, but there is no register: it was removed"
                ),
            ));
        }
    }
    let pos: HashMap<String, usize> = states
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();

    // What each session's first line says about the register, and what its writer found.
    for st in &states {
        let Some(start) = st.scan.as_ref().and_then(|s| s.start.as_ref()) else {
            continue;
        };
        for p in &start.found_at_start {
            findings.push(
                Finding::new(
                    &st.path,
                    Code::FoundAtStart,
                    Severity::Error,
                    format!(
                        "when this session started, its writer found {} at {}: {}",
                        p.code, p.file, p.detail
                    ),
                )
                .at(Some(st.base_off), st.base_line + 1),
            );
        }
        for u in &start.unverified {
            if reg.given_key_ids.contains(&u.key_id) || reg.session_key_ids.contains(&u.key_id) {
                // Under a given key the line itself is checked (BAD_MAC if forged); under a
                // key some session uses, it is KEY_UNKNOWN until that key is given.
                continue;
            }
            findings.push(
                Finding::new(
                    &st.path,
                    Code::UnverifiedBase,
                    Severity::Error,
                    format!(
                        "this session's writer built on {} line {} (hash {}) under key {}, which no given key and no session has: a line forged under a made-up key id",
                        u.file, u.line, u.hash, u.key_id
                    ),
                )
                .at(Some(st.base_off), st.base_line + 1),
            );
        }
        let Some(n) = start.register else { continue };
        match reg.info {
            None => findings.push(Finding::new(
                reg.path,
                Code::FileMissing,
                Severity::Error,
                format!(
                    "session {} records its start as register line {}, but there is no register",
                    st.id,
                    n + 1
                ),
            )),
            Some(r) if n >= r.lines => findings.push(
                Finding::new(
                    reg.path,
                    Code::Truncated,
                    Severity::Error,
                    format!(
                        "session {} records its start as register line {}; the register has {} line(s)",
                        st.id,
                        n + 1,
                        r.lines
                    ),
                )
                .at(None, r.lines + 1),
            ),
            Some(r) => {
                if let Some((kind, project, session)) = r.by_seq.get(&n) {
                    if kind != INDEX_START || *project != dir_name || *session != st.id {
                        findings.push(
                            Finding::new(
                                reg.path,
                                Code::RootMismatch,
                                Severity::Error,
                                format!(
                                    "register line {} is not the start of session {} of {dir_name}, as that session records",
                                    n + 1,
                                    st.id
                                ),
                            )
                            .at(None, n + 1),
                        );
                    }
                }
            }
        }
    }

    // The lanes' own evidence: order, retention records, tail states, the register's records,
    // checkpoints, ctimes, the old index the first journal session found.
    let lane_attests = check_lanes(
        dir,
        &dir_name,
        opts,
        reg,
        &lane_infos,
        &states,
        &pos,
        &index,
        findings,
    );

    // Checkpoints (old layout: one per session; a lane's is checked with the lane).
    for st in &mut states {
        if st.lane.is_some() {
            continue;
        }
        let ckpt_path = dir.join(layout::ckpt_file_name(&st.id));
        let key = st
            .key_id
            .and_then(|id| opts.keys.iter().find(|k| k.key_id() == id));
        let wants_ckpt = st
            .scan
            .as_ref()
            .and_then(|s| s.start.as_ref())
            .is_some_and(|s| s.checkpoints);
        match read_nofollow(&ckpt_path, findings) {
            Some(Some(data)) => check_checkpoint(&ckpt_path, &data, &dir_name, st, key, findings),
            Some(None) => {
                if let Some(scan) = &st.scan {
                    // The writer publishes a checkpoint after every seal before it writes
                    // anything else, and before the index close entry: a session closed in the
                    // index, or with a line after a seal, had one.
                    let closed_in_index = index.closes.contains_key(&st.id);
                    if wants_ckpt
                        && (scan.ckpt_min > 0 || closed_in_index)
                        && !scan.seals.is_empty()
                        && st.key_id.is_some()
                    {
                        findings.push(
                            Finding::new(
                                &ckpt_path,
                                Code::FileMissing,
                                Severity::Error,
                                format!(
                                    "checkpoints are on and the session has {} seal(s) (closed, or continued after one), yet there is no checkpoint",
                                    scan.seals.len()
                                ),
                            ),
                        );
                    }
                }
            }
            None => {}
        }
    }

    // Attestations: index close entries, later sessions' first lines and index start
    // entries, running writers.
    let mut attests: Vec<(String, Attest)> = lane_attests;
    // Where a session named by a statement should be: a journal session's predecessor in its
    // journal, an old-layout session in its own file.
    let mut expected_at: HashMap<String, PathBuf> = HashMap::new();
    for st in &states {
        if st.lane.is_none() {
            continue;
        }
        if let Some(start) = st.scan.as_ref().and_then(|s| s.start.as_ref()) {
            if start.legacy_index.is_none() {
                for a in start.prev_session.iter().chain(start.recovered.iter()) {
                    expected_at.insert(a.session.clone(), st.path.clone());
                }
            }
        }
    }
    for (line_no, c) in index.closes.values() {
        attests.push((
            format!("index close entry (index line {line_no})"),
            Attest {
                session: c.session.clone(),
                state: AttestState::Closed,
                lines: c.lines,
                head: c.head.clone(),
            },
        ));
    }
    for (line_no, s) in &index.starts {
        for a in s.prev_session.iter().chain(s.recovered.iter()) {
            attests.push((
                format!(
                    "index start entry of session {} (index line {line_no})",
                    s.session
                ),
                a.clone(),
            ));
        }
    }
    for st in &states {
        if let Some(start) = st.scan.as_ref().and_then(|s| s.start.as_ref()) {
            for a in start.prev_session.iter().chain(start.recovered.iter()) {
                attests.push((format!("first line of session {}", st.id), a.clone()));
            }
        }
    }
    for h in &opts.trusted_heads {
        attests.push((
            "the running writer".into(),
            Attest {
                session: h.session.clone(),
                state: AttestState::Recovered,
                lines: h.lines,
                head: h.head.clone(),
            },
        ));
    }
    // The first line's prev must be the head its own start event gives for the predecessor.
    for st in &states {
        let Some(scan) = &st.scan else { continue };
        let (Some(start), Some(first_prev)) = (&scan.start, scan.first_prev) else {
            continue;
        };
        let want = match &start.prev_session {
            Some(a) if matches!(a.state, AttestState::Closed | AttestState::Recovered) => {
                a.head_hash().unwrap_or(ZERO_HASH)
            }
            _ => ZERO_HASH,
        };
        if first_prev != want {
            findings.push(
                Finding::new(
                    &st.path,
                    Code::PrevMismatch,
                    Severity::Error,
                    "the first line's prev is not the previous session's head it names",
                )
                .at(Some(st.base_off), st.base_line + 1),
            );
        }
    }
    let mut applied: HashSet<(String, u64, String, bool)> = HashSet::new();
    for (source, a) in &attests {
        // The same statement often appears twice (first line and index entry).
        let key = (
            a.session.clone(),
            a.lines,
            a.head.clone(),
            a.state == AttestState::Missing,
        );
        if a.state != AttestState::Open && !applied.insert(key) {
            continue;
        }
        let Some(&i) = pos.get(&a.session) else {
            if lane_infos.iter().any(|l| l.prunes(a)) {
                // Retention pruned it: its sealed head links the rest (reported as PRUNED).
                continue;
            }
            if matches!(a.state, AttestState::Closed | AttestState::Recovered) {
                findings.push(Finding::new(
                    &expected_at
                        .get(&a.session)
                        .cloned()
                        .unwrap_or_else(|| dir.join(layout::log_file_name(&a.session))),
                    Code::FileMissing,
                    Severity::Error,
                    format!(
                        "{source} records session {} ({} lines), which is gone",
                        a.session, a.lines
                    ),
                ));
            }
            continue;
        };
        apply_attest(&mut states[i], source, a, findings);
    }

    // Completeness.
    let latest_session_time = states
        .iter()
        .filter_map(|s| s.scan.as_ref().and_then(|sc| sc.last_time_ms))
        .max();
    for st in &mut states {
        if let Some(scan) = &st.scan {
            if scan.closed_at == Some(scan.lines) {
                st.complete = true;
            }
        }
        if st.complete {
            continue;
        }
        let has_ckpt = ckpts.contains(&st.id);
        if !st.exists {
            if has_ckpt {
                findings.push(Finding::new(
                    &st.path,
                    Code::FileMissing,
                    Severity::Error,
                    "the session's checkpoint exists but its log is gone",
                ));
            } else if st.missing_attested {
                st.complete = true;
                findings.push(Finding::new(
                    &st.path,
                    Code::FileMissing,
                    Severity::Warning,
                    "the index lists this session but the next session found no file (a crash before it was created)",
                ));
            } else if !findings
                .iter()
                .any(|f| f.file == st.path && f.code == Code::FileMissing)
            {
                findings.push(Finding::new(
                    &st.path,
                    Code::FileMissing,
                    Severity::Undecidable,
                    "the index lists this session but it has no file: a crash right after the index entry, or the newest session was deleted",
                ));
            }
            continue;
        }
        let lines = st.scan.as_ref().map_or(0, |s| s.lines);
        let msg = if st.live {
            "being written by a running Garuda: its end is not known yet (a running supervisor can vouch for its head)".to_string()
        } else {
            format!(
                "not closed, and nothing records how it ended: lines after line {lines} may have been cut (or its writer crashed; the project's next session records it as found)"
            )
        };
        findings.push(
            Finding::new(&st.path, Code::OpenSession, Severity::Undecidable, msg)
                .at(None, st.base_line + lines + 1),
        );
    }

    // The witness.
    let mut witnessed_all = true;
    if let Some(w) = &opts.witness {
        let prefix = format!("{}{dir_name}/", checkpoint::ORIGIN_PREFIX);
        match witness::list(w, &prefix) {
            Err(e) => {
                witnessed_all = false;
                findings.push(Finding::new(
                    dir,
                    Code::WitnessUnavailable,
                    Severity::Undecidable,
                    e.to_string(),
                ));
            }
            Ok(origins) => {
                for origin in origins {
                    let Some(id) = origin.strip_prefix(&prefix) else {
                        continue;
                    };
                    // A session that is not here: in its old-layout file if the index knows
                    // it, else in the project's first journal.
                    let path = pos.get(id).map_or_else(
                        || {
                            if lane_infos.is_empty() || index.mentioned.contains(id) {
                                dir.join(layout::log_file_name(id))
                            } else {
                                dir.join(journal::journal_file_name(0))
                            }
                        },
                        |&i| states[i].path.clone(),
                    );
                    let cp = match witness::latest_checkpoint(w, &origin) {
                        Ok(Some(cp)) => cp,
                        Ok(None) => continue,
                        Err(e) => {
                            witnessed_all = false;
                            findings.push(Finding::new(
                                &path,
                                Code::WitnessUnavailable,
                                Severity::Undecidable,
                                e,
                            ));
                            continue;
                        }
                    };
                    let pruned = lane_infos
                        .iter()
                        .filter_map(|l| l.pruned.as_ref())
                        .any(|p| started_by(id, &p.last.session));
                    let Some(st) = pos.get(id).map(|&i| &mut states[i]) else {
                        if pruned {
                            continue;
                        }
                        findings.push(Finding::new(
                            &path,
                            Code::WitnessAhead,
                            Severity::Error,
                            format!(
                                "the witness holds {} line(s) of session {id}, which is not here",
                                cp.size
                            ),
                        ));
                        continue;
                    };
                    let Some(scan) = &st.scan else {
                        findings.push(Finding::new(
                            &path,
                            Code::WitnessAhead,
                            Severity::Error,
                            format!(
                                "the witness holds {} line(s) of this session, whose log is gone",
                                cp.size
                            ),
                        ));
                        continue;
                    };
                    st.witnessed = Some(cp.size);
                    if cp.size > scan.lines {
                        findings.push(
                            Finding::new(
                                &path,
                                Code::WitnessAhead,
                                Severity::Error,
                                format!(
                                    "the witness holds {} lines; the file has {}",
                                    cp.size, scan.lines
                                ),
                            )
                            .at(None, st.base_line + scan.lines + 1),
                        );
                    } else if scan.root_at(cp.size) != cp.root {
                        findings.push(
                            Finding::new(
                                &path,
                                Code::WitnessFork,
                                Severity::Error,
                                format!(
                                    "the witness's tree of {} lines differs from the file's",
                                    cp.size
                                ),
                            )
                            .at(None, st.base_line + cp.size),
                        );
                    }
                }
            }
        }
        for st in &states {
            let wanted = st
                .scan
                .as_ref()
                .and_then(|s| s.start.as_ref())
                .is_some_and(|s| s.witness);
            let lines = st.scan.as_ref().map_or(0, |s| s.lines);
            if st.witnessed != Some(lines) {
                witnessed_all = false;
                if wanted
                    && st.witnessed.is_none()
                    && st.scan.as_ref().is_some_and(|s| s.ckpt_min > 0)
                {
                    findings.push(Finding::new(
                        &st.path,
                        Code::WitnessUnavailable,
                        Severity::Undecidable,
                        "the session sent checkpoints to a witness, but this witness holds none of them",
                    ));
                }
            }
        }
    } else {
        witnessed_all = false;
    }

    // ctime: a removal leaves no file to check, but it changes the folder's ctime, which
    // nobody without root can set back.
    let recorded = [index.last_time_ms, latest_session_time]
        .into_iter()
        .flatten()
        .max();
    let slack = u64::try_from(opts.ctime_slack.as_millis()).unwrap_or(u64::MAX);
    // Never skipped: a lock on a file proves nothing (anyone can take one), and a running
    // writer's own writes are recorded (read after these ctimes were taken).
    {
        if let (Ok(meta), Some(t)) = (&dir_meta, recorded) {
            let c = fsx::ctime_ms(meta);
            if c > t.saturating_add(slack) {
                findings.push(Finding::new(
                    dir,
                    Code::ChangedAfterWrite,
                    Severity::Undecidable,
                    format!(
                        "the folder changed {} ms after the last write Garuda recorded: a file was added, removed or renamed since (the newest session deleted? a backup restored?)",
                        c - t
                    ),
                ));
            }
        }
        if let (Some(meta), Some(t)) = (&index_meta, index.last_time_ms) {
            let c = fsx::ctime_ms(meta);
            if meta.file_type().is_file() && c > t.saturating_add(slack) && meta.nlink() > 0 {
                findings.push(Finding::new(
                    &index_path,
                    Code::ChangedAfterWrite,
                    Severity::Undecidable,
                    format!(
                        "the index changed {} ms after its last entry was written (lines cut from its end?)",
                        c - t
                    ),
                ));
            }
        }
    }

    for st in &states {
        let scan = st.scan.as_ref();
        report.sessions.push(SessionSummary {
            project: dir_name.clone(),
            session: st.id.clone(),
            file: st.path.clone(),
            lines: scan.map_or(0, |s| s.lines),
            closed: scan.is_some_and(|s| s.closed_at.is_some()),
            complete: st.complete,
            key_id: st.key_id.map(|k| hex(&k)),
            witnessed: st.witnessed,
        });
    }
    witnessed_all
}

/// Whether `rest` (bytes with no newline) can be the beginning of a session's first line as
/// the writer serialises it: `{"v":1,"seq":0,"epoch":0,…` and, once the type is there,
/// `session_start`. Only such bytes after the journal's last, closed session are a crash's.
fn is_cut_session_start(rest: &[u8]) -> bool {
    const HEAD: &[u8] = br#"{"v":1,"seq":0,"epoch":0,"#;
    let n = rest.len().min(HEAD.len());
    if rest[..n] != HEAD[..n] {
        return false;
    }
    const TYPE: &[u8] = br#""type":""#;
    match rest.windows(TYPE.len()).position(|w| w == TYPE) {
        None => true,
        Some(at) => {
            let after = &rest[at + TYPE.len()..];
            let want = br#"session_start""#;
            let m = after.len().min(want.len());
            after[..m] == want[..m]
        }
    }
}

fn apply_attest(st: &mut SessionState, source: &str, a: &Attest, findings: &mut Vec<Finding>) {
    match a.state {
        AttestState::Open => {}
        AttestState::Missing => {
            let lines = st.scan.as_ref().map_or(0, |s| s.lines);
            if st.exists && lines > 0 {
                findings.push(Finding::new(
                    &st.path,
                    Code::AfterEnd,
                    Severity::Error,
                    format!(
                        "{source} found no file for this session, yet it now has {lines} lines"
                    ),
                ));
            } else {
                st.missing_attested = true;
            }
        }
        AttestState::Closed | AttestState::Recovered => {
            let Some(scan) = &st.scan else {
                if !st.exists {
                    findings.push(Finding::new(
                        &st.path,
                        Code::FileMissing,
                        Severity::Error,
                        format!(
                            "{source} records {} line(s) of this session; the file is gone",
                            a.lines
                        ),
                    ));
                }
                return;
            };
            let Some(head) = a.head_hash() else {
                findings.push(Finding::new(
                    &st.path,
                    Code::Malformed,
                    Severity::Error,
                    format!("{source} gives a malformed head"),
                ));
                return;
            };
            let n = a.lines;
            if scan.lines < n {
                findings.push(
                    Finding::new(
                        &st.path,
                        Code::Truncated,
                        Severity::Error,
                        format!("{source} records {n} lines; the file has {}", scan.lines),
                    )
                    .at(None, st.base_line + scan.lines + 1),
                );
                return;
            }
            let actual = if n == 0 {
                ZERO_HASH
            } else {
                scan.line_hashes[n as usize - 1]
            };
            if actual != head {
                findings.push(
                    Finding::new(
                        &st.path,
                        Code::RootMismatch,
                        Severity::Error,
                        format!("line {n} is not the line {source} records as the session's last"),
                    )
                    .at(None, st.base_line + n),
                );
                return;
            }
            if n < scan.lines {
                findings.push(
                    Finding::new(
                        &st.path,
                        Code::AfterEnd,
                        Severity::Error,
                        format!("{} line(s) after the end {source} records", scan.lines - n),
                    )
                    .at(None, st.base_line + n + 1),
                );
                return;
            }
            st.complete = true;
        }
    }
}

fn check_checkpoint(
    path: &Path,
    data: &[u8],
    dir_name: &str,
    st: &SessionState,
    key: Option<&InstallSecret>,
    findings: &mut Vec<Finding>,
) {
    let bad = |msg: String| Finding::new(path, Code::CkptBad, Severity::Error, msg);
    let parsed = std::str::from_utf8(data)
        .map_err(|_| "not UTF-8".to_string())
        .and_then(Note::parse)
        .and_then(|n| Checkpoint::parse_text(&n.text).map(|cp| (n, cp)));
    let (note, cp) = match parsed {
        Ok(x) => x,
        Err(e) => {
            findings.push(bad(format!("not a checkpoint note: {e}")));
            return;
        }
    };
    if cp.origin != checkpoint::origin(dir_name, &st.id) {
        findings.push(bad(format!("origin {} is not this session's", cp.origin)));
        return;
    }
    let Some(key) = key else {
        return;
    };
    let seals = st.scan.as_ref().map_or(0, |s| s.seals.len() as u64);
    if cp.epoch > seals + MAX_EPOCH_JUMP {
        findings.push(bad(format!("epoch {} is implausible", cp.epoch)));
        return;
    }
    let ckey = key
        .session_key(dir_name, &st.id)
        .at(cp.epoch)
        .checkpoint_key();
    if !note.signed_by(&ckey) {
        findings.push(bad(
            "the signature does not verify: the checkpoint was forged or edited".into(),
        ));
        return;
    }
    let Some(scan) = &st.scan else {
        if !st.exists {
            findings.push(Finding::new(
                &st.path,
                Code::FileMissing,
                Severity::Error,
                format!(
                    "a valid checkpoint covers {} lines of this session; the log is gone",
                    cp.size
                ),
            ));
        }
        return;
    };
    if cp.size > scan.lines {
        findings.push(
            Finding::new(
                &st.path,
                Code::Truncated,
                Severity::Error,
                format!(
                    "the checkpoint covers {} lines; the file has {}",
                    cp.size, scan.lines
                ),
            )
            .at(None, st.base_line + scan.lines + 1),
        );
        return;
    }
    if scan.root_at(cp.size) != cp.root {
        findings.push(
            Finding::new(
                &st.path,
                Code::RootMismatch,
                Severity::Error,
                format!(
                    "the first {} lines do not have the checkpoint's root",
                    cp.size
                ),
            )
            .at(None, st.base_line + cp.size),
        );
        return;
    }
    if scan.seals.get(&cp.size).map(|s| s.0) != Some(cp.epoch) {
        findings.push(bad(format!(
            "line {} is not the seal of epoch {}, where every checkpoint ends",
            cp.size, cp.epoch
        )));
        return;
    }
    let wants = scan.start.as_ref().is_some_and(|s| s.checkpoints);
    if wants && cp.size < scan.ckpt_min {
        findings.push(bad(format!(
            "older than the log: the log continues after the seal at line {}, so a checkpoint of that seal was written",
            scan.ckpt_min
        )));
    }
}

/// The facts the report's sentences are computed from: what verify gathered while checking
/// (`report.facts`), completed with the keys folder, the sessions by key, the witness and the
/// findings.
fn facts(opts: &VerifyOptions, report: &Report, witnessed_all: bool) -> Facts {
    let mut f = report.facts.clone();
    f.disk_key = opts.keys_dir.as_ref().map(|d| disk_key_facts(d));
    let disk_id = match f.disk_key.as_ref().map(|k| &k.file) {
        Some(KeyFileState::Present { key_id, .. }) => Some(key_id.clone()),
        _ => None,
    };
    f.given_keys = opts
        .keys
        .iter()
        .map(|k| hex(&k.key_id()))
        .filter(|id| Some(id) != disk_id.as_ref())
        .collect();
    f.given_keys.sort();
    f.given_keys.dedup();
    f.sessions = report.sessions.len() as u64;
    for s in &report.sessions {
        match &s.key_id {
            Some(id) if Some(id) == disk_id.as_ref() => f.under_disk_key += 1,
            Some(_) => f.under_given_key += 1,
            // A session named by evidence whose file is gone has no lines and no key.
            None if s.lines > 0 => f.key_not_given += 1,
            None => {}
        }
    }
    f.witness = if opts.witness.is_some() {
        WitnessFacts::Asked {
            holds_all: witnessed_all,
        }
    } else {
        WitnessFacts::None
    };
    let count = |code: Code| report.findings.iter().filter(|x| x.code == code).count() as u64;
    f.pruned_journals = count(Code::Pruned);
    f.open_sessions = count(Code::OpenSession);
    f.problems = report
        .findings
        .iter()
        .filter(|x| x.severity != Severity::Warning)
        .count() as u64;
    f
}

/// The install secret file as it is: absent, present (mode, key id), or unreadable (which
/// counts as on disk: nothing shows it is not). And any second copy a crash left.
fn disk_key_facts(keys_dir: &Path) -> DiskKeyFacts {
    let path = keys_dir.join(INSTALL_KEY_FILE);
    let file = match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => KeyFileState::Absent,
        Err(e) => KeyFileState::Unreadable {
            error: e.to_string(),
        },
        Ok(meta) => match InstallSecret::read_file(&path) {
            Ok(k) => KeyFileState::Present {
                mode: meta.mode() & 0o7777,
                key_id: hex(&k.key_id()),
            },
            Err(e) => KeyFileState::Unreadable {
                error: e.to_string(),
            },
        },
    };
    DiskKeyFacts {
        path,
        file,
        temp_copies: crate::keys::key_temp_files(keys_dir),
    }
}

/// Whether session `id` started no later than session `last` (ids begin with the UTC start
/// second; within a second their order is not known, so a session of the same second counts).
/// Used only to excuse evidence of sessions retention pruned: a kept session removed by someone
/// else is still named by the session after it.
fn started_by(id: &str, last: &str) -> bool {
    match (id.get(..16), last.get(..16)) {
        (Some(a), Some(b)) => a <= b,
        _ => false,
    }
}

/// One journal lane of a project, as read by verify.
struct LaneInfo {
    lane: u64,
    path: PathBuf,
    /// Metadata taken before the journal was read.
    meta: Option<fs::Metadata>,
    /// SHA-256 of every complete line.
    line_hashes: Vec<Hash>,
    /// The sessions in journal order.
    sessions: Vec<String>,
    /// The authentic retention record at the first line of the lane's oldest file (the
    /// journal, or its oldest archive): what retention dropped for good.
    pruned: Option<crate::events::PrunedEvent>,
    /// Where an archive ends: the session after it, and the archive's last session's end as
    /// its record names it.
    boundaries: Vec<(String, Attest)>,
    /// Archives read (each one checked against its record).
    archives: u64,
    /// The line hashes of each archive, newest first (the journal's first line names the
    /// first): to place a record written before an archive rewrite (`lane_reaches`).
    archive_hashes: Vec<Vec<Hash>>,
    /// Latest time of an authentic line.
    max_time: Option<u64>,
    /// The tail state and the checkpoint, read before the journal: a session that closes
    /// while verify runs then makes them older than the journal read, never newer.
    tail: Option<journal::TailLine<crate::events::TailEvent>>,
    ckpt: Option<Option<Vec<u8>>>,
}

impl LaneInfo {
    /// Whether the lane's retention record is this statement's subject, as stated.
    fn prunes(&self, a: &Attest) -> bool {
        self.pruned.as_ref().is_some_and(|p| {
            p.last.session == a.session && p.last.lines == a.lines && p.last.head == a.head
        })
    }
}

/// Most archives verify follows from one journal (a bound on the work a forged chain can ask
/// for: each archive holds at least one session).
const MAX_ARCHIVES: usize = 1 << 20;

/// The lane's archives, newest first, as the journal's first line and then each archive's
/// first line name them (`archive.rs`): only records whose MAC checks are followed, and each
/// archive is believed only if it decodes to exactly the length, line count, SHA-256 and last
/// line its record names. A missing or different archive is a finding and ends the chain.
fn archive_chain(
    dir: &Path,
    dir_name: &str,
    lane: u64,
    journal_path: &Path,
    journal: &[u8],
    opts: &VerifyOptions,
    findings: &mut Vec<Finding>,
) -> Vec<(PathBuf, Vec<u8>)> {
    let mut chain: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut named_at = journal_path.to_path_buf();
    loop {
        let first_of = |data: &[u8]| data.split(|&c| c == b'\n').next().map(<[u8]>::to_vec);
        let first = match chain.last() {
            Some((_, data)) => first_of(data),
            None => first_of(journal),
        }
        .unwrap_or_default();
        // A record that does not check is reported where its file is read (`read_lane_file`).
        let Ok(Some((p, _))) = read_pruned(&first, dir_name, &opts.keys) else {
            break;
        };
        let Some(a) = p.archive else {
            break;
        };
        if chain.len() >= MAX_ARCHIVES {
            break;
        }
        let path = dir.join(crate::archive::archive_file_name(lane, a.seq));
        let raw = match read_nofollow(&path, findings) {
            Some(Some(raw)) => raw,
            Some(None) => {
                findings.push(
                    Finding::new(
                        &named_at,
                        Code::FileMissing,
                        Severity::Error,
                        format!(
                            "this line names archive {} ({} lines of sessions up to {}), which is gone",
                            path.display(),
                            a.lines,
                            p.last.session
                        ),
                    )
                    .at(Some(0), 1),
                );
                break;
            }
            None => break,
        };
        let checked = crate::archive::decode(&raw, a.bytes).and_then(|data| {
            let (lines, torn) = split_lines(&data);
            let last = lines.last().map(|(_, l)| sha256(l));
            if data.len() as u64 != a.bytes || hex(&sha256(&data)) != a.sha256 {
                Err("its lines differ from what the record names (length or SHA-256)".into())
            } else if lines.len() as u64 != a.lines || torn.is_some() {
                Err("its line count differs from the record's".into())
            } else if last != p.last.head_hash() {
                Err("its last line is not the head the record names".into())
            } else {
                Ok(data)
            }
        });
        match checked {
            Ok(data) => {
                named_at = path.clone();
                chain.push((path, data));
            }
            Err(why) => {
                findings.push(Finding::new(
                    &path,
                    Code::RootMismatch,
                    Severity::Error,
                    format!(
                        "not the archive {} names: {why}; archived sessions were rewritten or replaced",
                        named_at.display()
                    ),
                ));
                break;
            }
        }
    }
    chain
}

/// Reads a lane's journal, and first the archives it names, oldest first: one
/// [`SessionState`] per session (scanned like a session file, its findings moved to their
/// place in its file; an archive's places are in its decoded lines), the innermost retention
/// record, and where an archive ends.
fn read_lane(
    dir: &Path,
    dir_name: &str,
    lane: u64,
    uid: u32,
    opts: &VerifyOptions,
    states: &mut Vec<SessionState>,
    findings: &mut Vec<Finding>,
) -> Option<LaneInfo> {
    let path = dir.join(journal::journal_file_name(lane));
    let tail = journal::read_tail::<crate::events::TailEvent>(
        &dir.join(journal::tail_file_name(lane)),
        uid,
        crate::events::KIND_TAIL,
    );
    let ckpt = read_settled(&dir.join(journal::lane_ckpt_file_name(lane)), findings);
    let meta = fs::symlink_metadata(&path).ok();
    let data = read_nofollow(&path, findings)??;
    // A lock means a running writer in this lane: its newest session is still being written.
    let live = fsx::open_read(&path).is_ok_and(|f| {
        let busy = matches!(f.try_lock_shared(), Err(fs::TryLockError::WouldBlock));
        let _ = f.unlock();
        busy
    });
    let mut info = LaneInfo {
        lane,
        path: path.clone(),
        meta,
        line_hashes: Vec::new(),
        sessions: Vec::new(),
        pruned: None,
        boundaries: Vec::new(),
        archives: 0,
        archive_hashes: Vec::new(),
        max_time: None,
        tail,
        ckpt,
    };
    let chain = archive_chain(dir, dir_name, lane, &path, &data, opts, findings);
    info.archives = chain.len() as u64;
    info.archive_hashes = chain
        .iter()
        .map(|(_, data)| split_lines(data).0.iter().map(|(_, l)| sha256(l)).collect())
        .collect();
    for (archive, bytes) in chain.iter().rev() {
        read_lane_file(
            archive, bytes, false, false, dir_name, opts, &mut info, states, findings,
        );
    }
    read_lane_file(
        &path, &data, true, live, dir_name, opts, &mut info, states, findings,
    );
    Some(info)
}

/// One file of a lane: the journal (`journal`; `live` when a writer holds it) or an archive.
#[allow(clippy::too_many_arguments)]
fn read_lane_file(
    path: &Path,
    data: &[u8],
    journal: bool,
    live: bool,
    dir_name: &str,
    opts: &VerifyOptions,
    info: &mut LaneInfo,
    states: &mut Vec<SessionState>,
    findings: &mut Vec<Finding>,
) {
    let segs = journal::segments(data);
    let n = segs.len();
    for (k, seg) in segs.iter().enumerate() {
        if seg.session.is_empty()
            || !layout::valid_session_id(&seg.session)
            || states.iter().any(|s| s.id == seg.session)
        {
            let (lines, _) = split_lines(seg.data);
            if journal {
                info.line_hashes
                    .extend(lines.iter().map(|(_, l)| sha256(l)));
            }
            if !seg.session.is_empty() {
                findings.push(
                    Finding::new(
                        path,
                        Code::Malformed,
                        Severity::Error,
                        format!(
                            "session {:?} again, or not a session id: a copy of a session, or a forged one",
                            seg.session
                        ),
                    )
                    .at(Some(seg.offset), seg.line + 1),
                );
                continue;
            }
            let first = lines.first().map_or(&b""[..], |(_, l)| *l);
            let mut record = false;
            match (k, read_pruned(first, dir_name, &opts.keys)) {
                (0, Ok(Some((p, t)))) => {
                    info.max_time = info.max_time.max(t);
                    record = true;
                    if p.archive.is_some() {
                        // The first session after it must name the archive's last exactly.
                        if let Some(next) = segs.get(1) {
                            info.boundaries.push((next.session.clone(), p.last.clone()));
                        }
                    } else {
                        info.pruned = Some(p);
                    }
                }
                (0, Ok(None)) => {}
                (0, Err((code, sev, msg))) => {
                    findings.push(Finding::new(path, code, sev, msg).at(Some(0), 1));
                }
                _ => {}
            }
            let extra = usize::from(k == 0 && record);
            if lines.len() > extra || (lines.is_empty() && !seg.data.is_empty()) {
                findings.push(
                    Finding::new(
                        path,
                        Code::Malformed,
                        Severity::Error,
                        "lines before the journal's first session_start",
                    )
                    .at(Some(seg.offset), seg.line + 1 + extra as u64),
                );
            }
            continue;
        }
        let id = seg.session.clone();
        let mut st = SessionState {
            id: id.clone(),
            path: path.to_path_buf(),
            exists: true,
            live: live && k + 1 == n,
            scan: None,
            key_id: None,
            complete: false,
            missing_attested: false,
            witnessed: None,
            base_off: seg.offset,
            base_line: seg.line,
            lane: Some(info.lane),
        };
        let mut scan = match pick_key(dir_name, &id, seg.data, &opts.keys, None) {
            Ok(key) => {
                st.key_id = key.map(InstallSecret::key_id);
                scan_session(path, Some(dir_name), &id, seg.data, key, false)
            }
            Err(()) => {
                findings.push(
                    Finding::new(
                        path,
                        Code::KeyUnknown,
                        Severity::Undecidable,
                        format!("none of the given keys is session {id}'s (verify it with --key and the exported key)"),
                    ),
                );
                scan_session(path, Some(dir_name), &id, seg.data, None, false)
            }
        };
        let cut_start = |at: u64| {
            usize::try_from(at)
                .ok()
                .and_then(|at| seg.data.get(at..))
                .is_some_and(is_cut_session_start)
        };
        if let Some((i, _)) = scan
            .after_final_seal
            .filter(|(_, at)| journal && k + 1 == n && cut_start(*at))
        {
            // The journal's last session is closed and the start of a session's first line
            // follows its seal with no newline: the next session's first line, cut by a crash
            // (the next writer cuts it off). A complete line there would be a segment of its
            // own; any other bytes stay AFTER_END.
            let f = &mut scan.findings[i];
            f.code = Code::TornTail;
            f.severity = Severity::Warning;
            f.message = format!(
                "{}; the start of the next session, cut by a crash while it was written; not counted",
                f.message
            );
        }
        for mut f in scan.findings.drain(..) {
            f.offset = f.offset.map(|o| o + seg.offset);
            f.line = f.line.map(|l| l + seg.line);
            findings.push(f);
        }
        if journal {
            info.line_hashes.extend_from_slice(&scan.line_hashes);
        }
        info.max_time = info.max_time.max(scan.last_time_ms);
        st.scan = Some(scan);
        info.sessions.push(id);
        states.push(st);
    }
}

type Problem3 = (Code, Severity, String);

/// A journal's first line as a retention record: `Ok(None)` when it is not one, `Ok(Some)`
/// when it is authentic, `Err` with the finding otherwise.
fn read_pruned(
    first: &[u8],
    dir_name: &str,
    keys: &[InstallSecret],
) -> Result<Option<(crate::events::PrunedEvent, Option<u64>)>, Problem3> {
    let Some((prefix, mac)) = line::split_mac(first) else {
        return Ok(None);
    };
    let Some(h) = line::parse_header(prefix) else {
        return Ok(None);
    };
    if h.kind != crate::events::KIND_PRUNED {
        return Ok(None);
    }
    let ev: crate::events::PrunedEvent = json::parse(h.event)
        .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
        .map_err(|e| {
            (
                Code::Malformed,
                Severity::Error,
                format!("bad retention record: {e}"),
            )
        })?;
    let authentic = layout::valid_session_id(&ev.by)
        && keys
            .iter()
            .any(|k| ct_eq(&k.index_key(dir_name, &ev.by).mac(prefix), &mac));
    if authentic {
        if h.seq != 0 || h.epoch != 0 || ev.last.head_hash() != Some(h.prev) {
            return Err((
                Code::Malformed,
                Severity::Error,
                "the retention record's header does not match the head it names".into(),
            ));
        }
        return Ok(Some((ev, crate::util::parse_time(h.time))));
    }
    if keys.iter().any(|k| hex(&k.key_id()) == ev.key_id) {
        Err((
            Code::BadMac,
            Severity::Error,
            "the MAC does not match the retention record: sessions removed under a forged record"
                .into(),
        ))
    } else {
        Err((
            Code::KeyUnknown,
            Severity::Undecidable,
            format!(
                "the retention record is under key {}, which was not given",
                ev.key_id
            ),
        ))
    }
}

/// Compares a lane journal's line hashes with a record of its length and last line (the
/// register's, or a tail state's).
fn journal_reaches(
    path: &Path,
    hashes: &[Hash],
    lines: u64,
    head: &str,
    who: &str,
) -> Option<Finding> {
    let have = hashes.len() as u64;
    if have < lines {
        return Some(
            Finding::new(
                path,
                Code::Truncated,
                Severity::Error,
                format!(
                    "{who} records {lines} journal line(s); the journal has {have}: lines were removed, or the project folder was rolled back"
                ),
            )
            .at(None, have + 1),
        );
    }
    let at = if lines == 0 {
        ZERO_HASH
    } else {
        hashes[lines as usize - 1]
    };
    (hex(&at) != head).then(|| {
        Finding::new(
            path,
            Code::RootMismatch,
            Severity::Error,
            format!(
                "journal line {lines} is not the one {who} records: the journal was rewritten or replaced"
            ),
        )
        .at(None, lines)
    })
}

/// [`journal_reaches`] for a lane with archives: a record that does not match the journal may
/// name it as it was before one of its latest archive rewrites (a close killed between the
/// rewrite and the records that follow it): the archive's lines, then the journal's after its
/// record. Only a record that matches none of them is a finding.
fn lane_reaches(info: &LaneInfo, lines: u64, head: &str, who: &str) -> Option<Finding> {
    let finding = journal_reaches(&info.path, &info.line_hashes, lines, head, who)?;
    let mut cur = info.line_hashes.clone();
    for archived in info
        .archive_hashes
        .iter()
        .take(crate::archive::STALE_REWRITES)
    {
        let Some(after_record) = cur.get(1..) else {
            break;
        };
        let mut before = archived.clone();
        before.extend_from_slice(after_record);
        // Reached as the journal was before this rewrite: no finding.
        journal_reaches(&info.path, &before, lines, head, who)?;
        cur = before;
    }
    Some(finding)
}

/// The lane checks that need every session of the project read (see [`verify_project`]);
/// returns the tail states' statements about their sessions' ends.
#[allow(clippy::too_many_arguments)]
fn check_lanes(
    dir: &Path,
    dir_name: &str,
    opts: &VerifyOptions,
    reg: &RegCtx<'_>,
    lanes: &[LaneInfo],
    states: &[SessionState],
    pos: &HashMap<String, usize>,
    index: &IndexInfo,
    findings: &mut Vec<Finding>,
) -> Vec<(String, Attest)> {
    let mut attests = Vec::new();
    let start_of = |id: &str| {
        pos.get(id)
            .and_then(|&i| states[i].scan.as_ref())
            .and_then(|s| s.start.as_ref())
    };
    for info in lanes {
        let path = &info.path;
        // Order: each session's first line names the one before it in the journal.
        let mut before: Option<Attest> = info.pruned.as_ref().map(|p| p.last.clone());
        for id in &info.sessions {
            let Some(st) = pos.get(id).map(|&i| &states[i]) else {
                continue;
            };
            if let Some(start) = start_of(id) {
                let named = start.prev_session.as_ref();
                let mut bad = match (&before, named) {
                    (Some(b), Some(n)) => {
                        b.session != n.session
                            || (info.pruned.is_some()
                                && info.sessions.first() == Some(id)
                                && (b.lines != n.lines || b.head != n.head))
                    }
                    (Some(_), None) => true,
                    // The first session of a lane names nothing, or (lane 0 of a project that
                    // had the old layout) the last old session.
                    (None, _) => false,
                };
                // The first session after an archive names the archive's last session exactly
                // as the archive's record does.
                if let Some((_, want)) = info.boundaries.iter().find(|(s, _)| s == id) {
                    bad |= named.is_none_or(|n| {
                        n.session != want.session || n.lines != want.lines || n.head != want.head
                    });
                }
                if bad {
                    findings.push(
                        Finding::new(
                            &st.path,
                            Code::PrevMismatch,
                            Severity::Error,
                            format!(
                                "the session before this one in the journal is {}, but this session's first line names {}: sessions removed, moved or reordered",
                                before.as_ref().map_or("none", |b| b.session.as_str()),
                                named.map_or("none", |n| n.session.as_str())
                            ),
                        )
                        .at(Some(st.base_off), st.base_line + 1),
                    );
                }
            }
            before = Some(Attest {
                session: id.clone(),
                state: AttestState::Closed,
                lines: 0,
                head: String::new(),
            });
        }
        if let Some(p) = &info.pruned {
            findings.push(
                Finding::new(
                    path,
                    Code::Pruned,
                    Severity::Warning,
                    format!(
                        "{} session(s) from {} to {} ({} to {}, {} journal lines) were pruned by retention {} (by session {}); their sealed head ({} lines ending with {}) links the sessions kept; their lines can no longer be checked",
                        p.sessions,
                        p.first,
                        p.last.session,
                        p.from_time,
                        p.to_time,
                        p.journal_lines,
                        serde_json::to_string(&p.retention).unwrap_or_default(),
                        p.by,
                        p.last.lines,
                        p.last.head
                    ),
                )
                .at(Some(0), 1),
            );
        }
        // Sessions that something written after their final checkpoint says closed.
        let mut closed_after_ckpt: HashSet<String> = HashSet::new();
        // The tail state: a statement, MACed, about the lane's last closed session.
        if let Some(t) = &info.tail {
            let ev = &t.event;
            let key = opts.keys.iter().find(|k| hex(&k.key_id()) == ev.key_id);
            if let Some(k) = key {
                if layout::valid_session_id(&ev.session)
                    && t.mac_ok(&k.index_key(dir_name, &ev.session))
                {
                    findings.extend(lane_reaches(
                        info,
                        ev.lines,
                        &hex(&t.head),
                        &format!(
                            "the lane's tail state (written when session {} closed)",
                            ev.session
                        ),
                    ));
                    if !ev.recovered {
                        closed_after_ckpt.insert(ev.session.clone());
                    }
                    attests.push((
                        "the lane's tail state".to_string(),
                        Attest {
                            session: ev.session.clone(),
                            state: if ev.recovered {
                                AttestState::Recovered
                            } else {
                                AttestState::Closed
                            },
                            lines: ev.session_lines,
                            head: hex(&t.head),
                        },
                    ));
                } else {
                    findings.push(Finding::new(
                        &dir.join(journal::tail_file_name(info.lane)),
                        Code::CkptBad,
                        Severity::Warning,
                        "the lane's tail state does not verify (a crash while it was written, or an edit); it is a cache only: the next writer reads the whole journal",
                    ));
                }
            }
        }
        // The register's last record of the lane.
        if let Some(rec) = reg
            .info
            .and_then(|r| r.lanes.get(&(dir_name.to_string(), info.lane)))
        {
            if rec.index_lines > 0 {
                // A close record (a "creating project" record has no lines).
                closed_after_ckpt.insert(rec.session.clone());
            }
            findings.extend(lane_reaches(
                info,
                rec.index_lines,
                &rec.index_head,
                &format!("the register (after session {})", rec.session),
            ));
        }
        // The lane's checkpoint.
        let ckpt_path = dir.join(journal::lane_ckpt_file_name(info.lane));
        match info.ckpt.clone() {
            Some(Some(data)) => {
                let origin_session = std::str::from_utf8(&data)
                    .ok()
                    .and_then(|t| Note::parse(t).ok())
                    .and_then(|n| Checkpoint::parse_text(&n.text).ok())
                    .and_then(|cp| {
                        cp.origin
                            .strip_prefix(&format!("{}{dir_name}/", checkpoint::ORIGIN_PREFIX))
                            .map(str::to_string)
                    });
                match origin_session.as_deref().and_then(|id| pos.get(id)) {
                    Some(&i) => {
                        let st = &states[i];
                        let key = st
                            .key_id
                            .and_then(|id| opts.keys.iter().find(|k| k.key_id() == id));
                        check_checkpoint(&ckpt_path, &data, dir_name, st, key, findings);
                    }
                    None => {
                        let pruned = origin_session.as_deref().is_some_and(|id| {
                            info.pruned
                                .as_ref()
                                .is_some_and(|p| started_by(id, &p.last.session))
                        });
                        if !pruned {
                            findings.push(Finding::new(
                                &ckpt_path,
                                Code::CkptBad,
                                Severity::Error,
                                "the lane's checkpoint names no session of this lane",
                            ));
                        }
                    }
                }
            }
            Some(None) => {
                // The writer publishes a checkpoint after every seal before it writes anything
                // else, and before its close record (tail state, register): a session that
                // continued after a seal, or whose close is recorded, had one.
                let wants = info.sessions.iter().find(|id| {
                    pos.get(*id).map(|&i| &states[i]).is_some_and(|st| {
                        st.key_id.is_some()
                            && st.scan.as_ref().is_some_and(|s| {
                                s.start.as_ref().is_some_and(|x| x.checkpoints)
                                    && !s.seals.is_empty()
                                    && (s.ckpt_min > 0 || closed_after_ckpt.contains(*id))
                            })
                    })
                });
                if let Some(id) = wants {
                    findings.push(Finding::new(
                        &ckpt_path,
                        Code::FileMissing,
                        Severity::Error,
                        format!(
                            "checkpoints are on and session {id} of this lane sealed an epoch, yet the lane has no checkpoint"
                        ),
                    ));
                }
            }
            None => {}
        }
        // ctime: lines cut from the journal's end move it.
        if let (Some(meta), Some(t)) = (&info.meta, info.max_time) {
            let slack = u64::try_from(opts.ctime_slack.as_millis()).unwrap_or(u64::MAX);
            let c = fsx::ctime_ms(meta);
            if meta.file_type().is_file() && c > t.saturating_add(slack) {
                findings.push(Finding::new(
                    path,
                    Code::ChangedAfterWrite,
                    Severity::Undecidable,
                    format!(
                        "the journal changed {} ms after its last line was written (lines cut from its end?)",
                        c - t
                    ),
                ));
            }
        }
        // The old index, as the first journal session of the project found it.
        if let Some(first) = info.sessions.first() {
            if let Some(li) = start_of(first).and_then(|s| s.legacy_index.as_ref()) {
                let index_path = dir.join(INDEX_FILE);
                let have = index.line_hashes.len() as u64;
                if have < li.lines {
                    findings.push(Finding::new(
                        &index_path,
                        Code::Truncated,
                        Severity::Error,
                        format!(
                            "session {first}, the first of the journal layout, found {} index lines; the index has {have}",
                            li.lines
                        ),
                    ));
                } else if have > li.lines {
                    findings.push(
                        Finding::new(
                            &index_path,
                            Code::AfterEnd,
                            Severity::Error,
                            format!(
                                "{} index line(s) after the project moved to the journal layout (session {first}), which never writes the index",
                                have - li.lines
                            ),
                        )
                        .at(None, li.lines + 1),
                    );
                } else {
                    let at = if li.lines == 0 {
                        ZERO_HASH
                    } else {
                        index.line_hashes[li.lines as usize - 1]
                    };
                    if hex(&at) != li.head {
                        findings.push(
                            Finding::new(
                                &index_path,
                                Code::RootMismatch,
                                Severity::Error,
                                format!(
                                    "index line {} is not the one session {first} found when the project moved to the journal layout",
                                    li.lines
                                ),
                            )
                            .at(None, li.lines),
                        );
                    }
                }
            }
        }
    }
    attests
}
