//! The command line: `garuda sandbox`, `garuda policy` and `garuda doctor`.
//!
//! Exit codes of `garuda sandbox`: the command's own exit code (128 + N when a signal N killed
//! it, 124 when the timeout killed it), or [`SETUP_FAILED`] when Garuda could not load the
//! policy or set up the sandbox — with the reason on stderr. Garuda never runs the command
//! with less confinement than the policy asks for. A usage error exits [`SETUP_FAILED`] too, in
//! every subcommand (never clap's 2); `--help` and `--version` exit 0.
//!
//! A staged command (`--staged`) whose change is not applied exits with a code that says so,
//! whatever the command's own code, so that `garuda sandbox --staged --apply -- … && git
//! commit` never commits a change that did not land:
//!
//! | the change | exit code |
//! |---|---|
//! | applied, or there was nothing to apply | the command's own |
//! | discarded because `--discard` asked for it | the command's own (the caller knows) |
//! | discarded at the question (a no to the question for `.garuda/` or for sensitive files included), or with no terminal to ask on | [`STAGED_DISCARDED`] (121) |
//! | apply refused: incomplete list, link out of the project, conflict, staged file changed after it was shown, path outside the project, a change to `.garuda/` with `--apply` alone, a change to a sensitive file (`.env*`, a key) without `--apply-sensitive` | [`APPLY_REFUSED`] (122) |
//! | apply failed: I/O error, journal, commit not finished | [`APPLY_FAILED`] (123) |
//! | discarded because a signal interrupted the command | 128 + N |
//! | discarded because the timeout killed the command | 124 |
//!
//! A command that itself exits 121, 122 or 123 after an applied change cannot be told apart
//! by the code alone; stderr and the audit log's `command_result` (`staged`) say which.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use garuda_policy::engine::{Context as DecideContext, Engine, Request};
use garuda_policy::{
    CommandMode, EffectiveSettings, ExecutorChoice, Flags, HostEnv, SourceKind, SourcePaths,
    StagingBackend,
};
use garuda_staging::{BackendChoice, Guard, Session, StagingError};
use garuda_text::{visible, visible_json};

use crate::executor::{self, CommandSpec, ExecutorKind, StdioMode};
use crate::project::{git_root_above, resolve_project};

pub use crate::exit_codes::{APPLY_FAILED, APPLY_REFUSED, SETUP_FAILED, STAGED_DISCARDED};

#[derive(Debug, Parser)]
#[command(
    name = "garuda",
    version,
    about = "A coding agent whose every side effect passes through a sandbox supervisor"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// One task for the agent: `garuda -p "TASK"`, or `echo TASK | garuda -p`. The model's
    /// text goes to stdout, activity to stderr; exit 0 done, 1 error, 2 a limit stopped it,
    /// 130 Ctrl-C.
    #[arg(short = 'p', long = "print", value_name = "TASK", num_args = 0..=1)]
    print: Option<Option<String>>,
    /// The model, as `provider/model` (default: `GARUDA_MODEL`, then `models.json`'s default).
    #[arg(short = 'm', long = "model", value_name = "PROVIDER/MODEL")]
    model: Option<String>,
    /// How `-p` prints: `text` (the model's text), `json` (one result object at the end) or
    /// `stream-json` (one JSON object per line), with Claude Code's field names.
    #[arg(long, value_enum, default_value = "text", requires = "print")]
    output_format: OutputFormatArg,
    /// Continue a session of this project with the same messages: the latest, or ID
    /// (`garuda sessions` lists them).
    #[arg(long, value_name = "ID", num_args = 0..=1)]
    resume: Option<Option<String>>,
    /// Project root for `-p` and the chat (default: the git root above the current folder,
    /// else the folder).
    #[arg(long = "project", value_name = "DIR")]
    agent_project: Option<PathBuf>,
    /// `-p` and the chat: run the agent's commands staged.
    #[arg(long = "staged")]
    agent_staged: bool,
    /// `-p` and the chat: the strict profile.
    #[arg(long = "strict")]
    agent_strict: bool,
    /// `-p`: what becomes of a staged command's change with no one to ask: `discard` (the
    /// default: the project does not change) or `apply`.
    #[arg(long, value_enum, default_value = "discard")]
    staged_changes: StagedChangesArg,
    /// `-p` and the chat: most model calls in a turn (default 50).
    #[arg(long, value_name = "N")]
    max_steps: Option<u32>,
    /// `-p` and the chat: most tokens of the session, every call included (default
    /// 20,000,000).
    #[arg(long, value_name = "N")]
    token_budget: Option<u64>,
    /// `-p`: play a recorded session again: its model responses from the recording (no API
    /// call), its tools for real through the supervisor. ID (a session of the project), a
    /// journal FILE, or an example DIR (`session.jsonl` and `project/`, copied to a fresh
    /// folder first). Prints `matches`, or each tool result that differs (exit 1).
    #[arg(
        long,
        value_name = "ID|FILE|DIR",
        requires = "print",
        conflicts_with = "resume"
    )]
    replay: Option<String>,
    /// `-p` and the chat: allow RULE for this session, as a yes you give in advance
    /// (`Edit(**)`, `Bash(cargo test *)`); repeatable. Deny rules and the managed policy
    /// still win.
    #[arg(long = "allow", value_name = "RULE")]
    allow: Vec<String>,
}

