//! Parses arbitrary bytes as a policy file of each kind (managed, user, project) and checks the
//! merge's invariants (`garuda_policy::exercise_policy`). Its seed corpus in
//! `corpus/policy_parser` is also replayed by `policy/tests/fuzz_corpora.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_policy::exercise_policy(data);
});
