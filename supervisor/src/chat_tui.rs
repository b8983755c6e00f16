//! The chat on a terminal: `garuda` with no task when stdin and stdout are terminals (and
//! `TERM` is not `dumb`).
//!
//! The supervisor owns the terminal, in raw mode, without the alternate screen: finished lines
//! go once into the terminal's scrollback, and a **live area** at the bottom is redrawn in
//! place: the model's unfinished line, a line while a turn runs (elapsed time, what stops it),
//! a notice, the footer (model, executor, direct or staged, session) and the input line. The
//! lines are those of line mode ([`crate::chat`]): the supervisor's start at the first column
//! with their marker, the model's text is escaped ([`garuda_text::visible_lines`]) and
//! indented, so no text of the model or of a tool can move the cursor, rewrite a line, reach
//! the clipboard, the title or a hyperlink, or draw a question. A question is the supervisor's
//! alone: its lines go to the scrollback, and the live area shows the choice in reverse video
//! (a style no escaped text can produce) and rings the bell.
//!
//! Keys (read on a thread of their own, so they work while a turn runs): Enter sends; Alt+Enter
//! or `\` then Enter adds a line; Up and Down walk the history; Esc stops the running turn and
//! kills its command; Ctrl-C does the same, and a second Ctrl-C exits (130); Ctrl-D on an empty
//! line ends the chat. During a question: `y` (once), `a` (always, for this session), `n` or
//! Esc (no).
//!
//! The terminal is restored on every way out: the end of `drive`, an error, a panic (a hook
//! restores it before the message prints) and a signal (the supervisor's forwarding handlers
//! turn it into the end of the turn and of the chat).
//!
//! Idle, nothing runs: the key thread waits in `read`, the main thread on a channel; the live
//! area is redrawn only on a key, an event of the agent, or the once-a-second tick of the
//! elapsed time while a turn runs.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use garuda_ipc::{StopReason, UiEvent};

use crate::broker::host::{Approval, Approved, Approver};
use crate::run_agent::{Activity, ChatEnd, Front, SessionFacts, Turns};
use crate::staged_ask::StagedQuestion;

/// What the key thread hands the main thread.
enum FromKeys {
    /// A line to send (a message or a slash command).
    Line(String),
    /// A key typed while a question is open.
    Answer(char),
    /// End the chat with this exit code.
    Exit(i32),
}

/// What both threads draw on.
struct Shared {
    screen: Mutex<Screen>,
    /// The running turn's stop flag, while a turn runs.
    turn: Mutex<Option<Arc<AtomicBool>>>,
    /// A question is open: keys are its answer.
    asking: AtomicBool,
    /// When the open question was drawn.
    asked_at: Mutex<Option<Instant>>,
    /// An exit asked for while the main thread was busy (a question, a turn).
    exit: Mutex<Option<i32>>,
    /// The terminal is in raw mode (the chat has it).
    raw: AtomicBool,
}

impl Shared {
    fn screen(&self) -> MutexGuard<'_, Screen> {
        self.screen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn turn(&self) -> MutexGuard<'_, Option<Arc<AtomicBool>>> {
        self.turn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The terminal's state, drawn under the lock.
struct Screen {
    out: std::io::Stdout,
    /// `NO_COLOR` is not set.
    color: bool,
    /// Rows the live area took when last drawn; the cursor is on its last row.
    live_rows: u16,
    /// The model's unfinished line, escaped.
    open_line: String,
    input: String,
    history: Vec<String>,
    /// The history entry shown (Up/Down), if any.
    browsing: Option<usize>,
    footer: String,
    /// Tokens the session used (the agent's running total) and its budget.
    tokens: Option<(u64, u64)>,
    /// The session's budget, for the footer.
    budget: u64,
    /// A turn runs since then.
    busy: Option<Instant>,
    /// The open question's choice line.
    question: Option<String>,
    /// Ctrl-C was pressed once: the next one exits.
    ctrl_c_armed: bool,
    notice: Option<String>,
}

/// SGR pieces (nothing when colour is off, except reverse video, which is not a colour).
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const REVERSE: &str = "\x1b[7m";

impl Screen {
    fn width(&self) -> usize {
        crossterm::terminal::size().map_or(80, |(cols, _)| usize::from(cols.max(1)))
    }