/// `garuda sandbox`'s flags: what clap ([`Cli`]) and the loop for the common shapes
/// ([`sandbox_words`]) both fill in.
#[derive(Debug, clap::Args)]
struct SandboxFlags {
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
    /// Kill the command and everything it started after this many seconds (1 to
    /// 31536000; without it, no limit).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
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
    /// With `--apply`: also apply changes to sensitive files (`.env*`, keys, `.npmrc`,
    /// `.netrc`, …), whose content the change list never shows. Without it, `--apply`
    /// refuses a change that touches one (exit 122).
    #[arg(long = "apply-sensitive", requires = "apply")]
    apply_sensitive: bool,
    /// Ask over the Unix socket at PATH instead of on the terminal (the chat runs its
    /// commands so; `staged_ask`): a staged command's "apply or discard?", and, unless the
    /// profile is strict or a managed policy fixes the hosts, a host the network allowlist
    /// does not name (the proxy then runs even with an empty allowlist, and waits).
    #[arg(
        long = "ask-socket",
        value_name = "PATH",
        hide = true,
        conflicts_with_all = ["apply", "discard"]
    )]
    ask_socket: Option<PathBuf>,
    /// Use the strict profile: an OS sandbox is required (no host fallback).
    #[arg(long)]
    strict: bool,
    /// Let the command reach HOST (port 80 and 443; HOST:PORT for another port;
    /// `*.example.com` for the names below it) through Garuda's proxy, in addition to the
    /// policy's `network.allow`. Refused hosts are listed when the command ends.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_host: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormatArg {
    Text,
    Json,
    StreamJson,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StagedChangesArg {
    Discard,
    Apply,
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
    Sandbox(SandboxFlags),
    /// Show the effective policy, each value with the file and line it came from, and the
    /// executor it implies; or check a policy file, or decide one request.
    Policy {
        /// Project root (default: the git root above the current folder, else the folder).
        #[arg(long, global = true)]
        project: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: Option<PolicyCmd>,
    },
    /// Verify and read the audit log, run a witness, export the install secret.
    Audit {
        #[command(subcommand)]
        action: AuditCmd,
    },
    /// List the agent sessions of the project (oldest last write first): id, start, last
    /// write, records, first prompt.
    Sessions {
        /// The project (default: the git root above the current folder).
        #[arg(long)]
        project: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Show which executors this machine can run, and why not.
    Doctor {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Show the sandbox at work on a throwaway project and a demo secret (none of your files).
    ///
    /// In a fresh folder under /var/tmp, removed at the end, one sandboxed command tries to
    /// write in the project, read the demo secret, write outside the project and reach the
    /// network; the report says what happened. Exits 0 when the sandbox held, 1 when it did
    /// not, 125 when the demo could not run.
    Demo {
        /// Executor (default: auto).
        #[arg(long, value_enum)]
        executor: Option<ExecutorArg>,
    },
    /// What `garuda demo` runs inside the sandbox.
    #[command(name = "demo-probe", hide = true)]
    DemoProbe {
        secret: PathBuf,
        inside: PathBuf,
        outside: PathBuf,
        port: u16,
    },
    /// The confined agent (started by the supervisor, never by hand; see `crate::agent`).
    #[command(hide = true, disable_help_flag = true)]
    Agent {
        /// Parsed by `crate::agent::main`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check the log: one finding per problem; exit 0 verified, 1 tampered, 2 cannot decide.
    Verify {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// The project whose log to verify (default: the git root above the current folder).
        #[arg(long, conflicts_with = "all")]
        project: Option<PathBuf>,
        /// Every project's log.
        #[arg(long)]
        all: bool,
        /// An exported install secret (`garuda audit key export`); may be repeated.
        #[arg(long = "key", value_name = "FILE")]
        keys: Vec<PathBuf>,
        /// Compare with a witness folder (as `garuda audit witness-serve DIR` keeps it)
        /// instead of the policy's witness command.
        #[arg(long, value_name = "DIR")]
        witness_dir: Option<PathBuf>,
    },
    /// Print the verified lines of a session (default: list the newest sessions, then show
    /// the newest one's lines).
    Show {
        /// The project (default: the git root above the current folder).
        #[arg(long)]
        project: Option<PathBuf>,
        /// The session id (`garuda audit list` lists them).
        #[arg(long)]
        session: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// An exported install secret (`garuda audit key export`); may be repeated.
        #[arg(long = "key", value_name = "FILE")]
        keys: Vec<PathBuf>,
    },
    /// List the project's sessions, oldest first: start time (UTC), session id, result,
    /// command. Exit 0 when every line verifies, 1 when one does not, 2 when a session's
    /// secret was not given.
    List {
        /// The project (default: the git root above the current folder).
        #[arg(long)]
        project: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// An exported install secret (`garuda audit key export`); may be repeated.
        #[arg(long = "key", value_name = "FILE")]
        keys: Vec<PathBuf>,
    },
    /// A file-backed witness: reads one checkpoint request on stdin, answers on stdout.
    WitnessServe {
        /// Where the witness keeps its state and key.
        dir: PathBuf,
    },
    /// The install secret.
    Key {
        #[command(subcommand)]
        action: KeyCmd,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCmd {
    /// Copy the install secret to FILE (e.g. removable media).
    Export {
        /// Where to write it.
        out: PathBuf,
        /// Remove it from the keys folder of Garuda's home ($GARUDA_HOME, default ~/.garuda)
        /// afterwards, so a process with your rights can no longer rewrite old sessions
        /// unnoticed (verify then needs --key FILE).
        #[arg(long)]
        remove: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SourceArg {
    Managed,
    User,
    Project,
}

#[derive(Debug, Subcommand)]
enum PolicyCmd {
    /// Validate a policy file and print what it would change in the effective policy.
    Check {
        /// The file.
        file: PathBuf,
        /// Which source the file would be (default: from its name: `managed-policy.json` or a
        /// file in `managed-policy.d` is managed, `policy.json` is user, `settings.json` is
        /// project).
        #[arg(long = "as", value_enum)]
        source: Option<SourceArg>,
    },
    /// Decide one request against the effective policy; the first word printed is `allow`,
    /// `ask` or `deny`.
    Decide {
        /// The tool: read_file, write_file, edit_file, bash, web_fetch, mcp__server__tool (or
        /// Claude Code's Read, Write, Edit, Bash, WebFetch).
        tool: String,
        /// The path, command line or URL (ignored for an MCP tool).
        target: String,
        /// Decide as in plan mode.
        #[arg(long)]
        plan: bool,
        /// The command asks to run outside the sandbox.
        #[arg(long)]
        outside_sandbox: bool,
    },
}

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    // `garuda sandbox …` in its common shape, read first (11 µs, see `parse`): whether the
    // landlock executor's namespaces are made on the other core meanwhile (`executor::ahead`)
    // is decided on that reading, before anything else runs.
    let sandbox = sandbox_words(&args);
    if sandbox.as_ref().is_some_and(may_use_namespaces_ahead) {
        crate::executor::ahead::prepare();
    }
    let code = run(args, sandbox);
    // A helper whose namespaces no sandbox took (another executor ran, or none did) is reaped
    // before the process ends: nothing Garuda started outlives it; so is the outermost
    // process of a sandbox whose end was told early (its teardown overlapped the audit's close).
    crate::executor::ahead::discard();
    crate::executor::reap_finished();
    code
}

/// Whether a sandbox run with `flags` can join namespaces made ahead: no `--executor`, or
/// `auto`, `landlock` or `bubblewrap` (a policy that picks the host, or a run with the network
/// on, leaves them unused, and they are discarded). A line in another shape (read by clap)
/// makes its namespaces when its sandbox starts, as without this.
fn may_use_namespaces_ahead(flags: &SandboxFlags) -> bool {
    matches!(
        flags.executor,
        None | Some(ExecutorArg::Auto | ExecutorArg::Landlock | ExecutorArg::Bubblewrap)
    )
}

/// Runs the command line `args`; `sandbox_read` is [`sandbox_words`]' reading of it, if any.
fn run(args: Vec<OsString>, sandbox_read: Option<SandboxFlags>) -> i32 {
    let cli = match parse(&args, sandbox_read) {
        Ok(cli) => cli,
        Err(e) => return parse_failed(e, &args),
    };
    // The sandboxes' start-up program is made here, while the process has one thread: made
    // later, a thread's fork could hold a copy of its still-writable descriptor and make the
    // first `execve` of it fail (`ETXTBSY`). An error is the sandbox's to report (it asks
    // again and fails its setup, exit 125).
    if matches!(cli.command, None | Some(Cmd::Sandbox(_))) {
        let _ = crate::sys::init_program();
    }
    let Some(command) = cli.command else {
        // Neither a task nor a subcommand: the chat.
        let chat = cli.print.is_none();
        if chat && cli.staged_changes != StagedChangesArg::Discard {
            eprintln!("garuda: --staged-changes is for -p, where no one is asked; the chat asks about each staged change");
            return SETUP_FAILED;
        }
        let prompt = cli.print.flatten();
        let args = crate::run_agent::RunArgs {
            prompt,
            model: cli.model,
            project: cli.agent_project,
            format: match cli.output_format {
                OutputFormatArg::Text => crate::run_agent::OutputFormat::Text,
                OutputFormatArg::Json => crate::run_agent::OutputFormat::Json,
                OutputFormatArg::StreamJson => crate::run_agent::OutputFormat::StreamJson,
            },
            resume: cli.resume,
            staged: cli.agent_staged,
            strict: cli.agent_strict,
            staged_unattended: match cli.staged_changes {
                StagedChangesArg::Discard => crate::run_agent::StagedUnattended::Discard,
                StagedChangesArg::Apply => crate::run_agent::StagedUnattended::Apply,
            },
            max_steps: cli.max_steps,
            token_budget: cli.token_budget,
            replay: cli.replay,
            allow: cli.allow,
        };
        let result = if chat {
            use std::io::IsTerminal;
            let terminal = std::io::stdin().is_terminal()
                && std::io::stdout().is_terminal()
                && std::env::var_os("TERM").is_some_and(|t| t != "dumb");
            if terminal {
                match crate::chat_tui::TermFront::start() {
                    Ok(front) => crate::run_agent::run(args, Some(&front)),
                    Err(e) => Err(e),
                }
            } else {
                crate::run_agent::run(args, Some(&crate::chat::LineFront::stdio()))
            }
        } else {
            crate::run_agent::run(args, None)
        };
        return match result {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda: {}", visible(&describe_error(&e)));
                1
            }
        };
    };
    if cli.print.is_some() {
        eprintln!("garuda: -p takes no subcommand");
        return SETUP_FAILED;
    }
    // The agent's options mean nothing to a subcommand: refused, not ignored.
    let agent_options = cli.model.is_some()
        || cli.resume.is_some()
        || cli.agent_project.is_some()
        || cli.agent_staged
        || cli.agent_strict
        || cli.staged_changes != StagedChangesArg::Discard
        || cli.max_steps.is_some()
        || cli.token_budget.is_some()
        || !cli.allow.is_empty();
    if agent_options {
        eprintln!(
            "garuda: -m, --resume, --project, --staged, --strict, --staged-changes, --max-steps, --token-budget and --allow are for -p and the chat, not a subcommand (a subcommand takes its own, after its name)"
        );
        return SETUP_FAILED;
    }
    // Commands that only read and print end quietly when their reader goes away
    // (`garuda audit list | head`), as `ls` does, instead of panicking on the broken pipe:
    // they have nothing to finish or clean up.
    let read_only = matches!(
        &command,
        Cmd::Policy { .. }
            | Cmd::Sessions { .. }
            | Cmd::Doctor { .. }
            | Cmd::Audit {
                action: AuditCmd::List { .. } | AuditCmd::Show { .. }
            }
    );
    if read_only {
        crate::sys::default_sigpipe();
    }
    match command {
        Cmd::Sandbox(SandboxFlags {
            executor,
            project,
            capture,
            timeout,
            verbose,
            staged,
            apply,
            discard,
            apply_sensitive,
            ask_socket,
            strict,
            allow_host,
            command,
        }) => match sandbox(SandboxArgs {
            ask_socket,
            executor_flag: executor,
            project,
            capture,
            timeout,
            verbose,
            staged,
            strict,
            allow_host,
            decision: if apply {
                Some(Decision::Apply {
                    sensitive: apply_sensitive,
                })
            } else if discard {
                Some(Decision::Discard)
            } else {
                None
            },
            command,
        }) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda: {}", visible(&describe_error(&e)));
                SETUP_FAILED
            }
        },
        Cmd::Policy {
            project,
            json,
            action,
        } => match policy_command(project, json, action) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda: {}", visible(&describe_error(&e)));
                1
            }
        },
        Cmd::Audit { action } => {
            let result = match action {
                AuditCmd::Verify {
                    json,
                    project,
                    all,
                    keys,
                    witness_dir,
                } => crate::audit_cmd::verify(crate::audit_cmd::VerifyArgs {
                    json,
                    project,
                    all,
                    keys,
                    witness_dir,
                    trusted_heads: Vec::new(),
                })
                // Verify that cannot run cannot tell: 2, never 0.
                .map_err(|e| (e, 2)),
                // Garuda's own failures (an unknown session, an unreadable file): 125.
                AuditCmd::Show {
                    project,
                    session,
                    json,
                    keys,
                } => crate::audit_cmd::show(
                    crate::audit_cmd::ReadArgs {
                        project,
                        json,
                        keys,
                    },
                    session,
                )
                .map_err(|e| (e, SETUP_FAILED)),
                AuditCmd::List {
                    project,
                    json,
                    keys,
                } => crate::audit_cmd::list(crate::audit_cmd::ReadArgs {
                    project,
                    json,
                    keys,
                })
                .map_err(|e| (e, SETUP_FAILED)),
                AuditCmd::WitnessServe { dir } => {
                    crate::audit_cmd::witness_serve(&dir).map_err(|e| (e, SETUP_FAILED))
                }
                AuditCmd::Key {
                    action: KeyCmd::Export { out, remove },
                } => crate::audit_cmd::key_export(&out, remove).map_err(|e| (e, SETUP_FAILED)),
            };
            match result {
                Ok(code) => code,
                Err((e, code)) => {
                    eprintln!("garuda: {}", visible(&describe_error(&e)));
                    code
                }
            }
        }
        Cmd::Demo { executor } => match crate::demo::demo(executor.map(ExecutorChoice::from)) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda demo: {}", visible(&describe_error(&e)));
                SETUP_FAILED
            }
        },
        Cmd::DemoProbe {
            secret,
            inside,
            outside,
            port,
        } => crate::demo::probe(&secret, &inside, &outside, port),
        Cmd::Agent { args } => crate::agent::main(args),
        Cmd::Sessions { project, json } => match crate::sessions::command(project, json) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("garuda: {}", visible(&describe_error(&e)));
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

/// The longest `--timeout`: a year, far below where `Instant + timeout` overflows (a value
/// near `u64::MAX` panicked after the command had started).
const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 60 * 60;

/// `--timeout SECS`: 0 would kill the command before it did anything, so it is refused rather
/// than read as "no limit" (leaving the flag out is that).
fn parse_timeout(text: &str) -> Result<u64, String> {
    let secs: u64 = text
        .parse()
        .map_err(|_| "give a whole number of seconds".to_string())?;
    if secs == 0 {
        return Err(
            "0 would kill the command at once: give 1 or more seconds, or leave --timeout out for no limit"
                .into(),
        );
    }
    if secs > MAX_TIMEOUT_SECS {
        return Err(format!(
            "at most {MAX_TIMEOUT_SECS} seconds (a year); leave --timeout out for no limit"
        ));
    }
    Ok(secs)
}

/// A command line clap refused (or `--help`, `--version`): prints it and returns the exit
/// code. A usage error is Garuda's own failure, so [`SETUP_FAILED`] — never clap's 2, which a
/// script could not tell from the sandboxed command's own exit 2.
fn parse_failed(mut e: clap::Error, args: &[OsString]) -> i32 {
    use clap::error::{ContextKind, ContextValue};
    if !e.use_stderr() {
        // `--help` and `--version`: asked for, printed on stdout.
        return match e.print() {
            Ok(()) => 0,
            Err(_) => SETUP_FAILED,
        };
    }
    if let Some(tip) = sandbox_usage_tip(&e, args) {
        let mut tips = match e.get(ContextKind::Suggested) {
            Some(ContextValue::StyledStrs(tips)) => tips.clone(),
            _ => Vec::new(),
        };
        tips.push(tip.into());
        e.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    }
    let _ = e.print();
    SETUP_FAILED
}

/// The command line, as [`Cli`] reads it: [`sandbox_words`]' reading `sandbox` when there is
/// one, else clap's.
fn parse(args: &[OsString], sandbox: Option<SandboxFlags>) -> Result<Cli, clap::Error> {
    match sandbox {
        Some(flags) => Ok(Cli::with_command(Cmd::Sandbox(flags))),
        None => Cli::try_parse_from(args),
    }
}

/// `garuda sandbox [OPTIONS] -- COMMAND…` read without clap, or `None` for clap to read.
///
/// clap builds the parser of every argument of every subcommand before it reads one word,
/// about 0.2 ms of each sandboxed command's start against 11 µs for this loop
/// (`docs/benchmarks.md`, "Relative relocations packed; the sandbox's words read without
/// clap"). It reads only the shape scripts, hooks and editors write: the subcommand first, the
/// long options (and `-v`) each given once as separate words, values that are UTF-8, not empty
/// and not starting with `-`, the constraints clap checks (`--apply` with `--discard`,
/// `--apply-sensitive` without `--apply`) not broken, and a command after `--`. What it reads
/// it reads as clap does (the same [`SandboxFlags`], the same value parsers;
/// `tests::the_sandbox_words_are_read_as_clap_reads_them` holds the two to the same reading
/// over thousands of generated lines); anything else (`--help`, a mistake, `--executor=X`, a
/// repeated option, `--ask-socket`, the chat's) is clap's, whose help and errors the user sees.
fn sandbox_words(args: &[OsString]) -> Option<SandboxFlags> {
    if args.get(1)? != "sandbox" {
        return None;
    }
    let mut flags = SandboxFlags {
        executor: None,
        project: None,
        capture: false,
        timeout: None,
        verbose: false,
        staged: false,
        apply: false,
        discard: false,
        apply_sensitive: false,
        ask_socket: None,
        strict: false,
        allow_host: Vec::new(),
        command: Vec::new(),
    };
    // A switch given twice is clap's to refuse.
    fn set_once(switch: &mut bool) -> Option<()> {
        (!std::mem::replace(switch, true)).then_some(())
    }
    let mut words = args.iter().skip(2);
    loop {
        let word = words.next()?.to_str()?;
        if word == "--" {
            break;
        }
        let mut value = || {
            let v = words.next()?.to_str()?;
            (!v.is_empty() && !v.starts_with('-')).then_some(v)
        };
        match word {
            "--capture" => set_once(&mut flags.capture)?,
            "-v" | "--verbose" => set_once(&mut flags.verbose)?,
            "--staged" => set_once(&mut flags.staged)?,
            "--apply" => set_once(&mut flags.apply)?,
            "--discard" => set_once(&mut flags.discard)?,
            "--apply-sensitive" => set_once(&mut flags.apply_sensitive)?,
            "--strict" => set_once(&mut flags.strict)?,
            "--executor" if flags.executor.is_none() => {
                flags.executor = Some(ExecutorArg::from_str(value()?, false).ok()?);
            }
            "--project" if flags.project.is_none() => {
                flags.project = Some(PathBuf::from(value()?));
            }
            "--timeout" if flags.timeout.is_none() => {
                flags.timeout = Some(parse_timeout(value()?).ok()?);
            }
            "--allow-host" => flags.allow_host.push(value()?.to_string()),
            _ => return None,
        }
    }
    flags.command = words.cloned().collect();
    let broken = (flags.apply && flags.discard) || (flags.apply_sensitive && !flags.apply);
    (!flags.command.is_empty() && !broken).then_some(flags)
}

impl Cli {
    /// The top level with every option at its default (what the full parser gives when the
    /// words start with the subcommand), running `command`.
    fn with_command(command: Cmd) -> Cli {
        Cli {
            command: Some(command),
            print: None,
            model: None,
            output_format: OutputFormatArg::Text,
            resume: None,
            agent_project: None,
            agent_staged: false,
            agent_strict: false,
            staged_changes: StagedChangesArg::Discard,
            max_steps: None,
            token_budget: None,
            replay: None,
            allow: Vec::new(),
        }
    }
}

/// A tip for the two usage errors a new user of `garuda sandbox` meets: a command without `--`
/// before it (clap sees an unexpected argument), and `--apply` with `--discard`.
fn sandbox_usage_tip(e: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ErrorKind};
    if args.get(1).is_none_or(|a| a != "sandbox") {
        return None;
    }
    let rest = &args[2..];
    match e.kind() {
        ErrorKind::ArgumentConflict
            if rest.iter().any(|a| a == "--apply") && rest.iter().any(|a| a == "--discard") =>
        {
            Some(
                "--apply applies the staged change and --discard throws it away: give one of them"
                    .into(),
            )
        }
        ErrorKind::UnknownArgument => {
            let invalid = match e.get(ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(s)) => s.clone(),
                _ => return None,
            };
            if invalid.starts_with('-') {
                return None;
            }
            // The options of `garuda sandbox` that take a value as the next argument, from
            // the parser itself.
            let cmd = <Cli as clap::CommandFactory>::command();
            let value_options: Vec<String> = cmd
                .find_subcommand("sandbox")?
                .get_arguments()
                .filter(|a| !a.is_positional() && a.get_action().takes_values())
                .flat_map(|a| {
                    let long = a.get_long().map(|l| format!("--{l}"));
                    let short = a.get_short().map(|c| format!("-{c}"));
                    long.into_iter().chain(short)
                })
                .collect();
            // The command starts at the first argument that is neither an option nor an
            // option's value: `--` goes before it.
            let mut value_next = false;
            let start = rest.iter().position(|a| {
                let is_command = !value_next && !a.to_string_lossy().starts_with('-');
                value_next = value_options.iter().any(|o| a == o.as_str());
                is_command
            })?;
            if rest[start].to_string_lossy() != invalid {
                return None;
            }
            let words: Vec<String> = rest[..start]
                .iter()
                .chain(std::iter::once(&OsString::from("--")))
                .chain(&rest[start..])
                .map(|a| shell_word(a))
                .collect();
            Some(format!(
                "put '--' before the command to run: garuda sandbox {}",
                words.join(" ")
            ))
        }
        _ => None,
    }
}

