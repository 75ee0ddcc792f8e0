//! What `/v1/responses` answers: the `response` object and its output
//! items (`message` with `output_text` or `refusal`, `function_call`,
//! `custom_tool_call`, `reasoning`), with the request's settings echoed as
//! the API does. The same shapes go into the stream's events and into the
//! store.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use understudy_types::{ToolCall, Usage};

use super::inbound::{CreateRequest, ToolNames};

/// One output item.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<Content>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    CustomToolCall {
        id: String,
        call_id: String,
        name: String,
        input: String,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
    },
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<Content>,
        status: &'static str,
    },
}

/// A content part of an output item.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    OutputText {
        text: String,
        annotations: Vec<Value>,
        logprobs: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
    ReasoningText {
        text: String,
    },
}

/// The request's settings, echoed in every `response` object.
#[derive(Debug, Clone, Serialize)]
pub struct Echo {
    pub instructions: Value,
    pub max_output_tokens: Option<u32>,
    pub metadata: Value,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: Value,
    pub store: bool,
    pub temperature: Option<f32>,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub top_p: Option<f32>,
    pub truncation: &'static str,
    pub user: Option<String>,
}

/// A `response` object.
#[derive(Debug, Serialize)]
pub struct ResponseOut<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created_at: u64,
    pub status: &'a str,
    pub error: Option<Value>,
    pub incomplete_details: Option<Value>,
    pub model: &'a str,
    pub output: &'a [OutputItem],
    pub usage: Option<UsageOut>,
    #[serde(flatten)]
    pub echo: &'a Echo,
}

/// The Responses API's usage object, written to a client and read from a
/// provider (which may leave any of it out; openai-python
/// `types/responses/response_usage.py`). `input_tokens` includes the
/// cached tokens and `output_tokens` the reasoning tokens that the details
/// break out. A client's answer carries no details yet (zeros, as before
/// they were read).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageOut {
    pub input_tokens: u64,
    pub input_tokens_details: CachedOut,
    pub output_tokens: u64,
    pub output_tokens_details: ReasoningOut,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CachedOut {
    #[serde(default)]
    pub cached_tokens: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ReasoningOut {
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl From<UsageOut> for Usage {
    fn from(u: UsageOut) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_input_tokens: u.input_tokens_details.cached_tokens,
            cache_write_input_tokens: 0,
            reasoning_output_tokens: u.output_tokens_details.reasoning_tokens,
        }
    }
}

impl From<Usage> for UsageOut {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            input_tokens_details: CachedOut { cached_tokens: 0 },
            output_tokens: u.output_tokens,
            output_tokens_details: ReasoningOut {
                reasoning_tokens: 0,
            },
            total_tokens: u.input_tokens + u.output_tokens,
        }
    }
}

// === impl Echo ===

impl Echo {
    pub fn new(body: &CreateRequest) -> Self {
        Self {
            instructions: body.instructions.clone().unwrap_or(Value::Null),
            max_output_tokens: body.max_output_tokens,
            metadata: body.metadata.clone().unwrap_or_else(|| json!({})),
            parallel_tool_calls: body.parallel_tool_calls.unwrap_or(true),
            previous_response_id: body.previous_response_id.clone(),
            reasoning: body.reasoning.clone().unwrap_or(Value::Null),
            store: body.store.unwrap_or(true),
            temperature: body.temperature,
            text: json!({"format": body.text.as_ref().and_then(|t| t.format.clone())
                .unwrap_or_else(|| json!({"type": "text"}))}),
            tool_choice: body.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            tools: body.tools.clone().unwrap_or_default(),
            top_p: body.top_p,
            truncation: "disabled",
            user: body.user.clone(),
        }
    }
}

// === impl OutputItem ===

impl OutputItem {
    /// The item for a tool call the model made, in the client's terms
    /// (a custom tool's call carries its `input`; a namespaced tool its
    /// own name and its namespace).
    pub fn call(call: &ToolCall, names: &ToolNames, status: &'static str) -> Self {
        let origin = names.origin(&call.name);
        if origin.custom {
            return Self::CustomToolCall {
                id: super::new_id("ctc"),
                call_id: call.id.clone(),
                name: origin.name,
                input: custom_input(&call.arguments),
                status,
                namespace: origin.namespace,
            };
        }
        Self::FunctionCall {
            id: super::new_id("fc"),
            call_id: call.id.clone(),
            name: origin.name,
            arguments: call.arguments.clone(),
            status,
            namespace: origin.namespace,
        }
    }

    /// The assistant's text as a message item.
    pub fn text(text: &str, status: &'static str) -> Self {
        Self::Message {
            id: super::new_id("msg"),
            status,
            role: "assistant",
            content: vec![Content::OutputText {
                text: text.to_owned(),
                annotations: Vec::new(),
                logprobs: Vec::new(),
            }],
        }
    }

    /// A refusal as a message item.
    pub fn refusal(refusal: &str) -> Self {
        Self::Message {
            id: super::new_id("msg"),
            status: "incomplete",
            role: "assistant",
            content: vec![Content::Refusal {
                refusal: refusal.to_owned(),
            }],
        }
    }

    pub fn id(&self) -> &str {
        match self {
            Self::Message { id, .. }
            | Self::FunctionCall { id, .. }
            | Self::CustomToolCall { id, .. }
            | Self::Reasoning { id, .. } => id,
        }
    }

    /// Marks an item the answer ended in the middle of.
    pub fn set_status(&mut self, to: &'static str) {
        match self {
            Self::Message { status, .. }
            | Self::FunctionCall { status, .. }
            | Self::CustomToolCall { status, .. }
            | Self::Reasoning { status, .. } => *status = to,
        }
    }
}

/// A custom tool's free text from the `{"input": …}` arguments the model
/// wrote (the arguments themselves if they are not that shape).
pub fn custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(mut o)) => match o.remove("input") {
            Some(Value::String(s)) => s,
            _ => arguments.to_owned(),
        },
        _ => arguments.to_owned(),
    }
}

/// The output items of a whole answer: its text, then its tool calls.
pub fn output(
    text: &str,
    calls: &[ToolCall],
    names: &ToolNames,
    status: &'static str,
) -> Vec<OutputItem> {
    let mut items = Vec::with_capacity(calls.len() + 1);
    if !text.is_empty() || calls.is_empty() {
        items.push(OutputItem::text(text, status));
    }
    items.extend(
        calls
            .iter()
            .map(|c| OutputItem::call(c, names, "completed")),
    );
    items
}
