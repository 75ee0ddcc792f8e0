//! The Chat Completions request body for a neutral request, and its wire
//! shapes, each serialising a neutral type as OpenAI takes it
//! (openai-python `types/chat/`); fields the neutral request leaves empty
//! stay out of the body.

use std::borrow::Cow;

use serde::{Serialize, Serializer};
use understudy_types::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

/// The longest tool-call id OpenAI accepts in a conversation's history
/// (a longer one is a 400 `string_above_max_length`: "Invalid
/// 'messages[2].tool_calls[0].id': string too long. Expected a string with
/// maximum length 40", vercel/ai#5171, agno-agi/agno#5382).
const MAX_TOOL_CALL_ID: usize = 40;

/// The longest end-user id OpenAI takes (Claude Code's `metadata.user_id`
/// is about 150 characters).
const MAX_USER: usize = 64;

/// Whether [`wire_request`] would send `request`'s tool-call ids, end user
/// and tool choice as the client wrote them (a body forwarded as it is
/// must need none of them mended): no id or user too long or signed, no
/// tool choice without tools.
pub fn sends_as_written(request: &ChatRequest) -> bool {
    let id_kept = |id: &str| matches!(wire_id(id), Cow::Borrowed(_));
    let ids = request.messages.iter().all(|m| {
        m.tool_calls.iter().all(|c| id_kept(&c.id)) && m.tool_call_id.as_deref().is_none_or(id_kept)
    });
    let user = request
        .user
        .as_deref()
        .is_none_or(|u| matches!(crate::fitted_user(u, MAX_USER), Cow::Borrowed(_)));
    let choice = !request.tools.is_empty()
        || (request.tool_choice.is_none() && request.parallel_tool_calls.is_none());
    ids && user && choice
}

/// The Chat Completions body for `request` to `model`: `limit` goes out as
/// `max_completion_tokens` when the provider wants that, else as
/// `max_tokens`.
pub fn wire_request<'a>(
    model: &'a str,
    request: &'a ChatRequest,
    limit: Option<u32>,
    max_completion_tokens: bool,
    stream: bool,
) -> WireRequest<'a> {
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
    let (max_tokens, max_completion_tokens) = match max_completion_tokens {
        true => (None, limit),
        false => (limit, None),
    };
    WireRequest {
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
        user: request
            .user
            .as_deref()
            .map(|u| crate::fitted_user(u, MAX_USER)),
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
    }
}

#[derive(Debug, Serialize)]
pub struct WireRequest<'a> {
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

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One message (openai-python `chat_completion_*_message_param.py`).
#[derive(Debug, Serialize)]
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
#[derive(Debug)]
enum WireContent<'a> {
    Text(Cow<'a, str>),
    /// `[{"type":"text","text"}, {"type":"image_url","image_url":{"url","detail"?}}]`.
    Parts(&'a [Part]),
    Null,
}

impl Serialize for WireContent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Debug, Serialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum WirePart<'a> {
            Text { text: &'a str },
            ImageUrl { image_url: WireImage<'a> },
        }
        #[derive(Debug, Serialize)]
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
#[derive(Debug)]
struct WireToolCalls<'a>(&'a [ToolCall]);

impl WireToolCalls<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireToolCalls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Debug, Serialize)]
        struct Call<'a> {
            id: Cow<'a, str>,
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
        }
        #[derive(Debug, Serialize)]
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
#[derive(Debug)]
struct WireTools<'a>(&'a [Tool]);

impl WireTools<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for WireTools<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Debug, Serialize)]
        struct WireTool<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Function<'a>,
        }
        #[derive(Debug, Serialize)]
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
#[derive(Debug)]
struct WireToolChoice<'a>(&'a ToolChoice);

impl Serialize for WireToolChoice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Debug, Serialize)]
        struct Named<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            function: Name<'a>,
        }
        #[derive(Debug, Serialize)]
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
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Debug, Serialize)]
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
