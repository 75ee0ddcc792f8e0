//! The Responses API spoken natively: the client's body handed to the
//! engine as a [`NativeRequest`] for targets that speak the Responses API
//! themselves (`responses_api = true`), and what such a target answered
//! relayed as it sent it — the `response` object, or its events
//! ([`understudy_wire::responses::relay`]), kept in the store first.
//! Targets of other protocols get the translation.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::http::{HeaderValue, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use understudy_core::{Generation, GenerationStream, NativeRequest, ProviderKind};
use understudy_wire::responses::inbound::CreateRequest;
use understudy_wire::responses::native::with_conversation;
use understudy_wire::responses::relay::Relay;

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
    Some(Arc::new(NativeRequest {
        fixed_sampling: false,
        softened: None,
        kind: ProviderKind::Openai,
        body: text,
        headers: Vec::new(),
        query: None,
    }))
}

/// Keeps a natively served `response` under its own id (the one the
/// client got), with the request's context.
async fn keep(head: &Head, response: &Value) {
    let (Some(save), Some(id)) = (&head.save, response.get("id").and_then(Value::as_str)) else {
        return;
    };
    save.store.put(id, head.stored(save, response)).await;
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
    relay: Relay,
    saving: Option<(Saving, understudy_wire::responses::events::Event)>,
}

impl NativeEvents {
    pub(crate) fn new(inner: GenerationStream, head: Arc<Head>) -> Self {
        Self {
            inner,
            head,
            relay: Relay::default(),
            saving: None,
        }
    }
}

impl futures_core::Stream for NativeEvents {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            let (pending, finished) = (&mut this.relay.pending, this.relay.finished);
            if let Some(owed) = owed(pending, &mut this.saving, finished, cx) {
                return owed;
            }
            let (id, created_at) = (this.head.id.as_str(), this.head.created_at);
            match this.inner.poll_next(cx) {
                Poll::Ready(Some(item)) => this.relay.push(item, id, created_at),
                Poll::Ready(None) => this.relay.fail(
                    "stream_interrupted: the stream ended without a result",
                    id,
                    created_at,
                ),
                Poll::Pending => return Poll::Pending,
            }
            if let Some((event, response)) = this.relay.held.take() {
                let head = Arc::clone(&this.head);
                let saving = async move { keep(&head, &response).await };
                this.saving = Some((Box::pin(saving), event));
            }
        }
    }
}
