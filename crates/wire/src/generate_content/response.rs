//! A Gemini answer read: refusal signals (a blocked prompt, a candidate
//! stopped by a filter, an answer with nothing usable), the text, the
//! function calls, the finish reason and the usage; a whole answer as the
//! neutral completion ([`completion`]); with the wire types a response (or
//! one streamed chunk) deserializes into.

use serde::Deserialize;
use serde_json::Value;
use understudy_types::{Completion, Failure, FailureKind, FinishReason, ToolCall, Usage};

use super::error::WireError;
use crate::signature::Target;

/// Finish reasons that mean a policy stopped the answer.
const POLICY_FINISH_REASONS: [&str; 8] = [
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
];

/// Finish reasons that mean the model tried to call a tool and got it
/// wrong (genai-py `FinishReason`): the answer is invalid output, not a
/// refusal.
const BROKEN_CALL_FINISH_REASONS: [&str; 3] = [
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
];

/// The most tool calls one answer may carry; more is garbage.
pub const MAX_TOOL_CALLS: u32 = 1024;

/// A whole answer as the neutral completion: an error object inside a 200
/// classified, a refusal or an answer with nothing usable a failure, each
/// call with a fresh id carrying its thought signature for `target` (the
/// provider and model that made it). `status` and `headers` are the
/// answer's; `model` the requested one, for an answer that names none.
pub fn completion(
    parsed: &WireResponse,
    (status, headers): (u16, &http::HeaderMap),
    model: &str,
    target: &Target,
) -> Result<Completion, Failure> {
    if let Some(error) = &parsed.error {
        return Err(super::error::classify_error_object(None, headers, error));
    }
    let chunk = assess(parsed).map_err(|f| f.with_status(status))?;
    if chunk.text.trim().is_empty() && chunk.calls.is_empty() {
        return Err(nothing_usable(chunk.finish_reason.as_deref()).with_status(status));
    }
    if chunk.calls.len() > MAX_TOOL_CALLS as usize {
        return Err(too_many_calls().with_status(status));
    }
    let tool_calls: Vec<ToolCall> = chunk
        .calls
        .into_iter()
        .map(|(name, arguments, signature)| ToolCall {
            id: target.sign(crate::mint_call_id(), signature.as_deref()),
            name,
            arguments,
        })
        .collect();
    Ok(Completion {
        native: None,
        rate_limits: None,
        fallback_credit: None,
        finish_reason: finish_reason(chunk.finish_reason.as_deref(), !tool_calls.is_empty()),
        tool_calls,
        text: chunk.text,
        model: parsed
            .model_version
            .clone()
            .unwrap_or_else(|| model.to_owned()),
        usage: usage(parsed),
        response_id: parsed.response_id.clone().filter(|id| !id.is_empty()),
    })
}

/// What one response (or one streamed chunk) says.
#[derive(Debug)]
pub struct Chunk {
    pub text: String,
    /// `(name, arguments as compact JSON text, thought signature)` of each
    /// function call.
    pub calls: Vec<(String, String, Option<String>)>,
    pub finish_reason: Option<String>,
}

/// Reads a response: refusal signals become a content-filter failure; the
/// text, the function calls and the finish reason otherwise.
pub fn assess(response: &WireResponse) -> Result<Chunk, Failure> {
    if let Some(feedback) = &response.prompt_feedback {
        if let Some(reason) = &feedback.block_reason {
            let why = feedback
                .block_reason_message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            return Err(Failure::new(
                FailureKind::ContentFilter,
                format!("prompt blocked (blockReason {reason}){why}"),
            ));
        }
    }
    let Some(candidate) = response.candidates.as_ref().and_then(|c| c.first()) else {
        return Ok(Chunk {
            text: String::new(),
            calls: Vec::new(),
            finish_reason: None,
        });
    };
    let finish = candidate.finish_reason.clone();
    if let Some(reason) = finish
        .as_deref()
        .filter(|r| POLICY_FINISH_REASONS.contains(r))
    {
        let why = candidate
            .finish_message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        return Err(Failure::new(
            FailureKind::ContentFilter,
            format!("answer stopped by a filter (finishReason {reason}){why}"),
        ));
    }
    let parts = candidate
        .content
        .as_ref()
        .and_then(|c| c.parts.as_deref())
        .unwrap_or_default();
    let mut text = String::new();
    let mut calls = Vec::new();
    for p in parts.iter().filter(|p| p.thought != Some(true)) {
        if let Some(t) = &p.text {
            text.push_str(t);
        }
        if let Some(call) = &p.function_call {
            // A call without a name cannot be made (it only appears in
            // fragments of a protocol this adapter does not ask for).
            let Some(name) = call.name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            let arguments = match &call.args {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(args) => args.to_string(),
            };
            calls.push((name.to_owned(), arguments, p.thought_signature.clone()));
        }
    }
    Ok(Chunk {
        text,
        calls,
        finish_reason: finish,
    })
}

