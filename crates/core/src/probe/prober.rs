//! The prober's task: a round every `[probe] interval` — probe every
//! target (this instance holds the fleet's lease, or there is no fleet),
//! else read what the fleet's prober found — and one probe of one target:
//! its provider's lease (the adapter its actor built, with the actor's
//! pooled client and credentials), then the adapter's zero-token check
//! under the probe's timeout.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::sync::watch;
use understudy_settings::Settings;
use understudy_types::target::Target;

use super::board::{ReadyBoard, Verdict};
use super::fleet::{Fleet, Found};
use crate::actor::provider::Lease;
use crate::actor::supervisor::SupervisorMsg;
use crate::key_pools::{KeyPool, KeyPools, LivePools};
use crate::shared::{SharedState, unix_ms};
use crate::sink::metrics::Metrics;
use understudy_types::FailureCode;

/// How many intervals the lease and the published results last without a
/// renewal (at least two and a probe's timeout): a holder that stops is
/// replaced within that.
const KEEP_INTERVALS: u32 = 3;

/// The prober of one engine.
pub(crate) struct Prober {
    /// The settings at start: `[probe]` (which only a restart changes).
    pub(crate) settings: Arc<Settings>,
    /// The settings in force (each provider's connect timeout), read at
    /// each round (`None`: the engine is stopping).
    pub(crate) live: Box<dyn Fn() -> Option<Arc<Settings>> + Send + Sync>,
    pub(crate) board: Arc<ReadyBoard>,
    pub(crate) supervisor: ActorRef<SupervisorMsg>,
    pub(crate) shared: Option<Arc<SharedState>>,
    pub(crate) metrics: Arc<Metrics>,
    /// The key pools in force (a reload may swap them).
    pub(crate) pools: Arc<LivePools>,
}

// === impl Prober ===

