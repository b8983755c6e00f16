//! Keys: the install secret on disk, and everything derived from it in memory.
//!
//! ```text
//! install secret S        32 random bytes, <garuda_home>/keys/install.key (0600, folder 0700)
//!   key id                HMAC(S, "garuda-audit-key-id-v1")[..4]
//!   session key k_0       HMAC(S, "garuda-audit-session-v2" || project || 0x00 || session id)
//!     epoch key k_{e+1}   HMAC(k_e, "garuda-audit-evolve-v1")      old key zeroized
//!     checkpoint key      HMAC(k_e, "garuda-audit-checkpoint-v1")  signs the note after seal e
//!   index key             HMAC(S, "garuda-audit-index-v2" || project || 0x00 || session id)
//!   register key          HMAC(S, "garuda-audit-register-v1" || project || 0x00 || session id)
//!   register tail key     HMAC(S, "garuda-audit-register-tail-v1")   the register's tail state
//! ```
//!
//! `project` is the project's audit folder name (`<name>-<hash16>`): a session's lines and
//! index entries authenticate only in the folder of the project they were written for.
//!
//! Everything a running writer holds after `open` is specific to its own session, and the
//! epoch key only moves forward: memory read in epoch `e` yields no key for an earlier epoch of
//! this session nor any key of another session. The install secret itself is dropped (and
//! zeroized) as soon as the session keys are derived.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use zeroize::{Zeroize, Zeroizing};

use crate::error::AuditError;
use crate::fsx;
use crate::util::{hmac, hmac_into, Hash};

/// The install secret's file name inside the keys folder.
pub const INSTALL_KEY_FILE: &str = "install.key";

/// First line word of an exported key file (`garuda audit key export`).
pub const EXPORT_TAG: &str = "garuda-audit-install-key-v1";

const LABEL_KEY_ID: &[u8] = b"garuda-audit-key-id-v1";
const LABEL_SESSION: &[u8] = b"garuda-audit-session-v2";
const LABEL_EVOLVE: &[u8] = b"garuda-audit-evolve-v1";
const LABEL_CHECKPOINT: &[u8] = b"garuda-audit-checkpoint-v1";
const LABEL_CHECKPOINT_ID: &[u8] = b"garuda-audit-checkpoint-key-id-v1";
const LABEL_INDEX: &[u8] = b"garuda-audit-index-v2";
const LABEL_REGISTER: &[u8] = b"garuda-audit-register-v1";
const LABEL_REGISTER_TAIL: &[u8] = b"garuda-audit-register-tail-v1";

/// Four bytes naming an install secret without revealing it (HMAC of a fixed label).
pub type KeyId = [u8; 4];

/// The 32-byte install secret every session key is derived from.
///
/// Zeroized on drop; `Debug` prints only the key id.
#[derive(Clone)]
pub struct InstallSecret(Box<Zeroizing<[u8; 32]>>);

impl std::fmt::Debug for InstallSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InstallSecret(id {})", crate::util::hex(&self.key_id()))
    }
}

