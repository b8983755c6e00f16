//! Names of files that hold secrets. A command that writes one is always named in the
//! summary, even when git ignores it, because a planted `.npmrc` or a swapped key is exactly
//! the change a user must not miss, and because ignored files are otherwise shown only as a
//! count.

use std::ffi::OsStr;

use garuda_policy::is_env_file_name;

/// True for a file name that usually holds credentials: `.env`, `.env.*`, `*.pem`, `*.key`,
/// `id_rsa*`, `id_ed25519*`, `id_ecdsa*`, `*.p12`, `*.pfx`, `credentials*`, `.npmrc`,
/// `.netrc`. Extensions are matched without regard to case (`KEY.PEM`).
pub fn is_sensitive_name(name: &str) -> bool {
    if is_env_file_name(OsStr::new(name)) {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    [".pem", ".key", ".p12", ".pfx"]
        .iter()
        .any(|ext| lower.ends_with(ext))
        || ["id_rsa", "id_ed25519", "id_ecdsa", "credentials"]
            .iter()
            .any(|p| name.starts_with(p))
        || name == ".npmrc"
        || name == ".netrc"
}

/// True for a project-relative path whose file name is sensitive, or that lies inside a
/// `.env` / `.env.*` folder.
pub fn is_sensitive_path(rel: &str) -> bool {
    let mut parts = rel.rsplit('/');
    let name = parts.next().unwrap_or_default();
    is_sensitive_name(name) || parts.any(|c| is_env_file_name(OsStr::new(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_table() {
        for (path, want) in [
            (".env", true),
            (".env.local", true),
            ("config/.env.production", true),
            (".env/secret", true),
            ("server.pem", true),
            ("certs/SERVER.PEM", true),
            ("tls.key", true),
            ("id_rsa", true),
            ("id_rsa.pub", true),
            (".ssh/id_ed25519", true),
            ("id_ecdsa_sk", true),
            ("store.p12", true),
            ("store.pfx", true),
            ("credentials", true),
            ("credentials.json", true),
            (".npmrc", true),
            ("sub/.netrc", true),
            (".envrc", false),
            ("environment.rs", false),
            ("src/main.rs", false),
            ("keys.rs", false),
            ("key", false),
            ("my_credentials", false),
            ("README.md", false),
            (".npmrc.bak", false),
            ("pem", false),
        ] {
            assert_eq!(is_sensitive_path(path), want, "{path}");
        }
    }
}
