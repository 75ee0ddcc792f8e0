//! The OpenAI Chat Completions protocol, spoken by OpenAI, Groq and most
//! self-hosted servers (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! The protocol itself (its bodies both ways, its stream, its error table)
//! is `understudy_wire::chat_completions`; this is its transport: the
//! endpoint, the bearer key, the pooled client. Azure OpenAI speaks it
//! too, at its own [`Endpoint`] with its own key header and error
//! [`Dialect`] (`crate::azure`).

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_settings::ProviderSettings;
use understudy_types::{ChatRequest, Completion, Failure, FailureKind};

use crate::http::{HttpAdapter, Received, Upstream};

use understudy_wire::chat_completions::error::classify_error;
use understudy_wire::chat_completions::request::{sends_as_written, wire_request};
pub(crate) use understudy_wire::chat_completions::response::parse_response;
pub(crate) use understudy_wire::chat_completions::stream::OpenAiStream;

/// An OpenAI-compatible provider.
pub(crate) type OpenAiCompat = HttpAdapter<OpenAiProtocol>;

/// The OpenAI Chat Completions protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct OpenAiProtocol {
    endpoint: Endpoint,
    /// Extra headers and the key (`Authorization`, or Azure's `api-key`),
    /// the latter marked sensitive so that no `Debug` output shows it.
    headers: HeaderMap,
    errors: Dialect,
    /// The provider takes `max_completion_tokens` rather than `max_tokens`
    /// (its `capabilities.max_completion_tokens`), and the models where
    /// that differs (`model_capabilities`).
    max_completion_tokens: bool,
    completion_tokens_models: Vec<(String, bool)>,
    /// Output limits per model, to clamp a client's `max_tokens`.
    limits: crate::OutputLimits,
}

/// Builds the adapter for an OpenAI-compatible provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<OpenAiCompat, String> {
    HttpAdapter::new(settings, OpenAiProtocol::new(settings)?)
}

/// An OpenAI-style provider's request headers: its extra headers, JSON,
/// and its key as `Authorization: Bearer` (marked sensitive); shared by
/// the Chat Completions and the Responses protocols.
pub(crate) fn bearer_headers(settings: &ProviderSettings) -> Result<HeaderMap, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = &settings.api_key {
        headers.insert(
            AUTHORIZATION,
            crate::sensitive(&format!("Bearer {}", key.expose()))?,
        );
    }
    Ok(headers)
}

/// Where an OpenAI-style request goes.
#[derive(Debug)]
pub(crate) enum Endpoint {
    /// One URL whatever the model (the model goes in the body).
    Fixed(reqwest::Url),
    /// Azure's classic deployments: `{resource}/openai/deployments/{model}/
    /// chat/completions?api-version={api_version}`, the model (the
    /// deployment's name) one path segment, percent-encoded.
    Deployment {
        resource: reqwest::Url,
        api_version: String,
    },
}

impl Endpoint {
    /// The URL of a request for `model`.
    pub(crate) fn url(&self, model: &str) -> Result<reqwest::Url, Failure> {
        match self {
            Self::Fixed(url) => Ok(url.clone()),
            Self::Deployment {
                resource,
                api_version,
            } => {
                let mut url = resource.clone();
                url.path_segments_mut()
                    .map_err(|()| {
                        Failure::new(FailureKind::BadRequest, "the base URL cannot take a path")
                    })?
                    .pop_if_empty()
                    .extend(["openai", "deployments", model, "chat", "completions"]);
                url.query_pairs_mut()
                    .append_pair("api-version", api_version);
                Ok(url)
            }
        }
    }
}

/// How an OpenAI-style provider's error answers read: OpenAI's table, or
/// Azure's on top of it (a missing deployment, its 429 hints).
#[derive(Debug)]
pub(crate) enum Dialect {
    OpenAi,
    /// Azure OpenAI, for the provider of this name (named in its warnings).
    Azure(String),
}

impl Dialect {
    pub(crate) fn classify(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        match self {
            Self::OpenAi => classify_error(status, headers, body),
            Self::Azure(provider) => {
                crate::azure::error::classify_error(provider, status, headers, body)
            }
        }
    }
}

