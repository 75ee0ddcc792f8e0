//! Anthropic's Messages API shapes that `POST /v1/messages` reads and
//! writes, and their translation to and from the neutral types.
//!
//! Every target, Anthropic included, gets a translated request in this
//! version: `cache_control` markers, `thinking` settings and thinking blocks
//! are dropped (other providers cannot verify a thinking block's signature,
//! and it is never forwarded as text), `top_k` has no neutral field and is
//! dropped. Forwarding the client's body byte-identical to Anthropic targets
//! is a later piece of work; [`crate::routes::messages`] keeps one function
//! that renders an answer and one that renders a stream, where it plugs in.
//!
//! Unknown request fields are ignored (SDKs and Claude Code send many);
//! known ones are checked, and what the translation cannot carry (server
//! tools, file ids, content block types it does not know) is refused with
//! a 400 that says so.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{
    ChatRequest, FailureCode, FinishReason, GenerationStream, Message, Part, ResponseFormat, Role,
    StreamItem, Tool, ToolCall, ToolCallDelta, ToolChoice, Usage,
};

use understudy_core::passthrough::{Gated, GatedSet};

use crate::ApiError;

/// The body of `POST /v1/messages` (and of `/v1/messages/count_tokens`,
/// which needs no `max_tokens`).
#[derive(Debug, Deserialize)]
pub(crate) struct MessagesRequest {
    pub model: Option<String>,
    pub messages: Vec<MessageIn>,
    pub system: Option<TextOrBlocks<SystemBlock>>,
    /// Required by Anthropic (no default); checked in [`Self::take_chat`].
    pub max_tokens: Option<u32>,
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: bool,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// No neutral field: accepted and dropped.
    #[allow(
        dead_code,
        reason = "accepted so that its shape is checked; not translated"
    )]
    pub top_k: Option<u32>,
    pub metadata: Option<MetadataIn>,
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoiceIn>,
    /// Extended thinking (`enabled`, `adaptive`): Anthropic targets get
    /// it as sent; the translation for other protocols drops it.
    #[allow(
        dead_code,
        reason = "accepted so that its shape is checked; not translated"
    )]
    pub thinking: Option<Value>,
    /// `effort` (dropped in translation) and `format`, Anthropic's
    /// structured output, which becomes the neutral `response_format`.
    pub output_config: Option<OutputConfigIn>,
    /// The older name of `output_config.format`.
    pub output_format: Option<FormatIn>,
    /// MCP servers the provider would call: Anthropic only, and gated.
    pub mcp_servers: Option<Value>,
    /// A code-execution container: Anthropic only, and gated.
    pub container: Option<Value>,
}

/// `output_config`: only `format` is translated.
#[derive(Debug, Deserialize)]
pub(crate) struct OutputConfigIn {
    pub format: Option<FormatIn>,
}

/// `{"type": "json_schema", "schema": {…}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct FormatIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: Option<Value>,
}

/// One turn: `user` or `assistant`, content a string or blocks.
#[derive(Debug, Deserialize)]
pub(crate) struct MessageIn {
    pub role: String,
    pub content: TextOrBlocks<Block>,
}

/// A string, or an array of content blocks. (Written by hand rather than
/// as an untagged enum so that an error inside a block names its path.)
#[derive(Debug)]
pub(crate) enum TextOrBlocks<T> {
    Text(String),
    Blocks(Vec<T>),
}

/// One content block of a message. `cache_control` and other fields a
/// block may carry are ignored.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: Option<TextOrBlocks<ResultBlock>>,
        #[serde(default)]
        is_error: bool,
    },
    /// Dropped in translation: only Anthropic can verify its signature.
    Thinking {
        #[serde(default)]
        thinking: String,
    },
    /// Dropped in translation, like `thinking`.
    RedactedThinking {},
    /// Any other type (documents, server tool results…): only Anthropic
    /// targets can take the request.
    #[serde(other)]
    Other,
}

/// A block inside a `tool_result`'s content.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ResultBlock {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    /// A tool loaded by tool search (Claude Code's `ToolSearch`): its name.
    ToolReference {
        tool_name: String,
    },
    #[serde(other)]
    Other,
}

/// An image's `source`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ImageSource {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    /// `file` (a Files API id) and anything newer: refused.
    #[serde(other)]
    Other,
}

/// A block of the `system` array; `cache_control` is ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct SystemBlock {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct MetadataIn {
    pub user_id: Option<String>,
}

