//! `POST /v1/generate`: the neutral API.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use crate::api::{GenerateBody, GenerateResponse};
use crate::sse::NeutralEvents;
use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/generate", post(generate))
}

async fn generate(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: GenerateBody = parse_json(body)?;
    let streamed = body.stream;
    let mut request = body.into_request()?;
    request.request_id = request_id(&headers);
    if streamed {
        // A failure before the first text is an ordinary HTTP error: the
        // client has been sent nothing yet.
        let stream = state.engine.generate_stream(request).await?;
        let id = HeaderValue::from_str(&stream.request_id).ok();
        let sse = Sse::new(NeutralEvents { inner: stream }).keep_alive(KeepAlive::default());
        let mut response = sse.into_response();
        if let Some(id) = id {
            response.headers_mut().insert("x-request-id", id);
        }
        return Ok(response);
    }
    let result = state.engine.generate(request).await;
    match &result {
        Ok(g) => {
            tracing::info!(
                request_id = %g.request_id,
                provider = %g.provider,
                fell_back = g.fell_back,
                content_filtered = g.content_filtered,
                latency_ms = g.latency_ms,
                "generated"
            );
            let id = HeaderValue::from_str(&g.request_id).ok();
            let mut response = Json(GenerateResponse::from_result(&result)).into_response();
            if let Some(id) = id {
                response.headers_mut().insert("x-request-id", id);
            }
            Ok(response)
        }
        Err(e) => Err(ApiError::Engine(e.clone())),
    }
}

/// Reads a JSON body, turning every failure into a 4xx with our error shape.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the body is larger than {} bytes", crate::BODY_LIMIT)
        } else {
            rejection.body_text()
        };
        ApiError::Body { status, message }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::Body {
        status: StatusCode::BAD_REQUEST,
        message: format!("invalid JSON body: {e}"),
    })
}

/// The caller's `x-request-id`, when it is short and plain enough to echo.
fn request_id(headers: &HeaderMap) -> Option<String> {
    let id = headers.get("x-request-id")?.to_str().ok()?;
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    ok.then(|| id.to_owned())
}
