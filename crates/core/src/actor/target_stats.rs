//! The stats each member of a group of equivalent targets keeps, held by
//! the router's view as shared atomics: a request updates them without a
//! message or a lock, and the group choice
//! ([`understudy_policy::balance`]) reads a snapshot of them.
//!
//! Kept per target (provider + model) of any route's group, and only for
//! those: a route without groups never touches them.
//! - The smoothed time to first output: a non-streamed attempt's latency
//!   to its answer, a streamed one's to its commit (its first output).
//! - Requests in flight: an attempt counts from its call until its answer
//!   (or its failure); a streamed one until its stream ends. The run holds
//!   the count and gives it back when it is dropped, so a request whose
//!   caller left never leaves it counted.
//! - Recent outcomes, for the error rate that ejects a member: what the
//!   decision machine treats as an outage counts as a failure (a 5xx or
//!   overload, a timeout, a connection error, a malformed answer, a stream
//!   cut before its commit: one cut after it counted at its commit, as
//!   served); a refusal, a rate limit (it says wait, not broken) and what
//!   the request is at fault for (a 4xx, auth, context length) count
//!   neither way. The counts halve when they reach twice
//!   `eject_min_calls`, so "recent" is the last calls, not all of them.
//! - Prompt-cache tokens of its served answers (read, written, uncached),
//!   for the cache-read share the status shows.
//! - A histogram of the same times to first output (log buckets, halved
//!   as it fills: `understudy_policy::hedge`), for the p95 a hedged route
//!   starts its backup after: one per mode, a streamed attempt's time to
//!   its first output apart from a non-streamed one's time to its whole
//!   answer (a request hedges on the one of its own mode). A hedged
//!   route's targets keep stats too. Only a routing with a route that
//!   hedges reads a p95, so only then are times counted in the
//!   histograms (a routing change that starts hedging starts them, and
//!   the hedge waits for their first samples).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use understudy_policy::balance::{self, Member};
use understudy_policy::decide::Mode;
use understudy_policy::hedge;
use understudy_settings::{BalanceSettings, RouteGroup, RouteGroups, RouteOptions};
use understudy_types::Target;
use understudy_types::chat::Usage;
use understudy_types::failure::FailureKind;

/// Every group member's stats, by target: a short list searched in order
/// (a few members in all, where hashing a target would cost more).
pub(crate) struct TargetStats {
    by_target: Vec<(Target, Arc<TargetStat>)>,
    /// Each route with groups: its groups, its targets as written and, at
    /// each of their places, the member's stats, found once here so that a
    /// request's group choice looks no target up.
    grouped: BTreeMap<String, GroupedRoute>,
    /// The group choice's next seed: a Weyl sequence from a random start
    /// per engine (see [`understudy_policy::balance::SEED_STEP`]), kept
    /// across routing changes, so that alike members split by their
    /// weights over any run of new sessions and a fleet's instances do
    /// not choose in step.
    seeds: Arc<std::sync::atomic::AtomicU64>,
    /// Each hedged route's share cap word (`understudy_policy::hedge`), by
    /// route name; kept across routing changes.
    hedge_shares: Vec<(String, Arc<AtomicU64>)>,
}

/// A route with groups, as [`TargetStats`] keeps it.
pub(crate) struct GroupedRoute {
    pub(crate) groups: Vec<RouteGroup>,
    /// The route's targets as written.
    pub(crate) declared: Vec<Target>,
    /// The stats of the target written at each place (none for a target
    /// that is no group's member).
    pub(crate) stats: Vec<Option<Arc<TargetStat>>>,
    /// A group of the route hedges.
    pub(crate) hedges: bool,
}

