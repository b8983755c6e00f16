//! Replays the seed corpora of the IPC fuzz targets in `fuzz/` as ordinary tests, through the
//! same functions the targets call, so a crash the fuzzer once found stays fixed without
//! nightly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../fuzz/common/corpus.rs"]
mod corpus_files;
use corpus_files::corpus;

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
