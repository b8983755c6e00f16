//! Journal archives (issue 12): a long journal's older sessions move into compressed archives
//! that the journal's first line names; verify still checks every line of every session, and
//! an archive removed, replaced, edited or unnamed is found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod util;

use std::fs;
use std::path::{Path, PathBuf};

use garuda_audit::{Code, Outcome, Retention};
use util::*;

fn journal(env: &Env) -> PathBuf {
    env.dir().join("journal.jsonl")
}

/// Archive files of lane 0, by sequence number.
fn archives(env: &Env) -> Vec<PathBuf> {
    let mut out: Vec<(u64, PathBuf)> = fs::read_dir(env.dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let seq = name
                .strip_prefix("journal.a")?
                .strip_suffix(".z")?
                .parse()
                .ok()?;
            Some((seq, e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// A project whose journal is archived every few sessions, with `n` closed sessions written;
/// their ids in order.
fn archived(n: usize) -> (Env, Vec<String>) {
    let mut env = Env::new().with_witness();
    env.cfg.archive_at_bytes = Some(8 * 1024);
    let mut ids = Vec::new();
    for _ in 0..n {
        env.session(2, true);
        ids.push(session_ids(&journal(&env)).pop().unwrap());
    }
    (env, ids)
}

fn first_line(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&read_lines(path)[0]).unwrap()
}

#[test]
fn a_long_journal_is_archived_and_every_line_is_still_verified() {
    let (env, ids) = archived(40);
    let files = archives(&env);
    assert!(files.len() >= 3, "{files:?}");
    let record = first_line(&journal(&env));
    assert_eq!(record["type"], "pruned");
    assert_eq!(record["event"]["archive"]["seq"], files.len() as u64 - 1);
    // The journal keeps only the sessions since the last archive.
    assert!(session_ids(&journal(&env)).len() < ids.len());

    // Every session is verified, none is reported as pruned, and nothing else is said.
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    assert_eq!(r.sessions.len(), ids.len());
    assert_eq!(garuda_audit::list_sessions(&env.dir()).unwrap(), ids);
    let shown = garuda_audit::show(&env.dir(), &ids[0], &[env.key()]).unwrap();
    assert!(shown.stopped.is_none(), "{shown:?}");
    assert_eq!(shown.lines.len(), 5, "start, 2 events, end, seal");

    // Smaller on disk than the lines it holds (the journal's record names the newest).
    let on_disk = fs::metadata(files.last().unwrap()).unwrap().len();
    let holds = record["event"]["archive"]["bytes"].as_u64().unwrap();
    assert!(on_disk * 3 < holds, "{on_disk} bytes for {holds}");

    // The writer's slow path (no tail state to believe) reads an archived journal too.
    fs::remove_file(env.dir().join("journal.tail")).unwrap();
    env.session(1, true);
    assert_outcome(
        &garuda_audit::verify(&env.options_with_witness()),
        Outcome::Verified,
    );
}

#[test]
fn an_archive_changed_removed_or_replaced_is_found() {
    let (env, _) = archived(30);
    let files = archives(&env);
    assert!(files.len() >= 2, "{files:?}");
    let newest = files.last().unwrap().clone();
    let original = fs::read(&newest).unwrap();
    // Negative control: as written, it verifies.
    assert_outcome(&env.verify(), Outcome::Verified);

    // One byte changed inside the compressed lines.
    let mut flipped = original.clone();
    let at = original.len() - 10;
    flipped[at] ^= 0x20;
    fs::write(&newest, &flipped).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::RootMismatch, None, Some(&newest));

    // Another archive of the lane put in its place.
    fs::copy(&files[0], &newest).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::RootMismatch, None, Some(&newest));

    // Removed: the record names it; the sessions in it are gone.
    fs::remove_file(&newest).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, Some(1), Some(&journal(&env)));
    fs::write(&newest, &original).unwrap();
    fs::set_permissions(&newest, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_outcome(&env.verify(), Outcome::Verified);

    // The record edited (fewer lines claimed): its MAC.
    let path = journal(&env);
    let lines = read_lines(&path);
    let lines_claimed = first_line(&path)["event"]["archive"]["lines"]
        .as_u64()
        .unwrap();
    let mut edited = lines.clone();
    edited[0] = replace(
        &lines[0],
        &format!("\"lines\":{lines_claimed},"),
        &format!("\"lines\":{},", lines_claimed - 5),
    );
    assert_ne!(edited[0], lines[0]);
    write_lines(&path, &edited);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(1), Some(&path));

    // The record removed: the archived sessions are no longer named, and the journal's first
    // session names one of them.
    write_lines(&path, &lines[1..]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, None, None);
    write_lines(&path, &lines);
    assert_outcome(&env.verify(), Outcome::Verified);
}

