//! [`Engine`]: the handle every front end uses. Cheap to clone: one `Arc`
//! over the actor references, the router's view, the event bus, the
//! metrics and the sink writers. Dropping the last clone stops the actors.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::task::JoinSet;
use understudy_types::error::Error;

use crate::actor::provider::{Lease, ProviderMsg};
use crate::actor::router::{Published, RouterMsg, current};
use crate::actor::supervisor::SupervisorMsg;
use crate::adapter::AdapterFactory;
use crate::engine_wide::EngineWide;
use crate::generation::{GenerateRequest, GenerateResult};
pub use crate::info::{KeyStatus, ProviderInfo, TargetBreaker};

mod admin;
mod reload;
mod start;

pub use reload::{ConfigStamp, ProviderChanges, Reloaded};

use crate::sink::Sink;
use crate::sink::fanout::EventBus;
use crate::sink::metrics::Metrics;
use crate::tenants::Tenants;
use admin::{apply_kept_routing, open_state};
use start::Sinks;
use understudy_policy::decide::Mode;
use understudy_settings::{Platform, Settings};

/// How long a quick query of an actor may take before it counts as gone.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Engine::warm_credentials`] waits for one provider's first
/// fetch (a token endpoint's exchange gives up after 15 s).
pub const CREDENTIALS_WAIT: Duration = Duration::from_secs(20);

/// The gateway engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    router: ActorRef<RouterMsg>,
    /// The router's view, that each request plans from.
    view: Published,
    /// Streamed runs (they outlive the call that started them), drained on
    /// shutdown.
    streams: std::sync::Mutex<JoinSet<()>>,
    supervisor: ActorRef<SupervisorMsg>,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    recent: Arc<crate::sink::recent::Recent>,
    /// The engine-wide objects every run shares (the event bus among them).
    wide: Arc<EngineWide>,
    /// Tells the sink writers to flush and stop.
    stop_sinks: tokio::sync::watch::Sender<bool>,
    /// The sink writers, joined on shutdown.
    writers: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    tenants: Arc<Tenants>,
    /// Whether spans are exported.
    tracing_on: bool,
    /// Whether a provider receives `traceparent` (so requests get a trace
    /// context even with no exporter).
    forwarding: bool,
    /// One routing change at a time, so that a change the state file could
    /// not keep is undone to the table it replaced.
    routing_writes: tokio::sync::Mutex<()>,
    /// Set once a shutdown has begun: `/readyz` answers 503 `draining`
    /// from then on, while requests are still served.
    draining: std::sync::atomic::AtomicBool,
    /// The configuration loaded last (see [`Engine::set_config_stamp`]).
    config: std::sync::RwLock<Option<ConfigStamp>>,
}

// === impl Engine ===

impl Engine {
    /// Starts the supervisor and the router. Provider actors start on first
    /// use, except those whose credentials expire (see
    /// [`Self::warm_credentials`]), started at once in the background.
    pub async fn start(
        settings: Settings,
        factory: Arc<dyn AdapterFactory>,
    ) -> Result<Self, Error> {
        Self::start_with(settings, factory, Vec::new()).await
    }

    /// [`Self::start`], with `sinks` fed beside the engine's own (the span
    /// exporter, which lives above core, is handed in this way).
    pub async fn start_with(
        settings: Settings,
        factory: Arc<dyn AdapterFactory>,
        sinks: Vec<Box<dyn Sink>>,
    ) -> Result<Self, Error> {
        let settings = Arc::new(settings);
        // Before anything starts: a state file that cannot be read stops
        // the start.
        let state = open_state(&settings)?;
        let metrics = Arc::new(Metrics::with_registered(|registry| {
            for sink in &sinks {
                sink.register(registry);
            }
        }));
        let redis = start::redis_client(&settings)?;
        let Sinks {
            bus,
            recent,
            stop: stop_sinks,
            mut writers,
            tracing_on,
        } = Sinks::start(&settings, &metrics, redis.as_ref(), sinks);
        let forwarding = settings.providers.values().any(|p| p.forward_traceparent);
        let wide = Arc::new(start::engine_wide(&settings, &metrics, redis.as_ref(), bus));
        let (tenants, kept_routing) =
            start::tenants(&settings, wide.shared.as_ref(), &metrics, state);
        if let Some(shared) = &wide.shared {
            writers.push(start::breaker_poller(shared, &wide, stop_sinks.subscribe()).await);
        }
        let view: Published = Arc::default();
        let (supervisor, router) = start::actors(&settings, factory, &wide, &view).await?;
        if let Some(shared) = &wide.shared {
            let sync = start::fleet_sync(shared, &tenants, &router, stop_sinks.subscribe());
            writers.push(sync.await);
        }
        if let Some(table) = kept_routing {
            apply_kept_routing(&router, table).await;
        }
        writers.extend(start::prober(
            &settings,
            &view,
            &wide,
            &supervisor,
            &metrics,
            stop_sinks.subscribe(),
        ));
        let engine = Self {
            inner: Arc::new(Inner {
                router,
                view,
                streams: std::sync::Mutex::new(JoinSet::new()),
                supervisor,
                settings,
                metrics,
                recent,
                wide,
                stop_sinks,
                writers: std::sync::Mutex::new(writers),
                tenants,
                tracing_on,
                forwarding,
                routing_writes: tokio::sync::Mutex::new(()),
                draining: std::sync::atomic::AtomicBool::new(false),
                config: std::sync::RwLock::new(None),
            }),
        };
        if !engine.expiring_credentials().is_empty() {
            let warm = engine.clone();
            tokio::spawn(async move { warm.warm_credentials(false).await });
        }
        Ok(engine)
    }

