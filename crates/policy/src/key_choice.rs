//! A key pool's rules, as pure functions over plain state: which failures
//! belong to a key and which to its target, how long a key stays out,
//! what the budget a provider reported leaves for the next request, and
//! which key takes it.
//!
//! **Seeing the 429 coming.** An answer's `remaining` counts what the
//! provider had counted when it answered that request. Surely counted by
//! then: the request itself and every one answered before it was sent;
//! any other started on the key may not be. So what is left is at least
//! `remaining + surely counted − started`, whatever order requests reach
//! the provider in; of several answers in one window the tightest such
//! bound is kept. A key whose bound reaches zero takes no
//! new request until the reset the provider gave, while another key has
//! room. No budget reported (or a reset passed): no reason to steer away.

use std::time::{Duration, Instant};

use understudy_types::failure::{FailureCode, FailureKind};
use understudy_types::ratelimit::{Budget, RateLimits};

/// Who a failure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The credential: another key of the same target may serve.
    Key,
    /// The target: its breaker, as without a pool.
    Target,
}

/// A rate limit without a wait named stays out this long.
pub const RATE_LIMIT_OUT: Duration = Duration::from_secs(5);

/// A budget reported without a reset is trusted this long.
const NO_RESET_TRUST: Duration = Duration::from_secs(1);

/// 401, 403, 429 and an exhausted quota are the key's; everything else
/// (5xx, 529, timeouts, transport errors, bad requests, refusals) is the
/// target's, so a deterministic 5xx does not take out every key.
pub fn scope(kind: &FailureKind) -> Scope {
    match kind {
        FailureKind::Auth | FailureKind::QuotaExceeded | FailureKind::RateLimited { .. } => {
            Scope::Key
        }
        _ => Scope::Target,
    }
}

/// How long a key stays out after `kind`: a rate limit for its
/// `Retry-After` (else [`RATE_LIMIT_OUT`]), a refused key for `cooldown`.
pub fn out_for(kind: &FailureKind, cooldown: Duration) -> Option<Duration> {
    match kind {
        FailureKind::RateLimited { retry_after } => Some(retry_after.unwrap_or(RATE_LIMIT_OUT)),
        FailureKind::Auth | FailureKind::QuotaExceeded => Some(cooldown),
        _ => None,
    }
}

/// One dimension of what a key has left: the tightest lower bound seen in
/// the current window, as `remaining + surely counted` (requests, or
/// tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    bound: u64,
    until: Instant,
}

/// One key's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyState {
    pub in_flight: u32,
    /// Tokens the requests in flight were estimated to take.
    pub in_flight_tokens: u64,
    /// Requests started on the key.
    pub started: u64,
    /// Tokens those requests were estimated to take.
    pub started_tokens: u64,
    /// Out until then, and why.
    pub out: Option<(Instant, FailureCode)>,
    pub requests: Option<Seen>,
    pub tokens: Option<Seen>,
    /// The last budget reported (for `/v1/status`), and when.
    pub reported: Option<(RateLimits, Instant)>,
}

/// What one request started on a key: what its answer's word surely
/// counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub key: usize,
    /// Its estimated tokens.
    pub tokens: u64,
    /// The requests (and their tokens) answered before it started, and
    /// itself.
    pub sure: u64,
    pub sure_tokens: u64,
}

/// What [`choose`] is asked to weigh.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// Keys this request already tried (bit `i`: key `i`).
    pub tried: u64,
    /// The request's estimated input tokens.
    pub tokens: u64,
    /// The conversation's hash, when the pool keeps a conversation on its
    /// key.
    pub sticky: Option<u64>,
    /// Take a key even if none may: the soonest back (the decision
    /// machine waited out a rate limit, or every target was out).
    pub last_resort: bool,
    /// 0.0 to 1.0, to break ties by weight.
    pub draw: f64,
}

// === impl KeyState ===

impl KeyState {
    /// Whether the key may take a request needing `tokens` now.
    pub fn may_take(&self, tokens: u64, now: Instant) -> bool {
        if self.out.is_some_and(|(until, _)| until > now) {
            return false;
        }
        let left = |seen: &Option<Seen>, used: u64| {
            seen.filter(|s| s.until > now)
                .map(|s| s.bound.saturating_sub(used))
        };
        if left(&self.requests, self.started) == Some(0) {
            return false;
        }
        left(&self.tokens, self.started_tokens).is_none_or(|t| t >= tokens.max(1))
    }

