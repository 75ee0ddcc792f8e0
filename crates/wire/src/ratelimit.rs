//! The rate-limit budget a provider reports on its answers, read before
//! a 429 comes, so that a target near its limit can be steered away from:
//!
//! - OpenAI and Groq: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`,
//!   resets as Go durations (`6m0s`, `1.57s`, `399ms`).
//! - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,
//!   output-tokens}-{limit,remaining,reset}`, resets as RFC 3339 times
//!   (`2025-01-01T00:00:30Z`).
//!
//! A dimension is known only when its `remaining` is readable; a missing
//! or garbled header leaves it unknown (fail-open: no budget read is no
//! reason to steer away). Limits are per organisation or project, not per
//! key, so what is read describes the account the key belongs to.

use std::time::{Duration, SystemTime};

#[cfg(test)]
use std::time::UNIX_EPOCH;

use http::HeaderMap;

use crate::go_duration::parse as go_duration;

pub use understudy_types::ratelimit::{Budget, RateLimits};

/// The budgets in `headers`, as of `now` (Anthropic's resets are times).
pub fn read(headers: &HeaderMap, now: SystemTime) -> RateLimits {
    let openai = |[limit, remaining, reset]: [&str; 3]| {
        budget(headers, limit, remaining, reset, go_duration)
    };
    let anthropic = |[limit, remaining, reset]: [&str; 3]| {
        budget(headers, limit, remaining, reset, |s| {
            until(understudy_types::clock::rfc3339(s)?, now)
        })
    };
    RateLimits {
        requests: openai([
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ])
        .or_else(|| {
            anthropic([
                "anthropic-ratelimit-requests-limit",
                "anthropic-ratelimit-requests-remaining",
                "anthropic-ratelimit-requests-reset",
            ])
        }),
        tokens: openai([
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ratelimit-reset-tokens",
        ])
        .or_else(|| {
            anthropic([
                "anthropic-ratelimit-tokens-limit",
                "anthropic-ratelimit-tokens-remaining",
                "anthropic-ratelimit-tokens-reset",
            ])
        }),
        input_tokens: anthropic([
            "anthropic-ratelimit-input-tokens-limit",
            "anthropic-ratelimit-input-tokens-remaining",
            "anthropic-ratelimit-input-tokens-reset",
        ]),
        output_tokens: anthropic([
            "anthropic-ratelimit-output-tokens-limit",
            "anthropic-ratelimit-output-tokens-remaining",
            "anthropic-ratelimit-output-tokens-reset",
        ]),
    }
}

fn budget(
    headers: &HeaderMap,
    limit: &str,
    remaining: &str,
    reset: &str,
    reset_of: impl Fn(&str) -> Option<Duration>,
) -> Option<Budget> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| text(name)?.parse::<u64>().ok();
    Some(Budget {
        remaining: number(remaining)?,
        limit: number(limit),
        reset: text(reset).and_then(reset_of),
    })
}

/// How long from `now` until `at` (zero when it has passed).
fn until(at: SystemTime, now: SystemTime) -> Option<Duration> {
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn openai_and_groq_budgets_with_go_duration_resets() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "10000"),
            ("x-ratelimit-remaining-requests", "9999"),
            ("x-ratelimit-reset-requests", "6m0s"),
            ("x-ratelimit-limit-tokens", "200000"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "2m59.56s"),
        ]);
        let r = read(&h, at(0));
        assert_eq!(
            r.requests,
            Some(Budget {
                limit: Some(10_000),
                remaining: 9_999,
                reset: Some(Duration::from_secs(360)),
            })
        );
        assert_eq!(r.tokens.unwrap().remaining, 0);
        assert_eq!(
            r.tokens.unwrap().reset,
            Some(Duration::from_secs_f64(179.56))
        );
        assert_eq!(r.input_tokens, None);
    }

    #[test]
    fn anthropic_budgets_with_rfc3339_resets() {
        // 2025-01-01T00:00:00Z is 1 735 689 600.
        let now = at(1_735_689_600);
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "2025-01-01T00:00:20Z"),
            ("anthropic-ratelimit-input-tokens-limit", "30000"),
            ("anthropic-ratelimit-input-tokens-remaining", "12000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-01-01T01:00:30.5+01:00",
            ),
            ("anthropic-ratelimit-output-tokens-remaining", "800"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-12-31T23:59:00Z",
            ),
        ]);
        let r = read(&h, now);
        assert_eq!(
            r.requests,
            Some(Budget {
                limit: Some(50),
                remaining: 3,
                reset: Some(Duration::from_secs(20)),
            })
        );
        assert_eq!(
            r.input_tokens.unwrap().reset,
            Some(Duration::from_millis(30_500))
        );
        // A reset already past is now; no limit header, no limit.
        assert_eq!(
            r.output_tokens,
            Some(Budget {
                limit: None,
                remaining: 800,
                reset: Some(Duration::ZERO),
            })
        );
        assert_eq!(r.tokens, None);
    }

    #[test]
    fn missing_or_garbled_headers_are_unknown_never_zero() {
        assert!(read(&HeaderMap::new(), at(0)).is_empty());
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-remaining-tokens", "lots"),
            ("anthropic-ratelimit-requests-remaining", "7"),
            ("anthropic-ratelimit-requests-reset", "tomorrow"),
        ]);
        let r = read(&h, at(0));
        assert_eq!(r.tokens, None);
        // OpenAI's requests header unreadable: Anthropic's is read; its
        // reset unreadable is unknown.
        assert_eq!(
            r.requests,
            Some(Budget {
                limit: None,
                remaining: 7,
                reset: None,
            })
        );
    }
}
