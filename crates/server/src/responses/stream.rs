//! A committed [`GenerationStream`] as the Responses API's semantic events,
//! each with an increasing `sequence_number`: `response.created`,
//! `response.in_progress`, then per output item `response.output_item.added`
//! → (`response.content_part.added` → `response.output_text.delta`… →
//! `response.output_text.done` → `response.content_part.done`) or
//! (`response.function_call_arguments.delta`… → `.done`) →
//! `response.output_item.done`, and finally `response.completed` or
//! `response.incomplete`. A stream that breaks after its commit ends with
//! `response.failed` (never a clean end, never stitched to another
//! target's output).
//!
//! A stored response is written before its final event goes out, so a
//! client that sends the next turn the moment it has the answer finds it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use serde_json::{Value, json};
use understudy_core::{FailureCode, GenerationStream, StreamItem, ToolCall, ToolCallDelta, Usage};

use super::answer::{Content, Echo, OutputItem, ResponseOut, UsageOut, custom_input, status};
use super::request::ToolNames;
use super::store::{ResponseStore, Stored};

/// What every `response` object of one request shares.
#[derive(Debug)]
pub(crate) struct Head {
    pub id: String,
    pub created_at: u64,
    pub echo: Echo,
    pub names: ToolNames,
    /// Where and how to keep the response (`None`: `store: false`).
    pub save: Option<Save>,
}

/// How a response is kept.
#[derive(Debug, Clone)]
pub(crate) struct Save {
    pub store: Arc<ResponseStore>,
    pub owner: String,
    pub context: Vec<Value>,
    pub input_start: usize,
}

/// The final parts of a `response` object.
#[derive(Debug, Default)]
pub(crate) struct Ending {
    pub status: &'static str,
    pub error: Option<Value>,
    pub incomplete_details: Option<Value>,
    pub usage: Option<Usage>,
}

// === impl Head ===

impl Head {
    /// The `response` object.
    pub(crate) fn response(&self, model: &str, output: &[OutputItem], end: &Ending) -> Value {
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

    /// Keeps `response` when the request asked to.
    pub(crate) async fn keep(&self, response: &Value) {
        if let Some(save) = &self.save {
            let stored = Stored {
                owner: save.owner.clone(),
                context: save.context.clone(),
                input_start: save.input_start,
                response: response.clone(),
            };
            save.store.put(&self.id, stored).await;
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

pub(super) type Saving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What an event stream of this API owes before it polls its source again
/// (shared by the translated and the native stream): a queued event, then
/// the event that waits on its response being stored (`saving`), then the
/// end once finished; `None` when it owes nothing.
pub(super) fn owed(
    pending: &mut VecDeque<Event>,
    saving: &mut Option<(Saving, Event)>,
    finished: bool,
    cx: &mut Context<'_>,
) -> Option<Poll<Option<Result<Event, Infallible>>>> {
    if let Some(event) = pending.pop_front() {
        return Some(Poll::Ready(Some(Ok(event))));
    }
    if let Some((store, _)) = saving.as_mut() {
        if store.as_mut().poll(cx).is_pending() {
            return Some(Poll::Pending);
        }
        if let Some((_, event)) = saving.take() {
            return Some(Poll::Ready(Some(Ok(event))));
        }
    }
    finished.then_some(Poll::Ready(None))
}

/// The event stream of one response.
pub(crate) struct ResponseEvents {
    inner: Option<GenerationStream>,
    head: Arc<Head>,
    model: String,
    seq: u64,
    pending: VecDeque<Event>,
    finished: bool,
    items: Vec<OutputItem>,
    open: Option<Open>,
    calls: Vec<(u32, usize)>,
    /// The store write that the final event waits for.
    saving: Option<(Saving, Event)>,
}

impl ResponseEvents {
    /// The events of a committed stream.
    pub(crate) fn new(inner: GenerationStream, head: Arc<Head>) -> Self {
        let model = inner.model.clone();
        let mut this = Self::empty(head, model);
        this.start();
        this.inner = Some(inner);
        this
    }

    /// A refusal surfaced by policy before anything was sent: a message
    /// with the refusal, and `response.incomplete` (`content_filter`).
    pub(crate) fn refused(head: Arc<Head>, model: &str, refusal: &str) -> Self {
        let mut this = Self::empty(head, model.to_owned());
        this.start();
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
        let end = Ending {
            status: "incomplete",
            incomplete_details: Some(json!({"reason": "content_filter"})),
            ..Ending::default()
        };
        this.end("response.incomplete", &end, false);
        this
    }

    fn empty(head: Arc<Head>, model: String) -> Self {
        Self {
            inner: None,
            head,
            model,
            seq: 0,
            pending: VecDeque::new(),
            finished: false,
            items: Vec::new(),
            open: None,
            calls: Vec::new(),
            saving: None,
        }
    }

    fn start(&mut self) {
        let end = Ending {
            status: "in_progress",
            ..Ending::default()
        };
        let response = self.head.response(&self.model, &[], &end);
        self.emit("response.created", json!({"response": response}));
        let response = self.head.response(&self.model, &[], &end);
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
        Event::default().event(kind).data(data.to_string())
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

    fn tool_call(&mut self, d: &ToolCallDelta) {
        let i = match self.calls.iter().find(|(c, _)| *c == d.index) {
            Some(&(_, i)) => i,
            None => {
                self.close_open();
                let call = ToolCall {
                    id: d.id.clone().unwrap_or_else(|| super::new_id("call")),
                    name: d.name.clone().unwrap_or_default(),
                    arguments: String::new(),
                };
                let item = OutputItem::call(&call, &self.head.names, "in_progress");
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

    /// The final event (after the store write when `keep`).
    fn end(&mut self, kind: &'static str, end: &Ending, keep: bool) {
        let response = self.head.response(&self.model, &self.items, end);
        let mut data = json!({"response": response});
        let event = self.event(kind, &mut data);
        self.finished = true;
        if keep && self.head.save.is_some() {
            let head = Arc::clone(&self.head);
            let saving = async move { head.keep(&data["response"]).await };
            self.saving = Some((Box::pin(saving), event));
        } else {
            self.pending.push_back(event);
        }
    }

    fn push(&mut self, item: StreamItem) {
        match item {
            StreamItem::Delta(text) => self.text(&text, false),
            StreamItem::Reasoning(text) => self.text(&text, true),
            StreamItem::ToolCall(call) => self.tool_call(&call),
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
                let kind = if status == "completed" {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                self.end(kind, &end, true);
            }
            StreamItem::Error(error) if error.code == FailureCode::ContentFilter => {
                self.close_open();
                let end = Ending {
                    status: "incomplete",
                    incomplete_details: Some(json!({"reason": "content_filter"})),
                    ..Ending::default()
                };
                self.end("response.incomplete", &end, false);
            }
            StreamItem::Error(error) => {
                self.fail(&format!("{}: {}", error.code.as_str(), error.message))
            }
        }
    }

    /// `response.failed`: the items so far, marked incomplete.
    fn fail(&mut self, message: &str) {
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
            status: "failed",
            error: Some(json!({"code": "server_error", "message": message})),
            ..Ending::default()
        };
        self.end("response.failed", &end, false);
    }
}

impl futures_core::Stream for ResponseEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            if let Some(owed) = owed(&mut this.pending, &mut this.saving, this.finished, cx) {
                return owed;
            }
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match inner.poll_next(cx) {
                Poll::Ready(Some(item)) => self.push(item),
                // The engine always ends with Done or Error; a stream that
                // just stops was cut, and says so.
                Poll::Ready(None) => {
                    self.fail("stream_interrupted: the stream ended without a result")
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
