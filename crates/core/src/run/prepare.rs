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

use understudy_policy::balance::Member;

use crate::actor::router::View;
use crate::actor::target_stats::{GroupedRoute, TargetStat};
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
    looked: Option<crate::run::Looked>,
) -> Result<Run, understudy_types::Error> {
    let pinned = looked.as_ref().and_then(|l| l.pinned());
    let route_name = plan::route_name(&request.route, &view.routes);
    let route_options = route_name.and_then(|name| view.settings.route_options.get(name).copied());
    let route_timeouts = route_options.map(|o| o.timeouts).unwrap_or_default();
    // A request that chose its own routing walks it as asked: no group
    // choice, no session pin.
    let chose = super::caller::wish(&view.settings, &request).is_some();
    let grouped = route_name
        .and_then(|name| view.stats.grouped(name))
        .filter(|_| !chose);
    let pinned = pinned.filter(|_| !chose);
    // A route that hedges keeps its targets as resolved too: its calls
    // count in the stats of its targets as the route writes them (a
    // pattern's `provider:*`, a model name a cloud maps), where its p95 is
    // kept and read. A routing without hedging looks nothing up.
    let keeps = view.stats.hedges_any() && route_options.is_some_and(|o| o.hedge.is_some());
    let (plan, resolved) = plan_of(view, wide, &request, (grouped, keeps), pinned)?;
    let groups = grouped.map(|g| (&g.groups[..], &g.declared[..], resolved.targets()));
    let hedge = crate::run::hedging(&view.stats, route_name, route_options.as_ref(), groups);
    // A run of a route with groups (or one that hedges) counts its calls
    // in its members' stats, kept under the targets as the route writes
    // them.
    let declared = match grouped {
        Some(_) => None,
        None => crate::run::hedge::declared(view, route_name, hedge.is_some() && !chose),
    };
    let leases = slots(view, &plan, (grouped, declared), &resolved, hedge.is_some());
    let streams = stream_rules(&request, route_options.as_ref());
    let refusal = request
        .refusal_policy
        .or(route_options.and_then(|o| o.refusal_policy))
        .unwrap_or(view.routing.refusal_policy);
    let notes = request
        .trace
        .as_ref()
        .filter(|t| t.recording)
        .map(|_| notes(&plan, refusal, &request.chat, &view.settings));
    // The session, made here rather than on the run once made: a run moved
    // again costs more than the session.
    let affinity = looked.map(|l| l.into_run(&request.chat));
    Ok(Run {
        notes,
        route_label: request.route.label(),
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
        affinity,
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

/// Each of `plan`'s targets' slot: its provider's lease and, for a member
/// of a route's group (`grouped`), of a route that hedges (`declared`: its
/// targets as written) or when the run `hedges`, its stats.
fn slots(
    view: &View,
    plan: &plan::Plan,
    (grouped, declared): (Option<&GroupedRoute>, Option<&Vec<Target>>),
    resolved: &Resolved,
    hedges: bool,
) -> Vec<crate::run::Slot> {
    plan.targets
        .iter()
        .map(|t| crate::run::Slot {
            lease: view.leases.get(&t.provider).cloned(),
            pool: view.pools.get(&t.provider).cloned(),
            stats: match (grouped, declared) {
                (Some(g), _) => resolved.stat(view, g, t),
                (None, Some(declared)) => {
                    view.stats.get(as_declared(t, resolved.targets(), declared))
                }
                (None, None) => None,
            }
            .or_else(|| hedges.then(|| view.stats.get(t)).flatten())
            .cloned(),
            entered: false,
            provider: crate::run::Provided::of(
                view.settings.providers.get(&*t.provider),
                &t.model,
                &view.settings,
            ),
        })
        .collect()
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
    (grouped, keeps): (Option<&GroupedRoute>, bool),
    pinned: Option<&Target>,
) -> Result<(plan::Plan, Resolved), understudy_types::Error> {
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
    // A route with groups keeps where its resolved targets (its members)
    // are, for the group choice; any other pays nothing here.
    let route_members = Resolved::of(&route, grouped, keeps);
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
        route_members.balance(view, groups, &mut plan, now, seed);
    }
    // A session pinned to a member ejected for its error rate is chosen
    // for anew (its cache is worth less than a member that fails). The pin
    // is looked for among the plan's targets: where the route's went.
    let ejected = |t: &Target| {
        grouped.is_some_and(|g| {
            let Some(t) = plan.targets.iter().find(|p| *p == t) else {
                return false;
            };
            let m = route_members.stat(view, g, t).map(|s| s.member(1));
            m.and_then(|m| m.ejected_until)
                .is_some_and(|until| until > now)
        })
    };
    if let Some(pinned) = pinned.filter(|t| !ejected(t)) {
        // The pin is the primary only within the route's first step; where
        // it goes first, the group's choice was not made.
        let home = match grouped.and_then(|g| g.groups.iter().find(|g| g.start == 0)) {
            Some(first) => route_members.first_has(&plan, first.weights.len(), pinned),
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

/// The most targets of a route whose places [`Resolved`] keeps (a longer
/// one keeps its targets): a group of up to this many is ordered on the
/// stack.
const PLACES: usize = plan::SMALL_GROUP;

/// A route's targets as resolved, kept for the group choice and its
/// members' stats.
enum Resolved {
    /// None kept: the route has no groups and does not hedge.
    Nothing,
    /// Where each of them is, by the addresses of its provider's and model's
    /// names. The plan moves the resolved targets and never copies a name,
    /// and resolution leaves no two alike, so a plan's target is the
    /// route's target at the place whose addresses it has: found with no
    /// name compared and no target copied.
    Placed {
        at: [[usize; 2]; PLACES],
        len: usize,
    },
    /// The targets themselves, compared by name: a route that hedges, a
    /// long one, or one whose resolution merged two of its targets.
    Copied(Vec<Target>),
}

/// Where `t`'s names are (see [`Resolved::Placed`]).
fn addresses(t: &Target) -> [usize; 2] {
    [
        Arc::as_ptr(&t.provider).cast::<u8>() as usize,
        Arc::as_ptr(&t.model).cast::<u8>() as usize,
    ]
}

// === impl Resolved ===

impl Resolved {
    /// What `route` (as resolved) keeps: its places for a route with
    /// `grouped` that does not hedge, its targets for one that hedges or
    /// `keeps` them (a route that hedges), else nothing.
    fn of(route: &[Target], grouped: Option<&GroupedRoute>, keeps: bool) -> Self {
        match grouped {
            Some(g)
                if !g.hedges
                    && !keeps
                    && route.len() <= PLACES
                    && route.len() == g.declared.len() =>
            {
                let mut at = [[0; 2]; PLACES];
                for (a, t) in at.iter_mut().zip(route) {
                    *a = addresses(t);
                }
                Self::Placed {
                    at,
                    len: route.len(),
                }
            }
            Some(_) => Self::Copied(route.to_vec()),
            None if keeps => Self::Copied(route.to_vec()),
            None => Self::Nothing,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Nothing => 0,
            Self::Placed { len, .. } => *len,
            Self::Copied(targets) => targets.len(),
        }
    }

    /// The targets, when they were kept.
    fn targets(&self) -> &[Target] {
        match self {
            Self::Copied(targets) => targets,
            _ => &[],
        }
    }

    /// The place in the route of `t`, one of the plan's targets.
    fn position(&self, t: &Target) -> Option<usize> {
        match self {
            Self::Nothing => None,
            Self::Placed { at, len } => {
                let a = addresses(t);
                at[..*len].iter().position(|p| *p == a)
            }
            Self::Copied(targets) => targets.iter().position(|r| r == t),
        }
    }

    /// The stats of the plan's target `t` on route `g`: those of the target
    /// written at its place (a pattern's `provider:*`, a model name a cloud
    /// maps), else its own.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    fn stat<'v>(
        &self,
        view: &'v View,
        g: &'v GroupedRoute,
        t: &Target,
    ) -> Option<&'v Arc<TargetStat>> {
        let place = match self {
            // A group's route as most are: its places compared here.
            Self::Placed { at, len } => {
                let a = addresses(t);
                at[..*len].iter().position(|p| *p == a)
            }
            _ => self.position(t),
        };
        match place {
            Some(p) if self.len() == g.declared.len() => g.stats.get(p)?.as_ref(),
            _ => view.stats.get(t),
        }
    }

    /// Whether the route's first `n` targets include `pinned`.
    fn first_has(&self, plan: &plan::Plan, n: usize, pinned: &Target) -> bool {
        match self {
            Self::Placed { .. } => plan
                .targets
                .iter()
                .find(|t| *t == pinned)
                .and_then(|t| self.position(t))
                .is_some_and(|p| p < n),
            _ => self.targets().get(..n).is_some_and(|m| m.contains(pinned)),
        }
    }

    /// Orders the members of each of route `g`'s groups in `plan` by the
    /// group choice, from their stats' snapshot and `seed`; a route whose
    /// resolution merged two of its targets is left in written order.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    fn balance(
        &self,
        view: &View,
        g: &GroupedRoute,
        plan: &mut plan::Plan,
        now: Instant,
        seed: u64,
    ) {
        let Self::Placed { at: places, len } = self else {
            let resolved = self.targets();
            if resolved.len() == g.declared.len() {
                balance_copied(view, g, resolved, plan, now, seed);
            }
            return;
        };
        if plan.forced {
            return;
        }
        let places = &places[..*len];
        let valid = g
            .groups
            .iter()
            .filter(|group| group.start + group.weights.len() <= places.len());
        for (i, group) in valid.enumerate() {
            let mut at = [0; PLACES];
            let mut snapshot = [Member::default(); PLACES];
            let mut n = 0;
            for (place, &weight) in (group.start..).zip(&group.weights) {
                let found = plan
                    .targets
                    .iter()
                    .position(|t| addresses(t) == places[place]);
                if let Some(k) = found {
                    at[n] = k;
                    snapshot[n] = g.stats[place].as_ref().map_or(
                        Member {
                            weight,
                            ..Member::default()
                        },
                        |s| s.member(weight),
                    );
                    n += 1;
                }
            }
            plan::order_placed(
                plan,
                &at[..n],
                &snapshot[..n],
                group.start == 0,
                now,
                plan::group_seed(seed, i),
                &view.settings.balance,
            );
        }
    }
}

/// [`Resolved::balance`] for a route whose targets were copied
/// (`resolved`, as long as the route as written).
fn balance_copied(
    view: &View,
    g: &GroupedRoute,
    resolved: &[Target],
    plan: &mut plan::Plan,
    now: Instant,
    seed: u64,
) {
    let members = g.groups.iter().filter_map(|group| {
        let targets = resolved.get(group.start..group.start + group.weights.len())?;
        Some((targets, group.weights.as_slice(), group.start == 0))
    });
    plan::balance_groups(
        plan,
        members,
        |t, weight| {
            view.stats
                .member(as_declared(t, resolved, &g.declared), weight)
        },
        now,
        seed,
        &view.settings.balance,
    );
}

/// How `request` streams: its own headers, else its route's settings; and
/// which of the plan's targets (their `slots`) accept an assistant prefill
/// (to continue a cut answer).
fn stream_rules(
    request: &GenerateRequest,
    route_options: Option<&understudy_settings::RouteOptions>,
) -> crate::run::StreamRules {
    crate::run::StreamRules {
        commit: request
            .stream_commit
            .or(route_options.and_then(|o| o.stream_commit))
            .unwrap_or_default(),
        continue_after_cut: request
            .continue_after_cut
            .or(route_options.and_then(|o| o.continue_after_cut))
            .unwrap_or(false),
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
    fn a_target_reads_its_providers_settings_as_found_at_the_plan() {
        let text = format!(
            "{TOML}\n[providers.claude]\napi_key = \"k-claude-0123456789\"\n\
             forward_traceparent = true\n[timeouts]\nattempt = 7\n"
        );
        let settings = Settings::from_toml_str(&text, |_| None).unwrap();
        let of = |provider: &str, model: &str| {
            crate::run::Provided::of(settings.providers.get(provider), model, &settings)
        };
        // (provider, model, price, prefill, credit, traceparent)
        type Case<'a> = (&'a str, &'a str, Option<(f64, f64)>, bool, bool, bool);
        let cases: [Case; 5] = [
            ("groq", "groq-model", Some((1.0, 2.0)), false, false, false),
            // A model's own price over its provider's.
            (
                "openai",
                "cheap-model",
                Some((0.1, 0.2)),
                false,
                false,
                false,
            ),
            ("free", "free-model", None, false, false, false),
            // Anthropic's API: a prefill, the fallback credit.
            ("claude", "claude-x", None, true, true, true),
            // A provider the settings do not have: nothing of its own.
            ("gone", "m", None, false, false, false),
        ];
        for (provider, model, price, prefill, credit, trace) in cases {
            let p = of(provider, model);
            let name = format!("{provider}:{model}");
            assert_eq!(p.price, price, "{name}");
            assert_eq!(p.prefill, prefill, "{name}");
            assert_eq!(p.takes_credit, credit, "{name}");
            assert_eq!(p.forward_traceparent, trace, "{name}");
            let configured = settings.providers.get(provider);
            assert_eq!(
                p.timeouts,
                configured.map_or(settings.timeouts, |c| c.timeouts),
                "{name}"
            );
            assert_eq!(
                p.protocol,
                configured.map(|c| c.protocol_for(model)),
                "{name}"
            );
        }
        assert_eq!(
            of("gone", "m").timeouts.attempt,
            std::time::Duration::from_secs(7)
        );
    }

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
