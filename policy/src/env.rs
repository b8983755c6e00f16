//! The environment a command inherits: an allowlist, never a denylist.

use std::ffi::OsString;

/// Variables a command inherits by default (plus every `LC_*`), unless the name looks like a
/// credential (contains `KEY`, `TOKEN`, `SECRET`, `PASSWORD`, `PASSWD` or `CREDENTIAL`) or
/// leads to one (`SSH_AUTH_SOCK`, the session bus, the display). Everything else in the supervisor's environment stays
/// behind: a new variable on the host is not exposed until someone lists it.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "TZ",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOFLAGS",
    "JAVA_HOME",
    "NODE_PATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CI",
    "NO_COLOR",
    "FORCE_COLOR",
];

/// The model providers' own variables: their keys and the base URLs the keys are sent to.
/// Never inherited, **even when `env.allow` names one**: the supervisor reads them for the
/// agent's model and hands the key to the agent alone, so a command (or a settings file that
/// lists one) must not get it. Compared without regard to case. The provider table
/// (`supervisor/src/models.rs`) checks that every built-in provider's variables are here; a
/// provider added in `models.json` has its variables removed by the supervisor before any
/// child starts.
pub const PROVIDER_ENV_DENY: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "OPENROUTER_API_KEY",
    "OPENROUTER_BASE_URL",
];

/// Substrings (compared case-insensitively) that mark a name as a credential.
const CREDENTIAL_WORDS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Names that carry no secret themselves but lead to one: the ssh agent signs as the user, and
/// the session bus and display servers accept commands (keystrokes, screenshots, keyrings).
const CAPABILITY_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
];

/// The value `TMPDIR` always has: every Linux executor gives the command a private `/tmp`,
/// and the host's `TMPDIR` may point into a directory the command cannot write.
const COMMAND_TMPDIR: &str = "/tmp";

