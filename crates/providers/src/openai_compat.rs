//! The OpenAI Chat Completions protocol, spoken by OpenAI, Groq and most
//! self-hosted servers (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! Refusal signals (wire-formats §1.4, §1.8, §2.4): `finish_reason:
//! "content_filter"`, a non-empty `message.refusal`, and a 400 whose error
//! code is a content-policy code (Azure's `content_filter`).
//!
//! Tools, images and structured output pass through in OpenAI's own shapes
//! (openai-python `types/chat/`): `tools`/`tool_choice`/`parallel_tool_calls`,
//! `response_format`, content parts (`text`, `image_url`), assistant
//! `tool_calls` and `tool` messages; answers carry `message.tool_calls` or
//! streamed `delta.tool_calls` fragments keyed by `index`. Every field the
//! neutral request leaves empty stays out of the body, so a plain request
//! is serialised exactly as before tools existed.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::SystemTime;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize, Serializer};
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, Message, Part, ProviderSettings,
    ResponseFormat, Role, StreamEvent, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};

use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// The longest tool-call id OpenAI accepts in a conversation's history
/// (a longer one is a 400 `string_above_max_length`: "Invalid
/// 'messages[2].tool_calls[0].id': string too long. Expected a string with
/// maximum length 40", vercel/ai#5171, agno-agi/agno#5382).
const MAX_TOOL_CALL_ID: usize = 40;

/// The most tool calls one streamed answer may begin (OpenAI takes at most
/// 128 tools); beyond it the stream is garbage.
const MAX_STREAM_CALLS: usize = 1024;

/// Error codes that mean the model's own output was unusable: Groq's
/// malformed tool call and its JSON mode's invalid JSON (wire-formats §2.5;
/// groq/groq-typescript#28, Bklieger/infinite-bookshelf#42). Not the
/// client's fault, and another target may well succeed.
const OUTPUT_FAILURE_CODES: [&str; 2] = ["tool_use_failed", "json_validate_failed"];

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
    /// Output limits per model, to clamp a client's `max_tokens`.
    limits: crate::OutputLimits,
}

/// Builds the adapter for an OpenAI-compatible provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<OpenAiCompat, String> {
    HttpAdapter::new(settings, OpenAiProtocol::new(settings)?)
}

/// An OpenAI-style provider's request headers: its extra headers, JSON,
/// and its key as `Authorization: Bearer` (marked sensitive); shared by
/// the Chat Completions and the Responses protocols.
pub(crate) fn bearer_headers(settings: &ProviderSettings) -> Result<HeaderMap, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = &settings.api_key {
        headers.insert(
            AUTHORIZATION,
            crate::sensitive(&format!("Bearer {}", key.expose()))?,
        );
    }
    Ok(headers)
}

