//! `POST /v1/chat/completions`: the OpenAI-compatible API. Existing SDKs
//! work against it by changing only their base URL; the failover shows in
//! `x-understudy-*` headers, and `model` always names the model that
//! actually answered.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderValue;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use understudy_core::{Error, GenerateRequest};

use super::parse_json;
use crate::auth::RequestId;
use crate::openai::{ChatCompletionRequest, finish_reason, now, usage_json};
use crate::sse::OpenAiEvents;
use crate::{ApiError, AppState, OpenAiError};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/chat/completions", post(completions))
}

async fn completions(
    State(state): State<AppState>,
    Extension(RequestId(id)): Extension<RequestId>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let body: ChatCompletionRequest = parse_json(body)?;
    let chat = body.to_chat()?;
    let route = super::resolve_route(&state, body.model.as_deref().unwrap_or("default")).await?;
    let mut request = GenerateRequest::new(chat).route(route);
    request.request_id = Some(id.clone());
    request.cache = !super::no_cache(&headers);
    super::apply_overrides(&state, &headers, &mut request).await?;

    if body.stream {
        let stream = state
            .engine
            .generate_stream(request)
            .await
            .map_err(refusal_is_an_error)?;
        let headers = [
            ("x-understudy-provider", stream.provider.clone()),
            ("x-understudy-fell-back", stream.fell_back.to_string()),
            (
                "x-understudy-content-filtered",
                stream.content_filtered.to_string(),
            ),
        ];
        let events = OpenAiEvents::new(
            stream,
            format!("chatcmpl-{id}"),
            now(),
            body.include_usage(),
        );
        let mut response = Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response();
        insert_headers(&mut response, &headers);
        return Ok(response);
    }

    match state.engine.generate(request).await {
        Ok(g) => {
            let body = json!({
                "id": format!("chatcmpl-{id}"),
                "object": "chat.completion",
                "created": now(),
                "model": g.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": g.text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": finish_reason(&g.finish_reason),
                }],
                "usage": usage_json(g.usage),
                "system_fingerprint": null,
            });
            let mut response = Json(body).into_response();
            insert_headers(
                &mut response,
                &[
                    ("x-understudy-provider", g.provider.clone()),
                    ("x-understudy-fell-back", g.fell_back.to_string()),
                    (
                        "x-understudy-content-filtered",
                        g.content_filtered.to_string(),
                    ),
                ],
            );
            Ok(response)
        }
        // A refusal surfaced by policy is an answer in OpenAI's terms.
        Err(Error::Refused { attempts }) => {
            let refused = attempts.last();
            let provider = refused.map(|a| a.provider.clone()).unwrap_or_default();
            let model = refused.map(|a| a.model.clone()).unwrap_or_default();
            let body = json!({
                "id": format!("chatcmpl-{id}"),
                "object": "chat.completion",
                "created": now(),
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": null, "refusal": refused.and_then(|a| a.detail.clone())},
                    "logprobs": null,
                    "finish_reason": "content_filter",
                }],
                "usage": null,
            });
            let mut response = Json(body).into_response();
            insert_headers(
                &mut response,
                &[
                    ("x-understudy-provider", provider),
                    ("x-understudy-fell-back", "false".into()),
                    ("x-understudy-content-filtered", "true".into()),
                ],
            );
            Ok(response)
        }
        Err(e) => Err(e.into()),
    }
}

/// A streamed refusal under the `surface` policy: nothing was sent yet, so
/// it is an ordinary error response.
fn refusal_is_an_error(e: Error) -> OpenAiError {
    OpenAiError(ApiError::Engine(e))
}

fn insert_headers(response: &mut Response, headers: &[(&'static str, String)]) {
    for (name, value) in headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, v);
        }
    }
}
