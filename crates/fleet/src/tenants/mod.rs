//! Client records held to account: [`Tenants`] knows every record (the
//! file's, and those the admin API made), admits a request against its
//! record's limits with one check-and-reserve, and settles what the answer
//! used ([`Reservation`]).
//!
//! Counting, per record:
//! - requests and tokens in the current UTC minute (`rpm`, `tpm`): a
//!   request reserves one request and its estimated tokens (the prompt at
//!   four characters a token, plus `max_tokens` or [`OUTPUT_ESTIMATE`]);
//!   its settlement replaces the estimate by the answer's usage (streamed
//!   answers too), or gives it back when nothing was used;
//! - spend in the budget's window (`budget_usd`, `window`): a request
//!   reserves its worst case ([`worst_cost_nanos`]: its estimated prompt
//!   and its `max_tokens`, or [`OUTPUT_ESTIMATE`], at the price of the
//!   dearest target its route can reach) and is refused when that no longer
//!   fits; its settlement replaces the reservation by what it cost. So
//!   concurrent requests cannot together pass a budget: only a provider
//!   that uses more than the estimate (an answer past `max_tokens`, a
//!   prompt longer than four characters a token) can.
//!
//! With Redis (`REDIS_URL`) the counters are the fleet's (`fleet.rs`: one
//! Lua script checks and reserves atomically, so two instances admit no
//! more than one would); without it, or while it is unreachable, each
//! instance counts alone, going on from the last counts it saw. A change
//! Redis did not take (spend made while it was away, a settlement that
//! failed) is kept and sent by the next sync (every second) or admission
//! of its record that reaches Redis (`unsent.rs`).
//!
//! The counts' arithmetic (verdicts, reservations, settlements, refusals,
//! costs) is in `counting.rs`.

mod admin;
mod counting;
pub mod fleet;
mod state;
mod unsent;

pub use admin::whole;
pub use admin::{AdminError, ClientListing, ClientUsage, KeptIn, Saved};
pub use counting::{Reserve, cost_nanos, worst_cost_nanos};
pub use state::{Kept, StateError, StateFile};
pub use understudy_types::error::ClientRefusal;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use understudy_settings::{ClientRecord, NANOS_PER_USD, ServerSettings, sha256};
use understudy_types::RouteSelector;
use understudy_types::chat::{ChatRequest, Usage};

use understudy_record::sink::metrics::Metrics;

use crate::shared::{SharedState, unix_ms};
use counting::{budget_refusal, minute_left, refusal, reserve, settlement, verdict_of};

/// The answer tokens a request without `max_tokens` is assumed to use at
/// admission (its settlement counts what it did use).
pub const OUTPUT_ESTIMATE: u64 = 1024;

/// A target's price for a budget: USD per million input and output
/// tokens.
pub type Price = (f64, f64);

/// The counts of one record that decide admission, and the last the
/// fleet reported (the `x-ratelimit-*` headers show them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// The UTC minute (Unix seconds / 60) the request counts are of.
    pub minute: u64,
    pub requests: u64,
    pub tokens: u64,
    /// The budget window the spend is of.
    pub window: u64,
    pub spent_nanos: u64,
    /// When an admission last read these counts (the fleet's reply with
    /// Redis); `None` in a reply not yet kept.
    pub seen: Option<tokio::time::Instant>,
}

/// How long the spend an admission read decides an early refusal: spend
/// holds the worst cases of requests in flight, which shrink when they
/// settle (on any instance), so an older count may be too high.
pub const SPEND_FRESH: Duration = Duration::from_secs(2);

/// What a record's limits leave, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remaining {
    pub requests: Option<(u64, u64)>,
    pub tokens: Option<(u64, u64)>,
    /// Until the minute ends.
    pub reset: Duration,
}