    /// Rows `text` (no control characters but SGR) takes at `cols` columns: a wide
    /// character (CJK, most emoji) takes two, a combining mark none. Counted right, the live
    /// area is cleared whole; counted short, old rows of it would stay on the screen.
    fn rows(text: &str, cols: usize) -> u16 {
        let mut width = 0usize;
        let mut in_sgr = false;
        for c in text.chars() {
            match (in_sgr, c) {
                (false, '\x1b') => in_sgr = true,
                (true, 'm') => in_sgr = false,
                (true, _) => {}
                (false, _) => width += columns(c),
            }
        }
        u16::try_from(width.div_ceil(cols).max(1)).unwrap_or(u16::MAX)
    }

    fn styled(&self, style: &str, text: &str) -> String {
        if self.color || style == REVERSE {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    /// Clears the live area; the cursor ends at its first row, column 0.
    fn clear_live(&mut self) {
        let mut seq = String::new();
        if self.live_rows > 1 {
            seq.push_str(&format!("\x1b[{}A", self.live_rows - 1));
        }
        seq.push_str("\r\x1b[J");
        let _ = self.out.write_all(seq.as_bytes());
        self.live_rows = 0;
    }

    /// Draws the live area below the cursor (at column 0 of an empty row).
    fn draw_live(&mut self) {
        let cols = self.width();
        let mut rows: Vec<String> = Vec::new();
        if !self.open_line.is_empty() {
            // The unfinished line's end, on one row: the live area stays as tall as counted.
            rows.push(format!(
                "  {}",
                tail(&self.open_line, cols.saturating_sub(3))
            ));
        }
        if let Some(since) = self.busy {
            rows.push(self.styled(
                DIM,
                &format!(
                    "working {}s · Esc stops the turn · Ctrl-C twice exits",
                    since.elapsed().as_secs()
                ),
            ));
        }
        if let Some(q) = &self.question {
            rows.push(self.styled(REVERSE, q));
        }
        if let Some(n) = &self.notice {
            rows.push(format!("garuda: {n}"));
        }
        let footer = match self.tokens {
            Some((used, budget)) => format!("{} · tokens {used} of {budget}", self.footer),
            None => self.footer.clone(),
        };
        rows.push(self.styled(DIM, &footer));
        let shown_input = self.input.replace('\n', "⏎");
        rows.push(format!("› {shown_input}"));
        self.live_rows = rows.iter().map(|r| Screen::rows(r, cols)).sum();
        let _ = self.out.write_all(rows.join("\r\n").as_bytes());
        let _ = self.out.flush();
    }

    fn redraw(&mut self) {
        self.clear_live();
        self.draw_live();
    }

    /// Finished lines into the scrollback (each already escaped), then the live area again.
    /// A line wider than the terminal is cut into rows here, each after the first indented:
    /// left to the terminal, the text of a long line would wrap to the first column, where
    /// only the supervisor's lines start.
    fn print(&mut self, lines: &[String]) {
        let cols = self.width();
        self.clear_live();
        for line in lines {
            for row in wrap(line, cols) {
                let _ = self.out.write_all(row.as_bytes());
                let _ = self.out.write_all(b"\r\n");
            }
        }
        self.draw_live();
    }

    /// A line of the supervisor's own (escaped by the caller).
    fn say(&mut self, line: &str) {
        let mut lines = self.take_open();
        lines.push(line.to_string());
        self.print(&lines);
    }

    /// The model's unfinished line as a finished one, if there is one.
    fn take_open(&mut self) -> Vec<String> {
        if self.open_line.is_empty() {
            Vec::new()
        } else {
            vec![format!("  {}", std::mem::take(&mut self.open_line))]
        }
    }

    /// More of the model's text: escaped, each finished line indented into the scrollback.
    fn model_text(&mut self, text: &str) {
        let shown = garuda_text::visible_lines(text);
        let mut finished = Vec::new();
        for c in shown.chars() {
            if c == '\n' {
                finished.push(format!("  {}", std::mem::take(&mut self.open_line)));
            } else {
                self.open_line.push(c);
            }
        }
        if finished.is_empty() {
            self.redraw();
        } else {
            self.print(&finished);
        }
    }
}

/// Columns `c` takes (a tab as the terminal's next stop is not known: counted as 8).
fn columns(c: char) -> usize {
    use unicode_width::UnicodeWidthChar;
    if c == '\t' {
        8
    } else {
        c.width().unwrap_or(0)
    }
}

/// `line` (no control characters but tabs) cut into rows of at most `cols` columns, each row
/// after the first indented by two spaces.
fn wrap(line: &str, cols: usize) -> Vec<String> {
    let cols = cols.max(8);
    let mut rows = Vec::new();
    let mut row = String::new();
    let mut width = 0;
    for c in line.chars() {
        let w = columns(c);
        if width + w > cols {
            rows.push(std::mem::take(&mut row));
            row.push_str("  ");
            width = 2;
        }
        row.push(c);
        width += w;
    }
    rows.push(row);
    rows
}

/// The end of `text` that fits in `cols` columns, with `…` when cut.
fn tail(text: &str, cols: usize) -> String {
    let total: usize = text.chars().map(columns).sum();
    if total <= cols {
        return text.to_string();
    }
    let mut kept = Vec::new();
    let mut width = 1;
    for c in text.chars().rev() {
        let w = columns(c);
        if width + w > cols {
            break;
        }
        kept.push(c);
        width += w;
    }
    std::iter::once('…').chain(kept.into_iter().rev()).collect()
}

/// Puts the terminal back: the live area's input line ends, raw mode off.
fn restore(screen: &mut Screen) {
    screen.clear_live();
    let _ = screen.out.write_all(b"\x1b[0m\x1b[?25h");
    let _ = screen.out.flush();
    let _ = crossterm::terminal::disable_raw_mode();
}

/// The chat on this process's terminal.
pub struct TermFront {
    shared: Arc<Shared>,
    from_keys: Arc<Mutex<Receiver<FromKeys>>>,
    /// The key thread's end of the channel, until the thread starts.
    to_main: Mutex<Option<Sender<FromKeys>>>,
}

impl TermFront {
    /// Takes the terminal: raw mode, the key thread, a panic hook that gives it back.
    pub fn start() -> Result<TermFront> {
        let shared = Arc::new(Shared {
            screen: Mutex::new(Screen {
                out: std::io::stdout(),
                color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
                live_rows: 0,
                open_line: String::new(),
                input: String::new(),
                history: Vec::new(),
                browsing: None,
                footer: String::new(),
                tokens: None,
                budget: 0,
                busy: None,
                question: None,
                ctrl_c_armed: false,
                notice: None,
            }),
            turn: Mutex::new(None),
            asking: AtomicBool::new(false),
            asked_at: Mutex::new(None),
            exit: Mutex::new(None),
            raw: AtomicBool::new(false),
        });
        let (to_main, from_keys) = mpsc::channel();
        Ok(TermFront {
            shared,
            from_keys: Arc::new(Mutex::new(from_keys)),
            to_main: Mutex::new(Some(to_main)),
        })
    }

    /// Raw mode on, a panic hook that turns it off before the message prints, and the key
    /// thread: only once the session is up, so what is printed while it starts and ends is
    /// printed on a terminal as it was.
    fn take_terminal(&self) -> Result<()> {
        crossterm::terminal::enable_raw_mode().context("putting the terminal in raw mode")?;
        self.shared.raw.store(true, Ordering::SeqCst);
        // The rest once per chat (a `/clear` takes the terminal again for the next session).
        let Some(to_main) = self
            .to_main
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = crossterm::terminal::disable_raw_mode();
            let _ = std::io::stdout().write_all(b"\x1b[0m\x1b[?25h\r\n");
            previous(info);
        }));
        let keys_shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("garuda-keys".into())
            .spawn(move || read_keys(&keys_shared, &to_main))
            .context("starting the key reader")?;
        Ok(())
    }

