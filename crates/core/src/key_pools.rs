//! [`KeyPool`]: a pooled provider's keys at run time — each key's state
//! (in flight, out until when and why, the budget its answers reported)
//! behind one small mutex, stepped by `policy::keys`' pure rules; a
//! request's use of one key ([`KeyInUse`]); and every pool, by provider
//! ([`KeyPools`]).
//!
//! The pools are held engine-wide beside the breakers
//! (built once from the settings, so a provider actor's restart keeps
//! what its keys' answers said, and the fleet poller can write the fleet's
//! word into a pool before its provider's actor starts); the provider's
//! actor builds one adapter per key and hands them out in its lease.
//! A provider with one key has no pool and pays nothing here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use understudy_policy::key_choice::{Ask, KeyState, Started, choose};
use understudy_settings::{ProviderSettings, Sticky};
use understudy_types::failure::{FailureCode, FailureKind};
use understudy_types::ratelimit::RateLimits;

/// One pooled provider's keys.
#[derive(Debug)]
pub struct KeyPool {
    pub provider: Arc<str>,
    /// The keys that have their secret, in the settings' order.
    pub names: Vec<Arc<str>>,
    /// Each key's place in `ProviderSettings::pool.keys` (for
    /// [`ProviderSettings::for_key`]).
    pub settings_index: Vec<usize>,
    weights: Vec<u32>,
    pub sticky: Sticky,
    cooldown: Duration,
    state: Mutex<Vec<KeyState>>,
}

/// Every pooled provider's key pool, by provider: fixed at start.
#[derive(Debug, Default, Clone)]
pub struct KeyPools {
    pools: HashMap<Arc<str>, Arc<KeyPool>>,
}

/// A request started on one key: ended by [`KeyPool::end`], or counted as
/// ended (with no word on the key) when dropped.
#[derive(Debug)]
pub struct KeyInUse {
    pool: Arc<KeyPool>,
    started: Started,
    ended: bool,
}

/// A key as `/v1/status` and `understudy providers` show it: its name,
/// never its secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolKeyStatus {
    pub name: String,
    pub in_flight: u32,
    /// Whether it may take a request now.
    pub available: bool,
    /// Why it may not (a failure code, or `budget`), and for how long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub back_in_s: Option<f64>,
    /// What the provider last said is left, where it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_remaining: Option<u64>,
}

/// The keys of `p`'s pool that have their secret (their places in
/// `p.pool.keys`), in order; empty without a pool.
pub fn present(p: &ProviderSettings) -> Vec<usize> {
    p.pool
        .keys
        .iter()
        .enumerate()
        .filter(|(_, k)| k.secret.is_some())
        .map(|(i, _)| i)
        .collect()
}

// === impl KeyPools ===

impl KeyPools {
    /// These pools, by their provider.
    pub fn new(pools: impl IntoIterator<Item = Arc<KeyPool>>) -> Self {
        Self {
            pools: pools
                .into_iter()
                .map(|p| (Arc::clone(&p.provider), p))
                .collect(),
        }
    }

    /// `provider`'s key pool, if it has one.
    pub fn get(&self, provider: &str) -> Option<&Arc<KeyPool>> {
        if self.pools.is_empty() {
            return None;
        }
        self.pools.get(provider)
    }

    /// Every key pool, for the fleet poller and the status.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<KeyPool>> {
        self.pools.values()
    }
}

// === impl KeyPool ===