/// One argument as a POSIX shell would need it typed: bare when it is plain, else in single
/// quotes; controls and bidirectional characters made visible (it is the user's text).
fn shell_word(arg: &std::ffi::OsStr) -> String {
    let text = visible(&arg.to_string_lossy()).into_owned();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// An error and its causes on one line, `a: b: c`, without repeating a cause that the
/// message before it already quotes (library errors name their source in their own message).
/// Messages quote paths and arguments a command chose: print it through [`visible`].
pub(crate) fn describe_error(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// [`executor::select::weaker_project_executor`] as `garuda sandbox`'s error.
fn check_project_executor(settings: &EffectiveSettings, home: &Path) -> Result<()> {
    match executor::select::weaker_project_executor(settings, home) {
        Some(refusal) => bail!("{refusal}"),
        None => Ok(()),
    }
}

/// Where `garuda sandbox` got its project folder: the hints for a project that is too broad
/// or not a git project depend on it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ProjectFrom {
    /// `--project DIR`.
    Flag,
    /// The nearest folder at or above the current one that holds `.git`.
    GitRoot,
    /// The current folder: no folder at or above it holds `.git`.
    CurrentFolder,
}

/// [`resolve_project`], and where the folder came from.
fn resolve_project_from(project: Option<PathBuf>, cwd: &Path) -> Result<(PathBuf, ProjectFrom)> {
    let from = match &project {
        Some(_) => ProjectFrom::Flag,
        None if git_root_above(cwd).is_some() => ProjectFrom::GitRoot,
        None => ProjectFrom::CurrentFolder,
    };
    Ok((resolve_project(project, cwd)?, from))
}

/// What to add to "project root … contains the home directory": why that folder became the
/// project, and how to name the right one.
fn too_broad_hint(from: &ProjectFrom, project: &Path) -> String {
    match from {
        ProjectFrom::Flag => {
            "name the project's own folder with --project DIR, one that does not contain your home"
                .to_string()
        }
        ProjectFrom::GitRoot => format!(
            "{} is the project because it holds .git (the git root above the current folder): name the project's own folder with --project DIR",
            project.display()
        ),
        ProjectFrom::CurrentFolder => format!(
            "with no .git in it or above it, the project is the current folder ({}): cd into your project, or name it with --project DIR",
            project.display()
        ),
    }
}

/// Selects the executor for `choice`; where the policy requires an OS sandbox, the host
/// executor is never the answer: an error with the reason and the fix instead.
fn select_for_policy(
    choice: ExecutorChoice,
    settings: &EffectiveSettings,
    garuda_home: &Path,
) -> Result<executor::Selection> {
    let required_by = || {
        settings
            .require_sandbox_origin
            .as_ref()
            .map_or_else(|| "the policy".to_string(), |o| o.to_string())
    };
    match executor::select::select_executor_cached(choice, Some(garuda_home)) {
        Ok(s) if s.executor.kind() == ExecutorKind::Host && settings.require_sandbox => {
            bail!(
                "an OS sandbox is required (profile {}, {}) and none is available here, so \
                 Garuda will not run commands on the host. {}",
                settings.profile,
                required_by(),
                no_sandbox_found_and_fix()
            )
        }
        Ok(s) => Ok(s),
        Err(e) => {
            // The fix for this machine: another sandbox that runs here, else how to get one.
            let fix = match switch_executor_hint(settings) {
                Some(switch) => format!("Fix: {switch}"),
                None => no_sandbox_found_and_fix(),
            };
            if settings.require_sandbox {
                bail!(
                    "an OS sandbox is required ({}) and the selected one cannot run: {e}. {fix}",
                    required_by()
                )
            }
            bail!("{e}. {fix}")
        }
    }
}

/// Where no OS sandbox can run: what each probe found, and the fix for those findings.
fn no_sandbox_found_and_fix() -> String {
    let found: Vec<String> = executor::probe_executors()
        .into_iter()
        .filter(|p| p.kind.is_sandbox())
        .map(|p| format!("{}: {}", p.kind, p.detail))
        .collect();
    format!(
        "Found: {}. Fix: {}",
        found.join("; "),
        executor::select::no_sandbox_fix_here()
    )
}

/// How to switch to an OS sandbox that runs here, said for where the executor setting came
/// from (a flag, a file the user can edit, or the managed file, which only its administrator
/// can change); `None` when no OS sandbox runs here.
fn switch_executor_hint(settings: &EffectiveSettings) -> Option<String> {
    let available = executor::select::available_sandboxes();
    let best = *available.first()?;
    let names: Vec<&str> = available.iter().map(|k| k.name()).collect();
    let can_run = format!("{} can run here", names.join(" and "));
    Some(match &settings.executor_origin {
        Some(o) if o.kind == SourceKind::Managed => format!(
            "{can_run}, but the managed policy ({o}) sets the executor: ask whoever manages it"
        ),
        Some(o) if o.kind != SourceKind::Flag => {
            format!("{can_run}: pass --executor {best}, or change \"executor\" in {o}")
        }
        _ => format!(
            "{can_run}: pass --executor {best}, or leave --executor out (auto picks {best} here)"
        ),
    })
}

/// Why a staged command cannot run on the host executor, and the way out that is true here: a
/// sandbox that runs here and how to select it, or how to get one.
fn staged_on_host_error(settings: &EffectiveSettings) -> String {
    let prefix = "staged mode is selected but the host executor has no sandbox to stage in";
    let available = executor::select::available_sandboxes();
    let Some(best) = available.first() else {
        return format!(
            "{prefix}, and no OS sandbox can run here (no fallback to direct mode). {}",
            no_sandbox_found_and_fix()
        );
    };
    let others: Vec<String> = available
        .iter()
        .map(|k| format!("--executor {k}"))
        .collect();
    let way_out = match &settings.executor_origin {
        Some(o) if o.kind == SourceKind::Flag => format!(
            "drop --executor host (auto picks {best} here), or pass {}",
            others.join(" or ")
        ),
        Some(o) if o.kind == SourceKind::Managed => {
            format!("the managed policy ({o}) chooses the host executor: ask whoever manages it")
        }
        Some(o) => format!(
            "{o} chooses the host executor: pass {}, or change \"executor\" there to \"auto\"",
            others.join(" or ")
        ),
        None => format!("pass {}", others.join(" or ")),
    };
    format!("{prefix}: {way_out} (no fallback to direct mode)")
}

/// `garuda policy`, `garuda policy check`, `garuda policy decide`.
fn policy_command(project: Option<PathBuf>, json: bool, action: Option<PolicyCmd>) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = resolve_project(project, &cwd)?;
    match action {
        None => {
            let settings = garuda_policy::load_policy(&project, &host, &Flags::default())?;
            // What a run would refuse or skip, in the run's own words.
            let notices = garuda_policy::check_writable(&settings, &host)?;
            print_notices(&notices);
            let entries = garuda_policy::describe(&settings);
            let implied = implied_executor(&settings, &host.garuda_home);
            if json {
                let out = serde_json::json!({
                    "project": project,
                    "sources": settings.sources.iter().map(|o| o.to_string()).collect::<Vec<_>>(),
                    "entries": entries,
                    "executor_in_use": implied,
                    "notices": notices.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                });
                println!("{}", visible_json(&serde_json::to_string_pretty(&out)?));
            } else {
                println!(
                    "effective policy for {}",
                    garuda_text::visible_path(&project)
                );
                if settings.sources.is_empty() {
                    println!("sources: none (built-in defaults)");
                } else {
                    println!("sources, strictest first:");
                    for s in &settings.sources {
                        println!("  {}", visible(&s.to_string()));
                    }
                }
                println!();
                let shown: Vec<_> = entries.iter().map(visible_entry).collect();
                print!("{}", garuda_policy::render_entries(&shown));
                println!();
                println!("executor in use: {}", visible(&implied));
            }
            Ok(0)
        }
        Some(PolicyCmd::Check { file, source }) => {
            policy_check(&project, &host, &file, source, json)
        }
        Some(PolicyCmd::Decide {
            tool,
            target,
            plan,
            outside_sandbox,
        }) => {
            let settings = garuda_policy::load_policy(&project, &host, &Flags::default())?;
            let Some(request) = Request::from_tool(&tool, &target, outside_sandbox) else {
                bail!(
                    "unknown tool {tool:?}: use read_file, write_file, edit_file, bash, \
                     web_fetch or mcp__server__tool"
                );
            };
            // Commands count as sandboxed only when the effective policy gets an OS sandbox.
            let sandbox_available = executor::select_executor(settings.executor)
                .map(|s| s.executor.kind().is_sandbox())
                .unwrap_or(false);
            let ctx = DecideContext {
                plan_mode: plan,
                sandbox_available,
                session_rules: Vec::new(),
            };
            let decision = Engine::new(&settings, &host, &project).decide(&request, &ctx);
            if json {
                println!(
                    "{}",
                    visible_json(&serde_json::to_string_pretty(&decision)?)
                );
            } else {
                // The reason quotes the target; a cause quotes a rule of a settings file.
                let mut shown = decision;
                shown.reason = visible(&shown.reason).into_owned();
                for cause in &mut shown.causes {
                    cause.rule = visible(&cause.rule).into_owned();
                    cause.source = visible(&cause.source).into_owned();
                }
                println!("{shown}");
            }
            Ok(0)
        }
    }
}

