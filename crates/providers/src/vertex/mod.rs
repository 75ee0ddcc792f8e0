//! Google Vertex AI (`kind = "vertex"`): one provider, two protocols by
//! model (`understudy_settings::vertex_protocol`).
//!
//! - Claude through `rawPredict` / `streamRawPredict` at
//!   `{base}/v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}`:
//!   Anthropic's Messages body with `anthropic_version:
//!   "vertex-2023-10-16"` and no `model`; `stream` is in the body as the
//!   SDKs send it; a client's betas go in the `anthropic-beta` header,
//!   which Vertex checks. The stream is Anthropic's SSE. Thinking
//!   signatures are tagged as Vertex's (`signed_by`), so they go back only
//!   to Vertex.
//! - Gemini through `generateContent` / `streamGenerateContent?alt=sse`
//!   at `…/publishers/google/models/{m}`: the Gemini adapter's own bodies,
//!   stream and tool handling ([`crate::gemini`]), at Vertex's URL with
//!   Vertex's auth and error table.
//! - Both take `Authorization: Bearer <token>` from one [`auth`] cell the
//!   provider's actor refreshes; Vertex's errors are read by [`error`].

mod auth;
mod error;

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_core::BoxFuture;
use understudy_settings::ProviderSettings;
use understudy_settings::{Vertex, vertex_protocol};
use understudy_types::{ChatRequest, Completion, Failure, FailureKind, Protocol};
use understudy_wire::messages::native::{self, CloudBody};
use understudy_wire::messages::response::{WireResponse, completion};
use understudy_wire::messages::signed_by::{self, SignedStream};
use understudy_wire::messages::{max_tokens, request::wire_request};

use crate::anthropic::AnthropicStream;
use crate::by_model::ByModel;
use crate::gemini::{GeminiProtocol, GeminiStream};
use crate::http::{HttpAdapter, Received, Upstream};

use auth::{GoogleToken, Token};

/// The body's API version on Vertex.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// The platform's name in front of the thinking signatures it writes.
const PLATFORM: &str = "vertex";

/// A Vertex provider: Claude and Gemini, one token.
pub(crate) type VertexAdapter = ByModel<HttpAdapter<VertexClaude>, HttpAdapter<VertexGemini>>;

/// Builds the adapter for a Vertex provider.
pub(crate) fn adapter(
    settings: &ProviderSettings,
    vertex: &Vertex,
) -> Result<VertexAdapter, String> {
    let token = Arc::new(match (&settings.api_key, &vertex.credentials_file) {
        (Some(token), _) => GoogleToken::fixed(token.expose())?,
        (None, Some(file)) => {
            let transport = crate::http::Transport::of(settings)?;
            let client = crate::http::client(&transport, settings.timeouts.connect)?;
            GoogleToken::account(file, client)
        }
        (None, None) => {
            return Err("no Google credentials: set `credentials_file` (or GOOGLE_APPLICATION_CREDENTIALS) to a service account key, or `api_key` to an access token".into());
        }
    });
    crate::http::endpoint(&settings.base_url)?;
    let root = format!(
        "{}/v1/projects/{}/locations/{}/publishers",
        settings.base_url.trim_end_matches('/'),
        vertex.project,
        vertex.region
    );
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let claude = VertexClaude {
        models: format!("{root}/anthropic/models"),
        headers: headers.clone(),
        token: Arc::clone(&token),
        limits: crate::OutputLimits::of(settings),
    };
    let gemini = VertexGemini {
        protocol: GeminiProtocol::at(settings, format!("{root}/google"), headers),
        token: Arc::clone(&token),
    };
    Ok(ByModel {
        first: HttpAdapter::new(settings, claude)?,
        second: HttpAdapter::new(settings, gemini)?,
        takes: |model| vertex_protocol(model) != Protocol::GenerateContent,
    })
}

/// The token as the credentials the provider's actor refreshes (a static
/// one is nobody's to refresh).
fn credentials(token: &Token) -> Option<Arc<dyn understudy_core::Credentials>> {
    understudy_core::Credentials::refresh_in(&**token)
        .map(|_| Arc::clone(token) as Arc<dyn understudy_core::Credentials>)
}

/// `model` when it can stand as one path segment.
fn valid_model(model: &str) -> Result<&str, Failure> {
    crate::http::model_segment(model, "a valid Vertex model id")
}

/// Sets the current access token on `request`.
fn authorize<'a>(
    token: &'a GoogleToken,
    request: &'a mut reqwest::Request,
) -> BoxFuture<'a, Result<(), Failure>> {
    Box::pin(async move {
        let value = token.current().await?;
        request.headers_mut().insert(AUTHORIZATION, value);
        Ok(())
    })
}

/// Vertex refused the token `sent`: a fresh one, once.
fn renew<'a>(
    token: &'a GoogleToken,
    failure: &'a Failure,
    sent: Option<HeaderValue>,
) -> BoxFuture<'a, bool> {
    Box::pin(async move { error::unauthenticated(failure) && token.renew(sent.as_ref()).await })
}

// === Claude ===

/// Claude on Vertex, bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct VertexClaude {
    /// `…/publishers/anthropic/models`.
    models: String,
    headers: HeaderMap,
    token: Token,
    limits: crate::OutputLimits,
}

