//! The executors' differential fuzzer under libFuzzer: the input's first 32 bytes seed the
//! case generator of `garuda_tests::diff` (the same proptest strategies as the bounded runs in
//! `tests/tests/executor_diff.rs`), and the case runs on every sandbox executor this machine
//! has, checked against the policy's model. A failing case panics with its JSON, to be saved
//! under `tests/fuzz-regressions/executor_diff/` where the ordinary tests replay it.
//!
//! `GARUDA_PROBE` must name the probe program (`cargo build -p garuda-tests` makes
//! `target/debug/garuda-probe`); see `docs/fuzzing.md`.
#![no_main]

use std::path::PathBuf;

use garuda_supervisor::executor::{probe_executors, ExecutorKind};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

struct Setup {
    probe: PathBuf,
    kinds: Vec<ExecutorKind>,
    base: PathBuf,
}

fn setup() -> &'static Setup {
    static SETUP: std::sync::OnceLock<Setup> = std::sync::OnceLock::new();
    SETUP.get_or_init(|| {
        let probe = std::env::var_os("GARUDA_PROBE")
            .map(PathBuf::from)
            .expect("GARUDA_PROBE must name garuda-probe (cargo build -p garuda-tests)");
        let kinds: Vec<ExecutorKind> = probe_executors()
            .into_iter()
            .filter(|p| p.available && p.kind.is_sandbox() && p.kind != ExecutorKind::Seatbelt)
            .map(|p| p.kind)
            .collect();
        assert!(!kinds.is_empty(), "no sandbox executor runs on this machine");
        let home = std::env::var_os("HOME").expect("HOME");
        let base = PathBuf::from(home)
            .join(".cache/garuda-diff")
            .join(format!("{}-libfuzzer", std::process::id()));
        Setup { probe, kinds, base }
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let setup = setup();
    let mut seed = [0u8; 32];
    let n = data.len().min(seed.len());
    seed[..n].copy_from_slice(&data[..n]);
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed),
    );
    let Ok(tree) = garuda_tests::diff::case().new_tree(&mut runner) else {
        return;
    };
    let case = tree.current();
    if let Err(why) =
        garuda_tests::diff::check_case(&setup.probe, "libfuzzer", &setup.kinds, &setup.base, &case)
    {
        panic!(
            "{why}\nthe case (save it under tests/fuzz-regressions/executor_diff/):\n{}",
            serde_json::to_string_pretty(&case).unwrap_or_default()
        );
    }
});