/// One target's stats.
pub(crate) struct TargetStat {
    /// The instant the stored times count from.
    base: Instant,
    /// Microseconds; 0 before the first sample.
    ttft_us: AtomicU64,
    in_flight: AtomicU32,
    /// Recent calls (low 32 bits) and failures among them (high 32 bits).
    outcomes: AtomicU64,
    /// Nanoseconds after `base` until which the target is ejected; 0: never
    /// ejected.
    ejected_until_ns: AtomicU64,
    cache_read: AtomicU64,
    cache_write: AtomicU64,
    uncached: AtomicU64,
    /// Times to first output, by bucket, and their count: one histogram
    /// per mode (see [`mode_index`]).
    ttft_hist: [[AtomicU32; hedge::BUCKETS]; 2],
    ttft_count: [AtomicU32; 2],
    /// Whether the routing in force hedges anywhere: only then is a p95
    /// read, so only then are times counted in the histograms. Set on
    /// every routing change (a target's stats outlive one).
    observed: AtomicBool,
}

/// The histogram of `mode`: a stream's time to first output (index 0), an
/// answer's time to its whole answer (1).
fn mode_index(mode: Mode) -> usize {
    match mode {
        Mode::Stream => 0,
        Mode::Answer => 1,
    }
}

/// What the status shows of one target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetStatsView {
    pub provider: String,
    pub model: String,
    /// The smoothed time to first output, when there is a sample.
    pub ttft_ms: Option<f64>,
    pub in_flight: u32,
    /// Whether it is ejected for its error rate now.
    pub ejected: bool,
    /// Of the input tokens of its served answers, the share read from the
    /// prompt cache (none before an answer with usage).
    pub cache_read_share: Option<f64>,
}

// === impl TargetStats ===

impl TargetStats {
    /// Stats for every member of `groups` (a route's members are its
    /// targets at the group's positions), counting from `base`; the members
    /// `kept` already has keep theirs.
    pub(crate) fn new(
        routes: &BTreeMap<String, Vec<Target>>,
        groups: &RouteGroups,
        kept: Option<&TargetStats>,
        base: Instant,
    ) -> Self {
        let mut by_target: Vec<(Target, Arc<TargetStat>)> = Vec::new();
        for (name, groups) in groups {
            let Some(targets) = routes.get(name) else {
                continue;
            };
            for g in groups {
                let end = (g.start + g.weights.len()).min(targets.len());
                for t in &targets[g.start.min(end)..end] {
                    if by_target.iter().any(|(known, _)| known == t) {
                        continue;
                    }
                    let stat = kept
                        .and_then(|k| k.get(t).cloned())
                        .unwrap_or_else(|| Arc::new(TargetStat::new(base)));
                    by_target.push((t.clone(), stat));
                }
            }
        }
        let seeds = kept.map_or_else(
            || Arc::new(std::sync::atomic::AtomicU64::new(fastrand::u64(..))),
            |k| Arc::clone(&k.seeds),
        );
        let mut stats = Self {
            by_target,
            grouped: BTreeMap::new(),
            seeds,
            hedge_shares: Vec::new(),
        };
        stats.grouped = stats.grouped_routes(routes, groups);
        stats
    }

    /// Every route of `groups` (with its targets in `routes`), its members'
    /// stats found.
    fn grouped_routes(
        &self,
        routes: &BTreeMap<String, Vec<Target>>,
        groups: &RouteGroups,
    ) -> BTreeMap<String, GroupedRoute> {
        groups
            .iter()
            .filter_map(|(name, groups)| {
                let declared = routes.get(name)?;
                let stats = declared.iter().map(|t| self.get(t).cloned()).collect();
                let route = GroupedRoute {
                    groups: groups.clone(),
                    declared: declared.clone(),
                    stats,
                    hedges: groups.iter().any(|g| g.hedge.is_some()),
                };
                Some((name.clone(), route))
            })
            .collect()
    }

    /// The route named `name`, when it has groups.
    pub(crate) fn grouped(&self, name: &str) -> Option<&GroupedRoute> {
        self.grouped.get(name)
    }

