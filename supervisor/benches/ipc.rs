//! The agent's channel, measured: how long the confined agent takes to start and say `hello`,
//! how much memory it holds idle, and (through the broker and the real file tools) the round
//! trip of a small `read_file` and the throughput of a 1 MB one.
//!
//! Run: `cargo bench -p garuda --bench ipc` (optionally `-- RUNS`, default 200). Inner
//! measurements: the broker (with the real file tools and permission engine; audit events
//! discarded) and the spawner are called as library functions in this process, the client
//! speaking the wire on a socket pair; the agent is the real `garuda agent` binary (the
//! release build `cargo bench` makes, or `GARUDA_BIN`) in its real sandbox. Targets (issue 13): start to a confined, verified `hello` ≤ 20 ms;
//! idle resident memory ≤ 15 MB; small `read_file` p50 ≤ 100 µs; 1 MB `read_file` ≥ 500 MB/s.

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;

use garuda_ipc::{
    decode, encode, read_frame, read_frame_into, AgentFrame, Answer, Limits, ModelApi,
    ModelEndpoint, Request, Start, StopReason, SupervisorFrame, UiEvent, Usage, PROTOCOL_VERSION,
};
use garuda_policy::engine::{Context, Engine};
use garuda_policy::{Flags, HostEnv};
use garuda_supervisor::agent::spawn::{spawn_agent, AgentSpawn};
use garuda_supervisor::broker::host::{CommandRunner, NoTerminal, SessionTools};
use garuda_supervisor::broker::server::{AuditSink, Broker};

mod common;
use common::{garuda_bin, p50_p90_ms as percentiles};
use garuda_supervisor::broker::FileTools;
use serde_json::Value;

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

/// Audit events go nowhere: the broker's own cost is measured, not the log's (the audit
/// benchmark measures that).
struct Discard;

impl AuditSink for Discard {
    fn record(&mut self, _: &str, _: Value) -> Result<(), String> {
        Ok(())
    }

    fn make_durable(&mut self) -> Result<(), String> {
        Ok(())
    }
}

fn start_frame() -> Start {
    Start {
        model: ModelEndpoint {
            api: ModelApi::AnthropicMessages,
            base_url: "http://127.0.0.1:9".into(),
            model: "bench".into(),
            api_key: String::new(),
            proxy: "127.0.0.1:9".into(),
        },
        limits: Limits {
            max_steps: 1,
            token_budget: 1,
            max_output_tokens: 1,
        },
        system_prompt: String::new(),
        tools: vec![],
        context_window: None,
        resume: Vec::new(),
    }
}

/// One conversation through the real broker and file tools on a socket pair: the client (this
/// thread) sends each request of `requests` and waits for its answer. Returns each round
/// trip's duration and the bytes of text answered. A fresh session per call, so no re-read is
/// answered `unchanged`.
fn round_trips(project: &Path, home: &Path, requests: Vec<Request>) -> (Vec<Duration>, u64) {
    let (mut client, server) = UnixStream::pair().expect("socketpair");
    let project = project.to_path_buf();
    let home = home.to_path_buf();
    let broker = std::thread::spawn(move || {
        let host = HostEnv::from_vars(vec![
            ("HOME".into(), home.clone().into_os_string()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ])
        .expect("host");
        let settings =
            garuda_policy::merge_texts(&[], &host, &project, &Flags::default()).expect("settings");
        let engine = Engine::new(&settings, &host, &project);
        let mut approver = NoTerminal;
        let mut tools = SessionTools::new(
            FileTools::open(&project).expect("file tools"),
            engine,
            Context::default(),
            false,
            &mut approver,
            CommandRunner {
                exe: PathBuf::from("/bin/false"),
                project: project.clone(),
                env: vec![],
                staged: false,
                staged_apply: false,
                ask_staged: false,
                ask_hosts: false,
                in_process: None,
            },
            None,
        );
        let mut broker =
            Broker::accept(server, &start_frame(), Discard, Box::new(|| {})).expect("accept");
        broker
            .turn(
                "bench",
                &mut tools,
                &mut |_: &UiEvent| {},
                &AtomicBool::new(false),
            )
            .expect("turn");
    });
    let send = |c: &mut UnixStream, f: &AgentFrame| {
        c.write_all(&encode(f).expect("encode")).expect("send")
    };
    // One reused buffer, as the agent keeps one.
    let mut inbuf = Vec::new();
    let mut receive = |c: &mut UnixStream| -> SupervisorFrame {
        assert!(read_frame_into(c, &mut inbuf).expect("read"), "a frame");
        decode(&inbuf).expect("decode")
    };
    send(
        &mut client,
        &AgentFrame::Hello {
            protocol: PROTOCOL_VERSION,
        },
    );
    receive(&mut client);
    receive(&mut client);
    let mut times = Vec::with_capacity(requests.len());
    let mut bytes = 0u64;
    for (i, request) in requests.into_iter().enumerate() {
        let t = Instant::now();
        send(
            &mut client,
            &AgentFrame::Request {
                id: i as u64,
                request,
                more: false,
            },
        );
        match receive(&mut client) {
            SupervisorFrame::Answer {
                answer: Answer::FileText { text, .. },
                ..
            } => bytes += text.len() as u64,
            other => panic!("{other:?}"),
        }
        times.push(t.elapsed());
    }
    send(
        &mut client,
        &AgentFrame::TurnEnd {
            reason: StopReason::Done,
            usage: Usage::default(),
        },
    );
    broker.join().expect("broker");
    (times, bytes)
}

fn read_request(path: String, limit: Option<u64>) -> Request {
    Request::ReadFile {
        path,
        offset: None,
        limit,
    }
}

/// Small and 1 MB `read_file` round trips through the broker.
fn broker_round_trips(runs: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    let home = dir.path().join("home");
    std::fs::create_dir_all(project.join("small")).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    for i in 0..runs {
        std::fs::write(
            project.join(format!("small/f{i}.rs")),
            "fn main() {\n    println!(\"hi\");\n}\n",
        )
        .expect("write");
    }
    // 1 MB of 80-byte lines (the answer's cap is 1 MiB of text).
    let line = format!("{}\n", "x".repeat(79));
    let big = line.repeat(1_000_000 / line.len());
    let big_files = 20;
    for i in 0..big_files {
        std::fs::write(project.join(format!("big{i}.txt")), &big).expect("write");
    }
    let small: Vec<Request> = (0..runs)
        .map(|i| read_request(format!("small/f{i}.rs"), None))
        .collect();
    let (times, _) = round_trips(&project, &home, small);
    let mut us: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(|a, b| a.total_cmp(b));
    println!(
        "broker round trip, small read_file: p50 {:.1} us, p90 {:.1} us ({runs} requests; target p50 <= 100 us)",
        us[us.len() / 2],
        us[us.len() * 9 / 10]
    );
    let mut rates = Vec::new();
    for _ in 0..5 {
        let bigs: Vec<Request> = (0..big_files)
            .map(|i| read_request(format!("big{i}.txt"), Some(100_000)))
            .collect();
        let (times, bytes) = round_trips(&project, &home, bigs);
        let secs: f64 = times.iter().map(Duration::as_secs_f64).sum();
        rates.push(bytes as f64 / secs / 1e6);
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    println!(
        "broker round trip, 1 MB read_file: median {:.0} MB/s over 5 x {big_files} reads (target >= 500 MB/s)",
        rates[rates.len() / 2]
    );
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    broker_round_trips(runs.max(100));
    let exe = garuda_bin();

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
