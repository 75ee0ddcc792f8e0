//! Google's Generative Language API (Gemini): `generateContent` and
//! `streamGenerateContent?alt=sse`.
//!
//! Refusals all arrive as HTTP 200: a prompt blocked
//! (`promptFeedback.blockReason`, no candidates), a candidate stopped by a
//! filter (`finishReason` SAFETY, RECITATION, …), or an answer with no usable
//! text at all — which this project counts as a refusal too, with a detail
//! that says which case it was. Gemini reports an invalid key as a 400
//! (`API_KEY_INVALID`), which is `auth`, not `bad_request`.
//!
//! Tools: declarations go out as `functionDeclarations` whose `parameters`
//! are reduced to the OpenAPI subset Gemini's `Schema` accepts (see
//! [`schema`]); calls and results travel as `functionCall` /
//! `functionResponse` parts. Gemini matches a result to its call by name, so
//! the name of each result is recovered from the call with the same id in
//! the history. Answers carry no usable ids, so each call gets a fresh
//! `call_…` id; the finish reason is `STOP` even for calls, so an answer with
//! calls finishes as `tool_calls`. A call's `thoughtSignature` rides in that
//! id and goes back only to this provider and model ([`crate::signature`]).
//!
//! The protocol itself (its bodies both ways, its stream, its error table,
//! its schema reduction, an answer read into a completion) is
//! `understudy_wire::generate_content`; this is its transport: the
//! endpoint, the key header, the pooled client.

use std::borrow::Cow;
use std::sync::Arc;

use understudy_wire::generate_content::{error, request, response, stream};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;
use understudy_settings::ProviderSettings;
use understudy_types::{ChatRequest, Completion, Failure};

use crate::classify;
use crate::http::{HttpAdapter, Received, Upstream};
use crate::signature::Target;

use error::{WireError, classify_error_object, error_of};
use request::wire_request;
use response::WireResponse;
pub(crate) use stream::GeminiStream;

/// A Gemini provider.
pub(crate) type Gemini = HttpAdapter<GeminiProtocol>;

/// The Gemini protocol bound to one provider's settings.
#[derive(Debug)]
pub(crate) struct GeminiProtocol {
    base_url: String,
    headers: HeaderMap,
    /// Output limits per model, to clamp a client's `max_tokens`.
    limits: crate::OutputLimits,
    /// The provider's name: with the model, the target a thought
    /// signature belongs to.
    provider: String,
}

/// Builds the adapter for a Gemini provider.
pub(crate) fn adapter(settings: &ProviderSettings) -> Result<Gemini, String> {
    let mut headers = crate::extra_headers(settings)?;
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = &settings.api_key {
        // In a header, never in the URL, so no logged URL can carry it.
        headers.insert("x-goog-api-key", crate::sensitive(key.expose())?);
    }
    HttpAdapter::new(
        settings,
        GeminiProtocol {
            base_url: settings.base_url.clone(),
            headers,
            limits: crate::OutputLimits::of(settings),
            provider: settings.name.clone(),
        },
    )
}

impl GeminiProtocol {
    /// The protocol at `base_url` (its `models/…` paths below it), with
    /// `headers` and no key of its own: Vertex's publisher endpoint, whose
    /// bearer token its own [`Upstream::authorize`] adds.
    pub(crate) fn at(settings: &ProviderSettings, base_url: String, headers: HeaderMap) -> Self {
        GeminiProtocol {
            base_url,
            headers,
            limits: crate::OutputLimits::of(settings),
            provider: settings.name.clone(),
        }
    }

    /// The protocol without an endpoint or key, for parsing recorded bytes.
    pub(crate) fn bare() -> Self {
        GeminiProtocol {
            base_url: String::new(),
            headers: HeaderMap::new(),
            limits: crate::OutputLimits::none(),
            provider: String::new(),
        }
    }
}

impl GeminiProtocol {
    /// `{base}/models/{model}:{method}`.
    fn url(&self, model: &str, method: &str) -> String {
        format!("{}/models/{model}:{method}", self.base_url)
    }
}

/// `model` without a `models/` prefix, when it can stand in a URL path.
fn valid_model(model: &str) -> Result<&str, Failure> {
    let model = model.strip_prefix("models/").unwrap_or(model);
    crate::http::model_segment(model, "a valid Gemini model name")
}

