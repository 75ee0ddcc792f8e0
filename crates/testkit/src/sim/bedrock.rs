//! AWS Bedrock in front of the Anthropic simulator: what bedrock-runtime
//! checks and how it answers.
//!
//! - Paths: `POST /model/{modelId}/invoke` and
//!   `/invoke-with-response-stream`, the id percent-decoded; and
//!   `/converse` and `/converse-stream`, Converse's own body checked and
//!   answered in its own shape (`bedrock_converse.rs`) around the same
//!   Anthropic simulator, behind the same checks of the signature.
//! - Auth: every request's SigV4 signature is recomputed from the bytes
//!   received (service `bedrock`, this region, the known key, the session
//!   token when there is one, a date within five minutes) — with
//!   `understudy_providers::sigv4`, which is itself checked against AWS's
//!   published test suite; or a Bedrock API key as a bearer. A session
//!   token marked expired gets `ExpiredTokenException` (`bedrock/auth.rs`).
//! - The body: `anthropic_version` must be `bedrock-2023-05-31`; `model`
//!   and `stream` are extraneous keys; `anthropic_beta` holds only betas
//!   Bedrock takes.
//! - Answers: errors in Bedrock's shape (`x-amzn-errortype`, a `message`);
//!   a stream as `application/vnd.amazon.eventstream`, each Anthropic event
//!   a `chunk` whose `bytes` is its JSON in base64 (with padding), every
//!   frame split across two writes; an error event becomes an exception
//!   message. The frames are written with `understudy_wire::eventstream`,
//!   whose encoder reproduces AWS's reference messages byte for byte (its
//!   tests), so the simulator still holds the wire to AWS's bytes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use understudy_providers::sigv4;
use understudy_wire::eventstream::{HeaderValue as EsValue, Message};

use super::bedrock_converse;
use super::body::{ChannelBody, response};
use super::cloud::{Cloud, Refused};
use super::{Received, SimBody, lock};

mod auth;

/// The betas Bedrock's InvokeModel takes, by prefix.
const BETAS: [&str; 9] = [
    "computer-use-",
    "token-efficient-tools-",
    "interleaved-thinking-",
    "output-128k-",
    "context-1m-",
    "context-management-",
    "effort-",
    "tool-search-tool-",
    "tool-examples-",
];

/// The simulated account: its region and the credentials it knows. Clone
/// it to keep a handle: a test can expire a session token while the
/// simulator runs.
#[derive(Clone)]
pub struct BedrockSim {
    inner: Arc<Account>,
}

struct Account {
    region: String,
    keys: Mutex<Vec<sigv4::Credentials>>,
    bearer: Option<String>,
    expired: Mutex<HashSet<String>>,
    /// The exception a stream's error event becomes (`None`: by its type).
    exception: Mutex<Option<String>>,
}

impl std::fmt::Debug for BedrockSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BedrockSim")
            .field("region", &self.inner.region)
            .finish_non_exhaustive()
    }
}

impl BedrockSim {
    /// An account in `region` that knows these keys (and, with a
    /// session token, takes them only with it).
    pub fn new(region: &str, key_id: &str, secret: &str, session_token: Option<&str>) -> Self {
        Self {
            inner: Arc::new(Account {
                region: region.to_owned(),
                keys: Mutex::new(vec![keys(key_id, secret, session_token)]),
                bearer: None,
                expired: Mutex::new(HashSet::new()),
                exception: Mutex::new(None),
            }),
        }
    }

    /// An account in `region` that takes this Bedrock API key.
    pub fn with_api_key(region: &str, key: &str) -> Self {
        Self {
            inner: Arc::new(Account {
                region: region.to_owned(),
                keys: Mutex::new(Vec::new()),
                bearer: Some(key.to_owned()),
                expired: Mutex::new(HashSet::new()),
                exception: Mutex::new(None),
            }),
        }
    }

    /// Knows these keys too (a rotated set, a new session token).
    pub fn add_keys(&self, key_id: &str, secret: &str, session_token: Option<&str>) {
        lock(&self.inner.keys).push(keys(key_id, secret, session_token));
    }

    /// Requests signed with this session token get `ExpiredTokenException`.
    pub fn expire_session_token(&self, token: &str) {
        lock(&self.inner.expired).insert(token.to_owned());
    }

    /// A stream's error event (`StreamEnd::ErrorEvent`) comes as this
    /// exception (`throttlingException`, `modelStreamErrorException`, …)
    /// rather than the one its error type names.
    pub fn stream_exception(&self, kind: &str) {
        *lock(&self.inner.exception) = Some(kind.to_owned());
    }
}

