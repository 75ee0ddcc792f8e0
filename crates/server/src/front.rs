//! The one front-end handler. Every protocol's front end reads its request
//! into the neutral one and supplies its answer's body, its stream's
//! encoder and its error shape ([`Front`]); [`serve`] does the rest the
//! same way for all of them: the engine call, streamed or not, the
//! failover headers (none on a held stream, which starts before anyone
//! served), and a refusal the policy surfaced, as an outcome in the form
//! the provider gave it — a refusal inside a 200 is the API's refusal stop
//! reason, a provider's 400 content-policy error is the API's 400 error
//! (nothing has been sent yet, streamed or not).
//!
//! [`Preamble`] is what every route reads before its body: the request id,
//! the client ([`Client`], set where the key was checked), the override
//! headers.

use std::future::Future;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use understudy_core::{ClientTag, GenerateRequest, Generation, GenerationStream};
use understudy_types::{Attempt, ChatRequest, Error, Protocol, RouteSelector};
use understudy_wire::Encoder;

use crate::auth::{Client, Tenant};
use crate::frames::{Framed, Framing, KeepAlive, Keeper};
use crate::headers::{apply_overrides, failover_headers, model_route, no_cache};
use crate::{ApiError, AppState};

/// What every API route reads before its body. It takes the request's
/// headers rather than copying them (a copy per request shows in the
/// bench's instruction count), so it goes after any extractor that reads
/// headers; the routes' bodies are `Bytes`, which reads none.
#[derive(Debug)]
pub(crate) struct Preamble {
    /// The request's id (`x-request-id`, or one made for it).
    pub id: std::sync::Arc<str>,
    /// The client key's tag; `None` on an open gateway.
    pub client: Option<ClientTag>,
    /// The client key's record, when it has one.
    pub tenant: Option<std::sync::Arc<understudy_settings::ClientRecord>>,
    /// The request's trace, when traces are on.
    pub trace: Option<std::sync::Arc<understudy_core::trace::TraceContext>>,
    pub headers: HeaderMap,
}

impl<S: Send + Sync> FromRequestParts<S> for Preamble {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // The id the request's context runs under (a new one for a
        // request served without it).
        let id =
            understudy_core::logctx::request_id().unwrap_or_else(understudy_core::new_request_id);
        Ok(Self {
            id,
            client: parts.extensions.get::<Client>().map(|c| c.0),
            tenant: parts.extensions.get::<Tenant>().map(|t| t.0.clone()),
            trace: parts
                .extensions
                .get::<std::sync::Arc<understudy_core::trace::TraceContext>>()
                .cloned(),
            headers: std::mem::take(&mut parts.headers),
        })
    }
}

impl Preamble {
    /// The engine request for `chat` through `api`, to the route, pin or
    /// model the client named: this request's id and client, the cache
    /// opt-out (`Cache-Control: no-cache`) and the override headers.
    pub(crate) fn request(
        self,
        chat: ChatRequest,
        model: &str,
        api: Protocol,
    ) -> Result<GenerateRequest, ApiError> {
        self.routed(chat, model_route(model), api)
    }

    /// [`Self::request`] to a route already read.
    pub(crate) fn routed(
        self,
        chat: ChatRequest,
        route: RouteSelector,
        api: Protocol,
    ) -> Result<GenerateRequest, ApiError> {
        let mut request = GenerateRequest::new(chat).route(route);
        request.api = Some(api);
        self.apply(&mut request)?;
        Ok(request)
    }

    /// This request's id, client, cache opt-out and overrides on `request`
    /// (the id moves: a front end that names its answer after it takes it
    /// first).
    pub(crate) fn apply(self, request: &mut GenerateRequest) -> Result<(), ApiError> {
        request.request_id = Some(self.id);
        request.client = self.client;
        request.tenant = self.tenant;
        request.trace = self.trace;
        if no_cache(&self.headers) {
            request.cache = false;
        }
        request.session = crate::headers::session(&self.headers);
        apply_overrides(&self.headers, request)
    }
}

