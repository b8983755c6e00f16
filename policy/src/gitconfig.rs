//! A small, bounded, fail-closed reader of git's configuration files.
//!
//! The policy builder reads git configuration only to learn which files git will *run* or
//! *read as configuration* (`core.hooksPath`, `include.path`, `core.fsmonitor`, …, see
//! `gitexec.rs`), so that those that lie in a writable folder can be made read-only. A value
//! that was read wrongly would leave such a file writable, so the reader follows git's own
//! lexical rules (`config.c`, `git_parse_source`) for what it handles and refuses the rest:
//!
//! - a UTF-8 byte order mark at the start; `\r\n` line ends;
//! - comments (`#`, `;`) on their own line or after a value (outside quotes);
//! - section headers `[section]`, `[section "subsection"]` (in the subsection `\x` is `x`),
//!   and the old `[section.subsection]` (lower-cased, as git does); a key may follow the
//!   header on the same line;
//! - `key = value`, `key` alone (a boolean true, no value); section and key names are
//!   compared without case, subsections with case;
//! - values: leading and trailing blanks dropped, inner blanks kept, `"…"` quoting, the
//!   escapes `\\`, `\"`, `\n`, `\t`, `\b`, and a `\` at the end of a line continuing the value
//!   on the next; a NUL byte ends the value (git keeps values as C strings).
//!
//! Anything else (a bad character in a name, an unknown escape, an unterminated quote or
//! header) is an error naming the file and the line, never a guess: git refuses the file too
//! (a unit test compares the reader with `git config --list` on such files). Values stay bytes (git's are), and a file over
//! [`MAX_CONFIG_BYTES`] or that is not a regular file is refused. What the reader does *not*
//! do is interpret: conditions of `includeIf`, the order in which git lets one value override
//! another, or `GIT_CONFIG_*` variables. The caller treats every value it finds as possibly in
//! force, which only ever protects more.

use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::PolicyError;

/// A configuration file larger than this is refused (git's own are a few KiB).
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// One `key = value` of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigEntry {
    /// Section name, lower case (`core`, `includeif`).
    pub(crate) section: String,
    /// Subsection, as written (`"gitdir:~/work/"`); the old dotted form is lower-cased.
    pub(crate) subsection: Option<Vec<u8>>,
    /// Key name, lower case (`hookspath`).
    pub(crate) key: String,
    /// The value; `None` for a key written without `=` (a boolean true).
    pub(crate) value: Option<Vec<u8>>,
    /// 1-based line where the key starts.
    pub(crate) line: usize,
}

/// Why a text is not a configuration file this reader accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// 1-based line.
    pub(crate) line: usize,
    /// What is wrong.
    pub(crate) reason: &'static str,
}

/// Reads and parses the configuration file at `path` (links followed, as git does). `Ok(None)`
/// when there is no file there.
pub(crate) fn read(path: &Path) -> Result<Option<Vec<ConfigEntry>>, PolicyError> {
    let read_error = |source| PolicyError::GitConfigRead {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking: a FIFO planted where a config is expected must not hang the supervisor
    // (it is refused below as not a regular file).
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        // ENOTDIR: a component is a file (`~/.config` is a file), so nothing is there.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(read_error(e)),
    };
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(PolicyError::GitConfigInvalid {
            path: path.to_path_buf(),
            line: 0,
            reason: "not a regular file",
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_CONFIG_BYTES {
        return Err(PolicyError::GitConfigInvalid {
            path: path.to_path_buf(),
            line: 0,
            reason: "larger than 1 MiB",
        });
    }
    parse(&bytes)
        .map(Some)
        .map_err(|e| PolicyError::GitConfigInvalid {
            path: path.to_path_buf(),
            line: e.line,
            reason: e.reason,
        })
}

/// git's `isspace`: space, tab, newline, carriage return.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// A character source with git's rules: `\r\n` reads as `\n`, and the end of the text reads
/// as one last `\n` (with `eof` set).
struct Source<'a> {
    text: &'a [u8],
    pos: usize,
    /// 1-based line of the next character.
    line: usize,
    /// 1-based line of the character last read (a newline belongs to the line it ends).
    last_line: usize,
    eof: bool,
}

impl Source<'_> {
    fn next(&mut self) -> u8 {
        self.last_line = self.line;
        let Some(&c) = self.text.get(self.pos) else {
            self.eof = true;
            return b'\n';
        };
        self.pos += 1;
        let c = if c == b'\r' && self.text.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
            b'\n'
        } else {
            c
        };
        if c == b'\n' {
            self.line += 1;
        }
        c
    }

    fn error(&self, reason: &'static str) -> ParseError {
        ParseError {
            line: self.last_line,
            reason,
        }
    }
}