fn keys(key_id: &str, secret: &str, session_token: Option<&str>) -> sigv4::Credentials {
    sigv4::Credentials {
        access_key_id: key_id.to_owned(),
        secret_access_key: secret.to_owned(),
        session_token: session_token.map(str::to_owned),
    }
}

impl super::SimProvider {
    /// Starts a Bedrock simulator (Claude through InvokeModel, any model
    /// through Converse) for `account`.
    pub async fn bedrock(account: &BedrockSim) -> std::io::Result<Self> {
        let sim =
            Self::start_behind(super::Protocol::Messages, Some(Box::new(account.clone()))).await?;
        // Claude's minimum cacheable prefixes as Bedrock lists them.
        sim.cache_as_bedrock();
        Ok(sim)
    }
}

/// A refusal in Bedrock's shape.
pub(super) fn refuse(status: u16, kind: &str, message: &str) -> Box<Refused> {
    Box::new(Refused {
        response: error(status, kind, message),
        message: format!("{kind}: {message}"),
    })
}

fn error(status: u16, kind: &str, message: &str) -> hyper::Response<SimBody> {
    let errortype = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    response(
        status,
        &[
            ("content-type", "application/json"),
            ("x-amzn-errortype", &errortype),
            ("x-amzn-requestid", "0b1f3ae6-sim"),
        ],
        json!({ "message": message }).to_string(),
    )
}

/// An operation of bedrock-runtime's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Invoke { stream: bool },
    Converse { stream: bool },
}

impl Cloud for BedrockSim {
    /// The control plane's lookups, as a readiness probe makes them:
    /// `GET /foundation-models/{id}` and `GET /inference-profiles/{id}`,
    /// signed like every call (service `bedrock`).
    fn lookup(&self, req: &Received) -> Option<Result<hyper::Response<SimBody>, Box<Refused>>> {
        let path = req.path.split('?').next().unwrap_or_default();
        let (profile, id) = match path.strip_prefix("/foundation-models/") {
            Some(id) => (false, id),
            None => (true, path.strip_prefix("/inference-profiles/")?),
        };
        if req.method != "GET" {
            return None;
        }
        Some((|| {
            if super::models::of(req).is_some_and(|m| m.revoked()) {
                return Err(refuse(
                    403,
                    "UnrecognizedClientException",
                    "The security token included in the request is invalid.",
                ));
            }
            self.check_auth(req)?;
            let id = percent_decode(id)
                .ok_or_else(|| refuse(400, "ValidationException", "a bad model id"))?;
            if super::models::of(req).is_some_and(|m| m.retired(&id)) {
                return Err(refuse(
                    404,
                    "ResourceNotFoundException",
                    "Could not resolve the foundation model from the provided model identifier.",
                ));
            }
            let region = &self.inner.region;
            let body = if profile {
                json!({
                    "inferenceProfileId": id, "inferenceProfileName": id,
                    "inferenceProfileArn": format!("arn:aws:bedrock:{region}:000000000000:inference-profile/{id}"),
                    "status": "ACTIVE", "type": "SYSTEM_DEFINED", "models": [],
                })
            } else {
                json!({"modelDetails": {
                    "modelArn": format!("arn:aws:bedrock:{region}::foundation-model/{id}"),
                    "modelId": id, "modelName": id, "providerName": "Anthropic",
                    "inputModalities": ["TEXT"], "outputModalities": ["TEXT"],
                    "responseStreamingSupported": true,
                    "inferenceTypesSupported": ["ON_DEMAND"],
                    "modelLifecycle": {"status": "ACTIVE"},
                }})
            };
            Ok(response(
                200,
                &[("content-type", "application/json")],
                body.to_string(),
            ))
        })())
    }

    fn admit(&self, req: &Received) -> Result<Received, Box<Refused>> {
        let (model, op) = operation(req)?;
        self.check_auth(req)?;
        match op {
            Op::Invoke { stream } => {
                let body = checked_body(req)?;
                Ok(as_anthropic(req, body, &model, stream))
            }
            Op::Converse { stream } => {
                let body = serde_json::from_slice::<Value>(&req.body).unwrap_or(Value::Null);
                bedrock_converse::check(&body)
                    .map_err(|message| refuse(400, "ValidationException", &message))?;
                Ok(bedrock_converse::as_anthropic(req, &body, &model, stream))
            }
        }
    }