/// What a protocol's front end supplies to [`serve`].
pub(crate) trait Front: Send + Sync + Sized + 'static {
    /// The API's error response.
    type Error: From<ApiError> + IntoResponse;
    /// Writes a committed stream in the API's events.
    type Encoder: Encoder + Unpin;

    /// A served answer: the native body as the provider sent it where there
    /// is one (taken from `g`, not copied: [`native_json`]), else the API's
    /// body for `g`.
    fn answer(&self, g: &mut Generation) -> impl Future<Output = Response> + Send;

    /// A refusal the policy surfaced that the provider gave inside a 200:
    /// the API's refusal answer for `model`, in the provider's words
    /// `refusal`.
    fn refusal(&self, model: &str, refusal: &str) -> Response;

    /// The encoder of a stream from `model`; `native`: the provider's own
    /// events arrive.
    fn encoder(&self, model: &str, native: bool) -> Self::Encoder;

    /// How the stream's frames go out.
    fn framing(&self) -> Framing {
        Framing::Sse(KeepAlive::Comment)
    }

    /// Keeps a held answer before its last frame goes out (the Responses
    /// API's store); none by default.
    fn keeper(&self) -> Option<Keeper> {
        None
    }
}

/// Serves `request` through `front`: the engine's answer, or its
/// committed stream, with the failover headers.
pub(crate) async fn serve<F: Front>(
    state: &AppState,
    front: F,
    request: GenerateRequest,
    streamed: bool,
) -> Result<Response, F::Error> {
    if streamed {
        return match state.engine.generate_stream(request).await {
            Ok(stream) => Ok(streaming(&front, stream)),
            Err(e) => surfaced(e, |model, refusal| {
                let encoder = front.encoder(model, false);
                Framed::refusal(encoder, model, refusal, front.framing()).into_response()
            }),
        };
    }
    match state.engine.generate(request).await {
        Ok(mut g) => {
            let mut response = front.answer(&mut g).await;
            let provider = std::mem::take(&mut g.provider);
            failover_headers(&mut response, provider, g.fell_back, g.content_filtered);
            Ok(response)
        }
        Err(e) => surfaced(e, |model, refusal| front.refusal(model, refusal)),
    }
}

/// A committed stream's response.
fn streaming<F: Front>(front: &F, stream: GenerationStream) -> Response {
    let (provider, fell_back, filtered, held) = (
        stream.provider.clone(),
        stream.fell_back,
        stream.content_filtered,
        stream.held,
    );
    let encoder = front.encoder(&stream.model, stream.native);
    let mut response = Framed::new(stream, encoder, front.framing())
        .keeper(front.keeper())
        .into_response();
    // A held stream starts before anyone served: its final event, not its
    // headers, says who did.
    if !held {
        failover_headers(&mut response, provider, fell_back, filtered);
    }
    response
}

/// The request's error, or, for a refusal the policy surfaced, the
/// refusal in the form the provider gave it: an HTTP error the API's error
/// with its status; a refusal inside a 200 the API's refusal answer
/// (`answer`: the refused model and the provider's words).
fn surfaced<E: From<ApiError>>(
    e: Error,
    answer: impl FnOnce(&str, &str) -> Response,
) -> Result<Response, E> {
    let Error::Refused { attempts } = e else {
        return Err(ApiError::from(e).into());
    };
    let Some(refused) = attempts.last() else {
        return Ok(answer("", ""));
    };
    if let Some(status) = http_refusal(refused) {
        let message = refused
            .detail
            .clone()
            .unwrap_or_else(|| "the provider's content filter refused the request".to_owned());
        return Err(ApiError::Refused {
            status,
            message,
            attempts,
        }
        .into());
    }
    let detail = refused.detail.as_deref().unwrap_or("");
    let mut response = answer(&refused.model, detail);
    failover_headers(&mut response, String::from(&*refused.provider), false, true);
    Ok(response)
}

/// The status of a refusal that came as an HTTP error (a 4xx; anything
/// else stays an answer).
fn http_refusal(refused: &Attempt) -> Option<StatusCode> {
    refused
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .filter(StatusCode::is_client_error)
}

/// A native answer's body, as the provider sent it.
pub(crate) fn native_json(body: String) -> Response {
    json_body(body.into_bytes())
}

/// A JSON answer already written (`application/json`, as axum's `Json`
/// sends it).
pub(crate) fn json_body(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        axum::body::Bytes::from(body),
    )
        .into_response()
}

/// `prefix` then `id`, in one allocation (an answer's id made of the
/// request's; `format!` costs several times more).
pub(crate) fn prefixed(prefix: &str, id: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + id.len());
    out.push_str(prefix);
    out.push_str(id);
    out
}
