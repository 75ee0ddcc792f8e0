//! ConverseStream's events parsed into neutral [`StreamEvent`]s. The
//! framing hands each event-stream message over as an item named by its
//! `:event-type`, its payload the JSON data:
//!
//! - `messageStart {role}`: nothing yet (not the first text: a failover
//!   decision stays possible until real text arrives).
//! - `contentBlockStart {contentBlockIndex, start: {toolUse: {toolUseId,
//!   name}}}`: a tool call begins.
//! - `contentBlockDelta {contentBlockIndex, delta: {text} | {toolUse:
//!   {input}} | {reasoningContent: {text}}}`: text, a fragment of a call's
//!   arguments (partial JSON text), or reasoning.
//! - `contentBlockStop`: a call with no arguments gets `{}`.
//! - `messageStop {stopReason}`: a refusal or malformed output fails the
//!   stream here; any other reason waits for `metadata`, which carries
//!   the usage and comes after it. A stream that ends after `messageStop`
//!   without `metadata` still finishes; one that ends before it was cut.

use std::collections::VecDeque;

use serde::Deserialize;
use understudy_types::{Failure, FailureKind, FinishReason, StreamEvent, ToolCallDelta, Usage};

use super::response::{MAX_TOOL_CALLS, WireToolUse, WireUsage, call_id, with_words};
use crate::StreamParser;
use crate::sse::SseItem;

/// Parses one ConverseStream answer.
#[derive(Debug, Default)]
pub struct ConverseStream {
    model: String,
    text_seen: bool,
    /// The content-block index of each tool call so far, in order (the
    /// position is the call's index), and whether it has arguments.
    tools: Vec<(u64, bool)>,
    /// Bytes of tool-call arguments so far (bounded like text).
    argument_bytes: usize,
    /// `messageStop`'s reason, once it came.
    stopped: Option<FinishReason>,
    usage: Option<Usage>,
}

