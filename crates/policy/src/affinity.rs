//! Session affinity's pure rules: what a target's prompt cache is (its
//! kind, its prices as shares of an uncached input token, how long it holds
//! a prefix), how much of a session's prompt the last answer left cached,
//! what leaving that cache costs, and the wait-or-switch rule the decision
//! machine applies when a pinned target asks the request to wait.
//!
//! The rule, in one line: **wait while `wait × wait_cost_per_second` is no
//! more than the switch cost**, where the switch cost is the cached prefix
//! priced at the pinned target's uncached minus cached rate, plus the
//! cache-write premium on the target the request would move to.

use std::sync::LazyLock;
use std::time::Duration;

use memchr::memmem::Finder;

use understudy_settings::{CacheOverride, ProviderSettings};
use understudy_types::chat::{NativeRequest, Usage};
use understudy_types::protocol::Protocol;

/// The input price assumed for a target with no configured price (USD per
/// million tokens): a mid-range model's, so that a cache is never worth
/// nothing because its price was left out.
pub const ASSUMED_INPUT_PER_MTOK: f64 = 3.0;

/// The least prompt an automatic cache (OpenAI's, Azure's) keeps, in tokens.
pub const OPENAI_MIN_PREFIX: u64 = 1024;

/// The least prompt Gemini's implicit cache keeps, in tokens (2.5 models;
/// later ones need more, which only makes this estimate generous).
pub const GEMINI_MIN_PREFIX: u64 = 2048;

/// How a target's prompt cache works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Anthropic's breakpoints: the API, Claude on Bedrock and on Vertex.
    Anthropic,
    /// Automatic prefix caching: OpenAI and Azure, Chat or Responses.
    OpenAi,
    /// Gemini's implicit cache.
    Gemini,
}

/// The lifetime class of a session's pin, named in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtlClass {
    /// Anthropic's default: 5 minutes, refreshed on each hit.
    FiveMinutes,
    /// Anthropic's `cache_control.ttl = "1h"`.
    OneHour,
    /// OpenAI's in-memory retention: cleared after 5 to 10 idle minutes.
    InMemory,
    /// OpenAI's `prompt_cache_retention = "24h"`.
    Extended,
    /// OpenAI's `prompt_cache_options.ttl` (GPT-5.6 and later).
    Explicit,
    /// Gemini's implicit cache: no documented lifetime.
    Implicit,
    /// The operator's `cache_ttl`.
    Configured,
}

/// What a request's body says of its cache's lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHints {
    /// A `cache_control` (or `cachePoint`) with `"ttl": "1h"`.
    pub one_hour: bool,
    /// `prompt_cache_retention: "24h"`.
    pub retention_24h: bool,
    /// `prompt_cache_options.ttl`, read.
    pub options_ttl: Option<Duration>,
}

/// A target's cache prices: its input price and what a cached and a
/// written token cost as shares of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub input_per_mtok: f64,
    pub read: f64,
    pub write: f64,
}

/// What the decision machine weighs when a pinned target asks to wait.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weigh {
    /// What leaving the pinned target's cache costs, in USD.
    pub switch_cost_usd: f64,
    /// What one second of waiting costs, in USD.
    pub wait_cost_per_second: f64,
}

/// The wait-or-switch rule's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Sit the wait out on the pinned target.
    Wait,
    /// Leave for the next target now.
    Switch,
}

// === impl CacheKind ===

impl CacheKind {
    /// The cache of a target speaking `protocol`. Converse (Bedrock's
    /// own API) caches as Anthropic does, with `cachePoint`s.
    pub fn of(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Messages | Protocol::Converse => Self::Anthropic,
            Protocol::GenerateContent => Self::Gemini,
            _ => Self::OpenAi,
        }
    }

    /// The built-in prices (shares of an uncached input token): Anthropic
    /// reads at 0.1 and writes at 1.25 (2 for a one-hour entry); OpenAI's
    /// GPT-5 family and Gemini read at 0.1 and charge no write.
    fn shares(self, hints: CacheHints) -> (f64, f64) {
        match self {
            Self::Anthropic if hints.one_hour => (0.1, 2.0),
            Self::Anthropic => (0.1, 1.25),
            Self::OpenAi | Self::Gemini => (0.1, 1.0),
        }
    }

    /// How many of `usage`'s input tokens the cache now holds: Anthropic's
    /// reads and writes; an automatic cache's whole prompt, once past its
    /// minimum (it keeps the prefix whether it read any of it or not).
    pub fn cached_prefix(self, usage: &Usage) -> u64 {
        let floor = match self {
            Self::Anthropic => {
                return usage
                    .cache_read_input_tokens
                    .saturating_add(usage.cache_write_input_tokens);
            }
            Self::OpenAi => OPENAI_MIN_PREFIX,
            Self::Gemini => GEMINI_MIN_PREFIX,
        };
        if usage.input_tokens >= floor {
            usage.input_tokens
        } else {
            usage.cache_read_input_tokens
        }
    }
}

// === impl TtlClass ===

impl TtlClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FiveMinutes => "5m",
            Self::OneHour => "1h",
            Self::InMemory => "in_memory",
            Self::Extended => "24h",
            Self::Explicit => "explicit",
            Self::Implicit => "implicit",
            Self::Configured => "configured",
        }
    }
}