/// An answer with neither text nor a call: a refusal by this project's
/// rule, or invalid output when the model fumbled a tool call.
pub fn nothing_usable(reason: Option<&str>) -> Failure {
    match reason.filter(|r| BROKEN_CALL_FINISH_REASONS.contains(r)) {
        Some(reason) => Failure::new(
            FailureKind::InvalidOutput,
            format!("the model produced an invalid tool call (finishReason {reason})"),
        ),
        None => Failure::new(
            FailureKind::ContentFilter,
            format!(
                "empty response: no usable text (finishReason {})",
                reason.unwrap_or("absent")
            ),
        ),
    }
}

pub fn too_many_calls() -> Failure {
    Failure::new(
        FailureKind::MalformedResponse,
        format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
    )
}

/// A response's `usageMetadata` as usage: `promptTokenCount` includes
/// the cached content's tokens, and `candidatesTokenCount` leaves out the
/// thoughts', which are output tokens all the same.
pub fn usage(response: &WireResponse) -> Option<Usage> {
    let u = response.usage_metadata.as_ref()?;
    let thoughts = u.thoughts_token_count.unwrap_or(0);
    Some(Usage {
        input_tokens: u.prompt_token_count.unwrap_or(0),
        output_tokens: u.candidates_token_count.unwrap_or(0) + thoughts,
        cache_read_input_tokens: u.cached_content_token_count.unwrap_or(0),
        cache_write_input_tokens: 0,
        reasoning_output_tokens: thoughts,
    })
}

/// The neutral finish reason. Gemini says `STOP` for an answer made of
/// function calls too.
pub fn finish_reason(reason: Option<&str>, called: bool) -> FinishReason {
    match reason {
        Some("STOP") | None if called => FinishReason::ToolCalls,
        Some("STOP") | None => FinishReason::Stop,
        Some("MAX_TOKENS") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_lowercase()),
    }
}

/// Gemini's name for a neutral finish reason, for the Gemini front end: the
/// other direction of [`finish_reason`]. A call answer is `STOP`, as Gemini
/// says; a content filter or refusal anywhere is `SAFETY`; another
/// provider's reason Gemini has no name for is `OTHER`.
pub fn finish_reason_name(reason: &FinishReason) -> &'static str {
    const GEMINI: [&str; 12] = [
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "IMAGE_SAFETY",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
    ];
    match reason {
        FinishReason::Stop | FinishReason::ToolCalls => "STOP",
        FinishReason::Length => "MAX_TOKENS",
        FinishReason::Other(other) => match other.as_str() {
            "content_filter" | "refusal" => "SAFETY",
            other => GEMINI
                .iter()
                .find(|name| name.eq_ignore_ascii_case(other))
                .copied()
                .unwrap_or("OTHER"),
        },
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireResponse {
    pub candidates: Option<Vec<WireCandidate>>,
    prompt_feedback: Option<WirePromptFeedback>,
    usage_metadata: Option<WireUsage>,
    pub model_version: Option<String>,
    /// The answer's id (every chunk of a stream repeats it).
    pub response_id: Option<String>,
    pub error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireCandidate {
    pub content: Option<WireCandidateContent>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WireCandidateContent {
    pub parts: Option<Vec<WireResponsePart>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireResponsePart {
    pub text: Option<String>,
    pub thought: Option<bool>,
    function_call: Option<WireResponseCall>,
    /// On a part with a `functionCall`, carried in the call's id; on a text
    /// part (an answer without calls) not carried: Google says those may be
    /// left out.
    thought_signature: Option<String>,
}

/// A call as Gemini answers it (its optional `id` is not used: the client
/// gets a fresh id of the gateway's).
#[derive(Debug, Deserialize)]
struct WireResponseCall {
    name: Option<String>,
    args: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePromptFeedback {
    block_reason: Option<String>,
    block_reason_message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
}
