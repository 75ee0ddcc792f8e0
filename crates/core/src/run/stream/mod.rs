//! A streamed request: execute the decision machine's steps
//! until one target commits, then pump it to the reader; never switch
//! afterwards (but for an opted-in continuation after a cut).
//!
//! What each event means — progress, commitment, the end of an attempt — is
//! decided by [`understudy_policy::stream::Watch`]; this file only executes it:
//! it holds what the watch says to hold, arms the silence deadline it
//! names, and reports failures to the decision machine. Before the commit
//! a failure is reported like any failed attempt, and the caller has seen
//! nothing. After it, a failure ends the stream with a final error
//! ([`understudy_policy::decide::after_commit`] names its code), unless
//! `continue_after_cut` lets a target that accepts an assistant prefill
//! continue the answer.
//!
//! Under `stream_commit = "complete"` the caller gets its handle at once
//! (so the front end can keep the connection alive), nothing commits before
//! a target finishes, and the held answer is then sent at once.

mod continuation;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use understudy_policy::decide::{Call, after_commit};
use understudy_policy::stream::{HELD_BYTES, Step, Watch, may_continue};
use understudy_settings::StreamCommit;
use understudy_types::attempt::{Attempt, AttemptKind, Outcome};
use understudy_types::chat::{ChatRequest, FinishReason, StreamEvent, Usage};
use understudy_types::error::Error;
use understudy_types::failure::{Failure, FailureKind};
use understudy_types::{StreamDone, StreamError, StreamItem};

use crate::actor::provider::by_deadline;
use crate::adapter::BoxEventStream;
use crate::event::GenerationEvent;
use crate::run::call::lease;
use crate::run::walk::{Called, Caller, Path, ServedCall, Walked};
use crate::run::{Run, millis};
use crate::stream::{Feed, GenerationStream, Served, feed};
use continuation::Sent;

/// How a target's answer ends: its finish reason, usage and the model it
/// named.
type Finish = (FinishReason, Option<Usage>, Option<String>);

/// One item with the watch's verdict on it, as a pump acts on it: an event
/// to pass on (`Ok(Some)`), nothing (`Ok(None)`: dropped), or the pump's
/// end (`Err`: the finish, or the failure; the watch fails every other end
/// of the body).
fn judged(
    step: Step,
    next: Option<Result<StreamEvent, Failure>>,
) -> Result<Option<StreamEvent>, Result<Finish, Failure>> {
    match (step, next) {
        (Step::Fail(f), _) => Err(Err(f)),
        (Step::Drop, _) => Ok(None),
        (
            _,
            Some(Ok(StreamEvent::Finish {
                finish_reason,
                usage,
                model,
            })),
        ) => Err(Ok((finish_reason, usage, model))),
        (_, Some(Ok(event))) => Ok(Some(event)),
        (_, _) => Err(Err(Failure::new(
            FailureKind::StreamInterrupted,
            "the stream ended",
        ))),
    }
}

/// A target that committed.
struct Committed {
    idx: usize,
    kind: AttemptKind,
    stream: BoxEventStream,
    watch: Watch,
    /// What the reader gets first: everything held before the commit.
    first: Vec<StreamItem>,
    /// Set when the target already finished (`stream_commit = "complete"`).
    finish: Option<Finish>,
    started: Instant,
    /// The pool key it went to, by name.
    key: Option<String>,
    /// The attempt's span, when the request is traced.
    span: Option<[u8; 8]>,
}

/// Who serves a committed stream, as the reader is told and its last
/// item says.
struct ServedBy {
    request_id: String,
    provider: String,
    /// The model the target named, else the plan's.
    model: String,
    fell_back: bool,
    content_filtered: bool,
    ttft_ms: f64,
}

