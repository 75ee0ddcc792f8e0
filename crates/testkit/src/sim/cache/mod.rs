//! A simulator's prompt cache, per account, as the real APIs keep theirs,
//! so that tests measure cache hits the way a bill would.
//!
//! - **Account**: the key a request authenticates with (`x-api-key`,
//!   `Authorization: Bearer`, …): two keys never share an entry. Behind a
//!   cloud the account is the simulator's (one Bedrock account, one
//!   Vertex project, one Azure resource); simulators never share a cache,
//!   so the Anthropic, Bedrock and Vertex ones are three cold caches.
//!   Entries are per model too.
//! - **Anthropic's Messages** (Claude on Bedrock's InvokeModel and
//!   Converse, and on Vertex): explicit breakpoints. An entry is written
//!   for the prefix up to and including each breakpoint's block (tools →
//!   system → messages) whose prefix reaches the model's minimum
//!   ([`minimum`]; a shorter one is silently not cached). A request reads
//!   the longest prefix with a live entry at one of the 20 block
//!   boundaries ending at one of its breakpoints (the API's lookback),
//!   and writes from there to its last breakpoint; the tokens after that
//!   are uncached. An entry lives its TTL (`5m` or `1h`), refreshed on
//!   each hit.
//! - **OpenAI** (Chat Completions, Responses, Azure): automatic. Every
//!   prompt of at least 1 024 tokens is cached at each block boundary;
//!   a request reads the longest cached prefix, rounded down to a
//!   128-token step. `prompt_cache_key` joins the routing hash; retention
//!   is the short TTL (in memory), or the long one with
//!   `prompt_cache_retention: "24h"`. No writes are billed.
//! - **Gemini**: implicit, as OpenAI's without the steps, from the
//!   model's minimum.
//!
//! The TTLs are real time, set per simulator
//! ([`SimProvider::prompt_cache_ttls`], so a test can use a short one),
//! and caching can be turned off ([`SimProvider::without_prompt_cache`]).
//! Token counts: `prompt.rs`; Converse's `cachePoint`: `converse.rs`.

pub(crate) mod converse;
pub(crate) mod prompt;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use self::prompt::{Prompt, Ttl};
use super::{Dialect, Received, SimProvider, lock};

/// Anthropic's lookback: a breakpoint finds an entry at its own block or
/// one of the 19 before it.
const LOOKBACK: usize = 20;
/// OpenAI caches from this many tokens, in steps of [`OPENAI_STEP`].
const OPENAI_MINIMUM: u64 = 1024;
const OPENAI_STEP: u64 = 128;

/// A simulator's cache totals, as a bill counts them: input tokens read
/// from the cache, written to it (billed as writes: Anthropic's and
/// Bedrock's only) and neither; together every answered prompt's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheTotals {
    /// Answered requests counted.
    pub requests: u64,
    pub read: u64,
    pub written: u64,
    pub uncached: u64,
}

impl CacheTotals {
    /// The share of input tokens read from the cache (0 with none).
    pub fn read_share(&self) -> f64 {
        let all = self.read + self.written + self.uncached;
        if all == 0 {
            0.0
        } else {
            self.read as f64 / all as f64
        }
    }
}

/// What the cache did for one request (its usage reports it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cached {
    /// The prompt's tokens.
    pub total: u64,
    pub read: u64,
    /// Written to `5m` entries.
    pub write_short: u64,
    /// Written to `1h` entries.
    pub write_long: u64,
}

impl Cached {
    pub(crate) fn written(&self) -> u64 {
        self.write_short + self.write_long
    }

    /// The prompt's tokens neither read nor written.
    pub(crate) fn uncached(&self) -> u64 {
        self.total.saturating_sub(self.read + self.written())
    }
}

/// Where Claude is served (its minimums differ on Bedrock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Platform {
    FirstParty,
    Bedrock,
}

/// A simulator's prompt cache.
pub(crate) struct PromptCache {
    state: Mutex<State>,
}

struct State {
    on: bool,
    short: Duration,
    long: Duration,
    platform: Platform,
    entries: HashMap<u64, Entry>,
    totals: CacheTotals,
}

struct Entry {
    expires: Instant,
    ttl: Duration,
}

// === impl SimProvider ===

impl SimProvider {
    /// The lifetimes of prompt-cache entries: `short` for Anthropic's
    /// `5m`, OpenAI's in-memory retention and Gemini's implicit cache
    /// (default 5 minutes), `long` for Anthropic's `1h` and OpenAI's
    /// `24h` retention (default 1 hour). Real time: a test sets short ones.
    pub fn prompt_cache_ttls(&self, short: Duration, long: Duration) -> &Self {
        let mut s = lock(&self.shared.cache.state);
        s.short = short;
        s.long = long;
        drop(s);
        self
    }

    /// Turns the prompt cache off: nothing is read or written (every
    /// prompt token is uncached).
    pub fn without_prompt_cache(&self) -> &Self {
        lock(&self.shared.cache.state).on = false;
        self
    }

