//! The circuit breaker of one target (provider + model): after
//! `failure_threshold` consecutive outage-class failures it opens for a
//! cooldown, then lets exactly one probe through (half-open); the probe's
//! result closes it or opens it again (with a longer cooldown when
//! configured to grow). Refusals, bad requests and rate limits prove the
//! provider is answering, so they reset the count and never trip it.
//!
//! Pure state, no I/O; time is passed in.

use std::time::{Duration, Instant};

use serde::Serialize;
use understudy_settings::BreakerSettings;
use understudy_types::failure::{Disposition, FailureCode};

/// The state as others see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

/// Whether a call may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Yes,
    /// Half-open: this call is the one probe.
    Probe,
    /// Open, or half-open with the probe already out: skip this target.
    No,
}

/// One target's breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    settings: BreakerSettings,
    state: Inner,
}

#[derive(Debug, Clone, Copy)]
enum Inner {
    Closed { failures: u32 },
    Open { until: Instant, cooldown: Duration },
    HalfOpen { probe_out: bool, cooldown: Duration },
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            state: Inner::Closed { failures: 0 },
        }
    }

    /// The state at `now` (an open breaker whose cooldown is over reads as
    /// half-open).
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { until, .. } if now < until => BreakerState::Open,
            Inner::Open { .. } | Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// When an open breaker will let a probe through.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state {
            Inner::Open { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Consecutive outage-class failures while closed.
    pub fn failures(&self) -> u32 {
        match self.state {
            Inner::Closed { failures } => failures,
            _ => self.settings.failure_threshold,
        }
    }

    /// Asks to make a call at `now`.
    pub fn admit(&mut self, now: Instant) -> Admission {
        if self.settings.failure_threshold == 0 {
            return Admission::Yes;
        }
        match self.state {
            Inner::Closed { .. } => Admission::Yes,
            Inner::Open { until, .. } if now < until => Admission::No,
            Inner::Open { cooldown, .. } => {
                self.state = Inner::HalfOpen {
                    probe_out: true,
                    cooldown,
                };
                Admission::Probe
            }
            Inner::HalfOpen {
                probe_out: true, ..
            } => Admission::No,
            Inner::HalfOpen {
                probe_out: false,
                cooldown,
            } => {
                self.state = Inner::HalfOpen {
                    probe_out: true,
                    cooldown,
                };
                Admission::Probe
            }
        }
    }

    /// Records how a call ended: `Ok`, or the failure's code.
    pub fn record(&mut self, outcome: Result<(), FailureCode>, now: Instant) {
        if self.settings.failure_threshold == 0 {
            return;
        }
        // What counts is decided once, in `Disposition` (the decision
        // machine reads the same).
        let outage = outcome.is_err_and(|code| code.disposition() == Disposition::Outage);
        self.state = match (self.state, outage) {
            (_, false) => Inner::Closed { failures: 0 },
            (Inner::Closed { failures }, true)
                if failures + 1 >= self.settings.failure_threshold =>
            {
                Inner::Open {
                    until: now + self.settings.cooldown,
                    cooldown: self.settings.cooldown,
                }
            }
            (Inner::Closed { failures }, true) => Inner::Closed {
                failures: failures + 1,
            },
            // A failed probe: open again, for longer when configured to grow.
            (Inner::HalfOpen { cooldown, .. }, true) => {
                let next = cooldown
                    .mul_f64(self.settings.cooldown_multiplier.max(1.0))
                    .min(self.settings.max_cooldown);
                Inner::Open {
                    until: now + next,
                    cooldown: next,
                }
            }
            // A late failure from before the breaker opened: keep it open.
            (open @ Inner::Open { .. }, true) => open,
        };
    }

    /// Another instance opened this target until `until`: open it here too
    /// (keeping a later local deadline).
    pub fn force_open(&mut self, until: Instant) {
        if self.settings.failure_threshold == 0 {
            return;
        }
        self.state = match self.state {
            Inner::Open {
                until: mine,
                cooldown,
            } if mine >= until => Inner::Open {
                until: mine,
                cooldown,
            },
            Inner::Open { cooldown, .. } | Inner::HalfOpen { cooldown, .. } => {
                Inner::Open { until, cooldown }
            }
            Inner::Closed { .. } => Inner::Open {
                until,
                cooldown: self.settings.cooldown,
            },
        };
    }

    /// Another instance saw the target recover: close it here too.
    pub fn force_close(&mut self) {
        self.state = Inner::Closed { failures: 0 };
    }

    /// Releases a probe slot whose call never reached the provider.
    pub fn release_probe(&mut self) {
        if let Inner::HalfOpen { cooldown, .. } = self.state {
            self.state = Inner::HalfOpen {
                probe_out: false,
                cooldown,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BreakerSettings {
        BreakerSettings {
            failure_threshold: 3,
            cooldown: Duration::from_secs(5),
            cooldown_multiplier: 2.0,
            max_cooldown: Duration::from_secs(15),
        }
    }

    #[test]
    fn opens_after_consecutive_outages_and_probes_once_per_cooldown() {
        let mut b = Breaker::new(settings());
        let t0 = crate::test_now();
        for _ in 0..2 {
            assert_eq!(b.admit(t0), Admission::Yes);
            b.record(Err(FailureCode::Unavailable), t0);
        }
        assert_eq!(b.state(t0), BreakerState::Closed);
        b.record(Err(FailureCode::Timeout), t0);
        assert_eq!(b.state(t0), BreakerState::Open);
        assert_eq!(b.admit(t0 + Duration::from_secs(4)), Admission::No);
        // Cooldown over: exactly one probe.
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(b.admit(t1), Admission::Probe);
        assert_eq!(b.admit(t1), Admission::No);
        // The probe fails: open for twice as long.
        b.record(Err(FailureCode::Connection), t1);
        assert_eq!(b.admit(t1 + Duration::from_secs(9)), Admission::No);
        let t2 = t1 + Duration::from_secs(10);
        assert_eq!(b.admit(t2), Admission::Probe);
        b.record(Err(FailureCode::Unavailable), t2);
        // Capped at 15 s.
        assert_eq!(b.open_until(), Some(t2 + Duration::from_secs(15)));
        let t3 = t2 + Duration::from_secs(15);
        assert_eq!(b.admit(t3), Admission::Probe);
        b.record(Ok(()), t3);
        assert_eq!(b.state(t3), BreakerState::Closed);
        assert_eq!(b.admit(t3), Admission::Yes);
    }

    #[test]
    fn refusals_bad_requests_and_rate_limits_never_trip_it() {
        let mut b = Breaker::new(settings());
        let now = crate::test_now();
        for code in [
            FailureCode::ContentFilter,
            FailureCode::BadRequest,
            FailureCode::RateLimited,
            FailureCode::Auth,
        ] {
            b.record(Err(FailureCode::Unavailable), now);
            b.record(Err(FailureCode::Unavailable), now);
            b.record(Err(code), now);
            assert_eq!(b.state(now), BreakerState::Closed, "{code}");
            assert_eq!(b.failures(), 0, "{code} resets the count");
        }
    }

    #[test]
    fn a_threshold_of_zero_disables_it() {
        let mut b = Breaker::new(BreakerSettings {
            failure_threshold: 0,
            ..settings()
        });
        let now = crate::test_now();
        for _ in 0..10 {
            b.record(Err(FailureCode::Unavailable), now);
        }
        assert_eq!(b.admit(now), Admission::Yes);
    }
}
