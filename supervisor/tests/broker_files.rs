//! The broker's file tools against hostile paths: the bad-path table, links out of the root
//! and to secrets, a folder swapped for a link while requests run, `.git` and `.garuda`
//! writes, secrets in glob and grep, atomic writes, edit mismatches and the re-read cache.
//! Each refusal asserts the exact error code and message; each control shows the same attack
//! reaching its target without the file tools (a path-based reader or writer, or the policy
//! opening the path).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use garuda_ipc::{Answer, ErrorCode, Request};
use garuda_policy::engine::{Context, Engine, Step, Verdict};
use garuda_policy::{EffectiveSettings, Flags, HostEnv, SourceKind};
use garuda_supervisor::broker::files::{FileTools, Outcome};

struct World {
    _tmp: tempfile::TempDir,
    /// Canonical; holds `project/`, `home/` and `outside/`.
    dir: PathBuf,
    project: PathBuf,
    host: HostEnv,
    settings: EffectiveSettings,
    tools: FileTools,
}

fn world() -> World {
    world_with("")
}

/// A project with `src/a.rs`, `.env`, `.git/`, `.garuda/settings.json`, and `outside/secret`
/// next to it; `user` is the user policy's text (empty: none).
fn world_with(user: &str) -> World {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let project = dir.join("project");
    let home = dir.join("home");
    for (rel, text) in [
        ("project/src/a.rs", "fn a() {}\n"),
        ("project/.env", "TOKEN=from-dotenv\n"),
        ("project/.git/config", "[core]\n\tbare = false\n"),
        ("project/.git/hooks/.keep", ""),
        ("project/.garuda/settings.json", "{}\n"),
        ("outside/secret", "outside-secret\n"),
        ("home/.ssh/id_ed25519", "ssh-secret\n"),
    ] {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let host = HostEnv::from_vars(vec![
        ("HOME".into(), home.into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ])
    .unwrap();
    let user_path = dir.join("home/.garuda/policy.json");
    let texts: Vec<(SourceKind, &Path, &str)> = if user.is_empty() {
        vec![]
    } else {
        vec![(SourceKind::User, user_path.as_path(), user)]
    };
    let settings = garuda_policy::merge_texts(&texts, &host, &project, &Flags::default()).unwrap();
    let tools = FileTools::open(&project).unwrap();
    World {
        _tmp: tmp,
        dir,
        project,
        host,
        settings,
        tools,
    }
}

impl World {
    /// One request; an `ask` verdict is answered `approve`.
    fn ask(&mut self, request: Request, approve: bool) -> Outcome {
        let engine = Engine::new(&self.settings, &self.host, &self.project);
        self.tools
            .handle(&engine, &Context::default(), &request, |_| approve)
    }

    /// One request; the user says yes to every question.
    fn go(&mut self, request: Request) -> Answer {
        self.ask(request, true).answer
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.project.join(rel)
    }

    fn link(&self, target: impl AsRef<Path>, rel: &str) {
        std::os::unix::fs::symlink(target, self.p(rel)).unwrap();
    }
}

fn read(path: &str) -> Request {
    Request::ReadFile {
        path: path.into(),
        offset: None,
        limit: None,
    }
}

fn read_range(path: &str, offset: u64, limit: u64) -> Request {
    Request::ReadFile {
        path: path.into(),
        offset: Some(offset),
        limit: Some(limit),
    }
}

fn write(path: &str, content: &str) -> Request {
    Request::WriteFile {
        path: path.into(),
        content: content.into(),
    }
}

fn edit(path: &str, old: &str, new: &str, replace_all: bool) -> Request {
    Request::EditFile {
        path: path.into(),
        old: old.into(),
        new: new.into(),
        replace_all,
    }
}

fn glob(pattern: &str, path: Option<&str>) -> Request {
    Request::Glob {
        pattern: pattern.into(),
        path: path.map(Into::into),
    }
}

fn grep(pattern: &str, path: Option<&str>) -> Request {
    Request::Grep {
        pattern: pattern.into(),
        path: path.map(Into::into),
        glob: None,
        case_insensitive: false,
    }
}

fn err(code: ErrorCode, message: &str) -> Answer {
    Answer::Error {
        code,
        message: message.into(),
    }
}

fn text_of(answer: &Answer) -> &str {
    match answer {
        Answer::FileText { text, .. } => text,
        other => panic!("not file text: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// The bad-path table
// ---------------------------------------------------------------------------------------

#[test]
fn bad_paths_are_refused_before_the_filesystem() {
    let mut w = world();
    std::fs::create_dir_all(w.p("a")).unwrap();
    std::fs::write(w.dir.join("b"), "beside the project\n").unwrap();
    let long_name = "n".repeat(256);
    let long_path = "d/".repeat(2001);
    let abs = w.dir.join("outside/secret").display().to_string();
    let not_plain = |p: &str| {
        format!("{p} is not in its plain form: no '.' component, no '//', no trailing '/'")
    };
    let table: Vec<(&str, String)> = vec![
        (
            "a/../../b",
            "a/../../b has a '..' component: paths name files inside the project directly".into(),
        ),
        (
            &abs,
            format!(
                "{abs} is absolute: paths are relative to the project root (src/main.rs, not \
                 /…/src/main.rs)"
            ),
        ),
        ("a//b", not_plain("a//b")),
        ("a/./b", not_plain("a/./b")),
        ("src/", not_plain("src/")),
        ("a\0b", "the path has a NUL byte".into()),
        (
            &long_name,
            "the path is too long (256 bytes; at most 4000 bytes, 255 per name)".into(),
        ),
        (
            &long_path,
            "the path is too long (4002 bytes; at most 4000 bytes, 255 per name)".into(),
        ),
        ("", "the path is empty".into()),
    ];
    for (path, message) in &table {
        for request in [
            read(path),
            write(path, "x"),
            edit(path, "a", "b", false),
            glob("*", Some(path)),
            grep("a", Some(path)),
        ] {
            let outcome = w.ask(request.clone(), true);
            assert_eq!(
                outcome.answer,
                err(ErrorCode::InvalidArgument, message),
                "{request:?}"
            );
            assert!(outcome.decision.is_none(), "{request:?}");
        }
    }
    // Negative control: a reader that joins the path to the root reaches outside.
    assert_eq!(
        std::fs::read_to_string(w.project.join("a/../../b")).unwrap(),
        "beside the project\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.project.join(&abs)).unwrap(),
        "outside-secret\n"
    );
    // Nothing was written anywhere.
    assert!(!w.dir.join("x").exists());
    assert_eq!(
        std::fs::read_to_string(w.dir.join("b")).unwrap(),
        "beside the project\n"
    );
}

// ---------------------------------------------------------------------------------------
// Links
// ---------------------------------------------------------------------------------------

#[test]
fn links_out_of_the_root_are_refused() {
    let mut w = world();
    w.link("../outside/secret", "notes.txt");
    w.link(w.dir.join("outside/secret"), "abs.txt");
    w.link("../outside", "outdir");
    w.link("src/../../outside/secret", "sneaky.txt");
    for path in ["notes.txt", "abs.txt", "outdir/secret", "sneaky.txt"] {
        let message = format!(
            "{path}: a symbolic link on the way leads out of the project (or is absolute); \
             only files inside the project can be reached"
        );
        assert_eq!(
            w.go(read(path)),
            err(ErrorCode::OutsideProject, &message),
            "{path}"
        );
        assert_eq!(
            w.go(grep("secret", Some(path))),
            err(ErrorCode::OutsideProject, &message),
            "{path}"
        );
        // Negative control: the host's own path lookup follows the link out.
        assert_eq!(
            std::fs::read_to_string(w.p(path)).unwrap(),
            "outside-secret\n"
        );
    }
    // Writes: through a final link, and into a folder that is a link out.
    assert_eq!(
        w.go(write("notes.txt", "pwned")),
        err(
            ErrorCode::OutsideProject,
            "notes.txt is a symbolic link that leads out of the project (to \
             ../outside/secret); only files inside the project can be written"
        )
    );
    assert_eq!(
        w.go(write("outdir/new.txt", "pwned")),
        err(
            ErrorCode::OutsideProject,
            "outdir/new.txt: a symbolic link on the way leads out of the project (or is \
             absolute); only files inside the project can be reached"
        )
    );
    assert_eq!(
        w.go(edit("outdir/secret", "outside", "pwned", false)),
        err(
            ErrorCode::OutsideProject,
            "outdir/secret: a symbolic link on the way leads out of the project (or is \
             absolute); only files inside the project can be reached"
        )
    );
    assert_eq!(
        std::fs::read_dir(w.dir.join("outside")).unwrap().count(),
        1,
        "nothing was created outside"
    );
    assert_eq!(
        std::fs::read_to_string(w.dir.join("outside/secret")).unwrap(),
        "outside-secret\n"
    );
    // glob lists neither the links out nor anything behind them.
    let Answer::Paths { paths, .. } = w.go(glob("**", None)) else {
        panic!()
    };
    assert!(
        paths.iter().all(
            |p| !["notes.txt", "abs.txt", "sneaky.txt"].contains(&p.as_str())
                && !p.starts_with("outdir")
        ),
        "{paths:?}"
    );
    // Negative control: a path-based writer writes outside through the folder link.
    std::fs::write(w.p("outdir/new.txt"), "pwned").unwrap();
    assert!(w.dir.join("outside/new.txt").exists());
}

#[test]
fn a_link_inside_is_followed_and_judged_where_it_leads() {
    let mut w = world();
    w.link("src/a.rs", "readme.rs");
    w.link("src", "code");
    w.link(".env", "notes.txt");
    w.link(".git", "g");
    // A link to an ordinary file reads that file, and the answer is the file's.
    assert_eq!(text_of(&w.go(read("readme.rs"))), "fn a() {}\n");
    // The same file by another way: already sent, so not sent again.
    assert_eq!(
        w.go(read("code/a.rs")),
        Answer::FileText {
            text: String::new(),
            first_line: 1,
            total_lines: 1,
            unchanged: true
        }
    );
    // A link to the dotenv file is judged as the dotenv file.
    let outcome = w.ask(read("notes.txt"), true);
    assert_eq!(
        outcome.answer,
        err(
            ErrorCode::Denied,
            "notes.txt leads to .env: denied by the policy: .env is a sensitive path and no \
             allow rule names it (rule .env (dotenv file: secrets) from built-in)"
        )
    );
    let d = outcome.decision.unwrap();
    assert_eq!((d.verdict, d.step), (Verdict::Deny, Step::SensitivePath));
    // Negative control: the link really leads to the secret.
    assert_eq!(
        std::fs::read_to_string(w.p("notes.txt")).unwrap(),
        "TOKEN=from-dotenv\n"
    );
    // Writes never go through a link, even one inside.
    assert_eq!(
        w.go(write("readme.rs", "changed")),
        err(
            ErrorCode::InvalidArgument,
            "readme.rs is a symbolic link (to src/a.rs): files are never written through a \
             link; write the file it leads to by its own path"
        )
    );
    assert_eq!(
        std::fs::read_to_string(w.p("src/a.rs")).unwrap(),
        "fn a() {}\n"
    );
    assert!(std::fs::symlink_metadata(w.p("readme.rs"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A folder link into .git is a write into .git.
    assert_eq!(
        w.go(write("g/hooks/pre-commit", "#!/bin/sh\nevil\n")),
        err(
            ErrorCode::Denied,
            "g/hooks/pre-commit leads to .git/hooks/pre-commit: denied by the policy: \
             .git/hooks/pre-commit is inside a .git folder (rule .git/ (hooks and config run on \
             the host) from built-in)"
        )
    );
    assert!(!w.p(".git/hooks/pre-commit").exists());
    // Control: through the same kind of folder link to an ordinary folder, the write lands.
    assert!(matches!(
        w.go(write("code/b.rs", "fn b() {}\n")),
        Answer::Written { created: true, .. }
    ));
    assert_eq!(
        std::fs::read_to_string(w.p("src/b.rs")).unwrap(),
        "fn b() {}\n"
    );
}

#[test]
fn link_loops_fifos_and_folders_are_refused_without_hanging() {
    let mut w = world();
    w.link("loop2", "loop1");
    w.link("loop1", "loop2");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        w.p("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    assert_eq!(
        w.go(read("loop1")),
        err(
            ErrorCode::InvalidArgument,
            "loop1: too many symbolic links on the way"
        )
    );
    assert_eq!(
        w.go(read("fifo")),
        err(ErrorCode::InvalidArgument, "fifo is not a regular file")
    );
    assert_eq!(
        w.go(write("fifo", "x")),
        err(ErrorCode::InvalidArgument, "fifo is not a regular file")
    );
    assert_eq!(
        w.go(read("src")),
        err(
            ErrorCode::InvalidArgument,
            "src is a folder: glob lists its files"
        )
    );
    assert_eq!(
        w.go(read("src/missing.rs")),
        err(ErrorCode::NotFound, "src/missing.rs does not exist")
    );
    assert_eq!(
        w.go(read("src/a.rs/x")),
        err(
            ErrorCode::NotFound,
            "src/a.rs/x: a component on the way is not a folder"
        )
    );
}

// ---------------------------------------------------------------------------------------
// A folder swapped for a link while requests run
// ---------------------------------------------------------------------------------------

/// Swaps `project/d` (a real folder holding `f`) with `project/d_alt` (a link to the outside
/// folder) with `renameat2(RENAME_EXCHANGE)` until stopped.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Swapper {
    fn start(w: &World) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let (d, alt) = (w.p("d"), w.p("d_alt"));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let swapped = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    d.as_path(),
                    rustix::fs::CWD,
                    alt.as_path(),
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                if swapped.is_err() {
                    // The test ended (and removed the folder) without stopping us.
                    break;
                }
                swaps += 1;
            }
            swaps
        });
        Swapper {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn swap_world() -> World {
    let w = world();
    std::fs::create_dir(w.p("d")).unwrap();
    std::fs::write(w.p("d/f"), "inside\n").unwrap();
    std::fs::write(w.dir.join("outside/f"), "outside-secret\n").unwrap();
    w.link("../outside", "d_alt");
    w
}

#[test]
fn a_folder_swapped_for_a_link_never_leads_outside() {
    let mut w = swap_world();
    let swapper = Swapper::start(&w);
    let (mut inside, mut refused) = (0, 0);
    for i in 0..400 {
        // Every read sends the text again, so what was read is what is checked.
        w.tools.forget();
        for request in [
            read("d/f"),
            write(&format!("d/w{i}"), "written\n"),
            write("d/f", "inside\n"),
            grep("secret|inside", Some("d")),
            glob("*", Some("d")),
        ] {
            let answer = w.go(request.clone());
            let wire = serde_json::to_string(&answer).unwrap();
            assert!(!wire.contains("outside-secret"), "{request:?}: {wire}");
            match answer {
                Answer::FileText { text, .. } => {
                    assert_eq!(text, "inside\n");
                    inside += 1;
                }
                Answer::Error {
                    code: ErrorCode::OutsideProject,
                    message,
                } => {
                    assert!(
                        message.contains("a symbolic link on the way leads out of the project"),
                        "{message}"
                    );
                    refused += 1;
                }
                Answer::Written { .. } | Answer::Paths { .. } | Answer::Matches { .. } => {}
                Answer::Error {
                    code: ErrorCode::EditMismatch | ErrorCode::InvalidArgument | ErrorCode::Io,
                    ..
                } => {}
                other => panic!("{request:?}: {other:?}"),
            }
        }
    }
    let swaps = swapper.stop();
    assert!(swaps > 100, "the swapper barely ran ({swaps} swaps)");
    eprintln!("{swaps} swaps; reads inside {inside}, refused {refused}");
    // Both outcomes happened: the race was real.
    assert!(
        inside > 0 && refused > 0,
        "inside {inside}, refused {refused}"
    );
    // Nothing outside was read (asserted above) or written.
    let outside: Vec<_> = std::fs::read_dir(w.dir.join("outside"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut outside = outside;
    outside.sort();
    assert_eq!(outside, ["f", "secret"]);
    assert_eq!(
        std::fs::read_to_string(w.dir.join("outside/f")).unwrap(),
        "outside-secret\n"
    );
}

/// The negative control of the test above: a reader and a writer that resolve the same path
/// by name, under the same swapping, reach the outside folder.
#[test]
fn a_path_based_reader_and_writer_do_reach_outside_under_the_same_swap() {
    let w = swap_world();
    let swapper = Swapper::start(&w);
    let mut read_outside = false;
    let mut wrote_outside = false;
    for i in 0..200_000 {
        if !read_outside {
            read_outside =
                std::fs::read_to_string(w.p("d/f")).is_ok_and(|t| t == "outside-secret\n");
        }
        if !wrote_outside {
            let _ = std::fs::write(w.p(&format!("d/w{i}")), "written\n");
            wrote_outside = w.dir.join(format!("outside/w{i}")).exists();
        }
        if read_outside && wrote_outside {
            break;
        }
    }
    swapper.stop();
    assert!(read_outside, "the path-based reader never read outside");
    assert!(wrote_outside, "the path-based writer never wrote outside");
}

// ---------------------------------------------------------------------------------------
// Secrets, .git and .garuda
// ---------------------------------------------------------------------------------------

#[test]
fn the_dotenv_file_is_denied_by_the_engine() {
    let mut w = world();
    let outcome = w.ask(read(".env"), true);
    assert_eq!(
        outcome.answer,
        err(
            ErrorCode::Denied,
            "denied by the policy: .env is a sensitive path and no allow rule names it (rule \
             .env (dotenv file: secrets) from built-in)"
        )
    );
    let d = outcome.decision.unwrap();
    assert_eq!((d.verdict, d.step), (Verdict::Deny, Step::SensitivePath));
    assert_eq!(
        w.go(edit(".env", "TOKEN", "X", false)),
        err(
            ErrorCode::Denied,
            "denied by the policy: .env is a sensitive path and no allow rule names it (rule \
             .env (dotenv file: secrets) from built-in)"
        )
    );
    assert_eq!(
        std::fs::read_to_string(w.p(".env")).unwrap(),
        "TOKEN=from-dotenv\n"
    );
    // Negative control: the check is the engine's: a user rule that names the file opens it.
    let mut opened = world_with(r#"{"permissions": {"allow": ["Read(.env)"]}}"#);
    assert_eq!(text_of(&opened.go(read(".env"))), "TOKEN=from-dotenv\n");
}

#[test]
fn writes_into_git_and_garuda_are_denied() {
    let mut w = world();
    for (request, message, step) in [
        (
            write(".git/hooks/pre-commit", "#!/bin/sh\nevil\n"),
            "denied by the policy: .git/hooks/pre-commit is inside a .git folder (rule .git/ \
             (hooks and config run on the host) from built-in)",
            Step::GitWrite,
        ),
        (
            edit(".git/config", "bare = false", "bare = true", false),
            "denied by the policy: .git/config is inside a .git folder (rule .git/ (hooks and \
             config run on the host) from built-in)",
            Step::GitWrite,
        ),
        (
            write(".garuda/settings.json", "{\"permissions\": {}}"),
            "denied by the policy: .garuda/settings.json is inside a .garuda folder (rule \
             .garuda/ (project settings: changed only by the user) from built-in)",
            Step::GarudaWrite,
        ),
        (
            write("sub/.garuda/settings.json", "{}"),
            "denied by the policy: sub/.garuda/settings.json is inside a .garuda folder (rule \
             .garuda/ (project settings: changed only by the user) from built-in)",
            Step::GarudaWrite,
        ),
    ] {
        let outcome = w.ask(request.clone(), true);
        assert_eq!(
            outcome.answer,
            err(ErrorCode::Denied, message),
            "{request:?}"
        );
        assert_eq!(outcome.decision.unwrap().step, step, "{request:?}");
    }
    assert!(!w.p(".git/hooks/pre-commit").exists());
    assert!(
        !w.p("sub").exists(),
        "no folder was created for a denied write"
    );
    assert_eq!(
        std::fs::read_to_string(w.p(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.p(".garuda/settings.json")).unwrap(),
        "{}\n"
    );
    // Reading them is allowed (the engine's read-only step).
    assert_eq!(text_of(&w.go(read(".garuda/settings.json"))), "{}\n");
    // Negative control: the same write to an ordinary folder is written.
    assert!(matches!(
        w.go(write("hooks/pre-commit", "#!/bin/sh\n")),
        Answer::Written { created: true, .. }
    ));
}

#[test]
fn glob_and_grep_never_list_secrets_or_git() {
    let setup = |w: &World| {
        for (rel, text) in [
            (".env.local", "TOKEN=local\n"),
            ("sub/.env", "TOKEN=sub\n"),
            ("src/main.rs", "const TOKEN: &str = \"\";\n"),
            (".gitignore", "ignored/\n"),
            ("ignored/x.rs", "TOKEN ignored\n"),
            ("bin.dat", "TOKEN\0binary"),
        ] {
            let path = w.p(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::write(w.p(".git/config"), "[core]\n# TOKEN\n").unwrap();
        w.link(".env", "notes.txt");
    };
    let mut w = world();
    setup(&w);
    let Answer::Paths { paths, truncated } = w.go(glob("**", None)) else {
        panic!()
    };
    assert!(!truncated);
    assert_eq!(
        paths,
        [
            ".garuda/settings.json",
            ".gitignore",
            "bin.dat",
            "src/a.rs",
            "src/main.rs"
        ]
    );
    let Answer::Matches { matches, truncated } = w.go(grep("TOKEN", None)) else {
        panic!()
    };
    assert!(!truncated);
    let found: Vec<(&str, u64, &str)> = matches
        .iter()
        .map(|m| (m.path.as_str(), m.line, m.text.as_str()))
        .collect();
    assert_eq!(found, [("src/main.rs", 1, "const TOKEN: &str = \"\";")]);
    // Globs match below the folder searched; a pattern without `**` stays in one folder.
    let Answer::Paths { paths, .. } = w.go(glob("*.rs", Some("src"))) else {
        panic!()
    };
    assert_eq!(paths, ["src/a.rs", "src/main.rs"]);
    // A file named explicitly is searched even when ignored.
    let Answer::Matches { matches, .. } = w.go(grep("TOKEN", Some("ignored/x.rs"))) else {
        panic!()
    };
    assert_eq!(matches.len(), 1);
    assert_eq!(
        w.go(grep("TOKEN", Some(".git"))),
        err(
            ErrorCode::InvalidArgument,
            "grep does not search inside .git; read_file reads a file there"
        )
    );
    assert_eq!(
        w.go(glob("[", None)),
        err(
            ErrorCode::InvalidArgument,
            "not a glob: unclosed character class; missing ']'"
        )
    );
    // Negative control: the files are there and hold the word, and once the policy names
    // `.env`, grep does return it — the filter is the engine's.
    assert!(std::fs::read_to_string(w.p(".git/config"))
        .unwrap()
        .contains("TOKEN"));
    let mut opened = world_with(r#"{"permissions": {"allow": ["Read(.env)"]}}"#);
    setup(&opened);
    let Answer::Matches { matches, .. } = opened.go(grep("TOKEN", None)) else {
        panic!()
    };
    let paths: Vec<&str> = matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, [".env", "src/main.rs", "sub/.env"]);
}

#[test]
fn a_file_under_an_ask_rule_is_read_only_after_a_yes() {
    let mut w = world_with(r#"{"permissions": {"ask": ["Read(private/**)"]}}"#);
    std::fs::create_dir_all(w.p("private")).unwrap();
    std::fs::write(w.p("private/x.txt"), "TOKEN private\n").unwrap();
    std::fs::write(w.p("src/b.rs"), "TOKEN public\n").unwrap();
    let outcome = w.ask(grep("TOKEN", Some("private/x.txt")), false);
    assert_eq!(
        outcome.answer,
        err(
            ErrorCode::Rejected,
            "the user did not allow grep on private/x.txt"
        )
    );
    assert_eq!(outcome.decision.unwrap().step, Step::AskRule);
    assert_eq!(
        w.ask(read("private/x.txt"), false).answer,
        err(
            ErrorCode::Rejected,
            "the user did not allow read_file on private/x.txt"
        )
    );
    // A search of the whole project does not read it (that would skip the question), but
    // glob lists its name.
    let Answer::Matches { matches, .. } = w.go(grep("TOKEN", None)) else {
        panic!()
    };
    let paths: Vec<&str> = matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["src/b.rs"]);
    let Answer::Paths { paths, .. } = w.go(glob("private/*", None)) else {
        panic!()
    };
    assert_eq!(paths, ["private/x.txt"]);
    // Control: after a yes, the file named is read.
    let Answer::Matches { matches, .. } = w.go(grep("TOKEN", Some("private/x.txt"))) else {
        panic!()
    };
    assert_eq!(matches.len(), 1);
    assert_eq!(text_of(&w.go(read("private/x.txt"))), "TOKEN private\n");
}

// ---------------------------------------------------------------------------------------
// Writes and edits
// ---------------------------------------------------------------------------------------

fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line.split_whitespace().nth(1).unwrap(), 8).unwrap()
}

#[test]
fn writes_are_atomic_and_keep_the_mode() {
    let mut w = world();
    std::fs::write(w.p("run.sh"), "#!/bin/sh\nold\n").unwrap();
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        // Root writes a file the user owns: it stays the user's.
        std::os::unix::fs::chown(w.p("run.sh"), Some(4242), Some(4343)).unwrap();
    }
    std::fs::set_permissions(w.p("run.sh"), std::fs::Permissions::from_mode(0o4750)).unwrap();
    let before = std::fs::metadata(w.p("run.sh")).unwrap();
    // A reader that opened the file before the write.
    let mut held = std::fs::File::open(w.p("run.sh")).unwrap();
    assert_eq!(
        w.go(write("run.sh", "#!/bin/sh\nnew\n")),
        Answer::Written {
            bytes: 14,
            created: false,
            replacements: 0
        }
    );
    let after = std::fs::metadata(w.p("run.sh")).unwrap();
    assert_eq!(
        std::fs::read_to_string(w.p("run.sh")).unwrap(),
        "#!/bin/sh\nnew\n"
    );
    // The permission bits kept, setuid dropped, the owner kept; a new inode took the name.
    assert_eq!(after.mode() & 0o7777, 0o750);
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_ne!(after.ino(), before.ino());
    // The old file was never touched: the reader still sees all of it.
    let mut old = String::new();
    std::io::Read::read_to_string(&mut held, &mut old).unwrap();
    assert_eq!(old, "#!/bin/sh\nold\n");
    // No temporary file is left.
    let names: Vec<String> = std::fs::read_dir(&w.project)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("garuda-tmp"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    // A new file: 0644 less the umask; missing folders are created.
    assert_eq!(
        w.go(write("new/deeper/f.txt", "hello")),
        Answer::Written {
            bytes: 5,
            created: true,
            replacements: 0
        }
    );
    let meta = std::fs::metadata(w.p("new/deeper/f.txt")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o644 & !umask());
    assert!(w.p("new/deeper").is_dir());
    // Negative control: an in-place write (what a naive writer does) changes what the held
    // reader sees.
    let mut held = std::fs::File::open(w.p("run.sh")).unwrap();
    std::fs::write(w.p("run.sh"), "#!/bin/sh\nin place\n").unwrap();
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut held, &mut seen).unwrap();
    assert_eq!(seen, "#!/bin/sh\nin place\n");
}

#[test]
fn an_ask_is_put_to_the_user_and_a_no_writes_nothing() {
    let mut w = world();
    let outcome = w.ask(write("src/x.rs", "fn x() {}\n"), false);
    assert_eq!(
        outcome.answer,
        err(
            ErrorCode::Rejected,
            "the user did not allow write_file on src/x.rs"
        )
    );
    let d = outcome.decision.unwrap();
    assert_eq!((d.verdict, d.step), (Verdict::Ask, Step::NoRule));
    assert!(!w.p("src/x.rs").exists());
    // Control: the same request, allowed.
    assert!(matches!(
        w.go(write("src/x.rs", "fn x() {}\n")),
        Answer::Written { created: true, .. }
    ));
    assert!(w.p("src/x.rs").exists());
}

#[test]
fn edit_counts_occurrences() {
    let mut w = world();
    std::fs::write(w.p("f.txt"), "a b a\n").unwrap();
    assert_eq!(
        w.go(edit("f.txt", "a", "x", false)),
        err(
            ErrorCode::EditMismatch,
            "old occurs 2 times in f.txt: add surrounding lines so it occurs once, or set \
             replace_all"
        )
    );
    assert_eq!(
        w.go(edit("f.txt", "z", "x", false)),
        err(
            ErrorCode::EditMismatch,
            "old occurs 0 times in f.txt: read the file again and copy the text exactly"
        )
    );
    assert_eq!(
        w.go(edit("f.txt", "", "x", false)),
        err(
            ErrorCode::InvalidArgument,
            "old is empty: give the exact text to replace"
        )
    );
    assert_eq!(
        w.go(edit("nope.txt", "a", "x", false)),
        err(
            ErrorCode::NotFound,
            "nope.txt does not exist: edit_file changes a file, write_file creates one"
        )
    );
    assert_eq!(std::fs::read_to_string(w.p("f.txt")).unwrap(), "a b a\n");
    assert_eq!(
        w.go(edit("f.txt", "b", "c", false)),
        Answer::Written {
            bytes: 6,
            created: false,
            replacements: 1
        }
    );
    assert_eq!(
        w.go(edit("f.txt", "a", "xy", true)),
        Answer::Written {
            bytes: 8,
            created: false,
            replacements: 2
        }
    );
    assert_eq!(std::fs::read_to_string(w.p("f.txt")).unwrap(), "xy c xy\n");
    std::fs::write(w.p("bin.dat"), b"a\0b").unwrap();
    assert_eq!(
        w.go(edit("bin.dat", "a", "b", false)),
        err(
            ErrorCode::NotText,
            "bin.dat is not text (a NUL byte, or not UTF-8): the file tools read and edit text \
             only"
        )
    );
}

// ---------------------------------------------------------------------------------------
// read_file: text, caps and the re-read cache
// ---------------------------------------------------------------------------------------

#[test]
fn only_text_is_read() {
    let mut w = world();
    std::fs::write(w.p("nul.bin"), b"ab\0cd").unwrap();
    std::fs::write(w.p("latin1.txt"), b"caf\xe9\n").unwrap();
    for name in ["nul.bin", "latin1.txt"] {
        assert_eq!(
            w.go(read(name)),
            err(
                ErrorCode::NotText,
                &format!(
                    "{name} is not text (a NUL byte, or not UTF-8): the file tools read and \
                     edit text only"
                )
            )
        );
    }
    // A name with control characters comes back escaped.
    assert_eq!(
        w.go(read("x\u{1b}[2J\n.txt")),
        err(ErrorCode::NotFound, "x\\e[2J\\n.txt does not exist")
    );
}

#[test]
fn reads_are_capped() {
    let mut w = world();
    let lines: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(w.p("long.txt"), &lines).unwrap();
    let Answer::FileText {
        text,
        first_line,
        total_lines,
        unchanged,
    } = w.go(read("long.txt"))
    else {
        panic!()
    };
    assert_eq!((first_line, total_lines, unchanged), (1, 3000, false));
    assert_eq!(text.lines().count(), 2000);
    assert_eq!(
        text_of(&w.go(read_range("long.txt", 2999, 10))),
        "line 2999\nline 3000\n"
    );
    assert_eq!(
        w.go(read_range("long.txt", 3001, 1)),
        err(
            ErrorCode::InvalidArgument,
            "offset 3001 is past the end of long.txt (3000 lines)"
        )
    );
    assert_eq!(
        w.go(read_range("long.txt", 0, 1)),
        err(ErrorCode::InvalidArgument, "offset counts lines from 1")
    );
    // Over the file cap (a sparse file: no disk used).
    let big = std::fs::File::create(w.p("big.txt")).unwrap();
    big.set_len(64 * 1024 * 1024 + 1).unwrap();
    assert_eq!(
        w.go(read("big.txt")),
        err(
            ErrorCode::TooLarge,
            "big.txt has 67108865 bytes, more than the 67108864 the file tools read"
        )
    );
}

#[test]
fn an_unchanged_re_read_is_not_resent() {
    let mut w = world();
    std::fs::write(w.p("f.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    let full = |text: &str| Answer::FileText {
        text: text.into(),
        first_line: 1,
        total_lines: 4,
        unchanged: false,
    };
    let same = |first_line| Answer::FileText {
        text: String::new(),
        first_line,
        total_lines: 4,
        unchanged: true,
    };
    assert_eq!(
        w.go(read_range("f.txt", 1, 2)),
        Answer::FileText {
            text: "one\ntwo\n".into(),
            first_line: 1,
            total_lines: 4,
            unchanged: false
        }
    );
    // The same lines again, or a part of them: not sent.
    assert_eq!(w.go(read_range("f.txt", 1, 2)), same(1));
    assert_eq!(w.go(read_range("f.txt", 2, 1)), same(2));
    // Lines not sent yet are sent; then the whole file is known.
    assert_eq!(text_of(&w.go(read_range("f.txt", 3, 2))), "three\nfour\n");
    assert_eq!(w.go(read("f.txt")), same(1));
    // Through a link to it: the same file, already sent.
    w.link("f.txt", "alias.txt");
    assert_eq!(w.go(read("alias.txt")), same(1));
    // A change of the same size within the same clock tick is still a change.
    std::fs::write(w.p("f.txt"), "ONE\ntwo\nthree\nfour\n").unwrap();
    assert_eq!(w.go(read("f.txt")), full("ONE\ntwo\nthree\nfour\n"));
    assert_eq!(w.go(read("f.txt")), same(1));
    // A write through the tools changes it too.
    assert!(matches!(
        w.go(edit("f.txt", "ONE", "one", false)),
        Answer::Written { .. }
    ));
    assert_eq!(w.go(read("f.txt")), full("one\ntwo\nthree\nfour\n"));
    // After compaction the model no longer has the lines: sent again.
    w.tools.forget();
    assert_eq!(w.go(read("f.txt")), full("one\ntwo\nthree\nfour\n"));
    // Negative control: another session (fresh tools) gets the text.
    let mut other = world();
    std::fs::write(other.p("f.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    assert_eq!(other.go(read("f.txt")), full("one\ntwo\nthree\nfour\n"));
}

// ---------------------------------------------------------------------------------------
// No openat2: refused, no fallback
// ---------------------------------------------------------------------------------------

#[test]
fn without_openat2_every_request_is_refused() {
    let mut w = world();
    // Control: with openat2, the file reads.
    assert_eq!(text_of(&w.go(read("src/a.rs"))), "fn a() {}\n");
    let project = w.project.clone();
    // A thread of its own gets a seccomp filter that answers openat2 with ENOSYS, as a kernel
    // before 5.6 does; the rest of the test process is not affected.
    let (answer, opened) = std::thread::scope(|s| {
        s.spawn(|| {
            garuda_supervisor::answer_on_this_thread(libc::SYS_openat2, libc::ENOSYS).unwrap();
            let answer = w.go(read("src/a.rs"));
            let opened = FileTools::open(&project).map(|_| ());
            (answer, opened.map_err(|e| e.to_string()))
        })
        .join()
        .unwrap()
    });
    let message = "this kernel has no openat2 (Linux 5.6 or later): the file tools refuse every \
                   path rather than check names";
    assert_eq!(answer, err(ErrorCode::Io, message));
    assert_eq!(opened, Err(message.to_owned()));
}

// ---------------------------------------------------------------------------------------
// The fuzz corpus
// ---------------------------------------------------------------------------------------

#[test]
fn path_resolver_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/path_resolver");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{}: {} files",
        dir.display(),
        files.len()
    );
    for path in files {
        eprintln!("{}", path.display());
        garuda_supervisor::broker::exercise::exercise(&std::fs::read(&path).unwrap());
    }
}
