//! `garuda` with no task: the chat, one turn per message, every question asked by the
//! supervisor.
//!
//! This is the chat's **line mode**: what `garuda` does when its input or output is not a
//! terminal (`garuda < script > out`), or `TERM=dumb`. Each input line is a message to the
//! agent or a slash command; a question (an edit, a command that needs a yes) takes its answer
//! from the next input line. The session set-up and take-down are `-p`'s
//! ([`crate::run_agent`]): the proxy, the confined agent, the broker, the tools, the journal
//! and the audit session.
//!
//! **Nothing printed can pass for the supervisor.** Every line the supervisor writes starts at
//! the first column with a marker of its own: `> ` the user's message as read, `· ` a tool
//! call, `? ` a question, `garuda: ` a notice. Every line of the model's text is indented by
//! two spaces and escaped ([`garuda_text::visible_lines`]: no escape sequence, carriage return
//! or other control character reaches the terminal as itself), so no text of the model or of
//! a tool can draw a question, rewrite a line or reach the clipboard, title or a hyperlink.
//!
//! Slash commands: `/help`, `/audit verify` (verify this project's audit log; each finding
//! with its code), `/exit`. An unknown one is named and nothing is sent.

use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::rc::Rc;

use anyhow::Result;
use garuda_ipc::{StopReason, UiEvent};

use crate::broker::host::{Approval, Approved, Approver};
use crate::run_agent::{Activity, ChatEnd, Front, SessionFacts, SessionSwitch, Turns};
use crate::staged_ask::StagedQuestion;

/// The slash commands, with what each does, for `/help`.
pub const SLASH_COMMANDS: [(&str, &str); 10] = [
    ("/help", "this list"),
    (
        "/clear",
        "start a new session with no history (this one can be resumed)",
    ),
    (
        "/resume [ID]",
        "this project's sessions; with an ID, continue that one",
    ),
    (
        "/model [REF]",
        "the model; with a provider/model reference, go on with that model in this session",
    ),
    ("/audit", "this session's audit records so far"),
    (
        "/audit verify",
        "verify this project's audit log and show each finding with its code",
    ),
    (
        "/policy",
        "the effective policy, each value with the file it came from",
    ),
    (
        "!COMMAND",
        "run COMMAND as the agent's bash would (sandboxed; staged in staged mode); its output goes to the next message",
    ),
    (
        "@PATH",
        "in a message: attach the file, read through the supervisor's rules",
    ),
    ("/exit", "end the session (so does the end of the input)"),
];

/// Most bytes of a `!command`'s output or an `@path` file put into the next message.
const ATTACH_BYTES: usize = 16 * 1024;

/// Most lines of an edit's diff shown with its question; the rest are counted.
const DIFF_LINES_SHOWN: usize = 200;

/// The chat's input and output in line mode.
pub struct LineIo {
    input: Box<dyn BufRead>,
    out: Box<dyn Write>,
    /// The model's text ended its last line (the next text starts an indented line).
    at_line_start: bool,
}

impl LineIo {
    /// Line mode on `input` and `out` (stdin and stdout).
    pub fn new(input: Box<dyn BufRead>, out: Box<dyn Write>) -> LineIo {
        LineIo {
            input,
            out,
            at_line_start: true,
        }
    }

    /// A line of the supervisor's own, at the first column (`text` must already be escaped:
    /// every caller builds it from escaped parts).
    pub(crate) fn say(&mut self, text: &str) {
        self.end_text();
        let _ = writeln!(self.out, "{text}");
        let _ = self.out.flush();
    }

    /// More of the model's text: escaped, each line indented.
    fn model_text(&mut self, text: &str) {
        let shown = garuda_text::visible_lines(text);
        let mut buf = String::with_capacity(shown.len() + 8);
        for c in shown.chars() {
            if self.at_line_start && c != '\n' {
                buf.push_str("  ");
                self.at_line_start = false;
            }
            buf.push(c);
            if c == '\n' {
                self.at_line_start = true;
            }
        }
        let _ = self.out.write_all(buf.as_bytes());
        let _ = self.out.flush();
    }

