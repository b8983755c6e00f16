//! `garuda -p TASK`: one task for the confined agent, from the prompt to the exit code.
//!
//! The supervisor does everything with a side effect and the agent only asks: this module
//! resolves the model and its key ([`crate::models`]), starts a proxy whose allowlist is
//! exactly the model's host, spawns the agent in its sandbox ([`crate::agent::spawn_agent`]),
//! sends it `start` (the endpoint and key, the limits, the system prompt with the project's
//! instruction files, and for `--resume` the session's journal), answers its requests through
//! the broker ([`crate::broker`]) with the session's tool host, and prints what the agent
//! shows: the model's text on stdout, activity on stderr. Every request and decision goes to
//! the audit session of the run; the conversation goes to the session journal
//! ([`crate::sessions`]).
//!
//! Exit codes: 0 the model finished; 1 an error (the model's API failed, a refusal, setup);
//! 2 a limit stopped it (steps, tokens, repeated calls, the output limit); 130 Ctrl-C.

use std::cell::Cell;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use garuda_ipc::{Answer, Limits, Request, Start, StopReason, ToolSpec, UiEvent};
use garuda_policy::engine::{Context as EngineContext, Engine};
use garuda_policy::{EffectiveSettings, HostEnv};
use serde_json::{json, Value};

use crate::agent::{spawn_agent, AgentProxy, AgentSpawn};
use crate::broker::host::{Approval, Approver, CommandRunner, SessionTools};
use crate::broker::server::{AuditSink, Broker, ToolHost};
use crate::broker::FileTools;
use crate::record::Recorder;
use crate::sessions::SessionStore;

/// The session's token budget when `--token-budget` does not set one.
const DEFAULT_TOKEN_BUDGET: u64 = 20_000_000;

/// Port of the proxy bridge inside the agent's network namespace.
const AGENT_PROXY_PORT: u16 = 3128;

/// Instruction files read from the project root, in this order, into the system prompt.
pub const INSTRUCTION_FILES: [&str; 4] =
    ["AGENTS.md", "CLAUDE.md", "GARUDA.md", ".garuda/memory.md"];

/// Longest instruction file taken whole; a longer one is cut with a note.
const MAX_INSTRUCTION_BYTES: usize = 64 * 1024;

/// How `-p` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// The model's text on stdout as it streams.
    #[default]
    Text,
    /// One JSON object at the end (Claude Code's `result` fields).
    Json,
    /// One JSON object per line as the turn goes (Claude Code's `stream-json`).
    StreamJson,
}

/// What becomes of a staged command's change when no person is there to ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StagedUnattended {
    /// Discard it: the project does not change (the safe default).
    #[default]
    Discard,
    /// Apply it (changes to sensitive files excepted: those are discarded).
    Apply,
}

/// Everything `-p` was given.
#[derive(Debug, Default)]
pub struct RunArgs {
    /// The task (`None`: read it from stdin).
    pub prompt: Option<String>,
    /// `-m provider/model`.
    pub model: Option<String>,
    /// `--project`.
    pub project: Option<PathBuf>,
    /// `--output-format`.
    pub format: OutputFormat,
    /// `--resume [ID]`: `Some(None)` the latest session of the project.
    pub resume: Option<Option<String>>,
    /// `--staged`.
    pub staged: bool,
    /// `--strict`.
    pub strict: bool,
    /// `--staged-changes`.
    pub staged_unattended: StagedUnattended,
    /// `--max-steps`.
    pub max_steps: Option<u32>,
    /// `--token-budget`.
    pub token_budget: Option<u64>,
    /// `--replay ID|FILE|DIR`.
    pub replay: Option<String>,
    /// `--allow RULE`: rules the person running `-p` allows for this session (`Edit(**)`,
    /// `Bash(cargo test *)`), as "allow for the session" answers in the chat; deny rules and
    /// the managed policy still win.
    pub allow: Vec<String>,
}

/// What a session is, for a front end's first line.
pub struct SessionFacts<'a> {
    /// The model, as `provider/model`.
    pub model: &'a str,
    /// The executor setting.
    pub executor: String,
    /// Commands are staged.
    pub staged: bool,
    /// The journal's session id.
    pub session_id: &'a str,
    /// The project.
    pub project: &'a Path,
    /// The session's token budget (`--token-budget`).
    pub token_budget: u64,
    /// The environment the session was started in (a `/model` is checked against it).
    pub host: &'a HostEnv,
}

/// How a session of the chat ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatEnd {
    /// The chat is over, with this exit code.
    Exit(i32),
    /// The chat goes on in another session (`/clear`, `/resume ID`, `/model REF`): this one is
    /// taken down (its agent, its audit session) and the next one set up as `garuda` would.
    Switch(SessionSwitch),
}

/// The next session of the chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSwitch {
    /// The model (`None`: the same).
    pub model: Option<String>,
    /// The session to continue (`None`: a new one, with no history).
    pub resume: Option<String>,
}

/// A front end that runs many turns on one session (the chat): it answers the questions and
/// drives the turns; `run` sets the session up and takes it down around it.
pub trait Front {
    /// Who answers the session's questions.
    fn approver(&self) -> Box<dyn Approver>;
    /// Runs the turns; how the session ends.
    fn drive(&self, turns: &mut Turns<'_, '_, '_>, facts: &SessionFacts<'_>) -> Result<ChatEnd>;
    /// Where the agent's stderr lines go instead of this process's stderr (a terminal in raw
    /// mode needs them drawn as its own lines).
    fn agent_stderr(&self) -> Option<Box<dyn Write + Send>> {
        None
    }
}

