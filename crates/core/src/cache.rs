//! The response cache for non-streamed requests.
//!
//! The key is BLAKE3 over one canonical serialization (JSON, written
//! straight into the hasher) of everything that shapes the answer: the
//! API the request came through, its route or pin, its refusal policy, the
//! plan's targets (provider and model), every neutral request field a
//! target receives, and a natively forwarded body with its headers and
//! query. A collision would serve one client's answer to another's
//! question, so the hash is a cryptographic one, and JSON (field names,
//! escaped strings) keeps two different requests from serializing alike.
//!
//! Entries belong to the client key that stored them: the key of a request
//! made with a client key includes that key's [`ClientTag`], so no other
//! key reads it, unless the operator sets `[cache] shared = true`.
//!
//! In memory (a `quick_cache` sharded cache bounded by `[cache]
//! max_entries`, TTL checked on read) by default; in Redis too when
//! `REDIS_URL` is set, so that every instance shares it. Redis trouble
//! never fails a request: a lookup that errors or times out is a miss, a
//! write that fails is dropped, and the memory cache serves meanwhile.

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use serde::Serialize;
use tokio::time::Instant;
use understudy_settings::CacheSettings;
use understudy_types::Target;
use understudy_types::chat::ChatRequest;
use understudy_types::protocol::Protocol;
use understudy_types::refusal::RefusalPolicy;

use crate::generation::{ClientTag, Generation};
use crate::redis_link::RedisLink;

/// How long a Redis cache lookup may take before it counts as a miss.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

/// The version of the key's material: bumped whenever what goes into it
/// changes, so that a fleet mid-upgrade never reads an entry keyed the
/// old way as a new one.
const KEY_VERSION: u32 = 2;

/// A cache key: the 256-bit BLAKE3 hash of the request's key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey([u8; 32]);

/// What a request is, for the cache: everything but the request itself
/// that shapes its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyContext<'a> {
    pub api: Option<Protocol>,
    /// The route or pin as the client named it (`default`, a route name,
    /// `provider:model`).
    pub route: &'a str,
    pub policy: RefusalPolicy,
    /// The plan's targets, in order.
    pub targets: &'a [Target],
    /// The client key the request came with.
    pub client: Option<ClientTag>,
}

/// The response cache.
pub(crate) struct ResponseCache {
    settings: CacheSettings,
    /// `None` when `[cache] max_entries = 0`.
    memory: Option<quick_cache::sync::Cache<CacheKey, Arc<Entry>>>,
    redis: Option<Arc<RedisCache>>,
}

/// A stored answer and when it was stored.
struct Entry {
    at: Instant,
    generation: Generation,
}

struct RedisCache {
    link: RedisLink,
}

/// Whose entries a key belongs to.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Scope<'a> {
    /// Every client (`[cache] shared = true`).
    Shared,
    /// Requests made without a client key (an open gateway).
    Open,
    /// One client key, by its tag.
    Client(&'a [u8; 32]),
}

/// The key's material, serialized once into the hasher.
#[derive(Serialize)]
struct Material<'a> {
    version: u32,
    scope: Scope<'a>,
    #[serde(with = "understudy_types::protocol::api_serde")]
    api: Option<Protocol>,
    route: &'a str,
    policy: &'a str,
    targets: Vec<(&'a str, &'a str)>,
    chat: &'a ChatRequest,
    native: Option<Native<'a>>,
    native_only: Option<&'a str>,
}

/// A natively forwarded body, as the target of its protocol receives it.
#[derive(Serialize)]
struct Native<'a> {
    kind: understudy_types::protocol::Protocol,
    body: &'a str,
    headers: &'a [(String, String)],
    query: Option<&'a str>,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("redis", &self.redis.is_some())
            .finish_non_exhaustive()
    }
}

// === impl CacheKey ===

