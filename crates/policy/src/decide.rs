//! The decision machine: the failover table (and its streamed variant) as
//! one pure state machine. Given the plan, the request's mode, the policy
//! settings and how the last attempt went, it answers "what next": call
//! target *i* (as the primary, the softened retry, the rate-limit retry or a
//! fallback), wait *d* and then call, ask whether the fallback spend allows
//! another fallback, or stop (served, or with a request-level verdict).
//!
//! No I/O, no clock reads, no randomness: "now" and the rate-limit jitter
//! are inputs, so the whole table is tested as data (below) without HTTP
//! and without sleeping. The run (core's `run/answer.rs`) and the stream
//! (`run/stream/`) are thin executors: they make the calls this machine
//! asks for and report back.
//!
//! The two modes differ only here: a stream gets no
//! softened retry, and "served" means the first text or tool-call delta
//! arrived (the commit); after it nothing is decided here any more, except
//! how a failure is coded ([`after_commit`]).
//!
//! A session pinned to its first target ([`Decider::weigh_switch`]) weighs
//! that target's rate-limit wait against what leaving its prompt cache
//! costs (`affinity::Weigh`): a dear wait moves on at once. Without a pin
//! the table is unchanged.

use std::time::{Duration, Instant};

use understudy_types::attempt::AttemptKind;
use understudy_types::failure::{Disposition, FailureCode, FailureKind};
use understudy_types::refusal::RefusalPolicy;

use crate::affinity::{Choice, Weigh};
use crate::backoff::rate_limit_wait;
use crate::plan::Plan;

/// How the answer is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One complete answer.
    Answer,
    /// Server-sent deltas, committed to the first target that sends one.
    Stream,
}

/// The settings the table reads for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    pub mode: Mode,
    pub refusal: RefusalPolicy,
    /// The longest rate-limit wait worth sitting out.
    pub rate_limit_max_wait: Duration,
    /// Only the primary may serve.
    pub no_fallback: bool,
    /// A fallback spend cap is configured: ask before each fallback.
    pub spend_cap: bool,
}

/// One call for the executor to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Index into the plan's targets.
    pub target: usize,
    pub kind: AttemptKind,
    /// Past the target's breaker: every target of the plan was open, so
    /// the primary is tried anyway.
    pub force: bool,
}

/// What the executor does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Call(Call),
    /// Wait this long, then make the call (the rate-limit retry).
    Wait(Duration, Call),
    /// The call's target lacks what the request needs: record it as an
    /// `unsupported` attempt without calling it, and answer with
    /// `Input::Failed(FailureKind::Unsupported)`.
    Unsupported(Call),
    /// Ask whether the fallback spend cap allows one more fallback and
    /// answer with [`Input::Budget`].
    CheckBudget,
    /// The target served (for a stream: sent its first delta).
    Served {
        target: usize,
    },
    /// The request is over without an answer.
    Stop(Verdict),
}

/// Why a request ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The plan has no target: every one is unavailable.
    NoTargets,
    /// Every target's breaker turned the call away before any was made.
    AllSkipped,
    /// Every target that was tried failed; the request's code.
    Failed(FailureCode),
    /// A refusal the policy returns to the caller.
    Refused,
    /// The fallback spend cap is reached.
    BudgetSpent,
    /// The request deadline ran out.
    Deadline,
}

/// How the last step went, or the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Start,
    /// The call succeeded (for a stream: the first delta arrived).
    Served,
    /// The call failed.
    Failed(FailureKind),
    /// The call failed for a reason of its key's (401, 403, 429, quota:
    /// `policy::keys::scope`) and another key of the same target may take
    /// the request: the same call again, on that key, before any other
    /// target. An attempt, as `Failed` is.
    KeyFailed(FailureKind),
    /// The call was not made: the breaker (or the fleet's probe lock)
    /// turned it away. Not an attempt.
    Skipped,
    /// The answer to [`Next::CheckBudget`].
    Budget(bool),
}

/// The role a target plays in the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Primary,
    Fallback,
}

/// The plan's targets as the walk reads them: how many, which is the
/// primary, which lack what the request needs. One bit a target, held in
/// place for routes of up to 128 targets (every request makes one).
#[derive(Debug, Clone)]
struct Targets {
    len: usize,
    primary: Bits,
    unsupported: Bits,
}

/// A flag per target.
#[derive(Debug, Clone)]
enum Bits {
    Inline(u128),
    Listed(Vec<bool>),
}

impl Bits {
    /// The flags of targets `0..len`, each `set(i)`.
    fn of(len: usize, set: impl Fn(usize) -> bool) -> Self {
        if len > 128 {
            return Self::Listed((0..len).map(set).collect());
        }
        Self::Inline((0..len).filter(|&i| set(i)).fold(0, |b, i| b | 1 << i))
    }