    /// The providers whose credentials expire or change: a cloud's
    /// (Vertex's token, Bedrock's keys from a file), as configured now.
    fn expiring_credentials(&self) -> Vec<String> {
        self.current_settings()
            .providers
            .values()
            .filter(|p| matches!(p.platform, Platform::Bedrock(_) | Platform::Vertex(_)))
            .map(|p| p.name.clone())
            .collect()
    }

    /// `provider`'s lease, its actor started if needed (`None`: no such
    /// provider, or it could not start).
    async fn lease_of(&self, provider: &str) -> Option<Lease> {
        let asked = self
            .inner
            .supervisor
            .call(
                |reply| SupervisorMsg::Ensure {
                    provider: Arc::from(provider),
                    reply,
                },
                Some(QUERY_TIMEOUT),
            )
            .await;
        match asked {
            Ok(CallResult::Success(Ok(lease))) => Some(lease),
            _ => None,
        }
    }

    /// Starts the actor of every provider whose credentials expire, so
    /// that it fetches them before a first request would have to (a
    /// provider that cannot start is skipped: requests see why). With
    /// `wait`, also waits for each one's fetch to end, at most
    /// [`CREDENTIALS_WAIT`] (for `understudy providers`, which shows
    /// when they expire or why the fetch failed).
    pub async fn warm_credentials(&self, wait: bool) {
        for provider in self.expiring_credentials() {
            let Some(lease) = self.lease_of(&provider).await else {
                continue;
            };
            if let (true, Some(credentials)) = (wait, lease.adapter_of(0).credentials()) {
                // The actor's own first fetch is under way (begun on the
                // gate before the spawn returned): this one waits for it
                // and does not fetch again.
                match credentials.gate() {
                    Some(gate) => {
                        let _ = tokio::time::timeout(CREDENTIALS_WAIT, gate.settled()).await;
                    }
                    None => {
                        let _ = tokio::time::timeout(CREDENTIALS_WAIT, credentials.refresh()).await;
                    }
                }
            }
        }
    }

    /// Runs one non-streamed generation through the decision table, on
    /// the caller's task: dropping the future (the client left) stops the
    /// walk.
    pub async fn generate(&self, request: GenerateRequest) -> GenerateResult {
        request.route.validate()?;
        request.chat.validate()?;
        // Compiling a client's schema is the caller's work, not the router's.
        understudy_policy::output::check_request(&request.chat)?;
        let started = crate::runtime_clock::now();
        let reservation = self.admit(&request).await?;
        let mut run = match self.plan_now(request, started, Mode::Answer)? {
            Ok(run) => run,
            Err(with_session) => with_session.await?,
        };
        run.reservation = reservation;
        if let Some(trace) = &run.trace {
            // From here the request makes its event (and spans).
            trace.ran();
        }
        let result = run.answer().await;
        // The session's new pin reaches the fleet before the answer goes
        // back, so that its next turn finds it on any instance.
        if let Some(write) = run.take_pin_write() {
            drop(run);
            Box::pin(write.write()).await;
        }
        result
    }

