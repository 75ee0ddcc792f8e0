//! Anthropic's Messages API (`claude`).
//!
//! Refusals (wire-formats §4.4): `stop_reason: "refusal"` on a 200, with or
//! without partial text and `stop_details`; and "Output blocked by content
//! filtering policy", which arrives as a 400 `invalid_request_error` (or as
//! an `error` event mid-stream) but is a content filter, not a bad request.
//!
//! Tools, images and JSON output (issue 15), as the API takes them
//! (anthropic-sdk-python `types/`: `tool_param`, `tool_choice_*_param`,
//! `tool_use_block_param`, `tool_result_block_param`, `*_image_source_param`,
//! `metadata_param`, `output_config_param`):
//! - `tools` become `{name, description, input_schema}`; `tool_choice`
//!   becomes `auto` / `none` / `any` / `{"type":"tool","name"}`, with
//!   `disable_parallel_tool_use` for `parallel_tool_calls: false`.
//! - Assistant tool calls become `tool_use` blocks (`input` is the parsed
//!   arguments object); tool messages become `tool_result` blocks in a user
//!   turn. Consecutive turns of one role are merged, and in a user turn the
//!   tool results come first, as the API requires.
//! - Tool-call ids are sent with every character outside `[a-zA-Z0-9_-]`
//!   mapped to `_`, the same way in `tool_use.id` and
//!   `tool_result.tool_use_id`: a history whose ids another provider minted
//!   is accepted, and the ids the client sees never change.
//! - A history with tool calls but no `tools` declares the called tools with
//!   an empty schema and `tool_choice: none`: the API refuses tool blocks
//!   without tool definitions.
//! - `json_schema` output uses structured outputs (`output_config.format`),
//!   with the schema reduced to the subset the API accepts (as the SDK's
//!   `transform_schema` does); `json_object`, and a schema that cannot be
//!   reduced, get an instruction in the system prompt instead.
//! - Answers: `tool_use` blocks become tool calls (arguments: the compact
//!   JSON of `input`), `stop_reason: "tool_use"` is
//!   [`FinishReason::ToolCalls`]; streamed, each `tool_use` block is one
//!   tool call (numbered 0, 1, … in order) and its `input_json_delta`
//!   fragments are its arguments. `thinking` blocks are left out.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::SystemTime;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use understudy_core::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, Message, Part, ProviderSettings,
    ResponseFormat, Role, StreamEvent, ToolCall, ToolCallDelta, ToolChoice, Usage,
};

use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received, StreamParser};
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// Sent when the request sets no `max_tokens` and the model's output limit
/// is unknown (neither configured nor built in): the Messages API requires
/// one, and every current Claude model allows at least this many.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Added to the system prompt when a JSON object is asked for and the
/// request carries no schema structured outputs can take.
pub const JSON_INSTRUCTION: &str =
    "Answer with only a JSON object: no prose before or after it, no code fences.";

/// An Anthropic provider.
pub(crate) type Anthropic = HttpAdapter<AnthropicProtocol>;

/// The Messages protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct AnthropicProtocol {
    url: reqwest::Url,
    headers: HeaderMap,
    /// Output limits per model, to clamp a client's `max_tokens` and to
    /// give a request without one the model's own.
    limits: crate::OutputLimits,
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
            limits: crate::OutputLimits::of(settings),
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
            limits: crate::OutputLimits::none(),
        }
    }
}

