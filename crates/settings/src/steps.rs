//! A route's steps: how a target is named (`provider` or
//! `provider:model`), and a step that is a group of equivalent targets
//! with weights (`{ group = ["a:m", "b:m"], weights = [2, 1] }`) and
//! perhaps its own hedging (`hedge = { .. }`, between its members), read
//! in the file and through the admin API, and written back in the same
//! shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use understudy_types::target::Target;

use super::hedge::{HedgeSettings, HedgeSpec};
use super::provider::ProviderSettings;

/// One step of a route as written: a target (`provider` or
/// `provider:model`), or a group of equivalent targets with weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RouteStep {
    Target(String),
    Group(GroupSpec),
}

/// A group step as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// The equivalent targets.
    pub group: Vec<String>,
    /// One positive weight per target; equal when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Vec<u32>>,
    /// Hedging between the group's members; none unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeSpec>,
}

/// A group of a route, read: its members are the route's targets
/// `start .. start + weights.len()` (a group's members stand together in
/// the route's target list, in the order written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteGroup {
    pub start: usize,
    /// One positive weight per member.
    pub weights: Vec<u32>,
    /// The group's own hedging: a member serving is raced by the next
    /// member only (it wins over the route's for the members).
    pub hedge: Option<HedgeSettings>,
}

/// The groups of the routes that have any, by route name.
pub type RouteGroups = BTreeMap<String, Vec<RouteGroup>>;

/// A route's steps read against the known providers: its target list
/// (groups laid out in place) and its groups. `at` is the TOML path of the
/// step list, for errors (`routes.NAME` or `routes.NAME.targets`).
pub fn read_steps(
    steps: &[RouteStep],
    providers: &BTreeMap<String, ProviderSettings>,
    at: &str,
) -> Result<(Vec<Target>, Vec<RouteGroup>), (String, String)> {
    let mut targets = Vec::with_capacity(steps.len());
    let mut groups = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            // A plain target's error names the route, as it always has.
            RouteStep::Target(spec) => {
                targets.push(parse_target(spec, providers).map_err(|m| (at.to_owned(), m))?);
            }
            RouteStep::Group(g) => {
                let here = format!("{at}[{i}]");
                let group = read_group(g, providers, &here, &mut targets)?;
                groups.push(group);
            }
        }
    }
    for g in &groups {
        for member in &targets[g.start..g.start + g.weights.len()] {
            if targets.iter().filter(|t| *t == member).count() > 1 {
                return Err((
                    at.to_owned(),
                    format!("`{member}` is in a group and in another step of the route"),
                ));
            }
        }
    }
    Ok((targets, groups))
}

/// One group step read, its members appended to `targets`.
fn read_group(
    g: &GroupSpec,
    providers: &BTreeMap<String, ProviderSettings>,
    at: &str,
    targets: &mut Vec<Target>,
) -> Result<RouteGroup, (String, String)> {
    if g.group.is_empty() {
        return Err((
            format!("{at}.group"),
            "a group needs at least one target".into(),
        ));
    }
    let weights = match &g.weights {
        None => vec![1; g.group.len()],
        Some(w) if w.len() != g.group.len() => {
            return Err((
                format!("{at}.weights"),
                format!(
                    "{} weights for {} targets: give one weight per target",
                    w.len(),
                    g.group.len()
                ),
            ));
        }
        Some(w) if w.contains(&0) => {
            return Err((
                format!("{at}.weights"),
                "weights are positive integers".into(),
            ));
        }
        Some(w) => w.clone(),
    };
    let hedge = g
        .hedge
        .as_ref()
        .map(|h| h.read(&format!("{at}.hedge")))
        .transpose()?;
    let start = targets.len();
    for (j, spec) in g.group.iter().enumerate() {
        let t = parse_target(spec, providers).map_err(|m| (format!("{at}.group[{j}]"), m))?;
        targets.push(t);
    }
    Ok(RouteGroup {
        start,
        weights,
        hedge,
    })
}

/// A route's steps as written, from its targets and groups.
pub fn steps_of(targets: &[Target], groups: &[RouteGroup]) -> Vec<RouteStep> {
    let mut steps = Vec::with_capacity(targets.len());
    let mut i = 0;
    while i < targets.len() {
        match groups.iter().find(|g| g.start == i) {
            Some(g) => {
                let end = (i + g.weights.len()).min(targets.len());
                let equal = g.weights.iter().all(|w| *w == g.weights[0]);
                steps.push(RouteStep::Group(GroupSpec {
                    group: targets[i..end].iter().map(ToString::to_string).collect(),
                    weights: (!equal).then(|| g.weights.clone()),
                    hedge: g.hedge.as_ref().map(HedgeSettings::written),
                }));
                i = end;
            }
            None => {
                steps.push(RouteStep::Target(targets[i].to_string()));
                i += 1;
            }
        }
    }
    steps
}

