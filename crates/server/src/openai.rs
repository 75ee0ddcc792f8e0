//! The OpenAI Chat Completions shapes the compatible API reads and writes.
//! Unknown request fields are ignored (SDKs send many); known ones are
//! checked, and what Understudy cannot honour (tools, n > 1) is refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use understudy_core::{ChatRequest, FinishReason, Message, Role, Usage};

use crate::ApiError;

/// The body of `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatCompletionRequest {
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
    pub tools: Option<Value>,
    pub functions: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct StreamOptions {
    pub include_usage: Option<bool>,
}

impl ChatCompletionRequest {
    /// The neutral request: system and developer messages become the system
    /// prompt (joined in order).
    pub(crate) fn to_chat(&self) -> Result<ChatRequest, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid("n", "only n = 1 is supported"));
        }
        if self
            .tools
            .as_ref()
            .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()))
        {
            return Err(ApiError::invalid(
                "tools",
                "tool calls are not supported by this gateway",
            ));
        }
        if self.functions.as_ref().is_some_and(|f| !f.is_null()) {
            return Err(ApiError::invalid(
                "functions",
                "function calls are not supported by this gateway",
            ));
        }
        let mut system: Vec<String> = Vec::new();
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let text = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        if p.kind != "text" {
                            return Err(ApiError::invalid(
                                format!("messages[{i}].content"),
                                format!("content parts of type `{}` are not supported", p.kind),
                            ));
                        }
                        text.push_str(p.text.as_deref().unwrap_or_default());
                    }
                    text
                }
            };
            match m.role.as_str() {
                "system" | "developer" => system.push(text),
                "user" => messages.push(Message::text(Role::User, text)),
                "assistant" => messages.push(Message::text(Role::Assistant, text)),
                other => {
                    return Err(ApiError::invalid(
                        format!("messages[{i}].role"),
                        format!(
                            "unknown or unsupported role `{other}` (expected system, developer, user or assistant)"
                        ),
                    ));
                }
            }
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        let chat = ChatRequest {
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            messages,
            temperature: self.temperature,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop,
            ..ChatRequest::default()
        };
        chat.validate()?;
        Ok(chat)
    }

    pub(crate) fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }
}

/// OpenAI's `finish_reason` for ours.
pub(crate) fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Other(other) => other.as_str(),
    }
}

// === what the compatible API writes ===
//
// Typed and borrowed, serialised straight to bytes: building a
// `serde_json::Value` first and dropping it cost about 20 000 instructions
// a response in the profile, a tenth of the gateway's work per request.

/// A non-streamed `chat.completion`.
#[derive(Debug, Serialize)]
pub(crate) struct CompletionOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [ChoiceOut<'a>; 1],
    pub usage: Option<UsageOut>,
    pub system_fingerprint: Option<()>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChoiceOut<'a> {
    pub index: u32,
    pub message: MessageOut<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: &'a str,
}

#[derive(Debug, Serialize)]
pub(crate) struct MessageOut<'a> {
    pub role: &'static str,
    pub content: Option<&'a str>,
    pub refusal: Option<&'a str>,
}

/// OpenAI's usage object.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct UsageOut {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl From<Usage> for UsageOut {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            total_tokens: u.input_tokens + u.output_tokens,
        }
    }
}

/// One `chat.completion.chunk`.
#[derive(Debug, Serialize)]
pub(crate) struct ChunkOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [ChunkChoiceOut<'a>; 1],
}

#[derive(Debug, Serialize)]
pub(crate) struct ChunkChoiceOut<'a> {
    pub index: u32,
    pub delta: DeltaOut<'a>,
    pub logprobs: Option<()>,
    pub finish_reason: Option<&'a str>,
}

/// A chunk's `delta`: `{}` when both are absent.
#[derive(Debug, Default, Serialize)]
pub(crate) struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
}

/// The usage chunk sent last when `stream_options.include_usage` is set.
#[derive(Debug, Serialize)]
pub(crate) struct UsageChunkOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: [(); 0],
    pub usage: Option<UsageOut>,
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
