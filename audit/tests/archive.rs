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

/// Files `<prefix><seq>.z` in `dir`, by sequence number.
fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<(u64, PathBuf)> = fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let seq = name
                .strip_prefix(prefix)?
                .strip_suffix(".z")?
                .parse()
                .ok()?;
            Some((seq, e.path()))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// Archive files of lane 0, by sequence number.
fn archives(env: &Env) -> Vec<PathBuf> {
    numbered(&env.dir(), "journal.a")
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

/// The attacks on the newest of `files` (archives, oldest first) that a verify must find: a
/// byte changed, another archive put in its place (ROOT_MISMATCH at the archive), the file
/// removed (FILE_MISSING at line 1 of `named_by`, whose first line names it); then it is put
/// back and everything verifies again (each attack's negative control).
fn attack_newest_archive(env: &Env, files: &[PathBuf], named_by: &Path) {
    assert!(files.len() >= 2, "{files:?}");
    let newest = files.last().unwrap().clone();
    let original = fs::read(&newest).unwrap();
    assert_outcome(&env.verify(), Outcome::Verified);

    // One byte changed inside the compressed lines.
    let mut flipped = original.clone();
    let at = original.len() - 10;
    flipped[at] ^= 0x20;
    fs::write(&newest, &flipped).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::RootMismatch, None, Some(&newest));

    // Another archive of the same file put in its place.
    fs::copy(&files[0], &newest).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::RootMismatch, None, Some(&newest));

    // Removed: its record names it.
    fs::remove_file(&newest).unwrap();
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::FileMissing, Some(1), Some(named_by));
    fs::write(&newest, &original).unwrap();
    fs::set_permissions(&newest, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_outcome(&env.verify(), Outcome::Verified);
}

/// The archive record at `path`'s first line with its `"lines":claimed` made one less: BAD_MAC
/// at that line; then put back.
fn edited_record_is_bad_mac(env: &Env, path: &Path, claimed: u64) {
    let lines = read_lines(path);
    let mut edited = lines.clone();
    edited[0] = replace(
        &lines[0],
        &format!("\"lines\":{claimed},"),
        &format!("\"lines\":{},", claimed - 1),
    );
    assert_ne!(edited[0], lines[0]);
    write_lines(path, &edited);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::BadMac, Some(1), Some(path));
    write_lines(path, &lines);
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
    attack_newest_archive(&env, &archives(&env), &journal(&env));

    // The record edited (fewer lines claimed): its MAC.
    let path = journal(&env);
    let lines = read_lines(&path);
    let claimed = first_line(&path)["event"]["archive"]["lines"]
        .as_u64()
        .unwrap();
    edited_record_is_bad_mac(&env, &path, claimed);

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

/// After a close killed right after a rewrite: nothing reads as tampering; the next session
/// records nothing as found at its start, and then everything verifies.
fn after_a_killed_close(env: &mut Env) {
    let r = env.verify();
    assert_ne!(r.outcome(), Outcome::Tampered, "{}", r.render_text());
    assert_no_errors(&r);
    env.cfg.stop_after_rewrite = false;
    env.session(1, true);
    let newest = session_lines(&journal(env), session_ids(&journal(env)).len() - 1);
    let start: serde_json::Value = serde_json::from_slice(&newest[0]).unwrap();
    assert!(start["event"].get("found_at_start").is_none(), "{start}");
    assert!(start["event"]["session"].is_string(), "{start}");
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
    assert_no_errors(&r);
}

/// A project whose last close was killed right after it archived the journal, before the
/// register record and tail state that follow the rewrite.
fn killed_after_archiving() -> Env {
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
        // Or the register's rewrite stopped it (the same window, in the register): go on.
        let _ = closed;
        n += 1;
        assert!(n < 50, "never archived");
    }
    env.cfg.stop_after_rewrite = false;
    env
}

