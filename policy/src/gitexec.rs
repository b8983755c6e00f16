//! Files that git runs, or reads as configuration, because its configuration names them.
//!
//! Every git directory is already read-only as a whole (`walk.rs`), so a command cannot change
//! a repository's configuration. But that configuration, and the user's, can name files
//! *outside* the git directory, in the project, which a command can write:
//!
//! | key | what git does with the value | protection when it lies under a writable root |
//! |---|---|---|
//! | `core.hooksPath`, `init.templateDir` | runs (or copies into new repositories) the hooks of that folder; relative to the worktree top, `~/` is the home | the folder is read-only (created empty, mode 0755, when missing: an empty folder is invisible to git), and so is the target of every link in it |
//! | `include.path`, `includeIf.<condition>.path` | reads the file as configuration; relative to the including file's folder; followed recursively (at most 10 deep, as git, and [`MAX_INCLUDED_FILES`] files) | the file is read-only; a missing one is refused |
//! | command-valued keys ([`COMMAND_KEYS`]) | runs the command; its first word, when it holds a `/`, is the program | that file is read-only; a missing one is refused. Later words that name an existing regular file (`sh tools/fsmonitor.sh`) are made read-only too, best effort |
//!
//! Configuration is read from every configuration file of each repository (`config`,
//! `config.worktree`, a linked worktree's `config.worktree`, and what they include) and from
//! the user's (`$GIT_CONFIG_GLOBAL`, `$XDG_CONFIG_HOME/git/config` or `~/.config/git/config`,
//! `~/.gitconfig`) and the system's (`/etc/gitconfig`, `$GIT_CONFIG_SYSTEM`). Every value found
//! counts, whatever its conditions or overrides: that only ever protects more. A file that
//! cannot be parsed is an error naming it and the line (`gitconfig.rs`).
//!
//! This is best effort for command strings: a shell line can reach project files in ways no
//! parser sees (`$(cat tools/x)`, a script that runs another). `docs/threat-model.md` lists
//! that as out of scope.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::PolicyError;
use crate::gitconfig::{self, ConfigEntry};
use crate::paths::create_dir_if_missing;
use crate::protect::{Protected, Resolved};
use crate::walk::{hook_links, Repo, CREATED_DIR_MODE};

/// git's own limit on nested `include.path` (`MAX_INCLUDE_DEPTH`).
pub(crate) const MAX_INCLUDE_DEPTH: usize = 10;

/// How many included files one configuration file may lead to, counting repeats. git has no
/// such limit, but depth alone does not bound the work: ten files each including the next ten
/// times are 10^10 reads. Real configurations include a handful.
pub(crate) const MAX_INCLUDED_FILES: usize = 100;

/// Keys whose value is a command git runs, as `(section, has a subsection, key)`; `*` is any
/// key. `credential.helper`, `alias.*` and `submodule.*.update` have rules of their own (see
/// [`key_use`]).
pub(crate) const COMMAND_KEYS: &[(&str, bool, &str)] = &[
    ("core", false, "fsmonitor"),
    ("core", false, "sshcommand"),
    ("core", false, "editor"),
    ("core", false, "pager"),
    ("core", false, "askpass"),
    ("core", false, "gitproxy"),
    ("diff", false, "external"),
    ("filter", true, "clean"),
    ("filter", true, "smudge"),
    ("filter", true, "process"),
    ("diff", true, "textconv"),
    ("diff", true, "command"),
    ("merge", true, "driver"),
    ("gpg", false, "program"),
    ("gpg", true, "program"),
    ("gpg", true, "defaultkeycommand"),
    ("sequence", false, "editor"),
    ("pager", false, "*"),
    ("interactive", false, "difffilter"),
    ("uploadpack", false, "packobjectshook"),
    ("remote", true, "uploadpack"),
    ("remote", true, "receivepack"),
    ("difftool", true, "cmd"),
    ("difftool", true, "path"),
    ("mergetool", true, "cmd"),
    ("mergetool", true, "path"),
    ("man", true, "cmd"),
    ("man", true, "path"),
    ("browser", true, "cmd"),
    ("browser", true, "path"),
    ("sendemail", false, "sendmailcmd"),
    ("sendemail", false, "smtpserver"),
    ("sendemail", false, "tocmd"),
    ("sendemail", false, "cccmd"),
    ("core", false, "alternaterefscommand"),
    ("trailer", true, "command"),
    ("trailer", true, "cmd"),
    ("tar", true, "command"),
    ("guitool", true, "cmd"),
    ("instaweb", false, "httpd"),
    ("imap", false, "tunnel"),
];

