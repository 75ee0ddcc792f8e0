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
//!
//! Credentials that cannot be had (a missing or broken key file, a token
//! endpoint that refuses or hangs) do not fail the spawn: adapters are
//! built without them, the actor keeps trying on its schedule (so that
//! fixing the file recovers the provider without a restart), and until
//! then requests pass the provider over ([`crate::credentials`]) and
//! `understudy providers` shows it unavailable, with why.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use understudy_settings::ProviderSettings;
use understudy_types::failure::{Failure, FailureCode, FailureKind};

use crate::adapter::{Adapter, AdapterFactory, BoxFuture, Credentials};
use crate::credentials::CredentialGate;
use crate::info::ProviderStats;

/// Messages of [`ProviderActor`].
pub(crate) enum ProviderMsg {
    /// Counts of recent outcomes, for `understudy providers` and the API.
    Stats(RpcReplyPort<ProviderStats>),
    /// Time to refresh the credentials of key `n` (0 without a pool), as
    /// scheduled at the given epoch (a timer of an older epoch is stale:
    /// every refresh that ends schedules the next one afresh).
    Refresh(usize, u64),
    /// A fetch of key `n`'s credentials was begun on its gate (by a
    /// request that found none held, or at start): make it.
    Fetch(usize),
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
    /// The adapter of the pool's first key (`crate::key_pools::KeyPool`'s
    /// order), else the one.
    adapter: Arc<dyn Adapter>,
    /// The adapters of the pool's other keys, in order.
    others: Arc<[Arc<dyn Adapter>]>,
    /// Per key, in the same order: the credentials its adapter signs
    /// with, where they expire or change.
    credentials: Arc<[Option<Arc<dyn Credentials>>]>,
    counts: Arc<Counts>,
}

/// The actor's record of recent outcomes, counted by the runs that make
/// the attempts (atomics: no lock, no message); and what the lease was
/// built for, shared by its clones.
#[derive(Default)]
struct Counts {
    /// The actor was stopped by a reload (not failed): the runs that hold
    /// the lease finish on it, with the key pool they planned with.
    retired: AtomicBool,
    /// The fleet ids of the keys the adapters sign with, in order (empty
    /// without a pool): the pool the lease fits.
    keys: Box<[Arc<str>]>,
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
    /// The provider's name, for its log lines.
    name: String,
    lease: Lease,
    /// Per key: the refreshes that failed in a row (the next one waits
    /// longer), the epoch of its refresh timer, and the error last logged
    /// (a failure is logged at WARN once per change, not per retry).
    failed_refreshes: Vec<u32>,
    epochs: Vec<u64>,
    logged: Vec<Option<String>>,
}

