//! Settings files: where they live, their format, how each is read and how the three merge.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::host::HostEnv;
use crate::MANAGED_POLICY_PATH;

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
    /// No isolation; every command asks. Never accepted from a project file.
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

/// The kind of settings file a value came from, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceKind {
    /// [`MANAGED_POLICY_PATH`], written by the team lead.
    Managed,
    /// `$GARUDA_HOME/policy.json`, written by the developer.
    User,
    /// `<project>/.garuda/settings.json`, written by whoever wrote the repository.
    Project,
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceKind::Managed => "managed",
            SourceKind::User => "user",
            SourceKind::Project => "project",
        })
    }
}

/// Where a value came from: the kind of source and the file that was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The kind of source.
    pub kind: SourceKind,
    /// The settings file.
    pub path: PathBuf,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} settings {}", self.kind, self.path.display())
    }
}

/// The merged settings of all sources, each value with its origin.
///
/// Paths are absolute but not yet canonical: [`crate::build_exec_policy`] resolves them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EffectiveSettings {
    /// The executor to use.
    pub executor: ExecutorChoice,
    /// The file that chose the executor; `None` when no file set it (the default, `auto`).
    pub executor_origin: Option<Origin>,
    /// `sandbox.unreadable` of all sources, deduplicated (the strictest origin is kept).
    pub extra_unreadable: Vec<(PathBuf, Origin)>,
    /// `sandbox.writable` of the managed and user sources, deduplicated.
    pub extra_writable: Vec<(PathBuf, Origin)>,
    /// `env.allow` of the managed and user sources, deduplicated.
    pub env_allow: Vec<(String, Origin)>,
    /// `commands.mode`: staged when any source asks for it (staged is the stricter mode).
    pub command_mode: CommandMode,
    /// The file that made the mode staged.
    pub command_mode_origin: Option<Origin>,
    /// `staging.backend` of the strictest source that sets it.
    pub staging_backend: StagingBackend,
    /// The file that chose the staging backend.
    pub staging_backend_origin: Option<Origin>,
    /// The files actually read, strictest first.
    pub sources: Vec<Origin>,
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

/// One settings file as written. Unknown keys are errors: a misspelled deny rule must not be
/// silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsFile {
    executor: Option<ExecutorChoice>,
    sandbox: Option<SandboxSection>,
    env: Option<EnvSection>,
    commands: Option<CommandsSection>,
    staging: Option<StagingSection>,
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

/// Loads and merges the managed ([`MANAGED_POLICY_PATH`]), user (`garuda_home/policy.json`)
/// and project (`project_root/.garuda/settings.json`) files.
pub fn load_settings(
    project_root: &Path,
    host: &HostEnv,
) -> Result<EffectiveSettings, PolicyError> {
    load_settings_from(
        Path::new(MANAGED_POLICY_PATH),
        &host.garuda_home.join("policy.json"),
        &project_root.join(".garuda").join("settings.json"),
        host,
        project_root,
    )
}

/// Same as [`load_settings`] with the three file paths given. For tests: the CLI never calls
/// it, so nothing at run time can point the managed source elsewhere.
pub fn load_settings_from(
    managed: &Path,
    user: &Path,
    project: &Path,
    host: &HostEnv,
    project_root: &Path,
) -> Result<EffectiveSettings, PolicyError> {
    let mut merged = EffectiveSettings::default();
    let sources = [
        (SourceKind::Managed, managed),
        (SourceKind::User, user),
        (SourceKind::Project, project),
    ];
    for (kind, path) in sources {
        let Some(text) = read_settings_file(path)? else {
            continue;
        };
        let file = parse_settings(path, &text)?;
        let origin = Origin {
            kind,
            path: path.to_path_buf(),
        };
        if kind == SourceKind::Project {
            check_project_only_tightens(path, &file)?;
        }
        merge_file(&mut merged, file, &origin, host, project_root)?;
        merged.sources.push(origin);
    }
    Ok(merged)
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
    let too_large = |size: u64| PolicyError::SettingsTooLarge {
        path: path.to_path_buf(),
        size,
        limit: MAX_SETTINGS_BYTES,
    };
    if meta.len() > MAX_SETTINGS_BYTES {
        return Err(too_large(meta.len()));
    }
    // The cap applies to what is read too: the file may grow between `metadata` and `read`.
    let mut bytes = Vec::new();
    file.take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > MAX_SETTINGS_BYTES {
        return Err(too_large(len));
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
            column: e.column(),
            message,
        }
    })
}

