//! A project under `/tmp` behaves the same on both Linux executors, through the real `garuda`
//! binary (issue 11, point 7), in direct and in staged mode:
//!
//! - the project (`/tmp/<name>`) is visible and writable at its own path: a file the command
//!   writes there lands in the host's project;
//! - the rest of `/tmp` is private: a file the command writes elsewhere in `/tmp` does not reach
//!   the host's `/tmp`, and a file of the host's `/tmp` is not there (`ENOENT`);
//! - `/tmp` itself as the project is refused (exit 125) with the reason, before anything runs.
//!
//! Negative control: the `host` executor's write elsewhere in `/tmp` lands in the host's
//! `/tmp`, and it reads the host's file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a failed step is a failed test

#[allow(dead_code)] // shared with the contract suite, which uses the rest
mod util;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use garuda_supervisor::executor::select::probe_executors;
use util::{garuda_bin, PROBE, SANDBOX_PATH};

const SANDBOXES: [&str; 2] = ["landlock", "bubblewrap"];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Both sandboxes must be available: a missing one says `NOT TESTED` and fails, unless
/// `GARUDA_ALLOW_NOT_TESTED` names it.
fn require_sandboxes() {
    for probe in probe_executors() {
        if !probe.available && SANDBOXES.contains(&probe.kind.name()) {
            util::not_tested(
                probe.kind.name(),
                &format!(
                    "tmp_project on {}: the executor is not available here ({})",
                    probe.kind, probe.detail
                ),
            );
        }
    }
}

/// A fake home under the real `~/.cache`, a project under `/tmp` (two folders deep, so that
/// the private `/tmp` must make the folder above it too) and a file of the host's `/tmp`.
struct World {
    _base: tempfile::TempDir,
    home: PathBuf,
    tmp: tempfile::TempDir,
    project: PathBuf,
    host_file: PathBuf,
}

fn world() -> World {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let parent = real_home.join(".cache/garuda-tmp-project");
    std::fs::create_dir_all(&parent).unwrap();
    let base = tempfile::tempdir_in(&parent).unwrap();
    let home = base.path().canonicalize().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("garuda-tmp-project-")
        .tempdir_in("/tmp")
        .unwrap();
    let project = tmp.path().canonicalize().unwrap().join("proj");
    assert!(project.starts_with("/tmp"), "{}", project.display());
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README"), "project\n").unwrap();
    let host_file = tmp.path().join("host-file");
    std::fs::write(&host_file, "host\n").unwrap();
    World {
        _base: base,
        home,
        tmp,
        project,
        host_file,
    }
}

impl World {
    /// `garuda sandbox --executor E --capture --project P [extra…] -- probe ARGS…`, run in
    /// the project with a clean environment.
    fn sandbox(
        &self,
        executor: &str,
        project: &Path,
        extra: &[&str],
        probe: &[&dyn AsRef<std::ffi::OsStr>],
    ) -> Output {
        let mut args: Vec<OsString> = ["sandbox", "--executor", executor, "--capture"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push("--project".into());
        args.push(project.into());
        args.extend(extra.iter().map(OsString::from));
        args.push("--".into());
        args.push(PROBE.into());
        args.extend(probe.iter().map(|a| a.as_ref().to_os_string()));
        Command::new(garuda_bin().unwrap())
            .args(args)
            .current_dir(project)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", SANDBOX_PATH)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// A path elsewhere in `/tmp` (next to the project's folder), unique to this world.
    fn elsewhere(&self, tag: &str) -> PathBuf {
        self.tmp.path().join(format!("elsewhere-{tag}"))
    }
}

fn result(out: &Output) -> (Option<i32>, String) {
    (out.status.code(), text(&out.stdout))
}

#[test]
fn a_project_under_tmp_is_shared_and_the_rest_of_tmp_stays_private() {
    require_sandboxes();
    let w = world();
    for executor in SANDBOXES {
        for (mode, extra) in [
            ("direct", &[][..]),
            ("staged", &["--staged", "--apply"][..]),
        ] {
            let tag = format!("{executor}-{mode}");
            let inside = w.project.join(format!("in-{tag}"));
            let out = w.sandbox(executor, &w.project, extra, &[&"put", &inside, &"made"]);
            assert_eq!(result(&out), (Some(0), "ok\n".into()), "{tag}: {out:?}");
            assert_eq!(std::fs::read_to_string(&inside).unwrap(), "made", "{tag}");

            let outside = w.elsewhere(&tag);
            let out = w.sandbox(executor, &w.project, extra, &[&"put", &outside, &"made"]);
            assert_eq!(result(&out), (Some(0), "ok\n".into()), "{tag}: {out:?}");
            assert!(
                !outside.exists(),
                "{tag}: the write reached the host's /tmp"
            );

            let out = w.sandbox(executor, &w.project, extra, &[&"read", &w.host_file]);
            assert_eq!(
                result(&out),
                (Some(0), "errno=ENOENT\n".into()),
                "{tag}: {out:?}"
            );
        }
    }
    // Negative control: without a sandbox the same writes and read reach the host's /tmp.
    let outside = w.elsewhere("host");
    let out = w.sandbox("host", &w.project, &[], &[&"put", &outside, &"made"]);
    assert_eq!(result(&out), (Some(0), "ok\n".into()), "{out:?}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "made");
    let out = w.sandbox("host", &w.project, &[], &[&"read", &w.host_file]);
    assert_eq!(result(&out), (Some(0), "ok\n".into()), "{out:?}");
}

#[test]
fn tmp_itself_as_the_project_is_refused_with_the_reason() {
    require_sandboxes();
    let w = world();
    let marker = w.elsewhere("ran");
    let error = "garuda: project root /tmp is refused: every sandbox gives commands a private, \
                 empty /tmp, and sharing the host's whole /tmp would hand them every other \
                 program's temporary files and sockets (the X server's among them); a folder \
                 under /tmp is shared at its own path; put the project in a folder of its own \
                 (mkdir /tmp/proj) and run there, or pass --project DIR\n";
    for executor in SANDBOXES.into_iter().chain(["host"]) {
        let out = w.sandbox(executor, Path::new("/tmp"), &[], &[&"put", &marker, &"x"]);
        assert_eq!(
            (out.status.code(), text(&out.stdout), text(&out.stderr)),
            (Some(125), "".into(), error.into()),
            "{executor}"
        );
        assert!(!marker.exists(), "{executor}: the command ran");
    }
    // Control: the project's own folder under /tmp runs the same command.
    for executor in SANDBOXES {
        let out = w.sandbox(
            executor,
            &w.project,
            &[],
            &[&"put", &w.project.join("x"), &"x"],
        );
        assert_eq!(
            result(&out),
            (Some(0), "ok\n".into()),
            "{executor}: {out:?}"
        );
    }
}
