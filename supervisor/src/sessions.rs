//! The conversation journals of agent sessions, and `garuda sessions`.
//!
//! ```text
//! $GARUDA_HOME/sessions/                  0700
//!   <project-name>-<hash16>/              0700, the audit log's project name (project_dir_name)
//!     <session-id>.jsonl                  0600, one JSON record per line
//! ```
//!
//! The agent writes the journal through `journal_append` requests; the broker hands each
//! record to [`append_record`], which parses it as JSON, runs every string (and object key)
//! through the audit log's redactor ([`garuda_audit::redact`]) and appends one line. So a key
//! or token that reached the conversation (a file the model read, a command's output) is on
//! disk as `[REDACTED:<kind>]`, as in the audit log.
//!
//! Every folder and file is reached from a held folder descriptor with `O_NOFOLLOW`: a link
//! planted at `sessions`, at the project's folder or at a journal is refused, never followed
//! (a journal written through a link could land in a file someone else reads). A new journal
//! is created with `O_EXCL`; an existing folder or journal that someone else owns or that
//! others can read is refused, not repaired (someone changed it; quietly tightening it would
//! hide that). Garuda's home itself is the user's choice and may be a link.
//!
//! [`SessionStore::list`] summarises each journal: id, start time (from the id, which begins
//! with the UTC start time), last write, number of records, and the first user prompt cut to 80
//! characters and made safe for a terminal. The first prompt is the first text of the first
//! record that is a user message: an object with `"role": "user"` (also under `"message"`)
//! whose `content` is a string or holds a `{"type": "text", "text": …}` block, or an object
//! with `"type"` `user`, `user_prompt` or `prompt` and a `text` or `prompt` string.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use serde_json::Value;

/// The sessions folder's name in Garuda's home.
pub const SESSIONS_DIR: &str = "sessions";
/// A journal's extension.
pub const JOURNAL_EXT: &str = "jsonl";
/// Longest first prompt shown, in characters.
pub const PROMPT_CHARS: usize = 80;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Why a journal could not be created, opened, listed or read.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An OS error.
    #[error("{}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A symbolic link is where a folder or journal should be.
    #[error(
        "{}: is a symbolic link: refused without following it (a planted link could send the \
         journal elsewhere)",
        path.display()
    )]
    Symlink {
        /// Where.
        path: PathBuf,
    },
    /// A folder or journal someone else owns, that others can read, or of the wrong type.
    #[error("{}: {problem}: refused", path.display())]
    Unsafe {
        /// Where.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The id is not a plain name.
    #[error(
        "not a session id: {id} (a plain name of letters, digits and '-', at most 64 \
         characters; no '/' or '..')"
    )]
    BadId {
        /// The id, escaped for a terminal.
        id: String,
    },
    /// No journal has this id.
    #[error("no session {id} for this project; {known}")]
    Unknown {
        /// The id.
        id: String,
        /// The known ids, or that there are none.
        known: String,
    },
    /// A journal with this id exists already.
    #[error("{}: a session with this id exists already", path.display())]
    Exists {
        /// The journal.
        path: PathBuf,
    },
    /// No new id could be made.
    #[error("cannot make a session id: {0}")]
    Id(String),
}

/// Why a record was not appended. Never quotes the record (it may hold a secret).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not one JSON value.
    #[error("a journal record is one JSON value: {0}")]
    NotJson(String),
    /// The write failed.
    #[error("cannot write the journal: {0}")]
    Io(#[from] io::Error),
}

/// One journal, as `garuda sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// The session id (the journal's name without `.jsonl`).
    pub id: String,
    /// When it started (ms since the epoch, UTC), read from the id.
    pub started_ms: Option<u64>,
    /// The journal's last write (ms since the epoch).
    pub last_write_ms: u64,
    /// Complete records.
    pub records: u64,
    /// The first user prompt, at most [`PROMPT_CHARS`] characters, safe for a terminal.
    pub first_prompt: Option<String>,
}

