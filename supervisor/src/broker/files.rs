//! The file tools: `read_file`, `write_file`, `edit_file`, `glob` and `grep`, the only code
//! that touches project files on the agent's behalf.
//!
//! Every request goes the same way: the path is parsed and resolved beneath the held project
//! root ([`super::resolve`]), the permission engine decides on the path as written *and* on
//! where it really leads, and only then is anything read or written. The work is split in
//! two so the broker can audit the decision and ask the user in between:
//!
//! ```text
//! let tools = FileTools::open(project)?;
//! match tools.prepare(&engine, &ctx, &request) {
//!     Prepared::Refused(outcome) => /* audit outcome.decision, send outcome.answer */,
//!     Prepared::Ready(pending) => {
//!         // audit pending.decision(); on Verdict::Ask, ask the user about
//!         // pending.tool(), pending.resolved(), pending.before()/after()
//!         let answer = if approved { tools.run(&engine, &ctx, pending) } else { pending.reject().answer };
//!     }
//! }
//! ```
//!
//! [`FileTools::handle`] does both steps with a closure for the question. Nothing panics: every
//! failure is an [`Answer::Error`] whose message is written for the model and has every
//! control, bidirectional and invisible character escaped (`garuda-text`). `docs/broker.md`
//! gives the rules and their reasons.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use garuda_ipc::{Answer, ErrorCode, PathError, ProjectPath, Request};
use garuda_policy::engine::{Context, Decision, Engine, Verdict};
use rustix::fs::{Mode, OFlags, RenameFlags};
use rustix::io::Errno;

pub use super::judge::Tool;
use super::judge::{decide, error};
use super::resolve::{self, Found, Meta, Parent, ProjectRoot, ResolveError};
use super::search::{self, Search};

/// A file larger than this is neither read nor edited (its lines are counted and hashed whole).
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Most text one `read_file` answer carries. Even if every byte were a control character that
/// JSON spells `\u00XX`, the answer stays under the frame cap.
pub const MAX_READ_BYTES: usize = 1024 * 1024;

/// Lines a `read_file` returns when the request gives no `limit`.
pub const DEFAULT_READ_LINES: u64 = 2000;

/// Most lines one `read_file` returns, whatever its `limit`.
pub const MAX_READ_LINES: u64 = 100_000;

/// Largest file `write_file` or `edit_file` produces.
pub const MAX_WRITE_BYTES: usize = 64 * 1024 * 1024;

/// Files whose sent lines are remembered; past this the memory is cleared (the model is sent
/// text again, never told "unchanged" wrongly).
const MAX_SEEN_FILES: usize = 10_000;

/// A new file's mode before the umask, as `open(2)` applies it.
const NEW_FILE_MODE: u32 = 0o644;

/// A new folder's mode before the umask.
const NEW_DIR_MODE: u32 = 0o755;

/// The answer to a request, and the permission engine's decision when one was made (`None`:
/// refused before the policy, for a malformed or unresolvable path).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// For the agent.
    pub answer: Answer,
    /// For the audit log.
    pub decision: Option<Decision>,
}

/// The first half of a request: refused already, or ready to run once allowed.
#[derive(Debug)]
pub enum Prepared {
    /// Refused (a bad path, a denial, a mismatch): nothing was read or written.
    Refused(Outcome),
    /// Resolved and decided `allow` or `ask`: run it (after the user said yes on `ask`), or
    /// [`Pending::reject`] it.
    Ready(Pending),
}

/// A request resolved and decided, holding the descriptors it was resolved to, so what runs is
/// what was decided (and asked about).
#[derive(Debug)]
pub struct Pending {
    tool: Tool,
    written: String,
    resolved: String,
    decision: Decision,
    op: Op,
}

#[derive(Debug)]
enum Op {
    Read {
        found: Found,
        offset: u64,
        limit: u64,
    },
    Write {
        parent: Parent,
        content: String,
        before: Option<String>,
        replacements: u64,
    },
    Search(Search),
}

impl Pending {
    /// The engine's decision (`allow` or `ask`), with the deciding rule.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Which tool.
    pub fn tool(&self) -> Tool {
        self.tool
    }

    /// The path as the model wrote it (empty: the project root).
    pub fn path(&self) -> &str {
        &self.written
    }

    /// Where it really leads, project-relative, no link in it (empty: the project root).
    pub fn resolved(&self) -> &str {
        &self.resolved
    }

    /// `edit_file`: the file's text now.
    pub fn before(&self) -> Option<&str> {
        match &self.op {
            Op::Write { before, .. } => before.as_deref(),
            _ => None,
        }
    }

    /// `write_file`, `edit_file`: the file's text after the change.
    pub fn after(&self) -> Option<&str> {
        match &self.op {
            Op::Write { content, .. } => Some(content),
            _ => None,
        }
    }

