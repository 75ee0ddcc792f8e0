//! A complete Messages answer read: a refusal's detail, `tool_use` blocks
//! as tool calls, the finish reason; with the wire types an answer
//! deserializes into (a content block and the usage are the stream's too).

use http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use understudy_types::credit::{CreditStatus, CreditToken};
use understudy_types::{Completion, Failure, FailureKind, ToolCall, Usage};

use super::error::{WireError, classify_error_object};
use super::finish_reason;

/// A provider's answer (its body read as [`WireResponse`], a 2xx `status`)
/// as a completion of `model`: a refusal, an error object, tool input that
/// is not an object or an answer with neither text nor calls is a failure.
pub fn completion(
    parsed: &WireResponse,
    model: &str,
    status: u16,
    headers: &HeaderMap,
) -> Result<Completion, Failure> {
    if let Some(error) = &parsed.error {
        return Err(classify_error_object(500, headers, error));
    }
    let blocks = parsed.content.as_deref().unwrap_or_default();
    let text: String = blocks
        .iter()
        .filter(|b| b.kind == "text")
        .filter_map(|b| b.text.as_deref())
        .collect();
    let stop = parsed.stop_reason.as_deref();
    if stop == Some("refusal") {
        return Err(Failure::new(
            FailureKind::ContentFilter,
            refusal_detail(parsed.stop_details.as_ref()),
        )
        .with_status(status)
        .with_credit(credit_token(parsed.stop_details.as_ref())));
    }
    let tool_calls = blocks
        .iter()
        .filter(|b| b.kind == "tool_use")
        .enumerate()
        .map(|(i, b)| tool_call_of(i, b))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|f| f.with_status(status))?;
    if text.trim().is_empty() && tool_calls.is_empty() {
        return Err(Failure::new(
            FailureKind::EmptyResponse,
            format!(
                "the answer has no text (stop_reason {})",
                stop.unwrap_or("null")
            ),
        )
        .with_status(status));
    }
    Ok(Completion {
        native: None,
        rate_limits: None,
        fallback_credit: parsed.usage.as_ref().and_then(WireUsage::credit_status),
        tool_calls,
        text,
        model: parsed.model.clone().unwrap_or_else(|| model.to_owned()),
        finish_reason: finish_reason(stop),
        usage: parsed.usage.as_ref().map(WireUsage::to_usage),
        response_id: parsed.id.clone().filter(|id| !id.is_empty()),
    })
}

/// A `tool_use` block of an answer as a tool call. Its `input` is always an
/// object; anything else is output the client cannot use.
fn tool_call_of(position: usize, block: &WireBlock) -> Result<ToolCall, Failure> {
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

/// A refusal's fallback credit (`stop_details.fallback_credit_token`,
/// `null` when the refusal carries none).
pub(super) fn credit_token(details: Option<&Value>) -> Option<CreditToken> {
    CreditToken::new(details?.get("fallback_credit_token")?.as_str()?)
}

/// A provider's answer.
#[derive(Debug, Deserialize)]
pub struct WireResponse {
    /// `msg_…` (Bedrock's `msg_bdrk_…`, Vertex's `msg_vrtx_…`).
    id: Option<String>,
    model: Option<String>,
    content: Option<Vec<WireBlock>>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

/// A content block of an answer (or a streamed `content_block_start`).
#[derive(Debug, Deserialize)]
pub(super) struct WireBlock {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) text: Option<String>,
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) input: Option<Value>,
}

/// A usage object (an answer's, `message_start`'s, or `message_delta`'s
/// cumulative one; anthropic-sdk-python `types/usage.py`,
/// `message_delta_usage.py`). `input_tokens` leaves out the tokens read
/// from and written to the cache; `output_tokens` includes the thinking
/// tokens that `output_tokens_details` breaks out.
#[derive(Debug, Deserialize)]
pub(super) struct WireUsage {
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    pub(super) cache_creation_input_tokens: Option<u64>,
    pub(super) cache_read_input_tokens: Option<u64>,
    pub(super) output_tokens_details: Option<WireOutputDetails>,
    /// What became of the fallback credit the request carried.
    pub(super) fallback_credit: Option<WireFallbackCredit>,
}

/// `usage.fallback_credit` (a beta): `status.type` is `redeemed` or
/// `not_applied`, the latter with a `reason`.
#[derive(Debug, Deserialize)]
pub(super) struct WireFallbackCredit {
    status: Option<WireCreditStatus>,
}

#[derive(Debug, Deserialize)]
struct WireCreditStatus {
    #[serde(rename = "type")]
    kind: String,
    reason: Option<String>,
}

/// `usage.output_tokens_details`.
#[derive(Debug, Deserialize)]
pub(super) struct WireOutputDetails {
    pub(super) thinking_tokens: Option<u64>,
}

impl WireUsage {
    pub(super) fn to_usage(&self) -> Usage {
        let cache_read = self.cache_read_input_tokens.unwrap_or(0);
        let cache_write = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0) + cache_write + cache_read,
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_input_tokens: cache_read,
            cache_write_input_tokens: cache_write,
            reasoning_output_tokens: self.thinking_tokens().unwrap_or(0),
        }
    }

    /// What became of the fallback credit the request carried, if it
    /// carried one.
    pub(super) fn credit_status(&self) -> Option<CreditStatus> {
        let status = self.fallback_credit.as_ref()?.status.as_ref()?;
        CreditStatus::parse(&status.kind, status.reason.as_deref())
    }

    /// The thinking tokens, where the usage breaks them out.
    pub(super) fn thinking_tokens(&self) -> Option<u64> {
        self.output_tokens_details.as_ref()?.thinking_tokens
    }
}
