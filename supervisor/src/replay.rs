//! `garuda -p --replay ID|FILE|DIR`: a recorded session played again, with the model's
//! recorded responses and real tool execution through the supervisor (no API call).
//!
//! The recorded journal's assistant messages become the script of a model server on this
//! machine's loopback (the same `garuda-modelserver` the tests use: a real HTTP server that
//! streams real SSE), and the session runs exactly as `garuda -p` runs one: the confined
//! agent, the proxy (allowing only that server), the broker, the executor, the audit log, a
//! journal of its own. Afterwards every tool result of the new run is compared with the
//! recorded one, in order: `matches`, or each difference (exit 1).
//!
//! A directory (`examples/fix-the-test/`) holds `session.jsonl` and `project/`: the project is
//! copied to a fresh folder first (a `git init`ed copy, `/var/tmp/garuda-replay-…`, mode 0700,
//! kept so the result can be looked at; its path is printed), so the example replays the same
//! way every time and the shipped files never change.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use garuda_agent::model::{Block, Message, Role};
use garuda_agent::turn::journal::rebuild;
use garuda_modelserver::{Dialect, ModelServer, Part, Scripted};
use serde_json::Value;

/// A session to replay.
pub struct Recorded {
    /// The first user prompt.
    pub prompt: String,
    /// The model's responses, in order.
    pub script: Vec<Scripted>,
    /// The tool results, in order: (tool name and input, shown; result text; is_error).
    pub results: Vec<(String, String, bool)>,
    /// The settings the session ran with (the supervisor's record), if recorded.
    pub settings: Option<Value>,
}

/// Where a replay comes from.
pub enum Source {
    /// A session of the project, by id.
    Session(String),
    /// A journal file.
    File(PathBuf),
    /// An example: `session.jsonl` and `project/` in this folder.
    Example(PathBuf),
}

impl Source {
    /// `ID`, `FILE` or `DIR`, as given.
    pub fn parse(arg: &str) -> Source {
        let path = Path::new(arg);
        if path.is_dir() {
            Source::Example(path.to_path_buf())
        } else if path.is_file() || arg.contains('/') || arg.ends_with(".jsonl") {
            Source::File(path.to_path_buf())
        } else {
            Source::Session(arg.to_string())
        }
    }
}

/// The supervisor's own journal records (`{"type": "supervisor", …}`): what the agent's
/// rebuild does not know.
pub fn is_supervisor_record(line: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .ok()
        .is_some_and(|v| v.get("type").and_then(Value::as_str) == Some("supervisor"))
}

/// Reads a journal's lines into what a replay needs.
pub fn parse(lines: &[String]) -> Result<Recorded> {
    let settings = lines
        .iter()
        .filter(|l| is_supervisor_record(l))
        .find_map(|l| serde_json::from_str::<Value>(l).ok());
    let agent_lines: Vec<&str> = lines
        .iter()
        .filter(|l| !is_supervisor_record(l))
        .map(String::as_str)
        .collect();
    let rebuilt =
        rebuild(&agent_lines).map_err(|e| anyhow!("the journal does not rebuild: {e}"))?;
    let messages: &[Message] = &rebuilt.messages;
    let prompt = messages
        .iter()
        .find(|m| m.role == Role::User)
        .and_then(|m| {
            m.content.iter().find_map(|b| match b {
                Block::Text { text } => Some(text.clone()),
                _ => None,
            })
        })
        .ok_or_else(|| anyhow!("the journal has no user prompt"))?;
    let mut script = Vec::new();
    let mut calls = std::collections::HashMap::new();
    let mut results = Vec::new();
    for message in messages {
        match message.role {
            Role::Assistant => {
                let parts: Vec<Part> = message
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text { text } => Some(Part::Text { text: text.clone() }),
                        Block::ToolUse { id, name, input } => {
                            calls.insert(id.clone(), format!("{name} {input}"));
                            Some(Part::ToolUse {
                                id: id.clone(),
                                name: name.clone(),
                                input: input.clone(),
                            })
                        }
                        Block::ToolResult { .. } => None,
                    })
                    .collect();
                script.push(Scripted::reply(parts).with_usage(1, 1));
            }
            Role::User => {
                for b in &message.content {
                    if let Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } = b
                    {
                        let call = calls.get(tool_use_id).cloned().unwrap_or_default();
                        results.push((call, content.clone(), *is_error));
                    }
                }
            }
        }
    }
    if script.is_empty() {
        bail!("the journal has no model response to play");
    }
    Ok(Recorded {
        prompt,
        script,
        results,
        settings,
    })
}

/// Starts the model server that plays `recorded`'s responses.
pub fn serve(recorded: &Recorded) -> Result<ModelServer> {
    ModelServer::start(Dialect::Anthropic, recorded.script.clone())
        .context("starting the replay's model server on loopback")
}

