//! The model client: one [`ModelClient`] per [`ModelEndpoint`], for either wire format,
//! implementing [`Model`] with the retries the client owns.
//!
//! # The proxy rule
//!
//! The agent runs confined: its only way out is the supervisor's HTTP proxy, named in
//! [`ModelEndpoint::proxy`] as `IP:port`. The HTTP client is built with `no_proxy()` and then
//! exactly that proxy (`Proxy::all`), so no environment variable (`HTTPS_PROXY`, `NO_PROXY`…)
//! or system setting can send the request elsewhere or around it; `http://` base URLs go as
//! absolute-form requests, `https://` ones through `CONNECT` with TLS end to end (rustls with
//! the bundled web PKI roots: the confined agent reads no certificate store). The client makes
//! no DNS lookup of its own: the proxy resolves the model's host, and a resolver that refuses
//! every name is installed so that nothing else can. An empty `proxy` means a direct
//! connection with the system resolver, for tests and runs without the supervisor. Redirects
//! are not followed: one would carry the key to another host.
//!
//! # Keys
//!
//! Anthropic: `x-api-key` and `anthropic-version: 2023-06-01`; OpenAI-compatible:
//! `Authorization: Bearer`; an empty key sends no auth header (local servers). The header
//! values are marked sensitive, and every error this client returns has the key replaced by
//! `[redacted]` (a provider may quote it back): no error names a header.
//!
//! # Retries (each attempt first reported to the meter)
//!
//! - A stream that breaks in the middle (the connection closed, a read timeout, an in-stream
//!   `error` event such as `overloaded_error`, a body that ends before the last event) is sent
//!   again up to [`RetryPolicy::stream_retries`] times with a [`StreamEvent::Notice`]; only a
//!   complete response is returned (text shown from the broken attempt is not part of it).
//! - 408, 429, 500, 502, 503, 504 and 529 wait and try again, up to
//!   [`RetryPolicy::status_retries`] times with a notice: the server's `retry-after-ms` or
//!   `retry-after` (seconds or an HTTP date), else an exponential backoff from
//!   [`RetryPolicy::backoff_start`]; never longer than [`RetryPolicy::backoff_cap`].
//! - Other statuses (400, 401, 403, 404…) and failures to connect are not retried.
//!
//! [`Attempt::previous_unreported`] says whether the failed attempt before this one reported
//! its usage in full (an error status reports none): the budget keeps that reservation as
//! spent (seed T9). A meter that refuses an attempt ends the request with its error.
//!
//! # Cancellation
//!
//! Dropping the future of [`Model::complete`] cancels the request: the response body is
//! dropped with it and the connection is closed; no task of this client outlives the future.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use garuda_ipc::{ModelApi, ModelEndpoint};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::StatusCode;

use super::decode::{Decode, DecodeError};
use super::sse::SseParser;
use super::types::{Attempt, Model, ModelError, ModelRequest, ModelResponse, StreamEvent};
use super::{anthropic, openai};

/// Longest provider or transport message kept in an error, in characters (after escaping).
pub const MESSAGE_CHARS: usize = 300;

/// Largest response body read (a stream past it is refused as a protocol error).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Largest error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Statuses that mean "busy, try again later".
const RETRIED_STATUSES: [u16; 7] = [408, 429, 500, 502, 503, 504, 529];

/// Connecting (to the proxy, or directly) may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A stream silent for this long is broken (a local model on a CPU may think for minutes
/// before its first token).
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// How many times, and how long, the client tries again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// A stream broken in the middle is sent again this many times.
    pub stream_retries: u32,
    /// A busy status (429, 529, 503…) is tried again this many times.
    pub status_retries: u32,
    /// The first wait after a busy status without `retry-after`; doubled each time.
    pub backoff_start: Duration,
    /// No wait is longer than this, whatever `retry-after` says.
    pub backoff_cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            stream_retries: 2,
            status_retries: 4,
            backoff_start: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
        }
    }
}

/// A client for one model endpoint.
pub struct ModelClient {
    http: reqwest::Client,
    api: ModelApi,
    model: String,
    url: reqwest::Url,
    headers: HeaderMap,
    /// Kept only to remove it from error messages.
    key: String,
    proxy: Option<SocketAddr>,
    policy: RetryPolicy,
}

