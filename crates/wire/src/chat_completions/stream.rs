//! The Chat Completions event stream: `data: {chunk}` events up to
//! `data: [DONE]`, parsed into neutral [`StreamEvent`]s, tool-call
//! fragments relayed in the order their calls began.

use std::collections::VecDeque;

use serde::Deserialize;
use understudy_types::{Failure, FailureKind, StreamEvent, ToolCallDelta, Usage};

use super::error::{WireError, mid_stream_error, mid_stream_error_body};
use super::response::{WireArguments, WireToolCall, WireUsage, finish_reason_with};
use crate::StreamParser;
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// The most tool calls one streamed answer may begin (OpenAI takes at most
/// 128 tools); beyond it the stream is garbage.
const MAX_STREAM_CALLS: usize = 1024;

/// The most refusal text a stream keeps for its failure's detail.
const MAX_REFUSAL: usize = 4096;

/// Parses `data: {chunk}` events up to `data: [DONE]`.
#[derive(Debug, Default)]
pub struct OpenAiStream {
    model: String,
    /// The first chunk's `id` (every chunk of an answer repeats it).
    id: Option<String>,
    finish: Option<String>,
    usage: Option<Usage>,
    text_seen: bool,
    /// A refusal's words so far (`delta.refusal` comes in pieces, like
    /// text): the failure names all of them, as an unstreamed refusal does.
    refusal: String,
    /// The tool calls begun so far, in the order they began.
    calls: Vec<StreamCall>,
    stray: StrayJson,
}

/// What the stream has relayed of one tool call.
#[derive(Debug)]
struct StreamCall {
    /// The `index` the provider gave it.
    wire_index: Option<u32>,
    /// The id the provider sent with it, if any.
    wire_id: Option<String>,
    name_sent: bool,
}

impl OpenAiStream {
    fn finish(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if !self.refusal.is_empty() {
            out.push_back(Err(Failure::new(
                FailureKind::ContentFilter,
                format!("the model refused: {}", self.refusal),
            )));
            return;
        }
        if !self.text_seen && self.calls.is_empty() {
            out.push_back(Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the stream carried no text (finish_reason {})",
                    self.finish.as_deref().unwrap_or("null")
                ),
            )));
            return;
        }
        out.push_back(Ok(StreamEvent::Finish {
            finish_reason: finish_reason_with(self.finish.as_deref(), !self.calls.is_empty()),
            usage: self.usage,
            model: Some(self.model.clone()),
        }));
    }

    /// Relays one `delta.tool_calls[]` fragment: the first fragment of each
    /// call carries its id (minted when the server sent none) and, once
    /// known, its name; later fragments only their piece of the arguments.
    /// An id or name a server repeats on later fragments is not relayed
    /// again (clients append what they receive).
    fn on_tool_call(
        &mut self,
        call: WireToolCall,
        out: &mut VecDeque<Result<StreamEvent, Failure>>,
    ) {
        let wire_id = call.id.filter(|id| !id.is_empty());
        // The call this fragment continues: the latest one with its index
        // (the last one when a server leaves `index` out), unless the
        // fragment brings another id, which begins a new call (some
        // compatible servers give every call index 0).
        let continued = match call.index {
            Some(i) => self.calls.iter().rposition(|c| c.wire_index == Some(i)),
            None => self.calls.len().checked_sub(1),
        }
        .filter(|&at| match (&wire_id, &self.calls[at].wire_id) {
            (Some(new), Some(known)) => new == known,
            _ => true,
        });
        let (name, arguments) = match call.function {
            Some(f) => (
                f.name.filter(|n| !n.is_empty()),
                f.arguments
                    .map(WireArguments::into_text)
                    .unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        let (at, id, name) = match continued {
            Some(at) => {
                let known = &mut self.calls[at];
                let name = name.filter(|_| !known.name_sent);
                known.name_sent |= name.is_some();
                (at, None, name)
            }
            None if self.calls.len() >= MAX_STREAM_CALLS => {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    format!("more than {MAX_STREAM_CALLS} tool calls in one answer"),
                )));
                return;
            }
            None => {
                self.calls.push(StreamCall {
                    wire_index: call.index,
                    wire_id: wire_id.clone(),
                    name_sent: name.is_some(),
                });
                let id = wire_id.unwrap_or_else(crate::mint_call_id);
                (self.calls.len() - 1, Some(id), name)
            }
        };
        if id.is_none() && name.is_none() && arguments.is_empty() {
            return;
        }
        out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
            // Calls are numbered 0, 1, … in the order they began.
            index: u32::try_from(at).unwrap_or(u32::MAX),
            id,
            name,
            arguments,
        })));
    }
}

