//! Decodes arbitrary bytes as one agent frame and validates every path it names
//! (`garuda_ipc::exercise_request`). Its seed corpus in `corpus/ipc_request` is also replayed
//! by `ipc/tests/fuzz_corpora.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_ipc::exercise_request(data);
});
