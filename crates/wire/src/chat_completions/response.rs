//! A complete (non-streamed) Chat Completions answer read: refusals, the
//! text, the tool calls, the finish reason and the usage; with the wire
//! types an answer deserializes into (the tool-call, arguments and usage
//! shapes are the stream's too).

use http::HeaderMap;
use serde::{Deserialize, Serialize};
use understudy_types::{Completion, Failure, FailureKind, FinishReason, ToolCall, Usage};

use super::error::{WireError, classify_error, classify_error_body};

/// Classifies a complete (non-streamed) response: its status, headers and
/// body.
pub fn parse_response(
    received: (u16, &HeaderMap, &[u8]),
    requested_model: &str,
) -> Result<Completion, Failure> {
    let (status, headers, _) = received;
    let status = &status;
    let parsed: WireResponse =
        crate::classify::answer_body(received, "a chat completion", classify_error)?;
    if let Some(error) = parsed.error {
        // Some proxies answer 200 with an error object.
        return Err(classify_error_body(502, headers, &error));
    }
    let Some(choice) = parsed.choices.into_iter().next() else {
        return Err(
            Failure::new(FailureKind::EmptyResponse, "the response has no choices")
                .with_status(*status),
        );
    };
    let finish = choice.finish_reason.as_deref();
    let message = choice.message.unwrap_or_default();
    if finish == Some("content_filter") {
        return Err(Failure::new(
            FailureKind::ContentFilter,
            "finish_reason is content_filter",
        )
        .with_status(*status));
    }
    if let Some(refusal) = message.refusal.filter(|r| !r.trim().is_empty()) {
        return Err(Failure::new(
            FailureKind::ContentFilter,
            format!("the model refused: {refusal}"),
        )
        .with_status(*status));
    }
    let tool_calls = tool_calls_of(message.tool_calls);
    let text = message.content.unwrap_or_default();
    if text.trim().is_empty() && tool_calls.is_empty() {
        return Err(Failure::new(
            FailureKind::EmptyResponse,
            format!(
                "the answer has no text (finish_reason {})",
                finish.unwrap_or("null")
            ),
        )
        .with_status(*status));
    }
    Ok(Completion {
        native: None,
        rate_limits: None,
        fallback_credit: None,
        finish_reason: finish_reason_with(finish, !tool_calls.is_empty()),
        tool_calls,
        text,
        model: parsed
            .model
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| requested_model.to_owned()),
        usage: parsed.usage.map(Usage::from),
        response_id: parsed.id.filter(|id| !id.is_empty()),
    })
}

