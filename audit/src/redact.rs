//! Secrets are removed from events before they are written.
//!
//! A line, once written, is evidence: it can be copied off the machine and must never be
//! edited. So credentials that appear in commands, output or arguments (an `export
//! OPENAI_API_KEY=...`, a `curl -H "Authorization: Bearer ..."`, a clone URL with a password)
//! are replaced by `[REDACTED:<kind>]` *before* the MAC is computed. Every string in the event
//! is scanned, object keys included, recursively; a string value under a key that names a
//! secret (`password`, `api_key`, `client_secret`, `authorization`, ...) is replaced whole.
//!
//! The patterns are hand-written scanners, not regular expressions: one pass over the bytes,
//! no backtracking, no dependency. They aim at well-known credential shapes; a secret with no
//! recognisable shape (a random word typed as a password) is not found. Over-redaction of a
//! harmless value is accepted; under-redaction is the risk this module reduces, not removes.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// Key-name endings (lowercase) that mark an assignment or object field as a secret.
const SECRET_NAMES: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "token",
    "secret",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "secret_key",
    "private_key",
    "auth_token",
    "auth-token",
    "signature",
    "mysql_pwd",
    "key_base",
    "credentials",
    "_pass",
];

const MARK_START: &str = "[REDACTED:";

/// Redacts every string (and object key) in `value`, in place.
pub fn redact_value(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact_str(s) {
                *s = r;
            }
        }
        Value::Array(items) => {
            redact_argv(items);
            items.iter_mut().for_each(redact_value);
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                // Any value under a secret's name goes whole: a string, a list, a number.
                if secret_name(k) && !v.as_str().is_some_and(is_marker) && !v.is_null() {
                    *v = Value::String(format!("{MARK_START}field]"));
                } else {
                    redact_value(v);
                }
            }
            // Keys are rarely secret; rebuild the map only when one is.
            if map.keys().any(|k| matches!(redact_str(k), Cow::Owned(_))) {
                let old = std::mem::take(map);
                let mut new = Map::new();
                for (k, v) in old {
                    let base = redact_str(&k).into_owned();
                    let mut key = base.clone();
                    // Two keys redacted to the same marker must not overwrite each other.
                    let mut n = 2;
                    while new.contains_key(&key) {
                        key = format!("{base}#{n}");
                        n += 1;
                    }
                    new.insert(key, v);
                }
                *map = new;
            }
        }
        _ => {}
    }
}

/// Options whose value (the next item, or after `=`) is a secret, for any program.
const SECRET_OPTIONS: &[&str] = &[
    "--password",
    "--passwd",
    "--pass",
    "--token",
    "--auth-token",
    "--access-token",
    "--api-key",
    "--apikey",
    "--secret",
    "--client-secret",
    "--secret-key",
    "--access-key",
    "--private-key",
    "--passphrase",
];

/// Options whose value is `user:password` (curl, wget and others): redacted when it holds `:`.
const USER_PASSWORD_OPTIONS: &[&str] = &["-u", "--user", "--proxy-user"];

/// Programs whose `-p` is a password (attached, `-psecret`, or the next item): not every
/// program's `-p` is (`psql -p 5432` is a port). Found at any position of the vector
/// (`sudo mysql -p…`, `docker exec -it db mysql -p…`): the option counts after it.
const P_IS_PASSWORD: &[&str] = &[
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mariadb",
    "sshpass",
    "7z",
    "7za",
    "7zr",
];

/// Programs whose `-P` is a password (the next item).
const BIG_P_IS_PASSWORD: &[&str] = &["zip", "unzip", "zipcloak", "7z", "7za", "7zr"];

/// Programs whose `-a` is a password (the next item, or attached).
const A_IS_PASSWORD: &[&str] = &["redis-cli", "valkey-cli", "keydb-cli"];

/// OpenSSL's password options, whose value is `pass:SECRET` or `env:VAR`.
const OPENSSL_PASS_OPTIONS: &[&str] = &["-pass", "-passin", "-passout", "-passwd", "-kfile"];

