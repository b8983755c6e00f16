//! What `garuda sandbox` writes to the audit log: every run is a session.
//!
//! A run records, in this order: the session's start (the policy sources with the SHA-256 of
//! each file as read, the profile, the executor asked for), each refusal that stops the run,
//! the command's *intent* (argv, working folder, executor, staged or direct, the hosts it may
//! reach) written durably (`fdatasync`) **before** the command starts, the command's result
//! (exit status, duration, blocked hosts, what happened to a staged change), and the end.
//!
//! Fail closed: when the log cannot be opened or the intent cannot be written, the command
//! does not run (exit 125). A result or end that cannot be written is reported and the run
//! exits 125 too, so a script never mistakes an unrecorded run for a recorded one. Secrets in
//! argv and messages are redacted by the audit crate before anything is written.

use std::path::Path;

use anyhow::{Context, Result};
use garuda_audit::{AuditConfig, Retention, SessionWriter, WitnessConfig};
use garuda_policy::{EffectiveSettings, HostEnv};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The audit session of one `garuda sandbox` run.
pub struct Recorder {
    writer: SessionWriter,
    intent_written: bool,
}

impl Recorder {
    /// Opens the session of one of Garuda's tools (`garuda -p`, named in the start) for
    /// `project` under `host`'s Garuda home, with the witness of the policy (if any), and
    /// writes its start.
    pub fn open_tool(
        host: &HostEnv,
        project: &Path,
        settings: &EffectiveSettings,
        tool: &str,
    ) -> Result<Recorder> {
        SessionPlan::new(host, project, settings, tool).open()
    }

    /// The session of a `garuda sandbox` run, opened only when it is first needed
    /// ([`LazyRecorder::get`]).
    pub fn open_later(
        host: &HostEnv,
        project: &Path,
        settings: &EffectiveSettings,
    ) -> LazyRecorder {
        LazyRecorder {
            state: LazyState::Pending(Box::new(SessionPlan::new(
                host,
                project,
                settings,
                "garuda sandbox",
            ))),
        }
    }

    /// The session id (the log file's name).
    pub fn session_id(&self) -> &str {
        self.writer.session_id()
    }

    /// Where the session stands (lines written, the last one's hash): what this process
    /// vouches for when it verifies the log while the session is open (the chat's
    /// `/audit verify`).
    pub fn head(&self) -> garuda_audit::SessionHead {
        self.writer.head()
    }

    /// Records the command before it starts, durably.
    pub fn intent(&mut self, event: Value) -> Result<()> {
        self.write_intent(event, true)
    }

    /// Records the command before it starts, not yet durably: [`Recorder::make_durable`] must
    /// run before the command's program may start (the executor's release, see
    /// [`crate::executor::Executor::run_released`]).
    pub fn intent_unsynced(&mut self, event: Value) -> Result<()> {
        self.write_intent(event, false)
    }

    fn write_intent(&mut self, event: Value, durable: bool) -> Result<()> {
        let written = if durable {
            self.writer.append_durable("command_intent", event)
        } else {
            self.writer.append("command_intent", event)
        };
        written.context("cannot record the command's intent in the audit log: it does not run")?;
        self.intent_written = true;
        Ok(())
    }

    /// Makes every line so far durable (`fdatasync`).
    pub fn make_durable(&mut self) -> Result<()> {
        self.writer
            .make_durable()
            .context("cannot make the command's intent durable in the audit log: it does not run")
    }

    /// Whether the intent was written (a failure after it happened while running).
    pub fn intent_written(&self) -> bool {
        self.intent_written
    }

    /// Records an event (a result, a refusal).
    pub fn event(&mut self, kind: &str, event: Value) -> Result<()> {
        self.writer
            .append(kind, event)
            .with_context(|| format!("cannot record {kind} in the audit log"))?;
        Ok(())
    }

    /// Records an event durably (`fdatasync` before returning): an agent's command intent.
    pub fn durable_event(&mut self, kind: &str, event: Value) -> Result<()> {
        self.writer
            .append_durable(kind, event)
            .with_context(|| format!("cannot record {kind} in the audit log: it does not run"))?;
        Ok(())
    }

    /// Ends the session.
    pub fn close(self, end: Value) -> Result<()> {
        self.writer
            .close(end)
            .context("cannot close the audit session")?;
        Ok(())
    }
}

/// What opening a session needs: where its log is and its start event.
struct SessionPlan {
    cfg: AuditConfig,
    start: Value,
}

