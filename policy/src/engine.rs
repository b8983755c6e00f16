//! The permission engine: one request in, `allow`, `ask` or `deny` out, with the step, the
//! rule and the source that decided.
//!
//! # The order
//!
//! The steps run in this order and the first that decides wins (the source design's §5, with
//! the ask list and the sandbox requirement placed where they cannot be bypassed):
//!
//! | # | step | verdict |
//! |---|---|---|
//! | 1 | a sensitive path (a secret of [`crate::HOME_SECRETS`], a machine secret, Garuda's own home, `sandbox.unreadable`, a `.env` file) that no allow rule *names* | deny |
//! | 2 | a write into a `.git` folder, or into a `.garuda` folder (project settings), each in any spelling that may open one (see [`crate::names_git_folder`], [`crate::names_garuda_folder`]) below the project root (a file tool, or a redirection of a command) | deny |
//! | 3 | a deny rule matches (for a command line: any of its simple commands, or a write target against the file rules) | deny |
//! | 4 | `outside_sandbox` under the strict profile; a command where a sandbox is required and none is available | deny |
//! | 5 | plan mode and the tool is not read-only: a sandboxed command (run with the project read-only) or a `web_fetch` / MCP call an allow rule names is allowed, everything else denied — plan mode never asks | allow / deny |
//! | 6 | an ask rule matches (in plan mode: deny) | ask |
//! | 7 | a read-only tool (`read_file`) | allow |
//! | 8 | a command that runs inside the OS sandbox | allow |
//! | 9 | an allow rule or a session rule covers the whole request, and a URL is not unusual | allow |
//! | 10 | otherwise | ask |
//!
//! A rule "names" a sensitive path when it has a pattern that matches it: `Read(.env.example)`
//! opens that file, a bare `Read` (every file) does not open secrets.
//!
//! # Commands
//!
//! A command line is split into simple commands ([`crate::command::split`]). A deny rule that
//! matches any of them denies the line, so a deny on `rm` catches `xargs rm`, `sudo rm` and
//! `bash -c 'rm …'`. An allow rule allows the line only when *every* simple command is matched
//! by some allow (or session) rule, none of them is dynamic (`$(…)`, `$VAR`, `eval`, `sh`
//! reading a pipe), and every file a redirection writes is covered by a `write_file` /
//! `edit_file` allow rule. A line that does not parse never matches an allow rule: it asks.
//!
//! # Paths
//!
//! A path is judged where it is written (relative to the project root, `.` and `..` resolved)
//! and where it leads through symbolic links that exist now. A deny step that matches either
//! denies; an allow rule must match both.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::command::{self, SimpleCommand};
use crate::host::HostEnv;
use crate::rule::{Rule, Tool};
use crate::sensitive::{is_env_file_name, HOME_SECRETS, SYSTEM_SECRETS};
use crate::settings::{EffectiveSettings, Origin, RuleList, SourceKind};

/// One request of the agent (or of `garuda policy decide`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `read_file`.
    ReadFile {
        /// Relative to the project root, or absolute.
        path: PathBuf,
    },
    /// `write_file`.
    WriteFile {
        /// Relative to the project root, or absolute.
        path: PathBuf,
    },
    /// `edit_file`.
    EditFile {
        /// Relative to the project root, or absolute.
        path: PathBuf,
    },
    /// `bash`.
    Bash {
        /// The command line.
        line: String,
        /// The model asked to run it outside the sandbox.
        outside_sandbox: bool,
    },
    /// `web_fetch`.
    WebFetch {
        /// The URL.
        url: String,
    },
    /// A tool of an MCP server (`mcp__server__tool`).
    Mcp {
        /// The tool's full name.
        name: String,
    },
}

impl Request {
    /// Builds a request from a tool name (ours or Claude Code's alias, or `mcp__…`) and its
    /// target, as `garuda policy decide TOOL TARGET` takes them.
    pub fn from_tool(tool: &str, target: &str, outside_sandbox: bool) -> Option<Request> {
        if tool.starts_with("mcp__") {
            return Some(Request::Mcp {
                name: tool.to_string(),
            });
        }
        let path = PathBuf::from(target);
        Some(match Tool::from_name(tool)? {
            Tool::ReadFile => Request::ReadFile { path },
            Tool::WriteFile => Request::WriteFile { path },
            Tool::EditFile => Request::EditFile { path },
            Tool::Bash => Request::Bash {
                line: target.to_string(),
                outside_sandbox,
            },
            Tool::WebFetch => Request::WebFetch {
                url: target.to_string(),
            },
        })
    }
}

/// What the engine knows about the moment of the request.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Plan mode: only read-only tools and sandboxed commands that cannot write the project.
    pub plan_mode: bool,
    /// Commands run in an OS sandbox under the effective policy (not the host executor).
    pub sandbox_available: bool,
    /// Rules the user allowed for this session ("allow for the session" answers).
    pub session_rules: Vec<Rule>,
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Refused.
    Deny,
    /// The user is asked.
    Ask,
    /// Runs without asking.
    Allow,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        })
    }
}