/// Endings of long options (any program) whose value is a secret: `--ftp-password X`,
/// `--vault-token=X`, `--client-secret X`.
const SECRET_OPTION_ENDINGS: &[&str] = &[
    "-password",
    "-passwd",
    "-passphrase",
    "-token",
    "-secret",
    "_password",
    "_token",
    "_secret",
];

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn secret_option(option: &str) -> bool {
    SECRET_OPTIONS.contains(&option)
        || (option.starts_with("--")
            && !option.starts_with("--no-")
            && SECRET_OPTION_ENDINGS.iter().any(|e| option.ends_with(e)))
}

/// `user:password` with the password replaced, or `None` without a `:`.
fn user_password(value: &str) -> Option<String> {
    value
        .split_once(':')
        .map(|(user, _)| format!("{user}:{MARK_START}password]"))
}

/// Redacts the secret *values* of an argument vector, which a flag names but which stand in
/// their own item (`["mysql", "--password", "hunter2"]`, `["curl", "-u", "admin:pw"]`,
/// `["aws", "configure", "set", "aws_secret_access_key", "…"]`), and the lines of a private key
/// split across items. Other items are left to the per-string scan.
fn redact_argv(items: &mut [Value]) {
    let strings: Vec<Option<String>> = items.iter().map(|v| v.as_str().map(String::from)).collect();
    let docker_login = strings
        .first()
        .and_then(|s| s.as_deref())
        .is_some_and(|p| matches!(basename(p), "docker" | "podman"))
        && strings.iter().flatten().any(|s| s == "login");
    // Flags of these programs count from the program's position on.
    let mut p_password = docker_login;
    let mut big_p_password = false;
    let mut a_password = false;
    let mut secret_next = false;
    let mut in_private_key = false;
    for (i, item) in strings.iter().enumerate() {
        let Some(text) = item.as_deref() else {
            secret_next = false;
            continue;
        };
        let mark = |kind: &str| Value::String(format!("{MARK_START}{kind}]"));
        if in_private_key {
            if text.contains("-----END ") {
                in_private_key = false;
            }
            items[i] = mark("private-key");
            continue;
        }
        if text.contains("-----BEGIN ")
            && text.contains("PRIVATE KEY")
            && !text.contains("-----END ")
        {
            in_private_key = true;
            items[i] = mark("private-key");
            continue;
        }
        if secret_next {
            secret_next = false;
            if !is_marker(text) {
                items[i] = mark("argument");
            }
            continue;
        }
        let program = basename(text);
        p_password |= P_IS_PASSWORD.contains(&program);
        big_p_password |= BIG_P_IS_PASSWORD.contains(&program);
        a_password |= A_IS_PASSWORD.contains(&program);
        if USER_PASSWORD_OPTIONS.contains(&text) {
            if let Some(Some(next)) = strings.get(i + 1) {
                if let Some(v) = user_password(next) {
                    items[i + 1] = Value::String(v);
                }
            }
            continue;
        }
        // `--user=alice:pw`, `--proxy-user=alice:pw`, `-ualice:pw`.
        if let Some((opt, value)) = text.split_once('=') {
            if matches!(opt, "--user" | "--proxy-user") {
                if let Some(v) = user_password(value) {
                    items[i] = Value::String(format!("{opt}={v}"));
                }
                continue;
            }
        }
        if text.len() > 2 && text.starts_with("-u") && !text.starts_with("--") {
            if let Some(v) = user_password(&text[2..]) {
                items[i] = Value::String(format!("-u{v}"));
            }
            continue;
        }
        if OPENSSL_PASS_OPTIONS.contains(&text) {
            if let Some(Some(next)) = strings.get(i + 1) {
                if let Some((scheme, _)) = next.split_once(':') {
                    if matches!(scheme, "pass" | "env") {
                        items[i + 1] = Value::String(format!("{scheme}:{MARK_START}argument]"));
                    }
                }
            }
            continue;
        }
        let lower = text.to_ascii_lowercase();
        let option = lower.split('=').next().unwrap_or("");
        if secret_option(option) {
            if lower.contains('=') {
                items[i] =
                    Value::String(format!("{}={MARK_START}argument]", &text[..option.len()]));
            } else {
                secret_next = true;
            }
            continue;
        }
        if p_password && text.starts_with("-p") && !text.starts_with("--") {
            if text.len() > 2 {
                items[i] = Value::String(format!("-p{MARK_START}argument]"));
            } else {
                secret_next = true;
            }
            continue;
        }
        if big_p_password && text == "-P" {
            secret_next = true;
            continue;
        }
        if a_password && text.starts_with("-a") && !text.starts_with("--") {
            if text.len() > 2 {
                items[i] = Value::String(format!("-a{MARK_START}argument]"));
            } else {
                secret_next = true;
            }
            continue;
        }
        // `aws configure set NAME VALUE`, `git config NAME VALUE`, `npm config set NAME VALUE`
        // and the like: a secret-named item makes the next one secret.
        if i > 0 && !text.starts_with('-') && secret_name(text) && !text.contains('=') {
            secret_next = true;
        }
    }
}

