//! Streamed generation as a caller sees it: a
//! [`GenerationStream`] committed to one target, yielding [`StreamItem`]s —
//! text, then exactly one [`StreamDone`](understudy_types::StreamDone) or
//! [`StreamError`](understudy_types::StreamError).
//!
//! The walk that finds the target (the same decision machine as a
//! non-streamed request, without the softened retry) and the pump that
//! feeds the channel are in `run/stream.rs`. Backpressure: the run pushes
//! text into a bounded channel ([`STREAM_BUFFER`] items); a slow reader
//! stops the run from reading upstream, and TCP pushes back from there.
//! Cancellation: when the reader drops its [`GenerationStream`], the run
//! drops the upstream stream at once, which closes the upstream connection.

pub(crate) mod feed;

use std::task::{Context, Poll};

use understudy_types::StreamItem;

/// Items buffered between the run and a slow reader.
pub const STREAM_BUFFER: usize = 16;

/// A committed stream: the provider has sent its first text.
#[derive(Debug)]
pub struct GenerationStream {
    pub request_id: String,
    /// The provider committed to.
    pub provider: String,
    /// The model answering, as the provider named it.
    pub model: String,
    pub fell_back: bool,
    /// Some attempt before the commit was refused.
    pub content_filtered: bool,
    /// The committed target forwards the client's native request: its own
    /// events come as [`StreamItem::Native`], ahead of the neutral items.
    pub native: bool,
    /// The answer is held until a target completes it (`stream_commit =
    /// "complete"`): this handle came before anyone served, so `provider`
    /// is empty and `model` the first target's until the items arrive
    /// (the fields are updated then; the final item names who served).
    pub held: bool,
    rx: feed::Receiver,
}

/// What the run sends down a stream's channel: the items, and (for a held
/// stream) who served, just before that target's items.
#[derive(Debug)]
pub(crate) enum Feed {
    Item(StreamItem),
    Served(Box<Served>),
}

/// Who serves a held stream.
#[derive(Debug)]
pub(crate) struct Served {
    pub provider: String,
    pub model: String,
    pub fell_back: bool,
    pub content_filtered: bool,
}

// === impl GenerationStream ===

impl GenerationStream {
    /// A stream over `rx`, for the run that feeds it.
    pub(crate) fn new(
        request_id: String,
        provider: String,
        model: String,
        fell_back: bool,
        content_filtered: bool,
        native: bool,
        rx: feed::Receiver,
    ) -> Self {
        Self {
            request_id,
            provider,
            model,
            fell_back,
            content_filtered,
            native,
            held: false,
            rx,
        }
    }

    /// The next item; `None` after the final `Done` or `Error`.
    pub async fn next(&mut self) -> Option<StreamItem> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next item (for adapting to a `Stream`).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        loop {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Feed::Served(s))) => {
                    let Served {
                        provider,
                        model,
                        fell_back,
                        content_filtered,
                    } = *s;
                    self.provider = provider;
                    self.model = model;
                    self.fell_back = fell_back;
                    self.content_filtered = content_filtered;
                }
                Poll::Ready(Some(Feed::Item(item))) => return Poll::Ready(Some(item)),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
