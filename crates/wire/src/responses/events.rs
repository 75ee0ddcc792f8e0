//! The Responses API's semantic events the gateway writes a client, as
//! data (each event's name and JSON text), each with an increasing
//! `sequence_number`: `response.created`, `response.in_progress`, then per
//! output item `response.output_item.added` → (`response.content_part.added`
//! → `response.output_text.delta`… → `response.output_text.done` →
//! `response.content_part.done`) or (`response.function_call_arguments.delta`…
//! → `.done`) → `response.output_item.done`, and finally
//! `response.completed` or `response.incomplete`. A stream that breaks
//! after its commit ends with `response.failed` (never a clean end, never
//! stitched to another target's output).
//!
//! A kept response's final event is held beside the response, so that the
//! server stores it before the event goes out: a client that sends the
//! next turn the moment it has the answer finds it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{Value, json};
use understudy_types::{FailureCode, StreamItem, ToolCall, ToolCallDelta, Usage};

use crate::Encoder;

use super::answer::{Content, Echo, OutputItem, ResponseOut, UsageOut, custom_input};
use super::inbound::ToolNames;
use super::relay::Relay;
use super::response::{COMPLETED, CONTENT_FILTER, FAILED, INCOMPLETE, incomplete, status};

/// One event as it goes out: its name (none when empty) and its JSON text.
pub type Event = crate::Frame;

/// What every `response` object of one request shares.
#[derive(Debug)]
pub struct Head {
    pub id: String,
    pub created_at: u64,
    pub echo: Echo,
    pub names: ToolNames,
    /// The response is stored when it ends.
    pub kept: bool,
}

/// The final parts of a `response` object.
#[derive(Debug, Default)]
pub struct Ending {
    pub status: &'static str,
    pub error: Option<Value>,
    pub incomplete_details: Option<Value>,
    pub usage: Option<Usage>,
}

// === impl Head ===

impl Head {
    /// The `response` object.
    pub fn response(&self, model: &str, output: &[OutputItem], end: &Ending) -> Value {
        let out = ResponseOut {
            id: &self.id,
            object: "response",
            created_at: self.created_at,
            status: end.status,
            error: end.error.clone(),
            incomplete_details: end.incomplete_details.clone(),
            model,
            output,
            usage: end.usage.map(UsageOut::from),
            echo: &self.echo,
        };
        serde_json::to_value(&out).unwrap_or(Value::Null)
    }
}

// === impl Ending ===

impl Ending {
    /// A response a content filter cut short (or refused).
    pub fn content_filter() -> Self {
        Self {
            status: INCOMPLETE,
            incomplete_details: Some(incomplete(CONTENT_FILTER)),
            ..Self::default()
        }
    }
}

/// The open output item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Message(usize),
    Reasoning(usize),
    /// A tool call: (its neutral index, its item).
    Call(u32, usize),
}

/// The events of one response, written as data.
#[derive(Debug)]
pub struct Events {
    model: String,
    seq: u64,
    /// Events written and not yet taken.
    pub pending: VecDeque<Event>,
    /// The last event is written (to `pending`, or `held`).
    pub finished: bool,
    /// The final event, held until its `response` (the value beside it)
    /// is stored: only when the frame said the response is kept.
    pub held: Option<(Event, Value)>,
    items: Vec<OutputItem>,
    open: Option<Open>,
    calls: Vec<(u32, usize)>,
}

impl Events {
    /// The events of a committed stream from `model`, begun.
    pub fn new(head: &Head, model: String) -> Self {
        let mut this = Self::empty(model);
        this.start(head);
        this
    }

