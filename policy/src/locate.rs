//! Where each value of a settings file is written: line and column by key path.
//!
//! serde gives line and column only for syntax and type errors. A value that parses but is
//! refused later (a project file that sets `permissions.allow`, a rule that does not parse, a
//! path with `..`) must be reported at its place too, and `garuda policy` shows the line each
//! effective value came from. This index is built by one pass over text that serde_json has
//! already accepted; on text it does not understand it simply records less, and a lookup falls
//! back to the nearest enclosing key, then to the start of the file.

use std::collections::HashMap;

/// Line and column (1-based, column in bytes) of every value, by dotted key path:
/// `permissions.allow[2]`, `sandbox.unreadable[0]`, `executor`. The root object is `""`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Positions {
    by_path: HashMap<String, (usize, usize)>,
}

impl Positions {
    /// Indexes `text`, which should be valid JSON.
    pub(crate) fn scan(text: &str) -> Positions {
        let mut scanner = Scanner {
            bytes: text.as_bytes(),
            at: 0,
            line: 1,
            line_start: 0,
            out: HashMap::new(),
        };
        scanner.value(String::new(), 0);
        Positions {
            by_path: scanner.out,
        }
    }

    /// Where the value at `path` starts; for a path not recorded, where its nearest recorded
    /// ancestor starts; else line 1, column 1.
    pub(crate) fn of(&self, path: &str) -> (usize, usize) {
        let mut key = path;
        loop {
            if let Some(found) = self.by_path.get(key) {
                return *found;
            }
            match key.rfind(['.', '[']) {
                Some(cut) => key = &key[..cut],
                None if key.is_empty() => return (1, 1),
                None => key = "",
            }
        }
    }
}

/// The deepest nesting indexed. serde_json itself refuses deeper input (its limit is 128).
const MAX_DEPTH: usize = 128;

struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
    line: usize,
    line_start: usize,
    out: HashMap<String, (usize, usize)>,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
            self.line_start = self.at + 1;
        }
        self.at += 1;
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.bump();
        }
    }

    fn value(&mut self, path: String, depth: usize) {
        self.skip_blanks();
        if depth > MAX_DEPTH {
            return;
        }
        let here = (self.line, self.at - self.line_start + 1);
        self.out.entry(path.clone()).or_insert(here);
        match self.peek() {
            Some(b'{') => self.object(&path, depth),
            Some(b'[') => self.array(&path, depth),
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while let Some(b) = self.peek() {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.bump();
                }
            }
            None => {}
        }
    }

    fn object(&mut self, path: &str, depth: usize) {
        self.bump(); // `{`
        loop {
            self.skip_blanks();
            match self.peek() {
                Some(b'}') => {
                    self.bump();
                    return;
                }
                Some(b',') => self.bump(),
                Some(b'"') => {
                    let key = self.string();
                    self.skip_blanks();
                    if self.peek() != Some(b':') {
                        return;
                    }
                    self.bump();
                    let child = if path.is_empty() {
                        key
                    } else {
                        format!("{path}.{key}")
                    };
                    self.value(child, depth + 1);
                }
                _ => return,
            }
        }
    }

    fn array(&mut self, path: &str, depth: usize) {
        self.bump(); // `[`
        let mut index = 0usize;
        loop {
            self.skip_blanks();
            match self.peek() {
                Some(b']') => {
                    self.bump();
                    return;
                }
                Some(b',') => self.bump(),
                Some(_) => {
                    let before = self.at;
                    self.value(format!("{path}[{index}]"), depth + 1);
                    index += 1;
                    if self.at == before {
                        return; // not JSON we understand; stop rather than loop
                    }
                }
                None => return,
            }
        }
    }

    /// Skips a string at the cursor and returns its contents with escapes decoded (keys only
    /// need the simple escapes; `\u` sequences are kept as written).
    fn string(&mut self) -> String {
        self.bump(); // opening quote
        let mut out = Vec::new();
        while let Some(b) = self.peek() {
            self.bump();
            match b {
                b'"' => break,
                b'\\' => {
                    if let Some(escaped) = self.peek() {
                        self.bump();
                        out.push(match escaped {
                            b'n' => b'\n',
                            b't' => b'\t',
                            b'r' => b'\r',
                            b'b' => 0x08,
                            b'f' => 0x0c,
                            other => other,
                        });
                    }
                }
                other => out.push(other),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_values_and_array_elements() {
        let text = "{\n  \"executor\": \"auto\",\n  \"permissions\": {\n    \"allow\": [\n      \"Bash(git status)\",\n      \"Read\"\n    ]\n  }\n}\n";
        let p = Positions::scan(text);
        assert_eq!(p.of("executor"), (2, 15));
        assert_eq!(p.of("permissions"), (3, 18));
        assert_eq!(p.of("permissions.allow"), (4, 14));
        assert_eq!(p.of("permissions.allow[0]"), (5, 7));
        assert_eq!(p.of("permissions.allow[1]"), (6, 7));
        // Unknown paths fall back to the nearest ancestor, then to the start.
        assert_eq!(p.of("permissions.allow[7]"), (4, 14));
        assert_eq!(p.of("permissions.deny"), (3, 18));
        assert_eq!(p.of("network.allow[0]"), (1, 1));
    }

    #[test]
    fn strings_with_escapes_and_braces_do_not_confuse_it() {
        let text = r#"{"a": "x\"}]{[", "b": [1, {"c": true}], "d\"e": null}"#;
        let p = Positions::scan(text);
        assert_eq!(p.of("b[1].c"), (1, 33));
        assert_eq!(p.of("d\"e"), (1, 49));
    }

    #[test]
    fn garbage_never_panics_or_hangs() {
        for text in [
            "",
            "{",
            "[",
            "{\"a\"",
            "{\"a\":",
            "[1,,",
            "}",
            "\"",
            "{\"a\" 1}",
            "[[[[",
        ] {
            let p = Positions::scan(text);
            let _ = p.of("a.b[3]");
        }
    }
}
