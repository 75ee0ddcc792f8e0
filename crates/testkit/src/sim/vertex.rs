//! Google Vertex AI in front of the Anthropic or the Gemini simulator:
//! what aiplatform.googleapis.com and its token endpoint check, and how
//! they answer.
//!
//! - `POST /token` is the OAuth token endpoint of the test service account
//!   (`crates/testkit/data/vertex-test-sa.json`, a throwaway key): the
//!   JWT-bearer grant, the assertion's RS256 signature verified against
//!   the account's public key, `iss` its e-mail, `aud` the key file's
//!   `token_uri`, `scope` with `cloud-platform`, `iat` within five
//!   minutes of now, `exp` after now and at most an hour after `iat`. It
//!   answers `{"access_token","expires_in","token_type":"Bearer"}` with a
//!   lifetime the test sets, and counts exchanges.
//! - Every other request needs `Authorization: Bearer` with a token it
//!   issued and that has not expired (else 401 `UNAUTHENTICATED`,
//!   `ACCESS_TOKEN_EXPIRED`), or a static token the test allowed.
//! - Claude: `/v1/projects/{p}/locations/{l}/publishers/anthropic/models/
//!   {m}:rawPredict|:streamRawPredict`, the body without `model` and with
//!   `anthropic_version: "vertex-2023-10-16"`, handed to the Anthropic
//!   simulator as `/v1/messages` with the path's model.
//! - Gemini: `…/publishers/google/models/{m}:generateContent` or
//!   `:streamGenerateContent?alt=sse`, roles only `user` and `model`
//!   (Vertex is stricter than AI Studio), handed to the Gemini simulator
//!   as `/v1beta/models/{m}:…`.
//!
//! Test-only (`test-support`): it carries the test key.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use serde_json::{Value, json};

use super::body::response;
use super::cloud::{Cloud, Refused};
use super::{Protocol, Received, SimBody, lock};

/// The test service account (a throwaway key; see `data/README.md`).
const KEY_FILE: &str = include_str!("../../data/vertex-test-sa.json");
const PUBLIC_KEY: &[u8] = include_bytes!("../../data/vertex-test-sa.pub.der");
/// Its e-mail address, the JWT's `iss`.
pub const TEST_CLIENT_EMAIL: &str = "understudy-test@understudy-sim.iam.gserviceaccount.com";

/// The simulated project and its token endpoint. Clone it to keep a
/// handle: a test changes the token lifetime, expires tokens or refuses
/// exchanges while the simulators run.
#[derive(Clone)]
pub struct VertexSim {
    inner: Arc<Account>,
}

struct Account {
    project: String,
    region: String,
    /// The `aud` assertions must carry (the key file's `token_uri`).
    token_uri: Mutex<Option<String>>,
    lifetime: Mutex<Duration>,
    /// Issued tokens and when each expires.
    tokens: Mutex<HashMap<String, Instant>>,
    allowed: Mutex<HashSet<String>>,
    exchanges: AtomicUsize,
    /// Exchanges made after every token issued before had expired.
    late: AtomicUsize,
    /// Exchanges refused because the test said so.
    refused: AtomicUsize,
    refusing: AtomicBool,
    minted: AtomicU64,
}

impl std::fmt::Debug for VertexSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VertexSim")
            .field("project", &self.inner.project)
            .field("region", &self.inner.region)
            .finish_non_exhaustive()
    }
}

impl VertexSim {
    /// A project in `region` (`global` too) whose tokens live an hour.
    pub fn new(project: &str, region: &str) -> Self {
        Self {
            inner: Arc::new(Account {
                project: project.to_owned(),
                region: region.to_owned(),
                token_uri: Mutex::new(None),
                lifetime: Mutex::new(Duration::from_secs(3600)),
                tokens: Mutex::new(HashMap::new()),
                allowed: Mutex::new(HashSet::new()),
                exchanges: AtomicUsize::new(0),
                late: AtomicUsize::new(0),
                refused: AtomicUsize::new(0),
                refusing: AtomicBool::new(false),
                minted: AtomicU64::new(0),
            }),
        }
    }

