//! Client records and their counters across a fleet, in Redis, and the
//! routing table the admin API sets for every instance.
//!
//! Keys (those used together share a hash tag):
//! - `understudy:{client:<name>}:rpm:<minute>` and `…:tpm:<minute>` —
//!   String (integer), the requests and tokens of a UTC minute (Unix
//!   seconds / 60); expire after two minutes.
//! - `understudy:{client:<name>}:usd:<window>` — String (integer), the
//!   nano-USD spent in a budget window; expires a day after the window.
//! - `understudy:{clients}` — Hash, name → the admin API's record (JSON,
//!   the key as its SHA-256); `understudy:{clients}:version` — String,
//!   bumped on every change.
//! - `understudy:{routing}` — String, the routing table last set by the
//!   admin API (JSON); `understudy:{routing}:version` — bumped with it.
//!
//! The counters are kept as the rest of the fleet's state is: a Redis with
//! persistence (AOF) keeps them over a restart; while Redis is unreachable
//! every call returns `None` within [`crate::shared::CALL_TIMEOUT`] and the
//! caller counts locally.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::json;

use super::{Counts, Tenants};
use crate::actor::router::RouterMsg;
use crate::settings::{ClientRecord, RawClient, RoutingTable, RoutingUpdate, hex};
use crate::shared::SharedState;

/// How often an instance reads the fleet's records and routing.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Checks and reserves in one step. KEYS: requests, tokens, spend. ARGV:
/// rpm, tpm, budget (0: none, else one more than the nano-USD), the
/// estimate, the counters' lifetime (ms). Returns `{verdict, requests,
/// tokens, spent}` (the verdict codes of `verdict_of`).
const ADMIT: &str = r"
local r = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(redis.call('GET', KEYS[2]) or '0')
local u = tonumber(redis.call('GET', KEYS[3]) or '0')
local rpm, tpm, budget, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if budget > 0 and u >= budget - 1 then return {3, r, t, u} end
if rpm > 0 and r >= rpm then return {1, r, t, u} end
if tpm > 0 and t + est > tpm then return {2, r, t, u} end
r = redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
if est > 0 then
  t = redis.call('INCRBY', KEYS[2], est)
  if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
end
return {0, r, t, u}
";

/// Settles. KEYS: tokens, spend. ARGV: the tokens' change, the nano-USD
/// spent, the spend's lifetime (ms). A minute already gone is left alone.
const SETTLE: &str = r"
local d, c = tonumber(ARGV[1]), tonumber(ARGV[2])
if d ~= 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  if d < 0 and tonumber(redis.call('GET', KEYS[1])) + d < 0 then d = -tonumber(redis.call('GET', KEYS[1])) end
  redis.call('INCRBY', KEYS[1], d)
end
if c > 0 then
  redis.call('INCRBY', KEYS[2], c)
  if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
end
return 1
";

const MINUTE_KEEP_MS: u64 = 120_000;

fn key(name: &str, what: &str, id: u64) -> String {
    format!("understudy:{{client:{name}}}:{what}:{id}")
}

/// The spend's lifetime: to its window's end and a day more.
fn spend_keep_ms(record: &ClientRecord, now_ms: u64) -> u64 {
    let end = record.window.at(now_ms / 1000).1;
    (end * 1000).saturating_sub(now_ms) + 86_400_000
}

const RECORDS: &str = "understudy:{clients}";
const RECORDS_VERSION: &str = "understudy:{clients}:version";
const ROUTING: &str = "understudy:{routing}";
const ROUTING_VERSION: &str = "understudy:{routing}:version";