impl Upstream for GeminiProtocol {
    type Parser = GeminiStream;
    const NATIVE: Option<understudy_types::Protocol> =
        Some(understudy_types::Protocol::GenerateContent);

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let model = valid_model(model)?;
        let method = if stream {
            "streamGenerateContent?alt=sse"
        } else {
            "generateContent"
        };
        if let Some(native) = self.native(request) {
            // The client's own body as it wrote it (thought signatures
            // intact): only the model, which is in the URL, changes (and
            // an unsigned call turn gets Google's dummy signature). A body
            // that needs no change goes from the request's own buffer, not
            // a copy of it.
            let body = match understudy_wire::generate_content::native::prepare(&native.body) {
                Cow::Owned(edited) => reqwest::Body::from(edited),
                Cow::Borrowed(_) => match &request.native {
                    Some(shared) => reqwest::Body::from(bytes::Bytes::from_owner(
                        crate::http::NativeBody(Arc::clone(shared)),
                    )),
                    None => reqwest::Body::from(native.body.clone()),
                },
            };
            return Ok(crate::http::raw_post_unparsed(
                client,
                self.url(model, method),
                self.headers.clone(),
                body,
            ));
        }
        let url = self.url(model, method);
        let target = Target::new(&self.provider, model);
        let body = wire_request(
            request,
            self.limits.clamp(model, request.max_tokens),
            &target,
        )?;
        crate::http::json_post(client, url, &self.headers, &body)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let Received {
            status, headers, ..
        } = received;
        let parsed: WireResponse =
            crate::http::answer_body(received, "a Gemini response", |s, h, b| {
                self.classify_error(s, h, b)
            })?;
        let target = Target::new(&self.provider, model);
        response::completion(&parsed, (*status, headers), model, &target)
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        let value: Option<Value> = serde_json::from_slice(body).ok();
        let error = value
            .as_ref()
            .and_then(error_of)
            .and_then(|e| serde_json::from_value::<WireError>(e.clone()).ok());
        match error {
            Some(error) => classify_error_object(Some(status), headers, &error),
            None => classify::unreadable(status, headers, body),
        }
    }

    fn parser(&self, model: &str, native: bool) -> GeminiStream {
        GeminiStream::for_model(model)
            .with_target(Target::new(&self.provider, model))
            .with_native(native)
    }

    /// `GET {base}/models/{model}`.
    fn probe_request(
        &self,
        client: &reqwest::Client,
        model: &str,
    ) -> Option<Result<reqwest::RequestBuilder, Failure>> {
        let url = valid_model(model).and_then(|model| {
            reqwest::Url::parse(&format!("{}/models/{model}", self.base_url))
                .map_err(|e| Failure::new(understudy_types::FailureKind::BadRequest, e.to_string()))
        });
        Some(url.map(|url| crate::probe::lookup(client, url, &self.headers)))
    }

    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        self.count_request_as(
            client,
            model,
            request,
            understudy_wire::generate_content::native::count_body,
        )
    }
}

impl GeminiProtocol {
    /// A `countTokens` request for `model` with `body` (Vertex's probe).
    pub(crate) fn probe_count(
        &self,
        client: &reqwest::Client,
        model: &str,
        body: String,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        let model = valid_model(model)?;
        Ok(crate::http::raw_post_unparsed(
            client,
            self.url(model, "countTokens"),
            self.headers.clone(),
            body,
        ))
    }

    /// The `countTokens` request for a native body, its body written by
    /// `count_body` (AI Studio's shape, or Vertex's).
    pub(crate) fn count_request_as(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        count_body: fn(&str, &str) -> Option<String>,
    ) -> Option<reqwest::RequestBuilder> {
        let native = self.native(request)?;
        let model = valid_model(model).ok()?;
        let body = count_body(&native.body, model)?;
        Some(crate::http::raw_post_unparsed(
            client,
            self.url(model, "countTokens"),
            self.headers.clone(),
            body,
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn call_ids_are_fresh_and_well_formed() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| understudy_wire::mint_call_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            let hex = id.strip_prefix("call_").unwrap_or_default();
            assert_eq!(hex.len(), 24, "{id}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
    }
}
