//! The walk through a plan, written once for both paths: the decision
//! machine's steps executed (wait, call, ask the spend meter, stop), and
//! each attempt's sequence — the breaker's admission, the pool key, the
//! credentials, the call, the attempt recorded and the key's outcome told
//! to its pool — the same for an answer and a stream.
//!
//! What differs is supplied by the path as type parameters (no dynamic
//! dispatch; the answer's attempt is not boxed, a stream's is, as each
//! was before): a [`Path`] makes the call (an answer's completion, or a
//! stream read until it commits) and keeps what served; a [`Caller`] says
//! whether the one who asked is still there (a stream's caller may leave
//! mid-walk; an answer's caller leaving drops the whole walk).
//!
//! A route that hedges makes its attempts through `hedge.rs` instead
//! (admitted here the same way), each call from a [`Kit`] it owns; a run
//! of any other route never holds hedging's state.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::actor::provider::Lease;
use crate::adapter::CallOptions;
use crate::key_pools::KeyInUse;
use crate::run::Run;
use crate::run::key_choice::KeyChoice;
use understudy_policy::decide::{Call, Decider, Input, Next};
use understudy_policy::plan::Unavailable;
use understudy_settings::{StreamCommit, Timeouts};
use understudy_types::attempt::{Attempt, Outcome};
use understudy_types::chat::ChatRequest;
use understudy_types::error::Error;
use understudy_types::failure::{Failure, FailureKind};
use understudy_types::ratelimit::RateLimits;

/// What one path (an answer, a stream) does where the two differ.
pub(super) trait Path {
    /// What a served call hands back: a completion, or a committed stream.
    type Served;
    /// The error when the machine says `Served` and nothing was (it cannot
    /// happen: `Served` follows a served call).
    const UNSERVED: &'static str;

    /// The request `call` sends.
    fn chat(&self, run: &mut Run, call: Call) -> Arc<ChatRequest>;

    /// Makes `call` with pool key `key` in span `span`, once its breaker
    /// admitted it and its credentials are ready; counts it in the
    /// provider's counts.
    fn call(
        &self,
        run: &mut Run,
        call: Call,
        chat: Arc<ChatRequest>,
        key: usize,
        span: Option<[u8; 8]>,
    ) -> impl Future<Output = Called<Self::Served>>;

    /// A call served: notes what the run keeps of it (on pool key `key`, in
    /// span `span`, after `latency`).
    fn served(&self, run: &Run, call: Call, served: &mut Self::Served, kept: ServedCall<'_>);

    /// Makes a call from what it needs, owned, so that a hedge runs two
    /// at once (see `hedge.rs`); its breaker's record is the caller's.
    fn call_owned(&self, kit: Kit) -> impl Future<Output = Owned<Self::Served>>;
}

/// One admitted call's own: its pool key (the ticket, its index and name)
/// and its span.
pub(super) struct Held {
    pub ticket: Option<KeyInUse>,
    pub key: usize,
    pub key_name: Option<String>,
    pub span: Option<[u8; 8]>,
}

impl Held {
    /// What a call that has given its own back holds.
    pub const NONE: Self = Self {
        ticket: None,
        key: 0,
        key_name: None,
        span: None,
    };
}

/// Where a served call went: its pool key (by name), its span, how long
/// it took; and the walk's attempts so far.
pub(super) struct ServedCall<'a> {
    pub key: Option<String>,
    pub span: Option<[u8; 8]>,
    pub latency: Duration,
    pub attempts: &'a mut Vec<Attempt>,
}

/// Whether the one who asked is still there.
pub(super) trait Caller {
    /// Waits `wait` out; `false` when the caller left first.
    fn wait(&mut self, wait: Duration) -> impl Future<Output = bool>;

    /// Runs `step` to its end, unless the caller leaves first (`None`).
    fn unless_left<F: Future>(&mut self, step: F) -> impl Future<Output = Option<F::Output>>;
}