/// Each notice of the policy (a skipped `sandbox.writable` path) as one `garuda:` line on
/// stderr: the same words from `garuda sandbox`, `garuda policy` and `garuda policy check`.
fn print_notices(notices: &[garuda_policy::PolicyNotice]) {
    for n in notices {
        eprintln!("garuda: {}", visible(&n.to_string()));
    }
}

/// An entry of the effective policy with every field printable as one line: a project's
/// settings file (a cloned repository's) chooses its rules and paths, which may hold a newline
/// (a forged `executor in use:` line under them) or a bidirectional override (a rule that
/// reads as another).
fn visible_entry(e: &garuda_policy::Entry) -> garuda_policy::Entry {
    garuda_policy::Entry {
        key: visible(&e.key).into_owned(),
        value: visible(&e.value).into_owned(),
        source: visible(&e.source).into_owned(),
        dropped: e.dropped.as_deref().map(|d| visible(d).into_owned()),
    }
}

/// The executor the effective policy gets on this machine, or why none.
fn implied_executor(settings: &EffectiveSettings, garuda_home: &Path) -> String {
    match select_for_policy(settings.executor, settings, garuda_home) {
        Ok(s) => s.reason,
        Err(e) => format!("none: {e:#}"),
    }
}

/// `garuda policy check FILE`: parse the file as the source it would be, then show how the
/// effective policy changes when it takes that source's place.
fn policy_check(
    project: &Path,
    host: &HostEnv,
    file: &Path,
    source: Option<SourceArg>,
    json: bool,
) -> Result<i32> {
    let kind = match source {
        Some(SourceArg::Managed) => SourceKind::Managed,
        Some(SourceArg::User) => SourceKind::User,
        Some(SourceArg::Project) => SourceKind::Project,
        None => {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            let in_dropins = file
                .parent()
                .and_then(|p| p.file_name())
                .is_some_and(|n| n == "managed-policy.d");
            match name.as_deref() {
                Some("managed-policy.json") => SourceKind::Managed,
                _ if in_dropins => SourceKind::Managed,
                Some("policy.json") => SourceKind::User,
                Some("settings.json") => SourceKind::Project,
                _ => bail!(
                    "cannot tell which source {} would be: say --as managed, --as user or --as project",
                    file.display()
                ),
            }
        }
    };
    if std::fs::symlink_metadata(file).is_err() {
        bail!("{}: no such file", file.display());
    }
    let standard = SourcePaths::standard(project, host);
    let mut replaced = standard.clone();
    match kind {
        SourceKind::Managed => replaced.managed = file.to_path_buf(),
        SourceKind::User => replaced.user = file.to_path_buf(),
        _ => replaced.project = file.to_path_buf(),
    }
    let after = garuda_policy::load_policy_from(&replaced, host, project, &Flags::default())?;
    // What a run under it would refuse or skip, in the run's own words.
    let notices = garuda_policy::check_writable(&after, host)?;
    print_notices(&notices);
    let before = garuda_policy::load_policy_from(&standard, host, project, &Flags::default());
    let after_entries = garuda_policy::describe(&after);
    let before_entries = match &before {
        Ok(b) => garuda_policy::describe(b),
        Err(_) => Vec::new(),
    };
    let same = |a: &garuda_policy::Entry, b: &garuda_policy::Entry| {
        a.key == b.key && a.value == b.value && a.dropped == b.dropped
    };
    let added: Vec<_> = after_entries
        .iter()
        .filter(|a| !before_entries.iter().any(|b| same(a, b)))
        .collect();
    let removed: Vec<_> = before_entries
        .iter()
        .filter(|b| !after_entries.iter().any(|a| same(a, b)))
        .collect();
    if json {
        let out = serde_json::json!({
            "file": file,
            "source": kind.to_string(),
            "valid": true,
            "added": added,
            "removed": removed,
            "notices": notices.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        });
        println!("{}", visible_json(&serde_json::to_string_pretty(&out)?));
        return Ok(0);
    }
    println!(
        "{}: valid as the {kind} policy",
        garuda_text::visible_path(file)
    );
    if let Err(e) = &before {
        println!(
            "(the current policy does not load: {}; showing the file's values)",
            visible(&e.to_string())
        );
    }
    if added.is_empty() && removed.is_empty() {
        println!("no change to the effective policy");
    }
    for e in removed.into_iter().map(visible_entry) {
        println!("- {}  {}  ({})", e.key, e.value, e.source);
    }
    for e in added.into_iter().map(visible_entry) {
        let dropped = e
            .dropped
            .as_ref()
            .map(|d| format!(", dropped: {d}"))
            .unwrap_or_default();
        println!("+ {}  {}  ({}{dropped})", e.key, e.value, e.source);
    }
    Ok(0)
}