    /// Gives the terminal back (once): the live area cleared, raw mode off.
    fn give_back(&self) {
        if self.shared.raw.swap(false, Ordering::SeqCst) {
            restore(&mut self.shared.screen());
        }
    }
}

/// Lines written to it are the supervisor's, shown in the scrollback (the agent's stderr,
/// already escaped, while the terminal is raw).
struct ScreenLines {
    shared: Arc<Shared>,
    pending: Vec<u8>,
}

impl Write for ScreenLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            if self.shared.raw.load(Ordering::SeqCst) {
                self.shared.screen().say(&garuda_text::visible_lines(&text));
            } else {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "{}", garuda_text::visible_lines(&text));
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TermFront {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// The key thread: each key changes the input line, answers the open question, or stops.
fn read_keys(shared: &Shared, to_main: &Sender<FromKeys>) {
    // When the key before this one came: a key that follows another closely is typing, not
    // an answer (see `ANSWER_PAUSE`).
    let mut last_key: Option<Instant> = None;
    loop {
        let key = match event::read() {
            Ok(Event::Key(key)) if key.kind != KeyEventKind::Release => key,
            Ok(Event::Resize(..)) => {
                shared.screen().redraw();
                continue;
            }
            Ok(_) => continue,
            Err(_) => {
                // The terminal is gone: end the chat.
                let _ = to_main.send(FromKeys::Exit(1));
                return;
            }
        };
        let now = Instant::now();
        let typing = last_key.is_some_and(|t| now.duration_since(t) < ANSWER_PAUSE);
        last_key = Some(now);
        if let Some(message) = on_key(shared, key, typing) {
            let exit = matches!(message, FromKeys::Exit(_));
            if let FromKeys::Exit(code) = message {
                *shared
                    .exit
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(code);
            }
            if to_main.send(message).is_err() || exit {
                return;
            }
        }
    }
}

/// How long a question must have been on the screen, and how long after the key before,
/// for a key to answer it: someone typing a message when a question opens must not answer it
/// with the next letter they type (an `a` would be "always"; on a staged change, "apply").
const ANSWER_PAUSE: Duration = Duration::from_millis(400);

/// One key (`typing`: it came right after another); what the main thread must hear of it.
fn on_key(shared: &Shared, key: KeyEvent, typing: bool) -> Option<FromKeys> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let is_ctrl_c = ctrl && key.code == KeyCode::Char('c');
    if shared.asking.load(Ordering::SeqCst) && !is_ctrl_c {
        let settled = shared
            .asked_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() >= ANSWER_PAUSE);
        let plain = !key
            .modifiers
            .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT | KeyModifiers::SUPER);
        if key.code == KeyCode::Esc {
            return Some(FromKeys::Answer('n'));
        }
        if !settled || typing || !plain {
            let mut screen = shared.screen();
            screen.notice = Some("a question is open: pause, then press one of its keys".into());
            screen.redraw();
            return None;
        }
        return match key.code {
            KeyCode::Char(c) => Some(FromKeys::Answer(c.to_ascii_lowercase())),
            _ => None,
        };
    }
    let running = shared.turn().clone();
    let mut screen = shared.screen();
    if is_ctrl_c {
        if screen.ctrl_c_armed {
            return Some(FromKeys::Exit(130));
        }
        screen.ctrl_c_armed = true;
        if let Some(flag) = running {
            flag.store(true, Ordering::SeqCst);
            crate::sys::kill_forward_target();
            screen.notice = Some("stopping the turn; Ctrl-C again exits".into());
        } else {
            screen.notice = Some("Ctrl-C again exits".into());
        }
        if shared.asking.load(Ordering::SeqCst) {
            // The question is answered no; the turn stops.
            screen.redraw();
            return Some(FromKeys::Answer('n'));
        }
        screen.redraw();
        return None;
    }
    screen.ctrl_c_armed = false;
    screen.notice = None;
    let mut message = None;
    match key.code {
        KeyCode::Esc => {
            if let Some(flag) = running {
                flag.store(true, Ordering::SeqCst);
                crate::sys::kill_forward_target();
                screen.notice = Some("stopping the turn".into());
            }
        }
        KeyCode::Enter if key.modifiers.contains(KeyModifiers::ALT) => screen.input.push('\n'),
        KeyCode::Enter if screen.input.ends_with('\\') => {
            screen.input.pop();
            screen.input.push('\n');
        }
        KeyCode::Enter => {
            if running.is_some() {
                screen.notice = Some("a turn is running: Esc stops it".into());
            } else if !screen.input.trim().is_empty() {
                let line = std::mem::take(&mut screen.input);
                screen.history.push(line.clone());
                screen.browsing = None;
                message = Some(FromKeys::Line(line));
            }
        }
        KeyCode::Char('d') if ctrl && screen.input.is_empty() && running.is_none() => {
            return Some(FromKeys::Exit(0));
        }
        KeyCode::Char('u') if ctrl => screen.input.clear(),
        KeyCode::Tab => complete(&mut screen),
        KeyCode::Char(c) if !ctrl => screen.input.push(c),
        KeyCode::Backspace => {
            screen.input.pop();
        }
        KeyCode::Up if !screen.history.is_empty() => {
            let at = screen
                .browsing
                .map_or(screen.history.len() - 1, |i| i.saturating_sub(1));
            screen.browsing = Some(at);
            screen.input = screen.history[at].clone();
        }
        KeyCode::Down => match screen.browsing {
            Some(i) if i + 1 < screen.history.len() => {
                screen.browsing = Some(i + 1);
                screen.input = screen.history[i + 1].clone();
            }
            Some(_) => {
                screen.browsing = None;
                screen.input.clear();
            }
            None => {}
        },
        _ => {}
    }
    screen.redraw();
    message
}