    /// The stats a router keeps: every group's members, and every target
    /// of a route that hedges (its p95 is read there), with the share cap
    /// word of each route that hedges or has a group that does; `kept`'s
    /// are kept.
    pub(crate) fn of_routes(
        routes: &BTreeMap<String, Vec<Target>>,
        groups: &RouteGroups,
        options: &BTreeMap<String, RouteOptions>,
        kept: Option<&TargetStats>,
        base: Instant,
    ) -> Self {
        let mut hedged: Vec<&String> = options
            .iter()
            .filter(|(_, o)| o.hedge.is_some())
            .map(|(name, _)| name)
            .chain(
                groups
                    .iter()
                    .filter(|(_, gs)| gs.iter().any(|g| g.hedge.is_some()))
                    .map(|(name, _)| name),
            )
            .collect();
        hedged.sort_unstable();
        hedged.dedup();
        if hedged.is_empty() {
            let stats = Self::new(routes, groups, kept, base);
            stats.observe_all(false);
            return stats;
        }
        let mut all = groups.clone();
        for name in &hedged {
            if let Some(targets) = routes.get(*name) {
                all.entry((*name).clone()).or_default().push(RouteGroup {
                    start: 0,
                    weights: vec![1; targets.len()],
                    hedge: None,
                });
            }
        }
        let mut stats = Self::new(routes, &all, kept, base);
        // The routes' own groups, not the hedged routes' lists above.
        stats.grouped = stats.grouped_routes(routes, groups);
        stats.observe_all(true);
        stats.hedge_shares = hedged
            .iter()
            .map(|name| {
                let word = kept
                    .and_then(|k| k.hedge_share(name))
                    .cloned()
                    .unwrap_or_default();
                ((*name).clone(), word)
            })
            .collect();
        stats
    }

    /// Whether calls count their times in every target's histograms
    /// (see [`TargetStat::observed`]).
    fn observe_all(&self, observed: bool) {
        for (_, s) in &self.by_target {
            s.observed.store(observed, Ordering::Relaxed);
        }
    }

    /// Whether any route hedges.
    pub(crate) fn hedges_any(&self) -> bool {
        !self.hedge_shares.is_empty()
    }

    /// The share cap word of hedged route `route`.
    pub(crate) fn hedge_share(&self, route: &str) -> Option<&Arc<AtomicU64>> {
        self.hedge_shares
            .iter()
            .find(|(name, _)| name == route)
            .map(|(_, word)| word)
    }

    /// The next request's seed for the group choice.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn next_seed(&self) -> u64 {
        self.seeds.fetch_add(
            understudy_policy::balance::SEED_STEP,
            std::sync::atomic::Ordering::Relaxed,
        )
    }

    pub(crate) fn get(&self, target: &Target) -> Option<&Arc<TargetStat>> {
        self.by_target
            .iter()
            .find(|(t, _)| t == target)
            .map(|(_, s)| s)
    }

    /// The snapshot the group choice reads of `target` (weight `weight`)
    /// at `now`.
    pub(crate) fn member(&self, target: &Target, weight: u32) -> Member {
        match self.get(target) {
            Some(s) => s.member(weight),
            None => Member {
                weight,
                ..Member::default()
            },
        }
    }

    /// How every member stands at `now`, as the status shows it.
    pub(crate) fn views(&self, now: Instant) -> Vec<TargetStatsView> {
        let mut out: Vec<TargetStatsView> = self
            .by_target
            .iter()
            .map(|(t, s)| {
                let m = self.member(t, 1);
                let read = s.cache_read.load(Ordering::Relaxed);
                let all = read
                    + s.cache_write.load(Ordering::Relaxed)
                    + s.uncached.load(Ordering::Relaxed);
                TargetStatsView {
                    provider: t.provider.to_string(),
                    model: t.model.to_string(),
                    ttft_ms: m.ttft.map(|d| d.as_secs_f64() * 1000.0),
                    in_flight: m.in_flight,
                    ejected: m.ejected_until.is_some_and(|u| u > now),
                    cache_read_share: (all > 0).then(|| read as f64 / all as f64),
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)));
        out
    }
}

