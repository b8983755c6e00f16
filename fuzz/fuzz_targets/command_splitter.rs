//! Splits arbitrary bytes as a shell command line (`garuda_policy::command::exercise`). Its
//! seed corpus in `corpus/command_splitter` is also replayed by `policy/tests/fuzz_corpora.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_policy::command::exercise(data);
});
