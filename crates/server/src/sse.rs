//! The neutral API's event stream ([`Neutral`], an [`Encoder`] the
//! stream writer in `frames.rs` sends): `event: delta` (`{"text"}`) for
//! each chunk, `reasoning` and `tool_call` where the answer has them, then
//! exactly one `event: done` or `event: error`.

use std::borrow::Cow;

use understudy_types::StreamItem;
use understudy_wire::{Encoder, Frame};

/// The neutral API's events.
#[derive(Debug, Default)]
pub(crate) struct Neutral;

impl Encoder for Neutral {
    fn item(&mut self, item: StreamItem, _: &str, out: &mut Vec<Frame>) {
        #[derive(serde::Serialize)]
        struct Text<'a> {
            text: &'a str,
        }
        let (name, frame) = match &item {
            StreamItem::Delta(text) => ("delta", Frame::json(&Text { text })),
            StreamItem::Reasoning(text) => ("reasoning", Frame::json(&Text { text })),
            StreamItem::ToolCall(delta) => ("tool_call", Frame::json(delta)),
            // Only natively forwarded requests carry these; the neutral API
            // never forwards natively.
            StreamItem::Native(event) => ("native", Frame::json(event)),
            StreamItem::Done(done) => ("done", Frame::json(done)),
            StreamItem::Error(error) => ("error", Frame::json(error)),
        };
        out.push(Frame {
            event: Cow::Borrowed(name),
            ..frame
        });
    }

    /// Never written: the neutral API answers a surfaced refusal with its
    /// 422 error before any stream begins.
    fn refusal(&mut self, _: &str, _: &str, _: &mut Vec<Frame>) {}
}

/// Seconds since the Unix epoch (the `created` of OpenAI's objects).
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
