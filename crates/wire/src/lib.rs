//! Understudy's wire protocols, one folder per protocol, with no I/O: the
//! serde types of each protocol in both directions, the translation
//! between them and the neutral types of `understudy-types`, their stream
//! events parsed (and rendered), their stop-reason and error tables, and
//! the editing of a body a client wrote natively in one.
//!
//! The providers crate sends what this crate builds and hands back what it
//! receives (transport, pooled clients, signing); the server's front ends
//! read clients' requests and write their answers with it. Nothing here
//! opens a socket, reads a clock for a deadline, or logs.
//!
//! # Layout
//! - [`chat_completions`]: OpenAI's Chat Completions and compatible servers.
//! - [`responses`]: OpenAI's Responses API.
//! - [`generate_content`]: Google's Generative Language API (Gemini).
//! - [`messages`]: Anthropic's Messages API (a client's own body fitted to
//!   an Anthropic target in `messages/native.rs`, its thinking check in
//!   `native/thinking.rs`, a cloud's form of it in `native/cloud.rs`).
//! - [`converse`]: AWS Bedrock's Converse API (the models on Bedrock that are not Anthropic's).
//! - [`endpoint`]: the trait each front end's HTTP edge implements in its
//!   protocol's `endpoint.rs` (paths, keys, error shape, model list,
//!   rate-limit headers), and the table ([`endpoint::Edge`]) it makes.
//! - [`front_ends`]: which front end each protocol is ([`front_ends::edge`],
//!   one arm per front end), and whose path or key a request carries.
//! - [`classify`]: what HTTP statuses and rate-limit hints mean.
//! - [`caller`]: the routing fields a client may send in a body
//!   (`models`, `provider`, `fallbacks`), read and kept from providers.
//! - [`go_duration`]: Go's durations (`1m0s`), read and written.
//! - `skim`: JSON text checked as strictly as `serde_json` while member
//!   names and byte ranges are found, building nothing.
//! - `json_text`: JSON written by hand into one buffer for the answers every
//!   plain request writes (the bytes serde writes).
//! - [`ratelimit`]: the rate-limit budgets providers report (`x-ratelimit-*`, `anthropic-ratelimit-*`).
//! - [`eventstream`]: AWS's binary event-stream framing (Bedrock's streams), decoded and encoded.
//! - [`sse`]: the event-stream decoder (it keeps non-SSE lines; see its docs for why).
//! - [`stray`]: raw JSON errors that arrive inside a stream without SSE framing.
//! - [`signature`]: Gemini's thought signatures carried in the tool-call ids the gateway mints.
//! - [`softening`]: the softened retry written into a native body, in its protocol.
//! - [`ids`]: tool-call ids in each protocol's alphabet, mapped injectively and reversibly.
//! - [`framing`]: a stream's bytes as the parser's items (SSE, or AWS's event stream), and a parser run over recorded bytes.
//! - [`StreamParser`]: decoded SSE items in, neutral stream events out.

pub mod caller;
pub mod chat_completions;
pub mod classify;
pub mod converse;
pub mod endpoint;
pub mod eventstream;
pub mod framing;
pub mod front_ends;
pub mod generate_content;
pub mod go_duration;
pub mod ids;
mod json_text;
pub mod messages;
pub mod ratelimit;
pub mod responses;
pub mod signature;
mod skim;
pub mod softening;
pub mod sse;
pub mod stray;
#[cfg(test)]
mod usage_tests;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use understudy_settings::ProviderSettings;
use understudy_types::{Failure, FailureKind, StreamEvent};

use crate::sse::SseItem;

/// A request a client wrote that its protocol does not allow: the front
/// end answers it as its API's 400, naming `field` where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The offending field, as a path into the body (`contents[2].role`).
    pub field: Option<String>,
    pub message: String,
}

impl Invalid {
    /// A fault in `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

/// One frame of a streamed answer in a client's protocol: the SSE event
/// name where the protocol names its events (empty where it does not; a
/// relayed provider's own names are its own), and the JSON data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub event: Cow<'static, str>,
    pub data: String,
}

impl Frame {
    /// An unnamed frame holding `data`.
    pub fn data(data: String) -> Self {
        Self {
            event: Cow::Borrowed(""),
            data,
        }
    }

    /// An unnamed frame holding `value` as JSON.
    pub fn json(value: &impl serde::Serialize) -> Self {
        // Serializing the gateway's own types cannot fail; an empty
        // object keeps the stream well-formed if it ever did.
        Self::data(serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned()))
    }
}

/// Writes a committed stream in a client's protocol: the engine's items
/// in, the protocol's frames out. The front end frames them (SSE, a JSON
/// array) and sends them; an encoder is pure.
pub trait Encoder: Send + 'static {
    /// The frames for one item (none for an item the protocol does not
    /// carry), from `model`, the model answering as the stream names it
    /// now. The last item is a `Done` or an `Error`.
    fn item(&mut self, item: understudy_types::StreamItem, model: &str, out: &mut Vec<Frame>);

    /// The frames of a refusal the policy surfaced before anything was
    /// sent, in the protocol's own form for one: `model` refused, in the
    /// provider's words `refusal` (empty when it gave none).
    fn refusal(&mut self, model: &str, refusal: &str, out: &mut Vec<Frame>);

    /// The stream is over before the engine's last item: what follows is
    /// not written (a relayed provider's own final event came first).
    fn finished(&self) -> bool {
        false
    }

    /// The final frame, held back until the front end has kept the answer
    /// beside it (the Responses API stores a response before its last
    /// event goes out, so that a client sending the next turn at once
    /// finds it). Taken once; none by default.
    fn held(&mut self) -> Option<(Frame, serde_json::Value)> {
        None
    }
}