    /// Ends an open line of the model's text.
    fn end_text(&mut self) {
        if !self.at_line_start {
            let _ = writeln!(self.out);
            self.at_line_start = true;
        }
    }

    /// The next input line without its line ending (`None` at the end of the input, or once
    /// a signal came: a line typed after Ctrl-C answers nothing, the read being restarted
    /// under it).
    fn read(&mut self) -> Option<String> {
        let mut line = String::new();
        let read = self.input.read_line(&mut line);
        if crate::sys::forwarded_signal().is_some() {
            return None;
        }
        match read {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                while line.ends_with(['\n', '\r']) {
                    line.pop();
                }
                Some(line)
            }
        }
    }
}

/// The chat's questions, asked on its own output and answered from its input.
pub struct LineApprover(pub Rc<RefCell<LineIo>>);

impl Approver for LineApprover {
    fn approve(&mut self, question: &Approval) -> bool {
        self.answer(question) != Approved::No
    }

    fn staged(&mut self, question: &StagedQuestion) -> bool {
        let mut io = self.0.borrow_mut();
        for line in staged_lines(question) {
            io.say(&line);
        }
        let yes = match question {
            StagedQuestion::ApplyOrDiscard {
                can_apply: true, ..
            } => {
                io.say("? apply or discard this change? a = apply, d = discard");
                matches!(io.read().as_deref().map(str::trim), Some("a" | "apply"))
            }
            StagedQuestion::ApplyOrDiscard {
                can_apply: false, ..
            } => {
                io.say("? this change can only be discarded (the list is incomplete): d = discard");
                let _ = io.read();
                false
            }
            StagedQuestion::Guard { .. } => {
                io.say("? y = yes, n = no");
                matches!(io.read().as_deref().map(str::trim), Some("y" | "yes"))
            }
            // Taken by the tool host, never asked.
            StagedQuestion::Outcome { .. } => return true,
            // Asked through `answer` by the tool host, never here.
            StagedQuestion::Host { .. } => return false,
        };
        io.say(staged_answered(question, yes));
        yes
    }

    fn answer(&mut self, question: &Approval) -> Approved {
        let mut io = self.0.borrow_mut();
        for line in approval_lines(question) {
            io.say(&line);
        }
        io.say("? allow it? y = yes, once; a = always, for this session; n = no");
        let answer = match io.read().as_deref().map(str::trim) {
            Some("y" | "yes") => Approved::Once,
            Some("a" | "always") => Approved::ForSession,
            _ => Approved::No,
        };
        io.say(approval_answered(answer));
        answer
    }
}

/// A question about a tool call as the supervisor shows it (both front ends): the tool, its
/// target and the engine's reason, escaped, then an edit's diff.
pub(crate) fn approval_lines(question: &Approval) -> Vec<String> {
    let v = garuda_text::visible;
    let mut lines = vec![format!(
        "? {} {}: {}",
        question.tool,
        v(&question.target),
        v(&question.reason)
    )];
    if let Some((before, after)) = &question.change {
        for line in diff_lines(&question.target, before.as_deref(), after) {
            lines.push(format!("?   {line}"));
        }
    }
    lines
}

/// The answer to a tool call's question, as the supervisor records it on screen.
pub(crate) fn approval_answered(answer: Approved) -> &'static str {
    match answer {
        Approved::Once => "? answered: yes, once",
        Approved::ForSession => "? answered: always, for this session",
        Approved::No => "? answered: no",
    }
}

/// A staged command's question as the supervisor shows it (both front ends): the rendered
/// change (already escaped by the renderer: `visible_lines` keeps its backslashes single), or
/// a guard's own question.
pub(crate) fn staged_lines(question: &StagedQuestion) -> Vec<String> {
    match question {
        StagedQuestion::ApplyOrDiscard { summary, .. } => {
            std::iter::once("? the staged command changed the project's view:".to_string())
                .chain(
                    summary
                        .lines()
                        .map(|l| format!("?   {}", garuda_text::visible_lines(l))),
                )
                .collect()
        }
        StagedQuestion::Guard { text } => vec![format!("? {}", garuda_text::visible(text))],
        StagedQuestion::Outcome { .. } | StagedQuestion::Host { .. } => Vec::new(),
    }
}

