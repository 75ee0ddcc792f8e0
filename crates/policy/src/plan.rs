//! Which targets a request walks, in which order.
//!
//! A route is an ordered list of targets (provider + model). The plan is the
//! route with unavailable targets removed: a provider with no key, no
//! compiled-in adapter, or an open breaker never receives the request.
//! Where a route's step is a group of equivalent targets, the group's
//! members are ordered by the group choice ([`crate::balance`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use understudy_settings::{Capabilities, ProviderSettings, Settings};
use understudy_types::RouteSelector;
use understudy_types::chat::Needs;
use understudy_types::error::Error;
use understudy_types::protocol::Protocol;
use understudy_types::target::Target;

mod groups;

pub use groups::{SMALL_GROUP, balance_groups, group_seed, order_placed};

/// Why a target is left out of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// The provider needs an API key and none is set.
    NoKey,
    /// No adapter for the provider's protocol is compiled in.
    NoAdapter,
    /// The target's circuit breaker is open.
    BreakerOpen,
    /// The provider's actor is gone and its restart budget is spent.
    Stopped,
    /// Every key of its pool is cooling down (found when its turn comes,
    /// never at planning).
    KeysOut,
    /// Its credentials are not held and cannot be had within the bound a
    /// request waits for them (a token endpoint that fails or hangs, a
    /// broken key file; found when its turn comes, never at planning).
    Credentials,
    /// A readiness probe proved it cannot serve (its key refused, its
    /// model missing): left out as behind an open breaker.
    NotReady,
    /// Its model's context window cannot hold the request (see
    /// [`crate::fit`]); also a later target no larger than one that
    /// answered "too long".
    ContextWindow,
}

impl Unavailable {
    /// Whether this is a verdict about the next call that the call itself
    /// may prove wrong (an open breaker, a probe's "not ready"), rather
    /// than a fact (no key, no adapter, a window too small): a route left
    /// with nothing else forces its primary past it.
    pub fn is_guess(self) -> bool {
        matches!(self, Self::BreakerOpen | Self::NotReady)
    }

    /// Whether passing a target over for this is news of the request (its
    /// event's `skipped`, its trace's notes): a breaker, a stopped actor,
    /// a probe's verdict, a window too small. A missing key or adapter is
    /// configuration, not an event of one request.
    pub fn is_news(self) -> bool {
        matches!(
            self,
            Self::BreakerOpen | Self::Stopped | Self::NotReady | Self::ContextWindow
        )
    }
}

/// A request's plan: the route's primary and the targets to try in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The route's first target, whether or not it is available: serving
    /// from anything else counts as falling back.
    pub primary: Target,
    /// The available targets, the primary first when it is available.
    pub targets: Vec<Target>,
    /// The targets left out, and why.
    pub skipped: Vec<(Target, Unavailable)>,
    /// Every target was benched, the primary by its breaker or a probe's
    /// "not ready", so the primary is tried anyway, past either.
    pub forced: bool,
    /// Per target (empty: all of them can): what it lacks that the request
    /// needs. Such a target is recorded as `unsupported` and never called.
    pub unsupported: Vec<Option<&'static str>>,
    /// The primary was chosen among a group of equivalent targets (see
    /// [`balance_groups`]).
    pub balanced: bool,
}

// === impl Unavailable ===

impl Unavailable {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoKey => "no API key",
            Self::NoAdapter => "adapter not compiled in",
            Self::BreakerOpen => "circuit breaker open",
            Self::Stopped => "stopped after repeated crashes",
            Self::KeysOut => "every key of its pool is out",
            Self::Credentials => "credentials unusable",
            Self::NotReady => "not ready (a probe found its key refused or its model missing)",
            Self::ContextWindow => "its context window cannot hold the request",
        }
    }

    /// A stable snake_case code (a span event's `understudy.skip.reason`).
    pub fn code(self) -> &'static str {
        match self {
            Self::NoKey => "no_key",
            Self::NoAdapter => "no_adapter",
            Self::BreakerOpen => "breaker_open",
            Self::Stopped => "stopped",
            Self::KeysOut => "keys_out",
            Self::Credentials => "credentials",
            Self::NotReady => "not_ready",
            Self::ContextWindow => "context_window",
        }
    }
}

// === route resolution ===

