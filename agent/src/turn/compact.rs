//! Compaction's pure parts: which messages are old, trimming their tool outputs, and the
//! request that asks the model to summarise them. The loop (`agent_loop.rs`) decides when,
//! reserves the summary call in the budget and journals each change.
//!
//! The last [`crate::turn::LoopConfig::keep_steps`] steps (a step: one model response and the
//! tool results that answer it) are always kept whole, so the model still sees exactly what
//! it is in the middle of. Old tool outputs go first because they are most of a long
//! conversation and the model rarely needs them verbatim again (it can read the file anew).

use crate::model::{Block, Message, ModelRequest, Role};
use crate::turn::journal::{is_trim_marker, trim_marker};
use crate::turn::tools::cap;

/// Tool outputs of at most this many characters are not worth trimming.
pub const TRIM_MIN_CHARS: usize = 200;

/// Longest tool output quoted in the summary request's transcript.
const TRANSCRIPT_RESULT_CAP: usize = 4_000;

/// The system prompt of the summary call.
pub const SUMMARY_SYSTEM: &str = "You summarise the earlier part of a coding agent's \
conversation so that the agent can continue with less context. Keep what the agent still \
needs: the user's requests in their own words, decisions and their reasons, the files read or \
changed and what matters in them, commands run and their results, errors met, and what \
remains to do. Write plain text with no preamble.";

/// What the summary message starts with, in the conversation.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation, written by \
compaction. The last steps follow in full.]\n";

/// The index of the first message kept whole: the response that starts the last
/// `keep_steps` steps. 0 when there are no more steps than that (nothing is old).
pub fn keep_from(messages: &[Message], keep_steps: usize) -> usize {
    let responses: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    if keep_steps == 0 {
        return messages.len();
    }
    if responses.len() <= keep_steps {
        return 0;
    }
    responses[responses.len() - keep_steps]
}

/// Replaces every tool output longer than `min_chars` in `messages[..before]` by its trim
/// marker; returns `[message, block]` of each.
pub fn trim_old_outputs(
    messages: &mut [Message],
    before: usize,
    min_chars: usize,
) -> Vec<[usize; 2]> {
    let mut trimmed = Vec::new();
    for (m, message) in messages.iter_mut().enumerate().take(before) {
        for (b, block) in message.content.iter_mut().enumerate() {
            if let Block::ToolResult { content, .. } = block {
                if content.chars().count() > min_chars && !is_trim_marker(content) {
                    *content = trim_marker(content);
                    trimmed.push([m, b]);
                }
            }
        }
    }
    trimmed
}

/// The older messages as a plain transcript.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        for block in &m.content {
            match block {
                Block::Text { text } => out.push_str(&format!("{who}: {text}\n\n")),
                Block::ToolUse { name, input, .. } => {
                    out.push_str(&format!("{who} called {name} with {input}\n\n"));
                }
                Block::ToolResult {
                    content, is_error, ..
                } => {
                    let kind = if *is_error { "error" } else { "result" };
                    out.push_str(&format!(
                        "Tool {kind}: {}\n\n",
                        cap(content, TRANSCRIPT_RESULT_CAP)
                    ));
                }
            }
        }
    }
    out
}

/// The request that asks for a summary of `older`: no tools, one user message.
pub fn summary_request(older: &[Message], max_tokens: u32) -> ModelRequest {
    let text = format!(
        "Summarise this conversation so far:\n\n{}\nWrite the summary now.",
        transcript(older)
    );
    ModelRequest {
        system: SUMMARY_SYSTEM.into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![Block::Text { text }],
        }],
        tools: Vec::new(),
        max_tokens,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn step(i: usize, output: &str) -> [Message; 2] {
        [
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolUse {
                    id: format!("t{i}"),
                    name: "read_file".into(),
                    input: serde_json::json!({"path": "a"}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![Block::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: output.into(),
                    is_error: false,
                }],
            },
        ]
    }

    #[test]
    fn the_last_steps_are_kept_and_only_long_old_outputs_trimmed() {
        let mut messages = vec![Message {
            role: Role::User,
            content: vec![Block::Text { text: "go".into() }],
        }];
        let long = "x".repeat(1_000);
        for i in 0..6 {
            messages.extend(step(i, if i == 1 { "short" } else { &long }));
        }
        assert_eq!(keep_from(&messages, 4), 5, "steps 2..6 start at message 5");
        assert_eq!(keep_from(&messages[..9], 4), 0, "4 steps: nothing is old");
        let trimmed = trim_old_outputs(&mut messages, 5, TRIM_MIN_CHARS);
        assert_eq!(trimmed, [[2, 0]], "step 0's output; step 1's is short");
        // The kept steps are untouched, and a second pass trims nothing more.
        for m in &messages[5..] {
            if let Block::ToolResult { content, .. } = &m.content[0] {
                assert_eq!(content, &long);
            }
        }
        assert!(trim_old_outputs(&mut messages, 5, TRIM_MIN_CHARS).is_empty());
        let r = summary_request(&messages[..5], 1_000);
        assert!(r.tools.is_empty());
        let Block::Text { text } = &r.messages[0].content[0] else {
            panic!()
        };
        assert!(text.contains("User: go"));
        assert!(text.contains("Tool result: short"));
        assert!(text.contains("[old tool output trimmed by compaction: 1000 characters]"));
    }
}