/// The answer to a staged question, as the supervisor records it on screen.
pub(crate) fn staged_answered(question: &StagedQuestion, yes: bool) -> &'static str {
    match (question, yes) {
        (StagedQuestion::ApplyOrDiscard { .. }, true) => "? answered: apply",
        (StagedQuestion::ApplyOrDiscard { .. }, false) => "? answered: discard",
        (StagedQuestion::Guard { .. }, true) => "? answered: yes",
        (StagedQuestion::Guard { .. }, false)
        | (StagedQuestion::Outcome { .. } | StagedQuestion::Host { .. }, _) => "? answered: no",
    }
}

/// The unified diff of an edit, escaped line by line, at most [`DIFF_LINES_SHOWN`] lines.
pub(crate) fn diff_lines(path: &str, before: Option<&str>, after: &str) -> Vec<String> {
    let old = before.unwrap_or("");
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_secs(2))
        .diff_lines(old, after);
    let shown_path = garuda_text::visible(path);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(
            &if before.is_some() {
                format!("a/{shown_path}")
            } else {
                "/dev/null".to_string()
            },
            &format!("b/{shown_path}"),
        )
        .to_string();
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| garuda_text::visible_lines(l).into_owned())
        .collect();
    if lines.len() > DIFF_LINES_SHOWN {
        let more = lines.len() - DIFF_LINES_SHOWN;
        lines.truncate(DIFF_LINES_SHOWN);
        lines.push(format!("({more} more lines of the diff not shown)"));
    }
    lines
}

/// The chat in line mode, on stdin and stdout.
pub struct LineFront {
    io: Rc<RefCell<LineIo>>,
}

impl LineFront {
    /// Line mode on this process's stdin and stdout.
    pub fn stdio() -> LineFront {
        LineFront {
            io: Rc::new(RefCell::new(LineIo::new(
                Box::new(std::io::BufReader::new(std::io::stdin())),
                Box::new(std::io::stdout()),
            ))),
        }
    }
}

impl Front for LineFront {
    fn approver(&self) -> Box<dyn Approver> {
        Box::new(LineApprover(Rc::clone(&self.io)))
    }

    /// Runs the chat until `/exit`, the end of the input (exit 0) or a signal (130).
    fn drive(&self, turns: &mut Turns<'_, '_, '_>, facts: &SessionFacts<'_>) -> Result<ChatEnd> {
        let io = &self.io;
        let shown = Rc::clone(io);
        turns.set_activity(Activity::Lines(Box::new(move |line| {
            shown.borrow_mut().say(&format!("· {line}"));
        })));
        io.borrow_mut().say(&header(facts));
        let mut notes = Vec::new();
        loop {
            let Some(line) = io.borrow_mut().read() else {
                return Ok(ChatEnd::Exit(if crate::sys::forwarded_signal().is_some() {
                    130
                } else {
                    0
                }));
            };
            let message = line.trim();
            if message.is_empty() {
                continue;
            }
            if let Some(command) = message.strip_prefix('/') {
                let mut said = Vec::new();
                let end = slash(command, facts, turns, &mut |l| said.push(l));
                let mut io = io.borrow_mut();
                for line in said {
                    io.say(&line);
                }
                if let Some(end) = end {
                    return Ok(end);
                }
                continue;
            }
            if let Some(command) = message.strip_prefix('!') {
                let mut said = Vec::new();
                let note = run_bang(turns, command.trim(), &mut |l| said.push(l))?;
                let mut io = io.borrow_mut();
                for line in said {
                    io.say(&line);
                }
                notes.push(note);
                continue;
            }
            io.borrow_mut()
                .say(&format!("> {}", garuda_text::visible(message)));
            let message = {
                let mut said = Vec::new();
                let attached = attach_files(turns, message, &mut |l| said.push(l))?;
                let mut io = io.borrow_mut();
                for line in said {
                    io.say(&line);
                }
                with_notes(&mut notes, attached)
            };
            let message = message.as_str();
            let summary = {
                let ui_io = Rc::clone(io);
                turns.turn(message, &mut |event| show_event(&ui_io, event))?
            };
            let mut io = io.borrow_mut();
            io.end_text();
            if crate::sys::forwarded_signal().is_some() {
                // A signal stops the chat in line mode (there is no key to stop a turn only).
                io.say("garuda: interrupted");
                return Ok(ChatEnd::Exit(130));
            }
            if summary.reason != StopReason::Done {
                io.say(&format!(
                    "garuda: the turn stopped: {}",
                    reason_name(summary.reason)
                ));
            }
        }
    }
}

