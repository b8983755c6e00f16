//! The docs match the binary and the repository (issue 11, item 9).
//!
//! 1. Every checked example in `README.md` and `docs/*.md` is run against the real `garuda`
//!    binary and its output compared with what the document shows. A checked example is a
//!    fenced block whose info string starts with `console`:
//!
//!    ````text
//!    ```console
//!    $ garuda policy decide write_file .git/hooks/pre-commit
//!    deny (write into .git): .git/hooks/pre-commit is inside a .git folder
//!      rule .git/ (hooks and config run on the host) from built-in
//!    ```
//!    ````
//!
//!    A line `$ garuda ARGS…` is a command (words split as a shell would for plain words and
//!    `'…'`/`"…"` quotes, `~/` at a word's start is the home; pipes, redirections, `$` and globs
//!    are refused); the lines after it, up to the next `$ ` line, are what it prints, stdout and
//!    stderr together as a terminal shows them. In them `…` stands for any text within the
//!    line, and a line holding only `…` for any number of lines (machine-dependent parts:
//!    versions, kernels, hashes, times). A last line `[exit N]` says the command exits with N;
//!    without it, it must exit 0. A fenced block with `file=PATH` in its info string (```` ```json
//!    file=~/.garuda/policy.json ````) is written to PATH (`~/` the home, else relative to the
//!    project) before the commands after it in the same document.
//!
//!    Each document runs in a world of its own: an empty home shown as `/home/u` (`HOME`, no
//!    `GARUDA_HOME`, so Garuda's home is `/home/u/.garuda`), a fresh `git init` project at
//!    `/home/u/project` as the working directory, `PATH=/usr/local/bin:/usr/bin:/bin` and no
//!    other variable. The real temporary paths are replaced by those names in the output.
//!    The examples show a machine where both Linux sandboxes and every `doctor` check work and
//!    no managed policy is installed; elsewhere the comparison is NOT TESTED (and fails unless
//!    `GARUDA_ALLOW_NOT_TESTED` names `docs-match`).
//!
//!    A `$ garuda` line in any other fenced block is an error: a shown command is checked or it
//!    is not shown as a command.
//! 2. The docs name nothing outside the repository: no link or `../` path that leaves it or
//!    names nothing in it, no path on the author's machine (`/work/shared`, `/work/wt`,
//!    `/root/`, …: `MACHINE_PATHS`), and every repository path in a code span (`supervisor/tests/cli.rs`) exists.
//! 3. `docs/hld.md`'s code map names every Rust source and shell script of the repository.
//!
//! Each check has a negative control here: a wrong example, a link out and an unnamed file
//! are reported with their file and line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

mod common;
use common::{base_dir, garuda};

use std::fmt;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How the test's home appears in the documents.
const SHOWN_HOME: &str = "/home/u";
/// The project, inside the home.
const PROJECT_DIR: &str = "project";
/// The `NOT TESTED` case name of the comparison.
const CASE: &str = "docs-match";
/// A command that runs longer than this is reported (a hang, not a measurement).
const COMMAND_LIMIT: Duration = Duration::from_secs(300);

/// One problem, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finding {
    file: String,
    line: usize,
    message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

fn finding(file: &str, line: usize, message: impl Into<String>) -> Finding {
    Finding {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

fn report(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join("\n\n")
}

// ---------------------------------------------------------------------------------------------
// Parsing the documents
// ---------------------------------------------------------------------------------------------

/// A word of a command: its text, and whether it began with an unquoted `~/` (or is `~`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    home: bool,
}

/// What a document asks the test to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Write `content` to `path` (home-relative when `home`, else project-relative).
    File {
        line: usize,
        path: String,
        home: bool,
        content: String,
    },
    /// Run `garuda` with `args`; expect `expected` (each with its line) and `exit`.
    Command {
        line: usize,
        shown: String,
        args: Vec<Word>,
        expected: Vec<(usize, String)>,
        exit: i32,
    },
}

/// A fenced code block: the line of its opening fence, its info string and its lines (with
/// their line numbers, the fence's indentation removed).
struct Block {
    line: usize,
    info: String,
    lines: Vec<(usize, String)>,
}