impl AnthropicProtocol {
    /// This provider's headers (its key among them) with the client's
    /// `anthropic-*` headers; no other client header is ever forwarded.
    fn native_headers(&self, native: &understudy_core::NativeRequest) -> HeaderMap {
        let mut headers = self.headers.clone();
        for (name, value) in &native.headers {
            let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) else {
                continue;
            };
            if name.as_str().starts_with("anthropic-") {
                headers.insert(name, value);
            }
        }
        headers
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
        if let Some(native) = request
            .native
            .as_deref()
            .filter(|_| self.forwards_native(request))
        {
            let limit = self.limits.limit(model);
            if let Some(prepared) = crate::anthropic_native::prepare(&native.body, model, limit) {
                if prepared.thinking_off {
                    tracing::debug!(
                        model,
                        "thinking off for this request: its final tool-use turn has no signed thinking block (another provider served it)"
                    );
                }
                // The client's own body, byte for byte but for what
                // `prepare` made valid for this target (and Gemini thought
                // signatures cut from tool ids), with its protocol headers
                // (`anthropic-version`, betas) and query (`beta`).
                let mut url = self.url.clone();
                if let Some(query) = native.query.as_deref() {
                    url.set_query(Some(query));
                }
                return Ok(crate::http::raw_post(
                    client,
                    url,
                    self.native_headers(native),
                    crate::signature::unsigned_json_owned(prepared.body),
                ));
            }
        }
        // A client's limit meant for a larger model is clamped; a request
        // with none gets the model's own (the API requires one).
        let max_tokens = match (request.max_tokens, self.limits.limit(model)) {
            (Some(n), Some(limit)) => n.min(limit),
            (Some(n), None) => n,
            (None, Some(limit)) => limit,
            (None, None) => DEFAULT_MAX_TOKENS,
        };
        let body = wire_request(model, request, stream, max_tokens)?;
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        let native = request
            .native
            .as_deref()
            .filter(|_| self.forwards_native(request))?;
        let body = crate::signature::unsigned_json_owned(
            crate::anthropic_native::prepare(&native.body, model, None)?.body,
        );
        let mut url = self.url.clone();
        url.set_path(&format!(
            "{}/count_tokens",
            url.path().trim_end_matches('/')
        ));
        Some(crate::http::raw_post(
            client,
            url,
            self.native_headers(native),
            body,
        ))
    }

    fn forwards_native(&self, request: &ChatRequest) -> bool {
        request
            .native
            .as_deref()
            .is_some_and(|n| n.kind == understudy_core::ProviderKind::Anthropic)
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
        let blocks = parsed.content.as_deref().unwrap_or_default();
        let text: String = blocks
            .iter()
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
        let tool_calls = blocks
            .iter()
            .filter(|b| b.kind == "tool_use")
            .enumerate()
            .map(|(i, b)| tool_call_of(i, b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|f| f.with_status(*status))?;
        if text.trim().is_empty() && tool_calls.is_empty() {
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
            native: None,
            tool_calls,
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

    fn parser(&self, model: &str, native: bool) -> AnthropicStream {
        AnthropicStream {
            native,
            ..AnthropicStream::for_model(model)
        }
    }
}

/// A `tool_use` block of an answer as a tool call. Its `input` is always an
/// object; anything else is output the client cannot use.
fn tool_call_of(position: usize, block: &WireBlock) -> Result<ToolCall, Failure> {
    let arguments = match &block.input {
        None => "{}".to_owned(),
        Some(input @ Value::Object(_)) => input.to_string(),
        Some(other) => {
            return Err(Failure::new(
                FailureKind::InvalidOutput,
                format!(
                    "the input of tool_use block {position} is not a JSON object: {}",
                    short(&other.to_string())
                ),
            ));
        }
    };
    Ok(ToolCall {
        id: block.id.as_deref().map_or_else(
            || fallback_id(position as u32),
            |id| crate::ids::from_anthropic(id).into_owned(),
        ),
        name: block.name.clone().unwrap_or_default(),
        arguments,
    })
}

/// An id for a `tool_use` block that came without one (the API always sends
/// one): deterministic, and valid as an Anthropic id.
fn fallback_id(index: u32) -> String {
    format!("toolu_understudy_{index}")
}

/// The start of `text`, for a failure's detail.
fn short(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

// === the request ===

/// The request body for `model`.
fn wire_request<'a>(
    model: &'a str,
    request: &'a ChatRequest,
    stream: bool,
    max_tokens: u32,
) -> Result<WireRequest<'a>, Failure> {
    let messages = wire_messages(&request.messages)?;
    let (tools, tool_choice) = if request.tools.is_empty() {
        history_tools(&request.messages)
    } else {
        let tools = request
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: input_schema(t.parameters.as_ref()),
            })
            .collect();
        let choice = wire_tool_choice(
            request.tool_choice.as_ref(),
            request.parallel_tool_calls == Some(false),
        );
        (tools, choice)
    };
    let (output_config, json_instruction) = match &request.response_format {
        None | Some(ResponseFormat::Text) => (None, None),
        Some(ResponseFormat::JsonObject) => (None, Some(Cow::Borrowed(JSON_INSTRUCTION))),
        Some(ResponseFormat::JsonSchema { schema, .. }) => match structured_schema(schema) {
            Some(schema) => (
                Some(WireOutputConfig {
                    format: WireOutputFormat {
                        kind: "json_schema",
                        schema,
                    },
                }),
                None,
            ),
            None => (
                None,
                Some(Cow::Owned(format!(
                    "Answer with only a JSON object that is valid against this JSON Schema: \
                     no prose before or after it, no code fences.\n{schema}"
                ))),
            ),
        },
    };
    let system = match (request.system.as_deref(), json_instruction) {
        (system, None) => system.map(Cow::Borrowed),
        (None | Some(""), Some(instruction)) => Some(instruction),
        (Some(system), Some(instruction)) => Some(Cow::Owned(format!("{system}\n\n{instruction}"))),
    };
    // The Messages API accepts 0 to 1; the neutral range is 0 to 2.
    let temperature = request.temperature.map(|t| t.clamp(0.0, 1.0));
    Ok(WireRequest {
        model,
        max_tokens,
        system,
        messages,
        temperature,
        // Recent models refuse `temperature` and `top_p` together, and the
        // softened retry sets a temperature: the temperature wins.
        top_p: request.top_p.filter(|_| temperature.is_none()),
        // The API refuses stop sequences that are empty or only whitespace.
        stop_sequences: request
            .stop
            .iter()
            .map(String::as_str)
            .filter(|s| !s.trim().is_empty())
            .collect(),
        stream,
        tools,
        tool_choice,
        metadata: request
            .user
            .as_deref()
            .filter(|u| !u.is_empty())
            .map(|user_id| WireMetadata { user_id }),
        output_config,
    })
}

