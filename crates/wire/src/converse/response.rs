//! A complete Converse answer read: the text, the `toolUse` blocks as tool
//! calls, the stop reason (a guardrail's or filter's is a refusal), the
//! usage; with the wire types an answer (and the stream's events)
//! deserialize into. No type refuses unknown members: AWS adds members,
//! and its stream events carry a padding member `p`.

use serde::Deserialize;
use serde_json::Value;
use understudy_types::{Completion, Failure, FailureKind, ToolCall, Usage};

/// The most tool calls one answer may carry; more is garbage.
pub const MAX_TOOL_CALLS: usize = 1024;

/// An answer (its body read as [`WireResponse`], a 2xx `status`) as a
/// completion of `model`: a refusal, a malformed output, tool input that
/// is not an object or an answer with neither text nor calls is a failure.
pub fn completion(parsed: &WireResponse, model: &str, status: u16) -> Result<Completion, Failure> {
    let blocks = parsed
        .output
        .as_ref()
        .and_then(|o| o.message.as_ref())
        .and_then(|m| m.content.as_deref())
        .unwrap_or_default();
    let text: String = blocks.iter().filter_map(|b| b.text.as_deref()).collect();
    let stop = parsed.stop_reason.as_deref();
    let finish_reason = super::stop_reason(stop).map_err(|f| with_words(f, &text, status))?;
    let uses: Vec<&WireToolUse> = blocks.iter().filter_map(|b| b.tool_use.as_ref()).collect();
    if uses.len() > MAX_TOOL_CALLS {
        return Err(Failure::new(
            FailureKind::MalformedResponse,
            format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
        )
        .with_status(status));
    }
    let tool_calls = uses
        .iter()
        .enumerate()
        .map(|(i, u)| tool_call_of(i, u))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|f| f.with_status(status))?;
    if text.trim().is_empty() && tool_calls.is_empty() {
        return Err(Failure::new(
            FailureKind::EmptyResponse,
            format!(
                "the answer has no text (stopReason {})",
                stop.unwrap_or("null")
            ),
        )
        .with_status(status));
    }
    Ok(Completion {
        native: None,
        rate_limits: None,
        fallback_credit: None,
        tool_calls,
        text,
        model: model.to_owned(),
        finish_reason,
        usage: parsed.usage.as_ref().map(WireUsage::to_usage),
        // A Converse answer carries no id of its own (only the request's
        // `x-amzn-RequestId` header, which names the call, not the answer).
        response_id: None,
    })
}

/// A refusal's failure with what the model (or the guardrail, whose
/// configured message replaces the model's output) said, when it said
/// something.
pub(super) fn with_words(mut failure: Failure, text: &str, status: u16) -> Failure {
    let text = text.trim();
    if !text.is_empty() {
        failure.detail = format!("{}: {}", failure.detail, short(text));
    }
    failure.with_status(status)
}

/// A `toolUse` block as a tool call: its `input` is an object (or
/// nothing); anything else is output the client cannot use.
pub(super) fn tool_call_of(position: usize, block: &WireToolUse) -> Result<ToolCall, Failure> {
    let Some(name) = block.name.as_deref().filter(|n| !n.is_empty()) else {
        return Err(Failure::new(
            FailureKind::InvalidOutput,
            format!("toolUse block {position} names no tool"),
        ));
    };
    let arguments = match &block.input {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(input @ Value::Object(_)) => input.to_string(),
        Some(other) => {
            return Err(Failure::new(
                FailureKind::InvalidOutput,
                format!(
                    "the input of toolUse block {position} is not a JSON object: {}",
                    short(&other.to_string())
                ),
            ));
        }
    };
    Ok(ToolCall {
        id: call_id(block.tool_use_id.as_deref(), position),
        name: name.to_owned(),
        arguments,
    })
}

/// The client's id for the `toolUseId` Bedrock minted (the reverse of the
/// mapping ids go out through), or one of the gateway's when it sent none.
pub(super) fn call_id(tool_use_id: Option<&str>, position: usize) -> String {
    match tool_use_id.filter(|id| !id.is_empty()) {
        Some(id) => crate::ids::from_anthropic(id).into_owned(),
        None => format!("tooluse_understudy_{position}"),
    }
}

/// The start of `text`, for a failure's detail.
fn short(text: &str) -> String {
    match text.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A Converse answer (the members read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireResponse {
    output: Option<WireOutput>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct WireOutput {
    message: Option<WireMessage>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    content: Option<Vec<WireBlock>>,
}

/// A content block of an answer: one member set (text, a tool use, the
/// model's reasoning, which a whole answer does not pass on).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireBlock {
    text: Option<String>,
    tool_use: Option<WireToolUse>,
}

/// A `toolUse` block (in a stream's `contentBlockStart`, without `input`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireToolUse {
    pub tool_use_id: Option<String>,
    pub name: Option<String>,
    pub input: Option<Value>,
}

/// Token counts (AWS `TokenUsage`); Bedrock counts cached input apart, as
/// Anthropic does, and breaks no reasoning out of `outputTokens`.
#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

impl WireUsage {
    pub fn to_usage(&self) -> Usage {
        let cache_read = self.cache_read_input_tokens.unwrap_or(0);
        let cache_write = self.cache_write_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0) + cache_read + cache_write,
            output_tokens: self.output_tokens.unwrap_or(0),
            cache_read_input_tokens: cache_read,
            cache_write_input_tokens: cache_write,
            reasoning_output_tokens: 0,
        }
    }
}