impl OpenAiProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        let headers = bearer_headers(settings)?;
        Ok(Self {
            url: crate::http::endpoint(&format!("{}/chat/completions", settings.base_url))?,
            headers,
            max_completion_tokens: settings.name == "openai",
            limits: crate::OutputLimits::of(settings),
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
                content: WireContent::Text(system.into()),
                tool_calls: WireToolCalls(&[]),
                tool_call_id: None,
            });
        }
        messages.extend(request.messages.iter().map(WireMessage::of));
        let limit = self.limits.clamp(model, request.max_tokens);
        let (max_tokens, max_completion_tokens) = match self.max_completion_tokens {
            true => (None, limit),
            false => (limit, None),
        };
        let body = WireRequest {
            model,
            messages,
            temperature: request.temperature,
            max_tokens,
            max_completion_tokens,
            stop: &request.stop,
            top_p: request.top_p,
            seed: request.seed,
            presence_penalty: request.presence_penalty,
            frequency_penalty: request.frequency_penalty,
            // OpenAI takes at most 64 characters (Claude Code's
            // `metadata.user_id` is about 150).
            user: request.user.as_deref().map(|u| crate::fitted_user(u, 64)),
            tools: WireTools(&request.tools),
            // OpenAI refuses both without tools (a history with tool calls
            // but no tools offered is valid).
            tool_choice: request
                .tool_choice
                .as_ref()
                .filter(|_| !request.tools.is_empty())
                .map(WireToolChoice),
            parallel_tool_calls: request
                .parallel_tool_calls
                .filter(|_| !request.tools.is_empty()),
            response_format: request.response_format.as_ref().map(WireResponseFormat::of),
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

    fn parser(&self, model: &str, _native: bool) -> OpenAiStream {
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
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
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
        .collect();
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
        finish_reason: finish_reason_with(finish, !tool_calls.is_empty()),
        tool_calls,
        text,
        model: parsed
            .model
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| requested_model.to_owned()),
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
        Some("tool_calls") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// The finish reason of an answer that `called` tools or not. An answer of
/// tool calls can end with `"stop"`: OpenAI's own with a named
/// `tool_choice` (vllm-project/vllm#25054), and compatible servers' (older
/// Ollama, ollama/ollama#5995; openvinotoolkit/model_server#3927). It is
/// reported as `tool_calls` whoever served it, the signal agent loops
/// branch on.
fn finish_reason_with(reason: Option<&str>, called: bool) -> FinishReason {
    match finish_reason(reason) {
        FinishReason::Stop if called => FinishReason::ToolCalls,
        other => other,
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
    } else if OUTPUT_FAILURE_CODES.iter().any(|c| is(c)) {
        FailureKind::InvalidOutput
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

/// The most refusal text a stream keeps for its failure's detail.
const MAX_REFUSAL: usize = 4096;

/// Parses `data: {chunk}` events up to `data: [DONE]` (wire-formats §1.3,
/// §2.3, §1.7, §2.7).
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    model: String,
    finish: Option<String>,
    usage: Option<Usage>,
    text_seen: bool,
    /// A refusal's words so far (`delta.refusal` comes in pieces, like
    /// text): the failure names all of them, as an unstreamed refusal does.
    refusal: String,
    /// The tool calls begun so far, in the order they began.
    calls: Vec<StreamCall>,
    stray: StrayJson,
}

/// What the stream has relayed of one tool call.
#[derive(Debug)]
struct StreamCall {
    /// The `index` the provider gave it.
    wire_index: Option<u32>,
    /// The id the provider sent with it, if any.
    wire_id: Option<String>,
    name_sent: bool,
}

impl OpenAiStream {
    fn finish(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if !self.refusal.is_empty() {
            out.push_back(Err(Failure::new(
                FailureKind::ContentFilter,
                format!("the model refused: {}", self.refusal),
            )));
            return;
        }
        if !self.text_seen && self.calls.is_empty() {
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
            finish_reason: finish_reason_with(self.finish.as_deref(), !self.calls.is_empty()),
            usage: self.usage,
            model: Some(self.model.clone()),
        }));
    }

    /// Relays one `delta.tool_calls[]` fragment: the first fragment of each
    /// call carries its id (minted when the server sent none) and, once
    /// known, its name; later fragments only their piece of the arguments.
    /// An id or name a server repeats on later fragments is not relayed
    /// again (clients append what they receive).
    fn on_tool_call(
        &mut self,
        call: WireToolCall,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        let wire_id = call.id.filter(|id| !id.is_empty());
        // The call this fragment continues: the latest one with its index
        // (the last one when a server leaves `index` out), unless the
        // fragment brings another id, which begins a new call (some
        // compatible servers give every call index 0).
        let continued = match call.index {
            Some(i) => self.calls.iter().rposition(|c| c.wire_index == Some(i)),
            None => self.calls.len().checked_sub(1),
        }
        .filter(|&at| match (&wire_id, &self.calls[at].wire_id) {
            (Some(new), Some(known)) => new == known,
            _ => true,
        });
        let (name, arguments) = match call.function {
            Some(f) => (
                f.name.filter(|n| !n.is_empty()),
                f.arguments
                    .map(WireArguments::into_text)
                    .unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        let (at, id, name) = match continued {
            Some(at) => {
                let known = &mut self.calls[at];
                let name = name.filter(|_| !known.name_sent);
                known.name_sent |= name.is_some();
                (at, None, name)
            }
            None if self.calls.len() >= MAX_STREAM_CALLS => {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    format!("more than {MAX_STREAM_CALLS} tool calls in one answer"),
                )));
                return;
            }
            None => {
                self.calls.push(StreamCall {
                    wire_index: call.index,
                    wire_id: wire_id.clone(),
                    name_sent: name.is_some(),
                });
                let id = wire_id.unwrap_or_else(crate::mint_call_id);
                (self.calls.len() - 1, Some(id), name)
            }
        };
        if id.is_none() && name.is_none() && arguments.is_empty() {
            return;
        }
        out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
            // Calls are numbered 0, 1, … in the order they began.
            index: u32::try_from(at).unwrap_or(u32::MAX),
            id,
            name,
            arguments,
        })));
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
                // Kept until the finish (bounded: the failure's detail is).
                if self.refusal.len() < MAX_REFUSAL {
                    self.refusal.push_str(&refusal);
                }
            }
            if let Some(thinking) = delta
                .reasoning_content
                .or(delta.reasoning)
                .filter(|t| !t.is_empty())
            {
                out.push_back(Ok(StreamEvent::Reasoning(thinking)));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.text_seen = true;
                out.push_back(Ok(StreamEvent::Delta(text)));
            }
            // A chunk may carry fragments of several calls: relayed in order.
            for call in delta.tool_calls.into_iter().flatten() {
                self.on_tool_call(call, out);
            }
        }
        match choice.finish_reason.as_deref() {
            Some("content_filter") => {
                out.push_back(Err(Failure::new(
                    FailureKind::ContentFilter,
                    "finish_reason is content_filter",
                )));
            }
            Some(reason) => {
                self.finish = Some(reason.to_owned());
                if !self.refusal.is_empty() {
                    self.finish(out);
                }
            }
            None => {}
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if let Some(failure) = self.stray.take_failure(mid_stream_error) {
            out.push_back(Err(failure));
        } else if self.finish.is_some() || !self.refusal.is_empty() {
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
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "WireTools::is_empty")]
    tools: WireTools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message (openai-python `chat_completion_*_message_param.py`).
