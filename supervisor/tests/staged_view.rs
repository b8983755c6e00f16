//! Both Linux executors run a command over a staged view (overlay or copy) at the project's
//! own path: its writes land in the staging folder, the project does not change. Negative
//! control: the same command without a staged view changes the project.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::base_dir;

use std::path::{Path, PathBuf};

use garuda_policy::{build_exec_policy, load_settings_from, ExecPolicy, HostEnv, StagedView};
use garuda_supervisor::executor::{self, CommandSpec, ExecutorKind, StdioMode};

struct World {
    _base: tempfile::TempDir,
    project: PathBuf,
    staging: PathBuf,
    policy: ExecPolicy,
}

fn world() -> World {
    let base = base_dir("garuda-staged-view-tests");
    let home = base.path().join("home");
    let project = base.path().join("project");
    let staging = base.path().join("staging");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(project.join("a.txt"), "old\n").unwrap();
    std::fs::write(project.join("gone.txt"), "bye\n").unwrap();
    let vars = vec![
        ("HOME".into(), home.clone().into_os_string()),
        ("PATH".into(), "/usr/bin:/bin".into()),
    ];
    let host = HostEnv::from_vars(vars).unwrap();
    let none = base.path().join("none.json");
    let settings = load_settings_from(&none, &none, &none, &host, &project).unwrap();
    let policy = build_exec_policy(&project, &settings, &host).unwrap();
    World {
        project: policy.project_root.clone(),
        staging,
        policy,
        _base: base,
    }
}

fn overlay(w: &World) -> StagedView {
    let upper = w.staging.join("upper");
    let work = w.staging.join("work");
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    StagedView::Overlay {
        lower: w.project.clone(),
        upper,
        work,
    }
}

fn copy(w: &World) -> StagedView {
    let dir = w.staging.join("copy");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&w.project)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    StagedView::Copy { dir }
}

const SCRIPT: &str = "echo new > a.txt && rm gone.txt && echo made > b.txt && echo abs > \"$PWD/abs.txt\" && cat a.txt";

fn run(kind: ExecutorKind, policy: &ExecPolicy) -> String {
    let ex = executor::select::executor_of(kind);
    let out = ex
        .run(
            &CommandSpec::new(["/bin/sh", "-c", SCRIPT]),
            policy,
            StdioMode::Capture,
        )
        .unwrap();
    assert!(out.status.success(), "{kind}: {out:?}");
    out.stdout.text()
}

fn assert_project_unchanged(project: &Path) {
    assert_eq!(
        std::fs::read_to_string(project.join("a.txt")).unwrap(),
        "old\n"
    );
    assert!(project.join("gone.txt").exists());
    assert!(!project.join("b.txt").exists());
    assert!(
        !project.join("abs.txt").exists(),
        "a write to the project's absolute path reached it"
    );
}

#[test]
fn staged_views_keep_the_project_unchanged() {
    for kind in [ExecutorKind::Landlock, ExecutorKind::Bubblewrap] {
        for make in [overlay, copy] {
            let w = world();
            let view = make(&w);
            let mut policy = w.policy.clone();
            policy.staged = Some(view.clone());
            // The command sees its own writes.
            assert_eq!(run(kind, &policy), "new\n", "{kind} {view:?}");
            assert_project_unchanged(&w.project);
            match &view {
                StagedView::Overlay { upper, .. } => {
                    assert_eq!(
                        std::fs::read_to_string(upper.join("a.txt")).unwrap(),
                        "new\n"
                    );
                    assert_eq!(
                        std::fs::read_to_string(upper.join("abs.txt")).unwrap(),
                        "abs\n"
                    );
                    // A deletion is a whiteout in the upper folder.
                    let meta = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
                    assert!(!meta.is_file() || meta.len() == 0, "{kind}: not a whiteout");
                }
                StagedView::Copy { dir } => {
                    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "new\n");
                    assert!(!dir.join("gone.txt").exists());
                }
            }
            // overlayfs leaves work/work with mode 000.
            let _ = std::process::Command::new("chmod")
                .args(["-R", "u+rwx"])
                .arg(&w.staging)
                .status();
        }
    }
}

#[test]
fn without_a_staged_view_the_same_command_changes_the_project() {
    for kind in [ExecutorKind::Landlock, ExecutorKind::Bubblewrap] {
        let w = world();
        assert_eq!(run(kind, &w.policy), "new\n");
        assert_eq!(
            std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
            "new\n"
        );
        assert!(!w.project.join("gone.txt").exists());
    }
}

