//! Simulated providers: real HTTP/1.1 servers on `127.0.0.1:0`, built on
//! hyper so that faults below HTTP (a reset connection, a body cut short, a
//! server that never answers) are real faults on a real socket.
//!
//! Each request takes the next [`Reply`] from the queue ([`SimProvider::push`]);
//! with the queue empty, the responder ([`SimProvider::respond_with`]) decides,
//! and without one the simulator answers with text.
//!
//! Simulators are strict by default: before any reply is chosen, the
//! request is checked against the provider's documented request rules
//! (`rules/`); a request that breaks one gets the provider's own 400 and is
//! counted (`SimProvider::violations`), so a test proves that what the
//! gateway sent would have been accepted. `SimProvider::lenient` turns the
//! checks off for tests that send invalid input on purpose. The checks are
//! test-only (the `test-support` feature): without it, the simulators of
//! `understudy demo` check nothing.

mod anthropic;
mod azure;
mod bedrock;
mod bedrock_converse;
mod body;
mod cloud;
mod gemini;
mod limits;
mod openai;
mod responses;
mod rules;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "test-support")]
mod vertex;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use azure::AzureSim;
pub use bedrock::BedrockSim;
use body::{ChannelBody, Piece, response, stream_response};
pub use cloud::{Cloud, Refused};
#[cfg(feature = "test-support")]
pub use vertex::{TEST_CLIENT_EMAIL, VertexSim};

/// The wire protocol a simulator speaks: the gateway's own enum, so that
/// a simulator and the provider it stands for are named alike (the
/// simulators share no code with the wire crate: they are the oracle).
pub use understudy_core::Protocol;

/// A refusal, rendered in each protocol's own shape (wire-formats §1.4,
/// §3.4, §4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The answer stopped by a filter. OpenAI: `finish_reason:
    /// "content_filter"`; Gemini: `finishReason: "SAFETY"` with no content;
    /// Anthropic: `stop_reason: "refusal"` with no text.
    FinishReason,
    /// A refusal with words. OpenAI: `message.refusal` (stream: `delta.refusal`);
    /// Gemini: `finishReason: "SAFETY"` with this `finishMessage`; Anthropic:
    /// this partial text, then `stop_reason: "refusal"` with `stop_details`.
    Message(String),
    /// Refused with an HTTP 400. OpenAI (Azure): error code `content_filter`;
    /// Anthropic: `invalid_request_error` "Output blocked by content filtering
    /// policy"; Gemini (which has no such status): the prompt is blocked.
    Status400,
    /// The prompt was blocked. Gemini: `promptFeedback.blockReason:
    /// "PROHIBITED_CONTENT"` and no candidates; OpenAI: as [`Refusal::Status400`];
    /// Anthropic: `stop_reason: "refusal"` with `stop_details`.
    PromptBlocked,
    /// Gemini's 200 with no usable text: a candidate `{"role":"model"}` with
    /// no parts and `finishReason: "STOP"`. Other protocols answer with empty
    /// text.
    NoText,
}

/// A streamed answer: the text chunks, the pause before each, and how the
/// stream ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub chunks: Vec<String>,
    pub interval: Duration,
    pub end: StreamEnd,
}

/// How a scripted stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The protocol's normal ending (`[DONE]`, the `finishReason` chunk, `message_stop`).
    Complete,
    /// OpenAI: the finish reason is sent but `data: [DONE]` never comes
    /// (a complete answer). Other protocols: as `Complete`.
    FinishWithoutDone,
    /// The connection closes cleanly without the terminal marker.
    EndWithoutMarker,
    /// The connection is cut (an error mid-body).
    Cut,
    /// The stream goes silent and stays open.
    Stall,
    /// A malformed event.
    Malformed,
    /// The protocol's mid-stream error (OpenAI: a `data: {"error":…}` event;
    /// Gemini: a raw pretty-printed JSON error without `data:`; Anthropic:
    /// `event: error` with `overloaded_error`).
    ErrorEvent,
    /// A refusal after the text (OpenAI: `finish_reason: "content_filter"`;
    /// Gemini: `finishReason: "SAFETY"`; Anthropic: `stop_reason: "refusal"`).
    Refusal,
}

