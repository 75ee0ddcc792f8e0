//! Anthropic's Messages API (`claude`).
//!
//! Refusals (wire-formats §4.4): `stop_reason: "refusal"` on a 200, with or
//! without partial text and `stop_details`; and "Output blocked by content
//! filtering policy", which arrives as a 400 `invalid_request_error` (or as
//! an `error` event mid-stream) but is a content filter, not a bad request.

use std::collections::VecDeque;
use std::time::SystemTime;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, ProviderSettings, Role,
    StreamEvent, Usage,
};

use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// Sent when the request sets no `max_tokens`: the Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;

/// The API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An Anthropic provider.
pub(crate) type Anthropic = HttpAdapter<AnthropicProtocol>;

/// The Messages protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct AnthropicProtocol {
    url: reqwest::Url,
    headers: HeaderMap,
}

/// Builds the adapter for an Anthropic provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<Anthropic, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        "anthropic-version",
        HeaderValue::from_static(ANTHROPIC_VERSION),
    );
    if let Some(key) = &settings.api_key {
        headers.insert("x-api-key", crate::sensitive(key.expose())?);
    }
    HttpAdapter::new(
        settings,
        AnthropicProtocol {
            url: crate::http::endpoint(&format!("{}/v1/messages", settings.base_url))?,
            headers,
        },
    )
}

impl AnthropicProtocol {
    /// The protocol without an endpoint or key, for parsing recorded bytes.
    pub(crate) fn bare() -> Self {
        AnthropicProtocol {
            url: reqwest::Url::parse("http://localhost/v1/messages")
                .expect("a constant URL parses"),
            headers: HeaderMap::new(),
        }
    }
}

impl Protocol for AnthropicProtocol {
    type Parser = AnthropicStream;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let messages = request
            .messages
            .iter()
            .map(|m| WireMessage {
                role: match m.role {
                    Role::User | Role::Tool => "user",
                    Role::Assistant => "assistant",
                },
                content: crate::text_of(m),
            })
            .collect();
        let body = WireRequest {
            model,
            max_tokens: request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            system: request.system.as_deref(),
            messages,
            // The Messages API accepts 0 to 1; the neutral range is 0 to 2.
            temperature: request.temperature.map(|t| t.clamp(0.0, 1.0)),
            stop_sequences: &request.stop,
            stream,
        };
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let Received {
            status,
            headers,
            body,
        } = received;
        if !(200..300).contains(status) {
            return Err(self.classify_error(*status, headers, body));
        }
        let parsed: WireResponse = serde_json::from_slice(body).map_err(|e| {
            Failure::new(
                FailureKind::MalformedResponse,
                format!("the body is not an Anthropic message: {e}"),
            )
            .with_status(*status)
        })?;
        if let Some(error) = &parsed.error {
            return Err(classify_error_object(500, headers, error));
        }
        let text: String = parsed
            .content
            .iter()
            .flatten()
            .filter(|b| b.kind == "text")
            .filter_map(|b| b.text.as_deref())
            .collect();
        let stop = parsed.stop_reason.as_deref();
        if stop == Some("refusal") {
            return Err(Failure::new(
                FailureKind::ContentFilter,
                refusal_detail(parsed.stop_details.as_ref()),
            )
            .with_status(*status));
        }
        if text.trim().is_empty() {
            return Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the answer has no text (stop_reason {})",
                    stop.unwrap_or("null")
                ),
            )
            .with_status(*status));
        }
        Ok(Completion {
            tool_calls: Vec::new(),
            text,
            model: parsed.model.clone().unwrap_or_else(|| model.to_owned()),
            finish_reason: finish_reason(stop),
            usage: parsed.usage.as_ref().map(WireUsage::to_usage),
        })
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        match serde_json::from_slice::<WireErrorEnvelope>(body) {
            Ok(WireErrorEnvelope { error: Some(error) }) => {
                classify_error_object(status, headers, &error)
            }
            _ => classify::unreadable(status, headers, body),
        }
    }

    fn parser(&self, model: &str) -> AnthropicStream {
        AnthropicStream::for_model(model)
    }
}

