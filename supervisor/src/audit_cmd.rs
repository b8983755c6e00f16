//! `garuda audit`: verify, show, run a witness, export the install secret.
//!
//! Exit codes of `garuda audit verify`: 0 verified, 1 tampered, 2 cannot decide (also when the
//! evidence cannot be read at all: "cannot tell" is never "ok"). The other subcommands exit 0
//! on success and 1 on an error.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use garuda_audit::{InstallSecret, VerifyOptions, VerifyTarget, WitnessConfig};
use garuda_policy::{Flags, HostEnv};

/// What `garuda audit verify` was asked.
pub struct VerifyArgs {
    /// Machine-readable output.
    pub json: bool,
    /// The project whose log to verify (default: the git root above the current folder).
    pub project: Option<PathBuf>,
    /// Every project's log.
    pub all: bool,
    /// Exported install secrets to verify with (in addition to the one on disk).
    pub keys: Vec<PathBuf>,
    /// A witness folder (as `garuda audit witness-serve DIR` keeps it) to compare with,
    /// instead of the policy's witness command.
    pub witness_dir: Option<PathBuf>,
}

/// `garuda audit verify`; returns the exit code.
pub fn verify(args: VerifyArgs) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let audit_root = host.garuda_home.join("audit");
    let keys_dir = host.garuda_home.join("keys");
    let mut keys = Vec::new();
    if let Some(secret) = InstallSecret::load(&keys_dir)
        .with_context(|| format!("reading the install secret in {}", keys_dir.display()))?
    {
        keys.push(secret);
    }
    for file in &args.keys {
        keys.push(
            InstallSecret::read_file(file)
                .with_context(|| format!("reading the key {}", file.display()))?,
        );
    }
    let (target, project) = if args.all {
        (VerifyTarget::All(audit_root), None)
    } else {
        let cwd = std::env::current_dir().context("reading the current folder")?;
        let project = crate::cli::resolve_project(args.project, &cwd)?;
        let dir = garuda_audit::project_audit_dir(&audit_root, &project)?;
        (VerifyTarget::Project(dir), Some(project))
    };
    let mut options = VerifyOptions::new(target, keys);
    options.keys_dir = Some(keys_dir);
    options.witness = match args.witness_dir {
        Some(dir) => Some(WitnessConfig::Dir(dir)),
        None => policy_witness(&host, project.as_deref()),
    };
    let report = garuda_audit::verify(&options);
    if args.json {
        // The same value, with no raw control or bidirectional character for a terminal.
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&report.to_json())?)
        );
    } else {
        print!("{}", report.render_text());
    }
    Ok(report.outcome().exit_code())
}

/// The witness command of the effective policy, if the policy loads and names one. A policy
/// that does not load leaves verify without a witness and says so: the log is still checked.
fn policy_witness(host: &HostEnv, project: Option<&Path>) -> Option<WitnessConfig> {
    let project = project?;
    match garuda_policy::load_policy(project, host, &Flags::default()) {
        Ok(settings) => settings
            .audit_witness
            .map(|(argv, _)| WitnessConfig::Command(argv)),
        Err(e) => {
            eprintln!(
                "garuda: the policy does not load ({}); verifying without a witness",
                garuda_text::visible(&e.to_string())
            );
            None
        }
    }
}

/// `garuda audit show`: the verified lines of one session (default: the newest).
pub fn show(project: Option<PathBuf>, session: Option<String>, json: bool) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let cwd = std::env::current_dir().context("reading the current folder")?;
    let project = crate::cli::resolve_project(project, &cwd)?;
    let dir = garuda_audit::project_audit_dir(&host.garuda_home.join("audit"), &project)?;
    let keys_dir = host.garuda_home.join("keys");
    let keys: Vec<InstallSecret> = InstallSecret::load(&keys_dir)?.into_iter().collect();
    let session = match session {
        Some(s) => s,
        None => match garuda_audit::list_sessions(&dir)?.pop() {
            Some(s) => s,
            None => bail!("no audit sessions for {}", project.display()),
        },
    };
    let shown = garuda_audit::show(&dir, &session, &keys)?;
    if json {
        let out = serde_json::json!({
            "session": shown.session,
            "lines": shown.lines,
            "stopped": shown.stopped,
        });
        // The same value, with no raw control or bidirectional character for a terminal.
        println!(
            "{}",
            garuda_text::visible_json(&serde_json::to_string_pretty(&out)?)
        );
    } else {
        print!("{}", shown.render_text());
    }
    Ok(if shown.stopped.is_some() { 1 } else { 0 })
}

/// `garuda audit witness-serve DIR`: one request on stdin, the answer on stdout.
pub fn witness_serve(dir: &Path) -> Result<i32> {
    garuda_audit::witness_serve(dir, std::io::stdin().lock(), std::io::stdout().lock())?;
    Ok(0)
}

/// `garuda audit key export OUT [--remove]`.
pub fn key_export(out: &Path, remove: bool) -> Result<i32> {
    let host = HostEnv::from_process().context("reading the environment")?;
    let id = garuda_audit::key_export(&host.garuda_home.join("keys"), out, remove)?;
    println!(
        "exported install secret {} to {}",
        garuda_audit::hex(&id),
        out.display()
    );
    if remove {
        println!(
            "removed it from {}: verify with --key {}",
            host.garuda_home.join("keys").display(),
            out.display()
        );
    }
    Ok(0)
}
