//! [`GenerationEvent`]: the record of one generation — success or failure,
//! streamed or not, cached or not — that every sink receives (DESIGN §5).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::chat::Usage;
use crate::error::{Error, FailureCode, bounded};
use crate::generation::{Attempt, Generation, Outcome};
use crate::protocol::Protocol;
use crate::stream::{StreamDone, StreamError};

/// One generation, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationEvent {
    pub request_id: String,
    /// RFC 3339, UTC, millisecond precision.
    pub timestamp: String,
    /// `default`, a named route, or `provider:model` for a pin.
    pub route: String,
    /// The API the request came through: `neutral`, `openai`, `responses`,
    /// `anthropic`, `gemini`.
    #[serde(default, with = "crate::protocol::api_serde")]
    pub api: Option<Protocol>,
    /// Who served, or `None` when nobody did.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// The route's primary provider.
    pub primary: String,
    pub success: bool,
    /// A target other than the primary served.
    pub fell_back: bool,
    /// Any attempt was refused, whoever served in the end.
    pub content_filtered: bool,
    pub streamed: bool,
    pub cached: bool,
    pub error_code: Option<FailureCode>,
    /// Bounded, free of keys.
    pub error_detail: Option<String>,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub usage: Option<Usage>,
    pub cost_usd: Option<f64>,
    /// Hosted tools the front end left out because no target can run them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted_tools: Vec<String>,
    /// The client record's name (never its key), when the key had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// What every event of one request shares.
#[derive(Debug, Clone)]
pub(crate) struct EventContext {
    pub request_id: String,
    pub route: String,
    pub primary: String,
    pub api: Option<Protocol>,
    pub omitted_tools: Vec<String>,
}

impl GenerationEvent {
    pub(crate) fn served(
        ctx: &EventContext,
        g: &Generation,
        cached: bool,
        cost_usd: Option<f64>,
    ) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: Some(g.provider.clone()),
            model: Some(g.model.clone()),
            primary: ctx.primary.clone(),
            success: true,
            fell_back: g.fell_back,
            content_filtered: g.content_filtered,
            streamed: false,
            cached,
            error_code: None,
            error_detail: None,
            attempts: g.attempts.clone(),
            latency_ms: g.latency_ms,
            ttft_ms: None,
            usage: g.usage,
            cost_usd,
            omitted_tools: ctx.omitted_tools.clone(),
            client: None,
        }
    }

    pub(crate) fn failed(ctx: &EventContext, e: &Error, streamed: bool, latency_ms: f64) -> Self {
        let attempts = e.attempts().to_vec();
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: None,
            model: None,
            primary: ctx.primary.clone(),
            success: false,
            fell_back: false,
            content_filtered: refused(&attempts),
            streamed,
            cached: false,
            error_code: Some(e.code()),
            error_detail: Some(bounded(e.to_string())),
            attempts,
            latency_ms,
            ttft_ms: None,
            usage: None,
            cost_usd: None,
            omitted_tools: ctx.omitted_tools.clone(),
            client: None,
        }
    }

    pub(crate) fn stream_done(ctx: &EventContext, d: &StreamDone, cost_usd: Option<f64>) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: Some(d.provider.clone()),
            model: Some(d.model.clone()),
            primary: ctx.primary.clone(),
            success: true,
            fell_back: d.fell_back,
            content_filtered: d.content_filtered,
            streamed: true,
            cached: false,
            error_code: None,
            error_detail: None,
            attempts: d.attempts.clone(),
            latency_ms: d.latency_ms,
            ttft_ms: Some(d.ttft_ms),
            usage: d.usage,
            cost_usd,
            omitted_tools: ctx.omitted_tools.clone(),
            client: None,
        }
    }

    /// A stream that failed after its commit: the committed provider is
    /// named, and it is not a success.
    pub(crate) fn stream_failed(ctx: &EventContext, s: &StreamError) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: Some(s.provider.clone()),
            model: Some(s.model.clone()),
            primary: ctx.primary.clone(),
            success: false,
            fell_back: s.fell_back,
            content_filtered: s.content_filtered,
            streamed: true,
            cached: false,
            error_code: Some(s.code),
            error_detail: Some(bounded(s.message.clone())),
            attempts: s.attempts.clone(),
            latency_ms: s.latency_ms,
            ttft_ms: Some(s.ttft_ms),
            usage: None,
            cost_usd: None,
            omitted_tools: ctx.omitted_tools.clone(),
            client: None,
        }
    }

    /// The provider for metric labels: who served, else the primary (never
    /// empty, never "None").
    pub fn label_provider(&self) -> &str {
        self.provider.as_deref().unwrap_or(&self.primary)
    }
}

fn refused(attempts: &[Attempt]) -> bool {
    attempts
        .iter()
        .any(|a| a.outcome == Outcome::Failed(FailureCode::ContentFilter))
}

/// Now as RFC 3339 (`2026-11-29T16:20:01.123Z`).
pub fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

/// The UTC calendar date `(year, month, day)` of a day count since
/// 1970-01-01 (Howard Hinnant's civil-from-days; valid for every date this
/// program will see).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Formats Unix seconds as RFC 3339 UTC.
pub fn rfc3339(secs: u64, millis: u32) -> String {
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    // Written digit by digit: `format!` was a visible share of the hot
    // path's instructions (one timestamp per generation).
    let mut out = String::with_capacity(24);
    push_digits(&mut out, year.max(0) as u64, 4);
    for (value, sep) in [
        (u64::from(month), '-'),
        (u64::from(day), '-'),
        (rem / 3600, 'T'),
        ((rem % 3600) / 60, ':'),
        (rem % 60, ':'),
    ] {
        out.push(sep);
        push_digits(&mut out, value, 2);
    }
    out.push('.');
    push_digits(&mut out, u64::from(millis), 3);
    out.push('Z');
    out
}

/// Appends the last `width` decimal digits of `n`, zero-padded.
fn push_digits(out: &mut String, n: u64, width: u32) {
    for i in (0..width).rev() {
        out.push(char::from(b'0' + (n / 10u64.pow(i) % 10) as u8));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339() {
        assert_eq!(super::rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            super::rfc3339(1_796_000_000, 999),
            "2026-11-30T00:53:20.999Z"
        );
    }
}