/// The step of the decision order that decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// 1: a sensitive path.
    SensitivePath,
    /// 2: a write into `.git`.
    GitWrite,
    /// 2: a write into a `.garuda` folder of the project.
    GarudaWrite,
    /// 3: a deny rule.
    DenyRule,
    /// 4: `outside_sandbox` under strict.
    StrictOutsideSandbox,
    /// 4: a command where a sandbox is required and none is available.
    SandboxRequired,
    /// 5: plan mode.
    PlanMode,
    /// 6: an ask rule.
    AskRule,
    /// 7: a read-only tool.
    ReadOnly,
    /// 8: a command in the OS sandbox.
    Sandboxed,
    /// 9: allow rules.
    AllowRule,
    /// 9: a session rule.
    SessionRule,
    /// 10: nothing allowed it.
    NoRule,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::SensitivePath => "sensitive path",
            Step::GitWrite => "write into .git",
            Step::GarudaWrite => "write into .garuda",
            Step::DenyRule => "deny rule",
            Step::StrictOutsideSandbox => "strict profile: no outside_sandbox",
            Step::SandboxRequired => "OS sandbox required",
            Step::PlanMode => "plan mode",
            Step::AskRule => "ask rule",
            Step::ReadOnly => "read-only tool",
            Step::Sandboxed => "command in the OS sandbox",
            Step::AllowRule => "allow rule",
            Step::SessionRule => "session rule",
            Step::NoRule => "no rule allows it",
        })
    }
}

/// A rule (or built-in entry) that took part in a decision, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// The rule as printed (`bash(git status)`), or the built-in entry (`~/.ssh`).
    pub rule: String,
    /// The file and line, `session`, or `built-in`.
    pub source: String,
}

impl Cause {
    fn rule(rule: &Rule, origin: &Origin) -> Cause {
        Cause {
            rule: rule.to_string(),
            source: origin.to_string(),
        }
    }

    fn builtin(what: impl Into<String>) -> Cause {
        Cause {
            rule: what.into(),
            source: "built-in".to_string(),
        }
    }
}

/// The engine's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// allow, ask or deny.
    pub verdict: Verdict,
    /// The step that decided.
    pub step: Step,
    /// The rules (or built-in entries) that decided; several for a command line whose simple
    /// commands were allowed by different rules; empty for steps 7, 8 and 10.
    pub causes: Vec<Cause>,
    /// One sentence for the user and the model.
    pub reason: String,
    /// The command must run with the project read-only (plan mode).
    pub project_read_only: bool,
}

impl Decision {
    fn new(verdict: Verdict, step: Step, causes: Vec<Cause>, reason: impl Into<String>) -> Self {
        Decision {
            verdict,
            step,
            causes,
            reason: reason.into(),
            project_read_only: false,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.verdict, self.step, self.reason)?;
        for cause in &self.causes {
            write!(f, "\n  rule {} from {}", cause.rule, cause.source)?;
        }
        Ok(())
    }
}

/// A path no tool may touch without an allow rule that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sensitive {
    path: PathBuf,
    cause: Cause,
    /// The weakest source whose allow rule may open it: a path the managed file made
    /// unreadable opens only for a managed rule, never for a user's.
    opened_by: SourceKind,
}

/// The engine for one effective policy and one project.
#[derive(Debug, Clone)]
pub struct Engine<'a> {
    settings: &'a EffectiveSettings,
    project_root: PathBuf,
    home: PathBuf,
    sensitive: Vec<Sensitive>,
}

impl<'a> Engine<'a> {
    /// The engine for `settings` in the project at `project_root` (absolute).
    pub fn new(settings: &'a EffectiveSettings, host: &HostEnv, project_root: &Path) -> Self {
        let mut sensitive: Vec<Sensitive> = HOME_SECRETS
            .iter()
            .map(|e| Sensitive {
                path: host.home.join(e.path),
                cause: Cause::builtin(format!("~/{} ({})", e.path, e.reason)),
                opened_by: SourceKind::User,
            })
            .collect();
        sensitive.extend(SYSTEM_SECRETS.iter().map(|(path, reason)| Sensitive {
            path: PathBuf::from(path),
            cause: Cause::builtin(format!("{path} ({reason})")),
            opened_by: SourceKind::User,
        }));
        sensitive.push(Sensitive {
            path: host.garuda_home.clone(),
            cause: Cause::builtin(format!(
                "{} (Garuda's home: audit keys and logs)",
                host.garuda_home.display()
            )),
            // The audit keys: no rule opens them to the agent.
            opened_by: SourceKind::Managed,
        });
        sensitive.extend(
            settings
                .extra_unreadable
                .iter()
                .map(|(path, origin)| Sensitive {
                    path: path.clone(),
                    cause: Cause {
                        rule: format!("sandbox.unreadable {}", path.display()),
                        source: origin.to_string(),
                    },
                    opened_by: origin.kind,
                }),
        );
        // Each entry also where it leads now, so a secret named through another spelling of
        // the home directory (a linked /home) is still found.
        let resolved: Vec<Sensitive> = sensitive
            .iter()
            .filter_map(|s| {
                let real = resolve_like_the_kernel(&s.path);
                (real != s.path).then(|| Sensitive {
                    path: real,
                    ..s.clone()
                })
            })
            .collect();
        sensitive.extend(resolved);
        Engine {
            settings,
            project_root: lexical(project_root, Path::new("/")),
            home: host.home.clone(),
            sensitive,
        }
    }

    /// Decides one request.
    pub fn decide(&self, request: &Request, ctx: &Context) -> Decision {
        // Under `managedRulesOnly` an answer "allow for the session" is a rule the managed
        // file did not write: it is not applied (each request is asked again).
        let without_session;
        let ctx = if self.settings.managed_rules_only.is_some() && !ctx.session_rules.is_empty() {
            without_session = Context {
                session_rules: Vec::new(),
                ..ctx.clone()
            };
            &without_session
        } else {
            ctx
        };
        match request {
            Request::ReadFile { path } => self.decide_file(Tool::ReadFile, path, ctx),
            Request::WriteFile { path } => self.decide_file(Tool::WriteFile, path, ctx),
            Request::EditFile { path } => self.decide_file(Tool::EditFile, path, ctx),
            Request::Bash {
                line,
                outside_sandbox,
            } => self.decide_bash(line, *outside_sandbox, ctx),
            Request::WebFetch { url } => self.decide_fetch(url, ctx),
            Request::Mcp { name } => self.decide_mcp(name, ctx),
        }
    }

