//! The witness: a second party that keeps the latest checkpoint of every session and refuses
//! to go back.
//!
//! Garuda speaks the body format of C2SP `tlog-witness` over a pipe instead of HTTP. The
//! configured command (an argument vector, never a shell string) gets one request on standard
//! input and answers on standard output, then exits:
//!
//! ```text
//! request                              answer
//! ───────────────────────────────────  ─────────────────────────────────────────────────────
//! old <size>\n                         — <witness> <base64 cosignature>\n     (accepted)
//! <base64 proof hash>\n ...            409 <size the witness holds>\n         (old size wrong)
//! \n                                   422 <reason>\n     (proof fails: a fork / rewrite)
//! <checkpoint note>                    400 <reason>\n     (malformed request)
//!
//! latest <origin>\n                    the stored note with its signatures, or 404\n
//! list <origin prefix>\n               one stored origin per line (possibly none)
//! ```
//!
//! `old` is the size of the last checkpoint this writer had accepted for the origin (0 at
//! first); the proof is the RFC 9162 consistency proof from that size to the new one. The
//! witness accepts only if `old` equals what it holds and the proof verifies, so it never
//! moves backwards (rollback) or sideways (fork) — whoever submits.
//!
//! [`serve`] is a complete file-backed witness (`garuda audit witness-serve DIR`): one file per
//! origin in DIR (`<sha256(origin)>.note`, replaced atomically), a `lock` file serialising
//! requests, and an HMAC witness key `witness.key` created in DIR on first use. Its
//! cosignature is an HMAC, so only the witness itself can check one: the witness's value to
//! verify is its *state*, which `verify` reads with `latest`/`list` (or directly from DIR when
//! configured as [`WitnessConfig::Dir`]). The witness does not authenticate submitters: anyone
//! who can run it may push a *larger* tree for an origin, which verify then reports as
//! WITNESS_AHEAD — noise, never a hidden rewrite.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{canonical_u64, valid_origin, Checkpoint, Note};
use crate::error::AuditError;
use crate::fsx;
use crate::merkle::verify_consistency;
use crate::util::{hex, hmac, sha256, Hash};

/// Where checkpoints go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WitnessConfig {
    /// A program and its arguments, run once per request (e.g. `ssh witness-host garuda
    /// audit witness-serve /srv/witness`).
    Command(Vec<String>),
    /// A witness folder served in this process (tests, or a folder on a mount the user
    /// cannot write).
    Dir(PathBuf),
}

impl WitnessConfig {
    fn describe(&self) -> String {
        match self {
            WitnessConfig::Command(argv) => argv.join(" "),
            WitnessConfig::Dir(d) => d.display().to_string(),
        }
    }
}

/// How long a witness command may take to answer.
pub const WITNESS_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request the witness reads, and largest answer Garuda reads.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The key name on this witness's cosignature lines.
pub const WITNESS_KEY_NAME: &str = "garuda-witness";
const WITNESS_KEY_FILE: &str = "witness.key";
const LOCK_FILE: &str = "lock";
const NOTE_EXT: &str = "note";

/// A witness's answer to `add-checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Accepted; the cosignature line(s).
    Cosigned(Vec<String>),
    /// The witness holds another size for this origin.
    Conflict(u64),
    /// Refused for another reason (status line).
    Refused(String),
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The `add-checkpoint` request body.
pub fn add_request(old: u64, proof: &[Hash], note: &str) -> Vec<u8> {
    let mut req = format!("old {old}\n");
    for p in proof {
        req.push_str(&b64().encode(p));
        req.push('\n');
    }
    req.push('\n');
    req.push_str(note);
    req.into_bytes()
}

fn exchange(w: &WitnessConfig, request: &[u8]) -> Result<Vec<u8>, AuditError> {
    match w {
        WitnessConfig::Dir(dir) => {
            let mut out = Vec::new();
            serve(dir, request, &mut out)?;
            Ok(out)
        }
        WitnessConfig::Command(argv) => run_command(w, argv, request),
    }
}

fn run_command(w: &WitnessConfig, argv: &[String], request: &[u8]) -> Result<Vec<u8>, AuditError> {
    let err = |reason: String| AuditError::Witness {
        witness: w.describe(),
        reason,
    };
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| err("empty witness command".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("cannot start: {e}")))?;
    let mut stdin = child.stdin.take().ok_or_else(|| err("no stdin".into()))?;
    let mut stdout = child.stdout.take().ok_or_else(|| err("no stdout".into()))?;
    let req = request.to_vec();
    // Separate threads, so a witness that neither reads nor writes cannot block us past the
    // deadline.
    std::thread::spawn(move || {
        let _ = stdin.write_all(&req);
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = (&mut stdout)
            .take(MAX_MESSAGE_BYTES as u64 + 1)
            .read_to_end(&mut out);
        let _ = tx.send(r.map(|_| out));
    });
    let deadline = Instant::now() + WITNESS_TIMEOUT;
    let out = rx.recv_timeout(WITNESS_TIMEOUT);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = match out {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(err(format!("reading the answer: {e}"))),
        Err(_) => return Err(err("no answer in time".into())),
    };
    match status {
        Some(s) if s.success() => {}
        Some(s) => return Err(err(format!("exited with {s}"))),
        None => return Err(err("did not exit in time".into())),
    }
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(err("answer too large".into()));
    }
    Ok(out)
}

