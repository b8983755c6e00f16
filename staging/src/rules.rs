//! Which changed paths are ignored: `.git/`, gitignore rules, and git's index.
//!
//! A path is *ignored* when it lies in a `.git` folder (or is a `.git` file) anywhere, or
//! when git's exclude rules match it (every `.gitignore` from the repository root down to the
//! path's folder, then `$GIT_DIR/info/exclude`) and git does not track it. A tracked file
//! stays shown even when a rule matches it, as `git status` does: otherwise a command could
//! change `Cargo.lock` under a `*.lock` rule and the change would never be seen.
//!
//! The `.gitignore` files are read from the staged view (what the command left), so a tool
//! that writes `.venv/.gitignore` with `*` gets its folder ignored, as `git status` would.
//! That cannot smuggle anything into the project: an ignored change is never applied, and a
//! changed `.gitignore` is itself a shown change. The index and `info/exclude` come from the
//! project: a command cannot touch those.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::gitindex::{parse_index, IndexNames};
use crate::view::Layout;

/// A `.gitignore` larger than this is not read (git has a similar limit, 100 MB; rules files
/// are small, and a huge one planted by a command must not stall the change list).
const MAX_RULES_BYTES: u64 = 1024 * 1024;
/// The index of a very large repository is a few hundred MB at most.
const MAX_INDEX_BYTES: u64 = 1024 * 1024 * 1024;

pub(crate) struct Rules<'a> {
    layout: &'a Layout,
    project: PathBuf,
    /// `.gitignore` files between the repository root and the project (exclusive), outermost
    /// first; empty when the project is the repository root.
    outer: Vec<Gitignore>,
    exclude: Option<Gitignore>,
    per_dir: HashMap<String, Option<Gitignore>>,
    dir_excluded: HashMap<String, bool>,
    /// The project's path inside the repository, with a trailing `/` ("" at the root).
    repo_prefix: String,
    index_path: Option<PathBuf>,
    hash_len: usize,
    index: Option<Result<IndexNames, String>>,
}