    /// Where a path is written (lexically absolute) and where it leads now through links.
    fn places(&self, path: &Path) -> Vec<PathBuf> {
        let joined = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.project_root.join(path)
        };
        let written = lexical(&joined, Path::new("/"));
        // Where the kernel would go: links resolved before each `..` applies, as path lookup
        // does (`src/link/../x` is `x` next to the link's target, not `src/x`).
        let resolved = resolve_like_the_kernel(&joined);
        if resolved == written {
            vec![written]
        } else {
            vec![written, resolved]
        }
    }

    /// The folders each command of a line may run in: the project root, and every folder an
    /// earlier `cd`/`pushd` may have moved to (a `cd` may fail or run in a branch, so all are
    /// kept). After a `cd` whose target is only known at run time, `popd` or `cd -`, the folder
    /// is unknown.
    fn cwd_trail(&self, commands: &[SimpleCommand]) -> Vec<Cwds> {
        let mut current = Cwds {
            dirs: vec![self.project_root.clone()],
            unknown: false,
        };
        let mut trail = Vec::with_capacity(commands.len());
        for c in commands {
            trail.push(current.clone());
            let Some(name) = c.argv.first().map(String::as_str) else {
                continue;
            };
            if !matches!(name, "cd" | "pushd" | "popd" | "chdir") {
                continue;
            }
            let args: Vec<&String> = c.argv[1..].iter().filter(|a| *a != "--").collect();
            match (name, args.as_slice()) {
                ("cd" | "chdir", []) => current.dirs.push(self.home.clone()),
                ("cd" | "pushd" | "chdir", [dir]) if !c.dynamic && !dir.starts_with('-') => {
                    let target = self.expand_tilde(dir);
                    let bases: Vec<PathBuf> = if target.is_absolute() {
                        vec![PathBuf::from("/")]
                    } else {
                        current.dirs.clone()
                    };
                    // bash's `cd` is logical by default: `link/..` is the folder holding the
                    // link, not the link target's parent. Keep both readings.
                    let mut more = Vec::new();
                    for base in bases {
                        let joined = base.join(&target);
                        more.push(lexical(&joined, Path::new("/")));
                        more.push(resolve_like_the_kernel(&joined));
                    }
                    for dir in more {
                        if !current.dirs.contains(&dir) {
                            current.dirs.push(dir);
                        }
                    }
                }
                _ => current.unknown = true,
            }
        }
        trail
    }

    /// Where a command's path argument or redirection target may lead: relative to each folder
    /// the command may run in, `~/` in the home folder.
    fn target_places(&self, target: &str, cwd: &Cwds) -> Vec<PathBuf> {
        let expanded = self.expand_tilde(target);
        if expanded.is_absolute() {
            return self.places(&expanded);
        }
        let mut out = Vec::new();
        for dir in &cwd.dirs {
            for place in self.places(&dir.join(&expanded)) {
                if !out.contains(&place) {
                    out.push(place);
                }
            }
        }
        out
    }

    /// Whether the project holds a repository besides its own: `.git/modules`, or a `.git`
    /// (folder or file) below the root. git recurses into submodules and reads their config,
    /// which a sandboxed command can write. The walk stops at 20,000 entries, or at a folder it
    /// cannot list, and then answers yes (fail closed).
    fn has_nested_repository(&self) -> bool {
        const LIMIT: usize = 20_000;
        if self.project_root.join(".git/modules").exists() {
            return true;
        }
        let mut stack = vec![self.project_root.clone()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            // A folder that cannot be listed could hide a repository: answer yes.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                return true;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > LIMIT {
                    return true;
                }
                let name = entry.file_name();
                if name == ".git" {
                    if dir != self.project_root {
                        return true;
                    }
                    continue;
                }
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
        false
    }

    /// Whether any deny or ask rule applies to commands.
    fn has_bash_deny_or_ask_rules(&self) -> bool {
        self.rules(RuleList::Deny)
            .chain(self.rules(RuleList::Ask))
            .any(|(rule, _)| rule.tool().covers(Tool::Bash))
    }

    /// A redirection target as the shell would open it: `~/x` is in the home directory.
    fn expand_tilde(&self, target: &str) -> PathBuf {
        match target.strip_prefix("~/") {
            Some(rest) => self.home.join(rest),
            None if target == "~" => self.home.clone(),
            None => PathBuf::from(target),
        }
    }

    fn rules(&self, list: RuleList) -> impl Iterator<Item = (&Rule, &Origin)> {
        self.settings.rules_in(list).map(|r| (&r.rule, &r.origin))
    }

    fn path_rule(&self, list: RuleList, tool: Tool, places: &[PathBuf]) -> Option<Cause> {
        self.rules(list)
            .find(|(rule, _)| {
                places
                    .iter()
                    .any(|p| rule.matches_path(tool, p, &self.project_root, &self.home))
            })
            .map(|(rule, origin)| Cause::rule(rule, origin))
    }

    /// An allow (or session) rule with a pattern that matches every place (it names the path),
    /// from a source at least as strict as `opened_by`. Session answers count as the user's.
    fn naming_allow(
        &self,
        tool: Tool,
        places: &[PathBuf],
        opened_by: SourceKind,
        ctx: &Context,
    ) -> Option<Cause> {
        let names = |rule: &Rule| {
            rule.pattern().is_some()
                && places
                    .iter()
                    .all(|p| rule.matches_path(tool, p, &self.project_root, &self.home))
        };
        self.rules(RuleList::Allow)
            .find(|(rule, origin)| origin.kind <= opened_by && names(rule))
            .map(|(rule, origin)| Cause::rule(rule, origin))
            .or_else(|| {
                ctx.session_rules
                    .iter()
                    .filter(|_| SourceKind::User <= opened_by)
                    .find(|rule| names(rule))
                    .map(session_cause)
            })
    }

    fn allow_for_path(
        &self,
        tool: Tool,
        places: &[PathBuf],
        ctx: &Context,
    ) -> Option<(Step, Cause)> {
        let covers = |rule: &Rule| {
            places
                .iter()
                .all(|p| rule.matches_path(tool, p, &self.project_root, &self.home))
        };
        if let Some((rule, origin)) = self.rules(RuleList::Allow).find(|(rule, _)| covers(rule)) {
            return Some((Step::AllowRule, Cause::rule(rule, origin)));
        }
        ctx.session_rules
            .iter()
            .find(|rule| covers(rule))
            .map(|rule| (Step::SessionRule, session_cause(rule)))
    }

    /// The sensitive entry one of `places` falls under, with the weakest source that may open
    /// it.
    fn sensitive_hit(&self, places: &[PathBuf]) -> Option<(Cause, SourceKind)> {
        for place in places {
            if let Some(s) = self.sensitive.iter().find(|s| place.starts_with(&s.path)) {
                return Some((s.cause.clone(), s.opened_by));
            }
            if let Some(name) = place
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n),
                    _ => None,
                })
                .find(|n| is_env_file_name(n))
            {
                let cause =
                    Cause::builtin(format!("{} (dotenv file: secrets)", name.to_string_lossy()));
                return Some((cause, SourceKind::User));
            }
        }
        None
    }

    fn decide_file(&self, tool: Tool, path: &Path, ctx: &Context) -> Decision {
        let mut places = self.places(path);
        // A tool may take `~/x` literally or as the home folder: judge both.
        if let Some(text) = path.to_str().filter(|t| *t == "~" || t.starts_with("~/")) {
            for place in self.places(&self.expand_tilde(text)) {
                if !places.contains(&place) {
                    places.push(place);
                }
            }
        }
        let shown = path.display();
        if let Some((cause, opened_by)) = self.sensitive_hit(&places) {
            if self.naming_allow(tool, &places, opened_by, ctx).is_none() {
                return Decision::new(
                    Verdict::Deny,
                    Step::SensitivePath,
                    vec![cause],
                    format!("{shown} is a sensitive path and no allow rule names it"),
                );
            }
        }
        let writes = tool != Tool::ReadFile;
        if writes && places.iter().any(|p| in_git_dir(p)) {
            return Decision::new(
                Verdict::Deny,
                Step::GitWrite,
                vec![Cause::builtin(".git/ (hooks and config run on the host)")],
                format!("{shown} is inside a .git folder"),
            );
        }
        if writes && places.iter().any(|p| self.in_garuda_dir(p)) {
            return Decision::new(
                Verdict::Deny,
                Step::GarudaWrite,
                vec![garuda_cause()],
                format!("{shown} is inside a .garuda folder"),
            );
        }
        if let Some(cause) = self.path_rule(RuleList::Deny, tool, &places) {
            return Decision::new(
                Verdict::Deny,
                Step::DenyRule,
                vec![cause],
                format!("a deny rule matches {shown}"),
            );
        }
        if ctx.plan_mode && writes {
            return Decision::new(
                Verdict::Deny,
                Step::PlanMode,
                vec![],
                "plan mode: files are not written",
            );
        }
        if let Some(cause) = self.path_rule(RuleList::Ask, tool, &places) {
            return self.ask_rule(cause, ctx, &shown.to_string());
        }
        if !writes {
            return Decision::new(Verdict::Allow, Step::ReadOnly, vec![], "read-only tool");
        }
        match self.allow_for_path(tool, &places, ctx) {
            Some((step, cause)) => Decision::new(
                Verdict::Allow,
                step,
                vec![cause],
                format!("an allow rule covers {shown}"),
            ),
            None => Decision::new(
                Verdict::Ask,
                Step::NoRule,
                vec![],
                format!("no allow rule covers {shown}"),
            ),
        }
    }

    /// True when a component of `path` below the project root may name a `.garuda` folder:
    /// the project's settings, which only the user changes (commands see the folder
    /// read-only). Components of the root itself do not count, so a project kept under a
    /// folder of that name is still writable; a path outside the project is judged whole.
    fn in_garuda_dir(&self, path: &Path) -> bool {
        let below = path.strip_prefix(&self.project_root).unwrap_or(path);
        below.components().any(|c| match c {
            Component::Normal(n) => crate::names_garuda_folder(&n.to_string_lossy()),
            _ => false,
        })
    }

    fn ask_rule(&self, cause: Cause, ctx: &Context, what: &str) -> Decision {
        if ctx.plan_mode {
            return Decision::new(
                Verdict::Deny,
                Step::PlanMode,
                vec![cause],
                format!("plan mode never asks, and an ask rule matches {what}"),
            );
        }
        Decision::new(
            Verdict::Ask,
            Step::AskRule,
            vec![cause],
            format!("an ask rule matches {what}"),
        )
    }

    fn decide_bash(&self, line: &str, outside_sandbox: bool, ctx: &Context) -> Decision {
        let split = command::split(line);
        let commands: &[SimpleCommand] = split.as_deref().unwrap_or(&[]);
        // Steps 1–3 on what can be known statically. A line that does not parse reaches none
        // of them, and then can only be asked (or run in the sandbox), never allowed by a rule.
        // Targets are checked as written even when some word of the command is dynamic: a
        // literal `.git/` or `.env` in a target can only add a refusal, never remove one.
        let trail = self.cwd_trail(commands);
        for (c, cwd) in commands.iter().zip(&trail) {
            // What it reads: `<` targets and arguments that name a path.
            let arguments = path_arguments(c);
            let read_targets = c
                .reads
                .iter()
                .map(|r| (r, true))
                .chain(arguments.iter().map(|a| (a, false)));
            for (target, is_redirect) in read_targets {
                let places = self.target_places(target, cwd);
                if !is_redirect && !judged_as_path(target, &places) {
                    continue;
                }
                if let Some((cause, opened_by)) = self.sensitive_hit(&places) {
                    if self
                        .naming_allow(Tool::ReadFile, &places, opened_by, ctx)
                        .is_none()
                    {
                        return Decision::new(
                            Verdict::Deny,
                            Step::SensitivePath,
                            vec![cause],
                            format!("the command reads {target}, a sensitive path"),
                        );
                    }
                }
                if let Some(cause) = self.path_rule(RuleList::Deny, Tool::ReadFile, &places) {
                    return Decision::new(
                        Verdict::Deny,
                        Step::DenyRule,
                        vec![cause],
                        format!("a deny rule matches {target}, which the command reads"),
                    );
                }
            }
            for target in c.writes.iter().chain(option_writes(c).iter()) {
                let places = self.target_places(target, cwd);
                if let Some((cause, opened_by)) = self.sensitive_hit(&places) {
                    if self
                        .naming_allow(Tool::WriteFile, &places, opened_by, ctx)
                        .is_none()
                    {
                        return Decision::new(
                            Verdict::Deny,
                            Step::SensitivePath,
                            vec![cause],
                            format!("the command writes {target}, a sensitive path"),
                        );
                    }
                }
                if places.iter().any(|p| in_git_dir(p)) {
                    return Decision::new(
                        Verdict::Deny,
                        Step::GitWrite,
                        vec![Cause::builtin(".git/ (hooks and config run on the host)")],
                        format!("the command writes {target}, inside a .git folder"),
                    );
                }
                if places.iter().any(|p| self.in_garuda_dir(p)) {
                    return Decision::new(
                        Verdict::Deny,
                        Step::GarudaWrite,
                        vec![garuda_cause()],
                        format!("the command writes {target}, inside a .garuda folder"),
                    );
                }
            }
        }
        for (c, cwd) in commands.iter().zip(&trail) {
            if let Some((rule, origin)) = self
                .rules(RuleList::Deny)
                .find(|(rule, _)| rule.matches_command(&c.argv))
            {
                return Decision::new(
                    Verdict::Deny,
                    Step::DenyRule,
                    vec![Cause::rule(rule, origin)],
                    format!("a deny rule matches `{}`", c.argv.join(" ")),
                );
            }
            for target in c.writes.iter().chain(option_writes(c).iter()) {
                let places = self.target_places(target, cwd);
                if let Some(cause) = self.path_rule(RuleList::Deny, Tool::WriteFile, &places) {
                    return Decision::new(
                        Verdict::Deny,
                        Step::DenyRule,
                        vec![cause],
                        format!("a deny rule matches the write to {target}"),
                    );
                }
            }
        }
        if outside_sandbox && self.settings.is_strict() {
            let source = self
                .settings
                .profile_origin
                .as_ref()
                .map_or_else(|| "policy".to_string(), Origin::to_string);
            return Decision::new(
                Verdict::Deny,
                Step::StrictOutsideSandbox,
                vec![Cause {
                    rule: "profile strict".into(),
                    source,
                }],
                "the strict profile runs every command in the OS sandbox; outside_sandbox does not exist",
            );
        }
        if !ctx.sandbox_available && self.settings.require_sandbox {
            let source = self
                .settings
                .require_sandbox_origin
                .as_ref()
                .map_or_else(|| "policy".to_string(), Origin::to_string);
            return Decision::new(
                Verdict::Deny,
                Step::SandboxRequired,
                vec![Cause {
                    rule: "requireSandbox".into(),
                    source,
                }],
                "the policy requires an OS sandbox and none is available",
            );
        }
        let sandboxed = ctx.sandbox_available && !outside_sandbox;
        // Deny and ask rules were checked on what the line shows. A line that does not parse
        // (bash still runs every command before the error) or a command whose name or code is
        // only known when it runs could hide a command those rules name: when there are such
        // rules, the line is asked (plan mode: denied) even in the sandbox.
        if self.has_bash_deny_or_ask_rules() {
            let hidden = match &split {
                Err(e) => Some(format!("the line cannot be parsed ({e})")),
                Ok(commands) => commands
                    .iter()
                    .find(|c| may_hide_a_command(c))
                    .map(|c| format!("`{}` is only known when it runs", c.argv.join(" "))),
            };
            if let Some(why) = hidden {
                let (verdict, step) = if ctx.plan_mode {
                    (Verdict::Deny, Step::PlanMode)
                } else {
                    (Verdict::Ask, Step::NoRule)
                };
                return Decision::new(
                    verdict,
                    step,
                    vec![],
                    format!("{why}, so the deny and ask rules for commands cannot be checked"),
                );
            }
        }
        if ctx.plan_mode {
            return if sandboxed {
                let mut d = Decision::new(
                    Verdict::Allow,
                    Step::PlanMode,
                    vec![],
                    "plan mode: runs in the OS sandbox with the project read-only",
                );
                d.project_read_only = true;
                d
            } else {
                Decision::new(
                    Verdict::Deny,
                    Step::PlanMode,
                    vec![],
                    "plan mode: a command outside the OS sandbox could write the project",
                )
            };
        }
        for c in commands {
            if let Some((rule, origin)) = self
                .rules(RuleList::Ask)
                .find(|(rule, _)| rule.matches_command(&c.argv))
            {
                return self.ask_rule(
                    Cause::rule(rule, origin),
                    ctx,
                    &format!("`{}`", c.argv.join(" ")),
                );
            }
        }
        if sandboxed {
            return Decision::new(
                Verdict::Allow,
                Step::Sandboxed,
                vec![],
                "runs in the OS sandbox (project and temp writable, secrets unreadable, no network)",
            );
        }
        let commands = match &split {
            Ok(commands) => commands,
            Err(e) => {
                return Decision::new(
                    Verdict::Ask,
                    Step::NoRule,
                    vec![],
                    format!("the line cannot be parsed, so no rule can allow it: {e}"),
                )
            }
        };
        self.allow_whole_line(commands, ctx)
    }

    /// Step 9 for a command line: every simple command and every written file covered.
    fn allow_whole_line(&self, commands: &[SimpleCommand], ctx: &Context) -> Decision {
        let mut causes: Vec<Cause> = Vec::new();
        let mut only_session = true;
        if commands.is_empty() {
            return Decision::new(Verdict::Ask, Step::NoRule, vec![], "an empty command line");
        }
        let trail = self.cwd_trail(commands);
        for (c, cwd) in commands.iter().zip(&trail) {
            let shown = c.argv.join(" ");
            if c.dynamic {
                return Decision::new(
                    Verdict::Ask,
                    Step::NoRule,
                    vec![],
                    format!("`{shown}` is only known when it runs, so no rule can allow it"),
                );
            }
            if let Some(why) = not_allowable_on_the_host(c, cwd, &|| self.has_nested_repository()) {
                return Decision::new(Verdict::Ask, Step::NoRule, vec![], why);
            }
            let found = self
                .rules(RuleList::Allow)
                .find(|(rule, _)| rule.matches_command(&c.argv))
                .map(|(rule, origin)| {
                    only_session = false;
                    Cause::rule(rule, origin)
                })
                .or_else(|| {
                    ctx.session_rules
                        .iter()
                        .find(|rule| rule.matches_command(&c.argv))
                        .map(session_cause)
                });
            let Some(cause) = found else {
                return Decision::new(
                    Verdict::Ask,
                    Step::NoRule,
                    vec![],
                    format!("no allow rule matches `{shown}`"),
                );
            };
            if !causes.contains(&cause) {
                causes.push(cause);
            }
            let writes: Vec<String> = c.writes.iter().cloned().chain(option_writes(c)).collect();
            for target in &writes {
                if cwd.unknown && !Path::new(&*self.expand_tilde(target)).is_absolute() {
                    return Decision::new(
                        Verdict::Ask,
                        Step::NoRule,
                        vec![],
                        format!("the command writes {target} in a folder only known when it runs"),
                    );
                }
                let places = self.target_places(target, cwd);
                match self.allow_for_path(Tool::WriteFile, &places, ctx) {
                    Some((step, cause)) => {
                        only_session &= step == Step::SessionRule;
                        if !causes.contains(&cause) {
                            causes.push(cause);
                        }
                    }
                    None => {
                        return Decision::new(
                            Verdict::Ask,
                            Step::NoRule,
                            vec![],
                            format!(
                                "the command writes {target} and no allow rule covers that file"
                            ),
                        )
                    }
                }
            }
        }
        let step = if only_session {
            Step::SessionRule
        } else {
            Step::AllowRule
        };
        Decision::new(
            Verdict::Allow,
            step,
            causes,
            "allow rules cover every command of the line",
        )
    }

    fn decide_fetch(&self, url: &str, ctx: &Context) -> Decision {
        match FetchTarget::parse(url) {
            Ok(target) => self.decide_named(
                &target.host,
                |rule| rule.matches_host(&target.host, target.port),
                target.unusual.clone(),
                ctx,
            ),
            Err(why) if ctx.plan_mode => Decision::new(
                Verdict::Deny,
                Step::PlanMode,
                vec![],
                format!("plan mode: unusual URL {url:?}: {why}"),
            ),
            Err(why) => Decision::new(
                Verdict::Ask,
                Step::NoRule,
                vec![],
                format!("unusual URL {url:?}: {why}"),
            ),
        }
    }

    fn decide_mcp(&self, name: &str, ctx: &Context) -> Decision {
        self.decide_named(name, |rule| rule.matches_mcp(name), None, ctx)
    }

    /// Steps 3, 5, 6, 9 and 10 for a request named by one thing a rule matches (a host, an MCP
    /// tool): deny rule; in plan mode only a naming allow rule; ask rule; allow or session
    /// rule unless the request is `unusual` (then asked); otherwise ask.
    fn decide_named(
        &self,
        what: &str,
        matches: impl Fn(&Rule) -> bool,
        unusual: Option<String>,
        ctx: &Context,
    ) -> Decision {
        let matching = |list: RuleList| {
            self.rules(list)
                .find(|(rule, _)| matches(rule))
                .map(|(rule, origin)| Cause::rule(rule, origin))
        };
        if let Some(cause) = matching(RuleList::Deny) {
            return Decision::new(
                Verdict::Deny,
                Step::DenyRule,
                vec![cause],
                format!("a deny rule matches {what}"),
            );
        }
        let allowed = matching(RuleList::Allow)
            .map(|c| (Step::AllowRule, c))
            .or_else(|| {
                ctx.session_rules
                    .iter()
                    .find(|rule| matches(rule))
                    .map(|rule| (Step::SessionRule, session_cause(rule)))
            });
        if ctx.plan_mode {
            return match (allowed, unusual) {
                (Some((_, cause)), None) => Decision::new(
                    Verdict::Allow,
                    Step::PlanMode,
                    vec![cause],
                    format!("plan mode: an allow rule names {what}"),
                ),
                _ => Decision::new(
                    Verdict::Deny,
                    Step::PlanMode,
                    vec![],
                    format!("plan mode: no allow rule names {what}"),
                ),
            };
        }
        if let Some(cause) = matching(RuleList::Ask) {
            return self.ask_rule(cause, ctx, what);
        }
        match (allowed, unusual) {
            (Some((step, cause)), None) => Decision::new(
                Verdict::Allow,
                step,
                vec![cause],
                format!("an allow rule covers {what}"),
            ),
            (Some(_), Some(why)) => Decision::new(
                Verdict::Ask,
                Step::NoRule,
                vec![],
                format!("unusual URL ({why}): asked even though a rule names the host"),
            ),
            (None, _) => Decision::new(
                Verdict::Ask,
                Step::NoRule,
                vec![],
                format!("no allow rule covers {what}"),
            ),
        }
    }
}