#[test]
fn an_archive_no_journal_names_changes_nothing_and_is_replaced() {
    let (env, _) = archived(20);
    let files = archives(&env);
    let seq = files.len();
    // As a crash between the archive's rename and the journal's would leave it.
    let orphan = env.dir().join(format!("journal.a{seq}.z"));
    fs::copy(&files[0], &orphan).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    // The next archive takes its name and content.
    let before = fs::read(&orphan).unwrap();
    let mut n = 0;
    while archives(&env).len() == seq + 1 && fs::read(&orphan).unwrap() == before {
        env.session(2, true);
        n += 1;
        assert!(n < 50, "no new archive");
    }
    assert_eq!(
        first_line(&journal(&env))["event"]["archive"]["seq"],
        seq as u64
    );
    assert_outcome(&env.verify(), Outcome::Verified);
}

#[test]
fn retention_set_later_drops_the_archives_with_the_sessions_it_prunes() {
    let (mut env, ids) = archived(20);
    assert!(!archives(&env).is_empty());
    env.cfg.retention = Some(Retention {
        days: None,
        sessions: Some(2),
    });
    env.cfg.prune_batch = 3;
    // No archive while retention is set: the journal keeps its sessions to count them.
    let mut n = 0;
    while !archives(&env).is_empty() {
        env.session(2, true);
        n += 1;
        assert!(n < 20, "never pruned");
    }
    let record = first_line(&journal(&env));
    assert_eq!(record["type"], "pruned");
    assert!(record["event"].get("archive").is_none(), "{record}");
    assert_eq!(record["event"]["first"], ids[0].as_str());
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert_eq!(r.findings.len(), 1, "{}", r.render_text());
    assert_eq!(r.findings[0].code, Code::Pruned);
    assert_eq!(r.sessions.len(), 3);
}

/// A close killed between the archive's rewrite of the journal and the register record and
/// tail state that follow leaves both naming the journal as it was: never a finding of
/// tampering, neither by verify nor by the next session (which would record it for good).
#[test]
fn a_close_killed_right_after_archiving_is_not_tampering() {
    let (mut env, _) = archived(3);
    env.cfg.stop_after_rewrite = true;
    let mut n = 0;
    let seq_of = |env: &Env| first_line(&journal(env))["event"]["archive"]["seq"].as_u64();
    let before = seq_of(&env);
    loop {
        let mut w = garuda_audit::SessionWriter::open(
            &env.cfg,
            serde_json::json!({"argv": ["garuda", "sandbox"]}),
        )
        .unwrap();
        w.append("command_result", serde_json::json!({"exit": 0}))
            .unwrap();
        let closed = w.close(serde_json::json!({"reason": "done"}));
        if seq_of(&env) != before {
            assert!(closed.is_err(), "the close went on after the rewrite");
            break;
        }
        closed.unwrap();
        n += 1;
        assert!(n < 50, "never archived");
    }
    // The stale tail state and register record name the journal as it was.
    let r = env.verify();
    assert_ne!(r.outcome(), Outcome::Tampered, "{}", r.render_text());
    assert_no_errors(&r);
    env.cfg.stop_after_rewrite = false;
    env.session(1, true);
    let newest = session_lines(&journal(&env), session_ids(&journal(&env)).len() - 1);
    let start: serde_json::Value = serde_json::from_slice(&newest[0]).unwrap();
    assert!(start["event"].get("found_at_start").is_none(), "{start}");
    assert!(start["event"]["session"].is_string(), "{start}");
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert_no_errors(&r);
}