/// The targets a selector names, before availability is considered.
/// `default_route` is the current default route (routing can change at run
/// time, so it is passed in rather than read from `settings`).
pub fn resolve(
    selector: &RouteSelector,
    settings: &Settings,
    default_route: &[Target],
    routes: &BTreeMap<String, Vec<Target>>,
) -> Result<Vec<Target>, Error> {
    let targets = match selector {
        RouteSelector::Default => default_route.to_vec(),
        RouteSelector::Named(name) if name == "default" => default_route.to_vec(),
        RouteSelector::Named(name) => routes
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownRoute(name.clone()))?,
        // A client's model name: a route (found once, not again by name),
        // else what `model_selector` makes of it.
        RouteSelector::Model(name) => match routes.get(name).filter(|_| name != "default") {
            Some(targets) => targets.clone(),
            None => {
                return match model_selector(name, settings, routes)? {
                    ModelRoute::Select(selector) => {
                        resolve(&selector, settings, default_route, routes)
                    }
                    ModelRoute::Targets(targets) => Ok(targets),
                };
            }
        },
        RouteSelector::Pin { provider, model } => {
            let p = settings
                .providers
                .get(provider)
                .ok_or_else(|| Error::UnknownProvider(provider.clone()))?;
            let model = model.as_deref().unwrap_or(&p.model);
            if model.trim().is_empty() {
                return Err(Error::invalid("model", "the model name is empty"));
            }
            let pinned = Target::new(provider, model);
            // The primary is never its own fallback: the rest of the default
            // order follows, without the pinned provider.
            std::iter::once(pinned)
                .chain(
                    default_route
                        .iter()
                        .filter(|t| *t.provider != **provider)
                        .cloned(),
                )
                .collect()
        }
    };
    Ok(dedup(cloud_ids(targets, settings)))
}

/// What a client's model name that is no route's name comes to.
enum ModelRoute {
    /// Resolved as this selector.
    Select(RouteSelector),
    /// A pattern route's targets, resolved.
    Targets(Vec<Target>),
}

/// What a client's model name `name` that is no route's name selects: the
/// default route; else the targets of a route whose name is a pattern it
/// matches; else a pin of a known provider; else (a Claude model name, as
/// Claude Code picks them) a pin of that model on the first Anthropic
/// provider.
fn model_selector(
    name: &str,
    settings: &Settings,
    routes: &BTreeMap<String, Vec<Target>>,
) -> Result<ModelRoute, Error> {
    if name == "default" {
        return Ok(ModelRoute::Select(RouteSelector::Default));
    }
    if let Some((_, targets)) = pattern_route(name, routes) {
        let targets: Vec<Target> = targets.iter().map(|t| t.for_model(name)).collect();
        return Ok(ModelRoute::Targets(dedup(cloud_ids(targets, settings))));
    }
    let provider = name.split_once(':').map_or(name, |(p, _)| p);
    if settings.providers.contains_key(provider) {
        Ok(ModelRoute::Select(RouteSelector::pin(name)))
    } else if let Some(claude) = claude_provider(name, settings) {
        Ok(ModelRoute::Select(RouteSelector::Pin {
            provider: claude.to_owned(),
            model: Some(name.to_owned()),
        }))
    } else {
        Err(Error::UnknownModel(name.to_owned()))
    }
}

/// `targets` with each model name its provider maps (`models = {…}`) in
/// place of the name: one client name reaches every cloud's id for it.
pub fn cloud_ids(mut targets: Vec<Target>, settings: &Settings) -> Vec<Target> {
    for t in &mut targets {
        let Some(p) = settings.providers.get(&*t.provider) else {
            continue;
        };
        if let Some(id) = p.models.get(&*t.model) {
            t.model = Arc::from(id.as_str());
        }
    }
    targets
}

/// `targets` without repeats, in order: each target is compared with
/// those kept before it, in place (a route is a handful of targets).
fn dedup(mut targets: Vec<Target>) -> Vec<Target> {
    let mut kept = 0;
    for i in 0..targets.len() {
        if !targets[..kept].contains(&targets[i]) {
            targets.swap(kept, i);
            kept += 1;
        }
    }
    targets.truncate(kept);
    targets
}

/// The route whose name is a pattern (`*` standing for any run of
/// characters) that `name` matches; the most specific (longest) pattern
/// wins.
pub fn pattern_route<'r>(
    name: &str,
    routes: &'r BTreeMap<String, Vec<Target>>,
) -> Option<(&'r str, &'r [Target])> {
    routes
        .iter()
        .filter(|(pattern, _)| pattern.contains('*') && understudy_settings::glob(pattern, name))
        .max_by_key(|(pattern, _)| pattern.len())
        .map(|(pattern, targets)| (pattern.as_str(), targets.as_slice()))
}

