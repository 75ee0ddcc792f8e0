//! Prompts only where they fit: the targets of a plan whose context window
//! cannot hold the request left out at planning (the rule is
//! `understudy_policy::fit`), and, after a target's own "too long" answer,
//! the walk moved on to a larger window.
//!
//! What it costs a request: the limits of every target the routing names
//! are resolved once per view (when the router starts and whenever the
//! routing changes), with the least room any target may leave a request
//! (its window, less the output a Claude model is sent when a request
//! asks none). A request read from a JSON body that holds all of it (Chat
//! Completions) and no image pays one comparison: its body's length at
//! three bytes a token bounds the estimate from above
//! (`understudy_types::chat::estimate_bound`); at or below that room
//! (128 000 tokens unless an operator sets a smaller window) every target
//! holds it and nothing else is done. A natively forwarded body's estimate
//! is its length already. Any other request, and one whose body is longer
//! than the room allows, pays one pass over its parts summing their
//! lengths (the estimate: no allocation, no text read, no lookup) and the
//! same comparison. Only a request that large looks its targets up.

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
/// use can. `images`: the request holds one (the capability check's walk
/// found it), so its body's length does not bound it.
pub(crate) fn check(
    view: &View,
    request: &GenerateRequest,
    plan: &mut Plan,
    images: bool,
) -> Result<(), Error> {
    let max_tokens = request.chat.max_tokens;
    if bounded(
        request.chat.body_len,
        images,
        max_tokens,
        view.limits.room(),
    ) {
        return Ok(());
    }
    let need = Need {
        input: understudy_types::chat::estimate_tokens(&request.chat),
        max_tokens,
    };
    if need.at_most() <= view.limits.room() {
        return Ok(());
    }
    fit::check(plan, need, request.no_fallback, |t| {
        view.limits.of(&view.settings, t)
    })
}

/// Whether a body of `body_len` bytes without `images` holds a request
/// every target has `room` for, by its length alone
/// ([`understudy_types::chat::estimate_bound`]): no walk of its parts.
fn bounded(body_len: Option<u32>, images: bool, max_tokens: Option<u32>, room: u64) -> bool {
    let Some(len) = body_len.filter(|_| !images) else {
        return false;
    };
    let need = Need {
        input: understudy_types::chat::estimate_bound(len),
        max_tokens,
    };
    need.at_most() <= room
}

// === impl Run ===

impl Run {
    /// The machine's next step after the current target answered "too
    /// long": on to a larger window, the targets passed over for being no
    /// larger noted as skipped for their `context_window`. Their windows
    /// are looked up here, the one time a request needs them all.
    pub(super) fn after_too_long(&mut self, decider: &mut Decider, now: Instant) -> Next {
        let mut windows: Vec<Option<u32>> = self
            .plan
            .targets
            .iter()
            .map(|t| {
                let p = self.settings.providers.get(&*t.provider)?;
                windows::limits_of(p, &t.model).map(|l| l.context_window)
            })
            .collect();
        let from = decider.at();
        self.hedge_windows(from, &mut windows);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

    use understudy_types::ChatRequest;
    use understudy_types::chat::{Part, Role, Tool, estimate_bound, estimate_tokens};

    use super::bounded;

    /// The body's length bounds the estimate from above, as JSON writes
    /// the request; an image it cannot bound.
    #[test]
    fn the_bodys_length_bounds_the_estimate_but_for_images() {
        let mut chat = ChatRequest::user("a \"quoted\"\nline, é and 🎉 ".repeat(500));
        chat.system = Some("be brief".into());
        chat.tools = vec![Tool {
            name: "lookup".into(),
            description: Some("finds things".into()),
            parameters: Some(serde_json::json!({"type": "object",
                "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                               "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["n"]})),
            strict: None,
        }];
        let body = serde_json::json!({
            "system": chat.system, "messages": [{"role": "user",
                "content": match &chat.messages[0].content[0] {
                    Part::Text { text } => text.clone(),
                    Part::Image { .. } => unreachable!(),
                }}],
            "tools": [{"name": "lookup", "description": "finds things",
                       "parameters": chat.tools[0].parameters}],
        })
        .to_string();
        let len = u32::try_from(body.len()).unwrap();
        assert!(estimate_tokens(&chat) <= estimate_bound(len));
        // (body length, images, max_tokens, room, bounded)
        let cases = [
            (Some(3_000), false, None, 1_001, true),
            (Some(3_000), false, Some(2_000), 1_001, false),
            (Some(600_000), false, None, 128_000, false),
            (Some(3_000), true, None, 128_000, false),
            (None, false, None, 128_000, false),
        ];
        for (len, images, max_tokens, room, want) in cases {
            assert_eq!(bounded(len, images, max_tokens, room), want, "{len:?}");
        }
        // An image in a short body: the estimate counts it anyway.
        let mut with_image = ChatRequest::user("hi");
        with_image.messages[0].content.push(Part::Image {
            url: "https://example.com/a.png".into(),
            detail: None,
        });
        assert_eq!(with_image.messages[0].role, Role::User);
        assert!(estimate_tokens(&with_image) > estimate_bound(60));
    }
}
