//! The tamper suite: real sessions written by `SessionWriter` into temporary folders, then
//! altered the way an attacker would, then verified. Each case names the code and the line it
//! expects. Negative controls show the attack working where the control is missing (the seed
//! design's plain hash chain, a log without checkpoints or witness).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use garuda_audit::{Code, Outcome, SessionWriter, Severity};
use serde_json::json;
use util::*;

/// 1-based number of the first line containing `needle`.
fn line_with(lines: &[Vec<u8>], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| String::from_utf8_lossy(l).contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle}"))
        + 1
}

fn kinds(lines: &[Vec<u8>]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let s = String::from_utf8_lossy(l);
            let i = s.find("\"type\":\"").unwrap() + 8;
            let j = s[i..].find('"').unwrap();
            s[i..i + j].to_string()
        })
        .collect()
}

#[test]
fn clean_sessions_verify() {
    let env = Env::new().with_witness();
    env.session(10, true);
    let path = env.session(3, true);
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    assert_eq!(r.sessions.len(), 2);
    assert!(r.sessions.iter().all(|s| s.closed && s.complete));
    assert!(r.coverage.commands_and_agent && r.coverage.anyone);
    // The secret is on disk: processes with the user's rights are not covered.
    assert!(!r.coverage.same_user_processes);
    // Layout: start, seals every 4 lines, end, final seal.
    let k = kinds(&read_lines(&path));
    assert_eq!(k.first().unwrap(), "session_start");
    assert_eq!(&k[k.len() - 2..], ["session_end", "seal"]);
    assert_eq!(k[4], "seal");
    let json = r.to_json();
    assert_eq!(json["outcome"], "verified");
    assert_eq!(json["exit_code"], 0);
}

#[test]
fn a_flipped_byte_is_bad_mac() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    lines[n - 1] = replace(&lines[n - 1], "cmd-4", "cmd-X");
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(n as u64), Some(&path));
}

#[test]
fn an_edit_with_the_plain_chain_recomputed_is_still_bad_mac() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    lines[n - 1] = replace(&lines[n - 1], "cmd-4", "rm -rf ~");
    // Fix up every later prev, as the seed design's verifier checks them.
    assert!(!plain_chain_ok(&lines));
    for i in n..lines.len() {
        let h = sha256(&lines[i - 1]);
        lines[i] = set_prev(&lines[i], &h);
    }
    // Negative control: the plain SHA-256 chain (seed T8) accepts the rewritten log.
    assert!(plain_chain_ok(&lines));
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(n as u64), Some(&path));
}

#[test]
fn a_deleted_line_is_a_seq_gap_and_prev_mismatch() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    lines.remove(n - 1);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::SeqGap, Some(n as u64), Some(&path));
    assert_finding(&r, Code::PrevMismatch, Some(n as u64), Some(&path));
}

#[test]
fn swapped_lines_are_seq_gap_then_seq_dup() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    lines.swap(n - 1, n);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::SeqGap, Some(n as u64), Some(&path));
    assert_finding(&r, Code::SeqDup, Some(n as u64 + 1), Some(&path));
}

#[test]
fn a_duplicated_line_is_seq_dup() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    let copy = lines[n - 1].clone();
    lines.insert(n, copy);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::SeqDup, Some(n as u64 + 1), Some(&path));
    assert_finding(&r, Code::PrevMismatch, Some(n as u64 + 1), Some(&path));
}

#[test]
fn truncation_below_the_checkpoint_is_detected() {
    let env = Env::new();
    let path = env.session(10, true);
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 15);
    // Cut back to a seal boundary (line 10): the chain alone looks fine.
    write_lines(&path, &lines[..10]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(11), Some(&path));

    // Cut in the middle of a line: the torn tail is a warning, the cut is not.
    let mut data = fs::read(&path).unwrap();
    data.truncate(data.len() - 40);
    fs::write(&path, &data).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::TornTail, Some(10), Some(&path));
    assert_finding(&r, Code::Truncated, Some(10), Some(&path));
}

#[test]
fn cutting_the_tail_after_the_last_epoch_seal() {
    // With checkpoints: the checkpoint written at close names every line.
    let env = Env::new();
    let path = env.session(10, true);
    let lines = read_lines(&path);
    let ckpt = path.with_extension("ckpt");
    let note = fs::read_to_string(&ckpt).unwrap();
    assert!(note.contains("\n15\n"), "{note}");
    // Lines 11-15: three events, session_end and the final seal, after the seal at 10.
    write_lines(&path, &lines[..12]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(13), Some(&path));

    // With a witness and no checkpoint file: the witness holds the final tree.
    let env = Env::new().without_checkpoints().with_witness();
    let path = env.session(10, true);
    assert!(!path.with_extension("ckpt").exists());
    let lines = read_lines(&path);
    write_lines(&path, &lines[..12]);
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::WitnessAhead, Some(13), Some(&path));
}

