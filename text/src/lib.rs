//! Printing text that came from a sandboxed command: one rule, in one place.
//!
//! # The threat
//!
//! Garuda prints things a sandboxed command chose: the names of the files it changed (the
//! staged change list and its diff headers), link targets, the `Host` header it sent to the
//! proxy (the `blocked:` line), the argument vector it was started with (the audit log's
//! display, error messages), and findings that quote a tampered audit file. Each of those
//! lines sits next to lines that Garuda writes itself and that the developer trusts: "The
//! change list is INCOMPLETE", "applied", "audit log: VERIFIED". Printed raw, such a value can:
//!
//! - **forge lines.** A file name may contain a newline (or a carriage return, or U+2028 /
//!   U+2029, which some terminals and editors break lines at). `x\nThe change list is
//!   INCOMPLETE…` under a real entry prints a second line that reads as Garuda's own; a `\r`
//!   returns to the start of the line and overwrites what Garuda printed before it.
//! - **drive the terminal.** ESC (`\x1b`) and the 8-bit C1 controls (U+009B is CSI, U+009D
//!   OSC) start escape sequences: move the cursor up and erase the lines above (the real
//!   change list), hide text (`ESC[8m`), change the window title, write the clipboard (OSC 52)
//!   or plant a hyperlink (OSC 8). BEL, backspace, DEL and the other C0 controls edit or hide
//!   what is shown.
//! - **reorder or hide text** ("Trojan Source", CVE-2021-42574). Bidirectional overrides and
//!   isolates (U+202A–U+202E, U+2066–U+2069) and marks (U+200E, U+200F, U+061C) make a name
//!   display in another order than its bytes: `evil\u{202e}txt.exe` shows as `evilexe.txt`.
//!   Zero-width and other invisible characters (U+200B, U+FEFF, tags, variation selectors…)
//!   make two different names look the same.
//!
//! So every value that came from a command is printed through this crate, and each of those
//! characters becomes a visible escape.
//!
//! # The escapes
//!
//! | what | printed as |
//! |---|---|
//! | `\` itself | `\\` |
//! | newline, carriage return, tab, ESC | `\n`, `\r`, `\t`, `\e` |
//! | other C0 controls (U+0000–U+001F) and DEL (U+007F) | `\xNN` (`\x07` for BEL) |
//! | a byte that is not valid UTF-8 (in an `OsStr`, a path, raw bytes) | `\xNN` (always ≥ `\x80`) |
//! | C1 controls (U+0080–U+009F), bidirectional controls, line and paragraph separators, zero-width and other invisible format characters, tags, variation selectors (see [`is_hidden`]) | `\u{NNNN}` (at least four lower-case hex digits) |
//! | everything else | itself |
//!
//! The escaped form is unambiguous and can be decoded back: a backslash in the value is
//! doubled, so the name `a\nb` (four characters, literally) prints as `a\\nb` while a name
//! with a real newline prints as `a\nb`. `\xNN` below `\x80` is the control character with
//! that code, which is also its one UTF-8 byte; `\xNN` from `\x80` up is a raw byte that is
//! not UTF-8 (a character from U+0080 up is always a `\u{…}` or itself).
//!
//! [`visible`] (and [`visible_bytes`], [`visible_os`], [`visible_path`], [`Visible`]) is for
//! one-line values: names, hosts, arguments, messages. Two variants share the same table:
//!
//! - [`visible_lines`] / [`visible_lines_bytes`] for multi-line content (a diff of a file):
//!   newline and tab stay as they are, and so does a backslash, so source code stays
//!   readable. A literal `\e` in a file and a real ESC then print alike; a caller that needs
//!   the difference counts the real ones with [`count_hidden_lines`] and says so (the staged
//!   diff does).
//! - [`visible_json`] for text that is already JSON: every hidden character becomes a JSON
//!   `\uXXXX` escape (surrogate pairs above U+FFFF), so the output is still valid JSON with
//!   the same value and contains no raw control, bidirectional or invisible character but
//!   the newlines and tabs a pretty-printed document has between its tokens (inside a string
//!   a JSON serializer always escapes those).
//!
//! # What this does not do
//!
//! Characters that merely look alike (Cyrillic `а` and Latin `a`) print as themselves. The
//! command's own output, which a streaming command writes to the terminal directly, is the
//! command's and is not filtered (the threat model's N9).