/// The folders a command may run in (see [`Engine::cwd_trail`]).
#[derive(Debug, Clone)]
struct Cwds {
    dirs: Vec<PathBuf>,
    /// An earlier command moved to a folder only known at run time.
    unknown: bool,
}

/// The words of a command that name a path: arguments after the program name that start with
/// `/`, `~/`, `./`, `../` or hold a `/`, or name a dotenv file; an option's attached value
/// (`--file=~/.aws/credentials`) too. A heuristic for reads: a command's own way of reading
/// files is unknown, but a secret named on the line is not let through.
fn path_arguments(c: &SimpleCommand) -> Vec<String> {
    c.argv
        .iter()
        .skip(1)
        .flat_map(|w| {
            // The word itself, and an option's attached value (`--file=~/.aws/credentials`).
            // Words that start with `-` are kept: after `--`, or a file named `-k`, they are
            // files; a real option names nothing that exists and is skipped later.
            let attached = match w.split_once('=') {
                Some((opt, value)) if opt.starts_with('-') => Some(value.to_owned()),
                _ => None,
            };
            std::iter::once(w.clone()).chain(attached)
        })
        .collect()
}

/// Whether an argument is judged as a path: one that looks like a path (a `/`, `~`, a dotenv
/// name), or a bare word that names something that exists at one of `places` (a link `k` in
/// the project to `~/.ssh/id_rsa`, `credentials` after `cd ~/.aws`).
fn judged_as_path(word: &str, places: &[PathBuf]) -> bool {
    if word.starts_with('-') {
        return places.iter().any(|p| std::fs::symlink_metadata(p).is_ok());
    }
    word.contains('/')
        || word == "~"
        || word.starts_with("~/")
        || is_env_file_name(std::ffi::OsStr::new(word))
        || places.iter().any(|p| std::fs::symlink_metadata(p).is_ok())
}

