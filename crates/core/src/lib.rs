//! Understudy's engine: everything that decides, nothing that speaks a wire
//! protocol.
//!
//! # Layout
//! - [`chat`]: neutral request and completion types.
//! - [`error`]: failure codes, one attempt's [`Failure`], a request's [`Error`].
//! - [`generation`]: [`GenerateRequest`], [`Generation`], [`Attempt`].
//! - [`settings`]: defaults, TOML file and environment (DESIGN §4).
//! - [`policy`]: pure decisions: plan, softening, refusal policy, backoff.
//! - [`adapter`]: the trait the `understudy-providers` crate implements.
//! - `actor`: router, provider and supervisor actors (private).
//! - `run`: one request's walk through its plan (private).
//! - [`stream`]: streamed generation: commit on the first text, never stitch.
//! - [`engine`]: [`Engine`], the handle every front end uses.
//! - [`event`]: [`GenerationEvent`], the record of every generation.
//! - [`sink`]: the event fan-out, the metrics writer, the Redis writer.
//! - `cache`: the response cache (memory or Redis).
//! - [`redis_link`]: a self-healing Redis connection for the request path.
//! - [`shared`]: a fleet's shared breakers, probe lock and spend, in Redis.

pub mod adapter;
pub mod chat;
pub mod engine;
pub mod error;
pub mod event;
pub mod generation;
pub mod policy;
pub mod redis_link;
pub mod settings;
pub mod shared;
pub mod sink;

pub mod stream;

mod actor;
mod cache;
mod run;

pub use actor::provider::ProviderStats;
pub use adapter::{Adapter, AdapterFactory, BoxEventStream, BoxFuture, EventStream};
pub use chat::{ChatRequest, Completion, FinishReason, Message, Role, StreamEvent, Usage};
pub use engine::{Engine, KeyStatus, ProviderInfo, TargetBreaker};
pub use error::{Error, Failure, FailureCode, FailureKind};
pub use event::GenerationEvent;
pub use generation::{
    Attempt, AttemptKind, GenerateRequest, GenerateResult, Generation, Outcome, RouteSelector,
    new_request_id,
};
pub use policy::plan::Target;
pub use policy::refusal::RefusalPolicy;
pub use settings::{
    ProviderKind, ProviderSettings, RoutingTable, RoutingUpdate, Secret, Settings, SettingsError,
};
pub use stream::{GenerationStream, StreamDone, StreamError, StreamItem};
