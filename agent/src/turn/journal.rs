//! The journal's records as the agent writes them, and the way back: the messages (and the
//! budget's charges) a resumed session starts from.
//!
//! Every change to the conversation is one record, written when it happens (seed §7: the
//! file always matches memory): a complete message, a trim of old tool outputs, a summary
//! that replaced the older messages. Usage records carry what each model call charged the
//! budget, so a resumed session's budget starts where the last one stopped (T9: the budget is
//! a session limit, and charges with no reported usage count too). The supervisor stores
//! each record as one opaque line; it decides nothing from them.

use garuda_ipc::{StopReason, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{Block, Message};

/// One journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    /// A complete message was added to the conversation.
    Message {
        /// The message.
        message: Message,
    },
    /// Compaction replaced old tool outputs by a marker ([`trim_marker`] of their content).
    Trim {
        /// `[message index, block index]` of each trimmed tool result.
        blocks: Vec<[usize; 2]>,
    },
    /// Compaction replaced the first `replaced` messages by one summary message.
    Summary {
        /// Messages replaced.
        replaced: usize,
        /// The summary message put in their place.
        message: Message,
    },
    /// One model call (all its attempts): what it used and what the budget charged.
    Usage {
        /// `main`, `explore` or `compaction`.
        agent: String,
        /// Input tokens reported (0 when not reported).
        input_tokens: u64,
        /// Output tokens reported (0 when not reported).
        output_tokens: u64,
        /// The provider reported the usage of the call's last attempt.
        reported: bool,
        /// Tokens charged to the budget: the reported usage, plus every reservation kept as
        /// spent (failed, cancelled or unreported attempts).
        charged: u64,
    },
    /// A turn ended.
    TurnEnd {
        /// Why.
        reason: StopReason,
        /// Tokens the turn used, as reported.
        usage: Usage,
        /// Model calls of the main loop.
        steps: u32,
    },
}

impl Record {
    /// The record as one line of JSON (no line break: JSON escapes them in strings).
    pub fn to_line(&self) -> String {
        // Serialising these types cannot fail: no map has non-string keys.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a journal could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A line is not JSON, or a record of a known type is malformed.
    #[error("journal line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A trim or summary names a message or block the journal never had.
    #[error("journal line {line}: {what} is out of range")]
    OutOfRange {
        /// 1-based line number.
        line: usize,
        /// What it names.
        what: String,
    },
}

/// What compaction puts in place of a trimmed tool output: says how much was there, and is
/// a function of the content alone, so that replaying a trim gives the same messages.
pub fn trim_marker(content: &str) -> String {
    format!(
        "[old tool output trimmed by compaction: {} characters]",
        content.chars().count()
    )
}

/// Whether a tool output is already a trim marker.
pub fn is_trim_marker(content: &str) -> bool {
    content.starts_with("[old tool output trimmed by compaction: ")
}

/// What a session's journal says of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rebuilt {
    /// The conversation, as the loop held it after the last record.
    pub messages: Vec<Message>,
    /// Tokens the session's budget was charged.
    pub spent: u64,
}

/// The conversation a journal records, and the budget it charged. Records of types this
/// agent does not write (the supervisor's own, a later version's) are skipped; a malformed
/// record of a known type is an error, not a silent gap.
pub fn rebuild(lines: &[&str]) -> Result<Rebuilt, JournalError> {
    let mut out = Rebuilt::default();
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| JournalError::Malformed {
            line: n,
            reason: e.to_string(),
        })?;
        let known = matches!(
            value.get("type").and_then(Value::as_str),
            Some("message" | "trim" | "summary" | "usage" | "turn_end")
        );
        if !known {
            continue;
        }
        let record: Record =
            serde_json::from_value(value).map_err(|e| JournalError::Malformed {
                line: n,
                reason: e.to_string(),
            })?;
        apply(&mut out, record, n)?;
    }
    Ok(out)
}

fn apply(out: &mut Rebuilt, record: Record, n: usize) -> Result<(), JournalError> {
    match record {
        Record::Message { message } => out.messages.push(message),
        Record::Trim { blocks } => {
            for [m, b] in blocks {
                let block = out
                    .messages
                    .get_mut(m)
                    .and_then(|msg| msg.content.get_mut(b));
                match block {
                    Some(Block::ToolResult { content, .. }) => *content = trim_marker(content),
                    _ => {
                        return Err(JournalError::OutOfRange {
                            line: n,
                            what: format!("tool result [{m}, {b}]"),
                        })
                    }
                }
            }
        }
        Record::Summary { replaced, message } => {
            if replaced > out.messages.len() {
                return Err(JournalError::OutOfRange {
                    line: n,
                    what: format!("summary of {replaced} messages"),
                });
            }
            out.messages.splice(..replaced, [message]);
        }
        Record::Usage { charged, .. } => out.spent = out.spent.saturating_add(charged),
        Record::TurnEnd { .. } => {}
    }
    Ok(())
}

