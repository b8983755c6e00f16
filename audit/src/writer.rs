//! The session writer: one per Garuda session, the only code that appends to a log.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::checkpoint::{self, Checkpoint};
use crate::error::AuditError;
use crate::events::{
    head_hex, Attest, AttestState, IndexCloseEvent, IndexStartEvent, Problem, RegisterEvent,
    Retention, SealEvent, StartEvent, TailEvent, UnverifiedLine, INDEX_CLOSE, INDEX_START,
    KIND_END, KIND_SEAL, KIND_START, KIND_TAIL, RESERVED_KINDS,
};
use crate::fsx;
use crate::index::{IndexEvent, LockedIndex};
use crate::journal::{self, LockedLane};
use crate::keys::{EpochKey, InstallSecret, MacKey};
use crate::layout::{self, ckpt_file_name, log_file_name};
use crate::line::{self, NewLine, MAX_LINE_BYTES};
use crate::merkle::{leaf_hash, Compact, Tree};
use crate::redact::redact_value;
use crate::register::LockedRegister;
use crate::register::{check_register, index_against_register, register_path};
use crate::report::{Finding, Severity};
use crate::util::{hex, now_ms, sha256, Hash, ZERO_HASH};
use crate::witness::{self, Answer, WitnessConfig};

/// Default number of lines per epoch.
pub const DEFAULT_EPOCH_MAX_LINES: u64 = 256;
/// Default epoch length.
pub const DEFAULT_EPOCH_MAX_AGE: Duration = Duration::from_secs(60);
/// Default number of due sessions that triggers a prune.
pub const DEFAULT_PRUNE_BATCH: u64 = 64;
/// Default journal length past which a closing session archives the sessions before it.
pub const DEFAULT_ARCHIVE_AT_BYTES: u64 = 256 * 1024;

/// Where and how a session is recorded.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// Root of all project logs, normally `~/.garuda/audit`.
    pub audit_root: PathBuf,
    /// Folder of the install secret, normally `~/.garuda/keys`.
    pub keys_dir: PathBuf,
    /// The project the session works on (canonicalised to name its log folder).
    pub project_root: PathBuf,
    /// Keep a checkpoint file per session, replaced after every seal.
    pub checkpoints: bool,
    /// Send every checkpoint to this witness; a refusal or an unreachable witness stops the
    /// session (fail closed).
    pub witness: Option<WitnessConfig>,
    /// Seal the epoch after this many lines (at least 1).
    pub epoch_max_lines: u64,
    /// Seal the epoch after this long (more than zero), checked at every append, `tick` and
    /// `close`.
    pub epoch_max_age: Duration,
    /// `fdatasync` the log before every checkpoint, after durable appends and at close.
    /// Turn off only in benchmarks and tests.
    pub fsync: bool,
    /// What retention keeps (`None`: everything). Applied at close to the session's lane.
    pub retention: Option<Retention>,
    /// Prune only once at least this many sessions of the lane are due (at least 1): each prune
    /// rewrites the lane's journal, so it is done in batches.
    pub prune_batch: u64,
    /// Once a lane's journal is at least this long, the closing session moves the sessions
    /// before its own into a compressed archive that the journal's first line names
    /// (`archive.rs`; docs/audit.md, "Archives"). `None`: never. Not done while `retention` is
    /// set: the journal then keeps its sessions for retention to count.
    pub archive_at_bytes: Option<u64>,
    /// Stop a close right after it rewrote the lane (archive or prune), before the register
    /// record and the tail state that follow: what a close killed there leaves. Tests only.
    #[doc(hidden)]
    pub stop_after_rewrite: bool,
    /// Write the old layout (an index and a file per session). Only to build old-layout logs
    /// in tests of the migration; `garuda` never sets it.
    #[doc(hidden)]
    pub legacy_layout: bool,
}

impl AuditConfig {
    /// The defaults for a Garuda home folder: `<home>/audit`, `<home>/keys`, checkpoints on,
    /// no witness, 256 lines or 60 s per epoch, fsync on.
    pub fn new(garuda_home: &Path, project_root: &Path) -> Self {
        AuditConfig {
            audit_root: garuda_home.join("audit"),
            keys_dir: garuda_home.join("keys"),
            project_root: project_root.to_path_buf(),
            checkpoints: true,
            witness: None,
            epoch_max_lines: DEFAULT_EPOCH_MAX_LINES,
            epoch_max_age: DEFAULT_EPOCH_MAX_AGE,
            fsync: true,
            retention: None,
            prune_batch: DEFAULT_PRUNE_BATCH,
            archive_at_bytes: Some(DEFAULT_ARCHIVE_AT_BYTES),
            stop_after_rewrite: false,
            legacy_layout: false,
        }
    }
}

/// A session's position: what a running writer vouches for. Passed to
/// [`crate::VerifyOptions::trusted_heads`] by a supervisor that verifies its own live session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHead {
    /// The session id.
    pub session: String,
    /// The session's log file.
    pub file: PathBuf,
    /// Number of lines written.
    pub lines: u64,
    /// SHA-256 (hex) of the last line.
    pub head: String,
}

/// Appends MACed lines to one session's log. See the crate documentation for the format.
///
/// Dropping a writer without [`SessionWriter::close`] leaves the session as a crash would:
/// unclosed, to be recovered (attested as found) by the project's next session.
pub struct SessionWriter {
    uid: u32,
    dir: PathBuf,
    id: String,
    origin: String,
    path: PathBuf,
    file: File,
    key: EpochKey,
    index_key: MacKey,
    register_key: MacKey,
    reg_path: PathBuf,
    project: String,
    key_id: String,
    checkpoints: bool,
    witness: Option<WitnessConfig>,
    fsync: bool,
    max_lines: u64,
    max_age: Duration,
    seq: u64,
    prev: Hash,
    epoch_lines: u64,
    epoch_started: Instant,
    compact: Compact,
    tree: Option<Tree>,
    witness_size: u64,
    poisoned: Option<String>,
    buf: Vec<u8>,
    journal: Option<JournalState>,
}

