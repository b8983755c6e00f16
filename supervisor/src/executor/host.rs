//! The `host` executor: no isolation at all.
//!
//! It exists for machines without a sandbox (where every command must be asked for) and as the
//! negative control of the contract suite: every confinement case must *fail* on it, which is
//! how we know each case can fail. It still applies the environment allowlist and the output
//! cap, and kills the command's process group when the command ends, but it says plainly that
//! nothing else is enforced.
//!
//! In proxy mode ([`garuda_policy::NetworkMode::Proxy`]) the command gets the same proxy
//! variables as in a sandbox, and the supervisor forwards the host's `127.0.0.1:port` (which
//! must be free) to the proxy for as long as the command runs, so tools that follow the
//! variables behave as in a sandbox. Nothing stops a command from going around it: the host
//! executor is the negative control, with the host's full network.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use garuda_policy::ExecPolicy;

use super::capture::{join_reader, spawn_reader, wait_child};
use super::{CommandSpec, ExecError, Executor, ExecutorKind, Outcome, StdioMode};

/// What the host executor tells the user before it runs anything.
pub const NOTICE: &str = "host executor: commands run with your full rights (no filesystem, network or process isolation)";

/// Runs commands directly on the host.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostExecutor;

impl Executor for HostExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Host
    }

    fn run_released(
        &self,
        cmd: &CommandSpec,
        policy: &ExecPolicy,
        stdio: StdioMode,
        release: super::Release<'_>,
    ) -> Result<Outcome, ExecError> {
        // Nothing to overlap: the release first.
        release().map_err(|reason| ExecError::NotReleased { reason })?;
        let (program, args) = cmd
            .argv
            .split_first()
            .ok_or_else(|| ExecError::InvalidCommand("empty command".into()))?;
        if policy.staged.is_some() {
            // Without a mount namespace there is nowhere to put a staged view; running the
            // command on the real project instead would be a silent fallback to direct mode.
            return Err(ExecError::Unavailable {
                executor: ExecutorKind::Host,
                reason: "staged commands need an OS sandbox (the host executor has none)".into(),
            });
        }
        let proxy = crate::netbridge::checked_proxy(&policy.network)?;
        let cwd = super::program::checked_cwd(cmd, policy)?;
        let resolved = super::program::resolve_program(program, &policy.env);
        if !resolved.is_absolute() && !program.as_bytes().contains(&b'/') {
            return Ok(super::program::not_found_outcome(
                program,
                stdio,
                Instant::now(),
            ));
        }
        let mut command = Command::new(&resolved);
        command.arg0(program);
        command
            .args(args)
            .current_dir(&cwd)
            .env_clear()
            .envs(policy.command_env());
        crate::sys::own_process_group(&mut command);
        if stdio == StdioMode::Capture {
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
        }
        // Stopped when it drops, on every way out of this function.
        let _bridge = proxy
            .map(|(socket, port)| crate::netbridge::Bridge::on_host_loopback(port, socket))
            .transpose()?;
        let start = Instant::now();
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(super::program::not_found_outcome(program, stdio, start));
            }
            Err(source) => {
                return Err(ExecError::Setup {
                    stage: "spawn".into(),
                    error: source,
                })
            }
        };
        let cap = policy.limits.output_cap;
        let out = child.stdout.take().map(|s| spawn_reader(s, cap));
        let err = child.stderr.take().map(|s| spawn_reader(s, cap));
        // The command leads its own process group: a signal to the supervisor kills the group.
        crate::sys::forward_signals_to(-(child.id() as libc::pid_t));
        // `wait_child` stops the forwarding and kills the group before it reaps the leader.
        // Processes that left the group (setsid, double fork) survive: the host executor
        // cannot prevent that.
        let status = wait_child(&mut child, policy.limits.timeout, true)?;
        Ok(Outcome {
            status,
            stdout: join_reader(out)?,
            stderr: join_reader(err)?,
            duration: start.elapsed(),
            lookups: crate::dnsstub::Lookups::default(),
            namespaces_made_ahead: false,
        })
    }
}
