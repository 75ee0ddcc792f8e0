//! One stream writer for every protocol's encoder: a committed
//! [`GenerationStream`] through an [`Encoder`] (the protocol's frames, from
//! the wire crate) and a [`Framing`] (server-sent events, or the JSON array
//! Google streams without `alt=sse`) into the response body.
//!
//! Dropping the body (hyper does when the client disconnects) drops the
//! engine's stream, which closes the upstream connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use understudy_core::{GenerationStream, StreamItem};
use understudy_wire::{Encoder, Frame};

/// How frames are laid out in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `event: …` (when named) and `data: …`, each frame its own event.
    Sse,
    /// One JSON array whose elements are the frames (Google's
    /// `streamGenerateContent` without `alt=sse`).
    JsonArray,
}

/// A committed stream written by `E`, as a response body.
pub(crate) struct Framed<E> {
    inner: Option<GenerationStream>,
    encoder: E,
    framing: Framing,
    pending: VecDeque<Bytes>,
    /// Frames written so far (the array's separators).
    written: usize,
    finished: bool,
}

impl<E: Encoder + Unpin> Framed<E> {
    /// The frames of `inner`, written by `encoder`.
    pub(crate) fn new(inner: GenerationStream, encoder: E, framing: Framing) -> Self {
        Self {
            inner: Some(inner),
            encoder,
            framing,
            pending: VecDeque::new(),
            written: 0,
            finished: false,
        }
    }

    /// The frames of a refusal surfaced before anything was sent.
    pub(crate) fn refusal(mut encoder: E, model: &str, framing: Framing) -> Self {
        let mut frames = Vec::new();
        encoder.refusal(model, &mut frames);
        let mut this = Self {
            inner: None,
            encoder,
            framing,
            pending: VecDeque::new(),
            written: 0,
            finished: false,
        };
        this.push(frames);
        this.finish();
        this
    }

    /// The response: the body, with the framing's content type.
    pub(crate) fn into_response(self) -> Response {
        let content_type = match self.framing {
            Framing::Sse => "text/event-stream",
            Framing::JsonArray => "application/json",
        };
        let mut response = Body::from_stream(self).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }

    fn push(&mut self, frames: Vec<Frame>) {
        for frame in frames {
            let mut out = String::with_capacity(frame.data.len() + 16);
            match self.framing {
                Framing::Sse => {
                    if let Some(event) = frame.event {
                        out.push_str("event: ");
                        out.push_str(event);
                        out.push('\n');
                    }
                    out.push_str("data: ");
                    out.push_str(&frame.data);
                    out.push_str("\n\n");
                }
                Framing::JsonArray => {
                    out.push_str(if self.written == 0 { "[" } else { ",\r\n" });
                    out.push_str(&frame.data);
                }
            }
            self.written += 1;
            self.pending.push_back(Bytes::from(out));
        }
    }

    /// The end of the body: the array closed.
    fn finish(&mut self) {
        self.finished = true;
        self.inner = None;
        if self.framing == Framing::JsonArray {
            let end = if self.written == 0 { "[]" } else { "]" };
            self.pending.push_back(Bytes::from_static(end.as_bytes()));
        }
    }
}

impl<E: Encoder + Unpin> futures_core::Stream for Framed<E> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(bytes) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(bytes)));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            let Some(inner) = this.inner.as_mut() else {
                this.finish();
                continue;
            };
            match inner.poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(item)) => {
                    let last = matches!(item, StreamItem::Done(_) | StreamItem::Error(_));
                    let mut frames = Vec::new();
                    this.encoder.item(item, &mut frames);
                    this.push(frames);
                    if last {
                        this.finish();
                    }
                }
                // The run always ends with `Done` or `Error`; a channel
                // closed without one ends the body as it is.
                Poll::Ready(None) => this.finish(),
            }
        }
    }
}

impl<E> std::fmt::Debug for Framed<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framed")
            .field("framing", &self.framing)
            .field("written", &self.written)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}
