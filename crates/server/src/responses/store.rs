//! Stored responses (`store`, the API's default): each response with every
//! item before its output (earlier turns and its own input), so that
//! `previous_response_id` continues the conversation on whichever target
//! serves next — a different provider, or another instance of a fleet.
//!
//! In memory, bounded by [`MEMORY_BYTES`] (the oldest go first); in Redis
//! with a TTL of [`REDIS_TTL`] too when `REDIS_URL` is set, so that every
//! instance sees every response. Redis is asked first and every call is
//! bounded ([`REDIS_TIMEOUT`]); when it fails or is down, the instance's
//! memory answers. A response belongs to the client key that created it:
//! another key gets "not found", as if it did not exist.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::ClientTag;
use understudy_core::redis_link::RedisLink;

/// What the memory tier holds at most, in bytes of JSON.
pub(crate) const MEMORY_BYTES: usize = 64 * 1024 * 1024;

/// How long Redis keeps a stored response.
pub(crate) const REDIS_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long one Redis call may take before the memory tier answers.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_millis(500);

/// The longest response id looked up (the gateway's are 37 bytes).
const MAX_ID_BYTES: usize = 128;

/// One stored response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stored {
    /// Who created it (see [`owner_of`]).
    pub owner: String,
    /// Every item before the response's output: the earlier turns', then
    /// this request's input.
    pub context: Vec<Value>,
    /// Where this request's input begins in `context`.
    pub input_start: usize,
    /// The `response` object as the client got it.
    pub response: Value,
    /// The session its request named (a header, `prompt_cache_key`), which
    /// a turn continuing it with `previous_response_id` inherits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// The store of one server.
pub(crate) struct ResponseStore {
    memory: Mutex<Memory>,
    redis: Option<RedisLink>,
}

#[derive(Default)]
struct Memory {
    entries: HashMap<String, (Arc<Stored>, usize)>,
    order: VecDeque<String>,
    bytes: usize,
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("redis", &self.redis.is_some())
            .finish_non_exhaustive()
    }
}

/// The owner of a stored response: derived from the [`ClientTag`] the
/// auth middleware computed for the request's key (never the key itself;
/// empty for an open gateway's requests).
pub(crate) fn owner_of(client: Option<ClientTag>) -> String {
    match client {
        None => String::new(),
        Some(tag) => blake3::derive_key("understudy 2026-12 responses owner", tag.as_bytes())
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect(),
    }
}

fn redis_key(id: &str) -> String {
    format!("understudy:responses:{id}")
}

// === impl ResponseStore ===

impl ResponseStore {
    /// A store in memory, and in Redis at `redis_url` when given.
    pub(crate) fn new(redis_url: Option<&str>) -> Self {
        let redis = redis_url.and_then(|url| match redis::Client::open(url) {
            Ok(client) => Some(RedisLink::new(client)),
            Err(e) => {
                tracing::warn!(error = %e, "stored responses stay in memory: REDIS_URL does not parse");
                None
            }
        });
        Self {
            memory: Mutex::new(Memory::default()),
            redis,
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps `stored` as response `id` (in memory at once, then in Redis
    /// within the bound).
    pub(crate) async fn put(&self, id: &str, stored: Stored) {
        let Ok(json) = serde_json::to_string(&stored) else {
            return;
        };
        self.memory()
            .insert(id.to_owned(), Arc::new(stored), json.len());
        let Some(link) = &self.redis else {
            return;
        };
        let Some(mut conn) = link.conn().await else {
            return;
        };
        let set = conn.set_ex::<_, _, ()>(redis_key(id), json, REDIS_TTL.as_secs());
        if !matches!(tokio::time::timeout(REDIS_TIMEOUT, set).await, Ok(Ok(()))) {
            link.broken();
        }
    }

    /// Response `id` if `owner` created it.
    pub(crate) async fn get(&self, id: &str, owner: &str) -> Option<Arc<Stored>> {
        // No id the gateway makes is longer; a client's longer string is
        // not looked up anywhere.
        if id.len() > MAX_ID_BYTES {
            return None;
        }
        let found = match self.redis_get(id).await {
            Some(s) => Some(s),
            None => self.memory().entries.get(id).map(|(s, _)| Arc::clone(s)),
        };
        found.filter(|s| s.owner == owner)
    }

    async fn redis_get(&self, id: &str) -> Option<Arc<Stored>> {
        let link = self.redis.as_ref()?;
        let mut conn = link.conn().await?;
        let got: Option<String> =
            match tokio::time::timeout(REDIS_TIMEOUT, conn.get(redis_key(id))).await {
                Ok(Ok(v)) => v,
                _ => {
                    link.broken();
                    return None;
                }
            };
        serde_json::from_str(&got?).ok().map(Arc::new)
    }

    /// Deletes response `id` if `owner` created it; whether it did.
    pub(crate) async fn delete(&self, id: &str, owner: &str) -> bool {
        if self.get(id, owner).await.is_none() {
            return false;
        }
        self.memory().remove(id);
        if let Some(link) = &self.redis {
            if let Some(mut conn) = link.conn().await {
                let del = conn.del::<_, ()>(redis_key(id));
                if !matches!(tokio::time::timeout(REDIS_TIMEOUT, del).await, Ok(Ok(()))) {
                    link.broken();
                }
            }
        }
        true
    }
}

// === impl Memory ===

impl Memory {
    fn insert(&mut self, id: String, stored: Arc<Stored>, bytes: usize) {
        if bytes > MEMORY_BYTES {
            return;
        }
        self.remove(&id);
        while self.bytes + bytes > MEMORY_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, b)) = self.entries.remove(&oldest) {
                self.bytes -= b;
            }
        }
        self.bytes += bytes;
        self.order.push_back(id.clone());
        self.entries.insert(id, (stored, bytes));
    }

    fn remove(&mut self, id: &str) {
        if let Some((_, b)) = self.entries.remove(id) {
            self.bytes -= b;
            self.order.retain(|o| o != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(owner: &str) -> Stored {
        Stored {
            owner: owner.to_owned(),
            context: Vec::new(),
            input_start: 0,
            response: Value::Null,
            session: None,
        }
    }

    #[tokio::test]
    async fn owners_see_only_their_own() {
        let store = ResponseStore::new(None);
        store.put("resp_1", stored("a")).await;
        assert!(store.get("resp_1", "a").await.is_some());
        assert!(store.get("resp_1", "b").await.is_none());
        assert!(!store.delete("resp_1", "b").await);
        assert!(store.delete("resp_1", "a").await);
        assert!(store.get("resp_1", "a").await.is_none());
    }

    #[test]
    fn memory_is_bounded() {
        let mut m = Memory::default();
        for i in 0..10 {
            m.insert(format!("r{i}"), Arc::new(stored("")), MEMORY_BYTES / 4);
        }
        assert!(m.bytes <= MEMORY_BYTES);
        assert_eq!(m.entries.len(), 4);
        assert!(m.entries.contains_key("r9") && !m.entries.contains_key("r5"));
        let tag = ClientTag::of_key;
        assert_eq!(owner_of(Some(tag("k"))), owner_of(Some(tag("k"))));
        assert_ne!(owner_of(Some(tag("k"))), owner_of(Some(tag("j"))));
        assert_eq!(owner_of(None), "");
    }
}
