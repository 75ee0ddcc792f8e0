//! The OpenAI Chat Completions protocol, spoken by OpenAI, Groq and most
//! self-hosted servers (Ollama, vLLM, llama.cpp, OpenRouter).
//!
//! The protocol itself (its bodies both ways, its stream, its error table)
//! is `understudy_wire::chat_completions`; this is its transport: the
//! endpoint, the bearer key, the pooled client.

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_core::{ChatRequest, Completion, Failure, ProviderSettings};

use crate::http::{HttpAdapter, Received, Upstream};

use understudy_wire::chat_completions::error::classify_error;
use understudy_wire::chat_completions::request::wire_request;
pub(crate) use understudy_wire::chat_completions::response::parse_response;
pub(crate) use understudy_wire::chat_completions::stream::OpenAiStream;

/// An OpenAI-compatible provider.
pub(crate) type OpenAiCompat = HttpAdapter<OpenAiProtocol>;

/// The OpenAI Chat Completions protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct OpenAiProtocol {
    url: reqwest::Url,
    /// Extra headers and `Authorization`, the latter marked sensitive so
    /// that no `Debug` output shows it.
    headers: HeaderMap,
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

impl OpenAiProtocol {
    pub(crate) fn new(settings: &ProviderSettings) -> Result<Self, String> {
        let headers = bearer_headers(settings)?;
        Ok(Self {
            url: crate::http::endpoint(&format!("{}/chat/completions", settings.base_url))?,
            headers,
            max_completion_tokens: settings.capabilities.max_completion_tokens,
            completion_tokens_models: settings
                .model_capabilities
                .iter()
                .filter_map(|(m, o)| Some((m.clone(), o.max_completion_tokens?)))
                .collect(),
            limits: crate::OutputLimits::of(settings),
        })
    }
}

impl Upstream for OpenAiProtocol {
    type Parser = OpenAiStream;
    const NATIVE: Option<understudy_core::Protocol> = None;

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
        let body = wire_request(model, request, limit, completion_tokens, stream);
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        parse_response(received.parts(), model)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        classify_error(status, headers, body)
    }

    fn parser(&self, model: &str, _native: bool) -> OpenAiStream {
        OpenAiStream::for_model(model)
    }
}
