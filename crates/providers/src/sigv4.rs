//! AWS Signature Version 4 for a request Understudy sends (Bedrock): the
//! canonical request, the string to sign, the derived key and the
//! `Authorization` header, with ring's HMAC-SHA256 and SHA-256 (already in
//! the build under rustls). Checked against AWS's published test suite
//! (`tests/data/aws-signing-test-suite/`).
//!
//! Rules (AWS "Create a signed AWS API request"): the path is normalized
//! (`.` and `..` segments, repeated slashes) where the service allows it,
//! then every byte but the unreserved ones is percent-encoded (a `%`
//! already there too: non-S3 services sign the path encoded twice); query
//! pairs are encoded and sorted; header names are lowercased, values
//! trimmed with inner runs of spaces made one, repeats joined by `,`;
//! the session token, when there is one, is signed as
//! `x-amz-security-token`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use ring::{digest, hmac};

/// The credentials a request is signed with. `Debug` shows the key id only.
#[derive(Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// What a signature is scoped to, and how the request is read.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub region: &'a str,
    pub service: &'a str,
    pub time: SystemTime,
    /// Normalize the path (every service but S3).
    pub normalize_path: bool,
    /// Encode the path as sent once more, `%` included (every service but
    /// S3: Bedrock signs `/model/a%3A0` as `/model/a%253A0`). Off, escapes
    /// already in the path are kept as they are.
    pub double_encode_path: bool,
    /// Also send and sign `x-amz-content-sha256`.
    pub content_sha256_header: bool,
}

/// A request to sign: its method, path and query as they will be sent,
/// its headers (`host` among them) and its exact body bytes.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// The headers signing adds to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// `(name, value)`: `x-amz-date`, then `x-amz-security-token` and
    /// `x-amz-content-sha256` where they apply, then `authorization`.
    pub headers: Vec<(&'static str, String)>,
    /// The lowercase hex signature.
    pub signature: String,
    /// What was signed (for tests and debugging; holds no secret).
    pub canonical_request: String,
    pub string_to_sign: String,
}

/// Signs `req` for `scope` with `creds`.
pub fn sign(req: &Request<'_>, scope: &Scope<'_>, creds: &Credentials) -> Signed {
    let (amz_date, date) = amz_dates(scope.time);
    let body_hash = hex(digest::digest(&digest::SHA256, req.body).as_ref());
    let mut added: Vec<(&'static str, String)> = vec![("x-amz-date", amz_date.clone())];
    if let Some(token) = &creds.session_token {
        added.push(("x-amz-security-token", token.clone()));
    }
    if scope.content_sha256_header {
        added.push(("x-amz-content-sha256", body_hash.clone()));
    }
    let (canonical, signed_headers) = canonical_request(req, scope, &added, &body_hash);
    let credential_scope = format!("{date}/{}/{}/aws4_request", scope.region, scope.service);
    let to_sign = string_to_sign(&amz_date, &credential_scope, &canonical);
    let key = signing_key(&creds.secret_access_key, &date, scope.region, scope.service);
    let signature = hex(hmac::sign(&key, to_sign.as_bytes()).as_ref());
    added.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{credential_scope}, SignedHeaders={signed_headers}, Signature={signature}",
            creds.access_key_id
        ),
    ));
    Signed {
        headers: added,
        signature,
        canonical_request: canonical,
        string_to_sign: to_sign,
    }
}

/// The canonical request and its signed-header list.
pub fn canonical_request(
    req: &Request<'_>,
    scope: &Scope<'_>,
    added: &[(&str, String)],
    body_hash: &str,
) -> (String, String) {
    let mut headers: Vec<(String, String)> = Vec::new();
    let all = req
        .headers
        .iter()
        .map(|&(n, v)| (n, v))
        .chain(added.iter().map(|(n, v)| (*n, v.as_str())));
    for (name, value) in all {
        let name = name.to_ascii_lowercase();
        let value = collapse(value);
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, joined)) => {
                joined.push(',');
                joined.push_str(&value);
            }
            None => headers.push((name, value)),
        }
    }
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let mut out = String::new();
    let _ = writeln!(out, "{}", req.method);
    let path = canonical_path(req.path, scope.normalize_path, scope.double_encode_path);
    let _ = writeln!(out, "{path}");
    let _ = writeln!(out, "{}", canonical_query(req.query));
    for (name, value) in &headers {
        let _ = writeln!(out, "{name}:{value}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{signed}");
    out.push_str(body_hash);
    (out, signed)
}

/// The string to sign for a canonical request.
pub fn string_to_sign(amz_date: &str, credential_scope: &str, canonical: &str) -> String {
    let hashed = hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref());
    format!("AWS4-HMAC-SHA256\n{amz_date}\n{credential_scope}\n{hashed}")
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let step = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let k = step(format!("AWS4{secret}").as_bytes(), date);
    let k = step(k.as_ref(), region);
    let k = step(k.as_ref(), service);
    let k = step(k.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, k.as_ref())
}

/// A header value trimmed, its lines joined and its runs of spaces made one.
fn collapse(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for word in value.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn canonical_path(path: &str, normalize: bool, double: bool) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let segments: Vec<&str> = if normalize {
        let mut kept: Vec<&str> = Vec::new();
        for s in path.split('/') {
            match s {
                "" | "." => {}
                ".." => {
                    kept.pop();
                }
                s => kept.push(s),
            }
        }
        kept
    } else {
        path.split('/').skip(1).collect()
    };
    let mut out = String::new();
    for s in &segments {
        out.push('/');
        if double {
            encode_into(s, &mut out);
        } else {
            encode_keeping_escapes(s, &mut out);
        }
    }
    // A trailing slash stays (`/a/` is not `/a`); an empty path is `/`.
    if out.is_empty() || (path.ends_with('/') && !out.ends_with('/')) {
        out.push('/');
    }
    out
}

fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let mut ek = String::new();
            let mut ev = String::new();
            encode_into(&percent_decode(k), &mut ek);
            encode_into(&percent_decode(v), &mut ev);
            (ek, ev)
        })
        .collect();
    pairs.sort();
    let joined: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    joined.join("&")
}

/// Every byte but `A-Z a-z 0-9 - _ . ~` as `%XX`.
fn encode_into(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// As [`encode_into`], but a `%XX` escape already there stays one.
fn encode_keeping_escapes(s: &str, out: &mut String) {
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let escape = c == b'%'
            && b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if escape {
            encode_into(&s[start..i], out);
            out.push('%');
            start = i + 1;
        }
    }
    encode_into(&s[start..], out);
}

/// `%XX` sequences decoded (a query as sent is already encoded; it is
/// encoded again in one canonical form). Invalid sequences stay as they are.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex_at = |j: usize| b.get(j).and_then(|c| char::from(*c).to_digit(16));
        match (b[i], hex_at(i + 1), hex_at(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `20150830T123600Z` and `20150830` for `time` (UTC).
pub fn amz_dates(time: SystemTime) -> (String, String) {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = understudy_types::clock::civil_from_days(days as i64);
    let date = format!("{y:04}{m:02}{d:02}");
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    (stamp, date)
}

#[cfg(test)]
#[path = "sigv4_tests.rs"]
mod tests;