/// Compares the tool results of a replay with the recording; the differences, as lines.
pub fn compare(recorded: &Recorded, replayed: &Recorded) -> Vec<String> {
    let mut out = Vec::new();
    let n = recorded.results.len().max(replayed.results.len());
    for i in 0..n {
        match (recorded.results.get(i), replayed.results.get(i)) {
            (Some(a), Some(b)) if a.1 == b.1 && a.2 == b.2 => {}
            (Some(a), Some(b)) => out.push(format!(
                "tool call {} ({}): recorded {}{:?}, replayed {}{:?}",
                i + 1,
                garuda_text::visible(&cut(&a.0, 120)),
                if a.2 { "error " } else { "" },
                cut(&a.1, 400),
                if b.2 { "error " } else { "" },
                cut(&b.1, 400),
            )),
            (Some(a), None) => out.push(format!(
                "tool call {} ({}): recorded, not made in the replay",
                i + 1,
                garuda_text::visible(&cut(&a.0, 120))
            )),
            (None, Some(b)) => out.push(format!(
                "tool call {} ({}): made in the replay, not recorded",
                i + 1,
                garuda_text::visible(&cut(&b.0, 120))
            )),
            (None, None) => {}
        }
    }
    out
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut s: String = text.chars().take(max).collect();
    s.push('…');
    s
}

/// Copies an example's `project/` to a fresh folder and makes it a git repository (so that it
/// is its own project); returns the folder.
pub fn fresh_copy(example: &Path) -> Result<PathBuf> {
    let source = example.join("project");
    // Not followed: a link at `project/` would copy whatever it leads to (a folder of secrets)
    // into the replay's project. Links inside it are skipped by `copy_tree`.
    let meta = std::fs::symlink_metadata(&source).with_context(|| {
        format!(
            "{} has no project/ folder",
            garuda_text::visible_path(example)
        )
    })?;
    if !meta.is_dir() {
        bail!(
            "{}: not a folder (a link is not followed): an example's project is a folder",
            garuda_text::visible_path(&source)
        );
    }
    // The example's name, as a plain word: a newline or an escape in a folder's name must not
    // reach the printed path.
    let name: String = example
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = if name.is_empty() {
        "example".into()
    } else {
        name
    };
    // A new folder of this user's only, under the shared /var/tmp: a planted folder or link at
    // a name is never used (`fresh_dir`).
    let base = Path::new("/var/tmp");
    let dest = crate::proxy::socket_dir::fresh_dir(base, &format!("garuda-replay-{name}"))
        .with_context(|| format!("making the replay's folder in {}", base.display()))?;
    copy_tree(&source, &dest)?;
    // `git init` needs only where programs and the user's git settings are: no other variable
    // of the supervisor (a provider's key among them) reaches this child either.
    let mut git = std::process::Command::new("git");
    git.args(["init", "-q"]).current_dir(&dest).env_clear();
    for name in ["PATH", "HOME", "XDG_CONFIG_HOME"] {
        if let Some(value) = std::env::var_os(name) {
            git.env(name, value);
        }
    }
    let status = git.status();
    if !status.is_ok_and(|s| s.success()) {
        // Without git the copy is still a project (its own folder); say so.
        eprintln!(
            "garuda: git init failed in {}; the folder is the project",
            dest.display()
        );
    }
    Ok(dest)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
        // Links and anything else are not part of an example.
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// An example whose `project` is a link is refused, not followed; the same example with a
    /// folder there (the control) is copied, files only, into a fresh 0700 folder whose name
    /// keeps no newline or escape of the example's name.
    #[test]
    fn an_examples_project_link_is_refused_and_its_name_made_plain() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        let secrets = base.path().join("secrets");
        std::fs::create_dir(&secrets).unwrap();
        std::fs::write(secrets.join("id_ed25519"), "private").unwrap();
        let example = base.path().join("ex\nample\u{1b}[2J");
        std::fs::create_dir(&example).unwrap();
        std::os::unix::fs::symlink(&secrets, example.join("project")).unwrap();
        let e = fresh_copy(&example).unwrap_err().to_string();
        assert!(e.contains("not a folder (a link is not followed)"), "{e}");
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e:?}");

        std::fs::remove_file(example.join("project")).unwrap();
        std::fs::create_dir(example.join("project")).unwrap();
        std::fs::write(example.join("project/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(&secrets, example.join("project/linked")).unwrap();
        let copy = fresh_copy(&example).unwrap();
        let name = copy.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.starts_with("garuda-replay-ex_ample__2J-"), "{name:?}");
        let meta = std::fs::metadata(&copy).unwrap();
        assert_eq!(meta.permissions().mode() & 0o077, 0);
        assert_eq!(meta.uid(), crate::sys::current_uid());
        assert_eq!(std::fs::read_to_string(copy.join("a.txt")).unwrap(), "a");
        assert!(!copy.join("linked").exists());
        std::fs::remove_dir_all(&copy).unwrap();
    }
}
