//! The Responses API's front end: a served answer as a `response` object,
//! its stream as the API's semantic events
//! ([`understudy_wire::responses::events`]), or, from a target that speaks
//! the Responses API itself, its own body and events relayed as sent.
//! A kept response is stored before it goes out, and a stream's final
//! event waits on that, so that a client sending the next turn the moment
//! it has the answer finds it.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use understudy_core::Generation;
use understudy_types::{NativeRequest, Protocol};
use understudy_wire::responses::answer::{OutputItem, output};
use understudy_wire::responses::events::{Ending, Head, ResponseStream};
use understudy_wire::responses::inbound::CreateRequest;
use understudy_wire::responses::native::with_conversation;
use understudy_wire::responses::response::status;

use super::store::{ResponseStore, Stored};
use crate::OpenAiError;
use crate::frames::Keeper;
use crate::front::{Front, native_json};

/// How a response is kept (`store`, the default).
#[derive(Debug)]
pub(crate) struct Save {
    pub store: Arc<ResponseStore>,
    pub owner: String,
    /// Every item before the response's output.
    pub context: Vec<Value>,
    /// Where this request's input starts in `context`.
    pub input_start: usize,
    /// The session the request named, kept with its response.
    pub session: Option<String>,
}

impl Save {
    /// Keeps `response` under its own id (the one the client got, whoever
    /// made it), with the request's context.
    async fn keep(&self, response: Value) {
        let Some(id) = response
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return;
        };
        let stored = Stored {
            owner: self.owner.clone(),
            context: self.context.clone(),
            input_start: self.input_start,
            response,
            session: self.session.clone(),
        };
        self.store.put(&id, stored).await;
    }
}

/// The Responses front end of one request.
pub(crate) struct Responses {
    pub head: Arc<Head>,
    /// `None`: `store: false`.
    pub save: Option<Arc<Save>>,
}

impl Front for Responses {
    type Error = OpenAiError;
    type Encoder = ResponseStream;

    async fn answer(&self, g: &mut Generation) -> Response {
        if let Some(native) = g.native.take() {
            if let Some(save) = &self.save {
                if let Ok(value) = serde_json::from_str::<Value>(&native) {
                    save.keep(value).await;
                }
            }
            return native_json(native);
        }
        let (status, incomplete_details) = status(&g.finish_reason);
        let item_status = if status == "completed" {
            "completed"
        } else {
            "incomplete"
        };
        let items = output(&g.text, &g.tool_calls, &self.head.names, item_status);
        let end = Ending {
            status,
            incomplete_details,
            usage: g.usage,
            error: None,
        };
        let body = self.head.response(&g.model, &items, &end);
        if let Some(save) = &self.save {
            save.keep(body.clone()).await;
        }
        Json(body).into_response()
    }

    /// An incomplete response (`content_filter`) whose message is the
    /// refusal.
    fn refusal(&self, model: &str, refusal: &str) -> Response {
        let items = [OutputItem::refusal(refusal)];
        Json(self.head.response(model, &items, &Ending::content_filter())).into_response()
    }

    fn encoder(&self, model: &str, native: bool) -> ResponseStream {
        ResponseStream::new(Arc::clone(&self.head), model, native)
    }

    fn keeper(&self) -> Option<Keeper> {
        let save = Arc::clone(self.save.as_ref()?);
        Some(Arc::new(move |response| {
            let save = Arc::clone(&save);
            Box::pin(async move { save.keep(response).await })
        }))
    }
}

/// The client's body for Responses API targets, when it can go as sent;
/// `conversation`: the stored items `previous_response_id` names, then
/// this request's input items.
pub(crate) fn native_request(
    raw: Option<Bytes>,
    body: &CreateRequest,
    conversation: [&[Value]; 2],
) -> Option<Arc<NativeRequest>> {
    body.model.as_ref()?;
    let mut text = String::from_utf8(Vec::from(raw?)).ok()?;
    if body.previous_response_id.is_some() {
        text = with_conversation(&text, conversation)?;
    }
    Some(Arc::new(NativeRequest::new(Protocol::Responses, text)))
}