/// Where sandboxed commands find the proxy: `http://127.0.0.1:PROXY_PORT` inside their own
/// network namespace (any port would do there: the namespace is theirs alone).
const PROXY_PORT: u16 = 3128;

/// The proxy of one `garuda sandbox` run: the allowlist of the effective policy, one scope
/// whose unix socket lives in a private folder, and what it refused.
struct NetworkSession {
    dir: PathBuf,
    // Field order is drop order: the scope (listener, socket file) before the proxy runtime.
    scope: Option<crate::proxy::CommandScope>,
    _proxy: crate::proxy::Proxy,
    mode: garuda_policy::NetworkMode,
}

impl NetworkSession {
    /// Starts the proxy when the effective policy lists hosts or a host may be asked about;
    /// `None` otherwise (the command then has no network at all). A host the list does not
    /// name is refused, or, with `ask` (the chat's socket), put to the person over it: never
    /// under the strict profile or a managed `managedHostsOnly`, whose list is the whole answer.
    fn start(
        settings: &EffectiveSettings,
        kind: ExecutorKind,
        ask: Option<&Path>,
    ) -> Result<Option<NetworkSession>> {
        // Only a sandboxed command's host is asked about: outside the sandbox the command
        // has the host's whole network, and a proxy on the host's loopback that asks would
        // take questions from any local process.
        let ask = ask.filter(|_| kind.is_sandbox() && crate::proxy::hosts_may_be_asked(settings));
        if settings.network_allow.is_empty() && ask.is_none() {
            return Ok(None);
        }
        let unknown_host = match ask {
            Some(path) => {
                let path = path.to_path_buf();
                crate::proxy::UnknownHost::Ask(std::sync::Arc::new(move |host: &str, port| {
                    crate::staged_ask::ask_host(&path, host, port)
                }))
            }
            None => crate::proxy::UnknownHost::Deny,
        };
        let allowlist = garuda_policy::network::Allowlist {
            entries: settings
                .network_allow
                .iter()
                .map(|(h, _)| h.clone())
                .collect(),
        };
        let proxy = crate::proxy::Proxy::new(crate::proxy::ProxyConfig {
            allowlist,
            resolver: crate::proxy::Resolver::System,
            unknown_host,
            limits: crate::proxy::ProxyLimits::default(),
        })
        .context("starting the network proxy")?;
        let dir = crate::proxy::socket_dir::private_dir()
            .context("making a private folder for the proxy's socket")?;
        let socket = dir.join("proxy.sock");
        let scope = match proxy.listen_unix(&socket) {
            Ok(scope) => scope,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(anyhow!(e).context("listening for the sandbox's proxy traffic"));
            }
        };
        // Inside a sandbox the port is in the command's own namespace; the host executor
        // binds it on the host's loopback, so it takes one that is free now.
        let port = if kind.is_sandbox() {
            PROXY_PORT
        } else {
            free_loopback_port().context("finding a free port for the proxy on the host")?
        };
        let mode = crate::netbridge::proxy_mode(&socket, port).map_err(|e| anyhow!(e))?;
        Ok(Some(NetworkSession {
            dir,
            scope: Some(scope),
            _proxy: proxy,
            mode,
        }))
    }
}

/// What the proxy reports for the audit log's `command_result`: the hosts it refused
/// (`host:port (reason)`) and the allowed hosts it could not reach.
#[derive(Debug, Default)]
struct NetworkReport {
    blocked: Vec<String>,
    unreachable: Vec<serde_json::Value>,
}

impl NetworkSession {
    /// Stops the proxy, prints the hosts it refused and those it could not reach, and returns
    /// them for the audit log.
    fn finish(mut self) -> NetworkReport {
        self.stop()
    }

    fn stop(&mut self) -> NetworkReport {
        let Some(scope) = self.scope.take() else {
            return NetworkReport::default();
        };
        let unreachable = scope.unreachable();
        let blocked = scope.close();
        if !blocked.is_empty() {
            eprintln!("garuda: blocked: {blocked}");
        }
        if !unreachable.is_empty() {
            eprintln!("garuda: could not reach: {unreachable}");
        }
        let listed = blocked
            .into_vec()
            .into_iter()
            .map(|b| format!("{}:{} ({})", b.host, b.port, b.reason))
            .collect();
        let unreachable = unreachable
            .into_vec()
            .into_iter()
            .map(|u| {
                serde_json::json!({
                    "host": u.host,
                    "port": u.port,
                    "error": u.kind.proxy_status(),
                    "reason": u.reason,
                    "count": u.count,
                })
            })
            .collect();
        let _ = std::fs::remove_dir_all(&self.dir);
        NetworkReport {
            blocked: listed,
            unreachable,
        }
    }
}

