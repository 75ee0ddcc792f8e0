//! `[affinity]`: sessions kept on the target that holds their prompt
//! cache. On by default for routes with a group of equivalent targets
//! (`UNDERSTUDY_AFFINITY` wins), but for the routes it excepts; an ordered
//! route of equivalent targets (the same model on several clouds, written
//! as a list) opts in by name, while an ordered preference of different
//! models keeps starting at its primary;
//! which body fields may name a session beyond the headers and
//! `prompt_cache_key`; what a second of waiting is worth against a switch's
//! cache cost; per provider, the cache's lifetime and prices where the
//! built-in ones do not fit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::provider::ProviderSettings;
use super::source::{Blame, Env, SettingsError};

/// The longest a pin may live: no provider keeps a prompt cache longer
/// than a day, and a client's own TTL is capped to it too.
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The `[affinity]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct AffinitySettings {
    /// Sessions are pinned to the target that served them (default true;
    /// only routes with more than one target look a session up).
    pub enabled: bool,
    /// The body's `user` (Chat Completions, Responses) and `metadata.user_id`
    /// (Anthropic; the `session_id` inside Claude Code's JSON one) may name
    /// a session (default false: a user is not a conversation).
    pub session_from_user: bool,
    /// What one second of waiting costs, in USD: a pinned target's wait is
    /// sat out while it costs no more than leaving its cache (default 0.01).
    pub wait_cost_per_second: f64,
    /// Sessions held in memory by one instance (default 100 000).
    pub max_sessions: usize,
    /// Routes that never pin a session (`default` or a route's name): an
    /// ordered preference, where a session should go back to the primary.
    pub except: Vec<String>,
    /// Routes without a group whose sessions are pinned too (`default` or
    /// a route's name): ordered lists of equivalent targets. A route with
    /// a group pins its sessions unless excepted; any other never does.
    pub routes: Vec<String>,
    /// Per provider: its prompt cache's lifetime and prices, where set.
    pub providers: BTreeMap<String, CacheOverride>,
}

/// One provider's prompt-cache facts set by the operator
/// (`[affinity.providers.NAME]`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheOverride {
    /// How long its cache holds a prefix after the last hit.
    pub cache_ttl: Option<Duration>,
    /// A cache read's price as a share of an uncached input token.
    pub cache_read: Option<f64>,
    /// A cache write's price as a share of an uncached input token.
    pub cache_write: Option<f64>,
}

impl Default for AffinitySettings {
    fn default() -> Self {
        Self {
            enabled: true,
            session_from_user: false,
            wait_cost_per_second: 0.01,
            max_sessions: 100_000,
            except: Vec::new(),
            routes: Vec::new(),
            providers: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAffinity {
    enabled: Option<bool>,
    session_from_user: Option<bool>,
    wait_cost_per_second: Option<f64>,
    max_sessions: Option<usize>,
    #[serde(default)]
    except: Vec<String>,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    providers: BTreeMap<String, RawCacheOverride>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCacheOverride {
    cache_ttl: Option<String>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

/// `[affinity]` validated against the providers and routes it names;
/// `UNDERSTUDY_AFFINITY` (on or off) wins over `enabled`.
pub(super) fn read(
    raw: RawAffinity,
    providers: &BTreeMap<String, ProviderSettings>,
    routes: &BTreeMap<String, Vec<understudy_types::target::Target>>,
    (env, blame): (&Env<'_>, &Blame),
) -> Result<AffinitySettings, SettingsError> {
    let d = AffinitySettings::default();
    let enabled = match env.get("UNDERSTUDY_AFFINITY") {
        Some(v) => match v.trim() {
            "1" | "true" | "on" => true,
            "0" | "false" | "off" => false,
            other => {
                return Err(blame.env("UNDERSTUDY_AFFINITY", format!("`{other}` is not on or off")));
            }
        },
        None => raw.enabled.unwrap_or(d.enabled),
    };
    for (field, names) in [("except", &raw.except), ("routes", &raw.routes)] {
        if let Some(unknown) = names
            .iter()
            .find(|r| *r != "default" && !routes.contains_key(*r))
        {
            return Err(blame.file(
                format!("affinity.{field}"),
                format!("no route named `{unknown}`"),
            ));
        }
    }
    let wait_cost_per_second = raw.wait_cost_per_second.unwrap_or(d.wait_cost_per_second);
    if !(wait_cost_per_second.is_finite() && wait_cost_per_second >= 0.0) {
        return Err(blame.file(
            "affinity.wait_cost_per_second",
            "expected a number of USD, 0 or more".into(),
        ));
    }
    let max_sessions = raw.max_sessions.unwrap_or(d.max_sessions);
    if max_sessions == 0 {
        return Err(blame.file("affinity.max_sessions", "must be at least 1".into()));
    }
    let mut out = BTreeMap::new();
    for (name, o) in raw.providers {
        let at = |field: &str| format!("affinity.providers.{name}.{field}");
        if !providers.contains_key(&name) {
            return Err(blame.file(
                format!("affinity.providers.{name}"),
                "no such provider".into(),
            ));
        }
        let cache_ttl = match o.cache_ttl.as_deref() {
            None => None,
            Some(text) => match super::tables::parse_seconds(text) {
                Some(s) if s > 0 && s <= MAX_CACHE_TTL.as_secs() => Some(Duration::from_secs(s)),
                _ => {
                    return Err(blame.file(
                        at("cache_ttl"),
                        "expected a duration such as \"10m\" or \"1h\", at most 24h".into(),
                    ));
                }
            },
        };
        for (field, v) in [("cache_read", o.cache_read), ("cache_write", o.cache_write)] {
            if v.is_some_and(|v| !(v.is_finite() && (0.0..=10.0).contains(&v))) {
                return Err(blame.file(
                    at(field),
                    "expected a share of the input price, from 0 to 10".into(),
                ));
            }
        }
        out.insert(
            name,
            CacheOverride {
                cache_ttl,
                cache_read: o.cache_read,
                cache_write: o.cache_write,
            },
        );
    }
    Ok(AffinitySettings {
        enabled,
        except: raw.except,
        routes: raw.routes,
        session_from_user: raw.session_from_user.unwrap_or(d.session_from_user),
        wait_cost_per_second,
        max_sessions,
        providers: out,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Settings;

    const BASE: &str = "[providers.openai]\napi_key = \"sk-test-0123456789\"\n[routes]\npair = [\"openai\", \"groq\"]\n";

    fn load(extra: &str, env: Option<&str>) -> Result<Settings, String> {
        let text = format!("{BASE}{extra}");
        Settings::from_toml_str(&text, |k| {
            (k == "UNDERSTUDY_AFFINITY")
                .then(|| env.map(str::to_owned))
                .flatten()
        })
        .map_err(|e| e.setting)
    }

    #[test]
    fn affinity_is_on_by_default_and_read_whole() {
        let s = load("", None).unwrap();
        assert!(s.affinity.enabled);
        assert!(!s.affinity.session_from_user);
        let s = load(
            "[affinity]\nwait_cost_per_second = 0.002\nexcept = [\"pair\", \"default\"]\n\
             [affinity.providers.openai]\ncache_ttl = \"10m\"\ncache_read = 0.5\n",
            Some("off"),
        )
        .unwrap();
        assert!(!s.affinity.enabled, "the environment wins");
        assert_eq!(s.affinity.wait_cost_per_second, 0.002);
        assert_eq!(s.affinity.except, ["pair", "default"]);
        let openai = s.affinity.providers["openai"];
        assert_eq!(openai.cache_ttl, Some(Duration::from_secs(600)));
        assert_eq!(openai.cache_read, Some(0.5));
        assert_eq!(openai.cache_write, None);
    }

    #[test]
    fn a_bad_affinity_setting_names_its_path() {
        // (the table, the setting blamed)
        let cases = [
            (
                "[affinity]\nwait_cost_per_second = -1\n",
                "affinity.wait_cost_per_second",
            ),
            ("[affinity]\nmax_sessions = 0\n", "affinity.max_sessions"),
            ("[affinity]\nexcept = [\"nowhere\"]\n", "affinity.except"),
            (
                "[affinity.providers.nobody]\ncache_ttl = \"1m\"\n",
                "affinity.providers.nobody",
            ),
            (
                "[affinity.providers.openai]\ncache_ttl = \"soon\"\n",
                "affinity.providers.openai.cache_ttl",
            ),
            (
                "[affinity.providers.openai]\ncache_write = 20\n",
                "affinity.providers.openai.cache_write",
            ),
        ];
        for (extra, setting) in cases {
            assert_eq!(load(extra, None).unwrap_err(), setting, "{extra}");
        }
        assert_eq!(load("", Some("maybe")).unwrap_err(), "UNDERSTUDY_AFFINITY");
    }
}