impl VertexClaude {
    /// The body for `model`: the client's own (native) edited for Vertex,
    /// or the Messages translation of the neutral request.
    fn body(&self, model: &str, request: &ChatRequest, stream: bool) -> Result<String, Failure> {
        let limit = self.limits.limit(model);
        let not_object = || {
            Failure::new(
                FailureKind::BadRequest,
                "the request body is not a JSON object",
            )
        };
        if let Some(native) = self.native(request) {
            if let Some(prepared) = native::prepare_for(&native.body, model, limit, Some(PLATFORM))
            {
                let body = crate::signature::unsigned_json_owned(prepared.body);
                let cloud = CloudBody {
                    version: VERTEX_VERSION,
                    // `stream` is set below to what this request does.
                    drop_stream: true,
                    betas: &[],
                    // Whether Vertex takes the beta behind mid-conversation
                    // system messages is not documented: fold them.
                    fold_system: true,
                };
                let body = native::for_cloud(&body, cloud).ok_or_else(not_object)?;
                return Ok(with_stream(body, stream));
            }
        }
        let max_tokens = max_tokens(request.max_tokens, limit);
        let wire = wire_request(model, request, stream, max_tokens)?;
        let mut body = serde_json::to_value(&wire).map_err(|e| {
            Failure::new(
                FailureKind::BadRequest,
                format!("cannot encode the request: {e}"),
            )
        })?;
        let object = body.as_object_mut().ok_or_else(not_object)?;
        object.remove("model");
        object.insert("anthropic_version".into(), VERTEX_VERSION.into());
        if stream {
            object.insert("stream".into(), true.into());
        } else {
            object.remove("stream");
        }
        Ok(body.to_string())
    }

    /// The provider's headers, and a native client's betas (all but the
    /// mid-conversation ones, whose system messages were folded).
    fn headers(&self, request: &ChatRequest) -> HeaderMap {
        let mut headers = self.headers.clone();
        let Some(native) = self.native(request) else {
            return headers;
        };
        let betas: Vec<&str> = native
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("anthropic-beta"))
            .flat_map(|(_, value)| value.split(','))
            .map(str::trim)
            .filter(|b| !b.is_empty() && !b.starts_with("mid-conversation-"))
            .collect();
        if let Ok(value) = HeaderValue::from_str(&betas.join(",")) {
            if !betas.is_empty() {
                headers.insert("anthropic-beta", value);
            }
        }
        headers
    }
}

/// A JSON object's text with `"stream": true` first when `stream` (the
/// body had none: `for_cloud` dropped it).
fn with_stream(body: String, stream: bool) -> String {
    if !stream {
        return body;
    }
    match body.trim_start().strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => "{\"stream\":true}".to_owned(),
        Some(rest) => format!("{{\"stream\":true,{rest}"),
        None => body,
    }
}

impl Upstream for VertexClaude {
    type Parser = SignedStream;
    const NATIVE: Option<Protocol> = Some(Protocol::Messages);
    const AUTHORIZES: bool = true;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let id = valid_model(model)?;
        let op = if stream {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        let body = self.body(model, request, stream)?;
        Ok(crate::http::raw_post_unparsed(
            client,
            format!("{}/{id}:{op}", self.models),
            self.headers(request),
            body,
        ))
    }

    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        authorize(&self.token, request)
    }

    fn renew<'a>(&'a self, failure: &'a Failure, sent: Option<HeaderValue>) -> BoxFuture<'a, bool> {
        renew(&self.token, failure, sent)
    }

    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        credentials(&self.token)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let parsed: WireResponse =
            crate::http::answer_body(received, "an Anthropic message", error::classify)?;
        let mut completion = completion(&parsed, model, received.status, &received.headers)?;
        completion.native = std::str::from_utf8(&received.body)
            .ok()
            .and_then(|body| signed_by::tag_answer(body, PLATFORM));
        Ok(completion)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        error::classify(status, headers, body)
    }

    fn parser(&self, model: &str, native: bool) -> SignedStream {
        SignedStream::new(
            AnthropicStream::for_model(model).with_native(native),
            PLATFORM,
        )
    }

    /// The project's free token count for `model` (`crate::probe`).
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(valid_model(model).map(|model| {
            crate::http::raw_post_unparsed(
                client,
                format!("{}/count-tokens:rawPredict", self.models),
                self.headers.clone(),
                crate::probe::claude_count_body(model),
            )
        }))
    }
}

// === Gemini ===

/// Gemini on Vertex: the Gemini protocol at Vertex's URL, with Vertex's
/// token and error table.
#[derive(Debug)]
pub(crate) struct VertexGemini {
    protocol: GeminiProtocol,
    token: Token,
}

impl Upstream for VertexGemini {
    type Parser = GeminiStream;
    const NATIVE: Option<Protocol> = Some(Protocol::GenerateContent);
    const AUTHORIZES: bool = true;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        self.protocol.request(client, model, request, stream)
    }

    fn authorize<'a>(
        &'a self,
        request: &'a mut reqwest::Request,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        authorize(&self.token, request)
    }

    fn renew<'a>(&'a self, failure: &'a Failure, sent: Option<HeaderValue>) -> BoxFuture<'a, bool> {
        renew(&self.token, failure, sent)
    }

    fn credentials(&self) -> Option<Arc<dyn understudy_core::Credentials>> {
        credentials(&self.token)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        if !(200..300).contains(&received.status) {
            return Err(error::classify(
                received.status,
                &received.headers,
                &received.body,
            ));
        }
        self.protocol.parse(received, model)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        error::classify(status, headers, body)
    }

    fn parser(&self, model: &str, native: bool) -> GeminiStream {
        self.protocol.parser(model, native)
    }

    /// The project's free token count for `model` (`crate::probe`).
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(
            self.protocol
                .probe_count(client, model, crate::probe::gemini_count_body()),
        )
    }

    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        // Vertex's CountTokensRequest, not AI Studio's.
        self.protocol.count_request_as(
            client,
            model,
            request,
            understudy_wire::generate_content::native::vertex_count_body,
        )
    }
}

#[cfg(test)]
mod tests;
