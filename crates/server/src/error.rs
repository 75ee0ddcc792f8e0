//! The one place where errors become HTTP responses, in four shapes: the
//! neutral API's `{"error": {"code", "message", "attempts"}}`, the
//! OpenAI-compatible `{"error": {"message", "type", "param", "code"}}` and
//! Anthropic's `{"type": "error", "error": {"type", "message"}}` (with
//! Anthropic's statuses, see [`AnthropicError::status_and_type`]) and
//! Google's `{"error": {"code", "message", "status"}}` ([`GeminiError`]).
//! Never a 500 for anything a client did.

use axum::Json;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use understudy_core::tenants::ClientRefusal;
use understudy_types::{Attempt, Error, FailureCode};
use understudy_wire::messages::error::{WireErrorEnvelope, error_type, status_of};

/// An error on its way to the client (rendered in the neutral shape; wrap
/// it in [`OpenAiError`] for the OpenAI-compatible routes).
#[derive(Debug)]
pub enum ApiError {
    /// The request itself is wrong; `field` is the offending parameter.
    Invalid {
        field: String,
        message: String,
    },
    /// A request-level engine error.
    Engine(Error),
    /// The body could not be read (too large, not UTF-8…).
    Body {
        status: StatusCode,
        message: String,
    },
    NotFound(String),
    /// `previous_response_id` names no response this client key stored:
    /// OpenAI's 400 `previous_response_not_found` (clients key their
    /// recovery, a resend of the whole conversation, on that code).
    PreviousResponseNotFound(String),
    /// The `model` names no route and no provider.
    ModelNotFound(String),
    /// A missing or wrong client key (or admin token).
    Unauthorized(String),
    /// A refusal the policy surfaced that the provider gave as an HTTP
    /// error (a 400 content-policy error): the client gets its API's error
    /// with that status, streamed or not, rather than an answer.
    Refused {
        status: StatusCode,
        message: String,
        attempts: Vec<Attempt>,
    },
}

/// The same error in OpenAI's shape.
#[derive(Debug)]
pub struct OpenAiError(pub ApiError);

/// The same error in Anthropic's shape, for `/v1/messages`.
#[derive(Debug)]
pub struct AnthropicError(pub ApiError);

/// The same error in Google's shape (`{"error": {"code", "message",
/// "status"}}`), for the Gemini API.
#[derive(Debug)]
pub struct GeminiError(pub ApiError);

// === impl ApiError ===

impl ApiError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Invalid { .. } | Self::PreviousResponseNotFound(_) => StatusCode::BAD_REQUEST,
            Self::Body { status, .. } | Self::Refused { status, .. } => *status,
            Self::NotFound(_) | Self::ModelNotFound(_) => StatusCode::NOT_FOUND,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Engine(e) => match e {
                Error::Client(r) => client_status(r),
                Error::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
                Error::UnknownProvider(_) | Error::UnknownRoute(_) | Error::UnknownModel(_) => {
                    StatusCode::NOT_FOUND
                }
                Error::NoProviderAvailable(_) | Error::FallbackBudgetExceeded { .. } => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                Error::Refused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
                Error::DeadlineExceeded { .. } => StatusCode::GATEWAY_TIMEOUT,
                Error::ProvidersFailed {
                    code: FailureCode::RateLimited,
                    ..
                } => StatusCode::TOO_MANY_REQUESTS,
                Error::ProvidersFailed { .. } => StatusCode::BAD_GATEWAY,
                Error::Engine(_) => StatusCode::SERVICE_UNAVAILABLE,
            },
        }
    }

    /// `(code, message, param, attempts)`.
    fn parts(&self) -> (String, String, Option<String>, &[Attempt]) {
        match self {
            Self::Invalid { field, message } => (
                "invalid_request".into(),
                format!("{field}: {message}"),
                Some(field.clone()),
                &[],
            ),
            Self::Body { message, .. } => ("invalid_request".into(), message.clone(), None, &[]),
            Self::NotFound(message) => ("not_found".into(), message.clone(), None, &[]),
            Self::PreviousResponseNotFound(id) => (
                "previous_response_not_found".into(),
                format!("Previous response with id '{id}' not found."),
                Some("previous_response_id".into()),
                &[],
            ),
            Self::ModelNotFound(model) => (
                "model_not_found".into(),
                format!(
                    "the model `{model}` names no route and no provider; GET /v1/models lists them"
                ),
                Some("model".into()),
                &[],
            ),
            Self::Unauthorized(message) => ("invalid_api_key".into(), message.clone(), None, &[]),
            Self::Refused {
                message, attempts, ..
            } => ("content_filter".into(), message.clone(), None, attempts),
            Self::Engine(Error::InvalidRequest { field, message }) => (
                "invalid_request".into(),
                format!("{field}: {message}"),
                Some((*field).to_owned()),
                &[],
            ),
            Self::Engine(Error::Client(r)) => (client_code(r).into(), r.to_string(), None, &[]),
            Self::Engine(e @ (Error::UnknownProvider(_) | Error::UnknownRoute(_))) => {
                ("not_found".into(), e.to_string(), Some("model".into()), &[])
            }
            Self::Engine(e) => {
                if let Error::Engine(detail) = e {
                    tracing::warn!(%detail, "the engine could not take a request");
                }
                (
                    e.code().as_str().to_owned(),
                    e.client_message(),
                    None,
                    e.attempts(),
                )
            }
        }
    }
}

