//! Anthropic's Messages API at the HTTP edge: `POST /v1/messages` and
//! `/v1/messages/count_tokens` (every path under `/v1/messages/` answers in
//! its shape), the `x-api-key` key (or a bearer token), the model list an
//! `anthropic-version` header asks for at `GET /v1/models`, and Anthropic's
//! error shape `{"type": "error", "error": {"type", "message"}}` with
//! Anthropic's statuses.

use http::Method;
use serde_json::{Value, json};
use understudy_core::tenants::ClientRefusal;
use understudy_core::{Error, FailureCode, Protocol};

use super::error::{WireErrorEnvelope, error_type, status_of};
use crate::endpoint::{Endpoint, Envelope, Fault, Key, Metered, Model, Route};

/// The Messages front end's edge.
#[derive(Debug)]
pub struct Messages;

/// `POST /v1/messages`.
pub const MESSAGES: Route = Route {
    method: Method::POST,
    path: "/v1/messages",
};

/// `POST /v1/messages/count_tokens`.
pub const COUNT_TOKENS: Route = Route {
    method: Method::POST,
    path: "/v1/messages/count_tokens",
};

/// The header Anthropic's SDKs and Claude Code send with every request.
pub const VERSION: &str = "anthropic-version";

/// The header that switches betas on (sent more than once by Claude Code).
pub const BETA: &str = "anthropic-beta";

/// The protocol headers a native body is forwarded with.
pub const NATIVE_HEADERS: [&str; 2] = [VERSION, BETA];

impl Endpoint for Messages {
    const PROTOCOL: Protocol = Protocol::Messages;
    const ROUTES: &'static [Route] = &[MESSAGES, COUNT_TOKENS];
    const PREFIXES: &'static [&'static str] = &["/v1/messages/"];
    // Claude Code's ANTHROPIC_API_KEY, or ANTHROPIC_AUTH_TOKEN as a bearer.
    const KEYS: &'static [Key] = &[Key::Header("x-api-key"), Key::Bearer];
    const MODEL_MARKS: Option<&'static [Key]> = Some(&[Key::Header(VERSION)]);
    const METERED: Metered = Metered::Except(&["/count_tokens"]);

    fn envelope(fault: &Fault<'_>) -> Envelope {
        let (status, kind) = status_and_type(fault);
        Envelope::json(status, &WireErrorEnvelope::new(kind, fault.message))
    }

    /// `{"data": [{"type": "model", "id", "display_name", "created_at"}],
    /// "has_more", "first_id", "last_id"}`, all on one page; `created_at`
    /// is the epoch, as `created` is 0 in OpenAI's list.
    fn model_list(models: &[Model<'_>]) -> Value {
        let data: Vec<Value> = models
            .iter()
            .map(|m| {
                json!({"type": "model", "id": m.id, "display_name": m.display, "created_at": "1970-01-01T00:00:00Z"})
            })
            .collect();
        json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| m.id),
            "last_id": models.last().map(|m| m.id),
        })
    }
}

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
pub fn status_and_type(fault: &Fault<'_>) -> (u16, &'static str) {
    let Some(e) = fault.engine else {
        return (fault.status, error_type(fault.status));
    };
    let kind = match e {
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
    };
    // The status is the one Anthropic gives the type.
    (status_of(kind), kind)
}
