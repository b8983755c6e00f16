//! `garuda agent --probe`: what the confined agent can do, tried from inside it (tests only).
//!
//! [`run`] tries each probe of a [`ProbeSpec`] and returns one [`ProbeResult`] per probe:
//! `NAME<TAB>ok<TAB>DETAIL` or `NAME<TAB>err<TAB>ERRNO_NAME`. The confined agent writes the
//! lines to its channel; the tests' `garuda-agent-probe` program runs the very same function
//! without any confinement (the negative control), where every probe succeeds.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::confine::{errno_name, status_text};
use crate::sys;

/// What to try.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeSpec {
    /// `(name, path)`: open the path for reading.
    pub opens: Vec<(String, PathBuf)>,
    /// Execute this program (`PROGRAM -c 'exit 0'`, as a child, empty environment).
    pub exec: Option<PathBuf>,
    /// `(name, address)`: a TCP connection straight to the address.
    pub tcp: Vec<(String, SocketAddr)>,
    /// `PTRACE_ATTACH` this pid (then detach).
    pub ptrace: Option<i32>,
    /// `(name, host:port)`: `CONNECT host:port` through the proxy at [`ProbeSpec::proxy`];
    /// the detail is the proxy's status code.
    pub proxy_connects: Vec<(String, String)>,
    /// The proxy (the bridge's listener, for the agent: `127.0.0.1:<--proxy-port>`).
    pub proxy: Option<SocketAddr>,
}

/// A command-line error of `--probe`.
#[derive(Debug, thiserror::Error)]
#[error("bad probe argument: {0}")]
pub struct ProbeArgError(String);

fn named<T>(
    value: Option<OsString>,
    flag: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<(String, T), ProbeArgError> {
    let v = value.ok_or_else(|| ProbeArgError(format!("{flag} needs NAME=VALUE")))?;
    let v = v
        .to_str()
        .ok_or_else(|| ProbeArgError(format!("{flag}: not UTF-8")))?;
    let (name, rest) = v
        .split_once('=')
        .ok_or_else(|| ProbeArgError(format!("{flag} {v}: needs NAME=VALUE")))?;
    let parsed = parse(rest).ok_or_else(|| ProbeArgError(format!("{flag} {v}: bad value")))?;
    Ok((name.to_string(), parsed))
}

impl ProbeSpec {
    /// Parse `--open NAME=PATH`, `--exec PATH`, `--tcp NAME=ADDR`, `--ptrace PID`,
    /// `--proxy-connect NAME=HOST:PORT`, `--proxy ADDR`.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<ProbeSpec, ProbeArgError> {
        let mut spec = ProbeSpec::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let flag = flag.to_string_lossy().into_owned();
            match flag.as_str() {
                "--open" => spec
                    .opens
                    .push(named(args.next(), &flag, |v| Some(PathBuf::from(v)))?),
                "--tcp" => spec
                    .tcp
                    .push(named(args.next(), &flag, |v| v.parse().ok())?),
                "--proxy-connect" => spec
                    .proxy_connects
                    .push(named(args.next(), &flag, |v| Some(v.to_string()))?),
                "--exec" => {
                    let v = args
                        .next()
                        .ok_or_else(|| ProbeArgError("--exec PATH".into()))?;
                    spec.exec = Some(v.into());
                }
                "--ptrace" => {
                    let v = args.next().and_then(|v| v.to_str()?.parse().ok());
                    spec.ptrace = Some(v.ok_or_else(|| ProbeArgError("--ptrace PID".into()))?);
                }
                "--proxy" => {
                    let v = args.next().and_then(|v| v.to_str()?.parse().ok());
                    spec.proxy = Some(v.ok_or_else(|| ProbeArgError("--proxy ADDR".into()))?);
                }
                other => return Err(ProbeArgError(format!("unknown argument {other}"))),
            }
        }
        Ok(spec)
    }

    /// The arguments [`ProbeSpec::parse`] reads back (without [`ProbeSpec::proxy`], which the
    /// agent sets from its `--proxy-port`).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        let mut pair = |flag: &str, value: OsString| {
            out.push(flag.into());
            out.push(value);
        };
        for (name, path) in &self.opens {
            let mut v = OsString::from(format!("{name}="));
            v.push(path);
            pair("--open", v);
        }
        if let Some(p) = &self.exec {
            pair("--exec", p.into());
        }
        for (name, addr) in &self.tcp {
            pair("--tcp", format!("{name}={addr}").into());
        }
        if let Some(pid) = self.ptrace {
            pair("--ptrace", pid.to_string().into());
        }
        for (name, target) in &self.proxy_connects {
            pair("--proxy-connect", format!("{name}={target}").into());
        }
        out
    }
}