impl From<understudy_wire::Invalid> for ApiError {
    fn from(e: understudy_wire::Invalid) -> Self {
        match e.field {
            Some(field) => Self::Invalid {
                field,
                message: e.message,
            },
            None => Self::Body {
                status: StatusCode::BAD_REQUEST,
                message: e.message,
            },
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::UnknownModel(model) => Self::ModelNotFound(model),
            e => Self::Engine(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (code, message, _, attempts) = self.parts();
        tracing::info!(status = status.as_u16(), %code, detail = %message, "request failed");
        let body = json!({"error": {"code": code, "message": message, "attempts": attempts}});
        let mut response = (status, Json(body)).into_response();
        client_headers(&self, &mut response);
        response
    }
}

// === impl OpenAiError ===

impl<E: Into<ApiError>> From<E> for OpenAiError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let status = self.0.status();
        let (mut code, message, param, _) = self.0.parts();
        if matches!(
            self.0,
            ApiError::Engine(Error::UnknownProvider(_) | Error::UnknownRoute(_))
        ) {
            code = "model_not_found".into();
        }
        tracing::info!(status = status.as_u16(), %code, detail = %message, "request failed");
        let kind = match &self.0 {
            ApiError::Engine(Error::Client(r)) => match r {
                ClientRefusal::Requests { .. } => "requests",
                ClientRefusal::Tokens { .. } | ClientRefusal::TooLarge { .. } => "tokens",
                ClientRefusal::Budget { .. } => "insufficient_quota",
                _ => understudy_wire::chat_completions::error::error_type(status.as_u16()),
            },
            _ => understudy_wire::chat_completions::error::error_type(status.as_u16()),
        };
        let body =
            json!({"error": {"message": message, "type": kind, "param": param, "code": code}});
        let mut response = (status, Json(body)).into_response();
        client_headers(&self.0, &mut response);
        response
    }
}

// === impl AnthropicError ===

impl AnthropicError {
    /// Anthropic's status and error type. Anthropic's own statuses where
    /// the meaning matches (its errors page): 400 `invalid_request_error`,
    /// 401 `authentication_error`, 403 `permission_error`, 404
    /// `not_found_error`, 413 `request_too_large`, 429 `rate_limit_error`,
    /// 500 `api_error`, 504 `timeout_error`, 529 `overloaded_error`. When
    /// every target failed, the last failure decides: an outage (5xx, 529,
    /// connection) is 529, so Anthropic clients back off and retry as they
    /// do for Anthropic's own overload; a timeout or the request deadline
    /// is 504; a rate limit 429; an upstream 400, context length, a target
    /// lacking a capability or a content filter 400 (Anthropic's own
    /// "Output blocked by content filtering policy" is a 400); anything
    /// else (upstream auth or quota, answers that are not the protocol) is
    /// 500. A spent fallback budget is 529 (the primary failed and nothing
    /// else may serve now); no available provider at all is 500.
    pub fn status_and_type(&self) -> (StatusCode, &'static str) {
        // The status is the one Anthropic gives the type.
        let typed = |kind: &'static str| {
            let status = StatusCode::from_u16(status_of(kind));
            (status.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), kind)
        };
        let kind = match &self.0 {
            ApiError::Engine(e) => match e {
                Error::Client(r) => match r {
                    ClientRefusal::Budget { .. } => "billing_error",
                    ClientRefusal::Model { .. } => "permission_error",
                    ClientRefusal::Expired => "authentication_error",
                    _ => "rate_limit_error",
                },
                Error::ProvidersFailed { code, .. } => match code {
                    FailureCode::RateLimited => "rate_limit_error",
                    FailureCode::Unavailable | FailureCode::Connection => "overloaded_error",
                    FailureCode::Timeout | FailureCode::DeadlineExceeded => "timeout_error",
                    FailureCode::BadRequest
                    | FailureCode::ContextLength
                    | FailureCode::Unsupported
                    | FailureCode::ContentFilter
                    | FailureCode::InvalidRequest => "invalid_request_error",
                    _ => "api_error",
                },
                Error::DeadlineExceeded { .. } => "timeout_error",
                Error::FallbackBudgetExceeded { .. } => "overloaded_error",
                Error::NoProviderAvailable(_) | Error::Engine(_) => "api_error",
                Error::Refused { .. } | Error::InvalidRequest { .. } => "invalid_request_error",
                Error::UnknownProvider(_) | Error::UnknownRoute(_) | Error::UnknownModel(_) => {
                    "not_found_error"
                }
            },
            other => {
                let status = other.status();
                return (status, error_type(status.as_u16()));
            }
        };
        typed(kind)
    }
}

