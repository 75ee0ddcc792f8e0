//! Named routes (`[routes]`): each a list of steps (a target, or a group
//! of equivalent targets), or a table with the steps and what the route sets for the requests that take it (refusal
//! policy, timeouts, when a stream commits, continuing after a cut,
//! hedging).

use std::collections::BTreeMap;
use std::str::FromStr;

use serde::Deserialize;
use understudy_types::refusal::RefusalPolicy;
use understudy_types::target::Target;

use super::provider::ProviderSettings;
use super::source::{Blame, SettingsError};
use super::steps::{RouteGroups, RouteStep, read_steps};
use super::timeouts::{RawTimeouts, TimeoutOverrides};

/// What a named route sets for the requests that take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteOptions {
    pub refusal_policy: Option<RefusalPolicy>,
    /// The timeouts this route sets; each one it sets replaces the
    /// provider's for the targets of this route (see
    /// [`understudy_policy::timeouts::timeouts_for`]).
    pub timeouts: TimeoutOverrides,
    /// When a stream commits (`stream_commit`); unset: at the first output.
    pub stream_commit: Option<StreamCommit>,
    /// A committed stream that is cut continues on a target that accepts
    /// an assistant prefill (`continue_after_cut`).
    pub continue_after_cut: Option<bool>,
    /// Hedging (`hedge`): off when unset.
    pub hedge: Option<super::hedge::HedgeSettings>,
}

/// When a stream commits to its target (`stream_commit`, per route, or per
/// request with `x-understudy-stream-commit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StreamCommit {
    /// At the first output the client would act on (the default).
    #[default]
    FirstOutput,
    /// When the target finishes: the answer is held until then, so any
    /// failure, a cut or a stall included, can still fall back.
    Complete,
}

/// The named routes of the settings, the options of those that set any,
/// and the groups of those that have any.
pub(super) type Routes = (
    BTreeMap<String, Vec<Target>>,
    BTreeMap<String, RouteOptions>,
    RouteGroups,
);

/// A route: a list of targets, or a table with options.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawRouteSpec {
    Targets(Vec<RouteStep>),
    Table(RawRoute),
}

/// A route's table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    targets: Vec<RouteStep>,
    refusal_policy: Option<String>,
    #[serde(default)]
    timeouts: RawTimeouts,
    stream_commit: Option<String>,
    continue_after_cut: Option<bool>,
    hedge: Option<super::hedge::HedgeSpec>,
}

/// The file's named routes, each target's provider known. Every provider
/// also learns the connect timeouts that routes through it set.
pub(super) fn read(
    raw: BTreeMap<String, RawRouteSpec>,
    providers: &mut BTreeMap<String, ProviderSettings>,
    blame: &Blame,
) -> Result<Routes, SettingsError> {
    let mut routes = BTreeMap::new();
    let mut route_options = BTreeMap::new();
    let mut route_groups = BTreeMap::new();
    for (name, spec) in raw {
        let at = format!("routes.{name}");
        if name == "default" {
            return Err(blame.file(
                at,
                "`default` is the configured order; name the route differently".into(),
            ));
        }
        let (specs, table, steps_at) = match spec {
            RawRouteSpec::Targets(t) => (t, None, at.clone()),
            RawRouteSpec::Table(mut r) => (
                std::mem::take(&mut r.targets),
                Some(r),
                format!("{at}.targets"),
            ),
        };
        if specs.is_empty() {
            return Err(blame.file(at, "a route needs at least one target".into()));
        }
        let (targets, groups) =
            read_steps(&specs, providers, &steps_at).map_err(|(at, m)| blame.file(at, m))?;
        if let Some(r) = table {
            route_options.insert(name.clone(), r.options(&at, blame)?);
        }
        if !groups.is_empty() {
            route_groups.insert(name.clone(), groups);
        }
        routes.insert(name, targets);
    }
    add_connect_timeouts(providers, &routes, &route_options);
    Ok((routes, route_options, route_groups))
}

/// Each provider keeps a client for every connect timeout a route
/// through it sets.
fn add_connect_timeouts(
    providers: &mut BTreeMap<String, ProviderSettings>,
    routes: &BTreeMap<String, Vec<Target>>,
    route_options: &BTreeMap<String, RouteOptions>,
) {
    for (name, targets) in routes {
        let Some(connect) = route_options.get(name).and_then(|o| o.timeouts.connect) else {
            continue;
        };
        for t in targets {
            if let Some(p) = providers.get_mut(&*t.provider) {
                if !p.route_connect_timeouts.contains(&connect) {
                    p.route_connect_timeouts.push(connect);
                }
            }
        }
    }
}

/// The value of `setting`, parsed, if the file sets it.
fn parsed<T: FromStr<Err = String>>(
    value: Option<&str>,
    setting: &str,
    blame: &Blame,
) -> Result<Option<T>, SettingsError> {
    value
        .map(str::parse)
        .transpose()
        .map_err(|m| blame.file(setting, m))
}

// === impl StreamCommit ===

impl FromStr for StreamCommit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first_output" => Ok(Self::FirstOutput),
            "complete" => Ok(Self::Complete),
            other => Err(format!(
                "`{other}` is not a stream commit (first_output or complete)"
            )),
        }
    }
}

impl StreamCommit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstOutput => "first_output",
            Self::Complete => "complete",
        }
    }
}

// === impl RawRoute ===

impl RawRoute {
    /// What this route's table sets besides its targets, at the TOML path
    /// `at`.
    fn options(&self, at: &str, blame: &Blame) -> Result<RouteOptions, SettingsError> {
        let stream_commit = parsed(
            self.stream_commit.as_deref(),
            &format!("{at}.stream_commit"),
            blame,
        )?;
        let refusal_policy = parsed(
            self.refusal_policy.as_deref(),
            &format!("{at}.refusal_policy"),
            blame,
        )?;
        let timeouts = self
            .timeouts
            .overrides(&format!("{at}.timeouts"))
            .map_err(|e| blame.field(e))?;
        let hedge = self
            .hedge
            .as_ref()
            .map(|h| h.read(&format!("{at}.hedge")))
            .transpose()
            .map_err(|(at, m)| blame.file(at, m))?;
        Ok(RouteOptions {
            refusal_policy,
            timeouts,
            stream_commit,
            continue_after_cut: self.continue_after_cut,
            hedge,
        })
    }
}
