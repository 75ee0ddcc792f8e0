//! A run planned from the router's published view: the route resolved (a
//! client's model name included), the plan built — leaving out targets
//! whose breaker the board shows open, forcing the primary when every
//! target is open, and ordering each group of equivalent targets by the
//! group choice — capabilities checked, and the run's context gathered.

use std::sync::Arc;
use std::time::Instant;

use understudy_policy::decide::{Mode, Rules};
use understudy_policy::plan::{self, Unavailable};
use understudy_policy::timeouts::request_timeout;
use understudy_types::Target;

use crate::actor::router::View;
use crate::engine_wide::EngineWide;
use crate::generation::GenerateRequest;
use crate::run::Run;
use crate::trace::notes::{Content, Skip, TraceNotes};

/// A pin's fallbacks (the default route's other targets) kept to those a
/// client record's `models` allow; the pin itself was allowed at admission.
/// A route the record names is its unit: its fallbacks all serve it.
fn scope_pin(
    route: &mut Vec<understudy_types::target::Target>,
    record: &understudy_settings::ClientRecord,
    asked: &understudy_types::RouteSelector,
    routes: &std::collections::BTreeMap<String, Vec<understudy_types::target::Target>>,
) {
    use understudy_types::RouteSelector;
    let pinned = match asked {
        RouteSelector::Pin { .. } => true,
        RouteSelector::Model(name) => {
            name != "default" && plan::route_name(asked, routes).is_none()
        }
        _ => false,
    };
    if !pinned || record.models.is_empty() {
        return;
    }
    let mut first = true;
    route.retain(|t| {
        std::mem::take(&mut first) || record.allows(&format!("{}:{}", t.provider, t.model))
    });
}

/// A recorded trace's first notes: the policy, the targets left out of
/// the plan for their breaker (or a stopped actor), and the request's
/// content where the operator opted in.
fn notes(
    plan: &plan::Plan,
    refusal: understudy_types::RefusalPolicy,
    chat: &understudy_types::ChatRequest,
    settings: &understudy_settings::Settings,
) -> Box<TraceNotes> {
    let skips = plan
        .skipped
        .iter()
        .filter(|(_, why)| why.is_news())
        .map(|(t, why)| Skip {
            provider: t.provider.to_string(),
            model: t.model.to_string(),
            reason: *why,
            at_ms: 0.0,
        })
        .collect();
    Box::new(TraceNotes {
        refusal_policy: refusal.as_str(),
        skips,
        content: settings
            .telemetry
            .capture_content
            .then(|| Content::of_request(chat)),
        ..TraceNotes::default()
    })
}

/// The prices of every target `request`'s route (or pin, with the
/// fallbacks its client's record allows) may be served by, breakers open
/// or not: a client's budget reserves the request's worst case at the
/// dearest. A route that does not resolve has none (the run refuses it).
pub(crate) fn route_prices(view: &View, request: &GenerateRequest) -> Vec<crate::tenants::Price> {
    prices_of_route(&view.settings, &view.default_route, &view.routes, request)
}

/// [`route_prices`] from the routing in force: `default_route` and
/// `routes`.
fn prices_of_route(
    settings: &understudy_settings::Settings,
    default_route: &[understudy_types::target::Target],
    routes: &std::collections::BTreeMap<String, Vec<understudy_types::target::Target>>,
    request: &GenerateRequest,
) -> Vec<crate::tenants::Price> {
    let Ok(mut route) = plan::resolve(&request.route, settings, default_route, routes) else {
        return Vec::new();
    };
    if let Some(record) = request.tenant.as_deref() {
        scope_pin(&mut route, record, &request.route, routes);
    }
    let Ok(route) = super::caller::route(request, route, (settings, default_route, routes)) else {
        return Vec::new();
    };
    route
        .iter()
        .filter_map(|t| {
            let p = settings.providers.get(&*t.provider)?.price_of(&t.model)?;
            Some((p.input_per_mtok, p.output_per_mtok))
        })
        .collect()
}

