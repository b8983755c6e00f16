//! What the broker does with an allowed request: [`SessionTools`], the one [`ToolHost`] of an
//! agent session. File tools go to [`FileTools`] (beneath the held project root); a command
//! line goes through the permission engine, then runs exactly as `garuda sandbox` runs it (the
//! same binary, as a child, with `--capture`: executor, staged mode, proxy, limits and its own
//! audit session); a journal record is appended to the session's journal, redacted
//! ([`crate::sessions::append_record`]).
//!
//! An "ask" verdict goes to the [`Approver`], which is the supervisor's terminal (the chat) or,
//! with no terminal, [`NoTerminal`]: the answer is no. The agent never sees the question.
//! Under the strict profile a command outside the sandbox is refused before anything is
//! asked.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use garuda_ipc::{Answer, CommandDone, ErrorCode, Request};
use garuda_policy::engine::{Context, Decision, Engine, Request as PolicyRequest, Verdict};
use serde_json::{json, Value};

use super::files::FileTools;
use super::judge::error;
use super::server::ToolHost;

/// Most bytes of a command's output handed back to the model.
pub const MAX_COMMAND_OUTPUT: usize = 256 * 1024;

/// Most bytes of one journal record (a line of the session's journal).
pub const MAX_JOURNAL_RECORD: usize = 1024 * 1024;

/// What the user is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The tool (`write_file`, `run_command`…).
    pub tool: &'static str,
    /// Its target: a path or a command line, as the model wrote it (so it may hold newlines
    /// and terminal escapes: the approver escapes it, `garuda-text`, before showing it).
    pub target: String,
    /// Why the engine asks (it may quote the target: escaped the same way).
    pub reason: String,
    /// `write_file`, `edit_file`: the file's text now (`None`: a new file) and after.
    pub change: Option<(Option<String>, String)>,
}

/// An answer to an [`Approval`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approved {
    /// Not allowed: nothing runs.
    No,
    /// Allowed this once.
    Once,
    /// Allowed, and the same request again without asking for the rest of the session (a
    /// session rule matching exactly it, audited).
    ForSession,
}

/// Who answers "ask" verdicts: the supervisor's terminal, never the agent.
pub trait Approver {
    /// True when the user allows it.
    fn approve(&mut self, question: &Approval) -> bool;

    /// A staged command's question ([`crate::staged_ask`]): apply the change shown (or, for a
    /// guard, its guarded part too)? The default, for an approver with no person behind it,
    /// is no: the change is discarded.
    fn staged(&mut self, _question: &crate::staged_ask::StagedQuestion) -> bool {
        false
    }

    /// The answer, "for the rest of the session" included (an approver that cannot ask that
    /// answers as [`Approver::approve`] does).
    fn answer(&mut self, question: &Approval) -> Approved {
        if self.approve(question) {
            Approved::Once
        } else {
            Approved::No
        }
    }
}

/// No terminal: every question is answered no (the documented default for `-p` and jobs).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTerminal;

impl Approver for NoTerminal {
    fn approve(&mut self, _: &Approval) -> bool {
        false
    }
}

/// How `run_command` starts `garuda sandbox`.
#[derive(Debug, Clone)]
pub struct CommandRunner {
    /// The `garuda` binary (the supervisor's own executable).
    pub exe: PathBuf,
    /// The project, passed as `--project`.
    pub project: PathBuf,
    /// The environment of the child `garuda sandbox` (it applies its own allowlist to the
    /// command's).
    pub env: Vec<(OsString, OsString)>,
    /// The session runs commands staged (`--staged`).
    pub staged: bool,
    /// With no person to ask: apply a staged change (`true`) or discard it (`false`).
    pub staged_apply: bool,
    /// A person answers: each staged command's "apply or discard?" is asked through the
    /// approver ([`Approver::staged`]) instead of `staged_apply`.
    pub ask_staged: bool,
    /// A person answers, and the policy lets hosts be asked about
    /// ([`crate::proxy::hosts_may_be_asked`]): a host the allowlist does not name is put to the
    /// approver while the command waits, and every command runs as a child `garuda sandbox`
    /// with its proxy.
    pub ask_hosts: bool,
    /// Run direct-mode sandboxed commands in this process (`None`: every command is a child
    /// `garuda sandbox`).
    pub in_process: Option<std::sync::Arc<InProcess>>,
}