    fn wrap(&self, req: &Received, answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
        let status = answer.status().as_u16();
        if answer.headers().contains_key("x-amzn-errortype") {
            return answer;
        }
        if !(200..300).contains(&status) {
            return bedrock_error(answer);
        }
        let streamed = answer
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let exception = lock(&self.inner.exception).clone();
        match operation(req).map(|(_, op)| op) {
            Ok(Op::Invoke { stream: true }) if streamed => event_stream(
                answer,
                Box::new(move |data| frame_of(data, exception.as_deref())),
            ),
            Ok(Op::Converse { stream: true }) if streamed => {
                let mut frames = bedrock_converse::StreamFrames::new(exception);
                event_stream(
                    answer,
                    Box::new(move |data| {
                        let parsed: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                        frames.frames(&parsed)
                    }),
                )
            }
            Ok(Op::Converse { stream: false }) => converse_answer(answer),
            _ => answer,
        }
    }
}

/// The model id and the operation.
fn operation(req: &Received) -> Result<(String, Op), Box<Refused>> {
    let path = req.path.split('?').next().unwrap_or_default();
    let rest = path.strip_prefix("/model/").ok_or_else(|| {
        refuse(
            404,
            "UnknownOperationException",
            &format!("no operation at {path}"),
        )
    })?;
    let (id, op) = rest.rsplit_once('/').ok_or_else(|| {
        refuse(
            404,
            "UnknownOperationException",
            &format!("no operation at {path}"),
        )
    })?;
    let op = match op {
        "invoke" => Op::Invoke { stream: false },
        "invoke-with-response-stream" => Op::Invoke { stream: true },
        "converse" => Op::Converse { stream: false },
        "converse-stream" => Op::Converse { stream: true },
        other => {
            return Err(refuse(
                404,
                "UnknownOperationException",
                &format!("no operation `{other}`"),
            ));
        }
    };
    if req.method != "POST" {
        return Err(refuse(405, "ValidationException", "only POST"));
    }
    let id =
        percent_decode(id).ok_or_else(|| refuse(400, "ValidationException", "a bad model id"))?;
    if id.is_empty() || id.len() > 2048 {
        return Err(refuse(
            400,
            "ValidationException",
            "the model id is 1 to 2048 characters",
        ));
    }
    Ok((id, op))
}

/// The body, checked as InvokeModel checks a Claude body.
fn checked_body(req: &Received) -> Result<serde_json::Map<String, Value>, Box<Refused>> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
        return Err(refuse(
            400,
            "ValidationException",
            "Malformed input request, please reformat your input and try again.",
        ));
    };
    for extraneous in ["model", "stream"] {
        if body.contains_key(extraneous) {
            return Err(refuse(
                400,
                "ValidationException",
                &format!(
                    "Malformed input request: #: extraneous key [{extraneous}] is not permitted, please reformat your input and try again."
                ),
            ));
        }
    }
    if body.get("anthropic_version").and_then(Value::as_str) != Some("bedrock-2023-05-31") {
        return Err(refuse(
            400,
            "ValidationException",
            "Malformed input request: #: required key [anthropic_version] not found or invalid",
        ));
    }
    if let Some(betas) = body.get("anthropic_beta") {
        let ok = betas.as_array().is_some_and(|a| {
            a.iter().all(|b| {
                b.as_str()
                    .is_some_and(|b| BETAS.iter().any(|p| b.starts_with(p)))
            })
        });
        if !ok {
            return Err(refuse(
                400,
                "ValidationException",
                "The model returned the following errors: invalid beta flag",
            ));
        }
    }
    Ok(body)
}

/// The request as api.anthropic.com would have received it.
fn as_anthropic(
    req: &Received,
    mut body: serde_json::Map<String, Value>,
    model: &str,
    stream: bool,
) -> Received {
    body.remove("anthropic_version");
    let betas = body.remove("anthropic_beta");
    body.insert("model".into(), Value::String(model.to_owned()));
    if stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .filter(|(n, _)| n == "content-type")
        .cloned()
        .collect();
    headers.push(("x-api-key".into(), "bedrock-sim".into()));
    headers.push(("anthropic-version".into(), "2023-06-01".into()));
    if let Some(Value::Array(betas)) = betas {
        let betas: Vec<&str> = betas.iter().filter_map(Value::as_str).collect();
        headers.push(("anthropic-beta".into(), betas.join(",")));
    }
    Received {
        method: req.method.clone(),
        path: "/v1/messages".into(),
        headers,
        body: Bytes::from(Value::Object(body).to_string()),
        at: req.at,
        version: req.version,
        shared: req.shared.clone(),
        cached: Default::default(),
    }
}

