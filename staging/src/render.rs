//! The human summary and diff of a change list.
//!
//! A diff is shown to decide whether to let text into the project, so it must show what is
//! really there, and a line that looks like Garuda's must be Garuda's. Every name the command
//! chose (paths, link targets, sensitive names, ignored folders, the incomplete reason) is
//! printed through [`garuda_text::visible`]: a newline or carriage return in a file name
//! cannot start a forged line ("The change list is INCOMPLETE…") under a real entry, and
//! control characters, escape sequences and bidirectional or invisible characters ("Trojan
//! Source") are printed as escapes (`\n`, `\e`, `\xNN`, `\u{NNNN}`, a backslash as `\\`).
//! File content in the diff goes through [`garuda_text::visible_lines_bytes`] (newline, tab
//! and backslash as they are), and a file holding real hidden characters says how many.
//!
//! A sensitive file's content (see [`crate::is_sensitive_name`]), old or new, is never
//! printed: the change list goes to a terminal, a scrollback, a CI log or an agent's
//! transcript. It is listed with its size and the start of its SHA-256 instead, before and
//! after, so that a developer can still tell what changed and compare it with a file of
//! their own (`sha256sum`).

use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use garuda_text::{count_hidden_lines, visible, visible_lines_bytes, visible_path};
use similar::TextDiff;

use crate::beneath::{Beneath, Source};
use crate::changes::{Change, ChangeKind, ChangeSet, Guard};
use crate::sensitive::{Digested, HASH_SHOWN};
use crate::session::Session;
use crate::view::ViewEntry;

/// Diff text is cut at about this many characters; the file list is always complete.
pub const DIFF_CHAR_LIMIT: usize = 60_000;
/// A file larger than this is listed but not diffed.
const MAX_DIFF_FILE: u64 = 1024 * 1024;

