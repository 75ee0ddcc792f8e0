//! The router: owns the routing state (the routing table, which provider
//! actors run and their leases, which are down) and publishes it as a
//! [`View`] each time it changes. A request plans itself from the view in
//! force when it arrives (a pure read: no message, no lock held while it
//! plans) and runs on its caller's task, so that a request crosses no task
//! it does not need; changes (a routing update, a provider actor started or
//! given up) go through the router's mailbox, one at a time.

use std::collections::BTreeMap;

use crate::fixed_keys::{FixedMap, FixedSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use understudy_policy::plan::Unavailable;
use understudy_settings::{
    RouteGroups, Routing, RoutingTable, RoutingUpdate, Settings, routing_table,
};
use understudy_types::Target;

use crate::actor::provider::Lease;
use crate::actor::supervisor::{ProviderNotice, SupervisorMsg};
use crate::actor::target_stats::TargetStats;
use crate::adapter::AdapterFactory;
use crate::engine_wide::EngineWide;
use crate::info::{KeyStatus, ProviderInfo, TargetBreaker};
use crate::key_pools::KeyPools;

/// Messages of [`RouterActor`].
pub(crate) enum RouterMsg {
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
        reply: RpcReplyPort<Result<RoutingTable, understudy_types::Error>>,
    },
    /// Puts `table` back as the admin API's stored routing (`None`: none
    /// stored), after a change its store did not take was undone.
    KeepStored(Option<RoutingTable>),
    /// A reloaded settings file: a new view from `settings`, without the
    /// leases of the providers `gone` (removed, or rebuilt with new
    /// settings), with the admin API's stored routing applied over the
    /// file's, as at start. Replies whether there was one, and why it no
    /// longer fits if it does not (the file's is then in force).
    Reload {
        settings: Arc<Settings>,
        gone: Vec<Arc<str>>,
        reply: RpcReplyPort<Option<Result<(), String>>>,
    },
}

pub(crate) struct RouterActor;

pub(crate) struct RouterArgs {
    pub settings: Arc<Settings>,
    pub factory: Arc<dyn AdapterFactory>,
    pub supervisor: ActorRef<SupervisorMsg>,
    /// The engine-wide objects (the breakers and key pools, for the
    /// status).
    pub wide: Arc<EngineWide>,
    /// Where the router publishes its view (the engine reads it).
    pub published: Published,
}

/// The router's view in force, shared with the engine: replaced whole on
/// each change, read (an `Arc` clone under a read lock) once per request;
/// `None` before the router started and after it stopped.
pub(crate) type Published = Arc<RwLock<Option<Arc<View>>>>;

/// What a request is planned from: the router's state at one moment (only
/// what the router changes; the engine-wide objects a run needs beside it
/// are in [`EngineWide`]).
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) settings: Arc<Settings>,
    pub(crate) supervisor: ActorRef<SupervisorMsg>,
    pub(crate) routing: Routing,
    pub(crate) default_route: Vec<Target>,
    pub(crate) routes: BTreeMap<String, Vec<Target>>,
    /// The groups of equivalent targets of the routes that have any.
    pub(crate) groups: RouteGroups,
    /// The stats of every group member, shared by every view (a routing
    /// change keeps those of the members that stay).
    pub(crate) stats: Arc<TargetStats>,
    /// The running provider actors' leases.
    pub(crate) leases: FixedMap<Arc<str>, Lease>,
    /// The key pools of `settings` (a run takes its targets' at its plan).
    pub(crate) pools: KeyPools,
    /// Reasons fixed at start: no key, no adapter.
    pub(crate) unavailable: FixedMap<Arc<str>, Unavailable>,
    pub(crate) stopped: FixedSet<Arc<str>>,
    /// The context windows of the routing's targets, resolved once.
    pub(crate) limits: Arc<understudy_policy::fit::Known>,
}

pub(crate) struct RouterState {
    view: View,
    wide: Arc<EngineWide>,
    published: Published,
    /// Which provider kinds have an adapter, for a reloaded view.
    factory: Arc<dyn AdapterFactory>,
    /// The routing table the admin API last set, as its store holds it
    /// (`None`: the settings file's is in force): put back over the file's
    /// routing after a reload.
    stored: Option<RoutingTable>,
}