#[test]
fn an_unclosed_session_cut_within_its_checkpoint() {
    // The writer dies (dropped without close); its last checkpoint is at the seal of line 10.
    let env = Env::new();
    let path = env.session(10, false);
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 13);
    // Unclosed and nothing records its end: undecidable, not verified.
    assert_outcome(&env.verify(), Outcome::Undecidable);
    // Cutting lines after the checkpoint cannot be told from the crash.
    write_lines(&path, &lines[..11]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(&r, Code::OpenSession, Some(12), Some(&path));
    // Cutting into the checkpointed part can.
    write_lines(&path, &lines[..8]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(9), Some(&path));
}

#[test]
fn negative_control_a_tail_cut_without_checkpoints_or_witness_is_undecidable() {
    let env = Env::new().without_checkpoints();
    let path = env.session(10, false);
    let lines = read_lines(&path);
    write_lines(&path, &lines[..lines.len() - 3]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(
        &r,
        Code::OpenSession,
        Some(lines.len() as u64 - 2),
        Some(&path),
    );
    // The same cut of a closed session is caught by the index's close entry.
    let env = Env::new().without_checkpoints();
    let path = env.session(10, true);
    let lines = read_lines(&path);
    write_lines(&path, &lines[..lines.len() - 3]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(
        &r,
        Code::Truncated,
        Some(lines.len() as u64 - 2),
        Some(&path),
    );
}

#[test]
fn a_torn_last_line_is_a_warning() {
    let env = Env::new();
    let path = env.session(6, false);
    // A crash in the middle of writing the next line.
    let lines = read_lines(&path);
    let mut data = fs::read(&path).unwrap();
    data.extend_from_slice(&lines[lines.len() - 1][..50]);
    fs::write(&path, &data).unwrap();
    // Before the next session: a warning and "cannot tell" (the session is not closed), never
    // an error.
    let r = env.verify();
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(
        &r,
        Code::TornTail,
        Some(lines.len() as u64 + 1),
        Some(&path),
    );
    assert!(r.findings.iter().all(|f| f.severity != Severity::Error));
    // The next session (journal layout: it cuts the torn bytes before it appends, and records
    // the crashed session's complete lines as found) leaves everything verified.
    env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.iter().all(|f| f.severity == Severity::Warning));
}

#[test]
fn a_torn_middle_line_is_an_error() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    let half = lines[n - 1].len() / 2;
    lines[n - 1].truncate(half);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Malformed, Some(n as u64), Some(&path));
}

#[test]
fn a_deleted_middle_session_is_file_missing() {
    let env = Env::new().without_checkpoints();
    env.session(3, true);
    let middle = env.session(3, true);
    env.session(3, true);
    // Journal layout: the middle session's lines cut out of the journal.
    let mut lines = read_lines(&middle);
    lines.drain(segment(&middle, 1));
    write_lines(&middle, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&middle));
}

#[test]
fn a_deleted_newest_session() {
    let env = Env::new().with_witness();
    env.session(3, true);
    let saved = save(&env);
    let newest = env.session(3, true);
    let journal = read_lines(&newest);
    let cut = segment(&newest, 1).start;
    std::thread::sleep(Duration::from_millis(60));
    // Journal layout: the newest session's lines cut from the journal's end.
    write_lines(&newest, &journal[..cut]);

    // The lane's tail state, its checkpoint and the register still record it: tampering, the
    // journal named.
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(cut as u64 + 1), Some(&newest));

    // The tail state and the checkpoint put back as they were before it: the register
    // (outside the project's folder) still records the journal's length after the session.
    for (p, data) in saved.files.iter().take(2) {
        fs::write(p, data).unwrap();
    }
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(cut as u64 + 1), Some(&newest));

    // ... and with every trace gone (its register line cut, the register's tail state put
    // back), the ctimes still tell (root could hide it).
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    let reg_lines = read_lines(&register);
    // The first session's "creating project" line, then a close per session.
    assert_eq!(reg_lines.len(), 3);
    write_lines(&register, &reg_lines[..2]);
    fs::write(&saved.files[2].0, &saved.files[2].1).unwrap();
    let mut o = env.options();
    o.ctime_slack = Duration::from_millis(20);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(&r, Code::ChangedAfterWrite, None, Some(&newest));
    // Negative control: without the ctime check (a huge slack) nothing local is left.
    o.ctime_slack = Duration::from_secs(86_400);
    assert_outcome(&garuda_audit::verify(&o), Outcome::Verified);

    // The witness saw it.
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::WitnessAhead, None, Some(&newest));
}

