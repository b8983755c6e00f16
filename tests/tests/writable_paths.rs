//! `sandbox.writable` paths that do not exist, through the real `garuda` binary (issue 11,
//! point 6): a policy that passes `garuda policy check` runs, and says the same thing in both.
//!
//! - Outside the strict profile a missing path is skipped: `garuda policy`, `garuda policy
//!   check` and every run print the same one-line notice naming the path, the key and the
//!   policy file's line, and the command runs without the path (it is not bound, so the
//!   command cannot create it). Control: the path made, no notice, and the command writes in it.
//! - Under the strict profile the same entry is one error, word for word the same from
//!   `garuda policy`, `garuda policy check` (exit 1) and `garuda sandbox` (exit 125, nothing
//!   runs). Control: the path made, all three succeed.
//! - A dangling link and `/tmp` itself stay errors outside strict too.
//! - The race: a skipped path that appears as a link before the mounts is not bound (the write
//!   through it fails with `EROFS`); an existing entry swapped for a link after the policy was
//!   built is refused at bind time (`ELOOP`) by both executors. Control for both: `host`
//!   follows the link and the write lands in the home.
//!
//! Every base folder lives under the real user's `~/.cache`, never under `/tmp`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // shared with the contract suite, which uses the rest
mod util;

use std::ffi::OsString;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use garuda_policy::{build_exec_policy_noting, load_settings_from, HostEnv, PolicyNotice};
use garuda_supervisor::executor::select::{executor_of, probe_executors};
use garuda_supervisor::executor::{CommandSpec, ExecutorKind, StdioMode};
use util::{garuda_bin, PROBE, SANDBOX_PATH};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

/// Both sandboxes must be available: a missing one says `NOT TESTED` and fails, unless
/// `GARUDA_ALLOW_NOT_TESTED` names it.
fn require_sandboxes() {
    for probe in probe_executors() {
        if probe.kind.is_sandbox() && !probe.available && SANDBOXES.contains(&probe.kind.name()) {
            util::not_tested(
                probe.kind.name(),
                &format!(
                    "writable_paths on {}: the executor is not available here ({})",
                    probe.kind, probe.detail
                ),
            );
        }
    }
}