/// The writer places a stale record only through an archive record it authenticates: with the
/// record's MAC broken, the same stale tail state is a cut the next session records.
#[test]
fn a_forged_archive_record_excuses_no_cut() {
    let env = killed_after_archiving();
    let path = journal(&env);
    let mut lines = read_lines(&path);
    let at = lines[0].len() - 5;
    lines[0][at] = if lines[0][at] == b'0' { b'1' } else { b'0' };
    write_lines(&path, &lines);
    env.session(1, true);
    let newest = session_lines(&path, session_ids(&path).len() - 1);
    let start: serde_json::Value = serde_json::from_slice(&newest[0]).unwrap();
    let found = start["event"]["found_at_start"].to_string();
    assert!(
        found.contains("TRUNCATED") || found.contains("ROOT_MISMATCH"),
        "{start}"
    );
}

/// A close killed between the archive's rewrite of the journal and the register record and
/// tail state that follow leaves both naming the journal as it was: never a finding of
/// tampering, neither by verify nor by the next session (which would record it for good).
#[test]
fn a_close_killed_right_after_archiving_is_not_tampering() {
    let mut env = killed_after_archiving();
    // The stale tail state and register record name the journal as it was.
    after_a_killed_close(&mut env);
}

fn register(env: &Env) -> PathBuf {
    env.cfg.audit_root.with_file_name("audit.register.jsonl")
}

fn register_archives(env: &Env) -> Vec<PathBuf> {
    numbered(env.cfg.audit_root.parent().unwrap(), "audit.register.a")
}

/// Close records in the register and its archives, whatever their order.
fn register_closes(env: &Env) -> usize {
    let mut n = 0;
    for path in register_archives(env) {
        let data = garuda_audit::archive_decode(&fs::read(path).unwrap()).unwrap();
        n += data
            .split(|&c| c == b'\n')
            .filter(|l| String::from_utf8_lossy(l).contains("\"type\":\"close\""))
            .count();
    }
    n + read_lines(&register(env))
        .iter()
        .filter(|l| String::from_utf8_lossy(l).contains("\"type\":\"close\""))
        .count()
}

#[test]
fn the_register_is_archived_and_every_line_is_still_verified() {
    let (env, ids) = archived(60);
    let files = register_archives(&env);
    assert!(files.len() >= 2, "{files:?}");
    let record = first_line(&register(&env));
    assert_eq!(record["type"], "register_archive");
    assert_eq!(record["event"]["archive"]["seq"], files.len() as u64 - 1);
    // Every session's close is recorded once, archives included.
    assert_eq!(register_closes(&env), ids.len());
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
    assert_eq!(
        r.facts.register.lines,
        first_line(&register(&env))["event"]["lines"]
            .as_u64()
            .unwrap()
            + read_lines(&register(&env)).len() as u64
            - 1
    );

    // The writer's slow path (no register tail state) reads the record's records.
    fs::remove_file(env.cfg.audit_root.with_file_name("audit.register.tail")).unwrap();
    env.session(1, true);
    let r = garuda_audit::verify(&env.options_with_witness());
    assert_outcome(&r, Outcome::Verified);
    assert!(r.findings.is_empty(), "{}", r.render_text());
}

#[test]
fn a_register_archive_changed_removed_or_replaced_is_found() {
    let (env, _) = archived(60);
    attack_newest_archive(&env, &register_archives(&env), &register(&env));

    // The record edited: its MAC; removed: the register's chain starts in the middle.
    let path = register(&env);
    let lines = read_lines(&path);
    let claimed = first_line(&path)["event"]["lines"].as_u64().unwrap();
    edited_record_is_bad_mac(&env, &path, claimed);
    write_lines(&path, &lines[1..]);
    let r = env.verify();
    assert_outcome(&r, Outcome::Tampered);
    assert!(
        r.findings
            .iter()
            .any(|f| f.code == Code::SeqGap || f.code == Code::PrevMismatch),
        "{}",
        r.render_text()
    );
    write_lines(&path, &lines);
    assert_outcome(&env.verify(), Outcome::Verified);
}

