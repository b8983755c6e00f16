//! Questions a child `garuda sandbox` asks the process that started it. The chat runs each
//! command as a child `garuda sandbox --ask-socket PATH`, and that child asks over the socket
//! instead of on a terminal, so that the chat's supervisor draws the question and the person
//! answers it there: a staged command's "apply or discard?" (and a guarded change's question
//! of its own), and the proxy's "may the command reach this host that the allowlist does not
//! name?" (the proxy waits for the answer). The agent never sees the socket: it lives in a
//! private folder of the supervisor (mode 0700, outside every sandbox's view), and the
//! command's stdin is empty.
//!
//! One JSON line per question from the child, one line per answer from the parent: `yes` or
//! `no` (for "apply or discard?", yes is apply); for a host also `session` (allowed for the
//! rest of the chat's session, which the parent remembers). Anything else, a closed socket or
//! an error is a no: the change is discarded and the project does not change, the host is
//! refused.

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
    /// The proxy's question: the command asks to reach `host` on `port`, which the network
    /// allowlist does not name. `host` is the proxy's canonical form (lower case, A-labels);
    /// an address is never asked about.
    Host {
        /// The host name.
        host: String,
        /// The port.
        port: u16,
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
    reply(path, question).as_deref() == Some("yes")
}

/// The child's side of a [`StagedQuestion::Host`] question: the proxy's answer. Every failure
/// is a refusal.
pub fn ask_host(path: &Path, host: &str, port: u16) -> crate::proxy::AskAnswer {
    let question = StagedQuestion::Host {
        host: host.to_owned(),
        port,
    };
    match reply(path, &question).as_deref() {
        Some("yes") => crate::proxy::AskAnswer::AllowOnce,
        Some("session") => crate::proxy::AskAnswer::AllowSession,
        _ => crate::proxy::AskAnswer::Deny,
    }
}

/// Sends `question` and reads the answer line, trimmed; `None` on any failure.
fn reply(path: &Path, question: &StagedQuestion) -> Option<String> {
    let mut stream = UnixStream::connect(path).ok()?;
    let mut line = serde_json::to_string(question).ok()?;
    line.push('\n');
    stream.write_all(line.as_bytes()).ok()?;
    let mut answer = String::new();
    BufReader::new(stream)
        .take(16)
        .read_line(&mut answer)
        .ok()?;
    Some(answer.trim().to_owned())
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
pub fn answer(stream: &UnixStream, yes: bool) {
    answer_word(stream, if yes { "yes" } else { "no" });
}

/// The parent's side: the answer to a [`StagedQuestion::Host`] question.
pub fn answer_host(stream: &UnixStream, answer: crate::proxy::AskAnswer) {
    answer_word(
        stream,
        match answer {
            crate::proxy::AskAnswer::AllowOnce => "yes",
            crate::proxy::AskAnswer::AllowSession => "session",
            crate::proxy::AskAnswer::Deny => "no",
        },
    );
}

fn answer_word(mut stream: &UnixStream, word: &str) {
    let _ = stream.write_all(format!("{word}\n").as_bytes());
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

    /// A host question: `yes` is once, `session` is for the session, anything else (a
    /// staged question's answers included, or silence) refuses; nobody listening refuses.
    #[test]
    fn a_host_is_allowed_only_by_yes_or_session() {
        use crate::proxy::AskAnswer;
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("ask.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        for (reply, want) in [
            (Some(&b"yes\n"[..]), AskAnswer::AllowOnce),
            (Some(&b"session\n"[..]), AskAnswer::AllowSession),
            (Some(&b"no\n"[..]), AskAnswer::Deny),
            (Some(&b"always\n"[..]), AskAnswer::Deny),
            (None, AskAnswer::Deny),
        ] {
            let p = path.clone();
            let child = std::thread::spawn(move || ask_host(&p, "example.com", 443));
            let (stream, _) = listener.accept().unwrap();
            assert_eq!(
                read_question(&stream),
                Some(StagedQuestion::Host {
                    host: "example.com".into(),
                    port: 443
                })
            );
            if let Some(reply) = reply {
                (&stream).write_all(reply).unwrap();
            }
            drop(stream);
            assert_eq!(child.join().unwrap(), want, "{reply:?}");
        }
        // The parent's words for each answer are the ones the child reads back.
        for answer in [
            AskAnswer::AllowOnce,
            AskAnswer::AllowSession,
            AskAnswer::Deny,
        ] {
            let p = path.clone();
            let child = std::thread::spawn(move || ask_host(&p, "example.com", 80));
            let (stream, _) = listener.accept().unwrap();
            read_question(&stream).unwrap();
            answer_host(&stream, answer);
            drop(stream);
            assert_eq!(child.join().unwrap(), answer);
        }
        drop(listener);
        assert_eq!(ask_host(&path, "example.com", 443), AskAnswer::Deny);
    }
}
