//! The one place where errors become HTTP responses: the neutral API's
//! `{"error": {"code", "message", "attempts"}}`, or a front end's own shape
//! ([`InShape`]), which its protocol's `Endpoint` writes from the same
//! [`Fault`] (OpenAI's, Anthropic's with Anthropic's statuses, Google's).
//! Never a 500 for anything a client did.

use std::marker::PhantomData;

use axum::Json;
use axum::http::StatusCode;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use understudy_core::tenants::ClientRefusal;
use understudy_types::{Attempt, Error, FailureCode, Protocol};
use understudy_wire::chat_completions::endpoint::ChatCompletionsEdge;
use understudy_wire::endpoint::{Endpoint, Envelope, Fault};
use understudy_wire::front_ends::edge;
use understudy_wire::generate_content::endpoint::GenerateContentEdge;
use understudy_wire::messages::endpoint::MessagesEdge;

/// An error on its way to the client (rendered in the neutral shape; wrap
/// it in [`InShape`] for a front end's routes).
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

/// The same error in a front end's shape, as its [`Endpoint`] writes it.
pub struct InShape<E>(pub ApiError, PhantomData<E>);

/// The same error in OpenAI's shape.
pub type OpenAiError = InShape<ChatCompletionsEdge>;

/// The same error in Anthropic's shape, for `/v1/messages`.
pub type AnthropicError = InShape<MessagesEdge>;

/// The same error in Google's shape (`{"error": {"code", "message",
/// "status"}}`), for the Gemini API.
pub type GeminiError = InShape<GenerateContentEdge>;

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
                Error::InvalidRequest { .. } | Error::ContextTooLong { .. } => {
                    StatusCode::BAD_REQUEST
                }
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

// === impl InShape ===

impl<E> std::fmt::Debug for InShape<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InShape").field(&self.0).finish()
    }
}

impl<E, T: Into<ApiError>> From<T> for InShape<E> {
    fn from(e: T) -> Self {
        Self(e.into(), PhantomData)
    }
}

impl<E: Endpoint> IntoResponse for InShape<E> {
    fn into_response(self) -> Response {
        enveloped(E::envelope, self.0)
    }
}

/// `error` in `api`'s error shape (`None`, or a protocol no front end
/// speaks: the neutral API's).
pub(crate) fn error_in(api: Option<Protocol>, error: ApiError) -> Response {
    match api.and_then(edge) {
        Some(edge) => enveloped(edge.envelope, error),
        None => error.into_response(),
    }
}

/// `error` as `envelope` writes it, with the headers a client's SDK acts
/// on.
fn enveloped(envelope: fn(&Fault<'_>) -> Envelope, error: ApiError) -> Response {
    let (code, message, param, _) = error.parts();
    let engine = match &error {
        ApiError::Engine(e) => Some(e),
        _ => None,
    };
    let fault = Fault {
        status: error.status().as_u16(),
        code: &code,
        message: &message,
        param: param.as_deref(),
        engine,
    };
    let Envelope { status, body } = envelope(&fault);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    tracing::info!(status = status.as_u16(), %code, detail = %message, "request failed");
    let mut response = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    client_headers(&error, &mut response);
    response
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