/// Renders the summary, the diffs, sensitive names, ignored counts and the incomplete reason
/// (see the crate doc). The result ends with a newline.
pub fn render(set: &ChangeSet, session: &Session) -> String {
    let layout = session.layout();
    // The project's old content and old link targets are read beneath the project's held
    // descriptor, never through a link: a command running in direct mode in the same project
    // can swap a listed file, or a folder above it, for a link to a secret between the
    // listing and this display, and Garuda (not sandboxed) would print that secret.
    let project = Beneath::open(layout.project()).ok();
    let old_entry = |rel: &str| project.as_ref().map(|b| b.open_source(rel));
    let sensitive: Vec<&Change> = set.guarded(Guard::Sensitive);
    let is_sensitive = |c: &Change| sensitive.iter().any(|s| s.path == c.path);
    let mut out = String::new();
    let n = set.changes.len();
    let backend = session.backend().name();
    if n == 0 {
        let _ = writeln!(
            out,
            "The command changed no file that can be applied (staging: {backend})."
        );
    } else {
        let files = if n == 1 { "file" } else { "files" };
        let _ = writeln!(out, "The command changed {n} {files} (staging: {backend}):");
    }
    for c in &set.changes {
        let path = visible(&c.path);
        let target = c.link_target.as_deref().map(visible).unwrap_or_default();
        let line = match c.kind {
            ChangeKind::Added => format!("  added     {path}"),
            ChangeKind::Modified => format!("  modified  {path}"),
            ChangeKind::Deleted => format!("  deleted   {path}"),
            ChangeKind::ModeChanged => format!("  mode      {path}"),
            ChangeKind::LinkAdded => format!("  link      {path} -> {target}"),
            ChangeKind::LinkChanged => {
                let old = match old_entry(&c.path) {
                    Some(Ok(Source::Link(t))) => visible_path(&t).into_owned(),
                    _ => String::new(),
                };
                format!("  link      {path} -> {target} (was -> {old})")
            }
            ChangeKind::LinkOutOfRoot => {
                format!(
                    "  REFUSED   {path} -> {target} (a link out of the project: apply is refused)"
                )
            }
        };
        out.push_str(&line);
        if let (Some(b), Some(a)) = (c.mode_before, c.mode_after) {
            if b != a {
                let _ = write!(out, " (mode {b:06o} → {a:06o})");
            }
        }
        if c.binary {
            out.push_str(" (binary file changed)");
        }
        if is_sensitive(c) {
            out.push_str(if c.link_target.is_some() {
                " (sensitive: needs its own yes)"
            } else {
                " (sensitive: content not shown, needs its own yes)"
            });
        }
        if crate::rules::is_garuda_settings_path(&c.path) {
            out.push_str(" (Garuda settings: needs its own question)");
        }
        out.push('\n');
    }

    // The old content of each deleted sensitive file: a file of the change with the same
    // content (a secret renamed to an ordinary name) is not diffed either. Compared by the
    // whole SHA-256, not the shown part.
    let deleted_secrets: Vec<(&str, Digested)> = sensitive
        .iter()
        .filter(|c| c.kind == ChangeKind::Deleted)
        .filter_map(|c| match old_entry(&c.path) {
            Some(Ok(Source::File(f, _))) => Digested::of_file(f).ok().map(|d| (c.path.as_str(), d)),
            _ => None,
        })
        .collect();
    let mut diff = String::new();
    let mut cut = false;
    for c in &set.changes {
        if diff.len() >= DIFF_CHAR_LIMIT {
            cut = true;
            break;
        }
        if c.binary || !matches!(c.kind, ChangeKind::Added | ChangeKind::Modified) {
            continue;
        }
        // A sensitive file is not diffed at all: its section below gives size and hash.
        if is_sensitive(c) {
            continue;
        }
        let staged = match layout.view(&c.path) {
            Ok(ViewEntry::Staged(p, m)) if m.file_type().is_file() => Some((p, m.len())),
            _ => None,
        };
        if let Some((p, len)) = &staged {
            let renamed = deleted_secrets
                .iter()
                .filter(|(_, d)| d.len == *len)
                .find(|(_, d)| Digested::of_path(p).is_ok_and(|n| n.same_content(d)));
            if let Some((secret, d)) = renamed {
                let _ = writeln!(
                    diff,
                    "{}: not shown: the same content as the deleted sensitive file {} ({d})",
                    visible(&c.path),
                    visible(secret)
                );
                continue;
            }
        }
        let new = match staged {
            Some((p, _)) => read_text_counted(&p),
            None => Err("the staged file is gone".to_string()),
        };
        let old = if c.kind == ChangeKind::Modified {
            match old_entry(&c.path) {
                Some(Ok(Source::File(f, _))) => text_counted(f).map(|(text, _)| text),
                // Gone, or a link now: no old content.
                Some(Ok(Source::Link(_) | Source::Missing)) => Ok(String::new()),
                // A link or another kind of entry on the way now: not read.
                Some(Err(e)) => Err(format!(
                    "the project's file is not diffed: {}",
                    visible(&e.to_string())
                )),
                None => Err("the project folder cannot be opened: not diffed".to_string()),
            }
        } else {
            Ok(String::new())
        };
        let path = visible(&c.path);
        match (old, new) {
            (Ok(old), Ok((new, hidden))) => {
                if hidden > 0 {
                    // In content a backslash prints as itself, so a literal `\e` and a real
                    // ESC look alike: say that this file holds real ones.
                    let _ = writeln!(
                        diff,
                        "{path}: the new content holds {hidden} control, bidirectional or invisible {}, shown as escapes (\\e, \\xNN, \\u{{NNNN}})",
                        if hidden == 1 { "character" } else { "characters" }
                    );
                }
                let d = TextDiff::configure()
                    .timeout(Duration::from_secs(2))
                    .diff_lines(old.as_str(), new.as_str());
                let _ = write!(
                    diff,
                    "{}",
                    d.unified_diff()
                        .context_radius(3)
                        .missing_newline_hint(true)
                        .header(&format!("a/{path}"), &format!("b/{path}"))
                );
            }
            (Err(e), _) | (_, Err(e)) => {
                let _ = writeln!(diff, "{path}: {e}");
            }
        }
    }
    if !diff.is_empty() {
        out.push('\n');
        if diff.len() > DIFF_CHAR_LIMIT {
            let mut end = DIFF_CHAR_LIMIT;
            while !diff.is_char_boundary(end) {
                end -= 1;
            }
            diff.truncate(end);
            if !diff.ends_with('\n') {
                diff.push('\n');
            }
            cut = true;
        }
        out.push_str(&diff);
        if cut {
            let _ = writeln!(
                out,
                "[diff cut at {DIFF_CHAR_LIMIT} characters; the file list above is complete]"
            );
        }
    }

    if !set.sensitive.is_empty() || !sensitive.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "Sensitive files changed (secrets: their content is never shown, only its size and SHA-256, the first {HASH_SHOWN} hex digits):"
        );
        for c in &sensitive {
            let old = if c.mode_before.is_some() {
                match old_entry(&c.path) {
                    Some(Ok(source)) => side_of_source(source),
                    Some(Err(e)) => format!("not read ({})", visible(&e.to_string())),
                    None => "not read (the project folder cannot be opened)".to_string(),
                }
            } else {
                "none".to_string()
            };
            let new = match (c.kind, c.link_target.as_deref()) {
                (ChangeKind::Deleted, _) => "none (deleted)".to_string(),
                (_, Some(target)) => format!("a link -> {}", visible(target)),
                _ => match layout.view(&c.path) {
                    Ok(ViewEntry::Staged(p, m)) if m.file_type().is_file() => {
                        match Digested::of_path(&p) {
                            Ok(d) => d.to_string(),
                            Err(e) => format!("not read ({})", visible(&e.to_string())),
                        }
                    }
                    _ => "not read (the staged file is gone)".to_string(),
                },
            };
            let _ = writeln!(out, "  {}: before: {old}; after: {new}", visible(&c.path));
        }
        for s in &set.sensitive {
            if !set.changes.iter().any(|c| &c.path == s) {
                let _ = writeln!(
                    out,
                    "  {} (ignored by git: kept in staging, never applied)",
                    visible(s)
                );
            }
        }
        if !sensitive.is_empty() {
            out.push_str("They are applied only with --apply --apply-sensitive, or after a question of their own on a terminal; never with --apply alone.\n");
        }
    }
    let settings = set.garuda_settings();
    if !settings.is_empty() {
        out.push('\n');
        out.push_str("Garuda's project settings change (they can loosen what later commands may do); applied only after a question of their own, never with --apply alone:\n");
        for c in settings {
            let _ = writeln!(out, "  {}", visible(&c.path));
        }
    }
    if !set.ignored_counts.is_empty() {
        out.push('\n');
        out.push_str("Never applied (ignored by git, or not a file or link); they stay in this session's staging folder only:\n");
        for (k, v) in &set.ignored_counts {
            let _ = writeln!(
                out,
                "  {}: {v} {}",
                visible(k),
                if *v == 1 { "file" } else { "files" }
            );
        }
    }
    if let Some(reason) = &set.incomplete {
        out.push('\n');
        let _ = writeln!(
            out,
            "The change list is INCOMPLETE ({}): it can only be discarded.",
            visible(reason)
        );
    }
    out
}

/// One side (before or after) of a sensitive file, from the project: size and hash, never
/// the bytes.
fn side_of_source(source: Source) -> String {
    match source {
        Source::File(f, _) => match Digested::of_file(f) {
            Ok(d) => d.to_string(),
            Err(e) => format!("not read ({})", visible(&e.to_string())),
        },
        Source::Link(t) => format!("a link -> {}", visible_path(&t)),
        Source::Missing => "none".to_string(),
    }
}

/// Reads a file as text for the diff, with invalid UTF-8 bytes and control characters made
/// visible; also how many characters had to be escaped.
fn read_text_counted(path: &Path) -> Result<(String, usize), String> {
    text_counted(fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?)
}

/// [`read_text_counted`] of a file already open.
fn text_counted(f: fs::File) -> Result<(String, usize), String> {
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_DIFF_FILE {
        return Err(format!("a large file ({len} bytes): not diffed"));
    }
    let mut bytes = Vec::new();
    f.take(MAX_DIFF_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok((
        visible_lines_bytes(&bytes).into_owned(),
        count_hidden_lines(&bytes),
    ))
}
