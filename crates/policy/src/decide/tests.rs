//! The table as data: each case is a plan, the rules, and a script of
//! (what happened, what the machine must answer). Time is a number of
//! seconds after a fixed start; nothing sleeps.
//!
//! The refusal cases are in `tests/refusals.rs`, a pinned session's wait
//! or switch in `tests/sessions.rs`.

use understudy_types::target::Target;

use super::*;
use AttemptKind::{Fallback, Primary, RateLimitRetry, Softened};

mod refusals;
mod sessions;

const OUTAGES: [FailureKind; 5] = [
    FailureKind::Unavailable { retry_after: None },
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
        balanced: false,
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

/// An overload (a 503 or 529) that says when to come back.
fn overloaded(secs: u64) -> Input {
    Input::Failed(FailureKind::Unavailable {
        retry_after: Some(Duration::from_secs(secs)),
    })
}

fn rate_limited(secs: u64) -> Input {
    Input::Failed(FailureKind::RateLimited {
        retry_after: Some(Duration::from_secs(secs)),
    })
}

/// Runs `script` (at second `t` of a 120 s request: input, expected)
/// and returns the machine for further checks.
fn check(plan: &Plan, rules: Rules, script: &[(u64, Input, Next)]) -> Decider {
    let t0 = crate::test_now();
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
                failed(FailureKind::Unavailable { retry_after: None }),
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
                (
                    0,
                    failed(FailureKind::Unavailable { retry_after: None }),
                    Next::CheckBudget,
                ),
                (0, Input::Budget(true), call(1, Fallback)),
                (
                    0,
                    failed(FailureKind::Unavailable { retry_after: None }),
                    Next::CheckBudget,
                ),
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
                    failed(FailureKind::Unavailable { retry_after: None }),
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

#[test]
fn a_key_failure_tries_the_same_target_on_another_key_first() {
    for mode in [Mode::Answer, Mode::Stream] {
        let limited = FailureKind::RateLimited {
            retry_after: Some(Duration::from_secs(30)),
        };
        for kind in [limited, FailureKind::Auth, FailureKind::QuotaExceeded] {
            check(
                &plan(2, true),
                rules(mode, RefusalPolicy::default()),
                &[
                    (0, Input::Start, call(0, Primary)),
                    // Another key of target 0: no wait, no fallback.
                    (0, Input::KeyFailed(kind.clone()), call(0, Primary)),
                    // The last key fails the same way: the table as usual.
                    (1, failed(FailureKind::Auth), call(1, Fallback)),
                    (1, Input::Served, Next::Served { target: 1 }),
                ],
            );
        }
    }
}

#[test]
fn keys_that_were_all_rate_limited_are_a_rate_limit() {
    let limited = || FailureKind::RateLimited {
        retry_after: Some(Duration::from_secs(60)),
    };
    check(
        &plan(1, true),
        rules(Mode::Answer, RefusalPolicy::default()),
        &[
            (0, Input::Start, call(0, Primary)),
            (0, Input::KeyFailed(limited()), call(0, Primary)),
            // Past the wait cap: no retry, and nothing else to try.
            (
                0,
                failed(limited()),
                Next::Stop(Verdict::Failed(FailureCode::RateLimited)),
            ),
        ],
    );
}

#[test]
fn a_key_failure_at_the_deadline_ends_the_walk() {
    check(
        &plan(2, true),
        rules(Mode::Answer, RefusalPolicy::default()),
        &[
            (0, Input::Start, call(0, Primary)),
            (
                120,
                Input::KeyFailed(FailureKind::Auth),
                Next::Stop(Verdict::Deadline),
            ),
        ],
    );
}

#[test]
fn a_hedge_moves_the_walk_to_its_backup() {
    let t0 = crate::test_now();
    let stream = rules(Mode::Stream, RefusalPolicy::default());
    // The backup showed output first: it serves, as a fallback.
    let mut d = check(
        &plan(3, true),
        stream,
        &[(0, Input::Start, call(0, Primary))],
    );
    d.moved_to(1, None);
    assert_eq!(d.next(Input::Served, t0, 0.5), Next::Served { target: 1 });
    assert!(d.is_fallback(1));
    // Both failed: the walk goes on after the backup, never back to it,
    // and the primary's failure counts in the request's code.
    let mut d = check(
        &plan(3, true),
        stream,
        &[(0, Input::Start, call(0, Primary))],
    );
    d.moved_to(1, Some(&FailureKind::Timeout));
    assert_eq!(
        d.next(
            failed(FailureKind::Unavailable { retry_after: None }),
            t0,
            0.5
        ),
        call(2, Fallback)
    );
    let mut d = check(
        &plan(2, true),
        stream,
        &[(0, Input::Start, call(0, Primary))],
    );
    d.moved_to(1, Some(&FailureKind::Timeout));
    assert_eq!(
        d.next(
            failed(FailureKind::Unavailable { retry_after: None }),
            t0,
            0.5
        ),
        Next::Stop(Verdict::Failed(FailureCode::Unavailable))
    );
}

#[test]
fn a_too_long_answer_passes_over_windows_no_larger() {
    let k = |n: u32| Some(n * 1000);
    // (windows, where each "too long" answer leads, in turn)
    let cases: [(&[Option<u32>], &[Next]); 4] = [
        (
            &[k(128), k(128), k(200)],
            &[
                call(2, Fallback),
                Next::Stop(Verdict::Failed(FailureCode::ContextLength)),
            ],
        ),
        (
            &[k(128), None, k(100)],
            &[call(1, Fallback), call(2, Fallback)],
        ),
        (
            &[k(200), k(128), k(200)],
            &[Next::Stop(Verdict::Failed(FailureCode::ContextLength))],
        ),
        // No windows known: the next target, as any failure.
        (&[], &[call(1, Fallback), call(2, Fallback)]),
    ];
    for (windows, steps) in cases {
        let t0 = crate::test_now();
        let mut d = Decider::new(
            &plan(3, true),
            rules(Mode::Answer, RefusalPolicy::default()),
            t0 + Duration::from_secs(120),
        );
        assert_eq!(d.next(Input::Start, t0, 0.5), call(0, Primary));
        for want in steps {
            assert_eq!(&d.too_long(windows, t0), want, "{windows:?}");
        }
    }
}

/// A plan past 128 targets (the flags then kept in a list) walks as a
/// short one: outages fall back in order, a target that lacks a
/// capability is passed over wherever it stands, and the walk ends with
/// the plan.
#[test]
fn a_plan_of_many_targets_walks_like_a_short_one() {
    for n in [3, 128, 129, 200] {
        let mut p = plan(n, true);
        p.unsupported = vec![None; n];
        p.unsupported[n - 2] = Some("tools");
        let mut script = vec![(0, Input::Start, call(0, Primary))];
        for i in 1..n - 2 {
            script.push((
                0,
                failed(FailureKind::Unavailable { retry_after: None }),
                call(i, Fallback),
            ));
        }
        let unsupported = Next::Unsupported(Call {
            target: n - 2,
            kind: Fallback,
            force: false,
        });
        script.push((
            0,
            failed(FailureKind::Unavailable { retry_after: None }),
            unsupported,
        ));
        script.push((0, failed(FailureKind::Unsupported), call(n - 1, Fallback)));
        script.push((
            0,
            failed(FailureKind::Unavailable { retry_after: None }),
            Next::Stop(Verdict::Failed(FailureCode::Unavailable)),
        ));
        let d = check(&p, rules(Mode::Answer, RefusalPolicy::default()), &script);
        assert!(!d.is_fallback(0) && d.is_fallback(n - 1) && !d.is_fallback(n));
    }
}
