//! Understudy's HTTP front end. It translates HTTP to engine calls and
//! results back; every routing decision lives in `understudy-core`.
//!
//! # Layout
//! - [`app`]: the axum router over an [`Engine`].
//! - [`serve`]: binds, serves, and shuts down gracefully within a bound.
//! - [`api`]: the JSON shapes of the neutral API (shared with the CLI's `--json`).
//! - `openai`: the OpenAI Chat Completions shapes.
//! - `anthropic`: Anthropic's Messages shapes, their translation to the
//!   neutral types, and its event stream.
//! - `error`: the only place errors become HTTP statuses (three shapes).
//! - `auth`: client keys and the admin token; request ids and log spans.
//! - `routes`: one module per endpoint group.
//! - `sse`: engine streams as server-sent events (neutral and OpenAI).

mod anthropic;
pub mod api;
mod auth;
mod error;
mod openai;
mod routes;
mod sse;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use tokio::net::TcpListener;
use tower::ServiceExt as _;
use understudy_core::{Engine, Secret};

pub use error::{AnthropicError, ApiError, OpenAiError};

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// How long requests in flight may run on after a shutdown signal.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Shared state of every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Engine,
    /// Client keys; empty means no client auth.
    pub(crate) api_keys: Arc<Vec<Secret>>,
    /// The admin token; `None` turns the admin routes off.
    pub(crate) admin_token: Option<Arc<Secret>>,
}

/// The HTTP application over `engine`, with the client keys and admin
/// token from its settings.
pub fn app(engine: Engine) -> Router {
    let server = &engine.settings().server;
    let state = AppState {
        api_keys: Arc::new(server.api_keys.clone()),
        admin_token: server.admin_token.clone().map(Arc::new),
        engine,
    };
    let api = Router::new()
        .merge(routes::generate::router())
        .merge(routes::chat::router())
        .merge(routes::messages::router())
        .merge(routes::models::router())
        .merge(routes::wit::router())
        .merge(routes::status::router())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::client_auth,
        ));
    let admin = routes::admin::router().route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::admin_auth,
    ));
    Router::new()
        .merge(api)
        .merge(admin)
        .merge(routes::health::router())
        .merge(routes::metrics::router())
        .merge(routes::status::page_router())
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn(auth::request_context))
        .with_state(state)
}

/// Serves `app(engine)` on `listener` until `shutdown` completes; then
/// stops accepting, lets requests in flight finish (at most
/// [`DRAIN_LIMIT`]), and stops the engine.
///
/// Connections are served by hyper's HTTP/1.1 server directly (not
/// `axum::serve`, which adds HTTP/2 detection and an upgrade layer to every
/// connection): less work per request and a smaller connection task, which
/// counts when thousands of streams are open.
pub async fn serve(
    listener: TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = app(engine.clone());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // Hyper's header-read timeout also runs while a keep-alive connection
    // waits for its next request, so it is the idle timeout as well.
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(engine.settings().server.idle_timeout);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small responses must not wait for Nagle's algorithm.
        let _ = tcp.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone()
                .map_request(|req: hyper::Request<hyper::body::Incoming>| req.map(Body::new)),
        );
        let conn = http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain limit; stopping anyway");
    }
    engine.shutdown().await;
    Ok(())
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
