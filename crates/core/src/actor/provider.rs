//! The provider actor: one per provider, owning its adapter (and through it
//! the pooled HTTP client) and the record of recent outcomes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::time::Instant;

use crate::adapter::{Adapter, AdapterFactory, BoxEventStream};
use crate::chat::{ChatRequest, Completion};
use crate::error::{Failure, FailureCode, FailureKind};
use crate::settings::ProviderSettings;

/// Messages of [`ProviderActor`].
pub(crate) enum ProviderMsg {
    /// Run one attempt. The actor replies from a spawned task; `deadline`
    /// bounds the attempt (the earlier of the attempt and request timeouts).
    Execute {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        reply: RpcReplyPort<Result<Completion, Failure>>,
    },
    /// Open a streamed attempt: connect and read the response headers by
    /// `deadline`. The caller reads the stream and sends `Completed` when
    /// it ends.
    OpenStream {
        model: Arc<str>,
        request: Arc<ChatRequest>,
        deadline: Instant,
        reply: RpcReplyPort<Result<BoxEventStream, Failure>>,
    },
    /// A spawned attempt finished; sent by the task to its actor (or, for
    /// a stream, by the run that read it).
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
                reply,
            } => {
                state.stats.in_flight += 1;
                let adapter = Arc::clone(&state.adapter);
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result =
                        match tokio::time::timeout_at(deadline, adapter.complete(&model, &request))
                            .await
                        {
                            Ok(result) => result,
                            Err(_) => Err(Failure::new(
                                FailureKind::Timeout,
                                format!(
                                    "no answer within {:.1} s",
                                    (deadline - started).as_secs_f64()
                                ),
                            )),
                        };
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
                reply,
            } => {
                state.stats.in_flight += 1;
                let adapter = Arc::clone(&state.adapter);
                tokio::spawn(async move {
                    let started = Instant::now();
                    let opened =
                        match tokio::time::timeout_at(deadline, adapter.stream(&model, &request))
                            .await
                        {
                            Ok(opened) => opened,
                            Err(_) => Err(Failure::new(
                                FailureKind::Timeout,
                                format!(
                                    "no response within {:.1} s",
                                    (deadline - started).as_secs_f64()
                                ),
                            )),
                        };
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