    /// The cache's totals so far.
    pub fn prompt_cache_totals(&self) -> CacheTotals {
        lock(&self.shared.cache.state).totals
    }

    /// Live (unexpired) cache entries, every account's.
    pub fn prompt_cache_entries(&self) -> usize {
        let now = Instant::now();
        let s = lock(&self.shared.cache.state);
        s.entries.values().filter(|e| e.expires > now).count()
    }

    /// Forgets every cache entry and zeroes the totals.
    pub fn clear_prompt_cache(&self) -> &Self {
        let mut s = lock(&self.shared.cache.state);
        s.entries.clear();
        s.totals = CacheTotals::default();
        drop(s);
        self
    }

    /// Counts Claude's minimums as Bedrock does.
    pub(crate) fn cache_as_bedrock(&self) {
        lock(&self.shared.cache.state).platform = Platform::Bedrock;
    }
}

// === impl PromptCache ===

impl PromptCache {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                on: true,
                short: Duration::from_secs(5 * 60),
                long: Duration::from_secs(60 * 60),
                platform: Platform::FirstParty,
                entries: HashMap::new(),
                totals: CacheTotals::default(),
            }),
        }
    }

    /// Reads and writes the cache for `req`, answered in `dialect`, and
    /// counts it (`None`: not a request for an answer).
    pub(crate) fn serve(&self, dialect: Dialect, req: &Received) -> Option<Cached> {
        let prompt = prompt_of(dialect, req)?;
        let keys = chain(req.api_key().unwrap_or_default(), &prompt);
        let now = Instant::now();
        let mut s = lock(&self.state);
        let mut cached = Cached {
            total: prompt.tokens(),
            ..Cached::default()
        };
        if s.on {
            s.entries.retain(|_, e| e.expires > now);
            cached = match dialect {
                Dialect::Messages | Dialect::Converse => s.explicit(&prompt, &keys, now),
                Dialect::ChatCompletions | Dialect::Responses => {
                    s.automatic(&prompt, &keys, now, OPENAI_MINIMUM, OPENAI_STEP)
                }
                Dialect::GenerateContent => {
                    let min = minimum(dialect, s.platform, &prompt.model);
                    s.automatic(&prompt, &keys, now, min, 1)
                }
            };
        }
        s.totals.requests += 1;
        s.totals.read += cached.read;
        s.totals.written += cached.written();
        s.totals.uncached += cached.uncached();
        Some(cached)
    }
}

impl State {
    /// Anthropic's breakpoints.
    fn explicit(&mut self, prompt: &Prompt, keys: &[u64], now: Instant) -> Cached {
        let cum = cumulative(prompt);
        let min = minimum(Dialect::Messages, self.platform, &prompt.model);
        let mut read_at: Option<usize> = None;
        for &(at, _) in &prompt.breakpoints {
            let from = (at + 1).saturating_sub(LOOKBACK);
            let hit = (from..=at)
                .rev()
                .find(|&j| self.entries.contains_key(&keys[j]));
            read_at = read_at.max(hit);
        }
        let read = read_at.map_or(0, |j| cum[j]);
        if let Some(entry) = read_at.and_then(|j| self.entries.get_mut(&keys[j])) {
            entry.expires = now + entry.ttl;
        }
        let mut cached = Cached {
            total: cum.last().copied().unwrap_or(0),
            read,
            ..Cached::default()
        };
        let mut written_to = read;
        for &(at, ttl) in &prompt.breakpoints {
            if cum[at] < min {
                continue;
            }
            let ttl_for = self.ttl(ttl);
            let entry = self.entries.entry(keys[at]).or_insert(Entry {
                expires: now,
                ttl: ttl_for,
            });
            entry.expires = now + entry.ttl;
            if cum[at] > written_to {
                match ttl {
                    Ttl::Short => cached.write_short += cum[at] - written_to,
                    Ttl::Long => cached.write_long += cum[at] - written_to,
                }
                written_to = cum[at];
            }
        }
        cached
    }

    /// OpenAI's and Gemini's automatic caches: the longest cached prefix
    /// of at least `min` tokens, rounded down to `step`; the whole prompt
    /// cached at each block boundary from `min` on.
    fn automatic(
        &mut self,
        prompt: &Prompt,
        keys: &[u64],
        now: Instant,
        min: u64,
        step: u64,
    ) -> Cached {
        let cum = cumulative(prompt);
        let hit = (0..keys.len())
            .rev()
            .find(|&j| cum[j] >= min && self.entries.contains_key(&keys[j]));
        let ttl = self.ttl(prompt.retention.unwrap_or(Ttl::Short));
        for (j, key) in keys.iter().enumerate() {
            if cum[j] >= min {
                let entry = self
                    .entries
                    .entry(*key)
                    .or_insert(Entry { expires: now, ttl });
                entry.expires = now + entry.ttl;
            }
        }
        Cached {
            total: cum.last().copied().unwrap_or(0),
            read: hit.map_or(0, |j| cum[j] / step * step),
            ..Cached::default()
        }
    }

    fn ttl(&self, ttl: Ttl) -> Duration {
        match ttl {
            Ttl::Short => self.short,
            Ttl::Long => self.long,
        }
    }
}

