//! Understudy's shared vocabulary: the plain data every other crate speaks
//! of, with no runtime, no network and no clock reads.
//!
//! A request is a [`ChatRequest`] asking for a [`RouteSelector`]; it walks
//! [`Target`]s (a provider and a model), each call recorded as an
//! [`Attempt`]; one attempt's failure is a [`Failure`] whose
//! [`Disposition`] the decision machine and the breaker both read, and a
//! whole request's failure is an [`Error`]. A streamed answer yields
//! [`StreamItem`]s. [`Protocol`] names a wire protocol.
//!
//! # Layout
//! - `chat.rs`: neutral chat types, what a client asks and a provider
//!   answers (`chat/validate.rs`: what a request must hold before any
//!   provider sees it; `chat/estimate.rs`: its input tokens estimated;
//!   `chat/tests.rs`: their tests).
//! - `failure.rs`: failure codes, one attempt's [`Failure`], its
//!   [`Disposition`].
//! - `credit.rs`: Anthropic's fallback credit, a refusal's token and what
//!   became of it.
//! - `attempt.rs`: one call to one target and its outcome.
//! - `error.rs`: a request's [`Error`].
//! - `protocol.rs`: [`Protocol`], the one name of a wire protocol.
//! - `target.rs`: [`Target`], a provider and one of its models.
//! - `route.rs`: [`RouteSelector`], which targets a request asks to walk.
//! - `caller.rs`: [`CallerRouting`], the routing a request itself asked
//!   for (models in order, provider preferences).
//! - `stream_item.rs`: what a committed stream yields.
//! - `ratelimit.rs`: the rate-limit budgets providers report.
//! - `refusal.rs`: [`RefusalPolicy`], what a content-filter refusal leads to.
//! - `passthrough.rs`: what the native pass-through refuses unless allowed.
//! - `clock.rs`: RFC 3339 times read and written, UTC calendar days (pure:
//!   the time is an input).
//!
//! Purity is held by Cargo and clippy: the dependency list names plain-data
//! libraries only (a tidy fence reads it), and `clippy.toml` bans clock
//! reads, the environment, files, threads and sockets.

pub mod attempt;
pub mod caller;
pub mod chat;
pub mod clock;
pub mod credit;
pub mod error;
pub mod failure;
pub mod passthrough;
pub mod protocol;
pub mod ratelimit;
pub mod refusal;
pub mod route;
pub mod stream_item;
pub mod target;

pub use attempt::{Attempt, AttemptKind, Outcome};
pub use caller::CallerRouting;
pub use chat::{
    ChatRequest, Completion, FinishReason, Message, NativeEvent, NativeRequest, Needs, Part,
    ResponseFormat, Role, Softened, Spans, StreamEvent, Tool, ToolCall, ToolCallDelta, ToolChoice,
    Usage,
};
pub use error::Error;
pub use failure::{Disposition, Failure, FailureCode, FailureKind};
pub use protocol::Protocol;
pub use refusal::RefusalPolicy;
pub use route::RouteSelector;
pub use stream_item::{StreamDone, StreamError, StreamItem};
pub use target::Target;
