//! The executors' differential fuzzer, bounded: a fixed seed's cases and fresh ones on every
//! sandbox executor, the saved regression cases, and the negative control (the host executor
//! caught by the same checks). The harness is `garuda_tests::diff`; see `docs/fuzzing.md`.
//!
//! A failing case is shrunk by proptest and saved as JSON under
//! `tests/fuzz-regressions/executor_diff/`, and `saved_regressions_replay` runs every saved
//! case forever after. `GARUDA_DIFF_CASES` sets how many fresh cases a run makes (default 400;
//! the fixed seed's 200 always run), `GARUDA_DIFF_SEED` their seed (default: from the clock,
//! printed).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // the contract suite's helpers: this suite uses a few
mod util;

use std::fs;
use std::path::{Path, PathBuf};

use garuda_supervisor::executor::{probe_executors, ExecutorKind};
use garuda_tests::diff::{check_case, counts, remove_tree, run_case, Case, GitShape, Link, Op};
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use util::PROBE;

/// The folder of one case's runs (under the real home: a sandbox's `/tmp` is its own).
fn case_base(tag: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let base = PathBuf::from(home)
        .join(".cache/garuda-diff")
        .join(format!("{}-{tag}", std::process::id()));
    assert!(
        !base.starts_with("/tmp"),
        "the cases must not live under /tmp"
    );
    base
}

/// The sandbox executors of this machine; one that cannot run is NOT TESTED (a failure unless
/// `GARUDA_ALLOW_NOT_TESTED` names `executor-diff-<name>`).
fn sandboxes() -> Vec<ExecutorKind> {
    let probes = probe_executors();
    let mut kinds = Vec::new();
    for kind in [ExecutorKind::Landlock, ExecutorKind::Bubblewrap] {
        let probe = probes.iter().find(|p| p.kind == kind).expect("probed");
        if probe.available {
            kinds.push(kind);
        } else {
            util::not_tested(
                &format!("executor-diff-{kind}"),
                &format!("the differential fuzzer on {kind} ({})", probe.detail),
            );
        }
    }
    kinds
}

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions/executor_diff")
}

