//! Git metadata that cannot be swapped, and `.garuda/` that cannot be created (issue 10,
//! items 2 and 3), live on both Linux executors.
//!
//! Each attack runs in a fresh repository of its own, through
//! [`garuda_supervisor::executor::Executor::run`], under the policy `garuda_policy` builds for
//! it. On `landlock` and `bubblewrap` the probe must answer the exact errno and the host's
//! `git`, run afterwards the way the developer would (`git hook run pre-commit`, `git status`),
//! must not run anything the command planted. The negative control is the same attack on the
//! `host` executor: the probe answers `ok` and the host's `git` really runs the planted code
//! (it creates a marker file). For the refusal of a linked `.git` in direct mode, the control
//! is the same attack on the real sandboxes under a policy built without the refusal.
//!
//! An executor this machine cannot run fails the test unless `GARUDA_CONTRACT_ALLOW_MISSING`
//! names it (then `NOT TESTED` is printed); a machine without `git` fails it unless
//! `GARUDA_ALLOW_NO_GIT=1` (same).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // the contract suite's helpers; this suite uses a few
mod util;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use garuda_policy::{build_exec_policy, CommandMode, EffectiveSettings, ExecPolicy, HostEnv};
use garuda_supervisor::executor::select::executor_of;
use garuda_supervisor::executor::{
    probe_executors, CommandSpec, ExecutorKind, ExitStatus, Outcome, StdioMode,
};
use util::{PROBE, SANDBOX_PATH};

const SANDBOXES: [ExecutorKind; 2] = [ExecutorKind::Landlock, ExecutorKind::Bubblewrap];

/// A repository of its own for one attack on one executor, with a fake home. Removed on drop.
struct Scene {
    base: PathBuf,
    home: PathBuf,
    project: PathBuf,
    /// Created by the planted code when something runs it.
    marker: PathBuf,
}

impl Scene {
    fn new(name: &str, kind: ExecutorKind) -> Scene {
        let real_home = std::env::var_os("HOME").expect("HOME must be set to the real home");
        let base = PathBuf::from(real_home)
            .join(".cache/garuda-git-metadata")
            .join(format!("{}-{name}-{kind}", std::process::id()));
        if base.exists() {
            fs::remove_dir_all(&base).unwrap();
        }
        fs::create_dir_all(base.join("home")).unwrap();
        fs::create_dir_all(base.join("project")).unwrap();
        let base = fs::canonicalize(&base).unwrap();
        assert!(!base.starts_with("/tmp"), "every sandbox replaces /tmp");
        let scene = Scene {
            home: base.join("home"),
            project: base.join("project"),
            marker: base.join("marker"),
            base,
        };
        scene.git_ok(&["init", "-q"]);
        scene.write("README", "hello\n");
        scene.git_ok(&["add", "README"]);
        scene.git_ok(&["commit", "-qm", "init"]);
        scene
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.project.join(rel)
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
    }