/// Every client record, and their counters.
pub struct Tenants {
    /// By key hash; replaced whole when the admin API changes a record.
    records: RwLock<Arc<HashMap<[u8; 32], Arc<ClientRecord>>>>,
    /// The names of the file's records (the admin API leaves them alone);
    /// replaced by a reload of the settings file.
    file: RwLock<Vec<Arc<str>>>,
    /// SHA-256 of each plain client key (`server.api_keys`).
    plain: Vec<[u8; 32]>,
    /// SHA-256 of the admin token: never a client's key.
    admin: Option<[u8; 32]>,
    /// One admin write at a time on this instance (check, store, apply),
    /// and no fleet read applied in the middle of one.
    writes: tokio::sync::Mutex<()>,
    /// Where the admin API's records are kept without Redis.
    state: Option<StateFile>,
    /// Whether the gateway asks clients for a key at all.
    pub closed: bool,
    counts: Mutex<HashMap<Arc<str>, Counts>>,
    /// Per record, spend the fleet has not heard of yet: (window, nano-USD;
    /// negative: a reservation given back).
    unsent: Mutex<HashMap<Arc<str>, (u64, i64)>>,
    shared: Option<Arc<SharedState>>,
    metrics: Arc<Metrics>,
}

/// A request's admission: its reservation, settled once by
/// [`Reservation::settle`] (or given back when dropped unsettled).
pub struct Reservation {
    pub record: Arc<ClientRecord>,
    tenants: Arc<Tenants>,
    counts: Counts,
    /// The tokens reserved (0 without `tpm`).
    estimate: u64,
    /// The estimate as prompt and answer tokens, for its cost.
    usage_estimate: Usage,
    /// The spend reserved (nano-USD; 0 without a budget): the estimate at
    /// the price of the dearest target the route can reach.
    reserved_nanos: u64,
    /// Whether the reservation was made in Redis.
    in_fleet: bool,
    settled: AtomicBool,
    /// The estimate's cost at the price of the target last called (nano-
    /// USD), or [`NOT_CALLED`]: a run that ends without knowing what it
    /// used after a provider was called is charged its estimate.
    calling: AtomicU64,
}

/// [`Reservation::calling`] before any provider is called.
const NOT_CALLED: u64 = u64::MAX;

/// What a run used, as it settles its ticket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Used {
    /// The answer's usage and its cost.
    Known { tokens: u64, cost_usd: f64 },
    /// Nothing: no provider answered (every attempt failed), or the cache
    /// did.
    Nothing,
    /// Not known: a stream cut after it committed, a client gone while a
    /// provider worked, an answer without usage. Charged the estimate if a
    /// provider was called.
    Unknown,
}

// === impl Tenants ===

impl Tenants {
    pub fn new(
        server: &ServerSettings,
        shared: Option<Arc<SharedState>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let records = &server.clients;
        let map = records
            .iter()
            .map(|r| (r.key_sha256, Arc::new(r.clone())))
            .collect();
        Self {
            records: RwLock::new(Arc::new(map)),
            file: RwLock::new(records.iter().map(|r| Arc::clone(&r.name)).collect()),
            plain: server
                .api_keys
                .iter()
                .map(|k| sha256(k.expose().as_bytes()))
                .collect(),
            admin: server
                .admin_token
                .as_ref()
                .map(|t| sha256(t.expose().as_bytes())),
            writes: tokio::sync::Mutex::new(()),
            state: None,
            closed: !server.api_keys.is_empty() || !records.is_empty(),
            counts: Mutex::new(HashMap::new()),
            unsent: Mutex::new(HashMap::new()),
            shared,
            metrics,
        }
    }

    /// Keeps the admin API's records in `state` (no Redis), starting from
    /// the records it holds.
    pub fn with_state_file(mut self, state: StateFile, records: Vec<ClientRecord>) -> Self {
        let names: Vec<Arc<str>> = records.iter().map(|r| Arc::clone(&r.name)).collect();
        self.set_admin_records(records);
        // Keys were given out: they are asked for, even if the settings no
        // longer hold a key of their own.
        self.closed |= self.any();
        for name in names {
            if self.from_file(&name) || self.named(&name).is_none() {
                // The settings file's record of that name or key wins;
                // the state file's is left out, so the next write drops it.
                tracing::warn!(
                    client = %name,
                    path = %state.path().display(),
                    "a client record in the state file has the name or key of one in the \
                     settings file; the settings file's is in force, and the next admin change \
                     of client records removes this one from the state file"
                );
            }
        }
        self.state = Some(state);
        self
    }

    /// The state file, without Redis.
    pub fn state_file(&self) -> Option<&StateFile> {
        self.state.as_ref()
    }

