//! How a streamed answer's bytes become items for a protocol's parser:
//! server-sent events, or AWS's binary event stream (Bedrock), whose
//! messages a cloud's function turns into the same items.

use std::collections::VecDeque;

use understudy_types::{Failure, FailureKind, StreamEvent};

use crate::StreamParser;
use crate::eventstream;
use crate::sse::{SseDecoder, SseItem};

/// A stream's framing, with its decoder's state.
#[derive(Debug)]
pub enum Framing {
    /// Server-sent events.
    Sse(SseDecoder),
    /// AWS's binary event stream: each message becomes an item by `item`
    /// (nothing for one the parser does not read), or a failure (an
    /// exception message).
    AwsEventStream {
        decoder: eventstream::Decoder,
        item: ToItem,
    },
}

/// What an event-stream message is to the parser.
pub type ToItem = fn(eventstream::Message) -> Result<Option<SseItem>, Failure>;

impl Framing {
    pub fn sse() -> Self {
        Self::Sse(SseDecoder::new())
    }

    pub fn aws_event_stream(item: ToItem) -> Self {
        Self::AwsEventStream {
            decoder: eventstream::Decoder::new(),
            item,
        }
    }

    /// Decodes `bytes`, appending whole items to `out`; an error ends the
    /// stream after the items decoded before it.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseItem>) -> Result<(), Failure> {
        match self {
            Self::Sse(decoder) => decoder.feed(bytes, out).map_err(|_| {
                Failure::new(FailureKind::MalformedResponse, "an event larger than 1 MiB")
            }),
            Self::AwsEventStream { decoder, item } => {
                decoder.push(bytes);
                drain(decoder, *item, out)
            }
        }
    }

    /// The stream ended: what is left (bytes of a message cut off are the
    /// stream broken off).
    pub fn finish(&mut self, out: &mut Vec<SseItem>) -> Result<(), Failure> {
        match self {
            Self::Sse(decoder) => {
                let _ = decoder.finish(out);
                Ok(())
            }
            Self::AwsEventStream { decoder, item } => {
                drain(decoder, *item, out)?;
                decoder.finish().map_err(|e| {
                    Failure::new(
                        FailureKind::StreamInterrupted,
                        format!("the event stream broke off: {e}"),
                    )
                })
            }
        }
    }
}

fn drain(
    decoder: &mut eventstream::Decoder,
    item: ToItem,
    out: &mut Vec<SseItem>,
) -> Result<(), Failure> {
    while let Some(message) = decoder.next_message() {
        let message = message.map_err(|e| {
            Failure::new(
                FailureKind::MalformedResponse,
                format!("the event stream is corrupt: {e}"),
            )
        })?;
        if let Some(i) = item(message)? {
            out.push(i);
        }
    }
    Ok(())
}

/// Runs a parser over raw SSE bytes as they would arrive; for tests and
/// fuzzing.
pub fn parse_stream_bytes<T: StreamParser>(
    parser: T,
    chunks: &[&[u8]],
) -> Vec<Result<StreamEvent, Failure>> {
    parse_framed_bytes(Framing::sse(), parser, chunks)
}

/// Runs a parser over raw bytes in `framing` as they would arrive, as a
/// live stream does: items in order until a terminal event, a framing
/// error after the items before it; for tests and fuzzing.
pub fn parse_framed_bytes<T: StreamParser>(
    mut framing: Framing,
    mut parser: T,
    chunks: &[&[u8]],
) -> Vec<Result<StreamEvent, Failure>> {
    let mut items = Vec::new();
    let mut out = VecDeque::new();
    let terminal = |out: &VecDeque<Result<StreamEvent, Failure>>| out.iter().any(ends);
    let mut dispatch = |items: &mut Vec<SseItem>, out: &mut VecDeque<_>| {
        for item in items.drain(..) {
            if terminal(out) {
                break;
            }
            parser.on_item(item, out);
        }
    };
    let mut failed = None;
    for chunk in chunks {
        let fed = framing.feed(chunk, &mut items);
        dispatch(&mut items, &mut out);
        if let Err(f) = fed {
            failed = Some(f);
            break;
        }
    }
    if failed.is_none() {
        failed = framing.finish(&mut items).err();
        dispatch(&mut items, &mut out);
    }
    match failed {
        Some(f) => out.push_back(Err(f)),
        None if !terminal(&out) => parser.on_eof(&mut out),
        None => {}
    }
    let mut events: Vec<_> = out.into();
    if let Some(end) = events.iter().position(ends) {
        events.truncate(end + 1);
    }
    events
}

/// Whether an event ends a stream (text and tool-call fragments do not).
fn ends(e: &Result<StreamEvent, Failure>) -> bool {
    !matches!(
        e,
        Ok(StreamEvent::Delta(_)
            | StreamEvent::Reasoning(_)
            | StreamEvent::ToolCall(_)
            | StreamEvent::Native(_))
    )
}
