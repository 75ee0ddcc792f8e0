//! How long a rate-limited target is waited out before its one retry.

use std::time::Duration;

/// The wait used when a provider rate-limits without saying how long.
pub const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(1);

/// Decides the wait before the single rate-limit retry, or `None` when the
/// plan should move on at once because the provider asked for longer than
/// `max_wait`. A missing hint becomes a jittered second (0.75 s to 1.25 s,
/// `jitter` in `0.0..=1.0` choosing where) so that a burst of rate-limited
/// requests does not retry in lockstep. The jitter is an input: this module
/// draws no random numbers.
pub fn rate_limit_wait(
    retry_after: Option<Duration>,
    max_wait: Duration,
    jitter: f64,
) -> Option<Duration> {
    let wait = match retry_after {
        Some(d) => d,
        None => {
            let jitter = if jitter.is_finite() {
                jitter.clamp(0.0, 1.0)
            } else {
                0.5
            };
            DEFAULT_RATE_LIMIT_WAIT - Duration::from_millis(250)
                + Duration::from_millis(500).mul_f64(jitter)
        }
    };
    (wait <= max_wait).then_some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits() {
        let cap = Duration::from_secs(5);
        let ms = Duration::from_millis;
        // (retry_after, cap, jitter, expected)
        let cases = [
            (Some(Duration::from_secs(2)), cap, 0.3, Some(ms(2000))),
            (Some(Duration::from_secs(6)), cap, 0.3, None),
            (Some(Duration::ZERO), cap, 0.3, Some(Duration::ZERO)),
            (None, cap, 0.0, Some(ms(750))),
            (None, cap, 0.5, Some(ms(1000))),
            (None, cap, 1.0, Some(ms(1250))),
            (None, cap, 7.0, Some(ms(1250))),
            (None, cap, f64::NAN, Some(ms(1000))),
            (None, ms(100), 0.5, None),
        ];
        for (retry_after, cap, jitter, want) in cases {
            assert_eq!(
                rate_limit_wait(retry_after, cap, jitter),
                want,
                "{retry_after:?} {cap:?} {jitter}"
            );
        }
    }
}
