//! Middleware: a request id and a log span for every request, client keys
//! (`Authorization: Bearer` or Anthropic's `x-api-key`, compared in
//! constant time) on the API routes, and the admin token on the admin
//! routes.

use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::{AnthropicError, ApiError, AppState, OpenAiError};

/// The id of the request being served, set by [`request_context`].
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub String);

/// Gives every request an id (the caller's `x-request-id` when it is plain
/// enough to echo), a tracing span carrying it, and the response header.
pub(crate) async fn request_context(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
        .map(str::to_owned)
        .unwrap_or_else(understudy_core::new_request_id);
    req.extensions_mut().insert(RequestId(id.clone()));
    let span = tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path());
    let mut response = next.run(req).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// Requires a configured client key on the API routes.
pub(crate) async fn client_auth(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if state.api_keys.is_empty() {
        return next.run(req).await;
    }
    // Anthropic's clients send the key as `x-api-key` (Claude Code's
    // ANTHROPIC_API_KEY), or as a bearer token (ANTHROPIC_AUTH_TOKEN).
    let ok = [bearer(&req), x_api_key(&req)]
        .into_iter()
        .flatten()
        .any(|given| {
            state
                .api_keys
                .iter()
                .any(|k| constant_time_eq(k.expose(), given))
        });
    if ok {
        return next.run(req).await;
    }
    let error = ApiError::Unauthorized(
        "a valid client key is required: Authorization: Bearer <key> or x-api-key: <key>".into(),
    );
    match Shape::of(&req) {
        Shape::OpenAi => OpenAiError(error).into_response(),
        Shape::Anthropic => AnthropicError(error).into_response(),
        Shape::Neutral => error.into_response(),
    }
}

/// Requires the admin token on the admin routes; without one configured,
/// the admin routes do not exist.
pub(crate) async fn admin_auth(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.admin_token else {
        return ApiError::NotFound(format!(
            "no endpoint at {} (set UNDERSTUDY_ADMIN_TOKEN to enable the admin API)",
            req.uri().path()
        ))
        .into_response();
    };
    if bearer(&req).is_some_and(|given| constant_time_eq(token.expose(), given)) {
        next.run(req).await
    } else {
        ApiError::Unauthorized("the admin token is required: Authorization: Bearer <token>".into())
            .into_response()
    }
}

fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn x_api_key(req: &Request) -> Option<&str> {
    Some(req.headers().get("x-api-key")?.to_str().ok()?.trim())
}

/// The shape a route's errors take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Neutral,
    OpenAi,
    Anthropic,
}

impl Shape {
    /// The Messages routes, and `/v1/models` asked with an
    /// `anthropic-version` header, answer in Anthropic's shape; the other
    /// OpenAI-compatible routes in OpenAI's.
    pub(crate) fn of(req: &Request) -> Self {
        let path = req.uri().path();
        let anthropic_models =
            path == "/v1/models" && req.headers().contains_key("anthropic-version");
        if path == "/v1/messages" || path.starts_with("/v1/messages/") || anthropic_models {
            Self::Anthropic
        } else if path == "/v1/chat/completions" || path == "/v1/models" {
            Self::OpenAi
        } else {
            Self::Neutral
        }
    }
}

/// Compares without an early exit, so the time taken does not tell how
/// much of a guessed key was right. (The length is not secret.)
fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| std::hint::black_box(acc | (x ^ y)))
        == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn constant_time_eq() {
        assert!(super::constant_time_eq("abcdefgh", "abcdefgh"));
        assert!(!super::constant_time_eq("abcdefgh", "abcdefgX"));
        assert!(!super::constant_time_eq("abcdefgh", "abcdefg"));
        assert!(!super::constant_time_eq("", "a"));
    }
}
