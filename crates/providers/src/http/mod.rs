//! The pieces every adapter shares: the pooled client, the generic
//! [`HttpAdapter`] over an [`Upstream`], bounded body reading (`body.rs`),
//! and the SSE event stream (`stream.rs`).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use understudy_core::{Adapter, BoxEventStream, BoxFuture, CallOptions, ProbeFailure};
use understudy_settings::{ProviderSettings, Secret};
use understudy_types::ratelimit::RateLimits;
use understudy_types::{ChatRequest, Completion, Failure, FailureKind};

use crate::classify;

mod body;
mod stream;
use body::read_limited;
pub(crate) use body::{ERROR_BODY_LIMIT, receive};
use stream::SseStream;

/// The most text one stream may carry before it counts as endless garbage.
pub(crate) use understudy_wire::STREAM_TEXT_LIMIT;

/// One wire protocol: how to build a request and read what comes back.
pub(crate) trait Upstream: Send + Sync + fmt::Debug + 'static {
    type Parser: StreamParser;

    /// The request for `model`; `stream` selects the streamed form.
    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure>;

    /// The request for `model` as one call sends it: [`Upstream::request`],
    /// unless the protocol reads the call's own options (Anthropic's
    /// fallback credit).
    fn request_for(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
        call: &CallOptions,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let _ = call;
        self.request(client, model, request, stream)
    }

    /// Classifies a complete non-streamed response (any status).
    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure>;

    /// [`Upstream::parse`] for a request whose native body was forwarded:
    /// the answer goes back to the client as the provider sent it (a
    /// protocol may keep its own form of it, the Responses API's tagged
    /// reasoning ids, or none, to have the front end write it).
    fn parse_native(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let mut completion = self.parse(received, model)?;
        if completion.native.is_none() {
            completion.native = Some(String::from_utf8_lossy(&received.body).into_owned());
        }
        Ok(completion)
    }

    /// Classifies an error status and its (bounded) body.
    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure;

    /// A parser for one streamed answer; `native`: also pass every event
    /// on as the provider sent it ([`StreamEvent::Native`]).
    fn parser(&self, model: &str, native: bool) -> Self::Parser;

    /// The request that counts `request`'s input tokens for `model`, when
    /// the protocol can (`None`: it cannot).
    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        let _ = (client, model, request);
        None
    }

    /// The request that proves, generating nothing, that the provider
    /// takes the key and serves `model` (`crate::probe`); `None` where the
    /// protocol has none.
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        let _ = (client, model);
        None
    }

    /// Whether a probe's answer with `status` proves the target ready.
    fn probe_ready(&self, status: u16) -> bool {
        (200..300).contains(&status)
    }

    /// The protocol this is, or `None` for one that never forwards a
    /// client's body as it is (Converse: no front end hands one on).
    const NATIVE: Option<understudy_types::Protocol>;

    /// `request`'s native body, when the client wrote it in this protocol
    /// (and so it is forwarded as it is).
    fn native<'r>(&self, request: &'r ChatRequest) -> Option<&'r understudy_types::NativeRequest> {
        let native = request.native.as_deref()?;
        (Some(native.kind) == Self::NATIVE).then_some(native)
    }

    /// Whether this protocol forwards `request`'s native body as it is.
    fn forwards_native(&self, request: &ChatRequest) -> bool {
        self.native(request).is_some()
    }

    /// Whether [`Upstream::authorize`] must see every request once it is
    /// built (a signature over its body, a token that changes). Off, the
    /// request goes as it was built, with no extra step.
    const AUTHORIZES: bool = false;

    /// Adds the request's credentials once its body is final: a SigV4
    /// signature, the current access token.
    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        let _ = request;
        Box::pin(async { Ok(()) })
    }

    /// `failure` answered a request sent with `sent` (its
    /// `Authorization`): whether it says the credentials expired and fresh
    /// ones were fetched (the request then goes once more, and fails over
    /// if that fails too).
    fn renew<'a>(&'a self, failure: &'a Failure, sent: Option<HeaderValue>) -> BoxFuture<'a, bool> {
        let _ = (failure, sent);
        Box::pin(async { false })
    }

    /// The credentials the provider's actor refreshes, if they expire.
    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        None
    }

    /// How a streamed answer's bytes become the parser's items.
    fn framing(&self) -> Framing {
        Framing::sse()
    }
}

pub(crate) use understudy_wire::framing::Framing;

