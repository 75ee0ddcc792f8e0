//! The rate-limit budget a provider reports on its answers
//! (`x-ratelimit-*`, `anthropic-ratelimit-*`; read by `understudy-wire`'s
//! `ratelimit`), which a key pool steers by before a 429 comes.
//!
//! A leaf module: plain types, no I/O.

use std::time::Duration;

/// One dimension of a budget: what is left, of how much, until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub limit: Option<u64>,
    pub remaining: u64,
    /// How long until it is whole again, from the answer's arrival.
    pub reset: Option<Duration>,
}

/// Every dimension a provider reported on one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub requests: Option<Budget>,
    pub tokens: Option<Budget>,
    /// Anthropic's input and output token budgets, when it splits them.
    pub input_tokens: Option<Budget>,
    pub output_tokens: Option<Budget>,
}

impl RateLimits {
    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The tightest token budget reported (total, or input when split).
    pub fn tightest_tokens(&self) -> Option<Budget> {
        [self.tokens, self.input_tokens, self.output_tokens]
            .into_iter()
            .flatten()
            .min_by_key(|b| b.remaining)
    }
}
