//! `garuda audit`: verify, list, show, run a witness, export the install secret.
//!
//! Exit codes:
//!
//! | command | 0 | 1 | 2 | 125 |
//! |---|---|---|---|---|
//! | `verify` | verified, or no sessions recorded | tampered | cannot decide, or verify could not run ("cannot tell" is never "ok") | — |
//! | `list`, `show` | every line listed or shown verifies (or there are no sessions) | a line does not verify | a session's secret was not given (`--key`) | Garuda's own failure: an unknown or malformed session id, a project folder that does not exist, a file that cannot be read |
//! | `witness-serve`, `key export` | done | — | — | Garuda's own failure |
//!
//! `list` and `show` check each session's own lines (MAC, `seq`, `prev`, epoch), not the
//! evidence between sessions (checkpoints, the register, a witness): that is `verify`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use garuda_audit::{
    Finding, InstallSecret, Severity, Shown, VerifyOptions, VerifyTarget, WitnessConfig,
};
use garuda_policy::{Flags, HostEnv};
use garuda_text::visible;
use serde::Serialize;
use serde_json::Value;

/// What `garuda audit verify` was asked.
pub struct VerifyArgs {
    /// Machine-readable output.
    pub json: bool,
    /// The project whose log to verify (default: the git root above the current folder).
    pub project: Option<PathBuf>,
    /// Every project's log.
    pub all: bool,
    /// Exported install secrets to verify with (in addition to the one on disk).
    pub keys: Vec<PathBuf>,
    /// A witness folder (as `garuda audit witness-serve DIR` keeps it) to compare with,
    /// instead of the policy's witness command.
    pub witness_dir: Option<PathBuf>,
    /// Sessions this process is writing, vouched for by it (the chat's own).
    pub trusted_heads: Vec<garuda_audit::SessionHead>,
}

/// `garuda audit verify`; returns the exit code.
pub fn verify(args: VerifyArgs) -> Result<i32> {
    let json = args.json;
    let report = verify_report(args)?;
    if json {
        // The same value, with no raw control or bidirectional character for a terminal.
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&report.to_json())?)
        );
    } else {
        print!("{}", report.render_text());
    }
    Ok(report.outcome().exit_code())
}

/// What `garuda audit verify` prints for `args` (its `json` aside), as a report: the chat's
/// `/audit verify` shows the same.
pub fn verify_report(args: VerifyArgs) -> Result<garuda_audit::Report> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let audit_root = host.garuda_home.join("audit");
    let keys_dir = host.garuda_home.join("keys");
    let keys = load_keys(&keys_dir, &args.keys)?;
    let (target, project) = if args.all {
        (VerifyTarget::All(audit_root), None)
    } else {
        let cwd = std::env::current_dir().context("reading the current folder")?;
        let project = crate::project::resolve_project(args.project, &cwd)?;
        let dir = garuda_audit::project_audit_dir(&audit_root, &project)?;
        (VerifyTarget::Project(dir), Some(project))
    };
    let mut options = VerifyOptions::new(target, keys);
    options.keys_dir = Some(keys_dir);
    options.trusted_heads = args.trusted_heads;
    options.project_root = project.clone();
    options.witness = match args.witness_dir {
        Some(dir) => Some(WitnessConfig::Dir(dir)),
        None => policy_witness(&host, project.as_deref()),
    };
    Ok(garuda_audit::verify(&options))
}

/// The install secret on disk (if any), then each exported one given with `--key`.
fn load_keys(keys_dir: &Path, files: &[PathBuf]) -> Result<Vec<InstallSecret>> {
    let mut keys = Vec::new();
    if let Some(secret) = InstallSecret::load(keys_dir)
        .with_context(|| format!("reading the install secret in {}", keys_dir.display()))?
    {
        keys.push(secret);
    }
    for file in files {
        keys.push(
            InstallSecret::read_file(file)
                .with_context(|| format!("reading the key {}", file.display()))?,
        );
    }
    Ok(keys)
}