/// Commands run by the supervisor itself, as `garuda sandbox` would run them but without its
/// process start and audit session: the executor chosen once for the session, the policy built
/// for each command from the session's settings (the project walk's cache keeps that cheap, and
/// a `.env` made since the last command is still found). Used for direct-mode commands in the
/// sandbox with no network allowlist and no person to ask about hosts (`-p`); staged commands,
/// commands outside the sandbox, commands with a proxy and every command of the chat (whose
/// proxy asks) still go through a child `garuda sandbox`.
pub struct InProcess {
    /// The session's executor (never `host`: the caller checks).
    pub executor: Box<dyn crate::executor::Executor>,
    /// The session's settings.
    pub settings: garuda_policy::EffectiveSettings,
    /// The session's host.
    pub host: garuda_policy::HostEnv,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("executor", &self.executor.kind())
            .finish_non_exhaustive()
    }
}

/// The tool host of one agent session.
pub struct SessionTools<'a> {
    files: FileTools,
    engine: Engine<'a>,
    ctx: Context,
    strict: bool,
    approver: &'a mut dyn Approver,
    runner: CommandRunner,
    journal: Option<File>,
    /// Hosts and ports the person allowed "for this session": answered without a question in
    /// every later command's proxy.
    session_hosts: std::collections::BTreeSet<(String, u16)>,
}

