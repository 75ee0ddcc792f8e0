//! A committed [`GenerationStream`] as server-sent events for the neutral
//! API: `event: delta` (`{"text"}`) for each chunk, then exactly one
//! `event: done` or `event: error`.
//!
//! Dropping this stream (hyper does when the client disconnects) drops the
//! engine's stream, which closes the upstream connection.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use serde_json::json;
use understudy_core::{GenerationStream, StreamItem};

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
    let (name, data) = match item {
        StreamItem::Delta(text) => ("delta", json!({ "text": text })),
        StreamItem::Done(done) => ("done", json!(done)),
        StreamItem::Error(error) => ("error", json!(error)),
    };
    Event::default().event(name).data(data.to_string())
}
