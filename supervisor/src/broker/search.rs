//! `glob` and `grep`: the project's files by name or content, `.gitignore` respected.
//!
//! The walk is the `ignore` crate's (the `.gitignore`, `.ignore` and `.git/info/exclude` files
//! at and below the project root, and the user's global excludes; hidden files included;
//! links listed, never descended). It starts at the project root and prunes every folder that
//! is not on the way to the searched folder, so the root's `.gitignore` applies to a search of
//! `src/` while nothing above the root does. `.git` folders (and `.git` files) are never
//! entered or listed.
//!
//! The walker reads folders by name, so a folder swapped for a link during the walk could show
//! it names from elsewhere. Nothing it yields is trusted: every candidate is looked up again
//! beneath the held root ([`ProjectRoot::lookup`]), judged by the permission engine where it is
//! written and where it leads (a denied path — `.env`, a secret, a deny rule — is left out;
//! `grep` reads only files the engine allows without a question), and `grep` reads content
//! only through a descriptor opened beneath the root. Results are capped; `truncated` says a
//! cap was hit (more may have matched).

use std::path::Path;

use garuda_ipc::{Answer, ErrorCode, GrepMatch, ProjectPath};
use garuda_policy::engine::{Context, Engine, Verdict};
use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};

use super::judge::{self, error, Tool};
use super::resolve::{Found, ProjectRoot};

/// Most paths one `glob` returns.
pub const MAX_GLOB_PATHS: usize = 1000;

/// Most lines one `grep` returns.
pub const MAX_GREP_MATCHES: usize = 500;

/// A matching line longer than this is cut (at a character boundary) and marked ` […]`.
pub const MAX_GREP_LINE_BYTES: usize = 1000;

/// `grep` skips files larger than this.
pub const MAX_GREP_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Entries one walk visits before it stops (and says `truncated`).
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// Bytes one `grep` reads before it stops (and says `truncated`).
pub const MAX_GREP_READ_BYTES: u64 = 512 * 1024 * 1024;

/// Longest glob or regular expression accepted.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// Memory a compiled regular expression may take (a pattern made to explode is refused).
const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;

/// A prepared search.
#[derive(Debug)]
pub struct Search {
    /// Project-relative real path of the folder (or, for `grep`, file) searched; empty: root.
    base: String,
    base_is_dir: bool,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Glob(GlobMatcher),
    Grep {
        regex: Regex,
        /// Only files matching this (by name when the glob has no `/`).
        files: Option<(GlobMatcher, bool)>,
    },
}

/// `glob`'s matcher for paths relative to the folder `base`.
pub(crate) fn glob(base: &Found, pattern: &str) -> Result<Search, Answer> {
    if !base.meta.is_dir() {
        return Err(error(
            ErrorCode::InvalidArgument,
            "glob's path must be a folder",
        ));
    }
    Ok(Search {
        base: base.resolved.clone(),
        base_is_dir: true,
        kind: Kind::Glob(compile_glob(pattern)?),
    })
}

/// `grep`'s matcher.
pub(crate) fn grep(
    base: &Found,
    pattern: &str,
    glob: Option<&str>,
    case_insensitive: bool,
) -> Result<Search, Answer> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(too_long("pattern"));
    }
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            error(
                ErrorCode::InvalidArgument,
                format!("pattern is not a regular expression: {e}"),
            )
        })?;
    let files = glob
        .map(|g| compile_glob(g).map(|m| (m, !g.contains('/'))))
        .transpose()?;
    Ok(Search {
        base: base.resolved.clone(),
        base_is_dir: base.meta.is_dir(),
        kind: Kind::Grep { regex, files },
    })
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, Answer> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(too_long("glob"));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            error(
                ErrorCode::InvalidArgument,
                format!("not a glob: {}", e.kind()),
            )
        })
}

fn too_long(what: &str) -> Answer {
    error(
        ErrorCode::InvalidArgument,
        format!("the {what} is longer than {MAX_PATTERN_BYTES} bytes"),
    )
}

/// What one search collected.
#[derive(Default)]
struct Collected {
    paths: Vec<String>,
    matches: Vec<GrepMatch>,
    truncated: bool,
    read_bytes: u64,
}

/// Runs a prepared search.
pub(crate) fn run(
    root: &ProjectRoot,
    engine: &Engine<'_>,
    ctx: &Context,
    search: &Search,
) -> Answer {
    let mut out = Collected::default();
    if search.base_is_dir {
        let root_path = match root.real_path() {
            Ok(p) => p,
            Err(e) => {
                return error(ErrorCode::Io, format!("the project root: {e}"));
            }
        };
        walk(root, engine, ctx, search, &root_path, &mut out);
    } else {
        // One file named explicitly: searched even when ignored, as `rg FILE` does, and
        // when the user allowed it on a question.
        consider(root, engine, ctx, search, &search.base, "", &mut out);
    }
    match search.kind {
        Kind::Glob(_) => {
            out.paths.sort();
            Answer::Paths {
                paths: out.paths,
                truncated: out.truncated,
            }
        }
        Kind::Grep { .. } => Answer::Matches {
            matches: out.matches,
            truncated: out.truncated,
        },
    }
}