/// For a request that offers no tools: the API refuses tool blocks without
/// tool definitions, so the tools the history called are declared (with an
/// empty schema), and calling them is forbidden, as the client offered none.
fn history_tools(messages: &[Message]) -> (Vec<WireTool<'_>>, Option<WireToolChoice<'_>>) {
    let mut tools: Vec<WireTool<'_>> = Vec::new();
    for call in messages.iter().flat_map(|m| &m.tool_calls) {
        if !tools.iter().any(|t| t.name == call.name) {
            tools.push(WireTool {
                name: &call.name,
                description: None,
                input_schema: input_schema(None),
            });
        }
    }
    let choice = (!tools.is_empty()).then(|| WireToolChoice::plain("none"));
    (tools, choice)
}

/// A tool's `input_schema`: its parameters, an object schema (`type` added
/// when missing, since the API requires it), or an empty object schema.
fn input_schema(parameters: Option<&Value>) -> Cow<'_, Value> {
    match parameters {
        Some(schema @ Value::Object(p)) if p.contains_key("type") => Cow::Borrowed(schema),
        Some(Value::Object(p)) => {
            let mut p = p.clone();
            p.insert("type".into(), Value::from("object"));
            Cow::Owned(Value::Object(p))
        }
        _ => Cow::Owned(serde_json::json!({"type": "object", "properties": {}})),
    }
}

