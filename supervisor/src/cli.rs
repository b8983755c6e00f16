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
use garuda_policy::{ExecutorChoice, HostEnv, SourceKind};

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
            command,
        } => match sandbox(executor, project, capture, timeout, verbose, command) {
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

fn sandbox(
    executor_flag: Option<ExecutorArg>,
    project: Option<PathBuf>,
    capture: bool,
    timeout: Option<u64>,
    verbose: bool,
    command: Vec<OsString>,
) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = match project {
        Some(p) => p,
        None => project_root_from(&cwd),
    };
    let project = std::fs::canonicalize(&project)
        .with_context(|| format!("project folder {}", project.display()))?;
    let settings = garuda_policy::load_settings(&project, &host)?;
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
    let outcome = selection
        .executor
        .run(&spec, &policy, mode)
        .map_err(|e| anyhow!(e))?;
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
    Ok(outcome.status.code())
}
