//! A committed [`GenerationStream`] as server-sent events for the neutral
//! API: `event: delta` (`{"text"}`) for each chunk, then exactly one
//! `event: done` or `event: error`.
//!
//! (and, below, the OpenAI-compatible chunks).
//!
//! Dropping this stream (hyper does when the client disconnects) drops the
//! engine's stream, which closes the upstream connection.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use serde_json::json;
use understudy_core::{GenerationStream, StreamItem};

use crate::openai::{
    ChunkChoiceOut, ChunkOut, DeltaOut, FunctionDeltaOut, ToolCallDeltaOut, UsageChunkOut, UsageOut,
};

/// The neutral API's event stream.
pub(crate) struct NeutralEvents {
    pub(crate) inner: GenerationStream,
}

impl futures_core::Stream for NeutralEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner
            .poll_next(cx)
            .map(|item| item.map(|item| Ok(neutral_event(&item))))
    }
}

fn neutral_event(item: &StreamItem) -> Event {
    #[derive(serde::Serialize)]
    struct Text<'a> {
        text: &'a str,
    }
    let (name, data) = match item {
        StreamItem::Delta(text) => ("delta", to_json(&Text { text })),
        StreamItem::Reasoning(text) => ("reasoning", to_json(&Text { text })),
        StreamItem::ToolCall(delta) => ("tool_call", to_json(delta)),
        // Only natively forwarded requests carry these; the neutral API
        // never forwards natively.
        StreamItem::Native(event) => ("native", to_json(event)),
        StreamItem::Done(done) => ("done", to_json(done)),
        StreamItem::Error(error) => ("error", to_json(error)),
    };
    Event::default().event(name).data(data)
}

/// JSON text for an event; these shapes always serialise (plain structs
/// with string keys), so the empty object is only a formality.
fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}

/// The OpenAI-compatible event stream: `data: {chunk}` events whose `model`
/// is the model answering, a finish chunk, the usage chunk when asked for,
/// and `data: [DONE]` — or, after a failure past the commit, a final
/// `data: {"error": …}` and no `[DONE]`, so that no client mistakes a
/// truncated answer for a complete one.
pub(crate) struct OpenAiEvents {
    inner: GenerationStream,
    id: String,
    created: u64,
    include_usage: bool,
    pending: std::collections::VecDeque<Event>,
    finished: bool,
    /// The role chunk has gone out. It goes just before the first item's,
    /// so that a held stream's names the model that served.
    started: bool,
}

impl OpenAiEvents {
    pub(crate) fn new(
        inner: GenerationStream,
        id: String,
        created: u64,
        include_usage: bool,
    ) -> Self {
        Self {
            inner,
            id,
            created,
            include_usage,
            pending: Default::default(),
            finished: false,
            started: false,
        }
    }

    fn chunk(&self, delta: DeltaOut<'_>, finish: Option<&str>) -> Event {
        let body = ChunkOut {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.inner.model,
            choices: [ChunkChoiceOut {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: finish,
            }],
        };
        Event::default().data(to_json(&body))
    }

    fn push(&mut self, item: StreamItem) {
        if !self.started && !matches!(item, StreamItem::Error(_) | StreamItem::Native(_)) {
            self.started = true;
            let first = self.chunk(
                DeltaOut {
                    role: Some("assistant"),
                    content: Some(""),
                    ..DeltaOut::default()
                },
                None,
            );
            self.pending.push_back(first);
        }
        match item {
            StreamItem::Reasoning(text) => {
                let delta = DeltaOut {
                    reasoning_content: Some(&text),
                    ..DeltaOut::default()
                };
                let e = self.chunk(delta, None);
                self.pending.push_back(e);
            }
            StreamItem::Delta(text) => {
                let delta = DeltaOut {
                    content: Some(&text),
                    ..DeltaOut::default()
                };
                let e = self.chunk(delta, None);
                self.pending.push_back(e);
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
                let e = self.chunk(delta, None);
                self.pending.push_back(e);
            }
            StreamItem::Done(done) => {
                let e = self.chunk(
                    DeltaOut::default(),
                    Some(crate::openai::finish_reason(&done.finish_reason)),
                );
                self.pending.push_back(e);
                if self.include_usage {
                    let usage = UsageChunkOut {
                        id: &self.id,
                        object: "chat.completion.chunk",
                        created: self.created,
                        model: &done.model,
                        choices: [],
                        usage: done.usage.map(UsageOut::from),
                    };
                    self.pending
                        .push_back(Event::default().data(to_json(&usage)));
                }
                self.pending.push_back(Event::default().data("[DONE]"));
                self.finished = true;
            }
            StreamItem::Error(error) => {
                let kind = if error.code == understudy_core::FailureCode::ContentFilter {
                    "content_filter"
                } else {
                    "server_error"
                };
                let body = json!({"error": {"message": error.message, "type": kind, "param": null, "code": error.code}});
                self.pending
                    .push_back(Event::default().data(body.to_string()));
                self.finished = true;
            }
        }
    }
}

/// A refusal surfaced by policy before anything was sent, streamed as OpenAI
/// streams one (the same answer as the non-streamed `content_filter`
/// completion): the role chunk, `delta.refusal`, the `content_filter`
/// finish, `[DONE]`.
pub(crate) fn refusal_events(id: &str, created: u64, model: &str, refusal: &str) -> Replay {
    let chunk = |delta: DeltaOut<'_>, finish: Option<&str>| {
        let body = ChunkOut {
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
        };
        Event::default().data(to_json(&body))
    };
    Replay(std::collections::VecDeque::from([
        chunk(
            DeltaOut {
                role: Some("assistant"),
                content: Some(""),
                ..DeltaOut::default()
            },
            None,
        ),
        chunk(
            DeltaOut {
                refusal: Some(refusal),
                ..DeltaOut::default()
            },
            None,
        ),
        chunk(DeltaOut::default(), Some("content_filter")),
        Event::default().data("[DONE]"),
    ]))
}

/// Events known in full before the response starts.
pub(crate) struct Replay(std::collections::VecDeque<Event>);

impl futures_core::Stream for Replay {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

impl futures_core::Stream for OpenAiEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.finished {
                return Poll::Ready(None);
            }
            match self.inner.poll_next(cx) {
                Poll::Ready(Some(item)) => self.push(item),
                Poll::Ready(None) => self.finished = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