impl ServedBy {
    /// Tells the caller who serves: its handle, or (a held stream) the
    /// `Served` item on the handle it has; the channel to the reader, or
    /// `None` when the caller left before the first byte.
    async fn tell(&self, client: Client, native: bool) -> Option<feed::Sender> {
        match client {
            Client::Waiting(reply) => {
                let (tx, rx) = feed::channel();
                let handle = GenerationStream::new(
                    self.request_id.clone(),
                    self.provider.clone(),
                    self.model.clone(),
                    self.fell_back,
                    self.content_filtered,
                    native,
                    rx,
                );
                reply.send(Ok(handle)).is_ok().then_some(tx)
            }
            Client::Open(tx) => {
                let served = Served {
                    provider: self.provider.clone(),
                    model: self.model.clone(),
                    fell_back: self.fell_back,
                    content_filtered: self.content_filtered,
                };
                let _ = tx.send(Feed::Served(Box::new(served))).await;
                Some(tx)
            }
        }
    }
}

/// The committed attempt, once its stream ended: for its record.
struct Ended {
    idx: usize,
    kind: AttemptKind,
    key: Option<String>,
    span: Option<[u8; 8]>,
    latency: Duration,
    /// What became of the fallback credit it carried, as its stream said.
    fallback_credit: Option<understudy_types::credit::CreditStatus>,
}

/// How a committed stream's answer ended: its finish or its failure, who
/// continued it after a cut, and (for a recorded trace) its answer's id.
struct StreamEnd {
    end: Result<Finish, Failure>,
    continued_by: Option<String>,
    response_id: Option<String>,
}

type Reply = oneshot::Sender<Result<GenerationStream, Error>>;

/// Who the run answers: a caller still waiting for its handle, or (a held
/// stream, or after the commit) the channel behind the handle it has.
enum Client {
    Waiting(Reply),
    Open(feed::Sender),
}

impl Client {
    /// Resolves when the caller has gone away.
    async fn closed(&mut self) {
        match self {
            Self::Waiting(reply) => reply.closed().await,
            Self::Open(tx) => tx.closed().await,
        }
    }
}

impl Caller for Client {
    async fn wait(&mut self, wait: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = self.closed() => false,
        }
    }

    /// Boxed: the walk's future holds no step's state between steps.
    async fn unless_left<F: Future>(&mut self, step: F) -> Option<F::Output> {
        tokio::select! {
            o = Box::pin(step) => Some(o),
            () = self.closed() => None,
        }
    }
}

/// The stream path's part of the walk: a target opened and read until it
/// commits.
struct Streaming;

impl Path for Streaming {
    type Served = Committed;
    const UNSERVED: &'static str = "served without a stream";

    fn chat(&self, run: &mut Run, _: Call) -> Arc<ChatRequest> {
        Arc::clone(&run.chat)
    }

    async fn call(
        &self,
        run: &mut Run,
        call: Call,
        chat: Arc<ChatRequest>,
        key: usize,
        span: Option<[u8; 8]>,
    ) -> Called<Committed> {
        let idx = call.target;
        let started = crate::runtime_clock::now();
        let first_token_by = (started + run.timeouts(idx).first_token).min(run.deadline);
        let credit = run.credit_for(call, key);
        let (failure, limits) = match run.open(idx, key, chat, first_token_by, span, credit).await {
            Ok(stream) => {
                let limits = stream.rate_limits();
                match watch_until_commit(&*run, call, stream, started, first_token_by).await {
                    // The key's word is in at the commit (its headers).
                    Ok(committed) => {
                        return Called {
                            result: Ok(committed),
                            limits,
                            latency: crate::runtime_clock::since(started),
                        };
                    }
                    Err(failure) => {
                        run.stream_ended(
                            idx,
                            Err(failure.code()),
                            crate::runtime_clock::since(started),
                        );
                        (failure, limits)
                    }
                }
            }
            Err(f) => {
                run.outcome(idx, Err(f.code()));
                (f, None)
            }
        };
        Called {
            result: Err(failure),
            limits,
            latency: crate::runtime_clock::since(started),
        }
    }

    /// Opened, then read until it commits; counted in flight in its
    /// provider's counts until then.
    async fn call_owned(&self, kit: crate::run::walk::Kit) -> crate::run::walk::Owned<Committed> {
        let started = crate::runtime_clock::now();
        let first_token_by = (started + kit.timeouts.first_token).min(kit.deadline);
        let (result, limits, opened) =
            match crate::run::hedge::open(&kit, started, first_token_by).await {
                Ok((stream, in_flight)) => {
                    let limits = stream.rate_limits();
                    let result =
                        watch_until_commit(&kit, kit.call, stream, started, first_token_by).await;
                    // From here the run counts it, when the stream ends.
                    in_flight.hand_over();
                    (result, limits, true)
                }
                Err(f) => (Err(f), None, false),
            };
        crate::run::walk::Owned {
            called: Called {
                result,
                limits,
                latency: crate::runtime_clock::since(started),
            },
            opened,
        }
    }

