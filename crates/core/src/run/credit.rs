//! Anthropic's fallback credit across one run's attempts. A refusal may
//! carry a credit (`stop_details.fallback_credit_token`); sent back with
//! the next attempt on the same account, it bills that attempt's cache
//! writes at the cache-read rate. The credit is the account's and the
//! refused body's, so it goes only with an attempt that:
//! - goes to the same provider entry on the same key (the same workspace
//!   and platform: never another provider, another key of a pool, or a
//!   cloud, whose credits are bound to another identity);
//! - sends the same body but the model (not the softened retry, whose
//!   system prompt differs);
//! - goes out within five minutes of the refusal (on the runtime clock).
//!
//! A credit is asked for (the request goes with the credit's beta) only
//! where a later target of the plan is on the same Anthropic provider: a
//! one-target route, or one with a single Anthropic target, never asks.
//! The token itself is held here and sent once; it never reaches a log,
//! an event or a span, only what became of it does.

use std::time::{Duration, Instant};

use understudy_policy::decide::Call;
use understudy_types::attempt::AttemptKind;
use understudy_types::credit::CreditToken;
use understudy_types::failure::Failure;

use crate::adapter::CreditUse;
use crate::run::Run;

/// How long after the refusal a credit can be redeemed.
pub(crate) const WINDOW: Duration = Duration::from_secs(5 * 60);

/// A refusal's credit, held for the next attempt on the same account.
#[derive(Debug)]
pub(crate) struct Held {
    token: CreditToken,
    /// The plan target that refused, and the pool key it went on.
    target: usize,
    key: usize,
    /// When the refusal came.
    at: Instant,
}

impl Held {
    /// Whether an attempt of `kind` on plan target `target` (provider
    /// `provider`) and pool key `key` at `now` may carry this credit,
    /// given the refusing target's provider `issuer`.
    fn fits(
        &self,
        issuer: &str,
        provider: &str,
        kind: AttemptKind,
        key: usize,
        now: Instant,
    ) -> bool {
        kind != AttemptKind::Softened
            && issuer == provider
            && key == self.key
            && now.saturating_duration_since(self.at) <= WINDOW
    }
}

impl Run {
    /// What the call about to go out on pool key `key` carries of the
    /// fallback credit: the credit held, where it fits; else a request for
    /// one, where a later target is on the same Anthropic provider; else
    /// nothing (always on a one-target plan, at the cost of one compare).
    pub(super) fn credit_for(&mut self, call: Call, key: usize) -> Option<Box<CreditUse>> {
        if self.plan.targets.len() < 2 {
            return None;
        }
        if !self.leases[call.target].provider.takes_credit {
            return None;
        }
        let provider = &self.plan.targets[call.target].provider;
        if let Some(held) = self.credit.take() {
            let now = crate::runtime_clock::now();
            let issuer = &self.plan.targets[held.target].provider;
            if held.fits(issuer, provider, call.kind, key, now) {
                return Some(Box::new(CreditUse::Redeem(held.token)));
            }
            if now.saturating_duration_since(held.at) <= WINDOW {
                self.credit = Some(held);
            }
        }
        let later = self.plan.targets[call.target + 1..]
            .iter()
            .any(|t| t.provider == *provider);
        (later && call.kind != AttemptKind::Softened).then(|| Box::new(CreditUse::Ask))
    }

    /// Keeps the credit a refused attempt on plan target `call.target` and
    /// pool key `key` came back with (a softened retry's is for another
    /// body: dropped).
    pub(super) fn keep_credit(&mut self, call: Call, key: usize, failure: &mut Failure) {
        let Some(token) = failure.credit.take() else {
            return;
        };
        if call.kind == AttemptKind::Softened {
            return;
        }
        self.credit = Some(Box::new(Held {
            token: *token,
            target: call.target,
            key,
            at: crate::runtime_clock::now(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(at: Instant) -> Held {
        Held {
            token: CreditToken::new("fct_1").expect("not empty"),
            target: 0,
            key: 0,
            at,
        }
    }

    #[test]
    fn a_credit_fits_only_the_same_account_the_same_body_and_the_window() {
        let at = crate::runtime_clock::now();
        let h = held(at);
        let soon = at + Duration::from_secs(10);
        let fallback = AttemptKind::Fallback;
        // (issuer, provider, kind, key, now, fits)
        let cases = [
            ("ant", "ant", fallback, 0, soon, true),
            ("ant", "ant", AttemptKind::RateLimitRetry, 0, soon, true),
            ("ant", "ant", AttemptKind::Softened, 0, soon, false),
            ("ant", "other", fallback, 0, soon, false),
            ("ant", "ant", fallback, 1, soon, false),
            ("ant", "ant", fallback, 0, at + WINDOW, true),
            (
                "ant",
                "ant",
                fallback,
                0,
                at + WINDOW + Duration::from_millis(1),
                false,
            ),
        ];
        for (issuer, provider, kind, key, now, fits) in cases {
            assert_eq!(
                h.fits(issuer, provider, kind, key, now),
                fits,
                "{issuer} -> {provider} {kind:?} key {key}"
            );
        }
    }

    #[test]
    fn a_held_credit_shows_no_token() {
        let h = held(crate::runtime_clock::now());
        assert!(!format!("{h:?}").contains("fct_1"));
    }
}
