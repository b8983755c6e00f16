//! Reads arbitrary bytes as a stream of IPC frames (`garuda_ipc::exercise_frames`): the length
//! prefix, the cap and the decoder of both directions. Its seed corpus in `corpus/ipc_frame`
//! is also replayed by `ipc/tests/fuzz_corpora.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_ipc::exercise_frames(data);
});