    /// A refusal surfaced by policy before anything was sent: a message
    /// with the refusal, and `response.incomplete` (`content_filter`).
    pub fn refused(head: &Head, model: &str, refusal: &str) -> Self {
        let mut this = Self::empty(model.to_owned());
        this.start(head);
        let mut item = OutputItem::refusal("");
        item.set_status("in_progress");
        let i = this.add(item);
        let item_id = this.items[i].id().to_owned();
        let part = json!({"type": "refusal", "refusal": ""});
        this.emit(
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}),
        );
        this.emit(
            "response.refusal.delta",
            json!({"item_id": item_id, "output_index": i, "content_index": 0, "delta": refusal}),
        );
        this.emit(
            "response.refusal.done",
            json!({"item_id": item_id, "output_index": i, "content_index": 0, "refusal": refusal}),
        );
        let part = json!({"type": "refusal", "refusal": refusal});
        this.emit(
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}),
        );
        this.items[i] = OutputItem::refusal(refusal);
        if let OutputItem::Message { id, .. } = &mut this.items[i] {
            *id = item_id;
        }
        this.item_done(i);
        this.end(
            head,
            "response.incomplete",
            &Ending::content_filter(),
            false,
        );
        this
    }

    fn empty(model: String) -> Self {
        Self {
            model,
            seq: 0,
            pending: VecDeque::new(),
            finished: false,
            held: None,
            items: Vec::new(),
            open: None,
            calls: Vec::new(),
        }
    }

    fn start(&mut self, head: &Head) {
        let end = Ending {
            status: "in_progress",
            ..Ending::default()
        };
        let response = head.response(&self.model, &[], &end);
        self.emit("response.created", json!({"response": response}));
        let response = head.response(&self.model, &[], &end);
        self.emit("response.in_progress", json!({"response": response}));
    }

    /// Queues one event: `data` with its `type` and `sequence_number`.
    fn emit(&mut self, kind: &'static str, mut data: Value) {
        let event = self.event(kind, &mut data);
        self.pending.push_back(event);
    }

    fn event(&mut self, kind: &'static str, data: &mut Value) -> Event {
        if let Value::Object(o) = data {
            o.insert("type".into(), kind.into());
            o.insert("sequence_number".into(), self.seq.into());
        }
        self.seq += 1;
        Event {
            event: Cow::Borrowed(kind),
            data: data.to_string(),
        }
    }

    /// Adds an item and announces it; its index.
    fn add(&mut self, item: OutputItem) -> usize {
        let i = self.items.len();
        let value = serde_json::to_value(&item).unwrap_or(Value::Null);
        self.items.push(item);
        self.emit(
            "response.output_item.added",
            json!({"output_index": i, "item": value}),
        );
        i
    }

    fn item_done(&mut self, i: usize) {
        let value = serde_json::to_value(&self.items[i]).unwrap_or(Value::Null);
        self.emit(
            "response.output_item.done",
            json!({"output_index": i, "item": value}),
        );
    }

    fn text(&mut self, delta: &str, reasoning: bool) {
        if delta.is_empty() {
            return;
        }
        let i = match self.open {
            Some(Open::Message(i)) if !reasoning => i,
            Some(Open::Reasoning(i)) if reasoning => i,
            _ => {
                self.close_open();
                let (item, part) = if reasoning {
                    let item = OutputItem::Reasoning {
                        id: super::new_id("rs"),
                        summary: Vec::new(),
                        content: Vec::new(),
                        status: "in_progress",
                    };
                    (
                        item,
                        Content::ReasoningText {
                            text: String::new(),
                        },
                    )
                } else {
                    let mut item = OutputItem::text("", "in_progress");
                    if let OutputItem::Message { content, .. } = &mut item {
                        content.clear();
                    }
                    let part = Content::OutputText {
                        text: String::new(),
                        annotations: Vec::new(),
                        logprobs: Vec::new(),
                    };
                    (item, part)
                };
                let i = self.add(item);
                let item_id = self.items[i].id().to_owned();
                let value = serde_json::to_value(&part).unwrap_or(Value::Null);
                if let OutputItem::Message { content, .. } | OutputItem::Reasoning { content, .. } =
                    &mut self.items[i]
                {
                    content.push(part);
                }
                self.emit(
                    "response.content_part.added",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": value}),
                );
                self.open = Some(if reasoning {
                    Open::Reasoning(i)
                } else {
                    Open::Message(i)
                });
                i
            }
        };
        if let OutputItem::Message { content, .. } | OutputItem::Reasoning { content, .. } =
            &mut self.items[i]
        {
            if let Some(Content::OutputText { text, .. } | Content::ReasoningText { text }) =
                content.first_mut()
            {
                text.push_str(delta);
            }
        }
        let item_id = self.items[i].id().to_owned();
        if reasoning {
            self.emit(
                "response.reasoning_text.delta",
                json!({"item_id": item_id, "output_index": i, "content_index": 0, "delta": delta}),
            );
        } else {
            self.emit(
                "response.output_text.delta",
                json!({"item_id": item_id, "output_index": i, "content_index": 0, "delta": delta, "logprobs": []}),
            );
        }
    }

    fn tool_call(&mut self, d: &ToolCallDelta, names: &ToolNames) {
        let i = match self.calls.iter().find(|(c, _)| *c == d.index) {
            Some(&(_, i)) => i,
            None => {
                self.close_open();
                let call = ToolCall {
                    id: d.id.clone().unwrap_or_else(|| super::new_id("call")),
                    name: d.name.clone().unwrap_or_default(),
                    arguments: String::new(),
                };
                let item = OutputItem::call(&call, names, "in_progress");
                let i = self.add(item);
                self.calls.push((d.index, i));
                self.open = Some(Open::Call(d.index, i));
                i
            }
        };
        if d.arguments.is_empty() {
            return;
        }
        let item_id = self.items[i].id().to_owned();
        match &mut self.items[i] {
            OutputItem::FunctionCall { arguments, .. } => {
                arguments.push_str(&d.arguments);
                self.emit(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": i, "delta": d.arguments}),
                );
            }
            // A custom tool's input is the `input` string of the JSON the
            // model writes: sent whole when the call is complete.
            OutputItem::CustomToolCall { input, .. } => input.push_str(&d.arguments),
            _ => {}
        }
    }

    /// Finishes the open item with its `.done` events.
    fn close_open(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let i = match open {
            Open::Message(i) | Open::Reasoning(i) | Open::Call(_, i) => i,
        };
        let item_id = self.items[i].id().to_owned();
        match &mut self.items[i] {
            OutputItem::Message { content, .. } | OutputItem::Reasoning { content, .. } => {
                let part = content.first().cloned();
                let (kind, text) = match &part {
                    Some(Content::OutputText { text, .. }) => {
                        ("response.output_text.done", text.clone())
                    }
                    Some(Content::ReasoningText { text }) => {
                        ("response.reasoning_text.done", text.clone())
                    }
                    _ => ("response.output_text.done", String::new()),
                };
                let mut done = json!({"item_id": item_id, "output_index": i, "content_index": 0, "text": text});
                if kind == "response.output_text.done" {
                    done["logprobs"] = json!([]);
                }
                self.emit(kind, done);
                let part = serde_json::to_value(&part).unwrap_or(Value::Null);
                self.emit(
                    "response.content_part.done",
                    json!({"item_id": item_id, "output_index": i, "content_index": 0, "part": part}),
                );
            }
            OutputItem::FunctionCall {
                arguments, name, ..
            } => {
                let (arguments, name) = (arguments.clone(), name.clone());
                self.emit(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": i, "arguments": arguments, "name": name}),
                );
            }
            OutputItem::CustomToolCall { input, .. } => {
                *input = custom_input(input);
                let input = input.clone();
                self.emit(
                    "response.custom_tool_call_input.delta",
                    json!({"item_id": item_id, "output_index": i, "delta": input}),
                );
                self.emit(
                    "response.custom_tool_call_input.done",
                    json!({"item_id": item_id, "output_index": i, "input": input}),
                );
            }
        }
        self.items[i].set_status("completed");
        self.item_done(i);
    }

    /// The final event (held for the store write when `keep` and the
    /// response is kept).
    fn end(&mut self, head: &Head, kind: &'static str, end: &Ending, keep: bool) {
        let response = head.response(&self.model, &self.items, end);
        let mut data = json!({"response": response});
        let event = self.event(kind, &mut data);
        self.finished = true;
        if keep && head.kept {
            self.held = Some((event, data["response"].take()));
        } else {
            self.pending.push_back(event);
        }
    }

    /// Writes the events for one item of the stream.
    pub fn push(&mut self, item: StreamItem, head: &Head) {
        match item {
            StreamItem::Delta(text) => self.text(&text, false),
            StreamItem::Reasoning(text) => self.text(&text, true),
            StreamItem::ToolCall(call) => self.tool_call(&call, &head.names),
            // Only natively forwarded requests carry these; this API is
            // always translated.
            StreamItem::Native(_) => {}
            StreamItem::Done(done) => {
                self.close_open();
                self.model = done.model.clone();
                let (status, incomplete_details) = status(&done.finish_reason);
                let end = Ending {
                    status,
                    incomplete_details,
                    usage: done.usage,
                    error: None,
                };
                let kind = if status == COMPLETED {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                self.end(head, kind, &end, true);
            }
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.close_open();
                self.end(
                    head,
                    "response.incomplete",
                    &Ending::content_filter(),
                    false,
                );
            }
            StreamItem::Error(error) => {
                self.fail(head, &format!("{}: {}", error.code.as_str(), error.message))
            }
        }
    }

    /// `response.failed`: the items so far, marked incomplete.
    pub fn fail(&mut self, head: &Head, message: &str) {
        self.open = None;
        for item in &mut self.items {
            if matches!(
                item,
                OutputItem::Message {
                    status: "in_progress",
                    ..
                } | OutputItem::FunctionCall {
                    status: "in_progress",
                    ..
                } | OutputItem::CustomToolCall {
                    status: "in_progress",
                    ..
                } | OutputItem::Reasoning {
                    status: "in_progress",
                    ..
                }
            ) {
                item.set_status("incomplete");
            }
        }
        let end = Ending {
            status: FAILED,
            error: Some(json!({"code": "server_error", "message": message})),
            ..Ending::default()
        };
        self.end(head, "response.failed", &end, false);
    }
}