    /// When it may take a request again, if it may not now (the later of
    /// its cooldown and its budgets' resets).
    pub fn back_at(&self, now: Instant) -> Option<Instant> {
        if self.may_take(0, now) {
            return None;
        }
        let out = self.out.map(|(u, _)| u).filter(|u| *u > now);
        let exhausted = |seen: &Option<Seen>, used: u64| {
            seen.filter(|s| s.until > now && s.bound <= used)
                .map(|s| s.until)
        };
        [
            out,
            exhausted(&self.requests, self.started),
            exhausted(&self.tokens, self.started_tokens),
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// Counts a request started on key `key`, estimated at `tokens`.
    pub fn start(&mut self, key: usize, tokens: u64) -> Started {
        let answered = self.started - u64::from(self.in_flight);
        let answered_tokens = self.started_tokens.saturating_sub(self.in_flight_tokens);
        self.in_flight += 1;
        self.in_flight_tokens = self.in_flight_tokens.saturating_add(tokens);
        self.started += 1;
        self.started_tokens = self.started_tokens.saturating_add(tokens);
        Started {
            key,
            tokens,
            sure: answered + 1,
            sure_tokens: answered_tokens.saturating_add(tokens),
        }
    }

    /// The request `s` ended: its answer (or error) reported `limits`,
    /// and if it failed, how.
    pub fn end(
        &mut self,
        s: &Started,
        limits: Option<&RateLimits>,
        failure: Option<&FailureKind>,
        cooldown: Duration,
        now: Instant,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.in_flight_tokens = self.in_flight_tokens.saturating_sub(s.tokens);
        if let Some(limits) = limits {
            self.requests = seen(self.requests, limits.requests, s.sure, now);
            self.tokens = seen(self.tokens, limits.tightest_tokens(), s.sure_tokens, now);
            self.reported = Some((*limits, now));
        }
        if let Some(kind) = failure {
            if let Some(wait) = out_for(kind, cooldown) {
                self.go_out(now + wait, kind.code());
            }
        }
    }

    /// Out until `until` (the later of this and any it already has).
    pub fn go_out(&mut self, until: Instant, code: FailureCode) {
        match self.out {
            Some((u, _)) if u >= until => {}
            _ => self.out = Some((until, code)),
        }
    }
}

/// When every key is out for a rate limit (a 429, or its budget spent),
/// the soonest one is back: the target is rate limited as a whole, and
/// the decision machine may wait for it as for a 429. `None` when a key
/// may take a request, or one is out for another reason (refused).
pub fn rate_limited_until(keys: &[KeyState], now: Instant) -> Option<Instant> {
    let mut soonest: Option<Instant> = None;
    for k in keys {
        let back = k.back_at(now)?;
        if k.out
            .is_some_and(|(until, code)| until > now && code != FailureCode::RateLimited)
        {
            return None;
        }
        soonest = Some(soonest.map_or(back, |s| s.min(back)));
    }
    soonest
}

/// The bound `budget` gives (reported by the answer to a request that
/// surely counts `sure`), kept with `old` when both hold in the same
/// window.
fn seen(old: Option<Seen>, budget: Option<Budget>, sure: u64, now: Instant) -> Option<Seen> {
    let Some(b) = budget else {
        return old.filter(|s| s.until > now);
    };
    let new = Seen {
        bound: b.remaining.saturating_add(sure),
        until: now + b.reset.unwrap_or(NO_RESET_TRUST),
    };
    match old {
        Some(o) if o.until > now => {
            // A reset later than the one held by more than a second is a
            // new window: the new answer's word replaces the old one's.
            if new.until > o.until + Duration::from_secs(1) {
                Some(new)
            } else {
                Some(Seen {
                    bound: o.bound.max(new.bound),
                    until: o.until.max(new.until),
                })
            }
        }
        _ => Some(new),
    }
}

/// The key a request goes to, among `keys` (each with its weight): one
/// that may take it, not tried yet; by conversation when sticky, else the
/// least in flight for its weight, ties broken by weight. `None`: no key
/// may (the target is skipped, as behind an open breaker).
pub fn choose(keys: &[(u32, &KeyState)], ask: &Ask, now: Instant) -> Option<usize> {
    let open = |i: usize, s: &KeyState| {
        ask.tried & (1u64 << i.min(63)) == 0 && s.may_take(ask.tokens, now)
    };
    let eligible: Vec<usize> = keys
        .iter()
        .enumerate()
        .filter(|(i, (_, s))| open(*i, s))
        .map(|(i, _)| i)
        .collect();
    if eligible.is_empty() {
        if !ask.last_resort {
            return None;
        }
        // The soonest back; every one counts, tried or not.
        return (0..keys.len()).min_by_key(|i| keys[*i].1.back_at(now).unwrap_or(now));
    }
    if let Some(conversation) = ask.sticky {
        return eligible.into_iter().min_by(|a, b| {
            let score = |i: usize| rendezvous(conversation, i) / f64::from(keys[i].0.max(1));
            score(*a).total_cmp(&score(*b))
        });
    }
    // Least in flight per unit of weight: a/wa < b/wb as a·wb < b·wa.
    let load = |i: usize| u64::from(keys[i].1.in_flight);
    let weight = |i: usize| u64::from(keys[i].0.max(1));
    let least = eligible
        .iter()
        .copied()
        .min_by(|a, b| (load(*a) * weight(*b)).cmp(&(load(*b) * weight(*a))))?;
    let tied: Vec<usize> = eligible
        .into_iter()
        .filter(|i| load(*i) * weight(least) == load(least) * weight(*i))
        .collect();
    let total: u64 = tied.iter().map(|i| weight(*i)).sum();
    let mut point = (ask.draw.clamp(0.0, 1.0) * total as f64) as u64;
    for i in &tied {
        if point < weight(*i) {
            return Some(*i);
        }
        point -= weight(*i);
    }
    tied.last().copied()
}

/// Rendezvous hashing: an exponential variate per (conversation, key), so
/// that dividing by a weight gives each key its share and a conversation
/// moves only when its key may not take it.
fn rendezvous(conversation: u64, key: usize) -> f64 {
    // SplitMix64 of the pair: cheap, well spread.
    let mut z = conversation ^ (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        crate::test_now()
    }

    fn ask() -> Ask {
        Ask {
            tried: 0,
            tokens: 10,
            sticky: None,
            last_resort: false,
            draw: 0.0,
        }
    }

    fn budget(remaining: u64, reset_s: u64) -> RateLimits {
        RateLimits {
            requests: Some(Budget {
                limit: Some(100),
                remaining,
                reset: Some(Duration::from_secs(reset_s)),
            }),
            ..RateLimits::default()
        }
    }

    #[test]
    fn key_failures_and_target_failures() {
        for kind in [
            FailureKind::Auth,
            FailureKind::QuotaExceeded,
            FailureKind::RateLimited { retry_after: None },
        ] {
            assert_eq!(scope(&kind), Scope::Key, "{kind:?}");
        }
        for kind in [
            FailureKind::Unavailable { retry_after: None },
            FailureKind::Timeout,
            FailureKind::Connection,
            FailureKind::MalformedResponse,
            FailureKind::BadRequest,
            FailureKind::StreamInterrupted,
        ] {
            assert_eq!(scope(&kind), Scope::Target, "{kind:?}");
        }
    }

    #[test]
    fn a_rate_limited_key_is_out_for_its_retry_after_alone() {
        let now = t0();
        let (mut a, b) = (KeyState::default(), KeyState::default());
        let s = a.start(0, 10);
        let limited = FailureKind::RateLimited {
            retry_after: Some(Duration::from_secs(30)),
        };
        a.end(&s, None, Some(&limited), Duration::from_secs(60), now);
        let keys = [(1, &a), (1, &b)];
        for secs in [0, 1, 29] {
            let at = now + Duration::from_secs(secs);
            assert_eq!(choose(&keys, &ask(), at), Some(1), "{secs} s");
        }
        assert!(a.may_take(10, now + Duration::from_secs(30)));
        assert_eq!(a.back_at(now), Some(now + Duration::from_secs(30)));
    }

    #[test]
    fn a_refused_key_waits_out_the_cooldown() {
        let now = t0();
        let mut a = KeyState::default();
        let s = a.start(0, 0);
        a.end(
            &s,
            None,
            Some(&FailureKind::Auth),
            Duration::from_secs(60),
            now,
        );
        assert!(!a.may_take(0, now + Duration::from_secs(59)));
        assert!(a.may_take(0, now + Duration::from_secs(60)));
        // An outage is the target's: the key stays in.
        let mut b = KeyState::default();
        let s = b.start(1, 0);
        b.end(
            &s,
            None,
            Some(&FailureKind::Unavailable { retry_after: None }),
            Duration::from_secs(60),
            now,
        );
        assert!(b.may_take(0, now));
    }

    #[test]
    fn a_budget_at_zero_keeps_the_key_out_until_its_reset() {
        let now = t0();
        let mut a = KeyState::default();
        let s = a.start(0, 0);
        a.end(&s, Some(&budget(0, 20)), None, Duration::ZERO, now);
        assert!(!a.may_take(0, now));
        assert!(!a.may_take(0, now + Duration::from_secs(19)));
        assert!(a.may_take(0, now + Duration::from_secs(20)));
        assert_eq!(a.back_at(now), Some(now + Duration::from_secs(20)));
    }

    #[test]
    fn requests_still_in_flight_count_against_the_last_word() {
        let now = t0();
        let mut a = KeyState::default();
        // Three requests start; the first answers "2 left": the other two
        // may be the two, so none more may start.
        let first = a.start(0, 0);
        let _second = a.start(0, 0);
        let _third = a.start(0, 0);
        a.end(&first, Some(&budget(2, 20)), None, Duration::ZERO, now);
        assert!(!a.may_take(0, now));
        // Answers out of order: the first reached the provider first
        // (6 left after it), the second after it (5 left), but the
        // second's answer comes back first.
        let mut b = KeyState::default();
        let first = b.start(1, 0);
        let second = b.start(1, 0);
        b.end(&second, Some(&budget(5, 20)), None, Duration::ZERO, now);
        // Surely counted: the second only; 5 + 1 − 2 = 4, one short.
        b.end(&first, Some(&budget(6, 20)), None, Duration::ZERO, now);
        // The first's word surely counts itself: 6 + 1 − 2 = 5, exact;
        // never more than the 5 really left.
        for _ in 0..5 {
            assert!(b.may_take(0, now));
            b.start(1, 0);
        }
        assert!(!b.may_take(0, now));
        // Sequential requests see exactly what the provider says.
        let mut c = KeyState::default();
        for left in (0..3).rev() {
            assert!(c.may_take(0, now));
            let s = c.start(2, 0);
            c.end(&s, Some(&budget(left, 20)), None, Duration::ZERO, now);
        }
        assert!(!c.may_take(0, now));
    }

    #[test]
    fn a_new_window_replaces_the_old_word() {
        let now = t0();
        let mut a = KeyState::default();
        let s = a.start(0, 0);
        a.end(&s, Some(&budget(0, 5)), None, Duration::ZERO, now);
        let later = now + Duration::from_secs(6);
        let s = a.start(0, 0);
        a.end(&s, Some(&budget(99, 60)), None, Duration::ZERO, later);
        assert!(a.may_take(0, later));
    }

    #[test]
    fn tokens_left_below_the_request_s_estimate_steer_away() {
        let now = t0();
        let mut a = KeyState::default();
        let s = a.start(0, 100);
        let limits = RateLimits {
            tokens: Some(Budget {
                limit: None,
                remaining: 500,
                reset: Some(Duration::from_secs(10)),
            }),
            ..RateLimits::default()
        };
        a.end(&s, Some(&limits), None, Duration::ZERO, now);
        assert!(a.may_take(400, now));
        a.start(0, 400);
        assert!(!a.may_take(200, now));
        assert!(a.may_take(200, now + Duration::from_secs(10)));
    }

    #[test]
    fn every_key_rate_limited_is_the_target_rate_limited() {
        let now = t0();
        let mut limited = KeyState::default();
        limited.go_out(now + Duration::from_secs(3), FailureCode::RateLimited);
        let mut spent = KeyState::default();
        let s = spent.start(1, 0);
        spent.end(&s, Some(&budget(0, 2)), None, Duration::ZERO, now);
        assert_eq!(
            rate_limited_until(&[limited.clone(), spent.clone()], now),
            Some(now + Duration::from_secs(2))
        );
        // One key may still serve, or one is refused: not a rate limit.
        assert_eq!(
            rate_limited_until(&[limited.clone(), KeyState::default()], now),
            None
        );
        let mut refused = KeyState::default();
        refused.go_out(now + Duration::from_secs(60), FailureCode::Auth);
        assert_eq!(rate_limited_until(&[limited, refused], now), None);
    }

    #[test]
    fn least_in_flight_for_its_weight_then_by_weight() {
        let now = t0();
        let busy = KeyState {
            in_flight: 2,
            ..KeyState::default()
        };
        let idle = KeyState::default();
        assert_eq!(choose(&[(1, &busy), (1, &idle)], &ask(), now), Some(1));
        // Twice the weight carries twice the load before the other wins.
        let one = KeyState {
            in_flight: 1,
            ..KeyState::default()
        };
        assert_eq!(choose(&[(2, &one), (1, &one)], &ask(), now), Some(0));
        // Ties go by weight: a draw in the first 3/4 picks the heavy one.
        let keys = [(3, &idle), (1, &idle)];
        let at = |draw| choose(&keys, &Ask { draw, ..ask() }, now);
        assert_eq!(at(0.0), Some(0));
        assert_eq!(at(0.74), Some(0));
        assert_eq!(at(0.76), Some(1));
        assert_eq!(at(1.0), Some(1));
    }

    #[test]
    fn tried_keys_are_not_chosen_again_but_for_a_last_resort() {
        let now = t0();
        let idle = KeyState::default();
        let keys = [(1, &idle), (1, &idle)];
        let tried_both = Ask {
            tried: 0b11,
            ..ask()
        };
        assert_eq!(choose(&keys, &tried_both, now), None);
        assert!(
            choose(
                &keys,
                &Ask {
                    last_resort: true,
                    ..tried_both
                },
                now
            )
            .is_some()
        );
        let only_b = Ask {
            tried: 0b01,
            ..ask()
        };
        assert_eq!(choose(&keys, &only_b, now), Some(1));
    }

    #[test]
    fn a_last_resort_takes_the_soonest_back() {
        let now = t0();
        let mut late = KeyState::default();
        late.go_out(now + Duration::from_secs(30), FailureCode::RateLimited);
        let mut soon = KeyState::default();
        soon.go_out(now + Duration::from_secs(3), FailureCode::RateLimited);
        let keys = [(1, &late), (1, &soon)];
        assert_eq!(choose(&keys, &ask(), now), None);
        let last = Ask {
            last_resort: true,
            ..ask()
        };
        assert_eq!(choose(&keys, &last, now), Some(1));
    }

    #[test]
    fn a_conversation_keeps_its_key_and_moves_only_when_it_must() {
        let now = t0();
        let idle = KeyState::default();
        let keys = [(1, &idle), (1, &idle), (1, &idle)];
        let mut spread = [0; 3];
        for conversation in 0..300u64 {
            let a = Ask {
                sticky: Some(conversation.wrapping_mul(0x2545_F491_4F6C_DD1D)),
                ..ask()
            };
            let first = choose(&keys, &a, now);
            // The same conversation, whatever the draw and the load.
            let busy = KeyState {
                in_flight: 9,
                ..KeyState::default()
            };
            let mut loaded = keys;
            let k = first.unwrap_or(0);
            loaded[k] = (1, &busy);
            assert_eq!(choose(&loaded, &Ask { draw: 0.9, ..a }, now), first);
            // Out: it moves to another key.
            let mut out = KeyState::default();
            out.go_out(now + Duration::from_secs(5), FailureCode::Auth);
            let mut gone = keys;
            gone[k] = (1, &out);
            let moved = choose(&gone, &a, now);
            assert!(moved.is_some() && moved != first);
            spread[k] += 1;
        }
        assert!(spread.iter().all(|n| *n > 60), "{spread:?}");
    }
}