    fn get(&self, i: usize) -> bool {
        match self {
            Self::Inline(b) => i < 128 && b >> i & 1 == 1,
            Self::Listed(v) => v.get(i).copied().unwrap_or(false),
        }
    }
}

impl Targets {
    fn of(plan: &Plan) -> Self {
        let targets = &plan.targets;
        Self {
            len: targets.len(),
            primary: Bits::of(targets.len(), |i| targets[i] == plan.primary),
            unsupported: Bits::of(targets.len(), |i| {
                plan.unsupported.get(i).is_some_and(Option::is_some)
            }),
        }
    }

    /// Target `idx`'s role; `None` past the plan.
    fn role(&self, idx: usize) -> Option<Role> {
        (idx < self.len).then(|| {
            if self.primary.get(idx) {
                Role::Primary
            } else {
                Role::Fallback
            }
        })
    }
}

/// One request's walk through its plan.
#[derive(Debug, Clone)]
pub struct Decider {
    rules: Rules,
    targets: Targets,
    forced: bool,
    deadline: Instant,
    /// The current target.
    at: usize,
    /// The call made (or waiting for the budget's answer).
    pending: Option<Call>,
    /// The current target had its softened retry.
    softened: bool,
    /// Attempts made so far (skips are not attempts; unsupported targets
    /// are, though never called).
    attempts: usize,
    /// Calls turned away by a breaker (not attempts).
    skips: usize,
    /// Of the targets actually called: whether every one was rate limited,
    /// and the last failure's code.
    all_rate_limited: bool,
    last_code: Option<FailureCode>,
    content_filtered: bool,
    /// A session pinned to the first target: what a switch costs, and what
    /// the rule chose (boxed: a request without a pin carries a pointer).
    weighed: Option<Box<Weighed>>,
}

/// The wait-or-switch rule's inputs and its choice, once made.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Weighed {
    weigh: Weigh,
    choice: Option<Choice>,
}

/// After the commit a stream cannot move: a refusal stays a refusal, and
/// anything else is an interruption (the inner cause goes in the detail).
pub fn after_commit(kind: &FailureKind) -> FailureCode {
    match kind.disposition() {
        Disposition::Refusal => FailureCode::ContentFilter,
        _ => FailureCode::StreamInterrupted,
    }
}

// === impl Decider ===

impl Decider {
    /// A machine for `plan`, which must be over by `deadline`.
    pub fn new(plan: &Plan, rules: Rules, deadline: Instant) -> Self {
        Self {
            rules,
            targets: Targets::of(plan),
            forced: plan.forced,
            deadline,
            at: 0,
            pending: None,
            softened: false,
            attempts: 0,
            skips: 0,
            all_rate_limited: true,
            last_code: None,
            content_filtered: false,
            weighed: None,
        }
    }

    /// The first target is the one a session is pinned to: a rate-limit
    /// wait there is weighed against `weigh`'s switch cost.
    pub fn weigh_switch(&mut self, weigh: Weigh) {
        self.weighed = Some(Box::new(Weighed {
            weigh,
            choice: None,
        }));
    }

    /// What the wait-or-switch rule chose, with the switch cost it
    /// weighed (USD), when a pinned target asked to wait.
    pub fn wait_or_switch(&self) -> Option<(Choice, f64)> {
        let w = self.weighed.as_deref()?;
        Some((w.choice?, w.weigh.switch_cost_usd))
    }

    /// Whether the pinned target's `wait` is dearer than leaving its
    /// cache (only the pinned first target, with somewhere to go).
    fn switches(&mut self, wait: Duration) -> bool {
        let elsewhere = self.at + 1 < self.targets.len && !self.rules.no_fallback;
        match self.weighed.as_deref_mut() {
            Some(w) if self.at == 0 && elsewhere => {
                let choice = w.weigh.choose(wait);
                w.choice = Some(choice);
                choice == Choice::Switch
            }
            _ => false,
        }
    }

    /// Whether the pinned target's `wait` is cheaper than leaving its
    /// cache: an outage's wait is weighed only for a pinned session with
    /// somewhere else to go (without one, the outage leaves at once).
    fn stays(&mut self, wait: Duration) -> bool {
        self.weighs() && !self.switches(wait)
    }

    /// Whether a wait on the current target is weighed against its cache.
    fn weighs(&self) -> bool {
        let elsewhere = self.at + 1 < self.targets.len && !self.rules.no_fallback;
        self.weighed.is_some() && self.at == 0 && elsewhere
    }

    /// Some attempt was refused by a content filter (whoever serves).
    pub fn content_filtered(&self) -> bool {
        self.content_filtered
    }

