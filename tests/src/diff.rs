//! The executors' differential fuzzer's harness: the case (a generated tree and a sequence of
//! file operations), its proptest strategies, making the tree and the policy, running the probe
//! on an executor and the three checks against the policy's model (`garuda_policy::model`).
//! Shared by `tests/executor_diff.rs` (the bounded runs and the saved regressions) and the
//! `executor_diff` cargo-fuzz target. See `docs/fuzzing.md`.
//!
//! After each executor's run:
//!
//! 1. **nothing changed that the model forbids**: the host tree before and after (every entry
//!    under the case's folder, without following links: type, mode, content, link target,
//!    change time) differs only at paths where [`model::decide`] allows a write;
//! 2. **no secret was read**: no `readall` answered with the content of a secret, whichever path
//!    (link, hard link, renamed folder) it went through;
//! 3. **the two Linux executors agree**: an operation one of them let through (`ok`) is not
//!    refused by the other with a permission error (`EACCES`, `EPERM`, `EROFS`);
//! 4. **nothing changed that the design protects** whatever the policy says (the home, beside
//!    the project, git metadata but its holes, `.garuda`): a policy builder that forgot a path
//!    is caught here, where the model, which reads that policy, cannot see it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test harness: a failed step fails the case

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use garuda_policy::model::{self, Access};
use garuda_policy::{build_exec_policy, load_settings_from, ExecPolicy, HostEnv};
use garuda_supervisor::executor::select::executor_of;
use garuda_supervisor::executor::{CommandSpec, ExecutorKind, StdioMode};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

/// Process limit of every case's policy (the smallest the landlock executor applies).
const MAX_PROCESSES: u32 = 301;
/// Every run gets a timeout, so a broken sandbox cannot hang the fuzzer.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The `PATH` of the sandboxed command.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

// ---------------------------------------------------------------------------------------------
// The case.

/// The shape of the project's git metadata (each makes different read-only paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum GitShape {
    /// `.git` is a folder in the project.
    Folder,
    /// `.git` is a file `gitdir: ../sibling/gitdir` (a worktree or submodule).
    GitdirFile,
    /// `.git` is a link to `../sibling/gitdir`.
    Link,
    /// `.git` is a folder whose `hooks` is a link to `../../sibling/hooks` (a dotfile
    /// manager's shape).
    HooksLink,
    /// `.git` is a folder whose `config` is a link to `../../sibling/gitconfig`.
    ConfigLink,
}

/// A generated link: where it is (relative to the case's folder) and what it names (a path
/// relative to the case's folder when it starts with `@/`, else taken as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Where, relative to the case's folder.
    pub at: String,
    /// What it names.
    pub target: String,
}

/// One operation of the probe, paths relative to the case's folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Read the whole file (`readall`: `ok:HASH`).
    ReadAll(String),
    /// Open for writing, creating or truncating (links followed).
    Write(String),
    /// Open an existing file for appending.
    Append(String),
    /// `chmod 600`.
    Chmod(String),
    /// Set both times to the epoch.
    Utimes(String),
    /// Set the extended attribute `user.x`.
    Setxattr(String),
    /// Remove a file or link.
    Unlink(String),
    /// Remove an empty folder.
    Rmdir(String),
    /// Make a folder.
    Mkdir(String),
    /// Rename the first to the second.
    Rename(String, String),
    /// Hard-link the first at the second.
    Hardlink(String, String),
    /// A link naming the first (a target as [`Link::target`]) at the second.
    Symlink(String, String),
    /// Connect to the harness's TCP listener on the host's loopback.
    TcpConnectHost,
    /// Send a datagram to the harness's UDP socket on the host's loopback.
    UdpSendHost,
    /// List the descriptors above stdio the command holds (`fds:none` is the only answer a
    /// sandbox may give: an inherited handle on a host folder reaches past every mount).
    InheritedFds,
}

/// What the user's policy file adds (none of it may loosen a wall the design keeps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserPolicy {
    /// `sandbox.writable` names `home/cache`, a folder of the home.
    pub writable_cache: bool,
    /// `sandbox.unreadable` names `project/d/b.txt`, a file of the project.
    pub unreadable_file: bool,
    /// `"profile": "strict"`.
    pub strict: bool,
}