/// Where a journal-layout writer is in its lane.
struct JournalState {
    /// The register tail's key (install-wide; see [`InstallSecret::register_tail_key`]).
    tail_key: MacKey,
    lock: LockedLane,
    lane: u64,
    /// The journal's length, line count, and the offset of its last line.
    bytes: u64,
    lines: u64,
    last_at: u64,
    /// Whether this session already published a checkpoint, and whether the lane's
    /// checkpoint file existed when the session started.
    published: bool,
    ckpt_existed: bool,
    retention: Option<Retention>,
    prune_batch: u64,
    archive_at_bytes: Option<u64>,
    stop_after_rewrite: bool,
    /// Sessions in the journal before this one; closes since retention last looked.
    sessions: u64,
    unchecked: u64,
}

/// Where a new writer writes (see `SessionWriter::assemble`).
struct Place {
    uid: u32,
    dir: PathBuf,
    path: PathBuf,
    file: File,
    reg_path: PathBuf,
    index_key: MacKey,
    register_key: MacKey,
    journal: Option<JournalState>,
}

impl std::fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriter")
            .field("session", &self.id)
            .field("path", &self.path)
            .field("seq", &self.seq)
            .field("epoch", &self.key.epoch())
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl SessionWriter {
    /// Starts a session: records it in the project index, attests the previous session's end
    /// (and recovers sessions whose writer died), creates the log file and writes its first
    /// line. `start` is redacted and stored as the first line's `info`.
    pub fn open(cfg: &AuditConfig, start: Value) -> Result<SessionWriter, AuditError> {
        if cfg.legacy_layout {
            Self::open_legacy(cfg, start)
        } else {
            Self::open_journal(cfg, start)
        }
    }

    fn check_config(cfg: &AuditConfig) -> Result<(), AuditError> {
        if cfg.epoch_max_lines == 0 {
            return Err(AuditError::Config {
                reason: "epoch_max_lines must be at least 1",
            });
        }
        if cfg.epoch_max_age.is_zero() {
            return Err(AuditError::Config {
                reason: "epoch_max_age must be more than zero",
            });
        }
        if cfg.prune_batch == 0 {
            return Err(AuditError::Config {
                reason: "prune_batch must be at least 1",
            });
        }
        Ok(())
    }

    /// The journal layout (see [`crate::journal`]): one durable write before the caller's
    /// command (its intent, through [`Self::append_durable`]), and nothing read before the
    /// lane's and the register's last lines.
    fn open_journal(cfg: &AuditConfig, start: Value) -> Result<SessionWriter, AuditError> {
        Self::check_config(cfg)?;
        let uid = fsx::current_uid()?;
        let secret = InstallSecret::load_or_create(&cfg.keys_dir)?;
        fsx::ensure_private_dir(&cfg.audit_root, uid)?;
        let dir = layout::project_audit_dir(&cfg.audit_root, &cfg.project_root)?;
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let reg_path = register_path(&cfg.audit_root);
        // The ctimes before anything here is created or written: what the survey compares.
        let root_meta = std::fs::symlink_metadata(&cfg.audit_root).ok();
        let register_meta = std::fs::symlink_metadata(&reg_path).ok();
        let dir_meta = std::fs::symlink_metadata(&dir).ok();
        let id = layout::new_session_id()?;
        let key_id = hex(&secret.key_id());
        let register_key = secret.register_key(&dir_name, &id);
        let index_key = secret.index_key(&dir_name, &id);
        let tail_key = secret.register_tail_key();
        let mut found: Vec<Finding> = Vec::new();
        if dir_meta.is_none() {
            // Creating the project folder moves the audit root's ctime: record it in the
            // register first (synced: the first run of a project only), so that neither a crash
            // nor a power loss before this session's close looks like a change after the last
            // recorded write.
            let mut register = LockedRegister::open(
                &reg_path,
                uid,
                &tail_key,
                Some(&secret),
                &id,
                cfg.fsync,
                &mut found,
            )?;
            if let Some((session, lines)) = register.view.knows(&dir_name) {
                if lines > 0 {
                    found.push(Finding::new(
                        &dir,
                        crate::Code::FileMissing,
                        Severity::Error,
                        format!(
                            "the register records sessions of this project (the last one {session}), but its audit folder was gone"
                        ),
                    ));
                }
            }
            register.append(
                INDEX_START,
                &RegisterEvent {
                    project: dir_name.clone(),
                    session: id.clone(),
                    key_id: key_id.clone(),
                    index_lines: 0,
                    index_head: hex(&ZERO_HASH),
                    lane: Some(0),
                    bytes: Some(0),
                },
                &register_key,
                &tail_key,
                cfg.fsync,
            )?;
            fsx::ensure_private_dir(&dir, uid)?;
            if cfg.fsync {
                // The folder's entry must be on disk before the intent that lives in it (and,
                // on the first run of all, the audit root's and the register's entries).
                fsx::fsync_dir(&cfg.audit_root)?;
                if root_meta.is_none() || register_meta.is_none() {
                    if let Some(home) = cfg.audit_root.parent() {
                        fsx::fsync_dir(home)?;
                    }
                }
            }
        } else {
            fsx::ensure_private_dir(&dir, uid)?;
        }
        let mut lock = journal::lock_free_lane(&dir, uid)?;
        if lock.created && cfg.fsync {
            // The journal's entry must be on disk before the intent written into it.
            fsx::fsync_dir(&dir)?;
        }
        // Lock order, everywhere: the lane, then the register. (On a project's first run the
        // register was just checked above: its findings are not repeated.)
        let mut again = Vec::new();
        let register = LockedRegister::open(
            &reg_path,
            uid,
            &tail_key,
            Some(&secret),
            &id,
            cfg.fsync,
            if dir_meta.is_none() {
                &mut again
            } else {
                &mut found
            },
        )?;
        let ctx = crate::lane::OpenCtx {
            root: &cfg.audit_root,
            reg_path: &reg_path,
            dir: &dir,
            dir_name: &dir_name,
            session: &id,
            uid,
            fsync: cfg.fsync,
            root_meta: &root_meta,
            register_meta: &register_meta,
            dir_meta: &dir_meta,
        };
        let st = crate::lane::start(&ctx, &mut lock, &register.view, &secret)?;
        drop(register);
        found.extend(st.found);
        let found_at_start: Vec<Problem> = found
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(problem_of)
            .collect();
        let path = lock.path.clone();
        let file = lock
            .file
            .try_clone()
            .map_err(|e| AuditError::io(&path, e))?;
        let lane = lock.lane;
        let first = StartEvent {
            session: id,
            project: dir_name,
            key_id,
            checkpoints: cfg.checkpoints,
            witness: cfg.witness.is_some(),
            prev_session: st.prev_session,
            recovered: st.recovered,
            info: Value::Null,
            register: None,
            found_at_start,
            unverified: st.unverified,
            legacy_index: st.legacy_index,
        };
        let place = Place {
            uid,
            dir,
            path,
            file,
            reg_path,
            index_key,
            register_key,
            journal: Some(JournalState {
                tail_key,
                lock,
                lane,
                bytes: st.bytes,
                lines: st.lines,
                last_at: st.last_at,
                published: false,
                ckpt_existed: st.ckpt_exists,
                retention: cfg.retention,
                prune_batch: cfg.prune_batch,
                archive_at_bytes: cfg.archive_at_bytes,
                stop_after_rewrite: cfg.stop_after_rewrite,
                sessions: st.sessions,
                unchecked: st.unchecked,
            }),
        };
        let mut w = Self::assemble(cfg, &secret, &first, place);
        drop(secret);
        // The derivations above ran in deeper frames, now dead: overwrite them.
        wipe_stack();
        // Not synced: the caller's durable intent (same file) makes it durable with itself.
        w.write_start(first, start)?;
        Ok(w)
    }

    fn open_legacy(cfg: &AuditConfig, start: Value) -> Result<SessionWriter, AuditError> {
        Self::check_config(cfg)?;
        let uid = fsx::current_uid()?;
        let secret = InstallSecret::load_or_create(&cfg.keys_dir)?;
        fsx::ensure_private_dir(&cfg.audit_root, uid)?;
        let dir = layout::project_audit_dir(&cfg.audit_root, &cfg.project_root)?;
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The ctimes before anything here is created or written: what the survey compares.
        let reg_path = register_path(&cfg.audit_root);
        let before = Before {
            root: std::fs::symlink_metadata(&cfg.audit_root).ok(),
            register: std::fs::symlink_metadata(&reg_path).ok(),
            dir: std::fs::symlink_metadata(&dir).ok(),
            index: std::fs::symlink_metadata(dir.join(layout::INDEX_FILE)).ok(),
        };
        let id = layout::new_session_id()?;
        let key_id = hex(&secret.key_id());
        let register_key = secret.register_key(&dir_name, &id);
        if before.dir.is_none() {
            // Creating the project folder moves the audit root's ctime: record it in the
            // register first (index length 0), so that a crash before this session's own
            // register line never looks like a change after the last recorded write.
            let mut register = LockedIndex::open_path(reg_path.clone(), uid, cfg.fsync)?;
            register.append(
                INDEX_START,
                &to_value(&RegisterEvent {
                    project: dir_name.clone(),
                    session: id.clone(),
                    key_id: key_id.clone(),
                    index_lines: 0,
                    index_head: hex(&ZERO_HASH),
                    lane: None,
                    bytes: None,
                }),
                &register_key,
                cfg.fsync,
            )?;
        }
        fsx::ensure_private_dir(&dir, uid)?;

        // Lock order, everywhere: the project index, then the register.
        let mut index = LockedIndex::open(&dir, uid, cfg.fsync)?;
        let mut register = LockedIndex::open_path(reg_path.clone(), uid, cfg.fsync)?;
        let (found_at_start, unverified) = survey(
            &Survey {
                root: &cfg.audit_root,
                reg_path: &reg_path,
                dir: &dir,
                dir_name: &dir_name,
                before: &before,
                session: &id,
            },
            &index,
            &register,
            &secret,
        );
        let (prev_session, recovered) = attest_others(&dir, &index.events);
        let index_key = secret.index_key(&dir_name, &id);
        index.append(
            INDEX_START,
            &to_value(&IndexStartEvent {
                session: id.clone(),
                file: log_file_name(&id),
                key_id: key_id.clone(),
                prev_session: prev_session.clone(),
                recovered: recovered.clone(),
            }),
            &index_key,
            cfg.fsync,
        )?;
        let register_seq = register.lines();
        register.append(
            INDEX_START,
            &to_value(&RegisterEvent {
                project: dir_name.clone(),
                session: id.clone(),
                key_id: key_id.clone(),
                index_lines: index.lines(),
                index_head: hex(&index.head()),
                lane: None,
                bytes: None,
            }),
            &register_key,
            cfg.fsync,
        )?;
        drop(register);

        let path = dir.join(log_file_name(&id));
        let file = fsx::create_new_append(&path, uid)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(AuditError::Locked { path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(AuditError::io(&path, e)),
        }
        let first = StartEvent {
            session: id,
            project: dir_name,
            key_id,
            checkpoints: cfg.checkpoints,
            witness: cfg.witness.is_some(),
            prev_session,
            recovered,
            info: Value::Null,
            register: Some(register_seq),
            found_at_start,
            unverified,
            legacy_index: None,
        };
        let place = Place {
            uid,
            dir,
            path,
            file,
            reg_path,
            index_key,
            register_key,
            journal: None,
        };
        let mut w = Self::assemble(cfg, &secret, &first, place);
        drop(secret);
        // The derivations above ran in deeper frames, now dead: overwrite them.
        wipe_stack();
        w.write_start(first, start)?;
        if w.fsync {
            w.sync()?;
            fsx::fsync_dir(&w.dir)?;
        }
        drop(index);
        Ok(w)
    }

    /// The writer both layouts' `open` build, before its first line: the session's key
    /// derived, and `prev` the previous session's final head when it ended (closed, or its
    /// writer died and its lines were recovered), else zeros.
    fn assemble(
        cfg: &AuditConfig,
        secret: &InstallSecret,
        first: &StartEvent,
        at: Place,
    ) -> SessionWriter {
        let prev = match &first.prev_session {
            Some(a) if matches!(a.state, AttestState::Closed | AttestState::Recovered) => {
                a.head_hash().unwrap_or(ZERO_HASH)
            }
            _ => ZERO_HASH,
        };
        SessionWriter {
            uid: at.uid,
            origin: checkpoint::origin(&first.project, &first.session),
            dir: at.dir,
            path: at.path,
            file: at.file,
            key: secret.session_key(&first.project, &first.session),
            index_key: at.index_key,
            register_key: at.register_key,
            reg_path: at.reg_path,
            project: first.project.clone(),
            key_id: first.key_id.clone(),
            id: first.session.clone(),
            checkpoints: cfg.checkpoints,
            witness: cfg.witness.clone(),
            fsync: cfg.fsync,
            max_lines: cfg.epoch_max_lines,
            max_age: cfg.epoch_max_age,
            seq: 0,
            prev,
            epoch_lines: 0,
            epoch_started: Instant::now(),
            compact: Compact::new(),
            tree: cfg.witness.as_ref().map(|_| Tree::new()),
            witness_size: 0,
            poisoned: None,
            buf: Vec::with_capacity(1024),
            journal: at.journal,
        }
    }

    /// Writes the session's first line: `first`, with the caller's start event (redacted) as
    /// its `info`.
    fn write_start(&mut self, mut first: StartEvent, start: Value) -> Result<(), AuditError> {
        let mut info = start;
        redact_value(&mut info);
        first.info = info;
        self.write_line(KIND_START, &to_value(&first))?;
        self.epoch_lines += 1;
        Ok(())
    }

    /// This session's id.
    pub fn session_id(&self) -> &str {
        &self.id
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.key.epoch()
    }

    /// What this writer vouches for now (for verifying a live session).
    pub fn head(&self) -> SessionHead {
        SessionHead {
            session: self.id.clone(),
            file: self.path.clone(),
            lines: self.seq,
            head: head_hex(&self.prev),
        }
    }

    /// Appends one event of type `kind` (redacted first) and returns its `seq`. The line is in
    /// the kernel when this returns, not necessarily on disk; see [`Self::append_durable`].
    pub fn append(&mut self, kind: &str, event: Value) -> Result<u64, AuditError> {
        self.guarded(|w| w.append_inner(kind, event, false))
    }

    /// Like [`Self::append`], and `fdatasync`s the log before returning: for a command's
    /// intent, recorded before the command starts, so that a crash during the command cannot
    /// erase the fact that it was about to run.
    pub fn append_durable(&mut self, kind: &str, event: Value) -> Result<u64, AuditError> {
        self.guarded(|w| w.append_inner(kind, event, true))
    }

    /// `fdatasync`s the log: every line appended so far is on disk when it returns. What
    /// [`Self::append_durable`] does after its line, for a caller that has work to do between
    /// the append and the sync (the sandbox's setup, while the command waits for it).
    pub fn make_durable(&mut self) -> Result<(), AuditError> {
        self.guarded(|w| if w.fsync { w.sync() } else { Ok(()) })
    }

    /// Seals the epochs whose time is up, even with nothing to append. Call it from an idle
    /// loop: until it (or an append) runs, the current epoch's key stays in memory.
    pub fn tick(&mut self) -> Result<(), AuditError> {
        self.guarded(|w| w.roll_time(Instant::now()))
    }

    /// Ends the session: seals elapsed epochs, writes `session_end` (with `end` redacted as its
    /// `info`) and a final seal, writes the last checkpoint, and records the final head in the
    /// project index.
    pub fn close(mut self, end: Value) -> Result<SessionHead, AuditError> {
        self.guarded(|w| {
            w.roll_time(Instant::now())?;
            let mut info = end;
            redact_value(&mut info);
            w.write_line(KIND_END, &json!({ "info": info }))?;
            w.epoch_lines += 1;
            let note = w.seal()?;
            let synced = w.publish(note)?;
            if w.journal.is_some() {
                if w.fsync && !synced {
                    // The register and the tail state name these lines: on disk first.
                    w.sync()?;
                }
                return w.close_journal();
            }
            if w.fsync {
                w.sync()?;
            }
            let mut index = LockedIndex::open(&w.dir, w.uid, w.fsync)?;
            index.append(
                INDEX_CLOSE,
                &to_value(&IndexCloseEvent {
                    session: w.id.clone(),
                    file: log_file_name(&w.id),
                    key_id: w.key_id.clone(),
                    lines: w.seq,
                    head: head_hex(&w.prev),
                    root: hex(&w.compact.root()),
                }),
                &w.index_key,
                w.fsync,
            )?;
            let mut register = LockedIndex::open_path(w.reg_path.clone(), w.uid, w.fsync)?;
            register.append(
                INDEX_CLOSE,
                &to_value(&RegisterEvent {
                    project: w.project.clone(),
                    session: w.id.clone(),
                    key_id: w.key_id.clone(),
                    index_lines: index.lines(),
                    index_head: hex(&index.head()),
                    lane: None,
                    bytes: None,
                }),
                &w.register_key,
                w.fsync,
            )?;
            Ok(())
        })?;
        // Nothing more will be written: the poison makes any stray use of a clone impossible,
        // and the keys are zeroized when `self` drops here.
        self.poisoned = Some("closed".into());
        Ok(self.head())
    }

    /// The journal layout's close, after the final seal is on disk: retention, the register's
    /// record of the lane, the lane's tail state. None of it is synced (see docs/audit.md,
    /// "Syncs"): each names only lines already on disk, and a lost one is rebuilt by the next
    /// writer from the files. Except after a prune: records from before it name lines of the
    /// journal it replaced, which read as cut from this one (TRUNCATED), so the register line
    /// and the tail state that name the pruned journal are synced right after its rename.
    fn close_journal(&mut self) -> Result<(), AuditError> {
        let mut pruned = false;
        if let Some(j) = &mut self.journal {
            j.sessions += 1;
            j.unchecked = j.unchecked.saturating_add(1);
            // Reading the whole journal to see what is due is done only when something can be:
            // sessions beyond what is kept by count, or (by age) once every batch of closes.
            let look = j.retention.is_some_and(|r| {
                let by_count = r.sessions.is_none_or(|keep| {
                    j.sessions.saturating_sub(1).saturating_sub(keep) >= j.prune_batch
                });
                let by_age = r.days.is_none() || j.unchecked >= j.prune_batch;
                by_count && by_age
            });
            // Without retention, a long journal is archived instead (the same rewrite, its
            // older sessions kept in a compressed file).
            let archive =
                j.retention.is_none() && j.archive_at_bytes.is_some_and(|at| j.bytes >= at);
            let mode = match j.retention {
                Some(retention) if look => Some(crate::retention::Mode::Prune(retention)),
                None if archive => Some(crate::retention::Mode::Archive),
                _ => None,
            };
            if let Some(mode) = mode {
                j.unchecked = 0;
                let args = crate::retention::PruneArgs {
                    dir: &self.dir,
                    lane: j.lane,
                    path: &self.path,
                    file: &j.lock.file,
                    uid: self.uid,
                    fsync: self.fsync,
                    mode,
                    batch: j.prune_batch,
                    by: &self.id,
                    key_id: &self.key_id,
                    index_key: &self.index_key,
                };
                if let Some(p) = crate::retention::prune_if_due(&args)? {
                    self.file = p
                        .file
                        .try_clone()
                        .map_err(|e| AuditError::io(&self.path, e))?;
                    j.lock.file = p.file;
                    j.bytes = p.bytes;
                    j.lines = p.lines;
                    j.last_at = p.last_at;
                    j.sessions = p.sessions;
                    pruned = true;
                    if j.stop_after_rewrite {
                        return Err(AuditError::Format {
                            path: self.path.clone(),
                            reason: "stopped right after the lane's rewrite (a test's crash)"
                                .into(),
                        });
                    }
                }
            }
        }
        let Some(j) = &self.journal else {
            return Ok(());
        };
        let mut found = Vec::new();
        let mut register = LockedRegister::open(
            &self.reg_path,
            self.uid,
            &j.tail_key,
            None,
            &self.id,
            false,
            &mut found,
        )?;
        // The register is install-wide: archived past the same length, retention or not.
        let register_rewritten = match j.archive_at_bytes {
            Some(at) => register.archive_if_due(
                at,
                &self.id,
                &self.project,
                &self.key_id,
                &self.register_key,
                self.fsync,
            )?,
            None => false,
        };
        if register_rewritten && j.stop_after_rewrite {
            return Err(AuditError::Format {
                path: self.reg_path.clone(),
                reason: "stopped right after the register's rewrite (a test's crash)".into(),
            });
        }
        register.append(
            INDEX_CLOSE,
            &RegisterEvent {
                project: self.project.clone(),
                session: self.id.clone(),
                key_id: self.key_id.clone(),
                index_lines: j.lines,
                index_head: hex(&self.prev),
                lane: Some(j.lane),
                bytes: Some(j.bytes),
            },
            &self.register_key,
            &j.tail_key,
            (pruned || register_rewritten) && self.fsync,
        )?;
        drop(register);
        let tail = TailEvent {
            session: self.id.clone(),
            key_id: self.key_id.clone(),
            bytes: j.bytes,
            lines: j.lines,
            last_at: j.last_at,
            session_lines: self.seq,
            sessions: j.sessions,
            unchecked: j.unchecked,
            recovered: false,
        };
        journal::write_tail(
            &self.dir.join(journal::tail_file_name(j.lane)),
            KIND_TAIL,
            &to_value(&tail),
            &self.prev,
            &self.index_key,
            self.uid,
            pruned && self.fsync,
        )
    }

    fn guarded<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        if let Some(reason) = &self.poisoned {
            return Err(AuditError::Poisoned {
                session: self.id.clone(),
                reason: reason.clone(),
            });
        }
        let r = f(self);
        if let Err(e) = &r {
            // Fail closed: after any failure the log's state on disk is uncertain, so no
            // later line may pretend to follow it.
            self.poisoned = Some(e.to_string());
        }
        r
    }

    fn append_inner(&mut self, kind: &str, event: Value, durable: bool) -> Result<u64, AuditError> {
        if !line::valid_kind(kind) {
            return Err(AuditError::InvalidKind {
                kind: kind.to_string(),
                reason: "must be a lowercase letter, then [a-z0-9_.-], at most 64 bytes",
            });
        }
        if RESERVED_KINDS.contains(&kind) {
            return Err(AuditError::InvalidKind {
                kind: kind.to_string(),
                reason: "reserved for the log's own lines",
            });
        }
        self.roll_time(Instant::now())?;
        let mut event = event;
        redact_value(&mut event);
        let seq = self.write_line(kind, &event)?;
        self.epoch_lines += 1;
        if durable && self.fsync {
            self.sync()?;
        }
        if self.epoch_lines >= self.max_lines {
            // Seal at once: the sooner the key moves on, the smaller the window in which a
            // captured key can rewrite these lines.
            let note = self.seal()?;
            self.epoch_started = Instant::now();
            self.publish(note)?;
        }
        Ok(seq)
    }

    fn sync(&self) -> Result<(), AuditError> {
        self.file
            .sync_data()
            .map_err(|e| AuditError::io(&self.path, e))
    }

    fn write_line(&mut self, kind: &str, event: &Value) -> Result<u64, AuditError> {
        let seq = self.seq;
        line::build(
            &mut self.buf,
            &NewLine {
                seq,
                epoch: self.key.epoch(),
                time_ms: now_ms(),
                prev: &self.prev,
                kind,
                event,
            },
            self.key.bytes(),
        )
        .map_err(|e| AuditError::Format {
            path: self.path.clone(),
            reason: format!("serialising a {kind:?} event: {e}"),
        })?;
        if self.buf.len() > MAX_LINE_BYTES {
            return Err(AuditError::LineTooLong {
                kind: kind.to_string(),
                len: self.buf.len(),
                limit: MAX_LINE_BYTES,
            });
        }
        // One write of the whole line: a crash leaves at most one torn line, at the end.
        self.file
            .write_all(&self.buf)
            .map_err(|e| AuditError::io(&self.path, e))?;
        if let Some(j) = &mut self.journal {
            j.last_at = j.bytes;
            j.bytes += self.buf.len() as u64;
            j.lines += 1;
        }
        let body = &self.buf[..self.buf.len() - 1];
        self.prev = sha256(body);
        let leaf = leaf_hash(body);
        self.compact.push(leaf);
        if let Some(t) = &mut self.tree {
            t.push(leaf);
        }
        self.seq += 1;
        Ok(seq)
    }

    /// Writes the seal of the current epoch, signs the checkpoint it ends (if anyone needs
    /// one), then evolves the key. Returns the checkpoint note.
    fn seal(&mut self) -> Result<Option<(String, u64)>, AuditError> {
        let ev = to_value(&SealEvent {
            epoch: self.key.epoch(),
            lines: self.seq,
            root: hex(&self.compact.root()),
        });
        self.write_line(KIND_SEAL, &ev)?;
        let note = (self.checkpoints || self.witness.is_some()).then(|| {
            let cp = Checkpoint {
                origin: self.origin.clone(),
                size: self.seq,
                root: self.compact.root(),
                epoch: self.key.epoch(),
            };
            (cp.sign(&self.key.checkpoint_key()), self.seq)
        });
        self.key.evolve();
        wipe_stack();
        self.epoch_lines = 0;
        Ok(note)
    }

    /// Seals every epoch whose time is up; an idle gap of several epoch lengths gives one
    /// (empty) seal per elapsed epoch, so epochs stay tied to time and a later key can never
    /// pass for an earlier one (CVE-2023-31438's truncate-and-continue).
    fn roll_time(&mut self, now: Instant) -> Result<(), AuditError> {
        let elapsed = now.saturating_duration_since(self.epoch_started);
        if elapsed < self.max_age {
            return Ok(());
        }
        let n = (elapsed.as_nanos() / self.max_age.as_nanos()).max(1);
        let mut note = None;
        for _ in 0..n {
            note = self.seal()?;
        }
        self.epoch_started = now;
        self.publish(note).map(|_| ())
    }

    /// Makes the log durable, then writes the checkpoint file and sends the checkpoint to the
    /// witness. The order matters: a checkpoint never names more lines than the disk holds.
    /// Returns whether it synced the log.
    fn publish(&mut self, note: Option<(String, u64)>) -> Result<bool, AuditError> {
        let Some((note, size)) = note else {
            return Ok(false);
        };
        if self.fsync {
            self.sync()?;
        }
        if self.checkpoints {
            // `reuse`: how the checkpoint file is replaced. `None`, an old-layout session's own
            // file: `write_atomic`. `Some(in_place)`, the lane's, replaced at every close: two
            // inodes take turns so that no close frees a block (`replace_reusing_inodes`), and
            // only a session's first checkpoint is written into the spare in place (a later
            // one may follow the one before by microseconds, a close after an idle spell
            // publishing twice, while a reader of that spare, the checkpoint a moment ago, is
            // still reading).
            let (name, sync, reuse) = match &mut self.journal {
                // A session's first checkpoint replaces an older session's: if it were lost
                // (power loss), the older one names fewer lines than the journal holds, which
                // is no contradiction. A later one replaces this session's own earlier one,
                // which would then look stale: synced. So is the lane's very first one, whose
                // loss would leave no checkpoint at all.
                Some(j) => {
                    let first = !j.published && j.ckpt_existed;
                    let reuse = Some(!j.published);
                    j.published = true;
                    (
                        journal::lane_ckpt_file_name(j.lane),
                        self.fsync && !first,
                        reuse,
                    )
                }
                None => (ckpt_file_name(&self.id), self.fsync, None),
            };
            match reuse {
                Some(in_place) => fsx::replace_reusing_inodes(
                    &self.dir,
                    &name,
                    note.as_bytes(),
                    sync,
                    in_place,
                    self.uid,
                )?,
                None => fsx::write_atomic(&self.dir, &name, note.as_bytes(), sync, self.uid)?,
            }
        }
        if let Some(w) = self.witness.clone() {
            self.submit(&w, &note, size)?;
        }
        Ok(self.fsync)
    }

    fn submit(&mut self, w: &WitnessConfig, note: &str, size: u64) -> Result<(), AuditError> {
        let proof = |old: u64, tree: &Option<Tree>| {
            tree.as_ref()
                .map(|t| t.consistency_proof(old, size))
                .unwrap_or_default()
        };
        let mut old = self.witness_size;
        for _attempt in 0..2 {
            match witness::add_checkpoint(w, old, &proof(old, &self.tree), note)? {
                Answer::Cosigned(_) => {
                    self.witness_size = size;
                    return Ok(());
                }
                // An earlier answer was lost (timeout after the witness stored it): continue
                // from the size the witness holds, once, if it is behind us.
                Answer::Conflict(held) if held <= size && held != old => old = held,
                Answer::Conflict(held) => {
                    return Err(AuditError::WitnessRefused {
                        witness: witness::describe(w),
                        origin: self.origin.clone(),
                        size,
                        answer: format!("holds size {held}"),
                    })
                }
                Answer::Refused(answer) => {
                    return Err(AuditError::WitnessRefused {
                        witness: witness::describe(w),
                        origin: self.origin.clone(),
                        size,
                        answer,
                    })
                }
            }
        }
        Err(AuditError::WitnessRefused {
            witness: witness::describe(w),
            origin: self.origin.clone(),
            size,
            answer: format!("still conflicting at size {old}"),
        })
    }
}

