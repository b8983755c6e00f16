//! Which model a session talks to, where, and with which key.
//!
//! # Providers
//!
//! Five are built in ([`Catalog::built_in`]):
//!
//! | provider | API | base URL | key variable | base URL variable |
//! |---|---|---|---|---|
//! | `anthropic` | Messages | `https://api.anthropic.com` | `ANTHROPIC_API_KEY` | `ANTHROPIC_BASE_URL` |
//! | `openai` | Chat Completions | `https://api.openai.com/v1` | `OPENAI_API_KEY` | `OPENAI_BASE_URL` |
//! | `ollama` | Chat Completions | `http://127.0.0.1:11434/v1` | none (no key) | — |
//! | `llamacpp` | Chat Completions | `http://127.0.0.1:8080/v1` | none (no key) | — |
//! | `openrouter` | Chat Completions | `https://openrouter.ai/api/v1` | `OPENROUTER_API_KEY` | — |
//!
//! `$GARUDA_HOME/models.json` adds providers and overrides the fields it names
//! ([`Catalog::load`]); it is parsed strictly (an unknown field is an error naming the file,
//! the JSON path and the line), and refused when someone else could have written it: it
//! decides where the keys are sent.
//!
//! # Which model
//!
//! `-m provider/model` (the caller's flag), else `GARUDA_MODEL`, else the file's `default`,
//! else [`DEFAULT_MODEL`] ([`Catalog::choose`]). `provider` alone means that provider's
//! default model. The model part may hold `/` and `:` (`openrouter/anthropic/claude-…`,
//! `ollama/qwen3-coder:30b`).
//!
//! # Where and with which key
//!
//! The SDKs' own variables are honoured as their users expect ([`Catalog::resolve`]): a set,
//! non-empty base URL variable wins over the file and the built-in URL; a set, non-empty key
//! variable wins over the credentials file, which is read only when no variable holds the key
//! ([`Credentials`]: `$GARUDA_HOME/credentials`, one `provider = key` per line, a regular file
//! of the user's with mode 0600, opened without following a link). A key is never sent over
//! plain `http` except to this machine.
//!
//! Keys live in [`ApiKey`], which never prints them and wipes them when dropped. They reach
//! the agent only in its `start` frame ([`Resolved::endpoint`]): the agent's environment is
//! empty (`agent/spawn.rs`), a command's environment never holds a provider variable
//! ([`garuda_policy::PROVIDER_ENV_DENY`], and [`Catalog::strip_provider_env`] for the
//! variables a `models.json` provider names), and the journal and the audit log pass through
//! the audit redactor.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::num::{NonZeroU32, NonZeroU64};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use garuda_ipc::{ModelApi, ModelEndpoint};
use garuda_text::visible;
use serde::Deserialize;
use zeroize::Zeroizing;

/// The model table's file name in Garuda's home.
pub const MODELS_FILE: &str = "models.json";
/// The credentials file's name in Garuda's home.
pub const CREDENTIALS_FILE: &str = "credentials";
/// The variable that names the model when `-m` does not.
pub const MODEL_VAR: &str = "GARUDA_MODEL";
/// The model when nothing names one.
pub const DEFAULT_MODEL: &str = "anthropic/claude-sonnet-4-5";
/// Largest `models.json` or credentials file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Longest key accepted.
const MAX_KEY_BYTES: usize = 4096;
/// Limits of a model of a provider added in `models.json` that says none.
const NEW_PROVIDER_LIMITS: ModelLimits = ModelLimits {
    context_window: 32_768,
    max_output_tokens: 4_096,
};

// ---------------------------------------------------------------------------------------
// The key
// ---------------------------------------------------------------------------------------

/// A provider's API key. `{:?}` and `{}` print `<redacted>`; the memory is wiped on drop.
/// Not `Clone`: one copy, handed to the agent once.
pub struct ApiKey(Zeroizing<String>);

impl ApiKey {
    /// Wraps a key (checked by the caller: [`check_key`]).
    fn new(key: String) -> ApiKey {
        ApiKey(Zeroizing::new(key))
    }

    /// The key itself, for the `start` frame and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A key is printable ASCII without spaces, 1 to 4096 bytes: it goes into an HTTP header,
/// where a line break would start another header. The message never quotes the key.
fn check_key(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("the key is empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return Err("the key is longer than 4096 bytes");
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a key is printable ASCII without spaces or control characters");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Providers and the catalog
// ---------------------------------------------------------------------------------------

/// How much a model reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Tokens of context (input and output together).
    pub context_window: u64,
    /// Most output tokens of one response (`max_tokens`).
    pub max_output_tokens: u32,
}

/// Where a provider's definition comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Garuda's own table.
    BuiltIn,
    /// `models.json` (for a built-in provider: some of its fields).
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::BuiltIn => f.write_str("built-in"),
            Origin::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One provider: an API at a base URL, with or without a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// The wire format.
    pub api: ModelApi,
    /// The base URL, without a trailing `/`.
    pub base_url: String,
    /// The variable whose value, when set and not empty, replaces [`Provider::base_url`].
    pub base_url_env: Option<String>,
    /// The variable that holds the key.
    pub key_env: Option<String>,
    /// Whether a request needs a key (a local server needs none).
    pub needs_key: bool,
    /// The model `-m provider` means.
    pub default_model: Option<String>,
    /// Limits of a model not listed in [`Provider::models`].
    pub limits: ModelLimits,
    /// Known models and their limits.
    pub models: BTreeMap<String, ModelLimits>,
    /// Where it was defined.
    pub origin: Origin,
}

/// A built-in provider.
struct BuiltIn {
    name: &'static str,
    api: ModelApi,
    base_url: &'static str,
    key_env: Option<&'static str>,
    base_url_env: Option<&'static str>,
    default_model: &'static str,
    limits: (u64, u32),
    models: &'static [(&'static str, u64, u32)],
}

const BUILT_IN: &[BuiltIn] = &[
    BuiltIn {
        name: "anthropic",
        api: ModelApi::AnthropicMessages,
        base_url: "https://api.anthropic.com",
        key_env: Some("ANTHROPIC_API_KEY"),
        base_url_env: Some("ANTHROPIC_BASE_URL"),
        default_model: "claude-sonnet-4-5",
        limits: (200_000, 32_000),
        models: &[
            ("claude-sonnet-4-5", 200_000, 64_000),
            ("claude-opus-4-1", 200_000, 32_000),
            ("claude-haiku-4-5", 200_000, 64_000),
        ],
    },
    BuiltIn {
        name: "openai",
        api: ModelApi::OpenaiChat,
        base_url: "https://api.openai.com/v1",
        key_env: Some("OPENAI_API_KEY"),
        base_url_env: Some("OPENAI_BASE_URL"),
        default_model: "gpt-4.1",
        limits: (128_000, 16_384),
        models: &[
            ("gpt-4.1", 1_047_576, 32_768),
            ("gpt-4.1-mini", 1_047_576, 32_768),
            ("gpt-5", 400_000, 128_000),
        ],
    },
    BuiltIn {
        name: "ollama",
        api: ModelApi::OpenaiChat,
        base_url: "http://127.0.0.1:11434/v1",
        key_env: None,
        base_url_env: None,
        default_model: "qwen3-coder:30b",
        limits: (32_768, 8_192),
        models: &[],
    },
    BuiltIn {
        name: "llamacpp",
        api: ModelApi::OpenaiChat,
        base_url: "http://127.0.0.1:8080/v1",
        key_env: None,
        base_url_env: None,
        // llama.cpp's server answers with the model it loaded, whatever the name.
        default_model: "default",
        limits: (32_768, 8_192),
        models: &[],
    },
    BuiltIn {
        name: "openrouter",
        api: ModelApi::OpenaiChat,
        base_url: "https://openrouter.ai/api/v1",
        key_env: Some("OPENROUTER_API_KEY"),
        base_url_env: None,
        default_model: "anthropic/claude-sonnet-4.5",
        limits: (128_000, 16_384),
        models: &[("anthropic/claude-sonnet-4.5", 200_000, 64_000)],
    },
];

