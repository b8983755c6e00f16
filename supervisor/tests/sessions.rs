//! Session journals on disk (`garuda_supervisor::sessions`) and `garuda sessions`.
//!
//! The CLI lists nothing, then two journals written through the API; folders are 0700 and
//! journals 0600; a link planted at the sessions folder, the project's folder or a journal is
//! refused (negative control: a plain path-based create follows it); a folder others can read
//! is refused (negative control: the same folder at 0700 is used); a record with a token is
//! stored redacted when it goes through the broker's tool host (negative control: the raw
//! writer stores it); unknown and malformed ids are named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use common::{garuda, text};
use garuda_ipc::{Answer, Request};
use garuda_policy::engine::{Context, Engine};
use garuda_policy::{Flags, HostEnv};
use garuda_supervisor::broker::host::{CommandRunner, NoTerminal, SessionTools};
use garuda_supervisor::broker::server::ToolHost;
use garuda_supervisor::broker::FileTools;
use garuda_supervisor::sessions::{append_record, SessionError, SessionStore};
use serde_json::{json, Value};

const ID_A: &str = "20250102T030405Z-00000000000000aa";
const ID_B: &str = "20250103T101010Z-00000000000000bb";

struct World {
    w: common::World,
    garuda_home: PathBuf,
}

fn world() -> World {
    let w = common::World::new("garuda-sessions");
    w.git(&["init", "-q"]);
    World {
        garuda_home: w.home.join(".garuda"),
        w,
    }
}

impl World {
    fn store(&self) -> SessionStore {
        SessionStore::new(&self.garuda_home, &self.w.project).unwrap()
    }

    /// `garuda sessions ARGS…` in the project, with this world's home and no `GARUDA_HOME`.
    fn sessions(&self, args: &[&str]) -> Output {
        Command::new(garuda())
            .arg("sessions")
            .args(args)
            .current_dir(&self.w.project)
            .env("HOME", &self.w.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap()
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn write_journal(store: &SessionStore, id: &str, records: &[Value], mtime_secs: u64) {
    let mut file = store.create(id).unwrap();
    for r in records {
        append_record(&mut file, &r.to_string()).unwrap();
    }
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(mtime_secs))
        .unwrap();
}

#[test]
fn garuda_sessions_lists_nothing_then_two_journals() {
    let world = world();
    let out = world.sessions(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "no sessions for this project yet\n");
    assert_eq!(text(&out.stderr), "");
    let out = world.sessions(&["--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "[]\n");
    // Listing created nothing.
    assert!(!world.garuda_home.join("sessions").exists());

    let store = world.store();
    // B was written first, A last: A is the latest whatever the ids say.
    write_journal(
        &store,
        ID_B,
        &[
            json!({"role": "user", "content": [{"type": "text", "text": "first\nline \u{1b}[31mred"}]}),
            json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
        ],
        1_736_000_000,
    );
    write_journal(
        &store,
        ID_A,
        &[
            json!({"type": "session_start", "model": "anthropic/claude-sonnet-4-5"}),
            json!({"role": "user", "content": "x".repeat(100)}),
            json!({"role": "assistant", "content": []}),
        ],
        1_736_100_000,
    );
    // A torn last line (a crash in the middle of a write) is not a record.
    let mut f = store.resume(ID_A).unwrap();
    f.write_all(b"{\"role\": \"ass").unwrap();
    f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_736_100_000))
        .unwrap();
    drop(f);

    let out = world.sessions(&[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let want = format!(
        "SESSION                            STARTED (UTC)        LAST WRITE (UTC)     RECORDS  FIRST PROMPT\n\
         {ID_B}  2025-01-03 10:10:10  2025-01-04 14:13:20        2  first⏎line \\e[31mred\n\
         {ID_A}  2025-01-02 03:04:05  2025-01-05 18:00:00        3  {}…\n",
        "x".repeat(79)
    );
    assert_eq!(text(&out.stdout), want);

    let out = world.sessions(&["--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!([
            {"id": ID_B, "started": "2025-01-03T10:10:10.000Z", "last_write": "2025-01-04T14:13:20.000Z",
             "records": 2, "first_prompt": "first⏎line \\e[31mred"},
            {"id": ID_A, "started": "2025-01-02T03:04:05.000Z", "last_write": "2025-01-05T18:00:00.000Z",
             "records": 3, "first_prompt": format!("{}…", "x".repeat(79))},
        ])
    );
    assert_eq!(store.latest().unwrap().unwrap().id, ID_A);
    let records = store.read(ID_A).unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(
        serde_json::from_str::<Value>(&records[0]).unwrap(),
        json!({"type": "session_start", "model": "anthropic/claude-sonnet-4-5"})
    );
    // Another project's sessions are not this one's.
    let other = world.w.base.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    assert!(SessionStore::new(&world.garuda_home, &other)
        .unwrap()
        .list()
        .unwrap()
        .is_empty());
}

#[test]
fn folders_are_0700_and_journals_0600() {
    let world = world();
    let store = world.store();
    let (id, _file) = store.create_new().unwrap();
    assert!(garuda_audit::valid_session_id(&id), "{id}");
    let sessions = world.garuda_home.join("sessions");
    assert_eq!(mode(&sessions), 0o700);
    assert_eq!(mode(&store.dir()), 0o700);
    assert_eq!(mode(&store.journal_path(&id)), 0o600);
    // The project's folder is the audit log's name for the project.
    assert_eq!(
        store.dir(),
        sessions.join(garuda_audit::project_dir_name(&world.w.project))
    );
    // The same id twice is refused (O_EXCL), not reopened.
    let e = store.create(&id).unwrap_err();
    assert!(matches!(e, SessionError::Exists { .. }), "{e}");
}

#[test]
fn a_folder_others_can_read_is_refused() {
    let world = world();
    let store = world.store();
    store.create(ID_A).unwrap();
    let sessions = world.garuda_home.join("sessions");
    for dir in [sessions.clone(), store.dir()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = store.create(ID_B).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: mode 0755, not 0700: refused", dir.display())
        );
        let e = store.read(ID_A).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: mode 0755, not 0700: refused", dir.display())
        );
        // Negative control: the same folder at 0700 is used.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(store.read(ID_A).unwrap(), Vec::<String>::new());
    }
    let journal = store.journal_path(ID_A);
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = store.resume(ID_A).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}: mode 0644, not 0600: refused", journal.display())
    );
    std::fs::set_permissions(&journal, std::fs::Permissions::from_mode(0o600)).unwrap();
    store.resume(ID_A).unwrap();
}