/// Plans `request` from the router's `view` (and the breakers in `wide`)
/// and gathers what its run needs: a pure read, on the caller's task.
pub(crate) fn prepare(
    view: &View,
    wide: &Arc<EngineWide>,
    request: GenerateRequest,
    started: Instant,
    mode: Mode,
    pinned: Option<&Target>,
) -> Result<Run, understudy_types::Error> {
    let route_name = plan::route_name(&request.route, &view.routes);
    let route_options = route_name.and_then(|name| view.settings.route_options.get(name).copied());
    let route_timeouts = route_options.map(|o| o.timeouts).unwrap_or_default();
    // A request that chose its own routing walks it as asked: no group
    // choice, no session pin.
    let chose = super::caller::wish(&view.settings, &request).is_some();
    let grouped = route_name
        .and_then(|name| grouped(view, name))
        .filter(|_| !chose);
    let pinned = pinned.filter(|_| !chose);
    // A route that hedges keeps its targets as resolved too: its calls
    // count in the stats of its targets as the route writes them (a
    // pattern's `provider:*`, a model name a cloud maps), where its p95 is
    // kept and read. A routing without hedging looks nothing up.
    let keeps = view.stats.hedges_any() && route_options.is_some_and(|o| o.hedge.is_some());
    let (plan, resolved) = plan_of(view, wide, &request, (grouped, keeps), pinned)?;
    let groups = grouped.map(|(g, declared)| (&g[..], &declared[..], &resolved[..]));
    let hedge = crate::run::hedging(&view.stats, route_name, route_options.as_ref(), groups);
    // A run of a route with groups (or one that hedges) counts its calls
    // in its members' stats, kept under the targets as the route writes
    // them.
    let declared = grouped
        .map(|(_, declared)| declared)
        .or_else(|| crate::run::hedge::declared(view, route_name, hedge.is_some() && !chose));
    let leases = plan
        .targets
        .iter()
        .map(|t| crate::run::Slot {
            lease: view.leases.get(&t.provider).cloned(),
            pool: view.pools.get(&t.provider).cloned(),
            stats: declared
                .and_then(|declared| view.stats.get(as_declared(t, &resolved, declared)))
                .or_else(|| hedge.as_ref().and_then(|_| view.stats.get(t)))
                .cloned(),
            entered: false,
        })
        .collect();
    let streams = stream_rules(view, &plan, &request, route_options.as_ref());
    let refusal = request
        .refusal_policy
        .or(route_options.and_then(|o| o.refusal_policy))
        .unwrap_or(view.routing.refusal_policy);
    let notes = request
        .trace
        .as_ref()
        .filter(|t| t.recording)
        .map(|_| notes(&plan, refusal, &request.chat, &view.settings));
    Ok(Run {
        notes,
        route_label: request.route.to_string(),
        api: request.api,
        omitted_tools: request.omitted_tools.clone(),
        wide: Arc::clone(wide),
        reservation: None,
        trace: request.trace.clone(),
        use_cache: request.cache,
        client: request.client,
        deadline: started
            + request_timeout(
                view.settings.timeouts.request,
                &route_timeouts,
                request.timeout,
            ),
        route_timeouts,
        streams,
        probe_held: std::sync::atomic::AtomicUsize::new(crate::run::NO_PROBE),
        keys_tried: Box::default(),
        passed_over: Vec::new(),
        credit: None,
        hedge,
        affinity: None,
        rules: Rules {
            mode,
            refusal,
            rate_limit_max_wait: view.settings.rate_limit_max_wait,
            no_fallback: request.no_fallback,
            spend_cap: wide.spend.is_some(),
        },
        request_id: request
            .request_id
            .unwrap_or_else(crate::generation::new_request_id),
        plan,
        chat: request.chat,
        settings: Arc::clone(&view.settings),
        leases,
        supervisor: view.supervisor.clone(),
        started,
    })
}