/// A whole case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The git metadata's shape.
    pub git: GitShape,
    /// Whether the project has a `.garuda` folder before the run (without one, the policy
    /// must still keep the command from making it).
    #[serde(default = "yes")]
    pub garuda: bool,
    /// The command runs staged (over a view of the project), and its change is then applied
    /// with every guard approved (sensitive files, `.garuda`): the widest yes a person can give.
    #[serde(default)]
    pub staged: bool,
    /// Operations of a second sandbox (direct mode) in the same project, run at the same time
    /// as the first.
    #[serde(default)]
    pub second: Vec<Op>,
    /// The second sandbox also swaps the folder `project/d` with a link to the folder beside
    /// the project (`project/swap-link`), over and over, until the first command and the
    /// apply of its staged change are over: the race of issue 10 item 1.
    #[serde(default)]
    pub race: bool,
    /// The user's policy file.
    #[serde(default)]
    pub user: UserPolicy,
    /// Links added to the skeleton.
    pub links: Vec<Link>,
    /// What the command does.
    pub ops: Vec<Op>,
}

/// Secrets of the skeleton, relative to the case's folder.
const SECRETS: &[&str] = &[
    "home/.ssh/id_ed25519",
    "home/.aws/credentials",
    "home/.garuda/key",
    "project/.env",
];

/// Plain files of the skeleton.
const FILES: &[&str] = &[
    "home/notes.txt",
    "home/cache/x",
    "project/README",
    "project/a.txt",
    "project/d/b.txt",
    "project/.garuda/notes",
    "sibling/file.txt",
    "sibling/dir/c.txt",
];

/// Where links may be put.
const LINK_PLACES: &[&str] = &["project/l1", "project/d/l2", "project/l3", "sibling/l4"];

/// What links may name.
const LINK_TARGETS: &[&str] = &[
    "@/home/.ssh/id_ed25519",
    "@/home/.ssh",
    "@/home/notes.txt",
    "@/home/cache",
    "@/home",
    "@/sibling/file.txt",
    "@/sibling/dir",
    "@/sibling/new-via-link",
    "@/project/GITDIR/config",
    "@/project/GITDIR/hooks",
    "@/project/GITDIR",
    "@/project/.env",
    "@/project/a.txt",
    "@/project/d",
    "@/project/.garuda",
    "@/project/new-via-link",
    "a.txt",
    "../sibling/file.txt",
    "/etc/hostname",
];

/// Paths operations act on (`GITDIR` is the git folder of the case's shape).
const OP_PATHS: &[&str] = &[
    "home/notes.txt",
    "home/new",
    "home/cache/x",
    "home/cache/new",
    "home/.ssh/id_ed25519",
    "home/.ssh/new",
    "home/.garuda/key",
    "project/README",
    "project/a.txt",
    "project/d",
    "project/d/b.txt",
    "project/new",
    "project/d/new",
    "project/.env",
    "project/.git",
    "project/GITDIR/config",
    "project/GITDIR/HEAD",
    "project/GITDIR/hooks",
    "project/GITDIR/hooks/pre-commit",
    "project/GITDIR/objects/o1",
    "project/GITDIR/objects/new",
    "project/GITDIR/new",
    "project/.garuda",
    "project/.garuda/notes",
    "project/.garuda/new",
    "project/l1",
    "project/l1/x",
    "project/d/l2",
    "project/l3",
    "project/l3/new",
    "sibling/file.txt",
    "sibling/dir",
    "sibling/new",
    "sibling/l4",
];

fn op_path() -> impl Strategy<Value = String> {
    proptest::sample::select(OP_PATHS).prop_map(str::to_string)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => op_path().prop_map(Op::ReadAll),
        3 => op_path().prop_map(Op::Write),
        1 => op_path().prop_map(Op::Append),
        1 => op_path().prop_map(Op::Chmod),
        1 => op_path().prop_map(Op::Utimes),
        1 => op_path().prop_map(Op::Setxattr),
        2 => op_path().prop_map(Op::Unlink),
        1 => op_path().prop_map(Op::Rmdir),
        1 => op_path().prop_map(Op::Mkdir),
        3 => (op_path(), op_path()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (op_path(), op_path()).prop_map(|(a, b)| Op::Hardlink(a, b)),
        2 => (proptest::sample::select(LINK_TARGETS), op_path())
            .prop_map(|(t, at)| Op::Symlink(t.to_string(), at)),
        1 => Just(Op::TcpConnectHost),
        1 => Just(Op::UdpSendHost),
        1 => Just(Op::InheritedFds),
    ]
}

fn yes() -> bool {
    true
}

