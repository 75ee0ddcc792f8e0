//! Gemini's `streamGenerateContent?alt=sse` stream, parsed into neutral
//! [`StreamEvent`]s.

use std::collections::VecDeque;

use serde_json::Value;
use understudy_types::{Failure, FailureKind, NativeEvent, StreamEvent, ToolCallDelta, Usage};

use super::error::mid_stream_error;
use super::response::{
    Chunk, MAX_TOOL_CALLS, WireResponse, assess, finish_reason, nothing_usable, too_many_calls,
    usage,
};
use crate::StreamParser;
use crate::signature::Target;
use crate::sse::SseItem;
use crate::stray::StrayJson;

/// Parses `alt=sse` chunks: CRLF framing, no sentinel, the chunk with a
/// `finishReason` ends the answer, and an error may arrive as raw JSON.
/// Gemini sends each function call whole in one chunk; each becomes one
/// [`StreamEvent::ToolCall`] with the next index, a fresh id, the name and
/// all of its arguments.
#[derive(Debug, Default)]
pub struct GeminiStream {
    model: String,
    /// The chunks' `responseId`.
    id: Option<String>,
    text_seen: bool,
    /// Tool calls emitted so far (the next one's index).
    calls: u32,
    usage: Option<Usage>,
    stray: StrayJson,
    /// The target whose thought signatures the calls' ids carry.
    target: Target,
    /// Every chunk is passed on as Gemini sent it too (a natively
    /// forwarded request), ahead of the neutral events parsed from it.
    native: bool,
}

impl GeminiStream {
    /// A parser for one streamed answer from `model` (of an unnamed
    /// provider).
    pub fn for_model(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            target: Target::new("", model),
            ..Self::default()
        }
    }

    /// This parser, its calls' ids carrying thought signatures for
    /// `target`.
    pub fn with_target(self, target: Target) -> Self {
        Self { target, ..self }
    }

    /// This parser, also passing every chunk on as it came (`native`).
    pub fn with_native(self, native: bool) -> Self {
        Self { native, ..self }
    }
}

impl StreamParser for GeminiStream {
    fn on_item(&mut self, item: SseItem, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let Some((_, data)) = self.stray.event(item, mid_stream_error, out) else {
            return;
        };
        let value: Value = match serde_json::from_str(&data) {
            Ok(v) => v,
            Err(e) => {
                out.push_back(Err(crate::malformed_event(&e)));
                return;
            }
        };
        if let Some(failure) = mid_stream_error(&value) {
            out.push_back(Err(failure));
            return;
        }
        if self.native {
            // Relayed as Gemini sent it (an error is the front end's to
            // write, in its own place in the stream).
            out.push_back(Ok(StreamEvent::Native(NativeEvent {
                event: String::new(),
                data,
            })));
        }
        let chunk: WireResponse = match serde_json::from_value(value) {
            Ok(c) => c,
            Err(e) => {
                out.push_back(Err(Failure::new(
                    FailureKind::MalformedResponse,
                    format!("a malformed stream chunk: {e}"),
                )));
                return;
            }
        };
        if let Some(u) = usage(&chunk) {
            self.usage = Some(u);
        }
        if let Some(version) = &chunk.model_version {
            self.model.clone_from(version);
        }
        if self.id.is_none() {
            self.id = chunk.response_id.clone().filter(|id| !id.is_empty());
        }
        // Thought parts (`thought: true`): the model is reasoning.
        let thoughts = thought_text(&chunk);
        if !thoughts.is_empty() {
            out.push_back(Ok(StreamEvent::Reasoning(thoughts)));
        }
        match assess(&chunk) {
            Err(failure) => out.push_back(Err(failure)),
            Ok(Chunk {
                text,
                calls,
                finish_reason: reason,
            }) => {
                if !text.is_empty() {
                    self.text_seen = true;
                    out.push_back(Ok(StreamEvent::Delta(text)));
                }
                for (name, arguments, signature) in calls {
                    if self.calls >= MAX_TOOL_CALLS {
                        out.push_back(Err(too_many_calls()));
                        return;
                    }
                    out.push_back(Ok(StreamEvent::ToolCall(ToolCallDelta {
                        index: self.calls,
                        id: Some(
                            self.target
                                .sign(crate::mint_call_id(), signature.as_deref()),
                        ),
                        name: Some(name),
                        arguments,
                    })));
                    self.calls += 1;
                }
                if let Some(reason) = reason {
                    if self.text_seen || self.calls > 0 {
                        out.push_back(Ok(StreamEvent::Finish {
                            finish_reason: finish_reason(Some(&reason), self.calls > 0),
                            usage: self.usage,
                            model: Some(self.model.clone()),
                        }));
                    } else {
                        out.push_back(Err(nothing_usable(Some(&reason))));
                    }
                }
            }
        }
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn response_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    fn on_eof(&mut self, out: &mut VecDeque<Result<StreamEvent, Failure>>) {
        let failure = self
            .stray
            .failure_at_eof(mid_stream_error, "a finishReason");
        out.push_back(Err(failure));
    }
}

/// The text of a chunk's thought parts (its reasoning summary).
fn thought_text(chunk: &WireResponse) -> String {
    chunk
        .candidates
        .iter()
        .flatten()
        .take(1)
        .filter_map(|c| c.content.as_ref()?.parts.as_ref())
        .flatten()
        .filter(|p| p.thought == Some(true))
        .filter_map(|p| p.text.as_deref())
        .collect()
}
