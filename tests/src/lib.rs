//! Cross-crate test suites for Garuda. The code lives in `tests/` (integration tests) and
//! `src/bin/probe.rs` (the probe program the contract suite runs inside each sandbox).
#![forbid(unsafe_code)]

pub mod diff;

use std::os::unix::fs::FileExt;

/// What [`scan_memory`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryScan {
    /// Whether the needle was found.
    pub found: bool,
    /// How many bytes were read before the scan ended: 0 means it proved nothing.
    pub bytes: usize,
}

/// Look for `needle` in the memory that process `pid` (a number, or `self`) made itself:
/// writable mappings, anonymous ones, the heap and the stack. A file's read-only mapping holds
/// the file, which cannot contain a value made up for one run; a region that went away or
/// cannot be read is skipped. `Err` is the error opening `/proc/PID/maps` or `/proc/PID/mem`.
/// Shared by the probe (`pid1`, from inside a sandbox) and `tests/sandbox_pid1.rs` (from the
/// host).
pub fn scan_memory(pid: &str, needle: &[u8]) -> std::io::Result<MemoryScan> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut bytes = 0;
    for line in maps.lines() {
        let mut words = line.split_whitespace();
        let (Some(range), Some(perms)) = (words.next(), words.next()) else {
            continue;
        };
        let path = words.nth(3).unwrap_or("");
        let ours = perms.contains('w') || path.is_empty() || path.starts_with('[');
        if !perms.starts_with('r') || !ours || path.starts_with("[v") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let mut region = vec![0u8; usize::try_from(end.saturating_sub(start)).unwrap_or(0)];
        if mem.read_exact_at(&mut region, start).is_err() {
            continue;
        }
        bytes += region.len();
        if region.windows(needle.len()).any(|w| w == needle) {
            return Ok(MemoryScan { found: true, bytes });
        }
    }
    Ok(MemoryScan {
        found: false,
        bytes,
    })
}