/// Tab: a slash command completed when one matches what is typed, else the candidates shown.
fn complete(screen: &mut Screen) {
    if !screen.input.starts_with('/') || screen.input.contains(char::is_whitespace) {
        return;
    }
    let names: Vec<&str> = crate::chat::SLASH_COMMANDS
        .iter()
        // An optional argument's placeholder (`/resume [ID]`) is not part of the name.
        .map(|(name, _)| name.split(" [").next().unwrap_or(name))
        .filter(|name| name.starts_with('/'))
        .collect();
    let matching: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| name.starts_with(screen.input.as_str()))
        .collect();
    match matching.as_slice() {
        [] => screen.notice = Some("no such command (/help lists them)".into()),
        [one] => screen.input = (*one).to_string(),
        many => {
            // The longest common start, then the candidates.
            let mut common = many[0].to_string();
            for name in &many[1..] {
                while !name.starts_with(common.as_str()) {
                    common.pop();
                }
            }
            if common.len() > screen.input.len() {
                screen.input = common;
            }
            screen.notice = Some(many.join("  "));
        }
    }
}

/// The questions, drawn by the supervisor and answered with a key.
struct TermApprover {
    shared: Arc<Shared>,
    from_keys: Arc<Mutex<Receiver<FromKeys>>>,
}

