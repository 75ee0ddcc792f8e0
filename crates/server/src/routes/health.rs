//! `GET /healthz` (open, for load balancers) and `GET /v1/providers`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz))
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
