//! What the file tools and their search half share: which tool a request is, how the
//! permission engine judges a path for it, what counts as text, and how a refusal reads. Its
//! own module so that `files` and `search` each use it without using each other.

use std::path::PathBuf;

use garuda_ipc::{Answer, ErrorCode};
use garuda_policy::engine::{Context, Decision, Engine, Request as PolicyRequest};

/// Which file tool; also the permission engine's tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `read_file`.
    ReadFile,
    /// `write_file`.
    WriteFile,
    /// `edit_file`.
    EditFile,
    /// `glob` (judged as reading its folder).
    Glob,
    /// `grep` (judged as reading its folder or file).
    Grep,
}

impl Tool {
    /// The tool's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Tool::ReadFile => "read_file",
            Tool::WriteFile => "write_file",
            Tool::EditFile => "edit_file",
            Tool::Glob => "glob",
            Tool::Grep => "grep",
        }
    }

    pub(crate) fn policy_request(self, rel: &str) -> PolicyRequest {
        let path = PathBuf::from(if rel.is_empty() { "." } else { rel });
        match self {
            Tool::ReadFile | Tool::Glob | Tool::Grep => PolicyRequest::ReadFile { path },
            Tool::WriteFile => PolicyRequest::WriteFile { path },
            Tool::EditFile => PolicyRequest::EditFile { path },
        }
    }
}

/// The strictest of the engine's decisions on the path as written and where it leads.
pub(crate) fn decide(
    engine: &Engine<'_>,
    ctx: &Context,
    tool: Tool,
    written: &str,
    resolved: &str,
) -> Decision {
    let at_target = engine.decide(&tool.policy_request(resolved), ctx);
    if written == resolved {
        return at_target;
    }
    let as_written = engine.decide(&tool.policy_request(written), ctx);
    // Deny < Ask < Allow; on a tie the target's reason (it names the real file) is kept.
    if as_written.verdict < at_target.verdict {
        as_written
    } else {
        at_target
    }
}

/// Text is UTF-8 without a NUL byte; anything else is binary to the file tools (a lossy
/// conversion would be written back as replacement characters by the next edit).
pub(crate) fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// An error answer; the message is escaped for display (`garuda-text`).
pub(crate) fn error(code: ErrorCode, message: impl AsRef<str>) -> Answer {
    Answer::Error {
        code,
        message: garuda_text::visible(message.as_ref()).into_owned(),
    }
}