impl TermApprover {
    /// Shows `lines` in the scrollback and `choice` in reverse video, rings the bell, and waits
    /// for a key; the key (lower case), or `None` for Ctrl-C or an exit.
    fn ask(&mut self, lines: Vec<String>, choice: String) -> Option<char> {
        {
            let mut screen = self.shared.screen();
            let mut out = screen.take_open();
            out.extend(lines);
            screen.question = Some(choice);
            screen.print(&out);
            let _ = screen.out.write_all(b"\x07");
            let _ = screen.out.flush();
        }
        *self
            .shared
            .asked_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        self.shared.asking.store(true, Ordering::SeqCst);
        let key = loop {
            let key = self
                .from_keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recv();
            match key {
                Ok(FromKeys::Answer(c)) => break Some(c),
                Ok(FromKeys::Exit(_)) | Err(_) => break None,
                Ok(FromKeys::Line(_)) => {}
            }
        };
        self.shared.asking.store(false, Ordering::SeqCst);
        self.shared.screen().question = None;
        key
    }
}

impl Approver for TermApprover {
    fn approve(&mut self, question: &Approval) -> bool {
        self.answer(question) != Approved::No
    }

    fn staged(&mut self, question: &StagedQuestion) -> bool {
        let mut lines = crate::chat::staged_lines(question);
        let yes = match question {
            StagedQuestion::ApplyOrDiscard { can_apply, .. } => {
                let choice = if *can_apply {
                    " garuda asks: apply or discard this change?  a = apply   d = discard "
                } else {
                    " garuda asks: this change can only be discarded (the list is incomplete)  d = discard "
                };
                loop {
                    match self.ask(std::mem::take(&mut lines), choice.to_string()) {
                        Some('a') if *can_apply => break true,
                        Some('d' | 'n') | None => break false,
                        Some(_) => {}
                    }
                }
            }
            StagedQuestion::Guard { .. } => matches!(
                self.ask(
                    lines,
                    " garuda asks: apply them too?  y = yes   n = no ".to_string(),
                ),
                Some('y')
            ),
            // Taken by the tool host, never asked.
            StagedQuestion::Outcome { .. } => return true,
            // Asked through `answer` by the tool host, never here.
            StagedQuestion::Host { .. } => return false,
        };
        self.shared
            .screen()
            .say(crate::chat::staged_answered(question, yes));
        yes
    }