impl SessionPlan {
    fn new(
        host: &HostEnv,
        project: &Path,
        settings: &EffectiveSettings,
        tool: &str,
    ) -> SessionPlan {
        let mut cfg = AuditConfig::new(&host.garuda_home, project);
        cfg.witness = settings
            .audit_witness
            .as_ref()
            .map(|(argv, _)| WitnessConfig::Command(argv.clone()));
        // `audit.retention`: the oldest sessions of the lane are pruned at close, leaving
        // their sealed head (none set: everything is kept).
        let retention = Retention {
            days: settings.audit_retention_days.as_ref().map(|(d, _)| *d),
            sessions: settings.audit_retention_sessions.as_ref().map(|(n, _)| *n),
        };
        if retention.days.is_some() || retention.sessions.is_some() {
            cfg.retention = Some(retention);
        }
        let sources: Vec<Value> = settings
            .sources
            .iter()
            .map(|origin| {
                json!({
                    "source": origin.kind.to_string(),
                    "path": origin.path.display().to_string(),
                    "sha256": file_sha256(&origin.path),
                })
            })
            .collect();
        let start = json!({
            "tool": tool,
            "project": project.display().to_string(),
            "policy_sources": sources,
            "profile": settings.profile.to_string(),
            "require_sandbox": settings.require_sandbox,
            "executor_setting": settings.executor.to_string(),
        });
        SessionPlan { cfg, start }
    }

    fn open(self) -> Result<Recorder> {
        let SessionPlan { cfg, start } = self;
        let writer = SessionWriter::open(&cfg, start).with_context(|| {
            format!(
                "cannot open the audit log under {} (no command runs unrecorded)",
                cfg.audit_root.display()
            )
        })?;
        Ok(Recorder {
            writer,
            intent_written: false,
        })
    }
}

/// An audit session that opens when it is first asked for.
///
/// `garuda sandbox` in direct mode asks for it in the executor's release
/// ([`crate::executor::Executor::run_released`]): the session opens, the intent is written and
/// synced while the sandbox is being built, and the command's program starts only after all
/// three (docs/audit.md, "Syncs"). A run refused before that opens it to record the refusal.
/// An open that failed is not tried again: its error is the run's.
pub struct LazyRecorder {
    state: LazyState,
}

enum LazyState {
    Pending(Box<SessionPlan>),
    Open(Box<Recorder>),
    Failed,
}

impl LazyRecorder {
    /// The session, opened now if it is not yet. Fails when the log cannot be opened (then and
    /// at every later call: nothing runs unrecorded).
    pub fn get(&mut self) -> Result<&mut Recorder> {
        // Failed while the open runs: an error leaves it so.
        self.state = match std::mem::replace(&mut self.state, LazyState::Failed) {
            LazyState::Pending(plan) => LazyState::Open(Box::new(plan.open()?)),
            settled => settled,
        };
        match &mut self.state {
            LazyState::Open(recorder) => Ok(recorder),
            _ => Err(anyhow::anyhow!(
                "the audit log could not be opened (no command runs unrecorded)"
            )),
        }
    }

    /// Whether an open was tried and failed (its error was reported where it happened).
    pub fn failed(&self) -> bool {
        matches!(self.state, LazyState::Failed)
    }

    /// Whether the intent was written.
    pub fn intent_written(&self) -> bool {
        matches!(&self.state, LazyState::Open(r) if r.intent_written())
    }

    /// Ends the session, opening it first if nothing did (a run with nothing else to record
    /// still leaves its start and end). After a failed open there is no session to end: an
    /// error, so that no run reports success unrecorded.
    pub fn close(mut self, end: Value) -> Result<()> {
        self.get()?;
        match self.state {
            LazyState::Open(recorder) => (*recorder).close(end),
            _ => Err(anyhow::anyhow!(
                "the audit log could not be opened (no command runs unrecorded)"
            )),
        }
    }
}

/// SHA-256 of a policy file as it is now, or `null` when it cannot be read again (it was read
/// a moment ago to build the policy; the hash says which version that was, for a reviewer).
fn file_sha256(path: &Path) -> Value {
    match std::fs::read(path) {
        Ok(bytes) => {
            let digest = Sha256::digest(&bytes);
            Value::String(digest.iter().map(|b| format!("{b:02x}")).collect())
        }
        Err(_) => Value::Null,
    }
}