/// The witness command of the effective policy, if the policy loads and names one. A policy
/// that does not load leaves verify without a witness and says so: the log is still checked.
fn policy_witness(host: &HostEnv, project: Option<&Path>) -> Option<WitnessConfig> {
    let project = project?;
    match garuda_policy::load_policy(project, host, &Flags::default()) {
        Ok(settings) => settings
            .audit_witness
            .map(|(argv, _)| WitnessConfig::Command(argv)),
        Err(e) => {
            eprintln!(
                "garuda: the policy does not load ({}); verifying without a witness",
                garuda_text::visible(&e.to_string())
            );
            None
        }
    }
}

/// What `garuda audit list` and `show` read the log with.
pub struct ReadArgs {
    /// The project (default: the git root above the current folder).
    pub project: Option<PathBuf>,
    /// Machine-readable output.
    pub json: bool,
    /// Exported install secrets (in addition to the one on disk).
    pub keys: Vec<PathBuf>,
}

/// A project's audit folder and the keys to read it with.
struct Log {
    /// The project folder (canonical).
    project: PathBuf,
    /// Whether the user named it (`--project`): the hints then name it too.
    named: bool,
    /// Its audit folder.
    dir: PathBuf,
    keys: Vec<InstallSecret>,
}

impl Log {
    fn open(args: &ReadArgs) -> Result<Log> {
        let host = HostEnv::from_process().context("reading the environment")?;
        let cwd = std::env::current_dir().context("reading the current folder")?;
        let project = crate::project::resolve_project(args.project.clone(), &cwd)?;
        let dir = garuda_audit::project_audit_dir(&host.garuda_home.join("audit"), &project)?;
        let keys = load_keys(&host.garuda_home.join("keys"), &args.keys)?;
        Ok(Log {
            project,
            named: args.project.is_some(),
            dir,
            keys,
        })
    }

    /// `garuda audit list`, with `--project` when the user gave it.
    fn list_hint(&self) -> String {
        if self.named {
            format!("garuda audit list --project {}", self.project.display())
        } else {
            "garuda audit list".to_string()
        }
    }

    /// The message for a project without sessions.
    fn nothing_recorded(&self) -> String {
        format!(
            "no sessions recorded for project {} yet (every `garuda sandbox` run records one)",
            self.project.display()
        )
    }

    /// Whether any session is recorded (the audit folder exists and names one). Reads the
    /// journals without checking them: cheap enough for a hint.
    fn session_ids(&self) -> Result<Vec<String>> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        Ok(garuda_audit::list_sessions(&self.dir)?)
    }

    /// Every session as a row, oldest first.
    fn rows(&self) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        if self.dir.exists() {
            garuda_audit::show_each(&self.dir, &self.keys, |s| rows.push(Row::of(&s)))?;
        }
        rows.sort_by(|a, b| (a.sort_key(), &a.session).cmp(&(b.sort_key(), &b.session)));
        Ok(rows)
    }
}

/// How far a session's lines verify, in verify's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Check {
    /// Every line of the session verifies.
    Verified,
    /// A line does not verify (listing stopped there).
    Tampered,
    /// The session's secret was not given: nothing of it could be checked.
    Undecidable,
}

/// One session, as `garuda audit list` prints it: only what its verified lines say. Every
/// string in it comes from the log, where a command chose it (its argument vector, an error
/// quoting a path): printed through `garuda_text`.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Row {
    /// The session id.
    session: String,
    /// When it started (UTC, ISO 8601, milliseconds): its first line's time; `None` when no
    /// line verifies.
    time: Option<String>,
    /// The command's argument vector (`command_intent`), as recorded (secrets redacted).
    command: Option<Vec<String>>,
    /// The executor it ran under.
    executor: Option<String>,
    /// `direct` or `staged`.
    mode: Option<String>,
    /// `exited`, `killed by signal`, `timed out` (as `command_result` records it), `refused`
    /// (stopped before the command), `failed` (the executor failed after the intent), `no
    /// result` (no result recorded: still running, or its writer died), `no command`, or
    /// `unknown` (nothing of it verifies).
    status: String,
    /// The exit code, or the signal number.
    code: Option<i64>,
    /// What happened to a staged change (`applied`, `discarded`, …).
    staged: Option<String>,
    /// Hosts the proxy refused.
    blocked: Vec<String>,
    /// What `garuda sandbox` exited with (`session_end`).
    exit_code: Option<i64>,
    /// A refusal's or failure's message.
    error: Option<String>,
    /// An agent session (`garuda -p`): its model, journal and how many tool calls and
    /// commands it made, as one line.
    agent: Option<String>,
    /// How far its lines verify.
    check: Check,
    /// Where they stopped verifying.
    stopped: Option<Finding>,
}