/// The prompt of a request for an answer in `dialect` (`None`: another
/// path, such as counting tokens).
fn prompt_of(dialect: Dialect, req: &Received) -> Option<Prompt> {
    let path = req.path.split('?').next().unwrap_or_default();
    let body: Value = serde_json::from_slice(&req.body).ok()?;
    match dialect {
        Dialect::Messages | Dialect::Converse => path
            .ends_with("/v1/messages")
            .then(|| prompt::messages(&body)),
        Dialect::ChatCompletions => path
            .ends_with("/chat/completions")
            .then(|| prompt::chat(&body)),
        Dialect::Responses => path
            .ends_with("/responses")
            .then(|| prompt::responses(&body)),
        Dialect::GenerateContent => {
            let (head, method) = path.rsplit_once(':')?;
            let model = head.rsplit('/').next().unwrap_or_default();
            matches!(method, "generateContent" | "streamGenerateContent")
                .then(|| prompt::gemini(&body, model))
        }
    }
}

/// Each block's prefix as a key: the account, the model and the routing
/// key, then the blocks up to it.
fn chain(account: &str, prompt: &Prompt) -> Vec<u64> {
    let mut h = DefaultHasher::new();
    (account, &prompt.model, &prompt.routing).hash(&mut h);
    let mut at = h.finish();
    prompt
        .blocks
        .iter()
        .map(|b| {
            let mut h = DefaultHasher::new();
            (at, b.hash).hash(&mut h);
            at = h.finish();
            at
        })
        .collect()
}

/// The tokens up to and including each block.
fn cumulative(prompt: &Prompt) -> Vec<u64> {
    let mut sum = 0;
    prompt
        .blocks
        .iter()
        .map(|b| {
            sum += b.tokens;
            sum
        })
        .collect()
}

/// The shortest prefix a model caches, in tokens. Claude's by model
/// family (first party — the Claude API, Vertex — and Bedrock, whose
/// Opus 4.7 and Mythos Preview need more); Gemini's implicit cache 4 096
/// from Gemini 3, else 2 048; OpenAI's 1 024. An unknown Claude: 1 024.
pub(crate) fn minimum(dialect: Dialect, platform: Platform, model: &str) -> u64 {
    match dialect {
        Dialect::ChatCompletions | Dialect::Responses => OPENAI_MINIMUM,
        Dialect::GenerateContent if model.contains("gemini-3") || model.contains("gemini-4") => {
            4096
        }
        Dialect::GenerateContent => 2048,
        Dialect::Messages | Dialect::Converse => claude_minimum(platform, model),
    }
}

fn claude_minimum(platform: Platform, model: &str) -> u64 {
    let bedrock = platform == Platform::Bedrock;
    // Most specific first: `opus-4-7` before `opus-4`, `sonnet-5-5`
    // before `sonnet-5`, `mythos-preview` before `mythos`.
    const TABLE: [(&str, u64, u64); 17] = [
        ("opus-4-7", 2048, 4096),
        ("mythos-preview", 2048, 4096),
        ("opus-4-6", 4096, 4096),
        ("opus-4-5", 4096, 4096),
        ("haiku-4-5", 4096, 4096),
        ("opus-5", 512, 512),
        ("sonnet-5-5", 512, 512),
        ("haiku-5-5", 512, 512),
        ("fable", 512, 512),
        ("mythos", 512, 512),
        ("opus-4-8", 1024, 1024),
        ("sonnet-5", 1024, 1024),
        ("sonnet-4-6", 1024, 1024),
        ("sonnet-4-5", 1024, 1024),
        ("opus-4-1", 1024, 1024),
        ("opus-4", 1024, 1024),
        ("sonnet-4", 1024, 1024),
    ];
    TABLE
        .iter()
        .find(|(family, ..)| model.contains(family))
        .map_or(
            1024,
            |&(_, first, on_bedrock)| {
                if bedrock { on_bedrock } else { first }
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimums_follow_the_model_and_the_platform() {
        let cases = [
            (Platform::FirstParty, "claude-opus-4-7", 2048),
            (Platform::Bedrock, "us.anthropic.claude-opus-4-7-v1:0", 4096),
            (Platform::FirstParty, "claude-sonnet-5-5", 512),
            (Platform::FirstParty, "claude-sonnet-5", 1024),
            (Platform::FirstParty, "claude-haiku-4-5-20251001", 4096),
            (Platform::FirstParty, "claude-opus-4-1", 1024),
            (Platform::FirstParty, "claude-model", 1024),
        ];
        for (platform, model, min) in cases {
            assert_eq!(minimum(Dialect::Messages, platform, model), min, "{model}");
        }
        assert_eq!(
            minimum(
                Dialect::GenerateContent,
                Platform::FirstParty,
                "gemini-3-pro"
            ),
            4096
        );
        assert_eq!(
            minimum(
                Dialect::GenerateContent,
                Platform::FirstParty,
                "gemini-2.5-flash"
            ),
            2048
        );
    }
}