/// Everything one call needs, owned: a path's call made from it borrows
/// no run (a hedge runs two at once).
pub(super) struct Kit {
    pub call: Call,
    pub model: Arc<str>,
    pub lease: Lease,
    pub key: usize,
    pub chat: Arc<ChatRequest>,
    /// The request as asked (an answer is normalized against it).
    pub asked: Arc<ChatRequest>,
    pub options: CallOptions,
    pub timeouts: Timeouts,
    /// When the whole request must be over.
    pub deadline: Instant,
    pub commit: StreamCommit,
}

/// A call made from a [`Kit`], and whether it opened a stream (its
/// failure is then recorded as a stream's end).
pub(super) struct Owned<S> {
    pub called: Called<S>,
    pub opened: bool,
}

/// How one call went: what it served or why it failed, what its answer
/// said of its key's rate limits, and how long it took.
pub(super) struct Called<S> {
    pub result: Result<S, Failure>,
    pub limits: Option<RateLimits>,
    pub latency: Duration,
}

/// How a walk ended.
pub(super) enum Walked<S> {
    /// Plan target `target` served; every attempt is in `attempts` (a
    /// stream's committed one is recorded when it ends).
    Served {
        served: S,
        target: usize,
        attempts: Vec<Attempt>,
    },
    /// The machine stopped: the request's error.
    Stopped(Error),
    /// The caller left (any half-open probe the call in flight took was
    /// given back).
    Left,
}

impl Run {
    /// Counts a call to a group's member in its stats (a no-op for any other
    /// target): its outcome, its latency to its answer or first output, and
    /// (unless it is a stream that goes on) its end in flight.
    fn counted<S>(&mut self, idx: usize, called: &Called<S>) {
        let slot = &mut self.leases[idx];
        let Some(stats) = &slot.stats else {
            return;
        };
        let outcome = match &called.result {
            Ok(_) => Ok(called.latency),
            Err(f) => Err(&f.kind),
        };
        stats.record(
            outcome,
            self.rules.mode,
            crate::runtime_clock::now(),
            &self.settings.balance,
        );
        if called.result.is_err() || self.rules.mode == understudy_policy::decide::Mode::Answer {
            slot.leave();
        }
    }