/// `request`'s plan: its route resolved (a pin kept to what its client's
/// record allows), the targets whose breaker is open or whose provider is
/// out left out, each group's members ordered by the group choice, the
/// target its session is `pinned` to first, and the capabilities it needs
/// checked; and its targets as resolved, kept when its route has groups
/// or (`keeps`) hedges.
fn plan_of(
    view: &View,
    wide: &EngineWide,
    request: &GenerateRequest,
    (grouped, keeps): (Option<Grouped<'_>>, bool),
    pinned: Option<&Target>,
) -> Result<(plan::Plan, Vec<Target>), understudy_types::Error> {
    let mut route = plan::resolve(
        &request.route,
        &view.settings,
        &view.default_route,
        &view.routes,
    )?;
    if let Some(record) = request.tenant.as_deref() {
        scope_pin(&mut route, record, &request.route, &view.routes);
    }
    let route = super::caller::route(
        request,
        route,
        (&view.settings, &view.default_route, &view.routes),
    )?;
    let now = crate::runtime_clock::now();
    // A route with groups keeps its resolved targets (its members) for the
    // group choice; any other pays nothing here.
    let route_members = match grouped {
        Some(_) => route.clone(),
        None if keeps => route.clone(),
        None => Vec::new(),
    };
    let mut plan = plan::plan(route, |t| {
        view.availability(&t.provider)
            .or_else(|| crate::probe::skip(&wide.ready, t))
            .or_else(|| {
                wide.board
                    .is_open(t, now)
                    .then_some(Unavailable::BreakerOpen)
            })
    })
    .ok_or_else(|| understudy_types::Error::NoProviderAvailable("the route is empty".into()))?;
    if let Some(groups) = grouped {
        // A session that goes where it is pinned takes no turn of the
        // seed sequence, so new sessions alone split by the weights.
        let seed = match pinned {
            Some(p) if plan.targets.contains(p) => fastrand::u64(..),
            _ => view.stats.next_seed(),
        };
        balance(view, groups, &route_members, &mut plan, now, seed);
    }
    // A session pinned to a member ejected for its error rate is chosen
    // for anew (its cache is worth less than a member that fails).
    let ejected = |t: &Target| {
        grouped.is_some_and(|(_, declared)| {
            let m = view
                .stats
                .member(as_declared(t, &route_members, declared), 1);
            m.ejected_until.is_some_and(|until| until > now)
        })
    };
    if let Some(pinned) = pinned.filter(|t| !ejected(t)) {
        // The pin is the primary only within the route's first step; where
        // it goes first, the group's choice was not made.
        let home = match grouped.and_then(|(g, _)| g.iter().find(|g| g.start == 0)) {
            Some(first) => route_members
                .get(..first.weights.len())
                .is_some_and(|m| m.contains(pinned)),
            None => plan.primary == *pinned,
        };
        if plan::pin_first(&mut plan, pinned, home) {
            plan.balanced = false;
        }
    }
    let needs = request.chat.needs();
    crate::run::fit::check(view, request, &mut plan, needs.vision)?;
    plan::check_capabilities(&mut plan, needs, request.no_fallback, |t| {
        let p = view.settings.providers.get(&*t.provider)?;
        plan::lacks(p.capabilities_of(&t.model), p.protocol_for(&t.model), needs)
    })?;
    Ok((plan, route_members))
}

/// The route's target as written (a pattern's `provider:*`, a model name a
/// cloud maps) at the place `t` holds in the route as `resolved`; `t`
/// itself where the two do not line up.
fn as_declared<'t>(t: &'t Target, resolved: &[Target], declared: &'t [Target]) -> &'t Target {
    if resolved.len() != declared.len() {
        return t;
    }
    resolved
        .iter()
        .position(|r| r == t)
        .and_then(|i| declared.get(i))
        .unwrap_or(t)
}

/// The groups of the route named `name` and its targets as written, when
/// it has groups (without a group anywhere, nothing is looked up).
fn grouped<'v>(view: &'v View, name: &str) -> Option<Grouped<'v>> {
    if view.groups.is_empty() {
        return None;
    }
    Some((view.groups.get(name)?, view.routes.get(name)?))
}

/// A route's groups and its targets as written.
type Grouped<'v> = (&'v Vec<understudy_settings::RouteGroup>, &'v Vec<Target>);

