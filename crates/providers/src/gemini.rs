//! Google's Generative Language API (Gemini): `generateContent` and
//! `streamGenerateContent?alt=sse`.
//!
//! Refusals all arrive as HTTP 200 (wire-formats §3.4): a prompt blocked
//! (`promptFeedback.blockReason`, no candidates), a candidate stopped by a
//! filter (`finishReason` SAFETY, RECITATION, …), or an answer with no usable
//! text at all — which this project counts as a refusal too, with a detail
//! that says which case it was. Gemini reports an invalid key as a 400
//! (`API_KEY_INVALID`), which is `auth`, not `bad_request`.

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

/// A Gemini provider.
pub(crate) type Gemini = HttpAdapter<GeminiProtocol>;

/// The Gemini protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct GeminiProtocol {
    base_url: String,
    headers: HeaderMap,
}

/// Builds the adapter for a Gemini provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<Gemini, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = &settings.api_key {
        // In a header, never in the URL, so no logged URL can carry it.
        headers.insert("x-goog-api-key", crate::sensitive(key.expose())?);
    }
    HttpAdapter::new(
        settings,
        GeminiProtocol {
            base_url: settings.base_url.clone(),
            headers,
        },
    )
}

impl GeminiProtocol {
    /// The protocol without an endpoint or key, for parsing recorded bytes.
    pub(crate) fn bare() -> Self {
        GeminiProtocol {
            base_url: String::new(),
            headers: HeaderMap::new(),
        }
    }
}

impl Protocol for GeminiProtocol {
    type Parser = GeminiStream;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        if model.is_empty()
            || !model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
        {
            return Err(Failure::new(
                FailureKind::BadRequest,
                format!("`{model}` is not a valid Gemini model name"),
            ));
        }
        let url = if stream {
            format!(
                "{}/models/{model}:streamGenerateContent?alt=sse",
                self.base_url
            )
        } else {
            format!("{}/models/{model}:generateContent", self.base_url)
        };
        let contents = request
            .messages
            .iter()
            .map(|m| WireContent {
                role: match m.role {
                    Role::User | Role::Tool => "user",
                    Role::Assistant => "model",
                },
                parts: [WirePart {
                    text: crate::text_of(m),
                }],
            })
            .collect();
        let config = WireGenerationConfig {
            temperature: request.temperature,
            max_output_tokens: request.max_tokens,
            stop_sequences: &request.stop,
        };
        let body = WireRequest {
            contents,
            system_instruction: request.system.as_deref().map(|text| WireSystem {
                parts: [WirePart { text: text.into() }],
            }),
            generation_config: (!config.is_empty()).then_some(config),
        };
        crate::http::json_post(client, url, &self.headers, &body)
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
                format!("the body is not a Gemini response: {e}"),
            )
            .with_status(*status)
        })?;
        if let Some(error) = &parsed.error {
            return Err(classify_error_object(None, headers, error));
        }
        let chunk = assess(&parsed).map_err(|f| f.with_status(*status))?;
        let text = chunk.text;
        match chunk.finish_reason.as_deref() {
            _ if text.trim().is_empty() => Err(Failure::new(
                FailureKind::ContentFilter,
                format!(
                    "empty response: no usable text (finishReason {})",
                    chunk.finish_reason.as_deref().unwrap_or("absent")
                ),
            )
            .with_status(*status)),
            reason => Ok(Completion {
                tool_calls: Vec::new(),
                text,
                model: parsed
                    .model_version
                    .clone()
                    .unwrap_or_else(|| model.to_owned()),
                finish_reason: finish_reason(reason),
                usage: usage(&parsed),
            }),
        }
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        let value: Option<Value> = serde_json::from_slice(body).ok();
        let error = value
            .as_ref()
            .and_then(error_of)
            .and_then(|e| serde_json::from_value::<WireError>(e.clone()).ok());
        match error {
            Some(error) => classify_error_object(Some(status), headers, &error),
            None => classify::unreadable(status, headers, body),
        }
    }

    fn parser(&self, model: &str) -> GeminiStream {
        GeminiStream::for_model(model)
    }
}

/// What one response (or one streamed chunk) says.
struct Chunk {
    text: String,
    finish_reason: Option<String>,
}

/// Reads a response: refusal signals become a content-filter failure; the
/// text and finish reason otherwise.
fn assess(response: &WireResponse) -> Result<Chunk, Failure> {
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
    let text = candidate
        .content
        .as_ref()
        .and_then(|c| c.parts.as_ref())
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p.thought != Some(true))
                .filter_map(|p| p.text.as_deref())
                .collect::<String>()
        })
        .unwrap_or_default();
    Ok(Chunk {
        text,
        finish_reason: finish,
    })
}

fn usage(response: &WireResponse) -> Option<Usage> {
    let u = response.usage_metadata.as_ref()?;
    Some(Usage {
        input_tokens: u.prompt_token_count.unwrap_or(0),
        output_tokens: u.candidates_token_count.unwrap_or(0) + u.thoughts_token_count.unwrap_or(0),
    })
}

fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("STOP") | None => FinishReason::Stop,
        Some("MAX_TOKENS") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_lowercase()),
    }
}

/// The `error` object of a body, also inside a one-element array.
fn error_of(value: &Value) -> Option<&Value> {
    match value {
        Value::Array(items) if items.len() == 1 => items[0].get("error"),
        other => other.get("error"),
    }
}

