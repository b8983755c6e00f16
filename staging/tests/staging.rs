//! Staged commands end to end, without a sandbox: the "command" is a shell script run over
//! the staged view, either through a real overlayfs mount in a user namespace (`unshare
//! -Urm`; a kernel without it fails the tests unless `GARUDA_ALLOW_NO_OVERLAY` is set) or directly in the copy. Overlay states
//! that need no mount (xattr whiteouts, opaque folders) are written into `upper/` by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use garuda_policy::StagedView;
use garuda_staging::{
    recover, render, Backend, BackendChoice, ChangeKind, ChangeSet, FoundKind, Guard,
    RecoveryAction, Session, StagingError, FAILPOINT_ENV, JOURNAL_COMMIT, JOURNAL_PENDING,
};
use tempfile::TempDir;

// ---- fixtures ------------------------------------------------------------------------------

struct Env {
    home: TempDir,
    project: TempDir,
}

impl Env {
    fn new() -> Env {
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        write(p, "a.txt", "alpha\n");
        write(p, "b.txt", "bravo\n");
        write(p, "c.txt", "charlie\n");
        write(p, "src/lib.rs", "pub fn f() {}\n");
        write(p, "src/deep/mod.rs", "// deep\n");
        write(p, "run.sh", "#!/bin/sh\necho hi\n");
        write(p, ".gitignore", "target/\n*.log\n.env\n");
        write(p, "target/old.o", "old object\n");
        Env { home, project }
    }

    fn p(&self) -> PathBuf {
        fs::canonicalize(self.project.path()).unwrap()
    }

    fn session(&self, backend: Backend) -> Session {
        let (choice, usable) = match backend {
            Backend::Overlay => (BackendChoice::Overlay, true),
            _ => (BackendChoice::Copy, false),
        };
        Session::create(self.home.path(), self.project.path(), choice, usable).unwrap()
    }
}

// The same `git` runner as the unit tests: hooks off, user and system config ignored.
#[path = "../src/test_git.rs"]
mod test_git;
use test_git::git;

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// Every entry of a tree: mode and content (or link target).
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let content = if m.file_type().is_symlink() {
                fs::read_link(e.path())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
                    .into_bytes()
            } else if m.is_file() {
                fs::read(e.path()).unwrap()
            } else {
                stack.push(e.path());
                Vec::new()
            };
            out.insert(rel, (m.mode(), content));
        }
    }
    out
}

/// overlayfs in a user namespace works here (probed once).
fn overlay_works() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        for d in ["l", "u", "w"] {
            fs::create_dir(t.path().join(d)).unwrap();
        }
        let p = t.path().display();
        let script = format!(
            "mount -t overlay overlay -o lowerdir={p}/l,upperdir={p}/u,workdir={p}/w,userxattr {p}/l && touch {p}/l/x"
        );
        let ok = Command::new("unshare")
            .args(["-Urm", "sh", "-c", &script])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        let ok = ok && t.path().join("u/x").exists();
        if !ok {
            eprintln!("overlayfs in a user namespace is not available here");
        }
        ok
    })
}

/// Says that `what` was not tested and why, on stderr (written directly, so the harness's
/// capture of a passing test cannot hide it; CI fails on the line), and fails the test unless
/// `GARUDA_ALLOW_NO_OVERLAY` is set.
fn overlay_not_tested(what: &str) {
    use std::io::Write;
    let why = "overlayfs in a user namespace does not work here";
    let _ = writeln!(std::io::stderr(), "NOT TESTED: {what} ({why})");
    assert!(
        std::env::var_os("GARUDA_ALLOW_NO_OVERLAY").is_some(),
        "NOT TESTED: {what} ({why}); set GARUDA_ALLOW_NO_OVERLAY=1 to accept that"
    );
}

/// The backends to run a behaviour test on.
fn backends() -> Vec<Backend> {
    let mut b = vec![Backend::PlainCopy];
    if overlay_works() {
        b.push(Backend::Overlay);
    } else {
        // Never a silent skip: a machine without overlayfs in a user namespace must say so.
        overlay_not_tested("the overlay backend");
    }
    b
}

/// Runs `script` as "the command" over the session's view, at the project's own path for the
/// overlay (as the executor mounts it) and in the copy for the copy backends.
fn run(session: &Session, script: &str) {
    let ok = match session.view() {
        StagedView::Overlay { lower, upper, work } => {
            let (l, u, w) = (lower.display(), upper.display(), work.display());
            let sh = format!(
                "mount -t overlay overlay -o lowerdir={l},upperdir={u},workdir={w},userxattr {l} && cd {l} && {script}"
            );
            Command::new("unshare")
                .args(["-Urm", "sh", "-c", &sh])
                .status()
                .unwrap()
                .success()
        }
        StagedView::Copy { dir } => Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .status()
            .unwrap()
            .success(),
    };
    assert!(ok, "command failed: {script}");
}

fn kinds(set: &ChangeSet) -> BTreeMap<String, ChangeKind> {
    set.changes
        .iter()
        .map(|c| (c.path.clone(), c.kind))
        .collect()
}

// ---- behaviour on every backend ----------------------------------------------------------

#[test]
fn change_list_kinds_on_every_backend() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(
            &s,
            "printf 'alpha\\nmore\\n' > a.txt && rm c.txt && echo new > new.txt && chmod 755 run.sh \
             && ln -s a.txt link && ln -s /etc/passwd evil && ln -s ../../x src/evil2 \
             && printf 'x\\000y' > bin.dat && mkdir -p target && echo o > target/new.o && echo l > app.log \
             && cat b.txt > /dev/null",
        );
        let set = s.changes(&mark).unwrap();
        let k = kinds(&set);
        let want: BTreeMap<String, ChangeKind> = [
            ("a.txt", ChangeKind::Modified),
            ("bin.dat", ChangeKind::Added),
            ("c.txt", ChangeKind::Deleted),
            ("evil", ChangeKind::LinkOutOfRoot),
            ("link", ChangeKind::LinkAdded),
            ("new.txt", ChangeKind::Added),
            ("run.sh", ChangeKind::ModeChanged),
            ("src/evil2", ChangeKind::LinkOutOfRoot),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b))
        .collect();
        assert_eq!(k, want, "{backend:?}");
        let bin = set.changes.iter().find(|c| c.path == "bin.dat").unwrap();
        assert!(bin.binary);
        let run_sh = set.changes.iter().find(|c| c.path == "run.sh").unwrap();
        assert_eq!(
            (run_sh.mode_before, run_sh.mode_after),
            (Some(0o100644), Some(0o100755))
        );
        assert_eq!(set.ignored_counts.get("target/"), Some(&1), "{backend:?}");
        assert_eq!(set.ignored_counts.get("app.log"), Some(&1), "{backend:?}");
        assert!(set.incomplete.is_none(), "{:?}", set.incomplete);
        assert!(
            !set.can_apply(),
            "a link out of the root is never appliable"
        );
        assert!(!set.is_empty());
        let text = render(&set, &s);
        assert!(text.contains("mode 100644 → 100755"), "{text}");
        assert!(text.contains("bin.dat (binary file changed)"), "{text}");
        assert!(text.contains("REFUSED   evil -> /etc/passwd"), "{text}");
        assert!(text.contains("deleted   c.txt"), "{text}");
        assert!(text.contains("+more"), "{text}");
        assert!(text.contains("target/: 1 file"), "{text}");
        match s.apply(&set) {
            Err(StagingError::LinkOutOfRoot { path }) => assert_eq!(path, "evil"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fs::read_to_string(env.p().join("a.txt")).unwrap(),
            "alpha\n"
        );
        s.close().unwrap();
    }
}

#[test]
fn a_command_that_changes_nothing_asks_nothing() {
    for backend in backends() {
        let env = Env::new();
        let s0 = env.session(backend);
        let mut s = s0;
        let mark = s.prepare().unwrap();
        // Reading, touching (overlay copies the file up) and writing the same bytes back.
        run(&s, "cat a.txt > /dev/null && touch b.txt && cp c.txt c.tmp && cat c.tmp > c.txt && rm c.tmp");
        let set = s.changes(&mark).unwrap();
        assert!(set.is_empty(), "{backend:?}: {set:?}");
        s.close().unwrap();
    }
}