/// Sends a checkpoint. `Ok(Answer)` is whatever the witness said; `Err` means no usable answer.
pub(crate) fn add_checkpoint(
    w: &WitnessConfig,
    old: u64,
    proof: &[Hash],
    note: &str,
) -> Result<Answer, AuditError> {
    let out = exchange(w, &add_request(old, proof, note))?;
    let text = String::from_utf8(out).map_err(|_| AuditError::Witness {
        witness: w.describe(),
        reason: "answer is not UTF-8".into(),
    })?;
    if let Some(size) = text.strip_prefix("409 ") {
        let size = canonical_u64(size.trim_end()).ok_or_else(|| AuditError::Witness {
            witness: w.describe(),
            reason: format!("bad conflict answer {text:?}"),
        })?;
        return Ok(Answer::Conflict(size));
    }
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    if !lines.is_empty() && lines.iter().all(|l| l.starts_with("\u{2014} ")) {
        return Ok(Answer::Cosigned(lines));
    }
    Ok(Answer::Refused(text.trim_end().to_string()))
}

/// The witness's latest checkpoint note for `origin`, if it holds one.
pub fn latest(w: &WitnessConfig, origin: &str) -> Result<Option<String>, AuditError> {
    let out = exchange(w, format!("latest {origin}\n").as_bytes())?;
    let text = String::from_utf8(out).map_err(|_| AuditError::Witness {
        witness: w.describe(),
        reason: "answer is not UTF-8".into(),
    })?;
    if text.starts_with("404") {
        return Ok(None);
    }
    if text.starts_with("400") {
        return Err(AuditError::Witness {
            witness: w.describe(),
            reason: text.trim_end().to_string(),
        });
    }
    Ok(Some(text))
}

/// The origins the witness holds that start with `prefix`.
pub fn list(w: &WitnessConfig, prefix: &str) -> Result<Vec<String>, AuditError> {
    let out = exchange(w, format!("list {prefix}\n").as_bytes())?;
    let text = String::from_utf8(out).map_err(|_| AuditError::Witness {
        witness: w.describe(),
        reason: "answer is not UTF-8".into(),
    })?;
    if text.starts_with("400") {
        return Err(AuditError::Witness {
            witness: w.describe(),
            reason: text.trim_end().to_string(),
        });
    }
    Ok(text.lines().map(str::to_string).collect())
}

/// A parsed witness request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Add {
        old: u64,
        proof: Vec<Hash>,
        note: String,
    },
    Latest(String),
    List(String),
}

/// Parses a request body (also used by the fuzz target).
pub(crate) fn parse_request(data: &[u8]) -> Result<Request, String> {
    if data.len() > MAX_MESSAGE_BYTES {
        return Err("request too large".into());
    }
    let text = std::str::from_utf8(data).map_err(|_| "request is not UTF-8")?;
    let (first, rest) = text.split_once('\n').ok_or("no request line")?;
    if let Some(origin) = first.strip_prefix("latest ") {
        if !valid_origin(origin) || !rest.is_empty() {
            return Err("bad latest request".into());
        }
        return Ok(Request::Latest(origin.to_string()));
    }
    if first == "list" || first.starts_with("list ") {
        let prefix = first
            .strip_prefix("list")
            .unwrap_or("")
            .trim_start_matches(' ');
        if (!prefix.is_empty() && !valid_origin(prefix)) || !rest.is_empty() {
            return Err("bad list request".into());
        }
        return Ok(Request::List(prefix.to_string()));
    }
    let old = first
        .strip_prefix("old ")
        .and_then(canonical_u64)
        .ok_or("expected `old <size>`, `latest <origin>` or `list <prefix>`")?;
    let mut proof = Vec::new();
    let mut rest = rest;
    loop {
        let (line, tail) = rest
            .split_once('\n')
            .ok_or("no blank line before the note")?;
        rest = tail;
        if line.is_empty() {
            break;
        }
        if proof.len() >= 64 {
            return Err("proof too long".into());
        }
        let h: Hash = b64()
            .decode(line)
            .ok()
            .and_then(|v| v.try_into().ok())
            .ok_or("bad proof line")?;
        proof.push(h);
    }
    Ok(Request::Add {
        old,
        proof,
        note: rest.to_string(),
    })
}

