//! The Converse body for a neutral request: the conversation as strictly
//! alternating turns of content blocks, the system prompt, the inference
//! configuration, the tools and the tool choice; with the wire types the
//! body serializes from.
//!
//! The model id is in the path, so the body never names it; nor does it
//! say whether to stream (the operation does).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use understudy_types::{
    ChatRequest, Failure, FailureKind, Message, Part, ResponseFormat, Role, ToolChoice,
};

use crate::messages::request::JSON_INSTRUCTION;

/// The longest tool-use id Bedrock takes (`[a-zA-Z0-9_-]{1,64}`).
pub const MAX_TOOL_USE_ID: usize = 64;

/// What a tool result with no text says: Bedrock's content blocks carry
/// some text, and a model reads an empty one as nothing at all.
pub const EMPTY_TOOL_RESULT: &str = "(no output)";

/// The whole Converse body for `request`; `max_tokens` is the client's
/// limit already clamped to the model's (`None`: the model's own maximum,
/// Converse's default).
pub fn wire_request(
    request: &ChatRequest,
    max_tokens: Option<u32>,
) -> Result<WireRequest<'_>, Failure> {
    let messages = wire_messages(&request.messages)?;
    let system = system(request);
    let inference_config = WireInference {
        max_tokens: max_tokens.map(|n| n.max(1)),
        // Converse takes 0 to 1; the neutral range is 0 to 2.
        temperature: request.temperature.map(|t| t.clamp(0.0, 1.0)),
        top_p: request.top_p.map(|p| p.clamp(0.0, 1.0)),
        // Each stop sequence is at least one character.
        stop_sequences: request
            .stop
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty())
            .collect(),
    };
    Ok(WireRequest {
        messages,
        system,
        inference_config: (!inference_config.is_empty()).then_some(inference_config),
        tool_config: tool_config(request),
    })
}

/// The system prompt as one text block, with the JSON instruction when a
/// JSON answer is asked for (Converse has no JSON mode every model takes).
fn system(request: &ChatRequest) -> Vec<WireSystem<'_>> {
    let instruction: Option<Cow<'_, str>> = match &request.response_format {
        None | Some(ResponseFormat::Text) => None,
        Some(ResponseFormat::JsonObject) => Some(Cow::Borrowed(JSON_INSTRUCTION)),
        Some(ResponseFormat::JsonSchema { schema, .. }) => Some(Cow::Owned(format!(
            "Answer with only a JSON object that is valid against this JSON Schema: \
             no prose before or after it, no code fences.\n{schema}"
        ))),
    };
    let prompt = request
        .system
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(Cow::Borrowed);
    let text = match (prompt, instruction) {
        (None, None) => return Vec::new(),
        (Some(text), None) | (None, Some(text)) => text,
        (Some(prompt), Some(instruction)) => Cow::Owned(format!("{prompt}\n\n{instruction}")),
    };
    vec![WireSystem { text }]
}

/// `toolConfig`: the offered tools and the choice among them. Converse
/// refuses `toolUse` and `toolResult` blocks without a `toolConfig`, so a
/// history with tool turns and no tools offered declares the tools it
/// called (with an empty schema). Converse has no `none` choice: `none`
/// sends no tools at all, unless the history needs them declared.
/// `toolChoice` is sent only when the client forces a call (`any` or a
/// named `tool`): `auto` is the default, and only some models take the
/// member at all (the API reference's `ToolChoice`).
fn tool_config(request: &ChatRequest) -> Option<WireToolConfig<'_>> {
    let history = request
        .messages
        .iter()
        .any(|m| !m.tool_calls.is_empty() || m.role == Role::Tool);
    let none = matches!(request.tool_choice, Some(ToolChoice::None));
    let tools: Vec<WireTool<'_>> = if request.tools.is_empty() || (none && history) {
        let mut called: Vec<&str> = Vec::new();
        for call in request.messages.iter().flat_map(|m| &m.tool_calls) {
            if !called.contains(&call.name.as_str()) {
                called.push(&call.name);
            }
        }
        let offered = request
            .tools
            .iter()
            .filter(|t| called.contains(&t.name.as_str()));
        let mut tools: Vec<WireTool<'_>> = offered.map(WireTool::of).collect();
        for name in called {
            if !tools.iter().any(|t| t.tool_spec.name == name) {
                tools.push(WireTool::bare(name));
            }
        }
        tools
    } else if none {
        Vec::new()
    } else {
        request.tools.iter().map(WireTool::of).collect()
    };
    if tools.is_empty() {
        return None;
    }
    let tool_choice = match &request.tool_choice {
        Some(ToolChoice::Required) if !request.tools.is_empty() => {
            Some(WireToolChoice::Any(Empty {}))
        }
        Some(ToolChoice::Function(name)) => Some(WireToolChoice::Tool { name }),
        _ => None,
    };
    Some(WireToolConfig { tools, tool_choice })
}

