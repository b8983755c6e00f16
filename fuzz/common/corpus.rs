//! Reads a fuzz target's seed corpus, for the tests that replay it without nightly: one copy,
//! included by each crate's replay test (`#[path]`), since the corpora live beside the
//! targets in `fuzz/corpus/<target>`.

use std::fs;
use std::path::PathBuf;

/// Every file of `fuzz/corpus/<target>`, sorted, with its bytes; at least ten (a seed corpus
/// that is not there would make the replay pass vacuously).
pub fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let data = fs::read(&path).unwrap();
            (path, data)
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "{}: expected a seed corpus, found {} files",
        dir.display(),
        files.len()
    );
    files
}
