//! `GET /v1/models` (the routes, in OpenAI's list shape, in Anthropic's
//! when the request carries an `anthropic-version` header, as Anthropic's
//! SDKs and Claude Code send, or in Gemini's when it comes from Google's
//! clients: `x-goog-api-key`, `x-goog-api-client` or `?key=`) and `GET /v1/providers` (every provider and
//! its state).

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use understudy_settings::Settings;
use understudy_settings::parse_target;

use crate::{AnthropicError, ApiError, AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/providers", get(providers))
}

async fn models(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if crate::auth::google_headers(&headers, query.as_deref()) {
        crate::routes::gemini::models(State(state))
            .await
            .into_response()
    } else if headers.contains_key("anthropic-version") {
        anthropic_models(&state)
            .await
            .map_err(AnthropicError::from)
            .into_response()
    } else {
        openai_models(&state)
            .await
            .map_err(OpenAiError::from)
            .into_response()
    }
}

/// Anthropic's model list: `{"data": [{"type": "model", "id",
/// "display_name", "created_at"}], "has_more", "first_id", "last_id"}`,
/// with the same ids as OpenAI's list (`default`, the routes, each
/// available provider's `provider:model`), all on one page. A route's
/// display name lists its targets; `created_at` is the epoch, as
/// `created` is 0 in OpenAI's list.
async fn anthropic_models(state: &AppState) -> Result<Json<Value>, ApiError> {
    let entries = entries(state).await?;
    let data: Vec<Value> = entries
        .iter()
        .map(|(id, name)| {
            json!({"type": "model", "id": id, "display_name": name, "created_at": "1970-01-01T00:00:00Z"})
        })
        .collect();
    Ok(Json(json!({
        "data": data,
        "has_more": false,
        "first_id": entries.first().map(|e| &e.0),
        "last_id": entries.last().map(|e| &e.0),
    })))
}

/// Every name a client may ask for, with a display name: `default`, the
/// routes (each with its targets), each available provider's
/// `provider:model`. Anthropic's and Gemini's lists show these.
pub(crate) async fn entries(state: &AppState) -> Result<Vec<(String, String)>, ApiError> {
    let routing = state.engine.routing().await?;
    let providers = state.engine.providers().await?;
    let mut entries: Vec<(String, String)> = Vec::new();
    let default: Vec<&str> = std::iter::once(&routing.default)
        .chain(routing.order.iter().filter(|n| **n != routing.default))
        .map(String::as_str)
        .collect();
    entries.push((
        "default".into(),
        format!("default ({})", default.join(", ")),
    ));
    for (name, targets) in &routing.routes {
        entries.push((name.clone(), format!("{name} ({})", targets.join(", "))));
    }
    for p in providers.iter().filter(|p| p.available) {
        let id = format!("{}:{}", p.name, p.model);
        entries.push((id.clone(), id));
    }
    Ok(entries)
}

async fn openai_models(state: &AppState) -> Result<Json<Value>, ApiError> {
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
        "remote_images": c.vision && p.protocol_for(&t.model).takes_remote_images(),
        "json_schema": c.json_schema,
    })
}

async fn providers(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let providers = state.engine.providers().await?;
    Ok(Json(json!({"providers": providers})))
}
