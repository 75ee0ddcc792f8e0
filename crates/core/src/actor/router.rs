//! The router: plans each request from its availability snapshot and runs
//! the plan on a spawned task. Its `handle` never awaits anything slow, so
//! one router serves any number of concurrent requests.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::actor::provider::ProviderMsg;
use crate::actor::supervisor::{ProviderNotice, SupervisorMsg};
use crate::adapter::AdapterFactory;
use crate::breakers::BreakerBoard;
use crate::cache::ResponseCache;
use crate::generation::{GenerateRequest, GenerateResult};
use crate::info::{KeyStatus, ProviderInfo, TargetBreaker};
use crate::policy::decide::{Mode, Rules};
use crate::policy::plan::{self, Target, Unavailable};
use crate::policy::timeouts::request_timeout;
use crate::run::Run;
use crate::settings::{Routing, RoutingTable, RoutingUpdate, Settings, routing_table};
use crate::shared::SharedState;
use crate::sink::fanout::EventBus;
use crate::spend::SpendMeter;

/// Messages of [`RouterActor`].
pub(crate) enum RouterMsg {
    /// Plan and run one request; the spawned run replies (and stops
    /// walking the plan when the caller is gone).
    Generate {
        request: GenerateRequest,
        started: Instant,
        reply: tokio::sync::oneshot::Sender<GenerateResult>,
    },
    /// Plan and run one streamed request; the run replies at the commit.
    GenerateStream {
        request: GenerateRequest,
        started: Instant,
        reply: tokio::sync::oneshot::Sender<Result<crate::GenerationStream, crate::Error>>,
    },
    /// Plan one request and count its input tokens through that plan's
    /// breakers (`Engine::count_tokens`).
    CountTokens {
        request: GenerateRequest,
        started: Instant,
        reply: tokio::sync::oneshot::Sender<crate::run::CountResult>,
    },
    /// From the supervisor: a provider actor (re)started (use this ref
    /// from now on), or its restart budget ran out (leave it out of plans).
    Provider(ProviderNotice),
    /// The static view of every provider.
    Providers(RpcReplyPort<Vec<ProviderInfo>>),
    /// The current routing table.
    GetRouting(RpcReplyPort<RoutingTable>),
    /// Changes the routing table for the requests that arrive after it;
    /// runs in flight keep the plan they started with.
    SetRouting {
        update: RoutingUpdate,
        reply: RpcReplyPort<Result<RoutingTable, crate::Error>>,
    },
}

pub(crate) struct RouterActor;

pub(crate) struct RouterArgs {
    pub settings: Arc<Settings>,
    pub factory: Arc<dyn AdapterFactory>,
    pub supervisor: ActorRef<SupervisorMsg>,
    pub bus: Arc<EventBus>,
    pub cache: Arc<ResponseCache>,
    pub board: Arc<BreakerBoard>,
    pub spend: Option<Arc<SpendMeter>>,
    pub shared: Option<Arc<SharedState>>,
}

pub(crate) struct RouterState {
    settings: Arc<Settings>,
    supervisor: ActorRef<SupervisorMsg>,
    routing: Routing,
    default_route: Vec<Target>,
    routes: BTreeMap<String, Vec<Target>>,
    actors: HashMap<Arc<str>, ActorRef<ProviderMsg>>,
    /// Reasons fixed at start: no key, no adapter.
    unavailable: HashMap<Arc<str>, Unavailable>,
    stopped: HashSet<Arc<str>>,
    /// The running plans; reaped as they finish, drained on stop.
    runs: JoinSet<()>,
    bus: Arc<EventBus>,
    cache: Arc<ResponseCache>,
    /// Every target's breaker: read inline to plan, shared with the runs.
    board: Arc<BreakerBoard>,
    spend: Option<Arc<SpendMeter>>,
    shared: Option<Arc<SharedState>>,
}

