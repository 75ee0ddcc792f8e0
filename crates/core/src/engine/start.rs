//! What [`super::Engine::start`] starts, one part each: the Redis client,
//! the event sinks' writers, the engine-wide objects (and the client
//! records), the fleet's breaker poller, the supervisor and the router, and
//! the fleet's records-and-routing sync.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::actor::router::{Published, RouterActor, RouterArgs, RouterMsg};
use crate::actor::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};
use crate::adapter::AdapterFactory;
use crate::breakers::BreakerBoard;
use crate::cache::ResponseCache;
use crate::engine_wide::EngineWide;
use crate::fleet_poll::{BreakerPoller, configured_targets};
use crate::key_pools::{KeyPool, KeyPools, LivePools};
use crate::shared::SharedState;
use crate::sink::BoxFuture;
use crate::sink::Sink;
use crate::sink::fanout::EventBus;
use crate::sink::metrics::Metrics;
use crate::sink::recent::Recent;
use crate::spend::SpendMeter;
use crate::tenants::fleet::{FleetSync, RoutingHolder};
use crate::tenants::{Kept, StateFile, Tenants};
use understudy_settings::{RoutingTable, RoutingUpdate, Settings};
use understudy_types::error::Error;

/// The event sinks, started: the bus they read from, what tells them to
/// stop, their writers (joined on shutdown), and whether spans are
/// exported.
pub(super) struct Sinks {
    pub bus: EventBus,
    pub recent: Arc<Recent>,
    pub stop: watch::Sender<bool>,
    pub writers: Vec<JoinHandle<()>>,
    pub tracing_on: bool,
}

/// The Redis client, when `redis_url` is set (no connection is made yet).
pub(super) fn redis_client(settings: &Settings) -> Result<Option<redis::Client>, Error> {
    match &settings.redis_url {
        Some(url) => redis::Client::open(url.expose())
            .map(Some)
            .map_err(|_| Error::Engine("REDIS_URL is not a valid redis:// URL".into())),
        None => Ok(None),
    }
}

impl Sinks {
    /// Adds the sinks that record as events are published (the metrics,
    /// the recent events) and starts a writer per queued sink: Redis (when
    /// configured) and each `extra` sink the engine was handed (the span
    /// exporter, which lives above core).
    pub(super) fn start(
        settings: &Arc<Settings>,
        metrics: &Arc<Metrics>,
        redis: Option<&redis::Client>,
        extra: Vec<Box<dyn Sink>>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let mut bus = EventBus::default();
        let mut writers = Vec::new();
        let genai_names = settings
            .providers
            .keys()
            .map(|name| {
                (
                    name.clone(),
                    crate::sink::genai::provider_name(name, settings),
                )
            })
            .collect();
        bus.add_inline(Arc::new(crate::sink::metrics::MetricsSink::new(
            Arc::clone(metrics),
            genai_names,
        )));
        let recent = Arc::new(Recent::default());
        bus.add_inline(Arc::clone(&recent) as Arc<dyn crate::sink::fanout::Inline>);
        if let Some(client) = redis {
            let rx = bus.add("redis", metrics.dropped("redis"));
            writers.push(tokio::spawn(crate::sink::redis::run(
                settings.events.clone(),
                client.clone(),
                Arc::clone(metrics),
                metrics.dropped("redis"),
                rx,
                stopped,
            )));
        }
        let tracing_on = extra.iter().any(|s| s.exports_spans());
        if settings.telemetry.traces_endpoint.is_some() && !tracing_on {
            tracing::warn!("a traces endpoint is set, but no span exporter was started");
        }
        for sink in extra {
            let rx = bus.add(sink.name(), metrics.dropped(sink.name()));
            writers.push(tokio::spawn(sink.run(
                Arc::clone(settings),
                rx,
                stop.subscribe(),
            )));
        }
        Self {
            bus,
            recent,
            stop,
            writers,
            tracing_on,
        }
    }
}

/// The engine-wide objects over the event `bus`: the fleet's shared state
/// (with Redis), the response cache, the breaker board, the key pools and
/// the spend meter.
pub(super) fn engine_wide(
    settings: &Settings,
    metrics: &Arc<Metrics>,
    redis: Option<&redis::Client>,
    bus: EventBus,
) -> EngineWide {
    let shared =
        redis.map(|client| Arc::new(SharedState::new(client.clone(), Arc::clone(metrics))));
    let cache = Arc::new(ResponseCache::new(settings.cache.clone(), redis.cloned()));
    let board = Arc::new(BreakerBoard::new(
        settings.breaker,
        configured_targets(settings),
        settings.server.max_pinned_targets,
        Arc::clone(metrics),
    ));
    let pools = Arc::new(LivePools::new(KeyPools::new(
        settings.providers.values().filter_map(KeyPool::of),
    )));
    let ready = Arc::new(crate::probe::ReadyBoard::new(
        crate::probe::probed_targets(settings),
        Arc::clone(metrics),
    ));
    EngineWide {
        ready,
        bus: Arc::new(bus),
        cache,
        board,
        pools,
        spend: settings
            .budget
            .map(|b| Arc::new(SpendMeter::new(b, shared.clone()))),
        affinity: crate::affinity::Affinity::new(settings, shared.clone()).map(Arc::new),
        shared,
    }
}

