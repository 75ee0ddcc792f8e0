//! The Chat Completions request a client sends the gateway, read into the
//! neutral [`ChatRequest`]. Unknown request fields are ignored (SDKs send many); known ones are
//! checked, and what Understudy cannot honour (n > 1, the legacy
//! `functions`) is refused. The neutral API takes the same message, tool and
//! response-format shapes ([`message`], [`Extras`]).

use serde::Deserialize;
use serde_json::Value;
use understudy_types::{
    ChatRequest, Message, Part, ResponseFormat, Role, Tool, ToolCall, ToolChoice,
};

use crate::Invalid;

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<u32>,
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormatIn>,
    pub seed: Option<i64>,
    pub top_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub user: Option<String>,
    /// Names the conversation for OpenAI's cache (and the gateway's
    /// session affinity); not forwarded.
    pub prompt_cache_key: Option<String>,
    /// The legacy function-calling API (superseded by `tools`); boxed,
    /// as it is rarely sent.
    pub functions: Option<Box<Value>>,
    /// Routing the client asks for (OpenRouter's `models` and `provider`,
    /// LiteLLM's `fallbacks`: [`crate::caller`]); boxed, as they are
    /// rarely sent. Never forwarded.
    pub models: Option<Box<crate::caller::ModelsIn>>,
    pub provider: Option<Box<crate::caller::ProviderField>>,
    pub fallbacks: Option<Box<crate::caller::FallbacksIn>>,
}

/// One message, as OpenAI's Chat Completions API (and the neutral API)
/// take it.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
    pub tool_calls: Option<Vec<ToolCallIn>>,
    pub tool_call_id: Option<String>,
}

/// A message's content: a string or an array of parts.
#[derive(Debug, Clone)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// Read by the value's first token, not as an untagged enum (which
/// buffers every message's text to try each variant in turn).
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = Content;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content parts")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
                    .map(Content::Parts)
            }
        }
        d.deserialize_any(Either)
    }
}

/// One content part: `text` or `image_url`.
#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub image_url: Option<ImageUrlIn>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ImageUrlIn {
    pub url: String,
    pub detail: Option<String>,
}

/// A tool call in an assistant message of the history.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolCallIn {
    pub id: String,
    pub function: FunctionCallIn,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FunctionCallIn {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: Option<FunctionIn>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FunctionIn {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Value>,
    pub strict: Option<bool>,
}

/// `"auto"`, `"none"`, `"required"`, or `{"type":"function","function":{"name"}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ToolChoiceIn {
    Mode(String),
    Named { function: NamedFunction },
}

#[derive(Debug, Clone, Deserialize)]
pub struct NamedFunction {
    pub name: String,
}

/// `{"type":"text"}`, `{"type":"json_object"}` or
/// `{"type":"json_schema","json_schema":{name, schema, strict}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormatIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub json_schema: Option<JsonSchemaIn>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaIn {
    pub name: Option<String>,
    pub schema: Option<Value>,
    pub strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// The request fields beyond the conversation that both APIs share, in
/// OpenAI's shapes, turned into the neutral request's.
#[derive(Debug, Default)]
pub struct Extras {
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoiceIn>,
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<ResponseFormatIn>,
    pub seed: Option<i64>,
    pub top_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub user: Option<String>,
}

impl Extras {
    /// Sets these fields on `chat`, rejecting shapes no provider takes.
    pub fn apply(self, chat: &mut ChatRequest) -> Result<(), Invalid> {
        for (i, t) in self.tools.into_iter().flatten().enumerate() {
            let (true, Some(f)) = (t.kind == "function", t.function) else {
                return Err(Invalid::new(
                    format!("tools[{i}]"),
                    "only tools of type `function` (with a `function` object) are supported",
                ));
            };
            chat.tools.push(Tool {
                name: f.name,
                description: f.description,
                parameters: f.parameters,
                strict: f.strict,
            });
        }
        chat.tool_choice = match self.tool_choice {
            None => None,
            Some(ToolChoiceIn::Mode(m)) => Some(match m.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => {
                    return Err(Invalid::new(
                        "tool_choice",
                        format!(
                            "unknown tool_choice `{other}` (expected auto, none, required or a named function)"
                        ),
                    ));
                }
            }),
            Some(ToolChoiceIn::Named { function }) => Some(ToolChoice::Function(function.name)),
        };
        chat.parallel_tool_calls = self.parallel_tool_calls;
        chat.response_format = match self.response_format {
            None => None,
            Some(f) => Some(match (f.kind.as_str(), f.json_schema) {
                ("text", _) => ResponseFormat::Text,
                ("json_object", _) => ResponseFormat::JsonObject,
                ("json_schema", Some(s)) => ResponseFormat::JsonSchema {
                    name: s.name.unwrap_or_else(|| "response".to_owned()),
                    schema: s.schema.ok_or_else(|| {
                        Invalid::new("response_format", "json_schema needs a `schema`")
                    })?,
                    strict: s.strict.unwrap_or(false),
                },
                ("json_schema", None) => {
                    return Err(Invalid::new(
                        "response_format",
                        "type `json_schema` needs a `json_schema` object",
                    ));
                }
                (other, _) => {
                    return Err(Invalid::new(
                        "response_format",
                        format!(
                            "unknown type `{other}` (expected text, json_object or json_schema)"
                        ),
                    ));
                }
            }),
        };
        chat.seed = self.seed;
        chat.top_p = self.top_p;
        chat.presence_penalty = self.presence_penalty;
        chat.frequency_penalty = self.frequency_penalty;
        chat.user = self.user;
        Ok(())
    }
}

