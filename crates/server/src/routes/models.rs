//! `GET /v1/models` (the routes, in OpenAI's list shape) and
//! `GET /v1/providers` (every provider and its state).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{ApiError, AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/providers", get(providers))
}

async fn models(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let routing = state.engine.routing().await?;
    let providers = state.engine.providers().await?;
    let mut data = vec![json!({
        "id": "default", "object": "model", "created": 0, "owned_by": "understudy",
        "targets": std::iter::once(&routing.default).chain(routing.order.iter().filter(|n| **n != routing.default)).collect::<Vec<_>>()
    })];
    for (name, targets) in &routing.routes {
        data.push(json!({"id": name, "object": "model", "created": 0, "owned_by": "understudy", "targets": targets}));
    }
    for p in providers.iter().filter(|p| p.available) {
        data.push(json!({"id": format!("{}:{}", p.name, p.model), "object": "model", "created": 0, "owned_by": p.name}));
    }
    Ok(Json(json!({"object": "list", "data": data})))
}

async fn providers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    Ok(Json(json!({"providers": providers})))
}