pub(crate) use understudy_wire::StreamParser;

/// An adapter made of a protocol and its pooled client (one more for each
/// other connect timeout a route sets for this provider). Its `Debug`
/// shows neither the protocol's endpoint (a URL may carry a password) nor
/// its headers.
pub(crate) struct HttpAdapter<P> {
    name: String,
    client: Clients,
    /// `(connect timeout, clients)` for the routes that set their own; a
    /// short list searched linearly (no lock, no map).
    others: Vec<(Duration, Clients)>,
    protocol: P,
    /// Kept only to scrub it from any upstream message that echoes it.
    key: Option<Secret>,
    /// One key of a pool: answers' rate-limit budgets are read for it to
    /// steer by (a provider with one key reads none).
    reads_budgets: bool,
}

/// A response read in full: status, headers, and body bytes.
#[derive(Debug)]
pub(crate) struct Received {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    /// Status, headers and body, as the wire crate reads an answer.
    pub(crate) fn parts(&self) -> (u16, &HeaderMap, &[u8]) {
        (self.status, &self.headers, &self.body)
    }
}

// === impl HttpAdapter ===

impl<P> fmt::Debug for HttpAdapter<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpAdapter")
            .field("name", &self.name)
            .field("protocol", &std::any::type_name::<P>())
            .field("route_clients", &self.others.len())
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl<P: Upstream> HttpAdapter<P> {
    pub(crate) fn new(settings: &ProviderSettings, protocol: P) -> Result<Self, String> {
        let transport = Transport::of(settings)?;
        let others = settings
            .route_connect_timeouts
            .iter()
            .filter(|c| **c != settings.timeouts.connect)
            .map(|c| Ok((*c, Clients::new(&transport, *c)?)))
            .collect::<Result<_, String>>()?;
        Ok(Self {
            name: settings.name.clone(),
            client: Clients::new(&transport, settings.timeouts.connect)?,
            others,
            protocol,
            key: settings.api_key.clone(),
            reads_budgets: settings.key_name.is_some(),
        })
    }

    /// The budget `headers` report, for a pool's key.
    fn budgets(&self, headers: &HeaderMap) -> Option<RateLimits> {
        self.reads_budgets
            .then(|| understudy_wire::ratelimit::read(headers, std::time::SystemTime::now()))
    }

    /// The client for a request whose connect timeout is `connect` (the
    /// provider's own unless a route set another), and the request's place
    /// in flight on it (held until the answer is read or the stream ends).
    fn client(&self, connect: Duration) -> (&reqwest::Client, InFlight) {
        self.others
            .iter()
            .find(|(c, _)| *c == connect)
            .map_or(&self.client, |(_, clients)| clients)
            .pick()
    }

    fn redact(&self, failure: Failure) -> Failure {
        crate::redact(failure, self.key.as_ref())
    }

    /// Sends `request`, authorized first where the protocol does that;
    /// the `Authorization` it went with (for [`Upstream::renew`]).
    async fn dispatch(
        &self,
        client: &reqwest::Client,
        request: reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, Option<HeaderValue>), Failure> {
        if !P::AUTHORIZES {
            let response = request.send().await.map_err(classify::transport)?;
            return Ok((response, None));
        }
        let mut request = request.build().map_err(|e| {
            Failure::new(
                FailureKind::BadRequest,
                format!("cannot build the request: {}", e.without_url()),
            )
        })?;
        self.protocol.authorize(&mut request).await?;
        let authorization = request.headers().get(AUTHORIZATION).cloned();
        let response = client.execute(request).await.map_err(classify::transport)?;
        Ok((response, authorization))
    }

    /// Sends `request` and reads the answer in full (bounded).
    async fn exchange(
        &self,
        client: &reqwest::Client,
        request: reqwest::RequestBuilder,
    ) -> Result<(Received, Option<HeaderValue>), Failure> {
        let (response, authorization) = self.dispatch(client, request).await?;
        Ok((receive(response).await?, authorization))
    }

    /// Whether a failed exchange (sent with `sent`) goes once more, with
    /// fresh credentials.
    async fn renewed(&self, failure: &Failure, sent: Option<HeaderValue>) -> bool {
        P::AUTHORIZES && self.protocol.renew(failure, sent).await
    }
}

