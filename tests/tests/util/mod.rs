//! Helpers of the contract suite: the fake home and project, the policy built from them, and
//! the paths of the probe and of the `garuda` binary.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use garuda_policy::{build_exec_policy, load_settings_from, ExecPolicy, HostEnv};

/// The probe program (a bin target of this package).
pub const PROBE: &str = env!("CARGO_BIN_EXE_garuda-probe");

/// Process limit of every contract policy: far below the fork bomb's target.
///
/// 301 is the smallest limit the `landlock` executor can apply: it writes the limit to the
/// PID namespace's `pid_max`, which the kernel refuses below `RESERVED_PIDS + 1` = 301
/// (EINVAL), so a policy asking for fewer processes cannot run there at all (reported as an
/// executor bug; the executor should clamp or refuse such a policy with a clear reason).
pub const MAX_PROCESSES: u32 = 301;

/// Every run gets a timeout, so a broken sandbox cannot hang the suite.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The `PATH` of the sandboxed command.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Values of the secret-looking variables put into the host environment; none may reach a
/// command.
pub const SECRET_VARS: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "ghp_contract_suite_secret"),
    ("AWS_SECRET_ACCESS_KEY", "aws_contract_suite_secret"),
    ("SSH_AUTH_SOCK", "/nonexistent/garuda-contract/agent.sock"),
    ("DISPLAY", ":42"),
];

/// An innocent variable on the default allowlist: it must reach the command, which shows the
/// secret ones are missing because they were filtered, not because nothing was passed.
pub const INNOCENT_VAR: (&str, &str) = ("LANG", "C.UTF-8");

/// Secrets in the fake home, relative to it, with their case names: each is created, and none
/// may be readable. Garuda's own home (audit keys) is one of them.
pub const HOME_SECRET_FILES: &[(&str, &str)] = &[
    ("secret-ssh-key", ".ssh/id_ed25519"),
    ("secret-aws", ".aws/credentials"),
    ("secret-gnupg", ".gnupg/x"),
    ("secret-gh", ".config/gh/hosts.yml"),
    ("secret-docker", ".docker/config.json"),
    ("secret-kube", ".kube/config"),
    ("secret-netrc", ".netrc"),
    ("secret-git-credentials", ".git-credentials"),
    ("secret-bash-history", ".bash_history"),
    ("secret-garuda-home", ".garuda/key"),
];

/// Secrets in the project, relative to it, with their case names.
pub const PROJECT_SECRET_FILES: &[(&str, &str)] = &[
    ("secret-project-env", ".env"),
    ("secret-project-nested-env", "sub/.env.local"),
];

/// Names the `NOT TESTED` cases a run accepts, comma- or space-separated (for example
/// `seccomp-rules,run-socket`); each test says which name it needs.
#[allow(dead_code)] // the contract suite names executors in GARUDA_CONTRACT_ALLOW_MISSING
pub const ALLOW_NOT_TESTED: &str = "GARUDA_ALLOW_NOT_TESTED";

/// Print `NOT TESTED: what (why)` on stderr, written directly: the harness captures what a
/// passing test prints with `eprintln!`, which would hide the line from `.ci/run` when an
/// allow variable lets the test pass.
pub fn say_not_tested(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "NOT TESTED: {line}");
}

/// Whether [`ALLOW_NOT_TESTED`] names `case`.
#[allow(dead_code)] // as above
pub fn not_tested_allowed(case: &str) -> bool {
    std::env::var(ALLOW_NOT_TESTED)
        .unwrap_or_default()
        .split([',', ' '])
        .any(|n| n.trim() == case)
}

/// Say that something was not tested (`line`: what, and why), and fail unless
/// [`ALLOW_NOT_TESTED`] names `case`.
#[allow(dead_code)] // as above
pub fn not_tested(case: &str, line: &str) {
    say_not_tested(line);
    assert!(
        not_tested_allowed(case),
        "NOT TESTED: {line}; set {ALLOW_NOT_TESTED}={case} to accept that"
    );
}

/// The effective uid of this process.
pub fn uid() -> u32 {
    fs::metadata("/proc/self")
        .map(|m| m.uid())
        .expect("stat /proc/self")
}

/// True when the suite runs as root.
pub fn is_root() -> bool {
    uid() == 0
}

