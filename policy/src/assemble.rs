//! Builds the [`ExecPolicy`] from the effective settings and the host.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::env::command_env;
use crate::error::PolicyError;
use crate::exec::{ExecPolicy, Limits, NetworkMode};
use crate::gitexec::protect_configured;
use crate::host::HostEnv;
use crate::paths::{
    canonical_if_exists, canonical_if_present, create_dir_if_missing, is_absent,
    replaced_by_sandbox, sorted_unique,
};
use crate::sensitive::{HOME_SECRETS, PACKAGE_CACHES};
use crate::settings::{CommandMode, EffectiveSettings, Origin};
use crate::walk::scan_project;

/// Mode of Garuda's home when this function creates it: only the user may enter.
const GARUDA_HOME_MODE: u32 = 0o700;

/// Directories where host daemons keep their sockets (`/run/user/<uid>` among them), hidden
/// behind an empty directory; `$XDG_RUNTIME_DIR` is added from the host.
const HIDDEN_DIRS: &[&str] = &["/run", "/var/run"];

/// Something the policy leaves out that the user should hear about. `garuda sandbox` prints
/// each one before the command runs, and `garuda policy` / `garuda policy check` print the same
/// line ([`check_writable`]), so a policy that passes the check runs as the check said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyNotice {
    /// A `sandbox.writable` entry with nothing at its path, outside the strict profile. It
    /// could only have widened what commands may write, so leaving it out narrows nothing. It
    /// is not a writable root, so nothing is bound there: a link planted at the path later
    /// (by a command running at the same time) is never followed.
    WritableSkipped {
        /// The entry, resolved against the project root or home.
        path: PathBuf,
        /// Where the entry came from.
        origin: Origin,
    },
}

impl fmt::Display for PolicyNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyNotice::WritableSkipped { path, origin } => write!(
                f,
                "notice: writable path {} (sandbox.writable, {origin}) does not exist, so it is \
                 skipped and nothing is made writable for it: create it to make it writable, or \
                 remove the entry",
                path.display()
            ),
        }
    }
}

/// Builds the policy every command of this session runs under; see
/// [`build_exec_policy_noting`], whose notices this drops (for tests and benchmarks; the CLI
/// prints them).
pub fn build_exec_policy(
    project_root: &Path,
    settings: &EffectiveSettings,
    host: &HostEnv,
) -> Result<ExecPolicy, PolicyError> {
    build_exec_policy_noting(project_root, settings, host).map(|(policy, _)| policy)
}

/// Builds the policy every command of this session runs under, and what it left out
/// ([`PolicyNotice`]).
///
/// Every path is canonical and, unless said otherwise, exists; each list is sorted by path
/// and deduplicated. Side effects, on purpose: a missing `<project>/.garuda` and a missing
/// folder named by `core.hooksPath` or `init.templateDir` under a writable root are created
/// empty (mode 0755) so that they can be made read-only, and Garuda's home is created (mode
/// 0700) so that it is unreadable from the first command on, before any audit key is written
/// there.
///
/// Errors: the project root is missing, not a directory, `/tmp` itself or under `/dev` or
/// `/proc`, or contains the home directory; a `sandbox.writable` entry is refused (see
/// [`check_writable`]) or overlaps an unreadable path (the project's `.env` files included);
/// a path that exists cannot be resolved or listed; a git pointer is stale; a git
/// configuration file cannot be parsed, or names a missing file a command could create; in
/// direct mode, `.git` or `.garuda` is a link a command could replace; a link a command could
/// rewrite lies on the way to a file git runs or reads.
pub fn build_exec_policy_noting(
    project_root: &Path,
    settings: &EffectiveSettings,
    host: &HostEnv,
) -> Result<(ExecPolicy, Vec<PolicyNotice>), PolicyError> {
    let root = fs::canonicalize(project_root).map_err(|source| PolicyError::Canonicalize {
        path: project_root.to_path_buf(),
        source,
    })?;
    if !root.is_dir() {
        return Err(PolicyError::ProjectRootNotDirectory { path: root });
    }
    // The executors give commands their own `/tmp`, `/dev` and `/proc`: a project there would
    // either replace the private `/tmp` with the host's (every program's temporary files and
    // sockets) or not be seen at all.
    if replaced_by_sandbox(&root) {
        return Err(PolicyError::ProjectRootReplaced { path: root });
    }
    let home = canonical_if_exists(&host.home)?.unwrap_or_else(|| host.home.clone());
    // A writable home means writable dotfiles (`.bashrc`, `.config/autostart`) that the host
    // runs after the sandbox is gone.
    if home.starts_with(&root) {
        return Err(PolicyError::ProjectRootTooBroad { path: root, home });
    }

    let mut unreadable = known_unreadable(settings, host, &home, garuda_home(host)?)?;

    let mut writable = vec![root.clone()];
    for cache in PACKAGE_CACHES {
        if let Some(path) = canonical_if_exists(&home.join(cache.path))? {
            // Only reachable through a link such as `~/.cache -> ~`.
            if home.starts_with(&path) {
                return Err(PolicyError::CacheTooBroad { path, home });
            }
            writable.push(path);
        }
    }
    let (extra_writable, notices) = resolve_extra_writable(settings, &home)?;
    writable.extend(extra_writable.iter().map(|(path, _)| path.clone()));
    let writable = sorted_unique(writable);

    let staged = settings.command_mode == CommandMode::Staged;
    let mut scan = scan_project(&root, &writable, staged, Some(&host.garuda_home))?;
    protect_configured(
        &mut scan.protected,
        &scan.repos,
        &home,
        &host.git_config_files(),
    )?;
    unreadable.extend(scan.env_files);
    let unreadable = sorted_unique(unreadable);

    // Checked against every unreadable path, the project's `.env` files included.
    refuse_exposing(&extra_writable, &unreadable)?;

    let mut hidden = Vec::new();
    let xdg = host.xdg_runtime_dir.as_deref();
    for dir in HIDDEN_DIRS.iter().map(Path::new).chain(xdg) {
        if let Some(path) = canonical_if_exists(dir)? {
            if path.is_dir() {
                hidden.push(path);
            }
        }
    }

    let allow: Vec<String> = settings.env_allow.iter().map(|(n, _)| n.clone()).collect();
    let policy = ExecPolicy {
        project_root: root,
        writable_roots: writable,
        read_only_paths: sorted_unique(scan.protected.minimal_read_only()),
        writable_holes: sorted_unique(scan.protected.holes),
        unreadable_paths: unreadable,
        hidden_dirs: sorted_unique(hidden),
        network: NetworkMode::Isolated,
        staged: None,
        env: command_env(&host.vars, &allow),
        limits: Limits::default(),
    };
    Ok((policy, notices))
}