impl Actor for RouterActor {
    type Msg = RouterMsg;
    type State = RouterState;
    type Arguments = RouterArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: RouterArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let settings = args.settings;
        let unavailable = settings
            .providers
            .values()
            .filter_map(|p| {
                let why = if !args.factory.supports(p.kind) {
                    Unavailable::NoAdapter
                } else if !p.has_key() {
                    Unavailable::NoKey
                } else {
                    return None;
                };
                Some((Arc::from(p.name.as_str()), why))
            })
            .collect();
        Ok(RouterState {
            routing: settings.routing.clone(),
            default_route: settings.default_route(),
            routes: settings.routes.clone(),
            supervisor: args.supervisor,
            actors: HashMap::new(),
            unavailable,
            stopped: HashSet::new(),
            runs: JoinSet::new(),
            bus: args.bus,
            cache: args.cache,
            board: args.board,
            spend: args.spend,
            shared: args.shared,
            settings,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        while state.runs.try_join_next().is_some() {}
        match msg {
            RouterMsg::Generate {
                request,
                started,
                reply,
            } => match state.prepare(request, started, Mode::Answer) {
                Ok(run) => {
                    state.runs.spawn(run.execute(reply));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            RouterMsg::GenerateStream {
                request,
                started,
                reply,
            } => match state.prepare(request, started, Mode::Stream) {
                Ok(run) => {
                    state.runs.spawn(run.stream(reply));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            RouterMsg::CountTokens {
                request,
                started,
                reply,
            } => match state.prepare(request, started, Mode::Answer) {
                Ok(run) => {
                    state.runs.spawn(run.count_tokens(reply));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            RouterMsg::Provider(ProviderNotice::Started { provider, actor }) => {
                state.stopped.remove(&provider);
                state.actors.insert(provider, actor);
            }
            RouterMsg::Provider(ProviderNotice::Stopped { provider }) => {
                state.actors.remove(&provider);
                state.stopped.insert(provider);
            }
            RouterMsg::Providers(reply) => {
                let _ = reply.send(state.providers());
            }
            RouterMsg::GetRouting(reply) => {
                let _ = reply.send(routing_table(&state.routing, &state.routes));
            }
            RouterMsg::SetRouting { update, reply } => {
                let applied =
                    state
                        .settings
                        .apply_routing_update(&state.routing, &state.routes, update);
                let _ = reply.send(applied.map(|(routing, routes)| {
                    tracing::info!(default = %routing.default, order = ?routing.order, "routing changed");
                    state.default_route = state.settings.route_for(&routing);
                    state.routing = routing;
                    state.routes = routes;
                    routing_table(&state.routing, &state.routes)
                }));
            }
        }
        Ok(())
    }

    /// Lets the runs in flight finish, bounded by the request timeout.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let drain = async { while state.runs.join_next().await.is_some() {} };
        if tokio::time::timeout(state.settings.timeouts.request, drain)
            .await
            .is_err()
        {
            state.runs.abort_all();
        }
        Ok(())
    }
}

// === impl RouterState ===

impl RouterState {
    fn prepare(
        &self,
        request: GenerateRequest,
        started: Instant,
        mode: Mode,
    ) -> Result<Run, crate::Error> {
        let route_options = plan::route_name(&request.route, &self.routes)
            .and_then(|name| self.settings.route_options.get(name).copied());
        let route_timeouts = route_options.map(|o| o.timeouts).unwrap_or_default();
        let route = plan::resolve(
            &request.route,
            &self.settings,
            &self.default_route,
            &self.routes,
        )?;
        let now = Instant::now();
        let mut plan = plan::plan(route, |t| {
            self.availability(&t.provider).or_else(|| {
                self.board
                    .is_open(t, now)
                    .then_some(Unavailable::BreakerOpen)
            })
        })
        .ok_or_else(|| crate::Error::NoProviderAvailable("the route is empty".into()))?;
        let needs = request.chat.needs();
        plan::check_capabilities(&mut plan, needs, request.no_fallback, |t| {
            let p = self.settings.providers.get(&*t.provider)?;
            plan::lacks(p.capabilities_of(&t.model), p.kind, needs)
        })?;
        let actors = plan
            .targets
            .iter()
            .map(|t| self.actors.get(&t.provider).cloned())
            .collect();
        let prefill = plan
            .targets
            .iter()
            .map(|t| {
                self.settings.providers.get(&*t.provider).is_some_and(|p| {
                    p.kind == crate::settings::ProviderKind::Anthropic
                        || p.capabilities_of(&t.model).assistant_prefill
                })
            })
            .collect();
        let streams = crate::run::StreamRules {
            commit: request
                .stream_commit
                .or(route_options.and_then(|o| o.stream_commit))
                .unwrap_or_default(),
            continue_after_cut: request
                .continue_after_cut
                .or(route_options.and_then(|o| o.continue_after_cut))
                .unwrap_or(false),
            prefill,
        };
        let refusal = request
            .refusal_policy
            .or(route_options.and_then(|o| o.refusal_policy))
            .unwrap_or(self.routing.refusal_policy);
        Ok(Run {
            route_label: request.route.to_string(),
            api: request.api,
            omitted_tools: request.omitted_tools.clone(),
            bus: Arc::clone(&self.bus),
            cache: Arc::clone(&self.cache),
            use_cache: request.cache,
            client: request.client,
            spend: self.spend.clone(),
            shared: self.shared.clone(),
            board: Arc::clone(&self.board),
            deadline: started
                + request_timeout(
                    self.settings.timeouts.request,
                    &route_timeouts,
                    request.timeout,
                ),
            route_timeouts,
            streams,
            probe_held: std::sync::atomic::AtomicUsize::new(crate::run::NO_PROBE),
            rules: Rules {
                mode,
                refusal,
                rate_limit_max_wait: self.settings.rate_limit_max_wait,
                no_fallback: request.no_fallback,
                spend_cap: self.spend.is_some(),
            },
            request_id: request
                .request_id
                .unwrap_or_else(crate::generation::new_request_id),
            plan,
            chat: request.chat,
            settings: Arc::clone(&self.settings),
            actors,
            supervisor: self.supervisor.clone(),
            started,
        })
    }

    fn availability(&self, provider: &Arc<str>) -> Option<Unavailable> {
        if let Some(why) = self.unavailable.get(provider) {
            return Some(*why);
        }
        self.stopped
            .contains(provider)
            .then_some(Unavailable::Stopped)
    }

    fn providers(&self) -> Vec<ProviderInfo> {
        let now = Instant::now();
        let breakers = self.board.views(now);
        let order = |name: &str| {
            std::iter::once(&self.routing.default)
                .chain(&self.routing.order)
                .position(|n| n == name)
                .unwrap_or(usize::MAX)
        };
        let mut out: Vec<ProviderInfo> = self
            .settings
            .providers
            .values()
            .map(|p| {
                let name: Arc<str> = Arc::from(p.name.as_str());
                let key = match (&p.api_key, &p.api_key_env) {
                    _ if !p.requires_key => KeyStatus::NotNeeded,
                    (Some(_), var) => KeyStatus::Set { from: var.clone() },
                    (None, var) => KeyStatus::Unset { from: var.clone() },
                };
                let unavailable = self.availability(&name);
                ProviderInfo {
                    available: unavailable.is_none(),
                    unavailable_reason: unavailable.map(|u| u.as_str().to_owned()),
                    started: self.actors.contains_key(&name),
                    name: p.name.clone(),
                    kind: p.kind,
                    model: p.model.clone(),
                    // Shown without userinfo: a URL may carry a password.
                    base_url: crate::settings::redact_url(&p.base_url),
                    key,
                    stats: None,
                    breakers: breakers
                        .iter()
                        .filter(|(t, _)| t.provider == name)
                        .map(|(t, b)| TargetBreaker {
                            model: t.model.to_string(),
                            state: b.state,
                            consecutive_failures: b.failures,
                            reopens_in_ms: b
                                .open_until
                                .map(|u| u.saturating_duration_since(now).as_millis() as u64),
                        })
                        .collect(),
                }
            })
            .collect();
        out.sort_by_key(|p| (order(&p.name), p.name.clone()));
        out
    }
}