/// The sessions of one project in one Garuda home.
#[derive(Debug, Clone)]
pub struct SessionStore {
    garuda_home: PathBuf,
    key: String,
}

fn io_err(path: &Path) -> impl FnOnce(Errno) -> SessionError + '_ {
    move |e| SessionError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

fn uid() -> u32 {
    crate::sys::current_uid()
}

/// Checks an opened folder or file: its type, its owner and that the group and others have
/// no permission on it.
fn check_private(fd: &OwnedFd, path: &Path, want_dir: bool) -> Result<(), SessionError> {
    let st = rustix::fs::fstat(fd).map_err(io_err(path))?;
    let unsafe_ = |problem: String| SessionError::Unsafe {
        path: path.to_path_buf(),
        problem,
    };
    let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
    match (want_dir, ft) {
        (true, rustix::fs::FileType::Directory) | (false, rustix::fs::FileType::RegularFile) => {}
        (true, _) => return Err(unsafe_("not a folder".into())),
        (false, _) => return Err(unsafe_("not a regular file".into())),
    }
    if st.st_uid != uid() {
        return Err(unsafe_(format!(
            "owned by uid {}, not by you (uid {})",
            st.st_uid,
            uid()
        )));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        let want = if want_dir { DIR_MODE } else { FILE_MODE };
        return Err(unsafe_(format!("mode {mode:04o}, not {want:04o}")));
    }
    Ok(())
}

/// The error of an `openat` with `O_NOFOLLOW` that failed: a link at `name` is named as such.
fn open_failed(dir: &OwnedFd, name: &str, path: &Path, e: Errno) -> SessionError {
    let is_link = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink());
    if is_link {
        SessionError::Symlink {
            path: path.to_path_buf(),
        }
    } else {
        io_err(path)(e)
    }
}

/// Opens (with `create`: makes, 0700) the private folder `name` beneath `dir`, without
/// following a link. `Ok(None)`: it does not exist and `create` is false.
fn private_dir(
    dir: &OwnedFd,
    name: &str,
    path: &Path,
    create: bool,
) -> Result<Option<OwnedFd>, SessionError> {
    let mut made = false;
    if create {
        match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => made = true,
            Err(Errno::EXIST) => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(e) => return Err(open_failed(dir, name, path, e)),
    };
    if made {
        // The umask may have taken bits away; it never adds any.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(DIR_MODE)).map_err(io_err(path))?;
    }
    check_private(&fd, path, true)?;
    Ok(Some(fd))
}

/// Whether `id` names a journal: [`garuda_audit::valid_session_id`] (letters, digits, `-`).
fn check_id(id: &str) -> Result<(), SessionError> {
    if garuda_audit::valid_session_id(id) {
        Ok(())
    } else {
        Err(SessionError::BadId {
            id: garuda_text::visible(id).into_owned(),
        })
    }
}

fn journal_name(id: &str) -> String {
    format!("{id}.{JOURNAL_EXT}")
}

/// The start time a session id begins with (`YYYYMMDDTHHMMSSZ-…`), in ms.
fn id_time(id: &str) -> Option<u64> {
    let b = id.as_bytes();
    if b.len() < 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let d = |r: std::ops::Range<usize>| id.get(r);
    let full = format!(
        "{}-{}-{}T{}:{}:{}.000Z",
        d(0..4)?,
        d(4..6)?,
        d(6..8)?,
        d(9..11)?,
        d(11..13)?,
        d(13..15)?
    );
    garuda_audit::parse_time(full.as_bytes())
}

/// `YYYY-MM-DD HH:MM:SS` (UTC).
fn shown_time(ms: u64) -> String {
    let t = garuda_audit::format_time(ms);
    t.get(..19).unwrap_or(&t).replacen('T', " ", 1)
}