    /// The user said no: nothing runs.
    pub fn reject(self) -> Outcome {
        let answer = error(
            ErrorCode::Rejected,
            format!(
                "the user did not allow {} on {}",
                self.tool.name(),
                shown(&self.written)
            ),
        );
        Outcome {
            answer,
            decision: Some(self.decision),
        }
    }
}

/// A read done, before the session records it as sent.
struct ReadDone {
    text: String,
    hash: [u8; 32],
    offset: u64,
    lines: u64,
    total_lines: u64,
}

/// Lines of one file already sent in this session.
#[derive(Debug)]
struct Seen {
    /// SHA-256 of the whole file when they were sent.
    hash: [u8; 32],
    /// Inclusive 1-based line ranges, merged.
    ranges: Vec<(u64, u64)>,
}

/// The file tools of one session: the project root held open, and what `read_file` has sent.
#[derive(Debug)]
pub struct FileTools {
    root: ProjectRoot,
    seen: HashMap<String, Seen>,
}

impl FileTools {
    /// Opens the project root for the session. Fails when the root cannot be opened or the
    /// kernel has no `openat2` (no name-based fallback).
    pub fn open(project_root: &std::path::Path) -> Result<FileTools, ResolveError> {
        Ok(FileTools {
            root: ProjectRoot::open(project_root)?,
            seen: HashMap::new(),
        })
    }

    /// The held root.
    pub fn root(&self) -> &ProjectRoot {
        &self.root
    }

    /// Forgets every line `read_file` sent (the conversation was compacted: the model no
    /// longer has them).
    pub fn forget(&mut self) {
        self.seen.clear();
    }

    /// Prepares and, when allowed, runs one request; `ask` is called on an `ask` verdict and
    /// says whether the user allowed it.
    pub fn handle(
        &mut self,
        engine: &Engine<'_>,
        ctx: &Context,
        request: &Request,
        ask: impl FnOnce(&Pending) -> bool,
    ) -> Outcome {
        match self.prepare(engine, ctx, request) {
            Prepared::Refused(outcome) => outcome,
            Prepared::Ready(pending) => {
                if pending.decision.verdict == Verdict::Ask && !ask(&pending) {
                    return pending.reject();
                }
                let decision = Some(pending.decision.clone());
                Outcome {
                    answer: self.run(engine, ctx, pending),
                    decision,
                }
            }
        }
    }

    /// Resolves and decides one request; reads nothing but what `edit_file` must check and
    /// writes nothing. A request that is not a file tool is refused.
    pub fn prepare(&self, engine: &Engine<'_>, ctx: &Context, request: &Request) -> Prepared {
        match request {
            Request::ReadFile {
                path,
                offset,
                limit,
            } => self.prepare_read(engine, ctx, path, *offset, *limit),
            Request::WriteFile { path, content } => {
                self.prepare_write(engine, ctx, Tool::WriteFile, path, |_| {
                    Ok((content.clone(), None, 0))
                })
            }
            Request::EditFile {
                path,
                old,
                new,
                replace_all,
            } => self.prepare_write(engine, ctx, Tool::EditFile, path, |current| {
                edit(path, current, old, new, *replace_all)
            }),
            Request::Glob { pattern, path } => {
                self.prepare_search(engine, ctx, Tool::Glob, path.as_deref(), |base| {
                    search::glob(base, pattern)
                })
            }
            Request::Grep {
                pattern,
                path,
                glob,
                case_insensitive,
            } => self.prepare_search(engine, ctx, Tool::Grep, path.as_deref(), |base| {
                search::grep(base, pattern, glob.as_deref(), *case_insensitive)
            }),
            Request::RunCommand { .. } | Request::JournalAppend { .. } => {
                refused(ErrorCode::InvalidArgument, "not a file tool request")
            }
        }
    }

    /// Runs a prepared request: call it for `allow`, or for `ask` once the user said yes.
    pub fn run(&mut self, engine: &Engine<'_>, ctx: &Context, pending: Pending) -> Answer {
        let Pending {
            written,
            resolved,
            op,
            ..
        } = pending;
        match op {
            Op::Read {
                found,
                offset,
                limit,
            } => self.run_read(&written, &resolved, &found, offset, limit),
            Op::Write {
                parent,
                content,
                replacements,
                ..
            } => write_atomically(&written, parent, &content, replacements),
            Op::Search(s) => search::run(&self.root, engine, ctx, &s),
        }
    }