impl std::fmt::Debug for ModelClient {
    /// Never the key nor the headers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("api", &self.api)
            .field("model", &self.model)
            .field("url", &self.url.as_str())
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

/// A resolver that refuses every name: with a proxy, the proxy resolves the model's host and
/// the client itself must never ask DNS (the proxy's address is an IP literal).
struct NoLookups;

impl reqwest::dns::Resolve for NoLookups {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_string();
        Box::pin(async move {
            Err(
                format!("no DNS lookup from the agent (asked for {name}): the proxy resolves")
                    .into(),
            )
        })
    }
}

/// Text from a server, made safe to print on one line: every control, bidirectional and
/// invisible character escaped (`garuda-text`), then cut to [`MESSAGE_CHARS`].
pub fn display_cut(text: &str) -> String {
    let shown = garuda_text::visible(text.trim());
    let mut out: String = shown.chars().take(MESSAGE_CHARS).collect();
    if shown.chars().nth(MESSAGE_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// The wait a busy answer asks for: `retry-after-ms`, else `retry-after` in seconds or as
/// an HTTP date. `None` when absent or unreadable.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(1e9)));
        }
        return None;
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Why one attempt failed.
enum Failure {
    /// Broken in the middle: sent again.
    Broken {
        reason: String,
        usage_reported: bool,
    },
    /// A busy status: wait and send again.
    Busy {
        status: u16,
        message: String,
        wait: Option<Duration>,
    },
    /// Not retried.
    Final(ModelError),
}

/// A reqwest error as one line: its causes, without the URL.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut parts: Vec<String> = Vec::new();
    let mut cause: Option<&dyn std::error::Error> = Some(&e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

impl ModelClient {
    /// A client for `endpoint`, with the default [`RetryPolicy`].
    pub fn new(endpoint: &ModelEndpoint) -> Result<ModelClient, ModelError> {
        let config = |url: &str, reason: &str| ModelError::Config {
            url: display_cut(url),
            reason: display_cut(reason),
        };
        let base = reqwest::Url::parse(endpoint.base_url.trim())
            .map_err(|e| config(&endpoint.base_url, &format!("not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(config(
                &endpoint.base_url,
                "the base URL must be http:// or https:// with a host",
            ));
        }
        let mut url = base.clone();
        let suffix = match endpoint.api {
            ModelApi::AnthropicMessages => anthropic::PATH,
            ModelApi::OpenaiChat => openai::PATH,
        };
        url.set_path(&format!("{}{suffix}", base.path().trim_end_matches('/')));

        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        if endpoint.api == ModelApi::AnthropicMessages {
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(anthropic::VERSION),
            );
        }
        if !endpoint.api_key.is_empty() {
            let (name, value) = match endpoint.api {
                ModelApi::AnthropicMessages => (
                    HeaderName::from_static("x-api-key"),
                    endpoint.api_key.clone(),
                ),
                ModelApi::OpenaiChat => (
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {}", endpoint.api_key),
                ),
            };
            // The error names neither the key nor the offending character.
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                config(
                    &endpoint.base_url,
                    "the API key has a character an HTTP header cannot carry",
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }

        let mut builder = reqwest::Client::builder()
            // First no proxy at all, whatever the environment says; then only ours.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("garuda/", env!("CARGO_PKG_VERSION")));
        let proxy = if endpoint.proxy.trim().is_empty() {
            None
        } else {
            let addr: SocketAddr = endpoint.proxy.trim().parse().map_err(|_| {
                config(
                    &endpoint.proxy,
                    "the proxy must be an IP address and port (host:port, no name)",
                )
            })?;
            let proxy = reqwest::Proxy::all(format!("http://{addr}"))
                .map_err(|e| config(&endpoint.proxy, &format!("not a proxy: {e}")))?;
            builder = builder.proxy(proxy).dns_resolver(Arc::new(NoLookups));
            Some(addr)
        };
        let http = builder
            .build()
            .map_err(|e| config(&endpoint.base_url, &describe(e)))?;
        Ok(ModelClient {
            http,
            api: endpoint.api,
            model: endpoint.model.clone(),
            url,
            headers,
            key: endpoint.api_key.clone(),
            proxy,
            policy: RetryPolicy::default(),
        })
    }

    /// The same client with another retry policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> ModelClient {
        self.policy = policy;
        self
    }

    /// The URL requests go to (`…/v1/messages` or `…/chat/completions`).
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The request body of `request` in this endpoint's format.
    pub fn request_body(&self, request: &ModelRequest) -> serde_json::Value {
        match self.api {
            ModelApi::AnthropicMessages => anthropic::request_body(&self.model, request),
            ModelApi::OpenaiChat => openai::request_body(&self.model, request),
        }
    }

    /// `text` with the key replaced.
    fn scrub(&self, text: String) -> String {
        // A key shorter than this would match ordinary words; real keys are far longer.
        if self.key.len() >= 8 && text.contains(&self.key) {
            text.replace(&self.key, "[redacted]")
        } else {
            text
        }
    }

    /// Text from the server or the network, safe to show: the key taken out first (so
    /// that cutting cannot leave a piece of it), then escaped and cut.
    fn shown(&self, text: &str) -> String {
        display_cut(&self.scrub(text.to_string()))
    }

    /// A decoder's error as an attempt's failure.
    fn decode_failure(&self, e: DecodeError, usage_reported: bool) -> Failure {
        match e {
            DecodeError::Broken(reason) => Failure::Broken {
                reason: self.shown(&reason),
                usage_reported,
            },
            DecodeError::Protocol(reason) => {
                Failure::Final(ModelError::Protocol(self.shown(&reason)))
            }
        }
    }

    fn redact(&self, e: ModelError) -> ModelError {
        match e {
            ModelError::Config { url, reason } => ModelError::Config {
                url: self.scrub(url),
                reason: self.scrub(reason),
            },
            ModelError::Status { status, message } => ModelError::Status {
                status,
                message: self.scrub(message),
            },
            ModelError::Transport(m) => ModelError::Transport(self.scrub(m)),
            ModelError::Protocol(m) => ModelError::Protocol(self.scrub(m)),
            ModelError::Cancelled => ModelError::Cancelled,
        }
    }

    /// Where a connection goes first, for messages.
    fn first_hop(&self) -> String {
        match self.proxy {
            Some(addr) => format!("the model proxy {addr}"),
            None => self.url.host_str().unwrap_or_default().to_string(),
        }
    }

    async fn run(
        &self,
        request: &ModelRequest,
        meter: &mut dyn FnMut(Attempt) -> Result<(), ModelError>,
        events: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, ModelError> {
        let body = serde_json::to_vec(&self.request_body(request))
            .map_err(|e| ModelError::Protocol(format!("the request cannot be encoded: {e}")))?;
        let policy = self.policy;
        let (mut broken, mut busy, mut retry) = (0u32, 0u32, 0u32);
        let mut previous_unreported = false;
        loop {
            meter(Attempt {
                retry,
                previous_unreported,
            })?;
            let outcome = match self.api {
                ModelApi::AnthropicMessages => {
                    self.attempt::<anthropic::Decoder>(&body, events).await
                }
                ModelApi::OpenaiChat => self.attempt::<openai::Decoder>(&body, events).await,
            };
            match outcome {
                Ok(response) => return Ok(response),
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Broken {
                    reason,
                    usage_reported,
                }) => {
                    if broken >= policy.stream_retries {
                        return Err(ModelError::Transport(format!(
                            "{reason} (sent {} times)",
                            broken + 1
                        )));
                    }
                    broken += 1;
                    previous_unreported = !usage_reported;
                    events(StreamEvent::Notice(format!(
                        "the model's stream broke ({reason}); sending the request again ({broken} of {})",
                        policy.stream_retries
                    )));
                }
                Err(Failure::Busy {
                    status,
                    message,
                    wait,
                }) => {
                    if busy >= policy.status_retries {
                        return Err(ModelError::Status { status, message });
                    }
                    busy += 1;
                    previous_unreported = true;
                    let backoff = policy
                        .backoff_start
                        .saturating_mul(1u32 << (busy - 1).min(16));
                    let wait = wait.unwrap_or(backoff).min(policy.backoff_cap);
                    events(StreamEvent::Notice(format!(
                        "the model's API answered {status} ({message}); waiting {:.1} s before trying again ({busy} of {})",
                        wait.as_secs_f64(),
                        policy.status_retries
                    )));
                    tokio::time::sleep(wait).await;
                }
            }
            retry += 1;
        }
    }

    /// One attempt: send, check the status, decode the stream to its end.
    async fn attempt<D: Decode>(
        &self,
        body: &[u8],
        events: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, Failure> {
        let sent = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone())
            .body(body.to_vec())
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                return Err(Failure::Final(ModelError::Transport(format!(
                    "cannot connect to {}: {}",
                    self.first_hop(),
                    self.shown(&describe(e))
                ))))
            }
            // Connected, but no answer came (closed, timed out): as good as broken.
            Err(e) => {
                return Err(Failure::Broken {
                    reason: self.shown(&describe(e)),
                    usage_reported: false,
                })
            }
        };
        let status = response.status();
        if !status.is_success() {
            return Err(self.status_failure(status, response).await);
        }
        if let Some(kind) = response.headers().get(CONTENT_TYPE) {
            let kind = kind.to_str().unwrap_or_default().to_ascii_lowercase();
            if !kind.starts_with("text/event-stream") {
                let text = read_capped(&mut response, MAX_ERROR_BODY).await;
                return Err(Failure::Final(ModelError::Protocol(format!(
                    "expected an event stream, got {}: {}",
                    self.shown(&kind),
                    self.shown(&text)
                ))));
            }
        }
        let mut parser = SseParser::new();
        let mut decoder = D::default();
        let mut total = 0usize;
        loop {
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    total += bytes.len();
                    if total > MAX_RESPONSE_BYTES {
                        return Err(Failure::Final(ModelError::Protocol(format!(
                            "the response is larger than {MAX_RESPONSE_BYTES} bytes"
                        ))));
                    }
                    let parsed = parser
                        .push(&bytes)
                        .map_err(|e| Failure::Final(ModelError::Protocol(e.to_string())))?;
                    for event in parsed {
                        let usage_reported = decoder.usage_reported();
                        match decoder.event(&event, events) {
                            Ok(false) => {}
                            Ok(true) => {
                                drain(&mut response).await;
                                return decoder
                                    .finish(true)
                                    .map_err(|e| self.decode_failure(e, usage_reported));
                            }
                            Err(e) => return Err(self.decode_failure(e, usage_reported)),
                        }
                    }
                }
                Ok(None) => {
                    let usage_reported = decoder.usage_reported();
                    return decoder
                        .finish(false)
                        .map_err(|e| self.decode_failure(e, usage_reported));
                }
                Err(e) => {
                    return Err(Failure::Broken {
                        reason: self.shown(&describe(e)),
                        usage_reported: decoder.usage_reported(),
                    })
                }
            }
        }
    }

    async fn status_failure(&self, status: StatusCode, mut response: reqwest::Response) -> Failure {
        let wait = retry_after(response.headers());
        let text = read_capped(&mut response, MAX_ERROR_BODY).await;
        let provider = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| match self.api {
                ModelApi::AnthropicMessages => anthropic::error_message(&v),
                ModelApi::OpenaiChat => openai::error_message(&v),
            });
        let message = match provider {
            Some(m) => m,
            None if text.trim().is_empty() => status
                .canonical_reason()
                .unwrap_or("no message")
                .to_string(),
            None => text,
        };
        let message = self.shown(&message);
        let code = status.as_u16();
        if RETRIED_STATUSES.contains(&code) {
            Failure::Busy {
                status: code,
                message,
                wait,
            }
        } else {
            Failure::Final(ModelError::Status {
                status: code,
                message,
            })
        }
    }
}

