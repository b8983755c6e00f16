//! Policy files: where they live, their format, how each is read and how they merge.
//!
//! Sources, strictest first: the managed file ([`MANAGED_POLICY_PATH`]) and its drop-ins
//! ([`MANAGED_DROPIN_DIR`]`/*.json`, in name order), the user file (`$GARUDA_HOME/policy.json`),
//! the project file (`<project>/.garuda/settings.json`) and the command-line [`Flags`]. Every
//! value takes the strictest source: see the crate documentation for the table.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::host::HostEnv;
use crate::locate::Positions;
use crate::network::{HostPattern, HostPatternError};
use crate::rule::Rule;
use crate::{MANAGED_DROPIN_DIR, MANAGED_POLICY_PATH};

/// Largest settings file accepted, in bytes (1 MiB). A larger one is an error, not truncated.
pub const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// Which executor runs commands. `auto` picks the strongest one available.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorChoice {
    /// The strongest executor available on this host.
    #[default]
    Auto,
    /// bubblewrap (`bwrap`) on Linux.
    Bubblewrap,
    /// Native Landlock + seccomp + namespaces on Linux.
    Landlock,
    /// `sandbox-exec` on macOS.
    Seatbelt,
    /// No isolation; every command asks. Never accepted from a project file, nor under
    /// `requireSandbox` or the strict profile.
    Host,
}

impl ExecutorChoice {
    /// The name used in settings files.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorChoice::Auto => "auto",
            ExecutorChoice::Bubblewrap => "bubblewrap",
            ExecutorChoice::Landlock => "landlock",
            ExecutorChoice::Seatbelt => "seatbelt",
            ExecutorChoice::Host => "host",
        }
    }
}

impl fmt::Display for ExecutorChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The profile. `strict` requires an OS sandbox (no host fallback, no `outside_sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Sandboxed commands where a sandbox exists; `auto` may fall back to the host executor
    /// (with a notice), and a command may ask to run outside the sandbox.
    #[default]
    Default,
    /// An OS sandbox is required: no host fallback, `executor: "host"` is an error,
    /// `outside_sandbox` does not exist, and Garuda refuses to start without a sandbox.
    Strict,
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::Default => "default",
            Profile::Strict => "strict",
        })
    }
}

/// The kind of source a value came from, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    /// [`MANAGED_POLICY_PATH`] or one of its drop-ins, written by the team lead.
    Managed,
    /// `$GARUDA_HOME/policy.json`, written by the developer.
    User,
    /// `<project>/.garuda/settings.json`, written by whoever wrote the repository.
    Project,
    /// A command-line flag; [`Origin::path`] holds the flag (`--strict`).
    Flag,
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceKind::Managed => "managed",
            SourceKind::User => "user",
            SourceKind::Project => "project",
            SourceKind::Flag => "flag",
        })
    }
}

/// Where a value came from: the kind of source, the file (or flag) and the line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The kind of source.
    pub kind: SourceKind,
    /// The settings file; for [`SourceKind::Flag`], the flag as typed (`--executor`).
    pub path: PathBuf,
    /// The line of the value in the file (1-based); `None` for a whole file or a flag.
    pub line: Option<usize>,
}

impl Origin {
    /// A whole file (no line).
    pub fn file(kind: SourceKind, path: impl Into<PathBuf>) -> Origin {
        Origin {
            kind,
            path: path.into(),
            line: None,
        }
    }

    /// A command-line flag.
    pub fn flag(flag: &str) -> Origin {
        Origin::file(SourceKind::Flag, flag)
    }

    fn at(&self, line: usize) -> Origin {
        Origin {
            line: Some(line),
            ..self.clone()
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.line) {
            (SourceKind::Flag, _) => write!(f, "command-line flag {}", self.path.display()),
            (kind, Some(line)) => write!(f, "{kind} {}:{line}", self.path.display()),
            (kind, None) => write!(f, "{kind} {}", self.path.display()),
        }
    }
}

/// Which list of `"permissions"` a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleList {
    /// `permissions.allow`: the request runs without asking.
    Allow,
    /// `permissions.ask`: the request asks even where it would be allowed.
    Ask,
    /// `permissions.deny`: the request is refused.
    Deny,
}

impl fmt::Display for RuleList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleList::Allow => "allow",
            RuleList::Ask => "ask",
            RuleList::Deny => "deny",
        })
    }
}

/// One permission rule with the list it is in and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcedRule {
    /// allow, ask or deny.
    pub list: RuleList,
    /// The parsed rule.
    pub rule: Rule,
    /// The file and line.
    pub origin: Origin,
}

/// A value of a lower source that the merge left out, and the managed file that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The dotted key (`permissions.allow`, `network.allow`).
    pub key: &'static str,
    /// The value as written.
    pub value: String,
    /// Where it was written.
    pub origin: Origin,
    /// The managed file (and line) with `managedRulesOnly` / `managedHostsOnly`.
    pub because: Origin,
}

/// The merged policy of all sources, each value with its origin.
///
/// Paths are absolute but not yet canonical: [`crate::build_exec_policy`] resolves them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EffectiveSettings {
    /// The executor to use.
    pub executor: ExecutorChoice,
    /// The source that chose the executor; `None` when nothing set it (the default, `auto`).
    pub executor_origin: Option<Origin>,
    /// The profile: strict when any source asks for it.
    pub profile: Profile,
    /// The source that made the profile strict.
    pub profile_origin: Option<Origin>,
    /// An OS sandbox is required (set by `requireSandbox: true` or implied by strict): no host
    /// executor, and no start without a sandbox.
    pub require_sandbox: bool,
    /// The source that required the sandbox.
    pub require_sandbox_origin: Option<Origin>,
    /// `sandbox.unreadable` of all sources, deduplicated (the strictest origin is kept).
    pub extra_unreadable: Vec<(PathBuf, Origin)>,
    /// `sandbox.writable` of the managed and user sources, deduplicated.
    pub extra_writable: Vec<(PathBuf, Origin)>,
    /// `env.allow` of the managed and user sources, deduplicated.
    pub env_allow: Vec<(String, Origin)>,
    /// `commands.mode`: staged when any source asks for it (staged is the stricter mode).
    pub command_mode: CommandMode,
    /// The source that made the mode staged.
    pub command_mode_origin: Option<Origin>,
    /// `staging.backend` of the strictest source that sets it.
    pub staging_backend: StagingBackend,
    /// The source that chose the staging backend.
    pub staging_backend_origin: Option<Origin>,
    /// Every permission rule in force: all deny and ask rules, and the allow rules that the
    /// managed file did not exclude.
    pub rules: Vec<SourcedRule>,
    /// The managed file that said `"managedRulesOnly": true`.
    pub managed_rules_only: Option<Origin>,
    /// The managed file that said `"managedHostsOnly": true`.
    pub managed_hosts_only: Option<Origin>,
    /// `network.allow`: hosts commands may reach through the proxy.
    pub network_allow: Vec<(HostPattern, Origin)>,
    /// `audit.checkpoint`: true when any source asks for it.
    pub audit_checkpoint: bool,
    /// The source that turned checkpoints on.
    pub audit_checkpoint_origin: Option<Origin>,
    /// `audit.witness` of the strictest policy file that sets it, as an argument vector.
    pub audit_witness: Option<(Vec<String>, Origin)>,
    /// `audit.retention.days`: the largest any managed or user file sets (keeping more is
    /// stricter, so a managed value is a minimum the user cannot lower). `None`: no limit by
    /// age (keep everything unless `sessions` is set).
    pub audit_retention_days: Option<(u64, Origin)>,
    /// `audit.retention.sessions`: the largest number of newest sessions per lane any managed
    /// or user file says to keep.
    pub audit_retention_sessions: Option<(u64, Origin)>,
    /// Values of lower sources left out because of `managedRulesOnly` / `managedHostsOnly`.
    pub dropped: Vec<Dropped>,
    /// The files actually read, strictest first.
    pub sources: Vec<Origin>,
}

impl EffectiveSettings {
    /// The rules of one list, in source order (strictest source first).
    pub fn rules_in(&self, list: RuleList) -> impl Iterator<Item = &SourcedRule> {
        self.rules.iter().filter(move |r| r.list == list)
    }

    /// True when the strict profile is in force.
    pub fn is_strict(&self) -> bool {
        self.profile == Profile::Strict
    }
}

/// How commands touch the project. The default is direct; staged is stricter, so any source
/// can turn it on and none can turn it off once a stricter source set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandMode {
    /// Commands write the project directly (inside the sandbox's limits).
    #[default]
    Direct,
    /// Commands write a staged view; the developer applies or discards the change.
    Staged,
}

/// Which staging backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StagingBackend {
    /// overlayfs where the kernel allows it, else a reflink copy, else a plain copy.
    #[default]
    Auto,
    /// overlayfs only (an error where the kernel does not allow it).
    Overlay,
    /// A copy (reflink when the filesystem has it).
    Copy,
}

/// What the command line asked for. Flags can only tighten the policy files, with one
/// exception the user types on purpose: `--allow-host` adds hosts, and is an error when the
/// managed file says `"managedHostsOnly": true`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--executor`: any sandbox, but not one other than the managed file's, and not `host`
    /// under `requireSandbox` or strict.
    pub executor: Option<ExecutorChoice>,
    /// `--staged`.
    pub staged: bool,
    /// `--strict`.
    pub strict: bool,
    /// `--allow-host`.
    pub allow_hosts: Vec<String>,
}