    fn prepare_read(
        &self,
        engine: &Engine<'_>,
        ctx: &Context,
        path: &str,
        offset: Option<u64>,
        limit: Option<u64>,
    ) -> Prepared {
        let pp = match ProjectPath::parse(path) {
            Ok(pp) => pp,
            Err(e) => return refused_path(&e),
        };
        let found = match self.root.lookup(&pp) {
            Ok(found) => found,
            Err(e) => return refused_resolve(&e),
        };
        let decision = decide(engine, ctx, Tool::ReadFile, path, &found.resolved);
        if decision.verdict == Verdict::Deny {
            return denied(decision, path, &found.resolved);
        }
        let problem = if found.meta.is_dir() {
            Some(format!("{} is a folder: glob lists its files", shown(path)))
        } else if !found.meta.is_file() {
            Some(format!("{} is not a regular file", shown(path)))
        } else if offset == Some(0) {
            Some("offset counts lines from 1".to_owned())
        } else if limit == Some(0) {
            Some("limit must be at least 1".to_owned())
        } else {
            None
        };
        if let Some(message) = problem {
            return refused_after(decision, ErrorCode::InvalidArgument, message);
        }
        let limit = limit.unwrap_or(DEFAULT_READ_LINES).min(MAX_READ_LINES);
        Prepared::Ready(Pending {
            tool: Tool::ReadFile,
            written: path.to_owned(),
            resolved: found.resolved.clone(),
            decision,
            op: Op::Read {
                found,
                offset: offset.unwrap_or(1),
                limit,
            },
        })
    }

    fn run_read(
        &mut self,
        written: &str,
        resolved: &str,
        found: &Found,
        offset: u64,
        limit: u64,
    ) -> Answer {
        match self.read_shared(written, found, offset, limit) {
            Ok(read) => self.finish_read(resolved, read),
            Err(answer) => answer,
        }
    }

