//! The whole CLI as a user runs it: the release `garuda` binary as a child process, paired in
//! the same run against what it wraps.
//!
//! Run: `cargo bench -p garuda --bench cli -- [OPTIONS]`. Options:
//! - `--runs N` measured runs per variant (default 200), after a warm-up of N/10;
//! - `--history N[,N…]` measure again after this many prior runs in the same project
//!   (default `0`; e.g. `0,1000,10000`); the prior runs are real `garuda sandbox` runs with the
//!   landlock executor (or bubblewrap when landlock is not available), so they leave exactly the
//!   history a user's runs leave;
//! - `--files N` the project: `0` (default) is a fresh `git init`, any other number a project
//!   of N files made by `benches/gen-project.sh` (20,000 is the project);
//! - `--gap-ms N` idle time before each measured run (default 0): on Linux before 6.14
//!   bubblewrap as root joins a cgroup, which after an idle moment waits for an RCU grace
//!   period, so back-to-back runs alone hide a cost users see;
//! - `--staged` adds `garuda sandbox --staged --discard` (landlock) to the variants.
//!
//! Variants, interleaved run by run so that each pair sees the same machine state:
//! - `true`: `/bin/true` started directly — the baseline of the landlock executor;
//! - `garuda landlock`: `garuda sandbox --executor landlock -- /bin/true`;
//! - `bwrap`: the system bwrap with the exact argument vector and inputs the bubblewrap
//!   executor builds for this project (prepared once, in this process) — the baseline of the
//!   bubblewrap executor;
//! - `garuda bubblewrap`: `garuda sandbox --executor bubblewrap -- /bin/true`;
//! - `garuda landlock, empty project` (with `--files`): the same run in a fresh `git init`
//!   beside the big project, with the same home — the baseline of the big project's cost;
//! - `garuda staged` (with `--staged`): `garuda sandbox --executor landlock --staged --discard
//!   -- /bin/true`.
//!
//! Below each table, the median of the differences run by run (each round runs every variant
//! once, back to back) for each variant and its baseline: steadier than the difference of the
//! medians above it.
//!
//! Every run uses a fresh `GARUDA_HOME` made for this benchmark and a project under `$HOME`.
//! Figures are milliseconds of wall time from spawn to exit, median and p90. The in-process
//! figures of `benches/spawn.rs` time `Executor::run` alone; this one times what the user waits
//! for: process start, policy, audit, executor, exit.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::ffi::OsString;
use std::io::Seek;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use garuda_policy::{build_exec_policy, load_settings, HostEnv};
use garuda_supervisor::executor::bubblewrap::{self, Fds};
use garuda_supervisor::executor::{self, CommandSpec};

#[allow(dead_code)] // shared with the other benchmarks; this one uses `garuda_bin`
mod common;
use common::garuda_bin;

struct Options {
    runs: usize,
    history: Vec<usize>,
    files: usize,
    gap: Duration,
    staged: bool,
}

fn options() -> Options {
    let mut o = Options {
        runs: 200,
        history: vec![0],
        files: 0,
        gap: Duration::ZERO,
        staged: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("option needs a value");
        match a.as_str() {
            "--runs" => o.runs = value().parse().expect("--runs N"),
            "--history" => {
                o.history = value()
                    .split(',')
                    .map(|n| n.parse().expect("--history N[,N…]"))
                    .collect()
            }
            "--files" => o.files = value().parse().expect("--files N"),
            "--gap-ms" => o.gap = Duration::from_millis(value().parse().expect("--gap-ms N")),
            "--staged" => o.staged = true,
            // cargo bench passes `--bench`.
            "--bench" => {}
            other => panic!("unknown option {other}"),
        }
    }
    o
}

fn quiet(cmd: &mut Command) -> &mut Command {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = quiet(cmd).output().expect(what);
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_project(parent: &Path, files: usize) -> PathBuf {
    let project = parent.join("project");
    if files == 0 {
        std::fs::create_dir_all(&project).unwrap();
        run_ok(
            Command::new("git")
                .args(["init", "-q"])
                .current_dir(&project),
            "git init",
        );
    } else {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen-project.sh");
        run_ok(
            Command::new("bash")
                .arg(&script)
                .arg(&project)
                .arg(files.to_string()),
            "gen-project.sh",
        );
    }
    project
}

/// One measured variant: a name and a way to run it once.
struct Variant<'a> {
    name: &'static str,
    baseline: Option<&'static str>,
    run: Box<dyn FnMut() + 'a>,
    times: Vec<Duration>,
}

