//! The body of the `path_resolver` fuzz target and of the test that replays its corpus: one
//! file-tool request on a fixed project full of traps, and the invariants every answer keeps.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use garuda_ipc::{Answer, ErrorCode, ProjectPath, Request};
use garuda_policy::engine::{Context, Engine};
use garuda_policy::{EffectiveSettings, Flags, HostEnv};

use super::files::{FileTools, Prepared};

/// Text that sits only in places no answer may show: outside the project, in a secret of the
/// home folder, in dotenv files.
const CANARIES: [&str; 3] = ["canary-outside", "canary-ssh", "canary-env"];

struct Fixture {
    dir: PathBuf,
    host: HostEnv,
    tools: Mutex<FileTools>,
}

static SETTINGS: OnceLock<(EffectiveSettings, HostEnv, PathBuf)> = OnceLock::new();
static FIXTURE: OnceLock<Fixture> = OnceLock::new();

/// Runs one request made of `data` against the trap project.
///
/// `data[0]` picks the tool (read, read with a range, glob, grep, write, edit); the rest up to
/// a `0xff` byte is the path (lossy UTF-8, so NUL and every other character reach the
/// parser), after it the glob or regular expression. Writes and edits are only prepared
/// (resolved and decided), never run.
///
/// # Panics
///
/// When an invariant breaks: a path that does not parse is refused as `invalid_argument`; no
/// answer carries text from outside the project, from a secret or from a dotenv file; no
/// listed path is absolute, has `..`, lies in `.git` or is a dotenv file; the folder outside
/// the project is never changed.
#[doc(hidden)]
pub fn exercise(data: &[u8]) {
    let Some((&op, rest)) = data.split_first() else {
        return;
    };
    let (path, pattern) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let path = String::from_utf8_lossy(path).into_owned();
    let pattern = pattern.map(|p| String::from_utf8_lossy(p).into_owned());
    let request = request_for(op, path.clone(), pattern);
    let (settings, _, project) = SETTINGS.get_or_init(settings);
    let fx = FIXTURE.get_or_init(|| fixture(project));
    let engine = Engine::new(settings, &fx.host, project);
    let ctx = Context::default();
    let mut tools = fx.tools.lock().unwrap_or_else(PoisonError::into_inner);
    let writes = matches!(
        request,
        Request::WriteFile { .. } | Request::EditFile { .. }
    );
    let answer = match tools.prepare(&engine, &ctx, &request) {
        Prepared::Refused(outcome) => outcome.answer,
        Prepared::Ready(_) if writes => return check_outside(&fx.dir),
        Prepared::Ready(pending) => tools.run(&engine, &ctx, pending),
    };
    check(&request, &path, &answer);
    check_outside(&fx.dir);
}

fn request_for(op: u8, path: String, pattern: Option<String>) -> Request {
    let optional = |p: String| (!p.is_empty()).then_some(p);
    match op % 6 {
        0 => Request::ReadFile {
            path,
            offset: None,
            limit: None,
        },
        1 => Request::ReadFile {
            path,
            offset: Some(u64::from(op / 6)),
            limit: Some(2),
        },
        2 => Request::Glob {
            pattern: pattern.unwrap_or_else(|| "**".into()),
            path: optional(path),
        },
        3 => Request::Grep {
            pattern: pattern.unwrap_or_else(|| "canary|TOKEN|fn".into()),
            path: optional(path),
            glob: None,
            case_insensitive: op & 0x80 != 0,
        },
        4 => Request::WriteFile {
            path,
            content: "x".into(),
        },
        _ => Request::EditFile {
            path,
            old: "fn".into(),
            new: "pub fn".into(),
            replace_all: true,
        },
    }
}

fn check(request: &Request, path: &str, answer: &Answer) {
    let names_path =
        !matches!(request, Request::Glob { .. } | Request::Grep { .. }) || !path.is_empty();
    if names_path && ProjectPath::parse(path).is_err() {
        assert!(
            matches!(
                answer,
                Answer::Error {
                    code: ErrorCode::InvalidArgument,
                    ..
                }
            ),
            "{path:?} does not parse, answered {answer:?}"
        );
    }
    let wire = serde_json::to_string(answer).unwrap_or_default();
    let asked = serde_json::to_string(request).unwrap_or_default();
    for canary in CANARIES {
        // An error message may quote the request; anything else came from a file.
        assert!(
            asked.contains(canary) || !wire.contains(canary),
            "{request:?} leaked {canary}: {wire}"
        );
    }
    let listed: Vec<&str> = match answer {
        Answer::Paths { paths, .. } => paths.iter().map(String::as_str).collect(),
        Answer::Matches { matches, .. } => matches.iter().map(|m| m.path.as_str()).collect(),
        _ => vec![],
    };
    for p in listed {
        assert!(ProjectPath::parse(p).is_ok(), "{request:?} listed {p:?}");
        assert!(
            p.split('/')
                .all(|c| c != ".git" && !garuda_policy::is_env_file_name(c.as_ref())),
            "{request:?} listed {p:?}"
        );
    }
}