#[test]
fn resealing_an_old_epoch_with_a_later_key_is_bad_mac() {
    // CVE-2023-31439: an attacker holding the key of epoch 2 rewrites epoch 0 and re-seals it.
    let env = Env::new();
    let path = env.session(10, true);
    let id = session_id(&path);
    let k2 = env.key().session_key(&env.dir_name(), &id).at(2);
    let lines = read_lines(&path);
    let n = line_with(&lines, "cmd-1"); // epoch 0
    assert!(String::from_utf8_lossy(&lines[n - 1]).contains("\"epoch\":0"));

    // Keep the claimed epoch 0, MAC with the later key (lines n..=5, the seal included).
    let mut forged = lines.clone();
    forged[n - 1] = remac(&replace(&lines[n - 1], "cmd-1", "cmd-Z"), &k2);
    for i in n..5 {
        let h = sha256(&forged[i - 1]);
        forged[i] = remac(&set_prev(&forged[i], &h), &k2);
    }
    write_lines(&path, &forged);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(n as u64), Some(&path));
    assert_finding(&r, Code::BadMac, Some(5), Some(&path));

    // Claim epoch 2 instead: the MAC is then right for that epoch, but the line sits before
    // the seals of epochs 0 and 1.
    let mut forged = lines.clone();
    let edited = replace(&lines[n - 1], "cmd-1", "cmd-Z");
    forged[n - 1] = remac(&replace(&edited, "\"epoch\":0", "\"epoch\":2"), &k2);
    write_lines(&path, &forged);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::EpochGap, Some(n as u64), Some(&path));
}

#[test]
fn a_dropped_epoch_is_an_epoch_gap() {
    let env = Env::new();
    let path = env.session(10, true);
    let mut lines = read_lines(&path);
    // Epoch 1 is lines 6..=10 (its seal included).
    assert_eq!(kinds(&lines)[9], "seal");
    lines.drain(5..10);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::EpochGap, Some(6), Some(&path));
    assert_finding(&r, Code::SeqGap, Some(6), Some(&path));
}

#[test]
fn truncate_and_continue_with_the_current_key_is_an_epoch_gap() {
    // CVE-2023-31438: holding the current key (epoch 2), cut back into epoch 1 and append
    // lines that chain correctly.
    let env = Env::new();
    let path = env.session(10, false);
    let id = session_id(&path);
    let k2 = env.key().session_key(&env.dir_name(), &id).at(2);
    let lines = read_lines(&path);
    let mut forged: Vec<Vec<u8>> = lines[..7].to_vec(); // epoch 1, before its seal
    let template = &lines[11]; // an epoch-2 line
    let mut prev = sha256(&forged[6]);
    for seq in 7..9 {
        let l = replace(template, "\"seq\":11", &format!("\"seq\":{seq}"));
        let l = remac(&set_prev(&l, &prev), &k2);
        prev = sha256(&l);
        forged.push(l);
    }
    write_lines(&path, &forged);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::EpochGap, Some(8), Some(&path));

    // Claiming epoch 1 for them needs epoch 1's key, which is gone.
    let mut forged: Vec<Vec<u8>> = lines[..7].to_vec();
    let l = replace(template, "\"seq\":11", "\"seq\":7");
    let l = replace(&l, "\"epoch\":2", "\"epoch\":1");
    forged.push(remac(&set_prev(&l, &sha256(&forged[6])), &k2));
    write_lines(&path, &forged);
    let r = env.verify();
    assert_finding(&r, Code::BadMac, Some(8), Some(&path));
}

#[test]
fn a_line_copied_from_another_session_is_bad_mac() {
    let env = Env::new();
    let a = env.session(10, true);
    let b = env.session(10, true);
    // Journal layout: both sessions are in one file; copy session a's line into session b at
    // the same place.
    assert_eq!(a, b);
    let la = session_lines(&a, 0);
    let n = line_with(&la, "cmd-4");
    let mut all = read_lines(&b);
    let at = segment(&b, 1).start + n - 1;
    all[at] = la[n - 1].clone();
    write_lines(&b, &all);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(at as u64 + 1), Some(&b));
}