fn median_p90(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(v[v.len() / 2]),
        ms(v[(v.len() * 9 / 10).min(v.len() - 1)]),
    )
}

fn garuda_cmd(project: &Path, garuda_home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(garuda_bin());
    c.arg("sandbox")
        .args(args)
        .args(["--", "/bin/true"])
        .current_dir(project)
        .env("GARUDA_HOME", garuda_home);
    c
}

/// A variant that runs `garuda sandbox ARGS -- /bin/true` in `project` with `garuda_home`.
fn garuda_variant<'a>(
    name: &'static str,
    baseline: &'static str,
    project: &Path,
    garuda_home: &Path,
    args: &'static [&'static str],
) -> Variant<'a> {
    let (p, g) = (project.to_path_buf(), garuda_home.to_path_buf());
    Variant {
        name,
        baseline: Some(baseline),
        run: Box::new(move || run_ok(&mut garuda_cmd(&p, &g, args), name)),
        times: Vec::new(),
    }
}

fn main() {
    let o = options();
    let home = std::env::var_os("HOME").expect("HOME");
    let dir = tempfile::tempdir_in(&home).expect("tempdir under HOME");
    let project = make_project(dir.path(), o.files);
    // With `--files`, an empty project too (a fresh `git init`), to pair the big one against.
    let empty_project = if o.files > 0 {
        make_project(&dir.path().join("empty"), 0)
    } else {
        project.clone()
    };
    let garuda_home = dir.path().join("garuda-home");
    std::fs::create_dir_all(&garuda_home).unwrap();

    let landlock_ok = quiet(&mut garuda_cmd(
        &project,
        &garuda_home,
        &["--executor", "landlock"],
    ))
    .status()
    .is_ok_and(|s| s.success());
    let bwrap_ok = quiet(&mut garuda_cmd(
        &project,
        &garuda_home,
        &["--executor", "bubblewrap"],
    ))
    .status()
    .is_ok_and(|s| s.success());

    // As a real project is: still for longer than the walk cache's racy margin since it was
    // made (and since the runs above made its `.garuda` folder). Until then every run lists
    // every folder again (docs/policy.md, "The walk cache"), which is not what a user's runs in
    // a project they work in pay.
    std::thread::sleep(Duration::from_millis(2500));

    // The bubblewrap executor's own argument vector for this project, for the bare baseline.
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != "GARUDA_HOME")
        .collect();
    vars.push(("GARUDA_HOME".into(), garuda_home.clone().into()));
    let mut host = HostEnv::from_vars(vars).expect("environment");
    host.system_secrets = HostEnv::from_process().expect("environment").system_secrets;
    let settings = load_settings(&project, &host).expect("settings");
    let policy = build_exec_policy(&project, &settings, &host).expect("policy");
    let cmd = CommandSpec::new(["/bin/true"]);
    let program = executor::seccomp::program().expect("seccomp");
    let seccomp_bytes = executor::seccomp::program_bytes(&program);

    println!(
        "whole CLI, {} runs per variant, project: {}, gap {} ms, uid {}",
        o.runs,
        if o.files == 0 {
            "fresh git init".to_string()
        } else {
            format!("{} files", o.files)
        },
        o.gap.as_millis(),
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string)))
            .unwrap_or_default()
    );

    let mut done_history = 0usize;
    for &history in &o.history {
        // Prior runs, real ones, to build up the project's history.
        let prior = if landlock_ok {
            "landlock"
        } else {
            "bubblewrap"
        };
        while done_history < history {
            run_ok(
                &mut garuda_cmd(&project, &garuda_home, &["--executor", prior]),
                "prior run",
            );
            done_history += 1;
        }

        let mut variants: Vec<Variant> = Vec::new();
        variants.push(Variant {
            name: "true",
            baseline: None,
            run: Box::new(|| run_ok(&mut Command::new("/bin/true"), "/bin/true")),
            times: Vec::new(),
        });
        if landlock_ok {
            variants.push(garuda_variant(
                "garuda landlock",
                "true",
                &project,
                &garuda_home,
                &["--executor", "landlock"],
            ));
        }
        if bwrap_ok {
            let bwrap = bubblewrap::bwrap_path().expect("bwrap");
            let mut seccomp = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut seccomp, &seccomp_bytes).unwrap();
            let empties: Vec<std::fs::File> = (0..bubblewrap::empty_files_needed(&policy))
                .map(|_| tempfile::tempfile().unwrap())
                .collect();
            let binds = bubblewrap::reserve_binds(&policy).unwrap();
            let (pol, c) = (&policy, &cmd);
            variants.push(Variant {
                name: "bwrap",
                baseline: None,
                run: Box::new(move || {
                    seccomp.rewind().unwrap();
                    let fds = Fds {
                        seccomp: seccomp.as_raw_fd(),
                        empty: empties.iter().map(|f| f.as_raw_fd()).collect(),
                        binds: binds.iter().map(|f| f.as_raw_fd()).collect(),
                        status: None,
                        exec: None,
                    };
                    run_ok(
                        &mut bubblewrap::bare_command(&bwrap, pol, &pol.project_root, c, &fds),
                        "bare bwrap",
                    )
                }),
                times: Vec::new(),
            });
            variants.push(garuda_variant(
                "garuda bubblewrap",
                "bwrap",
                &project,
                &garuda_home,
                &["--executor", "bubblewrap"],
            ));
        }
        if o.files > 0 && landlock_ok {
            // The same run in an empty project beside this one, same home: the issue's "direct
            // on the 20,000-file project ≤ direct on an empty project + 2 ms", paired.
            variants.push(garuda_variant(
                "garuda landlock, empty project",
                "true",
                &empty_project,
                &garuda_home,
                &["--executor", "landlock"],
            ));
        }
        if o.staged && landlock_ok {
            variants.push(garuda_variant(
                "garuda staged",
                "garuda landlock",
                &project,
                &garuda_home,
                &["--executor", "landlock", "--staged", "--discard"],
            ));
        }

        for _ in 0..o.runs / 10 + 1 {
            for v in variants.iter_mut() {
                (v.run)();
            }
        }
        for _ in 0..o.runs {
            for v in variants.iter_mut() {
                if !o.gap.is_zero() {
                    std::thread::sleep(o.gap);
                }
                let t = Instant::now();
                (v.run)();
                v.times.push(t.elapsed());
            }
        }
        // Runs made while measuring count as history too.
        done_history += (o.runs + o.runs / 10 + 1)
            * variants
                .iter()
                .filter(|v| v.name.starts_with("garuda"))
                .count();

        let audit_bytes = dir_size(&garuda_home.join("audit"));
        println!(
            "\nafter {history} prior runs (audit files: {:.2} MB)",
            audit_bytes as f64 / 1e6
        );
        println!("| variant | median | p90 | over baseline |");
        println!("|---|---|---|---|");
        // Differences run by run (each round runs every variant once, back to back), before
        // the times are sorted: the same machine state on both sides of each difference.
        let mut pairs: Vec<(&str, &str)> = variants
            .iter()
            .filter_map(|v| v.baseline.map(|b| (v.name, b)))
            .collect();
        if variants
            .iter()
            .any(|v| v.name == "garuda landlock, empty project")
        {
            pairs.push(("garuda landlock", "garuda landlock, empty project"));
        }
        let paired: Vec<String> = pairs
            .iter()
            .filter_map(|(a, b)| {
                let times = |n: &str| variants.iter().find(|v| v.name == n).map(|v| &v.times);
                let (ta, tb) = (times(a)?, times(b)?);
                let mut d: Vec<f64> = ta
                    .iter()
                    .zip(tb)
                    .map(|(x, y)| (x.as_secs_f64() - y.as_secs_f64()) * 1000.0)
                    .collect();
                d.sort_by(f64::total_cmp);
                Some(format!(
                    "- {a} − {b}: {:+.2} ms (median of {} paired differences)",
                    d[d.len() / 2],
                    d.len()
                ))
            })
            .collect();
        let medians: Vec<(&str, f64)> = variants
            .iter_mut()
            .map(|v| (v.name, median_p90(&mut v.times).0))
            .collect();
        for v in variants.iter_mut() {
            let (m, p) = median_p90(&mut v.times);
            let over = v
                .baseline
                .and_then(|b| medians.iter().find(|(n, _)| *n == b))
                .map(|(b, bm)| format!("{:+.2} over {b}", m - bm))
                .unwrap_or_else(|| "—".into());
            println!("| {} | {m:.2} | {p:.2} | {over} |", v.name);
        }
        println!();
        for line in paired {
            println!("{line}");
        }
    }
}

fn dir_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}
