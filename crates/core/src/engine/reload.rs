//! A reloaded settings file put in force without a restart
//! ([`Engine::reload`]): which providers to stop, rebuild or leave alone
//! ([`ProviderChanges`], decided as data), which settings only a restart
//! changes ([`hold_fixed`]: kept as they were, and named), then one new
//! router view and the file's client records swapped in.
//!
//! Atomic for requests: a request plans from the view in force when it
//! arrives and keeps that view's settings (routes, timeouts, policies) to
//! its end; the next one plans from the new view. A provider whose
//! settings did not change keeps its actor, breakers, key pool and the
//! calls in flight; one removed or changed has its actor stopped (a
//! request begun before keeps the lease it planned with for all its
//! attempts, its adapters and key pool from the same settings) and, when
//! still configured, started anew from its new settings on first use. A
//! router that fails mid-swap (the engine is stopping) puts the
//! supervisor back on the settings in force. A provider whose key
//! pool changed (keys added, removed or rotated; their weights, cooldown
//! or stickiness) is one of those, and gets a new pool: a key that stays
//! (the same secret) keeps its state — its time out, the budget its
//! answers reported — and a key removed is in no new request's pool (the
//! calls in flight on it finish). A pool whose settings did not change is
//! kept whole, even when its provider's other settings did.

use std::sync::Arc;

use ractor::rpc::CallResult;
use understudy_settings::Settings;
use understudy_types::error::Error;

use super::{Engine, QUERY_TIMEOUT};
use crate::actor::router::{RouterMsg, current};
use crate::actor::supervisor::SupervisorMsg;

/// The configuration in force: the SHA-256 of the file's bytes (hex) and
/// when it was loaded (RFC 3339), for `/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigStamp {
    pub sha256: String,
    pub loaded_at: String,
}

/// What a reload does to the providers, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderChanges {
    /// New in the file: started on first use, as at start.
    pub added: Vec<String>,
    /// Gone from the file: their actors stop.
    pub removed: Vec<String>,
    /// Settings changed (their key pool among them): their actors stop
    /// and start anew from the new settings on first use (a target's
    /// breaker stays: it is the target's, not the actor's).
    pub rebuilt: Vec<String>,
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub providers: ProviderChanges,
    /// The settings that changed but need a restart (their TOML names),
    /// left as they were.
    pub restart_needed: Vec<String>,
    /// The admin API's stored routing, when there is one: put back over
    /// the file's (`Ok`), or why it no longer fits the file's providers
    /// (`Err`: the file's routing is then in force).
    pub stored_routing: Option<Result<(), String>>,
}

// === impl ProviderChanges ===

impl ProviderChanges {
    /// The changes from `old` to `new`.
    pub fn between(old: &Settings, new: &Settings) -> Self {
        let mut changes = Self::default();
        for (name, p) in &new.providers {
            match old.providers.get(name) {
                None => changes.added.push(name.clone()),
                Some(before) if before != p => changes.rebuilt.push(name.clone()),
                Some(_) => {}
            }
        }
        changes.removed = old
            .providers
            .keys()
            .filter(|name| !new.providers.contains_key(*name))
            .cloned()
            .collect();
        changes
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.rebuilt.is_empty()
    }

    /// The providers whose actors stop: removed or rebuilt.
    fn gone(&self) -> Vec<Arc<str>> {
        self.removed
            .iter()
            .chain(&self.rebuilt)
            .map(|n| Arc::from(n.as_str()))
            .collect()
    }
}

/// Sets back in `next` every setting a running engine cannot change to
/// its value in `start`, and returns the TOML names of those that
/// differed: the listen address and the rest of `[server]` but its client
/// records, `REDIS_URL`, `[events]`, `[cache]`, `[breaker]`, `[budget]`,
/// `[telemetry]`, `[affinity]` and `[probe]`.
pub fn hold_fixed(start: &Settings, next: &mut Settings) -> Vec<String> {
    let mut changed = Vec::new();
    let mut hold = |name: &str, differs: bool| {
        if differs {
            changed.push(name.to_owned());
        }
    };
    let (s, n) = (&start.server, &next.server);
    hold("server.listen", s.listen != n.listen);
    hold("server.api_keys", s.api_keys != n.api_keys);
    hold("server.admin_token", s.admin_token != n.admin_token);
    hold("server.idle_timeout", s.idle_timeout != n.idle_timeout);
    hold("server.body_timeout", s.body_timeout != n.body_timeout);
    hold(
        "server.max_connections",
        s.max_connections != n.max_connections,
    );
    hold("server.allowed_hosts", s.allowed_hosts != n.allowed_hosts);
    hold("server.cors_origins", s.cors_origins != n.cors_origins);
    hold(
        "server.max_pinned_targets",
        s.max_pinned_targets != n.max_pinned_targets,
    );
    hold(
        "server.max_body_bytes",
        s.max_body_bytes != n.max_body_bytes,
    );
    hold("server.max_parts", s.max_parts != n.max_parts);
    hold("server.state_file", s.state_file != n.state_file);
    hold("server.drain_grace", s.drain_grace != n.drain_grace);
    hold("server.drain_timeout", s.drain_timeout != n.drain_timeout);
    hold(
        "server.ready_without_redis",
        s.ready_without_redis != n.ready_without_redis,
    );
    hold("REDIS_URL", start.redis_url != next.redis_url);
    hold("[events]", start.events != next.events);
    hold("[cache]", start.cache != next.cache);
    hold("[breaker]", start.breaker != next.breaker);
    hold("[budget]", start.budget != next.budget);
    hold("[telemetry]", start.telemetry != next.telemetry);
    hold("[affinity]", start.affinity != next.affinity);
    hold("[probe]", start.probe != next.probe);
    let clients = std::mem::take(&mut next.server.clients);
    next.server = understudy_settings::ServerSettings {
        clients,
        ..start.server.clone()
    };
    next.redis_url.clone_from(&start.redis_url);
    next.events = start.events.clone();
    next.cache = start.cache.clone();
    next.breaker = start.breaker;
    next.budget = start.budget;
    next.telemetry = start.telemetry.clone();
    next.affinity = start.affinity.clone();
    next.probe = start.probe;
    changed
}