impl<'a> Rules<'a> {
    pub(crate) fn new(layout: &'a Layout) -> Rules<'a> {
        let project = layout.project().to_path_buf();
        let mut rules = Rules {
            layout,
            project: project.clone(),
            outer: Vec::new(),
            exclude: None,
            per_dir: HashMap::new(),
            dir_excluded: HashMap::new(),
            repo_prefix: String::new(),
            index_path: None,
            hash_len: 20,
            index: None,
        };
        // The repository: the nearest folder, from the project up, holding `.git`.
        let Some((root, git_dir)) = find_repo(&project) else {
            return rules;
        };
        if let Ok(rel) = project.strip_prefix(&root) {
            let rel = rel.to_string_lossy().into_owned();
            if !rel.is_empty() {
                rules.repo_prefix = format!("{rel}/");
                // .gitignore files of the folders above the project, inside the repository.
                let mut dir = root.clone();
                let mut dirs = vec![dir.clone()];
                for c in Path::new(&rel).components() {
                    dir = dir.join(c);
                    if dir != project {
                        dirs.push(dir.clone());
                    }
                }
                for d in dirs {
                    if let Some(g) = load_rules(&d.join(".gitignore"), &d) {
                        rules.outer.push(g);
                    }
                }
            }
        }
        let common = fs::read_to_string(git_dir.join("commondir"))
            .ok()
            .map(|c| git_dir.join(c.trim()))
            .unwrap_or_else(|| git_dir.clone());
        rules.exclude = load_rules(&common.join("info/exclude"), &root);
        if fs::read_to_string(common.join("config"))
            .map(|c| sha256_repo(&c))
            .unwrap_or(false)
        {
            rules.hash_len = 32;
        }
        rules.index_path = Some(git_dir.join("index"));
        rules
    }

    /// True when `rel` is ignored (see the module doc). `Err` when the index cannot be read,
    /// which makes the change list incomplete.
    pub(crate) fn is_ignored(&mut self, rel: &str, is_dir: bool) -> Result<bool, String> {
        if in_git_dir(rel) {
            return Ok(true);
        }
        if !self.is_excluded(rel, is_dir) {
            return Ok(false);
        }
        let name = format!("{}{rel}", self.repo_prefix);
        Ok(!self.index()?.tracks(&name))
    }

    fn index(&mut self) -> Result<&IndexNames, String> {
        if self.index.is_none() {
            self.index = Some(self.read_index());
        }
        match &self.index {
            Some(Ok(names)) => Ok(names),
            Some(Err(e)) => Err(e.clone()),
            None => Err("git index not read".into()),
        }
    }

    fn read_index(&self) -> Result<IndexNames, String> {
        let Some(path) = &self.index_path else {
            return Ok(IndexNames::default());
        };
        let data = match fs::File::open(path) {
            Ok(f) => {
                let mut data = Vec::new();
                f.take(MAX_INDEX_BYTES)
                    .read_to_end(&mut data)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                data
            }
            // A repository with no commit and nothing added has no index yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(IndexNames::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        parse_index(&data, self.hash_len).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn is_excluded(&mut self, rel: &str, is_dir: bool) -> bool {
        // git never looks inside an excluded folder, so nothing under it can be re-included.
        let ancestors: Vec<String> = crate::fsutil::ancestors_rel(rel)
            .map(str::to_string)
            .collect();
        for anc in ancestors {
            if self.dir_is_excluded(&anc) {
                return true;
            }
        }
        self.matches(rel, is_dir)
    }

    fn dir_is_excluded(&mut self, dir: &str) -> bool {
        if let Some(&v) = self.dir_excluded.get(dir) {
            return v;
        }
        let parent = crate::fsutil::parent_rel(dir);
        let v = (!parent.is_empty() && self.dir_is_excluded(parent)) || self.matches(dir, true);
        self.dir_excluded.insert(dir.to_string(), v);
        v
    }

    /// The last matching rule wins; deeper `.gitignore` files beat shallower ones, which beat
    /// `info/exclude`.
    fn matches(&mut self, rel: &str, is_dir: bool) -> bool {
        let abs = self.project.join(rel);
        let mut dir = crate::fsutil::parent_rel(rel).to_string();
        loop {
            if let Some(g) = self.rules_of(&dir) {
                let m = g.matched(&abs, is_dir);
                if m.is_ignore() {
                    return true;
                }
                if m.is_whitelist() {
                    return false;
                }
            }
            if dir.is_empty() {
                break;
            }
            dir = crate::fsutil::parent_rel(&dir).to_string();
        }
        for g in self.outer.iter().rev().chain(self.exclude.iter()) {
            let m = g.matched(&abs, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }

    fn rules_of(&mut self, dir: &str) -> Option<&Gitignore> {
        if !self.per_dir.contains_key(dir) {
            let rel = if dir.is_empty() {
                ".gitignore".to_string()
            } else {
                format!("{dir}/.gitignore")
            };
            let loaded = self
                .layout
                .staged_regular_file(&rel)
                .and_then(|p| load_rules(&p, &crate::fsutil::join(&self.project, dir)));
            self.per_dir.insert(dir.to_string(), loaded);
        }
        self.per_dir.get(dir).and_then(Option::as_ref)
    }
}

/// True for a path in (or being) a `.git` folder or file at any depth.
pub(crate) fn in_git_dir(rel: &str) -> bool {
    rel.split('/').any(|c| c == ".git")
}

/// True for a path in (or being) a `.garuda` folder, file or link at any depth: Garuda's
/// project settings (and, once the agent has them, hooks and commands that run later). A
/// nested one counts too: it is the settings of a run with that folder as the project. Such a
/// change is shown, and applied only after a question of its own ([`crate::Session::apply`]
/// refuses it; [`crate::Session::apply_approved`] with [`crate::Guard::GarudaSettings`] is the
/// explicit opt-in).
///
/// A component counts when some filesystem a project can live on may open `.garuda` by it
/// (case, invisible characters, trailing dots and spaces, a vfat short name), so `.GARUDA/settings.json` on a case-insensitive folder is no
/// way around the question. The names are [`garuda_policy::names_garuda_folder`]'s, the
/// permission engine's own.
pub fn is_garuda_settings_path(rel: &str) -> bool {
    rel.split('/').any(garuda_policy::names_garuda_folder)
}

/// `name` as a filesystem that folds names may see it, for a name check that a lookalike
/// must not get around: invisible characters dropped (older kernels' casefolded lookups skip
/// the default-ignorable ones), trailing dots and spaces dropped (vfat and NTFS drop them),
/// ASCII letters lowered (vfat, exFAT, NTFS, ext4 and f2fs folders with casefolding).
pub(crate) fn fold_name(name: &str) -> String {
    let seen: String = name
        .chars()
        .filter(|c| !garuda_text::is_hidden(*c))
        .collect();
    seen.trim_end_matches(['.', ' ']).to_ascii_lowercase()
}

/// The stem and extension of a folded name shaped like a vfat short name (`stem~N` or
/// `stem~N.ext`), by which vfat also opens the long name it was made for: `garuda~1` opens
/// `.garuda`, `env~1.loc` opens `.env.local`. The stem is the long name's first characters
/// without its dots and spaces.
pub(crate) fn vfat_short_name(folded: &str) -> Option<(&str, Option<&str>)> {
    let (base, ext) = match folded.split_once('.') {
        Some((base, ext)) => (base, Some(ext)),
        None => (folded, None),
    };
    let (stem, digits) = base.rsplit_once('~')?;
    let numbered = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    (numbered && !stem.is_empty()).then_some((stem, ext))
}

fn sha256_repo(config: &str) -> bool {
    config.lines().any(|l| {
        let l = l.trim().to_ascii_lowercase();
        l.starts_with("objectformat") && l.ends_with("sha256")
    })
}

/// The nearest repository at or above `project`: its work-tree root and git directory.
fn find_repo(project: &Path) -> Option<(PathBuf, PathBuf)> {
    for dir in project.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(m) = fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if m.is_dir() {
            return Some((dir.to_path_buf(), dot_git));
        }
        if m.is_file() {
            // A worktree or submodule: `gitdir: <path>`.
            let text = fs::read_to_string(&dot_git).ok()?;
            let target = text.strip_prefix("gitdir:")?.trim();
            return Some((dir.to_path_buf(), dir.join(target)));
        }
    }
    None
}

/// Reads one rules file (a regular file, not a link: git refuses a `.gitignore` link too).
fn load_rules(path: &Path, root: &Path) -> Option<Gitignore> {
    let m = fs::symlink_metadata(path).ok()?;
    if !m.is_file() || m.len() > MAX_RULES_BYTES {
        return None;
    }
    let text = fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let mut b = GitignoreBuilder::new(root);
    for line in text.lines() {
        // A malformed pattern is skipped, as git skips it.
        let _ = b.add_line(None, line);
    }
    b.build().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, content: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn layout(project: &Path) -> Layout {
        // The staged view is the project itself: enough to test the rules.
        Layout::Copy {
            project: project.to_path_buf(),
            copy: project.to_path_buf(),
        }
    }

    #[test]
    fn gitignore_semantics() {
        let t = tempfile::tempdir().unwrap();
        let p = fs::canonicalize(t.path()).unwrap();
        write(&p, ".gitignore", "*.log\nbuild/\n!keep.log\n/rooted.txt\n");
        write(&p, "sub/.gitignore", "!again.log\nlocal/\n");
        fs::create_dir_all(p.join(".git/info")).unwrap();
        write(&p, ".git/info/exclude", "excluded.txt\n");
        let l = layout(&p);
        let mut r = Rules::new(&l);
        for (path, want) in [
            ("a.log", true),
            ("deep/x/a.log", true),
            ("keep.log", false),
            ("sub/again.log", false),
            ("build/out.o", true),
            ("src/build/out.o", true),
            // git never re-includes inside an excluded folder.
            ("build/keep.log", true),
            ("rooted.txt", true),
            ("sub/rooted.txt", false),
            ("sub/local/x", true),
            ("local/x", false),
            ("excluded.txt", true),
            (".git/index", true),
            ("vendor/.git/HEAD", true),
            ("src/main.rs", false),
        ] {
            assert_eq!(r.is_ignored(path, false), Ok(want), "{path}");
        }
    }

    #[test]
    fn tracked_files_and_a_project_below_the_repository_root() {
        let t = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(t.path()).unwrap();
        let git = |args: &[&str]| crate::test_git::git(&root, args);
        assert!(git(&["init", "-q"]), "git is needed for this test");
        write(&root, ".gitignore", "*.tmp\n");
        write(&root, "sub/t.tmp", "tracked");
        write(&root, "sub/u.tmp", "untracked");
        assert!(git(&["add", "-f", "sub/t.tmp"]));
        let project = root.join("sub");
        let l = layout(&project);
        let mut r = Rules::new(&l);
        assert_eq!(r.is_ignored("t.tmp", false), Ok(false), "tracked: shown");
        assert_eq!(r.is_ignored("u.tmp", false), Ok(true));
        assert_eq!(r.is_ignored("x.rs", false), Ok(false));
    }

    #[test]
    fn a_broken_index_is_an_error_not_a_guess() {
        let t = tempfile::tempdir().unwrap();
        let p = fs::canonicalize(t.path()).unwrap();
        write(&p, ".gitignore", "*.log\n");
        write(&p, ".git/index", "DIRC garbage");
        let l = layout(&p);
        let mut r = Rules::new(&l);
        assert!(r.is_ignored("a.log", false).is_err());
        // Not matched by a rule: the index is not needed.
        assert_eq!(r.is_ignored("a.rs", false), Ok(false));
    }

    #[test]
    fn every_name_that_can_open_garuda_settings_is_marked() {
        // Each of these reaches `.garuda` on some filesystem (case-insensitive, casefolded,
        // trailing dots dropped, a vfat short name), at the top or nested.
        for rel in [
            ".garuda",
            ".garuda/settings.json",
            "sub/.garuda/settings.json",
            ".GARUDA/settings.json",
            "a/.Garuda",
            ".gar\u{200d}uda/settings.json",
            "\u{feff}.garuda",
            ".garuda./settings.json",
            ".garuda . /x",
            "GARUDA~1/settings.json",
            "sub/garuda~12",
        ] {
            assert!(is_garuda_settings_path(rel), "{rel:?} is not marked");
        }
        // Negative control: names that open another folder on every filesystem.
        for rel in [
            "garuda/settings.json",
            ".garudax/settings.json",
            ".garuda-old/settings.json",
            "x.garuda",
            ".gar uda",
            "garuda~",
            "garuda~1a",
            "src/garuda.rs",
        ] {
            assert!(!is_garuda_settings_path(rel), "{rel:?} is marked");
        }
    }
}
