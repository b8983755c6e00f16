//! Issue 10, item 1: a staged apply cannot be raced into writing outside the project.
//!
//! The attacker is a command that runs in direct mode, in a real sandbox (`landlock`,
//! `bubblewrap`), in the same project, started before the applies: `garuda-probe swap-loop`
//! exchanges the folder `d` with a link `d.link -> OUTSIDE` (`renameat2(RENAME_EXCHANGE)`)
//! again and again, so the name `d` is a folder and a link to a folder outside the project in
//! turn. Meanwhile the supervisor (this test process, with the user's rights) applies staged
//! changes under `d/`:
//!
//! - through the CLI (`garuda sandbox --staged --apply`, overlay backend), [`CLI_RUNS`] times
//!   at least, and on until one run reached its apply: applied, refused for the link, refused
//!   as a conflict, or nothing to apply (the command's view had the link);
//! - through the library (`Session::apply`), [`APPLIES`] times: a new file in `d/` and a new
//!   file in a new folder under `d/`, each applied fully inside the project or refused with
//!   `StagingError::UnsafeProjectPath` (a link at `d`);
//! - the copy backend's initial copy and sync (`Session::create`, `Session::prepare`), until
//!   [`MIN_COPIED`] got through: no copy ever holds a file from the outside folder. Negative
//!   control: `cp -a` (which the initial copy used to be) racing the same swapper does copy
//!   it.
//!
//! Each of the three (CLI, library, copies) races a swapper of its own, stopped when it ends,
//! so each swapper's count is the swaps made against that one: at least [`MIN_SWAPS`] each
//! (the CLI runs and the copies go on past their counts until their swapper reached it).
//! Then `OUTSIDE` must still be empty. **Negative controls**, in the same test against the
//! same swapper program (started again): a path-based writer (check `d` by name, then
//! `fs::write(project.join("d/…"))`, the way apply used to resolve paths) does write into
//! `OUTSIDE` within [`NEGATIVE_ATTEMPTS`] tries, and `cp -a` copies the outside file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // the contract suite's helpers; this test uses the binaries' paths
mod util;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use garuda_staging::{BackendChoice, ChangeKind, FoundKind, Session, StagingError};

const EXECUTORS: [&str; 2] = ["landlock", "bubblewrap"];
/// Library applies per executor, racing the swapper (at least; more until both outcomes, applied
/// and refused, were seen).
const APPLIES: usize = 150;
/// CLI applies per executor.
const CLI_RUNS: usize = 6;
/// Copy-backend sessions per executor that must get through (initial copy and a sync) while
/// the swapper runs. Most initial copies are refused for meeting the link (each walks `d` and
/// `d.link` three times: the reflink probe, the size count, the copy), so up to
/// [`COPY_SESSIONS_MAX`] are made, stopping once enough got through; the sync of one that did
/// is tried up to [`SYNC_TRIES`] times.
const MIN_COPIED: usize = 3;
const COPY_SESSIONS_MAX: usize = 2_000;
const SYNC_TRIES: usize = 50;
/// Bound of the copy negative control's `cp -a` runs.
const CP_ATTEMPTS: usize = 1_500;
/// Content of the file in the outside folder that no copy may ever hold.
const SECRET: &str = "SECRET outside the project\n";
/// Swaps each swapper must have made against what it raced (the CLI applies, the library
/// applies, the copies), per executor.
const MIN_SWAPS: u64 = 5_000;
/// Bound of the negative control's tries.
const NEGATIVE_ATTEMPTS: usize = 2_000;

/// The project (with `d/` and `d.link`), the outside folder, and the homes, under the real
/// user's `~/.cache` (every Linux executor gives the command a private `/tmp`).
struct World {
    base: PathBuf,
    project: PathBuf,
    outside: PathBuf,
    /// HOME of the swapper's `garuda`.
    swapper_home: PathBuf,
    /// HOME of the CLI applies' `garuda`.
    cli_home: PathBuf,
    /// Garuda home of the library session.
    staging_home: PathBuf,
}