/// Looks at the sessions the index lists and states, for the new session's first line, how the
/// previous one ended and which others died without closing.
pub(crate) fn attest_others(dir: &Path, events: &[IndexEvent]) -> (Option<Attest>, Vec<Attest>) {
    let mut order: Vec<&str> = Vec::new();
    let mut closes: HashMap<&str, &IndexCloseEvent> = HashMap::new();
    let mut settled: HashSet<&str> = HashSet::new();
    for ev in events {
        match ev {
            IndexEvent::Start(s) => {
                order.push(&s.session);
                for a in s.recovered.iter().chain(s.prev_session.iter()) {
                    if matches!(a.state, AttestState::Recovered | AttestState::Missing) {
                        settled.insert(&a.session);
                    }
                }
            }
            IndexEvent::Close(c) => {
                closes.insert(&c.session, c);
            }
        }
    }
    let attest = |id: &str| -> Attest {
        if let Some(c) = closes.get(id) {
            return Attest {
                session: id.to_string(),
                state: AttestState::Closed,
                lines: c.lines,
                head: c.head.clone(),
            };
        }
        let (state, lines, head) = inspect(&dir.join(log_file_name(id)));
        Attest {
            session: id.to_string(),
            state,
            lines,
            head: head_hex(&head),
        }
    };
    let prev = order.last().map(|id| attest(id));
    let mut recovered = Vec::new();
    let mut done: HashSet<&str> = HashSet::new();
    for id in order.iter().rev().skip(1) {
        if closes.contains_key(id) || settled.contains(id) || !done.insert(id) {
            continue;
        }
        if !layout::valid_session_id(id) {
            continue;
        }
        let a = attest(id);
        if a.state != AttestState::Open {
            recovered.push(a);
        }
    }
    (prev, recovered)
}

