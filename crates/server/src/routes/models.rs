//! `GET /v1/models` (the routes, in OpenAI's list shape) and
//! `GET /v1/providers` (every provider and its state).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use understudy_core::Settings;
use understudy_core::settings::parse_target;

use crate::{ApiError, AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/providers", get(providers))
}

async fn models(State(state): State<AppState>) -> Result<Json<Value>, OpenAiError> {
    let routing = state.engine.routing().await?;
    let providers = state.engine.providers().await?;
    let settings = state.engine.settings();
    let default: Vec<&String> = std::iter::once(&routing.default)
        .chain(routing.order.iter().filter(|n| **n != routing.default))
        .collect();
    let mut data = vec![json!({
        "id": "default", "object": "model", "created": 0, "owned_by": "understudy",
        "targets": default,
        "supports": default.iter().map(|t| supports(settings, t)).collect::<Vec<_>>(),
    })];
    for (name, targets) in &routing.routes {
        data.push(json!({
            "id": name, "object": "model", "created": 0, "owned_by": "understudy",
            "targets": targets,
            "supports": targets.iter().map(|t| supports(settings, t)).collect::<Vec<_>>(),
        }));
    }
    for p in providers.iter().filter(|p| p.available) {
        let id = format!("{}:{}", p.name, p.model);
        let mut entry = json!({"id": id, "object": "model", "created": 0, "owned_by": p.name});
        entry["supports"] = supports(settings, &id);
        data.push(entry);
    }
    Ok(Json(json!({"object": "list", "data": data})))
}

/// What one target (`provider` or `provider:model`) can serve.
fn supports(settings: &Settings, spec: &str) -> Value {
    let Ok(t) = parse_target(spec, &settings.providers) else {
        return json!({"target": spec});
    };
    let Some(p) = settings.providers.get(&*t.provider) else {
        return json!({"target": spec});
    };
    let c = p.capabilities_of(&t.model);
    json!({
        "target": t.to_string(),
        "tools": c.tools,
        "vision": c.vision,
        "remote_images": c.vision && p.kind.takes_remote_images(),
        "json_schema": c.json_schema,
    })
}

async fn providers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    Ok(Json(json!({"providers": providers})))
}
