//! Understudy's engine: everything that decides, nothing that speaks a wire
//! protocol.
//!
//! # Layout
//! Leaves (plain types, no I/O): [`failure`] (codes, one attempt's
//! [`Failure`] and its [`Disposition`]), [`attempt`], [`target`],
//! [`chat`], [`error`] (a request's [`Error`]), [`generation`]
//! ([`GenerateRequest`], [`Generation`]), [`info`] (what `providers`
//! shows), [`stream`] (the [`GenerationStream`] a caller reads),
//! [`settings`] (defaults, TOML file and environment, DESIGN §4),
//! [`limits`] (built-in output-token limits of well-known models),
//! [`passthrough`] (what the native pass-through refuses unless allowed),
//! [`clock`] (RFC 3339 times read and written, UTC calendar days).
//!
//! - [`policy`]: pure decisions, no I/O: the decision machine
//!   (`policy::decide`), plan, timeouts, softening, refusal policy,
//!   backoff, breaker, budget windows.
//! - [`adapter`]: the trait the `understudy-providers` crate implements.
//! - [`credentials`]: how long a request may wait on credentials that the
//!   provider's actor fetches.
//! - [`breakers`]: the one home of every target's circuit breaker.
//! - `actor`: router, provider and supervisor actors (private).
//! - `run`: thin executors of the decision machine, answer and stream
//!   (private).
//! - [`engine`]: [`Engine`], the handle every front end uses (`engine/admin.rs`:
//!   the routing table and client records changed at run time, and where
//!   those changes are kept; `engine/start.rs`: each part the start starts).
//! - `engine_wide`: the objects fixed for the engine's life (event bus,
//!   response cache, breaker board, key pools, spend meter, fleet state),
//!   shared by every run (private).
//! - [`readiness`]: whether every route has a target that can serve.
//! - [`logctx`]: the request id every log line of a request carries.
//! - [`event`]: [`GenerationEvent`], the record of every generation.
//! - [`sink`]: the event fan-out, the metrics writer, the Redis writer.
//! - `cache`: the response cache (memory or Redis).
//! - [`redis_link`]: a self-healing Redis connection for the request path.
//! - [`shared`]: a fleet's shared breakers, probe lock and spend, in Redis.
//! - [`spend`]: the fallback spend meter.
//! - [`trace`]: a request's trace context, its spans and their OTLP
//!   encoding (exported by `sink::otlp`).
//! - [`tenants`]: client records held to their budgets, rates, models
//!   and expiry (across the fleet with Redis).
//! - [`protocol`]: [`Protocol`], the one name of a wire protocol (a leaf).
//! - [`ratelimit`]: the rate-limit budgets providers report (a leaf).
//! - [`key_pools`]: a pooled provider's keys at run time (`KeyPool`,
//!   every pool in `KeyPools`, a request's key in `KeyInUse`).

pub mod adapter;
pub mod attempt;
pub mod breakers;
pub mod chat;
pub mod clock;
pub mod credentials;
pub mod engine;
mod engine_wide;
pub mod error;
pub mod event;
pub mod failure;
pub mod generation;
pub mod info;
pub mod key_pools;
pub mod limits;
pub mod logctx;
pub mod passthrough;
pub mod policy;
pub mod protocol;
pub mod ratelimit;
pub mod readiness;
pub mod redis_link;
pub mod settings;
pub mod shared;
pub mod sink;
pub mod spend;
pub mod stream;
pub mod target;
pub mod tenants;
pub mod trace;

mod actor;
mod cache;
mod run;

pub use adapter::{
    Adapter, AdapterFactory, BoxEventStream, BoxFuture, CallOptions, CredentialStatus, Credentials,
    EventStream,
};
pub use chat::{
    ChatRequest, Completion, FinishReason, Message, NativeEvent, NativeRequest, Needs, Part,
    ResponseFormat, Role, Softened, StreamEvent, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};
pub use credentials::CredentialGate;
pub use engine::Engine;
pub use error::Error;
pub use event::GenerationEvent;
pub use failure::{Disposition, Failure, FailureCode, FailureKind};
pub use generation::{
    Attempt, AttemptKind, ClientTag, GenerateRequest, GenerateResult, Generation, Outcome,
    RouteSelector, new_request_id,
};
pub use info::{KeyStatus, ProviderInfo, ProviderStats, TargetBreaker};
pub use policy::refusal::RefusalPolicy;
pub use protocol::Protocol;
pub use settings::{
    ProviderSettings, RoutingTable, RoutingUpdate, Secret, Settings, SettingsError,
};
pub use stream::{GenerationStream, StreamDone, StreamError, StreamItem};
pub use target::Target;