impl<P: Upstream> Adapter for HttpAdapter<P> {
    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        self.protocol.credentials()
    }

    fn count_tokens<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        connect: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, Failure>> {
        #[derive(serde::Deserialize)]
        struct Counted {
            // Anthropic's `input_tokens`, Gemini's `totalTokens`.
            #[serde(alias = "totalTokens")]
            input_tokens: u64,
        }
        Box::pin(async move {
            let (client, in_flight) = self.client(connect);
            let Some(sent) = self.protocol.count_request(client, model, request) else {
                return Ok(None);
            };
            let (received, _) = self
                .exchange(client, sent)
                .await
                .map_err(|f| self.redact(f))?;
            drop(in_flight);
            if !(200..300).contains(&received.status) {
                return Err(self.redact(self.protocol.classify_error(
                    received.status,
                    &received.headers,
                    &received.body,
                )));
            }
            let counted: Counted = serde_json::from_slice(&received.body).map_err(|e| {
                Failure::new(
                    FailureKind::MalformedResponse,
                    format!("the token count is not `{{\"input_tokens\": n}}`: {e}"),
                )
                .with_status(received.status)
            })?;
            Ok(Some(counted.input_tokens))
        })
    }

    fn probe<'a>(
        &'a self,
        model: &'a str,
        connect: Duration,
    ) -> BoxFuture<'a, Result<bool, ProbeFailure>> {
        Box::pin(async move {
            let (client, in_flight) = self.client(connect);
            let mut renewed = false;
            loop {
                let Some(sent) = self.protocol.probe_request(client, model) else {
                    return Ok(false);
                };
                let (received, authorization) = self
                    .exchange(client, sent?)
                    .await
                    .map_err(|f| self.redact(f))?;
                if self.protocol.probe_ready(received.status) {
                    drop(in_flight);
                    return Ok(true);
                }
                let failure = self.protocol.classify_error(
                    received.status,
                    &received.headers,
                    &received.body,
                );
                // Expired credentials are renewed once, as for a call.
                if renewed || !self.renewed(&failure, authorization).await {
                    return Err(ProbeFailure {
                        failure: self.redact(failure.with_status(received.status)),
                        said: crate::error_codes::said(&received.headers, &received.body),
                    });
                }
                renewed = true;
            }
        })
    }

    fn complete<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<Completion, Failure>> {
        Box::pin(async move {
            let (client, in_flight) = self.client(call.connect);
            // A softened retry of a native body: the body carries it.
            let request = understudy_wire::softening::apply(request);
            let sent = traced(
                self.protocol
                    .request_for(client, model, &request, false, call)?,
                call,
            );
            let (mut received, authorization) = self
                .exchange(client, sent)
                .await
                .map_err(|f| self.redact(f))?;
            let native = self.protocol.forwards_native(&request);
            let parse = |received: &Received| match native {
                true => self.protocol.parse_native(received, model),
                false => self.protocol.parse(received, model),
            };
            let mut parsed = parse(&received);
            if let Err(f) = &parsed {
                if self.renewed(f, authorization).await {
                    let sent = traced(
                        self.protocol
                            .request_for(client, model, &request, false, call)?,
                        call,
                    );
                    (received, _) = self
                        .exchange(client, sent)
                        .await
                        .map_err(|f| self.redact(f))?;
                    parsed = parse(&received);
                }
            }
            drop(in_flight);
            tracing::debug!(provider = %self.name, status = received.status, "upstream answered");
            let mut completion = parsed.map_err(|f| self.redact(f))?;
            completion.rate_limits = self.budgets(&received.headers).map(Box::new);
            if !native {
                completion.native = None;
            }
            Ok(completion)
        })
    }

    fn stream<'a>(
        &'a self,
        model: &'a str,
        request: &'a ChatRequest,
        call: &'a CallOptions,
    ) -> BoxFuture<'a, Result<BoxEventStream, Failure>> {
        Box::pin(async move {
            let (client, in_flight) = self.client(call.connect);
            // A softened retry of a native body: the body carries it.
            let request = understudy_wire::softening::apply(request);
            let mut renewed = false;
            let response = loop {
                let sent = traced(
                    self.protocol
                        .request_for(client, model, &request, true, call)?,
                    call,
                );
                let (response, authorization) = self
                    .dispatch(client, sent)
                    .await
                    .map_err(|f| self.redact(f))?;
                let status = response.status().as_u16();
                if (200..300).contains(&status) {
                    break response;
                }
                let headers = response.headers().clone();
                let body = read_limited(response, ERROR_BODY_LIMIT, status)
                    .await
                    .map_err(|f| self.redact(f))?;
                let failure = self.protocol.classify_error(status, &headers, &body);
                if renewed || !self.renewed(&failure, authorization).await {
                    return Err(self.redact(failure));
                }
                renewed = true;
            };
            let status = response.status().as_u16();
            tracing::debug!(provider = %self.name, status, "upstream stream opened");
            let limits = self.budgets(response.headers());
            let stream = SseStream::new(
                // Only the body: the response's headers hold on to hyper's
                // first read buffer (8 KiB) for as long as the stream lasts.
                reqwest::Body::from(response),
                self.protocol.framing(),
                self.protocol
                    .parser(model, self.protocol.forwards_native(&request)),
                self.key.clone(),
                in_flight,
            )
            .with_rate_limits(limits);
            Ok(Box::new(stream) as BoxEventStream)
        })
    }
}