/// The files a policy is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePaths {
    /// The managed file.
    pub managed: PathBuf,
    /// The folder of managed drop-ins (`*.json`, merged in name order after `managed`).
    pub managed_dropins: PathBuf,
    /// The user file.
    pub user: PathBuf,
    /// The project file.
    pub project: PathBuf,
}

impl SourcePaths {
    /// The fixed managed paths, the user's `$GARUDA_HOME/policy.json` and the project's
    /// `.garuda/settings.json`.
    pub fn standard(project_root: &Path, host: &HostEnv) -> SourcePaths {
        SourcePaths {
            managed: PathBuf::from(MANAGED_POLICY_PATH),
            managed_dropins: PathBuf::from(MANAGED_DROPIN_DIR),
            user: host.garuda_home.join("policy.json"),
            project: project_root.join(".garuda").join("settings.json"),
        }
    }
}

/// One settings file as written. Unknown keys are errors: a misspelled deny rule must not be
/// silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    executor: Option<ExecutorChoice>,
    profile: Option<Profile>,
    #[serde(rename = "requireSandbox")]
    require_sandbox: Option<bool>,
    #[serde(rename = "managedRulesOnly")]
    managed_rules_only: Option<bool>,
    #[serde(rename = "managedHostsOnly")]
    managed_hosts_only: Option<bool>,
    sandbox: Option<SandboxSection>,
    env: Option<EnvSection>,
    commands: Option<CommandsSection>,
    staging: Option<StagingSection>,
    permissions: Option<PermissionsSection>,
    network: Option<NetworkSection>,
    audit: Option<AuditSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandsSection {
    mode: Option<CommandMode>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StagingSection {
    backend: Option<StagingBackend>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxSection {
    unreadable: Option<Vec<String>>,
    writable: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvSection {
    allow: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermissionsSection {
    allow: Option<Vec<String>>,
    ask: Option<Vec<String>>,
    deny: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkSection {
    allow: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditSection {
    checkpoint: Option<bool>,
    witness: Option<WitnessCommand>,
    retention: Option<RetentionSection>,
}

/// `audit.retention`: how much of the audit log to keep; sessions beyond both limits are
/// pruned, leaving their sealed head.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionSection {
    days: Option<u64>,
    sessions: Option<u64>,
}

/// `audit.witness`: a list of words, or one string split on blanks (no shell quoting: the
/// command is run as an argument vector, never through a shell).
#[derive(Debug)]
struct WitnessCommand(Vec<String>);

impl<'de> Deserialize<'de> for WitnessCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WitnessVisitor;
        impl<'de> Visitor<'de> for WitnessVisitor {
            type Value = WitnessCommand;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a command: a string, or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<WitnessCommand, E> {
                Ok(WitnessCommand(
                    v.split_ascii_whitespace().map(String::from).collect(),
                ))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WitnessCommand, A::Error> {
                let mut words = Vec::new();
                while let Some(word) = seq.next_element::<String>()? {
                    words.push(word);
                }
                Ok(WitnessCommand(words))
            }
        }
        deserializer.deserialize_any(WitnessVisitor)
    }
}

/// Loads and merges the standard sources ([`SourcePaths::standard`]) and the flags.
pub fn load_policy(
    project_root: &Path,
    host: &HostEnv,
    flags: &Flags,
) -> Result<EffectiveSettings, PolicyError> {
    load_policy_from(
        &SourcePaths::standard(project_root, host),
        host,
        project_root,
        flags,
    )
}

/// Loads and merges the standard sources with no flags.
pub fn load_settings(
    project_root: &Path,
    host: &HostEnv,
) -> Result<EffectiveSettings, PolicyError> {
    load_policy(project_root, host, &Flags::default())
}

/// Same as [`load_settings`] with the three file paths given and no drop-ins. For tests and
/// benchmarks: the CLI never calls it, so nothing at run time can point the managed source
/// elsewhere.
pub fn load_settings_from(
    managed: &Path,
    user: &Path,
    project: &Path,
    host: &HostEnv,
    project_root: &Path,
) -> Result<EffectiveSettings, PolicyError> {
    let paths = SourcePaths {
        managed: managed.to_path_buf(),
        managed_dropins: managed.with_extension("d-absent"),
        user: user.to_path_buf(),
        project: project.to_path_buf(),
    };
    load_policy_from(&paths, host, project_root, &Flags::default())
}

/// Loads and merges the given sources and flags. For tests: the CLI uses [`load_policy`].
pub fn load_policy_from(
    paths: &SourcePaths,
    host: &HostEnv,
    project_root: &Path,
    flags: &Flags,
) -> Result<EffectiveSettings, PolicyError> {
    let mut files = vec![(SourceKind::Managed, paths.managed.clone())];
    files.extend(
        managed_dropins(&paths.managed_dropins)?
            .into_iter()
            .map(|p| (SourceKind::Managed, p)),
    );
    files.push((SourceKind::User, paths.user.clone()));
    files.push((SourceKind::Project, paths.project.clone()));
    let mut texts = Vec::new();
    for (kind, path) in files {
        if let Some(text) = read_settings_file(&path)? {
            texts.push((kind, path, text));
        }
    }
    let texts: Vec<(SourceKind, &Path, &str)> = texts
        .iter()
        .map(|(k, p, t)| (*k, p.as_path(), t.as_str()))
        .collect();
    merge_texts(&texts, host, project_root, flags)
}

/// Merges already-read sources (strictest first) and the flags. Public for the property tests
/// and `garuda policy check`, which merge texts that are not at the standard paths.
pub fn merge_texts(
    texts: &[(SourceKind, &Path, &str)],
    host: &HostEnv,
    project_root: &Path,
    flags: &Flags,
) -> Result<EffectiveSettings, PolicyError> {
    let mut merged = EffectiveSettings::default();
    for (kind, path, text) in texts {
        let file = parse_settings(path, text)?;
        let source = Source {
            origin: Origin::file(*kind, *path),
            positions: Positions::scan(text),
        };
        check_source_may_set(&source, &file, &host.garuda_home.join("policy.json"))?;
        merge_file(&mut merged, file, &source, host, project_root)?;
        merged.sources.push(source.origin);
    }
    merge_flags(&mut merged, flags)?;
    enforce_sandbox_requirement(&mut merged)?;
    Ok(merged)
}

/// The managed drop-ins: regular `*.json` names not starting with `.` (editor and package
/// manager temporaries), in byte order of their names. A folder that exists but cannot be
/// listed is an error: skipping it could drop the team's rules.
fn managed_dropins(dir: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(PolicyError::SettingsRead {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| PolicyError::SettingsRead {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let bytes = name.as_encoded_bytes();
        if bytes.ends_with(b".json") && !bytes.starts_with(b".") {
            found.push(entry.path());
        }
    }
    found.sort_by(|a, b| {
        a.file_name()
            .map(|n| n.as_encoded_bytes().to_vec())
            .cmp(&b.file_name().map(|n| n.as_encoded_bytes().to_vec()))
    });
    Ok(found)
}

/// Reads one settings file; `Ok(None)` only when nothing exists at `path`.
fn read_settings_file(path: &Path) -> Result<Option<String>, PolicyError> {
    let read_error = |source: io::Error| PolicyError::SettingsRead {
        path: path.to_path_buf(),
        source,
    };
    // `symlink_metadata` so that a dangling link counts as present: a managed policy whose
    // link target vanished must stop Garuda, not silently lift the team's rules.
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
        Ok(_) => {}
    }
    // Checked before opening: opening a FIFO planted in a project would block forever.
    if !fs::metadata(path).map_err(read_error)?.is_file() {
        return Err(PolicyError::SettingsNotFile {
            path: path.to_path_buf(),
        });
    }
    let file = File::open(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(PolicyError::SettingsNotFile {
            path: path.to_path_buf(),
        });
    }
    // The cap applies to what is read: the file may grow between `metadata` and `read`.
    let mut bytes = Vec::new();
    file.take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let limit = usize::try_from(MAX_SETTINGS_BYTES).unwrap_or(usize::MAX);
    if bytes.len() > limit || meta.len() > MAX_SETTINGS_BYTES {
        // The place where the limit was crossed, so the message has a line and column like
        // every other settings error.
        let (line, column) = line_column(&bytes, limit.min(bytes.len()));
        return Err(PolicyError::SettingsTooLarge {
            path: path.to_path_buf(),
            size: meta.len().max(MAX_SETTINGS_BYTES + 1),
            limit: MAX_SETTINGS_BYTES,
            line,
            column,
        });
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        Err(e) => {
            let (line, column) = line_column(e.as_bytes(), e.utf8_error().valid_up_to());
            Err(PolicyError::SettingsNotUtf8 {
                path: path.to_path_buf(),
                line,
                column,
            })
        }
    }
}

/// 1-based line and byte column of `offset` in `bytes`.
fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = bytes.get(..offset).unwrap_or(bytes);
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |newline| newline + 1);
    (line, offset - line_start + 1)
}

fn parse_settings(path: &Path, text: &str) -> Result<SettingsFile, PolicyError> {
    serde_json::from_str(text).map_err(|e| {
        // serde_json appends " at line L column C"; the variant carries those as fields.
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        PolicyError::SettingsParse {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column().max(1),
            message,
        }
    })
}

/// A file being merged: its origin and where each of its values is written.
struct Source {
    origin: Origin,
    positions: Positions,
}

impl Source {
    /// The origin of the value at `key`, with its line.
    fn origin_of(&self, key: &str) -> Origin {
        self.origin.at(self.positions.of(key).0)
    }

    /// An error about the value at `key`.
    fn error(&self, key: &str, message: impl Into<String>) -> PolicyError {
        let (line, column) = self.positions.of(key);
        PolicyError::SettingsValue {
            path: self.origin.path.clone(),
            line,
            column,
            key: key.to_string(),
            message: message.into(),
        }
    }
}

/// Keys a source of this kind may not set. A project file comes with the repository, so it may
/// only make the policy stricter; the managed-only switches belong to the managed file alone.
/// `user_policy` is where the user's own file is (`GARUDA_HOME` moves it), named in the hint.
fn check_source_may_set(
    source: &Source,
    file: &SettingsFile,
    user_policy: &Path,
) -> Result<(), PolicyError> {
    let kind = source.origin.kind;
    if kind != SourceKind::Managed {
        for (key, present) in [
            ("managedRulesOnly", file.managed_rules_only.is_some()),
            ("managedHostsOnly", file.managed_hosts_only.is_some()),
        ] {
            if present {
                return Err(source.error(key, "only the managed policy can set this"));
            }
        }
    }
    if kind != SourceKind::Project {
        return Ok(());
    }
    if file.executor == Some(ExecutorChoice::Host) {
        return Err(source.error(
            "executor",
            "a project cannot choose the host executor: a project can only tighten the sandbox",
        ));
    }
    let widening = [
        (
            "sandbox.writable",
            file.sandbox.as_ref().is_some_and(|s| s.writable.is_some()),
        ),
        (
            "env.allow",
            file.env.as_ref().is_some_and(|e| e.allow.is_some()),
        ),
        (
            "permissions.allow",
            file.permissions.as_ref().is_some_and(|p| p.allow.is_some()),
        ),
        (
            "network.allow",
            file.network.as_ref().is_some_and(|n| n.allow.is_some()),
        ),
        (
            "audit.witness",
            file.audit.as_ref().is_some_and(|a| a.witness.is_some()),
        ),
        // Pruning the log of a project is the user's or the team's choice, never a cloned
        // repository's.
        (
            "audit.retention",
            file.audit.as_ref().is_some_and(|a| a.retention.is_some()),
        ),
    ];
    match widening.into_iter().find(|(_, present)| *present) {
        Some((key, _)) => Err(source.error(
            key,
            format!(
                "a project file cannot set this: a cloned repository must not widen the policy \
                 (put it in the user policy {} instead)",
                user_policy.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Adds one file's values. Sources arrive strictest first.
fn merge_file(
    merged: &mut EffectiveSettings,
    file: SettingsFile,
    source: &Source,
    host: &HostEnv,
    project_root: &Path,
) -> Result<(), PolicyError> {
    let kind = source.origin.kind;
    if let Some(choice) = file.executor {
        if merged.executor_origin.is_none() {
            merged.executor = choice;
            merged.executor_origin = Some(source.origin_of("executor"));
        }
    }
    if file.profile == Some(Profile::Strict) && merged.profile_origin.is_none() {
        merged.profile = Profile::Strict;
        merged.profile_origin = Some(source.origin_of("profile"));
    }
    if file.require_sandbox == Some(true) && merged.require_sandbox_origin.is_none() {
        merged.require_sandbox = true;
        merged.require_sandbox_origin = Some(source.origin_of("requireSandbox"));
    }
    if kind == SourceKind::Managed {
        if file.managed_rules_only == Some(true) && merged.managed_rules_only.is_none() {
            merged.managed_rules_only = Some(source.origin_of("managedRulesOnly"));
        }
        if file.managed_hosts_only == Some(true) && merged.managed_hosts_only.is_none() {
            merged.managed_hosts_only = Some(source.origin_of("managedHostsOnly"));
        }
    }
    if file.commands.and_then(|c| c.mode) == Some(CommandMode::Staged)
        && merged.command_mode_origin.is_none()
    {
        merged.command_mode = CommandMode::Staged;
        merged.command_mode_origin = Some(source.origin_of("commands.mode"));
    }
    if let Some(backend) = file.staging.and_then(|s| s.backend) {
        if merged.staging_backend_origin.is_none() {
            merged.staging_backend = backend;
            merged.staging_backend_origin = Some(source.origin_of("staging.backend"));
        }
    }
    let sandbox = file.sandbox.unwrap_or_default();
    for (i, raw) in sandbox.unreadable.unwrap_or_default().iter().enumerate() {
        let key = format!("sandbox.unreadable[{i}]");
        let path = resolve_setting_path(raw, &key, source, host, project_root)?;
        push_unique(&mut merged.extra_unreadable, path, source.origin_of(&key));
    }
    for (i, raw) in sandbox.writable.unwrap_or_default().iter().enumerate() {
        let key = format!("sandbox.writable[{i}]");
        let path = resolve_setting_path(raw, &key, source, host, project_root)?;
        push_unique(&mut merged.extra_writable, path, source.origin_of(&key));
    }
    for (i, name) in file
        .env
        .unwrap_or_default()
        .allow
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let key = format!("env.allow[{i}]");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(source.error(
                &key,
                format!("{name:?} is not a valid environment variable name"),
            ));
        }
        push_unique(&mut merged.env_allow, name, source.origin_of(&key));
    }
    let permissions = file.permissions.unwrap_or_default();
    for (list, name, rules) in [
        (RuleList::Deny, "deny", permissions.deny),
        (RuleList::Ask, "ask", permissions.ask),
        (RuleList::Allow, "allow", permissions.allow),
    ] {
        for (i, text) in rules.unwrap_or_default().into_iter().enumerate() {
            let key = format!("permissions.{name}[{i}]");
            let rule: Rule = text
                .parse()
                .map_err(|e: crate::rule::RuleError| source.error(&key, e.to_string()))?;
            let origin = source.origin_of(&key);
            if list == RuleList::Allow && kind != SourceKind::Managed {
                if let Some(because) = &merged.managed_rules_only {
                    merged.dropped.push(Dropped {
                        key: "permissions.allow",
                        value: rule.to_string(),
                        origin,
                        because: because.clone(),
                    });
                    continue;
                }
            }
            let exists = merged
                .rules
                .iter()
                .any(|r| r.list == list && r.rule == rule);
            if !exists {
                merged.rules.push(SourcedRule { list, rule, origin });
            }
        }
    }
    for (i, entry) in file
        .network
        .unwrap_or_default()
        .allow
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let key = format!("network.allow[{i}]");
        let entry: HostPattern = entry
            .parse()
            .map_err(|e: HostPatternError| source.error(&key, e.to_string()))?;
        let origin = source.origin_of(&key);
        if kind != SourceKind::Managed {
            if let Some(because) = &merged.managed_hosts_only {
                merged.dropped.push(Dropped {
                    key: "network.allow",
                    value: entry.to_string(),
                    origin,
                    because: because.clone(),
                });
                continue;
            }
        }
        push_unique(&mut merged.network_allow, entry, origin);
    }
    let audit = file.audit.unwrap_or_default();
    if audit.checkpoint == Some(true) && merged.audit_checkpoint_origin.is_none() {
        merged.audit_checkpoint = true;
        merged.audit_checkpoint_origin = Some(source.origin_of("audit.checkpoint"));
    }
    if let Some(WitnessCommand(argv)) = audit.witness {
        if argv.is_empty() || argv.iter().any(|w| w.is_empty() || w.contains('\0')) {
            return Err(source.error(
                "audit.witness",
                "the witness command is empty or has an empty word",
            ));
        }
        if merged.audit_witness.is_none() {
            merged.audit_witness = Some((argv, source.origin_of("audit.witness")));
        }
    }
    // Retention: keeping more is stricter, so each limit is the largest any file sets.
    if let Some(r) = audit.retention {
        for (key, value, slot) in [
            (
                "audit.retention.days",
                r.days,
                &mut merged.audit_retention_days,
            ),
            (
                "audit.retention.sessions",
                r.sessions,
                &mut merged.audit_retention_sessions,
            ),
        ] {
            let Some(v) = value else { continue };
            if v == 0 {
                return Err(source.error(key, "must be at least 1"));
            }
            if slot.as_ref().is_none_or(|(have, _)| v > *have) {
                *slot = Some((v, source.origin_of(key)));
            }
        }
    }
    Ok(())
}

/// Applies the command-line flags after every file.
fn merge_flags(merged: &mut EffectiveSettings, flags: &Flags) -> Result<(), PolicyError> {
    if flags.strict && merged.profile_origin.is_none() {
        merged.profile = Profile::Strict;
        merged.profile_origin = Some(Origin::flag("--strict"));
    }
    if flags.staged && merged.command_mode_origin.is_none() {
        merged.command_mode = CommandMode::Staged;
        merged.command_mode_origin = Some(Origin::flag("--staged"));
    }
    if let Some(choice) = flags.executor {
        if let Some(origin) = merged
            .executor_origin
            .as_ref()
            .filter(|o| o.kind == SourceKind::Managed)
        {
            if choice != merged.executor {
                return Err(PolicyError::FlagRefused {
                    flag: format!("--executor {choice}"),
                    reason: format!(
                        "the managed policy ({origin}) sets executor {}",
                        merged.executor
                    ),
                });
            }
        }
        merged.executor = choice;
        merged.executor_origin = Some(Origin::flag("--executor"));
    }
    for entry in &flags.allow_hosts {
        let entry: HostPattern =
            entry
                .parse()
                .map_err(|e: HostPatternError| PolicyError::FlagRefused {
                    flag: format!("--allow-host {entry}"),
                    reason: e.to_string(),
                })?;
        if let Some(because) = &merged.managed_hosts_only {
            return Err(PolicyError::FlagRefused {
                flag: format!("--allow-host {entry}"),
                reason: format!("the managed policy ({because}) says managedHostsOnly"),
            });
        }
        push_unique(
            &mut merged.network_allow,
            entry,
            Origin::flag("--allow-host"),
        );
    }
    Ok(())
}

/// Strict implies `requireSandbox`; under either, the host executor is an error wherever it was
/// chosen (a user file, a flag, even the managed file itself: a contradictory policy must not
/// start).
fn enforce_sandbox_requirement(merged: &mut EffectiveSettings) -> Result<(), PolicyError> {
    if merged.is_strict() && !merged.require_sandbox {
        merged.require_sandbox = true;
        merged.require_sandbox_origin = merged.profile_origin.clone();
    }
    if !merged.require_sandbox || merged.executor != ExecutorChoice::Host {
        return Ok(());
    }
    let required_by = merged
        .require_sandbox_origin
        .clone()
        .map_or_else(|| "the policy".to_string(), |o| o.to_string());
    let chosen_by = merged
        .executor_origin
        .clone()
        .map_or_else(|| "the default".to_string(), |o| o.to_string());
    Err(PolicyError::HostExecutorForbidden {
        chosen_by,
        required_by,
    })
}

fn push_unique<T: PartialEq>(list: &mut Vec<(T, Origin)>, value: T, origin: Origin) {
    if !list.iter().any(|(existing, _)| *existing == value) {
        list.push((value, origin));
    }
}

/// Resolves a path entry: `~/x` is under home, a relative path is under the project root.
fn resolve_setting_path(
    raw: &str,
    key: &str,
    source: &Source,
    host: &HostEnv,
    project_root: &Path,
) -> Result<PathBuf, PolicyError> {
    let refuse = |reason: &str| source.error(key, format!("{raw:?}: {reason}"));
    if raw.is_empty() {
        return Err(refuse("an empty path would mean the project root"));
    }
    // `..` is refused so that an entry cannot name a different place than it appears to
    // (`secrets/../../x`); a reviewer reads the entry, not its resolution.
    if Path::new(raw)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(refuse("`..` is not allowed"));
    }
    if raw == "~" {
        return Ok(host.home.clone());
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        return Ok(host.home.join(rest.trim_start_matches('/')));
    }
    if raw.starts_with('~') {
        return Err(refuse("only `~/` (the current user's home) is supported"));
    }
    let path = Path::new(raw);
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(project_root.join(path))
    }
}

/// Fuzzing entry point (the `policy_parser` target in `fuzz/`, whose corpus is also replayed
/// as a test): parses `data` as a policy file of each kind and checks the merge's invariants.
///
/// # Panics
///
/// When an invariant breaks: a project file that yields a widening value, a strict profile
/// without a required sandbox, a host executor under a required sandbox.
#[doc(hidden)]
pub fn exercise_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Positions::scan(text).of("permissions.allow[0]");
    let Ok(host) = HostEnv::from_vars(vec![("HOME".into(), "/home/fuzz".into())]) else {
        return;
    };
    for kind in [SourceKind::Managed, SourceKind::User, SourceKind::Project] {
        let texts = [(kind, Path::new("/fuzz/policy.json"), text)];
        let Ok(merged) = merge_texts(&texts, &host, Path::new("/fuzz/project"), &Flags::default())
        else {
            continue;
        };
        let _ = crate::describe::describe(&merged);
        if kind == SourceKind::Project {
            assert!(merged.rules_in(RuleList::Allow).next().is_none());
            assert!(merged.network_allow.is_empty());
            assert!(merged.extra_writable.is_empty());
            assert!(merged.env_allow.is_empty());
            assert!(merged.audit_witness.is_none());
            assert_ne!(merged.executor, ExecutorChoice::Host);
        }
        if kind != SourceKind::Managed {
            assert!(merged.managed_rules_only.is_none() && merged.managed_hosts_only.is_none());
        }
        if merged.is_strict() {
            assert!(merged.require_sandbox);
        }
        if merged.require_sandbox {
            assert_ne!(merged.executor, ExecutorChoice::Host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{fake_host, write};
    use tempfile::TempDir;

    struct Files {
        tmp: TempDir,
        host: HostEnv,
    }

    impl Files {
        fn new() -> Files {
            let tmp = TempDir::new().unwrap();
            let host = fake_host(tmp.path());
            fs::create_dir_all(tmp.path().join("project")).unwrap();
            Files { tmp, host }
        }
        fn managed(&self) -> PathBuf {
            self.tmp.path().join("etc/managed-policy.json")
        }
        fn user(&self) -> PathBuf {
            self.host.garuda_home.join("policy.json")
        }
        fn project(&self) -> PathBuf {
            self.root().join(".garuda/settings.json")
        }
        fn root(&self) -> PathBuf {
            self.tmp.path().join("project")
        }
        fn load(&self) -> Result<EffectiveSettings, PolicyError> {
            load_settings_from(
                &self.managed(),
                &self.user(),
                &self.project(),
                &self.host,
                &self.root(),
            )
        }
    }

    fn parse_error(text: &[u8]) -> PolicyError {
        let files = Files::new();
        write(&files.user(), text);
        files.load().unwrap_err()
    }

    fn assert_parse_error(err: PolicyError, want_line: usize, want_in_message: &str) {
        match err {
            PolicyError::SettingsParse {
                path,
                line,
                column,
                message,
            } => {
                assert!(path.ends_with("policy.json"), "{path:?}");
                assert_eq!(line, want_line, "{message}");
                // serde_json says column 0 when nothing on the line was consumed (empty file).
                assert!(column > 0 || message.contains("EOF"), "{message}");
                assert!(message.contains(want_in_message), "{message}");
                assert!(!message.contains(" at line "), "{message}");
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn truncated_json_reports_line_and_column() {
        let err = parse_error(b"{\n  \"executor\": \"auto\",\n  \"sandbox\": {");
        assert_parse_error(err, 3, "EOF");
    }

    #[test]
    fn unknown_key_reports_line_and_column() {
        let err = parse_error(b"{\n  \"executor\": \"auto\",\n  \"sandbx\": {}\n}");
        assert_parse_error(err, 3, "unknown field `sandbx`");
        let err = parse_error(b"{\"sandbox\": {\n \"unreadable\": [],\n \"readable\": []}}");
        assert_parse_error(err, 3, "unknown field `readable`");
    }

    #[test]
    fn wrong_type_reports_line_and_column() {
        let err = parse_error(b"{\n\n  \"executor\": 3\n}");
        assert_parse_error(err, 3, "expected value");
        let err = parse_error(b"{\"env\": {\n\"allow\": [1]}}");
        assert_parse_error(err, 2, "invalid type: integer");
        let err = parse_error(b"{\"executor\": \"Host\"}");
        assert_parse_error(err, 1, "unknown variant");
        let err = parse_error(b"{\"sandbox\": {\"unreadable\": \"/opt/keys\"}}");
        assert_parse_error(err, 1, "invalid type");
    }

    #[test]
    fn duplicate_key_reports_line_and_column() {
        let err = parse_error(b"{\n  \"executor\": \"landlock\",\n  \"executor\": \"host\"\n}");
        assert_parse_error(err, 3, "duplicate field `executor`");
    }

    #[test]
    fn empty_file_and_trailing_garbage_are_errors() {
        assert_parse_error(parse_error(b""), 1, "EOF");
        assert_parse_error(parse_error(b"{}\n{}"), 2, "trailing characters");
    }

    #[test]
    fn invalid_utf8_reports_line_and_column() {
        let err = parse_error(b"{\n  \"executor\": \"au\xfft\"\n}");
        match err {
            PolicyError::SettingsNotUtf8 { path, line, column } => {
                assert!(path.ends_with("policy.json"));
                assert_eq!((line, column), (2, 18));
            }
            other => panic!("expected a UTF-8 error, got {other:?}"),
        }
        assert_eq!(line_column(b"\xff", 0), (1, 1));
        assert_eq!(line_column(b"ab\n\ncd", 5), (3, 2));
    }

    #[test]
    fn file_over_one_mib_is_refused() {
        let files = Files::new();
        let mut text = b"{}".to_vec();
        text.resize(usize::try_from(MAX_SETTINGS_BYTES).unwrap() + 1, b' ');
        write(&files.managed(), &text);
        match files.load().unwrap_err() {
            PolicyError::SettingsTooLarge {
                path,
                size,
                limit,
                line,
                column,
            } => {
                assert_eq!(path, files.managed());
                assert_eq!((size, limit), (MAX_SETTINGS_BYTES + 1, MAX_SETTINGS_BYTES));
                assert_eq!((line, column), (1, 1024 * 1024 + 1));
            }
            other => panic!("expected too large, got {other:?}"),
        }
        // Exactly the limit is fine.
        text.pop();
        write(&files.managed(), &text);
        files.load().unwrap();
    }

    #[test]
    fn managed_file_that_cannot_be_read_is_an_error_not_absent() {
        let files = Files::new();
        fs::create_dir_all(files.managed()).unwrap();
        assert!(matches!(
            files.load().unwrap_err(),
            PolicyError::SettingsNotFile { path } if path == files.managed()
        ));

        let files = Files::new();
        fs::create_dir_all(files.managed().parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(files.tmp.path().join("gone"), files.managed()).unwrap();
        assert!(matches!(
            files.load().unwrap_err(),
            PolicyError::SettingsRead { path, .. } if path == files.managed()
        ));
    }

    #[test]
    fn missing_files_give_defaults() {
        let files = Files::new();
        let settings = files.load().unwrap();
        assert_eq!(settings, EffectiveSettings::default());
        assert_eq!(settings.executor, ExecutorChoice::Auto);
    }

    #[test]
    fn project_cannot_choose_host() {
        let files = Files::new();
        write(&files.project(), br#"{"executor": "host"}"#);
        let err = files.load().unwrap_err();
        assert!(
            matches!(&err, PolicyError::SettingsValue { path, key, line: 1, column: 14, .. }
                if *path == files.project() && key == "executor"),
            "{err:?}"
        );
        assert!(err.to_string().contains("settings.json:1:14"), "{err}");
        // Even when a stricter source already chose an executor, the file itself is refused.
        write(&files.managed(), br#"{"executor": "bubblewrap"}"#);
        assert!(matches!(
            files.load().unwrap_err(),
            PolicyError::SettingsValue { key, .. } if key == "executor"
        ));
    }

    #[test]
    fn project_cannot_widen() {
        for (text, want_key) in [
            (
                &br#"{"sandbox": {"writable": ["/opt"]}}"#[..],
                "sandbox.writable",
            ),
            (br#"{"sandbox": {"writable": []}}"#, "sandbox.writable"),
            (
                br#"{"env": {"allow": ["AWS_SECRET_ACCESS_KEY"]}}"#,
                "env.allow",
            ),
        ] {
            let files = Files::new();
            write(&files.project(), text);
            match files.load().unwrap_err() {
                PolicyError::SettingsValue { path, key, .. } => {
                    assert_eq!(path, files.project());
                    assert_eq!(key, want_key);
                }
                other => panic!("expected a widening error, got {other:?}"),
            }
        }
    }

    #[test]
    fn user_and_managed_may_widen_and_choose_host() {
        let files = Files::new();
        write(
            &files.user(),
            br#"{"executor": "host", "sandbox": {"writable": ["~/.cache/mytool", "build"]},
                 "env": {"allow": ["NPM_TOKEN"]}}"#,
        );
        write(
            &files.managed(),
            br#"{"env": {"allow": ["NPM_TOKEN", "CI_JOB_TOKEN"]}}"#,
        );
        let settings = files.load().unwrap();
        assert_eq!(settings.executor, ExecutorChoice::Host);
        let home = &files.host.home;
        let writable: Vec<_> = settings
            .extra_writable
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        assert_eq!(
            writable,
            [home.join(".cache/mytool"), files.root().join("build")]
        );
        let allow: Vec<_> = settings
            .env_allow
            .iter()
            .map(|(n, o)| (n.as_str(), o.kind))
            .collect();
        assert_eq!(
            allow,
            [
                ("NPM_TOKEN", SourceKind::Managed),
                ("CI_JOB_TOKEN", SourceKind::Managed)
            ]
        );
    }

    #[test]
    fn unreadable_is_the_union_of_all_sources() {
        let files = Files::new();
        write(
            &files.managed(),
            br#"{"sandbox": {"unreadable": ["/opt/keys"]}}"#,
        );
        write(
            &files.user(),
            br#"{"sandbox": {"unreadable": ["~/.config/secret-tool", "/opt/keys"]}}"#,
        );
        write(
            &files.project(),
            br#"{"sandbox": {"unreadable": ["secrets/prod.pem", "./certs"]}}"#,
        );
        let settings = files.load().unwrap();
        let got: Vec<_> = settings
            .extra_unreadable
            .iter()
            .map(|(p, o)| (p.clone(), o.kind))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("/opt/keys"), SourceKind::Managed),
                (
                    files.host.home.join(".config/secret-tool"),
                    SourceKind::User
                ),
                (files.root().join("secrets/prod.pem"), SourceKind::Project),
                (files.root().join("./certs"), SourceKind::Project),
            ]
        );
        let kinds: Vec<_> = settings.sources.iter().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            [SourceKind::Managed, SourceKind::User, SourceKind::Project]
        );
        assert_eq!(settings.sources[2].path, files.project());
    }

    #[test]
    fn bad_path_entries_are_refused() {
        for entry in ["", "secrets/../../x", "~/../other", "/etc/..", "~root/.ssh"] {
            let files = Files::new();
            let text = serde_json::json!({"sandbox": {"unreadable": [entry]}}).to_string();
            write(&files.project(), text.as_bytes());
            match files.load().unwrap_err() {
                PolicyError::SettingsValue {
                    path, key, message, ..
                } => {
                    assert_eq!(path, files.project());
                    assert_eq!(key, "sandbox.unreadable[0]");
                    assert!(message.contains(&format!("{entry:?}")), "{message}");
                }
                other => panic!("{entry:?}: expected a path error, got {other:?}"),
            }
        }
    }

    #[test]
    fn bad_env_names_are_refused() {
        for name in ["", "A=B", "A\u{0}B"] {
            let files = Files::new();
            let text = serde_json::json!({"env": {"allow": [name]}}).to_string();
            write(&files.user(), text.as_bytes());
            assert!(matches!(
                files.load().unwrap_err(),
                PolicyError::SettingsValue { key, message, .. }
                    if key == "env.allow[0]" && message.contains(&format!("{name:?}"))
            ));
        }
    }

    #[test]
    fn executor_comes_from_the_strictest_source_that_sets_it() {
        let files = Files::new();
        write(&files.project(), br#"{"executor": "seatbelt"}"#);
        let settings = files.load().unwrap();
        assert_eq!(settings.executor, ExecutorChoice::Seatbelt);
        assert_eq!(settings.executor_origin.unwrap().kind, SourceKind::Project);

        write(&files.user(), br#"{"executor": "landlock"}"#);
        let settings = files.load().unwrap();
        assert_eq!(settings.executor, ExecutorChoice::Landlock);
        assert_eq!(settings.executor_origin.unwrap().kind, SourceKind::User);

        write(&files.managed(), br#"{"executor": "bubblewrap"}"#);
        let settings = files.load().unwrap();
        assert_eq!(settings.executor, ExecutorChoice::Bubblewrap);
        let origin = settings.executor_origin.unwrap();
        assert_eq!(origin.kind, SourceKind::Managed);
        assert_eq!(origin.path, files.managed());
        assert_eq!(
            origin.to_string(),
            format!("managed {}:1", files.managed().display())
        );

        // A managed file that does not mention the executor leaves the user's choice.
        write(&files.managed(), br#"{"sandbox": {}}"#);
        assert_eq!(files.load().unwrap().executor, ExecutorChoice::Landlock);
    }

    #[test]
    fn names_round_trip() {
        for choice in [
            ExecutorChoice::Auto,
            ExecutorChoice::Bubblewrap,
            ExecutorChoice::Landlock,
            ExecutorChoice::Seatbelt,
            ExecutorChoice::Host,
        ] {
            let json = serde_json::to_string(&choice).unwrap();
            assert_eq!(json, format!("\"{choice}\""));
            assert_eq!(
                serde_json::from_str::<ExecutorChoice>(&json).unwrap(),
                choice
            );
        }
        assert_eq!(SourceKind::Managed.to_string(), "managed");
        assert_eq!(SourceKind::User.to_string(), "user");
        assert_eq!(SourceKind::Project.to_string(), "project");
    }
}

#[cfg(test)]
mod command_mode_tests {
    use super::*;

    fn merged(files: &[(&str, SourceKind)]) -> EffectiveSettings {
        let host = HostEnv::from_vars(vec![("HOME".into(), "/home/u".into())]).unwrap();
        let texts: Vec<_> = files
            .iter()
            .map(|(text, kind)| (*kind, Path::new("/x.json"), *text))
            .collect();
        merge_texts(&texts, &host, Path::new("/p"), &Flags::default()).unwrap()
    }

    #[test]
    fn staged_wins_from_any_source_and_direct_never_lifts_it() {
        let m = merged(&[
            (r#"{"commands": {"mode": "direct"}}"#, SourceKind::Managed),
            (r#"{"commands": {"mode": "staged"}}"#, SourceKind::Project),
        ]);
        assert_eq!(m.command_mode, CommandMode::Staged);
        assert_eq!(m.command_mode_origin.unwrap().kind, SourceKind::Project);
        let m = merged(&[
            (r#"{"commands": {"mode": "staged"}}"#, SourceKind::Managed),
            (r#"{"commands": {"mode": "direct"}}"#, SourceKind::Project),
        ]);
        assert_eq!(m.command_mode, CommandMode::Staged);
        assert_eq!(merged(&[]).command_mode, CommandMode::Direct);
    }

    #[test]
    fn backend_from_the_strictest_source_and_unknown_values_refused() {
        let m = merged(&[
            (r#"{"staging": {"backend": "copy"}}"#, SourceKind::User),
            (
                r#"{"staging": {"backend": "overlay"}}"#,
                SourceKind::Project,
            ),
        ]);
        assert_eq!(m.staging_backend, StagingBackend::Copy);
        assert!(
            serde_json::from_str::<SettingsFile>(r#"{"staging": {"backend": "zfs"}}"#).is_err()
        );
        assert!(serde_json::from_str::<SettingsFile>(r#"{"commands": {"mode": "yolo"}}"#).is_err());
        assert!(serde_json::from_str::<SettingsFile>(r#"{"commands": {"other": 1}}"#).is_err());
    }
}

#[cfg(test)]
mod policy_keys_tests {
    use super::*;
    use crate::test_support::{fake_host, write};

    fn host() -> HostEnv {
        HostEnv::from_vars(vec![("HOME".into(), "/home/u".into())]).unwrap()
    }

    fn merge_one(kind: SourceKind, text: &str) -> Result<EffectiveSettings, PolicyError> {
        merge_texts(
            &[(kind, Path::new("/f.json"), text)],
            &host(),
            Path::new("/p"),
            &Flags::default(),
        )
    }

    fn refused_key(err: PolicyError) -> String {
        match err {
            PolicyError::SettingsValue { key, .. } => key,
            other => panic!("expected a value error, got {other}"),
        }
    }

    #[test]
    fn managed_only_switches_belong_to_the_managed_file() {
        for kind in [SourceKind::User, SourceKind::Project] {
            let err = merge_one(kind, r#"{"managedRulesOnly": true}"#).unwrap_err();
            assert_eq!(refused_key(err), "managedRulesOnly");
            let err = merge_one(kind, r#"{"managedHostsOnly": false}"#).unwrap_err();
            assert_eq!(refused_key(err), "managedHostsOnly");
        }
        let m = merge_one(SourceKind::Managed, r#"{"managedRulesOnly": true}"#).unwrap();
        assert_eq!(m.managed_rules_only.unwrap().line, Some(1));
    }

    #[test]
    fn project_cannot_widen_rules_hosts_or_the_witness() {
        for (text, key) in [
            (
                r#"{"permissions": {"allow": ["Read"]}}"#,
                "permissions.allow",
            ),
            (r#"{"network": {"allow": ["crates.io"]}}"#, "network.allow"),
            (r#"{"audit": {"witness": "ssh w"}}"#, "audit.witness"),
        ] {
            assert_eq!(
                refused_key(merge_one(SourceKind::Project, text).unwrap_err()),
                key
            );
            merge_one(SourceKind::User, text).unwrap();
        }
        // Tightening keys are fine in a project.
        let p = merge_one(
            SourceKind::Project,
            r#"{"profile": "strict", "requireSandbox": true, "audit": {"checkpoint": true},
                "permissions": {"ask": ["Bash(git push *)"], "deny": ["Bash(rm *)"]}}"#,
        )
        .unwrap();
        assert!(p.is_strict() && p.require_sandbox && p.audit_checkpoint);
        assert_eq!(p.rules.len(), 2);
    }

    #[test]
    fn retention_keeps_the_most_any_file_asks_for() {
        let two = |managed: &str, user: &str| {
            merge_texts(
                &[
                    (SourceKind::Managed, Path::new("/m.json"), managed),
                    (SourceKind::User, Path::new("/u.json"), user),
                ],
                &host(),
                Path::new("/p"),
                &Flags::default(),
            )
            .unwrap()
        };
        // Managed sets a minimum the user cannot lower; the user can keep more.
        let m = two(
            r#"{"audit": {"retention": {"days": 90}}}"#,
            r#"{"audit": {"retention": {"days": 7, "sessions": 500}}}"#,
        );
        assert_eq!(m.audit_retention_days.as_ref().unwrap().0, 90);
        assert_eq!(
            m.audit_retention_days.as_ref().unwrap().1.kind,
            SourceKind::Managed
        );
        assert_eq!(m.audit_retention_sessions.as_ref().unwrap().0, 500);
        let m = two(
            r#"{"audit": {"retention": {"days": 30}}}"#,
            r#"{"audit": {"retention": {"days": 365}}}"#,
        );
        assert_eq!(m.audit_retention_days.as_ref().unwrap().0, 365);
        // Nothing set: keep everything.
        let m = merge_one(SourceKind::User, "{}").unwrap();
        assert!(m.audit_retention_days.is_none() && m.audit_retention_sessions.is_none());
        // Zero, unknown fields, and a project file are refused.
        for bad in [
            r#"{"audit": {"retention": {"days": 0}}}"#,
            r#"{"audit": {"retention": {"weeks": 2}}}"#,
        ] {
            assert!(merge_one(SourceKind::User, bad).is_err(), "{bad}");
        }
        let e = merge_one(
            SourceKind::Project,
            r#"{"audit": {"retention": {"days": 1}}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("audit.retention"), "{e}");
    }

    #[test]
    fn witness_is_an_argument_vector() {
        let m = merge_one(
            SourceKind::User,
            r#"{"audit": {"witness": "ssh  w.example garuda"}}"#,
        )
        .unwrap();
        assert_eq!(m.audit_witness.unwrap().0, ["ssh", "w.example", "garuda"]);
        let m = merge_one(SourceKind::User, r#"{"audit": {"witness": ["a b", "c"]}}"#).unwrap();
        assert_eq!(m.audit_witness.unwrap().0, ["a b", "c"]);
        for bad in [r#""""#, r#"[]"#, r#"["x", ""]"#] {
            let text = format!(r#"{{"audit": {{"witness": {bad}}}}}"#);
            assert_eq!(
                refused_key(merge_one(SourceKind::User, &text).unwrap_err()),
                "audit.witness"
            );
        }
        assert!(matches!(
            merge_one(SourceKind::User, r#"{"audit": {"witness": 3}}"#).unwrap_err(),
            PolicyError::SettingsParse { .. }
        ));
    }

    #[test]
    fn strict_implies_required_sandbox_and_refuses_host() {
        let m = merge_one(SourceKind::User, r#"{"profile": "strict"}"#).unwrap();
        assert!(m.require_sandbox);
        assert_eq!(m.require_sandbox_origin, m.profile_origin);
        let err = merge_one(
            SourceKind::Managed,
            r#"{"profile": "strict", "executor": "host"}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, PolicyError::HostExecutorForbidden { .. }),
            "{err}"
        );
    }

    #[test]
    fn flags_tighten_and_cannot_change_a_managed_executor() {
        let h = host();
        let managed = [(
            SourceKind::Managed,
            Path::new("/m.json"),
            r#"{"executor": "bubblewrap"}"#,
        )];
        let flags = Flags {
            executor: Some(ExecutorChoice::Landlock),
            ..Flags::default()
        };
        let err = merge_texts(&managed, &h, Path::new("/p"), &flags).unwrap_err();
        assert!(
            err.to_string().contains("--executor landlock is refused"),
            "{err}"
        );
        let flags = Flags {
            staged: true,
            strict: true,
            ..Flags::default()
        };
        let m = merge_texts(&managed, &h, Path::new("/p"), &flags).unwrap();
        assert_eq!(m.command_mode, CommandMode::Staged);
        assert_eq!(
            m.profile_origin.unwrap().to_string(),
            "command-line flag --strict"
        );
    }

    #[test]
    fn dropins_merge_in_name_order_after_the_managed_file() {
        let tmp = tempfile::TempDir::new().unwrap();
        let host = fake_host(tmp.path());
        let etc = tmp.path().join("etc");
        write(
            &etc.join("managed-policy.json"),
            br#"{"permissions": {"deny": ["Bash(a *)"]}}"#,
        );
        let dir = etc.join("managed-policy.d");
        write(
            &dir.join("20-b.json"),
            br#"{"executor": "bubblewrap", "permissions": {"deny": ["Bash(c *)"]}}"#,
        );
        write(
            &dir.join("10-a.json"),
            br#"{"executor": "landlock", "permissions": {"deny": ["Bash(b *)"]}}"#,
        );
        write(&dir.join("README"), b"not json, not read");
        write(&dir.join(".10-a.json.swp"), b"{{{");
        let paths = SourcePaths {
            managed: etc.join("managed-policy.json"),
            managed_dropins: dir.clone(),
            user: tmp.path().join("user.json"),
            project: tmp.path().join("project.json"),
        };
        let m = load_policy_from(&paths, &host, tmp.path(), &Flags::default()).unwrap();
        let denies: Vec<String> = m
            .rules_in(RuleList::Deny)
            .map(|r| r.rule.to_string())
            .collect();
        assert_eq!(denies, ["bash(a *)", "bash(b *)", "bash(c *)"]);
        assert_eq!(m.executor, ExecutorChoice::Landlock);
        assert!(m.executor_origin.unwrap().path.ends_with("10-a.json"));
        assert_eq!(m.sources.len(), 3);
        // A broken drop-in stops everything, naming its place.
        write(&dir.join("30-c.json"), br#"{"profile": }"#);
        let err = load_policy_from(&paths, &host, tmp.path(), &Flags::default()).unwrap_err();
        assert!(err.to_string().contains("30-c.json:1:13"), "{err}");
    }
}
