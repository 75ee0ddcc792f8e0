//! Whether a prompt fits a target's context window, and where a prompt
//! too long for one target goes next.
//!
//! **The fit.** A request needs its estimated input tokens plus, where the
//! provider counts the output against the window (Anthropic's and OpenAI's
//! APIs, Bedrock's), the `max_tokens` it asks for (clamped to the model's
//! output limit, as the request will be; none asked, what the provider
//! reserves anyway: the Messages API is sent the model's output limit,
//! OpenAI's reserves none); Gemini's API limits the input alone. The estimate is four characters a
//! token, which can run high (code and repeated text pack more characters
//! into a token), so a target is passed over only when clearly too small:
//! when even the input less a tenth ([`MARGIN_DIVISOR`]), plus the
//! reserved output, is over its window. A target whose window is unknown
//! is assumed to hold anything; the provider's own "too long" answer is
//! the last word.
//!
//! **After a "too long" answer.** The walk moves to the next target whose
//! window is larger than the refusing one's, passing over those no larger
//! (their answer would be the same); a later target whose window is
//! unknown may be larger and is tried. A refusing target whose window is
//! unknown tells nothing about the others: the next target is tried.
//!
//! **Once, not per request.** [`Known`] holds the limits of every target
//! the routing names, resolved when the routing is set, and the least room
//! any target may leave a request: one comparison with it tells that a
//! request fits everywhere, without looking a target up.

use std::collections::{BTreeMap, HashMap};

use understudy_settings::Settings;
use understudy_settings::windows::{self, ModelLimits};
use understudy_types::error::Error;
use understudy_types::target::Target;

use crate::plan::{Plan, Unavailable};

/// The estimate is trusted to a tenth: a target is passed over when the
/// input less `input / MARGIN_DIVISOR` (plus the reserved output) is over
/// its window.
pub const MARGIN_DIVISOR: u64 = 10;

/// What a request needs of a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// The estimated input tokens.
    pub input: u64,
    /// The request's `max_tokens`, if it sets one.
    pub max_tokens: Option<u32>,
}

/// The limits of every target the routing names, resolved once.
#[derive(Debug, Default)]
pub struct Known {
    /// Per target as plans hold it (a cloud's model id in place of the
    /// name it maps): its limits, `None` when its window is unknown.
    targets: HashMap<Target, Option<ModelLimits>>,
    /// The least room ([`ModelLimits::room`]) any target may leave: the
    /// routing's, any a provider's settings give, and the built-in
    /// table's (a pin may name any model).
    smallest: u64,
}

// === impl Known ===

impl Known {
    /// The limits of the targets of `default_route` and `routes`, on the
    /// providers of `settings`.
    pub fn new(
        settings: &Settings,
        default_route: &[Target],
        routes: &BTreeMap<String, Vec<Target>>,
    ) -> Self {
        let named = default_route
            .iter()
            .chain(routes.values().flatten())
            .cloned()
            .collect();
        let targets: HashMap<Target, Option<ModelLimits>> = crate::plan::cloud_ids(named, settings)
            .into_iter()
            .map(|t| {
                let limits = resolve(settings, &t);
                (t, limits)
            })
            .collect();
        // A provider's own window covers each of its models: counted at its
        // default model's room (another of its models sent a larger output
        // unasked is left to the provider's own answer).
        let configured = settings.providers.values().flat_map(|p| {
            let provider = p
                .capabilities
                .context_window
                .and_then(|_| windows::limits_of(p, &p.model))
                .map(|l| l.room());
            let models = p
                .model_capabilities
                .iter()
                .filter(|(_, c)| c.context_window.is_some())
                .filter_map(|(m, _)| windows::limits_of(p, m).map(|l| l.room()));
            provider.into_iter().chain(models)
        });
        let smallest = targets
            .values()
            .flatten()
            .map(ModelLimits::room)
            .chain(configured)
            .chain([windows::smallest_builtin_room()])
            .min()
            .unwrap_or(u32::MAX);
        Self {
            targets,
            smallest: u64::from(smallest),
        }
    }