#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::path::Path;

/// Which of the three renderings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One line: everything hidden escaped, backslash doubled.
    Line,
    /// Multi-line content: newline, tab and backslash as they are.
    Lines,
    /// Inside JSON text: hidden characters as JSON `\uXXXX`.
    Json,
}

/// True for a character that must never reach a terminal raw: the C0 controls (newline and
/// tab included), DEL, the C1 controls, the bidirectional controls and marks, the line and
/// paragraph separators, and the characters that display as nothing (zero-width characters,
/// fillers, format characters, tags, variation selectors).
#[must_use]
pub fn is_hidden(c: char) -> bool {
    let c = u32::from(c);
    c < 0x20 || c == 0x7f || is_invisible(c)
}

/// The non-ASCII part of [`is_hidden`]: Unicode's control (Cc) and format (Cf) characters,
/// the separators Zl and Zp, and the default-ignorable characters that render as nothing.
fn is_invisible(c: u32) -> bool {
    matches!(c,
        0x80..=0x9f             // C1 controls: U+009B is CSI, U+009D OSC, U+0085 NEL
        | 0xad                  // soft hyphen
        | 0x034f                // combining grapheme joiner
        | 0x0600..=0x0605 | 0x06dd | 0x070f | 0x0890..=0x0891 | 0x08e2 // Arabic, Syriac format
        | 0x061c                // Arabic letter mark (bidi)
        | 0x115f | 0x1160 | 0x3164 | 0xffa0 // Hangul fillers
        | 0x17b4 | 0x17b5       // Khmer inherent vowels
        | 0x180b..=0x180f       // Mongolian variation selectors, vowel separator
        | 0x200b..=0x200f       // zero-width space, ZWNJ, ZWJ, LRM, RLM
        | 0x2028..=0x202e       // line and paragraph separators; LRE RLE PDF LRO RLO
        | 0x2060..=0x206f       // word joiner, invisible operators; LRI RLI FSI PDI; deprecated
        | 0xfe00..=0xfe0f       // variation selectors
        | 0xfeff                // zero-width no-break space (BOM)
        | 0xfff9..=0xfffb       // interlinear annotation
        | 0x110bd | 0x110cd     // Kaithi number signs
        | 0x13430..=0x1343f     // Egyptian hieroglyph format controls
        | 0x1bca0..=0x1bca3     // shorthand format controls
        | 0x1d173..=0x1d17a     // musical symbol format controls
        | 0xe0000..=0xe0fff // tags and variation selectors supplement
    )
}

/// Whether `c` is printed other than as itself in `mode`.
fn escaped(c: char, mode: Mode) -> bool {
    match mode {
        Mode::Line => c == '\\' || is_hidden(c),
        Mode::Lines => c != '\n' && c != '\t' && is_hidden(c),
        // Newline and tab are JSON's whitespace between tokens (a pretty-printed document);
        // inside a string a serializer always escapes them.
        Mode::Json => c != '\n' && c != '\t' && is_hidden(c),
    }
}

/// Writes `s` in `mode`: the one escaping loop every function of this crate uses.
fn write_escaped<W: fmt::Write>(out: &mut W, s: &str, mode: Mode) -> fmt::Result {
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if !escaped(c, mode) {
            continue;
        }
        out.write_str(&s[start..i])?;
        start = i + c.len_utf8();
        if mode == Mode::Json {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(out, "\\u{unit:04x}")?;
            }
            continue;
        }
        match c {
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            '\x1b' => out.write_str("\\e")?,
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c))?,
            c => write!(out, "\\u{{{:04x}}}", u32::from(c))?,
        }
    }
    out.write_str(&s[start..])
}

fn render(s: &str, mode: Mode) -> Cow<'_, str> {
    if !s.chars().any(|c| escaped(c, mode)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    // Writing to a String cannot fail.
    let _ = write_escaped(&mut out, s, mode);
    Cow::Owned(out)
}

fn render_bytes(bytes: &[u8], mode: Mode) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return render(s, mode);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        let _ = write_escaped(&mut out, chunk.valid(), mode);
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    Cow::Owned(out)
}

/// A one-line value (a name, a host, an argument, a message) with every hidden character and
/// every backslash escaped (see the crate doc's table). Borrows when nothing needs escaping.
#[must_use]
pub fn visible(s: &str) -> Cow<'_, str> {
    render(s, Mode::Line)
}