/// The message with the notes of the `!command`s run since the last one before it.
pub(crate) fn with_notes(notes: &mut Vec<String>, message: String) -> String {
    if notes.is_empty() {
        return message;
    }
    let mut out = std::mem::take(notes).join("\n\n");
    out.push_str("\n\n");
    out.push_str(&message);
    out
}

/// The chat's first line: what the session is.
pub(crate) fn header(facts: &SessionFacts<'_>) -> String {
    format!(
        "garuda chat: model {}, executor {}, commands {}, session {}; /help lists the commands",
        garuda_text::visible(facts.model),
        facts.executor,
        if facts.staged {
            "staged (each change asked: apply or discard)"
        } else {
            "direct"
        },
        facts.session_id,
    )
}

/// The terminal's footer: the same facts, short.
pub(crate) fn footer(facts: &SessionFacts<'_>) -> String {
    format!(
        "{} · {} · {} · session {}",
        garuda_text::visible(facts.model),
        facts.executor,
        if facts.staged { "staged" } else { "direct" },
        facts.session_id
    )
}

/// A stop reason as the wire names it.
pub(crate) fn reason_name(reason: StopReason) -> String {
    serde_json::json!(reason)
        .as_str()
        .unwrap_or("unknown")
        .to_string()
}

/// A slash command (`command` without its `/`): its lines to `say`, each the supervisor's and
/// escaped; `Some` when it ends this session (the chat, or for another session).
pub(crate) fn slash(
    command: &str,
    facts: &SessionFacts<'_>,
    turns: &Turns<'_, '_, '_>,
    say: &mut dyn FnMut(String),
) -> Option<ChatEnd> {
    let v = garuda_text::visible;
    match command.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["exit" | "quit"] => return Some(ChatEnd::Exit(0)),
        ["clear"] => {
            say(format!(
                "garuda: a new session; this one is kept (/resume {} goes back to it)",
                facts.session_id
            ));
            return Some(ChatEnd::Switch(SessionSwitch {
                model: None,
                resume: None,
            }));
        }
        ["resume"] => {
            let project = facts.project.to_string_lossy().into_owned();
            own_command(say, &["sessions", "--project", &project]);
            say("garuda: /resume ID continues one of them".into());
        }
        ["resume", id] => {
            if *id == facts.session_id {
                say(format!("garuda: this is session {}", facts.session_id));
                return None;
            }
            let known = crate::sessions::SessionStore::new(&facts.host.garuda_home, facts.project)
                .and_then(|store| store.read(id));
            match known {
                Ok(_) => {
                    say(format!("garuda: resuming session {}", v(id)));
                    return Some(ChatEnd::Switch(SessionSwitch {
                        model: None,
                        resume: Some((*id).to_string()),
                    }));
                }
                Err(e) => say(format!(
                    "garuda: cannot resume {}: {}",
                    v(id),
                    v(&e.to_string())
                )),
            }
        }
        ["model"] => say(format!("garuda: model {}", v(facts.model))),
        ["model", reference] => {
            match crate::models::select(&facts.host.garuda_home, Some(reference), &facts.host.vars)
            {
                Ok(resolved) => {
                    say(format!(
                        "garuda: model {}, from the next message on (session {} goes on)",
                        v(&resolved.reference()),
                        facts.session_id
                    ));
                    return Some(ChatEnd::Switch(SessionSwitch {
                        model: Some((*reference).to_string()),
                        resume: Some(facts.session_id.to_string()),
                    }));
                }
                Err(e) => say(format!(
                    "garuda: no model {}: {}; still {}",
                    v(reference),
                    v(&e.to_string()),
                    v(facts.model)
                )),
            }
        }
        ["help"] => {
            for (name, what) in SLASH_COMMANDS {
                say(format!("garuda: {name:<14} {what}"));
            }
        }
        ["audit", "verify"] => audit_verify(say, facts.project, turns.audit_head()),
        ["audit"] => {
            let session = turns.audit_head().session;
            let project = facts.project.to_string_lossy().into_owned();
            own_command(
                say,
                &[
                    "audit",
                    "show",
                    "--project",
                    &project,
                    "--session",
                    &session,
                ],
            );
        }
        ["policy"] => {
            let project = facts.project.to_string_lossy().into_owned();
            own_command(say, &["policy", "--project", &project]);
        }
        _ => say(format!(
            "garuda: no command /{} (see /help); nothing was sent",
            garuda_text::visible(command)
        )),
    }
    None
}

