//! Understudy's settings: built-in defaults, then the TOML file, then the
//! environment (the later wins). The result is validated as a whole, and
//! every error names the setting at fault and where it came from. Plain
//! std: it reads files and the environment, and starts nothing.
//!
//! The environment is read through a lookup function rather than
//! `std::env` directly, so tests can load settings in parallel without
//! touching the process environment.
//!
//! # Layout
//! [`Settings`] and its loading stages are in `lib.rs`; each part of the
//! settings has a file holding what changes when it does (its public type,
//! its table's shape in the file, and how the two meet the environment):
//! - `provider.rs`: the built-ins, `[providers.NAME]`, the providers'
//!   environment variables; `provider_table.rs` (every provider read:
//!   the file's tables over the built-ins), `capabilities.rs` (what a model can do and
//!   costs), `ca_file.rs` (a provider's extra CA certificates) and
//!   `platform.rs` (Bedrock, Vertex, Azure: their settings and
//!   credentials) beside it.
//! - `routing.rs`: `[routing]`, the admin API's routing table;
//!   `routes.rs`: named routes and their options; `steps.rs`: a route's
//!   steps (target names, groups of equivalent targets); `balance.rs`:
//!   `[balance]`, how a group's member is chosen; `hedge.rs`: a route's
//!   or a group's hedging (`hedge`).
//! - `timeouts.rs`: every `timeouts` table, and how durations are read.
//! - `server.rs`: `[server]`; `clients.rs`: its client records.
//! - `key_pools.rs`: a provider's pool of keys as configured.
//! - `telemetry.rs`: `[telemetry]` and the `OTEL_*` variables. `tables.rs`: `[rate_limit]`, `[events]`,
//!   `[cache]`, `[breaker]` ([`BreakerSettings`]), `[budget]`.
//! - `limits.rs`: built-in output-token limits of well-known models.
//! - `windows.rs`: built-in context windows of well-known models, and a
//!   target's limits resolved (its overrides over the table).
//! - `affinity.rs`: `[affinity]`, sessions pinned where their prompt cache
//!   is (the wait cost, the body sources, per-provider cache facts).
//! - `caller_routing.rs`: `[caller_routing]`, whether a request may
//!   choose its own routing (a client record's setting wins).
//! - `probe.rs`: `[probe]`, the zero-token readiness prober (on or off,
//!   its interval and timeout).
//! - `file.rs`: the file's top-level shape, parsing, parse errors.
//! - `source.rs`: where a value came from, and the error that says so.
//!   `secret.rs`: values never shown. `tests.rs`: loading as a whole.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use understudy_types::target::Target;

mod affinity;
mod balance;
mod ca_file;
mod caller_routing;
mod capabilities;
mod clients;
mod file;
mod hedge;
mod key_pools;
pub mod limits;
mod platform;
mod probe;
mod provider;
mod provider_table;
mod routes;
mod routing;
mod secret;
mod server;
mod source;
mod steps;
mod tables;
mod telemetry;
#[cfg(test)]
mod tests;
mod timeouts;
pub mod windows;

pub use affinity::{AffinitySettings, CacheOverride, MAX_CACHE_TTL};
pub use balance::BalanceSettings;
pub use ca_file::CaFile;
pub use caller_routing::CallerRoutingSettings;
pub use capabilities::{Capabilities, CapabilityOverrides, Price};
pub use clients::{
    ClientRecord, ClientView, ClientWindow, MIN_CLIENT_KEY, NANOS_PER_USD, RawClient, glob, hex,
    new_client_key, sha256, unhex,
};
pub use hedge::{DEFAULT_MAX_SHARE, HedgeAfter, HedgeSettings, HedgeSpec};
pub use key_pools::{DEFAULT_KEY_COOLDOWN, KeyPoolSettings, PoolKey, Sticky};
pub use platform::{
    AwsCredentials, Azure, Bedrock, Platform, Vertex, bedrock_protocol, shown_key_id,
    vertex_protocol,
};
pub use probe::ProbeSettings;
pub use provider::{BUILTIN_PROVIDERS, ProviderSettings};
pub use routes::{RouteOptions, StreamCommit};
pub use routing::{Routed, Routing, RoutingTable, RoutingUpdate, routing_table};
pub use secret::{Secret, redact_url};
pub use server::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_PARTS, DEFAULT_STATE_FILE, ServerSettings};
pub use source::SettingsError;
pub use steps::{GroupSpec, RouteGroup, RouteGroups, RouteStep, parse_target};
pub use tables::{
    BreakerSettings, BudgetSettings, BudgetWindow, CacheSettings, EventSettings, parse_seconds,
};
pub use telemetry::{OtlpProtocol, RootSampler, Sampler, TelemetrySettings};
pub use timeouts::{TimeoutOverrides, Timeouts};

use source::Env;

