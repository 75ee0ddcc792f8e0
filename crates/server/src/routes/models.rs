//! `GET /v1/models` (the routes, in the list shape of the front end whose
//! clients ask: Anthropic's when the request carries an
//! `anthropic-version` header, as Anthropic's SDKs and Claude Code send,
//! Gemini's when it comes from Google's clients — `x-goog-api-key`,
//! `x-goog-api-client` or `?key=` — else OpenAI's; each front end's table
//! says which marks are its and writes its list) and `GET /v1/providers`
//! (every provider and its state).

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use understudy_settings::Settings;
use understudy_settings::parse_target;
use understudy_wire::endpoint::{MODELS_PATH, Model};
use understudy_wire::front_ends;

use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(MODELS_PATH, get(models))
        .route("/v1/providers", get(providers))
}

async fn models(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let api = front_ends::models_owner(&headers, query.as_deref());
    match (list(&state).await, api.and_then(front_ends::edge)) {
        (Ok(names), Some(edge)) => Json((edge.model_list)(&names.models())).into_response(),
        (Err(e), _) => crate::error::error_in(api, e),
        (Ok(_), None) => crate::error::error_in(api, ApiError::NotFound("no model list".into())),
    }
}

/// Every name a client may ask for: `default`, the routes (each with its
/// targets), each available provider's `provider:model`, with what a
/// model list shows of each.
pub(crate) struct Names {
    entries: Vec<Entry>,
}

/// One name, with what the lists show of it (see [`Model`]).
struct Entry {
    id: String,
    display: String,
    owner: String,
    targets: Option<Vec<String>>,
    supports: Value,
}

impl Names {
    /// The names as every front end's list reads them.
    pub(crate) fn models(&self) -> Vec<Model<'_>> {
        self.entries
            .iter()
            .map(|e| Model {
                id: &e.id,
                display: &e.display,
                owner: &e.owner,
                targets: e.targets.as_deref(),
                supports: e.supports.clone(),
            })
            .collect()
    }
}

/// The names the model lists show, in order: `default` (its targets the
/// default first, then the failover order), the routes, each available
/// provider's `provider:model`.
pub(crate) async fn list(state: &AppState) -> Result<Names, ApiError> {
    let routing = state.engine.routing().await?;
    let providers = state.engine.providers().await?;
    let settings = &*state.engine.current_settings();
    let mut entries = Vec::new();
    let default: Vec<String> = std::iter::once(&routing.default)
        .chain(routing.order.iter().filter(|n| **n != routing.default))
        .cloned()
        .collect();
    let mut route = |id: String, display: String, targets: Vec<String>| {
        let supports = targets.iter().map(|t| supports(settings, t)).collect();
        entries.push(Entry {
            id,
            display,
            owner: "understudy".to_owned(),
            targets: Some(targets),
            supports: Value::Array(supports),
        });
    };
    route(
        "default".into(),
        format!("default ({})", default.join(", ")),
        default,
    );
    for (name, steps) in &routing.routes {
        let targets: Vec<String> = steps
            .iter()
            .flat_map(|s| s.targets().iter().cloned())
            .collect();
        route(
            name.clone(),
            format!("{name} ({})", targets.join(", ")),
            targets,
        );
    }
    for p in providers.iter().filter(|p| p.available) {
        let id = format!("{}:{}", p.name, p.model);
        entries.push(Entry {
            supports: supports(settings, &id),
            display: id.clone(),
            owner: p.name.clone(),
            targets: None,
            id,
        });
    }
    Ok(Names { entries })
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