/// A link planted at the sessions folder or at the project's folder is refused; the
/// negative control, a plain path-based create, follows it and writes where it points.
#[test]
fn a_link_planted_at_a_folder_is_refused() {
    for planted_at_project in [false, true] {
        let world = world();
        let store = world.store();
        let elsewhere = world.w.base.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = if planted_at_project {
            std::fs::create_dir_all(world.garuda_home.join("sessions")).unwrap();
            std::fs::set_permissions(
                world.garuda_home.join("sessions"),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
            store.dir()
        } else {
            std::fs::create_dir_all(&world.garuda_home).unwrap();
            world.garuda_home.join("sessions")
        };
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let refused = format!(
            "{}: is a symbolic link: refused without following it (a planted link could send \
             the journal elsewhere)",
            link.display()
        );
        let e = store.create(ID_A).unwrap_err();
        assert_eq!(e.to_string(), refused);
        assert_eq!(store.list().unwrap_err().to_string(), refused);
        assert_eq!(store.read(ID_A).unwrap_err().to_string(), refused);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

        // Negative control: path-based, the same create lands in `elsewhere`.
        std::fs::create_dir_all(store.dir()).unwrap();
        std::fs::File::create(store.journal_path(ID_A)).unwrap();
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);
    }
}

/// A link planted at a journal's path is refused by create, resume and read and skipped by
/// the listing; the negative control, a path-based append, writes through it.
#[test]
fn a_link_planted_at_a_journal_is_refused() {
    let world = world();
    let store = world.store();
    store.create(ID_B).unwrap();
    let outside = world.w.base.path().join("outside.txt");
    std::fs::write(&outside, "theirs\n").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let journal = store.journal_path(ID_A);
    std::os::unix::fs::symlink(&outside, &journal).unwrap();
    let refused = format!(
        "{}: is a symbolic link: refused without following it (a planted link could send the \
         journal elsewhere)",
        journal.display()
    );
    assert_eq!(store.create(ID_A).unwrap_err().to_string(), refused);
    assert_eq!(store.resume(ID_A).unwrap_err().to_string(), refused);
    assert_eq!(store.read(ID_A).unwrap_err().to_string(), refused);
    let listed: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(listed, vec![ID_B.to_string()]);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "theirs\n");

    // Negative control: a path-based append follows the link.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    f.write_all(b"{\"ours\": 1}\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "theirs\n{\"ours\": 1}\n"
    );
}

