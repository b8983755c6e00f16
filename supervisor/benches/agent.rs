//! `garuda -p` as a user runs it, measured from the model's side: the release `garuda` as a
//! whole process against the scripted model server on loopback (`garuda-modelserver`), which
//! records when each request arrived and when its response finished.
//!
//! Run: `cargo bench -p garuda --bench agent` (optionally `-- RUNS ROUNDS`, default 15 and 5;
//! cargo builds the release `garuda` it runs, `GARUDA_BIN` names another). Figures (issue
//! 14's targets in brackets):
//! - **start**: `garuda -p` spawned to the first model request arriving at the server [≤ 50 ms];
//! - **per step with no tool**: a `pause_turn` response finished → the request that sends the
//!   conversation again arrived: what every step costs besides its tools, most of it after
//!   "result sent" (the next request's way through the proxy);
//! - **per tool call**: a response that is one `read_file` call finished → the next request
//!   (carrying its result) arrived: the agent's decoding, the IPC request, the supervisor's
//!   tool, the answer, the agent's next request and the proxy hop, so it bounds the issue's
//!   "model's `tool_use` received to its result sent" from above [≤ 2 ms];
//! - **per `bash` call**: the same for `bash` running `true`, over the executor alone (same
//!   project, policy and command, run in this process), as the whole gap (an upper bound) and
//!   less the step with no tool [≤ the executor alone + 1 ms]; and, strictly, over the
//!   executor alone with its namespaces made ahead as the broker's are between calls
//!   (`executor::ahead`), so that what the broker saves that way is not counted;
//! - each twice: back to back, and with the model "thinking" 60 ms before each response (each
//!   `bash` call then paired with a run of the executor alone made during that pause);
//! - **resident memory** of the supervisor and the agent while the model "thinks" (a response
//!   delayed by 1.5 s): `VmRSS` of the `garuda -p` process plus the `garuda agent` process
//!   [≤ 30 MB together].

#![allow(clippy::expect_used, clippy::unwrap_used)] // benchmark code: a panic aborts the run

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use garuda_modelserver::{Dialect, ModelServer, Part, Scripted, Stop};

mod common;
use common::{garuda_bin, p50_p90_ms as median_ms};

struct World {
    _base: tempfile::TempDir,
    project: PathBuf,
    home: PathBuf,
}

fn world() -> World {
    let real_home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let parent = real_home.join(".cache/garuda-agent-bench");
    std::fs::create_dir_all(&parent).unwrap();
    let base = tempfile::tempdir_in(&parent).unwrap();
    let project = base.path().join("project");
    let home = base.path().join("home");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(project.join("README.md"), "hello\n".repeat(40)).unwrap();
    // One file per call: three identical calls in a row would stop the turn
    // (`repeated_calls`).
    for i in 0..64 {
        std::fs::write(project.join(format!("f{i}.txt")), "line\n".repeat(40)).unwrap();
    }
    let ok = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(ok.success());
    World {
        project: project.canonicalize().unwrap(),
        home,
        _base: base,
    }
}

fn run(
    exe: &Path,
    w: &World,
    server: &ModelServer,
    extra: &[&str],
) -> (Instant, std::process::Child) {
    let t = Instant::now();
    let child = Command::new(exe)
        .args(["-p", "go"])
        .args(extra)
        .current_dir(&w.project)
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GARUDA_HOME", w.home.join(".garuda"))
        .env("ANTHROPIC_API_KEY", "sk-ant-bench-0123456789")
        .env("ANTHROPIC_BASE_URL", server.url())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (t, child)
}

fn tool_call(id: String, name: &str, input: serde_json::Value) -> Scripted {
    Scripted::reply(vec![Part::ToolUse {
        id,
        name: name.into(),
        input,
    }])
    .with_usage(10, 10)
}

