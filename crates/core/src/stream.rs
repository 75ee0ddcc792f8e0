//! Streamed generation (DESIGN §3) as a caller sees it: a
//! [`GenerationStream`] committed to one target, yielding [`StreamItem`]s —
//! text, then exactly one [`StreamDone`] or [`StreamError`].
//!
//! The walk that finds the target (the same decision machine as a
//! non-streamed request, without the softened retry) and the pump that
//! feeds the channel are in `run/stream.rs`. Backpressure: the run pushes
//! text into a bounded channel ([`STREAM_BUFFER`] items); a slow reader
//! stops the run from reading upstream, and TCP pushes back from there.
//! Cancellation: when the reader drops its [`GenerationStream`], the run
//! drops the upstream stream at once, which closes the upstream connection.

use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::attempt::Attempt;
use crate::chat::{FinishReason, NativeEvent, ToolCallDelta, Usage};
use crate::failure::FailureCode;

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
    rx: mpsc::Receiver<StreamItem>,
}

/// What a [`GenerationStream`] yields: text and tool-call fragments, then
/// exactly one `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Delta(String),
    /// A piece of a tool call (boxed like the ends, for the channel's size).
    ToolCall(Box<ToolCallDelta>),
    /// An event exactly as the provider sent it, for a natively forwarded
    /// request (the neutral items parsed from it follow it; a front end in
    /// the same protocol relays these and ignores the neutral ones).
    Native(Box<NativeEvent>),
    /// Boxed so that the channel's slots stay the size of a `String`: the
    /// run's channel holds 16 items for every open stream.
    Done(Box<StreamDone>),
    Error(Box<StreamError>),
}

/// The end of a complete stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamDone {
    pub request_id: String,
    pub provider: String,
    pub model: String,
    pub finish_reason: FinishReason,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub usage: Option<Usage>,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
}

/// The end of a stream that failed after its commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamError {
    pub request_id: String,
    pub code: FailureCode,
    pub message: String,
    /// The provider committed to (who sent the partial text).
    pub provider: String,
    pub model: String,
    pub fell_back: bool,
    pub content_filtered: bool,
    pub attempts: Vec<Attempt>,
    pub latency_ms: f64,
    pub ttft_ms: f64,
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
        rx: mpsc::Receiver<StreamItem>,
    ) -> Self {
        Self {
            request_id,
            provider,
            model,
            fell_back,
            content_filtered,
            native,
            rx,
        }
    }

    /// The next item; `None` after the final `Done` or `Error`.
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.rx.recv().await
    }

    /// Polls for the next item (for adapting to a `Stream`).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        self.rx.poll_recv(cx)
    }
}
