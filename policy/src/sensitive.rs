//! The fixed tables of paths under the home directory: secrets to hide and caches to open.

use std::ffi::OsStr;

/// A path relative to the home directory, with the reason it is listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HomeEntry {
    /// Relative to `$HOME`.
    pub path: &'static str,
    /// Why it is listed, for `garuda policy` and for reviewers.
    pub reason: &'static str,
}

const fn entry(path: &'static str, reason: &'static str) -> HomeEntry {
    HomeEntry { path, reason }
}

/// Secrets under the home directory that no command may read. Only those that exist are put
/// in the policy.
pub const HOME_SECRETS: &[HomeEntry] = &[
    entry(".ssh", "ssh private keys, known hosts and config"),
    entry(".aws", "AWS access keys and SSO tokens"),
    entry(".gnupg", "GnuPG private keys"),
    entry(".config/gh", "GitHub CLI OAuth token"),
    entry(".docker/config.json", "container registry credentials"),
    entry(".kube", "Kubernetes cluster credentials"),
    entry(".netrc", "passwords for HTTP, FTP and git remotes"),
    entry(
        ".git-credentials",
        "git credential store (plain-text tokens)",
    ),
    entry(
        ".config/git/credentials",
        "git credential store (plain-text tokens)",
    ),
    entry(
        ".bash_history",
        "shell history: pasted tokens and passwords",
    ),
    entry(".zsh_history", "shell history: pasted tokens and passwords"),
    entry(".histfile", "shell history: pasted tokens and passwords"),
    entry(".python_history", "REPL history: pasted tokens"),
    entry(".node_repl_history", "REPL history: pasted tokens"),
    entry(
        ".psql_history",
        "database client history: queries with passwords",
    ),
    entry(
        ".mysql_history",
        "database client history: queries with passwords",
    ),
    entry(".sqlite_history", "database client history"),
    entry(".lesshst", "pager search history"),
    entry(".config/gcloud", "Google Cloud credentials"),
    entry(".azure", "Azure CLI tokens"),
    entry(".npmrc", "npm registry auth tokens"),
    entry(".yarnrc", "yarn registry auth tokens"),
    entry(".pypirc", "PyPI upload credentials"),
    entry(".cargo/credentials", "crates.io token (old name)"),
    entry(".cargo/credentials.toml", "crates.io token"),
    entry(".config/hub", "hub CLI GitHub token"),
    entry(".terraform.d", "Terraform Cloud tokens"),
    entry(".vault-token", "HashiCorp Vault token"),
    entry(".local/share/keyrings", "GNOME keyring files"),
    entry(".password-store", "pass password store"),
    entry(".pgpass", "PostgreSQL passwords"),
];

/// Secrets of the machine itself, outside any home directory. They matter when Garuda runs as
/// root: inside the sandbox root is still the owner of these files. Only those that exist are
/// put in the policy (through [`crate::HostEnv::from_process`]).
pub const SYSTEM_SECRETS: &[(&str, &str)] = &[
    ("/etc/shadow", "password hashes"),
    ("/etc/shadow-", "password hashes (backup)"),
    ("/etc/gshadow", "group password hashes"),
    ("/etc/gshadow-", "group password hashes (backup)"),
    ("/etc/ssh/ssh_host_rsa_key", "the machine's SSH host key"),
    ("/etc/ssh/ssh_host_ecdsa_key", "the machine's SSH host key"),
    (
        "/etc/ssh/ssh_host_ed25519_key",
        "the machine's SSH host key",
    ),
    ("/etc/ssh/ssh_host_dsa_key", "the machine's SSH host key"),
    ("/etc/sudoers.d", "may hold credentials for automation"),
];

/// Package caches under the home directory that commands may write, so that builds work
/// inside the sandbox. Only those that exist are put in the policy.
pub const PACKAGE_CACHES: &[HomeEntry] = &[
    entry(".cache", "XDG cache: pip, go-build, sccache and most tools"),
    entry(".cargo/registry", "cargo: downloaded crates and the index"),
    entry(".cargo/git", "cargo: git dependencies"),
    entry(".npm", "npm package cache"),
    entry(".m2/repository", "Maven local repository"),
    entry(".gradle/caches", "Gradle dependency cache"),
    entry("go/pkg/mod", "Go module cache"),
    entry(".local/share/pnpm", "pnpm content-addressable store"),
];

