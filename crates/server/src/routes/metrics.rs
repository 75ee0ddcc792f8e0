//! `GET /metrics`: Prometheus text format, or OpenMetrics when the scraper
//! asks for it (`Accept: application/openmetrics-text`).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let body = state.engine.metrics_text(openmetrics).await;
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, content_type)], body)
}