/// However the run ends (an error included), the proxy stops and its folder goes.
impl Drop for NetworkSession {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port on 127.0.0.1 that nothing listens on now.
fn free_loopback_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// What to do with a staged change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// `sensitive`: `--apply-sensitive` approved the changes to sensitive files.
    Apply {
        sensitive: bool,
    },
    Discard,
}

struct SandboxArgs {
    /// Where a staged command's questions go instead of the terminal.
    ask_socket: Option<PathBuf>,
    executor_flag: Option<ExecutorArg>,
    project: Option<PathBuf>,
    capture: bool,
    timeout: Option<u64>,
    verbose: bool,
    staged: bool,
    strict: bool,
    allow_host: Vec<String>,
    decision: Option<Decision>,
    command: Vec<OsString>,
}

fn sandbox(args: SandboxArgs) -> Result<i32> {
    let SandboxArgs {
        ask_socket,
        executor_flag,
        project,
        capture,
        timeout,
        verbose,
        staged,
        strict,
        allow_host,
        decision,
        command,
    } = args;
    let host = HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let (project, project_from) = resolve_project_from(project, &cwd)?;
    let flags = Flags {
        executor: executor_flag.map(ExecutorChoice::from),
        staged,
        strict,
        allow_hosts: allow_host,
    };
    let settings = garuda_policy::load_policy(&project, &host, &flags)?;
    // An apply interrupted by a crash is finished (or rolled back) before anything else runs.
    for r in garuda_staging::recover(&host.garuda_home)? {
        eprintln!("garuda: {}", visible(&r.to_string()));
    }
    // Every run is an audit session; without one, nothing runs. It opens when first needed:
    // in direct mode, in the executor's release, while the sandbox is being built.
    let mut recorder = crate::record::Recorder::open_later(&host, &project, &settings);
    let run = run_sandbox(
        &mut recorder,
        RunInputs {
            host,
            cwd,
            project,
            settings,
            capture,
            timeout,
            verbose,
            decision,
            ask_socket,
            command,
            project_from,
        },
    );
    match run {
        Ok(code) => {
            recorder.close(serde_json::json!({ "exit_code": code }))?;
            Ok(code)
        }
        // The log could not be opened: that is the error, and there is nothing to record in.
        Err(e) if recorder.failed() => Err(e),
        Err(e) => {
            let kind = if recorder.intent_written() {
                "command_failed"
            } else {
                "refusal"
            };
            let recorded = recorder
                .get()
                .and_then(|r| r.event(kind, serde_json::json!({ "error": describe_error(&e) })));
            let closed = recorder.close(serde_json::json!({ "exit_code": SETUP_FAILED }));
            if let Err(audit) = recorded.and(closed) {
                eprintln!("garuda: {}", visible(&describe_error(&audit)));
            }
            Err(e)
        }
    }
}

/// Everything `sandbox` has resolved before its run (and its audit session, which opens
/// during the run) starts.
struct RunInputs {
    host: HostEnv,
    cwd: PathBuf,
    project: PathBuf,
    settings: EffectiveSettings,
    capture: bool,
    timeout: Option<u64>,
    verbose: bool,
    decision: Option<Decision>,
    ask_socket: Option<PathBuf>,
    command: Vec<OsString>,
    project_from: ProjectFrom,
}