/// The fenced blocks of a Markdown text, and the lines outside them. An unclosed fence is a
/// finding.
fn blocks(file: &str, text: &str) -> (Vec<Block>, Vec<(usize, String)>, Vec<Finding>) {
    let mut out = Vec::new();
    let mut prose = Vec::new();
    let mut findings = Vec::new();
    // (fence char, fence length, indent, block)
    let mut open: Option<(char, usize, usize, Block)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim_start_matches(' ');
        let indent = raw.len() - trimmed.len();
        let fence = ['`', '~'].into_iter().find_map(|c| {
            let len = trimmed.chars().take_while(|&x| x == c).count();
            (len >= 3).then_some((c, len))
        });
        match (&mut open, fence) {
            (Some((c, len, _, _)), Some((fc, flen)))
                if fc == *c && flen >= *len && trimmed[flen..].trim().is_empty() =>
            {
                let (_, _, _, block) = open.take().expect("open block");
                out.push(block);
            }
            (Some((_, _, ind, block)), _) => {
                let cut = indent.min(*ind);
                block.lines.push((n, raw[cut..].to_string()));
            }
            (None, Some((c, len))) => {
                open = Some((
                    c,
                    len,
                    indent,
                    Block {
                        line: n,
                        info: trimmed[len..].trim().to_string(),
                        lines: Vec::new(),
                    },
                ));
            }
            (None, None) => prose.push((n, raw.to_string())),
        }
    }
    if let Some((_, _, _, block)) = open {
        findings.push(finding(file, block.line, "a fenced block is never closed"));
    }
    (out, prose, findings)
}

/// Split a command line into words: plain words, `'…'`, `"…"` (with `\"`, `\\`), `\x`.
/// Anything a shell would expand or redirect is refused: the test runs no shell.
fn split_words(line: &str) -> Result<Vec<Word>, String> {
    let mut words = Vec::new();
    let mut cur: Option<Word> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(w) = cur.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = cur.get_or_insert(Word {
                    text: String::new(),
                    home: false,
                });
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => w.text.push(x),
                        None => return Err("a `'` quote is not closed".into()),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert(Word {
                    text: String::new(),
                    home: false,
                });
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$' | '`')) => w.text.push(x),
                            Some(x) => {
                                w.text.push('\\');
                                w.text.push(x);
                            }
                            None => return Err("a `\"` quote is not closed".into()),
                        },
                        Some(x @ ('$' | '`')) => {
                            return Err(format!(
                                "`{x}` inside \"…\" is not supported: no shell runs"
                            ))
                        }
                        Some(x) => w.text.push(x),
                        None => return Err("a `\"` quote is not closed".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(x) => cur
                    .get_or_insert(Word {
                        text: String::new(),
                        home: false,
                    })
                    .text
                    .push(x),
                None => return Err("a `\\` ends the line".into()),
            },
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' | '*' | '?' | '[' | '#' => {
                return Err(format!(
                    "`{c}` is shell syntax, which a checked command cannot use: no shell runs"
                ))
            }
            '~' if cur.is_none() && matches!(chars.peek(), None | Some('/' | ' ')) => {
                cur = Some(Word {
                    text: String::new(),
                    home: true,
                });
            }
            c => cur
                .get_or_insert(Word {
                    text: String::new(),
                    home: false,
                })
                .text
                .push(c),
        }
    }
    if let Some(w) = cur {
        words.push(w);
    }
    Ok(words)
}

/// `[exit N]`, the marker of an expected exit code.
fn exit_marker(line: &str) -> Option<Result<i32, String>> {
    let inner = line.trim().strip_prefix("[exit ")?.strip_suffix(']')?;
    Some(
        inner
            .parse()
            .map_err(|_| format!("`[exit {inner}]`: not an exit code")),
    )
}

/// The steps of a document and what is wrong with its blocks.
fn parse(file: &str, text: &str) -> (Vec<Step>, Vec<Finding>) {
    let (blocks, _, mut findings) = blocks(file, text);
    let mut steps = Vec::new();
    for block in blocks {
        let mut info = block.info.split_whitespace();
        let lang = info.next().unwrap_or("");
        let target = info.find_map(|w| w.strip_prefix("file="));
        if let Some(path) = target {
            match file_target(path) {
                Ok((path, home)) => {
                    let content: String =
                        block.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
                    steps.push(Step::File {
                        line: block.line,
                        path,
                        home,
                        content,
                    });
                }
                Err(why) => findings.push(finding(file, block.line, why)),
            }
        }
        if lang == "console" {
            parse_console(file, &block, &mut steps, &mut findings);
        } else {
            // A command shown anywhere else would not be checked.
            for (n, l) in &block.lines {
                if is_garuda_prompt(l) {
                    findings.push(finding(
                        file,
                        *n,
                        format!(
                            "a `$ garuda` command in {} is not checked: make the block \
                             ```console (docs/hld.md, \"Examples checked against the binary\") \
                             or drop the `$ `",
                            if lang.is_empty() {
                                "an unlabelled ``` block".to_string()
                            } else {
                                format!("a ```{lang} block")
                            }
                        ),
                    ));
                }
            }
        }
    }
    findings.sort_by_key(|f| f.line);
    (steps, findings)
}

