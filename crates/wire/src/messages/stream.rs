//! The Messages event stream (`message_start`, `content_block_*`,
//! `message_delta`, `message_stop`, `ping`, `error`) parsed into neutral
//! [`StreamEvent`]s, each `tool_use` block one tool call.

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;
use understudy_types::credit::CreditStatus;
use understudy_types::{Failure, FailureKind, StreamEvent, ToolCallDelta, Usage};

use super::error::{WireError, mid_stream_error, stream_error};
use super::finish_reason;
use super::response::{WireBlock, WireUsage, credit_token, fallback_id, refusal_detail};
use crate::StreamParser;
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// Parses the Messages event sequence: `message_start`,
/// `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`.
#[derive(Debug, Default)]
pub struct AnthropicStream {
    model: String,
    /// `message_start`'s `message.id`.
    id: Option<String>,
    /// Pass every event on as sent, too (a natively forwarded request).
    native: bool,
    /// The counts so far as Anthropic reports them (input without the
    /// cache): `message_start`'s, raised by each `message_delta`'s
    /// cumulative ones.
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    thinking_tokens: u64,
    /// What became of the fallback credit the request carried (the
    /// usage of `message_start` or `message_delta`).
    fallback_credit: Option<CreditStatus>,
    stop_reason: Option<String>,
    text_seen: bool,
    /// The `tool_use` blocks so far, in order: the position is the tool
    /// call's index.
    tools: Vec<StreamedTool>,
    /// Bytes of tool-call arguments so far (bounded like text).
    argument_bytes: usize,
    stray: StrayJson,
}

/// One `tool_use` block of a stream.
#[derive(Debug)]
struct StreamedTool {
    /// Its content-block index (text and thinking blocks count too).
    block: u64,
    /// A non-empty `input` the block started with; sent as the arguments
    /// if no `input_json_delta` follows (the SDK's accumulator keeps it
    /// then too).
    preset: Option<String>,
    /// Some arguments text has been sent for it.
    sent: bool,
}

impl AnthropicStream {
    /// A parser for one streamed answer from `model`.
    pub fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }

    /// This parser, passing every event on as sent too when `native` (a
    /// natively forwarded request).
    pub fn with_native(self, native: bool) -> Self {
        Self { native, ..self }
    }

    /// The `tool_use` block at content-block `index`, with its call index.
    fn tool_at(&mut self, index: Option<u64>) -> Option<(u32, &mut StreamedTool)> {
        let index = index?;
        self.tools
            .iter_mut()
            .enumerate()
            .rev()
            .find(|(_, t)| t.block == index)
            .map(|(i, t)| (u32::try_from(i).unwrap_or(u32::MAX), t))
    }

    /// A tool call ended with no arguments text: sends the input it started
    /// with, or `{}`, so that its arguments always parse.
    fn close_tool(index: u32, tool: &mut StreamedTool) -> Option<StreamEvent> {
        if tool.sent {
            return None;
        }
        tool.sent = true;
        Some(StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: None,
            name: None,
            arguments: tool.preset.take().unwrap_or_else(|| "{}".to_owned()),
        }))
    }

    fn on_block_start(
        &mut self,
        index: Option<u64>,
        block: Option<WireBlock>,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        let Some(block) = block.filter(|b| b.kind == "tool_use") else {
            return;
        };
        let call = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
        let preset = match block.input {
            Some(Value::Object(m)) if !m.is_empty() => Some(Value::Object(m).to_string()),
            _ => None,
        };
        self.tools.push(StreamedTool {
            block: index.unwrap_or(u64::MAX),
            preset,
            sent: false,
        });
        out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
            index: call,
            id: Some(block.id.as_deref().map_or_else(
                || fallback_id(call),
                |id| crate::ids::from_anthropic(id).into_owned(),
            )),
            name: Some(block.name.unwrap_or_default()),
            arguments: String::new(),
        })));
    }

    fn on_block_delta(
        &mut self,
        index: Option<u64>,
        delta: WireDelta,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        if delta.kind.as_deref() == Some("input_json_delta") {
            let Some(fragment) = delta.partial_json.filter(|f| !f.is_empty()) else {
                return;
            };
            self.argument_bytes += fragment.len();
            if self.argument_bytes > crate::STREAM_TEXT_LIMIT {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    "the stream never ends",
                )));
                return;
            }
            // Fragments of blocks that are not client tool calls (server
            // tools, which this adapter never enables) are no one's arguments.
            let Some((call, tool)) = self.tool_at(index) else {
                return;
            };
            tool.sent = true;
            tool.preset = None;
            out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                index: call,
                id: None,
                name: None,
                arguments: fragment,
            })));
            return;
        }
        if delta.kind.as_deref() == Some("thinking_delta") {
            if let Some(thinking) = delta.thinking.filter(|t| !t.is_empty()) {
                out.push_back(Ok(StreamEvent::Reasoning(thinking)));
            }
            return;
        }
        // text_delta (signature and citations deltas carry no `text`).
        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
            self.text_seen = true;
            out.push_back(Ok(StreamEvent::Delta(text)));
        }
    }

    /// `message_start`'s usage: the counts so far.
    fn on_start_usage(&mut self, u: &WireUsage) {
        self.input_tokens = Some(u.input_tokens.unwrap_or(0));
        self.output_tokens = u.output_tokens;
        self.cache_read_tokens = u.cache_read_input_tokens.unwrap_or(0);
        self.cache_write_tokens = u.cache_creation_input_tokens.unwrap_or(0);
        self.thinking_tokens = u.thinking_tokens().unwrap_or(0);
        self.fallback_credit = u.credit_status();
    }

    /// `message_delta`: the output tokens so far and the stop reason; a
    /// `refusal` stop fails the stream.
    fn on_message_delta(
        &mut self,
        usage: Option<WireUsage>,
        delta: Option<WireDelta>,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        if let Some(u) = usage {
            if let Some(n) = u.output_tokens {
                self.output_tokens = Some(n);
            }
            // The other counts are cumulative too, so they only grow: a
            // delta that leaves one out, or sends 0 for it (a compaction's
            // does), keeps the one `message_start` gave.
            if let Some(n) = u.input_tokens {
                self.input_tokens = Some(self.input_tokens.unwrap_or(0).max(n));
            }
            let raise = |known: &mut u64, n: Option<u64>| *known = (*known).max(n.unwrap_or(0));
            raise(&mut self.cache_read_tokens, u.cache_read_input_tokens);
            raise(&mut self.cache_write_tokens, u.cache_creation_input_tokens);
            raise(&mut self.thinking_tokens, u.thinking_tokens());
            if let Some(status) = u.credit_status() {
                self.fallback_credit = Some(status);
            }
        }
        if let Some(delta) = delta {
            if delta.stop_reason.as_deref() == Some("refusal") {
                out.push_back(Err(Failure::new(
                    FailureKind::ContentFilter,
                    refusal_detail(delta.stop_details.as_ref()),
                )
                .with_credit(credit_token(delta.stop_details.as_ref()))));
                return;
            }
            if delta.stop_reason.is_some() {
                self.stop_reason = delta.stop_reason;
            }
        }
    }

    /// `message_stop`: the finish, once every tool call has arguments that
    /// parse; a stream with neither text nor a call is empty.
    fn on_message_stop(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if !self.text_seen && self.tools.is_empty() {
            out.push_back(Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the stream carried no text (stop_reason {})",
                    self.stop_reason.as_deref().unwrap_or("null")
                ),
            )));
            return;
        }
        // A tool_use block never closed still gets arguments that parse.
        for (i, tool) in self.tools.iter_mut().enumerate() {
            let call = u32::try_from(i).unwrap_or(u32::MAX);
            if let Some(e) = Self::close_tool(call, tool) {
                out.push_back(Ok(e));
            }
        }
        let usage = match (self.input_tokens, self.output_tokens) {
            (None, None) => None,
            (i, o) => Some(Usage {
                input_tokens: i.unwrap_or(0) + self.cache_read_tokens + self.cache_write_tokens,
                output_tokens: o.unwrap_or(0),
                cache_read_input_tokens: self.cache_read_tokens,
                cache_write_input_tokens: self.cache_write_tokens,
                reasoning_output_tokens: self.thinking_tokens,
            }),
        };
        out.push_back(Ok(StreamEvent::Finish {
            finish_reason: finish_reason(self.stop_reason.as_deref()),
            usage,
            model: Some(self.model.clone()),
        }));
    }
}

