//! The rate-limit budget a provider reports on its answers, read before
//! a 429 comes (issue 32's "seeing the 429 coming"; production.md §2):
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

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;

use crate::classify::go_duration;

pub use understudy_core::ratelimit::{Budget, RateLimits};

/// The budgets in `headers`, as of `now` (Anthropic's resets are times).
pub fn read(headers: &HeaderMap, now: SystemTime) -> RateLimits {
    let openai = |[limit, remaining, reset]: [&str; 3]| {
        budget(headers, limit, remaining, reset, go_duration)
    };
    let anthropic = |[limit, remaining, reset]: [&str; 3]| {
        budget(headers, limit, remaining, reset, |s| {
            until(rfc3339(s)?, now)
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

/// An RFC 3339 time (`2025-01-01T00:00:30Z`, `…T00:00:30.5+01:00`), as
/// Anthropic writes its resets; `None` for anything else.
pub fn rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let digits = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0_u64;
    if b.get(at) == Some(&b'.') {
        let end = s[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(s.len(), |i| at + 1 + i);
        let frac = &s[at + 1..end];
        if frac.is_empty() {
            return None;
        }
        let kept = &frac[..frac.len().min(9)];
        nanos = kept.parse::<u64>().ok()? * 10_u64.pow(9 - kept.len() as u32);
        at = end;
    }
    let offset = match &s[at..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && matches!(tz.as_bytes()[0], b'+' | b'-')
            && tz.as_bytes()[3] == b':' =>
        {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, u32::try_from(nanos).ok()?))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(rfc3339("2000-03-01T00:00:00Z"), Some(at(951_868_800)));
        assert_eq!(
            rfc3339("2024-02-29T12:00:00-02:30"),
            Some(at(1_709_217_000))
        );
        assert_eq!(
            rfc3339("2025-01-01T00:00:00.123456789123Z"),
            Some(at(1_735_689_600) + Duration::from_nanos(123_456_789))
        );
        for bad in [
            "",
            "2025-01-01",
            "2025-13-01T00:00:00Z",
            "2025-01-01T24:00:00Z",
            "2025-01-01T00:00:00",
            "2025-01-01T00:00:00+0100",
            "2025-01-01T00:00:00.Z",
            "1969-12-31T23:59:59Z",
            "2025-01-01T00:00:00Zjunk",
            "２025-01-01T00:00:00Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }
}