/// A generated case: the git shape, up to three links, one to nine operations.
pub fn case() -> impl Strategy<Value = Case> {
    // A linked `.git` is refused by the policy in direct mode (nothing runs): rarer.
    let git = prop_oneof![
        4 => Just(GitShape::Folder),
        2 => Just(GitShape::GitdirFile),
        1 => Just(GitShape::Link),
        1 => Just(GitShape::HooksLink),
        1 => Just(GitShape::ConfigLink)
    ];
    let link = (
        proptest::sample::select(LINK_PLACES),
        proptest::sample::select(LINK_TARGETS),
    )
        .prop_map(|(at, target)| Link {
            at: at.to_string(),
            target: target.to_string(),
        });
    let second = prop_oneof![
        3 => Just(Vec::new()),
        1 => proptest::collection::vec(op(), 1..4),
    ];
    (
        git,
        proptest::bool::weighted(0.7),
        proptest::bool::weighted(0.25),
        proptest::collection::vec(link, 0..4),
        proptest::collection::vec(op(), 1..10),
        second,
        (proptest::bool::weighted(0.1), proptest::bool::weighted(0.6)),
        (
            proptest::bool::weighted(0.3),
            proptest::bool::weighted(0.3),
            proptest::bool::weighted(0.2),
        ),
    )
        .prop_map(
            |(git, garuda, staged, mut links, mut ops, second, races, user)| {
                // One link per place.
                let mut seen = BTreeSet::new();
                links.retain(|l| seen.insert(l.at.clone()));
                // The race matters most against a staged change's apply, and only when the change
                // has something in the raced folder.
                let race = if staged { races.1 } else { races.0 };
                if race {
                    ops.push(Op::Write("project/d/raced".into()));
                }
                Case {
                    git,
                    garuda,
                    staged,
                    second,
                    race,
                    user: UserPolicy {
                        writable_cache: user.0,
                        unreadable_file: user.1,
                        strict: user.2,
                    },
                    links,
                    ops,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------------
// Making the tree and the policy.

impl GitShape {
    /// The git folder's path relative to the case's folder.
    fn gitdir(self) -> &'static str {
        match self {
            GitShape::Folder | GitShape::HooksLink | GitShape::ConfigLink => "project/.git",
            GitShape::GitdirFile | GitShape::Link => "sibling/gitdir",
        }
    }
}

/// `rel` with `GITDIR` put in, relative to `base`.
fn at(base: &Path, git: GitShape, rel: &str) -> PathBuf {
    let rel = rel.replace("project/GITDIR", git.gitdir());
    base.join(rel)
}

fn put(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Makes the case's tree at `base` (which must not exist).
fn make_tree(base: &Path, case: &Case) {
    for s in SECRETS {
        put(&base.join(s), &format!("SECRET {s}\n"));
    }
    for f in FILES {
        if f.starts_with("project/.garuda/") && !case.garuda {
            continue;
        }
        put(&base.join(f), &format!("file {f}\n"));
    }
    let gitdir = base.join(case.git.gitdir());
    let config = "[core]\n\trepositoryformatversion = 0\n";
    let hook = "#!/bin/sh\nexit 0\n";
    // `config` and `hooks` are in the git folder, or, in their own shape, links there to the
    // folder beside the project: (shape, entry, its name beside, a file inside it, content).
    for (shape, entry, beside, inner, content) in [
        (GitShape::ConfigLink, "config", "gitconfig", None, config),
        (
            GitShape::HooksLink,
            "hooks",
            "hooks",
            Some("pre-commit"),
            hook,
        ),
    ] {
        let file = |at: PathBuf| match inner {
            Some(f) => at.join(f),
            None => at,
        };
        if case.git == shape {
            put(&file(base.join("sibling").join(beside)), content);
            fs::create_dir_all(&gitdir).unwrap();
            std::os::unix::fs::symlink(format!("../../sibling/{beside}"), gitdir.join(entry))
                .unwrap();
        } else {
            put(&file(gitdir.join(entry)), content);
        }
    }
    put(&gitdir.join("HEAD"), "ref: refs/heads/main\n");
    put(&gitdir.join("objects/o1"), "object\n");
    fs::create_dir_all(gitdir.join("refs/heads")).unwrap();
    match case.git {
        GitShape::Folder | GitShape::HooksLink | GitShape::ConfigLink => {}
        GitShape::GitdirFile => put(&base.join("project/.git"), "gitdir: ../sibling/gitdir\n"),
        GitShape::Link => {
            std::os::unix::fs::symlink("../sibling/gitdir", base.join("project/.git")).unwrap()
        }
    }
    if case.race {
        std::os::unix::fs::symlink(base.join("sibling/dir"), base.join("project/swap-link"))
            .unwrap();
    }
    for link in &case.links {
        let target = link_target(base, case.git, &link.target);
        let place = base.join(&link.at);
        fs::create_dir_all(place.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, place).unwrap();
    }
}

fn link_target(base: &Path, git: GitShape, target: &str) -> PathBuf {
    match target.strip_prefix("@/") {
        Some(rel) => at(base, git, rel),
        None => PathBuf::from(target),
    }
}

/// The policy of the case's project as `garuda sandbox` builds it: no policy files, a home in
/// the case's folder. `Err`: the policy refuses the tree (a link where git metadata must be a
/// file or folder, say): nothing runs, which is the safe answer.
fn build_policy(
    base: &Path,
    staged: bool,
    user: UserPolicy,
) -> Result<ExecPolicy, garuda_policy::PolicyError> {
    let home = base.join("home");
    let vars: Vec<(OsString, OsString)> = vec![
        ("HOME".into(), home.clone().into()),
        ("GARUDA_HOME".into(), home.join(".garuda").into()),
        ("PATH".into(), SANDBOX_PATH.into()),
    ];
    let host = HostEnv::from_vars(vars).unwrap();
    let project = base.join("project");
    let user_file = base.join("user-policy.json");
    if user != UserPolicy::default() {
        let mut sandbox = serde_json::Map::new();
        if user.writable_cache {
            sandbox.insert(
                "writable".into(),
                serde_json::json!([base.join("home/cache")]),
            );
        }
        if user.unreadable_file {
            sandbox.insert(
                "unreadable".into(),
                serde_json::json!([base.join("project/d/b.txt")]),
            );
        }
        let mut file = serde_json::Map::new();
        if !sandbox.is_empty() {
            file.insert("sandbox".into(), sandbox.into());
        }
        if user.strict {
            file.insert("profile".into(), "strict".into());
        }
        fs::write(&user_file, serde_json::Value::from(file).to_string()).unwrap();
    }
    let settings = load_settings_from(
        &base.join("no-managed.json"),
        &user_file,
        &project.join(".garuda/settings.json"),
        &host,
        &project,
    )
    .unwrap();
    let mut settings = settings;
    if staged {
        settings.command_mode = garuda_policy::CommandMode::Staged;
    }
    let mut policy = build_exec_policy(&project, &settings, &host)?;
    policy.limits.max_processes = MAX_PROCESSES;
    policy.limits.timeout = Some(RUN_TIMEOUT);
    Ok(policy)
}

// ---------------------------------------------------------------------------------------------
// Snapshots.

/// What an entry is, as far as a change to it matters.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        mode: u32,
        content: Vec<u8>,
        ctime: (i64, i64),
    },
    Dir {
        mode: u32,
    },
    Link(PathBuf),
    Other,
}

/// Every entry under `root`, links not followed.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // A folder the command made `chmod 600` cannot be listed by an ordinary user: opened
        // for the look and given its mode back (the tree is the harness's own), so that its
        // entries do not read as deleted.
        let restore = fs::symlink_metadata(&dir)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
            .filter(|mode| mode & 0o500 != 0o500);
        if let Some(mode) = restore {
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(mode | 0o700));
        }
        let listed: Vec<fs::DirEntry> = fs::read_dir(&dir)
            .map(|entries| entries.flatten().collect())
            .unwrap_or_default();
        // Read each file before the mode goes back.
        let mut found = Vec::new();
        for e in listed {
            let path = e.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            found.push((path, meta));
        }
        let mut files = Vec::new();
        for (path, meta) in found {
            let ft = meta.file_type();
            let content = if ft.is_file() {
                Some(fs::read(&path).unwrap_or_default())
            } else if ft.is_symlink() {
                Some(
                    fs::read_link(&path)
                        .unwrap_or_default()
                        .into_os_string()
                        .into_vec(),
                )
            } else {
                None
            };
            files.push((path, meta, content));
        }
        if let Some(mode) = restore {
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(mode));
        }
        for (path, meta, content) in files {
            let ft = meta.file_type();
            let entry = if ft.is_symlink() {
                Entry::Link(PathBuf::from(OsString::from_vec(
                    content.unwrap_or_default(),
                )))
            } else if ft.is_dir() {
                stack.push(path.clone());
                Entry::Dir {
                    mode: meta.permissions().mode(),
                }
            } else if ft.is_file() {
                Entry::File {
                    mode: meta.permissions().mode(),
                    content: content.unwrap_or_default(),
                    ctime: (meta.ctime(), meta.ctime_nsec()),
                }
            } else {
                Entry::Other
            };
            out.insert(path, entry);
        }
    }
    out
}

