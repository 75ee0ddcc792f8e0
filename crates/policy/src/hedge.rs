//! Hedging's pure parts: the per-target estimate of the p95 time to first
//! output (a log-bucket histogram the engine keeps in atomics: which bucket
//! a latency falls in, and the quantile of the counts), which hedging
//! applies to a call (a group's own between its members, else the
//! route's), when a request's backup starts, the share cap (how many of a route's requests may hedge,
//! one packed word), and how a hedge went (or why its backup was not
//! started).
//!
//! The commit rule itself is the stream's ([`crate::stream::Watch`]): the
//! first attempt whose watch commits — real output, never a preamble —
//! serves, and the other is cancelled.

use std::time::Duration;

use understudy_settings::{HedgeAfter, HedgeSettings};

/// Buckets of the histogram: bucket 0 holds everything under 1 ms, bucket
/// `i` up to `2^(i/4)` ms (each a fourth of a doubling wide, about 19 %),
/// the last everything from about 45 s.
pub const BUCKETS: usize = 64;

/// Observations a target needs before its p95 is trusted.
pub const MIN_SAMPLES: u32 = 20;

/// When a histogram's count reaches this, every bucket is halved: recent
/// observations weigh more than old ones, and no count overflows.
pub const HALVE_AT: u32 = 2048;

/// The share cap's window: its two counts are halved when the requests
/// reach this.
const SHARE_WINDOW: u32 = 4096;

/// Why a hedge that was due was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The route has hedged its `max_share` of requests.
    Share,
    /// The backup's breaker is open.
    Breaker,
    /// The backup (a pool's keys) is at its rate limit.
    RateLimit,
    /// The fallback spend cap is reached.
    Spend,
}

/// How a request's hedge went, as counted and written in its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Both ran; the primary showed output first.
    WonPrimary,
    /// Both ran; the backup showed output first.
    WonBackup,
    /// Both ran and both failed.
    Failed,
    /// The hedge was due and not started.
    Skipped(Skip),
}

/// The bucket a time to first output falls in.
pub fn bucket_of(latency: Duration) -> usize {
    let ms = latency.as_secs_f64() * 1000.0;
    if ms < 1.0 {
        return 0;
    }
    // Bucket i holds (2^((i-1)/4), 2^(i/4)] ms.
    let i = (ms.log2() * 4.0).ceil() as usize;
    i.clamp(1, BUCKETS - 1)
}

/// The upper bound of bucket `i` (the estimate a quantile in it gives:
/// erring late, so that a hedge fires for fewer requests, not more).
pub fn bucket_upper(i: usize) -> Duration {
    Duration::from_secs_f64(2f64.powf(i as f64 / 4.0) / 1000.0)
}

/// The `q` quantile (0 to 1) of a histogram's `counts`, when it holds at
/// least [`MIN_SAMPLES`].
pub fn quantile(counts: &[u32], q: f64) -> Option<Duration> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total < u64::from(MIN_SAMPLES) {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += u64::from(c);
        if seen >= rank {
            return Some(bucket_upper(i));
        }
    }
    counts.len().checked_sub(1).map(bucket_upper)
}

/// The hedging that applies to a call and its would-be backup (the plan's
/// next target): when the serving target is a member of a group that sets
/// its own (`serving`: the group's number and settings), that group's, and
/// only when the backup is a member of the same group (`backup_group`) — a
/// group's hedge never races a member against the next step; otherwise
/// the route's, whatever the backup.
pub fn applies<'s>(
    route: Option<&'s HedgeSettings>,
    serving: Option<(usize, &'s HedgeSettings)>,
    backup_group: Option<usize>,
) -> Option<&'s HedgeSettings> {
    match serving {
        Some((group, own)) => (backup_group == Some(group)).then_some(own),
        None => route,
    }
}

