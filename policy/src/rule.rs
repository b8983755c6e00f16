//! Permission rules: `Tool` or `Tool(pattern)`, as written under `"permissions"`.
//!
//! | tool | aliases | pattern | example |
//! |---|---|---|---|
//! | `read_file` | `Read` | path glob | `Read(~/.ssh/**)` |
//! | `write_file` | `Write` | path glob | `write_file(build/**)` |
//! | `edit_file` | `Edit` | path glob | `Edit(src/**/*.rs)` |
//! | `bash` | `Bash` | command wildcard | `Bash(npm run test:*)`, `Bash(git log *)` |
//! | `web_fetch` | `WebFetch` | host | `WebFetch(*.example.com)`, `WebFetch(domain:docs.rs)` |
//! | `mcp__server__tool` | | none | `mcp__github__get_issue`, `mcp__github__*`, `mcp__github` |
//!
//! A rule without a pattern covers every use of its tool. The aliases are Claude Code's names,
//! so a team can reuse its lists; a parsed rule always prints with our name.
//!
//! # Paths
//!
//! Gitignore-style globs. `*` matches any run of characters within one path component, `?` one
//! character, `[a-z]` / `[!a-z]` a class, `**` as a whole component any number of components
//! (a trailing `/**` at least one), and `\` escapes the next character. Where the pattern is
//! anchored:
//!
//! - `//etc/hosts`: an absolute path (`//` is the filesystem root);
//! - `~/.aws/**`: relative to the home directory (`~` alone is the whole home);
//! - `/build/**`, `./build/**` or any pattern with a `/` before its last character:
//!   relative to the project root;
//! - a pattern without such a `/` (`*.pem`, `.env`, `secrets/`): a name at any depth inside the
//!   project, as in `.gitignore`. To match a name anywhere on the machine write `//**/*.pem`.
//!
//! A pattern that matches a directory matches everything inside it, so `Read(secrets)` covers
//! `secrets/prod/key.pem`. A trailing `/` is accepted and changes nothing else. Components `.`
//! and `..`, empty components and a leading `!` (gitignore's negation) are errors.
//! Rules for `edit_file` also cover `write_file` (as Claude Code's `Edit` covers its `Write`).
//!
//! # Commands
//!
//! A command pattern is matched against one simple command (see [`crate::command::split`]),
//! never against a whole line. Words are separated by blanks and may be quoted (`'…'`, `"…"`,
//! `\x`) as in the shell. An unquoted `*` matches any run of characters within the simple
//! command, across words: `git *` matches `git log -p`. A pattern that ends in ` *` also
//! matches the command without further words (`git *` matches `git`), and Claude Code's prefix
//! form `npm run test:*` matches `npm run test` alone or followed by more words (not
//! `npm run testing`). Shell operators (`&&`, `;`, `|`, `>`, `(`, `` ` ``) cannot appear
//! unquoted: a pattern that holds them could never match one simple command.
//!
//! # Hosts
//!
//! `example.com` matches that host only; `*.example.com` matches every name below it but not
//! `example.com` itself. An optional `:port` restricts the port; without one any port matches.
//! Names are compared lower-cased with one trailing dot removed. Claude Code's
//! `domain:example.com` form is accepted. IPv6 addresses are written in brackets.

use std::fmt;
use std::path::{Component, Path};
use std::str::FromStr;

/// The longest rule accepted, in bytes of its printed form (our tool name, no surrounding
/// blanks), so that every rule that parses prints as text that parses again. The text as
/// written may be up to twice as long (blanks, aliases).
pub const MAX_RULE_BYTES: usize = 4096;

/// A built-in tool a rule can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tool {
    /// `read_file` (alias `Read`).
    ReadFile,
    /// `write_file` (alias `Write`).
    WriteFile,
    /// `edit_file` (alias `Edit`).
    EditFile,
    /// `bash` (alias `Bash`).
    Bash,
    /// `web_fetch` (alias `WebFetch`).
    WebFetch,
}

impl Tool {
    /// Every built-in tool.
    pub const ALL: [Self; 5] = [
        Self::ReadFile,
        Self::WriteFile,
        Self::EditFile,
        Self::Bash,
        Self::WebFetch,
    ];

    /// Our name for the tool (`read_file`, …).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::ReadFile => "read_file",
            Self::WriteFile => "write_file",
            Self::EditFile => "edit_file",
            Self::Bash => "bash",
            Self::WebFetch => "web_fetch",
        }
    }

    /// The tool called `name`, by our name or Claude Code's alias.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "read_file" | "Read" => Self::ReadFile,
            "write_file" | "Write" => Self::WriteFile,
            "edit_file" | "Edit" => Self::EditFile,
            "bash" | "Bash" => Self::Bash,
            "web_fetch" | "WebFetch" => Self::WebFetch,
            _ => return None,
        })
    }

    /// Whether the tool's target is a file path.
    #[must_use]
    pub const fn is_file_tool(self) -> bool {
        matches!(self, Self::ReadFile | Self::WriteFile | Self::EditFile)
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which tool (or tools) a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolMatcher {
    /// A built-in tool.
    Builtin(Tool),
    /// A tool of an MCP server: `mcp__server__tool`, or every tool of the server
    /// (`mcp__server__*`, `mcp__server`) when `tool` is `None`.
    Mcp {
        /// The server name.
        server: String,
        /// The tool name, `None` for all of the server's tools.
        tool: Option<String>,
    },
}

impl ToolMatcher {
    /// Whether a rule for this matcher applies to a request for the built-in `tool`. An
    /// `edit_file` rule also applies to `write_file`.
    #[must_use]
    pub fn covers(&self, tool: Tool) -> bool {
        match self {
            Self::Builtin(own) => {
                *own == tool || (*own == Tool::EditFile && tool == Tool::WriteFile)
            }
            Self::Mcp { .. } => false,
        }
    }

    /// Whether this matcher applies to the MCP tool called `name` (`mcp__server__tool`).
    #[must_use]
    pub fn covers_mcp(&self, name: &str) -> bool {
        let Self::Mcp { server, tool } = self else {
            return false;
        };
        let Some((s, t)) = split_mcp_name(name) else {
            return false;
        };
        s == server && tool.as_deref().is_none_or(|own| own == t)
    }
}

impl fmt::Display for ToolMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin(tool) => tool.fmt(f),
            Self::Mcp { server, tool } => {
                write!(f, "mcp__{server}__{}", tool.as_deref().unwrap_or("*"))
            }
        }
    }
}

/// Splits `mcp__server__tool` into `(server, tool)`. The server name cannot contain `__`.
fn split_mcp_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("mcp__")?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The pattern of a rule, of the kind its tool takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// A path glob (file tools).
    Path(PathPattern),
    /// A command wildcard (`bash`).
    Command(CommandPattern),
    /// A host (`web_fetch`).
    Host(HostPattern),
}

impl Pattern {
    /// The pattern as written in the rule (surrounding blanks removed).
    #[must_use]
    pub fn source(&self) -> &str {
        match self {
            Self::Path(p) => &p.source,
            Self::Command(p) => &p.source,
            Self::Host(p) => &p.source,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.source())
    }
}

