//! `POST /v1/chat/completions`: the OpenAI-compatible API. Existing SDKs
//! work against it by changing only their base URL; the failover shows in
//! `x-understudy-*` headers, and `model` always names the model that
//! actually answered.
//!
//! An OpenAI-compatible target gets a non-streamed body as the client sent
//! it (only the model changes) wherever the translation would send it the
//! same, and its plain answer comes back as it sent it; every other target,
//! body or answer goes through the neutral request and [`CompletionOut`].

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use understudy_core::Generation;
use understudy_types::{ChatRequest, NativeRequest, Protocol, RouteSelector};
use understudy_wire::chat_completions::answer::{ChoiceOut, CompletionOut, MessageOut};
use understudy_wire::chat_completions::endpoint::COMPLETIONS;
use understudy_wire::chat_completions::events::Chunks;
use understudy_wire::chat_completions::finish_reason_name as finish_reason;
use understudy_wire::chat_completions::inbound::ChatCompletionRequest;
use understudy_wire::chat_completions::response::WireUsage as UsageOut;
use understudy_wire::chat_completions::{native, quick};

use super::parse_json;
use crate::front::{Front, Preamble, json_body, native_json, prefixed, serve};
use crate::headers::model_route;
use crate::sse::now;
use crate::{AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route(COMPLETIONS.path, post(completions))
}

async fn completions(
    State(state): State<AppState>,
    preamble: Preamble,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let max_parts = state.engine.settings().server.max_parts;
    let body = match body.map(|raw| quick_chat(raw, max_parts)) {
        Ok(Ok(quick)) => {
            let front = ChatCompletions::new(&preamble, quick.include_usage);
            let request = preamble.routed(quick.chat, quick.route, Protocol::ChatCompletions)?;
            return serve(&state, front, request, quick.stream).await;
        }
        Ok(Err(raw)) => Ok(raw),
        Err(rejection) => Err(rejection),
    };
    // The body holds the whole request: its length bounds the fit's
    // estimate. The bytes as sent, for OpenAI-compatible targets (a cheap
    // clone: `Bytes` shares its buffer).
    let raw = body.as_ref().ok().cloned();
    let body_len = raw.as_ref().and_then(|b| u32::try_from(b.len()).ok());
    let mut body: ChatCompletionRequest = parse_json(body, max_parts)?;
    let mut chat = body.take_chat()?;
    chat.body_len = body_len;
    if !body.stream {
        chat.native = raw.and_then(native_request);
    }
    chat.routing = understudy_wire::caller::routing(
        body.models.take(),
        body.provider.take(),
        body.fallbacks.take(),
    );
    let model = body.model.as_deref().unwrap_or("default");
    let front = ChatCompletions::new(&preamble, body.include_usage());
    let mut request = preamble.request(chat, model, Protocol::ChatCompletions)?;
    if request.session.is_none() {
        request.session = body.prompt_cache_key.as_deref().and_then(|key| {
            understudy_core::SessionHint::new(understudy_core::SessionSource::PromptCacheKey, key)
        });
    }
    // The typed body goes before the call: a future keeps what is still
    // in scope at an await.
    let stream = body.stream;
    drop(body);
    serve(&state, front, request, stream).await
}

/// What the handler needs of a body [`quick::read`] took.
struct QuickChat {
    chat: ChatRequest,
    route: RouteSelector,
    stream: bool,
    include_usage: bool,
}