/// [`visible`] for bytes: each byte that is not part of valid UTF-8 is `\xNN`.
#[must_use]
pub fn visible_bytes(bytes: &[u8]) -> Cow<'_, str> {
    render_bytes(bytes, Mode::Line)
}

/// [`visible`] for an OS string (a file name, an argument): its bytes as [`visible_bytes`].
#[must_use]
pub fn visible_os(s: &OsStr) -> Cow<'_, str> {
    visible_bytes(s.as_encoded_bytes())
}

/// [`visible`] for a path.
#[must_use]
pub fn visible_path(p: &Path) -> Cow<'_, str> {
    visible_os(p.as_os_str())
}

/// Multi-line content (a file shown in a diff): as [`visible`], except that newline, tab and
/// backslash print as themselves.
#[must_use]
pub fn visible_lines(s: &str) -> Cow<'_, str> {
    render(s, Mode::Lines)
}

/// [`visible_lines`] for bytes: each byte that is not part of valid UTF-8 is `\xNN`.
#[must_use]
pub fn visible_lines_bytes(bytes: &[u8]) -> Cow<'_, str> {
    render_bytes(bytes, Mode::Lines)
}

/// How many characters and invalid bytes [`visible_lines_bytes`] prints as escapes: the
/// number of real hidden characters behind escapes that a literal `\e` or `\u{202e}` in the
/// same text would look like.
#[must_use]
pub fn count_hidden_lines(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|chunk| {
            chunk
                .valid()
                .chars()
                .filter(|c| escaped(*c, Mode::Lines))
                .count()
                + chunk.invalid().len()
        })
        .sum()
}

/// Serialized JSON with every hidden character (which JSON allows raw inside strings, except
/// the C0 controls) as a JSON `\uXXXX` escape: still valid JSON with the same value. Newline
/// and tab stay, as the whitespace between tokens of a pretty-printed document.
#[must_use]
pub fn visible_json(json: &str) -> Cow<'_, str> {
    render(json, Mode::Json)
}

/// A value as an HTTP structured-field string (RFC 8941 `sf-string`, the `details` of a
/// `Proxy-Status` header, RFC 9209): `"…"`, quotes included. The value is first made
/// [`visible`] (so a newline becomes `\n`), then a character outside printable ASCII is
/// written as the same `\u{…}` escape, and `"` and `\` get the backslash `sf-string` requires.
/// The result is printable ASCII only: a header value that cannot end the header, start
/// another one or reach a terminal raw.
///
/// ```
/// assert_eq!(garuda_text::structured_string("a\"b\nc é"), r#""a\"b\\nc \\u{00e9}""#);
/// ```
#[must_use]
pub fn structured_string(s: &str) -> String {
    let shown = visible(s);
    let mut out = String::with_capacity(shown.len() + 2);
    out.push('"');
    for c in shown.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            c => {
                let _ =
                    fmt::Write::write_fmt(&mut out, format_args!("\\\\u{{{:04x}}}", u32::from(c)));
            }
        }
    }
    out.push('"');
    out
}

/// Displays a one-line value as [`visible`] does, without an intermediate `String`.
///
/// ```
/// use garuda_text::Visible;
/// assert_eq!(format!("host {}", Visible("a\u{202e}b")), "host a\\u{202e}b");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Visible<'a>(pub &'a str);

