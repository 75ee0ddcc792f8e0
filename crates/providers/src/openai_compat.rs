//! The OpenAI Chat Completions protocol, spoken by OpenAI, Groq and most
//! self-hosted servers (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! Refusal signals (wire-formats §1.4, §1.8, §2.4): `finish_reason:
//! "content_filter"`, a non-empty `message.refusal`, and a 400 whose error
//! code is a content-policy code (Azure's `content_filter`).

use std::collections::VecDeque;
use std::time::SystemTime;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, ProviderSettings, Role,
    StreamEvent, Usage,
};

use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// Error codes that mean a content policy refused the request.
const CONTENT_POLICY_CODES: [&str; 4] = [
    "content_filter",
    "content_policy_violation",
    "ResponsibleAIPolicyViolation",
    "moderation_blocked",
];

/// An OpenAI-compatible provider.
pub(crate) type OpenAiCompat = HttpAdapter<OpenAiProtocol>;

/// The OpenAI Chat Completions protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct OpenAiProtocol {
    url: reqwest::Url,
    /// Extra headers and `Authorization`, the latter marked sensitive so
    /// that no `Debug` output shows it.
    headers: HeaderMap,
    /// OpenAI itself wants `max_completion_tokens`; compatible servers
    /// understand `max_tokens`.
    max_completion_tokens: bool,
}

/// Builds the adapter for an OpenAI-compatible provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<OpenAiCompat, String> {
    HttpAdapter::new(settings, OpenAiProtocol::new(settings)?)
}

impl OpenAiProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        let mut headers = crate::extra_headers(settings)?;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &settings.api_key {
            headers.insert(
                AUTHORIZATION,
                crate::sensitive(&format!("Bearer {}", key.expose()))?,
            );
        }
        Ok(Self {
            url: crate::http::endpoint(&format!("{}/chat/completions", settings.base_url))?,
            headers,
            max_completion_tokens: settings.name == "openai",
        })
    }
}

impl Protocol for OpenAiProtocol {
    type Parser = OpenAiStream;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if let Some(system) = &request.system {
            messages.push(WireMessage {
                role: "system",
                content: system.into(),
            });
        }
        for m in &request.messages {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            messages.push(WireMessage {
                role,
                content: crate::text_of(m),
            });
        }
        let (max_tokens, max_completion_tokens) = match self.max_completion_tokens {
            true => (None, request.max_tokens),
            false => (request.max_tokens, None),
        };
        let body = WireRequest {
            model,
            messages,
            temperature: request.temperature,
            max_tokens,
            max_completion_tokens,
            stop: &request.stop,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        };
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        parse_response(received, model)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify_error(status, headers, body)
    }

    fn parser(&self, model: &str) -> OpenAiStream {
        OpenAiStream::for_model(model)
    }
}

/// Classifies a complete (non-streamed) response.
pub(crate) fn parse_response(
    received: &Received,
    requested_model: &str,
) -> Result<Completion, Failure> {
    let Received {
        status,
        headers,
        body,
    } = received;
    if !(200..300).contains(status) {
        return Err(classify_error(*status, headers, body));
    }
    let parsed: WireResponse = serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            FailureKind::MalformedResponse,
            format!("the body is not a chat completion: {e}"),
        )
        .with_status(*status)
    })?;
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
    let text = message.content.unwrap_or_default();
    if text.trim().is_empty() {
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
        tool_calls: Vec::new(),
        text,
        model: parsed
            .model
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| requested_model.to_owned()),
        finish_reason: finish_reason(finish),
        usage: parsed.usage.map(|u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        }),
    })
}

pub(crate) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// Classifies an error status with its body.
pub(crate) fn classify_error(status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
    match serde_json::from_slice::<WireErrorEnvelope>(body) {
        Ok(WireErrorEnvelope { error: Some(error) }) => {
            classify_error_body(status, headers, &error)
        }
        _ => classify::unreadable(status, headers, body),
    }
}