fn is_garuda_prompt(line: &str) -> bool {
    let t = line.trim_start();
    t == "$ garuda" || t.starts_with("$ garuda ")
}

/// Where a `file=` block goes: `~/x` in the home, `x` in the project. Nothing outside the
/// test's world.
fn file_target(path: &str) -> Result<(String, bool), String> {
    let (rest, home) = match path.strip_prefix("~/") {
        Some(r) => (r, true),
        None => (path, false),
    };
    let p = Path::new(rest);
    if rest.is_empty()
        || p.is_absolute()
        || p.components().any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(format!(
            "`file={path}`: a file block names `~/PATH` or a path inside the project, without `..`"
        ));
    }
    Ok((rest.to_string(), home))
}

fn parse_console(file: &str, block: &Block, steps: &mut Vec<Step>, findings: &mut Vec<Finding>) {
    let mut current: Option<Step> = None;
    let finish = |step: Option<Step>, steps: &mut Vec<Step>, findings: &mut Vec<Finding>| {
        let Some(Step::Command {
            line,
            shown,
            args,
            mut expected,
            ..
        }) = step
        else {
            return;
        };
        while expected.last().is_some_and(|(_, l)| l.trim().is_empty()) {
            expected.pop();
        }
        let mut exit = 0;
        if let Some(marker) = expected.last().and_then(|(_, l)| exit_marker(l)) {
            let (n, _) = expected.pop().expect("the marker line");
            match marker {
                Ok(code) => exit = code,
                Err(why) => findings.push(finding(file, n, why)),
            }
        }
        if let Some((n, _)) = expected.iter().find(|(_, l)| exit_marker(l).is_some()) {
            findings.push(finding(
                file,
                *n,
                "`[exit N]` must be the last line of a command's output",
            ));
        }
        steps.push(Step::Command {
            line,
            shown,
            args,
            expected,
            exit,
        });
    };
    for (n, l) in &block.lines {
        if let Some(cmd) = l.strip_prefix("$ ") {
            finish(current.take(), steps, findings);
            match split_words(cmd) {
                Ok(words) if words.first().is_some_and(|w| w.text == "garuda" && !w.home) => {
                    current = Some(Step::Command {
                        line: *n,
                        shown: cmd.trim().to_string(),
                        args: words[1..].to_vec(),
                        expected: Vec::new(),
                        exit: 0,
                    });
                }
                Ok(_) => findings.push(finding(
                    file,
                    *n,
                    format!(
                        "`{}`: a checked block runs only `garuda` commands (show other commands \
                         in a ```sh block, without `$ `)",
                        cmd.trim()
                    ),
                )),
                Err(why) => findings.push(finding(file, *n, format!("`{}`: {why}", cmd.trim()))),
            }
        } else if let Some(Step::Command { expected, .. }) = &mut current {
            expected.push((*n, l.clone()));
        } else if !l.trim().is_empty() {
            findings.push(finding(
                file,
                *n,
                "a ```console block starts with a `$ garuda …` line; this line comes before any",
            ));
        }
    }
    finish(current.take(), steps, findings);
    if !block.lines.iter().any(|(_, l)| l.starts_with("$ ")) {
        findings.push(finding(
            file,
            block.line,
            "a ```console block with no `$ ` command",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

/// One line against a pattern in which `…` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line.ends_with(last) || line.len() < first.len() + last.len() {
        return false;
    }
    let end = line.len() - last.len();
    let mut pos = first.len();
    for mid in &parts[1..parts.len() - 1] {
        match line[pos..end].find(mid) {
            Some(i) => pos += i + mid.len(),
            None => return false,
        }
    }
    true
}

/// Lines against patterns in which a line `…` stands for any number of lines.
fn lines_match(expected: &[&str], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((&"…", rest)) => (0..=actual.len()).any(|k| lines_match(rest, &actual[k..])),
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, arest)| line_matches(e, a) && lines_match(rest, arest)),
    }
}