impl Row {
    /// The row of a session's verified lines.
    fn of(s: &Shown) -> Row {
        let event = |kind: &str| s.lines.iter().find(|l| l.kind == kind).map(|l| &l.event);
        let text = |v: Option<&Value>, key: &str| {
            v.and_then(|e| e.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let agent = event("agent_session").map(|a| {
            let count = |kind: &str| s.lines.iter().filter(|l| l.kind == kind).count();
            format!(
                "garuda -p, {}: {} tool calls, {} commands; journal {}",
                text(Some(a), "model").unwrap_or_else(|| "?".into()),
                count("tool_call"),
                count("command_intent"),
                text(Some(a), "journal").unwrap_or_else(|| "?".into()),
            )
        });
        // An agent session's intents are its commands' (`id`, `command`), not one argv.
        let intent = event("command_intent").filter(|_| agent.is_none());
        let result = event("command_result");
        let refusal = event("refusal");
        let failed = event("command_failed");
        let end = event("session_end");
        let command = intent
            .and_then(|e| e.get("argv"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                    .collect()
            });
        let check = match &s.stopped {
            None => Check::Verified,
            Some(f) if f.severity == Severity::Error => Check::Tampered,
            Some(_) => Check::Undecidable,
        };
        let status = if let Some(r) = result {
            text(Some(r), "status").unwrap_or_else(|| "unknown".into())
        } else if refusal.is_some() {
            "refused".into()
        } else if failed.is_some() {
            "failed".into()
        } else if s.lines.is_empty() {
            "unknown".into()
        } else if agent.is_some() {
            "agent session".into()
        } else if intent.is_some() {
            "no result".into()
        } else {
            "no command".into()
        };
        Row {
            session: s.session.clone(),
            time: s.lines.first().map(|l| l.time.clone()),
            command,
            executor: text(intent, "executor"),
            mode: text(intent, "mode"),
            status,
            code: result.and_then(|e| e.get("code")).and_then(Value::as_i64),
            staged: text(result, "staged"),
            blocked: result
                .and_then(|e| e.get("blocked"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            exit_code: end
                .and_then(|e| e.get("info"))
                .and_then(|i| i.get("exit_code"))
                .and_then(Value::as_i64),
            error: text(refusal.or(failed), "error"),
            agent,
            check,
            stopped: s.stopped.clone(),
        }
    }

    /// Start time for ordering: the verified first line's, else the second the session id
    /// names (`YYYYMMDDTHHMMSSZ-…`, written as the line's time is).
    fn sort_key(&self) -> String {
        self.time
            .clone()
            .unwrap_or_else(|| time_of_id(&self.session).unwrap_or_default())
    }

    /// The result in a few words: `exit 3`, `signal 9`, `timed out`, `refused`, … and what
    /// happened to a staged change, and `garuda exit N` when the run's code is not the
    /// command's.
    fn result_text(&self) -> String {
        let mut out = match (self.status.as_str(), self.code) {
            ("exited", Some(c)) => format!("exit {c}"),
            ("killed by signal", Some(n)) => format!("signal {n}"),
            (other, _) => other.to_string(),
        };
        if let Some(s) = &self.staged {
            out.push_str(&format!(", staged: {s}"));
        }
        if !self.blocked.is_empty() {
            out.push_str(&format!(", {} host(s) refused", self.blocked.len()));
        }
        let command_code = match self.status.as_str() {
            "exited" => self.code,
            "killed by signal" => self.code.map(|n| 128 + n),
            "timed out" => Some(124),
            _ => None,
        };
        if let Some(e) = self.exit_code {
            if command_code != Some(e) {
                out.push_str(&format!(", garuda exit {e}"));
            }
        }
        match (self.check, &self.stopped) {
            (Check::Verified, _) => {}
            (Check::Tampered, Some(f)) => {
                out = match f.line {
                    Some(l) => format!("TAMPERED at line {l} ({})", f.code),
                    None => format!("TAMPERED ({})", f.code),
                }
            }
            (Check::Undecidable, Some(f)) if f.code == garuda_audit::Code::KeyUnknown => {
                out = "NOT CHECKED: its secret was not given (--key FILE)".into();
            }
            (_, stopped) => {
                out = format!(
                    "NOT CHECKED ({})",
                    stopped.as_ref().map_or("?", |f| f.code.as_str())
                );
            }
        }
        out
    }

    /// The command as one short line: arguments quoted for a shell where they need it,
    /// every hidden character escaped, cut to `width` characters.
    fn command_text(&self, width: usize) -> String {
        if let Some(agent) = &self.agent {
            return truncate(&visible(agent), width);
        }
        let Some(argv) = &self.command else {
            return match &self.error {
                Some(e) => truncate(&format!("({})", visible(e)), width),
                None if self.check != Check::Verified => "(not verified)".to_string(),
                None => "(no command)".to_string(),
            };
        };
        let line: Vec<String> = argv
            .iter()
            .map(|a| visible(&shell_quote(a)).into_owned())
            .collect();
        truncate(&line.join(" "), width)
    }

    /// The row as one line of text: time (UTC, to the second), session id, result, command.
    fn render(&self) -> String {
        let time = match &self.time {
            // `2026-05-15T12:00:00.123Z` -> `2026-05-15T12:00:00Z`.
            Some(t) => format!("{}Z", visible(t.get(..19).unwrap_or(t))),
            None => time_of_id(&self.session).unwrap_or_else(|| "-".into()),
        };
        format!(
            "{time}  {}  {:<14}  {}",
            visible(&self.session),
            truncate(&visible(&self.result_text()), RESULT_WIDTH),
            self.command_text(COMMAND_WIDTH)
        )
    }
}

/// Widths of the result and command columns (characters).
const RESULT_WIDTH: usize = 60;
const COMMAND_WIDTH: usize = 72;

/// `2026-05-15T12:00:00Z` from a session id `20260515T120000Z-…`.
fn time_of_id(id: &str) -> Option<String> {
    let t = id.get(..16)?;
    if !t.is_ascii() {
        return None;
    }
    Some(format!(
        "{}-{}-{}T{}:{}:{}Z",
        &t[0..4],
        &t[4..6],
        &t[6..8],
        &t[9..11],
        &t[11..13],
        &t[13..15]
    ))
}

/// An argument as a shell would need it quoted to mean itself: as it is when it holds only
/// characters no shell treats specially, else in single quotes (a single quote inside as
/// `'"'"'`, which needs no backslash that `visible` would double).
fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\"'\"'"))
    }
}

