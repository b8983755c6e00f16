//! The events Garuda itself writes: a session's first line, its seals, its end, and the
//! entries of the per-project index. Each is parsed back with `deny_unknown_fields` so that
//! an extra field in a writer-defined event is MALFORMED rather than silently ignored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::util::{hex, parse_hex32, Hash};

/// Line type of a session's first line.
pub const KIND_START: &str = "session_start";
/// Line type of the line that ends a session (followed by one last seal).
pub const KIND_END: &str = "session_end";
/// Line type of the line that closes an epoch.
pub const KIND_SEAL: &str = "seal";
/// Index line type recording that a session starts (written before its file exists).
pub const INDEX_START: &str = "start";
/// Index line type recording a session's final head at close.
pub const INDEX_CLOSE: &str = "close";
/// Line type of a journal lane's tail state (`journal.tail`): where the journal ended when its
/// last session closed.
pub const KIND_TAIL: &str = "tail";
/// Line type of the register's tail state (`audit.register.tail`).
pub const KIND_REGISTER_TAIL: &str = "register_tail";
/// Line type of the record retention leaves as the first line of a pruned journal.
pub const KIND_PRUNED: &str = "pruned";

/// Types `append` may not use: they carry the log's own structure.
pub const RESERVED_KINDS: &[&str] = &[
    KIND_START,
    KIND_END,
    KIND_SEAL,
    INDEX_START,
    INDEX_CLOSE,
    KIND_TAIL,
    KIND_REGISTER_TAIL,
    KIND_PRUNED,
];

/// How a session ended, as seen by the one who records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttestState {
    /// The session was closed by its writer (values copied from its index close entry).
    Closed,
    /// The session's writer died; these are the complete lines found in its file.
    Recovered,
    /// The session's writer was still running; nothing is claimed about its end.
    Open,
    /// The index lists the session but its file did not exist.
    Missing,
}

/// A later writer's statement about an earlier session's final state. It is MACed into the
/// later session's first line (and its index entry), so cutting the earlier session afterwards
/// contradicts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attest {
    /// The earlier session's id.
    pub session: String,
    /// What the later writer found.
    pub state: AttestState,
    /// Number of complete lines.
    pub lines: u64,
    /// SHA-256 (hex) of the last complete line, zeros when there is none.
    pub head: String,
}

impl Attest {
    /// The head as bytes (`None` if not 64 lowercase hex digits).
    pub fn head_hash(&self) -> Option<Hash> {
        parse_hex32(self.head.as_bytes())
    }
}

/// The event of a session's first line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartEvent {
    /// This session's id (equal to the file name).
    pub session: String,
    /// The project folder name `<name>-<hash>`.
    pub project: String,
    /// Hex id of the install secret the session key comes from.
    pub key_id: String,
    /// Whether the writer keeps a checkpoint file.
    pub checkpoints: bool,
    /// Whether the writer sends checkpoints to a witness.
    pub witness: bool,
    /// The previous session in the project (its final head is this line's `prev`).
    pub prev_session: Option<Attest>,
    /// Other sessions whose writers had died, recorded as found.
    pub recovered: Vec<Attest>,
    /// The caller's start event, redacted.
    pub info: Value,
    /// `seq` of this session's `start` record in the install-wide register
    /// (`<garuda_home>/audit.register.jsonl`); absent in sessions written before the register.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<u64>,
    /// What the writer found wrong with the existing evidence before it wrote anything
    /// (index or register MACs and chain, a project folder or index cut back, files changed
    /// after the last recorded write, the previous session not matching its close entry).
    /// MACed here, so the finding survives whatever happens to that evidence later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found_at_start: Vec<Problem>,
    /// Register and index lines under a key id other than the writer's own that the writer
    /// built on (those after the last line under its own secret): it cannot check them, so it
    /// names them here, and verify reports each as UNVERIFIED_BASE (error) unless a given key
    /// or a session vouches for its key id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<UnverifiedLine>,
    /// The first journal session of a project that was written in the old layout (an
    /// `index.jsonl` and a file per session) records the old index as it found it: its length
    /// and last line. The old files are never written again; cutting or extending the old
    /// index afterwards contradicts this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_index: Option<LegacyIndex>,
}

/// The old-layout index as the first journal session of its project found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyIndex {
    /// Number of complete lines.
    pub lines: u64,
    /// SHA-256 (hex) of the last one (zeros for none).
    pub head: String,
}

/// A register or index line the writer could not authenticate (another key id) but built on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnverifiedLine {
    /// `register` or `index`.
    pub file: String,
    /// Line number, from 1.
    pub line: u64,
    /// The key id the line claims.
    pub key_id: String,
    /// SHA-256 (hex) of the line.
    pub hash: String,
}

/// A problem a writer found at `open`, recorded in its first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// The verify code it corresponds to (`TRUNCATED`, `CHANGED_AFTER_WRITE`, ...).
    pub code: String,
    /// The file or folder concerned.
    pub file: String,
    /// What was found.
    pub detail: String,
}

/// The event of a line of the install-wide register (`<garuda_home>/audit.register.jsonl`): a
/// session of a project started or closed, and the project index's head right after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterEvent {
    /// The project's audit folder name.
    pub project: String,
    /// The session (its register key MACs this line).
    pub session: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// Number of lines of the project index after the session's entry.
    pub index_lines: u64,
    /// SHA-256 (hex) of the index's last line then.
    pub index_head: String,
    /// For a session of the journal layout: the journal lane it was written in. Then
    /// `index_lines` and `index_head` are the lane journal's line count and last line after the
    /// session's close, and `bytes` its length. Absent: the old layout (`index.jsonl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<u64>,
    /// The lane journal's length in bytes (journal layout only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The event of a journal lane's tail state: the journal as its last session left it at close.