/// A tool: a custom one (`type` absent or `custom`) with an
/// `input_schema`, or a server tool (`web_search_…`, `bash_…`), refused.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolIn {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub strict: Option<bool>,
}

/// `{"type": "auto"|"any"|"tool"|"none", "name"?, "disable_parallel_tool_use"?}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolChoiceIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: bool,
}

// === impl TextOrBlocks ===

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TextOrBlocks<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = TextOrBlocks<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content blocks")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(TextOrBlocks::Text(s.to_owned()))
            }

            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(TextOrBlocks::Text(s))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(block) = seq.next_element()? {
                    out.push(block);
                }
                Ok(TextOrBlocks::Blocks(out))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

// === impl MessagesRequest ===

impl MessagesRequest {
    /// The neutral request, for targets of other protocols. `max_tokens`
    /// is required, as Anthropic requires it; the system blocks are joined
    /// with blank lines. What the neutral types cannot carry (a content
    /// block, tool or role only Anthropic knows) does not refuse the
    /// request: Anthropic targets get the body as sent, and the request's
    /// `native_only` names what the others lack (each is then an
    /// `unsupported` attempt, and a route with no Anthropic target a 400
    /// that says so per target).
    pub(crate) fn take_chat(&mut self) -> Result<ChatRequest, ApiError> {
        if self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(ApiError::invalid("model", "model is required"));
        }
        let Some(max_tokens) = self.max_tokens else {
            return Err(ApiError::invalid(
                "max_tokens",
                "max_tokens is required (the Messages API has no default)",
            ));
        };
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=1.0).contains(&t) {
                return Err(ApiError::invalid(
                    "temperature",
                    "temperature must be between 0 and 1",
                ));
            }
        }
        let mut foreign = Foreign::default();
        let mut gated = GatedSet::NONE;
        if self.mcp_servers.take().is_some_and(|v| !v.is_null()) {
            foreign.note("MCP servers");
            gated.insert(Gated::Mcp);
        }
        if self.container.take().is_some_and(|v| !v.is_null()) {
            foreign.note("code execution containers");
            gated.insert(Gated::CodeExecution);
        }
        let system = self.take_system()?;
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in std::mem::take(&mut self.messages).into_iter().enumerate() {
            translate_message(i, m, &mut messages, &mut foreign)?;
        }
        let mut chat = ChatRequest {
            system,
            messages,
            temperature: self.temperature,
            max_tokens: Some(max_tokens),
            stop: self.stop_sequences.take().unwrap_or_default(),
            top_p: self.top_p,
            user: self.metadata.take().and_then(|m| m.user_id),
            response_format: self.take_format()?,
            ..ChatRequest::default()
        };
        for t in self.tools.take().into_iter().flatten() {
            if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
                // A server tool (web search, code execution…) runs at
                // Anthropic; no other protocol has it, and those that
                // fetch URLs or run code need the operator's permission.
                foreign.note("Anthropic's server tools");
                if let Some(g) = Gated::of_tool(kind) {
                    gated.insert(g);
                }
                continue;
            }
            chat.tools.push(Tool {
                name: t.name,
                description: t.description,
                parameters: t.input_schema,
                strict: t.strict,
            });
        }
        if let Some(choice) = self.tool_choice.take() {
            chat.tool_choice = match choice.kind.as_str() {
                "auto" => Some(ToolChoice::Auto),
                "any" => Some(ToolChoice::Required),
                "none" => Some(ToolChoice::None),
                "tool" => Some(ToolChoice::Function(choice.name.ok_or_else(|| {
                    ApiError::invalid("tool_choice.name", "tool_choice `tool` needs a `name`")
                })?)),
                _ => {
                    foreign.note("a tool_choice type only Anthropic knows");
                    None
                }
            };
            if choice.disable_parallel_tool_use {
                chat.parallel_tool_calls = Some(false);
            }
        }
        chat.native_only = foreign.0;
        chat.native_gated = gated;
        // (With `native_only`, what is left may not stand on its own — a
        // request of documents only — and is never sent: Anthropic judges
        // the body as sent. `native` is set by the caller, so the check is
        // made here as if it were.)
        if chat.native_only.is_none() {
            chat.validate()?;
        }
        Ok(chat)
    }

    /// The system prompt: a string, or text blocks joined with blank lines.
    fn take_system(&mut self) -> Result<Option<String>, ApiError> {
        let system = match self.system.take() {
            None => None,
            Some(TextOrBlocks::Text(text)) => Some(text),
            Some(TextOrBlocks::Blocks(blocks)) => {
                let mut texts = Vec::with_capacity(blocks.len());
                for (i, b) in blocks.into_iter().enumerate() {
                    match (b.kind.as_str(), b.text) {
                        ("text", Some(text)) => texts.push(text),
                        (kind, _) => {
                            return Err(ApiError::invalid(
                                format!("system[{i}]"),
                                format!("system blocks must be text blocks, not `{kind}`"),
                            ));
                        }
                    }
                }
                Some(texts.join("\n\n"))
            }
        };
        Ok(system.filter(|s| !s.is_empty()))
    }

    /// `output_config.format` (or the older `output_format`) as the
    /// neutral `response_format`: every target is then asked for JSON
    /// valid against the schema, and an answer that is not is
    /// `invalid_output` (the next target is tried).
    fn take_format(&mut self) -> Result<Option<ResponseFormat>, ApiError> {
        let (format, field) = match (
            self.output_config.take().and_then(|c| c.format),
            self.output_format.take(),
        ) {
            (Some(f), _) => (f, "output_config.format"),
            (None, Some(f)) => (f, "output_format"),
            (None, None) => return Ok(None),
        };
        match (format.kind.as_str(), format.schema) {
            ("json_schema", Some(schema)) if schema.is_object() => {
                Ok(Some(ResponseFormat::JsonSchema {
                    name: "output".into(),
                    schema,
                    strict: false,
                }))
            }
            ("json_schema", _) => Err(ApiError::invalid(
                format!("{field}.schema"),
                "a json_schema format needs a JSON Schema object in `schema`",
            )),
            (other, _) => Err(ApiError::invalid(
                format!("{field}.type"),
                format!("unknown format type `{other}` (expected json_schema)"),
            )),
        }
    }

    /// An estimate of the input tokens: a quarter of the characters of all
    /// text (system, blocks, thinking, tool inputs and results, tool
    /// definitions), rounded up, plus [`IMAGE_TOKENS`] per image. No
    /// tokenizer is involved; it is an estimate and says so.
    pub(crate) fn estimate_input_tokens(&self) -> u64 {
        let mut chars = 0usize;
        let mut images = 0u64;
        let mut text = |s: &str| chars += s.chars().count();
        match &self.system {
            Some(TextOrBlocks::Text(s)) => text(s),
            Some(TextOrBlocks::Blocks(blocks)) => {
                for b in blocks {
                    text(b.text.as_deref().unwrap_or(""));
                }
            }
            None => {}
        }
        for m in &self.messages {
            let blocks = match &m.content {
                TextOrBlocks::Text(s) => {
                    text(s);
                    continue;
                }
                TextOrBlocks::Blocks(blocks) => blocks,
            };
            for b in blocks {
                match b {
                    Block::Text { text: t } | Block::Thinking { thinking: t } => text(t),
                    Block::Image { .. } => images += 1,
                    Block::ToolUse { name, input, .. } => {
                        text(name);
                        text(&input.to_string());
                    }
                    Block::ToolResult { content, .. } => match content {
                        Some(TextOrBlocks::Text(s)) => text(s),
                        Some(TextOrBlocks::Blocks(inner)) => {
                            for r in inner {
                                match r {
                                    ResultBlock::Text { text: t } => text(t),
                                    ResultBlock::Image { .. } => images += 1,
                                    ResultBlock::ToolReference { tool_name } => text(tool_name),
                                    ResultBlock::Other => {}
                                }
                            }
                        }
                        None => {}
                    },
                    Block::RedactedThinking {} | Block::Other => {}
                }
            }
        }
        for t in self.tools.iter().flatten() {
            text(&t.name);
            text(t.description.as_deref().unwrap_or(""));
            if let Some(schema) = &t.input_schema {
                text(&schema.to_string());
            }
        }
        (chars as u64).div_ceil(4) + images * IMAGE_TOKENS
    }
}

