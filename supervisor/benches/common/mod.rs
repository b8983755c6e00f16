//! Helpers the benchmarks share (`mod common;` in each; not a benchmark of its own).

use std::path::PathBuf;
use std::time::Duration;

/// The `garuda` binary the benchmark runs: `GARUDA_BIN` when set, else the one cargo built
/// for this benchmark (`cargo bench` builds it in the same profile).
pub fn garuda_bin() -> PathBuf {
    std::env::var_os("GARUDA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_garuda")))
}

/// Median and 90th percentile of `samples`, in milliseconds.
pub fn p50_p90_ms(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() * 9 / 10]),
    )
}