impl ConverseStream {
    /// A parser for one streamed answer from `model`.
    pub fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }

    fn on_event(
        &mut self,
        name: &str,
        data: &str,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) -> Result<(), Failure> {
        let parse = |data: &str| -> Result<WireEvent, Failure> {
            serde_json::from_str(data).map_err(|e| crate::malformed_event(&e))
        };
        match name {
            "contentBlockStart" => self.on_block_start(parse(data)?, out),
            "contentBlockDelta" => self.on_block_delta(parse(data)?, out),
            "contentBlockStop" => {
                let event = parse(data)?;
                self.close_tools(event.content_block_index, out);
                Ok(())
            }
            "messageStop" => self.on_message_stop(parse(data)?, out),
            "metadata" => {
                if let Some(usage) = parse(data)?.usage {
                    self.usage = Some(usage.to_usage());
                }
                if self.stopped.is_some() {
                    self.finish(out);
                }
                Ok(())
            }
            // `messageStart`, and events this parser does not read.
            _ => Ok(()),
        }
    }

    fn on_block_start(
        &mut self,
        event: WireEvent,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) -> Result<(), Failure> {
        let Some(tool) = event.start.and_then(|s| s.tool_use) else {
            return Ok(());
        };
        if self.tools.len() >= MAX_TOOL_CALLS {
            return Err(Failure::new(
                FailureKind::MalformedResponse,
                format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
            ));
        }
        let index = u32::try_from(self.tools.len()).unwrap_or(u32::MAX);
        let Some(name) = tool.name.filter(|n| !n.is_empty()) else {
            return Err(Failure::new(
                FailureKind::InvalidOutput,
                format!("toolUse block {index} names no tool"),
            ));
        };
        self.tools
            .push((event.content_block_index.unwrap_or(u64::MAX), false));
        out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
            index,
            id: Some(call_id(tool.tool_use_id.as_deref(), self.tools.len() - 1)),
            name: Some(name),
            arguments: String::new(),
        })));
        Ok(())
    }

    fn on_block_delta(
        &mut self,
        event: WireEvent,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) -> Result<(), Failure> {
        let Some(delta) = event.delta else {
            return Ok(());
        };
        if let Some(fragment) = delta
            .tool_use
            .and_then(|t| t.input)
            .filter(|f| !f.is_empty())
        {
            self.argument_bytes += fragment.len();
            if self.argument_bytes > crate::STREAM_TEXT_LIMIT {
                return Err(Failure::new(
                    FailureKind::MalformedResponse,
                    "the stream never ends",
                ));
            }
            let block = event.content_block_index.unwrap_or(u64::MAX);
            // A fragment of no call that started is no one's arguments.
            if let Some((index, tool)) = self
                .tools
                .iter_mut()
                .enumerate()
                .rfind(|(_, t)| t.0 == block)
            {
                tool.1 = true;
                out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                    index: u32::try_from(index).unwrap_or(u32::MAX),
                    id: None,
                    name: None,
                    arguments: fragment,
                })));
            }
            return Ok(());
        }
        if let Some(text) = delta
            .reasoning_content
            .and_then(|r| r.text)
            .filter(|t| !t.is_empty())
        {
            out.push_back(Ok(StreamEvent::Reasoning(text)));
            return Ok(());
        }
        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
            self.text_seen = true;
            out.push_back(Ok(StreamEvent::Delta(text)));
        }
        Ok(())
    }

    /// Calls with no arguments yet (at block `index`, or all) get `{}`, so
    /// that their arguments always parse.
    fn close_tools(
        &mut self,
        index: Option<u64>,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        for (i, tool) in self.tools.iter_mut().enumerate() {
            if tool.1 || index.is_some_and(|b| b != tool.0) {
                continue;
            }
            tool.1 = true;
            out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                index: u32::try_from(i).unwrap_or(u32::MAX),
                id: None,
                name: None,
                arguments: "{}".to_owned(),
            })));
        }
    }

    fn on_message_stop(
        &mut self,
        event: WireEvent,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) -> Result<(), Failure> {
        let reason = event.stop_reason.as_deref();
        let finish = super::stop_reason(reason).map_err(|f| with_words(f, "", 200))?;
        if !self.text_seen && self.tools.is_empty() {
            return Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the stream carried no text (stopReason {})",
                    reason.unwrap_or("null")
                ),
            ));
        }
        self.close_tools(None, out);
        self.stopped = Some(finish);
        Ok(())
    }

    fn finish(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some(finish_reason) = self.stopped.take() else {
            return;
        };
        out.push_back(Ok(StreamEvent::Finish {
            finish_reason,
            usage: self.usage,
            model: Some(self.model.clone()),
        }));
    }
}

impl StreamParser for ConverseStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let SseItem::Event { event, data } = item else {
            return;
        };
        let name = event.unwrap_or_default();
        if let Err(failure) = self.on_event(&name, &data, out) {
            out.push_back(Err(failure));
        }
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if self.stopped.is_some() {
            // `metadata` never came: the answer is whole all the same.
            self.finish(out);
            return;
        }
        out.push_back(Err(Failure::new(
            FailureKind::StreamInterrupted,
            "the stream ended before messageStop",
        )));
    }

    fn model(&self) -> &str {
        &self.model
    }
}

/// Any of the stream's events (the members each one has).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEvent {
    content_block_index: Option<u64>,
    start: Option<WireStart>,
    delta: Option<WireDelta>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStart {
    tool_use: Option<WireToolUse>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDelta {
    text: Option<String>,
    tool_use: Option<WireToolUseDelta>,
    reasoning_content: Option<WireReasoningDelta>,
}

#[derive(Debug, Deserialize)]
struct WireToolUseDelta {
    input: Option<String>,
}

/// A reasoning delta: `text`, or a `signature` or `redactedContent`,
/// which are not progress the client reads.
#[derive(Debug, Deserialize)]
struct WireReasoningDelta {
    text: Option<String>,
}
