//! Streamed generation (DESIGN §3): walk the route until one target sends
//! its first non-empty text, commit to it, and never switch afterwards.
//!
//! Before the commit a failure (connect error, HTTP error, refusal at the
//! start, malformed event, no first token within `first_token`) moves to the
//! next target and the caller has seen nothing. After it, a failure ends the
//! stream with a final error (`stream_interrupted`, or `content_filter` for a
//! refusal) and no other target is contacted. There is no softened retry.
//!
//! Backpressure: the run pushes text into a bounded channel
//! ([`STREAM_BUFFER`] items); a slow reader stops the run from reading
//! upstream, and TCP pushes back from there. Cancellation: when the reader
//! drops its [`GenerationStream`], the run drops the upstream stream at once,
//! which closes the upstream connection.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::actor::provider::{AttemptError, ProviderMsg};
use crate::adapter::BoxEventStream;
use crate::chat::{FinishReason, StreamEvent, Usage};
use crate::error::{Error, Failure, FailureCode, FailureKind};
use crate::event::{EventContext, GenerationEvent};
use crate::generation::{Attempt, AttemptKind, Outcome};
use crate::run::{Run, call_provider, millis};

/// Items buffered between the run and a slow reader.
pub const STREAM_BUFFER: usize = 16;

/// A committed stream: the provider has sent its first text.
#[derive(Debug)]
pub struct GenerationStream {
    pub request_id: String,
    /// The provider committed to.
    pub provider: String,
    /// The model answering, as the provider named it.
    pub model: String,
    pub fell_back: bool,
    /// Some attempt before the commit was refused.
    pub content_filtered: bool,
    rx: mpsc::Receiver<StreamItem>,
}

/// What a [`GenerationStream`] yields: text, then exactly one `Done` or
/// `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Delta(String),
    /// Boxed so that the channel's slots stay the size of a `String`: the
    /// run's channel holds 16 items for every open stream.
    Done(Box<StreamDone>),
    Error(Box<StreamError>),
}

/// The end of a complete stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamDone {
    pub request_id: String,
    pub provider: String,
    pub model: String,
    pub finish_reason: FinishReason,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub usage: Option<Usage>,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
}

/// The end of a stream that failed after its commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamError {
    pub request_id: String,
    pub code: FailureCode,
    pub message: String,
    /// The provider committed to (who sent the partial text).
    pub provider: String,
    pub model: String,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
}

// === impl GenerationStream ===

impl GenerationStream {
    /// The next item; `None` after the final `Done` or `Error`.
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.rx.recv().await
    }

    /// Polls for the next item (for adapting to a `Stream`).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        self.rx.poll_recv(cx)
    }
}

// === the run ===

/// A target that sent its first text.
struct Committed {
    idx: usize,
    stream: BoxEventStream,
    first: String,
    started: Instant,
}

impl Run {
    /// Walks the plan for a streamed request; replies on `reply` at the
    /// commit (or with the error when no target got that far).
    pub(crate) async fn stream(
        mut self,
        mut reply: oneshot::Sender<Result<GenerationStream, Error>>,
    ) {
        let ctx = self.event_context();
        let bus = Arc::clone(&self.bus);
        let started = self.started;
        // Publishes the failed event and answers the caller with the error.
        let fail = move |reply: oneshot::Sender<Result<GenerationStream, Error>>, error: Error| {
            bus.publish(GenerationEvent::failed(
                &ctx,
                &error,
                true,
                millis(started.elapsed()),
            ));
            let _ = reply.send(Err(error));
        };
        let deadline = self.deadline;
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut content_filtered = false;
        if self.plan.targets.is_empty() {
            let why: Vec<String> = self
                .plan
                .skipped
                .iter()
                .map(|(t, why)| format!("{} ({})", t.provider, why.as_str()))
                .collect();
            fail(reply, Error::NoProviderAvailable(why.join(", ")));
            return;
        }
        let mut committed = None;
        for idx in 0..self.plan.targets.len() {
            if Instant::now() >= deadline {
                fail(reply, Error::DeadlineExceeded { attempts });
                return;
            }
            let kind = if self.plan.targets[idx] == self.plan.primary {
                AttemptKind::Primary
            } else {
                AttemptKind::Fallback
            };
            if kind == AttemptKind::Fallback {
                if self.no_fallback {
                    break;
                }
                if let Some(spend) = &self.spend {
                    if !spend.allows_fallback().await {
                        fail(reply, Error::FallbackBudgetExceeded { attempts });
                        return;
                    }
                }
            }
            // Boxed, like the pump below: the run task then holds only the
            // phase it is in (thousands of streams stay open at once).
            let attempt = tokio::select! {
                a = Box::pin(self.open_and_wait(idx, deadline)) => a,
                _ = reply.closed() => return, // the caller went away
            };
            match attempt {
                Ok(c) => {
                    committed = Some((c, kind));
                    break;
                }
                Err(None) => continue, // skipped by its breaker
                Err(Some((failure, latency))) => {
                    let refused = failure.kind.is_refusal();
                    content_filtered |= refused;
                    attempts.push(self.record(
                        idx,
                        kind,
                        Outcome::Failed(failure.code()),
                        latency,
                        Some(failure.describe()),
                    ));
                    if refused && !self.policy.falls_back() {
                        fail(reply, Error::Refused { attempts });
                        return;
                    }
                }
            }
        }
        let Some((c, kind)) = committed else {
            let error = if Instant::now() >= deadline {
                Error::DeadlineExceeded { attempts }
            } else {
                let all_rate_limited = attempts
                    .iter()
                    .all(|a| a.outcome == Outcome::Failed(FailureCode::RateLimited));
                let code = match attempts.last() {
                    _ if all_rate_limited => FailureCode::RateLimited,
                    Some(Attempt {
                        outcome: Outcome::Failed(code),
                        ..
                    }) => *code,
                    _ => FailureCode::Unavailable,
                };
                Error::ProvidersFailed { code, attempts }
            };
            fail(reply, error);
            return;
        };
        Box::pin(self.pump(c, kind, attempts, content_filtered, reply)).await;
    }