/// Decides whether the command inherits the variable `name`.
///
/// A provider's key or base URL ([`PROVIDER_ENV_DENY`]) is never inherited. Otherwise a name
/// listed exactly in `allow` (`env.allow` of the managed or user settings) is always
/// inherited: someone trusted named it on purpose. Otherwise a name that looks like a
/// credential or a capability is dropped even when the default table lists it, so a
/// `CARGO_REGISTRY_TOKEN` or `PYTHONPATH_KEY` never leaks by pattern.
fn env_var_allowed(name: &str, allow: &[String]) -> bool {
    // Before the allowlist: a model key must not reach a command whoever listed it.
    if PROVIDER_ENV_DENY
        .iter()
        .any(|denied| denied.eq_ignore_ascii_case(name))
    {
        return false;
    }
    if allow.iter().any(|allowed| allowed == name) {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    if CREDENTIAL_WORDS.iter().any(|word| upper.contains(word)) || CAPABILITY_NAMES.contains(&name)
    {
        return false;
    }
    DEFAULT_ENV_ALLOW.contains(&name) || name.starts_with("LC_")
}

/// The complete environment of a command, sorted by name, with `TMPDIR=/tmp`.
pub(crate) fn command_env(
    vars: &[(OsString, OsString)],
    allow: &[String],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vars
        .iter()
        .filter(|(name, _)| {
            // A name that is not UTF-8 cannot match the allowlist; dropping it is the safe
            // reading.
            name.to_str()
                .is_some_and(|name| name != "TMPDIR" && env_var_allowed(name, allow))
        })
        .cloned()
        .collect();
    env.push((OsString::from("TMPDIR"), OsString::from(COMMAND_TMPDIR)));
    // Stable sort keeps the first of duplicate names, as `getenv` would.
    env.sort_by(|a, b| a.0.cmp(&b.0));
    env.dedup_by(|later, earlier| later.0 == earlier.0);
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_allowed_table() {
        let none: &[String] = &[];
        let npm = &["NPM_TOKEN".to_string()][..];
        let display = &["DISPLAY".to_string()][..];
        #[rustfmt::skip]
        let table: &[(&str, &[String], bool)] = &[
            // Defaults.
            ("PATH", none, true),
            ("HOME", none, true),
            ("LANG", none, true),
            ("LC_ALL", none, true),
            ("LC_CTYPE", none, true),
            ("CARGO_HOME", none, true),
            ("CI", none, true),
            // Not listed.
            ("LD_PRELOAD", none, false),
            ("GIT_DIR", none, false),
            ("HTTPS_PROXY", none, false),
            ("TMPDIR", none, false),
            ("path", none, false),
            ("LC", none, false),
            // Credentials by pattern, in any case.
            ("AWS_SECRET_ACCESS_KEY", none, false),
            ("AWS_ACCESS_KEY_ID", none, false),
            ("GITHUB_TOKEN", none, false),
            ("OPENAI_API_KEY", none, false),
            ("ANTHROPIC_API_KEY", none, false),
            ("PGPASSWORD", none, false),
            ("MYSQL_PASSWD", none, false),
            ("GOOGLE_APPLICATION_CREDENTIALS", none, false),
            ("npm_config__auth_token", none, false),
            ("LC_SECRET", none, false),
            // Capabilities.
            ("SSH_AUTH_SOCK", none, false),
            ("DBUS_SESSION_BUS_ADDRESS", none, false),
            ("DISPLAY", none, false),
            ("WAYLAND_DISPLAY", none, false),
            ("XAUTHORITY", none, false),
            // Named exactly in env.allow wins over the patterns; nothing else does.
            ("NPM_TOKEN", none, false),
            ("NPM_TOKEN", npm, true),
            ("npm_token", npm, false),
            ("NPM_TOKEN_2", npm, false),
            ("GITHUB_TOKEN", npm, false),
            ("DISPLAY", display, true),
        ];
        for (name, allow, want) in table {
            assert_eq!(
                env_var_allowed(name, allow),
                *want,
                "{name} with allow {allow:?}"
            );
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn command_env_filters_sorts_and_sets_tmpdir() {
        let host = vars(&[
            ("PATH", "/usr/bin"),
            ("TMPDIR", "/var/folders/xyz"),
            ("NPM_TOKEN", "npm_abc"),
            ("GITHUB_TOKEN", "ghp_abc"),
            ("LC_ALL", "C.UTF-8"),
            ("HOME", "/home/u"),
            ("PATH", "/second"),
        ]);
        let got = command_env(&host, &[]);
        assert_eq!(
            got,
            vars(&[
                ("HOME", "/home/u"),
                ("LC_ALL", "C.UTF-8"),
                ("PATH", "/usr/bin"),
                ("TMPDIR", "/tmp"),
            ])
        );
        let got = command_env(&host, &["NPM_TOKEN".to_string(), "TMPDIR".to_string()]);
        assert!(got.contains(&(OsString::from("NPM_TOKEN"), OsString::from("npm_abc"))));
        assert!(got.contains(&(OsString::from("TMPDIR"), OsString::from("/tmp"))));
        assert_eq!(got.iter().filter(|(k, _)| k == "TMPDIR").count(), 1);
    }

    /// A provider's key or base URL never passes, even when `env.allow` names it exactly
    /// (in any case). Negative control: another credential named the same way does pass, so
    /// the refusal is the deny list's and not the credential pattern's.
    #[test]
    fn provider_variables_never_pass_even_when_allowed() {
        for name in PROVIDER_ENV_DENY {
            let lower = name.to_ascii_lowercase();
            for spelled in [name.to_string(), lower] {
                let allow = vec![spelled.clone()];
                assert!(!env_var_allowed(&spelled, &allow), "{spelled} allowed");
                let host = vars(&[(spelled.as_str(), "sk-ant-api03-not-a-real-key-0123456789")]);
                let got = command_env(&host, &allow);
                assert_eq!(got, vars(&[("TMPDIR", "/tmp")]), "{spelled}");
            }
        }
        // The base URLs carry no credential pattern: only the deny list stops them.
        assert!(!env_var_allowed(
            "OPENAI_BASE_URL",
            &["OPENAI_BASE_URL".to_string()]
        ));
        // Negative control: the allowlist still wins for a credential outside the list.
        let allow = vec!["NPM_TOKEN".to_string(), "MY_BASE_URL".to_string()];
        assert!(env_var_allowed("NPM_TOKEN", &allow));
        assert!(env_var_allowed("MY_BASE_URL", &allow));
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_names_are_dropped() {
        use std::os::unix::ffi::OsStringExt;
        let name = OsString::from_vec(b"PATH\xff".to_vec());
        let got = command_env(&[(name, OsString::from("x"))], &[]);
        assert_eq!(got, vars(&[("TMPDIR", "/tmp")]));
    }
}