/// The audit session as the broker's sink.
struct RecorderSink<'a>(&'a mut Recorder);

impl AuditSink for RecorderSink<'_> {
    fn record(&mut self, kind: &str, event: Value) -> Result<(), String> {
        self.0.event(kind, event).map_err(|e| format!("{e:#}"))
    }

    fn record_durable(&mut self, kind: &str, event: Value) -> Result<(), String> {
        self.0
            .durable_event(kind, event)
            .map_err(|e| format!("{e:#}"))
    }

    fn make_durable(&mut self) -> Result<(), String> {
        self.0.make_durable().map_err(|e| format!("{e:#}"))
    }
}

/// No person to ask in `-p`: every question is answered no, and says so on stderr.
struct Unattended;

impl Approver for Unattended {
    fn approve(&mut self, approval: &Approval) -> bool {
        eprintln!(
            "garuda: {} {} needs a yes and there is no one to ask (-p): refused ({})",
            approval.tool,
            garuda_text::visible(&approval.target),
            garuda_text::visible(&approval.reason)
        );
        false
    }
}

/// Where the line of activity for each request goes.
pub enum Activity {
    /// Nowhere (`-p` with a JSON format).
    Quiet,
    /// Stderr, as `garuda: read README.md` (`-p`'s text format).
    Stderr,
    /// A front end's own output (the chat's `· read README.md`).
    Lines(Box<dyn Fn(&str)>),
}

impl Activity {
    fn show(&self, line: &str) {
        match self {
            Activity::Quiet => {}
            Activity::Stderr => eprintln!("garuda: {line}"),
            Activity::Lines(show) => show(line),
        }
    }
}

/// The tool host, with one line of activity per request (the supervisor's own words: the
/// agent's progress events are not shown in their place).
struct Shown<'a, 'b> {
    inner: &'a mut SessionTools<'b>,
    activity: Activity,
    /// Set when a request ran: the next text the model streams starts on a new line.
    step: Rc<Cell<bool>>,
}

impl ToolHost for Shown<'_, '_> {
    fn call_batch(&mut self, requests: &[Request]) -> Vec<(Answer, Option<Value>)> {
        self.step.set(true);
        let results = self.inner.call_batch(requests);
        for (request, (answer, _)) in requests.iter().zip(&results) {
            if let Some(line) = describe(request) {
                let how = match answer {
                    Answer::Error { code, .. } => {
                        format!(" → {}", json!(code).as_str().unwrap_or("error"))
                    }
                    _ => String::new(),
                };
                self.activity.show(&format!("{line}{how}"));
            }
        }
        results
    }

    fn call(&mut self, request: &Request) -> (Answer, Option<Value>) {
        self.shown(request, |tools| tools.call(request))
    }

    fn call_released(
        &mut self,
        request: &Request,
        release: crate::executor::Release<'_>,
    ) -> (Answer, Option<Value>) {
        self.shown(request, |tools| tools.call_released(request, release))
    }

    fn after_command(&mut self) {
        self.inner.after_command();
    }
}

