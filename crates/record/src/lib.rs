//! The record of a generation: the request the engine takes and the
//! answer it gives, the one event each request leaves, the trace context
//! its spans continue, and the sinks events go to. The engine
//! (`understudy-core`) makes them and publishes each event; this crate
//! says what they hold and where they go, and neither runs a request nor
//! holds an engine's state.
//!
//! # Layout
//! - [`generation`]: [`GenerateRequest`], [`Generation`], request ids,
//!   the client's tag and session hint.
//! - [`event`]: [`GenerationEvent`], the record of every generation, and
//!   the notes it carries (hedge, affinity, caller routing).
//! - [`trace`]: a request's trace context (W3C `traceparent`, sampling)
//!   and the notes its spans need (`trace/notes.rs`).
//! - [`sink`]: the event fan-out (`fanout.rs`), the metrics
//!   (`metrics.rs`; the sink and its recorder in `metrics/recorder.rs`,
//!   the GenAI metrics in `genai.rs`), the recent
//!   events the status page shows (`recent.rs`), the Redis Stream writer
//!   (`redis.rs`), and the [`sink::Sink`] a starter hands the engine.
//! - [`fixed_keys`]: a cheap hasher for maps keyed by configured names.
//! - `short_hash.rs`: [`event::ShortHash`], a short hex string held in
//!   place (a session's hash in an event; how a request id is written).

pub mod event;
pub mod fixed_keys;
pub mod generation;
mod short_hash;
pub mod sink;
pub mod trace;

pub use event::GenerationEvent;
pub use generation::{
    ClientTag, GenerateRequest, GenerateResult, Generation, SessionHint, SessionSource,
    new_request_id,
};