/// An Anthropic error answer as Bedrock sends the same failure.
fn bedrock_error(answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
    let status = answer.status().as_u16();
    let (tx, body) = ChannelBody::channel(1);
    tokio::spawn(async move {
        let text = answer
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&text).into_owned());
        let body = json!({ "message": message }).to_string();
        let _ = tx.send(Ok(Bytes::from(body))).await;
    });
    let (status, kind) = match status {
        429 => (429, "ThrottlingException"),
        529 | 503 => (503, "ServiceUnavailableException"),
        408 | 504 => (408, "ModelTimeoutException"),
        401 | 403 => (403, "AccessDeniedException"),
        400..=499 => (400, "ValidationException"),
        _ => (500, "InternalServerException"),
    };
    let mut out = hyper::Response::new(body.boxed());
    *out.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let errortype = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    for (name, value) in [
        ("content-type", "application/json".to_owned()),
        ("x-amzn-errortype", errortype),
    ] {
        if let Ok(value) = hyper::header::HeaderValue::from_str(&value) {
            out.headers_mut().insert(name, value);
        }
    }
    out
}

/// What one SSE event's data becomes in the event stream.
type ToFrames = Box<dyn FnMut(&str) -> Vec<Message> + Send>;

/// An Anthropic SSE answer re-framed as Bedrock's event stream, each
/// event's data as `to_frames` says.
fn event_stream(
    answer: hyper::Response<SimBody>,
    mut to_frames: ToFrames,
) -> hyper::Response<SimBody> {
    let (tx, body) = ChannelBody::channel(2);
    let mut inner = answer.into_body();
    tokio::spawn(async move {
        let mut sse = String::new();
        let mut n = 0usize;
        while let Some(frame) = inner.frame().await {
            let data = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue,
                },
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            sse.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = sse.find("\n\n") {
                let event: String = sse.drain(..end + 2).collect();
                let Some(data) = data_of(&event) else {
                    continue;
                };
                for message in to_frames(&data) {
                    // Every frame in two writes, split at a point that moves.
                    let bytes = message.encode();
                    n += 1;
                    let at = 1 + (n * 7) % (bytes.len() - 1);
                    for part in [&bytes[..at], &bytes[at..]] {
                        if tx.send(Ok(Bytes::copy_from_slice(part))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });
    let mut out = hyper::Response::new(body.boxed());
    for (name, value) in [
        ("content-type", "application/vnd.amazon.eventstream"),
        ("x-amzn-bedrock-content-type", "application/json"),
    ] {
        out.headers_mut()
            .insert(name, hyper::header::HeaderValue::from_static(value));
    }
    out
}

/// One SSE event's data lines, joined (`None`: it has none).
fn data_of(event: &str) -> Option<String> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .collect();
    (!data.is_empty()).then(|| data.join("\n"))
}

/// One SSE event's data as its event-stream message: a `chunk`, or for
/// an error event the exception Bedrock sends (`exception`, when set).
fn frame_of(data: &str, exception: Option<&str>) -> Vec<Message> {
    let string = |s: &str| EsValue::String(s.to_owned());
    let parsed: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    if parsed["type"] == "error" {
        let kind = exception.unwrap_or(match parsed["error"]["type"].as_str() {
            Some("rate_limit_error") => "throttlingException",
            Some("overloaded_error") => "serviceUnavailableException",
            _ => "internalServerException",
        });
        let message = parsed["error"]["message"].as_str().unwrap_or("error");
        return vec![bedrock_converse::exception(kind, message)];
    }
    let bytes = base64::engine::general_purpose::STANDARD.encode(data.as_bytes());
    let padding =
        &"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[..(data.len() % 40) + 1];
    vec![Message {
        headers: vec![
            (":event-type".into(), string("chunk")),
            (":content-type".into(), string("application/json")),
            (":message-type".into(), string("event")),
        ],
        payload: json!({ "bytes": bytes, "p": padding })
            .to_string()
            .into_bytes(),
    }]
}

/// An Anthropic JSON answer as Converse's.
fn converse_answer(answer: hyper::Response<SimBody>) -> hyper::Response<SimBody> {
    let (parts, inner) = answer.into_parts();
    let (tx, body) = ChannelBody::channel(1);
    tokio::spawn(async move {
        let text = inner
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let _ = tx.send(Ok(bedrock_converse::answer(&text))).await;
    });
    let mut out = hyper::Response::from_parts(parts, body.boxed());
    out.headers_mut().remove("content-length");
    out
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