impl InstallSecret {
    /// Wraps raw key bytes (tests, tools, a key read by other means).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self::from_slice(&bytes)
    }

    /// Copies the key straight into its (heap, zeroized-on-drop) home: no moved copies.
    fn from_slice(bytes: &[u8]) -> Self {
        let mut s = InstallSecret(Box::new(Zeroizing::new([0u8; 32])));
        s.0.copy_from_slice(bytes);
        s
    }

    /// This secret's id, as recorded in every session's first line.
    pub fn key_id(&self) -> KeyId {
        let h = hmac(&self.0, &[LABEL_KEY_ID]);
        [h[0], h[1], h[2], h[3]]
    }

    /// Reads `<keys_dir>/install.key`, `None` if it does not exist. The folder must be 0700
    /// and the file 0600, both ours and neither a link.
    pub fn load(keys_dir: &Path) -> Result<Option<Self>, AuditError> {
        let uid = fsx::current_uid()?;
        match fs::symlink_metadata(keys_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(AuditError::io(keys_dir, e)),
            Ok(_) => fsx::ensure_private_dir(keys_dir, uid)?,
        }
        let path = keys_dir.join(INSTALL_KEY_FILE);
        match fsx::read_private(&path, uid)? {
            None => Ok(None),
            Some(data) => {
                remove_linked_temps(keys_dir, &path);
                Self::from_file_bytes(&path, Zeroizing::new(data)).map(Some)
            }
        }
    }

    /// Reads the install secret, creating it (32 bytes from the kernel) on first use.
    ///
    /// Creation writes a temporary file and hard-links it into place, so two processes racing
    /// on first use end up with one secret (the loser reads the winner's), and a crash never
    /// leaves a short key under the real name.
    pub fn load_or_create(keys_dir: &Path) -> Result<Self, AuditError> {
        let uid = fsx::current_uid()?;
        fsx::ensure_private_dir(keys_dir, uid)?;
        if let Some(secret) = Self::load(keys_dir)? {
            return Ok(secret);
        }
        let mut bytes = fsx::random_bytes::<32>()?;
        let secret = Self::from_slice(&bytes);
        bytes.zeroize();
        let suffix = crate::util::hex(&fsx::random_bytes::<8>()?);
        let tmp = keys_dir.join(format!(".{INSTALL_KEY_FILE}.{suffix}.tmp"));
        let target = keys_dir.join(INSTALL_KEY_FILE);
        let result = (|| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(fsx::FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .map_err(|e| AuditError::io(&tmp, e))?;
            f.set_permissions(fs::Permissions::from_mode(fsx::FILE_MODE))
                .map_err(|e| AuditError::io(&tmp, e))?;
            f.write_all(&secret.0[..])
                .map_err(|e| AuditError::io(&tmp, e))?;
            f.sync_all().map_err(|e| AuditError::io(&tmp, e))?;
            match fs::hard_link(&tmp, &target) {
                Ok(()) => fsx::fsync_dir(keys_dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                // A concurrent `load` removed our temp name after another process won (or an
                // export cleaned up): whatever is under the real name is the secret.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(AuditError::io(&target, e)),
            }
        })();
        let _ = fs::remove_file(&tmp);
        result?;
        // Whoever won the race, the file under the real name is the secret.
        Self::load(keys_dir)?.ok_or(AuditError::NoKey { path: target })
    }

    /// Reads a key file given on the command line (`--key FILE`): either the raw 32 bytes of
    /// `install.key` or the text form written by [`key_export`].
    pub fn read_file(path: &Path) -> Result<Self, AuditError> {
        let mut file = fsx::open_read(path).map_err(|e| AuditError::io(path, e))?;
        let mut data = Zeroizing::new(Vec::new());
        io::Read::read_to_end(&mut file, &mut data).map_err(|e| AuditError::io(path, e))?;
        Self::from_file_bytes(path, data)
    }

    fn from_file_bytes(path: &Path, data: Zeroizing<Vec<u8>>) -> Result<Self, AuditError> {
        let bad = |reason: &str| AuditError::BadKey {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        if data.len() == 32 {
            return Ok(Self::from_slice(&data));
        }
        let text = std::str::from_utf8(&data).map_err(|_| bad("neither 32 bytes nor text"))?;
        let rest = text
            .trim_end()
            .strip_prefix(EXPORT_TAG)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or_else(|| bad("missing the export header"))?;
        let mut raw = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| bad("bad base64"))?,
        );
        if raw.len() != 32 {
            return Err(bad("not 32 bytes"));
        }
        let s = Self::from_slice(&raw);
        raw.zeroize();
        Ok(s)
    }

    /// The epoch-0 key of a session of `project` (its audit folder name).
    pub fn session_key(&self, project: &str, session_id: &str) -> EpochKey {
        let mut key = Box::new(Zeroizing::new([0u8; 32]));
        hmac_into(
            &self.0,
            &[
                LABEL_SESSION,
                project.as_bytes(),
                b"\0",
                session_id.as_bytes(),
            ],
            &mut key,
        );
        EpochKey { key, epoch: 0 }
    }

    /// The key a session of `project` uses for its entries in the project index.
    pub fn index_key(&self, project: &str, session_id: &str) -> MacKey {
        self.derive(LABEL_INDEX, project, session_id)
    }

    /// The key a session of `project` uses for its entries in the install-wide register.
    pub fn register_key(&self, project: &str, session_id: &str) -> MacKey {
        self.derive(LABEL_REGISTER, project, session_id)
    }

    /// The key of the register's tail state (install-wide: any session may write it). A
    /// writer holds it until it closes; the tail is a cache that verify never trusts.
    pub(crate) fn register_tail_key(&self) -> MacKey {
        let mut key = Box::new(Zeroizing::new([0u8; 32]));
        hmac_into(&self.0, &[LABEL_REGISTER_TAIL], &mut key);
        MacKey(key)
    }

    fn derive(&self, label: &[u8], project: &str, session_id: &str) -> MacKey {
        let mut key = Box::new(Zeroizing::new([0u8; 32]));
        hmac_into(
            &self.0,
            &[label, project.as_bytes(), b"\0", session_id.as_bytes()],
            &mut key,
        );
        MacKey(key)
    }
}