fn is_marker(s: &str) -> bool {
    s.starts_with(MARK_START) && s.ends_with(']')
}

fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "authorization" || SECRET_NAMES.iter().any(|s| lower.ends_with(s))
}

/// Redacts the credentials found in one string.
pub fn redact_str(s: &str) -> Cow<'_, str> {
    let spans = find(s.as_bytes());
    if spans.is_empty() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (start, end, kind) in spans {
        // Every boundary is next to an ASCII byte of a pattern, so slicing keeps UTF-8 valid.
        out.push_str(s.get(at..start).unwrap_or(""));
        out.push_str(MARK_START);
        out.push_str(kind);
        out.push(']');
        at = end;
    }
    out.push_str(s.get(at..).unwrap_or(""));
    Cow::Owned(out)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn boundary_before(s: &[u8], i: usize) -> bool {
    i == 0 || !(is_word(s[i - 1]) || s[i - 1] == b'-')
}

fn run(s: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    s[from.min(s.len())..]
        .iter()
        .take_while(|&&c| ok(c))
        .count()
}

fn starts_ci(s: &[u8], i: usize, lit: &[u8]) -> bool {
    s.len() >= i + lit.len() && s[i..i + lit.len()].eq_ignore_ascii_case(lit)
}

fn token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

type Span = (usize, usize, &'static str);

/// Non-overlapping spans to replace, in order.
fn find(s: &[u8]) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let found = match s[i] {
            b'-' => pem(s, i),
            b'a' | b'A' => authorization(s, i)
                .or_else(|| aws(s, i))
                .or_else(|| prefixed(s, i, b"AIza", 35, 35, token_char, "google-api-key")),
            b'b' | b'B' => bearer(s, i),
            b's' => prefixed(
                s,
                i,
                b"sk-ant-",
                20,
                usize::MAX,
                token_char,
                "anthropic-key",
            )
            .or_else(|| openai(s, i))
            .or_else(|| prefixed(s, i, b"sk_live_", 16, usize::MAX, token_char, "stripe-key"))
            .or_else(|| prefixed(s, i, b"sk_test_", 16, usize::MAX, token_char, "stripe-key")),
            b'r' => prefixed(s, i, b"rk_live_", 16, usize::MAX, token_char, "stripe-key")
                .or_else(|| prefixed(s, i, b"rk_test_", 16, usize::MAX, token_char, "stripe-key")),
            b'n' => prefixed(
                s,
                i,
                b"npm_",
                36,
                36,
                |c| c.is_ascii_alphanumeric(),
                "npm-token",
            ),
            b'h' => prefixed(
                s,
                i,
                b"hf_",
                30,
                usize::MAX,
                |c| c.is_ascii_alphanumeric(),
                "huggingface-token",
            )
            .or_else(|| slack_webhook(s, i)),
            b'c' | b'C' => cookie(s, i),
            b'g' => prefixed(
                s,
                i,
                b"github_pat_",
                22,
                usize::MAX,
                |c| c.is_ascii_alphanumeric() || c == b'_',
                "github-token",
            )
            .or_else(|| github(s, i))
            .or_else(|| prefixed(s, i, b"glpat-", 20, usize::MAX, token_char, "gitlab-token")),
            b'x' => slack(s, i)
                .or_else(|| prefixed(s, i, b"xapp-", 20, usize::MAX, token_char, "slack-token")),
            b'e' => jwt(s, i),
            b':' => url_password(s, i).or_else(|| assignment(s, i)),
            b'=' => assignment(s, i),
            _ => None,
        };
        match found {
            Some((start, end, kind)) if start >= i && end > start => {
                spans.push((start, end, kind));
                i = end;
            }
            _ => i += 1,
        }
    }
    spans
}