/// At most `width` characters, the last one `…` when cut.
fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The rows as `garuda audit list` prints them, oldest first.
fn render_rows(rows: &[Row]) -> String {
    rows.iter().map(|r| r.render() + "\n").collect()
}

/// The exit code of `list` and `show` for what they read: 1 if a line does not verify, 2 if
/// a session could not be checked, else 0.
fn check_code<'a>(checks: impl IntoIterator<Item = &'a Check>) -> i32 {
    let mut code = 0;
    for c in checks {
        match c {
            Check::Tampered => return 1,
            Check::Undecidable => code = 2,
            Check::Verified => {}
        }
    }
    code
}

/// `garuda audit list`: one line per session, oldest first (the newest is the last line, next
/// to the prompt): start time, session id, result, command.
pub fn list(args: ReadArgs) -> Result<i32> {
    let log = Log::open(&args)?;
    let rows = log.rows()?;
    if args.json {
        let out = serde_json::json!({
            "project": log.project.display().to_string(),
            "audit_dir": log.dir.display().to_string(),
            "sessions": rows,
        });
        // The same values, with no raw control or bidirectional character for a terminal.
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&out)?)
        );
    } else if rows.is_empty() {
        println!("{}", visible(&log.nothing_recorded()));
    } else {
        print!("{}", render_rows(&rows));
    }
    Ok(check_code(rows.iter().map(|r| &r.check)))
}