/// A tool's `inputSchema.json`: its parameters, an object schema (`type`
/// added when missing), or an empty object schema.
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

/// A tool-call id as Bedrock takes it (`[a-zA-Z0-9_-]{1,64}`),
/// injectively and deterministically, so that a `toolUse` and the
/// `toolResult` answering it still match: the Messages alphabet's mapping
/// ([`crate::ids::anthropic`], which ids Bedrock mints go through
/// unchanged), or, past 64 bytes, a digest id.
pub fn tool_use_id(id: &str) -> Cow<'_, str> {
    let mapped = crate::ids::anthropic(id);
    if mapped.len() <= MAX_TOOL_USE_ID {
        return mapped;
    }
    // `openai` with no room left is the digest id (`call_` and 32 hex).
    crate::ids::openai(id, 0)
}

/// The conversation as alternating `user` and `assistant` turns: tool
/// results and mid-conversation system messages join the user turn they
/// sit by, consecutive turns of one role become one (so parallel results
/// share a turn), and in a user turn the tool results come first.
fn wire_messages(messages: &[Message]) -> Result<Vec<WireMessage<'_>>, Failure> {
    let mut turns: Vec<WireMessage<'_>> = Vec::with_capacity(messages.len());
    for m in messages {
        let (role, blocks) = match m.role {
            Role::User => ("user", content_blocks(m)?),
            Role::System => (
                "user",
                vec![WireBlock::Text(Cow::Owned(m.marked_system_text()))],
            ),
            Role::Tool => ("user", vec![tool_result(m)?]),
            Role::Assistant => {
                let mut blocks = content_blocks(m)?;
                for call in &m.tool_calls {
                    blocks.push(WireBlock::ToolUse(WireToolUse {
                        tool_use_id: tool_use_id(&call.id),
                        name: &call.name,
                        input: crate::arguments_object(call)?,
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    for turn in turns.iter_mut().filter(|t| t.role == "user") {
        // Stable: the results keep their order, and so does the rest.
        turn.content
            .sort_by_key(|b| !matches!(b, WireBlock::ToolResult(_)));
    }
    Ok(turns)
}

/// A turn's text and images as blocks; blank text is left out (models
/// refuse text blocks with nothing in them).
fn content_blocks(m: &Message) -> Result<Vec<WireBlock<'_>>, Failure> {
    let mut blocks = Vec::with_capacity(m.content.len() + m.tool_calls.len());
    for p in &m.content {
        match p {
            Part::Text { text } if text.trim().is_empty() => {}
            Part::Text { text } => blocks.push(WireBlock::Text(Cow::Borrowed(text))),
            Part::Image { url, .. } => blocks.push(WireBlock::Image(image(url)?)),
        }
    }
    Ok(blocks)
}

/// A tool message as a `toolResult` block: its text and images (some
/// text when it has neither).
fn tool_result(m: &Message) -> Result<WireBlock<'_>, Failure> {
    let id = m.tool_call_id.as_deref().unwrap_or_default();
    let mut content: Vec<WireResultContent<'_>> = Vec::with_capacity(m.content.len());
    for p in &m.content {
        match p {
            Part::Text { text } if text.trim().is_empty() => {}
            Part::Text { text } => content.push(WireResultContent::Text(Cow::Borrowed(text))),
            Part::Image { url, .. } => content.push(WireResultContent::Image(image(url)?)),
        }
    }
    if content.is_empty() {
        content.push(WireResultContent::Text(Cow::Borrowed(EMPTY_TOOL_RESULT)));
    }
    Ok(WireBlock::ToolResult(WireToolResult {
        tool_use_id: tool_use_id(id),
        content,
    }))
}

/// An image as Converse takes it: inline bytes (base64 in the JSON) of a
/// PNG, JPEG, GIF or WebP. A remote URL cannot go (Converse fetches
/// nothing; the gateway never fetches a URL itself), nor can another
/// format: the target cannot serve the request, and the next one may.
fn image(url: &str) -> Result<WireImage<'_>, Failure> {
    let unsupported = |why: &str| Failure::new(FailureKind::Unsupported, why.to_owned());
    let Some((media_type, data)) = Part::inline_image(url) else {
        return Err(unsupported(
            "Bedrock's Converse API takes images only inline (`data:` URLs), not by URL",
        ));
    };
    let subtype = media_type
        .split_once('/')
        .map_or("", |(_, s)| s)
        .to_ascii_lowercase();
    let format = match subtype.as_str() {
        "png" => "png",
        "jpeg" | "jpg" => "jpeg",
        "gif" => "gif",
        "webp" => "webp",
        _ => {
            return Err(unsupported(&format!(
                "Bedrock's Converse API takes PNG, JPEG, GIF and WebP images, not `{media_type}`"
            )));
        }
    };
    Ok(WireImage {
        format,
        source: WireImageSource { bytes: data },
    })
}

/// The Converse body a provider gets.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WireRequest<'a> {
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inference_config: Option<WireInference<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

/// A content block: a union keyed by its one member's name.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum WireBlock<'a> {
    Text(Cow<'a, str>),
    Image(WireImage<'a>),
    ToolUse(WireToolUse<'a>),
    ToolResult(WireToolResult<'a>),
}

#[derive(Debug, Serialize)]
struct WireImage<'a> {
    format: &'static str,
    source: WireImageSource<'a>,
}

/// The image's bytes: a blob, which restJson1 writes as base64, which the
/// `data:` URL already holds.
#[derive(Debug, Serialize)]
struct WireImageSource<'a> {
    bytes: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolUse<'a> {
    tool_use_id: Cow<'a, str>,
    name: &'a str,
    input: Value,
}

/// A tool's result, always as text blocks: a text that is JSON stays
/// text, because Bedrock refuses some JSON documents a tool may well
/// return (an object with a `__type` key: maximhq/bifrost#5762).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolResult<'a> {
    tool_use_id: Cow<'a, str>,
    content: Vec<WireResultContent<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum WireResultContent<'a> {
    Text(Cow<'a, str>),
    Image(WireImage<'a>),
}

#[derive(Debug, Serialize)]
struct WireSystem<'a> {
    text: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireInference<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stop_sequences: Vec<&'a str>,
}

impl WireInference<'_> {
    fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.temperature.is_none()
            && self.top_p.is_none()
            && self.stop_sequences.is_empty()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireTool<'a> {
    tool_spec: WireToolSpec<'a>,
}

impl<'a> WireTool<'a> {
    fn of(tool: &'a understudy_types::Tool) -> Self {
        Self {
            tool_spec: WireToolSpec {
                name: &tool.name,
                description: tool.description.as_deref().filter(|d| !d.is_empty()),
                input_schema: WireInputSchema {
                    json: input_schema(tool.parameters.as_ref()),
                },
            },
        }
    }

    /// A tool the history called that the request does not offer.
    fn bare(name: &'a str) -> Self {
        Self {
            tool_spec: WireToolSpec {
                name,
                description: None,
                input_schema: WireInputSchema {
                    json: input_schema(None),
                },
            },
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: WireInputSchema<'a>,
}

#[derive(Debug, Serialize)]
struct WireInputSchema<'a> {
    json: Cow<'a, Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
enum WireToolChoice<'a> {
    Any(Empty),
    Tool { name: &'a str },
}

/// An empty structure (`{}`), as the `any` choice is.
#[derive(Debug, Serialize)]
struct Empty {}
