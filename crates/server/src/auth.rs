//! Middleware: a request id and a log span for every request, client keys
//! (`Authorization: Bearer` or Anthropic's `x-api-key`, compared in
//! constant time) on the API routes, and the admin token on the admin
//! routes.
//!
//! And the browser checks, so that a web page cannot drive a gateway on
//! the user's machine: the JSON endpoints take only `Content-Type:
//! application/json` (415 otherwise), which a page cannot send across
//! origins without a CORS preflight; an open gateway (no client keys) on
//! loopback answers only requests whose `Host` is its own (421 otherwise:
//! the DNS-rebinding defence); and CORS headers go only to the origins in
//! `server.cors_origins`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt as _;
use understudy_core::ClientTag;
use understudy_core::tenants::{ClientRefusal, Remaining};
use understudy_core::trace::TraceContext;
use understudy_settings::{ClientRecord, ServerSettings};
use understudy_types::Protocol;
use understudy_wire::endpoint::{self, Key};
use understudy_wire::front_ends;

use crate::error::error_in;
use crate::{ApiError, AppState};

/// `x-request-id`, named once (a name given as text is parsed on each use).
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Gives every request an id (the caller's `x-request-id` when it is plain
/// enough to echo), a tracing span carrying it, and the response header;
/// refuses a foreign `Host` on an open loopback gateway; answers CORS
/// preflights and marks answers for the listed origins.
///
/// It runs before `router` (not as its layer: see the application's docs),
/// so it sees every request, routed or not.
pub(crate) async fn request_context(
    state: &AppState,
    mut req: Request,
    router: impl tower::Service<Request, Response = Response, Error = Infallible>,
) -> Response {
    let id = request_id(req.headers());
    let trace = trace_of(state, &mut req);
    // Not a span (10 500 instructions a request at `info`): a task-local
    // the log formatter writes on each line of this request, and where the
    // handlers read the id (not the request's extensions: an insert there
    // costs a boxed value and a hash).
    let log_id = Arc::clone(&id);
    let browser = &state.browser;
    let origin = browser.cors_origin(req.headers());
    let response = async {
        if let Some(refused) = oversized(&req, state.engine.settings().server.max_body_bytes) {
            return refused;
        }
        if !browser.host_allowed(&req) {
            return in_shape(
                &req,
                ApiError::Body {
                    status: StatusCode::MISDIRECTED_REQUEST,
                    message: "this gateway does not answer for the Host of this request: \
                              with no client keys on loopback it answers only localhost, \
                              127.0.0.1, [::1], its listen address and server.allowed_hosts"
                        .into(),
                },
            );
        }
        if origin.is_some() && req.method() == Method::OPTIONS {
            if let Some(preflight) = preflight(req.headers()) {
                return preflight;
            }
        }
        let Ok(response) = router.oneshot(req).await;
        response
    };
    let mut response = understudy_core::logctx::scope(log_id, response).await;
    if browser.cors() {
        // Answers differ by origin: caches must keep them apart.
        response
            .headers_mut()
            .append(header::VARY, HeaderValue::from_static("origin"));
    }
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(
                "x-request-id, x-understudy-provider, x-understudy-fell-back, x-understudy-content-filtered, x-understudy-omitted-tools, traceresponse",
            ),
        );
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    if let Some(trace) = trace {
        // The client finds its trace by this (W3C `traceresponse`).
        trace.answered(response.status().as_u16());
        if let Ok(value) = HeaderValue::try_from(trace.traceresponse()) {
            response.headers_mut().insert(TRACERESPONSE, value);
        }
    }
    response
}

/// The caller's `x-request-id` when it is plain enough to echo, else a
/// new one.
fn request_id(headers: &HeaderMap) -> Arc<str> {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map_or_else(understudy_core::new_request_id, Arc::from)
}

/// The request's trace context when traces are on (the caller's
/// `traceparent` continued, or a new trace), named by its front end's
/// span route and kept on the request.
fn trace_of(state: &AppState, req: &mut Request) -> Option<Arc<TraceContext>> {
    if !state.engine.traces_on() {
        return None;
    }
    // W3C: more than one traceparent is no context; several tracestate
    // headers are one list.
    let headers = req.headers();
    let parent = match headers.get_all("traceparent").iter().count() {
        1 => header_text(headers, "traceparent"),
        _ => None,
    };
    let state_list: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let joined = state_list.join(",");
    let trace = state
        .engine
        .trace_context(parent, Some(joined.as_str()).filter(|s| !s.is_empty()))?;
    if let Some(edge) = protocol_of(req).and_then(front_ends::edge) {
        trace.through(edge.span_route);
    }
    req.extensions_mut().insert(Arc::clone(&trace));
    Some(trace)
}