/// Exit code of `garuda policy` and `garuda policy check` when the policy is refused.
const POLICY_REFUSED: i32 = 1;
/// Exit code of `garuda sandbox` when Garuda itself refuses to run.
const SETUP_FAILED: i32 = 125;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fake home (with `tools/`, not a package cache) and a project, under
/// `~/.cache/garuda-writable-paths/`.
struct World {
    _base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn world() -> World {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let parent = real_home.join(".cache/garuda-writable-paths");
    std::fs::create_dir_all(&parent).unwrap();
    let base = tempfile::tempdir_in(&parent).unwrap();
    let root = base.path().canonicalize().unwrap();
    assert!(!root.starts_with("/tmp"), "{}", root.display());
    let home = root.join("home");
    let project = root.join("project");
    std::fs::create_dir_all(home.join("tools")).unwrap();
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    World {
        _base: base,
        home,
        project,
    }
}

impl World {
    fn policy_file(&self) -> PathBuf {
        self.home.join(".garuda/policy.json")
    }
    fn user_policy(&self, text: &str) {
        std::fs::create_dir_all(self.home.join(".garuda")).unwrap();
        std::fs::write(self.policy_file(), text).unwrap();
    }
    fn tool(&self) -> PathBuf {
        self.home.join("tools/mytool")
    }
    /// `garuda ARGS…` in the project with a clean environment: the fake home and `PATH`.
    fn garuda(&self, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
        Command::new(garuda_bin().unwrap())
            .args(args)
            .current_dir(&self.project)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", SANDBOX_PATH)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
    /// `garuda sandbox --executor E --capture [extra…] -- probe ARGS…`.
    fn sandbox(
        &self,
        executor: &str,
        extra: &[&str],
        probe: &[&dyn AsRef<std::ffi::OsStr>],
    ) -> Output {
        let mut args: Vec<OsString> = ["sandbox", "--executor", executor, "--capture"]
            .iter()
            .chain(extra)
            .map(OsString::from)
            .collect();
        // Named, so that the project (no git in it) gets no "no .git" notice on stderr.
        args.push("--project".into());
        args.push(self.project.clone().into());
        args.push("--".into());
        args.push(PROBE.into());
        args.extend(probe.iter().map(|a| a.as_ref().to_os_string()));
        let args: Vec<&dyn AsRef<std::ffi::OsStr>> = args
            .iter()
            .map(|a| a as &dyn AsRef<std::ffi::OsStr>)
            .collect();
        self.garuda(&args)
    }
}

/// Exit code, stdout and stderr of `out`, for one `assert_eq!` that shows all three.
fn result(out: &Output) -> (Option<i32>, String, String) {
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_missing_writable_path_is_skipped_with_one_notice_from_policy_check_and_run() {
    require_sandboxes();
    let w = world();
    w.user_policy("{\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n");
    let notice = format!(
        "notice: writable path {} (sandbox.writable, user {}:2) does not exist, so it is skipped \
         and nothing is made writable for it: create it to make it writable, or remove the entry",
        w.tool().display(),
        w.policy_file().display()
    );
    let line = format!("garuda: {notice}\n");

    let out = w.garuda(&[&"policy"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), line);
    assert!(
        text(&out.stdout).contains(&format!("sandbox.writable  {}", w.tool().display())),
        "{}",
        text(&out.stdout)
    );

    let out = w.garuda(&[&"policy", &"--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), line);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["notices"], serde_json::json!([notice]));

    let out = w.garuda(&[&"policy", &"check", &w.policy_file()]);
    assert_eq!(
        result(&out),
        (
            Some(0),
            format!(
                "{}: valid as the user policy\nno change to the effective policy\n",
                w.policy_file().display()
            ),
            line.clone()
        )
    );

    // The run says the same and runs; the path is not bound, so the command cannot make it.
    for executor in SANDBOXES {
        let out = w.sandbox(executor, &[], &[&"mkdir", &w.tool()]);
        assert_eq!(
            result(&out),
            (Some(0), "errno=EROFS\n".into(), line.clone()),
            "{executor}"
        );
        assert!(!w.tool().exists(), "{executor}");
    }

    // Control: the folder exists; nothing is said and the command writes in it.
    std::fs::create_dir(w.tool()).unwrap();
    let out = w.garuda(&[&"policy"]);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), "".into()));
    let out = w.garuda(&[&"policy", &"check", &w.policy_file()]);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), "".into()));
    for executor in SANDBOXES {
        let file = w.tool().join(executor);
        let out = w.sandbox(executor, &[], &[&"put", &file, &"made"]);
        assert_eq!(
            result(&out),
            (Some(0), "ok\n".into(), "".into()),
            "{executor}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "made",
            "{executor}"
        );
    }
}