impl Shown<'_, '_> {
    /// Runs one request with `run` and shows its line.
    fn shown(
        &mut self,
        request: &Request,
        run: impl FnOnce(&mut SessionTools<'_>) -> (Answer, Option<Value>),
    ) -> (Answer, Option<Value>) {
        let line = describe(request);
        if line.is_some() {
            self.step.set(true);
        }
        let (answer, event) = run(self.inner);
        if let Some(line) = line {
            let how = match &answer {
                Answer::Error { code, .. } => {
                    format!(" → {}", json!(code).as_str().unwrap_or("error"))
                }
                Answer::CommandDone(done) => match (done.exit_code, done.signal) {
                    (Some(c), _) => format!(" → exit {c}"),
                    (None, Some(s)) => format!(" → signal {s}"),
                    _ => String::new(),
                },
                _ => String::new(),
            };
            self.activity.show(&format!("{line}{how}"));
        }
        (answer, event)
    }
}

/// One line for the user about a request (`None` for the journal).
fn describe(request: &Request) -> Option<String> {
    let v = garuda_text::visible;
    Some(match request {
        Request::ReadFile { path, .. } => format!("read {}", v(path)),
        Request::WriteFile { path, .. } => format!("write {}", v(path)),
        Request::EditFile { path, .. } => format!("edit {}", v(path)),
        Request::Glob { pattern, .. } => format!("glob {}", v(pattern)),
        Request::Grep { pattern, .. } => format!("grep {}", v(pattern)),
        Request::RunCommand { command, .. } => format!("run {}", v(command)),
        Request::JournalAppend { .. } => return None,
    })
}

/// The system prompt: who the agent is, the rules in force, and the project's instruction
/// files. Fixed for the session.
pub fn system_prompt(project: &Path, settings: &EffectiveSettings, executor: &str) -> String {
    let staged = settings.command_mode == garuda_policy::CommandMode::Staged;
    let hosts: Vec<String> = settings
        .network_allow
        .iter()
        .map(|(h, _)| h.to_string())
        .collect();
    let mut text = format!(
        "You are Garuda, a coding agent working in the project at {project}.\n\
         Every tool call is a request to Garuda's supervisor, which checks it against the \
         policy and may refuse it; a refusal is an error result that says why.\n\
         Rules in force:\n\
         - File tools work on project-relative paths; secrets (.env files, keys) and .git \
         internals are refused.\n\
         - bash runs each command in an OS sandbox ({executor}): the project is writable, the \
         rest of the machine is read-only, and {network}.\n\
         - {staging}\n\
         - The profile is {profile}.\n",
        project = project.display(),
        network = if hosts.is_empty() {
            "there is no network".to_string()
        } else {
            format!("the network reaches only {}", hosts.join(", "))
        },
        staging = if staged {
            "Commands are staged: a command's changes to the project are shown to the user, who applies or discards them."
        } else {
            "Commands change the project directly."
        },
        profile = settings.profile,
    );
    for name in INSTRUCTION_FILES {
        let Some(body) = read_instruction(project, name) else {
            continue;
        };
        text.push_str(&format!("\n# {name}\n\n{body}\n"));
    }
    text
}

/// An instruction file of the project, read without following a link out of it.
fn read_instruction(project: &Path, name: &str) -> Option<String> {
    let root = crate::broker::ProjectRoot::open(project).ok()?;
    let shown = name.to_string();
    let path = garuda_ipc::ProjectPath::parse(name).ok()?;
    let found = root.lookup(&path).ok()?;
    let mut file = root.open_for_reading(&shown, &found).ok()?;
    let mut bytes = Vec::new();
    use std::io::Read;
    (&mut file)
        .take(MAX_INSTRUCTION_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let cut = bytes.len() > MAX_INSTRUCTION_BYTES;
    bytes.truncate(MAX_INSTRUCTION_BYTES);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if cut {
        text.push_str("\n[cut: the file is longer than 64 KiB]");
    }
    Some(text)
}

fn exit_code(reason: StopReason) -> i32 {
    match reason {
        StopReason::Done => 0,
        StopReason::MaxSteps
        | StopReason::TokenBudget
        | StopReason::RepeatedCalls
        | StopReason::MaxTokens => 2,
        StopReason::Cancelled => 130,
        StopReason::Refusal | StopReason::ModelError => 1,
    }
}

fn reason_name(reason: StopReason) -> String {
    json!(reason).as_str().unwrap_or("unknown").to_string()
}

/// Runs `-p`, or with `front` the chat (one session after another, as its `/clear`,
/// `/resume` and `/model` ask); the exit code.
pub fn run(mut args: RunArgs, front: Option<&dyn Front>) -> Result<i32> {
    loop {
        match run_session(&mut args, front)? {
            ChatEnd::Exit(code) => return Ok(code),
            ChatEnd::Switch(switch) => {
                if let Some(model) = switch.model {
                    args.model = Some(model);
                }
                args.resume = switch.resume.map(Some);
            }
        }
    }
}

/// One session: `-p`'s, or one of the chat's.
fn run_session(args: &mut RunArgs, front: Option<&dyn Front>) -> Result<ChatEnd> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let replay = match args.replay.clone() {
        None => None,
        Some(arg) => Some(prepare_replay(&arg, &host, args)?),
    };
    let prompt = match (&replay, &args.prompt) {
        _ if front.is_some() => String::from("(the chat)"),
        (Some((recorded, _)), _) => recorded.prompt.clone(),
        (None, Some(p)) => p.clone(),
        (None, None) => {
            let mut text = String::new();
            for line in std::io::stdin().lock().lines() {
                text.push_str(&line.context("reading the task from stdin")?);
                text.push('\n');
            }
            text
        }
    };
    if prompt.trim().is_empty() {
        bail!("no task: give it after -p, or on stdin (echo TASK | garuda -p)");
    }
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = crate::project::resolve_project(args.project.clone(), &cwd)?;
    let flags = garuda_policy::Flags {
        executor: None,
        staged: args.staged,
        strict: args.strict,
        allow_hosts: Vec::new(),
    };
    let settings = garuda_policy::load_policy(&project, &host, &flags)?;
    for r in garuda_staging::recover(&host.garuda_home)? {
        eprintln!("garuda: {}", garuda_text::visible(&r.to_string()));
    }
    // A replay's model is the server playing the recording, on this machine's loopback.
    let server = match &replay {
        Some((recorded, _)) => Some(crate::replay::serve(recorded)?),
        None => None,
    };
    let resolved = match &server {
        Some(server) => crate::models::Resolved {
            provider: "replay".into(),
            model: "recorded".into(),
            api: garuda_ipc::ModelApi::AnthropicMessages,
            base_url: server.url(),
            base_url_from: None,
            limits: crate::models::ModelLimits {
                context_window: 200_000,
                max_output_tokens: 8_192,
            },
            key: None,
            key_source: crate::models::KeySource::None,
        },
        None => {
            let vars: Vec<(OsString, OsString)> = host.vars.clone();
            crate::models::select(&host.garuda_home, args.model.as_deref(), &vars)
                .map_err(|e| anyhow!(e))?
        }
    };
    let Some(model_entries) = resolved.allowlist_entries() else {
        bail!(
            "the model's base URL names no host: {}",
            resolved.reference()
        );
    };

    let store = SessionStore::new(&host.garuda_home, &project).map_err(|e| anyhow!(e))?;
    let (session_id, mut journal, history) = match &args.resume {
        None => {
            let (id, file) = store.create_new().map_err(|e| anyhow!(e))?;
            (id, file, Vec::new())
        }
        Some(which) => {
            let id = match which {
                Some(id) => id.clone(),
                None => store
                    .latest()
                    .map_err(|e| anyhow!(e))?
                    .map(|s| s.id)
                    .ok_or_else(|| anyhow!("no session of this project to resume"))?,
            };
            let history: Vec<String> = store
                .read(&id)
                .map_err(|e| anyhow!(e))?
                .into_iter()
                .filter(|l| !crate::replay::is_supervisor_record(l))
                .collect();
            let file = store.resume(&id).map_err(|e| anyhow!(e))?;
            (id, file, history)
        }
    };
    // The supervisor's own record: what a replay needs to run the session the same way.
    let staged = settings.command_mode == garuda_policy::CommandMode::Staged;
    let own = json!({
        "type": "supervisor",
        "model": resolved.reference(),
        "staged": staged,
        "staged_changes": match args.staged_unattended {
            StagedUnattended::Apply => "apply",
            StagedUnattended::Discard => "discard",
        },
        "allow": args.allow,
    });
    crate::sessions::append_record(&mut journal, &own.to_string()).map_err(|e| anyhow!(e))?;

    let mut recorder = Recorder::open_tool(&host, &project, &settings, "garuda -p")?;
    let step = Rc::new(Cell::new(false));
    let format = args.format;
    let reference = resolved.reference();
    let parts = SessionParts {
        args,
        agent_stderr: front.and_then(|f| f.agent_stderr()),
        asks: front.is_some(),
        host: &host,
        project: &project,
        settings: &settings,
        resolved: &resolved,
        model_entries: &model_entries,
        session_id: &session_id,
        journal,
        history,
        recorder: &mut recorder,
    };
    let result = if let Some(front) = front {
        let facts = SessionFacts {
            model: &reference,
            executor: settings.executor.to_string(),
            staged,
            session_id: &session_id,
            project: &project,
            token_budget: args.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            host: &host,
        };
        session(parts, &mut *front.approver(), step, |turns| {
            front.drive(turns, &facts)
        })
    } else {
        session(
        parts,
        &mut Unattended,
        Rc::clone(&step),
        |turns| {
            turns.set_activity(if format == OutputFormat::Text {
                Activity::Stderr
            } else {
                Activity::Quiet
            });
            let mut printer = Printer::new(format, &session_id, &reference, step);
            let summary = turns.turn(&prompt, &mut |event| printer.ui(event))?;
            Ok((summary.reason, summary.usage, printer))
        },
    )
    .map(|(reason, usage, mut printer)| {
        printer.finish(reason, usage);
        if staged && format == OutputFormat::Text {
            // The setting that decided every staged change of the run, said once at the end.
            eprintln!(
                "garuda: staged commands: {}",
                match args.staged_unattended {
                    StagedUnattended::Apply => "their changes were applied (--staged-changes apply)",
                    StagedUnattended::Discard => "their changes were discarded, the project did not change (--staged-changes apply applies them)",
                }
            );
        }
        ChatEnd::Exit(exit_code(reason))
    })
    };
    let code = match &result {
        Ok(ChatEnd::Exit(code)) => *code,
        // The chat goes on in another session: this one ended well.
        Ok(ChatEnd::Switch(_)) => 0,
        Err(_) => 1,
    };
    recorder.close(json!({ "exit_code": code, "journal": session_id }))?;
    let end = result?;
    let ChatEnd::Exit(code) = end else {
        return Ok(end);
    };
    let Some((recorded, copy)) = replay else {
        return Ok(ChatEnd::Exit(code));
    };
    drop(server);
    let lines = store.read(&session_id).map_err(|e| anyhow!(e))?;
    let replayed = crate::replay::parse(&lines)?;
    let differences = crate::replay::compare(&recorded, &replayed);
    if let Some(copy) = copy {
        eprintln!(
            "garuda: the replay ran in {}",
            garuda_text::visible_path(&copy)
        );
    }
    if differences.is_empty() {
        println!("matches");
        Ok(ChatEnd::Exit(code))
    } else {
        for d in &differences {
            println!("{d}");
        }
        Ok(ChatEnd::Exit(if code == 0 { 1 } else { code }))
    }
}

/// Loads what `--replay` names and sets `args` as the recorded session ran (project of an
/// example, staged settings).
///
/// A recording is data from elsewhere (a file anyone may have written, an example folder in a
/// cloned repository), and what it loosens is taken only where it cannot reach past the
/// replay's own copy or the user's own record: `staged_changes: apply` and the file rules it
/// allowed (`Read`, `Write`, `Edit`) are taken for an example (replayed on a fresh copy of its
/// project) and for a session of this project (the supervisor's own record); a journal FILE's
/// are not (it runs on the current project). A command rule is never taken from a recording:
/// in `-p` every sandboxed command runs without one, so its only effect would be to run a
/// recorded `outside_sandbox` command on the host without asking. What is not taken is printed
/// with the flag that gives it.
fn prepare_replay(
    arg: &str,
    host: &HostEnv,
    args: &mut RunArgs,
) -> Result<(crate::replay::Recorded, Option<PathBuf>)> {
    use crate::replay::Source;
    let source = Source::parse(arg);
    let read_lines = |file: &Path| -> Result<Vec<String>> {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading {}", garuda_text::visible_path(file)))?;
        Ok(text.lines().map(str::to_string).collect())
    };
    let lines = match &source {
        Source::Example(dir) => read_lines(&dir.join("session.jsonl"))?,
        Source::File(file) => read_lines(file)?,
        Source::Session(id) => {
            let cwd = std::env::current_dir().context("reading the current folder")?;
            let project = crate::project::resolve_project(args.project.clone(), &cwd)?;
            let store = SessionStore::new(&host.garuda_home, &project).map_err(|e| anyhow!(e))?;
            store.read(id).map_err(|e| anyhow!(e))?
        }
    };
    // Parsed before the example is copied: a recording that does not play leaves no folder.
    let recorded = crate::replay::parse(&lines)?;
    let copy = match &source {
        Source::Example(dir) => {
            let copy = crate::replay::fresh_copy(dir)?;
            args.project = Some(copy.clone());
            Some(copy)
        }
        _ => None,
    };
    let trusted = !matches!(source, Source::File(_));
    if let Some(settings) = &recorded.settings {
        if settings.get("staged").and_then(Value::as_bool) == Some(true) {
            args.staged = true;
        }
        if settings.get("staged_changes").and_then(Value::as_str) == Some("apply") {
            if trusted {
                args.staged_unattended = StagedUnattended::Apply;
            } else {
                eprintln!(
                    "garuda: the recording applied its staged changes; the replay of a journal file does not (--staged-changes apply does)"
                );
            }
        }
        if let Some(rules) = settings.get("allow").and_then(Value::as_array) {
            for rule in rules.iter().filter_map(Value::as_str) {
                let shown = garuda_text::visible(rule);
                if !is_file_rule(rule) {
                    eprintln!(
                        "garuda: the recording allowed {shown}; the replay does not: a recording gives file rules only, never one that runs a command outside the sandbox (--allow gives it)"
                    );
                } else if !trusted {
                    eprintln!(
                        "garuda: the recording allowed {shown}; the replay of a journal file does not (--allow gives it)"
                    );
                } else {
                    // Shown, since running the replay gives it again.
                    eprintln!("garuda: the recording allowed {shown}; the replay does too");
                    args.allow.push(rule.to_string());
                }
            }
        }
    }
    Ok((recorded, copy))
}

/// Whether `rule` is a rule of the file tools only (`Read`, `Write`, `Edit`, with or without
/// a pattern); a rule that does not parse is not.
fn is_file_rule(rule: &str) -> bool {
    use garuda_policy::rule::{Tool, ToolMatcher};
    rule.parse::<garuda_policy::rule::Rule>().is_ok_and(|r| {
        matches!(
            r.tool(),
            ToolMatcher::Builtin(Tool::ReadFile | Tool::WriteFile | Tool::EditFile)
        )
    })
}

struct SessionParts<'a> {
    args: &'a RunArgs,
    /// Where the agent's stderr goes (`None`: this process's stderr).
    agent_stderr: Option<Box<dyn Write + Send>>,
    /// A person answers the questions (the chat): staged commands ask them too.
    asks: bool,
    host: &'a HostEnv,
    project: &'a Path,
    settings: &'a EffectiveSettings,
    resolved: &'a crate::models::Resolved,
    /// The proxy's allowlist: the model's `host:port` (`Resolved::allowlist_entries`).
    model_entries: &'a [String],
    session_id: &'a str,
    journal: std::fs::File,
    history: Vec<String>,
    recorder: &'a mut Recorder,
}