    fn answer(&mut self, question: &Approval) -> Approved {
        let lines = crate::chat::approval_lines(question);
        // Fixed words only: the target (the model's) is on the question's line above, never
        // in the reverse-video row, where padding could make it read as another question.
        let choice = format!(
            " garuda asks: allow this {} (above)?  y = yes, once   a = always, this session   n = no ",
            question.tool
        );
        let mut pending = lines;
        let answer = loop {
            match self.ask(std::mem::take(&mut pending), choice.clone()) {
                Some('y') => break Approved::Once,
                Some('a') => break Approved::ForSession,
                Some('n') | None => break Approved::No,
                Some(_) => {}
            }
        };
        let mut screen = self.shared.screen();
        screen.say(crate::chat::approval_answered(answer));
        answer
    }
}

impl Front for TermFront {
    fn approver(&self) -> Box<dyn Approver> {
        Box::new(TermApprover {
            shared: Arc::clone(&self.shared),
            from_keys: Arc::clone(&self.from_keys),
        })
    }

    fn agent_stderr(&self) -> Option<Box<dyn Write + Send>> {
        Some(Box::new(ScreenLines {
            shared: Arc::clone(&self.shared),
            pending: Vec::new(),
        }))
    }

    fn drive(&self, turns: &mut Turns<'_, '_, '_>, facts: &SessionFacts<'_>) -> Result<ChatEnd> {
        self.take_terminal()?;
        let result = self.drive_raw(turns, facts);
        self.give_back();
        result
    }
}

impl TermFront {
    fn drive_raw(
        &self,
        turns: &mut Turns<'_, '_, '_>,
        facts: &SessionFacts<'_>,
    ) -> Result<ChatEnd> {
        let shared = Arc::clone(&self.shared);
        turns.set_activity(Activity::Lines(Box::new(move |line| {
            shared.screen().say(&format!("· {line}"));
        })));
        {
            let mut screen = self.shared.screen();
            screen.footer = crate::chat::footer(facts);
            screen.budget = facts.token_budget;
            screen.say(&crate::chat::header(facts));
        }
        let mut notes = Vec::new();
        loop {
            if let Some(code) = *self
                .shared
                .exit
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
            {
                return Ok(ChatEnd::Exit(code));
            }
            let next = self
                .from_keys
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recv_timeout(Duration::from_millis(500));
            let line = match next {
                Ok(FromKeys::Line(line)) => line,
                Ok(FromKeys::Exit(code)) => return Ok(ChatEnd::Exit(code)),
                Ok(FromKeys::Answer(_)) | Err(RecvTimeoutError::Timeout) => {
                    if crate::sys::forwarded_signal().is_some() {
                        return Ok(ChatEnd::Exit(130));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(ChatEnd::Exit(0)),
            };
            let message = line.trim();
            if let Some(command) = message.strip_prefix('/') {
                let mut said = Vec::new();
                let end = crate::chat::slash(command, facts, turns, &mut |l| said.push(l));
                let mut screen = self.shared.screen();
                screen.print(&said);
                if let Some(end) = end {
                    return Ok(end);
                }
                continue;
            }
            if let Some(command) = message.strip_prefix('!') {
                let mut said = Vec::new();
                // Esc and Ctrl-C stop it as they stop a turn's command.
                *self.shared.turn() = Some(turns.cancel_flag());
                {
                    let mut screen = self.shared.screen();
                    screen.busy = Some(Instant::now());
                    screen.redraw();
                }
                let note = crate::chat::run_bang(turns, command.trim(), &mut |l| said.push(l));
                *self.shared.turn() = None;
                self.shared.screen().busy = None;
                let note = note?;
                self.shared.screen().print(&said);
                notes.push(note);
                continue;
            }
            self.shared
                .screen()
                .say(&format!("> {}", garuda_text::visible(message)));
            let mut said = Vec::new();
            let attached = crate::chat::attach_files(turns, message, &mut |l| said.push(l))?;
            self.shared.screen().print(&said);
            let message = crate::chat::with_notes(&mut notes, attached);
            let summary = self.run_turn(turns, &message)?;
            if crate::sys::forwarded_signal().is_some() {
                self.shared.screen().say("garuda: interrupted");
                return Ok(ChatEnd::Exit(130));
            }
            if summary.reason != StopReason::Done {
                self.shared.screen().say(&format!(
                    "garuda: the turn stopped: {}",
                    crate::chat::reason_name(summary.reason)
                ));
            }
        }
    }
}

impl TermFront {
    /// One turn, with the elapsed-time line ticking once a second while it runs.
    fn run_turn(
        &self,
        turns: &mut Turns<'_, '_, '_>,
        message: &str,
    ) -> Result<crate::broker::server::TurnSummary> {
        *self.shared.turn() = Some(turns.cancel_flag());
        {
            let mut screen = self.shared.screen();
            screen.busy = Some(Instant::now());
            screen.redraw();
        }
        let ticking = Arc::new(AtomicBool::new(true));
        let ticker = {
            let shared = Arc::clone(&self.shared);
            let ticking = Arc::clone(&ticking);
            std::thread::spawn(move || {
                while ticking.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_secs(1));
                    if ticking.load(Ordering::SeqCst) {
                        shared.screen().redraw();
                    }
                }
            })
        };
        let shared = Arc::clone(&self.shared);
        let result = turns.turn(message, &mut |event| show_event(&shared, event));
        ticking.store(false, Ordering::SeqCst);
        let _ = ticker.join();
        *self.shared.turn() = None;
        let mut screen = self.shared.screen();
        screen.busy = None;
        let open = screen.take_open();
        screen.print(&open);
        result
    }
}

