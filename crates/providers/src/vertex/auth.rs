//! How a Vertex request is authorized: `Authorization: Bearer <access
//! token>`, the token a static one from the settings (`api_key`), or one
//! exchanged for a JWT a service account signs (RS256, the OAuth 2.0
//! JWT-bearer grant at the key's `token_uri`).
//!
//! The [`GoogleToken`] cell is what the provider's actor refreshes: it
//! fetches at start and again at three quarters of each token's lifetime,
//! so that a request reads the held token without waiting. With no valid
//! token held (before the actor's first fetch, every refresh failing until
//! the token ran out, or Vertex saying it expired), a request never makes
//! the exchange itself: it asks the actor for one through the cell's
//! [`CredentialGate`] and waits at most
//! [`understudy_core::credentials::CREDENTIAL_WAIT`], else the target is
//! passed over (the exchange goes on, on the actor's task).
//!
//! Why three quarters: a one-hour token is renewed with 15 minutes left,
//! time for the actor's backoff (2 s doubling to a minute) to try a dozen
//! times before any request would see it run out; Google's own libraries
//! renew with under four minutes left, pydantic-ai after 50 of 60. A 30 s
//! test token is renewed with 7.5 s left.
//!
//! A key file that cannot be read (missing, not JSON, not a PEM key) does
//! not fail the provider's start: the cell holds no key, its status says
//! why, and each refresh reads the file again, so that writing a good key
//! recovers the provider without a restart.
//!
//! Nothing here shows a secret: not the private key, not the assertion,
//! not the token. [`Credentials::status`] names the account's e-mail
//! address at most, and its error names no file (the actor's log line
//! does, for the operator).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use reqwest::header::HeaderValue;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use tokio::time::Instant;
use understudy_core::{BoxFuture, CredentialGate, CredentialStatus, Credentials};
use understudy_types::{Failure, FailureKind};

/// The OAuth scope every Vertex call needs.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The grant a signed JWT is exchanged under.
pub(crate) const GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The assertion's lifetime: Google's maximum, an hour.
const ASSERTION_LIFETIME: u64 = 3600;

/// The longest lifetime an answered token is taken to have.
const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// A held token counts as expired this long before it does (a tenth of
/// its lifetime, at most this): a request never leaves with a token that
/// runs out on the way. Shorter than the quarter of its lifetime left when
/// the actor renews it, so the renewal still comes first.
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);

/// How long one exchange may take before it fails (the actor's own
/// bound on a refresh is longer).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// The most of a token endpoint's error answer quoted in an error.
const ERROR_QUOTE: usize = 200;

/// A Vertex provider's access token and where it comes from.
pub(crate) struct GoogleToken {
    source: Source,
    held: RwLock<Option<Held>>,
    /// Held while an exchange is under way: one at a time.
    flight: tokio::sync::Mutex<()>,
    /// Why the last exchange failed, naming no file.
    error: Mutex<Option<String>>,
    /// How long a request waits for a token the actor fetches.
    gate: CredentialGate,
    /// Exchanges made.
    exchanges: AtomicU64,
}

enum Source {
    /// `api_key`: a token someone else refreshes.
    Static(HeaderValue),
    /// A service account's key file, read again when it changes.
    Account(KeyFile),
    /// A token endpoint in-process (tests).
    #[cfg(test)]
    Fake(Fake),
}

#[cfg(test)]
pub(crate) type Fake =
    Box<dyn Fn() -> BoxFuture<'static, Result<(String, Duration), String>> + Send + Sync>;

/// A service account's key file and the key read from it, once it could
/// be.
struct KeyFile {
    file: PathBuf,
    client: reqwest::Client,
    key: RwLock<Option<Arc<Account>>>,
}

/// Why no token could be had: what the status shows (naming no file), and
/// what the actor logs (naming it).
struct Trouble {
    public: String,
    detail: String,
}

/// A service account's key, read from its JSON file.
pub(crate) struct Account {
    pub(crate) file: PathBuf,
    pub(crate) client_email: String,
    pub(crate) token_uri: String,
    key_id: Option<String>,
    key: RsaKeyPair,
    client: reqwest::Client,
    /// The file's modification time when it was read.
    modified: Option<SystemTime>,
}

struct Held {
    /// `Bearer <token>`, marked sensitive.
    header: HeaderValue,
    obtained: Instant,
    expires: Instant,
    expires_unix: u64,
}

impl std::fmt::Debug for GoogleToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleToken")
            .field("source", &self.status().source)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("file", &self.file)
            .field("client_email", &self.client_email)
            .finish_non_exhaustive()
    }
}

