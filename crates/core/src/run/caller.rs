//! The routing a request asked for (its body's `models`, `provider`
//! preferences and `fallbacks`, or `x-understudy-targets`), honoured where
//! the operator allows it — its client record's `caller_routing`, else
//! `[caller_routing] enabled` — and recorded in its event either way.
//! The plan itself is [`understudy_policy::caller`]'s; a request that
//! asked for nothing pays one `Option` check.

use std::collections::BTreeMap;

use understudy_settings::{ClientRecord, Settings};
use understudy_types::caller::{CallerRouting, MAX_CALLER_TARGETS};
use understudy_types::{ChatRequest, Error, Target};

use crate::event::CallerNote;
use crate::generation::GenerateRequest;

/// The routing `request` asked for, when it asked and may.
pub(crate) fn wish<'r>(
    settings: &Settings,
    request: &'r GenerateRequest,
) -> Option<&'r CallerRouting> {
    let wish = request.chat.routing.as_deref()?;
    settings
        .caller_routing
        .allows(request.tenant.as_deref())
        .then_some(wish)
}

/// `route` (the request's own, resolved and scoped) as the request asked
/// for it, when it asked and may; a list too long or a name no target
/// could have is refused (400), and a name outside its record's `models`
/// (403), each naming it. A request that may not route itself is never
/// refused for what it asked: its fields are ignored.
pub(crate) fn route(
    request: &GenerateRequest,
    route: Vec<Target>,
    (settings, default_route, routes): (&Settings, &[Target], &BTreeMap<String, Vec<Target>>),
) -> Result<Vec<Target>, Error> {
    let Some(wish) = wish(settings, request) else {
        return Ok(route);
    };
    wish.validate("models")?;
    understudy_policy::caller::targets(
        &request.route,
        route,
        wish,
        request.tenant.as_deref(),
        (settings, default_route, routes),
    )
}

/// The event's note of what `chat` asked for and whether it was honoured
/// (`record`: its client's record); `None` when it asked for nothing.
pub(crate) fn note(
    chat: &ChatRequest,
    settings: &Settings,
    record: Option<&ClientRecord>,
) -> Option<Box<CallerNote>> {
    let wish = chat.routing.as_deref()?;
    let (targets, source) = match &wish.targets {
        Some(list) => (list, "header"),
        None => (&wish.models, "body"),
    };
    // What was not honoured was not checked either: an event holds at
    // most the first names of each list, and only names a route could
    // hold (no longer than a model's name, no control characters), so a
    // client cannot fill the events with what the gateway ignores.
    let fits = |n: &&String| {
        n.len() <= understudy_types::route::MAX_MODEL_NAME && !n.chars().any(char::is_control)
    };
    let first = |list: &[String]| {
        list.iter()
            .take(MAX_CALLER_TARGETS)
            .filter(fits)
            .cloned()
            .collect()
    };
    Some(Box::new(CallerNote {
        honoured: settings.caller_routing.allows(record),
        source: source.into(),
        targets: first(targets),
        order: first(&wish.order),
        only: first(&wish.only),
        ignore: first(&wish.ignore),
        allow_fallbacks: wish.allow_fallbacks,
    }))
}
