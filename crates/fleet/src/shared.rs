//! Shared state for a fleet of instances behind one Redis (`REDIS_URL`):
//! circuit breakers, the fleet-wide half-open probe, and the fallback spend.
//! Redis is the only shared state; there is no home-made clustering.
//!
//! Redis trouble never fails a request: every call is bounded
//! ([`CALL_TIMEOUT`]), a failure makes the caller use its local state, the
//! degradation is logged once and shown as `understudy_redis_degraded`, and
//! the next call after a second tries again.
//!
//! Keys (Cluster-ready: keys used together share a hash tag):
//! - `understudy:{breaker:<provider>:<model>}:open` — String, the Unix ms
//!   until which the target is open; `PX` = the cooldown plus ten minutes
//!   (a lapsed deadline means "being probed"; only deletion means
//!   "recovered").
//! - `understudy:{breaker:<provider>:<model>}:probe` — String, the instance
//!   holding the half-open probe; `SET NX PX` = the cooldown.
//! - `understudy:{budget}:spend:<window id>` — String (float), USD spent by
//!   fallback targets in that window; `INCRBYFLOAT`, expires after two
//!   windows.
//! - `understudy:{key:<provider>:<key id>}:out` — String, `<Unix ms>
//!   <failure code>`: a pool's key is out (refused, rate limited, its
//!   budget spent) until then; `PX` = until then (an expired key is back).
//!   The key id is derived from the key's secret
//!   (the engine's `key_pools::key_id`): the same on every instance, whatever
//!   the key's name or place in its pool, and through a reload.
//! - `understudy:{session:<key>}:pin` — String, a session's pin (its
//!   target and the prefix its cache holds); `PX` = the cache's lifetime
//!   (written and read by the engine's `affinity`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use understudy_types::target::Target;

use understudy_record::sink::metrics::Metrics;

use crate::redis_link::RedisLink;

/// Every shared-state call is bounded by this.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(250);

/// How long an open key is kept after its deadline lapses (see
/// [`SharedState::publish_open`]).
pub const LAPSED_KEEP: Duration = Duration::from_secs(600);

/// How often an instance reads the fleet's breakers.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// The fleet's shared state, through Redis.
pub struct SharedState {
    link: RedisLink,
    /// Names this instance in probe locks.
    instance: String,
    metrics: Arc<Metrics>,
    degraded: AtomicBool,
    /// The last call's outcome (a [`Reach`] as `u8`) and when it came
    /// (Unix ms; 0: no call yet), for readiness to read without a round
    /// trip of its own while calls are frequent (the breaker poller makes
    /// one every [`POLL_EVERY`]).
    last_reach: AtomicU8,
    last_reach_ms: AtomicU64,
}

/// Whether Redis answered the last call, and if not, how it failed: a
/// short reason that names no address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reach {
    Reachable = 0,
    CannotConnect = 1,
    TimedOut = 2,
    Failed = 3,
}

/// How recent the last call's outcome must be for readiness to take it
/// as Redis's state without a `PING` of its own.
pub const REACH_FRESH: Duration = Duration::from_secs(1);

impl std::fmt::Debug for SharedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedState")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

pub use understudy_record::event::unix_ms;

fn open_key(t: &Target) -> String {
    format!("understudy:{{breaker:{}:{}}}:open", t.provider, t.model)
}

fn probe_key(t: &Target) -> String {
    format!("understudy:{{breaker:{}:{}}}:probe", t.provider, t.model)
}

/// Sets a key's "out until" unless the fleet already holds it out longer
/// (an instance that saw a shorter wait does not cut short another's).
const KEY_OUT_SCRIPT: &str = "local v = redis.call('GET', KEYS[1]) \
    if v and tonumber(string.match(v, '^%d+')) >= tonumber(ARGV[2]) then return 0 end \
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) return 1";

fn key_out_key(provider: &str, key: &str) -> String {
    format!("understudy:{{key:{provider}:{key}}}:out")
}

fn spend_key(window: u64) -> String {
    format!("understudy:{{budget}}:spend:{window}")
}

