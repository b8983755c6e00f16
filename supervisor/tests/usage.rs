//! What a new user meets at the command line (issue 11, points 2, 5 and 10): exit codes a
//! script can trust (usage errors are Garuda's own failures: 125, never clap's 2), advice that
//! is true for the situation it is given in, and `garuda demo`, the README's first command.
//!
//! Every message is asserted whole. Each hint has a negative control: following the advice (or
//! the situation without the mistake) runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{garuda, text, World};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SUITE: &str = "garuda-usage-tests";

/// `garuda ARGS` in `cwd` with the world's home and no `GARUDA_HOME` unless `env` sets one.
fn run_in(w: &World, cwd: &Path, env: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut cmd = Command::new(garuda());
    cmd.args(args)
        .current_dir(cwd)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// `garuda ARGS` in the world's project.
fn run(w: &World, args: &[&str]) -> Output {
    run_in(w, &w.project, &[], args)
}

/// `garuda sandbox --project P EXTRA… -- CMD…`.
fn sandbox(w: &World, extra: &[&str], cmd: &[&str]) -> Output {
    let p = w.project.to_str().unwrap();
    let mut args = vec!["sandbox", "--project", p];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    run(w, &args)
}

/// A world whose project is a git project (a `.git` folder), so no notice about it is printed.
fn git_world() -> World {
    let w = World::new(SUITE);
    std::fs::create_dir(w.project.join(".git")).unwrap();
    w
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Both Linux executors must run here (the staged and demo tests show each of them); a machine
/// without them fails the test unless `GARUDA_ALLOW_NOT_TESTED` names `usage-executors`.
fn require_both_executors() -> bool {
    let out = Command::new(garuda())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let available = |kind: &str| {
        report["executors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == kind && e["available"] == true)
    };
    if available("landlock") && available("bubblewrap") {
        return true;
    }
    println!("NOT TESTED: usage-executors (landlock and bubblewrap must both run here)");
    let allowed = std::env::var("GARUDA_ALLOW_NOT_TESTED")
        .is_ok_and(|v| v.split(',').any(|c| c == "usage-executors"));
    assert!(allowed, "landlock and bubblewrap must both be available");
    false
}

/// No folder at or above `dir` holds `.git` (the project-default tests depend on it).
fn assert_no_git_above(dir: &Path) {
    if let Some(d) = dir.ancestors().find(|d| d.join(".git").exists()) {
        panic!(
            "{} holds .git, so the test folder {} is inside a git project: run the tests with a HOME outside one",
            d.display(),
            dir.display()
        );
    }
}

// ---- Point 5: exit codes a script can trust ----

#[test]
fn usage_errors_exit_125_and_help_and_version_exit_0_on_stdout() {
    let w = git_world();
    let out = run(&w, &["sandbox", "--bogus", "--", "true"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use \
         '-- --bogus'\n\nUsage: garuda sandbox [OPTIONS] -- <COMMAND>...\n\nFor more \
         information, try '--help'.\n"
    );
    assert_eq!(text(&out.stdout), "");

    let out = run(&w, &["sandbox", "--executor", "nope", "--", "true"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "error: invalid value 'nope' for '--executor <EXECUTOR>'\n  [possible values: auto, \
         bubblewrap, landlock, seatbelt, host]\n\nFor more information, try '--help'.\n"
    );

    let out = run(&w, &["policy", "decide"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "error: the following required arguments were not provided:\n  <TOOL>\n  <TARGET>\n\n\
         Usage: garuda policy decide <TOOL> <TARGET>\n\nFor more information, try '--help'.\n"
    );

    // `audit verify` exits 2 for "cannot decide": its usage error must not look like that.
    let out = run(&w, &["audit", "verify", "--all", "--project", "."]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "error: the argument '--all' cannot be used with '--project <PROJECT>'\n\nUsage: garuda \
         audit verify --all\n\nFor more information, try '--help'.\n"
    );

    // No subcommand: the chat, which needs a model; with no key it says how to give one.
    let out = run(&w, &[]);
    assert_exit(&out, 1);
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr)
            .starts_with("garuda: no key for provider anthropic: set ANTHROPIC_API_KEY"),
        "{}",
        text(&out.stderr)
    );
    // The agent's options mean nothing to a subcommand: refused, not ignored.
    let out = run(&w, &["--staged", "policy"]);
    assert_exit(&out, 125);
    assert!(
        text(&out.stderr).starts_with("garuda: -m, --resume, --project, --staged, "),
        "{}",
        text(&out.stderr)
    );

    // Asked for: exit 0, on stdout.
    for args in [&["--help"][..], &["help"], &["-h"]] {
        let out = run(&w, args);
        assert_exit(&out, 0);
        assert_eq!(text(&out.stderr), "", "{args:?}");
        assert!(
            text(&out.stdout).starts_with(
                "A coding agent whose every side effect passes through a sandbox supervisor\n\n\
                 Usage: garuda [OPTIONS] [COMMAND]\n"
            ),
            "{args:?}: {}",
            text(&out.stdout)
        );
    }
    let out = run(&w, &["sandbox", "--help"]);
    assert_exit(&out, 0);
    assert_eq!(text(&out.stderr), "");
    assert!(
        text(&out.stdout).contains("--timeout <SECS>"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&w, &["--version"]);
    assert_exit(&out, 0);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(
        text(&out.stdout),
        format!("garuda {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The negative control of the 125s above: the command's own exit codes pass through, 2 (clap's
/// old usage code) included, on both executors.
#[test]
fn the_commands_own_exit_2_still_passes_through_as_2() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(&w, &["--executor", executor], &["sh", "-c", "exit 2"]);
        assert_exit(&out, 2);
        assert_eq!(text(&out.stderr), "", "{executor}");
        let out = sandbox(&w, &["--executor", executor], &["sh", "-c", "exit 3"]);
        assert_exit(&out, 3);
    }
}

#[test]
fn a_command_without_dashes_gets_a_tip_that_works() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    let out = run(&w, &["sandbox", "true"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "error: unexpected argument 'true' found\n\n  tip: put '--' before the command to run: \
         garuda sandbox -- true\n\nUsage: garuda sandbox [OPTIONS] -- <COMMAND>...\n\nFor more \
         information, try '--help'.\n"
    );

    // Options before the command stay where they were; an argument a shell would split or
    // interpret is quoted.
    let p = w.project.to_str().unwrap();
    for executor in ["landlock", "bubblewrap"] {
        let script = "echo \"it's here\"";
        let out = run(
            &w,
            &[
                "sandbox",
                "-v",
                "--project",
                p,
                "--executor",
                executor,
                "sh",
                "-c",
                script,
            ],
        );
        assert_exit(&out, 125);
        let err = text(&out.stderr);
        let tip = format!(
            "garuda sandbox -v --project {p} --executor {executor} -- sh -c 'echo \"it'\\''s \
             here\"'"
        );
        assert_eq!(
            err,
            format!(
                "error: unexpected argument 'sh' found\n\n  tip: put '--' before the command to \
                 run: {tip}\n\nUsage: garuda sandbox [OPTIONS] -- <COMMAND>...\n\nFor more \
                 information, try '--help'.\n"
            )
        );
        // Negative control: the tip, typed into a shell as it stands, runs the command.
        let typed = tip.replacen("garuda", garuda().to_str().unwrap(), 1);
        let out = Command::new("sh")
            .args(["-c", &typed])
            .current_dir(&w.project)
            .env("HOME", &w.home)
            .env_remove("GARUDA_HOME")
            .output()
            .unwrap();
        assert_exit(&out, 0);
        assert_eq!(text(&out.stdout), "it's here\n", "{executor}");
    }

    // An unknown option is not a command: clap's own tip only.
    let out = run(&w, &["sandbox", "--bogus", "true"]);
    assert_exit(&out, 125);
    assert!(
        !text(&out.stderr).contains("put '--' before"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn apply_or_discard_without_staged_and_both_together_exit_125() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    for (flag, other) in [("--apply", "--discard"), ("--discard", "--apply")] {
        let out = sandbox(&w, &[flag], &["sh", "-c", "touch ran"]);
        assert_exit(&out, 125);
        assert_eq!(
            text(&out.stderr),
            format!(
                "garuda: {flag} needs a staged command: add --staged (without it the command \
                 changes the project directly, and there is no change to apply or discard)\n"
            )
        );
        assert!(!w.project.join("ran").exists(), "{flag}: the command ran");

        let out = sandbox(&w, &["--staged", flag, other], &["sh", "-c", "touch ran"]);
        assert_exit(&out, 125);
        assert_eq!(
            text(&out.stderr),
            format!(
                "error: the argument '{flag}' cannot be used with '{other}'\n\n  tip: --apply \
                 applies the staged change and --discard throws it away: give one of them\n\n\
                 Usage: garuda sandbox --project <PROJECT> --staged {flag} -- <COMMAND>...\n\n\
                 For more information, try '--help'.\n"
            )
        );
        assert!(
            !w.project.join("ran").exists(),
            "{flag} {other}: the command ran"
        );
    }
    // Negative control: with --staged, --apply applies, on both executors.
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(
            &w,
            &["--executor", executor, "--staged", "--apply"],
            &["sh", "-c", "echo x > applied"],
        );
        assert_exit(&out, 0);
        assert_eq!(
            std::fs::read_to_string(w.project.join("applied")).unwrap(),
            "x\n"
        );
        std::fs::remove_file(w.project.join("applied")).unwrap();
    }
}

#[test]
fn a_zero_or_huge_timeout_is_refused_before_anything_runs() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    let cases = [
        (
            "0",
            "0 would kill the command at once: give 1 or more seconds, or leave --timeout out for \
             no limit",
        ),
        (
            "31536001",
            "at most 31536000 seconds (a year); leave --timeout out for no limit",
        ),
        // Used to overflow the deadline's clock: a panic (exit 101) after the command started.
        (
            "18446744073709551615",
            "at most 31536000 seconds (a year); leave --timeout out for no limit",
        ),
        ("1.5", "give a whole number of seconds"),
    ];
    for (value, why) in cases {
        let out = sandbox(&w, &["--timeout", value], &["sh", "-c", "touch ran"]);
        assert_exit(&out, 125);
        assert_eq!(
            text(&out.stderr),
            format!(
                "error: invalid value '{value}' for '--timeout <SECS>': {why}\n\nFor more \
                 information, try '--help'.\n"
            )
        );
        assert!(!w.project.join("ran").exists(), "--timeout {value}: it ran");
    }
    // Negative control: a timeout of 1 second or more lets the command run, on both executors.
    for executor in ["landlock", "bubblewrap"] {
        let out = sandbox(
            &w,
            &["--executor", executor, "--timeout", "600"],
            &["sh", "-c", "touch ran"],
        );
        assert_exit(&out, 0);
        assert!(w.project.join("ran").exists(), "{executor}");
        std::fs::remove_file(w.project.join("ran")).unwrap();
    }
}

// ---- Point 2: advice that is true ----

/// "install bubblewrap" was the advice to someone who has it; host has no sandbox to stage
/// in, and the way out here is to drop `--executor host`.
#[test]
fn staged_with_the_host_executor_says_to_drop_it() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    let out = sandbox(
        &w,
        &["--staged", "--executor", "host"],
        &["sh", "-c", "touch ran"],
    );
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "garuda: staged mode is selected but the host executor has no sandbox to stage in: drop \
         --executor host (auto picks landlock here), or pass --executor landlock or --executor \
         bubblewrap (no fallback to direct mode)\n"
    );
    assert!(!text(&out.stderr).contains("install"));
    assert!(!w.project.join("ran").exists());
    // Negative control: the advice works — without --executor host, and with each executor
    // named, the staged command runs (and its change is applied).
    for extra in [
        &["--staged", "--apply"][..],
        &["--staged", "--apply", "--executor", "landlock"],
        &["--staged", "--apply", "--executor", "bubblewrap"],
    ] {
        let out = sandbox(&w, extra, &["sh", "-c", "touch ran"]);
        assert_exit(&out, 0);
        assert!(w.project.join("ran").exists(), "{extra:?}");
        std::fs::remove_file(w.project.join("ran")).unwrap();
    }
}

/// The user policy is where `GARUDA_HOME` puts it, and the hint says so.
#[test]
fn a_user_policy_that_picks_host_is_named_at_its_real_path() {
    if !require_both_executors() {
        return;
    }
    let w = git_world();
    let moved = w.base.path().join("moved-garuda-home");
    std::fs::create_dir(&moved).unwrap();
    std::fs::write(moved.join("policy.json"), "{\"executor\": \"host\"}\n").unwrap();
    let p = w.project.to_str().unwrap();
    let env = [("GARUDA_HOME", moved.as_path())];
    let out = run_in(
        &w,
        &w.project,
        &env,
        &["sandbox", "--project", p, "--staged", "--", "touch", "ran"],
    );
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        format!(
            "garuda: staged mode is selected but the host executor has no sandbox to stage in: \
             user {}/policy.json:1 chooses the host executor: pass --executor landlock or \
             --executor bubblewrap, or change \"executor\" there to \"auto\" (no fallback to \
             direct mode)\n",
            moved.display()
        )
    );
    assert!(!w.project.join("ran").exists());
    // Negative control: both ways out run the staged command.
    for executor in ["landlock", "bubblewrap"] {
        let out = run_in(
            &w,
            &w.project,
            &env,
            &[
                "sandbox",
                "--project",
                p,
                "--staged",
                "--apply",
                "--executor",
                executor,
                "--",
                "touch",
                "ran",
            ],
        );
        assert_exit(&out, 0);
        assert!(w.project.join("ran").exists(), "{executor}");
        std::fs::remove_file(w.project.join("ran")).unwrap();
    }
    std::fs::write(moved.join("policy.json"), "{\"executor\": \"auto\"}\n").unwrap();
    let out = run_in(
        &w,
        &w.project,
        &env,
        &[
            "sandbox",
            "--project",
            p,
            "--staged",
            "--apply",
            "--",
            "touch",
            "ran",
        ],
    );
    assert_exit(&out, 0);
    assert!(w.project.join("ran").exists());
}

/// A project file that widens the policy is told to use the user policy — at its real path.
#[test]
fn the_widening_hint_names_the_user_policy_where_garuda_home_puts_it() {
    let w = git_world();
    std::fs::create_dir(w.project.join(".garuda")).unwrap();
    let settings = w.project.join(".garuda/settings.json");
    std::fs::write(&settings, "{\"sandbox\": {\"writable\": [\"/opt\"]}}\n").unwrap();
    let moved = w.base.path().join("moved-garuda-home");
    std::fs::create_dir(&moved).unwrap();
    let expected = |user_policy: &Path| {
        format!(
            "garuda: {}:1:26: \"sandbox.writable\": a project file cannot set this: a cloned \
             repository must not widen the policy (put it in the user policy {} instead)\n",
            settings.display(),
            user_policy.display()
        )
    };
    let env = [("GARUDA_HOME", moved.as_path())];
    for args in [
        &["sandbox", "--", "true"][..],
        &["policy"],
        &["policy", "check", settings.to_str().unwrap()],
    ] {
        let out = run_in(&w, &w.project, &env, args);
        assert_eq!(
            text(&out.stderr),
            expected(&moved.join("policy.json")),
            "{args:?}"
        );
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        // Negative control: without GARUDA_HOME the hint names the default place.
        let out = run_in(&w, &w.project, &[], args);
        assert_eq!(
            text(&out.stderr),
            expected(&w.home.join(".garuda/policy.json")),
            "{args:?}"
        );
    }
}

/// Run from the home (or from a folder whose git root is the home), Garuda refuses the home as
/// the project and says why it was chosen and to name the project.
#[test]
fn from_the_home_the_refusal_says_why_and_suggests_project() {
    let w = World::new(SUITE);
    assert_no_git_above(&w.home);
    let home = w.home.canonicalize().unwrap();
    let broad = |h: &Path| {
        format!(
            "garuda: project root {} contains the home directory {}: commands could rewrite \
             dotfiles the host runs; ",
            h.display(),
            home.display()
        )
    };

    // From the home, no git anywhere: the project defaulted to the current folder.
    let out = run_in(&w, &w.home, &[], &["sandbox", "--", "touch", "ran"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        format!(
            "{}with no .git in it or above it, the project is the current folder ({}): cd into \
             your project, or name it with --project DIR\n",
            broad(&home),
            home.display()
        )
    );

    // --project naming the home.
    let out = run_in(
        &w,
        &w.home,
        &[],
        &[
            "sandbox",
            "--project",
            home.to_str().unwrap(),
            "--",
            "touch",
            "ran",
        ],
    );
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        format!(
            "{}name the project's own folder with --project DIR, one that does not contain your \
             home\n",
            broad(&home)
        )
    );

    // A home that is a git repository (dotfiles): from a folder below it.
    std::fs::create_dir(w.home.join(".git")).unwrap();
    let work = w.home.join("work");
    std::fs::create_dir(&work).unwrap();
    let out = run_in(&w, &work, &[], &["sandbox", "--", "touch", "ran"]);
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        format!(
            "{}{} is the project because it holds .git (the git root above the current folder): \
             name the project's own folder with --project DIR\n",
            broad(&home),
            home.display()
        )
    );
    assert!(!work.join("ran").exists() && !w.home.join("ran").exists());

    // Negative control: the advice works.
    let out = run_in(
        &w,
        &work,
        &[],
        &[
            "sandbox",
            "--project",
            work.to_str().unwrap(),
            "--",
            "touch",
            "ran",
        ],
    );
    assert_exit(&out, 0);
    assert!(work.join("ran").exists());
}

/// Outside a git project the command still runs, with the project named and how to pick
/// another.
#[test]
fn outside_a_git_project_a_notice_names_the_project_and_suggests_project() {
    if !require_both_executors() {
        return;
    }
    let w = World::new(SUITE);
    assert_no_git_above(&w.project);
    for executor in ["landlock", "bubblewrap"] {
        let out = run(
            &w,
            &["sandbox", "--executor", executor, "--", "touch", "ran"],
        );
        assert_exit(&out, 0);
        assert_eq!(
            text(&out.stderr),
            format!(
                "garuda: no .git in {} or above it, so it is the project (the folder the command \
                 can write); cd into your project, or name it with --project DIR\n",
                w.project.display()
            ),
            "{executor}"
        );
        assert!(w.project.join("ran").exists());
        std::fs::remove_file(w.project.join("ran")).unwrap();
        // Negative controls: a project named with --project, or a git project, gets no notice.
        let p = w.project.to_str().unwrap();
        let out = run(
            &w,
            &[
                "sandbox",
                "--executor",
                executor,
                "--project",
                p,
                "--",
                "true",
            ],
        );
        assert_exit(&out, 0);
        assert_eq!(text(&out.stderr), "", "{executor}");
    }
    std::fs::create_dir(w.project.join(".git")).unwrap();
    let out = run(&w, &["sandbox", "--", "true"]);
    assert_exit(&out, 0);
    assert_eq!(text(&out.stderr), "");
}

/// `garuda ARGS` in a bubblewrap jail of the test's own where the probes fail as `how` says:
/// `NamespacesOff` (no user namespaces: both Linux executors unavailable, bwrap installed),
/// `BwrapGoneNamespacesOff` (the same with the bwrap binary hidden) or `BwrapGone` (only the bwrap binary
/// hidden: landlock's probe passes). The jail `policy_cli.rs` uses, without its `/etc`.
#[derive(Clone, Copy, PartialEq)]
enum Jail {
    NamespacesOff,
    BwrapGoneNamespacesOff,
    BwrapGone,
}

fn jailed(w: &World, how: Jail, args: &[&str]) -> Output {
    let mut cmd = Command::new("bwrap");
    cmd.args(["--unshare-user", "--unshare-pid"]);
    if how != Jail::BwrapGone {
        cmd.arg("--disable-userns");
    }
    cmd.args(["--bind", "/", "/"]);
    if how != Jail::NamespacesOff {
        for bwrap in ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"] {
            if Path::new(bwrap).exists() {
                cmd.args(["--ro-bind", "/dev/null", bwrap]);
            }
        }
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev", "--"]);
    cmd.arg(garuda()).args(args);
    cmd.current_dir(&w.project)
        .env("HOME", &w.home)
        .env_remove("GARUDA_HOME")
        .output()
        .unwrap()
}

/// Where no OS sandbox can run, the fix names what is missing here: "install bubblewrap" only
/// where it is not installed.
#[test]
fn with_no_sandbox_the_fix_fits_what_is_missing() {
    let w = git_world();
    let p = w.project.to_str().unwrap();
    let namespaces = "allow unprivileged user namespaces (sysctl \
                      kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)";
    let tail = "or the native Landlock executor (Linux 6.14 or later) can run; `garuda doctor` \
                shows what is missing";
    for (jail, fix) in [
        (
            Jail::NamespacesOff,
            format!(
                "Fix: {namespaces} so that bubblewrap (installed, but it cannot run here: see \
                 why above) {tail}"
            ),
        ),
        (
            Jail::BwrapGoneNamespacesOff,
            format!(
                "Fix: install bubblewrap 0.8 or later (apt-get install bubblewrap), or \
                 {namespaces} so that bubblewrap {tail}"
            ),
        ),
    ] {
        let out = jailed(
            &w,
            jail,
            &["sandbox", "--project", p, "--staged", "--", "true"],
        );
        assert_exit(&out, 125);
        let err = text(&out.stderr);
        assert!(
            err.starts_with(
                "garuda: staged mode is selected but the host executor has no sandbox to stage \
                 in, and no OS sandbox can run here (no fallback to direct mode). Found: \
                 landlock: "
            ),
            "{err}"
        );
        assert!(err.ends_with(&format!("{fix}\n")), "{err}");
        assert!(!err.contains("drop --executor host"), "{err}");

        let out = jailed(
            &w,
            jail,
            &[
                "sandbox",
                "--project",
                p,
                "--executor",
                "landlock",
                "--",
                "true",
            ],
        );
        assert_exit(&out, 125);
        let err = text(&out.stderr);
        assert!(
            err.starts_with("garuda: executor landlock is not available: "),
            "{err}"
        );
        assert!(err.ends_with(&format!("{fix}\n")), "{err}");
    }
    // Negative control: where landlock runs, the fix for an unavailable bubblewrap is to use it.
    let out = jailed(
        &w,
        Jail::BwrapGone,
        &[
            "sandbox",
            "--project",
            p,
            "--executor",
            "bubblewrap",
            "--",
            "true",
        ],
    );
    assert_exit(&out, 125);
    assert_eq!(
        text(&out.stderr),
        "garuda: executor bubblewrap is not available: bwrap not found (install the bubblewrap \
         package). Fix: landlock can run here: pass --executor landlock, or leave --executor out \
         (auto picks landlock here)\n"
    );
    // (Running landlock inside this jail is not shown: its probe passes, but mounting /proc in
    // a PID namespace nested in bwrap's is refused. Outside a jail, the tests above run it.)
}

// ---- Point 10: the README's first command ----

/// The demo's report, its folder (gone by now) and exit code.
struct Demo {
    code: Option<i32>,
    lines: Vec<String>,
    dir: PathBuf,
    stderr: String,
}

fn demo_output(out: Output) -> Demo {
    let stdout = text(&out.stdout);
    let lines: Vec<String> = stdout.lines().map(str::to_string).collect();
    let first = lines.first().cloned().unwrap_or_default();
    let dir = first
        .strip_prefix("garuda demo: a throwaway project and a home with a demo secret in ")
        .and_then(|r| r.strip_suffix("; none of your files is used"))
        .unwrap_or_else(|| panic!("first line: {stdout}\n{}", text(&out.stderr)));
    Demo {
        code: out.status.code(),
        dir: PathBuf::from(dir),
        lines,
        stderr: text(&out.stderr),
    }
}

/// `garuda demo ARGS` with a home and a `GARUDA_HOME` of the test's: the demo must touch
/// neither.
fn demo(w: &World, program: &Path, args: &[&str]) -> Demo {
    let user_garuda = w.base.path().join("user-garuda-home");
    let out = Command::new(program)
        .arg("demo")
        .args(args)
        .current_dir(&w.project)
        .env("HOME", &w.home)
        .env("GARUDA_HOME", &user_garuda)
        .output()
        .unwrap();
    let d = demo_output(out);
    assert!(!d.dir.exists(), "the demo left {}", d.dir.display());
    assert!(d.dir.starts_with("/var/tmp"), "{}", d.dir.display());
    assert_eq!(
        std::fs::read_dir(&w.home).unwrap().count(),
        0,
        "the demo wrote in the user's home"
    );
    assert_eq!(
        std::fs::read_dir(&w.project).unwrap().count(),
        0,
        "the demo wrote in the current folder"
    );
    assert!(
        !user_garuda.exists(),
        "the demo used the user's GARUDA_HOME"
    );
    d
}

const HELD: [&str; 5] = [
    "wrote inside the project: yes",
    "read the demo secret (~/.ssh/id_ed25519): no (EACCES)",
    "wrote outside the project (~/written-outside-the-project.txt): no (EROFS)",
    "network: off (a port open on this machine's loopback is out of reach: ECONNREFUSED)",
    "the sandbox held: every expectation was met",
];

#[test]
fn the_demo_shows_each_linux_executor_holding() {
    if !require_both_executors() {
        return;
    }
    let w = World::new(SUITE);
    for (args, executor_line) in [
        (
            &["--executor", "landlock"][..],
            "executor: landlock (selected by the executor setting): ",
        ),
        (
            &["--executor", "bubblewrap"],
            "executor: bubblewrap (selected by the executor setting): ",
        ),
        // The README's command: auto picks the strongest, landlock, here.
        (&[], "executor: landlock (auto: the strongest available): "),
    ] {
        let d = demo(&w, &garuda(), args);
        assert_eq!(d.code, Some(0), "{args:?}: {:?}\n{}", d.lines, d.stderr);
        assert_eq!(d.stderr, "", "{args:?}");
        assert_eq!(d.lines.len(), 7, "{:?}", d.lines);
        assert!(d.lines[1].starts_with(executor_line), "{:?}", d.lines);
        assert_eq!(d.lines[2..], HELD, "{args:?}");
    }
}

/// The negative control: the host executor is no sandbox, and the demo says so and fails.
#[test]
fn the_demo_with_the_host_executor_reports_the_secret_read_and_fails() {
    let w = World::new(SUITE);
    let d = demo(&w, &garuda(), &["--executor", "host"]);
    assert_eq!(d.code, Some(1), "{:?}\n{}", d.lines, d.stderr);
    assert!(
        d.lines[1].starts_with("executor: host (selected by the executor setting): "),
        "{:?}",
        d.lines
    );
    assert_eq!(
        d.lines[2..],
        [
            "wrote inside the project: yes",
            "read the demo secret (~/.ssh/id_ed25519): yes -- NOT as expected",
            "wrote outside the project (~/written-outside-the-project.txt): yes -- NOT as expected",
            "network: on (reached a port open on this machine's loopback) -- NOT as expected",
            "the sandbox did NOT hold: 3 of 4 expectations failed",
            "(the host executor runs commands with your full rights: it has no sandbox)",
        ]
    );
}

/// On a machine where no sandbox runs, `auto` falls back to host: the demo shows that, fails,
/// and points to `garuda doctor`.
#[test]
fn the_demo_on_a_machine_without_a_sandbox_fails_and_says_why() {
    let w = World::new(SUITE);
    let out = jailed(&w, Jail::NamespacesOff, &["demo"]);
    let d = demo_output(out);
    assert!(!d.dir.exists());
    assert_eq!(d.code, Some(1), "{:?}\n{}", d.lines, d.stderr);
    assert!(
        d.lines[1].starts_with("executor: host (auto: the strongest available): "),
        "{:?}",
        d.lines
    );
    assert_eq!(
        d.lines[7],
        "(the host executor runs commands with your full rights: it has no sandbox and it ran \
         because no OS sandbox can run here; `garuda doctor` shows why)"
    );
}

/// A fresh clone under `/tmp` builds `garuda` where every sandbox hides it (a private `/tmp`):
/// the demo still runs, from its own copy of the program.
#[test]
fn the_demo_runs_from_a_garuda_that_lives_under_tmp() {
    if !require_both_executors() {
        return;
    }
    let w = World::new(SUITE);
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let program = tmp.path().join("garuda");
    std::fs::copy(garuda(), &program).unwrap();
    for executor in ["landlock", "bubblewrap"] {
        let d = demo(&w, &program, &["--executor", executor]);
        assert_eq!(d.code, Some(0), "{executor}: {:?}\n{}", d.lines, d.stderr);
        assert_eq!(d.lines[2..], HELD, "{executor}");
    }
    // Negative control: that program is out of the sandbox's sight where it is.
    let p = w.project.to_str().unwrap();
    std::fs::create_dir(w.project.join(".git")).unwrap();
    for executor in ["landlock", "bubblewrap"] {
        let out = run(
            &w,
            &[
                "sandbox",
                "--project",
                p,
                "--executor",
                executor,
                "--",
                "sh",
                "-c",
                &format!("test -e {} || echo hidden", program.display()),
            ],
        );
        assert_exit(&out, 0);
        assert_eq!(text(&out.stdout), "hidden\n", "{executor}");
    }
}
