//! Architecture rules of `../shared/DESIGN.md`, checked on the manifests and crate roots
//! (embedded at compile time) and on the supervisor's sources (read from `supervisor/src` at
//! run time, so that a new file is covered without being listed here).
//!
//! - `agent` depends on `ipc` (and model/HTTP crates) only, never on `policy`, `staging`,
//!   `audit` or the supervisor: the confined process must not carry the trusted code.
//! - `ipc`, `policy`, `audit` depend on no other workspace crate; `staging` may use `policy`.
//! - `text` (`garuda-text`, the one rule for printing text a command chose) depends on no
//!   crate at all, and every crate may depend on it: it is a leaf that carries no trusted
//!   decision, only escaping.
//! - every crate root forbids `unsafe` except the supervisor's, which denies it and allows it
//!   in its `sys` module only; no other supervisor file says `unsafe`.
//! - the supervisor's modules import each other in no circle: its module graph is acyclic
//!   (the rules of the graph are with its test, below).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a test failure

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

const WORKSPACE_CRATES: [&str; 8] = [
    "garuda-text",
    "garuda-ipc",
    "garuda-policy",
    "garuda-audit",
    "garuda-staging",
    "garuda",
    "garuda-agent",
    "garuda-modelserver",
];

struct Crate {
    name: &'static str,
    manifest: &'static str,
    root: &'static str,
    allowed: &'static [&'static str],
}

/// A crate every crate may depend on.
const ANY_CRATE_MAY_USE: [&str; 1] = ["garuda-text"];

