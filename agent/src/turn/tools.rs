//! The tools offered to the model, and the agent's half of seed §4's pipeline for each call:
//! known tool → schema validation → describe → the request to the supervisor (whose
//! permission engine decides and which runs it) → the result as text for the model.
//!
//! Nothing here fails outward: an unknown tool, an argument that does not match its schema,
//! a refusal or an I/O failure all become a [`ToolOutput`] with `is_error` set, written for
//! the model to read and act on. Each tool's schema is data ([`Field`]s): the same table
//! gives the JSON Schema the model sees and the validation its input passes, so the two
//! cannot drift apart.

use garuda_ipc::{Answer, CommandDone, ErrorCode, Request, ToolSpec};
use serde_json::{json, Map, Value};

use crate::model::Tool;

/// Longest tool result sent to the model, in characters; a longer one is cut with a marker.
pub const RESULT_CAP: usize = 100_000;

/// Longest answer of an `explore` subagent, trailer included.
pub const EXPLORE_RESULT_CAP: usize = 20_000;

/// Longest one-line description of a call, for the UI.
const DESCRIBE_CAP: usize = 120;

/// Which tools are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSet {
    /// The main agent: every tool. `outside_sandbox` is offered on `bash` only when the
    /// supervisor's `Start.tools` offers it (never under the strict profile).
    Main {
        /// `bash` has the `outside_sandbox` field.
        outside_sandbox: bool,
    },
    /// The `explore` subagent: the read-only tools, and no `explore` (no nesting).
    Explore,
}

/// The type of a field.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A string; `non_empty` adds `minLength: 1`.
    Str { non_empty: bool },
    /// An integer in `min..=max`.
    Int { min: u64, max: u64 },
    /// A boolean.
    Bool,
}

/// One field of a tool's input.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    kind: Kind,
    required: bool,
    doc: &'static str,
}

/// One tool as data.
#[derive(Debug)]
struct Def {
    name: &'static str,
    doc: &'static str,
    fields: &'static [Field],
}

const fn field(name: &'static str, kind: Kind, required: bool, doc: &'static str) -> Field {
    Field {
        name,
        kind,
        required,
        doc,
    }
}

const PATH: Field = field(
    "path",
    Kind::Str { non_empty: true },
    true,
    "Path relative to the project root, in plain form (no leading '/', no '..').",
);
const SEARCH_PATH: Field = field(
    "path",
    Kind::Str { non_empty: true },
    false,
    "Folder (or file) to search, relative to the project root; the whole project when absent.",
);

const READ_FILE: Def = Def {
    name: "read_file",
    doc: "Read a text file of the project, with line numbers. Use offset and limit for a part of a large file.",
    fields: &[
        PATH,
        field("offset", Kind::Int { min: 1, max: u64::MAX }, false, "First line to return, 1-based."),
        field("limit", Kind::Int { min: 1, max: u64::MAX }, false, "Most lines to return."),
    ],
};

const WRITE_FILE: Def = Def {
    name: "write_file",
    doc: "Create a file, or replace a whole file, with the given content.",
    fields: &[
        PATH,
        field(
            "content",
            Kind::Str { non_empty: false },
            true,
            "The whole new content.",
        ),
    ],
};

const EDIT_FILE: Def = Def {
    name: "edit_file",
    doc: "Replace exact text in a file. `old` must occur exactly once (copy it from read_file, with its whitespace), unless replace_all is set.",
    fields: &[
        PATH,
        field("old", Kind::Str { non_empty: true }, true, "The exact text to find."),
        field("new", Kind::Str { non_empty: false }, true, "The text to put in its place."),
        field("replace_all", Kind::Bool, false, "Replace every occurrence instead of exactly one."),
    ],
};

const GLOB: Def = Def {
    name: "glob",
    doc: "List the project's paths that match a glob such as src/**/*.rs (.gitignore respected).",
    fields: &[
        field("pattern", Kind::Str { non_empty: true }, true, "The glob."),
        SEARCH_PATH,
    ],
};

const GREP: Def = Def {
    name: "grep",
    doc: "Find the lines of the project's files that match a regular expression (Rust regex syntax; .gitignore respected).",
    fields: &[
        field("pattern", Kind::Str { non_empty: true }, true, "The regular expression."),
        SEARCH_PATH,
        field("glob", Kind::Str { non_empty: true }, false, "Only files whose path matches this glob."),
        field("case_insensitive", Kind::Bool, false, "Match without regard to case."),
    ],
};

