//! Where things live, and how a file is cut into lines.
//!
//! ```text
//! <audit_root>/                        0700 (normally ~/.garuda/audit)
//!   <project-name>-<hash16>/           0700, hash16 = SHA-256(canonical project path)[..8] hex
//!     index.jsonl                      0600, append-only, one MACed line per session start/close
//!     <session-id>.jsonl               0600, the session's log
//!     <session-id>.ckpt                0600, its latest checkpoint (atomically replaced)
//! ```

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::AuditError;
use crate::util::{compact_time, hex, now_ms, sha256};

/// The project index's file name.
pub const INDEX_FILE: &str = "index.jsonl";
/// Extension of a session log.
pub const LOG_EXT: &str = "jsonl";
/// Extension of a session checkpoint.
pub const CKPT_EXT: &str = "ckpt";

/// `<project-name>-<hash16>` for a canonical project path.
pub fn project_dir_name(canonical_project: &Path) -> String {
    let hash = sha256(canonical_project.as_os_str().as_bytes());
    let name: String = canonical_project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let name = if name.is_empty() || name.starts_with('.') {
        format!("project{name}")
    } else {
        name
    };
    format!("{name}-{}", hex(&hash[..8]))
}

/// The audit folder of a project: `<audit_root>/<project-name>-<hash16>`. The project root is
/// canonicalised first, so two spellings of one path share a log.
pub fn project_audit_dir(audit_root: &Path, project_root: &Path) -> Result<PathBuf, AuditError> {
    let canonical =
        std::fs::canonicalize(project_root).map_err(|source| AuditError::ProjectRoot {
            path: project_root.to_path_buf(),
            source,
        })?;
    Ok(audit_root.join(project_dir_name(&canonical)))
}

/// Whether a folder name has the `<name>-<16 hex>` shape of a project folder.
pub fn valid_project_dir_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 17
        && b.len() <= 81
        && b[b.len() - 17] == b'-'
        && b[b.len() - 16..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')
}

/// Whether `id` can be a session id: 1 to 64 of `[A-Za-z0-9-]`. Ids appear in file names and
/// checkpoint origins, so nothing else is allowed.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// A new session id: UTC start time (so ids sort by start) and 64 random bits. The agent's
/// session journals use the same form (`garuda sessions`).
pub fn new_session_id() -> Result<String, AuditError> {
    let rnd = crate::fsx::random_bytes::<8>()?;
    Ok(format!("{}-{}", compact_time(now_ms()), hex(&rnd)))
}

/// Log file name of a session.
pub fn log_file_name(session_id: &str) -> String {
    format!("{session_id}.{LOG_EXT}")
}

/// Checkpoint file name of a session.
pub fn ckpt_file_name(session_id: &str) -> String {
    format!("{session_id}.{CKPT_EXT}")
}

/// A line (or torn tail) and its byte offset.
pub(crate) type Located<'a> = (u64, &'a [u8]);

/// The complete lines of a file (each without its newline, with its byte offset), and the
/// torn tail: bytes after the last newline, if any.
pub(crate) fn split_lines(data: &[u8]) -> (Vec<Located<'_>>, Option<Located<'_>>) {
    let mut lines = Vec::with_capacity(data.len() / 256 + 1);
    let mut start = 0usize;
    while let Some(pos) = find_newline(&data[start..]) {
        lines.push((start as u64, &data[start..start + pos]));
        start += pos + 1;
    }
    let torn = (start < data.len()).then(|| (start as u64, &data[start..]));
    (lines, torn)
}

/// Position of the first `\n`, eight bytes at a time (the verifier's hottest loop after
/// hashing).
pub(crate) fn find_newline(s: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = 0x0a0a_0a0a_0a0a_0a0a;
    let mut chunks = s.chunks_exact(8);
    let mut at = 0usize;
    for chunk in chunks.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let x = u64::from_le_bytes(w) ^ NL;
        // The lowest set bit marks the first zero byte of x exactly (borrows only run upward).
        let z = x.wrapping_sub(LO) & !x & HI;
        if z != 0 {
            return Some(at + (z.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&c| c == b'\n')
        .map(|p| at + p)
}

/// Count of complete lines and the SHA-256 of the last one (zeros for none).
pub(crate) fn head_of(data: &[u8]) -> (u64, crate::util::Hash) {
    let (lines, _) = split_lines(data);
    let head = lines
        .last()
        .map_or(crate::util::ZERO_HASH, |(_, l)| sha256(l));
    (lines.len() as u64, head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = project_dir_name(Path::new("/home/dev/my proj"));
        assert!(n.starts_with("my_proj-"), "{n}");
        assert!(valid_project_dir_name(&n));
        assert!(project_dir_name(Path::new("/")).starts_with("project-"));
        assert!(project_dir_name(Path::new("/x/.hidden")).starts_with("project.hidden-"));
        assert!(!valid_project_dir_name("x-0123"));
        assert!(valid_session_id(&new_session_id().unwrap()));
        assert!(!valid_session_id("a/b"));
        assert!(!valid_session_id("a.b"));
    }

    #[test]
    fn newline_search_matches_the_naive_one() {
        let mut data = Vec::new();
        for i in 0..300u32 {
            data.push(if i % 37 == 0 { b'\n' } else { (i % 251) as u8 });
            for start in 0..data.len().min(20) {
                let naive = data[start..].iter().position(|&c| c == b'\n');
                assert_eq!(find_newline(&data[start..]), naive, "{i} {start}");
            }
        }
        assert_eq!(find_newline(&[0x0b, 0x0a]), Some(1));
        assert_eq!(find_newline(&[0x8a, 0x0a, 0, 0, 0, 0, 0, 0, 0x0a]), Some(1));
    }

    #[test]
    fn lines_and_torn_tail() {
        let (l, t) = split_lines(b"a\nbb\nccc");
        assert_eq!(l, vec![(0, &b"a"[..]), (2, &b"bb"[..])]);
        assert_eq!(t, Some((5, &b"ccc"[..])));
        let (l, t) = split_lines(b"");
        assert!(l.is_empty() && t.is_none());
    }
}