impl World {
    fn new(tag: &str) -> World {
        let real_home = std::env::var_os("HOME").expect("HOME");
        let base = PathBuf::from(real_home)
            .join(".cache/garuda-apply-race")
            .join(format!("{}-{tag}", std::process::id()));
        if base.exists() {
            fs::remove_dir_all(&base).unwrap();
        }
        fs::create_dir_all(&base).unwrap();
        let base = fs::canonicalize(&base).unwrap();
        let w = World {
            project: base.join("project"),
            outside: base.join("outside"),
            swapper_home: base.join("swapper-home"),
            cli_home: base.join("cli-home"),
            staging_home: base.join("staging-home"),
            base,
        };
        for d in [
            &w.project,
            &w.outside,
            &w.swapper_home,
            &w.cli_home,
            &w.staging_home,
        ] {
            fs::create_dir_all(d).unwrap();
        }
        fs::create_dir(w.project.join("d")).unwrap();
        fs::write(w.project.join("d/keep.txt"), "keep\n").unwrap();
        std::os::unix::fs::symlink(&w.outside, w.project.join("d.link")).unwrap();
        w
    }

    fn d(&self) -> PathBuf {
        self.project.join("d")
    }

    /// Everything in the outside folder.
    fn outside_entries(&self) -> Vec<String> {
        fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

/// The swapper: `garuda sandbox --executor X -- garuda-probe swap-loop d d.link .stop`, in
/// direct mode, started before the applies. Stopped (and waited for) when dropped.
struct Swapper {
    child: Option<Child>,
    stop: PathBuf,
    /// Swaps made so far (the probe's `at=N` lines), and the reader of its stdout, which
    /// returns the whole output.
    made: std::sync::Arc<std::sync::atomic::AtomicU64>,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl Swapper {
    fn start(w: &World, executor: &str) -> Swapper {
        let garuda = util::garuda_bin().unwrap();
        let stop = w.project.join(".stop");
        let child = Command::new(garuda)
            .args(["sandbox", "--executor", executor, "--timeout", "600"])
            .arg("--project")
            .arg(&w.project)
            .arg("--")
            .arg(util::PROBE)
            .arg("swap-loop")
            .arg(w.d())
            .arg(w.project.join("d.link"))
            .arg(&stop)
            .current_dir(&w.project)
            .env("HOME", &w.swapper_home)
            .env_remove("GARUDA_HOME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut child = child;
        let made = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = {
            let made = std::sync::Arc::clone(&made);
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut all = String::new();
                for line in std::io::BufReader::new(stdout).lines() {
                    let line = line.unwrap_or_default();
                    if let Some(n) = line.strip_prefix("at=").and_then(|n| n.parse().ok()) {
                        made.store(n, std::sync::atomic::Ordering::SeqCst);
                    }
                    all.push_str(&line);
                    all.push('\n');
                }
                all
            })
        };
        let mut s = Swapper {
            child: Some(child),
            stop,
            made,
            reader: Some(reader),
        };
        // The race starts once the loop runs: `d` has been seen as a link. (A bound against a
        // hang, not a timing assertion.)
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if fs::symlink_metadata(w.d()).is_ok_and(|m| m.file_type().is_symlink()) {
                break;
            }
            let child = s.child.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                let out = s.finish();
                panic!(
                    "{executor}: the swapper did not start: {}\n{}",
                    text(&out.stdout),
                    text(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        s
    }

    /// Stops the loop (it ends with `d` the real folder again) and returns its output.
    fn finish(&mut self) -> Output {
        let _ = fs::write(&self.stop, "");
        let child = self.child.take().expect("the swapper runs");
        let mut out = child.wait_with_output().unwrap();
        out.stdout = self
            .reader
            .take()
            .map(|r| r.join().unwrap())
            .unwrap_or_default()
            .into_bytes();
        let _ = fs::remove_file(&self.stop);
        out
    }

    /// Swaps made so far (to within the probe's progress step).
    fn made(&self) -> u64 {
        self.made.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// [`Swapper::finish`], then the number of swaps it made, checking that it ran the whole
    /// time and ended with `d` the real folder.
    fn swaps(mut self, w: &World, executor: &str) -> u64 {
        let out = self.finish();
        let stdout = text(&out.stdout);
        let swaps = stdout
            .lines()
            .last()
            .unwrap_or_default()
            .strip_prefix("swaps=")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{executor}: the swapper failed: {stdout}\n{}",
                    text(&out.stderr)
                )
            });
        assert!(fs::symlink_metadata(w.d()).unwrap().is_dir());
        swaps
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = fs::write(&self.stop, "");
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            // Only the child this test started, by its own handle.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The refusal an apply must give when it meets the swapped-in link at `d`.
fn is_link_refusal(e: &StagingError) -> bool {
    matches!(
        e,
        StagingError::UnsafeProjectPath { at, found: FoundKind::Link | FoundKind::Changing, .. }
            if at == "d"
    )
}

/// What the library applies did.
#[derive(Debug, Default)]
struct Tally {
    /// Project-relative paths written by applies that succeeded.
    applied: Vec<String>,
    refused: usize,
    /// Lists taken while `d` was the link (not applied).
    listed_over_link: usize,
}

/// [`APPLIES`] staged changes through the library, racing the swapper: odd ones add
/// `d/f<i>.txt`, even ones `d/n<i>/f.txt` (a new folder made under the raced one).
fn library_applies(w: &World) -> Tally {
    let mut s = Session::create(&w.staging_home, &w.project, BackendChoice::Overlay, true)
        .expect("session");
    let upper = match s.view() {
        garuda_policy::StagedView::Overlay { upper, .. } => upper,
        other => panic!("expected the overlay layout, got {other:?}"),
    };
    let mut tally = Tally::default();
    let mut i = 0;
    // At least APPLIES, and on until both outcomes were seen: on a loaded machine a run of
    // them can all land between two swaps (once 150 applied, none refused, with 58 lists
    // taken over the link), which proves nothing about the race.
    let exercised = |t: &Tally| {
        t.applied.len() + t.refused >= APPLIES && !t.applied.is_empty() && t.refused > 0
    };
    while !exercised(&tally) {
        i += 1;
        assert!(
            i <= 10 * APPLIES,
            "too few lists could be applied, or the race never went both ways: {tally:?}"
        );
        let mark = s.prepare().unwrap();
        // The "command": its write lands in upper/ (the overlay's upper layer, by hand).
        let rel = if i % 2 == 1 {
            format!("d/f{i}.txt")
        } else {
            format!("d/n{i}/f.txt")
        };
        let staged = upper.join(&rel);
        fs::create_dir_all(staged.parent().unwrap()).unwrap();
        fs::write(&staged, format!("content {i}\n")).unwrap();
        let set = s.changes(&mark).unwrap();
        let listed: Vec<_> = set
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.kind))
            .collect();
        if listed != [(rel.as_str(), ChangeKind::Added)] {
            // Listed while `d` was the link: upper's folder `d` then replaces a link, which
            // lists as its deletion (a change the conflict check would refuse). Not an
            // apply of the raced path; the list is discarded and the next one is made.
            assert_eq!(
                listed,
                [
                    ("d", ChangeKind::Deleted),
                    (rel.as_str(), ChangeKind::Added)
                ],
                "{set:?}"
            );
            tally.listed_over_link += 1;
            s.discard(&set).unwrap();
            continue;
        }
        match s.apply(&set) {
            Ok(applied) => {
                assert_eq!(applied.written, vec![rel.clone()]);
                tally.applied.push(rel);
            }
            Err(e) if is_link_refusal(&e) => {
                tally.refused += 1;
                s.discard(&set).unwrap();
            }
            Err(e) => panic!("apply {i} ({rel}): neither applied nor refused for the link: {e}"),
        }
    }
    s.close().unwrap();
    tally
}

/// One `garuda sandbox --staged --apply` run whose command writes `d/<name>` or
/// `d.link/<name>` (whichever is the folder in its view; the link's target is read-only
/// there).
fn cli_apply(w: &World, executor: &str, name: &str) -> Output {
    fs::create_dir_all(w.cli_home.join(".garuda")).unwrap();
    fs::write(
        w.cli_home.join(".garuda/policy.json"),
        "{\"staging\": {\"backend\": \"overlay\"}}",
    )
    .unwrap();
    // Its view caches what it looked up: `d` seen as the link stays the link. Then the
    // other name, `d.link`, is the folder (the two are exchanged), and just as raced.
    let script = format!(
        "for i in 1 2 3 4; do echo cli > d/{name} && exit 0; echo cli > d.link/{name} && exit 0; done; exit 7"
    );
    Command::new(util::garuda_bin().unwrap())
        .args(["sandbox", "--executor", executor, "--staged", "--apply"])
        .args(["--timeout", "120", "--project"])
        .arg(&w.project)
        .args(["--", "/bin/sh", "-c", &script])
        .current_dir(&w.project)
        .env("HOME", &w.cli_home)
        .env_remove("GARUDA_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// How a CLI run ended. Every run must end in one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CliOutcome {
    /// Applied; the file is in the project.
    Applied,
    /// The apply met the link at `d` and was refused.
    RefusedForTheLink,
    /// The list was taken while `d` was the link (upper's folder `d` over a link lists as
    /// the link's deletion), and the conflict check refused it: `d` changed during the run.
    Conflict,
    /// The command never managed to write (its view had the link at `d` each time): nothing
    /// to apply.
    NothingStaged,
    /// The policy's walk of the project opened `d` or `d.link` (a folder when the top was
    /// listed) and met the link the swapper had just put there: the run was refused before
    /// its command.
    WalkRefused,
}

fn classify_cli(out: &Output, executor: &str, name: &str) -> CliOutcome {
    let err = text(&out.stderr);
    // `at d` also matches `at d.link`: the two names are exchanged, both are raced.
    let refused_for_the_link = err.contains("garuda: nothing was applied: d")
        && err.contains(&format!("/{name}: the project has "))
        && (err.contains("the project has a symbolic link at d")
            || err.contains("the project has an entry that changed while it was opened at d"));
    match out.status.code() {
        Some(0) if err.contains("garuda: applied: 1 file written") => CliOutcome::Applied,
        // 122: the apply was refused (docs/staging.md, "Exit codes of a staged command").
        Some(122) if refused_for_the_link => CliOutcome::RefusedForTheLink,
        Some(122)
            if err.contains(
                "nothing was applied: these project files changed while the command ran, so nothing was applied: d",
            ) =>
        {
            CliOutcome::Conflict
        }
        Some(7) if err.contains("the command changed nothing") => CliOutcome::NothingStaged,
        Some(125)
            if (err.contains("/project/d stopped being a folder while the project was walked")
                || err.contains("/project/d.link stopped being a folder while the project was walked")) =>
        {
            CliOutcome::WalkRefused
        }
        _ => panic!(
            "{executor}/{name}: an outcome that is neither applied nor refused (exit {:?}):\n{err}",
            out.status.code()
        ),
    }
}

/// True when a regular file under `root` (never following a link) holds [`SECRET`].
fn holds_secret(root: &Path) -> bool {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() && fs::read(&p).is_ok_and(|c| c == SECRET.as_bytes()) {
                return true;
            }
        }
    }
    false
}

/// What the copy sessions did.
#[derive(Debug, Default)]
struct Copies {
    /// Sessions whose copy and syncs went through.
    copied: usize,
    /// Initial copies and syncs refused for a link or a kind change met on the way.
    refused: usize,
}

/// Copy-backend sessions racing the swapper, until [`MIN_COPIED`] got through and the swapper
/// made [`MIN_SWAPS`] swaps against them: each copies
/// the project and brings the copy up to date once; after each step no file of the copy may
/// hold the outside secret. Each step either works or is refused with `UnsafeProjectPath`.
fn copy_sessions(w: &World, executor: &str, swapper: &Swapper) -> Copies {
    let home = w.base.join("copy-home");
    fs::create_dir_all(&home).unwrap();
    let mut copies = Copies::default();
    for i in 0..COPY_SESSIONS_MAX {
        // Enough got through, and the swapper made its floor of swaps against them (a few
        // copies can end within fewer swaps on a loaded machine: more are raced).
        if copies.copied >= MIN_COPIED && swapper.made() >= MIN_SWAPS {
            break;
        }
        let mut s = match Session::create(&home, &w.project, BackendChoice::Copy, false) {
            Ok(s) => s,
            Err(StagingError::UnsafeProjectPath { .. }) => {
                copies.refused += 1;
                continue;
            }
            Err(e) => panic!("{executor}: copy session {i}: {e}"),
        };
        let copy = match s.view() {
            garuda_policy::StagedView::Copy { dir } => dir,
            other => panic!("expected a copy, got {other:?}"),
        };
        assert!(
            !holds_secret(&copy),
            "{executor}: copy session {i}: the initial copy holds the outside secret"
        );
        // A sync racing the swapper, tried again while it is refused; each is checked.
        let mut synced = false;
        for _ in 0..SYNC_TRIES {
            match s.prepare() {
                Ok(_) => synced = true,
                Err(StagingError::UnsafeProjectPath { .. }) => copies.refused += 1,
                Err(e) => panic!("{executor}: copy session {i}: sync: {e}"),
            }
            assert!(
                !holds_secret(&copy),
                "{executor}: copy session {i}: a sync copied the outside secret"
            );
            if synced {
                copies.copied += 1;
                break;
            }
        }
        s.close().unwrap();
    }
    copies
}

fn race(executor: &str) {
    let w = World::new(executor);

    // Through the CLI, on the overlay backend: the project is the live lower layer, so the
    // command writes `d/...` while `d` is being swapped, and the apply races the swapper.
    // (First, while `d` holds no folder: the supervisor's own policy walk lists the project
    // by name, and a folder of `d` that vanishes under it stops the run before the command.)
    // The copy backend's copies are raced below.
    let swapper = Swapper::start(&w, executor);
    let mut cli = Vec::new();
    // At least CLI_RUNS, and on until the swapper made its floor against them and one run
    // reached its apply (bounded): on a loaded machine all of the first few can stop earlier,
    // before the command or at the walk, which proves nothing about the apply.
    for k in 0..10 * CLI_RUNS {
        let reached = cli
            .iter()
            .any(|(_, o)| matches!(o, CliOutcome::Applied | CliOutcome::RefusedForTheLink));
        if k >= CLI_RUNS && swapper.made() >= MIN_SWAPS && reached {
            break;
        }
        let name = format!("cli-{k}.txt");
        let out = cli_apply(&w, executor, &name);
        cli.push((name.clone(), classify_cli(&out, executor, &name)));
    }
    let cli_swaps = swapper.swaps(&w, executor);

    let swapper = Swapper::start(&w, executor);
    let tally = library_applies(&w);
    let library_swaps = swapper.swaps(&w, executor);

    // The claim: nothing was ever written outside the project.
    assert_eq!(
        w.outside_entries(),
        Vec::<String>::new(),
        "{executor}: an apply wrote outside the project"
    );

    // The copy backend's copies, racing a swapper: the outside folder now holds a secret, and
    // no staging copy may ever hold it (initial copy and syncs).
    fs::write(w.outside.join("secret.txt"), SECRET).unwrap();
    let swapper = Swapper::start(&w, executor);
    let copies = copy_sessions(&w, executor, &swapper);
    let copy_swaps = swapper.swaps(&w, executor);

    // Negative controls, against the same swapper program.
    let swapper = Swapper::start(&w, executor);
    // A path-based writer that does what apply used to do — check the folder by name
    // (`lstat`: a real folder), then, after the journal was written and synced (a
    // millisecond here), create the file by name — does write outside.
    let mut wrote_outside_at = None;
    for k in 0..NEGATIVE_ATTEMPTS {
        // The check passes once `d` is the real folder (a bounded wait).
        let mut spins = 0u64;
        while !fs::symlink_metadata(w.d()).is_ok_and(|m| m.is_dir()) {
            spins += 1;
            assert!(spins < 10_000_000, "{executor}: `d` stays a link");
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(1));
        let _ = fs::write(w.d().join("path-based.txt"), "x");
        if w.outside.join("path-based.txt").exists() {
            wrote_outside_at = Some(k);
            break;
        }
    }
    // `cp -a` (which walks by path name, as the initial copy used to) does copy the secret.
    let mut cp_leaked_at = None;
    for k in 0..CP_ATTEMPTS {
        let dest = w.base.join(format!("cp-{k}"));
        let _ = Command::new("cp")
            .arg("-a")
            .arg("--")
            .arg(&w.project)
            .arg(&dest)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let leaked = holds_secret(&dest);
        let _ = fs::remove_dir_all(&dest);
        if leaked {
            cp_leaked_at = Some(k);
            break;
        }
    }
    let control_swaps = swapper.swaps(&w, executor);
    assert!(
        cp_leaked_at.is_some(),
        "{executor}: negative control: `cp -a` never copied the outside secret in {CP_ATTEMPTS} runs ({control_swaps} swaps)"
    );
    assert!(
        wrote_outside_at.is_some(),
        "{executor}: negative control: the path-based writer never wrote outside in {NEGATIVE_ATTEMPTS} tries ({control_swaps} swaps)"
    );

    // Each swapper ran the whole time of what it raced, and ended with `d` the real folder.
    for (what, swaps) in [
        ("the CLI applies", cli_swaps),
        ("the library applies", library_swaps),
        ("the copies", copy_swaps),
    ] {
        assert!(
            swaps >= MIN_SWAPS,
            "{executor}: only {swaps} swaps against {what}"
        );
    }

    // Every library apply either landed fully inside the project or was refused; both
    // happened (the race was run, not avoided).
    for rel in &tally.applied {
        let i: usize = rel
            .trim_start_matches("d/f")
            .trim_start_matches("d/n")
            .split(['.', '/'])
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            fs::read_to_string(w.project.join(rel)).unwrap(),
            format!("content {i}\n"),
            "{executor}: {rel}"
        );
    }
    assert!(
        !tally.applied.is_empty() && tally.refused > 0,
        "{executor}: the race was not exercised both ways: {:?}",
        tally
    );
    assert!(tally.applied.len() + tally.refused >= APPLIES, "{tally:?}");
    // Nothing of a refused apply reached the project: exactly the applied files are new
    // (besides keep.txt and the negative control's file).
    let mut files = Vec::new();
    let mut stack = vec![w.d()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p);
            } else {
                files.push(p.strip_prefix(&w.project).unwrap().display().to_string());
            }
        }
    }
    let cli_applied: Vec<String> = cli
        .iter()
        .filter(|(_, o)| *o == CliOutcome::Applied)
        .map(|(n, _)| format!("d/{n}"))
        .collect();
    let mut want: Vec<String> = tally
        .applied
        .iter()
        .cloned()
        .chain(cli_applied)
        .chain(["d/keep.txt".to_string(), "d/path-based.txt".to_string()])
        .collect();
    // The path-based writer may also have landed inside before it landed outside.
    if !files.iter().any(|f| f == "d/path-based.txt") {
        want.retain(|f| f != "d/path-based.txt");
    }
    want.sort();
    files.sort();
    assert_eq!(
        files, want,
        "{executor}: temporary files or refused changes were left"
    );
    assert!(
        !fs::read_dir(&w.project).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("garuda-apply-")),
        "{executor}: a temporary file was left at the top"
    );
    assert!(
        cli.iter()
            .any(|(_, o)| matches!(o, CliOutcome::Applied | CliOutcome::RefusedForTheLink)),
        "{executor}: no CLI run reached its apply: {cli:?}"
    );
    assert!(
        copies.copied >= MIN_COPIED,
        "{executor}: too few copy sessions got through: {copies:?}"
    );
    eprintln!(
        "{executor}: swaps against the CLI {cli_swaps}, the library {library_swaps}, the copies {copy_swaps}; library: {} applied, {} refused ({} lists taken over the link); CLI: {cli:?}; copies: {copies:?}; the path-based writer wrote outside after {} tries, cp -a copied the secret after {} runs",
        tally.applied.len(),
        tally.refused,
        tally.listed_over_link,
        wrote_outside_at.unwrap_or(0) + 1,
        cp_leaked_at.unwrap_or(0) + 1
    );
    // The world is readable for the next run's cleanup even if the swapper left modes.
    let _ = fs::set_permissions(&w.base, fs::Permissions::from_mode(0o755));
}