/// `ok:` and the FNV-1a 64 hash of `bytes`, as the probe's `readall` answers for them.
pub fn fnv(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    // The probe's `readall` hashes the first 1 MiB.
    for b in &bytes[..bytes.len().min(1 << 20)] {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("ok:{hash:016x}")
}

// ---------------------------------------------------------------------------------------------
// Running.

/// What one executor did with a case.
#[derive(Debug)]
pub struct Run {
    /// One result line per operation.
    pub results: Vec<String>,
    /// What the checks found (empty: the executor kept to the model).
    pub findings: Vec<String>,
    /// The paths (relative to the case's folder) that changed on the host: the direct
    /// command's writes, or a staged command's applied change.
    pub changed: Vec<String>,
    /// Folder-for-link swaps the second sandbox made while the first ran and its change was
    /// applied (`race`).
    pub swaps: u64,
}

/// The harness's sockets on the host's loopback, which no sandboxed command may reach.
struct HostSockets {
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
}

impl HostSockets {
    fn open() -> HostSockets {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        HostSockets { tcp, udp }
    }

    fn addresses(&self) -> (String, String) {
        (
            self.tcp.local_addr().unwrap().to_string(),
            self.udp.local_addr().unwrap().to_string(),
        )
    }

    /// What reached them since they were opened.
    fn reached(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Ok((_, from)) = self.tcp.accept() {
            found.push(format!(
                "a TCP connection from {from} reached the host's loopback"
            ));
        }
        let mut buf = [0u8; 64];
        if let Ok((_, from)) = self.udp.recv_from(&mut buf) {
            found.push(format!(
                "a datagram from {from} reached the host's loopback"
            ));
        }
        found
    }
}

fn probe_args(
    probe: &Path,
    base: &Path,
    git: GitShape,
    ops: &[Op],
    net: &(String, String),
) -> Vec<OsString> {
    let p = |rel: &str| at(base, git, rel).into_os_string();
    let mut argv: Vec<OsString> = vec![probe.into(), "batch".into()];
    for op in ops {
        let (sub, args): (&str, Vec<OsString>) = match op {
            Op::ReadAll(a) => ("readall", vec![p(a)]),
            Op::Write(a) => ("write", vec![p(a)]),
            Op::Append(a) => ("append", vec![p(a)]),
            Op::Chmod(a) => ("chmod", vec![p(a)]),
            Op::Utimes(a) => ("utimes", vec![p(a)]),
            Op::Setxattr(a) => ("setxattr", vec![p(a)]),
            Op::Unlink(a) => ("unlink", vec![p(a)]),
            Op::Rmdir(a) => ("rmdir", vec![p(a)]),
            Op::Mkdir(a) => ("mkdir", vec![p(a)]),
            Op::Rename(a, b) => ("rename", vec![p(a), p(b)]),
            Op::Hardlink(a, b) => ("hardlink", vec![p(a), p(b)]),
            Op::Symlink(t, a) => (
                "symlink",
                vec![link_target(base, git, t).into_os_string(), p(a)],
            ),
            Op::TcpConnectHost => ("tcp-connect", vec![net.0.clone().into()]),
            Op::UdpSendHost => ("udp-send", vec![net.1.clone().into()]),
            Op::InheritedFds => ("fds", vec![]),
        };
        argv.push(sub.into());
        argv.extend(args);
        argv.push(";".into());
    }
    argv
}

/// Runs `case` on `kind` in a fresh tree at `base` (which must not be under `/tmp`: every
/// sandbox has its own), with the probe program `probe`, and checks it.
pub fn run_case(probe: &Path, kind: ExecutorKind, base: &Path, case: &Case) -> Run {
    // Every sandbox has a `/tmp` of its own: a tree there would be out of the command's reach
    // for the wrong reason, and the checks would pass without testing anything.
    assert!(
        !base.starts_with("/tmp"),
        "the case's folder {} must not be under /tmp",
        base.display()
    );
    remove_tree(base);
    fs::create_dir_all(base).unwrap();
    let base = fs::canonicalize(base).unwrap();
    make_tree(&base, case);
    let policy = match build_policy(&base, case.staged, case.user) {
        Ok(policy) => policy,
        Err(refusal) => {
            remove_tree(&base);
            return Run {
                results: vec![format!("refused: {refusal}"); case.ops.len()],
                findings: Vec::new(),
                changed: Vec::new(),
                swaps: 0,
            };
        }
    };
    // Every file the policy calls unreadable (the skeleton's secrets, Garuda's home, a file a
    // policy file names), by its content.
    let secrets: BTreeMap<String, PathBuf> = policy
        .unreadable_paths
        .iter()
        .filter(|p| p.starts_with(&base))
        .flat_map(|p| {
            snapshot(p)
                .into_keys()
                .chain(std::iter::once(p.clone()))
                .collect::<Vec<_>>()
        })
        .filter_map(|path| {
            let bytes = fs::read(&path).ok()?;
            // An empty file holds nothing to leak (and reads like the empty file an executor
            // may put in a secret's place).
            (!bytes.is_empty()).then(|| (fnv(&bytes), path))
        })
        .collect();
    let sockets = HostSockets::open();
    let net = sockets.addresses();
    // The second sandbox: direct, in the same project, at the same time (none when the
    // direct policy refuses the tree).
    let stop = base.join("stop");
    let second = (!case.second.is_empty() || case.race)
        .then(|| build_policy(&base, false, case.user).ok())
        .flatten()
        .map(|direct| {
            let mut argv = probe_args(probe, &base, case.git, &case.second, &net);
            if case.race {
                argv.extend([
                    "swap-loop".into(),
                    base.join("project/d").into_os_string(),
                    base.join("project/swap-link").into_os_string(),
                    stop.clone().into_os_string(),
                ]);
            }
            (direct, argv)
        });
    let mut staging = case.staged.then(|| {
        garuda_staging::Session::create(
            &base.join("home/.garuda"),
            &base.join("project"),
            garuda_staging::BackendChoice::Auto,
            garuda_supervisor::doctor::overlay_in_userns().is_ok(),
        )
        .unwrap_or_else(|e| panic!("staging: {e}"))
    });
    let mut policy = policy;
    let mark = match &mut staging {
        Some(session) => {
            let mark = session.prepare().unwrap_or_else(|e| panic!("staging: {e}"));
            policy.staged = Some(session.view());
            Some(mark)
        }
        None => None,
    };
    let before = snapshot(&base);
    let argv = probe_args(probe, &base, case.git, &case.ops, &net);
    let mut findings = Vec::new();
    let (out, second_out) = std::thread::scope(|scope| {
        let second_run = second.as_ref().map(|(direct, argv)| {
            scope.spawn(move || {
                executor_of(kind).run(&CommandSpec::new(argv.clone()), direct, StdioMode::Capture)
            })
        });
        let out = executor_of(kind).run(&CommandSpec::new(argv), &policy, StdioMode::Capture);
        if let (Some(session), Some(mark)) = (staging.take(), mark) {
            // Without a second sandbox the project does not change at all while a staged
            // command runs (with one, the second's own writes are judged below); a writable
            // path outside the project (a cache a policy file names) is not staged.
            if second.is_none() {
                let during = snapshot(&base);
                let project = base.join("project");
                for path in changed(&base, case.staged, &before, &during)
                    .into_iter()
                    .filter(|p| p.starts_with(&project))
                {
                    findings.push(format!(
                        "{} changed while the command ran staged",
                        path.display()
                    ));
                }
            }
            apply_everything(session, &mark);
        }
        fs::write(&stop, "").unwrap();
        let second_out = second_run.map(|h| h.join());
        (out, second_out)
    });
    let after = snapshot(&base);
    // A sandbox that refuses to start (a folder swapped under its setup by the second sandbox)
    // fails closed: nothing ran, and what changed is still checked below. Any other error is
    // the harness's or the machine's.
    let (results, out) = match out {
        Ok(out) => (
            out.stdout.text().lines().map(str::to_string).collect(),
            Some(out),
        ),
        Err(e @ garuda_supervisor::executor::ExecError::Setup { .. }) => {
            (vec![format!("refused: {e}"); case.ops.len()], None)
        }
        Err(e) => panic!("{kind} could not run the probe: {e}"),
    };
    let results: Vec<String> = results;
    if let Some(out) = out.as_ref().filter(|_| results.len() != case.ops.len()) {
        let stdout = out.stdout.text();
        findings.push(format!(
            "the probe did not answer every operation ({} of {}): status {:?}, stdout {stdout:?}, stderr {:?}",
            results.len(),
            case.ops.len(),
            out.status,
            out.stderr.text()
        ));
    }
    let mut read = results.clone();
    match second_out {
        None => {}
        Some(Ok(Ok(second))) => read.extend(second.stdout.text().lines().map(str::to_string)),
        Some(Ok(Err(garuda_supervisor::executor::ExecError::Setup { .. }))) => {}
        Some(Ok(Err(e))) => findings.push(format!("the second sandbox did not run: {e}")),
        Some(Err(_)) => findings.push("the second sandbox's thread panicked".into()),
    }
    findings.extend(sockets.reached());
    let swaps = read
        .iter()
        .filter_map(|r| r.strip_prefix("swaps=").and_then(|n| n.parse::<u64>().ok()))
        .sum();
    for result in &read {
        if let Some(secret) = secrets.get(result) {
            findings.push(format!(
                "an operation read the content of the secret {}",
                secret.display()
            ));
        }
    }
    findings.extend(read.iter().filter_map(|r| inherited_descriptors(r)));
    // An operation the probe did not know (an older probe than the harness) checked nothing.
    findings.extend(
        read.iter()
            .filter(|r| r.starts_with("usage-error:"))
            .map(|r| format!("the probe did not run an operation: {r}")),
    );
    let changed_now = changed(&base, case.staged, &before, &after);
    let changed_paths: Vec<String> = changed_now
        .iter()
        .filter_map(|p| p.strip_prefix(&base).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    for path in changed_now {
        let (was, is) = (before.get(path), after.get(path));
        let approved = case.staged && approved_by_a_person(&base, path);
        let declared = case.user.writable_cache && path.starts_with(base.join("home/cache"));
        if let Some(why) = protected_by_design(&base, path).filter(|_| !approved && !declared) {
            findings.push(format!(
                "{} was changed, which Garuda never lets a command change ({why})",
                path.display()
            ));
        }
        if let Err(denial) =
            model::decide(&policy_for_model(&policy), Access::Write, path).or_else(|d| match d {
                model::Denial::Unreadable(_) if approved => Ok(()),
                d => Err(d),
            })
        {
            let what = match (was, is) {
                (None, Some(_)) => "created",
                (Some(_), None) => "deleted",
                _ => "changed",
            };
            findings.push(format!(
                "{} was {what}, which the model forbids ({denial}): {} -> {}",
                path.display(),
                brief(was),
                brief(is)
            ));
        }
    }
    remove_tree(&base);
    Run {
        results,
        findings,
        changed: changed_paths,
        swaps,
    }
}

/// The finding for an [`Op::InheritedFds`] answer that lists any descriptor: a sandboxed
/// command holds none above stdio that it did not open (the bubblewrap executor once handed
/// the command its held `O_PATH` handles on host folders, through which
/// `/proc/self/fd/N/...` reached past every mount).
pub fn inherited_descriptors(result: &str) -> Option<String> {
    let held = result.strip_prefix("fds:").filter(|h| *h != "none")?;
    Some(format!(
        "the command held descriptors it did not open: {held}"
    ))
}

/// The policy the model judges the host's changes by: the direct one (a staged view's own
/// paths are the supervisor's; what lands in the project is the apply's).
fn policy_for_model(policy: &ExecPolicy) -> ExecPolicy {
    let mut direct = policy.clone();
    direct.staged = None;
    direct
}

/// Applies a staged command's change with every guard approved (the widest yes a person can
/// give), or discards it when it cannot be applied; the staging folder goes.
fn apply_everything(mut session: garuda_staging::Session, mark: &garuda_staging::CommandMark) {
    let set = session
        .changes(mark)
        .unwrap_or_else(|e| panic!("staging: {e}"));
    if !set.is_empty() {
        let applied = set.can_apply()
            && session
                .apply_approved(&set, &garuda_staging::Guard::ALL)
                .is_ok();
        if !applied {
            let _ = session.discard(&set);
        }
    }
    let _ = session.close();
}

/// An entry in a few words, for a finding.
fn brief(entry: Option<&Entry>) -> String {
    match entry {
        None => "nothing".into(),
        Some(Entry::File {
            mode,
            content,
            ctime,
        }) => format!(
            "file mode {mode:o}, {} bytes {}, ctime {}.{:09}",
            content.len(),
            fnv(content),
            ctime.0,
            ctime.1
        ),
        Some(Entry::Dir { mode }) => format!("folder mode {mode:o}"),
        Some(Entry::Link(target)) => format!("link to {}", target.display()),
        Some(Entry::Other) => "something else".into(),
    }
}

/// The entries of `after` that are not the same in `before`, and those that went: every path
/// of the tree whose entry appeared, went or changed. In a staged case Garuda's staging
/// folders (the supervisor's own, under its home) are not the command's doing; in a direct one
/// nothing may appear there.
fn changed<'a>(
    base: &Path,
    staged: bool,
    before: &'a BTreeMap<PathBuf, Entry>,
    after: &'a BTreeMap<PathBuf, Entry>,
) -> Vec<&'a PathBuf> {
    let staging = base.join("home/.garuda/staging");
    let stop = base.join("stop");
    let paths: BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter(|p| before.get(*p) != after.get(*p))
        .filter(|p| !(staged && p.starts_with(&staging)) && **p != stop)
        .collect()
}

