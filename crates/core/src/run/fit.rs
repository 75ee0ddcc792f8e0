//! Prompts only where they fit: the targets of a plan whose context window
//! cannot hold the request left out at planning (the rule is
//! `understudy_policy::fit`), and, after a target's own "too long" answer,
//! the walk moved on to a larger window.
//!
//! What it costs a request: the limits of every target the routing names
//! are resolved once per view (when the router starts and whenever the
//! routing changes), with the least room any target may leave a request
//! (its window, less the output a Claude model is sent when a request
//! asks none). A request then pays one pass over its parts summing their
//! lengths (the estimate: no allocation, no text read, no lookup) and one
//! comparison: at or below that room (128 000 tokens unless an operator
//! sets a smaller window) every target holds it and nothing else is done.
//! Only a request that large looks its targets up.

use std::time::Instant;

use understudy_policy::decide::{Decider, Next};
use understudy_policy::fit::{self, Need};
use understudy_policy::plan::{Plan, Unavailable};
use understudy_settings::windows;
use understudy_types::error::Error;

use crate::actor::router::View;
use crate::generation::GenerateRequest;
use crate::run::Run;

/// Leaves out of `plan` the targets whose window cannot hold `request`;
/// refuses it (`Error::ContextTooLong`, nothing called) when none it may
/// use can.
pub(crate) fn check(view: &View, request: &GenerateRequest, plan: &mut Plan) -> Result<(), Error> {
    let need = Need {
        input: understudy_types::chat::estimate_tokens(&request.chat),
        max_tokens: request.chat.max_tokens,
    };
    if need.at_most() <= view.limits.room() {
        return Ok(());
    }
    fit::check(plan, need, request.no_fallback, |t| {
        view.limits.of(&view.settings, t)
    })
}

// === impl Run ===

impl Run {
    /// The machine's next step after the current target answered "too
    /// long": on to a larger window, the targets passed over for being no
    /// larger noted as skipped for their `context_window`. Their windows
    /// are looked up here, the one time a request needs them all.
    pub(super) fn after_too_long(&mut self, decider: &mut Decider, now: Instant) -> Next {
        let windows: Vec<Option<u32>> = self
            .plan
            .targets
            .iter()
            .map(|t| {
                let p = self.settings.providers.get(&*t.provider)?;
                windows::limits_of(p, &t.model).map(|l| l.context_window)
            })
            .collect();
        let from = decider.at();
        let passes_over = decider.too_long_passes_over();
        let next = decider.too_long(&windows, now);
        if passes_over {
            // Where the machine went: the larger window (`at()` one short
            // of it when the walk then ended); those between were passed
            // over. Otherwise (a softened retry) it went on as after any
            // failure, and the next target is called, not skipped.
            let to = (decider.at() + 1)
                .min(fit::larger_after(&windows, from))
                .min(windows.len());
            for idx in from + 1..to {
                self.note_skip(idx, Unavailable::ContextWindow);
            }
        }
        next
    }
}
