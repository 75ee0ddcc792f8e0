//! Google's Generative Language API (Gemini): `generateContent` and
//! `streamGenerateContent?alt=sse`.
//!
//! Refusals all arrive as HTTP 200 (wire-formats §3.4): a prompt blocked
//! (`promptFeedback.blockReason`, no candidates), a candidate stopped by a
//! filter (`finishReason` SAFETY, RECITATION, …), or an answer with no usable
//! text at all — which this project counts as a refusal too, with a detail
//! that says which case it was. Gemini reports an invalid key as a 400
//! (`API_KEY_INVALID`), which is `auth`, not `bad_request`.
//!
//! Tools: declarations go out as `functionDeclarations` whose `parameters`
//! are reduced to the OpenAPI subset Gemini's `Schema` accepts (see
//! [`schema`]); calls and results travel as `functionCall` /
//! `functionResponse` parts. Gemini matches a result to its call by name, so
//! the name of each result is recovered from the call with the same id in
//! the history. Answers carry no usable ids, so each call gets a fresh
//! `call_…` id; the finish reason is `STOP` even for calls, so an answer with
//! calls finishes as `tool_calls`. A call's `thoughtSignature` rides in that
//! id and goes back only to this provider and model ([`crate::signature`]).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, Message, Part, ProviderSettings,
    ResponseFormat, Role, StreamEvent, ToolCall, ToolCallDelta, ToolChoice, Usage,
};

use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::signature::{self, Target};
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

/// Finish reasons that mean the model tried to call a tool and got it
/// wrong (genai-py `FinishReason`): the answer is invalid output, not a
/// refusal.
const BROKEN_CALL_FINISH_REASONS: [&str; 3] = [
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
];

/// The thought signature Google documents for function calls the model did
/// not produce itself (another provider's turns, a rebuilt history). Gemini 3
/// answers 400 when the first `functionCall` of a step comes back without a
/// signature (ai.google.dev/gemini-api/docs/thought-signatures). A call
/// turn this target made carries its own signature back (kept in the call's
/// id, see [`crate::signature`]); any other call turn carries this one.
const FOREIGN_THOUGHT_SIGNATURE: &str = "skip_thought_signature_validator";

/// The most tool calls one answer may carry; more is garbage.
const MAX_TOOL_CALLS: u32 = 1024;

/// A Gemini provider.
pub(crate) type Gemini = HttpAdapter<GeminiProtocol>;

/// The Gemini protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct GeminiProtocol {
    base_url: String,
    headers: HeaderMap,
    /// Output limits per model, to clamp a client's `max_tokens`.
    limits: crate::OutputLimits,
    /// The provider's name: with the model, the target a thought
    /// signature belongs to.
    provider: String,
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
            limits: crate::OutputLimits::of(settings),
            provider: settings.name.clone(),
        },
    )
}

impl GeminiProtocol {
    /// The protocol without an endpoint or key, for parsing recorded bytes.
    pub(crate) fn bare() -> Self {
        GeminiProtocol {
            base_url: String::new(),
            headers: HeaderMap::new(),
            limits: crate::OutputLimits::none(),
            provider: String::new(),
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
        let target = Target::new(&self.provider, model);
        let body = wire_request(
            request,
            self.limits.clamp(model, request.max_tokens),
            &target,
        )?;
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
        if chunk.text.trim().is_empty() && chunk.calls.is_empty() {
            return Err(nothing_usable(chunk.finish_reason.as_deref()).with_status(*status));
        }
        if chunk.calls.len() > MAX_TOOL_CALLS as usize {
            return Err(too_many_calls().with_status(*status));
        }
        let target = Target::new(&self.provider, model);
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
            finish_reason: finish_reason(chunk.finish_reason.as_deref(), !tool_calls.is_empty()),
            tool_calls,
            text: chunk.text,
            model: parsed
                .model_version
                .clone()
                .unwrap_or_else(|| model.to_owned()),
            usage: usage(&parsed),
        })
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

    fn parser(&self, model: &str, _native: bool) -> GeminiStream {
        GeminiStream {
            target: Target::new(&self.provider, model),
            ..GeminiStream::for_model(model)
        }
    }
}

// === the request ===