fn walk(
    root: &ProjectRoot,
    engine: &Engine<'_>,
    ctx: &Context,
    search: &Search,
    root_path: &Path,
    out: &mut Collected,
) {
    let base = search.base.clone();
    let prefix = root_path.to_path_buf();
    let walker = ignore::WalkBuilder::new(root_path)
        .hidden(false)
        .follow_links(false)
        .parents(false)
        .require_git(false)
        .current_dir(root_path)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            // Only the folders on the way to the base, and everything below it.
            let rel = entry
                .path()
                .strip_prefix(&prefix)
                .ok()
                .and_then(Path::to_str);
            rel.is_some_and(|rel| on_the_way(rel, &base))
        })
        .build();
    let mut visited = 0usize;
    for entry in walker {
        let Ok(entry) = entry else { continue };
        visited += 1;
        if visited > MAX_WALK_ENTRIES {
            out.truncated = true;
            return;
        }
        if entry.file_type().is_none_or(|t| t.is_dir()) {
            continue;
        }
        let Some(rel) = entry
            .path()
            .strip_prefix(root_path)
            .ok()
            .and_then(Path::to_str)
        else {
            continue;
        };
        let below = if search.base.is_empty() {
            rel
        } else {
            match rel.strip_prefix(&format!("{}/", search.base)) {
                Some(below) => below,
                None => continue,
            }
        };
        if matches!(search.kind, Kind::Grep { .. }) && entry.path_is_symlink() {
            // Content is searched under the file's own name (a link's target inside the
            // project is walked itself), never twice, never through a link.
            continue;
        }
        if !consider(root, engine, ctx, search, rel, below, out) {
            return;
        }
    }
}

/// `rel` is the base, inside it, or a folder above it.
fn on_the_way(rel: &str, base: &str) -> bool {
    base.is_empty()
        || rel.is_empty()
        || rel == base
        || rel
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
        || base
            .strip_prefix(rel)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Looks at one candidate file; false when a cap stops the search.
fn consider(
    root: &ProjectRoot,
    engine: &Engine<'_>,
    ctx: &Context,
    search: &Search,
    rel: &str,
    below: &str,
    out: &mut Collected,
) -> bool {
    match &search.kind {
        Kind::Glob(matcher) => {
            if !matcher.is_match(below) {
                return true;
            }
            let Some(found) = verified(root, engine, ctx, Tool::Glob, rel, Verdict::Ask) else {
                return true;
            };
            if found.meta.is_dir() {
                return true;
            }
            if out.paths.len() == MAX_GLOB_PATHS {
                out.truncated = true;
                return false;
            }
            out.paths.push(rel.to_owned());
            true
        }
        Kind::Grep { regex, files } => {
            if let Some((matcher, by_name)) = files {
                let subject = if *by_name {
                    rel.rsplit('/').next().unwrap_or(rel)
                } else {
                    below
                };
                if !below.is_empty() && !matcher.is_match(subject) {
                    return true;
                }
            }
            // The file the request named was decided (and asked about) already; a file the
            // walk found is read only when the engine allows it without a question.
            let least = if below.is_empty() {
                Verdict::Ask
            } else {
                Verdict::Allow
            };
            let Some(found) = verified(root, engine, ctx, Tool::Grep, rel, least) else {
                return true;
            };
            grep_file(root, regex, rel, &found, out)
        }
    }
}

/// The candidate looked up again beneath the root, when it is a file the engine judges at
/// least `least` (glob lists what a question could open; grep reads only what is allowed).
fn verified(
    root: &ProjectRoot,
    engine: &Engine<'_>,
    ctx: &Context,
    tool: Tool,
    rel: &str,
    least: Verdict,
) -> Option<Found> {
    let pp = ProjectPath::parse(rel).ok()?;
    let found = root.lookup(&pp).ok()?;
    if found.resolved.split('/').any(|c| c == ".git") {
        return None;
    }
    let decision = judge::decide(engine, ctx, tool, rel, &found.resolved);
    (decision.verdict >= least).then_some(found)
}

/// Searches one file; false when a cap stops the search.
fn grep_file(
    root: &ProjectRoot,
    regex: &Regex,
    rel: &str,
    found: &Found,
    out: &mut Collected,
) -> bool {
    if !found.meta.is_file() || found.meta.size > MAX_GREP_FILE_BYTES {
        return true;
    }
    if out.read_bytes + found.meta.size > MAX_GREP_READ_BYTES {
        out.truncated = true;
        return false;
    }
    let Ok(file) = root.open_for_reading(rel, found) else {
        return true;
    };
    let mut bytes = Vec::new();
    use std::io::Read;
    if file
        .take(MAX_GREP_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return true;
    }
    out.read_bytes += bytes.len() as u64;
    let Some(text) = judge::as_text(&bytes) else {
        // Binary files are not searched.
        return true;
    };
    for (i, line) in text.split_terminator('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !regex.is_match(line) {
            continue;
        }
        if out.matches.len() == MAX_GREP_MATCHES {
            out.truncated = true;
            return false;
        }
        out.matches.push(GrepMatch {
            path: rel.to_owned(),
            line: i as u64 + 1,
            text: cut(line),
        });
    }
    true
}

/// A line cut to [`MAX_GREP_LINE_BYTES`] at a character boundary, marked when cut.
fn cut(line: &str) -> String {
    if line.len() <= MAX_GREP_LINE_BYTES {
        return line.to_owned();
    }
    let mut end = MAX_GREP_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} […]", &line[..end])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_walk_keeps_only_the_way_to_the_base() {
        assert!(on_the_way("src", ""));
        assert!(on_the_way("src", "src/a"));
        assert!(on_the_way("src/a", "src/a"));
        assert!(on_the_way("src/a/b.rs", "src/a"));
        assert!(!on_the_way("src/ab", "src/a"));
        assert!(!on_the_way("srcx", "src/a"));
        assert!(!on_the_way("docs", "src"));
    }

    #[test]
    fn long_lines_are_cut_on_a_character() {
        let s = "é".repeat(MAX_GREP_LINE_BYTES);
        let c = cut(&s);
        assert!(c.ends_with(" […]"));
        assert!(c.len() <= MAX_GREP_LINE_BYTES + " […]".len());
        assert_eq!(cut("short"), "short");
    }
}