/// The messages a journal records (for `--resume`).
pub fn messages_from_journal(lines: &[&str]) -> Result<Vec<Message>, JournalError> {
    Ok(rebuild(lines)?.messages)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::model::Role;

    fn text(role: Role, t: &str) -> Message {
        Message {
            role,
            content: vec![Block::Text { text: t.into() }],
        }
    }

    #[test]
    fn records_rebuild_the_messages_and_the_charges() {
        let result = Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "t1".into(),
                content: "x".repeat(500),
                is_error: false,
            }],
        };
        let records = [
            Record::Message {
                message: text(Role::User, "task\nwith a line break"),
            },
            Record::Usage {
                agent: "main".into(),
                input_tokens: 10,
                output_tokens: 5,
                reported: true,
                charged: 15,
            },
            Record::Message {
                message: text(Role::Assistant, "a"),
            },
            Record::Message { message: result },
            Record::Trim {
                blocks: vec![[2, 0]],
            },
            Record::Summary {
                replaced: 2,
                message: text(Role::User, "summary"),
            },
            Record::Usage {
                agent: "explore".into(),
                input_tokens: 0,
                output_tokens: 0,
                reported: false,
                charged: 900,
            },
            Record::TurnEnd {
                reason: StopReason::Done,
                usage: Usage::default(),
                steps: 1,
            },
        ];
        let lines: Vec<String> = records.iter().map(Record::to_line).collect();
        assert!(lines.iter().all(|l| !l.contains('\n')));
        let mut refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        // A record of a type the agent does not write is skipped.
        refs.insert(0, r#"{"type":"session","id":"abc"}"#);
        let rebuilt = rebuild(&refs).unwrap();
        assert_eq!(rebuilt.spent, 915);
        assert_eq!(rebuilt.messages.len(), 2);
        assert_eq!(rebuilt.messages[0], text(Role::User, "summary"));
        assert_eq!(
            rebuilt.messages[1].content[0],
            Block::ToolResult {
                tool_use_id: "t1".into(),
                content: "[old tool output trimmed by compaction: 500 characters]".into(),
                is_error: false
            }
        );
        assert_eq!(messages_from_journal(&refs).unwrap(), rebuilt.messages);
    }

    #[test]
    fn every_record_reads_back_as_written_from_one_line() {
        // Text a model or a tool can produce: line breaks of every kind, terminal escapes, a
        // NUL, quotes, non-ASCII; a tool call whose arguments did not parse (kept as a
        // string); numbers at their limits; every stop reason.
        let odd = "a\nb\r\nc\u{2028}d\u{2029}e\u{85}f\u{1b}[2J\0\"q\" \\ é ✓ 🦀";
        let mut records = vec![
            Record::Message {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        Block::Text { text: odd.into() },
                        Block::ToolUse {
                            id: odd.into(),
                            name: "read_file".into(),
                            input: Value::String(format!("{{\"path\": \"{odd}")),
                        },
                        Block::ToolUse {
                            id: "t2".into(),
                            name: "bash".into(),
                            input: serde_json::json!({"command": odd, "timeout": u64::MAX, "x": [1.5, -2, null, true]}),
                        },
                    ],
                },
            },
            Record::Message {
                message: Message {
                    role: Role::User,
                    content: vec![Block::ToolResult {
                        tool_use_id: odd.into(),
                        content: odd.into(),
                        is_error: true,
                    }],
                },
            },
            Record::Trim {
                blocks: vec![[0, 0], [usize::MAX, 7]],
            },
            Record::Summary {
                replaced: 3,
                message: text(Role::User, odd),
            },
            Record::Usage {
                agent: "compaction".into(),
                input_tokens: u64::MAX,
                output_tokens: 0,
                reported: false,
                charged: u64::MAX,
            },
        ];
        for reason in [
            StopReason::Done,
            StopReason::MaxSteps,
            StopReason::TokenBudget,
            StopReason::RepeatedCalls,
            StopReason::MaxTokens,
            StopReason::Refusal,
            StopReason::Cancelled,
            StopReason::ModelError,
        ] {
            records.push(Record::TurnEnd {
                reason,
                usage: Usage {
                    input_tokens: u64::MAX,
                    output_tokens: 1,
                },
                steps: u32::MAX,
            });
        }
        for r in &records {
            let line = r.to_line();
            assert!(!line.is_empty());
            assert!(!line.contains(['\n', '\r']), "a record is one line: {line}");
            let back: Record = serde_json::from_str(&line).unwrap();
            assert_eq!(&back, r, "{line}");
        }
        // Control: a field a record does not have is refused, not dropped.
        let extra = r#"{"type":"usage","agent":"main","input_tokens":1,"output_tokens":1,"reported":true,"charged":2,"free":1}"#;
        assert!(serde_json::from_str::<Record>(extra).is_err());
        assert!(rebuild(&[extra]).is_err());
    }

    #[test]
    fn a_malformed_or_impossible_record_is_an_error() {
        let bad = [
            ("not json", "journal line 1: expected ident"),
            (
                r#"{"type":"message","message":{"role":"user"}}"#,
                "journal line 1: missing field `content`",
            ),
            (
                r#"{"type":"trim","blocks":[[4,0]]}"#,
                "journal line 1: tool result [4, 0] is out of range",
            ),
            (
                r#"{"type":"summary","replaced":3,"message":{"role":"user","content":[]}}"#,
                "journal line 1: summary of 3 messages is out of range",
            ),
        ];
        for (line, want) in bad {
            let e = rebuild(&[line]).unwrap_err().to_string();
            assert!(e.starts_with(want), "{line}: {e}");
        }
        // Control: an empty journal is an empty conversation.
        assert_eq!(rebuild(&[]).unwrap(), Rebuilt::default());
    }
}