/// Files a command writes through its own options: `--output=FILE` / `--output FILE` (git,
/// curl, sort, …), `-o FILE` for `curl`, `wget -O`, `find -fprint/-fprintf/-fls FILE`, and
/// `tee FILE…`. Known only for these programs; other ways to write are not listed.
fn option_writes(c: &SimpleCommand) -> Vec<String> {
    let mut out = Vec::new();
    let Some(name) = c.argv.iter().find(|w| !is_assignment(w)) else {
        return out;
    };
    let base = name.rsplit('/').next().unwrap_or(name);
    let start = c.argv.iter().position(|w| w == name).unwrap_or(0) + 1;
    let args = &c.argv[start..];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let next = args.get(i + 1).cloned();
        let takes_next = a == "--output"
            || (base == "curl" && a == "-o")
            || (base == "wget" && a == "-O")
            || (base == "find" && matches!(a, "-fprint" | "-fprintf" | "-fls" | "-fprint0"));
        if let Some(v) = a.strip_prefix("--output=") {
            out.push(v.to_owned());
        } else if takes_next {
            out.extend(next.clone());
        } else if base == "tee" && !a.starts_with('-') {
            out.push(a.to_owned());
        }
        i += 1;
    }
    out
}

/// Why an allow rule must not cover this command outside the sandbox, whatever the rule says:
/// `git` anywhere but the project root, or pointed at another repository (a repository a
/// sandboxed command wrote has a config whose `core.fsmonitor`, hooks or pager run code on the
/// host; only the project's own `.git/config` and hooks are kept read-only), and paths through
/// `/proc/<pid>` or `/dev/fd`, which name the deciding process's files, not the shell's.
fn not_allowable_on_the_host(
    c: &SimpleCommand,
    cwd: &Cwds,
    nested_repository: &dyn Fn() -> bool,
) -> Option<String> {
    let words: Vec<&String> = c.argv.iter().chain(&c.writes).chain(&c.reads).collect();
    if let Some(w) = words.iter().find(|w| {
        ["/proc/", "/dev/fd/"]
            .iter()
            .any(|p| w.starts_with(p) || w.contains(&format!("={p}")))
    }) {
        return Some(format!(
            "{w} names a process's files, which the decision cannot see: asked"
        ));
    }
    let name = c.argv.iter().find(|w| !is_assignment(w))?;
    if name.rsplit('/').next() != Some("git") {
        return None;
    }
    if nested_repository() {
        return Some(
            "the project holds another repository (a submodule or a nested `.git`) whose config \
             a sandboxed command could write, and git reads it: asked"
                .to_owned(),
        );
    }
    let elsewhere = cwd.dirs.len() > 1 || cwd.unknown;
    let redirected = c.argv.iter().any(|a| {
        a == "-C"
            || a == "-c"
            || a.starts_with("--git-dir")
            || a.starts_with("--work-tree")
            || a.starts_with("--exec-path")
            || a.starts_with("--config-env")
    });
    (elsewhere || redirected).then(|| {
        "git outside the project root or pointed at another repository could use a repository \
         a sandboxed command wrote, whose config runs code: asked"
            .to_owned()
    })
}

