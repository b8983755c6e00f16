//! Files that hold secrets. A command that writes one is always named in the summary, even
//! when git ignores it, because a planted `.npmrc` or a swapped key is exactly the change a
//! user must not miss, and because ignored files are otherwise shown only as a count. The
//! change list never prints their content (only size and SHA-256), and applying a change to
//! one needs an opt-in of its own ([`crate::Guard::Sensitive`]).
//!
//! The `.env` family is the policy's own test ([`garuda_policy::is_env_file_name`], the one
//! that makes those files unreadable in the sandbox); the rest of [`SECRET_NAMES`] adds the
//! key and token files that staging also treats as secrets. Names are compared folded
//! ([`fold_name`]: case, invisible characters, trailing dots and spaces) and as vfat short
//! names, as `.garuda` is, so `.ENV` on a case-insensitive project is no way around the
//! question.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use garuda_policy::is_env_file_name;
use sha2::{Digest, Sha256};

use crate::changes::Change;
use crate::rules::{fold_name, vfat_short_name};

/// How one entry of [`SECRET_NAMES`] matches a folded file name.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// `.env` and `.env.*`: [`garuda_policy::is_env_file_name`]. Its vfat short names start
    /// with `env` (`ENV~1`, `ENV~1.LOC`, `ENVPRO~1.LOC`).
    Dotenv,
    /// The name ends with this extension.
    Extension(&'static str),
    /// The name starts with this.
    Prefix(&'static str),
    /// The name is exactly this.
    Exact(&'static str),
}

/// The names staging treats as secrets (folded: compared in lower case).
const SECRET_NAMES: &[Pattern] = &[
    Pattern::Dotenv,
    Pattern::Extension(".pem"),
    Pattern::Extension(".key"),
    Pattern::Extension(".p12"),
    Pattern::Extension(".pfx"),
    Pattern::Prefix("id_rsa"),
    Pattern::Prefix("id_ed25519"),
    Pattern::Prefix("id_ecdsa"),
    Pattern::Prefix("credentials"),
    Pattern::Exact(".npmrc"),
    Pattern::Exact(".netrc"),
];

impl Pattern {
    fn matches(self, folded: &str) -> bool {
        match self {
            Pattern::Dotenv => is_env_file_name(OsStr::new(folded)),
            Pattern::Extension(ext) => folded.ends_with(ext),
            Pattern::Prefix(p) => folded.starts_with(p),
            Pattern::Exact(n) => folded == n,
        }
    }

    /// True when vfat may have made the short name `stem~N[.ext]` for a name this pattern
    /// matches: the stem is the long name's first six characters without dots or spaces, and
    /// an extension (three characters, like the ones listed) is kept, so `Extension` needs
    /// nothing here. A false match only asks one question more.
    fn matches_short_stem(self, stem: &str) -> bool {
        let start = match self {
            Pattern::Dotenv => "env",
            Pattern::Prefix(p) | Pattern::Exact(p) => p.trim_start_matches('.'),
            Pattern::Extension(_) => return false,
        };
        stem.starts_with(start.get(..6).unwrap_or(start))
    }
}

/// True for a file name that usually holds credentials: `.env`, `.env.*`, `*.pem`, `*.key`,
/// `*.p12`, `*.pfx`, `id_rsa*`, `id_ed25519*`, `id_ecdsa*`, `credentials*`, `.npmrc`,
/// `.netrc`; compared without regard to ASCII case, invisible characters, trailing dots and
/// spaces, and by vfat short name (`ENV~1`), since some filesystem opens the secret by each.
pub fn is_sensitive_name(name: &str) -> bool {
    let folded = fold_name(name);
    SECRET_NAMES.iter().any(|p| p.matches(&folded))
        || vfat_short_name(&folded)
            .is_some_and(|(stem, _)| SECRET_NAMES.iter().any(|p| p.matches_short_stem(stem)))
}

/// True for a name that opens a `.env` / `.env.*` file or folder on some filesystem (see
/// [`is_sensitive_name`] for the folding).
fn is_env_name(name: &str) -> bool {
    let folded = fold_name(name);
    Pattern::Dotenv.matches(&folded)
        || vfat_short_name(&folded)
            .is_some_and(|(stem, _)| Pattern::Dotenv.matches_short_stem(stem))
}

/// True for a project-relative path whose file name is sensitive, or that lies inside a
/// `.env` / `.env.*` folder (which the policy hides as a whole).
pub fn is_sensitive_path(rel: &str) -> bool {
    let mut parts = rel.rsplit('/');
    let name = parts.next().unwrap_or_default();
    is_sensitive_name(name) || parts.any(is_env_name)
}

/// True for a change to a sensitive path, or for a link whose target names a sensitive file
/// or folder (`notes.txt -> .env`: a second name for a secret, under which a host program or
/// a later `git add` would take it for an ordinary file).
pub(crate) fn is_sensitive_change(c: &Change) -> bool {
    is_sensitive_path(&c.path)
        || c.link_target
            .as_deref()
            .is_some_and(|t| t.split('/').any(is_sensitive_name))
}

/// What the change list shows of a sensitive file's content: its size and the first
/// [`HASH_SHOWN`] hex digits of its SHA-256. Never the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Digested {
    pub(crate) len: u64,
    /// The whole SHA-256, in hex (only its start is shown).
    pub(crate) sha256: String,
}

/// How many hex digits of the SHA-256 are shown (64 bits: enough to compare with
/// `sha256sum`'s output by eye).
pub(crate) const HASH_SHOWN: usize = 16;

impl Digested {
    /// Reads `f` to its end.
    pub(crate) fn of_file(mut f: File) -> std::io::Result<Digested> {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut len = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            len += n as u64;
        }
        let sha256 = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Digested { len, sha256 })
    }

    /// True when both are the same bytes (by the whole hash).
    pub(crate) fn same_content(&self, other: &Digested) -> bool {
        self.len == other.len && self.sha256 == other.sha256
    }

    /// Opens `path` (a staged regular file, found without following a link) and reads it.
    pub(crate) fn of_path(path: &Path) -> std::io::Result<Digested> {
        Digested::of_file(File::open(path)?)
    }
}