/// What one image counts for in the token estimate: about what Anthropic
/// charges for an image of 1.15 megapixels, the largest it keeps unscaled.
pub(crate) const IMAGE_TOKENS: u64 = 1_600;

/// What the translation for other protocols left out of a request: the
/// first thing only Anthropic can take, named for the `unsupported`
/// attempts of other targets.
#[derive(Debug, Default)]
struct Foreign(Option<&'static str>);

impl Foreign {
    fn note(&mut self, what: &'static str) {
        self.0.get_or_insert(what);
    }
}

/// Translates one Anthropic turn into neutral messages, appended to `out`:
/// a user turn's `tool_result` blocks become one tool message each (first,
/// as every protocol wants them right after the calls), then the rest of
/// the turn as one user message; images inside tool results move to that
/// user message, since a neutral tool result is text. A `system` message
/// stays a system message in place. Thinking blocks are dropped, what only
/// Anthropic knows is noted in `foreign` and left out, and a turn left with
/// nothing is left out.
fn translate_message(
    i: usize,
    m: MessageIn,
    out: &mut Vec<Message>,
    foreign: &mut Foreign,
) -> Result<(), ApiError> {
    let role = match m.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "system" => Role::System,
        _ => {
            foreign.note("a message role only Anthropic knows");
            return Ok(());
        }
    };
    let blocks = match m.content {
        TextOrBlocks::Text(text) => {
            out.push(Message::text(role, text));
            return Ok(());
        }
        TextOrBlocks::Blocks(blocks) => blocks,
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut result_images = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        let at = || format!("messages[{i}].content[{j}]");
        match (block, role) {
            (Block::Text { text }, _) => parts.push(Part::Text { text }),
            (Block::Image { source }, Role::User) => parts.extend(image(source, foreign)),
            (Block::ToolUse { id, name, input }, Role::Assistant) => {
                // Anthropic takes only an object; so does every other
                // protocol once translated: the client's mistake, a 400 on
                // every route alike.
                if !(input.is_object() || input.is_null()) {
                    return Err(ApiError::invalid(
                        at(),
                        "the input of a tool_use block must be a JSON object",
                    ));
                }
                calls.push(ToolCall {
                    id,
                    name,
                    arguments: if input.is_null() {
                        "{}".to_owned()
                    } else {
                        input.to_string()
                    },
                });
            }
            (
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                },
                Role::User,
            ) => {
                let text = result_text(content, is_error, &mut result_images, foreign);
                results.push(Message::tool_result(tool_use_id, text));
            }
            (Block::Thinking { .. } | Block::RedactedThinking {}, _) => {}
            (Block::Image { .. }, _) => {
                return Err(ApiError::invalid(
                    at(),
                    "images are accepted in user messages only",
                ));
            }
            (Block::ToolUse { .. }, _) => {
                return Err(ApiError::invalid(
                    at(),
                    "tool_use blocks belong in assistant messages",
                ));
            }
            (Block::ToolResult { .. }, _) => {
                return Err(ApiError::invalid(
                    at(),
                    "tool_result blocks belong in user messages",
                ));
            }
            (Block::Other, _) => {
                foreign.note(
                    "content block types only Anthropic knows (documents, server tool results…)",
                );
            }
        }
    }
    out.extend(results);
    if !result_images.is_empty() {
        result_images.append(&mut parts);
        parts = result_images;
    }
    if !parts.is_empty() || !calls.is_empty() {
        out.push(Message {
            role,
            content: parts,
            tool_calls: calls,
            tool_call_id: None,
        });
    }
    Ok(())
}

