//! The engine's run-time administration: the routing table read and
//! changed, the admin API's client records made, changed and revoked, and
//! where those changes are kept (Redis for a fleet, else the state file,
//! read back at start). Each write runs whole on a task of its own, so a
//! caller that goes away cannot leave the store and memory apart.

use ractor::ActorRef;
use ractor::rpc::CallResult;
use understudy_settings::{RoutingTable, RoutingUpdate, Settings};
use understudy_types::error::Error;

use super::{Engine, QUERY_TIMEOUT};
use crate::actor::router::{RouterMsg, update_of};
use crate::tenants::{Kept, StateFile};

/// The state file and what it holds, without Redis (with Redis, Redis
/// holds the admin API's changes and the file is not read).
pub(super) fn open_state(settings: &Settings) -> Result<Option<(StateFile, Kept)>, Error> {
    if settings.redis_url.is_some() {
        return Ok(None);
    }
    let (file, kept) = StateFile::open(settings.server.state_file.clone()).map_err(|e| {
        Error::Engine(format!(
            "{e}. It holds the client records and routing the admin API made: repair it, or \
             move it away to start without them (server.state_file names it)"
        ))
    })?;
    if !kept.clients.is_empty() || kept.routing.is_some() {
        tracing::info!(
            path = %file.path().display(),
            clients = kept.clients.len(),
            routing = kept.routing.is_some(),
            "the admin API's changes read from the state file"
        );
    }
    Ok(Some((file, kept)))
}

/// Puts the routing table the state file kept in force; one that no longer
/// fits the providers is left out (the settings file's stays) with a
/// warning, and stays in the file until the next change.
pub(super) async fn apply_kept_routing(router: &ActorRef<RouterMsg>, table: RoutingTable) {
    let kept = table.clone();
    let applied = router
        .call(
            |reply| RouterMsg::SetRouting {
                update: update_of(table),
                reply,
            },
            Some(QUERY_TIMEOUT),
        )
        .await;
    match applied {
        Ok(CallResult::Success(Ok(_))) => {}
        Ok(CallResult::Success(Err(e))) => {
            tracing::warn!(
                error = %e,
                "the routing in the state file does not fit the providers now; the settings file's is in force"
            );
            // Still the stored table: a reload whose providers it fits
            // puts it in force, as a restart would.
            let _ = router.cast(RouterMsg::KeepStored(Some(kept)));
        }
        _ => tracing::warn!("the router did not take the state file's routing"),
    }
}

// === impl Engine ===

impl Engine {
    /// The routing table in force.
    pub async fn routing(&self) -> Result<RoutingTable, Error> {
        match self
            .inner
            .router
            .call(RouterMsg::GetRouting, Some(QUERY_TIMEOUT))
            .await
        {
            Ok(CallResult::Success(r)) => Ok(r),
            _ => Err(Error::Engine("the router is not running".into())),
        }
    }

    /// Changes the default provider, fallback order, refusal policy or named
    /// routes at run time. Validated like the settings file; applies to the
    /// next request, and requests in flight keep their plan.
    /// With Redis, every instance of the fleet takes the new table within a
    /// second (and an instance that starts later takes it too).
    /// Without Redis the new table is kept in the state file, so that a
    /// restart keeps it; a change the file cannot take is undone and
    /// refused.
    pub async fn set_routing(&self, update: RoutingUpdate) -> Result<RoutingTable, Error> {
        let engine = self.clone();
        crate::tenants::whole(async move { engine.set_routing_whole(update).await }).await
    }

    /// [`Self::set_routing`], run to its end even if its caller is dropped.
    async fn set_routing_whole(&self, update: RoutingUpdate) -> Result<RoutingTable, Error> {
        let _one = self.inner.routing_writes.lock().await;
        let Some(state) = self.inner.tenants.state_file() else {
            let table = self.set_routing_here(update).await?;
            if let Some(shared) = &self.inner.wide.shared {
                if !crate::tenants::fleet::publish_routing(shared, &table).await {
                    tracing::warn!(
                        "Redis is unreachable: the routing changed on this instance only"
                    );
                }
            }
            return Ok(table);
        };
        let before = self.routing().await?;
        let table = self.set_routing_here(update).await?;
        if let Err(e) = state.keep_routing(table.clone()).await {
            tracing::error!(error = %e, "a routing change was not kept; undone");
            // Nothing half-kept: the table it replaced is back in force.
            let _ = self.set_routing_here(update_of(before)).await;
            let stored = state.routing().await;
            let _ = self.inner.router.cast(RouterMsg::KeepStored(stored));
            return Err(Error::Engine(format!(
                "{e}; the routing change was not made"
            )));
        }
        Ok(table)
    }

    /// Where the admin API's changes are kept: `redis` or `state_file`.
    pub fn kept_in(&self) -> crate::tenants::KeptIn {
        self.inner
            .tenants
            .kept_in(self.inner.wide.shared.as_deref())
    }

    async fn set_routing_here(&self, update: RoutingUpdate) -> Result<RoutingTable, Error> {
        match self
            .inner
            .router
            .call(
                |reply| RouterMsg::SetRouting { update, reply },
                Some(QUERY_TIMEOUT),
            )
            .await
        {
            Ok(CallResult::Success(r)) => r,
            _ => Err(Error::Engine("the router is not running".into())),
        }
    }

    /// Every client record, the file's and the admin API's.
    pub fn list_clients(&self) -> Vec<crate::tenants::ClientListing> {
        self.inner.tenants.list_clients()
    }

    /// Makes a client record (for the fleet with Redis); without `key` or
    /// `key_sha256`, with a new key, shown this once.
    pub async fn create_client(
        &self,
        raw: understudy_settings::RawClient,
    ) -> Result<crate::tenants::Saved, crate::tenants::AdminError> {
        let engine = self.clone();
        crate::tenants::whole(async move {
            let shared = engine.inner.wide.shared.as_deref();
            engine.inner.tenants.create_client(shared, raw).await
        })
        .await
    }

    /// Replaces the limits of the admin API's record `name`.
    pub async fn update_client(
        &self,
        name: &str,
        raw: understudy_settings::RawClient,
    ) -> Result<crate::tenants::Saved, crate::tenants::AdminError> {
        let (engine, name) = (self.clone(), name.to_owned());
        crate::tenants::whole(async move {
            let shared = engine.inner.wide.shared.as_deref();
            engine.inner.tenants.update_client(shared, &name, raw).await
        })
        .await
    }

    /// Revokes the admin API's record `name`.
    pub async fn delete_client(&self, name: &str) -> Result<(), crate::tenants::AdminError> {
        let (engine, name) = (self.clone(), name.to_owned());
        crate::tenants::whole(async move {
            let shared = engine.inner.wide.shared.as_deref();
            engine.inner.tenants.delete_client(shared, &name).await
        })
        .await
    }
}