pub(crate) fn classify_error_body(status: u16, headers: &HeaderMap, error: &WireError) -> Failure {
    let (message, code, kind_field) = match error {
        WireError::Text(message) => (message.as_str(), None, None),
        WireError::Object {
            message,
            code,
            kind,
            innererror,
        } => {
            let code = code.as_ref().and_then(|c| c.as_str()).or_else(|| {
                innererror
                    .as_ref()
                    .and_then(|i| i.get("code"))
                    .and_then(|c| c.as_str())
            });
            (
                message.as_deref().unwrap_or_default(),
                code,
                kind.as_deref(),
            )
        }
    };
    let lower = message.to_ascii_lowercase();
    let is = |want: &str| code == Some(want) || kind_field == Some(want);
    let kind = if CONTENT_POLICY_CODES.iter().any(|c| is(c)) {
        FailureKind::ContentFilter
    } else if is("insufficient_quota") || is("billing_hard_limit_reached") {
        FailureKind::QuotaExceeded
    } else if is("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("context_length_exceeded")
    {
        FailureKind::ContextLength
    } else if status == 413 && is("rate_limit_exceeded") {
        // Groq: this one request is larger than the tokens-per-minute budget,
        // so waiting cannot help; an unbounded wait makes the plan move on.
        FailureKind::RateLimited {
            retry_after: Some(std::time::Duration::MAX),
        }
    } else {
        match classify::status(status) {
            FailureKind::RateLimited { .. } => FailureKind::RateLimited {
                retry_after: classify::retry_after(headers, SystemTime::now())
                    .or_else(|| classify::hint_in_message(message)),
            },
            other => other,
        }
    };
    let detail = match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_owned(),
    };
    Failure::new(kind, detail).with_status(status)
}

// === streaming ===

/// Parses `data: {chunk}` events up to `data: [DONE]` (wire-formats §1.3,
/// §2.3, §1.7, §2.7).
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    model: String,
    finish: Option<String>,
    usage: Option<Usage>,
    text_seen: bool,
    stray: StrayJson,
}

impl OpenAiStream {
    fn finish(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if !self.text_seen {
            out.push_back(Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the stream carried no text (finish_reason {})",
                    self.finish.as_deref().unwrap_or("null")
                ),
            )));
            return;
        }
        out.push_back(Ok(StreamEvent::Finish {
            finish_reason: finish_reason(self.finish.as_deref()),
            usage: self.usage,
            model: Some(self.model.clone()),
        }));
    }
}

impl OpenAiStream {
    /// A parser for one streamed answer from `model`.
    pub(crate) fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }
}

