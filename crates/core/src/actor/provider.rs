//! The provider actor: one per provider, owning its adapter (and through it
//! the pooled HTTP client), a circuit breaker per target (model), and the
//! record of recent outcomes.
//!
//! `handle` never awaits the network: an attempt runs on a spawned task that
//! replies and then casts `Completed` back, and the breaker is updated from
//! that message. A call the breaker does not admit is answered at once with
//! [`AttemptError::Skipped`], so the run moves to the next target without
//! the provider being contacted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use crate::actor::router::RouterMsg;
use crate::adapter::{Adapter, AdapterFactory, BoxEventStream};
use crate::chat::{ChatRequest, Completion};
use crate::error::{Failure, FailureCode, FailureKind};
use crate::policy::breaker::{Admission, Breaker, BreakerSettings, BreakerState};
use crate::policy::plan::Target;
use crate::settings::ProviderSettings;
use crate::shared::{SharedState, unix_ms};

/// Why an attempt produced no answer.
#[derive(Debug)]
pub(crate) enum AttemptError {
    /// The provider failed (or could not be reached).
    Failed(Failure),
    /// The target's breaker is open (or its half-open probe is out): the
    /// provider was not contacted and the attempt is not recorded.
    Skipped,
}

/// Messages of [`ProviderActor`].
pub(crate) enum ProviderMsg {
    /// Run one attempt. The actor replies from a spawned task; `deadline`
    /// bounds the attempt (the earlier of the attempt and request timeouts).
    /// `force` bypasses the breaker (every target of the plan was open).
    Execute {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        force: bool,
        reply: RpcReplyPort<Result<Completion, AttemptError>>,
    },
    /// Open a streamed attempt: connect and read the response headers by
    /// `deadline`. The caller reads the stream and sends `Completed` when
    /// it ends.
    OpenStream {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        force: bool,
        reply: RpcReplyPort<Result<BoxEventStream, AttemptError>>,
    },
    /// An attempt finished; sent by its task (or, for a stream, by the run
    /// that read it).
    Completed {
        model: Arc<str>,
        outcome: Result<(), FailureCode>,
        latency: Duration,
    },
    /// The fleet (shared state in Redis) holds `model` open until
    /// `open_until`, or saw it recover (`None`).
    SyncBreaker {
        model: Arc<str>,
        open_until: Option<Instant>,
    },
    /// Counts of recent outcomes, for `understudy providers` and the API.
    Stats(RpcReplyPort<ProviderStats>),
    /// Panics inside `handle`, to exercise supervision.
    #[cfg(feature = "fault-injection")]
    Panic,
}

/// Outcome counts since the actor (re)started.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ProviderStats {
    pub ok: u64,
    pub failed: HashMap<&'static str, u64>,
    pub in_flight: u64,
    /// Mean latency of successful attempts, in milliseconds.
    pub mean_ok_latency_ms: f64,
}

pub(crate) struct ProviderActor;

pub(crate) struct ProviderArgs {
    pub settings: ProviderSettings,
    pub factory: Arc<dyn AdapterFactory>,
    pub breaker: BreakerSettings,
    /// Where breaker changes are announced.
    pub router: Option<ActorRef<RouterMsg>>,
    /// The fleet's shared state, when Redis is configured.
    pub shared: Option<Arc<SharedState>>,
}

pub(crate) struct ProviderState {
    name: Arc<str>,
    adapter: Arc<dyn Adapter>,
    stats: ProviderStats,
    ok_latency_total: Duration,
    breaker_settings: BreakerSettings,
    breakers: HashMap<Arc<str>, Breaker>,
    router: Option<ActorRef<RouterMsg>>,
    shared: Option<Arc<SharedState>>,
}

impl Actor for ProviderActor {
    type Msg = ProviderMsg;
    type State = ProviderState;
    type Arguments = ProviderArgs;

