//! The byte format of one log line, written and read without re-serialising anything.
//!
//! ```text
//! {"v":1,"seq":7,"epoch":0,"time":"2026-05-15T12:00:00.123Z","prev":"<64 hex>","type":"command_intent","event":{...},"mac":"<64 hex>"}\n
//! └──────────────────────────────── MAC input: every byte before ,"mac":" ──────────────────────────────┘
//! ```
//!
//! The writer prints the header itself in this exact order and spelling, appends the event as
//! compact JSON, computes the MAC over those bytes, and closes the line. The reader checks the
//! fixed 74-byte suffix (`,"mac":"` + 64 lowercase hex + `"}`), MACs the bytes before it, and
//! parses the header by matching the same literal tokens. Any other spelling of the same JSON
//! (other key order, spaces, escapes, a number written `1.0`) changes the bytes, so the MAC
//! fails: one meaning has one line.

use serde_json::Value;

use crate::json;
use crate::util::{self, parse_hex32, Hash};

/// Longest line the writer produces or the verifier accepts (4 MiB). Longer lines are refused
/// when writing and MALFORMED when read, so one line cannot make a verifier allocate without
/// bound.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// The line format version, the `v` field.
pub const VERSION: u64 = 1;

const MAC_FIELD: &[u8] = b",\"mac\":\"";
/// `,"mac":"` + 64 hex + `"}`.
pub(crate) const SUFFIX_LEN: usize = MAC_FIELD.len() + 64 + 2;

/// Longest event kind.
pub const MAX_KIND_LEN: usize = 64;

/// The parsed header of a line, borrowing from the line's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Header<'a> {
    pub seq: u64,
    pub epoch: u64,
    pub time: &'a [u8],
    pub prev: Hash,
    pub kind: &'a str,
    pub event: &'a [u8],
}

/// Whether `kind` is a valid `type`: a lowercase letter, then lowercase letters, digits,
/// `_`, `.` or `-`, at most [`MAX_KIND_LEN`] bytes. The charset keeps the header free of
/// anything that would need escaping.
pub fn valid_kind(kind: &str) -> bool {
    let b = kind.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_KIND_LEN
        && b[0].is_ascii_lowercase()
        && b.iter().all(|&c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'.' || c == b'-'
        })
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut v = v;
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Fields of a line to be written.
pub(crate) struct NewLine<'a> {
    pub seq: u64,
    pub epoch: u64,
    pub time_ms: u64,
    pub prev: &'a Hash,
    pub kind: &'a str,
    pub event: &'a Value,
}

/// Writes the complete line (with its newline) into `buf`, MACed under `key`.
pub(crate) fn build(
    buf: &mut Vec<u8>,
    line: &NewLine<'_>,
    key: &[u8; 32],
) -> serde_json::Result<()> {
    buf.clear();
    buf.extend_from_slice(b"{\"v\":");
    push_u64(buf, VERSION);
    buf.extend_from_slice(b",\"seq\":");
    push_u64(buf, line.seq);
    buf.extend_from_slice(b",\"epoch\":");
    push_u64(buf, line.epoch);
    buf.extend_from_slice(b",\"time\":\"");
    buf.extend_from_slice(util::format_time(line.time_ms).as_bytes());
    buf.extend_from_slice(b"\",\"prev\":\"");
    util::push_hex(buf, line.prev);
    buf.extend_from_slice(b"\",\"type\":\"");
    buf.extend_from_slice(line.kind.as_bytes());
    buf.extend_from_slice(b"\",\"event\":");
    serde_json::to_writer(&mut *buf, line.event)?;
    let mac = util::hmac(key, &[buf]);
    buf.extend_from_slice(MAC_FIELD);
    util::push_hex(buf, &mac);
    buf.extend_from_slice(b"\"}\n");
    Ok(())
}