/// Every provider known, and the default model reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// By name.
    pub providers: BTreeMap<String, Provider>,
    /// `models.json`'s `default`, with the file.
    pub default: Option<(String, PathBuf)>,
}

/// Where a model reference came from (named in errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefSource {
    /// The `-m` flag.
    Flag,
    /// [`MODEL_VAR`].
    Env,
    /// `models.json`'s `default`.
    File(PathBuf),
    /// [`DEFAULT_MODEL`].
    BuiltIn,
}

impl fmt::Display for RefSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefSource::Flag => f.write_str("-m"),
            RefSource::Env => f.write_str(MODEL_VAR),
            RefSource::File(path) => write!(f, "\"default\" of {}", path.display()),
            RefSource::BuiltIn => f.write_str("the built-in default"),
        }
    }
}

/// A chosen model: `provider/model`, or `provider` for its default model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    /// The provider's name.
    pub provider: String,
    /// The model; `None`: the provider's default.
    pub model: Option<String>,
    /// Who named it.
    pub from: RefSource,
}

/// Where the key came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// This variable.
    Env(String),
    /// The credentials file.
    File(PathBuf),
    /// No key (a provider that needs none).
    None,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Env(name) => write!(f, "key from {name}"),
            KeySource::File(path) => write!(f, "key from {}", path.display()),
            KeySource::None => f.write_str("no key"),
        }
    }
}

/// The model a session talks to, ready for the agent's `start` frame.
#[derive(Debug)]
pub struct Resolved {
    /// The provider's name.
    pub provider: String,
    /// The model's name.
    pub model: String,
    /// The wire format.
    pub api: ModelApi,
    /// The base URL, without a trailing `/`.
    pub base_url: String,
    /// The variable the base URL came from, when one did.
    pub base_url_from: Option<String>,
    /// The model's limits.
    pub limits: ModelLimits,
    /// The key (`None` for a provider that needs none and has none).
    pub key: Option<ApiKey>,
    /// Where the key came from.
    pub key_source: KeySource,
}

impl Resolved {
    /// `provider/model`.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    /// The agent's endpoint, key included, with `proxy` (the supervisor's proxy,
    /// `host:port`). Build it when the `start` frame is sent and drop it after.
    pub fn endpoint(&self, proxy: impl Into<String>) -> ModelEndpoint {
        ModelEndpoint {
            api: self.api,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key: self
                .key
                .as_ref()
                .map(|k| k.expose().to_owned())
                .unwrap_or_default(),
            proxy: proxy.into(),
        }
    }

    /// The host and port the base URL names (an IPv6 address in brackets, as `url` writes it).
    pub fn host_port(&self) -> Option<(String, u16)> {
        let url = url::Url::parse(&self.base_url).ok()?;
        Some((url.host_str()?.to_owned(), url.port_or_known_default()?))
    }

    /// The proxy's allowlist for the base URL: `host:port` (`[v6]:port`). For the name
    /// `localhost`, also its loopback addresses on that port: the proxy lets a name through to
    /// a loopback address only when the list names that address, and a local server's URL is
    /// often written `http://localhost:PORT`.
    pub fn allowlist_entries(&self) -> Option<Vec<String>> {
        let (host, port) = self.host_port()?;
        let mut entries = vec![format!("{host}:{port}")];
        if host.eq_ignore_ascii_case("localhost") {
            entries.push(format!("127.0.0.1:{port}"));
            entries.push(format!("[::1]:{port}"));
        }
        Some(entries)
    }
}

/// Why no model could be chosen. No variant ever holds a key.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// `models.json` could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `models.json` could have been written by someone else.
    #[error("{}: {problem}: refused (this file decides where your keys are sent)", path.display())]
    Unsafe {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// `models.json` does not parse.
    #[error("{}: {at} (line {line}, column {column}): {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The JSON path of the bad value (`providers.groq.context_window`).
        at: String,
        /// 1-based.
        line: usize,
        /// 1-based.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// `models.json` parses but a value is not usable.
    #[error("{}: {at}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The JSON path.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// A model reference is malformed.
    #[error("{from}: {message}")]
    BadReference {
        /// Who gave it.
        from: RefSource,
        /// What is wrong (the reference escaped).
        message: String,
    },
    /// The reference names no known provider.
    #[error("unknown provider {provider} (from {from}); known: {known}")]
    UnknownProvider {
        /// The name.
        provider: String,
        /// Who gave it.
        from: RefSource,
        /// The known names, comma-separated.
        known: String,
    },
    /// `-m provider` for a provider without a default model.
    #[error("provider {provider} has no default model: name one with -m {provider}/MODEL")]
    NoModel {
        /// The provider.
        provider: String,
    },
    /// A provider variable's value is not usable (the value is not shown).
    #[error("{name}: {message}")]
    BadVar {
        /// The variable.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The provider needs a key and none was found.
    #[error("no key for provider {provider}: {hint}")]
    MissingKey {
        /// The provider.
        provider: String,
        /// Where one can be put.
        hint: String,
    },
    /// A key would cross the network unencrypted.
    #[error(
        "refusing to send provider {provider}'s key over plain http to {host}: use https, or a \
         server on this machine (127.0.0.1, ::1, localhost)"
    )]
    ClearText {
        /// The provider.
        provider: String,
        /// The base URL's host.
        host: String,
    },
    /// The credentials file could not be used.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
}

// ---------------------------------------------------------------------------------------
// models.json
// ---------------------------------------------------------------------------------------

/// A provider name: 1 to 64 of lower-case letters, digits, `.`, `_`, `-`, starting with a
/// letter or digit (it is also a line's name in the credentials file).
fn check_provider_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a provider name (lower-case letters, digits, '.', '_', '-'; at most 64)",
            visible(name)
        ))
    }
}

/// A model name: 1 to 256 characters, none of them a space or a hidden character.
fn check_model_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 256 {
        return Err("a model name has 1 to 256 characters".into());
    }
    if name
        .chars()
        .any(|c| c.is_whitespace() || garuda_text::is_hidden(c))
    {
        return Err(format!(
            "{} is not a model name (no spaces or control characters)",
            visible(name)
        ));
    }
    Ok(())
}

/// A variable name: a letter or `_`, then letters, digits, `_`; at most 128.
fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!("{} is not a variable name", visible(name)))
    }
}