/// W3C Trace Context's response header.
const TRACERESPONSE: HeaderName = HeaderName::from_static("traceresponse");

/// A header's value as text, when it is.
fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The most bytes one header value may hold; a larger one is refused
/// (431) before any work.
pub(crate) const MAX_HEADER_VALUE: usize = 16 * 1024;

/// A request refused on its head alone: a declared `Content-Length` over
/// `server.max_body_bytes` (413 at once, the connection closed, rather
/// than waiting for a body that will be refused), or a header value over
/// [`MAX_HEADER_VALUE`] (431).
fn oversized(req: &Request, max_body_bytes: usize) -> Option<Response> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes as u64) {
        let mut response = in_shape(
            req,
            ApiError::Body {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "the body is larger than the gateway accepts ({max_body_bytes} bytes, \
                     server.max_body_bytes)"
                ),
            },
        );
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Some(response);
    }
    if let Some((name, _)) = req
        .headers()
        .iter()
        .find(|(_, v)| v.len() > MAX_HEADER_VALUE)
    {
        return Some(in_shape(
            req,
            ApiError::Body {
                status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                message: format!(
                    "the value of header `{name}` is longer than {MAX_HEADER_VALUE} bytes"
                ),
            },
        ));
    }
    None
}

/// The client whose key a request came with, set by [`client_auth`] as a
/// request extension (absent on an open gateway): the engine keeps the
/// request's stored state (the response cache, stored responses) apart by
/// its tag. Never the key itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client(pub ClientTag);

/// The client record of the key a request came with, when it has one (set
/// by [`client_auth`] beside [`Client`]).
#[derive(Debug, Clone)]
pub(crate) struct Tenant(pub Arc<ClientRecord>);

/// The service a guard passes an admitted request to (a route).
pub(crate) trait Inner:
    tower::Service<Request, Response = Response, Error = Infallible, Future: Send> + Send
{
}

impl<S> Inner for S where
    S: tower::Service<Request, Response = Response, Error = Infallible, Future: Send> + Send
{
}

/// Which check a [`Guard`] makes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Check {
    /// [`client_auth`]: the API routes.
    Client,
    /// [`admin_auth`]: the admin routes.
    Admin,
}

/// A route layer that makes `check` before the route: what axum's
/// `from_fn_with_state` does, with no boxed future (see [`GuardedFuture`])
/// where that boxes the future, the next service and its future, and
/// clones the state.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    state: Arc<AppState>,
    check: Check,
}

impl Guard {
    pub(crate) fn new(state: &AppState, check: Check) -> Self {
        Self {
            state: Arc::new(state.clone()),
            check,
        }
    }
}

impl<S> tower::Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: self.clone(),
            inner,
        }
    }
}

/// A route behind a [`Guard`].
#[derive(Debug, Clone)]
pub(crate) struct Guarded<S> {
    guard: Guard,
    inner: S,
}

impl<S> tower::Service<Request> for Guarded<S>
where
    S: Inner<Future: Unpin> + Clone + Unpin + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GuardedFuture<tower::util::Oneshot<S, Request>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        // The route is made ready where it is called (`oneshot`).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let state = &self.guard.state;
        let checked = match self.guard.check {
            Check::Client => client_auth(state, req),
            Check::Admin => admin_auth(state, req),
        };
        let refused = match checked {
            Checked::Passed(req, after) => match not_json(&req) {
                None => {
                    return GuardedFuture::Called {
                        route: self.inner.clone().oneshot(req),
                        after,
                    };
                }
                Some(refused) => refused,
            },
            Checked::Refused(refused) => refused,
        };
        GuardedFuture::Refused(Some(refused))
    }
}

/// A guard's check: the request let through (with what writes its client
/// record's headers), or the answer that refuses it.
enum Checked {
    Passed(Request, Option<Metered>),
    Refused(Response),
}

/// A guarded route's answer: the refusal the check made, or the route's
/// answer (with the client record's rate-limit headers written on it). A
/// plain future, not a boxed one: the checks are synchronous, and only the
/// route's call is awaited.
pub(crate) enum GuardedFuture<F> {
    Refused(Option<Response>),
    Called { route: F, after: Option<Metered> },
}

