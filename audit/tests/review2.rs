//! Regression tests for the second security review's findings (F1–F3; F4 is in
//! `src/redact.rs`'s unit tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::fs;
use std::path::Path;
use std::time::Duration;

use garuda_audit::{Code, InstallSecret, Outcome, VerifyOptions, VerifyTarget};
use util::*;

fn now_time() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%3NZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Appends a line under a made-up key id with a garbage MAC, chained to the file's last line
/// (the reviewer's forge.py). Returns the new line's hash (hex) and the line count.
fn forge(path: &Path, kind: &str, event: &str) -> (String, usize) {
    let lines = read_lines(path);
    let prev = lines.last().map_or("0".repeat(64), |l| hex(&sha256(l)));
    let line = format!(
        "{{\"v\":1,\"seq\":{},\"epoch\":0,\"time\":\"{}\",\"prev\":\"{prev}\",\"type\":\"{kind}\",\"event\":{event},\"mac\":\"{}\"}}",
        lines.len(),
        now_time(),
        "ab".repeat(32)
    );
    let mut all = lines;
    all.push(line.into_bytes());
    write_lines(path, &all);
    (hex(&sha256(all.last().unwrap())), all.len())
}

fn without(path: &Path, needle: &str) -> Vec<Vec<u8>> {
    read_lines(path)
        .into_iter()
        .filter(|l| !String::from_utf8_lossy(l).contains(needle))
        .collect()
}

/// W6: the newest session erased with every trace, then an index and a register line forged
/// under key id `deadbeef`: the next session must not take the forged times as its anchors,
/// and verify must not stay at "cannot tell".
#[test]
fn forged_lines_under_a_made_up_key_id_do_not_hide_an_erasure() {
    let env = Env::new();
    env.session(2, true);
    env.session(2, true);
    // (Journal layout: what the victim replaces — the lane's checkpoint and tail state, the
    // register's tail state — is kept to be put back, so that no trace of it is left.)
    let dir = env.dir();
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    let saved: Vec<(std::path::PathBuf, Vec<u8>)> = [
        dir.join("journal.ckpt"),
        dir.join("journal.tail"),
        register.with_extension("tail"),
    ]
    .into_iter()
    .map(|p| {
        let d = fs::read(&p).unwrap();
        (p, d)
    })
    .collect();
    let victim = env.session(2, true);
    std::thread::sleep(Duration::from_millis(2300));
    let id = session_id(&victim);
    let mut lines = read_lines(&victim);
    lines.truncate(segment(&victim, 2).start);
    write_lines(&victim, &lines);
    write_lines(&register, &without(&register, &id));
    for (p, d) in &saved {
        fs::write(p, d).unwrap();
    }

    // The forged lines: a session start in the journal, and a register record, under a made-up
    // key id with the current time.
    let fid = format!("{}-0123456789abcdef", &id[..16]);
    let (h, l) = forge(
        &victim,
        "session_start",
        &format!(
            "{{\"checkpoints\":true,\"info\":{{}},\"key_id\":\"deadbeef\",\"prev_session\":null,\"project\":\"{}\",\"recovered\":[],\"session\":\"{fid}\",\"witness\":false}}",
            env.dir_name()
        ),
    );
    forge(
        &register,
        "close",
        &format!(
            "{{\"bytes\":{},\"index_head\":\"{h}\",\"index_lines\":{l},\"key_id\":\"deadbeef\",\"lane\":0,\"project\":\"{}\",\"session\":\"{fid}\"}}",
            fs::metadata(&victim).unwrap().len(),
            env.dir_name()
        ),
    );
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&next)), Some(&next));
    // The writer took no time from the forged lines: what it found is the change after the
    // last write it could authenticate.
    assert!(
        r.findings
            .iter()
            .any(|f| f.code == Code::FoundAtStart && f.message.contains("CHANGED_AFTER_WRITE")),
        "{}",
        r.render_text()
    );
    // In the journal layout the forgery is a session start, which (like a forged session file
    // in the old layout) claims its key id for itself: it cannot be checked without that key
    // (KEY_UNKNOWN), so UNVERIFIED_BASE is not what reports the erasure here.
    assert_finding(&r, Code::KeyUnknown, None, Some(&victim));
}

/// W6 in the old layout: the forged index and register lines are UNVERIFIED_BASE.
#[test]
fn forged_lines_under_a_made_up_key_id_in_the_old_layout_are_unverified_base() {
    let mut env = Env::new();
    env.cfg.legacy_layout = true;
    env.session(2, true);
    env.session(2, true);
    let victim = env.session(2, true);
    std::thread::sleep(Duration::from_millis(2300));
    let id = session_id(&victim);
    fs::remove_file(&victim).unwrap();
    fs::remove_file(victim.with_extension("ckpt")).unwrap();
    let index = env.dir().join(garuda_audit::INDEX_FILE);
    write_lines(&index, &without(&index, &id));
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    write_lines(&register, &without(&register, &id));
    let fid = format!("{}-0123456789abcdef", &id[..16]);
    let (h, l) = forge(
        &index,
        "start",
        &format!("{{\"file\":\"{fid}.jsonl\",\"key_id\":\"deadbeef\",\"prev_session\":null,\"recovered\":[],\"session\":\"{fid}\"}}"),
    );
    forge(
        &register,
        "start",
        &format!(
            "{{\"index_head\":\"{h}\",\"index_lines\":{l},\"key_id\":\"deadbeef\",\"project\":\"{}\",\"session\":\"{fid}\"}}",
            env.dir_name()
        ),
    );
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(1), Some(&next));
    assert_finding(&r, Code::UnverifiedBase, Some(1), Some(&next));
}

