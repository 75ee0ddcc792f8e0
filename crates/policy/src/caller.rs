//! The routing a caller asked for, turned into the targets its request
//! walks: `model` then `models` (then `fallbacks`), or the
//! `x-understudy-targets` list, each name resolved the way `model` is (a
//! route gives its targets, a pin the one target it names), repeats
//! dropped; then, per name, the provider preferences — `only` and `ignore`
//! filter, `order` puts the named providers first in that order — and
//! `allow_fallbacks: false` keeps the first target alone. A client
//! record's `models` bound every name asked: one outside them is refused,
//! naming it.

use std::collections::BTreeMap;

use understudy_settings::{ClientRecord, Settings};
use understudy_types::caller::CallerRouting;
use understudy_types::error::{ClientRefusal, Error};
use understudy_types::{RouteSelector, Target};

use crate::plan;

/// What `asked` (the request's own `model`, route or pin) and `wish`
/// resolve to, within `record`'s `models`. `primary` is the route of
/// `asked` as the request would walk it without a wish (resolved and
/// scoped by the caller), used when the wish lists no names.
pub fn targets(
    asked: &RouteSelector,
    primary: Vec<Target>,
    wish: &CallerRouting,
    record: Option<&ClientRecord>,
    (settings, default_route, routes): (&Settings, &[Target], &BTreeMap<String, Vec<Target>>),
) -> Result<Vec<Target>, Error> {
    let names: Vec<String> = match &wish.targets {
        Some(list) => list.clone(),
        None if wish.models.is_empty() => Vec::new(),
        None => {
            let first = (*asked != RouteSelector::Default).then(|| asked.to_string());
            first
                .into_iter()
                .chain(wish.models.iter().cloned())
                .collect()
        }
    };
    let blocks = if names.is_empty() {
        vec![primary]
    } else {
        let mut blocks = Vec::with_capacity(names.len());
        for name in names {
            if record.is_some_and(|r| !r.allows(&name)) {
                return Err(Error::Client(ClientRefusal::Model { asked: name }));
            }
            blocks.push(one(&name, settings, default_route, routes)?);
        }
        blocks
    };
    arrange(blocks, wish)
}

/// The targets one name stands for: a route's (or `default`'s), else the
/// one target a pin names (without the default route after it: the
/// caller's list says what follows).
pub fn one(
    name: &str,
    settings: &Settings,
    default_route: &[Target],
    routes: &BTreeMap<String, Vec<Target>>,
) -> Result<Vec<Target>, Error> {
    let selector = RouteSelector::Model(name.to_owned());
    selector.validate()?;
    let mut targets = plan::resolve(&selector, settings, default_route, routes)?;
    if name != "default" && plan::route_name(&selector, routes).is_none() {
        targets.truncate(1);
    }
    Ok(targets)
}

/// `blocks` (one per name asked, in order) with the provider preferences
/// of `wish` applied within each, joined without repeats; only the first
/// target when fallbacks are not allowed. Refused when nothing is left.
pub fn arrange(blocks: Vec<Vec<Target>>, wish: &CallerRouting) -> Result<Vec<Target>, Error> {
    let has = |list: &[String], t: &Target| list.iter().any(|p| **p == *t.provider);
    let rank = |t: &Target| {
        wish.order
            .iter()
            .position(|p| **p == *t.provider)
            .unwrap_or(wish.order.len())
    };
    let mut out: Vec<Target> = Vec::new();
    for mut block in blocks {
        block.retain(|t| (wish.only.is_empty() || has(&wish.only, t)) && !has(&wish.ignore, t));
        // Stable: targets of one rank keep the route's order.
        block.sort_by_key(|t| rank(t));
        for t in block {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    if !wish.allow_fallbacks {
        out.truncate(1);
    }
    if out.is_empty() {
        return Err(Error::invalid(
            "provider",
            "the request's provider preferences (`only`, `ignore`) leave no target to try",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