/// A staged change's path that a person's yes to its own question covers: Garuda's project
/// settings (`.garuda`) and sensitive files (`.env`), both inside the project.
fn approved_by_a_person(base: &Path, path: &Path) -> bool {
    let project = base.join("project");
    path.starts_with(project.join(".garuda"))
        || (path.starts_with(&project)
            && path
                .file_name()
                .is_some_and(|n| garuda_staging::is_sensitive_name(&n.to_string_lossy())))
}

/// The second oracle, independent of the policy: what the design says no command may change
/// whatever the policy builder made of the tree (so a policy that forgot to protect something
/// is caught too, which the model, reading that policy, cannot see): the home, the folder
/// beside the project, the project's `.git` entry and its git folder but for `objects`, `refs`
/// and `logs`, and `.garuda` (whether it existed or not). `None`: the design allows it.
fn protected_by_design(base: &Path, path: &Path) -> Option<&'static str> {
    let under = |rel: &str| path.starts_with(base.join(rel));
    if under("home") {
        return Some("the home");
    }
    if under("sibling") {
        return Some("outside the project");
    }
    if under("project/.garuda") {
        return Some("the project's .garuda");
    }
    if under("project/.git") {
        let hole = ["objects", "refs", "logs"]
            .iter()
            .any(|h| path.starts_with(base.join("project/.git").join(h)));
        if !hole {
            return Some("git metadata");
        }
    }
    None
}