const COMMAND: Field = field(
    "command",
    Kind::Str { non_empty: true },
    true,
    "The command line, run by /bin/sh -c in the project folder.",
);
const TIMEOUT: Field = field(
    "timeout",
    Kind::Int { min: 1, max: 7_200 },
    false,
    "Seconds before the command is killed; the policy's default when absent.",
);
const OUTSIDE_SANDBOX: Field = field(
    "outside_sandbox",
    Kind::Bool,
    false,
    "Run outside the sandbox. The user is asked first; use only when the sandbox is what stops the command.",
);

const BASH_DOC: &str = "Run a shell command in the project, inside the sandbox. The output (stdout and stderr) and the exit code come back.";

const BASH: Def = Def {
    name: "bash",
    doc: BASH_DOC,
    fields: &[COMMAND, TIMEOUT],
};

const BASH_OUTSIDE: Def = Def {
    name: "bash",
    doc: BASH_DOC,
    fields: &[COMMAND, TIMEOUT, OUTSIDE_SANDBOX],
};

const EXPLORE: Def = Def {
    name: "explore",
    doc: "Ask a read-only helper to investigate the project (it can read files, glob and grep, up to 20 steps) and answer a question. Several explore calls in one response run in parallel.",
    fields: &[field(
        "question",
        Kind::Str { non_empty: true },
        true,
        "What to find out, with enough context to work alone.",
    )],
};

fn defs(set: ToolSet) -> Vec<&'static Def> {
    match set {
        ToolSet::Main { outside_sandbox } => vec![
            &READ_FILE,
            &WRITE_FILE,
            &EDIT_FILE,
            &GLOB,
            &GREP,
            if outside_sandbox {
                &BASH_OUTSIDE
            } else {
                &BASH
            },
            &EXPLORE,
        ],
        ToolSet::Explore => vec![&READ_FILE, &GLOB, &GREP],
    }
}

fn schema(def: &Def) -> Value {
    let mut properties = Map::new();
    for f in def.fields {
        let mut p = Map::new();
        match f.kind {
            Kind::Str { non_empty } => {
                p.insert("type".into(), json!("string"));
                if non_empty {
                    p.insert("minLength".into(), json!(1));
                }
            }
            Kind::Int { min, max } => {
                p.insert("type".into(), json!("integer"));
                p.insert("minimum".into(), json!(min));
                if max != u64::MAX {
                    p.insert("maximum".into(), json!(max));
                }
            }
            Kind::Bool => {
                p.insert("type".into(), json!("boolean"));
            }
        }
        p.insert("description".into(), json!(f.doc));
        properties.insert(f.name.into(), Value::Object(p));
    }
    let required: Vec<&str> = def
        .fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The tools offered to the model.
pub fn definitions(set: ToolSet) -> Vec<Tool> {
    defs(set)
        .into_iter()
        .map(|d| Tool {
            name: d.name.into(),
            description: d.doc.into(),
            input_schema: schema(d),
        })
        .collect()
}

/// Whether the supervisor's `Start.tools` offers running a command outside the sandbox: a
/// command tool (`bash` or `run_command`) whose schema has an `outside_sandbox` property.
/// Absent, unparsable or strict: not offered (the safe side; the supervisor refuses it
/// anyway when it is not allowed).
pub fn outside_sandbox_offered(tools: &[ToolSpec]) -> bool {
    tools
        .iter()
        .filter(|t| t.name == "bash" || t.name == "run_command")
        .filter_map(|t| serde_json::from_str::<Value>(&t.input_schema).ok())
        .any(|s| s.pointer("/properties/outside_sandbox").is_some())
}

/// A validated call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `read_file`.
    ReadFile {
        /// Project-relative path.
        path: String,
        /// First line.
        offset: Option<u64>,
        /// Most lines.
        limit: Option<u64>,
    },
    /// `write_file`.
    WriteFile {
        /// Project-relative path.
        path: String,
        /// New content.
        content: String,
    },
    /// `edit_file`.
    EditFile {
        /// Project-relative path.
        path: String,
        /// Text to find.
        old: String,
        /// Replacement.
        new: String,
        /// Every occurrence.
        replace_all: bool,
    },
    /// `glob`.
    Glob {
        /// The glob.
        pattern: String,
        /// Folder to search under.
        path: Option<String>,
    },
    /// `grep`.
    Grep {
        /// The regular expression.
        pattern: String,
        /// Folder or file to search.
        path: Option<String>,
        /// File filter.
        glob: Option<String>,
        /// Ignore case.
        case_insensitive: bool,
    },
    /// `bash`.
    Bash {
        /// The command line.
        command: String,
        /// Seconds.
        timeout: Option<u64>,
        /// Outside the sandbox (only when offered).
        outside_sandbox: bool,
    },
    /// `explore`.
    Explore {
        /// The question.
        question: String,
    },
}