/// `tool_choice` on the wire; `None` leaves the API's default (`auto`, with
/// parallel calls allowed).
fn wire_tool_choice(choice: Option<&ToolChoice>, single: bool) -> Option<WireToolChoice<'_>> {
    let disable = single.then_some(true);
    Some(match choice {
        None if single => WireToolChoice {
            disable_parallel_tool_use: disable,
            ..WireToolChoice::plain("auto")
        },
        None => return None,
        Some(ToolChoice::Auto) => WireToolChoice {
            disable_parallel_tool_use: disable,
            ..WireToolChoice::plain("auto")
        },
        // `none` takes no `disable_parallel_tool_use`.
        Some(ToolChoice::None) => WireToolChoice::plain("none"),
        Some(ToolChoice::Required) => WireToolChoice {
            disable_parallel_tool_use: disable,
            ..WireToolChoice::plain("any")
        },
        Some(ToolChoice::Function(name)) => WireToolChoice {
            name: Some(name),
            disable_parallel_tool_use: disable,
            ..WireToolChoice::plain("tool")
        },
    })
}

/// A tool-call id as the API takes it (`^[a-zA-Z0-9_-]+$`), injectively
/// ([`crate::ids::anthropic`]): deterministic, so a `tool_use` and the
/// `tool_result` answering it still match, and no two ids meet. A Gemini
/// thought signature carried in the id stays out: it belongs to the Gemini
/// target that made it.
fn wire_tool_id(id: &str) -> Cow<'_, str> {
    crate::ids::anthropic(id)
}

/// The conversation as alternating user and assistant turns.
fn wire_messages(messages: &[Message]) -> Result<Vec<WireMessage<'_>>, Failure> {
    let mut turns: Vec<(&'static str, Vec<WireBlockOut<'_>>)> = Vec::with_capacity(messages.len());
    for m in messages {
        let role = match m.role {
            Role::User | Role::Tool | Role::System => "user",
            Role::Assistant => "assistant",
        };
        let mut blocks = Vec::with_capacity(m.content.len() + m.tool_calls.len());
        if m.role == Role::System {
            // A translated request has no mid-conversation system turn (a
            // beta): the message's text, marked as the system's, joins the
            // user turn it sits by.
            blocks.push(WireBlockOut::Text {
                text: Cow::Owned(m.marked_system_text()),
            });
        } else if m.role == Role::Tool {
            blocks.push(WireBlockOut::ToolResult {
                tool_use_id: wire_tool_id(m.tool_call_id.as_deref().unwrap_or_default()),
                content: tool_result_content(m),
            });
        } else {
            blocks.extend(content_blocks(m));
            if m.role == Role::Assistant {
                for call in &m.tool_calls {
                    blocks.push(WireBlockOut::ToolUse {
                        id: wire_tool_id(&call.id),
                        name: &call.name,
                        input: crate::arguments_object(call)?,
                    });
                }
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // Tool results first, then anything else (stable).
                blocks.sort_by_key(|b| !matches!(b, WireBlockOut::ToolResult { .. }));
            }
            let content = match blocks.as_slice() {
                [WireBlockOut::Text { .. }] => match blocks.pop() {
                    Some(WireBlockOut::Text { text }) => WireContent::Text(text),
                    _ => WireContent::Blocks(blocks),
                },
                _ => WireContent::Blocks(blocks),
            };
            WireMessage { role, content }
        })
        .collect())
}

/// A turn's text and images as blocks; blank text is left out (the API
/// refuses text blocks without non-whitespace text).
fn content_blocks(m: &Message) -> impl Iterator<Item = WireBlockOut<'_>> {
    m.content.iter().filter_map(|p| match p {
        Part::Text { text } if text.trim().is_empty() => None,
        Part::Text { text } => Some(WireBlockOut::Text {
            text: Cow::Borrowed(text),
        }),
        Part::Image { url, .. } => Some(WireBlockOut::Image {
            source: image_source(url),
        }),
    })
}

