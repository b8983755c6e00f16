//! The one policy a sandboxed command runs under.
//!
//! Every executor receives the same [`ExecPolicy`]; what differs between executors is only how
//! they enforce it. The struct is exhaustive on purpose: a new axis of confinement is a new
//! field that every executor must handle (and the contract suite must test), never an option
//! that one backend quietly ignores.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a command may use the network. The safest variant is the default.
///
/// # Wiring the proxy (supervisor side)
///
/// The supervisor starts its allowlist proxy for a command on a unix socket of its own (mode
/// 0600, speaking HTTP absolute-form and `CONNECT`) and sets
/// `policy.network = NetworkMode::Proxy { socket, port }`. The executor does the rest: the
/// command still gets a network namespace with only loopback, a listener on `127.0.0.1:port`
/// *inside* that namespace forwards every TCP connection to `socket`, and the command's
/// environment gets [`NetworkMode::proxy_env`] (replacing any proxy variables of
/// `ExecPolicy::env`). `garuda_supervisor::netbridge` has the checks and the forwarder, and
/// `docs/executors.md` ("Network through the proxy") the details per executor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// A network namespace of its own with only a loopback interface: no route anywhere,
    /// including the host's loopback services.
    #[default]
    Isolated,
    /// [`NetworkMode::Isolated`], plus HTTP and HTTPS through the supervisor's proxy: a
    /// listener on `127.0.0.1:port` in the command's own network namespace forwards each
    /// connection to the proxy's unix socket, and the proxy variables of
    /// [`NetworkMode::proxy_env`] point there. A command that ignores them, or opens a raw
    /// socket, still has no route anywhere.
    Proxy {
        /// The proxy's unix socket on the host: an absolute path (at most 107 bytes, the size
        /// of a unix socket address), created by the proxy with mode 0600.
        socket: PathBuf,
        /// The loopback port the command is told to use (`http://127.0.0.1:<port>`); not 0.
        /// Inside a network namespace any port is free; the `host` and `seatbelt` executors
        /// have none and listen on the host's loopback, where it must be free.
        port: u16,
    },
}

impl NetworkMode {
    /// Variables that name the proxy, each set to `http://127.0.0.1:<port>` in proxy mode.
    /// Both spellings: curl reads only the lower-case `http_proxy`, other tools the upper case.
    pub const PROXY_VARS: [&'static str; 6] = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ];

    /// Variables that list the hosts reached without the proxy, set to [`Self::NO_PROXY`].
    pub const NO_PROXY_VARS: [&'static str; 2] = ["NO_PROXY", "no_proxy"];

    /// Hosts reached directly in proxy mode: loopback only. Inside the command's network
    /// namespace the loopback is the command's own (a test server it started); the proxy, on
    /// the host, would reach the host's loopback instead (and refuses loopback targets).
    pub const NO_PROXY: &'static str = "localhost,127.0.0.1,::1";

    /// The environment a command gets in this mode on top of `ExecPolicy::env` (which loses
    /// every variable of the same name, in any case): the six [`Self::PROXY_VARS`] and the two
    /// [`Self::NO_PROXY_VARS`] in proxy mode, nothing when isolated.
    pub fn proxy_env(&self) -> Vec<(OsString, OsString)> {
        match self {
            NetworkMode::Isolated => Vec::new(),
            NetworkMode::Proxy { port, .. } => {
                let url = format!("http://127.0.0.1:{port}");
                Self::PROXY_VARS
                    .iter()
                    .map(|k| (OsString::from(k), OsString::from(&url)))
                    .chain(
                        Self::NO_PROXY_VARS
                            .iter()
                            .map(|k| (OsString::from(k), OsString::from(Self::NO_PROXY))),
                    )
                    .collect()
            }
        }
    }

    /// `policy_env` with every variable that [`Self::proxy_env`] sets removed (names compared
    /// without case, so `Http_Proxy` from the host cannot survive), then [`Self::proxy_env`]
    /// appended. In isolated mode `policy_env` is returned unchanged.
    pub fn command_env(&self, policy_env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
        let extra = self.proxy_env();
        if extra.is_empty() {
            return policy_env.to_vec();
        }
        let mut env: Vec<(OsString, OsString)> = policy_env
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(name, _)| name.eq_ignore_ascii_case(k)))
            .cloned()
            .collect();
        env.extend(extra);
        env
    }
}

/// Resource limits applied to the whole process tree of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Upper bound on the number of processes the command may have at once (fork bombs).
    pub max_processes: u32,
    /// Bytes of stdout and of stderr kept when output is captured; the rest is counted and
    /// replaced by a truncation marker.
    pub output_cap: usize,
    /// Wall-clock limit after which the whole process tree is killed.
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_processes: 512,
            output_cap: 256 * 1024,
            timeout: None,
        }
    }
}