/// True for a name that dotenv tools load secrets from: `.env` or `.env.<anything>`
/// (`.env.local`, `.env.production`). `.envrc` and `.environment` are not matched.
/// (The walk cache keeps the names this matched: a wider test needs its `MAGIC` changed.)
pub fn is_env_file_name(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes == b".env" || bytes.starts_with(b".env.")
}

/// True when `name` may name a `.garuda` folder on some filesystem a project can live on:
/// ASCII case ignored (vfat, exFAT, NTFS, ext4 and f2fs folders with casefolding), invisible
/// characters ignored (older kernels' casefolded lookups skip the default-ignorable ones, so
/// `.gar<U+200D>uda` opened `.garuda`), trailing dots and spaces ignored (vfat and NTFS drop
/// them), and vfat's short name for it (`GARUDA~1`). A `.garuda` folder holds Garuda's
/// project settings (and, later, hooks and commands that run on the host): the permission
/// engine denies writes into one, and staging applies a change there only after a question
/// of its own. A false match only refuses (or asks) once more.
pub fn names_garuda_folder(name: &str) -> bool {
    may_open_as(name, ".garuda")
}

/// True when `name` may name a `.git` folder (or a worktree's `.git` file) on some filesystem a
/// project can live on, by the same rules as [`names_garuda_folder`] (`.GIT`, `.git.`,
/// `.gi<U+200D>t`, vfat's `GIT~1`). Git itself opens `.git` on a case-insensitive filesystem
/// under any of these spellings, so a write to one is a write into the repository's hooks and
/// config. A false match only refuses once more.
pub fn names_git_folder(name: &str) -> bool {
    may_open_as(name, ".git")
}

/// Whether a filesystem that folds names may open `dot_name` (a `.name` of ASCII letters) by
/// `name`: invisible characters dropped, trailing dots and spaces dropped, ASCII case ignored,
/// or vfat's short name `NAME~N`.
fn may_open_as(name: &str, dot_name: &str) -> bool {
    let seen: String = name
        .chars()
        .filter(|c| !garuda_text::is_hidden(*c))
        .collect();
    let name = seen.trim_end_matches(['.', ' ']);
    let stem = dot_name.trim_start_matches('.');
    // `get`, not indexing: `name` may have a multi-byte character at that offset.
    let short_name = name
        .get(..stem.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(stem))
        && name.get(stem.len()..stem.len() + 1) == Some("~")
        && name.len() > stem.len() + 1
        && name
            .bytes()
            .skip(stem.len() + 1)
            .all(|b| b.is_ascii_digit());
    name.eq_ignore_ascii_case(dot_name) || short_name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_that_can_open_git_is_marked() {
        for name in [
            ".git",
            ".GIT",
            ".Git",
            ".git.",
            ".git ",
            ".gi\u{200d}t",
            "GIT~1",
            "git~12",
        ] {
            assert!(names_git_folder(name), "{name:?}");
        }
        // Negative control: names that no filesystem opens as `.git`.
        for name in [
            "git",
            ".gitignore",
            ".github",
            "x.git",
            ".git-old",
            "GIT~",
            "GIT~1a",
            "gi~1",
            "é~1",
        ] {
            assert!(!names_git_folder(name), "{name:?}");
        }
        // The `.garuda` rules are unchanged by sharing the helper.
        assert!(names_garuda_folder("GARUDA~1") && names_garuda_folder(".GARUDA."));
        assert!(!names_garuda_folder("garuda") && !names_garuda_folder(".garudax"));
    }
    use std::path::{Component, Path};

    #[test]
    fn env_file_names() {
        for (name, want) in [
            (".env", true),
            (".env.local", true),
            (".env.production.local", true),
            (".env.", true),
            (".envrc", false),
            (".environment", false),
            ("env", false),
            ("x.env", false),
            (".ENV", false),
        ] {
            assert_eq!(is_env_file_name(OsStr::new(name)), want, "{name}");
        }
    }

    #[test]
    fn tables_hold_plain_relative_paths_and_reasons() {
        for table in [HOME_SECRETS, PACKAGE_CACHES] {
            for e in table {
                let path = Path::new(e.path);
                assert!(
                    path.components().all(|c| matches!(c, Component::Normal(_))),
                    "{}",
                    e.path
                );
                assert!(!e.reason.is_empty(), "{}", e.path);
                assert_eq!(table.iter().filter(|o| o.path == e.path).count(), 1);
            }
        }
    }
}
