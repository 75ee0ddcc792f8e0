//! A committed [`GenerationStream`] as server-sent events for the neutral
//! API: `event: delta` (`{"text"}`) for each chunk, then exactly one
//! `event: done` or `event: error`.
//!
//! (and, below, the OpenAI-compatible chunks, written by the wire crate).
//!
//! Dropping this stream (hyper does when the client disconnects) drops the
//! engine's stream, which closes the upstream connection.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use understudy_core::{GenerationStream, StreamItem};
use understudy_wire::chat_completions::events::{Chunks, refusal_chunks, to_json};

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

/// Seconds since the Unix epoch (the `created` of OpenAI's objects).
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The OpenAI-compatible event stream: the chunks
/// ([`understudy_wire::chat_completions::events`]) of a committed stream,
/// each as an event.
pub(crate) struct OpenAiEvents {
    inner: GenerationStream,
    chunks: Chunks,
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
            chunks: Chunks::new(id, created, include_usage),
        }
    }
}

/// A refusal surfaced by policy before anything was sent, streamed as OpenAI
/// streams one ([`refusal_chunks`]).
pub(crate) fn refusal_events(id: &str, created: u64, model: &str, refusal: &str) -> Replay {
    let chunks = refusal_chunks(id, created, model, refusal);
    Replay(
        chunks
            .into_iter()
            .map(|d| Event::default().data(d))
            .collect(),
    )
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
            let this = &mut *self;
            if let Some(data) = this.chunks.pending.pop_front() {
                return Poll::Ready(Some(Ok(Event::default().data(data))));
            }
            if this.chunks.finished {
                return Poll::Ready(None);
            }
            match this.inner.poll_next(cx) {
                Poll::Ready(Some(item)) => this.chunks.push(item, &this.inner.model),
                Poll::Ready(None) => this.chunks.finished = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
