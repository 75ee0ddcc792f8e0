//! Content-filter refusals: each policy in both modes, a refusing
//! fallback handing over, and `content_filtered` whoever serves.

use super::*;

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
                (
                    1,
                    failed(FailureKind::Unavailable { retry_after: None }),
                    call(1, Fallback),
                ),
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
                    (
                        0,
                        failed(FailureKind::Unavailable { retry_after: None }),
                        call(1, Fallback),
                    ),
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