/// An image's source: inline base64 for a `data:` URL, else the URL.
fn image_source(url: &str) -> WireImageSource<'_> {
    match Part::inline_image(url) {
        Some((media_type, data)) => WireImageSource::Base64 { media_type, data },
        None => WireImageSource::Url { url },
    }
}

/// A tool message's content: its text, or text and image blocks; nothing
/// when it is blank.
fn tool_result_content(m: &Message) -> Option<WireContent<'_>> {
    if m.content.iter().any(|p| matches!(p, Part::Image { .. })) {
        return Some(WireContent::Blocks(content_blocks(m).collect()));
    }
    let text = crate::text_of(m);
    (!text.trim().is_empty()).then_some(WireContent::Text(text))
}

/// String formats structured outputs accept (anthropic-sdk-python
/// `lib/_parse/_transform.py`, `SupportedStringFormats`).
const STRING_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// How deep a schema may nest before it goes to the prompt instead.
const SCHEMA_DEPTH: usize = 64;

/// `schema` reduced to what structured outputs accept (platform docs,
/// structured-outputs "JSON Schema limitations"): every object closed with
/// `additionalProperties: false`, `oneOf` as `anyOf`, string formats and
/// `minItems` kept only where supported, and every other constraint
/// (`minimum`, `maxLength`, `pattern`, …) moved into the description, as
/// the SDK's `transform_schema` does. The gateway still validates the
/// answer against the original schema. `None` when a part of the schema has
/// no shape the API could take (a boolean schema, a schema without `type`,
/// `enum`, `const`, `anyOf`, `oneOf`, `allOf` or `$ref`, tuple `items`).
fn structured_schema(schema: &Value) -> Option<Value> {
    reduce_schema(schema, 0)
}

fn reduce_schema(schema: &Value, depth: usize) -> Option<Value> {
    if depth > SCHEMA_DEPTH {
        return None;
    }
    let mut rest = schema.as_object()?.clone();
    let mut out = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(defs) = rest.remove(key) {
            let defs = defs
                .as_object()?
                .iter()
                .map(|(name, s)| Some((name.clone(), reduce_schema(s, depth + 1)?)))
                .collect::<Option<Map<_, _>>>()?;
            out.insert(key.into(), Value::Object(defs));
        }
    }
    if let Some(reference) = rest.remove("$ref") {
        out.insert("$ref".into(), reference);
        return Some(Value::Object(out));
    }
    let mut shaped = false;
    for key in ["enum", "const"] {
        if let Some(v) = rest.remove(key) {
            out.insert(key.into(), v);
            shaped = true;
        }
    }
    for (from, to) in [("anyOf", "anyOf"), ("oneOf", "anyOf"), ("allOf", "allOf")] {
        if let Some(list) = rest.remove(from) {
            if out.contains_key(to) {
                return None;
            }
            let list = list
                .as_array()?
                .iter()
                .map(|s| reduce_schema(s, depth + 1))
                .collect::<Option<Vec<_>>>()?;
            out.insert(to.into(), Value::Array(list));
            shaped = true;
        }
    }
    let kind = rest.remove("type");
    let is = |name: &str| match &kind {
        Some(Value::String(k)) => k == name,
        Some(Value::Array(ks)) => ks.iter().any(|k| k == name),
        _ => false,
    };
    let (object, string, array) = (is("object"), is("string"), is("array"));
    if let Some(kind) = kind {
        out.insert("type".into(), kind);
        shaped = true;
    }
    if !shaped {
        return None;
    }
    for key in ["description", "title", "default"] {
        if let Some(v) = rest.remove(key) {
            out.insert(key.into(), v);
        }
    }
    for key in ["$schema", "$id", "$comment"] {
        rest.remove(key);
    }
    if object {
        let properties = match rest.remove("properties") {
            Some(Value::Object(p)) => p
                .iter()
                .map(|(name, s)| Some((name.clone(), reduce_schema(s, depth + 1)?)))
                .collect::<Option<Map<_, _>>>()?,
            Some(_) => return None,
            None => Map::new(),
        };
        out.insert("properties".into(), Value::Object(properties));
        rest.remove("additionalProperties");
        out.insert("additionalProperties".into(), Value::Bool(false));
        if let Some(required) = rest.remove("required") {
            out.insert("required".into(), required);
        }
    }
    if string {
        if let Some(format) = rest.remove("format") {
            if format.as_str().is_some_and(|f| STRING_FORMATS.contains(&f)) {
                out.insert("format".into(), format);
            } else {
                rest.insert("format".into(), format);
            }
        }
    }
    if array {
        match rest.remove("items") {
            Some(items @ Value::Object(_)) => {
                out.insert("items".into(), reduce_schema(&items, depth + 1)?);
            }
            Some(_) => return None,
            None => {}
        }
        if let Some(min) = rest.remove("minItems") {
            if matches!(min.as_u64(), Some(0 | 1)) {
                out.insert("minItems".into(), min);
            } else {
                rest.insert("minItems".into(), min);
            }
        }
    }
    if !rest.is_empty() {
        let constraints = rest
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) => format!("{d}\n\n{{{constraints}}}"),
            None => format!("{{{constraints}}}"),
        };
        out.insert("description".into(), Value::String(description));
    }
    Some(Value::Object(out))
}