#[test]
fn forged_inflated_or_stale_checkpoints_are_ckpt_bad() {
    let env = Env::new();
    let mut w = SessionWriter::open(&env.cfg, json!({})).unwrap();
    for i in 0..5 {
        w.append("x", json!({ "i": i })).unwrap();
    }
    let ckpt = w.path().with_extension("ckpt");
    let stale = fs::read_to_string(&ckpt).unwrap();
    for i in 0..10 {
        w.append("x", json!({ "i": i })).unwrap();
    }
    let path = w.path().to_path_buf();
    w.close(json!({})).unwrap();
    let good = fs::read_to_string(&ckpt).unwrap();
    let size: u64 = good.lines().nth(1).unwrap().parse().unwrap();

    // Inflated: a bigger size under the old signature.
    fs::write(
        &ckpt,
        good.replacen(&format!("\n{size}\n"), &format!("\n{}\n", size + 5), 1),
    )
    .unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::CkptBad, None, Some(&ckpt));

    // Forged: a signature made up without the key.
    let sig_at = good.find("\u{2014} garuda-audit ").unwrap();
    let forged = format!(
        "{}\u{2014} garuda-audit AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
        &good[..sig_at]
    );
    fs::write(&ckpt, forged).unwrap();
    assert_finding(&env.verify(), Code::CkptBad, None, Some(&ckpt));

    // Stale: a valid older checkpoint put back (rollback of the evidence).
    fs::write(&ckpt, &stale).unwrap();
    assert_finding(&env.verify(), Code::CkptBad, None, Some(&ckpt));

    // Gone while the log continued after a seal: missing evidence.
    fs::remove_file(&ckpt).unwrap();
    let r = env.verify();
    assert_finding(&r, Code::FileMissing, None, Some(&ckpt));
    assert!(path.exists());
}

#[test]
fn a_reserialised_line_is_bad_mac_and_duplicate_keys_are_malformed() {
    let env = Env::new();
    let path = env.session(10, true);
    let lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");

    // Same meaning, other bytes: sorted keys (serde_json's default map order).
    let v: serde_json::Value = serde_json::from_slice(&lines[n - 1]).unwrap();
    let mut edited = lines.clone();
    edited[n - 1] = serde_json::to_vec(&v).unwrap();
    assert_ne!(edited[n - 1], lines[n - 1]);
    write_lines(&path, &edited);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(n as u64), Some(&path));

    // Same order, a space after every colon.
    let mut edited = lines.clone();
    edited[n - 1] = String::from_utf8_lossy(&lines[n - 1])
        .replace("\":", "\": ")
        .into_bytes();
    write_lines(&path, &edited);
    assert_finding(&env.verify(), Code::BadMac, Some(n as u64), Some(&path));

    // A second "cmd" inside the event: two readings of one line.
    let mut edited = lines.clone();
    edited[n - 1] = replace(&lines[n - 1], "{\"cmd\":", "{\"cmd\":\"ls\",\"cmd\":");
    write_lines(&path, &edited);
    let r = env.verify();
    assert_finding(&r, Code::Malformed, Some(n as u64), Some(&path));
    assert!(!r
        .findings
        .iter()
        .any(|f| f.code == Code::BadMac && f.line == Some(n as u64)));
}