/// `request` with the call's W3C trace context, where it has one (the
/// provider's settings forward it). Added before the request is authorized,
/// so that a signature covers it.
fn traced(request: reqwest::RequestBuilder, call: &CallOptions) -> reqwest::RequestBuilder {
    let Some(trace) = &call.trace else {
        return request;
    };
    let mut request = request.header("traceparent", trace.traceparent.as_str());
    if let Some(state) = &trace.tracestate {
        request = request.header("tracestate", state.as_str());
    }
    request
}

/// A whole answer's body as `T`: an error status is `classify`'s failure,
/// and a body that does not parse is a malformed response ("the body is not
/// `what`"). Every protocol's `parse` starts here.
pub(crate) fn answer_body<T: serde::de::DeserializeOwned>(
    received: &Received,
    what: &str,
    classify: impl FnOnce(u16, &HeaderMap, &[u8]) -> Failure,
) -> Result<T, Failure> {
    understudy_wire::classify::answer_body(received.parts(), what, classify)
}

/// A POST of `body` as JSON to `url` with the provider's headers.
pub(crate) fn json_post(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    headers: &HeaderMap,
    body: &impl serde::Serialize,
) -> Result<reqwest::RequestBuilder, Failure> {
    // Sized once for a usual request (serde_json's own start, 128 bytes,
    // grows twice for the shortest chat).
    let mut buf = Vec::with_capacity(512);
    serde_json::to_writer(&mut buf, body).map_err(|e| {
        Failure::new(
            FailureKind::BadRequest,
            format!("cannot encode the request: {e}"),
        )
    })?;
    let body = buf;
    Ok(client.post(url).headers(headers.clone()).body(body))
}

/// A POST of a body that is already JSON text (a natively forwarded one)
/// to a URL not parsed yet (the builder parses it, and a URL that does not
/// parse fails the send).
pub(crate) fn raw_post_unparsed(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    headers: HeaderMap,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    client.post(url).headers(headers).body(body)
}

/// A POST of a body that is already JSON text (a natively forwarded one)
/// to a parsed URL: the request takes `headers` as its own map, where a
/// builder's `headers` would insert each into a map of the request's
/// (hashing every name again, on every call). A URL that carries
/// credentials goes through the builder, which turns them into basic auth.
pub(crate) fn raw_post(
    client: &reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    if !url.username().is_empty() || url.password().is_some() {
        return raw_post_unparsed(client, url, headers, body);
    }
    let mut request = reqwest::Request::new(reqwest::Method::POST, url);
    *request.headers_mut() = headers;
    *request.body_mut() = Some(body.into());
    reqwest::RequestBuilder::from_parts(client.clone(), request)
}

/// A client's native body as an upstream request's body, sharing the
/// request's buffer (`bytes::Bytes::from_owner`): a large body is sent
/// without a second copy of it.
#[derive(Debug)]
pub(crate) struct NativeBody(pub(crate) std::sync::Arc<understudy_types::NativeRequest>);

impl AsRef<[u8]> for NativeBody {
    fn as_ref(&self) -> &[u8] {
        self.0.body.as_bytes()
    }
}

/// `model` when it can stand as one URL path segment as it is (letters,
/// digits, `-_.@`: Gemini's and Vertex's model names); else a bad request
/// saying it is not `what`.
pub(crate) fn model_segment<'m>(model: &'m str, what: &str) -> Result<&'m str, Failure> {
    if model.is_empty()
        || !model
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
    {
        return Err(Failure::new(
            FailureKind::BadRequest,
            format!("`{model}` is not {what}"),
        ));
    }
    Ok(model)
}