fn note_path(dir: &Path, origin: &str) -> PathBuf {
    dir.join(format!("{}.{NOTE_EXT}", hex(&sha256(origin.as_bytes()))))
}

fn witness_key(dir: &Path, uid: u32) -> Result<[u8; 32], AuditError> {
    let path = dir.join(WITNESS_KEY_FILE);
    if let Some(data) = fsx::read_private(&path, uid)? {
        return data.try_into().map_err(|_| AuditError::BadKey {
            path,
            reason: "witness key is not 32 bytes".into(),
        });
    }
    let key = fsx::random_bytes::<32>()?;
    fsx::write_atomic(dir, WITNESS_KEY_FILE, &key, true, uid)?;
    Ok(key)
}

fn cosign(key: &[u8; 32], text: &str) -> String {
    let ts = crate::util::now_ms() / 1000;
    let msg = format!("cosignature/v1\ntime {ts}\n{text}");
    let id = hmac(key, &[b"garuda-witness-key-id-v1"]);
    let mut sig = id[..4].to_vec();
    sig.extend_from_slice(&ts.to_be_bytes());
    sig.extend_from_slice(&hmac(key, &[msg.as_bytes()]));
    format!("\u{2014} {WITNESS_KEY_NAME} {}\n", b64().encode(sig))
}

/// Reads the stored checkpoint for an origin straight from a witness folder.
pub(crate) fn stored(dir: &Path, origin: &str, uid: u32) -> Result<Option<String>, AuditError> {
    let path = note_path(dir, origin);
    match fsx::read_private(&path, uid)? {
        None => Ok(None),
        Some(data) => String::from_utf8(data)
            .map(Some)
            .map_err(|_| AuditError::Format {
                path,
                reason: "stored note is not UTF-8".into(),
            }),
    }
}

/// Serves one witness request from `input`, answering on `output`, with its state in `dir`.
///
/// `Err` only for a failure of the witness itself (its folder, key or lock); a bad request is
/// answered with a `400` line.
pub fn serve(dir: &Path, mut input: impl Read, mut output: impl Write) -> Result<(), AuditError> {
    let uid = fsx::current_uid()?;
    fsx::ensure_private_dir(dir, uid)?;
    let mut data = Vec::new();
    (&mut input)
        .take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| AuditError::io("-", e))?;
    let answer = match parse_request(&data) {
        Err(reason) => format!("400 {reason}\n"),
        Ok(req) => {
            let lock_path = dir.join(LOCK_FILE);
            let lock = fsx::open_append(&lock_path, uid)?;
            lock.lock().map_err(|e| AuditError::io(&lock_path, e))?;
            let answer = handle(dir, uid, req);
            let _ = lock.unlock();
            answer?
        }
    };
    output
        .write_all(answer.as_bytes())
        .and_then(|()| output.flush())
        .map_err(|e| AuditError::io("-", e))
}

fn handle(dir: &Path, uid: u32, req: Request) -> Result<String, AuditError> {
    match req {
        Request::Latest(origin) => Ok(stored(dir, &origin, uid)?.unwrap_or_else(|| "404\n".into())),
        Request::List(prefix) => {
            let mut origins = Vec::new();
            let entries = fs::read_dir(dir).map_err(|e| AuditError::io(dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| AuditError::io(dir, e))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if !name.ends_with(&format!(".{NOTE_EXT}")) {
                    continue;
                }
                let Some(data) = fsx::read_private(&entry.path(), uid)? else {
                    continue;
                };
                let text = String::from_utf8_lossy(&data);
                if let Some(origin) = text.lines().next() {
                    if origin.starts_with(&prefix) {
                        origins.push(origin.to_string());
                    }
                }
            }
            origins.sort();
            Ok(origins.iter().map(|o| format!("{o}\n")).collect())
        }
        Request::Add { old, proof, note } => add(dir, uid, old, &proof, &note),
    }
}

