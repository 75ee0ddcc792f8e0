//! A committed [`GenerationStream`] as the Responses API's semantic events
//! ([`understudy_wire::responses::events`] writes them), framed as SSE.
//!
//! A stored response is written before its final event goes out, so a
//! client that sends the next turn the moment it has the answer finds it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::sse;
use serde_json::Value;
use understudy_core::GenerationStream;
use understudy_wire::responses::answer::{Echo, OutputItem};
use understudy_wire::responses::events::{Ending, Event, Events, Frame};
use understudy_wire::responses::inbound::ToolNames;

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

// === impl Head ===

impl Head {
    /// The protocol's view of it.
    pub(crate) fn frame(&self) -> Frame<'_> {
        Frame {
            id: &self.id,
            created_at: self.created_at,
            echo: &self.echo,
            names: &self.names,
            kept: self.save.is_some(),
        }
    }

    /// The `response` object.
    pub(crate) fn response(&self, model: &str, output: &[OutputItem], end: &Ending) -> Value {
        self.frame().response(model, output, end)
    }

    /// Keeps `response` when the request asked to.
    pub(crate) async fn keep(&self, response: &Value) {
        if let Some(save) = &self.save {
            save.store.put(&self.id, self.stored(save, response)).await;
        }
    }

    /// `response` as kept, with the request's context.
    pub(super) fn stored(&self, save: &Save, response: &Value) -> Stored {
        Stored {
            owner: save.owner.clone(),
            context: save.context.clone(),
            input_start: save.input_start,
            response: response.clone(),
        }
    }
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
) -> Option<Poll<Option<Result<sse::Event, Infallible>>>> {
    if let Some(event) = pending.pop_front() {
        return Some(Poll::Ready(Some(Ok(framed(event)))));
    }
    if let Some((store, _)) = saving.as_mut() {
        if store.as_mut().poll(cx).is_pending() {
            return Some(Poll::Pending);
        }
        if let Some((_, event)) = saving.take() {
            return Some(Poll::Ready(Some(Ok(framed(event)))));
        }
    }
    finished.then_some(Poll::Ready(None))
}

/// An event as SSE: its name (when it has one) and its data.
fn framed(event: Event) -> sse::Event {
    let out = sse::Event::default();
    let out = match event.name.is_empty() {
        true => out,
        false => out.event(event.name),
    };
    out.data(event.data)
}

/// The event stream of one response.
pub(crate) struct ResponseEvents {
    inner: Option<GenerationStream>,
    head: Arc<Head>,
    events: Events,
    /// The store write that the final event waits for.
    saving: Option<(Saving, Event)>,
}

impl ResponseEvents {
    /// The events of a committed stream.
    pub(crate) fn new(inner: GenerationStream, head: Arc<Head>) -> Self {
        let events = Events::new(&head.frame(), inner.model.clone());
        Self {
            inner: Some(inner),
            head,
            events,
            saving: None,
        }
    }

    /// A refusal surfaced by policy before anything was sent: a message
    /// with the refusal, and `response.incomplete` (`content_filter`).
    pub(crate) fn refused(head: Arc<Head>, model: &str, refusal: &str) -> Self {
        let events = Events::refused(&head.frame(), model, refusal);
        Self {
            inner: None,
            head,
            events,
            saving: None,
        }
    }

    /// Starts the store write a held final event waits for.
    fn save_held(&mut self) {
        if let Some((event, response)) = self.events.held.take() {
            let head = Arc::clone(&self.head);
            let saving = async move { head.keep(&response).await };
            self.saving = Some((Box::pin(saving), event));
        }
    }
}

impl futures_core::Stream for ResponseEvents {
    type Item = Result<sse::Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            let (pending, finished) = (&mut this.events.pending, this.events.finished);
            if let Some(owed) = owed(pending, &mut this.saving, finished, cx) {
                return owed;
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match inner.poll_next(cx) {
                Poll::Ready(Some(item)) => this.events.push(item, &this.head.frame()),
                // The engine always ends with Done or Error; a stream that
                // just stops was cut, and says so.
                Poll::Ready(None) => this.events.fail(
                    &this.head.frame(),
                    "stream_interrupted: the stream ended without a result",
                ),
                Poll::Pending => return Poll::Pending,
            }
            this.save_held();
        }
    }
}