/// The endpoint, parsed once (not on every request).
pub(crate) fn endpoint(url: &str) -> Result<reqwest::Url, String> {
    reqwest::Url::parse(url).map_err(|e| {
        format!(
            "`{}` is not a valid URL: {e}",
            understudy_settings::redact_url(url)
        )
    })
}

/// How a provider's clients connect: its `http1_only` and `ca_file`
/// settings, the certificates parsed once for all of its clients.
#[derive(Debug, Default, Clone)]
pub(crate) struct Transport {
    http1_only: bool,
    /// The provider is reached over TLS (only there is HTTP/2 negotiated).
    https: bool,
    roots: Vec<reqwest::Certificate>,
}

impl Transport {
    pub(crate) fn of(settings: &ProviderSettings) -> Result<Self, String> {
        let roots = match &settings.ca_file {
            None => Vec::new(),
            Some(ca) => {
                // The setting is named, not its value: this error can reach
                // a client (an attempt's detail), and the operator knows
                // which file the setting names.
                let bad = |why: String| format!("`providers.{}.ca_file`: {why}", settings.name);
                // Parsed here, with rustls (as the verifier will), so that a
                // bad file is named in the error rather than reported as a
                // client that cannot be built.
                use rustls::pki_types::CertificateDer;
                use rustls::pki_types::pem::PemObject as _;
                let mut roots = Vec::new();
                for (i, der) in CertificateDer::pem_slice_iter(&ca.pem).enumerate() {
                    let der = der.map_err(|e| bad(format!("certificate {}: {e}", i + 1)))?;
                    rustls::RootCertStore::empty()
                        .add(der.clone())
                        .map_err(|e| {
                            bad(format!("certificate {} is not a usable CA: {e}", i + 1))
                        })?;
                    roots.push(
                        reqwest::Certificate::from_der(&der)
                            .map_err(|e| bad(format!("certificate {}: {e}", i + 1)))?,
                    );
                }
                if roots.is_empty() {
                    return Err(bad("holds no PEM certificate".into()));
                }
                roots
            }
        };
        Ok(Self {
            http1_only: settings.http1_only,
            https: settings
                .base_url
                .get(..8)
                .is_some_and(|s| s.eq_ignore_ascii_case("https://")),
            roots,
        })
    }
}

/// Requests in flight on a provider's HTTP/2 connection past which the
/// next ones go over HTTP/1.1 instead. hyper's client puts every request
/// to a host on one HTTP/2 connection and never opens a second: past the
/// server's `SETTINGS_MAX_CONCURRENT_STREAMS` (100 on many frontends, the
/// least RFC 9113 recommends) requests would wait for a stream to end —
/// for an LLM stream, up to minutes. Over the limit, a request takes a
/// keep-alive HTTP/1.1 connection, as every request did before HTTP/2.
const H2_STREAMS: usize = 100;

/// A provider's clients for one connect timeout: the main one (HTTP/2 by
/// ALPN over TLS, unless `http1_only`) and, for an `https://` provider that
/// may speak HTTP/2, the HTTP/1.1 overflow past [`H2_STREAMS`], built on
/// first use.
struct Clients {
    main: reqwest::Client,
    overflow: Option<Overflow>,
}

struct Overflow {
    in_flight: Arc<AtomicUsize>,
    client: OnceLock<Option<reqwest::Client>>,
    transport: Transport,
    connect: Duration,
}

/// A request counted in flight on a main client (nothing for one that is
/// not counted); uncounted when dropped.
pub(crate) struct InFlight(Option<Arc<AtomicUsize>>);

impl Clients {
    fn new(transport: &Transport, connect: Duration) -> Result<Self, String> {
        let overflow = (transport.https && !transport.http1_only).then(|| Overflow {
            in_flight: Arc::new(AtomicUsize::new(0)),
            client: OnceLock::new(),
            transport: Transport {
                http1_only: true,
                ..transport.clone()
            },
            connect,
        });
        Ok(Self {
            main: client(transport, connect)?,
            overflow,
        })
    }

