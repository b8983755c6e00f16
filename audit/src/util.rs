//! Small helpers: hex, SHA-256, HMAC, UTC time stamps.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// A SHA-256 or HMAC-SHA256 output.
pub type Hash = [u8; 32];

/// The all-zero hash: `prev` of the very first line of a project.
pub const ZERO_HASH: Hash = [0u8; 32];

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(crate) fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// HMAC-SHA256 with a 32-byte key over the concatenation of `parts`.
pub(crate) fn hmac(key: &[u8; 32], parts: &[&[u8]]) -> Hash {
    let mut out = [0u8; 32];
    hmac_into(key, parts, &mut out);
    out
}

/// HMAC-SHA256 (RFC 2104) computed by hand on SHA-256, writing the tag into `out`.
///
/// Done by hand rather than with the `hmac` crate so that the writer's key material does not
/// linger: the padded key blocks and the inner hash live in zeroized buffers, and each hash
/// state is reset (overwritten with the initial value, in place) right after it finishes, so
/// the key's ipad/opad midstates do not stay in dropped memory. (Register and stack copies
/// made inside the SHA-256 compression function cannot be reached from safe Rust; see
/// docs/audit.md.) A short key is zero-padded to the block size, exactly as HMAC defines it.
pub(crate) fn hmac_into(key: &[u8; 32], parts: &[&[u8]], out: &mut [u8; 32]) {
    use sha2::digest::generic_array::GenericArray;
    let mut block = zeroize::Zeroizing::new([0x36u8; 64]);
    for (b, k) in block.iter_mut().zip(key.iter()) {
        *b ^= k;
    }
    let mut inner_out = zeroize::Zeroizing::new([0u8; 32]);
    let mut h = Sha256::new();
    h.update(&block[..]);
    for part in parts {
        h.update(part);
    }
    h.finalize_into_reset(GenericArray::from_mut_slice(&mut inner_out[..]));
    for b in block.iter_mut() {
        *b ^= 0x36 ^ 0x5c;
    }
    h.update(&block[..]);
    h.update(&inner_out[..]);
    h.finalize_into_reset(GenericArray::from_mut_slice(&mut out[..]));
}

/// A keyed HMAC state, ready to be cloned per message (saves the key schedule per line).
/// Verify only: the `hmac` crate does not zeroize its state.
pub(crate) fn keyed(key: &[u8; 32]) -> Hmac<Sha256> {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let mac = <Hmac<Sha256> as KeyInit>::new(&block.into());
    zeroize::Zeroize::zeroize(&mut block);
    mac
}

pub(crate) fn finish(mac: Hmac<Sha256>) -> Hash {
    mac.finalize().into_bytes().into()
}

/// Compares two MACs in constant time: a timing oracle would let a local attacker guess a
/// MAC byte by byte against a long-running verifier.
pub(crate) fn ct_eq(a: &Hash, b: &Hash) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    diff == 0
}

pub(crate) fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    String::from_utf8(out).unwrap_or_default()
}

/// Hex digit values for lowercase `0-9a-f`; 0xff for every other byte.
const UNHEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Parses exactly 64 lowercase hex digits. Uppercase is refused so that every hash has one
/// spelling (two spellings would be two different lines under the same meaning).
pub fn parse_hex32(s: &[u8]) -> Option<Hash> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = (UNHEX[pair[0] as usize], UNHEX[pair[1] as usize]);
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    // Any invalid digit has the top bit set.
    (bad & 0x80 == 0).then_some(out)
}

/// Milliseconds since the Unix epoch (0 for a clock before 1970).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

// Howard Hinnant's civil-calendar algorithms (public domain description, written anew here).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (always 24 bytes for years 1970..=9999).
pub fn format_time(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        ms % 1000
    )
}

/// `YYYYMMDDTHHMMSSZ`, for session ids that sort by start time.
pub(crate) fn compact_time(ms: u64) -> String {
    let full = format_time(ms);
    let b = full.as_bytes();
    let pick = |r: std::ops::Range<usize>| String::from_utf8_lossy(&b[r]).into_owned();
    format!(
        "{}{}{}T{}{}{}Z",
        pick(0..4),
        pick(5..7),
        pick(8..10),
        pick(11..13),
        pick(14..16),
        pick(17..19)
    )
}

/// Parses the exact form written by [`format_time`]; anything else is `None`.
pub fn parse_time(s: &[u8]) -> Option<u64> {
    if s.len() != 24 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let mut v = 0u64;
        for &c in &s[r] {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
        }
        Some(v)
    };
    let sep = |i: usize, c: u8| s[i] == c;
    if !(sep(4, b'-')
        && sep(7, b'-')
        && sep(10, b'T')
        && sep(13, b':')
        && sep(16, b':')
        && sep(19, b'.')
        && sep(23, b'Z'))
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + se;
    Some(secs * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_round_trips() {
        for ms in [0u64, 951_782_400_000, 1_700_000_000_123, 4_102_444_799_999] {
            let s = format_time(ms);
            assert_eq!(s.len(), 24, "{s}");
            assert_eq!(parse_time(s.as_bytes()), Some(ms), "{s}");
        }
        assert_eq!(format_time(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(compact_time(1_700_000_000_123), "20231114T221320Z");
        assert_eq!(parse_time(b"2023-11-14T22:13:20.123"), None);
        assert_eq!(parse_time(b"2023-13-14T22:13:20.123Z"), None);
    }

    #[test]
    fn hex_is_lowercase_only() {
        let h = sha256(b"x");
        assert_eq!(parse_hex32(hex(&h).as_bytes()), Some(h));
        assert_eq!(parse_hex32(hex(&h).to_uppercase().as_bytes()), None);
    }

    #[test]
    fn padded_hmac_matches_rfc4231_case_2_shape() {
        // RFC 4231 test case 2 uses key "Jefe" (4 bytes); a zero-padded 32-byte key is the
        // same HMAC key, so the published tag must come out.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let tag = hmac(&key, &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex(&tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