/// Programs that run other programs or code given to them: when such a command has a word
/// known only at run time, that word may be the command a deny rule names.
const RUNS_OTHER_CODE: &[&str] = &[
    "eval", "source", ".", "exec", "command", "builtin", "sh", "bash", "dash", "zsh", "ksh",
    "fish", "busybox", "xargs", "env", "sudo", "doas", "su", "nohup", "nice", "ionice", "timeout",
    "time", "stdbuf", "setsid", "chrt", "taskset", "flock", "unshare", "find", "parallel", "watch",
    "script", "awk", "gawk", "perl", "python", "python3", "ruby", "node",
];

/// Whether a simple command may run a command the line does not show: a pseudo-command for
/// arithmetic, `[[ … ]]` or a loop variable; a command name known only at run time; or a
/// program that runs other code, with a word known only at run time.
fn may_hide_a_command(c: &SimpleCommand) -> bool {
    if !c.dynamic {
        return false;
    }
    let Some(name) = c.argv.iter().find(|w| !is_assignment(w)) else {
        // Only assignments (or nothing): an assignment's value can run `$(…)`, which the
        // splitter lists as its own command; the assignment itself hides nothing.
        return c.argv.is_empty();
    };
    let base = name.rsplit('/').next().unwrap_or(name);
    name.contains(['$', '`', '*', '?', '[', '{', '\\', '"', '\''])
        || matches!(name.as_str(), "[[" | "((" | "for ((")
        || name.starts_with("for ")
        || RUNS_OTHER_CODE.contains(&base)
}