/// A base URL: `http` or `https`, a host, no user or password (a key belongs in the
/// credentials file, not in a URL that is printed), no query or fragment. Returned without
/// its trailing `/`.
fn check_base_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme must be https or http, not {}",
            visible(url.scheme())
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "a base URL must not hold a user or password: put the key in the credentials file"
                .into(),
        );
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a base URL has no query or fragment".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL names no host".into());
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || garuda_text::is_hidden(c))
    {
        return Err("a base URL has no spaces or control characters".into());
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// Whether a URL's host is this machine (a key may go there over plain `http`).
fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

macro_rules! checked_string {
    ($name:ident, $check:expr) => {
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
        #[serde(try_from = "String")]
        struct $name(String);

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                let check: fn(&str) -> Result<(), String> = $check;
                check(&s)?;
                Ok($name(s))
            }
        }
    };
}

checked_string!(ProviderName, check_provider_name);
checked_string!(ModelName, check_model_name);
checked_string!(EnvName, check_env_name);
checked_string!(UrlText, |s| check_base_url(s).map(|_| ()));
checked_string!(RefText, |s| parse_reference(s).map(|_| ()));

/// `models.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    /// `provider/model` used when neither `-m` nor `GARUDA_MODEL` names one.
    #[serde(default)]
    default: Option<RefText>,
    #[serde(default)]
    providers: BTreeMap<ProviderName, FileProvider>,
}

/// One provider of `models.json`: every field optional for a built-in provider (the given
/// ones replace the built-in values); `api` and `base_url` required for a new one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvider {
    #[serde(default)]
    api: Option<ModelApi>,
    #[serde(default)]
    base_url: Option<UrlText>,
    #[serde(default)]
    base_url_env: Option<EnvName>,
    #[serde(default)]
    key_env: Option<EnvName>,
    #[serde(default)]
    needs_key: Option<bool>,
    #[serde(default)]
    default_model: Option<ModelName>,
    #[serde(default)]
    context_window: Option<NonZeroU64>,
    #[serde(default)]
    max_output_tokens: Option<NonZeroU32>,
    #[serde(default)]
    models: BTreeMap<ModelName, FileModel>,
}

/// One model of `models.json`; a field not given is the provider's (or the built-in model's).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    #[serde(default)]
    context_window: Option<NonZeroU64>,
    #[serde(default)]
    max_output_tokens: Option<NonZeroU32>,
}

fn limits_with(
    base: ModelLimits,
    context_window: Option<NonZeroU64>,
    max_output_tokens: Option<NonZeroU32>,
) -> ModelLimits {
    ModelLimits {
        context_window: context_window.map_or(base.context_window, NonZeroU64::get),
        max_output_tokens: max_output_tokens.map_or(base.max_output_tokens, NonZeroU32::get),
    }
}

/// serde_json's message without its trailing " at line L column C" (said separately).
fn without_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |i| &message[..i])
}

/// Opens `path` for reading without blocking on a FIFO; `follow`: whether a link at the path
/// itself is followed.
fn open_nonblocking(path: &Path, follow: bool) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

/// Reads an opened file of at most [`MAX_FILE_BYTES`] into wiped-on-drop memory (sized
/// beforehand, so no growing leaves a copy behind). `None`: too large.
fn read_small(file: &mut File, len: u64) -> io::Result<Option<Zeroizing<Vec<u8>>>> {
    if len > MAX_FILE_BYTES {
        return Ok(None);
    }
    let cap = usize::try_from(len).unwrap_or(0) + 1;
    let mut buf = Zeroizing::new(Vec::with_capacity(cap));
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE_BYTES {
        return Ok(None);
    }
    Ok(Some(buf))
}

fn file_kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a folder"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

impl Catalog {
    /// Garuda's own table.
    pub fn built_in() -> Catalog {
        let providers = BUILT_IN
            .iter()
            .map(|b| {
                let limits = ModelLimits {
                    context_window: b.limits.0,
                    max_output_tokens: b.limits.1,
                };
                let models = b
                    .models
                    .iter()
                    .map(|(name, cw, out)| {
                        (
                            (*name).to_owned(),
                            ModelLimits {
                                context_window: *cw,
                                max_output_tokens: *out,
                            },
                        )
                    })
                    .collect();
                let provider = Provider {
                    api: b.api,
                    base_url: b.base_url.to_owned(),
                    base_url_env: b.base_url_env.map(str::to_owned),
                    key_env: b.key_env.map(str::to_owned),
                    needs_key: b.key_env.is_some(),
                    default_model: Some(b.default_model.to_owned()),
                    limits,
                    models,
                    origin: Origin::BuiltIn,
                };
                (b.name.to_owned(), provider)
            })
            .collect();
        Catalog {
            providers,
            default: None,
        }
    }