#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: WireContent<'a>,
    #[serde(skip_serializing_if = "WireToolCalls::is_empty")]
    tool_calls: WireToolCalls<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<Cow<'a, str>>,
}

impl<'a> WireMessage<'a> {
    fn of(m: &'a Message) -> Self {
        let (role, content) = match m.role {
            // A user turn is the only one that takes images: a string when it
            // is one text part (the plain request, byte for byte as before),
            // else an array of parts.
            Role::User => (
                "user",
                match m.content.as_slice() {
                    [Part::Text { text }] => WireContent::Text(Cow::Borrowed(text)),
                    [] => WireContent::Text(Cow::Borrowed("")),
                    parts => WireContent::Parts(parts),
                },
            ),
            // Assistant and tool turns take text only; a turn that only
            // calls tools has `content: null`.
            Role::Assistant => {
                let text = crate::text_of(m);
                match text.is_empty() && !m.tool_calls.is_empty() {
                    true => ("assistant", WireContent::Null),
                    false => ("assistant", WireContent::Text(text)),
                }
            }
            Role::Tool => ("tool", WireContent::Text(crate::text_of(m))),
            // A system message stays where it was said.
            Role::System => ("system", WireContent::Text(crate::text_of(m))),
        };
        Self {
            role,
            content,
            tool_calls: WireToolCalls(match m.role {
                Role::Assistant => &m.tool_calls,
                Role::User | Role::Tool | Role::System => &[],
            }),
            tool_call_id: match m.role {
                Role::Tool => m.tool_call_id.as_deref().map(wire_id),
                Role::User | Role::Assistant | Role::System => None,
            },
        }
    }
}

/// A message's `content`.
enum WireContent<'a> {
    Text(Cow<'a, str>),
    /// `[{"type":"text","text"}, {"type":"image_url","image_url":{"url","detail"?}}]`.
    Parts(&'a [Part]),
    Null,
}

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum WirePart<'a> {
            Text { text: &'a str },
            ImageUrl { image_url: WireImage<'a> },
        }
        #[derive(Serialize)]
        struct WireImage<'a> {
            url: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            detail: Option<&'a str>,
        }
        match self {
            Self::Text(text) => s.serialize_str(text),
            Self::Null => s.serialize_none(),
            Self::Parts(parts) => s.collect_seq(parts.iter().map(|p| match p {
                Part::Text { text } => WirePart::Text { text },
                Part::Image { url, detail } => WirePart::ImageUrl {
                    image_url: WireImage {
                        url,
                        detail: detail.as_deref(),
                    },
                },
            })),
        }
    }
}