    fn all(&self) -> Arc<HashMap<[u8; 32], Arc<ClientRecord>>> {
        let guard = self
            .records
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&guard)
    }

    /// Whether any record exists (else a key is looked up nowhere here).
    pub fn any(&self) -> bool {
        !self.all().is_empty()
    }

    /// The record of a key a client sent.
    pub fn find(&self, key: &str) -> Option<Arc<ClientRecord>> {
        let all = self.all();
        if all.is_empty() {
            return None;
        }
        // A hash lookup of the key's SHA-256: what a guess costs tells
        // nothing of the keys.
        all.get(&sha256(key.as_bytes())).cloned()
    }

    /// Every record, by name.
    pub fn list(&self) -> Vec<Arc<ClientRecord>> {
        let mut out: Vec<_> = self.all().values().cloned().collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The record named `name`.
    pub fn named(&self, name: &str) -> Option<Arc<ClientRecord>> {
        self.all().values().find(|r| &*r.name == name).cloned()
    }

    /// Whether `name` is one of the file's records.
    pub fn from_file(&self, name: &str) -> bool {
        self.file
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|n| &**n == name)
    }

    /// Puts a reloaded settings file's `records` in force: they replace the
    /// file's, and the admin API's records stay over them, as at start (one
    /// with the name or key of a file's record is left out while that
    /// record is). Counters are by name, so a record that keeps its name
    /// keeps its counts and its new limits apply to the next request.
    pub async fn reload_file(&self, records: &[ClientRecord]) {
        // No admin write nor fleet read applies in the middle.
        let _one = self.writes.lock().await;
        let admin = self.admin_records();
        *self
            .file
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            records.iter().map(|r| Arc::clone(&r.name)).collect();
        let mut map: HashMap<[u8; 32], Arc<ClientRecord>> = records
            .iter()
            .map(|r| (r.key_sha256, Arc::new(r.clone())))
            .collect();
        for r in admin {
            if self.from_file(&r.name) || map.contains_key(&r.key_sha256) {
                tracing::warn!(
                    client = %r.name,
                    "an admin API client record has the name or key of one in the reloaded \
                     settings file; the settings file's is in force"
                );
                continue;
            }
            map.insert(r.key_sha256, Arc::new(r));
        }
        *self
            .records
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(map);
    }

    /// Replaces the admin API's records (the file's stay).
    pub fn set_admin_records(&self, admin: Vec<ClientRecord>) {
        let mut map: HashMap<[u8; 32], Arc<ClientRecord>> = self
            .all()
            .values()
            .filter(|r| self.from_file(&r.name))
            .map(|r| (r.key_sha256, Arc::clone(r)))
            .collect();
        for r in admin {
            if self.from_file(&r.name) || map.contains_key(&r.key_sha256) {
                continue;
            }
            map.insert(r.key_sha256, Arc::new(r));
        }
        *self
            .records
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(map);
    }

    /// The admin API's records now.
    pub fn admin_records(&self) -> Vec<ClientRecord> {
        self.list()
            .into_iter()
            .filter(|r| !self.from_file(&r.name))
            .map(|r| (*r).clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Counts>> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What `record`'s limits leave now, as last counted.
    pub fn remaining(&self, record: &ClientRecord) -> Option<Remaining> {
        if record.rpm.is_none() && record.tpm.is_none() {
            return None;
        }
        let now_ms = unix_ms();
        let minute = now_ms / 60_000;
        let counts = self
            .lock()
            .get(&record.name)
            .copied()
            .filter(|c| c.minute == minute)
            .unwrap_or_default();
        Some(Remaining {
            requests: record.rpm.map(|l| (l, l.saturating_sub(counts.requests))),
            tokens: record.tpm.map(|l| (l, l.saturating_sub(counts.tokens))),
            reset: minute_left(now_ms),
        })
    }

    /// Admits a request of `record` for `route` (the route, `default` or
    /// pin it named), reserving its share of the limits; refused
    /// otherwise, and counted in metrics. `prices` are those of every
    /// target the route may be served by: the budget reserves the request's
    /// worst case at the dearest.
    pub async fn admit(
        self: &Arc<Self>,
        record: &Arc<ClientRecord>,
        route: &RouteSelector,
        chat: &ChatRequest,
        prices: &[Price],
    ) -> Result<Reservation, ClientRefusal> {
        let estimate = Usage {
            input_tokens: understudy_types::chat::estimate_tokens(chat),
            output_tokens: chat.max_tokens.map_or(OUTPUT_ESTIMATE, u64::from),
            ..Usage::default()
        };
        let verdict = match self.scope(record, route) {
            Ok(()) => self.check(record, estimate, prices).await,
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = &verdict {
            self.refused(record, refusal);
        }
        verdict
    }

    /// A refusal that needs no request, from `record`'s last counts (the
    /// fleet's as an admission last read them): the minute's requests, or
    /// the budget's window spent as read within [`SPEND_FRESH`]. Requests
    /// only grow within their minute, so a request count of any age refuses
    /// nothing admission would take; spend holds the worst cases of
    /// requests in flight and shrinks as they settle (on other instances
    /// too, unseen here), so only a fresh reading of it refuses. A request
    /// not refused here meets admission, which reads the counts again.
    /// This lets a request be refused before its body is read; admitting
    /// stays [`Tenants::admit`]'s check-and-reserve.
    pub fn spent(&self, record: &ClientRecord) -> Result<(), ClientRefusal> {
        if record.rpm.is_none() && record.budget_nanos.is_none() {
            return Ok(());
        }
        let Some(c) = self.lock().get(&record.name).copied() else {
            return Ok(());
        };
        let now_ms = unix_ms();
        let fresh = c.seen.is_some_and(|at| at.elapsed() < SPEND_FRESH);
        let budget = fresh
            && c.window == record.window.at(now_ms / 1000).0
            && record.budget_nanos.is_some_and(|b| c.spent_nanos >= b);
        let requests = c.minute == now_ms / 60_000 && record.rpm.is_some_and(|l| c.requests >= l);
        let code = match (budget, requests) {
            (true, _) => 3,
            (false, true) => 1,
            (false, false) => 0,
        };
        refusal(code, record, now_ms, &c, 0)
    }

    /// Counts a refusal of `record`'s request in metrics.
    pub fn refused(&self, record: &ClientRecord, refusal: &ClientRefusal) {
        self.metrics.client_refused(&record.name, refusal.limit());
    }

    /// Whether `record` may ask for `route` now: not expired, and within
    /// its `models`.
    pub fn scope(&self, record: &ClientRecord, route: &RouteSelector) -> Result<(), ClientRefusal> {
        if record.expired(SystemTime::now()) {
            return Err(ClientRefusal::Expired);
        }
        if !record.models.is_empty() {
            let asked = route.to_string();
            if !record.allows(&asked) {
                return Err(ClientRefusal::Model { asked });
            }
        }
        Ok(())
    }

    async fn check(
        self: &Arc<Self>,
        record: &Arc<ClientRecord>,
        usage: Usage,
        prices: &[Price],
    ) -> Result<Reservation, ClientRefusal> {
        let estimate = if record.tpm.is_some() {
            usage.input_tokens + usage.output_tokens
        } else {
            0
        };
        if let Some(limit) = record.tpm.filter(|l| estimate > *l) {
            return Err(ClientRefusal::TooLarge { estimate, limit });
        }
        let now_ms = unix_ms();
        let worst = match record.budget_nanos {
            Some(budget) => {
                let worst = worst_cost_nanos(usage, prices);
                if worst > budget {
                    // More than the whole budget: no window would take it.
                    return Err(budget_refusal(record, now_ms, 0, worst));
                }
                worst
            }
            None => 0,
        };
        let want = Reserve { estimate, worst };
        let at = Counts {
            minute: now_ms / 60_000,
            window: record.window.at(now_ms / 1000).0,
            ..Counts::default()
        };
        let mut counts = at;
        let mut in_fleet = false;
        if record.counted() {
            let fleet = match &self.shared {
                // Boxed: the Redis call's future would otherwise grow every
                // request's.
                Some(shared) => Box::pin(fleet::admit(shared, record, at, want)).await,
                None => None,
            };
            counts = match fleet {
                Some((code, mut seen)) => {
                    seen.seen = Some(tokio::time::Instant::now());
                    self.lock().insert(Arc::clone(&record.name), seen);
                    self.flush_unsent(record);
                    refusal(code, record, now_ms, &seen, worst)?;
                    in_fleet = true;
                    seen
                }
                None => self.admit_here(record, at, want, now_ms)?,
            };
        }
        Ok(Reservation {
            record: Arc::clone(record),
            tenants: Arc::clone(self),
            counts,
            estimate,
            usage_estimate: usage,
            reserved_nanos: worst,
            in_fleet,
            settled: AtomicBool::new(false),
            calling: AtomicU64::new(NOT_CALLED),
        })
    }

    /// Admission by this instance's counters (no Redis, or Redis down).
    fn admit_here(
        &self,
        record: &ClientRecord,
        at: Counts,
        want: Reserve,
        now_ms: u64,
    ) -> Result<Counts, ClientRefusal> {
        let mut all = self.lock();
        let c = all.entry(Arc::clone(&record.name)).or_default();
        if c.minute != at.minute {
            (c.minute, c.requests, c.tokens) = (at.minute, 0, 0);
        }
        if c.window != at.window {
            (c.window, c.spent_nanos) = (at.window, 0);
        }
        c.seen = Some(tokio::time::Instant::now());
        refusal(verdict_of(record, c, want), record, now_ms, c, want.worst)?;
        reserve(c, want);
        Ok(*c)
    }

    /// Settles a ticket: the tokens used replace the estimate, the cost
    /// replaces the spend reserved. A reservation made in Redis is settled
    /// there; one made here (Redis was away) is settled here, and its cost
    /// kept for the fleet.
    fn settle(self: &Arc<Self>, ticket: &Reservation, tokens: u64, cost_nanos: u64) {
        let (delta, spend) = settlement(ticket, tokens, cost_nanos);
        if delta == 0 && spend == 0 {
            return;
        }
        let name = &ticket.record.name;
        {
            let mut all = self.lock();
            if let Some(c) = all.get_mut(name) {
                if c.minute == ticket.counts.minute {
                    c.tokens = c.tokens.saturating_add_signed(delta);
                }
                if c.window == ticket.counts.window {
                    c.spent_nanos = c.spent_nanos.saturating_add_signed(spend);
                }
            }
        }
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if !ticket.in_fleet {
            // The reservation was this instance's alone: the fleet hears of
            // the cost only.
            if cost_nanos > 0 {
                let cost = i64::try_from(cost_nanos).unwrap_or(i64::MAX);
                self.keep_unsent(name, ticket.counts.window, cost);
            }
            return;
        }
        let (record, counts) = (Arc::clone(&ticket.record), ticket.counts);
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it with (shutting down): the spend's change
            // is kept for the fleet's next sync; the minute's tokens expire
            // with their minute.
            if spend != 0 {
                self.keep_unsent(name, counts.window, spend);
            }
            return;
        };
        let tenants = Arc::clone(self);
        handle.spawn(async move {
            let sent = fleet::settle(&shared, &record, counts, delta, spend).await;
            if !sent && spend != 0 {
                // Sent by the fleet's next sync, or the record's next
                // admission that reaches Redis.
                tenants.keep_unsent(&record.name, counts.window, spend);
            }
        });
    }
}

impl fmt::Debug for Tenants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tenants")
            .field("records", &self.all().len())
            .finish_non_exhaustive()
    }
}