/// A `tool_result`'s content as the neutral tool result's text (`Error: `
/// first when it is one); its images go to `images`, for the user turn.
fn result_text(
    content: Option<TextOrBlocks<ResultBlock>>,
    is_error: bool,
    images: &mut Vec<Part>,
    foreign: &mut Foreign,
) -> String {
    let mut text = String::from(if is_error { "Error: " } else { "" });
    let blocks = match content {
        None => return text,
        Some(TextOrBlocks::Text(t)) => {
            text.push_str(&t);
            return text;
        }
        Some(TextOrBlocks::Blocks(blocks)) => blocks,
    };
    let mut first = true;
    let mut line = |text: &mut String, t: &str| {
        if !first {
            text.push('\n');
        }
        text.push_str(t);
        first = false;
    };
    for r in blocks {
        match r {
            ResultBlock::Text { text: t } => line(&mut text, &t),
            ResultBlock::ToolReference { tool_name } => {
                line(&mut text, &format!("Tool loaded: {tool_name}"));
            }
            ResultBlock::Image { source } => images.extend(image(source, foreign)),
            ResultBlock::Other => {
                foreign.note("tool_result content blocks only Anthropic knows");
            }
        }
    }
    text
}

/// An image block's source as a neutral image: base64 data becomes a
/// `data:` URL, a URL stays as it is (the engine accepts `https:` only); a
/// Files API id only Anthropic can resolve.
fn image(source: ImageSource, foreign: &mut Foreign) -> Option<Part> {
    match source {
        ImageSource::Base64 { media_type, data } => Some(Part::Image {
            url: format!("data:{media_type};base64,{data}"),
            detail: None,
        }),
        ImageSource::Url { url } => Some(Part::Image { url, detail: None }),
        ImageSource::Other => {
            foreign.note("images by Files API id");
            None
        }
    }
}