impl std::fmt::Display for Digested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let unit = if self.len == 1 { "byte" } else { "bytes" };
        let shown = self.sha256.get(..HASH_SHOWN).unwrap_or(&self.sha256);
        write!(f, "{} {unit}, sha256 {shown}", self.len)
    }
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

    /// Each of these opens a secret's file or folder on some filesystem: a case-insensitive
    /// or casefolded one (`.ENV`), one that drops trailing dots and spaces (vfat, NTFS), an
    /// older kernel's casefolded lookup that skips invisible characters, and vfat's short
    /// names. Negative control: names that open another file everywhere.
    #[test]
    fn every_name_that_can_open_a_secret_is_sensitive() {
        for path in [
            ".ENV",
            ".Env.Local",
            ".env.",
            ".env ",
            ".e\u{200d}nv",
            "\u{feff}.env",
            "ENV~1",
            "env~2.loc",
            "ENVPRO~1.LOC",
            ".ENV/secret.txt",
            "ENV~1/secret.txt",
            "a/.Env.Production/x",
            "ID_RSA",
            "Credentials.JSON",
            "CREDEN~1.JSO",
            "ID_ED2~1",
            ".NPMRC",
            "NPMRC~1",
            "NETRC~1",
            "LONGNA~1.PEM",
            "server.KEY.",
        ] {
            assert!(is_sensitive_path(path), "{path:?} is not sensitive");
        }
        for path in [
            "env",
            "envfile",
            ".envrc",
            ".ENVRC",
            ".environment",
            "x.env",
            "env~",
            "env~x",
            "readme~1.txt",
            "enviro/x.txt",
            "a~1/b",
            ".npmrc.bak",
            "key.pem.txt",
        ] {
            assert!(!is_sensitive_path(path), "{path:?} is sensitive");
        }
    }

    fn link(path: &str, target: &str) -> Change {
        Change {
            path: path.into(),
            kind: crate::ChangeKind::LinkAdded,
            binary: false,
            mode_before: None,
            mode_after: Some(0o120777),
            link_target: Some(target.into()),
        }
    }

    #[test]
    fn a_link_is_sensitive_by_its_name_or_its_target() {
        assert!(is_sensitive_change(&link(".env", "notes.txt")));
        assert!(is_sensitive_change(&link("notes.txt", ".env")));
        assert!(is_sensitive_change(&link(
            "notes.txt",
            "../conf/.ENV.local"
        )));
        assert!(is_sensitive_change(&link("k", "certs/server.pem")));
        assert!(is_sensitive_change(&link("inside", ".env/x")));
        // Negative control.
        assert!(!is_sensitive_change(&link("notes.txt", "a.txt")));
        assert!(!is_sensitive_change(&link("envdir", "environment/x")));
    }

    #[test]
    fn a_digest_is_the_size_and_the_first_16_hex_digits_of_the_sha256() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let d = Digested::of_path(&p).unwrap();
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
        assert_eq!(
            d,
            Digested {
                len: 3,
                sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into()
            }
        );
        assert_eq!(d.to_string(), "3 bytes, sha256 ba7816bf8f01cfea");
    }
}