/// `prefix` + `min..=max` chars of `ok`, at a word start and not followed by another `ok` char.
fn prefixed(
    s: &[u8],
    i: usize,
    prefix: &[u8],
    min: usize,
    max: usize,
    ok: fn(u8) -> bool,
    kind: &'static str,
) -> Option<Span> {
    if !s[i..].starts_with(prefix) || !boundary_before(s, i) {
        return None;
    }
    let body = i + prefix.len();
    let n = run(s, body, ok);
    (n >= min && n <= max).then_some((i, body + n, kind))
}

fn openai(s: &[u8], i: usize) -> Option<Span> {
    let span = prefixed(s, i, b"sk-", 20, usize::MAX, token_char, "openai-key")?;
    // Real keys are random; a long hyphenated word ("sk-learn-...") has no digit.
    s[i + 3..span.1]
        .iter()
        .any(u8::is_ascii_digit)
        .then_some(span)
}

fn aws(s: &[u8], i: usize) -> Option<Span> {
    if !(s[i..].starts_with(b"AKIA") || s[i..].starts_with(b"ASIA")) || !boundary_before(s, i) {
        return None;
    }
    let n = run(s, i + 4, |c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let end = i + 4 + n;
    (n == 16 && (end == s.len() || !s[end].is_ascii_alphanumeric())).then_some((i, end, "aws-key"))
}

fn github(s: &[u8], i: usize) -> Option<Span> {
    for p in [b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"] {
        if let Some(span) = prefixed(
            s,
            i,
            p,
            36,
            usize::MAX,
            |c| c.is_ascii_alphanumeric(),
            "github-token",
        ) {
            return Some(span);
        }
    }
    None
}

fn slack(s: &[u8], i: usize) -> Option<Span> {
    if !s[i..].starts_with(b"xox") || !boundary_before(s, i) || s.len() < i + 5 {
        return None;
    }
    if !matches!(s[i + 3], b'b' | b'a' | b'p' | b'r' | b's') || s[i + 4] != b'-' {
        return None;
    }
    let n = run(s, i + 5, |c| c.is_ascii_alphanumeric() || c == b'-');
    (n >= 10).then_some((i, i + 5 + n, "slack-token"))
}

fn jwt(s: &[u8], i: usize) -> Option<Span> {
    if !s[i..].starts_with(b"eyJ") || !boundary_before(s, i) {
        return None;
    }
    let b64u = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    let a = run(s, i, b64u);
    if a < 10 || s.get(i + a) != Some(&b'.') {
        return None;
    }
    let p = i + a + 1;
    let b = run(s, p, b64u);
    if b < 10 || !s[p..].starts_with(b"eyJ") || s.get(p + b) != Some(&b'.') {
        return None;
    }
    let q = p + b + 1;
    let c = run(s, q, b64u);
    Some((i, q + c, "jwt"))
}

fn pem(s: &[u8], i: usize) -> Option<Span> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    if !s[i..].starts_with(BEGIN) {
        return None;
    }
    let label_start = i + BEGIN.len();
    let label_len = s[label_start..].windows(5).position(|w| w == b"-----")?;
    let label = &s[label_start..label_start + label_len];
    if !(label.ends_with(b"PRIVATE KEY") || label.ends_with(b"PRIVATE KEY BLOCK"))
        || label.len() > 64
    {
        return None;
    }
    let mut end_marker = b"-----END ".to_vec();
    end_marker.extend_from_slice(label);
    end_marker.extend_from_slice(b"-----");
    let after = label_start + label_len + 5;
    let end = s[after..]
        .windows(end_marker.len())
        .position(|w| w == end_marker.as_slice())
        .map_or(s.len(), |p| after + p + end_marker.len());
    Some((i, end, "private-key"))
}

fn bearer(s: &[u8], i: usize) -> Option<Span> {
    if !starts_ci(s, i, b"bearer") || !boundary_before(s, i) {
        return None;
    }
    let sp = run(s, i + 6, |c| c == b' ' || c == b'\t');
    if sp == 0 {
        return None;
    }
    let start = i + 6 + sp;
    let n = run(s, start, |c| {
        c.is_ascii_alphanumeric() || b"._~+/=-".contains(&c)
    });
    let digit = s[start..start + n].iter().any(u8::is_ascii_digit);
    (n >= 16 && digit).then_some((start, start + n, "bearer-token"))
}

