//! A committed stream as Anthropic's server-sent events ([`MessageEvents`]),
//! as data: blocks opened, fed and closed as the neutral items arrive, or,
//! for a natively forwarded request, the provider's own events relayed as
//! they came; the small event shapes it writes, and [`event`], for the
//! events a front end writes itself. The server sends what it yields.

use std::borrow::Cow;
use std::collections::VecDeque;

use serde::Serialize;
use serde_json::Value;
use understudy_types::{FailureCode, NativeEvent, StreamItem, ToolCallDelta, Usage};

use super::answer::MessageOut;
use super::error::WireErrorEnvelope;
use super::request::BlockOut;
use super::stop_reason;
use crate::{Encoder, Frame};

/// A committed stream's items as Anthropic's server-sent events:
/// `message_start`; for the text a `text` block (`content_block_start`,
/// `text_delta`s, `content_block_stop`); for each tool call a `tool_use`
/// block (`input: {}`, then `input_json_delta`s), each block with the next
/// index and the open one closed first; then `message_delta` (stop reason,
/// usage) and `message_stop`. A failure past the commit ends with an
/// `error` event and no `message_stop`, so that no client mistakes a cut
/// answer for a complete one; a refusal past the commit ends the way
/// Anthropic ends one, `stop_reason: "refusal"`. Each event is a
/// [`NativeEvent`]: its name and its data.
#[derive(Debug)]
pub struct MessageEvents {
    id: String,
    pending: VecDeque<NativeEvent>,
    finished: bool,
    /// The index the next content block gets.
    next_index: u32,
    /// The block currently open.
    open: Option<OpenBlock>,
    /// Each tool call's block: (the call's neutral index, its block index).
    tool_blocks: Vec<(u32, u32)>,
    /// The provider's own events are relayed as they came (a natively
    /// forwarded request served by an Anthropic target); the neutral items
    /// are then ignored.
    native: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    Text(u32),
    /// A tool call's block: (the call's neutral index, the block index).
    Tool(u32, u32),
}

impl MessageEvents {
    /// The events of a stream committed to `model`; `native` when the
    /// provider's own events come (see [`Self::push`]).
    pub fn new(id: String, model: &str, native: bool) -> Self {
        let mut this = Self {
            id,
            pending: VecDeque::new(),
            finished: false,
            next_index: 0,
            open: None,
            tool_blocks: Vec::new(),
            native,
        };
        if !native {
            this.message_start(model);
        }
        this
    }

