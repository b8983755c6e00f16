//! The supervisor's side of the agent: start `garuda agent` as the first sandboxed process.
//!
//! [`spawn_agent`] reuses the native executor's fork ([`sys::spawn_native`]: user, mount, PID,
//! network, IPC, UTS and cgroup namespaces; capabilities dropped; no new privileges; the
//! executors' seccomp program; PID 1 as the reaper) with a view of its own instead of the
//! project's:
//!
//! | path in the view | what | why |
//! |---|---|---|
//! | `/` | an empty tmpfs, read-only once built | nothing of the host's tree stays reachable (`pivot_root`, old root detached) |
//! | `/lib*`, `/usr/lib*` | the host's library folders, read-only binds (or the same symlinks where the host has links, `/lib -> usr/lib`) | the dynamic loader and the C library of the binary; no home, no project, no `/etc`, no `/tmp` |
//! | `/proc` | the agent's own PID namespace's procfs, read-only | the self-check reads `/proc/self/status`; the binary is executed through `/proc/self/fd/N` |
//! | `/dev/null` | one device, bound read-only | PID 1 puts it on its stdio before it becomes the reaper |
//! | `/empty` | an empty folder | the agent's working directory |
//!
//! The binary itself is never in the view: it is executed from a descriptor the supervisor
//! opened ([`sys::open_own_executable`]); PID 1 becomes the reaper by executing another
//! ([`sys::init_program`], the start-up program). Before `execve` the process
//! is also under a first Landlock domain that allows only reading and executing beneath the
//! view's root and the binary ("pre-exec"): no write anywhere, even during the dynamic
//! loader's start. The agent then confines itself fully ([`super::confine`]).
//!
//! Descriptors: the agent's end of a `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)` at
//! [`CHANNEL_FD`] (3); stdin and stdout `/dev/null`; stderr a pipe whose read end is returned
//! ([`AgentProcess::take_stderr`]) for diagnostics (the self-check's refusal). Every other
//! descriptor is closed at `execve`. The environment is empty: the model's key arrives later in
//! the `start` frame.
//!
//! Network: the agent's network namespace has loopback only. With [`AgentProxy`], the setup
//! makes a listener on `127.0.0.1:port` in that namespace and hands it to the supervisor,
//! which forwards each connection to the proxy's unix socket ([`crate::netbridge`], exactly as
//! for a sandboxed command); the agent is told the port (`--proxy-port`) and its Landlock
//! domain allows a TCP connection to that port only.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::executor::landlock::{handled_fs, stage_name, MIN_PID_MAX};
use crate::netbridge::{self, Bridge, BridgeError};
use crate::sys::{self, MountStep, NativePlan, Stage};

/// The descriptor at which the agent finds its end of the channel.
pub use crate::sys::CHANNEL_FD;

/// Where the view is built before `pivot_root` makes it the root: a fresh tmpfs mounted over
/// `/tmp` in the agent's own mount namespace (the host's `/tmp` is untouched).
const STAGING_ROOT: &str = "/tmp";

/// The agent's working directory in its view: an empty, read-only folder.
pub const AGENT_CWD: &str = "/empty";

/// The host's library folders the view may carry (those that exist; a link is recreated as
/// the same link). The dynamic loader finds the C library there without `/etc/ld.so.cache`.
pub const LIBRARY_DIRS: [&str; 8] = [
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libx32",
];

// Landlock filesystem rights (include/uapi/linux/landlock.h) of the pre-exec domain.
const LL_EXECUTE: u64 = 1 << 0;
const LL_READ_FILE: u64 = 1 << 2;
const LL_READ_DIR: u64 = 1 << 3;

const RO_FLAGS: libc::c_ulong = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;

/// The supervisor's allowlist proxy, as the agent reaches it.
#[derive(Debug, Clone)]
pub struct AgentProxy {
    /// The proxy's unix socket (its listener for the agent, [`crate::proxy::Proxy::listen_unix`],
    /// whose allowlist holds exactly the model's host).
    pub socket: PathBuf,
    /// The port of the bridge's listener on `127.0.0.1` inside the agent's network namespace.
    pub port: u16,
}

/// How to start the agent.
#[derive(Debug, Default)]
pub struct AgentSpawn {
    /// The `garuda` binary to execute as `garuda agent`; `None`: this process's own
    /// executable (the supervisor). Tests pass the built `garuda`.
    pub exe: Option<PathBuf>,
    /// Arguments after `agent` (for example `--probe …`).
    pub args: Vec<OsString>,
    /// The proxy the agent's model traffic goes through; `None`: no network at all.
    pub proxy: Option<AgentProxy>,
}

