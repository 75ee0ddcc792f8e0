//! Anthropic's Messages API (`claude`).
//!
//! The protocol itself (its bodies both ways, its stream, its error table,
//! its schema reduction, native-body editing) is
//! `understudy_wire::messages`, with its headers (the version and key
//! headers, which of a client's headers and query go on with a native
//! body: `messages::endpoint`); this is its transport: the endpoint URL,
//! the headers put on a request, the pooled client.

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_core::{CallOptions, CreditUse};
use understudy_settings::ProviderSettings;
use understudy_types::{ChatRequest, Completion, Failure, FailureKind};
use understudy_wire::messages::credit;
use understudy_wire::messages::error::{WireErrorEnvelope, classify_error_object};
use understudy_wire::messages::response::{WireResponse, completion};
use understudy_wire::messages::{max_tokens, native, request::wire_request};

use crate::classify;
use crate::http::{HttpAdapter, Received, Upstream};

pub use understudy_wire::messages::DEFAULT_MAX_TOKENS;
pub use understudy_wire::messages::native::with_model;
pub use understudy_wire::messages::request::JSON_INSTRUCTION;
pub(crate) use understudy_wire::messages::stream::AnthropicStream;

/// The API version this adapter speaks.
pub use understudy_wire::messages::endpoint::API_VERSION as ANTHROPIC_VERSION;
use understudy_wire::messages::endpoint::{BETA, KEY_HEADER, VERSION, forwarded};

/// An Anthropic provider.
pub(crate) type Anthropic = HttpAdapter<AnthropicProtocol>;

/// The Messages protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct AnthropicProtocol {
    url: reqwest::Url,
    headers: HeaderMap,
    /// Output limits per model, to clamp a client's `max_tokens` and to
    /// give a request without one the model's own.
    limits: crate::OutputLimits,
}

/// Builds the adapter for an Anthropic provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<Anthropic, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(VERSION, HeaderValue::from_static(ANTHROPIC_VERSION));
    if let Some(key) = &settings.api_key {
        headers.insert(KEY_HEADER, crate::sensitive(key.expose())?);
    }
    HttpAdapter::new(
        settings,
        AnthropicProtocol {
            url: crate::http::endpoint(&format!("{}/v1/messages", settings.base_url))?,
            headers,
            limits: crate::OutputLimits::of(settings),
        },
    )
}

impl AnthropicProtocol {
    /// The protocol without an endpoint or key, for parsing recorded bytes.
    pub(crate) fn bare() -> Self {
        AnthropicProtocol {
            url: reqwest::Url::parse("http://localhost/v1/messages")
                .expect("a constant URL parses"),
            headers: HeaderMap::new(),
            limits: crate::OutputLimits::none(),
        }
    }
}

impl AnthropicProtocol {
    /// This provider's headers (its key among them) with the client's
    /// `anthropic-*` headers; no other client header is ever forwarded.
    fn native_headers(&self, native: &understudy_types::NativeRequest) -> HeaderMap {
        let mut headers = self.headers.clone();
        for (name, value) in &native.headers {
            let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) else {
                continue;
            };
            if forwarded(name.as_str()) {
                headers.insert(name, value);
            }
        }
        headers
    }
}