    /// Tokens issued from now on live this long.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        *lock(&self.inner.lifetime) = lifetime;
    }

    /// Takes this static access token (`api_key`) too.
    pub fn allow_token(&self, token: &str) {
        lock(&self.inner.allowed).insert(token.to_owned());
    }

    /// Every token issued so far expires now.
    pub fn expire_tokens(&self) {
        let now = Instant::now();
        for expiry in lock(&self.inner.tokens).values_mut() {
            *expiry = now;
        }
    }

    /// The token endpoint refuses every exchange (`invalid_grant`) while on.
    pub fn refuse_exchanges(&self, on: bool) {
        self.inner.refusing.store(on, Ordering::SeqCst);
    }

    /// Successful exchanges so far.
    pub fn exchanges(&self) -> usize {
        self.inner.exchanges.load(Ordering::SeqCst)
    }

    /// Successful exchanges made only once every token issued before
    /// had expired (a refresh that came too late: requests met an
    /// expired token or waited for a new one).
    pub fn late_exchanges(&self) -> usize {
        self.inner.late.load(Ordering::SeqCst)
    }

    /// Exchanges refused while [`Self::refuse_exchanges`] was on.
    pub fn refused_exchanges(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// Every access token issued so far (to check none leaks).
    pub fn issued_tokens(&self) -> Vec<String> {
        lock(&self.inner.tokens).keys().cloned().collect()
    }

    /// The private key's PEM text (to check it never leaks).
    pub fn private_key_pem() -> String {
        serde_json::from_str::<Value>(KEY_FILE).unwrap_or_default()["private_key"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Writes the test service account's key file with `token_uri` (the
    /// simulator's `{base_url}/token`), which assertions must then name
    /// as their audience; returns its path.
    pub fn key_file(&self, token_uri: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        *lock(&self.inner.token_uri) = Some(token_uri.to_owned());
        let mut key: Value = serde_json::from_str(KEY_FILE).unwrap_or_default();
        key["token_uri"] = token_uri.into();
        let path = std::env::temp_dir().join(format!(
            "understudy-vertex-sa-{}-{}.json",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        // A test's own temp file; failing to write it fails the test's
        // provider loudly when it reads the file.
        let _ = std::fs::write(&path, key.to_string());
        path
    }
}

impl super::SimProvider {
    /// Starts a Vertex simulator for `protocol` (`Messages`: Claude
    /// through rawPredict; `GenerateContent`: Gemini) in `account`'s
    /// project; it serves the account's token endpoint at `/token` too.
    pub async fn vertex(protocol: Protocol, account: &VertexSim) -> std::io::Result<Self> {
        let front = Front {
            account: account.clone(),
            protocol,
        };
        Self::start_behind(protocol, Some(Box::new(front))).await
    }
}

/// The account behind one protocol's endpoints.
struct Front {
    account: VertexSim,
    protocol: Protocol,
}

/// A refusal in Google's shape.
fn refuse(status: u16, rpc: &str, message: &str, reason: Option<&str>) -> Box<Refused> {
    let mut error = json!({ "code": status, "message": message, "status": rpc });
    if let Some(reason) = reason {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
        }]);
    }
    Box::new(Refused {
        response: response(
            status,
            &[("content-type", "application/json; charset=UTF-8")],
            json!({ "error": error }).to_string(),
        ),
        message: format!("{rpc}: {message}"),
    })
}

/// A refusal of the token endpoint (OAuth's shape).
fn oauth_refusal(error: &str, description: &str) -> Box<Refused> {
    Box::new(Refused {
        response: response(
            400,
            &[("content-type", "application/json")],
            json!({ "error": error, "error_description": description }).to_string(),
        ),
        message: format!("token endpoint: {error}: {description}"),
    })
}

impl Cloud for Front {
    fn serve(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let path = req.path.split('?').next().unwrap_or_default();
        (path == "/token").then(|| self.account.exchange(req))
    }

    /// A readiness probe's free token count: Claude's
    /// `count-tokens:rawPredict` (answered here: the model in the body), or
    /// Gemini's `{model}:countTokens` when its model is retired or the
    /// account refused (otherwise counted by the Gemini simulator as any
    /// count is).
    fn lookup(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let (publisher, model, method) = self.account.operation(req).ok()?;
        let claude = publisher == "anthropic" && model == "count-tokens" && method == "rawPredict";
        let gemini = publisher == "google" && method == "countTokens";
        if !claude && !gemini {
            return None;
        }
        let models = super::models::of(req);
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let model = if claude {
            body.get("model")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        } else {
            model
        };
        let revoked = models.is_some_and(|m| m.revoked());
        let retired = models.is_some_and(|m| m.retired(&model));
        if gemini && !revoked && !retired {
            return None;
        }
        Some((|| {
            // A revoked credential: Google's answer to a token it no
            // longer takes.
            if revoked {
                return Err(refuse(
                    401,
                    "UNAUTHENTICATED",
                    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                    Some("ACCESS_TOKEN_TYPE_UNSUPPORTED"),
                ));
            }
            self.account.check_bearer(req)?;
            if retired {
                return Err(refuse(
                    404,
                    "NOT_FOUND",
                    &format!(
                        "Publisher Model `projects/{}/locations/{}/publishers/{publisher}/models/{model}` not found.",
                        self.account.inner.project, self.account.inner.region
                    ),
                    None,
                ));
            }
            Ok(response(
                200,
                &[("content-type", "application/json")],
                json!({"input_tokens": 1}).to_string(),
            ))
        })())
    }

    fn admit(&self, req: &Received) -> Result<Received, Box<Refused>> {
        self.account.check_bearer(req)?;
        let (publisher, model, method) = self.account.operation(req)?;
        match (self.protocol, publisher.as_str()) {
            (Protocol::Messages, "anthropic") => as_anthropic(req, &model, &method),
            (Protocol::GenerateContent, "google") => as_gemini(req, &model, &method),
            _ => Err(refuse(
                404,
                "NOT_FOUND",
                &format!(
                    "Publisher Model `{publisher}/{model}` was not found or your project does not have access to it."
                ),
                None,
            )),
        }
    }
}

impl VertexSim {
    /// `POST /token`: the JWT-bearer grant, verified.
    fn exchange(&self, req: &Received) -> Result<hyper::Response<SimBody>, Box<Refused>> {
        let form: HashMap<String, String> = String::from_utf8_lossy(&req.body)
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter_map(|(k, v)| Some((percent_decode(k)?, percent_decode(v)?)))
            .collect();
        if req.method != "POST"
            || form.get("grant_type").map(String::as_str)
                != Some("urn:ietf:params:oauth:grant-type:jwt-bearer")
        {
            return Err(oauth_refusal(
                "unsupported_grant_type",
                "Invalid grant_type: expected the JWT-bearer grant",
            ));
        }
        let assertion = form.get("assertion").ok_or_else(|| {
            oauth_refusal("invalid_request", "Missing required parameter: assertion")
        })?;
        self.verify(assertion)?;
        if self.inner.refusing.load(Ordering::SeqCst) {
            // Scripted: a refusal the test asked for, not a violation.
            self.inner.refused.fetch_add(1, Ordering::SeqCst);
            return Ok(response(
                400,
                &[("content-type", "application/json")],
                json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
                    .to_string(),
            ));
        }
        let n = self.inner.minted.fetch_add(1, Ordering::SeqCst);
        let token = format!("ya29.sim-{n}-{:016x}", fastish_random(n));
        let lifetime = *lock(&self.inner.lifetime);
        let now = Instant::now();
        let mut tokens = lock(&self.inner.tokens);
        if !tokens.is_empty() && tokens.values().all(|&expiry| expiry <= now) {
            self.inner.late.fetch_add(1, Ordering::SeqCst);
        }
        tokens.insert(token.clone(), now + lifetime);
        drop(tokens);
        self.inner.exchanges.fetch_add(1, Ordering::SeqCst);
        Ok(response(
            200,
            &[("content-type", "application/json; charset=utf-8")],
            json!({
                "access_token": token,
                "expires_in": lifetime.as_secs().max(1),
                "token_type": "Bearer",
            })
            .to_string(),
        ))
    }

    /// The assertion's signature and claims.
    fn verify(&self, jwt: &str) -> Result<(), Box<Refused>> {
        let bad = |why: &str| oauth_refusal("invalid_grant", why);
        let parts: Vec<&str> = jwt.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err(bad("the assertion is not a JWT"));
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let decode = |part: &str| -> Result<Value, Box<Refused>> {
            let bytes = b64
                .decode(part)
                .map_err(|_| bad("a JWT part is not base64url"))?;
            serde_json::from_slice(&bytes).map_err(|_| bad("a JWT part is not JSON"))
        };
        let (header, claims) = (decode(header)?, decode(claims)?);
        if header["alg"] != "RS256" {
            return Err(bad("the JWT is not signed RS256"));
        }
        let signature = b64
            .decode(signature)
            .map_err(|_| bad("the JWT signature is not base64url"))?;
        let signed = &jwt[..jwt.rfind('.').unwrap_or(0)];
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, PUBLIC_KEY)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| bad("Invalid JWT Signature."))?;
        if claims["iss"] != TEST_CLIENT_EMAIL {
            return Err(bad("Invalid JWT: iss is not the service account"));
        }
        let aud = lock(&self.inner.token_uri).clone();
        if aud.is_none() || claims["aud"].as_str() != aud.as_deref() {
            return Err(bad("Invalid JWT: aud is not this token endpoint"));
        }
        let scopes = claims["scope"].as_str().unwrap_or_default();
        if !scopes
            .split(' ')
            .any(|s| s == "https://www.googleapis.com/auth/cloud-platform")
        {
            return Err(bad("Invalid JWT: no cloud-platform scope"));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
        match (iat, exp) {
            (Some(iat), Some(exp))
                if iat.abs_diff(now) <= 300 && exp > now && exp > iat && exp - iat <= 3600 =>
            {
                Ok(())
            }
            _ => Err(bad(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
            )),
        }
    }

    /// A bearer token this endpoint issued and that has not expired.
    fn check_bearer(&self, req: &Received) -> Result<(), Box<Refused>> {
        let unauthenticated = |reason: &str| {
            refuse(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                Some(reason),
            )
        };
        let token = req
            .header("authorization")
            .and_then(|a| a.strip_prefix("Bearer "))
            .ok_or_else(|| unauthenticated("CREDENTIALS_MISSING"))?;
        if lock(&self.inner.allowed).contains(token) {
            return Ok(());
        }
        match lock(&self.inner.tokens).get(token) {
            Some(expiry) if *expiry > Instant::now() => Ok(()),
            Some(_) => Err(unauthenticated("ACCESS_TOKEN_EXPIRED")),
            None => Err(unauthenticated("ACCESS_TOKEN_TYPE_UNSUPPORTED")),
        }
    }

    /// The publisher, model and method of a publisher-model path in this
    /// project and region.
    fn operation(&self, req: &Received) -> Result<(String, String, String), Box<Refused>> {
        let path = req.path.split('?').next().unwrap_or_default();
        let not_found = || {
            refuse(
                404,
                "NOT_FOUND",
                &format!("The requested URL {path} was not found on this server."),
                None,
            )
        };
        let rest = path.strip_prefix("/v1/projects/").ok_or_else(not_found)?;
        let segments: Vec<&str> = rest.split('/').collect();
        let [
            project,
            "locations",
            region,
            "publishers",
            publisher,
            "models",
            call,
        ] = segments[..]
        else {
            return Err(not_found());
        };
        if project != self.inner.project || region != self.inner.region {
            return Err(refuse(
                403,
                "PERMISSION_DENIED",
                &format!("Permission denied on resource project {project} (or location {region})."),
                None,
            ));
        }
        let (model, method) = call.split_once(':').ok_or_else(not_found)?;
        if req.method != "POST" {
            return Err(not_found());
        }
        Ok((publisher.to_owned(), model.to_owned(), method.to_owned()))
    }
}