impl SessionStore {
    /// The store of `project` (canonicalised, named as the audit log names it) in
    /// `garuda_home`. Nothing is created yet.
    pub fn new(garuda_home: &Path, project: &Path) -> Result<SessionStore, SessionError> {
        let canonical = std::fs::canonicalize(project).map_err(|source| SessionError::Io {
            path: project.to_path_buf(),
            source,
        })?;
        Ok(SessionStore {
            garuda_home: garuda_home.to_path_buf(),
            key: garuda_audit::project_dir_name(&canonical),
        })
    }

    /// `$GARUDA_HOME/sessions/<project-key>`.
    pub fn dir(&self) -> PathBuf {
        self.garuda_home.join(SESSIONS_DIR).join(&self.key)
    }

    /// The journal of `id` (not checked).
    pub fn journal_path(&self, id: &str) -> PathBuf {
        self.dir().join(journal_name(id))
    }

    /// The project's folder, made when `create`; `None` when it does not exist.
    fn project_dir(&self, create: bool) -> Result<Option<OwnedFd>, SessionError> {
        let home = &self.garuda_home;
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(home)
                .map_err(|source| SessionError::Io {
                    path: home.clone(),
                    source,
                })?;
        }
        // Garuda's home may be a link of the user's: followed.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let home_fd = match rustix::fs::open(home, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(io_err(home)(e)),
        };
        let sessions = home.join(SESSIONS_DIR);
        let Some(sessions_fd) = private_dir(&home_fd, SESSIONS_DIR, &sessions, create)? else {
            return Ok(None);
        };
        private_dir(&sessions_fd, &self.key, &self.dir(), create)
    }

    /// A new journal for `id`, created (`O_CREAT | O_EXCL | O_NOFOLLOW`, 0600) and open for
    /// appending. Folders are made as needed.
    pub fn create(&self, id: &str) -> Result<File, SessionError> {
        check_id(id)?;
        let path = self.journal_path(id);
        let dir = self
            .project_dir(true)?
            .ok_or_else(|| io_err(&path)(Errno::NOENT))?;
        let name = journal_name(id);
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC;
        let fd =
            match rustix::fs::openat(&dir, name.as_str(), flags, Mode::from_raw_mode(FILE_MODE)) {
                Ok(fd) => fd,
                Err(Errno::EXIST) => {
                    return Err(match open_failed(&dir, &name, &path, Errno::EXIST) {
                        SessionError::Io { .. } => SessionError::Exists { path },
                        other => other,
                    })
                }
                Err(e) => return Err(io_err(&path)(e)),
            };
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(FILE_MODE)).map_err(io_err(&path))?;
        Ok(File::from(fd))
    }

    /// A journal for a new session, with a new id (UTC start time and 64 random bits).
    pub fn create_new(&self) -> Result<(String, File), SessionError> {
        let id = garuda_audit::new_session_id().map_err(|e| SessionError::Id(e.to_string()))?;
        let file = self.create(&id)?;
        Ok((id, file))
    }

    /// Opens the journal of `id` beneath the held folder, without following a link.
    /// `Ok(None)`: there is none.
    fn open_journal(
        &self,
        dir: &OwnedFd,
        id: &str,
        flags: OFlags,
    ) -> Result<Option<OwnedFd>, SessionError> {
        let path = self.journal_path(id);
        let name = journal_name(id);
        // Non-blocking: a FIFO planted at the name is refused, not waited on.
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(dir, name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(open_failed(dir, &name, &path, e)),
        };
        check_private(&fd, &path, false)?;
        Ok(Some(fd))
    }

    /// The journal of an existing session `id`.
    fn existing(&self, id: &str, flags: OFlags) -> Result<OwnedFd, SessionError> {
        check_id(id)?;
        let Some(dir) = self.project_dir(false)? else {
            return Err(self.unknown(id));
        };
        self.open_journal(&dir, id, flags)?
            .ok_or_else(|| self.unknown(id))
    }

    fn unknown(&self, id: &str) -> SessionError {
        let known = match self.list() {
            Ok(list) if list.is_empty() => "no sessions for this project yet".to_string(),
            Ok(list) => format!(
                "known: {}",
                list.iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => format!("the known ones cannot be listed: {e}"),
        };
        SessionError::Unknown {
            id: id.to_string(),
            known,
        }
    }

    /// The journal of an existing session, open for appending (`--resume`).
    pub fn resume(&self, id: &str) -> Result<File, SessionError> {
        Ok(File::from(
            self.existing(id, OFlags::WRONLY | OFlags::APPEND)?,
        ))
    }

    /// The complete records of session `id`, in order (a torn last line, left by a crash in
    /// the middle of a write, is not a record).
    pub fn read(&self, id: &str) -> Result<Vec<String>, SessionError> {
        let fd = self.existing(id, OFlags::RDONLY)?;
        let mut text = String::new();
        File::from(fd)
            .read_to_string(&mut text)
            .map_err(|source| SessionError::Io {
                path: self.journal_path(id),
                source,
            })?;
        let Some(end) = text.rfind('\n') else {
            return Ok(Vec::new());
        };
        Ok(text[..end].split('\n').map(str::to_owned).collect())
    }

    /// Every session of the project, oldest last write first (so the last is [`Self::latest`]).
    pub fn list(&self) -> Result<Vec<SessionSummary>, SessionError> {
        let Some(dir) = self.project_dir(false)? else {
            return Ok(Vec::new());
        };
        let path = self.dir();
        let entries = rustix::fs::Dir::read_from(&dir).map_err(io_err(&path))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(&path))?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            let Some(id) = name.strip_suffix(".jsonl") else {
                continue;
            };
            if !garuda_audit::valid_session_id(id) {
                continue;
            }
            // Anything that is not a private regular file is not a session (a planted link
            // is skipped here and refused by `read` and `resume`).
            let Ok(Some(fd)) = self.open_journal(&dir, id, OFlags::RDONLY) else {
                continue;
            };
            out.push(
                summarise(id, File::from(fd)).map_err(|source| SessionError::Io {
                    path: self.journal_path(id),
                    source,
                })?,
            );
        }
        out.sort_by(|a, b| (a.last_write_ms, &a.id).cmp(&(b.last_write_ms, &b.id)));
        Ok(out)
    }

    /// The session written last (what `--resume` without an id continues).
    pub fn latest(&self) -> Result<Option<SessionSummary>, SessionError> {
        Ok(self.list()?.pop())
    }
}