/// The validated settings of one engine.
#[derive(Debug, Clone)]
pub struct Settings {
    pub routing: Routing,
    /// Every provider, built-in or declared, by name.
    pub providers: BTreeMap<String, ProviderSettings>,
    /// Named routes besides `default`.
    pub routes: BTreeMap<String, Vec<Target>>,
    /// Per-route refusal policy and timeouts, for routes that set them.
    pub route_options: BTreeMap<String, RouteOptions>,
    /// The groups of equivalent targets of the routes that have any.
    pub route_groups: RouteGroups,
    /// How a member of a group is chosen (`[balance]`).
    pub balance: BalanceSettings,
    pub timeouts: Timeouts,
    /// The longest `Retry-After` the engine waits out before its one
    /// rate-limit retry; longer waits fall back at once.
    pub rate_limit_max_wait: Duration,
    pub server: ServerSettings,
    /// Enables the Redis sinks and shared state when set.
    pub redis_url: Option<Secret>,
    pub events: EventSettings,
    pub cache: CacheSettings,
    pub breaker: BreakerSettings,
    /// The fallback spend cap, when set.
    pub budget: Option<BudgetSettings>,
    /// Traces (OpenTelemetry): off without an OTLP endpoint.
    pub telemetry: TelemetrySettings,
    /// Sessions pinned to the target holding their prompt cache.
    pub affinity: AffinitySettings,
    /// Whether requests may choose their own routing (`[caller_routing]`).
    pub caller_routing: CallerRoutingSettings,
    /// Targets proven ready by calls that generate nothing (`[probe]`).
    pub probe: ProbeSettings,
}

// === impl Settings ===

impl Settings {
    /// Loads settings from `config` (or `UNDERSTUDY_CONFIG`) and the process
    /// environment.
    pub fn from_env(config: Option<&Path>) -> Result<Self, SettingsError> {
        Self::load(config, |name| std::env::var(name).ok())
    }

    /// Loads settings with `env` as the environment. A `config` path wins
    /// over `UNDERSTUDY_CONFIG`.
    pub fn load(
        config: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let env = Env::new(&env);
        let path = match config {
            Some(p) => Some(p.to_path_buf()),
            None => env.get("UNDERSTUDY_CONFIG").map(PathBuf::from),
        };
        let Some(path) = path else {
            return Self::from_parts(None, &env);
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            SettingsError::unplaced(
                "UNDERSTUDY_CONFIG",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Self::from_parts(Some((&path, &text)), &env)
    }

    /// The settings of the file at `path`, whose bytes the caller read as
    /// `text`, with `env` over it: a reload hashes and parses the same
    /// bytes. Errors name `path` as [`Self::load`]'s do.
    pub fn from_file_text(
        path: &Path,
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        Self::from_parts(Some((path, text)), &Env::new(&env))
    }

    /// Parses TOML text (as if read from `path`) with `env` overriding it.
    pub fn from_toml_str(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        Self::from_parts(Some((Path::new("<config>"), text)), &Env::new(&env))
    }

    /// The settings of `file` (its path and text) with `env` over it.
    ///
    /// One stage a part, in this order: where several settings are wrong,
    /// the one reported is the first one found.
    fn from_parts(file: Option<(&Path, &str)>, env: &Env<'_>) -> Result<Self, SettingsError> {
        let (raw, blame) = file::read(file)?;
        let timeouts = raw
            .timeouts
            .apply(Timeouts::default(), "timeouts")
            .map_err(|e| blame.field(e))?;
        let mut providers = provider_table::read(raw.providers, timeouts, env, &blame)?;
        let routing = routing::read(raw.routing, &providers, env, &blame)?;
        let (routes, route_options, route_groups) =
            routes::read(raw.routes, &mut providers, &blame)?;
        let balance = balance::read(raw.balance, &blame)?;
        let rate_limit_max_wait = tables::rate_limit_max_wait(raw.rate_limit, &blame)?;
        // A settings file's directory holds the state file by default.
        let config_dir = file
            .and_then(|(path, _)| path.parent())
            .filter(|dir| !dir.as_os_str().is_empty());
        let server = server::read(raw.server, env, &blame, config_dir)?;
        let events = tables::events(raw.events, &blame)?;
        let cache = tables::cache(raw.cache, env, &blame)?;
        let breaker = tables::breaker(raw.breaker, &blame)?;
        let budget = tables::budget(raw.budget, &blame)?;
        let telemetry = telemetry::read(raw.telemetry, env, &blame)?;
        let affinity = affinity::read(raw.affinity, &providers, &routes, (env, &blame))?;
        let caller_routing = caller_routing::read(raw.caller_routing);
        let probe = probe::read(raw.probe, env, &blame)?;
        Ok(Self {
            routing,
            providers,
            routes,
            route_options,
            route_groups,
            balance,
            timeouts,
            rate_limit_max_wait,
            server,
            redis_url: env.get("REDIS_URL").map(Secret::new),
            events,
            cache,
            breaker,
            budget,
            telemetry,
            affinity,
            caller_routing,
            probe,
        })
    }

    /// The targets of the default route: the primary, then the fallback
    /// order without the primary, each with its provider's default model.
    pub fn default_route(&self) -> Vec<Target> {
        self.route_for(&self.routing)
    }

    /// Applies `update` to the current routing and routes (with their
    /// groups), validated by the same rules as the file. Returns the new
    /// routing, routes and groups.
    pub fn apply_routing_update(
        &self,
        routing: &Routing,
        routes: &BTreeMap<String, Vec<Target>>,
        groups: &RouteGroups,
        update: RoutingUpdate,
    ) -> Result<Routed, understudy_types::Error> {
        routing::apply_update(&self.providers, routing, routes, groups, update)
    }

    /// The default route of `routing`: the primary, then the order without
    /// the primary, each with its provider's default model.
    pub fn route_for(&self, routing: &Routing) -> Vec<Target> {
        routing::route_for(&self.providers, routing)
    }
}