/// A line that stands alone at a file's start (a tail state, a retention or archive record):
/// `seq` and `epoch` 0, the current time, `prev` naming what it follows, MACed under `key`.
/// The error names `path` (the file it is for).
pub(crate) fn record(
    path: &std::path::Path,
    prev: &Hash,
    kind: &str,
    event: &Value,
    key: &crate::keys::MacKey,
) -> Result<Vec<u8>, crate::AuditError> {
    let mut buf = Vec::with_capacity(512);
    build(
        &mut buf,
        &NewLine {
            seq: 0,
            epoch: 0,
            time_ms: util::now_ms(),
            prev,
            kind,
            event,
        },
        key.bytes(),
    )
    .map_err(|e| crate::AuditError::Format {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(buf)
}

/// Splits a line (without its newline) into the MACed prefix and the MAC, if the line ends
/// with the exact suffix shape.
pub(crate) fn split_mac(line: &[u8]) -> Option<(&[u8], Hash)> {
    if line.len() < SUFFIX_LEN + 2 {
        return None;
    }
    let cut = line.len() - SUFFIX_LEN;
    let (prefix, suffix) = line.split_at(cut);
    if &suffix[..MAC_FIELD.len()] != MAC_FIELD || &suffix[SUFFIX_LEN - 2..] != b"\"}" {
        return None;
    }
    let mac = parse_hex32(&suffix[MAC_FIELD.len()..MAC_FIELD.len() + 64])?;
    Some((prefix, mac))
}

fn expect(s: &mut &[u8], lit: &[u8]) -> Option<()> {
    let rest = s.strip_prefix(lit)?;
    *s = rest;
    Some(())
}

/// A decimal without sign or leading zeros that fits a u64.
fn number(s: &mut &[u8]) -> Option<u64> {
    let len = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if len == 0 || (len > 1 && s[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &s[..len] {
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    *s = &s[len..];
    Some(v)
}

/// Parses the MACed prefix of a line in the writer's exact layout. `None` means the bytes are
/// not in that layout (the caller decides between BAD_MAC and MALFORMED).
pub(crate) fn parse_header(prefix: &[u8]) -> Option<Header<'_>> {
    let mut s = prefix;
    expect(&mut s, b"{\"v\":")?;
    if number(&mut s)? != VERSION {
        return None;
    }
    expect(&mut s, b",\"seq\":")?;
    let seq = number(&mut s)?;
    expect(&mut s, b",\"epoch\":")?;
    let epoch = number(&mut s)?;
    expect(&mut s, b",\"time\":\"")?;
    let time = s.get(..24)?;
    util::parse_time(time)?;
    s = &s[24..];
    expect(&mut s, b"\",\"prev\":\"")?;
    let prev = parse_hex32(s.get(..64)?)?;
    s = &s[64..];
    expect(&mut s, b"\",\"type\":\"")?;
    let end = s.iter().position(|&c| c == b'"')?;
    let kind = std::str::from_utf8(&s[..end]).ok()?;
    if !valid_kind(kind) {
        return None;
    }
    s = &s[end..];
    expect(&mut s, b"\",\"event\":")?;
    if s.is_empty() {
        return None;
    }
    Some(Header {
        seq,
        epoch,
        time,
        prev,
        kind,
        event: s,
    })
}

/// What a line that is valid JSON but not in the writer's layout claims (for reporting a
/// re-serialised line as BAD_MAC rather than MALFORMED).
#[derive(Debug)]
pub(crate) struct Loose {
    pub seq: Option<u64>,
    pub epoch: Option<u64>,
}

/// Reads a line as a JSON object with exactly the line's eight fields, each of the right type,
/// and no duplicate key anywhere. `None`: not a line at all (MALFORMED).
pub(crate) fn parse_loose(line: &[u8]) -> Option<Loose> {
    let v = json::parse(line).ok()?;
    let obj = v.as_object()?;
    const KEYS: [&str; 8] = ["v", "seq", "epoch", "time", "prev", "type", "event", "mac"];
    if obj.len() != KEYS.len() || !KEYS.iter().all(|k| obj.contains_key(*k)) {
        return None;
    }
    obj.get("time")?.as_str()?;
    obj.get("prev")?.as_str()?;
    obj.get("type")?.as_str()?;
    obj.get("mac")?.as_str()?;
    Some(Loose {
        seq: obj.get("seq")?.as_u64(),
        epoch: obj.get("epoch")?.as_u64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn build_then_parse() {
        let mut buf = Vec::new();
        let prev = [3u8; 32];
        let ev = json!({"cmd": "ls -la", "n": 1});
        let key = [9u8; 32];
        build(
            &mut buf,
            &NewLine {
                seq: 12,
                epoch: 3,
                time_ms: 1_700_000_000_000,
                prev: &prev,
                kind: "command_intent",
                event: &ev,
            },
            &key,
        )
        .unwrap();
        assert_eq!(*buf.last().unwrap(), b'\n');
        let line = &buf[..buf.len() - 1];
        let (prefix, mac) = split_mac(line).unwrap();
        assert_eq!(util::hmac(&key, &[prefix]), mac);
        let h = parse_header(prefix).unwrap();
        assert_eq!((h.seq, h.epoch, h.kind), (12, 3, "command_intent"));
        assert_eq!(h.prev, prev);
        assert_eq!(h.event, br#"{"cmd":"ls -la","n":1}"#);
        assert!(parse_loose(line).is_some());
    }

    #[test]
    fn header_layout_is_exact() {
        let good = br#"{"v":1,"seq":0,"epoch":0,"time":"2026-01-01T00:00:00.000Z","prev":"0000000000000000000000000000000000000000000000000000000000000000","type":"x","event":{}"#;
        assert!(parse_header(good).is_some());
        let variants: Vec<Vec<u8>> = vec![
            String::from_utf8_lossy(good)
                .replace("\"seq\":0", "\"seq\":00")
                .into(),
            String::from_utf8_lossy(good)
                .replace("\"v\":1", "\"v\": 1")
                .into(),
            String::from_utf8_lossy(good)
                .replace("\"v\":1", "\"v\":2")
                .into(),
            String::from_utf8_lossy(good)
                .replace("\"type\":\"x\"", "\"type\":\"X\"")
                .into(),
            String::from_utf8_lossy(good)
                .replace("T00:00", "T00:0a")
                .into(),
            String::from_utf8_lossy(good)
                .replace("\"event\":{}", "\"event\":")
                .into(),
        ];
        for v in variants {
            assert!(
                parse_header(&v).is_none(),
                "{}",
                String::from_utf8_lossy(&v)
            );
        }
    }

    #[test]
    fn kinds() {
        for ok in ["a", "command_intent", "x.y-z9"] {
            assert!(valid_kind(ok), "{ok}");
        }
        for bad in ["", "A", "9a", "a b", "a\"", &"a".repeat(65)] {
            assert!(!valid_kind(bad), "{bad}");
        }
    }
}