/// The most text one stream may carry before it counts as endless garbage
/// (the transport counts a stream's text, a parser the arguments of its
/// tool calls).
pub const STREAM_TEXT_LIMIT: usize = 16 * 1024 * 1024;

/// Turns decoded SSE items into neutral stream events.
pub trait StreamParser: Send + 'static {
    /// Handles one item, pushing any events it yields. Pushing a
    /// `Finish` or an `Err` ends the stream.
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>);

    /// The connection ended cleanly; push the final event.
    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>);

    /// The model the stream named so far (the requested one until then).
    fn model(&self) -> &str;

    /// The provider's own id for the answer, once the stream named it
    /// (none where the protocol has none).
    fn response_id(&self) -> Option<&str> {
        None
    }

    /// What the provider says became of the fallback credit the request
    /// carried (Anthropic), once the stream said it.
    fn fallback_credit(&self) -> Option<understudy_types::credit::CreditStatus> {
        None
    }
}

/// A fresh tool-call id for a provider that sends none (Gemini) or a
/// compatible server that omits it: `call_` and 24 hex digits (96 random
/// bits).
pub fn mint_call_id() -> String {
    format!("call_{:024x}", fastrand::u128(..) >> 32)
}

/// A tool call's arguments as the JSON object the Anthropic and Gemini
/// protocols take: no arguments (or `null`) is `{}`; arguments that are not
/// a JSON object cannot be sent, and say which call.
pub fn arguments_object(
    call: &understudy_types::ToolCall,
) -> Result<serde_json::Value, understudy_types::Failure> {
    use understudy_types::{Failure, FailureKind};
    if call.arguments.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(serde_json::Value::Null) => Ok(serde_json::Value::Object(serde_json::Map::new())),
        Ok(_) => Err(Failure::new(
            FailureKind::BadRequest,
            format!(
                "the arguments of tool call `{}` are not a JSON object",
                call.id
            ),
        )),
        Err(e) => Err(Failure::new(
            FailureKind::BadRequest,
            format!(
                "the arguments of tool call `{}` are not valid JSON: {e}",
                call.id
            ),
        )),
    }
}

/// A provider's output-token limit per model (configured, else built in
/// for well-known models; see [`understudy_settings::limits::output_limit`]), kept by
/// each protocol so that a client's `max_tokens` meant for another model
/// never makes this one answer 400.
#[derive(Debug, Clone)]
pub struct OutputLimits(Option<Arc<ProviderSettings>>);

impl OutputLimits {
    pub fn of(settings: &ProviderSettings) -> Self {
        let mut settings = settings.clone();
        // Only the limits are read: the key stays with the adapter.
        settings.api_key = None;
        settings.headers.clear();
        Self(Some(Arc::new(settings)))
    }

    /// No limits known (a protocol that only parses recorded bytes).
    pub fn none() -> Self {
        Self(None)
    }

    /// `model`'s limit, when known.
    pub fn limit(&self, model: &str) -> Option<u32> {
        understudy_settings::limits::output_limit(self.0.as_ref()?, model)
    }

    /// `requested` clamped to `model`'s limit (a request with none keeps
    /// none: the provider's own default is its maximum).
    pub fn clamp(&self, model: &str, requested: Option<u32>) -> Option<u32> {
        // The model's limit is looked up only for a request that sets one
        // (most set none).
        let n = requested?;
        Some(self.limit(model).map_or(n, |limit| n.min(limit)))
    }
}

/// A client's end-user id as a provider that takes at most `max` characters
/// accepts it: as it is when it fits, else `u-` and a stable hash of it
/// (BLAKE3, hex), so one user keeps one id for the provider's abuse
/// monitoring and the id itself is not cut into something ambiguous.
pub fn fitted_user(user: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if user.chars().count() <= max {
        return std::borrow::Cow::Borrowed(user);
    }
    let hash = blake3::hash(user.as_bytes()).to_hex();
    let mut fitted = format!("u-{hash}");
    fitted.truncate(max);
    std::borrow::Cow::Owned(fitted)
}

/// A message's text, borrowed when it is one text part.
pub fn text_of(m: &understudy_types::Message) -> std::borrow::Cow<'_, str> {
    match m.content.as_slice() {
        [understudy_types::Part::Text { text }] => std::borrow::Cow::Borrowed(text),
        _ => std::borrow::Cow::Owned(m.text_content()),
    }
}

/// A stream event that is not the JSON its protocol promises.
pub fn malformed_event(e: &serde_json::Error) -> Failure {
    Failure::new(
        FailureKind::MalformedResponse,
        format!("a malformed stream event: {e}"),
    )
}
