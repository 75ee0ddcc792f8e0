//! The supervisor: starts provider actors on first use, linked to itself,
//! and restarts a failed one with fresh state under a restart budget.
//!
//! ractor's default `handle_supervisor_evt` stops the supervisor when any
//! child exits; this one overrides it. Every (re)start is published through
//! the [`Notify`] the engine attaches (it forwards to the router), because an
//! old `ActorRef` goes stale when its actor dies. The supervisor does not
//! know the router's type, so the two modules do not import each other.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio::time::Instant;
use understudy_policy::plan::Unavailable;
use understudy_settings::Settings;

use crate::actor::provider::{Lease, ProviderActor, ProviderArgs, ProviderMsg};
use crate::adapter::AdapterFactory;

/// Restarts allowed per provider within [`RESTART_WINDOW`].
pub(crate) const RESTART_BUDGET: usize = 5;
pub(crate) const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// What the supervisor tells whoever attached: a provider's actor (re)started,
/// or its restart budget ran out.
pub(crate) enum ProviderNotice {
    Started { provider: Arc<str>, lease: Lease },
    Stopped { provider: Arc<str> },
}

/// Where notices go (a cast to the router; never blocks).
pub(crate) type Notify = Box<dyn Fn(ProviderNotice) + Send + Sync>;

/// Messages of [`SupervisorActor`].
pub(crate) enum SupervisorMsg {
    /// Tells the supervisor where to publish provider (re)starts.
    Attach(Notify),
    /// Returns the provider's lease, starting its actor if needed, and
    /// tells whoever attached (a notice lost to a reload is sent again).
    Ensure {
        provider: Arc<str>,
        reply: RpcReplyPort<Result<Lease, EnsureError>>,
    },
    /// Every running provider actor.
    Running(RpcReplyPort<Vec<(Arc<str>, ActorRef<ProviderMsg>)>>),
    /// A reloaded settings file: providers start from `settings` from now
    /// on; the actors of the providers `gone` (removed, or whose settings
    /// changed) stop, with a fresh restart budget for any that comes back.
    /// Their leases are retired: the runs holding them keep them.
    Reload {
        settings: Arc<Settings>,
        gone: Vec<Arc<str>>,
        reply: RpcReplyPort<()>,
    },
}

/// Why a provider actor could not be had.
#[derive(Debug, Clone)]
pub(crate) enum EnsureError {
    Unavailable(Unavailable),
    StartFailed(String),
}

pub(crate) struct SupervisorActor;

pub(crate) struct SupervisorArgs {
    pub settings: Arc<Settings>,
    pub factory: Arc<dyn AdapterFactory>,
}

pub(crate) struct SupervisorState {
    settings: Arc<Settings>,
    factory: Arc<dyn AdapterFactory>,
    notify: Option<Notify>,
    running: HashMap<Arc<str>, Lease>,
    by_id: HashMap<ActorId, Arc<str>>,
    /// Recent restart times per provider, for the budget.
    restarts: HashMap<Arc<str>, VecDeque<Instant>>,
    /// Providers whose budget ran out; they stay down.
    stopped: HashMap<Arc<str>, String>,
    /// Why a provider's actor last failed to start, as logged (once per
    /// change, not once per request that asked for it).
    failed_starts: HashMap<Arc<str>, String>,
}