/// An assistant turn's `tool_calls`:
/// `[{"id","type":"function","function":{"name","arguments"}}]`.
struct WireToolCalls<'a>(&'a [ToolCall]);

impl WireToolCalls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireToolCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Call<'a> {
            id: Cow<'a, str>,
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
        }
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            arguments: &'a str,
        }
        s.collect_seq(self.0.iter().map(|c| Call {
            id: wire_id(&c.id),
            kind: "function",
            function: Function {
                name: &c.name,
                // A call without arguments (possible from another provider)
                // still needs a JSON text.
                arguments: match c.arguments.trim() {
                    "" => "{}",
                    _ => &c.arguments,
                },
            },
        }))
    }
}

/// A tool-call id as OpenAI will take it: unchanged when it fits (every id
/// OpenAI, Anthropic or Groq mints does), else a BLAKE3 digest of it
/// ([`crate::ids::openai`]), the same on the assistant's call and on the
/// tool result that answers it. The client keeps seeing its own id:
/// answers carry the ids this provider mints, never these. An id carrying
/// a Gemini thought signature is digested too: the signature belongs to
/// the Gemini target that made it.
fn wire_id(id: &str) -> Cow<'_, str> {
    crate::ids::openai(id, MAX_TOOL_CALL_ID)
}

/// `tools: [{"type":"function","function":{name, description?, parameters?, strict?}}]`.
struct WireTools<'a>(&'a [Tool]);

impl WireTools<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireTools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct WireTool<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
        }
        #[derive(Serialize)]
        struct Function<'a> {
            name: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            description: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            parameters: Option<&'a serde_json::Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            strict: Option<bool>,
        }
        s.collect_seq(self.0.iter().map(|t| WireTool {
            kind: "function",
            function: Function {
                name: &t.name,
                description: t.description.as_deref(),
                parameters: t.parameters.as_ref(),
                strict: t.strict,
            },
        }))
    }
}

/// `"auto" | "none" | "required" | {"type":"function","function":{"name"}}`.
struct WireToolChoice<'a>(&'a ToolChoice);

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Named<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Name<'a>,
        }
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        match self.0 {
            ToolChoice::Auto => s.serialize_str("auto"),
            ToolChoice::None => s.serialize_str("none"),
            ToolChoice::Required => s.serialize_str("required"),
            ToolChoice::Function(name) => Named {
                kind: "function",
                function: Name { name },
            }
            .serialize(s),
        }
    }
}

/// `{"type":"text"}`, `{"type":"json_object"}` or
/// `{"type":"json_schema","json_schema":{name, schema, strict}}`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    schema: &'a serde_json::Value,
    strict: bool,
}

impl<'a> WireResponseFormat<'a> {
    fn of(format: &'a ResponseFormat) -> Self {
        match format {
            ResponseFormat::Text => Self::Text,
            ResponseFormat::JsonObject => Self::JsonObject,
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => Self::JsonSchema {
                json_schema: WireJsonSchema {
                    name,
                    schema,
                    strict: *strict,
                },
            },
        }
    }
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
    /// Absent, `null` or a list (openai-python `chat_completion_message.py`).
    tool_calls: Option<Vec<WireToolCall>>,
}

/// A tool call, whole (`message.tool_calls[]`) or a fragment of one
/// (`delta.tool_calls[]`, where `index` says which call it continues and
/// only the first fragment carries `id`, `type` and `function.name`;
/// openai-python `chat_completion_chunk.py` `ChoiceDeltaToolCall`).
#[derive(Deserialize)]
struct WireToolCall {
    index: Option<u32>,
    id: Option<String>,
    function: Option<WireFunctionCall>,
}

#[derive(Deserialize)]
struct WireFunctionCall {
    name: Option<String>,
    arguments: Option<WireArguments>,
}

/// OpenAI sends the arguments as JSON text; a few compatible servers send
/// the object itself, which is taken as its JSON text.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireArguments {
    Text(String),
    Json(serde_json::Value),
}

impl WireArguments {
    fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Json(value) => value.to_string(),
        }
    }
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
    /// Reasoning models' thinking (DeepSeek, vLLM, Groq: `reasoning_content`;
    /// OpenRouter and others: `reasoning`).
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
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
