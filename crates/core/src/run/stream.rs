//! A streamed request (DESIGN §3): execute the decision machine's steps
//! until one target sends its first non-empty delta, commit to it, and pump
//! it to the reader; never switch afterwards.
//!
//! Before the commit a failure (connect error, HTTP error, refusal at the
//! start, malformed event, no first token within `first_token`) is reported
//! to the machine like any failed attempt, and the caller has seen nothing.
//! After it, a failure ends the stream with a final error
//! ([`crate::policy::decide::after_commit`] names its code) and no other
//! target is contacted.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::actor::provider::ProviderMsg;
use crate::adapter::BoxEventStream;
use crate::attempt::{Attempt, AttemptKind, Outcome};
use crate::chat::{FinishReason, StreamEvent, Usage};
use crate::error::Error;
use crate::event::{EventContext, GenerationEvent};
use crate::failure::{Failure, FailureKind};
use crate::policy::decide::{Call, Decider, Input, Next, after_commit};
use crate::run::call::call_provider;
use crate::run::{Run, cost_usd, millis};
use crate::stream::{GenerationStream, STREAM_BUFFER, StreamDone, StreamError, StreamItem};

/// A target that sent its first text or tool-call fragment.
struct Committed {
    idx: usize,
    kind: AttemptKind,
    stream: BoxEventStream,
    /// What the reader gets first: the provider's own events that came
    /// before the commit (natively forwarded requests), then the
    /// committing item.
    first: Vec<StreamItem>,
    started: Instant,
}

/// How opening one target went.
enum Opened {
    Committed(Committed),
    /// Its breaker turned the call away: not an attempt.
    Skipped,
    Failed(Failure, Duration),
}

type Reply = oneshot::Sender<Result<GenerationStream, Error>>;

