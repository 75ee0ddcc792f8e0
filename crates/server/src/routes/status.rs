//! The status page: `GET /` serves one self-contained HTML page (no CDN, no
//! build step) that polls `GET /v1/status` every two seconds — providers,
//! breakers and outcomes, traffic per second for the last ten minutes, and
//! the last events.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

const PAGE: &str = include_str!("../static/status.html");

/// `GET /` (open: the page holds no data) .
pub(crate) fn page_router() -> Router<AppState> {
    Router::new().route("/", get(page))
}

/// `GET /v1/status` (behind client auth, like the rest of the API).
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/status", get(status))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}

async fn status(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    let routing = state.engine.routing().await?;
    let recent = state.engine.recent();
    Ok(Json(json!({
        "now": understudy_core::shared::unix_ms() / 1000,
        "routing": routing,
        "providers": providers,
        "seconds": recent.seconds(),
        "events": recent.events(),
    })))
}
