//! [`GenerationEvent`]: the record of one generation — success or failure,
//! streamed or not, cached or not — that every sink receives.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use std::time::{SystemTime, UNIX_EPOCH};
use understudy_types::chat::Usage;

use understudy_types::clock::Timestamp;
use understudy_types::error::{Error, FailureCode, bounded};
use understudy_types::protocol::Protocol;
use understudy_types::target::Target;
use understudy_types::{Attempt, Outcome};
use understudy_types::{StreamDone, StreamError};

pub use crate::short_hash::ShortHash;

use crate::generation::Generation;

/// One generation, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationEvent {
    pub request_id: std::sync::Arc<str>,
    /// RFC 3339, UTC, millisecond precision.
    pub timestamp: Timestamp,
    /// `default`, a named route, or `provider:model` for a pin.
    pub route: String,
    /// The API the request came through: `neutral`, `openai`, `responses`,
    /// `anthropic`, `gemini`.
    #[serde(default, with = "understudy_types::protocol::api_serde")]
    pub api: Option<Protocol>,
    /// Who served, or `None` when nobody did.
    pub provider: Option<std::sync::Arc<str>>,
    pub model: Option<String>,
    /// The route's primary provider.
    pub primary: std::sync::Arc<str>,
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
    /// The route's targets passed over without a call, in order, and why
    /// (an open breaker, a stopped provider, a pool's keys cooling down,
    /// credentials not ready): what the attempts alone do not show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedTarget>,
    /// What became of Anthropic's fallback credit on the last attempt that
    /// carried one: `redeemed` or `not_applied:<reason>` (never the
    /// credit itself); absent when no attempt carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_credit: Option<String>,
    /// The request's session, on a route with more than one target and
    /// affinity on: where it was pinned and what became of the pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<AffinityNote>>,
    /// The request's trace, when traces are on (not written: the spans
    /// carry it).
    #[serde(skip)]
    pub trace: Option<std::sync::Arc<crate::trace::TraceContext>>,
    /// What the request's spans need beyond this event (recorded traces
    /// only; not written).
    #[serde(skip)]
    pub notes: Option<Box<crate::trace::notes::TraceNotes>>,
    /// The primary was chosen among a group of equivalent targets (the
    /// route's first step is a group): `primary` names the member chosen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub balanced: bool,
    /// The routing the request asked for itself (`models`, `provider`,
    /// `fallbacks`, `x-understudy-targets`) and whether it was honoured;
    /// absent when it asked for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller_routing: Option<Box<CallerNote>>,
    /// On a route that hedges, when a hedge was due: how it went (boxed:
    /// most events have none, and each would carry its room inline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hedge: Option<Box<HedgeNote>>,
}

/// The routing a request asked for, as its event records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallerNote {
    /// The operator allows it for this request (its client's record, else
    /// `[caller_routing] enabled`); when false the plan ignored it.
    pub honoured: bool,
    /// `body` (`models`, `provider`, `fallbacks`) or `header`
    /// (`x-understudy-targets`).
    pub source: std::borrow::Cow<'static, str>,
    /// The names asked for after `model` (`models`, then `fallbacks`), or
    /// the header's whole list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    pub allow_fallbacks: bool,
}

/// What a request's event says of its hedge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HedgeNote {
    /// `won_primary`, `won_backup`, `failed` (both calls failed), or why
    /// the backup was not started: `skipped_share`, `skipped_breaker`,
    /// `skipped_rate_limit`, `skipped_spend`.
    pub outcome: Cow<'static, str>,
    /// After how long without output the backup was due (ms).
    pub after_ms: f64,
    /// The backup's `provider:model`.
    pub backup: String,
    /// The call that lost, cancelled unfinished: its estimated cost (its
    /// input tokens, estimated, at its price; it showed no output), when
    /// its target has a price. Not in the event's `cost_usd` (the served
    /// answer's), but in the client record's spend, the cost metrics and
    /// the fallback spend cap (when it was a fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loser_cost_usd: Option<f64>,
    /// The losing call's estimated tokens (charged to the client record's
    /// tokens per minute).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub loser_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A target a request passed over without calling it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedTarget {
    pub provider: String,
    pub model: String,
    /// `breaker_open`, `stopped`, `keys_out`, `credentials`.
    pub reason: String,
}

/// A request's session as its event records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AffinityNote {
    /// A short hash of the session's key (never the client's value).
    pub session: ShortHash,
    /// What named it: `x-understudy-session`, `client_header`,
    /// `prompt_cache_key`, `previous_response`, `user`, `prefix`.
    pub source: Cow<'static, str>,
    /// `hit` (the pinned target served), `moved` (another did: the pin
    /// follows it), `new`, `expired` (its cache had lapsed), `none`
    /// (nobody served: the pin is unchanged).
    pub outcome: Cow<'static, str>,
    /// `provider:model` the session was pinned to before the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<TargetName>,
    /// The prompt prefix the serving target's cache now holds (tokens).
    pub cached_tokens: u64,
    /// The new pin's lifetime class (`5m`, `1h`, `in_memory`, `24h`,
    /// `explicit`, `implicit`, `configured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_class: Option<Cow<'static, str>>,
    /// The pinned target asked to wait: `wait` or `switch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_or_switch: Option<Cow<'static, str>>,
    /// What leaving the pinned target's cache was estimated to cost, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_cost_usd: Option<f64>,
}

/// A target as an event names it, `provider:model`: the target itself
/// (its names shared, no string made per event), written and read as
/// that JSON string.
#[derive(Clone, PartialEq, Eq)]
pub struct TargetName(pub Target);

impl std::fmt::Debug for TargetName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.to_string(), f)
    }
}