impl Run {
    /// Walks the plan for a streamed request; replies on `reply` at the
    /// commit (or with the error when no target got that far).
    pub(crate) async fn stream(mut self, mut reply: Reply) {
        let mut decider = Decider::new(&self.plan, self.rules, self.deadline);
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut committed: Option<Committed> = None;
        let mut input = Input::Start;
        loop {
            let next = decider.next(input, Instant::now(), fastrand::f64());
            let call = match next {
                Next::Call(call) => call,
                Next::Wait(wait, call) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = reply.closed() => return, // the caller went away
                    }
                    call
                }
                Next::Unsupported(call) => {
                    attempts.push(self.unsupported(call));
                    input = Input::Failed(FailureKind::Unsupported);
                    continue;
                }
                Next::CheckBudget => {
                    input = Input::Budget(self.budget_allows().await);
                    continue;
                }
                Next::Served { .. } => break,
                Next::Stop(verdict) => {
                    let error = self.error(verdict, attempts);
                    self.fail(reply, error);
                    return;
                }
            };
            // Boxed, like the pump below: the run task then holds only the
            // phase it is in (thousands of streams stay open at once).
            let opened = tokio::select! {
                o = Box::pin(self.open_and_wait(call)) => o,
                _ = reply.closed() => {
                    // The caller went away mid-attempt: give back the probe
                    // this call took, if it took one, so the breaker is not
                    // left waiting for an outcome that never comes.
                    self.release_held_probe();
                    return;
                }
            };
            input = match opened {
                Opened::Committed(c) => {
                    committed = Some(c);
                    Input::Served
                }
                Opened::Skipped => Input::Skipped,
                Opened::Failed(failure, latency) => {
                    attempts.push(self.attempt_record(
                        call.target,
                        call.kind,
                        Outcome::Failed(failure.code()),
                        latency,
                        Some(failure.describe()),
                    ));
                    Input::Failed(failure.kind)
                }
            };
        }
        let Some(c) = committed else {
            // Unreachable: `Served` follows a commit.
            self.fail(reply, Error::Engine("served without a stream".into()));
            return;
        };
        let fell_back = decider.is_fallback(c.idx);
        let content_filtered = decider.content_filtered();
        Box::pin(self.pump(c, attempts, fell_back, content_filtered, reply)).await;
    }

    /// Publishes the failed event and answers the caller with the error.
    fn fail(&self, reply: Reply, error: Error) {
        self.bus.publish(GenerationEvent::failed(
            &self.event_context(),
            &error,
            true,
            millis(self.started.elapsed()),
        ));
        let _ = reply.send(Err(error));
    }

    /// Opens the call's target and waits for its first non-empty text.
    async fn open_and_wait(&mut self, call: Call) -> Opened {
        let idx = call.target;
        if !self.admit(call).await {
            return Opened::Skipped;
        }
        let started = Instant::now();
        let target = self.plan.targets[idx].clone();
        let timeouts = self.timeouts(idx);
        let first_token_by = (started + timeouts.first_token).min(self.deadline);
        let wait = first_token_by.saturating_duration_since(started) + Duration::from_secs(1);
        let chat = Arc::clone(&self.chat);
        let opened = call_provider(
            &mut self.actors[idx],
            &self.supervisor,
            &target.provider,
            wait,
            |reply| ProviderMsg::OpenStream {
                model: Arc::clone(&target.model),
                request: Arc::clone(&chat),
                deadline: first_token_by,
                connect: timeouts.connect,
                reply,
            },
        )
        .await;
        let failure = match opened {
            Ok(mut stream) => {
                // A natively forwarded stream's own events before the commit
                // (`message_start`, thinking…): held back until this target
                // commits, dropped with it otherwise.
                let mut held: Vec<StreamItem> = Vec::new();
                let failure = loop {
                    match tokio::time::timeout_at(first_token_by, stream.next()).await {
                        Err(_) => {
                            break Failure::new(
                                FailureKind::Timeout,
                                format!(
                                    "no first token within {:.1} s",
                                    first_token_by
                                        .saturating_duration_since(started)
                                        .as_secs_f64()
                                ),
                            );
                        }
                        Ok(Some(Ok(StreamEvent::Delta(text)))) if !text.is_empty() => {
                            held.push(StreamItem::Delta(text));
                            return Opened::Committed(Committed {
                                idx,
                                kind: call.kind,
                                stream,
                                first: held,
                                started,
                            });
                        }
                        Ok(Some(Ok(StreamEvent::Native(event)))) => {
                            held.push(StreamItem::Native(Box::new(event)));
                        }
                        // A tool call commits like text: the client has
                        // something it would act on.
                        Ok(Some(Ok(StreamEvent::ToolCall(delta)))) => {
                            held.push(StreamItem::ToolCall(Box::new(delta)));
                            return Opened::Committed(Committed {
                                idx,
                                kind: call.kind,
                                stream,
                                first: held,
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
                self.stream_ended(idx, Err(failure.code()), started.elapsed());
                failure
            }
            Err(f) => {
                self.outcome(idx, Err(f.code()));
                f
            }
        };
        Opened::Failed(failure, started.elapsed())
    }

    /// Sends the committed stream to the caller and pumps it to the end.
    async fn pump(
        mut self,
        c: Committed,
        mut attempts: Vec<Attempt>,
        fell_back: bool,
        content_filtered: bool,
        reply: Reply,
    ) {
        let Committed {
            idx,
            kind,
            mut stream,
            first,
            started,
        } = c;
        let target = self.plan.targets[idx].clone();
        let idle = self.timeouts(idx).stream_idle;
        let provider = target.provider.to_string();
        let mut model = stream.model().unwrap_or_else(|| target.model.to_string());
        let request_id = std::mem::take(&mut self.request_id);
        let ttft_ms = millis(self.started.elapsed());
        let native = matches!(first.first(), Some(StreamItem::Native(_)));
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        // Usually one item (the first text); a native stream's held events
        // beyond the channel's room are sent once the reader has the handle.
        let mut first = first.into_iter();
        for item in first.by_ref().take(STREAM_BUFFER) {
            let _ = tx.try_send(item);
        }
        let handle = GenerationStream::new(
            request_id.clone(),
            provider.clone(),
            model.clone(),
            fell_back,
            content_filtered,
            native,
            rx,
        );
        if reply.send(Ok(handle)).is_err() {
            self.stream_ended(idx, Ok(()), started.elapsed());
            return; // the caller left before the first byte; dropping `stream` closes upstream
        }
        for item in first {
            if tx.send(item).await.is_err() {
                self.stream_ended(idx, Ok(()), started.elapsed());
                return;
            }
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
                Some(Ok(StreamEvent::Native(event))) => {
                    if tx.send(StreamItem::Native(Box::new(event))).await.is_err() {
                        break Err(Failure::new(
                            FailureKind::StreamInterrupted,
                            "the client went away",
                        ));
                    }
                    last_data = Instant::now();
                }
                Some(Ok(StreamEvent::ToolCall(delta))) => {
                    if tx
                        .send(StreamItem::ToolCall(Box::new(delta)))
                        .await
                        .is_err()
                    {
                        break Err(Failure::new(
                            FailureKind::StreamInterrupted,
                            "the client went away",
                        ));
                    }
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
                self.stream_ended(idx, Ok(()), latency);
                attempts.push(self.attempt_record(idx, kind, Outcome::Ok, latency, None));
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
                let cost = cost_usd(&self.settings, &done.provider, &done.model, done.usage);
                self.spent(fell_back, cost);
                self.bus
                    .publish(GenerationEvent::stream_done(&ctx, &done, cost));
                let _ = tx.send(StreamItem::Done(Box::new(done))).await;
            }
            Err(f) => {
                let client_left = tx.is_closed();
                let code = after_commit(&f.kind);
                let content_filtered =
                    content_filtered || code == crate::FailureCode::ContentFilter;
                // A client that leaves says nothing about the provider.
                self.stream_ended(idx, if client_left { Ok(()) } else { Err(code) }, latency);
                let message = f.describe();
                attempts.push(self.attempt_record(
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
}
