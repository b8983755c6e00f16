//! Checkpoints in the C2SP `tlog-checkpoint` signed-note format.
//!
//! ```text
//! garuda.audit/<project-dir>/<session-id>      origin
//! 1027                                         tree size (lines)
//! q7c3...base64...=                            root hash (RFC 6962)
//! epoch 4                                      extension line: whose key signs it
//!                                              blank line ends the note text
//! — garuda-audit <base64(key id[4] || HMAC-SHA256[32])>
//! ```
//!
//! The signature is an HMAC over the note text (everything before the blank line, with its
//! final newline) under the checkpoint key of the named epoch, derived from that epoch's line
//! key. A checkpoint is only ever written right after the seal of its epoch, so the tree it
//! names ends with that seal; a writer that has moved on to a later epoch can no longer sign a
//! checkpoint for an earlier tree (no rollback by a key captured later). The signature type is
//! private to Garuda: only a holder of the install secret can check it, which is the point —
//! nobody else can forge one.

use base64::Engine as _;

use crate::keys::MacKey;
use crate::util::{ct_eq, Hash};

/// The key name on Garuda's checkpoint signature lines.
pub const KEY_NAME: &str = "garuda-audit";

/// The prefix of every origin line.
pub const ORIGIN_PREFIX: &str = "garuda.audit/";

/// Longest note the witness or verifier reads.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;

const DASH: &str = "\u{2014} ";

/// The signed content of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// `garuda.audit/<project-dir>/<session-id>`.
    pub origin: String,
    /// Number of lines covered.
    pub size: u64,
    /// RFC 6962 root over those lines.
    pub root: Hash,
    /// The epoch whose checkpoint key signs it (the epoch of the seal that ends the tree).
    pub epoch: u64,
}

/// A parsed signed note: the text and its signature lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The note text, every line ending in a newline, without the blank separator line.
    pub text: String,
    /// `(key name, decoded signature bytes)` for each signature line.
    pub signatures: Vec<(String, Vec<u8>)>,
}

/// The origin of a session's checkpoints.
pub fn origin(project_dir_name: &str, session_id: &str) -> String {
    format!("{ORIGIN_PREFIX}{project_dir_name}/{session_id}")
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl Checkpoint {
    /// The note text (without signatures).
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\nepoch {}\n",
            self.origin,
            self.size,
            b64().encode(self.root),
            self.epoch
        )
    }

    /// The complete note with Garuda's signature line.
    pub fn sign(&self, key: &MacKey) -> String {
        let text = self.text();
        let mut sig = key.checkpoint_key_id().to_vec();
        sig.extend_from_slice(&key.mac(text.as_bytes()));
        format!("{text}\n{DASH}{KEY_NAME} {}\n", b64().encode(sig))
    }

    /// Parses a note text (as in [`Note::text`]) into a checkpoint, refusing anything but the
    /// exact form [`Checkpoint::text`] produces.
    pub fn parse_text(text: &str) -> Result<Checkpoint, String> {
        let lines: Vec<&str> = text
            .strip_suffix('\n')
            .ok_or("note text must end with a newline")?
            .split('\n')
            .collect();
        if lines.len() != 4 {
            return Err(format!("expected 4 note lines, found {}", lines.len()));
        }
        let origin = lines[0];
        if !origin.starts_with(ORIGIN_PREFIX) || !valid_origin(origin) {
            return Err(format!("bad origin {origin:?}"));
        }
        let size = canonical_u64(lines[1]).ok_or("bad tree size")?;
        let root_bytes = b64().decode(lines[2]).map_err(|_| "bad root hash")?;
        let root: Hash = root_bytes
            .try_into()
            .map_err(|_| "root hash is not 32 bytes")?;
        let epoch = lines[3]
            .strip_prefix("epoch ")
            .and_then(canonical_u64)
            .ok_or("bad epoch extension line")?;
        let cp = Checkpoint {
            origin: origin.to_string(),
            size,
            root,
            epoch,
        };
        // Reject other spellings of the same values (e.g. unpadded base64).
        if cp.text() != text {
            return Err("note text is not in canonical form".into());
        }
        Ok(cp)
    }
}

/// Whether an origin is one line of printable ASCII without spaces, at most 256 bytes.
pub fn valid_origin(origin: &str) -> bool {
    !origin.is_empty() && origin.len() <= 256 && origin.bytes().all(|c| c.is_ascii_graphic())
}

pub(crate) fn canonical_u64(s: &str) -> Option<u64> {
    if s.is_empty() || (s.len() > 1 && s.starts_with('0')) || !s.bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

impl Note {
    /// Parses a signed note: text lines, one blank line, then one or more signature lines
    /// `— <name> <base64>`.
    pub fn parse(note: &str) -> Result<Note, String> {
        if note.len() > MAX_NOTE_BYTES {
            return Err("note too large".into());
        }
        let (text, sigs) = note
            .split_once("\n\n")
            .ok_or("no blank line after the note text")?;
        let text = format!("{text}\n");
        let sigs = sigs
            .strip_suffix('\n')
            .ok_or("signatures must end with a newline")?;
        let mut signatures = Vec::new();
        for line in sigs.split('\n') {
            let rest = line
                .strip_prefix(DASH)
                .ok_or_else(|| format!("bad signature line {line:?}"))?;
            let (name, sig) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad signature line {line:?}"))?;
            if name.is_empty() || !name.bytes().all(|c| c.is_ascii_graphic() && c != b'+') {
                return Err(format!("bad key name {name:?}"));
            }
            let sig = b64()
                .decode(sig)
                .map_err(|_| format!("bad signature base64 for {name}"))?;
            if sig.len() < 5 {
                return Err(format!("signature of {name} too short"));
            }
            signatures.push((name.to_string(), sig));
        }
        if signatures.is_empty() {
            return Err("no signature".into());
        }
        Ok(Note { text, signatures })
    }

    /// Whether the note carries a valid Garuda signature under `key`.
    pub fn signed_by(&self, key: &MacKey) -> bool {
        let want_id = key.checkpoint_key_id();
        let mac = key.mac(self.text.as_bytes());
        self.signatures.iter().any(|(name, sig)| {
            name == KEY_NAME
                && sig.len() == 36
                && sig[..4] == want_id
                && <[u8; 32]>::try_from(&sig[4..]).is_ok_and(|s| ct_eq(&s, &mac))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::InstallSecret;

    #[test]
    fn sign_parse_verify() {
        let key = InstallSecret::from_bytes([1; 32])
            .session_key("p", "s")
            .at(2)
            .checkpoint_key();
        let cp = Checkpoint {
            origin: origin("proj-0123456789abcdef", "s"),
            size: 17,
            root: [5; 32],
            epoch: 2,
        };
        let note = cp.sign(&key);
        let parsed = Note::parse(&note).unwrap();
        assert!(parsed.signed_by(&key));
        assert_eq!(Checkpoint::parse_text(&parsed.text).unwrap(), cp);
        let other = InstallSecret::from_bytes([1; 32])
            .session_key("p", "s")
            .at(3)
            .checkpoint_key();
        assert!(!parsed.signed_by(&other));
        let inflated = note.replacen("\n17\n", "\n18\n", 1);
        assert!(!Note::parse(&inflated).unwrap().signed_by(&key));
        assert!(Checkpoint::parse_text("x\n1\n\nepoch 0\n").is_err());
        assert!(Note::parse("no blank line").is_err());
    }
}