    /// The least room any target may leave: a request whose
    /// [`Need::at_most`] is no more fits every target.
    pub fn room(&self) -> u64 {
        self.smallest
    }

    /// `t`'s limits: resolved already when the routing names it, else
    /// (a pin, a pattern route's model) looked up now.
    pub fn of(&self, settings: &Settings, t: &Target) -> Option<ModelLimits> {
        match self.targets.get(t) {
            Some(known) => *known,
            None => resolve(settings, t),
        }
    }
}

/// `t`'s limits from the settings and the built-in table.
fn resolve(settings: &Settings, t: &Target) -> Option<ModelLimits> {
    windows::limits_of(settings.providers.get(&*t.provider)?, &t.model)
}

// === impl Need ===

impl Need {
    /// The input the fit counts: the estimate less its margin.
    fn input_counted(self) -> u64 {
        self.input - self.input / MARGIN_DIVISOR
    }

    /// What the request asks of a target's room
    /// ([`ModelLimits::room`]): the counted input plus the whole
    /// `max_tokens`. At or below the least room any target may have, every
    /// target holds the request and none need be looked at.
    pub fn at_most(self) -> u64 {
        self.input_counted() + u64::from(self.max_tokens.unwrap_or(0))
    }

    /// The tokens a target with `limits` must hold for this request.
    pub fn on(self, limits: &ModelLimits) -> u64 {
        let output = match (limits.counts_output, self.max_tokens) {
            (true, Some(asked)) => limits.max_output.map_or(asked, |most| asked.min(most)),
            (true, None) => limits.unasked_output,
            (false, _) => 0,
        };
        self.input_counted() + u64::from(output)
    }
}

/// Whether a target with `limits` (`None`: unknown) holds `need`.
pub fn fits(limits: Option<&ModelLimits>, need: Need) -> bool {
    limits.is_none_or(|l| need.on(l) <= u64::from(l.context_window))
}

/// Leaves out of `plan` the targets whose window cannot hold `need`
/// (`limits_of` answers for one target), each as skipped for its
/// [`Unavailable::ContextWindow`]. When that leaves no target the request
/// may use (only the primary with `no_fallback`), the request is refused
/// at once, naming the largest window it was measured against — unless a
/// target that would hold it is only out for now (breaker open, provider
/// stopped, not ready by its probe): then no provider is available, which
/// is not the client's fault. Nothing is allocated when every target holds it.
pub fn check(
    plan: &mut Plan,
    need: Need,
    no_fallback: bool,
    limits_of: impl Fn(&Target) -> Option<ModelLimits>,
) -> Result<(), Error> {
    let usable = |plan: &Plan, t: &Target| !no_fallback || *t == plan.primary;
    // (tokens needed, window) of the largest window left out.
    let mut largest: Option<(u64, u32)> = None;
    let mut at = 0;
    while at < plan.targets.len() {
        let limits = limits_of(&plan.targets[at]);
        match limits.filter(|l| !fits(Some(l), need)) {
            None => at += 1,
            Some(l) => {
                let t = plan.targets.remove(at);
                if at < plan.unsupported.len() {
                    plan.unsupported.remove(at);
                }
                if usable(plan, &t) && largest.is_none_or(|(_, w)| l.context_window > w) {
                    largest = Some((need.on(&l), l.context_window));
                }
                plan.skipped.push((t, Unavailable::ContextWindow));
            }
        }
    }
    let Some((tokens, limit)) = largest else {
        return Ok(());
    };
    if plan.targets.iter().any(|t| usable(plan, t)) {
        return Ok(());
    }
    let waiting: Vec<String> = plan
        .skipped
        .iter()
        .filter(|(t, why)| {
            matches!(
                why,
                Unavailable::BreakerOpen | Unavailable::Stopped | Unavailable::NotReady
            ) && usable(plan, t)
                && fits(limits_of(t).as_ref(), need)
        })
        .map(|(t, why)| format!("{t} ({})", why.as_str()))
        .collect();
    if !waiting.is_empty() {
        return Err(Error::NoProviderAvailable(format!(
            "the targets whose context window holds this request are unavailable for now: {}",
            waiting.join(", ")
        )));
    }
    Err(Error::ContextTooLong { tokens, limit })
}