/// For a Claude model name (`claude-…`) that no route names: the first
/// Anthropic provider (`claude` if it is one), which then serves the model
/// the client asked for, the default order following as fallbacks.
fn claude_provider<'s>(name: &str, settings: &'s Settings) -> Option<&'s str> {
    if !name.starts_with("claude-") {
        return None;
    }
    let anthropic = |p: &&ProviderSettings| p.kind == Protocol::Messages;
    settings
        .providers
        .get("claude")
        .filter(anthropic)
        .or_else(|| settings.providers.values().find(anthropic))
        .map(|p| p.name.as_str())
}

/// The named route a selector takes, if any: a route's name, or a client's
/// model name that is a route's name or a pattern route's match. The model
/// `default` takes the configured order, as [`resolve`] reads it: no
/// route of `[routes]` (none may be named so) and never a pattern's, and
/// the most common model a client sends costs no search of the patterns.
pub fn route_name<'a>(
    selector: &'a RouteSelector,
    routes: &'a BTreeMap<String, Vec<Target>>,
) -> Option<&'a str> {
    match selector {
        RouteSelector::Named(name) => Some(name),
        RouteSelector::Model(name) if name == "default" => None,
        RouteSelector::Model(name) if routes.contains_key(name) => Some(name),
        RouteSelector::Model(name) => pattern_route(name, routes).map(|(pattern, _)| pattern),
        _ => None,
    }
}

/// Removes unavailable targets. `availability` answers for one target
/// (no key, no adapter, stopped, its breaker open, a probe's "not
/// ready"). When every target is left out and the primary only for its
/// breaker or its readiness, the primary is tried anyway (`forced`):
/// failing without trying helps no one, and a breaker's or a probe's
/// verdict is a guess about the next call (a probe's lookup may be refused
/// where a generation would not be), which the call itself settles.
pub fn plan(
    route: Vec<Target>,
    availability: impl Fn(&Target) -> Option<Unavailable>,
) -> Option<Plan> {
    let primary = route.first()?.clone();
    let mut skipped = Vec::new();
    // The route's own vector keeps the available targets, in order.
    let mut targets = route;
    targets.retain(|t| match availability(t) {
        None => true,
        Some(why) => {
            skipped.push((t.clone(), why));
            false
        }
    });
    let forced = targets.is_empty()
        && skipped
            .iter()
            .any(|(t, why)| *t == primary && why.is_guess());
    if forced {
        targets.push(primary.clone());
    }
    Some(Plan {
        primary,
        targets,
        skipped,
        forced,
        unsupported: Vec::new(),
        balanced: false,
    })
}

/// Puts `pinned` (the target a request's session last used, whose
/// prompt cache holds its prefix) first, when the plan has it among its
/// available targets; otherwise leaves the plan as it is. The rest keep
/// their order. It becomes the primary only when it is one of the route's
/// first step (`home`: the first target, or a member of the first group);
/// a session pinned to a later step's target goes there first as a
/// fallback, so that the fallback budget, `no_fallback` and the refusal
/// policy still treat it as one. Returns whether the pin was applied.
pub fn pin_first(plan: &mut Plan, pinned: &Target, home: bool) -> bool {
    if plan.forced {
        return false;
    }
    let Some(at) = plan.targets.iter().position(|t| t == pinned) else {
        return false;
    };
    plan.targets[..=at].rotate_right(1);
    if let Some(u) = plan.unsupported.get_mut(..=at) {
        u.rotate_right(1);
    }
    if home {
        plan.primary = pinned.clone();
    }
    true
}

/// What a target with `caps`, speaking `kind`, lacks for a request that
/// needs `needs` (`None`: it can serve it). A protocol that takes images
/// only inline cannot serve a remote URL: the gateway never fetches URLs on
/// a client's behalf.
pub fn lacks(caps: Capabilities, kind: Protocol, needs: Needs) -> Option<&'static str> {
    if let Some((_, what)) = needs.native_only.filter(|(native, _)| *native != kind) {
        Some(what)
    } else if let Some(refused) = needs
        .gated
        .filter(|(native, _)| *native == kind)
        .and_then(|(_, used)| used.first_outside(caps.passthrough))
    {
        Some(refused.refusal())
    } else if needs.tools && !caps.tools {
        Some("tools")
    } else if needs.vision && !caps.vision {
        Some("vision")
    } else if needs.remote_images && !kind.takes_remote_images() {
        Some("remote image URLs (it takes images inline only)")
    } else if needs.json && !caps.json_schema {
        Some("json_schema")
    } else {
        None
    }
}

