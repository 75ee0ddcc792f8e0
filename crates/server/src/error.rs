//! The one place where errors become HTTP responses: `{"error": {"code",
//! "message", "attempts"}}` with a fitting status, never a 500 for anything
//! a client or an upstream did.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use understudy_core::{Attempt, Error, FailureCode};

/// An error on its way to the client.
#[derive(Debug)]
pub enum ApiError {
    /// The request itself is wrong.
    Invalid {
        field: &'static str,
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
}

impl ApiError {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            message: message.into(),
        }
    }

    /// The HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Invalid { .. } => StatusCode::BAD_REQUEST,
            Self::Body { status, .. } => *status,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Engine(e) => match e {
                Error::InvalidRequest { .. } => StatusCode::BAD_REQUEST,
                Error::UnknownProvider(_) | Error::UnknownRoute(_) => StatusCode::NOT_FOUND,
                Error::NoProviderAvailable(_) => StatusCode::SERVICE_UNAVAILABLE,
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

    fn parts(&self) -> (String, String, &[Attempt]) {
        match self {
            Self::Invalid { field, message } => {
                ("invalid_request".into(), format!("{field}: {message}"), &[])
            }
            Self::Body { message, .. } => ("invalid_request".into(), message.clone(), &[]),
            Self::NotFound(message) => ("not_found".into(), message.clone(), &[]),
            Self::Engine(Error::InvalidRequest { field, message }) => {
                ("invalid_request".into(), format!("{field}: {message}"), &[])
            }
            Self::Engine(e) => (e.code().as_str().to_owned(), e.to_string(), e.attempts()),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self::Engine(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (code, message, attempts) = self.parts();
        tracing::info!(status = status.as_u16(), %code, %message, "request failed");
        let body = json!({"error": {"code": code, "message": message, "attempts": attempts}});
        (status, Json(body)).into_response()
    }
}
