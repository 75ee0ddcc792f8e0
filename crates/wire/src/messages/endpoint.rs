//! Anthropic's Messages API at the HTTP edge: `POST /v1/messages` and
//! `/v1/messages/count_tokens` (every path under `/v1/messages/` answers in
//! its shape), the `x-api-key` key (or a bearer token), the model list an
//! `anthropic-version` header asks for at `GET /v1/models`, and Anthropic's
//! error shape `{"type": "error", "error": {"type", "message"}}` with
//! Anthropic's statuses.

use http::{HeaderMap, Method};
use serde_json::{Value, json};
use understudy_types::error::ClientRefusal;
use understudy_types::{Error, FailureCode, Protocol};

use super::error::{WireErrorEnvelope, error_type, status_of};
use crate::endpoint::{Endpoint, Envelope, Fault, Key, Metered, Model, Route};

/// The Messages front end's edge.
#[derive(Debug)]
pub struct MessagesEdge;

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

/// The header Anthropic takes the key in.
pub const KEY_HEADER: &str = "x-api-key";

/// The API version the gateway speaks to Anthropic.
pub const API_VERSION: &str = "2023-06-01";

/// The client's protocol headers a native body is forwarded with, each
/// once: a header sent more than once (Claude Code sends several
/// `anthropic-beta` lines) is one comma-separated list, as HTTP defines
/// it, so every value is forwarded, not only the first.
pub fn native_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    [VERSION, BETA]
        .iter()
        .filter_map(|name| {
            let values: Vec<&str> = headers
                .get_all(*name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .collect();
            (!values.is_empty()).then(|| ((*name).to_owned(), values.join(",")))
        })
        .collect()
}

/// The query parameters of a client's request that the Messages API
/// defines (`beta`, which Claude Code sends as `?beta=true`), for a native
/// body; `None` when there are none.
pub fn native_query(query: Option<&str>) -> Option<String> {
    let query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|pair| {
            pair.split_once('=').is_some_and(|(k, v)| {
                k == "beta" && !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric())
            })
        })
        .collect::<Vec<_>>()
        .join("&");
    (!query.is_empty()).then_some(query)
}

/// Whether a client's header goes on to an Anthropic target with its
/// native body: the `anthropic-*` protocol headers, and no other.
pub fn forwarded(name: &str) -> bool {
    name.starts_with("anthropic-")
}

impl Endpoint for MessagesEdge {
    const PROTOCOL: Protocol = Protocol::Messages;
    const ROUTES: &'static [Route] = &[MESSAGES, COUNT_TOKENS];
    const SPAN_ROUTE: &'static str = MESSAGES.path;
    const PREFIXES: &'static [&'static str] = &["/v1/messages/"];
    // Claude Code's ANTHROPIC_API_KEY, or ANTHROPIC_AUTH_TOKEN as a bearer.
    const KEYS: &'static [Key] = &[Key::Header(KEY_HEADER), Key::Bearer];
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
        Error::Refused { .. } | Error::InvalidRequest { .. } | Error::ContextTooLong { .. } => {
            "invalid_request_error"
        }
        Error::UnknownProvider(_) | Error::UnknownRoute(_) | Error::UnknownModel(_) => {
            "not_found_error"
        }
    };
    // The status is the one Anthropic gives the type.
    (status_of(kind), kind)
}
