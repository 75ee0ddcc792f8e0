//! A complete Responses API answer read: the `response` object's output
//! messages and `function_call` items, and how it ended (`status`
//! `incomplete` → length or content filter, `failed` → its error), with
//! the one table of statuses and `incomplete_details` reasons that the
//! gateway's own answers are written with too. Errors are classified as
//! Chat Completions errors are (the same error body).

use http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use understudy_types::{Completion, Failure, FailureKind, FinishReason, ToolCall, Usage};

use super::answer::UsageOut;
use super::native::{reasoning_ids, tag_ids};
use crate::chat_completions::error::{WireError, classify_error, classify_error_body};

/// A response that ended whole.
pub const COMPLETED: &str = "completed";
/// A response cut short; `incomplete_details.reason` says why.
pub const INCOMPLETE: &str = "incomplete";
/// A response that failed; its `error` says why.
pub const FAILED: &str = "failed";
/// The output-token limit cut the answer short.
pub const MAX_OUTPUT_TOKENS: &str = "max_output_tokens";
/// A content filter cut the answer short.
pub const CONTENT_FILTER: &str = "content_filter";

/// A `response` object as a provider sends it.
#[derive(Deserialize)]
pub(crate) struct WireResponse {
    /// `resp_…`.
    pub id: Option<String>,
    pub status: Option<String>,
    pub model: Option<String>,
    #[serde(default)]
    pub output: Vec<Value>,
    pub usage: Option<UsageOut>,
    pub error: Option<Value>,
    pub incomplete_details: Option<Value>,
}

/// Classifies a complete `response` object; `native` holds it with its
/// reasoning ids tagged (the adapter keeps it only for native requests).
pub fn parse_response(
    received: (u16, &HeaderMap, &[u8]),
    model: &str,
    tag: &str,
) -> Result<Completion, Failure> {
    let (status, _, body) = received;
    let status = &status;
    let parsed: WireResponse =
        crate::classify::answer_body(received, "a Responses API response", classify_error)?;
    let finish = end_of(
        parsed.status.as_deref(),
        parsed.error.as_ref(),
        parsed.incomplete_details.as_ref(),
    )
    .map_err(|f| f.with_status(*status))?;
    let (text, tool_calls) = output_of(&parsed.output).map_err(|f| f.with_status(*status))?;
    if text.trim().is_empty() && tool_calls.is_empty() {
        return Err(Failure::new(
            FailureKind::EmptyResponse,
            "the response has no output text or function call",
        )
        .with_status(*status));
    }
    let ids = reasoning_ids(&parsed.output);
    let native = std::str::from_utf8(body)
        .ok()
        .and_then(|b| tag_ids(b, &ids, tag));
    let finish_reason = match finish {
        FinishReason::Stop if !tool_calls.is_empty() => FinishReason::ToolCalls,
        other => other,
    };
    Ok(Completion {
        text,
        tool_calls,
        model: parsed.model.unwrap_or_else(|| model.to_owned()),
        finish_reason,
        usage: parsed.usage.map(Usage::from),
        response_id: parsed.id.filter(|id| !id.is_empty()),
        native,
        rate_limits: None,
        fallback_credit: None,
    })
}

/// The output text and function calls of `output` items; a refusal is a
/// content-filter failure.
fn output_of(output: &[Value]) -> Result<(String, Vec<ToolCall>), Failure> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in output {
        let str_of = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
        match str_of("type") {
            "message" => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let field = |k: &str| part.get(k).and_then(Value::as_str).unwrap_or_default();
                    match field("type") {
                        "output_text" => text.push_str(field("text")),
                        "refusal" => {
                            return Err(Failure::new(
                                FailureKind::ContentFilter,
                                format!("refusal: {}", field("refusal")),
                            ));
                        }
                        _ => {}
                    }
                }
            }
            "function_call" => calls.push(ToolCall {
                id: str_of("call_id").to_owned(),
                name: str_of("name").to_owned(),
                arguments: str_of("arguments").to_owned(),
            }),
            _ => {}
        }
    }
    Ok((text, calls))
}

/// `status` and `incomplete_details` for how an answer ended, as the
/// gateway writes them: the inverse of [`end_of`] (a content filter cut is
/// a failure there, `content_filter` here).
pub fn status(reason: &FinishReason) -> (&'static str, Option<Value>) {
    match reason {
        FinishReason::Length => (INCOMPLETE, Some(incomplete(MAX_OUTPUT_TOKENS))),
        FinishReason::Other(r) if r == CONTENT_FILTER => {
            (INCOMPLETE, Some(incomplete(CONTENT_FILTER)))
        }
        _ => (COMPLETED, None),
    }
}

/// `incomplete_details` for `reason`.
pub fn incomplete(reason: &str) -> Value {
    json!({ "reason": reason })
}

/// How a response with `status` ended: its finish reason, or the failure
/// its error (or content-filter cut) means.
pub fn end_of(
    status: Option<&str>,
    error: Option<&Value>,
    incomplete: Option<&Value>,
) -> Result<FinishReason, Failure> {
    match status {
        Some(FAILED) => Err(error_failure(error.unwrap_or(&Value::Null))),
        Some(INCOMPLETE) => {
            match incomplete
                .and_then(|d| d.get("reason"))
                .and_then(Value::as_str)
            {
                Some(CONTENT_FILTER) => Err(Failure::new(
                    FailureKind::ContentFilter,
                    "the response is incomplete: content_filter",
                )),
                Some(MAX_OUTPUT_TOKENS) | None => Ok(FinishReason::Length),
                Some(other) => Ok(FinishReason::Other(other.to_owned())),
            }
        }
        _ => Ok(FinishReason::Stop),
    }
}

/// An `error` object (of `response.failed`, or an `error` event) classified
/// as the status its code implies.
pub fn error_failure(error: &Value) -> Failure {
    let field = |k: &str| error.get(k).and_then(Value::as_str).map(str::to_owned);
    let code = field("code").unwrap_or_default();
    let kind = field("type");
    let status = if code.contains("rate_limit") {
        429
    } else if code.starts_with("invalid") || kind.as_deref() == Some("invalid_request_error") {
        400
    } else {
        500
    };
    let wire = WireError::Object {
        message: field("message"),
        code: (!code.is_empty()).then(|| json!(code)),
        kind,
        innererror: None,
    };
    let mut f = classify_error_body(status, &HeaderMap::new(), &wire);
    f.status = None;
    f
}
