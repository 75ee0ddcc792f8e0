//! A provider's lease for a run: the one the router's view had, else asked
//! of the supervisor, which starts the provider's actor on first use.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use understudy_types::failure::{Failure, FailureKind};

use crate::actor::provider::Lease;
use crate::actor::supervisor::{EnsureError, SupervisorMsg};

/// The lease in `slot`, or the provider's (its actor started if needed),
/// kept in `slot` for the run's next attempt on it.
pub(crate) async fn lease<'a>(
    slot: &'a mut crate::run::Slot,
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
) -> Result<&'a Lease, Failure> {
    // A lease whose actor has stopped (it crashed; the supervisor is
    // restarting it) is replaced by the new actor's: a restart means fresh
    // state, for the attempts that begin after it. One stopped by a reload
    // is kept: the run finishes on the settings it planned with, its key
    // pool's keys those of the lease's adapters. Asking is boxed: once per
    // provider and run at most, and only until the router's view has the
    // lease.
    let lease = match slot.lease.take() {
        Some(lease)
            if lease.actor.get_status() == ractor::ActorStatus::Running || lease.retired() =>
        {
            lease
        }
        _ => {
            let lease = Box::pin(ensure(supervisor, provider)).await?;
            // Built from settings reloaded since the plan: its keys are
            // not the planned pool's.
            if !lease.fits(slot.pool.as_deref()) {
                return Err(Failure::new(
                    FailureKind::Unavailable { retry_after: None },
                    "the provider's settings were reloaded during the request",
                ));
            }
            lease
        }
    };
    Ok(slot.lease.insert(lease))
}

/// The provider's lease, its actor started if needed.
async fn ensure(
    supervisor: &ActorRef<SupervisorMsg>,
    provider: &Arc<str>,
) -> Result<Lease, Failure> {
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
        Ok(CallResult::Success(Ok(lease))) => Ok(lease),
        Ok(CallResult::Success(Err(EnsureError::Unavailable(why)))) => Err(Failure::new(
            FailureKind::Unavailable { retry_after: None },
            why.as_str(),
        )),
        // Which setting is wrong and how (never its value: a build error
        // names no file), without the actor's words around it; the
        // supervisor logged it too.
        Ok(CallResult::Success(Err(EnsureError::StartFailed(why)))) => Err(Failure::new(
            FailureKind::Unavailable { retry_after: None },
            format!("the provider could not be started: {why}"),
        )),
        _ => Err(Failure::new(
            FailureKind::Unavailable { retry_after: None },
            "the supervisor is not running",
        )),
    }
}