    /// Whether target `idx` is a fallback (not the route's primary):
    /// serving from it counts as falling back, and its spend counts
    /// against the cap.
    pub fn is_fallback(&self, idx: usize) -> bool {
        self.targets.role(idx) == Some(Role::Fallback)
    }

    /// The next step, given how the last one went. `now` is the current
    /// time; `jitter` (0.0 to 1.0) places a rate-limit wait that the
    /// provider did not specify.
    pub fn next(&mut self, input: Input, now: Instant, jitter: f64) -> Next {
        match input {
            Input::Start => {
                if self.targets.len == 0 {
                    return Next::Stop(Verdict::NoTargets);
                }
                self.enter(0, now)
            }
            Input::Budget(allowed) => match self.pending {
                Some(call) if allowed => Next::Call(call),
                Some(_) => Next::Stop(Verdict::BudgetSpent),
                None => self.enter(self.at + 1, now),
            },
            Input::Served => Next::Served { target: self.at },
            Input::Skipped => {
                self.skips += 1;
                match self.pending {
                    Some(Call {
                        kind: AttemptKind::Softened,
                        ..
                    }) => self.after_refusal(now),
                    _ => self.enter(self.at + 1, now),
                }
            }
            Input::Failed(kind) => self.failed(&kind, now, jitter),
            Input::KeyFailed(kind) => self.key_failed(&kind, now, jitter),
        }
    }

    /// The current target answered that the prompt is too long for its
    /// context window (`windows`: each plan target's, `None` unknown; an
    /// empty slice knows none). A failure like any other, except where the
    /// walk goes: to the next target whose window is larger, passing over
    /// those no larger ([`crate::fit::larger_after`]). The same as
    /// `next(Input::Failed(ContextLength))` when the windows are unknown.
    pub fn too_long(&mut self, windows: &[Option<u32>], now: Instant) -> Next {
        if self.too_long_passes_over() {
            // Those no larger are behind us already.
            self.at = crate::fit::larger_after(windows, self.at) - 1;
        }
        self.failed(&FailureKind::ContextLength, now, 0.0)
    }

    /// Whether a "too long" answer now passes over the targets no larger
    /// ([`Self::too_long`]): for a call that was made, not a softened
    /// retry (which hands over as a refusal does) nor when none is
    /// pending.
    pub fn too_long_passes_over(&self) -> bool {
        matches!(self.pending, Some(call) if call.kind != AttemptKind::Softened)
    }

    /// The plan target the walk is at (the last one called).
    pub fn at(&self) -> usize {
        self.at
    }

    /// Another key of the same target takes the call (a rate limit there
    /// is no reason to wait: this key waits alone).
    fn key_failed(&mut self, kind: &FailureKind, now: Instant, jitter: f64) -> Next {
        let Some(call) = self.pending else {
            return self.failed(kind, now, jitter);
        };
        let code = kind.code();
        self.attempts += 1;
        self.all_rate_limited &= code == FailureCode::RateLimited;
        self.last_code = Some(code);
        if now >= self.deadline {
            return Next::Stop(Verdict::Deadline);
        }
        Next::Call(call)
    }

    fn failed(&mut self, kind: &FailureKind, now: Instant, jitter: f64) -> Next {
        let code = kind.code();
        self.attempts += 1;
        if code != FailureCode::Unsupported {
            self.all_rate_limited &= code == FailureCode::RateLimited;
            self.last_code = Some(code);
        }
        // A failure at the deadline (a timeout, typically) ends the walk.
        if now >= self.deadline {
            return Next::Stop(Verdict::Deadline);
        }
        let Some(call) = self.pending else {
            return self.enter(self.at + 1, now);
        };
        if call.kind == AttemptKind::Softened {
            // The softened retry failed, whatever the reason.
            self.content_filtered |= kind.disposition() == Disposition::Refusal;
            return self.after_refusal(now);
        }
        match (kind.disposition(), kind) {
            (Disposition::Refusal, _) => self.refused(call, now),
            (Disposition::RateLimit, FailureKind::RateLimited { retry_after })
                if call.kind != AttemptKind::RateLimitRetry =>
            {
                match rate_limit_wait(*retry_after, self.rules.rate_limit_max_wait, jitter) {
                    // A session's cache is worth less than the wait: leave.
                    Some(wait) if now + wait < self.deadline && self.switches(wait) => {
                        self.enter(self.at + 1, now)
                    }
                    Some(wait) if now + wait < self.deadline => {
                        let retry = Call {
                            kind: AttemptKind::RateLimitRetry,
                            ..call
                        };
                        self.pending = Some(retry);
                        Next::Wait(wait, retry)
                    }
                    // Longer than the cap, or past the deadline: move on.
                    _ => self.enter(self.at + 1, now),
                }
            }
            // An overload that says when it can serve again: a pinned
            // session whose cache is worth more than the wait waits once;
            // anything else leaves at once, as for any outage.
            (
                Disposition::Outage,
                FailureKind::Unavailable {
                    retry_after: Some(hint),
                },
            ) if call.kind != AttemptKind::RateLimitRetry => {
                match rate_limit_wait(Some(*hint), self.rules.rate_limit_max_wait, jitter) {
                    Some(wait) if now + wait < self.deadline && self.stays(wait) => {
                        let retry = Call {
                            kind: AttemptKind::RateLimitRetry,
                            ..call
                        };
                        self.pending = Some(retry);
                        Next::Wait(wait, retry)
                    }
                    _ => self.enter(self.at + 1, now),
                }
            }
            // Outages, timeouts, auth, quota, bad requests, a second rate
            // limit: never the same target again.
            _ => self.enter(self.at + 1, now),
        }
    }

