//! The decision machine: DESIGN §2's table (and §3's streamed variant) as
//! one pure state machine. Given the plan, the request's mode, the policy
//! settings and how the last attempt went, it answers "what next": call
//! target *i* (as the primary, the softened retry, the rate-limit retry or a
//! fallback), wait *d* and then call, ask whether the fallback spend allows
//! another fallback, or stop (served, or with a request-level verdict).
//!
//! No I/O, no clock reads, no randomness: "now" and the rate-limit jitter
//! are inputs, so the whole table is tested as data (below) without HTTP
//! and without sleeping. The run (`run/answer.rs`) and the stream
//! (`run/stream.rs`) are thin executors: they make the calls this machine
//! asks for and report back.
//!
//! The two modes differ only where DESIGN §3 says: a stream gets no
//! softened retry, and "served" means the first text or tool-call delta
//! arrived (the commit); after it nothing is decided here any more, except
//! how a failure is coded ([`after_commit`]).

use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::AttemptKind;
use crate::failure::{Disposition, FailureCode, FailureKind};
use crate::policy::backoff::rate_limit_wait;
use crate::policy::plan::Plan;
use crate::policy::refusal::RefusalPolicy;

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

/// One request's walk through its plan.
#[derive(Debug, Clone)]
pub struct Decider {
    rules: Rules,
    roles: Vec<Role>,
    /// Per target: it lacks what the request needs.
    unsupported: Vec<bool>,
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
            roles: plan
                .targets
                .iter()
                .map(|t| {
                    if *t == plan.primary {
                        Role::Primary
                    } else {
                        Role::Fallback
                    }
                })
                .collect(),
            unsupported: plan.unsupported.iter().map(Option::is_some).collect(),
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
        }
    }

    /// Some attempt was refused by a content filter (whoever serves).
    pub fn content_filtered(&self) -> bool {
        self.content_filtered
    }

    /// Whether target `idx` is a fallback (not the route's primary):
    /// serving from it counts as falling back, and its spend counts
    /// against the cap.
    pub fn is_fallback(&self, idx: usize) -> bool {
        self.roles.get(idx) == Some(&Role::Fallback)
    }

    /// The next step, given how the last one went. `now` is the current
    /// time; `jitter` (0.0 to 1.0) places a rate-limit wait that the
    /// provider did not specify.
    pub fn next(&mut self, input: Input, now: Instant, jitter: f64) -> Next {
        match input {
            Input::Start => {
                if self.roles.is_empty() {
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
        }
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
            // Outages, timeouts, auth, quota, bad requests, a second rate
            // limit: never the same target again.
            _ => self.enter(self.at + 1, now),
        }
    }

    /// A content filter refused the current target.
    fn refused(&mut self, call: Call, now: Instant) -> Next {
        self.content_filtered = true;
        if self.rules.refusal == RefusalPolicy::Surface {
            return Next::Stop(Verdict::Refused);
        }
        // Only the primary earns the softened retry, and only when the
        // answer is not streamed; a refusing fallback hands over.
        if self.roles[self.at] == Role::Primary
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
        if self.roles[self.at] == Role::Primary && !self.rules.refusal.falls_back() {
            return Next::Stop(Verdict::Refused);
        }
        self.enter(self.at + 1, now)
    }

    /// Moves to target `idx` (or ends the plan when there is none).
    fn enter(&mut self, idx: usize, now: Instant) -> Next {
        self.pending = None;
        let Some(&role) = self.roles.get(idx) else {
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
        if self.unsupported.get(idx) == Some(&true) {
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
mod tests {
    //! The table as data: each case is a plan, the rules, and a script of
    //! (what happened, what the machine must answer). Time is a number of
    //! seconds after a fixed start; nothing sleeps.

    use super::*;
    use crate::target::Target;
    use AttemptKind::{Fallback, Primary, RateLimitRetry, Softened};

    const OUTAGES: [FailureKind; 5] = [
        FailureKind::Unavailable,
        FailureKind::Timeout,
        FailureKind::Connection,
        FailureKind::MalformedResponse,
        FailureKind::StreamInterrupted,
    ];
    const REJECTIONS: [FailureKind; 5] = [
        FailureKind::Auth,
        FailureKind::QuotaExceeded,
        FailureKind::BadRequest,
        FailureKind::ContextLength,
        FailureKind::EmptyResponse,
    ];

    /// (second, what happened, what the machine must answer)
    type Script = Vec<(u64, Input, Next)>;

    fn plan(n: usize, primary_available: bool) -> Plan {
        let all: Vec<Target> = (0..n + 1)
            .map(|i| Target::new(&format!("p{i}"), "m"))
            .collect();
        let targets = if primary_available {
            all[..n].to_vec()
        } else {
            all[1..].to_vec()
        };
        Plan {
            primary: all[0].clone(),
            targets,
            skipped: Vec::new(),
            forced: false,
            unsupported: Vec::new(),
        }
    }

    fn rules(mode: Mode, refusal: RefusalPolicy) -> Rules {
        Rules {
            mode,
            refusal,
            rate_limit_max_wait: Duration::from_secs(5),
            no_fallback: false,
            spend_cap: false,
        }
    }

    fn call(target: usize, kind: AttemptKind) -> Next {
        Next::Call(Call {
            target,
            kind,
            force: false,
        })
    }

    fn wait(secs: u64, target: usize) -> Next {
        Next::Wait(
            Duration::from_secs(secs),
            Call {
                target,
                kind: RateLimitRetry,
                force: false,
            },
        )
    }

    fn failed(kind: FailureKind) -> Input {
        Input::Failed(kind)
    }

    fn rate_limited(secs: u64) -> Input {
        Input::Failed(FailureKind::RateLimited {
            retry_after: Some(Duration::from_secs(secs)),
        })
    }

    /// Runs `script` (at second `t` of a 120 s request: input, expected)
    /// and returns the machine for further checks.
    fn check(plan: &Plan, rules: Rules, script: &[(u64, Input, Next)]) -> Decider {
        let t0 = Instant::now();
        let mut d = Decider::new(plan, rules, t0 + Duration::from_secs(120));
        for (i, (t, input, want)) in script.iter().enumerate() {
            let got = d.next(input.clone(), t0 + Duration::from_secs(*t), 0.5);
            assert_eq!(
                &got, want,
                "step {i} ({input:?} at {t} s) of {rules:?} over {plan:?}"
            );
        }
        d
    }

    #[test]
    fn the_primary_serves() {
        for mode in [Mode::Answer, Mode::Stream] {
            let d = check(
                &plan(3, true),
                rules(mode, RefusalPolicy::default()),
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, Input::Served, Next::Served { target: 0 }),
                ],
            );
            assert!(!d.content_filtered());
            assert!(!d.is_fallback(0) && d.is_fallback(1));
        }
    }

    #[test]
    fn outages_and_rejections_fall_back_at_once_in_both_modes() {
        for mode in [Mode::Answer, Mode::Stream] {
            for kind in OUTAGES.into_iter().chain(REJECTIONS) {
                check(
                    &plan(3, true),
                    rules(mode, RefusalPolicy::default()),
                    &[
                        (0, Input::Start, call(0, Primary)),
                        (0, failed(kind.clone()), call(1, Fallback)),
                        (1, failed(kind.clone()), call(2, Fallback)),
                        (
                            2,
                            failed(kind.clone()),
                            Next::Stop(Verdict::Failed(kind.code())),
                        ),
                    ],
                );
            }
        }
    }

    #[test]
    fn refusal_policies_in_both_modes() {
        use RefusalPolicy::*;
        let refusal = || failed(FailureKind::ContentFilter);
        // (mode, policy, script after the primary's refusal)
        let cases: Vec<(Mode, RefusalPolicy, Script)> = vec![
            (
                Mode::Answer,
                SoftenThenFallback,
                vec![
                    (0, refusal(), call(0, Softened)),
                    (1, refusal(), call(1, Fallback)),
                    (2, Input::Served, Next::Served { target: 1 }),
                ],
            ),
            (
                Mode::Answer,
                SoftenThenFallback,
                vec![
                    (0, refusal(), call(0, Softened)),
                    (1, Input::Served, Next::Served { target: 0 }),
                ],
            ),
            (
                Mode::Answer,
                SoftenThenFallback,
                // An outage on the softened retry also falls back.
                vec![
                    (0, refusal(), call(0, Softened)),
                    (1, failed(FailureKind::Unavailable), call(1, Fallback)),
                ],
            ),
            (
                Mode::Answer,
                SoftenOnly,
                vec![
                    (0, refusal(), call(0, Softened)),
                    (1, refusal(), Next::Stop(Verdict::Refused)),
                ],
            ),
            (
                Mode::Answer,
                FallbackOnly,
                vec![(0, refusal(), call(1, Fallback))],
            ),
            (
                Mode::Answer,
                Surface,
                vec![(0, refusal(), Next::Stop(Verdict::Refused))],
            ),
            // Streams: never softened.
            (
                Mode::Stream,
                SoftenThenFallback,
                vec![(0, refusal(), call(1, Fallback))],
            ),
            (
                Mode::Stream,
                SoftenOnly,
                vec![(0, refusal(), Next::Stop(Verdict::Refused))],
            ),
            (
                Mode::Stream,
                FallbackOnly,
                vec![(0, refusal(), call(1, Fallback))],
            ),
            (
                Mode::Stream,
                Surface,
                vec![(0, refusal(), Next::Stop(Verdict::Refused))],
            ),
        ];
        for (mode, policy, script) in cases {
            let mut full = vec![(0, Input::Start, call(0, Primary))];
            full.extend(script);
            let d = check(&plan(3, true), rules(mode, policy), &full);
            assert!(d.content_filtered(), "{mode:?} {policy:?}");
        }
    }

    #[test]
    fn a_refusing_fallback_hands_over_unless_the_policy_surfaces() {
        for mode in [Mode::Answer, Mode::Stream] {
            for policy in RefusalPolicy::ALL {
                let refusal = failed(FailureKind::ContentFilter);
                let after = if policy == RefusalPolicy::Surface {
                    Next::Stop(Verdict::Refused)
                } else {
                    call(2, Fallback)
                };
                let d = check(
                    &plan(3, true),
                    rules(mode, policy),
                    &[
                        (0, Input::Start, call(0, Primary)),
                        (0, failed(FailureKind::Unavailable), call(1, Fallback)),
                        (1, refusal, after),
                    ],
                );
                assert!(d.content_filtered());
            }
        }
    }

    #[test]
    fn content_filtered_stays_true_whoever_serves() {
        let d = check(
            &plan(2, true),
            rules(Mode::Answer, RefusalPolicy::FallbackOnly),
            &[
                (0, Input::Start, call(0, Primary)),
                (0, failed(FailureKind::ContentFilter), call(1, Fallback)),
                (1, Input::Served, Next::Served { target: 1 }),
            ],
        );
        assert!(d.content_filtered());
    }

    #[test]
    fn a_rate_limit_gets_one_retry_in_both_modes() {
        for mode in [Mode::Answer, Mode::Stream] {
            let r = rules(mode, RefusalPolicy::default());
            // Served on the retry.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, rate_limited(2), wait(2, 0)),
                    (2, Input::Served, Next::Served { target: 0 }),
                ],
            );
            // Limited again: fall back; the fallback's own limit gets its
            // own retry.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, rate_limited(2), wait(2, 0)),
                    (2, rate_limited(2), call(1, Fallback)),
                    (2, rate_limited(1), wait(1, 1)),
                    (
                        3,
                        rate_limited(1),
                        Next::Stop(Verdict::Failed(FailureCode::RateLimited)),
                    ),
                ],
            );
            // Longer than the cap (5 s): fall back at once.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, rate_limited(30), call(1, Fallback)),
                ],
            );
            // No hint: a jittered second (0.5 jitter is 1 s).
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (
                        0,
                        failed(FailureKind::RateLimited { retry_after: None }),
                        wait(1, 0),
                    ),
                ],
            );
            // A wait that would end past the deadline: fall back.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (117, rate_limited(3), call(1, Fallback)),
                ],
            );
            // Quota (billing) is never retried.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, failed(FailureKind::QuotaExceeded), call(1, Fallback)),
                ],
            );
        }
    }

    #[test]
    fn a_refusal_on_the_rate_limit_retry_is_a_refusal_of_the_primary() {
        check(
            &plan(2, true),
            rules(Mode::Answer, RefusalPolicy::SoftenThenFallback),
            &[
                (0, Input::Start, call(0, Primary)),
                (0, rate_limited(1), wait(1, 0)),
                (1, failed(FailureKind::ContentFilter), call(0, Softened)),
                // The softened retry is never retried for a rate limit.
                (1, rate_limited(1), call(1, Fallback)),
            ],
        );
    }

    #[test]
    fn the_request_code_is_the_last_failure_unless_every_one_was_a_rate_limit() {
        check(
            &plan(3, true),
            rules(Mode::Answer, RefusalPolicy::default()),
            &[
                (0, Input::Start, call(0, Primary)),
                (0, rate_limited(30), call(1, Fallback)),
                (0, failed(FailureKind::Auth), call(2, Fallback)),
                (
                    0,
                    failed(FailureKind::Timeout),
                    Next::Stop(Verdict::Failed(FailureCode::Timeout)),
                ),
            ],
        );
    }

    #[test]
    fn skips_move_on_and_a_plan_of_skips_is_no_provider() {
        for mode in [Mode::Answer, Mode::Stream] {
            check(
                &plan(2, true),
                rules(mode, RefusalPolicy::default()),
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, Input::Skipped, call(1, Fallback)),
                    (0, Input::Skipped, Next::Stop(Verdict::AllSkipped)),
                ],
            );
            check(
                &plan(0, true),
                rules(mode, RefusalPolicy::default()),
                &[(0, Input::Start, Next::Stop(Verdict::NoTargets))],
            );
        }
        // A softened retry that its breaker turns away ends the refusal's
        // handling like a failed one.
        check(
            &plan(2, true),
            rules(Mode::Answer, RefusalPolicy::SoftenOnly),
            &[
                (0, Input::Start, call(0, Primary)),
                (0, failed(FailureKind::ContentFilter), call(0, Softened)),
                (0, Input::Skipped, Next::Stop(Verdict::Refused)),
            ],
        );
    }

    #[test]
    fn an_unavailable_primary_makes_every_target_a_fallback() {
        let d = check(
            &plan(2, false),
            rules(Mode::Answer, RefusalPolicy::SoftenThenFallback),
            &[
                (0, Input::Start, call(0, Fallback)),
                // A fallback's refusal earns no softened retry.
                (0, failed(FailureKind::ContentFilter), call(1, Fallback)),
            ],
        );
        assert!(d.is_fallback(0));
    }

    #[test]
    fn no_fallback_stops_after_the_primary_and_its_retries() {
        let mut r = rules(Mode::Answer, RefusalPolicy::default());
        r.no_fallback = true;
        check(
            &plan(3, true),
            r,
            &[
                (0, Input::Start, call(0, Primary)),
                (0, rate_limited(1), wait(1, 0)),
                (
                    1,
                    failed(FailureKind::Unavailable),
                    Next::Stop(Verdict::Failed(FailureCode::Unavailable)),
                ),
            ],
        );
        check(
            &plan(3, true),
            r,
            &[
                (0, Input::Start, call(0, Primary)),
                (0, Input::Skipped, Next::Stop(Verdict::AllSkipped)),
            ],
        );
    }

    #[test]
    fn the_spend_cap_is_asked_before_each_fallback() {
        for mode in [Mode::Answer, Mode::Stream] {
            let mut r = rules(mode, RefusalPolicy::default());
            r.spend_cap = true;
            check(
                &plan(3, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (0, failed(FailureKind::Unavailable), Next::CheckBudget),
                    (0, Input::Budget(true), call(1, Fallback)),
                    (0, failed(FailureKind::Unavailable), Next::CheckBudget),
                    (0, Input::Budget(false), Next::Stop(Verdict::BudgetSpent)),
                ],
            );
        }
    }

    #[test]
    fn the_deadline_ends_the_walk() {
        for mode in [Mode::Answer, Mode::Stream] {
            let r = rules(mode, RefusalPolicy::default());
            // A timeout at the deadline is the deadline.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (
                        120,
                        failed(FailureKind::Timeout),
                        Next::Stop(Verdict::Deadline),
                    ),
                ],
            );
            // Any failure past the deadline: no next target.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (
                        121,
                        failed(FailureKind::Unavailable),
                        Next::Stop(Verdict::Deadline),
                    ),
                ],
            );
            // A timeout before it moves on.
            check(
                &plan(2, true),
                r,
                &[
                    (0, Input::Start, call(0, Primary)),
                    (60, failed(FailureKind::Timeout), call(1, Fallback)),
                ],
            );
        }
    }

    #[test]
    fn a_forced_primary_passes_its_breaker() {
        let mut p = plan(1, true);
        p.forced = true;
        check(
            &p,
            rules(Mode::Answer, RefusalPolicy::default()),
            &[
                (
                    0,
                    Input::Start,
                    Next::Call(Call {
                        target: 0,
                        kind: Primary,
                        force: true,
                    }),
                ),
                (
                    0,
                    rate_limited(1),
                    Next::Wait(
                        Duration::from_secs(1),
                        Call {
                            target: 0,
                            kind: RateLimitRetry,
                            force: true,
                        },
                    ),
                ),
            ],
        );
    }

    #[test]
    fn a_target_that_lacks_a_capability_is_recorded_and_passed_over() {
        for mode in [Mode::Answer, Mode::Stream] {
            let mut p = plan(3, true);
            p.unsupported = vec![Some("tools"), None, Some("tools")];
            let mut r = rules(mode, RefusalPolicy::default());
            r.spend_cap = true;
            let unsupported = |target, kind| {
                Next::Unsupported(Call {
                    target,
                    kind,
                    force: false,
                })
            };
            check(
                &p,
                r,
                &[
                    (0, Input::Start, unsupported(0, Primary)),
                    (0, failed(FailureKind::Unsupported), Next::CheckBudget),
                    (0, Input::Budget(true), call(1, Fallback)),
                    (
                        0,
                        failed(FailureKind::InvalidOutput),
                        unsupported(2, Fallback),
                    ),
                    (
                        0,
                        failed(FailureKind::Unsupported),
                        Next::Stop(Verdict::Failed(FailureCode::InvalidOutput)),
                    ),
                ],
            );
        }
    }

    #[test]
    fn unsupported_targets_and_breaker_skips_are_no_provider_not_a_failure() {
        let mut p = plan(2, true);
        p.unsupported = vec![Some("tools"), None];
        let unsupported = Next::Unsupported(Call {
            target: 0,
            kind: Primary,
            force: false,
        });
        check(
            &p,
            rules(Mode::Answer, RefusalPolicy::default()),
            &[
                (0, Input::Start, unsupported),
                (0, failed(FailureKind::Unsupported), call(1, Fallback)),
                (0, Input::Skipped, Next::Stop(Verdict::AllSkipped)),
            ],
        );
    }

    #[test]
    fn after_the_commit_a_refusal_stays_a_refusal() {
        assert_eq!(
            after_commit(&FailureKind::ContentFilter),
            FailureCode::ContentFilter
        );
        for kind in OUTAGES.into_iter().chain(REJECTIONS) {
            assert_eq!(after_commit(&kind), FailureCode::StreamInterrupted);
        }
    }
}
