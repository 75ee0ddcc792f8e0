//! OpenAI's Responses API (`POST {base_url}/responses`), for
//! OpenAI-compatible providers configured with `responses_api = true`.
//!
//! - A client's own Responses body ([`NativeRequest`] of kind
//!   [`ProviderKind::Openai`], which the `/v1/responses` route sets) goes as
//!   sent but for `model` (the target's) and `max_output_tokens` (clamped
//!   to the target's limit), spliced in place like `anthropic_native`.
//! - Reasoning items are signed by the target that produced them: their
//!   `encrypted_content` (and, with `store`, their id) means nothing to
//!   another. The gateway tags the id of every reasoning item a native
//!   target returns (`rs_X` becomes `rs_us<tag>_X`, `<tag>` a hash of the
//!   provider and model) and, when the client sends it back, restores the
//!   id for that same target and drops the item for every other. An
//!   untagged reasoning item with `encrypted_content` (its producer is
//!   unknown) is dropped too. (The splices are `responses_native`'s.)
//! - Any other request (translated clients) is built from the neutral
//!   [`ChatRequest`]: messages as input items, tool calls and results as
//!   `function_call` / `function_call_output` items, tools as function
//!   tools, `text.format` from the response format, `store: false`.
//!
//! Answers: a `response` object (`output` messages, `function_call` items,
//! `status` `incomplete` → length or content filter, `failed` → its error)
//! or the semantic event stream. Errors are classified as Chat Completions
//! errors are (the same error body).

use std::collections::{HashMap, VecDeque};

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, Message, NativeEvent, Part,
    ProviderKind, ProviderSettings, ResponseFormat, Role, StreamEvent, ToolCall, ToolCallDelta,
    ToolChoice, Usage,
};

use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::openai_compat::{WireError, classify_error, classify_error_body};
use crate::responses_native::prepare_native;
use crate::sse::SseItem;

/// A provider speaking the Responses API.
pub(crate) type OpenAiResponses = HttpAdapter<ResponsesProtocol>;

/// The Responses API bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct ResponsesProtocol {
    url: reqwest::Url,
    /// Extra headers and `Authorization` (marked sensitive).
    headers: HeaderMap,
    /// The provider's name: with the model, whose reasoning items are whose.
    provider: String,
    limits: crate::OutputLimits,
    /// The hosted tools a native body may keep here.
    passthrough: understudy_core::passthrough::GatedSet,
}

/// Builds the adapter for a Responses API provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<OpenAiResponses, String> {
    HttpAdapter::new(settings, ResponsesProtocol::new(settings)?)
}

impl ResponsesProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        let headers = crate::openai_compat::bearer_headers(settings)?;
        Ok(Self {
            url: crate::http::endpoint(&format!("{}/responses", settings.base_url))?,
            headers,
            provider: settings.name.clone(),
            limits: crate::OutputLimits::of(settings),
            passthrough: settings.capabilities.passthrough,
        })
    }
}

impl Protocol for ResponsesProtocol {
    type Parser = ResponsesStream;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let tag = target_tag(&self.provider, model);
        let limit = self.limits.limit(model);
        if let Some(native) = request
            .native
            .as_deref()
            .filter(|_| self.forwards_native(request))
        {
            if let Some(body) = prepare_native(&native.body, model, &tag, limit, self.passthrough) {
                return Ok(crate::http::raw_post(
                    client,
                    self.url.clone(),
                    self.headers.clone(),
                    body,
                ));
            }
        }
        let body = translate(
            request,
            model,
            self.limits.clamp(model, request.max_tokens),
            stream,
        )?;
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let tag = target_tag(&self.provider, model);
        parse_response(received, model, &tag)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify_error(status, headers, body)
    }

    fn parser(&self, model: &str, native: bool) -> ResponsesStream {
        ResponsesStream {
            model: model.to_owned(),
            native,
            tag: target_tag(&self.provider, model),
            ..ResponsesStream::default()
        }
    }

    fn forwards_native(&self, request: &ChatRequest) -> bool {
        request
            .native
            .as_deref()
            .is_some_and(|n| n.kind == ProviderKind::Openai)
    }
}

// === reasoning items: whose they are ===