/// What the simulator does with one request. Faults are data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A normal answer with this text.
    Text(String),
    /// A content-filter refusal.
    Refuse(Refusal),
    /// Any status, body and headers; an empty body gets the protocol's
    /// usual error body for the status.
    Status {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// Waits, then does the inner reply.
    Delay(Duration, Box<Reply>),
    /// Closes the connection without an answer.
    Reset,
    /// Never answers (until the client gives up or the simulator stops).
    Hang,
    /// HTTP 200 with this body, whatever it is.
    Garbage(String),
    /// HTTP 200 announcing a longer body than it sends, then the
    /// connection closes.
    Truncated,
    /// A streamed answer (for a streamed request; a non-streamed request
    /// gets the chunks joined as text).
    Stream(StreamSpec),
    /// The model calls these tools (several: parallel calls), in the
    /// protocol's own shape; streamed when the request asked for a stream
    /// (OpenAI and Anthropic send each call's arguments in several
    /// fragments; Gemini sends each call whole).
    ToolCalls(Vec<SimToolCall>),
    /// The model thinks first, then does `then` (a [`Reply::Text`],
    /// [`Reply::Stream`] or [`Reply::ToolCalls`]). Anthropic: a `thinking`
    /// block with a signature this simulator mints and remembers, before
    /// the text or tool calls (streamed: `thinking_delta`, then
    /// `signature_delta`). OpenAI's Responses API: a `reasoning` item
    /// (its `encrypted_content` minted and remembered when the request's
    /// `include` asks for it). Other protocols: `then` alone.
    Thinking { thinking: String, then: Box<Reply> },
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimToolCall {
    /// The id the provider mints (`None`: the simulator mints one in the
    /// protocol's style; Gemini sends none at all).
    pub id: Option<String>,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

impl SimToolCall {
    /// A call of `name` with these JSON arguments.
    pub fn new(name: &str, arguments: serde_json::Value) -> Self {
        Self {
            id: None,
            name: name.to_owned(),
            arguments: arguments.to_string(),
        }
    }

    /// The same call with a provider-minted id.
    pub fn with_id(mut self, id: &str) -> Self {
        self.id = Some(id.to_owned());
        self
    }
}

/// One request the simulator received.
#[derive(Clone)]
pub struct Received {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header names are lower case.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// When the request arrived.
    pub at: std::time::Instant,
    /// The HTTP version it came over (HTTP/2 only from the TLS simulator).
    pub version: hyper::Version,
    shared: Option<Arc<Shared>>,
}

type Responder = Arc<dyn Fn(&Received) -> Reply + Send + Sync>;

/// A simulated provider. Stops when dropped.
pub struct SimProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// `http`, or `https` behind the TLS simulator.
    scheme: &'static str,
}

struct Shared {
    protocol: Protocol,
    /// The cloud in front of the protocol (its auth, paths and framing),
    /// if any.
    cloud: Option<Box<dyn Cloud>>,
    /// Requests the cloud refused before the protocol saw them.
    cloud_violations: Mutex<Vec<String>>,
    queue: Mutex<std::collections::VecDeque<Reply>>,
    responder: Mutex<Option<Responder>>,
    received: Mutex<Vec<Received>>,
    open_connections: AtomicUsize,
    /// Streams whose client went away before the stream ended.
    streams_cancelled: AtomicUsize,
    /// Streams currently being sent.
    streams_open: AtomicUsize,
    /// Bytes of streamed answers handed to the connection so far.
    streamed_bytes: AtomicUsize,
    /// The request rules, their settings and what broke them.
    rules: rules::Rules,
    /// Counted request limits per API key.
    limits: limits::KeyLimits,
}

type SimBody = BoxBody<Bytes, io::Error>;

// === impl SimProvider ===

impl SimProvider {
    /// Starts an OpenAI-compatible simulator.
    pub async fn openai() -> io::Result<Self> {
        Self::start(Protocol::ChatCompletions).await
    }

    /// Starts a simulator of OpenAI's Responses API.
    pub async fn openai_responses() -> io::Result<Self> {
        Self::start(Protocol::Responses).await
    }

    /// Starts a Gemini simulator.
    pub async fn gemini() -> io::Result<Self> {
        Self::start(Protocol::GenerateContent).await
    }

    /// Starts an Anthropic simulator.
    pub async fn anthropic() -> io::Result<Self> {
        Self::start(Protocol::Messages).await
    }

    /// Starts a simulator of `protocol` on a free loopback port.
    pub async fn start(protocol: Protocol) -> io::Result<Self> {
        Self::start_behind(protocol, None).await
    }

    /// Starts a simulator of `protocol` served the way `cloud` serves it
    /// (Bedrock's paths, SigV4 and event stream around Anthropic's bodies,
    /// …), on a free loopback port.
    pub async fn start_behind(
        protocol: Protocol,
        cloud: Option<Box<dyn Cloud>>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(protocol, cloud);
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(accept_loop(listener, Arc::clone(&shared), stopped));
        Ok(Self {
            addr,
            shared,
            stop,
            scheme: "http",
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure for this simulator's provider
    /// (`http://127.0.0.1:PORT/v1` for OpenAI-compatible).
    pub fn base_url(&self) -> String {
        let (scheme, addr) = (self.scheme, self.addr);
        if let Some(cloud) = &self.shared.cloud {
            return format!("{scheme}://{addr}{}", cloud.base_path());
        }
        match self.shared.protocol {
            Protocol::ChatCompletions | Protocol::Responses => format!("{scheme}://{addr}/v1"),
            Protocol::GenerateContent => format!("{scheme}://{addr}/v1beta"),
            // Converse is the Bedrock front's, over the Anthropic
            // simulator (`bedrock_converse.rs`): a simulator of it is that one.
            Protocol::Messages | Protocol::Converse => format!("{scheme}://{addr}"),
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.shared.protocol
    }

    /// Queues a reply for the next request that finds the queue non-empty.
    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.shared.queue).push_back(reply);
        self
    }

    /// Queues `reply` `n` times.
    pub fn push_n(&self, n: usize, reply: Reply) -> &Self {
        let mut q = lock(&self.shared.queue);
        q.extend(std::iter::repeat_n(reply, n));
        drop(q);
        self
    }

    /// Limits the requests made with API key `key` to `limit` per
    /// `window` (a fixed window opened by the key's first request): every
    /// answer to it carries the provider's rate-limit headers, and a
    /// request over the limit gets the provider's 429 with `Retry-After`
    /// instead of its reply.
    pub fn limit_requests(&self, key: &str, limit: u64, window: Duration) -> &Self {
        self.shared.limits.set(key, limit, window);
        self
    }

    /// Requests answered 429 for being over a key's counted limit (`None`:
    /// every key's).
    pub fn over_limit(&self, key: Option<&str>) -> u64 {
        self.shared.limits.refused(key)
    }

    /// Decides the reply when the queue is empty.
    pub fn respond_with(&self, f: impl Fn(&Received) -> Reply + Send + Sync + 'static) -> &Self {
        *lock(&self.shared.responder) = Some(Arc::new(f));
        self
    }

    /// Answers every request (queue empty) with `reply`.
    pub fn always(&self, reply: Reply) -> &Self {
        self.respond_with(move |_| reply.clone())
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.received).len()
    }

    /// Connections currently open from clients.
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections.load(Ordering::SeqCst)
    }

    /// Streams whose client closed the connection before the stream ended.
    pub fn streams_cancelled(&self) -> usize {
        self.shared.streams_cancelled.load(Ordering::SeqCst)
    }

    /// Streams being sent right now.
    pub fn streams_open(&self) -> usize {
        self.shared.streams_open.load(Ordering::SeqCst)
    }

    /// Bytes of streamed answers handed to the connection so far, all
    /// streams together: it stops growing when the client stops reading
    /// and the flow-control windows between them are full.
    pub fn streamed_bytes(&self) -> usize {
        self.shared.streamed_bytes.load(Ordering::SeqCst)
    }

    /// Stops checking requests against the provider's rules: for tests
    /// that send invalid input on purpose (and assert what the gateway does
    /// with the provider's answer, scripted as usual).
    #[cfg(feature = "test-support")]
    pub fn lenient(&self) -> &Self {
        self.shared.rules.set_strict(false);
        self
    }

    /// The largest output-token limit (`max_tokens`,
    /// `max_completion_tokens`) the simulated model accepts. Defaults:
    /// Anthropic 64 000, OpenAI-compatible 16 384 (gpt-4o-mini's).
    #[cfg(feature = "test-support")]
    pub fn with_max_output_tokens(&self, limit: u64) -> &Self {
        self.shared.rules.set_max_output_tokens(limit);
        self
    }

    /// Treats `signature` as one this simulator minted (a thinking block
    /// recorded from the real provider, replayed in a test).
    #[cfg(feature = "test-support")]
    pub fn accept_signature(&self, signature: &str) -> &Self {
        self.shared.rules.remember_signature(signature.to_owned());
        self
    }

    /// Every broken request rule so far, in order, one line each (the
    /// request's path and the provider's error message). Tests assert that
    /// it is empty.
    #[cfg(feature = "test-support")]
    pub fn violations(&self) -> Vec<String> {
        let mut all = lock(&self.shared.cloud_violations).clone();
        all.extend(self.shared.rules.violations());
        all
    }
}

impl fmt::Debug for SimProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimProvider")
            .field("protocol", &self.shared.protocol)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for SimProvider {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

// === impl Shared ===

impl Shared {
    fn new(protocol: Protocol, cloud: Option<Box<dyn Cloud>>) -> Arc<Self> {
        Arc::new(Self {
            protocol,
            cloud,
            cloud_violations: Mutex::default(),
            queue: Mutex::default(),
            responder: Mutex::default(),
            received: Mutex::default(),
            open_connections: AtomicUsize::new(0),
            streams_cancelled: AtomicUsize::new(0),
            streams_open: AtomicUsize::new(0),
            streamed_bytes: AtomicUsize::new(0),
            rules: rules::Rules::new(protocol),
            limits: limits::KeyLimits::default(),
        })
    }
}

// === impl Reply ===

impl Reply {
    /// A normal answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// An error status with the protocol's usual body for it.
    pub fn status(status: u16) -> Self {
        Self::Status {
            status,
            body: String::new(),
            headers: Vec::new(),
        }
    }

    /// A 429 with a `retry-after` header.
    pub fn rate_limited(retry_after: &str) -> Self {
        Self::Status {
            status: 429,
            body: String::new(),
            headers: vec![("retry-after".into(), retry_after.into())],
        }
    }

    /// Delays this reply.
    pub fn after(self, delay: Duration) -> Self {
        Self::Delay(delay, Box::new(self))
    }

    /// A complete stream of these chunks, sent at once.
    pub fn stream(chunks: &[&str]) -> Self {
        Self::Stream(StreamSpec::new(chunks))
    }

    /// This reply, preceded by a signed thinking block (Anthropic).
    pub fn thinking_first(self, thinking: impl Into<String>) -> Self {
        Self::Thinking {
            thinking: thinking.into(),
            then: Box::new(self),
        }
    }
}

// === impl StreamSpec ===

impl StreamSpec {
    /// A complete stream of these chunks, sent without pauses.
    pub fn new(chunks: &[&str]) -> Self {
        Self {
            chunks: chunks.iter().map(|c| (*c).to_owned()).collect(),
            interval: Duration::ZERO,
            end: StreamEnd::Complete,
        }
    }

    /// Pauses `interval` before each chunk.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Ends the stream this way.
    pub fn ending(mut self, end: StreamEnd) -> Self {
        self.end = end;
        self
    }

    /// As a reply.
    pub fn reply(self) -> Reply {
        Reply::Stream(self)
    }
}

// === impl Received ===

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish_non_exhaustive()
    }
}