/// Where the walk goes after plan target `at` answered "too long":
/// the first later target whose window (`windows`, per plan target;
/// `None` unknown) is larger than `at`'s, or may be; `windows.len()` (past
/// the end) when none is. `at + 1` when `at`'s window is unknown.
pub fn larger_after(windows: &[Option<u32>], at: usize) -> usize {
    let Some(Some(refused)) = windows.get(at) else {
        return at + 1;
    };
    (at + 1..windows.len())
        .find(|&i| windows[i].is_none_or(|w| w > *refused))
        .unwrap_or(windows.len().max(at + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(window: u32, max_output: Option<u32>, counts_output: bool) -> ModelLimits {
        ModelLimits {
            context_window: window,
            max_output,
            counts_output,
            unasked_output: 0,
        }
    }

    #[test]
    fn a_target_is_passed_over_only_when_clearly_too_small() {
        let anthropic = limits(200_000, Some(64_000), true);
        let gemini = limits(200_000, Some(64_000), false);
        // (input, max_tokens, limits, fits)
        let cases = [
            // The estimate is trusted to a tenth: 220 000 counts 198 000.
            (220_000, None, anthropic, true),
            (223_000, None, anthropic, false),
            // The output is reserved where the provider counts it...
            (150_000, Some(70_000), limits(200_000, None, true), false),
            (150_000, Some(60_000), anthropic, true),
            // ...clamped to what the model may write (64 000 here).
            (
                160_000,
                Some(128_000),
                limits(200_000, Some(64_000), true),
                false,
            ),
            (
                140_000,
                Some(128_000),
                limits(200_000, Some(64_000), true),
                true,
            ),
            (140_000, Some(128_000), limits(200_000, None, true), false),
            // Gemini counts the input alone.
            (150_000, Some(100_000), gemini, true),
            (230_000, None, gemini, false),
            // None asked: what the provider is sent anyway (a Claude
            // model's output limit).
            (
                150_000,
                None,
                ModelLimits {
                    unasked_output: 64_000,
                    ..anthropic
                },
                true,
            ),
            (
                160_000,
                None,
                ModelLimits {
                    unasked_output: 64_000,
                    ..anthropic
                },
                false,
            ),
        ];
        for (input, max_tokens, l, want) in cases {
            let need = Need { input, max_tokens };
            assert_eq!(
                fits(Some(&l), need),
                want,
                "{input} + {max_tokens:?} on {l:?}"
            );
            // What the quick check bounds: within the room, it fits.
            if need.at_most() <= u64::from(l.room()) {
                assert!(fits(Some(&l), need));
            }
        }
        // Unknown holds anything.
        let huge = Need {
            input: u64::MAX / 2,
            max_tokens: Some(u32::MAX),
        };
        assert!(fits(None, huge));
    }

    #[test]
    fn a_too_long_answer_moves_to_a_larger_window() {
        let k = |n: u32| Some(n * 1000);
        // (windows, the refusing target, where the walk goes)
        let cases: [(&[Option<u32>], usize, usize); 7] = [
            (&[k(128), k(128), k(200)], 0, 2),
            (&[k(128), k(100), k(200)], 0, 2),
            // An unknown window may be larger: tried.
            (&[k(128), None, k(200)], 0, 1),
            // None larger: past the end.
            (&[k(200), k(128), k(200)], 0, 3),
            (&[k(128), k(200)], 1, 2),
            // The refusing target's window unknown: the next one.
            (&[None, k(8), k(200)], 0, 1),
            // Without windows at all (none resolved): the next one.
            (&[], 0, 1),
        ];
        for (windows, at, want) in cases {
            assert_eq!(larger_after(windows, at), want, "{windows:?} at {at}");
        }
    }

    fn plan_of(names: &[&str]) -> Plan {
        let route = names
            .iter()
            .map(|n| Target::new(n, "m"))
            .collect::<Vec<_>>();
        crate::plan::plan(route, |_| None).unwrap()
    }

    #[test]
    fn the_plan_keeps_what_fits_or_the_request_is_refused() {
        let windows = |t: &Target| match &*t.provider {
            "small" => Some(limits(128_000, None, true)),
            "big" => Some(limits(200_000, None, true)),
            "huge" => Some(limits(1_000_000, None, true)),
            _ => None,
        };
        let need = Need {
            input: 166_000,
            max_tokens: None,
        };
        // (route, no_fallback, open breakers, targets left, outcome)
        type Case<'a> = (&'a [&'a str], bool, &'a [&'a str], &'a [&'a str], &'a str);
        let cases: [Case; 7] = [
            (&["small", "big"], false, &[], &["big"], "ok"),
            (&["small", "unknown"], false, &[], &["unknown"], "ok"),
            (&["small", "big"], true, &[], &["big"], "too long 128000"),
            (&["small", "small2"], false, &[], &["small2"], "ok"),
            (
                &["big", "small", "huge"],
                false,
                &[],
                &["big", "huge"],
                "ok",
            ),
            // The one that would hold it is out for now.
            (&["small", "huge"], false, &["huge"], &[], "unavailable"),
            (&["small", "huge"], false, &[], &["huge"], "ok"),
        ];
        for (route, no_fallback, open, left, want) in cases {
            let mut plan = plan_of(route);
            plan.targets.retain(|t| !open.contains(&&*t.provider));
            for name in open {
                plan.skipped
                    .push((Target::new(name, "m"), Unavailable::BreakerOpen));
            }
            let got = match check(&mut plan, need, no_fallback, windows) {
                Ok(()) => "ok".to_owned(),
                Err(Error::ContextTooLong { limit, .. }) => format!("too long {limit}"),
                Err(Error::NoProviderAvailable(_)) => "unavailable".to_owned(),
                Err(e) => panic!("{e:?}"),
            };
            assert_eq!(got, want, "{route:?}");
            let names: Vec<&str> = plan.targets.iter().map(|t| &*t.provider).collect();
            assert_eq!(names, left, "{route:?}");
            assert!(
                plan.skipped
                    .iter()
                    .any(|(_, why)| *why == Unavailable::ContextWindow),
                "{route:?}"
            );
        }
        // Every target too small: the largest window is named.
        let mut plan = plan_of(&["small", "big"]);
        let need = Need {
            input: 300_000,
            max_tokens: Some(1000),
        };
        match check(&mut plan, need, false, windows) {
            Err(Error::ContextTooLong { tokens, limit }) => {
                assert_eq!((tokens, limit), (271_000, 200_000));
            }
            other => panic!("{other:?}"),
        }
    }

    /// A prompt that only a target out for now could hold is not the
    /// client's fault, whatever keeps that target out.
    #[test]
    fn a_prompt_only_a_target_out_for_now_holds_is_no_provider_available() {
        let windows = |t: &Target| match &*t.provider {
            "small" => Some(limits(128_000, None, true)),
            _ => Some(limits(1_000_000, None, true)),
        };
        let need = Need {
            input: 166_000,
            max_tokens: None,
        };
        for why in [
            Unavailable::BreakerOpen,
            Unavailable::Stopped,
            Unavailable::NotReady,
        ] {
            let mut plan = plan_of(&["small"]);
            plan.skipped.push((Target::new("huge", "m"), why));
            match check(&mut plan, need, false, windows) {
                Err(Error::NoProviderAvailable(m)) => {
                    assert!(m.contains(why.as_str()), "{m}");
                }
                other => panic!("{why:?}: {other:?}"),
            }
        }
    }
}