#[test]
fn apply_brings_the_new_content_and_discard_leaves_the_project_byte_identical() {
    for backend in backends() {
        let env = Env::new();
        let before = snapshot(&env.p());
        let mut s = env.session(backend);

        // Discard: the project stays byte-identical, and so does the staged view.
        let mark = s.prepare().unwrap();
        run(&s, "echo changed > a.txt && rm b.txt && echo n > n.txt && chmod 700 run.sh && rm -rf src && mkdir -p x/y && echo z > x/y/z");
        let set = s.changes(&mark).unwrap();
        assert!(set.can_apply() && !set.is_empty());
        s.discard(&set).unwrap();
        assert_eq!(
            snapshot(&env.p()),
            before,
            "{backend:?}: discard changed the project"
        );
        let mark = s.prepare().unwrap();
        let again = s.changes(&mark).unwrap();
        assert!(
            again.changes.is_empty(),
            "{backend:?}: staging still differs after discard: {again:?}"
        );

        // Apply.
        let mark = s.prepare().unwrap();
        run(&s, "echo changed > a.txt && rm b.txt && echo n > n.txt && chmod 700 run.sh && ln -s a.txt l && mkdir -p x/y && echo z > x/y/z && rm -rf src/deep");
        let set = s.changes(&mark).unwrap();
        let applied = s.apply(&set).unwrap();
        assert_eq!(applied.deleted, vec!["b.txt", "src/deep/mod.rs"]);
        let p = env.p();
        assert_eq!(fs::read_to_string(p.join("a.txt")).unwrap(), "changed\n");
        assert!(!p.join("b.txt").exists());
        assert_eq!(fs::read_to_string(p.join("n.txt")).unwrap(), "n\n");
        assert_eq!(fs::read_to_string(p.join("x/y/z")).unwrap(), "z\n");
        assert_eq!(
            fs::metadata(p.join("run.sh")).unwrap().mode() & 0o777,
            0o700
        );
        assert_eq!(fs::read_link(p.join("l")).unwrap(), Path::new("a.txt"));
        assert!(
            !p.join("src/deep").exists(),
            "{backend:?}: the emptied folder stays"
        );
        assert!(p.join("src/lib.rs").exists());
        // No temporary file and no journal left.
        assert!(!fs::read_dir(&p).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("garuda-apply")));
        assert!(!s.dir().join(JOURNAL_COMMIT).exists() && !s.dir().join(JOURNAL_PENDING).exists());
        if backend == Backend::Overlay {
            // Applied entries left upper: the project shows through again.
            let left: Vec<_> = fs::read_dir(s.dir().join("upper"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(left.is_empty(), "upper still holds {left:?}");
        }
        // The next command sees the applied state and a list with nothing in it.
        let mark = s.prepare().unwrap();
        run(&s, "test \"$(cat a.txt)\" = changed && test ! -e b.txt");
        assert!(s.changes(&mark).unwrap().is_empty());
        s.close().unwrap();
    }
}

#[test]
fn a_folder_replaced_by_a_file_is_applied() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(&s, "rm -rf src && echo file > src");
        let set = s.changes(&mark).unwrap();
        let k = kinds(&set);
        assert_eq!(
            k.get("src"),
            Some(&ChangeKind::Added),
            "{backend:?} {set:?}"
        );
        assert_eq!(k.get("src/lib.rs"), Some(&ChangeKind::Deleted));
        assert_eq!(k.get("src/deep/mod.rs"), Some(&ChangeKind::Deleted));
        s.apply(&set).unwrap();
        assert_eq!(fs::read_to_string(env.p().join("src")).unwrap(), "file\n");
        s.close().unwrap();
    }
}

#[test]
fn ignored_build_output_stays_in_staging_and_never_reaches_the_project() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(&s, "mkdir -p target/debug && for i in 1 2 3; do echo $i > target/debug/o$i; done && echo x > a.txt && echo l > build.log");
        let set = s.changes(&mark).unwrap();
        assert_eq!(kinds(&set).keys().collect::<Vec<_>>(), vec!["a.txt"]);
        assert_eq!(set.ignored_counts.get("target/"), Some(&3));
        assert_eq!(set.ignored_counts.get("build.log"), Some(&1));
        assert!(render(&set, &s).contains("target/: 3 files"));
        s.apply(&set).unwrap();
        assert!(!env.p().join("target/debug").exists());
        assert!(!env.p().join("build.log").exists());

        // The next command sees its build output; a discard does not remove it either.
        let mark = s.prepare().unwrap();
        run(&s, "test -f target/debug/o3 && echo y > b.txt");
        let set = s.changes(&mark).unwrap();
        s.discard(&set).unwrap();
        let mark = s.prepare().unwrap();
        run(&s, "test -f target/debug/o1");
        let set = s.changes(&mark).unwrap();
        assert!(set.is_empty(), "{set:?}");
        assert!(!env.p().join("target/debug").exists());
        s.close().unwrap();
    }
}

#[test]
fn sensitive_files_are_named_even_when_ignored() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(
            &s,
            "echo SECRET=1 > .env && mkdir -p keys && echo k > keys/server.key",
        );
        let set = s.changes(&mark).unwrap();
        assert_eq!(set.sensitive, vec![".env", "keys/server.key"]);
        // .env is ignored: named, counted, never applied.
        assert_eq!(
            kinds(&set).keys().collect::<Vec<_>>(),
            vec!["keys/server.key"]
        );
        assert!(!set.is_empty());
        let text = render(&set, &s);
        assert!(
            text.contains(".env (ignored by git: kept in staging, never applied)"),
            "{text}"
        );
        // The shown key needs its own opt-in (see `sensitive_files_need_an_opt_in_of_their_own`);
        // the ignored `.env` is never applied, with it or not.
        s.apply_approved(&set, &[Guard::Sensitive]).unwrap();
        assert!(!env.p().join(".env").exists());
        assert_eq!(
            fs::read_to_string(env.p().join("keys/server.key")).unwrap(),
            "k\n"
        );
        s.close().unwrap();
    }
}

/// Neither the old nor the new content of a sensitive file is printed, only size and hash;
/// the ordinary file of the same change is diffed (the control: the same render prints
/// content).
#[test]
fn a_sensitive_file_s_content_is_never_printed_only_its_size_and_hash() {
    let env = Env::new();
    write(&env.p(), "deploy.pem", "OLD-SECRET-KEY\n");
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(
        &s,
        "echo NEW-SECRET-KEY > deploy.pem && echo plain-text > notes.txt",
    );
    let set = s.changes(&mark).unwrap();
    let text = render(&set, &s);
    assert!(!text.contains("OLD-SECRET-KEY"), "{text}");
    assert!(!text.contains("NEW-SECRET-KEY"), "{text}");
    // sha256("OLD-SECRET-KEY\n") and sha256("NEW-SECRET-KEY\n"), first 16 hex digits.
    let (old, new) = (sha256_16("OLD-SECRET-KEY\n"), sha256_16("NEW-SECRET-KEY\n"));
    assert!(
        text.contains(&format!(
            "  deploy.pem: before: 15 bytes, sha256 {old}; after: 15 bytes, sha256 {new}"
        )),
        "{text}"
    );
    assert!(
        text.contains("  modified  deploy.pem (sensitive: content not shown, needs its own yes)"),
        "{text}"
    );
    assert!(text.contains("+plain-text"), "{text}");
    s.close().unwrap();
}

/// The first 16 hex digits of the SHA-256 of `text`, computed by `sha256sum` (another
/// implementation than the one under test).
fn sha256_16(text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..16].to_string()
}

#[test]
fn a_tracked_file_stays_shown_under_an_ignore_rule() {
    let env = Env::new();
    let p = env.p();
    write(&p, "keep.log", "tracked\n");
    assert!(git(&p, &["init", "-q"]), "git is needed for this test");
    assert!(git(&p, &["add", "-A"]));
    assert!(git(&p, &["add", "-f", "keep.log"]));
    for backend in backends() {
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(&s, "echo changed > keep.log && echo new > other.log && git status > /dev/null 2>&1; echo x > .git/description");
        let set = s.changes(&mark).unwrap();
        assert_eq!(
            kinds(&set).keys().collect::<Vec<_>>(),
            vec!["keep.log"],
            "{backend:?}"
        );
        assert_eq!(set.ignored_counts.get("other.log"), Some(&1));
        // The overlay lists what the command wrote under `.git/` (never applied); the copy
        // backends do not compare git's storage at all.
        if backend == Backend::Overlay {
            assert!(
                set.ignored_counts.get(".git/").is_some_and(|&n| n >= 1),
                "{:?}",
                set.ignored_counts
            );
        } else {
            assert_eq!(set.ignored_counts.get(".git/"), None);
        }
        s.discard(&set).unwrap();
        s.close().unwrap();
    }
}