/// The agent connected and its tools ready: what a front end runs its turns on. `-p` runs
/// one; the chat ([`crate::chat`]) runs one per message.
pub struct Turns<'r, 't, 'e> {
    broker: Broker<RecorderSink<'r>>,
    tools: Shown<'t, 'e>,
    cancel: Arc<AtomicBool>,
}

impl Turns<'_, '_, '_> {
    /// One turn for `prompt`, its display events to `ui`; then the records the agent writes
    /// after its turn (its journal's `turn_end`) are taken.
    pub fn turn(
        &mut self,
        prompt: &str,
        ui: &mut dyn FnMut(&UiEvent),
    ) -> Result<crate::broker::server::TurnSummary> {
        // A stop asked for during an earlier turn (the chat's Esc) is not this turn's; a
        // signal is (it ends the session).
        if crate::sys::forwarded_signal().is_none() {
            self.cancel.store(false, Ordering::SeqCst);
        }
        let summary = self
            .broker
            .turn(prompt, &mut self.tools, ui, &self.cancel)
            .map_err(|e| anyhow!(e))?;
        self.broker
            .serve_idle(&mut self.tools, Duration::from_millis(200))
            .map_err(|e| anyhow!(e))?;
        Ok(summary)
    }

    /// The flag that stops the running turn (set by a signal, or by the chat's Esc).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.cancel)
    }

    /// A request the person makes of the session's tools (the chat's `!command`, `@path`):
    /// the same checks, questions and executors as the agent's requests, recorded as the
    /// person's (`by: user`); a command's intent durably before it runs.
    pub fn user_call(&mut self, request: &Request) -> Result<Answer> {
        if let Request::RunCommand { command, .. } = request {
            self.broker
                .audit_mut()
                .record_durable(
                    "command_intent",
                    json!({"by": "user", "command": garuda_text::visible(command)}),
                )
                .map_err(|e| anyhow!(e))?;
        }
        let (answer, event) = self.tools.call(request);
        if let Some(mut event) = event {
            if let Some(map) = event.as_object_mut() {
                map.insert("by".into(), json!("user"));
            }
            self.broker
                .audit_mut()
                .record("tool_call", event)
                .map_err(|e| anyhow!(e))?;
        }
        Ok(answer)
    }

    /// The session's audit position, which this process vouches for (its session is open).
    pub fn audit_head(&self) -> garuda_audit::SessionHead {
        self.broker.audit().0.head()
    }

    /// Where the activity lines go.
    pub fn set_activity(&mut self, activity: Activity) {
        self.tools.activity = activity;
    }
}