// === answers ===

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
        Some("tool_use") => FinishReason::ToolCalls,
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
    /// Pass every event on as sent, too (a natively forwarded request).
    native: bool,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    stop_reason: Option<String>,
    text_seen: bool,
    /// The `tool_use` blocks so far, in order: the position is the tool
    /// call's index.
    tools: Vec<StreamedTool>,
    /// Bytes of tool-call arguments so far (bounded like text).
    argument_bytes: usize,
    stray: StrayJson,
}

/// One `tool_use` block of a stream.
#[derive(Debug)]
struct StreamedTool {
    /// Its content-block index (text and thinking blocks count too).
    block: u64,
    /// A non-empty `input` the block started with; sent as the arguments
    /// if no `input_json_delta` follows (the SDK's accumulator keeps it
    /// then too).
    preset: Option<String>,
    /// Some arguments text has been sent for it.
    sent: bool,
}

impl AnthropicStream {
    /// A parser for one streamed answer from `model`.
    pub(crate) fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }

    /// The `tool_use` block at content-block `index`, with its call index.
    fn tool_at(&mut self, index: Option<u64>) -> Option<(u32, &mut StreamedTool)> {
        let index = index?;
        self.tools
            .iter_mut()
            .enumerate()
            .rev()
            .find(|(_, t)| t.block == index)
            .map(|(i, t)| (u32::try_from(i).unwrap_or(u32::MAX), t))
    }

    /// A tool call ended with no arguments text: sends the input it started
    /// with, or `{}`, so that its arguments always parse.
    fn close_tool(index: u32, tool: &mut StreamedTool) -> Option<StreamEvent> {
        if tool.sent {
            return None;
        }
        tool.sent = true;
        Some(StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: None,
            name: None,
            arguments: tool.preset.take().unwrap_or_else(|| "{}".to_owned()),
        }))
    }

    fn on_block_start(
        &mut self,
        index: Option<u64>,
        block: Option<WireBlock>,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        let Some(block) = block.filter(|b| b.kind == "tool_use") else {
            return;
        };
        let call = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
        let preset = match block.input {
            Some(Value::Object(m)) if !m.is_empty() => Some(Value::Object(m).to_string()),
            _ => None,
        };
        self.tools.push(StreamedTool {
            block: index.unwrap_or(u64::MAX),
            preset,
            sent: false,
        });
        out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
            index: call,
            id: Some(block.id.as_deref().map_or_else(
                || fallback_id(call),
                |id| crate::ids::from_anthropic(id).into_owned(),
            )),
            name: Some(block.name.unwrap_or_default()),
            arguments: String::new(),
        })));
    }

    fn on_block_delta(
        &mut self,
        index: Option<u64>,
        delta: WireDelta,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        if delta.kind.as_deref() == Some("input_json_delta") {
            let Some(fragment) = delta.partial_json.filter(|f| !f.is_empty()) else {
                return;
            };
            self.argument_bytes += fragment.len();
            if self.argument_bytes > crate::http::STREAM_TEXT_LIMIT {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    "the stream never ends",
                )));
                return;
            }
            // Fragments of blocks that are not client tool calls (server
            // tools, which this adapter never enables) are no one's arguments.
            let Some((call, tool)) = self.tool_at(index) else {
                return;
            };
            tool.sent = true;
            tool.preset = None;
            out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                index: call,
                id: None,
                name: None,
                arguments: fragment,
            })));
            return;
        }
        if delta.kind.as_deref() == Some("thinking_delta") {
            if let Some(thinking) = delta.thinking.filter(|t| !t.is_empty()) {
                out.push_back(Ok(StreamEvent::Reasoning(thinking)));
            }
            return;
        }
        // text_delta (signature and citations deltas carry no `text`).
        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
            self.text_seen = true;
            out.push_back(Ok(StreamEvent::Delta(text)));
        }
    }
}