/// Why the agent could not be started.
#[derive(Debug, thiserror::Error)]
pub enum AgentSpawnError {
    /// The kernel cannot confine the agent here (the reason says which layer and the fix).
    #[error("the agent cannot be confined on this machine: {0}")]
    Unavailable(String),
    /// The executable could not be opened.
    #[error("cannot open the agent's executable {}: {error}", path.display())]
    Exe {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: io::Error,
    },
    /// A step of the preparation failed in the supervisor.
    #[error("preparing the agent's sandbox: {what}: {error}")]
    Setup {
        /// The step.
        what: String,
        /// The OS error.
        error: io::Error,
    },
    /// The proxy bridge could not be set up (the agent was killed).
    #[error(transparent)]
    Bridge(#[from] BridgeError),
}

/// How the agent's sandbox ended.
#[derive(Debug)]
pub enum AgentExit {
    /// The agent exited with this code (see [`super::CANNOT_CONFINE`] and
    /// [`super::SELF_CHECK_FAILED`] for its refusals).
    Code(i32),
    /// A signal ended the agent.
    Signal(i32),
    /// The sandbox's setup failed before the agent ran.
    SetupFailed {
        /// The step that failed.
        stage: String,
        /// Its error.
        error: io::Error,
    },
}

/// A running agent. Dropping it kills and reaps the whole sandbox.
#[derive(Debug)]
pub struct AgentProcess {
    pid: libc::pid_t,
    channel: Option<UnixStream>,
    stderr: Option<File>,
    bridge: Option<Bridge>,
    reports: OwnedFd,
    mount_names: Vec<String>,
    reaped: bool,
}

impl AgentProcess {
    /// The pid of the sandbox's outer process (killing it kills everything in the sandbox).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// The supervisor's end of the channel (`None` once taken).
    pub fn take_channel(&mut self) -> Option<UnixStream> {
        self.channel.take()
    }

    /// The read end of the agent's stderr (`None` once taken). Read it until end of file,
    /// bounded and escaped before it is shown: the agent writes there only why it refused to
    /// run, but it is not trusted.
    pub fn take_stderr(&mut self) -> Option<File> {
        self.stderr.take()
    }

    /// Kill the sandbox (the agent and its PID 1); [`AgentProcess::wait`] still reaps it.
    pub fn kill(&self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        sys::kill(self.pid, libc::SIGKILL)
    }

    /// Wait until the sandbox has ended, stop the proxy bridge, and say how it ended.
    pub fn wait(mut self) -> io::Result<AgentExit> {
        self.wait_inner()
    }

    fn wait_inner(&mut self) -> io::Result<AgentExit> {
        let raw = sys::reap_child(self.pid);
        self.reaped = true;
        drop(self.bridge.take());
        let raw = raw?;
        let reports = sys::decode_reports(&sys::read_to_end(&self.reports).unwrap_or_default());
        if let Some(r) = reports.iter().find(|r| r.stage == Stage::Signaled as u32) {
            return Ok(AgentExit::Signal(r.value));
        }
        if let Some(r) = reports.first() {
            return Ok(AgentExit::SetupFailed {
                stage: stage_name(r.stage, &self.mount_names),
                error: io::Error::from_raw_os_error(r.value),
            });
        }
        Ok(match raw {
            sys::RawExit::Code(c) => AgentExit::Code(c),
            sys::RawExit::Signal(s) => AgentExit::Signal(s),
        })
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = sys::kill(self.pid, libc::SIGKILL);
            let _ = self.wait_inner();
        }
    }
}

/// `Ok(description)` when the agent can be confined here, else `Err(reason and fix)`: the
/// native executor's requirements (user namespaces, Landlock ABI 3+, `mount_setattr`, a
/// per-namespace `pid_max`) and seccomp.
pub fn availability() -> Result<String, String> {
    let native = crate::executor::landlock::availability()?;
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    if !status.lines().any(|l| l.starts_with("Seccomp:")) {
        return Err("the kernel has no seccomp (CONFIG_SECCOMP_FILTER)".into());
    }
    Ok(format!("{native}, seccomp"))
}

fn cstring(bytes: &[u8]) -> Result<CString, AgentSpawnError> {
    CString::new(bytes).map_err(|_| AgentSpawnError::Setup {
        what: "a path or argument contains a NUL byte".into(),
        error: io::Error::from(io::ErrorKind::InvalidInput),
    })
}

fn staged(path: &str) -> Result<CString, AgentSpawnError> {
    cstring(format!("{STAGING_ROOT}{path}").as_bytes())
}