/// Claude's body checked as rawPredict checks it, as api.anthropic.com
/// would have received it.
fn as_anthropic(req: &Received, model: &str, method: &str) -> Result<Received, Box<Refused>> {
    let invalid = |message: &str| {
        Box::new(Refused {
            response: response(
                400,
                &[("content-type", "application/json")],
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
                    .to_string(),
            ),
            message: format!("rawPredict: {message}"),
        })
    };
    let stream = match method {
        "rawPredict" => false,
        "streamRawPredict" => true,
        other => return Err(invalid(&format!("unknown method `{other}`"))),
    };
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&req.body) else {
        return Err(invalid("The request body is not valid JSON."));
    };
    if body.contains_key("model") {
        return Err(invalid("model: Extra inputs are not permitted"));
    }
    if body
        .remove("anthropic_version")
        .and_then(|v| v.as_str().map(str::to_owned))
        .as_deref()
        != Some("vertex-2023-10-16")
    {
        return Err(invalid(
            "anthropic_version: Input should be 'vertex-2023-10-16'",
        ));
    }
    body.insert("model".into(), Value::String(model.to_owned()));
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    } else {
        body.remove("stream");
    }
    let mut headers = passed_headers(req, &["content-type", "anthropic-beta"]);
    headers.push(("x-api-key".into(), "vertex-sim".into()));
    headers.push(("anthropic-version".into(), "2023-06-01".into()));
    Ok(rewritten(
        req,
        "/v1/messages".into(),
        headers,
        Value::Object(body).to_string(),
    ))
}

