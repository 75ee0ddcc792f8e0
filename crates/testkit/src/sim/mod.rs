//! Simulated providers: real HTTP/1.1 servers on `127.0.0.1:0`, built on
//! hyper so that faults below HTTP (a reset connection, a body cut short, a
//! server that never answers) are real faults on a real socket.
//!
//! Each request takes the next [`Reply`] (the script: `reply.rs`) from the
//! queue ([`SimProvider::push`]); with the queue empty, the responder
//! ([`SimProvider::respond_with`]) decides, and without one the simulator
//! answers with text.
//!
//! Each answer carries an id of its own in its provider's shape (`ids.rs`),
//! and its usage counts words: the prompt's as input (a text's words,
//! anything structured a quarter of its bytes: `cache/prompt.rs`), the
//! answer's as output. Each simulator keeps a prompt cache per account as
//! its provider does (`cache/`: Anthropic's breakpoints, OpenAI's and
//! Gemini's automatic prefixes, TTLs) and reports its reads and writes in
//! the provider's own usage fields; [`SimProvider::with_usage_detail`]
//! adds scripted cached and reasoning tokens on top, each where and as its
//! provider reports them (see [`UsageDetail`]). Standing faults
//! (`faults.rs`): a slow first token, a share of calls failing. A model
//! may be given a context window (`window.rs`,
//! [`SimProvider::with_context_window`]): a longer prompt gets the API's
//! own "too long" error.
//!
//! Each answers its API's model lookup in its real shape (`models.rs`; a
//! cloud's in its own file): a model retired with
//! [`SimProvider::retire_model`] is a 404 there and in generation calls, a
//! key revoked with [`SimProvider::revoke_key`] refused everywhere; lookups
//! are counted ([`SimProvider::lookups`]) apart from the calls `received`
//! records.
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
mod anthropic_credit;
mod azure;
mod bedrock;
mod bedrock_converse;
mod body;
mod cache;
mod cloud;
mod faults;
mod gemini;
mod ids;
mod limits;
mod models;
mod openai;
mod reply;
mod responses;
mod rules;
mod server;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "test-support")]
mod vertex;
mod window;

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

pub use anthropic_credit::age_credits;
pub use azure::AzureSim;
pub use bedrock::BedrockSim;
use body::{ChannelBody, Piece, response, stream_response};
pub use cache::CacheTotals;
pub use cloud::{Cloud, Refused};
pub use reply::{Refusal, Reply, SimToolCall, StreamEnd, StreamSpec, UsageDetail};
use server::accept_loop;
use server::{lock, split_words};
#[cfg(feature = "test-support")]
pub use vertex::{TEST_CLIENT_EMAIL, VertexSim};

/// The wire protocol a simulator speaks: the gateway's own enum, so that
/// a simulator and the provider it stands for are named alike (the
/// simulators share no code with the wire crate: they are the oracle).
pub use understudy_types::Protocol;

/// What a simulator speaks: a provider's protocol ([`Protocol::KINDS`],
/// and Converse, which a Bedrock provider speaks by model). Its own enum,
/// so that the simulator's every `match` names each one (a new provider
/// protocol is a variant here and an arm in each), while a front end's
/// protocol that no provider speaks has no simulator: [`Dialect::of`] is
/// the one place it falls through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    ChatCompletions,
    Responses,
    Messages,
    GenerateContent,
    Converse,
}

