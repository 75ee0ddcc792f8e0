//! How a streamed answer's bytes become items for a protocol's parser:
//! server-sent events, or AWS's binary event stream (Bedrock), whose
//! messages a cloud's function turns into the same items.

use understudy_types::{Failure, FailureKind};

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