impl GoogleToken {
    /// A static access token (`api_key`).
    pub(crate) fn fixed(token: &str) -> Result<Self, String> {
        Ok(Self::of(Source::Static(crate::sensitive(&format!(
            "Bearer {token}"
        ))?)))
    }

    /// The service account of the JSON key `file`. A file that cannot be
    /// read now is read again at each refresh: the provider starts, and
    /// its status says why it has no token.
    pub(crate) fn account(file: &Path, client: reqwest::Client) -> Self {
        let (key, error) = match Account::load(file, client.clone()) {
            Ok(account) => (Some(Arc::new(account)), None),
            Err(e) => (None, Some(e)),
        };
        let token = Self::of(Source::Account(KeyFile {
            file: file.to_owned(),
            client,
            key: RwLock::new(key),
        }));
        if let Ok(mut held) = token.error.lock() {
            *held = error;
        }
        token
    }

    #[cfg(test)]
    pub(crate) fn fake(fetch: Fake) -> Self {
        Self::of(Source::Fake(fetch))
    }

    fn of(source: Source) -> Self {
        Self {
            source,
            held: RwLock::new(None),
            flight: tokio::sync::Mutex::new(()),
            error: Mutex::new(None),
            gate: CredentialGate::default(),
            exchanges: AtomicU64::new(0),
        }
    }

    /// Exchanges made so far.
    #[cfg(test)]
    pub(crate) fn exchanges(&self) -> u64 {
        self.exchanges.load(Ordering::SeqCst)
    }

    /// The `Authorization` value for a request now: the held token, else
    /// (none valid) the one the actor fetches, waited for at most the
    /// gate's bound.
    pub(crate) async fn current(&self) -> Result<HeaderValue, Failure> {
        if let Source::Static(value) = &self.source {
            return Ok(value.clone());
        }
        if let Some(value) = self.valid() {
            return Ok(value);
        }
        self.gate.ready(|| self.valid().is_some()).await;
        self.valid()
            .ok_or_else(|| Failure::new(FailureKind::Auth, "no access token is held"))
    }

    /// Vertex refused `rejected` (the `Authorization` a request went
    /// with): another one, unless the held token is already another one
    /// (a request that met the same refusal renewed it: one exchange for
    /// all of them), waited for at most the gate's bound. Whether the
    /// request may go again.
    pub(crate) async fn renew(&self, rejected: Option<&HeaderValue>) -> bool {
        if matches!(self.source, Source::Static(_)) {
            return false;
        }
        // The refused token is not handed out again.
        if let Ok(mut held) = self.held.write() {
            if held.as_ref().is_some_and(|h| rejected == Some(&h.header)) {
                *held = None;
            }
        }
        if self.valid().is_some() {
            return true;
        }
        // Within the window after a failed exchange, the gate says no at
        // once: the request falls back rather than wait on it.
        self.gate.ready(|| self.valid().is_some()).await
    }

    fn valid(&self) -> Option<HeaderValue> {
        let held = self.held.read().ok()?;
        let held = held.as_ref()?;
        (held.expires > Instant::now()).then(|| held.header.clone())
    }

    /// One exchange (the caller holds the flight): the new token held, or
    /// why not kept for `status` (the held token stays until it expires).
    /// The error returned is the log's: it may name the key file.
    async fn exchange(&self) -> Result<(), String> {
        self.exchanges.fetch_add(1, Ordering::SeqCst);
        let fetched = match &self.source {
            Source::Static(_) => return Ok(()),
            Source::Account(file) => match file.current() {
                Ok(account) => account.fetch().await.map_err(Trouble::plain),
                Err(trouble) => Err(trouble),
            },
            #[cfg(test)]
            Source::Fake(fetch) => fetch().await.map_err(Trouble::plain),
        };
        let result = fetched.and_then(|(token, lifetime)| {
            // Bounded: an absurd `expires_in` neither overflows a clock
            // nor keeps a token past what Google issues (an hour; a day
            // at most).
            let lifetime = lifetime.clamp(Duration::from_secs(1), MAX_TOKEN_LIFETIME);
            let header = crate::sensitive(&format!("Bearer {token}")).map_err(|_| {
                Trouble::plain(
                    "the token endpoint answered a token that cannot go in a header".to_owned(),
                )
            })?;
            let now = Instant::now();
            let unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_add(lifetime);
            if let Ok(mut held) = self.held.write() {
                *held = Some(Held {
                    header,
                    obtained: now,
                    expires: now + lifetime - EXPIRY_MARGIN.min(lifetime / 10),
                    expires_unix: unix.as_secs(),
                });
            }
            Ok(())
        });
        if let Ok(mut error) = self.error.lock() {
            *error = result.as_ref().err().map(|t| t.public.clone());
        }
        result.map_err(|t| t.detail)
    }
}