impl<'a> SessionTools<'a> {
    /// The tools of a session in `files`' project. `journal`: the session journal, opened for
    /// appending (`crate::sessions::SessionStore::create` or `resume`; `None`: records are
    /// refused).
    pub fn new(
        files: FileTools,
        engine: Engine<'a>,
        ctx: Context,
        strict: bool,
        approver: &'a mut dyn Approver,
        runner: CommandRunner,
        journal: Option<File>,
    ) -> SessionTools<'a> {
        SessionTools {
            files,
            engine,
            ctx,
            strict,
            approver,
            runner,
            journal,
            session_hosts: std::collections::BTreeSet::new(),
        }
    }

    fn file_tool(&mut self, request: &Request) -> (Answer, Option<Value>) {
        let approver = &mut *self.approver;
        let mut asked = None;
        let mut for_session = None;
        let outcome = self
            .files
            .handle(&self.engine, &self.ctx, request, |pending| {
                let change = pending
                    .after()
                    .map(|after| (pending.before().map(str::to_owned), after.to_owned()));
                let answer = approver.answer(&Approval {
                    tool: pending.tool().name(),
                    target: pending.path().to_owned(),
                    reason: pending.decision().reason.clone(),
                    change,
                });
                if answer == Approved::ForSession {
                    // The file it really is (no link in the path), for the tool asked (only
                    // the writing tools are asked).
                    use garuda_policy::rule::{Rule, Tool as RuleTool};
                    let tool = match pending.tool() {
                        crate::broker::judge::Tool::EditFile => Some(RuleTool::EditFile),
                        crate::broker::judge::Tool::WriteFile => Some(RuleTool::WriteFile),
                        _ => None,
                    };
                    for_session = tool.and_then(|t| Rule::exactly_path(t, pending.resolved()));
                }
                asked = Some(answer != Approved::No);
                answer != Approved::No
            });
        let mut event = decision_event(request, outcome.decision.as_ref(), asked);
        if let Some(rule) = for_session {
            note_session_rule(&mut event, &rule);
            self.ctx.session_rules.push(rule);
        }
        (outcome.answer, Some(event))
    }

    /// `release` runs before the command's program may start, only if it is to run (see
    /// [`crate::executor::Executor::run_released`]).
    fn run_command(
        &mut self,
        line: &str,
        timeout_secs: Option<u64>,
        outside_sandbox: bool,
        release: crate::executor::Release<'_>,
    ) -> (Answer, Option<Value>) {
        let request = PolicyRequest::Bash {
            line: line.to_owned(),
            outside_sandbox,
        };
        if line.contains('\0') {
            // No argument can carry a NUL: refused before the engine or the user is asked
            // about a line that could never run as written.
            let event = json!({
                "tool": "run_command",
                "target": garuda_text::visible(line),
                "refused_before_policy": true,
            });
            return (
                error(
                    ErrorCode::InvalidArgument,
                    "the command line has a NUL byte, which no argument can carry",
                ),
                Some(event),
            );
        }
        if outside_sandbox && self.strict {
            let event = json!({
                "tool": "run_command",
                "target": garuda_text::visible(line),
                "outside_sandbox": true,
                "verdict": "deny",
                "reason": "the strict profile runs every command in the sandbox",
            });
            return (
                error(
                    ErrorCode::Denied,
                    "the strict profile runs every command in the sandbox: run it without outside_sandbox",
                ),
                Some(event),
            );
        }
        let decision = self.engine.decide(&request, &self.ctx);
        let mut asked = None;
        let mut session_rules = Vec::new();
        let mut always = false;
        let allowed = match decision.verdict {
            Verdict::Allow => true,
            Verdict::Deny => false,
            Verdict::Ask => {
                let answer = self.approver.answer(&Approval {
                    tool: "run_command",
                    target: line.to_owned(),
                    reason: decision.reason.clone(),
                    change: None,
                });
                always = answer == Approved::ForSession;
                if always {
                    // Only a line that is one plain simple command, word for word: the
                    // splitter also reports derived forms (`A=1 cmd` as `cmd`, `/x/rm` as
                    // `rm`, what a wrapper runs), and a rule for one of those would allow
                    // more than was asked. Any other line gets no rule: asked again.
                    let rules = garuda_policy::command::split(line)
                        .ok()
                        .and_then(|commands| match commands.as_slice() {
                            [one]
                                if !one.dynamic
                                    && one.writes.is_empty()
                                    && one.reads.is_empty()
                                    && !one.argv.is_empty()
                                    && !one.argv[0].contains(['=', '/']) =>
                            {
                                garuda_policy::rule::Rule::exactly_command(&one.argv)
                            }
                            _ => None,
                        })
                        .map(|rule| vec![rule]);
                    session_rules = rules.unwrap_or_default();
                }
                asked = Some(answer != Approved::No);
                answer != Approved::No
            }
        };
        let mut event = decision_event(
            &Request::RunCommand {
                command: line.to_owned(),
                timeout_secs,
                outside_sandbox,
            },
            Some(&decision),
            asked,
        );
        if always && session_rules.is_empty() {
            // "Always" with no rule that says exactly this line: allowed once, on record.
            if let Some(map) = event.as_object_mut() {
                map.insert(
                    "always_without_rule".into(),
                    json!("the line is not one plain command: it is asked again next time"),
                );
            }
        }
        for rule in session_rules {
            note_session_rule(&mut event, &rule);
            self.ctx.session_rules.push(rule);
        }
        if !allowed {
            let (code, why) = match asked {
                Some(false) => (ErrorCode::Rejected, "the user said no"),
                _ => (ErrorCode::Denied, "the policy denies it"),
            };
            return (
                error(code, format!("{why}: {}", decision.reason)),
                Some(event),
            );
        }
        let in_process = self.in_process(outside_sandbox);
        let mut hosts_asked = Vec::new();
        let done = match in_process {
            Some(ip) => run_in_process(ip, &self.runner.project, line, timeout_secs, release),
            // The child `garuda sandbox` makes its own intent durable too; this one first.
            None => match release() {
                Ok(()) => self.spawn_sandbox(line, timeout_secs, outside_sandbox, &mut hosts_asked),
                Err(reason) => {
                    return (crate::broker::server::not_released(&reason), Some(event));
                }
            },
        };
        let answer = match done {
            Ok(done) => {
                if let Some(map) = event.as_object_mut() {
                    map.insert("exit_code".into(), json!(done.exit_code));
                    map.insert("signal".into(), json!(done.signal));
                    if !hosts_asked.is_empty() {
                        map.insert("hosts_asked".into(), Value::Array(hosts_asked));
                    }
                }
                Answer::CommandDone(done)
            }
            Err(e) => error(ErrorCode::Io, format!("cannot start garuda sandbox: {e}")),
        };
        (answer, Some(event))
    }

    /// The runner of this session's commands in this process, where it serves this one.
    fn in_process(&self, outside_sandbox: bool) -> Option<&std::sync::Arc<InProcess>> {
        self.runner.in_process.as_ref().filter(|ip| {
            !outside_sandbox
                && !self.runner.staged
                && !self.runner.ask_hosts
                && ip.settings.network_allow.is_empty()
        })
    }

    /// `garuda sandbox --capture --project P [--executor host] [--strict] [--timeout N]
    /// [--staged --apply|--discard] -- /bin/sh -c LINE`
    /// as a child: the same code path as a user's own run, its own audit session included.
    fn spawn_sandbox(
        &mut self,
        line: &str,
        timeout_secs: Option<u64>,
        outside_sandbox: bool,
        hosts_asked: &mut Vec<Value>,
    ) -> std::io::Result<CommandDone> {
        let mut cmd = Command::new(&self.runner.exe);
        cmd.arg("sandbox").arg("--capture").arg("--project");
        cmd.arg(&self.runner.project);
        if outside_sandbox {
            cmd.args(["--executor", "host"]);
        }
        if self.strict {
            // The session's `--strict`, if it came from the flag: the child loads the policy
            // itself and must not run under a weaker profile (a file's strict it reads anyway).
            cmd.arg("--strict");
        }
        if let Some(secs) = timeout_secs {
            cmd.arg("--timeout").arg(secs.to_string());
        }
        let staged = self.runner.staged && !outside_sandbox;
        // The chat asks the person through its approver, over a socket in a private folder
        // of this process; -p has no one to ask: the session's setting decides. A command
        // outside the sandbox asks nothing: it has the host's whole network (a question about
        // a host would mean nothing), and no socket of the supervisor's is handed to it.
        let may_ask = MayAsk {
            staged: staged && self.runner.ask_staged,
            hosts: self.runner.ask_hosts && !outside_sandbox,
        };
        let asking = if may_ask.staged || may_ask.hosts {
            let dir = crate::proxy::socket_dir::private_dir()?;
            let path = dir.join("ask.sock");
            let listener = std::os::unix::net::UnixListener::bind(&path)?;
            listener.set_nonblocking(true)?;
            Some((dir, path, listener))
        } else {
            None
        };
        if let Some((_, path, _)) = &asking {
            cmd.arg("--ask-socket").arg(path);
        }
        if staged {
            cmd.arg("--staged");
            if !(asking.is_some() && self.runner.ask_staged) {
                cmd.arg(if self.runner.staged_apply {
                    "--apply"
                } else {
                    "--discard"
                });
            }
        }
        cmd.args(["--", "/bin/sh", "-c", line]);
        cmd.env_clear().envs(self.runner.env.iter().cloned());
        cmd.current_dir(&self.runner.project);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawned = cmd.spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some((dir, ..)) = &asking {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        // The chat's Esc and Ctrl-C (`sys::kill_forward_target`) and a signal to the
        // supervisor stop the child `garuda sandbox`, which takes its sandbox with it; a
        // staged session it leaves is recovered at the next start.
        crate::sys::forward_signals_to(libc::pid_t::try_from(child.id()).unwrap_or(0));
        let stderr = child.stderr.take();
        let stdout = child.stdout.take();
        // Each pipe on its own thread, so a full pipe never stalls the other or a question.
        let err_reader = std::thread::spawn(move || read_capped(stderr));
        let out_reader = std::thread::spawn(move || read_capped(stdout));
        let mut applying = self.runner.staged_apply;
        let mut reported: Option<String> = None;
        let status = match &asking {
            None => child.wait(),
            Some((dir, _, listener)) => {
                let status = self.relay_questions(
                    &mut child,
                    listener,
                    may_ask,
                    &mut applying,
                    &mut reported,
                    hosts_asked,
                );
                let _ = std::fs::remove_dir_all(dir);
                status
            }
        };
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                crate::sys::forward_signals_to(0);
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        crate::sys::forward_signals_to(0);
        let (out, out_cut) = out_reader.join().unwrap_or_default();
        let (err, err_cut) = err_reader.join().unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        let mut output = String::from_utf8_lossy(&out).into_owned();
        output.push_str(&String::from_utf8_lossy(&err));
        let code = status.code();
        Ok(CommandDone {
            exit_code: code,
            signal: status.signal(),
            timed_out: timeout_secs.is_some() && code == Some(124),
            output,
            output_truncated: out_cut || err_cut,
            blocked_hosts: Vec::new(),
            staged: staged.then(|| match reported {
                Some(what) => reported_outcome(&what),
                None => staged_outcome(code, applying),
            }),
        })
    }

    /// Until `child` ends: each connection to `listener` is one question, put to the approver
    /// and answered. `applying` ends as the last "apply or discard?" answer; each host asked
    /// about is added to `hosts_asked` (for the tool call's audit record) with its answer.
    fn relay_questions(
        &mut self,
        child: &mut std::process::Child,
        listener: &std::os::unix::net::UnixListener,
        may_ask: MayAsk,
        applying: &mut bool,
        reported: &mut Option<String>,
        hosts_asked: &mut Vec<Value>,
    ) -> std::io::Result<std::process::ExitStatus> {
        *applying = false;
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    if crate::sys::forwarded_signal().is_some() {
                        // The session is ending: no more questions.
                        crate::staged_ask::answer(&stream, false);
                        continue;
                    }
                    // A question that does not come within a minute is no question.
                    stream.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
                    let Some(question) = crate::staged_ask::read_question(&stream) else {
                        crate::staged_ask::answer(&stream, false);
                        continue;
                    };
                    if let crate::staged_ask::StagedQuestion::Outcome { what } = &question {
                        *reported = Some(what.clone());
                        crate::staged_ask::answer(&stream, true);
                        continue;
                    }
                    if let crate::staged_ask::StagedQuestion::Host { host, port } = question {
                        let answer = self.host_question(may_ask.hosts, host, port, hosts_asked);
                        crate::staged_ask::answer_host(&stream, answer);
                        continue;
                    }
                    if !may_ask.staged {
                        // Only a staged command's child asks about a change.
                        crate::staged_ask::answer(&stream, false);
                        continue;
                    }
                    let yes = self.approver.staged(&question);
                    if matches!(
                        question,
                        crate::staged_ask::StagedQuestion::ApplyOrDiscard { .. }
                    ) {
                        *applying = yes;
                    }
                    crate::staged_ask::answer(&stream, yes);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(status) = child.try_wait()? {
                        return Ok(status);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
    }

    /// A host the command's allowlist does not name: allowed without a question when the
    /// person allowed it for the session, refused when hosts may not be asked, else asked.
    fn host_question(
        &mut self,
        may_ask: bool,
        host: String,
        port: u16,
        hosts_asked: &mut Vec<Value>,
    ) -> crate::proxy::AskAnswer {
        use crate::proxy::AskAnswer;
        // Only a name the proxy itself would have asked about is put to the person: what
        // comes over the socket is checked again, not trusted.
        let is_name = matches!(
            garuda_policy::network::TargetHost::parse(&host),
            Ok(garuda_policy::network::TargetHost::Name(_))
        );
        let key = (host, port);
        let (answer, how) = if !may_ask || !is_name {
            (AskAnswer::Deny, "not asked")
        } else if self.session_hosts.contains(&key) {
            (AskAnswer::AllowSession, "allowed earlier for this session")
        } else {
            let asked = self.approver.answer(&Approval {
                tool: "network access",
                target: format!("{}:{}", key.0, key.1),
                reason: "the network allowlist does not name it; the command waits for the answer"
                    .into(),
                change: None,
            });
            match asked {
                Approved::Once => (AskAnswer::AllowOnce, "allowed once"),
                Approved::ForSession => (AskAnswer::AllowSession, "allowed for this session"),
                Approved::No => (AskAnswer::Deny, "denied"),
            }
        };
        if answer == AskAnswer::AllowSession {
            self.session_hosts.insert(key.clone());
        }
        hosts_asked.push(json!({
            "host": garuda_text::visible(&key.0),
            "port": key.1,
            "answer": how,
        }));
        answer
    }

    fn journal_append(&mut self, record: &str) -> Answer {
        if record.len() > MAX_JOURNAL_RECORD {
            return error(ErrorCode::TooLarge, "a journal record is at most 1 MiB");
        }
        if record.contains(['\n', '\r']) {
            return error(
                ErrorCode::InvalidArgument,
                "a journal record is one line: no line breaks",
            );
        }
        let Some(journal) = self.journal.as_mut() else {
            return error(ErrorCode::Io, "this session keeps no journal");
        };
        // Redacted with the audit log's redactor before it reaches the disk.
        match crate::sessions::append_record(journal, record) {
            Ok(()) => Answer::Stored,
            Err(e @ crate::sessions::RecordError::NotJson(_)) => {
                error(ErrorCode::InvalidArgument, e.to_string())
            }
            Err(e) => error(ErrorCode::Io, e.to_string()),
        }
    }
}

impl ToolHost for SessionTools<'_> {
    /// Allowed reads run on one thread each ([`FileTools::run_concurrently`]); a batch with
    /// anything the policy refuses or would ask about is decided and run one request at a
    /// time, as without a batch, so that every question is asked in order.
    fn call_batch(&mut self, requests: &[Request]) -> Vec<(Answer, Option<Value>)> {
        let mut pendings = Vec::with_capacity(requests.len());
        for request in requests {
            match self.files.prepare(&self.engine, &self.ctx, request) {
                crate::broker::Prepared::Ready(p) if p.decision().verdict == Verdict::Allow => {
                    pendings.push(p)
                }
                _ => return requests.iter().map(|r| self.call(r)).collect(),
            }
        }
        let decisions: Vec<_> = pendings.iter().map(|p| p.decision().clone()).collect();
        let done = self
            .files
            .run_concurrently(&self.engine, &self.ctx, pendings);
        requests
            .iter()
            .zip(decisions)
            .zip(done)
            .map(|((request, decision), (answer, began, ended))| {
                let mut event = decision_event(request, Some(&decision), None);
                let micros = |t: std::time::SystemTime| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros() as u64)
                };
                if let Some(map) = event.as_object_mut() {
                    // When the supervisor's work on it began and ended: a batch's reads
                    // overlap in time.
                    map.insert("began_us".into(), json!(micros(began)));
                    map.insert("ended_us".into(), json!(micros(ended)));
                }
                (answer, Some(event))
            })
            .collect()
    }

    fn call(&mut self, request: &Request) -> (Answer, Option<Value>) {
        match request {
            Request::ReadFile { .. }
            | Request::WriteFile { .. }
            | Request::EditFile { .. }
            | Request::Glob { .. }
            | Request::Grep { .. } => self.file_tool(request),
            Request::RunCommand {
                command,
                timeout_secs,
                outside_sandbox,
            } => self.run_command(command, *timeout_secs, *outside_sandbox, &mut || Ok(())),
            Request::JournalAppend { record } => (self.journal_append(record), None),
        }
    }

    fn call_released(
        &mut self,
        request: &Request,
        release: crate::executor::Release<'_>,
    ) -> (Answer, Option<Value>) {
        match request {
            Request::RunCommand {
                command,
                timeout_secs,
                outside_sandbox,
            } => self.run_command(command, *timeout_secs, *outside_sandbox, release),
            _ => match release() {
                Ok(()) => self.call(request),
                Err(reason) => (crate::broker::server::not_released(&reason), None),
            },
        }
    }

    /// The next sandboxed command's namespaces, made while the agent reads this answer (see
    /// [`crate::executor::ahead`]), where this process runs it with a Linux executor.
    fn after_command(&mut self) {
        use crate::executor::ExecutorKind;
        if self.in_process(false).is_some_and(|ip| {
            matches!(
                ip.executor.kind(),
                ExecutorKind::Landlock | ExecutorKind::Bubblewrap
            )
        }) {
            crate::executor::ahead::prepare();
        }
    }
}