#[test]
fn control_characters_are_rendered_visibly() {
    let env = Env::new();
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(
        &s,
        "printf 'ok\\033[2K\\rhidden\\n' > a.txt && printf 'x' > \"$(printf 'n\\033me')\"",
    );
    let set = s.changes(&mark).unwrap();
    let text = render(&set, &s);
    assert!(!text.contains('\u{1b}'), "raw ESC in the output: {text:?}");
    assert!(text.contains("+ok\\e[2K\\rhidden"), "{text}");
    assert!(text.contains("added     n\\eme"), "{text}");
    // The content holds real control characters, and the diff says so (a literal `\e` in
    // source code would print alike).
    assert!(
        text.contains(
            "a.txt: the new content holds 2 control, bidirectional or invisible characters"
        ),
        "{text}"
    );
    s.close().unwrap();
}

/// A file name is one line of the list, whatever it holds: a newline cannot add a line that
/// reads as Garuda's, a carriage return cannot return over it, a bidirectional override cannot
/// reorder it, and a backslash is doubled so a literal `\n` differs from a newline.
#[test]
fn names_cannot_forge_lines_of_the_change_list() {
    const FORGED: &str = "The change list is INCOMPLETE (forged): it can only be discarded.";
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(
            &s,
            &format!(
                "printf x > \"$(printf 'n\\n{FORGED}')\" && printf y > \"$(printf 'r\\rFAKE')\" \
                 && printf z > \"$(printf 'evil\\342\\200\\256txt.exe')\" && printf w > 'lit\\nname'"
            ),
        );
        let set = s.changes(&mark).unwrap();
        let names: Vec<&str> = set.changes.iter().map(|c| c.path.as_str()).collect();
        // The names are really what the command made (the negative control's input).
        let newline_name = format!("n\n{FORGED}");
        assert!(
            names.contains(&newline_name.as_str()),
            "{backend:?}: {names:?}"
        );
        assert!(names.contains(&"r\rFAKE"), "{names:?}");
        assert!(names.contains(&"evil\u{202e}txt.exe"), "{names:?}");
        assert!(names.contains(&"lit\\nname"), "{names:?}");
        let text = render(&set, &s);
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("The change list is INCOMPLETE")),
            "{backend:?}: a forged line: {text}"
        );
        assert!(
            text.contains(&format!("  added     n\\n{FORGED}\n")),
            "{text}"
        );
        assert!(text.contains("  added     r\\rFAKE\n"), "{text}");
        assert!(
            text.contains("  added     evil\\u{202e}txt.exe\n"),
            "{text}"
        );
        assert!(text.contains("  added     lit\\\\nname\n"), "{text}");
        assert!(text.contains(&format!("+++ b/n\\n{FORGED}")), "{text}");
        assert!(
            !text.contains('\r') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        // Negative control: the same entry printed raw forges the line.
        let raw = format!("  added     {newline_name}\n");
        assert!(raw
            .lines()
            .any(|l| l.starts_with("The change list is INCOMPLETE")));
        s.discard(&set).unwrap();
        s.close().unwrap();
    }
}

#[test]
fn the_diff_is_cut_but_the_file_list_is_complete() {
    let env = Env::new();
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(&s, "for i in $(seq 1 40); do seq 1 1000 > f$i.txt; done");
    let set = s.changes(&mark).unwrap();
    let text = render(&set, &s);
    assert!(
        text.contains("[diff cut at 60000 characters"),
        "cut note missing"
    );
    for i in 1..=40 {
        assert!(
            text.contains(&format!("added     f{i}.txt")),
            "f{i}.txt missing from the list"
        );
    }
    assert!(text.len() < 70_000);
    s.close().unwrap();
}

#[test]
fn the_entry_limit_makes_the_list_incomplete_and_only_discard_works() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        s.set_entry_limit(if backend == Backend::Overlay { 5 } else { 25 });
        let mark = s.prepare().unwrap();
        run(
            &s,
            "mkdir many && for i in $(seq 1 30); do echo $i > many/$i; done",
        );
        let set = s.changes(&mark).unwrap();
        assert!(
            set.incomplete
                .as_deref()
                .is_some_and(|r| r.contains("limit")),
            "{backend:?}: {set:?}"
        );
        assert!(!set.can_apply() && !set.is_empty());
        assert!(render(&set, &s).contains("INCOMPLETE"));
        assert!(matches!(
            s.apply(&set),
            Err(StagingError::Incomplete { .. })
        ));
        assert!(!env.p().join("many").exists());
        s.discard(&set).unwrap();
        s.set_entry_limit(10_000);
        let mark = s.prepare().unwrap();
        assert!(
            s.changes(&mark).unwrap().is_empty(),
            "{backend:?}: discard of an incomplete list resets staging"
        );
        s.close().unwrap();
    }
}

#[test]
fn a_conflict_refuses_apply_and_keeps_the_change() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(
            &s,
            "echo staged > a.txt && echo staged > b.txt && echo new > created.txt",
        );
        // The developer edits a.txt and creates created.txt while the command runs.
        write(&env.p(), "a.txt", "developer\n");
        write(&env.p(), "created.txt", "developer\n");
        let set = s.changes(&mark).unwrap();
        match s.apply(&set) {
            Err(StagingError::Conflict { paths }) => {
                assert_eq!(paths, vec!["a.txt", "created.txt"], "{backend:?}")
            }
            other => panic!("{backend:?}: {other:?}"),
        }
        assert_eq!(
            fs::read_to_string(env.p().join("a.txt")).unwrap(),
            "developer\n"
        );
        assert_eq!(
            fs::read_to_string(env.p().join("b.txt")).unwrap(),
            "bravo\n",
            "nothing applied"
        );
        // The staged change is kept for another question.
        let again = s.changes(&mark).unwrap();
        assert!(kinds(&again).contains_key("b.txt"));
        s.close().unwrap();
    }
}

#[test]
fn edits_between_commands_are_visible_to_the_next_command() {
    for backend in backends() {
        let env = Env::new();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(&s, "mkdir -p target && echo staged > target/cache");
        let set = s.changes(&mark).unwrap();
        assert!(set.is_empty());
        // Garuda's own edit and the developer's, including a path staging kept an ignored
        // file at: the project wins.
        write(&env.p(), "a.txt", "edited by garuda\n");
        write(&env.p(), "fresh.txt", "new on the host\n");
        fs::remove_file(env.p().join("c.txt")).unwrap();
        write(&env.p(), "target/cache", "host build\n");
        let mark = s.prepare().unwrap();
        run(
            &s,
            "test \"$(cat a.txt)\" = 'edited by garuda' && test -f fresh.txt && test ! -e c.txt && test \"$(cat target/cache)\" = 'host build'",
        );
        let set = s.changes(&mark).unwrap();
        assert!(set.is_empty(), "{backend:?}: {set:?}");
        s.close().unwrap();
    }
}

#[test]
fn a_staged_file_changed_after_listing_is_not_applied() {
    let env = Env::new();
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(&s, "echo shown > a.txt");
    let set = s.changes(&mark).unwrap();
    // Something rewrites the staged file after the user saw the diff.
    let StagedView::Copy { dir } = s.view() else {
        panic!()
    };
    fs::write(dir.join("a.txt"), "not shown\n").unwrap();
    assert!(matches!(s.apply(&set), Err(StagingError::StagedChanged { path }) if path == "a.txt"));
    assert_eq!(
        fs::read_to_string(env.p().join("a.txt")).unwrap(),
        "alpha\n"
    );
    s.close().unwrap();
}

// ---- overlay details without a mount --------------------------------------------------------

fn upper(s: &Session) -> PathBuf {
    s.dir().join("upper")
}

fn xattr_whiteout(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, "").unwrap();
    xattr::set(path, "user.overlay.whiteout", b"").unwrap();
}