/// A project file comes with the repository, so it may only make the sandbox stricter.
fn check_project_only_tightens(path: &Path, file: &SettingsFile) -> Result<(), PolicyError> {
    if file.executor == Some(ExecutorChoice::Host) {
        return Err(PolicyError::ProjectDisablesSandbox {
            path: path.to_path_buf(),
        });
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
    ];
    match widening.into_iter().find(|(_, present)| *present) {
        Some((key, _)) => Err(PolicyError::ProjectWidensSandbox {
            path: path.to_path_buf(),
            key,
        }),
        None => Ok(()),
    }
}

/// Adds one file's values. Sources arrive strictest first, so the first value set wins.
fn merge_file(
    merged: &mut EffectiveSettings,
    file: SettingsFile,
    origin: &Origin,
    host: &HostEnv,
    project_root: &Path,
) -> Result<(), PolicyError> {
    if let Some(choice) = file.executor {
        if merged.executor_origin.is_none() {
            merged.executor = choice;
            merged.executor_origin = Some(origin.clone());
        }
    }
    if file.commands.and_then(|c| c.mode) == Some(CommandMode::Staged)
        && merged.command_mode_origin.is_none()
    {
        merged.command_mode = CommandMode::Staged;
        merged.command_mode_origin = Some(origin.clone());
    }
    if let Some(backend) = file.staging.and_then(|s| s.backend) {
        if merged.staging_backend_origin.is_none() {
            merged.staging_backend = backend;
            merged.staging_backend_origin = Some(origin.clone());
        }
    }
    let sandbox = file.sandbox.unwrap_or_default();
    for raw in sandbox.unreadable.unwrap_or_default() {
        let path = resolve_setting_path(&raw, "sandbox.unreadable", origin, host, project_root)?;
        push_unique(&mut merged.extra_unreadable, path, origin);
    }
    for raw in sandbox.writable.unwrap_or_default() {
        let path = resolve_setting_path(&raw, "sandbox.writable", origin, host, project_root)?;
        push_unique(&mut merged.extra_writable, path, origin);
    }
    for name in file.env.unwrap_or_default().allow.unwrap_or_default() {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(PolicyError::InvalidEnvName {
                path: origin.path.clone(),
                value: name,
            });
        }
        push_unique(&mut merged.env_allow, name, origin);
    }
    Ok(())
}

fn push_unique<T: PartialEq>(list: &mut Vec<(T, Origin)>, value: T, origin: &Origin) {
    if !list.iter().any(|(existing, _)| *existing == value) {
        list.push((value, origin.clone()));
    }
}

/// Resolves a path entry: `~/x` is under home, a relative path is under the project root.
fn resolve_setting_path(
    raw: &str,
    key: &'static str,
    origin: &Origin,
    host: &HostEnv,
    project_root: &Path,
) -> Result<PathBuf, PolicyError> {
    let refuse = |reason: &'static str| PolicyError::InvalidSettingsPath {
        path: origin.path.clone(),
        key,
        value: raw.to_string(),
        reason,
    };
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
            PolicyError::SettingsTooLarge { path, size, limit } => {
                assert_eq!(path, files.managed());
                assert_eq!((size, limit), (MAX_SETTINGS_BYTES + 1, MAX_SETTINGS_BYTES));
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
            matches!(&err, PolicyError::ProjectDisablesSandbox { path } if *path == files.project())
        );
        assert!(err.to_string().contains("settings.json"), "{err}");
        // Even when a stricter source already chose an executor, the file itself is refused.
        write(&files.managed(), br#"{"executor": "bubblewrap"}"#);
        assert!(matches!(
            files.load().unwrap_err(),
            PolicyError::ProjectDisablesSandbox { .. }
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
                PolicyError::ProjectWidensSandbox { path, key } => {
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
                PolicyError::InvalidSettingsPath {
                    path, key, value, ..
                } => {
                    assert_eq!(path, files.project());
                    assert_eq!(key, "sandbox.unreadable");
                    assert_eq!(value, entry);
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
                PolicyError::InvalidEnvName { value, .. } if value == name
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
            format!("managed settings {}", files.managed().display())
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

    fn origin(kind: SourceKind) -> Origin {
        Origin {
            kind,
            path: PathBuf::from("/x.json"),
        }
    }

    fn merged(files: &[(&str, SourceKind)]) -> EffectiveSettings {
        let host = HostEnv::from_vars(vec![("HOME".into(), "/home/u".into())]).unwrap();
        let mut m = EffectiveSettings::default();
        for (text, kind) in files {
            let file: SettingsFile = serde_json::from_str(text).unwrap();
            merge_file(&mut m, file, &origin(*kind), &host, Path::new("/p")).unwrap();
        }
        m
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