impl<F> Future for GuardedFuture<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match &mut *self {
            // Polled again after its answer (which no caller does): an
            // empty 500 rather than a panic.
            Self::Refused(refused) => std::task::Poll::Ready(Ok(refused
                .take()
                .unwrap_or_else(|| StatusCode::INTERNAL_SERVER_ERROR.into_response()))),
            Self::Called { route, after } => {
                let Ok(mut response) = std::task::ready!(std::pin::Pin::new(route).poll(cx));
                if let Some(metered) = after.take() {
                    metered.write(response.headers_mut());
                }
                std::task::Poll::Ready(Ok(response))
            }
        }
    }
}

/// A client record's request let through: what its answer's rate-limit
/// headers are written from.
pub(crate) struct Metered {
    state: Arc<AppState>,
    record: Arc<ClientRecord>,
    names: &'static endpoint::RateLimitNames,
}

impl Metered {
    fn write(&self, headers: &mut HeaderMap) {
        if let Some(left) = self.state.engine.tenants().remaining(&self.record) {
            write_rate_limit(self.names, headers, &left);
        }
    }
}

/// Requires a client key on the API routes: one of `server.api_keys`
/// (compared in constant time) or a client record's (looked up by its
/// SHA-256). The key is read and matched here only; what the handlers
/// learn of it is [`Client`] and [`Tenant`]. Every answer to a record's
/// key carries its own `x-ratelimit-*` headers: the request goes on with
/// what writes them.
fn client_auth(state: &Arc<AppState>, mut req: Request) -> Checked {
    if !state.closed {
        return Checked::Passed(req, None);
    }
    // Every front end's key places (a bearer token, Anthropic's
    // `x-api-key`, Google's `x-goog-api-key` or `?key=`), on every route.
    let (headers, query) = (req.headers(), req.uri().query());
    let given = front_ends::keys().filter_map(|k| k.given(headers, query));
    let plain = given.clone().find_map(|given| {
        state
            .api_keys
            .iter()
            .find(|k| constant_time_eq(k.expose(), given))
    });
    if let Some(key) = plain {
        let tag = ClientTag::of_key(key.expose());
        req.extensions_mut().insert(Client(tag));
        return Checked::Passed(req, None);
    }
    let tenants = state.engine.tenants();
    let record = given.clone().find_map(|k| tenants.find(k));
    let Some(record) = record else {
        let error = ApiError::Unauthorized(format!(
            "a valid client key is required: {}",
            front_ends::keys_named()
        ));
        return Checked::Refused(in_shape(&req, error));
    };
    // The front end the request came through: its error shape, its
    // metered paths, its rate-limit headers (the neutral API's: OpenAI's).
    let api = protocol_of(&req);
    let edge = api.and_then(front_ends::edge);
    let metered = Metered {
        state: Arc::clone(state),
        record,
        names: edge.map_or(&endpoint::OPENAI_RATE_LIMIT, |e| e.rate_limit),
    };
    let refused = |refusal: ClientRefusal| {
        tenants.refused(&metered.record, &refusal);
        let refusal = understudy_types::Error::Client(refusal);
        let mut response = error_in(api, ApiError::Engine(refusal));
        metered.write(response.headers_mut());
        Checked::Refused(response)
    };
    if metered.record.expired(std::time::SystemTime::now()) {
        return refused(ClientRefusal::Expired);
    }
    // Admission that needs no body, before it is read: a record whose
    // minute's requests or budget are spent costs no parse.
    if admitted(&req, edge)
        && let Err(refusal) = tenants.spent(&metered.record)
    {
        return refused(refusal);
    }
    req.extensions_mut()
        .insert(Client(ClientTag::of_key_sha256(&metered.record.key_sha256)));
    req.extensions_mut()
        .insert(Tenant(Arc::clone(&metered.record)));
    Checked::Passed(req, Some(metered))
}

/// Whether the engine admits `req` against its client record's limits:
/// every `POST` of the API routes that generates — not the token counts
/// (which a record's `models` scopes, but its rates and budget do not):
/// which of a front end's paths do is its table's (`edge`'s) `metered`.
fn admitted(req: &Request, edge: Option<&endpoint::Edge>) -> bool {
    if req.method() != Method::POST {
        return false;
    }
    let path = req.uri().path();
    match edge {
        Some(edge) => edge.metered(path),
        // The neutral API's generating routes.
        None => !path.ends_with("/count_tokens"),
    }
}

