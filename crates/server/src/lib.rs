//! Understudy's HTTP front end. It translates HTTP to engine calls and
//! results back; every routing decision lives in `understudy-core`.
//!
//! # Layout
//! - `App`: the axum router over an [`Engine`], behind the request
//!   context every request gets first (`auth::request_context`).
//! - [`serve`], [`serve_until`]: serve a listener (at most
//!   `server.max_connections` connections at once, each request body
//!   within `server.body_timeout`), and drain on shutdown: unready first,
//!   serving on for `server.drain_grace`, then requests in flight finish
//!   within `server.drain_timeout`.
//! - [`api`]: the JSON shapes of the neutral API (shared with the CLI's `--json`).
//! - `error`: the only place errors become HTTP statuses (the neutral
//!   shape, or a front end's, as its protocol's `Endpoint` writes it).
//! - `front`: the one front-end handler ([`front::Front`] is what a
//!   protocol's front end supplies: its answer, its refusal, its stream
//!   encoder, its error shape) and the preamble every API route reads.
//! - `caller`: the routing a client asks for (`x-understudy-targets`, the
//!   body's `models`, `provider`, `fallbacks`), read and kept from
//!   natively forwarded bodies.
//! - `headers`: the `x-understudy-*` headers every API shares (the
//!   per-request overrides, the cache opt-out, the failover headers).
//! - `frames`: the one stream writer for an encoder (SSE with the
//!   protocol's keep-alive, or a JSON array).
//! - `auth`: client keys and the admin token; request ids and log spans;
//!   the browser checks (`Host` on an open loopback gateway, CORS, JSON
//!   content type).
//! - `responses`: OpenAI's Responses API's front end (kept answers) and
//!   the stored responses.
//! - `routes`: one module per endpoint group; each API's route reads its
//!   request into the neutral one (with `understudy_wire`) and hands it to
//!   `front::serve` with its [`front::Front`].
//! - `sse`: the neutral API's stream encoder.

pub mod api;
mod auth;
mod caller;
mod error;
mod frames;
mod front;
mod headers;
mod responses;
mod routes;
mod sse;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::Layer as _;
use understudy_core::Engine;
use understudy_settings::Secret;

pub use error::{AnthropicError, ApiError, GeminiError, InShape, OpenAiError};

/// Shared state of every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Engine,
    /// Client keys; empty means no client auth.
    pub(crate) api_keys: Arc<Vec<Secret>>,
    /// Whether clients must send a key (plain keys or client records).
    pub(crate) closed: bool,
    /// The admin token; `None` turns the admin routes off.
    pub(crate) admin_token: Option<Arc<Secret>>,
    /// The `Host` check and the CORS origins.
    pub(crate) browser: Arc<auth::Browser>,
    /// Stored Responses API responses (memory, and Redis with `REDIS_URL`).
    pub(crate) responses: Arc<responses::store::ResponseStore>,
}

/// The HTTP application: the axum router over an engine, and the state its
/// handlers share. Every request goes through [`auth::request_context`]
/// (its id, log context, trace, browser checks) before the router, as
/// plain async code on the connection's task rather than as a router
/// layer, which would clone and box the route's services per request.
struct App {
    router: Router,
    state: AppState,
    /// The body limit the router's extractors read (`server.max_body_bytes`
    /// when the application was made).
    max_body_bytes: usize,
}

impl App {
    /// The application over `engine`, with the client keys, admin token
    /// and browser checks from its settings, as if listening on `listen`
    /// (the address the `Host` check accepts besides the loopback names
    /// and `server.allowed_hosts`).
    fn new(engine: Engine, listen: SocketAddr) -> Self {
        let server = &engine.settings().server;
        let max_body_bytes = server.max_body_bytes;
        let state = AppState {
            api_keys: Arc::new(server.api_keys.clone()),
            closed: engine.tenants().closed,
            admin_token: server.admin_token.clone().map(Arc::new),
            browser: Arc::new(auth::Browser::new(server, listen)),
            responses: Arc::new(responses::store::ResponseStore::new(
                engine.settings().redis_url.as_ref().map(|u| u.expose()),
            )),
            engine,
        };
        let api = routes::FRONT_ENDS
            .iter()
            .fold(Router::new(), |api, router| api.merge(router()))
            .merge(routes::generate::router())
            .merge(routes::models::router())
            .merge(routes::wit::router())
            .merge(routes::status::router())
            .route_layer(auth::Guard::new(&state, auth::Check::Client));
        let admin =
            routes::admin::router().route_layer(auth::Guard::new(&state, auth::Check::Admin));
        let router = Router::new()
            .merge(api)
            .merge(admin)
            .merge(routes::health::router())
            .merge(routes::metrics::router())
            .merge(routes::status::page_router())
            .fallback(routes::not_found)
            .with_state(state.clone());
        Self {
            router,
            state,
            max_body_bytes,
        }
    }

