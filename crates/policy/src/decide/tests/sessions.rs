//! A pinned session's wait or switch: what a wait on its target costs
//! against leaving its cache, and how an overload or a rate limit without
//! a pin is met.

use super::*;

type Chosen = Option<(crate::affinity::Choice, f64)>;

/// Runs each case (the switch cost, no_fallback, script, the choice
/// recorded) on a pinned session's 3-target plan, the machine told of the
/// switch cost at its start and, again, only as it is about to hear the
/// first target's first failure (as a run tells it): both decide alike.
fn weigh_cases(cases: Vec<(f64, bool, Script, Chosen)>) {
    use crate::affinity::Weigh;
    let weigh = |switch_cost_usd| Weigh {
        switch_cost_usd,
        wait_cost_per_second: 0.01,
    };
    for told_late in [false, true] {
        for (cost, no_fallback, script, choice) in cases.clone() {
            let plan = plan(3, true);
            let rules = Rules {
                no_fallback,
                ..rules(Mode::Answer, RefusalPolicy::default())
            };
            let t0 = crate::test_now();
            let mut d = Decider::new(&plan, rules, t0 + Duration::from_secs(120));
            let mut told = !told_late;
            if told {
                d.weigh_switch(weigh(cost));
            }
            let mut all = vec![(0, Input::Start, call(0, Primary))];
            all.extend(script);
            for (t, input, want) in &all {
                let failure = matches!(input, Input::Failed(_) | Input::KeyFailed(_));
                if failure && d.at() == 0 && !std::mem::replace(&mut told, true) {
                    d.weigh_switch(weigh(cost));
                }
                let got = d.next(input.clone(), t0 + Duration::from_secs(*t), 0.5);
                let when = if told_late { "late" } else { "at the start" };
                assert_eq!(
                    &got, want,
                    "{input:?} at {t} s, switch cost {cost} told {when}"
                );
            }
            assert_eq!(d.wait_or_switch(), choice, "switch cost {cost}");
        }
    }
}

#[test]
fn a_pinned_session_weighs_a_wait_against_leaving_its_cache() {
    use crate::affinity::Choice;
    let outage = || failed(FailureKind::Unavailable { retry_after: None });
    weigh_cases(vec![
        // A large cached prefix: the 2 s wait costs less, so it waits.
        (
            0.5,
            false,
            vec![
                (0, rate_limited(2), wait(2, 0)),
                (2, Input::Served, Next::Served { target: 0 }),
            ],
            Some((Choice::Wait, 0.5)),
        ),
        // A tiny prefix: leaving is cheaper than waiting.
        (
            0.001,
            false,
            vec![
                (0, rate_limited(2), call(1, Fallback)),
                (0, Input::Served, Next::Served { target: 1 }),
            ],
            Some((Choice::Switch, 0.001)),
        ),
        // An outage leaves at once: nothing to weigh.
        (0.5, false, vec![(0, outage(), call(1, Fallback))], None),
    ]);
}

#[test]
fn a_pinned_session_weighs_an_overload_that_says_when() {
    use crate::affinity::Choice;
    weigh_cases(vec![
        // An overload that says when it is back is weighed like a rate
        // limit: a large cached prefix waits it out once…
        (
            0.5,
            false,
            vec![
                (0, overloaded(2), wait(2, 0)),
                (2, Input::Served, Next::Served { target: 0 }),
            ],
            Some((Choice::Wait, 0.5)),
        ),
        // … a tiny one leaves,
        (
            0.001,
            false,
            vec![(0, overloaded(2), call(1, Fallback))],
            Some((Choice::Switch, 0.001)),
        ),
        // a second overload on the retry leaves,
        (
            0.5,
            false,
            vec![
                (0, overloaded(2), wait(2, 0)),
                (2, overloaded(2), call(1, Fallback)),
            ],
            Some((Choice::Wait, 0.5)),
        ),
        // past `max_wait` there is nothing to weigh,
        (
            0.5,
            false,
            vec![(0, overloaded(60), call(1, Fallback))],
            None,
        ),
        // and with nowhere to go an outage ends the walk as before.
        (
            0.001,
            true,
            vec![(
                0,
                overloaded(2),
                Next::Stop(Verdict::Failed(FailureCode::Unavailable)),
            )],
            None,
        ),
        // Past `max_wait` the wait is not on offer.
        (
            0.5,
            false,
            vec![(0, rate_limited(60), call(1, Fallback))],
            None,
        ),
        // With nowhere to go, the wait is the only way.
        (0.001, true, vec![(0, rate_limited(2), wait(2, 0))], None),
        // The retry's own rate limit moves on, as without a pin.
        (
            0.5,
            false,
            vec![
                (0, rate_limited(2), wait(2, 0)),
                (2, rate_limited(2), call(1, Fallback)),
            ],
            Some((Choice::Wait, 0.5)),
        ),
    ]);
}

#[test]
fn without_a_pin_an_overload_leaves_at_once_whatever_its_hint() {
    let d = check(
        &plan(3, true),
        rules(Mode::Answer, RefusalPolicy::default()),
        &[
            (0, Input::Start, call(0, Primary)),
            (0, overloaded(2), call(1, Fallback)),
        ],
    );
    assert_eq!(d.wait_or_switch(), None);
}

#[test]
fn without_a_pin_a_rate_limit_waits_as_before() {
    let d = check(
        &plan(3, true),
        rules(Mode::Answer, RefusalPolicy::default()),
        &[
            (0, Input::Start, call(0, Primary)),
            (0, rate_limited(2), wait(2, 0)),
        ],
    );
    assert_eq!(d.wait_or_switch(), None);
}