/// A conversation message in the neutral types. `role` must already be
/// one of user, assistant or tool.
pub fn message(i: usize, m: ChatMessage) -> Result<Message, Invalid> {
    let role = match m.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(Invalid::new(
                format!("messages[{i}].role"),
                format!(
                    "unknown or unsupported role `{other}` (expected system, developer, user, assistant or tool)"
                ),
            ));
        }
    };
    let content = match m.content {
        None => Vec::new(),
        Some(Content::Text(text)) => vec![Part::Text { text }],
        Some(Content::Parts(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for p in parts {
                out.push(match (p.kind.as_str(), p.text, p.image_url) {
                    ("text", Some(text), _) => Part::Text { text },
                    ("image_url", _, Some(image)) if role == Role::User => Part::Image {
                        url: image.url,
                        detail: image.detail,
                    },
                    ("image_url", _, Some(_)) => {
                        return Err(Invalid::new(
                            format!("messages[{i}].content"),
                            "images are accepted in user messages only",
                        ));
                    }
                    (kind, _, _) => {
                        return Err(Invalid::new(
                            format!("messages[{i}].content"),
                            format!(
                                "content part of type `{kind}` is not supported or lacks its field (expected text or image_url)"
                            ),
                        ));
                    }
                });
            }
            out
        }
    };
    let tool_calls = m
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|c| ToolCall {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
        })
        .collect();
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id: m.tool_call_id,
    })
}

/// The neutral request's own checks (`ChatRequest::validate`), which name
/// the field they refuse.
impl From<understudy_types::Error> for Invalid {
    fn from(e: understudy_types::Error) -> Self {
        match e {
            understudy_types::Error::InvalidRequest { field, message } => Self::new(field, message),
            other => Self {
                field: None,
                message: other.to_string(),
            },
        }
    }
}

/// The text of a system or developer message.
fn system_text(i: usize, content: Option<Content>) -> Result<String, Invalid> {
    match content {
        None => Ok(String::new()),
        Some(Content::Text(t)) => Ok(t),
        Some(Content::Parts(parts)) => {
            let mut text = String::new();
            for p in parts {
                match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    (kind, _) => {
                        return Err(Invalid::new(
                            format!("messages[{i}].content"),
                            format!("a system message takes text parts only, not `{kind}`"),
                        ));
                    }
                }
            }
            Ok(text)
        }
    }
}

impl ChatCompletionRequest {
    /// The neutral request: system and developer messages become the system
    /// prompt (joined in order).
    pub fn take_chat(&mut self) -> Result<ChatRequest, Invalid> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(Invalid::new("n", "only n = 1 is supported"));
        }
        if self.functions.as_ref().is_some_and(|f| !f.is_null()) {
            return Err(Invalid::new(
                "functions",
                "the legacy `functions` API is not supported: send `tools`",
            ));
        }
        let mut system: Vec<String> = Vec::new();
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in std::mem::take(&mut self.messages).into_iter().enumerate() {
            match m.role.as_str() {
                "system" | "developer" => system.push(system_text(i, m.content)?),
                _ => messages.push(message(i, m)?),
            }
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        let mut chat = ChatRequest {
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            messages,
            temperature: self.temperature,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop,
            ..ChatRequest::default()
        };
        Extras {
            tools: self.tools.take(),
            tool_choice: self.tool_choice.take(),
            parallel_tool_calls: self.parallel_tool_calls,
            response_format: self.response_format.take(),
            seed: self.seed,
            top_p: self.top_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            user: self.user.take(),
        }
        .apply(&mut chat)?;
        chat.validate()?;
        Ok(chat)
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}
