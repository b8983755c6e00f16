//! One file-tool request made of arbitrary bytes (a tool, a path, a pattern) against a trap
//! project: links out of the root, to secrets and in loops, a FIFO, `.git`, `.garuda`, dotenv
//! files (`garuda_supervisor::broker::exercise::exercise`). Its seed corpus in
//! `corpus/path_resolver` is also replayed by `supervisor/tests/broker_files.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_supervisor::broker::exercise::exercise(data);
});
