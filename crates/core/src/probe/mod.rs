//! The readiness prober: every target a route names checked, every
//! `[probe] interval`, with calls that generate nothing (a provider's
//! model lookup, a free token count: each adapter's
//! [`crate::Adapter::probe`]). A target the provider proves unable to
//! serve — its key refused (401, 403), its model unknown (404) — is "not
//! ready": plans leave it out as if its breaker were open, logged at WARN
//! once per change, until a probe passes. An answer that proves nothing
//! (a connection refused, a timeout, a 5xx, a rate limit) changes nothing:
//! outages are the breakers' business, and a flaky network must not bench
//! a target that may well serve.
//!
//! One instance of a fleet probes (a Redis lease, renewed, whose value is
//! a fencing token); it publishes what it found in a Redis hash that
//! expires after a few intervals, and the others read it. Without Redis
//! (or while it is unreachable) each instance probes for itself.
//!
//! # Layout
//! - `board.rs`: [`ReadyBoard`], each target's state, read by each plan.
//! - `prober.rs`: the task: a round per interval, a probe per target.
//! - `fleet.rs`: the lease and the published results in Redis.

mod board;
mod fleet;
mod prober;

pub(crate) use board::ReadyBoard;
pub use board::{TargetReadiness, Verdict};
pub(crate) use prober::{Prober, probe_all, probed_targets};

use understudy_policy::plan::Unavailable;
use understudy_types::target::Target;
use understudy_types::{Failure, FailureKind};

/// Why a plan leaves `target` out for its readiness, if it does: as cheap
/// as the breaker's check (see [`ReadyBoard::is_down`]).
#[inline]
pub(crate) fn skip(board: &ReadyBoard, target: &Target) -> Option<Unavailable> {
    board.is_down(target).then_some(Unavailable::NotReady)
}

/// What a probe's failure proves: a refused key (401, 403, or a failure
/// classified as auth: Gemini's invalid key is a 400), a model the
/// provider does not serve (404), else nothing.
pub fn verdict_of(failure: &Failure) -> Verdict {
    match (&failure.kind, failure.status) {
        (_, Some(401 | 403)) | (FailureKind::Auth, _) => Verdict::Auth,
        (_, Some(404)) => Verdict::ModelMissing,
        _ => Verdict::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refused_key_or_a_missing_model_proves_a_target_not_ready() {
        let f = |kind, status: Option<u16>| {
            let f = Failure::new(kind, "x");
            match status {
                Some(s) => f.with_status(s),
                None => f,
            }
        };
        let cases = [
            (f(FailureKind::Auth, Some(401)), Verdict::Auth),
            (f(FailureKind::Auth, Some(403)), Verdict::Auth),
            (f(FailureKind::Auth, Some(400)), Verdict::Auth),
            (f(FailureKind::BadRequest, Some(404)), Verdict::ModelMissing),
            (
                f(FailureKind::Unavailable { retry_after: None }, Some(503)),
                Verdict::Unreachable,
            ),
            (
                f(FailureKind::RateLimited { retry_after: None }, Some(429)),
                Verdict::Unreachable,
            ),
            (f(FailureKind::Connection, None), Verdict::Unreachable),
            (f(FailureKind::Timeout, None), Verdict::Unreachable),
            (f(FailureKind::BadRequest, Some(400)), Verdict::Unreachable),
        ];
        for (failure, verdict) in cases {
            assert_eq!(verdict_of(&failure), verdict, "{failure:?}");
        }
    }
}
