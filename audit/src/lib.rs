//! Garuda's audit log: a keyed, sealed, checkpointed record of what a session did, and the
//! verifier that says whether it is intact — or honestly says it cannot tell.
//!
//! # What is recorded, and where
//!
//! One JSONL file per session under `<audit_root>/<project-name>-<hash16>/` (normally
//! `~/.garuda/audit`; `hash16` is the first 16 hex digits of SHA-256 of the canonical project
//! path), next to a checkpoint file per session and one `index.jsonl` per project. Folders are
//! 0700, files 0600, every open refuses symbolic links (`O_NOFOLLOW`, `O_EXCL` on creation),
//! and a session file has exactly one writer (`flock` via [`std::fs::File::try_lock`]).
//!
//! Every line is written byte by byte by [`SessionWriter`], never by a JSON serialiser of the
//! whole line:
//!
//! ```text
//! {"v":1,"seq":7,"epoch":0,"time":"2026-05-15T12:00:00.123Z","prev":"<hex>","type":"command_intent","event":{...},"mac":"<hex>"}
//! ```
//!
//! - `seq` counts lines from 0; `prev` is SHA-256 of the previous line's exact bytes (for the
//!   first line: the previous session's final line, or zeros).
//! - `mac` is HMAC-SHA256, under the current epoch's key, of every byte before `,"mac":"`.
//!   The verifier MACs those same bytes; it never re-serialises, so the same JSON written any
//!   other way (key order, spacing, escapes) fails the MAC. Duplicate keys anywhere in a line
//!   make it MALFORMED, because such a line reads differently to different parsers.
//! - Events are redacted first ([`redact`]): API keys, bearer tokens, private key blocks,
//!   URL passwords, `password=`/`token=`/`secret=` assignments and JWTs become
//!   `[REDACTED:kind]`.
//!
//! # Keys and epochs (forward integrity)
//!
//! A 32-byte install secret lives in `<garuda_home>/keys/install.key`. Each session derives
//! its own key from it, then the writer forgets the secret. Every 256 lines or 60 seconds
//! (whichever comes first) the epoch ends: a `seal` line, MACed under the epoch's key, records
//! the line count and the RFC 6962 Merkle root of all lines so far; the key is replaced by
//! `HMAC(key, "garuda-audit-evolve-v1")` and the old one is zeroized. Epochs with no lines are
//! sealed too, one seal per elapsed epoch. So whoever reads the writer's memory in epoch `e`
//! can forge lines of epoch `e` and later, but not change a line of an earlier epoch without
//! the MAC failing, and not truncate to an earlier epoch and continue (a later key's line
//! after an earlier epoch is EPOCH_GAP) — the two journald FSS breaks, CVE-2023-31438 and
//! CVE-2023-31439. See [`keys`] for the derivations.
//!
//! # Checkpoints, linking, witness
//!
//! After every seal (and at close) the writer syncs the log and replaces `<session>.ckpt`, a
//! C2SP `tlog-checkpoint` signed note (origin, tree size, root hash) signed with an HMAC under a
//! key of the sealed epoch ([`checkpoint`]). A session's first line names the previous session
//! and its final head; the index records each session's start and its final head at close
//! (`index.jsonl`). A new session also records, as found, sessions whose writer died. An optional
//! witness command receives each checkpoint with an RFC 9162 consistency proof and refuses to
//! go back ([`witness`]).
//!
//! # Threat model, briefly (docs/audit.md has the full table)
//!
//! - **Commands and the agent** cannot open `~/.garuda` at all (sandbox), so they can neither
//!   read the secret nor touch the files. Verify covers them.
//! - **A process with the user's rights** can read the install secret while it is on disk, and
//!   then rewrite anything consistently. Once the secret is exported and removed
//!   ([`key_export`]), it can still delete or cut files, but not forge lines, seals,
//!   checkpoints or index entries: every cut shows, except removing the newest sessions with
//!   all their traces (files, index and register lines), which shows only as a ctime later
//!   than the last recorded write (CHANGED_AFTER_WRITE, undecidable) until the project's next
//!   session records it in its first line (FOUND_AT_START, an error) — or through a witness.
//!   A `<garuda_home>/audit.register.jsonl` records every session of every project with its
//!   index head, so a deleted or rolled-back project folder shows; a new writer checks the
//!   evidence with the secret before writing ([`events::StartEvent::found_at_start`]), and
//!   names the lines under other key ids it builds on ([`events::StartEvent::unverified`]):
//!   anyone can write a line under a made-up key id. A wipe of the audit folder together with
//!   the register (and the key) is indistinguishable from a fresh install without a witness;
//!   verify given the exported keys reports each one no line uses as KEY_UNUSED.
//! - **Root, or anyone with the secret**: only a witness outside their reach detects a rewrite.
//!
//! # What verify can and cannot know
//!
//! [`verify`] checks every line (MAC under the epoch its position implies, `seq`, `prev`,
//! epoch, seal roots), every checkpoint (signature, size, root, that it ends at its epoch's
//! seal, that it is not older than the log), every statement about a session's end (index
//! close entry, later sessions' first lines, a running writer's head), the witness, and file
//! types, modes and owners. It reports each problem as a [`Finding`] and gives an
//! [`Outcome`]: **Verified** (exit 0), **Tampered** (exit 1), or **Undecidable** (exit 2)
//! whenever the evidence cannot rule tampering out — a session that was never closed and that
//! nothing else records (its tail may have been cut, or its writer crashed), a key that was not
//! given, a folder changed after the last write, an unreachable witness. "Cannot tell" is never
//! reported as verified. When nothing is wrong and no session was found (a project that never
//! ran a command) the outcome is **NoSessions** (exit 0). What the report says about keys, the
//! witness and what was read is computed from [`Facts`] only ([`Coverage::from_facts`]).
//! [`show_each`] gives every session's verified lines for `garuda audit list`.
//!
//! It cannot know about lines that were never written (a supervisor compromised before it
//! logs), lines written after an unclosed session's last checkpoint and then cut, or a rewrite
//! by someone holding the secret when there is no witness. A torn last line (a crash while
//! writing) is a warning, not tampering: the writer writes each line with one `write`, and
//! never writes a checkpoint naming more than is synced to disk.
//!
//! # Using it
//!
//! ```no_run
//! use garuda_audit::{AuditConfig, SessionWriter, VerifyOptions, VerifyTarget, InstallSecret};
//! use serde_json::json;
//! # fn main() -> Result<(), garuda_audit::AuditError> {
//! let home = std::path::Path::new("/home/dev/.garuda");
//! let cfg = AuditConfig::new(home, std::path::Path::new("/home/dev/project"));
//! let mut log = SessionWriter::open(&cfg, json!({"argv": ["garuda", "sandbox"]}))?;
//! log.append_durable("command_intent", json!({"cmd": ["cargo", "test"]}))?;
//! log.append("command_result", json!({"exit": 0}))?;
//! log.close(json!({"reason": "done"}))?;
//!
//! let dir = garuda_audit::project_audit_dir(&cfg.audit_root, &cfg.project_root)?;
//! let key = InstallSecret::load(&cfg.keys_dir)?.into_iter().collect();
//! let report = garuda_audit::verify(&VerifyOptions::new(VerifyTarget::Project(dir), key));
//! println!("{}", report.render_text());
//! std::process::exit(report.outcome().exit_code());
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod archive;
pub mod checkpoint;
mod error;
pub mod events;
mod fsx;
mod index;
pub mod journal;
mod json;
pub mod keys;
mod lane;
mod layout;
pub mod line;
pub mod merkle;
pub mod redact;
mod register;
mod report;
mod retention;
mod show;
mod util;
mod verify;
pub mod witness;
mod writer;