fn add(dir: &Path, uid: u32, old: u64, proof: &[Hash], note: &str) -> Result<String, AuditError> {
    let parsed = match Note::parse(note) {
        Ok(n) => n,
        Err(e) => return Ok(format!("400 {e}\n")),
    };
    let cp = match Checkpoint::parse_text(&parsed.text) {
        Ok(cp) => cp,
        Err(e) => return Ok(format!("400 {e}\n")),
    };
    let held = match stored(dir, &cp.origin, uid)? {
        None => None,
        Some(text) => {
            let path = note_path(dir, &cp.origin);
            let n = Note::parse(&text).map_err(|reason| AuditError::Format {
                path: path.clone(),
                reason,
            })?;
            Some(
                Checkpoint::parse_text(&n.text)
                    .map_err(|reason| AuditError::Format { path, reason })?,
            )
        }
    };
    let held_size = held.as_ref().map_or(0, |h| h.size);
    if old != held_size {
        return Ok(format!("409 {held_size}\n"));
    }
    if cp.size < old {
        return Ok("400 checkpoint smaller than the old size\n".into());
    }
    if let Some(h) = &held {
        if !verify_consistency(h.size, cp.size, &h.root, &cp.root, proof) {
            return Ok(format!(
                "422 not consistent with the held tree of size {}\n",
                h.size
            ));
        }
    } else if !proof.is_empty() {
        return Ok("400 a first checkpoint takes no proof\n".into());
    }
    let key = witness_key(dir, uid)?;
    let cosig = cosign(&key, &parsed.text);
    let mut stored_note = note.to_string();
    if !stored_note.ends_with('\n') {
        stored_note.push('\n');
    }
    stored_note.push_str(&cosig);
    let path = note_path(dir, &cp.origin);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    fsx::write_atomic(dir, &name, stored_note.as_bytes(), true, uid)?;
    Ok(cosig)
}

/// What a witness holds for an origin, parsed.
pub(crate) fn latest_checkpoint(
    w: &WitnessConfig,
    origin: &str,
) -> Result<Option<Checkpoint>, String> {
    let text = latest(w, origin).map_err(|e| e.to_string())?;
    let Some(text) = text else { return Ok(None) };
    let note = Note::parse(&text)?;
    let cp = Checkpoint::parse_text(&note.text)?;
    if cp.origin != origin {
        return Err(format!("asked for {origin}, got {}", cp.origin));
    }
    Ok(Some(cp))
}

pub(crate) fn describe(w: &WitnessConfig) -> String {
    w.describe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::InstallSecret;
    use crate::merkle::{leaf_hash, Tree};

    fn note(tree: &Tree, size: u64) -> String {
        let key = InstallSecret::from_bytes([2; 32])
            .session_key("p", "s")
            .checkpoint_key();
        Checkpoint {
            origin: "garuda.audit/p-0123456789abcdef/s".into(),
            size,
            root: tree.root_at(size),
            epoch: 0,
        }
        .sign(&key)
    }

    #[test]
    fn refuses_rollback_and_fork() {
        let dir = tempfile::tempdir().unwrap();
        let wdir = dir.path().join("w");
        let w = WitnessConfig::Dir(wdir.clone());
        let mut tree = Tree::new();
        for i in 0..20 {
            tree.push(leaf_hash(format!("{i}").as_bytes()));
        }
        let a = add_checkpoint(&w, 0, &[], &note(&tree, 5)).unwrap();
        assert!(matches!(a, Answer::Cosigned(_)), "{a:?}");
        // Wrong old size: conflict with the held size.
        assert_eq!(
            add_checkpoint(&w, 0, &[], &note(&tree, 9)).unwrap(),
            Answer::Conflict(5)
        );
        // Proper extension.
        let p = tree.consistency_proof(5, 9);
        assert!(matches!(
            add_checkpoint(&w, 5, &p, &note(&tree, 9)).unwrap(),
            Answer::Cosigned(_)
        ));
        // Rollback to a smaller tree.
        assert!(matches!(
            add_checkpoint(&w, 9, &[], &note(&tree, 7)).unwrap(),
            Answer::Refused(_)
        ));
        // Fork: another tree of a larger size.
        let mut other = Tree::new();
        for i in 0..20 {
            other.push(leaf_hash(format!("x{i}").as_bytes()));
        }
        let p = other.consistency_proof(9, 12);
        assert!(matches!(
            add_checkpoint(&w, 9, &p, &note(&other, 12)).unwrap(),
            Answer::Refused(r) if r.starts_with("422")
        ));
        // Same size, different root.
        assert!(matches!(
            add_checkpoint(&w, 9, &[], &note(&other, 9)).unwrap(),
            Answer::Refused(r) if r.starts_with("422")
        ));
        let cp = latest_checkpoint(&w, "garuda.audit/p-0123456789abcdef/s")
            .unwrap()
            .unwrap();
        assert_eq!(cp.size, 9);
        assert_eq!(
            list(&w, "garuda.audit/p-0123456789abcdef/").unwrap(),
            vec!["garuda.audit/p-0123456789abcdef/s".to_string()]
        );
        assert!(latest(&w, "garuda.audit/none").unwrap().is_none());
        let mut out = Vec::new();
        serve(&wdir, &b"hello\n"[..], &mut out).unwrap();
        assert!(out.starts_with(b"400 "));
    }
}
