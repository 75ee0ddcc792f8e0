//! [`BreakerBoard`]: the one home of every target's circuit breaker.
//!
//! Linkerd's fail-fast is the model: one state machine per target, consulted
//! inline by whoever needs it, instead of copies kept in step by messages.
//! The router reads it to leave open targets out of a plan; the run asks it
//! to admit each call and records each outcome in it; the fleet poller
//! (`fleet_poll.rs`) writes the fleet's view from Redis into it for every
//! configured target, whether or not that provider's actor has started, so
//! a fresh instance honours breakers the fleet opened before its first
//! request.
//!
//! The map of configured targets is built once and never changes, so a
//! lookup takes no lock on the map; each target has its own small mutex,
//! held only to step its [`Breaker`] (no I/O, no await under it). Targets
//! that are not configured (a client's `provider:model` pin) live in a
//! second map behind one mutex.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use understudy_policy::breaker::{Admission, Breaker, BreakerState};
use understudy_settings::BreakerSettings;
use understudy_types::failure::FailureCode;
use understudy_types::target::Target;

use crate::sink::metrics::{Metrics, StateLabels};

/// Every target's breaker.
#[derive(Debug)]
pub struct BreakerBoard {
    settings: BreakerSettings,
    /// The configured targets (each provider's default model and every
    /// route's targets), fixed at start (so hashed cheaply: see
    /// `understudy_record::fixed_keys`).
    configured: crate::fixed_keys::FixedMap<Target, Mutex<Breaker>>,
    /// Targets only clients named (pins), bounded: the least recently used
    /// is forgotten (breaker and metric label) to make room.
    pinned: Mutex<Pinned>,
    metrics: Arc<Metrics>,
}

/// The pinned targets' breakers, least recently used first out.
#[derive(Debug)]
struct Pinned {
    cap: usize,
    /// Breaker and the tick it was last used at.
    map: HashMap<Target, (Breaker, u64)>,
    tick: u64,
}

impl Pinned {
    /// `target`'s breaker, created (closed) when new; when that makes room
    /// for it, returns the target forgotten.
    fn get(
        &mut self,
        target: &Target,
        settings: BreakerSettings,
    ) -> (&mut Breaker, Option<Target>) {
        self.tick += 1;
        let tick = self.tick;
        let mut evicted = None;
        if !self.map.contains_key(target) && self.map.len() >= self.cap.max(1) {
            // O(cap) when full and a new pin arrives; the cap is small.
            if let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(t, _)| t.clone())
            {
                self.map.remove(&oldest);
                evicted = Some(oldest);
            }
        }
        let entry = self
            .map
            .entry(target.clone())
            .or_insert_with(|| (Breaker::new(settings), tick));
        entry.1 = tick;
        (&mut entry.0, evicted)
    }
}

/// A breaker's state as a plan or a status page sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerView {
    pub state: BreakerState,
    pub open_until: Option<Instant>,
    pub failures: u32,
}

/// A change the fleet should hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The breaker opened (or reopened after a failed probe) until then.
    Opened(Instant),
    /// It closed: the target recovered.
    Closed,
}

// === impl BreakerBoard ===