/// The client records (the state file's among them), and the routing
/// table the state file kept, if any.
pub(super) fn tenants(
    settings: &Settings,
    shared: Option<&Arc<SharedState>>,
    metrics: &Arc<Metrics>,
    state: Option<(StateFile, Kept)>,
) -> (Arc<Tenants>, Option<RoutingTable>) {
    let mut tenants = Tenants::new(&settings.server, shared.cloned(), Arc::clone(metrics));
    let mut kept_routing = None;
    if let Some((file, kept)) = state {
        tenants = tenants.with_state_file(file, kept.clients);
        kept_routing = kept.routing;
    }
    (Arc::new(tenants), kept_routing)
}

/// Reads the fleet's breakers once, before the first request (so a new
/// instance never pays an outage the fleet already knows of), then starts
/// polling them.
pub(super) async fn breaker_poller(
    shared: &Arc<SharedState>,
    wide: &EngineWide,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut poller = BreakerPoller::new(
        Arc::clone(shared),
        Arc::clone(&wide.board),
        Arc::clone(&wide.pools),
    );
    poller.poll().await;
    tokio::spawn(poller.run(stop))
}

/// Starts the supervisor, then the router (publishing its view to
/// `view`), and tells the supervisor where to send its notices.
pub(super) async fn actors(
    settings: &Arc<Settings>,
    factory: Arc<dyn AdapterFactory>,
    wide: &Arc<EngineWide>,
    view: &Published,
) -> Result<(ActorRef<SupervisorMsg>, ActorRef<RouterMsg>), Error> {
    let (supervisor, _) = Actor::spawn(
        None,
        SupervisorActor,
        SupervisorArgs {
            settings: Arc::clone(settings),
            factory: Arc::clone(&factory),
        },
    )
    .await
    .map_err(|e| Error::Engine(format!("supervisor failed to start: {e}")))?;
    let router = Actor::spawn(
        None,
        RouterActor,
        RouterArgs {
            settings: Arc::clone(settings),
            factory,
            supervisor: supervisor.clone(),
            wide: Arc::clone(wide),
            published: Arc::clone(view),
        },
    )
    .await;
    let router = match router {
        Ok((router, _)) => router,
        Err(e) => {
            supervisor.stop(None);
            return Err(Error::Engine(format!("router failed to start: {e}")));
        }
    };
    let notify_router = router.clone();
    supervisor
        .cast(SupervisorMsg::Attach(Box::new(move |notice| {
            let _ = notify_router.cast(RouterMsg::Provider(notice));
        })))
        .map_err(|_| Error::Engine("supervisor stopped during start".into()))?;
    Ok((supervisor, router))
}

/// Starts the readiness prober, when `[probe]` is on.
pub(super) fn prober(
    settings: &Arc<Settings>,
    view: &crate::actor::router::Published,
    wide: &EngineWide,
    supervisor: &ActorRef<SupervisorMsg>,
    metrics: &Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if !settings.probe.enabled {
        return None;
    }
    let prober = crate::probe::Prober {
        settings: Arc::clone(settings),
        live: {
            let view = Arc::clone(view);
            Box::new(move || crate::actor::router::current(&view).map(|v| Arc::clone(&v.settings)))
        },
        board: Arc::clone(&wide.ready),
        supervisor: supervisor.clone(),
        shared: wide.shared.clone(),
        metrics: Arc::clone(metrics),
        pools: Arc::clone(&wide.pools),
    };
    Some(tokio::spawn(prober.run(stop)))
}

/// Reads the fleet's client records and routing once, before the first
/// request, then starts keeping them in step.
pub(super) async fn fleet_sync(
    shared: &Arc<SharedState>,
    tenants: &Arc<Tenants>,
    router: &ActorRef<RouterMsg>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut sync = FleetSync {
        shared: Arc::clone(shared),
        tenants: Arc::clone(tenants),
        router: FleetRouting(router.clone()),
        seen: (None, None),
    };
    sync.sync().await;
    tokio::spawn(sync.run(stop))
}

/// The router, as the holder of the fleet's routing table (asked within
/// 5 s).
#[derive(Debug)]
pub(super) struct FleetRouting(ActorRef<RouterMsg>);

impl RoutingHolder for FleetRouting {
    fn set_routing(&self, update: RoutingUpdate) -> BoxFuture<'_, Option<Result<(), Error>>> {
        Box::pin(async move {
            let asked = |reply| RouterMsg::SetRouting { update, reply };
            match self.0.call(asked, Some(Duration::from_secs(5))).await {
                Ok(ractor::rpc::CallResult::Success(applied)) => Some(applied.map(drop)),
                _ => None,
            }
        })
    }

    fn keep_stored(&self, table: RoutingTable) {
        let _ = self.0.cast(RouterMsg::KeepStored(Some(table)));
    }
}
