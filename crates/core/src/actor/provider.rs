//! The provider actor: one per provider, owning its adapter (and through it
//! the pooled HTTP clients) and the record of recent outcomes.
//!
//! `handle` never awaits the network: an attempt runs on a spawned task that
//! replies and then casts `Completed` back, and the counts are updated from
//! that message. Breakers are not kept here: admission and outcomes go
//! through the one [`crate::breakers::BreakerBoard`], from the run.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use crate::adapter::{Adapter, AdapterFactory, BoxEventStream};
use crate::chat::{ChatRequest, Completion};
use crate::failure::{Failure, FailureCode, FailureKind};
use crate::info::ProviderStats;
use crate::settings::ProviderSettings;

/// Messages of [`ProviderActor`].
pub(crate) enum ProviderMsg {
    /// Run one attempt. The actor replies from a spawned task; `deadline`
    /// bounds the attempt (the earlier of the attempt and request timeouts)
    /// and `connect` the connection set-up.
    Execute {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        connect: Duration,
        reply: RpcReplyPort<Result<Completion, Failure>>,
    },
    /// Open a streamed attempt: connect and read the response headers by
    /// `deadline`. The caller reads the stream and sends `Completed` when
    /// it ends.
    OpenStream {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        connect: Duration,
        reply: RpcReplyPort<Result<BoxEventStream, Failure>>,
    },
    /// Count a request's input tokens (not an attempt: no counts change).
    CountTokens {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        connect: Duration,
        reply: RpcReplyPort<Result<Option<u64>, Failure>>,
    },
    /// An attempt finished; sent by its task (or, for a stream, by the run
    /// that read it).
    Completed {
        outcome: Result<(), FailureCode>,
        latency: Duration,
    },
    /// Counts of recent outcomes, for `understudy providers` and the API.
    Stats(RpcReplyPort<ProviderStats>),
    /// Panics inside `handle`, to exercise supervision.
    #[cfg(feature = "fault-injection")]
    Panic,
}

pub(crate) struct ProviderActor;

pub(crate) struct ProviderArgs {
    pub settings: ProviderSettings,
    pub factory: Arc<dyn AdapterFactory>,
}

pub(crate) struct ProviderState {
    adapter: Arc<dyn Adapter>,
    stats: ProviderStats,
    ok_latency_total: Duration,
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
            adapter,
            stats: ProviderStats::default(),
            ok_latency_total: Duration::ZERO,
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
                connect,
                reply,
            } => {
                let adapter = state.start_attempt();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = by_deadline(
                        deadline,
                        started,
                        "no answer",
                        adapter.complete(&model, &request, connect),
                    )
                    .await;
                    let outcome = result.as_ref().map(|_| ()).map_err(Failure::code);
                    let _ = reply.send(result);
                    let _ = myself.cast(ProviderMsg::Completed {
                        outcome,
                        latency: started.elapsed(),
                    });
                });
            }
            ProviderMsg::OpenStream {
                model,
                request,
                deadline,
                connect,
                reply,
            } => {
                let adapter = state.start_attempt();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let opened = by_deadline(
                        deadline,
                        started,
                        "no response",
                        adapter.stream(&model, &request, connect),
                    )
                    .await;
                    if let Err(f) = &opened {
                        let _ = myself.cast(ProviderMsg::Completed {
                            outcome: Err(f.code()),
                            latency: started.elapsed(),
                        });
                    }
                    if let Err(ractor::MessagingErr::SendErr(Ok(stream))) = reply.send(opened) {
                        // The run gave up waiting: close the stream and say so.
                        drop(stream);
                        let _ = myself.cast(ProviderMsg::Completed {
                            outcome: Ok(()),
                            latency: started.elapsed(),
                        });
                    }
                });
            }
            ProviderMsg::CountTokens {
                model,
                request,
                deadline,
                connect,
                reply,
            } => {
                let adapter = Arc::clone(&state.adapter);
                tokio::spawn(async move {
                    let counted = by_deadline(
                        deadline,
                        Instant::now(),
                        "no count",
                        adapter.count_tokens(&model, &request, connect),
                    )
                    .await;
                    let _ = reply.send(counted);
                });
            }
            ProviderMsg::Completed { outcome, latency } => {
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
    /// Counts an attempt in flight and hands out the adapter for its task.
    fn start_attempt(&mut self) -> Arc<dyn Adapter> {
        self.stats.in_flight += 1;
        Arc::clone(&self.adapter)
    }
}