/// Removes the case's tree, whatever modes its operations left (a `chmod 600` folder cannot
/// be entered by an ordinary user, root or not).
pub fn remove_tree(base: &Path) {
    let mut stack = vec![base.to_path_buf()];
    while let Some(dir) = stack.pop() {
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => continue,
        }
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            stack.push(e.path());
        }
    }
    match fs::remove_dir_all(base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("removing {}: {e}", base.display()),
    }
}

/// How much of the generated cases ran, per executor: (cases refused by the policy, cases
/// run, operations answered `ok`, operations refused with a permission error, other answers,
/// swaps raced, cases whose sandbox refused to start),
/// and the time spent in its cases (tree, policy, run, checks). Keyed by the run's tag and the
/// executor.
static STATS: std::sync::Mutex<BTreeMap<(String, String), Counts>> =
    std::sync::Mutex::new(BTreeMap::new());

/// One row of [`STATS`].
type Counts = ([u64; 7], Duration);

fn count(tag: &str, kind: ExecutorKind, run: &Run, took: Duration) {
    let mut stats = STATS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (row, time) = stats
        .entry((tag.to_string(), kind.to_string()))
        .or_default();
    *time += took;
    row[5] += run.swaps;
    if run
        .results
        .iter()
        .any(|r| r.starts_with("refused: sandbox setup failed"))
    {
        row[6] += 1;
        return;
    }
    if run.results.iter().any(|r| r.starts_with("refused")) {
        row[0] += 1;
        return;
    }
    row[1] += 1;
    for r in &run.results {
        let slot = if r.starts_with("ok") {
            2
        } else if is_permission_refusal(r) {
            3
        } else {
            4
        };
        row[slot] += 1;
    }
}