/// Anthropic's `stop_reason` for ours. A stop sequence the provider named
/// as such stays one; reasons Anthropic has no word for are `end_turn`.
pub(crate) fn stop_reason(reason: &FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::Other(other) => match other.as_str() {
            "stop_sequence" => "stop_sequence",
            "pause_turn" => "pause_turn",
            "refusal" => "refusal",
            "model_context_window_exceeded" => "model_context_window_exceeded",
            _ => "end_turn",
        },
    }
}

// === what the Messages API writes ===
//
// Typed and borrowed, serialised straight to bytes, like the OpenAI shapes.

/// A non-streamed `message` (and, with no content and no stop reason, the
/// one `message_start` carries).
#[derive(Debug, Serialize)]
pub(crate) struct MessageOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: &'a str,
    pub content: Vec<BlockOut<'a>>,
    pub stop_reason: Option<&'a str>,
    pub stop_sequence: Option<&'a str>,
    pub usage: UsageOut,
}

/// A content block of an answer.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockOut<'a> {
    Text {
        text: &'a str,
    },
    /// `input` is the call's arguments, parsed (the engine has checked that
    /// they parse).
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
}

/// Anthropic's usage object.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct UsageOut {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl From<Usage> for UsageOut {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

impl<'a> MessageOut<'a> {
    /// The answer: its text as one block (when there is any), then one
    /// `tool_use` block per call.
    pub(crate) fn answer(
        id: &'a str,
        model: &'a str,
        text: &'a str,
        calls: &'a [ToolCall],
        finish: &FinishReason,
        usage: Option<Usage>,
    ) -> Self {
        let mut content = Vec::with_capacity(calls.len() + 1);
        if !text.is_empty() {
            content.push(BlockOut::Text { text });
        }
        content.extend(calls.iter().map(|c| BlockOut::ToolUse {
            id: &c.id,
            name: &c.name,
            input: tool_input(&c.arguments),
        }));
        Self {
            id,
            kind: "message",
            role: "assistant",
            model,
            content,
            stop_reason: Some(stop_reason(finish)),
            stop_sequence: None,
            usage: usage.map(UsageOut::from).unwrap_or_default(),
        }
    }

    /// A refusal returned by the `surface` policy: Anthropic's own shape
    /// for one, no content and `stop_reason: "refusal"`.
    pub(crate) fn refusal(id: &'a str, model: &'a str) -> Self {
        Self {
            id,
            kind: "message",
            role: "assistant",
            model,
            content: Vec::new(),
            stop_reason: Some("refusal"),
            stop_sequence: None,
            usage: UsageOut::default(),
        }
    }
}

/// A call's arguments as the `input` object (empty arguments are `{}`).
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::Object(serde_json::Map::new()))
}

/// An error body: `{"type":"error","error":{"type","message"}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetailOut<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ErrorDetailOut<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub message: &'a str,
}

impl<'a> ErrorOut<'a> {
    pub(crate) fn new(kind: &'a str, message: &'a str) -> Self {
        Self {
            kind: "error",
            error: ErrorDetailOut { kind, message },
        }
    }
}

// === the event stream ===

/// A committed [`GenerationStream`] as Anthropic's server-sent events:
/// `message_start`; for the text a `text` block (`content_block_start`,
/// `text_delta`s, `content_block_stop`); for each tool call a `tool_use`
/// block (`input: {}`, then `input_json_delta`s), each block with the next
/// index and the open one closed first; then `message_delta` (stop reason,
/// usage) and `message_stop`. A failure past the commit ends with an
/// `error` event and no `message_stop`, so that no client mistakes a cut
/// answer for a complete one; a refusal past the commit ends the way
/// Anthropic ends one, `stop_reason: "refusal"`.
///
/// Dropping this stream (hyper does when the client disconnects) drops the
/// engine's stream, which closes the upstream connection.
pub(crate) struct MessageEvents {
    inner: Option<GenerationStream>,
    id: String,
    pending: VecDeque<Event>,
    finished: bool,
    /// The index the next content block gets.
    next_index: u32,
    /// The block currently open.
    open: Option<OpenBlock>,
    /// Each tool call's block: (the call's neutral index, its block index).
    tool_blocks: Vec<(u32, u32)>,
    /// The provider's own events are relayed as they came (a natively
    /// forwarded request served by an Anthropic target); the neutral items
    /// are then ignored.
    native: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    Text(u32),
    /// A tool call's block: (the call's neutral index, the block index).
    Tool(u32, u32),
}

