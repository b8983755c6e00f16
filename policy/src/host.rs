//! The parts of the supervisor's own environment that the policy depends on.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;

use crate::error::PolicyError;

/// Where git keeps the system's configuration (its default `--system` file).
const SYSTEM_GIT_CONFIG: &str = "/etc/gitconfig";

/// The host facts a policy is built from, captured once so that tests can build one by hand
/// and never depend on the real home directory.
#[derive(Clone, PartialEq, Eq)]
pub struct HostEnv {
    /// `$HOME`, absolute.
    pub home: PathBuf,
    /// `$GARUDA_HOME`, or `$HOME/.garuda`: user policy, audit keys, staging.
    pub garuda_home: PathBuf,
    /// `$XDG_RUNTIME_DIR` when set to an absolute path.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The supervisor's whole environment; the command gets only the allowed part of it.
    pub vars: Vec<(OsString, OsString)>,
    /// Existing machine secrets outside the home directory (`/etc/shadow`, SSH host keys):
    /// filled by [`HostEnv::from_process`] from [`crate::sensitive::SYSTEM_SECRETS`]; empty
    /// for a host built by hand.
    pub system_secrets: Vec<PathBuf>,
    /// The system's git configuration files (`/etc/gitconfig`, and `$GIT_CONFIG_SYSTEM` when
    /// set to an absolute path): filled by [`HostEnv::from_process`]; empty for a host built
    /// by hand. The user's are derived from the variables ([`HostEnv::git_config_files`]).
    pub git_system_configs: Vec<PathBuf>,
}

impl HostEnv {
    /// Captures the current process's environment (see [`HostEnv::from_vars`]).
    pub fn from_process() -> Result<HostEnv, PolicyError> {
        let mut host = HostEnv::from_vars(std::env::vars_os().collect())?;
        host.system_secrets = crate::sensitive::SYSTEM_SECRETS
            .iter()
            .map(|(path, _)| PathBuf::from(path))
            .filter(|p| p.symlink_metadata().is_ok())
            .collect();
        host.git_system_configs = std::iter::once(PathBuf::from(SYSTEM_GIT_CONFIG))
            .chain(host.absolute_var("GIT_CONFIG_SYSTEM"))
            .collect();
        Ok(host)
    }

    /// Builds a host description from an environment: `HOME` must be set and absolute;
    /// `GARUDA_HOME`, when set, must be absolute; a relative `XDG_RUNTIME_DIR` is ignored, as
    /// the XDG base directory specification requires.
    pub fn from_vars(vars: Vec<(OsString, OsString)>) -> Result<HostEnv, PolicyError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| PathBuf::from(v))
                .filter(|v| !v.as_os_str().is_empty())
        };
        // Secrets are found relative to HOME; guessing it (or using the cwd) could hide the
        // wrong directory and expose the real ~/.ssh.
        let home = lookup("HOME").ok_or(PolicyError::HomeUnset)?;
        if !home.is_absolute() {
            return Err(PolicyError::HomeNotAbsolute { value: home });
        }
        let garuda_home = match lookup("GARUDA_HOME") {
            Some(dir) if dir.is_absolute() => dir,
            Some(dir) => return Err(PolicyError::GarudaHomeNotAbsolute { value: dir }),
            None => home.join(".garuda"),
        };
        let xdg_runtime_dir = lookup("XDG_RUNTIME_DIR").filter(|dir| dir.is_absolute());
        Ok(HostEnv {
            home,
            garuda_home,
            xdg_runtime_dir,
            vars,
            system_secrets: Vec::new(),
            git_system_configs: Vec::new(),
        })
    }

    /// The git configuration files git reads besides a repository's own, every one of them
    /// (whichever variables would make git skip some: listing more only protects more):
    /// `$GIT_CONFIG_GLOBAL`, `$XDG_CONFIG_HOME/git/config` (or `~/.config/git/config`),
    /// `~/.gitconfig`, then [`HostEnv::git_system_configs`]. Relative values are ignored.
    pub fn git_config_files(&self) -> Vec<PathBuf> {
        let xdg = self
            .absolute_var("XDG_CONFIG_HOME")
            .unwrap_or_else(|| self.home.join(".config"));
        self.absolute_var("GIT_CONFIG_GLOBAL")
            .into_iter()
            .chain([xdg.join("git/config"), self.home.join(".gitconfig")])
            .chain(self.git_system_configs.iter().cloned())
            .collect()
    }

    /// The value of `name` as a path, when it is absolute.
    fn absolute_var(&self, name: &str) -> Option<PathBuf> {
        self.var(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }

    /// The value of the first variable called `name`.
    pub fn var(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }
}

/// Prints variable names only: the values hold tokens that must not reach a log.
impl fmt::Debug for HostEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&OsStr> = self.vars.iter().map(|(k, _)| k.as_os_str()).collect();
        f.debug_struct("HostEnv")
            .field("home", &self.home)
            .field("garuda_home", &self.garuda_home)
            .field("xdg_runtime_dir", &self.xdg_runtime_dir)
            .field("var_names", &names)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn home_is_required_and_absolute() {
        assert!(matches!(
            HostEnv::from_vars(vars(&[("PATH", "/bin")])),
            Err(PolicyError::HomeUnset)
        ));
        assert!(matches!(
            HostEnv::from_vars(vars(&[("HOME", "")])),
            Err(PolicyError::HomeUnset)
        ));
        assert!(matches!(
            HostEnv::from_vars(vars(&[("HOME", "relative/home")])),
            Err(PolicyError::HomeNotAbsolute { value }) if value == Path::new("relative/home")
        ));
    }

    #[test]
    fn garuda_home_defaults_under_home_and_must_be_absolute() {
        let host = HostEnv::from_vars(vars(&[("HOME", "/h/u")])).unwrap();
        assert_eq!(host.garuda_home, PathBuf::from("/h/u/.garuda"));
        assert_eq!(host.xdg_runtime_dir, None);

        let host = HostEnv::from_vars(vars(&[("HOME", "/h/u"), ("GARUDA_HOME", "/srv/g")]));
        assert_eq!(host.unwrap().garuda_home, PathBuf::from("/srv/g"));

        let err = HostEnv::from_vars(vars(&[("HOME", "/h/u"), ("GARUDA_HOME", "g")]));
        assert!(matches!(
            err,
            Err(PolicyError::GarudaHomeNotAbsolute { .. })
        ));
    }

    #[test]
    fn relative_xdg_runtime_dir_is_ignored() {
        let host =
            HostEnv::from_vars(vars(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "run/user")])).unwrap();
        assert_eq!(host.xdg_runtime_dir, None);
        let host = HostEnv::from_vars(vars(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/run/user/7")]))
            .unwrap();
        assert_eq!(host.xdg_runtime_dir, Some(PathBuf::from("/run/user/7")));
        assert_eq!(host.var("XDG_RUNTIME_DIR"), Some(OsStr::new("/run/user/7")));
    }

    #[test]
    fn debug_hides_values() {
        let host = HostEnv::from_vars(vars(&[("HOME", "/h"), ("GITHUB_TOKEN", "ghp_very_secret")]))
            .unwrap();
        let shown = format!("{host:?}");
        assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
        assert!(!shown.contains("ghp_very_secret"), "{shown}");
    }
}
