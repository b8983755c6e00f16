//! The journal layout (issue 12): the old layout still verifies and is carried on, retention
//! prunes with a sealed head, concurrent sessions take separate lanes, and a writer reads
//! nothing before the tail state it believes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::fs;

use garuda_audit::{Code, Outcome, Retention, SessionWriter, Severity};
use serde_json::json;
use util::*;

fn journal(env: &Env) -> std::path::PathBuf {
    env.dir().join("journal.jsonl")
}

fn start_event(journal: &std::path::Path, k: usize) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&session_lines(journal, k)[0]).unwrap();
    v["event"].clone()
}

#[test]
fn an_old_layout_log_still_verifies_and_the_journal_carries_it_on() {
    let mut env = Env::new();
    env.cfg.legacy_layout = true;
    env.session(2, true);
    let last_old = env.session(2, true);
    assert_outcome(&env.verify(), Outcome::Verified);
    // The next run is of the journal layout: it records the old index as it found it, and
    // chains to the last old session.
    env.cfg.legacy_layout = false;
    env.session(2, true);
    env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    assert_eq!(r.sessions.len(), 4);
    let first = start_event(&journal(&env), 0);
    assert_eq!(first["legacy_index"]["lines"], 4);
    assert_eq!(first["prev_session"]["session"], session_id(&last_old));
    assert_eq!(first["prev_session"]["state"], "closed");

    // The old files are frozen: cutting the old index, adding to it, or deleting the last old
    // session is found.
    let index = env.dir().join(garuda_audit::INDEX_FILE);
    let lines = read_lines(&index);
    write_lines(&index, &lines[..3]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, None, Some(&index));
    let mut more = lines.clone();
    more.push(lines[3].clone());
    write_lines(&index, &more);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::AfterEnd, Some(5), Some(&index));
    write_lines(&index, &lines);
    assert_outcome(&env.verify(), Outcome::Verified);
    fs::remove_file(&last_old).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&last_old));
}

#[test]
fn an_old_session_whose_writer_died_is_recovered_by_the_first_journal_session() {
    let mut env = Env::new();
    env.cfg.legacy_layout = true;
    env.session(2, true);
    let dead = env.session(3, false);
    // Negative control: before the journal session, the dead one is "cannot tell".
    assert_outcome(&env.verify(), Outcome::Undecidable);
    env.cfg.legacy_layout = false;
    env.session(1, true);
    let first = start_event(&journal(&env), 0);
    assert_eq!(first["prev_session"]["session"], session_id(&dead));
    assert_eq!(first["prev_session"]["state"], "recovered");
    assert_outcome(&env.verify(), Outcome::Verified);
}

fn retention_env(sessions: u64, batch: u64) -> Env {
    let mut env = Env::new().with_witness();
    env.cfg.retention = Some(Retention {
        days: None,
        sessions: Some(sessions),
    });
    env.cfg.prune_batch = batch;
    env
}

