//! Timeouts: the global `[timeouts]` table, a provider's `timeouts`, and
//! the overrides a route sets; and [`seconds`], how every duration of the
//! file is read.

use std::time::Duration;

use serde::Deserialize;

use super::source::FieldError;

/// Timeouts; [`Default`] gives the built-in ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_token: Duration,
    pub stream_idle: Duration,
    /// One attempt in total; the only read timeout of a non-streamed call.
    pub attempt: Duration,
    /// The whole request, every attempt and wait included.
    pub request: Duration,
}

/// The timeouts a route sets, each one optional: a route that sets only
/// `first_token` keeps every provider's other timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeoutOverrides {
    pub connect: Option<Duration>,
    pub first_token: Option<Duration>,
    pub stream_idle: Option<Duration>,
    pub attempt: Option<Duration>,
    pub request: Option<Duration>,
}

/// A `timeouts` table of the file, in seconds. An absent table sets
/// nothing, as an empty one does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    connect: Option<f64>,
    first_token: Option<f64>,
    stream_idle: Option<f64>,
    attempt: Option<f64>,
    request: Option<f64>,
}

/// A duration of the file: a number of seconds, more than 0 and at most a
/// day.
pub(super) fn seconds(s: f64) -> Result<Duration, String> {
    if !s.is_finite() || s <= 0.0 || s > 86_400.0 {
        return Err(format!(
            "`{s}` is not a number of seconds between 0 and 86400"
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

/// A duration of the file that may be left out, as [`seconds`] reads it,
/// else `default`.
pub(super) fn seconds_or(value: Option<f64>, default: Duration) -> Result<Duration, String> {
    value.map_or(Ok(default), seconds)
}

// === impl Timeouts ===

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            first_token: Duration::from_secs(10),
            stream_idle: Duration::from_secs(15),
            attempt: Duration::from_secs(60),
            request: Duration::from_secs(120),
        }
    }
}

// === impl RawTimeouts ===

impl RawTimeouts {
    /// The timeouts this table sets, validated, and nothing else.
    pub(super) fn overrides(&self, at: &str) -> Result<TimeoutOverrides, FieldError> {
        let one = |value: Option<f64>, name: &str| {
            value
                .map(seconds)
                .transpose()
                .map_err(|m| (format!("{at}.{name}"), m))
        };
        Ok(TimeoutOverrides {
            connect: one(self.connect, "connect")?,
            first_token: one(self.first_token, "first_token")?,
            stream_idle: one(self.stream_idle, "stream_idle")?,
            attempt: one(self.attempt, "attempt")?,
            request: one(self.request, "request")?,
        })
    }

    /// `t` with the timeouts this table sets in place of its own.
    pub(super) fn apply(&self, mut t: Timeouts, at: &str) -> Result<Timeouts, FieldError> {
        for (value, slot, name) in [
            (self.connect, &mut t.connect, "connect"),
            (self.first_token, &mut t.first_token, "first_token"),
            (self.stream_idle, &mut t.stream_idle, "stream_idle"),
            (self.attempt, &mut t.attempt, "attempt"),
            (self.request, &mut t.request, "request"),
        ] {
            if let Some(v) = value {
                *slot = seconds(v).map_err(|m| (format!("{at}.{name}"), m))?;
            }
        }
        Ok(t)
    }
}