/// The whole `generateContent` body for `request`.
fn wire_request<'a>(
    request: &'a ChatRequest,
    max_output_tokens: Option<u32>,
    target: &Target,
) -> Result<WireRequest<'a>, Failure> {
    let tools = (!request.tools.is_empty()).then(|| {
        [WireTool {
            function_declarations: request
                .tools
                .iter()
                .map(|t| WireFunctionDeclaration {
                    name: &t.name,
                    description: t.description.as_deref().unwrap_or(""),
                    parameters: t.parameters.as_ref().and_then(schema::parameters),
                })
                .collect(),
        }]
    });
    let tool_config = match (&request.tool_choice, tools.is_some()) {
        (Some(choice), true) => Some(WireToolConfig {
            function_calling_config: match choice {
                ToolChoice::Auto => WireFunctionCallingConfig::mode("AUTO"),
                ToolChoice::None => WireFunctionCallingConfig::mode("NONE"),
                ToolChoice::Required => WireFunctionCallingConfig::mode("ANY"),
                ToolChoice::Function(name) => WireFunctionCallingConfig {
                    mode: "ANY",
                    allowed_function_names: Some([name.as_str()]),
                },
            },
        }),
        _ => None,
    };
    let (response_mime_type, response_json_schema) = match &request.response_format {
        None | Some(ResponseFormat::Text) => (None, None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (
            Some("application/json"),
            Some(schema::response_json_schema(schema)),
        ),
    };
    let config = WireGenerationConfig {
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens,
        stop_sequences: &request.stop,
        // Gemini's seed is an int32; a wider one is folded (truncated), so
        // the same seed always asks for the same sampling.
        seed: request.seed.map(|s| s as i32),
        presence_penalty: request.presence_penalty,
        frequency_penalty: request.frequency_penalty,
        response_mime_type,
        response_json_schema,
    };
    Ok(WireRequest {
        contents: contents(&request.messages, target)?,
        system_instruction: request.system.as_deref().map(|text| WireSystem {
            parts: [WirePart::text(Cow::Borrowed(text))],
        }),
        tools,
        tool_config,
        generation_config: (!config.is_empty()).then_some(config),
    })
}

/// The conversation as Gemini turns: assistant turns are `model`, tool
/// results are `functionResponse` parts of a `user` turn, and consecutive
/// turns of one role become one turn (so parallel results share a turn, as
/// Gemini requires). A call carries its thought signature only back to
/// the `target` that made it (see [`crate::signature`]); the first call of
/// any other turn carries Google's dummy, and ids go out without
/// signatures.
fn contents<'a>(messages: &'a [Message], target: &Target) -> Result<Vec<WireContent<'a>>, Failure> {
    // The function each call id named, for the results that answer them.
    let names: HashMap<&str, &str> = if messages.iter().any(|m| m.role == Role::Tool) {
        messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect()
    } else {
        HashMap::new()
    };
    let mut out: Vec<WireContent<'_>> = Vec::with_capacity(messages.len());
    for m in messages {
        let (role, parts) = match m.role {
            Role::User => ("user", content_parts(m)?),
            Role::Assistant => {
                let mut parts = content_parts(m)?;
                for (i, call) in m.tool_calls.iter().enumerate() {
                    let thought_signature = match target.signature_of(&call.id) {
                        Some(own) => Some(Cow::Owned(own)),
                        None => (i == 0).then_some(Cow::Borrowed(FOREIGN_THOUGHT_SIGNATURE)),
                    };
                    parts.push(WirePart {
                        function_call: Some(WireFunctionCall {
                            id: signature::unsigned(&call.id),
                            name: &call.name,
                            args: crate::arguments_object(call)?,
                        }),
                        thought_signature,
                        ..WirePart::default()
                    });
                }
                ("model", parts)
            }
            // Gemini has no system turn inside `contents`: the message's
            // text, marked as the system's, joins the user turn it sits by.
            Role::System => (
                "user",
                vec![WirePart::text(Cow::Owned(m.marked_system_text()))],
            ),
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                let Some(&name) = names.get(id) else {
                    return Err(Failure::new(
                        FailureKind::BadRequest,
                        format!("tool result `{id}` answers no tool call in the conversation"),
                    ));
                };
                let part = WirePart {
                    function_response: Some(WireFunctionResponse {
                        id: signature::unsigned(id),
                        name,
                        response: tool_response(&crate::text_of(m)),
                    }),
                    ..WirePart::default()
                };
                ("user", vec![part])
            }
        };
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => out.push(WireContent { role, parts }),
        }
    }
    Ok(out)
}