fn setup(what: &str) -> impl FnOnce(io::Error) -> AgentSpawnError + '_ {
    move |error| AgentSpawnError::Setup {
        what: what.to_string(),
        error,
    }
}

/// The mount steps outer runs (the view, built under [`STAGING_ROOT`]) and the ones PID 1
/// runs once its `/proc` exists (bind it in, `pivot_root`, everything read-only).
fn view_steps() -> Result<(Vec<MountStep>, Vec<MountStep>), AgentSpawnError> {
    let mut steps = vec![
        MountStep::MakeRootPrivate,
        MountStep::Tmpfs {
            target: cstring(STAGING_ROOT.as_bytes())?,
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            options: c"mode=0755,size=64k".into(),
        },
    ];
    for (dir, mode) in [("/proc", 0o555), ("/dev", 0o755), (AGENT_CWD, 0o555)] {
        steps.push(MountStep::Mkdir {
            path: staged(dir)?,
            mode,
        });
    }
    steps.push(MountStep::CreateFile {
        path: staged("/dev/null")?,
        mode: 0o666,
    });
    steps.push(MountStep::Bind {
        source: c"/dev/null".into(),
        target: staged("/dev/null")?,
        remount_flags: libc::MS_NOSUID | libc::MS_NOEXEC,
    });
    let mut made_usr = false;
    for dir in LIBRARY_DIRS {
        let Ok(meta) = std::fs::symlink_metadata(dir) else {
            continue;
        };
        if dir.starts_with("/usr/") && !made_usr {
            steps.push(MountStep::Mkdir {
                path: staged("/usr")?,
                mode: 0o755,
            });
            made_usr = true;
        }
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(dir).map_err(setup("read a library link"))?;
            steps.push(MountStep::Symlink {
                target: cstring(target.as_os_str().as_bytes())?,
                link: staged(dir)?,
            });
        } else if meta.is_dir() {
            steps.push(MountStep::Mkdir {
                path: staged(dir)?,
                mode: 0o755,
            });
            steps.push(MountStep::Bind {
                source: cstring(dir.as_bytes())?,
                target: staged(dir)?,
                remount_flags: RO_FLAGS,
            });
        }
    }
    let pid1 = vec![
        MountStep::Bind {
            source: c"/proc".into(),
            target: staged("/proc")?,
            remount_flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        },
        MountStep::PivotRoot {
            new_root: cstring(STAGING_ROOT.as_bytes())?,
        },
        MountStep::RecursiveReadOnly,
    ];
    Ok((steps, pid1))
}

fn open_exe(exe: Option<&Path>) -> Result<OwnedFd, AgentSpawnError> {
    match exe {
        None => sys::open_own_executable().map_err(|error| AgentSpawnError::Exe {
            path: "/proc/self/exe".into(),
            error,
        }),
        Some(path) => {
            let err = |error| AgentSpawnError::Exe {
                path: path.to_path_buf(),
                error,
            };
            let real = path.canonicalize().map_err(err)?;
            sys::open_path(&cstring(real.as_os_str().as_bytes())?).map_err(err)
        }
    }
}

/// The pre-exec Landlock ruleset: read and execute the binary; the view's rule is added
/// inside the sandbox ([`NativePlan::late_rules`]), where the view's root exists.
fn pre_exec_ruleset(abi: u32, exe: &OwnedFd) -> Result<OwnedFd, AgentSpawnError> {
    use landlock::{
        AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
        RulesetCreatedAttr,
    };
    // As the executor's: every handled right is a hard requirement (a right the kernel lacks
    // is an error, not a smaller ruleset).
    let ll = |what: &'static str| {
        move |e: landlock::RulesetError| setup(what)(io::Error::other(e.to_string()))
    };
    let handled = BitFlags::<AccessFs>::from_bits(handled_fs(abi))
        .map_err(|_| setup("landlock rights")(io::Error::other("an unknown right")))?;
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(ll("landlock ruleset"))?
        .create()
        .map_err(ll("landlock ruleset"))?
        .add_rule(PathBeneath::new(
            exe,
            AccessFs::ReadFile | AccessFs::Execute,
        ))
        .map_err(ll("landlock rule for the executable"))?;
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| setup("landlock ruleset")(io::Error::other("no descriptor")))
}

fn argv_for(spec: &AgentSpawn) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["garuda".into(), "agent".into()];
    if let Some(proxy) = &spec.proxy {
        argv.push("--proxy-port".into());
        argv.push(proxy.port.to_string().into());
    }
    argv.extend(spec.args.iter().cloned());
    argv
}