    fn executable(&self, rel: &str, text: &str) {
        self.write(rel, text);
        fs::set_permissions(self.path(rel), fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The host's git, as the developer runs it: only the fake home's configuration.
    fn git_in(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", SANDBOX_PATH)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn git_ok(&self, args: &[&str]) {
        let out = self.git_in(&self.project, args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A hook that leaves the marker when it runs.
    fn hook(&self) -> String {
        format!("#!/bin/sh\ntouch '{}'\n", self.marker.display())
    }

    /// A configuration whose `core.fsmonitor` leaves the marker when git runs it.
    fn fsmonitor_config(&self) -> String {
        format!(
            "[core]\n\tfsmonitor = \"touch {} #\"\n",
            self.marker.display()
        )
    }

    /// The developer commits: git runs the pre-commit hook. True when the planted one ran.
    fn host_git_runs_the_hook(&self) -> bool {
        let _ = self.git_in(
            &self.project,
            &["hook", "run", "--ignore-missing", "pre-commit"],
        );
        self.marker.exists()
    }

    /// The developer runs `git status` in `dir`: git runs `core.fsmonitor`.
    fn host_git_status_in(&self, dir: &Path) -> bool {
        let _ = self.git_in(dir, &["status", "--short"]);
        self.marker.exists()
    }

    fn host_git_status(&self) -> bool {
        self.host_git_status_in(&self.project)
    }

    fn vars(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("HOME".into(), self.home.clone().into()),
            ("GARUDA_HOME".into(), self.home.join(".garuda").into()),
            ("PATH".into(), SANDBOX_PATH.into()),
            ("LANG".into(), "C.UTF-8".into()),
        ]
    }

    /// The policy garuda builds for this project (`staged`: as for a staged command; the
    /// refusal of linked `.git`/`.garuda` is for direct mode only).
    fn policy(&self, staged: bool) -> Result<ExecPolicy, garuda_policy::PolicyError> {
        let host = HostEnv::from_vars(self.vars()).unwrap();
        // No settings file anywhere: the defaults (a `.garuda` that is a file is refused by the
        // settings loader itself, so the file case could not be built through it).
        let mut settings = EffectiveSettings::default();
        if staged {
            settings.command_mode = CommandMode::Staged;
        }
        let mut policy = build_exec_policy(&self.project, &settings, &host)?;
        policy.limits.max_processes = util::MAX_PROCESSES;
        policy.limits.timeout = Some(util::RUN_TIMEOUT);
        Ok(policy)
    }

    fn run(&self, kind: ExecutorKind, policy: &ExecPolicy, argv: Vec<OsString>) -> Outcome {
        executor_of(kind)
            .run(&CommandSpec::new(argv), policy, StdioMode::Capture)
            .unwrap_or_else(|e| panic!("{kind} could not run: {e}"))
    }

    /// `garuda sandbox ARGS -- CMD` through the binary, in this project.
    fn garuda(&self, args: &[&str], cmd: &[OsString]) -> Output {
        Command::new(util::garuda_bin().unwrap())
            .arg("sandbox")
            .args(args)
            .arg("--project")
            .arg(&self.project)
            .arg("--")
            .args(cmd)
            .current_dir(&self.project)
            .env_clear()
            .envs(self.vars())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
        if let Some(parent) = self.base.parent() {
            let _ = fs::remove_dir(parent);
        }
    }
}

fn probe(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    std::iter::once(OsString::from(PROBE))
        .chain(args.iter().map(|a| a.as_ref().to_os_string()))
        .collect()
}

fn sh(script: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    ["/bin/sh", "-c", script]
        .iter()
        .map(OsString::from)
        .chain(std::iter::once(OsString::from(PROBE)))
        .chain(args.iter().map(|a| a.as_ref().to_os_string()))
        .collect()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `kind` runs here; `false` (after printing NOT TESTED) only when
/// `GARUDA_CONTRACT_ALLOW_MISSING` names it.
fn available(kind: ExecutorKind) -> bool {
    let probe = probe_executors()
        .into_iter()
        .find(|p| p.kind == kind)
        .unwrap();
    if probe.available {
        return true;
    }
    let allowed = std::env::var("GARUDA_CONTRACT_ALLOW_MISSING").unwrap_or_default();
    assert!(
        allowed.split([',', ' ']).any(|n| n.trim() == kind.name()),
        "executor {kind} is not available here: {} (set GARUDA_CONTRACT_ALLOW_MISSING={kind})",
        probe.detail
    );
    eprintln!(
        "git_metadata: {kind}: NOT TESTED: not available ({})",
        probe.detail
    );
    false
}

/// `git` is needed to set the repositories up and to show the host running planted code.
fn require_git() -> bool {
    let found = Command::new("git")
        .arg("--version")
        .env("PATH", SANDBOX_PATH)
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    assert!(
        std::env::var("GARUDA_ALLOW_NO_GIT").is_ok_and(|v| v == "1"),
        "git is not installed (set GARUDA_ALLOW_NO_GIT=1 to accept NOT TESTED)"
    );
    eprintln!("git_metadata: NOT TESTED: git is not installed");
    false
}

/// One attack: how the repository is set up, what the command does, what both sandboxes
/// answer, and how the host's git would run what it planted.
struct Attack {
    name: &'static str,
    setup: fn(&Scene),
    command: fn(&Scene) -> Vec<OsString>,
    host_git: fn(&Scene) -> bool,
}

fn hooks_link_to(s: &Scene, target: &Path) {
    fs::remove_dir_all(s.path(".git/hooks")).unwrap();
    symlink(target, s.path(".git/hooks")).unwrap();
}

fn attacks() -> Vec<Attack> {
    vec![
        // a. `.git/hooks` is a link: replace the link itself by a real folder with a hook.
        Attack {
            name: "hooks-link-in-project-replaced",
            setup: |s| {
                fs::create_dir_all(s.path("tools/hooks")).unwrap();
                hooks_link_to(s, Path::new("../tools/hooks"));
            },
            command: |s| probe(&[&"replace-dir", &".git/hooks", &"pre-commit", &s.hook()]),
            host_git: Scene::host_git_runs_the_hook,
        },
        Attack {
            name: "hooks-link-outside-replaced",
            setup: |s| {
                fs::create_dir_all(s.base.join("dotfiles/hooks")).unwrap();
                hooks_link_to(s, &s.base.join("dotfiles/hooks"));
            },
            command: |s| probe(&[&"replace-dir", &".git/hooks", &"pre-commit", &s.hook()]),
            host_git: Scene::host_git_runs_the_hook,
        },
        // ... or write into the folder the link names.
        Attack {
            name: "hooks-link-target-written",
            setup: |s| {
                fs::create_dir_all(s.path("tools/hooks")).unwrap();
                hooks_link_to(s, Path::new("../tools/hooks"));
            },
            command: |s| probe(&[&"put", &"tools/hooks/pre-commit", &s.hook()]),
            host_git: Scene::host_git_runs_the_hook,
        },
        // A hook that is a link to a tracked script: git runs the script.
        Attack {
            name: "hook-file-link-target-written",
            setup: |s| {
                s.executable("scripts/pre-commit", "#!/bin/sh\nexit 0\n");
                symlink("../../scripts/pre-commit", s.path(".git/hooks/pre-commit")).unwrap();
            },
            command: |s| probe(&[&"put", &"scripts/pre-commit", &s.hook()]),
            host_git: Scene::host_git_runs_the_hook,
        },
        // a. `.git/config` is a link: replace it with a config naming `core.fsmonitor`.
        Attack {
            name: "config-link-replaced",
            setup: |s| {
                fs::create_dir_all(s.path("cfg")).unwrap();
                fs::rename(s.path(".git/config"), s.path("cfg/gitconfig")).unwrap();
                symlink("../cfg/gitconfig", s.path(".git/config")).unwrap();
            },
            command: |s| probe(&[&"replace", &".git/config", &s.fsmonitor_config()]),
            host_git: Scene::host_git_status,
        },
        Attack {
            name: "config-link-target-written",
            setup: |s| {
                fs::create_dir_all(s.path("cfg")).unwrap();
                fs::rename(s.path(".git/config"), s.path("cfg/gitconfig")).unwrap();
                symlink("../cfg/gitconfig", s.path(".git/config")).unwrap();
            },
            command: |s| probe(&[&"put", &"cfg/gitconfig", &s.fsmonitor_config()]),
            host_git: Scene::host_git_status,
        },
        // b. A missing `config.worktree`, read because `extensions.worktreeConfig` is on.
        Attack {
            name: "config-worktree-created",
            setup: |s| s.git_ok(&["config", "extensions.worktreeConfig", "true"]),
            command: |s| probe(&[&"put", &".git/config.worktree", &s.fsmonitor_config()]),
            host_git: Scene::host_git_status,
        },
        // d. A linked worktree's own `config.worktree` under `.git/worktrees/X/`.
        Attack {
            name: "linked-worktree-config-created",
            setup: |s| {
                s.git_ok(&["config", "extensions.worktreeConfig", "true"]);
                s.git_ok(&["worktree", "add", "-q", "wt"]);
            },
            command: |s| {
                probe(&[
                    &"put",
                    &".git/worktrees/wt/config.worktree",
                    &s.fsmonitor_config(),
                ])
            },
            host_git: |s| s.host_git_status_in(&s.path("wt")),
        },
        // d. A `commondir` that sends git to a config the command made.
        Attack {
            name: "commondir-created",
            setup: |_| {},
            command: |s| {
                sh(
                    "cp -r .git evil && printf '%s' \"$1\" >> evil/config && exec \"$0\" put .git/commondir ../evil",
                    &[&s.fsmonitor_config()],
                )
            },
            host_git: Scene::host_git_status,
        },
        // d. `core.hooksPath` in the project (husky's `.husky/_`), missing before the run.
        Attack {
            name: "hooks-path-written",
            setup: |s| s.git_ok(&["config", "core.hooksPath", ".husky/_"]),
            command: |s| probe(&[&"put", &".husky/_/pre-commit", &s.hook()]),
            host_git: Scene::host_git_runs_the_hook,
        },
        // d. A file the configuration includes, unconditionally or not.
        Attack {
            name: "included-config-written",
            setup: |s| {
                s.write("config/extra.inc", "[user]\n\tname = x\n");
                s.git_ok(&["config", "include.path", "../config/extra.inc"]);
            },
            command: |s| probe(&[&"put", &"config/extra.inc", &s.fsmonitor_config()]),
            host_git: Scene::host_git_status,
        },
        Attack {
            name: "conditionally-included-config-written",
            setup: |s| {
                s.write("config/cond.inc", "[user]\n\tname = x\n");
                let key = format!("includeIf.gitdir:{}/.path", s.project.display());
                s.git_ok(&["config", &key, "../config/cond.inc"]);
            },
            command: |s| probe(&[&"put", &"config/cond.inc", &s.fsmonitor_config()]),
            host_git: Scene::host_git_status,
        },
        // d. A command-valued key whose program is a project file.
        Attack {
            name: "fsmonitor-program-written",
            setup: |s| {
                s.executable("tools/fsmonitor", "#!/bin/sh\nexit 1\n");
                s.git_ok(&["config", "core.fsmonitor", "tools/fsmonitor"]);
            },
            command: |s| probe(&[&"put", &"tools/fsmonitor", &s.hook()]),
            host_git: Scene::host_git_status,
        },
    ]
}

/// Runs every attack on `kind`. Sandboxes: `errno=EROFS` and the host's git runs nothing.
/// Host: `ok`, and the host's git runs the planted code.
fn run_attacks(kind: ExecutorKind) {
    if !available(kind) || !require_git() {
        return;
    }
    let mut failures = Vec::new();
    for attack in attacks() {
        let scene = Scene::new(attack.name, kind);
        (attack.setup)(&scene);
        let policy = scene.policy(false).unwrap();
        let out = scene.run(kind, &policy, (attack.command)(&scene));
        let answer = text(&out.stdout.bytes);
        let ran = (attack.host_git)(&scene);
        let want = if kind.is_sandbox() {
            "errno=EROFS\n"
        } else {
            "ok\n"
        };
        eprintln!(
            "git_metadata {kind}: {:<40} {} host git ran the planted code: {ran}",
            attack.name,
            answer.trim_end()
        );
        let clean = out.status == ExitStatus::Code(0) && out.stderr.bytes.is_empty();
        if !clean || answer != want || ran == kind.is_sandbox() {
            failures.push(format!(
                "{}: want {want:?} and planted code run = {}; got {answer:?}, run = {ran}, \
                 status {:?}, stderr {:?}",
                attack.name,
                !kind.is_sandbox(),
                out.status,
                text(&out.stderr.bytes)
            ));
        }
    }
    assert!(failures.is_empty(), "{kind}:\n{}", failures.join("\n"));
}

#[test]
fn landlock_refuses_every_git_metadata_attack() {
    run_attacks(ExecutorKind::Landlock);
}

#[test]
fn bubblewrap_refuses_every_git_metadata_attack() {
    run_attacks(ExecutorKind::Bubblewrap);
}

/// The negative control: on the host executor every attack lands and the host's git runs it.
#[test]
fn on_the_host_every_git_metadata_attack_runs_code() {
    run_attacks(ExecutorKind::Host);
}

/// c. `.git` itself a link (to a folder in the project, or outside it): replacing the link by
/// a repository of the command's own cannot be stopped by a mount, so direct mode refuses to
/// start, naming the link and the fix. The negative control is the same attack on the real
/// sandboxes under a policy built without the refusal (as for a staged command, but run
/// directly): it lands, and the host's git runs the planted hook.
#[test]
fn a_linked_git_dir_is_refused_in_direct_mode() {
    if !require_git() {
        return;
    }
    let attack = "rm .git && git init -q && exec \"$0\" put .git/hooks/pre-commit \"$1\"";
    for (variant, inside) in [("in-project", true), ("outside", false)] {
        for kind in SANDBOXES.into_iter().chain([ExecutorKind::Host]) {
            if !available(kind) {
                continue;
            }
            let scene = Scene::new(&format!("git-link-{variant}"), kind);
            let store = if inside {
                scene.path("store")
            } else {
                scene.base.join("store")
            };
            fs::create_dir_all(&store).unwrap();
            fs::rename(scene.path(".git"), store.join(".git")).unwrap();
            symlink(store.join(".git"), scene.path(".git")).unwrap();

            let refused = scene.policy(false).unwrap_err().to_string();
            assert!(
                refused.contains(&scene.path(".git").display().to_string())
                    && refused.contains("--staged")
                    && refused.contains("git init --separate-git-dir"),
                "{refused}"
            );
            // The same refusal through the binary, before any command runs: exit 125.
            let out = scene.garuda(
                &["--executor", kind.name()],
                &probe(&[&"write", &"made-by-probe"]),
            );
            assert_eq!(out.status.code(), Some(125), "{kind}: {out:?}");
            assert!(text(&out.stderr).contains("is a symbolic link"), "{out:?}");
            assert!(!scene.path("made-by-probe").exists());

            // Without the refusal the attack lands, even in the real sandboxes.
            let unrefused = scene.policy(true).unwrap();
            let out = scene.run(kind, &unrefused, sh(attack, &[&scene.hook()]));
            assert_eq!(
                text(&out.stdout.bytes),
                "ok\n",
                "{kind} {variant}: {:?}",
                text(&out.stderr.bytes)
            );
            assert!(
                scene.host_git_runs_the_hook(),
                "{kind} {variant}: the control must show the attack working"
            );
            eprintln!("git_metadata {kind}: .git link {variant}: refused; without the refusal the attack lands");
        }
    }
}

/// In staged mode a linked `.git` is allowed: the real project is not reachable, a change
/// under `.git` is never applied, and the link's target is read-only in the view too. The same
/// attack as above (and a write to the target's hooks) leaves the link and the repository as
/// they were. Its negative control is the direct-mode attack of the previous test.
#[test]
fn a_linked_git_dir_stays_safe_in_staged_mode() {
    if !require_git() {
        return;
    }
    let attack = "\"$0\" put store/.git/hooks/pre-commit \"$1\"; \
                  rm .git && git init -q && exec \"$0\" put .git/hooks/pre-commit \"$1\"";
    for kind in SANDBOXES {
        if !available(kind) {
            continue;
        }
        let scene = Scene::new("git-link-staged", kind);
        fs::create_dir_all(scene.path("store")).unwrap();
        fs::rename(scene.path(".git"), scene.path("store/.git")).unwrap();
        symlink("store/.git", scene.path(".git")).unwrap();
        let out = scene.garuda(
            &["--executor", kind.name(), "--staged", "--apply"],
            &sh(attack, &[&scene.hook()]),
        );
        assert_eq!(
            text(&out.stdout),
            "errno=EROFS\nok\n",
            "{kind}: {}",
            text(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(0), "{kind}: {}", text(&out.stderr));
        assert_eq!(
            fs::read_link(scene.path(".git")).unwrap(),
            Path::new("store/.git"),
            "{kind}: the link is unchanged"
        );
        assert!(!scene.path("store/.git/hooks/pre-commit").exists());
        assert!(
            !scene.host_git_runs_the_hook(),
            "{kind}: nothing planted ran"
        );
    }
}

/// What a command may still do in a repository: write objects, refs and reflogs (the holes),
/// so `git hash-object -w` and `git update-ref` work. What it may not: anything that needs a
/// lock file in the git directory itself, such as `git add` (`index.lock`), which fails with
/// "Read-only file system". On the host executor (the control) `git add` works.
#[test]
fn objects_and_refs_stay_writable_and_git_add_fails_read_only() {
    if !require_git() {
        return;
    }
    let script = "oid=$(echo garuda | git hash-object -w --stdin) && \
                  git update-ref refs/garuda/probe \"$oid\" && echo \"$oid\" && \
                  echo new > new.txt && git add new.txt";
    for kind in SANDBOXES.into_iter().chain([ExecutorKind::Host]) {
        if !available(kind) {
            continue;
        }
        let scene = Scene::new("git-holes", kind);
        let policy = scene.policy(false).unwrap();
        let out = scene.run(kind, &policy, sh(script, &[]));
        let oid = text(&out.stdout.bytes).trim().to_string();
        assert_eq!(oid.len(), 40, "{kind}: {out:?}");
        // The object and the ref were written, inside the sandbox as on the host.
        assert!(scene
            .git_in(&scene.project, &["cat-file", "-e", &oid])
            .status
            .success());
        let ref_oid = fs::read_to_string(scene.path(".git/refs/garuda/probe")).unwrap();
        assert_eq!(ref_oid.trim(), oid, "{kind}");
        let listed = text(
            &scene
                .git_in(&scene.project, &["ls-files", "new.txt"])
                .stdout,
        );
        if kind.is_sandbox() {
            let err = text(&out.stderr.bytes);
            assert_eq!(out.status, ExitStatus::Code(128), "{kind}: {err}");
            assert!(
                err.contains(".git/index.lock': Read-only file system"),
                "{kind}: {err}"
            );
            assert_eq!(listed, "", "{kind}: the index did not change");
        } else {
            assert_eq!(out.status, ExitStatus::Code(0), "{kind}: {out:?}");
            assert_eq!(listed, "new.txt\n", "host: git add worked");
        }
    }
}

/// `.garuda` is unwritable whether it exists or not: a missing one is created empty (0755)
/// and read-only, so nothing can be planted in it (`EROFS`) and it cannot be renamed away
/// (`EBUSY`); an existing settings file cannot be rewritten (`EROFS`), nor a `.garuda` file
/// replaced by a folder (`EBUSY`). On the host every one of these works (the control).
#[test]
fn garuda_dir_is_read_only_whether_or_not_it_existed() {
    if !require_git() {
        return;
    }
    type Case = (&'static str, fn(&Scene), Vec<&'static str>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "garuda-missing-planted",
            |_| {},
            vec!["write", ".garuda/settings.json"],
            "EROFS",
        ),
        (
            "garuda-missing-renamed",
            |_| {},
            vec!["rename", ".garuda", "elsewhere"],
            "EBUSY",
        ),
        (
            "garuda-settings-rewritten",
            |s| s.write(".garuda/settings.json", "{}\n"),
            vec!["write", ".garuda/settings.json"],
            "EROFS",
        ),
        (
            "garuda-file-replaced",
            |s| s.write(".garuda", "a file\n"),
            // A mount point cannot be removed.
            vec!["replace-dir", ".garuda", "settings.json", "{}"],
            "EBUSY",
        ),
    ];
    for kind in SANDBOXES.into_iter().chain([ExecutorKind::Host]) {
        if !available(kind) {
            continue;
        }
        for (name, setup, args, errno) in &cases {
            let scene = Scene::new(name, kind);
            setup(&scene);
            let existed = scene.path(".garuda").exists();
            let policy = scene.policy(false).unwrap();
            if !existed {
                let meta = fs::metadata(scene.path(".garuda")).unwrap();
                assert!(meta.is_dir(), "{name}: created as a folder");
                assert_eq!(meta.permissions().mode() & 0o777, 0o755, "{name}");
                assert_eq!(fs::read_dir(scene.path(".garuda")).unwrap().count(), 0);
                // An empty folder is invisible to git.
                let status = scene.git_in(&scene.project, &["status", "--porcelain"]);
                assert_eq!(text(&status.stdout), "", "{name}");
            }
            let before = fs::read(scene.path(".garuda/settings.json")).ok();
            let argv: Vec<OsString> = std::iter::once(OsString::from(PROBE))
                .chain(args.iter().map(OsString::from))
                .collect();
            let out = scene.run(kind, &policy, argv);
            let answer = text(&out.stdout.bytes);
            let after = fs::read(scene.path(".garuda/settings.json")).ok();
            let changed = after != before || !scene.path(".garuda").exists();
            eprintln!("git_metadata {kind}: {name:<28} {}", answer.trim_end());
            if kind.is_sandbox() {
                assert_eq!(answer, format!("errno={errno}\n"), "{kind} {name}: {out:?}");
                assert!(!changed, "{kind} {name}: .garuda changed");
            } else {
                assert_eq!(answer, "ok\n", "host {name}: {out:?}");
                assert!(changed, "host {name}: the control must change .garuda");
            }
        }
    }
}

/// A linked `.garuda` is refused in direct mode (a command could replace the link); in staged
/// mode its target is protected instead. Without the refusal the replacement lands on the real
/// sandboxes (the control).
#[test]
fn a_linked_garuda_dir_is_refused_in_direct_mode() {
    if !require_git() {
        return;
    }
    for kind in SANDBOXES {
        if !available(kind) {
            continue;
        }
        let scene = Scene::new("garuda-link", kind);
        fs::create_dir_all(scene.path("config/garuda")).unwrap();
        symlink("config/garuda", scene.path(".garuda")).unwrap();
        let refused = scene.policy(false).unwrap_err().to_string();
        assert!(
            refused.contains(&scene.path(".garuda").display().to_string())
                && refused.contains("--staged"),
            "{refused}"
        );
        let unrefused = scene.policy(true).unwrap();
        // The target stays read-only even so ...
        let out = scene.run(
            kind,
            &unrefused,
            probe(&[&"write", &"config/garuda/settings.json"]),
        );
        assert_eq!(text(&out.stdout.bytes), "errno=EROFS\n", "{kind}");
        // ... but the link itself is replaced: the reason direct mode refuses.
        let out = scene.run(
            kind,
            &unrefused,
            probe(&[&"replace-dir", &".garuda", &"settings.json", &"{}"]),
        );
        assert_eq!(text(&out.stdout.bytes), "ok\n", "{kind}");
        assert!(scene.path(".garuda/settings.json").is_file());
    }
}

/// A command started earlier in the same project, which made `sub` and its repository (so they
/// are writable to it), swaps a folder for a link between the next run's policy walk and its
/// mounts: the hole `sub/.git/objects` for a link to the main repository's hooks or to the
/// home, `sub/.git` or the pinned `sub` for a link to the home (where a `.git` with the same
/// folders waits). A read-write bind that followed the link would open the main hooks (the
/// host's git runs the hook) or the home (`.bashrc`) to the command. The test makes the swap
/// itself, after building the policy and before running the command. Both sandboxes open every
/// bind source at bind time one component at a time and refuse a link: the run does not start,
/// with `ELOOP` for the link itself (both executors hold every bind source, the read-only
/// `sub/.git` included), and nothing lands. The negative
/// control is the same swap and write on `host`: it lands.
#[test]
fn a_hole_or_pin_swapped_for_a_link_after_the_walk_is_refused_at_bind_time() {
    if !require_git() {
        return;
    }
    // (name, what is swapped, the link's text, where the command writes, landlock's and
    // bwrap's errno)
    let cases: [(&str, &str, &str, &str, [i32; 2]); 4] = [
        (
            "hole-to-hooks",
            "sub/.git/objects",
            "../../.git/hooks",
            "sub/.git/objects/pre-commit",
            [libc::ELOOP, libc::ELOOP],
        ),
        (
            "hole-to-home",
            "sub/.git/objects",
            "../../../home",
            "sub/.git/objects/.bashrc",
            [libc::ELOOP, libc::ELOOP],
        ),
        (
            "git-dir-to-home",
            "sub/.git",
            "../../home/.git",
            "sub/.git/objects/planted",
            // bwrap too holds the read-only `sub/.git` itself, as landlock does.
            [libc::ELOOP, libc::ELOOP],
        ),
        (
            "pin-to-home",
            "sub",
            "../home",
            "sub/.bashrc",
            [libc::ELOOP, libc::ELOOP],
        ),
    ];
    for kind in SANDBOXES.into_iter().chain([ExecutorKind::Host]) {
        if !available(kind) {
            continue;
        }
        for (name, swapped, link, written, errnos) in cases {
            let scene = Scene::new(name, kind);
            scene.git_ok(&["init", "-q", "sub"]);
            for hole in ["objects", "refs", "logs"] {
                fs::create_dir_all(scene.home.join(".git").join(hole)).unwrap();
            }
            let policy = scene.policy(false).unwrap();
            assert!(policy
                .writable_holes
                .contains(&scene.path("sub/.git/objects")));
            fs::rename(scene.path(swapped), scene.base.join("moved-away")).unwrap();
            symlink(link, scene.path(swapped)).unwrap();
            let landed = scene
                .path(swapped)
                .parent()
                .unwrap()
                .join(link)
                .join(Path::new(written).strip_prefix(swapped).unwrap());
            assert!(!landed.exists());
            let result = executor_of(kind).run(
                &CommandSpec::new(probe(&[&"put", &written, &scene.hook()])),
                &policy,
                StdioMode::Capture,
            );
            if kind.is_sandbox() {
                let errno = errnos[usize::from(kind == ExecutorKind::Bubblewrap)];
                let e = result.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(
                    e.contains(&format!("(os error {errno})")),
                    "{kind} {name}: want a refusal with errno {errno}, got {e:?}"
                );
                assert!(!landed.exists(), "{kind} {name}: the write landed");
                assert!(!scene.host_git_runs_the_hook(), "{kind} {name}");
            } else {
                let out = result.unwrap();
                assert_eq!(text(&out.stdout.bytes), "ok\n", "host {name}: {out:?}");
                assert!(landed.exists(), "host {name}: the control must land");
            }
            eprintln!(
                "git_metadata {kind}: {name:<16} swapped after the walk: refused = {}",
                kind.is_sandbox()
            );
        }
    }
}

/// The command tries every descriptor it holds as a way around the mounts: append to
/// `/proc/self/fd/N/.git/config` and `/proc/self/fd/N/config`, read `/proc/self/fd/N/.env`.
/// bwrap inherits the spawn hook's held bind sources (`O_PATH` handles on the host's own
/// mounts) and used to hand them to the command, through which both worked (the host's
/// `.git/config` written, a masked `.env` read). Found in the review of the differential
/// fuzzer's change; the fuzzer's operations go by path and could not see it.
const THROUGH_DESCRIPTORS: &str = r#"for f in /proc/self/fd/*; do
  n=${f##*/}
  [ "$n" -gt 2 ] || continue
  (echo '#planted' >> "$f/.git/config") 2>/dev/null && echo "WROTE $n/.git/config"
  (echo '#planted' >> "$f/config") 2>/dev/null && echo "WROTE $n/config"
  cat "$f/.env" 2>/dev/null
done
echo checked"#;

fn git_config_planted(fx: &util::Fixture) -> bool {
    fs::read_to_string(fx.project.join(".git/config"))
        .unwrap()
        .contains("#planted")
}

/// On both sandboxes no descriptor above stdio reaches the command: nothing is written
/// through one and no secret read. Control: the same script under bwrap with the executor's
/// own arguments but without its exec step (bwrap executing the command itself, as before the
/// fix) writes the host's `.git/config` through a held descriptor.
#[test]
fn no_held_descriptor_reaches_the_command() {
    let mut ran = 0;
    for kind in SANDBOXES {
        if !available(kind) {
            continue;
        }
        ran += 1;
        let fx = util::Fixture::new(&format!("fds-{kind}"));
        let out = executor_of(kind)
            .run(
                &CommandSpec::new(["/bin/sh", "-c", THROUGH_DESCRIPTORS]),
                &fx.policy,
                StdioMode::Capture,
            )
            .unwrap();
        let said = text(&out.stdout.bytes);
        assert!(
            said.ends_with("checked\n"),
            "{kind}: {said:?} {:?}",
            out.stderr.text()
        );
        assert!(!said.contains("WROTE"), "{kind}: {said}");
        assert!(!said.contains("SECRET_IN_PROJECT"), "{kind}: {said}");
        assert!(
            !git_config_planted(&fx),
            "{kind}: the host's .git/config was written"
        );
    }
    assert!(ran > 0, "no sandbox executor to test");

    // The control: bwrap with the executor's arguments, no exec step.
    if !available(ExecutorKind::Bubblewrap) {
        return;
    }
    use garuda_supervisor::executor::bubblewrap;
    use std::io::{Seek, Write};
    use std::os::fd::AsRawFd;
    let fx = util::Fixture::new("fds-control");
    let program = garuda_supervisor::executor::seccomp::program().unwrap();
    let mut seccomp = tempfile::tempfile().unwrap();
    seccomp
        .write_all(&garuda_supervisor::executor::seccomp::program_bytes(
            &program,
        ))
        .unwrap();
    seccomp.rewind().unwrap();
    let empties: Vec<fs::File> = (0..bubblewrap::empty_files_needed(&fx.policy))
        .map(|_| tempfile::tempfile().unwrap())
        .collect();
    let binds = bubblewrap::reserve_binds(&fx.policy).unwrap();
    let fds = bubblewrap::Fds {
        seccomp: seccomp.as_raw_fd(),
        empty: empties.iter().map(|f| f.as_raw_fd()).collect(),
        binds: binds.iter().map(|f| f.as_raw_fd()).collect(),
        status: None,
        exec: None,
    };
    let cmd = CommandSpec::new(["/bin/sh", "-c", THROUGH_DESCRIPTORS]);
    let bwrap = bubblewrap::bwrap_path().unwrap();
    let out = bubblewrap::bare_command(&bwrap, &fx.policy, &fx.project, &cmd, &fds)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(
        said.contains("WROTE"),
        "control: {said:?} {:?}",
        text(&out.stderr)
    );
    assert!(
        git_config_planted(&fx),
        "control: the host's .git/config stayed"
    );
}
