//! `GET /healthz` (open, for load balancers: the process is alive) and
//! `GET /readyz` (open: whether it can serve — every route has a target
//! that can take a request now).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    let available: Vec<&str> = providers
        .iter()
        .filter(|p| p.available)
        .map(|p| p.name.as_str())
        .collect();
    Ok(Json(
        json!({"status": "ok", "available_providers": available}),
    ))
}

/// 200 when every route has a target that can serve, else 503 naming the
/// routes that cannot and why (short reasons: no key, no file, no
/// account). Each check is one entry of `checks`, so that others can join
/// it.
async fn readyz(State(state): State<AppState>) -> Response {
    let routes = match state.engine.readiness().await {
        Ok(unready) => json!(unready),
        Err(e) => {
            tracing::warn!(error = %e, "readiness cannot be told");
            json!([{"route": null, "targets": [], "reason": "the engine is not running"}])
        }
    };
    let ready = routes.as_array().is_some_and(Vec::is_empty);
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "checks": {"routes": {"ok": ready, "unready": routes}},
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