#[test]
fn links_and_loose_modes_are_unsafe_mode() {
    let env = Env::new();
    let path = env.session(3, true);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::UnsafeMode, None, Some(&path));
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    assert_outcome(&env.verify(), Outcome::Verified);

    // The log replaced by a link to a copy elsewhere: not followed.
    let elsewhere = env.tmp.path().join("moved.jsonl");
    fs::rename(&path, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::UnsafeMode, None, Some(&path));

    // A loose folder.
    fs::set_permissions(env.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    assert_finding(&env.verify(), Code::UnsafeMode, None, Some(&env.dir()));
    fs::set_permissions(env.dir(), fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn the_writer_refuses_a_planted_link() {
    let env = Env::new();
    env.session(1, true);
    // A link where the project's journal should be: the writer must not follow it.
    let index = env.dir().join(garuda_audit::journal::journal_file_name(0));
    let target = env.tmp.path().join("victim");
    fs::write(&target, b"").unwrap();
    fs::remove_file(&index).unwrap();
    std::os::unix::fs::symlink(&target, &index).unwrap();
    let err = SessionWriter::open(&env.cfg, json!({})).unwrap_err();
    assert!(
        matches!(err, garuda_audit::AuditError::Symlink { .. }),
        "{err}"
    );
    assert_eq!(fs::read(&target).unwrap(), b"");
}

#[test]
fn an_exported_key_moves_same_user_processes_into_coverage() {
    let env = Env::new().with_witness();
    env.session(3, true);
    let old_key = env.key();
    let mut o = env.options_with_witness();
    let out = env.tmp.path().join("exported.key");
    garuda_audit::key_export(&env.cfg.keys_dir, &out, true).unwrap();
    // Without the exported key, the session cannot be judged.
    o.keys = Vec::new();
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(&r, Code::KeyUnknown, None, None);
    // With it, verified, the secret is no longer on disk and a witness holds the newest
    // state: processes with the user's rights are covered.
    o.keys = vec![garuda_audit::InstallSecret::read_file(&out).unwrap()];
    assert_eq!(o.keys[0].key_id(), old_key.key_id());
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Verified);
    assert!(r.coverage.same_user_processes, "{}", r.render_text());
    assert!(r.coverage.anyone);
}

#[test]
fn without_a_witness_same_user_processes_are_not_covered_even_with_the_key_exported() {
    let env = Env::new();
    env.session(3, true);
    let out = env.tmp.path().join("exported.key");
    let mut o = env.options();
    garuda_audit::key_export(&env.cfg.keys_dir, &out, true).unwrap();
    o.keys = vec![garuda_audit::InstallSecret::read_file(&out).unwrap()];
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Verified);
    // They can still erase the newest sessions with every local trace but ctimes.
    assert!(!r.coverage.same_user_processes, "{}", r.render_text());
}

#[test]
fn a_leftover_temp_copy_of_the_secret_counts_as_on_disk() {
    let env = Env::new().with_witness();
    env.session(3, true);
    let out = env.tmp.path().join("exported.key");
    let mut o = env.options_with_witness();
    // A crash between hard_link and remove_file left a second name for the secret.
    let tmp = env.cfg.keys_dir.join(".install.key.0123456789abcdef.tmp");
    fs::hard_link(env.cfg.keys_dir.join("install.key"), &tmp).unwrap();
    garuda_audit::key_export(&env.cfg.keys_dir, &out, false).unwrap();
    fs::remove_file(env.cfg.keys_dir.join("install.key")).unwrap();
    if !tmp.exists() {
        fs::write(&tmp, fs::read(&out).unwrap()).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).unwrap();
    }
    o.keys = vec![garuda_audit::InstallSecret::read_file(&out).unwrap()];
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Verified);
    assert!(!r.coverage.same_user_processes, "{}", r.render_text());
}

#[test]
fn redaction_happens_before_the_mac() {
    let env = Env::new();
    let mut w = SessionWriter::open(&env.cfg, json!({})).unwrap();
    let fake = "sk-ant-api03-Xy7Kq2LmN9pR4sT6vW8zA1bC3dE5fG7hJ9kL";
    w.append(
        "command_intent",
        json!({"cmd": format!("ANTHROPIC_API_KEY={fake} claude")}),
    )
    .unwrap();
    let path = w.path().to_path_buf();
    w.close(json!({})).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(!text.contains("Xy7Kq2LmN9pR4sT6"));
    assert!(text.contains("[REDACTED:"));
    assert_outcome(&env.verify(), Outcome::Verified);
    let shown = garuda_audit::show(&env.dir(), &session_id(&path), &[env.key()]).unwrap();
    assert!(shown.stopped.is_none());
    assert_eq!(shown.lines[1].kind, "command_intent");
}

#[test]
fn show_stops_at_the_first_line_that_does_not_verify() {
    let env = Env::new();
    let path = env.session(10, true);
    let id = session_id(&path);
    let all = garuda_audit::show(&env.dir(), &id, &[env.key()]).unwrap();
    assert_eq!(all.lines.len(), 15);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-4");
    lines[n - 1] = replace(&lines[n - 1], "cmd-4", "cmd-X");
    write_lines(&path, &lines);
    let shown = garuda_audit::show(&env.dir(), &id, &[env.key()]).unwrap();
    assert_eq!(shown.lines.len(), n - 1);
    assert_eq!(shown.stopped.unwrap().code, Code::BadMac);
    assert_eq!(garuda_audit::list_sessions(&env.dir()).unwrap(), vec![id]);
}