    /// Runs one streamed generation. Returns once a provider
    /// has sent its first text (the stream is then committed to it), or
    /// with the error when no target got that far. The run goes on, on a
    /// task of its own, feeding the stream.
    pub async fn generate_stream(
        &self,
        request: GenerateRequest,
    ) -> Result<crate::stream::GenerationStream, Error> {
        request.route.validate()?;
        request.chat.validate()?;
        understudy_policy::output::check_request(&request.chat)?;
        let started = crate::runtime_clock::now();
        let reservation = self.admit(&request).await?;
        let mut run = match self.plan_now(request, started, Mode::Stream)? {
            Ok(run) => run,
            Err(with_session) => with_session.await?,
        };
        run.reservation = reservation;
        if let Some(trace) = &run.trace {
            // From here the request makes its event (and spans).
            trace.ran();
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut streams = self
                .inner
                .streams
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while streams.try_join_next().is_some() {}
            // The stream's own task logs as its request's.
            let id = Arc::clone(&run.request_id);
            streams.spawn(crate::logctx::scope(id, run.stream(reply)));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::Engine(
                "the request's run ended without an answer".into(),
            ))
        })
    }

    /// Asks the request's route's Anthropic targets, in plan order, to
    /// count its input tokens (the request must carry its native Anthropic
    /// body), through the same plan and breakers as a generation: a target
    /// whose breaker is open is not called, a half-open one only with the
    /// probe, and every outcome is recorded. `Ok(None)` when no target
    /// could: the caller estimates. Returns the count and the provider
    /// that counted.
    pub async fn count_tokens(
        &self,
        request: GenerateRequest,
    ) -> Result<Option<(u64, String)>, Error> {
        request.route.validate()?;
        request.chat.validate()?;
        if let Some(record) = &request.tenant {
            self.inner
                .tenants
                .scope(record, &request.route)
                .map_err(Error::Client)?;
        }
        // Counting makes no event, so no spans: no notes for them either.
        let request = GenerateRequest {
            trace: None,
            ..request
        };
        let run = self.prepare(request, crate::runtime_clock::now(), Mode::Answer)?;
        run.count_tokens().await
    }

    /// Admits a request of a client record against its limits (`None`:
    /// the key has no record).
    async fn admit(
        &self,
        request: &GenerateRequest,
    ) -> Result<Option<crate::tenants::Reservation>, Error> {
        let Some(record) = &request.tenant else {
            return Ok(None);
        };
        let tenants = &self.inner.tenants;
        // A budget reserves the worst case at the dearest target the route
        // can reach.
        let prices = match (record.budget_nanos, current(&self.inner.view)) {
            (Some(_), Some(view)) => crate::run::route_prices(&view, request),
            _ => Vec::new(),
        };
        // Boxed, so that a request without a record does not carry the
        // admission's future in its own.
        Box::pin(tenants.admit(record, &request.route, &request.chat, &prices))
            .await
            .map(Some)
            .map_err(Error::Client)
    }

    /// `request`'s run planned now (its session looked up first where its
    /// route has a choice, affinity is on and the pins are this process's),
    /// or (`Err`), with Redis, the boxed step that looks its session up
    /// there and plans with its pin: a request without one carries a
    /// pointer, not the lookup's future.
    #[expect(clippy::type_complexity, reason = "one boxed future, said once")]
    fn plan_now(
        &self,
        request: GenerateRequest,
        started: Instant,
        mode: Mode,
    ) -> Result<
        Result<
            crate::run::Run,
            std::pin::Pin<Box<dyn Future<Output = Result<crate::run::Run, Error>> + Send>>,
        >,
        Error,
    > {
        let view = current(&self.inner.view)
            .ok_or_else(|| Error::Engine("the router is not running".into()))?;
        let wide = &self.inner.wide;
        let affinity = match &wide.affinity {
            Some(a) if crate::run::Looked::applies(&view, &request, &a.settings) => a,
            _ => return crate::run::prepare(&view, wide, request, started, mode, None).map(Ok),
        };
        if affinity.is_local() {
            // Pins in this process alone: looked up here, nothing boxed.
            let looked = crate::run::Looked::here(affinity, &request);
            return crate::run::prepare(&view, wide, request, started, mode, Some(looked)).map(Ok);
        }
        let affinity = Arc::clone(affinity);
        let wide = Arc::clone(wide);
        Ok(Err(Box::pin(async move {
            let looked = crate::run::Looked::of(&affinity, &request).await;
            crate::run::prepare(&view, &wide, request, started, mode, Some(looked))
        })))
    }

    /// `request`'s run, planned from the router's view in force.
    fn prepare(
        &self,
        request: GenerateRequest,
        started: Instant,
        mode: Mode,
    ) -> Result<crate::run::Run, Error> {
        let view = current(&self.inner.view)
            .ok_or_else(|| Error::Engine("the router is not running".into()))?;
        crate::run::prepare(&view, &self.inner.wide, request, started, mode, None)
    }

    /// The routes that no target can serve now, and why each target
    /// cannot (empty: ready). See [`crate::readiness`].
    pub async fn readiness(&self) -> Result<Vec<crate::readiness::UnreadyRoute>, Error> {
        let providers = self.providers().await?;
        let view = current(&self.inner.view)
            .ok_or_else(|| Error::Engine("the router is not running".into()))?;
        let routes: Vec<(String, Vec<understudy_types::Target>)> =
            std::iter::once(("default".to_owned(), view.default_route.clone()))
                .chain(view.routes.iter().map(|(n, t)| (n.clone(), t.clone())))
                .map(|(name, targets)| {
                    (
                        name,
                        understudy_policy::plan::cloud_ids(targets, &view.settings),
                    )
                })
                .collect();
        let ready = &self.inner.wide.ready;
        Ok(crate::readiness::unready(&routes, &providers, |t| {
            ready.is_down(t)
        }))
    }

    /// Whether the configured Redis can be reached now (`None`: no Redis
    /// is configured). Cheap: the last call's outcome while it is fresh
    /// (see [`crate::shared::SharedState::reach`]).
    pub async fn redis_reach(&self) -> Option<crate::shared::Reach> {
        match &self.inner.wide.shared {
            Some(shared) => Some(shared.reach().await),
            None => None,
        }
    }

    /// Marks the engine as draining: a shutdown has begun, so load
    /// balancers must stop sending it traffic (see [`Self::draining`]).
    pub fn start_draining(&self) {
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a shutdown has begun (the gateway may still serve during
    /// its grace period and while requests in flight finish).
    pub fn draining(&self) -> bool {
        self.inner
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every provider with its availability, sorted by routing order.
    pub async fn providers(&self) -> Result<Vec<ProviderInfo>, Error> {
        let mut infos = match self
            .inner
            .router
            .call(RouterMsg::Providers, Some(QUERY_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(infos)) => infos,
            _ => return Err(Error::Engine("the router is not running".into())),
        };
        let running = match self
            .inner
            .supervisor
            .call(SupervisorMsg::Running, Some(QUERY_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(running)) => running,
            _ => Vec::new(),
        };
        for (name, actor) in running {
            if let Some(info) = infos.iter_mut().find(|i| *i.name == *name) {
                if let Ok(CallResult::Success(stats)) =
                    actor.call(ProviderMsg::Stats, Some(QUERY_TIMEOUT)).await
                {
                    // Credentials that cannot be had make it unavailable,
                    // as the runs find it (they pass it over).
                    if let (true, Some(why)) = (info.available, &stats.credentials_unusable) {
                        info.available = false;
                        info.unavailable_reason = Some(why.clone());
                    }
                    info.stats = Some(stats);
                }
            }
        }
        Ok(infos)
    }

    /// Whether requests get a trace context: spans are exported, or a
    /// provider receives `traceparent`.
    pub fn traces_on(&self) -> bool {
        self.inner.tracing_on || self.inner.forwarding
    }

    /// A request's trace context, when traces are on (see
    /// [`Self::traces_on`]): the caller's `traceparent` and `tracestate`
    /// continued (unless `telemetry.follow_traceparent` is off), or a new
    /// trace, sampled by `OTEL_TRACES_SAMPLER`. With no exporter the context
    /// is only passed on: the caller's sampled flag, never recorded.
    pub fn trace_context(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> Option<Arc<crate::trace::TraceContext>> {
        use understudy_settings::{RootSampler, Sampler};
        if !self.traces_on() {
            return None;
        }
        let t = &self.inner.settings.telemetry;
        let (traceparent, tracestate) = if t.follow_traceparent {
            (traceparent, tracestate)
        } else {
            (None, None)
        };
        let sampler = if self.inner.tracing_on {
            t.sampler
        } else {
            Sampler::ParentBased(RootSampler::AlwaysOff)
        };
        let context = crate::trace::TraceContext::new(traceparent, tracestate, sampler);
        Some(Arc::new(if self.inner.tracing_on {
            context
        } else {
            context.not_recorded()
        }))
    }

    /// The client records and their counters.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.inner.tenants
    }

    /// The settings the engine started with: what a reload cannot change
    /// (the listen address, `[server]`'s limits, …) is read here; what it
    /// can, from [`Self::current_settings`].
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Stops accepting requests, lets the runs in flight finish (bounded by
    /// the request timeout), stops the provider actors, then flushes the
    /// event sinks (bounded by `events.flush_timeout`).
    pub async fn shutdown(&self) {
        self.shutdown_within(self.inner.settings.timeouts.request)
            .await;
    }

    /// [`Self::shutdown`], with the streamed runs still going after
    /// `streams_bound` cut (a drain past its deadline passes what is left of
    /// it, or zero).
    pub async fn shutdown_within(&self, streams_bound: Duration) {
        let _ = self.inner.router.stop_and_wait(None, None).await;
        let mut streams = std::mem::take(
            &mut *self
                .inner
                .streams
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let drain = async { while streams.join_next().await.is_some() {} };
        if tokio::time::timeout(streams_bound, drain).await.is_err() {
            streams.abort_all();
        }
        let _ = self
            .inner
            .supervisor
            .stop_and_wait(None, Some(QUERY_TIMEOUT))
            .await;
        let _ = self.inner.stop_sinks.send(true);
        let writers: Vec<_> = std::mem::take(
            &mut *self
                .inner
                .writers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // The span exporter's last export may take its own timeout.
        let settings = &self.inner.settings;
        let bound = settings
            .events
            .flush_timeout
            .max(settings.telemetry.export_timeout)
            + Duration::from_secs(1);
        for w in writers {
            if w.is_finished() {
                continue;
            }
            if tokio::time::timeout(bound, w).await.is_err() {
                tracing::warn!("an event writer did not finish in time");
            }
        }
    }

    /// The metrics, for `GET /metrics`. Availability gauges are refreshed
    /// first.
    pub async fn metrics_text(&self, openmetrics: bool) -> String {
        if let Ok(providers) = self.providers().await {
            for p in providers {
                let labels = crate::sink::metrics::ProviderLabels {
                    provider: p.name.clone(),
                };
                self.inner
                    .metrics
                    .provider_up
                    .get_or_create(&labels)
                    .set(i64::from(p.available));
            }
        }
        if openmetrics {
            self.inner.metrics.openmetrics()
        } else {
            self.inner.metrics.prometheus_text()
        }
    }

    /// How each member of a group of equivalent targets stands (smoothed
    /// time to first output, in flight, ejected, cache-read share), for the
    /// status; empty when no route has a group.
    pub fn target_stats(&self) -> Vec<crate::actor::target_stats::TargetStatsView> {
        current(&self.inner.view)
            .map(|view| view.stats.views(crate::runtime_clock::now()))
            .unwrap_or_default()
    }

    /// Each probed target's readiness as the last probe (this
    /// instance's or the fleet's) found it, for the status.
    pub fn target_readiness(&self) -> Vec<crate::probe::TargetReadiness> {
        self.inner.wide.ready.snapshot()
    }

    /// Probes every target now, from this instance (with calls that
    /// generate nothing), and returns each one's readiness: `understudy
    /// providers --check`. A one-off check tells the fleet nothing: a
    /// key it finds refused (say, an old secret on an operator's machine
    /// under a key's name) is not put out on the serving instances.
    pub async fn probe_now(&self) -> Vec<crate::probe::TargetReadiness> {
        crate::probe::probe_all(
            &self.inner.settings,
            &self.inner.wide.ready,
            &self.inner.supervisor,
            &self.inner.metrics,
            &self.inner.wide.pools.current(),
            None,
        )
        .await;
        self.target_readiness()
    }

    /// The last events and per-second traffic, for the status page.
    pub fn recent(&self) -> &crate::sink::recent::Recent {
        &self.inner.recent
    }

    /// The event bus, for front ends that record generations themselves.
    pub fn events(&self) -> &EventBus {
        &self.inner.wide.bus
    }

    /// Makes the provider's actor panic (starting it first if needed), to
    /// test supervision. Only with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub async fn inject_provider_panic(&self, provider: &str) -> Result<(), Error> {
        match self.lease_of(provider).await {
            Some(lease) => lease
                .actor
                .cast(ProviderMsg::Panic)
                .map_err(|_| Error::Engine("provider actor stopped".into())),
            None => Err(Error::UnknownProvider(provider.to_owned())),
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("router", &self.inner.router.get_id())
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.router.stop(None);
        self.supervisor.stop(None);
    }
}
