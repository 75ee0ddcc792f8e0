//! The Chat Completions event stream the gateway writes a client, as the
//! `data:` text of each event: `chat.completion.chunk`s whose `model` is
//! the model answering, a finish chunk, the usage chunk when asked for,
//! and `[DONE]` — or, after a failure past the commit, a final
//! `{"error": …}` and no `[DONE]`, so that no client mistakes a truncated
//! answer for a complete one. The server frames each as an SSE event.

use serde_json::json;
use understudy_types::{FailureCode, StreamItem};

use super::answer::{
    ChunkChoiceOut, ChunkOut, DeltaOut, FunctionDeltaOut, ToolCallDeltaOut, UsageChunkOut,
};
use super::response::WireUsage;
use crate::{Encoder, Frame};

/// The chunks of one streamed answer, as an [`Encoder`]: each frame
/// unnamed, its data a chunk's text (or `[DONE]`).
#[derive(Debug)]
pub struct Chunks {
    id: String,
    created: u64,
    include_usage: bool,
    /// The role chunk has gone out. It goes just before the first item's,
    /// so that a held stream's names the model that served.
    started: bool,
}

impl Chunks {
    pub fn new(id: String, created: u64, include_usage: bool) -> Self {
        Self {
            id,
            created,
            include_usage,
            started: false,
        }
    }

    fn chunk(&self, model: &str, delta: DeltaOut<'_>, finish: Option<&str>) -> Frame {
        Frame::data(chunk(&self.id, self.created, model, delta, finish))
    }
}

impl Encoder for Chunks {
    fn item(&mut self, item: StreamItem, model: &str, out: &mut Vec<Frame>) {
        if !self.started && !matches!(item, StreamItem::Error(_) | StreamItem::Native(_)) {
            self.started = true;
            out.push(self.chunk(model, role_delta(), None));
        }
        match item {
            StreamItem::Reasoning(text) => {
                let delta = DeltaOut {
                    reasoning_content: Some(&text),
                    ..DeltaOut::default()
                };
                out.push(self.chunk(model, delta, None));
            }
            StreamItem::Delta(text) => {
                let delta = DeltaOut {
                    content: Some(&text),
                    ..DeltaOut::default()
                };
                out.push(self.chunk(model, delta, None));
            }
            // A provider's own events, for clients of its protocol only.
            StreamItem::Native(_) => {}
            StreamItem::ToolCall(call) => {
                let delta = DeltaOut {
                    tool_calls: Some([ToolCallDeltaOut {
                        index: call.index,
                        id: call.id.as_deref(),
                        kind: call.id.as_ref().map(|_| "function"),
                        function: FunctionDeltaOut {
                            name: call.name.as_deref(),
                            arguments: &call.arguments,
                        },
                    }]),
                    ..DeltaOut::default()
                };
                out.push(self.chunk(model, delta, None));
            }
            StreamItem::Done(done) => {
                let finish = super::finish_reason_name(&done.finish_reason);
                out.push(self.chunk(model, DeltaOut::default(), Some(finish)));
                if self.include_usage {
                    let usage = UsageChunkOut {
                        id: &self.id,
                        object: "chat.completion.chunk",
                        created: self.created,
                        model: &done.model,
                        choices: [],
                        usage: done.usage.map(WireUsage::from),
                    };
                    out.push(Frame::json(&usage));
                }
                out.push(Frame::data("[DONE]".to_owned()));
            }
            StreamItem::Error(error) => {
                let kind = if error.code == FailureCode::ContentFilter {
                    "content_filter"
                } else {
                    "server_error"
                };
                let body = json!({"error": {"message": error.message, "type": kind, "param": null, "code": error.code}});
                out.push(Frame::data(body.to_string()));
            }
        }
    }

    /// A refusal surfaced by policy before anything was sent, streamed as
    /// OpenAI streams one (the same answer as the non-streamed
    /// `content_filter` completion): the role chunk, `delta.refusal`, the
    /// `content_filter` finish, `[DONE]`.
    fn refusal(&mut self, model: &str, refusal: &str, out: &mut Vec<Frame>) {
        let refusal = DeltaOut {
            refusal: Some(refusal),
            ..DeltaOut::default()
        };
        self.started = true;
        out.push(self.chunk(model, role_delta(), None));
        out.push(self.chunk(model, refusal, None));
        out.push(self.chunk(model, DeltaOut::default(), Some("content_filter")));
        out.push(Frame::data("[DONE]".to_owned()));
    }
}

/// The first chunk's delta: the assistant's role and empty content.
fn role_delta() -> DeltaOut<'static> {
    DeltaOut {
        role: Some("assistant"),
        content: Some(""),
        ..DeltaOut::default()
    }
}

/// One `chat.completion.chunk`'s text.
fn chunk(id: &str, created: u64, model: &str, delta: DeltaOut<'_>, finish: Option<&str>) -> String {
    to_json(&ChunkOut {
        id,
        object: "chat.completion.chunk",
        created,
        model,
        choices: [ChunkChoiceOut {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish,
        }],
    })
}

/// JSON text for an event; these shapes always serialise (plain structs
/// with string keys), so the empty object is only a formality.
pub fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}