impl SharedState {
    pub fn new(client: redis::Client, metrics: Arc<Metrics>) -> Self {
        Self {
            link: RedisLink::new(client),
            instance: understudy_record::new_request_id().to_string(),
            metrics,
            degraded: AtomicBool::new(false),
            last_reach: AtomicU8::new(Reach::Reachable as u8),
            last_reach_ms: AtomicU64::new(0),
        }
    }

    /// Whether Redis is reachable: the last call's outcome when it is at
    /// most [`REACH_FRESH`] old, else that of a `PING` (bounded by
    /// [`CALL_TIMEOUT`]; at once while the link waits to reconnect).
    pub async fn reach(&self) -> Reach {
        let age = unix_ms().saturating_sub(self.last_reach_ms.load(Ordering::Relaxed));
        if age > REACH_FRESH.as_millis() as u64 {
            self.call(|mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await })
                .await;
        }
        Reach::from_u8(self.last_reach.load(Ordering::Relaxed))
    }

    fn reached(&self, reach: Reach) {
        self.last_reach.store(reach as u8, Ordering::Relaxed);
        self.last_reach_ms.store(unix_ms(), Ordering::Relaxed);
    }

    /// Runs one bounded Redis call; `None` means "use local state".
    pub async fn call<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: FnOnce(redis::aio::MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let Some(conn) = self.link.conn().await else {
            self.reached(Reach::CannotConnect);
            self.degrade("cannot connect");
            return None;
        };
        match tokio::time::timeout(CALL_TIMEOUT, f(conn)).await {
            Ok(Ok(v)) => {
                self.reached(Reach::Reachable);
                self.recover();
                Some(v)
            }
            Ok(Err(e)) => {
                self.reached(Reach::Failed);
                self.link.broken();
                self.degrade(&e.to_string());
                None
            }
            Err(_) => {
                self.reached(Reach::TimedOut);
                self.link.broken();
                self.degrade("timed out");
                None
            }
        }
    }

    fn degrade(&self, why: &str) {
        if !self.degraded.swap(true, Ordering::Relaxed) {
            self.metrics.redis_degraded.set(1);
            tracing::warn!(error = %why, "Redis unreachable: breakers and spend use local state until it is back");
        }
    }

    fn recover(&self) {
        if self.degraded.swap(false, Ordering::Relaxed) {
            self.metrics.redis_degraded.set(0);
            tracing::info!("Redis is back: breakers and spend are shared again");
        }
    }

    /// Announces that `target` opened until `until_ms` (Unix ms). Tried a
    /// few times while Redis is briefly unreachable (the deadline bounds how
    /// stale a late announcement can be).
    pub async fn publish_open(&self, target: &Target, until_ms: u64) {
        for _ in 0..3 {
            let left = until_ms.saturating_sub(unix_ms());
            if left == 0 {
                return;
            }
            // The key outlives the cooldown: a lapsed deadline means "being
            // probed", while only a deleted key means "recovered" (an expiry
            // must not read as a recovery to the other instances).
            let ttl = left + LAPSED_KEEP.as_millis() as u64;
            let key = open_key(target);
            if self
                .call(|mut c| async move { c.pset_ex::<_, _, ()>(key, until_ms, ttl).await })
                .await
                .is_some()
            {
                return;
            }
            tokio::time::sleep(crate::redis_link::RETRY_EVERY).await;
        }
    }

    /// Announces that `target` recovered.
    pub async fn publish_closed(&self, target: &Target) {
        for _ in 0..3 {
            let keys = [open_key(target), probe_key(target)];
            if self
                .call(|mut c| async move { c.del::<_, ()>(&keys).await })
                .await
                .is_some()
            {
                return;
            }
            tokio::time::sleep(crate::redis_link::RETRY_EVERY).await;
        }
    }

    /// Takes the fleet's one half-open probe of `target` for `cooldown`.
    /// Without Redis, every instance probes on its own (local breakers).
    pub async fn try_probe(&self, target: &Target, cooldown: Duration) -> bool {
        let key = probe_key(target);
        let instance = self.instance.clone();
        let ms = cooldown.as_millis().max(1) as u64;
        let taken = self
            .call(|mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(instance)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async::<Option<String>>(&mut c)
                    .await
            })
            .await;
        match taken {
            Some(reply) => reply.is_some(),
            None => true,
        }
    }

    /// For each target, the Unix ms until which the fleet holds it open.
    pub async fn open_targets(&self, targets: &[Target]) -> Option<Vec<Option<u64>>> {
        if targets.is_empty() {
            return Some(Vec::new());
        }
        let keys: Vec<String> = targets.iter().map(open_key).collect();
        self.call(|mut c| async move {
            redis::cmd("MGET")
                .arg(keys)
                .query_async::<Vec<Option<u64>>>(&mut c)
                .await
        })
        .await
    }

    /// Announces that `provider`'s key `key` (its id: see
    /// the engine's `key_pools::key_id`) is out until `until_ms` (Unix ms), for
    /// `code`. Tried a few times while Redis is briefly
    /// unreachable; the deadline bounds how stale it can be.
    pub async fn publish_key_out(&self, provider: &str, key: &str, until_ms: u64, code: &str) {
        for _ in 0..3 {
            let left = until_ms.saturating_sub(unix_ms());
            if left == 0 {
                return;
            }
            let (name, value) = (key_out_key(provider, key), format!("{until_ms} {code}"));
            if self
                .call(|mut c| async move {
                    redis::cmd("EVAL")
                        .arg(KEY_OUT_SCRIPT)
                        .arg(1)
                        .arg(name)
                        .arg(value)
                        .arg(until_ms)
                        .arg(left)
                        .query_async::<i64>(&mut c)
                        .await
                })
                .await
                .is_some()
            {
                return;
            }
            tokio::time::sleep(crate::redis_link::RETRY_EVERY).await;
        }
    }

    /// For each (provider, key id), until when the fleet holds it out (Unix
    /// ms) and why.
    pub async fn keys_out(
        &self,
        keys: &[(Arc<str>, Arc<str>)],
    ) -> Option<Vec<Option<(u64, String)>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        let names: Vec<String> = keys.iter().map(|(p, k)| key_out_key(p, k)).collect();
        let values = self
            .call(|mut c| async move {
                redis::cmd("MGET")
                    .arg(names)
                    .query_async::<Vec<Option<String>>>(&mut c)
                    .await
            })
            .await?;
        Some(
            values
                .into_iter()
                .map(|v| {
                    let v = v?;
                    let (ms, code) = v.split_once(' ')?;
                    Some((ms.parse().ok()?, code.to_owned()))
                })
                .collect(),
        )
    }

    /// USD spent by fallbacks in `window` across the fleet.
    pub async fn spent(&self, window: u64) -> Option<f64> {
        let key = spend_key(window);
        self.call(|mut c| async move { c.get::<_, Option<f64>>(key).await })
            .await
            .map(|v| v.unwrap_or(0.0))
    }

    /// Adds to the fleet's fallback spend of `window`.
    pub async fn add_spend(&self, window: u64, usd: f64, window_len: Duration) {
        let key = spend_key(window);
        let expire = (window_len.as_secs() * 2).max(2) as i64;
        self.call(|mut c| async move {
            redis::pipe()
                .atomic()
                .cmd("INCRBYFLOAT")
                .arg(&key)
                .arg(usd)
                .ignore()
                .cmd("EXPIRE")
                .arg(&key)
                .arg(expire)
                .ignore()
                .query_async::<()>(&mut c)
                .await
        })
        .await;
    }
}

// === impl Reach ===

impl Reach {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Reachable,
            1 => Self::CannotConnect,
            2 => Self::TimedOut,
            _ => Self::Failed,
        }
    }

    /// Why Redis cannot be reached, in a few words (`None`: it can).
    pub fn problem(self) -> Option<&'static str> {
        match self {
            Self::Reachable => None,
            Self::CannotConnect => Some("Redis unreachable: cannot connect"),
            Self::TimedOut => Some("Redis unreachable: a call timed out"),
            Self::Failed => Some("Redis unreachable: a call failed"),
        }
    }
}
