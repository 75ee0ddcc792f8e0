//! `POST /v1/generate`: the neutral API.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::parse_json;
use crate::api::{GenerateBody, GenerateResponse};
use crate::frames::{Framed, Framing, KeepAlive};
use crate::front::Preamble;
use crate::sse::Neutral;
use crate::{ApiError, AppState};

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/generate", post(generate))
}

async fn generate(
    State(state): State<AppState>,
    preamble: Preamble,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: GenerateBody = parse_json(body, state.engine.settings().server.max_parts)?;
    let streamed = body.stream;
    let mut request = body.into_request()?;
    preamble.apply(&mut request)?;
    if streamed {
        // A failure before the first text is an ordinary HTTP error: the
        // client has been sent nothing yet.
        let stream = state.engine.generate_stream(request).await?;
        return Ok(Framed::new(stream, Neutral, Framing::Sse(KeepAlive::Comment)).into_response());
    }
    let result = state.engine.generate(request).await;
    match &result {
        Ok(g) => {
            tracing::info!(
                provider = %g.provider,
                fell_back = g.fell_back,
                content_filtered = g.content_filtered,
                latency_ms = g.latency_ms,
                "generated"
            );
            Ok(Json(GenerateResponse::from_result(&result)).into_response())
        }
        Err(e) => Err(ApiError::Engine(e.clone())),
    }
}