    /// A hedge ran the current target and target `idx` (a later one) at
    /// once, and the walk goes on from `idx`: the current target's call
    /// counts as an attempt (with `failed`, its failure, when it failed
    /// rather than lost), and what the executor reports next is `idx`'s.
    pub fn moved_to(&mut self, idx: usize, failed: Option<&FailureKind>) {
        self.attempts += 1;
        if let Some(kind) = failed {
            let code = kind.code();
            self.all_rate_limited &= code == FailureCode::RateLimited;
            self.last_code = Some(code);
            self.content_filtered |= kind.disposition() == Disposition::Refusal;
        }
        let Some(role) = self.targets.role(idx) else {
            return;
        };
        self.at = idx;
        self.softened = false;
        self.pending = Some(Call {
            target: idx,
            kind: match role {
                Role::Primary => AttemptKind::Primary,
                Role::Fallback => AttemptKind::Fallback,
            },
            force: false,
        });
    }

    /// A content filter refused the current target.
    fn refused(&mut self, call: Call, now: Instant) -> Next {
        self.content_filtered = true;
        if self.rules.refusal == RefusalPolicy::Surface {
            return Next::Stop(Verdict::Refused);
        }
        // Only the primary earns the softened retry, and only when the
        // answer is not streamed; a refusing fallback hands over.
        if self.targets.role(self.at) == Some(Role::Primary)
            && self.rules.mode == Mode::Answer
            && self.rules.refusal.softens()
            && !self.softened
        {
            self.softened = true;
            let softened = Call {
                kind: AttemptKind::Softened,
                ..call
            };
            self.pending = Some(softened);
            return Next::Call(softened);
        }
        self.after_refusal(now)
    }

    /// After a refusal (and the softened retry, if there was one).
    fn after_refusal(&mut self, now: Instant) -> Next {
        if self.targets.role(self.at) == Some(Role::Primary) && !self.rules.refusal.falls_back() {
            return Next::Stop(Verdict::Refused);
        }
        self.enter(self.at + 1, now)
    }

    /// Moves to target `idx` (or ends the plan when there is none).
    fn enter(&mut self, idx: usize, now: Instant) -> Next {
        self.pending = None;
        let Some(role) = self.targets.role(idx) else {
            return self.exhausted(now);
        };
        if role == Role::Fallback && self.rules.no_fallback {
            return self.exhausted(now);
        }
        if now >= self.deadline {
            return Next::Stop(Verdict::Deadline);
        }
        self.at = idx;
        self.softened = false;
        let call = Call {
            target: idx,
            kind: match role {
                Role::Primary => AttemptKind::Primary,
                Role::Fallback => AttemptKind::Fallback,
            },
            force: self.forced && idx == 0,
        };
        self.pending = Some(call);
        if self.targets.unsupported.get(idx) {
            return Next::Unsupported(call);
        }
        if role == Role::Fallback && self.rules.spend_cap {
            return Next::CheckBudget;
        }
        Next::Call(call)
    }

    /// Every target is behind us.
    fn exhausted(&mut self, now: Instant) -> Next {
        self.pending = None;
        if now >= self.deadline {
            return Next::Stop(Verdict::Deadline);
        }
        if self.attempts == 0 {
            return Next::Stop(Verdict::AllSkipped);
        }
        let code = match self.last_code {
            // Nothing was called, and a target that could have served was
            // only turned away by its breaker: no provider was available.
            None if self.skips > 0 => return Next::Stop(Verdict::AllSkipped),
            // Nothing was called: every attempt was an unsupported target.
            None => FailureCode::Unsupported,
            Some(_) if self.all_rate_limited => FailureCode::RateLimited,
            Some(code) => code,
        };
        Next::Stop(Verdict::Failed(code))
    }
}

#[cfg(test)]
mod tests;