impl Received {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The API key the request authenticates with (`Authorization:
    /// Bearer`, `x-api-key`, `x-goog-api-key` or `api-key`).
    pub fn api_key(&self) -> Option<&str> {
        limits::api_key(self)
    }

    /// A header's value, by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

// === the server ===

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding the lock must not hide its own
    // failure behind a poison error here.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = stopped.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            shared.open_connections.fetch_add(1, Ordering::SeqCst);
            let service = service_fn({
                let shared = Arc::clone(&shared);
                move |req| serve(Arc::clone(&shared), req)
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stopped.changed() => {}
            }
            shared.open_connections.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// The connection is dropped without an answer when this is returned.
#[derive(Debug)]
struct ResetConnection;

impl fmt::Display for ResetConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("scripted connection reset")
    }
}

impl std::error::Error for ResetConnection {}

async fn serve(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, ResetConnection> {
    let method = req.method().to_string();
    let version = req.version();
    let path = req
        .uri()
        .path_and_query()
        .map(ToString::to_string)
        .unwrap_or_default();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(ResetConnection),
    };
    let received = Received {
        method,
        path,
        headers,
        body,
        at: std::time::Instant::now(),
        version,
        shared: Some(Arc::clone(&shared)),
    };
    let Some(cloud) = &shared.cloud else {
        let wire = received.clone();
        return serve_protocol(&shared, received, wire).await;
    };
    // The cloud checks its own rules (auth, path, its edits to the body)
    // and hands the protocol the request as the protocol's own service
    // would have received it; the wire sees the request as sent.
    if let Some(served) = cloud.serve(&received) {
        return Ok(served.unwrap_or_else(|refused| {
            let line = format!("{} {}: {}", received.method, received.path, refused.message);
            tracing::warn!(violation = %line, "simulated cloud refused a request");
            lock(&shared.cloud_violations).push(line);
            refused.response
        }));
    }
    let original = received.clone();
    let admitted = match cloud.admit(&received) {
        Ok(admitted) => admitted,
        Err(refused) => {
            let line = format!("{} {}: {}", received.method, received.path, refused.message);
            tracing::warn!(violation = %line, "simulated cloud refused a request");
            lock(&shared.cloud_violations).push(line);
            let mut recorded = received;
            recorded.shared = None;
            lock(&shared.received).push(recorded);
            return Ok(refused.response);
        }
    };
    let answer = serve_protocol(&shared, admitted, original.clone()).await?;
    Ok(cloud.wrap(&original, answer))
}