pub use error::AuditError;
pub use events::Retention;
pub use keys::{key_export, InstallSecret, KeyId};
pub use layout::{
    ckpt_file_name, log_file_name, new_session_id, project_audit_dir, project_dir_name,
    valid_session_id, INDEX_FILE,
};
pub use line::MAX_LINE_BYTES;
pub use report::{
    Code, Coverage, DiskKeyFacts, Facts, Finding, KeyFileState, Outcome, RegisterFacts, Report,
    SessionSummary, Severity, TargetFacts, WitnessFacts,
};
pub use show::{list_sessions, show, show_each, Shown};
pub use util::{format_time, hex, parse_hex32, parse_time, Hash, ZERO_HASH};
pub use verify::{
    verify, verify_session_bytes, ShownLine, VerifyOptions, VerifyTarget, DEFAULT_CTIME_SLACK,
};
pub use witness::{serve as witness_serve, WitnessConfig};
pub use writer::{
    AuditConfig, SessionHead, SessionWriter, DEFAULT_EPOCH_MAX_AGE, DEFAULT_EPOCH_MAX_LINES,
    DEFAULT_PRUNE_BATCH,
};

/// The session id the fuzz target's bytes are verified as.
#[doc(hidden)]
pub const FUZZ_SESSION: &str = "20260101T000000Z-00000000000000f0";

/// The project folder name the fuzz seeds are written for.
#[doc(hidden)]
pub const FUZZ_PROJECT: &str = "fuzz-0000000000000000";

/// The install secret of the fuzz seed corpus (public by design: the fuzzer must be able to
/// reach the code behind a valid MAC).
#[doc(hidden)]
pub fn fuzz_secret() -> InstallSecret {
    InstallSecret::from_bytes([0x5a; 32])
}