/// Marks the plan's targets that cannot serve what the request needs
/// (`what_of` answers for one target). When none of the targets the request
/// may use can (only the primary with `no_fallback`), it is a client error
/// that names what each lacks — unless a target that could serve it is only
/// out for now (breaker open, provider stopped): then no provider is
/// available, which is not the client's fault.
pub fn check_capabilities(
    plan: &mut Plan,
    needs: Needs,
    no_fallback: bool,
    what_of: impl Fn(&Target) -> Option<&'static str>,
) -> Result<(), Error> {
    if needs == Needs::default() || plan.targets.is_empty() {
        return Ok(());
    }
    plan.unsupported = plan.targets.iter().map(&what_of).collect();
    let usable = |t: &Target| !no_fallback || *t == plan.primary;
    let considered: Vec<(&Target, Option<&'static str>)> = plan
        .targets
        .iter()
        .zip(plan.unsupported.iter().copied())
        .filter(|(t, _)| usable(t))
        .collect();
    if considered.is_empty() || considered.iter().any(|(_, why)| why.is_none()) {
        return Ok(());
    }
    let which: Vec<String> = considered
        .iter()
        .map(|(t, why)| format!("{t} lacks {}", why.unwrap_or("?")))
        .collect();
    let waiting: Vec<String> = plan
        .skipped
        .iter()
        .filter(|(t, why)| {
            matches!(why, Unavailable::BreakerOpen | Unavailable::Stopped)
                && usable(t)
                && what_of(t).is_none()
        })
        .map(|(t, why)| format!("{t} ({})", why.as_str()))
        .collect();
    if !waiting.is_empty() {
        return Err(Error::NoProviderAvailable(format!(
            "the targets that can serve this request are unavailable for now: {}; the others: {}",
            waiting.join(", "),
            which.join("; ")
        )));
    }
    let field = match considered[0].1 {
        Some("tools") => "tools",
        Some("json_schema") => "response_format",
        _ => "messages",
    };
    Err(Error::invalid(
        field,
        format!(
            "no target of this route can serve the request: {}",
            which.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::from_toml_str(
            "[routes]\nfast = [\"groq:a\", \"groq:b\", \"groq:a\", \"openai\"]",
            |_| None,
        )
        .unwrap()
    }

    fn names(ts: &[Target]) -> Vec<String> {
        ts.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_model_default_takes_the_configured_order_not_a_pattern() {
        let s = Settings::from_toml_str(
            "[routes]\n\"*\" = [\"groq:*\"]\nfast = [\"openai\"]",
            |_| None,
        )
        .unwrap();
        let model = |m: &str| RouteSelector::Model(m.to_owned());
        assert_eq!(route_name(&model("default"), &s.routes), None);
        let route = resolve(&model("default"), &s, &s.default_route(), &s.routes).unwrap();
        assert_eq!(route, s.default_route());
        // Any other model name still finds its route or its pattern.
        assert_eq!(route_name(&model("fast"), &s.routes), Some("fast"));
        assert_eq!(route_name(&model("llama"), &s.routes), Some("*"));
    }

    #[test]
    fn repeats_go_and_the_first_of_each_keeps_its_place() {
        let t = |s: &str| {
            let (p, m) = s.split_once(':').unwrap();
            Target::new(p, m)
        };
        let route = ["a:1", "b:1", "a:1", "c:1", "b:1", "a:2", "c:1", "d:1"].map(t);
        assert_eq!(
            names(&dedup(route.to_vec())),
            ["a:1", "b:1", "c:1", "a:2", "d:1"]
        );
        assert!(dedup(Vec::new()).is_empty());
    }

    #[test]
    fn pin_puts_the_pinned_provider_first_and_never_again() {
        let s = settings();
        let route = resolve(
            &RouteSelector::pin("gemini:g-pro"),
            &s,
            &s.default_route(),
            &s.routes,
        )
        .unwrap();
        assert_eq!(
            names(&route),
            [
                "gemini:g-pro",
                "groq:llama-3.1-8b-instant",
                "claude:claude-haiku-4-5"
            ]
        );
    }

    #[test]
    fn named_routes_keep_sibling_models_and_drop_duplicates() {
        let s = settings();
        let route = resolve(
            &RouteSelector::Named("fast".into()),
            &s,
            &s.default_route(),
            &s.routes,
        )
        .unwrap();
        assert_eq!(names(&route), ["groq:a", "groq:b", "openai:gpt-4o-mini"]);
        assert!(matches!(
            resolve(
                &RouteSelector::Named("nope".into()),
                &s,
                &s.default_route(),
                &s.routes
            ),
            Err(Error::UnknownRoute(_))
        ));
        assert!(matches!(
            resolve(
                &RouteSelector::pin("nope"),
                &s,
                &s.default_route(),
                &s.routes
            ),
            Err(Error::UnknownProvider(_))
        ));
    }

    #[test]
    fn a_pinned_target_goes_first_and_becomes_the_primary() {
        let route: Vec<Target> = ["a:x", "b:y", "c:z"]
            .iter()
            .map(|s| {
                let (p, m) = s.split_once(':').unwrap();
                Target::new(p, m)
            })
            .collect();
        let mut p = plan(route.clone(), |_| None).unwrap();
        assert!(pin_first(&mut p, &route[2], true));
        assert_eq!(names(&p.targets), ["c:z", "a:x", "b:y"]);
        assert_eq!(p.primary, route[2]);
        // A pin to a later step goes first but stays a fallback.
        let mut p = plan(route.clone(), |_| None).unwrap();
        assert!(pin_first(&mut p, &route[2], false));
        assert_eq!(names(&p.targets), ["c:z", "a:x", "b:y"]);
        assert_eq!(p.primary, route[0]);
        // A pin the plan does not hold (left out, or another route's)
        // changes nothing.
        let mut p = plan(route.clone(), |t| {
            (*t == route[1]).then_some(Unavailable::BreakerOpen)
        })
        .unwrap();
        assert!(!pin_first(&mut p, &route[1], true));
        assert_eq!(names(&p.targets), ["a:x", "c:z"]);
        assert_eq!(p.primary, route[0]);
    }

    #[test]
    fn a_group_is_ordered_in_place_and_leads_when_it_is_the_first_step() {
        let route: Vec<Target> = ["a:x", "b:y", "c:z", "d:w"]
            .iter()
            .map(|s| {
                let (p, m) = s.split_once(':').unwrap();
                Target::new(p, m)
            })
            .collect();
        let now = crate::test_now();
        let knobs = understudy_settings::BalanceSettings::default();
        // `b` and `c` are fast, `a` slow: the choice never leads with `a`.
        let member = |t: &Target, weight| crate::balance::Member {
            weight,
            ttft: Some(std::time::Duration::from_millis(match &*t.provider {
                "a" => 900,
                _ => 100,
            })),
            in_flight: 0,
            ejected_until: None,
        };
        // (group's place, its first step, unavailable, the order, primary)
        type Case<'a> = (
            std::ops::Range<usize>,
            bool,
            &'a str,
            &'a [&'a str],
            &'a str,
        );
        let cases: [Case; 3] = [
            (1..3, false, "", &["a:x", "c:z", "b:y", "d:w"], "a:x"),
            (0..2, true, "", &["b:y", "a:x", "c:z", "d:w"], "b:y"),
            (0..2, true, "b", &["a:x", "c:z", "d:w"], "a:x"),
        ];
        for (range, first, out, want, primary) in cases {
            let mut p = plan(route.clone(), |t| {
                (&*t.provider == out).then_some(Unavailable::BreakerOpen)
            })
            .unwrap();
            // The second member weighs much more: it leads its group whenever it is there.
            let weights = [1, 1000];
            let group = [(&route[range], &weights[..], first)];
            balance_groups(&mut p, group, member, now, u64::MAX / 2, &knobs);
            assert_eq!(names(&p.targets), want, "{group:?}");
            assert_eq!(p.primary.to_string(), primary);
            assert_eq!(p.balanced, first);
        }
    }

    #[test]
    fn unavailable_targets_are_skipped_but_the_primary_is_remembered() {
        let s = settings();
        let route = resolve(&RouteSelector::Default, &s, &s.default_route(), &s.routes).unwrap();
        let p = plan(route, |t| {
            (&*t.provider == "groq").then_some(Unavailable::NoKey)
        })
        .unwrap();
        assert_eq!(&*p.primary.provider, "groq");
        assert_eq!(
            names(&p.targets),
            ["gemini:gemini-2.5-flash", "claude:claude-haiku-4-5"]
        );
        assert_eq!(p.skipped.len(), 1);
        assert!(!p.forced);
    }

    #[test]
    fn when_every_target_is_open_or_not_ready_the_primary_is_forced() {
        let s = settings();
        let route = resolve(&RouteSelector::Default, &s, &s.default_route(), &s.routes).unwrap();
        // (why each target is unavailable, expected targets, forced)
        type Availability = fn(&Target) -> Option<Unavailable>;
        let cases: [(Availability, &[&str], bool); 6] = [
            (
                |_| Some(Unavailable::BreakerOpen),
                &["groq:llama-3.1-8b-instant"],
                true,
            ),
            // A probe can be wrong: serving beats refusing.
            (
                |_| Some(Unavailable::NotReady),
                &["groq:llama-3.1-8b-instant"],
                true,
            ),
            (
                |t| {
                    Some(if &*t.provider == "groq" {
                        Unavailable::NotReady
                    } else {
                        Unavailable::NoKey
                    })
                },
                &["groq:llama-3.1-8b-instant"],
                true,
            ),
            // A primary that cannot hold the prompt is never forced.
            (
                |t| {
                    Some(if &*t.provider == "groq" {
                        Unavailable::ContextWindow
                    } else {
                        Unavailable::NotReady
                    })
                },
                &[],
                false,
            ),
            (
                |t| {
                    Some(if &*t.provider == "groq" {
                        Unavailable::NoKey
                    } else {
                        Unavailable::BreakerOpen
                    })
                },
                &[],
                false,
            ),
            (
                |t| (&*t.provider != "claude").then_some(Unavailable::BreakerOpen),
                &["claude:claude-haiku-4-5"],
                false,
            ),
        ];
        for (availability, want, forced) in cases {
            let p = plan(route.clone(), availability).unwrap();
            assert_eq!(names(&p.targets), want);
            assert_eq!(p.forced, forced);
        }
    }

    #[test]
    fn capabilities_decide_between_a_client_error_and_an_unavailable_provider() {
        let s = settings();
        let route = resolve(&RouteSelector::Default, &s, &s.default_route(), &s.routes).unwrap();
        let needs = Needs {
            tools: true,
            ..Needs::default()
        };
        let lacks_on = |providers: &'static [&'static str]| {
            move |t: &Target| providers.contains(&&*t.provider).then_some("tools")
        };
        // (open breakers, targets lacking tools, no_fallback, expected)
        let cases: [(&[&str], &'static [&'static str], bool, &str); 6] = [
            (&[], &["groq"], false, "ok"),
            (&[], &["groq", "gemini", "claude"], false, "invalid"),
            (&["claude"], &["groq", "gemini"], false, "unavailable"),
            (&[], &["groq"], true, "invalid"),
            // The primary is out and no fallback is allowed: nothing to
            // judge here (the walk finds no provider available).
            (&["groq"], &["gemini", "claude"], true, "ok"),
            (&["groq"], &["gemini"], false, "ok"),
        ];
        for (open, lacking, no_fallback, want) in cases {
            let mut p = plan(route.clone(), |t| {
                open.contains(&&*t.provider)
                    .then_some(Unavailable::BreakerOpen)
            })
            .unwrap();
            let got = match check_capabilities(&mut p, needs, no_fallback, lacks_on(lacking)) {
                Ok(()) => "ok",
                Err(Error::InvalidRequest { field: "tools", .. }) => "invalid",
                Err(Error::NoProviderAvailable(_)) => "unavailable",
                Err(e) => panic!("{e:?}"),
            };
            assert_eq!(
                got, want,
                "open {open:?}, lacking {lacking:?}, no_fallback {no_fallback}"
            );
        }
    }

    #[test]
    fn a_model_name_is_a_route_a_pin_or_unknown() {
        let s = settings();
        let resolve_model = |name: &str| {
            resolve(
                &RouteSelector::Model(name.into()),
                &s,
                &s.default_route(),
                &s.routes,
            )
            .map(|r| names(&r))
        };
        assert_eq!(
            resolve_model("fast").unwrap(),
            ["groq:a", "groq:b", "openai:gpt-4o-mini"]
        );
        assert_eq!(resolve_model("gemini:x").unwrap()[0], "gemini:x");
        assert_eq!(
            resolve_model("default").unwrap()[0],
            "groq:llama-3.1-8b-instant"
        );
        assert!(matches!(
            resolve_model("gpt-5"),
            Err(Error::UnknownModel(m)) if m == "gpt-5"
        ));
    }
}
