//! The `x-understudy-*` headers every API shares: the per-request
//! overrides a request may carry (route, refusal policy, no fallback,
//! timeout, stream commit, continuation), `Cache-Control`'s opt-out of the
//! response cache, a client's model name as a route, and the failover
//! headers every answer carries.

use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

use crate::ApiError;

/// `Cache-Control: no-cache` (or `no-store`) opts a request out of the cache.
pub(crate) fn no_cache(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|d| matches!(d.trim(), "no-cache" | "no-store"))
        })
}

/// The most a request may ask for with `x-understudy-timeout-ms`/`timeout_ms`.
pub(crate) const MAX_TIMEOUT_MS: u64 = 600_000;

/// Applies the per-request override headers every API accepts:
/// `x-understudy-route`, `x-understudy-refusal-policy`,
/// `x-understudy-no-fallback`, `x-understudy-timeout-ms`, and
/// `x-understudy-targets` (the routing a request asks for).
pub(crate) fn apply_overrides(
    headers: &axum::http::HeaderMap,
    request: &mut understudy_core::GenerateRequest,
) -> Result<(), ApiError> {
    // Most requests carry none of these: one pass over the names instead
    // of a lookup (a name parsed and hashed) for each.
    if !headers
        .keys()
        .any(|name| name.as_str().starts_with("x-understudy-"))
    {
        return Ok(());
    }
    let text = |name: &'static str| -> Result<Option<&str>, ApiError> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.trim()))
                .map_err(|_| ApiError::invalid(name, "not valid text")),
        }
    };
    if let Some(route) = text("x-understudy-route")? {
        request.route = model_route(route);
    }
    if let Some(policy) = text("x-understudy-refusal-policy")? {
        request.refusal_policy = Some(
            policy
                .parse()
                .map_err(|m: String| ApiError::invalid("x-understudy-refusal-policy", m))?,
        );
    }
    if let Some(flag) = text("x-understudy-no-fallback")? {
        request.no_fallback = flag_value("x-understudy-no-fallback", flag)?;
    }
    if let Some(ms) = text("x-understudy-timeout-ms")? {
        request.timeout = Some(timeout_ms("x-understudy-timeout-ms", ms.parse().ok())?);
    }
    if let Some(commit) = text("x-understudy-stream-commit")? {
        request.stream_commit = Some(
            commit
                .parse()
                .map_err(|m: String| ApiError::invalid("x-understudy-stream-commit", m))?,
        );
    }
    if let Some(flag) = text("x-understudy-continue-after-cut")? {
        request.continue_after_cut = Some(flag_value("x-understudy-continue-after-cut", flag)?);
    }
    if let Some(list) = text(crate::caller::TARGETS)? {
        crate::caller::targets_header(request, list);
    }
    Ok(())
}

/// The session a request's headers name (`x-understudy-session`, then
/// what clients send of their own accord: see
/// [`understudy_core::generation::SESSION_HEADERS`]). One pass over
/// the names first: most requests carry none.
pub(crate) fn session(headers: &axum::http::HeaderMap) -> Option<understudy_core::SessionHint> {
    use understudy_core::generation::SESSION_HEADERS;
    if !headers
        .keys()
        .any(|name| SESSION_HEADERS.iter().any(|(h, _)| *h == name.as_str()))
    {
        return None;
    }
    understudy_core::SessionHint::of_headers(|name| headers.get(name)?.to_str().ok())
}

/// A true/false header's value.
fn flag_value(name: &'static str, value: &str) -> Result<bool, ApiError> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(ApiError::invalid(name, "expected true or false")),
    }
}

/// A request timeout in milliseconds, validated.
pub(crate) fn timeout_ms(
    field: &'static str,
    ms: Option<u64>,
) -> Result<std::time::Duration, ApiError> {
    match ms {
        Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Ok(std::time::Duration::from_millis(ms)),
        _ => Err(ApiError::invalid(
            field,
            format!("expected a number of milliseconds from 1 to {MAX_TIMEOUT_MS}"),
        )),
    }
}

/// A client's model name (or `x-understudy-route`): the engine resolves it
/// against the routing table in force when the request is planned (a
/// route, else a provider pin; anything else is a 404 `model_not_found`).
pub(crate) fn model_route(name: &str) -> understudy_types::RouteSelector {
    understudy_types::RouteSelector::Model(name.to_owned())
}

/// The failover headers every answer carries: who served, whether it fell
/// back, whether any attempt was refused. The provider's name becomes its
/// header's value without a copy.
pub(crate) fn failover_headers(
    response: &mut Response,
    provider: String,
    fell_back: bool,
    filtered: bool,
) {
    const PROVIDER: HeaderName = HeaderName::from_static("x-understudy-provider");
    const FELL_BACK: HeaderName = HeaderName::from_static("x-understudy-fell-back");
    const FILTERED: HeaderName = HeaderName::from_static("x-understudy-content-filtered");
    let flag = |b: bool| HeaderValue::from_static(if b { "true" } else { "false" });
    let headers = response.headers_mut();
    // As `HeaderValue::from_str` takes it: visible ASCII, spaces and tabs.
    let text = provider
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) || b == b'\t');
    if text && let Ok(v) = HeaderValue::from_maybe_shared(axum::body::Bytes::from(provider)) {
        headers.insert(PROVIDER, v);
    }
    headers.insert(FELL_BACK, flag(fell_back));
    headers.insert(FILTERED, flag(filtered));
}