/// The view in force, while the router runs.
pub(crate) fn current(published: &Published) -> Option<Arc<View>> {
    published
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
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
        let pools = args.wide.pools.current();
        let view = View::of(args.settings, &*args.factory, args.supervisor, None);
        let view = View { pools, ..view };
        let state = RouterState {
            view,
            wide: args.wide,
            published: args.published,
            factory: args.factory,
            stored: None,
        };
        state.publish();
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let view = &mut state.view;
        match msg {
            RouterMsg::Provider(ProviderNotice::Started { provider, lease }) => {
                // A lease built from settings this view does not have (its
                // notice came before the reload's) would sign with other
                // keys than the view's pool: runs ask the supervisor again
                // once the view is the new one.
                // One the view has already (the supervisor tells again
                // whenever it is asked) changes nothing.
                let known = view.leases.get(&provider).map(|l| l.actor.get_id());
                if known == Some(lease.actor.get_id())
                    || !lease.fits(view.pools.get(&provider).map(|p| &**p))
                {
                    return Ok(());
                }
                view.stopped.remove(&provider);
                view.leases.insert(provider, lease);
            }
            RouterMsg::Provider(ProviderNotice::Stopped { provider }) => {
                view.leases.remove(&provider);
                view.stopped.insert(provider);
            }
            RouterMsg::Providers(reply) => {
                let _ = reply.send(view.providers(&state.wide));
                return Ok(());
            }
            RouterMsg::GetRouting(reply) => {
                let _ = reply.send(routing_table(&view.routing, &view.routes, &view.groups));
                return Ok(());
            }
            RouterMsg::SetRouting { update, reply } => {
                let applied = view.set_routing(update);
                if let Ok(table) = &applied {
                    state.stored = Some(table.clone());
                }
                let _ = reply.send(applied);
            }
            RouterMsg::KeepStored(table) => {
                state.stored = table;
                return Ok(());
            }
            RouterMsg::Reload {
                settings,
                gone,
                reply,
            } => {
                let _ = reply.send(state.reload(settings, &gone));
            }
        }
        state.publish();
        Ok(())
    }

    /// Requests arriving from now on find no router.
    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        *state
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }
}

/// The change that puts `table` in force whole.
pub(crate) fn update_of(table: RoutingTable) -> RoutingUpdate {
    RoutingUpdate {
        default: Some(table.default),
        order: Some(table.order),
        refusal_policy: Some(table.refusal_policy),
        routes: Some(table.routes),
    }
}

// === impl RouterState ===

impl RouterState {
    /// Replaces the view by one of `settings`: the leases and stopped marks
    /// of the providers that stay as they were are kept, the stats of the
    /// group members that stay too, the key pools whose settings did not
    /// change (the others made anew, each key kept keeping its state, and
    /// put in force for the poller and the prober too); the stored routing, if any, is applied
    /// over the file's (why it does not fit, if it does not).
    fn reload(&mut self, settings: Arc<Settings>, gone: &[Arc<str>]) -> Option<Result<(), String>> {
        let kept = |p: &Arc<str>| settings.providers.contains_key(&**p) && !gone.contains(p);
        let pools = self.view.pools.reloaded(&self.view.settings, &settings);
        self.wide.pools.set(pools.clone());
        let old = &mut self.view;
        let mut next = View::of(
            Arc::clone(&settings),
            &*self.factory,
            old.supervisor.clone(),
            Some(&old.stats),
        );
        next.leases = old.leases.drain().filter(|(p, _)| kept(p)).collect();
        next.pools = pools;
        next.stopped = old.stopped.drain().filter(|p| kept(p)).collect();
        self.view = next;
        let table = self.stored.clone()?;
        Some(
            self.view
                .set_routing(update_of(table))
                .map(|_| ())
                .map_err(|e| e.to_string()),
        )
    }

    /// Makes the current view the one requests plan from.
    fn publish(&self) {
        *self
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(self.view.clone()));
    }
}

// === impl View ===