/// `Authorization: <scheme> <credentials>` (also `authorization=...`, quoted forms).
fn authorization(s: &[u8], i: usize) -> Option<Span> {
    const NAME: &[u8] = b"authorization";
    if !starts_ci(s, i, NAME) || !boundary_before(s, i) {
        return None;
    }
    let mut j = i + NAME.len();
    if s.get(j) == Some(&b'"') || s.get(j) == Some(&b'\'') {
        j += 1;
    }
    j += run(s, j, |c| c == b' ');
    if !matches!(s.get(j), Some(b':') | Some(b'=')) {
        return None;
    }
    j += 1;
    j += run(s, j, |c| c == b' ' || c == b'"' || c == b'\'');
    // An optional scheme word ("Bearer", "Basic", "token").
    let w = run(s, j, |c| c.is_ascii_alphabetic());
    let sp = run(s, j + w, |c| c == b' ');
    if w > 0 && sp > 0 {
        j += w + sp;
    }
    let n = run(s, j, |c| {
        !c.is_ascii_whitespace() && !matches!(c, b'"' | b'\'' | b',' | b';')
    });
    if n == 0 || s[j..].starts_with(MARK_START.as_bytes()) {
        return None;
    }
    Some((j, j + n, "authorization"))
}

/// `https://hooks.slack.com/services/…`: the path is the credential.
fn slack_webhook(s: &[u8], i: usize) -> Option<Span> {
    const PREFIX: &[u8] = b"hooks.slack.com/services/";
    if !s[i..].starts_with(PREFIX) {
        return None;
    }
    let start = i + PREFIX.len();
    let n = run(s, start, |c| {
        c.is_ascii_alphanumeric() || c == b'/' || c == b'_'
    });
    (n >= 8).then_some((start, start + n, "slack-webhook"))
}

/// `Cookie: …` / `Set-Cookie: …`: session cookies are bearer credentials; the whole value goes.
fn cookie(s: &[u8], i: usize) -> Option<Span> {
    if !starts_ci(s, i, b"cookie") || !(i == 0 || s[i - 1] == b'-' || !is_word(s[i - 1])) {
        return None;
    }
    let mut j = i + 6;
    j += run(s, j, |c| c == b' ');
    if s.get(j) != Some(&b':') {
        return None;
    }
    j += 1;
    j += run(s, j, |c| c == b' ');
    let n = run(s, j, |c| {
        c != b'\n' && c != b'\r' && c != b'"' && c != b'\''
    });
    (n > 0 && !s[j..].starts_with(MARK_START.as_bytes())).then_some((j, j + n, "cookie"))
}

/// `scheme://user:password@host` — only the password goes.
fn url_password(s: &[u8], i: usize) -> Option<Span> {
    if !s[i..].starts_with(b"://") || i == 0 || !s[i - 1].is_ascii_alphanumeric() {
        return None;
    }
    let start = i + 3;
    let auth_len = run(s, start, |c| {
        !c.is_ascii_whitespace() && !b"/?#\"'<>".contains(&c)
    });
    let auth = &s[start..start + auth_len];
    let at = auth.iter().rposition(|&c| c == b'@')?;
    let colon = auth[..at].iter().position(|&c| c == b':')?;
    let (p0, p1) = (start + colon + 1, start + at);
    (p1 > p0 && !s[p0..p1].starts_with(MARK_START.as_bytes())).then_some((p0, p1, "url-password"))
}

