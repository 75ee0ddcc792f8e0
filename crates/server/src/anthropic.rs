//! Anthropic's Messages API for `POST /v1/messages`: the protocol (the
//! body's shapes, its translation to the neutral request, the answer, the
//! events, the error body) is `understudy_wire::messages`; what is left
//! here is what needs axum: a committed stream as a `Stream` of server-sent
//! events ([`MessageEvents`]), and [`event`] for the events the route
//! writes itself.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::response::sse::Event;
use serde::Serialize;
use understudy_core::{GenerationStream, NativeEvent};
use understudy_wire::messages::events;

pub(crate) use understudy_wire::messages::answer::MessageOut;
pub(crate) use understudy_wire::messages::client::MessagesRequest;
pub(crate) use understudy_wire::messages::events::Typed;

/// A committed [`GenerationStream`] as Anthropic's server-sent events,
/// written by [`events::MessageEvents`] (see there for their order).
///
/// Dropping this stream (hyper does when the client disconnects) drops the
/// engine's stream, which closes the upstream connection.
pub(crate) struct MessageEvents {
    inner: Option<GenerationStream>,
    events: events::MessageEvents,
}

impl MessageEvents {
    /// The events of a committed stream.
    pub(crate) fn new(inner: GenerationStream, id: String) -> Self {
        Self {
            events: events::MessageEvents::new(id, &inner.model, inner.native),
            inner: Some(inner),
        }
    }

    /// A refusal the `surface` policy returned before anything was sent.
    pub(crate) fn refusal(id: String, model: &str) -> Self {
        Self {
            inner: None,
            events: events::MessageEvents::refusal(id, model),
        }
    }
}

impl futures_core::Stream for MessageEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.events.pop() {
                return Poll::Ready(Some(Ok(sse(event))));
            }
            if this.events.finished() {
                return Poll::Ready(None);
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match inner.poll_next(cx) {
                Poll::Ready(Some(item)) => this.events.push(item),
                Poll::Ready(None) => this.events.cut(),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A named event whose data is `value` as JSON.
pub(crate) fn event(name: &'static str, value: &impl Serialize) -> Event {
    sse(events::event(name, value))
}

/// An event as axum sends it: `event:` (when it has a name) before `data:`.
fn sse(e: NativeEvent) -> Event {
    let mut out = Event::default();
    if !e.event.is_empty() {
        out = out.event(e.event);
    }
    out.data(e.data)
}