    /// Answers `req`. The body limit wraps the whole router once, here,
    /// rather than each route as a router layer would (a boxed clone of
    /// the route per request).
    async fn serve(&self, req: axum::extract::Request) -> Response {
        let router = DefaultBodyLimit::max(self.max_body_bytes).layer(self.router.clone());
        auth::request_context(&self.state, req, router).await
    }
}

/// Serves the application over `engine` on `listener` until `shutdown`
/// completes, then drains as [`serve_until`] does, with nothing to cut the
/// drain short.
pub async fn serve(
    listener: TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_until(listener, engine, shutdown, std::future::pending()).await
}

/// Serves the application over `engine` on `listener` until `shutdown`
/// completes; then drains:
///
/// 1. The engine turns draining (`/readyz` answers 503 `draining`) while
///    new connections and requests are still served for
///    `server.drain_grace`: time for a load balancer to see it. Every
///    response from now on says `Connection: close`, so that keep-alive
///    clients open their next connection elsewhere.
/// 2. It stops accepting (new connections are refused), closes idle
///    connections, and lets requests in flight — open streams included —
///    finish within `server.drain_timeout` (one deadline for both).
/// 3. Past that deadline it stops anyway, with a WARN naming how many
///    connections were cut (the streamed runs still going are cut; the
///    connections themselves end when the process does).
///
/// `stop_now` completing at any point of the drain (a second signal) ends
/// it at once, as the deadline would. Then the engine stops.
///
/// Connections are served by hyper's HTTP/1.1 server directly (not
/// `axum::serve`, which adds HTTP/2 detection and an upgrade layer to every
/// connection): less work per request and a smaller connection task, which
/// counts when thousands of streams are open.
///
/// At most `server.max_connections` connections are served at once: a
/// permit is taken before `accept`, so further connections wait in the
/// kernel's listen backlog instead of costing a descriptor and a task. A
/// request body that has not arrived in full within `server.body_timeout`
/// is answered 408 and its connection closed.
pub async fn serve_until(
    listener: TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop_now: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let acceptor = Acceptor::new(listener, &engine);
    let mut stop_now = std::pin::pin!(stop_now);
    acceptor.accept_until(std::pin::pin!(shutdown)).await;
    engine.start_draining();
    let server = &engine.settings().server;
    let (grace, deadline) = (server.drain_grace, server.drain_timeout);
    tracing::info!(
        grace_s = grace.as_secs_f64(),
        "shutting down: /readyz answers 503 (draining); serving on for server.drain_grace"
    );
    let mut stopped = false;
    acceptor
        .accept_until(std::pin::pin!(async {
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = &mut stop_now => stopped = true,
            }
        }))
        .await;
    let Acceptor {
        listener,
        connections,
        max_connections,
        graceful,
        ..
    } = acceptor;
    drop(listener);
    let open = || max_connections - connections.available_permits().min(max_connections);
    // One deadline for the connections and then the streams' runs.
    let until = tokio::time::Instant::now() + deadline;
    let cut = if stopped {
        open()
    } else {
        tracing::info!(
            open = open(),
            timeout_s = deadline.as_secs_f64(),
            "stopped accepting; letting requests in flight finish within server.drain_timeout"
        );
        tokio::select! {
            () = graceful.shutdown() => 0,
            () = tokio::time::sleep(deadline) => open(),
            () = &mut stop_now => {
                stopped = true;
                open()
            }
        }
    };
    let why = if stopped {
        "a second signal"
    } else {
        "server.drain_timeout"
    };
    if cut > 0 {
        tracing::warn!(cut, "stopping with connections still open (cut by {why})");
    } else if stopped {
        tracing::warn!("stopping at once: a second signal");
    }
    if cut > 0 || stopped {
        engine.shutdown_within(Duration::ZERO).await;
        return Ok(());
    }
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    tokio::select! {
        () = engine.shutdown_within(left) => {}
        () = &mut stop_now => {
            tracing::warn!("stopping at once: a second signal");
            // Dropping the shutdown under way cut the streams it waited
            // for; this one finds them gone and stops the rest.
            engine.shutdown_within(Duration::ZERO).await;
        }
    }
    Ok(())
}

/// What accepts connections: the listener, the connection limit, the app
/// and hyper's settings, and the watch that lets connections close
/// gracefully.
struct Acceptor {
    listener: TcpListener,
    connections: Arc<Semaphore>,
    max_connections: usize,
    app: Arc<App>,
    http: hyper::server::conn::http1::Builder,
    graceful: hyper_util::server::graceful::GracefulShutdown,
    body_timeout: Duration,
}

