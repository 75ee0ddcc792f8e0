//! The one stream writer for every front end: a committed
//! [`GenerationStream`] through an [`Encoder`] (the protocol's frames, from
//! the wire crate, or the neutral API's) and a [`Framing`] (server-sent
//! events with the protocol's keep-alive, or the JSON array Google streams
//! without `alt=sse`) into the response body.
//!
//! The body ends after the encoder's last frame: the engine's `Done` or
//! `Error`, or a relayed provider's own final event. A channel that closes
//! without either is a cut, and says so in the protocol's error frame. A
//! final frame the encoder holds back ([`Encoder::held`]) goes out once the
//! [`Keeper`] has kept the answer beside it.
//!
//! Dropping the body (hyper does when the client disconnects) drops the
//! engine's stream, which closes the upstream connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::time::{Instant, Sleep};
use understudy_core::GenerationStream;
use understudy_types::{FailureCode, StreamError, StreamItem};
use understudy_wire::{Encoder, Frame};

/// How often an idle event stream says it is alive (axum's default).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How frames are laid out in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `event: …` (when named) and `data: …`, each frame its own event;
    /// while idle, the keep-alive every [`KEEP_ALIVE`].
    Sse(KeepAlive),
    /// One JSON array whose elements are the frames (Google's
    /// `streamGenerateContent` without `alt=sse`).
    JsonArray,
}

/// What an idle event stream sends to stay open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeepAlive {
    /// An SSE comment, which every client skips.
    Comment,
    /// Anthropic's `ping` event (its SDKs expect that, not a comment).
    Ping,
    /// Nothing: the protocol's own server sends nothing (Gemini).
    Silent,
}

/// Keeps an answer before the final frame that waits on it goes out.
pub(crate) type Keeper = Arc<dyn Fn(Value) -> Keeping + Send + Sync>;

/// A keeper's write.
pub(crate) type Keeping = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A committed stream written by `E`, as a response body.
pub(crate) struct Framed<E> {
    inner: Option<GenerationStream>,
    encoder: E,
    framing: Framing,
    keeper: Option<Keeper>,
    /// Bytes ready to go.
    pending: VecDeque<Bytes>,
    /// The store write a held frame waits on, and the frame.
    keeping: Option<(Keeping, Frame)>,
    /// The encoder's frames for one item (kept for its capacity).
    scratch: Vec<Frame>,
    /// The keep-alive's timer, started on the first idle poll.
    idle: Option<Pin<Box<Sleep>>>,
    /// Frames written so far (the array's separators).
    written: usize,
    finished: bool,
}

impl<E: Encoder + Unpin> Framed<E> {
    /// The frames of `inner`, written by `encoder`.
    pub(crate) fn new(inner: GenerationStream, encoder: E, framing: Framing) -> Self {
        Self {
            inner: Some(inner),
            ..Self::without_stream(encoder, framing)
        }
    }

    /// The frames of a refusal surfaced before anything was sent: `model`
    /// refused, in the provider's words `refusal`.
    pub(crate) fn refusal(mut encoder: E, model: &str, refusal: &str, framing: Framing) -> Self {
        let mut frames = Vec::new();
        encoder.refusal(model, refusal, &mut frames);
        let mut this = Self::without_stream(encoder, framing);
        this.push(frames.drain(..));
        this.finish();
        this
    }

    fn without_stream(encoder: E, framing: Framing) -> Self {
        Self {
            inner: None,
            encoder,
            framing,
            keeper: None,
            pending: VecDeque::new(),
            keeping: None,
            scratch: Vec::new(),
            idle: None,
            written: 0,
            finished: false,
        }
    }

    /// Keeps held answers with `keeper` (none: a held frame goes at once).
    pub(crate) fn keeper(mut self, keeper: Option<Keeper>) -> Self {
        self.keeper = keeper;
        self
    }

    /// The response: the body, with the framing's content type.
    pub(crate) fn into_response(self) -> Response {
        let content_type = match self.framing {
            Framing::Sse(_) => "text/event-stream",
            Framing::JsonArray => "application/json",
        };
        let mut response = Body::from_stream(self).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }

    fn push(&mut self, frames: impl Iterator<Item = Frame>) {
        for frame in frames {
            let bytes = self.layout(&frame);
            self.pending.push_back(bytes);
        }
    }