#[test]
fn retention_prunes_old_sessions_and_leaves_their_sealed_head() {
    let env = retention_env(2, 3);
    for _ in 0..5 {
        env.session(2, true);
    }
    let before = session_ids(&journal(&env));
    assert_eq!(before.len(), 5, "nothing pruned below the batch");
    // The sixth close finds three sessions beyond the newest two (itself excluded): pruned.
    env.session(2, true);
    let path = journal(&env);
    let ids = session_ids(&path);
    assert_eq!(ids, [&before[3..], &ids[2..]].concat());
    assert_eq!(ids.len(), 3);
    let first: serde_json::Value = serde_json::from_slice(&read_lines(&path)[0]).unwrap();
    assert_eq!(first["type"], "pruned");
    assert_eq!(first["event"]["sessions"], 3);
    assert_eq!(first["event"]["last"]["session"], before[2].as_str());

    // Verified — with the pruned range said, as a warning, not as OK for everything.
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert_eq!(r.findings.len(), 1, "{}", r.render_text());
    let f = &r.findings[0];
    assert_eq!(
        (f.code, f.severity, f.line),
        (Code::Pruned, Severity::Warning, Some(1))
    );
    assert!(
        f.message
            .starts_with(&format!("3 session(s) from {} to {}", before[0], before[2])),
        "{}",
        f.message
    );
    assert_eq!(r.sessions.len(), 3);
    assert_eq!(garuda_audit::list_sessions(&env.dir()).unwrap(), ids);

    // Later sessions build on the rewritten journal; a second prune counts both.
    for _ in 0..3 {
        env.session(1, true);
    }
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert!(
        r.findings[0]
            .message
            .starts_with(&format!("6 session(s) from {}", before[0])),
        "{}",
        r.render_text()
    );

    // Attacks: the record edited (fewer sessions claimed) is BAD_MAC ...
    let lines = read_lines(&path);
    let mut edited = lines.clone();
    edited[0] = replace(&lines[0], "\"sessions\":6", "\"sessions\":1");
    write_lines(&path, &edited);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(1), Some(&path));
    // ... and a kept session cut out after the record is missing (the next one names it).
    let mut cut = lines.clone();
    cut.drain(segment(&path, 0));
    write_lines(&path, &cut);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&path));
    // Negative control: the same prefix removed without a record (not by retention) is
    // missing evidence, not a prune.
    let mut no_record = lines.clone();
    no_record.remove(0);
    write_lines(&path, &no_record);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert!(!r.findings.iter().any(|f| f.code == Code::Pruned));
}