impl View {
    /// The view of `settings` with no provider actor started yet and no key
    /// pool (`stats`: the previous view's group stats, kept for the
    /// members that stay).
    fn of(
        settings: Arc<Settings>,
        factory: &dyn AdapterFactory,
        supervisor: ActorRef<SupervisorMsg>,
        stats: Option<&TargetStats>,
    ) -> Self {
        let unavailable = settings
            .providers
            .values()
            .filter_map(|p| {
                let why = if !factory.supports(p.kind) {
                    Unavailable::NoAdapter
                } else if !p.has_key() {
                    Unavailable::NoKey
                } else {
                    return None;
                };
                Some((Arc::from(p.name.as_str()), why))
            })
            .collect();
        let limits = understudy_policy::fit::Known::new(
            &settings,
            &settings.default_route(),
            &settings.routes,
        );
        Self {
            limits: Arc::new(limits),
            routing: settings.routing.clone(),
            default_route: settings.default_route(),
            routes: settings.routes.clone(),
            groups: settings.route_groups.clone(),
            stats: Arc::new(TargetStats::of_routes(
                &settings.routes,
                &settings.route_groups,
                &settings.route_options,
                stats,
                crate::runtime_clock::now(),
            )),
            supervisor,
            leases: FixedMap::default(),
            pools: KeyPools::default(),
            unavailable,
            stopped: FixedSet::default(),
            settings,
        }
    }

    /// Applies a routing change (validated like the settings file) and
    /// returns the table now in force.
    fn set_routing(
        &mut self,
        update: RoutingUpdate,
    ) -> Result<RoutingTable, understudy_types::Error> {
        let (routing, routes, groups) = self.settings.apply_routing_update(
            &self.routing,
            &self.routes,
            &self.groups,
            update,
        )?;
        tracing::info!(default = %routing.default, order = ?routing.order, "routing changed");
        self.default_route = self.settings.route_for(&routing);
        self.stats = Arc::new(TargetStats::of_routes(
            &routes,
            &groups,
            &self.settings.route_options,
            Some(&self.stats),
            crate::runtime_clock::now(),
        ));
        self.limits = Arc::new(understudy_policy::fit::Known::new(
            &self.settings,
            &self.default_route,
            &routes,
        ));
        self.routing = routing;
        self.routes = routes;
        self.groups = groups;
        Ok(routing_table(&self.routing, &self.routes, &self.groups))
    }

    /// Why `provider` is out of plans, if it is (no key, no adapter, its
    /// restart budget spent).
    pub(crate) fn availability(&self, provider: &Arc<str>) -> Option<Unavailable> {
        if let Some(why) = self.unavailable.get(provider) {
            return Some(*why);
        }
        self.stopped
            .contains(provider)
            .then_some(Unavailable::Stopped)
    }

    /// `p`'s pool keys as the status shows them: those set with their
    /// state, then those whose variable is not set.
    fn pool_keys(
        p: &understudy_settings::ProviderSettings,
        pools: &KeyPools,
        now: Instant,
    ) -> Vec<crate::key_pools::PoolKeyStatus> {
        let mut keys = pools
            .get(&p.name)
            .map(|pool| pool.status(now))
            .unwrap_or_default();
        keys.extend(p.pool.keys.iter().filter(|k| k.secret.is_none()).map(|k| {
            crate::key_pools::PoolKeyStatus {
                name: k.name.clone(),
                in_flight: 0,
                available: false,
                out: Some("unset"),
                back_in_s: None,
                requests_remaining: None,
                tokens_remaining: None,
            }
        }));
        keys
    }

    fn providers(&self, wide: &EngineWide) -> Vec<ProviderInfo> {
        let now = crate::runtime_clock::now();
        let breakers = wide.board.views(now);
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
                    (None, _) if p.platform.credentials_source().is_some() => {
                        KeyStatus::Credentials {
                            source: p.platform.credentials_source().unwrap_or_default(),
                        }
                    }
                    _ if !p.requires_key => KeyStatus::NotNeeded,
                    (Some(_), var) => KeyStatus::Set { from: var.clone() },
                    (None, var) => KeyStatus::Unset { from: var.clone() },
                };
                let unavailable = self.availability(&name);
                ProviderInfo {
                    available: unavailable.is_none(),
                    unavailable_reason: unavailable.map(|u| u.as_str().to_owned()),
                    started: self.leases.contains_key(&name),
                    name: p.name.clone(),
                    kind: p.kind,
                    platform: p.platform.name(),
                    model: p.model.clone(),
                    // Shown without userinfo: a URL may carry a password.
                    base_url: understudy_settings::redact_url(&p.base_url),
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
                    keys: Self::pool_keys(p, &self.pools, now),
                }
            })
            .collect();
        out.sort_by_key(|p| (order(&p.name), p.name.clone()));
        out
    }
}
