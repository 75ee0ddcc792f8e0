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

use serde_json::json;
use understudy_record::sink::BoxFuture;
use understudy_settings::{ClientRecord, RawClient, RoutingTable, RoutingUpdate, hex};

use super::{Counts, Reserve, Tenants};
use crate::shared::SharedState;

/// How often an instance reads the fleet's records and routing.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// Checks and reserves in one step. KEYS: requests, tokens, spend. ARGV:
/// rpm, tpm, budget (0: none, else one more than the nano-USD), the
/// estimate, the minute counters' lifetime (ms), the worst cost (nano-USD),
/// the spend's lifetime (ms). Returns `{verdict, requests, tokens, spent}`
/// (the verdict codes of `verdict_of`, which decides the same way).
const ADMIT: &str = r"
local r = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(redis.call('GET', KEYS[2]) or '0')
local u = tonumber(redis.call('GET', KEYS[3]) or '0')
local rpm, tpm, budget, est = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local worst = tonumber(ARGV[6])
if budget > 0 and (u >= budget - 1 or u + worst > budget - 1) then return {3, r, t, u} end
if rpm > 0 and r >= rpm then return {1, r, t, u} end
if tpm > 0 and t + est > tpm then return {2, r, t, u} end
r = redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
if est > 0 then
  t = redis.call('INCRBY', KEYS[2], est)
  if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
end
if worst > 0 then
  u = redis.call('INCRBY', KEYS[3], worst)
  if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], ARGV[7]) end
end
return {0, r, t, u}
";

/// Settles. KEYS: tokens, spend. ARGV: the tokens' change, the spend's
/// change (the cost less the reservation; never below zero), the spend's
/// lifetime (ms). A minute already gone is left alone.
const SETTLE: &str = r"
local d, c = tonumber(ARGV[1]), tonumber(ARGV[2])
if d ~= 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  if d < 0 and tonumber(redis.call('GET', KEYS[1])) + d < 0 then d = -tonumber(redis.call('GET', KEYS[1])) end
  redis.call('INCRBY', KEYS[1], d)
end
if c < 0 then
  local u = tonumber(redis.call('GET', KEYS[2]) or '0')
  if u + c < 0 then c = -u end
end
if c ~= 0 then
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

/// The fleet's check-and-reserve of `want` in the minute and window of
/// `at`: the verdict code and the counts after it; `None` while Redis is
/// unreachable.
pub(super) async fn admit(
    shared: &SharedState,
    record: &ClientRecord,
    at: Counts,
    want: Reserve,
) -> Option<(u8, Counts)> {
    let name = &record.name;
    let keys = [
        key(name, "rpm", at.minute),
        key(name, "tpm", at.minute),
        key(name, "usd", at.window),
    ];
    let args = [
        record.rpm.unwrap_or(0),
        record.tpm.unwrap_or(0),
        record.budget_nanos.map_or(0, |b| b.saturating_add(1)),
        want.estimate,
        MINUTE_KEEP_MS,
        want.worst,
        spend_keep_ms(record, crate::shared::unix_ms()),
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
    let read = |i: usize| reply.get(i).map_or(0, |v| (*v).max(0) as u64);
    Some((
        read(0) as u8,
        Counts {
            requests: read(1),
            tokens: read(2),
            spent_nanos: read(3),
            ..at
        },
    ))
}

/// Adds a settled request's token change and spend change (its cost less
/// its reservation) to the fleet's counts; `false`: Redis did not take
/// them.
pub(super) async fn settle(
    shared: &SharedState,
    record: &ClientRecord,
    at: Counts,
    delta: i64,
    spend: i64,
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
                .arg(spend)
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
    stored_value(record).to_string()
}

/// A record as the fleet and the state file store it.
pub(super) fn stored_value(record: &ClientRecord) -> serde_json::Value {
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
        "caller_routing": view.caller_routing,
    })
}

/// Reads a stored record (`None`: not one this version can read).
fn read_stored(text: &str) -> Option<ClientRecord> {
    read_stored_value(serde_json::from_str(text).ok()?)
}

/// Reads a record as the fleet and the state file store it.
pub(super) fn read_stored_value(value: serde_json::Value) -> Option<ClientRecord> {
    let object: serde_json::Map<String, serde_json::Value> = value
        .as_object()?
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let raw: RawClient = serde_json::from_value(object.into()).ok()?;
    raw.read("", &|_| None).ok()
}

