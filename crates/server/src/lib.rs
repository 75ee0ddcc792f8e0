//! Understudy's HTTP front end. It translates HTTP to engine calls and
//! results back; every routing decision lives in `understudy-core`.
//!
//! # Layout
//! - [`app`]: the axum router over an [`Engine`].
//! - [`serve`]: binds, serves, and shuts down gracefully.
//! - [`api`]: the JSON shapes of the neutral API (shared with the CLI's `--json`).
//! - `error`: the only place errors become HTTP statuses.
//! - `routes`: one module per endpoint group.
//! - `sse`: engine streams as server-sent events.

pub mod api;
mod error;
mod routes;
mod sse;

use std::future::Future;
use std::io;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::net::TcpListener;
use understudy_core::Engine;

pub use error::ApiError;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Shared state of every handler.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Engine,
}

/// The HTTP application over `engine`.
pub fn app(engine: Engine) -> Router {
    Router::new()
        .merge(routes::generate::router())
        .merge(routes::health::router())
        .fallback(routes::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(AppState { engine })
}

/// Serves `app(engine)` on `listener` until `shutdown` completes, then lets
/// requests in flight finish and stops the engine.
pub async fn serve(
    listener: TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = app(engine.clone());
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    engine.shutdown().await;
    served
}