/// `NAME=value` with a valid shell name.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            && !name.starts_with(|ch: char| ch.is_ascii_digit())
    })
}

fn garuda_cause() -> Cause {
    Cause::builtin(".garuda/ (project settings: changed only by the user)")
}

fn session_cause(rule: &Rule) -> Cause {
    Cause {
        rule: rule.to_string(),
        source: "session".to_string(),
    }
}

/// `path` made absolute against `base`, with `.` and `..` resolved without the filesystem.
fn lexical(path: &Path, base: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// How many links one lookup follows before giving up (the kernel's limit is 40).
const MAX_LINKS: usize = 40;

/// The place an absolute path leads to now, walked component by component as the kernel's path
/// lookup does: every link is followed where it stands, also a link whose target does not
/// exist yet (`open(O_CREAT)` creates the target), before the next component (a `..`
/// included) applies; a component that does not exist is taken as written. A link planted to
/// point at a secret or into `.git` is judged at its target.
fn resolve_like_the_kernel(path: &Path) -> PathBuf {
    let mut links = 0;
    resolve_following(path, &mut links)
}

fn resolve_following(path: &Path, links: &mut usize) -> PathBuf {
    let components: Vec<Component> = path.components().collect();
    let mut current = PathBuf::from("/");
    for (i, c) in components.iter().enumerate() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            // `current` has no link in it, so its parent is the real `..`.
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                current.push(name);
                let is_link =
                    std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
                if !is_link || *links >= MAX_LINKS {
                    continue;
                }
                let Ok(target) = std::fs::read_link(&current) else {
                    continue;
                };
                *links += 1;
                current.pop();
                let mut next = current.join(target);
                for rest in &components[i + 1..] {
                    next.push(rest.as_os_str());
                }
                return resolve_following(&next, links);
            }
        }
    }
    current
}

