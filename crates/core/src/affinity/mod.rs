//! Session affinity: a session stays on the target that last served it
//! while that target's prompt cache can still hold its prefix, on every
//! instance of a fleet.
//!
//! - `session.rs`: what names a request's session, and its key.
//!
//! A run's side (the pin looked up before planning, the switch cost the
//! decision machine weighs, the pin moved to whoever served, what the
//! event says) is the run's `session.rs`.
//!
//! The pins live in a bounded, expiring map in this process and, with
//! Redis, under `understudy:{session:<key>}:pin` (a String
//! `<cached tokens>\n<ttl class>\n<provider>\n<model>`, `PX` = the cache's
//! lifetime, refreshed on every served turn). Redis wins when it answers;
//! a broken Redis degrades to the map and never fails a request.
//!
//! Only a route with more than one target, with `[affinity] enabled`,
//! looks a session up: a one-target route hashes, locks and asks nothing.

pub mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use understudy_policy::affinity::TtlClass;
use understudy_settings::{AffinitySettings, Settings};
use understudy_types::target::Target;

use crate::shared::SharedState;
use session::SessionKey;

/// Where a session is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pin {
    pub target: Target,
    /// The prefix its cache holds, from the last answer's usage.
    pub cached: u64,
    pub class: TtlClass,
}

/// The engine's pins.
pub(crate) struct Affinity {
    pub(crate) settings: AffinitySettings,
    local: Mutex<HashMap<SessionKey, Held, KeyHashing>>,
    shared: Option<Arc<SharedState>>,
}

/// How the pin map hashes a [`SessionKey`] (itself a hash): one folded
/// multiply of its halves, each mixed with a seed drawn per process, in
/// place of SipHash's rounds. A client cannot aim its sessions at one
/// bucket without the seeds.
#[derive(Clone, Copy)]
struct KeyHashing([u64; 2]);

/// [`KeyHashing`]'s hasher.
struct KeyHasher {
    seeds: [u64; 2],
    hash: u64,
}

impl KeyHashing {
    fn new() -> Self {
        Self([fastrand::u64(..), fastrand::u64(..)])
    }
}

impl std::hash::BuildHasher for KeyHashing {
    type Hasher = KeyHasher;

    fn build_hasher(&self) -> KeyHasher {
        KeyHasher {
            seeds: self.0,
            hash: 0,
        }
    }
}

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write_u128(&mut self, n: u128) {
        // Truncation is the point: the word's two halves.
        #[allow(clippy::cast_possible_truncation)]
        let (lo, hi) = (n as u64 ^ self.hash, (n >> 64) as u64);
        let full = u128::from(lo ^ self.seeds[0]) * u128::from(hi ^ self.seeds[1]);
        #[allow(clippy::cast_possible_truncation)]
        let folded = full as u64 ^ (full >> 64) as u64;
        self.hash = folded;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not a key's way (it writes one word), but any bytes hash.
        for chunk in bytes.chunks(16) {
            let mut word = [0u8; 16];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u128(u128::from_le_bytes(word));
        }
    }
}

/// A pin held in this process, until its cache lapses.
struct Held {
    pin: Pin,
    until: Instant,
}

/// What a lookup found.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub pin: Option<Pin>,
    /// A pin was held here and its cache lapsed.
    pub expired: bool,
}

fn redis_key(key: &SessionKey) -> String {
    format!("understudy:{{session:{}}}:pin", key.hex())
}

const CLASSES: [TtlClass; 7] = [
    TtlClass::FiveMinutes,
    TtlClass::OneHour,
    TtlClass::InMemory,
    TtlClass::Extended,
    TtlClass::Explicit,
    TtlClass::Implicit,
    TtlClass::Configured,
];

// === impl Affinity ===

impl Affinity {
    /// The engine's pins, unless `[affinity]` is off.
    pub(crate) fn new(settings: &Settings, shared: Option<Arc<SharedState>>) -> Option<Self> {
        settings.affinity.enabled.then(|| Self {
            settings: settings.affinity.clone(),
            local: Mutex::new(HashMap::with_hasher(KeyHashing::new())),
            shared,
        })
    }

