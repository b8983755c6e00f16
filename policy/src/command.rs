//! Splitting a shell command line into every simple command it would run.
//!
//! A `bash` rule such as `Bash(git status)` is matched against *each* simple command of a line,
//! never against the line as text: `git status && curl x | sh` runs three programs, and an allow
//! rule must cover all three (a deny rule needs to match just one). [`split`] produces that list.
//!
//! # The parser
//!
//! The line is parsed by [`brush_parser`], the parser of the `brush` shell (MIT, pure Rust, no
//! `unsafe` in our use, MSRV 1.88). The candidates weighed were:
//!
//! - **brush-parser**: a full bash grammar (tokenizer with here-documents, a PEG parser for
//!   compound commands, and a separate word parser for quoting, parameter expansion, `$(…)`,
//!   backticks and arithmetic), built to run real bash scripts and tested against bash. Chosen.
//! - **yash-syntax**: a careful POSIX parser, but GPL-3.0 (this project is Apache-2.0) and its
//!   API is asynchronous; rejected.
//! - **conch-parser**: unmaintained since 2017 and POSIX-only (no `[[`, `$'…'`, `&>`); rejected.
//! - **tree-sitter-bash**: an error-*recovering* grammar in C, meant for editors: a broken line
//!   still yields a tree, so "cannot parse" has to be reconstructed from `ERROR` nodes, and
//!   words are not unquoted; rejected.
//! - **shell-words** / **shlex**: word splitters, not parsers of compound commands.
//!
//! # What we add on top
//!
//! - **Fail closed.** A line the parser rejects, longer than [`MAX_LINE_BYTES`], nesting deeper
//!   than [`MAX_DEPTH`], or with more than [`MAX_NESTING_TOKENS`] brackets and keywords is an
//!   [`Err`]; the engine never lets such a line match an allow rule. A panic inside the parser
//!   is caught and also becomes an error.
//! - **Bounded stack.** The parsers recurse once per nesting level, so every text handed to
//!   them first passes a quote-blind count of the characters and keywords that can open a
//!   level (an upper bound on the nesting, whatever the quoting). From that count each text
//!   gets the stack it may need ([`STACK_BASE_BYTES`] and [`STACK_PER_LEVEL_BYTES`] per
//!   level): on the caller's stack when that much of it is left (an ordinary line on any
//!   thread), else on a fresh stack of at least [`PARSER_STACK_BYTES`] (`stacker`).
//! - **Guards against brush's own failure modes**, found by fuzzing (`fuzz/`): an empty
//!   here-document delimiter (`<<''`) makes its tokenizer loop forever, a file descriptor or
//!   tilde index that overflows makes it panic, and unclosed `(` make its grammars backtrack
//!   exponentially. Each shape is refused before the parser sees it (an unclosed `(` is a
//!   syntax error in bash anyway; words with a substitution may hold at most
//!   [`MAX_WORD_PARENTHESES`] `(` and [`MAX_WORD_SUBSCRIPTS`] `${name[`), and the seed corpus
//!   keeps the inputs as regressions.
//! - **Cross-checks.** brush tokenizes a line and parses words with two different parsers.
//!   Where they could disagree about where a `$(…)` ends (a `#` comment or a here-document
//!   inside it), the command text is checked with the tokenizer again, and an unquoted piece of
//!   a word that still holds a shell operator or a blank is an error: a disagreement could
//!   otherwise hide a command from the rules. brush reads `( (a) )`, `((a) )` and `$((a);(b))`
//!   as arithmetic where bash runs subshells; those are split as the commands bash runs.
//! - **Wrappers.** `bash -c '…'` (and `sh`, `zsh`, `dash`, `ksh`), `env`, `command`,
//!   `builtin`, `exec`, `nohup`, `time`, `nice`, `timeout`, `sudo`, `xargs` and
//!   `find -exec … ;` run another command: both the wrapper and the wrapped command are
//!   reported, so `Bash(git status)` does not allow `sudo git status` and a deny on `rm`
//!   catches `sudo rm`. A command named by a path (`/bin/rm`) is also reported by its last
//!   component (`rm`), and a command with leading assignments (`FOO=1 rm x`) also without
//!   them.
//! - **Dynamic.** A word whose value is not known before the shell runs (`$VAR`, `$(…)`, a glob,
//!   a brace expansion) is kept as written and its command is marked [`SimpleCommand::dynamic`].
//!   `eval`, `trap`, `source` / `.`, `bash` without `-c` (a script file or standard input) and
//!   `xargs` (arguments from standard input) are dynamic too: what they run is not on the line.
//!   The command substitutions of a dynamic word are still split and reported.
//!
//! ```
//! let commands = garuda_policy::command::split("git status && curl x | sh").unwrap();
//! let argvs: Vec<_> = commands.iter().map(|c| c.argv.join(" ")).collect();
//! assert_eq!(argvs, ["git status", "curl x", "sh"]);
//! ```

use std::fmt;

use brush_parser::ast;
use brush_parser::word::{ParameterExpr, WordPiece, WordPieceWithSource};
use brush_parser::ParserOptions;

/// The longest command line [`split`] accepts, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The deepest nesting [`split`] accepts: compound commands, command and process
/// substitutions, `bash -c` scripts and wrapped commands each add a level.
pub const MAX_DEPTH: usize = 32;

/// The most characters and keywords that can open a nesting level (`(`, `{`, `[`, `` ` ``, `!`,
/// `if`, `case`, `while`, `until`, `for`, `select`, `function`, `coproc`) that one text handed
/// to the parser may contain, counted without regard to quoting. It bounds how deep the parser
/// can recurse, so it bounds the stack the parser needs.
pub const MAX_NESTING_TOKENS: usize = 1024;

/// The stack a text that needs more than the caller has left is parsed on. The parser needs
/// at most about 20 KiB per nesting level (measured on debug builds), so
/// [`MAX_NESTING_TOKENS`] levels fit with room.
pub const PARSER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Stack a text is given besides its nesting levels: the parser's and the walker's own frames.
pub const STACK_BASE_BYTES: usize = 256 * 1024;

/// Stack a text is given per nesting token it holds: the parser's frames for one level and
/// the walker's for the commands it finds there. Debug builds, whose frames are the largest,
/// need between 12 and 24 KiB (`the_stack_per_level_covers_each_nesting_shape` overflows at
/// 12), so this is twice the most measured.
pub const STACK_PER_LEVEL_BYTES: usize = 48 * 1024;

/// How many characters of an offending line an error message quotes.
const PREVIEW_CHARS: usize = 120;

/// One simple command of a command line: what the shell would `exec` (or run as a builtin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words of the command after quote removal. A word containing an expansion whose
    /// value cannot be known before the command runs (`$VAR`, `$(…)`, a glob, a brace
    /// expansion) is kept as written, quotes included, and [`SimpleCommand::dynamic`] is set.
    /// Leading assignments (`FOO=1`) are words too; the same command is also reported without
    /// them. Empty when the command is only a redirection (`> file`).
    pub argv: Vec<String>,
    /// The files its redirections write or truncate (`>`, `>>`, `>|`, `&>`, `&>>`, `<>`,
    /// `>&file`), including those of an enclosing compound command (`{ a; } > f`). Duplications
    /// such as `2>&1` are not writes. Kept as written when dynamic.
    pub writes: Vec<String>,
    /// Some word or redirection target cannot be known statically, or the command runs code
    /// that is not on the line (`eval`, `source`, `xargs`, a shell reading a file).
    pub dynamic: bool,
    /// The files read by `<` redirections seen since the previous command was reported (its
    /// own, or those of an enclosing compound command). Kept as written.
    pub reads: Vec<String>,
}

/// Why a command line could not be split. The engine treats every one of these the same way:
/// the line never matches an allow rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("command line has {len} bytes, more than the limit of {max}")]
    TooLong {
        /// Length of the line in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The line (or a script nested in it) nests deeper than [`MAX_DEPTH`].
    #[error("command line `{line}` nests deeper than {max} levels")]
    TooDeep {
        /// The start of the text that went too deep.
        line: String,
        /// The limit.
        max: usize,
    },
    /// A text handed to the parser has more than [`MAX_NESTING_TOKENS`] brackets and keywords,
    /// or a word with a substitution has more than [`MAX_WORD_PARENTHESES`] `(`.
    #[error(
        "command line `{line}` has {count} brackets and keywords, more than the limit of {max}"
    )]
    TooComplex {
        /// The start of the offending text.
        line: String,
        /// How many were counted.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The shell parser rejected the line (or a script nested in it).
    #[error("cannot parse command line `{line}`{}: {reason}", at.map(|(l, c)| format!(" at line {l}, column {c}")).unwrap_or_default())]
    Syntax {
        /// The start of the text that did not parse.
        line: String,
        /// Line and column (1-based) of the error, when the parser reports one.
        at: Option<(usize, usize)>,
        /// The parser's message.
        reason: String,
    },
    /// The parser failed in an unexpected way (it panicked).
    #[error("cannot parse command line `{line}`: internal parser failure: {reason}")]
    Internal {
        /// The start of the line.
        line: String,
        /// What went wrong.
        reason: String,
    },
}

/// Splits `line` into every simple command it would run, in source order, wrappers before the
/// commands they wrap. See the [module documentation](self) for what counts and why.
///
/// # Errors
///
/// [`SplitError`] when the line is too long, too deep, too complex or does not parse. The
/// caller must never let such a line match an allow rule.
pub fn split(line: &str) -> Result<Vec<SimpleCommand>, SplitError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(SplitError::TooLong {
            len: line.len(),
            max: MAX_LINE_BYTES,
        });
    }
    parser::run(line)
}

/// The parser's entry: a panic inside it is caught and is that line's
/// [`SplitError::Internal`]. It runs on the calling thread. It used to run on a thread of its
/// own with a [`PARSER_STACK_BYTES`] stack, which put two thread wake-ups (there and back) on
/// every command an agent runs; [`Walker::script`] now gives each text the stack it needs.
mod parser {
    use super::{panic_message, preview, SimpleCommand, SplitError, Walker};

    pub(super) fn run(line: &str) -> Result<Vec<SimpleCommand>, SplitError> {
        std::panic::catch_unwind(|| parse(line)).unwrap_or_else(|panic| {
            Err(SplitError::Internal {
                line: preview(line),
                reason: panic_message(panic.as_ref()),
            })
        })
    }

    /// A line the parser panics on, in tests only: the panic's path has no other way in.
    #[cfg(test)]
    pub(super) const PANIC_FOR_TEST: &str = "\u{0}the parser panics on this line";