impl BreakerBoard {
    /// A board with a closed breaker for each of `configured`, keeping at
    /// most `max_pinned` client-pinned targets besides.
    pub fn new(
        settings: BreakerSettings,
        configured: impl IntoIterator<Item = Target>,
        max_pinned: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            configured: configured
                .into_iter()
                .map(|t| (t, Mutex::new(Breaker::new(settings))))
                .collect(),
            settings,
            pinned: Mutex::new(Pinned {
                cap: max_pinned,
                map: HashMap::new(),
                tick: 0,
            }),
            metrics,
        }
    }

    /// The configured targets, for the fleet poller.
    pub fn configured(&self) -> impl Iterator<Item = &Target> {
        self.configured.keys()
    }

    /// Runs `f` on `target`'s breaker (created closed for a new pin) and
    /// updates the breaker gauge when its state changed.
    fn with<R>(&self, target: &Target, now: Instant, f: impl FnOnce(&mut Breaker) -> R) -> R {
        let (r, before, after) = match self.configured.get(target) {
            Some(slot) => {
                let mut b = lock(slot);
                step(&mut b, now, f)
            }
            None => {
                let mut pinned = lock(&self.pinned);
                let (b, evicted) = pinned.get(target, self.settings);
                let stepped = step(b, now, f);
                drop(pinned);
                if let Some(gone) = evicted {
                    self.metrics.breaker_open.remove(&StateLabels {
                        provider: gone.provider.to_string(),
                        model: gone.model.to_string(),
                    });
                }
                stepped
            }
        };
        if before != after {
            self.metrics
                .breaker_open
                .get_or_create(&StateLabels {
                    provider: target.provider.to_string(),
                    model: target.model.to_string(),
                })
                .set(match after {
                    BreakerState::Closed => 0,
                    BreakerState::Open => 1,
                    BreakerState::HalfOpen => 2,
                });
        }
        r
    }

    /// Whether `target` is open and still cooling down at `now` (a plan
    /// leaves it out).
    pub fn is_open(&self, target: &Target, now: Instant) -> bool {
        let read = |b: &Breaker| b.state(now) == BreakerState::Open;
        match self.configured.get(target) {
            Some(slot) => read(&lock(slot)),
            None => lock(&self.pinned)
                .map
                .get(target)
                .is_some_and(|(b, _)| read(b)),
        }
    }

    /// Asks to call `target` at `now`; `force` passes an open breaker (the
    /// plan's forced primary) without taking its probe.
    pub fn admit(&self, target: &Target, now: Instant, force: bool) -> Admission {
        self.with(target, now, |b| match b.admit(now) {
            Admission::No if force => Admission::Yes,
            a => a,
        })
    }

    /// Gives back a half-open probe that was never sent (the fleet's probe
    /// lock belonged to another instance).
    pub fn release_probe(&self, target: &Target, now: Instant) {
        self.with(target, now, Breaker::release_probe);
    }

    /// Records how a call to `target` ended; returns what the fleet should
    /// hear, if anything changed.
    pub fn record(
        &self,
        target: &Target,
        outcome: Result<(), FailureCode>,
        now: Instant,
    ) -> Option<Change> {
        let change = self.with(target, now, |b| {
            let before = (b.state(now), b.open_until());
            b.record(outcome, now);
            let after = (b.state(now), b.open_until());
            match after {
                _ if after == before => None,
                (BreakerState::Open, Some(until)) => Some(Change::Opened(until)),
                (BreakerState::Closed, _) => Some(Change::Closed),
                _ => None,
            }
        });
        match change {
            Some(Change::Opened(_)) => {
                tracing::warn!(provider = %target.provider, model = %target.model, "circuit breaker opened");
            }
            Some(Change::Closed) => {
                tracing::info!(provider = %target.provider, model = %target.model, "circuit breaker closed");
            }
            None => {}
        }
        change
    }

    /// The fleet holds `target` open until `open_until`, or saw it recover
    /// (`None`).
    pub fn sync(&self, target: &Target, open_until: Option<Instant>, now: Instant) {
        let changed = self.with(target, now, |b| {
            let before = (b.state(now), b.open_until());
            match open_until {
                Some(until) => b.force_open(until),
                None if before.0 != BreakerState::Closed => b.force_close(),
                None => {}
            }
            (b.state(now), b.open_until()) != before
        });
        if changed {
            tracing::info!(provider = %target.provider, model = %target.model, open = open_until.is_some(), "breaker synchronised with the fleet");
        }
    }

    /// Every breaker that is not plainly closed (open, half-open, or closed
    /// with failures counted), for `understudy providers`.
    pub fn views(&self, now: Instant) -> Vec<(Target, BreakerView)> {
        let view = |b: &Breaker| BreakerView {
            state: b.state(now),
            open_until: b.open_until(),
            failures: b.failures(),
        };
        let mut out: Vec<(Target, BreakerView)> = self
            .configured
            .iter()
            .map(|(t, slot)| (t.clone(), view(&lock(slot))))
            .chain(
                lock(&self.pinned)
                    .map
                    .iter()
                    .map(|(t, (b, _))| (t.clone(), view(b))),
            )
            .filter(|(_, v)| v.state != BreakerState::Closed || v.failures > 0)
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Runs `f` on `b` and returns its result with the state before and after.
fn step<R>(
    b: &mut Breaker,
    now: Instant,
    f: impl FnOnce(&mut Breaker) -> R,
) -> (R, BreakerState, BreakerState) {
    let before = b.state(now);
    let r = f(b);
    (r, before, b.state(now))
}

/// A breaker's lock; a panic elsewhere cannot leave a breaker half-stepped
/// (each step is one assignment), so a poisoned lock is still good.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn board() -> BreakerBoard {
        BreakerBoard::new(
            BreakerSettings::default(),
            [Target::new("groq", "a")],
            2,
            Arc::new(Metrics::new()),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn one_state_for_plans_admissions_and_the_fleet() {
        let b = board();
        let t = Target::new("groq", "a");
        let now = crate::runtime_clock::now();
        for i in 0..3 {
            assert_eq!(b.admit(&t, now, false), Admission::Yes);
            let change = b.record(&t, Err(FailureCode::Unavailable), now);
            assert_eq!(change.is_some(), i == 2, "opens on the third outage");
        }
        assert!(b.is_open(&t, now));
        assert_eq!(b.admit(&t, now, false), Admission::No);
        assert_eq!(b.admit(&t, now, true), Admission::Yes, "forced");
        let later = now + Duration::from_secs(5);
        assert!(!b.is_open(&t, later));
        assert_eq!(b.admit(&t, later, false), Admission::Probe);
        b.release_probe(&t, later);
        assert_eq!(b.admit(&t, later, false), Admission::Probe);
        assert_eq!(b.record(&t, Ok(()), later), Some(Change::Closed));
        assert!(b.views(later).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_fleet_opens_targets_no_request_has_touched() {
        let b = board();
        let t = Target::new("groq", "a");
        let pin = Target::new("groq", "pinned");
        let now = crate::runtime_clock::now();
        let until = now + Duration::from_secs(4);
        b.sync(&t, Some(until), now);
        b.sync(&pin, Some(until), now);
        assert!(b.is_open(&t, now) && b.is_open(&pin, now));
        assert_eq!(b.views(now).len(), 2);
        b.sync(&t, None, now);
        assert!(!b.is_open(&t, now));
    }

    #[tokio::test(start_paused = true)]
    async fn pins_are_bounded_and_the_least_recently_used_goes_first() {
        let b = board();
        let now = crate::runtime_clock::now();
        let pin = |m: &str| Target::new("groq", m);
        for m in ["p1", "p2"] {
            b.record(&pin(m), Err(FailureCode::Unavailable), now);
        }
        // p1 used again: p2 is now the least recently used.
        b.record(&pin("p1"), Err(FailureCode::Unavailable), now);
        b.record(&pin("p3"), Err(FailureCode::Unavailable), now);
        let models: Vec<String> = b
            .views(now)
            .into_iter()
            .map(|(t, _)| t.model.to_string())
            .collect();
        assert_eq!(models, ["p1", "p3"], "p2 was forgotten");
        // A configured target is never forgotten.
        for i in 0..10 {
            b.record(&pin(&format!("x{i}")), Err(FailureCode::Unavailable), now);
        }
        b.record(
            &Target::new("groq", "a"),
            Err(FailureCode::Unavailable),
            now,
        );
        assert!(b.views(now).iter().any(|(t, _)| &*t.model == "a"));
        assert_eq!(b.views(now).len(), 3);
    }
}
