//! Google's Gemini API over the same engine, under `/v1beta/` and `/v1/`
//! (google-genai calls `/v1`, the Gemini CLI `/v1beta`):
//! `models/{model}:generateContent`, `:streamGenerateContent` (server-sent
//! events with `?alt=sse`, else the JSON array Google streams),
//! `:countTokens`, and `GET models` / `models/{model}`. The model in the
//! path is a route, a pattern route or a `provider:model` pin, as on the
//! other APIs; the failover shows in `x-understudy-*` headers and in
//! `modelVersion`, which names the model that answered.
//!
//! A body is read as strictly as Google reads it (`body.rs` there): what
//! Google refuses gets Google's own 400 `INVALID_ARGUMENT` here, so a
//! client that works through the gateway works against Google too. A
//! Gemini target gets the client's body as sent (thought signatures
//! intact; see `understudy_wire::generate_content::native`), in the same
//! buffer the body arrived in; every other target gets the translation
//! (`inbound.rs` there), and its answer is written in Gemini's shapes
//! (`answer.rs` there).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Path, RawQuery, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use understudy_core::{GenerateRequest, Generation};
use understudy_types::{NativeRequest, Protocol};
use understudy_wire::endpoint::Endpoint as _;
use understudy_wire::generate_content::answer::{self, ChunkEncoder};
use understudy_wire::generate_content::endpoint::{self, GenerateContentEdge};
use understudy_wire::generate_content::inbound::{self, Translated};

use crate::frames::{Framing, KeepAlive};
use crate::front::{Front, Preamble, native_json, serve};
use crate::{ApiError, AppState, GeminiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(endpoint::MODELS.path, get(models))
        .route(endpoint::MODEL[0], get(model).post(method))
        .route(endpoint::MODEL[1], get(model).post(method))
}