const CRATES: [Crate; 8] = [
    Crate {
        name: "garuda-text",
        manifest: include_str!("../../text/Cargo.toml"),
        root: include_str!("../../text/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-ipc",
        manifest: include_str!("../../ipc/Cargo.toml"),
        root: include_str!("../../ipc/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-policy",
        manifest: include_str!("../../policy/Cargo.toml"),
        root: include_str!("../../policy/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-audit",
        manifest: include_str!("../../audit/Cargo.toml"),
        root: include_str!("../../audit/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda-staging",
        manifest: include_str!("../../staging/Cargo.toml"),
        root: include_str!("../../staging/src/lib.rs"),
        allowed: &["garuda-policy"],
    },
    Crate {
        name: "garuda-agent",
        manifest: include_str!("../../agent/Cargo.toml"),
        root: include_str!("../../agent/src/lib.rs"),
        allowed: &["garuda-ipc"],
    },
    Crate {
        // Test tooling (the scripted model server): a dev-dependency only, depending on none.
        name: "garuda-modelserver",
        manifest: include_str!("../../modelserver/Cargo.toml"),
        root: include_str!("../../modelserver/src/lib.rs"),
        allowed: &[],
    },
    Crate {
        name: "garuda",
        manifest: include_str!("../../supervisor/Cargo.toml"),
        root: include_str!("../../supervisor/src/lib.rs"),
        allowed: &[
            "garuda-ipc",
            "garuda-policy",
            "garuda-audit",
            "garuda-staging",
            // `garuda agent` hands its channel to the agent crate once confined; the other
            // direction stays forbidden.
            "garuda-agent",
            // `garuda -p --replay` plays a recording through the scripted model server (a
            // real HTTP server on loopback); it depends on no workspace crate.
            "garuda-modelserver",
        ],
    },
];

/// Workspace crates named in `[dependencies]` and `[build-dependencies]` (not dev).
fn workspace_deps(manifest: &str) -> Vec<String> {
    let doc: toml::Table = manifest.parse().expect("manifest parses");
    let mut found = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        if let Some(deps) = doc.get(section).and_then(|d| d.as_table()) {
            for (key, value) in deps {
                let name = value.get("package").and_then(|p| p.as_str()).unwrap_or(key);
                if WORKSPACE_CRATES.contains(&name) {
                    found.push(name.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn dependency_rules_hold() {
    for c in &CRATES {
        let doc: toml::Table = c.manifest.parse().unwrap();
        assert_eq!(doc["package"]["name"].as_str(), Some(c.name));
        for dep in workspace_deps(c.manifest) {
            assert!(
                c.allowed.contains(&dep.as_str())
                    || (ANY_CRATE_MAY_USE.contains(&dep.as_str()) && c.name != dep),
                "{} may not depend on {dep} (allowed: {:?})",
                c.name,
                c.allowed
            );
        }
    }
}

#[test]
fn the_rule_checker_catches_a_violation() {
    // Negative control: an agent manifest that pulls in the policy crate is reported.
    let bad = "[package]\nname = \"garuda-agent\"\n[dependencies]\ngaruda-policy = { path = \"../policy\" }\n";
    assert_eq!(workspace_deps(bad), ["garuda-policy"]);
}

/// Every dependency (workspace or not, build included) a manifest names.
fn all_deps(manifest: &str) -> Vec<String> {
    let doc: toml::Table = manifest.parse().expect("manifest parses");
    ["dependencies", "build-dependencies"]
        .iter()
        .filter_map(|s| doc.get(*s).and_then(|d| d.as_table()))
        .flat_map(|t| t.keys().cloned())
        .collect()
}

#[test]
fn the_text_crate_is_a_leaf_that_any_crate_may_use() {
    // Any crate may depend on it only because it depends on nothing: no trusted code rides in.
    assert_eq!(
        all_deps(include_str!("../../text/Cargo.toml")),
        Vec::<String>::new()
    );
    // Negative control: a dependency in its manifest would be seen.
    let bad = "[package]\nname = \"garuda-text\"\n[dependencies]\nlibc = \"0.2\"\n";
    assert_eq!(all_deps(bad), ["libc"]);
    // The audit crate, which may use no other workspace crate, may use this one.
    let audit =
        "[package]\nname = \"garuda-audit\"\n[dependencies]\ngaruda-text.workspace = true\n";
    assert_eq!(workspace_deps(audit), ["garuda-text"]);
}

/// Lines (1-based) of `unsafe {` blocks with no `// SAFETY:` among the comment lines right
/// above them.
fn unnoted_unsafe_blocks(src: &str) -> Vec<usize> {
    let lines: Vec<&str> = src.lines().collect();
    (0..lines.len())
        .filter(|&i| lines[i].contains("unsafe {") && !lines[i].trim_start().starts_with("//"))
        .filter(|&i| {
            !lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("//"))
                .any(|l| l.contains("// SAFETY:"))
        })
        .map(|i| i + 1)
        .collect()
}

#[test]
fn unsafe_is_forbidden_outside_the_supervisor_sys_module() {
    for c in &CRATES {
        if c.name == "garuda" {
            assert!(c.root.contains("#![deny(unsafe_code)]"));
            assert!(c.root.contains("pub(crate) mod sys;"));
        } else {
            assert!(
                c.root.contains("#![forbid(unsafe_code)]"),
                "{} must forbid unsafe",
                c.name
            );
        }
    }
    let main = include_str!("../../supervisor/src/main.rs");
    assert!(main.contains("#![forbid(unsafe_code)]"));
    let sys = include_str!("../../supervisor/src/sys.rs");
    // Clippy's undocumented_unsafe_blocks checks each block; this only guards the count.
    let blocks = sys.matches("unsafe {").count();
    let notes = sys.matches("// SAFETY:").count();
    assert!(
        blocks > 0 && notes >= blocks,
        "{blocks} unsafe blocks, {notes} SAFETY notes"
    );
    // The sandboxes' start-up program: a separate `no_std` executable built by
    // `supervisor/build.rs` (clippy does not see it), all raw system calls.
    let init = include_str!("../../supervisor/init/garuda_init.rs");
    let blocks = init.matches("unsafe {").count();
    let notes = init.matches("// SAFETY:").count();
    assert!(
        blocks > 0 && notes >= blocks,
        "garuda_init.rs: {blocks} unsafe blocks, {notes} SAFETY notes"
    );
    // The program and the supervisor speak the same words: the reaper's name, the exec step's
    // marker, the setup-failure exit code and the signal report's stage.
    for (in_sys, in_init) in [
        ("c\"garuda-sandbox-init\"", "b\"garuda-sandbox-init\""),
        ("c\"garuda-exec-closed\"", "b\"garuda-exec-closed\""),
        ("c\"garuda-exec-released\"", "b\"garuda-exec-released\""),
        ("SETUP_FAILED_EXIT: i32 = 125;", "SETUP_FAILED: i32 = 125;"),
        ("Signaled = 16,", "STAGE_SIGNALED: u32 = 16;"),
    ] {
        assert!(sys.contains(in_sys), "sys.rs: {in_sys}");
        assert!(init.contains(in_init), "garuda_init.rs: {in_init}");
    }
    // Each block has its note in the comment lines right above it.
    assert_eq!(
        unnoted_unsafe_blocks(init),
        Vec::<usize>::new(),
        "garuda_init.rs"
    );
    // Control: a block whose note is elsewhere is caught.
    let snippet = "// SAFETY: far away\nlet a = 1;\nlet b = unsafe { f() };\n";
    assert_eq!(unnoted_unsafe_blocks(snippet), [3]);
    // Every other supervisor module stays safe.
    for (name, src) in [
        ("cli.rs", include_str!("../../supervisor/src/cli.rs")),
        ("doctor.rs", include_str!("../../supervisor/src/doctor.rs")),
        (
            "executor/mod.rs",
            include_str!("../../supervisor/src/executor/mod.rs"),
        ),
        (
            "executor/landlock.rs",
            include_str!("../../supervisor/src/executor/landlock.rs"),
        ),
        (
            "executor/bubblewrap.rs",
            include_str!("../../supervisor/src/executor/bubblewrap.rs"),
        ),
        (
            "executor/seatbelt.rs",
            include_str!("../../supervisor/src/executor/seatbelt.rs"),
        ),
        (
            "executor/host.rs",
            include_str!("../../supervisor/src/executor/host.rs"),
        ),
        (
            "executor/layout.rs",
            include_str!("../../supervisor/src/executor/layout.rs"),
        ),
        (
            "executor/seccomp.rs",
            include_str!("../../supervisor/src/executor/seccomp.rs"),
        ),
        (
            "executor/select.rs",
            include_str!("../../supervisor/src/executor/select.rs"),
        ),
        (
            "executor/program.rs",
            include_str!("../../supervisor/src/executor/program.rs"),
        ),
        (
            "executor/capture.rs",
            include_str!("../../supervisor/src/executor/capture.rs"),
        ),
        (
            "netbridge.rs",
            include_str!("../../supervisor/src/netbridge.rs"),
        ),
        (
            "proxy/mod.rs",
            include_str!("../../supervisor/src/proxy/mod.rs"),
        ),
        (
            "proxy/gate.rs",
            include_str!("../../supervisor/src/proxy/gate.rs"),
        ),
        (
            "proxy/http.rs",
            include_str!("../../supervisor/src/proxy/http.rs"),
        ),
        (
            "proxy/idle.rs",
            include_str!("../../supervisor/src/proxy/idle.rs"),
        ),
        (
            "proxy/resolve.rs",
            include_str!("../../supervisor/src/proxy/resolve.rs"),
        ),
        (
            "proxy/scope.rs",
            include_str!("../../supervisor/src/proxy/scope.rs"),
        ),
        (
            "proxy/scope_state.rs",
            include_str!("../../supervisor/src/proxy/scope_state.rs"),
        ),
    ] {
        assert!(!src.contains("unsafe {"), "{name} contains an unsafe block");
        assert!(!src.contains("unsafe fn"), "{name} contains an unsafe fn");
    }
}

// ---------------------------------------------------------------------------------------------
// No import circles inside the supervisor crate.
//
// The supervisor is a set of rooms a newcomer can name (`executor/`, `proxy/`, `agent/`, `sys`,
// `cli`…), and it stays one only while no two modules need each other: then each can be read,
// tested and replaced from the bottom up. The graph is built from the source text (comments and
// literals removed, `#[cfg(test)]` modules counted with their file): a module depends on the
// module a `crate::`, `super::` or `self::` path names, a `use` of a child module names, or a
// name a `use` brought in (`use crate::sys;` … `sys::f()`) leads to. A doc comment naming a
// module is no edge: it points a reader somewhere, it does not make the code need it. Two rules
// make the graph say what a reader means by "needs":
// - a module's mention of its own sub-modules (its `mod` lines, `pub use` re-exports, calls
//   into them) is no edge: a folder's `mod.rs` is the door of its room;
// - a path through a re-export (`crate::executor::ExecutorKind` where `executor` re-exports it
//   from a child) is followed to the module that defines the item, so a re-export cannot hide
//   a circle.

/// A module path, `["executor", "select"]`; the crate root is empty.
type ModPath = Vec<String>;

/// One token of Rust source, as far as paths need: words and the punctuation of paths and `use`
/// trees.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    LParen,
    RParen,
    Other,
}

/// Where the comment, string, byte-string or character literal, lifetime or label starting at
/// `s[i]` ends (none of their text is a path); `None` if none starts there.
fn skip_non_code(s: &[char], i: usize) -> Option<usize> {
    let at = |j: usize| s.get(j).copied().unwrap_or('\0');
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    let (c, next) = (at(i), at(i + 1));
    let mut i = i;
    if c == '/' && next == '/' {
        while i < s.len() && s[i] != '\n' {
            i += 1;
        }
        return Some(i);
    }
    if c == '/' && next == '*' {
        let mut depth = 0; // block comments nest
        while i < s.len() {
            if at(i) == '/' && at(i + 1) == '*' {
                depth += 1;
                i += 2;
            } else if at(i) == '*' && at(i + 1) == '/' {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    break;
                }
            } else {
                i += 1;
            }
        }
        return Some(i);
    }
    // `b"…"`, `b'…'`, `br"…"`: the same as without the `b`.
    let q = i + usize::from(c == 'b' && matches!(next, '"' | '\'' | 'r'));
    let hashes = (q + 1..).take_while(|k| at(*k) == '#').count();
    if at(q) == 'r' && at(q + 1 + hashes) == '"' {
        // A raw string: up to a quote followed by as many `#`.
        i = q + 2 + hashes;
        while i < s.len() && !(s[i] == '"' && (1..=hashes).all(|h| at(i + h) == '#')) {
            i += 1;
        }
        return Some(i + 1 + hashes);
    }
    if at(q) == '"' {
        i = q + 1;
        while i < s.len() && s[i] != '"' {
            i += if s[i] == '\\' { 2 } else { 1 };
        }
        return Some(i + 1);
    }
    if at(q) != '\'' {
        return None;
    }
    if at(q + 1) == '\\' {
        i = q + 3; // an escaped character (`'\''`, `'\u{…}'`): up to its closing quote
        while i < s.len() && s[i] != '\'' {
            i += 1;
        }
        return Some(i + 1);
    }
    if at(q + 2) == '\'' {
        return Some(q + 3);
    }
    i = q + 1; // a lifetime or a label
    while i < s.len() && word_char(s[i]) {
        i += 1;
    }
    Some(i)
}

/// The tokens of `src`, without comments, string, byte-string and character literals, whose
/// text is no path.
fn tokens(src: &str) -> Vec<Tok> {
    let s: Vec<char> = src.chars().collect();
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let (c, next) = (s[i], s.get(i + 1).copied().unwrap_or('\0'));
        if c.is_whitespace() {
            i += 1;
        } else if let Some(end) = skip_non_code(&s, i) {
            i = end;
        } else if word_char(c) {
            let start = i;
            while i < s.len() && word_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            if word == "r" && s.get(i) == Some(&'#') {
                i += 1; // a raw identifier: `r#type` is the word `type`
            } else if c.is_ascii_digit() {
                out.push(Tok::Other); // a number
            } else {
                out.push(Tok::Word(word));
            }
        } else {
            i += 1;
            out.push(match c {
                ':' if next == ':' => {
                    i += 1;
                    Tok::PathSep
                }
                '{' => Tok::Open,
                '}' => Tok::Close,
                ',' => Tok::Comma,
                ';' => Tok::Semi,
                '*' => Tok::Star,
                '(' => Tok::LParen,
                ')' => Tok::RParen,
                _ => Tok::Other,
            });
        }
    }
    out
}

/// A leaf of a `use` tree: its path and the name it binds (`None` for a glob).
type UseLeaf = (Vec<String>, Option<String>);

/// The leaves of the `use` tree at `toks[*i]`, under `prefix`: `crate::{a, b::{self, c as d},
/// e::*}` gives `crate::a` (binds `a`), `crate::b` (`b`), `crate::b::c` (`d`), `crate::e` (a
/// glob). Leaves `*i` on the token after the tree.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    let leaf = |mut path: Vec<String>, alias: Option<String>, out: &mut Vec<UseLeaf>| {
        if path.len() > 1 && path.last().is_some_and(|w| w == "self") {
            path.pop(); // `a::{self}` is `a`
        }
        let name = alias.or_else(|| path.last().cloned());
        out.push((path, name));
    };
    loop {
        match toks.get(*i) {
            Some(Tok::Word(w)) => {
                path.push(w.clone());
                *i += 1;
                if toks.get(*i) == Some(&Tok::Word("as".into())) {
                    if let Some(Tok::Word(alias)) = toks.get(*i + 1) {
                        *i += 2;
                        return leaf(path, Some(alias.clone()), out);
                    }
                }
            }
            Some(Tok::PathSep) => *i += 1,
            Some(Tok::Star) => {
                *i += 1;
                out.push((path, None));
                return;
            }
            Some(Tok::Open) => {
                *i += 1;
                loop {
                    match toks.get(*i) {
                        Some(Tok::Close) | None => break,
                        Some(Tok::Comma) => *i += 1,
                        Some(_) => use_tree(toks, i, &path, out),
                    }
                }
                *i += 1;
                return;
            }
            _ => {
                if path.len() > prefix.len() {
                    leaf(path, None, out);
                }
                return;
            }
        }
    }
}

/// What one file says about paths: the `use` leaves and other paths, each with the module scope
/// it appears in (the file's module, or an inline module in it such as `tests`).
#[derive(Default)]
struct FileRefs {
    uses: Vec<(ModPath, UseLeaf, bool)>, // scope, leaf, `pub`
    paths: Vec<(ModPath, Vec<String>)>,
}

/// The `use` leaves and paths of the file of `module`.
fn file_refs(module: &[String], src: &str) -> FileRefs {
    let toks = tokens(src);
    let mut refs = FileRefs::default();
    // Inline modules open at a brace depth; the scope is the file's module plus them.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let scope = |inline: &[(String, usize)]| -> ModPath {
        let mut s = module.to_vec();
        s.extend(inline.iter().map(|(n, _)| n.clone()));
        s
    };
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Open => {
                depth += 1;
                i += 1;
            }
            Tok::Close => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
            }
            Tok::Word(w) if w == "mod" => {
                if let (Some(Tok::Word(name)), Some(Tok::Open)) = (toks.get(i + 1), toks.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
                i += 1;
            }
            Tok::Word(w) if w == "use" => {
                // `pub use`, `pub(crate) use`: a re-export.
                let public = match i.checked_sub(1).map(|j| &toks[j]) {
                    Some(Tok::Word(p)) => p == "pub",
                    Some(Tok::RParen) => {
                        toks[..i]
                            .iter()
                            .rev()
                            .skip_while(|t| *t != &Tok::LParen)
                            .nth(1)
                            == Some(&Tok::Word("pub".into()))
                    }
                    _ => false,
                };
                i += 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut i, &[], &mut leaves);
                let here = scope(&inline);
                refs.uses
                    .extend(leaves.into_iter().map(|l| (here.clone(), l, public)));
            }
            Tok::Word(first) if toks.get(i + 1) == Some(&Tok::PathSep) => {
                let mut path = vec![first.clone()];
                i += 1;
                while toks.get(i) == Some(&Tok::PathSep) {
                    match toks.get(i + 1) {
                        Some(Tok::Word(w)) => {
                            path.push(w.clone());
                            i += 2;
                        }
                        _ => break,
                    }
                }
                refs.paths.push((scope(&inline), path));
            }
            _ => i += 1,
        }
    }
    refs
}