// === impl Reservation ===

impl Reservation {
    /// Settles the reservation with what the run used.
    pub fn settle(&self, used: Used) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        let (tokens, nanos) = match used {
            Used::Known { tokens, cost_usd } => {
                (tokens, (cost_usd.max(0.0) * NANOS_PER_USD).round() as u64)
            }
            Used::Nothing => (0, 0),
            Used::Unknown => match self.calling.load(Ordering::Acquire) {
                NOT_CALLED => (0, 0),
                nanos => (self.estimate, nanos),
            },
        };
        self.tenants.settle(self, tokens, nanos);
    }

    /// A provider is about to be called for this ticket, at `price` (USD per
    /// million input and output tokens, when the target has one).
    pub fn calling(&self, price: Option<Price>) {
        let nanos = price.map_or(0, |p| cost_nanos(self.usage_estimate, p));
        self.calling
            .store(nanos.min(NOT_CALLED - 1), Ordering::Release);
    }

    /// The record's name.
    pub fn client(&self) -> &Arc<str> {
        &self.record.name
    }
}

impl Drop for Reservation {
    /// A ticket never settled (the client left first) is charged its
    /// estimate if a provider was called, else gives it back.
    fn drop(&mut self) {
        self.settle(Used::Unknown);
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("client", &self.record.name)
            .field("estimate", &self.estimate)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