impl Actor for SupervisorActor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SupervisorState {
            settings: args.settings,
            factory: args.factory,
            notify: None,
            running: HashMap::new(),
            by_id: HashMap::new(),
            restarts: HashMap::new(),
            stopped: HashMap::new(),
            failed_starts: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Attach(notify) => state.notify = Some(notify),
            SupervisorMsg::Ensure { provider, reply } => {
                let result = match state.running.get(&provider) {
                    // Asked only when the router's view has no lease (or a
                    // stale one): its notice may have been lost to a
                    // reload in between, so it is told again.
                    Some(lease) => {
                        state.notify_started(&provider, lease);
                        Ok(lease.clone())
                    }
                    None if state.stopped.contains_key(&provider) => {
                        Err(EnsureError::Unavailable(Unavailable::Stopped))
                    }
                    // Spawning awaits only the child's `pre_start`, which
                    // builds an adapter and does no network I/O.
                    None => state.start(&provider, myself.get_cell()).await,
                };
                let _ = reply.send(result);
            }
            SupervisorMsg::Running(reply) => {
                let _ = reply.send(
                    state
                        .running
                        .iter()
                        .map(|(k, v)| (k.clone(), v.actor.clone()))
                        .collect(),
                );
            }
            SupervisorMsg::Reload {
                settings,
                gone,
                reply,
            } => {
                state.settings = settings;
                for name in &gone {
                    state.forget(name);
                }
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        let Some(name) = state.by_id.remove(&cell.get_id()) else {
            return Ok(());
        };
        state.running.remove(&name);
        if myself.get_status() != ractor::ActorStatus::Running {
            return Ok(()); // shutting down: children stop with us
        }
        tracing::warn!(provider = %name, reason = %why, "provider actor exited; restarting");
        let now = Instant::now();
        let history = state.restarts.entry(name.clone()).or_default();
        while history
            .front()
            .is_some_and(|t| now.duration_since(*t) > RESTART_WINDOW)
        {
            history.pop_front();
        }
        if history.len() >= RESTART_BUDGET {
            tracing::error!(provider = %name, "restart budget spent; provider marked unavailable");
            state.stopped.insert(name.clone(), why);
            if let Some(notify) = &state.notify {
                notify(ProviderNotice::Stopped { provider: name });
            }
            return Ok(());
        }
        history.push_back(now);
        // A failure to start again is logged by `start`.
        let _ = state.start(&name, myself.get_cell()).await;
        Ok(())
    }
}

// === impl SupervisorState ===

impl SupervisorState {
    /// Stops `name`'s actor, if it runs, as no failure (its exit is not
    /// restarted), and forgets its restarts and failures.
    fn forget(&mut self, name: &Arc<str>) {
        if let Some(lease) = self.running.remove(name) {
            self.by_id.remove(&lease.actor.get_id());
            // Runs holding the lease finish on it.
            lease.retire();
            lease.actor.stop(Some("its settings were reloaded".into()));
        }
        self.restarts.remove(name);
        self.stopped.remove(name);
        self.failed_starts.remove(name);
    }

    /// Starts `name`'s actor; a failure to start is logged here, at WARN
    /// when its reason changed, since a client is told only that the
    /// provider could not be started.
    async fn start(&mut self, name: &Arc<str>, me: ActorCell) -> Result<Lease, EnsureError> {
        let started = self.spawn(name, me).await;
        match &started {
            Ok(_) => {
                self.failed_starts.remove(name);
            }
            Err(EnsureError::StartFailed(why)) => {
                if self.failed_starts.get(name) != Some(why) {
                    tracing::warn!(provider = %name, error = %why, "the provider's actor cannot start");
                    self.failed_starts.insert(Arc::clone(name), why.clone());
                }
            }
            Err(EnsureError::Unavailable(_)) => {}
        }
        started
    }

    async fn spawn(&mut self, name: &Arc<str>, me: ActorCell) -> Result<Lease, EnsureError> {
        let Some(settings) = self.settings.providers.get(&**name) else {
            return Err(EnsureError::StartFailed(format!(
                "unknown provider `{name}`"
            )));
        };
        if !self.factory.supports(settings.kind) {
            return Err(EnsureError::Unavailable(Unavailable::NoAdapter));
        }
        let (lease_to, mut lease) = tokio::sync::oneshot::channel();
        let args = ProviderArgs {
            settings: settings.clone(),
            factory: Arc::clone(&self.factory),
            lease_to,
        };
        // Unnamed: names live in a global registry and would collide
        // between engines in one process.
        let (actor, _join) = Actor::spawn_linked(None, ProviderActor, args, me)
            .await
            .map_err(|e| {
                // Why the adapter could not be built (a setting named, what
                // is wrong with it), without ractor's words around it.
                EnsureError::StartFailed(match e {
                    ractor::SpawnErr::StartupFailed(why) => why.to_string(),
                    other => format!("cannot spawn: {other}"),
                })
            })?;
        // `pre_start` sent it before the spawn returned.
        let Ok(lease) = lease.try_recv() else {
            actor.stop(None);
            return Err(EnsureError::StartFailed(
                "the provider actor started without its lease".into(),
            ));
        };
        self.by_id.insert(actor.get_id(), name.clone());
        self.running.insert(name.clone(), lease.clone());
        self.notify_started(name, &lease);
        Ok(lease)
    }

    /// Tells the router `name`'s actor runs with `lease`.
    fn notify_started(&self, name: &Arc<str>, lease: &Lease) {
        if let Some(notify) = &self.notify {
            notify(ProviderNotice::Started {
                provider: Arc::clone(name),
                lease: lease.clone(),
            });
        }
    }
}
