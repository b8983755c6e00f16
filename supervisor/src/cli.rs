//! The command line: `garuda sandbox` and `garuda doctor`.
//!
//! Exit codes of `garuda sandbox`: the command's own exit code (128 + N when a signal N killed
//! it, 124 when the timeout killed it), or [`SETUP_FAILED`] when Garuda could not load the
//! policy or set up the sandbox — with the reason on stderr. Garuda never runs the command
//! with less confinement than the policy asks for.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use garuda_policy::{CommandMode, ExecutorChoice, GitGuard, HostEnv, SourceKind, StagingBackend};
use garuda_staging::{BackendChoice, Session, StagingError};

use crate::executor::{self, CommandSpec, ExecutorKind, StdioMode};

/// Exit code when Garuda itself cannot set up the sandbox (as `env(1)` and `timeout(1)` use).
pub const SETUP_FAILED: i32 = 125;

#[derive(Debug, Parser)]
#[command(
    name = "garuda",
    version,
    about = "A coding agent whose every side effect passes through a sandbox supervisor"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ExecutorArg {
    Auto,
    Bubblewrap,
    Landlock,
    Seatbelt,
    Host,
}

impl From<ExecutorArg> for ExecutorChoice {
    fn from(a: ExecutorArg) -> Self {
        match a {
            ExecutorArg::Auto => ExecutorChoice::Auto,
            ExecutorArg::Bubblewrap => ExecutorChoice::Bubblewrap,
            ExecutorArg::Landlock => ExecutorChoice::Landlock,
            ExecutorArg::Seatbelt => ExecutorChoice::Seatbelt,
            ExecutorArg::Host => ExecutorChoice::Host,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a command under the effective policy, with the project as its writable root.
    Sandbox {
        /// Executor (default: the `executor` setting, else auto).
        #[arg(long, value_enum)]
        executor: Option<ExecutorArg>,
        /// Project root (default: the git root above the current folder, else the folder).
        #[arg(long)]
        project: Option<PathBuf>,
        /// Capture stdout and stderr as the agent would (capped, with a truncation marker)
        /// and print them when the command ends, instead of streaming.
        #[arg(long)]
        capture: bool,
        /// Kill the command and everything it started after this many seconds.
        #[arg(long)]
        timeout: Option<u64>,
        /// Print which executor runs the command and why.
        #[arg(long, short)]
        verbose: bool,
        /// Run the command over a staged view of the project (also when the settings say
        /// `"commands": {"mode": "staged"}`): the project changes only if the change is
        /// applied.
        #[arg(long)]
        staged: bool,
        /// With a staged command: apply the change without asking.
        #[arg(long, conflicts_with = "discard")]
        apply: bool,
        /// With a staged command: discard the change without asking.
        #[arg(long)]
        discard: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Show which executors this machine can run, and why not.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Sandbox {
            executor,
            project,
            capture,
            timeout,
            verbose,
            staged,
            apply,
            discard,
            command,
        } => match sandbox(SandboxArgs {
            executor_flag: executor,
            project,
            capture,
            timeout,
            verbose,
            staged,
            decision: if apply {
                Some(Decision::Apply)
            } else if discard {
                Some(Decision::Discard)
            } else {
                None
            },
            command,
        }) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda: {e:#}");
                SETUP_FAILED
            }
        },
        Cmd::Doctor { json } => {
            let r = crate::doctor::report();
            if json {
                match serde_json::to_string_pretty(&r) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("garuda: {e}");
                        return 1;
                    }
                }
            } else {
                print!("{}", crate::doctor::render(&r));
            }
            0
        }
    }
}