    /// The main client while it has fewer than [`H2_STREAMS`] requests in
    /// flight, else the overflow.
    fn pick(&self) -> (&reqwest::Client, InFlight) {
        let Some(overflow) = &self.overflow else {
            return (&self.main, InFlight(None));
        };
        if overflow.in_flight.fetch_add(1, Ordering::Relaxed) < H2_STREAMS {
            return (&self.main, InFlight(Some(Arc::clone(&overflow.in_flight))));
        }
        overflow.in_flight.fetch_sub(1, Ordering::Relaxed);
        let h1 = overflow.client.get_or_init(|| {
            client(&overflow.transport, overflow.connect)
                .inspect_err(|e| tracing::warn!("no HTTP/1.1 overflow client: {e}"))
                .ok()
        });
        (h1.as_ref().unwrap_or(&self.main), InFlight(None))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(n) = &self.0 {
            n.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How long a pooled connection may sit idle before it is closed: below
/// the idle timeouts of the servers and load balancers in front of
/// providers (60 s on AWS's, 75 s on nginx's), so that the gateway always
/// closes first and never sends a request on a connection the other side
/// is closing at that moment (reqwest's default is 90 s).
const POOL_IDLE: Duration = Duration::from_secs(55);

/// An HTTP/2 PING after this long without a frame from the provider (idle
/// or not): a connection that died silently (a NAT or load balancer that
/// dropped it) is found and closed in [`H2_PING_TIMEOUT`] more, instead of
/// stalling every stream multiplexed on it until their own timeouts. An
/// active stream receives frames, so it sends no pings.
const H2_PING_EVERY: Duration = Duration::from_secs(20);

/// How long a PING's acknowledgement may take before the connection is
/// closed (its streams fail as transport errors and fall back).
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP keepalive probes on an idle socket (for HTTP/1.1, which has no
/// PING): reqwest's defaults, pinned here (first probe after 15 s idle,
/// then every 15 s; with `TCP_USER_TIMEOUT` of 30 s, reqwest's default on
/// Linux, unacknowledged data closes the socket).
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// HTTP/2 flow control: how much of one stream's answer may wait unread in
/// the gateway (512 KiB: 5 MB/s at a 100 ms round trip, far above any
/// model's pace, and an 8 MiB answer in under 2 s).
const H2_STREAM_WINDOW: u32 = 512 * 1024;

/// The connection's window: room for every stream's ([`H2_STREAMS`] ×
/// [`H2_STREAM_WINDOW`], 50 MiB). Data waiting unread holds the
/// connection's window too, so with hyper's default (5 MiB for streams of
/// 2 MiB) three streams whose clients stopped reading froze every other
/// stream on the connection; now a stalled stream holds only its own
/// 512 KiB. A bound on credit, not memory allocated up front.
const H2_CONNECTION_WINDOW: u32 = H2_STREAMS as u32 * H2_STREAM_WINDOW;

/// One client per provider (and connect timeout), pooled; the engine
/// applies attempt deadlines, so only the connect timeout is set here.
/// Over `https://` HTTP/2 is offered by ALPN (`h2`, then `http/1.1`) unless
/// the provider is `http1_only`; HTTP/2 multiplexes every request to the
/// provider over one connection, so one TLS handshake serves them all.
pub(crate) fn client(transport: &Transport, connect: Duration) -> Result<reqwest::Client, String> {
    crate::install_tls_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect)
        .pool_idle_timeout(POOL_IDLE)
        .tcp_nodelay(true)
        .tcp_keepalive(TCP_KEEPALIVE)
        .tcp_keepalive_interval(TCP_KEEPALIVE)
        .http2_keep_alive_interval(H2_PING_EVERY)
        .http2_keep_alive_timeout(H2_PING_TIMEOUT)
        // Pings on an idle pooled connection too, so that a dead one is
        // dropped before a request is put on it.
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW);
    if transport.http1_only {
        builder = builder.http1_only();
    }
    if !transport.roots.is_empty() {
        // Beside the system's roots (the platform verifier), not instead.
        builder = builder.tls_certs_merge(transport.roots.iter().cloned());
    }
    builder
        // LLM APIs do not redirect; the redirect layer cost about 8 000
        // instructions a request in the profile.
        .redirect(reqwest::redirect::Policy::none())
        // The engine owns every retry (its decision table). With no
        // retries allowed reqwest also stops copying each request (headers,
        // body, extensions) in case it wants to resend it.
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .user_agent(AGENT)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {}", e.without_url()))
}

/// The `User-Agent` every upstream request carries.
pub(crate) const AGENT: &str = concat!("understudy/", env!("CARGO_PKG_VERSION"));

pub(crate) use understudy_wire::framing::parse_stream_bytes;

#[cfg(test)]
mod tests;
