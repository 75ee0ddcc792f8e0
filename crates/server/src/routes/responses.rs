//! `POST /v1/responses` (OpenAI's Responses API, streamed and not) and the
//! stored responses: `GET` and `DELETE /v1/responses/{id}`,
//! `GET /v1/responses/{id}/input_items`. The request is translated for
//! every target (see `responses/request.rs`) but those that speak the
//! Responses API themselves, which get it as sent and whose answers go back
//! as they came (`responses/native.rs`); the failover shows in
//! `x-understudy-*` headers, hosted tools left out in
//! `x-understudy-omitted-tools`, and `model` always names the model that
//! answered. `previous_response_id` continues a stored conversation on
//! whichever target serves, whoever served the turn before.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use understudy_types::Protocol;
use understudy_wire::responses::answer::Echo;
use understudy_wire::responses::endpoint::{CREATE, INPUT_ITEMS, RETRIEVE};
use understudy_wire::responses::events::Head;
use understudy_wire::responses::inbound::CreateRequest;

use super::parse_json;
use crate::auth::Client;
use crate::front::{Preamble, serve};
use crate::responses::front::{Responses, Save, native_request};
use crate::responses::store::owner_of;
use crate::sse::now;
use crate::{ApiError, AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(CREATE.path, post(create))
        .route(RETRIEVE.path, get(retrieve).delete(delete))
        .route(INPUT_ITEMS.path, get(input_items))
}

async fn create(
    State(state): State<AppState>,
    preamble: Preamble,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    // The bytes as sent, for Responses API targets (a cheap clone).
    let mut raw = body.as_ref().ok().cloned();
    let mut body: CreateRequest = parse_json(body, state.engine.settings().server.max_parts)?;
    body.check()?;
    let present = body.models.is_some() || body.provider.is_some() || body.fallbacks.is_some();
    let routing = understudy_wire::caller::routing(
        body.models.take(),
        body.provider.take(),
        body.fallbacks.take(),
    );
    if present {
        // The gateway's, never the provider's (which refuses them).
        raw = crate::caller::strip(raw, crate::caller::fields(false));
    }
    let input = body.input_items()?;
    let owner = owner_of(preamble.client);
    let mut inherited = None;
    let history = match &body.previous_response_id {
        None => Vec::new(),
        Some(previous) => {
            let stored = state
                .responses
                .get(previous, &owner)
                .await
                .ok_or_else(|| ApiError::PreviousResponseNotFound(previous.clone()))?;
            let mut history = stored.context.clone();
            if let Some(out) = stored.response.get("output").and_then(Value::as_array) {
                history.extend(out.iter().cloned());
            }
            inherited.clone_from(&stored.session);
            history
        }
    };
    let translated = body.translate(&history, &input)?;
    let mut chat = translated.chat;
    chat.routing = routing;
    let conversation = [history.as_slice(), input.as_slice()];
    chat.native = native_request(raw, &body, conversation);
    let model = body.model.as_deref().unwrap_or("default");
    let mut request = preamble.request(chat, model, Protocol::Responses)?;
    request.omitted_tools = translated.omitted.clone();
    session_of_body(&mut request, body.prompt_cache_key.as_deref(), inherited);
    let save = body.store.unwrap_or(true).then(|| {
        let input_start = history.len();
        let mut context = history;
        context.extend(input);
        Arc::new(Save {
            store: Arc::clone(&state.responses),
            owner,
            context,
            input_start,
            session: request.session.as_ref().map(|s| s.value.clone()),
        })
    });
    let head = Arc::new(Head {
        id: crate::responses::new_id("resp"),
        created_at: now(),
        echo: Echo::new(&body),
        names: translated.names,
        kept: save.is_some(),
    });
    let mut response = serve(&state, Responses { head, save }, request, body.stream).await?;
    if !translated.omitted.is_empty() {
        let omitted = translated.omitted.join(", ");
        tracing::info!(%omitted, "hosted tools left out: no target can run them");
        if let Ok(v) = HeaderValue::from_str(&omitted) {
            response
                .headers_mut()
                .insert("x-understudy-omitted-tools", v);
        }
    }
    Ok(response)
}

/// `GET /v1/responses/{id}`: the stored response.
async fn retrieve(
    State(state): State<AppState>,
    client: Option<Extension<Client>>,
    Path(id): Path<String>,
) -> Result<Response, OpenAiError> {
    let stored = state
        .responses
        .get(&id, &owner(client))
        .await
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(stored.response.clone()).into_response())
}

/// `DELETE /v1/responses/{id}`.
async fn delete(
    State(state): State<AppState>,
    client: Option<Extension<Client>>,
    Path(id): Path<String>,
) -> Result<Response, OpenAiError> {
    if !state.responses.delete(&id, &owner(client)).await {
        return Err(not_found(&id).into());
    }
    Ok(Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// `GET /v1/responses/{id}/input_items` (`order`, default `desc`;
/// `limit`, 1 to 100, default 20; `after`, an item id).
async fn input_items(
    State(state): State<AppState>,
    client: Option<Extension<Client>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, OpenAiError> {
    let (mut desc, mut limit, mut after) = (true, 20usize, None::<String>);
    for pair in query.iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=').unwrap_or((pair, "")) {
            ("order", "asc") => desc = false,
            ("order", "desc") => desc = true,
            ("order", _) => return Err(ApiError::invalid("order", "expected asc or desc").into()),
            ("limit", n) => {
                limit = n
                    .parse()
                    .ok()
                    .filter(|n| (1..=100).contains(n))
                    .ok_or_else(|| ApiError::invalid("limit", "expected a number from 1 to 100"))?;
            }
            ("after", a) => after = Some(a.to_owned()),
            _ => {}
        }
    }
    let stored = state
        .responses
        .get(&id, &owner(client))
        .await
        .ok_or_else(|| not_found(&id))?;
    let mut items: Vec<&Value> = stored.context.iter().skip(stored.input_start).collect();
    if desc {
        items.reverse();
    }
    if let Some(after) = after {
        let from = items
            .iter()
            .position(|i| i.get("id").and_then(Value::as_str) == Some(after.as_str()));
        items = from.map_or_else(Vec::new, |p| items.split_off(p + 1));
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    let id_of = |i: Option<&&Value>| i.and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
    let body = json!({
        "object": "list",
        "data": items,
        "first_id": id_of(items.first()),
        "last_id": id_of(items.last()),
        "has_more": has_more,
    });
    Ok(Json(body).into_response())
}

/// The owner of this request's stored responses: from the client key's
/// tag that `client_auth` computed (empty on an open gateway), so that the
/// key is read and matched in one place only.
fn owner(client: Option<Extension<Client>>) -> String {
    owner_of(client.map(|Extension(Client(tag))| tag))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("no stored response with id `{id}`"))
}

/// A request's session from its body where no header named one: its
/// `prompt_cache_key`, else the session of the stored response its
/// `previous_response_id` continues.
fn session_of_body(
    request: &mut understudy_core::GenerateRequest,
    prompt_cache_key: Option<&str>,
    inherited: Option<String>,
) {
    use understudy_core::{SessionHint, SessionSource};
    if request.session.is_some() {
        return;
    }
    request.session = prompt_cache_key
        .and_then(|key| SessionHint::new(SessionSource::PromptCacheKey, key))
        .or_else(|| SessionHint::new(SessionSource::PreviousResponse, inherited.as_deref()?));
}