/// A message's text and images as parts (empty text left out: Gemini
/// rejects an empty text part).
fn content_parts(m: &Message) -> Result<Vec<WirePart<'_>>, Failure> {
    if let [Part::Text { text }] = m.content.as_slice() {
        // The common case: one text, borrowed.
        return Ok(if text.is_empty() {
            Vec::new()
        } else {
            vec![WirePart::text(Cow::Borrowed(text))]
        });
    }
    let mut parts = Vec::with_capacity(m.content.len() + m.tool_calls.len());
    for p in &m.content {
        match p {
            Part::Text { text } if text.is_empty() => {}
            Part::Text { text } => parts.push(WirePart::text(Cow::Borrowed(text))),
            Part::Image { url, .. } => {
                let Some((mime_type, data)) = Part::inline_image(url) else {
                    // The engine marks remote images unsupported for this
                    // protocol and never routes them here.
                    return Err(Failure::new(
                        FailureKind::BadRequest,
                        "Gemini takes images only as inline `data:` URLs, not remote URLs",
                    ));
                };
                parts.push(WirePart {
                    inline_data: Some(WireBlob { mime_type, data }),
                    ..WirePart::default()
                });
            }
        }
    }
    Ok(parts)
}

/// A tool's result as a `functionResponse.response` object: the text itself
/// when it is a JSON object, else `{"result": text}`.
fn tool_response(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => serde_json::json!({ "result": text }),
    }
}

// === the response ===

/// What one response (or one streamed chunk) says.
struct Chunk {
    text: String,
    /// `(name, arguments as compact JSON text, thought signature)` of each
    /// function call.
    calls: Vec<(String, String, Option<String>)>,
    finish_reason: Option<String>,
}