/// What a key's value is to git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// A folder of hooks git runs or copies.
    HookFolder,
    /// A command (first word a program).
    Command,
    /// An alias, or `submodule.<name>.update`: a command only when it starts with `!`.
    Alias,
    /// `credential.helper`: `!command`, an absolute program, or a `git credential-*` name.
    CredentialHelper,
}

fn key_use(e: &ConfigEntry) -> Option<Use> {
    let sub = e.subsection.is_some();
    match (e.section.as_str(), sub, e.key.as_str()) {
        ("core", false, "hookspath") | ("init", false, "templatedir") => Some(Use::HookFolder),
        ("credential", _, "helper") => Some(Use::CredentialHelper),
        ("alias", false, _) | ("submodule", true, "update") => Some(Use::Alias),
        (section, sub, key) => COMMAND_KEYS
            .iter()
            .any(|(s, has_sub, k)| *s == section && *has_sub == sub && (*k == key || *k == "*"))
            .then_some(Use::Command),
    }
}

fn is_include(e: &ConfigEntry) -> bool {
    e.key == "path"
        && match e.section.as_str() {
            "include" => e.subsection.is_none(),
            "includeif" => e.subsection.is_some(),
            _ => false,
        }
}

/// `section.subsection.key`, for messages.
fn key_name(e: &ConfigEntry) -> String {
    match &e.subsection {
        Some(sub) => format!("{}.{}.{}", e.section, String::from_utf8_lossy(sub), e.key),
        None => format!("{}.{}", e.section, e.key),
    }
}

/// One entry and the file it was read from (as git names it).
type Sourced = (PathBuf, ConfigEntry);

/// Protects what the configuration of `repos` and the user's `global_configs` name (see the
/// module doc). Missing hook folders under a writable root are created.
pub(crate) fn protect_configured(
    protected: &mut Protected,
    repos: &[Repo],
    home: &Path,
    global_configs: &[PathBuf],
) -> Result<(), PolicyError> {
    let mut global = Vec::new();
    for file in global_configs {
        read_config(protected, home, file, &mut global)?;
    }
    for repo in repos {
        let mut files = vec![
            repo.common_dir.join("config"),
            repo.git_dir.join("config"),
            repo.git_dir.join("config.worktree"),
            repo.common_dir.join("config.worktree"),
        ];
        files.sort();
        files.dedup();
        let mut own = Vec::new();
        for file in &files {
            read_config(protected, home, file, &mut own)?;
        }
        let tops = tops_of(protected, repo, &own, home)?;
        for (file, entry) in own.iter().chain(&global) {
            apply(protected, home, &tops, file, entry)?;
        }
    }
    Ok(())
}

/// Where git runs for `repo`: the tops the walk found, `core.worktree` (relative to the git
/// directory), or the git directory itself (a bare repository).
fn tops_of(
    protected: &Protected,
    repo: &Repo,
    own: &[Sourced],
    home: &Path,
) -> Result<Vec<PathBuf>, PolicyError> {
    let mut tops = repo.tops.clone();
    for (_, e) in own {
        if e.section == "core" && e.subsection.is_none() && e.key == "worktree" {
            if let Some(value) = &e.value {
                for candidate in candidates(value, home, std::slice::from_ref(&repo.git_dir)) {
                    // Resolved like a protected path: through a link a command could re-point,
                    // git would run the relative programs and hooks of the command's folder.
                    if let Resolved::Exists(top) = protected.resolve(&candidate, &candidate)? {
                        if !tops.contains(&top) {
                            tops.push(top);
                        }
                    }
                }
            }
        }
    }
    if tops.is_empty() {
        tops.push(repo.git_dir.clone());
    }
    Ok(tops)
}

/// Reads the configuration file `file` and what it includes (at most [`MAX_INCLUDED_FILES`]).
fn read_config(
    protected: &mut Protected,
    home: &Path,
    file: &Path,
    out: &mut Vec<Sourced>,
) -> Result<(), PolicyError> {
    let mut budget = MAX_INCLUDED_FILES;
    read_with_includes(protected, home, file, 0, &mut budget, out).map_err(|e| match e {
        PolicyError::GitConfigTooManyIncludes { limit, .. } => {
            PolicyError::GitConfigTooManyIncludes {
                path: file.to_path_buf(),
                limit,
            }
        }
        other => other,
    })
}