/// An answer's `message.tool_calls` as tool calls: a call without a name
/// is left out, one without an id gets a minted one.
fn tool_calls_of(calls: Option<Vec<WireToolCall>>) -> Vec<ToolCall> {
    calls
        .unwrap_or_default()
        .into_iter()
        .filter_map(|call| {
            let function = call.function?;
            let name = function.name.filter(|n| !n.is_empty())?;
            Some(ToolCall {
                id: call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(crate::mint_call_id),
                name,
                arguments: function
                    .arguments
                    .map(WireArguments::into_text)
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The finish reason of an answer that `called` tools or not. An answer of
/// tool calls can end with `"stop"`: OpenAI's own with a named
/// `tool_choice` (vllm-project/vllm#25054), and compatible servers' (older
/// Ollama, ollama/ollama#5995; openvinotoolkit/model_server#3927). It is
/// reported as `tool_calls` whoever served it, the signal agent loops
/// branch on.
pub fn finish_reason_with(reason: Option<&str>, called: bool) -> FinishReason {
    match super::finish_reason(reason) {
        FinishReason::Stop if called => FinishReason::ToolCalls,
        other => other,
    }
}

#[derive(Deserialize)]
struct WireResponse {
    /// `chatcmpl-…` at OpenAI; compatible servers mint their own or none.
    id: Option<String>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: Option<WireAnswer>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireAnswer {
    content: Option<String>,
    refusal: Option<String>,
    /// Absent, `null` or a list (openai-python `chat_completion_message.py`).
    tool_calls: Option<Vec<WireToolCall>>,
}

/// A tool call, whole (`message.tool_calls[]`) or a fragment of one
/// (`delta.tool_calls[]`, where `index` says which call it continues and
/// only the first fragment carries `id`, `type` and `function.name`;
/// openai-python `chat_completion_chunk.py` `ChoiceDeltaToolCall`).
#[derive(Deserialize)]
pub(crate) struct WireToolCall {
    pub index: Option<u32>,
    pub id: Option<String>,
    pub function: Option<WireFunctionCall>,
}

#[derive(Deserialize)]
pub(crate) struct WireFunctionCall {
    pub name: Option<String>,
    pub arguments: Option<WireArguments>,
}

/// OpenAI sends the arguments as JSON text; a few compatible servers send
/// the object itself, which is taken as its JSON text.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum WireArguments {
    Text(String),
    Json(serde_json::Value),
}

impl WireArguments {
    pub(crate) fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Json(value) => value.to_string(),
        }
    }
}

/// OpenAI's usage object, read from a provider and written to a client
/// (openai-python `types/completion_usage.py`). `prompt_tokens` includes
/// the cached tokens and `completion_tokens` the reasoning tokens that the
/// details break out.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    /// Read from a provider only: a client's answer keeps the shape it
    /// had before the details were read.
    #[serde(default, skip_serializing)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default, skip_serializing)]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// `usage.prompt_tokens_details` (its `audio_tokens` not read). Compatible
/// servers send `null` members, so each one may be absent or null.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// `usage.completion_tokens_details` (its audio and prediction counts not
/// read).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct CompletionTokensDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl From<Usage> for WireUsage {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            total_tokens: u.input_tokens + u.output_tokens,
            prompt_tokens_details: None,
            completion_tokens_details: None,
        }
    }
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Self {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cache_read_input_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            cache_write_input_tokens: 0,
            reasoning_output_tokens: u
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::time::Duration;

    type Bytes = Vec<u8>;

    /// The recorded answers live with the providers' tests, which replay them too.
    fn fixture(name: &str) -> Bytes {
        let path = format!(
            "{}/../providers/tests/data/openai/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    struct Received {
        status: u16,
        headers: HeaderMap,
        body: Bytes,
    }

    fn parse_response(received: &Received, model: &str) -> Result<Completion, Failure> {
        super::parse_response((received.status, &received.headers, &received.body), model)
    }

    fn check(
        status: u16,
        headers: &[(&'static str, &str)],
        body: Bytes,
        want: Result<&str, FailureKind>,
    ) {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        let got = parse_response(
            &Received {
                status,
                headers: h,
                body,
            },
            "asked-model",
        );
        match (got, want) {
            (Ok(c), Ok(text)) => assert_eq!(c.text, text),
            (Err(f), Err(kind)) => assert_eq!(f.kind, kind, "{f}"),
            (got, want) => panic!("got {got:?}, wanted {want:?}"),
        }
    }

    #[test]
    fn success_and_usage() {
        let received = Received {
            status: 200,
            headers: HeaderMap::new(),
            body: fixture("text.json"),
        };
        let c = parse_response(&received, "asked").unwrap();
        assert_eq!(c.text, "Hello! How can I help you today?");
        assert_eq!(c.model, "gpt-4o-mini-2024-07-18");
        assert_eq!(c.response_id.as_deref(), Some("chatcmpl-ABC123"));
        assert_eq!(
            c.usage,
            Some(Usage {
                input_tokens: 19,
                output_tokens: 10,
                ..Usage::default()
            })
        );
        assert_eq!(c.finish_reason, FinishReason::Stop);
        check(
            200,
            &[],
            fixture("groq_text.json"),
            Ok("Fast inference is important because it lowers latency."),
        );
    }

    #[test]
    fn refusals() {
        check(
            200,
            &[],
            fixture("refusal_message.json"),
            Err(FailureKind::ContentFilter),
        );
        check(
            200,
            &[],
            fixture("finish_content_filter.json"),
            Err(FailureKind::ContentFilter),
        );
        check(
            400,
            &[],
            fixture("azure_content_filter_400.json"),
            Err(FailureKind::ContentFilter),
        );
    }

    #[test]
    fn errors() {
        check(
            401,
            &[],
            fixture("invalid_api_key_401.json"),
            Err(FailureKind::Auth),
        );
        check(
            429,
            &[("retry-after", "2")],
            fixture("rate_limit_429.json"),
            Err(FailureKind::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
            }),
        );
        check(
            429,
            &[],
            fixture("rate_limit_429.json"),
            Err(FailureKind::RateLimited {
                retry_after: Some(Duration::from_millis(3890)),
            }),
        );
        check(
            429,
            &[],
            fixture("insufficient_quota_429.json"),
            Err(FailureKind::QuotaExceeded),
        );
        check(
            400,
            &[],
            fixture("context_length_400.json"),
            Err(FailureKind::ContextLength),
        );
        check(
            413,
            &[],
            fixture("groq_request_too_large_413.json"),
            Err(FailureKind::RateLimited {
                retry_after: Some(Duration::MAX),
            }),
        );
        check(
            503,
            &[],
            fixture("groq_over_capacity_503.json"),
            Err(FailureKind::Unavailable { retry_after: None }),
        );
        check(
            500,
            &[],
            fixture("server_error_500.json"),
            Err(FailureKind::Unavailable { retry_after: None }),
        );
        // An overload that says when it is back keeps the hint.
        check(
            503,
            &[("retry-after", "3")],
            fixture("groq_over_capacity_503.json"),
            Err(FailureKind::Unavailable {
                retry_after: Some(Duration::from_secs(3)),
            }),
        );
        check(
            502,
            &[("retry-after-ms", "1500")],
            Bytes::from(b"<html>Bad Gateway</html>"),
            Err(FailureKind::Unavailable {
                retry_after: Some(Duration::from_millis(1500)),
            }),
        );
        check(498, &[], Bytes::from(b"{\"error\":{\"message\":\"flex tier capacity exceeded\",\"type\":\"capacity_exceeded\"}}"), Err(FailureKind::Unavailable { retry_after: None }));
        // The model's malformed call: its output, not the client's request.
        check(
            400,
            &[],
            fixture("groq_tool_use_failed_400.json"),
            Err(FailureKind::InvalidOutput),
        );
        check(
            502,
            &[],
            Bytes::from(b"<html>Bad Gateway</html>"),
            Err(FailureKind::Unavailable { retry_after: None }),
        );
        check(
            400,
            &[],
            Bytes::from(b"{\"error\":\"model not found\"}"),
            Err(FailureKind::BadRequest),
        );
    }

    #[test]
    fn garbage() {
        check(
            200,
            &[],
            Bytes::from(b"not json at all"),
            Err(FailureKind::MalformedResponse),
        );
        check(
            200,
            &[],
            Bytes::from(b"{\"choices\": [{\"message\": {\"content\": \"cut"),
            Err(FailureKind::MalformedResponse),
        );
        check(
            200,
            &[],
            Bytes::from(b"{\"choices\": []}"),
            Err(FailureKind::EmptyResponse),
        );
        check(
            200,
            &[],
            Bytes::from(
                b"{\"choices\": [{\"message\": {\"content\": \"\"}, \"finish_reason\": \"stop\"}]}",
            ),
            Err(FailureKind::EmptyResponse),
        );
        check(
            200,
            &[],
            Bytes::from(b"{\"choices\": \"x\"}"),
            Err(FailureKind::MalformedResponse),
        );
    }
}