    /// Runs prepared read-only requests (`read_file`, `glob`, `grep`, each allowed) on one
    /// thread each, then records what `read_file` sent, in order. Returns each answer with
    /// when its work began and ended.
    pub fn run_concurrently(
        &mut self,
        engine: &Engine<'_>,
        ctx: &Context,
        pendings: Vec<Pending>,
    ) -> Vec<(Answer, std::time::SystemTime, std::time::SystemTime)> {
        enum Done {
            Answer(Answer),
            Read(String, ReadDone),
        }
        let this: &FileTools = self;
        let done: Vec<(Done, std::time::SystemTime, std::time::SystemTime)> =
            std::thread::scope(|scope| {
                let workers: Vec<_> = pendings
                    .into_iter()
                    .map(|pending| {
                        scope.spawn(move || {
                            let began = std::time::SystemTime::now();
                            let Pending {
                                written,
                                resolved,
                                op,
                                ..
                            } = pending;
                            let done = match op {
                                Op::Read {
                                    found,
                                    offset,
                                    limit,
                                } => match this.read_shared(&written, &found, offset, limit) {
                                    Ok(read) => Done::Read(resolved, read),
                                    Err(answer) => Done::Answer(answer),
                                },
                                Op::Search(s) => {
                                    Done::Answer(search::run(&this.root, engine, ctx, &s))
                                }
                                Op::Write { .. } => Done::Answer(error(
                                    ErrorCode::InvalidArgument,
                                    "a write is not run with the reads",
                                )),
                            };
                            (done, began, std::time::SystemTime::now())
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| {
                        w.join().unwrap_or_else(|_| {
                            let now = std::time::SystemTime::now();
                            (
                                Done::Answer(error(ErrorCode::Io, "the read failed")),
                                now,
                                now,
                            )
                        })
                    })
                    .collect()
            });
        done.into_iter()
            .map(|(d, began, ended)| {
                let answer = match d {
                    Done::Answer(a) => a,
                    Done::Read(resolved, read) => self.finish_read(&resolved, read),
                };
                (answer, began, ended)
            })
            .collect()
    }

    /// The part of a read that needs no session state (open, read, check, cut).
    fn read_shared(
        &self,
        written: &str,
        found: &Found,
        offset: u64,
        limit: u64,
    ) -> Result<ReadDone, Answer> {
        let file = match self.root.open_for_reading(written, found) {
            Ok(f) => f,
            Err(e) => return Err(resolve_answer(&e)),
        };
        let bytes = read_capped(file, written)?;
        // Validated once, as the string the answer may hand over whole.
        let Ok(owned) = String::from_utf8(bytes) else {
            return Err(not_text(written));
        };
        if memchr::memchr(0, owned.as_bytes()).is_some() {
            return Err(not_text(written));
        }
        let text = owned.as_str();
        let total_lines = count_lines(text);
        if total_lines > 0 && offset > total_lines {
            return Err(error(
                ErrorCode::InvalidArgument,
                format!(
                    "offset {offset} is past the end of {} ({total_lines} lines)",
                    shown(written)
                ),
            ));
        }
        let chunk = match lines_from(text, total_lines, offset, limit) {
            Ok(chunk) => chunk,
            Err(bytes) => {
                return Err(error(
                    ErrorCode::TooLarge,
                    format!(
                        "line {offset} of {} has {bytes} bytes, more than the {MAX_READ_BYTES} \
                         one read returns; grep finds what is in it",
                        shown(written)
                    ),
                ))
            }
        };
        // BLAKE3: several times faster than SHA-256 here, and as collision-resistant.
        let hash: [u8; 32] = blake3::hash(text.as_bytes()).into();
        let lines = chunk.lines;
        // The whole file: hand over the buffer read instead of copying it (a 1 MB read is
        // otherwise one more allocation and copy on the way to the model).
        let text = if chunk.text.len() == text.len() {
            owned
        } else {
            chunk.text.to_owned()
        };
        Ok(ReadDone {
            text,
            hash,
            offset,
            lines,
            total_lines,
        })
    }

    /// The part of a read that records what was sent (and sends nothing again).
    fn finish_read(&mut self, resolved: &str, read: ReadDone) -> Answer {
        let unchanged = self.already_sent(resolved, read.hash, read.offset, read.lines);
        Answer::FileText {
            text: if unchanged { String::new() } else { read.text },
            first_line: read.offset,
            total_lines: read.total_lines,
            unchanged,
        }
    }

    /// Whether lines `first ..= first + count - 1` of this content were sent before; records
    /// them as sent when not.
    fn already_sent(&mut self, resolved: &str, hash: [u8; 32], first: u64, count: u64) -> bool {
        let last = first.saturating_add(count).saturating_sub(1);
        if let Some(seen) = self.seen.get_mut(resolved) {
            if seen.hash == hash {
                let covered =
                    count == 0 || seen.ranges.iter().any(|&(a, b)| a <= first && last <= b);
                if covered {
                    return true;
                }
            } else {
                seen.hash = hash;
                seen.ranges.clear();
            }
            if count > 0 {
                seen.ranges.push((first, last));
                merge_ranges(&mut seen.ranges);
            }
            return false;
        }
        if self.seen.len() >= MAX_SEEN_FILES {
            self.seen.clear();
        }
        let ranges = if count > 0 {
            vec![(first, last)]
        } else {
            vec![]
        };
        self.seen.insert(resolved.to_owned(), Seen { hash, ranges });
        false
    }

    /// `write_file` and `edit_file`: resolve the folder, decide, refuse a link, then compute
    /// the new content (`change` gets the current text, `None` for a new file).
    fn prepare_write(
        &self,
        engine: &Engine<'_>,
        ctx: &Context,
        tool: Tool,
        path: &str,
        change: impl FnOnce(Option<&str>) -> Result<(String, Option<String>, u64), Answer>,
    ) -> Prepared {
        let pp = match ProjectPath::parse(path) {
            Ok(pp) => pp,
            Err(e) => return refused_path(&e),
        };
        let parent = match self.root.lookup_parent(&pp) {
            Ok(parent) => parent,
            Err(e) => return refused_resolve(&e),
        };
        let resolved = parent.resolved();
        let decision = decide(engine, ctx, tool, path, &resolved);
        if decision.verdict == Verdict::Deny {
            return denied(decision, path, &resolved);
        }
        if let Some(refusal) = self.unwritable(path, &pp, &parent) {
            return Prepared::Refused(Outcome {
                answer: refusal,
                decision: Some(decision),
            });
        }
        let current = match (&parent.existing, tool) {
            (None, Tool::EditFile) => {
                return refused_after(
                    decision,
                    ErrorCode::NotFound,
                    format!(
                        "{} does not exist: edit_file changes a file, write_file creates one",
                        shown(path)
                    ),
                )
            }
            (Some(meta), Tool::EditFile) => match read_existing(&parent, meta, path) {
                Ok(text) => Some(text),
                Err(answer) => return refused_with(decision, answer),
            },
            _ => None,
        };
        let (content, before, replacements) = match change(current.as_deref()) {
            Ok(c) => c,
            Err(answer) => return refused_with(decision, answer),
        };
        if content.len() > MAX_WRITE_BYTES {
            return refused_after(
                decision,
                ErrorCode::TooLarge,
                format!(
                    "{} would have {} bytes, more than the {MAX_WRITE_BYTES} a file tool writes",
                    shown(path),
                    content.len()
                ),
            );
        }
        Prepared::Ready(Pending {
            tool,
            written: path.to_owned(),
            resolved,
            decision,
            op: Op::Write {
                parent,
                content,
                before,
                replacements,
            },
        })
    }

    /// Why the file at `path` cannot be written in place: a link (never written through), a
    /// folder, or something else than a regular file.
    fn unwritable(&self, path: &str, pp: &ProjectPath, parent: &Parent) -> Option<Answer> {
        let meta = parent.existing.as_ref()?;
        if meta.is_link() {
            let target = resolve::link_target(parent.dir.as_fd(), &parent.name);
            let inside = self.root.lookup(pp).is_ok();
            return Some(if inside {
                error(
                    ErrorCode::InvalidArgument,
                    format!(
                        "{} is a symbolic link (to {target}): files are never written through a \
                         link; write the file it leads to by its own path",
                        shown(path)
                    ),
                )
            } else {
                error(
                    ErrorCode::OutsideProject,
                    format!(
                        "{} is a symbolic link that leads out of the project (to {target}); \
                         only files inside the project can be written",
                        shown(path)
                    ),
                )
            });
        }
        if meta.is_dir() {
            return Some(error(
                ErrorCode::InvalidArgument,
                format!("{} is a folder", shown(path)),
            ));
        }
        (!meta.is_file()).then(|| {
            error(
                ErrorCode::InvalidArgument,
                format!("{} is not a regular file", shown(path)),
            )
        })
    }

    /// `glob` and `grep`: resolve and decide the folder (or file) searched, then build the
    /// matcher.
    fn prepare_search(
        &self,
        engine: &Engine<'_>,
        ctx: &Context,
        tool: Tool,
        path: Option<&str>,
        build: impl FnOnce(&Found) -> Result<Search, Answer>,
    ) -> Prepared {
        let written = path.unwrap_or("");
        let pp = match path.map(ProjectPath::parse).transpose() {
            Ok(pp) => pp,
            Err(e) => return refused_path(&e),
        };
        let found = match &pp {
            Some(pp) => self.root.lookup(pp),
            None => self.root.lookup_dir(None),
        };
        let found = match found {
            Ok(found) => found,
            Err(e) => return refused_resolve(&e),
        };
        let decision = decide(engine, ctx, tool, written, &found.resolved);
        if decision.verdict == Verdict::Deny {
            return denied(decision, written, &found.resolved);
        }
        if found.resolved.split('/').any(|c| c == ".git") {
            return refused_after(
                decision,
                ErrorCode::InvalidArgument,
                format!(
                    "{} does not search inside .git; read_file reads a file there",
                    tool.name()
                ),
            );
        }
        let search = match build(&found) {
            Ok(s) => s,
            Err(answer) => return refused_with(decision, answer),
        };
        Prepared::Ready(Pending {
            tool,
            written: written.to_owned(),
            resolved: found.resolved.clone(),
            decision,
            op: Op::Search(search),
        })
    }
}

/// `edit_file`'s change: `old` exactly once (or every time with `replace_all`).
fn edit(
    path: &str,
    current: Option<&str>,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<(String, Option<String>, u64), Answer> {
    let current = current.unwrap_or_default();
    if old.is_empty() {
        return Err(error(
            ErrorCode::InvalidArgument,
            "old is empty: give the exact text to replace",
        ));
    }
    if old == new {
        return Err(error(
            ErrorCode::InvalidArgument,
            "old and new are the same: nothing would change",
        ));
    }
    let count = current.matches(old).count() as u64;
    if count == 0 {
        return Err(error(
            ErrorCode::EditMismatch,
            format!(
                "old occurs 0 times in {}: read the file again and copy the text exactly",
                shown(path)
            ),
        ));
    }
    if count > 1 && !replace_all {
        return Err(error(
            ErrorCode::EditMismatch,
            format!(
                "old occurs {count} times in {}: add surrounding lines so it occurs once, or \
                 set replace_all",
                shown(path)
            ),
        ));
    }
    let updated = if replace_all {
        current.replace(old, new)
    } else {
        current.replacen(old, new, 1)
    };
    Ok((updated, Some(current.to_owned()), count))
}

/// The current text of the file `edit_file` changes, read from the held folder without
/// following a link, and checked to be the file the lookup saw.
fn read_existing(parent: &Parent, meta: &Meta, path: &str) -> Result<String, Answer> {
    let fd = resolve::open_file_in(parent.dir.as_fd(), &parent.name)
        .map_err(|e| errno_answer(path, e))?;
    let now = resolve::meta_of(fd.as_fd()).map_err(|e| io_answer(path, &e))?;
    if !now.same_file(meta) {
        return Err(changed(path));
    }
    let bytes = read_capped(std::fs::File::from(fd), path)?;
    match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Ok(text),
        _ => Err(not_text(path)),
    }
}

/// Reads a whole file, refusing one over [`MAX_FILE_BYTES`] (also one that grows past it
/// while read).
fn read_capped(file: std::fs::File, path: &str) -> Result<Vec<u8>, Answer> {
    let mut bytes = Vec::new();
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let too_large = |n: u64| {
        error(
            ErrorCode::TooLarge,
            format!(
                "{} has {n} bytes, more than the {MAX_FILE_BYTES} the file tools read",
                shown(path)
            ),
        )
    };
    if size > MAX_FILE_BYTES {
        return Err(too_large(size));
    }
    bytes.reserve(usize::try_from(size).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_answer(path, &e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Lines in `text`: newlines, plus one for a last line without its newline.
fn count_lines(text: &str) -> u64 {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Lines from `first` (1-based).
struct Chunk<'a> {
    text: &'a str,
    lines: u64,
}

/// Up to `limit` whole lines from line `first`, at most [`MAX_READ_BYTES`]; the size of the
/// first line when it alone is over the cap.
fn lines_from(text: &str, total_lines: u64, first: u64, limit: u64) -> Result<Chunk<'_>, usize> {
    // The common case, a whole file within the caps, without a walk line by line.
    if first == 1 && text.len() <= MAX_READ_BYTES && total_lines <= limit {
        return Ok(Chunk {
            text,
            lines: total_lines,
        });
    }
    let mut start = 0usize;
    let mut line = 1u64;
    while line < first {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => start = text.len(),
        }
        line += 1;
    }
    let rest = &text[start..];
    let mut end = 0usize;
    let mut lines = 0u64;
    while lines < limit && end < rest.len() {
        let next = rest[end..].find('\n').map_or(rest.len(), |i| end + i + 1);
        if next > MAX_READ_BYTES {
            if lines == 0 {
                return Err(next - end);
            }
            break;
        }
        end = next;
        lines += 1;
    }
    Ok(Chunk {
        text: &rest[..end],
        lines,
    })
}

fn merge_ranges(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *ranges = merged;
}

/// Distinguishes temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` as the file `parent.name`: missing folders created (beneath the held
/// folder, never through a link), a temporary file made with `O_EXCL` next to the target,
/// written, given the target's mode (and owner, where allowed), `fsync`ed and renamed over
/// the target, then the folder `fsync`ed. The target must be as the decision saw it.
fn write_atomically(path: &str, parent: Parent, content: &str, replacements: u64) -> Answer {
    let mut dir = parent.dir;
    for name in &parent.missing {
        match rustix::fs::mkdirat(&dir, name.as_str(), Mode::from_raw_mode(NEW_DIR_MODE)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return errno_answer(path, e),
        }
        dir = match resolve::open_subdir(dir.as_fd(), name) {
            Ok(sub) => sub,
            Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => return changed(path),
            Err(e) => return errno_answer(path, e),
        };
    }
    let name = parent.name.as_str();
    let now = match resolve::meta_at(dir.as_fd(), name) {
        Ok(m) => Some(m),
        Err(e) if e.raw_os_error() == Some(Errno::NOENT.raw_os_error()) => None,
        Err(e) => return io_answer(path, &e),
    };
    let same = match (&now, &parent.existing) {
        (None, None) => true,
        (Some(a), Some(b)) => a.unchanged(b),
        _ => false,
    };
    if !same {
        return changed(path);
    }
    let (tmp_name, tmp) = match create_temp(dir.as_fd(), name) {
        Ok(t) => t,
        Err(e) => return errno_answer(path, e),
    };
    let result = fill_and_rename(dir.as_fd(), &tmp_name, tmp, name, content, now.as_ref());
    if let Err(answer) = result {
        let _ = rustix::fs::unlinkat(&dir, tmp_name.as_str(), rustix::fs::AtFlags::empty());
        return answer.with_path(path);
    }
    // The rename is done; a failed folder sync does not undo it.
    let _ = rustix::fs::fsync(&dir);
    Answer::Written {
        bytes: content.len() as u64,
        created: now.is_none(),
        replacements,
    }
}

/// A failure of [`fill_and_rename`], before the path is known to the message.
enum WriteFailure {
    Errno(Errno),
    Exists,
}

impl WriteFailure {
    fn with_path(self, path: &str) -> Answer {
        match self {
            WriteFailure::Errno(e) => errno_answer(path, e),
            WriteFailure::Exists => changed(path),
        }
    }
}

/// Creates `.<name>.garuda-tmp-<pid>-<n>` with `O_CREAT | O_EXCL | O_NOFOLLOW` (never an
/// existing file or a link), cut to fit a name's 255 bytes.
fn create_temp(dir: BorrowedFd<'_>, name: &str) -> Result<(String, OwnedFd), Errno> {
    let mut last = Errno::EXIST;
    for _ in 0..16 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let suffix = format!(".garuda-tmp-{}-{n}", std::process::id());
        let mut keep = name.len().min(255 - 1 - suffix.len());
        while !name.is_char_boundary(keep) {
            keep -= 1;
        }
        let tmp = format!(".{}{suffix}", &name[..keep]);
        match rustix::fs::openat(
            dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(NEW_FILE_MODE),
        ) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn fill_and_rename(
    dir: BorrowedFd<'_>,
    tmp_name: &str,
    tmp: OwnedFd,
    name: &str,
    content: &str,
    existing: Option<&Meta>,
) -> Result<(), WriteFailure> {
    let mut file = std::fs::File::from(tmp);
    file.write_all(content.as_bytes())
        .map_err(|e| WriteFailure::Errno(errno_of(&e)))?;
    if let Some(meta) = existing {
        // The permission bits stay; setuid and setgid do not (the content is new).
        rustix::fs::fchmod(&file, Mode::from_raw_mode(meta.mode & 0o777))
            .map_err(WriteFailure::Errno)?;
        let mine = resolve::meta_of(file.as_fd()).map_err(|e| WriteFailure::Errno(errno_of(&e)))?;
        if (mine.uid, mine.gid) != (meta.uid, meta.gid) {
            // Root keeps the user's file the user's; anyone else cannot give a file away and
            // keeps the file as their own, as an editor's atomic save does.
            let _ = rustix::fs::fchown(
                &file,
                Some(rustix::fs::Uid::from_raw(meta.uid)),
                Some(rustix::fs::Gid::from_raw(meta.gid)),
            );
        }
    }
    rustix::fs::fsync(&file).map_err(WriteFailure::Errno)?;
    drop(file);
    let renamed = if existing.is_some() {
        rustix::fs::renameat(dir, tmp_name, dir, name)
    } else {
        // Nothing was there at the decision: never replace what appeared since.
        rustix::fs::renameat_with(dir, tmp_name, dir, name, RenameFlags::NOREPLACE)
    };
    match renamed {
        Ok(()) => Ok(()),
        Err(Errno::EXIST) => Err(WriteFailure::Exists),
        Err(e) => Err(WriteFailure::Errno(e)),
    }
}

fn errno_of(e: &std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error)
}

// ---------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------

/// A path in a message (escaped with the rest of the message by [`error`]); the root is `.`.
pub(crate) fn shown(path: &str) -> &str {
    if path.is_empty() {
        "."
    } else {
        path
    }
}

fn refused(code: ErrorCode, message: impl AsRef<str>) -> Prepared {
    Prepared::Refused(Outcome {
        answer: error(code, message),
        decision: None,
    })
}

fn refused_after(decision: Decision, code: ErrorCode, message: impl AsRef<str>) -> Prepared {
    refused_with(decision, error(code, message))
}

fn refused_with(decision: Decision, answer: Answer) -> Prepared {
    Prepared::Refused(Outcome {
        answer,
        decision: Some(decision),
    })
}

/// The engine said no: its reason and the deciding rules, for the model.
fn denied(decision: Decision, written: &str, resolved: &str) -> Prepared {
    let mut message = String::new();
    if written != resolved {
        message.push_str(&format!(
            "{} leads to {}: ",
            shown(written),
            shown(resolved)
        ));
    }
    message.push_str(&format!("denied by the policy: {}", decision.reason));
    for cause in &decision.causes {
        message.push_str(&format!(" (rule {} from {})", cause.rule, cause.source));
    }
    refused_after(decision, ErrorCode::Denied, message)
}

/// The message for a path that is not in its one accepted spelling.
pub(crate) fn path_message(e: &PathError) -> String {
    match e {
        PathError::Empty => "the path is empty".to_owned(),
        PathError::Absolute(p) => format!(
            "{p} is absolute: paths are relative to the project root (src/main.rs, not \
             /…/src/main.rs)"
        ),
        PathError::ParentComponent(p) => {
            format!("{p} has a '..' component: paths name files inside the project directly")
        }
        PathError::NotPlain(p) => {
            format!("{p} is not in its plain form: no '.' component, no '//', no trailing '/'")
        }
        PathError::Nul => "the path has a NUL byte".to_owned(),
        PathError::TooLong(n) => format!(
            "the path is too long ({n} bytes; at most {} bytes, {} per name)",
            garuda_ipc::MAX_PATH_BYTES,
            garuda_ipc::MAX_NAME_BYTES
        ),
    }
}

fn refused_path(e: &PathError) -> Prepared {
    refused(ErrorCode::InvalidArgument, path_message(e))
}

fn refused_resolve(e: &ResolveError) -> Prepared {
    Prepared::Refused(Outcome {
        answer: resolve_answer(e),
        decision: None,
    })
}

/// The answer for a path the resolver refused.
pub(crate) fn resolve_answer(e: &ResolveError) -> Answer {
    let code = match e {
        ResolveError::Invalid(p) => return error(ErrorCode::InvalidArgument, path_message(p)),
        ResolveError::NotFound(_) | ResolveError::NotDir(_) => ErrorCode::NotFound,
        ResolveError::Outside(_) => ErrorCode::OutsideProject,
        ResolveError::Loop(_) | ResolveError::NotUtf8(_) => ErrorCode::InvalidArgument,
        ResolveError::Changed(_) | ResolveError::NoOpenat2 | ResolveError::Io { .. } => {
            ErrorCode::Io
        }
    };
    error(code, e.to_string())
}

fn errno_answer(path: &str, e: Errno) -> Answer {
    io_answer(path, &e.into())
}

fn io_answer(path: &str, e: &std::io::Error) -> Answer {
    let code = match e.raw_os_error().map(Errno::from_raw_os_error) {
        Some(Errno::NOENT) => ErrorCode::NotFound,
        Some(Errno::FBIG | Errno::NOSPC | Errno::DQUOT) => ErrorCode::TooLarge,
        _ => ErrorCode::Io,
    };
    error(code, format!("{}: {e}", shown(path)))
}

fn changed(path: &str) -> Answer {
    error(
        ErrorCode::Io,
        format!(
            "{} changed while the request ran; nothing was written: read it again",
            shown(path)
        ),
    )
}

fn not_text(path: &str) -> Answer {
    error(
        ErrorCode::NotText,
        format!(
            "{} is not text (a NUL byte, or not UTF-8): the file tools read and edit text only",
            shown(path)
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::super::judge::as_text;
    use super::*;

    #[test]
    fn lines_are_counted_and_cut_whole() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("\n\n"), 2);
        let c = lines_from("a\nb\nc\n", 3, 2, 1).unwrap();
        assert_eq!((c.text, c.lines), ("b\n", 1));
        let c = lines_from("a\nb\nc", 3, 2, 10).unwrap();
        assert_eq!((c.text, c.lines), ("b\nc", 2));
        let c = lines_from("a\n", 1, 1, 10).unwrap();
        assert_eq!((c.text, c.lines), ("a\n", 1));
        let long = format!("x\n{}\n", "y".repeat(MAX_READ_BYTES));
        // The first line fits; the second alone is over the cap: the read stops before it.
        let c = lines_from(&long, count_lines(&long), 1, 10).unwrap();
        assert_eq!((c.text, c.lines), ("x\n", 1));
        assert_eq!(
            lines_from(&long, count_lines(&long), 2, 10).err(),
            Some(MAX_READ_BYTES + 1)
        );
    }

    #[test]
    fn text_is_utf8_without_nul() {
        assert_eq!(as_text(b"fn main() {}\n"), Some("fn main() {}\n"));
        assert_eq!(as_text("héllo".as_bytes()), Some("héllo"));
        assert_eq!(as_text(b"a\0b"), None);
        assert_eq!(as_text(b"\xff\xfe"), None);
    }

    #[test]
    fn ranges_merge() {
        let mut r = vec![(5, 9), (1, 3), (4, 4), (20, 30), (25, 26)];
        merge_ranges(&mut r);
        assert_eq!(r, [(1, 9), (20, 30)]);
    }

    #[test]
    fn edits_count_occurrences() {
        let ok = edit("f", Some("a b a"), "b", "c", false).unwrap();
        assert_eq!((ok.0.as_str(), ok.2), ("a c a", 1));
        let all = edit("f", Some("a b a"), "a", "x", true).unwrap();
        assert_eq!((all.0.as_str(), all.2), ("x b x", 2));
        let twice = edit("f", Some("a b a"), "a", "x", false).unwrap_err();
        assert_eq!(
            twice,
            Answer::Error {
                code: ErrorCode::EditMismatch,
                message: "old occurs 2 times in f: add surrounding lines so it occurs once, or \
                          set replace_all"
                    .into()
            }
        );
        let none = edit("f", Some("a b a"), "z", "x", false).unwrap_err();
        assert!(
            matches!(none, Answer::Error { code: ErrorCode::EditMismatch, ref message } if message.starts_with("old occurs 0 times in f"))
        );
    }

    #[test]
    fn messages_escape_what_the_model_wrote() {
        let a = error(
            ErrorCode::NotFound,
            format!("{} does not exist", "a\u{1b}[2Jb\n"),
        );
        assert_eq!(
            a,
            Answer::Error {
                code: ErrorCode::NotFound,
                message: "a\\e[2Jb\\n does not exist".into()
            }
        );
    }
}