/// A project file may require a sandbox, never a weaker one than `auto` would pick here: a
/// cloned repository must not be able to trade Landlock for a lesser executor.
fn refuse_weaker_project_executor(choice: ExecutorChoice, file: &Path) -> Result<()> {
    let named = match choice {
        ExecutorChoice::Auto => return Ok(()),
        ExecutorChoice::Landlock => ExecutorKind::Landlock,
        ExecutorChoice::Bubblewrap => ExecutorKind::Bubblewrap,
        ExecutorChoice::Seatbelt => ExecutorKind::Seatbelt,
        ExecutorChoice::Host => ExecutorKind::Host,
    };
    let rank = |k: ExecutorKind| ExecutorKind::ALL.iter().position(|x| *x == k);
    let strongest = executor::probe_executors()
        .into_iter()
        .find(|p| p.available);
    if let Some(best) = strongest {
        if rank(named) > rank(best.kind) {
            bail!(
                "{} asks for executor {named}, weaker than {} which this machine has; a project file can only tighten the sandbox",
                file.display(),
                best.kind
            );
        }
    }
    Ok(())
}

/// The git root above `start` (the nearest folder holding `.git`), else `start` itself.
pub fn project_root_from(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(start)
        .to_path_buf()
}

/// What to do with a staged change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Apply,
    Discard,
}

struct SandboxArgs {
    executor_flag: Option<ExecutorArg>,
    project: Option<PathBuf>,
    capture: bool,
    timeout: Option<u64>,
    verbose: bool,
    staged: bool,
    decision: Option<Decision>,
    command: Vec<OsString>,
}

fn sandbox(args: SandboxArgs) -> Result<i32> {
    let SandboxArgs {
        executor_flag,
        project,
        capture,
        timeout,
        verbose,
        staged,
        decision,
        command,
    } = args;
    let host = HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = match project {
        Some(p) => p,
        None => project_root_from(&cwd),
    };
    let project = std::fs::canonicalize(&project)
        .with_context(|| format!("project folder {}", project.display()))?;
    let settings = garuda_policy::load_settings(&project, &host)?;
    // An apply interrupted by a crash is finished (or rolled back) before anything else runs.
    for r in garuda_staging::recover(&host.garuda_home)? {
        eprintln!("garuda: {r}");
    }
    let staged = staged || settings.command_mode == CommandMode::Staged;
    if decision.is_some() && !staged {
        bail!("--apply and --discard need a staged command (--staged)");
    }
    let choice = match executor_flag.map(ExecutorChoice::from) {
        None => settings.executor,
        Some(flag) => {
            // A flag may pick another sandbox, but not step outside one a managed policy set.
            if let Some(origin) = &settings.executor_origin {
                if origin.kind == SourceKind::Managed && flag != settings.executor {
                    bail!(
                        "the managed policy {} sets executor {:?}; --executor cannot change it",
                        origin.path.display(),
                        settings.executor
                    );
                }
            }
            flag
        }
    };
    if let Some(origin) = &settings.executor_origin {
        if origin.kind == SourceKind::Project && executor_flag.is_none() {
            refuse_weaker_project_executor(settings.executor, &origin.path)?;
        }
    }
    let mut policy = garuda_policy::build_exec_policy(&project, &settings, &host)?;
    if let Some(secs) = timeout {
        policy.limits.timeout = Some(Duration::from_secs(secs));
    }
    let selection = executor::select_executor(choice).map_err(|e| anyhow!(e))?;
    if selection.executor.kind() == ExecutorKind::Host {
        if staged {
            bail!("staged mode is selected but the host executor has no sandbox to stage in: install bubblewrap or use a kernel with Landlock and user namespaces (no fallback to direct mode)");
        }
        eprintln!("garuda: {}", executor::host::NOTICE);
    }
    if verbose {
        eprintln!("garuda: executor {}", selection.reason);
    }
    let spec = CommandSpec {
        argv: command,
        cwd: cwd.starts_with(&project).then_some(cwd),
    };
    let mode = if capture {
        StdioMode::Capture
    } else {
        StdioMode::Inherit
    };
    if !staged {
        let guard = GitGuard::snapshot(&policy);
        let outcome = selection.executor.run(&spec, &policy, mode);
        // Every process of the command is gone: nothing can race the guard.
        for v in guard.restore() {
            eprintln!("garuda: git guard: {v}");
        }
        let outcome = outcome.map_err(|e| anyhow!(e))?;
        return Ok(finish(&outcome, capture));
    }
    let backend = match settings.staging_backend {
        StagingBackend::Auto => BackendChoice::Auto,
        StagingBackend::Overlay => BackendChoice::Overlay,
        StagingBackend::Copy => BackendChoice::Copy,
    };
    let overlay_usable = crate::doctor::overlay_in_userns().is_ok();
    let mut session = Session::create(&host.garuda_home, &project, backend, overlay_usable)
        .map_err(|e| {
            anyhow!(
                "staged mode is selected but staging cannot be set up: {e} (no fallback to direct mode)"
            )
        })?;
    if verbose {
        eprintln!(
            "garuda: staging backend {:?} in {}",
            session.backend(),
            session.dir().display()
        );
    }
    let result = run_staged(
        &mut session,
        &*selection.executor,
        &spec,
        policy,
        mode,
        decision,
    );
    // The session folder goes whatever happened; a failure to remove it is only reported.
    if let Err(e) = session.close() {
        eprintln!("garuda: could not remove the staging folder: {e}");
    }
    let outcome = result?;
    Ok(finish(&outcome, capture))
}

