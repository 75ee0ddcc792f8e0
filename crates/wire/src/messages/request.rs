//! The Messages request body for a neutral request: the conversation as
//! alternating turns, tools and the tool choice, JSON output, and the wire
//! types the body serializes from.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use understudy_types::{ChatRequest, Failure, Message, Part, ResponseFormat, Role, ToolChoice};

use super::schema::structured_schema;

/// Added to the system prompt when a JSON object is asked for and the
/// request carries no schema structured outputs can take.
pub const JSON_INSTRUCTION: &str =
    "Answer with only a JSON object: no prose before or after it, no code fences.";

/// The request body for `model`.
pub fn wire_request<'a>(
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
    let (output_config, json_instruction) = json_output(request.response_format.as_ref());
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

/// How a JSON answer is asked for: structured outputs when the schema
/// reduces, else an instruction for the system prompt.
fn json_output(
    format: Option<&ResponseFormat>,
) -> (Option<WireOutputConfig>, Option<Cow<'static, str>>) {
    match format {
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
    }
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
    let mut turns: Vec<(&'static str, Vec<BlockOut<'_>>)> = Vec::with_capacity(messages.len());
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
            blocks.push(BlockOut::Text {
                text: Cow::Owned(m.marked_system_text()),
            });
        } else if m.role == Role::Tool {
            blocks.push(BlockOut::ToolResult {
                tool_use_id: wire_tool_id(m.tool_call_id.as_deref().unwrap_or_default()),
                content: tool_result_content(m),
            });
        } else {
            blocks.extend(content_blocks(m));
            if m.role == Role::Assistant {
                for call in &m.tool_calls {
                    blocks.push(BlockOut::ToolUse {
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
                blocks.sort_by_key(|b| !matches!(b, BlockOut::ToolResult { .. }));
            }
            let content = match blocks.as_slice() {
                [BlockOut::Text { .. }] => match blocks.pop() {
                    Some(BlockOut::Text { text }) => WireContent::Text(text),
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
fn content_blocks(m: &Message) -> impl Iterator<Item = BlockOut<'_>> {
    m.content.iter().filter_map(|p| match p {
        Part::Text { text } if text.trim().is_empty() => None,
        Part::Text { text } => Some(BlockOut::Text {
            text: Cow::Borrowed(text),
        }),
        Part::Image { url, .. } => Some(BlockOut::Image {
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

/// The Messages body a provider gets.
#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
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

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: WireContent<'a>,
}

/// A string (one text block) or a list of blocks.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum WireContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<BlockOut<'a>>),
}

/// A content block as written, to a provider (a turn of the request) or
/// to a client (an answer's blocks, a streamed block's start).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockOut<'a> {
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

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Cow<'a, Value>,
}

#[derive(Debug, Serialize)]
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

#[derive(Debug, Serialize)]
struct WireMetadata<'a> {
    user_id: &'a str,
}

#[derive(Debug, Serialize)]
struct WireOutputConfig {
    format: WireOutputFormat,
}

#[derive(Debug, Serialize)]
struct WireOutputFormat {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: Value,
}
