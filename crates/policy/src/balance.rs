//! Which member of a group of equivalent targets a request tries first,
//! and in which order the others follow: a pure function of the members'
//! weights, a snapshot of their stats, the moment and a seed.
//!
//! The rule, as a reader can follow it:
//! 1. A member is *ejected* while its `ejected_until` is in the future (its
//!    recent error rate crossed the threshold, see [`ejects`]). Ejected
//!    members go last, except that each still goes first for a small floor
//!    of the group's requests (`ejected_floor`), so that a member that has
//!    recovered is seen to be.
//! 2. Among the others, two candidates are drawn by weight (without
//!    repeat) and the one with the lower expected cost goes first: its
//!    smoothed time to first output scaled by `1 + in_flight / weight` (the
//!    time a new request can expect when it shares the member with those
//!    already there: the peak-EWMA measure, a member's weight standing for
//!    its share of the group's capacity, so that a burst of requests spreads
//!    by the weights, not evenly). Costs within a factor of
//!    [`CLEARLY_CHEAPER`] or within [`CLEARLY_CHEAPER_BY`] of each other
//!    count as equal, and then the first drawn wins: members that are alike
//!    split by their weights (noise in a few milliseconds does not skew
//!    them), and only a clearly slower or busier member loses its share.
//! 3. A member with no sample yet is costed as the best known member of
//!    the group (or as any other, when none has data): it is explored at its
//!    weight, never starved.
//! 4. The rest follow: the healthy members by cost (a tie keeps the
//!    written order), then the ejected ones; so a failure moves to the next
//!    member of the group before the next step of the route.

use std::time::{Duration, Instant};

use understudy_settings::BalanceSettings;

/// A candidate's cost must be below the other's divided by this to win a
/// pairing on cost; otherwise the first drawn wins.
pub const CLEARLY_CHEAPER: f64 = 1.5;

/// ... and below it by more than this (seconds).
pub const CLEARLY_CHEAPER_BY: f64 = 0.01;

/// The step between consecutive requests' seeds (2^64 over the golden
/// ratio). The first candidate is drawn from the seed's own top bits, so
/// seeds taken as `start + n × SEED_STEP` (a random `start` per process,
/// `n` counting requests: a Weyl sequence) split alike members by their
/// weights almost exactly over any run of requests, not only on average,
/// while instances of a fleet, each with its own start, do not herd.
pub const SEED_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// One member of a group as the choice sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Member {
    /// Its weight in the group (positive).
    pub weight: u32,
    /// Its smoothed time to first output; `None` before its first sample.
    pub ttft: Option<Duration>,
    /// Requests on it now.
    pub in_flight: u32,
    /// Until when it is ejected for its error rate, if it is.
    pub ejected_until: Option<Instant>,
}

/// The order to try `members` in (indices into `members`), at `now`, with
/// `seed` as the only source of chance. Never empty unless `members` is.
pub fn order(members: &[Member], now: Instant, seed: u64, knobs: &BalanceSettings) -> Vec<usize> {
    let mut order = vec![0; members.len()];
    order_into(members, now, seed, knobs, &mut order);
    order
}

