//! `[probe]`: the readiness prober, which checks every target a route
//! names with calls that generate nothing (a provider's model lookup, a
//! free token count) and leaves out of plans those proven unable to serve
//! (a refused key, a model the provider does not serve). On by default,
//! every 60 seconds; `UNDERSTUDY_PROBE` (on or off) wins over `enabled`.

use std::time::Duration;

use serde::Deserialize;

use super::source::{Blame, Env, SettingsError};

/// The `[probe]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSettings {
    /// Targets are probed (default true).
    pub enabled: bool,
    /// How often every target is probed (default 60 s).
    pub interval: Duration,
    /// How long one probe may take before it counts as unreachable
    /// (default 10 s).
    pub timeout: Duration,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProbe {
    enabled: Option<bool>,
    interval: Option<f64>,
    timeout: Option<f64>,
}

/// `[probe]` validated; `UNDERSTUDY_PROBE` wins over `enabled`.
pub(super) fn read(
    raw: RawProbe,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<ProbeSettings, SettingsError> {
    let d = ProbeSettings::default();
    let enabled = match env.get("UNDERSTUDY_PROBE") {
        Some(v) => match v.trim() {
            "1" | "true" | "on" => true,
            "0" | "false" | "off" => false,
            other => {
                return Err(blame.env("UNDERSTUDY_PROBE", format!("`{other}` is not on or off")));
            }
        },
        None => raw.enabled.unwrap_or(d.enabled),
    };
    let interval = super::timeouts::seconds_or(raw.interval, d.interval)
        .map_err(|e| blame.file("probe.interval", e))?;
    let timeout = super::timeouts::seconds_or(raw.timeout, d.timeout)
        .map_err(|e| blame.file("probe.timeout", e))?;
    Ok(ProbeSettings {
        enabled,
        interval,
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Settings;

    fn load(text: &str, env: Option<&str>) -> Result<Settings, String> {
        Settings::from_toml_str(text, |k| {
            (k == "UNDERSTUDY_PROBE")
                .then(|| env.map(str::to_owned))
                .flatten()
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn probing_is_on_every_minute_by_default_and_read_whole() {
        let s = load("", None).unwrap();
        assert!(s.probe.enabled);
        assert_eq!(s.probe.interval, Duration::from_secs(60));
        let s = load("[probe]\ninterval = 0.5\ntimeout = 2\n", Some("off")).unwrap();
        assert!(!s.probe.enabled, "the environment wins");
        assert_eq!(s.probe.interval, Duration::from_millis(500));
        assert_eq!(s.probe.timeout, Duration::from_secs(2));
    }

    #[test]
    fn a_bad_probe_setting_names_its_path() {
        for (text, env, path) in [
            ("[probe]\ninterval = 0\n", None, "probe.interval"),
            ("[probe]\ntimeout = -1\n", None, "probe.timeout"),
            ("[probe]\nevery = 3\n", None, "probe"),
            ("", Some("maybe"), "UNDERSTUDY_PROBE"),
        ] {
            let err = load(text, env).unwrap_err();
            assert!(err.contains(path), "{text:?}: {err}");
        }
    }
}