/// The longest one refresh may take before it counts as failed, on the
/// actor's task (a token endpoint's exchange gives up after 15 s itself).
pub(crate) const REFRESH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

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
        let credentials: Arc<[Option<Arc<dyn Credentials>>]> = std::iter::once(&adapter)
            .chain(others.iter())
            .map(|a| a.credentials())
            .collect();
        let lease = Lease {
            actor: myself.clone(),
            adapter,
            others: others.into(),
            credentials: Arc::clone(&credentials),
            counts: Arc::new(Counts {
                keys: key_ids(&args.settings),
                ..Counts::default()
            }),
        };
        for (n, c) in credentials.iter().enumerate() {
            let Some(c) = c else { continue };
            // The first credentials are fetched at once, not on the
            // first request; the fetch is begun on the gate here, so that
            // a request (or `understudy providers`) arriving before this
            // actor's first message waits for it rather than start another.
            match c.gate() {
                Some(gate) => {
                    let me = myself.clone();
                    gate.attach(Box::new(move || me.cast(ProviderMsg::Fetch(n)).is_ok()));
                    if gate.try_begin() {
                        let _ = myself.cast(ProviderMsg::Fetch(n));
                    }
                }
                None => {
                    let _ = myself.cast(ProviderMsg::Refresh(n, 0));
                }
            }
        }
        let _ = args.lease_to.send(lease.clone());
        Ok(ProviderState {
            name: args.settings.name.clone(),
            failed_refreshes: vec![0; credentials.len()],
            epochs: vec![0; credentials.len()],
            logged: vec![None; credentials.len()],
            lease,
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
                let credentials = &state.lease.credentials;
                let mut stats = state.lease.counts.stats();
                stats.credentials = credentials.iter().flatten().next().map(|c| c.status());
                stats.credentials_unusable = unusable(credentials);
                let _ = reply.send(stats);
            }
            ProviderMsg::Refresh(n, epoch) => {
                if state.epochs.get(n) != Some(&epoch) {
                    return Ok(());
                }
                if let Some(Some(c)) = state.lease.credentials.get(n) {
                    // A fetch under way (a request's) schedules the next
                    // refresh when it ends.
                    if c.gate().is_none_or(CredentialGate::try_begin) {
                        spawn_refresh(&myself, n, Arc::clone(c));
                    }
                }
            }
            ProviderMsg::Fetch(n) => {
                if let Some(Some(c)) = state.lease.credentials.get(n) {
                    spawn_refresh(&myself, n, Arc::clone(c));
                }
            }
            ProviderMsg::Refreshed(n, result) => state.refreshed(&myself, n, result),
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
/// `crate::key_pools::KeyPool`'s order: the first, then the others), else the
/// one.
/// The fleet ids of `settings`' pool keys that have their secret, in the
/// pool's order (those its adapters are built for).
fn key_ids(settings: &ProviderSettings) -> Box<[Arc<str>]> {
    crate::key_pools::present(settings)
        .into_iter()
        .filter_map(|i| settings.pool.keys[i].secret.as_ref())
        .map(crate::key_pools::key_id)
        .collect()
}

/// Whether adapters built for the keys `keys` ([`key_ids`]) sign with
/// `pool`'s keys, in its order.
fn keys_fit(keys: &[Arc<str>], pool: Option<&crate::key_pools::KeyPool>) -> bool {
    pool.map_or(&[][..], |p| &p.ids[..]) == keys
}

fn build_adapters(
    factory: &dyn AdapterFactory,
    settings: &ProviderSettings,
) -> Result<Adapters, String> {
    let mut built = crate::key_pools::present(settings).into_iter().map(|i| {
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

/// Refreshes `credentials` (key `n`'s) on a task of its own, so that the
/// actor keeps answering while a token endpoint is slow and a request that
/// stops waiting cancels nothing; always answered with `Refreshed`, so
/// that the next refresh is always scheduled (a refresh that panics or
/// hangs is a failed one).
fn spawn_refresh(myself: &ActorRef<ProviderMsg>, n: usize, credentials: Arc<dyn Credentials>) {
    let myself = myself.clone();
    tokio::spawn(async move {
        let result = crate::credentials::refresh(credentials, REFRESH_TIMEOUT).await;
        let _ = myself.cast(ProviderMsg::Refreshed(n, result));
    });
}

/// Why the provider cannot sign a request now, when no key's credentials
/// can (a pool is available while one key's are): still fetching the
/// first ones, or why they cannot be had. Names no file.
fn unusable(credentials: &[Option<Arc<dyn Credentials>>]) -> Option<String> {
    let mut why = None;
    for c in credentials {
        match c {
            None => return None,
            Some(c) if c.usable() => return None,
            Some(c) => {
                why.get_or_insert_with(|| match c.status().error {
                    Some(e) => format!("credentials unusable: {e}"),
                    None if c.gate().is_some_and(CredentialGate::fetching) => {
                        "credentials not fetched yet".to_owned()
                    }
                    None => "credentials unusable".to_owned(),
                });
            }
        }
    }
    why
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
    match tokio::time::timeout_at(deadline.into(), CatchUnwind(attempt)).await {
        Ok(Ok(result)) => result,
        Ok(Err(())) => {
            let _ = actor.cast(ProviderMsg::AdapterPanicked);
            Err(Failure::new(
                FailureKind::Unavailable { retry_after: None },
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

/// What a refresh's end is worth a log line, given the error last logged
/// (`None`: none since the credentials were last had): a failure once per
/// change of its reason (WARN), a recovery once (INFO), never once per
/// retry.
#[derive(Debug, PartialEq, Eq)]
enum LogChange<'a> {
    Failing(&'a str),
    Same,
    Recovered,
    Quiet,
}

fn log_change<'a>(logged: Option<&str>, result: &'a Result<(), String>) -> LogChange<'a> {
    match (logged, result) {
        (None, Ok(())) => LogChange::Quiet,
        (Some(_), Ok(())) => LogChange::Recovered,
        (Some(was), Err(e)) if was == e => LogChange::Same,
        (_, Err(e)) => LogChange::Failing(e),
    }
}

// === impl ProviderState ===

impl ProviderState {
    /// A refresh of key `n`'s credentials ended: the next one scheduled
    /// (when they say, or backing off after a failure), and a change of
    /// state logged once — at WARN when they fail, with the detail only
    /// the log gets.
    fn refreshed(&mut self, myself: &ActorRef<ProviderMsg>, n: usize, result: Result<(), String>) {
        let (Some(failed), Some(epoch), Some(logged)) = (
            self.failed_refreshes.get_mut(n),
            self.epochs.get_mut(n),
            self.logged.get_mut(n),
        ) else {
            return;
        };
        let credentials = self.lease.credentials.get(n).and_then(Option::as_ref);
        let held = credentials.is_some_and(|c| c.usable());
        match log_change(logged.as_deref(), &result) {
            LogChange::Recovered => {
                tracing::info!(provider = %self.name, "the provider's credentials are usable again");
            }
            LogChange::Failing(e) if held => {
                tracing::warn!(provider = %self.name, error = %e, "refreshing the provider's credentials failed; the held ones stay in use");
            }
            LogChange::Failing(e) => {
                tracing::warn!(provider = %self.name, error = %e, "the provider's credentials cannot be had: requests pass it over until they can");
            }
            LogChange::Same => {
                tracing::debug!(provider = %self.name, "the provider's credentials still cannot be refreshed");
            }
            LogChange::Quiet => {}
        }
        let next = match result {
            Ok(()) => {
                *logged = None;
                *failed = 0;
                credentials.and_then(|c| c.refresh_in())
            }
            Err(e) => {
                *logged = Some(e);
                *failed = failed.saturating_add(1);
                Some(refresh_backoff(*failed - 1))
            }
        };
        *epoch += 1;
        if let Some(next) = next {
            let epoch = *epoch;
            myself.send_after(next, move || ProviderMsg::Refresh(n, epoch));
        }
    }
}

// === impl Lease ===

impl Lease {
    /// Marks the lease's actor as stopped by a reload: the runs holding
    /// the lease keep using it (see [`Self::retired`]).
    pub(crate) fn retire(&self) {
        self.counts.retired.store(true, Ordering::Relaxed);
    }

    /// Whether the actor was stopped by a reload rather than failed.
    pub(crate) fn retired(&self) -> bool {
        self.counts.retired.load(Ordering::Relaxed)
    }

    /// Whether the adapters sign with `pool`'s keys, in its order (no
    /// pool: the lease has none either), so that the pool's key `k` is
    /// the adapter of `k`.
    pub(crate) fn fits(&self, pool: Option<&crate::key_pools::KeyPool>) -> bool {
        keys_fit(&self.counts.keys, pool)
    }

    /// The adapter of key `key` (0 without a pool), with an attempt
    /// counted in flight until the guard is finished or dropped.
    pub(crate) fn attempt(&self, key: usize) -> (&dyn Adapter, InFlight) {
        self.counts.in_flight.fetch_add(1, Ordering::Relaxed);
        (
            self.adapter_of(key),
            InFlight {
                counts: Arc::clone(&self.counts),
                started: crate::runtime_clock::now(),
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

    /// Whether key `key`'s credentials (0 without a pool) are held, or will
    /// be within [`crate::credentials::CREDENTIAL_WAIT`]: `false` passes
    /// the target over.
    pub(crate) async fn credentials_ready(&self, key: usize) -> bool {
        let slot = match self.credentials.get(key) {
            Some(slot) => slot,
            None => match self.credentials.first() {
                Some(slot) => slot,
                None => return true,
            },
        };
        match slot {
            None => true,
            Some(c) => match c.gate() {
                Some(gate) => gate.ready(|| c.usable()).await,
                None => c.usable(),
            },
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
        self.counts
            .end(outcome, crate::runtime_clock::since(self.started));
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
            credentials_unusable: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_fits_only_a_pool_of_its_keys_in_its_order() {
        let provider = |keys: &str| {
            let toml = format!(
                "[providers.b]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\n\
                 model = \"m\"\n{keys}\n"
            );
            understudy_settings::Settings::from_toml_str(&toml, |_| None)
                .unwrap()
                .providers["b"]
                .clone()
        };
        let (k1, k2, k3) = (
            "\"k-1-0123456789\"",
            "\"k-2-0123456789\"",
            "\"k-3-0123456789\"",
        );
        let pool = |keys: String| provider(&format!("api_keys = [{keys}]"));
        // (the lease's keys, the run's pool, whether the pool's key `k` is
        // the lease's adapter `k`)
        let cases = [
            (
                "same keys",
                pool(format!("{k1}, {k2}")),
                pool(format!("{k1}, {k2}")),
                true,
            ),
            (
                "reordered",
                pool(format!("{k1}, {k2}")),
                pool(format!("{k2}, {k1}")),
                false,
            ),
            (
                "rotated",
                pool(format!("{k1}, {k2}")),
                pool(format!("{k1}, {k3}")),
                false,
            ),
            (
                "one added",
                pool(k1.to_string()),
                pool(format!("{k1}, {k2}")),
                false,
            ),
            (
                "one key, no pool",
                provider("api_key = \"k-0123456789\""),
                provider("api_key = \"k-9876543210\""),
                true,
            ),
            (
                "a pool against none",
                pool(format!("{k1}, {k2}")),
                provider("api_key = \"k-0123456789\""),
                false,
            ),
        ];
        for (what, lease, planned, fits) in cases {
            let pool = crate::key_pools::KeyPool::of(&planned);
            assert_eq!(keys_fit(&key_ids(&lease), pool.as_deref()), fits, "{what}");
        }
    }

    #[test]
    fn a_credentials_failure_is_logged_once_per_change() {
        let broken: Result<(), String> = Err("the key file is not JSON".into());
        let other: Result<(), String> = Err("the token endpoint refused".into());
        // A run of refreshes: what each one logs, the error logged before
        // it carried along as the actor carries it.
        let run = [
            (Ok(()), LogChange::Quiet),
            (
                broken.clone(),
                LogChange::Failing("the key file is not JSON"),
            ),
            (broken.clone(), LogChange::Same),
            (broken.clone(), LogChange::Same),
            (
                other.clone(),
                LogChange::Failing("the token endpoint refused"),
            ),
            (Ok(()), LogChange::Recovered),
            (Ok(()), LogChange::Quiet),
            (
                broken.clone(),
                LogChange::Failing("the key file is not JSON"),
            ),
        ];
        let mut logged: Option<String> = None;
        for (i, (result, want)) in run.iter().enumerate() {
            assert_eq!(log_change(logged.as_deref(), result), *want, "refresh {i}");
            logged = result.as_ref().err().cloned();
        }
    }
}