#[test]
fn under_strict_a_missing_writable_path_is_one_error_from_policy_check_and_run() {
    require_sandboxes();
    let w = world();
    w.user_policy(
        "{\n  \"profile\": \"strict\",\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n",
    );
    let error = format!(
        "garuda: writable path {tool} (sandbox.writable, user {file}:3) does not exist, and the \
         strict profile (user {file}:2) does not skip a missing writable path: create it, or \
         remove the entry\n",
        tool = w.tool().display(),
        file = w.policy_file().display()
    );
    let out = w.garuda(&[&"policy"]);
    assert_eq!(
        result(&out),
        (Some(POLICY_REFUSED), "".into(), error.clone())
    );
    let out = w.garuda(&[&"policy", &"--json"]);
    assert_eq!(
        result(&out),
        (Some(POLICY_REFUSED), "".into(), error.clone())
    );
    let out = w.garuda(&[&"policy", &"check", &w.policy_file()]);
    assert_eq!(
        result(&out),
        (Some(POLICY_REFUSED), "".into(), error.clone())
    );
    let marker = w.project.join("ran");
    for executor in SANDBOXES {
        let out = w.sandbox(executor, &[], &[&"put", &marker, &"x"]);
        assert_eq!(
            result(&out),
            (Some(SETUP_FAILED), "".into(), error.clone()),
            "{executor}"
        );
        assert!(!marker.exists(), "{executor}: the command ran");
    }

    // `--strict` on the command line: the same error, naming the flag.
    w.user_policy("{\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n");
    let flagged = format!(
        "garuda: writable path {} (sandbox.writable, user {}:2) does not exist, and the strict \
         profile (command-line flag --strict) does not skip a missing writable path: create it, \
         or remove the entry\n",
        w.tool().display(),
        w.policy_file().display()
    );
    for executor in SANDBOXES {
        let out = w.sandbox(executor, &["--strict"], &[&"put", &marker, &"x"]);
        assert_eq!(
            result(&out),
            (Some(SETUP_FAILED), "".into(), flagged.clone()),
            "{executor}"
        );
        assert!(!marker.exists(), "{executor}: the command ran");
    }

    // Control: with the folder made, strict checks and runs, silently.
    w.user_policy(
        "{\n  \"profile\": \"strict\",\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n",
    );
    std::fs::create_dir(w.tool()).unwrap();
    let out = w.garuda(&[&"policy"]);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), "".into()));
    let out = w.garuda(&[&"policy", &"check", &w.policy_file()]);
    assert_eq!((out.status.code(), text(&out.stderr)), (Some(0), "".into()));
    for executor in SANDBOXES {
        let file = w.tool().join(executor);
        let out = w.sandbox(executor, &[], &[&"put", &file, &"made"]);
        assert_eq!(
            result(&out),
            (Some(0), "ok\n".into(), "".into()),
            "{executor}"
        );
        assert!(file.exists(), "{executor}");
    }
}

#[test]
fn a_dangling_link_or_tmp_as_a_writable_path_stays_an_error_outside_strict() {
    require_sandboxes();
    let w = world();
    let later = w.home.join("later");
    symlink(&later, w.tool()).unwrap();
    let marker = w.project.join("ran");
    let cases = [
        (
            "~/tools/mytool",
            format!(
                "garuda: writable path {} (sandbox.writable, user {}:2) is refused: it is a \
                 symbolic link to {}, which does not exist, so whatever is made there later would \
                 become writable; fix the link or remove the entry\n",
                w.tool().display(),
                w.policy_file().display(),
                later.display()
            ),
        ),
        (
            "/tmp",
            format!(
                "garuda: writable path /tmp (sandbox.writable, user {}:2) is refused: every \
                 sandbox gives commands a private, empty /tmp, and sharing the host's whole /tmp \
                 would hand them every other program's temporary files and sockets (the X \
                 server's among them); a folder under /tmp is shared at its own path; name a \
                 folder of its own instead (/tmp/shared)\n",
                w.policy_file().display()
            ),
        ),
    ];
    for (entry, error) in cases {
        w.user_policy(&format!(
            "{{\n  \"sandbox\": {{\"writable\": [\"{entry}\"]}}\n}}\n"
        ));
        let out = w.garuda(&[&"policy"]);
        assert_eq!(
            result(&out),
            (Some(POLICY_REFUSED), "".into(), error.clone())
        );
        let out = w.garuda(&[&"policy", &"check", &w.policy_file()]);
        assert_eq!(
            result(&out),
            (Some(POLICY_REFUSED), "".into(), error.clone())
        );
        for executor in SANDBOXES {
            let out = w.sandbox(executor, &[], &[&"put", &marker, &"x"]);
            assert_eq!(
                result(&out),
                (Some(SETUP_FAILED), "".into(), error.clone()),
                "{executor} {entry}"
            );
            assert!(!marker.exists(), "{executor} {entry}: the command ran");
        }
    }
    // Control: the link's target made, the entry is its target and the command writes there.
    std::fs::create_dir(&later).unwrap();
    w.user_policy("{\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n");
    for executor in SANDBOXES {
        let out = w.sandbox(executor, &[], &[&"put", &w.tool().join(executor), &"x"]);
        assert_eq!(
            result(&out),
            (Some(0), "ok\n".into(), "".into()),
            "{executor}"
        );
        assert!(later.join(executor).exists(), "{executor}");
    }
}

