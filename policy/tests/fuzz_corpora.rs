//! Replays the seed corpora of the fuzz targets in `fuzz/` as ordinary tests, through the same
//! functions the targets call, so a crash the fuzzer once found stays fixed without nightly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../fuzz/common/corpus.rs"]
mod corpus_files;
use corpus_files::corpus;

#[test]
fn rule_matcher_corpus() {
    for (path, data) in corpus("rule_matcher") {
        eprintln!("{}", path.display());
        garuda_policy::rule::exercise(&data);
    }
}

#[test]
fn command_splitter_corpus() {
    for (path, data) in corpus("command_splitter") {
        eprintln!("{}", path.display());
        garuda_policy::command::exercise(&data);
    }
}

#[test]
fn policy_parser_corpus() {
    for (path, data) in corpus("policy_parser") {
        eprintln!("{}", path.display());
        garuda_policy::exercise_policy(&data);
    }
}