    /// The pin of session `key`: Redis's when it answers, else this
    /// process's.
    pub(crate) async fn find(&self, key: &SessionKey, now: Instant) -> Found {
        if let Some(shared) = &self.shared {
            let k = redis_key(key);
            let got = shared
                .call(|mut c| async move { c.get::<_, Option<String>>(k).await })
                .await;
            if let Some(pin) = got.flatten().as_deref().and_then(parse) {
                return Found {
                    pin: Some(pin),
                    expired: false,
                };
            }
        }
        self.find_here(key, now)
    }

    /// Whether the pins are this process's alone (no Redis): a lookup
    /// then waits on nothing.
    pub(crate) fn is_local(&self) -> bool {
        self.shared.is_none()
    }

    /// The pin of session `key` this process holds.
    pub(crate) fn find_here(&self, key: &SessionKey, now: Instant) -> Found {
        let mut local = self.lock();
        match local.get(key) {
            Some(held) if held.until > now => Found {
                pin: Some(held.pin.clone()),
                expired: false,
            },
            Some(_) => {
                local.remove(key);
                Found {
                    pin: None,
                    expired: true,
                }
            }
            None => Found::default(),
        }
    }

    /// Pins session `key` to `pin` for `ttl` here; the fleet's write, when
    /// there is Redis, is returned to be awaited (or spawned).
    pub(crate) fn keep(
        &self,
        key: SessionKey,
        pin: Pin,
        ttl: Duration,
        now: Instant,
    ) -> Option<PinWrite> {
        let ttl = ttl.min(understudy_settings::MAX_CACHE_TTL);
        // The fleet's copy, made only where there is a fleet.
        let value = self.shared.as_ref().map(|_| {
            format!(
                "{}\n{}\n{}\n{}",
                pin.cached,
                pin.class.as_str(),
                pin.target.provider,
                pin.target.model
            )
        });
        {
            let mut local = self.lock();
            let max = self.settings.max_sessions;
            if local.len() >= max && !local.contains_key(&key) {
                local.retain(|_, held| held.until > now);
                if local.len() >= max {
                    // Still full of live pins: a sixteenth of them goes
                    // (whichever come first), so the newest session is kept
                    // and the next inserts do not sweep the map again.
                    let gone: Vec<SessionKey> = local.keys().take(max / 16 + 1).copied().collect();
                    for k in gone {
                        local.remove(&k);
                    }
                }
            }
            local.insert(
                key,
                Held {
                    pin,
                    until: now.checked_add(ttl).unwrap_or(now),
                },
            );
        }
        Some(PinWrite {
            shared: Arc::clone(self.shared.as_ref()?),
            key: redis_key(&key),
            value: value?,
            ms: ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, Held, KeyHashing>> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pin on its way to the fleet.
pub(crate) struct PinWrite {
    shared: Arc<SharedState>,
    key: String,
    value: String,
    ms: u64,
}

impl PinWrite {
    /// Writes the pin (bounded; a broken Redis only degrades).
    pub(crate) async fn write(self) {
        let Self {
            shared,
            key,
            value,
            ms,
        } = self;
        shared
            .call(|mut c| async move { c.pset_ex::<_, _, ()>(key, value, ms).await })
            .await;
    }
}

/// A pin as Redis holds it.
fn parse(value: &str) -> Option<Pin> {
    let mut parts = value.splitn(4, '\n');
    let cached = parts.next()?.parse().ok()?;
    let class = parts.next()?;
    let class = CLASSES.into_iter().find(|c| c.as_str() == class)?;
    let provider = parts.next()?;
    let model = parts.next()?;
    Some(Pin {
        target: Target::new(provider, model),
        cached,
        class,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_reads_back_as_written() {
        let pin = Pin {
            target: Target::new("bedrock", "anthropic.claude-sonnet-4-5"),
            cached: 12_345,
            class: TtlClass::OneHour,
        };
        let value = format!(
            "{}\n{}\n{}\n{}",
            pin.cached,
            pin.class.as_str(),
            pin.target.provider,
            pin.target.model
        );
        assert_eq!(parse(&value), Some(pin));
        assert_eq!(parse("x\n5m\np\nm"), None);
        assert_eq!(parse("1\nweekly\np\nm"), None);
    }
}