fn read_call(i: usize) -> Scripted {
    let path = format!("f{i}.txt");
    tool_call(
        format!("r{i}"),
        "read_file",
        serde_json::json!({ "path": path }),
    )
}

fn bash_call(i: usize) -> Scripted {
    let command = format!("true {i}");
    tool_call(
        format!("b{i}"),
        "bash",
        serde_json::json!({ "command": command }),
    )
}

/// Gaps between a response finishing and the next request arriving, for each scripted call.
fn gaps(server: &ModelServer) -> Vec<Duration> {
    let r = server.requests();
    r.windows(2)
        .map(|w| {
            w[1].arrived
                .saturating_duration_since(w[0].finished.unwrap_or(w[0].arrived))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn descendants_named(root: u32, name: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            let cmd = std::fs::read(format!("/proc/{c}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            if args.get(1).is_some_and(|a| *a == name.as_bytes()) {
                out.push(c);
            }
            todo.push(c);
        }
    }
    out
}

/// The executor alone, for the same project, policy and command, in this process: what a
/// `bash` call would cost with no agent, broker, audit or model (the baseline of the issue's
/// "≤ the executor alone + 1 ms").
struct Alone {
    selection: garuda_supervisor::executor::select::Selection,
    policy: garuda_policy::ExecPolicy,
    project: PathBuf,
}

impl Alone {
    fn new(w: &World) -> Alone {
        use garuda_supervisor::executor::select::select_executor_cached;
        let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
            ("HOME".into(), w.home.clone().into_os_string()),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            (
                "GARUDA_HOME".into(),
                w.home.join(".garuda").into_os_string(),
            ),
        ];
        let host = garuda_policy::HostEnv::from_vars(vars).unwrap();
        let settings =
            garuda_policy::load_policy(&w.project, &host, &garuda_policy::Flags::default())
                .unwrap();
        let (policy, _) =
            garuda_policy::build_exec_policy_noting(&w.project, &settings, &host).unwrap();
        let selection = select_executor_cached(settings.executor, Some(&host.garuda_home)).unwrap();
        Alone {
            selection,
            policy,
            project: w.project.clone(),
        }
    }

    /// `/bin/sh -c 'true N'` in capture mode, as the `bash` tool runs it.
    fn run(&self, n: usize) -> Duration {
        use garuda_supervisor::executor::{CommandSpec, StdioMode};
        let spec = CommandSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), format!("true {n}").into()],
            cwd: Some(self.project.clone()),
        };
        let t = Instant::now();
        let out = self
            .selection
            .executor
            .run(&spec, &self.policy, StdioMode::Capture)
            .unwrap();
        let took = t.elapsed();
        assert!(out.status.code() == 0);
        took
    }

    /// [`Alone::run`] with its user and network namespaces made ahead, as the broker's are
    /// between calls (`executor::ahead`), the helper given time to finish: the baseline of the
    /// strict figure, which does not count the namespaces made between calls as a saving.
    fn run_ahead(&self, n: usize) -> Duration {
        garuda_supervisor::executor::ahead::prepare();
        std::thread::sleep(Duration::from_millis(5));
        self.run(n)
    }
}

/// While the model "thinks" (the second pass): each scripted response waits this long before
/// it is sent, and the executor alone runs once in that time, so that each `bash` call is
/// paired with a run of the executor alone made a few milliseconds before it, in the same
/// quiet. A real model thinks for seconds: every process is idle when its answer comes.
const THINK_MS: u64 = 60;

