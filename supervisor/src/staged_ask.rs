//! A staged command's questions asked by the process that started it: the chat runs each
//! staged command as a child `garuda sandbox --staged --ask-socket PATH`, and that child asks
//! "apply or discard?" (and a guarded change's question of its own) over the socket instead
//! of on a terminal, so that the chat's supervisor draws the question and the person answers
//! it there. The agent never sees the socket: it lives in a private folder of the supervisor
//! (mode 0700, outside every sandbox's view), and the command's stdin is empty.
//!
//! One JSON line per question from the child, one line per answer from the parent: `yes` or
//! `no` (for "apply or discard?", yes is apply). Anything else, a closed socket or an error is
//! a no: the change is discarded and the project does not change.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Longest question line read (a change summary with its diff is cut at about 60,000
/// characters by the renderer).
pub const MAX_QUESTION_BYTES: u64 = 256 * 1024;

/// A question of a staged command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StagedQuestion {
    /// The change as `garuda sandbox` renders it (summary, diff, sensitive files, ignored
    /// counts, why it is incomplete), and whether it can be applied at all.
    ApplyOrDiscard {
        /// The rendered change.
        summary: String,
        /// False: the list is incomplete (or a link leads out): discard only.
        can_apply: bool,
    },
    /// A guarded part's own question (Garuda's settings, sensitive files), after "apply".
    Guard {
        /// The question.
        text: String,
    },
    /// Not a question: what became of the change, in the audit log's words (`applied`,
    /// `discarded`, `discarded (apply refused)`, `no change`…), sent last. The parent tells
    /// the model this rather than guess it from the exit code (after an apply that is the
    /// command's own, which may be any number).
    Outcome {
        /// What became of the change.
        what: String,
    },
}

/// The child's side: asks `question` over the socket at `path`; true for a yes. Every failure
/// is a no.
pub fn ask(path: &Path, question: &StagedQuestion) -> bool {
    let Ok(mut stream) = UnixStream::connect(path) else {
        return false;
    };
    let Ok(mut line) = serde_json::to_string(question) else {
        return false;
    };
    line.push('\n');
    if stream.write_all(line.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    match BufReader::new(stream).take(16).read_line(&mut answer) {
        Ok(_) => answer.trim() == "yes",
        Err(_) => false,
    }
}

/// The parent's side: reads one question from a child's connection (`None`: malformed, too
/// long, or nothing).
pub fn read_question(stream: &UnixStream) -> Option<StagedQuestion> {
    let mut line = String::new();
    BufReader::new(stream)
        .take(MAX_QUESTION_BYTES)
        .read_line(&mut line)
        .ok()?;
    serde_json::from_str(line.trim_end()).ok()
}

/// The parent's side: the answer to the question read from `stream`.
pub fn answer(mut stream: &UnixStream, yes: bool) {
    let _ = stream.write_all(if yes { b"yes\n" } else { b"no\n" });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A question goes over and its answer comes back; a parent that answers anything but
    /// `yes`, or closes without answering, is a no.
    #[test]
    fn yes_only_for_yes() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("ask.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let question = StagedQuestion::ApplyOrDiscard {
            summary: "1 file changed\n".into(),
            can_apply: true,
        };
        for (reply, want) in [
            (Some(&b"yes\n"[..]), true),
            (Some(&b"no\n"[..]), false),
            (Some(&b"YES please\n"[..]), false),
            (None, false),
        ] {
            let q = question.clone();
            let p = path.clone();
            let child = std::thread::spawn(move || ask(&p, &q));
            let (stream, _) = listener.accept().unwrap();
            assert_eq!(read_question(&stream), Some(question.clone()));
            if let Some(reply) = reply {
                (&stream).write_all(reply).unwrap();
            }
            drop(stream);
            assert_eq!(child.join().unwrap(), want, "{reply:?}");
        }
        // Nobody listening: a no.
        drop(listener);
        assert!(!ask(&path, &question));
    }
}