/// The fields of one input, checked against a tool's schema.
struct Input<'a> {
    tool: &'static str,
    map: &'a Map<String, Value>,
}

impl Input<'_> {
    fn str(&self, name: &str) -> Option<String> {
        self.map
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
    fn int(&self, name: &str) -> Option<u64> {
        self.map.get(name).and_then(Value::as_u64)
    }
    fn bool(&self, name: &str) -> bool {
        self.map.get(name).and_then(Value::as_bool).unwrap_or(false)
    }
    fn req(&self, name: &str) -> String {
        // Validation ran first: a required string is there.
        self.str(name).unwrap_or_default()
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks `input` against `def`'s fields: an object, no unknown field, every required field,
/// each of its type and range. The error names the field and says what is expected.
fn validate<'a>(def: &'static Def, input: &'a Value) -> Result<Input<'a>, String> {
    let names = || {
        def.fields
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Value::Object(map) = input else {
        return Err(format!(
            "{}'s input must be a JSON object with the fields {}; got {}",
            def.name,
            names(),
            json_type(input)
        ));
    };
    let mut unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !def.fields.iter().any(|f| f.name == *k))
        .collect();
    unknown.sort_unstable();
    if let Some(k) = unknown.first() {
        return Err(format!(
            "{} has no field `{}`; its fields are {}",
            def.name,
            k,
            names()
        ));
    }
    for f in def.fields {
        let Some(v) = map.get(f.name) else {
            if f.required {
                return Err(format!(
                    "{} is missing its required field `{}` ({})",
                    def.name, f.name, f.doc
                ));
            }
            continue;
        };
        let ok = match (f.kind, v) {
            (Kind::Str { non_empty }, Value::String(s)) => {
                if non_empty && s.is_empty() {
                    return Err(format!(
                        "{}'s field `{}` must not be empty",
                        def.name, f.name
                    ));
                }
                true
            }
            (Kind::Int { min, max }, Value::Number(n)) => match n.as_u64() {
                Some(i) if (min..=max).contains(&i) => true,
                _ => {
                    let range = if max == u64::MAX {
                        format!("at least {min}")
                    } else {
                        format!("from {min} to {max}")
                    };
                    return Err(format!(
                        "{}'s field `{}` must be an integer {range}; got {n}",
                        def.name, f.name
                    ));
                }
            },
            (Kind::Bool, Value::Bool(_)) => true,
            _ => false,
        };
        if !ok {
            let want = match f.kind {
                Kind::Str { .. } => "a string",
                Kind::Int { .. } => "an integer",
                Kind::Bool => "a boolean (true or false)",
            };
            return Err(format!(
                "{}'s field `{}` must be {want}; got {}",
                def.name,
                f.name,
                json_type(v)
            ));
        }
    }
    Ok(Input {
        tool: def.name,
        map,
    })
}

impl Call {
    /// The first steps of the pipeline: a known tool of `set`, its input valid against the
    /// tool's schema. The error is the text of the error result the model gets.
    pub fn parse(set: ToolSet, name: &str, input: &Value) -> Result<Call, String> {
        let offered = defs(set);
        let Some(def) = offered.iter().find(|d| d.name == name) else {
            let names: Vec<&str> = offered.iter().map(|d| d.name).collect();
            return Err(format!(
                "unknown tool `{}`; the tools are {}",
                one_line(name, DESCRIBE_CAP),
                names.join(", ")
            ));
        };
        let i = validate(def, input)?;
        Ok(match i.tool {
            "read_file" => Call::ReadFile {
                path: i.req("path"),
                offset: i.int("offset"),
                limit: i.int("limit"),
            },
            "write_file" => Call::WriteFile {
                path: i.req("path"),
                content: i.req("content"),
            },
            "edit_file" => {
                let (old, new) = (i.req("old"), i.req("new"));
                if old == new {
                    return Err(
                        "edit_file's `old` and `new` are the same: the edit would change nothing"
                            .into(),
                    );
                }
                Call::EditFile {
                    path: i.req("path"),
                    old,
                    new,
                    replace_all: i.bool("replace_all"),
                }
            }
            "glob" => Call::Glob {
                pattern: i.req("pattern"),
                path: i.str("path"),
            },
            "grep" => Call::Grep {
                pattern: i.req("pattern"),
                path: i.str("path"),
                glob: i.str("glob"),
                case_insensitive: i.bool("case_insensitive"),
            },
            "bash" => Call::Bash {
                command: i.req("command"),
                timeout: i.int("timeout"),
                outside_sandbox: i.bool("outside_sandbox"),
            },
            _ => Call::Explore {
                question: i.req("question"),
            },
        })
    }

    /// The tool's name.
    pub fn name(&self) -> &'static str {
        match self {
            Call::ReadFile { .. } => "read_file",
            Call::WriteFile { .. } => "write_file",
            Call::EditFile { .. } => "edit_file",
            Call::Glob { .. } => "glob",
            Call::Grep { .. } => "grep",
            Call::Bash { .. } => "bash",
            Call::Explore { .. } => "explore",
        }
    }

    /// Whether the call only reads: such calls of one step run concurrently.
    pub fn read_only(&self) -> bool {
        matches!(
            self,
            Call::ReadFile { .. } | Call::Glob { .. } | Call::Grep { .. } | Call::Explore { .. }
        )
    }

    /// One line for the UI: the tool and its target.
    pub fn describe(&self) -> String {
        let text = match self {
            Call::ReadFile { path, offset, .. } => match offset {
                Some(o) => format!("read_file {path} (from line {o})"),
                None => format!("read_file {path}"),
            },
            Call::WriteFile { path, content } => {
                format!("write_file {path} ({} bytes)", content.len())
            }
            Call::EditFile { path, .. } => format!("edit_file {path}"),
            Call::Glob { pattern, path } => match path {
                Some(p) => format!("glob {pattern} in {p}"),
                None => format!("glob {pattern}"),
            },
            Call::Grep { pattern, path, .. } => match path {
                Some(p) => format!("grep /{pattern}/ in {p}"),
                None => format!("grep /{pattern}/"),
            },
            Call::Bash {
                command,
                outside_sandbox,
                ..
            } => {
                if *outside_sandbox {
                    format!("bash (outside the sandbox): {command}")
                } else {
                    format!("bash: {command}")
                }
            }
            Call::Explore { question } => format!("explore: {question}"),
        };
        one_line(&text, DESCRIBE_CAP)
    }

    /// The request to the supervisor; `None` for `explore`, which the agent runs itself.
    pub fn request(&self) -> Option<Request> {
        Some(match self.clone() {
            Call::ReadFile {
                path,
                offset,
                limit,
            } => Request::ReadFile {
                path,
                offset,
                limit,
            },
            Call::WriteFile { path, content } => Request::WriteFile { path, content },
            Call::EditFile {
                path,
                old,
                new,
                replace_all,
            } => Request::EditFile {
                path,
                old,
                new,
                replace_all,
            },
            Call::Glob { pattern, path } => Request::Glob { pattern, path },
            Call::Grep {
                pattern,
                path,
                glob,
                case_insensitive,
            } => Request::Grep {
                pattern,
                path,
                glob,
                case_insensitive,
            },
            Call::Bash {
                command,
                timeout,
                outside_sandbox,
            } => Request::RunCommand {
                command,
                timeout_secs: timeout,
                outside_sandbox,
            },
            Call::Explore { .. } => return None,
        })
    }
}

/// A tool result for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text.
    pub content: String,
    /// The call failed or was refused.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }

    /// An error result.
    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }

    /// The same result cut to `limit` characters.
    pub fn capped(self, limit: usize) -> ToolOutput {
        ToolOutput {
            content: cap(&self.content, limit),
            is_error: self.is_error,
        }
    }
}