/// True when some component of `path` may open `.git` ([`crate::names_git_folder`]: `.GIT`,
/// `.git.`, `GIT~1` on a filesystem that folds names): the folder, or a file inside it. (A
/// `.git` *file* of a worktree is covered too: rewriting it would point git at another folder.)
fn in_git_dir(path: &Path) -> bool {
    path.components().any(|c| match c {
        Component::Normal(n) => n == ".git" || n.to_str().is_some_and(crate::names_git_folder),
        _ => false,
    })
}

/// The host and port of a `web_fetch` URL, and why it is unusual when it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FetchTarget {
    host: String,
    port: u16,
    unusual: Option<String>,
}

impl FetchTarget {
    fn parse(url: &str) -> Result<FetchTarget, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| "no scheme (write https://…)".to_string())?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "https" => 443,
            "http" => 80,
            other => return Err(format!("scheme {other:?} is not http or https")),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let mut unusual = None;
        let host_port = match authority.rsplit_once('@') {
            Some((_, hp)) => {
                unusual = Some("it carries a user name or password".to_string());
                hp
            }
            None => authority,
        };
        let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
            let (addr, after) = v6
                .split_once(']')
                .ok_or_else(|| "unclosed [ in the host".to_string())?;
            (format!("[{addr}]"), after.strip_prefix(':'))
        } else {
            match host_port.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (host_port.to_string(), None),
            }
        };
        let port = match port {
            None | Some("") => default_port,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("port {p:?} is not a number from 0 to 65535"))?,
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return Err("no host".to_string());
        }
        if unusual.is_none() {
            // Parsed as the proxy parses targets: numeric hosts in any spelling (`127.1`,
            // `0x7f000001`, `2130706433`, `[::ffff:127.0.0.1]`) name an address, not a name a
            // rule could mean.
            unusual = match crate::network::TargetHost::parse(&host) {
                Ok(crate::network::TargetHost::Ip(addr)) => {
                    Some(format!("the host is an IP address ({addr})"))
                }
                Ok(crate::network::TargetHost::Name(_)) if !host.is_ascii() => {
                    Some("the host has non-ASCII characters".to_string())
                }
                Ok(crate::network::TargetHost::Name(_)) => None,
                Err(e) => Some(format!("the host is malformed: {e}")),
            };
        }
        Ok(FetchTarget {
            host,
            port,
            unusual,
        })
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