// === impl TargetStat ===

impl TargetStat {
    fn new(base: Instant) -> Self {
        Self {
            base,
            ttft_us: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            outcomes: AtomicU64::new(0),
            ejected_until_ns: AtomicU64::new(0),
            cache_read: AtomicU64::new(0),
            cache_write: AtomicU64::new(0),
            uncached: AtomicU64::new(0),
            ttft_hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))),
            ttft_count: std::array::from_fn(|_| AtomicU32::new(0)),
            observed: AtomicBool::new(true),
        }
    }

    /// The snapshot the group choice reads of this target (weight
    /// `weight`).
    pub(crate) fn member(&self, weight: u32) -> Member {
        let ttft_us = self.ttft_us.load(Ordering::Relaxed);
        let ejected_ns = self.ejected_until_ns.load(Ordering::Relaxed);
        Member {
            weight,
            ttft: (ttft_us > 0).then(|| Duration::from_micros(ttft_us)),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            ejected_until: (ejected_ns > 0).then(|| self.base + Duration::from_nanos(ejected_ns)),
        }
    }

    /// Counts one time to first output of a `mode` call in its histogram
    /// (also the time a hedge's loser had waited in vain: its first output
    /// comes later).
    pub(crate) fn observe(&self, mode: Mode, latency: Duration) {
        let m = mode_index(mode);
        self.ttft_hist[m][hedge::bucket_of(latency)].fetch_add(1, Ordering::Relaxed);
        if self.ttft_count[m].fetch_add(1, Ordering::Relaxed) + 1 >= hedge::HALVE_AT {
            // Halved bucket by bucket: a count racing in between lands in
            // a bucket halved or not, which the estimate tolerates.
            let mut total = 0;
            for bucket in &self.ttft_hist[m] {
                let (Ok(before) | Err(before)) =
                    bucket.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n / 2));
                total += before / 2;
            }
            self.ttft_count[m].store(total, Ordering::Relaxed);
        }
    }

    /// The p95 time to first output of `mode` calls, once enough were
    /// observed.
    pub(crate) fn p95(&self, mode: Mode) -> Option<Duration> {
        let hist = &self.ttft_hist[mode_index(mode)];
        let counts: [u32; hedge::BUCKETS] =
            std::array::from_fn(|i| hist[i].load(Ordering::Relaxed));
        hedge::quantile(&counts, 0.95)
    }

    /// Records how a `mode` call to this target ended at `now`:
    /// `Ok(latency)` (to its answer or first output), or its failure's
    /// kind.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn record(
        &self,
        outcome: Result<Duration, &FailureKind>,
        mode: Mode,
        now: Instant,
        knobs: &BalanceSettings,
    ) {
        let failed = match outcome {
            Ok(latency) => {
                if self.observed.load(Ordering::Relaxed) {
                    self.observe(mode, latency);
                }
                let _ = self
                    .ttft_us
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |us| {
                        let previous = (us > 0).then(|| Duration::from_micros(us));
                        let next = balance::smoothed(previous, latency, knobs);
                        Some((next.as_micros() as u64).max(1))
                    });
                false
            }
            Err(kind) if kind.is_outage() => true,
            Err(_) => return,
        };
        let window = knobs.eject_min_calls.saturating_mul(2).max(2);
        let (Ok(before) | Err(before)) =
            self.outcomes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |packed| {
                    let (mut calls, mut failures) = unpack(packed);
                    calls += 1;
                    failures += u32::from(failed);
                    if calls >= window {
                        calls /= 2;
                        failures /= 2;
                    }
                    Some(pack(calls, failures))
                });
        let (calls, failures) = unpack(before);
        let (calls, failures) = (calls + 1, failures + u32::from(failed));
        let ejected_ns = self.ejected_until_ns.load(Ordering::Relaxed);
        let now_ns = now.saturating_duration_since(self.base).as_nanos() as u64;
        if failed && ejected_ns <= now_ns && balance::ejects(failures, calls, knobs) {
            let until = now_ns + knobs.eject_for.as_nanos() as u64;
            self.ejected_until_ns.store(until.max(1), Ordering::Relaxed);
            // Counted afresh from the ejection: its end is a new start.
            self.outcomes.store(0, Ordering::Relaxed);
        }
    }

    /// A request starts on this target.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn enter(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request that entered is no longer on this target.
    #[inline(never)] // named apart in callgrind (`cargo xtask bench routing-cost`)
    pub(crate) fn leave(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// Counts a served answer's prompt-cache tokens.
    pub(crate) fn cache_tokens(&self, usage: &Usage) {
        let read = usage.cache_read_input_tokens;
        let write = usage.cache_write_input_tokens;
        self.cache_read.fetch_add(read, Ordering::Relaxed);
        self.cache_write.fetch_add(write, Ordering::Relaxed);
        self.uncached.fetch_add(
            usage
                .input_tokens
                .saturating_sub(read.saturating_add(write)),
            Ordering::Relaxed,
        );
    }
}