/// Checks `sandbox.writable` of `settings` on this machine without changing anything: the
/// refusals [`build_exec_policy_noting`] makes for an entry, and the notices it gives, so that
/// `garuda policy` and `garuda policy check` say what a run will say.
///
/// Outside the strict profile an entry with nothing at its path is skipped
/// ([`PolicyNotice::WritableSkipped`]); under strict it is an error
/// ([`PolicyError::WritableMissing`]). Errors everywhere: a dangling link, `/`, the home
/// directory or one of its ancestors, `/tmp` itself or a path under `/dev` or `/proc`, and an
/// entry that overlaps a secret: the built-in and machine secrets, Garuda's home, the
/// ssh-agent socket and `sandbox.unreadable`. The project's `.env` files are found only by the
/// walk of a run, so an entry that holds one is refused only then.
pub fn check_writable(
    settings: &EffectiveSettings,
    host: &HostEnv,
) -> Result<Vec<PolicyNotice>, PolicyError> {
    let home = canonical_if_exists(&host.home)?.unwrap_or_else(|| host.home.clone());
    let (extra_writable, notices) = resolve_extra_writable(settings, &home)?;
    // Not created here: where it will be is enough to tell whether an entry would hold it.
    let garuda_home =
        canonical_if_exists(&host.garuda_home)?.unwrap_or_else(|| host.garuda_home.clone());
    let unreadable = known_unreadable(settings, host, &home, garuda_home)?;
    refuse_exposing(&extra_writable, &unreadable)?;
    Ok(notices)
}

/// The unreadable paths known before the project is walked: existing home and machine
/// secrets, Garuda's home (`garuda_home`, canonical), the ssh-agent socket and the existing
/// `sandbox.unreadable` entries.
fn known_unreadable(
    settings: &EffectiveSettings,
    host: &HostEnv,
    home: &Path,
    garuda_home: PathBuf,
) -> Result<Vec<PathBuf>, PolicyError> {
    let mut unreadable = Vec::new();
    for secret in HOME_SECRETS {
        unreadable.extend(canonical_if_exists(&home.join(secret.path))?);
    }
    for secret in &host.system_secrets {
        unreadable.extend(canonical_if_exists(secret)?);
    }
    unreadable.push(garuda_home);
    unreadable.extend(ssh_agent_socket(host)?);
    for (path, _) in &settings.extra_unreadable {
        unreadable.extend(canonical_if_exists(path)?);
    }
    Ok(unreadable)
}

/// A default cache may hold Garuda's home (it stays unreadable), but an entry someone adds must
/// not open a directory that holds a secret, nor one inside a secret.
fn refuse_exposing(
    extra: &[(PathBuf, &Origin)],
    unreadable: &[PathBuf],
) -> Result<(), PolicyError> {
    for (path, origin) in extra {
        if let Some(secret) = unreadable
            .iter()
            .find(|secret| secret.starts_with(path) || path.starts_with(secret))
        {
            return Err(PolicyError::WritableExposesSecret {
                path: path.clone(),
                origin: (*origin).clone(),
                secret: secret.clone(),
            });
        }
    }
    Ok(())
}

/// Garuda's home, created if missing: audit keys live there, and a directory created after
/// the policy was built would not be in it, so it would be readable by commands.
fn garuda_home(host: &HostEnv) -> Result<PathBuf, PolicyError> {
    create_dir_if_missing(&host.garuda_home, GARUDA_HOME_MODE)?;
    canonical_if_present(&host.garuda_home)?.ok_or_else(|| PolicyError::Canonicalize {
        path: host.garuda_home.clone(),
        source: io::Error::from(io::ErrorKind::NotFound),
    })
}

/// The ssh-agent socket: whoever can connect can sign as the user. Hidden whether or not the
/// variable is passed on (it is not, by default).
fn ssh_agent_socket(host: &HostEnv) -> Result<Option<PathBuf>, PolicyError> {
    match host.var("SSH_AUTH_SOCK").map(Path::new) {
        // ssh-agent always publishes an absolute path; a relative one names no fixed place.
        Some(path) if path.is_absolute() => canonical_if_exists(path),
        _ => Ok(None),
    }
}

