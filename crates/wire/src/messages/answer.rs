//! What a Messages answer is written as: the `message` object with its
//! `text` and `tool_use` blocks and usage (also the skeleton that
//! `message_start` carries), its stop reason from the table in
//! [`super`].
//!
//! Typed and borrowed, serialised straight to bytes, like the OpenAI shapes.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use understudy_types::{FinishReason, ToolCall, Usage};

use super::request::BlockOut;
use super::stop_reason;

/// A non-streamed `message` (and, with no content and no stop reason, the
/// one `message_start` carries).
#[derive(Debug, Serialize)]
pub struct MessageOut<'a> {
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

/// Anthropic's usage object.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct UsageOut {
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
    pub fn answer(
        id: &'a str,
        model: &'a str,
        text: &'a str,
        calls: &'a [ToolCall],
        finish: &FinishReason,
        usage: Option<Usage>,
    ) -> Self {
        let mut content = Vec::with_capacity(calls.len() + 1);
        if !text.is_empty() {
            content.push(BlockOut::Text {
                text: Cow::Borrowed(text),
            });
        }
        content.extend(calls.iter().map(|c| BlockOut::ToolUse {
            id: Cow::Borrowed(&c.id),
            name: &c.name,
            input: tool_input(&c.arguments),
        }));
        Self {
            content,
            stop_reason: Some(stop_reason(finish)),
            usage: usage.map(UsageOut::from).unwrap_or_default(),
            ..Self::start(id, model)
        }
    }

    /// A refusal returned by the `surface` policy: Anthropic's own shape
    /// for one, no content and `stop_reason: "refusal"`.
    pub fn refusal(id: &'a str, model: &'a str) -> Self {
        Self {
            stop_reason: Some("refusal"),
            ..Self::start(id, model)
        }
    }

    /// The skeleton `message_start` carries: no content, no stop reason.
    pub fn start(id: &'a str, model: &'a str) -> Self {
        Self {
            id,
            kind: "message",
            role: "assistant",
            model,
            content: Vec::new(),
            stop_reason: None,
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