// === impl KeyFile ===

impl KeyFile {
    /// The key held, read again first when the file changed since (a
    /// rotated key), or read now when none could be yet. A changed file
    /// that cannot be read keeps the key held, with a warning (which
    /// names the file, never a value from it).
    fn current(&self) -> Result<Arc<Account>, Trouble> {
        let held = match self.key.read() {
            Ok(held) => held.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let modified = modified(&self.file);
        if let Some(held) = &held {
            if modified.is_none() || modified == held.modified {
                return Ok(Arc::clone(held));
            }
        }
        match Account::load(&self.file, self.client.clone()) {
            Ok(fresh) => {
                if held.is_some() {
                    tracing::info!(file = %self.file.display(), "the service account key changed: read again");
                }
                let fresh = Arc::new(fresh);
                if let Ok(mut key) = self.key.write() {
                    *key = Some(Arc::clone(&fresh));
                }
                Ok(fresh)
            }
            Err(e) => match held {
                Some(held) => {
                    tracing::warn!(file = %self.file.display(), error = %e, "the service account key changed but cannot be read: the old one stays");
                    Ok(held)
                }
                None => Err(Trouble {
                    detail: format!("{e} ({})", self.file.display()),
                    public: e,
                }),
            },
        }
    }
}

// === impl Trouble ===

impl Trouble {
    /// An error that names no file: the same for the status and the log.
    fn plain(e: String) -> Self {
        Self {
            public: e.clone(),
            detail: e,
        }
    }
}

/// When `file` last changed, if it can be told.
fn modified(file: &Path) -> Option<SystemTime> {
    std::fs::metadata(file).and_then(|m| m.modified()).ok()
}

impl Credentials for GoogleToken {
    fn refresh(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let _flight = self.flight.lock().await;
            self.exchange().await
        })
    }

    fn refresh_in(&self) -> Option<Duration> {
        if matches!(self.source, Source::Static(_)) {
            return None;
        }
        let held = self.held.read().ok()?;
        let Some(held) = held.as_ref() else {
            return Some(Duration::ZERO);
        };
        let lifetime = held.expires.saturating_duration_since(held.obtained);
        let due = held.obtained + lifetime.mul_f64(0.75);
        Some(due.saturating_duration_since(Instant::now()))
    }

    fn status(&self) -> CredentialStatus {
        let source = match &self.source {
            Source::Static(_) => "a static access token (api_key)".to_owned(),
            Source::Account(file) => match file.key.read().ok().and_then(|k| k.clone()) {
                Some(a) => format!("service account {}", a.client_email),
                None => "service account key file".to_owned(),
            },
            #[cfg(test)]
            Source::Fake(_) => "a test token endpoint".to_owned(),
        };
        CredentialStatus {
            source,
            expires_at: self
                .held
                .read()
                .ok()
                .and_then(|h| h.as_ref().map(|h| h.expires_unix)),
            error: self.error.lock().ok().and_then(|e| e.clone()),
        }
    }

    fn usable(&self) -> bool {
        matches!(self.source, Source::Static(_)) || self.valid().is_some()
    }

    fn gate(&self) -> Option<&CredentialGate> {
        (!matches!(self.source, Source::Static(_))).then_some(&self.gate)
    }
}

// === impl Account ===

impl Account {
    /// Reads a service-account key file. Errors name the file and what is
    /// wrong with it, never a value from it.
    #[cfg(test)]
    pub(crate) fn read(file: &Path, client: reqwest::Client) -> Result<Self, String> {
        Self::load(file, client).map_err(|e| format!("{e} ({})", file.display()))
    }