fn summarise(id: &str, file: File) -> io::Result<SessionSummary> {
    let meta = file.metadata()?;
    let last_write_ms = u64::try_from(meta.mtime())
        .unwrap_or(0)
        .saturating_mul(1000)
        + u64::try_from(meta.mtime_nsec()).unwrap_or(0) / 1_000_000;
    let mut records = 0;
    let mut first_prompt = None;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 || line.last() != Some(&b'\n') {
            break;
        }
        records += 1;
        if first_prompt.is_none() {
            first_prompt = serde_json::from_slice::<Value>(&line)
                .ok()
                .as_ref()
                .and_then(user_text)
                .map(|t| shown_prompt(&t));
        }
    }
    Ok(SessionSummary {
        id: id.to_string(),
        started_ms: id_time(id),
        last_write_ms,
        records,
        first_prompt,
    })
}

/// The user's text in a record, if the record is a user message (see the module docs).
fn user_text(v: &Value) -> Option<String> {
    let obj = v.as_object()?;
    if let Some(t) = obj.get("message").and_then(user_text) {
        return Some(t);
    }
    let str_of = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_owned);
    if obj.get("role").and_then(Value::as_str) == Some("user") {
        match obj.get("content") {
            Some(Value::String(s)) => return Some(s.clone()),
            Some(Value::Array(blocks)) => {
                let text = blocks.iter().find_map(|b| {
                    (b.get("type").and_then(Value::as_str) == Some("text"))
                        .then(|| b.get("text").and_then(Value::as_str))
                        .flatten()
                });
                if let Some(t) = text {
                    return Some(t.to_owned());
                }
            }
            _ => {}
        }
        return str_of("text");
    }
    if matches!(
        obj.get("type").and_then(Value::as_str),
        Some("user" | "user_prompt" | "prompt")
    ) {
        return str_of("text").or_else(|| str_of("prompt"));
    }
    None
}