/// A permission rule: a tool and an optional pattern. Parse one with [`str::parse`].
///
/// ```
/// use garuda_policy::rule::{Rule, Tool};
/// let rule: Rule = "Bash(npm run test:*)".parse().unwrap();
/// assert_eq!(rule.to_string(), "bash(npm run test:*)");
/// let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
/// assert!(rule.matches_command(&words("npm run test --watch")));
/// assert!(!rule.matches_command(&words("npm run testing")));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    tool: ToolMatcher,
    pattern: Option<Pattern>,
}

impl Rule {
    /// The tool (or tools) the rule applies to.
    #[must_use]
    pub const fn tool(&self) -> &ToolMatcher {
        &self.tool
    }

    /// The pattern, `None` when the rule covers every use of its tool.
    #[must_use]
    pub const fn pattern(&self) -> Option<&Pattern> {
        self.pattern.as_ref()
    }

    /// Whether the rule applies to `tool` used on `path`.
    ///
    /// `path` is absolute, or relative to `project_root`; `.` and `..` are resolved lexically
    /// (the caller resolves symbolic links first). `project_root` and `home` are absolute.
    /// Always `false` for a tool that does not take a path.
    #[must_use]
    pub fn matches_path(&self, tool: Tool, path: &Path, project_root: &Path, home: &Path) -> bool {
        if !tool.is_file_tool() || !self.tool.covers(tool) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(Pattern::Path(pattern)) => pattern.matches(path, project_root, home),
            Some(_) => false,
        }
    }

    /// Whether the rule is a `bash` rule that matches one simple command (its words after
    /// quote removal, as [`crate::command::SimpleCommand::argv`]).
    #[must_use]
    pub fn matches_command(&self, simple_command: &[String]) -> bool {
        if !self.tool.covers(Tool::Bash) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(Pattern::Command(pattern)) => pattern.matches(simple_command),
            Some(_) => false,
        }
    }

    /// Whether the rule is a `web_fetch` rule that matches `host` on `port`.
    #[must_use]
    pub fn matches_host(&self, host: &str, port: u16) -> bool {
        if !self.tool.covers(Tool::WebFetch) {
            return false;
        }
        match &self.pattern {
            None => true,
            Some(Pattern::Host(pattern)) => pattern.matches(host, port),
            Some(_) => false,
        }
    }

    /// Whether the rule is an MCP rule that covers the tool called `name`
    /// (`mcp__server__tool`).
    #[must_use]
    pub fn matches_mcp(&self, name: &str) -> bool {
        self.tool.covers_mcp(name)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            None => self.tool.fmt(f),
            Some(pattern) => write!(f, "{}({pattern})", self.tool),
        }
    }
}

/// A rule that could not be parsed: the rule text, the byte offset of the problem in it, and
/// what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rule `{rule}` at byte {position}: {reason}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// Byte offset in [`RuleError::rule`] where the problem is.
    pub position: usize,
    /// What is wrong.
    pub reason: RuleErrorKind,
}

/// What is wrong with a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleErrorKind {
    /// The rule is empty or blank.
    #[error("the rule is empty")]
    Empty,
    /// The rule is longer than [`MAX_RULE_BYTES`] (as printed).
    #[error("the rule is longer than {MAX_RULE_BYTES} bytes")]
    TooLong,
    /// A control character (newline, NUL, …).
    #[error("control character in rule")]
    ControlCharacter,
    /// The tool name is not known.
    #[error("unknown tool `{0}` (expected read_file, write_file, edit_file, bash, web_fetch, mcp__server__tool or Read, Write, Edit, Bash, WebFetch)")]
    UnknownTool(String),
    /// An `mcp__…` name that is not `mcp__server__tool`, `mcp__server__*` or `mcp__server`.
    #[error("malformed MCP tool name `{0}` (expected mcp__server__tool or mcp__server__*)")]
    BadMcpName(String),
    /// `(` without the closing `)` at the end.
    #[error("`(` is not closed by a `)` at the end of the rule")]
    Unclosed,
    /// Text after the closing `)`, or a `)` without `(`.
    #[error("unexpected text after the tool name")]
    Trailing,
    /// `Tool()`.
    #[error("empty pattern: write the tool alone to cover all its uses")]
    EmptyPattern,
    /// A pattern given to a tool that takes none (MCP tools).
    #[error("this tool takes no pattern")]
    NoPatternAllowed,
    /// A path component `.` or `..`.
    #[error("`.` and `..` are not allowed in a path pattern")]
    DotComponent,
    /// `a//b`.
    #[error("empty path component")]
    EmptyComponent,
    /// A leading `!`.
    #[error("negated patterns (`!…`) are not supported: use a deny rule")]
    Negation,
    /// `[` without `]`.
    #[error("`[` is not closed by `]`")]
    UnclosedClass,
    /// `\` at the end of the pattern.
    #[error("`\\` at the end of the pattern escapes nothing")]
    TrailingBackslash,
    /// An unterminated quote in a command pattern.
    #[error("unterminated quote")]
    UnterminatedQuote,
    /// A shell operator in a command pattern.
    #[error("`{0}` cannot appear unquoted in a command pattern: a pattern matches one simple command, and `&&`, `;`, `|`, redirections and substitutions join several")]
    ShellOperator(char),
    /// A host that is not a valid name, wildcard or address.
    #[error("invalid host: {0}")]
    BadHost(&'static str),
    /// A port outside 1–65535.
    #[error("invalid port (expected 1-65535)")]
    BadPort,
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |position: usize, reason: RuleErrorKind| RuleError {
            rule: text.to_owned(),
            position,
            reason,
        };
        if text.len() > 2 * MAX_RULE_BYTES {
            return Err(fail(MAX_RULE_BYTES, RuleErrorKind::TooLong));
        }
        let rule = Self::parse_unbounded(text, &fail)?;
        if rule.to_string().len() > MAX_RULE_BYTES {
            return Err(fail(MAX_RULE_BYTES.min(text.len()), RuleErrorKind::TooLong));
        }
        Ok(rule)
    }
}

/// The rules an "always, for this session" answer adds: each matches exactly what was asked
/// and nothing more, whatever characters it holds (every glob or wildcard character is
/// escaped).
impl Rule {
    /// `tool(/path)`: the one project-relative file `path` for `tool` (`write_file` or
    /// `edit_file`; an `edit_file` rule covers `write_file` too). `None` when no rule can say
    /// exactly that: a path the rule's text cannot hold as it is (an empty one, a `.` or `..`
    /// component, a blank at either end, which the parser trims: `" "` would become `/`, the
    /// whole project). The caller then asks again next time.
    #[must_use]
    pub fn exactly_path(tool: Tool, path: &str) -> Option<Rule> {
        if path.is_empty()
            || path.starts_with(char::is_whitespace)
            || path.ends_with(char::is_whitespace)
        {
            return None;
        }
        let mut pattern = String::from("/");
        for c in path.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '(' | ')') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        let rule: Rule = format!("{}({pattern})", tool.name()).parse().ok()?;
        // The pattern kept as built, nothing trimmed or rewritten on the way.
        (rule.pattern.as_ref().map(Pattern::source) == Some(pattern.as_str())).then_some(rule)
    }

    /// `bash(word word …)`: one simple command with exactly these words. `None` when the
    /// rule's text cannot hold them as they are (no words, an empty word).
    #[must_use]
    pub fn exactly_command(argv: &[String]) -> Option<Rule> {
        if argv.is_empty() || argv.iter().any(String::is_empty) {
            return None;
        }
        let words: Vec<String> = argv
            .iter()
            .map(|word| {
                let mut quoted = String::from("'");
                for c in word.chars() {
                    if c == '\'' {
                        // Out of the quotes, an escaped quote, back in.
                        quoted.push_str("'\\''");
                    } else {
                        quoted.push(c);
                    }
                }
                quoted.push('\'');
                quoted
            })
            .collect();
        format!("bash({})", words.join(" ")).parse().ok()
    }
}

