//! Standing faults a simulator applies to every call, whatever its script:
//! a member slow to first token (always, or a slow tail: every Nth answer
//! much slower), and one failing a share of its calls — every Nth, or a
//! seeded share — with a chosen status. Deterministic: the same calls in
//! the same order fail the same way.

use std::sync::Mutex;
use std::time::Duration;

use super::{Reply, SimProvider, lock};

/// Which calls fail.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// Calls `n`, `2n`, `3n`, … (counted from the rule's start).
    Every(u64),
    /// A share of calls, chosen by a generator seeded with `seed`.
    Share { per_million: u64, seed: u64 },
}

/// A simulator's standing faults.
#[derive(Default)]
pub(super) struct Faults {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    first_token_delay: Duration,
    failing: Option<(Rule, u16)>,
    /// Calls seen since the failing rule started.
    calls: u64,
    failed: u64,
    /// Every `n`th answer waits this long instead of the first-token
    /// delay (counted from when the rule was set).
    slow_tail: Option<(u64, Duration)>,
    answers: u64,
}

// === impl SimProvider ===

impl SimProvider {
    /// Every answer waits `delay` before its first byte (streamed or not):
    /// a member slow to first token. `Duration::ZERO` turns it off.
    pub fn first_token_delay(&self, delay: Duration) -> &Self {
        lock(&self.shared.faults.state).first_token_delay = delay;
        self
    }

    /// A slow tail: every `n`th answer from now on (the `n`th, `2n`th, …)
    /// waits `delay` before its first byte instead of the first-token
    /// delay. `n = 0` turns it off.
    pub fn slow_every(&self, n: u64, delay: Duration) -> &Self {
        let mut s = lock(&self.shared.faults.state);
        s.slow_tail = (n > 0).then_some((n, delay));
        s.answers = 0;
        drop(s);
        self
    }

    /// Fails every `n`th call from now on (the `n`th, `2n`th, …) with
    /// `status` and the protocol's usual body for it, whatever is
    /// scripted (the scripted replies wait for the calls that pass).
    pub fn fail_every(&self, n: u64, status: u16) -> &Self {
        self.set_failing(Rule::Every(n.max(1)), status)
    }

    /// Fails `share` (0.0 to 1.0) of the calls from now on with `status`,
    /// chosen by a generator seeded with `seed`: the same seed fails the
    /// same calls.
    pub fn fail_share(&self, share: f64, seed: u64, status: u16) -> &Self {
        let per_million = (share.clamp(0.0, 1.0) * 1_000_000.0).round() as u64;
        self.set_failing(Rule::Share { per_million, seed }, status)
    }

    /// Stops failing calls (a member that recovers).
    pub fn stop_failing(&self) -> &Self {
        lock(&self.shared.faults.state).failing = None;
        self
    }

    /// Calls failed by [`Self::fail_every`] or [`Self::fail_share`] so far.
    pub fn failed_calls(&self) -> u64 {
        lock(&self.shared.faults.state).failed
    }

    fn set_failing(&self, rule: Rule, status: u16) -> &Self {
        let mut s = lock(&self.shared.faults.state);
        s.failing = Some((rule, status));
        s.calls = 0;
        drop(s);
        self
    }
}

// === impl Faults ===

impl Faults {
    /// The failure this call gets, if it is one that fails.
    pub(super) fn failure(&self) -> Option<Reply> {
        let mut s = lock(&self.state);
        let (rule, status) = s.failing?;
        s.calls += 1;
        let fails = match rule {
            Rule::Every(n) => s.calls % n == 0,
            Rule::Share { per_million, seed } => {
                splitmix(seed ^ s.calls.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % 1_000_000
                    < per_million
            }
        };
        if fails {
            s.failed += 1;
        }
        fails.then(|| Reply::status(status))
    }

    /// `reply`, made to wait for the first-token delay if there is one.
    pub(super) fn slowed(&self, reply: Reply) -> Reply {
        let mut s = lock(&self.state);
        s.answers += 1;
        let delay = match s.slow_tail {
            Some((n, slow)) if s.answers % n == 0 => slow,
            _ => s.first_token_delay,
        };
        drop(s);
        if delay.is_zero() {
            reply
        } else {
            reply.after(delay)
        }
    }
}

/// SplitMix64: a well-mixed 64-bit value from `x`.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