/// The state of an unclosed session's file: live (locked by its writer), missing, or dead
/// with so many complete lines.
fn inspect(path: &Path) -> (AttestState, u64, Hash) {
    let file = match fsx::open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return (AttestState::Missing, 0, ZERO_HASH)
        }
        // Unreadable: claim nothing about it.
        Err(_) => return (AttestState::Open, 0, ZERO_HASH),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(_) => return (AttestState::Open, 0, ZERO_HASH),
    }
    let mut data = Vec::new();
    let read = io::Read::read_to_end(&mut &file, &mut data);
    let _ = file.unlock();
    if read.is_err() {
        return (AttestState::Open, 0, ZERO_HASH);
    }
    let (lines, head) = layout::head_of(&data);
    (AttestState::Recovered, lines, head)
}

/// Metadata taken before the writer touched anything.
struct Before {
    root: Option<std::fs::Metadata>,
    register: Option<std::fs::Metadata>,
    dir: Option<std::fs::Metadata>,
    index: Option<std::fs::Metadata>,
}

struct Survey<'a> {
    root: &'a Path,
    reg_path: &'a Path,
    dir: &'a Path,
    dir_name: &'a str,
    before: &'a Before,
    /// The new session (its own "creating project" register line is not evidence).
    session: &'a str,
}

