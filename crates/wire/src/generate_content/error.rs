//! Gemini's errors: a `google.rpc.Status` object, in an error body (also
//! inside a one-element array) or mid-stream, classified into a
//! [`FailureKind`]. Gemini reports an invalid key as a 400
//! (`API_KEY_INVALID`), which is `auth`, not `bad_request`.

use std::time::SystemTime;

use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use understudy_types::{Failure, FailureKind};

use crate::classify;

/// HTTP statuses and the `google.rpc.Code` names Google's errors carry
/// with them, both ways (aip.dev/193, google/rpc/code.proto).
const STATUSES: [(u16, &str); 12] = [
    (400, "INVALID_ARGUMENT"),
    (401, "UNAUTHENTICATED"),
    (403, "PERMISSION_DENIED"),
    (404, "NOT_FOUND"),
    (409, "ABORTED"),
    (412, "FAILED_PRECONDITION"),
    (429, "RESOURCE_EXHAUSTED"),
    (499, "CANCELLED"),
    (500, "INTERNAL"),
    (501, "UNIMPLEMENTED"),
    (503, "UNAVAILABLE"),
    (504, "DEADLINE_EXCEEDED"),
];

/// The status name Google gives HTTP `code` (another client error is
/// `INVALID_ARGUMENT`, another server error `INTERNAL`).
pub fn status_name(code: u16) -> &'static str {
    match STATUSES.iter().find(|(c, _)| *c == code) {
        Some((_, name)) => name,
        None if code < 500 => "INVALID_ARGUMENT",
        None => "INTERNAL",
    }
}

/// The `error` object of a body, also inside a one-element array.
pub fn error_of(value: &Value) -> Option<&Value> {
    match value {
        Value::Array(items) if items.len() == 1 => items[0].get("error"),
        other => other.get("error"),
    }
}

/// Classifies a `google.rpc.Status` error object; `status` is the HTTP
/// status when there was one (not mid-stream).
pub fn classify_error_object(
    status: Option<u16>,
    headers: &HeaderMap,
    error: &WireError,
) -> Failure {
    let code = status.or(error.code).unwrap_or(500);
    let rpc = error.status.as_deref().unwrap_or_default();
    let message = error.message.as_deref().unwrap_or_default();
    let details = error.details.as_deref().unwrap_or_default();
    let reason_is = |want: &str| {
        details
            .iter()
            .any(|d| d.get("reason").and_then(Value::as_str) == Some(want))
    };
    let retry_delay = details
        .iter()
        .filter(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("RetryInfo"))
        })
        .find_map(|d| {
            d.get("retryDelay")
                .and_then(Value::as_str)
                .and_then(crate::go_duration::parse)
        });
    let per_day = details
        .iter()
        .filter_map(|d| d.get("violations").and_then(Value::as_array))
        .flatten()
        .any(|v| {
            v.get("quotaId")
                .and_then(Value::as_str)
                .is_some_and(|q| q.contains("PerDay"))
        });
    let lower = message.to_ascii_lowercase();
    let kind = if reason_is("API_KEY_INVALID")
        || matches!(code, 401 | 403)
        || matches!(rpc, "UNAUTHENTICATED" | "PERMISSION_DENIED")
    {
        FailureKind::Auth
    } else if code == 402 || rpc == "FAILED_PRECONDITION" {
        FailureKind::QuotaExceeded
    } else if code == 429 || rpc == "RESOURCE_EXHAUSTED" {
        if per_day {
            // A daily quota will not come back within any wait worth making.
            FailureKind::QuotaExceeded
        } else {
            FailureKind::RateLimited {
                retry_after: retry_delay
                    .or_else(|| classify::retry_after(headers, SystemTime::now())),
            }
        }
    } else if code == 504 || rpc == "DEADLINE_EXCEEDED" {
        FailureKind::Timeout
    } else if matches!(code, 500 | 502 | 503) || matches!(rpc, "INTERNAL" | "UNAVAILABLE") {
        FailureKind::Unavailable {
            retry_after: retry_delay.or_else(|| classify::retry_after(headers, SystemTime::now())),
        }
    } else if lower.contains("token count") && lower.contains("exceeds") {
        FailureKind::ContextLength
    } else {
        classify::status(code)
    };
    let detail = if rpc.is_empty() {
        message.to_owned()
    } else {
        format!("{rpc}: {message}")
    };
    let mut f = Failure::new(kind, detail);
    f.status = status;
    f
}

pub fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(error_of(value)?.clone()).ok()?;
    let mut f = classify_error_object(None, &HeaderMap::new(), &error);
    f.detail = format!("error mid-stream: {}", f.detail);
    Some(f)
}

#[derive(Debug, Deserialize)]
pub struct WireError {
    code: Option<u16>,
    message: Option<String>,
    status: Option<String>,
    details: Option<Vec<Value>>,
}