fn pack(calls: u32, failures: u32) -> u64 {
    (u64::from(failures) << 32) | u64::from(calls)
}

fn unpack(packed: u64) -> (u32, u32) {
    (packed as u32, (packed >> 32) as u32)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use understudy_policy::balance::order;
    use understudy_settings::{BalanceSettings, RouteGroup};
    use understudy_types::failure::FailureKind;

    use super::*;

    /// Two members of one route's group, `a` and `b`.
    fn stats(base: Instant) -> (TargetStats, Target, Target) {
        let (a, b) = (Target::new("a", "m"), Target::new("b", "m"));
        let routes = BTreeMap::from([("r".to_owned(), vec![a.clone(), b.clone()])]);
        let groups = BTreeMap::from([(
            "r".to_owned(),
            vec![RouteGroup {
                start: 0,
                weights: vec![1, 1],
                hedge: None,
            }],
        )]);
        (TargetStats::new(&routes, &groups, None, base), a, b)
    }

    /// How often `b` goes first over many seeds at `now`.
    fn b_first(s: &TargetStats, a: &Target, b: &Target, now: Instant) -> f64 {
        let knobs = BalanceSettings::default();
        let members = [s.member(a, 1), s.member(b, 1)];
        let n = 2_000;
        let firsts = (0..n).filter(|&i: &u64| {
            order(
                &members,
                now,
                i.wrapping_mul(understudy_policy::balance::SEED_STEP),
                &knobs,
            )[0] == 1
        });
        firsts.count() as f64 / n as f64
    }

    #[test]
    fn a_member_failing_half_its_calls_is_ejected_and_comes_back() {
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let knobs = BalanceSettings::default();
        let (s, a, b) = stats(base);
        let stat = Arc::clone(s.get(&b).unwrap());
        let mut now = base;
        let mut ejected_after = None;
        for call in 1..=20 {
            now += Duration::from_millis(100);
            let outcome = match call % 2 {
                1 => Err(&FailureKind::Unavailable { retry_after: None }),
                _ => Ok(Duration::from_millis(50)),
            };
            stat.record(outcome, Mode::Answer, now, &knobs);
            if s.member(&b, 1).ejected_until.is_some_and(|u| u > now) {
                ejected_after = Some(call);
                break;
            }
        }
        let ejected_after = ejected_after.expect("ejected within 20 calls");
        assert!(ejected_after <= 20, "{ejected_after}");
        // Ejected: only its floor of first places.
        stats_record_ok(&s, &a, now, &knobs);
        let share = b_first(&s, &a, &b, now);
        assert!(share < 0.05, "{share}");
        // It recovered: once the ejection is over (well within a minute),
        // it is back at its weight.
        let later = now + knobs.eject_for + Duration::from_millis(1);
        assert!(knobs.eject_for < Duration::from_secs(60));
        stat.record(Ok(Duration::from_millis(50)), Mode::Answer, later, &knobs);
        let share = b_first(&s, &a, &b, later);
        assert!((share - 0.5).abs() < 0.06, "{share}");
        // Refusals and client errors never eject.
        let (s, _, b) = stats(base);
        let stat = s.get(&b).unwrap();
        for _ in 0..30 {
            stat.record(Err(&FailureKind::BadRequest), Mode::Answer, base, &knobs);
            stat.record(Err(&FailureKind::ContentFilter), Mode::Answer, base, &knobs);
        }
        assert_eq!(s.member(&b, 1).ejected_until, None);
    }

    #[test]
    fn a_route_whose_group_hedges_has_a_share_word() {
        let (a, b) = (Target::new("a", "m"), Target::new("b", "m"));
        let routes = BTreeMap::from([
            ("g".to_owned(), vec![a.clone(), b.clone()]),
            ("plain".to_owned(), vec![a.clone(), b]),
        ]);
        let group = |hedge| RouteGroup {
            start: 0,
            weights: vec![1, 1],
            hedge,
        };
        let own = understudy_settings::HedgeSettings {
            after: understudy_settings::HedgeAfter::Fixed(Duration::from_millis(200)),
            max_share_ppm: 50_000,
        };
        let groups = BTreeMap::from([
            ("g".to_owned(), vec![group(Some(own))]),
            ("plain".to_owned(), vec![group(None)]),
        ]);
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let s = TargetStats::of_routes(&routes, &groups, &BTreeMap::new(), None, base);
        assert!(s.hedge_share("g").is_some());
        assert!(s.hedge_share("plain").is_none());
        assert!(s.get(&a).is_some());
        // Kept across a routing change.
        let next = TargetStats::of_routes(&routes, &groups, &BTreeMap::new(), Some(&s), base);
        assert!(Arc::ptr_eq(
            s.hedge_share("g").unwrap(),
            next.hedge_share("g").unwrap()
        ));
    }

    #[test]
    fn times_are_counted_for_a_p95_only_while_a_route_hedges() {
        let (a, b) = (Target::new("a", "m"), Target::new("b", "m"));
        let routes = BTreeMap::from([("g".to_owned(), vec![a.clone(), b])]);
        let groups = |hedge| {
            BTreeMap::from([(
                "g".to_owned(),
                vec![RouteGroup {
                    start: 0,
                    weights: vec![1, 1],
                    hedge,
                }],
            )])
        };
        let hedged = Some(understudy_settings::HedgeSettings {
            after: understudy_settings::HedgeAfter::Fixed(Duration::from_millis(200)),
            max_share_ppm: 50_000,
        });
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let knobs = BalanceSettings::default();
        let calls = |s: &TargetStats| {
            for _ in 0..100 {
                stats_record_ok(s, &a, base, &knobs);
            }
        };
        let options = BTreeMap::new();
        // (the route's group hedges, a p95 after 100 calls)
        for (hedge, p95) in [(None, false), (hedged, true)] {
            let s = TargetStats::of_routes(&routes, &groups(hedge), &options, None, base);
            calls(&s);
            let stat = s.get(&a).unwrap();
            assert_eq!(stat.p95(Mode::Answer).is_some(), p95, "{hedge:?}");
            // The smoothed time is kept either way: the group choice reads it.
            assert!(s.member(&a, 1).ttft.is_some());
        }
        // A routing change that starts hedging starts counting: kept stats
        // count from then on.
        let plain = TargetStats::of_routes(&routes, &groups(None), &options, None, base);
        calls(&plain);
        let next = TargetStats::of_routes(&routes, &groups(hedged), &options, Some(&plain), base);
        assert_eq!(next.get(&a).unwrap().p95(Mode::Answer), None);
        calls(&next);
        assert!(next.get(&a).unwrap().p95(Mode::Answer).is_some());
    }

    fn stats_record_ok(s: &TargetStats, a: &Target, now: Instant, knobs: &BalanceSettings) {
        s.get(a)
            .unwrap()
            .record(Ok(Duration::from_millis(50)), Mode::Answer, now, knobs);
    }

    #[test]
    fn the_p95_follows_the_observations_and_their_decay() {
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let (s, a, _) = stats(base);
        let stat = s.get(&a).unwrap();
        assert_eq!(stat.p95(Mode::Stream), None);
        for i in 0..50 {
            let ms = if i % 50 == 49 { 5000 } else { 300 };
            stat.observe(Mode::Stream, Duration::from_millis(ms));
        }
        let p95 = stat.p95(Mode::Stream).unwrap();
        assert!(p95 < Duration::from_millis(400), "{p95:?}");
        // Thousands of slow answers later, the p95 is theirs: the old
        // counts were halved away.
        for _ in 0..4 * hedge::HALVE_AT {
            stat.observe(Mode::Stream, Duration::from_secs(2));
        }
        let p95 = stat.p95(Mode::Stream).unwrap();
        assert!(p95 >= Duration::from_secs(2), "{p95:?}");
        assert!(stat.ttft_count[0].load(Ordering::Relaxed) < hedge::HALVE_AT);
    }

    #[test]
    fn streamed_first_outputs_and_whole_answers_keep_apart_p95s() {
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let knobs = BalanceSettings::default();
        let (s, a, _) = stats(base);
        let stat = s.get(&a).unwrap();
        // Streams show their first output at 0.3 s; whole answers take 4 s.
        for _ in 0..40 {
            stat.record(Ok(Duration::from_millis(300)), Mode::Stream, base, &knobs);
            stat.record(Ok(Duration::from_secs(4)), Mode::Answer, base, &knobs);
        }
        let (stream, answer) = (
            stat.p95(Mode::Stream).unwrap(),
            stat.p95(Mode::Answer).unwrap(),
        );
        assert!(stream < Duration::from_millis(400), "{stream:?}");
        assert!(answer >= Duration::from_secs(4), "{answer:?}");
        // Either mode's p95 needs its own observations.
        let (s, a, _) = stats(base);
        let stat = s.get(&a).unwrap();
        for _ in 0..40 {
            stat.record(Ok(Duration::from_millis(300)), Mode::Stream, base, &knobs);
        }
        assert_eq!(stat.p95(Mode::Answer), None);
    }

    #[test]
    fn in_flight_and_cache_tokens_show_in_the_status() {
        #[expect(clippy::disallowed_methods, reason = "a base instant for the test")]
        let base = Instant::now();
        let (s, a, _) = stats(base);
        let stat = s.get(&a).unwrap();
        stat.enter();
        stat.enter();
        stat.leave();
        stat.cache_tokens(&Usage {
            input_tokens: 100,
            cache_read_input_tokens: 60,
            cache_write_input_tokens: 20,
            ..Usage::default()
        });
        let view = &s.views(base)[0];
        assert_eq!(view.in_flight, 1);
        assert_eq!(view.cache_read_share, Some(0.6));
        assert_eq!(view.ttft_ms, None);
        // A routing change keeps the stats of the members that stay.
        let routes = BTreeMap::from([("r".to_owned(), vec![a.clone()])]);
        let groups = BTreeMap::from([(
            "r".to_owned(),
            vec![RouteGroup {
                start: 0,
                weights: vec![1],
                hedge: None,
            }],
        )]);
        let next = TargetStats::new(&routes, &groups, Some(&s), base);
        assert_eq!(next.views(base).len(), 1);
        assert_eq!(next.views(base)[0].in_flight, 1);
    }
}
