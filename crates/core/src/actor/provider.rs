//! The provider actor: one per provider, owning its adapter (and through it
//! the pooled HTTP clients), the adapter's credentials where they expire
//! (it refreshes them ahead of time) and the record of recent outcomes.
//!
//! A request does not cross into this actor's task: the actor builds the
//! adapter in `pre_start` (a bad configuration fails the spawn) and hands
//! out a [`Lease`] — the adapter and its counters — which the run uses to
//! make its attempts as plain async code on the request's own task. The
//! actor answers for its counts and is what the supervisor restarts (a
//! restart builds a fresh adapter and lease). Breakers are not kept here:
//! admission and outcomes go through the one
//! [`crate::breakers::BreakerBoard`], from the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use crate::adapter::{Adapter, AdapterFactory, BoxFuture, Credentials};
use crate::failure::{Failure, FailureCode, FailureKind};
use crate::info::ProviderStats;
use crate::settings::ProviderSettings;

/// Messages of [`ProviderActor`].
pub(crate) enum ProviderMsg {
    /// Counts of recent outcomes, for `understudy providers` and the API.
    Stats(RpcReplyPort<ProviderStats>),
    /// Time to refresh the credentials of key `n` (0 without a pool).
    Refresh(usize),
    /// A refresh of key `n`'s credentials ended.
    Refreshed(usize, Result<(), String>),
    /// The adapter panicked during an attempt (the attempt failed as
    /// `unavailable`): the actor fails, and the supervisor starts it again
    /// with a fresh adapter and pool.
    AdapterPanicked,
    /// Panics inside `handle`, to exercise supervision.
    #[cfg(feature = "fault-injection")]
    Panic,
}

/// What a run needs to make attempts on a provider without a message to
/// its actor per attempt: the adapter the actor built (its pooled clients)
/// and the counters the actor reports. A restarted actor hands out a new
/// lease; runs holding the old one finish with it.
#[derive(Clone)]
pub(crate) struct Lease {
    pub actor: ActorRef<ProviderMsg>,
    /// The adapter of the pool's first key (`crate::keys::KeyPool`'s
    /// order), else the one.
    adapter: Arc<dyn Adapter>,
    /// The adapters of the pool's other keys, in order.
    others: Arc<[Arc<dyn Adapter>]>,
    counts: Arc<Counts>,
}

/// The actor's record of recent outcomes, counted by the runs that make
/// the attempts (atomics: no lock, no message).
#[derive(Default)]
struct Counts {
    in_flight: AtomicU64,
    ok: AtomicU64,
    ok_latency_us: AtomicU64,
    failed: [AtomicU64; FailureCode::ALL.len()],
}

/// One attempt counted in flight; counted as finished when it is dropped
/// (an attempt abandoned mid-call leaves no count behind), with its outcome
/// when one is recorded.
pub(crate) struct InFlight {
    counts: Arc<Counts>,
    started: Instant,
    finished: bool,
}

pub(crate) struct ProviderActor;

pub(crate) struct ProviderArgs {
    pub settings: ProviderSettings,
    pub factory: Arc<dyn AdapterFactory>,
    /// Where `pre_start` hands the new lease to the supervisor (which reads
    /// it once the spawn returns, without a message round trip).
    pub lease_to: tokio::sync::oneshot::Sender<Lease>,
}

pub(crate) struct ProviderState {
    lease: Lease,
    /// Per key: the credentials its adapter refreshes, if they expire, and
    /// the refreshes that failed in a row (the next one waits longer).
    credentials: Vec<Option<Arc<dyn Credentials>>>,
    failed_refreshes: Vec<u32>,
}

/// The longest one refresh may take before it counts as failed (a token
/// endpoint's exchange gives up after 15 s itself).
const REFRESH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The wait before refreshing again after `failed` refreshes failed in a
/// row: 2 s doubling to at most a minute (the held credentials stay in
/// use meanwhile, until they expire).
fn refresh_backoff(failed: u32) -> Duration {
    Duration::from_secs(2u64 << failed.min(5)).min(Duration::from_secs(60))
}