    /// The built-in table with `$GARUDA_HOME/models.json` over it (the built-in table alone
    /// when the file does not exist). The file must be a regular file of the user's that
    /// neither the group nor others can write.
    pub fn load(garuda_home: &Path) -> Result<Catalog, ModelsError> {
        let path = garuda_home.join(MODELS_FILE);
        let read_err = |source| ModelsError::Read {
            path: path.clone(),
            source,
        };
        // A link is followed (a dotfiles checkout is common); the file it leads to is checked.
        let mut file = match open_nonblocking(&path, true) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Catalog::built_in()),
            Err(e) => return Err(read_err(e)),
        };
        let meta = file.metadata().map_err(read_err)?;
        let unsafe_file = |problem: String| ModelsError::Unsafe {
            path: path.clone(),
            problem,
        };
        if !meta.file_type().is_file() {
            return Err(unsafe_file(format!(
                "it is {}",
                file_kind(meta.file_type())
            )));
        }
        let uid = crate::sys::current_uid();
        if meta.uid() != uid {
            return Err(unsafe_file(format!(
                "owned by uid {}, not by you (uid {uid})",
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(unsafe_file(format!(
                "mode {:04o} lets others change it (chmod go-w)",
                meta.mode() & 0o7777
            )));
        }
        let bytes = read_small(&mut file, meta.len())
            .map_err(read_err)?
            .ok_or_else(|| unsafe_file("larger than 1 MiB".into()))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            read_err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not UTF-8 ({e})"),
            ))
        })?;
        Catalog::from_json(text, &path)
    }

    /// The built-in table with `text` (the content of `path`, named in errors) over it.
    pub fn from_json(text: &str, path: &Path) -> Result<Catalog, ModelsError> {
        let parse_err = |e: serde_json::Error, at: String| ModelsError::Parse {
            path: path.to_path_buf(),
            at,
            line: e.line(),
            column: e.column(),
            message: without_position(&e.to_string()).to_owned(),
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let doc: FileDoc = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let at = match e.path().to_string() {
                p if p == "." => "(top level)".to_owned(),
                p => p,
            };
            parse_err(e.into_inner(), at)
        })?;
        de.end()
            .map_err(|e| parse_err(e, "(after the document)".into()))?;

        let mut catalog = Catalog::built_in();
        let origin = Origin::File(path.to_path_buf());
        for (ProviderName(name), fp) in doc.providers {
            let at = format!("providers.{name}");
            let invalid = |at: String, message: &str| ModelsError::Invalid {
                path: path.to_path_buf(),
                at,
                message: message.to_owned(),
            };
            let mut provider = match catalog.providers.remove(&name) {
                Some(p) => p,
                None => {
                    let (Some(api), Some(UrlText(base_url))) = (fp.api, fp.base_url.clone()) else {
                        return Err(invalid(
                            at,
                            "a provider that is not built in needs \"api\" and \"base_url\"",
                        ));
                    };
                    Provider {
                        api,
                        base_url,
                        base_url_env: None,
                        key_env: None,
                        needs_key: false,
                        default_model: None,
                        limits: NEW_PROVIDER_LIMITS,
                        models: BTreeMap::new(),
                        origin: origin.clone(),
                    }
                }
            };
            if let Some(api) = fp.api {
                provider.api = api;
            }
            if let Some(UrlText(url)) = fp.base_url {
                provider.base_url = url.trim_end_matches('/').to_owned();
            }
            if let Some(EnvName(v)) = fp.base_url_env {
                provider.base_url_env = Some(v);
            }
            if let Some(EnvName(v)) = fp.key_env {
                provider.key_env = Some(v);
            }
            // A new provider with a key variable needs its key unless it says otherwise.
            provider.needs_key = fp
                .needs_key
                .unwrap_or(provider.needs_key || provider.key_env.is_some());
            if let Some(ModelName(m)) = fp.default_model {
                provider.default_model = Some(m);
            }
            provider.limits = limits_with(provider.limits, fp.context_window, fp.max_output_tokens);
            if provider.limits.max_output_tokens as u64 >= provider.limits.context_window {
                return Err(invalid(
                    at,
                    "max_output_tokens must be below context_window",
                ));
            }
            for (ModelName(model), fm) in fp.models {
                let base = provider
                    .models
                    .get(&model)
                    .copied()
                    .unwrap_or(provider.limits);
                let limits = limits_with(base, fm.context_window, fm.max_output_tokens);
                if limits.max_output_tokens as u64 >= limits.context_window {
                    return Err(invalid(
                        format!("{at}.models.{model}"),
                        "max_output_tokens must be below context_window",
                    ));
                }
                provider.models.insert(model, limits);
            }
            provider.origin = origin.clone();
            catalog.providers.insert(name, provider);
        }
        catalog.default = doc.default.map(|RefText(r)| (r, path.to_path_buf()));
        Ok(catalog)
    }

    /// Every variable a provider reads (keys and base URLs), with
    /// [`garuda_policy::PROVIDER_ENV_DENY`]: none of them may reach a child.
    pub fn env_names(&self) -> BTreeSet<String> {
        self.providers
            .values()
            .flat_map(|p| p.key_env.iter().chain(p.base_url_env.iter()).cloned())
            .chain(
                garuda_policy::PROVIDER_ENV_DENY
                    .iter()
                    .map(|s| (*s).to_owned()),
            )
            .collect()
    }

    /// Removes every variable of [`Catalog::env_names`] (in any case) from `vars`: the
    /// environment of a child the supervisor starts (`garuda sandbox` for the agent's
    /// commands), which applies its own allowlist on top.
    pub fn strip_provider_env(&self, vars: &mut Vec<(OsString, OsString)>) {
        let names = self.env_names();
        vars.retain(|(k, _)| {
            !names
                .iter()
                .any(|n| k.to_str().is_some_and(|k| k.eq_ignore_ascii_case(n)))
        });
    }

    /// The model reference: `flag` (`-m`), else [`MODEL_VAR`] in `vars`, else the file's
    /// `default`, else [`DEFAULT_MODEL`].
    pub fn choose(
        &self,
        flag: Option<&str>,
        vars: &[(OsString, OsString)],
    ) -> Result<ModelRef, ModelsError> {
        let (text, from) = if let Some(flag) = flag {
            (flag.to_owned(), RefSource::Flag)
        } else if let Some(value) = var(vars, MODEL_VAR) {
            let text = value.into_string().map_err(|_| ModelsError::BadVar {
                name: MODEL_VAR.into(),
                message: "not UTF-8".into(),
            })?;
            (text, RefSource::Env)
        } else if let Some((text, path)) = &self.default {
            (text.clone(), RefSource::File(path.clone()))
        } else {
            (DEFAULT_MODEL.to_owned(), RefSource::BuiltIn)
        };
        let (provider, model) =
            parse_reference(&text).map_err(|message| ModelsError::BadReference {
                from: from.clone(),
                message,
            })?;
        Ok(ModelRef {
            provider,
            model,
            from,
        })
    }

    /// The endpoint, limits and key of `reference`. `credentials` is called only when no
    /// variable holds the key (`Ok(None)`: there is no credentials file).
    pub fn resolve(
        &self,
        reference: &ModelRef,
        vars: &[(OsString, OsString)],
        credentials: &mut dyn FnMut() -> Result<Option<Credentials>, CredentialsError>,
    ) -> Result<Resolved, ModelsError> {
        let name = &reference.provider;
        let provider = self
            .providers
            .get(name)
            .ok_or_else(|| ModelsError::UnknownProvider {
                provider: name.clone(),
                from: reference.from.clone(),
                known: self
                    .providers
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let model = reference
            .model
            .clone()
            .or_else(|| provider.default_model.clone())
            .ok_or_else(|| ModelsError::NoModel {
                provider: name.clone(),
            })?;
        let limits = provider
            .models
            .get(&model)
            .copied()
            .unwrap_or(provider.limits);

        let mut base_url = provider.base_url.clone();
        let mut base_url_from = None;
        if let Some(env) = &provider.base_url_env {
            if let Some(value) = var(vars, env) {
                let bad = |message: String| ModelsError::BadVar {
                    name: env.clone(),
                    message,
                };
                let text = value.into_string().map_err(|_| bad("not UTF-8".into()))?;
                base_url = check_base_url(&text).map_err(bad)?;
                base_url_from = Some(env.clone());
            }
        }

        let mut key = None;
        let mut key_source = KeySource::None;
        if let Some(env) = &provider.key_env {
            if let Some(value) = var(vars, env) {
                let bad = |message: &str| ModelsError::BadVar {
                    name: env.clone(),
                    message: message.to_owned(),
                };
                let text = Zeroizing::new(value.into_string().map_err(|_| bad("not UTF-8"))?);
                check_key(&text).map_err(bad)?;
                key = Some(ApiKey::new(text.to_string()));
                key_source = KeySource::Env(env.clone());
            }
        }
        if key.is_none() {
            if let Some(mut creds) = credentials()? {
                if let Some(k) = creds.keys.remove(name) {
                    key = Some(k);
                    key_source = KeySource::File(creds.path.clone());
                }
            }
        }
        if key.is_none() && provider.needs_key {
            let line =
                format!("a line `{name} = <key>` in $GARUDA_HOME/{CREDENTIALS_FILE} (mode 0600)");
            let hint = match &provider.key_env {
                Some(env) => format!("set {env}, or add {line}"),
                None => format!("add {line}"),
            };
            return Err(ModelsError::MissingKey {
                provider: name.clone(),
                hint,
            });
        }
        let url = url::Url::parse(&base_url).map_err(|e| ModelsError::BadVar {
            name: base_url_from.clone().unwrap_or_else(|| "base_url".into()),
            message: format!("not a URL ({e})"),
        })?;
        if key.is_some() && url.scheme() == "http" && !is_loopback(&url) {
            return Err(ModelsError::ClearText {
                provider: name.clone(),
                host: url.host_str().unwrap_or("").to_owned(),
            });
        }
        Ok(Resolved {
            provider: name.clone(),
            model,
            api: provider.api,
            base_url,
            base_url_from,
            limits,
            key,
            key_source,
        })
    }
}

/// A set, non-empty variable (an empty one is unset, as the SDKs read it).
fn var(vars: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    vars.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

/// `provider/model` or `provider`: the provider's name and the model, if named. The model
/// part is everything after the first `/`.
pub fn parse_reference(text: &str) -> Result<(String, Option<String>), String> {
    if text.is_empty() {
        return Err("an empty model reference (expected provider/model)".into());
    }
    let (provider, model) = match text.split_once('/') {
        Some((p, m)) => (p, Some(m)),
        None => (text, None),
    };
    check_provider_name(provider)
        .map_err(|e| format!("{e}; expected provider/model, as anthropic/claude-sonnet-4-5"))?;
    if let Some(m) = model {
        if m.is_empty() {
            return Err(format!("no model after {provider}/"));
        }
        check_model_name(m)?;
    }
    Ok((provider.to_owned(), model.map(str::to_owned)))
}

/// Chooses and resolves the model from `$GARUDA_HOME/models.json`, `flag` (`-m`) and `vars`
/// (the supervisor's environment), reading `$GARUDA_HOME/credentials` only if no variable
/// holds the key.
pub fn select(
    garuda_home: &Path,
    flag: Option<&str>,
    vars: &[(OsString, OsString)],
) -> Result<Resolved, ModelsError> {
    let catalog = Catalog::load(garuda_home)?;
    let reference = catalog.choose(flag, vars)?;
    let path = garuda_home.join(CREDENTIALS_FILE);
    catalog.resolve(&reference, vars, &mut || Credentials::load(&path))
}

// ---------------------------------------------------------------------------------------
// The credentials file
// ---------------------------------------------------------------------------------------

/// `$GARUDA_HOME/credentials`: one `provider = key` per line (spaces around `=` ignored);
/// blank lines and lines starting with `#` are skipped; one key per provider. `{:?}` shows
/// the path and the provider names only.
pub struct Credentials {
    path: PathBuf,
    keys: BTreeMap<String, ApiKey>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("path", &self.path)
            .field("providers", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why the credentials file was not used. No variant holds a key or a line of the file.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A symbolic link is at the path.
    #[error(
        "{}: is a symbolic link: refused without following it (the credentials file must be \
         a regular file in Garuda's home)",
        path.display()
    )]
    Symlink {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Not a regular file.
    #[error("{}: is {kind}, not a regular file: refused", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Someone else owns it.
    #[error("{}: owned by uid {owner}, not by you (uid {uid}): refused", path.display())]
    NotOwner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's user.
        uid: u32,
    },
    /// Others may read or change it.
    #[error(
        "{}: mode {mode:04o} lets others read or change it: refused; it must be 0600 \
         (chmod 600 {})",
        path.display(),
        path.display()
    )]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Larger than 1 MiB.
    #[error("{}: larger than 1 MiB: refused", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A line is malformed (the line itself is not shown: it may hold a key).
    #[error("{}:{line}: {problem} (the line is not shown: it may hold a key)", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// What is wrong.
        problem: &'static str,
    },
    /// A provider has two keys.
    #[error("{}:{line}: a second key for provider {provider}", path.display())]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// The provider.
        provider: String,
    },
}

