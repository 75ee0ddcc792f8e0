//! The `[balance]` table: how the member of a group of equivalent targets
//! that a request tries first is chosen (smoothing, ejection).

use std::time::Duration;

use serde::Deserialize;

use super::source::{Blame, SettingsError};
use super::timeouts::seconds_or;

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

#[cfg(test)]
mod tests {
    use crate::Settings;
    use crate::steps::{GroupSpec, RouteGroup, RouteStep, steps_of};

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
            [RouteGroup {
                start: 1,
                weights: vec![2, 1, 1],
                hedge: None,
            }]
        );
        assert_eq!(s.route_groups["even"][0].weights, [1, 1]);
        assert!(!s.route_groups.contains_key("plain"));
        let steps = steps_of(&s.routes["tier"], &s.route_groups["tier"]);
        assert_eq!(
            steps,
            [
                RouteStep::Target("openai:x".into()),
                RouteStep::Group(GroupSpec {
                    group: vec!["groq:a".into(), "gemini:b".into(), "claude:c".into()],
                    weights: Some(vec![2, 1, 1]),
                    hedge: None,
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
