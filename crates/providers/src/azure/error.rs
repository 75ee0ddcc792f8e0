//! Azure OpenAI's errors, read on top of OpenAI's table
//! (`understudy_wire::chat_completions::error`), which already knows
//! Azure's content filter (`error.code` `content_filter`, or
//! `innererror.code` `ResponsibleAIPolicyViolation` / `ContentFiltered`:
//! a refusal) and its "retry after N seconds" text.
//!
//! - `DeploymentNotFound` is a configuration mistake (almost always the
//!   model's name where the deployment's belongs): a bad request, which
//!   falls back at once and never trips the breaker, and a warning that
//!   says what to fix.
//! - A 429's wait, in Azure's order: `retry-after-ms`,
//!   `x-ms-retry-after-ms`, `Retry-After`, then `x-ratelimit-reset-tokens`
//!   (seconds; Azure at times sends only that), then the message's text.
//!   A daily quota's "retry after 86400 seconds" is longer than any
//!   `rate_limit_max_wait`, so the plan falls back instead of waiting.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use understudy_types::{Failure, FailureKind};
use understudy_wire::classify;

/// The reset headers Azure has sent with a 429 and no `Retry-After`.
const RESET_HEADERS: [&str; 2] = ["x-ratelimit-reset-tokens", "x-rate-limit-reset-tokens"];

/// Classifies an Azure OpenAI error status with its body; `provider` names
/// the provider in the warning a missing deployment gets.
pub(crate) fn classify_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
) -> Failure {
    let mut failure =
        understudy_wire::chat_completions::error::classify_error(status, headers, body);
    if error_code(body).as_deref() == Some("DeploymentNotFound") {
        tracing::warn!(
            provider,
            status,
            "Azure OpenAI has no deployment of this name: `model` must name the deployment \
             (as the Azure portal lists it), not the model it serves"
        );
        failure.kind = FailureKind::BadRequest;
        failure.detail = format!(
            "the deployment does not exist (`model` must be the deployment's name): {}",
            failure.detail
        );
        return failure;
    }
    if let FailureKind::RateLimited { retry_after } = &mut failure.kind {
        if classify::retry_after(headers, SystemTime::now()).is_none() {
            if let Some(reset) = reset_tokens(headers) {
                *retry_after = Some(reset);
            }
        }
    }
    failure
}

/// `error.code` of an OpenAI-style error body (a string on Azure: "429",
/// "content_filter", "DeploymentNotFound").
fn error_code(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("error")?.get("code")?.as_str().map(str::to_owned)
}

/// `x-ratelimit-reset-tokens` in seconds (`55`), or as OpenAI writes it
/// (`6m0s`).
fn reset_tokens(headers: &HeaderMap) -> Option<Duration> {
    let value = RESET_HEADERS
        .iter()
        .find_map(|name| headers.get(*name)?.to_str().ok())?
        .trim();
    match value.parse::<f64>() {
        Ok(secs) => {
            (secs.is_finite() && (0.0..1e9).contains(&secs)).then(|| Duration::from_secs_f64(secs))
        }
        Err(_) => understudy_wire::go_duration::parse(value),
    }
}
