//! The response cache for non-streamed requests: key = a stable 128-bit
//! hash of the normalised request, its route (the plan's targets) and its
//! refusal policy; TTL from `[cache] ttl`. In memory (bounded, sharded so
//! requests do not queue on one lock) by default; in Redis when `REDIS_URL`
//! is set, so that every instance shares it. Redis trouble never fails a
//! request: a lookup that errors or times out is a miss, a write that fails
//! is dropped, and the memory cache serves meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use std::sync::Arc;

use redis::AsyncCommands;
use tokio::time::Instant;

use crate::chat::{ChatRequest, Part, ResponseFormat, Tool, ToolChoice};
use crate::generation::Generation;
use crate::policy::plan::Target;
use crate::policy::refusal::RefusalPolicy;
use crate::redis_link::RedisLink;
use crate::settings::CacheSettings;

/// How long a Redis cache lookup may take before it counts as a miss.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

const SHARDS: usize = 16;

/// A cache key: 128 bits of FNV-1a over the normalised request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey(u128);

/// The response cache.
pub(crate) struct ResponseCache {
    settings: CacheSettings,
    shards: Vec<Mutex<Shard>>,
    redis: Option<Arc<RedisCache>>,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<CacheKey, (Instant, Generation)>,
    order: VecDeque<CacheKey>,
}

struct RedisCache {
    link: RedisLink,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("redis", &self.redis.is_some())
            .finish_non_exhaustive()
    }
}

/// The request fields beyond the conversation and the basic sampling
/// settings, borrowed, for the key.
#[derive(serde::Serialize)]
struct Extras<'a> {
    tools: &'a [Tool],
    tool_choice: &'a Option<ToolChoice>,
    parallel_tool_calls: Option<bool>,
    response_format: &'a Option<ResponseFormat>,
    top_p: Option<f32>,
    seed: Option<i64>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    user: &'a Option<String>,
}

impl Extras<'_> {
    /// Whether the request sets any of them.
    fn any(&self) -> bool {
        !self.tools.is_empty()
            || self.tool_choice.is_some()
            || self.parallel_tool_calls.is_some()
            || self.response_format.is_some()
            || self.top_p.is_some()
            || self.seed.is_some()
            || self.presence_penalty.is_some()
            || self.frequency_penalty.is_some()
            || self.user.is_some()
    }
}

impl CacheKey {
    pub(crate) fn new(chat: &ChatRequest, targets: &[Target], policy: RefusalPolicy) -> Self {
        let mut h = Fnv128::new();
        h.write_str(chat.system.as_deref().unwrap_or_default());
        h.write_u8(u8::from(chat.system.is_some()));
        for m in &chat.messages {
            h.write_u8(m.role as u8);
            for p in &m.content {
                match p {
                    Part::Text { text } => {
                        h.write_u8(0);
                        h.write_str(text);
                    }
                    Part::Image { url, detail } => {
                        h.write_u8(1);
                        h.write_str(url);
                        h.write_str(detail.as_deref().unwrap_or_default());
                    }
                }
            }
            for call in &m.tool_calls {
                h.write_u8(2);
                h.write_str(&call.id);
                h.write_str(&call.name);
                h.write_str(&call.arguments);
            }
            if let Some(id) = &m.tool_call_id {
                h.write_u8(3);
                h.write_str(id);
            }
        }
        // Every other field that shapes the answer (tools, tool choice,
        // response format, sampling): hashed from its JSON, and only when
        // the request sets one, so a plain request pays nothing for them.
        // A natively forwarded body carries what the neutral fields cannot
        // (thinking, cache markers, betas): it is part of the key.
        if let Some(native) = &chat.native {
            h.write_str(&native.body);
            for (k, v) in &native.headers {
                h.write_str(k);
                h.write_str(v);
            }
        }
        let extras = Extras {
            tools: &chat.tools,
            tool_choice: &chat.tool_choice,
            parallel_tool_calls: chat.parallel_tool_calls,
            response_format: &chat.response_format,
            top_p: chat.top_p,
            seed: chat.seed,
            presence_penalty: chat.presence_penalty,
            frequency_penalty: chat.frequency_penalty,
            user: &chat.user,
        };
        if extras.any() {
            h.write_str(&serde_json::to_string(&extras).unwrap_or_default());
        }
        match chat.temperature {
            Some(t) => h.write_str(&format!("t{t}")),
            None => h.write_str("t-"),
        }
        h.write_str(&format!("m{:?}", chat.max_tokens));
        for s in &chat.stop {
            h.write_str(s);
        }
        for t in targets {
            h.write_str(&t.provider);
            h.write_str(&t.model);
        }
        h.write_str(policy.as_str());
        Self(h.0)
    }

    fn redis_key(self) -> String {
        format!("understudy:cache:{:032x}", self.0)
    }
}

impl ResponseCache {
    pub(crate) fn new(settings: CacheSettings, redis: Option<redis::Client>) -> Self {
        Self {
            settings,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
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

    fn shard(&self, key: CacheKey) -> &Mutex<Shard> {
        &self.shards[(key.0 as usize) % SHARDS]
    }

    /// The cached generation for `key`, if fresh.
    pub(crate) async fn get(&self, key: CacheKey) -> Option<Generation> {
        if let Some(redis) = &self.redis {
            if let Some(g) = redis.get(key).await {
                return Some(g);
            }
        }
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match shard.entries.get(&key) {
            Some((at, g)) if at.elapsed() < self.settings.ttl => Some(g.clone()),
            Some(_) => {
                shard.entries.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Stores a generation (in Redis without waiting for it).
    pub(crate) fn put(&self, key: CacheKey, g: &Generation) {
        if let Some(redis) = &self.redis {
            redis.put(key, g, self.settings.ttl);
        }
        if self.settings.max_entries == 0 {
            return;
        }
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let per_shard = self.settings.max_entries.div_ceil(SHARDS);
        if shard
            .entries
            .insert(key, (Instant::now(), g.clone()))
            .is_none()
        {
            shard.order.push_back(key);
        }
        while shard.entries.len() > per_shard {
            match shard.order.pop_front() {
                Some(old) => {
                    shard.entries.remove(&old);
                }
                None => break,
            }
        }
    }
}

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

/// FNV-1a, 128 bits: stable across processes and versions, which a shared
/// cache key needs (std's hasher promises neither).
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn write_u8(&mut self, b: u8) {
        self.0 ^= u128::from(b);
        self.0 = self.0.wrapping_mul(Self::PRIME);
    }

    /// Length-prefixed, so ("ab","c") and ("a","bc") differ.
    fn write_str(&mut self, s: &str) {
        for b in (s.len() as u64).to_le_bytes() {
            self.write_u8(b);
        }
        for b in s.bytes() {
            self.write_u8(b);
        }
    }
}