impl std::fmt::Display for TargetName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for TargetName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TargetName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let (provider, model) = text
            .split_once(':')
            .ok_or_else(|| serde::de::Error::custom("a target: `provider:model`"))?;
        Ok(Self(Target::new(provider, model)))
    }
}

/// What every event of one request shares.
#[derive(Debug, Clone)]
pub struct EventContext {
    pub request_id: std::sync::Arc<str>,
    pub route: String,
    pub primary: std::sync::Arc<str>,
    pub api: Option<Protocol>,
    pub omitted_tools: Vec<String>,
}

/// What a served answer's event has of its generation, moved or shared
/// rather than copied from it: the provider's name (the plan's), and the
/// attempts and model where the generation's caller reads them no more.
#[derive(Debug)]
pub struct Taken {
    pub provider: std::sync::Arc<str>,
    pub attempts: Vec<Attempt>,
    pub model: String,
}

impl GenerationEvent {
    /// A served answer's event (the context's strings move in: an answer
    /// makes one event); `taken` holds what it has of `g` that the run
    /// moved or shares rather than copied.
    #[inline]
    pub fn served(
        ctx: EventContext,
        g: &Generation,
        taken: Taken,
        cached: bool,
        cost_usd: Option<f64>,
    ) -> Self {
        let Taken {
            provider,
            attempts,
            model,
        } = taken;
        Self {
            request_id: ctx.request_id,
            timestamp: now_rfc3339(),
            route: ctx.route,
            api: ctx.api,
            provider: Some(provider),
            model: Some(model),
            primary: ctx.primary,
            success: true,
            fell_back: g.fell_back,
            content_filtered: g.content_filtered,
            streamed: false,
            cached,
            error_code: None,
            error_detail: None,
            fallback_credit: credit_of(&attempts),
            attempts,
            latency_ms: g.latency_ms,
            ttft_ms: None,
            usage: g.usage,
            cost_usd,
            omitted_tools: ctx.omitted_tools,
            client: None,
            skipped: Vec::new(),
            affinity: None,
            trace: None,
            notes: None,
            balanced: false,
            caller_routing: None,
            hedge: None,
        }
    }

    /// A failed request's event (the context's strings move in).
    #[inline]
    pub fn failed(ctx: EventContext, e: &Error, streamed: bool, latency_ms: f64) -> Self {
        let attempts = e.attempts().to_vec();
        Self {
            request_id: ctx.request_id,
            timestamp: now_rfc3339(),
            route: ctx.route,
            api: ctx.api,
            provider: None,
            model: None,
            primary: ctx.primary,
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
            omitted_tools: ctx.omitted_tools,
            client: None,
            skipped: Vec::new(),
            fallback_credit: credit_of(e.attempts()),
            affinity: None,
            trace: None,
            notes: None,
            balanced: false,
            caller_routing: None,
            hedge: None,
        }
    }

    #[inline]
    pub fn stream_done(
        ctx: &EventContext,
        d: &StreamDone,
        provider: std::sync::Arc<str>,
        cost_usd: Option<f64>,
    ) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: Some(provider),
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
            skipped: Vec::new(),
            fallback_credit: credit_of(&d.attempts),
            affinity: None,
            trace: None,
            notes: None,
            balanced: false,
            caller_routing: None,
            hedge: None,
        }
    }

    /// A stream that failed after its commit: the committed provider is
    /// named, and it is not a success.
    #[inline]
    pub fn stream_failed(
        ctx: &EventContext,
        s: &StreamError,
        provider: std::sync::Arc<str>,
    ) -> Self {
        Self {
            request_id: ctx.request_id.clone(),
            timestamp: now_rfc3339(),
            route: ctx.route.clone(),
            api: ctx.api,
            provider: Some(provider),
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
            skipped: Vec::new(),
            fallback_credit: credit_of(&s.attempts),
            affinity: None,
            trace: None,
            notes: None,
            balanced: false,
            caller_routing: None,
            hedge: None,
        }
    }

    /// The provider for metric labels: who served, else the primary (never
    /// empty, never "None").
    pub fn label_provider(&self) -> &str {
        self.provider.as_deref().unwrap_or(&self.primary)
    }
}

/// Unix time in milliseconds.
#[inline]
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Now as RFC 3339 (`2026-11-29T16:20:01.123Z`).
fn now_rfc3339() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::of(since.as_secs(), since.subsec_millis())
}

/// What became of the fallback credit on the last attempt that said.
fn credit_of(attempts: &[Attempt]) -> Option<String> {
    attempts
        .iter()
        .rev()
        .find_map(|a| a.fallback_credit.clone())
}

fn refused(attempts: &[Attempt]) -> bool {
    attempts
        .iter()
        .any(|a| a.outcome == Outcome::Failed(FailureCode::ContentFilter))
}

#[cfg(test)]
mod tests {
    use understudy_types::clock::Timestamp;

    /// An event's time reads and is written as the text it stands for,
    /// and one read back in another form is kept as it came.
    #[test]
    fn a_timestamp_is_its_text_in_json() {
        for (secs, millis, text) in [
            (0, 0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, 5, "2000-02-29T00:00:00.005Z"),
            (1_796_000_000, 999, "2026-11-30T00:53:20.999Z"),
        ] {
            let t = Timestamp::of(secs, millis);
            assert_eq!(&*t, text);
            let json = serde_json::to_string(&t).unwrap_or_default();
            assert_eq!(json, format!("\"{text}\""));
            let back: Timestamp = serde_json::from_str(&json).expect("read back");
            assert_eq!(back, t);
        }
        let other: Timestamp = serde_json::from_str("\"2026-12-06T09:30:00Z\"").expect("read");
        assert_eq!(&*other, "2026-12-06T09:30:00Z");
        assert!(serde_json::from_str::<Timestamp>("7").is_err());
    }
}
