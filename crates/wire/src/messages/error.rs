//! Anthropic's error objects, `{"type":"error","error":{"type","message"}}`,
//! both ways: a provider's classified into a [`FailureKind`] (in an error
//! body or mid-stream), and the one written for a client (an error
//! response, and the `error` event that ends a broken stream). One table of
//! error types and their statuses serves both.

use std::time::SystemTime;

use http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_types::{Failure, FailureKind};

use crate::classify;

/// Anthropic's error types and the HTTP status each stands for (its errors
/// page).
const ERROR_TYPES: &[(&str, u16)] = &[
    ("invalid_request_error", 400),
    ("authentication_error", 401),
    ("billing_error", 402),
    ("permission_error", 403),
    ("not_found_error", 404),
    ("request_too_large", 413),
    ("rate_limit_error", 429),
    ("api_error", 500),
    ("timeout_error", 504),
    ("overloaded_error", 529),
];

/// The HTTP status an error type stands for (for errors inside a stream,
/// and for the statuses the gateway answers with); 500 for one unknown.
pub fn status_of(kind: &str) -> u16 {
    ERROR_TYPES
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(500, |(_, status)| *status)
}

/// The error type for a client error's status that no engine error
/// decided: the type of that status, `api_error` for any other 5xx, else
/// `invalid_request_error`.
pub fn error_type(status: u16) -> &'static str {
    match ERROR_TYPES.iter().find(|(_, s)| *s == status) {
        Some((kind, _)) => kind,
        None if status >= 500 => "api_error",
        None => "invalid_request_error",
    }
}

/// Classifies `{"type":"error","error":{"type","message"}}`; `status` is the
/// HTTP status, or the one the error type implies mid-stream.
pub fn classify_error_object(status: u16, headers: &HeaderMap, error: &WireError) -> Failure {
    let kind_field = error.kind.as_deref().unwrap_or_default();
    let message = error.message.as_deref().unwrap_or_default();
    let lower = message.to_ascii_lowercase();
    let spend_limit = error
        .details
        .as_ref()
        .and_then(|d| d.get("error_code"))
        .and_then(Value::as_str)
        .is_some_and(|c| c == "enforced_spend_limit_reached");
    let kind = match (kind_field, status) {
        ("invalid_request_error", _) | (_, 400)
            if lower.contains("content filtering") || lower.contains("blocked") =>
        {
            FailureKind::ContentFilter
        }
        ("authentication_error" | "permission_error", _) | (_, 401 | 403) => FailureKind::Auth,
        ("billing_error", _) | (_, 402) => FailureKind::QuotaExceeded,
        ("rate_limit_error", _) | (_, 429) if spend_limit => FailureKind::QuotaExceeded,
        ("rate_limit_error", _) | (_, 429) => FailureKind::RateLimited {
            retry_after: classify::retry_after(headers, SystemTime::now()),
        },
        ("overloaded_error" | "api_error", _) | (_, 500 | 529) => FailureKind::Unavailable {
            retry_after: classify::retry_after(headers, SystemTime::now()),
        },
        ("timeout_error", _) | (_, 504) => FailureKind::Timeout,
        ("request_too_large", _) | (_, 413) => FailureKind::BadRequest,
        _ if lower.contains("prompt is too long") || lower.contains("exceed context limit") => {
            FailureKind::ContextLength
        }
        _ => classify::hinted(classify::status(status), headers, SystemTime::now()),
    };
    Failure::new(
        kind,
        if kind_field.is_empty() {
            message.to_owned()
        } else {
            format!("{kind_field}: {message}")
        },
    )
    .with_status(status)
}

/// An error object inside a stream: classified by the status its type
/// implies, with no HTTP status of its own.
pub(super) fn stream_error(error: &WireError) -> Failure {
    let mut f = classify_error_object(
        status_of(error.kind.as_deref().unwrap_or_default()),
        &HeaderMap::new(),
        error,
    );
    f.status = None;
    f
}

/// A raw JSON error (no SSE framing) inside a stream.
pub(super) fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(value.get("error")?.clone()).ok()?;
    Some(stream_error(&error))
}

/// An error body, as a provider sends it and as the gateway writes one:
/// `{"type":"error","error":{"type","message"}}`.
#[derive(Debug, Deserialize, Serialize)]
pub struct WireErrorEnvelope {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    pub error: Option<WireError>,
}

/// The `error` of an error body.
#[derive(Debug, Deserialize, Serialize, Default)]
pub struct WireError {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Value>,
}

impl WireErrorEnvelope {
    /// The body of an error of type `kind`, for a client.
    pub fn new(kind: &str, message: &str) -> Self {
        Self {
            kind: Some("error".to_owned()),
            error: Some(WireError {
                kind: Some(kind.to_owned()),
                message: Some(message.to_owned()),
                details: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn classify(status: u16, retry_after: Option<&str>, body: &str) -> FailureKind {
        let mut headers = HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert("retry-after", v.parse().unwrap());
        }
        let envelope: WireErrorEnvelope = serde_json::from_str(body).unwrap();
        classify_error_object(status, &headers, &envelope.error.unwrap()).kind
    }

    #[test]
    fn an_overload_keeps_the_wait_it_asks_for() {
        let overloaded =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let api = r#"{"type":"error","error":{"type":"api_error","message":"Internal"}}"#;
        let rate = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#;
        let cases = [
            (529, Some("2"), overloaded, Some(Duration::from_secs(2))),
            (529, None, overloaded, None),
            (500, Some("1"), api, Some(Duration::from_secs(1))),
        ];
        for (status, header, body, want) in cases {
            assert_eq!(
                classify(status, header, body),
                FailureKind::Unavailable { retry_after: want },
                "{status} {header:?}"
            );
        }
        assert_eq!(
            classify(429, Some("3"), rate),
            FailureKind::RateLimited {
                retry_after: Some(Duration::from_secs(3))
            }
        );
    }
}