#[test]
fn the_host_executor_refuses_a_staged_view() {
    let w = world();
    let mut policy = w.policy.clone();
    policy.staged = Some(overlay(&w));
    let ex = executor::select::executor_of(ExecutorKind::Host);
    let err = ex
        .run(
            &CommandSpec::new(["/bin/true"]),
            &policy,
            StdioMode::Capture,
        )
        .unwrap_err();
    assert!(err.to_string().contains("need an OS sandbox"), "{err}");
    assert_project_unchanged(&w.project);
}

/// A session over several commands through the real executors (seed T5): ignored output
/// stays in staging and the next command sees it; the developer's edits between commands are
/// visible; a conflicting edit refuses apply; an incomplete list cannot be applied.
#[test]
fn sessions_across_commands_through_the_sandbox() {
    use garuda_staging::{BackendChoice, Session, StagingError};
    let overlay_usable = garuda_supervisor::doctor::overlay_in_userns().is_ok();
    assert!(
        overlay_usable,
        "overlayfs in a user namespace is expected on this machine"
    );
    for kind in [ExecutorKind::Landlock, ExecutorKind::Bubblewrap] {
        for choice in [BackendChoice::Overlay, BackendChoice::Copy] {
            let w = world();
            std::fs::write(w.project.join(".gitignore"), "target/\n").unwrap();
            let run_in = |session: &Session, script: &str| {
                let mut policy = w.policy.clone();
                policy.staged = Some(session.view());
                let ex = executor::select::executor_of(kind);
                let out = ex
                    .run(
                        &CommandSpec::new(["/bin/sh", "-c", script]),
                        &policy,
                        StdioMode::Capture,
                    )
                    .unwrap();
                assert!(out.status.success(), "{kind} {choice:?}: {out:?}");
                out.stdout.text()
            };
            let mut s = Session::create(&w.staging, &w.project, choice, overlay_usable).unwrap();

            // 1. An ignored build output: counted, not applied, seen by the next command.
            let mark = s.prepare().unwrap();
            run_in(&s, "mkdir -p target && echo built > target/out");
            let set = s.changes(&mark).unwrap();
            assert!(
                set.changes.is_empty(),
                "{kind} {choice:?}: {:?}",
                set.changes
            );
            assert_eq!(set.ignored_counts.get("target/"), Some(&1));
            s.apply(&set).unwrap();
            assert!(
                !w.project.join("target").exists(),
                "ignored output reached the project"
            );
            let mark = s.prepare().unwrap();
            assert_eq!(run_in(&s, "cat target/out"), "built\n", "{kind} {choice:?}");
            let _ = s.changes(&mark).unwrap();

            // 2. The developer edits the project between commands: the next command sees it.
            std::fs::write(w.project.join("a.txt"), "edited by the developer\n").unwrap();
            let mark = s.prepare().unwrap();
            assert_eq!(
                run_in(&s, "cat a.txt"),
                "edited by the developer\n",
                "{kind} {choice:?}"
            );
            let _ = s.changes(&mark).unwrap();

            // 3. A conflict: the project changes after the command started; apply refuses.
            let mark = s.prepare().unwrap();
            run_in(&s, "echo from-the-command > a.txt");
            std::thread::sleep(std::time::Duration::from_millis(20));
            std::fs::write(w.project.join("a.txt"), "edited during the command\n").unwrap();
            let set = s.changes(&mark).unwrap();
            assert_eq!(set.changes.len(), 1);
            let err = s.apply(&set).unwrap_err();
            assert!(matches!(err, StagingError::Conflict { .. }), "{err}");
            assert_eq!(
                std::fs::read_to_string(w.project.join("a.txt")).unwrap(),
                "edited during the command\n",
                "a refused apply changed the project"
            );
            s.discard(&set).unwrap();

            // 4. An incomplete list (the entry limit): only discard.
            s.set_entry_limit(3);
            let mark = s.prepare().unwrap();
            run_in(&s, "for i in 1 2 3 4 5 6; do echo $i > n$i.txt; done");
            let set = s.changes(&mark).unwrap();
            assert!(set.incomplete.is_some(), "{kind} {choice:?}");
            assert!(!set.can_apply());
            assert!(s.apply(&set).is_err());
            assert!(!w.project.join("n1.txt").exists());
            s.discard(&set).unwrap();
            s.close().unwrap();
        }
    }
}