impl fmt::Display for Visible<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, Mode::Line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row per class: (what, input, one-line form, multi-line form, JSON form).
    const TABLE: &[(&str, &str, &str, &str, &str)] = &[
        (
            "plain ASCII",
            "src/main.rs",
            "src/main.rs",
            "src/main.rs",
            "src/main.rs",
        ),
        (
            "non-ASCII letters",
            "héllo ✓ 日本",
            "héllo ✓ 日本",
            "héllo ✓ 日本",
            "héllo ✓ 日本",
        ),
        ("backslash", "a\\nb", "a\\\\nb", "a\\nb", "a\\nb"),
        (
            "newline",
            "x\nThe change list",
            "x\\nThe change list",
            "x\nThe change list",
            "x\nThe change list",
        ),
        (
            "carriage return",
            "ok\rFAKE",
            "ok\\rFAKE",
            "ok\\rFAKE",
            "ok\\u000dFAKE",
        ),
        ("tab", "a\tb", "a\\tb", "a\tb", "a\tb"),
        (
            "ESC sequence",
            "a\x1b[2Kb",
            "a\\e[2Kb",
            "a\\e[2Kb",
            "a\\u001b[2Kb",
        ),
        ("BEL", "\x07", "\\x07", "\\x07", "\\u0007"),
        ("NUL", "\0", "\\x00", "\\x00", "\\u0000"),
        ("backspace", "ab\x08c", "ab\\x08c", "ab\\x08c", "ab\\u0008c"),
        ("unit separator", "\x1f", "\\x1f", "\\x1f", "\\u001f"),
        ("DEL", "del\x7f", "del\\x7f", "del\\x7f", "del\\u007f"),
        ("C1 first", "\u{80}", "\\u{0080}", "\\u{0080}", "\\u0080"),
        (
            "C1 NEL",
            "a\u{85}b",
            "a\\u{0085}b",
            "a\\u{0085}b",
            "a\\u0085b",
        ),
        (
            "C1 CSI",
            "\u{9b}2J",
            "\\u{009b}2J",
            "\\u{009b}2J",
            "\\u009b2J",
        ),
        (
            "C1 OSC",
            "\u{9d}0;t\u{9c}",
            "\\u{009d}0;t\\u{009c}",
            "\\u{009d}0;t\\u{009c}",
            "\\u009d0;t\\u009c",
        ),
        ("C1 last", "\u{9f}", "\\u{009f}", "\\u{009f}", "\\u009f"),
        (
            "no-break space stays",
            "a\u{a0}b",
            "a\u{a0}b",
            "a\u{a0}b",
            "a\u{a0}b",
        ),
        ("LRE", "\u{202a}", "\\u{202a}", "\\u{202a}", "\\u202a"),
        ("RLE", "\u{202b}", "\\u{202b}", "\\u{202b}", "\\u202b"),
        ("PDF", "\u{202c}", "\\u{202c}", "\\u{202c}", "\\u202c"),
        ("LRO", "\u{202d}", "\\u{202d}", "\\u{202d}", "\\u202d"),
        (
            "RLO",
            "evil\u{202e}txt.exe",
            "evil\\u{202e}txt.exe",
            "evil\\u{202e}txt.exe",
            "evil\\u202etxt.exe",
        ),
        ("LRI", "\u{2066}", "\\u{2066}", "\\u{2066}", "\\u2066"),
        ("RLI", "\u{2067}", "\\u{2067}", "\\u{2067}", "\\u2067"),
        ("FSI", "\u{2068}", "\\u{2068}", "\\u{2068}", "\\u2068"),
        ("PDI", "\u{2069}", "\\u{2069}", "\\u{2069}", "\\u2069"),
        ("LRM", "\u{200e}", "\\u{200e}", "\\u{200e}", "\\u200e"),
        ("RLM", "\u{200f}", "\\u{200f}", "\\u{200f}", "\\u200f"),
        ("ALM", "\u{61c}", "\\u{061c}", "\\u{061c}", "\\u061c"),
        (
            "line separator",
            "a\u{2028}b",
            "a\\u{2028}b",
            "a\\u{2028}b",
            "a\\u2028b",
        ),
        (
            "paragraph separator",
            "\u{2029}",
            "\\u{2029}",
            "\\u{2029}",
            "\\u2029",
        ),
        (
            "zero-width space",
            "a\u{200b}b",
            "a\\u{200b}b",
            "a\\u{200b}b",
            "a\\u200bb",
        ),
        (
            "zero-width joiner",
            "\u{200d}",
            "\\u{200d}",
            "\\u{200d}",
            "\\u200d",
        ),
        (
            "word joiner",
            "\u{2060}",
            "\\u{2060}",
            "\\u{2060}",
            "\\u2060",
        ),
        ("BOM", "\u{feff}x", "\\u{feff}x", "\\u{feff}x", "\\ufeffx"),
        ("soft hyphen", "\u{ad}", "\\u{00ad}", "\\u{00ad}", "\\u00ad"),
        (
            "Hangul filler",
            "\u{3164}",
            "\\u{3164}",
            "\\u{3164}",
            "\\u3164",
        ),
        (
            "variation selector",
            "\u{fe0f}",
            "\\u{fe0f}",
            "\\u{fe0f}",
            "\\ufe0f",
        ),
        (
            "interlinear annotation",
            "\u{fff9}",
            "\\u{fff9}",
            "\\u{fff9}",
            "\\ufff9",
        ),
        (
            "tag (above U+FFFF)",
            "\u{e0041}",
            "\\u{e0041}",
            "\\u{e0041}",
            "\\udb40\\udc41",
        ),
        ("emoji stays", "🦅", "🦅", "🦅", "🦅"),
    ];

    #[test]
    fn every_class_is_escaped_as_the_table_says() {
        for (what, input, line, lines, json) in TABLE {
            assert_eq!(visible(input), *line, "visible: {what}");
            assert_eq!(format!("{}", Visible(input)), *line, "Visible: {what}");
            assert_eq!(visible_lines(input), *lines, "visible_lines: {what}");
            assert_eq!(visible_json(input), *json, "visible_json: {what}");
            assert_eq!(
                visible_bytes(input.as_bytes()),
                *line,
                "visible_bytes: {what}"
            );
            assert_eq!(visible_os(OsStr::new(input)), *line, "visible_os: {what}");
            // Nothing that needs escaping survives in the one-line form.
            assert!(
                !visible(input).chars().any(is_hidden),
                "{what}: a hidden character is left"
            );
            assert!(!visible(input).contains('\n'), "{what}");
        }
    }

    #[test]
    fn invalid_utf8_bytes_are_hex() {
        assert_eq!(visible_bytes(b"ok\xff\xfe"), "ok\\xff\\xfe");
        assert_eq!(visible_bytes(b"a\xc3"), "a\\xc3");
        assert_eq!(visible_bytes(b"\xe2\x80\xae\xff\n"), "\\u{202e}\\xff\\n");
        assert_eq!(visible_lines_bytes(b"l1\xff\nl2\x1b\n"), "l1\\xff\nl2\\e\n");
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(visible_os(OsStr::from_bytes(b"bad\xff\n")), "bad\\xff\\n");
        assert_eq!(
            visible_path(Path::new(OsStr::from_bytes(b"/p/\x1b]0;x\x07"))),
            "/p/\\e]0;x\\x07"
        );
    }

    #[test]
    fn the_escaped_forms_are_unambiguous() {
        // A literal backslash-n and a real newline, a literal `\x1b` and a real ESC, a literal
        // `\u{202e}` and a real RLO, a raw byte 0xff and a literal `\xff`: each pair differs.
        for (a, b) in [
            ("a\\nb", "a\nb"),
            ("\\x1b", "\x1b"),
            ("\\e", "\x1b"),
            ("\\u{202e}", "\u{202e}"),
            ("\\\\", "\\"),
        ] {
            assert_ne!(visible(a), visible(b), "{a:?} and {b:?}");
        }
        assert_ne!(visible_bytes(b"\xff"), visible_bytes(b"\\xff"));
        // The negative control: without escaping the backslash, the pairs would collide.
        assert_eq!(visible_lines("a\\nb").replace('\n', "\\n"), "a\\nb");
        assert_eq!(visible_lines("a\nb").replace('\n', "\\n"), "a\\nb");
    }

    /// The bytes behind a one-line form: the decoder the crate doc describes.
    fn decode_line(shown: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let mut chars = shown.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            match chars.next().unwrap() {
                '\\' => out.push(b'\\'),
                'n' => out.push(b'\n'),
                'r' => out.push(b'\r'),
                't' => out.push(b'\t'),
                'e' => out.push(0x1b),
                'x' => {
                    let hex: String = chars.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&hex, 16).unwrap());
                }
                'u' => {
                    assert_eq!(chars.next(), Some('{'), "{shown:?}");
                    let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    let c = char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap();
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => panic!("unknown escape \\{other} in {shown:?}"),
            }
        }
        out
    }

    #[test]
    fn the_one_line_form_decodes_back_to_the_same_bytes() {
        let mut inputs: Vec<Vec<u8>> = TABLE.iter().map(|row| row.1.as_bytes().to_vec()).collect();
        // Every byte alone (0x80 and up are not UTF-8 alone) and after a backslash.
        for b in 0..=255u8 {
            inputs.push(vec![b]);
            inputs.push(vec![b'\\', b]);
        }
        // Every character `is_hidden` names, and literal escapes next to real ones.
        for c in (0..0x11_0000u32)
            .filter_map(char::from_u32)
            .filter(|c| is_hidden(*c))
        {
            inputs.push(format!("a{c}\\u{{{:04x}}}", u32::from(c)).into_bytes());
        }
        inputs.push(b"\\x1b\x1b\\e\\\\n\n\xff\\xff\xc3".to_vec());
        for input in &inputs {
            let shown = visible_bytes(input);
            assert!(!shown.chars().any(is_hidden), "{input:?}: {shown:?}");
            assert_eq!(&decode_line(&shown), input, "{shown:?}");
        }
        // Negative control: a form that leaves the backslash alone (the multi-line one) does
        // not decode back: a literal backslash-n comes back as a newline.
        assert_eq!(decode_line(&visible_lines("a\\nb")), b"a\nb");
    }

    #[test]
    fn nothing_to_escape_borrows() {
        assert!(matches!(visible("plain/name.txt"), Cow::Borrowed(_)));
        assert!(matches!(visible_lines("l1\n\tl2\\"), Cow::Borrowed(_)));
        assert!(matches!(visible_json("{\"a\":\"b\\n\"}"), Cow::Borrowed(_)));
        assert!(matches!(visible("a\nb"), Cow::Owned(_)));
    }

    #[test]
    fn json_stays_json_with_the_same_value() {
        let value = "argv\n\u{202e}\u{9b}\x7f\u{e0041}\\ \"q\"";
        let text = format!("{{\"a\":{}}}", json_string(value));
        let shown = visible_json(&text);
        assert!(!shown.chars().any(is_hidden), "{shown}");
        assert_eq!(decode_json_string(&shown), value);
    }

    #[test]
    fn hidden_characters_in_content_are_counted() {
        assert_eq!(count_hidden_lines(b"fn main() {\n\t\"\\e\"\n}\n"), 0);
        assert_eq!(count_hidden_lines("a\x1b[31m\u{202e}\r\n".as_bytes()), 3);
        assert_eq!(count_hidden_lines(b"\xff\xfe ok"), 2);
    }

    /// A JSON string literal with the C0 controls, quote and backslash escaped (as any JSON
    /// serializer does) and everything else raw.
    fn json_string(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    /// A structured-field string is printable ASCII between quotes, whatever the value holds,
    /// and decodes (RFC 8941: a backslash takes the next character as it is) to the
    /// [`visible`] form.
    #[test]
    fn a_structured_string_is_printable_ascii_that_decodes_to_the_visible_form() {
        for (_, input, line, _, _) in TABLE {
            let sf = structured_string(input);
            assert!(
                sf.len() >= 2 && sf.starts_with('"') && sf.ends_with('"'),
                "{sf}"
            );
            assert!(
                sf.chars().all(|c| (' '..='~').contains(&c)),
                "{input:?}: {sf}"
            );
            let mut decoded = String::new();
            let mut chars = sf[1..sf.len() - 1].chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => decoded.push(chars.next().unwrap()),
                    '"' => panic!("an unescaped quote ends the string early: {sf}"),
                    c => decoded.push(c),
                }
            }
            let want: String = line
                .chars()
                .map(|c| {
                    if c.is_ascii() {
                        c.to_string()
                    } else {
                        format!("\\u{{{:04x}}}", u32::from(c))
                    }
                })
                .collect();
            assert_eq!(decoded, want, "{input:?}");
        }
        assert_eq!(
            structured_string("evil.test\"; error=none\r\nX-Injected: 1"),
            r#""evil.test\"; error=none\\r\\nX-Injected: 1""#
        );
        // Negative control: the value as it is would end the header and start another.
        assert!("evil.test\"; error=none\r\nX-Injected: 1".contains("\r\n"));
    }

    /// The value of the one string in `{"a":"…"}`, decoding JSON escapes.
    fn decode_json_string(text: &str) -> String {
        let inner = text
            .strip_prefix("{\"a\":\"")
            .and_then(|t| t.strip_suffix("\"}"))
            .unwrap();
        let mut units: Vec<u16> = Vec::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0u16; 2];
                units.extend_from_slice(c.encode_utf16(&mut buf));
                continue;
            }
            match chars.next().unwrap() {
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    units.push(u16::from_str_radix(&hex, 16).unwrap());
                }
                other => units.push(u16::try_from(u32::from(other)).unwrap()),
            }
        }
        String::from_utf16(&units).unwrap()
    }
}