/// A client record's own `x-ratelimit-{limit,remaining,reset}-{requests,
/// tokens}` (the front end's `names`), as OpenAI writes its own (resets
/// as durations: `1m0s`, `12.5s`). The names are made once: parsing them
/// per answer showed in the bench.
fn write_rate_limit(names: &endpoint::RateLimitNames, headers: &mut HeaderMap, left: &Remaining) {
    let Ok(reset) = HeaderValue::try_from(understudy_wire::go_duration::write(left.reset)) else {
        return;
    };
    for (names, dimension) in names.iter().zip([left.requests, left.tokens]) {
        let Some((limit, remaining)) = dimension else {
            continue;
        };
        headers.insert(names[0].clone(), HeaderValue::from(limit));
        headers.insert(names[1].clone(), HeaderValue::from(remaining));
        headers.insert(names[2].clone(), reset.clone());
    }
}

/// `error` in the shape of the route `req` asked for.
fn in_shape<B>(req: &axum::http::Request<B>, error: ApiError) -> Response {
    error_in(protocol_of(req), error)
}

/// A request with a body (`POST`, `PUT`) must say it is JSON: a page on
/// another site can send `text/plain` without asking (no CORS preflight),
/// but not `application/json`. The refusal of one that does not.
fn not_json(req: &Request) -> Option<Response> {
    let with_body = matches!(*req.method(), Method::POST | Method::PUT);
    (with_body && !is_json(req.headers())).then(|| {
        let error = ApiError::Body {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            message: "the body must be JSON, sent with Content-Type: application/json".into(),
        };
        in_shape(req, error)
    })
}

/// `Content-Type: application/json`, with or without parameters.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let media = v.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("application/json")
        })
}

/// Requires the admin token on the admin routes; without one configured,
/// the admin routes do not exist.
fn admin_auth(state: &AppState, req: Request) -> Checked {
    let Some(token) = &state.admin_token else {
        return Checked::Refused(
            ApiError::NotFound(format!(
                "no endpoint at {} (set UNDERSTUDY_ADMIN_TOKEN to enable the admin API)",
                req.uri().path()
            ))
            .into_response(),
        );
    };
    if bearer(&req).is_some_and(|given| constant_time_eq(token.expose(), given)) {
        Checked::Passed(req, None)
    } else {
        Checked::Refused(
            ApiError::Unauthorized(
                "the admin token is required: Authorization: Bearer <token>".into(),
            )
            .into_response(),
        )
    }
}

fn bearer(req: &Request) -> Option<&str> {
    Key::Bearer.given(req.headers(), None)
}

/// The protocol a route speaks, for the shape its errors take (`None`:
/// the neutral API): the front end whose path it is, by the front ends'
/// tables (on `/v1/models`, by its clients' marks).
pub(crate) fn protocol_of<B>(req: &axum::http::Request<B>) -> Option<Protocol> {
    front_ends::owner(req.uri().path(), req.headers(), req.uri().query())
}

/// `api` as one byte, for a flag shared with a connection's body
/// (0: the neutral API; else one more than its place in
/// [`Protocol::FRONT_ENDS`]).
pub(crate) fn protocol_code(api: Option<Protocol>) -> u8 {
    api.and_then(|p| Protocol::FRONT_ENDS.iter().position(|&q| q == p))
        .map_or(0, |i| i as u8 + 1)
}

/// The inverse of [`protocol_code`].
pub(crate) fn protocol_from_code(code: u8) -> Option<Protocol> {
    code.checked_sub(1)
        .and_then(|i| Protocol::FRONT_ENDS.get(usize::from(i)).copied())
}

/// The browser checks' settings, fixed at start.
#[derive(Debug)]
pub(crate) struct Browser {
    /// `Some` when the gateway is open (no client keys) on loopback: the
    /// host names (lowercase) accepted besides the loopback names.
    hosts: Option<Hosts>,
    /// `server.cors_origins` (`*` allows any origin).
    cors_origins: Vec<String>,
}

#[derive(Debug)]
struct Hosts {
    /// The listen address as a `Host` (`127.0.0.1:8080`, `[::1]:8080`).
    listen: String,
    /// `server.allowed_hosts`, lowercase: with a port they match exactly,
    /// without one any port.
    allowed: Vec<String>,
}

impl Browser {
    pub(crate) fn new(server: &ServerSettings, listen: SocketAddr) -> Self {
        let open = server.api_keys.is_empty() && server.clients.is_empty();
        let open_on_loopback = open && listen.ip().is_loopback();
        Self {
            hosts: open_on_loopback.then(|| Hosts {
                listen: listen.to_string(),
                allowed: server
                    .allowed_hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
            }),
            cors_origins: server
                .cors_origins
                .iter()
                .map(|o| o.trim().trim_end_matches('/').to_owned())
                .collect(),
        }
    }