impl AnthropicProtocol {
    /// The client's own Messages body fitted to `model`, when the request
    /// carries one the target takes.
    fn prepared<'r>(
        &self,
        model: &str,
        request: &'r ChatRequest,
    ) -> Option<(&'r understudy_types::NativeRequest, native::Prepared)> {
        let native = self.native(request)?;
        let prepared = native::prepare(&native.body, model, self.limits.limit(model))?;
        if prepared.thinking_off {
            tracing::debug!(
                model,
                "thinking off for this request: its final tool-use turn has no signed thinking block (another provider served it)"
            );
        }
        Some((native, prepared))
    }

    /// The request of a call that asks for a fallback credit or redeems
    /// one: as [`Upstream::request`] builds it, with the credit's beta
    /// merged into `anthropic-beta` and, to redeem, the token as the body's
    /// first member (the body otherwise as the refused request's was).
    fn credited(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
        credit: &CreditUse,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        // The client's own body where it is one the target takes, else the
        // translated one: exactly as a call without a credit is made.
        let (mut headers, body) = match self.prepared(model, request) {
            Some((native, prepared)) => (
                self.native_headers(native),
                crate::signature::unsigned_json_owned(prepared.body),
            ),
            None => {
                let max_tokens = max_tokens(request.max_tokens, self.limits.limit(model));
                let body = wire_request(model, request, stream, max_tokens)?;
                let body = serde_json::to_string(&body).map_err(|e| {
                    Failure::new(
                        FailureKind::BadRequest,
                        format!("cannot encode the request: {e}"),
                    )
                })?;
                (self.headers.clone(), body)
            }
        };
        let betas = credit::with_beta(headers.get(BETA).and_then(|v| v.to_str().ok()));
        if let Ok(betas) = HeaderValue::from_str(&betas) {
            headers.insert(BETA, betas);
        }
        let body = match credit {
            CreditUse::Ask => body,
            CreditUse::Redeem(token) => credit::with_token(&body, token).unwrap_or(body),
        };
        let mut url = self.url.clone();
        if let Some(query) = self.native(request).and_then(|n| n.query.as_deref()) {
            url.set_query(Some(query));
        }
        Ok(crate::http::raw_post(client, url, headers, body))
    }
}

impl Upstream for AnthropicProtocol {
    type Parser = AnthropicStream;
    const NATIVE: Option<understudy_types::Protocol> = Some(understudy_types::Protocol::Messages);

    fn request_for(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
        call: &CallOptions,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        match call.credit.as_deref() {
            Some(credit) => self.credited(client, model, request, stream, credit),
            None => self.request(client, model, request, stream),
        }
    }

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        if let Some((native, prepared)) = self.prepared(model, request) {
            // The client's own body, byte for byte but for what `prepare`
            // made valid for this target (and Gemini thought signatures cut
            // from tool ids), with its protocol headers (`anthropic-version`,
            // betas) and query (`beta`).
            let mut url = self.url.clone();
            if let Some(query) = native.query.as_deref() {
                url.set_query(Some(query));
            }
            return Ok(crate::http::raw_post(
                client,
                url,
                self.native_headers(native),
                crate::signature::unsigned_json_owned(prepared.body),
            ));
        }
        let max_tokens = max_tokens(request.max_tokens, self.limits.limit(model));
        let body = wire_request(model, request, stream, max_tokens)?;
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        let native = self.native(request)?;
        let body =
            crate::signature::unsigned_json_owned(native::prepare(&native.body, model, None)?.body);
        let mut url = self.url.clone();
        url.set_path(&format!(
            "{}/count_tokens",
            url.path().trim_end_matches('/')
        ));
        Some(crate::http::raw_post(
            client,
            url,
            self.native_headers(native),
            body,
        ))
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let Received {
            status, headers, ..
        } = received;
        let parsed: WireResponse =
            crate::http::answer_body(received, "an Anthropic message", |s, h, b| {
                self.classify_error(s, h, b)
            })?;
        completion(&parsed, model, *status, headers)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        match serde_json::from_slice::<WireErrorEnvelope>(body) {
            Ok(WireErrorEnvelope {
                error: Some(error), ..
            }) => classify_error_object(status, headers, &error),
            _ => classify::unreadable(status, headers, body),
        }
    }

    fn parser(&self, model: &str, native: bool) -> AnthropicStream {
        AnthropicStream::for_model(model).with_native(native)
    }

    /// `GET {base}/v1/models/{model}` (an alias resolves too).
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        Some(
            crate::probe::sibling(&self.url, 1, &["models", model])
                .map(|url| crate::probe::lookup(client, url, &self.headers)),
        )
    }
}