/// Output as lines: trailing blanks of each line and trailing empty lines dropped.
fn output_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Why `actual` is not what the document shows at `expected`, or `None`.
fn compare(
    file: &str,
    expected: &[(usize, String)],
    exit: i32,
    actual: &str,
    actual_exit: Option<i32>,
) -> Option<String> {
    let want: Vec<String> = expected
        .iter()
        .map(|(_, l)| l.trim_end().to_string())
        .collect();
    let got = output_lines(actual);
    let want_refs: Vec<&str> = want.iter().map(String::as_str).collect();
    let got_refs: Vec<&str> = got.iter().map(String::as_str).collect();
    let text_ok = lines_match(&want_refs, &got_refs);
    let exit_ok = actual_exit == Some(exit);
    if text_ok && exit_ok {
        return None;
    }
    let mut why = String::new();
    if !exit_ok {
        let got = actual_exit.map_or("was killed by a signal".to_string(), |c| {
            format!("exited with {c}")
        });
        why.push_str(&format!(
            "it {got}, the document shows exit {exit}{}\n",
            if exit == 0 {
                " (no `[exit N]` line)"
            } else {
                ""
            }
        ));
    }
    if !text_ok {
        why.push_str("its output differs from the document");
        // The first differing line, while no `…` line makes positions uncertain.
        for (i, (n, w)) in expected.iter().enumerate() {
            if w.trim() == "…" {
                break;
            }
            match got.get(i) {
                Some(g) if line_matches(w.trim_end(), g) => continue,
                Some(g) => {
                    why.push_str(&format!(
                        "; first difference at {file}:{n}:\n    document: {w}\n    garuda:   {g}"
                    ));
                }
                None => why.push_str(&format!(
                    "; garuda printed nothing for {file}:{n} and after"
                )),
            }
            break;
        }
        why.push('\n');
    }
    why.push_str("  the document shows:\n");
    for w in &want {
        why.push_str(&format!("    {w}\n"));
    }
    if exit != 0 {
        why.push_str(&format!("    [exit {exit}]\n"));
    }
    why.push_str("  garuda printed:\n");
    for g in &got {
        why.push_str(&format!("    {g}\n"));
    }
    Some(why)
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// A document's world: `base/home` (shown as `/home/u`) holding the project.
struct World {
    base: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

impl World {
    fn new() -> World {
        let base = base_dir("garuda-docs-match");
        let home = base.path().join("home");
        let project = home.join(PROJECT_DIR);
        fs::create_dir_all(&project).unwrap();
        let home = home.canonicalize().unwrap();
        let project = project.canonicalize().unwrap();
        let out = Command::new("git")
            .args(["-c", "init.defaultBranch=main", "init", "-q"])
            .current_dir(&project)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output()
            .expect("git is needed to make the documents' project (run `git init`)");
        assert!(out.status.success(), "git init: {out:?}");
        World {
            base,
            home,
            project,
        }
    }

    /// The real path of a file block's target.
    fn target(&self, path: &str, home: bool) -> PathBuf {
        if home {
            self.home.join(path)
        } else {
            self.project.join(path)
        }
    }

    /// Run `garuda ARGS…` as the documents' user: (output with the world's paths shown as
    /// the documents show them, exit code). `Err` when it could not be run or did not end.
    fn run(&self, args: &[Word]) -> Result<(String, Option<i32>), String> {
        let args: Vec<String> = args
            .iter()
            .map(|w| {
                if w.home {
                    format!("{}{}", self.home.display(), w.text)
                } else {
                    w.text.clone()
                }
            })
            .collect();
        // stdout and stderr into one file, in the order they were written, as on a terminal.
        let out_path = self.base.path().join("output");
        let out = fs::File::create(&out_path).unwrap();
        let mut child = Command::new(garuda())
            .args(&args)
            .current_dir(&self.project)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", garuda().display()))?;
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > COMMAND_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not end within {} s", COMMAND_LIMIT.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let bytes = fs::read(&out_path).unwrap();
        Ok((self.shown(&String::from_utf8_lossy(&bytes)), status.code()))
    }

    /// The world's home as the documents show it.
    fn shown(&self, text: &str) -> String {
        text.replace(&*self.home.to_string_lossy(), SHOWN_HOME)
    }
}

/// Run a document's steps; `compare_output` false runs them without comparing (NOT TESTED
/// machine). Returns the findings and the commands run (their words).
fn run_doc(file: &str, steps: &[Step], compare_output: bool) -> (Vec<Finding>, Vec<Vec<String>>) {
    let mut findings = Vec::new();
    let mut ran = Vec::new();
    if steps.is_empty() {
        return (findings, ran);
    }
    let world = World::new();
    for step in steps {
        match step {
            Step::File {
                line,
                path,
                home,
                content,
            } => {
                let target = world.target(path, *home);
                if let Err(e) = target
                    .parent()
                    .map_or(Ok(()), fs::create_dir_all)
                    .and_then(|()| fs::write(&target, content))
                {
                    findings.push(finding(file, *line, format!("cannot write `{path}`: {e}")));
                }
            }
            Step::Command {
                line,
                shown,
                args,
                expected,
                exit,
            } => {
                ran.push(args.iter().map(|w| w.text.clone()).collect());
                match world.run(args) {
                    Err(why) => findings.push(finding(file, *line, format!("`{shown}`: {why}"))),
                    Ok((out, code)) => {
                        if !compare_output {
                            continue;
                        }
                        if let Some(why) = compare(file, expected, *exit, &out, code) {
                            findings.push(finding(file, *line, format!("`{shown}`: {why}")));
                        }
                    }
                }
            }
        }
    }
    (findings, ran)
}

// ---------------------------------------------------------------------------------------------
// References out of the repository
// ---------------------------------------------------------------------------------------------

/// Paths that exist only on the machine a document was written on: the folders the project was
/// written in (its shared design and seeds, the main checkout, the helpers' worktrees, the
/// tools' stores), root's and macOS users' homes, `file:` links. (`/work/proj`, the made-up
/// project of the seatbelt golden profile in executors.md, is not one of them.)
const MACHINE_PATHS: [&str; 7] = [
    "/work/shared",
    "/work/main",
    "/work/wt",
    "/work/.",
    "/root/",
    "/Users/",
    "file://",
];

/// `path`, relative to `dir` (both inside `repo`), normalized without touching the disk;
/// `None` when it leaves the repository.
fn inside(repo: &Path, dir: &Path, path: &str) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    let start = dir.strip_prefix(repo).ok()?;
    for c in start.components().chain(Path::new(path).components()) {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// The link targets of a line of prose: `[text](target)`, `<scheme:…>`, `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let t = line.trim_start();
    if t.starts_with('[') {
        if let Some(i) = t.find("]:") {
            if let Some(target) = t[i + 2..].split_whitespace().next() {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// The code spans of a line of prose.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// What in a document names something outside the repository, or a repository path that does
/// not exist. `repo` is the repository's root, `doc` the document's path in it.
fn outside_references(repo: &Path, doc: &str, text: &str) -> Vec<Finding> {
    let dir = repo.join(doc).parent().map(Path::to_path_buf).unwrap();
    let tops: Vec<String> = fs::read_dir(repo)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // Not the repository's own: build output, git's folder, and the `.garuda/` a
        // `garuda sandbox` run in this checkout leaves behind (docs name the project's).
        .filter(|n| n != "target" && n != ".git" && n != ".garuda")
        .collect();
    let mut findings = Vec::new();
    let (_, prose, _) = blocks(doc, text);
    // Machine paths: anywhere, code blocks included.
    for (i, line) in text.lines().enumerate() {
        for m in MACHINE_PATHS {
            if line.contains(m) {
                findings.push(finding(
                    doc,
                    i + 1,
                    format!(
                        "`{m}` is a path on the author's machine, not in the repository: copy what \
                         the reader needs into the repository, or say it in words"
                    ),
                ));
            }
        }
    }
    let check_relative = |n: usize, target: &str, what: &str, findings: &mut Vec<Finding>| {
        let path = target.split('#').next().unwrap_or("");
        if path.is_empty() {
            return;
        }
        if path.starts_with('/') {
            findings.push(finding(
                doc,
                n,
                format!("{what} `{target}` is an absolute path: link inside the repository"),
            ));
            return;
        }
        match inside(repo, &dir, path) {
            None => findings.push(finding(
                doc,
                n,
                format!("{what} `{target}` leaves the repository"),
            )),
            Some(p) if !repo.join(&p).exists() => findings.push(finding(
                doc,
                n,
                format!(
                    "{what} `{target}` names nothing in the repository ({})",
                    p.display()
                ),
            )),
            Some(_) => {}
        }
    };
    for (n, line) in &prose {
        for target in link_targets(line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue; // a web address, not a path
            }
            check_relative(*n, &target, "the link", &mut findings);
        }
        let spans = code_spans(line);
        // Prose words outside code spans that start with `../`.
        let outside_spans: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for word in outside_spans.split_whitespace() {
            // Brackets and quotes around it, punctuation after it; a leading `.` is the path's.
            let word = word
                .trim_start_matches(|c: char| "([\"'".contains(c))
                .trim_end_matches(|c: char| ")],.;:\"'".contains(c));
            if word.starts_with("../") {
                check_relative(*n, word, "the path", &mut findings);
            }
        }
        for span in spans {
            let span = span.trim();
            if span.contains(char::is_whitespace) {
                continue;
            }
            if span.starts_with("../") {
                check_relative(*n, span, "the path", &mut findings);
                continue;
            }
            // A path from the repository's root (`supervisor/tests/cli.rs`) must exist.
            let first = span.split('/').next().unwrap_or("");
            if !span.contains('/') || !tops.iter().any(|t| t == first) {
                continue;
            }
            if span.contains(['*', '?', '<', '{', '…', '$']) {
                continue; // a pattern, not a path
            }
            let path = span.split("::").next().unwrap_or(span);
            let path = path.split('(').next().unwrap_or(path);
            let path = path
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .trim_end_matches(':');
            if !repo.join(path).exists() {
                findings.push(finding(
                    doc,
                    *n,
                    format!("`{span}` names no file or folder of the repository"),
                ));
            }
        }
    }
    findings
}

// ---------------------------------------------------------------------------------------------
// The code map
// ---------------------------------------------------------------------------------------------

/// Every `.rs` and `.sh` file of the repository, relative to it, sorted (build output, git
/// data and fuzz corpora left out).
fn source_files(repo: &Path) -> Vec<String> {
    fn walk(repo: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                if name == "target" || name == "corpus" || name == "artifacts" || name == ".git" {
                    continue;
                }
                walk(repo, &path, out);
            } else if ty.is_file() && (name.ends_with(".rs") || name.ends_with(".sh")) {
                out.push(
                    path.strip_prefix(repo)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let mut out = Vec::new();
    walk(repo, repo, &mut out);
    out.sort();
    out
}

/// The files of `files` that `map` does not name by their path from the repository's root.
fn unmapped<'a>(files: &'a [String], map: &str) -> Vec<&'a str> {
    files
        .iter()
        .filter(|f| !map.contains(&format!("`{f}`")))
        .map(String::as_str)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The documents and the machine
// ---------------------------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// `README.md` and every `docs/*.md`: (path in the repository, text).
fn documents(repo: &Path) -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = fs::read_dir(repo.join("docs"))
        .expect("read docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text =
                fs::read_to_string(repo.join(&n)).unwrap_or_else(|e| panic!("read {n}: {e}"));
            (n, text)
        })
        .collect()
}

/// Why this machine cannot print what the documents show, if it cannot.
fn machine_differs() -> Option<String> {
    for managed in [
        "/etc/garuda/managed-policy.json",
        "/etc/garuda/managed-policy.d",
    ] {
        if Path::new(managed).exists() {
            return Some(format!("{managed} exists and changes every policy answer"));
        }
    }
    let world = World::new();
    let (out, code) = world
        .run(&[
            Word {
                text: "doctor".into(),
                home: false,
            },
            Word {
                text: "--json".into(),
                home: false,
            },
        ])
        .expect("run garuda doctor --json");
    assert_eq!(code, Some(0), "garuda doctor --json: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("doctor's JSON");
    let mut missing = Vec::new();
    for e in v["executors"].as_array().expect("executors") {
        let kind = e["kind"].as_str().unwrap_or("");
        if (kind == "landlock" || kind == "bubblewrap") && e["available"] != true {
            missing.push(format!("{kind}: {}", e["detail"].as_str().unwrap_or("")));
        }
    }
    for c in v["checks"].as_array().expect("checks") {
        if c["ok"] != true {
            missing.push(format!(
                "{}: {}",
                c["name"].as_str().unwrap_or(""),
                c["detail"].as_str().unwrap_or("")
            ));
        }
    }
    (!missing.is_empty()).then(|| {
        format!(
            "the documents show a machine where both Linux sandboxes and every doctor check \
             work; here: {}",
            missing.join("; ")
        )
    })
}

fn not_tested(line: &str) {
    use std::io::Write;
    // Written directly: the harness would keep an `eprintln!` of a passing test to itself.
    let _ = writeln!(std::io::stderr(), "NOT TESTED: {line}");
    let allowed = std::env::var("GARUDA_ALLOW_NOT_TESTED")
        .unwrap_or_default()
        .split([',', ' '])
        .any(|n| n.trim() == CASE);
    assert!(
        allowed,
        "NOT TESTED: {line}; set GARUDA_ALLOW_NOT_TESTED={CASE} to accept that"
    );
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[test]
fn every_checked_example_in_the_docs_prints_what_it_shows() {
    let repo = repo_root();
    let docs = documents(&repo);
    let compare_output = match machine_differs() {
        None => true,
        Some(why) => {
            not_tested(&format!("the docs' examples against the binary ({why})"));
            false
        }
    };
    let mut findings = Vec::new();
    let mut ran: Vec<Vec<String>> = Vec::new();
    for (name, text) in &docs {
        let (steps, parse_findings) = parse(name, text);
        findings.extend(parse_findings);
        let (run_findings, commands) = run_doc(name, &steps, compare_output);
        findings.extend(run_findings);
        ran.extend(commands);
    }
    assert!(
        findings.is_empty(),
        "{} problem(s) in the docs' checked examples:\n\n{}",
        findings.len(),
        report(&findings)
    );
    // What the issue names must be among them (a converted block cannot quietly go back).
    for (what, prefix) in [
        ("`garuda policy decide`", &["policy", "decide"][..]),
        ("`garuda doctor`", &["doctor"][..]),
    ] {
        assert!(
            ran.iter().any(|c| c
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .starts_with(prefix)),
            "no checked example of {what} in README.md or docs/"
        );
    }
}

#[test]
fn the_docs_name_nothing_outside_the_repository() {
    let repo = repo_root();
    let mut findings = Vec::new();
    for (name, text) in documents(&repo) {
        findings.extend(outside_references(&repo, &name, &text));
    }
    assert!(
        findings.is_empty(),
        "the docs name things outside the repository:\n{}",
        report(&findings)
    );
}

#[test]
fn the_code_map_names_every_source_file() {
    let repo = repo_root();
    let files = source_files(&repo);
    // The walk itself works: files every checkout has are among them.
    for known in ["supervisor/src/cli.rs", "supervisor/tests/docs_match.rs"] {
        assert!(
            files.iter().any(|f| f == known),
            "{known} not found: {files:?}"
        );
    }
    let hld = fs::read_to_string(repo.join("docs/hld.md")).unwrap();
    let missing = unmapped(&files, &hld);
    assert!(
        missing.is_empty(),
        "docs/hld.md (\"Where each concern lives\") does not name these files, as `path`:\n  {}",
        missing.join("\n  ")
    );
}

// Negative controls and the harness's own parts.

const WRONG_DOC: &str = r"# A doc

```console
$ garuda policy decide write_file .git/hooks/pre-commit
allow (write into .git): .git/hooks/pre-commit is inside a .git folder
  rule .git/ (hooks and config run on the host) from built-in
$ garuda policy decide write_file .git/config
deny (write into .git): .git/config is inside a .git folder
…
[exit 3]
```
";

#[test]
fn a_wrong_example_is_reported_with_its_file_and_line() {
    let (steps, findings) = parse("docs/wrong.md", WRONG_DOC);
    assert!(findings.is_empty(), "{}", report(&findings));
    let (findings, ran) = run_doc("docs/wrong.md", &steps, true);
    assert_eq!(ran.len(), 2);
    assert_eq!(findings.len(), 2, "{}", report(&findings));
    // The wrong first word, at the command's line and at the line that differs.
    let first = findings[0].to_string();
    assert!(
        first.starts_with("docs/wrong.md:4: `garuda policy decide write_file .git/hooks/pre-commit`: its output differs"),
        "{first}"
    );
    assert!(
        first.contains(
            "first difference at docs/wrong.md:5:\n    document: allow (write into .git)"
        ) && first.contains("    garuda:   deny (write into .git)"),
        "{first}"
    );
    // The output matches (the `…` line), the exit code does not.
    let second = findings[1].to_string();
    assert!(
        second.starts_with(
            "docs/wrong.md:7: `garuda policy decide write_file .git/config`: it exited with 0, the document shows exit 3"
        ) && !second.contains("output differs"),
        "{second}"
    );

    // The same blocks made right pass: the harness can say yes.
    let right = WRONG_DOC
        .replace("allow (write into .git)", "deny (write into .git)")
        .replace("[exit 3]\n", "");
    let (steps, findings) = parse("docs/right.md", &right);
    assert!(findings.is_empty(), "{}", report(&findings));
    let (findings, _) = run_doc("docs/right.md", &steps, true);
    assert!(findings.is_empty(), "{}", report(&findings));
}

#[test]
fn a_file_block_is_written_before_the_commands_after_it() {
    let doc = r#"```json file=~/.garuda/policy.json
{
  "permissions": { "deny": ["Bash(rm *)"] }
}
```
```console
$ garuda policy decide bash 'xargs rm'
deny (deny rule): a deny rule matches `rm`
  rule bash(rm *) from user /home/u/.garuda/policy.json:2
```
"#;
    let (steps, findings) = parse("docs/file.md", doc);
    assert!(findings.is_empty(), "{}", report(&findings));
    let (findings, _) = run_doc("docs/file.md", &steps, true);
    assert!(findings.is_empty(), "{}", report(&findings));
    // Control: without the file block, no deny rule exists and the line is allowed or asked.
    let (steps, _) = parse("docs/file.md", &doc[doc.find("```console").unwrap()..]);
    let (findings, _) = run_doc("docs/file.md", &steps, true);
    assert_eq!(findings.len(), 1, "{}", report(&findings));
    assert!(
        findings[0].to_string().starts_with("docs/file.md:2: "),
        "{}",
        findings[0]
    );
}

#[test]
fn a_block_that_cannot_be_checked_is_reported_with_its_file_and_line() {
    let doc = r"intro
```console
stray text
$ garuda policy decide bash 'unclosed
$ ls -l
$ garuda policy decide bash x | grep y
```
```sh
$ garuda doctor
```
```json file=../outside.json
{}
```
```console
$ garuda doctor
[exit x]
```
```console
```
```console
$ garuda doctor
";
    let (_, findings) = parse("docs/bad.md", doc);
    let got: Vec<String> = findings
        .iter()
        .map(|f| format!("{}:{}", f.file, f.line))
        .collect();
    assert_eq!(
        got,
        [
            "docs/bad.md:3",  // text before the first command
            "docs/bad.md:4",  // unclosed quote
            "docs/bad.md:5",  // not garuda
            "docs/bad.md:6",  // a pipe
            "docs/bad.md:9",  // `$ garuda` in a sh block
            "docs/bad.md:11", // a file block outside the world
            "docs/bad.md:16", // a bad exit marker
            "docs/bad.md:18", // an empty console block
            "docs/bad.md:20", // never closed
        ]
        .map(String::from)
        .to_vec(),
        "{}",
        report(&findings)
    );
    assert!(
        findings[1].message.contains("quote is not closed"),
        "{}",
        findings[1]
    );
    assert!(
        findings[3].message.contains("`|` is shell syntax"),
        "{}",
        findings[3]
    );
}

#[test]
fn words_and_patterns() {
    let w = split_words(r#"policy decide bash 'a && b' "c \"d\"" e\ f ~/x ~ "~/y""#).unwrap();
    let texts: Vec<(&str, bool)> = w.iter().map(|w| (w.text.as_str(), w.home)).collect();
    assert_eq!(
        texts,
        [
            ("policy", false),
            ("decide", false),
            ("bash", false),
            ("a && b", false),
            ("c \"d\"", false),
            ("e f", false),
            ("/x", true),
            ("", true),
            ("~/y", false),
        ]
    );
    assert!(split_words("a > b").is_err());
    assert!(split_words("a $HOME").is_err());
    assert!(split_words("a \"$HOME\"").is_err());

    assert!(line_matches("ABI …", "ABI 7"));
    assert!(line_matches("a … b … c", "a x b y c"));
    assert!(line_matches("…", ""));
    assert!(!line_matches("a … b", "a b"));
    assert!(!line_matches("ABI …", "abi 7"));
    assert!(!line_matches("x", "x "));
    assert!(lines_match(&["a", "…", "d"], &["a", "b", "c", "d"]));
    assert!(lines_match(&["a", "…"], &["a"]));
    assert!(!lines_match(&["a", "…", "d"], &["a", "b"]));
    assert!(!lines_match(&["a"], &["a", "b"]));
}

#[test]
fn a_link_out_of_the_repository_is_reported_with_its_file_and_line() {
    let repo = repo_root();
    let doc = r"# Fine
[policy](policy.md), [readme](../README.md#garuda), <https://example.com/x>, `supervisor/src/cli.rs`
[design](../../shared/DESIGN.md)
the seed (`../shared/seeds/`) and ../shared/bench/gen-project.sh
```sh
bash /work/shared/bench/gen-project.sh
```
[abs](/etc/passwd) and `supervisor/tests/no_such_test.rs` and [gone](gone.md)
";
    let findings = outside_references(&repo, "docs/fake.md", doc);
    let got: Vec<String> = findings
        .iter()
        .map(|f| format!("{}:{}", f.file, f.line))
        .collect();
    assert_eq!(
        got,
        [
            "docs/fake.md:6", // /work/ (machine paths are looked for first)
            "docs/fake.md:3", // leaves the repository
            "docs/fake.md:4", // ../shared/bench/… in prose: names nothing in the repository
            "docs/fake.md:4", // `../shared/seeds/`
            "docs/fake.md:8", // absolute link
            "docs/fake.md:8", // gone.md
            "docs/fake.md:8", // a repository path that does not exist
        ]
        .map(String::from)
        .to_vec(),
        "{}",
        report(&findings)
    );
    assert!(
        findings[1].message.contains("leaves the repository"),
        "{}",
        findings[1]
    );
    // Control: the repository's own README has none of these.
    let readme = fs::read_to_string(repo.join("README.md")).unwrap();
    let clean = outside_references(&repo, "README.md", &readme);
    assert!(clean.is_empty(), "{}", report(&clean));
}

#[test]
fn an_unnamed_source_file_is_reported() {
    let files = vec![
        "a/src/lib.rs".to_string(),
        "a/src/new.rs".to_string(),
        "a/tests/t.rs".to_string(),
    ];
    let map = "| lib | `a/src/lib.rs` |\n| tests | `a/tests/t.rs` |\nand a/src/new.rs without backquotes\n";
    assert_eq!(unmapped(&files, map), ["a/src/new.rs"]);
    assert!(unmapped(&files[..1], map).is_empty());
}