/// Gemini's body checked for Vertex's stricter roles, as the Generative
/// Language API would have received it.
fn as_gemini(req: &Received, model: &str, method: &str) -> Result<Received, Box<Refused>> {
    let query = req.path.split_once('?').map(|(_, q)| q);
    match (method, query) {
        ("generateContent" | "countTokens", _) => {}
        ("streamGenerateContent", Some(q)) if q.split('&').any(|p| p == "alt=sse") => {}
        ("streamGenerateContent", _) => {
            return Err(refuse(
                400,
                "INVALID_ARGUMENT",
                "this simulator serves streams only as SSE (`?alt=sse`); without it Vertex sends one JSON array",
                None,
            ));
        }
        (other, _) => {
            return Err(refuse(
                400,
                "INVALID_ARGUMENT",
                &format!("unknown method `{other}`"),
                None,
            ));
        }
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let roles_ok = body["contents"].as_array().is_none_or(|contents| {
        contents
            .iter()
            .all(|c| matches!(c["role"].as_str(), Some("user" | "model")))
    });
    if !roles_ok {
        return Err(refuse(
            400,
            "INVALID_ARGUMENT",
            "Please use a valid role: user, model.",
            None,
        ));
    }
    let mut path = format!("/v1beta/models/{model}:{method}");
    if let Some(query) = query {
        path = format!("{path}?{query}");
    }
    let mut headers = passed_headers(req, &["content-type"]);
    headers.push(("x-goog-api-key".into(), "vertex-sim".into()));
    Ok(rewritten(
        req,
        path,
        headers,
        String::from_utf8_lossy(&req.body).into_owned(),
    ))
}

fn passed_headers(req: &Received, names: &[&str]) -> Vec<(String, String)> {
    req.headers
        .iter()
        .filter(|(n, _)| names.contains(&n.as_str()))
        .cloned()
        .collect()
}

fn rewritten(
    req: &Received,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
) -> Received {
    Received {
        method: req.method.clone(),
        path,
        headers,
        body: Bytes::from(body),
        at: req.at,
        version: req.version,
        shared: req.shared.clone(),
        cached: Default::default(),
    }
}

/// Bits for a token no one guesses by its number (a test sim's tokens need
/// no more than that).
fn fastish_random(n: u64) -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    (t ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(17)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                out.push(u8::from_str_radix(s.get(i + 1..i + 3)?, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