/// Reads `file` and, recursively, what it includes; every included file that a command could
/// write is made read-only on the way. `budget`: included files still allowed.
fn read_with_includes(
    protected: &mut Protected,
    home: &Path,
    file: &Path,
    depth: usize,
    budget: &mut usize,
    out: &mut Vec<Sourced>,
) -> Result<(), PolicyError> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(PolicyError::GitConfigIncludeDepth {
            path: file.to_path_buf(),
            limit: MAX_INCLUDE_DEPTH,
        });
    }
    if depth > 0 {
        *budget = budget
            .checked_sub(1)
            .ok_or_else(|| PolicyError::GitConfigTooManyIncludes {
                path: file.to_path_buf(),
                limit: MAX_INCLUDED_FILES,
            })?;
    }
    let Some(entries) = gitconfig::read(file)? else {
        return Ok(());
    };
    let folder = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    for entry in entries {
        if is_include(&entry) {
            let value = entry.value.clone().unwrap_or_default();
            for included in candidates(&value, home, std::slice::from_ref(&folder)) {
                match protected.resolve(&included, &included)? {
                    Resolved::Exists(target) => {
                        protected.protect(target);
                        read_with_includes(protected, home, &included, depth + 1, budget, out)?;
                    }
                    missing @ Resolved::Missing { .. } => {
                        if protected.is_writable(&missing.path()) {
                            return Err(PolicyError::GitConfigTargetMissing {
                                config: file.to_path_buf(),
                                line: entry.line,
                                key: key_name(&entry),
                                target: included,
                                use_: "read it as configuration",
                            });
                        }
                    }
                }
            }
        }
        out.push((file.to_path_buf(), entry));
    }
    Ok(())
}

