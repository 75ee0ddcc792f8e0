//! The event stream: a streamed response's bytes, through its framing
//! (SSE, or AWS's event stream), turned into neutral events by the
//! protocol's parser, bounded in text and ended by exactly one terminal
//! event.

use std::collections::VecDeque;

use http_body_util::BodyExt as _;
use understudy_core::{BoxFuture, EventStream};
use understudy_settings::Secret;
use understudy_types::ratelimit::RateLimits;
use understudy_types::{Failure, FailureKind, StreamEvent};
use understudy_wire::sse::SseItem;

use super::{Framing, InFlight, STREAM_TEXT_LIMIT, StreamParser};
use crate::classify;

/// An SSE response turned into neutral events by a protocol's parser.
pub(super) struct SseStream<T> {
    body: reqwest::Body,
    decoder: Framing,
    parser: T,
    pending: VecDeque<Result<StreamEvent, Failure>>,
    items: Vec<SseItem>,
    done: bool,
    text_bytes: usize,
    key: Option<Secret>,
    /// The budget the response's headers reported (a pool's key only).
    rate_limits: Option<Box<RateLimits>>,
    /// The stream's place on its client's HTTP/2 connection, until it ends.
    _in_flight: InFlight,
}

impl<T: StreamParser> SseStream<T> {
    pub(super) fn new(
        body: reqwest::Body,
        decoder: Framing,
        parser: T,
        key: Option<Secret>,
        in_flight: InFlight,
    ) -> Self {
        Self {
            body,
            decoder,
            parser,
            pending: VecDeque::new(),
            items: Vec::new(),
            done: false,
            text_bytes: 0,
            key,
            rate_limits: None,
            _in_flight: in_flight,
        }
    }

    /// The stream with the budget its response's headers reported.
    pub(super) fn with_rate_limits(mut self, limits: Option<RateLimits>) -> Self {
        self.rate_limits = limits.map(Box::new);
        self
    }

    async fn next_event(&mut self) -> Option<Result<StreamEvent, Failure>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                let counted = match &event {
                    Ok(StreamEvent::Delta(text) | StreamEvent::Reasoning(text)) => text.len(),
                    Ok(StreamEvent::ToolCall(call)) => call.arguments.len(),
                    Ok(StreamEvent::Native(event)) => event.data.len(),
                    _ => 0,
                };
                if counted > 0 {
                    self.text_bytes += counted;
                    if self.text_bytes > STREAM_TEXT_LIMIT {
                        self.finish_with(Failure::new(
                            FailureKind::MalformedResponse,
                            "the stream never ends",
                        ));
                        continue;
                    }
                }
                if !matches!(
                    event,
                    Ok(StreamEvent::Delta(_)
                        | StreamEvent::Reasoning(_)
                        | StreamEvent::ToolCall(_)
                        | StreamEvent::Native(_))
                ) {
                    // A finish or an error ends the stream; nothing after it
                    // counts (text and tool-call fragments do not end it).
                    self.done = true;
                    self.pending.clear();
                }
                return Some(event.map_err(|f| crate::redact(f, self.key.as_ref())));
            }
            if self.done {
                return None;
            }
            let chunk = match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(bytes) => Ok(Some(bytes)),
                    Err(_) => continue, // trailers carry no events
                },
                Some(Err(e)) => Err(e),
                None => Ok(None),
            };
            match chunk {
                Ok(Some(bytes)) => {
                    let fed = self.decoder.feed(&bytes, &mut self.items);
                    self.dispatch();
                    if let Err(f) = fed {
                        self.fail_after_items(f);
                    }
                }
                Ok(None) => {
                    let finished = self.decoder.finish(&mut self.items);
                    self.dispatch();
                    if let Err(f) = finished {
                        self.fail_after_items(f);
                        continue;
                    }
                    if self.pending.iter().all(|e| {
                        matches!(
                            e,
                            Ok(StreamEvent::Delta(_)
                                | StreamEvent::Reasoning(_)
                                | StreamEvent::ToolCall(_)
                                | StreamEvent::Native(_))
                        )
                    }) {
                        self.parser.on_eof(&mut self.pending);
                    }
                    if self.pending.is_empty() {
                        self.done = true;
                    }
                }
                Err(e) => {
                    self.dispatch();
                    let f = classify::transport(e);
                    self.pending.push_back(Err(Failure::new(
                        FailureKind::StreamInterrupted,
                        format!("the connection broke mid-stream: {}", f.detail),
                    )));
                }
            }
        }
    }

    fn dispatch(&mut self) {
        for item in self.items.drain(..) {
            if self.pending.iter().any(|e| {
                !matches!(
                    e,
                    Ok(StreamEvent::Delta(_)
                        | StreamEvent::Reasoning(_)
                        | StreamEvent::ToolCall(_)
                        | StreamEvent::Native(_))
                )
            }) {
                break;
            }
            self.parser.on_item(item, &mut self.pending);
        }
    }

    fn finish_with(&mut self, failure: Failure) {
        self.pending.clear();
        self.pending.push_back(Err(failure));
    }

    /// The framing broke (or the provider sent an exception): the stream
    /// ends in `failure` after what was decoded before it, unless it
    /// already ended.
    fn fail_after_items(&mut self, failure: Failure) {
        self.pending.push_back(Err(failure));
    }
}

impl<T: StreamParser> EventStream for SseStream<T> {
    fn next(&mut self) -> BoxFuture<'_, Option<Result<StreamEvent, Failure>>> {
        Box::pin(self.next_event())
    }

    fn model(&self) -> Option<String> {
        Some(self.parser.model().to_owned())
    }

    fn response_id(&self) -> Option<String> {
        self.parser.response_id().map(str::to_owned)
    }

    fn fallback_credit(&self) -> Option<understudy_types::credit::CreditStatus> {
        self.parser.fallback_credit()
    }

    fn rate_limits(&self) -> Option<RateLimits> {
        self.rate_limits.as_deref().copied()
    }
}