    fn parse(line: &str) -> Result<Vec<SimpleCommand>, SplitError> {
        #[cfg(test)]
        if line == PANIC_FOR_TEST {
            panic!("as the test asked");
        }
        let mut walker = Walker::new();
        walker.script(line, 0, &[])?;
        if !walker.reads.is_empty() {
            // Read by a redirection with no command (`< file`): still a read of the line.
            let reads = std::mem::take(&mut walker.reads);
            walker.out.push(SimpleCommand {
                argv: Vec::new(),
                writes: Vec::new(),
                dynamic: false,
                reads,
            });
        }
        Ok(walker.out)
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("parser panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("parser panicked: {s}")
    } else {
        "parser panicked".to_owned()
    }
}

/// The first [`PREVIEW_CHARS`] characters of `text`, for error messages.
fn preview(text: &str) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(PREVIEW_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Counts what can open a nesting level in any of brush's parsers, ignoring quoting entirely,
/// so the count is an upper bound on the depth the parsers can reach on `text`, and on the
/// depth of the tree the walker then recurses through.
///
/// Also counted: every `&&` and `||`, because a `[[ … ]]` expression nests one tree level per
/// operator (`[[ a&&a&&a… ]]`), which the walker and the tree's drop recurse through; and
/// keywords split by a backslash-newline (`i\⏎f`), which the tokenizer joins before it
/// matches keywords.
fn count_nesting_tokens(text: &str) -> usize {
    const KEYWORDS: [&str; 8] = [
        "if", "case", "while", "until", "for", "select", "function", "coproc",
    ];
    let joined = text.replace("\\\n", "");
    let operators = joined.matches("&&").count() + joined.matches("||").count();
    let mut count = operators;
    let mut word = String::new();
    for c in joined.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphabetic() {
            if word.len() <= 8 {
                word.push(c);
            }
            continue;
        }
        if !word.is_empty() {
            if KEYWORDS.contains(&word.as_str()) {
                count += 1;
            }
            word.clear();
        }
        if matches!(c, '(' | '{' | '[' | '`' | '!') {
            count += 1;
        }
    }
    count
}

/// A word after analysis: its text and whether that text is only known at run time.
#[derive(Debug, Clone)]
struct Analyzed {
    text: String,
    dynamic: bool,
}

/// Where a word appears; decides how strictly its unquoted text is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WordUse {
    /// A command word or redirection target: unquoted text never holds blanks or operators.
    Command,
    /// An assignment, a `case` pattern, a `[[ … ]]` operand: parentheses and `|` are legitimate
    /// there (arrays, alternatives, regular expressions).
    Loose,
}

struct Walker {
    options: ParserOptions,
    out: Vec<SimpleCommand>,
    /// `<` targets not yet attached to a reported command.
    reads: Vec<String>,
    /// The texts being walked, innermost last: source spans in the syntax tree index into it.
    texts: Vec<Vec<char>>,
}

impl Walker {
    fn new() -> Self {
        Self {
            options: ParserOptions::default(),
            out: Vec::new(),
            reads: Vec::new(),
            texts: Vec::new(),
        }
    }

    fn enter(depth: usize, text: &str) -> Result<usize, SplitError> {
        let next = depth + 1;
        if next > MAX_DEPTH {
            return Err(SplitError::TooDeep {
                line: preview(text),
                max: MAX_DEPTH,
            });
        }
        Ok(next)
    }

    /// Refuses a text with more nesting tokens than [`MAX_NESTING_TOKENS`]; else the stack
    /// parsing and walking it may need.
    fn check_complexity(text: &str) -> Result<usize, SplitError> {
        let count = count_nesting_tokens(text);
        if count > MAX_NESTING_TOKENS {
            return Err(SplitError::TooComplex {
                line: preview(text),
                count,
                max: MAX_NESTING_TOKENS,
            });
        }
        Ok(STACK_BASE_BYTES + count * STACK_PER_LEVEL_BYTES)
    }

    /// Parses `text` as a whole script and walks it. `writes` are redirections inherited from an
    /// enclosing command.
    fn script(&mut self, text: &str, depth: usize, writes: &[String]) -> Result<(), SplitError> {
        if depth > MAX_DEPTH {
            return Err(SplitError::TooDeep {
                line: preview(text),
                max: MAX_DEPTH,
            });
        }
        let stack = Self::check_complexity(text)?;
        // A nested text (`bash -c '…'`, a substitution) is parsed from inside the walk of the
        // text around it, so each one makes sure of its own stack where it starts.
        stacker::maybe_grow(stack, stack.max(PARSER_STACK_BYTES), || {
            check_heredoc_delimiters(text)?;
            check_numbers(text)?;
            check_parentheses(text)?;
            let mut parser =
                brush_parser::Parser::new(std::io::Cursor::new(text.as_bytes()), &self.options);
            let program = parser.parse_program().map_err(|e| syntax_error(text, &e))?;
            self.texts.push(text.chars().collect());
            let walked = program
                .complete_commands
                .iter()
                .try_for_each(|list| self.compound_list(list, depth, writes));
            self.texts.pop();
            walked
        })
    }