/// Serves a request in the protocol's own shape: its rules, then the
/// scripted reply; `wire` (the request as it came, before a cloud's
/// rewriting) is what `received()` records.
async fn serve_protocol(
    shared: &Arc<Shared>,
    received: Received,
    wire: Received,
) -> Result<Response<SimBody>, ResetConnection> {
    #[cfg(feature = "test-support")]
    if let Some(violation) = rules::check(&shared.rules, &received) {
        // The provider refuses the request before any model sees it: the
        // scripted replies stay queued for the next one.
        shared.rules.record(&received, &violation);
        let mut recorded = wire;
        recorded.shared = None;
        lock(&shared.received).push(recorded);
        return Ok(violation.response());
    }
    let limited = shared.limits.count(shared.protocol, &received);
    let reply = match limited.as_ref().and_then(|v| v.refuse.clone()) {
        Some(refused) => refused,
        None => {
            let queued = lock(&shared.queue).pop_front();
            match queued {
                Some(r) => r,
                None => match lock(&shared.responder).clone() {
                    Some(f) => f(&received),
                    None => Reply::Text("Hello from the simulator.".into()),
                },
            }
        }
    };
    let mut recorded = wire;
    recorded.shared = None;
    lock(&shared.received).push(recorded);
    let mut answer = respond(shared.protocol, reply, &received).await?;
    for (name, value) in limited.map(|v| v.headers).unwrap_or_default() {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            answer.headers_mut().insert(name, value);
        }
    }
    Ok(answer)
}