impl Rule {
    fn parse_unbounded(
        text: &str,
        fail: &dyn Fn(usize, RuleErrorKind) -> RuleError,
    ) -> Result<Self, RuleError> {
        if let Some(at) = text.find(|c: char| c.is_control()) {
            return Err(fail(at, RuleErrorKind::ControlCharacter));
        }
        let start = text.len() - text.trim_start().len();
        let body = text.trim();
        if body.is_empty() {
            return Err(fail(0, RuleErrorKind::Empty));
        }
        let (name, pattern) = match body.find('(') {
            None => {
                if let Some(at) = body.find(')') {
                    return Err(fail(start + at, RuleErrorKind::Trailing));
                }
                (body, None)
            }
            Some(open) => {
                if !body.ends_with(')') {
                    return Err(fail(start + body.len(), RuleErrorKind::Unclosed));
                }
                let inner = &body[open + 1..body.len() - 1];
                (&body[..open], Some((start + open + 1, inner)))
            }
        };
        let name_trimmed = name.trim_end();
        let tool = parse_tool(name_trimmed).map_err(|reason| fail(start, reason))?;
        let Some((inner_at, inner)) = pattern else {
            return Ok(Self {
                tool,
                pattern: None,
            });
        };
        let lead = inner.len() - inner.trim_start().len();
        let source = inner.trim();
        let at = inner_at + lead;
        if source.is_empty() {
            return Err(fail(inner_at, RuleErrorKind::EmptyPattern));
        }
        let pattern = match &tool {
            ToolMatcher::Mcp { .. } => {
                return Err(fail(inner_at - 1, RuleErrorKind::NoPatternAllowed))
            }
            ToolMatcher::Builtin(t) if t.is_file_tool() => PathPattern::parse(source)
                .map(Pattern::Path)
                .map_err(|(offset, reason)| fail(at + offset, reason))?,
            ToolMatcher::Builtin(Tool::Bash) => CommandPattern::parse(source)
                .map(Pattern::Command)
                .map_err(|(offset, reason)| fail(at + offset, reason))?,
            ToolMatcher::Builtin(_) => HostPattern::parse(source)
                .map(Pattern::Host)
                .map_err(|(offset, reason)| fail(at + offset, reason))?,
        };
        Ok(Self {
            tool,
            pattern: Some(pattern),
        })
    }
}

fn parse_tool(name: &str) -> Result<ToolMatcher, RuleErrorKind> {
    if let Some(tool) = Tool::from_name(name) {
        return Ok(ToolMatcher::Builtin(tool));
    }
    let Some(rest) = name.strip_prefix("mcp__") else {
        return Err(RuleErrorKind::UnknownTool(name.to_owned()));
    };
    let bad = || RuleErrorKind::BadMcpName(name.to_owned());
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let (server, tool) = match rest.split_once("__") {
        None => (rest, None),
        Some((server, "*")) => (server, None),
        Some((server, tool)) => (server, Some(tool)),
    };
    if !valid(server) || server.ends_with('_') || tool.is_some_and(|t| !valid(t)) {
        return Err(bad());
    }
    Ok(ToolMatcher::Mcp {
        server: server.to_owned(),
        tool: tool.map(str::to_owned),
    })
}

// ---------------------------------------------------------------------------------------------
// Paths

/// Where a path pattern is anchored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Anchor {
    /// `//…`: the filesystem root.
    Root,
    /// `~/…`: the home directory.
    Home,
    /// `/…`, `./…` or a pattern with an inner `/`: the project root.
    Project,
    /// No `/` before the last character: a name at any depth inside the project.
    AnyDepth,
}

/// A gitignore-style path glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    anchor: Anchor,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of components.
    Any,
    /// One component.
    Glob(Vec<GlobToken>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GlobToken {
    Literal(char),
    /// `?`
    One,
    /// `*`
    Star,
    /// `[…]`
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl GlobToken {
    fn matches(&self, c: char) -> bool {
        match self {
            Self::Literal(l) => *l == c,
            Self::One => true,
            Self::Star => false,
            Self::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
            }
        }
    }
}

impl PathPattern {
    /// The pattern as written.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Where the pattern is anchored.
    #[must_use]
    pub const fn anchor(&self) -> Anchor {
        self.anchor
    }

    fn parse(source: &str) -> Result<Self, (usize, RuleErrorKind)> {
        if source.starts_with('!') {
            return Err((0, RuleErrorKind::Negation));
        }
        let (anchor, body_at) = if source.starts_with("//") {
            (Anchor::Root, 2)
        } else if source == "~" {
            (Anchor::Home, 1)
        } else if source.starts_with("~/") {
            (Anchor::Home, 2)
        } else if source.starts_with("./") {
            (Anchor::Project, 2)
        } else if source.starts_with('/') {
            (Anchor::Project, 1)
        } else {
            let inner = source.trim_end_matches('/');
            if inner.contains('/') {
                (Anchor::Project, 0)
            } else {
                (Anchor::AnyDepth, 0)
            }
        };
        let body = &source[body_at..];
        // One trailing `/` is allowed (and means nothing more: directories match their contents).
        let body = body.strip_suffix('/').unwrap_or(body);
        let mut segments = Vec::new();
        if !body.is_empty() {
            let mut offset = body_at;
            for component in body.split('/') {
                segments.push(parse_segment(component).map_err(|(o, e)| (offset + o, e))?);
                offset += component.len() + 1;
            }
        }
        if anchor == Anchor::AnyDepth {
            segments.insert(0, Segment::Any);
        }
        Ok(Self {
            source: source.to_owned(),
            anchor,
            segments,
        })
    }

    /// Whether the pattern matches `path` or one of its ancestors below the anchor.
    fn matches(&self, path: &Path, project_root: &Path, home: &Path) -> bool {
        let absolute = normalize(&project_root.join(path));
        let base = match self.anchor {
            Anchor::Root => Vec::new(),
            Anchor::Home => normalize(home),
            Anchor::Project | Anchor::AnyDepth => normalize(project_root),
        };
        let Some(relative) = absolute.strip_prefix(base.as_slice()) else {
            return false;
        };
        if self.segments.is_empty() {
            return true;
        }
        let components: Vec<Vec<char>> = relative.iter().map(|c| c.chars().collect()).collect();
        match_prefix(&self.segments, &components)
    }
}

fn parse_segment(component: &str) -> Result<Segment, (usize, RuleErrorKind)> {
    match component {
        "" => return Err((0, RuleErrorKind::EmptyComponent)),
        "." | ".." => return Err((0, RuleErrorKind::DotComponent)),
        "**" => return Ok(Segment::Any),
        _ => {}
    }
    let mut tokens = Vec::new();
    let mut chars = component.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e)) => tokens.push(GlobToken::Literal(e)),
                None => return Err((at, RuleErrorKind::TrailingBackslash)),
            },
            '?' => tokens.push(GlobToken::One),
            '*' => {
                if tokens.last() != Some(&GlobToken::Star) {
                    tokens.push(GlobToken::Star);
                }
            }
            '[' => {
                let negated = chars.next_if(|(_, c)| *c == '!' || *c == '^').is_some();
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let Some((_, c)) = chars.next() else {
                        return Err((at, RuleErrorKind::UnclosedClass));
                    };
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    let lo = if c == '\\' {
                        match chars.next() {
                            Some((_, e)) => e,
                            None => return Err((at, RuleErrorKind::UnclosedClass)),
                        }
                    } else {
                        c
                    };
                    let mut hi = lo;
                    if chars.peek().is_some_and(|(_, c)| *c == '-') {
                        let mut ahead = chars.clone();
                        ahead.next();
                        if let Some((_, end)) = ahead.next() {
                            if end != ']' {
                                chars.next();
                                chars.next();
                                hi = end;
                            }
                        }
                    }
                    ranges.push((lo, hi));
                }
                tokens.push(GlobToken::Class { negated, ranges });
            }
            c => tokens.push(GlobToken::Literal(c)),
        }
    }
    Ok(Segment::Glob(tokens))
}