#[test]
fn overlay_whiteouts_and_opaque_folders_written_by_hand() {
    let env = Env::new();
    write(&env.p(), "docs/one.md", "1\n");
    write(&env.p(), "docs/two.md", "2\n");
    let mut s = env.session(Backend::Overlay);
    let mark = s.prepare().unwrap();
    let u = upper(&s);
    // A whiteout over a file and one over a whole folder.
    xattr_whiteout(&u.join("c.txt"));
    xattr_whiteout(&u.join("src/deep"));
    // An opaque `target` folder: the command replaced it; old.o is gone.
    fs::create_dir_all(u.join("target")).unwrap();
    xattr::set(u.join("target"), "user.overlay.opaque", b"y").unwrap();
    fs::write(u.join("target/new.o"), "n").unwrap();
    // An opaque folder over a tracked folder.
    fs::create_dir_all(u.join("docs")).unwrap();
    xattr::set(u.join("docs"), "user.overlay.opaque", b"y").unwrap();
    fs::write(u.join("docs/two.md"), "2\n").unwrap();
    let set = s.changes(&mark).unwrap();
    let k = kinds(&set);
    assert_eq!(k.get("c.txt"), Some(&ChangeKind::Deleted));
    assert_eq!(k.get("src/deep/mod.rs"), Some(&ChangeKind::Deleted));
    assert_eq!(k.get("docs/one.md"), Some(&ChangeKind::Deleted));
    assert!(!k.contains_key("docs/two.md"), "same content: no change");
    assert_eq!(
        set.ignored_counts.get("target/"),
        Some(&2),
        "old.o deleted + new.o added"
    );

    s.apply(&set).unwrap();
    let p = env.p();
    assert!(
        !p.join("c.txt").exists()
            && !p.join("src/deep").exists()
            && !p.join("docs/one.md").exists()
    );
    assert!(p.join("docs/two.md").exists() && p.join("target/old.o").exists());
    // Applied entries left upper; `target` stays opaque (its hidden old.o is still in the
    // project); `docs` is no longer opaque (its copied-up two.md equals the project's).
    assert!(
        !u.join("c.txt").exists() && !u.join("src").exists(),
        "{:?}",
        snapshot(&u)
    );
    assert_eq!(
        xattr::get(u.join("docs"), "user.overlay.opaque").unwrap(),
        None
    );
    assert!(xattr::get(u.join("target"), "user.overlay.opaque")
        .unwrap()
        .is_some());
    assert!(u.join("target/new.o").exists());
    let mark = s.prepare().unwrap();
    let set = s.changes(&mark).unwrap();
    assert!(set.changes.is_empty(), "{set:?}");
    s.close().unwrap();
}

#[test]
fn overlay_discard_restores_the_view() {
    let env = Env::new();
    let before = snapshot(&env.p());
    let mut s = env.session(Backend::Overlay);
    let mark = s.prepare().unwrap();
    let u = upper(&s);
    xattr_whiteout(&u.join("src"));
    fs::create_dir_all(u.join("new/dir")).unwrap();
    fs::write(u.join("new/dir/f"), "f").unwrap();
    fs::write(u.join("a.txt"), "changed").unwrap();
    fs::create_dir_all(u.join("target")).unwrap();
    fs::write(u.join("target/kept.o"), "k").unwrap();
    let set = s.changes(&mark).unwrap();
    assert_eq!(kinds(&set).len(), 4, "{set:?}");
    s.discard(&set).unwrap();
    assert_eq!(snapshot(&env.p()), before);
    let left: Vec<_> = snapshot(&u).into_keys().collect();
    assert_eq!(
        left,
        vec!["target", "target/kept.o"],
        "only the ignored file stays"
    );
    s.close().unwrap();
}

#[test]
fn overlay_character_device_whiteout() {
    let env = Env::new();
    let mut s = env.session(Backend::Overlay);
    let mark = s.prepare().unwrap();
    let ok = Command::new("mknod")
        .arg(upper(&s).join("b.txt"))
        .args(["c", "0", "0"])
        .status()
        .is_ok_and(|st| st.success());
    // Linux lets any user make a 0:0 character device (the whiteout) since 5.8.
    assert!(ok, "mknod of a 0:0 whiteout failed");
    let set = s.changes(&mark).unwrap();
    assert_eq!(kinds(&set).get("b.txt"), Some(&ChangeKind::Deleted));
    s.apply(&set).unwrap();
    assert!(!env.p().join("b.txt").exists());
    assert!(!upper(&s).join("b.txt").exists());
    s.close().unwrap();
}

#[test]
fn real_overlay_mount_write_and_delete() {
    if !overlay_works() {
        overlay_not_tested("a real overlay mount: write and delete");
        return;
    }
    let env = Env::new();
    let mut s = env.session(Backend::Overlay);
    let mark = s.prepare().unwrap();
    // A write to the project's absolute path lands in upper too.
    let abs = env.p().join("abs.txt");
    run(
        &s,
        &format!("echo via-abs > {} && rm b.txt && rm -r src", abs.display()),
    );
    assert!(!abs.exists(), "the project was written");
    assert!(env.p().join("b.txt").exists());
    let set = s.changes(&mark).unwrap();
    let k = kinds(&set);
    assert_eq!(k.get("abs.txt"), Some(&ChangeKind::Added));
    assert_eq!(k.get("b.txt"), Some(&ChangeKind::Deleted));
    assert_eq!(k.get("src/lib.rs"), Some(&ChangeKind::Deleted));
    assert_eq!(k.get("src/deep/mod.rs"), Some(&ChangeKind::Deleted));
    assert_eq!(k.len(), 4);
    s.close().unwrap();
}

// ---- setup, caps, cleanup ------------------------------------------------------------------

#[test]
fn backend_selection_and_no_silent_fallback() {
    let env = Env::new();
    assert!(matches!(
        Session::create(
            env.home.path(),
            env.project.path(),
            BackendChoice::Overlay,
            false
        ),
        Err(StagingError::OverlayUnavailable)
    ));
    let s = Session::create(
        env.home.path(),
        env.project.path(),
        BackendChoice::Auto,
        true,
    )
    .unwrap();
    assert_eq!(s.backend(), Backend::Overlay);
    assert_eq!(fs::metadata(s.dir()).unwrap().mode() & 0o777, 0o700);
    let name = s.dir().file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("{}-", std::process::id())),
        "{name}"
    );
    assert!(matches!(s.view(), StagedView::Overlay { lower, .. } if lower == env.p()));
    s.close().unwrap();
    let s = Session::create(
        env.home.path(),
        env.project.path(),
        BackendChoice::Auto,
        false,
    )
    .unwrap();
    assert!(matches!(
        s.backend(),
        Backend::ReflinkCopy | Backend::PlainCopy
    ));
    let StagedView::Copy { dir } = s.view() else {
        panic!()
    };
    assert_eq!(snapshot(&dir), snapshot(&env.p()), "the copy is complete");
    let sdir = s.dir().to_path_buf();
    s.close().unwrap();
    assert!(!sdir.exists());
}

#[test]
fn a_plain_copy_over_the_cap_is_refused_and_leaves_no_folder() {
    let env = Env::new();
    match Session::create_with_cap(
        env.home.path(),
        env.project.path(),
        BackendChoice::Copy,
        false,
        10,
    ) {
        Err(e) => {
            assert!(
                matches!(e, StagingError::TooLarge { cap: 10, size, .. } if size > 10),
                "{e}"
            );
            assert!(e.to_string().contains("10-byte limit"), "{e}");
            let left: Vec<_> = fs::read_dir(env.home.path().join("staging"))
                .unwrap()
                .collect();
            assert!(left.is_empty(), "a folder was left: {left:?}");
        }
        // A reflink copy has no cap.
        Ok(s) => {
            assert_eq!(s.backend(), Backend::ReflinkCopy);
            s.close().unwrap();
        }
    }
}

#[test]
fn a_project_inside_the_staging_home_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("staging/proj");
    fs::create_dir_all(&project).unwrap();
    assert!(matches!(
        Session::create(home.path(), &project, BackendChoice::Copy, false),
        Err(StagingError::Overlapping { .. })
    ));
}