/// How many sessions `show` without an id lists before the newest session's lines.
const SHOW_RECENT: usize = 10;

/// `garuda audit show`: the verified lines of one session. Without `--session`: the newest
/// sessions as `list` prints them (at most [`SHOW_RECENT`]), then the newest one's lines.
pub fn show(args: ReadArgs, session: Option<String>) -> Result<i32> {
    let log = Log::open(&args)?;
    let (session, recent) = match session {
        Some(id) => {
            if !garuda_audit::valid_session_id(&id) {
                bail!(
                    "{id:?} is not a session id (one looks like 20260515T120000Z-0123456789abcdef); `{}` lists the sessions of project {}",
                    log.list_hint(),
                    log.project.display()
                );
            }
            let ids = log.session_ids()?;
            if ids.is_empty() {
                bail!(
                    "no session {id} in the audit log: {}",
                    log.nothing_recorded()
                );
            }
            if !ids.contains(&id) {
                bail!(
                    "no session {id} in the audit log of project {} ({} session(s) recorded); `{}` lists them",
                    log.project.display(),
                    ids.len(),
                    log.list_hint()
                );
            }
            (id, None)
        }
        None => {
            let rows = log.rows()?;
            let Some(newest) = rows.last() else {
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({ "session": null, "lines": [], "stopped": null })
                    );
                } else {
                    println!("{}", visible(&log.nothing_recorded()));
                }
                return Ok(0);
            };
            let from = rows.len().saturating_sub(SHOW_RECENT);
            (
                newest.session.clone(),
                Some((rows.len(), rows[from..].to_vec())),
            )
        }
    };
    let shown = garuda_audit::show(&log.dir, &session, &log.keys)?;
    let check = Row::of(&shown).check;
    if args.json {
        let out = serde_json::json!({
            "session": shown.session,
            "lines": shown.lines,
            "stopped": shown.stopped,
        });
        // The same value, with no raw control or bidirectional character for a terminal.
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&out)?)
        );
    } else {
        if let Some((total, recent)) = &recent {
            println!(
                "project {}: {total} session(s) recorded{}, oldest first; the newest one's lines below (`--session ID` shows another)",
                visible(&log.project.display().to_string()),
                if *total > recent.len() {
                    format!(", the {} newest listed (`{}` lists all)", recent.len(), log.list_hint())
                } else {
                    String::new()
                }
            );
            print!("{}", render_rows(recent));
            println!();
        }
        print!("{}", shown.render_text());
    }
    Ok(check_code([&check]))
}

/// `garuda audit witness-serve DIR`: one request on stdin, the answer on stdout.
pub fn witness_serve(dir: &Path) -> Result<i32> {
    garuda_audit::witness_serve(dir, std::io::stdin().lock(), std::io::stdout().lock())?;
    Ok(0)
}