#[test]
fn time_based_epochs_seal_empty_epochs_and_the_writer_fails_closed() {
    let mut env = Env::new();
    env.cfg.epoch_max_lines = 1000;
    env.cfg.epoch_max_age = Duration::from_millis(30);
    let mut w = SessionWriter::open(&env.cfg, json!({})).unwrap();
    w.append("x", json!({})).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    w.append("x", json!({})).unwrap();
    // At least three epochs elapsed: three seals, empty ones included.
    assert!(w.epoch() >= 3, "epoch {}", w.epoch());
    let path = w.path().to_path_buf();
    // An invalid kind poisons the writer: nothing more is written.
    assert!(w.append("session_end", json!({})).is_err());
    assert!(matches!(
        w.append("x", json!({})),
        Err(garuda_audit::AuditError::Poisoned { .. })
    ));
    drop(w);
    let seals = kinds(&read_lines(&path))
        .iter()
        .filter(|k| *k == "seal")
        .count();
    assert!(seals >= 3, "{seals} seals");
    // The next session recovers it; everything verifies.
    env.session(1, true);
    assert_outcome(&env.verify(), Outcome::Verified);
}

#[test]
fn a_running_writer_can_vouch_for_its_head() {
    let env = Env::new();
    env.session(2, true);
    let mut w = SessionWriter::open(&env.cfg, json!({})).unwrap();
    w.append("x", json!({})).unwrap();
    // Locked by a live writer: its end is unknown.
    let r = env.verify();
    assert_outcome(&r, Outcome::Undecidable);
    // (Journal layout: line numbers are the journal's; the live session starts at `base + 1`.)
    let base = start_line(w.path()) - 1;
    assert_finding(&r, Code::OpenSession, Some(base + 3), Some(w.path()));
    let mut o = env.options();
    o.trusted_heads = vec![w.head()];
    assert_outcome(&garuda_audit::verify(&o), Outcome::Verified);
    // A cut behind the writer's back contradicts its head.
    let lines = read_lines(w.path());
    write_lines(w.path(), &lines[..base as usize + 1]);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(base + 2), Some(w.path()));
}

#[test]
fn a_large_session_is_checked_the_same_way() {
    // Above 8192 lines the position-independent checks run on several threads; the findings
    // must not change.
    let mut env = Env::new();
    env.cfg.epoch_max_lines = 256;
    let path = env.session(9000, true);
    assert_outcome(&env.verify(), Outcome::Verified);
    let mut lines = read_lines(&path);
    let n = line_with(&lines, "cmd-7000");
    lines[n - 1] = replace(&lines[n - 1], "cmd-7000", "cmd-7001");
    // Drop the second epoch (lines 258..=514, its seal included).
    assert_eq!(kinds(&lines)[513], "seal");
    lines.drain(257..514);
    write_lines(&path, &lines);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::EpochGap, Some(258), Some(&path));
    assert_finding(&r, Code::BadMac, Some(n as u64 - 257), Some(&path));
}

#[test]
fn index_tampering_is_found() {
    // The old layout (an index and a file per session) still verifies, and its index is still
    // checked: this is a log written before the journal layout.
    let mut env = Env::new();
    env.cfg.legacy_layout = true;
    env.session(2, true);
    env.session(2, true);
    env.session(2, true);
    let index = env.dir().join(garuda_audit::INDEX_FILE);
    let lines = read_lines(&index);
    assert_eq!(lines.len(), 6);
    // A middle entry removed: the chain breaks there.
    let mut cut = lines.clone();
    cut.remove(2);
    write_lines(&index, &cut);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::PrevMismatch, Some(3), Some(&index));
    assert_finding(&r, Code::SeqGap, Some(3), Some(&index));
    // An entry edited: its MAC fails.
    let mut edited = lines.clone();
    edited[3] = replace(&edited[3], "\"lines\":", "\"lines\":1");
    write_lines(&index, &edited);
    assert_finding(&env.verify(), Code::BadMac, Some(4), Some(&index));
    // The index gone while sessions remain.
    fs::remove_file(&index).unwrap();
    assert_finding(&env.verify(), Code::FileMissing, None, Some(&index));
}

// ---- Review findings F1, F2, F5: erasing history, swapping projects, bytes after the end.

/// The lines of `path` without those containing `needle` (what `grep -v` leaves).
fn without(path: &std::path::Path, needle: &str) -> Vec<Vec<u8>> {
    read_lines(path)
        .into_iter()
        .filter(|l| !String::from_utf8_lossy(l).contains(needle))
        .collect()
}

