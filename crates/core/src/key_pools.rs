//! [`KeyPool`]: a pooled provider's keys at run time — each key's state
//! (in flight, out until when and why, the budget its answers reported)
//! behind one small mutex, stepped by `policy::keys`' pure rules; a
//! request's use of one key ([`KeyInUse`]); and every pool, by provider
//! ([`KeyPools`]).
//!
//! The pools are held apart from the provider actors (built from the
//! settings, so a provider actor's restart keeps what its keys' answers
//! said, and the fleet poller can write the fleet's word into a pool
//! before its provider's actor starts); the provider's actor builds one
//! adapter per key and hands them out in its lease. A reload builds anew
//! the pools whose settings changed ([`KeyPools::reloaded`]): a key that
//! stays (the same secret) keeps what its answers said, a key removed is
//! in no new pool; the router's view holds the pools its runs take
//! ([`LivePools`] holds them for the fleet poller and the prober).
//! A provider with one key has no pool and pays nothing here.
//!
//! The fleet knows a key by its id ([`key_id`]: derived from its secret,
//! never showing it), so instances agree on a key whatever its name or
//! place in the list, and a key kept through a reload keeps its id.

use crate::fixed_keys::FixedMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use understudy_policy::key_choice::{Ask, KeyState, Started, choose};
use understudy_settings::{ProviderSettings, Settings, Sticky};
use understudy_types::failure::{FailureCode, FailureKind};
use understudy_types::ratelimit::RateLimits;

/// One pooled provider's keys.
#[derive(Debug)]
pub struct KeyPool {
    pub provider: Arc<str>,
    /// The keys that have their secret, in the settings' order.
    pub names: Vec<Arc<str>>,
    /// Each key's id in the fleet's state ([`key_id`]).
    pub ids: Vec<Arc<str>>,
    /// Each key's place in `ProviderSettings::pool.keys` (for
    /// [`ProviderSettings::for_key`]).
    pub settings_index: Vec<usize>,
    weights: Vec<u32>,
    pub sticky: Sticky,
    cooldown: Duration,
    state: Mutex<Vec<KeyState>>,
}

/// Every pooled provider's key pool, by provider, as one settings file
/// made them (a clone shares them).
#[derive(Debug, Default, Clone)]
pub struct KeyPools {
    pools: Arc<FixedMap<Arc<str>, Arc<KeyPool>>>,
}

/// The pools in force, for the tasks that outlive a reload (the fleet
/// poller, the prober); a run takes its view's, without a lock.
#[derive(Debug, Default)]
pub struct LivePools(RwLock<KeyPools>);

/// A request started on one key: ended by `KeyPool::end`, or counted as
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

/// The id the fleet knows a key by: 16 hex digits derived from its secret
/// (the secret cannot be had back from it), the same on every instance
/// and through a reload, whatever the key's name or place.
pub fn key_id(secret: &understudy_settings::Secret) -> Arc<str> {
    let derived = blake3::derive_key("understudy 2026-12 pool key id", secret.expose().as_bytes());
    derived[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into()
}

/// For each key of `next`'s pool (in [`KeyPool`]'s order: those set),
/// the place in `before`'s pool of the key with the same secret, if it
/// had one: the keys a reload keeps. Empty when `next` has no pool.
pub fn kept_keys(before: &ProviderSettings, next: &ProviderSettings) -> Vec<Option<usize>> {
    let old: Vec<_> = present(before)
        .into_iter()
        .map(|i| before.pool.keys[i].secret.as_ref())
        .collect();
    present(next)
        .into_iter()
        .map(|i| {
            let secret = next.pool.keys[i].secret.as_ref();
            old.iter().position(|o| *o == secret)
        })
        .collect()
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
            pools: Arc::new(
                pools
                    .into_iter()
                    .map(|p| (Arc::clone(&p.provider), p))
                    .collect(),
            ),
        }
    }

    /// The pools of `next` (a reloaded file), these being `before`'s: a
    /// provider whose pool settings did not change keeps its pool whole
    /// (its keys' state, the requests in flight on them); one whose pool
    /// changed gets a new pool, in which each key kept (the same secret)
    /// starts from its state here ([`KeyPool::carry`]).
    pub fn reloaded(&self, before: &Settings, next: &Settings) -> Self {
        Self::new(next.providers.values().filter_map(|p| {
            let old = before.providers.get(&p.name);
            let pool = self.get(&p.name);
            match (old, pool) {
                (Some(o), Some(pool)) if o.pool == p.pool => Some(Arc::clone(pool)),
                (Some(o), Some(pool)) => KeyPool::of(p).inspect(|new| {
                    new.carry(pool, &kept_keys(o, p));
                }),
                _ => KeyPool::of(p),
            }
        }))
    }

    /// Whether `self` and `other` are the same pools (one made from the
    /// other by a clone).
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.pools, &other.pools)
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
            ids: present
                .iter()
                .map(|(_, k)| k.secret.as_ref().map_or_else(|| Arc::from(""), key_id))
                .collect(),
            settings_index: present.iter().map(|(i, _)| *i).collect(),
            weights: present.iter().map(|(_, k)| k.weight).collect(),
            sticky: p.pool.sticky,
            cooldown: p.pool.cooldown,
            state: Mutex::new(vec![KeyState::default(); present.len()]),
        }))
    }

    /// Starts each key from the state of the key of `from` that `kept`
    /// names (see [`kept_keys`]): its time out, the budget its answers
    /// reported, its requests counted; not its requests in flight, which
    /// end on `from`.
    pub fn carry(&self, from: &KeyPool, kept: &[Option<usize>]) {
        let old = from.lock().clone();
        let mut state = self.lock();
        for (s, k) in state.iter_mut().zip(kept) {
            if let Some(o) = k.and_then(|k| old.get(k)) {
                *s = o.clone();
                s.in_flight = 0;
                s.in_flight_tokens = 0;
            }
        }
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

    /// The key's id in the fleet's state.
    pub fn id(&self, key: usize) -> Option<&Arc<str>> {
        self.ids.get(key)
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

// === impl LivePools ===

impl LivePools {
    pub fn new(pools: KeyPools) -> Self {
        Self(RwLock::new(pools))
    }

    /// The pools in force.
    pub fn current(&self) -> KeyPools {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `pools` in force (a reload).
    pub fn set(&self, pools: KeyPools) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = pools;
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