/// Checks and stores (or deletes) a record in one step, bumping the
/// version: a new record's name must be free, a changed or deleted one
/// must exist, and no other record may hold its key (every stored record
/// is read: admin writes are rare, and no index can drift from the
/// records). KEYS: the records, the version. ARGV: the name, the record
/// (empty: delete), the mode (`new`, `change`, `delete`), the key's SHA-256
/// (hex; empty on delete). Returns the [`Publish`] codes.
const SAVE_RECORD: &str = r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[3] == 'new' and old then return 0 end
if ARGV[3] ~= 'new' and not old then return 2 end
if ARGV[4] ~= '' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] then
      local ok, r = pcall(cjson.decode, all[i + 1])
      if ok and type(r) == 'table' and r.key_sha256 == ARGV[4] then return 3 end
    end
  end
end
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('INCR', KEYS[2])
return 1
";

/// What the fleet said of an admin write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    Saved,
    /// A new record's name is another record's.
    NameTaken,
    /// The record to change or delete is gone.
    Gone,
    /// Another record holds the key.
    KeyTaken,
}

/// What an admin write does to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    New,
    Change,
    Delete,
}

/// Checks and stores the admin API's record `name` for the fleet
/// (`record` `None`: deletes it) in one step. `None`: Redis is
/// unreachable.
pub async fn publish_record(
    shared: &SharedState,
    name: &str,
    record: Option<&ClientRecord>,
    mode: Mode,
) -> Option<Publish> {
    let (name, value) = (name.to_owned(), record.map(stored).unwrap_or_default());
    let key = record.map(|r| hex(&r.key_sha256)).unwrap_or_default();
    let mode = match mode {
        Mode::New => "new",
        Mode::Change => "change",
        Mode::Delete => "delete",
    };
    let code = shared
        .call(|mut c| async move {
            redis::cmd("EVAL")
                .arg(SAVE_RECORD)
                .arg(2)
                .arg(RECORDS)
                .arg(RECORDS_VERSION)
                .arg(name)
                .arg(value)
                .arg(mode)
                .arg(key)
                .query_async::<i64>(&mut c)
                .await
        })
        .await?;
    Some(match code {
        1 => Publish::Saved,
        0 => Publish::NameTaken,
        2 => Publish::Gone,
        _ => Publish::KeyTaken,
    })
}

/// Stores the routing table the admin API set, for the fleet.
pub async fn publish_routing(shared: &SharedState, table: &RoutingTable) -> bool {
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

/// Where the fleet's routing table is put in force: the engine's router.
pub trait RoutingHolder: Send + Sync + 'static {
    /// Puts `update` in force: `Some(Ok)` once applied, `Some(Err)` with
    /// why it does not fit this instance's providers, `None` without an
    /// answer.
    fn set_routing(
        &self,
        update: RoutingUpdate,
    ) -> BoxFuture<'_, Option<Result<(), understudy_types::Error>>>;

    /// Keeps `table` as the fleet's stored table, not in force.
    fn keep_stored(&self, table: RoutingTable);
}

/// Keeps an instance's admin records and routing table the fleet's: reads
/// both versions every [`SYNC_EVERY`], and what changed.
#[derive(Debug)]
pub struct FleetSync<R> {
    pub shared: Arc<SharedState>,
    pub tenants: Arc<Tenants>,
    pub router: R,
    /// The versions last applied (`None`: nothing read yet).
    pub seen: (Option<i64>, Option<i64>),
}

impl<R: RoutingHolder> FleetSync<R> {
    /// Reads the fleet once: applies records and routing that changed.
    pub async fn sync(&mut self) {
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
        // An admin write of this instance waits, so that a read from before
        // it never replaces what it applied.
        let _writes = self.tenants.writes.lock().await;
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
        let stored = table.clone();
        let update = RoutingUpdate {
            default: Some(table.default),
            order: Some(table.order),
            refusal_policy: Some(table.refusal_policy),
            routes: Some(table.routes),
        };
        match self.router.set_routing(update).await {
            Some(Ok(())) => {
                tracing::info!("routing changed by the fleet's admin API");
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the fleet's routing does not fit this instance's providers; kept its own");
                // Still the fleet's stored table: a reload whose providers
                // it fits puts it in force.
                self.router.keep_stored(stored);
            }
            None => return false,
        }
        true
    }

    /// Syncs every [`SYNC_EVERY`] until `stop` turns true, sending the
    /// fleet the spend it has not heard of each time, and once more at the
    /// stop.
    pub async fn run(mut self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let stopped = tokio::select! {
                () = tokio::time::sleep(SYNC_EVERY) => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopped {
                self.tenants.send_unsent(&self.shared).await;
                return;
            }
            self.sync().await;
            self.tenants.send_unsent(&self.shared).await;
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
            caller_routing: Some(true),
            ..RawClient::default()
        };
        let record = raw.read("", &|_| None).unwrap();
        let text = stored(&record);
        assert!(!text.contains("sk-team-b"), "{text}");
        assert_eq!(read_stored(&text), Some(record));
    }
}