#[test]
fn concurrent_sessions_take_separate_lanes() {
    let env = Env::new();
    env.session(1, true);
    let mut a = SessionWriter::open(&env.cfg, json!({})).unwrap();
    let mut b = SessionWriter::open(&env.cfg, json!({})).unwrap();
    assert_eq!(a.path(), journal(&env));
    assert_eq!(b.path(), env.dir().join("journal.1.jsonl"));
    a.append("x", json!({"a": 1})).unwrap();
    b.append("x", json!({"b": 1})).unwrap();
    b.close(json!({})).unwrap();
    a.close(json!({})).unwrap();
    // Freed: the next session takes lane 0 again.
    let next = SessionWriter::open(&env.cfg, json!({})).unwrap();
    assert_eq!(next.path(), journal(&env));
    next.close(json!({})).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    assert_eq!(r.sessions.len(), 4);
    // Lane 1's journal cut: its tail state and the register say so.
    let lane1 = env.dir().join("journal.1.jsonl");
    let lines = read_lines(&lane1);
    write_lines(&lane1, &lines[..lines.len() - 2]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(
        &r,
        Code::Truncated,
        Some(lines.len() as u64 - 1),
        Some(&lane1),
    );
}

#[test]
fn the_writer_reads_nothing_before_the_tail_state() {
    let env = Env::new();
    let path = env.session(2, true);
    env.session(2, true);
    // A byte flipped in the first session: history the next writer does not read.
    let mut lines = read_lines(&path);
    lines[1] = replace(&lines[1], "cmd-0", "cmd-X");
    write_lines(&path, &lines);
    // (The edit moved the journal's ctime: the writer records that, not the edit itself.)
    let next = env.session(1, true);
    let start = start_event(&next, 2);
    let found = start["found_at_start"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        found.iter().all(|p| p["code"] != "BAD_MAC"),
        "the writer read history: {found:?}"
    );
    // Verify reads every line.
    let r = env.verify();
    assert_finding(&r, Code::BadMac, Some(2), Some(&path));
    // Negative control: without the tail state the writer reads the whole journal and finds
    // the edit itself.
    fs::remove_file(path.with_extension("tail")).unwrap();
    let after = env.session(1, true);
    let start = start_event(&after, 3);
    let found = start["found_at_start"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(found.iter().any(|p| p["code"] == "BAD_MAC"), "{found:?}");
}

#[test]
fn a_journal_the_register_records_cannot_vanish() {
    let env = Env::new();
    let path = env.session(2, true);
    fs::remove_file(&path).unwrap();
    fs::remove_file(path.with_extension("tail")).unwrap();
    fs::remove_file(path.with_extension("ckpt")).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, Some(&path));
}

#[test]
fn a_dead_session_in_another_lane_is_recovered_once() {
    let env = Env::new();
    env.session(1, true);
    let a = SessionWriter::open(&env.cfg, json!({})).unwrap();
    let mut b = SessionWriter::open(&env.cfg, json!({})).unwrap();
    let lane1 = env.dir().join("journal.1.jsonl");
    assert_eq!(b.path(), lane1);
    b.append("x", json!({})).unwrap();
    let dead = b.session_id().to_string();
    drop(b); // its writer dies
    a.close(json!({})).unwrap();
    // Negative control: nothing has recorded the dead session yet.
    let r = env.verify();
    assert_outcome(&r, Outcome::Undecidable);
    assert_finding(&r, Code::OpenSession, Some(3), Some(&lane1));
    // The next run (lane 0) records it as found, and writes lane 1's tail state so that the
    // run after it does not record it again.
    env.session(1, true);
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    let j = journal(&env);
    let start = start_event(&j, 2);
    assert_eq!(start["recovered"][0]["session"], dead.as_str());
    assert_eq!(start["recovered"][0]["lines"], 2);
    env.session(1, true);
    assert_eq!(start_event(&j, 3)["recovered"], json!([]));
    assert_outcome(&env.verify(), Outcome::Verified);
    // Cutting the dead session's recorded lines is still found.
    let lines = read_lines(&lane1);
    write_lines(&lane1, &lines[..1]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::Truncated, Some(2), Some(&lane1));
}

/// A writer killed while it wrote the first line of a new session leaves bytes with no newline
/// after the previous, closed session's seal: a crash, reported as a torn tail, never as
/// tampering (found by the crash suite as an AFTER_END error before the fix). Negative control:
/// a whole line after the closed session's seal is not explained by any crash.
#[test]
fn a_new_sessions_first_line_cut_by_a_crash_is_a_torn_tail() {
    let env = Env::new();
    env.session(2, true);
    env.session(2, true);
    let path = journal(&env);
    let clean = fs::read(&path).unwrap();
    let mut torn = clean.clone();
    torn.extend_from_slice(b"{\"v\":1,\"seq\":0,\"epoch\":");
    fs::write(&path, &torn).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    let f = r
        .findings
        .iter()
        .find(|f| f.code == Code::TornTail)
        .unwrap_or_else(|| panic!("{}", r.render_text()));
    assert_eq!(f.severity, Severity::Warning);
    assert!(!r.findings.iter().any(|f| f.code == Code::AfterEnd));

    // The control: a complete line after the final seal (here the last line again).
    let last = clean[..clean.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap();
    let mut whole = clean.clone();
    whole.extend_from_slice(&clean[last + 1..]);
    fs::write(&path, &whole).unwrap();
    assert_outcome(&env.verify(), Outcome::Tampered);
    // And the next writer after the crash carries on over the torn bytes.
    fs::write(&path, &torn).unwrap();
    env.session(1, true);
    assert_outcome(&env.verify(), Outcome::Verified);
}

/// A project has at most 64 lanes (sessions running at once in it). The 65th session fails
/// closed with an error that says why, and makes no 65th journal. Negative control: the 64th
/// session opens (lane 63), and once one session closes, the next one opens in its lane.
#[test]
fn a_65th_concurrent_session_fails_closed_with_a_clear_error() {
    let env = Env::new();
    let mut held: Vec<SessionWriter> = (0..64)
        .map(|_| SessionWriter::open(&env.cfg, json!({})).unwrap())
        .collect();
    assert_eq!(held[63].path(), env.dir().join("journal.63.jsonl"));
    let err = SessionWriter::open(&env.cfg, json!({})).unwrap_err();
    assert!(
        matches!(err, garuda_audit::AuditError::LanesFull { lanes: 64, .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}: all 64 journal lanes of this project are held by running sessions; wait for one to end",
            env.dir().display()
        )
    );
    assert!(!env.dir().join("journal.64.jsonl").exists());
    held.remove(5).close(json!({})).unwrap();
    let w = SessionWriter::open(&env.cfg, json!({})).unwrap();
    assert_eq!(w.path(), env.dir().join("journal.5.jsonl"));
    held.push(w);
    for w in held {
        w.close(json!({})).unwrap();
    }
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert_eq!(r.sessions.len(), 65);
}

/// A lane's journal replaced by a link (here lane 1, taken while lane 0 is held) is refused,
/// not followed and not skipped. Negative control: without the link the same open takes lane 1.
#[test]
fn a_link_planted_as_a_lane_journal_is_refused() {
    let env = Env::new();
    env.session(1, true);
    let a = SessionWriter::open(&env.cfg, json!({})).unwrap();
    let lane1 = env.dir().join("journal.1.jsonl");
    let victim = env.tmp.path().join("victim");
    fs::write(&victim, b"").unwrap();
    std::os::unix::fs::symlink(&victim, &lane1).unwrap();
    let err = SessionWriter::open(&env.cfg, json!({})).unwrap_err();
    assert!(
        matches!(err, garuda_audit::AuditError::Symlink { ref path } if *path == lane1),
        "{err}"
    );
    assert_eq!(fs::read(&victim).unwrap(), b"");
    fs::remove_file(&lane1).unwrap();
    let b = SessionWriter::open(&env.cfg, json!({})).unwrap();
    assert_eq!(b.path(), lane1);
    b.close(json!({})).unwrap();
    a.close(json!({})).unwrap();
}

/// The writer's quick path (a tail state it believes) reads from the journal's last recorded
/// line on. A complete line appended after a closed session, before the next session's start,
/// is no session's: the next writer records it (AFTER_END in its `found_at_start`), as its
/// slow path, which checks every session, does. Control: a run after a clean close records
/// nothing.
#[test]
fn a_line_after_the_tail_states_end_is_recorded_by_the_next_writer() {
    let env = Env::new();
    env.session(2, true);
    let path = journal(&env);
    env.session(1, true);
    let found = |k: usize| start_event(&path, k)["found_at_start"].clone();
    assert_eq!(found(1), serde_json::Value::Null, "the control");
    let mut lines = read_lines(&path);
    let last = lines.last().unwrap().clone();
    lines.push(last);
    write_lines(&path, &lines);
    assert!(path.with_extension("tail").exists());
    env.session(1, true);
    let f = found(2);
    assert_eq!(f[0]["code"], "AFTER_END", "{f}");
    assert!(
        f[0]["detail"]
            .as_str()
            .unwrap()
            .contains("1 line(s) after the end the lane's tail state records"),
        "{f}"
    );
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FoundAtStart, Some(start_line(&path)), Some(&path));
}

/// The torn-tail rule reads only the beginning of a `session_start` line after the journal's
/// last, closed session as a crash's. The same cut line, once its type shows and is not
/// `session_start`, is someone's bytes: AFTER_END (the rule's control in its second branch;
/// `tamper.rs` `bytes_after_a_closed_sessions_final_seal_are_after_end` covers a line that
/// does not begin like a first line at all).
#[test]
fn a_cut_line_of_another_type_after_the_last_session_is_after_end() {
    let env = Env::new();
    env.session(2, true);
    let path = journal(&env);
    let clean = fs::read(&path).unwrap();
    let head =
        br#"{"v":1,"seq":0,"epoch":0,"time":"2026-01-01T00:00:00.000Z","prev":"00","type":""#;
    for (kind, torn) in [
        ("session_st", true),
        ("session_start\",\"ev", true),
        ("command_intent", false),
        ("x", false),
    ] {
        let mut data = clean.clone();
        data.extend_from_slice(head);
        data.extend_from_slice(kind.as_bytes());
        fs::write(&path, &data).unwrap();
        let r = env.verify();
        if torn {
            assert_outcome(&r, Outcome::Verified);
            assert!(
                r.findings.iter().any(|f| f.code == Code::TornTail),
                "{kind}: {}",
                r.render_text()
            );
        } else {
            assert_outcome(&r, Outcome::Tampered);
            assert!(
                r.findings.iter().any(|f| f.code == Code::AfterEnd),
                "{kind}: {}",
                r.render_text()
            );
            assert!(
                !r.findings.iter().any(|f| f.code == Code::TornTail),
                "{kind}"
            );
        }
    }
}