#[test]
fn unknown_and_malformed_ids_are_named() {
    let world = world();
    let store = world.store();
    let e = store.read(ID_A).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("no session {ID_A} for this project; no sessions for this project yet")
    );
    store.create(ID_A).unwrap();
    store.create(ID_B).unwrap();
    let e = store.read("20250101T000000Z-0000000000000000").unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "no session 20250101T000000Z-0000000000000000 for this project; known: {ID_A}, {ID_B}"
        )
    );
    for bad in ["../x", "a/b", "..", ".", "", "a.jsonl", "x\u{1b}[2J"] {
        for e in [
            store.read(bad).unwrap_err(),
            store.resume(bad).unwrap_err(),
            store.create(bad).unwrap_err(),
        ] {
            assert!(matches!(e, SessionError::BadId { .. }), "{bad:?}: {e}");
            let shown = e.to_string();
            assert!(shown.starts_with("not a session id: "), "{shown}");
            assert!(!shown.contains('\u{1b}'), "{shown}");
        }
    }
}

/// A `journal_append` through the broker's tool host stores the record redacted; the raw
/// writer (what `journal_append` did before, the negative control) stores the token.
#[test]
fn the_broker_journals_records_redacted() {
    let world = world();
    let store = world.store();
    let journal = store.create(ID_A).unwrap();
    let host = HostEnv::from_vars(vec![
        ("HOME".into(), world.w.home.clone().into_os_string()),
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
    ])
    .unwrap();
    let settings =
        garuda_policy::merge_texts(&[], &host, &world.w.project, &Flags::default()).unwrap();
    let engine = Engine::new(&settings, &host, &world.w.project);
    let mut approver = NoTerminal;
    let mut tools = SessionTools::new(
        FileTools::open(&world.w.project).unwrap(),
        engine,
        Context::default(),
        false,
        &mut approver,
        CommandRunner {
            exe: garuda(),
            project: world.w.project.clone(),
            env: vec![],
            staged: false,
            staged_apply: false,
            ask_staged: false,
            ask_hosts: false,
            in_process: None,
        },
        Some(journal),
    );
    let token = "ghp_R4nd0mTok3nV4lu3F0rT35t1ngOnly000000";
    let key = "sk-ant-api03-Xy7Kq2LmN9pR4sT6vW8zA1bC3dE5fG7hJ9kL";
    let record = json!({
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1",
                     "content": format!("cat .env\nGITHUB_TOKEN={token}\nkey={key}\n"),
                     "is_error": false}],
    })
    .to_string();
    let (answer, event) = tools.call(&Request::JournalAppend {
        record: record.clone(),
    });
    assert_eq!(answer, Answer::Stored);
    assert!(event.is_none());
    // Not JSON: an error the model can read, nothing stored.
    let (answer, _) = tools.call(&Request::JournalAppend {
        record: format!("not json {token}"),
    });
    match answer {
        Answer::Error { message, .. } => {
            assert!(
                message.starts_with("a journal record is one JSON value"),
                "{message}"
            );
            assert!(!message.contains(token), "{message}");
        }
        other => panic!("{other:?}"),
    }
    drop(tools);
    let stored = std::fs::read_to_string(store.journal_path(ID_A)).unwrap();
    assert_eq!(stored.lines().count(), 1, "{stored}");
    assert!(!stored.contains(token) && !stored.contains(key), "{stored}");
    assert!(stored.contains("[REDACTED:"), "{stored}");
    assert_eq!(store.read(ID_A).unwrap().len(), 1);

    // Negative control: the raw writer keeps the token.
    let mut raw = store.create(ID_B).unwrap();
    raw.write_all(record.as_bytes()).unwrap();
    raw.write_all(b"\n").unwrap();
    assert!(store.read(ID_B).unwrap()[0].contains(token));
}