/// A permission refusal, as opposed to an answer about the tree (`ENOENT`, `EEXIST`…).
pub fn is_permission_refusal(result: &str) -> bool {
    matches!(result, "errno=EACCES" | "errno=EPERM" | "errno=EROFS")
}

/// Runs `case` on every sandbox executor; `Err` with everything found. `tag` names the run in
/// the counts.
pub fn check_case(
    probe: &Path,
    tag: &str,
    kinds: &[ExecutorKind],
    base: &Path,
    case: &Case,
) -> Result<(), String> {
    let runs: Vec<(ExecutorKind, Run)> = kinds
        .iter()
        .map(|&k| {
            let started = std::time::Instant::now();
            let run = run_case(probe, k, base, case);
            count(tag, k, &run, started.elapsed());
            (k, run)
        })
        .collect();
    let mut problems = Vec::new();
    for (kind, run) in &runs {
        for f in &run.findings {
            problems.push(format!("{kind}: {f}"));
        }
    }
    // With a second sandbox the operations interleave differently on each run: their answers
    // are not comparable, only their effects (checked above).
    let concurrent = !case.second.is_empty() || case.race;
    if let ([(ka, a), (kb, b)], false) = (runs.as_slice(), concurrent) {
        for (i, op) in case.ops.iter().enumerate() {
            let (ra, rb) = (a.results.get(i), b.results.get(i));
            let (Some(ra), Some(rb)) = (ra, rb) else {
                break;
            };
            let split = (ra.starts_with("ok") && is_permission_refusal(rb))
                || (rb.starts_with("ok") && is_permission_refusal(ra));
            if split {
                problems.push(format!(
                    "{ka} and {kb} disagree on {op:?}: {ra} against {rb}"
                ));
                // What follows ran on different trees.
                break;
            }
            if ra != rb {
                break;
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The counts of the cases checked under `tag` since the process started, one line per
/// executor, with its cases per second (the time of its own runs: tree, policy, sandbox,
/// checks; shrinking included).
pub fn counts(tag: &str) -> Vec<String> {
    STATS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|((t, _), _)| t == tag)
        .map(|((_, kind), (row, time))| {
            format!(
                "executor_diff {tag} {kind}: {} case(s) refused by the policy, {} by the sandbox's setup (fail closed), {} run; operations: {} ok, {} refused (EACCES/EPERM/EROFS), {} other answers; {} folder-for-link swaps raced; {:.1} cases/s",
                row[0],
                row[6],
                row[1],
                row[2],
                row[3],
                row[4],
                row[5],
                (row[0] + row[1] + row[6]) as f64 / time.as_secs_f64().max(1e-9)
            )
        })
        .collect()
}
