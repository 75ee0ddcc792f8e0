//! Sending one message to a provider's actor and waiting for its reply,
//! starting the actor through the supervisor when the run has no ref for it
//! (providers start on first use).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;

use crate::actor::provider::ProviderMsg;
use crate::actor::supervisor::{EnsureError, SupervisorMsg};
use crate::failure::{Failure, FailureKind};

/// Sends a message built by `make` to the provider's actor and waits up to
/// `wait` for the reply, starting the actor through the supervisor when
/// `slot` is empty. A stale ref (the actor died before the message went
/// out, so the provider never saw the request) is replaced once.
pub(crate) async fn call_provider<T: Send + 'static>(
    slot: &mut Option<ActorRef<ProviderMsg>>,
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
    wait: Duration,
    mut make: impl FnMut(ractor::RpcReplyPort<Result<T, Failure>>) -> ProviderMsg,
) -> Result<T, Failure> {
    let failed = |kind, detail: &str| Err(Failure::new(kind, detail));
    let mut fresh = false;
    loop {
        let actor = match slot {
            Some(a) => a.clone(),
            None => {
                fresh = true;
                let a = ensure(supervisor, provider).await?;
                *slot = Some(a.clone());
                a
            }
        };
        return match actor.call(&mut make, Some(wait)).await {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => failed(
                FailureKind::Timeout,
                "the provider actor did not answer in time",
            ),
            Ok(CallResult::SenderError) => failed(
                FailureKind::Unavailable,
                "the provider actor stopped during the attempt",
            ),
            Err(_) if !fresh => {
                *slot = None;
                continue;
            }
            Err(_) => failed(
                FailureKind::Unavailable,
                "the provider actor is not running",
            ),
        };
    }
}

/// The provider's actor, started if needed.
async fn ensure(
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
) -> Result<ActorRef<ProviderMsg>, Failure> {
    let asked = supervisor
        .call(
            |reply| SupervisorMsg::Ensure {
                provider: Arc::clone(provider),
                reply,
            },
            Some(Duration::from_secs(10)),
        )
        .await;
    match asked {
        Ok(CallResult::Success(Ok(actor))) => Ok(actor),
        Ok(CallResult::Success(Err(EnsureError::Unavailable(why)))) => {
            Err(Failure::new(FailureKind::Unavailable, why.as_str()))
        }
        Ok(CallResult::Success(Err(EnsureError::StartFailed(why)))) => Err(Failure::new(
            FailureKind::Unavailable,
            format!("provider failed to start: {why}"),
        )),
        _ => Err(Failure::new(
            FailureKind::Unavailable,
            "the supervisor is not running",
        )),
    }
}