/// The fleet's check-and-reserve: the verdict code and the counts after
/// it; `None` while Redis is unreachable.
pub(super) async fn admit(
    shared: &SharedState,
    record: &ClientRecord,
    want: Counts,
    estimate: u64,
) -> Option<(u8, Counts)> {
    let name = &record.name;
    let keys = [
        key(name, "rpm", want.minute),
        key(name, "tpm", want.minute),
        key(name, "usd", want.window),
    ];
    let args = [
        record.rpm.unwrap_or(0),
        record.tpm.unwrap_or(0),
        record.budget_nanos.map_or(0, |b| b.saturating_add(1)),
        estimate,
        MINUTE_KEEP_MS,
    ];
    let reply: Vec<i64> = shared
        .call(|mut c| async move {
            redis::cmd("EVAL")
                .arg(ADMIT)
                .arg(3)
                .arg(&keys)
                .arg(&args)
                .query_async(&mut c)
                .await
        })
        .await?;
    let at = |i: usize| reply.get(i).map_or(0, |v| (*v).max(0) as u64);
    Some((
        at(0) as u8,
        Counts {
            requests: at(1),
            tokens: at(2),
            spent_nanos: at(3),
            ..want
        },
    ))
}

/// Adds a settled request's token change and spend to the fleet's counts;
/// `false`: Redis did not take them.
pub(super) async fn settle(
    shared: &SharedState,
    record: &ClientRecord,
    at: Counts,
    delta: i64,
    cost_nanos: u64,
) -> bool {
    let keys = [
        key(&record.name, "tpm", at.minute),
        key(&record.name, "usd", at.window),
    ];
    let keep = spend_keep_ms(record, crate::shared::unix_ms());
    let done = shared
        .call(|mut c| async move {
            redis::cmd("EVAL")
                .arg(SETTLE)
                .arg(2)
                .arg(&keys)
                .arg(delta)
                .arg(cost_nanos)
                .arg(keep)
                .query_async::<i64>(&mut c)
                .await
        })
        .await;
    if done.is_none() {
        tracing::debug!(client = %record.name, "a settlement did not reach Redis");
    }
    done.is_some()
}

/// A record as the fleet stores it: its fields, the key as its SHA-256.
fn stored(record: &ClientRecord) -> String {
    let view = record.view();
    json!({
        "name": view.name,
        "key_sha256": hex(&record.key_sha256),
        "budget_usd": view.budget_usd,
        "window": record.budget_nanos.map(|_| view.window),
        "rpm": view.rpm,
        "tpm": view.tpm,
        "models": (!view.models.is_empty()).then_some(view.models),
        "expires": view.expires,
    })
    .to_string()
}

/// Reads a stored record (`None`: not one this version can read).
fn read_stored(text: &str) -> Option<ClientRecord> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let object: serde_json::Map<String, serde_json::Value> = value
        .as_object()?
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let raw: RawClient = serde_json::from_value(object.into()).ok()?;
    raw.read("", &|_| None).ok()
}

/// Stores or deletes a record, bumping the version. KEYS: the records, the
/// version. ARGV: the name, the record (empty: delete), `1` when it must be
/// new. Returns 0 when a new record's name is taken.
const SAVE_RECORD: &str = r"
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('INCR', KEYS[2])
return 1
";

/// Stores the admin API's record (or, `None`, deletes `name`) for the
/// fleet; `new`: only if no instance has one of that name. `None`: Redis is
/// unreachable; `Some(false)`: the name is taken.
pub(crate) async fn publish_record(
    shared: &SharedState,
    name: &str,
    record: Option<&ClientRecord>,
    new: bool,
) -> Option<bool> {
    let (name, value) = (name.to_owned(), record.map(stored).unwrap_or_default());
    shared
        .call(|mut c| async move {
            redis::cmd("EVAL")
                .arg(SAVE_RECORD)
                .arg(2)
                .arg(RECORDS)
                .arg(RECORDS_VERSION)
                .arg(name)
                .arg(value)
                .arg(if new { "1" } else { "0" })
                .query_async::<i64>(&mut c)
                .await
        })
        .await
        .map(|saved| saved == 1)
}

