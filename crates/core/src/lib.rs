//! Understudy's engine: everything that runs a request, nothing that speaks
//! a wire protocol. The vocabulary it speaks is `understudy-types`, its
//! settings `understudy-settings`, and the decisions it carries out
//! `understudy-policy` (pure); this crate does the I/O, holds the state and
//! runs the actors. What a generation leaves behind (its request and
//! answer, [`GenerationEvent`], its trace, and the sinks events go to) is
//! `understudy-record`'s: its modules [`generation`], [`event`],
//! [`trace`] and [`sink`] keep their paths here. What instances share and
//! clients are held to (the Redis link, the fleet's state in Redis, the
//! spend meter, client records) is `understudy-fleet`'s: [`redis_link`],
//! [`shared`], [`spend`] and [`tenants`].
//!
//! # Layout
//! - [`engine`]: [`Engine`], the handle every front end uses (`engine/admin.rs`:
//!   the routing table and client records changed at run time, and where
//!   those changes are kept; `engine/start.rs`: each part the start starts;
//!   `engine/reload.rs`: a settings file read again put in force).
//! - `run`: thin executors of the decision machine, answer and stream
//!   (private).
//! - `actor`: router, provider and supervisor actors, and the group
//!   members' stats the router's view holds (private).
//! - [`stream`]: the [`GenerationStream`] a caller reads (`stream/feed.rs`:
//!   the bounded channel behind it).
//! - [`adapter`]: the trait the `understudy-providers` crate implements.
//! - [`credentials`]: how long a request may wait on credentials that the
//!   provider's actor fetches.
//! - [`breakers`]: the one home of every target's circuit breaker.
//! - [`key_pools`]: a pooled provider's keys at run time (`KeyPool`,
//!   every pool in `KeyPools`, those in force in `LivePools`, a request's
//!   key in `KeyInUse`).
//! - [`info`]: what `providers` shows.
//! - `engine_wide`: the objects fixed for the engine's life (event bus,
//!   response cache, breaker board, key pools, spend meter, fleet state),
//!   shared by every run (private).
//! - [`readiness`]: whether every route has a target that can serve.
//! - [`probe`]: the zero-token readiness prober (a target whose key or
//!   model a probe proved bad is left out of plans; one prober per fleet).
//! - [`logctx`]: the request id every log line of a request carries.
//! - `runtime_clock`: now and elapsed time on tokio's clock (paused in
//!   tests), as the std instants the pure policies take.
//! - `cache`: the response cache (memory or Redis).
//! - `fleet_poll`: the fleet's breakers and held-out pool keys, read from
//!   Redis into the breaker board and the key pools (private).
//! - [`affinity`]: sessions kept on the target holding their prompt cache:
//!   the pins, in process and in Redis (`session.rs`: a session's key).

pub mod adapter;
pub mod affinity;
pub mod breakers;
pub mod credentials;
pub mod engine;
mod engine_wide;
pub mod info;
pub mod key_pools;
pub mod logctx;
pub mod probe;
pub mod readiness;
pub mod stream;

mod actor;
mod cache;
mod fleet_poll;
mod run;
mod runtime_clock;

// The record of a generation lives in `understudy-record`; its modules
// keep their paths here for the engine's code and its users.
use understudy_record::fixed_keys;
pub use understudy_record::{event, generation, sink, trace};
// What instances share and clients are held to lives in `understudy-fleet`.
pub use understudy_fleet::{redis_link, shared, spend, tenants};

pub use actor::target_stats::TargetStatsView;
pub use adapter::{
    Adapter, AdapterFactory, BoxEventStream, BoxFuture, CallOptions, CredentialStatus, Credentials,
    CreditUse, EventStream, ProbeFailure,
};
pub use credentials::CredentialGate;
pub use engine::{ConfigStamp, Engine, ProviderChanges, Reloaded};
pub use event::GenerationEvent;
pub use generation::{
    ClientTag, GenerateRequest, GenerateResult, Generation, SessionHint, SessionSource,
    new_request_id,
};
pub use info::{KeyStatus, ProviderInfo, ProviderStats, TargetBreaker};
pub use stream::GenerationStream;
