//! Feeds arbitrary bytes to the audit log verifier as a session file (and to the checkpoint
//! note, witness request, strict JSON and journal archive parsers) through `garuda_audit::exercise`; it must
//! never panic. Its seed corpus in `corpus/audit_verify` (valid sessions under the public fuzz
//! key, so the fuzzer reaches the code behind a good MAC) is also replayed by
//! `audit/tests/fuzz_corpus.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_audit::exercise(data);
});
