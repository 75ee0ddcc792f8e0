//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's
//! Messages API over the same engine, so Claude Code and the Anthropic SDKs
//! get the same failover by changing only their base URL. `model` names a
//! route, a pin or a provider's model; the failover shows in
//! `x-understudy-*` headers, and `model` in the answer always names the
//! model that actually answered.
//!
//! An Anthropic target gets the client's body as sent (only the key and
//! the model change; `anthropic-version` and `anthropic-beta` are
//! forwarded), so extended thinking with its signatures, prompt caching and
//! betas keep working, and its answer comes back as it sent it. Every other
//! target gets the translated request (see `anthropic/translate.rs`), and its answer
//! is rendered in Anthropic's shape by [`answer`] and [`stream`].

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use understudy_core::{GenerateRequest, Generation};
use understudy_types::{NativeRequest, Protocol};
use understudy_wire::messages::answer::MessageOut;
use understudy_wire::messages::client::MessagesRequest;
use understudy_wire::messages::endpoint;
use understudy_wire::messages::events::MessageEvents;

use super::parse_json;
use crate::frames::{Framing, KeepAlive};
use crate::front::{Front, Preamble, native_json, serve};
use crate::{AnthropicError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(endpoint::MESSAGES.path, post(messages))
        .route(endpoint::COUNT_TOKENS.path, post(count_tokens))
}

async fn messages(
    State(state): State<AppState>,
    preamble: Preamble,
    RawQuery(query): RawQuery,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    // The bytes as sent, for Anthropic targets (a cheap clone: `Bytes`
    // shares its buffer).
    let raw = body.as_ref().ok().cloned();
    let mut body: MessagesRequest = parse_json(body, state.engine.settings().server.max_parts)?;
    let mut chat = body.take_chat()?;
    gate_betas(&preamble.headers, &mut chat);
    let (routing, raw) = routing_of(&mut body, &preamble.headers, raw);
    chat.routing = routing;
    chat.native = native_request(raw, &preamble.headers, query.as_deref());
    let model = body.model.as_deref().unwrap_or("default");
    let front = Messages {
        id: format!("msg_{}", preamble.id),
    };
    let request = preamble.request(chat, model, Protocol::Messages)?;
    serve(&state, front, request, body.stream).await
}

/// The Messages front end.
struct Messages {
    id: String,
}

impl Front for Messages {
    type Error = AnthropicError;
    type Encoder = MessageEvents;

    /// As an Anthropic target sent it, or rendered from the neutral answer.
    async fn answer(&self, g: &mut Generation) -> Response {
        if let Some(native) = g.native.take() {
            return native_json(native);
        }
        let body = MessageOut::answer(
            &self.id,
            &g.model,
            &g.text,
            &g.tool_calls,
            &g.finish_reason,
            g.usage,
        );
        Json(body).into_response()
    }

    /// A refusal is an answer in Anthropic's terms: a 200 with
    /// `stop_reason: "refusal"`.
    fn refusal(&self, model: &str, _: &str) -> Response {
        Json(MessageOut::refusal(&self.id, model)).into_response()
    }

    fn encoder(&self, model: &str, native: bool) -> MessageEvents {
        MessageEvents::new(self.id.clone(), model, native)
    }

    /// Kept alive with Anthropic's `ping` event.
    fn framing(&self) -> Framing {
        Framing::Sse(KeepAlive::Ping)
    }
}

/// `{"input_tokens": n}`: counted by the first available Anthropic target
/// of the request's route (the body forwarded as sent; the response names
/// it in `x-understudy-provider`), else an estimate (see
/// [`MessagesRequest::estimate_input_tokens`]) that says so in
/// `x-understudy-estimate: true`. `max_tokens` is not needed here.
async fn count_tokens(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    tenant: Option<axum::Extension<crate::auth::Tenant>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    #[derive(serde::Serialize)]
    struct Count {
        input_tokens: u64,
    }
    let raw = body.as_ref().ok().cloned();
    let mut body: MessagesRequest = parse_json(body, state.engine.settings().server.max_parts)?;
    let Some(model) = body.model.clone().filter(|m| !m.trim().is_empty()) else {
        return Err(crate::ApiError::invalid("model", "model is required").into());
    };
    let estimate = body.estimate_input_tokens();
    // Judged like `/v1/messages` (the same translation, validation and
    // plan), but for `max_tokens`, which a count does not take.
    body.max_tokens.get_or_insert(1);
    let mut chat = body.take_chat()?;
    gate_betas(&headers, &mut chat);
    // A count is not routed by them, but they never reach a provider.
    let (_, raw) = routing_of(&mut body, &headers, raw);
    chat.native = native_request(raw, &headers, query.as_deref());
    let mut request = GenerateRequest::new(chat).route(crate::headers::model_route(&model));
    // The client's record scopes a count as it does a generation.
    request.tenant = tenant.map(|t| t.0.0);
    let counted = state.engine.count_tokens(request).await?;
    let (input_tokens, counted_by) = match counted {
        Some((n, provider)) => (n, Some(provider)),
        None => (estimate, None),
    };
    Ok(super::counted(Count { input_tokens }, counted_by))
}

/// The routing `body` asks for (`models`, `provider`, and `fallbacks`
/// unless it is Anthropic's own, behind its beta), and the body as sent
/// without those members: `raw` untouched when it has none.
fn routing_of(
    body: &mut MessagesRequest,
    headers: &HeaderMap,
    raw: Option<Bytes>,
) -> (Option<Box<understudy_types::CallerRouting>>, Option<Bytes>) {
    let native = crate::caller::anthropic_fallbacks(headers);
    let ours =
        body.models.is_some() || body.provider.is_some() || (!native && body.fallbacks.is_some());
    if !ours {
        // Nothing of the gateway's (at most Anthropic's own `fallbacks`):
        // the body goes as sent.
        return (None, raw);
    }
    let fallbacks = if native { None } else { body.fallbacks.take() };
    let routing =
        understudy_wire::caller::routing(body.models.take(), body.provider.take(), fallbacks);
    let raw = crate::caller::strip(raw, crate::caller::fields(native));
    (routing, raw)
}

/// Betas that make the provider fetch URLs, run code or read the account's
/// files are the operator's to allow (see `passthrough`): marks those the
/// request's `anthropic-beta` headers (every one of them) switch on.
fn gate_betas(headers: &HeaderMap, chat: &mut understudy_types::ChatRequest) {
    for g in understudy_wire::messages::gated::of_beta_headers(headers) {
        chat.native_gated.insert(g);
    }
}

/// The client's body as sent, with its `anthropic-*` protocol headers and
/// the query parameters the Messages API defines (`beta`, which Claude Code
/// sends as `?beta=true`), for Anthropic targets.
fn native_request(
    raw: Option<Bytes>,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Option<Arc<NativeRequest>> {
    let body = String::from_utf8(Vec::from(raw?)).ok()?;
    // Extended thinking takes only temperature 1: a softened retry leaves
    // the sampling alone.
    let fixed_sampling = understudy_wire::messages::native::fixes_sampling(&body);
    let mut native = NativeRequest::new(Protocol::Messages, body);
    native.fixed_sampling = fixed_sampling;
    native.query = endpoint::native_query(query);
    native.headers = endpoint::native_headers(headers);
    Some(Arc::new(native))
}
