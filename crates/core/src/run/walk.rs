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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::key_pools::KeyInUse;
use crate::run::Run;
use crate::run::key_choice::KeyChoice;
use understudy_policy::decide::{Call, Decider, Input, Next};
use understudy_policy::plan::Unavailable;
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
        stats.record(outcome, crate::runtime_clock::now(), &self.settings.balance);
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
            let attempt = self.attempt(path, call, &mut attempts, &mut served);
            input = match caller.unless_left(attempt).await {
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
        let idx = call.target;
        let chat = path.chat(self, call);
        if !self.admit(call).await {
            self.note_skip(idx, Unavailable::BreakerOpen);
            return Input::Skipped;
        }
        let ticket = match self.pick_key(call) {
            KeyChoice::Single => None,
            KeyChoice::Pooled(ticket) => Some(ticket),
            KeyChoice::None => {
                self.release_held_probe();
                self.note_skip(idx, Unavailable::KeysOut);
                return Input::Skipped;
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
                return Input::Failed(failure.kind);
            }
        };
        let key = ticket.as_ref().map_or(0, KeyInUse::key);
        if !self.credentials_ready(idx, key).await {
            self.release_held_probe();
            self.note_skip(idx, Unavailable::Credentials);
            return Input::Skipped;
        }
        let key_name = ticket.as_ref().and_then(KeyInUse::name);
        let span = self.attempt_span(idx);
        self.leases[idx].enter();
        let called = path.call(self, call, chat, key, span).await;
        self.counted(idx, &called);
        let key_input = self.key_outcome(
            idx,
            ticket,
            called.limits.as_ref(),
            called.result.as_ref().err(),
        );
        match called.result {
            Ok(mut s) => {
                let kept = ServedCall {
                    key: key_name,
                    span,
                    latency: called.latency,
                    attempts,
                };
                path.served(self, call, &mut s, kept);
                *served = Some(s);
                Input::Served
            }
            Err(mut f) => {
                self.keep_credit(call, key, &mut f);
                let mut record = self.attempt_record(
                    idx,
                    call.kind,
                    Outcome::Failed(f.code()),
                    called.latency,
                    Some(&f),
                );
                record.key = key_name;
                record.span_id = span;
                attempts.push(record);
                key_input.unwrap_or(Input::Failed(f.kind))
            }
        }
    }
}