fn problem_of(f: &Finding) -> Problem {
    let at = f.line.map(|l| format!(" (line {l})")).unwrap_or_default();
    Problem {
        code: f.code.as_str().to_string(),
        file: f.file.display().to_string(),
        detail: format!("{}{at}", f.message),
    }
}

/// What a new writer checks before it writes anything, with the install secret it holds:
/// the register's and the index's MACs and chain, the project's index against the register,
/// ctimes against the last recorded writes, and the previous session's file against its
/// close entry. Every error found is recorded in the new session's (MACed) first line, so
/// that rewriting the evidence afterwards cannot make the damage disappear.
fn survey(
    s: &Survey<'_>,
    index: &LockedIndex,
    register: &LockedIndex,
    secret: &InstallSecret,
) -> (Vec<Problem>, Vec<UnverifiedLine>) {
    let slack = u64::try_from(crate::verify::DEFAULT_CTIME_SLACK.as_millis()).unwrap_or(u64::MAX);
    let keys = std::slice::from_ref(secret);
    let mut found: Vec<Finding> = Vec::new();
    let late = |path: &Path, meta: &Option<std::fs::Metadata>, t: Option<u64>, what: &str| {
        let (Some(meta), Some(t)) = (meta, t) else {
            return None;
        };
        let c = fsx::ctime_ms(meta);
        (c > t.saturating_add(slack)).then(|| {
            Finding::new(
                path,
                crate::Code::ChangedAfterWrite,
                Severity::Error,
                format!("changed {} ms after {what}", c - t),
            )
        })
    };

    // The register.
    // Times and records are taken only from lines MACed under this writer's own secret: a
    // line under another key id cannot be checked here, and anyone can write one under a
    // made-up id. Those after the last own line (what this session builds on) are named in
    // `unverified` for verify to check; only when no own line exists (a new secret after an
    // export) do their times serve as the anchor.
    let reg = check_register(
        s.reg_path,
        &register.data,
        keys,
        true,
        Some(s.session),
        crate::register::archive_record(&register.data).map(|r| r.base()),
        &mut found,
    );
    let mut unverified = Vec::new();
    let reg_anchor = anchor(
        "register",
        reg.last_time_ms,
        reg.last_authentic_line,
        &reg.unknown,
        &mut unverified,
    );
    found.extend(late(
        s.root,
        &s.before.root,
        reg_anchor,
        "the register's last entry",
    ));
    found.extend(late(
        s.reg_path,
        &s.before.register,
        reg_anchor,
        "its last entry",
    ));

    // The index, and the index against the register.
    let index_path = s.dir.join(layout::INDEX_FILE);
    let idx =
        crate::verify::verify_index(&index_path, s.dir_name, &index.data, keys, true, &mut found);
    if let Some(rec) = reg.last.get(s.dir_name) {
        // A "creating project" record (index length 0) whose writer died before the folder
        // existed proves nothing was in it.
        if s.before.dir.is_none() && rec.index_lines > 0 {
            found.push(Finding::new(
                s.dir,
                crate::Code::FileMissing,
                Severity::Error,
                format!(
                    "the register records sessions of this project (the last one {}), but its audit folder was gone",
                    rec.session
                ),
            ));
        } else {
            found.extend(index_against_register(&index_path, &idx.line_hashes, rec));
        }
    }
    let idx_anchor = anchor(
        "index",
        idx.last_time_ms,
        idx.last_authentic_line,
        &idx.unknown,
        &mut unverified,
    );
    found.extend(late(
        &index_path,
        &s.before.index,
        idx_anchor,
        "the index's last entry",
    ));

    // The folder: every write in it is followed by a recorded line, except a running or dead
    // writer's last checkpoint; running writers make the comparison meaningless (it is left
    // to verify), dead ones' last lines count as recorded.
    let mut recorded = idx_anchor;
    let mut live = false;
    let settled: HashSet<&str> = idx
        .starts
        .iter()
        .flat_map(|(_, st)| st.prev_session.iter().chain(st.recovered.iter()))
        .filter(|a| matches!(a.state, AttestState::Recovered | AttestState::Missing))
        .map(|a| a.session.as_str())
        .collect();
    for (_, st) in &idx.starts {
        if idx.closes.contains_key(&st.session) || settled.contains(st.session.as_str()) {
            continue;
        }
        if !layout::valid_session_id(&st.session) {
            continue;
        }
        let Ok(f) = fsx::open_read(&s.dir.join(log_file_name(&st.session))) else {
            continue;
        };
        if let Err(std::fs::TryLockError::WouldBlock) = f.try_lock_shared() {
            live = true;
            continue;
        }
        let mut data = Vec::new();
        let _ = io::Read::read_to_end(&mut &f, &mut data);
        let _ = f.unlock();
        if let Some(t) = last_line_time(&data) {
            recorded = Some(recorded.map_or(t, |r: u64| r.max(t)));
        }
    }
    if !live {
        found.extend(late(
            s.dir,
            &s.before.dir,
            recorded,
            "the last write Garuda recorded in it",
        ));
    }

    // The previous session, if the index says it closed: its file must end where it says.
    if let Some((_, last)) = idx.starts.last() {
        if let Some((_, c)) = idx.closes.get(&last.session) {
            let path = s.dir.join(log_file_name(&c.session));
            match fsx::open_read(&path) {
                Err(_) => found.push(Finding::new(
                    &path,
                    crate::Code::FileMissing,
                    Severity::Error,
                    format!(
                        "the index closes session {} with {} lines; its file is gone",
                        c.session, c.lines
                    ),
                )),
                Ok(f) => {
                    let mut data = Vec::new();
                    let _ = io::Read::read_to_end(&mut &f, &mut data);
                    let (lines, head) = layout::head_of(&data);
                    let torn = data.last().is_some_and(|&b| b != b'\n');
                    if lines < c.lines {
                        found.push(Finding::new(
                            &path,
                            crate::Code::Truncated,
                            Severity::Error,
                            format!(
                                "the index close entry records {} lines; the file has {lines}",
                                c.lines
                            ),
                        ));
                    } else if lines > c.lines || torn {
                        found.push(Finding::new(
                            &path,
                            crate::Code::AfterEnd,
                            Severity::Error,
                            "bytes after the end the index close entry records".to_string(),
                        ));
                    } else if head_hex(&head) != c.head {
                        found.push(Finding::new(
                            &path,
                            crate::Code::RootMismatch,
                            Severity::Error,
                            "the last line is not the one the index close entry records"
                                .to_string(),
                        ));
                    }
                    let wants_ckpt = data
                        .split(|&b| b == b'\n')
                        .next()
                        .and_then(line::split_mac)
                        .and_then(|(prefix, _)| line::parse_header(prefix))
                        .is_some_and(|h| {
                            crate::json::parse(h.event).is_ok_and(|v| {
                                v.get("checkpoints").and_then(Value::as_bool) == Some(true)
                            })
                        });
                    let ckpt = s.dir.join(ckpt_file_name(&c.session));
                    if wants_ckpt && std::fs::symlink_metadata(&ckpt).is_err() {
                        found.push(Finding::new(
                            &ckpt,
                            crate::Code::FileMissing,
                            Severity::Error,
                            "the closed session's checkpoint is gone".to_string(),
                        ));
                    }
                }
            }
        }
    }
    let problems = found
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(problem_of)
        .collect();
    (problems, unverified)
}