/// Saves a failing case for `saved_regressions_replay`: where it went, or why it could not go
/// there (the source tree is read-only to the unprivileged user of `.ci/run`); the case is in
/// the failure's message either way.
fn save_regression(case: &Case) -> String {
    let dir = regressions_dir();
    let text = serde_json::to_string_pretty(case).unwrap_or_default();
    let name = garuda_tests::diff::fnv(text.as_bytes()).replace("ok:", "case-");
    let path = dir.join(format!("{name}.json"));
    match fs::create_dir_all(&dir).and_then(|()| fs::write(&path, text + "\n")) {
        Ok(()) => format!("saved as {}", path.display()),
        Err(e) => format!("not saved ({}: {e}); save it by hand", path.display()),
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs `cases` generated cases from `seed`; a failure is shrunk, saved and reported.
fn fuzz(kinds: &[ExecutorKind], tag: &str, seed: u64, cases: u32) {
    let base = case_base(tag);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 200,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let result = runner.run(&garuda_tests::diff::case(), |c| {
        check_case(Path::new(PROBE), tag, kinds, &base, &c).map_err(TestCaseError::fail)
    });
    remove_tree(&base);
    for line in counts(tag) {
        println!("{line}");
    }
    if let Err(e) = result {
        let detail = match &e {
            proptest::test_runner::TestError::Fail(why, case) => {
                let saved = save_regression(case);
                format!(
                    "{why}\nthe shrunk case, {saved}:\n{}",
                    serde_json::to_string_pretty(case).unwrap()
                )
            }
            other => other.to_string(),
        };
        panic!(
            "the differential fuzzer found a case (seed {seed}, uid {}):\n{detail}",
            util::uid()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// A fixed seed, the same on every run: what was found once is found again.
#[test]
fn fixed_seed_cases_keep_to_the_model() {
    let kinds = sandboxes();
    fuzz(&kinds, "fixed", 0x0061_7275_6461, 200);
}

/// Fresh cases each run (`GARUDA_DIFF_SEED`, `GARUDA_DIFF_CASES`).
#[test]
fn fresh_cases_keep_to_the_model() {
    let kinds = sandboxes();
    let seed = env_number("GARUDA_DIFF_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let cases = env_number("GARUDA_DIFF_CASES").map_or(400, |n| n as u32);
    // Printed so that a failure can be run again (also in the failure's message).
    println!(
        "executor_diff: seed {seed}, {cases} cases, uid {}",
        util::uid()
    );
    fuzz(&kinds, "fresh", seed, cases);
}

/// Every saved regression case, on every sandbox executor.
#[test]
fn saved_regressions_replay() {
    let kinds = sandboxes();
    let base = case_base("saved");
    let entries = fs::read_dir(regressions_dir())
        .unwrap_or_else(|e| panic!("{}: {e}", regressions_dir().display()));
    let mut failures = Vec::new();
    let mut replayed = 0;
    for e in entries.flatten() {
        if e.path().extension().is_none_or(|x| x != "json") {
            continue;
        }
        replayed += 1;
        let text = fs::read_to_string(e.path()).unwrap();
        let case: Case = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        if let Err(why) = check_case(Path::new(PROBE), "saved", &kinds, &base, &case) {
            failures.push(format!("{}:\n{why}", e.path().display()));
        }
    }
    remove_tree(&base);
    // The saved case of issue 16 at least: an empty or moved folder replays nothing.
    assert!(
        replayed > 0,
        "no saved case in {}",
        regressions_dir().display()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A direct case with `.garuda`, no second sandbox and no policy file.
fn plain_case(git: GitShape, links: Vec<Link>, ops: Vec<Op>) -> Case {
    Case {
        git,
        garuda: true,
        staged: false,
        second: vec![],
        race: false,
        user: Default::default(),
        links,
        ops,
    }
}

/// The negative control: the host executor (no sandbox) runs cases that break each check, and
/// the harness catches each: a secret read through a link, a write in the home, git's hook
/// rewritten, the git folder renamed away, a linked hooks folder removed and a missing
/// `.garuda` made, a TCP connection and a datagram to the host's loopback, a file a user
/// policy calls unreadable read through a link to its folder. On a sandbox executor the same
/// cases pass.
#[test]
fn the_harness_catches_the_host_executor() {
    let kinds = sandboxes();
    let base = case_base("control");
    let link = |at: &str, target: &str| Link {
        at: at.into(),
        target: target.into(),
    };
    let cases = [
        plain_case(
            GitShape::Folder,
            vec![link("project/l1", "@/home/.ssh/id_ed25519")],
            vec![Op::ReadAll("project/l1".into())],
        ),
        plain_case(
            GitShape::Folder,
            vec![],
            vec![Op::Write("home/notes.txt".into())],
        ),
        plain_case(
            GitShape::GitdirFile,
            vec![],
            vec![Op::Append("project/GITDIR/hooks/pre-commit".into())],
        ),
        plain_case(
            GitShape::Folder,
            vec![],
            vec![Op::Rename("project/.git".into(), "project/new".into())],
        ),
        Case {
            garuda: false,
            ..plain_case(
                GitShape::HooksLink,
                vec![],
                vec![
                    Op::Unlink("project/GITDIR/hooks".into()),
                    Op::Mkdir("project/.garuda".into()),
                ],
            )
        },
        plain_case(GitShape::Folder, vec![], vec![Op::TcpConnectHost]),
        plain_case(GitShape::Folder, vec![], vec![Op::UdpSendHost]),
        Case {
            user: garuda_tests::diff::UserPolicy {
                unreadable_file: true,
                ..Default::default()
            },
            ..plain_case(
                GitShape::Folder,
                vec![link("project/l1", "@/project/d")],
                vec![Op::ReadAll("project/l1/b.txt".into())],
            )
        },
    ];
    for case in &cases {
        let host = run_case(Path::new(PROBE), ExecutorKind::Host, &base, case);
        assert!(
            !host.findings.is_empty(),
            "the host executor was not caught on {case:?}: {:?}",
            host.results
        );
        // The same case in a sandbox: nothing found (each check's own control).
        check_case(Path::new(PROBE), "control", &kinds, &base, case)
            .unwrap_or_else(|why| panic!("{case:?}: {why}"));
    }
    remove_tree(&base);
}

/// The `fds` operation and its check see an inherited descriptor: the probe started by a shell
/// that left descriptor 7 open on a host folder answers `fds:7=…`, which the check reports
/// (the negative control: the bubblewrap executor before its exec step handed the command such
/// handles); in both sandboxes the same operation answers `fds:none` and nothing is found.
#[test]
fn an_inherited_descriptor_is_caught() {
    let out = std::process::Command::new("/bin/bash")
        .args(["-c", r#"exec 7</usr; exec "$0" fds"#, PROBE])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        line.starts_with("fds:") && line.contains("7=/usr"),
        "{line}"
    );
    // A handle on a process's descriptor folder is reported like any other, and the probe's
    // own listing handle (on the same folder: bash and the probe are one process) is not: it
    // is closed before the targets are read.
    let out = std::process::Command::new("/bin/bash")
        .args(["-c", r#"exec 8</proc/self/fd; exec "$0" fds"#, PROBE])
        .output()
        .unwrap();
    let fds_line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let on_fd_folders: Vec<&str> = fds_line
        .trim_start_matches("fds:")
        .split(',')
        .filter(|e| e.starts_with(|c: char| c.is_ascii_digit()) && e.ends_with("/fd"))
        .collect();
    assert_eq!(on_fd_folders.len(), 1, "{fds_line}");
    assert!(on_fd_folders[0].starts_with("8=/proc/"), "{fds_line}");
    let finding = garuda_tests::diff::inherited_descriptors(&line);
    assert!(
        finding.as_deref().is_some_and(|f| f.contains("7=/usr")),
        "{finding:?}"
    );
    assert_eq!(garuda_tests::diff::inherited_descriptors("fds:none"), None);
    let kinds = sandboxes();
    let base = case_base("fds");
    let case = plain_case(GitShape::Folder, vec![], vec![Op::InheritedFds]);
    for kind in &kinds {
        let run = run_case(Path::new(PROBE), *kind, &base, &case);
        assert_eq!(run.results, ["fds:none"], "{kind}");
        assert!(run.findings.is_empty(), "{kind}: {:?}", run.findings);
    }
    remove_tree(&base);
}

/// Staged cases do what they claim: a staged write in the project reaches the project only
/// through the apply (the change is there afterwards, with no finding), while a staged write
/// to git metadata, the home or beside the project is never applied. Control: the same write
/// in direct mode reaches the project too.
#[test]
fn a_staged_change_is_applied_and_judged_like_a_direct_one() {
    let kinds = sandboxes();
    let base = case_base("staged");
    let ops = vec![
        Op::Write("project/new".into()),
        Op::Write("project/GITDIR/config".into()),
        Op::Write("project/GITDIR/hooks/pre-commit".into()),
        Op::Write("home/notes.txt".into()),
        Op::Write("sibling/new".into()),
    ];
    for staged in [true, false] {
        let case = Case {
            staged,
            ..plain_case(GitShape::Folder, vec![], ops.clone())
        };
        for &kind in &kinds {
            let run = run_case(Path::new(PROBE), kind, &base, &case);
            assert!(
                run.findings.is_empty(),
                "{kind} staged={staged}: {:?}",
                run.findings
            );
            assert_eq!(
                run.changed,
                ["project/new"],
                "{kind} staged={staged}: {:?}",
                run.results
            );
        }
    }
    remove_tree(&base);
}