/// `garuda audit key export OUT [--remove]`.
pub fn key_export(out: &Path, remove: bool) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let id = garuda_audit::key_export(&host.garuda_home.join("keys"), out, remove)?;
    println!(
        "exported install secret {} to {}",
        garuda_audit::hex(&id),
        out.display()
    );
    if remove {
        println!(
            "removed it from {}: verify with --key {}",
            host.garuda_home.join("keys").display(),
            out.display()
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use garuda_audit::ShownLine;
    use serde_json::json;

    fn session(events: &[(&str, Value)]) -> Shown {
        Shown {
            session: "20260515T120000Z-0123456789abcdef".into(),
            lines: events
                .iter()
                .enumerate()
                .map(|(i, (kind, event))| ShownLine {
                    line: i as u64 + 1,
                    seq: i as u64,
                    epoch: 0,
                    time: "2026-05-15T12:00:00.123Z".into(),
                    kind: (*kind).to_string(),
                    event: event.clone(),
                })
                .collect(),
            stopped: None,
        }
    }

    fn result(status: &str, code: Option<i64>, staged: Option<&str>, end: i64) -> Shown {
        session(&[
            ("session_start", json!({})),
            (
                "command_intent",
                json!({"argv": ["make"], "mode": "staged"}),
            ),
            (
                "command_result",
                json!({"status": status, "code": code, "staged": staged, "blocked": ["a.example:443"]}),
            ),
            ("session_end", json!({"info": {"exit_code": end}})),
        ])
    }

    /// Each way a run ends, in the few words `list` prints; `garuda exit N` only when the
    /// run's code is not the command's own.
    #[test]
    fn results_read_as_the_run_ended() {
        let cases = [
            (
                result("exited", Some(3), None, 3),
                "exit 3, 1 host(s) refused",
            ),
            (
                result("killed by signal", Some(9), None, 137),
                "signal 9, 1 host(s) refused",
            ),
            (
                result("timed out", None, Some("discarded"), 124),
                "timed out, staged: discarded, 1 host(s) refused",
            ),
            (
                result("exited", Some(0), Some("discarded"), 121),
                "exit 0, staged: discarded, 1 host(s) refused, garuda exit 121",
            ),
            (
                session(&[
                    ("session_start", json!({})),
                    ("command_intent", json!({"argv": ["make"]})),
                ]),
                "no result",
            ),
            (
                session(&[
                    ("session_start", json!({})),
                    ("refusal", json!({"error": "no sandbox"})),
                    ("session_end", json!({"info": {"exit_code": 125}})),
                ]),
                "refused, garuda exit 125",
            ),
            (session(&[("session_start", json!({}))]), "no command"),
            (
                session(&[
                    ("session_start", json!({})),
                    ("agent_session", json!({"model": "m/x", "journal": "J"})),
                    ("session_end", json!({"info": {"exit_code": 0}})),
                ]),
                "agent session, garuda exit 0",
            ),
        ];
        for (shown, want) in cases {
            assert_eq!(Row::of(&shown).result_text(), want);
        }
        let mut tampered = result("exited", Some(0), None, 0);
        tampered.stopped = Some(Finding {
            file: "/j".into(),
            offset: Some(9),
            line: Some(7),
            seq: Some(1),
            epoch: Some(0),
            code: garuda_audit::Code::BadMac,
            severity: Severity::Error,
            message: String::new(),
        });
        let row = Row::of(&tampered);
        assert_eq!(row.result_text(), "TAMPERED at line 7 (BAD_MAC)");
        assert_eq!(check_code([&row.check]), 1);
        assert_eq!(
            check_code([&Check::Verified, &Check::Undecidable]),
            2,
            "a session not checked"
        );
    }

    /// Arguments are quoted where a shell would need it, escaped, and cut; the id gives the
    /// time of a session none of whose lines verify.
    #[test]
    fn commands_are_quoted_escaped_and_cut() {
        assert_eq!(shell_quote("make"), "make");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
        let mut row = Row::of(&session(&[(
            "command_intent",
            json!({"argv": ["sh", "-c", "x\u{1b}[2K\u{202e}", "ok"]}),
        )]));
        assert_eq!(row.command_text(72), r"sh -c 'x\e[2K\u{202e}' ok");
        // An agent session: its calls and commands, not one argument vector.
        let agent = Row::of(&session(&[
            ("agent_session", json!({"model": "m/x", "journal": "J"})),
            ("command_intent", json!({"id": 1, "command": "make"})),
            ("tool_call", json!({"tool": "run_command"})),
        ]));
        assert_eq!(
            agent.command_text(72),
            "garuda -p, m/x: 1 tool calls, 1 commands; journal J"
        );
        assert_eq!(row.command_text(8), "sh -c '…");
        row.command = None;
        assert_eq!(row.command_text(72), "(no command)");
        assert_eq!(
            time_of_id("20260515T120000Z-0123456789abcdef").as_deref(),
            Some("2026-05-15T12:00:00Z")
        );
        assert_eq!(time_of_id("x"), None);
    }
}
