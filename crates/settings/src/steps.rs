//! A route's steps: how a target is named (`provider` or
//! `provider:model`), and a step that is a group of equivalent targets
//! with weights (`{ group = ["a:m", "b:m"], weights = [2, 1] }`), read in
//! the file and through the admin API, and written back in the same shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use understudy_types::target::Target;

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
}

/// A group of a route, read: its members are the route's targets
/// `start .. start + weights.len()` (a group's members stand together in
/// the route's target list, in the order written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteGroup {
    pub start: usize,
    /// One positive weight per member.
    pub weights: Vec<u32>,
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
    let start = targets.len();
    for (j, spec) in g.group.iter().enumerate() {
        let t = parse_target(spec, providers).map_err(|m| (format!("{at}.group[{j}]"), m))?;
        targets.push(t);
    }
    Ok(RouteGroup { start, weights })
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
