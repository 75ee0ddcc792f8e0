//! Anthropic's Messages API shapes that `POST /v1/messages` reads and
//! writes, and their translation to and from the neutral types.
//!
//! Every target, Anthropic included, gets a translated request in this
//! version: `cache_control` markers, `thinking` settings and thinking blocks
//! are dropped (other providers cannot verify a thinking block's signature,
//! and it is never forwarded as text), `top_k` has no neutral field and is
//! dropped. Forwarding the client's body byte-identical to Anthropic targets
//! is a later piece of work; [`crate::routes::messages`] keeps one function
//! that renders an answer and one that renders a stream, where it plugs in.
//!
//! Unknown request fields are ignored (SDKs and Claude Code send many);
//! known ones are checked, and what the translation cannot carry (server
//! tools, file ids, content block types it does not know) is refused with
//! a 400 that says so.
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