/// How long a pin on a target with cache `kind` lives after its last
/// hit: the operator's `cache_ttl` when set, else what the request asked
/// for, else the provider's documented default (Gemini documents none:
/// five minutes, as the others' shortest).
pub fn cache_ttl(
    kind: CacheKind,
    hints: CacheHints,
    configured: Option<Duration>,
) -> (TtlClass, Duration) {
    const MIN: u64 = 60;
    if let Some(ttl) = configured {
        return (TtlClass::Configured, ttl);
    }
    match kind {
        CacheKind::Anthropic if hints.one_hour => (TtlClass::OneHour, secs(60 * MIN)),
        CacheKind::Anthropic => (TtlClass::FiveMinutes, secs(5 * MIN)),
        // A client's own TTL is capped: no cache outlives a day, and a pin
        // must never be given a lifetime the clock cannot add.
        CacheKind::OpenAi => match hints.options_ttl {
            Some(ttl) => (
                TtlClass::Explicit,
                ttl.min(understudy_settings::MAX_CACHE_TTL),
            ),
            None if hints.retention_24h => (TtlClass::Extended, secs(24 * 60 * MIN)),
            None => (TtlClass::InMemory, secs(5 * MIN)),
        },
        CacheKind::Gemini => (TtlClass::Implicit, secs(5 * MIN)),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `provider`'s cache prices for `model`: its configured input price (else
/// [`ASSUMED_INPUT_PER_MTOK`]), and the read and write shares of its
/// cache kind, each overridable by the operator.
pub fn rates(
    provider: &ProviderSettings,
    model: &str,
    hints: CacheHints,
    configured: Option<&CacheOverride>,
) -> Rates {
    let (read, write) = CacheKind::of(provider.protocol_for(model)).shares(hints);
    Rates {
        input_per_mtok: provider
            .price_of(model)
            .map_or(ASSUMED_INPUT_PER_MTOK, |p| p.input_per_mtok),
        read: configured.and_then(|c| c.cache_read).unwrap_or(read),
        write: configured.and_then(|c| c.cache_write).unwrap_or(write),
    }
}

/// What moving a session with `prefix` cached tokens off target `from`
/// onto `to` costs on its next turn, in USD: the prefix at `from`'s
/// uncached minus cached rate, plus `to`'s cache-write premium.
pub fn switch_cost_usd(prefix: u64, from: Rates, to: Rates) -> f64 {
    let per_token = from.input_per_mtok * (1.0 - from.read).max(0.0)
        + to.input_per_mtok * (to.write - 1.0).max(0.0);
    prefix as f64 * per_token / 1_000_000.0
}

// === impl Weigh ===

impl Weigh {
    /// Waits while `wait` costs no more than leaving the cache (a tie
    /// stays).
    pub fn choose(&self, wait: Duration) -> Choice {
        if wait.as_secs_f64() * self.wait_cost_per_second <= self.switch_cost_usd {
            Choice::Wait
        } else {
            Choice::Switch
        }
    }
}

// === impl Choice ===

impl Choice {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wait => "wait",
            Self::Switch => "switch",
        }
    }
}

// === impl CacheHints ===

impl CacheHints {
    /// What a natively written request says of its cache's lifetime. A
    /// Chat Completions body is written natively only when it holds no
    /// member the translation would change or leave out, and every member
    /// that sets a cache's lifetime (`prompt_cache_retention`,
    /// `prompt_cache_options`, a part's `cache_control`) is one of those:
    /// such a body says nothing, and is not searched.
    pub fn of_native(native: &NativeRequest) -> Self {
        match native.kind {
            Protocol::ChatCompletions => Self::default(),
            _ => Self::of_body(&native.body),
        }
    }

    /// What a request body (JSON, as the client sent it) says of its
    /// cache's lifetime, read by scanning for the fields rather than
    /// parsing the body again.
    pub fn of_body(body: &str) -> Self {
        // Two searches with searchers made once (vectorised scans; a
        // substring search per key sets its searcher up on every call,
        // which costs more than scanning a short body): `"ttl"`, and the
        // prefix the other two keys share, each then told apart by its
        // tail.
        static TTL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("\"ttl\""));
        static PROMPT_CACHE: LazyLock<Finder<'static>> =
            LazyLock::new(|| Finder::new("\"prompt_cache_"));
        let bytes = body.as_bytes();
        let mut hints = Self::default();
        // Where `prompt_cache_options` is: its ttl is the first string
        // `ttl` after it.
        let mut options_at = None;
        for at in PROMPT_CACHE.find_iter(bytes) {
            let tail = &bytes[at + 14..];
            if tail.starts_with(b"retention\"") {
                hints.retention_24h |= string_value(body, at + 24) == Some("24h");
            } else if tail.starts_with(b"options\"") && options_at.is_none() {
                options_at = Some(at);
            }
        }
        let mut options_read = false;
        for at in TTL.find_iter(bytes) {
            // The key's end: past its opening quote, name and closing quote.
            let Some(v) = string_value(body, at + 5) else {
                continue;
            };
            hints.one_hour |= v == "1h";
            if !options_read && options_at.is_some_and(|o| o < at) {
                options_read = true;
                hints.options_ttl = duration_of(v);
            }
        }
        hints
    }
}

/// The JSON string value after a key ending at `end` in `body` (a colon,
/// then a string), without its quotes; `None` when no string follows.
fn string_value(body: &str, end: usize) -> Option<&str> {
    // `end` follows the key's closing ASCII quote: a character boundary.
    let rest = body.get(end..)?.trim_start().strip_prefix(':')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    rest.split('"').next()
}

/// `"30m"`, `"1h"`, `"90s"` as a duration.
fn duration_of(text: &str) -> Option<Duration> {
    let (num, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale).map(Duration::from_secs)
}

#[cfg(test)]
mod tests;