/// What the first journal session of a project written in the old layout checks of the old
/// files, once, with its secret: the index's chain and MACs, the index against the register's
/// last old-layout record, and the last old session against the index's close entry. The
/// ctimes are the journal survey's (see [`crate::lane::start`]).
pub(crate) fn legacy_survey(
    ctx: &crate::lane::OpenCtx<'_>,
    index: &crate::index::ReadIndex,
    legacy_rec: Option<&crate::events::LaneRecord>,
    secret: &InstallSecret,
) -> (Vec<Finding>, Vec<UnverifiedLine>) {
    let keys = std::slice::from_ref(secret);
    let mut found: Vec<Finding> = Vec::new();
    let mut unverified = Vec::new();
    let index_path = ctx.dir.join(layout::INDEX_FILE);
    let idx = crate::verify::verify_index(
        &index_path,
        ctx.dir_name,
        &index.data,
        keys,
        true,
        &mut found,
    );
    if let Some(rec) = legacy_rec {
        let ev = RegisterEvent {
            project: rec.project.clone(),
            session: rec.session.clone(),
            key_id: String::new(),
            index_lines: rec.lines,
            index_head: rec.head.clone(),
            lane: None,
            bytes: None,
        };
        found.extend(index_against_register(&index_path, &idx.line_hashes, &ev));
    }
    anchor(
        "index",
        idx.last_time_ms,
        idx.last_authentic_line,
        &idx.unknown,
        &mut unverified,
    );
    if let Some((_, last)) = idx.starts.last() {
        if let Some((_, c)) = idx.closes.get(&last.session) {
            let path = ctx.dir.join(log_file_name(&c.session));
            match fsx::read_private(&path, ctx.uid) {
                Ok(Some(data)) => {
                    let (lines, head) = layout::head_of(&data);
                    if lines != c.lines || head_hex(&head) != c.head {
                        found.push(Finding::new(
                            &path,
                            crate::Code::RootMismatch,
                            Severity::Error,
                            format!(
                                "the index close entry records {} lines ending with {}; the file has {lines}",
                                c.lines, c.head
                            ),
                        ));
                    }
                }
                _ => found.push(Finding::new(
                    &path,
                    crate::Code::FileMissing,
                    Severity::Error,
                    format!(
                        "the index closes session {} with {} lines; its file is gone",
                        c.session, c.lines
                    ),
                )),
            }
        }
    }
    (found, unverified)
}