impl OpenAiStream {
    /// A parser for one streamed answer from `model`.
    pub fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            ..Self::default()
        }
    }
}

impl StreamParser for OpenAiStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((_, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        if data.trim() == "[DONE]" {
            self.finish(out);
            return;
        }
        let chunk: WireChunk = match serde_json::from_str(&data) {
            Ok(c) => c,
            Err(e) => {
                out.push_back(Err(crate::malformed_event(&e)));
                return;
            }
        };
        if let Some(error) = chunk.error {
            out.push_back(Err(mid_stream_error_body(&error)));
            return;
        }
        if let Some(message) = chunk.x_groq.as_ref().and_then(|x| x.error.as_deref()) {
            out.push_back(Err(Failure::new(
                FailureKind::Unavailable { retry_after: None },
                format!("x_groq.error: {message}"),
            )));
            return;
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = model;
        }
        if self.id.is_none() {
            self.id = chunk
                .id
                .filter(|id| !id.is_empty())
                .map(|id| id.into_owned());
        }
        if let Some(u) = chunk.usage.or_else(|| chunk.x_groq.and_then(|x| x.usage)) {
            self.usage = Some(Usage::from(u));
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return;
        };
        if let Some(delta) = choice.delta {
            if let Some(refusal) = delta.refusal.filter(|r| !r.is_empty()) {
                // Kept until the finish (bounded: the failure's detail is).
                if self.refusal.len() < MAX_REFUSAL {
                    self.refusal.push_str(&refusal);
                }
            }
            if let Some(thinking) = delta
                .reasoning_content
                .or(delta.reasoning)
                .filter(|t| !t.is_empty())
            {
                out.push_back(Ok(StreamEvent::Reasoning(thinking)));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.text_seen = true;
                out.push_back(Ok(StreamEvent::Delta(text)));
            }
            // A chunk may carry fragments of several calls: relayed in order.
            for call in delta.tool_calls.into_iter().flatten() {
                self.on_tool_call(call, out);
            }
        }
        match choice.finish_reason.as_deref() {
            Some("content_filter") => {
                out.push_back(Err(Failure::new(
                    FailureKind::ContentFilter,
                    "finish_reason is content_filter",
                )));
            }
            Some(reason) => {
                self.finish = Some(reason.to_owned());
                if !self.refusal.is_empty() {
                    self.finish(out);
                }
            }
            None => {}
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn response_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        if let Some(failure) = self.stray.take_failure(mid_stream_error) {
            out.push_back(Err(failure));
        } else if self.finish.is_some() || !self.refusal.is_empty() {
            // The finish reason came, only `[DONE]` is missing: complete.
            self.finish(out);
        } else {
            out.push_back(Err(Failure::new(
                FailureKind::StreamInterrupted,
                "the stream ended without a finish reason or [DONE]",
            )));
        }
    }
}

#[derive(Deserialize)]
struct WireChunk<'a> {
    /// Borrowed: it is kept once, from the first chunk that has one, and
    /// every chunk repeats it.
    #[serde(borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
    x_groq: Option<XGroq>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<String>,
    /// Reasoning models' thinking (DeepSeek, vLLM, Groq: `reasoning_content`;
    /// OpenRouter and others: `reasoning`).
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct XGroq {
    usage: Option<WireUsage>,
    error: Option<String>,
}