/// A pid that is surely not running: a child that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn dead_sessions_are_removed_even_with_a_mode_000_work_folder() {
    let env = Env::new();
    let staging = env.home.path().join("staging");
    let dead = staging.join(format!("{}-00aa11bb22cc33dd", dead_pid()));
    fs::create_dir_all(dead.join("work/work")).unwrap();
    fs::create_dir_all(dead.join("upper/x")).unwrap();
    fs::write(dead.join("upper/x/f"), "f").unwrap();
    fs::set_permissions(dead.join("work/work"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(dead.join("upper/x"), fs::Permissions::from_mode(0o000)).unwrap();
    // A live session (this process) and a folder that is not a session stay.
    let live = staging.join(format!("{}-feedfeedfeedfeed", std::process::id()));
    fs::create_dir_all(&live).unwrap();
    fs::create_dir_all(staging.join("not-a-session")).unwrap();
    let s = env.session(Backend::Overlay);
    assert!(!dead.exists());
    assert!(live.exists() && staging.join("not-a-session").exists());
    assert!(s
        .recovered()
        .iter()
        .any(|r| r.action == RecoveryAction::RemovedDeadSession
            && r.session_dir.file_name() == dead.file_name()));
    s.close().unwrap();
}

// ---- crash safety --------------------------------------------------------------------------

/// The folder of a session whose process has ended (recovery handles it).
fn dead_session(env: &Env) -> PathBuf {
    let dead = env
        .home
        .path()
        .join("staging")
        .join(format!("{}-0123456789abcdef", dead_pid()));
    fs::create_dir_all(&dead).unwrap();
    dead
}

/// Writes a journal by hand for a dead session, as a crash would leave it.
fn hand_journal(env: &Env, name: &str, with_commit: bool) -> PathBuf {
    let p = env.p();
    let dead = dead_session(env);
    let temp_a = p.join(".a.txt.garuda-apply-x");
    fs::write(&temp_a, "new a\n").unwrap();
    let temp_n = p.join("sub/.n.txt.garuda-apply-x");
    fs::create_dir_all(p.join("sub")).unwrap();
    fs::write(&temp_n, "new n\n").unwrap();
    let journal = serde_json::json!({
        "version": 1,
        "project": p,
        "entries": [
            {"target": p.join("a.txt"), "temp": temp_a},
            {"target": p.join("sub/n.txt"), "temp": temp_n},
            {"target": p.join("c.txt"), "delete": true},
        ],
        "rmdirs": [],
        "created_dirs": [p.join("sub")],
    });
    let file = dead.join(if with_commit {
        JOURNAL_COMMIT
    } else {
        JOURNAL_PENDING
    });
    fs::write(file, serde_json::to_vec(&journal).unwrap()).unwrap();
    let _ = name;
    dead
}

#[test]
fn a_committed_journal_is_rolled_forward() {
    let env = Env::new();
    let dead = hand_journal(&env, "commit", true);
    // Half done already: the first rename happened before the crash.
    fs::rename(env.p().join(".a.txt.garuda-apply-x"), env.p().join("a.txt")).unwrap();
    let r = recover(env.home.path()).unwrap();
    assert_eq!(r[0].action, RecoveryAction::RolledForward);
    assert!(r[0].to_string().contains("finished an interrupted apply"));
    let p = env.p();
    assert_eq!(fs::read_to_string(p.join("a.txt")).unwrap(), "new a\n");
    assert_eq!(fs::read_to_string(p.join("sub/n.txt")).unwrap(), "new n\n");
    assert!(!p.join("c.txt").exists());
    assert!(!dead.exists());
    // Idempotent: nothing left to do.
    assert!(recover(env.home.path()).unwrap().is_empty());
}

#[test]
fn a_pending_journal_is_rolled_back() {
    let env = Env::new();
    let before_a = fs::read(env.p().join("a.txt")).unwrap();
    let dead = hand_journal(&env, "pending", false);
    let r = recover(env.home.path()).unwrap();
    assert_eq!(r[0].action, RecoveryAction::RolledBack);
    assert_eq!(r[0].files, 2);
    let p = env.p();
    assert_eq!(fs::read(p.join("a.txt")).unwrap(), before_a);
    assert!(p.join("c.txt").exists());
    assert!(
        !p.join("sub").exists(),
        "the folder made for the temp is gone"
    );
    assert!(!p.join(".a.txt.garuda-apply-x").exists());
    assert!(!dead.exists());
}

#[test]
fn a_journal_pointing_outside_its_project_is_refused() {
    let env = Env::new();
    let dead = dead_session(&env);
    let victim = env.home.path().join("victim");
    fs::write(&victim, "keep").unwrap();
    let journal = serde_json::json!({
        "version": 1, "project": env.p(),
        "entries": [{"target": victim, "delete": true}], "rmdirs": [], "created_dirs": [],
    });
    fs::write(
        dead.join(JOURNAL_COMMIT),
        serde_json::to_vec(&journal).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        recover(env.home.path()),
        Err(StagingError::Journal { .. })
    ));
    assert!(victim.exists());
    assert!(
        dead.join(JOURNAL_COMMIT).exists(),
        "kept for a person to look at"
    );
}

/// A committed journal that deletes `sub/victim.txt` and renames a temporary file in `sub/`,
/// for a dead session; returns (session folder, outside folder). `sub` is then swapped for a
/// link to a folder outside the project that holds a `victim.txt` and a planted temporary
/// file of the same name.
fn journal_through_a_link(env: &Env) -> (PathBuf, PathBuf) {
    let p = env.p();
    let dead = dead_session(env);
    fs::create_dir_all(p.join("sub")).unwrap();
    fs::write(p.join("sub/victim.txt"), "inside\n").unwrap();
    fs::write(p.join("sub/.n.txt.garuda-apply-x"), "new n\n").unwrap();
    let journal = serde_json::json!({
        "version": 1,
        "project": p,
        "entries": [
            {"target": p.join("sub/victim.txt"), "delete": true},
            {"target": p.join("sub/n.txt"), "temp": p.join("sub/.n.txt.garuda-apply-x")},
        ],
        "rmdirs": [],
        "created_dirs": [],
    });
    fs::write(
        dead.join(JOURNAL_COMMIT),
        serde_json::to_vec(&journal).unwrap(),
    )
    .unwrap();
    let outside = env.home.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("victim.txt"), "keep me\n").unwrap();
    fs::write(outside.join(".n.txt.garuda-apply-x"), "planted\n").unwrap();
    fs::rename(p.join("sub"), p.join("sub.away")).unwrap();
    std::os::unix::fs::symlink(&outside, p.join("sub")).unwrap();
    (dead, outside)
}

#[test]
fn recovery_never_rolls_forward_through_a_link_and_keeps_the_journal() {
    let env = Env::new();
    let (dead, outside) = journal_through_a_link(&env);
    let err = recover(env.home.path()).unwrap_err();
    match &err {
        StagingError::RecoveryStopped { journal, source } => {
            assert_eq!(journal, &dead.join(JOURNAL_COMMIT));
            assert!(
                matches!(
                    source.as_ref(),
                    StagingError::UnsafeProjectPath { at, found: FoundKind::Link, .. } if at == "sub"
                ),
                "{source}"
            );
        }
        other => panic!("not stopped: {other}"),
    }
    assert!(
        err.to_string().contains("the journal was left in place"),
        "{err}"
    );
    assert!(dead.join(JOURNAL_COMMIT).exists(), "the journal stays");
    // Nothing outside was touched; nothing inside either (stopped before the first step).
    assert_eq!(
        fs::read_to_string(outside.join("victim.txt")).unwrap(),
        "keep me\n"
    );
    assert!(outside.join(".n.txt.garuda-apply-x").exists());
    assert!(!outside.join("n.txt").exists());
    assert!(env.p().join("sub.away/victim.txt").exists());
    // Restoring the folder lets the next start finish the apply.
    fs::remove_file(env.p().join("sub")).unwrap();
    fs::rename(env.p().join("sub.away"), env.p().join("sub")).unwrap();
    let r = recover(env.home.path()).unwrap();
    assert_eq!(r[0].action, RecoveryAction::RolledForward);
    assert!(!env.p().join("sub/victim.txt").exists());
    assert_eq!(
        fs::read_to_string(env.p().join("sub/n.txt")).unwrap(),
        "new n\n"
    );
    assert_eq!(
        fs::read_to_string(outside.join("victim.txt")).unwrap(),
        "keep me\n"
    );
}

