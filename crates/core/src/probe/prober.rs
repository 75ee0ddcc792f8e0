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
use crate::actor::supervisor::SupervisorMsg;
use crate::shared::{SharedState, unix_ms};
use crate::sink::metrics::Metrics;

/// How many intervals the lease and the published results last without a
/// renewal (at least two and a probe's timeout): a holder that stops is
/// replaced within that.
const KEEP_INTERVALS: u32 = 3;

/// The prober of one engine.
pub(crate) struct Prober {
    pub(crate) settings: Arc<Settings>,
    pub(crate) board: Arc<ReadyBoard>,
    pub(crate) supervisor: ActorRef<SupervisorMsg>,
    pub(crate) shared: Option<Arc<SharedState>>,
    pub(crate) metrics: Arc<Metrics>,
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
        probe_all(&self.settings, &self.board, &self.supervisor, &self.metrics).await
    }
}

/// Probes every target of `board` at once (each under the probe's
/// timeout), records each verdict as this instance's, and returns them.
pub(crate) async fn probe_all(
    settings: &Settings,
    board: &ReadyBoard,
    supervisor: &ActorRef<SupervisorMsg>,
    metrics: &Metrics,
) -> Vec<Found> {
    let mut probes = tokio::task::JoinSet::new();
    for (i, target) in board.targets().enumerate() {
        let connect = settings
            .providers
            .get(&*target.provider)
            .map_or(settings.timeouts.connect, |p| p.timeouts.connect);
        let (supervisor, target) = (supervisor.clone(), target.clone());
        let timeout = settings.probe.timeout;
        probes.spawn(async move {
            let (verdict, detail) = probe_one(&supervisor, &target, timeout, connect).await;
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

/// Probes one target: its provider's lease (the actor started if need
/// be), its credentials held, then the adapter's check.
async fn probe_one(
    supervisor: &ActorRef<SupervisorMsg>,
    target: &Target,
    timeout: Duration,
    connect: Duration,
) -> (Verdict, Option<String>) {
    let asked = supervisor
        .call(
            |reply| SupervisorMsg::Ensure {
                provider: Arc::clone(&target.provider),
                reply,
            },
            Some(timeout),
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
    if !lease.credentials_ready(0).await {
        return (
            Verdict::Unreachable,
            Some("its credentials are not held".into()),
        );
    }
    match tokio::time::timeout(timeout, lease.adapter_of(0).probe(&target.model, connect)).await {
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
