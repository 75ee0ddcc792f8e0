//! What a Messages answer is written as: the `message` object with its
//! `text` and `tool_use` blocks and usage (also the skeleton that
//! `message_start` carries), and Anthropic's `stop_reason` for the neutral
//! finish reason.
//!
//! Typed and borrowed, serialised straight to bytes, like the OpenAI shapes.

use serde::Serialize;
use serde_json::Value;
use understudy_core::{FinishReason, ToolCall, Usage};

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