fn show_event(shared: &Shared, event: &UiEvent) {
    let mut screen = shared.screen();
    match event {
        UiEvent::TextDelta { text } => screen.model_text(text),
        UiEvent::Notice { text } => screen.say(&format!("garuda: {}", garuda_text::visible(text))),
        UiEvent::TextRetracted { .. } => {
            screen.say("garuda: the text above is sent again (the model's stream broke)");
        }
        UiEvent::Usage { usage } => {
            // The agent's count, shown as it says it: only the footer changes.
            let used = usage.input_tokens.saturating_add(usage.output_tokens);
            screen.tokens = Some((used, screen.budget));
            screen.redraw();
        }
        UiEvent::ToolProgress { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long line becomes rows of the terminal's width, each after the first indented, so no
    /// row but a line's first starts at the first column; the live area's open line keeps its
    /// end on one row.
    #[test]
    fn long_lines_are_cut_into_indented_rows() {
        let line = format!("  {}? allow it?", "x".repeat(18));
        let rows = wrap(&line, 20);
        assert_eq!(rows[0], format!("  {}", "x".repeat(18)));
        assert_eq!(rows[1], "  ? allow it?");
        assert!(rows.iter().skip(1).all(|r| r.starts_with("  ")));
        assert_eq!(
            wrap("漢字漢字漢", 8),
            vec!["漢字漢字".to_string(), "  漢".to_string()]
        );
        assert_eq!(tail("abcdefgh", 5), "…efgh");
        assert_eq!(tail("abc", 5), "abc");
    }

    /// Rows count columns, not characters, and not the SGR sequences the supervisor adds.
    #[test]
    fn rows_count_columns() {
        assert_eq!(Screen::rows("abcd", 4), 1);
        assert_eq!(Screen::rows("abcde", 4), 2);
        assert_eq!(Screen::rows("", 4), 1);
        // Two wide characters fill four columns; a third wraps.
        assert_eq!(Screen::rows("漢字", 4), 1);
        assert_eq!(Screen::rows("漢字漢", 4), 2);
        // A combining mark takes no column.
        assert_eq!(Screen::rows("e\u{301}bcd", 4), 1);
        assert_eq!(Screen::rows("\x1b[7mabcd\x1b[0m", 4), 1);
    }
}
