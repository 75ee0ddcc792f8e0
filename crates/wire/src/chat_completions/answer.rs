//! The Chat Completions answer the gateway writes a client: the
//! `chat.completion` object and the `chat.completion.chunk`s of a stream.
//!
//! Typed and borrowed, serialised straight to bytes: building a
//! `serde_json::Value` first and dropping it cost about 20 000 instructions
//! a response in the profile, a tenth of the gateway's work per request.

use serde::Serialize;
use understudy_types::ToolCall;

use super::response::WireUsage;

/// A non-streamed `chat.completion`.
#[derive(Debug, Serialize)]
pub struct CompletionOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [ChoiceOut<'a>; 1],
    pub usage: Option<WireUsage>,
    pub system_fingerprint: Option<()>,
}

#[derive(Debug, Serialize)]
pub struct ChoiceOut<'a> {
    pub index: u32,
    pub message: MessageOut<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: &'a str,
}

#[derive(Debug, Serialize)]
pub struct MessageOut<'a> {
    pub role: &'static str,
    pub content: Option<&'a str>,
    pub refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut<'a>>>,
}

/// A tool call in an answer: `{"id","type":"function","function":{"name","arguments"}}`.
#[derive(Debug, Serialize)]
pub struct ToolCallOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut<'a>,
}

#[derive(Debug, Serialize)]
pub struct FunctionOut<'a> {
    pub name: &'a str,
    pub arguments: &'a str,
}

impl<'a> MessageOut<'a> {
    /// The assistant's message: its text (null when it only called tools)
    /// and its tool calls.
    pub fn answer(text: &'a str, calls: &'a [ToolCall]) -> Self {
        Self {
            role: "assistant",
            content: (!text.is_empty() || calls.is_empty()).then_some(text),
            refusal: None,
            tool_calls: (!calls.is_empty()).then(|| {
                calls
                    .iter()
                    .map(|c| ToolCallOut {
                        id: &c.id,
                        kind: "function",
                        function: FunctionOut {
                            name: &c.name,
                            arguments: &c.arguments,
                        },
                    })
                    .collect()
            }),
        }
    }
}

/// One `chat.completion.chunk`.
#[derive(Debug, Serialize)]
pub struct ChunkOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [ChunkChoiceOut<'a>; 1],
}

#[derive(Debug, Serialize)]
pub struct ChunkChoiceOut<'a> {
    pub index: u32,
    pub delta: DeltaOut<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: Option<&'a str>,
}

/// A chunk's `delta`: `{}` when all are absent.
#[derive(Debug, Default, Serialize)]
pub struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    /// The model's reasoning, in the field reasoning models' compatible
    /// APIs use (DeepSeek, vLLM, Groq); clients that do not know it ignore it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    /// A surfaced refusal's words (OpenAI's own streamed `delta.refusal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<[ToolCallDeltaOut<'a>; 1]>,
}

/// One fragment of a streamed tool call: the first of each `index` names
/// its `id` and function; the rest carry argument text.
#[derive(Debug, Serialize)]
pub struct ToolCallDeltaOut<'a> {
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDeltaOut<'a>,
}

#[derive(Debug, Serialize)]
pub struct FunctionDeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub arguments: &'a str,
}

/// The usage chunk sent last when `stream_options.include_usage` is set.
#[derive(Debug, Serialize)]
pub struct UsageChunkOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [(); 0],
    pub usage: Option<WireUsage>,
}
