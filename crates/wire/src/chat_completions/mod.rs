//! The OpenAI Chat Completions protocol, spoken by OpenAI, Groq and most
//! self-hosted servers (Ollama, vLLM, llama.cpp, OpenRouter), both
//! directions: the body the gateway sends a provider and the answer it
//! reads back, and the body a client sends the gateway and the answer it
//! gets.
//!
//! Refusal signals: `finish_reason:
//! "content_filter"`, a non-empty `message.refusal`, and a 400 whose error
//! code is a content-policy code (Azure's `content_filter`).
//!
//! Tools, images and structured output pass through in OpenAI's own shapes
//! (openai-python `types/chat/`): `tools`/`tool_choice`/`parallel_tool_calls`,
//! `response_format`, content parts (`text`, `image_url`), assistant
//! `tool_calls` and `tool` messages; answers carry `message.tool_calls` or
//! streamed `delta.tool_calls` fragments keyed by `index`. Every field the
//! neutral request leaves empty stays out of the body, so a plain request
//! is serialised exactly as before tools existed.
//!
//! Layout: to a provider, `request.rs` builds the request body,
//! `response.rs` reads a complete answer, `stream.rs` parses the event
//! stream, and `error.rs` classifies error bodies (the Responses protocol
//! reads its errors with it too); `native.rs` forwards a client's own body
//! to a target of this protocol and relays its plain answer as it came. From a client, `inbound.rs` reads the
//! request into the neutral one (`quick.rs` the common plain body in one
//! pass), `answer.rs` writes the answer and
//! `events.rs` the streamed chunks; `endpoint.rs` is the front end's HTTP
//! edge (its path, key, OpenAI's error shape and model list).

pub mod answer;
pub mod endpoint;
pub mod error;
pub mod events;
pub mod inbound;
pub mod native;
pub mod quick;
pub mod request;
pub mod response;
pub mod stream;

use understudy_types::FinishReason;

/// The finish reasons both directions name, one table: what a provider's
/// `finish_reason` means, and what the gateway answers for ours. Any other
/// reason travels as [`FinishReason::Other`] under its own name.
const FINISH_REASONS: [(&str, FinishReason); 3] = [
    ("stop", FinishReason::Stop),
    ("length", FinishReason::Length),
    ("tool_calls", FinishReason::ToolCalls),
];

/// The neutral finish reason for a provider's `finish_reason` (none is `stop`).
pub fn finish_reason(reason: Option<&str>) -> FinishReason {
    let Some(reason) = reason else {
        return FinishReason::Stop;
    };
    FINISH_REASONS
        .iter()
        .find(|(wire, _)| *wire == reason)
        .map_or_else(
            || FinishReason::Other(reason.to_owned()),
            |(_, r)| r.clone(),
        )
}

/// OpenAI's `finish_reason` for ours.
pub fn finish_reason_name(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Other(other) => other.as_str(),
        reason => FINISH_REASONS
            .iter()
            .find(|(_, r)| r == reason)
            .map_or("stop", |(wire, _)| wire),
    }
}