/// Eight hex digits naming a target (FNV-1a of provider and model): the
/// mark in the reasoning-item ids the gateway hands out.
pub(crate) fn target_tag(provider: &str, model: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in provider.bytes().chain([0]).chain(model.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// `rs_X` as the gateway hands it out from the target tagged `tag`.
fn tagged_id(id: &str, tag: &str) -> Option<String> {
    let rest = id.strip_prefix("rs_")?;
    // Already tagged (the provider echoed a tagged id): as it is.
    (!rest.starts_with("us")).then(|| format!("rs_us{tag}_{rest}"))
}

/// `text` (an answer or event as the provider sent it) with the id of every
/// reasoning item in `ids` tagged; the ids are the provider's own (letters,
/// digits, `_`), replaced where they appear as JSON strings.
fn tag_ids(text: &str, ids: &[String], tag: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for id in ids {
        let Some(tagged) = tagged_id(id, tag) else {
            continue;
        };
        let from = format!("\"{id}\"");
        let current = out.as_deref().unwrap_or(text);
        if current.contains(&from) {
            out = Some(current.replace(&from, &format!("\"{tagged}\"")));
        }
    }
    out
}

/// The ids of reasoning items in a `response` object's `output`.
fn reasoning_ids(output: &[Value]) -> Vec<String> {
    output
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("reasoning"))
        .filter_map(|i| i.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

// === the translated body ===

/// A Responses request built from the neutral one.
pub(crate) fn translate(
    request: &ChatRequest,
    model: &str,
    max_output_tokens: Option<u32>,
    stream: bool,
) -> Result<Value, Failure> {
    let mut input = Vec::with_capacity(request.messages.len());
    for m in &request.messages {
        input_items(m, &mut input);
    }
    let mut body = json!({"model": model, "input": input, "store": false});
    let set = |body: &mut Value, key: &str, value: Value| {
        if let Value::Object(o) = body {
            o.insert(key.to_owned(), value);
        }
    };
    if let Some(system) = &request.system {
        set(&mut body, "instructions", json!(system));
    }
    if let Some(n) = max_output_tokens {
        set(&mut body, "max_output_tokens", json!(n));
    }
    if let Some(t) = request.temperature {
        set(&mut body, "temperature", json!(t));
    }
    if let Some(p) = request.top_p {
        set(&mut body, "top_p", json!(p));
    }
    if let Some(user) = &request.user {
        set(&mut body, "user", json!(crate::fitted_user(user, 64)));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    "strict": t.strict.unwrap_or(false),
                })
            })
            .collect();
        set(&mut body, "tools", Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Function(name) => json!({"type": "function", "name": name}),
            };
            set(&mut body, "tool_choice", choice);
        }
        if let Some(p) = request.parallel_tool_calls {
            set(&mut body, "parallel_tool_calls", json!(p));
        }
    }
    if let Some(format) = &request.response_format {
        let format = match format {
            ResponseFormat::Text => json!({"type": "text"}),
            ResponseFormat::JsonObject => json!({"type": "json_object"}),
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict}),
        };
        set(&mut body, "text", json!({"format": format}));
    }
    if stream {
        set(&mut body, "stream", json!(true));
    }
    Ok(body)
}

/// One neutral message as Responses input items.
fn input_items(m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::Tool => out.push(json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id.as_deref().unwrap_or_default(),
            "output": crate::text_of(m),
        })),
        Role::Assistant => {
            let text = crate::text_of(m);
            if !text.is_empty() {
                out.push(json!({"role": "assistant", "content": text}));
            }
            for call in &m.tool_calls {
                out.push(json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }));
            }
        }
        Role::User | Role::System => {
            let role = if m.role == Role::User {
                "user"
            } else {
                "system"
            };
            let content: Vec<Value> = m
                .content
                .iter()
                .map(|p| match p {
                    Part::Text { text } => json!({"type": "input_text", "text": text}),
                    Part::Image { url, detail } => json!({
                        "type": "input_image",
                        "image_url": url,
                        "detail": detail.as_deref().unwrap_or("auto"),
                    }),
                })
                .collect();
            out.push(json!({"role": role, "content": content}));
        }
    }
}

// === answers ===

#[derive(Deserialize)]
struct WireResponse {
    status: Option<String>,
    model: Option<String>,
    #[serde(default)]
    output: Vec<Value>,
    usage: Option<WireUsage>,
    error: Option<Value>,
    incomplete_details: Option<Value>,
}

#[derive(Deserialize, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl WireUsage {
    fn to_usage(self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        }
    }
}

