//! `POST /v1/chat/completions`: the OpenAI-compatible API. Existing SDKs
//! work against it by changing only their base URL; the failover shows in
//! `x-understudy-*` headers, and `model` always names the model that
//! actually answered.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use understudy_core::{Error, GenerateRequest};

use super::parse_json;
use crate::auth::RequestId;
use crate::sse::{OpenAiEvents, now};
use crate::{ApiError, AppState, OpenAiError};
use understudy_wire::chat_completions::answer::{ChoiceOut, CompletionOut, MessageOut};
use understudy_wire::chat_completions::finish_reason_name as finish_reason;
use understudy_wire::chat_completions::inbound::ChatCompletionRequest;
use understudy_wire::chat_completions::response::WireUsage as UsageOut;

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/chat/completions", post(completions))
}

async fn completions(
    State(state): State<AppState>,
    Extension(RequestId(id)): Extension<RequestId>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let mut body: ChatCompletionRequest = parse_json(body)?;
    let chat = body.take_chat()?;
    let route = super::model_route(body.model.as_deref().unwrap_or("default"));
    let mut request = GenerateRequest::new(chat).route(route);
    request.api = understudy_core::Api::Openai;
    request.request_id = Some(id.clone());
    request.cache = !super::no_cache(&headers);
    super::apply_overrides(&headers, &mut request)?;

    if body.stream {
        let stream = match state.engine.generate_stream(request).await {
            Ok(stream) => stream,
            // A refusal surfaced by policy means what it means unstreamed:
            // an answer refused by the content filter.
            Err(Error::Refused { attempts }) => {
                let refused = attempts.last();
                let events = crate::sse::refusal_events(
                    &format!("chatcmpl-{id}"),
                    now(),
                    refused.map_or("", |a| a.model.as_str()),
                    refused.and_then(|a| a.detail.as_deref()).unwrap_or(""),
                );
                let mut response = Sse::new(events).into_response();
                let provider = refused.map_or("", |a| a.provider.as_str());
                super::failover_headers(&mut response, provider, false, true);
                return Ok(response);
            }
            Err(e) => return Err(refusal_is_an_error(e)),
        };
        let (provider, fell_back, filtered, held) = (
            stream.provider.clone(),
            stream.fell_back,
            stream.content_filtered,
            stream.held,
        );
        let events = OpenAiEvents::new(
            stream,
            format!("chatcmpl-{id}"),
            now(),
            body.include_usage(),
        );
        let mut response = Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response();
        // A held stream starts before anyone served: its final event, not
        // its headers, says who did.
        if !held {
            super::failover_headers(&mut response, &provider, fell_back, filtered);
        }
        return Ok(response);
    }

    let id = format!("chatcmpl-{id}");
    match state.engine.generate(request).await {
        Ok(g) => {
            let body = CompletionOut {
                id: &id,
                object: "chat.completion",
                created: now(),
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
            let mut response = Json(body).into_response();
            super::failover_headers(&mut response, &g.provider, g.fell_back, g.content_filtered);
            Ok(response)
        }
        // A refusal surfaced by policy is an answer in OpenAI's terms.
        Err(Error::Refused { attempts }) => {
            let refused = attempts.last();
            let body = CompletionOut {
                id: &id,
                object: "chat.completion",
                created: now(),
                model: refused.map_or("", |a| a.model.as_str()),
                choices: [ChoiceOut {
                    index: 0,
                    message: MessageOut {
                        role: "assistant",
                        content: None,
                        refusal: refused.and_then(|a| a.detail.as_deref()),
                        tool_calls: None,
                    },
                    logprobs: None,
                    finish_reason: "content_filter",
                }],
                usage: None,
                system_fingerprint: None,
            };
            let mut response = Json(body).into_response();
            let provider = refused.map_or("", |a| a.provider.as_str());
            super::failover_headers(&mut response, provider, false, true);
            Ok(response)
        }
        Err(e) => Err(e.into()),
    }
}

/// An error before a stream began: nothing was sent yet, so it is an
/// ordinary error response.
fn refusal_is_an_error(e: Error) -> OpenAiError {
    OpenAiError(ApiError::Engine(e))
}