/// `text` cut to at most `limit` characters, the cut marked with how much is missing.
pub fn cap(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_owned();
    }
    let mut marker = format!("\n[output cut: {} more characters not shown]", total);
    // The marker's own length comes out of the limit, so the result stays within it.
    let keep = limit.saturating_sub(marker.chars().count() + 2);
    marker = format!("\n[output cut: {} more characters not shown]", total - keep);
    let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let mut out = String::with_capacity(end + marker.len());
    out.push_str(&text[..end]);
    out.push_str(&marker);
    out
}

/// `text` on one line (line breaks and other control characters as spaces), at most `limit`
/// characters.
pub fn one_line(text: &str, limit: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= limit {
        return flat;
    }
    let mut cut: String = flat.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn code_name(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{code:?}"))
}

/// The last step of the pipeline: the supervisor's answer to `call` as text for the model,
/// cut to [`RESULT_CAP`].
pub fn format_answer(call: &Call, answer: Answer) -> ToolOutput {
    let out = match (call, answer) {
        (_, Answer::Error { code, message }) => format_error(call, code, &message),
        (
            Call::ReadFile { path, .. },
            Answer::FileText {
                text,
                first_line,
                total_lines,
                unchanged,
            },
        ) => ToolOutput::ok(format_file(path, &text, first_line, total_lines, unchanged)),
        (Call::WriteFile { path, .. }, Answer::Written { bytes, created, .. }) => {
            ToolOutput::ok(if created {
                format!("Created {path} ({bytes} bytes).")
            } else {
                format!("Wrote {path} ({bytes} bytes).")
            })
        }
        (
            Call::EditFile { path, .. },
            Answer::Written {
                bytes,
                replacements,
                ..
            },
        ) => ToolOutput::ok(format!(
            "Edited {path}: {replacements} replacement{}; the file is now {bytes} bytes.",
            if replacements == 1 { "" } else { "s" }
        )),
        (Call::Glob { pattern, .. }, Answer::Paths { paths, truncated }) => {
            if paths.is_empty() {
                ToolOutput::ok(format!("No path matches {pattern}."))
            } else {
                let mut text = paths.join("\n");
                if truncated {
                    text.push_str("\n[more paths matched than are shown: narrow the pattern]");
                }
                ToolOutput::ok(text)
            }
        }
        (Call::Grep { pattern, .. }, Answer::Matches { matches, truncated }) => {
            if matches.is_empty() {
                ToolOutput::ok(format!("No line matches /{pattern}/."))
            } else {
                let mut text = String::new();
                for m in &matches {
                    text.push_str(&format!("{}:{}:{}\n", m.path, m.line, m.text));
                }
                if truncated {
                    text.push_str(
                        "[more lines matched than are shown: narrow the pattern, path or glob]\n",
                    );
                }
                ToolOutput::ok(text)
            }
        }
        (Call::Bash { timeout, .. }, Answer::CommandDone(done)) => format_command(&done, *timeout),
        (call, other) => ToolOutput::error(format!(
            "{} failed: the supervisor sent an answer of the wrong kind ({})",
            call.name(),
            answer_kind(&other)
        )),
    };
    out.capped(RESULT_CAP)
}

fn answer_kind(answer: &Answer) -> &'static str {
    match answer {
        Answer::FileText { .. } => "file_text",
        Answer::Written { .. } => "written",
        Answer::Paths { .. } => "paths",
        Answer::Matches { .. } => "matches",
        Answer::CommandDone(_) => "command_done",
        Answer::Stored => "stored",
        Answer::Error { .. } => "error",
    }
}