/// A committed stream as this API's events, as an [`Encoder`]: written
/// from the neutral items ([`Events`]), or a Responses target's own events
/// relayed ([`Relay`]). The final event of a kept response is held beside
/// it ([`Encoder::held`]).
#[derive(Debug)]
pub struct ResponseStream {
    head: Arc<Head>,
    written: Written,
}

#[derive(Debug)]
enum Written {
    Translated(Events),
    Relayed(Relay),
}

impl ResponseStream {
    /// The events of a stream from `model`; `native`: a Responses target's
    /// own events arrive.
    pub fn new(head: Arc<Head>, model: &str, native: bool) -> Self {
        let written = match native {
            true => Written::Relayed(Relay::default()),
            false => Written::Translated(Events::new(&head, model.to_owned())),
        };
        Self { head, written }
    }
}

impl Encoder for ResponseStream {
    fn item(&mut self, item: StreamItem, _: &str, out: &mut Vec<Event>) {
        match &mut self.written {
            Written::Translated(events) => {
                if !events.finished {
                    events.push(item, &self.head);
                }
                out.extend(events.pending.drain(..));
            }
            Written::Relayed(relay) => {
                if !relay.finished {
                    relay.push(item, &self.head.id, self.head.created_at);
                }
                out.extend(relay.pending.drain(..));
            }
        }
    }

    fn refusal(&mut self, model: &str, refusal: &str, out: &mut Vec<Event>) {
        let mut events = Events::refused(&self.head, model, refusal);
        out.extend(events.pending.drain(..));
        self.written = Written::Translated(events);
    }

    fn finished(&self) -> bool {
        match &self.written {
            Written::Translated(events) => events.finished,
            Written::Relayed(relay) => relay.finished,
        }
    }

    fn held(&mut self) -> Option<(Event, Value)> {
        match &mut self.written {
            Written::Translated(events) => events.held.take(),
            Written::Relayed(relay) => relay.held.take(),
        }
    }
}
