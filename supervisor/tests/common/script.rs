//! A bash script of named steps run in one `garuda sandbox`, and what each step left behind:
//! the network suites' shared harness. Each step's stdout, stderr and exit code land in
//! `out/NAME.{o,e,x}` in the project (the command's private `/tmp` is gone after the run); a
//! curl step also writes its headers (`NAME.h`) and body (`NAME.b`).
#![allow(dead_code)] // each test binary uses a part

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{garuda, text, World, PROXY_VARS};

/// The system curl (an absolute path: the sandbox's `PATH` is not the test's).
pub const CURL: &str = "/usr/bin/curl";
/// The system bash.
pub const BASH: &str = "/usr/bin/bash";
/// What a curl step prints: the status, the proxy's CONNECT answer, new connections made.
pub const CURL_WRITE_OUT: &str = "%{http_code} %{http_connect} %{num_connects}\n";

/// Single quotes for the shell.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script being built.
#[derive(Default)]
pub struct Script {
    pub text: String,
}

impl Script {
    /// A step running `argv`.
    pub fn step(&mut self, name: &str, argv: &[&str]) -> &mut Self {
        let line: Vec<String> = argv.iter().map(|a| quote(a)).collect();
        writeln!(
            self.text,
            "{} >out/{name}.o 2>out/{name}.e; echo $? >out/{name}.x",
            line.join(" ")
        )
        .unwrap();
        self
    }

    /// `curl -q -sS --max-time 10 -D out/NAME.h -o out/NAME.b -w CURL_WRITE_OUT ARGS...`.
    pub fn curl(&mut self, name: &str, args: &[&str]) -> &mut Self {
        let headers = format!("out/{name}.h");
        let body = format!("out/{name}.b");
        let mut argv = vec![
            CURL,
            "-q",
            "-sS",
            "--max-time",
            "10",
            "-D",
            &headers,
            "-o",
            &body,
            "-w",
            CURL_WRITE_OUT,
        ];
        argv.extend_from_slice(args);
        self.step(name, &argv)
    }
}

/// One `garuda sandbox` run.
pub struct Run {
    pub executor: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub out: PathBuf,
}

/// What one step did.
#[derive(Debug)]
pub struct Step {
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
}

/// What one curl step did.
pub struct Curl {
    pub exit: i32,
    /// `%{http_code}`: the last response's status (0 when none).
    pub code: u16,
    /// `%{http_connect}`: the proxy's answer to CONNECT (0 when none was sent).
    pub connect: u16,
    /// `%{num_connects}`: new connections this transfer made (0 when it reused one).
    pub connects: u32,
    /// Every header block received, the proxy's CONNECT answer included, as sent.
    pub headers: String,
    pub body: String,
    pub stderr: String,
}

impl std::fmt::Debug for Curl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "curl exit {} code {} connect {} connects {}\n--- headers\n{}--- body\n{}\n--- stderr\n{}",
            self.exit, self.code, self.connect, self.connects, self.headers, self.body, self.stderr
        )
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "garuda sandbox --executor {} exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.executor, self.code, self.stdout, self.stderr
        )
    }
}

/// A file's text; a missing one fails the test naming it.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Run {
    /// Step `name`'s exit code and output.
    pub fn step(&self, name: &str) -> Step {
        let x = self.out.join(format!("{name}.x"));
        let exit = std::fs::read_to_string(&x)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: step {name} left no exit code ({e}): {self:?}",
                    self.executor
                )
            })
            .trim()
            .parse()
            .unwrap();
        Step {
            exit,
            stdout: read(&self.out.join(format!("{name}.o"))),
            stderr: read(&self.out.join(format!("{name}.e"))),
        }
    }

    /// Curl step `name`'s result.
    pub fn curl(&self, name: &str) -> Curl {
        let step = self.step(name);
        let mut w = step.stdout.split_whitespace().map(|v| v.parse().unwrap());
        let code = w.next().unwrap_or(0);
        let connect = w.next().unwrap_or(0);
        let connects = w.next().unwrap_or(0);
        Curl {
            exit: step.exit,
            code: u16::try_from(code).unwrap(),
            connect: u16::try_from(connect).unwrap(),
            connects,
            headers: std::fs::read_to_string(self.out.join(format!("{name}.h")))
                .unwrap_or_default(),
            body: std::fs::read_to_string(self.out.join(format!("{name}.b"))).unwrap_or_default(),
            stderr: step.stderr,
        }
    }

    /// The stderr lines that start with `prefix`, without it.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        self.stderr
            .lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(str::to_owned)
            .collect()
    }
}

/// `garuda sandbox --executor EX --timeout 60 --project P [--allow-host H]… -- bash -c SCRIPT`
/// from the project, with the fake home, `GARUDA_HOME` as given (else unset) and no proxy
/// variables. Asserts that the script ran to its end.
pub fn sandbox(
    w: &World,
    executor: &str,
    allow: &[String],
    garuda_home: Option<&Path>,
    script: &Script,
) -> Run {
    let out = w.project.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir(&out).unwrap();
    let mut command = Command::new(garuda());
    command
        .args(["sandbox", "--executor", executor, "--timeout", "60"])
        .arg("--project")
        .arg(&w.project);
    for host in allow {
        command.args(["--allow-host", host]);
    }
    command
        .args(["--", BASH, "-c"])
        .arg(format!("{}echo script-done\n", script.text))
        .current_dir(&w.project)
        .env("HOME", &w.home);
    match garuda_home {
        Some(dir) => command.env("GARUDA_HOME", dir),
        None => command.env_remove("GARUDA_HOME"),
    };
    for var in PROXY_VARS {
        command.env_remove(var);
    }
    let output = command.output().unwrap();
    let run = Run {
        executor: executor.to_owned(),
        code: output.status.code(),
        stdout: text(&output.stdout),
        stderr: text(&output.stderr),
        out,
    };
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "script-done\n", "{run:?}");
    run
}