// === impl Engine ===

impl Engine {
    /// Puts `next` (a settings file read again) in force, as the module
    /// says, and records `stamp` as the configuration loaded. The admin
    /// API's stored changes stay over the file's, as at start. Counted in
    /// `understudy_config_reloads_total`, `ok` or `error` (the engine is
    /// stopping).
    pub async fn reload(&self, next: Settings, stamp: ConfigStamp) -> Result<Reloaded, Error> {
        let reloaded = self.put_in_force(next).await;
        self.inner.metrics.config_reloaded(reloaded.is_ok());
        if reloaded.is_ok() {
            self.set_config_stamp(stamp);
        }
        reloaded
    }

    /// Counts a reload whose file did not load (the configuration in force
    /// stays).
    pub fn reload_failed(&self) {
        self.inner.metrics.config_reloaded(false);
    }

    /// The configuration loaded last, once the caller has said (see
    /// [`Self::set_config_stamp`]).
    pub fn config_stamp(&self) -> Option<ConfigStamp> {
        self.inner
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records the configuration in force (the binary does at start, from
    /// the file it read).
    pub fn set_config_stamp(&self, stamp: ConfigStamp) {
        *self
            .inner
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stamp);
    }

    /// The settings in force: those the engine started with, as the last
    /// reload changed them.
    pub fn current_settings(&self) -> Arc<Settings> {
        current(&self.inner.view).map_or_else(
            || Arc::new(self.inner.settings.as_ref().clone()),
            |view| Arc::clone(&view.settings),
        )
    }

    async fn put_in_force(&self, mut next: Settings) -> Result<Reloaded, Error> {
        // No admin routing change in the middle of the swap.
        let _one = self.inner.routing_writes.lock().await;
        let stopped = || Error::Engine("the engine is stopping".into());
        let now = current(&self.inner.view).ok_or_else(stopped)?;
        let mut restart_needed = hold_fixed(&self.inner.settings, &mut next);
        let providers = ProviderChanges::between(&now.settings, &next);
        let tenants = &self.inner.tenants;
        let closed = !next.server.api_keys.is_empty()
            || !next.server.clients.is_empty()
            || !tenants.admin_records().is_empty();
        if closed != tenants.closed {
            // Whether client keys are asked for at all is fixed at start.
            restart_needed.push("server.clients (the first record, or the last)".into());
        }
        let next = Arc::new(next);
        let gone = providers.gone();
        let (settings, left) = (Arc::clone(&next), gone.clone());
        let supervised = self
            .inner
            .supervisor
            .call(
                |reply| SupervisorMsg::Reload {
                    settings,
                    gone: left,
                    reply,
                },
                Some(QUERY_TIMEOUT),
            )
            .await;
        if !matches!(supervised, Ok(CallResult::Success(()))) {
            return Err(stopped());
        }
        let settings = Arc::clone(&next);
        let routed = self
            .inner
            .router
            .call(
                |reply| RouterMsg::Reload {
                    settings,
                    gone,
                    reply,
                },
                Some(QUERY_TIMEOUT),
            )
            .await;
        let Ok(CallResult::Success(stored_routing)) = routed else {
            // The router keeps the view in force: the supervisor goes back
            // to its settings (the actors started from the new ones stop),
            // so that no provider starts from settings no view has.
            let settings = Arc::clone(&now.settings);
            let _ = self
                .inner
                .supervisor
                .call(
                    |reply| SupervisorMsg::Reload {
                        settings,
                        gone: providers.gone(),
                        reply,
                    },
                    Some(QUERY_TIMEOUT),
                )
                .await;
            return Err(stopped());
        };
        tenants.reload_file(&next.server.clients).await;
        for name in providers.removed.iter().chain(&providers.rebuilt) {
            // A verdict on the old settings (a refused key) is not one on
            // the new: unchecked until the next probe.
            self.inner.wide.ready.forget(name);
        }
        for name in &providers.removed {
            // No stale `understudy_provider_up` series of a provider gone.
            let labels = crate::sink::metrics::ProviderLabels {
                provider: name.clone(),
            };
            self.inner.metrics.provider_up.remove(&labels);
        }
        if !providers.added.is_empty() || !providers.rebuilt.is_empty() {
            let warm = self.clone();
            tokio::spawn(async move { warm.warm_credentials(false).await });
        }
        Ok(Reloaded {
            providers,
            restart_needed,
            stored_routing,
        })
    }
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