/// One `garuda -p` session playing `script` (each entry delayed by `think_ms`, then "done"):
/// each call's gap in ms, and, with `alone` (and a delay), a run of the executor alone made
/// while the response before that gap was delayed.
fn session_paired(
    exe: &Path,
    w: &World,
    script: Vec<Scripted>,
    think_ms: u64,
    alone: Option<&Alone>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let calls = script.len();
    let mut script: Vec<Scripted> = script.into_iter().map(|s| s.delay(think_ms)).collect();
    script.push(Scripted::text("done").with_usage(1, 1));
    let server = ModelServer::start(Dialect::Anthropic, script).unwrap();
    let (_, mut child) = run(exe, w, &server, &["--max-steps", "100"]);
    let (mut alone_ms, mut ahead_ms) = (Vec::new(), Vec::new());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if let Some(alone) = alone.filter(|_| think_ms > 0) {
        for k in 1..=calls {
            assert!(server.wait_until(Duration::from_secs(30), |r| r.len() >= k));
            alone_ms.push(ms(alone.run(k)));
            ahead_ms.push(ms(alone.run_ahead(k)));
        }
    }
    assert!(child.wait().unwrap().success());
    let gaps: Vec<f64> = gaps(&server)
        .into_iter()
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    assert_eq!(gaps.len(), calls);
    // Back to back, the executor alone runs after the session, as many times.
    if let Some(alone) = alone.filter(|_| think_ms == 0) {
        alone_ms = (1..=calls).map(|k| ms(alone.run(k))).collect();
        ahead_ms = (1..=calls).map(|k| ms(alone.run_ahead(k))).collect();
    }
    (gaps, alone_ms, ahead_ms)
}

/// Each kind of step's gaps, and the executor alone's runs, over every session of a pass.
#[derive(Default)]
struct Pass {
    step: Vec<f64>,
    read: Vec<f64>,
    bash: Vec<f64>,
    alone: Vec<f64>,
    /// Each `bash` session's median gap less its executor alone's median (back to back), or
    /// each call's gap less its paired run (thinking).
    over: Vec<f64>,
    /// The executor alone with its namespaces made ahead ([`Alone::run_ahead`]).
    ahead: Vec<f64>,
    /// As `over`, against those runs.
    over_ahead: Vec<f64>,
}

impl Pass {
    fn report(&self, title: &str) {
        let (step, read) = (median(self.step.clone()), median(self.read.clone()));
        let over = median(self.over.clone());
        println!("{title}; medians:");
        println!(
            "  per step with no tool (pause_turn finished → next request arrived): {step:.2} ms"
        );
        println!("  per read_file call (response finished → next request arrived): {read:.2} ms  [target ≤ 2]");
        println!(
            "  per read_file call over a step with no tool: {:.2} ms",
            read - step
        );
        println!(
            "  per bash `true` call (same measure): {:.2} ms",
            median(self.bash.clone())
        );
        println!(
            "  the executor alone, same policy, `/bin/sh -c 'true N'`: {:.2} ms",
            median(self.alone.clone())
        );
        println!("  per bash call over the executor alone: {over:.2} ms (an upper bound: the gap also holds the step's own cost)");
        println!("  per bash call over the executor alone and a step with no tool: {:.2} ms  [target ≤ 1]", over - step);
        let over_ahead = median(self.over_ahead.clone());
        println!(
            "  the executor alone with its namespaces made ahead: {:.2} ms",
            median(self.ahead.clone())
        );
        println!(
            "  per bash call over that and a step with no tool: {:.2} ms  [the strict figure]",
            over_ahead - step
        );
    }
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    let exe = garuda_bin();
    let w = world();
    // A project Garuda has run a command in before (the first makes its `.garuda` folder), then
    // untouched for longer than the walk cache's racy margin (2 s), as a real project is when
    // a session starts: a folder changed in the last 2 s is listed again on every command
    // until it has been still that long (about +0.35 ms per `bash` call here;
    // docs/benchmarks.md).
    let server = ModelServer::start(
        Dialect::Anthropic,
        vec![bash_call(0), Scripted::text("done").with_usage(1, 1)],
    )
    .unwrap();
    assert!(run(&exe, &w, &server, &[]).1.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(2500));

