//! Anthropic's Messages API, both directions: the body a provider gets and
//! the answer and event stream it sends back, and the body a client sends
//! to `POST /v1/messages` and the answer and events it gets.
//!
//! Refusals: `stop_reason: "refusal"` on a 200, with or
//! without partial text and `stop_details`; and "Output blocked by content
//! filtering policy", which arrives as a 400 `invalid_request_error` (or as
//! an `error` event mid-stream) but is a content filter, not a bad request.
//!
//! Tools, images and JSON output, as the API takes them
//! (anthropic-sdk-python `types/`: `tool_param`, `tool_choice_*_param`,
//! `tool_use_block_param`, `tool_result_block_param`, `*_image_source_param`,
//! `metadata_param`, `output_config_param`):
//! - `tools` become `{name, description, input_schema}`; `tool_choice`
//!   becomes `auto` / `none` / `any` / `{"type":"tool","name"}`, with
//!   `disable_parallel_tool_use` for `parallel_tool_calls: false`.
//! - Assistant tool calls become `tool_use` blocks (`input` is the parsed
//!   arguments object); tool messages become `tool_result` blocks in a user
//!   turn. Consecutive turns of one role are merged, and in a user turn the
//!   tool results come first, as the API requires.
//! - Tool-call ids are sent in the API's alphabet (`[a-zA-Z0-9_-]`),
//!   mapped injectively ([`crate::ids::anthropic`]), the same way in
//!   `tool_use.id` and `tool_result.tool_use_id`: a history whose ids
//!   another provider minted is accepted, and the ids the client sees never
//!   change.
//! - A history with tool calls but no `tools` declares the called tools with
//!   an empty schema and `tool_choice: none`: the API refuses tool blocks
//!   without tool definitions.
//! - `json_schema` output uses structured outputs (`output_config.format`),
//!   with the schema reduced to the subset the API accepts (as the SDK's
//!   `transform_schema` does); `json_object`, and a schema that cannot be
//!   reduced, get an instruction in the system prompt instead.
//! - Answers: `tool_use` blocks become tool calls (arguments: the compact
//!   JSON of `input`), `stop_reason: "tool_use"` is
//!   [`FinishReason::ToolCalls`]; streamed, each `tool_use` block is one
//!   tool call (numbered 0, 1, … in order) and its `input_json_delta`
//!   fragments are its arguments. `thinking` blocks are left out.
//!
//! A client's own body goes to an Anthropic target as sent, made valid for
//! it by [`native`]; [`translate`] is for targets of other protocols (see
//! there for what they lose, and what only Anthropic can take, noted in
//! `native_only` rather than refused). What no protocol could take (no
//! `model`, no `max_tokens`, a malformed block) is an
//! [`Invalid`](crate::Invalid) that names the field.
//!
//! # Layout
//! To a provider: [`request`] builds the Messages body (with [`schema`],
//! which reduces a JSON Schema for structured outputs), [`response`] reads
//! an answer, [`stream`] parses the event stream, [`native`] fits a
//! client's own body to its target.
//!
//! From a client: [`client`] holds the body's shapes as the client sends
//! them (and the input-token estimate), [`translate`] puts it onto the
//! neutral `ChatRequest`, [`answer`] writes the `message` back, [`events`]
//! a committed stream as Anthropic's server-sent events.
//!
//! Both: [`error`] (error objects read and written, the error types'
//! statuses) and, here, the stop reasons; [`endpoint`], the HTTP edge
//! (the front end's paths, keys, error shape and model list, and the
//! `anthropic-*` headers and `beta` query a native body goes on with);
//! [`gated`], the server tools and betas the operator must allow;
//! [`credit`], a refusal's fallback credit sent back on the retry.

pub mod answer;
pub mod client;
pub mod credit;
pub mod endpoint;
pub mod error;
pub mod events;
pub mod gated;
pub mod native;
pub mod request;
pub mod response;
pub mod schema;
pub mod signed_by;
pub mod stream;
pub mod translate;

#[cfg(test)]
mod tests;

use understudy_types::FinishReason;

/// Sent when the request sets no `max_tokens` and the model's output limit
/// is unknown (neither configured nor built in): the Messages API requires
/// one, and every current Claude model allows at least this many.
pub const DEFAULT_MAX_TOKENS: u32 = understudy_settings::windows::MESSAGES_DEFAULT_OUTPUT;

/// The `max_tokens` a provider gets: a client's limit meant for a larger
/// model is clamped to `limit`, the model's; a request with none gets the
/// model's own (the API requires one).
pub fn max_tokens(requested: Option<u32>, limit: Option<u32>) -> u32 {
    match (requested, limit) {
        (Some(n), Some(limit)) => n.min(limit),
        (Some(n), None) => n,
        (None, Some(limit)) => limit,
        (None, None) => DEFAULT_MAX_TOKENS,
    }
}

/// Anthropic's stop reasons, read and written: the neutral reason each is
/// read as (`None`: [`FinishReason::Other`]), and whether a provider's
/// `Other` of that name is written back as itself. The first row of each
/// neutral reason is the word written for it; any other is `end_turn`.
const STOP_REASONS: &[(&str, Option<FinishReason>, bool)] = &[
    ("end_turn", Some(FinishReason::Stop), false),
    ("max_tokens", Some(FinishReason::Length), false),
    ("tool_use", Some(FinishReason::ToolCalls), false),
    ("stop_sequence", Some(FinishReason::Stop), true),
    (
        "model_context_window_exceeded",
        Some(FinishReason::Length),
        true,
    ),
    ("pause_turn", None, true),
    ("refusal", None, true),
];

/// The neutral finish reason for a provider's `stop_reason` (none is a
/// natural end).
pub fn finish_reason(reason: Option<&str>) -> FinishReason {
    let Some(reason) = reason else {
        return FinishReason::Stop;
    };
    STOP_REASONS
        .iter()
        .find(|(word, ..)| *word == reason)
        .and_then(|(_, neutral, _)| neutral.clone())
        .unwrap_or_else(|| FinishReason::Other(reason.to_owned()))
}

/// Anthropic's `stop_reason` for ours. A stop sequence the provider named
/// as such stays one; reasons Anthropic has no word for are `end_turn`.
pub fn stop_reason(reason: &FinishReason) -> &'static str {
    let row = match reason {
        FinishReason::Other(other) => STOP_REASONS
            .iter()
            .find(|(word, _, kept)| *kept && word == other),
        neutral => STOP_REASONS
            .iter()
            .find(|(_, read, _)| read.as_ref() == Some(neutral)),
    };
    row.map_or("end_turn", |(word, ..)| word)
}