/// Orders the members of each of the route's `groups` in `plan` by the
/// group choice, from the stats' snapshot and `seed`. `resolved` is
/// the route as resolved (a group's members at its positions); a route
/// whose resolution merged two of its targets is left in written order.
fn balance(
    view: &View,
    (groups, declared): Grouped<'_>,
    resolved: &[Target],
    plan: &mut plan::Plan,
    now: Instant,
    seed: u64,
) {
    if resolved.len() != declared.len() {
        return;
    }
    let members = groups.iter().filter_map(|g| {
        let targets = resolved.get(g.start..g.start + g.weights.len())?;
        Some((targets, g.weights.as_slice(), g.start == 0))
    });
    plan::balance_groups(
        plan,
        members,
        |t, weight| {
            view.stats
                .member(as_declared(t, resolved, declared), weight)
        },
        now,
        seed,
        &view.settings.balance,
    );
}

/// How `request` streams: its own headers, else its route's settings; and
/// which of `plan`'s targets accept an assistant prefill (to continue a
/// cut answer).
fn stream_rules(
    view: &View,
    plan: &plan::Plan,
    request: &GenerateRequest,
    route_options: Option<&understudy_settings::RouteOptions>,
) -> crate::run::StreamRules {
    let prefill = plan
        .targets
        .iter()
        .map(|t| {
            view.settings.providers.get(&*t.provider).is_some_and(|p| {
                p.protocol_for(&t.model) == understudy_types::protocol::Protocol::Messages
                    || p.capabilities_of(&t.model).assistant_prefill
            })
        })
        .collect();
    crate::run::StreamRules {
        commit: request
            .stream_commit
            .or(route_options.and_then(|o| o.stream_commit))
            .unwrap_or_default(),
        continue_after_cut: request
            .continue_after_cut
            .or(route_options.and_then(|o| o.continue_after_cut))
            .unwrap_or(false),
        prefill,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use understudy_settings::{RawClient, Settings};
    use understudy_types::ChatRequest;
    use understudy_types::RouteSelector;

    use super::*;
    use crate::tenants::Price;

    const TOML: &str = r#"
[routing]
default = "groq"
order = ["groq", "openai"]
[providers.groq]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-groq-0123456789"
model = "groq-model"
price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }
[providers.openai]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-openai-0123456789"
model = "openai-model"
price = { input_per_mtok = 5.0, output_per_mtok = 10.0 }
prices = { "cheap-model" = { input_per_mtok = 0.1, output_per_mtok = 0.2 } }
[providers.free]
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key = "k-free-0123456789"
model = "free-model"
[routes]
fast = ["groq", "free"]
"#;

    #[test]
    fn a_budget_is_priced_at_every_target_its_route_can_reach() {
        let settings = Settings::from_toml_str(TOML, |_| None).unwrap();
        let openai_only = Arc::new(
            RawClient {
                name: Some("scoped".into()),
                key: Some("sk-scoped-0123456789".into()),
                models: Some(vec!["openai:*".into()]),
                ..RawClient::default()
            }
            .read("", &|_| None)
            .unwrap(),
        );
        // (what the request names, its record's scope, the prices reached)
        let cases: [(RouteSelector, Option<&Arc<_>>, &[Price]); 7] = [
            (RouteSelector::Default, None, &[(1.0, 2.0), (5.0, 10.0)]),
            // A target without a price spends nothing.
            (RouteSelector::Model("fast".into()), None, &[(1.0, 2.0)]),
            // A pin is priced at its model, and its fallbacks at theirs.
            (
                RouteSelector::Model("openai:cheap-model".into()),
                None,
                &[(0.1, 0.2), (1.0, 2.0)],
            ),
            // A record's scope leaves out fallbacks it could not reach.
            (
                RouteSelector::Model("openai:cheap-model".into()),
                Some(&openai_only),
                &[(0.1, 0.2)],
            ),
            (RouteSelector::pin("groq"), None, &[(1.0, 2.0), (5.0, 10.0)]),
            // Unknown routes are refused by the run: nothing to reserve.
            (RouteSelector::Named("nowhere".into()), None, &[]),
            (RouteSelector::Model("nobody:x".into()), None, &[]),
        ];
        for (route, tenant, prices) in cases {
            let request = GenerateRequest {
                route: route.clone(),
                tenant: tenant.cloned(),
                ..GenerateRequest::new(ChatRequest::user("hi"))
            };
            let got = prices_of_route(
                &settings,
                &settings.default_route(),
                &settings.routes,
                &request,
            );
            assert_eq!(got, prices, "{route}");
        }
    }
}
