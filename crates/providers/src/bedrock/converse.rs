//! The models on Bedrock that are not Anthropic's (Llama, Mistral, Nova,
//! …) through Converse and ConverseStream: `POST {base}/model/{id}/converse`
//! and `/converse-stream`, the body `understudy_wire::converse`'s
//! translation of the neutral request (a client's native body never goes
//! as it is: Converse is no client's protocol).
//!
//! Signed as the InvokeModel requests are (the same credentials, SigV4
//! over the exact body bytes), its errors read by the same table
//! (`error.rs`); a stream is AWS's event stream, one event per message
//! named by `:event-type`, and an exception message inside a 200 is the
//! stream's failure (before the first text the run falls back; after it,
//! the client gets the in-band error).

use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use understudy_types::{ChatRequest, Completion, Failure, FailureKind};
use understudy_wire::converse::request::wire_request;
use understudy_wire::converse::response::{WireResponse, completion};
use understudy_wire::converse::stream::ConverseStream;
use understudy_wire::eventstream::{Kind, Message};
use understudy_wire::sse::SseItem;

use super::{Account, error, operation_url};
use crate::http::{Framing, Received, Upstream};

/// Converse on Bedrock, bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct BedrockConverse {
    pub(super) account: Account,
}

impl BedrockConverse {
    /// `…/model/{id}/converse` (or `converse-stream`).
    fn url(&self, model: &str, stream: bool) -> reqwest::Url {
        let op = if stream {
            "converse-stream"
        } else {
            "converse"
        };
        operation_url(&self.account.base, model, op)
    }

    /// The body for `model`: the neutral request translated. A request
    /// written natively with what only its own protocol carries cannot be
    /// served here (the next target may).
    pub(super) fn body(&self, model: &str, request: &ChatRequest) -> Result<String, Failure> {
        if let (Some(_), Some(what)) = (&request.native, request.native_only) {
            return Err(Failure::new(
                FailureKind::Unsupported,
                format!("Bedrock's Converse API cannot carry {what}"),
            ));
        }
        let wire = wire_request(
            request,
            self.account.limits.clamp(model, request.max_tokens),
        )?;
        serde_json::to_string(&wire).map_err(|e| {
            Failure::new(
                FailureKind::BadRequest,
                format!("cannot encode the request: {e}"),
            )
        })
    }
}

impl Upstream for BedrockConverse {
    type Parser = ConverseStream;
    const NATIVE: Option<understudy_types::Protocol> = None;
    const AUTHORIZES: bool = true;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let body = self.body(model, request)?;
        let mut headers = self.account.headers.clone();
        if !stream {
            headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        }
        Ok(crate::http::raw_post(
            client,
            self.url(model, stream),
            headers,
            body,
        ))
    }

    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> understudy_core::BoxFuture<'a, Result<(), Failure>> {
        self.account.authorize(request)
    }

    fn renew<'a>(
        &'a self,
        failure: &'a Failure,
        _: Option<HeaderValue>,
    ) -> understudy_core::BoxFuture<'a, bool> {
        self.account.renew(failure)
    }

    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        self.account.probe_request(client, model)
    }

    fn credentials(&self) -> Option<std::sync::Arc<dyn understudy_core::Credentials>> {
        self.account.credentials()
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        parse_answer(received, model)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        error::classify(status, headers, body)
    }

    fn parser(&self, model: &str, _native: bool) -> ConverseStream {
        ConverseStream::for_model(model)
    }

    fn framing(&self) -> Framing {
        Framing::aws_event_stream(event_item)
    }
}

/// A whole Converse answer (any status) as a completion or a failure.
pub(crate) fn parse_answer(received: &Received, model: &str) -> Result<Completion, Failure> {
    let parsed: WireResponse =
        crate::http::answer_body(received, "a Converse answer", error::classify)?;
    completion(&parsed, model, received.status)
}

/// One event-stream message as the Converse parser's item: an event named
/// by its `:event-type` with its JSON payload, the failure an exception or
/// error message is, nothing for a message of no known type.
pub(crate) fn event_item(message: Message) -> Result<Option<SseItem>, Failure> {
    match message.kind() {
        Kind::Event(name) => {
            let name = name.to_owned();
            let data = String::from_utf8(message.payload).map_err(|_| {
                Failure::new(
                    FailureKind::MalformedResponse,
                    format!("a ConverseStream `{name}` event is not UTF-8"),
                )
            })?;
            Ok(Some(SseItem::Event {
                event: Some(name),
                data,
            }))
        }
        Kind::Unknown => Ok(None),
        Kind::Exception(kind) => Err(error::exception(kind, &message.payload)),
        Kind::Error(code) => Err(Failure::new(
            FailureKind::Unavailable { retry_after: None },
            format!(
                "{code}: {}",
                message.header_str(":error-message").unwrap_or_default()
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