/// One probe's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    /// The probe's name.
    pub name: String,
    /// `Ok(detail)` or `Err(errno)`.
    pub outcome: Result<String, i32>,
}

impl std::fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Ok(detail) => write!(f, "{}\tok\t{}", self.name, detail),
            Err(e) => write!(f, "{}\terr\t{}", self.name, errno_name(*e)),
        }
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn result(name: &str, outcome: Result<String, i32>) -> ProbeResult {
    ProbeResult {
        name: name.to_string(),
        outcome,
    }
}

/// `CONNECT target` through the proxy at `proxy`: the status code of its answer.
fn proxy_connect(proxy: SocketAddr, target: &str) -> Result<String, i32> {
    let mut s = TcpStream::connect(proxy).map_err(|e| errno(&e))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(request.as_bytes()).map_err(|e| errno(&e))?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") && head.len() < 1024 {
        match s.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(errno(&e)),
        }
    }
    let line = String::from_utf8_lossy(&head);
    Ok(line.split_whitespace().nth(1).unwrap_or("none").to_string())
}

/// Run every probe of `spec`; `status` is this process's `/proc/self/status` (the confined
/// agent can no longer open it and passes the copy it opened before the lock).
pub fn run(spec: &ProbeSpec, status: std::io::Result<String>) -> Vec<ProbeResult> {
    let mut out = Vec::new();
    for (name, path) in &spec.opens {
        let r = std::fs::File::open(path).map(|_| "opened".to_string());
        out.push(result(name, r.map_err(|e| errno(&e))));
    }
    if let Some(program) = &spec.exec {
        // As a child: unconfined, the exec succeeds and must not replace this process.
        // Standard streams are inherited: opening /dev/null is itself refused once confined.
        let r = Command::new(program)
            .args(["-c", "exit 0"])
            .env_clear()
            .status()
            .map(|s| format!("exit {}", s.code().unwrap_or(-1)));
        out.push(result("exec", r.map_err(|e| errno(&e))));
    }
    for (name, addr) in &spec.tcp {
        let r = TcpStream::connect(addr).map(|_| "connected".to_string());
        out.push(result(name, r.map_err(|e| errno(&e))));
    }
    if let Some(pid) = spec.ptrace {
        let r = sys::ptrace_attach_detach(pid).map(|()| "attached".to_string());
        out.push(result("ptrace", r.map_err(|e| errno(&e))));
    }
    for (name, target) in &spec.proxy_connects {
        let r = match spec.proxy {
            Some(proxy) => proxy_connect(proxy, target),
            None => Ok("no proxy".to_string()),
        };
        out.push(result(name, r));
    }
    let status = status.map_err(|e| errno(&e)).map(|s| {
        format!(
            "NoNewPrivs={} Seccomp={}",
            status_text(&s, "NoNewPrivs").unwrap_or("?"),
            status_text(&s, "Seccomp").unwrap_or("?")
        )
    });
    out.push(result("status", status));
    let keys: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .filter(|k| k.ends_with("_API_KEY"))
        .collect();
    let count = std::env::vars_os().count();
    out.push(result(
        "env",
        Ok(format!("vars={count} api_keys={}", keys.join(","))),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let spec = ProbeSpec {
            opens: vec![("project_file".into(), "/p/src/main.rs".into())],
            exec: Some("/bin/sh".into()),
            tcp: vec![("loopback".into(), "127.0.0.1:4000".parse().unwrap())],
            ptrace: Some(42),
            proxy_connects: vec![("other".into(), "127.0.0.1:9".into())],
            proxy: None,
        };
        assert_eq!(ProbeSpec::parse(spec.to_args()).unwrap(), spec);
        assert!(ProbeSpec::parse(["--nope".into()]).is_err());
    }
}