/// Classifies a complete `response` object; `native` holds it with its
/// reasoning ids tagged (the adapter keeps it only for native requests).
fn parse_response(received: &Received, model: &str, tag: &str) -> Result<Completion, Failure> {
    let Received { status, body, .. } = received;
    let parsed: WireResponse =
        crate::http::answer_body(received, "a Responses API response", classify_error)?;
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
        usage: parsed.usage.map(WireUsage::to_usage),
        native,
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

/// How a response with `status` ended: its finish reason, or the failure
/// its error (or content-filter cut) means.
fn end_of(
    status: Option<&str>,
    error: Option<&Value>,
    incomplete: Option<&Value>,
) -> Result<FinishReason, Failure> {
    match status {
        Some("failed") => Err(error_failure(error.unwrap_or(&Value::Null))),
        Some("incomplete") => {
            match incomplete
                .and_then(|d| d.get("reason"))
                .and_then(Value::as_str)
            {
                Some("content_filter") => Err(Failure::new(
                    FailureKind::ContentFilter,
                    "the response is incomplete: content_filter",
                )),
                Some("max_output_tokens") | None => Ok(FinishReason::Length),
                Some(other) => Ok(FinishReason::Other(other.to_owned())),
            }
        }
        _ => Ok(FinishReason::Stop),
    }
}

/// An `error` object (of `response.failed`, or an `error` event) classified
/// as the status its code implies.
fn error_failure(error: &Value) -> Failure {
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

// === streaming ===

/// Parses the Responses API's semantic events up to `response.completed`,
/// `response.incomplete` or `response.failed`.
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    model: String,
    native: bool,
    tag: String,
    /// Function calls by output index: their neutral index.
    calls: HashMap<u64, u32>,
    text_seen: bool,
}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type", default)]
    kind: String,
    delta: Option<String>,
    output_index: Option<u64>,
    item: Option<Value>,
    item_id: Option<String>,
    response: Option<WireResponse>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

impl ResponsesStream {
    /// The data with reasoning ids tagged, for the client.
    fn relayed(&self, data: &str, event: &WireEvent) -> String {
        let mut ids = Vec::new();
        if let Some(item) = &event.item {
            ids.extend(reasoning_ids(std::slice::from_ref(item)));
        }
        if let Some(response) = &event.response {
            ids.extend(reasoning_ids(&response.output));
        }
        ids.extend(
            event
                .item_id
                .iter()
                .filter(|i| i.starts_with("rs_"))
                .cloned(),
        );
        tag_ids(data, &ids, &self.tag).unwrap_or_else(|| data.to_owned())
    }

    fn on_event(&mut self, event: WireEvent, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if let Some(model) = event.response.as_ref().and_then(|r| r.model.clone()) {
            self.model = model;
        }
        match event.kind.as_str() {
            "response.output_text.delta" => {
                if let Some(d) = event.delta.filter(|d| !d.is_empty()) {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(d)));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(d) = event.delta.filter(|d| !d.is_empty()) {
                    out.push_back(Ok(StreamEvent::Reasoning(d)));
                }
            }
            "response.output_item.added" => {
                let Some(item) = event.item else { return };
                if item.get("type").and_then(Value::as_str) != Some("function_call") {
                    return;
                }
                let index = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
                self.calls
                    .insert(event.output_index.unwrap_or_default(), index);
                let str_of = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
                out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                    index,
                    id: str_of("call_id"),
                    name: str_of("name"),
                    arguments: str_of("arguments").unwrap_or_default(),
                })));
            }
            "response.function_call_arguments.delta" => {
                let at = event.output_index.unwrap_or_default();
                if let (Some(&index), Some(d)) = (self.calls.get(&at), event.delta) {
                    out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                        index,
                        id: None,
                        name: None,
                        arguments: d,
                    })));
                }
            }
            "response.refusal.done" => out.push_back(Err(Failure::new(
                FailureKind::ContentFilter,
                "the model refused (response.refusal.done)",
            ))),
            "response.completed" | "response.incomplete" | "response.failed" => {
                let Some(r) = event.response else {
                    out.push_back(Err(Failure::new(
                        FailureKind::MalformedResponse,
                        format!("`{}` without its response", event.kind),
                    )));
                    return;
                };
                self.finish(&r, out);
            }
            "error" => {
                let error = Value::Object(event.rest);
                let mut f = error_failure(&error);
                f.detail = format!("error event mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            _ => {}
        }
    }

    fn finish(&self, r: &WireResponse, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let finish = end_of(
            r.status.as_deref(),
            r.error.as_ref(),
            r.incomplete_details.as_ref(),
        );
        match finish {
            Err(mut f) => {
                f.detail = format!("mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            Ok(_) if !self.text_seen && self.calls.is_empty() => {
                out.push_back(Err(Failure::new(
                    FailureKind::EmptyResponse,
                    "the stream has no output text or function call",
                )));
            }
            Ok(reason) => {
                let finish_reason = match reason {
                    FinishReason::Stop if !self.calls.is_empty() => FinishReason::ToolCalls,
                    other => other,
                };
                out.push_back(Ok(StreamEvent::Finish {
                    finish_reason,
                    usage: r.usage.map(WireUsage::to_usage),
                    model: Some(self.model.clone()),
                }));
            }
        }
    }
}

impl StreamParser for ResponsesStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let SseItem::Event { event, data } = item else {
            return;
        };
        if data.trim() == "[DONE]" {
            return;
        }
        let parsed: WireEvent = match serde_json::from_str(&data) {
            Ok(e) => e,
            Err(e) => {
                out.push_back(Err(crate::http::malformed_event(&e)));
                return;
            }
        };
        if self.native {
            let data = self.relayed(&data, &parsed);
            out.push_back(Ok(StreamEvent::Native(NativeEvent {
                event: event.unwrap_or_default(),
                data,
            })));
        }
        self.on_event(parsed, out);
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        out.push_back(Err(Failure::new(
            FailureKind::StreamInterrupted,
            "the stream ended without response.completed",
        )));
    }

    fn model(&self) -> &str {
        &self.model
    }
}

#[cfg(test)]
#[path = "openai_responses_tests.rs"]
mod tests;