/// Parses a whole configuration text (see the module doc for what is accepted).
pub(crate) fn parse(text: &[u8]) -> Result<Vec<ConfigEntry>, ParseError> {
    let text = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text);
    let mut src = Source {
        text,
        pos: 0,
        line: 1,
        last_line: 1,
        eof: false,
    };
    let mut entries = Vec::new();
    // (section, subsection) of the last header.
    let mut current: Option<(String, Option<Vec<u8>>)> = None;
    let mut comment = false;
    loop {
        let start_line = src.line;
        let c = src.next();
        if c == b'\n' {
            if src.eof {
                return Ok(entries);
            }
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            current = Some(section_header(&mut src)?);
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(src.error("a key must start with a letter"));
        }
        // git reads a key before any header too (with no section, which no lookup can name).
        let (section, subsection) = current.clone().unwrap_or_default();
        let (key, value) = key_and_value(&mut src, c)?;
        entries.push(ConfigEntry {
            section,
            subsection,
            key,
            value,
            line: start_line,
        });
    }
}

/// After `[`: `name]`, `name "sub"]` or the old `name.sub]`.
fn section_header(src: &mut Source<'_>) -> Result<(String, Option<Vec<u8>>), ParseError> {
    let mut name = String::new();
    loop {
        let c = src.next();
        if src.eof {
            return Err(src.error("a [section header is not closed"));
        }
        if c == b']' {
            break;
        }
        if is_space(c) {
            if c == b'\n' {
                return Err(src.error("a [section header is not closed"));
            }
            let sub = quoted_subsection(src)?;
            return split_name(src, name).map(|(section, _)| (section, Some(sub)));
        }
        if !is_key_char(c) && c != b'.' {
            return Err(src.error("a bad character in a section name"));
        }
        name.push(char::from(c.to_ascii_lowercase()));
    }
    split_name(src, name)
}

/// `core` → (`core`, None); the old `branch.main` → (`branch`, Some(`main`)).
fn split_name(src: &Source<'_>, name: String) -> Result<(String, Option<Vec<u8>>), ParseError> {
    if name.is_empty() {
        return Err(src.error("an empty section name"));
    }
    match name.split_once('.') {
        Some((section, sub)) if !section.is_empty() => {
            Ok((section.to_string(), Some(sub.as_bytes().to_vec())))
        }
        Some(_) => Err(src.error("an empty section name")),
        None => Ok((name, None)),
    }
}

/// After the blank that follows a section name: ` "subsection"]`.
fn quoted_subsection(src: &mut Source<'_>) -> Result<Vec<u8>, ParseError> {
    let mut c = src.next();
    while is_space(c) {
        if c == b'\n' {
            return Err(src.error("a [section header is not closed"));
        }
        c = src.next();
    }
    if c != b'"' {
        return Err(src.error("expected a \"quoted\" subsection after the section name"));
    }
    let mut sub = Vec::new();
    loop {
        let mut c = src.next();
        if c == b'\n' {
            return Err(src.error("a subsection is not closed"));
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = src.next();
            if c == b'\n' {
                return Err(src.error("a subsection is not closed"));
            }
        }
        sub.push(c);
    }
    if src.next() != b']' {
        return Err(src.error("expected ] after the subsection"));
    }
    Ok(sub)
}

/// A key whose first letter is `first`, then `= value`, or nothing (a boolean).
fn key_and_value(src: &mut Source<'_>, first: u8) -> Result<(String, Option<Vec<u8>>), ParseError> {
    let mut key = String::from(char::from(first.to_ascii_lowercase()));
    let mut c;
    loop {
        c = src.next();
        if src.eof || !is_key_char(c) {
            break;
        }
        key.push(char::from(c.to_ascii_lowercase()));
    }
    while c == b' ' || c == b'\t' {
        c = src.next();
    }
    if c == b'\n' {
        return Ok((key, None));
    }
    if c != b'=' {
        return Err(src.error("expected = after the key"));
    }
    value(src).map(|v| (key, Some(v)))
}