/// A valid session file for [`FUZZ_SESSION`] under [`fuzz_secret`]: `events` ordinary lines,
/// sealed every `per_epoch` lines, closed when `close`. Seeds the fuzz corpus.
#[doc(hidden)]
pub fn fuzz_seed(events: usize, per_epoch: usize, close: bool) -> Vec<u8> {
    use serde_json::json;
    struct Seed {
        key: keys::EpochKey,
        out: Vec<u8>,
        buf: Vec<u8>,
        prev: Hash,
        tree: merkle::Compact,
        in_epoch: usize,
    }
    impl Seed {
        fn put(&mut self, kind: &str, event: serde_json::Value) {
            let seq = self.tree.size();
            let nl = line::NewLine {
                seq,
                epoch: self.key.epoch(),
                time_ms: 1_767_225_600_000 + seq * 1000,
                prev: &self.prev,
                kind,
                event: &event,
            };
            if line::build(&mut self.buf, &nl, self.key.bytes()).is_ok() {
                self.out.extend_from_slice(&self.buf);
                let body = &self.buf[..self.buf.len() - 1];
                self.prev = util::sha256(body);
                self.tree.push(merkle::leaf_hash(body));
            }
            self.in_epoch += 1;
        }
        fn seal(&mut self) {
            let ev = json!({
                "epoch": self.key.epoch(),
                "lines": self.tree.size(),
                "root": hex(&self.tree.root()),
            });
            self.put(events::KIND_SEAL, ev);
            self.key.evolve();
            self.in_epoch = 0;
        }
    }
    let secret = fuzz_secret();
    let mut s = Seed {
        key: secret.session_key(FUZZ_PROJECT, FUZZ_SESSION),
        out: Vec::new(),
        buf: Vec::new(),
        prev: ZERO_HASH,
        tree: merkle::Compact::new(),
        in_epoch: 0,
    };
    let start = serde_json::to_value(events::StartEvent {
        session: FUZZ_SESSION.into(),
        project: FUZZ_PROJECT.into(),
        key_id: hex(&secret.key_id()),
        checkpoints: false,
        witness: false,
        prev_session: None,
        recovered: Vec::new(),
        info: json!({"argv": ["garuda", "sandbox"]}),
        register: None,
        found_at_start: Vec::new(),
        unverified: Vec::new(),
        legacy_index: None,
    })
    .unwrap_or_default();
    s.put(events::KIND_START, start);
    for i in 0..events {
        s.put(
            "command_result",
            json!({"cmd": ["echo", format!("step {i}")], "exit": 0}),
        );
        if s.in_epoch >= per_epoch.max(1) {
            s.seal();
        }
    }
    if close {
        s.put(events::KIND_END, json!({"info": {}}));
        s.seal();
    }
    s.out
}

/// Runs every parser of this crate on arbitrary bytes: as a session file, a checkpoint note, a
/// witness request, a strict JSON value and a journal archive. Used by `fuzz/fuzz_targets/audit_verify.rs` and by
/// the corpus replay test; it must never panic.
#[doc(hidden)]
pub fn exercise(data: &[u8]) {
    let keys = [fuzz_secret()];
    let findings = verify_session_bytes(FUZZ_SESSION, data, &keys);
    for f in &findings {
        let _ = f.code.as_str();
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(note) = checkpoint::Note::parse(text) {
            if let Ok(cp) = checkpoint::Checkpoint::parse_text(&note.text) {
                let key = keys[0]
                    .session_key(FUZZ_PROJECT, FUZZ_SESSION)
                    .at(cp.epoch.min(64));
                let _ = note.signed_by(&key.checkpoint_key());
            }
        }
    }
    if let Ok(witness::Request::Add { old, proof, .. }) = witness::parse_request(data) {
        let root = merkle::leaf_hash(data);
        let _ = merkle::verify_consistency(
            old,
            old.saturating_add(proof.len() as u64),
            &root,
            &root,
            &proof,
        );
    }
    let _ = json::check(data);
    let _ = redact::redact_str(&String::from_utf8_lossy(data));
    // The same bytes as a journal archive (and as the compressed body behind its magic): what
    // decodes must encode back to the same lines.
    for file in [data.to_vec(), [archive::MAGIC, data].concat()] {
        if let Ok(lines) = archive::decode(&file, 1 << 20) {
            let again = archive::decode(&archive::encode(&lines), lines.len() as u64);
            assert_eq!(again.as_deref(), Ok(&lines[..]), "an archive's round trip");
        }
    }
}

/// A journal archive's bytes for these complete lines (`archive.rs`), for the fuzz seeds.
#[doc(hidden)]
pub fn archive_encode(lines: &[u8]) -> Vec<u8> {
    archive::encode(lines)
}

/// The lines an archive file holds (at most 256 MiB), for tests that count them.
#[doc(hidden)]
pub fn archive_decode(file: &[u8]) -> Result<Vec<u8>, String> {
    archive::decode(file, archive::MAX_UNCHECKED_BYTES)
}