/// [`order`] written into `order` (as long as `members`), allocating
/// nothing: a caller keeps a small group's order on its stack.
pub fn order_into(
    members: &[Member],
    now: Instant,
    seed: u64,
    knobs: &BalanceSettings,
    order: &mut [usize],
) {
    if members.is_empty() {
        return;
    }
    let order = &mut order[..members.len()];
    let mut rng = SplitMix(seed);
    let ejected = |i: usize| members[i].ejected_until.is_some_and(|u| u > now);
    // One list, the healthy members then the ejected ones (each in index
    // order); every step below rearranges it in place.
    let mut filled = 0;
    let mut healthy = 0;
    for pass in [false, true] {
        for i in (0..members.len()).filter(|&i| ejected(i) == pass) {
            order[filled] = i;
            filled += 1;
        }
        if !pass {
            healthy = filled;
        }
    }
    if healthy == 0 {
        // Every member is out: choose among them as if none were.
        healthy = members.len();
    }
    let best_known = order[..healthy]
        .iter()
        .filter_map(|&i| members[i].ttft)
        .min();
    let cost = |i: usize| {
        let m = &members[i];
        let ttft = m.ttft.or(best_known).unwrap_or(Duration::ZERO);
        (ttft.as_secs_f64() + 1e-6) * (1.0 + f64::from(m.in_flight) / f64::from(m.weight.max(1)))
    };
    let floor_draw = rng.unit();
    let out = order.len() - healthy;
    if out > 0 && floor_draw < knobs.ejected_floor * out as f64 {
        // An ejected member first: the healthy ones follow it.
        let at = healthy + draw(members, &order[healthy..], rng.unit());
        order[..=at].rotate_right(1);
        healthy += 1;
    } else {
        let a = draw(members, &order[..healthy], unit(seed));
        order[..=a].rotate_right(1);
        if healthy > 1 {
            let b = 1 + draw(members, &order[1..healthy], rng.unit());
            let (cb, cf) = (cost(order[b]), cost(order[0]));
            if cb * CLEARLY_CHEAPER < cf && cf - cb > CLEARLY_CHEAPER_BY {
                order.swap(0, b);
            }
        }
    }
    // The rest: the healthy by cost (a tie keeps the written order), then
    // the ejected in index order (as they were listed).
    // (An insertion sort: a group is a few members, where the standard
    // sort's setup costs more than the sorting; the order is total, so
    // the result is the same.)
    let before = |a: usize, b: usize| cost(a).total_cmp(&cost(b)).then(a.cmp(&b)).is_lt();
    for i in 2..healthy {
        let mut j = i;
        while j > 1 && before(order[j], order[j - 1]) {
            order.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// Whether a member whose recent calls number `calls`, `failures` of them
/// failed, is ejected: it has at least `eject_min_calls` of them and the
/// failed share reaches `eject_error_rate`.
pub fn ejects(failures: u32, calls: u32, knobs: &BalanceSettings) -> bool {
    calls >= knobs.eject_min_calls
        && calls > 0
        && f64::from(failures) >= knobs.eject_error_rate * f64::from(calls)
}

/// The next smoothed time to first output after `sample`
/// (`ttft_smoothing` is the new sample's weight).
pub fn smoothed(previous: Option<Duration>, sample: Duration, knobs: &BalanceSettings) -> Duration {
    match previous {
        None => sample,
        Some(p) => {
            let a = knobs.ttft_smoothing;
            Duration::from_secs_f64(a * sample.as_secs_f64() + (1.0 - a) * p.as_secs_f64())
        }
    }
}

/// The position in `among` of one of its members drawn by weight, `u` (in
/// [0, 1)) saying where in the weights the draw falls.
fn draw(members: &[Member], among: &[usize], u: f64) -> usize {
    let total: u64 = among
        .iter()
        .map(|&i| u64::from(members[i].weight.max(1)))
        .sum();
    // Truncation is the point: `u × total` picks a weight unit.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mut at = ((u * total as f64) as u64).min(total.saturating_sub(1));
    for (pos, &i) in among.iter().enumerate() {
        let w = u64::from(members[i].weight.max(1));
        if at < w {
            return pos;
        }
        at -= w;
    }
    among.len() - 1
}

/// A small, well-mixed generator (SplitMix64): the seed is the only chance.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A draw in [0, 1).
    fn unit(&mut self) -> f64 {
        unit(self.next())
    }
}

/// `bits`' top 53 bits as a fraction in [0, 1).
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn member(weight: u32, ttft: Option<Duration>, in_flight: u32) -> Member {
        Member {
            weight,
            ttft,
            in_flight,
            ejected_until: None,
        }
    }

    /// How often each member goes first over `n` seeds.
    fn firsts(members: &[Member], now: Instant, n: u64) -> Vec<f64> {
        let knobs = BalanceSettings::default();
        let mut counts = vec![0u64; members.len()];
        for i in 0..n {
            counts[order(members, now, i.wrapping_mul(SEED_STEP), &knobs)[0]] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn orders_are_data_of_stats_and_seed() {
        let now = crate::test_now();
        let knobs = BalanceSettings::default();
        let later = Some(now + Duration::from_secs(10));
        let ejected = |mut m: Member| {
            m.ejected_until = later;
            m
        };
        // (members, seed, the order)
        let cases: [(&[Member], u64, &[usize]); 6] = [
            // One member: itself.
            (&[member(1, ms(100), 0)], 7, &[0]),
            // A clearly slower member never wins a pairing.
            (&[member(1, ms(500), 0), member(1, ms(100), 0)], 1, &[1, 0]),
            (&[member(1, ms(500), 0), member(1, ms(100), 0)], 2, &[1, 0]),
            // Busy: 100 ms with 3 in flight costs 400, more than 150.
            (&[member(1, ms(100), 3), member(1, ms(150), 0)], 3, &[1, 0]),
            // The ejected member goes last.
            (
                &[ejected(member(5, ms(10), 0)), member(1, ms(100), 0)],
                4,
                &[1, 0],
            ),
            // An ejection that is over counts for nothing: alike members
            // keep the written order after the first.
            (
                &[
                    Member {
                        ejected_until: Some(now),
                        ..member(1, ms(100), 0)
                    },
                    member(1, ms(100), 0),
                    member(1, ms(100), 0),
                ],
                // The seed's top bits fall in the middle third.
                1 << 63,
                &[1, 0, 2],
            ),
        ];
        for (members, seed, want) in cases {
            assert_eq!(
                order(members, now, seed, &knobs),
                want,
                "{members:?} {seed}"
            );
        }
    }

    #[test]
    fn weights_split_alike_members() {
        let now = crate::test_now();
        let members = [
            member(2, ms(100), 0),
            member(1, ms(110), 0),
            member(1, ms(95), 0),
        ];
        let got = firsts(&members, now, 20_000);
        for (share, want) in got.iter().zip([0.5, 0.25, 0.25]) {
            assert!((share - want).abs() < 0.02, "{got:?}");
        }
    }

    #[test]
    fn any_run_of_consecutive_seeds_splits_by_weight() {
        // Sessions of an agent fleet are few: 20 new ones on a 2:1:1 group
        // must split about 10:5:5 from wherever the sequence starts, not
        // only over thousands of requests.
        let now = crate::test_now();
        let knobs = BalanceSettings::default();
        let members = [
            member(2, ms(100), 0),
            member(1, ms(110), 0),
            member(1, ms(95), 0),
        ];
        let mut start = 0x1234_5678_9ABC_DEF0_u64;
        for _ in 0..1_000 {
            start = start
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let mut counts = [0i64; 3];
            for n in 0..20u64 {
                let seed = start.wrapping_add(n.wrapping_mul(SEED_STEP));
                counts[order(&members, now, seed, &knobs)[0]] += 1;
            }
            let off: Vec<i64> = counts.iter().zip([10, 5, 5]).map(|(c, w)| c - w).collect();
            assert!(
                off.iter().all(|d| d.abs() <= 1),
                "from {start:#x}: {counts:?}"
            );
        }
    }

    #[test]
    fn a_five_times_slower_member_is_rarely_first() {
        let now = crate::test_now();
        let members = [
            member(1, ms(100), 0),
            member(1, ms(500), 0),
            member(1, ms(100), 0),
        ];
        let got = firsts(&members, now, 20_000);
        assert!(got[1] < 0.01, "{got:?}");
    }

    #[test]
    fn an_ejected_member_gets_only_its_floor() {
        let now = crate::test_now();
        let mut members = [
            member(1, ms(100), 0),
            member(1, ms(100), 0),
            member(2, ms(10), 0),
        ];
        members[2].ejected_until = Some(now + Duration::from_secs(1));
        let got = firsts(&members, now, 20_000);
        let floor = BalanceSettings::default().ejected_floor;
        assert!((got[2] - floor).abs() < 0.005, "{got:?}");
        // Every member ejected: chosen among as if none were (the fast
        // one is first unless neither draw is it: 1 - 1/4 * 2/3).
        for m in &mut members {
            m.ejected_until = Some(now + Duration::from_secs(1));
        }
        let got = firsts(&members, now, 20_000);
        assert!((got[2] - 5.0 / 6.0).abs() < 0.02, "{got:?}");
    }

    #[test]
    fn a_member_without_data_is_explored_at_its_weight() {
        let now = crate::test_now();
        let members = [member(1, ms(100), 0), member(1, None, 0)];
        let got = firsts(&members, now, 20_000);
        assert!((got[1] - 0.5).abs() < 0.02, "{got:?}");
        // None has data: weights alone.
        let members = [member(3, None, 0), member(1, None, 0)];
        let got = firsts(&members, now, 20_000);
        assert!((got[0] - 0.75).abs() < 0.02, "{got:?}");
    }

    #[test]
    fn ejection_needs_its_sample_and_its_rate() {
        let knobs = BalanceSettings::default();
        // (failures, calls, ejected)
        let cases = [
            (0, 0, false),
            (5, 9, false),
            (5, 10, true),
            (4, 10, false),
            (10, 10, true),
        ];
        for (failures, calls, want) in cases {
            assert_eq!(ejects(failures, calls, &knobs), want, "{failures}/{calls}");
        }
        let s = smoothed(ms(100), Duration::from_millis(200), &knobs);
        assert_eq!(s, Duration::from_millis(130));
        assert_eq!(
            smoothed(None, Duration::from_millis(7), &knobs),
            Duration::from_millis(7)
        );
    }
}
