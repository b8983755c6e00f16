//! A reader for the names in git's index (`.git/index`, versions 2, 3 and 4).
//!
//! Why not run `git ls-files`: git reads the repository's config, and a config can name
//! programs git runs (`core.fsmonitor`, filters). The repository is untrusted input, so
//! Garuda never runs git on it; it reads the one file it needs.
//!
//! Format (git's `Documentation/gitformat-index.txt`): a 12-byte header `DIRC`, version,
//! entry count; then entries: 40 bytes of stat data, the object id (20 bytes, or 32 in a
//! SHA-256 repository), 16 bits of flags, 16 more bits of extended flags in version 3+ when
//! the extended bit is set, then the path. Versions 2 and 3 end the path with NUL and pad the
//! entry to a multiple of 8 bytes; version 4 prefix-compresses the path (a varint of bytes to
//! drop from the previous path, then the rest, NUL-terminated) and has no padding.

use std::collections::HashSet;

/// The paths the index tracks (repository-relative, `/`-separated), and the folders a sparse
/// index records as a whole (each ending with `/`).
#[derive(Debug, Default)]
pub(crate) struct IndexNames {
    pub(crate) files: HashSet<String>,
    pub(crate) sparse_dirs: Vec<String>,
}

impl IndexNames {
    /// True when `path` (repository-relative) is tracked.
    pub(crate) fn tracks(&self, path: &str) -> bool {
        self.files.contains(path)
            || self
                .sparse_dirs
                .iter()
                .any(|d| path.starts_with(d.as_str()))
    }
}

/// Parses an index. `hash_len` is 20 (SHA-1) or 32 (SHA-256).
pub(crate) fn parse_index(data: &[u8], hash_len: usize) -> Result<IndexNames, String> {
    let mut r = Reader { data, pos: 0 };
    if r.take(4)? != b"DIRC" {
        return Err("not a git index (no DIRC signature)".into());
    }
    let version = r.u32()?;
    if !(2..=4).contains(&version) {
        return Err(format!("git index version {version} is not supported"));
    }
    let count = r.u32()?;
    let mut names = IndexNames::default();
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = r.pos;
        r.take(40)?; // ctime, mtime, dev, ino, mode, uid, gid, size
        r.take(hash_len)?;
        let flags = r.u16()?;
        let mut fixed = 40 + hash_len + 2;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err("extended flag in a version 2 index".into());
            }
            r.u16()?;
            fixed += 2;
        }
        let name = if version == 4 {
            let strip = r.varint()?;
            let keep = previous
                .len()
                .checked_sub(usize::try_from(strip).map_err(|_| "bad prefix length")?)
                .ok_or("prefix length longer than the previous path")?;
            let suffix = r.until_nul()?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(suffix);
            name
        } else {
            let name = r.until_nul()?.to_vec();
            // Entry length rounded up to 8 including at least one NUL.
            let len = (fixed + name.len() + 8) & !7;
            let consumed = r.pos - start;
            let pad = len.checked_sub(consumed).ok_or("bad entry padding")?;
            r.take(pad)?;
            name
        };
        let text = String::from_utf8(name.clone())
            .map_err(|_| "a tracked path is not UTF-8".to_string())?;
        if text.ends_with('/') {
            names.sparse_dirs.push(text);
        } else {
            names.files.insert(text);
        }
        previous = name;
    }
    // Extensions: a split index keeps most entries in another file, which this reader does
    // not follow; saying "tracked: no" for those would hide tracked files, so it is an error.
    while r.data.len() - r.pos > hash_len {
        let sig = r.take(4)?;
        let size = r.u32()? as usize;
        if sig == b"link" {
            return Err("split index (core.splitIndex) is not supported".into());
        }
        r.take(size)?;
    }
    Ok(names)
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err("git index is truncated".into()),
        }
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn until_nul(&mut self) -> Result<&'a [u8], String> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or("git index path without NUL")?;
        let s = &rest[..n];
        self.pos += n + 1;
        Ok(s)
    }

    /// git's offset varint (`decode_varint`): big-endian 7-bit groups, each continuation
    /// adding one.
    fn varint(&mut self) -> Result<u64, String> {
        let mut b = self.take(1)?[0];
        let mut val = u64::from(b & 0x7f);
        while b & 0x80 != 0 {
            b = self.take(1)?[0];
            val = val
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .ok_or("varint overflow")?
                | u64::from(b & 0x7f);
        }
        Ok(val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_git::git;

    fn repo_with(version: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        assert!(
            git(t.path(), &["init", "-q"]),
            "git is needed for this test"
        );
        for p in [
            "a.txt",
            "src/lib.rs",
            "src/deep/er/mod.rs",
            "src/deep/er/mod2.rs",
            "target/keep.o",
        ] {
            let f = t.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, p).unwrap();
        }
        // A long name exercises the padding.
        let long = "l".repeat(250);
        std::fs::write(t.path().join(&long), "x").unwrap();
        assert!(git(t.path(), &["add", "-A"]));
        assert!(git(t.path(), &["update-index", "--index-version", version]));
        t
    }

    #[test]
    fn reads_indexes_written_by_git() {
        for version in ["2", "3", "4"] {
            let t = repo_with(version);
            // Version 3 only differs when an entry has extended flags: intent-to-add does.
            if version == "3" {
                std::fs::write(t.path().join("ita.txt"), "i").unwrap();
                assert!(git(t.path(), &["add", "-N", "ita.txt"]));
            }
            let data = std::fs::read(t.path().join(".git/index")).unwrap();
            assert_eq!(
                u32::from_be_bytes([data[4], data[5], data[6], data[7]]).to_string(),
                version
            );
            let names = parse_index(&data, 20).unwrap();
            for p in [
                "a.txt",
                "src/lib.rs",
                "src/deep/er/mod.rs",
                "src/deep/er/mod2.rs",
                "target/keep.o",
            ] {
                assert!(names.tracks(p), "v{version}: {p}");
            }
            assert!(names.tracks(&"l".repeat(250)), "v{version}: long name");
            assert!(!names.tracks("src"), "v{version}");
            assert!(!names.tracks("nope.txt"), "v{version}");
            if version == "3" {
                assert!(names.tracks("ita.txt"));
            }
        }
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(parse_index(b"", 20).is_err());
        assert!(parse_index(b"XXXX\0\0\0\x02\0\0\0\0", 20).is_err());
        assert!(parse_index(b"DIRC\0\0\0\x07\0\0\0\0", 20).is_err());
        assert!(parse_index(b"DIRC\0\0\0\x02\0\0\0\x01", 20).is_err());
        assert!(parse_index(b"DIRC\0\0\0\x02\0\0\0\0", 20)
            .unwrap()
            .files
            .is_empty());
    }

    #[test]
    fn varint_matches_git() {
        // git encodes 128 as 0x80 0x00 and 16511 as 0xff 0x7f.
        for (bytes, want) in [
            (&[0x05u8][..], 5u64),
            (&[0x80, 0x00], 128),
            (&[0xff, 0x7f], 16511),
        ] {
            let mut r = Reader {
                data: bytes,
                pos: 0,
            };
            assert_eq!(r.varint().unwrap(), want);
        }
    }
}