#[test]
fn path_based_recovery_steps_through_the_same_link_do_reach_outside() {
    // Negative control of the test above: the journal's steps resolved by name (as recovery
    // used to) delete and write outside the project.
    let env = Env::new();
    let (_dead, outside) = journal_through_a_link(&env);
    let p = env.p();
    fs::remove_file(p.join("sub/victim.txt")).unwrap();
    fs::rename(p.join("sub/.n.txt.garuda-apply-x"), p.join("sub/n.txt")).unwrap();
    assert!(!outside.join("victim.txt").exists(), "deleted outside");
    assert_eq!(
        fs::read_to_string(outside.join("n.txt")).unwrap(),
        "planted\n"
    );
}

/// [`hand_journal`]'s journal file, changed by `edit`.
fn edited_journal(
    env: &Env,
    with_commit: bool,
    edit: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let dead = hand_journal(env, "", with_commit);
    let file = dead.join(if with_commit {
        JOURNAL_COMMIT
    } else {
        JOURNAL_PENDING
    });
    let mut j: serde_json::Value = serde_json::from_slice(&fs::read(&file).unwrap()).unwrap();
    edit(&mut j);
    fs::write(&file, serde_json::to_vec(&j).unwrap()).unwrap();
    file
}

#[test]
fn a_journal_of_another_format_version_is_refused_and_kept() {
    let env = Env::new();
    let file = edited_journal(&env, true, |j| j["version"] = serde_json::json!(2));
    let before = snapshot(&env.p());
    let err = recover(env.home.path()).unwrap_err();
    assert!(matches!(err, StagingError::Journal { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("format version 2 is not one this Garuda reads"),
        "{err}"
    );
    assert!(file.exists());
    assert_eq!(snapshot(&env.p()), before);
}

#[test]
fn a_journal_renaming_across_folders_is_refused() {
    // Every rename stays in one held folder: a temporary file elsewhere is not a journal this
    // Garuda wrote.
    let env = Env::new();
    let other_folder = env.p().join("sub/.a.txt.garuda-apply-x");
    let file = edited_journal(&env, true, |j| {
        j["entries"][0]["temp"] = serde_json::json!(other_folder)
    });
    let err = recover(env.home.path()).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not a temporary file of an apply next to"),
        "{err}"
    );
    assert!(file.exists());
}

#[test]
fn a_pending_journal_this_garuda_does_not_read_is_kept() {
    // Not torn (it is JSON): another format version, or a path outside its project. Its
    // temporary files are not guessed at; the journal stays for a person, and every start
    // says so.
    for (what, edit) in [
        (
            "version",
            Box::new(|j: &mut serde_json::Value| j["version"] = serde_json::json!(2))
                as Box<dyn FnOnce(&mut serde_json::Value)>,
        ),
        (
            "outside",
            Box::new(|j: &mut serde_json::Value| {
                j["created_dirs"] = serde_json::json!(["/elsewhere"])
            }),
        ),
    ] {
        let env = Env::new();
        let file = edited_journal(&env, false, edit);
        let before = snapshot(&env.p());
        let err = recover(env.home.path()).unwrap_err();
        assert!(
            matches!(&err, StagingError::Journal { path, .. } if *path == file),
            "{what}: {err}"
        );
        assert!(err.to_string().contains("it was left in place"), "{err}");
        assert!(file.exists(), "{what}: the journal stays");
        assert_eq!(snapshot(&env.p()), before, "{what}: nothing removed");
    }
}

#[test]
fn a_torn_pending_journal_is_removed() {
    // Control of the test above: a pending journal cut short by a crash (not JSON) was torn
    // before any temporary file existed, so it goes, and the dead session with it.
    let env = Env::new();
    let dead = dead_session(&env);
    let file = dead.join(JOURNAL_PENDING);
    fs::write(&file, b"{\n  \"version\": 1,\n  \"project\": \"/p").unwrap();
    let before = snapshot(&env.p());
    let r = recover(env.home.path()).unwrap();
    assert_eq!(r[0].action, RecoveryAction::RolledBack);
    assert_eq!((r[0].project.as_deref(), r[0].files), (None, 0));
    assert!(!dead.exists());
    assert_eq!(snapshot(&env.p()), before);
}

const CHILD_HOME: &str = "GARUDA_STAGING_TEST_HOME";
const CHILD_PROJECT: &str = "GARUDA_STAGING_TEST_PROJECT";

/// Not a test of its own: the child process of the failpoint tests. It stages four changes
/// (by hand, overlay layout) and applies them; the failpoint aborts the process mid-apply.
/// Ignored, so that a normal run does not count it as a test that passed without testing.
#[test]
#[ignore = "the child process of the failpoint tests (crash_apply runs it with --ignored)"]
fn failpoint_child() {
    let (Ok(home), Ok(project)) = (std::env::var(CHILD_HOME), std::env::var(CHILD_PROJECT)) else {
        return;
    };
    let mut s = Session::create(
        Path::new(&home),
        Path::new(&project),
        BackendChoice::Overlay,
        true,
    )
    .unwrap();
    let mark = s.prepare().unwrap();
    let u = upper(&s);
    fs::write(u.join("a.txt"), "new a\n").unwrap();
    fs::write(u.join("b.txt"), "new b\n").unwrap();
    fs::write(u.join("n.txt"), "new n\n").unwrap();
    xattr_whiteout(&u.join("c.txt"));
    let set = s.changes(&mark).unwrap();
    assert_eq!(set.changes.len(), 4);
    s.apply(&set).unwrap();
    panic!("the failpoint did not fire");
}

fn crash_apply(failpoint: &str) -> (Env, BTreeMap<String, (u32, Vec<u8>)>) {
    let env = Env::new();
    let before = snapshot(&env.p());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "failpoint_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_HOME, env.home.path())
        .env(CHILD_PROJECT, env.project.path())
        .env(FAILPOINT_ENV, failpoint)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the child did not crash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("did not fire"));
    (env, before)
}

#[test]
fn a_crash_after_the_first_rename_is_finished_at_the_next_start() {
    let (env, before) = crash_apply("apply-after-first-rename");
    let p = env.p();
    // Half-applied on disk: the deletion and the first rename only.
    assert_eq!(fs::read_to_string(p.join("a.txt")).unwrap(), "new a\n");
    assert_eq!(fs::read_to_string(p.join("b.txt")).unwrap(), "bravo\n");
    assert!(!p.join("c.txt").exists() && !p.join("n.txt").exists());
    // The next start finishes it: fully new.
    let s = env.session(Backend::Overlay);
    assert!(
        s.recovered()
            .iter()
            .any(|r| r.action == RecoveryAction::RolledForward),
        "{:?}",
        s.recovered()
    );
    assert_eq!(fs::read_to_string(p.join("b.txt")).unwrap(), "new b\n");
    assert_eq!(fs::read_to_string(p.join("n.txt")).unwrap(), "new n\n");
    let mut want = before;
    want.remove("c.txt");
    let now = snapshot(&p);
    assert_eq!(now.len(), want.len() + 1, "{now:?}");
    assert!(!now.keys().any(|k| k.contains("garuda-apply")));
    s.close().unwrap();
}

#[test]
fn a_crash_before_the_commit_is_rolled_back_at_the_next_start() {
    let (env, before) = crash_apply("apply-before-commit");
    let p = env.p();
    // Temporary files are there, the project files are not touched.
    assert!(snapshot(&p).keys().any(|k| k.contains("garuda-apply")));
    let r = recover(env.home.path()).unwrap();
    assert!(
        r.iter()
            .any(|r| r.action == RecoveryAction::RolledBack && r.files == 3),
        "{r:?}"
    );
    assert_eq!(snapshot(&p), before, "fully old");
}

// ---- protected paths: `.git` never applied, `.garuda` only with its own question -----------

