//! What `understudy providers` and `GET /v1/providers` show of each
//! provider: [`ProviderInfo`], its key's [`KeyStatus`] (never the key) and
//! its targets' [`TargetBreaker`]s. A leaf of plain data, so the actors can
//! build it without importing the engine.

use std::collections::HashMap;

use serde::Serialize;
use understudy_policy::breaker::BreakerState;
use understudy_types::protocol::Protocol;

/// One provider as `understudy providers` and `GET /v1/providers` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderInfo {
    pub name: String,
    pub kind: Protocol,
    /// The cloud it is on (`bedrock`, `vertex`, `azure`), or `direct`.
    pub platform: &'static str,
    pub model: String,
    pub base_url: String,
    pub key: KeyStatus,
    pub available: bool,
    /// Why it is not available (no key, no adapter, …).
    pub unavailable_reason: Option<String>,
    /// Whether its actor has been started (providers start on first use).
    pub started: bool,
    /// Outcome counts since its actor started, when it has.
    pub stats: Option<ProviderStats>,
    /// Targets whose breaker has left the closed state at some point.
    pub breakers: Vec<TargetBreaker>,
    /// Its pool's keys, by name (empty for a provider with one key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<crate::key_pools::PoolKeyStatus>,
}

/// One target's circuit breaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetBreaker {
    pub model: String,
    pub state: BreakerState,
    pub consecutive_failures: u32,
    /// While open: when the next probe may go.
    pub reopens_in_ms: Option<u64>,
}

/// Whether a provider's key is set. Never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeyStatus {
    Set {
        from: Option<String>,
    },
    Unset {
        from: Option<String>,
    },
    NotNeeded,
    /// A cloud's credentials other than a key: where they come from
    /// (AWS keys and their source, a profile, a service-account file).
    Credentials {
        source: String,
    },
}

/// Outcome counts since the actor (re)started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProviderStats {
    pub ok: u64,
    pub failed: HashMap<&'static str, u64>,
    pub in_flight: u64,
    /// Mean latency of successful attempts, in milliseconds.
    pub mean_ok_latency_ms: f64,
    /// The credentials the actor refreshes, when they expire or change:
    /// their source and expiry, never the secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<crate::adapter::CredentialStatus>,
    /// Why no request can be signed now (the credentials are still being
    /// fetched, or cannot be had): the provider is unavailable meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_unusable: Option<String>,
}