/// The folder outside the project holds exactly what the fixture put there.
fn check_outside(dir: &Path) {
    let outside = dir.join("outside");
    let names: Vec<_> = std::fs::read_dir(&outside)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["secret.txt"], "{}", outside.display());
    let text = std::fs::read_to_string(outside.join("secret.txt")).unwrap_or_default();
    assert_eq!(text, "canary-outside\n");
}

fn settings() -> (EffectiveSettings, HostEnv, PathBuf) {
    let tmp = std::env::temp_dir();
    remove_stale_fixtures(&tmp);
    let uid = std::os::unix::fs::MetadataExt::uid(&must(std::fs::metadata("/proc/self"), &tmp));
    let dir = tmp.join(format!("garuda-path-resolver-{uid}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let project = dir.join("project");
    let home = dir.join("home");
    must(std::fs::create_dir_all(&project), &project);
    must(std::fs::create_dir_all(&home), &home);
    let host = match HostEnv::from_vars(vec![
        ("HOME".into(), home.into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ]) {
        Ok(h) => h,
        Err(e) => panic!("fixture host: {e}"),
    };
    let settings = match garuda_policy::merge_texts(&[], &host, &project, &Flags::default()) {
        Ok(s) => s,
        Err(e) => panic!("fixture settings: {e}"),
    };
    (settings, host, project)
}

/// Removes the fixtures of processes that are gone (a static is never dropped, so each run
/// leaves its fixture behind until the next one).
fn remove_stale_fixtures(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("garuda-path-resolver-"))
            .and_then(|rest| rest.rsplit('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The trap project: links in and out of the root, loops, a FIFO, secrets, `.git`,
/// `.garuda`, an ignored folder.
fn fixture(project: &Path) -> Fixture {
    let dir = project.parent().unwrap_or(project).to_path_buf();
    let files: [(&str, &str); 13] = [
        ("outside/secret.txt", "canary-outside\n"),
        ("home/.ssh/id_ed25519", "canary-ssh\n"),
        ("project/src/a.rs", "fn a() {}\n"),
        ("project/src/deep/x.txt", "fn x\nline 2\n"),
        ("project/.env", "TOKEN=canary-env\n"),
        ("project/.env.local", "canary-env\n"),
        ("project/sub/.env", "canary-env\n"),
        ("project/.git/config", "[core]\n"),
        ("project/.git/hooks/pre-commit", "#!/bin/sh\n"),
        ("project/.garuda/settings.json", "{}\n"),
        ("project/.gitignore", "ignored/\n"),
        ("project/ignored/i.txt", "fn ignored\n"),
        ("project/bin.dat", "fn\0binary"),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            must(std::fs::create_dir_all(parent), parent);
        }
        must(std::fs::write(&path, text), &path);
    }
    let links: [(&str, PathBuf); 9] = [
        ("in", "src/a.rs".into()),
        ("up", "../outside/secret.txt".into()),
        ("abs", dir.join("outside/secret.txt")),
        ("env_link", ".env".into()),
        ("loop1", "loop2".into()),
        ("loop2", "loop1".into()),
        ("dirlink", "src".into()),
        ("outdir", "../outside".into()),
        ("homelink", "../home".into()),
    ];
    for (name, target) in links {
        let link = project.join(name);
        must(std::os::unix::fs::symlink(&target, &link), &link);
    }
    let fifo = rustix::fs::mknodat(
        rustix::fs::CWD,
        project.join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    );
    must(fifo.map_err(std::io::Error::from), &project.join("fifo"));
    let (_, host, _) = SETTINGS.get_or_init(settings);
    let tools = match FileTools::open(project) {
        Ok(t) => t,
        Err(e) => panic!("fixture root: {e}"),
    };
    Fixture {
        dir,
        host: host.clone(),
        tools: Mutex::new(tools),
    }
}

fn must<T>(r: std::io::Result<T>, path: &Path) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("fixture {}: {e}", path.display()),
    }
}