async fn respond(
    protocol: Protocol,
    mut reply: Reply,
    req: &Received,
) -> Result<Response<SimBody>, ResetConnection> {
    loop {
        match reply {
            Reply::Delay(d, inner) => {
                tokio::time::sleep(d).await;
                reply = *inner;
            }
            Reply::Thinking { then, .. }
                if !matches!(protocol, Protocol::Messages | Protocol::Responses) =>
            {
                reply = *then
            }
            _ => break,
        }
    }
    match reply {
        Reply::Reset => Err(ResetConnection),
        Reply::Hang => std::future::pending().await,
        Reply::Garbage(body) => Ok(response(200, &[("content-type", "application/json")], body)),
        Reply::Truncated => {
            let body = ChannelBody::scripted(vec![
                Ok(Bytes::from_static(
                    b"{\"id\":\"chatcmpl-1\",\"choices\":[{\"mess",
                )),
                Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "scripted cut",
                )),
            ]);
            let mut resp = Response::new(body.boxed());
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            resp.headers_mut()
                .insert("content-length", HeaderValue::from_static("4096"));
            Ok(resp)
        }
        Reply::Stream(spec) if !is_streamed(protocol, req) => {
            let text = spec.chunks.concat();
            Ok(render(protocol, Reply::Text(text), req))
        }
        Reply::Stream(spec) => Ok(stream_response(
            shared_for_stream(req),
            spec.interval,
            pieces(protocol, &spec, req),
        )),
        Reply::Text(text) if is_streamed(protocol, req) => {
            let words: Vec<String> = split_words(&text);
            let spec = StreamSpec {
                chunks: words,
                interval: Duration::ZERO,
                end: StreamEnd::Complete,
            };
            Ok(stream_response(
                shared_for_stream(req),
                Duration::ZERO,
                pieces(protocol, &spec, req),
            ))
        }
        Reply::ToolCalls(calls) if is_streamed(protocol, req) => {
            let pieces = match protocol {
                Protocol::ChatCompletions => openai::tool_calls_stream(&calls, req),
                Protocol::GenerateContent => gemini::tool_calls_stream(&calls, req),
                Protocol::Messages | Protocol::Converse => {
                    anthropic::tool_calls_stream(&calls, req)
                }
                Protocol::Responses => responses::tool_calls_stream(&calls, req),
            };
            Ok(stream_response(
                shared_for_stream(req),
                Duration::ZERO,
                pieces,
            ))
        }
        // Paced like the answer it thinks before (a model that thinks at
        // the pace it then writes).
        Reply::Thinking { thinking, then } if is_streamed(protocol, req) => Ok(stream_response(
            shared_for_stream(req),
            match then.as_ref() {
                Reply::Stream(spec) => spec.interval,
                _ => Duration::ZERO,
            },
            match protocol {
                Protocol::Responses => responses::thinking_stream(&thinking, *then, req),
                _ => anthropic::thinking_stream(&thinking, *then, req),
            },
        )),
        Reply::Refuse(refusal)
            if is_streamed(protocol, req) && !matches!(refusal, Refusal::Status400) =>
        {
            let pieces = match protocol {
                Protocol::ChatCompletions => openai::refusal_stream(&refusal, req),
                Protocol::GenerateContent => gemini::refusal_stream(&refusal, req),
                Protocol::Messages | Protocol::Converse => anthropic::refusal_stream(&refusal, req),
                Protocol::Responses => responses::refusal_stream(&refusal, req),
            };
            Ok(stream_response(
                shared_for_stream(req),
                Duration::ZERO,
                pieces,
            ))
        }
        other => Ok(render(protocol, other, req)),
    }
}