/// `garuda ARGS` (this executable, an argument vector, no shell), its output each line the
/// supervisor's and escaped: the chat shows what the command shows, from the same code.
fn own_command(say: &mut dyn FnMut(String), args: &[&str]) {
    let out = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
    });
    match out {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            for line in text.lines() {
                say(format!("garuda: {}", garuda_text::visible_lines(line)));
            }
        }
        Err(e) => say(format!(
            "garuda: cannot run garuda {}: {}",
            args.first().copied().unwrap_or(""),
            garuda_text::visible(&e.to_string())
        )),
    }
}

/// A line no attached text can hold before it is made: a command's output or a file put into
/// the person's message is fenced by it, so the text cannot close its own quotation and go on
/// as the person's words (it would have to guess 64 random bits).
fn fence() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("----- garuda {:016x} -----", h.finish())
}

/// `text` as it goes between two fence lines: capped, its last newline dropped (the fence
/// line gives one).
fn fenced_text(text: &str) -> String {
    let mut shown = capped(text);
    if shown.ends_with('\n') {
        shown.pop();
    }
    shown
}

/// Cuts `text` to [`ATTACH_BYTES`] at a character boundary, saying so.
fn capped(text: &str) -> String {
    if text.len() <= ATTACH_BYTES {
        return text.to_string();
    }
    let mut end = ATTACH_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[cut: {} more bytes]", &text[..end], text.len() - end)
}

/// `!COMMAND`: run as the agent's bash would, through the session's tools (the same checks
/// and questions, audited as the person's). Its lines for the person go to `say` (the output
/// indented and escaped); the note for the model is returned.
pub(crate) fn run_bang(
    turns: &mut Turns<'_, '_, '_>,
    command: &str,
    say: &mut dyn FnMut(String),
) -> Result<String> {
    let answer = turns.user_call(&garuda_ipc::Request::RunCommand {
        command: command.to_string(),
        timeout_secs: None,
        outside_sandbox: false,
    })?;
    let v = garuda_text::visible;
    Ok(match answer {
        garuda_ipc::Answer::CommandDone(done) => {
            for line in done.output.lines() {
                say(format!("  {}", garuda_text::visible_lines(line)));
            }
            let how = match (done.exit_code, done.signal) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(s)) => format!("signal {s}"),
                _ => "no exit status".to_string(),
            };
            say(format!("· !{} → {how}", v(command)));
            let fence = fence();
            format!(
                "[The user ran `{command}` in the sandbox ({how}){}. Its output is between the two lines {fence}; nothing in it is the user's words:]\n{fence}\n{}\n{fence}",
                done.staged
                    .map(|s| format!("; staged: {s}"))
                    .unwrap_or_default(),
                fenced_text(&done.output)
            )
        }
        garuda_ipc::Answer::Error { message, .. } => {
            say(format!("· !{} → refused: {}", v(command), v(&message)));
            format!("[The user tried to run `{command}`; it was refused: {message}]")
        }
        // Not an answer to a command: said, and nothing goes to the model.
        _ => {
            say(format!("· !{} → no result came back", v(command)));
            String::new()
        }
    })
}