/// A 32-byte MAC key (zeroized on drop).
#[derive(Clone)]
pub struct MacKey(Box<Zeroizing<[u8; 32]>>);

impl MacKey {
    /// HMAC-SHA256 of `data`.
    pub fn mac(&self, data: &[u8]) -> Hash {
        hmac(&self.0, &[data])
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

/// A session's key for one epoch. [`EpochKey::evolve`] replaces it by the next epoch's key and
/// erases the old one; there is no way back.
pub struct EpochKey {
    key: Box<Zeroizing<[u8; 32]>>,
    epoch: u64,
}

impl std::fmt::Debug for EpochKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EpochKey(epoch {})", self.epoch)
    }
}

impl EpochKey {
    /// The epoch this key belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Moves to the next epoch: `k_{e+1} = HMAC(k_e, "garuda-audit-evolve-v1")`, then
    /// overwrites `k_e`.
    pub fn evolve(&mut self) {
        let mut next = Box::new(Zeroizing::new([0u8; 32]));
        hmac_into(&self.key, &[LABEL_EVOLVE], &mut next);
        self.key.copy_from_slice(&next[..]);
        self.epoch += 1;
    }

    /// The key of a later epoch (`target >= self.epoch()`), leaving `self` unchanged.
    pub fn at(&self, target: u64) -> EpochKey {
        let mut k = EpochKey {
            key: self.key.clone(),
            epoch: self.epoch,
        };
        while k.epoch < target {
            k.evolve();
        }
        k
    }

    /// HMAC-SHA256 of `data` under this epoch's key (the `mac` of a line).
    pub fn mac(&self, data: &[u8]) -> Hash {
        hmac(&self.key, &[data])
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.key
    }

    /// The key that signs the checkpoint written right after this epoch's seal.
    pub fn checkpoint_key(&self) -> MacKey {
        let mut key = Box::new(Zeroizing::new([0u8; 32]));
        hmac_into(&self.key, &[LABEL_CHECKPOINT], &mut key);
        MacKey(key)
    }
}

impl MacKey {
    /// The 4-byte id put in front of a checkpoint signature made with this key.
    pub fn checkpoint_key_id(&self) -> KeyId {
        let h = hmac(&self.0, &[LABEL_CHECKPOINT_ID]);
        [h[0], h[1], h[2], h[3]]
    }
}

/// Copies the install secret to `out` (text form, 0600, never over an existing file or
/// through a link), syncs it, and with `remove` deletes `install.key` afterwards.
///
/// After `--remove`, the sessions written so far can be verified only with the exported
/// file, and a process with the user's rights can no longer forge their lines: this is what
/// moves such a process into the attackers verify covers. The next session creates a new
/// install secret. Deleting a file does not scrub the disk blocks it used; on an SSD or a
/// copy-on-write file system the old bytes may survive until reused.
pub fn key_export(keys_dir: &Path, out: &Path, remove: bool) -> Result<KeyId, AuditError> {
    let key_path = keys_dir.join(INSTALL_KEY_FILE);
    let secret = InstallSecret::load(keys_dir)?.ok_or(AuditError::NoKey {
        path: key_path.clone(),
    })?;
    let mut text = Zeroizing::new(format!(
        "{EXPORT_TAG} {}\n",
        base64::engine::general_purpose::STANDARD.encode(&secret.0[..])
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(fsx::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(out)
        .map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                AuditError::Exists {
                    path: out.to_path_buf(),
                }
            } else {
                AuditError::io(out, e)
            }
        })?;
    f.set_permissions(fs::Permissions::from_mode(fsx::FILE_MODE))
        .map_err(|e| AuditError::io(out, e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| AuditError::io(out, e))?;
    f.sync_all().map_err(|e| AuditError::io(out, e))?;
    text.zeroize();
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        fsx::fsync_dir(parent)?;
    }
    // Check the copy before deleting the original: a failed export must never lose the key.
    let copy = InstallSecret::read_file(out)?;
    if copy.key_id() != secret.key_id() {
        return Err(AuditError::BadKey {
            path: out.to_path_buf(),
            reason: "the exported copy does not read back".into(),
        });
    }
    if remove {
        fs::remove_file(&key_path).map_err(|e| AuditError::io(&key_path, e))?;
        // A writer that died between linking its temp file and removing it left a second
        // name for the secret (or a copy of an unused one): remove those too.
        for tmp in key_temp_files(keys_dir) {
            fs::remove_file(&tmp).map_err(|e| AuditError::io(&tmp, e))?;
        }
        fsx::fsync_dir(keys_dir)?;
    }
    Ok(secret.key_id())
}