fn render(protocol: Protocol, reply: Reply, req: &Received) -> Response<SimBody> {
    match protocol {
        Protocol::ChatCompletions => openai::render(reply, req),
        Protocol::GenerateContent => gemini::render(reply, req),
        Protocol::Messages | Protocol::Converse => anthropic::render(reply, req),
        Protocol::Responses => responses::render(reply, req),
    }
}

fn pieces(protocol: Protocol, spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    match protocol {
        Protocol::ChatCompletions => openai::stream(spec, req),
        Protocol::GenerateContent => gemini::stream(spec, req),
        Protocol::Messages | Protocol::Converse => anthropic::stream(spec, req),
        Protocol::Responses => responses::stream(spec, req),
    }
}

/// Whether the request asked for a streamed answer.
fn is_streamed(protocol: Protocol, req: &Received) -> bool {
    match protocol {
        Protocol::GenerateContent => req.path.contains(":streamGenerateContent"),
        Protocol::ChatCompletions
        | Protocol::Messages
        | Protocol::Converse
        | Protocol::Responses => req.json()["stream"] == serde_json::Value::Bool(true),
    }
}

/// Splits text into word chunks, keeping the spaces.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c == ' ' && !current.is_empty() && !current.ends_with(' ') {
            out.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The shared counters of the simulator that received `req`.
fn shared_for_stream(req: &Received) -> Option<Arc<Shared>> {
    req.shared.clone()
}