    /// Whether `req`'s `Host` is one this gateway answers for (any, unless
    /// the gateway is open on loopback). A request without a `Host`
    /// (HTTP/1.0) is not a browser's and passes.
    pub(crate) fn host_allowed<B>(&self, req: &axum::http::Request<B>) -> bool {
        let Some(hosts) = &self.hosts else {
            return true;
        };
        let host = match req.headers().get(header::HOST) {
            Some(v) => match v.to_str() {
                Ok(h) => h.trim(),
                Err(_) => return false,
            },
            None => match req.uri().authority() {
                Some(a) => a.as_str(),
                None => return true,
            },
        };
        let name = host_name(host);
        ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
            || host.eq_ignore_ascii_case(&hosts.listen)
            || hosts.allowed.iter().any(|a| {
                a.eq_ignore_ascii_case(host)
                    || (host_name(a).len() == a.len() && a.eq_ignore_ascii_case(name))
            })
    }

    /// Whether any origin may call from a browser.
    fn cors(&self) -> bool {
        !self.cors_origins.is_empty()
    }

    /// The request's `Origin`, when it is one of `server.cors_origins`.
    fn cors_origin(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        if self.cors_origins.is_empty() {
            return None;
        }
        let origin = headers.get(header::ORIGIN)?;
        let text = origin.to_str().ok()?;
        self.cors_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(text))
            .then(|| origin.clone())
    }
}

/// The host name of a `Host` value: without the port (`[::1]` keeps its
/// brackets).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The answer to a CORS preflight from a listed origin (`None` when the
/// `OPTIONS` request is not a preflight). The origin header is added by
/// [`request_context`].
fn preflight(headers: &HeaderMap) -> Option<Response> {
    headers.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    let out = response.headers_mut();
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT"),
    );
    if let Some(asked) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    out.insert(
        header::VARY,
        HeaderValue::from_static("access-control-request-method, access-control-request-headers"),
    );
    Some(response)
}

/// Compares without an early exit, so the time taken does not tell how
/// much of a guessed key was right. (The length is not secret.)
fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)))
        == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_name() {
        assert_eq!(super::host_name("localhost:8080"), "localhost");
        assert_eq!(super::host_name("localhost"), "localhost");
        assert_eq!(super::host_name("[::1]:80"), "[::1]");
        assert_eq!(super::host_name("[::1]"), "[::1]");
        assert_eq!(super::host_name("evil.example:x"), "evil.example:x");
    }

    #[test]
    fn is_json() {
        let with = |v: &'static str| {
            let mut h = axum::http::HeaderMap::new();
            h.insert("content-type", axum::http::HeaderValue::from_static(v));
            super::is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(!with("text/plain"));
        assert!(!with("application/jsonx"));
        assert!(!super::is_json(&axum::http::HeaderMap::new()));
    }

    /// Every route of every front end's table is that front end's for the
    /// auth layer and the error writer (the shared model list: the
    /// unmarked client's, OpenAI's), and a client's marks pick its list.
    #[test]
    fn protocol_of_agrees_with_the_tables() {
        use understudy_types::Protocol;
        use understudy_wire::endpoint::MODELS_PATH;
        use understudy_wire::front_ends;
        let of = |path: &str, mark: Option<&'static str>| {
            let mut req = axum::http::Request::builder().uri(path);
            if let Some(mark) = mark {
                req = req.header(mark, "x");
            }
            super::protocol_of(&req.body(()).unwrap())
        };
        for edge in front_ends::front_ends() {
            for route in edge.routes {
                let path = route
                    .path
                    .replace("{target}", "m:generateContent")
                    .replace("{id}", "resp_1");
                let want = if path == MODELS_PATH {
                    Protocol::ChatCompletions
                } else {
                    edge.protocol
                };
                assert_eq!(of(&path, None), Some(want), "{} {path}", route.method);
            }
        }
        assert_eq!(
            of(MODELS_PATH, Some("anthropic-version")),
            Some(Protocol::Messages)
        );
        assert_eq!(
            of(MODELS_PATH, Some("x-goog-api-client")),
            Some(Protocol::GenerateContent)
        );
        assert_eq!(
            of("/v1/models?key=k", None),
            Some(Protocol::GenerateContent)
        );
        assert_eq!(of("/v1/generate", None), None);
    }

    #[test]
    fn constant_time_eq() {
        assert!(super::constant_time_eq("abcdefgh", "abcdefgh"));
        assert!(!super::constant_time_eq("abcdefgh", "abcdefgX"));
        assert!(!super::constant_time_eq("abcdefgh", "abcdefg"));
        assert!(!super::constant_time_eq("", "a"));
    }
}
