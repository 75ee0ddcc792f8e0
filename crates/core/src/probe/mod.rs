//! The readiness prober: every target a route names checked, every
//! `[probe] interval`, with calls that generate nothing (a provider's
//! model lookup, a free token count: each adapter's
//! [`crate::Adapter::probe`]). A target the provider proves unable to
//! serve — its key refused, its model unknown ([`verdict_of`]) — is "not
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
//! - `board.rs`: `ReadyBoard`, each target's state, read by each plan.
//! - `prober.rs`: the task: a round per interval, a probe per target.
//! - `fleet.rs`: the lease and the published results in Redis.

mod board;
mod fleet;
mod prober;

pub(crate) use board::ReadyBoard;
pub use board::{TargetReadiness, Verdict};
pub(crate) use prober::{Prober, probe_all, probed_targets};

use crate::adapter::ProbeFailure;
use understudy_policy::plan::Unavailable;
use understudy_types::target::Target;

/// Why a plan leaves `target` out for its readiness, if it does: as cheap
/// as the breaker's check (see [`ReadyBoard::is_down`]).
#[inline]
pub(crate) fn skip(board: &ReadyBoard, target: &Target) -> Option<Unavailable> {
    board.is_down(target).then_some(Unavailable::NotReady)
}

/// The codes that say the key itself is refused, whatever the status:
/// Gemini's invalid key (a 400 `API_KEY_INVALID`), AWS's unknown access
/// key (`UnrecognizedClientException`, `InvalidClientTokenId`) and bad
/// signature (403s).
const AUTH_CODES: [&str; 4] = [
    "API_KEY_INVALID",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
];

/// The codes that say the model (or the deployment) is missing: OpenAI's
/// and Groq's `model_not_found`, Anthropic's `not_found_error`, Bedrock's
/// `ResourceNotFoundException`, Google's `NOT_FOUND`, Azure's
/// `DeploymentNotFound`.
const MISSING_CODES: [&str; 5] = [
    "model_not_found",
    "not_found_error",
    "ResourceNotFoundException",
    "NOT_FOUND",
    "DeploymentNotFound",
];

/// What a probe's failure proves. A refused key: a 401 (but for one that
/// says the key lacks a permission or scope: OpenAI's restricted key
/// without "Models: read" answers a lookup so, and generates all the
/// same), or an answer naming an invalid key or signature
/// (`AUTH_CODES`). A missing model:
/// a 404 whose answer says so (`MISSING_CODES`, or a message that the
/// model does not exist). Anything else proves nothing: a bare 404 (a
/// server with no model lookup route), a 403 (a key allowed to generate
/// but not to read models, a role without the control plane's read), a
/// 5xx, a rate limit, a timeout.
pub fn verdict_of(answer: &ProbeFailure) -> Verdict {
    let failure = &answer.failure;
    let says = |codes: &[&str]| answer.said.iter().any(|c| codes.contains(&c.as_str()));
    let lower = failure.detail.to_ascii_lowercase();
    let lacks_scope =
        lower.contains("insufficient permissions") || lower.contains("missing scopes");
    if (failure.status == Some(401) && !lacks_scope) || says(&AUTH_CODES) {
        return Verdict::Auth;
    }
    let says_missing =
        says(&MISSING_CODES) || (lower.contains("model") && lower.contains("does not exist"));
    if failure.status == Some(404) && says_missing {
        return Verdict::ModelMissing;
    }
    Verdict::Unreachable
}

#[cfg(test)]
mod tests {
    use super::*;

    use understudy_types::{Failure, FailureKind};

    #[test]
    fn only_a_refused_key_or_a_missing_model_proves_a_target_not_ready() {
        let f = |kind, status: u16, detail: &str, said: &[&str]| ProbeFailure {
            failure: Failure::new(kind, detail).with_status(status),
            said: said.iter().map(|s| (*s).to_owned()).collect(),
        };
        use FailureKind::{Auth, BadRequest};
        let cases = [
            // A refused key.
            (
                f(Auth, 401, "invalid_api_key", &["invalid_api_key"]),
                Verdict::Auth,
            ),
            (
                f(Auth, 401, "UNAUTHENTICATED", &["UNAUTHENTICATED"]),
                Verdict::Auth,
            ),
            (
                f(Auth, 400, "", &["INVALID_ARGUMENT", "API_KEY_INVALID"]),
                Verdict::Auth,
            ),
            (
                f(Auth, 403, "", &["UnrecognizedClientException"]),
                Verdict::Auth,
            ),
            (
                f(Auth, 403, "", &["InvalidSignatureException"]),
                Verdict::Auth,
            ),
            // A restricted key without "Models: read": a 401 that names
            // the scope it lacks; the key generates all the same.
            (
                f(
                    Auth,
                    401,
                    "You have insufficient permissions for this operation. \
                     Missing scopes: api.model.read.",
                    &[],
                ),
                Verdict::Unreachable,
            ),
            // A 403 from a lookup proves nothing: a role allowed to invoke
            // but not to read models, a key without "Models: read".
            (
                f(Auth, 403, "", &["AccessDeniedException"]),
                Verdict::Unreachable,
            ),
            (
                f(Auth, 403, "", &["permission_error"]),
                Verdict::Unreachable,
            ),
            (
                f(Auth, 403, "", &["PERMISSION_DENIED"]),
                Verdict::Unreachable,
            ),
            (f(Auth, 403, "", &[]), Verdict::Unreachable),
            // A missing model, as each API says it.
            (
                f(BadRequest, 404, "", &["model_not_found"]),
                Verdict::ModelMissing,
            ),
            (
                f(BadRequest, 404, "", &["not_found_error"]),
                Verdict::ModelMissing,
            ),
            (
                f(BadRequest, 404, "", &["ResourceNotFoundException"]),
                Verdict::ModelMissing,
            ),
            (
                f(BadRequest, 404, "", &["NOT_FOUND"]),
                Verdict::ModelMissing,
            ),
            (
                f(BadRequest, 404, "", &["DeploymentNotFound"]),
                Verdict::ModelMissing,
            ),
            (
                f(BadRequest, 404, "The model `x` does not exist", &[]),
                Verdict::ModelMissing,
            ),
            // A bare 404: no lookup route there, nothing proven.
            (
                f(BadRequest, 404, "404 page not found", &[]),
                Verdict::Unreachable,
            ),
            (
                f(BadRequest, 404, "Not Found", &["Not"]),
                Verdict::Unreachable,
            ),
            // A missing-model code with another status is no 404.
            (
                f(BadRequest, 400, "", &["model_not_found"]),
                Verdict::Unreachable,
            ),
            (
                f(FailureKind::Unavailable { retry_after: None }, 503, "", &[]),
                Verdict::Unreachable,
            ),
            (
                f(FailureKind::RateLimited { retry_after: None }, 429, "", &[]),
                Verdict::Unreachable,
            ),
            (f(BadRequest, 400, "", &[]), Verdict::Unreachable),
        ];
        for (answer, verdict) in cases {
            assert_eq!(verdict_of(&answer), verdict, "{answer:?}");
        }
        let transport = ProbeFailure::from(Failure::new(FailureKind::Connection, "refused"));
        assert_eq!(verdict_of(&transport), Verdict::Unreachable);
    }
}