impl Prober {
    /// Probes (or reads the fleet's results) at once, then every interval,
    /// until `stop` turns true.
    pub(crate) async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut fleet = self.shared.clone().map(Fleet::new);
        loop {
            tokio::select! {
                () = self.round(fleet.as_mut()) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(self.settings.probe.interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// One round: this instance probes when it holds the fleet's lease or
    /// has no fleet (or cannot reach it); otherwise it takes the holder's
    /// results.
    async fn round(&self, fleet: Option<&mut Fleet>) {
        // Long enough for a round whose probes all hang to its timeout.
        let probe = self.settings.probe;
        let keep = (probe.interval * KEEP_INTERVALS).max(probe.interval * 2 + probe.timeout);
        let Some(fleet) = fleet else {
            self.probe_here().await;
            return;
        };
        match fleet.hold(keep).await {
            Some(true) => {
                let found = self.probe_here().await;
                fleet.publish(&found, keep).await;
            }
            Some(false) => {
                if let Some(found) = fleet.results(self.board.targets()).await {
                    for (target, verdict, detail, at) in found {
                        self.board.record(&target, verdict, detail, at, false);
                    }
                }
            }
            // Redis unreachable: each instance for itself meanwhile.
            None => {
                self.probe_here().await;
            }
        }
    }

    /// Probes every target from this instance and records the verdicts.
    async fn probe_here(&self) -> Vec<Found> {
        let live = (self.live)().unwrap_or_else(|| Arc::clone(&self.settings));
        probe_all(
            &live,
            &self.board,
            &self.supervisor,
            &self.metrics,
            &self.pools.current(),
            self.shared.as_ref(),
        )
        .await
    }
}

/// Probes every target of `board` at once (each under the probe's
/// timeout), records each verdict as this instance's, and returns them.
pub(crate) async fn probe_all(
    settings: &Settings,
    board: &ReadyBoard,
    supervisor: &ActorRef<SupervisorMsg>,
    metrics: &Metrics,
    pools: &KeyPools,
    shared: Option<&Arc<SharedState>>,
) -> Vec<Found> {
    let mut probes = tokio::task::JoinSet::new();
    for (i, target) in board.targets().enumerate() {
        let connect = settings
            .providers
            .get(&*target.provider)
            .map_or(settings.timeouts.connect, |p| p.timeouts.connect);
        let (supervisor, target) = (supervisor.clone(), target.clone());
        let pool = pools.get(&target.provider).cloned();
        let shared = shared.cloned();
        let timeout = settings.probe.timeout;
        probes.spawn(async move {
            let call = Call {
                timeout,
                connect,
                pool,
                shared,
            };
            let (verdict, detail) = probe_one(&supervisor, &target, call).await;
            (i, (target, verdict, detail, unix_ms()))
        });
    }
    let mut found: Vec<(usize, Found)> = probes.join_all().await;
    found.sort_by_key(|(i, _)| *i);
    found
        .into_iter()
        .map(|(_, (target, verdict, detail, at))| {
            metrics.probed(&target.provider, verdict.code());
            board.record(&target, verdict, detail.clone(), at, true);
            (target, verdict, detail, at)
        })
        .collect()
}

/// How one target's probe is made: its bounds, its provider's key pool
/// (if it has one) and the fleet (told of a key the probe put out).
struct Call {
    timeout: Duration,
    connect: Duration,
    pool: Option<Arc<KeyPool>>,
    shared: Option<Arc<SharedState>>,
}

/// Probes one target: its provider's lease (the actor started if need
/// be), then every key (a pool's each, else the one): its credentials
/// held, then the adapter's check. The target is ready when a key is; not
/// ready only when every key is refused (each key's refusal named in the
/// detail); a pool's key that is refused goes out as a call's refusal
/// takes it out, while the others serve.
async fn probe_one(
    supervisor: &ActorRef<SupervisorMsg>,
    target: &Target,
    call: Call,
) -> (Verdict, Option<String>) {
    let asked = supervisor
        .call(
            |reply| SupervisorMsg::Ensure {
                provider: Arc::clone(&target.provider),
                reply,
            },
            Some(call.timeout),
        )
        .await;
    let lease = match asked {
        Ok(CallResult::Success(Ok(lease))) => lease,
        _ => {
            return (
                Verdict::Unreachable,
                Some("the provider could not be started".into()),
            );
        }
    };
    let keys = call.pool.as_ref().map_or(1, |p| p.names.len().max(1));
    let mut each = tokio::task::JoinSet::new();
    for key in 0..keys {
        let (lease, target) = (lease.clone(), target.clone());
        let (timeout, connect) = (call.timeout, call.connect);
        each.spawn(async move {
            let found = probe_key(&lease, &target, key, timeout, connect).await;
            (key, found)
        });
    }
    let mut found: Vec<(usize, (Verdict, Option<String>))> = each.join_all().await;
    found.sort_by_key(|(key, _)| *key);
    let found: Vec<(Verdict, Option<String>)> = found.into_iter().map(|(_, f)| f).collect();
    if let Some(pool) = &call.pool {
        let now = crate::runtime_clock::now();
        for (key, (verdict, _)) in found.iter().enumerate() {
            if *verdict != Verdict::Auth {
                continue;
            }
            let until = pool.refused(key, now);
            // The fleet hears of it as of a call's refusal.
            if let (Some(shared), Some(id)) = (&call.shared, pool.id(key)) {
                let until_ms = unix_ms() + until.saturating_duration_since(now).as_millis() as u64;
                shared
                    .publish_key_out(&pool.provider, id, until_ms, FailureCode::Auth.as_str())
                    .await;
            }
        }
    }
    let name = |key: usize| {
        call.pool
            .as_ref()
            .and_then(|p| p.name(key))
            .map(|n| format!("key `{n}`: "))
            .unwrap_or_default()
    };
    combine(found, name)
}

/// One target's verdict from each key's: ready when one key is; else
/// not ready when every key is refused (`model_missing` if a key found
/// the model missing); else what proves nothing. The detail names each
/// key's answer (`name` gives a pool key's prefix).
fn combine(
    found: Vec<(Verdict, Option<String>)>,
    name: impl Fn(usize) -> String,
) -> (Verdict, Option<String>) {
    let verdicts: Vec<Verdict> = found.iter().map(|(v, _)| *v).collect();
    let refused = |v: &Verdict| matches!(v, Verdict::Auth | Verdict::ModelMissing);
    let verdict = if verdicts.contains(&Verdict::Ready) {
        Verdict::Ready
    } else if !verdicts.is_empty() && verdicts.iter().all(refused) {
        if verdicts.contains(&Verdict::ModelMissing) {
            Verdict::ModelMissing
        } else {
            Verdict::Auth
        }
    } else if verdicts.contains(&Verdict::NoProbe) {
        Verdict::NoProbe
    } else {
        Verdict::Unreachable
    };
    let notes: Vec<String> = found
        .into_iter()
        .enumerate()
        .filter_map(|(key, (_, detail))| Some(format!("{}{}", name(key), detail?)))
        .collect();
    (verdict, (!notes.is_empty()).then(|| notes.join("; ")))
}

/// Probes one key of `target`'s provider: its credentials held, then the
/// adapter's check under the probe's timeout.
async fn probe_key(
    lease: &Lease,
    target: &Target,
    key: usize,
    timeout: Duration,
    connect: Duration,
) -> (Verdict, Option<String>) {
    if !lease.credentials_ready(key).await {
        return (
            Verdict::Unreachable,
            Some("its credentials are not held".into()),
        );
    }
    let probe = lease.adapter_of(key).probe(&target.model, connect);
    match tokio::time::timeout(timeout, probe).await {
        Err(_) => (Verdict::Unreachable, Some("the probe timed out".into())),
        Ok(Ok(true)) => (Verdict::Ready, None),
        Ok(Ok(false)) => (Verdict::NoProbe, None),
        Ok(Err(answer)) => {
            let failure = &answer.failure;
            let detail = match failure.status {
                Some(status) => format!("{status}: {}", failure.detail),
                None => failure.detail.clone(),
            };
            (super::verdict_of(&answer), Some(detail))
        }
    }
}

/// The targets the routes name (the default route's and every named
/// route's; not a pattern's `provider:*`), of providers that have their
/// key: each is probed. Each under the id its provider maps the route's
/// name to (`models = {…}`), as plans hold it: the board answers for the
/// targets plans ask about, and the lookup asks for the provider's own id.
pub(crate) fn probed_targets(settings: &Settings) -> Vec<Target> {
    let mut out: Vec<Target> = settings.default_route();
    for targets in settings.routes.values() {
        out.extend(targets.iter().cloned());
    }
    let mut out = understudy_policy::plan::cloud_ids(out, settings);
    out.retain(|t| {
        &*t.model != "*"
            && settings
                .providers
                .get(&*t.provider)
                .is_some_and(|p| p.has_key())
    });
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_not_ready_only_when_every_key_is_refused() {
        use Verdict::{Auth, ModelMissing, NoProbe, Ready, Unreachable};
        // (each key's verdict, the target's)
        let cases: [(&[Verdict], Verdict); 8] = [
            (&[Ready], Ready),
            (&[Auth], Auth),
            (&[Auth, Ready], Ready),
            (&[Auth, Auth], Auth),
            (&[Auth, ModelMissing], ModelMissing),
            // A key whose answer proved nothing may well serve.
            (&[Auth, Unreachable], Unreachable),
            (&[NoProbe, NoProbe], NoProbe),
            (&[], Unreachable),
        ];
        for (keys, want) in cases {
            let found = keys.iter().map(|v| (*v, None)).collect();
            assert_eq!(combine(found, |_| String::new()).0, want, "{keys:?}");
        }
        let found = vec![(Auth, Some("401: no".to_owned())), (Ready, None)];
        let (_, detail) = combine(found, |k| format!("key `key-{}`: ", k + 1));
        assert_eq!(detail.as_deref(), Some("key `key-1`: 401: no"));
    }
}