/// A value after `=`, up to the end of its (possibly continued) line.
fn value(src: &mut Source<'_>) -> Result<Vec<u8>, ParseError> {
    let mut out = Vec::new();
    let mut quote = false;
    let mut comment = false;
    // Where trailing blanks (outside quotes) began; 0 when none are pending.
    let mut trim_len = 0;
    loop {
        let c = src.next();
        if c == b'\n' {
            if quote {
                return Err(src.error("a quoted value is not closed at the end of the line"));
            }
            if trim_len > 0 {
                out.truncate(trim_len);
            }
            // git keeps a value as a C string: whatever follows a NUL byte is not part of what
            // it runs or reads (`sh tools/x.sh<NUL>junk` runs `sh tools/x.sh`).
            if let Some(nul) = out.iter().position(|b| *b == 0) {
                out.truncate(nul);
            }
            return Ok(out);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim_len == 0 {
                trim_len = out.len();
            }
            if !out.is_empty() {
                out.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim_len = 0;
        if c == b'\\' {
            let e = src.next();
            let escaped = match e {
                // A continuation line (also at the very end of the text).
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                b'\\' | b'"' => e,
                _ => return Err(src.error("an unknown \\ escape in a value")),
            };
            out.push(escaped);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> ConfigEntry {
        let mut all = parse(text.as_bytes()).unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    fn value_of(text: &str) -> Option<String> {
        one(text).value.map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn sections_keys_and_values() {
        let all = parse(
            b"\xef\xbb\xbf# comment\n[Core]\n\tHooksPath = .husky/_ ; trailing\n\
              [includeIf \"gitdir:~/Work/\"]\n  path = ../x.inc\n[branch.Main] remote=origin\n\
              [core]\n\tbare\n",
        )
        .unwrap();
        type Row<'a> = (&'a str, Option<&'a [u8]>, &'a str, Option<&'a [u8]>, usize);
        let got: Vec<Row<'_>> = all
            .iter()
            .map(|e| {
                (
                    e.section.as_str(),
                    e.subsection.as_deref(),
                    e.key.as_str(),
                    e.value.as_deref(),
                    e.line,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("core", None, "hookspath", Some(&b".husky/_"[..]), 3),
                (
                    "includeif",
                    Some(&b"gitdir:~/Work/"[..]),
                    "path",
                    Some(&b"../x.inc"[..]),
                    5
                ),
                (
                    "branch",
                    Some(&b"main"[..]),
                    "remote",
                    Some(&b"origin"[..]),
                    6
                ),
                ("core", None, "bare", None, 8),
            ]
        );
    }

    #[test]
    fn values_follow_gits_rules() {
        for (text, want) in [
            ("[a]k = plain", "plain"),
            ("[a]k =   inner  blanks   kept  ", "inner  blanks   kept"),
            (
                "[a]k = \"quoted ; not a comment\" # comment",
                "quoted ; not a comment",
            ),
            ("[a]k = \" lead\"", " lead"),
            ("[a]k = a\\\"b\\\\c\\td\\ne\\bf", "a\"b\\c\td\ne\u{8}f"),
            ("[a]k = one \\\n two", "one  two"),
            ("[a]k = win\r\n", "win"),
            ("[a]k = x\"y\"z", "xyz"),
            ("[a]k =", ""),
            ("[a]k = end\\", "end"),
        ] {
            assert_eq!(value_of(text).as_deref(), Some(want), "{text:?}");
        }
        assert_eq!(value_of("[a]\nk\n"), None);
        assert_eq!(
            one("[s \"Sub \\\"q\\\" \\x\"]k=v").subsection.unwrap(),
            b"Sub \"q\" x"
        );
    }

    #[test]
    fn malformed_files_are_errors_with_their_line() {
        for (text, line) in [
            ("[core]\n1k = v", 2),
            ("[core\nk = v", 1),
            ("[core \"x]\nk=v", 1),
            ("[core x]", 1),
            ("[co re]", 1),
            ("[]\n", 1),
            ("[.x]\n", 1),
            ("[a]\nk v", 2),
            ("[a]\nk # c", 2),
            ("[a]\n\nk = \"open\n", 3),
            ("[a]\nk = bad\\q", 2),
            ("[a \"x\"y]", 1),
            ("[a]\n\u{e9}k = v", 2),
        ] {
            let e = parse(text.as_bytes()).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e:?}");
        }
    }

    #[test]
    fn values_are_bytes() {
        let e = one("[a]k = \u{e9}\u{1F600}");
        assert_eq!(e.value.unwrap(), "\u{e9}\u{1F600}".as_bytes());
        let e = parse(b"[a]k = \xff\xfe").unwrap();
        assert_eq!(e[0].value.as_deref(), Some(&b"\xff\xfe"[..]));
    }

    #[test]
    fn reads_only_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(&dir.path().join("none")).unwrap().is_none());
        assert!(matches!(
            read(dir.path()),
            Err(PolicyError::GitConfigInvalid { .. }) | Err(PolicyError::GitConfigRead { .. })
        ));
        let big = dir.path().join("big");
        fs::write(&big, vec![b'#'; (MAX_CONFIG_BYTES + 1) as usize]).unwrap();
        assert!(matches!(
            read(&big),
            Err(PolicyError::GitConfigInvalid {
                reason: "larger than 1 MiB",
                ..
            })
        ));
        let bad = dir.path().join("bad");
        fs::write(&bad, "[core]\n\thooksPath = \"x\n").unwrap();
        let e = read(&bad).unwrap_err().to_string();
        assert!(e.contains("bad:2:"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn values_written_with_escapes_read_back(value in "[ -~\t]{0,40}") {
            // What `git config` writes: the whole value quoted, `\` and `"` escaped, tabs as `\t`.
            let escaped: String = value
                .chars()
                .map(|c| match c {
                    '\\' => "\\\\".to_string(),
                    '"' => "\\\"".to_string(),
                    '\t' => "\\t".to_string(),
                    c => c.to_string(),
                })
                .collect();
            let text = format!("[s \"x\"]\n\tk = \"{escaped}\"\n");
            let entries = parse(text.as_bytes()).unwrap();
            proptest::prop_assert_eq!(entries[0].value.as_deref(), Some(value.as_bytes()));
        }
    }

    /// The reader and git agree, entry for entry, on valid files, and both refuse the invalid
    /// ones (`git config --file F --list --null`).
    #[test]
    fn agrees_with_git() {
        let texts: &[&[u8]] = &[
            b"[core]\n\thooksPath = .husky/_ ; c\n[Core]HooksPath=x\n",
            b"\xef\xbb\xbf[includeIf \"gitdir:~/W/\"]\r\n  path = \"a \\\"b\\\" ; c\" # d\n",
            b"[a.B]\n\tk = one \\\n two\n[c]\n\tbool\n\tempty =\n",
            b"[s \"sub\\\\x\\q\"] k = \\t\\n\\b end  \n",
            b"[x]\nk = \"  spaced  \"  tail  \n",
            b"[x]\nk = \xff\xfe\n",
            b"k = v\n",
            b"[x]\nk = \"open\n",
            b"[x]\nk = bad\\q\n",
            b"[x y]\n",
            b"[x]\n1k = v\n",
            b"[x]\nk # c\n",
            b"[x]k=v;c\n[x \t \"tab\"]k\n",
            b"[x]\rk = a\r\n",
            b"[x]\nk = \"a\\\nb\"\n",
            b"[x \"a\"b]\n",
            b"[x]\n  k  =  \"\"\n[y]\n\tk-2 = x\n",
            b"k\n[x]\n",
            b"[x.y.Z]\nK = v\n",
            b"[x] k = \"#not\";yes\n",
            b"[x]\nk = sh tools/x.sh\0junk\n[y]\nk = \0\n",
        ];
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        for text in texts {
            fs::write(&file, text).unwrap();
            let out = std::process::Command::new("git")
                .args(["config", "--file"])
                .arg(&file)
                .args(["--list", "--null"])
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", dir.path())
                .output();
            let Ok(out) = out else {
                assert!(
                    std::env::var("GARUDA_ALLOW_NO_GIT").is_ok_and(|v| v == "1"),
                    "git is needed to compare with (GARUDA_ALLOW_NO_GIT=1 accepts NOT TESTED)"
                );
                eprintln!("NOT TESTED: git is not installed");
                return;
            };
            let ours = parse(text);
            if !out.status.success() {
                assert!(ours.is_err(), "git refused {text:?} but we read {ours:?}");
                continue;
            }
            let theirs: Vec<(Vec<u8>, Option<Vec<u8>>)> = out
                .stdout
                .split(|b| *b == 0)
                .filter(|e| !e.is_empty())
                .map(|e| match e.iter().position(|b| *b == b'\n') {
                    Some(i) => (e[..i].to_vec(), Some(e[i + 1..].to_vec())),
                    None => (e.to_vec(), None),
                })
                .collect();
            let ours: Vec<(Vec<u8>, Option<Vec<u8>>)> = ours
                .unwrap_or_else(|e| panic!("git read {text:?} but we refused it: {e:?}"))
                .into_iter()
                .map(|e| {
                    let mut name = e.section.into_bytes();
                    if let Some(sub) = e.subsection {
                        name.push(b'.');
                        name.extend(sub);
                    }
                    if !name.is_empty() {
                        name.push(b'.');
                    }
                    name.extend(e.key.into_bytes());
                    (name, e.value)
                })
                .collect();
            assert_eq!(ours, theirs, "{text:?}");
        }
    }

    #[test]
    fn parsing_random_bytes_never_panics() {
        // A cheap stand-in for a fuzzer: every prefix of a config full of edge cases.
        let text =
            b"\xef\xbb\xbf[a \"b\\\"c\"]\r\n k = \"v\\\n;w\" # x\n[d.e]f\n[g]h=\\t\\b\\n\\\\\xff\n";
        for end in 0..=text.len() {
            let _ = parse(&text[..end]);
        }
    }
}
