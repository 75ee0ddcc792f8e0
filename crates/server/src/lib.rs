//! Understudy's HTTP front end. It translates HTTP to engine calls and
//! results back; every routing decision lives in `understudy-core`.
//!
//! # Layout
//! - [`app`]: the axum router over an [`Engine`].
//! - [`serve`]: binds, serves, and shuts down gracefully within a bound.
//! - [`api`]: the JSON shapes of the neutral API (shared with the CLI's `--json`).
//! - `openai`: the OpenAI Chat Completions shapes.
//! - `error`: the only place errors become HTTP statuses (two shapes).
//! - `auth`: client keys and the admin token; request ids and log spans.
//! - `routes`: one module per endpoint group.
//! - `sse`: engine streams as server-sent events (neutral and OpenAI).

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
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use understudy_core::{Engine, Secret};

pub use error::{ApiError, OpenAiError};

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
pub async fn serve(
    listener: TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = app(engine.clone());
    let (signalled, mut on_signal) = tokio::sync::watch::channel(false);
    // Small responses must not wait for Nagle's algorithm.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = signalled.send(true);
    });
    let drain_bound = async move {
        let _ = on_signal.wait_for(|s| *s).await;
        tokio::time::sleep(DRAIN_LIMIT).await;
    };
    let served = tokio::select! {
        served = server => served,
        () = drain_bound => {
            tracing::warn!("requests still in flight after the drain limit; stopping anyway");
            Ok(())
        }
    };
    engine.shutdown().await;
    served
}