/// Reads a response: refusal signals become a content-filter failure; the
/// text, the function calls and the finish reason otherwise.
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
fn nothing_usable(reason: Option<&str>) -> Failure {
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

fn too_many_calls() -> Failure {
    Failure::new(
        FailureKind::MalformedResponse,
        format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
    )
}

fn usage(response: &WireResponse) -> Option<Usage> {
    let u = response.usage_metadata.as_ref()?;
    Some(Usage {
        input_tokens: u.prompt_token_count.unwrap_or(0),
        output_tokens: u.candidates_token_count.unwrap_or(0) + u.thoughts_token_count.unwrap_or(0),
    })
}

/// The neutral finish reason. Gemini says `STOP` for an answer made of
/// function calls too.
fn finish_reason(reason: Option<&str>, called: bool) -> FinishReason {
    match reason {
        Some("STOP") | None if called => FinishReason::ToolCalls,
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
/// Gemini sends each function call whole in one chunk; each becomes one
/// [`StreamEvent::ToolCall`] with the next index, a fresh id, the name and
/// all of its arguments.
#[derive(Debug, Default)]
pub(crate) struct GeminiStream {
    model: String,
    text_seen: bool,
    /// Tool calls emitted so far (the next one's index).
    calls: u32,
    usage: Option<Usage>,
    stray: StrayJson,
    /// The target whose thought signatures the calls' ids carry.
    target: Target,
}

impl GeminiStream {
    /// A parser for one streamed answer from `model` (of an unnamed
    /// provider).
    pub(crate) fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            target: Target::new("", model),
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
        // Thought parts (`thought: true`): the model is reasoning.
        let thoughts = thought_text(&chunk);
        if !thoughts.is_empty() {
            out.push_back(Ok(StreamEvent::Reasoning(thoughts)));
        }
        match assess(&chunk) {
            Err(failure) => out.push_back(Err(failure)),
            Ok(Chunk {
                text,
                calls,
                finish_reason: reason,
            }) => {
                if !text.is_empty() {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(text)));
                }
                for (name, arguments, signature) in calls {
                    if self.calls >= MAX_TOOL_CALLS {
                        out.push_back(Err(too_many_calls()));
                        return;
                    }
                    out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                        index: self.calls,
                        id: Some(
                            self.target
                                .sign(crate::mint_call_id(), signature.as_deref()),
                        ),
                        name: Some(name),
                        arguments,
                    })));
                    self.calls += 1;
                }
                if let Some(reason) = reason {
                    if self.text_seen || self.calls > 0 {
                        out.push_back(Ok(StreamEvent::Finish {
                            finish_reason: finish_reason(Some(&reason), self.calls > 0),
                            usage: self.usage,
                            model: Some(self.model.clone()),
                        }));
                    } else {
                        out.push_back(Err(nothing_usable(Some(&reason))));
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

/// The text of a chunk's thought parts (its reasoning summary).
fn thought_text(chunk: &WireResponse) -> String {
    chunk
        .candidates
        .iter()
        .flatten()
        .take(1)
        .filter_map(|c| c.content.as_ref()?.parts.as_ref())
        .flatten()
        .filter(|p| p.thought == Some(true))
        .filter_map(|p| p.text.as_deref())
        .collect()
}

fn mid_stream_error(value: &Value) -> Option<Failure> {
    let error: WireError = serde_json::from_value(error_of(value)?.clone()).ok()?;
    let mut f = classify_error_object(None, &HeaderMap::new(), &error);
    f.detail = format!("error mid-stream: {}", f.detail);
    Some(f)
}

// === JSON Schema for Gemini ===

/// JSON Schema reduced to what Gemini accepts.
///
/// Function `parameters` take Gemini's `Schema`, "a select subset of an
/// OpenAPI 3.0 schema object" whose fields are `type`, `format`, `title`,
/// `description`, `nullable`, `enum` (strings), `maxItems`, `minItems`,
/// `properties`, `required`, `minProperties`, `maxProperties`, `minLength`,
/// `maxLength`, `pattern`, `example`, `anyOf`, `propertyOrdering`,
/// `default`, `items`, `minimum`, `maximum` (ai.google.dev/api/caching#Schema,
/// the generativelanguage v1beta discovery document). An unknown field makes
/// the request fail, so everything else is removed (or rewritten: `$ref`
/// inlined, `const` to `enum`, `oneOf` to `anyOf`, `allOf` merged, type
/// unions to `nullable`/`anyOf`).
///
/// A JSON answer's schema goes in `responseJsonSchema`, which takes JSON
/// Schema itself; of it "only the following properties are supported":
/// `$id`, `$defs`, `$ref`, `$anchor`, `type`, `format`, `title`,
/// `description`, `enum` (strings and numbers), `items`, `prefixItems`,
/// `minItems`, `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf`,
/// `properties`, `additionalProperties`, `required`, and the non-standard
/// `propertyOrdering`; beside a `$ref` only `$` keywords may stand
/// (GenerationConfig.responseJsonSchema in the v1beta reference).
pub(crate) mod schema {
    use serde_json::{Map, Value, json};

    /// How deep a schema may nest (with `$ref`s inlined) before the rest is
    /// cut off, and how many schema nodes the reduction may produce; a
    /// schema past either is garbage or a reference bomb.
    const MAX_DEPTH: usize = 32;
    const MAX_NODES: usize = 10_000;

    /// A function's `parameters`, or `None` when the function takes none
    /// (Gemini rejects an `OBJECT` whose `properties` are empty).
    pub(crate) fn parameters(schema: &Value) -> Option<Value> {
        let mut reducer = Reducer {
            root: schema,
            refs: Vec::new(),
            nodes: 0,
        };
        let reduced = reducer.reduce(schema, 0);
        let no_properties = reduced
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        let is_object = reduced.get("type").and_then(Value::as_str) == Some("OBJECT");
        (!(is_object && no_properties) && reduced.as_object().is_some_and(|o| !o.is_empty()))
            .then_some(reduced)
    }

    /// Reduces one schema (with `root` as the document `$ref`s point into)
    /// to the OpenAPI subset of Gemini's `Schema`.
    struct Reducer<'a> {
        root: &'a Value,
        /// The `$ref`s being inlined, outermost first (a cycle stops here).
        refs: Vec<String>,
        nodes: usize,
    }

    impl Reducer<'_> {
        fn reduce(&mut self, schema: &Value, depth: usize) -> Value {
            self.nodes += 1;
            let Some(s) = schema.as_object() else {
                // `true` / `false` schemas and garbage: no constraint.
                return Value::Object(Map::new());
            };
            if depth > MAX_DEPTH || self.nodes > MAX_NODES {
                return open_object(s);
            }
            if let Some(reference) = s.get("$ref").and_then(Value::as_str) {
                return self.inline(reference, s, depth);
            }
            let merged;
            let s = match s.get("allOf").and_then(Value::as_array) {
                Some(all) => {
                    merged = merge_all_of(s, all, self.root);
                    &merged
                }
                None => s,
            };
            self.reduce_object(s, depth)
        }

        /// A `$ref`'s target, inlined; siblings like `description` kept
        /// over the target's. A cycle or a reference that leads nowhere
        /// becomes an open object.
        fn inline(&mut self, reference: &str, s: &Map<String, Value>, depth: usize) -> Value {
            let target = resolve(self.root, reference);
            let Some(target) = target.filter(|_| !self.refs.iter().any(|r| r == reference)) else {
                return open_object(s);
            };
            self.refs.push(reference.to_owned());
            let mut out = self.reduce(target, depth + 1);
            self.refs.pop();
            if let Some(o) = out.as_object_mut() {
                for key in ["description", "title"] {
                    if let Some(v @ Value::String(_)) = s.get(key) {
                        o.insert(key.to_owned(), v.clone());
                    }
                }
            }
            out
        }

        fn reduce_object(&mut self, s: &Map<String, Value>, depth: usize) -> Value {
            let mut out = Map::new();
            let mut nullable = s.get("nullable") == Some(&Value::Bool(true));

            // `type`: one name, upper case; `null` in a union is `nullable`.
            let mut any_of_types = Vec::new();
            match s.get("type") {
                Some(Value::String(t)) => match gemini_type(t) {
                    Some("NULL") => nullable = true,
                    Some(t) => {
                        out.insert("type".into(), json!(t));
                    }
                    None => {}
                },
                Some(Value::Array(types)) => {
                    let named: Vec<&str> = types
                        .iter()
                        .filter_map(Value::as_str)
                        .filter_map(gemini_type)
                        .collect();
                    nullable |= named.contains(&"NULL");
                    let named: Vec<&str> = named.into_iter().filter(|t| *t != "NULL").collect();
                    match named.as_slice() {
                        [] => {}
                        [one] => {
                            out.insert("type".into(), json!(one));
                        }
                        many => any_of_types = many.to_vec(),
                    }
                }
                _ => {}
            }
            let ty = out.get("type").and_then(Value::as_str).map(str::to_owned);

            for key in ["title", "description", "pattern"] {
                if let Some(v @ Value::String(_)) = s.get(key) {
                    out.insert(key.into(), v.clone());
                }
            }
            for key in [
                "minimum",
                "maximum",
                "minItems",
                "maxItems",
                "minLength",
                "maxLength",
                "minProperties",
                "maxProperties",
            ] {
                if let Some(v @ Value::Number(_)) = s.get(key) {
                    out.insert(key.into(), v.clone());
                }
            }
            if let Some(v) = s.get("example") {
                out.insert("example".into(), v.clone());
            }
            // Gemini accepts few formats and fails on others (Firebase's
            // `Schema.format`: "must be either 'enum' or 'date-time'" for
            // strings); the number formats are OpenAPI's.
            if let Some(f) = s.get("format").and_then(Value::as_str) {
                let known = match ty.as_deref() {
                    Some("STRING") => matches!(f, "enum" | "date-time"),
                    Some("NUMBER") => matches!(f, "float" | "double"),
                    Some("INTEGER") => matches!(f, "int32" | "int64"),
                    _ => false,
                };
                if known {
                    out.insert("format".into(), json!(f));
                }
            }

            // `enum` (and `const`): strings only, on a string.
            let values = match (s.get("enum"), s.get("const")) {
                (Some(Value::Array(values)), _) => Some(values.clone()),
                (None, Some(c)) => Some(vec![c.clone()]),
                _ => None,
            };
            if let Some(values) = values {
                nullable |= values.contains(&Value::Null);
                let values: Vec<&Value> = values.iter().filter(|v| !v.is_null()).collect();
                let strings = !values.is_empty() && values.iter().all(|v| v.is_string());
                if strings && matches!(ty.as_deref(), None | Some("STRING")) {
                    out.insert("type".into(), json!("STRING"));
                    out.insert(
                        "enum".into(),
                        Value::Array(values.into_iter().cloned().collect()),
                    );
                }
            }

            if let Some(Value::Object(properties)) = s.get("properties") {
                let reduced: Map<String, Value> = properties
                    .iter()
                    .map(|(name, p)| (name.clone(), self.reduce(p, depth + 1)))
                    .collect();
                if let Some(Value::Array(required)) = s.get("required") {
                    let required: Vec<Value> = required
                        .iter()
                        .filter(|r| r.as_str().is_some_and(|r| reduced.contains_key(r)))
                        .cloned()
                        .collect();
                    if !required.is_empty() {
                        out.insert("required".into(), Value::Array(required));
                    }
                }
                if let Some(Value::Array(order)) = s.get("propertyOrdering") {
                    if order
                        .iter()
                        .all(|o| o.as_str().is_some_and(|o| reduced.contains_key(o)))
                    {
                        out.insert("propertyOrdering".into(), Value::Array(order.clone()));
                    }
                }
                if !reduced.is_empty() {
                    out.insert("properties".into(), Value::Object(reduced));
                }
            }
            if let Some(items @ Value::Object(_)) = s.get("items") {
                let reduced = self.reduce(items, depth + 1);
                out.insert("items".into(), reduced);
            }

            // `anyOf` (and `oneOf`, which Gemini lacks): `null` members
            // become `nullable`, and a single member left stands alone.
            let mut members: Vec<Value> = any_of_types
                .into_iter()
                .map(|t| json!({ "type": t }))
                .collect();
            for key in ["anyOf", "oneOf"] {
                for m in s.get(key).and_then(Value::as_array).into_iter().flatten() {
                    let reduced = self.reduce(m, depth + 1);
                    let null_only = reduced.get("type").is_none()
                        && (m.get("type").and_then(Value::as_str) == Some("null")
                            || m.get("const") == Some(&Value::Null));
                    if null_only {
                        nullable = true;
                    } else {
                        nullable |= reduced.get("nullable") == Some(&Value::Bool(true));
                        members.push(reduced);
                    }
                }
            }
            match members.len() {
                0 => {}
                1 if out.get("type").is_none() => {
                    if let Some(Value::Object(only)) = members.pop() {
                        for (k, v) in only {
                            out.entry(k).or_insert(v);
                        }
                    }
                }
                _ => {
                    out.insert("anyOf".into(), Value::Array(members));
                }
            }
            if nullable {
                out.insert("nullable".into(), Value::Bool(true));
            }
            Value::Object(out)
        }
    }

    /// What stands where a schema cannot be inlined (a cycle, a reference
    /// that leads nowhere, too deep): an object, keeping its description.
    fn open_object(s: &Map<String, Value>) -> Value {
        let mut out = Map::new();
        out.insert("type".into(), json!("OBJECT"));
        if let Some(d @ Value::String(_)) = s.get("description") {
            out.insert("description".into(), d.clone());
        }
        Value::Object(out)
    }

    /// Gemini's name for a JSON Schema type.
    fn gemini_type(t: &str) -> Option<&'static str> {
        Some(match t {
            "string" => "STRING",
            "number" => "NUMBER",
            "integer" => "INTEGER",
            "boolean" => "BOOLEAN",
            "array" => "ARRAY",
            "object" => "OBJECT",
            "null" => "NULL",
            _ => return None,
        })
    }

    /// A local `$ref` (`#`, `#/$defs/…`, `#/definitions/…`, any JSON
    /// pointer into the document); remote ones resolve to nothing (the
    /// gateway never fetches URLs).
    fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(root);
        }
        let decoded = percent_decode(pointer)?;
        root.pointer(&decoded)
    }

    /// `%XX` escapes of a URI fragment, decoded.
    fn percent_decode(s: &str) -> Option<String> {
        if !s.contains('%') {
            return Some(s.to_owned());
        }
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).ok()
    }

    /// A schema with its `allOf` members folded in: properties and
    /// `required` united, other keywords kept from the first that says them.
    fn merge_all_of(s: &Map<String, Value>, all: &[Value], root: &Value) -> Map<String, Value> {
        let mut out: Map<String, Value> = s
            .iter()
            .filter(|(k, _)| *k != "allOf")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for member in all {
            // One level of `$ref` in a member is followed.
            let member = match member.get("$ref").and_then(Value::as_str) {
                Some(r) => resolve(root, r).unwrap_or(member),
                None => member,
            };
            let Some(member) = member.as_object() else {
                continue;
            };
            for (k, v) in member {
                match (k.as_str(), out.get_mut(k), v) {
                    ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                        for (name, p) in theirs {
                            mine.entry(name.clone()).or_insert_with(|| p.clone());
                        }
                    }
                    ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                        for r in theirs {
                            if !mine.contains(r) {
                                mine.push(r.clone());
                            }
                        }
                    }
                    (_, None, _) => {
                        out.insert(k.clone(), v.clone());
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// A JSON answer's schema for `responseJsonSchema`: JSON Schema, with
    /// the keywords Gemini does not support removed (`const` becomes
    /// `enum`, `definitions` becomes `$defs`).
    pub(crate) fn response_json_schema(schema: &Value) -> Value {
        response_node(schema, 0)
    }

    fn response_node(schema: &Value, depth: usize) -> Value {
        let Some(s) = schema.as_object() else {
            return schema.clone(); // `true` / `false` schemas stand as they are
        };
        let mut out = Map::new();
        if depth > MAX_DEPTH {
            return Value::Object(out);
        }
        let has_ref = s.contains_key("$ref");
        for (k, v) in s {
            // Beside a `$ref`, only `$` keywords may stand.
            if has_ref && !k.starts_with('$') && k != "definitions" {
                continue;
            }
            let sub = |v: &Value| response_node(v, depth + 1);
            let map_of = |v: &Value| match v {
                Value::Object(m) => Some(Value::Object(
                    m.iter().map(|(name, p)| (name.clone(), sub(p))).collect(),
                )),
                _ => None,
            };
            let reduced = match k.as_str() {
                "$id" | "$anchor" | "title" | "description" | "format" => {
                    v.is_string().then(|| v.clone())
                }
                "$ref" => v
                    .as_str()
                    .map(|r| json!(r.replacen("#/definitions/", "#/$defs/", 1))),
                "type" | "required" | "propertyOrdering" => Some(v.clone()),
                "minItems" | "maxItems" | "minimum" | "maximum" => v.is_number().then(|| v.clone()),
                "enum" => v.as_array().map(|values| {
                    Value::Array(
                        values
                            .iter()
                            .filter(|x| x.is_string() || x.is_number())
                            .cloned()
                            .collect(),
                    )
                }),
                "const" if v.is_string() || v.is_number() => {
                    out.entry("enum").or_insert_with(|| json!([v]));
                    None
                }
                "items" | "additionalProperties" => Some(sub(v)),
                "prefixItems" | "anyOf" | "oneOf" => v
                    .as_array()
                    .map(|members| Value::Array(members.iter().map(sub).collect())),
                "properties" | "$defs" => map_of(v),
                "definitions" => {
                    if let Some(defs) = map_of(v) {
                        out.entry("$defs").or_insert(defs);
                    }
                    None
                }
                _ => None,
            };
            if let Some(reduced) = reduced {
                out.insert(k.clone(), reduced);
            }
        }
        Value::Object(out)
    }
}

// === the wire ===

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    contents: Vec<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[WireTool<'a>; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<WireGenerationConfig<'a>>,
}

#[derive(Serialize)]
struct WireContent<'a> {
    role: &'static str,
    parts: Vec<WirePart<'a>>,
}

#[derive(Serialize)]
struct WireSystem<'a> {
    parts: [WirePart<'a>; 1],
}

/// One part of a turn: exactly one of its data fields is set.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<WireBlob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<WireFunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<WireFunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<Cow<'static, str>>,
}

