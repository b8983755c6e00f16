//! Replays the seed corpora of the IPC fuzz targets in `fuzz/` as ordinary tests, through the
//! same functions the targets call, so a crash the fuzzer once found stays fixed without
//! nightly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
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

#[test]
fn ipc_frame_corpus() {
    for (path, data) in corpus("ipc_frame") {
        eprintln!("{}", path.display());
        garuda_ipc::exercise_frames(&data);
    }
}

#[test]
fn ipc_request_corpus() {
    for (path, data) in corpus("ipc_request") {
        eprintln!("{}", path.display());
        garuda_ipc::exercise_request(&data);
    }
}