fn write(path: &Path, data: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn git_dir(dir: &Path) {
    for sub in ["hooks", "objects", "refs"] {
        fs::create_dir_all(dir.join(sub)).expect("mkdir git dir");
    }
    write(
        &dir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n",
    );
    write(&dir.join("HEAD"), "ref: refs/heads/main\n");
}

/// The fake home, project and sibling folder of one executor's run, and the policies built
/// from them. Everything it created is removed when it is dropped.
///
/// The base lives under the *real* user's `~/.cache`, never under `/tmp`: every Linux executor
/// gives the command a private `/tmp`, so a secret under `/tmp` would be invisible for the
/// wrong reason and the secret cases would prove nothing.
pub struct Fixture {
    /// `$HOME/.cache/garuda-contract/<pid>-<executor>`.
    pub base: PathBuf,
    /// The fake home.
    pub home: PathBuf,
    /// The project (canonical).
    pub project: PathBuf,
    /// A folder next to the project.
    pub sibling: PathBuf,
    /// A file the test puts in the real `/tmp`.
    pub host_tmp_file: PathBuf,
    /// A second project, under `/tmp`.
    #[allow(dead_code)] // held so that the folder is removed with the fixture
    pub tmp_project: tempfile::TempDir,
    /// The policy for `project`.
    pub policy: ExecPolicy,
    /// The policy for `tmp_project`.
    pub tmp_policy: ExecPolicy,
    /// The host environment the policies were built from (for the `garuda` binary).
    pub vars: Vec<(OsString, OsString)>,
}

impl Fixture {
    /// Create the fake home and projects for `tag` and build their policies.
    pub fn new(tag: &str) -> Fixture {
        let real_home = std::env::var_os("HOME").expect("HOME must be set to the real home");
        let base = PathBuf::from(real_home)
            .join(".cache/garuda-contract")
            .join(format!("{}-{tag}", std::process::id()));
        if base.exists() {
            fs::remove_dir_all(&base).expect("remove a stale fixture");
        }
        fs::create_dir_all(&base).expect("create the fixture base");
        let base = fs::canonicalize(&base).expect("canonical base");
        assert!(
            !base.starts_with("/tmp"),
            "the fixture must not live under /tmp (HOME={})",
            base.display()
        );
        let home = base.join("home");
        let project = base.join("project");
        let sibling = base.join("sibling");

        for (_, rel) in HOME_SECRET_FILES {
            write(&home.join(rel), &format!("SECRET {rel}\n"));
        }
        for name in [
            "notes.txt",
            "chmod.txt",
            "utimes.txt",
            "xattr.txt",
            "link-target.txt",
            "hardlink-src.txt",
        ] {
            write(&home.join(name), "home file\n");
        }
        for (_, rel) in PROJECT_SECRET_FILES {
            write(&project.join(rel), &format!("SECRET_IN_PROJECT={rel}\n"));
        }
        write(&project.join("README"), "project\n");
        git_dir(&project.join(".git"));
        // A nested repository.
        git_dir(&project.join("sub/.git"));
        // A repository two folders deep, for the rename cases (its own, so that the host's
        // negative control does not disturb the other git cases running beside it).
        git_dir(&project.join("moveme/inner/.git"));
        git_dir(&project.join("renameme/.git"));
        git_dir(&project.join("gitdirs/wt2"));
        write(&project.join("wt2/.git"), "gitdir: ../gitdirs/wt2\n");
        // A `.git` file (worktree/submodule style) pointing to a git dir elsewhere in the
        // project.
        git_dir(&project.join("gitdirs/wt"));
        write(&project.join("wt/.git"), "gitdir: ../gitdirs/wt\n");
        write(&sibling.join("file.txt"), "sibling\n");

        let host_tmp_file =
            PathBuf::from(format!("/tmp/garuda-contract-{}-{tag}", std::process::id()));
        write(&host_tmp_file, "host tmp\n");
        let tmp_project = tempfile::Builder::new()
            .prefix("garuda-contract-project-")
            .tempdir_in("/tmp")
            .expect("a project under /tmp");
        write(&tmp_project.path().join("seed.txt"), "seed\n");

        let mut vars: Vec<(OsString, OsString)> = vec![
            ("HOME".into(), home.clone().into()),
            ("GARUDA_HOME".into(), home.join(".garuda").into()),
            ("PATH".into(), SANDBOX_PATH.into()),
            (INNOCENT_VAR.0.into(), INNOCENT_VAR.1.into()),
        ];
        vars.extend(
            SECRET_VARS
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let policy = contract_policy(&base, &project, &vars);
        let tmp_policy = contract_policy(&base, tmp_project.path(), &vars);
        Fixture {
            project: policy.project_root.clone(),
            base,
            home,
            sibling,
            host_tmp_file,
            tmp_project,
            policy,
            tmp_policy,
            vars,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
        // The shared parent goes too once the last fixture is gone (fails while others live).
        if let Some(parent) = self.base.parent() {
            let _ = fs::remove_dir(parent);
        }
        let _ = fs::remove_file(&self.host_tmp_file);
    }
}

/// The policy for `project` from settings files that do not exist (so only the defaults
/// apply), a fake host environment, the contract's process limit and a timeout.
fn contract_policy(base: &Path, project: &Path, vars: &[(OsString, OsString)]) -> ExecPolicy {
    let host = HostEnv::from_vars(vars.to_vec()).expect("host env");
    let settings = load_settings_from(
        &base.join("no-managed-policy.json"),
        &base.join("no-user-policy.json"),
        &project.join(".garuda/settings.json"),
        &host,
        project,
    )
    .expect("settings");
    let mut policy = build_exec_policy(project, &settings, &host).expect("policy");
    policy.limits.max_processes = MAX_PROCESSES;
    policy.limits.timeout = Some(RUN_TIMEOUT);
    policy
}

/// The `garuda` binary: `$GARUDA_BIN`, else `target/<profile>/garuda` next to this test
/// executable (which lives in `target/<profile>/deps/`). `Err` says how to get it.
pub fn garuda_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("GARUDA_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("GARUDA_BIN={} does not exist", bin.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("garuda"))
        .ok_or("the test executable should live in target/<profile>/deps")?;
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!(
            "the supervisor binary {} is missing: build it first with `cargo build -p garuda` \
             (or set GARUDA_BIN)",
            bin.display()
        ))
    }
}

/// `VmRSS` of `pid` in bytes; `None` once the process is gone or a zombie.
pub fn vm_rss(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Every descendant of `pid` (through every thread's `children`).
#[allow(dead_code)] // the contract suite has no use for it
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for c in children.split_whitespace() {
                let c: u32 = c.parse().unwrap();
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}