/// A prompt for one terminal line: a line break as `⏎`, every other hidden character as
/// `garuda-text` escapes it, at most [`PROMPT_CHARS`] characters (the last one `…` when cut).
pub fn shown_prompt(text: &str) -> String {
    let mut pieces = Vec::new();
    let mut total = 0;
    let mut chars = text.trim().chars().peekable();
    // Escape only what can be shown (a prompt may be megabytes long).
    while let Some(c) = chars.next() {
        let piece = match c {
            '\r' if chars.peek() == Some(&'\n') => continue,
            '\n' | '\r' => "⏎".to_string(),
            c => garuda_text::visible(c.encode_utf8(&mut [0; 4])).into_owned(),
        };
        total += piece.chars().count();
        pieces.push(piece);
        if total > PROMPT_CHARS {
            break;
        }
    }
    if total <= PROMPT_CHARS {
        return pieces.concat();
    }
    // Cut between escapes, never inside one, and say so.
    let mut out = String::new();
    let mut count = 0;
    for piece in pieces {
        let n = piece.chars().count();
        if count + n > PROMPT_CHARS - 1 {
            break;
        }
        out.push_str(&piece);
        count += n;
    }
    out.push('…');
    out
}

/// `record` with every secret the audit redactor knows replaced by `[REDACTED:<kind>]`, as
/// one line of JSON. Not JSON: refused (a journal holds JSON records only, so that what is
/// redacted is the values and never half a token).
pub fn redact_record(record: &str) -> Result<String, RecordError> {
    let mut value: Value =
        serde_json::from_str(record).map_err(|e| RecordError::NotJson(e.to_string()))?;
    garuda_audit::redact::redact_value(&mut value);
    // serde_json escapes every control character inside strings: the line has no raw break.
    serde_json::to_string(&value).map_err(|e| RecordError::NotJson(e.to_string()))
}

/// Appends `record`, redacted ([`redact_record`]), as one line.
pub fn append_record(journal: &mut impl Write, record: &str) -> Result<(), RecordError> {
    let mut line = redact_record(record)?.into_bytes();
    line.push(b'\n');
    journal.write_all(&line)?;
    Ok(())
}

/// A session as `garuda sessions --json` prints it.
#[derive(Serialize)]
struct Shown<'a> {
    id: &'a str,
    started: Option<String>,
    last_write: String,
    records: u64,
    first_prompt: Option<&'a str>,
}

impl fmt::Display for SessionSummary {
    /// One line of `garuda sessions`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<33}  {:<19}  {:<19}  {:>7}  {}",
            self.id,
            self.started_ms.map_or_else(|| "-".to_string(), shown_time),
            shown_time(self.last_write_ms),
            self.records,
            self.first_prompt.as_deref().unwrap_or("-")
        )
    }
}