impl KeyPool {
    /// The pool of `p`, if it has one with at least one key set.
    pub fn of(p: &ProviderSettings) -> Option<Arc<Self>> {
        let present: Vec<(usize, &understudy_settings::PoolKey)> = present(p)
            .into_iter()
            .map(|i| (i, &p.pool.keys[i]))
            .collect();
        if present.is_empty() {
            return None;
        }
        Some(Arc::new(Self {
            provider: Arc::from(p.name.as_str()),
            names: present
                .iter()
                .map(|(_, k)| Arc::from(k.name.as_str()))
                .collect(),
            settings_index: present.iter().map(|(i, _)| *i).collect(),
            weights: present.iter().map(|(_, k)| k.weight).collect(),
            sticky: p.pool.sticky,
            cooldown: p.pool.cooldown,
            state: Mutex::new(vec![KeyState::default(); present.len()]),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<KeyState>> {
        // The state is stepped whole under the lock; a panic elsewhere
        // leaves nothing half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a request on the key `ask` chooses, if one may take it.
    pub fn pick(self: &Arc<Self>, ask: &Ask, now: Instant) -> Option<KeyInUse> {
        let mut state = self.lock();
        let keys: Vec<(u32, &KeyState)> = self.weights.iter().copied().zip(state.iter()).collect();
        let key = choose(&keys, ask, now)?;
        let started = state.get_mut(key)?.start(key, ask.tokens);
        Some(KeyInUse {
            pool: Arc::clone(self),
            started,
            ended: false,
        })
    }

    /// A key that may take a request now, else the first (counting
    /// tokens, which is no attempt and spends no budget worth steering).
    pub fn any(&self, now: Instant) -> usize {
        self.lock()
            .iter()
            .position(|s| s.may_take(0, now))
            .unwrap_or(0)
    }

    /// Until when every key is out for a rate limit, if they all are.
    pub fn rate_limited_until(&self, now: Instant) -> Option<Instant> {
        understudy_policy::key_choice::rate_limited_until(&self.lock(), now)
    }

    /// Whether a key this request has not tried may take it now.
    pub fn another(&self, tried: u64, tokens: u64, now: Instant) -> bool {
        self.lock()
            .iter()
            .enumerate()
            .any(|(i, s)| tried & (1u64 << i.min(63)) == 0 && s.may_take(tokens, now))
    }

    /// The request `started` ended: what its answer reported and
    /// how it failed, if it did. Returns when the key went out until, if
    /// this took it out (for the fleet).
    fn end(
        &self,
        started: &Started,
        limits: Option<&RateLimits>,
        failure: Option<&FailureKind>,
        now: Instant,
    ) -> Option<(usize, Instant)> {
        let key = started.key;
        let mut state = self.lock();
        let s = state.get_mut(key)?;
        let before = s.out;
        s.end(started, limits, failure, self.cooldown, now);
        match (before, s.out) {
            (b, Some((until, _))) if b.map(|(u, _)| u) != Some(until) && until > now => {
                Some((key, until))
            }
            _ => None,
        }
    }

    /// A readiness probe found key `key` refused (its answer proved the
    /// key itself bad): out for the pool's cooldown, as a call refused
    /// for auth takes it out. Returns until when.
    pub fn refused(&self, key: usize, now: Instant) -> Instant {
        let until = now + self.cooldown;
        self.sync(key, until, FailureCode::Auth);
        until
    }

    /// The fleet says key `key` is out until `until`.
    pub fn sync(&self, key: usize, until: Instant, code: FailureCode) {
        if let Some(s) = self.lock().get_mut(key) {
            s.go_out(until, code);
        }
    }

    /// The key's name.
    pub fn name(&self, key: usize) -> Option<&Arc<str>> {
        self.names.get(key)
    }

    /// Every key as the status shows it.
    pub fn status(&self, now: Instant) -> Vec<PoolKeyStatus> {
        let state = self.lock();
        self.names
            .iter()
            .zip(state.iter())
            .map(|(name, s)| {
                let back = s.back_at(now);
                let out = back.map(|_| match s.out {
                    Some((until, code)) if until > now => code.as_str(),
                    _ => "budget",
                });
                let reported = s
                    .reported
                    .filter(|(_, at)| now.duration_since(*at) < Duration::from_secs(3600));
                PoolKeyStatus {
                    name: name.to_string(),
                    in_flight: s.in_flight,
                    available: back.is_none(),
                    out,
                    back_in_s: back.map(|b| (b - now).as_secs_f64()),
                    requests_remaining: reported.and_then(|(r, _)| r.requests).map(|b| b.remaining),
                    tokens_remaining: reported
                        .and_then(|(r, _)| r.tightest_tokens())
                        .map(|b| b.remaining),
                }
            })
            .collect()
    }
}

// === impl KeyInUse ===

impl KeyInUse {
    /// The key the request went to.
    pub fn key(&self) -> usize {
        self.started.key
    }

    /// The key's name.
    pub fn name(&self) -> Option<String> {
        self.pool.name(self.started.key).map(|n| n.to_string())
    }

    /// The pool it belongs to.
    pub fn pool(&self) -> &Arc<KeyPool> {
        &self.pool
    }

    /// The request ended: what its answer reported and how it failed, if
    /// it did. Returns until when the key went out, if this took it out
    /// (for the fleet).
    pub fn end(
        mut self,
        limits: Option<&RateLimits>,
        failure: Option<&FailureKind>,
        now: Instant,
    ) -> Option<(usize, Instant)> {
        self.ended = true;
        self.pool.end(&self.started, limits, failure, now)
    }
}

impl Drop for KeyInUse {
    fn drop(&mut self) {
        if !self.ended {
            // An attempt abandoned mid-call: no longer in flight, and no
            // word on the key.
            if let Some(s) = self.pool.lock().get_mut(self.started.key) {
                s.in_flight = s.in_flight.saturating_sub(1);
            }
        }
    }
}
