//! Counted request limits per API key, as a provider's account enforces
//! them: a fixed window opened by the key's first request, every answer
//! carrying the provider's own rate-limit headers (OpenAI's and Groq's
//! `x-ratelimit-*-requests` with Go-duration resets, Anthropic's
//! `anthropic-ratelimit-requests-*` with RFC 3339 resets), and a 429 with
//! `Retry-After` once the window's limit is spent.
//!
//! The oracle for key pools: it shares no code with the gateway's reader
//! (`understudy_wire::ratelimit`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use understudy_types::Protocol;

use super::{Received, Reply, lock};

/// Every key's counted limit.
#[derive(Default)]
pub(super) struct KeyLimits {
    keys: Mutex<HashMap<String, Counter>>,
}

struct Counter {
    limit: u64,
    window: Duration,
    /// The current window's start, from its first request.
    opened: Option<Instant>,
    used: u64,
    /// Requests answered 429 for being over the limit.
    refused: u64,
}

/// What the limit says of one request: its headers, and a 429 in place of
/// the scripted reply when it is over.
pub(super) struct Verdict {
    pub headers: Vec<(String, String)>,
    pub refuse: Option<Reply>,
}

impl KeyLimits {
    /// Limits `key` to `limit` requests per `window`.
    pub(super) fn set(&self, key: &str, limit: u64, window: Duration) {
        lock(&self.keys).insert(
            key.to_owned(),
            Counter {
                limit,
                window,
                opened: None,
                used: 0,
                refused: 0,
            },
        );
    }

    /// Requests refused for being over `key`'s limit (all keys: `None`).
    pub(super) fn refused(&self, key: Option<&str>) -> u64 {
        lock(&self.keys)
            .iter()
            .filter(|(k, _)| key.is_none_or(|key| key == k.as_str()))
            .map(|(_, c)| c.refused)
            .sum()
    }

    /// Counts `req` against its key's limit, if it has one.
    pub(super) fn count(&self, protocol: Protocol, req: &Received) -> Option<Verdict> {
        let key = api_key(req)?;
        let mut keys = lock(&self.keys);
        let c = keys.get_mut(key)?;
        let now = Instant::now();
        let opened = match c.opened {
            Some(at) if now < at + c.window => at,
            _ => {
                c.used = 0;
                c.opened = Some(now);
                now
            }
        };
        let reset = (opened + c.window).saturating_duration_since(now);
        c.used += 1;
        let over = c.used > c.limit;
        if over {
            c.refused += 1;
        }
        let remaining = c.limit.saturating_sub(c.used);
        let headers = headers(protocol, c.limit, remaining, reset);
        let refuse = over.then(|| Reply::Status {
            status: 429,
            body: String::new(),
            headers: vec![(
                "retry-after".to_owned(),
                reset.as_secs_f64().ceil().max(1.0).to_string(),
            )],
        });
        Some(Verdict { headers, refuse })
    }
}

/// The key a request authenticates with, as each provider takes it.
pub(super) fn api_key(req: &Received) -> Option<&str> {
    req.header("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| req.header("x-api-key"))
        .or_else(|| req.header("x-goog-api-key"))
        .or_else(|| req.header("api-key"))
}

fn headers(
    protocol: Protocol,
    limit: u64,
    remaining: u64,
    reset: Duration,
) -> Vec<(String, String)> {
    match protocol {
        Protocol::Messages | Protocol::Converse => {
            let at = SystemTime::now() + reset;
            vec![
                (
                    "anthropic-ratelimit-requests-limit".into(),
                    limit.to_string(),
                ),
                (
                    "anthropic-ratelimit-requests-remaining".into(),
                    remaining.to_string(),
                ),
                ("anthropic-ratelimit-requests-reset".into(), rfc3339(at)),
            ]
        }
        _ => vec![
            ("x-ratelimit-limit-requests".into(), limit.to_string()),
            (
                "x-ratelimit-remaining-requests".into(),
                remaining.to_string(),
            ),
            ("x-ratelimit-reset-requests".into(), go_duration(reset)),
        ],
    }
}

/// A duration as Go prints one (`1m30.5s`, `12.25s`, `250ms`).
fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, s) = (ms / 60_000, (ms % 60_000) as f64 / 1000.0);
    if m == 0 {
        format!("{s}s")
    } else {
        format!("{m}m{s}s")
    }
}

/// `at` in RFC 3339, UTC, whole seconds (rounded up: a reset is never
/// early).
fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_rfc3339_as_providers_write_them() {
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_millis(12_250)), "12.25s");
        assert_eq!(go_duration(Duration::from_millis(90_500)), "1m30.5s");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_735_689_630)),
            "2025-01-01T00:00:30Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(951_782_400_001)),
            "2000-02-29T00:00:01Z"
        );
    }
}