/// Sets up the session (proxy, agent, broker, tools), hands it to `drive`, and takes it down
/// again whatever `drive` returned.
fn session<T>(
    p: SessionParts<'_>,
    approver: &mut dyn Approver,
    step: Rc<Cell<bool>>,
    drive: impl FnOnce(&mut Turns<'_, '_, '_>) -> Result<T>,
) -> Result<T> {
    let SessionParts {
        args,
        agent_stderr,
        asks,
        host,
        project,
        settings,
        resolved,
        model_entries,
        session_id,
        journal,
        history,
        recorder,
    } = p;
    recorder.event(
        "agent_session",
        json!({
            "model": resolved.reference(),
            "journal": session_id,
            "resumed": args.resume.is_some(),
        }),
    )?;
    // The proxy: exactly the model's host and port.
    let allowlist = garuda_policy::network::Allowlist::parse(model_entries).map_err(|e| {
        anyhow!(
            "the model's host {}: {e}",
            garuda_text::visible(&model_entries.join(", "))
        )
    })?;
    let proxy = crate::proxy::Proxy::new(crate::proxy::ProxyConfig {
        allowlist,
        resolver: crate::proxy::Resolver::System,
        unknown_host: crate::proxy::UnknownHost::Deny,
        limits: crate::proxy::ProxyLimits::default(),
    })
    .context("starting the model's proxy")?;
    let dir =
        crate::proxy::socket_dir::private_dir().context("making a private folder for the proxy")?;
    let socket = dir.join("proxy.sock");
    let scope = proxy
        .listen_unix(&socket)
        .context("listening for the agent's model traffic")?;

    let spawned = spawn_agent(AgentSpawn {
        exe: None,
        args: Vec::new(),
        proxy: Some(AgentProxy {
            socket: socket.clone(),
            port: AGENT_PROXY_PORT,
        }),
    });
    let mut agent = match spawned {
        Ok(agent) => agent,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(anyhow!(e));
        }
    };
    let stderr_thread = agent.take_stderr().map(|err| {
        std::thread::spawn(move || match agent_stderr {
            Some(mut sink) => show_agent_stderr(err, &mut sink),
            None => show_agent_stderr(err, &mut std::io::stderr()),
        })
    });
    let channel = agent
        .take_channel()
        .ok_or_else(|| anyhow!("the agent's channel is missing"))?;

    let executor = settings.executor.to_string();
    let strict = settings.is_strict();
    let mut tools_offered = Vec::new();
    if !strict {
        tools_offered.push(ToolSpec {
            name: "bash".into(),
            description: "run a command".into(),
            input_schema:
                json!({"type": "object", "properties": {"outside_sandbox": {"type": "boolean"}}})
                    .to_string(),
        });
    }
    let start = Start {
        model: resolved.endpoint(format!("127.0.0.1:{AGENT_PROXY_PORT}")),
        limits: Limits {
            max_steps: args.max_steps.unwrap_or(50),
            token_budget: args.token_budget.unwrap_or(DEFAULT_TOKEN_BUDGET),
            max_output_tokens: resolved.limits.max_output_tokens,
        },
        system_prompt: system_prompt(project, settings, &executor),
        tools: tools_offered,
        context_window: Some(resolved.limits.context_window),
        resume: history,
    };
    let pid = agent.pid();
    let killer: crate::broker::server::Killer = Box::new(move || {
        let _ = crate::sys::kill(pid, libc::SIGKILL);
    });

    let engine = Engine::new(settings, host, project);
    // The provider's key and base URL stay in this process: neither the child `garuda
    // sandbox` nor a command run in this process (whose environment is built from
    // `command_host`) ever sees them, whichever provider, built in or from `models.json`
    // (`PROVIDER_ENV_DENY` and every variable the catalog names). The catalog loaded for the
    // model (a replay chose none): a file that does not load is refused, not skipped.
    let catalog = crate::models::Catalog::load(&host.garuda_home).map_err(|e| anyhow!(e))?;
    let mut command_host = host.clone();
    catalog.strip_provider_env(&mut command_host.vars);
    let (sandboxed, in_process) = command_executor(settings, &command_host)?;
    let runner = CommandRunner {
        exe: std::env::current_exe().context("finding garuda's own executable")?,
        project: project.to_path_buf(),
        env: command_host.vars.clone(),
        staged: settings.command_mode == garuda_policy::CommandMode::Staged,
        staged_apply: args.staged_unattended == StagedUnattended::Apply,
        ask_staged: asks,
        ask_hosts: asks && crate::proxy::hosts_may_be_asked(settings),
        in_process,
    };
    let mut tools = SessionTools::new(
        FileTools::open(project).map_err(|e| anyhow!(e))?,
        engine,
        EngineContext {
            sandbox_available: sandboxed,
            session_rules: args
                .allow
                .iter()
                .map(|r| {
                    r.parse::<garuda_policy::rule::Rule>()
                        .map_err(|e| anyhow!("--allow {}: {e}", garuda_text::visible(r)))
                })
                .collect::<Result<Vec<_>>>()?,
            ..EngineContext::default()
        },
        strict,
        approver,
        runner,
        Some(journal),
    );

    let forwarding = crate::sys::SignalForwarding::install().ok();
    let cancel = Arc::new(AtomicBool::new(false));
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let cancel = Arc::clone(&cancel);
        let watching = Arc::clone(&watching);
        std::thread::spawn(move || {
            while watching.load(Ordering::SeqCst) {
                if crate::sys::forwarded_signal().is_some() {
                    cancel.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let outcome = (|| -> Result<T> {
        let broker = Broker::accept(channel, &start, RecorderSink(recorder), killer)
            .map_err(|e| anyhow!(e))?;
        let mut turns = Turns {
            broker,
            tools: Shown {
                inner: &mut tools,
                activity: Activity::Quiet,
                step,
            },
            cancel: Arc::clone(&cancel),
        };
        let value = drive(&mut turns)?;
        turns.broker.shutdown().map_err(|e| anyhow!(e))?;
        Ok(value)
    })();
    watching.store(false, Ordering::SeqCst);
    let _ = watcher.join();
    drop(forwarding);
    let exit = agent.wait();
    if let Some(t) = stderr_thread {
        let _ = t.join();
    }
    drop(scope);
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
    let value = outcome?;
    if let Ok(crate::agent::AgentExit::Code(c)) = &exit {
        if *c != 0 {
            eprintln!("garuda: the agent exited with {c}");
        }
    }
    Ok(value)
}

/// Most lines of the agent's stderr shown.
const AGENT_STDERR_LINES: usize = 200;
/// Most bytes of one line of the agent's stderr held and shown (a longer one is shown in
/// pieces of this size).
const AGENT_STDERR_LINE_BYTES: u64 = 4096;

/// Shows the agent's stderr, each line escaped for the terminal (the agent is not trusted:
/// its text may hold escapes, or not be UTF-8, shown lossily). Read to the end, whatever comes:
/// past [`AGENT_STDERR_LINES`] lines are read and counted, not shown, so the agent never
/// blocks on a full pipe or fails on a closed one; no more than one piece of a line is held.
fn show_agent_stderr(err: impl std::io::Read, out: &mut impl Write) {
    let mut reader = std::io::BufReader::new(err);
    let mut piece = Vec::new();
    let mut shown = 0;
    let mut dropped = 0u64;
    loop {
        piece.clear();
        match std::io::Read::take(&mut reader, AGENT_STDERR_LINE_BYTES)
            .read_until(b'\n', &mut piece)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if shown < AGENT_STDERR_LINES {
            let text = String::from_utf8_lossy(&piece);
            let text = text.strip_suffix('\n').unwrap_or(&text);
            // Shown only: a failed write to the terminal changes nothing.
            let _ = writeln!(out, "garuda agent: {}", garuda_text::visible(text));
            shown += 1;
        } else {
            dropped += 1;
        }
    }
    if dropped > 0 {
        let _ = writeln!(out, "garuda agent: ({dropped} more lines not shown)");
    }
}

/// The executor of the session's commands, chosen once as the sandbox would choose it: whether
/// it is an OS sandbox (what the permission engine is told, as `garuda policy decide` tells
/// it: a command on the host executor is not a sandboxed one, so it is asked about, and in
/// `-p` refused, unless a rule allows it), and the in-process runner (`None` when that is the
/// host executor, or when `garuda sandbox` would refuse the project's executor: those commands
/// keep their own process, its notices and its refusals). `host`'s variables are the ones a
/// command may inherit from (the provider's stripped).
fn command_executor(
    settings: &EffectiveSettings,
    host: &HostEnv,
) -> Result<(bool, Option<Arc<crate::broker::host::InProcess>>)> {
    let selection =
        crate::executor::select::select_executor_cached(settings.executor, Some(&host.garuda_home))
            .map_err(|e| anyhow!("no executor for the agent's commands: {e}"))?;
    let sandboxed = selection.executor.kind().is_sandbox();
    // A project file that asks for a weaker executor than this machine has is refused by
    // `garuda sandbox`: every command goes to it, and is refused there, as without `-p`.
    if let Some(refusal) =
        crate::executor::select::weaker_project_executor(settings, &host.garuda_home)
    {
        eprintln!(
            "garuda: {}: the session's commands are refused",
            garuda_text::visible(&refusal)
        );
        return Ok((sandboxed, None));
    }
    if !sandboxed {
        return Ok((false, None));
    }
    if matches!(
        selection.executor.kind(),
        crate::executor::ExecutorKind::Landlock | crate::executor::ExecutorKind::Bubblewrap
    ) {
        // The first command's namespaces (see `crate::executor::ahead`); the broker makes the
        // next ones after each command.
        crate::executor::ahead::prepare();
    }
    Ok((
        true,
        Some(Arc::new(crate::broker::host::InProcess {
            executor: selection.executor,
            settings: settings.clone(),
            host: host.clone(),
        })),
    ))
}

/// Prints the agent's display events in the chosen format.
struct Printer {
    format: OutputFormat,
    step: Rc<Cell<bool>>,
    text: String,
    session: String,
    model: String,
    started: std::time::Instant,
}

impl Printer {
    fn new(format: OutputFormat, session: &str, model: &str, step: Rc<Cell<bool>>) -> Printer {
        let printer = Printer {
            format,
            step,
            text: String::new(),
            session: session.to_string(),
            model: model.to_string(),
            started: std::time::Instant::now(),
        };
        if format == OutputFormat::StreamJson {
            printer.line(&json!({
                "type": "system",
                "subtype": "init",
                "session_id": printer.session,
                "model": printer.model,
            }));
        }
        printer
    }

    fn line(&self, value: &Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    fn ui(&mut self, event: &UiEvent) {
        match event {
            UiEvent::TextDelta { text } => {
                // Text of a new step after a tool call: a paragraph of its own.
                if self.step.replace(false) && !self.text.is_empty() {
                    let sep = if self.text.ends_with('\n') {
                        "\n"
                    } else {
                        "\n\n"
                    };
                    self.text.push_str(sep);
                    if self.format == OutputFormat::Text {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(sep.as_bytes());
                    }
                }
                self.text.push_str(text);
                match self.format {
                    OutputFormat::Text => {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(garuda_text::visible_lines(text).as_bytes());
                        let _ = out.flush();
                    }
                    OutputFormat::StreamJson => self.line(&json!({
                        "type": "assistant",
                        "session_id": self.session,
                        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
                    })),
                    OutputFormat::Json => {}
                }
            }
            UiEvent::TextRetracted { bytes } => self.retract(*bytes),
            UiEvent::Notice { text } => {
                eprintln!("garuda: {}", garuda_text::visible(text));
            }
            // The supervisor prints its own line for each request it runs (`Shown`).
            UiEvent::ToolProgress { .. } | UiEvent::Usage { .. } => {}
        }
    }

    /// Drops the last `bytes` of the answer (a broken stream the agent sends again): the
    /// `result` holds the answer once. What the terminal or a stream-json reader already got
    /// stays; text mode's notice said the request is sent again, and stream-json gets a line
    /// saying how much to drop. The count is the agent's: past the answer's start it drops
    /// the whole answer, inside a character it drops that character too.
    fn retract(&mut self, bytes: u64) {
        let mut keep = self
            .text
            .len()
            .saturating_sub(usize::try_from(bytes).unwrap_or(usize::MAX));
        while !self.text.is_char_boundary(keep) {
            keep -= 1;
        }
        self.text.truncate(keep);
        if self.format == OutputFormat::StreamJson {
            self.line(&json!({
                "type": "system",
                "subtype": "text_retracted",
                "session_id": self.session,
                "bytes": bytes,
            }));
        }
    }

    fn finish(&mut self, reason: StopReason, usage: garuda_ipc::Usage) {
        let result = json!({
            "type": "result",
            "subtype": match reason {
                StopReason::Done => "success".to_string(),
                StopReason::MaxSteps => "error_max_turns".to_string(),
                other => format!("error_{}", reason_name(other)),
            },
            "is_error": reason != StopReason::Done,
            "duration_ms": self.started.elapsed().as_millis() as u64,
            "result": self.text,
            "session_id": self.session,
            "stop_reason": reason_name(reason),
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        });
        match self.format {
            OutputFormat::Text => {
                if !self.text.is_empty() && !self.text.ends_with('\n') {
                    println!();
                }
                if reason != StopReason::Done {
                    eprintln!("garuda: stopped: {}", reason_name(reason));
                }
            }
            OutputFormat::Json | OutputFormat::StreamJson => self.line(&result),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The agent's stderr is shown escaped, lossily when it is not UTF-8, a long line in
    /// pieces, at most 200 lines, and read to its end. Control: `BufRead::lines` on the same
    /// bytes stops at the line that is not UTF-8, and would hold the long line whole.
    #[test]
    fn the_agents_stderr_is_escaped_bounded_and_drained() {
        let mut input = b"ok\n\x1b[2Jclear\n\xff\xfe bytes\n".to_vec();
        input.extend(vec![b'x'; 10_000]);
        input.push(b'\n');
        for i in 0..300 {
            input.extend(format!("line {i}\n").into_bytes());
        }
        let mut reader = std::io::Cursor::new(input.clone());
        let mut out = Vec::new();
        show_agent_stderr(&mut reader, &mut out);
        assert_eq!(reader.position(), input.len() as u64, "read to the end");
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "garuda agent: ok");
        assert_eq!(lines[1], "garuda agent: \\e[2Jclear");
        assert_eq!(lines[2], "garuda agent: \u{fffd}\u{fffd} bytes");
        // 10,000 bytes: pieces of 4,096, 4,096 and 1,808.
        assert_eq!(lines[3].len(), "garuda agent: ".len() + 4096);
        assert_eq!(lines[5].len(), "garuda agent: ".len() + 1808);
        assert_eq!(lines.len(), AGENT_STDERR_LINES + 1);
        assert_eq!(lines[AGENT_STDERR_LINES - 1], "garuda agent: line 193");
        assert_eq!(
            lines[AGENT_STDERR_LINES],
            "garuda agent: (106 more lines not shown)"
        );
        assert!(!out.contains('\u{1b}'));
        // Control: the line reader stops at the bytes that are not UTF-8.
        let read: Vec<_> = std::io::BufReader::new(&input[..]).lines().collect();
        assert!(read[2].is_err(), "{:?}", read[2]);
    }
}