/// Parses `provider` or `provider:model` against the known providers.
pub fn parse_target(
    spec: &str,
    providers: &BTreeMap<String, ProviderSettings>,
) -> Result<Target, String> {
    let (name, model) = match spec.split_once(':') {
        Some((name, model)) => (name.trim(), Some(model.trim())),
        None => (spec.trim(), None),
    };
    let Some(p) = providers.get(name) else {
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(format!(
            "unknown provider `{name}` in `{spec}` (known: {})",
            known.join(", ")
        ));
    };
    match model {
        Some("") => Err(format!("`{spec}` names no model after the colon")),
        Some(m) => Ok(Target::new(name, m)),
        None => Ok(Target::new(name, &p.model)),
    }
}

// === impl RouteStep ===

impl RouteStep {
    /// The targets this step names, as written.
    pub fn targets(&self) -> &[String] {
        match self {
            Self::Target(t) => std::slice::from_ref(t),
            Self::Group(g) => &g.group,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{HedgeAfter, RoutingUpdate, Settings, routing_table};

    fn load(toml: &str) -> Result<Settings, String> {
        Settings::from_toml_str(toml, |_| None).map_err(|e| e.to_string())
    }

    const GROUP_HEDGE: &str = r#"
[routes]
pair = [{ group = ["groq:a", "gemini:b"], weights = [2, 1], hedge = { after = "p95", fallback = "800ms" } }, "claude:c"]
plain = [{ group = ["groq:a", "gemini:b"] }]
"#;

    #[test]
    fn a_group_reads_its_own_hedge() {
        let s = load(GROUP_HEDGE).unwrap();
        let hedge = s.route_groups["pair"][0].hedge.unwrap();
        assert_eq!(
            hedge.after,
            HedgeAfter::P95 {
                until_known: Some(Duration::from_millis(800))
            }
        );
        assert_eq!(hedge.max_share_ppm, 50_000);
        assert_eq!(s.route_groups["plain"][0].hedge, None);
        // The route itself does not hedge: only the group's members do.
        assert!(!s.route_options.contains_key("pair"));
    }

    #[test]
    fn a_groups_bad_hedge_names_its_toml_path() {
        // (the route, what the error must say)
        let cases = [
            (
                r#"pair = [{ group = ["groq:a", "gemini:b"], hedge = { after = "soon" } }]"#,
                "routes.pair[0].hedge.after",
            ),
            (
                r#"pair = ["claude:c", { group = ["groq:a"], hedge = { after = "1s", max_share = 2.0 } }]"#,
                "routes.pair[1].hedge.max_share",
            ),
            (
                r#"pair = { targets = [{ group = ["groq:a"], hedge = { after = "1s", fallback = "2s" } }] }"#,
                "routes.pair.targets[0].hedge.fallback",
            ),
        ];
        for (route, at) in cases {
            let e = load(&format!("[routes]\n{route}\n")).unwrap_err();
            assert!(e.contains(at), "{route}: {e}");
        }
    }

    #[test]
    fn the_admin_table_writes_a_groups_hedge_back_as_read() {
        let s = load(GROUP_HEDGE).unwrap();
        let table = routing_table(&s.routing, &s.routes, &s.route_groups);
        // Serialized in the file's shape (the admin API's JSON is the same
        // tree).
        let tree = toml::Value::try_from(&table).unwrap();
        let written: toml::Value = toml::from_str(
            r#"
group = ["groq:a", "gemini:b"]
weights = [2, 1]
hedge = { after = "p95", fallback = "800ms" }
"#,
        )
        .unwrap();
        assert_eq!(tree["routes"]["pair"][0], written);
        let plain: toml::Value = toml::from_str(r#"group = ["groq:a", "gemini:b"]"#).unwrap();
        assert_eq!(tree["routes"]["plain"][0], plain);
        // What was read writes back unchanged through the API's update.
        let update = RoutingUpdate {
            routes: Some(tree["routes"].clone().try_into().unwrap()),
            ..RoutingUpdate::default()
        };
        let (routing, routes, groups) = s
            .apply_routing_update(&s.routing, &s.routes, &s.route_groups, update)
            .unwrap();
        assert_eq!(groups, s.route_groups);
        assert_eq!(routing_table(&routing, &routes, &groups), table);
        // A bad hedge through the API names the step.
        let bad = RoutingUpdate {
            routes: Some(
                toml::from_str(r#"pair = [{ group = ["groq:a"], hedge = { after = "later" } }]"#)
                    .unwrap(),
            ),
            ..RoutingUpdate::default()
        };
        let e = s
            .apply_routing_update(&s.routing, &s.routes, &s.route_groups, bad)
            .unwrap_err();
        assert!(e.to_string().contains("pair[0].hedge.after"), "{e}");
    }
}