impl MessageEvents {
    /// The events of a committed stream.
    pub(crate) fn new(inner: GenerationStream, id: String) -> Self {
        let mut this = Self {
            id,
            pending: VecDeque::new(),
            finished: false,
            next_index: 0,
            open: None,
            tool_blocks: Vec::new(),
            inner: None,
            native: inner.native,
        };
        if !this.native {
            this.message_start(&inner.model);
        }
        this.inner = Some(inner);
        this
    }

    /// A refusal returned by the `surface` policy before anything was
    /// sent: Anthropic's own shape for one (`message_start`, a
    /// `message_delta` with `stop_reason: "refusal"`, `message_stop`).
    pub(crate) fn refusal(id: String, model: &str) -> Self {
        let mut this = Self {
            id,
            pending: VecDeque::new(),
            finished: true,
            next_index: 0,
            open: None,
            tool_blocks: Vec::new(),
            inner: None,
            native: false,
        };
        this.message_start(model);
        this.message_end("refusal", None);
        this
    }

    fn message_start(&mut self, model: &str) {
        #[derive(Serialize)]
        struct Start<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            message: MessageOut<'a>,
        }
        let start = Start {
            kind: "message_start",
            message: MessageOut {
                id: &self.id,
                kind: "message",
                role: "assistant",
                model,
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: UsageOut::default(),
            },
        };
        let e = event("message_start", &start);
        self.pending.push_back(e);
    }

    /// `message_delta` and `message_stop`.
    fn message_end(&mut self, stop_reason: &str, usage: Option<Usage>) {
        #[derive(Serialize)]
        struct Delta<'a> {
            stop_reason: &'a str,
            stop_sequence: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct DeltaUsage {
            #[serde(skip_serializing_if = "Option::is_none")]
            input_tokens: Option<u64>,
            output_tokens: u64,
        }
        #[derive(Serialize)]
        struct MessageDelta<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            delta: Delta<'a>,
            usage: DeltaUsage,
        }
        self.close_block();
        let delta = MessageDelta {
            kind: "message_delta",
            delta: Delta {
                stop_reason,
                stop_sequence: None,
            },
            usage: DeltaUsage {
                input_tokens: usage.map(|u| u.input_tokens),
                output_tokens: usage.map_or(0, |u| u.output_tokens),
            },
        };
        self.pending.push_back(event("message_delta", &delta));
        self.pending
            .push_back(event("message_stop", &Typed::new("message_stop")));
        self.finished = true;
    }

    fn close_block(&mut self) {
        #[derive(Serialize)]
        struct Stop {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
        }
        let index = match self.open.take() {
            None => return,
            Some(OpenBlock::Text(i) | OpenBlock::Tool(_, i)) => i,
        };
        self.pending.push_back(event(
            "content_block_stop",
            &Stop {
                kind: "content_block_stop",
                index,
            },
        ));
    }

    /// Closes the open block and starts a new one.
    fn start_block(&mut self, block: BlockStart<'_>) -> u32 {
        #[derive(Serialize)]
        struct Start<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
            content_block: BlockStart<'a>,
        }
        self.close_block();
        let index = self.next_index;
        self.next_index += 1;
        self.pending.push_back(event(
            "content_block_start",
            &Start {
                kind: "content_block_start",
                index,
                content_block: block,
            },
        ));
        index
    }

    fn delta(&mut self, index: u32, delta: DeltaOut<'_>) {
        #[derive(Serialize)]
        struct BlockDelta<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
            delta: DeltaOut<'a>,
        }
        self.pending.push_back(event(
            "content_block_delta",
            &BlockDelta {
                kind: "content_block_delta",
                index,
                delta,
            },
        ));
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Some(OpenBlock::Text(i)) => i,
            _ => {
                let i = self.start_block(BlockStart::Text { text: "" });
                self.open = Some(OpenBlock::Text(i));
                i
            }
        };
        self.delta(index, DeltaOut::TextDelta { text });
    }

    fn tool_call(&mut self, call: &ToolCallDelta) {
        let index = match self.open {
            Some(OpenBlock::Tool(c, i)) if c == call.index => i,
            _ => match self.tool_blocks.iter().find(|(c, _)| *c == call.index) {
                // A late fragment of a call whose block is already closed
                // (no provider interleaves calls, but nothing forbids it):
                // its JSON still goes to its own block rather than be lost.
                Some(&(_, i)) => i,
                None => {
                    let minted;
                    let id = match &call.id {
                        Some(id) => id.as_str(),
                        None => {
                            minted = format!("toolu_{}_{}", id_safe(&self.id), call.index);
                            &minted
                        }
                    };
                    let i = self.start_block(BlockStart::ToolUse {
                        id,
                        name: call.name.as_deref().unwrap_or(""),
                        input: Empty {},
                    });
                    self.open = Some(OpenBlock::Tool(call.index, i));
                    self.tool_blocks.push((call.index, i));
                    i
                }
            },
        };
        if !call.arguments.is_empty() {
            self.delta(
                index,
                DeltaOut::InputJsonDelta {
                    partial_json: &call.arguments,
                },
            );
        }
    }

    fn push(&mut self, item: StreamItem) {
        if self.native {
            return self.relay(item);
        }
        match item {
            StreamItem::Delta(text) => self.text(&text),
            StreamItem::ToolCall(call) => self.tool_call(&call),
            // Only a native stream carries these (handled by `relay`).
            StreamItem::Native(_) => {}
            // A thinking block needs the provider's signature to be sent
            // back; only a native stream (its own events) carries one.
            StreamItem::Reasoning(_) => {}
            StreamItem::Done(done) => {
                self.message_end(stop_reason(&done.finish_reason), done.usage);
            }
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.message_end("refusal", None);
            }
            StreamItem::Error(error) => {
                let kind = if error.code == FailureCode::Unavailable {
                    "overloaded_error"
                } else {
                    "api_error"
                };
                self.fail(kind, &format!("{}: {}", error.code.as_str(), error.message));
            }
        }
    }

    /// A native stream: the provider's events as they came, byte for byte
    /// in their data (thinking signatures included); the neutral items only
    /// say how it ended.
    fn relay(&mut self, item: StreamItem) {
        match item {
            StreamItem::Native(e) => {
                // `event:` before `data:`, as the provider wrote them.
                let mut out = Event::default();
                // The provider's own `error` event ends the stream: the
                // engine's error item that follows would be a second one.
                self.finished |= e.event == "error";
                if !e.event.is_empty() {
                    out = out.event(e.event);
                }
                self.pending.push_back(out.data(e.data));
            }
            StreamItem::Delta(_) | StreamItem::Reasoning(_) | StreamItem::ToolCall(_) => {}
            // `message_stop` came as the provider's own event.
            StreamItem::Done(_) => self.finished = true,
            // The provider's refusal (`stop_reason: "refusal"`) came as its
            // own `message_delta`; the engine stopped reading there, so the
            // stream is closed as Anthropic closes one.
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.pending
                    .push_back(event("message_stop", &Typed::new("message_stop")));
                self.finished = true;
            }
            StreamItem::Error(error) => {
                self.fail(
                    "api_error",
                    &format!("{}: {}", error.code.as_str(), error.message),
                );
            }
        }
    }

    /// The `error` event that ends a broken stream (no `message_stop`).
    fn fail(&mut self, kind: &str, message: &str) {
        self.pending
            .push_back(event("error", &ErrorOut::new(kind, message)));
        self.finished = true;
    }
}