impl StreamParser for AnthropicStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((name, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        if self.native {
            out.push_back(Ok(StreamEvent::Native(understudy_core::NativeEvent {
                event: name.clone().unwrap_or_default(),
                data: data.clone(),
            })));
        }
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
            "content_block_start" => self.on_block_start(event.index, event.content_block, out),
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.on_block_delta(event.index, delta, out);
                }
            }
            "content_block_stop" => {
                if let Some((call, tool)) = self.tool_at(event.index) {
                    if let Some(e) = Self::close_tool(call, tool) {
                        out.push_back(Ok(e));
                    }
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
                if !self.text_seen && self.tools.is_empty() {
                    out.push_back(Err(Failure::new(
                        FailureKind::EmptyResponse,
                        format!(
                            "the stream carried no text (stop_reason {})",
                            self.stop_reason.as_deref().unwrap_or("null")
                        ),
                    )));
                    return;
                }
                // A tool_use block never closed still gets arguments that parse.
                for (i, tool) in self.tools.iter_mut().enumerate() {
                    let call = u32::try_from(i).unwrap_or(u32::MAX);
                    if let Some(e) = Self::close_tool(call, tool) {
                        out.push_back(Ok(e));
                    }
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
            // ping, and event types added later.
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

pub use crate::anthropic_native::with_model;

// === the wire ===

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<Cow<'a, str>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<WireMetadata<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_config: Option<WireOutputConfig>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: WireContent<'a>,
}

/// A string (one text block) or a list of blocks.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<WireBlockOut<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlockOut<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Image {
        source: WireImageSource<'a>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<WireContent<'a>>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Cow<'a, Value>,
}

#[derive(Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

impl WireToolChoice<'_> {
    fn plain(kind: &'static str) -> Self {
        Self {
            kind,
            name: None,
            disable_parallel_tool_use: None,
        }
    }
}

#[derive(Serialize)]
struct WireMetadata<'a> {
    user_id: &'a str,
}

#[derive(Serialize)]
struct WireOutputConfig {
    format: WireOutputFormat,
}

#[derive(Serialize)]
struct WireOutputFormat {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: Value,
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

/// A content block of an answer (or a streamed `content_block_start`).
#[derive(Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
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
    index: Option<u64>,
    message: Option<WireStartMessage>,
    content_block: Option<WireBlock>,
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
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    /// A `thinking_delta`'s piece of the reasoning.
    thinking: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
}
