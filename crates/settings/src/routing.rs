//! The routing: the `[routing]` table (the default route's primary,
//! fallback order and refusal policy) with the environment over it, and the
//! table the admin API reads and changes.

use std::collections::BTreeMap;

use serde::Deserialize;
use understudy_types::refusal::RefusalPolicy;
use understudy_types::target::Target;

use super::provider::ProviderSettings;
use super::source::{Blame, Env, SettingsError, Source};
use super::steps::{RouteGroups, RouteStep, read_steps, steps_of};

/// The `[routing]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// The primary provider of the default route.
    pub default: String,
    /// The fallback order; the primary is skipped where it appears.
    pub order: Vec<String>,
    pub refusal_policy: RefusalPolicy,
}

/// The routing table as the admin API reads and writes it: the fields of
/// the TOML `[routing]` table plus the named routes, each a list of steps
/// as in the file (`"provider:model"`, or a group
/// `{"group": [..], "weights": [..]}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct RoutingTable {
    pub default: String,
    pub order: Vec<String>,
    pub refusal_policy: RefusalPolicy,
    pub routes: BTreeMap<String, Vec<RouteStep>>,
}

/// A change to the routing table; absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingUpdate {
    pub default: Option<String>,
    pub order: Option<Vec<String>>,
    pub refusal_policy: Option<RefusalPolicy>,
    /// Replaces every named route: a route given as a plain list has no
    /// groups, whatever it had before.
    pub routes: Option<BTreeMap<String, Vec<RouteStep>>>,
}

/// The `[routing]` table of the file; what it leaves out is the default.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawRouting {
    default: String,
    order: Vec<String>,
    refusal_policy: Option<String>,
}

/// A routing with its named routes and their groups.
pub type Routed = (Routing, BTreeMap<String, Vec<Target>>, RouteGroups);

/// The field of a routing that [`check`] finds wrong.
#[derive(Debug, Clone, Copy)]
enum Field {
    Default,
    Order,
}

/// The table form of a routing and its routes (with their groups).
pub fn routing_table(
    routing: &Routing,
    routes: &BTreeMap<String, Vec<Target>>,
    groups: &RouteGroups,
) -> RoutingTable {
    RoutingTable {
        default: routing.default.clone(),
        order: routing.order.clone(),
        refusal_policy: routing.refusal_policy,
        routes: routes
            .iter()
            .map(|(name, targets)| {
                let groups = groups.get(name).map_or(&[][..], Vec::as_slice);
                (name.clone(), steps_of(targets, groups))
            })
            .collect(),
    }
}

/// The routing of the settings: the file's `[routing]` with the
/// environment over it, every provider it names known.
pub(super) fn read(
    raw: RawRouting,
    providers: &BTreeMap<String, ProviderSettings>,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<Routing, SettingsError> {
    let (default, default_from) = match env.get("AI_DEFAULT_PROVIDER") {
        Some(v) => (v.trim().to_owned(), Source::Env("AI_DEFAULT_PROVIDER")),
        None => (raw.default, Source::File("routing.default")),
    };
    let (order, order_from) = match env.get("AI_PROVIDER_FALLBACK_ORDER") {
        Some(v) => (
            v.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            Source::Env("AI_PROVIDER_FALLBACK_ORDER"),
        ),
        None => (raw.order, Source::File("routing.order")),
    };
    check(&default, &order, providers).map_err(|(field, message)| {
        let from = match field {
            Field::Default => default_from,
            Field::Order => order_from,
        };
        blame.source(from, message)
    })?;
    let refusal_policy = match env.get("UNDERSTUDY_REFUSAL_POLICY") {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|m| blame.env("UNDERSTUDY_REFUSAL_POLICY", m))?,
        None => match raw.refusal_policy {
            Some(v) => v
                .parse()
                .map_err(|m| blame.file("routing.refusal_policy", m))?,
            None => RefusalPolicy::default(),
        },
    };
    Ok(Routing {
        default,
        order,
        refusal_policy,
    })
}

/// `routing` and `routes` with `update` applied, validated by the same
/// rules as the file.
pub(super) fn apply_update(
    providers: &BTreeMap<String, ProviderSettings>,
    routing: &Routing,
    routes: &BTreeMap<String, Vec<Target>>,
    groups: &RouteGroups,
    update: RoutingUpdate,
) -> Result<Routed, understudy_types::Error> {
    let invalid = understudy_types::Error::invalid;
    let mut next = routing.clone();
    if let Some(default) = update.default {
        next.default = default;
    }
    if let Some(order) = update.order {
        next.order = order;
    }
    if let Some(policy) = update.refusal_policy {
        next.refusal_policy = policy;
    }
    check(&next.default, &next.order, providers).map_err(|(field, message)| {
        let name = match field {
            Field::Default => "default",
            Field::Order => "order",
        };
        invalid(name, message)
    })?;
    let (routes, groups) = match update.routes {
        None => (routes.clone(), groups.clone()),
        Some(specs) => {
            let mut out = BTreeMap::new();
            let mut out_groups = BTreeMap::new();
            for (name, targets) in specs {
                if name == "default" || name.is_empty() || name.contains(':') {
                    return Err(invalid("routes", format!("`{name}` cannot name a route")));
                }
                if targets.is_empty() {
                    return Err(invalid(
                        "routes",
                        format!("route `{name}` needs at least one target"),
                    ));
                }
                let (parsed, groups) = read_steps(&targets, providers, &name)
                    .map_err(|(at, m)| invalid("routes", format!("route `{at}`: {m}")))?;
                if !groups.is_empty() {
                    out_groups.insert(name.clone(), groups);
                }
                out.insert(name, parsed);
            }
            (out, out_groups)
        }
    };
    Ok((next, routes, groups))
}

/// The default route of `routing`: the primary, then the order without
/// the primary, each with its provider's default model.
pub(super) fn route_for(
    providers: &BTreeMap<String, ProviderSettings>,
    routing: &Routing,
) -> Vec<Target> {
    let mut names = vec![routing.default.as_str()];
    names.extend(
        routing
            .order
            .iter()
            .map(String::as_str)
            .filter(|n| *n != routing.default),
    );
    names
        .into_iter()
        .filter_map(|n| providers.get(n).map(|p| Target::new(n, &p.model)))
        .collect()
}

/// Whether a routing's primary and order name known providers, none of
/// them twice in the order; the first fault found, if not.
fn check(
    default: &str,
    order: &[String],
    providers: &BTreeMap<String, ProviderSettings>,
) -> Result<(), (Field, String)> {
    if !providers.contains_key(default) {
        return Err((Field::Default, unknown_provider(default, providers)));
    }
    for (i, name) in order.iter().enumerate() {
        if !providers.contains_key(name) {
            return Err((Field::Order, unknown_provider(name, providers)));
        }
        if order[..i].contains(name) {
            return Err((Field::Order, format!("`{name}` is listed twice")));
        }
    }
    Ok(())
}

fn unknown_provider(name: &str, providers: &BTreeMap<String, ProviderSettings>) -> String {
    let known: Vec<&str> = providers.keys().map(String::as_str).collect();
    format!("unknown provider `{name}` (known: {})", known.join(", "))
}

// === impl RawRouting ===

impl Default for RawRouting {
    fn default() -> Self {
        Self {
            default: "groq".into(),
            order: vec!["groq".into(), "gemini".into(), "claude".into()],
            refusal_policy: None,
        }
    }
}