impl<'a> WirePart<'a> {
    fn text(text: Cow<'a, str>) -> Self {
        Self {
            text: Some(text),
            ..Self::default()
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireBlob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

/// A call as the history holds it; the `id` is optional on the Gemini
/// Developer API (ai.google.dev/api/caching#FunctionCall) and is the
/// client's own, so a result pairs with its call by id as well as by name.
#[derive(Serialize)]
struct WireFunctionCall<'a> {
    id: &'a str,
    name: &'a str,
    args: Value,
}

#[derive(Serialize)]
struct WireFunctionResponse<'a> {
    id: &'a str,
    name: &'a str,
    response: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireTool<'a> {
    function_declarations: Vec<WireFunctionDeclaration<'a>>,
}

#[derive(Serialize)]
struct WireFunctionDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    function_calling_config: WireFunctionCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireFunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

impl WireFunctionCallingConfig<'_> {
    fn mode(mode: &'static str) -> Self {
        Self {
            mode,
            allowed_function_names: None,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<Value>,
}

impl WireGenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.max_output_tokens.is_none()
            && self.stop_sequences.is_empty()
            && self.seed.is_none()
            && self.presence_penalty.is_none()
            && self.frequency_penalty.is_none()
            && self.response_mime_type.is_none()
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
#[serde(rename_all = "camelCase")]
struct WireResponsePart {
    text: Option<String>,
    thought: Option<bool>,
    function_call: Option<WireResponseCall>,
    /// On a part with a `functionCall`, carried in the call's id; on a text
    /// part (an answer without calls) not carried: Google says those may be
    /// left out.
    thought_signature: Option<String>,
}

/// A call as Gemini answers it (its optional `id` is not used: the client
/// gets a fresh id of the gateway's).
#[derive(Deserialize)]
struct WireResponseCall {
    name: Option<String>,
    args: Option<Value>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn call_ids_are_fresh_and_well_formed() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| crate::mint_call_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            let hex = id.strip_prefix("call_").unwrap_or_default();
            assert_eq!(hex.len(), 24, "{id}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
    }

    #[test]
    fn parameters_reduce_to_the_schema_subset() {
        let got = schema::parameters(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "unit": {"type": ["string", "null"], "enum": ["c", "f", null], "default": "c"},
                "n": {"type": "integer", "enum": [1, 2], "format": "int32", "exclusiveMinimum": 0},
                "when": {"type": "string", "format": "uri", "examples": ["x"]},
                "kind": {"const": "weather"},
                "where": {"$ref": "#/$defs/place", "description": "the place"},
                "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                "tree": {"$ref": "#/$defs/tree"}
            },
            "required": ["unit", "ghost"],
            "$defs": {
                "place": {"type": "object", "properties": {"city": {"type": "string"}}},
                "tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}
            },
            "strict": true
        }))
        .unwrap_or_default();
        assert_eq!(
            got,
            json!({
                "type": "OBJECT",
                "properties": {
                    "unit": {"type": "STRING", "enum": ["c", "f"], "nullable": true},
                    "n": {"type": "INTEGER", "format": "int32"},
                    "when": {"type": "STRING"},
                    "kind": {"type": "STRING", "enum": ["weather"]},
                    "where": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "description": "the place"},
                    "tags": {"type": "ARRAY", "items": {"type": "STRING", "nullable": true}},
                    "tree": {"type": "OBJECT", "properties": {"kids": {"type": "ARRAY", "items": {"type": "OBJECT"}}}}
                },
                "required": ["unit"]
            })
        );
    }

    #[test]
    fn no_parameters_is_no_schema() {
        assert_eq!(
            schema::parameters(&json!({"type": "object", "properties": {}})),
            None
        );
        assert_eq!(schema::parameters(&json!({"type": "object"})), None);
        assert_eq!(schema::parameters(&json!({})), None);
    }

    #[test]
    fn reference_bombs_stay_bounded() {
        let mut defs = serde_json::Map::new();
        for i in 0..40 {
            defs.insert(
                format!("d{i}"),
                json!({"type": "object", "properties": {
                    "a": {"$ref": format!("#/$defs/d{}", i + 1)},
                    "b": {"$ref": format!("#/$defs/d{}", i + 1)}
                }}),
            );
        }
        let bomb =
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs});
        let got = schema::parameters(&bomb).unwrap_or_default();
        assert!(got.to_string().len() < 4_000_000);
    }

    #[test]
    fn response_schema_keeps_json_schema_minus_the_unsupported() {
        let got = schema::response_json_schema(&json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "pattern": "x"},
                "kind": {"const": "a"},
                "items": {"type": "array", "items": {"$ref": "#/definitions/item", "description": "x"}}
            },
            "definitions": {"item": {"type": ["integer", "null"], "default": 1}},
            "required": ["name"],
            "additionalProperties": false
        }));
        assert_eq!(
            got,
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "kind": {"enum": ["a"]},
                    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}}
                },
                "$defs": {"item": {"type": ["integer", "null"]}},
                "required": ["name"],
                "additionalProperties": false
            })
        );
    }
}
