//! A Responses target's own events relayed to a client as sent, with their
//! own `sequence_number`s (reasoning-item ids already tagged by the
//! stream's parser), written as data: the final `response` object held
//! beside its event for the server to store first, and a
//! `response.failed` in the gateway's words when the provider's stream
//! breaks without its own final event.

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::{Value, json};
use understudy_types::StreamItem;

// The frame an event goes out as (the same type `events::Event` names).
use crate::Frame as Event;

/// The relay of one natively served stream.
#[derive(Debug, Default)]
pub struct Relay {
    /// Events written and not yet taken.
    pub pending: VecDeque<Event>,
    /// The last event is written (to `pending`, or `held`).
    pub finished: bool,
    /// The provider's final event, held until its `response` (beside it)
    /// is stored.
    pub held: Option<(Event, Value)>,
    /// The next sequence number after the provider's (for a failure the
    /// gateway reports itself).
    seq: u64,
    /// The provider's own final event went out: the engine's item that
    /// follows only ends the relay.
    ended: bool,
}

/// What the relay reads of each event.
#[derive(Deserialize)]
struct Peek {
    #[serde(rename = "type", default)]
    kind: String,
    sequence_number: Option<u64>,
    response: Option<Value>,
}

impl Relay {
    /// Relays one item of the stream of the response `id`, created at
    /// `created_at`.
    pub fn push(&mut self, item: StreamItem, id: &str, created_at: u64) {
        match item {
            StreamItem::Native(e) => {
                let peek = serde_json::from_str::<Peek>(&e.data).ok();
                let out = Event {
                    event: e.event.into(),
                    data: e.data,
                };
                let Some(peek) = peek else {
                    self.pending.push_back(out);
                    return;
                };
                if let Some(n) = peek.sequence_number {
                    self.seq = n + 1;
                }
                match (peek.kind.as_str(), peek.response) {
                    ("response.completed" | "response.incomplete", Some(response)) => {
                        self.ended = true;
                        self.held = Some((out, response));
                    }
                    ("response.failed" | "error", _) => {
                        self.ended = true;
                        self.pending.push_back(out);
                    }
                    _ => self.pending.push_back(out),
                }
            }
            StreamItem::Delta(_) | StreamItem::Reasoning(_) | StreamItem::ToolCall(_) => {}
            StreamItem::Done(_) => self.finished = true,
            StreamItem::Error(_) if self.ended => self.finished = true,
            StreamItem::Error(error) => self.fail(
                &format!("{}: {}", error.code.as_str(), error.message),
                id,
                created_at,
            ),
        }
    }

    /// `response.failed` in the gateway's words: the provider's stream broke
    /// without its own final event.
    pub fn fail(&mut self, message: &str, id: &str, created_at: u64) {
        let data = json!({
            "type": "response.failed",
            "sequence_number": self.seq,
            "response": {
                "id": id,
                "object": "response",
                "created_at": created_at,
                "status": super::response::FAILED,
                "error": {"code": "server_error", "message": message},
                "output": [],
            },
        });
        self.pending.push_back(Event {
            event: "response.failed".into(),
            data: data.to_string(),
        });
        self.finished = true;
    }
}