    // Start: spawn to the first request.
    let mut starts = Vec::new();
    for _ in 0..runs {
        let server = ModelServer::start(
            Dialect::Anthropic,
            vec![Scripted::text("done").with_usage(1, 1)],
        )
        .unwrap();
        let (t, mut child) = run(&exe, &w, &server, &[]);
        assert!(child.wait().unwrap().success());
        let first = server
            .requests()
            .first()
            .map(|r| r.arrived)
            .expect("a request");
        starts.push(first.saturating_duration_since(t));
    }
    let (p50, p90) = median_ms(starts);
    println!("garuda -p start to the first model request: p50 {p50:.1} ms, p90 {p90:.1} ms  [target ≤ 50]");

    // The tool calls, in rounds: each round runs one session of each kind in both passes. The
    // `bash` figures over the executor alone are paired (within a session back to back, per
    // call while the model thinks); the step and `read_file` figures are medians over every
    // round, and the differences with them are taken between those medians.
    let rounds: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5)
        .max(1);
    let calls = 20;
    let alone = Alone::new(&w);
    let (mut quick, mut thinking) = (Pass::default(), Pass::default());
    for _ in 0..rounds {
        for (pass, think) in [(&mut quick, 0), (&mut thinking, THINK_MS)] {
            // Per step with no tool: a response that pauses the turn (`pause_turn`) finished →
            // the request that sends the conversation again arrived. Every step costs this
            // besides its tools: the response's last bytes through the proxy, decoding,
            // building the next request, and that request through the proxy (the part after
            // "result sent").
            let script: Vec<Scripted> = (0..calls)
                .map(|i| {
                    Scripted::text(&format!("step {i}"))
                        .with_stop(Stop::PauseTurn)
                        .with_usage(10, 10)
                })
                .collect();
            pass.step
                .extend(session_paired(&exe, &w, script, think, None).0);
            let reads = (0..calls).map(read_call).collect();
            pass.read
                .extend(session_paired(&exe, &w, reads, think, None).0);
            let bashes = (0..calls).map(bash_call).collect();
            let (gaps, alone_ms, ahead_ms) = session_paired(&exe, &w, bashes, think, Some(&alone));
            for (over, base) in [
                (&mut pass.over, &alone_ms),
                (&mut pass.over_ahead, &ahead_ms),
            ] {
                if think == 0 {
                    over.push(median(gaps.clone()) - median(base.clone()));
                } else {
                    over.extend(gaps.iter().zip(base).map(|(g, a)| g - a));
                }
            }
            pass.bash.extend(gaps);
            pass.alone.extend(alone_ms);
            pass.ahead.extend(ahead_ms);
        }
    }
    quick.report(&format!(
        "back to back: {rounds} sessions of {calls} calls of each kind, each `bash` session followed by {calls} runs of the executor alone"
    ));
    thinking.report(&format!(
        "with {THINK_MS} ms of \"thinking\" before each response: {rounds} sessions of {calls} calls of each kind, each `bash` call paired with a run of the executor alone made while the model thought"
    ));

    // Resident memory while the model thinks.
    let server = ModelServer::start(
        Dialect::Anthropic,
        vec![
            read_call(0),
            Scripted::text("done").with_usage(1, 1).delay(1500),
        ],
    )
    .unwrap();
    let (_, mut child) = run(&exe, &w, &server, &[]);
    let pid = child.id();
    let _ = server.wait_until(Duration::from_secs(10), |r| r.len() >= 2);
    std::thread::sleep(Duration::from_millis(500));
    let supervisor = rss_kb(pid);
    let agents = descendants_named(pid, "agent");
    let agent: u64 = agents.iter().map(|p| rss_kb(*p)).sum();
    assert!(child.wait().unwrap().success());
    println!(
        "resident memory while the model answers: supervisor {:.1} MB + agent {:.1} MB = {:.1} MB  [target ≤ 30]",
        supervisor as f64 / 1024.0,
        agent as f64 / 1024.0,
        (supervisor + agent) as f64 / 1024.0
    );
}
