//! Anthropic's fallback credit as the API keeps it (a beta,
//! `fallback-credit-*`): a refusal to a request that sent the beta carries
//! `stop_details.fallback_credit_token` (`null` without it), and a later
//! request that sends the token back is checked and billed: the token
//! known, the same key (workspace) and simulator (platform), within five
//! minutes, the body equal to the refused one but for the fields that may
//! change on a retry (`model`, `max_tokens`, `stop_sequences`,
//! `temperature`, `top_p`, `top_k`, `stream`, `metadata`,
//! `service_tier`) → `usage.fallback_credit.status` `redeemed`; else
//! `not_applied` with its reason. A body that sends the token without the
//! beta is refused as the API refuses a field it does not know.
//!
//! Tokens are kept for the whole process (a token is bound to the
//! simulator that issued it), so a test can age the ones issued on its
//! own key ([`age_credits`]) to see an expired one.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Received;

/// How long a credit can be redeemed.
const WINDOW: Duration = Duration::from_secs(5 * 60);

/// The fields a retry may change without losing the credit.
const MAY_CHANGE: [&str; 10] = [
    "model",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
    "service_tier",
    "fallback_credit_token",
];

/// One credit issued.
struct Issued {
    token: String,
    key: Option<String>,
    /// The simulator that issued it (its `host`).
    platform: Option<String>,
    /// The refused body without the fields that may change.
    body: Value,
    at: Instant,
}

fn issued() -> &'static Mutex<Vec<Issued>> {
    static ISSUED: OnceLock<Mutex<Vec<Issued>>> = OnceLock::new();
    ISSUED.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Issued>> {
    issued()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `req` switched the credit on (an `anthropic-beta` value
/// starting with `fallback-credit-`).
pub(super) fn beta_on(req: &Received) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name == "anthropic-beta")
        .flat_map(|(_, value)| value.split(','))
        .any(|beta| beta.trim().starts_with("fallback-credit-"))
}

/// The refused body as redemption compares it.
fn compared(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(map) = body.as_object_mut() {
        for field in MAY_CHANGE {
            map.remove(field);
        }
    }
    body
}

/// A refusal's `stop_details` for `req`, with a fresh credit when the
/// request asked for one (the beta), `null` otherwise.
pub(super) fn refusal_details(req: &Received, mut details: Value) -> Value {
    let token = beta_on(req).then(|| {
        let token = super::ids::credit();
        lock().push(Issued {
            token: token.clone(),
            key: req.api_key().map(str::to_owned),
            platform: req.header("host").map(str::to_owned),
            body: compared(&req.json()),
            at: Instant::now(),
        });
        token
    });
    if let Some(map) = details.as_object_mut() {
        map.insert("fallback_credit_token".into(), json!(token));
        map.insert(
            "fallback_has_prefill_claim".into(),
            if token.is_some() {
                json!(false)
            } else {
                Value::Null
            },
        );
    }
    details
}

/// `usage.fallback_credit` for a request that sent a credit back; `None`
/// when it sent none.
pub(super) fn usage(req: &Received) -> Option<Value> {
    let body = req.json();
    let token = body["fallback_credit_token"].as_str()?;
    let issued = lock();
    let reason = match issued.iter().find(|i| i.token == token) {
        None => Some("body_mismatch"),
        Some(i) if i.platform.as_deref() != req.header("host") => Some("wrong_platform"),
        Some(i) if i.key.as_deref() != req.api_key() => Some("wrong_workspace"),
        Some(i) if i.at.elapsed() > WINDOW => Some("expired"),
        Some(i) if i.body != compared(&body) => Some("body_mismatch"),
        Some(_) => None,
    };
    Some(match reason {
        None => json!({"status": {"type": "redeemed"}}),
        Some(reason) => json!({"status": {"type": "not_applied", "reason": reason}}),
    })
}

/// The API's answer to a body that sends a credit without the beta: the
/// field is unknown to it.
#[cfg(feature = "test-support")]
pub(super) fn unknown_field(req: &Received) -> Option<String> {
    (req.json().get("fallback_credit_token").is_some() && !beta_on(req))
        .then(|| "fallback_credit_token: Extra inputs are not permitted".to_owned())
}

/// Ages the credits issued on `key` by `by`, as if that long had passed
/// since their refusals.
pub fn age_credits(key: &str, by: Duration) {
    for i in lock().iter_mut().filter(|i| i.key.as_deref() == Some(key)) {
        i.at = i.at.checked_sub(by).unwrap_or(i.at);
    }
}