/// The policy of `w` (its user file, no managed or project file) and its notices.
fn built(w: &World) -> (garuda_policy::ExecPolicy, Vec<PolicyNotice>) {
    let vars: Vec<(OsString, OsString)> = vec![
        ("HOME".into(), w.home.clone().into()),
        ("PATH".into(), SANDBOX_PATH.into()),
    ];
    let host = HostEnv::from_vars(vars).unwrap();
    let settings = load_settings_from(
        &w.home.join("no-managed-policy.json"),
        &w.policy_file(),
        &w.project.join(".garuda/settings.json"),
        &host,
        &w.project,
    )
    .unwrap();
    build_exec_policy_noting(&w.project, &settings, &host).unwrap()
}

fn kinds() -> [ExecutorKind; 3] {
    require_sandboxes();
    [
        ExecutorKind::Landlock,
        ExecutorKind::Bubblewrap,
        ExecutorKind::Host,
    ]
}

/// A command running at the same time plants a link at a skipped `sandbox.writable` path
/// (to the home's `.config`, where the host later runs what it finds) after the policy was
/// built and before the mounts. The path is no writable root, so nothing is bound there: the
/// write through the link meets the read-only home (`EROFS`). Control: `host` follows the link
/// and the write lands in the home.
#[test]
fn a_skipped_path_that_appears_as_a_link_before_the_mounts_is_not_bound() {
    for kind in kinds() {
        let w = world();
        w.user_policy("{\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n");
        let (policy, notices) = built(&w);
        assert!(
            matches!(&notices[..], [PolicyNotice::WritableSkipped { path, .. }] if *path == w.tool())
        );
        assert!(!policy.is_under_writable_root(&w.tool()));
        symlink(w.home.join(".config"), w.tool()).unwrap();
        let planted = w.home.join(".config/planted");
        let out = executor_of(kind)
            .run(
                &CommandSpec::new([
                    OsString::from(PROBE),
                    "put".into(),
                    w.tool().join("planted").into(),
                    "x".into(),
                ]),
                &policy,
                StdioMode::Capture,
            )
            .unwrap();
        let (want, lands) = match kind {
            ExecutorKind::Host => ("ok\n", true),
            _ => ("errno=EROFS\n", false),
        };
        assert_eq!(text(&out.stdout.bytes), want, "{kind}: {out:?}");
        assert_eq!(planted.exists(), lands, "{kind}");
    }
}

/// The same race on an entry that existed when the policy was built: it is swapped for a link
/// to the home's `.config` before the mounts. Both executors open every bind source one
/// component at a time and refuse the link (`ELOOP`): the command does not start. (bwrap alone
/// would follow a link in a `--bind` source path.) Control: `host` writes through the link.
#[test]
fn an_existing_writable_path_swapped_for_a_link_before_the_mounts_is_refused() {
    for kind in kinds() {
        let w = world();
        w.user_policy("{\n  \"sandbox\": {\"writable\": [\"~/tools/mytool\"]}\n}\n");
        std::fs::create_dir(w.tool()).unwrap();
        let (policy, notices) = built(&w);
        assert!(notices.is_empty());
        assert!(policy.writable_roots.contains(&w.tool()));
        std::fs::rename(w.tool(), w.home.join("tools/moved-away")).unwrap();
        symlink(w.home.join(".config"), w.tool()).unwrap();
        let planted = w.home.join(".config/planted");
        let result = executor_of(kind).run(
            &CommandSpec::new([
                OsString::from(PROBE),
                "put".into(),
                w.tool().join("planted").into(),
                "x".into(),
            ]),
            &policy,
            StdioMode::Capture,
        );
        if kind == ExecutorKind::Host {
            assert_eq!(text(&result.unwrap().stdout.bytes), "ok\n");
            assert!(planted.exists(), "host: the control must land");
        } else {
            let e = result.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("(os error 40)"), "{kind}: want ELOOP, got {e:?}");
            assert!(!planted.exists(), "{kind}: the write landed");
        }
    }
}