    /// A stream's attempt is recorded when it ends (by the pump).
    fn served(&self, _: &Run, _: Call, committed: &mut Committed, kept: ServedCall<'_>) {
        committed.key = kept.key;
        committed.span = kept.span;
    }
}

/// The neutral event as the item a reader gets; `None` for a finish.
fn item_of(event: StreamEvent) -> Option<StreamItem> {
    match event {
        StreamEvent::Delta(text) => Some(StreamItem::Delta(text)),
        StreamEvent::Reasoning(text) => Some(StreamItem::Reasoning(text)),
        StreamEvent::ToolCall(delta) => Some(StreamItem::ToolCall(Box::new(delta))),
        StreamEvent::Native(event) => Some(StreamItem::Native(Box::new(event))),
        StreamEvent::Finish { .. } => None,
    }
}

/// Sends `item`; `false` when the reader has gone.
async fn send(tx: &feed::Sender, item: StreamItem) -> bool {
    tx.send(Feed::Item(item)).await.is_ok()
}

fn client_left() -> Failure {
    Failure::new(FailureKind::StreamInterrupted, "the client went away")
}

/// What reading a stream to its commit needs of its run (the run's own,
/// or a hedge's call's, owned).
trait WatchRules {
    fn commit(&self) -> StreamCommit;
    fn stream_idle(&self, idx: usize) -> Duration;
    fn deadline(&self) -> Instant;
}

impl WatchRules for Run {
    fn commit(&self) -> StreamCommit {
        self.streams.commit
    }