impl futures_core::Stream for MessageEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.finished {
                return Poll::Ready(None);
            }
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match inner.poll_next(cx) {
                Poll::Ready(Some(item)) => self.push(item),
                // The engine always ends with Done or Error; a stream that
                // just stops was cut, and says so.
                Poll::Ready(None) => self.fail(
                    "api_error",
                    "stream_interrupted: the stream ended without a result",
                ),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The `content_block` of a `content_block_start`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

/// `{}`.
#[derive(Debug, Serialize)]
struct Empty {}

/// The `delta` of a `content_block_delta`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaOut<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

/// An event whose data is only its type (`message_stop`, `ping`).
#[derive(Debug, Serialize)]
pub(crate) struct Typed {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl Typed {
    pub(crate) fn new(kind: &'static str) -> Self {
        Self { kind }
    }
}

/// A named event whose data is `value` as JSON; these shapes always
/// serialise (plain structs with string keys), so the empty object is only
/// a formality.
pub(crate) fn event(name: &'static str, value: &impl Serialize) -> Event {
    let data = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    Event::default().event(name).data(data)
}

/// `id` (a message id made of the client's `x-request-id`, which may hold
/// `.` and `:`) in Anthropic's id alphabet, injectively: letters and digits
/// stand for themselves, every other byte is `_` and two hex digits.
fn id_safe(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatRequest, String> {
        let mut req: MessagesRequest = serde_json::from_value(body).map_err(|e| e.to_string())?;
        req.take_chat().map_err(|e| format!("{e:?}"))
    }

    #[test]
    fn a_tool_loop_with_thinking_translates() {
        let c = chat(serde_json::json!({
            "model": "m", "max_tokens": 100,
            "system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "B"}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xx"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "3"}, {"type": "text", "text": "C"}], "is_error": true},
                    {"type": "text", "text": "and now?"}
                ]}
            ],
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "metadata": {"user_id": "u1"}, "top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}
        }))
        .unwrap();
        assert_eq!(c.system.as_deref(), Some("A\n\nB"));
        assert_eq!(c.messages.len(), 4);
        assert_eq!(c.messages[1].text_content(), "Let me look.");
        assert_eq!(c.messages[1].tool_calls[0].arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(c.messages[2].role, Role::Tool);
        assert_eq!(c.messages[2].text_content(), "Error: 3\nC");
        assert_eq!(c.messages[3].text_content(), "and now?");
        assert_eq!(c.tool_choice, Some(ToolChoice::Required));
        assert_eq!(c.parallel_tool_calls, Some(false));
        assert_eq!(c.user.as_deref(), Some("u1"));
    }

    #[test]
    fn what_only_anthropic_can_take_is_noted_not_refused() {
        let base = |extra: Value| {
            let mut v = serde_json::json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
            if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                v.extend(extra.clone());
            }
            chat(v)
        };
        assert!(base(serde_json::json!({})).is_ok_and(|c| c.native_only.is_none()));
        // Mistakes every protocol would refuse.
        for bad in [
            serde_json::json!({"max_tokens": null}),
            serde_json::json!({"model": null}),
            serde_json::json!({"temperature": 1.5}),
            serde_json::json!({"tool_choice": {"type": "tool"}}),
        ] {
            assert!(base(bad.clone()).is_err(), "{bad}");
        }
        // What only Anthropic can take: the request stands, and says what
        // other protocols lack (and what needs the operator's word).
        for (foreign, lacks, gated) in [
            (
                serde_json::json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                "Anthropic's server tools",
                Some(Gated::WebSearch),
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}),
                "content block types only Anthropic knows (documents, server tool results…)",
                None,
            ),
            (
                serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
                "images by Files API id",
                None,
            ),
            (
                serde_json::json!({"messages": [{"role": "developer", "content": "x"}]}),
                "a message role only Anthropic knows",
                None,
            ),
            (
                serde_json::json!({"mcp_servers": [{"type": "url", "url": "https://x"}]}),
                "MCP servers",
                Some(Gated::Mcp),
            ),
        ] {
            let c = base(foreign.clone()).unwrap_or_else(|e| panic!("{foreign}: {e:?}"));
            assert_eq!(c.native_only, Some(lacks), "{foreign}");
            assert_eq!(
                gated.is_some_and(|g| c.native_gated.contains(g)),
                gated.is_some(),
                "{foreign}"
            );
        }
        // A system message is carried, in place.
        let c = base(serde_json::json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]}
        ]}))
        .unwrap();
        assert_eq!(c.native_only, None);
        assert_eq!(c.messages[1].role, Role::System);
        assert_eq!(c.messages[1].text_content(), "be brief");
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(stop_reason(&FinishReason::Stop), "end_turn");
        assert_eq!(stop_reason(&FinishReason::Length), "max_tokens");
        assert_eq!(stop_reason(&FinishReason::ToolCalls), "tool_use");
        assert_eq!(
            stop_reason(&FinishReason::Other("stop_sequence".into())),
            "stop_sequence"
        );
        assert_eq!(
            stop_reason(&FinishReason::Other("recitation".into())),
            "end_turn"
        );
    }
}