/// `path` as a list of normal components, with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(c) => out.push(c.to_string_lossy().into_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Whether `segments` match `components[..k]` for some `k ≥ 1` (the path or an ancestor).
/// Dynamic programming over (segment, component): polynomial whatever the pattern.
fn match_prefix(segments: &[Segment], components: &[Vec<char>]) -> bool {
    let n = components.len();
    // reach[j]: the segments so far match exactly components[..j].
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let mut next = vec![false; n + 1];
        match segment {
            Segment::Any => {
                // Zero or more components; a trailing `**` needs at least one.
                let mut seen = false;
                for j in 0..=n {
                    if last {
                        next[j] = seen;
                        seen |= reach[j];
                    } else {
                        seen |= reach[j];
                        next[j] = seen;
                    }
                }
            }
            Segment::Glob(tokens) => {
                for j in 0..n {
                    if reach[j] && glob_match(tokens, &components[j]) {
                        next[j + 1] = true;
                    }
                }
            }
        }
        reach = next;
    }
    reach.iter().skip(1).any(|&r| r)
}

/// Matches one component against glob tokens: linear backtracking on the last `*`, so
/// O(tokens × chars) in the worst case.
fn glob_match(tokens: &[GlobToken], text: &[char]) -> bool {
    let (mut t, mut c) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if t < tokens.len() {
            if tokens[t] == GlobToken::Star {
                star = Some((t, c));
                t += 1;
                continue;
            }
            if c < text.len() && tokens[t].matches(text[c]) {
                t += 1;
                c += 1;
                continue;
            }
        } else if c == text.len() {
            return true;
        }
        match star {
            Some((st, sc)) if sc < text.len() => {
                star = Some((st, sc + 1));
                t = st + 1;
                c = sc + 1;
            }
            _ => return false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Commands

/// A command wildcard pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPattern {
    source: String,
    tokens: Vec<CommandToken>,
    /// The pattern ends in `[Break, Star]` (from ` *` or `:*`), which may also match nothing.
    optional_tail: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommandToken {
    Char(char),
    /// The boundary between two words.
    Break,
    /// Any run of characters and word boundaries.
    Star,
}

impl CommandPattern {
    /// The pattern as written.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    fn parse(source: &str) -> Result<Self, (usize, RuleErrorKind)> {
        let (body, prefix_form) = match source.strip_suffix(":*") {
            Some(body) if !body.ends_with('\\') => (body, true),
            _ => (source, false),
        };
        let mut tokens = Vec::new();
        let mut in_word = false;
        let mut chars = body.char_indices().peekable();
        let word_start = |tokens: &mut Vec<CommandToken>, in_word: &mut bool| {
            if !*in_word {
                if !tokens.is_empty() {
                    tokens.push(CommandToken::Break);
                }
                *in_word = true;
            }
        };
        while let Some((at, c)) = chars.next() {
            match c {
                ' ' | '\t' => in_word = false,
                '\'' => {
                    word_start(&mut tokens, &mut in_word);
                    loop {
                        match chars.next() {
                            Some((_, '\'')) => break,
                            Some((_, q)) => tokens.push(CommandToken::Char(q)),
                            None => return Err((at, RuleErrorKind::UnterminatedQuote)),
                        }
                    }
                }
                '"' => {
                    word_start(&mut tokens, &mut in_word);
                    loop {
                        match chars.next() {
                            Some((_, '"')) => break,
                            Some((_, '\\')) => match chars.next() {
                                Some((_, e @ ('"' | '\\' | '$' | '`'))) => {
                                    tokens.push(CommandToken::Char(e));
                                }
                                Some((_, e)) => {
                                    tokens.push(CommandToken::Char('\\'));
                                    tokens.push(CommandToken::Char(e));
                                }
                                None => return Err((at, RuleErrorKind::UnterminatedQuote)),
                            },
                            Some((_, q)) => tokens.push(CommandToken::Char(q)),
                            None => return Err((at, RuleErrorKind::UnterminatedQuote)),
                        }
                    }
                }
                '\\' => {
                    word_start(&mut tokens, &mut in_word);
                    match chars.next() {
                        Some((_, e)) => tokens.push(CommandToken::Char(e)),
                        None => return Err((at, RuleErrorKind::TrailingBackslash)),
                    }
                }
                '*' => {
                    word_start(&mut tokens, &mut in_word);
                    if tokens.last() != Some(&CommandToken::Star) {
                        tokens.push(CommandToken::Star);
                    }
                }
                ';' | '&' | '|' | '<' | '>' | '(' | ')' | '`' => {
                    return Err((at, RuleErrorKind::ShellOperator(c)));
                }
                c => {
                    word_start(&mut tokens, &mut in_word);
                    tokens.push(CommandToken::Char(c));
                }
            }
        }
        let optional_tail = if prefix_form {
            if !tokens.is_empty() {
                tokens.push(CommandToken::Break);
            }
            tokens.push(CommandToken::Star);
            true
        } else {
            tokens.len() >= 2
                && tokens[tokens.len() - 2..] == [CommandToken::Break, CommandToken::Star]
        };
        Ok(Self {
            source: source.to_owned(),
            tokens,
            optional_tail,
        })
    }

    fn matches(&self, argv: &[String]) -> bool {
        let mut subject = Vec::new();
        for (i, word) in argv.iter().enumerate() {
            if i > 0 {
                subject.push(CommandToken::Break);
            }
            subject.extend(word.chars().map(CommandToken::Char));
        }
        wildcard_match(&self.tokens, &subject)
            || (self.optional_tail
                && wildcard_match(
                    &self.tokens[..self.tokens.len().saturating_sub(2)],
                    &subject,
                ))
    }
}

/// Matches a subject against tokens where only [`CommandToken::Star`] is a wildcard (it
/// matches any run, word boundaries included). O(tokens × subject) in the worst case.
fn wildcard_match(tokens: &[CommandToken], subject: &[CommandToken]) -> bool {
    let (mut t, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if t < tokens.len() {
            if tokens[t] == CommandToken::Star {
                star = Some((t, s));
                t += 1;
                continue;
            }
            if s < subject.len() && tokens[t] == subject[s] {
                t += 1;
                s += 1;
                continue;
            }
        } else if s == subject.len() {
            return true;
        }
        match star {
            Some((st, ss)) if ss < subject.len() => {
                star = Some((st, ss + 1));
                t = st + 1;
                s = ss + 1;
            }
            _ => return false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hosts

/// A host pattern: an exact name or address, or `*.` and a domain; an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    source: String,
    /// Lower-cased, no trailing dot, no brackets around an IPv6 address.
    host: String,
    /// `*.host`: every name below `host`, not `host` itself.
    subdomains: bool,
    port: Option<u16>,
}

impl HostPattern {
    /// The pattern as written.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    fn parse(source: &str) -> Result<Self, (usize, RuleErrorKind)> {
        let (text, at) = match source.strip_prefix("domain:") {
            Some(rest) => (rest, "domain:".len()),
            None => (source, 0),
        };
        let bad = |offset: usize, why: &'static str| (at + offset, RuleErrorKind::BadHost(why));
        if text.is_empty() {
            return Err(bad(0, "empty host"));
        }
        if !text.is_ascii() {
            return Err(bad(0, "non-ASCII name: write its punycode (xn--) form"));
        }
        let (host_part, port_part) = if let Some(rest) = text.strip_prefix('[') {
            let Some(close) = rest.find(']') else {
                return Err(bad(0, "`[` without `]`"));
            };
            let address = &rest[..close];
            if address.is_empty()
                || !address
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
            {
                return Err(bad(1, "not an IPv6 address"));
            }
            let after = &rest[close + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some((p, close + 3)),
                None if after.is_empty() => None,
                None => return Err(bad(close + 2, "unexpected text after `]`")),
            };
            let host = Self {
                source: source.to_owned(),
                host: address.to_ascii_lowercase(),
                subdomains: false,
                port: None,
            };
            return Self::with_port(host, port, at);
        } else {
            match text.rsplit_once(':') {
                Some((h, p)) => (h, Some((p, h.len() + 1))),
                None => (text, None),
            }
        };
        let lowered = host_part.to_ascii_lowercase();
        let name = lowered.strip_suffix('.').unwrap_or(&lowered);
        let (subdomains, name, name_at) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest, 2),
            None => (false, name, 0),
        };
        if name.is_empty() {
            return Err(bad(name_at, "empty host"));
        }
        if name.len() > 253 {
            return Err(bad(name_at, "longer than 253 characters"));
        }
        let mut offset = name_at;
        for label in name.split('.') {
            if label.is_empty() {
                return Err(bad(offset, "empty label"));
            }
            if label.len() > 63 {
                return Err(bad(offset, "label longer than 63 characters"));
            }
            if let Some(i) =
                label.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            {
                return Err(bad(
                    offset + i,
                    "only letters, digits, `-` and `_` (and a leading `*.`) are allowed",
                ));
            }
            offset += label.len() + 1;
        }
        let host = Self {
            source: source.to_owned(),
            host: name.to_owned(),
            subdomains,
            port: None,
        };
        Self::with_port(host, port_part, at)
    }

    fn with_port(
        mut self,
        port: Option<(&str, usize)>,
        at: usize,
    ) -> Result<Self, (usize, RuleErrorKind)> {
        if let Some((digits, offset)) = port {
            let value = if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
                None
            } else {
                digits.parse::<u16>().ok().filter(|p| *p != 0)
            };
            match value {
                Some(p) => self.port = Some(p),
                None => return Err((at + offset, RuleErrorKind::BadPort)),
            }
        }
        Ok(self)
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        let lowered = host.to_ascii_lowercase();
        let mut name = lowered.as_str();
        if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            name = inner;
        }
        let name = name.strip_suffix('.').unwrap_or(name);
        if self.subdomains {
            name.len() > self.host.len() + 1
                && name.ends_with(self.host.as_str())
                && name.as_bytes()[name.len() - self.host.len() - 1] == b'.'
        } else {
            name == self.host
        }
    }
}