    fn compound_list(
        &mut self,
        list: &ast::CompoundList,
        depth: usize,
        writes: &[String],
    ) -> Result<(), SplitError> {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth, writes)?;
            for next in &and_or.additional {
                let (ast::AndOr::And(p) | ast::AndOr::Or(p)) = next;
                self.pipeline(p, depth, writes)?;
            }
        }
        Ok(())
    }

    /// Records a construct whose effect cannot be known from its text (arithmetic, `[[ … ]]`,
    /// a loop variable) as a dynamic pseudo-command named `label`: no allow rule covers it, so a
    /// line holding one is asked outside the sandbox.
    fn opaque(&mut self, label: &str, writes: Vec<String>) {
        let reads = std::mem::take(&mut self.reads);
        self.out.push(SimpleCommand {
            argv: vec![label.to_owned()],
            writes,
            dynamic: true,
            reads,
        });
    }

    fn pipeline(
        &mut self,
        pipeline: &ast::Pipeline,
        depth: usize,
        writes: &[String],
    ) -> Result<(), SplitError> {
        for command in &pipeline.seq {
            self.command(command, depth, writes)?;
        }
        Ok(())
    }

    fn command(
        &mut self,
        command: &ast::Command,
        depth: usize,
        writes: &[String],
    ) -> Result<(), SplitError> {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, depth, writes),
            ast::Command::Compound(compound, redirects) => {
                let inner = Self::enter(depth, "compound command")?;
                let (writes, _) = self.redirect_list(redirects.as_ref(), inner, writes)?;
                self.compound(compound, inner, &writes)
            }
            ast::Command::Function(def) => {
                let inner = Self::enter(depth, "function definition")?;
                let ast::FunctionBody(body, redirects) = &def.body;
                let (writes, _) = self.redirect_list(redirects.as_ref(), inner, writes)?;
                self.compound(body, inner, &writes)
            }
            ast::Command::ExtendedTest(test, redirects) => {
                let inner = Self::enter(depth, "[[ … ]]")?;
                let (own, _) = self.redirect_list(redirects.as_ref(), inner, &[])?;
                self.extended_test(&test.expr, inner)?;
                let mut all = writes.to_vec();
                all.extend(own);
                // bash evaluates the operands of `-eq`, `-lt`, `-v` … as arithmetic, where an
                // array subscript runs `$(…)` even from single quotes and `x=…` assigns: what
                // a `[[ … ]]` does cannot be known from its text.
                self.opaque("[[", all);
                Ok(())
            }
        }
    }

    fn compound(
        &mut self,
        compound: &ast::CompoundCommand,
        depth: usize,
        writes: &[String],
    ) -> Result<(), SplitError> {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(arith) => {
                // brush reads `( (a) )` and `((a) )` as arithmetic; bash reads `((` as
                // arithmetic only when it is closed by an adjacent `))`, and otherwise as nested
                // subshells, which run the text as commands.
                let genuine = self.texts.last().is_some_and(|text| {
                    let start = arith.loc.start.index;
                    let end = arith.loc.end.index;
                    text.get(start..start + 2) == Some(&['(', '('][..])
                        && end >= start + 4
                        && text.get(end - 2..end) == Some(&[')', ')'][..])
                });
                if genuine {
                    self.embedded(&arith.expr.value, depth)?;
                    // Arithmetic assigns variables (`((PATH=0))`) and runs subscripts.
                    self.opaque("((", writes.to_vec());
                    Ok(())
                } else {
                    let inner = Self::enter(depth, &arith.expr.value)?;
                    self.script(&arith.expr.value, inner, writes)
                }
            }
            C::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.embedded(&expr.value, depth)?;
                }
                self.opaque("for ((", writes.to_vec());
                self.compound_list(&clause.body.list, depth, writes)
            }
            C::BraceGroup(group) => self.compound_list(&group.list, depth, writes),
            C::Subshell(sub) => self.compound_list(&sub.list, depth, writes),
            C::ForClause(clause) => {
                for word in clause.values.iter().flatten() {
                    self.word(&word.value, depth, WordUse::Command)?;
                }
                // The loop assigns its variable (`for PATH in bin; do git status; done`): an
                // assignment no allow rule for the body's commands covers.
                self.opaque(&format!("for {}", clause.variable_name), writes.to_vec());
                self.compound_list(&clause.body.list, depth, writes)
            }
            C::CaseClause(clause) => {
                self.word(&clause.value.value, depth, WordUse::Command)?;
                for item in &clause.cases {
                    for pattern in &item.patterns {
                        self.word(&pattern.value, depth, WordUse::Loose)?;
                    }
                    if let Some(list) = &item.cmd {
                        self.compound_list(list, depth, writes)?;
                    }
                }
                Ok(())
            }
            C::IfClause(clause) => {
                self.compound_list(&clause.condition, depth, writes)?;
                self.compound_list(&clause.then, depth, writes)?;
                for other in clause.elses.iter().flatten() {
                    if let Some(condition) = &other.condition {
                        self.compound_list(condition, depth, writes)?;
                    }
                    self.compound_list(&other.body, depth, writes)?;
                }
                Ok(())
            }
            C::WhileClause(clause) | C::UntilClause(clause) => {
                let ast::WhileOrUntilClauseCommand(condition, body, _) = clause;
                self.compound_list(condition, depth, writes)?;
                self.compound_list(&body.list, depth, writes)
            }
            C::Coprocess(coproc) => {
                if let Some(name) = &coproc.name {
                    self.word(&name.value, depth, WordUse::Command)?;
                }
                let inner = Self::enter(depth, "coproc")?;
                self.command(&coproc.body, inner, writes)
            }
        }
    }

    fn extended_test(
        &mut self,
        expr: &ast::ExtendedTestExpr,
        depth: usize,
    ) -> Result<(), SplitError> {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a, depth)?;
                self.extended_test(b, depth)
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a, depth),
            E::UnaryTest(_, word) => self.word(&word.value, depth, WordUse::Loose).map(drop),
            E::BinaryTest(_, left, right) => {
                self.word(&left.value, depth, WordUse::Loose)?;
                self.word(&right.value, depth, WordUse::Loose).map(drop)
            }
        }
    }

    /// Walks the redirections of a compound command; returns `inherited` plus the files they
    /// write, and whether any target is dynamic.
    fn redirect_list(
        &mut self,
        redirects: Option<&ast::RedirectList>,
        depth: usize,
        inherited: &[String],
    ) -> Result<(Vec<String>, bool), SplitError> {
        let mut writes = inherited.to_vec();
        let mut dynamic = false;
        for redirect in redirects.iter().flat_map(|r| r.0.iter()) {
            dynamic |= self.redirect(redirect, depth, &mut writes)?;
        }
        Ok((writes, dynamic))
    }

    /// Walks one redirection, adding the file it writes (if any) to `writes`. Returns whether
    /// its target is dynamic.
    fn redirect(
        &mut self,
        redirect: &ast::IoRedirect,
        depth: usize,
        writes: &mut Vec<String>,
    ) -> Result<bool, SplitError> {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                T::Filename(word) => {
                    let analyzed = self.word(&word.value, depth, WordUse::Command)?;
                    if matches!(kind, K::Read | K::ReadAndWrite) {
                        self.reads.push(analyzed.text.clone());
                    }
                    if matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite) {
                        writes.push(analyzed.text);
                    }
                    Ok(analyzed.dynamic)
                }
                T::Duplicate(word) => {
                    let analyzed = self.word(&word.value, depth, WordUse::Command)?;
                    // `>&file` writes stdout and stderr to `file`; `>&2`, `>&-`, `>&2-` dup.
                    let is_fd = {
                        let t = analyzed.text.strip_suffix('-').unwrap_or(&analyzed.text);
                        t.chars().all(|c| c.is_ascii_digit())
                    };
                    if matches!(kind, K::DuplicateOutput) && (!is_fd || analyzed.dynamic) {
                        writes.push(analyzed.text);
                    }
                    Ok(analyzed.dynamic)
                }
                T::Fd(_) => Ok(false),
                T::ProcessSubstitution(_, sub) => {
                    let inner = Self::enter(depth, "process substitution")?;
                    self.compound_list(&sub.list, inner, &[])?;
                    Ok(true)
                }
            },
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    self.heredoc(&doc.doc.value, depth)?;
                }
                Ok(false)
            }
            ast::IoRedirect::HereString(_, word) => {
                Ok(self.word(&word.value, depth, WordUse::Command)?.dynamic)
            }
            ast::IoRedirect::OutputAndError(word, _) => {
                let analyzed = self.word(&word.value, depth, WordUse::Command)?;
                writes.push(analyzed.text);
                Ok(analyzed.dynamic)
            }
        }
    }

    fn simple(
        &mut self,
        simple: &ast::SimpleCommand,
        depth: usize,
        inherited: &[String],
    ) -> Result<(), SplitError> {
        use ast::CommandPrefixOrSuffixItem as I;
        let mut assignments: Vec<Analyzed> = Vec::new();
        let mut words: Vec<Analyzed> = Vec::new();
        let mut writes = inherited.to_vec();
        let mut redirect_dynamic = false;
        let mut items: Vec<&I> = Vec::new();
        items.extend(simple.prefix.iter().flat_map(|p| p.0.iter()));
        let name_item;
        if let Some(name) = &simple.word_or_name {
            name_item = I::Word(name.clone());
            items.push(&name_item);
        }
        items.extend(simple.suffix.iter().flat_map(|s| s.0.iter()));
        for item in items {
            match item {
                I::IoRedirect(redirect) => {
                    redirect_dynamic |= self.redirect(redirect, depth, &mut writes)?;
                }
                I::Word(word) => words.push(self.word(&word.value, depth, WordUse::Command)?),
                I::AssignmentWord(_, word) => {
                    let analyzed = self.word(&word.value, depth, WordUse::Loose)?;
                    if words.is_empty() {
                        assignments.push(analyzed);
                    } else {
                        // After the command name it is an ordinary argument (`export X=1`).
                        words.push(analyzed);
                    }
                }
                I::ProcessSubstitution(kind, sub) => {
                    let inner = Self::enter(depth, "process substitution")?;
                    self.compound_list(&sub.list, inner, &[])?;
                    let text = match kind {
                        ast::ProcessSubstitutionKind::Read => "<(…)",
                        ast::ProcessSubstitutionKind::Write => ">(…)",
                    };
                    words.push(Analyzed {
                        text: text.to_owned(),
                        dynamic: true,
                    });
                }
            }
        }
        if words.is_empty() {
            if !assignments.is_empty() || writes.len() > inherited.len() {
                let reads = std::mem::take(&mut self.reads);
                self.out.push(SimpleCommand {
                    dynamic: redirect_dynamic || assignments.iter().any(|a| a.dynamic),
                    argv: assignments.into_iter().map(|a| a.text).collect(),
                    writes,
                    reads,
                });
            }
            return Ok(());
        }
        if !assignments.is_empty() {
            let all: Vec<Analyzed> = assignments.iter().chain(words.iter()).cloned().collect();
            self.push(&all, &writes, redirect_dynamic);
        }
        self.invocation(&words, &writes, redirect_dynamic, depth)
    }

    fn push(&mut self, words: &[Analyzed], writes: &[String], dynamic: bool) -> usize {
        let reads = std::mem::take(&mut self.reads);
        self.out.push(SimpleCommand {
            argv: words.iter().map(|w| w.text.clone()).collect(),
            writes: writes.to_vec(),
            dynamic: dynamic || words.iter().any(|w| w.dynamic),
            reads,
        });
        self.out.len() - 1
    }

    /// Reports the command `words` and, when it wraps another command, that one too.
    fn invocation(
        &mut self,
        words: &[Analyzed],
        writes: &[String],
        dynamic: bool,
        depth: usize,
    ) -> Result<(), SplitError> {
        let index = self.push(words, writes, dynamic);
        let Some(first) = words.first() else {
            return Ok(());
        };
        if first.dynamic {
            return Ok(());
        }
        let args = &words[1..];
        let name = first.text.rsplit('/').next().unwrap_or(&first.text);
        if name != first.text && !name.is_empty() {
            // `/bin/rm -rf x` is also reported as `rm -rf x`.
            let inner = Self::enter(depth, &first.text)?;
            let mut renamed = words.to_vec();
            renamed[0].text = name.to_owned();
            return self.invocation(&renamed, writes, dynamic, inner);
        }
        match name {
            "bash" | "sh" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "rbash" => {
                self.shell(index, args, writes, depth)
            }
            "eval" | "trap" => {
                // `eval` runs its words as a line; `trap` runs its first word later.
                let args = if name == "trap" {
                    &args[..args.len().min(1)]
                } else {
                    args
                };
                self.out[index].dynamic = true;
                if !args.is_empty() && args.iter().all(|a| !a.dynamic) {
                    let script: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
                    let inner = Self::enter(depth, "eval")?;
                    self.script(&script.join(" "), inner, writes)?;
                }
                Ok(())
            }
            "source" | "." => {
                self.out[index].dynamic = true;
                Ok(())
            }
            "find" => self.find(args, writes, dynamic, depth),
            _ => {
                let Some(wrapped) = self.wrapped(name, index, args, depth)? else {
                    return Ok(());
                };
                let extra_dynamic = self.out[index].dynamic && name == "xargs";
                let inner = Self::enter(depth, name)?;
                let writes = self.out[index].writes.clone();
                let wrapped_words = &args[wrapped..];
                if wrapped_words.is_empty() {
                    return Ok(());
                }
                self.invocation(wrapped_words, &writes, dynamic || extra_dynamic, inner)
            }
        }
    }

    /// For a wrapper command, the index in `args` where the wrapped command starts.
    fn wrapped(
        &mut self,
        name: &str,
        index: usize,
        args: &[Analyzed],
        depth: usize,
    ) -> Result<Option<usize>, SplitError> {
        let spec = match name {
            "env" => OptionSpec {
                short_arg: "uCS",
                short_flag: "i0v",
                short_optional: "",
                long_arg: &["unset", "chdir", "split-string"],
                long_flag: &[
                    "ignore-environment",
                    "null",
                    "debug",
                    "block-signal",
                    "default-signal",
                    "ignore-signal",
                    "list-signal-handling",
                ],
                assignments: true,
            },
            "command" => OptionSpec::flags("pvV"),
            "builtin" | "nohup" => OptionSpec::flags(""),
            "exec" => OptionSpec {
                short_arg: "a",
                ..OptionSpec::flags("cl")
            },
            "time" => OptionSpec {
                short_arg: "fo",
                short_flag: "pvaq",
                short_optional: "",
                long_arg: &["format", "output"],
                long_flag: &["portability", "verbose", "append", "quiet"],
                assignments: false,
            },
            "nice" => OptionSpec {
                short_arg: "n",
                short_flag: "0123456789",
                short_optional: "",
                long_arg: &["adjustment"],
                long_flag: &[],
                assignments: false,
            },
            "stdbuf" => OptionSpec {
                short_arg: "ioe",
                short_flag: "",
                short_optional: "",
                long_arg: &["input", "output", "error"],
                long_flag: &[],
                assignments: false,
            },
            "setsid" => OptionSpec {
                short_arg: "",
                short_flag: "cfw",
                short_optional: "",
                long_arg: &[],
                long_flag: &["ctty", "fork", "wait"],
                assignments: false,
            },
            "ionice" => OptionSpec {
                short_arg: "cnp",
                short_flag: "t",
                short_optional: "",
                long_arg: &["class", "classdata", "pid"],
                long_flag: &["ignore"],
                assignments: false,
            },
            // `taskset MASK cmd`, `chrt PRIO cmd`, `flock FILE cmd`: one operand before the
            // command (see below).
            "taskset" | "chrt" | "flock" => OptionSpec {
                short_arg: "",
                short_flag: "acpfmrbiodRveEnsuxwh",
                short_optional: "",
                long_arg: &["timeout", "wait", "conflict-exit-code"],
                long_flag: &[
                    "all-tasks",
                    "cpu-list",
                    "pid",
                    "shared",
                    "exclusive",
                    "unlock",
                    "nonblock",
                    "close",
                    "no-fork",
                    "verbose",
                    "fifo",
                    "rr",
                    "batch",
                    "idle",
                    "other",
                    "deadline",
                    "reset-on-fork",
                ],
                assignments: false,
            },
            "timeout" => OptionSpec {
                short_arg: "ks",
                short_flag: "vp",
                short_optional: "",
                long_arg: &["kill-after", "signal"],
                long_flag: &["preserve-status", "foreground", "verbose"],
                assignments: false,
            },
            "sudo" | "doas" => OptionSpec {
                short_arg: "CDghpRrTtUu",
                short_flag: "ABbEeHiKklNnPSsVv",
                short_optional: "",
                long_arg: &[
                    "chdir",
                    "chroot",
                    "close-from",
                    "command-timeout",
                    "group",
                    "host",
                    "other-user",
                    "prompt",
                    "role",
                    "type",
                    "user",
                ],
                long_flag: &[
                    "askpass",
                    "background",
                    "bell",
                    "edit",
                    "login",
                    "list",
                    "non-interactive",
                    "preserve-env",
                    "preserve-groups",
                    "remove-timestamp",
                    "reset-timestamp",
                    "set-home",
                    "shell",
                    "stdin",
                    "validate",
                    "no-update",
                ],
                assignments: true,
            },
            "xargs" => OptionSpec {
                short_arg: "adEILnPs",
                short_flag: "0oprtx",
                short_optional: "eil",
                long_arg: &[
                    "arg-file",
                    "delimiter",
                    "max-args",
                    "max-procs",
                    "max-chars",
                    "process-slot-var",
                ],
                long_flag: &[
                    "null",
                    "open-tty",
                    "interactive",
                    "no-run-if-empty",
                    "verbose",
                    "exit",
                    "show-limits",
                    "eof",
                    "replace",
                    "max-lines",
                ],
                assignments: false,
            },
            _ => return Ok(None),
        };
        let parsed = spec.parse(args);
        let mut start = parsed.operands;
        if parsed.unknown_option {
            self.out[index].dynamic = true;
        }
        match name {
            "env" => {
                if let Some(split_string) = parsed.value_of('S', "split-string") {
                    // `env -S 'cmd args'` splits the string itself: report what it would run.
                    self.out[index].dynamic = true;
                    if !split_string.dynamic {
                        let inner = Self::enter(depth, "env -S")?;
                        let writes = self.out[index].writes.clone();
                        self.script(&split_string.text, inner, &writes)?;
                    }
                }
            }
            "time" => {
                if let Some(output) = parsed.value_of('o', "output") {
                    self.out[index].writes.push(output.text.clone());
                    self.out[index].dynamic |= output.dynamic;
                }
            }
            "timeout" => start += 1, // the duration
            "taskset" | "chrt" | "flock" => {
                // The mask, priority or lock file; `flock FILE -c 'cmd'` runs a shell line.
                start += 1;
                if name == "flock" && args.get(start).is_some_and(|a| a.text == "-c") {
                    self.out[index].dynamic = true;
                    if let Some(line) = args.get(start + 1).filter(|a| !a.dynamic) {
                        let inner = Self::enter(depth, "flock -c")?;
                        let writes = self.out[index].writes.clone();
                        self.script(&line.text, inner, &writes)?;
                    }
                    return Ok(None);
                }
            }
            "xargs" => {
                self.out[index].dynamic = true;
                if start >= args.len() {
                    return Ok(None); // runs `echo`
                }
            }
            _ => {}
        }
        Ok(Some(start.min(args.len())))
    }

    /// `bash [options] -c 'script' [name [args…]]`: the script is split as a line of its own.
    fn shell(
        &mut self,
        index: usize,
        args: &[Analyzed],
        writes: &[String],
        depth: usize,
    ) -> Result<(), SplitError> {
        let mut command_mode = false;
        let mut operand = None;
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let text = arg.text.as_str();
            if arg.dynamic {
                operand = Some(i);
                break;
            }
            if text == "--" || text == "-" {
                operand = (i + 1 < args.len()).then_some(i + 1);
                break;
            }
            if matches!(text, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") {
                i += 2;
                continue;
            }
            if text.starts_with("--") {
                i += 1;
                continue;
            }
            if (text.starts_with('-') || text.starts_with('+')) && text.len() > 1 {
                if text[1..].contains('c') {
                    command_mode = true;
                }
                i += 1;
                continue;
            }
            operand = Some(i);
            break;
        }
        match operand.and_then(|o| args.get(o)) {
            Some(script) if command_mode => {
                if script.dynamic {
                    self.out[index].dynamic = true;
                    Ok(())
                } else {
                    let inner = Self::enter(depth, &script.text)?;
                    self.script(&script.text, inner, writes)
                }
            }
            // A script file, or commands from standard input: not on the line.
            _ => {
                self.out[index].dynamic = true;
                Ok(())
            }
        }
    }

    /// `find … -exec cmd args ;` (and `-execdir`, `-ok`, `-okdir`, ended by `;` or `+`).
    fn find(
        &mut self,
        args: &[Analyzed],
        writes: &[String],
        dynamic: bool,
        depth: usize,
    ) -> Result<(), SplitError> {
        let mut i = 0;
        while i < args.len() {
            if matches!(
                args[i].text.as_str(),
                "-exec" | "-execdir" | "-ok" | "-okdir"
            ) && !args[i].dynamic
            {
                let start = i + 1;
                let mut end = start;
                while end < args.len() && !matches!(args[end].text.as_str(), ";" | "+") {
                    end += 1;
                }
                if end > start {
                    let inner = Self::enter(depth, "find -exec")?;
                    // The file names are filled in at run time.
                    let _ = dynamic;
                    self.invocation(&args[start..end], writes, true, inner)?;
                }
                i = end;
            }
            i += 1;
        }
        Ok(())
    }

    /// Analyses one word: removes quotes, reports its command substitutions, and decides
    /// whether its value is known statically.
    fn word(&mut self, raw: &str, depth: usize, usage: WordUse) -> Result<Analyzed, SplitError> {
        if !raw.contains([
            '\'', '"', '\\', '$', '`', '~', '*', '?', '[', '{', '(', '!', '@', '+',
        ]) {
            check_unquoted(raw, raw, usage)?;
            return Ok(Analyzed {
                text: raw.to_owned(),
                dynamic: false,
            });
        }
        check_word_parentheses(raw)?;
        let pieces =
            brush_parser::word::parse(raw, &self.options).map_err(|e| SplitError::Syntax {
                line: preview(raw),
                at: None,
                reason: e.to_string(),
            })?;
        let mut text = String::new();
        let mut dynamic = false;
        let mut first = true;
        // The word with every quoted part replaced by a plain character: a pattern or brace
        // expansion can be split across quoted and unquoted parts (`{r''m,-f,x}` is `rm -f x`).
        let mut unquoted_shape = String::new();
        for piece in &pieces {
            match &piece.piece {
                WordPiece::Text(s) => unquoted_shape.push_str(s),
                _ => unquoted_shape.push('_'),
            }
            self.piece(
                raw,
                piece,
                false,
                first,
                depth,
                usage,
                &mut text,
                &mut dynamic,
            )?;
            first = false;
        }
        if is_pattern(&unquoted_shape) {
            dynamic = true;
        }
        if dynamic {
            text = raw.to_owned();
        }
        Ok(Analyzed { text, dynamic })
    }

    #[allow(clippy::too_many_arguments)]
    fn piece(
        &mut self,
        raw: &str,
        piece: &WordPieceWithSource,
        quoted: bool,
        first: bool,
        depth: usize,
        usage: WordUse,
        text: &mut String,
        dynamic: &mut bool,
    ) -> Result<(), SplitError> {
        match &piece.piece {
            WordPiece::Text(s) => {
                if !quoted {
                    check_unquoted(raw, s, usage)?;
                    if is_pattern(s) {
                        *dynamic = true;
                    }
                }
                text.push_str(s);
            }
            WordPiece::SingleQuotedText(s) => text.push_str(s),
            WordPiece::AnsiCQuotedText(s) => match decode_ansi_c(s) {
                Some(decoded) => text.push_str(&decoded),
                None => *dynamic = true,
            },
            WordPiece::DoubleQuotedSequence(inner)
            | WordPiece::GettextDoubleQuotedSequence(inner) => {
                for p in inner {
                    self.piece(raw, p, true, false, depth, usage, text, dynamic)?;
                }
            }
            WordPiece::TildeExpansion(tilde) => {
                if !(first && matches!(tilde, brush_parser::word::TildeExpr::Home)) {
                    *dynamic = true;
                }
                text.push('~');
            }
            WordPiece::ParameterExpansion(expr) => {
                *dynamic = true;
                self.parameter(expr, depth)?;
            }
            WordPiece::CommandSubstitution(script) => {
                *dynamic = true;
                check_substitution_end(script)?;
                let inner = Self::enter(depth, script)?;
                self.script(script, inner, &[])?;
            }
            WordPiece::BackquotedCommandSubstitution(script) => {
                *dynamic = true;
                let inner = Self::enter(depth, script)?;
                self.script(script, inner, &[])?;
            }
            WordPiece::EscapeSequence(s) => {
                let mut chars = s.chars();
                let _backslash = chars.next();
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) if quoted && !matches!(c, '"' | '\\' | '$' | '`') => {
                        text.push('\\');
                        text.push(c);
                    }
                    Some(c) => text.push(c),
                }
                text.extend(chars);
            }
            WordPiece::ArithmeticExpression(expr) => {
                *dynamic = true;
                // brush reads `$((a);(b))` as arithmetic; bash only when the parentheses inside
                // balance, and otherwise as a command substitution of subshells.
                let source = raw.get(piece.start_index..piece.end_index).unwrap_or("");
                if source.starts_with("$[")
                    || (source.starts_with("$((") && parens_balance(&expr.value))
                {
                    self.embedded(&expr.value, depth)?;
                } else if let Some(script) =
                    source.strip_prefix("$(").and_then(|s| s.strip_suffix(')'))
                {
                    let inner = Self::enter(depth, script)?;
                    self.script(script, inner, &[])?;
                } else {
                    return Err(SplitError::Syntax {
                        line: preview(raw),
                        at: None,
                        reason: "ambiguous arithmetic expansion".to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Reports the command substitutions inside the strings of a parameter expansion
    /// (`${x:-$(cmd)}`, `${x/$(a)/$(b)}`, `${x:$(n)}`).
    fn parameter(&mut self, expr: &ParameterExpr, depth: usize) -> Result<(), SplitError> {
        use brush_parser::word::Parameter as P;
        let (parameter, strings): (Option<&P>, Vec<&str>) = match expr {
            ParameterExpr::Parameter { parameter, .. }
            | ParameterExpr::ParameterLength { parameter, .. }
            | ParameterExpr::Transform { parameter, .. } => (Some(parameter), vec![]),
            ParameterExpr::UseDefaultValues {
                parameter,
                default_value,
                ..
            }
            | ParameterExpr::AssignDefaultValues {
                parameter,
                default_value,
                ..
            } => (
                Some(parameter),
                default_value.iter().map(String::as_str).collect(),
            ),
            ParameterExpr::IndicateErrorIfNullOrUnset {
                parameter,
                error_message,
                ..
            } => (
                Some(parameter),
                error_message.iter().map(String::as_str).collect(),
            ),
            ParameterExpr::UseAlternativeValue {
                parameter,
                alternative_value,
                ..
            } => (
                Some(parameter),
                alternative_value.iter().map(String::as_str).collect(),
            ),
            ParameterExpr::RemoveSmallestSuffixPattern {
                parameter, pattern, ..
            }
            | ParameterExpr::RemoveLargestSuffixPattern {
                parameter, pattern, ..
            }
            | ParameterExpr::RemoveSmallestPrefixPattern {
                parameter, pattern, ..
            }
            | ParameterExpr::RemoveLargestPrefixPattern {
                parameter, pattern, ..
            }
            | ParameterExpr::UppercaseFirstChar {
                parameter, pattern, ..
            }
            | ParameterExpr::UppercasePattern {
                parameter, pattern, ..
            }
            | ParameterExpr::LowercaseFirstChar {
                parameter, pattern, ..
            }
            | ParameterExpr::LowercasePattern {
                parameter, pattern, ..
            } => (
                Some(parameter),
                pattern.iter().map(String::as_str).collect(),
            ),
            ParameterExpr::Substring {
                parameter,
                offset,
                length,
                ..
            } => {
                let mut strings = vec![offset.value.as_str()];
                strings.extend(length.iter().map(|l| l.value.as_str()));
                (Some(parameter), strings)
            }
            ParameterExpr::ReplaceSubstring {
                parameter,
                pattern,
                replacement,
                ..
            } => {
                let mut strings = vec![pattern.as_str()];
                strings.extend(replacement.iter().map(String::as_str));
                (Some(parameter), strings)
            }
            ParameterExpr::VariableNames { .. } | ParameterExpr::MemberKeys { .. } => {
                (None, vec![])
            }
        };
        if let Some(P::NamedWithIndex { index, .. }) = parameter {
            self.embedded(index, depth)?;
        }
        for s in strings {
            self.embedded(s, depth)?;
        }
        Ok(())
    }

    /// Reports the command substitutions in a text that the shell expands but that is not a
    /// word of its own: an arithmetic expression, an array index, a here-document, the parts of
    /// a parameter expansion.
    fn embedded(&mut self, text: &str, depth: usize) -> Result<(), SplitError> {
        if !text.contains(['$', '`']) {
            return Ok(());
        }
        let inner = Self::enter(depth, text)?;
        self.heredoc(text, inner)
    }

    fn heredoc(&mut self, text: &str, depth: usize) -> Result<(), SplitError> {
        if !text.contains(['$', '`']) {
            return Ok(());
        }
        Self::check_complexity(text)?;
        check_word_parentheses(text)?;
        let pieces = brush_parser::word::parse_heredoc(text, &self.options).map_err(|e| {
            SplitError::Syntax {
                line: preview(text),
                at: None,
                reason: e.to_string(),
            }
        })?;
        let mut ignored_text = String::new();
        let mut ignored_dynamic = false;
        for piece in &pieces {
            self.piece(
                text,
                piece,
                true,
                false,
                depth,
                WordUse::Loose,
                &mut ignored_text,
                &mut ignored_dynamic,
            )?;
        }
        Ok(())
    }
}

/// The word parser and the tokenizer must agree on where a `$(…)` ends; they can differ when a
/// `#` comment or a here-document inside it holds a `)`. Re-tokenizes `$(script)` and requires
/// a single word spanning all of it.
fn check_substitution_end(script: &str) -> Result<(), SplitError> {
    let whole = format!("$({script})");
    let disagree = || SplitError::Syntax {
        line: preview(&whole),
        at: None,
        reason: "the end of this command substitution is ambiguous".to_owned(),
    };
    check_heredoc_delimiters(&whole)?;
    let tokens = brush_parser::tokenize_str(&whole).map_err(|_| disagree())?;
    match tokens.as_slice() {
        [brush_parser::Token::Word(_, span)]
            if span.start.index == 0 && span.end.index == whole.chars().count() =>
        {
            Ok(())
        }
        _ => Err(disagree()),
    }
}

/// brush's tokenizer loops forever (allocating) when the input ends inside a here-document
/// whose delimiter is empty once quotes and ASCII blanks are removed (`<<''`, `<<""`,
/// `<<\r`). Such delimiters are refused up front: every `<<` (not `<<<`) must be followed by a
/// word with some other character. Quote-blind, so `echo '<<'` is refused too.
fn check_heredoc_delimiters(text: &str) -> Result<(), SplitError> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = text[from..].find("<<") {
        let at = from + offset;
        from = at + 2;
        let mut j = at + 2;
        if bytes.get(j) == Some(&b'<') {
            from = j + 1; // `<<<`: a here-string
            continue;
        }
        if bytes.get(j) == Some(&b'-') {
            j += 1;
        }
        while bytes.get(j).is_some_and(|b| *b == b' ' || *b == b'\t') {
            j += 1;
        }
        let end = text[j..]
            .find(|c: char| {
                matches!(
                    c,
                    ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
                )
            })
            .map_or(text.len(), |e| j + e);
        let meaningful = text[j..end]
            .chars()
            .any(|c| !matches!(c, '\'' | '"' | '\\' | '$') && !c.is_ascii_whitespace());
        if !meaningful {
            return Err(SplitError::Syntax {
                line: preview(text),
                at: None,
                reason: "here-document without a delimiter word (an empty delimiter is not \
                         supported)"
                    .to_owned(),
            });
        }
        // brush's tokenizer panics (an `unwrap` on the end of the input) on a here-document
        // started inside a command substitution that closes before the document's body, on
        // the same line (`"$(<<EOF)…` with the body after). Refused up front; the usual form,
        // with the body and `EOF` before the `)`, is not affected. Quote-blind, as above.
        let line_end = text[end..].find('\n').map_or(text.len(), |n| end + n);
        let rest_of_line = &text[end..line_end];
        if text[..at].contains("$(") && rest_of_line.contains(')') {
            return Err(SplitError::Syntax {
                line: preview(text),
                at: None,
                reason: "here-document in a command substitution that closes before its body \
                         (not supported)"
                    .to_owned(),
            });
        }
        // The same tokenizer panics two more ways on a here-document inside `$(…)` (found by
        // the fuzz target in CI): a body line that starts with `)` (`"$(<<EF\n)\nEF"`), and a
        // quote or a second `<<` after the delimiter on its line, which moves where the body
        // starts. Both are refused up front. A `)` inside a body is refused later in any case
        // (where the substitution ends is ambiguous), and the usual forms (`"$(cat <<'EOF'`
        // and `$(cat <<EOF | wc -l`) are not affected. Quote-blind, as above.
        if text[..at].contains("$(") {
            if rest_of_line.contains(['"', '\'', '`']) || rest_of_line.contains("<<") {
                return Err(SplitError::Syntax {
                    line: preview(text),
                    at: None,
                    reason: "here-document in a command substitution with a quote or another \
                             redirection from a text after its delimiter (not supported)"
                        .to_owned(),
                });
            }
            let delimiter: String = text[j..end]
                .chars()
                .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                .collect();
            let body = text.get(line_end + 1..).unwrap_or("").split('\n');
            for body_line in body {
                if body_line.trim_start_matches('\t') == delimiter {
                    break;
                }
                if body_line.trim_start().starts_with(')') {
                    return Err(SplitError::Syntax {
                        line: preview(text),
                        at: None,
                        reason: "here-document in a command substitution with a body line that \
                                 starts with `)`: where the substitution ends is ambiguous"
                            .to_owned(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The most `(` a word (or here-document) with a command or arithmetic substitution may hold.
///
/// brush's word parser backtracks exponentially over unclosed `(` inside `$(…)` and `$((…))`
/// (`$((x$((x$((x…` takes seconds at 20). The tokenizer only lets balanced words through,
/// except where it and the word parser read quoting differently (here-documents inside
/// `$(…)`), so the count is bounded quote-blind: a dozen keeps the worst case to milliseconds.
pub const MAX_WORD_PARENTHESES: usize = 12;

/// The most array subscripts in parameter expansions (`${name[`) one word may hold: brush's
/// word parser is exponential in how deeply they nest (`${a[${a[${a[${a[…` takes seconds at 6), and
/// the count bounds the nesting whatever the quoting.
pub const MAX_WORD_SUBSCRIPTS: usize = 2;

/// Refuses a word or here-document that could make the word parser backtrack for long; see
/// [`MAX_WORD_PARENTHESES`] and [`MAX_WORD_SUBSCRIPTS`].
fn check_word_parentheses(text: &str) -> Result<(), SplitError> {
    let subscripts = text
        .match_indices("${")
        .filter(|(at, _)| {
            let rest = text[at + 2..].trim_start_matches(['#', '!']);
            rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
                .starts_with('[')
        })
        .count();
    if subscripts > MAX_WORD_SUBSCRIPTS {
        return Err(SplitError::TooComplex {
            line: preview(text),
            count: subscripts,
            max: MAX_WORD_SUBSCRIPTS,
        });
    }
    if !(text.contains("$(") || text.contains("$[") || text.contains('`')) {
        return Ok(());
    }
    let count = text.matches('(').count();
    if count > MAX_WORD_PARENTHESES {
        return Err(SplitError::TooComplex {
            line: preview(text),
            count,
            max: MAX_WORD_PARENTHESES,
        });
    }
    Ok(())
}

/// brush panics on numbers that overflow where it expects small ones: a file descriptor before
/// a redirection (`99999999999>f`, an `i32`) and a directory-stack index after a tilde
/// (`~+99999999999999999999`, a `usize`). Bash rejects both too. Refused up front
/// (quote-blind): ten or more digits right before `<` or `>`, or nineteen or more after `~`,
/// `~+` or `~-`.
fn check_numbers(text: &str) -> Result<(), SplitError> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        let digits = i - start;
        let redirect = digits >= 10 && matches!(chars.get(i), Some('<' | '>'));
        let tilde = digits >= 19
            && match start.checked_sub(1).map(|p| chars[p]) {
                Some('~') => true,
                Some('+' | '-') => start >= 2 && chars[start - 2] == '~',
                _ => false,
            };
        if redirect || tilde {
            return Err(SplitError::Syntax {
                line: preview(text),
                at: None,
                reason: "number too large for a file descriptor or directory-stack index"
                    .to_owned(),
            });
        }
    }
    Ok(())
}

/// brush's grammar tries `( (` as an arithmetic command before a subshell without memoizing,
/// so every `(` left unclosed after it doubles the parse time (`( ( a ( ( a …` takes seconds at
/// 30 parentheses). In bash every `(` token is closed by a `)` token (subshells, `((…))`,
/// `f()`, `(pattern)` in `case`, arrays, process substitutions), so a line with an unclosed one
/// is a syntax error anyway: tokenize (linear) and refuse it before the grammar runs.
fn check_parentheses(text: &str) -> Result<(), SplitError> {
    let tokens = brush_parser::tokenize_str(text).map_err(|e| SplitError::Syntax {
        line: preview(text),
        at: None,
        reason: e.to_string(),
    })?;
    let mut open: usize = 0;
    for token in &tokens {
        if let brush_parser::Token::Operator(op, _) = token {
            match op.as_str() {
                "(" => open += 1,
                ")" => open = open.saturating_sub(1),
                _ => {}
            }
        }
    }
    if open > 0 {
        return Err(SplitError::Syntax {
            line: preview(text),
            at: None,
            reason: format!("{open} unclosed `(`"),
        });
    }
    Ok(())
}

/// Unquoted text inside a command word never holds blanks or operators: the tokenizer would
/// have split the word there. If the word parser produced such text, the two parsers disagree
/// about the word, and the line is refused rather than guessed at.
fn check_unquoted(raw: &str, text: &str, usage: WordUse) -> Result<(), SplitError> {
    let bad = |c: char| match usage {
        WordUse::Command => matches!(
            c,
            ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
        ),
        WordUse::Loose => matches!(c, '\n' | ';' | '&' | '<' | '>'),
    };
    match text.find(bad) {
        None => Ok(()),
        Some(_) => Err(SplitError::Syntax {
            line: preview(raw),
            at: None,
            reason: "unquoted shell operator inside a word (extended globs are not supported)"
                .to_owned(),
        }),
    }
}

/// Whether unquoted text is a pathname pattern or a brace expansion (`{a,b}`, `{1..3}`; a
/// lone `{}` is literal).
fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?'])
        || text
            .find('[')
            .is_some_and(|open| text[open + 1..].contains(']'))
        || text.find('{').is_some_and(|open| {
            text[open + 1..].rfind('}').is_some_and(|close| {
                let inner = &text[open + 1..open + 1 + close];
                inner.contains(',') || inner.contains("..")
            })
        })
}

/// Whether the parentheses of `text` balance: never more closed than opened, all closed.
fn parens_balance(text: &str) -> bool {
    let mut depth: usize = 0;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => {}
        }
    }
    depth == 0
}

/// Decodes the body of a `$'…'` string the way bash does. `None` when the result is not UTF-8
/// or uses an escape this decoder does not know; the word is then treated as dynamic.
fn decode_ansi_c(body: &str) -> Option<String> {
    let mut out: Vec<u8> = Vec::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let Some(e) = chars.next() else {
            out.push(b'\\');
            break;
        };
        let simple = match e {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'e' | 'E' => Some(0x1b),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' => Some(b'\\'),
            '\'' => Some(b'\''),
            '"' => Some(b'"'),
            '?' => Some(b'?'),
            _ => None,
        };
        if let Some(byte) = simple {
            out.push(byte);
            continue;
        }
        match e {
            '0'..='7' => {
                let mut value = e.to_digit(8)?;
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(u8::try_from(value & 0xff).ok()?);
            }
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let mut value: u32 = 0;
                let mut digits = 0;
                while digits < max {
                    match chars.peek().and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            value = value.checked_mul(16)?.checked_add(d)?;
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    return None;
                }
                if e == 'x' {
                    out.push(u8::try_from(value).ok()?);
                } else {
                    let c = char::from_u32(value)?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
            'c' => {
                let ctl = chars.next()?;
                if !ctl.is_ascii() {
                    return None;
                }
                out.push((ctl as u8) & 0x1f);
            }
            _ => {
                out.push(b'\\');
                let mut buf = [0u8; 4];
                out.extend_from_slice(e.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    // Bash ends the string at a NUL byte.
    if let Some(nul) = out.iter().position(|&b| b == 0) {
        out.truncate(nul);
    }
    String::from_utf8(out).ok()
}

fn syntax_error(text: &str, error: &brush_parser::ParseError) -> SplitError {
    let at = match error {
        brush_parser::ParseError::ParsingNear(p) => Some((p.line, p.column)),
        brush_parser::ParseError::Tokenizing {
            position: Some(p), ..
        } => Some((p.line, p.column)),
        _ => None,
    };
    SplitError::Syntax {
        line: preview(text),
        at,
        reason: error.to_string(),
    }
}

/// How a wrapper command takes its options, enough to find where the wrapped command starts.
struct OptionSpec {
    /// Short options that take an argument (attached or the next word).
    short_arg: &'static str,
    /// Short options without an argument.
    short_flag: &'static str,
    /// Short options whose argument, if any, is attached (`-i{}`).
    short_optional: &'static str,
    /// Long options that take an argument (`--name=v` or `--name v`).
    long_arg: &'static [&'static str],
    /// Long options without an argument (an attached `=v` is allowed).
    long_flag: &'static [&'static str],
    /// Whether `NAME=value` words may come before the command (`env`, `sudo`).
    assignments: bool,
}

/// What [`OptionSpec::parse`] found.
struct ParsedOptions<'a> {
    /// Index of the first operand (the wrapped command), `args.len()` if none.
    operands: usize,
    /// Options with their values, short letter or long name.
    values: Vec<(OptionName<'a>, Analyzed)>,
    /// An option the spec does not know was skipped (assumed to take no argument).
    unknown_option: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionName<'a> {
    Short(char),
    Long(&'a str),
}

impl fmt::Display for OptionName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short(c) => write!(f, "-{c}"),
            Self::Long(name) => write!(f, "--{name}"),
        }
    }
}

impl ParsedOptions<'_> {
    fn value_of(&self, short: char, long: &str) -> Option<&Analyzed> {
        self.values
            .iter()
            .find(|(name, _)| *name == OptionName::Short(short) || *name == OptionName::Long(long))
            .map(|(_, value)| value)
    }
}

impl OptionSpec {
    const fn flags(short_flag: &'static str) -> Self {
        Self {
            short_arg: "",
            short_flag,
            short_optional: "",
            long_arg: &[],
            long_flag: &[],
            assignments: false,
        }
    }

    fn parse<'a>(&self, args: &'a [Analyzed]) -> ParsedOptions<'a> {
        let mut parsed = ParsedOptions {
            operands: args.len(),
            values: Vec::new(),
            unknown_option: false,
        };
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            let text = arg.text.as_str();
            if arg.dynamic {
                parsed.operands = i;
                return parsed;
            }
            if text == "--" {
                parsed.operands = i + 1;
                return parsed;
            }
            if let Some(long) = text.strip_prefix("--") {
                let (name, attached) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                };
                if self.long_arg.contains(&name) {
                    match attached {
                        // `--split-string=…`: the value is part of the word.
                        Some(v) => parsed.values.push((
                            OptionName::Long(name),
                            Analyzed {
                                text: v.to_owned(),
                                dynamic: arg.dynamic,
                            },
                        )),
                        None => {
                            if let Some(value) = args.get(i + 1) {
                                parsed.values.push((OptionName::Long(name), value.clone()));
                            }
                            i += 1;
                        }
                    }
                } else if !self.long_flag.contains(&name) {
                    parsed.unknown_option = true;
                }
                i += 1;
                continue;
            }
            if text.len() > 1 && text.starts_with('-') {
                for (at, c) in text[1..].char_indices() {
                    if self.short_arg.contains(c) {
                        let rest = &text[1 + at + c.len_utf8()..];
                        if rest.is_empty() {
                            if let Some(value) = args.get(i + 1) {
                                parsed.values.push((OptionName::Short(c), value.clone()));
                            }
                            i += 1;
                        } else {
                            // `-S"rm -f x"`: the value is the rest of the word.
                            parsed.values.push((
                                OptionName::Short(c),
                                Analyzed {
                                    text: rest.to_owned(),
                                    dynamic: arg.dynamic,
                                },
                            ));
                        }
                        break;
                    }
                    if self.short_optional.contains(c) {
                        break;
                    }
                    if !self.short_flag.contains(c) {
                        parsed.unknown_option = true;
                    }
                }
                i += 1;
                continue;
            }
            if self.assignments && is_assignment(text) {
                i += 1;
                continue;
            }
            parsed.operands = i;
            return parsed;
        }
        parsed
    }
}

fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Splits `data` (as lossy UTF-8) into simple commands. The body of the `command_splitter`
/// fuzz target and of the test that replays its corpus.
///
/// # Panics
///
/// When an invariant breaks: the parser must not panic (which [`split`] would report as
/// [`SplitError::Internal`]), and every reported command has at least one word or one write.
#[doc(hidden)]
pub fn exercise(data: &[u8]) {
    let line = String::from_utf8_lossy(data);
    let result = split(&line);
    if let Err(SplitError::Internal { reason, .. }) = &result {
        panic!("`{line}`: {reason}");
    }
    if let Ok(commands) = &result {
        for command in commands {
            // A command with nothing to judge would be a hole: every one names a program,
            // a file it writes or a file it reads.
            assert!(
                !command.argv.is_empty() || !command.writes.is_empty() || !command.reads.is_empty(),
                "`{line}` gave an empty command: {commands:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A here-document started in a command substitution that closes before its body made
    /// brush's tokenizer panic (found by the `command_splitter` fuzz target in CI): the line is
    /// refused as a syntax error, and the usual `"$(cat <<'EOF' … EOF\n)"` form still splits.
    #[test]
    fn a_heredoc_whose_substitution_closes_first_is_refused_not_a_panic() {
        for line in [
            "\"$(<<'EOF')$(( \u{ff}0$( \u{ff})\u{ff}\u{ff}\nEOF\n\"",
            "echo \"$(cat <<EOF)\" x\nbody\nEOF\n",
        ] {
            let got = split(line);
            assert!(
                matches!(&got, Err(SplitError::Syntax { reason, .. }) if reason.contains("closes before its body")),
                "{line:?}: {got:?}"
            );
        }
        // The two more ways (fuzz target, CI of 33b0fdd), minimized and as found.
        let found =
            "giw co\"$(ca9 <<'EOF' <<< \"$\n$t)\u{0} >*tee b) <<< \"${x:-$(id)}\" wc\nEOF\n)\"";
        for line in ["$(<<EF\n)\nEF", "x=$(<<'EF'\n)a\nEF\n", found] {
            let got = split(line);
            assert!(
                matches!(&got, Err(SplitError::Syntax { reason, .. }) if reason.contains("here-document in a command substitution")),
                "{line:?}: {got:?}"
            );
        }
        for usual in [
            "echo \"$(cat <<EOF | wc -l\na (b) c\nEOF\n)\"",
            "git commit -m \"$(cat <<'EOF'\nfix (thing)\nEOF\n)\"",
        ] {
            assert!(split(usual).is_ok(), "{usual:?}: {:?}", split(usual));
        }
        let usual = "git commit -m \"$(cat <<'EOF'\nthe message\nEOF\n)\"";
        let split_usual = argvs(usual);
        assert!(
            split_usual
                .iter()
                .any(|a| a.starts_with(&["git".into(), "commit".into()])),
            "{split_usual:?}"
        );
    }

    fn argvs(line: &str) -> Vec<Vec<String>> {
        split(line)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .into_iter()
            .map(|c| c.argv)
            .collect()
    }

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn splits_compound_lines() {
        let cases: &[(&str, &[&[&str]])] = &[
            ("git status", &[&["git", "status"]]),
            (
                "git status && curl x | sh",
                &[&["git", "status"], &["curl", "x"], &["sh"]],
            ),
            ("a || b", &[&["a"], &["b"]]),
            ("a; b", &[&["a"], &["b"]]),
            ("a & b", &[&["a"], &["b"]]),
            ("a\nb", &[&["a"], &["b"]]),
            ("a | b |& c", &[&["a"], &["b"], &["c"]]),
            ("( a; b )", &[&["a"], &["b"]]),
            ("{ a; b; }", &[&["a"], &["b"]]),
            ("echo $(curl x)", &[&["curl", "x"], &["echo", "$(curl x)"]]),
            (
                "echo \"$(curl x)\"",
                &[&["curl", "x"], &["echo", "\"$(curl x)\""]],
            ),
            ("echo `curl x`", &[&["curl", "x"], &["echo", "`curl x`"]]),
            (
                "echo $(a $(b))",
                &[&["b"], &["a", "$(b)"], &["echo", "$(a $(b))"]],
            ),
            (
                "if a; then b; elif c; then d; else e; fi",
                &[&["a"], &["b"], &["c"], &["d"], &["e"]],
            ),
            ("while a; do b; done", &[&["a"], &["b"]]),
            ("until a; do b; done", &[&["a"], &["b"]]),
            ("for i in 1 2; do b $i; done", &[&["for i"], &["b", "$i"]]),
            ("for i in $(ls); do b; done", &[&["ls"], &["for i"], &["b"]]),
            (
                "for ((i=0; i<$(n); i++)); do b; done",
                &[&["n"], &["for (("], &["b"]],
            ),
            ("case $(x) in a) b;; *) c;; esac", &[&["x"], &["b"], &["c"]]),
            ("f() { rm -rf /; }; f", &[&["rm", "-rf", "/"], &["f"]]),
            ("function f { a; }", &[&["a"]]),
            ("! a", &[&["a"]]),
            ("time a", &[&["a"]]),
            ("[[ -f $(a) ]] && b", &[&["a"], &["[["], &["b"]]),
            ("(( x = $(a) ))", &[&["a"], &["(("]]),
            ("echo $((1 + $(a)))", &[&["a"], &["echo", "$((1 + $(a)))"]]),
            ("echo ${x:-$(a)}", &[&["a"], &["echo", "${x:-$(a)}"]]),
            (
                "echo \"${x/$(a)/$(b)}\"",
                &[&["a"], &["b"], &["echo", "\"${x/$(a)/$(b)}\""]],
            ),
            (
                "diff <(a) <(b)",
                &[&["a"], &["b"], &["diff", "<(…)", "<(…)"]],
            ),
            ("a > >(b)", &[&["b"], &["a"]]),
            ("cat <<EOF\n$(a)\nEOF", &[&["a"], &["cat"]]),
            ("cat <<'EOF'\n$(a)\nEOF", &[&["cat"]]),
            ("cat <<< $(a)", &[&["a"], &["cat"]]),
            ("coproc a", &[&["a"]]),
            // `( (` is two subshells in bash (brush alone would read arithmetic).
            ("( ( rm -rf / ) )", &[&["rm", "-rf", "/"]]),
            ("( (rm x) )", &[&["rm", "x"]]),
            ("((rm x) )", &[&["rm", "x"]]),
            ("((a) ; (b))", &[&["a"], &["b"]]),
            ("((x = 1))", &[&["(("]]),
            ("(( x = $(a) ))", &[&["a"], &["(("]]),
            (
                "echo $((a);(b))",
                &[&["a"], &["b"], &["echo", "$((a);(b))"]],
            ),
            (
                "echo \"$((a);(b))\"",
                &[&["a"], &["b"], &["echo", "\"$((a);(b))\""]],
            ),
            ("echo $(( (1) + 2 ))", &[&["echo", "$(( (1) + 2 ))"]]),
            (
                "git commit -m \"$(cat <<'EOF'\nfix: a (see #1)\n\nbody\nEOF\n)\"",
                &[
                    &["cat"],
                    &[
                        "git",
                        "commit",
                        "-m",
                        "\"$(cat <<'EOF'\nfix: a (see #1)\n\nbody\nEOF\n)\"",
                    ],
                ],
            ),
            ("# only a comment", &[]),
            ("", &[]),
            ("x=1", &[&["x=1"]]),
            ("x=$(a)", &[&["a"], &["x=$(a)"]]),
            (
                "FOO=1 rm -rf x",
                &[&["FOO=1", "rm", "-rf", "x"], &["rm", "-rf", "x"]],
            ),
            ("export X=1", &[&["export", "X=1"]]),
        ];
        for (line, want) in cases {
            let want: Vec<Vec<String>> = want.iter().map(|w| v(w)).collect();
            assert_eq!(argvs(line), want, "{line}");
        }
    }

    #[test]
    fn removes_quotes() {
        let cases: &[(&str, &[&str])] = &[
            ("echo 'a b' \"c d\" e\\ f", &["echo", "a b", "c d", "e f"]),
            ("echo \"a\\\"b\\$c\\d\"", &["echo", "a\"b$c\\d"]),
            ("echo $'\\x72m\\n'", &["echo", "rm\n"]),
            ("$'\\x72\\x6d' -rf /", &["rm", "-rf", "/"]),
            ("r\"m\" -rf /", &["rm", "-rf", "/"]),
            ("\\rm x", &["rm", "x"]),
            ("echo a\\\nb", &["echo", "ab"]),
            ("cat ~/x", &["cat", "~/x"]),
            ("[ -f x ]", &["[", "-f", "x", "]"]),
        ];
        for (line, want) in cases {
            assert_eq!(argvs(line), vec![v(want)], "{line}");
        }
    }

    #[test]
    fn marks_dynamic_words() {
        let cases: &[(&str, bool)] = &[
            ("echo hi", false),
            ("echo $HOME", true),
            ("echo \"$HOME\"", true),
            ("echo '$HOME'", false),
            ("rm *.o", true),
            ("rm '*.o'", false),
            ("rm a?", true),
            ("rm {a,b}", true),
            ("rm [ab]", true),
            ("echo $((1+2))", true),
            ("echo ~user", true),
            ("echo ~", false),
            ("$CMD x", true),
            ("eval echo hi", true),
            ("source x.sh", true),
            (". x.sh", true),
            ("bash x.sh", true),
            ("echo hi > $F", true),
        ];
        for (line, dynamic) in cases {
            let commands = split(line).unwrap();
            assert_eq!(commands[0].dynamic, *dynamic, "{line}");
        }
        assert_eq!(argvs("echo $HOME"), vec![v(&["echo", "$HOME"])]);
        assert_eq!(argvs("rm *.o"), vec![v(&["rm", "*.o"])]);
    }

    #[test]
    fn unwraps_wrappers() {
        let cases: &[(&str, &[&str])] = &[
            ("bash -c 'rm -rf /'", &["rm", "-rf", "/"]),
            ("sh -c 'rm -rf /'", &["rm", "-rf", "/"]),
            ("zsh -c 'rm -rf /'", &["rm", "-rf", "/"]),
            ("bash -xec 'rm -rf /' name arg", &["rm", "-rf", "/"]),
            ("bash -o pipefail -c 'rm x'", &["rm", "x"]),
            ("/bin/bash --norc -c 'rm x'", &["rm", "x"]),
            ("xargs rm", &["rm"]),
            ("xargs -0 -n 1 -I{} rm {}", &["rm", "{}"]),
            ("xargs -P 4 --max-args=2 rm -f", &["rm", "-f"]),
            ("env rm", &["rm"]),
            ("env -i FOO=1 -u BAR rm x", &["rm", "x"]),
            ("env -S 'rm x'", &["rm", "x"]),
            ("command rm", &["rm"]),
            ("command -p rm x", &["rm", "x"]),
            ("builtin cd x", &["cd", "x"]),
            ("exec -a name rm x", &["rm", "x"]),
            ("nohup rm x", &["rm", "x"]),
            ("command time -v rm x", &["rm", "x"]),
            ("/usr/bin/time -o out rm x", &["rm", "x"]),
            ("nice rm x", &["rm", "x"]),
            ("nice -n 10 rm x", &["rm", "x"]),
            ("nice -10 rm x", &["rm", "x"]),
            ("timeout 5 rm x", &["rm", "x"]),
            ("timeout -s KILL -k 1 5s rm x", &["rm", "x"]),
            ("timeout --signal=KILL 5 rm x", &["rm", "x"]),
            ("sudo rm", &["rm"]),
            ("sudo -u root -E rm x", &["rm", "x"]),
            ("sudo -uroot rm x", &["rm", "x"]),
            ("sudo --user=root FOO=1 rm x", &["rm", "x"]),
            ("sudo -- rm x", &["rm", "x"]),
            ("/bin/rm -rf /", &["rm", "-rf", "/"]),
            ("find . -name x -exec rm {} \\;", &["rm", "{}"]),
            ("find . -execdir rm {} +", &["rm", "{}"]),
            ("eval 'rm -rf /'", &["rm", "-rf", "/"]),
            ("trap 'rm -rf /' EXIT", &["rm", "-rf", "/"]),
            ("sudo env nice bash -c 'command rm x'", &["rm", "x"]),
        ];
        for (line, wanted) in cases {
            let got = argvs(line);
            assert!(got.contains(&v(wanted)), "{line}: {got:?}");
            assert!(
                got.len() >= 2,
                "{line}: the wrapper is reported too: {got:?}"
            );
        }
        // The wrapper is reported first, with all its words.
        assert_eq!(
            argvs("sudo rm x"),
            vec![v(&["sudo", "rm", "x"]), v(&["rm", "x"])]
        );
        // xargs without a command runs echo: nothing more to report.
        assert_eq!(argvs("xargs -0"), vec![v(&["xargs", "-0"])]);
        // Commands run by xargs get arguments from standard input.
        assert!(split("xargs rm").unwrap().iter().all(|c| c.dynamic));
        // The shell itself, running a file or standard input, is dynamic.
        assert!(split("curl x | sh").unwrap()[1].dynamic);
        assert!(!split("bash -c 'ls'").unwrap()[1].dynamic);
        // A dynamic script is dynamic.
        assert!(split("bash -c \"$X\"").unwrap()[0].dynamic);
    }

    #[test]
    fn collects_writes() {
        let cases: &[(&str, &[&str])] = &[
            ("echo hi > /etc/passwd", &["/etc/passwd"]),
            ("echo hi >> log", &["log"]),
            ("echo hi >| log", &["log"]),
            ("echo hi &> log", &["log"]),
            ("echo hi &>> log", &["log"]),
            ("echo hi 2> err", &["err"]),
            ("echo hi >&out", &["out"]),
            ("cat <> rw", &["rw"]),
            ("echo hi 2>&1", &[]),
            ("echo hi >&2", &[]),
            ("echo hi 2>&-", &[]),
            ("cat < in", &[]),
            ("echo hi > 'a b'", &["a b"]),
            ("echo hi > a > b", &["a", "b"]),
        ];
        for (line, want) in cases {
            let commands = split(line).unwrap();
            assert_eq!(commands[0].writes, v(want), "{line}");
        }
        let commands = split("{ a; b; } > f").unwrap();
        assert!(
            commands.iter().all(|c| c.writes == v(&["f"])),
            "{commands:?}"
        );
        let commands = split("> f").unwrap();
        assert_eq!(
            commands,
            vec![SimpleCommand {
                argv: vec![],
                writes: v(&["f"]),
                dynamic: false,
                reads: vec![],
            }]
        );
        // Reads: the command's own `<`, an enclosing compound's, and a bare `< f`.
        let commands = split("cat < ~/.aws/credentials && { a; } < in.txt; < last").unwrap();
        let reads: Vec<(String, Vec<String>)> = commands
            .iter()
            .map(|c| (c.argv.join(" "), c.reads.clone()))
            .collect();
        assert_eq!(
            reads,
            [
                ("cat".to_owned(), v(&["~/.aws/credentials"])),
                ("a".to_owned(), v(&["in.txt"])),
                (String::new(), v(&["last"])),
            ]
        );
        let commands = split("sudo tee x > f").unwrap();
        assert!(
            commands.iter().all(|c| c.writes == v(&["f"])),
            "{commands:?}"
        );
        let commands = split("/usr/bin/time -o out ls").unwrap();
        assert!(
            commands[1].writes.contains(&"out".to_owned()),
            "{commands:?}"
        );
    }

    #[test]
    fn refuses_what_it_cannot_parse() {
        for line in [
            "echo 'unterminated",
            "echo \"unterminated",
            "echo $(unterminated",
            "echo `unterminated",
            "if a; then b",
            "a &&",
            "| a",
            "( a",
            "a )",
            "cat <<EOF\nno end",
            "bash -c 'echo \"unterminated'",
            // Empty here-document delimiters (brush's tokenizer loops forever on them).
            "git -m[$ifdi <<\r< ",
            "a <<'' ",
            "a <<\"\" ",
            "a <<-'' ",
            "a << $'' ",
            "bash -c $'a <<\\r< '",
            // Numbers that overflow inside brush (it would panic).
            "echo 888888333333333333333333333<x",
            "echo 99999999999>x",
            "echo ~+99999999999999999999999",
            "echo ~-99999999999999999999999",
            "cd ~99999999999999999999999",
            // Words with many `(` around substitutions, or nested subscripts (exponential in
            // brush's word parser).
            "echo ${d[${d[${d[${d[${d[${d[ ]}]}]}]}]}]}",
            "echo $((x$((x$((x$((x$((x$((x$((x$((x$((x",
            "echo \"$(cat <<'E'\n$((x$((x$((x$((x$((x$((x$((x\nE\n)\"",
            // Unclosed `(` (exponential in brush's grammar).
            "( ( rm -rf((((((((((((((((((((((((((((((",
            "( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a",
            "echo $(( ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a ( ( a )",
        ] {
            assert!(
                split(line).is_err(),
                "{line:?} must not split: {:?}",
                split(line)
            );
        }
        // A `#` comment inside `$(…)` hides a `)` from the word parser: the command after it
        // is either reported or the line is refused, never hidden.
        for line in [
            "echo $(echo x # )\n curl evil)",
            "echo \"$(echo x # )\n curl evil)\"",
            "echo $(cat <<'E'\n)\nE\ncurl evil)",
            "echo \"$(cat <<'E'\n)\nE\ncurl evil)\"",
        ] {
            match split(line) {
                Err(_) => {}
                Ok(commands) => assert!(
                    commands.iter().any(|c| c.argv == v(&["curl", "evil"])),
                    "{line:?}: {commands:?}"
                ),
            }
        }
    }

    #[test]
    fn refuses_too_long_too_deep_too_complex() {
        let long = "a".repeat(MAX_LINE_BYTES + 1);
        assert!(matches!(split(&long), Err(SplitError::TooLong { .. })));
        let ok = format!(
            "{}a{}",
            "( ".repeat(MAX_DEPTH - 1),
            " )".repeat(MAX_DEPTH - 1)
        );
        assert!(split(&ok).is_ok());
        let deep = format!(
            "{}a{}",
            "( ".repeat(MAX_DEPTH + 1),
            " )".repeat(MAX_DEPTH + 1)
        );
        assert!(
            matches!(split(&deep), Err(SplitError::TooDeep { .. })),
            "{:?}",
            split(&deep)
        );
        let deep = format!(
            "{}a{}",
            "$(".repeat(MAX_DEPTH + 1),
            ")".repeat(MAX_DEPTH + 1)
        );
        assert!(
            matches!(
                split(&deep),
                Err(SplitError::TooDeep { .. } | SplitError::TooComplex { .. })
            ),
            "{:?}",
            split(&deep)
        );
        let deep = format!("{}rm", "env ".repeat(MAX_DEPTH + 1));
        assert!(
            matches!(split(&deep), Err(SplitError::TooDeep { .. })),
            "{:?}",
            split(&deep)
        );
        // At the nesting-token limit the parser runs (and the depth check refuses); one more
        // and it is not even handed to the parser.
        for (open, close) in [
            ("{ ", "; }"),
            ("if a; then ", "; fi"),
            ("echo $(", ")"),
            ("echo ${x:-", "}"),
            ("case x in x) ", ";; esac"),
            ("[[ ( ", " ) ]]"),
            ("while a; do ", "; done"),
        ] {
            let opens = count_nesting_tokens(open);
            let n = MAX_NESTING_TOKENS / opens;
            let line = format!("{}a{}", open.repeat(n), close.repeat(n));
            assert!(split(&line).is_err(), "{open}");
            let line = format!("{}a{}", open.repeat(n + 1), close.repeat(n + 1));
            assert!(
                matches!(split(&line), Err(SplitError::TooComplex { .. })),
                "{open}"
            );
        }
        // Unclosed openers across a whole 64 KiB line.
        let line = "{ ".repeat(MAX_LINE_BYTES / 2);
        assert!(split(&line).is_err());
        let line = "[[ ! ".to_owned() + &"! ".repeat(MAX_LINE_BYTES / 2 - 4);
        assert!(split(&line).is_err());
    }

    #[test]
    fn issue_examples() {
        assert_eq!(
            argvs("git status && curl x | sh"),
            vec![v(&["git", "status"]), v(&["curl", "x"]), v(&["sh"])]
        );
        assert!(argvs("echo $(curl x)").contains(&v(&["curl", "x"])));
        assert!(argvs("bash -c 'rm -rf /'").contains(&v(&["rm", "-rf", "/"])));
        for line in ["xargs rm", "env rm", "command rm", "sudo rm"] {
            assert!(argvs(line).contains(&v(&["rm"])), "{line}");
        }
        assert_eq!(
            split("echo hi > /etc/passwd").unwrap()[0].writes,
            v(&["/etc/passwd"])
        );
        assert!(split("echo 'unterminated").is_err());
    }

    #[test]
    fn decodes_ansi_c() {
        let cases: &[(&str, Option<&str>)] = &[
            ("abc", Some("abc")),
            ("a\\nb", Some("a\nb")),
            ("\\x41\\101\\u00e9\\U0001F600", Some("AAé😀")),
            ("\\cA", Some("\u{1}")),
            ("a\\0b", Some("a")),
            ("\\xff", None),
            ("\\q", Some("\\q")),
            ("\\'", Some("'")),
        ];
        for (body, want) in cases {
            assert_eq!(decode_ansi_c(body).as_deref(), *want, "{body}");
        }
    }

    /// A small deterministic generator (xorshift): `split` never panics and always returns on
    /// random printable lines and on random mixes of shell syntax.
    #[test]
    fn random_lines_never_panic() {
        const ATOMS: &[&str] = &[
            "a",
            "rm",
            " ",
            " ",
            "-rf",
            "/",
            "'",
            "\"",
            "\\",
            "$",
            "(",
            ")",
            "{",
            "}",
            "[",
            "]",
            "`",
            ";",
            "&",
            "|",
            "&&",
            "||",
            "<",
            ">",
            ">>",
            "<<",
            "EOF",
            "\n",
            "#",
            "*",
            "?",
            "!",
            "~",
            "=",
            "$(",
            "${",
            "$((",
            "<(",
            "bash -c ",
            "sudo ",
            "xargs ",
            "env ",
            "if ",
            "then ",
            "fi",
            "case ",
            " in ",
            "esac",
            "do ",
            "done",
            "for ",
            "while ",
            ":-",
            "@(",
            "$'",
            "\\x41",
            "2>&1",
            "&>",
            "eval ",
            "function ",
            "coproc ",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..3000 {
            let len = (next() % 40) as usize;
            let mut line = String::new();
            for _ in 0..len {
                if round % 2 == 0 {
                    line.push_str(ATOMS[(next() % ATOMS.len() as u64) as usize]);
                } else {
                    line.push(char::from(b' ' + (next() % 95) as u8));
                }
            }
            // A panic inside the parser is caught and reported as `Internal`: none may happen.
            if let Err(SplitError::Internal { reason, .. }) = split(&line) {
                panic!("{line:?}: {reason}");
            }
        }
    }
}

#[cfg(test)]
mod review_tests {
    use super::*;

    fn argvs(line: &str) -> Vec<String> {
        split(line)
            .unwrap()
            .iter()
            .map(|c| c.argv.join(" "))
            .collect()
    }

    #[test]
    fn more_wrappers_and_attached_option_values_are_unwrapped() {
        for line in [
            "stdbuf -o0 rm -f x",
            "setsid rm -f x",
            "ionice -c3 rm -f x",
            "taskset 0x1 rm -f x",
            "chrt 10 rm -f x",
            "flock /tmp/lock rm -f x",
            "flock /tmp/lock -c 'rm -f x'",
            "env -S\"rm -f x\"",
            "env --split-string='rm -f x'",
        ] {
            let got = argvs(line);
            assert!(
                got.iter().any(|a| a == "rm -f x"),
                "{line:?} must report `rm -f x`: {got:?}"
            );
        }
        // `time -oFILE` and `--output=FILE` write FILE.
        for line in [
            "/usr/bin/time -o out.txt ls",
            "/usr/bin/time -oout.txt ls",
            "/usr/bin/time --output=out.txt ls",
        ] {
            let commands = split(line).unwrap();
            assert!(
                commands.iter().any(|c| c.writes == ["out.txt"]),
                "{line:?}: {commands:?}"
            );
        }
    }

    #[test]
    fn a_brace_or_glob_split_by_quotes_is_a_pattern() {
        for line in ["{r''m,-f,x}", "/bin/[r'']m -f x", "r\"\"*m x"] {
            let commands = split(line).unwrap();
            assert!(commands.iter().any(|c| c.dynamic), "{line:?}: {commands:?}");
        }
        // Negative control: quoted pattern characters are literal.
        let commands = split("echo '{a,b}' \"*\"").unwrap();
        assert!(!commands[0].dynamic, "{commands:?}");
    }
}

#[cfg(test)]
#[cfg(test)]
mod parser_stack_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A thread with a small stack (64 KiB, far less than a deep line needs) still splits an
    /// ordinary line and the deepest lines accepted: each text moves to a fresh stack when the
    /// caller's is short. Without that, the 1,000-level line overflows this thread's stack
    /// and aborts the test binary.
    #[test]
    fn a_small_stack_splits_deep_lines_on_a_fresh_stack() {
        let deep = |open: &str, close: &str, n: usize| {
            format!("{}true{}", open.repeat(n), close.repeat(n))
        };
        let got = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let plain = split("git status && cargo test").unwrap().len();
                // Deep but within the depth limit: parses, every level walked.
                let nested = split(&deep("bash -c \"$(", ")\"", 3)).map(|c| c.len());
                // As many nesting tokens as accepted: the parser runs to the end of it (and the
                // depth limit refuses it), with no overflow on the way.
                let widest = split(&deep("( ", " )", MAX_NESTING_TOKENS));
                (plain, nested, widest)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(got.0, 2);
        assert!(got.1.is_ok(), "{:?}", got.1);
        assert!(
            matches!(got.2, Err(SplitError::TooDeep { .. })),
            "{:?}",
            got.2
        );
    }

    /// The stack given per nesting token covers the parser and the walker: lines of each
    /// nesting shape, on a thread with just that stack (and room for the frames above the
    /// first text), so that they are parsed in place, not on a fresh stack. A per-level figure
    /// that is too small overflows this thread and aborts the test binary (debug builds, whose
    /// frames are the largest).
    #[test]
    fn the_stack_per_level_covers_each_nesting_shape() {
        for (open, close) in [
            ("{ ", "; }"),
            ("( ", " )"),
            ("if a; then ", "; fi"),
            ("echo $(", ")"),
            ("echo `", "`"),
            ("echo ${x:-", "}"),
            ("case x in x) ", ";; esac"),
            ("[[ ( ", " ) ]]"),
            ("while a; do ", "; done"),
            ("f() { ", "; }"),
            ("! ", ""),
        ] {
            let n = 200 / count_nesting_tokens(open).max(1);
            let line = format!("{}a{}", open.repeat(n), close.repeat(n));
            let tokens = count_nesting_tokens(&line);
            let stack = STACK_BASE_BYTES + tokens * STACK_PER_LEVEL_BYTES;
            std::thread::Builder::new()
                .stack_size(stack + 256 * 1024)
                .spawn(move || {
                    let _ = split(&line);
                })
                .unwrap()
                .join()
                .unwrap();
        }
    }

    /// Two shapes whose depth the count once missed, on a thread with a 2 MiB stack (a tokio
    /// worker's): a `[[ … ]]` chain of 20,000 `&&` (one tree level each) and 4,000 `if`s split
    /// by a backslash-newline (the tokenizer joins them). Each is refused as too complex, as
    /// any line past the bound is, instead of overflowing the stack and aborting the process.
    #[test]
    fn uncounted_depth_is_counted() {
        let chain = format!("[[ a{} ]]", "&&a".repeat(20_000));
        let split_if = format!("{}a{}", "i\\\nf a;then ".repeat(4000), ";fi".repeat(4000));
        let got = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || (split(&chain), split(&split_if)))
            .unwrap()
            .join()
            .unwrap();
        for r in [got.0, got.1] {
            assert!(matches!(r, Err(SplitError::TooComplex { .. })), "{r:?}");
        }
        // Control: a short line of each shape still splits.
        assert!(split("[[ a && b ]] && echo x").is_ok());
        assert_eq!(split("i\\\nf true; then echo x; fi").unwrap().len(), 2);
    }

    /// Lines from many threads at once each get their own answer.
    #[test]
    fn concurrent_lines_each_get_their_own_split() {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let line = format!("echo t{t} i{i} > out{t}_{i}");
                        let split = split(&line).unwrap();
                        assert_eq!(split.len(), 1, "{line}");
                        assert_eq!(
                            split[0].argv,
                            vec!["echo", &format!("t{t}"), &format!("i{i}")]
                        );
                        assert_eq!(split[0].writes, vec![format!("out{t}_{i}")]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// A panic of the parser is that line's `Internal` error, and the next line parses.
    /// Control: the same line is not an error to anything but this test's hook.
    #[test]
    fn a_parser_panic_is_an_internal_error_and_the_next_line_parses() {
        let e = split(parser::PANIC_FOR_TEST).unwrap_err();
        assert!(
            matches!(&e, SplitError::Internal { reason, .. } if reason == "parser panicked: as the test asked"),
            "{e:?}"
        );
        assert_eq!(split("true 3").unwrap()[0].argv, vec!["true", "3"]);
    }
}