fn format_file(path: &str, text: &str, first: u64, total: u64, unchanged: bool) -> String {
    if unchanged {
        return format!(
            "{path}: these lines were already sent in this session and the file has not \
             changed since; use the earlier result."
        );
    }
    if total == 0 {
        return format!("{path} is empty.");
    }
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut n = first;
    for line in text.lines() {
        out.push_str(&format!("{n:>6}\t{line}\n"));
        n += 1;
    }
    let last = n.saturating_sub(1);
    if n == first {
        out.push_str(&format!(
            "[{path} has {total} lines; none from line {first}]"
        ));
    } else if last < total || first > 1 {
        out.push_str(&format!("[lines {first}-{last} of {total}"));
        if last < total {
            out.push_str(&format!("; read on with offset {}", last + 1));
        }
        out.push(']');
    }
    out
}

fn format_command(done: &CommandDone, timeout: Option<u64>) -> ToolOutput {
    let mut text = done.output.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if done.output_truncated {
        text.push_str("[the output was cut by the supervisor]\n");
    }
    if done.timed_out {
        match timeout {
            Some(s) => text.push_str(&format!("[timed out after {s} seconds and was killed]")),
            None => text.push_str("[timed out and was killed]"),
        }
    } else if let Some(code) = done.exit_code {
        text.push_str(&format!("[exit code {code}]"));
    } else if let Some(sig) = done.signal {
        text.push_str(&format!("[killed by signal {sig}]"));
    } else {
        text.push_str("[ended with no exit status]");
    }
    if !done.blocked_hosts.is_empty() {
        text.push_str(&format!(
            "\n[the network proxy blocked: {}]",
            done.blocked_hosts.join(", ")
        ));
    }
    if let Some(staged) = &done.staged {
        text.push_str(&format!("\n[staged change: {staged}]"));
    }
    ToolOutput {
        content: text,
        is_error: done.timed_out || done.exit_code != Some(0),
    }
}