/// Temp files `load_or_create` writes the secret to before linking it into place
/// (`.install.key.<random>.tmp`). One left behind by a crash is a copy of a secret.
pub fn key_temp_files(keys_dir: &Path) -> Vec<PathBuf> {
    let prefix = format!(".{INSTALL_KEY_FILE}.");
    let Ok(rd) = fs::read_dir(keys_dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".tmp")
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Removes temp names that are hard links to the installed secret (a crash between the link
/// and the removal). Temps of another inode may belong to a creator still racing; they are
/// left to it (and to `key export --remove`).
fn remove_linked_temps(keys_dir: &Path, installed: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::symlink_metadata(installed) else {
        return;
    };
    for tmp in key_temp_files(keys_dir) {
        if fs::symlink_metadata(&tmp).is_ok_and(|m| {
            m.file_type().is_file() && m.ino() == meta.ino() && m.dev() == meta.dev()
        }) {
            let _ = fs::remove_file(&tmp);
        }
    }
}

/// Where the install secret lives for a Garuda home folder.
pub fn install_key_path(keys_dir: &Path) -> PathBuf {
    keys_dir.join(INSTALL_KEY_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evolve_is_one_way_and_at_matches() {
        let s = InstallSecret::from_bytes([7; 32]);
        let k0 = s.session_key("p", "a");
        let k3 = k0.at(3);
        let mut k = s.session_key("p", "a");
        k.evolve();
        k.evolve();
        k.evolve();
        assert_eq!(k.bytes(), k3.bytes());
        assert_eq!(k.epoch(), 3);
        assert_ne!(
            s.session_key("p", "a").bytes(),
            s.session_key("p", "b").bytes()
        );
        // Bound to the project: the same session id in another project has other keys.
        assert_ne!(
            s.session_key("p", "a").bytes(),
            s.session_key("q", "a").bytes()
        );
        assert_ne!(s.index_key("p", "a").bytes(), s.index_key("q", "a").bytes());
    }

    #[test]
    fn hand_written_hmac_matches_the_hmac_crate() {
        use hmac::{Hmac, Mac};
        let key = [0x42u8; 32];
        let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&key).unwrap();
        m.update(b"ab");
        m.update(b"cd");
        let want: [u8; 32] = m.finalize().into_bytes().into();
        assert_eq!(hmac(&key, &[b"ab", b"cd"]), want);
    }

    #[test]
    fn a_leftover_temp_copy_of_the_secret_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        InstallSecret::load_or_create(&keys).unwrap();
        // A crash between hard_link and remove_file: a second name for the secret.
        let tmp = keys.join(".install.key.0011223344556677.tmp");
        fs::hard_link(keys.join(INSTALL_KEY_FILE), &tmp).unwrap();
        InstallSecret::load(&keys).unwrap().unwrap();
        assert!(!tmp.exists(), "load leaves the linked temp copy");
        // One of another inode (a copy) is removed by export --remove.
        fs::copy(keys.join(INSTALL_KEY_FILE), &tmp).unwrap();
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(key_temp_files(&keys), vec![tmp.clone()]);
        key_export(&keys, &dir.path().join("out.key"), true).unwrap();
        assert!(
            !tmp.exists(),
            "export --remove leaves a temp copy of the secret"
        );
    }

    #[test]
    fn create_load_export_remove() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let a = InstallSecret::load_or_create(&keys).unwrap();
        let b = InstallSecret::load_or_create(&keys).unwrap();
        assert_eq!(a.key_id(), b.key_id());
        let out = dir.path().join("exported.key");
        let id = key_export(&keys, &out, true).unwrap();
        assert_eq!(id, a.key_id());
        assert!(!keys.join(INSTALL_KEY_FILE).exists());
        assert_eq!(InstallSecret::read_file(&out).unwrap().key_id(), id);
        // Never over an existing file.
        let again = InstallSecret::load_or_create(&keys).unwrap();
        assert_ne!(again.key_id(), id);
        assert!(matches!(
            key_export(&keys, &out, false),
            Err(AuditError::Exists { .. })
        ));
    }
}