    fn message_start(&mut self, model: &str) {
        #[derive(Serialize)]
        struct Start<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            message: MessageOut<'a>,
        }
        let start = Start {
            kind: "message_start",
            message: MessageOut::start(&self.id, model),
        };
        let e = event("message_start", &start);
        self.pending.push_back(e);
    }

    /// `message_delta` and `message_stop`.
    fn message_end(&mut self, stop_reason: &str, usage: Option<Usage>) {
        #[derive(Serialize)]
        struct Delta<'a> {
            stop_reason: &'a str,
            stop_sequence: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct DeltaUsage {
            #[serde(skip_serializing_if = "Option::is_none")]
            input_tokens: Option<u64>,
            output_tokens: u64,
        }
        #[derive(Serialize)]
        struct MessageDelta<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            delta: Delta<'a>,
            usage: DeltaUsage,
        }
        self.close_block();
        let delta = MessageDelta {
            kind: "message_delta",
            delta: Delta {
                stop_reason,
                stop_sequence: None,
            },
            usage: DeltaUsage {
                input_tokens: usage.map(|u| u.input_tokens),
                output_tokens: usage.map_or(0, |u| u.output_tokens),
            },
        };
        self.pending.push_back(event("message_delta", &delta));
        self.pending
            .push_back(event("message_stop", &Typed::new("message_stop")));
        self.finished = true;
    }

    fn close_block(&mut self) {
        #[derive(Serialize)]
        struct Stop {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
        }
        let index = match self.open.take() {
            None => return,
            Some(OpenBlock::Text(i) | OpenBlock::Tool(_, i)) => i,
        };
        self.pending.push_back(event(
            "content_block_stop",
            &Stop {
                kind: "content_block_stop",
                index,
            },
        ));
    }

    /// Closes the open block and starts a new one.
    fn start_block(&mut self, block: BlockOut<'_>) -> u32 {
        #[derive(Serialize)]
        struct Start<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
            content_block: BlockOut<'a>,
        }
        self.close_block();
        let index = self.next_index;
        self.next_index += 1;
        self.pending.push_back(event(
            "content_block_start",
            &Start {
                kind: "content_block_start",
                index,
                content_block: block,
            },
        ));
        index
    }

    fn delta(&mut self, index: u32, delta: DeltaOut<'_>) {
        #[derive(Serialize)]
        struct BlockDelta<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            index: u32,
            delta: DeltaOut<'a>,
        }
        self.pending.push_back(event(
            "content_block_delta",
            &BlockDelta {
                kind: "content_block_delta",
                index,
                delta,
            },
        ));
    }

    fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Some(OpenBlock::Text(i)) => i,
            _ => {
                let i = self.start_block(BlockOut::Text {
                    text: Cow::Borrowed(""),
                });
                self.open = Some(OpenBlock::Text(i));
                i
            }
        };
        self.delta(index, DeltaOut::TextDelta { text });
    }

    fn tool_call(&mut self, call: &ToolCallDelta) {
        let index = match self.open {
            Some(OpenBlock::Tool(c, i)) if c == call.index => i,
            _ => match self.tool_blocks.iter().find(|(c, _)| *c == call.index) {
                // A late fragment of a call whose block is already closed
                // (no provider interleaves calls, but nothing forbids it):
                // its JSON still goes to its own block rather than be lost.
                Some(&(_, i)) => i,
                None => {
                    let minted;
                    let id = match &call.id {
                        Some(id) => id.as_str(),
                        None => {
                            minted = format!("toolu_{}_{}", id_safe(&self.id), call.index);
                            &minted
                        }
                    };
                    let i = self.start_block(BlockOut::ToolUse {
                        id: Cow::Borrowed(id),
                        name: call.name.as_deref().unwrap_or(""),
                        input: Value::Object(serde_json::Map::new()),
                    });
                    self.open = Some(OpenBlock::Tool(call.index, i));
                    self.tool_blocks.push((call.index, i));
                    i
                }
            },
        };
        if !call.arguments.is_empty() {
            self.delta(
                index,
                DeltaOut::InputJsonDelta {
                    partial_json: &call.arguments,
                },
            );
        }
    }

    /// Writes the events for one item of the engine's stream. For a
    /// native stream the provider's own events are relayed as they came (a
    /// natively forwarded request served by an Anthropic target) and the
    /// neutral items only say how it ended.
    pub fn push(&mut self, item: StreamItem) {
        if self.native {
            return self.relay(item);
        }
        match item {
            StreamItem::Delta(text) => self.text(&text),
            StreamItem::ToolCall(call) => self.tool_call(&call),
            // Only a native stream carries these (handled by `relay`).
            StreamItem::Native(_) => {}
            // A thinking block needs the provider's signature to be sent
            // back; only a native stream (its own events) carries one.
            StreamItem::Reasoning(_) => {}
            StreamItem::Done(done) => {
                self.message_end(stop_reason(&done.finish_reason), done.usage);
            }
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.message_end("refusal", None);
            }
            StreamItem::Error(error) => {
                let kind = if error.code == FailureCode::Unavailable {
                    "overloaded_error"
                } else {
                    "api_error"
                };
                self.fail(kind, &format!("{}: {}", error.code.as_str(), error.message));
            }
        }
    }

    /// A native stream: the provider's events as they came, byte for byte
    /// in their data (thinking signatures included); the neutral items only
    /// say how it ended.
    fn relay(&mut self, item: StreamItem) {
        match item {
            StreamItem::Native(e) => {
                // The provider's own `error` event ends the stream: the
                // engine's error item that follows would be a second one.
                self.finished |= e.event == "error";
                self.pending.push_back(*e);
            }
            StreamItem::Delta(_) | StreamItem::Reasoning(_) | StreamItem::ToolCall(_) => {}
            // `message_stop` came as the provider's own event.
            StreamItem::Done(_) => self.finished = true,
            // The provider's refusal (`stop_reason: "refusal"`) came as its
            // own `message_delta`; the engine stopped reading there, so the
            // stream is closed as Anthropic closes one.
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.pending
                    .push_back(event("message_stop", &Typed::new("message_stop")));
                self.finished = true;
            }
            StreamItem::Error(error) => {
                self.fail(
                    "api_error",
                    &format!("{}: {}", error.code.as_str(), error.message),
                );
            }
        }
    }

    /// The `error` event that ends a broken stream (no `message_stop`).
    fn fail(&mut self, kind: &str, message: &str) {
        self.pending
            .push_back(event("error", &WireErrorEnvelope::new(kind, message)));
        self.finished = true;
    }
}

/// The `delta` of a `content_block_delta`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaOut<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

/// An event whose data is only its type (`message_stop`, `ping`).
#[derive(Debug, Serialize)]
pub struct Typed {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl Typed {
    pub fn new(kind: &'static str) -> Self {
        Self { kind }
    }
}

impl Encoder for MessageEvents {
    fn item(&mut self, item: StreamItem, _: &str, out: &mut Vec<Frame>) {
        if !self.finished {
            self.push(item);
        }
        self.drain(out);
    }

    /// A refusal returned by the `surface` policy before anything was
    /// sent (the encoder made with `native` false): Anthropic's own shape
    /// for one (`message_start`, a `message_delta` with `stop_reason:
    /// "refusal"`, `message_stop`).
    fn refusal(&mut self, _: &str, _: &str, out: &mut Vec<Frame>) {
        self.message_end("refusal", None);
        self.drain(out);
    }

    fn finished(&self) -> bool {
        self.finished
    }
}

impl MessageEvents {
    /// The events written so far, as frames.
    fn drain(&mut self, out: &mut Vec<Frame>) {
        out.extend(self.pending.drain(..).map(|e| Frame {
            event: Cow::Owned(e.event),
            data: e.data,
        }));
    }
}

/// A named event whose data is `value` as JSON; these shapes always
/// serialise (plain structs with string keys), so the empty object is only
/// a formality.
pub fn event(name: &'static str, value: &impl Serialize) -> NativeEvent {
    let data = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    NativeEvent {
        event: name.to_owned(),
        data,
    }
}

/// `id` (a message id made of the client's `x-request-id`, which may hold
/// `.` and `:`) in Anthropic's id alphabet, injectively: letters and digits
/// stand for themselves, every other byte is `_` and two hex digits.
fn id_safe(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}