/// The control: sessions under an exported (rotated) key are built on without a false alarm.
#[test]
fn sessions_under_an_exported_key_are_not_unverified_base() {
    let env = Env::new();
    env.session(2, true);
    let old = env.key();
    let out = env.tmp.path().join("old.key");
    garuda_audit::key_export(&env.cfg.keys_dir, &out, true).unwrap();
    env.session(2, true);
    let mut o = env.options();
    o.keys.push(InstallSecret::read_file(&out).unwrap());
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Verified);
    // Without the old key: cannot tell, never an error.
    let r = env.verify();
    assert_eq!(r.outcome(), Outcome::Undecidable, "{}", r.render_text());
    assert!(!r.findings.iter().any(|f| f.code == Code::UnverifiedBase));
    drop(old);
}

/// F1: the audit folder, the register and the key wiped: with the exported key given, verify
/// says its sessions are gone (KEY_UNUSED) instead of "fresh install".
#[test]
fn an_exported_key_no_session_uses_is_key_unused() {
    let env = Env::new();
    env.session(2, true);
    let out = env.tmp.path().join("old.key");
    garuda_audit::key_export(&env.cfg.keys_dir, &out, false).unwrap();
    fs::remove_dir_all(&env.cfg.audit_root).unwrap();
    fs::remove_file(env.cfg.audit_root.with_file_name("audit.register.jsonl")).unwrap();
    fs::remove_dir_all(&env.cfg.keys_dir).unwrap();
    env.session(1, true);
    let mut o = VerifyOptions::new(
        VerifyTarget::All(env.cfg.audit_root.clone()),
        vec![env.key(), InstallSecret::read_file(&out).unwrap()],
    );
    o.keys_dir = Some(env.cfg.keys_dir.clone());
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::KeyUnused, None, None);
    // The key on disk, with no session yet, is not an error.
    let fresh = Env::new();
    let _ = InstallSecret::load_or_create(&fresh.cfg.keys_dir).unwrap();
    fs::create_dir_all(&fresh.cfg.audit_root).unwrap();
    let mut o = VerifyOptions::new(
        VerifyTarget::All(fresh.cfg.audit_root.clone()),
        vec![fresh.key()],
    );
    o.keys_dir = Some(fresh.cfg.keys_dir.clone());
    let r = garuda_audit::verify(&o);
    assert!(
        !r.findings.iter().any(|f| f.code == Code::KeyUnused),
        "{}",
        r.render_text()
    );
}

/// W9: a new project's first session killed after its index line, before its register line.
/// The project folder's creation (which moves the audit root's ctime) is recorded in the
/// register first, so the next session elsewhere finds nothing wrong.
#[test]
fn a_crash_in_a_new_projects_first_session_is_no_false_alarm() {
    let env = Env::new();
    env.session(1, true);
    std::thread::sleep(Duration::from_millis(2300));
    let p2 = env.tmp.path().join("p2");
    fs::create_dir(&p2).unwrap();
    let mut cfg2 = env.cfg.clone();
    cfg2.project_root = p2;
    // The crash, reproduced (journal layout): the writer dies after its first line, before its
    // close; its project's creation was recorded (and synced) before the folder was made.
    let w = garuda_audit::SessionWriter::open(&cfg2, serde_json::json!({})).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    assert_eq!(read_lines(&path).len(), 1);
    std::thread::sleep(Duration::from_millis(2300));
    env.session(1, true);
    let mut o = VerifyOptions::new(
        VerifyTarget::All(env.cfg.audit_root.clone()),
        vec![env.key()],
    );
    o.keys_dir = Some(env.cfg.keys_dir.clone());
    let r = garuda_audit::verify(&o);
    assert!(
        !r.findings
            .iter()
            .any(|f| f.code == Code::FoundAtStart || f.code == Code::ChangedAfterWrite),
        "{}",
        r.render_text()
    );
    assert_ne!(r.outcome(), Outcome::Tampered, "{}", r.render_text());
}

/// The "creating project" record does not turn a deleted project folder into a fresh one.
#[test]
fn a_deleted_project_folder_is_still_found_by_its_next_session() {
    let env = Env::new();
    env.session(1, true);
    std::thread::sleep(Duration::from_millis(2300));
    fs::remove_dir_all(env.dir()).unwrap();
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(1), Some(&next));
}