/// Copies of the files that a session replaces (the lane's checkpoint and tail state, the
/// register's tail state), taken before it runs: an attacker who means to erase it keeps them,
/// to put back what the files said before it.
struct Saved {
    files: Vec<(std::path::PathBuf, Vec<u8>)>,
}

fn save(env: &Env) -> Saved {
    let dir = env.dir();
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    let files = [
        dir.join("journal.ckpt"),
        dir.join("journal.tail"),
        register.with_extension("tail"),
    ]
    .into_iter()
    .map(|p| {
        let data = fs::read(&p).unwrap();
        (p, data)
    })
    .collect();
    Saved { files }
}

/// Removes the newest session with every trace in the project folder (journal layout: its
/// lines cut from the end of the journal, the lane's checkpoint and tail state put back as they
/// were before it), and with `register_too` its register lines (and the register's tail state
/// put back).
fn erase_session(env: &Env, victim: &std::path::Path, register_too: bool, saved: &Saved) {
    let id = session_id(victim);
    let n = session_ids(victim).len();
    let mut lines = read_lines(victim);
    lines.truncate(segment(victim, n - 1).start);
    write_lines(victim, &lines);
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    for (p, data) in &saved.files {
        if register_too || !p.starts_with(register.parent().unwrap()) || p.starts_with(env.dir()) {
            fs::write(p, data).unwrap();
        }
    }
    if register_too {
        write_lines(&register, &without(&register, &id));
    }
}

#[test]
fn the_newest_session_erased_with_its_index_entries_stays_detected_after_the_next_run() {
    let env = Env::new();
    env.session(3, true);
    let saved = save(&env);
    let victim = env.session(3, true);
    erase_session(&env, &victim, false, &saved);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    // An ordinary next run used to read the shortened index and make everything look fine.
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&next)), Some(&next));
}

#[test]
fn erasing_every_trace_including_the_register_is_recorded_by_the_next_session() {
    let env = Env::new();
    env.session(3, true);
    let saved = save(&env);
    let victim = env.session(3, true);
    // Past the ctime slack of the writer (2 s).
    std::thread::sleep(Duration::from_millis(2300));
    erase_session(&env, &victim, true, &saved);
    let r = env.verify();
    assert_eq!(r.outcome(), Outcome::Undecidable, "{}", r.render_text());
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&next)), Some(&next));
    assert!(
        r.render_text().contains("CHANGED_AFTER_WRITE"),
        "{}",
        r.render_text()
    );
}

#[test]
fn a_lock_on_a_closed_session_does_not_turn_off_the_ctime_checks() {
    let env = Env::new();
    let old = env.session(3, true);
    let saved = save(&env);
    let victim = env.session(3, true);
    std::thread::sleep(Duration::from_millis(60));
    erase_session(&env, &victim, true, &saved);
    // Journal layout: the lock a running writer holds is on the journal.
    let holder = fs::File::open(&old).unwrap();
    holder.lock().unwrap();
    let mut o = env.options();
    o.ctime_slack = Duration::from_millis(20);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Undecidable);
    // (Journal layout: the cut moved the journal's ctime; the files put back in place did not
    // touch the folder's.)
    assert_finding(&r, Code::ChangedAfterWrite, None, Some(&old));
    assert!(
        !r.findings.iter().any(|f| f.code == Code::OpenSession),
        "{}",
        r.render_text()
    );
    holder.unlock().unwrap();
}

/// A second project of the same Garuda home.
fn other_project(env: &Env, name: &str) -> garuda_audit::AuditConfig {
    let p = env.tmp.path().join(name);
    fs::create_dir(&p).unwrap();
    let mut cfg = env.cfg.clone();
    cfg.project_root = p;
    cfg
}

fn run(cfg: &garuda_audit::AuditConfig) {
    let mut w = SessionWriter::open(cfg, json!({})).unwrap();
    w.append("command_intent", json!({"cmd": "x"})).unwrap();
    w.close(json!({})).unwrap();
}

#[test]
fn a_deleted_project_folder_is_file_missing() {
    let env = Env::new();
    env.session(2, true);
    let b = other_project(&env, "b");
    run(&b);
    fs::remove_dir_all(env.dir()).unwrap();
    let mut all = env.options();
    all.target = garuda_audit::VerifyTarget::All(env.cfg.audit_root.clone());
    all.ctime_slack = Duration::from_secs(86_400);
    let r = garuda_audit::verify(&all);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&env.dir()));
    let mut o = env.options();
    o.ctime_slack = Duration::from_secs(86_400);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&env.dir()));
    // The next run in the project records that its folder was gone.
    let next = env.session(1, true);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&next)), Some(&next));
}