impl Actor for ProviderActor {
    type Msg = ProviderMsg;
    type State = ProviderState;
    type Arguments = ProviderArgs;

    /// Builds the adapter here so that a bad configuration surfaces from
    /// `spawn` instead of on the first request.
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ProviderArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (adapter, others) = build_adapters(&*args.factory, &args.settings)
            .map_err(|e| format!("provider `{}`: {e}", args.settings.name))?;
        let lease = Lease {
            actor: myself.clone(),
            adapter,
            others: others.into(),
            counts: Arc::new(Counts::default()),
        };
        let credentials: Vec<Option<Arc<dyn Credentials>>> = std::iter::once(&lease.adapter)
            .chain(lease.others.iter())
            .map(|a| a.credentials())
            .collect();
        for (n, c) in credentials.iter().enumerate() {
            if c.is_some() {
                // The first credentials are fetched at once, not on the
                // first request.
                let _ = myself.cast(ProviderMsg::Refresh(n));
            }
        }
        let _ = args.lease_to.send(lease.clone());
        Ok(ProviderState {
            failed_refreshes: vec![0; credentials.len()],
            lease,
            credentials,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProviderMsg::Stats(reply) => {
                let mut stats = state.lease.counts.stats();
                stats.credentials = state
                    .credentials
                    .iter()
                    .flatten()
                    .next()
                    .map(|c| c.status());
                let _ = reply.send(stats);
            }
            ProviderMsg::Refresh(n) => {
                if let Some(Some(credentials)) = state.credentials.get(n) {
                    // On a task of its own: the actor keeps answering while
                    // a token endpoint is slow.
                    let credentials = Arc::clone(credentials);
                    tokio::spawn(async move {
                        // Always answered, so the next refresh is always
                        // scheduled: a refresh that panics or hangs is a
                        // failed one.
                        let mut refresh = tokio::spawn(async move { credentials.refresh().await });
                        let result = match tokio::time::timeout(REFRESH_TIMEOUT, &mut refresh).await
                        {
                            Ok(Ok(result)) => result,
                            Ok(Err(_)) => Err("the refresh panicked".to_owned()),
                            Err(_) => {
                                refresh.abort();
                                Err("the refresh took too long".to_owned())
                            }
                        };
                        let _ = myself.cast(ProviderMsg::Refreshed(n, result));
                    });
                }
            }
            ProviderMsg::Refreshed(n, result) => {
                let Some(failed) = state.failed_refreshes.get_mut(n) else {
                    return Ok(());
                };
                let next = match result {
                    Ok(()) => {
                        *failed = 0;
                        state
                            .credentials
                            .get(n)
                            .and_then(|c| c.as_ref()?.refresh_in())
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "refreshing the provider's credentials failed; the held ones stay in use");
                        *failed = failed.saturating_add(1);
                        Some(refresh_backoff(*failed - 1))
                    }
                };
                if let Some(next) = next {
                    myself.send_after(next, move || ProviderMsg::Refresh(n));
                }
            }
            ProviderMsg::AdapterPanicked => {
                return Err("the adapter panicked during an attempt; starting afresh".into());
            }
            #[cfg(feature = "fault-injection")]
            ProviderMsg::Panic => panic!("fault injection: provider actor panics on purpose"),
        }
        Ok(())
    }
}

/// The first key's adapter, and the other keys'.
type Adapters = (Arc<dyn Adapter>, Vec<Arc<dyn Adapter>>);

/// The provider's adapters: one per key of its pool that is set (in
/// `crate::keys::KeyPool`'s order: the first, then the others), else the
/// one.
fn build_adapters(
    factory: &dyn AdapterFactory,
    settings: &ProviderSettings,
) -> Result<Adapters, String> {
    let mut built = crate::keys::present(settings).into_iter().map(|i| {
        let key = settings
            .for_key(i)
            .ok_or_else(|| format!("the pool has no key {i}"))?;
        factory.build(&key)
    });
    match built.next() {
        None => Ok((factory.build(settings)?, Vec::new())),
        Some(first) => Ok((first?, built.collect::<Result<_, _>>()?)),
    }
}