impl CacheKey {
    /// The key of `chat` in `ctx`, with the scope `shared` says. `None`
    /// only if the request cannot be serialized (then it is not cached).
    pub(crate) fn new(chat: &ChatRequest, ctx: &KeyContext<'_>, shared: bool) -> Option<Self> {
        let scope = match (shared, &ctx.client) {
            (true, _) => Scope::Shared,
            (false, None) => Scope::Open,
            (false, Some(tag)) => Scope::Client(tag.as_bytes()),
        };
        let material = Material {
            version: KEY_VERSION,
            scope,
            api: ctx.api,
            route: ctx.route,
            policy: ctx.policy.as_str(),
            targets: ctx
                .targets
                .iter()
                .map(|t| (&*t.provider, &*t.model))
                .collect(),
            chat,
            native: chat.native.as_deref().map(|n| Native {
                kind: n.kind,
                body: &n.body,
                headers: &n.headers,
                query: n.query.as_deref(),
            }),
            native_only: chat.native_only,
        };
        let mut hasher = blake3::Hasher::new();
        serde_json::to_writer(&mut hasher, &material).ok()?;
        Some(Self(*hasher.finalize().as_bytes()))
    }

    fn redis_key(self) -> String {
        format!(
            "understudy:cache:v{KEY_VERSION}:{}",
            blake3::Hash::from_bytes(self.0).to_hex()
        )
    }
}

// === impl ResponseCache ===

impl ResponseCache {
    pub(crate) fn new(settings: CacheSettings, redis: Option<redis::Client>) -> Self {
        Self {
            memory: (settings.max_entries > 0)
                .then(|| quick_cache::sync::Cache::new(settings.max_entries)),
            settings,
            redis: redis.map(|client| {
                Arc::new(RedisCache {
                    link: RedisLink::new(client),
                })
            }),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// The key of `chat` in `ctx` under this cache's sharing setting.
    pub(crate) fn key(&self, chat: &ChatRequest, ctx: &KeyContext<'_>) -> Option<CacheKey> {
        CacheKey::new(chat, ctx, self.settings.shared)
    }

    /// The cached generation for `key`, if fresh.
    pub(crate) async fn get(&self, key: CacheKey) -> Option<Generation> {
        if let Some(redis) = &self.redis {
            if let Some(g) = redis.get(key).await {
                return Some(g);
            }
        }
        let memory = self.memory.as_ref()?;
        let entry = memory.get(&key)?;
        if entry.at.elapsed() < self.settings.ttl {
            return Some(entry.generation.clone());
        }
        memory.remove(&key);
        None
    }

    /// Stores a generation (in Redis without waiting for it).
    pub(crate) fn put(&self, key: CacheKey, g: &Generation) {
        if let Some(redis) = &self.redis {
            redis.put(key, g, self.settings.ttl);
        }
        if let Some(memory) = &self.memory {
            let entry = Entry {
                at: Instant::now(),
                generation: g.clone(),
            };
            memory.insert(key, Arc::new(entry));
        }
    }
}

// === impl RedisCache ===

impl RedisCache {
    async fn get(&self, key: CacheKey) -> Option<Generation> {
        let mut conn = self.link.conn().await?;
        let got: Option<String> =
            match tokio::time::timeout(REDIS_TIMEOUT, conn.get(key.redis_key())).await {
                Ok(Ok(v)) => v,
                _ => {
                    self.link.broken();
                    return None;
                }
            };
        serde_json::from_str(&got?).ok()
    }

    fn put(self: &Arc<Self>, key: CacheKey, g: &Generation, ttl: Duration) {
        let Ok(json) = serde_json::to_string(g) else {
            return;
        };
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let Some(mut conn) = this.link.conn().await else {
                return;
            };
            let set = conn.set_ex::<_, _, ()>(key.redis_key(), json, ttl.as_secs().max(1));
            if !matches!(tokio::time::timeout(REDIS_TIMEOUT, set).await, Ok(Ok(()))) {
                this.link.broken();
            }
        });
    }
}

#[cfg(test)]
#[path = "cache/tests.rs"]
mod tests;
