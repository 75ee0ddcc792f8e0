//! `[affinity]`: sessions kept on the target that holds their prompt
//! cache. On by default (it costs nothing on a route with one target);
//! which body fields may name a session beyond the headers and
//! `prompt_cache_key`; what a second of waiting is worth against a switch's
//! cache cost; per provider, the cache's lifetime and prices where the
//! built-in ones do not fit.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::provider::ProviderSettings;
use super::source::{Blame, SettingsError};

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
    providers: BTreeMap<String, RawCacheOverride>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCacheOverride {
    cache_ttl: Option<String>,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

/// `[affinity]` validated against the providers it names.
pub(super) fn read(
    raw: RawAffinity,
    providers: &BTreeMap<String, ProviderSettings>,
    blame: &Blame,
) -> Result<AffinitySettings, SettingsError> {
    let d = AffinitySettings::default();
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
                Some(s) if s > 0 => Some(Duration::from_secs(s)),
                _ => {
                    return Err(blame.file(
                        at("cache_ttl"),
                        "expected a duration such as \"10m\" or \"1h\"".into(),
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
        enabled: raw.enabled.unwrap_or(d.enabled),
        session_from_user: raw.session_from_user.unwrap_or(d.session_from_user),
        wait_cost_per_second,
        max_sessions,
        providers: out,
    })
}