/// A project with every kind of `.git` entry, a submodule pointer and Garuda's settings.
fn protected_env() -> Env {
    let env = Env::new();
    let p = env.p();
    for (rel, content) in [
        (".git/HEAD", "ref: refs/heads/main\n"),
        (".git/config", "[core]\n\tbare = false\n"),
        (".git/hooks/pre-commit.sample", "#!/bin/sh\n"),
        (".git/objects/info/packs", ""),
        (
            ".git/refs/heads/main",
            "0000000000000000000000000000000000000000\n",
        ),
        (".git/worktrees/wt/commondir", "../..\n"),
        (".git/worktrees/wt/gitdir", "/elsewhere/wt/.git\n"),
        (".git/modules/m/config", "[core]\n"),
        ("sub/.git", "gitdir: ../.git/modules/m\n"),
        (".garuda/settings.json", "{}\n"),
        ("lookalike/.gitx/config", "[core]\n"),
    ] {
        write(&p, rel, content);
    }
    env
}

#[test]
fn a_staged_change_under_any_git_path_is_never_applied() {
    // Each row is what a command does to one kind of git path; `note.txt` rides along so that
    // apply has something to do, and the lookalike (a folder not named `.git`) is the control:
    // the same write outside `.git` is applied.
    let rows: [(&str, &str); 17] = [
        ("new hook", "mkdir -p .git/hooks && echo x > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit"),
        ("config", "echo '[core] fsmonitor = x' >> .git/config"),
        ("config.worktree", "echo x > .git/config.worktree"),
        ("commondir", "echo ../evil > .git/commondir"),
        ("worktree config", "echo x > .git/worktrees/wt/config.worktree"),
        ("worktree commondir", "echo ../../evil > .git/worktrees/wt/commondir"),
        ("module hook", "mkdir -p .git/modules/m/hooks && echo x > .git/modules/m/hooks/post-checkout"),
        ("info", "mkdir -p .git/info && echo '* filter=x' > .git/info/attributes"),
        ("object", "mkdir -p .git/objects/ab && echo x > .git/objects/ab/cdef"),
        ("ref", "echo 1111111111111111111111111111111111111111 > .git/refs/heads/x"),
        ("HEAD", "echo 'ref: refs/heads/x' > .git/HEAD"),
        ("index", "echo x > .git/index"),
        ("future file", "echo x > .git/future-config"),
        ("pointer file", "echo 'gitdir: ../evil' > sub/.git"),
        ("new nested repository", "mkdir -p nested/.git/hooks && echo x > nested/.git/hooks/pre-commit"),
        ("git dir replaced by a link", "rm -rf .git && ln -s lookalike/.gitx .git"),
        ("git dir replaced by a file", "rm -rf .git && echo 'gitdir: evil' > .git"),
    ];
    for backend in backends() {
        for (what, script) in rows {
            let env = protected_env();
            let git_before = snapshot(&env.p().join(".git"));
            let sub_before = fs::read(env.p().join("sub/.git")).unwrap();
            let mut s = env.session(backend);
            let mark = s.prepare().unwrap();
            run(
                &s,
                &format!("{script} && echo note > note.txt && echo x >> lookalike/.gitx/config"),
            );
            let set = s.changes(&mark).unwrap();
            let shown: Vec<&str> = set.changes.iter().map(|c| c.path.as_str()).collect();
            assert_eq!(
                shown,
                ["lookalike/.gitx/config", "note.txt"],
                "{backend:?} {what}: only the control and the note are shown"
            );
            if backend == Backend::Overlay {
                // The copy backends do not even compare a git directory's content.
                assert!(
                    set.ignored_total() > 0,
                    "{backend:?} {what}: counted as ignored"
                );
            }
            let applied = s.apply(&set).unwrap();
            assert_eq!(applied.written, ["lookalike/.gitx/config", "note.txt"]);
            // The control reached the project; nothing under `.git` did.
            assert!(fs::read_to_string(env.p().join("lookalike/.gitx/config"))
                .unwrap()
                .ends_with("x\n"));
            assert_eq!(
                snapshot(&env.p().join(".git")),
                git_before,
                "{backend:?} {what}"
            );
            assert_eq!(fs::read(env.p().join("sub/.git")).unwrap(), sub_before);
            assert!(!env.p().join("nested").exists(), "{backend:?} {what}");
            s.close().unwrap();
        }
    }
}

#[test]
fn a_staged_change_under_garuda_needs_its_own_question() {
    let rows: [(&str, &str, &str); 10] = [
        (
            "settings rewritten",
            "echo '{\"x\": 1}' > .garuda/settings.json",
            ".garuda/settings.json",
        ),
        (
            "new file",
            "mkdir -p .garuda/hooks && echo x > .garuda/hooks/h",
            ".garuda/hooks/h",
        ),
        (
            "settings deleted",
            "rm .garuda/settings.json",
            ".garuda/settings.json",
        ),
        (
            "folder replaced by a link",
            "rm -rf .garuda && mkdir cfg && echo '{}' > cfg/s.json && ln -s cfg .garuda",
            ".garuda",
        ),
        (
            "folder replaced by a file",
            "rm -rf .garuda && echo x > .garuda",
            ".garuda",
        ),
        (
            "nested settings",
            "mkdir -p sub2/.garuda && echo '{}' > sub2/.garuda/settings.json",
            "sub2/.garuda/settings.json",
        ),
        // The same folder on a case-insensitive or casefolded filesystem.
        (
            "case variant",
            "mkdir -p .GARUDA && echo '{}' > .GARUDA/settings.json",
            ".GARUDA/settings.json",
        ),
        // vfat drops a trailing dot: the same folder there.
        (
            "trailing dot",
            "mkdir -p .garuda. && echo '{}' > .garuda./settings.json",
            ".garuda./settings.json",
        ),
        (
            "folder renamed to .garuda",
            "rm -rf .garuda && mv lookalike .garuda",
            ".garuda/.gitx/config",
        ),
        (
            "nested link named .garuda",
            "mkdir -p sub2 && ln -s .. sub2/.garuda",
            "sub2/.garuda",
        ),
    ];
    for backend in backends() {
        for (what, script, path) in rows {
            let env = protected_env();
            let before = snapshot(&env.p());
            let mut s = env.session(backend);
            let mark = s.prepare().unwrap();
            run(&s, &format!("{script} && echo note > note.txt"));
            let set = s.changes(&mark).unwrap();
            let marked: Vec<&str> = set
                .garuda_settings()
                .iter()
                .map(|c| c.path.as_str())
                .collect();
            assert!(marked.contains(&path), "{backend:?} {what}: {marked:?}");
            assert!(set.can_apply(), "{backend:?} {what}");
            let text = render(&set, &s);
            assert!(
                text.contains(&format!("{path} (Garuda settings: needs its own question)"))
                    || text.contains(&format!("{path} -> ")),
                "{backend:?} {what}: {text}"
            );
            assert!(text.contains("Garuda's project settings change"), "{text}");
            // A plain apply refuses the whole change and writes nothing.
            match s.apply(&set) {
                Err(StagingError::Guarded {
                    guard: Guard::GarudaSettings,
                    paths,
                }) => {
                    assert!(paths.iter().any(|p| p == path), "{what}: {paths:?}")
                }
                other => panic!("{backend:?} {what}: {other:?}"),
            }
            assert_eq!(
                snapshot(&env.p()),
                before,
                "{backend:?} {what}: nothing applied"
            );
            // The control: the explicit opt-in applies it.
            s.apply_approved(&set, &[Guard::GarudaSettings]).unwrap();
            assert_eq!(
                fs::read_to_string(env.p().join("note.txt")).unwrap(),
                "note\n"
            );
            assert_ne!(
                snapshot(&env.p()),
                before,
                "{backend:?} {what}: applied with the opt-in"
            );
            s.close().unwrap();
        }
    }
}