/// The part of `garuda sandbox` that its audit session records: checks, the intent, the
/// command, its result. The session opens when first needed ([`LazyRecorder`]): in direct
/// mode in the command's release, while the sandbox is being built.
///
/// [`LazyRecorder`]: crate::record::LazyRecorder
fn run_sandbox(recorder: &mut crate::record::LazyRecorder, inputs: RunInputs) -> Result<i32> {
    let RunInputs {
        host,
        cwd,
        project,
        settings,
        capture,
        timeout,
        verbose,
        decision,
        ask_socket,
        command,
        project_from,
    } = inputs;
    let staged = settings.command_mode == CommandMode::Staged;
    if decision.is_some() && !staged {
        let flag = match decision {
            Some(Decision::Apply { .. }) => "--apply",
            _ => "--discard",
        };
        bail!("{flag} needs a staged command: add --staged (without it the command changes the project directly, and there is no change to apply or discard)");
    }
    let choice = settings.executor;
    check_project_executor(&settings, &host.garuda_home)?;
    let (mut policy, notices) = garuda_policy::build_exec_policy_noting(&project, &settings, &host)
        .map_err(|e| match e {
            garuda_policy::PolicyError::ProjectRootTooBroad { .. } => {
                anyhow!("{e}; {}", too_broad_hint(&project_from, &project))
            }
            e => anyhow!(e),
        })?;
    print_notices(&notices);
    if project_from == ProjectFrom::CurrentFolder {
        // Not an error: a folder that is not a git project is still a project. But the user
        // may not have meant this folder to be the one the command can write.
        eprintln!(
            "garuda: no .git in {} or above it, so it is the project (the folder the command can write); cd into your project, or name it with --project DIR",
            garuda_text::visible_path(&project)
        );
    }
    if let Some(secs) = timeout {
        policy.limits.timeout = Some(Duration::from_secs(secs));
    }
    let selection = select_for_policy(choice, &settings, &host.garuda_home)?;
    if selection.executor.kind() == ExecutorKind::Host {
        if staged {
            bail!(staged_on_host_error(&settings));
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
    // Dropped when this function returns, after the command's output: prints what the proxy
    // refused.
    let mut network =
        NetworkSession::start(&settings, selection.executor.kind(), ask_socket.as_deref())?;
    if let Some(n) = &network {
        policy.network = n.mode.clone();
        if verbose {
            let hosts: Vec<String> = settings
                .network_allow
                .iter()
                .map(|(h, _)| h.to_string())
                .collect();
            eprintln!("garuda: network through the proxy to: {}", hosts.join(", "));
        }
    }
    let intent = serde_json::json!({
        "argv": spec.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "cwd": spec.cwd.as_ref().unwrap_or(&project).display().to_string(),
        "executor": selection.executor.kind().name(),
        "mode": if staged { "staged" } else { "direct" },
        "network_allow": settings
            .network_allow
            .iter()
            .map(|(h, _)| h.to_string())
            .collect::<Vec<_>>(),
        "timeout_s": timeout,
    });
    if !staged {
        // The command's release (`Executor::run_released`) opens the audit session, writes the
        // intent and syncs it, while the sandbox is being built: the command's program starts
        // only after the three.
        let mut unwritten = Some(intent);
        let (outcome, interrupted, _signals) =
            run_forwarding_signals(&*selection.executor, &spec, &policy, mode, &mut || {
                release_recorded(recorder, &mut unwritten, verbose).map_err(|e| format!("{e:#}"))
            });
        if let (Some(intent), false) = (unwritten, recorder.failed()) {
            // The executor ended without calling the release: the sandbox failed in its setup,
            // or it found no program to run (bubblewrap answers 127 itself). It was tried, so
            // its intent is on record before its failure or result (a command that failed, not
            // a refusal). After a failed open the open's error is the run's.
            recorder.get()?.intent_unsynced(intent)?;
        }
        let outcome = outcome.map_err(|e| anyhow!(e))?;
        let code = finish(&outcome, capture, interrupted);
        let report = network
            .take()
            .map(NetworkSession::finish)
            .unwrap_or_default();
        network_off_hint(&outcome, &settings, &host, &project);
        recorder.get()?.event(
            "command_result",
            result_event(&outcome, &report, None, interrupted),
        )?;
        return Ok(code);
    }
    recorder.get()?.intent(intent)?;
    if verbose {
        eprintln!("garuda: audit session {}", recorder.get()?.session_id());
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
        ask_socket.as_deref(),
    );
    // The session folder goes whatever happened; a failure to remove it is only reported.
    if let Err(e) = session.close() {
        eprintln!(
            "garuda: could not remove the staging folder: {}",
            visible(&e.to_string())
        );
    }
    let (outcome, staged_result, interrupted, not_applied) = result?;
    if let Some(path) = &ask_socket {
        // The asker hears what became of the change (its answer is only an acknowledgement).
        let what = crate::staged_ask::StagedQuestion::Outcome {
            what: staged_result.to_string(),
        };
        let _ = crate::staged_ask::ask(path, &what);
    }
    let code = finish(&outcome, capture, interrupted);
    // A change that was not applied says so in the exit code, whatever the command's own
    // code: `garuda sandbox --staged --apply -- … && git commit` must not commit.
    let code = match (interrupted, not_applied) {
        (None, Some(not_applied)) => not_applied,
        _ => code,
    };
    let report = network
        .take()
        .map(NetworkSession::finish)
        .unwrap_or_default();
    network_off_hint(&outcome, &settings, &host, &project);
    recorder.get()?.event(
        "command_result",
        result_event(&outcome, &report, Some(staged_result), interrupted),
    )?;
    Ok(code)
}

/// A direct command's release: the audit session opened (if it is not yet), the intent
/// written and every line made durable. Runs once, while the sandbox is being built.
fn release_recorded(
    recorder: &mut crate::record::LazyRecorder,
    intent: &mut Option<serde_json::Value>,
    verbose: bool,
) -> Result<()> {
    let recorder = recorder.get()?;
    if verbose {
        eprintln!("garuda: audit session {}", recorder.session_id());
    }
    if let Some(intent) = intent.take() {
        recorder.intent_unsynced(intent)?;
    }
    recorder.make_durable()
}

/// With the network off, a command that asked the resolver stub for a name gets the line that
/// says so and how to allow a host (see [`crate::dnsstub`]).
fn network_off_hint(
    outcome: &executor::Outcome,
    settings: &EffectiveSettings,
    host: &HostEnv,
    project: &Path,
) {
    let user_policy = SourcePaths::standard(project, host).user;
    let managed = settings.managed_hosts_only.as_ref().map(|o| o.to_string());
    if let Some(line) = crate::dnsstub::hint(&outcome.lookups, &user_policy, managed.as_deref()) {
        eprintln!("garuda: {line}");
    }
}

/// The `command_result` event of the audit log.
fn result_event(
    outcome: &executor::Outcome,
    network: &NetworkReport,
    staged: Option<&str>,
    interrupted: Option<i32>,
) -> serde_json::Value {
    let (status, detail) = match outcome.status {
        executor::ExitStatus::Code(c) => ("exited", Some(c)),
        executor::ExitStatus::Signal(s) => ("killed by signal", Some(s)),
        executor::ExitStatus::TimedOut => ("timed out", None),
    };
    serde_json::json!({
        "status": status,
        "code": detail,
        "exit_code": outcome.status.code(),
        "duration_ms": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        "blocked": network.blocked,
        "unreachable": network.unreachable,
        "lookups": outcome.lookups.names(),
        "namespaces_made_ahead": outcome.namespaces_made_ahead,
        "staged": staged,
        "interrupted_by_signal": interrupted,
    })
}

/// Runs the command with SIGINT, SIGTERM and SIGHUP forwarded: a signal to `garuda` kills the
/// command's whole sandbox and is returned, so the run still reports, records and cleans up.
fn run_forwarding_signals(
    executor: &dyn executor::Executor,
    spec: &CommandSpec,
    policy: &garuda_policy::ExecPolicy,
    mode: StdioMode,
    release: executor::Release<'_>,
) -> (
    Result<executor::Outcome, executor::ExecError>,
    Option<i32>,
    Option<crate::sys::SignalForwarding>,
) {
    let forwarding = match crate::sys::SignalForwarding::install() {
        Ok(f) => Some(f),
        Err(e) => {
            // Not a confinement: without it a signal simply ends garuda the old way.
            eprintln!(
                "garuda: cannot catch signals ({e}); a signal will end garuda without cleanup"
            );
            None
        }
    };
    let outcome = executor.run_released(spec, policy, mode, release);
    let received = forwarding.as_ref().and_then(|f| f.received());
    // The caller keeps the handlers until its cleanup is done: a second Ctrl-C then only
    // records itself instead of ending garuda half-way (the command is already gone).
    (outcome, received, forwarding)
}

/// Print captured output and the timeout or signal note; the exit code to return.
fn finish(outcome: &executor::Outcome, capture: bool, interrupted: Option<i32>) -> i32 {
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
    if let Some(signal) = interrupted {
        eprintln!("garuda: signal {signal} received: the command and its sandbox were killed");
        return 128 + signal;
    }
    outcome.status.code()
}

/// The exit code of an apply that did not happen: [`APPLY_REFUSED`] when Garuda would not
/// apply this change as it stands (the list is incomplete, a link points out of the project,
/// a project file changed while the command ran, a staged file changed after it was shown, a
/// path outside the project or in `.git`, a file where the change needs a folder),
/// [`APPLY_FAILED`] when it tried and could not (an I/O error, a journal, a commit that could
/// not be finished). No wildcard on purpose: a new [`StagingError`] must be classified here.
fn apply_error_code(e: &StagingError) -> i32 {
    match e {
        StagingError::Incomplete { .. }
        | StagingError::LinkOutOfRoot { .. }
        | StagingError::Conflict { .. }
        | StagingError::StagedChanged { .. }
        | StagingError::Unsupported { .. }
        | StagingError::UnsafeProjectPath { .. }
        | StagingError::Guarded { .. } => APPLY_REFUSED,
        StagingError::Io { .. }
        | StagingError::RecoveryStopped { .. }
        | StagingError::Journal { .. }
        | StagingError::CommitUnfinished { .. }
        | StagingError::ProjectNotDir { .. }
        | StagingError::Overlapping { .. }
        | StagingError::OverlayUnavailable
        | StagingError::TooLarge { .. }
        | StagingError::TooManyFiles { .. }
        | StagingError::CopyFailed { .. } => APPLY_FAILED,
    }
}

/// Run one command over the session's staged view, show the change and apply or discard it.
/// The last value is the exit code when the change was not applied (see the module doc);
/// `None` when it was applied, there was none, or `--discard` asked for the discard.
fn run_staged(
    session: &mut Session,
    executor: &dyn executor::Executor,
    spec: &CommandSpec,
    mut policy: garuda_policy::ExecPolicy,
    mode: StdioMode,
    decision: Option<Decision>,
    ask_socket: Option<&Path>,
) -> Result<(executor::Outcome, &'static str, Option<i32>, Option<i32>)> {
    let mark = session.prepare()?;
    policy.staged = Some(session.view());
    // Dropped before the apply/discard question, which Ctrl-C must be able to interrupt.
    // The intent was made durable before the staging session was prepared.
    let (outcome, interrupted, _) =
        run_forwarding_signals(executor, spec, &policy, mode, &mut || Ok(()));
    let outcome = outcome.map_err(|e| anyhow!(e))?;
    let set = session.changes(&mark)?;
    if set.is_empty() {
        eprintln!("garuda: the command changed nothing that could be applied");
        return Ok((outcome, "no change", interrupted, None));
    }
    if interrupted.is_some() {
        // Never apply the half-made change of an interrupted command.
        session.discard(&set)?;
        eprintln!("garuda: the command was interrupted: its change was discarded and the project did not change");
        return Ok((outcome, "discarded (interrupted)", interrupted, None));
    }
    if outcome.status == executor::ExitStatus::TimedOut {
        // Killed at the timeout, the command stopped wherever it was: its change is as
        // half-made as an interrupted one's. The exit code stays the timeout's (124).
        session.discard(&set)?;
        eprintln!("garuda: the command was killed at the timeout: its change was discarded and the project did not change");
        return Ok((outcome, "discarded (timed out)", None, None));
    }
    let rendered = garuda_staging::render(&set, session);
    eprintln!("{rendered}");
    // Only `--discard` makes a discard the caller's own choice; a discard at the question or
    // for want of a terminal is "not applied" to a script that chained on the exit code.
    let discard_code = if decision.is_some() {
        None
    } else {
        Some(STAGED_DISCARDED)
    };
    // Changes to Garuda's own settings and to sensitive files need a yes of their own: a
    // question on the terminal, or (sensitive files only) `--apply-sensitive`.
    let asked = decision.is_none();
    let decision = match decision {
        Some(d) => d,
        None => ask_apply_or_discard(ask_socket, &rendered, set.can_apply())?,
    };
    let mut approved = Vec::new();
    if let (Decision::Apply { sensitive }, true) = (decision, set.can_apply()) {
        match approve_guards(&set, asked, sensitive, ask_socket)? {
            Ok(guards) => approved = guards,
            Err((what, code)) => {
                session.discard(&set)?;
                return Ok((outcome, what, interrupted, Some(code)));
            }
        }
    }
    let (what, not_applied) = match decision {
        Decision::Apply { .. } if !set.can_apply() => {
            session.discard(&set)?;
            eprintln!("garuda: the change cannot be applied (see above); it was discarded and the project did not change");
            ("discarded (could not be applied)", Some(APPLY_REFUSED))
        }
        Decision::Apply { .. } => match session.apply_approved(&set, &approved) {
            Ok(applied) => {
                eprintln!("garuda: applied: {applied}");
                ("applied", None)
            }
            // Past the commit point the change is applied, only not finished: the journal
            // finishes it at the next start (or when this session closes). Do not discard.
            // Until then the project may hold part of it: a failure to the caller.
            Err(e @ StagingError::CommitUnfinished { .. }) => {
                eprintln!(
                    "garuda: the change is committed but not fully written: {}",
                    visible(&e.to_string())
                );
                (
                    "applied (committed, finished by the journal)",
                    Some(apply_error_code(&e)),
                )
            }
            Err(e) => {
                let code = apply_error_code(&e);
                session.discard(&set)?;
                eprintln!(
                    "garuda: nothing was applied: {}; the change was discarded and the project did not change",
                    visible(&e.to_string())
                );
                if code == APPLY_REFUSED {
                    ("discarded (apply refused)", Some(code))
                } else {
                    ("discarded (apply failed)", Some(code))
                }
            }
        },
        Decision::Discard => {
            session.discard(&set)?;
            eprintln!("garuda: discarded: the project did not change");
            ("discarded", discard_code)
        }
    };
    Ok((outcome, what, interrupted, not_applied))
}

/// The guards ([`Guard`]) that cover part of `set`, each approved or not: on a terminal
/// (`asked`) by a question of its own after "apply", else by the flag that approves it
/// (`--apply-sensitive` for sensitive files; Garuda's settings have no flag). At the first
/// one not approved, says so on stderr and gives the audit log's word for it and the exit
/// code: 121 for a no at the question (a discard at the question), 122 for a missing flag
/// (Garuda refusing the change as it stands).
fn approve_guards(
    set: &garuda_staging::ChangeSet,
    asked: bool,
    sensitive_flag: bool,
    ask_socket: Option<&Path>,
) -> Result<std::result::Result<Vec<Guard>, (&'static str, i32)>> {
    let mut approved = Vec::new();
    for guard in Guard::ALL {
        let paths: Vec<String> = set
            .guarded(guard)
            .iter()
            .map(|c| visible(&c.path).into_owned())
            .collect();
        if paths.is_empty() {
            continue;
        }
        let yes = if asked {
            ask_guard(guard, ask_socket)?
        } else {
            guard == Guard::Sensitive && sensitive_flag
        };
        if yes {
            approved.push(guard);
            continue;
        }
        let list = paths.join(", ");
        let code = match (guard, asked) {
            (Guard::GarudaSettings, true) => {
                eprintln!("garuda: not applied: the change touches Garuda's project settings (.garuda/); it was discarded and the project did not change");
                STAGED_DISCARDED
            }
            (Guard::GarudaSettings, false) => {
                eprintln!("garuda: nothing was applied: the change touches Garuda's project settings (.garuda/), which --apply never applies on its own; run the command again without --apply, on a terminal, to answer a question of its own for them, or make that change to .garuda/ yourself. The change was discarded and the project did not change");
                APPLY_REFUSED
            }
            (Guard::Sensitive, true) => {
                eprintln!("garuda: not applied: the change touches sensitive files ({list}); it was discarded and the project did not change");
                STAGED_DISCARDED
            }
            (Guard::Sensitive, false) => {
                eprintln!("garuda: nothing was applied: the change touches sensitive files ({list}), which --apply alone never applies; add --apply-sensitive to apply them too, or run the command again without --apply, on a terminal, to answer a question of their own for them. The change was discarded and the project did not change");
                APPLY_REFUSED
            }
        };
        let what = match guard {
            Guard::GarudaSettings => "refused (touches Garuda's settings)",
            Guard::Sensitive => "refused (touches sensitive files)",
        };
        return Ok(Err((what, code)));
    }
    Ok(Ok(approved))
}

/// The question of a guard's own, asked after "apply": Garuda's settings can loosen what
/// later commands may do, and a sensitive file's content was not shown, so a yes to the
/// change is no yes to them. Anything but `y` or `yes` (or the end of input) is a no.
fn ask_guard(guard: Guard, ask_socket: Option<&Path>) -> Result<bool> {
    use std::io::BufRead;
    let text = match guard {
        Guard::GarudaSettings => "This change also writes Garuda's project settings (.garuda/, listed above), which can loosen what later commands may do. Apply them too?",
        Guard::Sensitive => "This change also writes sensitive files (listed above under \"Sensitive files changed\"), whose content is not shown. Apply them too?",
    };
    if let Some(path) = ask_socket {
        let question = crate::staged_ask::StagedQuestion::Guard { text: text.into() };
        return Ok(crate::staged_ask::ask(path, &question));
    }
    eprint!("{text} [y/N] ");
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        return Ok(false);
    }
    Ok(matches!(line.trim(), "y" | "yes"))
}

/// Ask on the terminal. Without one, discard and say so: an unattended run never applies a
/// change nobody saw.
fn ask_apply_or_discard(
    ask_socket: Option<&Path>,
    rendered: &str,
    can_apply: bool,
) -> Result<Decision> {
    use std::io::{BufRead, IsTerminal};
    if let Some(path) = ask_socket {
        let question = crate::staged_ask::StagedQuestion::ApplyOrDiscard {
            summary: rendered.to_string(),
            can_apply,
        };
        return Ok(if crate::staged_ask::ask(path, &question) && can_apply {
            Decision::Apply { sensitive: false }
        } else {
            Decision::Discard
        });
    }
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
            "a" | "apply" if can_apply => return Ok(Decision::Apply { sensitive: false }),
            "d" | "discard" => return Ok(Decision::Discard),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    /// [`sandbox_words`] must never read a line otherwise than clap: for each line it reads,
    /// clap reads it too and gives the same value. The common lines must be its (else the fast
    /// path would silently never be taken), and thousands of lines made of the options, their
    /// values, mistakes and `--` in any order must be read alike or left to clap.
    #[test]
    fn the_sandbox_words_are_read_as_clap_reads_them() {
        let same = |args: &[OsString]| {
            let Some(flags) = sandbox_words(args) else {
                return false;
            };
            let full = Cli::try_parse_from(args)
                .unwrap_or_else(|e| panic!("{args:?}: read without clap, refused by clap: {e}"));
            assert_eq!(
                format!("{:?}", Cli::with_command(Cmd::Sandbox(flags))),
                format!("{full:?}"),
                "{args:?}"
            );
            true
        };
        let common: &[&[&str]] = &[
            &["garuda", "sandbox", "--", "true"],
            &[
                "garuda",
                "sandbox",
                "--executor",
                "landlock",
                "--",
                "/bin/true",
                "-x",
            ],
            &[
                "garuda",
                "sandbox",
                "--executor",
                "bubblewrap",
                "--staged",
                "--apply",
                "--apply-sensitive",
                "--",
                "sh",
                "-c",
                "x",
            ],
            &[
                "garuda",
                "sandbox",
                "-v",
                "--timeout",
                "5",
                "--allow-host",
                "a.example",
                "--allow-host",
                "b.example:8080",
                "--",
                "x",
                "--",
                "-v",
            ],
            &[
                "garuda",
                "sandbox",
                "--project",
                "/tmp/p",
                "--capture",
                "--strict",
                "--discard",
                "--",
                "x",
            ],
            &[
                "garuda",
                "sandbox",
                "--verbose",
                "--executor",
                "host",
                "--",
                "x",
            ],
        ];
        for line in common {
            let args = words(line);
            assert!(same(&args), "{line:?}: left to clap");
            assert_eq!(
                format!("{:?}", parse(&args, sandbox_words(&args)).unwrap()),
                format!("{:?}", Cli::try_parse_from(&args).unwrap())
            );
        }
        // Left to clap: its answer (help, an error, another subcommand) is what `parse` gives.
        let others: &[&[&str]] = &[
            &["garuda", "sandbox", "true"],
            &["garuda", "sandbox"],
            &["garuda", "sandbox", "--"],
            &["garuda", "sandbox", "--apply", "--discard", "--", "x"],
            &["garuda", "sandbox", "--apply-sensitive", "--", "x"],
            &["garuda", "sandbox", "--ask-socket", "/s", "--", "x"],
            &["garuda", "sandbox", "--timeout", "0", "--", "x"],
            &["garuda", "sandbox", "--executor", "bogus", "--", "x"],
            &["garuda", "sandbox", "--executor=landlock", "--", "x"],
            &["garuda", "sandbox", "--capture", "--capture", "--", "x"],
            &["garuda", "sandbox", "--help"],
            &["garuda", "sandbox", "-p", "task", "--", "x"],
            &["garuda", "-p", "task"],
            &["garuda", "--project", "/tmp", "sandbox", "--", "x"],
            &["garuda", "doctor"],
        ];
        for line in others {
            let args = words(line);
            assert!(sandbox_words(&args).is_none(), "{line:?}");
            let (full, ours) = (
                Cli::try_parse_from(&args),
                parse(&args, sandbox_words(&args)),
            );
            match (&full, &ours) {
                (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{line:?}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{line:?}"),
                _ => panic!("{line:?}: {full:?} against {ours:?}"),
            }
        }
        // Generated lines (a fixed xorshift sequence: the same lines on every run).
        let tokens = [
            "--capture",
            "-v",
            "--verbose",
            "--staged",
            "--apply",
            "--discard",
            "--apply-sensitive",
            "--strict",
            "--executor",
            "landlock",
            "bubblewrap",
            "auto",
            "host",
            "seatbelt",
            "Landlock",
            "bogus",
            "--project",
            "/tmp/p",
            "rel",
            "-x",
            "",
            "--timeout",
            "5",
            "+7",
            "0",
            "x",
            "31536001",
            "--allow-host",
            "a.example",
            "h:1",
            "--",
            "--",
            "sh",
            "--ask-socket",
            "--executor=host",
            "-vv",
            "--timeout=3",
            "-",
            "--help",
            "-h",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut read = 0;
        for _ in 0..20_000 {
            let len = (next() % 9) as usize;
            let mut line = vec!["garuda", "sandbox"];
            line.extend((0..len).map(|_| tokens[(next() % tokens.len() as u64) as usize]));
            if next() % 2 == 0 {
                line.extend(["--", "cmd"]);
            }
            if same(&words(&line)) {
                read += 1;
            }
        }
        assert!(
            read > 1_000,
            "only {read} generated lines were read without clap"
        );
    }
}