/// `POST models/{model}:{method}`. The model is in the path, so a client
/// record whose `models` do not cover it is refused before the body is
/// read; the body is read only then.
async fn method(
    State(state): State<AppState>,
    preamble: Preamble,
    Path(target): Path<String>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Result<Response, GeminiError> {
    let Some((model, method)) = target.rsplit_once(':') else {
        return Err(ApiError::NotFound(format!(
            "no method in `models/{target}`: expected `{target}:generateContent`"
        ))
        .into());
    };
    if !endpoint::METHODS.contains(&method) {
        return Err(ApiError::NotFound(format!(
            "`{method}` is not a method of the Gemini API here: expected generateContent, \
             streamGenerateContent or countTokens"
        ))
        .into());
    }
    in_scope(&state, &preamble, model, method)?;
    let body = Bytes::from_request(req, &state).await;
    match method {
        "generateContent" => generate(state, preamble, model, None, body).await,
        "streamGenerateContent" => {
            let sse = query
                .as_deref()
                .is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
            let framing = if sse {
                // Google's own server sends no keep-alive.
                Framing::Sse(KeepAlive::Silent)
            } else {
                Framing::JsonArray
            };
            generate(state, preamble, model, Some(framing), body).await
        }
        _ => count_tokens(state, preamble, model, body).await,
    }
}

/// Refuses a client record's request for a model its `models` do not
/// cover (Google's 403), from the path alone: the route a generation asks
/// for is `x-understudy-route` when sent, else the path's model; a count
/// always the path's.
fn in_scope(
    state: &AppState,
    preamble: &Preamble,
    model: &str,
    method: &str,
) -> Result<(), GeminiError> {
    let Some(record) = &preamble.tenant else {
        return Ok(());
    };
    let asked = match preamble.headers.get("x-understudy-route") {
        // Not text: the override is refused with the body's other checks.
        Some(route) if method != "countTokens" => match route.to_str() {
            Ok(route) => route.trim(),
            Err(_) => return Ok(()),
        },
        _ => model,
    };
    let tenants = state.engine.tenants();
    tenants
        .scope(record, &crate::headers::model_route(asked))
        .map_err(|refusal| {
            tenants.refused(record, &refusal);
            ApiError::Engine(understudy_types::Error::Client(refusal)).into()
        })
}

/// `generateContent`, or `streamGenerateContent` in `framing`.
async fn generate(
    state: AppState,
    preamble: Preamble,
    model: &str,
    framing: Option<Framing>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, GeminiError> {
    let bytes = body.map_err(super::body_error)?;
    super::check_parts(&bytes, state.engine.settings().server.max_parts)?;
    let Translated {
        mut chat,
        include_thoughts,
    } = inbound::read(&bytes)?.translate()?;
    chat.native = native(bytes);
    let front = GenerateContent {
        id: preamble.id.to_string(),
        include_thoughts,
        framing: framing.unwrap_or(Framing::JsonArray),
    };
    let request = preamble.request(chat, model, Protocol::GenerateContent)?;
    serve(&state, front, request, framing.is_some()).await
}

/// The Gemini front end.
struct GenerateContent {
    id: String,
    include_thoughts: bool,
    framing: Framing,
}

impl Front for GenerateContent {
    type Error = GeminiError;
    type Encoder = ChunkEncoder;

    async fn answer(&self, g: &mut Generation) -> Response {
        if let Some(native) = g.native.take() {
            return native_json(native);
        }
        Json(answer::answer(
            &g.text,
            &g.tool_calls,
            &g.finish_reason,
            g.usage,
            &g.model,
            Some(&self.id),
        ))
        .into_response()
    }

    /// Gemini's own form: a candidate that SAFETY stopped.
    fn refusal(&self, model: &str, _: &str) -> Response {
        Json(answer::refusal(model, Some(&self.id))).into_response()
    }

    fn encoder(&self, _: &str, native: bool) -> ChunkEncoder {
        ChunkEncoder::new(self.include_thoughts, native)
    }

    fn framing(&self) -> Framing {
        self.framing
    }
}

/// The client's body as sent, for Gemini targets: the buffer it arrived
/// in (the typed request holds no reference to it, so it is the only
/// owner and becomes the `String` without a copy).
fn native(bytes: Bytes) -> Option<Arc<NativeRequest>> {
    let body = String::from_utf8(Vec::from(bytes)).ok()?;
    Some(Arc::new(NativeRequest::new(
        Protocol::GenerateContent,
        body,
    )))
}

/// `countTokens`: `{"totalTokens": n}`, counted by the first available
/// Gemini target of the route (the body forwarded as sent, the response
/// naming it in `x-understudy-provider`), else an estimate that says so in
/// `x-understudy-estimate: true`.
async fn count_tokens(
    state: AppState,
    preamble: Preamble,
    model: &str,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, GeminiError> {
    let bytes = body.map_err(super::body_error)?;
    super::check_parts(&bytes, state.engine.settings().server.max_parts)?;
    let counted = inbound::read(&bytes)?.counted();
    let estimate = counted.estimate_input_tokens();
    let Translated { mut chat, .. } = counted.translate()?;
    chat.native = native(bytes);
    let mut request = GenerateRequest::new(chat).route(crate::headers::model_route(model));
    // The client's record scopes a count as it does a generation.
    request.tenant = preamble.tenant;
    let (total, counted_by) = match state.engine.count_tokens(request).await? {
        Some((n, provider)) => (n, Some(provider)),
        None => (estimate, None),
    };
    Ok(super::counted(json!({ "totalTokens": total }), counted_by))
}

/// `GET models`: the same names as the other lists (`default`, the
/// routes, each available provider's `provider:model`) as `models/<name>`,
/// all on one page.
async fn models(State(state): State<AppState>) -> Result<Json<Value>, GeminiError> {
    let names = super::models::list(&state).await?;
    Ok(Json(GenerateContentEdge::model_list(&names.models())))
}

/// `GET models/{model}`: one entry of the list.
async fn model(
    State(state): State<AppState>,
    Path(target): Path<String>,
) -> Result<Json<Value>, GeminiError> {
    let name = target.strip_prefix("models/").unwrap_or(&target);
    let names = super::models::list(&state).await?;
    match names.models().iter().find(|m| m.id == name) {
        Some(m) => Ok(Json(endpoint::model_entry(m))),
        None => Err(ApiError::ModelNotFound(name.to_owned()).into()),
    }
}