/// Runs `attempt` until `deadline`; past it, a timeout failure that says
/// how long it waited for `what`. A panic inside the adapter is this
/// attempt's failure (`unavailable`), not the request task's end; the
/// provider's actor hears of it and is started afresh by its supervisor.
pub(crate) async fn by_deadline<T>(
    actor: &ActorRef<ProviderMsg>,
    deadline: Instant,
    started: Instant,
    what: &str,
    attempt: BoxFuture<'_, Result<T, Failure>>,
) -> Result<T, Failure> {
    match tokio::time::timeout_at(deadline, CatchUnwind(attempt)).await {
        Ok(Ok(result)) => result,
        Ok(Err(())) => {
            let _ = actor.cast(ProviderMsg::AdapterPanicked);
            Err(Failure::new(
                FailureKind::Unavailable,
                "the provider's adapter panicked during the attempt",
            ))
        }
        Err(_) => Err(Failure::new(
            FailureKind::Timeout,
            format!("{what} within {:.1} s", (deadline - started).as_secs_f64()),
        )),
    }
}

/// A boxed future whose panic becomes `Err(())`.
struct CatchUnwind<'a, T>(BoxFuture<'a, T>);

impl<T> std::future::Future for CatchUnwind<'_, T> {
    type Output = Result<T, ()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(Err(())),
        }
    }
}

// === impl Lease ===

impl Lease {
    /// The adapter of key `key` (0 without a pool), with an attempt
    /// counted in flight until the guard is finished or dropped.
    pub(crate) fn attempt(&self, key: usize) -> (&dyn Adapter, InFlight) {
        self.counts.in_flight.fetch_add(1, Ordering::Relaxed);
        (
            self.adapter_of(key),
            InFlight {
                counts: Arc::clone(&self.counts),
                started: Instant::now(),
                finished: false,
            },
        )
    }

    /// The adapter of key `key` (0 without a pool), for a call that is
    /// not an attempt (counting tokens).
    pub(crate) fn adapter_of(&self, key: usize) -> &dyn Adapter {
        // A key past the end (never: the pool and the adapters come from
        // the same settings) is the first's.
        match key.checked_sub(1).and_then(|k| self.others.get(k)) {
            Some(a) => &**a,
            None => &*self.adapter,
        }
    }

    /// Counts how an attempt handed over by [`InFlight::hand_over`] ended.
    pub(crate) fn end(&self, outcome: Result<(), FailureCode>, latency: Duration) {
        self.counts.end(outcome, latency);
    }
}

// === impl InFlight ===

impl InFlight {
    /// Records how the attempt ended.
    pub(crate) fn finish(mut self, outcome: Result<(), FailureCode>) {
        self.finished = true;
        self.counts.end(outcome, self.started.elapsed());
    }
}

impl InFlight {
    /// Leaves the attempt counted in flight: an opened stream is counted
    /// when it ends, by its run ([`Lease::end`]).
    pub(crate) fn hand_over(mut self) {
        self.finished = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.counts.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

// === impl Counts ===

impl Counts {
    fn end(&self, outcome: Result<(), FailureCode>, latency: Duration) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        match outcome {
            Ok(()) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                self.ok_latency_us.fetch_add(
                    u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
            Err(code) => {
                if let Some(i) = FailureCode::ALL.iter().position(|c| *c == code) {
                    self.failed[i].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn stats(&self) -> ProviderStats {
        let ok = self.ok.load(Ordering::Relaxed);
        let total_us = self.ok_latency_us.load(Ordering::Relaxed);
        ProviderStats {
            ok,
            failed: FailureCode::ALL
                .iter()
                .zip(&self.failed)
                .map(|(code, n)| (code.as_str(), n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            mean_ok_latency_ms: if ok == 0 {
                0.0
            } else {
                total_us as f64 / 1000.0 / ok as f64
            },
            credentials: None,
        }
    }
}