    /// Builds the adapter here so that a bad configuration surfaces from
    /// `spawn` instead of on the first request.
    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ProviderArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let adapter = args
            .factory
            .build(&args.settings)
            .map_err(|e| format!("provider `{}`: {e}", args.settings.name))?;
        Ok(ProviderState {
            name: Arc::from(args.settings.name.as_str()),
            adapter,
            stats: ProviderStats::default(),
            ok_latency_total: Duration::ZERO,
            breaker_settings: args.breaker,
            breakers: HashMap::new(),
            router: args.router,
            shared: args.shared,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProviderMsg::Execute {
                model,
                request,
                deadline,
                force,
                reply,
            } => {
                let Some(adapter) = state.start_attempt(&model, force) else {
                    let _ = reply.send(Err(AttemptError::Skipped));
                    return Ok(());
                };
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = by_deadline(
                        deadline,
                        started,
                        "no answer",
                        adapter.complete(&model, &request),
                    )
                    .await;
                    let outcome = result.as_ref().map(|_| ()).map_err(Failure::code);
                    let _ = reply.send(result.map_err(AttemptError::Failed));
                    let _ = myself.cast(ProviderMsg::Completed {
                        model,
                        outcome,
                        latency: started.elapsed(),
                    });
                });
            }
            ProviderMsg::OpenStream {
                model,
                request,
                deadline,
                force,
                reply,
            } => {
                let Some(adapter) = state.start_attempt(&model, force) else {
                    let _ = reply.send(Err(AttemptError::Skipped));
                    return Ok(());
                };
                tokio::spawn(async move {
                    let started = Instant::now();
                    let opened = by_deadline(
                        deadline,
                        started,
                        "no response",
                        adapter.stream(&model, &request),
                    )
                    .await;
                    if let Err(f) = &opened {
                        let _ = myself.cast(ProviderMsg::Completed {
                            model: Arc::clone(&model),
                            outcome: Err(f.code()),
                            latency: started.elapsed(),
                        });
                    }
                    if let Err(ractor::MessagingErr::SendErr(Ok(stream))) =
                        reply.send(opened.map_err(AttemptError::Failed))
                    {
                        // The run gave up waiting: close the stream and say so.
                        drop(stream);
                        let _ = myself.cast(ProviderMsg::Completed {
                            model,
                            outcome: Ok(()),
                            latency: started.elapsed(),
                        });
                    }
                });
            }
            ProviderMsg::Completed {
                model,
                outcome,
                latency,
            } => {
                state.stats.in_flight = state.stats.in_flight.saturating_sub(1);
                match outcome {
                    Ok(()) => {
                        state.stats.ok += 1;
                        state.ok_latency_total += latency;
                        state.stats.mean_ok_latency_ms =
                            state.ok_latency_total.as_secs_f64() * 1000.0 / state.stats.ok as f64;
                    }
                    Err(code) => *state.stats.failed.entry(code.as_str()).or_default() += 1,
                }
                state.record(&model, outcome);
            }
            ProviderMsg::SyncBreaker { model, open_until } => {
                let now = Instant::now();
                let breaker = state.breaker(&model);
                let before = (breaker.state(now), breaker.open_until());
                match open_until {
                    Some(until) => breaker.force_open(until),
                    None if before.0 != BreakerState::Closed => breaker.force_close(),
                    None => {}
                }
                if (breaker.state(now), breaker.open_until()) != before {
                    tracing::info!(provider = %state.name, model = %model, open = open_until.is_some(), "breaker synchronised with the fleet");
                    state.announce(&model);
                }
            }
            ProviderMsg::Stats(reply) => {
                let _ = reply.send(state.stats.clone());
            }
            #[cfg(feature = "fault-injection")]
            ProviderMsg::Panic => panic!("fault injection: provider actor panics on purpose"),
        }
        Ok(())
    }
}

/// Runs `attempt` until `deadline`; past it, a timeout failure that says
/// how long it waited for `what`.
async fn by_deadline<T>(
    deadline: Instant,
    started: Instant,
    what: &str,
    attempt: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(result) => result,
        Err(_) => Err(Failure::new(
            FailureKind::Timeout,
            format!("{what} within {:.1} s", (deadline - started).as_secs_f64()),
        )),
    }
}

// === impl ProviderState ===

impl ProviderState {
    /// Admits a call to `model` (past its breaker, when `force`) and counts
    /// it in flight; `None` when the breaker skips it.
    fn start_attempt(&mut self, model: &Arc<str>, force: bool) -> Option<Arc<dyn Adapter>> {
        if !self.admit(model, force) {
            return None;
        }
        self.stats.in_flight += 1;
        Some(Arc::clone(&self.adapter))
    }

    fn breaker(&mut self, model: &Arc<str>) -> &mut Breaker {
        let settings = self.breaker_settings;
        self.breakers
            .entry(Arc::clone(model))
            .or_insert_with(|| Breaker::new(settings))
    }

    /// Whether a call to `model` may go ahead now.
    fn admit(&mut self, model: &Arc<str>, force: bool) -> bool {
        let now = Instant::now();
        let breaker = self.breaker(model);
        let before = breaker.state(now);
        let admitted = match breaker.admit(now) {
            Admission::Yes | Admission::Probe => true,
            Admission::No => force,
        };
        let after = breaker.state(now);
        if before != after || (before == BreakerState::HalfOpen && admitted) {
            self.announce(model);
        }
        admitted
    }

    fn record(&mut self, model: &Arc<str>, outcome: Result<(), FailureCode>) {
        let now = Instant::now();
        let breaker = self.breaker(model);
        let before = (breaker.state(now), breaker.open_until());
        breaker.record(outcome, now);
        if (breaker.state(now), breaker.open_until()) != before {
            let state = breaker.state(now);
            let until = breaker.open_until();
            if state == BreakerState::Open {
                tracing::warn!(provider = %self.name, model = %model, "circuit breaker opened");
            } else if state == BreakerState::Closed {
                tracing::info!(provider = %self.name, model = %model, "circuit breaker closed");
            }
            self.share(model, state, until);
            self.announce(model);
        }
    }

    /// Tells the fleet (a spawned task: no I/O in `handle`).
    fn share(&self, model: &Arc<str>, state: BreakerState, until: Option<Instant>) {
        let Some(shared) = &self.shared else { return };
        let shared = Arc::clone(shared);
        let target = Target {
            provider: Arc::clone(&self.name),
            model: Arc::clone(model),
        };
        match (state, until) {
            (BreakerState::Open, Some(until)) => {
                let until_ms =
                    unix_ms() + until.saturating_duration_since(Instant::now()).as_millis() as u64;
                tokio::spawn(async move { shared.publish_open(&target, until_ms).await });
            }
            (BreakerState::Closed, _) => {
                tokio::spawn(async move { shared.publish_closed(&target).await });
            }
            _ => {}
        }
    }

    /// Tells the router a target's breaker changed, so that plans skip an
    /// open target without asking this actor.
    fn announce(&mut self, model: &Arc<str>) {
        let now = Instant::now();
        let Some(router) = &self.router else { return };
        let Some(breaker) = self.breakers.get(model) else {
            return;
        };
        let _ = router.cast(RouterMsg::BreakerChanged {
            provider: Arc::clone(&self.name),
            model: Arc::clone(model),
            state: breaker.state(now),
            open_until: breaker.open_until(),
            failures: breaker.failures(),
        });
    }
}