/// What one command's child may ask the person over its socket.
#[derive(Debug, Clone, Copy)]
struct MayAsk {
    /// Whether to apply or discard a staged change, and its guards' questions.
    staged: bool,
    /// A host the network allowlist does not name.
    hosts: bool,
}

/// Reads a pipe to its end, keeping at most [`MAX_COMMAND_OUTPUT`] bytes.
fn read_capped<R: Read>(pipe: Option<R>) -> (Vec<u8>, bool) {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = [0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = MAX_COMMAND_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    (kept, cut)
}

/// The audit event of one tool request: what was asked (target escaped), the engine's
/// verdict, the step and the rules that decided, and the user's answer if asked.
/// An "always, for this session" answer on the audit record: the rule it added.
fn note_session_rule(event: &mut Value, rule: &garuda_policy::rule::Rule) {
    if let Some(map) = event.as_object_mut() {
        map.insert("user_answer".into(), json!("always"));
        let rules = map
            .entry("session_rules_added")
            .or_insert_with(|| json!([]));
        if let Some(list) = rules.as_array_mut() {
            list.push(json!(garuda_text::visible(&rule.to_string())));
        }
    }
}

fn decision_event(request: &Request, decision: Option<&Decision>, asked: Option<bool>) -> Value {
    let target = match request {
        Request::ReadFile { path, .. }
        | Request::WriteFile { path, .. }
        | Request::EditFile { path, .. } => garuda_text::visible(path).into_owned(),
        Request::Glob { pattern, path } | Request::Grep { pattern, path, .. } => {
            let within = path.as_deref().unwrap_or(".");
            garuda_text::visible(&format!("{pattern} in {within}")).into_owned()
        }
        Request::RunCommand { command, .. } => garuda_text::visible(command).into_owned(),
        Request::JournalAppend { .. } => String::new(),
    };
    let mut event = json!({ "tool": request.tool(), "target": target });
    if let (Some(d), Some(map)) = (decision, event.as_object_mut()) {
        map.insert("verdict".into(), json!(d.verdict));
        map.insert("step".into(), json!(d.step.to_string()));
        map.insert("rules".into(), json!(d.causes));
    }
    if let (Some(yes), Some(map)) = (asked, event.as_object_mut()) {
        map.insert("user_answer".into(), json!(if yes { "yes" } else { "no" }));
    }
    if decision.is_none() {
        if let Some(map) = event.as_object_mut() {
            map.insert("refused_before_policy".into(), json!(true));
        }
    }
    event
}

/// What became of a staged command's change, from `garuda sandbox`'s exit code, for the model.
/// What became of a staged command's change, for the model, as the child reported it.
fn reported_outcome(what: &str) -> String {
    let what = garuda_text::visible(what);
    if what == "no change" {
        "the command changed nothing that could be applied".into()
    } else if what.starts_with("applied") {
        format!("the change was applied to the project ({what})")
    } else {
        format!("the change was not applied ({what}): the project did not change")
    }
}

fn staged_outcome(code: Option<i32>, applying: bool) -> String {
    // The child's exit code says what became of the change, except that after an apply it is
    // the command's own, which may happen to be one of these (a limit, said in docs/chat.md).
    match code {
        None => "the command was stopped by a signal: its change was discarded, the project did not change".into(),
        Some(crate::exit_codes::STAGED_DISCARDED) => {
            "the change was discarded: the project did not change".into()
        }
        Some(crate::exit_codes::APPLY_FAILED) => {
            "applying the change failed or did not finish (see the output)".into()
        }
        Some(crate::exit_codes::APPLY_REFUSED) => {
            "the change was refused and not applied (the output says why)".into()
        }
        _ if applying => "the change (if any) was applied to the project".into(),
        _ => "the change (if any) was discarded: the project did not change".into(),
    }
}

/// Runs `line` with the session's executor in this process (see [`InProcess`]).
fn run_in_process(
    ip: &InProcess,
    project: &std::path::Path,
    line: &str,
    timeout_secs: Option<u64>,
    release: crate::executor::Release<'_>,
) -> std::io::Result<CommandDone> {
    use crate::executor::{CommandSpec, ExitStatus, StdioMode};
    let (mut policy, _notices) =
        garuda_policy::build_exec_policy_noting(project, &ip.settings, &ip.host)
            .map_err(std::io::Error::other)?;
    if let Some(secs) = timeout_secs {
        policy.limits.timeout = Some(std::time::Duration::from_secs(secs));
    }
    let spec = CommandSpec {
        argv: vec!["/bin/sh".into(), "-c".into(), line.into()],
        cwd: Some(project.to_path_buf()),
    };
    let outcome = ip
        .executor
        .run_released(&spec, &policy, StdioMode::Capture, release)
        .map_err(std::io::Error::other)?;
    let (exit_code, signal, timed_out) = match outcome.status {
        ExitStatus::Code(c) => (Some(c), None, false),
        ExitStatus::Signal(s) => (None, Some(s), false),
        ExitStatus::TimedOut => (Some(124), None, true),
    };
    let mut output = String::from_utf8_lossy(&outcome.stdout.bytes).into_owned();
    output.push_str(&String::from_utf8_lossy(&outcome.stderr.bytes));
    Ok(CommandDone {
        exit_code,
        signal,
        timed_out,
        output,
        output_truncated: outcome.stdout.dropped > 0 || outcome.stderr.dropped > 0,
        blocked_hosts: Vec::new(),
        staged: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child's report decides what the model is told. Control: inferred from the exit
    /// code alone, a command of its own that exits 121 after an apply reads as discarded.
    #[test]
    fn the_reported_outcome_wins_over_the_exit_code() {
        assert_eq!(
            reported_outcome("applied"),
            "the change was applied to the project (applied)"
        );
        assert_eq!(
            reported_outcome("discarded (apply refused)"),
            "the change was not applied (discarded (apply refused)): the project did not change"
        );
        assert_eq!(
            reported_outcome("no change"),
            "the command changed nothing that could be applied"
        );
        assert!(
            staged_outcome(Some(crate::exit_codes::STAGED_DISCARDED), true).contains("discarded")
        );
    }
}