    /// [`Account::read`], its errors naming neither the file nor a value
    /// from it (what `understudy providers` and the API show).
    fn load(file: &Path, client: reqwest::Client) -> Result<Self, String> {
        #[derive(serde::Deserialize)]
        struct Key {
            #[serde(rename = "type")]
            kind: Option<String>,
            client_email: Option<String>,
            private_key: Option<String>,
            private_key_id: Option<String>,
            token_uri: Option<String>,
        }
        let modified = modified(file);
        let text = std::fs::read(file)
            .map_err(|e| format!("cannot read the service account key file: {}", e.kind()))?;
        let key: Key = serde_json::from_slice(&text).map_err(|e| {
            format!(
                "the service account key file is not a JSON key file (line {}, column {})",
                e.line(),
                e.column()
            )
        })?;
        match key.kind.as_deref() {
            Some("service_account") => {}
            Some(
                kind @ ("authorized_user" | "external_account" | "impersonated_service_account"),
            ) => {
                return Err(format!(
                    "the service account key file holds an `{kind}` credential; a vertex provider takes a service account key (`type: service_account`) or a static access token (`api_key`)"
                ));
            }
            _ => {
                return Err(
                    "the service account key file is not a service account key (`type: service_account`)"
                        .to_owned(),
                );
            }
        }
        let missing = |field: &str| format!("the service account key file has no `{field}`");
        let client_email = key.client_email.ok_or_else(|| missing("client_email"))?;
        let pem = key.private_key.ok_or_else(|| missing("private_key"))?;
        let token_uri = key
            .token_uri
            .unwrap_or_else(|| "https://oauth2.googleapis.com/token".to_owned());
        reqwest::Url::parse(&token_uri).map_err(|_| {
            "the service account key file has a `token_uri` that is not a URL".to_owned()
        })?;
        let der = pem_body(&pem).ok_or_else(|| {
            "the `private_key` of the service account key file is not a PEM `PRIVATE KEY` (PKCS#8)"
                .to_owned()
        })?;
        let key_pair = RsaKeyPair::from_pkcs8(&der).map_err(|_| {
            "the `private_key` of the service account key file is not an RSA key ring can sign with"
                .to_owned()
        })?;
        Ok(Self {
            file: file.to_owned(),
            client_email,
            token_uri,
            key_id: key.private_key_id,
            key: key_pair,
            client,
            modified,
        })
    }

    /// The signed JWT the token endpoint takes, issued at `now`.
    pub(crate) fn assertion(&self, now: SystemTime) -> Result<String, String> {
        let iat = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let mut header = serde_json::json!({ "alg": "RS256", "typ": "JWT" });
        if let Some(kid) = &self.key_id {
            header["kid"] = kid.as_str().into();
        }
        let claims = serde_json::json!({
            "iss": self.client_email,
            "scope": SCOPE,
            "aud": self.token_uri,
            "iat": iat,
            "exp": iat + ASSERTION_LIFETIME,
        });
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let signing_input = format!(
            "{}.{}",
            b64.encode(header.to_string()),
            b64.encode(claims.to_string())
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "cannot sign the service account's JWT".to_owned())?;
        Ok(format!("{signing_input}.{}", b64.encode(signature)))
    }

    /// One exchange at the token endpoint: the token and its lifetime.
    async fn fetch(&self) -> Result<(String, Duration), String> {
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            expires_in: Option<u64>,
        }
        let assertion = self.assertion(SystemTime::now())?;
        let form = format!("grant_type={}&assertion={assertion}", form_encode(GRANT));
        let failed = |why: String| format!("the token endpoint of {} {why}", self.client_email);
        let response = self
            .client
            .post(&self.token_uri)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .timeout(EXCHANGE_TIMEOUT)
            .send()
            .await
            .map_err(|e| failed(format!("could not be reached: {}", e.without_url())))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| failed(format!("answer was cut: {}", e.without_url())))?;
        if !(200..300).contains(&status) {
            return Err(failed(format!(
                "refused the key ({status}): {}",
                refusal(&body)
            )));
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|_| failed("answered no `access_token`".to_owned()))?;
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(3600));
        Ok((answer.access_token, lifetime))
    }
}

/// What an OAuth error answer says (`error`, `error_description`), bounded;
/// it never echoes the assertion.
fn refusal(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct OAuthError {
        error: Option<serde_json::Value>,
        error_description: Option<String>,
    }
    let said = match serde_json::from_slice::<OAuthError>(body) {
        Ok(OAuthError {
            error: Some(serde_json::Value::String(error)),
            error_description,
        }) => match error_description {
            Some(d) => format!("{error}: {d}"),
            None => error,
        },
        Ok(OAuthError {
            error: Some(error), ..
        }) => error
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("an error")
            .to_owned(),
        _ => "an answer that is not an OAuth error".to_owned(),
    };
    said.chars().take(ERROR_QUOTE).collect()
}

/// The DER inside a PEM `PRIVATE KEY` block.
fn pem_body(pem: &str) -> Option<Vec<u8>> {
    let start = pem.find("-----BEGIN PRIVATE KEY-----")? + "-----BEGIN PRIVATE KEY-----".len();
    let end = pem[start..].find("-----END PRIVATE KEY-----")? + start;
    let b64: String = pem[start..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// `application/x-www-form-urlencoded` for a value (the JWT's alphabet,
/// base64url and `.`, needs none; the grant's `:` does).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'*') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A shared cell, as both of a provider's protocols hold it.
pub(crate) type Token = Arc<GoogleToken>;

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