fn refusal_detail(details: Option<&Value>) -> String {
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

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// Classifies `{"type":"error","error":{"type","message"}}`; `status` is the
/// HTTP status, or the one the error type implies mid-stream.
fn classify_error_object(status: u16, headers: &HeaderMap, error: &WireError) -> Failure {
    let kind_field = error.kind.as_deref().unwrap_or_default();
    let message = error.message.as_deref().unwrap_or_default();
    let lower = message.to_ascii_lowercase();
    let spend_limit = error
        .details
        .as_ref()
        .and_then(|d| d.get("error_code"))
        .and_then(Value::as_str)
        .is_some_and(|c| c == "enforced_spend_limit_reached");
    let kind = match (kind_field, status) {
        ("invalid_request_error", _) | (_, 400)
            if lower.contains("content filtering") || lower.contains("blocked") =>
        {
            FailureKind::ContentFilter
        }
        ("authentication_error" | "permission_error", _) | (_, 401 | 403) => FailureKind::Auth,
        ("billing_error", _) | (_, 402) => FailureKind::QuotaExceeded,
        ("rate_limit_error", _) | (_, 429) if spend_limit => FailureKind::QuotaExceeded,
        ("rate_limit_error", _) | (_, 429) => FailureKind::RateLimited {
            retry_after: classify::retry_after(headers, SystemTime::now()),
        },
        ("overloaded_error" | "api_error", _) | (_, 500 | 529) => FailureKind::Unavailable,
        ("timeout_error", _) | (_, 504) => FailureKind::Timeout,
        ("request_too_large", _) | (_, 413) => FailureKind::BadRequest,
        _ if lower.contains("prompt is too long") => FailureKind::ContextLength,
        _ => classify::status(status),
    };
    Failure::new(
        kind,
        if kind_field.is_empty() {
            message.to_owned()
        } else {
            format!("{kind_field}: {message}")
        },
    )
    .with_status(status)
}

/// The HTTP status an error type stands for, for errors inside a stream.
fn status_of(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

// === streaming ===

/// Parses the Messages event sequence: `message_start`,
/// `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    model: String,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
    text_seen: bool,
    stray: StrayJson,
}

impl AnthropicStream {
    /// A parser for one streamed answer from `model`.
    pub(crate) fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }
}

impl StreamParser for AnthropicStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((name, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        let event: WireEvent = match serde_json::from_str(&data) {
            Ok(e) => e,
            Err(e) => {
                out.push_back(Err(crate::http::malformed_event(&e)));
                return;
            }
        };
        let kind = name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(event.kind.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(message) = event.message {
                    if let Some(model) = message.model {
                        self.model = model;
                    }
                    if let Some(u) = message.usage {
                        self.input_tokens = Some(u.to_usage().input_tokens);
                        self.output_tokens = u.output_tokens;
                    }
                }
            }
            "content_block_delta" => {
                if let Some(text) = event.delta.and_then(|d| d.text).filter(|t| !t.is_empty()) {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(text)));
                }
            }
            "message_delta" => {
                if let Some(u) = event.usage.and_then(|u| u.output_tokens) {
                    self.output_tokens = Some(u);
                }
                if let Some(delta) = event.delta {
                    if delta.stop_reason.as_deref() == Some("refusal") {
                        out.push_back(Err(Failure::new(
                            FailureKind::ContentFilter,
                            refusal_detail(delta.stop_details.as_ref()),
                        )));
                        return;
                    }
                    if delta.stop_reason.is_some() {
                        self.stop_reason = delta.stop_reason;
                    }
                }
            }
            "message_stop" => {
                if !self.text_seen {
                    out.push_back(Err(Failure::new(
                        FailureKind::EmptyResponse,
                        format!(
                            "the stream carried no text (stop_reason {})",
                            self.stop_reason.as_deref().unwrap_or("null")
                        ),
                    )));
                    return;
                }
                let usage = match (self.input_tokens, self.output_tokens) {
                    (None, None) => None,
                    (i, o) => Some(Usage {
                        input_tokens: i.unwrap_or(0),
                        output_tokens: o.unwrap_or(0),
                    }),
                };
                out.push_back(Ok(StreamEvent::Finish {
                    finish_reason: finish_reason(self.stop_reason.as_deref()),
                    usage,
                    model: Some(self.model.clone()),
                }));
            }
            "error" => {
                let error = event.error.unwrap_or_default();
                let mut f = classify_error_object(
                    status_of(error.kind.as_deref().unwrap_or_default()),
                    &HeaderMap::new(),
                    &error,
                );
                f.status = None;
                f.detail = format!("error event mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            // ping, content_block_start/stop, and event types added later.
            _ => {}
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let failure = self.stray.failure_at_eof(mid_stream_error, "message_stop");
        out.push_back(Err(failure));
    }
}

fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(value.get("error")?.clone()).ok()?;
    let mut f = classify_error_object(
        status_of(error.kind.as_deref().unwrap_or_default()),
        &HeaderMap::new(),
        &error,
    );
    f.status = None;
    Some(f)
}

// === the wire ===

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
struct WireResponse {
    model: Option<String>,
    content: Option<Vec<WireBlock>>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0)
                + self.cache_creation_input_tokens.unwrap_or(0)
                + self.cache_read_input_tokens.unwrap_or(0),
            output_tokens: self.output_tokens.unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct WireErrorEnvelope {
    error: Option<WireError>,
}

#[derive(Deserialize, Default)]
struct WireError {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<String>,
    details: Option<Value>,
}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<WireStartMessage>,
    delta: Option<WireDelta>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct WireStartMessage {
    model: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireDelta {
    text: Option<String>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
}