impl<E: Into<ApiError>> From<E> for AnthropicError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_type();
        let (code, message, _, _) = self.0.parts();
        tracing::info!(status = status.as_u16(), %code, detail = %message, "request failed");
        let mut response = (status, Json(WireErrorEnvelope::new(kind, &message))).into_response();
        client_headers(&self.0, &mut response);
        response
    }
}

// === impl GeminiError ===

impl GeminiError {
    /// Google's status for the error. When every target failed, the last
    /// failure decides, as Google's clients read it: an outage (5xx,
    /// connection) is 503 `UNAVAILABLE` and a rate limit 429
    /// `RESOURCE_EXHAUSTED` (the Gemini CLI and the SDKs retry both), a
    /// timeout or the deadline 504 `DEADLINE_EXCEEDED`, anything the
    /// request caused (an upstream 400, context length, a missing
    /// capability, a content filter) 400 `INVALID_ARGUMENT`, anything else
    /// 500 `INTERNAL`. A spent fallback budget or no available provider is
    /// 503.
    pub fn status(&self) -> StatusCode {
        let code = match &self.0 {
            ApiError::Engine(e) => match e {
                Error::Client(r) => client_status(r).as_u16(),
                Error::ProvidersFailed { code, .. } => {
                    understudy_wire::generate_content::answer::status_of(*code)
                }
                Error::DeadlineExceeded { .. } => 504,
                Error::FallbackBudgetExceeded { .. } | Error::NoProviderAvailable(_) => 503,
                Error::Engine(_) => 500,
                Error::Refused { .. } | Error::InvalidRequest { .. } => 400,
                Error::UnknownProvider(_) | Error::UnknownRoute(_) | Error::UnknownModel(_) => 404,
            },
            other => other.status().as_u16(),
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl<E: Into<ApiError>> From<E> for GeminiError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for GeminiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (code, message, _, _) = self.0.parts();
        tracing::info!(status = status.as_u16(), %code, detail = %message, "request failed");
        let mut body =
            understudy_wire::generate_content::answer::error_body(status.as_u16(), &message);
        if let ApiError::Engine(Error::Client(ClientRefusal::Budget { .. })) = &self.0 {
            // Google has no 402 of its own: a spent quota is its
            // RESOURCE_EXHAUSTED.
            body["error"]["status"] = "RESOURCE_EXHAUSTED".into();
        }
        let mut response = (status, Json(body)).into_response();
        client_headers(&self.0, &mut response);
        response
    }
}

// === client records' refusals ===

/// The status of a client record's refusal: over `rpm` or `tpm` 429, over
/// budget 402 (no SDK retries it), a model outside `models` 403, expired
/// 401.
fn client_status(r: &ClientRefusal) -> StatusCode {
    match r {
        ClientRefusal::Requests { .. }
        | ClientRefusal::Tokens { .. }
        | ClientRefusal::TooLarge { .. } => StatusCode::TOO_MANY_REQUESTS,
        ClientRefusal::Budget { .. } => StatusCode::PAYMENT_REQUIRED,
        ClientRefusal::Model { .. } => StatusCode::FORBIDDEN,
        ClientRefusal::Expired => StatusCode::UNAUTHORIZED,
    }
}

/// The error code of a client record's refusal (OpenAI's words where it
/// has them).
fn client_code(r: &ClientRefusal) -> &'static str {
    match r {
        ClientRefusal::Requests { .. } | ClientRefusal::Tokens { .. } => "rate_limit_exceeded",
        ClientRefusal::TooLarge { .. } => "request_too_large",
        ClientRefusal::Budget { .. } => "insufficient_quota",
        ClientRefusal::Model { .. } => "model_not_allowed",
        ClientRefusal::Expired => "expired_api_key",
    }
}

/// What a client's SDK acts on: a rate limit's `Retry-After` (whole
/// seconds, rounded up) and `retry-after-ms`; `x-should-retry: false` where
/// waiting a minute does not help (a spent budget, a request larger than
/// the whole `tpm`), so that no SDK sends it again.
fn client_headers(e: &ApiError, response: &mut Response) {
    let ApiError::Engine(Error::Client(r)) = e else {
        return;
    };
    let headers = response.headers_mut();
    match r.retry_after() {
        Some(wait) => {
            let ms = wait.as_millis().max(1);
            let secs = ms.div_ceil(1000);
            if let Ok(v) = HeaderValue::try_from(secs.to_string()) {
                headers.insert("retry-after", v);
            }
            if let Ok(v) = HeaderValue::try_from(ms.to_string()) {
                headers.insert("retry-after-ms", v);
            }
        }
        None if matches!(
            r,
            ClientRefusal::Budget { .. } | ClientRefusal::TooLarge { .. }
        ) =>
        {
            headers.insert("x-should-retry", HeaderValue::from_static("false"));
        }
        None => {}
    }
}