/// The absolute path (from the crate root) that `path`, written in `scope`, names; `None` for a
/// path into another crate. `aliases` are the names the file's `use`s bound.
fn absolute(
    scope: &[String],
    path: &[String],
    aliases: &BTreeMap<String, Vec<String>>,
    modules: &BTreeSet<ModPath>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, mut rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (scope.to_vec(), &path[1..]),
        "super" => (scope.to_vec(), path),
        _ => {
            let child = [scope, &path[..1]].concat();
            if modules.contains(&child) {
                (scope.to_vec(), path)
            } else {
                (aliases.get(first)?.clone(), &path[1..])
            }
        }
    };
    while rest.first().is_some_and(|w| w == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module graph of a crate given as `(module path, source)` pairs: each module and the
/// modules it depends on, by the rules above. Names are `a::b`; the crate root is `crate`.
fn module_graph(files: &[(ModPath, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<ModPath> = files.iter().map(|(m, _)| m.clone()).collect();
    let refs: Vec<FileRefs> = files.iter().map(|(m, src)| file_refs(m, src)).collect();
    // Per file, the names its `use`s bound; across the crate, the re-exports.
    let mut aliases: Vec<BTreeMap<String, Vec<String>>> = Vec::new();
    let mut reexports: BTreeMap<(ModPath, String), Vec<String>> = BTreeMap::new();
    for ((module, _), r) in files.iter().zip(&refs) {
        let mut bound = BTreeMap::new();
        for (scope, (path, name), public) in &r.uses {
            let (Some(name), Some(abs)) = (name, absolute(scope, path, &bound, &modules)) else {
                continue;
            };
            if *public && scope == module {
                reexports.insert((module.clone(), name.clone()), abs.clone());
            }
            bound.insert(name.clone(), abs);
        }
        aliases.push(bound);
    }
    // The module that defines what an absolute path names: the longest module prefix, through
    // re-exports.
    let defining = |mut path: Vec<String>| -> ModPath {
        for _ in 0..16 {
            let len = (0..=path.len())
                .rev()
                .find(|n| modules.contains(&path[..*n]))
                .unwrap_or(0);
            match path
                .get(len)
                .and_then(|item| reexports.get(&(path[..len].to_vec(), item.clone())))
            {
                Some(target) => path = [target.as_slice(), &path[len + 1..]].concat(),
                None => return path[..len].to_vec(),
            }
        }
        path
    };
    let name = |m: &[String]| {
        if m.is_empty() {
            "crate".to_string()
        } else {
            m.join("::")
        }
    };
    let mut graph = BTreeMap::new();
    for (((module, _), r), bound) in files.iter().zip(&refs).zip(&aliases) {
        let edges: &mut BTreeSet<String> = graph.entry(name(module)).or_default();
        let used = r
            .uses
            .iter()
            .map(|(scope, (path, _), _)| (scope, path))
            .chain(r.paths.iter().map(|(scope, path)| (scope, path)));
        for (scope, path) in used {
            if let Some(abs) = absolute(scope, path, bound, &modules) {
                let target = defining(abs);
                if !target.starts_with(module) {
                    edges.insert(name(&target));
                }
            }
        }
    }
    graph
}

/// Every circle of `graph`: for each group of modules that reach each other (a strongly
/// connected component of more than one module), one shortest cycle through its first member,
/// as `a → b → a`.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut found = Vec::new();
    for start in graph.keys() {
        if done.contains(start) || !reach(start).contains(start) {
            continue;
        }
        let group: BTreeSet<String> = reach(start)
            .into_iter()
            .filter(|m| reach(m).contains(start))
            .collect();
        done.extend(group.iter().cloned());
        // Breadth first from `start` back to it: the shortest cycle.
        let mut came_from: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = VecDeque::from([start.clone()]);
        'search: while let Some(n) = queue.pop_front() {
            for m in graph.get(&n).into_iter().flatten() {
                if m == start {
                    // Back from `n` to `start` (the one node without a predecessor).
                    let mut cycle = vec![n.clone()];
                    let mut at = &n;
                    while let Some(prev) = came_from.get(at) {
                        cycle.push(prev.clone());
                        at = prev;
                    }
                    cycle.reverse();
                    cycle.push(start.clone());
                    found.push(format!("{} (group: {group:?})", cycle.join(" → ")));
                    break 'search;
                }
                if group.contains(m) && !came_from.contains_key(m) && m != start {
                    came_from.insert(m.clone(), n.clone());
                    queue.push_back(m.clone());
                }
            }
        }
    }
    found
}

/// The supervisor's modules and their sources, read from `supervisor/src` (every `.rs` file
/// under it except `main.rs`, the binary's own root).
fn supervisor_sources() -> Vec<(ModPath, String)> {
    fn walk(dir: &Path, under: &[String], out: &mut Vec<(ModPath, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                walk(&path, &[under, &[stem]].concat(), out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let module = match (under.is_empty(), stem.as_str()) {
                    (true, "main") => continue,
                    (true, "lib") | (false, "mod") => under.to_vec(),
                    _ => [under, &[stem]].concat(),
                };
                out.push((module, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../supervisor/src");
    let mut out = Vec::new();
    walk(&root, &[], &mut out);
    out
}

#[test]
fn the_supervisor_module_graph_has_no_circle() {
    let sources = supervisor_sources();
    let graph = module_graph(&sources);
    // The parser sees the real code: a few edges every reader can check by eye.
    for (from, to) in [
        ("executor::landlock", "sys"),
        ("executor::select", "executor::landlock"),
        ("cli", "executor::select"),
    ] {
        assert!(
            graph.get(from).is_some_and(|e| e.contains(to)),
            "expected {from} → {to} in {graph:#?}"
        );
    }
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "supervisor modules that import each other (move what they share into a module of its \
         own):\n  {}\ngraph: {graph:#?}",
        found.join("\n  ")
    );
}

fn synthetic(files: &[(&str, &str)]) -> Vec<(ModPath, String)> {
    files
        .iter()
        .map(|(m, src)| {
            let path = m
                .split("::")
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect();
            (path, src.to_string())
        })
        .collect()
}

#[test]
fn the_circle_checker_finds_a_circle() {
    // Negative control: two modules that name each other, one through a `use` group.
    let pair = synthetic(&[
        ("", "pub mod a;\npub mod b;\npub mod c;"),
        (
            "a",
            "use crate::{c, b::{self as bee, Thing}};\npub fn f() {}",
        ),
        ("b", "pub struct Thing;\nfn g() { super::a::f() }"),
        ("c", "pub struct C;"),
    ]);
    let graph = module_graph(&pair);
    assert_eq!(
        graph["a"],
        BTreeSet::from(["b".to_string(), "c".to_string()])
    );
    assert_eq!(circles(&graph), [r#"a → b → a (group: {"a", "b"})"#]);

    // `super::super`, and a circle of three.
    let deep = synthetic(&[
        ("p", "pub mod q;\npub mod s;"),
        ("p::q", "pub mod r;"),
        ("p::q::r", "use super::super::s::T;\npub struct U;"),
        ("p::s", "pub struct T;\nfn f() -> crate::t::V { todo!() }"),
        ("t", "pub struct V(crate::p::q::r::U);"),
    ]);
    let graph = module_graph(&deep);
    assert_eq!(graph["p::q::r"], BTreeSet::from(["p::s".to_string()]));
    assert_eq!(
        circles(&graph),
        [r#"p::q::r → p::s → t → p::q::r (group: {"p::q::r", "p::s", "t"})"#]
    );

    // A re-export does not hide a circle: `l` takes `Kind` from `e`, which re-exports it from
    // `select`, which uses `l`.
    let reexport = synthetic(&[
        (
            "e",
            "pub mod l;\npub mod select;\npub use select::{Kind, pick};",
        ),
        (
            "e::select",
            "use super::l::L;\npub enum Kind { A }\npub fn pick() {}",
        ),
        ("e::l", "use super::Kind;\npub struct L;"),
    ]);
    let graph = module_graph(&reexport);
    assert_eq!(
        graph["e"],
        BTreeSet::new(),
        "a parent's re-export is no edge"
    );
    assert_eq!(
        circles(&graph),
        [r#"e::l → e::select → e::l (group: {"e::l", "e::select"})"#]
    );

    // Names a `use` bound lead on: `sys::f()` after `use crate::sys;`.
    let alias = synthetic(&[
        ("sys", "fn f() { crate::net::g() }"),
        ("net", "use crate::sys;\nfn g() { sys::f(); }"),
    ]);
    assert_eq!(circles(&module_graph(&alias)).len(), 1);

    // Not a circle: comments, strings, characters, lifetimes and a test module's `use
    // super::*` name nothing.
    let quiet = synthetic(&[
        (
            "a",
            "use crate::b::B;\n/// [`crate::b`] uses [`crate::a`]\nconst S: &str = \"crate::a\";",
        ),
        (
            "b",
            r##"
// crate::a::f
/* crate::a /* nested */ crate::a */
fn f<'a>(x: &'a str) -> [char; 3] {
    let _ = r#"crate::a " crate::a"#;
    let _ = b"crate::a";
    let _ = "\" crate::a";
    ['"', '\'', '\u{22}']
}
const T: &str = "crate::a";
#[cfg(test)]
mod tests {
    use super::*;
}
pub struct B;
"##,
        ),
    ]);
    let graph = module_graph(&quiet);
    assert_eq!(graph["b"], BTreeSet::new());
    assert_eq!(circles(&graph), Vec::<String>::new());
}

#[test]
fn no_supervisor_module_but_sys_says_unsafe() {
    // Every file, found by walking the tree: a new module is covered without being listed.
    let sources = supervisor_sources();
    assert!(sources.iter().any(|(m, _)| m == &["sys".to_string()]));
    for (module, src) in &sources {
        let says_unsafe = tokens(src).contains(&Tok::Word("unsafe".into()));
        assert_eq!(
            says_unsafe,
            module == &["sys".to_string()],
            "`unsafe` in supervisor module {module:?}: only sys.rs may hold unsafe code"
        );
    }
    // Negative control: an unsafe block is seen, `unsafe` in a comment or a string is not.
    assert!(tokens("fn f() { unsafe { g() } }").contains(&Tok::Word("unsafe".into())));
    assert!(!tokens("// unsafe\nconst S: &str = \"unsafe\";").contains(&Tok::Word("unsafe".into())));
}
