//! What Vertex's errors mean. Two shapes come back:
//! Google's `google.rpc.Status` (`{"error":{"code","message","status",
//! "details"}}`, for Claude often inside a one-element JSON array) for
//! auth, quota and the platform's own refusals, and Anthropic's
//! (`{"type":"error","error":{"type","message"}}`) from the model.
//!
//! Google's statuses mean more here than on AI Studio:
//! - `UNAUTHENTICATED` (401, `ACCESS_TOKEN_EXPIRED`): the token; the
//!   adapter fetches another once, then fails over.
//! - `RESOURCE_EXHAUSTED` with a retry hint (`RetryInfo.retryDelay`, a
//!   `Retry-After`) is a rate limit; without one it is the account's quota
//!   (a new project's quota is often 0), which no wait brings back.
//! - `FAILED_PRECONDITION` ("Project … is not allowed to use Publisher
//!   Model …"): the model is not enabled in Model Garden, a configuration
//!   error, logged as one, that falls back (`auth`, not `bad_request`:
//!   another provider can serve the same request).
//! - Any 5xx, 529 included, is `unavailable`.

use std::time::SystemTime;

use reqwest::header::HeaderMap;
use serde_json::Value;
use understudy_types::{Failure, FailureKind};
use understudy_wire::generate_content::error::{WireError, classify_error_object, error_of};
use understudy_wire::messages::error::WireErrorEnvelope;

/// The prefix of an expired-token failure's detail.
pub(crate) const UNAUTHENTICATED: &str = "UNAUTHENTICATED";

/// An error answer (any status but 2xx) as a failure.
pub(crate) fn classify(status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let google = value.as_ref().and_then(error_of).filter(|e| {
        e.get("status").is_some_and(Value::is_string) || e.get("code").is_some_and(Value::is_u64)
    });
    if let Some(error) = google {
        if let Ok(error) = serde_json::from_value::<WireError>(error.clone()) {
            return google_error(status, headers, &error, error_fields(value.as_ref()));
        }
    }
    if status == 401 {
        return Failure::new(FailureKind::Auth, format!("{UNAUTHENTICATED}: 401")).with_status(401);
    }
    if let Ok(WireErrorEnvelope {
        error: Some(error), ..
    }) = serde_json::from_slice::<WireErrorEnvelope>(body)
    {
        let mut f =
            understudy_wire::messages::error::classify_error_object(status, headers, &error);
        if status >= 500 {
            f.kind = understudy_wire::classify::hinted(
                FailureKind::Unavailable { retry_after: None },
                headers,
                SystemTime::now(),
            );
        }
        return f;
    }
    crate::classify::unreadable(status, headers, body)
}

/// The rpc status name and whether the details hold a `RetryInfo`.
fn error_fields(value: Option<&Value>) -> (String, bool) {
    let error = value.and_then(error_of);
    let rpc = error
        .and_then(|e| e.get("status"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let retry_info = error
        .and_then(|e| e.get("details"))
        .and_then(Value::as_array)
        .is_some_and(|details| {
            details.iter().any(|d| {
                d.get("@type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("RetryInfo"))
            })
        });
    (rpc, retry_info)
}

fn google_error(
    status: u16,
    headers: &HeaderMap,
    error: &WireError,
    (rpc, retry_info): (String, bool),
) -> Failure {
    let mut f = classify_error_object(Some(status), headers, error);
    match rpc.as_str() {
        _ if status == 401 || rpc == UNAUTHENTICATED => {
            f.kind = FailureKind::Auth;
            if !f.detail.starts_with(UNAUTHENTICATED) {
                f.detail = format!("{UNAUTHENTICATED}: {}", f.detail);
            }
        }
        "FAILED_PRECONDITION" => {
            tracing::error!(
                detail = %f.detail,
                "Vertex refused the model for this project: enable it in Model Garden (or fix the project and region); falling back"
            );
            f.kind = FailureKind::Auth;
        }
        "RESOURCE_EXHAUSTED" => {
            let header =
                understudy_wire::classify::retry_after(headers, SystemTime::now()).is_some();
            if !retry_info && !header {
                f.kind = FailureKind::QuotaExceeded;
            }
        }
        _ if status >= 500 => {
            f.kind = understudy_wire::classify::hinted(
                FailureKind::Unavailable { retry_after: None },
                headers,
                SystemTime::now(),
            );
        }
        _ => {}
    }
    f
}

/// Whether `failure` says the access token is not (or no longer) good.
pub(crate) fn unauthenticated(failure: &Failure) -> bool {
    failure.kind == FailureKind::Auth && failure.detail.starts_with(UNAUTHENTICATED)
}