/// Classifies a `google.rpc.Status` error object; `status` is the HTTP
/// status when there was one (not mid-stream).
fn classify_error_object(status: Option<u16>, headers: &HeaderMap, error: &WireError) -> Failure {
    let code = status.or(error.code).unwrap_or(500);
    let rpc = error.status.as_deref().unwrap_or_default();
    let message = error.message.as_deref().unwrap_or_default();
    let details = error.details.as_deref().unwrap_or_default();
    let reason_is = |want: &str| {
        details
            .iter()
            .any(|d| d.get("reason").and_then(Value::as_str) == Some(want))
    };
    let retry_delay = details
        .iter()
        .filter(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("RetryInfo"))
        })
        .find_map(|d| {
            d.get("retryDelay")
                .and_then(Value::as_str)
                .and_then(classify::go_duration)
        });
    let per_day = details
        .iter()
        .filter_map(|d| d.get("violations").and_then(Value::as_array))
        .flatten()
        .any(|v| {
            v.get("quotaId")
                .and_then(Value::as_str)
                .is_some_and(|q| q.contains("PerDay"))
        });
    let lower = message.to_ascii_lowercase();
    let kind = if reason_is("API_KEY_INVALID")
        || matches!(code, 401 | 403)
        || matches!(rpc, "UNAUTHENTICATED" | "PERMISSION_DENIED")
    {
        FailureKind::Auth
    } else if code == 402 || rpc == "FAILED_PRECONDITION" {
        FailureKind::QuotaExceeded
    } else if code == 429 || rpc == "RESOURCE_EXHAUSTED" {
        if per_day {
            // A daily quota will not come back within any wait worth making.
            FailureKind::QuotaExceeded
        } else {
            FailureKind::RateLimited {
                retry_after: retry_delay
                    .or_else(|| classify::retry_after(headers, SystemTime::now())),
            }
        }
    } else if code == 504 || rpc == "DEADLINE_EXCEEDED" {
        FailureKind::Timeout
    } else if matches!(code, 500 | 502 | 503) || matches!(rpc, "INTERNAL" | "UNAVAILABLE") {
        FailureKind::Unavailable
    } else if lower.contains("token count") && lower.contains("exceeds") {
        FailureKind::ContextLength
    } else {
        classify::status(code)
    };
    let detail = if rpc.is_empty() {
        message.to_owned()
    } else {
        format!("{rpc}: {message}")
    };
    let mut f = Failure::new(kind, detail);
    f.status = status;
    f
}

// === streaming ===

/// Parses `alt=sse` chunks: CRLF framing, no sentinel, the chunk with a
/// `finishReason` ends the answer, and an error may arrive as raw JSON.
#[derive(Debug, Default)]
pub(crate) struct GeminiStream {
    model: String,
    text_seen: bool,
    usage: Option<Usage>,
    stray: StrayJson,
}

impl GeminiStream {
    /// A parser for one streamed answer from `model`.
    pub(crate) fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }
}

impl StreamParser for GeminiStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((_, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        let value: Value = match serde_json::from_str(&data) {
            Ok(v) => v,
            Err(e) => {
                out.push_back(Err(crate::http::malformed_event(&e)));
                return;
            }
        };
        if let Some(failure) = mid_stream_error(&value) {
            out.push_back(Err(failure));
            return;
        }
        let chunk: WireResponse = match serde_json::from_value(value) {
            Ok(c) => c,
            Err(e) => {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    format!("a malformed stream chunk: {e}"),
                )));
                return;
            }
        };
        if let Some(u) = usage(&chunk) {
            self.usage = Some(u);
        }
        if let Some(version) = &chunk.model_version {
            self.model.clone_from(version);
        }
        match assess(&chunk) {
            Err(failure) => out.push_back(Err(failure)),
            Ok(Chunk {
                text,
                finish_reason: reason,
            }) => {
                if !text.is_empty() {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(text)));
                }
                if let Some(reason) = reason {
                    if self.text_seen {
                        out.push_back(Ok(StreamEvent::Finish {
                            finish_reason: finish_reason(Some(&reason)),
                            usage: self.usage,
                            model: Some(self.model.clone()),
                        }));
                    } else {
                        out.push_back(Err(Failure::new(
                            FailureKind::ContentFilter,
                            format!("empty response: no usable text (finishReason {reason})"),
                        )));
                    }
                }
            }
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let failure = self
            .stray
            .failure_at_eof(mid_stream_error, "a finishReason");
        out.push_back(Err(failure));
    }
}

fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(error_of(value)?.clone()).ok()?;
    let mut f = classify_error_object(None, &HeaderMap::new(), &error);
    f.detail = format!("error mid-stream: {}", f.detail);
    Some(f)
}

// === the wire ===

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    contents: Vec<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<WireGenerationConfig<'a>>,
}

#[derive(Serialize)]
struct WireContent<'a> {
    role: &'static str,
    parts: [WirePart<'a>; 1],
}

#[derive(Serialize)]
struct WireSystem<'a> {
    parts: [WirePart<'a>; 1],
}

#[derive(Serialize)]
struct WirePart<'a> {
    text: std::borrow::Cow<'a, str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

impl WireGenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.max_output_tokens.is_none()
            && self.stop_sequences.is_empty()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse {
    candidates: Option<Vec<WireCandidate>>,
    prompt_feedback: Option<WirePromptFeedback>,
    usage_metadata: Option<WireUsage>,
    model_version: Option<String>,
    error: Option<WireError>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCandidate {
    content: Option<WireCandidateContent>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
}

#[derive(Deserialize)]
struct WireCandidateContent {
    parts: Option<Vec<WireResponsePart>>,
}

#[derive(Deserialize)]
struct WireResponsePart {
    text: Option<String>,
    thought: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePromptFeedback {
    block_reason: Option<String>,
    block_reason_message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
}

#[derive(Deserialize)]
struct WireError {
    code: Option<u16>,
    message: Option<String>,
    status: Option<String>,
    details: Option<Vec<Value>>,
}