fn format_error(call: &Call, code: ErrorCode, message: &str) -> ToolOutput {
    let tool = call.name();
    ToolOutput::error(match code {
        ErrorCode::Denied => format!("Permission denied for {tool}: {message}"),
        ErrorCode::Rejected => format!("The user rejected this {tool} call: {message}"),
        ErrorCode::EditMismatch => edit_mismatch(call, message),
        other => format!("{tool} failed ({}): {message}", code_name(other)),
    })
}

/// The count the supervisor's `edit_mismatch` message states ("old occurs N times in …").
fn stated_count(message: &str) -> Option<u64> {
    let rest = message.split("occurs ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

fn edit_mismatch(call: &Call, message: &str) -> String {
    let path = match call {
        Call::EditFile { path, .. } => path.as_str(),
        _ => "the file",
    };
    const NONE: &str = "`old` was not found (0 matches). Read the file again and copy the \
        text to replace exactly, with its whitespace and indentation, then retry.";
    const MANY: &str = "`old` occurs more than once. Add surrounding lines to `old` so it \
        occurs exactly once, or set replace_all to true to replace every occurrence.";
    let fix = match stated_count(message) {
        Some(0) => NONE.to_owned(),
        Some(n) if n > 1 => MANY.replacen("more than once", &format!("{n} times"), 1),
        _ => format!("If {NONE} If {MANY}"),
    };
    format!("edit_file changed nothing in {path}: {fix} (supervisor: {message})")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use garuda_ipc::GrepMatch;

    const MAIN: ToolSet = ToolSet::Main {
        outside_sandbox: false,
    };

    #[test]
    fn every_schema_is_a_closed_object_and_names_its_required_fields() {
        for set in [
            MAIN,
            ToolSet::Main {
                outside_sandbox: true,
            },
            ToolSet::Explore,
        ] {
            for t in definitions(set) {
                let s = &t.input_schema;
                assert_eq!(s["type"], "object", "{}", t.name);
                assert_eq!(s["additionalProperties"], false, "{}", t.name);
                for r in s["required"].as_array().unwrap() {
                    assert!(s["properties"].get(r.as_str().unwrap()).is_some());
                }
            }
        }
        let names = |set| {
            definitions(set)
                .into_iter()
                .map(|t| t.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(MAIN),
            [
                "read_file",
                "write_file",
                "edit_file",
                "glob",
                "grep",
                "bash",
                "explore"
            ]
        );
        assert_eq!(names(ToolSet::Explore), ["read_file", "glob", "grep"]);
    }

    #[test]
    fn outside_sandbox_is_offered_only_when_the_supervisor_offers_it() {
        let bash = |set| {
            definitions(set)
                .into_iter()
                .find(|t| t.name == "bash")
                .unwrap()
                .input_schema
        };
        assert!(bash(MAIN)["properties"].get("outside_sandbox").is_none());
        let input = json!({"command": "ls", "outside_sandbox": true});
        assert_eq!(
            Call::parse(MAIN, "bash", &input).unwrap_err(),
            "bash has no field `outside_sandbox`; its fields are command, timeout"
        );
        // Control: offered, it is in the schema and parses.
        let with = ToolSet::Main {
            outside_sandbox: true,
        };
        assert!(bash(with)["properties"].get("outside_sandbox").is_some());
        assert!(matches!(
            Call::parse(with, "bash", &input).unwrap(),
            Call::Bash {
                outside_sandbox: true,
                ..
            }
        ));

        let spec = |name: &str, schema: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: schema.into(),
        };
        assert!(!outside_sandbox_offered(&[]));
        assert!(!outside_sandbox_offered(&[spec(
            "run_command",
            r#"{"properties":{"command":{}}}"#
        )]));
        assert!(!outside_sandbox_offered(&[spec("run_command", "not json")]));
        assert!(outside_sandbox_offered(&[spec(
            "run_command",
            r#"{"properties":{"command":{},"outside_sandbox":{"type":"boolean"}}}"#
        )]));
    }

    #[test]
    fn validation_names_the_field_at_fault() {
        let cases = [
            ("nope", json!({}), "unknown tool `nope`; the tools are read_file, write_file, edit_file, glob, grep, bash, explore"),
            ("read_file", json!("a.txt"), "read_file's input must be a JSON object with the fields path, offset, limit; got a string"),
            ("read_file", json!({}), "read_file is missing its required field `path` (Path relative to the project root, in plain form (no leading '/', no '..').)"),
            ("read_file", json!({"path": "a", "mode": "w"}), "read_file has no field `mode`; its fields are path, offset, limit"),
            ("read_file", json!({"path": 3}), "read_file's field `path` must be a string; got an integer"),
            ("read_file", json!({"path": ""}), "read_file's field `path` must not be empty"),
            ("read_file", json!({"path": "a", "offset": 0}), "read_file's field `offset` must be an integer at least 1; got 0"),
            ("read_file", json!({"path": "a", "limit": "10"}), "read_file's field `limit` must be an integer; got a string"),
            ("bash", json!({"command": "ls", "timeout": 99999}), "bash's field `timeout` must be an integer from 1 to 7200; got 99999"),
            ("grep", json!({"pattern": "x", "case_insensitive": "yes"}), "grep's field `case_insensitive` must be a boolean (true or false); got a string"),
            ("edit_file", json!({"path": "a", "old": "x", "new": "x"}), "edit_file's `old` and `new` are the same: the edit would change nothing"),
            ("explore", json!({"question": "q"}), ""),
        ];
        for (name, input, want) in cases {
            match Call::parse(MAIN, name, &input) {
                Err(e) => assert_eq!(e, want, "{name} {input}"),
                Ok(c) => assert!(want.is_empty(), "{name} {input} parsed as {c:?}"),
            }
        }
        // The explore subagent is offered only the read-only tools.
        assert_eq!(
            Call::parse(
                ToolSet::Explore,
                "write_file",
                &json!({"path": "a", "content": ""})
            )
            .unwrap_err(),
            "unknown tool `write_file`; the tools are read_file, glob, grep"
        );
        // Control: valid calls parse to their requests.
        let c = Call::parse(MAIN, "read_file", &json!({"path": "src/a.rs", "offset": 3})).unwrap();
        assert_eq!(
            c.request(),
            Some(Request::ReadFile {
                path: "src/a.rs".into(),
                offset: Some(3),
                limit: None
            })
        );
        assert!(c.read_only());
        let c = Call::parse(
            MAIN,
            "bash",
            &json!({"command": "make\ntest", "timeout": 5}),
        )
        .unwrap();
        assert_eq!(
            c.request(),
            Some(Request::RunCommand {
                command: "make\ntest".into(),
                timeout_secs: Some(5),
                outside_sandbox: false
            })
        );
        assert!(!c.read_only());
        assert_eq!(c.describe(), "bash: make test");
    }

    #[test]
    fn results_are_capped_with_a_marker() {
        let long = "é".repeat(RESULT_CAP * 2);
        let c = cap(&long, RESULT_CAP);
        assert!(c.chars().count() <= RESULT_CAP);
        assert!(
            c.ends_with(" more characters not shown]"),
            "{}",
            &c[c.len() - 80..]
        );
        let kept = c.chars().take_while(|&ch| ch == 'é').count();
        assert!(c.contains(&format!("[output cut: {} more", RESULT_CAP * 2 - kept)));
        // Control: a short text is unchanged.
        assert_eq!(cap("abc", RESULT_CAP), "abc");
        let c = Call::Glob {
            pattern: "*".into(),
            path: None,
        };
        let out = format_answer(
            &c,
            Answer::Paths {
                paths: vec!["x".repeat(1000); 500],
                truncated: false,
            },
        );
        assert!(out.content.chars().count() <= RESULT_CAP);
    }

    #[test]
    fn an_edit_mismatch_says_which_and_how_to_fix_it() {
        let call = Call::EditFile {
            path: "f".into(),
            old: "a".into(),
            new: "b".into(),
            replace_all: false,
        };
        let none = format_answer(
            &call,
            Answer::Error {
                code: ErrorCode::EditMismatch,
                message: "old occurs 0 times in f: read the file again and copy the text exactly"
                    .into(),
            },
        );
        assert!(none.is_error);
        assert!(
            none.content.starts_with("edit_file changed nothing in f: `old` was not found (0 matches). Read the file again"),
            "{}",
            none.content
        );
        let many = format_answer(
            &call,
            Answer::Error {
                code: ErrorCode::EditMismatch,
                message: "old occurs 3 times in f: add surrounding lines so it occurs once, or set replace_all".into(),
            },
        );
        assert!(
            many.content.starts_with("edit_file changed nothing in f: `old` occurs 3 times. Add surrounding lines to `old` so it occurs exactly once, or set replace_all to true"),
            "{}",
            many.content
        );
        assert!(!many.content.contains("0 matches"));
        // A message without a count gets both fixes.
        let unknown = format_answer(
            &call,
            Answer::Error {
                code: ErrorCode::EditMismatch,
                message: "mismatch".into(),
            },
        );
        assert!(unknown.content.contains("0 matches") && unknown.content.contains("replace_all"));
    }

    #[test]
    fn answers_read_as_text() {
        let read = Call::ReadFile {
            path: "a.txt".into(),
            offset: Some(2),
            limit: Some(2),
        };
        let out = format_answer(
            &read,
            Answer::FileText {
                text: "two\nthree\n".into(),
                first_line: 2,
                total_lines: 5,
                unchanged: false,
            },
        );
        assert_eq!(
            out.content,
            "     2\ttwo\n     3\tthree\n[lines 2-3 of 5; read on with offset 4]"
        );
        assert!(!out.is_error);
        let grep = Call::Grep {
            pattern: "x".into(),
            path: None,
            glob: None,
            case_insensitive: false,
        };
        let out = format_answer(
            &grep,
            Answer::Matches {
                matches: vec![GrepMatch {
                    path: "a".into(),
                    line: 3,
                    text: "x = 1".into(),
                }],
                truncated: true,
            },
        );
        assert!(out.content.starts_with("a:3:x = 1\n[more lines matched"));
        let bash = Call::Bash {
            command: "false".into(),
            timeout: None,
            outside_sandbox: false,
        };
        let done = |code| {
            Answer::CommandDone(CommandDone {
                exit_code: code,
                signal: None,
                timed_out: false,
                output: "out".into(),
                output_truncated: false,
                blocked_hosts: vec!["evil.example".into()],
                staged: None,
            })
        };
        let out = format_answer(&bash, done(Some(1)));
        assert_eq!(
            out.content,
            "out\n[exit code 1]\n[the network proxy blocked: evil.example]"
        );
        assert!(out.is_error);
        assert!(!format_answer(&bash, done(Some(0))).is_error);
        let denied = format_answer(
            &bash,
            Answer::Error {
                code: ErrorCode::Denied,
                message: "the policy denies it".into(),
            },
        );
        assert_eq!(
            denied.content,
            "Permission denied for bash: the policy denies it"
        );
        let wrong = format_answer(&bash, Answer::Stored);
        assert!(wrong.is_error && wrong.content.contains("wrong kind (stored)"));
        let io = format_answer(
            &read,
            Answer::Error {
                code: ErrorCode::NotFound,
                message: "no such file: a.txt".into(),
            },
        );
        assert_eq!(
            io.content,
            "read_file failed (not_found): no such file: a.txt"
        );
    }
}