impl Acceptor {
    fn new(listener: TcpListener, engine: &Engine) -> Self {
        let settings = &engine.settings().server;
        let listen = listener.local_addr().unwrap_or(settings.listen);
        let max_connections = settings.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let mut http = hyper::server::conn::http1::Builder::new();
        // Hyper's header-read timeout also runs while a keep-alive connection
        // waits for its next request, so it is the idle timeout as well.
        http.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(settings.idle_timeout);
        Self {
            body_timeout: settings.body_timeout,
            connections: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            app: Arc::new(App::new(engine.clone(), listen)),
            http,
            graceful: hyper_util::server::graceful::GracefulShutdown::new(),
            listener,
        }
    }

    /// Accepts and serves connections until `until` completes.
    async fn accept_until(&self, mut until: Pin<&mut impl Future<Output = ()>>) {
        loop {
            let permit = tokio::select! {
                permit = Arc::clone(&self.connections).acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return, // never closed
                },
                () = until.as_mut() => return,
            };
            let tcp = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                },
                () = until.as_mut() => return,
            };
            self.serve_connection(tcp, permit);
        }
    }

    /// Serves one connection on a task of its own, which holds `permit`.
    fn serve_connection(&self, tcp: tokio::net::TcpStream, permit: OwnedSemaphorePermit) {
        let body_timeout = self.body_timeout;
        // Small responses must not wait for Nagle's algorithm.
        let _ = tcp.set_nodelay(true);
        // The lateness flag is set by a body that missed its deadline and
        // read when its response leaves (HTTP/1.1 serves one request at a
        // time per connection); one shared value per connection, with the
        // application, cloned per request.
        let conn = Arc::new(Conn {
            late: AtomicU8::new(0),
            app: Arc::clone(&self.app),
        });
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let conn = Arc::clone(&conn);
            async move {
                let req = if req.body().is_end_stream() {
                    req.map(Body::new)
                } else {
                    let shape = auth::protocol_code(auth::protocol_of(&req));
                    let late = Arc::clone(&conn);
                    req.map(|body| Body::new(Deadline::new(body, body_timeout, late, shape)))
                };
                let response = conn.app.serve(req).await;
                let mut response = match conn.late.swap(0, Ordering::Relaxed) {
                    0 => response,
                    shape => body_timed_out(shape, response, body_timeout),
                };
                // Draining: the client takes its next request elsewhere
                // before the listener closes (hyper closes the connection
                // after this response).
                if conn.app.state.engine.draining() {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let conn = self
            .http
            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
        let conn = self.graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// A connection's flag, a request body's lateness (see [`Deadline`]), and
/// the application it serves (whose engine's drain closes the connection
/// after a response).
struct Conn {
    late: AtomicU8,
    app: Arc<App>,
}

/// A request body that must arrive in full by a deadline. The timer is
/// made only when the body is not all there yet (a small body usually
/// comes with the head), so the plain request path allocates nothing more.
struct Deadline {
    inner: Incoming,
    deadline: tokio::time::Instant,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The connection's flag: the request's protocol (its
    /// [`auth::protocol_code`], plus one) once the deadline has passed.
    late: Arc<Conn>,
    shape: u8,
}

impl Deadline {
    fn new(inner: Incoming, timeout: Duration, late: Arc<Conn>, shape: u8) -> Self {
        Self {
            inner,
            deadline: tokio::time::Instant::now() + timeout,
            sleep: None,
            late,
            shape,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                this.late.late.store(this.shape + 1, Ordering::Relaxed);
                Poll::Ready(Some(Err(Box::new(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request body did not arrive within server.body_timeout",
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The answer to a request whose body missed its deadline (whatever the
/// handler made of the failed read): 408 in the route's error shape, and
/// the connection closes.
fn body_timed_out(shape: u8, handled: Response, timeout: Duration) -> Response {
    let error = ApiError::Body {
        status: StatusCode::REQUEST_TIMEOUT,
        message: format!(
            "the request body did not arrive within {} s (server.body_timeout)",
            timeout.as_secs_f64()
        ),
    };
    let mut response = crate::error::error_in(auth::protocol_from_code(shape - 1), error);
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if let Some(id) = handled.headers().get("x-request-id") {
        headers.insert("x-request-id", id.clone());
    }
    response
}

/// An accept error: a connection that died before it was accepted is
/// skipped; anything else (out of file descriptors) is logged and waited
/// out, so the loop does not spin.
async fn accept_failed(e: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "cannot accept connections; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