/// Parses `data` as a rule and matches it against a fixed set of commands, paths, hosts and
/// MCP tool names. The body of the `rule_matcher` fuzz target and of the test that replays its
/// corpus.
///
/// # Panics
///
/// When an invariant breaks: a parsed rule must print as text that parses back to the same
/// rule.
#[doc(hidden)]
pub fn exercise(data: &[u8]) {
    const COMMANDS: &[&[&str]] = &[
        &[],
        &["git", "status"],
        &["git", "status", "--short"],
        &["npm", "run", "test", "--watch"],
        &["rm", "-rf", "/"],
        &["bash", "-c", "rm -rf /"],
        &["echo", "a b", "*"],
        &["curl", "https://example.com"],
        &[""],
        &["a"; 64],
    ];
    const PATHS: &[&str] = &[
        "src/main.rs",
        ".env",
        "a/b/c/.env.local",
        "/work/proj/secrets/key.pem",
        "/home/dev/.ssh/id_ed25519",
        "/etc/passwd",
        "../outside",
        "",
        "/",
        "a/../../b",
    ];
    const HOSTS: &[(&str, u16)] = &[
        ("example.com", 443),
        ("www.example.com", 80),
        ("EXAMPLE.COM.", 8443),
        ("[::1]", 8080),
        ("127.0.0.1", 1),
        ("", 0),
    ];
    const MCP: &[&str] = &["mcp__github__get_issue", "mcp__github", "mcp____x", "Bash"];
    let text = String::from_utf8_lossy(data);
    let Ok(rule) = text.parse::<Rule>() else {
        return;
    };
    let printed = rule.to_string();
    match printed.parse::<Rule>() {
        Ok(again) => assert_eq!(again, rule, "`{text}` prints as `{printed}`"),
        Err(e) => panic!("`{text}` prints as `{printed}`, which does not parse: {e}"),
    }
    for argv in COMMANDS {
        let argv: Vec<String> = argv.iter().map(|w| (*w).to_owned()).collect();
        let _ = rule.matches_command(&argv);
    }
    let root = Path::new("/work/proj");
    let home = Path::new("/home/dev");
    for path in PATHS {
        for tool in Tool::ALL {
            let _ = rule.matches_path(tool, Path::new(path), root, home);
        }
    }
    for (host, port) in HOSTS {
        let _ = rule.matches_host(host, *port);
    }
    for name in MCP {
        let _ = rule.matches_mcp(name);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::*;

    fn rule(text: &str) -> Rule {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn words(line: &str) -> Vec<String> {
        if line.is_empty() {
            return Vec::new();
        }
        line.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn parses_tools_and_aliases() {
        let cases: &[(&str, &str)] = &[
            ("read_file", "read_file"),
            ("Read", "read_file"),
            ("Write", "write_file"),
            ("write_file", "write_file"),
            ("Edit", "edit_file"),
            ("edit_file", "edit_file"),
            ("Bash", "bash"),
            ("bash", "bash"),
            ("WebFetch", "web_fetch"),
            ("web_fetch", "web_fetch"),
            ("  Bash  ", "bash"),
            ("Bash(git status)", "bash(git status)"),
            ("Bash( git status )", "bash(git status)"),
            ("Read(~/.ssh/**)", "read_file(~/.ssh/**)"),
            (
                "WebFetch(domain:example.com)",
                "web_fetch(domain:example.com)",
            ),
            ("mcp__github__get_issue", "mcp__github__get_issue"),
            ("mcp__github__*", "mcp__github__*"),
            ("mcp__github", "mcp__github__*"),
            ("mcp__my-server__do_thing", "mcp__my-server__do_thing"),
        ];
        for (text, canonical) in cases {
            assert_eq!(rule(text).to_string(), *canonical, "{text}");
        }
        // Every canonical form parses back to the same rule.
        for (text, _) in cases {
            let parsed = rule(text);
            assert_eq!(rule(&parsed.to_string()), parsed, "{text}");
        }
    }

    #[test]
    fn rejects_malformed_rules_with_position() {
        let cases: &[(&str, usize, RuleErrorKind)] = &[
            ("", 0, RuleErrorKind::Empty),
            ("   ", 0, RuleErrorKind::Empty),
            ("Grep", 0, RuleErrorKind::UnknownTool("Grep".into())),
            ("bash(", 5, RuleErrorKind::Unclosed),
            ("Bash(ls", 7, RuleErrorKind::Unclosed),
            ("Bash)", 4, RuleErrorKind::Trailing),
            ("Bash(ls) x", 10, RuleErrorKind::Unclosed),
            ("Bash()", 5, RuleErrorKind::EmptyPattern),
            ("Bash(  )", 5, RuleErrorKind::EmptyPattern),
            ("Bash(a && b)", 7, RuleErrorKind::ShellOperator('&')),
            ("Bash(a; b)", 6, RuleErrorKind::ShellOperator(';')),
            ("Bash(a | b)", 7, RuleErrorKind::ShellOperator('|')),
            ("Bash(echo > f)", 10, RuleErrorKind::ShellOperator('>')),
            ("Bash(echo $(id))", 11, RuleErrorKind::ShellOperator('(')),
            ("Bash(echo 'x)", 10, RuleErrorKind::UnterminatedQuote),
            ("Bash(echo x\\)", 11, RuleErrorKind::TrailingBackslash),
            ("Read(../x)", 5, RuleErrorKind::DotComponent),
            ("Read(a/./b)", 7, RuleErrorKind::DotComponent),
            ("Read(a//b)", 7, RuleErrorKind::EmptyComponent),
            ("Read(!x)", 5, RuleErrorKind::Negation),
            ("Read(a/[bc)", 7, RuleErrorKind::UnclosedClass),
            ("Read(a\\)", 6, RuleErrorKind::TrailingBackslash),
            ("  Read(../x)", 7, RuleErrorKind::DotComponent),
            (
                "WebFetch(exa mple.com)",
                12,
                RuleErrorKind::BadHost(
                    "only letters, digits, `-` and `_` (and a leading `*.`) are allowed",
                ),
            ),
            ("WebFetch(example.com:0)", 21, RuleErrorKind::BadPort),
            ("WebFetch(example.com:70000)", 21, RuleErrorKind::BadPort),
            ("WebFetch(example.com:)", 21, RuleErrorKind::BadPort),
            ("WebFetch(a..b)", 11, RuleErrorKind::BadHost("empty label")),
            (
                "WebFetch(*.)",
                9,
                RuleErrorKind::BadHost(
                    "only letters, digits, `-` and `_` (and a leading `*.`) are allowed",
                ),
            ),
            ("WebFetch(*..)", 11, RuleErrorKind::BadHost("empty host")),
            (
                "WebFetch(a.*.b)",
                11,
                RuleErrorKind::BadHost(
                    "only letters, digits, `-` and `_` (and a leading `*.`) are allowed",
                ),
            ),
            (
                "WebFetch(bücher.de)",
                9,
                RuleErrorKind::BadHost("non-ASCII name: write its punycode (xn--) form"),
            ),
            ("mcp__", 0, RuleErrorKind::BadMcpName("mcp__".into())),
            (
                "mcp____tool",
                0,
                RuleErrorKind::BadMcpName("mcp____tool".into()),
            ),
            ("mcp__s__", 0, RuleErrorKind::BadMcpName("mcp__s__".into())),
            ("mcp__s__t(x)", 9, RuleErrorKind::NoPatternAllowed),
            ("Bash(a\nb)", 6, RuleErrorKind::ControlCharacter),
        ];
        for (text, position, reason) in cases {
            let err = text.parse::<Rule>().expect_err(text);
            assert_eq!(
                (err.position, &err.reason),
                (*position, reason),
                "{text}: {err}"
            );
            assert_eq!(err.rule, *text);
            assert!(err.to_string().contains(&format!("at byte {position}")));
        }
        let long = format!("Bash({})", "a".repeat(MAX_RULE_BYTES));
        assert_eq!(
            long.parse::<Rule>().unwrap_err().reason,
            RuleErrorKind::TooLong
        );
        // The limit is on the printed form: an alias that prints longer cannot slip past it.
        let alias = format!("Edit({})", "a".repeat(MAX_RULE_BYTES - 6));
        assert_eq!(
            alias.parse::<Rule>().unwrap_err().reason,
            RuleErrorKind::TooLong
        );
        let fits = format!("edit_file({})", "a".repeat(MAX_RULE_BYTES - 11));
        assert_eq!(
            fits.parse::<Rule>().unwrap().to_string().len(),
            MAX_RULE_BYTES
        );
    }

    #[test]
    fn matches_commands() {
        let cases: &[(&str, &str, bool)] = &[
            ("Bash", "anything at all", true),
            ("Bash", "", true),
            ("Bash(git status)", "git status", true),
            ("Bash(git status)", "git status --short", false),
            ("Bash(git status)", "git", false),
            ("Bash(git  status)", "git status", true),
            ("Bash(git *)", "git status", true),
            ("Bash(git *)", "git log -p", true),
            ("Bash(git *)", "git", true),
            ("Bash(git *)", "gitk", false),
            ("Bash(git*)", "gitk", true),
            ("Bash(git * --force)", "git push origin --force", true),
            ("Bash(git * --force)", "git push --force-with-lease", false),
            ("Bash(npm run test:*)", "npm run test", true),
            ("Bash(npm run test:*)", "npm run test --watch", true),
            ("Bash(npm run test:*)", "npm run testing", false),
            ("Bash(npm run test:*)", "npm run", false),
            ("Bash(ls:*)", "ls -la", true),
            ("Bash(rm *)", "rm -rf /", true),
            ("Bash(rm *)", "rm", true),
            ("Bash(rm *)", "rmdir x", false),
            ("Bash(*)", "anything", true),
            ("Bash(*)", "", true),
            ("Bash(echo 'a b')", "echo a b", false),
            ("Bash(echo *)", "echo a b", true),
            ("Bash(a*b)", "aXXb", true),
            ("Bash(a*b)", "aXXc", false),
            (
                "Bash(*a*a*a*a*a*a*a*b)",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            ("Bash(echo \\*)", "echo *", true),
            ("Bash(echo \\*)", "echo x", false),
            ("Bash(echo \"*\")", "echo *", true),
            ("Bash(echo '*')", "echo x", false),
            ("Read", "git status", false),
            ("WebFetch", "git status", false),
        ];
        for (text, line, expected) in cases {
            assert_eq!(
                rule(text).matches_command(&words(line)),
                *expected,
                "{text} vs {line}"
            );
        }
        // Word boundaries are real: one word "git status" is not two words.
        let r = rule("Bash(git status)");
        assert!(!r.matches_command(&["git status".to_owned()]));
        assert!(rule("Bash(echo 'a b')").matches_command(&["echo".to_owned(), "a b".to_owned()]));
        assert!(rule("Bash(echo \"a b\")").matches_command(&["echo".to_owned(), "a b".to_owned()]));
    }

    #[test]
    fn an_always_rule_matches_exactly_what_was_asked() {
        let root = PathBuf::from("/work/proj");
        let home = PathBuf::from("/home/dev");
        let at = |p: &str| root.join(p);
        // Blanks at either end are trimmed by the parser: no rule (`" "` would be `/`, the
        // whole project; `"src "` the folder `src`). Control: `src` alone is a rule that
        // covers what is in the folder.
        for path in [" ", "src ", "src\u{a0}", "\u{200a}src", ""] {
            assert!(
                Rule::exactly_path(Tool::EditFile, path).is_none(),
                "{path:?}"
            );
        }
        let folder = Rule::exactly_path(Tool::EditFile, "src").unwrap();
        assert!(folder.matches_path(Tool::EditFile, &at("src/a.rs"), &root, &home));
        assert!(Rule::exactly_command(&[String::new(), "rm".into()]).is_none());
        for path in [
            "src/a.rs",
            "a*.rs",
            "d[1]/x?.txt",
            "we(ird)/!x\\y",
            "sp ace.txt",
        ] {
            let rule = Rule::exactly_path(Tool::EditFile, path).unwrap();
            assert!(
                rule.matches_path(Tool::EditFile, &at(path), &root, &home),
                "{rule} {path}"
            );
            assert!(
                rule.matches_path(Tool::WriteFile, &at(path), &root, &home),
                "{rule} {path}"
            );
            // Printed and parsed again, the same rule.
            assert_eq!(rule.to_string().parse::<Rule>().unwrap(), rule);
        }
        let star = Rule::exactly_path(Tool::EditFile, "a*.rs").unwrap();
        assert!(!star.matches_path(Tool::EditFile, &at("ab.rs"), &root, &home));
        assert!(!star.matches_path(Tool::EditFile, &at("sub/a*.rs"), &root, &home));
        let plain = Rule::exactly_path(Tool::WriteFile, "src/a.rs").unwrap();
        assert!(!plain.matches_path(Tool::EditFile, &at("src/a.rs"), &root, &home));
        assert!(!plain.matches_path(Tool::WriteFile, &at("src/a.rs.bak"), &root, &home));
        // Control: the same text unescaped is a wildcard.
        let wild: Rule = "Edit(/a*.rs)".parse().unwrap();
        assert!(wild.matches_path(Tool::EditFile, &at("ab.rs"), &root, &home));

        let words = |w: &[&str]| w.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        for argv in [
            words(&["cargo", "test"]),
            words(&["echo", "it's", "*", "a b", "$HOME", "\\"]),
            words(&["rm", "-rf", "x*"]),
        ] {
            let rule = Rule::exactly_command(&argv).unwrap();
            assert!(rule.matches_command(&argv), "{rule}");
            assert_eq!(rule.to_string().parse::<Rule>().unwrap(), rule);
        }
        let rm = Rule::exactly_command(&words(&["rm", "-rf", "x*"])).unwrap();
        assert!(!rm.matches_command(&words(&["rm", "-rf", "xyz"])));
        assert!(!rm.matches_command(&words(&["rm", "-rf", "x*", "/"])));
        let test = Rule::exactly_command(&words(&["cargo", "test"])).unwrap();
        assert!(!test.matches_command(&words(&["cargo", "test", "--release"])));
        // Control: the same words unquoted are a wildcard.
        let wild: Rule = "Bash(rm -rf x*)".parse().unwrap();
        assert!(wild.matches_command(&words(&["rm", "-rf", "xyz"])));
    }

    #[test]
    fn matches_paths() {
        let root = PathBuf::from("/work/proj");
        let home = PathBuf::from("/home/dev");
        let cases: &[(&str, Tool, &str, bool)] = &[
            ("Read", Tool::ReadFile, "anything", true),
            ("Read", Tool::WriteFile, "anything", false),
            ("Read", Tool::Bash, "anything", false),
            ("Edit(src/**)", Tool::WriteFile, "src/a.rs", true),
            ("Write(src/**)", Tool::EditFile, "src/a.rs", false),
            // Unanchored names match at any depth inside the project.
            ("Read(.env)", Tool::ReadFile, ".env", true),
            ("Read(.env)", Tool::ReadFile, "a/b/.env", true),
            ("Read(.env)", Tool::ReadFile, "/work/proj/a/.env", true),
            ("Read(.env)", Tool::ReadFile, "/elsewhere/.env", false),
            ("Read(.env)", Tool::ReadFile, ".env.local", false),
            ("Read(*.pem)", Tool::ReadFile, "keys/prod.pem", true),
            ("Read(*.pem)", Tool::ReadFile, "keys/prod.pem.bak", false),
            ("Read(*)", Tool::ReadFile, ".hidden", true),
            // A directory covers its contents.
            ("Read(secrets)", Tool::ReadFile, "secrets/prod/key", true),
            ("Read(secrets/)", Tool::ReadFile, "a/secrets/key", true),
            ("Read(secrets/)", Tool::ReadFile, "secretsx/key", false),
            // Anchored at the project root.
            ("Edit(/build)", Tool::EditFile, "build/x", true),
            ("Edit(/build)", Tool::EditFile, "a/build/x", false),
            ("Edit(./build)", Tool::EditFile, "build", true),
            ("Edit(src/*.rs)", Tool::EditFile, "src/main.rs", true),
            ("Edit(src/*.rs)", Tool::EditFile, "src/a/main.rs", false),
            ("Edit(src/*.rs)", Tool::EditFile, "lib/src/main.rs", false),
            ("Edit(src/**/*.rs)", Tool::EditFile, "src/main.rs", true),
            ("Edit(src/**/*.rs)", Tool::EditFile, "src/a/b/main.rs", true),
            ("Edit(**/*.rs)", Tool::EditFile, "main.rs", true),
            ("Edit(**/*.rs)", Tool::EditFile, "a/b/main.rs", true),
            ("Edit(src/**)", Tool::EditFile, "src", false),
            ("Edit(src/**)", Tool::EditFile, "src/x", true),
            ("Edit(/)", Tool::EditFile, "anything/here", true),
            ("Edit(/)", Tool::EditFile, "/tmp/x", false),
            ("Edit(src/?.rs)", Tool::EditFile, "src/a.rs", true),
            ("Edit(src/?.rs)", Tool::EditFile, "src/ab.rs", false),
            ("Edit(src/[a-c].rs)", Tool::EditFile, "src/b.rs", true),
            ("Edit(src/[!a-c].rs)", Tool::EditFile, "src/b.rs", false),
            ("Edit(src/[!a-c].rs)", Tool::EditFile, "src/d.rs", true),
            ("Edit(src/[]].rs)", Tool::EditFile, "src/].rs", true),
            ("Edit(a\\*b)", Tool::EditFile, "a*b", true),
            ("Edit(a\\*b)", Tool::EditFile, "axb", false),
            // `..` in the request is resolved before matching.
            (
                "Edit(src/**)",
                Tool::EditFile,
                "src/../../etc/passwd",
                false,
            ),
            ("Edit(src/**)", Tool::EditFile, "other/../src/x", true),
            // Home.
            (
                "Read(~/.ssh/**)",
                Tool::ReadFile,
                "/home/dev/.ssh/id_ed25519",
                true,
            ),
            (
                "Read(~/.ssh)",
                Tool::ReadFile,
                "/home/dev/.ssh/id_ed25519",
                true,
            ),
            (
                "Read(~/.ssh/**)",
                Tool::ReadFile,
                "/home/other/.ssh/id",
                false,
            ),
            ("Read(~)", Tool::ReadFile, "/home/dev/x", true),
            ("Read(~)", Tool::ReadFile, "/home/devx", false),
            // Absolute.
            ("Read(//etc/passwd)", Tool::ReadFile, "/etc/passwd", true),
            (
                "Read(//etc/passwd)",
                Tool::ReadFile,
                "/etc/passwd.bak",
                false,
            ),
            ("Read(//etc/*)", Tool::ReadFile, "/etc/shadow", true),
            ("Read(//**/*.pem)", Tool::ReadFile, "/srv/x/key.pem", true),
            ("Read(//**/*.pem)", Tool::ReadFile, "key.pem", true),
            ("Read(//)", Tool::ReadFile, "/anything", true),
            (
                "Read(//**/a/**/b/**/c)",
                Tool::ReadFile,
                "/x/a/y/b/z/c",
                true,
            ),
            (
                "Read(//**/a/**/b/**/c)",
                Tool::ReadFile,
                "/x/a/y/c/z/b",
                false,
            ),
        ];
        for (text, tool, path, expected) in cases {
            assert_eq!(
                rule(text).matches_path(*tool, Path::new(path), &root, &home),
                *expected,
                "{text} vs {tool} {path}"
            );
        }
    }

    #[test]
    fn matches_hosts() {
        let cases: &[(&str, &str, u16, bool)] = &[
            ("WebFetch", "anything.test", 443, true),
            ("WebFetch(example.com)", "example.com", 443, true),
            ("WebFetch(example.com)", "EXAMPLE.com.", 80, true),
            ("WebFetch(example.com)", "www.example.com", 443, false),
            ("WebFetch(example.com)", "badexample.com", 443, false),
            ("WebFetch(Example.COM.)", "example.com", 443, true),
            ("WebFetch(*.example.com)", "www.example.com", 443, true),
            ("WebFetch(*.example.com)", "a.b.example.com", 443, true),
            ("WebFetch(*.example.com)", "example.com", 443, false),
            ("WebFetch(*.example.com)", "badexample.com", 443, false),
            ("WebFetch(*.example.com)", ".example.com", 443, false),
            ("WebFetch(example.com:8443)", "example.com", 8443, true),
            ("WebFetch(example.com:8443)", "example.com", 443, false),
            ("WebFetch(*.example.com:443)", "api.example.com", 443, true),
            ("WebFetch(domain:docs.rs)", "docs.rs", 443, true),
            ("WebFetch(127.0.0.1:8080)", "127.0.0.1", 8080, true),
            ("WebFetch([::1]:8080)", "[::1]", 8080, true),
            ("WebFetch([::1])", "::1", 1, true),
            ("WebFetch([::1])", "::2", 1, false),
            ("Bash", "example.com", 443, false),
        ];
        for (text, host, port, expected) in cases {
            assert_eq!(
                rule(text).matches_host(host, *port),
                *expected,
                "{text} vs {host}:{port}"
            );
        }
    }

    #[test]
    fn matches_mcp_tools() {
        let cases: &[(&str, &str, bool)] = &[
            ("mcp__github__get_issue", "mcp__github__get_issue", true),
            ("mcp__github__get_issue", "mcp__github__list_issues", false),
            ("mcp__github__*", "mcp__github__list_issues", true),
            ("mcp__github", "mcp__github__list_issues", true),
            ("mcp__github__*", "mcp__gitlab__list_issues", false),
            ("mcp__github__*", "mcp__github", false),
            ("mcp__git__*", "mcp__github__x", false),
            ("Bash", "mcp__github__x", false),
        ];
        for (text, name, expected) in cases {
            assert_eq!(rule(text).matches_mcp(name), *expected, "{text} vs {name}");
        }
        assert!(!rule("mcp__github").matches_command(&words("ls")));
        assert!(!rule("mcp__github").matches_path(
            Tool::ReadFile,
            Path::new("x"),
            Path::new("/p"),
            Path::new("/h")
        ));
    }

    #[test]
    fn matching_stays_polynomial() {
        // Patterns built to make naive backtracking explode.
        let star_heavy = format!("Read(//{})", "*a".repeat(40) + "b");
        let r = rule(&star_heavy);
        let path = format!("/{}", "a".repeat(200));
        assert!(!r.matches_path(
            Tool::ReadFile,
            Path::new(&path),
            Path::new("/p"),
            Path::new("/h")
        ));
        let any_heavy = format!("Read(//{}z)", "**/a/".repeat(30));
        let r = rule(&any_heavy);
        let path = "/a".repeat(200);
        assert!(!r.matches_path(
            Tool::ReadFile,
            Path::new(&path),
            Path::new("/p"),
            Path::new("/h")
        ));
        let r = rule(&format!("Bash({}b)", "*a".repeat(100)));
        assert!(!r.matches_command(&["a".repeat(1000)]));
    }
}
