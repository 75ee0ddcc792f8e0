//! The tables that stand alone: `[rate_limit]`, `[events]`, `[cache]`,
//! `[breaker]` and `[budget]`. For each, its settings, its shape in the
//! file and how it is read; all come from the file only, but the cache's
//! switch (`UNDERSTUDY_CACHE`).

use std::time::Duration;

use serde::Deserialize;

use super::source::{Blame, Env, SettingsError};
use super::timeouts::seconds_or;

/// The `[budget]` table: a cap on what fallback targets may spend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetSettings {
    pub fallback_budget_usd: f64,
    pub window: BudgetWindow,
}

/// The window a spend cap counts over (UTC calendar units, or a fixed
/// number of seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetWindow {
    Hour,
    Day,
    Month,
    Seconds(u64),
}

/// The `[events]` table: where the Redis writer puts events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// The stream key (`understudy:events`).
    pub stream_key: String,
    /// `XADD … MAXLEN ~` this many entries.
    pub stream_maxlen: u64,
    /// Events held while Redis is unreachable; beyond it the oldest go.
    pub redis_buffer: usize,
    /// How long shutdown may spend writing what is buffered.
    pub flush_timeout: Duration,
}

/// The `[cache]` table: the response cache for non-streamed requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    pub enabled: bool,
    pub ttl: Duration,
    /// Entries kept in memory (when Redis is not configured).
    pub max_entries: usize,
    /// Whether an entry stored for one client key may answer another
    /// (`[cache] shared`, default false: each client key sees only its own
    /// entries).
    pub shared: bool,
}

/// `90s`, `10m`, `2h`, `1d` (or plain seconds) as seconds.
pub fn parse_seconds(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

// The tables' shapes in the file. What a table leaves out is its default:
// in its `Default` here, or (a duration) where it is read.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateLimit {
    max_wait: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawEvents {
    stream_key: String,
    stream_maxlen: u64,
    redis_buffer: usize,
    flush_timeout: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct RawCache {
    enabled: bool,
    ttl: Option<f64>,
    max_entries: usize,
    shared: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBreaker {
    failure_threshold: Option<u32>,
    cooldown: Option<f64>,
    cooldown_multiplier: Option<f64>,
    max_cooldown: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    fallback_budget_usd: Option<f64>,
    window: Option<String>,
}

/// The longest `Retry-After` waited out (`[rate_limit] max_wait`).
pub(super) fn rate_limit_max_wait(
    raw: RawRateLimit,
    blame: &Blame,
) -> Result<Duration, SettingsError> {
    seconds_or(raw.max_wait, Duration::from_secs(5))
        .map_err(|m| blame.file("rate_limit.max_wait", m))
}

pub(super) fn events(raw: RawEvents, blame: &Blame) -> Result<EventSettings, SettingsError> {
    let flush_timeout = seconds_or(raw.flush_timeout, Duration::from_secs(5))
        .map_err(|m| blame.file("events.flush_timeout", m))?;
    if raw.stream_key.is_empty() {
        return Err(blame.file("events.stream_key", "the stream key is empty".into()));
    }
    // As `server.max_connections`: a zero that would be read as one is a
    // mistake to say, not to mend.
    if raw.redis_buffer == 0 {
        return Err(blame.file("events.redis_buffer", "must be at least 1".into()));
    }
    Ok(EventSettings {
        stream_key: raw.stream_key,
        stream_maxlen: raw.stream_maxlen,
        redis_buffer: raw.redis_buffer,
        flush_timeout,
    })
}

/// The cache's settings; `UNDERSTUDY_CACHE` (on or off) wins over
/// `enabled`.
pub(super) fn cache(
    raw: RawCache,
    env: &Env<'_>,
    blame: &Blame,
) -> Result<CacheSettings, SettingsError> {
    let enabled = match env.get("UNDERSTUDY_CACHE") {
        Some(v) => match v.trim() {
            "1" | "true" | "on" => true,
            "0" | "false" | "off" => false,
            other => {
                return Err(blame.env("UNDERSTUDY_CACHE", format!("`{other}` is not on or off")));
            }
        },
        None => raw.enabled,
    };
    let ttl =
        seconds_or(raw.ttl, Duration::from_secs(300)).map_err(|m| blame.file("cache.ttl", m))?;
    Ok(CacheSettings {
        enabled,
        ttl,
        max_entries: raw.max_entries,
        shared: raw.shared,
    })
}

/// The breaker's settings: [`BreakerSettings::default`] with what the
/// file sets.
pub(super) fn breaker(raw: RawBreaker, blame: &Blame) -> Result<BreakerSettings, SettingsError> {
    let defaults = BreakerSettings::default();
    let cooldown = seconds_or(raw.cooldown, defaults.cooldown)
        .map_err(|m| blame.file("breaker.cooldown", m))?;
    let cooldown_multiplier = match raw.cooldown_multiplier {
        Some(m) if m.is_finite() && (1.0..=10.0).contains(&m) => m,
        Some(_) => {
            return Err(blame.file(
                "breaker.cooldown_multiplier",
                "must be between 1 and 10".into(),
            ));
        }
        None => defaults.cooldown_multiplier,
    };
    let max_cooldown = seconds_or(raw.max_cooldown, defaults.max_cooldown)
        .map_err(|m| blame.file("breaker.max_cooldown", m))?;
    Ok(BreakerSettings {
        failure_threshold: raw.failure_threshold.unwrap_or(defaults.failure_threshold),
        cooldown,
        cooldown_multiplier,
        max_cooldown,
    })
}

/// The spend cap, if the file has a `[budget]` table.
pub(super) fn budget(
    raw: Option<RawBudget>,
    blame: &Blame,
) -> Result<Option<BudgetSettings>, SettingsError> {
    let Some(b) = raw else {
        return Ok(None);
    };
    let cap = b.fallback_budget_usd.ok_or_else(|| {
        blame.file(
            "budget.fallback_budget_usd",
            "the [budget] table needs a fallback_budget_usd".into(),
        )
    })?;
    if !cap.is_finite() || cap < 0.0 {
        return Err(blame.file("budget.fallback_budget_usd", "must be zero or more".into()));
    }
    let window = match b.window.as_deref().unwrap_or("day") {
        "hour" => BudgetWindow::Hour,
        "day" => BudgetWindow::Day,
        "month" => BudgetWindow::Month,
        other => match parse_seconds(other) {
            Some(secs) if secs > 0 => BudgetWindow::Seconds(secs),
            _ => {
                return Err(blame.file(
                    "budget.window",
                    format!("`{other}` is not hour, day, month or a duration such as 90s or 10m"),
                ));
            }
        },
    };
    Ok(Some(BudgetSettings {
        fallback_budget_usd: cap,
        window,
    }))
}

// === impl RawEvents ===

impl Default for RawEvents {
    fn default() -> Self {
        Self {
            stream_key: "understudy:events".into(),
            stream_maxlen: 100_000,
            redis_buffer: 10_000,
            flush_timeout: None,
        }
    }
}

// === impl RawCache ===

impl Default for RawCache {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: None,
            max_entries: 10_000,
            shared: false,
        }
    }
}

/// The `[breaker]` settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// 0 disables the breaker.
    pub failure_threshold: u32,
    pub cooldown: Duration,
    /// Each failed probe multiplies the cooldown by this (1.0: constant).
    pub cooldown_multiplier: f64,
    pub max_cooldown: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            cooldown: Duration::from_secs(5),
            cooldown_multiplier: 1.0,
            max_cooldown: Duration::from_secs(60),
        }
    }
}