/// Protects what one entry names, for a repository whose worktree tops are `tops`.
fn apply(
    protected: &mut Protected,
    home: &Path,
    tops: &[PathBuf],
    file: &Path,
    e: &ConfigEntry,
) -> Result<(), PolicyError> {
    let (Some(kind), Some(value)) = (key_use(e), e.value.as_deref()) else {
        return Ok(());
    };
    if kind == Use::HookFolder {
        for folder in candidates(value, home, tops) {
            let mut found = protected.resolve(&folder, &folder)?;
            if let missing @ Resolved::Missing { .. } = &found {
                let path = missing.path();
                if !protected.is_writable(&path) {
                    continue;
                }
                // An empty folder is what "no hooks" already means to git; once it exists it
                // can be bound read-only. Resolved again: a command running at the same time
                // may have put a link on the way first.
                create_dir_if_missing(&path, CREATED_DIR_MODE)?;
                found = protected.resolve(&folder, &folder)?;
            }
            let Resolved::Exists(target) = found else {
                return Err(PolicyError::Canonicalize {
                    path: folder,
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            };
            protected.protect(target.clone());
            if target.is_dir() {
                hook_links(protected, &target)?;
            }
        }
        return Ok(());
    }
    let Some(command) = command_text(kind, value) else {
        return Ok(());
    };
    let words = command_words(command);
    if let Some(program) = words.program {
        for path in candidates(&program, home, tops) {
            match protected.resolve(&path, &path)? {
                Resolved::Exists(target) => protected.protect(target),
                missing @ Resolved::Missing { .. } => {
                    if protected.is_writable(&missing.path()) {
                        return Err(PolicyError::GitConfigTargetMissing {
                            config: file.to_path_buf(),
                            line: e.line,
                            key: key_name(e),
                            target: path,
                            use_: "run it",
                        });
                    }
                }
            }
        }
    }
    // Best effort: an argument that names an existing file (`sh tools/fsmonitor.sh`). Errors
    // are not fatal here: this is a guess about what a shell line does.
    for word in words.arguments {
        for path in candidates(&word, home, tops) {
            if let Ok(Resolved::Exists(target)) = protected.resolve(&path, &path) {
                if target.is_file() {
                    protected.protect(target);
                }
            }
        }
    }
    Ok(())
}

/// The command line of a value, or `None` when git does not run it as a command.
fn command_text(kind: Use, value: &[u8]) -> Option<&[u8]> {
    let trimmed = value.trim_ascii_start();
    match kind {
        Use::HookFolder => None,
        Use::Command => Some(value),
        Use::Alias => trimmed.strip_prefix(b"!"),
        Use::CredentialHelper => match trimmed.strip_prefix(b"!") {
            Some(rest) => Some(rest),
            // An absolute program; anything else is `git credential-<name>`, found in PATH.
            None => trimmed.starts_with(b"/").then_some(trimmed),
        },
    }
}

/// The words of a command line that may name files: the program (the first word of the first
/// simple command, after `NAME=value` assignments) and the other words. Words with `$` or a
/// backquote, and words without a `/`, are dropped: they are found through `PATH` or only
/// known when the shell runs.
#[derive(Debug, Default, PartialEq, Eq)]
struct Words {
    program: Option<Vec<u8>>,
    arguments: Vec<Vec<u8>>,
}

fn command_words(line: &[u8]) -> Words {
    let is_blank = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let is_operator = |c: u8| matches!(c, b';' | b'|' | b'&' | b'<' | b'>' | b'(' | b')');
    let mut out = Words::default();
    let mut first_command = true;
    let mut program_seen = false;
    let mut i = 0;
    while i < line.len() {
        let c = line[i];
        if is_blank(c) {
            i += 1;
            continue;
        }
        if is_operator(c) {
            first_command = false;
            i += 1;
            continue;
        }
        let mut word = Vec::new();
        let mut dynamic = false;
        while i < line.len() && !is_blank(line[i]) && !is_operator(line[i]) {
            match line[i] {
                b'\'' => {
                    i += 1;
                    while i < line.len() && line[i] != b'\'' {
                        word.push(line[i]);
                        i += 1;
                    }
                    i += 1;
                }
                b'"' => {
                    i += 1;
                    while i < line.len() && line[i] != b'"' {
                        if line[i] == b'\\'
                            && matches!(line.get(i + 1), Some(b'$' | b'`' | b'"' | b'\\'))
                        {
                            i += 1;
                        } else if matches!(line[i], b'$' | b'`') {
                            dynamic = true;
                        }
                        word.push(line[i]);
                        i += 1;
                    }
                    i += 1;
                }
                b'\\' => {
                    if let Some(&next) = line.get(i + 1) {
                        word.push(next);
                    }
                    i += 2;
                }
                b'$' | b'`' => {
                    dynamic = true;
                    word.push(line[i]);
                    i += 1;
                }
                other => {
                    word.push(other);
                    i += 1;
                }
            }
        }
        let is_assignment = word.iter().position(|&b| b == b'=').is_some_and(|eq| {
            eq > 0
                && (word[0].is_ascii_alphabetic() || word[0] == b'_')
                && word[..eq]
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        });
        let is_program = first_command && !program_seen && !is_assignment;
        if is_program {
            program_seen = true;
        }
        if dynamic || !word.contains(&b'/') {
            continue;
        }
        if is_program {
            out.program = Some(word);
        } else if !word.starts_with(b"-") {
            out.arguments.push(word);
        }
    }
    out
}

/// The paths a configuration value may name: `~/` is the home, an absolute path is itself, a
/// relative one is relative to each of `bases`. `~user/` (another user's home) and
/// `%(prefix)/` (git's installation) name nothing a command can write and give none.
fn candidates(value: &[u8], home: &Path, bases: &[PathBuf]) -> Vec<PathBuf> {
    if value.is_empty() {
        return Vec::new();
    }
    let os = |b: &[u8]| PathBuf::from(OsStr::from_bytes(b));
    if value == b"~" {
        return vec![home.to_path_buf()];
    }
    if let Some(rest) = value.strip_prefix(b"~/") {
        return vec![home.join(os(rest))];
    }
    if value.starts_with(b"~") || value.starts_with(b"%(") {
        return Vec::new();
    }
    let path = os(value);
    if path.is_absolute() {
        return vec![path];
    }
    bases.iter().map(|b| b.join(&path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> (Option<String>, Vec<String>) {
        let w = command_words(line.as_bytes());
        let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (w.program.map(s), w.arguments.into_iter().map(s).collect())
    }

    #[test]
    fn command_words_find_the_program_and_file_arguments() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            words("tools/fsmonitor"),
            (Some("tools/fsmonitor".into()), none.clone())
        );
        assert_eq!(
            words("  \"./my tool\" --x"),
            (Some("./my tool".into()), none.clone())
        );
        assert_eq!(words("'./a b'/c d"), (Some("./a b/c".into()), none.clone()));
        assert_eq!(
            words("GIT_TRACE=1 ./run x/y"),
            (Some("./run".into()), vec!["x/y".into()])
        );
        assert_eq!(
            words("sh tools/x.sh --flag=a/b"),
            (None, vec!["tools/x.sh".into()])
        );
        assert_eq!(words("less -FRX"), (None, none.clone()));
        assert_eq!(words("$HOME/bin/x a/b"), (None, vec!["a/b".into()]));
        assert_eq!(words("\"$PWD/x\""), (None, none.clone()));
        assert_eq!(words("true; ./later"), (None, vec!["./later".into()]));
        assert_eq!(words("a\\ b/c"), (Some("a b/c".into()), none.clone()));
        assert_eq!(words("-x/y"), (Some("-x/y".into()), none));
        // Unterminated quotes end with the line.
        assert_eq!(
            words("'./open"),
            (Some("./open".into()), Vec::<String>::new())
        );
    }

    #[test]
    fn which_keys_name_what() {
        let e = |section: &str, sub: Option<&str>, key: &str, value: &str| ConfigEntry {
            section: section.into(),
            subsection: sub.map(|s| s.as_bytes().to_vec()),
            key: key.into(),
            value: Some(value.as_bytes().to_vec()),
            line: 1,
        };
        assert_eq!(
            key_use(&e("core", None, "hookspath", "x")),
            Some(Use::HookFolder)
        );
        assert_eq!(
            key_use(&e("core", None, "fsmonitor", "x")),
            Some(Use::Command)
        );
        assert_eq!(
            key_use(&e("filter", Some("lfs"), "process", "x")),
            Some(Use::Command)
        );
        assert_eq!(key_use(&e("filter", None, "process", "x")), None);
        assert_eq!(
            key_use(&e("gpg", Some("ssh"), "program", "x")),
            Some(Use::Command)
        );
        assert_eq!(key_use(&e("pager", None, "log", "x")), Some(Use::Command));
        for (section, sub, key) in [
            ("core", None, "alternaterefscommand"),
            ("trailer", Some("sign"), "command"),
            ("trailer", Some("sign"), "cmd"),
            ("tar", Some("tar.xz"), "command"),
            ("guitool", Some("t"), "cmd"),
            ("instaweb", None, "httpd"),
            ("imap", None, "tunnel"),
        ] {
            assert_eq!(
                key_use(&e(section, sub, key, "x")),
                Some(Use::Command),
                "{key}"
            );
        }
        assert_eq!(
            key_use(&e("submodule", Some("lib"), "update", "!x")),
            Some(Use::Alias)
        );
        assert_eq!(key_use(&e("submodule", Some("lib"), "url", "x")), None);
        assert_eq!(key_use(&e("trailer", None, "separators", "x")), None);
        assert_eq!(key_use(&e("user", None, "name", "x")), None);
        assert!(is_include(&e("include", None, "path", "x")));
        assert!(is_include(&e("includeif", Some("gitdir:/x/"), "path", "x")));
        assert!(!is_include(&e("includeif", None, "path", "x")));
        assert_eq!(command_text(Use::Alias, b"log --oneline"), None);
        assert_eq!(command_text(Use::Alias, b" !./x"), Some(&b"./x"[..]));
        assert_eq!(command_text(Use::CredentialHelper, b"store"), None);
        assert_eq!(
            command_text(Use::CredentialHelper, b"/opt/h get"),
            Some(&b"/opt/h get"[..])
        );
        assert_eq!(
            command_text(Use::CredentialHelper, b"!tools/h"),
            Some(&b"tools/h"[..])
        );
    }

    #[test]
    fn candidates_expand_home_and_bases() {
        let home = Path::new("/home/u");
        let bases = [PathBuf::from("/p"), PathBuf::from("/q")];
        assert_eq!(
            candidates(b"~/h", home, &bases),
            [PathBuf::from("/home/u/h")]
        );
        assert_eq!(candidates(b"/abs", home, &bases), [PathBuf::from("/abs")]);
        assert_eq!(
            candidates(b".husky/_", home, &bases),
            [PathBuf::from("/p/.husky/_"), PathBuf::from("/q/.husky/_")]
        );
        assert!(candidates(b"~bob/x", home, &bases).is_empty());
        assert!(candidates(b"%(prefix)/x", home, &bases).is_empty());
        assert!(candidates(b"", home, &bases).is_empty());
    }
}
