//! The human summary and diff of a change list.
//!
//! A diff is shown to decide whether to let text into the project, so it must show what is
//! really there: control characters (an ESC sequence can move the cursor and overwrite the
//! lines above, a carriage return can hide the start of a line) and the Unicode characters
//! that reorder or hide text ("Trojan Source" bidirectional overrides, zero-width
//! characters) are printed as escapes, in the diff and in every path and link target.

use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use similar::TextDiff;

use crate::changes::{ChangeKind, ChangeSet};
use crate::sensitive::is_sensitive_path;
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
    let project = layout.project();
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
        let path = escape_text(&c.path);
        let target = c
            .link_target
            .as_deref()
            .map(escape_text)
            .unwrap_or_default();
        let line = match c.kind {
            ChangeKind::Added => format!("  added     {path}"),
            ChangeKind::Modified => format!("  modified  {path}"),
            ChangeKind::Deleted => format!("  deleted   {path}"),
            ChangeKind::ModeChanged => format!("  mode      {path}"),
            ChangeKind::LinkAdded => format!("  link      {path} -> {target}"),
            ChangeKind::LinkChanged => {
                let old = fs::read_link(project.join(&c.path))
                    .map(|t| escape_text(&t.to_string_lossy()))
                    .unwrap_or_default();
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
        if is_sensitive_path(&c.path) {
            out.push_str(" (sensitive)");
        }
        if crate::rules::is_garuda_settings_path(&c.path) {
            out.push_str(" (Garuda settings: needs its own question)");
        }
        out.push('\n');
    }

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
        let new = match layout.view(&c.path) {
            Ok(ViewEntry::Staged(p, m)) if m.file_type().is_file() => read_text(&p),
            _ => Err("the staged file is gone".to_string()),
        };
        let sensitive = is_sensitive_path(&c.path);
        // The old content of a sensitive file is a secret the command could not read; it is
        // not printed. The new content is what the command wrote, so it is shown.
        let old = if c.kind == ChangeKind::Modified && !sensitive {
            match fs::symlink_metadata(project.join(&c.path)) {
                Ok(m) if m.file_type().is_file() => read_text(&project.join(&c.path)),
                _ => Ok(String::new()),
            }
        } else {
            Ok(String::new())
        };
        let path = escape_text(&c.path);
        match (old, new) {
            (Ok(old), Ok(new)) => {
                if sensitive && c.kind == ChangeKind::Modified {
                    let _ = writeln!(
                        diff,
                        "{path}: sensitive file: the old content is not shown; the new content:"
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

    if !set.sensitive.is_empty() {
        out.push('\n');
        out.push_str("Sensitive files changed:\n");
        for s in &set.sensitive {
            let shown = set.changes.iter().any(|c| &c.path == s);
            let _ = writeln!(
                out,
                "  {}{}",
                escape_text(s),
                if shown {
                    ""
                } else {
                    " (ignored by git: kept in staging, never applied)"
                }
            );
        }
    }
    let settings = set.garuda_settings();
    if !settings.is_empty() {
        out.push('\n');
        out.push_str("Garuda's project settings change (they can loosen what later commands may do); applied only after a question of their own, never with --apply alone:\n");
        for c in settings {
            let _ = writeln!(out, "  {}", escape_text(&c.path));
        }
    }
    if !set.ignored_counts.is_empty() {
        out.push('\n');
        out.push_str("Never applied (ignored by git, or not a file or link); they stay in this session's staging folder only:\n");
        for (k, v) in &set.ignored_counts {
            let _ = writeln!(
                out,
                "  {}: {v} {}",
                escape_text(k),
                if *v == 1 { "file" } else { "files" }
            );
        }
    }
    if let Some(reason) = &set.incomplete {
        out.push('\n');
        let _ = writeln!(
            out,
            "The change list is INCOMPLETE ({}): it can only be discarded.",
            escape_text(reason)
        );
    }
    out
}

/// Reads a file as text for the diff, with invalid UTF-8 bytes and control characters made
/// visible.
fn read_text(path: &Path) -> Result<String, String> {
    let f = fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_DIFF_FILE {
        return Err(format!("a large file ({len} bytes): not diffed"));
    }
    let mut bytes = Vec::new();
    f.take(MAX_DIFF_FILE)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    Ok(escape_bytes(&bytes))
}

/// Decodes bytes as UTF-8, printing each invalid byte as `\xHH`, then [`escape_text`]s.
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape_text(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Makes every control character visible except newline and tab: ASCII controls and DEL as
/// `\xHH` (ESC is `\x1b`), other control, bidirectional and invisible characters as
/// `\u{XXXX}`.
pub fn escape_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        let c = ch as u32;
        if ch == '\n' || ch == '\t' {
            out.push(ch);
        } else if c < 0x20 || c == 0x7f {
            let _ = write!(out, "\\x{c:02x}");
        } else if ch.is_control() || is_invisible_or_bidi(c) {
            let _ = write!(out, "\\u{{{c:04x}}}");
        } else {
            out.push(ch);
        }
    }
    out
}

fn is_invisible_or_bidi(c: u32) -> bool {
    matches!(c,
        0x00ad | 0x034f | 0x061c | 0x115f | 0x1160 | 0x17b4 | 0x17b5 | 0x180e
        | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x206f | 0x3164 | 0xfe00..=0xfe0f
        | 0xfeff | 0xffa0 | 0xfff9..=0xfffb | 0xe0000..=0xe007f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_visible() {
        assert_eq!(escape_text("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape_text("x\ry\n\tz"), "x\\x0dy\n\tz");
        assert_eq!(escape_text("del\x7f"), "del\\x7f");
        assert_eq!(escape_text("rtl\u{202e}x"), "rtl\\u{202e}x");
        assert_eq!(escape_text("zw\u{200b}"), "zw\\u{200b}");
        assert_eq!(escape_text("c1\u{9b}"), "c1\\u{009b}");
        assert_eq!(escape_text("héllo ✓"), "héllo ✓");
        assert_eq!(escape_bytes(b"ok\xff\xfe\n"), "ok\\xff\\xfe\n");
    }
}
