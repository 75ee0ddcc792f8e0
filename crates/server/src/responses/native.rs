//! The Responses API spoken natively: the client's body handed to the
//! engine as a [`NativeRequest`] for targets that speak the Responses API
//! themselves (`responses_api = true`), and what such a target answered
//! relayed as it sent it — the `response` object, or its events with their
//! own `sequence_number`s (reasoning-item ids tagged by the provider
//! adapter, so that they go back only to the target that made them).
//! Targets of other protocols get the translation (`request.rs`).
//!
//! A body with `previous_response_id` (the gateway's stored conversation,
//! unknown to the provider) goes with the stored items and its own as its
//! `input` instead. Hosted tools stay in it only for targets whose
//! `passthrough` allows them (the provider adapter leaves the others out).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::http::{HeaderValue, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use understudy_core::{Generation, GenerationStream, NativeRequest, ProviderKind, StreamItem};

use super::request::CreateRequest;
use super::store::Stored;
use super::stream::{Head, Saving, owed};

/// The client's body for Responses API targets, when it can go as sent;
/// `conversation`: the stored items `previous_response_id` names, then
/// this request's input items.
pub(crate) fn native_request(
    raw: Option<Bytes>,
    body: &CreateRequest,
    conversation: [&[Value]; 2],
) -> Option<Arc<NativeRequest>> {
    body.model.as_ref()?;
    let mut text = String::from_utf8(raw?.to_vec()).ok()?;
    if body.previous_response_id.is_some() {
        text = with_conversation(&text, conversation)?;
    }
    let body = text;
    Some(Arc::new(NativeRequest {
        fixed_sampling: false,
        softened: None,
        kind: ProviderKind::Openai,
        body,
        headers: Vec::new(),
        query: None,
    }))
}

/// `body` without `previous_response_id`, its `input` the whole
/// conversation (the provider knows nothing of the gateway's store).
fn with_conversation(body: &str, conversation: [&[Value]; 2]) -> Option<String> {
    let mut top: serde_json::Map<String, Value> = serde_json::from_str(body).ok()?;
    top.remove("previous_response_id");
    let items: Vec<Value> = conversation.concat();
    top.insert("input".into(), Value::Array(items));
    serde_json::to_string(&top).ok()
}

/// Keeps a natively served `response` under its own id (the one the
/// client got), with the request's context.
async fn keep(head: &Head, response: &Value) {
    let (Some(save), Some(id)) = (&head.save, response.get("id").and_then(Value::as_str)) else {
        return;
    };
    let stored = Stored {
        owner: save.owner.clone(),
        context: save.context.clone(),
        input_start: save.input_start,
        response: response.clone(),
    };
    save.store.put(id, stored).await;
}

/// A non-streamed answer as the Responses target sent it (`None`: the
/// serving target was not native).
pub(crate) async fn answer(g: &Generation, head: &Head) -> Option<Response> {
    let native = g.native.as_ref()?;
    if let Ok(value) = serde_json::from_str::<Value>(native) {
        keep(head, &value).await;
    }
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        native.clone(),
    )
        .into_response();
    crate::routes::failover_headers(&mut response, &g.provider, g.fell_back, g.content_filtered);
    Some(response)
}

/// A native target's events, relayed as sent; the final `response` object
/// is kept before its event goes out.
pub(crate) struct NativeEvents {
    inner: GenerationStream,
    head: Arc<Head>,
    pending: VecDeque<Event>,
    /// The next sequence number after the provider's (for a failure the
    /// gateway reports itself).
    seq: u64,
    finished: bool,
    /// The provider's own final event went out: the engine's item that
    /// follows only ends the relay.
    ended: bool,
    saving: Option<(Saving, Event)>,
}

/// What the relay reads of each event.
#[derive(Deserialize)]
struct Peek {
    #[serde(rename = "type", default)]
    kind: String,
    sequence_number: Option<u64>,
    response: Option<Value>,
}

impl NativeEvents {
    pub(crate) fn new(inner: GenerationStream, head: Arc<Head>) -> Self {
        Self {
            inner,
            head,
            pending: VecDeque::new(),
            seq: 0,
            finished: false,
            ended: false,
            saving: None,
        }
    }

    fn push(&mut self, item: StreamItem) {
        match item {
            StreamItem::Native(e) => {
                let peek = serde_json::from_str::<Peek>(&e.data).ok();
                let mut out = Event::default();
                if !e.event.is_empty() {
                    out = out.event(e.event);
                }
                let out = out.data(e.data);
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
                        let head = Arc::clone(&self.head);
                        let saving = async move { keep(&head, &response).await };
                        self.saving = Some((Box::pin(saving), out));
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
            StreamItem::Error(error) => {
                self.fail(&format!("{}: {}", error.code.as_str(), error.message))
            }
        }
    }

    /// `response.failed` in the gateway's words: the provider's stream broke
    /// without its own final event.
    fn fail(&mut self, message: &str) {
        let data = json!({
            "type": "response.failed",
            "sequence_number": self.seq,
            "response": {
                "id": self.head.id,
                "object": "response",
                "created_at": self.head.created_at,
                "status": "failed",
                "error": {"code": "server_error", "message": message},
                "output": [],
            },
        });
        self.pending.push_back(
            Event::default()
                .event("response.failed")
                .data(data.to_string()),
        );
        self.finished = true;
    }
}

impl futures_core::Stream for NativeEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            if let Some(owed) = owed(&mut this.pending, &mut this.saving, this.finished, cx) {
                return owed;
            }
            match self.inner.poll_next(cx) {
                Poll::Ready(Some(item)) => self.push(item),
                Poll::Ready(None) => {
                    self.fail("stream_interrupted: the stream ended without a result")
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