/// Print captured output and the timeout note; the exit code to return.
fn finish(outcome: &executor::Outcome, capture: bool) -> i32 {
    if capture {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&outcome.stdout.bytes);
        let _ = out.flush();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&outcome.stderr.bytes);
    }
    if outcome.status == executor::ExitStatus::TimedOut {
        eprintln!("garuda: the command was killed after the timeout");
    }
    outcome.status.code()
}

/// Run one command over the session's staged view, show the change and apply or discard it.
fn run_staged(
    session: &mut Session,
    executor: &dyn executor::Executor,
    spec: &CommandSpec,
    mut policy: garuda_policy::ExecPolicy,
    mode: StdioMode,
    decision: Option<Decision>,
) -> Result<executor::Outcome> {
    let mark = session.prepare()?;
    policy.staged = Some(session.view());
    let outcome = executor.run(spec, &policy, mode).map_err(|e| anyhow!(e))?;
    let set = session.changes(&mark)?;
    if set.is_empty() {
        eprintln!("garuda: the command changed nothing that could be applied");
        return Ok(outcome);
    }
    eprintln!("{}", garuda_staging::render(&set, session));
    let decision = match decision {
        Some(d) => d,
        None => ask_apply_or_discard(set.can_apply())?,
    };
    match decision {
        Decision::Apply if !set.can_apply() => {
            session.discard(&set)?;
            eprintln!("garuda: the change cannot be applied (see above); it was discarded and the project did not change");
        }
        Decision::Apply => match session.apply(&set) {
            Ok(applied) => eprintln!("garuda: applied: {applied}"),
            // Past the commit point the change is applied, only not finished: the journal
            // finishes it at the next start (or when this session closes). Do not discard.
            Err(e @ StagingError::CommitUnfinished { .. }) => {
                eprintln!("garuda: the change is committed but not fully written: {e}");
            }
            Err(e) => {
                session.discard(&set)?;
                eprintln!("garuda: nothing was applied: {e}; the change was discarded and the project did not change");
            }
        },
        Decision::Discard => {
            session.discard(&set)?;
            eprintln!("garuda: discarded: the project did not change");
        }
    }
    Ok(outcome)
}

/// Ask on the terminal. Without one, discard and say so: an unattended run never applies a
/// change nobody saw.
fn ask_apply_or_discard(can_apply: bool) -> Result<Decision> {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!("garuda: no terminal to ask on and neither --apply nor --discard: discarding");
        return Ok(Decision::Discard);
    }
    loop {
        if can_apply {
            eprint!("Apply or discard this change? [a/d] ");
        } else {
            eprint!("This change can only be discarded. Discard? [d] ");
        }
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(Decision::Discard);
        }
        match line.trim() {
            "a" | "apply" if can_apply => return Ok(Decision::Apply),
            "d" | "discard" => return Ok(Decision::Discard),
            _ => {}
        }
    }
}
