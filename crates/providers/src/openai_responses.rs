//! OpenAI's Responses API (`POST {base_url}/responses`), for
//! OpenAI-compatible providers of `kind = "responses"` (or
//! `responses_api = true`).
//!
//! - A client's own Responses body ([`NativeRequest`] of kind
//!   [`Protocol::Responses`], which the `/v1/responses` route sets) goes as
//!   sent but for `model` (the target's) and `max_output_tokens` (clamped
//!   to the target's limit), spliced in place like `anthropic_native`.
//! - Any other request (translated clients) is built from the neutral
//!   [`ChatRequest`].
//!
//! The protocol itself (both bodies, the answer, the event stream, the
//! reasoning-item tags) is `understudy_wire::responses`; this is its
//! transport: the endpoint, the bearer key, the pooled client.

use reqwest::header::HeaderMap;
use understudy_settings::ProviderSettings;
use understudy_types::{ChatRequest, Completion, Failure, Protocol};
use understudy_wire::responses::native::{prepare_native, target_tag};
use understudy_wire::responses::request::translate;
use understudy_wire::responses::response::parse_response;
use understudy_wire::responses::stream::ResponsesStream;

use crate::http::{HttpAdapter, Received, Upstream};
use crate::openai_compat::Dialect;

/// A provider speaking the Responses API.
pub(crate) type OpenAiResponses = HttpAdapter<ResponsesProtocol>;

/// The Responses API bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct ResponsesProtocol {
    url: reqwest::Url,
    /// Extra headers and the key (`Authorization`, or Azure's `api-key`;
    /// marked sensitive).
    headers: HeaderMap,
    errors: Dialect,
    /// The provider's name: with the model, whose reasoning items are whose.
    provider: String,
    limits: crate::OutputLimits,
    /// The hosted tools a native body may keep here.
    passthrough: understudy_types::passthrough::GatedSet,
}

/// Builds the adapter for a Responses API provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<OpenAiResponses, String> {
    HttpAdapter::new(settings, ResponsesProtocol::new(settings)?)
}

impl ResponsesProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        Ok(Self::with(
            settings,
            crate::http::endpoint(&format!("{}/responses", settings.base_url))?,
            crate::openai_compat::bearer_headers(settings)?,
            Dialect::OpenAi,
        ))
    }

    /// The protocol at `url`, with these headers (the key among them) and
    /// error dialect.
    pub(crate) fn with(
        settings: &ProviderSettings,
        url: reqwest::Url,
        headers: HeaderMap,
        errors: Dialect,
    ) -> Self {
        Self {
            url,
            headers,
            errors,
            provider: settings.name.clone(),
            limits: crate::OutputLimits::of(settings),
            passthrough: settings.capabilities.passthrough,
        }
    }
}

impl Upstream for ResponsesProtocol {
    type Parser = ResponsesStream;
    const NATIVE: Option<Protocol> = Some(Protocol::Responses);

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let tag = target_tag(&self.provider, model);
        let limit = self.limits.limit(model);
        if let Some(native) = self.native(request) {
            if let Some(body) = prepare_native(&native.body, model, &tag, limit, self.passthrough) {
                return Ok(crate::http::raw_post(
                    client,
                    self.url.clone(),
                    self.headers.clone(),
                    body,
                ));
            }
        }
        let body = translate(
            request,
            model,
            self.limits.clamp(model, request.max_tokens),
            stream,
        )?;
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        if !(200..300).contains(&received.status) {
            return Err(self.classify_error(received.status, &received.headers, &received.body));
        }
        let tag = target_tag(&self.provider, model);
        parse_response(received.parts(), model, &tag)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        self.errors.classify(status, headers, body)
    }

    fn parser(&self, model: &str, native: bool) -> ResponsesStream {
        ResponsesStream::new(model, native, target_tag(&self.provider, model))
    }

    /// OpenAI's model lookup; on Azure, the deployment's Chat Completions
    /// with nothing to generate (`crate::probe`): at `/openai/v1/chat/
    /// completions`, or `/openai/deployments/{model}/chat/completions`
    /// with the same `api-version`.
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(match &self.errors {
            Dialect::OpenAi => crate::probe::models_url(&self.url, 1, model)
                .map(|url| crate::probe::lookup(client, url, &self.headers)),
            Dialect::Azure(_) => {
                let chat = if self.url.query().is_some() {
                    crate::probe::sibling(
                        &self.url,
                        1,
                        &["deployments", model, "chat", "completions"],
                    )
                } else {
                    crate::probe::sibling(&self.url, 1, &["chat", "completions"])
                };
                chat.and_then(|url| crate::probe::azure_empty(client, url, model, &self.headers))
            }
        })
    }

    fn probe_ready(&self, status: u16) -> bool {
        match self.errors {
            Dialect::Azure(_) => crate::probe::azure_ready(status),
            Dialect::OpenAi => (200..300).contains(&status),
        }
    }
}
