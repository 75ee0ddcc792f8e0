//! A complete Messages answer read: a refusal's detail, `tool_use` blocks
//! as tool calls, the finish reason; with the wire types an answer
//! deserializes into (a content block and the usage are the stream's too).

use serde::Deserialize;
use serde_json::Value;
use understudy_core::{Failure, FailureKind, FinishReason, ToolCall, Usage};

use super::error::WireError;

/// A `tool_use` block of an answer as a tool call. Its `input` is always an
/// object; anything else is output the client cannot use.
pub(super) fn tool_call_of(position: usize, block: &WireBlock) -> Result<ToolCall, Failure> {
    let arguments = match &block.input {
        None => "{}".to_owned(),
        Some(input @ Value::Object(_)) => input.to_string(),
        Some(other) => {
            return Err(Failure::new(
                FailureKind::InvalidOutput,
                format!(
                    "the input of tool_use block {position} is not a JSON object: {}",
                    short(&other.to_string())
                ),
            ));
        }
    };
    Ok(ToolCall {
        id: block.id.as_deref().map_or_else(
            || fallback_id(position as u32),
            |id| crate::ids::from_anthropic(id).into_owned(),
        ),
        name: block.name.clone().unwrap_or_default(),
        arguments,
    })
}

/// An id for a `tool_use` block that came without one (the API always sends
/// one): deterministic, and valid as an Anthropic id.
pub(super) fn fallback_id(index: u32) -> String {
    format!("toolu_understudy_{index}")
}

/// The start of `text`, for a failure's detail.
fn short(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

pub(super) fn refusal_detail(details: Option<&Value>) -> String {
    let category = details
        .and_then(|d| d.get("category"))
        .and_then(Value::as_str);
    let explanation = details
        .and_then(|d| d.get("explanation"))
        .and_then(Value::as_str);
    match (category, explanation) {
        (Some(c), Some(e)) => format!("stop_reason refusal ({c}): {e}"),
        (Some(c), None) => format!("stop_reason refusal ({c})"),
        _ => "stop_reason refusal".to_owned(),
    }
}

pub(super) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

#[derive(Deserialize)]
pub(super) struct WireResponse {
    pub(super) model: Option<String>,
    pub(super) content: Option<Vec<WireBlock>>,
    pub(super) stop_reason: Option<String>,
    pub(super) stop_details: Option<Value>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<WireError>,
}

/// A content block of an answer (or a streamed `content_block_start`).
#[derive(Deserialize)]
pub(super) struct WireBlock {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) text: Option<String>,
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) input: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    pub(super) fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0)
                + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
        }
    }
}
