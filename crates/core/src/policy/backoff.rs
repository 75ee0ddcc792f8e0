//! How long a rate-limited target is waited out before its one retry.

use std::time::Duration;

/// The wait used when a provider rate-limits without saying how long.
pub const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(1);

/// Decides the wait before the single rate-limit retry, or `None` when the
/// plan should move on at once because the provider asked for longer than
/// `max_wait`. A missing hint becomes a jittered second (0.75 s to 1.25 s)
/// so that a burst of rate-limited requests does not retry in lockstep.
pub fn rate_limit_wait(retry_after: Option<Duration>, max_wait: Duration) -> Option<Duration> {
    let wait = match retry_after {
        Some(d) => d,
        None => {
            let jitter = fastrand::u64(0..=500);
            DEFAULT_RATE_LIMIT_WAIT - Duration::from_millis(250) + Duration::from_millis(jitter)
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
        assert_eq!(
            rate_limit_wait(Some(Duration::from_secs(2)), cap),
            Some(Duration::from_secs(2))
        );
        assert_eq!(rate_limit_wait(Some(Duration::from_secs(6)), cap), None);
        assert_eq!(
            rate_limit_wait(Some(Duration::ZERO), cap),
            Some(Duration::ZERO)
        );
        for _ in 0..100 {
            let w = rate_limit_wait(None, cap).unwrap_or_default();
            assert!(
                w >= Duration::from_millis(750) && w <= Duration::from_millis(1250),
                "{w:?}"
            );
        }
        assert_eq!(rate_limit_wait(None, Duration::from_millis(100)), None);
    }
}