/// What is wrong with a credentials file's owner and mode, or `None`.
fn credentials_problem(path: &Path, owner: u32, mode: u32, uid: u32) -> Option<CredentialsError> {
    if owner != uid {
        return Some(CredentialsError::NotOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    // 0600 or stricter: no bit for the group or others, no set-id bits.
    if mode & 0o7077 != 0 {
        return Some(CredentialsError::Mode {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    None
}

impl Credentials {
    /// Reads the file at `path` (`Ok(None)` when nothing is there). Opened with
    /// `O_NOFOLLOW` (a link is refused, not followed) and without blocking (a FIFO is
    /// refused, not waited on); then it must be a regular file of this user with no
    /// permission for the group or others.
    pub fn load(path: &Path) -> Result<Option<Credentials>, CredentialsError> {
        let read_err = |source| CredentialsError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match open_nonblocking(path, false) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(CredentialsError::Symlink {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(read_err(e)),
        };
        let meta = file.metadata().map_err(read_err)?;
        if !meta.file_type().is_file() {
            return Err(CredentialsError::NotRegular {
                path: path.to_path_buf(),
                kind: file_kind(meta.file_type()),
            });
        }
        if let Some(problem) =
            credentials_problem(path, meta.uid(), meta.mode(), crate::sys::current_uid())
        {
            return Err(problem);
        }
        let bytes = read_small(&mut file, meta.len())
            .map_err(read_err)?
            .ok_or_else(|| CredentialsError::TooLarge {
                path: path.to_path_buf(),
            })?;
        Credentials::parse(&bytes, path).map(Some)
    }

    /// Parses the file's content (`path` is named in errors).
    pub fn parse(text: &[u8], path: &Path) -> Result<Credentials, CredentialsError> {
        let syntax = |line: usize, problem: &'static str| CredentialsError::Syntax {
            path: path.to_path_buf(),
            line,
            problem,
        };
        let mut keys = BTreeMap::new();
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let line = std::str::from_utf8(raw).map_err(|_| syntax(n, "not UTF-8"))?;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, key) = line
                .split_once('=')
                .ok_or_else(|| syntax(n, "expected `provider = key`"))?;
            let (name, key) = (name.trim(), key.trim());
            check_provider_name(name).map_err(|_| {
                syntax(
                    n,
                    "the provider name is lower-case letters, digits, '.', '_' or '-'",
                )
            })?;
            check_key(key).map_err(|problem| syntax(n, problem))?;
            if keys.contains_key(name) {
                return Err(CredentialsError::Duplicate {
                    path: path.to_path_buf(),
                    line: n,
                    provider: name.to_owned(),
                });
            }
            keys.insert(name.to_owned(), ApiKey::new(key.to_owned()));
        }
        Ok(Credentials {
            path: path.to_path_buf(),
            keys,
        })
    }

    /// The key of `provider`.
    pub fn get(&self, provider: &str) -> Option<&ApiKey> {
        self.keys.get(provider)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    // Made up, in the shapes of real keys.
    const ANT: &str = "sk-ant-api03-Zq8xTestKeyNotReal0123456789abcdef";
    const OAI: &str = "sk-proj-TestKeyNotReal0123456789abcdefXY";

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn creds(text: &str) -> Credentials {
        Credentials::parse(text.as_bytes(), Path::new("/h/.garuda/credentials")).unwrap()
    }

    fn resolve(
        catalog: &Catalog,
        flag: Option<&str>,
        env: &[(&str, &str)],
        file: Option<&str>,
    ) -> Result<Resolved, ModelsError> {
        let env = vars(env);
        let r = catalog.choose(flag, &env)?;
        catalog.resolve(&r, &env, &mut || Ok(file.map(creds)))
    }

    fn models(text: &str) -> Result<Catalog, ModelsError> {
        Catalog::from_json(text, Path::new("/h/.garuda/models.json"))
    }

    #[test]
    fn built_in_providers() {
        let c = Catalog::built_in();
        let p = |n: &str| c.providers.get(n).unwrap();
        assert_eq!(p("anthropic").api, ModelApi::AnthropicMessages);
        assert_eq!(p("anthropic").base_url, "https://api.anthropic.com");
        assert_eq!(p("openai").base_url, "https://api.openai.com/v1");
        assert_eq!(p("ollama").base_url, "http://127.0.0.1:11434/v1");
        assert_eq!(p("llamacpp").base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(p("openrouter").base_url, "https://openrouter.ai/api/v1");
        assert!(!p("ollama").needs_key && !p("llamacpp").needs_key);
        assert!(p("anthropic").needs_key && p("openai").needs_key && p("openrouter").needs_key);
        for (name, provider) in &c.providers {
            // Every built-in provider variable is on the policy's deny list, so no
            // `env.allow` can hand it to a command.
            for v in provider.key_env.iter().chain(provider.base_url_env.iter()) {
                assert!(
                    garuda_policy::PROVIDER_ENV_DENY.contains(&v.as_str()),
                    "{name}: {v} is not in PROVIDER_ENV_DENY"
                );
            }
            check_base_url(&provider.base_url).unwrap();
            for l in provider.models.values().chain([&provider.limits]) {
                assert!(u64::from(l.max_output_tokens) < l.context_window, "{name}");
            }
        }
        let r = resolve(&c, None, &[("ANTHROPIC_API_KEY", ANT)], None).unwrap();
        assert_eq!(r.reference(), DEFAULT_MODEL);
        assert_eq!(r.limits.context_window, 200_000);
    }

    #[test]
    fn model_reference_precedence() {
        let c = models(r#"{"default": "openai/gpt-5"}"#).unwrap();
        let env = vars(&[(MODEL_VAR, "ollama/qwen3-coder:30b")]);
        let r = c
            .choose(Some("openrouter/anthropic/claude-x"), &env)
            .unwrap();
        assert_eq!(
            (r.provider.as_str(), r.model.as_deref(), r.from),
            ("openrouter", Some("anthropic/claude-x"), RefSource::Flag)
        );
        let r = c.choose(None, &env).unwrap();
        assert_eq!(
            (r.provider.as_str(), r.model.as_deref(), r.from),
            ("ollama", Some("qwen3-coder:30b"), RefSource::Env)
        );
        // An empty GARUDA_MODEL is unset.
        let r = c.choose(None, &vars(&[(MODEL_VAR, "")])).unwrap();
        assert_eq!(r.model.as_deref(), Some("gpt-5"));
        assert!(matches!(r.from, RefSource::File(_)));
        let r = Catalog::built_in().choose(None, &[]).unwrap();
        assert_eq!(
            (r.provider.as_str(), r.model.as_deref(), r.from),
            ("anthropic", Some("claude-sonnet-4-5"), RefSource::BuiltIn)
        );
        // `provider` alone: its default model.
        let r = resolve(&Catalog::built_in(), Some("ollama"), &[], None).unwrap();
        assert_eq!(r.reference(), "ollama/qwen3-coder:30b");
        assert_eq!(r.key_source, KeySource::None);
        assert!(r.key.is_none());
    }

    #[test]
    fn malformed_references_are_named() {
        let c = Catalog::built_in();
        for (flag, want) in [
            ("", "-m: an empty model reference"),
            ("anthropic/", "-m: no model after anthropic/"),
            ("Anthropic/x", "-m: Anthropic is not a provider name"),
            ("a b/x", "-m: a b is not a provider name"),
            ("ollama/x y", "-m: x y is not a model name"),
            ("ollama/x\u{1b}[2J", "-m: x\\e[2J is not a model name"),
        ] {
            let e = c.choose(Some(flag), &[]).unwrap_err().to_string();
            assert!(e.starts_with(want), "{flag:?}: {e}");
        }
        let e = c
            .choose(None, &vars(&[(MODEL_VAR, "nope/")]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("GARUDA_MODEL: no model after nope/"), "{e}");
        let e = resolve(&c, Some("nope/x"), &[], None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown provider nope (from -m); known: anthropic, llamacpp, ollama, openai, openrouter"
        );
    }

    #[test]
    fn models_json_adds_and_overrides() {
        let c = models(
            r#"{
              "default": "groq/llama-3.3-70b",
              "providers": {
                "anthropic": {
                  "base_url": "https://gateway.example.com/anthropic/",
                  "models": {"claude-sonnet-4-5": {"context_window": 1000000}}
                },
                "groq": {
                  "api": "openai_chat",
                  "base_url": "https://api.groq.com/openai/v1",
                  "key_env": "GROQ_API_KEY",
                  "context_window": 131072,
                  "max_output_tokens": 8192,
                  "models": {"llama-3.3-70b": {"max_output_tokens": 32768}}
                },
                "lan": {"api": "openai_chat", "base_url": "http://192.168.1.20:11434/v1"}
              }
            }"#,
        )
        .unwrap();
        let a = c.providers.get("anthropic").unwrap();
        assert_eq!(a.base_url, "https://gateway.example.com/anthropic");
        // The fields not given stay built-in.
        assert_eq!(a.key_env.as_deref(), Some("ANTHROPIC_API_KEY"));
        assert_eq!(
            a.models.get("claude-sonnet-4-5"),
            Some(&ModelLimits {
                context_window: 1_000_000,
                max_output_tokens: 64_000
            })
        );
        let r = resolve(
            &c,
            None,
            &[("GROQ_API_KEY", "gsk_TestNotReal0123456789")],
            None,
        )
        .unwrap();
        assert_eq!(r.reference(), "groq/llama-3.3-70b");
        assert_eq!(r.api, ModelApi::OpenaiChat);
        assert_eq!(
            r.limits,
            ModelLimits {
                context_window: 131_072,
                max_output_tokens: 32_768
            }
        );
        assert_eq!(r.key_source, KeySource::Env("GROQ_API_KEY".into()));
        // A new provider with a key variable needs its key.
        let e = resolve(&c, None, &[], None).unwrap_err().to_string();
        assert_eq!(
            e,
            "no key for provider groq: set GROQ_API_KEY, or add a line `groq = <key>` in \
             $GARUDA_HOME/credentials (mode 0600)"
        );
        // One without: none needed, and a LAN server over http is fine without a key.
        let r = resolve(&c, Some("lan/qwen3"), &[], None).unwrap();
        assert_eq!(r.host_port(), Some(("192.168.1.20".into(), 11434)));
        assert_eq!(r.limits, NEW_PROVIDER_LIMITS);
        // Its variables are stripped from a child's environment, whatever the case.
        let mut env = vars(&[
            ("groq_api_key", "x"),
            ("PATH", "/bin"),
            ("OPENAI_BASE_URL", "x"),
            ("ANTHROPIC_API_KEY", "x"),
        ]);
        c.strip_provider_env(&mut env);
        assert_eq!(env, vars(&[("PATH", "/bin")]));
    }

    /// Each error names the file, the JSON path and the line.
    #[test]
    fn models_json_errors_name_the_place() {
        let cases: &[(&str, &str)] = &[
            (
                "{\n  \"providers\": {\n    \"openai\": {\"base_ur\": \"https://x\"}\n  }\n}",
                "/h/.garuda/models.json: providers.openai.base_ur (line 3, column 24): unknown field `base_ur`",
            ),
            (
                "{\"providers\": {\"groq\": {\n\"api\": \"openai_chat\", \"base_url\": \"https://g\",\n\"context_window\": \"big\"}}}",
                "/h/.garuda/models.json: providers.groq.context_window (line 3, column 23): invalid type: string \"big\", expected a nonzero u64",
            ),
            (
                "{\"providers\": {\"x\": {\"api\": \"grpc\"}}}",
                "/h/.garuda/models.json: providers.x.api (line 1, column 34): unknown variant `grpc`, expected `anthropic_messages` or `openai_chat`",
            ),
            (
                "{\"providers\": {\"x\": {\"base_url\": \"ftp://h/\"}}}",
                "/h/.garuda/models.json: providers.x.base_url (line 1, column 44): the scheme must be https or http, not ftp",
            ),
            (
                "{\"providers\": {\"x\": {\"base_url\": \"https://me:pw@h/\"}}}",
                "/h/.garuda/models.json: providers.x.base_url (line 1, column 52): a base URL must not hold a user or password: put the key in the credentials file",
            ),
            (
                "{\"providers\": {\"openai\": {\"max_output_tokens\": 0}}}",
                "/h/.garuda/models.json: providers.openai.max_output_tokens (line 1, column 48): invalid value: integer `0`, expected a nonzero u32",
            ),
            (
                "{\"providers\": {\"Big\": {}}}",
                "/h/.garuda/models.json: providers.Big (line 1, column 20): Big is not a provider name",
            ),
            (
                "{\"default\": \"openai\", \"extra\": 1}",
                "/h/.garuda/models.json: extra (line 1, column 29): unknown field `extra`",
            ),
            (
                "{\"providers\": {}} x",
                "/h/.garuda/models.json: (after the document) (line 1, column 19): trailing characters",
            ),
            (
                "{\"providers\": {\"groq\": {\"key_env\": \"GROQ\"}}}",
                "/h/.garuda/models.json: providers.groq: a provider that is not built in needs \"api\" and \"base_url\"",
            ),
            (
                "{\"providers\": {\"openai\": {\"models\": {\"m\": {\"context_window\": 100, \"max_output_tokens\": 100}}}}}",
                "/h/.garuda/models.json: providers.openai.models.m: max_output_tokens must be below context_window",
            ),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let e = models(text).unwrap_err().to_string();
            if !e.starts_with(want) {
                wrong.push(format!("{text}\n got: {e}\nwant: {want}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
        // Negative control: the same documents, corrected, load.
        models("{\"providers\": {\"openai\": {\"base_url\": \"https://x\"}}}").unwrap();
    }

    /// The SDK variables win over the file and the built-in values; the credentials file is
    /// read only when no variable holds the key.
    #[test]
    fn variables_win_and_the_file_fills_the_rest() {
        let c = models(
            r#"{"providers": {"anthropic": {"base_url": "https://from-file.example.com"}}}"#,
        )
        .unwrap();
        let file = "# mine\nanthropic = sk-ant-api03-FromTheFileNotReal0123456789\n";
        let mut calls = 0;
        let env = vars(&[
            ("ANTHROPIC_API_KEY", ANT),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9999/"),
        ]);
        let r = c.choose(None, &env).unwrap();
        let got = c
            .resolve(&r, &env, &mut || {
                calls += 1;
                Ok(Some(creds(file)))
            })
            .unwrap();
        assert_eq!(
            calls, 0,
            "the file must not be read when the variable has the key"
        );
        assert_eq!(got.key.as_ref().unwrap().expose(), ANT);
        assert_eq!(got.key_source, KeySource::Env("ANTHROPIC_API_KEY".into()));
        assert_eq!(got.base_url, "http://127.0.0.1:9999");
        assert_eq!(got.base_url_from.as_deref(), Some("ANTHROPIC_BASE_URL"));
        // No variable (or an empty one): the file's key and the file's URL.
        for env in [
            vec![],
            vars(&[("ANTHROPIC_API_KEY", ""), ("ANTHROPIC_BASE_URL", "")]),
        ] {
            let r = c.choose(None, &env).unwrap();
            let got = c.resolve(&r, &env, &mut || Ok(Some(creds(file)))).unwrap();
            assert_eq!(
                got.key.as_ref().unwrap().expose(),
                "sk-ant-api03-FromTheFileNotReal0123456789"
            );
            assert_eq!(
                got.key_source,
                KeySource::File("/h/.garuda/credentials".into())
            );
            assert_eq!(got.base_url, "https://from-file.example.com");
        }
        // OPENAI_BASE_URL is openai's alone: ollama (also Chat Completions) keeps its URL.
        let env = [
            ("OPENAI_BASE_URL", "https://proxy.example.com/v1"),
            ("OPENAI_API_KEY", OAI),
        ];
        let r = resolve(&Catalog::built_in(), Some("openai"), &env, None).unwrap();
        assert_eq!(r.base_url, "https://proxy.example.com/v1");
        let r = resolve(&Catalog::built_in(), Some("ollama"), &env, None).unwrap();
        assert_eq!(r.base_url, "http://127.0.0.1:11434/v1");
        assert!(r.key.is_none());
        // A bad base URL variable is named, its value is not shown.
        let e = resolve(
            &Catalog::built_in(),
            Some("openai"),
            &[
                ("OPENAI_BASE_URL", "https://u:sk-secretpart@h/"),
                ("OPENAI_API_KEY", OAI),
            ],
            None,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "OPENAI_BASE_URL: a base URL must not hold a user or password: put the key in the \
             credentials file"
        );
    }

    /// The proxy's entries are exactly the base URL's host and port, in every host form (and,
    /// for `localhost`, its loopback addresses on that port), and the allowlist built from them
    /// lets that target through, to the addresses it resolves to, and no other port.
    #[test]
    fn the_proxy_entry_is_the_base_urls_host_and_port() {
        use garuda_policy::network::{Allowlist, TargetHost};
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let public = IpAddr::V4(Ipv4Addr::new(93, 184, 215, 14));
        let cases: [(&str, &[&str], &str, u16, IpAddr); 6] = [
            (
                "https://api.anthropic.com",
                &["api.anthropic.com:443"],
                "api.anthropic.com",
                443,
                public,
            ),
            (
                "https://API.Example.com:8443/v1",
                &["api.example.com:8443"],
                "api.example.com",
                8443,
                public,
            ),
            (
                "http://127.0.0.1:11434/v1",
                &["127.0.0.1:11434"],
                "127.0.0.1",
                11434,
                v4,
            ),
            ("http://[::1]:8080/v1", &["[::1]:8080"], "[::1]", 8080, v6),
            (
                "https://[2001:db8::1]/v1",
                &["[2001:db8::1]:443"],
                "[2001:db8::1]",
                443,
                public,
            ),
            (
                "http://localhost:8000/v1",
                &["localhost:8000", "127.0.0.1:8000", "[::1]:8000"],
                "localhost",
                8000,
                v4,
            ),
        ];
        for (url, entries, host, port, resolved) in cases {
            let r = Resolved {
                provider: "p".into(),
                model: "m".into(),
                api: ModelApi::OpenaiChat,
                base_url: check_base_url(url).unwrap(),
                base_url_from: None,
                limits: NEW_PROVIDER_LIMITS,
                key: None,
                key_source: KeySource::None,
            };
            let got = r.allowlist_entries().unwrap();
            assert_eq!(got, entries, "{url}");
            let list = Allowlist::parse(&got).unwrap_or_else(|e| panic!("{got:?}: {e}"));
            let target = TargetHost::parse(host).unwrap();
            assert!(list.check(&target, port).is_ok(), "{url}");
            assert!(
                list.check_resolved(&target, resolved, port).is_ok(),
                "{url}"
            );
            if host == "localhost" {
                assert!(list.check_resolved(&target, v6, port).is_ok(), "{url}");
                // Control: the name alone does not reach its loopback address.
                let alone = Allowlist::parse([&got[0]]).unwrap();
                assert!(alone.check_resolved(&target, v4, port).is_err(), "{url}");
            }
            // Control: another port of the same host is refused.
            assert!(list.check(&target, port.wrapping_add(1)).is_err(), "{url}");
        }
        // Control: the entry the host would make in brackets a second time does not parse.
        assert!(Allowlist::parse(["[[::1]]:8080"]).is_err());
    }

    #[test]
    fn a_key_never_goes_over_plain_http_to_another_host() {
        let env = [
            ("ANTHROPIC_API_KEY", ANT),
            ("ANTHROPIC_BASE_URL", "http://gateway.example.com"),
        ];
        let e = resolve(&Catalog::built_in(), None, &env, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "refusing to send provider anthropic's key over plain http to gateway.example.com: \
             use https, or a server on this machine (127.0.0.1, ::1, localhost)"
        );
        // Negative controls: https, or this machine, or no key.
        for url in [
            "https://gateway.example.com",
            "http://127.0.0.1:8080",
            "http://[::1]:1",
            "http://localhost",
        ] {
            let env = [("ANTHROPIC_API_KEY", ANT), ("ANTHROPIC_BASE_URL", url)];
            resolve(&Catalog::built_in(), None, &env, None).unwrap();
        }
        let c = models(
            r#"{"providers": {"lan": {"api": "openai_chat", "base_url": "http://10.0.0.2/v1"}}}"#,
        )
        .unwrap();
        resolve(&c, Some("lan/m"), &[], None).unwrap();
        let e = resolve(&c, Some("lan/m"), &[], Some("lan = abcdefgh")).unwrap_err();
        assert!(matches!(e, ModelsError::ClearText { .. }), "{e}");
    }

    /// The key is in no `{:?}`, no `{}` and no error message.
    #[test]
    fn the_key_is_never_printed() {
        let env = [("OPENAI_API_KEY", OAI)];
        let r = resolve(&Catalog::built_in(), Some("openai/gpt-5"), &env, None).unwrap();
        let key = r.key.as_ref().unwrap();
        assert_eq!(format!("{key}"), "<redacted>");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        let endpoint = r.endpoint("127.0.0.1:3128");
        // The endpoint carries it (that is its job) but does not print it.
        assert_eq!(endpoint.api_key, OAI);
        let file = creds(&format!("openai = {OAI}\nanthropic = {ANT}\n"));
        for shown in [
            format!("{r:?}"),
            format!("{endpoint:?}"),
            format!("{file:?}"),
            r.key_source.to_string(),
        ] {
            assert!(!shown.contains("TestKeyNotReal"), "{shown}");
        }
        // Errors about a key's line or value do not quote it.
        for (text, want) in [
            (format!("openai {OAI}\n"), "/c:1: expected `provider = key`"),
            (format!("OpenAI = {OAI}\n"), "/c:1: the provider name is"),
            (
                format!("\n\nopenai = {OAI} # work\n"),
                "/c:3: a key is printable ASCII",
            ),
            (
                format!("openai = {OAI}\nopenai = {OAI}\n"),
                "/c:2: a second key for provider openai",
            ),
            ("openai =\n".to_string(), "/c:1: the key is empty"),
        ] {
            let e = Credentials::parse(text.as_bytes(), Path::new("/c"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(want), "{e}");
            assert!(!e.contains("TestKeyNotReal"), "{e}");
        }
        let e = resolve(
            &Catalog::built_in(),
            Some("openai"),
            &[("OPENAI_API_KEY", "sk-TestKeyNotReal 0123")],
            None,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "OPENAI_API_KEY: a key is printable ASCII without spaces or control characters"
        );
    }

    #[test]
    fn credentials_format() {
        let c = creds("# Garuda credentials\n\n  anthropic =  sk-ant-x1  \r\nopenrouter=sk-or-v1-abc\n# openai = old\n");
        assert_eq!(c.get("anthropic").unwrap().expose(), "sk-ant-x1");
        assert_eq!(c.get("openrouter").unwrap().expose(), "sk-or-v1-abc");
        assert!(c.get("openai").is_none());
    }

    fn temp_home() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// A credentials file others can read is refused, naming the file and its mode; the
    /// same file at 0600 (and 0400) is used.
    #[test]
    fn credentials_mode_is_checked() {
        let home = temp_home();
        let path = home.path().join(CREDENTIALS_FILE);
        std::fs::write(&path, format!("anthropic = {ANT}\n")).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660, 0o4600] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = Credentials::load(&path).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{p}: mode {mode:04o} lets others read or change it: refused; it must be \
                     0600 (chmod 600 {p})",
                    p = path.display()
                )
            );
            // select() surfaces the same refusal when it needs the file.
            let e = select(home.path(), None, &[]).unwrap_err().to_string();
            assert!(e.contains(&format!("mode {mode:04o}")), "{e}");
            // ...and does not read the file when a variable has the key.
            select(home.path(), None, &vars(&[("ANTHROPIC_API_KEY", ANT)])).unwrap();
        }
        // Negative control: 0600 and 0400 load.
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let c = Credentials::load(&path).unwrap().unwrap();
            assert_eq!(c.get("anthropic").unwrap().expose(), ANT);
            let r = select(home.path(), None, &[]).unwrap();
            assert_eq!(r.key_source, KeySource::File(path.clone()));
        }
        // No file: no credentials.
        assert!(Credentials::load(&home.path().join("none"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn credentials_owner_is_checked() {
        let p = Path::new("/h/c");
        let e = credentials_problem(p, 1000, 0o100600, 1001).unwrap();
        assert_eq!(
            e.to_string(),
            "/h/c: owned by uid 1000, not by you (uid 1001): refused"
        );
        // Negative control: the same file, owned by the reader.
        assert!(credentials_problem(p, 1001, 0o100600, 1001).is_none());
    }

    /// A link at the credentials path is refused without being followed; a plain path-based
    /// read (the negative control) follows it and gets the key.
    #[test]
    fn credentials_symlink_and_non_files_are_refused() {
        let home = temp_home();
        let real = home.path().join("elsewhere");
        std::fs::write(&real, format!("anthropic = {ANT}\n")).unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = home.path().join(CREDENTIALS_FILE);
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = Credentials::load(&link).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: is a symbolic link: refused without following it (the credentials file \
                 must be a regular file in Garuda's home)",
                link.display()
            )
        );
        assert!(std::fs::read_to_string(&link).unwrap().contains(ANT));

        let dir = home.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let e = Credentials::load(&dir).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: is a folder, not a regular file: refused",
                dir.display()
            )
        );
        // A FIFO is refused at once, not waited on.
        let fifo = home.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = Credentials::load(&fifo).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}: is a FIFO, not a regular file: refused", fifo.display())
        );
    }

    /// models.json that others can write is refused (it decides where keys go); the same
    /// file at 0644 loads.
    #[test]
    fn models_json_others_cannot_write() {
        let home = temp_home();
        let path = home.path().join(MODELS_FILE);
        std::fs::write(&path, r#"{"default": "ollama"}"#).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = Catalog::load(home.path()).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: mode 0666 lets others change it (chmod go-w): refused (this file decides \
                 where your keys are sent)",
                path.display()
            )
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = Catalog::load(home.path()).unwrap();
        assert_eq!(c.choose(None, &[]).unwrap().provider, "ollama");
        // No file: the built-in table.
        assert_eq!(
            Catalog::load(&home.path().join("none")).unwrap(),
            Catalog::built_in()
        );
    }
}