impl Dialect {
    /// The simulator's dialect for `protocol`; an error naming it when no
    /// provider speaks it.
    pub(crate) fn of(protocol: Protocol) -> io::Result<Self> {
        Ok(match protocol {
            Protocol::ChatCompletions => Self::ChatCompletions,
            Protocol::Responses => Self::Responses,
            Protocol::Messages => Self::Messages,
            Protocol::GenerateContent => Self::GenerateContent,
            Protocol::Converse => Self::Converse,
            // A front end's protocol no provider speaks (a test starts a
            // simulator of each of `Protocol::KINDS`).
            #[allow(unreachable_patterns, reason = "every protocol is a provider's today")]
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "no simulator speaks {other}: it is no provider's protocol \
                         (not in Protocol::KINDS)"
                    ),
                ));
            }
        })
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
    /// What the prompt cache did for it (set once its reply is chosen).
    cached: cache::Cached,
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
    /// What it speaks, from `protocol`.
    dialect: Dialect,
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
    /// When a client closed its connection before its answer was complete
    /// (waiting for its first byte, or mid-stream).
    closed_mid_answer: Mutex<Vec<std::time::Instant>>,
    /// The request rules, their settings and what broke them.
    rules: rules::Rules,
    /// Counted request limits per API key.
    limits: limits::KeyLimits,
    /// The token details every answer reports.
    usage_detail: Mutex<UsageDetail>,
    /// The prompt cache, per account (`cache/`).
    cache: cache::PromptCache,
    /// Standing faults: slow first token, a share of calls failing.
    faults: faults::Faults,
    /// The model lookups: retired models, a revoked key, the count.
    models: models::Models,
    /// The model's context window, when it has one.
    window: window::Window,
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
        let shared = Shared::new(protocol, cloud)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
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
        match self.shared.dialect {
            Dialect::ChatCompletions | Dialect::Responses => format!("{scheme}://{addr}/v1"),
            Dialect::GenerateContent => format!("{scheme}://{addr}/v1beta"),
            // Converse is the Bedrock front's, over the Anthropic
            // simulator (`bedrock_converse.rs`): a simulator of it is that one.
            Dialect::Messages | Dialect::Converse => format!("{scheme}://{addr}"),
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

    /// Reports `detail` in the usage of every answer from now on, as the
    /// provider reports such counts (see [`UsageDetail`]; the default
    /// reports none).
    pub fn with_usage_detail(&self, detail: UsageDetail) -> &Self {
        *lock(&self.shared.usage_detail) = detail;
        self
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

    /// Stops serving `model`: its lookup answers 404 (a cloud's in its
    /// own shape), and so does a generation call naming it.
    pub fn retire_model(&self, model: &str) -> &Self {
        self.shared.models.retire(model);
        self
    }

    /// Serves `model` again (undoes [`Self::retire_model`]).
    pub fn restore_model(&self, model: &str) -> &Self {
        self.shared.models.restore(model);
        self
    }

    /// Refuses the key: every lookup and generation call answers 401 in
    /// the provider's shape, as each API answers a revoked key (Gemini: 400
    /// `API_KEY_INVALID`; a cloud's lookup: its own refusal — Bedrock's
    /// 403 `UnrecognizedClientException`, Vertex's 401 `UNAUTHENTICATED`,
    /// Azure's 401).
    pub fn revoke_key(&self) -> &Self {
        self.shared.models.revoke();
        self
    }

    /// Refuses one key (a pool's), by its secret, as [`Self::revoke_key`]
    /// refuses every key (a direct provider's lookups and generation
    /// calls).
    pub fn revoke_one_key(&self, key: &str) -> &Self {
        self.shared.models.revoke_one(key);
        self
    }

    /// Takes the model lookup route away (a direct provider's): a lookup
    /// gets a bare 404 (`{"detail": "Not Found"}`), as from an
    /// OpenAI-compatible server that has no `GET /models/{id}`; the
    /// generation calls are served as before.
    pub fn without_model_lookups(&self) -> &Self {
        self.shared.models.drop_lookups();
        self
    }

    /// Model lookups answered so far (the calls a readiness probe makes;
    /// never in [`Self::received`]).
    pub fn lookups(&self) -> usize {
        self.shared.models.lookups()
    }

    /// Calls received that could generate: every recorded request but a
    /// token count.
    pub fn generation_calls(&self) -> usize {
        lock(&self.shared.received)
            .iter()
            .filter(|r| {
                !["count_tokens", "countTokens", "count-tokens"]
                    .iter()
                    .any(|c| r.path.contains(c))
            })
            .count()
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

    /// When clients closed their connection before their answer was
    /// complete — while it waited for its first byte (a slow first token)
    /// or mid-stream — in order: a gateway that cancels a call is seen
    /// here.
    pub fn closed_mid_answer(&self) -> Vec<std::time::Instant> {
        lock(&self.shared.closed_mid_answer).clone()
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
    /// The state of a simulator of `protocol`; an error when no provider
    /// speaks it.
    fn new(protocol: Protocol, cloud: Option<Box<dyn Cloud>>) -> io::Result<Arc<Self>> {
        let dialect = Dialect::of(protocol)?;
        Ok(Arc::new(Self {
            protocol,
            dialect,
            cloud,
            cloud_violations: Mutex::default(),
            queue: Mutex::default(),
            responder: Mutex::default(),
            received: Mutex::default(),
            open_connections: AtomicUsize::new(0),
            streams_cancelled: AtomicUsize::new(0),
            streams_open: AtomicUsize::new(0),
            streamed_bytes: AtomicUsize::new(0),
            closed_mid_answer: Mutex::default(),
            rules: rules::Rules::new(protocol, dialect),
            limits: limits::KeyLimits::default(),
            usage_detail: Mutex::default(),
            cache: cache::PromptCache::new(),
            faults: faults::Faults::default(),
            models: models::Models::default(),
            window: window::Window::default(),
        }))
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

    /// The token details the simulator that received this request reports
    /// (none for a request recorded apart from its simulator).
    pub(crate) fn usage_detail(&self) -> UsageDetail {
        self.shared
            .as_ref()
            .map(|s| *lock(&s.usage_detail))
            .unwrap_or_default()
    }

    /// What the prompt cache did for this request.
    pub(crate) fn cached(&self) -> cache::Cached {
        self.cached
    }

    /// A header's value, by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}