/// Start `garuda agent` confined (see the module documentation). The returned process holds
/// the supervisor's end of the channel; the agent's first frame will be `hello`, sent only
/// after it has confined and checked itself.
pub fn spawn_agent(spec: AgentSpawn) -> Result<AgentProcess, AgentSpawnError> {
    availability().map_err(AgentSpawnError::Unavailable)?;
    let abi = sys::landlock_abi().map_err(|e| AgentSpawnError::Unavailable(e.to_string()))?;
    if let Some(proxy) = &spec.proxy {
        netbridge::check(&proxy.socket, proxy.port)?;
    }
    // Executed as /proc/self/fd/N after the channel has taken descriptor 3: N must not be 3.
    let exe = sys::dup_at_least(&open_exe(spec.exe.as_deref())?, CHANNEL_FD + 1)
        .map_err(setup("move the executable's handle"))?;
    let ruleset = pre_exec_ruleset(abi, &exe)?;
    let seccomp = crate::executor::seccomp::program().map_err(|e| AgentSpawnError::Setup {
        what: "seccomp program".into(),
        error: io::Error::other(e.to_string()),
    })?;
    let (ours, theirs) = UnixStream::pair().map_err(setup("socketpair"))?;
    let null = sys::open_read(c"/dev/null").map_err(setup("open /dev/null"))?;
    let (stderr_read, stderr_write) = sys::pipe().map_err(setup("stderr pipe"))?;
    let (report_read, report_write) = sys::pipe().map_err(setup("report pipe"))?;
    let handoff = spec
        .proxy
        .as_ref()
        .map(|p| netbridge::handoff(&p.socket, p.port))
        .transpose()?;
    let bridge_plan = handoff
        .as_ref()
        .zip(spec.proxy.as_ref())
        .map(|((_, channel), p)| sys::BridgeHandoff {
            port: p.port,
            channel: channel.as_raw_fd(),
        });
    let (mounts, pid1_mounts) = view_steps()?;
    let mount_names = mounts.iter().map(|m| format!("{m:?}")).collect();
    let argv_storage: Vec<CString> = argv_for(&spec)
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*const libc::c_char> = argv_storage.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let plan = NativePlan {
        // Executed through the descriptor: the binary needs no path in the view.
        program: cstring(format!("/proc/self/fd/{}", exe.as_raw_fd()).as_bytes())?,
        argv,
        argv_storage,
        envp: vec![std::ptr::null()],
        envp_storage: Vec::new(),
        cwd: cstring(AGENT_CWD.as_bytes())?,
        uid_map: sys::id_map(sys::current_uid()),
        gid_map: sys::id_map(sys::current_gid()),
        mounts,
        pid_max: MIN_PID_MAX.to_string().into_bytes(),
        landlock_ruleset: ruleset.as_raw_fd(),
        late_rules: vec![(
            cstring(STAGING_ROOT.as_bytes())?,
            LL_READ_FILE | LL_READ_DIR | LL_EXECUTE,
        )],
        seccomp,
        stdio: [null.as_raw_fd(), null.as_raw_fd(), stderr_write.as_raw_fd()],
        cap_last_cap: super::cap_last_cap(),
        parent_pid: sys::current_pid(),
        report_fd: report_write.as_raw_fd(),
        bridge: bridge_plan,
        // The agent looks nothing up: its one path out is the proxy, by address.
        dns: None,
        reaper_exe: sys::init_program()
            .map_err(setup("the sandbox start-up program"))?
            .as_raw_fd(),
        pid1_mounts,
        pass_fd: Some(theirs.as_raw_fd()),
        release: None,
        namespaces: None,
        // Started once per chat: nothing to gain from moving it or from an early end.
        affinity: None,
        report_end: false,
    };
    let pid = sys::spawn_native(&plan).map_err(setup("fork"))?;
    // The sandbox has its copies.
    drop((theirs, null, stderr_write, report_write, ruleset, exe));
    let mut agent = AgentProcess {
        pid,
        channel: Some(ours),
        stderr: Some(File::from(stderr_read)),
        bridge: None,
        reports: report_read,
        mount_names,
        reaped: false,
    };
    if let Some((receiver, theirs)) = handoff {
        drop(theirs);
        // On failure, dropping `agent` kills and reaps the sandbox (outer gives up anyway
        // when the channel closes without the go-ahead).
        agent.bridge = Some(receiver.receive()?);
    }
    Ok(agent)
}

/// Parse `--proxy-port N` as the spawner writes it (used by `garuda agent`).
pub(crate) fn proxy_port_arg(value: &OsStr) -> Option<u16> {
    value.to_str()?.parse().ok().filter(|p| *p != 0)
}