/// Many writers in parallel, the register archived under them: a writer that waited for the
/// register's lock while it was replaced appends to the new register, never to the old file
/// (its close record would be lost with it).
#[test]
fn no_close_record_is_lost_while_the_register_is_archived() {
    let (env, _) = archived(1);
    let mut cfg = env.cfg.clone();
    cfg.archive_at_bytes = Some(4 * 1024);
    let cfg = std::sync::Arc::new(cfg);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let cfg = std::sync::Arc::clone(&cfg);
            std::thread::spawn(move || {
                for i in 0..15 {
                    let mut w = garuda_audit::SessionWriter::open(
                        &cfg,
                        serde_json::json!({"thread": t, "i": i}),
                    )
                    .unwrap();
                    w.append("command_result", serde_json::json!({"exit": 0}))
                        .unwrap();
                    w.close(serde_json::json!({})).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(register_archives(&env).len() >= 3);
    assert_eq!(register_closes(&env), 1 + 4 * 15);
    let r = env.verify();
    assert_outcome(&r, Outcome::Verified);
}

/// The register's rewrite killed before the close's own line: the register holds only its
/// record, its tail state names the register as it was. Nothing reads as tampering, and the
/// next writer goes on from the record.
#[test]
fn a_close_killed_right_after_the_registers_rewrite_is_not_tampering() {
    let (mut env, _) = archived(1);
    env.cfg.stop_after_rewrite = true;
    let archived_register = |env: &Env| first_line(&register(env))["type"] == "register_archive";
    let mut n = 0;
    while !archived_register(&env) {
        let mut w = garuda_audit::SessionWriter::open(&env.cfg, serde_json::json!({})).unwrap();
        w.append("command_result", serde_json::json!({"exit": 0}))
            .unwrap();
        if fs::metadata(register(&env)).unwrap().len() >= env.cfg.archive_at_bytes.unwrap() {
            // This close archives the register: its last line is then older than the ctime
            // slack when the register is renamed (as after any pause between runs).
            std::thread::sleep(std::time::Duration::from_millis(2200));
        }
        // A journal's rewrite stops some closes too: the other window, also fine.
        let _ = w.close(serde_json::json!({}));
        n += 1;
        assert!(n < 100, "the register was never archived");
    }
    assert_eq!(read_lines(&register(&env)).len(), 1, "only the record");
    // The register's rename is its record's write, not a change after its last line: verify
    // takes the authentic record's time (without it: CHANGED_AFTER_WRITE, "cannot tell").
    assert_outcome(&env.verify(), Outcome::Verified);
    after_a_killed_close(&mut env);
}

/// An archive file no journal names claims nothing: planted after a wipe (the audit folder,
/// the register and the key removed) with a session start under the exported key, it must not
/// turn that key's KEY_UNUSED into "no sessions" (the review's finding: archive files were
/// read for their key ids whether or not a journal named them).
#[test]
fn an_archive_no_journal_names_claims_no_key() {
    let env = Env::new();
    env.session(2, true);
    let start = read_lines(&journal(&env))[0].clone();
    let out = env.tmp.path().join("old.key");
    garuda_audit::key_export(&env.cfg.keys_dir, &out, false).unwrap();
    fs::remove_dir_all(&env.cfg.audit_root).unwrap();
    fs::remove_file(register(&env)).unwrap();
    fs::remove_dir_all(&env.cfg.keys_dir).unwrap();
    env.session(1, true);
    let planted = env.cfg.audit_root.join("elsewhere-0123456789abcdef");
    fs::create_dir(&planted).unwrap();
    fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let file = planted.join("journal.a0.z");
    fs::write(
        &file,
        garuda_audit::archive_encode(&[&start[..], b"\n"].concat()),
    )
    .unwrap();
    fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut o = garuda_audit::VerifyOptions::new(
        garuda_audit::VerifyTarget::All(env.cfg.audit_root.clone()),
        vec![
            env.key(),
            garuda_audit::InstallSecret::read_file(&out).unwrap(),
        ],
    );
    o.keys_dir = Some(env.cfg.keys_dir.clone());
    let r = garuda_audit::verify(&o);
    assert_outcome(&r, Outcome::Tampered);
    assert_finding(&r, Code::KeyUnused, None, None);
}
