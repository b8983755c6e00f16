//! Parses arbitrary bytes as a permission rule and matches it against a fixed set of commands,
//! paths, hosts and MCP tool names (`garuda_policy::rule::exercise`). Its seed corpus in
//! `corpus/rule_matcher` is also replayed by `policy/tests/fuzz_corpora.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    garuda_policy::rule::exercise(data);
});
