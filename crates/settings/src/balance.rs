//! Tiers of equivalent targets: a route step that is a group of targets
//! with weights (`{ group = ["a:m", "b:m"], weights = [2, 1] }`), how a
//! route's steps are read (in the file and through the admin API), and
//! the `[balance]` table that tunes the choice within a group.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use understudy_types::target::Target;

use super::provider::ProviderSettings;
use super::routing::parse_target;
use super::source::{Blame, SettingsError};
use super::timeouts::seconds_or;

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

/// The `[balance]` table: how a member of a group is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalanceSettings {
    /// The weight of the newest sample in a member's smoothed time to
    /// first output (an exponentially weighted moving average), in (0, 1].
    pub ttft_smoothing: f64,
    /// A member whose recent error rate reaches this share of its recent
    /// calls is ejected (0 < rate <= 1).
    pub eject_error_rate: f64,
    /// Recent calls a member needs before its error rate can eject it.
    pub eject_min_calls: u32,
    /// How long an ejection lasts.
    pub eject_for: Duration,
    /// The share of a group's requests an ejected member still gets first,
    /// so that a recovered member is seen to be (0 <= floor < 0.5).
    pub ejected_floor: f64,
}

/// The `[balance]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawBalance {
    ttft_smoothing: Option<f64>,
    eject_error_rate: Option<f64>,
    eject_min_calls: Option<u32>,
    eject_for: Option<f64>,
    ejected_floor: Option<f64>,
}

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

/// The `[balance]` settings: the defaults with what the file sets.
pub(super) fn read(raw: RawBalance, blame: &Blame) -> Result<BalanceSettings, SettingsError> {
    let d = BalanceSettings::default();
    let share = |v: Option<f64>, default: f64, key: &str, ok: fn(f64) -> bool, what: &str| match v {
        None => Ok(default),
        Some(v) if v.is_finite() && ok(v) => Ok(v),
        Some(_) => Err(blame.file(format!("balance.{key}"), what.into())),
    };
    let ttft_smoothing = share(
        raw.ttft_smoothing,
        d.ttft_smoothing,
        "ttft_smoothing",
        |v| v > 0.0 && v <= 1.0,
        "must be above 0 and at most 1",
    )?;
    let eject_error_rate = share(
        raw.eject_error_rate,
        d.eject_error_rate,
        "eject_error_rate",
        |v| v > 0.0 && v <= 1.0,
        "must be above 0 and at most 1",
    )?;
    let ejected_floor = share(
        raw.ejected_floor,
        d.ejected_floor,
        "ejected_floor",
        |v| (0.0..0.5).contains(&v),
        "must be at least 0 and below 0.5",
    )?;
    let eject_min_calls = match raw.eject_min_calls {
        Some(0) => {
            return Err(blame.file("balance.eject_min_calls", "must be at least 1".into()));
        }
        v => v.unwrap_or(d.eject_min_calls),
    };
    let eject_for =
        seconds_or(raw.eject_for, d.eject_for).map_err(|m| blame.file("balance.eject_for", m))?;
    Ok(BalanceSettings {
        ttft_smoothing,
        eject_error_rate,
        eject_min_calls,
        eject_for,
        ejected_floor,
    })
}

// === impl BalanceSettings ===

impl Default for BalanceSettings {
    /// A new sample weighs 0.3 (about the last five calls count); half of
    /// the last ten or more calls failing ejects a member for 30 seconds,
    /// during which it still gets 2 % of the group's requests.
    fn default() -> Self {
        Self {
            ttft_smoothing: 0.3,
            eject_error_rate: 0.5,
            eject_min_calls: 10,
            eject_for: Duration::from_secs(30),
            ejected_floor: 0.02,
        }
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
    use super::{GroupSpec, RouteStep};
    use crate::Settings;

    fn load(toml: &str) -> Result<Settings, String> {
        Settings::from_toml_str(toml, |_| None).map_err(|e| e.to_string())
    }

    #[test]
    fn a_group_lays_its_members_out_in_place_with_their_weights() {
        let s = load(
            r#"
[routes]
tier = ["openai:x", { group = ["groq:a", "gemini:b", "claude:c"], weights = [2, 1, 1] }, "openai:y"]
even = { targets = [{ group = ["groq:a", "gemini:b"] }] }
"#,
        )
        .unwrap();
        let names: Vec<String> = s.routes["tier"].iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            ["openai:x", "groq:a", "gemini:b", "claude:c", "openai:y"]
        );
        assert_eq!(
            s.route_groups["tier"],
            [super::RouteGroup {
                start: 1,
                weights: vec![2, 1, 1]
            }]
        );
        assert_eq!(s.route_groups["even"][0].weights, [1, 1]);
        assert!(!s.route_groups.contains_key("plain"));
        let steps = super::steps_of(&s.routes["tier"], &s.route_groups["tier"]);
        assert_eq!(
            steps,
            [
                RouteStep::Target("openai:x".into()),
                RouteStep::Group(GroupSpec {
                    group: vec!["groq:a".into(), "gemini:b".into(), "claude:c".into()],
                    weights: Some(vec![2, 1, 1]),
                }),
                RouteStep::Target("openai:y".into()),
            ]
        );
    }

    #[test]
    fn bad_groups_are_refused_naming_the_setting() {
        // (the route, what the error must say)
        let cases = [
            (
                r#"r = [{ group = ["groq:a", "gemini:b"], weights = [1] }]"#,
                "routes.r[0].weights",
            ),
            (
                r#"r = [{ group = ["groq:a"], weights = [0] }]"#,
                "routes.r[0].weights",
            ),
            (r#"r = [{ group = [] }]"#, "routes.r[0].group"),
            (
                r#"r = { targets = ["openai", { group = ["groq:a", "nope:b"] }] }"#,
                "routes.r.targets[1].group[1]",
            ),
            (
                r#"r = [{ group = ["groq:a", "gemini:b"] }, "groq:a"]"#,
                "in a group and in another step",
            ),
        ];
        for (route, want) in cases {
            let err = load(&format!("[routes]\n{route}\n")).unwrap_err();
            assert!(err.contains(want), "{route}: {err}");
        }
        let err = load("[balance]\nejected_floor = 0.7\n").unwrap_err();
        assert!(err.contains("balance.ejected_floor"), "{err}");
        let err = load("[balance]\nfloor = 0.1\n").unwrap_err();
        assert!(err.contains("balance"), "{err}");
    }

    #[test]
    fn the_balance_table_reads_over_its_defaults() {
        let s = load("[balance]\neject_for = 5\neject_min_calls = 4\n").unwrap();
        assert_eq!(s.balance.eject_for, std::time::Duration::from_secs(5));
        assert_eq!(s.balance.eject_min_calls, 4);
        assert_eq!(s.balance.ejected_floor, 0.02);
    }
}