    /// Opens target `idx` and waits for its first non-empty text.
    async fn open_and_wait(
        &mut self,
        idx: usize,
        deadline: Instant,
    ) -> Result<Committed, Option<(Failure, Duration)>> {
        let started = Instant::now();
        let target = self.plan.targets[idx].clone();
        let timeouts = self
            .settings
            .providers
            .get(&*target.provider)
            .map_or(self.settings.timeouts, |p| p.timeouts);
        let first_token_by = (started + timeouts.first_token).min(deadline);
        let wait = first_token_by.saturating_duration_since(started) + Duration::from_secs(1);
        let chat = Arc::clone(&self.chat);
        let force = self.plan.forced && idx == 0;
        if !force && !self.take_probe(idx).await {
            return Err(None);
        }
        let opened = call_provider(
            &mut self.actors[idx],
            &self.supervisor,
            &target.provider,
            wait,
            |reply| ProviderMsg::OpenStream {
                model: Arc::clone(&target.model),
                request: Arc::clone(&chat),
                deadline: first_token_by,
                force,
                reply,
            },
        )
        .await;
        let mut stream = match opened {
            Ok(s) => s,
            Err(AttemptError::Skipped) => return Err(None),
            Err(AttemptError::Failed(f)) => return Err(Some((f, started.elapsed()))),
        };
        let no_first_token = || {
            Failure::new(
                FailureKind::Timeout,
                format!(
                    "no first token within {:.1} s",
                    first_token_by
                        .saturating_duration_since(started)
                        .as_secs_f64()
                ),
            )
        };
        let failure = loop {
            match tokio::time::timeout_at(first_token_by, stream.next()).await {
                Err(_) => break no_first_token(),
                Ok(Some(Ok(StreamEvent::Delta(text)))) if !text.is_empty() => {
                    return Ok(Committed {
                        idx,
                        stream,
                        first: text,
                        started,
                    });
                }
                Ok(Some(Ok(StreamEvent::Delta(_)))) => continue,
                Ok(Some(Ok(StreamEvent::Finish { .. }))) => {
                    break Failure::new(
                        FailureKind::EmptyResponse,
                        "the stream finished without text",
                    );
                }
                Ok(Some(Err(f))) => break f,
                Ok(None) => {
                    break Failure::new(
                        FailureKind::StreamInterrupted,
                        "the stream ended without events",
                    );
                }
            }
        };
        drop(stream);
        self.report(idx, Err(failure.code()), started.elapsed());
        Err(Some((failure, started.elapsed())))
    }