/// At most this many unverified lines per file are named in a first line.
const MAX_UNVERIFIED: usize = 64;

/// The time to compare ctimes with: the last own line's, or, with no own line at all, the last
/// unknown-key line's. Names every unknown-key line after the last own line in `out`.
pub(crate) fn anchor(
    file: &str,
    own: Option<u64>,
    last_own_line: u64,
    unknown: &[crate::register::UnknownLine],
    out: &mut Vec<UnverifiedLine>,
) -> Option<u64> {
    let after: Vec<&crate::register::UnknownLine> =
        unknown.iter().filter(|u| u.line > last_own_line).collect();
    let skip = after.len().saturating_sub(MAX_UNVERIFIED);
    out.extend(after.iter().skip(skip).map(|u| UnverifiedLine {
        file: file.to_string(),
        line: u.line,
        key_id: u.key_id.clone(),
        hash: hex(&u.hash),
    }));
    own.or_else(|| unknown.iter().filter_map(|u| u.time_ms).max())
}

/// Time of the last complete line of a session file.
fn last_line_time(data: &[u8]) -> Option<u64> {
    let (lines, _) = layout::split_lines(data);
    let (_, last) = lines.last()?;
    let (prefix, _) = line::split_mac(last)?;
    crate::util::parse_time(line::parse_header(prefix)?.time)
}

/// Overwrites the stack below the caller's frame (where key derivations and HMACs of the
/// calls just made left copies of key material) with zeros. Best effort in safe Rust: it
/// reaches dead frames of callees, not copies in the caller's own frame or in registers.
#[inline(never)]
fn wipe_stack() {
    let mut buf = [0u8; 32 * 1024];
    std::hint::black_box(&mut buf);
    zeroize::Zeroize::zeroize(&mut buf);
    std::hint::black_box(&buf);
}