/// Up to `limit` bytes of the body, as text (errors end it quietly: this is for messages).
async fn read_capped(response: &mut reqwest::Response, limit: usize) -> String {
    let mut out = Vec::new();
    while out.len() < limit {
        match response.chunk().await {
            Ok(Some(bytes)) => out.extend_from_slice(&bytes),
            _ => break,
        }
    }
    out.truncate(limit);
    String::from_utf8_lossy(&out).into_owned()
}

/// Read what follows the last event, briefly, so that the connection can serve the next
/// request (a server that keeps the body open is left: the connection is then closed).
async fn drain(response: &mut reqwest::Response) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut read = 0usize;
        while let Ok(Some(bytes)) = response.chunk().await {
            read += bytes.len();
            if read > MAX_ERROR_BODY {
                break;
            }
        }
    })
    .await;
}

impl Model for ModelClient {
    async fn complete(
        &self,
        request: &ModelRequest,
        meter: &mut dyn FnMut(Attempt) -> Result<(), ModelError>,
        events: &mut dyn FnMut(StreamEvent),
    ) -> Result<ModelResponse, ModelError> {
        // Notices quote the provider's messages: the key is taken out of them too.
        let mut shown = |e: StreamEvent| match e {
            StreamEvent::Notice(n) => events(StreamEvent::Notice(self.scrub(n))),
            other => events(other),
        };
        self.run(request, meter, &mut shown)
            .await
            .map_err(|e| self.redact(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(api: ModelApi, base: &str, proxy: &str) -> ModelEndpoint {
        ModelEndpoint {
            api,
            base_url: base.into(),
            model: "m".into(),
            api_key: "sk-test-0123456789".into(),
            proxy: proxy.into(),
        }
    }

    #[test]
    fn urls_are_the_base_plus_the_api_path() {
        let c = ModelClient::new(&endpoint(
            ModelApi::AnthropicMessages,
            "https://api.anthropic.com",
            "",
        ))
        .unwrap();
        assert_eq!(c.url(), "https://api.anthropic.com/v1/messages");
        let c = ModelClient::new(&endpoint(
            ModelApi::OpenaiChat,
            "http://127.0.0.1:11434/v1/",
            "",
        ))
        .unwrap();
        assert_eq!(c.url(), "http://127.0.0.1:11434/v1/chat/completions");
    }

    #[test]
    fn bad_endpoints_are_config_errors_without_the_key() {
        for (base, proxy) in [
            ("ftp://example.com", ""),
            ("not a url", ""),
            ("https://api.example", "localhost:8080"),
            ("https://api.example", "127.0.0.1"),
        ] {
            let e = ModelClient::new(&endpoint(ModelApi::OpenaiChat, base, proxy)).unwrap_err();
            assert!(matches!(e, ModelError::Config { .. }), "{e:?}");
            assert!(!format!("{e} {e:?}").contains("sk-test"));
        }
        let mut bad_key = endpoint(ModelApi::AnthropicMessages, "https://api.example", "");
        bad_key.api_key = "sk-test\n0123456789".into();
        let e = ModelClient::new(&bad_key).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model endpoint https://api.example: the API key has a character an HTTP header cannot carry"
        );
        // Negative control: the same endpoints with a good base, proxy and key are accepted.
        ModelClient::new(&endpoint(
            ModelApi::OpenaiChat,
            "https://api.example",
            "127.0.0.1:8080",
        ))
        .unwrap();
        ModelClient::new(&endpoint(
            ModelApi::OpenaiChat,
            "https://api.example",
            "[::1]:8080",
        ))
        .unwrap();
    }

    #[test]
    fn the_debug_form_has_no_key() {
        let c = ModelClient::new(&endpoint(
            ModelApi::AnthropicMessages,
            "https://api.anthropic.com",
            "127.0.0.1:9",
        ))
        .unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("api.anthropic.com"), "{shown}");
        assert!(!shown.contains("sk-test"), "{shown}");
    }

    #[tokio::test]
    async fn the_resolver_used_with_a_proxy_refuses_every_name() {
        use reqwest::dns::Resolve;
        for name in ["api.anthropic.com", "localhost", "model.invalid"] {
            let e = match NoLookups.resolve(name.parse().unwrap()).await {
                Ok(_) => panic!("{name} was resolved"),
                Err(e) => e.to_string(),
            };
            assert_eq!(
                e,
                format!("no DNS lookup from the agent (asked for {name}): the proxy resolves")
            );
        }
        // Control: through the proxy a name still works, since the proxy gets it
        // (`requests_go_through_the_proxy` in tests/model_clients.rs).
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after", HeaderValue::from_static("0.5"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&h), None);
        let later = std::time::SystemTime::now() + Duration::from_secs(30);
        h.insert(
            "retry-after",
            HeaderValue::from_str(&httpdate::fmt_http_date(later)).unwrap(),
        );
        let wait = retry_after(&h).unwrap();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
    }

    #[test]
    fn messages_are_escaped_and_cut() {
        assert_eq!(display_cut("bad\n\x1b[31mred"), "bad\\n\\e[31mred");
        let long = "é".repeat(1000);
        let cut = display_cut(&long);
        assert_eq!(cut.chars().count(), MESSAGE_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(display_cut("short"), "short");
    }
}