    fn layout(&mut self, frame: &Frame) -> Bytes {
        let mut out = String::with_capacity(frame.data.len() + frame.event.len() + 16);
        match self.framing {
            Framing::Sse(_) => {
                if !frame.event.is_empty() {
                    out.push_str("event: ");
                    out.push_str(&frame.event);
                    out.push('\n');
                }
                // A line break inside the data would end the field: each
                // line is its own `data:` (JSON text never has one).
                for line in frame.data.split('\n') {
                    out.push_str("data: ");
                    out.push_str(line);
                    out.push('\n');
                }
                out.push('\n');
            }
            Framing::JsonArray => {
                out.push_str(if self.written == 0 { "[" } else { ",\r\n" });
                out.push_str(&frame.data);
            }
        }
        self.written += 1;
        Bytes::from(out)
    }

    /// Writes one item of the engine's stream.
    fn item(&mut self, item: StreamItem, model: &str) {
        let last = matches!(item, StreamItem::Done(_) | StreamItem::Error(_));
        let mut frames = std::mem::take(&mut self.scratch);
        self.encoder.item(item, model, &mut frames);
        self.push(frames.drain(..));
        self.scratch = frames;
        if let Some((frame, answer)) = self.encoder.held() {
            match &self.keeper {
                Some(keep) => self.keeping = Some((keep(answer), frame)),
                None => self.push(std::iter::once(frame)),
            }
        }
        if last || self.encoder.finished() {
            self.finish();
        }
    }

    /// The end of the body: the array closed.
    fn finish(&mut self) {
        self.finished = true;
        self.inner = None;
        self.idle = None;
        if self.framing == Framing::JsonArray {
            let end = if self.written == 0 { "[]" } else { "]" };
            self.pending.push_back(Bytes::from_static(end.as_bytes()));
        }
    }

    /// The keep-alive, when the stream has been idle for [`KEEP_ALIVE`].
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        let text: &'static str = match self.framing {
            Framing::Sse(KeepAlive::Comment) => ":\n\n",
            Framing::Sse(KeepAlive::Ping) => "event: ping\ndata: {\"type\": \"ping\"}\n\n",
            Framing::Sse(KeepAlive::Silent) | Framing::JsonArray => return None,
        };
        let timer = self
            .idle
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(KEEP_ALIVE)));
        if timer.as_mut().poll(cx).is_pending() {
            return None;
        }
        // The next idle poll waits on the new deadline.
        timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
        Some(Bytes::from_static(text.as_bytes()))
    }
}

/// The error a stream that closed without its last item ends with.
fn cut(inner: &GenerationStream) -> StreamItem {
    StreamItem::Error(Box::new(StreamError {
        request_id: inner.request_id.clone(),
        code: FailureCode::StreamInterrupted,
        message: "the stream ended without a result".to_owned(),
        provider: inner.provider.clone(),
        model: inner.model.clone(),
        fell_back: inner.fell_back,
        content_filtered: inner.content_filtered,
        attempts: Vec::new(),
        latency_ms: 0.0,
        ttft_ms: 0.0,
    }))
}

impl<E: Encoder + Unpin> futures_core::Stream for Framed<E> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(bytes) = this.pending.pop_front() {
                if let Some(timer) = this.idle.as_mut() {
                    timer.as_mut().reset(Instant::now() + KEEP_ALIVE);
                }
                return Poll::Ready(Some(Ok(bytes)));
            }
            if let Some((keeping, _)) = this.keeping.as_mut() {
                if keeping.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if let Some((_, frame)) = this.keeping.take() {
                    this.push(std::iter::once(frame));
                }
                continue;
            }
            if this.finished {
                return Poll::Ready(None);
            }
            // Out while its item is written (the encoder reads its model).
            let Some(mut inner) = this.inner.take() else {
                this.finish();
                continue;
            };
            match inner.poll_next(cx) {
                Poll::Pending => {
                    this.inner = Some(inner);
                    return match this.poll_idle(cx) {
                        Some(alive) => Poll::Ready(Some(Ok(alive))),
                        None => Poll::Pending,
                    };
                }
                // The model as the stream names it now (a held stream
                // learns who served with its items).
                Poll::Ready(Some(item)) => this.item(item, &inner.model),
                // The run always ends with `Done` or `Error`; a channel
                // closed without one was cut.
                Poll::Ready(None) => this.item(cut(&inner), &inner.model),
            }
            if !this.finished {
                this.inner = Some(inner);
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