/// The staged view of the project a staged command runs over (see the `staging` crate). The
/// executor mounts it at the project's own path, so the real project is not reachable from the
/// command at all: every write, including one to the project's absolute path, lands in the
/// staging folder and becomes a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StagedView {
    /// overlayfs in the command's user namespace: `lower` is the project, writes go to
    /// `upper` (with `work` as overlayfs's scratch folder); mounted with `userxattr`.
    Overlay {
        /// The project (read-only lower layer).
        lower: PathBuf,
        /// Where the command's writes land.
        upper: PathBuf,
        /// overlayfs work folder (same filesystem as `upper`).
        work: PathBuf,
    },
    /// A full copy of the project (reflink or plain), bound at the project's path.
    Copy {
        /// The copy.
        dir: PathBuf,
    },
}

/// Everything an executor needs to confine one command.
///
/// Paths are absolute and canonical (no symbolic link in any component) when built by
/// [`crate::build_exec_policy`]; executors rely on that and never resolve links themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPolicy {
    /// The project root: the command's working directory and its main writable root.
    pub project_root: PathBuf,
    /// Directories (and files) the command may write: the project root and package caches.
    /// `/tmp` is not listed: every Linux executor gives the command a private, empty `/tmp`.
    pub writable_roots: Vec<PathBuf>,
    /// Paths inside writable roots that stay read-only: every git directory as a whole, `.git`
    /// pointer files, what git runs or reads because a link or its configuration names it
    /// (hooks paths, included files, command programs), and `.garuda`. Each exists when the
    /// policy is built.
    pub read_only_paths: Vec<PathBuf>,
    /// Inside read-only paths, bound read-write again: the `objects`, `refs` and `logs`
    /// folders of each git directory, data a command legitimately writes and git never runs.
    /// Each is a real folder (not a link) inside one of [`ExecPolicy::read_only_paths`] when
    /// the policy is built; an executor ignores one that is not inside a read-only path it
    /// enforces (a hole must never open anything else).
    pub writable_holes: Vec<PathBuf>,
    /// Secrets: existing files and directories the command must not read at all.
    pub unreadable_paths: Vec<PathBuf>,
    /// Directories replaced by an empty directory, hiding host daemons' sockets (`/run`,
    /// `$XDG_RUNTIME_DIR`). Each exists when the policy is built.
    pub hidden_dirs: Vec<PathBuf>,
    /// Network access.
    pub network: NetworkMode,
    /// When set, the command sees this staged view at `project_root` instead of the project.
    pub staged: Option<StagedView>,
    /// The complete environment of the command (already filtered by the allowlist).
    pub env: Vec<(OsString, OsString)>,
    /// Resource limits.
    pub limits: Limits,
}

impl ExecPolicy {
    /// The command's complete environment: [`ExecPolicy::env`] adjusted for the network mode
    /// ([`NetworkMode::command_env`]). Every executor starts the command with exactly this.
    pub fn command_env(&self) -> Vec<(OsString, OsString)> {
        self.network.command_env(&self.env)
    }

    /// True when `path` lies inside one of the writable roots (component-wise prefix).
    pub fn is_under_writable_root(&self, path: &Path) -> bool {
        self.writable_roots
            .iter()
            .any(|root| path.starts_with(root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn isolated_mode_adds_no_variables() {
        let env = os(&[("PATH", "/usr/bin"), ("HTTPS_PROXY", "http://host:1")]);
        assert!(NetworkMode::Isolated.proxy_env().is_empty());
        assert_eq!(NetworkMode::Isolated.command_env(&env), env);
    }

    #[test]
    fn proxy_mode_replaces_every_proxy_variable() {
        let mode = NetworkMode::Proxy {
            socket: "/run/garuda/proxy.sock".into(),
            port: 3128,
        };
        let env = os(&[
            ("PATH", "/usr/bin"),
            ("Http_Proxy", "http://evil:1"),
            ("no_proxy", "*"),
            ("LANG", "C"),
        ]);
        let url = "http://127.0.0.1:3128";
        let want = os(&[
            ("PATH", "/usr/bin"),
            ("LANG", "C"),
            ("HTTP_PROXY", url),
            ("HTTPS_PROXY", url),
            ("ALL_PROXY", url),
            ("http_proxy", url),
            ("https_proxy", url),
            ("all_proxy", url),
            ("NO_PROXY", "localhost,127.0.0.1,::1"),
            ("no_proxy", "localhost,127.0.0.1,::1"),
        ]);
        assert_eq!(mode.command_env(&env), want);
    }
}