#[test]
fn a_restored_copy_of_the_audit_folder_is_not_verified() {
    let env = Env::new();
    env.session(2, true);
    let root = env.cfg.audit_root.clone();
    let snap = root.with_extension("snap");
    fs::rename(&root, &snap).unwrap();
    env.session(2, true); // the run to hide, recorded in a fresh folder
    std::thread::sleep(Duration::from_millis(2300));
    fs::remove_dir_all(&root).unwrap();
    fs::rename(&snap, &root).unwrap();
    let r = env.verify();
    assert_ne!(r.outcome(), Outcome::Verified, "{}", r.render_text());
    assert_finding(&r, Code::ChangedAfterWrite, None, Some(&root));
    let next = env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&next)), Some(&next));
}

#[test]
fn a_project_given_another_projects_history_does_not_verify() {
    let env = Env::new();
    env.session(2, true);
    let b = other_project(&env, "b");
    run(&b);
    run(&b);
    let a_dir = env.dir();
    let b_dir = garuda_audit::project_audit_dir(&b.audit_root, &b.project_root).unwrap();
    fs::remove_dir_all(&a_dir).unwrap();
    fs::create_dir(&a_dir).unwrap();
    fs::set_permissions(&a_dir, fs::Permissions::from_mode(0o700)).unwrap();
    for e in fs::read_dir(&b_dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".ckpt") {
            fs::copy(e.path(), a_dir.join(&name)).unwrap();
        }
    }
    env.session(1, true);
    let mut o = env.options();
    o.ctime_slack = Duration::from_secs(86_400);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    // B's lines do not authenticate in A's folder: keys are bound to the project.
    assert!(
        r.findings.iter().any(|f| f.code == Code::BadMac),
        "{}",
        r.render_text()
    );
}

#[test]
fn a_renamed_project_folder_does_not_verify() {
    // Keys are bound to the folder name, and the first line names it (PROJECT_MISMATCH
    // for a line that still authenticates): another folder's sessions are not this one's.
    let env = Env::new();
    let path = env.session(2, true);
    let lines = read_lines(&path);
    let name = env.dir_name();
    // Rename the folder: the files are now in a folder of another name.
    let renamed = env
        .cfg
        .audit_root
        .join(format!("other-{}", &name[name.len() - 16..]));
    fs::rename(env.dir(), &renamed).unwrap();
    let mut o = env.options();
    o.target = garuda_audit::VerifyTarget::Project(renamed.clone());
    o.ctime_slack = Duration::from_secs(86_400);
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert!(!lines.is_empty());
}

#[test]
fn a_closed_session_without_its_checkpoint_is_file_missing() {
    let env = Env::new();
    // start, end, final seal: no line after a seal, so the old check never asked for one.
    let path = env.session(0, true);
    fs::remove_file(path.with_extension("ckpt")).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(
        &r,
        Code::FileMissing,
        None,
        Some(&path.with_extension("ckpt")),
    );
}

#[test]
fn bytes_after_a_closed_sessions_final_seal_are_after_end() {
    let env = Env::new();
    let path = env.session(3, true);
    let mut data = fs::read(&path).unwrap();
    let n = read_lines(&path).len() as u64;
    data.extend_from_slice(
        br#"{"v":1,"seq":5,"type":"command_intent","event":{"argv":["rm","-rf","/"]}}"#,
    );
    fs::write(&path, data).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::AfterEnd, Some(n + 1), Some(&path));
}

/// The install-wide register removed (with its tail state) while the project's journal is
/// intact: every closed session wrote a register line at its close, so the register's absence
/// is missing evidence, not a fresh home. Negative control: the same log with its register
/// verifies.
#[test]
fn a_removed_register_is_file_missing() {
    let env = Env::new();
    env.session(3, true);
    env.session(2, true);
    let before = garuda_audit::verify(&env.options());
    assert_outcome(&before, Outcome::Verified);
    let register = env.cfg.audit_root.with_file_name("audit.register.jsonl");
    assert!(register.exists());
    fs::remove_file(&register).unwrap();
    let _ = fs::remove_file(register.with_extension("tail"));
    let r = garuda_audit::verify(&env.options());
    assert_outcome(&r, Outcome::Tampered);
    assert!(
        r.findings.iter().any(|f| f.code == Code::FileMissing
            && f.severity == Severity::Error
            && f.message.contains("2 closed session(s)")
            && f.message.contains("there is no register")),
        "{}",
        r.render_text()
    );
}