impl StreamParser for OpenAiStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((_, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        if data.trim() == "[DONE]" {
            self.finish(out);
            return;
        }
        let chunk: WireChunk = match serde_json::from_str(&data) {
            Ok(c) => c,
            Err(e) => {
                out.push_back(Err(crate::http::malformed_event(&e)));
                return;
            }
        };
        if let Some(error) = chunk.error {
            out.push_back(Err(mid_stream_error_body(&error)));
            return;
        }
        if let Some(message) = chunk.x_groq.as_ref().and_then(|x| x.error.as_deref()) {
            out.push_back(Err(Failure::new(
                FailureKind::Unavailable,
                format!("x_groq.error: {message}"),
            )));
            return;
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = model;
        }
        if let Some(u) = chunk.usage.or_else(|| chunk.x_groq.and_then(|x| x.usage)) {
            self.usage = Some(Usage {
                input_tokens: u.prompt_tokens,
                output_tokens: u.completion_tokens,
            });
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return;
        };
        if let Some(delta) = choice.delta {
            if let Some(refusal) = delta.refusal.filter(|r| !r.is_empty()) {
                out.push_back(Err(Failure::new(
                    FailureKind::ContentFilter,
                    format!("the model refused: {refusal}…"),
                )));
                return;
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.text_seen = true;
                out.push_back(Ok(StreamEvent::Delta(text)));
            }
        }
        match choice.finish_reason.as_deref() {
            Some("content_filter") => {
                out.push_back(Err(Failure::new(
                    FailureKind::ContentFilter,
                    "finish_reason is content_filter",
                )));
            }
            Some(reason) => self.finish = Some(reason.to_owned()),
            None => {}
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if let Some(failure) = self.stray.take_failure(mid_stream_error) {
            out.push_back(Err(failure));
        } else if self.finish.is_some() {
            // The finish reason came, only `[DONE]` is missing: complete.
            self.finish(out);
        } else {
            out.push_back(Err(Failure::new(
                FailureKind::StreamInterrupted,
                "the stream ended without a finish reason or [DONE]",
            )));
        }
    }
}

/// A raw JSON value seen mid-stream that may be an error object.
fn mid_stream_error(value: &serde_json::Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(value.get("error")?.clone()).ok()?;
    Some(mid_stream_error_body(&error))
}

/// An error object inside a 200 stream: classified as the status its type
/// implies, so that a rate limit or an overload before any text still
/// leads where it would have as an HTTP error.
fn mid_stream_error_body(error: &WireError) -> Failure {
    let status = match error {
        WireError::Object { code, kind, .. } => {
            let code = code.as_ref().and_then(|c| c.as_str()).unwrap_or_default();
            let kind = kind.as_deref().unwrap_or_default();
            if code.contains("rate_limit") || kind.contains("rate_limit") {
                429
            } else if kind == "invalid_request_error" || CONTENT_POLICY_CODES.contains(&code) {
                400
            } else {
                500
            }
        }
        WireError::Text(_) => 500,
    };
    let mut f = classify_error_body(status, &HeaderMap::new(), error);
    f.status = None;
    f.detail = format!("error event mid-stream: {}", f.detail);
    f
}

// === the wire ===

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
struct WireResponse {
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
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Deserialize)]
struct WireChunk {
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
    x_groq: Option<XGroq>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<String>,
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct XGroq {
    usage: Option<WireUsage>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct WireErrorEnvelope {
    error: Option<WireError>,
}

/// Groq can send the error as a bare string (wire-formats §2.7).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum WireError {
    Text(String),
    Object {
        message: Option<String>,
        code: Option<serde_json::Value>,
        #[serde(rename = "type")]
        kind: Option<String>,
        innererror: Option<serde_json::Value>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn fixture(name: &str) -> Bytes {
        let path = format!("{}/tests/data/openai/{name}", env!("CARGO_MANIFEST_DIR"));
        Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
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
        assert_eq!(
            c.usage,
            Some(Usage {
                input_tokens: 19,
                output_tokens: 10
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
            Err(FailureKind::Unavailable),
        );
        check(
            500,
            &[],
            fixture("server_error_500.json"),
            Err(FailureKind::Unavailable),
        );
        check(498, &[], Bytes::from_static(b"{\"error\":{\"message\":\"flex tier capacity exceeded\",\"type\":\"capacity_exceeded\"}}"), Err(FailureKind::Unavailable));
        check(
            400,
            &[],
            fixture("groq_tool_use_failed_400.json"),
            Err(FailureKind::BadRequest),
        );
        check(
            502,
            &[],
            Bytes::from_static(b"<html>Bad Gateway</html>"),
            Err(FailureKind::Unavailable),
        );
        check(
            400,
            &[],
            Bytes::from_static(b"{\"error\":\"model not found\"}"),
            Err(FailureKind::BadRequest),
        );
    }

    #[test]
    fn garbage() {
        check(
            200,
            &[],
            Bytes::from_static(b"not json at all"),
            Err(FailureKind::MalformedResponse),
        );
        check(
            200,
            &[],
            Bytes::from_static(b"{\"choices\": [{\"message\": {\"content\": \"cut"),
            Err(FailureKind::MalformedResponse),
        );
        check(
            200,
            &[],
            Bytes::from_static(b"{\"choices\": []}"),
            Err(FailureKind::EmptyResponse),
        );
        check(
            200,
            &[],
            Bytes::from_static(
                b"{\"choices\": [{\"message\": {\"content\": \"\"}, \"finish_reason\": \"stop\"}]}",
            ),
            Err(FailureKind::EmptyResponse),
        );
        check(
            200,
            &[],
            Bytes::from_static(b"{\"choices\": \"x\"}"),
            Err(FailureKind::MalformedResponse),
        );
    }
}
