//! Anthropic's error objects (`{"type":"error","error":{"type","message"}}`)
//! classified into a [`FailureKind`], in an error body or mid-stream.

use std::time::SystemTime;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use understudy_core::{Failure, FailureKind};

use crate::classify;

/// Classifies `{"type":"error","error":{"type","message"}}`; `status` is the
/// HTTP status, or the one the error type implies mid-stream.
pub(super) fn classify_error_object(
    status: u16,
    headers: &HeaderMap,
    error: &WireError,
) -> Failure {
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
        ("overloaded_error" | "api_error", _) | (_, 500 | 529) => FailureKind::Unavailable,
        ("timeout_error", _) | (_, 504) => FailureKind::Timeout,
        ("request_too_large", _) | (_, 413) => FailureKind::BadRequest,
        _ if lower.contains("prompt is too long") => FailureKind::ContextLength,
        _ => classify::status(status),
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

/// The HTTP status an error type stands for, for errors inside a stream.
pub(super) fn status_of(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

pub(super) fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(value.get("error")?.clone()).ok()?;
    let mut f = classify_error_object(
        status_of(error.kind.as_deref().unwrap_or_default()),
        &HeaderMap::new(),
        &error,
    );
    f.status = None;
    Some(f)
}

#[derive(Deserialize)]
pub(super) struct WireErrorEnvelope {
    pub(super) error: Option<WireError>,
}

#[derive(Deserialize, Default)]
pub(super) struct WireError {
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    message: Option<String>,
    details: Option<Value>,
}