/// `raw` read in one pass, as the typed read would read it (such a body
/// holds none of the gateway's own members), the body as sent going to
/// OpenAI-compatible targets when it is not streamed; `raw` back when only
/// the typed read can take it (or its parts are past `max_parts`, for the
/// typed read to refuse).
fn quick_chat(raw: Bytes, max_parts: usize) -> Result<QuickChat, Bytes> {
    let Ok(text) = std::str::from_utf8(&raw) else {
        return Err(raw);
    };
    let Some(quick) = quick::read(text, max_parts) else {
        return Err(raw);
    };
    let route = model_route(quick.model.unwrap_or("default"));
    let (stream, forwardable, spans) = (quick.stream, quick.forwardable, quick.spans);
    let mut out = QuickChat {
        chat: quick.chat,
        route,
        stream,
        include_usage: quick.include_usage,
    };
    out.chat.body_len = u32::try_from(raw.len()).ok();
    if !stream && forwardable {
        // Copied from the text read above (not taken from `raw`, which
        // shares the connection's read buffer and would be copied anyway,
        // then checked as UTF-8 again).
        let body = text.to_owned();
        out.chat.native = Some(Arc::new(
            NativeRequest::new(Protocol::ChatCompletions, body).with_spans(spans),
        ));
    }
    Ok(out)
}

/// The client's body, for targets of its protocol to get as it is where
/// the translation would send them the same (see
/// `understudy_wire::chat_completions::native`): the buffer it arrived in
/// when it goes whole (the typed request holds no reference to it, so it
/// is usually its only owner and becomes the `String` without a copy).
fn native_request(raw: Bytes) -> Option<Arc<NativeRequest>> {
    let stripped = match native::forwarded(std::str::from_utf8(&raw).ok()?)? {
        Cow::Borrowed(_) => None,
        Cow::Owned(body) => Some(body),
    };
    let body = match stripped {
        Some(body) => body,
        None => String::from_utf8(Vec::from(raw)).ok()?,
    };
    Some(Arc::new(NativeRequest::new(
        Protocol::ChatCompletions,
        body,
    )))
}

/// The Chat Completions front end.
struct ChatCompletions {
    /// The request's id: the answer's is `chatcmpl-` and it, written only
    /// where the gateway writes the answer (a relayed one has its own).
    request_id: Arc<str>,
    created: u64,
    include_usage: bool,
}

impl ChatCompletions {
    /// The front end of the request `preamble` opens: its answer named
    /// after the request's id, made now.
    fn new(preamble: &Preamble, include_usage: bool) -> Self {
        Self {
            request_id: Arc::clone(&preamble.id),
            created: now(),
            include_usage,
        }
    }

    /// The answer's id.
    fn id(&self) -> String {
        prefixed("chatcmpl-", &self.request_id)
    }
}

impl Front for ChatCompletions {
    type Error = OpenAiError;
    type Encoder = Chunks;

    /// As an OpenAI-compatible target sent it, or written from the neutral
    /// answer.
    async fn answer(&self, g: &mut Generation) -> Response {
        if let Some(native) = g.native.take() {
            return native_json(native);
        }
        let id = self.id();
        let body = CompletionOut {
            id: &id,
            object: "chat.completion",
            created: self.created,
            model: &g.model,
            choices: [ChoiceOut {
                index: 0,
                message: MessageOut::answer(&g.text, &g.tool_calls),
                logprobs: None,
                finish_reason: finish_reason(&g.finish_reason),
            }],
            usage: g.usage.map(UsageOut::from),
            system_fingerprint: None,
        };
        json_body(body.to_json())
    }

    /// A refusal is an answer in OpenAI's terms: `message.refusal` and
    /// `finish_reason: "content_filter"`.
    fn refusal(&self, model: &str, refusal: &str) -> Response {
        let id = self.id();
        let body = CompletionOut {
            id: &id,
            object: "chat.completion",
            created: self.created,
            model,
            choices: [ChoiceOut {
                index: 0,
                message: MessageOut {
                    role: "assistant",
                    content: None,
                    refusal: (!refusal.is_empty()).then_some(refusal),
                    tool_calls: None,
                },
                logprobs: None,
                finish_reason: "content_filter",
            }],
            usage: None,
            system_fingerprint: None,
        };
        Json(body).into_response()
    }

    fn encoder(&self, _: &str, _: bool) -> Chunks {
        Chunks::new(self.id(), self.created, self.include_usage)
    }
}
