//! Anthropic's Messages API shapes that `POST /v1/messages` reads and
//! writes, and their translation to and from the neutral types.
//!
//! An Anthropic target gets the client's body as sent (only the key and
//! the model change: see [`crate::routes::messages`]), so thinking with its
//! signatures, prompt caching and betas keep working. The translation here
//! is for targets of other protocols: thinking settings and blocks are
//! dropped for them (they cannot verify a signature, and a thinking block
//! is never forwarded as text), `cache_control` markers and `top_k` too.
//! What the neutral types cannot carry at all (content blocks, tools and
//! roles only Anthropic knows) does not refuse the request: it is noted in
//! the request's `native_only`, each target of another protocol is then an
//! `unsupported` attempt, and a route with no Anthropic target a 400 that
//! says so per target. Server tools that fetch URLs or run code, MCP,
//! files and skills also need the provider's `passthrough` (`native_gated`,
//! `understudy_core::passthrough`).
//!
//! Unknown request fields are ignored (SDKs and Claude Code send many);
//! known ones are checked, and what no protocol could take (no `model`, no
//! `max_tokens`, a malformed block) is a 400 that names the field.
//!
//! # Layout
//! - [`request`]: the body's shapes, as the client sends them, and the
//!   input-token estimate read off them.
//! - [`translate`]: the body onto the neutral `ChatRequest`.
//! - [`answer`]: the `message` written back, and the stop reasons.
//! - [`stream`]: a committed stream as Anthropic's server-sent events.
//! - [`error`]: Anthropic's error body (responses and the `error` event).

mod answer;
mod error;
mod request;
mod stream;
mod translate;

#[cfg(test)]
mod tests;

pub(crate) use answer::MessageOut;
pub(crate) use error::ErrorOut;
pub(crate) use request::MessagesRequest;
pub(crate) use stream::{MessageEvents, Typed, event};
