//! One prober per fleet: a lease in Redis (`SET NX PX`, renewed each
//! round) whose value is a fencing token (the instance and a counter
//! only ever increased), and the results the holder publishes in a hash
//! that expires after a few intervals. A write is fenced: a holder whose
//! lease lapsed (paused, partitioned) cannot overwrite its successor's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use understudy_types::target::Target;

use super::board::Verdict;
use crate::shared::SharedState;

const LEASE_KEY: &str = "understudy:{probe}:lease";
const EPOCH_KEY: &str = "understudy:{probe}:epoch";
const RESULTS_KEY: &str = "understudy:{probe}:results";

/// Takes the lease when free: the token is the instance and the next
/// epoch, returned on success (nil when another instance holds it).
const TAKE: &str = "local e = redis.call('INCR', KEYS[2]) \
    local token = ARGV[1] .. ':' .. e \
    if redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then return token end \
    return false";

/// Renews the lease when `token` still holds it.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

/// Writes the results when `token` still holds the lease (fencing).
const PUBLISH: &str = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end \
    for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end \
    redis.call('PEXPIRE', KEYS[2], ARGV[2]) return 1";

/// One target's result as the fleet keeps it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    verdict: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// When it was found (Unix ms).
    at: u64,
}

/// This instance's side of the lease.
pub(super) struct Fleet {
    shared: Arc<SharedState>,
    instance: String,
    /// The token of the lease this instance holds, if it holds it.
    token: Option<String>,
}

/// A probe's result: the target, the verdict, the provider's words, when.
pub(crate) type Found = (Target, Verdict, Option<String>, u64);

/// A target's field in the results hash.
fn field(t: &Target) -> String {
    format!("{}:{}", t.provider, t.model)
}

impl Fleet {
    pub(super) fn new(shared: Arc<SharedState>) -> Self {
        Self {
            shared,
            instance: crate::generation::new_request_id().to_string(),
            token: None,
        }
    }

    /// Whether this instance holds the lease for `ttl` (renewed, or taken
    /// when free); `None` while Redis is unreachable.
    pub(super) async fn hold(&mut self, ttl: Duration) -> Option<bool> {
        let ms = ttl.as_millis().max(1) as u64;
        if let Some(token) = self.token.clone() {
            let renewed: i64 = self
                .shared
                .call(|mut c| async move {
                    redis::cmd("EVAL")
                        .arg(RENEW)
                        .arg(1)
                        .arg(LEASE_KEY)
                        .arg(token)
                        .arg(ms)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            if renewed == 1 {
                return Some(true);
            }
            self.token = None;
        }
        let instance = self.instance.clone();
        let taken: Option<String> = self
            .shared
            .call(|mut c| async move {
                redis::cmd("EVAL")
                    .arg(TAKE)
                    .arg(2)
                    .arg(LEASE_KEY)
                    .arg(EPOCH_KEY)
                    .arg(instance)
                    .arg(ms)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        self.token = taken;
        Some(self.token.is_some())
    }

    /// Publishes `found` for the fleet, kept for `ttl`, while this
    /// instance still holds the lease.
    pub(super) async fn publish(&self, found: &[Found], ttl: Duration) {
        let Some(token) = self.token.clone() else {
            return;
        };
        let mut script = redis::cmd("EVAL");
        script
            .arg(PUBLISH)
            .arg(2)
            .arg(LEASE_KEY)
            .arg(RESULTS_KEY)
            .arg(token)
            .arg(ttl.as_millis().max(1) as u64);
        for (target, verdict, detail, at) in found {
            let kept = Kept {
                verdict: verdict.code().to_owned(),
                detail: detail.clone(),
                at: *at,
            };
            let Ok(value) = serde_json::to_string(&kept) else {
                continue;
            };
            script.arg(field(target)).arg(value);
        }
        let _: Option<i64> = self
            .shared
            .call(|mut c| async move { script.query_async(&mut c).await })
            .await;
    }

    /// What the fleet's prober last found for each of `targets` that it
    /// has a result for; `None` while Redis is unreachable.
    pub(super) async fn results<'t>(
        &self,
        targets: impl Iterator<Item = &'t Target>,
    ) -> Option<Vec<Found>> {
        let all: HashMap<String, String> = self
            .shared
            .call(|mut c| async move {
                redis::cmd("HGETALL")
                    .arg(RESULTS_KEY)
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Some(
            targets
                .filter_map(|t| {
                    let kept: Kept = serde_json::from_str(all.get(&field(t))?).ok()?;
                    let verdict = Verdict::parse(&kept.verdict)?;
                    Some((t.clone(), verdict, kept.detail, kept.at))
                })
                .collect(),
        )
    }
}