/// The diff reads the project's old content beneath a held descriptor of the project, never
/// through a link: a process in the same project (a command in direct mode) that swaps a
/// listed file, or a folder above one, for a link to a secret between the listing and the
/// display does not get Garuda (which is not sandboxed) to print the secret. Negative
/// control: at that moment both paths, read by name, are the secret.
#[test]
fn the_diff_never_reads_old_content_through_a_link_swapped_in_after_the_listing() {
    const SECRET: &str = "TOP-SECRET-OUTSIDE-THE-PROJECT";
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "a.txt", &format!("{SECRET}\n"));
    write(outside.path(), "lib.rs", &format!("{SECRET}\n"));
    let env = Env::new();
    let p = env.p();
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(&s, "echo NEW-A > a.txt && echo NEW-LIB > src/lib.rs");
    let set = s.changes(&mark).unwrap();
    assert!(
        kinds(&set).get("a.txt") == Some(&ChangeKind::Modified)
            && kinds(&set).get("src/lib.rs") == Some(&ChangeKind::Modified),
        "{:?}",
        kinds(&set)
    );
    // The swap: the file itself for a link, and the folder above the other for a link.
    fs::remove_file(p.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("a.txt"), p.join("a.txt")).unwrap();
    fs::rename(p.join("src"), p.join("src.real")).unwrap();
    std::os::unix::fs::symlink(outside.path(), p.join("src")).unwrap();
    for rel in ["a.txt", "src/lib.rs"] {
        assert_eq!(
            fs::read_to_string(p.join(rel)).unwrap(),
            format!("{SECRET}\n"),
            "the control: {rel} by name"
        );
    }
    let text = render(&set, &s);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("+NEW-A"), "{text}");
    assert!(
        text.contains("src/lib.rs: the project's file is not diffed: "),
        "{text}"
    );
    s.close().unwrap();
}

// ---- sensitive files: content never shown, applied only with an opt-in of their own ------

/// A project that does not ignore `.env` (as many don't), with a key file in it.
fn secrets_env() -> Env {
    let env = Env::new();
    write(&env.p(), ".gitignore", "target/\n*.log\n");
    write(&env.p(), "deploy.key", "OLD-KEY-MARK\n");
    env
}

/// Every way a command can make a change to a secret's file (new, changed, deleted, mode,
/// renamed to or from, a folder, a link either way) under every name a filesystem may open
/// it by (case, a trailing dot, an invisible character, a vfat short name) is guarded:
/// `Session::apply` refuses the whole change and writes nothing, the render names the path
/// with size and hash and never prints the content. The control in each row: the explicit
/// opt-in applies the same change.
#[test]
fn sensitive_files_need_an_opt_in_of_their_own() {
    let zwj = ".e\u{200d}nv";
    let rows: Vec<(&str, String, &str)> = vec![
        ("new .env", "echo SECRET-MARK > .env".into(), ".env"),
        (
            "new .env.local",
            "echo SECRET-MARK > .env.local".into(),
            ".env.local",
        ),
        (
            "case variant",
            "echo SECRET-MARK > .Env.Local".into(),
            ".Env.Local",
        ),
        (
            "trailing dot",
            "echo SECRET-MARK > 'id_rsa.'".into(),
            "id_rsa.",
        ),
        (
            "invisible character",
            format!("echo SECRET-MARK > '{zwj}'"),
            zwj,
        ),
        (
            "vfat short name",
            "echo SECRET-MARK > ENV~1".into(),
            "ENV~1",
        ),
        (
            "key rewritten",
            "echo SECRET-MARK > deploy.key".into(),
            "deploy.key",
        ),
        ("key deleted", "rm deploy.key".into(), "deploy.key"),
        ("key mode", "chmod 600 deploy.key".into(), "deploy.key"),
        (
            "file renamed to .env",
            "echo SECRET-MARK > a.txt && mv a.txt .env".into(),
            ".env",
        ),
        (
            "folder named .env",
            "mkdir .env && echo SECRET-MARK > .env/conf".into(),
            ".env/conf",
        ),
        (
            "folder renamed to .ENV",
            "echo SECRET-MARK > src/lib.rs && mv src .ENV".into(),
            ".ENV/lib.rs",
        ),
        (
            "nested .npmrc",
            "mkdir -p sub && echo SECRET-MARK > sub/.npmrc".into(),
            "sub/.npmrc",
        ),
        ("link named .env", "ln -s a.txt .env".into(), ".env"),
        ("link to a secret", "ln -s deploy.key notes".into(), "notes"),
    ];
    for backend in backends() {
        for (what, script, path) in &rows {
            let env = secrets_env();
            let before = snapshot(&env.p());
            let mut s = env.session(backend);
            let mark = s.prepare().unwrap();
            run(&s, &format!("{script} && echo plain > note.txt"));
            let set = s.changes(&mark).unwrap();
            let guarded: Vec<&str> = set
                .guarded(Guard::Sensitive)
                .iter()
                .map(|c| c.path.as_str())
                .collect();
            assert!(guarded.contains(path), "{backend:?} {what}: {guarded:?}");
            assert!(!guarded.contains(&"note.txt"), "{backend:?} {what}");
            assert!(set.can_apply(), "{backend:?} {what}");
            let text = render(&set, &s);
            assert!(!text.contains("SECRET-MARK"), "{backend:?} {what}: {text}");
            assert!(!text.contains("OLD-KEY-MARK"), "{backend:?} {what}: {text}");
            let shown = garuda_text::visible(path);
            assert!(
                text.contains(&format!("  {shown}: before: ")),
                "{backend:?} {what}: {text}"
            );
            assert!(text.contains("+plain"), "{backend:?} {what}: {text}");
            // A plain apply refuses the whole change and writes nothing.
            match s.apply(&set) {
                Err(StagingError::Guarded {
                    guard: Guard::Sensitive,
                    paths,
                }) => assert!(paths.iter().any(|p| p == path), "{what}: {paths:?}"),
                other => panic!("{backend:?} {what}: {other:?}"),
            }
            assert_eq!(snapshot(&env.p()), before, "{backend:?} {what}");
            // So does an opt-in for another guard.
            assert!(matches!(
                s.apply_approved(&set, &[Guard::GarudaSettings]),
                Err(StagingError::Guarded {
                    guard: Guard::Sensitive,
                    ..
                })
            ));
            assert_eq!(snapshot(&env.p()), before, "{backend:?} {what}");
            // The control: the explicit opt-in applies it.
            s.apply_approved(&set, &[Guard::Sensitive]).unwrap();
            assert_eq!(
                fs::read_to_string(env.p().join("note.txt")).unwrap(),
                "plain\n"
            );
            let after = snapshot(&env.p());
            assert_ne!(after, before, "{backend:?} {what}");
            s.close().unwrap();
        }
    }
}

/// The negative control of the names: lookalikes that open another file everywhere are
/// ordinary files, shown in full and applied by a plain apply.
#[test]
fn names_that_only_look_like_secrets_are_ordinary_files() {
    for backend in backends() {
        let env = secrets_env();
        let mut s = env.session(backend);
        let mark = s.prepare().unwrap();
        run(
            &s,
            "echo PLAIN-MARK > .envrc && echo x > environment.txt && echo y > deploy.key.txt && mkdir envs && echo z > envs/dev",
        );
        let set = s.changes(&mark).unwrap();
        assert!(set.guarded(Guard::Sensitive).is_empty(), "{set:?}");
        assert!(set.sensitive.is_empty(), "{set:?}");
        let text = render(&set, &s);
        assert!(text.contains("+PLAIN-MARK"), "{text}");
        assert!(!text.contains("Sensitive files changed"), "{text}");
        s.apply(&set).unwrap();
        assert_eq!(
            fs::read_to_string(env.p().join(".envrc")).unwrap(),
            "PLAIN-MARK\n"
        );
        s.close().unwrap();
    }
}

/// A secret renamed to an ordinary name keeps its content out of the diff (it equals the
/// deleted sensitive file's), and the deletion guards the change. The control: an ordinary
/// rename in the same way is diffed.
#[test]
fn a_secret_renamed_to_an_ordinary_name_is_not_diffed() {
    let env = secrets_env();
    let mut s = env.session(Backend::PlainCopy);
    let mark = s.prepare().unwrap();
    run(&s, "mv deploy.key deploy.txt && mv b.txt b2.txt");
    let set = s.changes(&mark).unwrap();
    let text = render(&set, &s);
    assert!(!text.contains("OLD-KEY-MARK"), "{text}");
    let hash = sha256_16("OLD-KEY-MARK\n");
    assert!(
        text.contains(&format!(
            "deploy.txt: not shown: the same content as the deleted sensitive file deploy.key (13 bytes, sha256 {hash})"
        )),
        "{text}"
    );
    assert!(text.contains("+bravo"), "the control: {text}");
    assert!(matches!(
        s.apply(&set),
        Err(StagingError::Guarded {
            guard: Guard::Sensitive,
            ..
        })
    ));
    s.close().unwrap();
}