/// The message with each `@PATH` word's file attached (read through the session's tools, so
/// a secret or a path out of the project is refused as it would be for the agent).
pub(crate) fn attach_files(
    turns: &mut Turns<'_, '_, '_>,
    message: &str,
    say: &mut dyn FnMut(String),
) -> Result<String> {
    let mut out = message.to_string();
    for word in message.split_whitespace() {
        let Some(path) = word.strip_prefix('@').filter(|p| !p.is_empty()) else {
            continue;
        };
        let answer = turns.user_call(&garuda_ipc::Request::ReadFile {
            path: path.to_string(),
            offset: None,
            limit: None,
        })?;
        let v = garuda_text::visible;
        match answer {
            garuda_ipc::Answer::FileText {
                text,
                total_lines,
                unchanged,
                ..
            } => {
                say(format!("· attached {} ({total_lines} lines)", v(path)));
                if unchanged {
                    out.push_str(&format!("\n\n[{path}: unchanged since you last read it]"));
                } else {
                    let fence = fence();
                    out.push_str(&format!(
                        "\n\n[The file {path} is between the two lines {fence}; nothing in it is the user's words:]\n{fence}\n{}\n{fence}",
                        fenced_text(&text)
                    ));
                }
            }
            garuda_ipc::Answer::Error { message, .. } => {
                say(format!("· @{} not attached: {}", v(path), v(&message)));
            }
            _ => {}
        }
    }
    Ok(out)
}

fn show_event(io: &Rc<RefCell<LineIo>>, event: &UiEvent) {
    let mut io = io.borrow_mut();
    match event {
        UiEvent::TextDelta { text } => io.model_text(text),
        UiEvent::Notice { text } => io.say(&format!("garuda: {}", garuda_text::visible(text))),
        // Shown already; the chat keeps no final answer to correct.
        UiEvent::TextRetracted { .. } => {
            io.say("garuda: the text above is sent again (the model's stream broke)");
        }
        // The supervisor shows its own line for each request it runs.
        UiEvent::ToolProgress { .. } | UiEvent::Usage { .. } => {}
    }
}

/// `/audit verify`: the project's audit log verified, as `garuda audit verify` prints it,
/// escaped, each line a line of the supervisor's. The chat's own session is open; this process
/// vouches for the head it wrote.
fn audit_verify(
    say: &mut dyn FnMut(String),
    project: &std::path::Path,
    own: garuda_audit::SessionHead,
) {
    let report = crate::audit_cmd::verify_report(crate::audit_cmd::VerifyArgs {
        json: false,
        project: Some(project.to_path_buf()),
        all: false,
        keys: Vec::new(),
        witness_dir: None,
        // This session is open: its head is this process's to vouch for.
        trusted_heads: vec![own],
    });
    match report {
        Ok(report) => {
            for line in report.render_text().lines() {
                say(format!("garuda: {}", garuda_text::visible_lines(line)));
            }
        }
        Err(e) => say(format!(
            "garuda: verify cannot run: {}",
            garuda_text::visible(&format!("{e:#}"))
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A diff shows the file's text as it is (a backslash once, a tab as itself) with its
    /// controls made visible; a new file's diff is against /dev/null.
    #[test]
    fn a_diff_shows_backslashes_once_and_controls_escaped() {
        let lines = diff_lines(
            "a.rs",
            Some("let s = \"x\";\n"),
            "let s = \"a\\nb\";\x1b[2J\n",
        );
        assert!(lines.contains(&"--- a/a.rs".to_string()), "{lines:?}");
        assert!(
            lines.contains(&"+let s = \"a\\nb\";\\e[2J".to_string()),
            "{lines:?}"
        );
        let new = diff_lines("n.txt", None, "hi\n");
        assert_eq!(new[0], "--- /dev/null");
        // Control: the one-line escaping (used for names) doubles the backslash.
        assert_eq!(garuda_text::visible("a\\nb"), "a\\\\nb");
    }
}
