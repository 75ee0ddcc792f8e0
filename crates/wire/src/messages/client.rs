//! The body of `POST /v1/messages` as the client sends it: the request,
//! its turns and content blocks, tools and `tool_choice`, checked for shape
//! only (what a block means for other protocols is [`super::translate`]'s
//! business), and the input-token estimate `count_tokens` answers with,
//! read straight off these shapes.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::Value;

/// The body of `POST /v1/messages` (and of `/v1/messages/count_tokens`,
/// which needs no `max_tokens`).
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
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
    /// No neutral field: accepted (so that its shape is checked) and
    /// dropped.
    pub top_k: Option<u32>,
    pub metadata: Option<MetadataIn>,
    pub tools: Option<Vec<ToolIn>>,
    pub tool_choice: Option<ToolChoiceIn>,
    /// Extended thinking (`enabled`, `adaptive`): Anthropic targets get
    /// it as sent; the translation for other protocols drops it (it is
    /// read so that its shape is checked).
    pub thinking: Option<Value>,
    /// `effort` (dropped in translation) and `format`, Anthropic's
    /// structured output, which becomes the neutral `response_format`.
    pub output_config: Option<OutputConfigIn>,
    /// The older name of `output_config.format`.
    pub output_format: Option<FormatIn>,
    /// MCP servers the provider would call: Anthropic only, and gated.
    pub mcp_servers: Option<Value>,
    /// A code-execution container: Anthropic only, and gated; boxed, as
    /// it is rarely sent.
    pub container: Option<Box<Value>>,
    /// Routing the client asks for (OpenRouter's `models` and `provider`,
    /// LiteLLM's `fallbacks`: [`crate::caller`]); boxed, as they are
    /// rarely sent. Never forwarded.
    pub models: Option<Box<crate::caller::ModelsIn>>,
    pub provider: Option<Box<crate::caller::ProviderField>>,
    pub fallbacks: Option<Box<crate::caller::FallbacksIn>>,
}

/// `output_config`: only `format` is translated.
#[derive(Debug, Deserialize)]
pub struct OutputConfigIn {
    pub format: Option<FormatIn>,
}

/// `{"type": "json_schema", "schema": {…}}`.
#[derive(Debug, Deserialize)]
pub struct FormatIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: Option<Value>,
}

/// One turn: `user` or `assistant`, content a string or blocks.
#[derive(Debug, Deserialize)]
pub struct MessageIn {
    pub role: String,
    pub content: TextOrBlocks<Block>,
}

/// A string, or an array of content blocks. (Written by hand rather than
/// as an untagged enum so that an error inside a block names its path.)
#[derive(Debug)]
pub enum TextOrBlocks<T> {
    Text(String),
    Blocks(Vec<T>),
}

/// One content block of a message. `cache_control` and other fields a
/// block may carry are ignored.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
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
pub enum ResultBlock {
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
pub enum ImageSource {
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
pub struct SystemBlock {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct MetadataIn {
    pub user_id: Option<String>,
}

/// A tool: a custom one (`type` absent or `custom`) with an
/// `input_schema`, or a server tool (`web_search_…`, `bash_…`), refused.
#[derive(Debug, Deserialize)]
pub struct ToolIn {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub strict: Option<bool>,
}

/// `{"type": "auto"|"any"|"tool"|"none", "name"?, "disable_parallel_tool_use"?}`.
#[derive(Debug, Deserialize)]
pub struct ToolChoiceIn {
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
    /// An estimate of the input tokens: a quarter of the characters of all
    /// text (system, blocks, thinking, tool inputs and results, tool
    /// definitions), rounded up, plus [`IMAGE_TOKENS`] per image. No
    /// tokenizer is involved; it is an estimate and says so.
    pub fn estimate_input_tokens(&self) -> u64 {
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
pub const IMAGE_TOKENS: u64 = 1_600;
