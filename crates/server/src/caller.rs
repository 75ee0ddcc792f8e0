//! The routing a client asks for in its request, read at the edge: the
//! `x-understudy-targets` header (every API), and each API's body fields
//! (`models`, `provider`, `fallbacks`; see `understudy_wire::caller`)
//! kept out of a natively forwarded body. Whether the request may have
//! what it asked is the engine's to decide.

use std::sync::Arc;

use axum::body::Bytes;
use understudy_types::caller::CallerRouting;
use understudy_wire::caller::ROUTING_FIELDS;

/// The header naming the targets a request walks, in order: a
/// comma-separated list of names, each read as `model` is (a route, a
/// route's pattern, `provider`, `provider:model`).
pub(crate) const TARGETS: &str = "x-understudy-targets";

/// Sets the `x-understudy-targets` list `value` on `request`'s routing
/// (beside any body preferences). Read as sent: the names are checked
/// only where the request may route itself (the engine's to decide), and
/// the header is otherwise ignored.
pub(crate) fn targets_header(request: &mut understudy_core::GenerateRequest, value: &str) {
    let list: Vec<String> = value.split(',').map(|s| s.trim().to_owned()).collect();
    let chat = Arc::make_mut(&mut request.chat);
    let wish = chat
        .routing
        .get_or_insert_with(|| Box::new(CallerRouting::new()));
    wish.targets = Some(list);
}

/// Messages bodies: Anthropic's own server-side fallbacks (the
/// `server-side-fallback-…` beta in `anthropic-beta`) keep `fallbacks`
/// for the provider; without the beta the field is the gateway's.
pub(crate) fn anthropic_fallbacks(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|b| b.trim().starts_with("server-side-fallback-"))
}

/// The routing members of a body a provider would refuse: all of them,
/// or all but `fallbacks` when it is the provider's own.
pub(crate) fn fields(keep_fallbacks: bool) -> &'static [&'static str] {
    if keep_fallbacks {
        &ROUTING_FIELDS[..2]
    } else {
        &ROUTING_FIELDS
    }
}

/// `raw` (a body as sent, natively forwarded to targets of its protocol)
/// without the members `fields`; only called for a body that has one.
/// `None` (no native body: the request is translated from its parse,
/// which never carries them) when they cannot all be taken out.
pub(crate) fn strip(raw: Option<Bytes>, fields: &[&str]) -> Option<Bytes> {
    let raw = raw?;
    let text = std::str::from_utf8(&raw).ok()?;
    understudy_wire::caller::strip(text, fields).map(Bytes::from)
}