    /// Executes the machine's steps until it stops, one attempt at a time,
    /// with `attempts` (empty) to record them in.
    pub(super) async fn walk<P: Path, C: Caller>(
        &mut self,
        path: &P,
        caller: &mut C,
        decider: &mut Decider,
        mut attempts: Vec<Attempt>,
    ) -> Walked<P::Served> {
        let mut served = None;
        let mut input = Input::Start;
        loop {
            // A served call's step needs no jitter: no draw for it.
            let jitter = match input {
                Input::Served => 0.0,
                _ => fastrand::f64(),
            };
            let next = match input {
                Input::Failed(FailureKind::ContextLength) => {
                    self.after_too_long(decider, crate::runtime_clock::now())
                }
                input @ (Input::Failed(_) | Input::KeyFailed(_)) => {
                    self.weigh_on_failure(decider);
                    decider.next(input, crate::runtime_clock::now(), jitter)
                }
                input => decider.next(input, crate::runtime_clock::now(), jitter),
            };
            let call = match next {
                Next::Call(call) => call,
                Next::Wait(wait, call) => {
                    if !caller.wait(wait).await {
                        return Walked::Left;
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
                Next::Served { target } => {
                    return match served.take() {
                        Some(served) => Walked::Served {
                            served,
                            target,
                            attempts,
                        },
                        None => Walked::Stopped(Error::Engine(P::UNSERVED.into())),
                    };
                }
                Next::Stop(verdict) => return Walked::Stopped(self.error(verdict, attempts)),
            };
            let step = if self.hedge.is_none() {
                let attempt = self.attempt(path, call, &mut attempts, &mut served);
                caller.unless_left(attempt).await
            } else {
                // Boxed: a route that does not hedge never holds its state.
                let attempt = self.hedged_attempt(path, call, &mut attempts, &mut served);
                let step = caller.unless_left(Box::pin(attempt)).await;
                // A hedge moved the walk to its backup: the machine hears it.
                if let Some(h) = self.hedge.as_deref_mut() {
                    if let Some((idx, failed)) = h.moved.take() {
                        decider.moved_to(idx, failed.as_ref());
                    }
                }
                step
            };
            input = match step {
                Some(input) => input,
                None => {
                    // The caller went away mid-attempt: give back the probe
                    // this call took, if it took one, so the breaker is not
                    // left waiting for an outcome that never comes.
                    self.release_held_probe();
                    return Walked::Left;
                }
            };
        }
    }

    /// Makes one attempt and records it (unless its breaker, its pool or
    /// its credentials turned it away: then it is passed over); what the
    /// machine hears of it.
    async fn attempt<P: Path>(
        &mut self,
        path: &P,
        call: Call,
        attempts: &mut Vec<Attempt>,
        served: &mut Option<P::Served>,
    ) -> Input {
        let (chat, held) = match self.admitted(path, call, attempts).await {
            Ok(admitted) => admitted,
            Err(input) => return input,
        };
        let called = path.call(self, call, chat, held.key, held.span).await;
        self.settled(path, call, called, held, attempts, served)
    }

    /// Admits `call` past its breaker, its pool and its credentials,
    /// counted in flight on its target: the request it sends and its own;
    /// or, turned away (passed over, or a pool rate limited as a whole:
    /// recorded in `attempts`), what the machine hears.
    pub(super) async fn admitted<P: Path>(
        &mut self,
        path: &P,
        call: Call,
        attempts: &mut Vec<Attempt>,
    ) -> Result<(Arc<ChatRequest>, Held), Input> {
        let idx = call.target;
        let chat = path.chat(self, call);
        if !self.admit(call).await {
            self.note_skip(idx, Unavailable::BreakerOpen);
            return Err(Input::Skipped);
        }
        let ticket = match self.pick_key(call) {
            KeyChoice::Single => None,
            KeyChoice::Pooled(ticket) => Some(ticket),
            KeyChoice::None => {
                self.release_held_probe();
                self.note_skip(idx, Unavailable::KeysOut);
                return Err(Input::Skipped);
            }
            KeyChoice::RateLimited(failure) => {
                self.release_held_probe();
                attempts.push(self.attempt_record(
                    idx,
                    call.kind,
                    Outcome::Failed(failure.code()),
                    Duration::ZERO,
                    Some(&failure),
                ));
                return Err(Input::Failed(failure.kind));
            }
        };
        let key = ticket.as_ref().map_or(0, KeyInUse::key);
        if !self.credentials_ready(idx, key).await {
            self.release_held_probe();
            self.note_skip(idx, Unavailable::Credentials);
            return Err(Input::Skipped);
        }
        let held = Held {
            key_name: ticket.as_ref().and_then(KeyInUse::name),
            span: self.attempt_span(idx),
            ticket,
            key,
        };
        self.leases[idx].enter();
        Ok((chat, held))
    }

    /// Records how `call` (with its own `held`) went: in its target's
    /// stats, to its pool, among `attempts` (a served call's by its path);
    /// what the machine hears of it.
    pub(super) fn settled<P: Path>(
        &mut self,
        path: &P,
        call: Call,
        called: Called<P::Served>,
        held: Held,
        attempts: &mut Vec<Attempt>,
        served: &mut Option<P::Served>,
    ) -> Input {
        let idx = call.target;
        self.counted(idx, &called);
        let key_input = self.key_outcome(
            idx,
            held.ticket,
            called.limits.as_ref(),
            called.result.as_ref().err(),
        );
        match called.result {
            Ok(mut s) => {
                let kept = ServedCall {
                    key: held.key_name,
                    span: held.span,
                    latency: called.latency,
                    attempts,
                };
                path.served(self, call, &mut s, kept);
                *served = Some(s);
                Input::Served
            }
            Err(mut f) => {
                self.keep_credit(call, held.key, &mut f);
                let mut record = self.attempt_record(
                    idx,
                    call.kind,
                    Outcome::Failed(f.code()),
                    called.latency,
                    Some(&f),
                );
                record.key = held.key_name;
                record.span_id = held.span;
                attempts.push(record);
                key_input.unwrap_or(Input::Failed(f.kind))
            }
        }
    }
}