/// `name=value` or `name: value` where the name ends with a secret word.
fn assignment(s: &[u8], i: usize) -> Option<Span> {
    // Walk back over spaces, an optional closing quote, then the name.
    let mut k = i;
    while k > 0 && s[k - 1] == b' ' {
        k -= 1;
    }
    if k > 0 && (s[k - 1] == b'"' || s[k - 1] == b'\'') {
        k -= 1;
    }
    let name_end = k;
    while k > 0 && (is_word(s[k - 1]) || s[k - 1] == b'-' || s[k - 1] == b'.') {
        k -= 1;
    }
    let name = std::str::from_utf8(&s[k..name_end]).ok()?;
    if name.is_empty()
        || !SECRET_NAMES
            .iter()
            .any(|w| name.to_ascii_lowercase().ends_with(w))
    {
        return None;
    }
    let mut j = i + 1;
    j += run(s, j, |c| c == b' ');
    let (start, end) = match s.get(j) {
        Some(&q) if q == b'"' || q == b'\'' => {
            let n = run(s, j + 1, |c| c != q);
            (j + 1, j + 1 + n)
        }
        _ => {
            let n = run(s, j, |c| {
                !c.is_ascii_whitespace() && !b"&,;\"')}]".contains(&c)
            });
            (j, j + n)
        }
    };
    if end <= start || s[start..].starts_with(MARK_START.as_bytes()) {
        return None;
    }
    Some((start, end, "assignment"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Made-up credentials in the shapes of real ones. None of them is a real key.
    const SAMPLES: &[(&str, &str)] = &[
        ("export OPENAI=sk-proj-Zx81Qw7TmLp03RbVd9KfHs2N", "[REDACTED:"),
        ("key sk-3fJ9dkQ02LmZpW7xRt5YvB1nC8aE4gHs", "[REDACTED:openai-key]"),
        ("sk-ant-api03-Xy7Kq2LmN9pR4sT6vW8zA1bC3dE5fG7hJ9kL", "[REDACTED:anthropic-key]"),
        ("aws AKIAQ3EXAMPLE7Z2W4XY done", "[REDACTED:aws-key]"),
        ("ghp_R4nd0mTok3nV4lu3F0rT35t1ngOnly000000", "[REDACTED:github-token]"),
        ("gho_aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5", "[REDACTED:github-token]"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "[REDACTED:github-token]"),
        ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKl", "[REDACTED:slack-token]"),
        ("glpat-xY9zAb3Cd5Ef7Gh1Ij2K", "[REDACTED:gitlab-token]"),
        ("AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "[REDACTED:google-api-key]"),
        ("curl -H 'Authorization: Bearer abc123def456ghi789'", "[REDACTED:authorization]"),
        ("Bearer 9f8e7d6c5b4a39281706f5e4", "[REDACTED:bearer-token]"),
        (
            "a\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\nz",
            "a\n[REDACTED:private-key]\nz",
        ),
        ("git clone https://dev:Hunter2pass@git.example.com/x.git", "https://dev:[REDACTED:url-password]@git.example.com/x.git"),
        ("DB_PASSWORD=correct-horse ./run", "DB_PASSWORD=[REDACTED:assignment] ./run"),
        ("GITHUB_TOKEN=\"abc def\" x", "GITHUB_TOKEN=\"[REDACTED:assignment]\" x"),
        ("?client_secret=s3cr3t&x=1", "?client_secret=[REDACTED:assignment]&x=1"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLW5vdC1yZWFs",
            "jwt [REDACTED:jwt]",
        ),
    ];

    #[test]
    fn samples_are_redacted() {
        for (input, want) in SAMPLES {
            let out = redact_str(input);
            assert!(out.contains(want), "{input:?} -> {out:?}, want {want:?}");
            // Idempotent: a second pass leaves a redacted string alone.
            assert_eq!(redact_str(&out), out, "second pass over {out:?}");
        }
    }

    #[test]
    fn ordinary_text_is_kept() {
        const NEGATIVES: &[&str] = &[
            "the skeleton task-runner asks for a desk-lamp",
            "pip install scikit-learn; sk-learn-is-a-popular-python-library-name",
            "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 fixed it",
            "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "bearer tokens are described in RFC 6750",
            "max_tokens=4096 temperature=0",
            "https://example.com/path?q=1",
            "user@example.com wrote: see http://host:8080/x",
            "AKIA is a prefix; TAKIAXXXXXXXXXXXXXXXXXX is not a key",
            "the password is required",
            "eyJ alone is not a token",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            "cargo test --workspace -- --nocapture",
        ];
        for text in NEGATIVES {
            assert_eq!(redact_str(text), *text, "must not change {text:?}");
        }
    }

    #[test]
    fn values_keys_and_secret_fields() {
        let mut v = json!({
            "cmd": ["curl", "-u", "https://u:pw1234@h.example/"],
            "env": {"API_TOKEN": "plainvalue", "HOME": "/home/dev"},
            "password": "hunter2",
            "note": {"sk-3fJ9dkQ02LmZpW7xRt5YvB1nC8aE4gHs": 1},
            "n": 42
        });
        redact_value(&mut v);
        let text = v.to_string();
        for gone in ["pw1234", "plainvalue", "hunter2", "3fJ9dkQ02"] {
            assert!(!text.contains(gone), "{gone} left in {text}");
        }
        assert_eq!(v["env"]["HOME"], "/home/dev");
        assert_eq!(v["n"], 42);
        assert_eq!(v["password"], "[REDACTED:field]");
    }
}

#[cfg(test)]
mod provider_key_tests {
    use super::*;
    use serde_json::json;

    /// The model providers' keys (issue 14): wherever one lands in an event (a command's
    /// output, an argument, a header, a nested field, a journal record), it is gone from
    /// the redacted event. Each key is made up, in the shape of a real one.
    #[test]
    fn provider_keys_in_an_event_are_redacted() {
        let keys = [
            (
                "sk-ant-api03-Xy7Kq2LmN9pR4sT6vW8zA1bC3dE5fG7hJ9kL-AbCdEfAA",
                "anthropic-key",
            ),
            ("sk-proj-Zx81Qw7TmLp03RbVd9KfHs2NqWeRtY", "openai-key"),
            ("sk-3fJ9dkQ02LmZpW7xRt5YvB1nC8aE4gHs", "openai-key"),
            ("sk-or-v1-0123456789abcdef0123456789abcdef", "openai-key"),
        ];
        for (key, kind) in keys {
            let mut event = json!({
                "output": format!("printenv said {key}\n"),
                "argv": ["curl", "-H", format!("x-api-key: {key}"), "https://api.example.com"],
                "headers": {"authorization": format!("Bearer {key}")},
                "record": {"role": "user", "content": [{"type": "text", "text": format!("use {key} please")}]},
                "note": "the build passed",
            });
            redact_value(&mut event);
            let text = event.to_string();
            let secret = &key[key.len() - 12..];
            assert!(!text.contains(secret), "{key} left in {text}");
            assert!(
                text.contains(&format!("[REDACTED:{kind}]")),
                "{kind} missing in {text}"
            );
            // What is not a key stays as it was.
            assert_eq!(event["note"], "the build passed");
            assert_eq!(event["argv"][0], "curl");
            assert_eq!(event["argv"][3], "https://api.example.com");
        }
        // A key with no known shape is still caught by its header's name.
        let mut event = json!({"argv": ["curl", "-H", "x-api-key: plainsecretvalue"]});
        redact_value(&mut event);
        assert!(!event.to_string().contains("plainsecretvalue"), "{event}");
        // Negative control: the same value under a harmless name is kept (the redactor
        // cannot know it) — which is why keys never enter events in the first place.
        let mut event = json!({"argv": ["echo", "plainsecretvalue"]});
        redact_value(&mut event);
        assert!(event.to_string().contains("plainsecretvalue"));
    }
}

#[cfg(test)]
mod argv_tests {
    use super::*;
    use serde_json::json;

    fn redacted(v: Value) -> String {
        let mut v = v;
        redact_value(&mut v);
        v.to_string()
    }

    /// The samples of the security review: each leaked before argv-aware redaction.
    #[test]
    fn secrets_in_argument_vectors_and_common_shapes_are_redacted() {
        let cases = [
            (json!(["mysql", "--password", "hunter2"]), "hunter2"),
            (json!(["mysql", "-phunter2", "db"]), "hunter2"),
            (json!(["sshpass", "-p", "hunter2", "ssh", "host"]), "hunter2"),
            (json!(["docker", "login", "-u", "me", "-p", "hunter2"]), "hunter2"),
            (json!(["curl", "-u", "admin:hunter2", "https://x.test"]), "hunter2"),
            (
                json!(["aws", "configure", "set", "aws_secret_access_key", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"]),
                "wJalrXUtnFEMI",
            ),
            (json!(["tool", "--secret", "abc123def"]), "abc123def"),
            (json!(["tool", "--auth-token", "abc123def"]), "abc123def"),
            (json!(["tool", "--api-key=abc123def"]), "abc123def"),
            (json!(["env", "STRIPE_KEY=sk_live_51HxYzAbCdEfGhIjKlMnOp"]), "sk_live_51Hx"),
            (json!(["echo", "rk_live_51HxYzAbCdEfGhIjKlMnOp"]), "rk_live_51Hx"),
            (json!(["echo", "npm_abcdefghijklmnopqrstuvwxyz0123456789"]), "npm_abcdef"),
            (json!(["echo", "hf_abcdefghijklmnopqrstuvwxyz0123456789"]), "hf_abcdef"),
            (json!(["echo", "xapp-1-A0B1C2D3E4F5-123456789-abcdef0123456789"]), "xapp-1-A0B1"),
            (json!(["env", "MYSQL_PWD=hunter2secret"]), "hunter2secret"),
            (json!(["env", "SECRET_KEY_BASE=0123456789abcdef0123"]), "0123456789abcdef0123"),
            (
                json!(["curl", "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX"]),
                "XXXXXXXXXXXXXXXX",
            ),
            (json!(["curl", "https://s3.test/x?X-Amz-Signature=abcdef0123456789"]), "abcdef0123456789"),
            (json!(["curl", "-H", "Cookie: session=abcdef0123456789"]), "abcdef0123456789"),
            (
                json!(["printf", "-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAA", "-----END OPENSSH PRIVATE KEY-----"]),
                "b3BlbnNzaC1rZXktdjEAAAAA",
            ),
            (
                json!(["echo", "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGXYZabc\n-----END PGP PRIVATE KEY BLOCK-----"]),
                "lQOYBGXYZabc",
            ),
            (json!({"token": ["abc123def"]}), "abc123def"),
            // The second review (F4).
            (json!(["curl", "--user=alice:hunter2", "https://x.test"]), "hunter2"),
            (json!(["curl", "-ualice:hunter2", "https://x.test"]), "hunter2"),
            (json!(["curl", "--proxy-user=alice:hunter2", "https://x.test"]), "hunter2"),
            (json!(["sudo", "mysql", "-uroot", "-phunter2"]), "hunter2"),
            (json!(["docker", "exec", "-it", "db", "mysql", "-uroot", "-phunter2"]), "hunter2"),
            (json!(["/usr/bin/mysql", "-u", "root", "-p", "hunter2"]), "hunter2"),
            (json!(["wget", "--ftp-password", "hunter2", "ftp://x.test"]), "hunter2"),
            (json!(["vault", "login", "--vault-token=hunter2"]), "hunter2"),
            (json!(["tool", "--client-secret", "hunter2"]), "hunter2"),
            (json!(["openssl", "enc", "-aes256", "-pass", "pass:hunter2"]), "hunter2"),
            (json!(["openssl", "pkcs12", "-passin", "pass:hunter2"]), "hunter2"),
            (json!(["openssl", "pkcs12", "-passout", "pass:hunter2"]), "hunter2"),
            (json!(["redis-cli", "-a", "hunter2", "ping"]), "hunter2"),
            (json!(["zip", "-P", "hunter2", "a.zip", "f"]), "hunter2"),
            (json!(["unzip", "-P", "hunter2", "a.zip"]), "hunter2"),
            (json!(["7z", "a", "-phunter2", "a.7z", "f"]), "hunter2"),
            (json!(["7z", "x", "-P", "hunter2", "a.7z"]), "hunter2"),
            (json!(["env", "DB_PASS=hunter2"]), "hunter2"),
            (json!({"password": 12345678}), "12345678"),
        ];
        for (value, secret) in cases {
            let shown = value.to_string();
            let out = redacted(value);
            assert!(!out.contains(secret), "{shown} -> {out}");
            assert!(out.contains(MARK_START), "{shown} -> {out}");
        }
    }

    /// Negative controls: what is not a secret stays.
    #[test]
    fn ordinary_arguments_are_kept() {
        for value in [
            json!(["psql", "-p", "5432", "-h", "db"]),
            json!(["sudo", "-u", "root", "ls"]),
            json!(["sudo", "-uroot", "ls"]),
            json!(["sudo", "psql", "-p", "5432", "-U", "me"]),
            json!(["ssh", "-p", "2222", "host"]),
            json!(["zip", "-r", "a.zip", "dir"]),
            json!(["git", "log", "--no-password-prompt", "x"]),
            json!(["openssl", "enc", "-pass", "file:/tmp/pw"]),
            json!(["curl", "--user=alice", "https://x.test"]),
            json!(["git", "commit", "-m", "fix the password reset page"]),
            json!(["cargo", "test", "--", "--test-threads=2"]),
            json!(["ls", "-la", "/tmp"]),
        ] {
            let shown = value.to_string();
            assert_eq!(redacted(value), shown);
        }
    }
}
