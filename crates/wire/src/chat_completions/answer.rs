//! The Chat Completions answer the gateway writes a client: the
//! `chat.completion` object and the `chat.completion.chunk`s of a stream.
//!
//! Typed and borrowed, serialised straight to bytes: building a
//! `serde_json::Value` first and dropping it cost about 20 000 instructions
//! a response in the profile, a tenth of the gateway's work per request.
//! The answer every plain request writes, [`CompletionOut::to_json`], is
//! written by hand into one buffer (`crate::json_text`), the same bytes
//! serde writes.

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

impl CompletionOut<'_> {
    /// The answer's JSON, byte for byte what `serde_json::to_vec` writes,
    /// in one buffer sized once.
    pub fn to_json(&self) -> Vec<u8> {
        use crate::json_text::{push_opt_str, push_str, push_u64};
        let [choice] = &self.choices;
        let message = &choice.message;
        let calls = message.tool_calls.as_deref().unwrap_or_default();
        let room = 320
            + self.id.len()
            + self.model.len()
            + message.content.map_or(0, str::len)
            + message.refusal.map_or(0, str::len)
            + calls
                .iter()
                .map(|c| 64 + c.id.len() + c.function.name.len() + c.function.arguments.len())
                .sum::<usize>();
        let mut out = Vec::with_capacity(room);
        out.extend_from_slice(b"{\"id\":");
        push_str(&mut out, self.id);
        out.extend_from_slice(b",\"object\":");
        push_str(&mut out, self.object);
        out.extend_from_slice(b",\"created\":");
        push_u64(&mut out, self.created);
        out.extend_from_slice(b",\"model\":");
        push_str(&mut out, self.model);
        out.extend_from_slice(b",\"choices\":[{\"index\":");
        push_u64(&mut out, u64::from(choice.index));
        out.extend_from_slice(b",\"message\":{\"role\":");
        push_str(&mut out, message.role);
        out.extend_from_slice(b",\"content\":");
        push_opt_str(&mut out, message.content);
        out.extend_from_slice(b",\"refusal\":");
        push_opt_str(&mut out, message.refusal);
        if message.tool_calls.is_some() {
            out.extend_from_slice(b",\"tool_calls\":[");
            for (i, call) in calls.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"id\":");
                push_str(&mut out, call.id);
                out.extend_from_slice(b",\"type\":");
                push_str(&mut out, call.kind);
                out.extend_from_slice(b",\"function\":{\"name\":");
                push_str(&mut out, call.function.name);
                out.extend_from_slice(b",\"arguments\":");
                push_str(&mut out, call.function.arguments);
                out.extend_from_slice(b"}}");
            }
            out.push(b']');
        }
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
        push_str(&mut out, choice.finish_reason);
        out.extend_from_slice(b"}],\"usage\":");
        match &self.usage {
            Some(u) => {
                out.extend_from_slice(b"{\"prompt_tokens\":");
                push_u64(&mut out, u.prompt_tokens);
                out.extend_from_slice(b",\"completion_tokens\":");
                push_u64(&mut out, u.completion_tokens);
                out.extend_from_slice(b",\"total_tokens\":");
                push_u64(&mut out, u.total_tokens);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"system_fingerprint\":null}");
        out
    }
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

#[cfg(test)]
mod tests {
    use understudy_types::ToolCall;

    use super::*;

    /// Each answer's hand-written JSON against serde's for the same value.
    #[test]
    fn to_json_writes_what_serde_writes() {
        let calls = [
            ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            },
            ToolCall {
                id: "call_2".into(),
                name: "now".into(),
                arguments: String::new(),
            },
        ];
        let usage = WireUsage {
            prompt_tokens: 12,
            completion_tokens: 9,
            total_tokens: 21,
            prompt_tokens_details: None,
            completion_tokens_details: None,
        };
        let refused = MessageOut {
            role: "assistant",
            content: None,
            refusal: Some("I can't \"help\" with that.\n"),
            tool_calls: None,
        };
        let cases: [(MessageOut<'_>, Option<WireUsage>, &str); 5] = [
            (MessageOut::answer("Hello!", &[]), Some(usage), "stop"),
            (MessageOut::answer("", &[]), None, "length"),
            (MessageOut::answer("", &calls), Some(usage), "tool_calls"),
            (
                MessageOut::answer("Say \"hi\"\\\t✓ 🦀", &calls[..1]),
                None,
                "tool_calls",
            ),
            (refused, None, "content_filter"),
        ];
        for (message, usage, finish_reason) in cases {
            let body = CompletionOut {
                id: "chatcmpl-0123456789abcdef",
                object: "chat.completion",
                created: 1_733_000_000,
                model: "gpt-4o-mini",
                choices: [ChoiceOut {
                    index: 0,
                    message,
                    logprobs: None,
                    finish_reason,
                }],
                usage,
                system_fingerprint: None,
            };
            let serde = serde_json::to_vec(&body).unwrap_or_default();
            assert_eq!(
                String::from_utf8_lossy(&body.to_json()),
                String::from_utf8_lossy(&serde)
            );
        }
    }
}