    /// Sends the committed stream to the caller and pumps it to the end.
    async fn pump(
        mut self,
        c: Committed,
        kind: AttemptKind,
        mut attempts: Vec<Attempt>,
        content_filtered: bool,
        reply: oneshot::Sender<Result<GenerationStream, Error>>,
    ) {
        let Committed {
            idx,
            mut stream,
            first,
            started,
        } = c;
        let target = self.plan.targets[idx].clone();
        let idle = self
            .settings
            .providers
            .get(&*target.provider)
            .map_or(self.settings.timeouts, |p| p.timeouts)
            .stream_idle;
        let provider = target.provider.to_string();
        let mut model = stream.model().unwrap_or_else(|| target.model.to_string());
        let fell_back = target != self.plan.primary;
        let request_id = std::mem::take(&mut self.request_id);
        let ttft_ms = millis(self.started.elapsed());
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let _ = tx.try_send(StreamItem::Delta(first));
        let handle = GenerationStream {
            request_id: request_id.clone(),
            provider: provider.clone(),
            model: model.clone(),
            fell_back,
            content_filtered,
            rx,
        };
        if reply.send(Ok(handle)).is_err() {
            self.report(idx, Ok(()), started.elapsed());
            return; // the caller left before the first byte; dropping `stream` closes upstream
        }
        // One idle timer for the whole stream: each event only notes the
        // time, and the timer is moved when it fires early (a new timer per
        // token meant a timer-wheel insertion and removal per token).
        let mut last_data = Instant::now();
        let silence = tokio::time::sleep_until(last_data + idle);
        tokio::pin!(silence);
        let end: Result<(FinishReason, Option<Usage>), Failure> = loop {
            let next = tokio::select! {
                biased;
                next = stream.next() => next,
                () = &mut silence => {
                    if last_data.elapsed() < idle {
                        silence.as_mut().reset(last_data + idle);
                        continue;
                    }
                    break Err(Failure::new(
                        FailureKind::StreamInterrupted,
                        format!("no data for {:.1} s", idle.as_secs_f64()),
                    ));
                }
                _ = tx.closed() => break Err(Failure::new(FailureKind::StreamInterrupted, "the client went away")),
            };
            last_data = Instant::now();
            match next {
                Some(Ok(StreamEvent::Delta(text))) => {
                    if text.is_empty() {
                        continue;
                    }
                    if tx.send(StreamItem::Delta(text)).await.is_err() {
                        break Err(Failure::new(
                            FailureKind::StreamInterrupted,
                            "the client went away",
                        ));
                    }
                    // Time spent waiting on a slow reader is not silence.
                    last_data = Instant::now();
                }
                Some(Ok(StreamEvent::Finish {
                    finish_reason,
                    usage,
                    model: named,
                })) => {
                    if let Some(named) = named {
                        model = named;
                    }
                    break Ok((finish_reason, usage));
                }
                Some(Err(f)) => break Err(f),
                None => {
                    break Err(Failure::new(
                        FailureKind::StreamInterrupted,
                        "the stream ended without a finish",
                    ));
                }
            }
        };
        drop(stream); // closes the upstream connection now, whatever happened
        let latency = started.elapsed();
        let latency_ms = millis(self.started.elapsed());
        let ctx = EventContext {
            request_id: request_id.clone(),
            ..self.event_context()
        };
        match end {
            Ok((finish_reason, usage)) => {
                self.report(idx, Ok(()), latency);
                attempts.push(self.record(idx, kind, Outcome::Ok, latency, None));
                let done = StreamDone {
                    request_id,
                    provider,
                    model,
                    finish_reason,
                    fell_back,
                    content_filtered,
                    usage,
                    attempts,
                    latency_ms,
                    ttft_ms,
                };
                let cost =
                    crate::run::cost_usd(&self.settings, &done.provider, &done.model, done.usage);
                if let (true, Some(spend), Some(cost)) = (fell_back, &self.spend, cost) {
                    spend.add(cost);
                }
                self.bus
                    .publish(GenerationEvent::stream_done(&ctx, &done, cost));
                let _ = tx.send(StreamItem::Done(Box::new(done))).await;
            }
            Err(f) => {
                let client_left = tx.is_closed();
                // After the commit, a refusal stays a refusal and anything
                // else is an interruption; the inner cause is in the detail.
                let code = if f.kind.is_refusal() {
                    FailureCode::ContentFilter
                } else {
                    FailureCode::StreamInterrupted
                };
                let content_filtered = content_filtered || f.kind.is_refusal();
                // A client that leaves says nothing about the provider.
                self.report(idx, if client_left { Ok(()) } else { Err(code) }, latency);
                let message = f.describe();
                attempts.push(self.record(
                    idx,
                    kind,
                    Outcome::Failed(code),
                    latency,
                    Some(message.clone()),
                ));
                tracing::warn!(request_id = %request_id, provider = %provider, code = %code, error = %message, "stream failed after commit");
                let error = StreamError {
                    request_id,
                    code,
                    message,
                    provider,
                    model,
                    fell_back,
                    content_filtered,
                    attempts,
                    latency_ms,
                    ttft_ms,
                };
                self.bus
                    .publish(GenerationEvent::stream_failed(&ctx, &error));
                let _ = tx.send(StreamItem::Error(Box::new(error))).await;
            }
        }
    }

    fn record(
        &self,
        idx: usize,
        kind: AttemptKind,
        outcome: Outcome,
        latency: Duration,
        detail: Option<String>,
    ) -> Attempt {
        let target = &self.plan.targets[idx];
        Attempt {
            provider: target.provider.to_string(),
            model: target.model.to_string(),
            kind,
            outcome,
            latency_ms: millis(latency),
            detail,
        }
    }

    /// Tells the provider's actor how a stream it opened ended.
    fn report(&self, idx: usize, outcome: Result<(), FailureCode>, latency: Duration) {
        if let Some(actor) = &self.actors[idx] {
            let model = Arc::clone(&self.plan.targets[idx].model);
            let _ = actor.cast(ProviderMsg::Completed {
                model,
                outcome,
                latency,
            });
        }
    }
}