impl StreamParser for AnthropicStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((name, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        if self.native {
            out.push_back(Ok(StreamEvent::Native(understudy_types::NativeEvent {
                event: name.clone().unwrap_or_default(),
                data: data.clone(),
            })));
        }
        let event: WireEvent = match serde_json::from_str(&data) {
            Ok(e) => e,
            Err(e) => {
                out.push_back(Err(crate::malformed_event(&e)));
                return;
            }
        };
        let kind = name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(event.kind.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(message) = event.message {
                    if let Some(model) = message.model {
                        self.model = model;
                    }
                    if let Some(id) = message.id.filter(|id| !id.is_empty()) {
                        self.id = Some(id);
                    }
                    if let Some(u) = message.usage {
                        self.on_start_usage(&u);
                    }
                }
            }
            "content_block_start" => self.on_block_start(event.index, event.content_block, out),
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.on_block_delta(event.index, delta, out);
                }
            }
            "content_block_stop" => {
                if let Some((call, tool)) = self.tool_at(event.index) {
                    if let Some(e) = Self::close_tool(call, tool) {
                        out.push_back(Ok(e));
                    }
                }
            }
            "message_delta" => self.on_message_delta(event.usage, event.delta, out),
            "message_stop" => self.on_message_stop(out),
            "error" => {
                let mut f = stream_error(&event.error.unwrap_or_default());
                f.detail = format!("error event mid-stream: {}", f.detail);
                out.push_back(Err(f));
            }
            // ping, and event types added later.
            _ => {}
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn response_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    fn fallback_credit(&self) -> Option<CreditStatus> {
        self.fallback_credit
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let failure = self.stray.failure_at_eof(mid_stream_error, "message_stop");
        out.push_back(Err(failure));
    }
}

#[derive(Debug, Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    index: Option<u64>,
    message: Option<WireStartMessage>,
    content_block: Option<WireBlock>,
    delta: Option<WireDelta>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Deserialize)]
struct WireStartMessage {
    id: Option<String>,
    model: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct WireDelta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    /// A `thinking_delta`'s piece of the reasoning.
    thinking: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
    stop_details: Option<Value>,
}