/// `garuda sessions [--project P] [--json]`: the project's sessions, oldest last write first;
/// returns the exit code.
pub fn command(project: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let host = garuda_policy::HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = crate::project::resolve_project(project, &cwd)?;
    let store = SessionStore::new(&host.garuda_home, &project)?;
    let list = store.list()?;
    if json {
        let shown: Vec<Shown<'_>> = list
            .iter()
            .map(|s| Shown {
                id: &s.id,
                started: s.started_ms.map(garuda_audit::format_time),
                last_write: garuda_audit::format_time(s.last_write_ms),
                records: s.records,
                first_prompt: s.first_prompt.as_deref(),
            })
            .collect();
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&shown)?)
        );
    } else if list.is_empty() {
        println!("no sessions for this project yet");
    } else {
        println!(
            "{:<33}  {:<19}  {:<19}  {:>7}  FIRST PROMPT",
            "SESSION", "STARTED (UTC)", "LAST WRITE (UTC)", "RECORDS"
        );
        for s in &list {
            println!("{s}");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn prompts_are_cut_and_escaped() {
        assert_eq!(shown_prompt("fix it\nplease"), "fix it⏎please");
        assert_eq!(shown_prompt("a\r\nb\rc"), "a⏎b⏎c");
        assert_eq!(shown_prompt("x\u{1b}[2Jy\u{202e}z"), "x\\e[2Jy\\u{202e}z");
        let long = "é".repeat(200);
        let cut = shown_prompt(&long);
        assert_eq!(cut.chars().count(), PROMPT_CHARS);
        assert!(cut.ends_with('…'));
        let exact = "a".repeat(PROMPT_CHARS);
        assert_eq!(shown_prompt(&exact), exact);
        let over = "a".repeat(PROMPT_CHARS + 1);
        assert_eq!(shown_prompt(&over).chars().count(), PROMPT_CHARS);
        assert!(!shown_prompt(&"\u{7}".repeat(100))
            .chars()
            .any(|c| c.is_control()));
    }

    #[test]
    fn user_text_shapes() {
        for (record, want) in [
            (json!({"role": "user", "content": "hi"}), Some("hi")),
            (
                json!({"role": "user", "content": [{"type": "text", "text": "read a.rs"}]}),
                Some("read a.rs"),
            ),
            (
                json!({"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": "m"}]}}),
                Some("m"),
            ),
            (json!({"type": "user_prompt", "text": "p"}), Some("p")),
            (
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1", "content": "x", "is_error": false}]}),
                None,
            ),
            (json!({"role": "assistant", "content": "no"}), None),
            (json!([1, 2]), None),
        ] {
            assert_eq!(user_text(&record).as_deref(), want, "{record}");
        }
    }

    #[test]
    fn id_times() {
        assert_eq!(
            id_time("20250102T030405Z-0123456789abcdef")
                .map(shown_time)
                .as_deref(),
            Some("2025-01-02 03:04:05")
        );
        assert_eq!(id_time("resumed-1"), None);
        assert_eq!(id_time("20251302T030405Z-x"), None);
    }

    /// A token-shaped value inside a record is stored redacted; the raw writer (the negative
    /// control) would have stored it as written.
    #[test]
    fn records_are_redacted() {
        let token = "ghp_R4nd0mTok3nV4lu3F0rT35t1ngOnly000000";
        let ant = "sk-ant-api03-Xy7Kq2LmN9pR4sT6vW8zA1bC3dE5fG7hJ9kL";
        let record = json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1",
                         "content": format!("GITHUB={token}\nkey {ant}"), "is_error": false}],
        })
        .to_string();
        let mut redacted = Vec::new();
        append_record(&mut redacted, &record).unwrap();
        let text = String::from_utf8(redacted).unwrap();
        assert!(!text.contains(token) && !text.contains(ant), "{text}");
        assert!(text.contains("[REDACTED:github-token]"), "{text}");
        assert!(text.contains("[REDACTED:anthropic-key]"), "{text}");
        assert_eq!(text.matches('\n').count(), 1);
        assert!(serde_json::from_str::<Value>(text.trim_end()).is_ok());
        let mut raw = Vec::new();
        raw.write_all(record.as_bytes()).unwrap();
        assert!(String::from_utf8(raw).unwrap().contains(token));
        // Not JSON: refused, and the message does not quote it.
        let e = append_record(&mut Vec::new(), &format!("oops {token}")).unwrap_err();
        assert!(!e.to_string().contains(token), "{e}");
        assert!(
            e.to_string()
                .starts_with("a journal record is one JSON value: "),
            "{e}"
        );
    }
}
