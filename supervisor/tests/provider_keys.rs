//! No model provider's key reaches a child's environment.
//!
//! - A sandboxed command: `garuda sandbox` runs with `ANTHROPIC_API_KEY`, `OPENAI_API_KEY`
//!   and `OPENAI_BASE_URL` in its environment and a user policy whose `env.allow` names all
//!   three; the command's `/proc/self/environ` holds none of them, on each Linux executor
//!   and the host one. Negative control: `NPM_TOKEN`, set and named the same way, is there.
//! - The confined agent: spawned by a supervisor whose own environment holds two keys, its
//!   environment is empty (`vars=0`). Negative control: the same probe run in the supervisor
//!   process sees both keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::process::Command;

use common::{garuda, text};

const ANT: &str = "sk-ant-api03-NotARealKeyOnlyForTests0123456789";
const OAI: &str = "sk-proj-NotARealKeyOnlyForTests0123456789";

#[test]
fn a_command_never_gets_a_provider_variable() {
    let w = common::World::new("garuda-provider-keys");
    w.git(&["init", "-q"]);
    let policy = w.home.join(".garuda/policy.json");
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    std::fs::write(
        &policy,
        r#"{"env": {"allow": ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "NPM_TOKEN"]}}"#,
    )
    .unwrap();
    for executor in ["landlock", "bubblewrap", "host"] {
        let out = Command::new(garuda())
            .args(["sandbox", "--executor", executor, "--project"])
            .arg(&w.project)
            .args(["--", "cat", "/proc/self/environ"])
            .current_dir(&w.project)
            .env("HOME", &w.home)
            .env_remove("GARUDA_HOME")
            .env("ANTHROPIC_API_KEY", ANT)
            .env("OPENAI_API_KEY", OAI)
            .env("OPENAI_BASE_URL", "https://gateway.example.com/v1")
            .env("NPM_TOKEN", "npm-token-for-the-control")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{executor}: {out:?}");
        let environ = text(&out.stdout);
        let names: Vec<&str> = environ
            .split('\0')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .collect();
        for gone in ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"] {
            assert!(!names.contains(&gone), "{executor}: {gone} in {names:?}");
        }
        assert!(!environ.contains("NotARealKey"), "{executor}: {environ}");
        // Negative control: the allowlist does pass a named variable that is not a
        // provider's, so the keys were refused by the deny list, not lost on the way.
        assert!(
            environ
                .split('\0')
                .any(|kv| kv == "NPM_TOKEN=npm-token-for-the-control"),
            "{executor}: {environ:?}"
        );
    }
}

/// Runs [`agent_environment_child`] in a fresh test process whose environment holds two
/// provider keys (setting them in this multi-threaded process would race with other tests),
/// and checks what it saw.
#[test]
fn the_agent_environment_is_empty_even_with_keys_in_the_supervisor() {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "agent_environment_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("GARUDA_TEST_AGENT_ENV_CHILD", "1")
    .env("ANTHROPIC_API_KEY", ANT)
    .env("OPENAI_API_KEY", OAI);
    let out = cmd.output().unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    // The agent saw nothing; the supervisor (the negative control) had both keys.
    assert!(
        stdout.contains("agent: env\tok\tvars=0 api_keys=\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("supervisor: env\tok\tvars=") && stdout.contains("ANTHROPIC_API_KEY"),
        "{stdout}"
    );
}

#[test]
#[ignore = "run by the_agent_environment_is_empty_even_with_keys_in_the_supervisor"]
fn agent_environment_child() {
    use garuda_supervisor::agent::probe::{run, ProbeSpec};
    use garuda_supervisor::agent::spawn::{spawn_agent, AgentExit, AgentSpawn};
    assert_eq!(
        std::env::var("GARUDA_TEST_AGENT_ENV_CHILD").as_deref(),
        Ok("1"),
        "run by the_agent_environment_is_empty_even_with_keys_in_the_supervisor only"
    );
    assert_eq!(std::env::var("ANTHROPIC_API_KEY").as_deref(), Ok(ANT));
    let mut agent = spawn_agent(AgentSpawn {
        exe: Some(garuda()),
        args: vec!["--probe".into()],
        proxy: None,
    })
    .expect("the agent starts (this machine confines it: see garuda doctor)");
    let mut lines = String::new();
    agent
        .take_channel()
        .unwrap()
        .read_to_string(&mut lines)
        .unwrap();
    let mut err = String::new();
    agent
        .take_stderr()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let exit = agent.wait().unwrap();
    assert!(matches!(exit, AgentExit::Code(0)), "{exit:?}: {err}");
    let env_line = lines.lines().find(|l| l.starts_with("env\t")).unwrap();
    println!("agent: {env_line}");
    // The same probe in this process, unconfined: the keys are in the supervisor's
    // environment, so an agent that inherited it would show them.
    let here = run(&ProbeSpec::default(), Ok(String::new()));
    let env = here.iter().find(|r| r.name == "env").unwrap();
    println!("supervisor: {env}");
    let shown = env.to_string();
    assert!(
        shown.contains("ANTHROPIC_API_KEY") && shown.contains("OPENAI_API_KEY"),
        "{shown}"
    );
}