/// After how long the serving attempt, silent so far, is hedged: the
/// route's fixed duration, or the target's `p95` (while it is unknown, the
/// route's fallback; none: no hedge).
pub fn hedge_after(settings: &HedgeSettings, p95: Option<Duration>) -> Option<Duration> {
    match settings.after {
        HedgeAfter::Fixed(d) => Some(d),
        HedgeAfter::P95 { until_known } => p95.or(until_known),
    }
}

/// Whether the time a hedge's losing call waited in vain (`waited`)
/// counts in its target's p95 (`p95`, when known): its first output would
/// have come later, so the wait is a floor of it. It counts for the
/// primary (hedged for being slow, its wait is its tail), and for a losing
/// backup only when it waited at least the p95 already: a backup cut short
/// by a fast primary says nothing of its own first output, and its short
/// wait would bias its p95 low.
pub fn loser_wait_counts(primary: bool, waited: Duration, p95: Option<Duration>) -> bool {
    primary || p95.is_some_and(|p95| waited >= p95)
}

/// The share cap's word after one more request of the route (requests in
/// the low 32 bits, hedges in the high).
pub fn share_counted(packed: u64) -> u64 {
    let (mut requests, mut hedges) = unpack(packed);
    requests = requests.saturating_add(1);
    if requests >= SHARE_WINDOW {
        requests /= 2;
        hedges /= 2;
    }
    pack(requests, hedges)
}

/// The share cap's word with one more hedge, when the route may hedge
/// once more at `max_share_ppm` (millionths of its requests; one hedge is
/// always allowed ahead, so the first slow request of a quiet route may
/// hedge).
pub fn share_taken(packed: u64, max_share_ppm: u32) -> Option<u64> {
    let (requests, hedges) = unpack(packed);
    let allowed = u64::from(requests) * u64::from(max_share_ppm) + 1_000_000;
    (u64::from(hedges + 1) * 1_000_000 <= allowed).then(|| pack(requests, hedges + 1))
}

fn pack(requests: u32, hedges: u32) -> u64 {
    (u64::from(hedges) << 32) | u64::from(requests)
}

fn unpack(packed: u64) -> (u32, u32) {
    (packed as u32, (packed >> 32) as u32)
}

// === impl Outcome ===