impl OpenAiProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        let url = crate::http::endpoint(&format!("{}/chat/completions", settings.base_url))?;
        Ok(Self::with(
            settings,
            Endpoint::Fixed(url),
            bearer_headers(settings)?,
            Dialect::OpenAi,
        ))
    }

    /// The protocol at `endpoint`, with these headers (the key among them)
    /// and error dialect.
    pub(crate) fn with(
        settings: &ProviderSettings,
        endpoint: Endpoint,
        headers: HeaderMap,
        errors: Dialect,
    ) -> Self {
        Self {
            endpoint,
            headers,
            errors,
            max_completion_tokens: settings.capabilities.max_completion_tokens,
            completion_tokens_models: settings
                .model_capabilities
                .iter()
                .filter_map(|(m, o)| Some((m.clone(), o.max_completion_tokens?)))
                .collect(),
            limits: crate::OutputLimits::of(settings),
        }
    }

    /// The body of a non-streamed request the client wrote in this
    /// protocol, for `model` with output limit `limit`: the client's own
    /// bytes but for the model and the limit, where the translation would
    /// send nothing else (`chat_completions::native`); `None` where it
    /// would: a tool-call id or an end user this protocol does not take as
    /// they are, a tool choice without tools (left out), a stream (whose
    /// usage the gateway asks for).
    fn native_body(
        &self,
        model: &str,
        request: &ChatRequest,
        limit: Option<u32>,
        completion_tokens: bool,
        stream: bool,
    ) -> Option<Vec<u8>> {
        let native = self.native(request).filter(|_| !stream)?;
        if !sends_as_written(request) {
            return None;
        }
        understudy_wire::chat_completions::native::prepare(
            &native.body,
            native.spans(),
            model,
            limit,
            completion_tokens,
        )
    }
}

impl Upstream for OpenAiProtocol {
    type Parser = OpenAiStream;
    const NATIVE: Option<understudy_types::Protocol> =
        Some(understudy_types::Protocol::ChatCompletions);

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let limit = self.limits.clamp(model, request.max_tokens);
        let completion_tokens = self
            .completion_tokens_models
            .iter()
            .find(|(m, _)| m == model)
            .map_or(self.max_completion_tokens, |&(_, on)| on);
        if let Some(body) = self.native_body(model, request, limit, completion_tokens, stream) {
            // The client's own body but for the model (and a clamped
            // limit), as the translation would have sent it.
            return Ok(crate::http::raw_post(
                client,
                self.endpoint.url(model)?,
                self.headers.clone(),
                body,
            ));
        }
        let body = wire_request(model, request, limit, completion_tokens, stream);
        crate::http::json_post(client, self.endpoint.url(model)?, &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        if !(200..300).contains(&received.status) {
            return Err(self.classify_error(received.status, &received.headers, &received.body));
        }
        parse_response(received.parts(), model)
    }

    /// A plain answer kept as it came (only what the gateway records read
    /// from it); any other is read in full, for the front end to write.
    fn parse_native(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        if !(200..300).contains(&received.status) {
            return Err(self.classify_error(received.status, &received.headers, &received.body));
        }
        understudy_wire::chat_completions::native::relay(received.parts(), model)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        self.errors.classify(status, headers, body)
    }

    fn parser(&self, model: &str, _native: bool) -> OpenAiStream {
        OpenAiStream::for_model(model)
    }

    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(match (&self.errors, &self.endpoint) {
            (Dialect::OpenAi, Endpoint::Fixed(url)) => crate::probe::models_url(url, 2, model)
                .map(|url| crate::probe::lookup(client, url, &self.headers)),
            (Dialect::Azure(_), endpoint) => endpoint
                .url(model)
                .and_then(|url| crate::probe::azure_empty(client, url, model, &self.headers)),
            (Dialect::OpenAi, Endpoint::Deployment { .. }) => return None,
        })
    }

    fn probe_ready(&self, status: u16) -> bool {
        match self.errors {
            Dialect::Azure(_) => crate::probe::azure_ready(status),
            Dialect::OpenAi => (200..300).contains(&status),
        }
    }
}