/// `sandbox.writable`, canonical, each checked against the home directory and the folders the
/// sandbox replaces; and the entries skipped because nothing is at their path (outside strict).
#[allow(clippy::type_complexity)] // a list and its notices, used once each
fn resolve_extra_writable<'a>(
    settings: &'a EffectiveSettings,
    home: &Path,
) -> Result<(Vec<(PathBuf, &'a Origin)>, Vec<PolicyNotice>), PolicyError> {
    let mut resolved = Vec::new();
    let mut notices = Vec::new();
    for (path, origin) in &settings.extra_writable {
        let missing = || {
            if settings.is_strict() {
                Err(PolicyError::WritableMissing {
                    path: path.clone(),
                    origin: origin.clone(),
                    strict: settings.profile_origin.clone(),
                })
            } else {
                Ok(PolicyNotice::WritableSkipped {
                    path: path.clone(),
                    origin: origin.clone(),
                })
            }
        };
        let resolve_error = |source| PolicyError::Canonicalize {
            path: path.clone(),
            source,
        };
        // Nothing at the path: skipped (never bound). Something there that resolves nowhere
        // (a dangling link): refused, since a command could create what it names.
        let canonical = match fs::symlink_metadata(path) {
            Err(e) if is_absent(&e) => {
                notices.push(missing()?);
                continue;
            }
            Err(e) => return Err(resolve_error(e)),
            Ok(_) => match fs::canonicalize(path) {
                Ok(canonical) => canonical,
                Err(e) if is_absent(&e) => match fs::read_link(path) {
                    Ok(target) => {
                        return Err(PolicyError::WritableDanglingLink {
                            path: path.clone(),
                            origin: origin.clone(),
                            target,
                        })
                    }
                    // Gone since it was looked at.
                    Err(e) if is_absent(&e) => {
                        notices.push(missing()?);
                        continue;
                    }
                    Err(e) => return Err(resolve_error(e)),
                },
                Err(e) => return Err(resolve_error(e)),
            },
        };
        if replaced_by_sandbox(&canonical) {
            return Err(PolicyError::WritableReplaced {
                path: canonical,
                origin: origin.clone(),
            });
        }
        // `/`, the home directory and its ancestors all contain the dotfiles.
        if home.starts_with(&canonical) {
            return Err(PolicyError::WritableTooBroad {
                path: canonical,
                origin: origin.clone(),
            });
        }
        resolved.push((canonical, origin));
    }
    Ok((resolved, notices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{CommandMode, SourceKind};
    use crate::test_support::{fake_host, write};
    use std::ffi::OsString;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use tempfile::TempDir;

    struct Fixture {
        tmp: TempDir,
        host: HostEnv,
        settings: EffectiveSettings,
    }

    impl Fixture {
        fn new() -> Fixture {
            let tmp = TempDir::new().unwrap();
            let host = fake_host(tmp.path());
            fs::create_dir_all(tmp.path().join("project")).unwrap();
            Fixture {
                tmp,
                host,
                settings: EffectiveSettings::default(),
            }
        }
        /// Canonical path under the temporary directory (which may itself sit behind a link).
        fn at(&self, rel: &str) -> PathBuf {
            fs::canonicalize(self.tmp.path()).unwrap().join(rel)
        }
        fn home(&self, rel: &str) -> PathBuf {
            self.at("home").join(rel)
        }
        fn project(&self, rel: &str) -> PathBuf {
            self.at("project").join(rel)
        }
        fn build(&self) -> Result<ExecPolicy, PolicyError> {
            build_exec_policy(&self.tmp.path().join("project"), &self.settings, &self.host)
        }
        fn origin(&self, kind: SourceKind) -> Origin {
            Origin::file(kind, self.tmp.path().join(format!("{kind}.json")))
        }
        fn allow_writable(&mut self, path: PathBuf) {
            let origin = self.origin(SourceKind::User);
            self.settings.extra_writable.push((path, origin));
        }
    }

    fn mkdir(path: &Path) {
        fs::create_dir_all(path).unwrap();
    }

    fn git_init(dir: &Path) {
        mkdir(&dir.join(".git/hooks"));
        mkdir(&dir.join(".git/objects"));
        write(&dir.join(".git/config"), b"[core]\n");
        write(&dir.join(".git/HEAD"), b"ref: refs/heads/main\n");
    }

    #[test]
    fn minimal_policy() {
        let fx = Fixture::new();
        let policy = fx.build().unwrap();
        assert_eq!(policy.project_root, fx.project(""));
        assert_eq!(policy.writable_roots, [fx.project("")]);
        assert_eq!(policy.unreadable_paths, [fx.home(".garuda")]);
        assert_eq!(policy.read_only_paths, [fx.project(".garuda")]);
        assert!(policy.writable_holes.is_empty());
        assert_eq!(policy.network, NetworkMode::Isolated);
        assert_eq!(policy.limits, Limits::default());
    }

    #[test]
    fn existing_home_secrets_are_unreadable_and_missing_ones_are_not_listed() {
        let fx = Fixture::new();
        mkdir(&fx.home(".ssh"));
        mkdir(&fx.home(".aws"));
        write(&fx.home(".netrc"), b"machine x password y\n");
        write(&fx.home(".docker/config.json"), b"{}");
        // A file where a directory is expected: `.kube` exists, `.config/gh` cannot.
        write(&fx.home(".config"), b"not a directory");
        mkdir(&fx.home(".kube"));
        let policy = fx.build().unwrap();
        let want = [
            fx.home(".aws"),
            fx.home(".docker/config.json"),
            fx.home(".garuda"),
            fx.home(".kube"),
            fx.home(".netrc"),
            fx.home(".ssh"),
        ];
        assert_eq!(policy.unreadable_paths, want);
        assert!(!policy.unreadable_paths.contains(&fx.home(".gnupg")));
    }

    #[test]
    fn linked_secret_is_hidden_at_its_target() {
        let fx = Fixture::new();
        mkdir(&fx.at("dotfiles/ssh"));
        symlink(fx.at("dotfiles/ssh"), fx.home(".ssh")).unwrap();
        let policy = fx.build().unwrap();
        assert!(policy.unreadable_paths.contains(&fx.at("dotfiles/ssh")));
        assert!(!policy.unreadable_paths.contains(&fx.home(".ssh")));
    }

    #[test]
    fn garuda_home_is_created_and_unreadable_even_inside_a_cache() {
        let mut fx = Fixture::new();
        mkdir(&fx.home(".cache"));
        fx.host.garuda_home = fx.home(".cache/garuda");
        let policy = fx.build().unwrap();
        let mode = fs::metadata(fx.home(".cache/garuda"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(policy.writable_roots.contains(&fx.home(".cache")));
        assert!(policy.unreadable_paths.contains(&fx.home(".cache/garuda")));
    }

    #[test]
    fn ssh_agent_socket_is_unreadable_when_it_exists() {
        let mut fx = Fixture::new();
        let sock = fx.at("agent.sock");
        write(&sock, b"");
        fx.host
            .vars
            .push(("SSH_AUTH_SOCK".into(), sock.clone().into()));
        let policy = fx.build().unwrap();
        assert!(policy.unreadable_paths.contains(&sock));
        assert!(!policy.env.iter().any(|(k, _)| k == "SSH_AUTH_SOCK"));

        let mut fx = Fixture::new();
        fx.host
            .vars
            .push(("SSH_AUTH_SOCK".into(), fx.at("gone.sock").into()));
        assert_eq!(fx.build().unwrap().unreadable_paths, [fx.home(".garuda")]);
    }

    #[test]
    fn extra_unreadable_is_listed_when_it_exists() {
        let mut fx = Fixture::new();
        write(&fx.project("secrets/prod.pem"), b"key");
        let origin = fx.origin(SourceKind::Project);
        fx.settings.extra_unreadable = vec![
            (fx.project("secrets/prod.pem"), origin.clone()),
            (fx.project("secrets/missing.pem"), origin),
        ];
        let policy = fx.build().unwrap();
        assert!(policy
            .unreadable_paths
            .contains(&fx.project("secrets/prod.pem")));
        assert!(!policy
            .unreadable_paths
            .contains(&fx.project("secrets/missing.pem")));
    }

    #[test]
    fn env_files_are_found_at_any_depth() {
        let fx = Fixture::new();
        write(&fx.project(".env"), b"A=1");
        write(&fx.project("apps/web/.env.local"), b"A=1");
        write(&fx.project("a/b/c/d/.env.production"), b"A=1");
        mkdir(&fx.project("deploy/.env"));
        write(&fx.project("deploy/.env/prod"), b"A=1");
        write(&fx.project(".envrc"), b"use nix");
        write(&fx.project("env.example"), b"");
        let policy = fx.build().unwrap();
        let found: Vec<_> = policy
            .unreadable_paths
            .iter()
            .filter(|p| p.starts_with(fx.project("")))
            .cloned()
            .collect();
        assert_eq!(
            found,
            [
                fx.project(".env"),
                fx.project("a/b/c/d/.env.production"),
                fx.project("apps/web/.env.local"),
                fx.project("deploy/.env"),
            ]
        );
    }

    #[test]
    fn links_in_the_project_are_not_followed() {
        let fx = Fixture::new();
        write(&fx.at("outside/.env"), b"A=1");
        git_init(&fx.at("outside"));
        symlink(fx.at("outside"), fx.project("linked")).unwrap();
        // A link named like a secret is hidden at its target.
        write(&fx.at("shared.env"), b"A=1");
        symlink(fx.at("shared.env"), fx.project(".env.shared")).unwrap();
        let policy = fx.build().unwrap();
        assert!(!policy.unreadable_paths.contains(&fx.at("outside/.env")));
        assert!(policy.unreadable_paths.contains(&fx.at("shared.env")));
        assert_eq!(policy.read_only_paths, [fx.project(".garuda")]);
    }

    /// The read-only paths inside the project, and the holes, relative to it.
    fn protected_in_project(fx: &Fixture, policy: &ExecPolicy) -> (Vec<String>, Vec<String>) {
        let rel = |list: &[PathBuf]| {
            list.iter()
                .filter_map(|p| p.strip_prefix(fx.project("")).ok())
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        (rel(&policy.read_only_paths), rel(&policy.writable_holes))
    }

    fn staged(fx: &mut Fixture) {
        fx.settings.command_mode = CommandMode::Staged;
    }

    /// Direct mode refuses the link at `rel` (`ProtectedLinkInDirectMode`, naming it, with
    /// `--staged` and `fix` in the message); staged mode builds the policy, returned.
    fn refused_in_direct_mode_built_staged(fx: &mut Fixture, rel: &str, fix: &str) -> ExecPolicy {
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::ProtectedLinkInDirectMode { path, .. } if *path == fx.project(rel)),
            "{e:?}"
        );
        assert!(e.to_string().contains("--staged"), "{e}");
        assert!(e.to_string().contains(fix), "{e}");
        staged(fx);
        fx.build().unwrap()
    }

    #[test]
    fn git_dirs_are_read_only_as_a_whole_with_holes_for_data() {
        let fx = Fixture::new();
        mkdir(&fx.project(".git/objects/ab"));
        mkdir(&fx.project(".git/refs/heads"));
        write(&fx.project(".git/HEAD"), b"ref: refs/heads/main\n");
        // A `logs` that is a link is not a hole: it stays read-only.
        mkdir(&fx.project("elsewhere"));
        symlink(fx.project("elsewhere"), fx.project(".git/logs")).unwrap();
        let policy = fx.build().unwrap();
        let (ro, holes) = protected_in_project(&fx, &policy);
        assert_eq!(ro, [".garuda", ".git"]);
        assert_eq!(holes, [".git/objects", ".git/refs"]);
        // Nothing is created inside a read-only `.git` any more: nothing can be created there.
        assert!(!fx.project(".git/hooks").exists());
        assert!(!fx.project(".git/config").exists());
    }

    #[test]
    fn a_missing_garuda_is_created_and_read_only_whatever_it_is() {
        let fx = Fixture::new();
        let policy = fx.build().unwrap();
        let meta = fs::symlink_metadata(fx.project(".garuda")).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert_eq!(fs::read_dir(fx.project(".garuda")).unwrap().count(), 0);
        assert!(policy.read_only_paths.contains(&fx.project(".garuda")));

        // A file is protected as a file.
        let fx = Fixture::new();
        write(&fx.project(".garuda"), b"not a folder");
        assert!(fx
            .build()
            .unwrap()
            .read_only_paths
            .contains(&fx.project(".garuda")));

        // A link: refused in direct mode, its target protected in staged mode.
        let mut fx = Fixture::new();
        mkdir(&fx.project("config/garuda"));
        symlink("config/garuda", fx.project(".garuda")).unwrap();
        let policy = refused_in_direct_mode_built_staged(&mut fx, ".garuda", "--staged");
        assert!(policy
            .read_only_paths
            .contains(&fx.project("config/garuda")));

        // Dangling: a command could create the target, in either mode.
        let mut fx = Fixture::new();
        symlink("config/garuda", fx.project(".garuda")).unwrap();
        staged(&mut fx);
        assert!(matches!(
            fx.build().unwrap_err(),
            PolicyError::Canonicalize { path, .. } if path == fx.project(".garuda")
        ));
    }

    #[test]
    fn nested_repositories_and_garuda_dirs_are_protected() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        git_init(&fx.project("vendor/lib"));
        mkdir(&fx.project("sub/dir/.garuda"));
        // A `.git` directory is not walked into: nothing inside it is listed.
        write(&fx.project(".git/.env"), b"A=1");
        let policy = fx.build().unwrap();
        let (ro, holes) = protected_in_project(&fx, &policy);
        assert_eq!(
            ro,
            [".garuda", ".git", "sub/dir/.garuda", "vendor/lib/.git"]
        );
        assert_eq!(holes, [".git/objects", "vendor/lib/.git/objects"]);
        assert!(!policy.unreadable_paths.contains(&fx.project(".git/.env")));
    }

    #[test]
    fn a_linked_git_dir_is_refused_in_direct_mode_and_protected_in_staged_mode() {
        let mut fx = Fixture::new();
        git_init(&fx.project("store"));
        symlink("store/.git", fx.project(".git")).unwrap();
        let policy =
            refused_in_direct_mode_built_staged(&mut fx, ".git", "git init --separate-git-dir");
        let (ro, holes) = protected_in_project(&fx, &policy);
        assert_eq!(ro, [".garuda", "store/.git"]);
        assert_eq!(holes, ["store/.git/objects"]);
    }

    #[test]
    fn a_linked_git_is_refused_in_nested_repositories_and_worktrees_too() {
        // A nested repository whose `.git` is a link.
        let mut fx = Fixture::new();
        git_init(&fx.project(""));
        git_init(&fx.project("store"));
        mkdir(&fx.project("vendor/lib"));
        symlink("../../store/.git", fx.project("vendor/lib/.git")).unwrap();
        refused_in_direct_mode_built_staged(&mut fx, "vendor/lib/.git", "--separate-git-dir");
        // A linked worktree whose `.git` pointer file is reached through a link.
        let mut fx = Fixture::new();
        git_init(&fx.project(""));
        let private = fx.project(".git/worktrees/wt");
        mkdir(&private.join("logs"));
        write(&private.join("commondir"), b"../..\n");
        write(&private.join("HEAD"), b"ref: refs/heads/wt\n");
        write(
            &fx.project("pointers/wt.git"),
            b"gitdir: ../.git/worktrees/wt\n",
        );
        mkdir(&fx.project("wt"));
        symlink("../pointers/wt.git", fx.project("wt/.git")).unwrap();
        let policy = refused_in_direct_mode_built_staged(&mut fx, "wt/.git", "--separate-git-dir");
        let (ro, _) = protected_in_project(&fx, &policy);
        assert!(ro.contains(&"pointers/wt.git".to_string()), "{ro:?}");
    }

    #[test]
    fn worktree_git_file_with_commondir_is_protected() {
        // The main repository sits outside the project in a writable directory, so only the
        // pointer files can lead the walk to it.
        let mut fx = Fixture::new();
        let main = fx.at("shared/repo");
        git_init(&main);
        let private = main.join(".git/worktrees/wt");
        mkdir(&private.join("logs"));
        write(&private.join("commondir"), b"../..\n");
        write(&private.join("config.worktree"), b"");
        write(&private.join("HEAD"), b"ref: refs/heads/wt\n");
        fs::remove_dir(main.join(".git/hooks")).unwrap();
        write(
            &fx.project(".git"),
            b"gitdir: ../shared/repo/.git/worktrees/wt\n",
        );
        fx.allow_writable(fx.at("shared"));
        let policy = fx.build().unwrap();
        assert!(!main.join(".git/hooks").exists(), "nothing created");
        assert_eq!(
            policy.read_only_paths,
            [fx.project(".garuda"), fx.project(".git"), main.join(".git")]
        );
        assert_eq!(
            policy.writable_holes,
            [main.join(".git/objects"), private.join("logs")]
        );
    }

    #[test]
    fn submodule_git_file_is_protected() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        let module = fx.project(".git/modules/libs/sub");
        mkdir(&module.join("objects"));
        write(&module.join("HEAD"), b"ref: refs/heads/main\n");
        write(
            &module.join("config"),
            b"[core]\n\tworktree = ../../../../libs/sub\n",
        );
        write(
            &fx.project("libs/sub/.git"),
            b"gitdir: ../../.git/modules/libs/sub",
        );
        let policy = fx.build().unwrap();
        let (ro, holes) = protected_in_project(&fx, &policy);
        assert_eq!(ro, [".garuda", ".git", "libs/sub/.git"]);
        assert_eq!(holes, [".git/modules/libs/sub/objects", ".git/objects"]);
    }

    #[test]
    fn git_metadata_outside_writable_roots_is_not_listed() {
        let fx = Fixture::new();
        let main = fx.at("elsewhere/repo");
        git_init(&main);
        fs::remove_dir(main.join(".git/hooks")).unwrap();
        write(
            &fx.project(".git"),
            format!("gitdir: {}", main.join(".git").display()).as_bytes(),
        );
        let policy = fx.build().unwrap();
        // Only the pointer file (and `.garuda`), which lie in the project.
        assert_eq!(
            policy.read_only_paths,
            [fx.project(".garuda"), fx.project(".git")]
        );
        assert!(policy.writable_holes.is_empty());
        assert!(
            !main.join(".git/hooks").exists(),
            "nothing created outside writable roots"
        );
    }

    #[test]
    fn stale_or_malformed_git_pointers_are_errors() {
        let fx = Fixture::new();
        write(&fx.project(".git"), b"gitdir: ../gone/.git/worktrees/x\n");
        assert!(matches!(
            fx.build().unwrap_err(),
            PolicyError::GitPointerTarget { path, .. } if path == fx.project(".git")
        ));

        let fx = Fixture::new();
        write(&fx.project("sub/.git"), b"not a pointer\n");
        assert!(matches!(
            fx.build().unwrap_err(),
            PolicyError::GitPointerInvalid { path, .. } if path == fx.project("sub/.git")
        ));

        // A dangling hooks link whose target a command could create.
        let fx = Fixture::new();
        git_init(&fx.project(""));
        fs::remove_dir(fx.project(".git/hooks")).unwrap();
        symlink(fx.project("gone-hooks"), fx.project(".git/hooks")).unwrap();
        assert!(matches!(
            fx.build().unwrap_err(),
            PolicyError::Canonicalize { path, .. } if path == fx.project(".git/hooks")
        ));
    }

    #[test]
    fn linked_hooks_config_and_hook_files_are_protected_at_their_targets() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        fs::remove_dir(fx.project(".git/hooks")).unwrap();
        fs::remove_file(fx.project(".git/config")).unwrap();
        mkdir(&fx.project("tools/hooks"));
        write(&fx.project("scripts/pre-push"), b"#!/bin/sh\n");
        symlink("../../scripts/pre-push", fx.project("tools/hooks/pre-push")).unwrap();
        symlink("../tools/hooks", fx.project(".git/hooks")).unwrap();
        write(&fx.project("cfg/gitconfig"), b"[core]\n");
        symlink("../cfg/gitconfig", fx.project(".git/config")).unwrap();
        let policy = fx.build().unwrap();
        let (ro, _) = protected_in_project(&fx, &policy);
        assert_eq!(
            ro,
            [
                ".garuda",
                ".git",
                "cfg/gitconfig",
                "scripts/pre-push",
                "tools/hooks"
            ]
        );
    }

    #[test]
    fn a_rewritable_link_on_the_way_to_git_metadata_is_refused() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        fs::remove_dir(fx.project(".git/hooks")).unwrap();
        mkdir(&fx.project("real/hooks"));
        // `alias` lies in the project: a command could point it at a folder of its own.
        symlink("real", fx.project("alias")).unwrap();
        symlink("../alias/hooks", fx.project(".git/hooks")).unwrap();
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::SwappableLink { link, .. } if *link == fx.project("alias")),
            "{e:?}"
        );
    }

    #[test]
    fn hooks_paths_named_by_configuration_are_read_only_and_created_when_missing() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        write(
            &fx.project(".git/config"),
            b"[core]\n\thooksPath = .husky/_\n",
        );
        let policy = fx.build().unwrap();
        let created = fx.project(".husky/_");
        let meta = fs::metadata(&created).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert!(policy.read_only_paths.contains(&created));

        // From the user's global configuration, relative to every repository's top; `~/` is
        // the home, outside every writable root: nothing to do there.
        let fx = Fixture::new();
        git_init(&fx.project(""));
        git_init(&fx.project("nested"));
        write(
            &fx.home(".gitconfig"),
            b"[core]\n\thooksPath = .githooks\n[init]\n\ttemplateDir = ~/templates\n",
        );
        let policy = fx.build().unwrap();
        let (ro, _) = protected_in_project(&fx, &policy);
        assert_eq!(
            ro,
            [
                ".garuda",
                ".git",
                ".githooks",
                "nested/.git",
                "nested/.githooks"
            ]
        );
        assert!(!fx.home("templates").exists());
    }

    #[test]
    fn included_files_are_read_only_and_a_missing_one_is_refused() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        write(
            &fx.project(".git/config"),
            b"[include]\n\tpath = ../config/one.inc\n[includeIf \"onbranch:main\"]\n\tpath = ../config/two.inc\n",
        );
        // Included files include others, relative to their own folder.
        write(
            &fx.project("config/one.inc"),
            b"[include]\n\tpath = deeper/three.inc\n",
        );
        write(
            &fx.project("config/two.inc"),
            b"[core]\n\tfsmonitor = tools/fsmonitor\n",
        );
        write(
            &fx.project("config/deeper/three.inc"),
            b"[user]\n\tname = x\n",
        );
        write(&fx.project("tools/fsmonitor"), b"#!/bin/sh\n");
        let policy = fx.build().unwrap();
        let (ro, _) = protected_in_project(&fx, &policy);
        assert_eq!(
            ro,
            [
                ".garuda",
                ".git",
                "config/deeper/three.inc",
                "config/one.inc",
                "config/two.inc",
                "tools/fsmonitor"
            ]
        );

        fs::remove_file(fx.project("config/deeper/three.inc")).unwrap();
        let e = fx.build().unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(&e, PolicyError::GitConfigTargetMissing { config, line: 2, key, .. }
                if *config == fx.project(".git/../config/one.inc") && key == "include.path"),
            "{e:?}"
        );
        assert!(text.contains("three.inc"), "{text}");

        // A missing include outside every writable root: nothing can create it.
        write(
            &fx.project("config/one.inc"),
            b"[include]\n\tpath = /nonexistent/x.inc\n",
        );
        fx.build().unwrap();

        // An include loop stops at git's depth.
        write(
            &fx.project("config/one.inc"),
            b"[include]\n\tpath = one.inc\n",
        );
        assert!(matches!(
            fx.build().unwrap_err(),
            PolicyError::GitConfigIncludeDepth { .. }
        ));
    }

    #[test]
    fn include_fan_out_is_bounded() {
        // Depth alone does not bound the work: each file naming the next many times multiplies
        // the reads (ten levels of ten would never end). Counting repeats, 9 + 9 * 10 = 99
        // included files are read; 11 + 11 * 10 = 121 are refused, naming the top file.
        let fx = Fixture::new();
        git_init(&fx.project(""));
        let includes = |name: &str| format!("[include]\n\tpath = {name}\n");
        write(&fx.project("config/b.inc"), b"[user]\n\tname = x\n");
        write(
            &fx.project("config/a.inc"),
            includes("b.inc").repeat(10).as_bytes(),
        );
        write(
            &fx.project(".git/config"),
            includes("../config/a.inc").repeat(9).as_bytes(),
        );
        let policy = fx.build().unwrap();
        assert!(policy.read_only_paths.contains(&fx.project("config/b.inc")));
        write(
            &fx.project(".git/config"),
            includes("../config/a.inc").repeat(11).as_bytes(),
        );
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::GitConfigTooManyIncludes { path, limit: 100 }
                if *path == fx.project(".git/config")),
            "{e:?}"
        );
    }

    #[test]
    fn commands_named_by_configuration_are_read_only_and_a_missing_one_is_refused() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        mkdir(&fx.project(".git/worktrees/wt/logs"));
        write(&fx.project(".git/worktrees/wt/commondir"), b"../..\n");
        write(
            &fx.project(".git/worktrees/wt/HEAD"),
            b"ref: refs/heads/wt\n",
        );
        write(
            &fx.project(".git/config"),
            b"[core]\n\tsshCommand = \\\"./tools/ssh wrapper\\\" -v\n\
              [filter \"x\"]\n\tclean = sh tools/clean.sh\n[alias]\n\tst = status\n\tboom = !tools/boom\n\
              [credential]\n\thelper = store\n",
        );
        // A linked worktree's own configuration; an absolute program path.
        write(
            &fx.project(".git/worktrees/wt/config.worktree"),
            format!(
                "[core]\n\tfsmonitor = {}\n",
                fx.project("tools/fsmonitor").display()
            )
            .as_bytes(),
        );
        for tool in [
            "tools/ssh wrapper",
            "tools/clean.sh",
            "tools/boom",
            "tools/fsmonitor",
        ] {
            write(&fx.project(tool), b"#!/bin/sh\n");
        }
        let policy = fx.build().unwrap();
        let (ro, holes) = protected_in_project(&fx, &policy);
        assert_eq!(
            ro,
            [
                ".garuda",
                ".git",
                "tools/boom",
                "tools/clean.sh",
                "tools/fsmonitor",
                "tools/ssh wrapper"
            ]
        );
        assert!(holes.contains(&".git/worktrees/wt/logs".to_string()));

        fs::remove_file(fx.project("tools/fsmonitor")).unwrap();
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::GitConfigTargetMissing { config, line: 2, key, .. }
                if *config == fx.project(".git/worktrees/wt/config.worktree") && key == "core.fsmonitor"),
            "{e:?}"
        );
    }

    #[test]
    fn a_worktree_named_through_a_rewritable_link_is_refused() {
        // `core.worktree` is where git runs, and relative programs are found from there.
        let fx = Fixture::new();
        git_init(&fx.project(""));
        // (Relative to every top: the folder holding `.git` too.)
        write(&fx.project("tools/fsmonitor"), b"#!/bin/sh\n");
        write(&fx.project("real-wt/tools/fsmonitor"), b"#!/bin/sh\n");
        write(
            &fx.project(".git/config"),
            b"[core]\n\tworktree = ../real-wt\n\tfsmonitor = tools/fsmonitor\n",
        );
        let policy = fx.build().unwrap();
        assert!(policy
            .read_only_paths
            .contains(&fx.project("real-wt/tools/fsmonitor")));
        // Through a link in the project, a command could point git at a folder of its own,
        // with a `tools/fsmonitor` of its own.
        symlink("real-wt", fx.project("wt-link")).unwrap();
        write(
            &fx.project(".git/config"),
            b"[core]\n\tworktree = ../wt-link\n\tfsmonitor = tools/fsmonitor\n",
        );
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::SwappableLink { link, .. } if *link == fx.project("wt-link")),
            "{e:?}"
        );
    }

    #[test]
    fn a_nul_byte_ends_a_configuration_value_as_in_git() {
        // git runs `sh tools/pager.sh`: what follows the NUL is not part of the value, and must
        // not hide the argument from the protection.
        let fx = Fixture::new();
        git_init(&fx.project(""));
        write(&fx.project("tools/pager.sh"), b"#!/bin/sh\n");
        write(
            &fx.project(".git/config"),
            b"[core]\n\tpager = sh tools/pager.sh\0junk\n",
        );
        let policy = fx.build().unwrap();
        assert!(policy
            .read_only_paths
            .contains(&fx.project("tools/pager.sh")));
    }

    #[test]
    fn the_repository_holding_the_project_is_read_too() {
        let fx = Fixture::new();
        // The project is `repo/app`; the repository's config names a folder in it.
        let repo = fx.at("repo");
        git_init(&repo);
        write(
            &repo.join(".git/config"),
            b"[core]\n\thooksPath = app/hooks\n",
        );
        mkdir(&repo.join("app"));
        let policy = build_exec_policy(&repo.join("app"), &fx.settings, &fx.host).unwrap();
        assert!(policy.read_only_paths.contains(&repo.join("app/hooks")));
        assert!(repo.join("app/hooks").is_dir());
        // The repository's own `.git` is outside the writable roots: not listed.
        assert!(!policy.read_only_paths.contains(&repo.join(".git")));
        // A project with a `.git` of its own is not looked above (git stops there): a broken
        // configuration up there does not matter.
        write(&repo.join(".git/config"), b"[core\n");
        assert!(build_exec_policy(&repo.join("app"), &fx.settings, &fx.host).is_err());
        git_init(&repo.join("app"));
        build_exec_policy(&repo.join("app"), &fx.settings, &fx.host).unwrap();
    }

    #[test]
    fn unparsable_git_configuration_is_an_error_with_file_and_line() {
        let fx = Fixture::new();
        git_init(&fx.project(""));
        write(
            &fx.project(".git/config"),
            b"[core]\n\thooksPath = \"open\n",
        );
        let e = fx.build().unwrap_err();
        assert!(
            matches!(&e, PolicyError::GitConfigInvalid { path, line: 2, .. } if *path == fx.project(".git/config")),
            "{e:?}"
        );
        assert!(e.to_string().contains(".git/config:2:"), "{e}");
    }

    #[test]
    fn symlinked_project_root_is_canonicalized() {
        let fx = Fixture::new();
        symlink(fx.at("project"), fx.at("link")).unwrap();
        git_init(&fx.project(""));
        let policy =
            build_exec_policy(&fx.tmp.path().join("link"), &fx.settings, &fx.host).unwrap();
        assert_eq!(policy.project_root, fx.project(""));
        assert_eq!(policy.writable_roots, [fx.project("")]);
        assert!(policy.read_only_paths.contains(&fx.project(".git")));
        assert!(policy
            .read_only_paths
            .iter()
            .chain(&policy.writable_roots)
            .all(|p| !p.starts_with(fx.at("link"))));
    }

    #[test]
    fn project_root_must_be_a_directory_below_home() {
        let fx = Fixture::new();
        write(&fx.at("file"), b"");
        assert!(matches!(
            build_exec_policy(&fx.at("file"), &fx.settings, &fx.host),
            Err(PolicyError::ProjectRootNotDirectory { .. })
        ));
        assert!(matches!(
            build_exec_policy(&fx.at("missing"), &fx.settings, &fx.host),
            Err(PolicyError::Canonicalize { .. })
        ));
        for root in [fx.home(""), fx.at("")] {
            assert!(matches!(
                build_exec_policy(&root, &fx.settings, &fx.host),
                Err(PolicyError::ProjectRootTooBroad { .. })
            ));
        }
    }

    #[test]
    fn existing_caches_are_writable() {
        let fx = Fixture::new();
        mkdir(&fx.home(".cargo/registry"));
        mkdir(&fx.home(".npm"));
        mkdir(&fx.home("go/pkg/mod"));
        let policy = fx.build().unwrap();
        assert_eq!(
            policy.writable_roots,
            [
                fx.home(".cargo/registry"),
                fx.home(".npm"),
                fx.home("go/pkg/mod"),
                fx.project(""),
            ]
        );
    }

    #[test]
    fn cache_linked_to_home_is_refused() {
        let fx = Fixture::new();
        symlink(fx.home(""), fx.home(".cache")).unwrap();
        assert!(matches!(fx.build(), Err(PolicyError::CacheTooBroad { .. })));
    }

    #[test]
    fn extra_writable_is_listed_when_safe() {
        let mut fx = Fixture::new();
        mkdir(&fx.home(".cache/mytool"));
        fx.allow_writable(fx.home(".cache/mytool"));
        let policy = fx.build().unwrap();
        assert!(policy.writable_roots.contains(&fx.home(".cache/mytool")));
    }

    #[test]
    fn extra_writable_of_home_or_its_ancestors_is_refused() {
        for entry in ["home", "", "/"] {
            let mut fx = Fixture::new();
            let path = if entry == "/" {
                PathBuf::from("/")
            } else {
                fx.at(entry)
            };
            fx.allow_writable(path);
            match fx.build().unwrap_err() {
                PolicyError::WritableTooBroad { origin, .. } => {
                    assert_eq!(origin.kind, SourceKind::User);
                }
                other => panic!("{entry:?}: expected too broad, got {other:?}"),
            }
        }
        // Through a link, too.
        let mut fx = Fixture::new();
        symlink(fx.home(""), fx.at("alias")).unwrap();
        fx.allow_writable(fx.at("alias"));
        assert!(matches!(
            fx.build(),
            Err(PolicyError::WritableTooBroad { .. })
        ));
    }

    #[test]
    fn extra_writable_overlapping_a_secret_is_refused() {
        let mut fx = Fixture::new();
        mkdir(&fx.home(".ssh"));
        mkdir(&fx.home("dot"));
        symlink(fx.home(".ssh"), fx.home("dot/ssh")).unwrap();
        fx.allow_writable(fx.home(".ssh"));
        assert!(matches!(
            fx.build(),
            Err(PolicyError::WritableExposesSecret { secret, .. }) if secret == fx.home(".ssh")
        ));

        // Inside a secret.
        let mut fx = Fixture::new();
        mkdir(&fx.home(".aws/sso"));
        fx.allow_writable(fx.home(".aws/sso"));
        assert!(matches!(
            fx.build(),
            Err(PolicyError::WritableExposesSecret { .. })
        ));

        // Containing the project's `.env`.
        let mut fx = Fixture::new();
        write(&fx.project("build/.env"), b"A=1");
        fx.allow_writable(fx.project("build"));
        assert!(matches!(
            fx.build(),
            Err(PolicyError::WritableExposesSecret { secret, .. })
                if secret == fx.project("build/.env")
        ));
    }

    #[test]
    fn missing_extra_writable_is_skipped_with_a_notice_outside_strict() {
        let mut fx = Fixture::new();
        let missing = fx.home(".cache/nothing");
        fx.allow_writable(missing.clone());
        let origin = fx.origin(SourceKind::User);
        let (policy, notices) =
            build_exec_policy_noting(&fx.tmp.path().join("project"), &fx.settings, &fx.host)
                .unwrap();
        // Not a writable root: nothing is bound there, so a link planted at the path before
        // the mounts is never followed.
        assert!(!policy.is_under_writable_root(&missing));
        assert_eq!(
            notices,
            [PolicyNotice::WritableSkipped {
                path: missing.clone(),
                origin: origin.clone()
            }]
        );
        assert_eq!(
            notices[0].to_string(),
            format!(
                "notice: writable path {} (sandbox.writable, {origin}) does not exist, so it is \
                 skipped and nothing is made writable for it: create it to make it writable, or \
                 remove the entry",
                missing.display()
            )
        );
        // The check of `garuda policy` says the same, and changes nothing.
        assert_eq!(check_writable(&fx.settings, &fx.host).unwrap(), notices);
        assert!(!missing.exists());
        // Control: once the folder exists it is writable and nothing is said.
        mkdir(&missing);
        let (policy, notices) =
            build_exec_policy_noting(&fx.tmp.path().join("project"), &fx.settings, &fx.host)
                .unwrap();
        assert!(policy.writable_roots.contains(&missing));
        assert!(notices.is_empty());
        assert!(check_writable(&fx.settings, &fx.host).unwrap().is_empty());
    }

    #[test]
    fn missing_extra_writable_is_an_error_under_strict() {
        let mut fx = Fixture::new();
        let missing = fx.home(".cache/nothing");
        fx.allow_writable(missing.clone());
        fx.settings.profile = crate::Profile::Strict;
        fx.settings.profile_origin = Some(Origin::flag("--strict"));
        let want = format!(
            "writable path {} (sandbox.writable, {}) does not exist, and the strict profile \
             (command-line flag --strict) does not skip a missing writable path: create it, or \
             remove the entry",
            missing.display(),
            fx.origin(SourceKind::User)
        );
        let err = fx.build().unwrap_err();
        assert!(matches!(err, PolicyError::WritableMissing { .. }), "{err}");
        assert_eq!(err.to_string(), want);
        assert_eq!(
            check_writable(&fx.settings, &fx.host)
                .unwrap_err()
                .to_string(),
            want
        );
        // Control: the same entry existing builds under strict.
        mkdir(&missing);
        assert!(fx.build().unwrap().writable_roots.contains(&missing));
    }

    #[test]
    fn a_dangling_writable_link_is_refused_even_outside_strict() {
        let mut fx = Fixture::new();
        mkdir(&fx.home(".cache"));
        symlink(fx.at("later"), fx.home(".cache/tool")).unwrap();
        fx.allow_writable(fx.home(".cache/tool"));
        for err in [
            fx.build().unwrap_err(),
            check_writable(&fx.settings, &fx.host).unwrap_err(),
        ] {
            match err {
                PolicyError::WritableDanglingLink { target, .. } => {
                    assert_eq!(target, fx.at("later"))
                }
                other => panic!("{other}"),
            }
        }
        // Control: with its target made, the link resolves to it.
        mkdir(&fx.at("later"));
        assert!(fx.build().unwrap().writable_roots.contains(&fx.at("later")));
    }

    #[test]
    fn too_broad_and_secret_entries_are_refused_by_the_check_too() {
        let mut fx = Fixture::new();
        mkdir(&fx.home(".ssh"));
        fx.allow_writable(fx.home(""));
        assert!(matches!(
            check_writable(&fx.settings, &fx.host),
            Err(PolicyError::WritableTooBroad { .. })
        ));
        fx.settings.extra_writable.clear();
        fx.allow_writable(fx.home(".ssh"));
        assert!(matches!(
            check_writable(&fx.settings, &fx.host),
            Err(PolicyError::WritableExposesSecret { .. })
        ));
        // Garuda's home, not made yet: where it will be is enough.
        fx.settings.extra_writable.clear();
        mkdir(&fx.home(".config"));
        fx.host.garuda_home = fx.home(".config/garuda");
        fx.allow_writable(fx.home(".config"));
        assert!(matches!(
            check_writable(&fx.settings, &fx.host),
            Err(PolicyError::WritableExposesSecret { secret, .. }) if secret == fx.home(".config/garuda")
        ));
        assert!(
            !fx.home(".config/garuda").exists(),
            "the check creates nothing"
        );
    }

    #[test]
    fn tmp_itself_dev_and_proc_are_refused_as_project_or_writable() {
        let mut fx = Fixture::new();
        for path in ["/tmp", "/dev/shm", "/proc/self"] {
            fx.settings.extra_writable.clear();
            fx.allow_writable(PathBuf::from(path));
            let err = check_writable(&fx.settings, &fx.host).unwrap_err();
            assert!(
                matches!(err, PolicyError::WritableReplaced { .. }),
                "{path}: {err}"
            );
        }
        fx.settings.extra_writable.clear();
        let err = build_exec_policy(Path::new("/tmp"), &fx.settings, &fx.host).unwrap_err();
        assert_eq!(
            err.to_string(),
            "project root /tmp is refused: every sandbox gives commands a private, empty /tmp, \
             and sharing the host's whole /tmp would hand them every other program's temporary \
             files and sockets (the X server's among them); a folder under /tmp is shared at its \
             own path; put the project in a folder of its own (mkdir /tmp/proj) and run there, or \
             pass --project DIR"
        );
        assert!(matches!(
            build_exec_policy(Path::new("/dev/shm"), &fx.settings, &fx.host),
            Err(PolicyError::ProjectRootReplaced { .. })
        ));
        // Control: a folder under /tmp is a project like any other, and a writable path.
        let under = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let under_path = under.path().canonicalize().unwrap();
        assert!(under_path.starts_with("/tmp"));
        let policy = build_exec_policy(&under_path, &fx.settings, &fx.host).unwrap();
        assert_eq!(policy.project_root, under_path);
        fx.allow_writable(under_path.clone());
        assert!(fx.build().unwrap().writable_roots.contains(&under_path));
    }

    #[test]
    fn hidden_dirs_include_the_runtime_dir() {
        let mut fx = Fixture::new();
        mkdir(&fx.at("xdg"));
        fx.host.xdg_runtime_dir = Some(fx.at("xdg"));
        let policy = fx.build().unwrap();
        assert!(policy.hidden_dirs.contains(&fx.at("xdg")));
        let mut sorted = policy.hidden_dirs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(policy.hidden_dirs, sorted);
        assert!(policy.hidden_dirs.iter().all(|d| d.is_dir()));

        fx.host.xdg_runtime_dir = Some(fx.at("no-such-dir"));
        assert!(!fx
            .build()
            .unwrap()
            .hidden_dirs
            .contains(&fx.at("no-such-dir")));
    }

    #[test]
    fn environment_is_filtered() {
        let mut fx = Fixture::new();
        for (k, v) in [
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("GITHUB_TOKEN", "ghp"),
            ("OPENAI_API_KEY", "sk"),
            ("SSH_AUTH_SOCK", "/nonexistent/agent"),
            ("DISPLAY", ":0"),
            ("LC_ALL", "C.UTF-8"),
            ("NPM_TOKEN", "npm"),
            ("TMPDIR", "/var/tmp/host"),
        ] {
            fx.host.vars.push((k.into(), v.into()));
        }
        let names = |policy: &ExecPolicy| -> Vec<String> {
            policy
                .env
                .iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect()
        };
        let policy = fx.build().unwrap();
        assert_eq!(names(&policy), ["HOME", "LC_ALL", "PATH", "TMPDIR"]);
        assert!(policy
            .env
            .contains(&(OsString::from("TMPDIR"), OsString::from("/tmp"))));

        let origin = fx.origin(SourceKind::User);
        fx.settings.env_allow.push(("NPM_TOKEN".into(), origin));
        let policy = fx.build().unwrap();
        assert_eq!(
            names(&policy),
            ["HOME", "LC_ALL", "NPM_TOKEN", "PATH", "TMPDIR"]
        );
    }
}