impl Outcome {
    /// The metric label and event value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WonPrimary => "won_primary",
            Self::WonBackup => "won_backup",
            Self::Failed => "failed",
            Self::Skipped(Skip::Share) => "skipped_share",
            Self::Skipped(Skip::Breaker) => "skipped_breaker",
            Self::Skipped(Skip::RateLimit) => "skipped_rate_limit",
            Self::Skipped(Skip::Spend) => "skipped_spend",
        }
    }

    /// Whether the backup was started.
    pub fn started(self) -> bool {
        !matches!(self, Self::Skipped(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_the_p95() {
        for (ms, bucket) in [(0.5, 0), (1.0, 1), (300.0, 33), (5000.0, 50), (1e9, 63)] {
            assert_eq!(
                bucket_of(Duration::from_secs_f64(ms / 1000.0)),
                bucket,
                "{ms}"
            );
        }
        // Every latency is at most its bucket's upper bound, and above the
        // one before.
        for ms in [1.5, 17.0, 299.0, 301.0, 4_999.0] {
            let d = Duration::from_secs_f64(ms / 1000.0);
            let i = bucket_of(d);
            assert!(d <= bucket_upper(i) && d > bucket_upper(i - 1), "{ms}");
        }
        // A primary at 0.3 s with one call in fifty at 5 s: the p95 is
        // the 0.3 s bucket's upper bound, not the tail.
        let mut counts = [0u32; BUCKETS];
        counts[bucket_of(Duration::from_millis(300))] = 49;
        counts[bucket_of(Duration::from_secs(5))] = 1;
        let p95 = quantile(&counts, 0.95).unwrap();
        assert!(
            p95 >= Duration::from_millis(300) && p95 < Duration::from_millis(320),
            "{p95:?}"
        );
        // Too few observations: unknown.
        let mut few = [0u32; BUCKETS];
        few[10] = MIN_SAMPLES - 1;
        assert_eq!(quantile(&few, 0.95), None);
    }

    #[test]
    fn when_a_hedge_starts() {
        let p95 = |until_known| HedgeSettings {
            after: HedgeAfter::P95 { until_known },
            max_share_ppm: 50_000,
        };
        let ms = Duration::from_millis;
        assert_eq!(hedge_after(&p95(None), Some(ms(300))), Some(ms(300)));
        assert_eq!(hedge_after(&p95(None), None), None);
        assert_eq!(hedge_after(&p95(Some(ms(800))), None), Some(ms(800)));
        let fixed = HedgeSettings {
            after: HedgeAfter::Fixed(ms(500)),
            max_share_ppm: 50_000,
        };
        assert_eq!(hedge_after(&fixed, Some(ms(300))), Some(ms(500)));
    }

    #[test]
    fn a_groups_own_hedge_wins_for_its_members_and_stays_inside() {
        let ms = Duration::from_millis;
        let route = HedgeSettings {
            after: HedgeAfter::Fixed(ms(900)),
            max_share_ppm: 50_000,
        };
        let group = HedgeSettings {
            after: HedgeAfter::Fixed(ms(200)),
            max_share_ppm: 100_000,
        };
        // (the route's, the serving member's group, the backup's group,
        // what applies)
        let cases = [
            // A member raced by the next member of its group: the group's.
            (Some(&route), Some((0, &group)), Some(0), Some(&group)),
            (None, Some((0, &group)), Some(0), Some(&group)),
            // The next target is another step (or another group): none,
            // even when the route hedges.
            (Some(&route), Some((0, &group)), None, None),
            (Some(&route), Some((0, &group)), Some(1), None),
            // A target outside a hedging group: the route's, whatever the
            // backup.
            (Some(&route), None, Some(0), Some(&route)),
            (Some(&route), None, None, Some(&route)),
            (None, None, Some(0), None),
        ];
        for (i, (route, serving, backup, want)) in cases.into_iter().enumerate() {
            assert_eq!(applies(route, serving, backup), want, "case {i}");
        }
    }

    #[test]
    fn a_losing_backup_waits_count_only_above_its_p95() {
        let ms = Duration::from_millis;
        // (primary, waited, p95, counts)
        let cases = [
            (true, ms(50), Some(ms(300)), true),
            (true, ms(50), None, true),
            (false, ms(50), Some(ms(300)), false),
            (false, ms(50), None, false),
            (false, ms(300), Some(ms(300)), true),
            (false, ms(900), Some(ms(300)), true),
        ];
        for (i, (primary, waited, p95, counts)) in cases.into_iter().enumerate() {
            assert_eq!(loser_wait_counts(primary, waited, p95), counts, "case {i}");
        }
    }

    #[test]
    fn the_share_cap_holds_over_many_requests() {
        // Every request asks to hedge: 5 % of them may, one ahead.
        let mut word = 0;
        let mut hedged = 0;
        for _ in 0..10_000 {
            word = share_counted(word);
            if let Some(next) = share_taken(word, 50_000) {
                word = next;
                hedged += 1;
            }
        }
        assert!((480..=530).contains(&hedged), "{hedged}");
        // A quiet route's first slow request may hedge; its second, not yet.
        let word = share_counted(0);
        let word = share_taken(word, 50_000).unwrap();
        assert_eq!(share_taken(share_counted(word), 50_000), None);
    }

    #[test]
    fn outcomes_name_themselves() {
        assert_eq!(Outcome::Skipped(Skip::Share).as_str(), "skipped_share");
        assert!(!Outcome::Skipped(Skip::Spend).started());
        assert!(Outcome::WonBackup.started());
    }
}