#[test]
fn apply_racing_a_link_swapper_never_writes_outside_landlock() {
    race(EXECUTORS[0]);
}

#[test]
fn apply_racing_a_link_swapper_never_writes_outside_bubblewrap() {
    race(EXECUTORS[1]);
}

/// Not a race, the rule itself: with `d` already a link when apply starts, the refusal names
/// it; a path-based write at the same moment lands outside (negative control).
#[test]
fn a_link_on_the_applied_path_is_refused_by_name() {
    let w = World::new("static");
    let mut s = Session::create(&w.staging_home, &w.project, BackendChoice::Overlay, true).unwrap();
    let upper = match s.view() {
        garuda_policy::StagedView::Overlay { upper, .. } => upper,
        other => panic!("expected the overlay layout, got {other:?}"),
    };
    let mark = s.prepare().unwrap();
    fs::create_dir_all(upper.join("d")).unwrap();
    fs::write(upper.join("d/new.txt"), "new\n").unwrap();
    let set = s.changes(&mark).unwrap();
    // After the list was shown, `d` becomes a link to the outside folder.
    fs::rename(w.d(), w.project.join("d.real")).unwrap();
    fs::rename(w.project.join("d.link"), w.d()).unwrap();
    let err = s.apply(&set).unwrap_err();
    assert!(is_link_refusal(&err), "{err}");
    assert_eq!(
        err.to_string(),
        "d/new.txt: the project has a symbolic link at d where a real folder was expected; Garuda never writes through it (a link there may have been swapped in by a command running in the same project)"
    );
    assert!(w.outside_entries().is_empty());
    assert!(!w.project.join("d.real/new.txt").exists());
    // Negative control: the same path, resolved by name, is outside.
    fs::write(w.project.join("d/new.txt"), "new\n").unwrap();
    assert_eq!(w.outside_entries(), vec!["new.txt".to_string()]);
    s.discard(&set).unwrap();
    s.close().unwrap();
}