    fn stream_idle(&self, idx: usize) -> Duration {
        self.timeouts(idx).stream_idle
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl WatchRules for crate::run::walk::Kit {
    fn commit(&self) -> StreamCommit {
        self.commit
    }

    fn stream_idle(&self, _: usize) -> Duration {
        self.timeouts.stream_idle
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Reads an opened stream, holding its events, until the watch commits
/// (or, held whole, until it finishes).
async fn watch_until_commit<R: WatchRules>(
    rules: &R,
    call: Call,
    mut stream: BoxEventStream,
    started: Instant,
    first_token_by: Instant,
) -> Result<Committed, Failure> {
    let idle = rules.stream_idle(call.target);
    let mut watch = Watch::new(rules.commit(), HELD_BYTES);
    let mut held: Vec<StreamItem> = Vec::new();
    let mut last = started;
    loop {
        let by = watch
            .silence_deadline(first_token_by, last, idle)
            .min(rules.deadline());
        let Ok(next) = tokio::time::timeout_at(by.into(), stream.next()).await else {
            let since = if watch.progressed() { last } else { started };
            return Err(watch.on_silence(by.saturating_duration_since(since)));
        };
        last = crate::runtime_clock::now();
        let step = watch.on_item(next.as_ref());
        let Some(Ok(event)) = next else {
            return Err(match step {
                Step::Fail(f) => f,
                _ => Failure::new(FailureKind::StreamInterrupted, "the stream ended"),
            });
        };
        match step {
            Step::Drop => {}
            Step::Hold | Step::Forward => held.extend(item_of(event)),
            Step::Commit | Step::Finish => {
                let finish = match event {
                    StreamEvent::Finish {
                        finish_reason,
                        usage,
                        model,
                    } => Some((finish_reason, usage, model)),
                    other => {
                        held.extend(item_of(other));
                        None
                    }
                };
                return Ok(Committed {
                    idx: call.target,
                    kind: call.kind,
                    stream,
                    watch,
                    first: held,
                    finish,
                    started,
                    key: None,
                    span: None,
                });
            }
            Step::Fail(f) => return Err(f),
        }
    }
}

/// A committed stream and everything its pump needs: what the walk to
/// the commit hands on.
struct Opened {
    run: Run,
    c: Committed,
    attempts: Vec<Attempt>,
    fell_back: bool,
    content_filtered: bool,
    client: Client,
}

impl Run {
    /// Walks the plan for a streamed request; replies on `reply` at the
    /// commit (or with the error when no target got that far) — at once
    /// for a held stream — then pumps the committed stream to its end.
    ///
    /// Thousands of streams wait for a first token or stay open at once:
    /// the walk and the pump are boxed apart, so the task holds only the
    /// phase it is in; the pump gets its state in one box (a future keeps
    /// an `async fn`'s arguments apart from the locals they move into).
    pub(crate) fn stream(self, reply: Reply) -> impl Future<Output = ()> {
        let opening = Box::pin(self.open_stream(reply));
        async move {
            if let Some(opened) = opening.await {
                Box::pin(Run::pump(opened)).await;
            }
        }
    }

    /// The walk to the commit: the committed stream, or `None` when the
    /// request failed (its error went to the caller) or the caller left.
    async fn open_stream(mut self, reply: Reply) -> Option<Box<Opened>> {
        let mut client = if self.streams.commit == StreamCommit::Complete {
            let (tx, rx) = feed::channel();
            let mut handle = GenerationStream::new(
                String::from(&*self.request_id),
                String::new(),
                self.plan
                    .targets
                    .first()
                    .map_or_else(String::new, |t| t.model.to_string()),
                false,
                false,
                false,
                rx,
            );
            handle.held = true;
            if reply.send(Ok(handle)).is_err() {
                return None;
            }
            Client::Open(tx)
        } else {
            Client::Waiting(reply)
        };
        let mut decider = self.decider();
        let walked = self
            .walk(&Streaming, &mut client, &mut decider, Vec::new())
            .await;
        self.note_choice(&decider);
        let (c, attempts) = match walked {
            Walked::Served {
                served, attempts, ..
            } => (served, attempts),
            Walked::Stopped(error) => {
                self.fail(client, error).await;
                return None;
            }
            Walked::Left => return None,
        };
        Some(Box::new(Opened {
            fell_back: decider.is_fallback(c.idx),
            content_filtered: decider.content_filtered(),
            run: self,
            c,
            attempts,
            client,
        }))
    }

    /// Publishes the failed event and answers the caller with the error: as
    /// the reply, or in-band on a held stream.
    async fn fail(&mut self, client: Client, error: Error) {
        let latency_ms = millis(crate::runtime_clock::since(self.started));
        self.publish(GenerationEvent::failed(
            self.event_context(),
            &error,
            true,
            latency_ms,
        ));
        match client {
            Client::Waiting(reply) => {
                let _ = reply.send(Err(error));
            }
            Client::Open(tx) => {
                let error =
                    StreamError::from_error(String::from(&*self.request_id), &error, latency_ms);
                let _ = send(&tx, StreamItem::Error(Box::new(error))).await;
            }
        }
    }

    /// Opens a stream of `chat` on target `idx` (connect and headers) by
    /// `first_token_by`, counted in the provider's counts from here on (a
    /// failure to open is counted at once; an opened stream when it ends,
    /// by [`Run::stream_ended`]).
    async fn open(
        &mut self,
        idx: usize,
        key: usize,
        chat: Arc<ChatRequest>,
        first_token_by: Instant,
        span: Option<[u8; 8]>,
        credit: Option<Box<crate::adapter::CreditUse>>,
    ) -> Result<BoxEventStream, Failure> {
        let mut options = self.call_options(idx, self.timeouts(idx).connect, span);
        options.credit = credit;
        self.calling(idx);
        let target = &self.plan.targets[idx];
        let lease = lease(&mut self.leases[idx], &self.supervisor, &target.provider).await?;
        let (adapter, in_flight) = lease.attempt(key);
        let opened = by_deadline(
            &lease.actor,
            first_token_by,
            crate::runtime_clock::now(),
            "no response",
            adapter.stream(&target.model, &chat, &options),
        )
        .await;
        match &opened {
            Err(f) => in_flight.finish(Err(f.code())),
            // From here the run counts it, when the stream ends.
            Ok(_) => in_flight.hand_over(),
        }
        opened
    }

    /// Sends the committed stream to the caller and pumps it to the end:
    /// relays it, continues it after a cut where it may, records the
    /// attempt and publishes how it ended.
    async fn pump(opened: Box<Opened>) {
        // Moved out in a block: the box is freed here, not at the end.
        let Opened {
            mut run,
            mut c,
            mut attempts,
            fell_back,
            content_filtered,
            client,
        } = {
            let opened = opened;
            *opened
        };
        let target = &run.plan.targets[c.idx];
        let by = ServedBy {
            provider: target.provider.to_string(),
            model: c.stream.model().unwrap_or_else(|| target.model.to_string()),
            request_id: String::from(&*run.request_id),
            fell_back,
            content_filtered,
            ttft_ms: millis(crate::runtime_clock::since(run.started)),
        };
        let held = matches!(client, Client::Open(_));
        // A held stream's handle went out before anyone served: it renders
        // neutral items only, so a native target's own events are left out.
        let native = !held && matches!(c.first.first(), Some(StreamItem::Native(_)));
        let capture = run.notes.as_ref().is_some_and(|n| n.content.is_some());
        let mut sent = Sent::new(run.streams.continue_after_cut && !native, capture);
        let Some(tx) = by.tell(client, native).await else {
            run.stream_ended(c.idx, Ok(()), crate::runtime_clock::since(c.started));
            return; // the caller left before the first byte; dropping `stream` closes upstream
        };
        let end = run.relay_committed(&mut c, held, &tx, &mut sent).await;
        // Asked only for a recorded trace (it copies the id).
        let response_id = run.notes.as_ref().and_then(|_| c.stream.response_id());
        let fallback_credit = c.stream.fallback_credit();
        let Committed {
            idx,
            kind,
            stream,
            watch,
            started,
            key,
            span,
            ..
        } = c;
        drop(stream); // closes the upstream connection now, whatever happened
        let attempt = Ended {
            idx,
            kind,
            key,
            span,
            latency: crate::runtime_clock::since(started),
            fallback_credit,
        };
        let mut ending = StreamEnd {
            end,
            continued_by: None,
            response_id,
        };
        match &ending.end {
            Err(f)
                if sent.on && !tx.is_closed() && may_continue(&f.kind, watch.sent_tool_calls()) =>
            {
                // The committed target is recorded as cut; another may
                // continue the answer.
                let board = Err(after_commit(&f.kind));
                run.record_committed(attempt, board, Some(f), &mut attempts);
                // Boxed: the pump's future holds no continuation's state
                // while its own stream is open.
                let continued = Box::pin(run.continuation(idx, &mut sent, &tx, &mut attempts));
                ending.end = match continued.await {
                    Ok((by, finish, id)) => {
                        ending.continued_by = Some(by);
                        // The answer's end is the continuation's.
                        ending.response_id = id;
                        Ok(finish)
                    }
                    Err(e) => Err(e),
                };
            }
            end => {
                let board = match end {
                    Ok(_) => Ok(()),
                    // A client that leaves says nothing about the provider.
                    Err(_) if tx.is_closed() => Ok(()),
                    Err(f) => Err(after_commit(&f.kind)),
                };
                run.record_committed(attempt, board, end.as_ref().err(), &mut attempts);
            }
        }
        // Boxed, as the continuation: the end's state is not held while
        // the stream is open.
        Box::pin(run.publish_end(by, ending, attempts, &sent.text, &tx)).await;
    }

    /// Sends the reader what was held before the commit, then (unless the
    /// target already finished) relays the rest as it comes.
    async fn relay_committed(
        &self,
        c: &mut Committed,
        held: bool,
        tx: &feed::Sender,
        sent: &mut Sent,
    ) -> Result<Finish, Failure> {
        for item in std::mem::take(&mut c.first) {
            if held && matches!(item, StreamItem::Native(_)) {
                continue;
            }
            sent.note(&item);
            if !send(tx, item).await {
                return Err(client_left());
            }
        }
        match c.finish.take() {
            Some(finish) => Ok(finish),
            None => {
                let idle = self.timeouts(c.idx).stream_idle;
                Self::relay(&mut c.stream, &mut c.watch, tx, idle, sent).await
            }
        }
    }

    /// Records how the committed attempt ended: `board` on the board (and
    /// in the provider's counts), and the attempt (failed by `failure`, or
    /// served) among `attempts`.
    fn record_committed(
        &self,
        attempt: Ended,
        board: Result<(), understudy_types::FailureCode>,
        failure: Option<&Failure>,
        attempts: &mut Vec<Attempt>,
    ) {
        self.stream_ended(attempt.idx, board, attempt.latency);
        let outcome = match failure {
            None => Outcome::Ok,
            Some(f) => Outcome::Failed(after_commit(&f.kind)),
        };
        let mut record =
            self.attempt_record(attempt.idx, attempt.kind, outcome, attempt.latency, failure);
        record.key = attempt.key;
        record.span_id = attempt.span;
        record.fallback_credit = attempt.fallback_credit.map(|s| s.as_str().to_owned());
        attempts.push(record);
    }

    /// Publishes the stream's event and sends the reader its last item:
    /// the answer's end, or the error the stream ended in (`text`: what
    /// the reader got, for a recorded trace).
    async fn publish_end(
        &mut self,
        by: ServedBy,
        ending: StreamEnd,
        attempts: Vec<Attempt>,
        text: &str,
        tx: &feed::Sender,
    ) {
        let latency_ms = millis(crate::runtime_clock::since(self.started));
        let ctx = self.event_context();
        let ServedBy {
            request_id,
            provider,
            mut model,
            fell_back,
            content_filtered,
            ttft_ms,
        } = by;
        match ending.end {
            Ok((finish_reason, usage, named)) => {
                if let Some(named) = named.filter(|_| ending.continued_by.is_none()) {
                    model = named;
                }
                self.note_served(ending.response_id.as_deref(), &finish_reason, text, &[]);
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
                    continued_by: ending.continued_by,
                };
                let cost = self.cost_of(&done.provider, &done.model, done.usage);
                self.spent(fell_back, cost);
                let name = self.shared_name(&done.provider);
                self.publish(GenerationEvent::stream_done(&ctx, &done, name, cost));
                let _ = send(tx, StreamItem::Done(Box::new(done))).await;
            }
            Err(f) => {
                let code = after_commit(&f.kind);
                let content_filtered =
                    content_filtered || code == understudy_types::FailureCode::ContentFilter;
                let message = f.describe();
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
                let name = self.shared_name(&error.provider);
                self.publish(GenerationEvent::stream_failed(&ctx, &error, name));
                let _ = send(tx, StreamItem::Error(Box::new(error))).await;
            }
        }
    }

    /// Pumps a committed stream to the reader until it ends.
    async fn relay(
        stream: &mut BoxEventStream,
        watch: &mut Watch,
        tx: &feed::Sender,
        idle: Duration,
        sent: &mut Sent,
    ) -> Result<Finish, Failure> {
        // One idle timer for the whole stream: each event only notes the
        // time, and the timer is moved when it fires early (a new timer per
        // token meant a timer-wheel insertion and removal per token).
        let mut last_data = crate::runtime_clock::now();
        let silence = tokio::time::sleep_until((last_data + idle).into());
        tokio::pin!(silence);
        loop {
            let next = tokio::select! {
                biased;
                next = stream.next() => next,
                () = &mut silence => {
                    if crate::runtime_clock::since(last_data) < idle {
                        silence.as_mut().reset((last_data + idle).into());
                        continue;
                    }
                    return Err(watch.on_silence(idle));
                }
                () = tx.closed() => return Err(client_left()),
            };
            last_data = crate::runtime_clock::now();
            let step = watch.on_item(next.as_ref());
            let event = match judged(step, next) {
                Ok(Some(event)) => event,
                Ok(None) => continue,
                Err(end) => return end,
            };
            let Some(item) = item_of(event) else { continue };
            sent.note(&item);
            if !send(tx, item).await {
                return Err(client_left());
            }
            // Time spent waiting on a slow reader is not silence.
            last_data = crate::runtime_clock::now();
        }
    }
}