/// Stores the routing table the admin API set, for the fleet.
pub(crate) async fn publish_routing(shared: &SharedState, table: &RoutingTable) -> bool {
    let Ok(text) = serde_json::to_string(table) else {
        return false;
    };
    shared
        .call(|mut c| async move {
            redis::pipe()
                .atomic()
                .set(ROUTING, text)
                .ignore()
                .incr(ROUTING_VERSION, 1)
                .ignore()
                .query_async::<()>(&mut c)
                .await
        })
        .await
        .is_some()
}

/// Keeps an instance's admin records and routing table the fleet's: reads
/// both versions every [`SYNC_EVERY`], and what changed.
pub(crate) struct FleetSync {
    pub shared: Arc<SharedState>,
    pub tenants: Arc<Tenants>,
    pub router: ActorRef<RouterMsg>,
    /// The versions last applied (`None`: nothing read yet).
    pub seen: (Option<i64>, Option<i64>),
}

impl FleetSync {
    /// Reads the fleet once: applies records and routing that changed.
    pub(crate) async fn sync(&mut self) {
        let versions = self
            .shared
            .call(|mut c| async move {
                redis::cmd("MGET")
                    .arg(RECORDS_VERSION)
                    .arg(ROUTING_VERSION)
                    .query_async::<(Option<i64>, Option<i64>)>(&mut c)
                    .await
            })
            .await;
        let Some((records, routing)) = versions else {
            return;
        };
        if records.is_some() && records != self.seen.0 && self.load_records().await {
            self.seen.0 = records;
        }
        if routing.is_some() && routing != self.seen.1 && self.load_routing().await {
            self.seen.1 = routing;
        }
    }

    async fn load_records(&self) -> bool {
        let all = self
            .shared
            .call(|mut c| async move {
                redis::cmd("HGETALL")
                    .arg(RECORDS)
                    .query_async::<HashMap<String, String>>(&mut c)
                    .await
            })
            .await;
        let Some(all) = all else {
            return false;
        };
        let records = all
            .iter()
            .filter_map(|(name, text)| {
                let record = read_stored(text);
                if record.is_none() {
                    tracing::warn!(client = %name, "a client record in Redis cannot be read; skipped");
                }
                record
            })
            .collect();
        self.tenants.set_admin_records(records);
        true
    }

    async fn load_routing(&self) -> bool {
        let text = self
            .shared
            .call(|mut c| async move {
                redis::cmd("GET")
                    .arg(ROUTING)
                    .query_async::<Option<String>>(&mut c)
                    .await
            })
            .await;
        let Some(text) = text else {
            return false;
        };
        let Some(table) = text.and_then(|t| serde_json::from_str::<RoutingTable>(&t).ok()) else {
            return true;
        };
        let update = RoutingUpdate {
            default: Some(table.default),
            order: Some(table.order),
            refusal_policy: Some(table.refusal_policy),
            routes: Some(table.routes),
        };
        let applied = self
            .router
            .call(
                |reply| RouterMsg::SetRouting { update, reply },
                Some(Duration::from_secs(5)),
            )
            .await;
        match applied {
            Ok(ractor::rpc::CallResult::Success(Ok(_))) => {
                tracing::info!("routing changed by the fleet's admin API");
            }
            Ok(ractor::rpc::CallResult::Success(Err(e))) => {
                tracing::warn!(error = %e, "the fleet's routing does not fit this instance's providers; kept its own");
            }
            _ => return false,
        }
        true
    }

    /// Syncs every [`SYNC_EVERY`] until `stop` turns true.
    pub(crate) async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(SYNC_EVERY) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            self.sync().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_record_reads_back_the_same() {
        let raw = RawClient {
            name: Some("team-b".into()),
            key: Some("sk-team-b-0123456789".into()),
            budget_usd: Some(2.5),
            window: Some("day".into()),
            rpm: Some(10),
            models: Some(vec!["fast".into()]),
            expires: Some("2027-01-01T00:00:00Z".into()),
            ..RawClient::default()
        };
        let record = raw.read("", &|_| None).unwrap();
        let text = stored(&record);
        assert!(!text.contains("sk-team-b"), "{text}");
        assert_eq!(read_stored(&text), Some(record));
    }
}