/// A cache for the next writer (it reads nothing before `last_at`), never evidence on its own:
/// verify reads every line and uses a tail only as one more statement about a session's end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TailEvent {
    /// The session that closed last (its index key MACs the tail).
    pub session: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// The journal's length in bytes.
    pub bytes: u64,
    /// The journal's number of lines.
    pub lines: u64,
    /// Byte offset of the journal's last line (the tail line's `prev` is its hash).
    pub last_at: u64,
    /// The session's number of lines.
    pub session_lines: u64,
    /// Sessions in the journal (the closing one included; after a prune, those kept).
    #[serde(default)]
    pub sessions: u64,
    /// Closes since retention last read the whole journal to see what is due.
    #[serde(default)]
    pub unchecked: u64,
    /// The session did not close: its writer died, and a session of another lane recorded it
    /// as found (these are its complete lines). Absent: it closed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
}

/// One project lane's last record in the register, as the register tail carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneRecord {
    /// The project's audit folder name.
    pub project: String,
    /// The lane (`None`: an old-layout index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<u64>,
    /// The session of the record.
    pub session: String,
    /// Lines of the lane journal (or old index) then.
    pub lines: u64,
    /// Its last line then (hex).
    pub head: String,
    /// Its length in bytes then (journal only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The event of the register's tail state (`<garuda_home>/audit.register.tail`): the
/// register's length and last line, the time of its last line under the writer's secret, and
/// the last record of every project lane, so that a writer checks its project against the
/// register without reading the register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterTailEvent {
    /// The session that wrote the tail (MACed under the register tail key, see
    /// [`crate::InstallSecret`]).
    pub session: String,
    /// The register's length in bytes.
    pub bytes: u64,
    /// The register's number of lines.
    pub lines: u64,
    /// Byte offset of the register's last line (the tail line's `prev` is its hash).
    pub last_at: u64,
    /// The last record of each project lane (and old-layout project index).
    pub records: Vec<LaneRecord>,
}

/// How much retention keeps (the strictest of the policy files: keeping more is stricter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Keep sessions that ended less than this many days ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u64>,
    /// Keep at least this many newest sessions of each journal lane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
}

/// The first line of a journal whose oldest sessions retention pruned: what was pruned, and the
/// sealed head of the last pruned session, which the first remaining session's `prev_session`
/// names. MACed under the index key of the session that pruned (`by`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrunedEvent {
    /// The session that pruned.
    pub by: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// Sessions pruned so far from this lane (every prune included).
    pub sessions: u64,
    /// The oldest session ever pruned from this lane.
    pub first: String,
    /// The last pruned session's end: its id, lines and final head.
    pub last: Attest,
    /// Lines and bytes pruned so far from this lane.
    pub journal_lines: u64,
    /// Bytes pruned so far.
    pub journal_bytes: u64,
    /// Start time of the oldest and end time of the newest pruned session (UTC, as in lines).
    pub from_time: String,
    /// End time of the last pruned session.
    pub to_time: String,
    /// The retention in force when it pruned (none for an archive).
    pub retention: Retention,
    /// Where the lines went when they were archived, not dropped (`archive.rs`): this record
    /// then vouches for the archive's bytes, and verify checks every line in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveRef>,
}

/// Type of the register's first line once its older lines are archived.
pub const KIND_REGISTER_ARCHIVE: &str = "register_archive";

/// The first line of a register whose older lines were moved into an archive
/// (`audit.register.a<seq>.z`, `archive.rs`): not a line of the register's chain (its `prev` is
/// the last archived line's hash, which the next line also names), MACed under the register
/// key of the session that archived (`by`, in `project`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterArchiveEvent {
    /// The session that archived.
    pub by: String,
    /// Its project's audit folder name.
    pub project: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// Register lines before this record, archives included: the next line's `seq`.
    pub lines: u64,
    /// The archive: the register as it was, this record's predecessor included.
    pub archive: ArchiveRef,
    /// The last record of every project lane then, so that a writer that must read the
    /// register (no tail state it can believe) still knows them.
    pub records: Vec<LaneRecord>,
}

/// The archive a `pruned` record names: `journal.a<seq>.z` of its lane, and what it decodes to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRef {
    /// The archive's sequence number in its lane (its file name).
    pub seq: u64,
    /// Length of the decoded lines.
    pub bytes: u64,
    /// Number of decoded lines.
    pub lines: u64,
    /// SHA-256 (hex) of the decoded lines.
    pub sha256: String,
}

/// The event of a seal line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealEvent {
    /// The epoch this seal closes (equal to the line's `epoch`).
    pub epoch: u64,
    /// Lines before the seal (equal to the seal's `seq`).
    pub lines: u64,
    /// RFC 6962 root (hex) over those lines.
    pub root: String,
}

/// The event of an index `start` line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexStartEvent {
    /// The session that starts (its index key MACs this line).
    pub session: String,
    /// Its log file name.
    pub file: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// As in its first line.
    pub prev_session: Option<Attest>,
    /// As in its first line.
    pub recovered: Vec<Attest>,
}

/// The event of an index `close` line.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexCloseEvent {
    /// The session that closed.
    pub session: String,
    /// Its log file name.
    pub file: String,
    /// Hex id of its install secret.
    pub key_id: String,
    /// Its number of lines.
    pub lines: u64,
    /// SHA-256 (hex) of its last line.
    pub head: String,
    /// RFC 6962 root (hex) over all its lines.
    pub root: String,
}

pub(crate) fn head_hex(h: &Hash) -> String {
    hex(h)
}
