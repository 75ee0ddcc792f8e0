//! Understudy's wire adapters: one per protocol, each translating the
//! neutral [`ChatRequest`](understudy_types::ChatRequest) to a provider's
//! HTTP API and classifying every outcome into a
//! [`Failure`](understudy_types::Failure) the decision table understands.
//!
//! # Layout
//! - [`openai_compat`]: OpenAI Chat Completions and compatible servers (Groq, Ollama, vLLM, OpenRouter…).
//! - `openai_responses`: OpenAI's Responses API (`kind = "responses"`), a
//!   client's own Responses body forwarded natively, reasoning items only to
//!   the target that made them.
//! - [`gemini`]: Google's Generative Language API.
//! - [`anthropic`]: Anthropic's Messages API (the protocol is
//!   `understudy_wire::messages`).
//! - `bedrock`: AWS Bedrock (Claude through InvokeModel, every other
//!   model through Converse; SigV4 or a Bedrock API key, the binary event
//!   stream).
//! - `vertex`: Google Vertex AI (Claude through rawPredict, Gemini
//!   through generateContent, a service account's token or a static one).
//! - `azure`: Azure OpenAI (the OpenAI protocols at Azure's URLs, its
//!   `api-key` header or an Entra ID token, its errors).
//! - `by_model`: one provider, two APIs by model (Bedrock's, Vertex's).
//! - `probe`: each protocol's readiness probe, a call that generates
//!   nothing (a model lookup, a free token count).
//! - `error_codes`: the codes an error answer names in any API's shape
//!   (a probe's verdict reads them).
//! - [`classify`]: what HTTP statuses, transport errors and rate-limit hints mean.
//! - [`signature`] (re-exported from `understudy_wire`): Gemini's thought signatures carried in the tool-call ids the gateway mints, replayed only to the target that made them.
//! - [`sigv4`]: AWS Signature Version 4 (Bedrock's auth), checked against AWS's test suite.
//! - [`sse`] (re-exported from `understudy_wire`): the event-stream decoder (it keeps non-SSE lines; see its docs for why).
//! - `http`: the generic adapter over a protocol, the pooled client, bounded reads
//!   (`http/body.rs`), the event stream (`http/stream.rs`).

pub mod anthropic;
mod azure;
mod bedrock;
mod by_model;
pub mod classify;
mod error_codes;
pub mod gemini;
mod http;
pub mod openai_compat;
mod openai_responses;
mod probe;
pub mod sigv4;
mod vertex;

// The protocol-shared pieces that now live in the wire crate, under the
// names this crate's protocols use.
pub(crate) use understudy_wire::OutputLimits;
pub use understudy_wire::{signature, sse};

use http::Upstream as _;

use std::sync::Arc;

use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use understudy_core::{Adapter, AdapterFactory};
use understudy_settings::Platform;
use understudy_settings::{ProviderSettings, Secret};
use understudy_types::{Failure, Protocol, StreamEvent};

/// The factory the engine uses to build adapters for every compiled-in protocol.
#[derive(Debug, Default, Clone, Copy)]
pub struct Providers;

impl Providers {
    /// The factory as the engine takes it.
    pub fn factory() -> Arc<dyn AdapterFactory> {
        Arc::new(Self)
    }
}

impl AdapterFactory for Providers {
    fn supports(&self, kind: Protocol) -> bool {
        // Converse is not a kind of its own, but a Bedrock provider whose
        // model is not Anthropic's has it as its protocol.
        Protocol::KINDS.contains(&kind) || kind == Protocol::Converse
    }

    fn build(&self, settings: &ProviderSettings) -> Result<Arc<dyn Adapter>, String> {
        if let Platform::Bedrock(bedrock) = &settings.platform {
            return Ok(Arc::new(bedrock::adapter(settings, bedrock)?));
        }
        if let Platform::Vertex(vertex) = &settings.platform {
            return Ok(Arc::new(vertex::adapter(settings, vertex)?));
        }
        if let Platform::Azure(azure) = &settings.platform {
            return azure::adapter(settings, azure);
        }
        Ok(match settings.kind {
            Protocol::Responses => Arc::new(openai_responses::adapter(settings)?),
            Protocol::ChatCompletions => Arc::new(openai_compat::adapter(settings)?),
            Protocol::GenerateContent => Arc::new(gemini::adapter(settings)?),
            Protocol::Messages => Arc::new(anthropic::adapter(settings)?),
            // Converse, and a front end's protocol no provider speaks: no
            // adapter (a test builds one for each of `Protocol::KINDS`).
            other => return Err(no_adapter(other)),
        })
    }
}

/// Why no adapter speaks `kind` (one not in [`Protocol::KINDS`]).
fn no_adapter(kind: Protocol) -> String {
    if kind == Protocol::Converse {
        "Converse is spoken only by a `kind = \"bedrock\"` provider".into()
    } else {
        format!("no adapter speaks {kind}")
    }
}

/// The failure [`decode_stream`] and [`decode_response`] give for a
/// protocol no provider speaks.
fn no_decoder(kind: Protocol) -> Failure {
    let message = format!("no provider speaks {kind}: nothing decodes it");
    Failure::new(understudy_types::FailureKind::BadRequest, message)
}

/// Runs `kind`'s stream parser over raw response bytes, as they would arrive
/// in `chunks`, and returns every event up to the terminal one. For tests
/// and fuzzing: the same code path as a live stream, minus the socket.
pub fn decode_stream(
    kind: Protocol,
    model: &str,
    chunks: &[&[u8]],
) -> Vec<Result<StreamEvent, Failure>> {
    match kind {
        Protocol::ChatCompletions => {
            http::parse_stream_bytes(openai_compat::OpenAiStream::for_model(model), chunks)
        }
        Protocol::Responses => http::parse_stream_bytes(
            understudy_wire::responses::stream::ResponsesStream::new(model, false, String::new()),
            chunks,
        ),
        Protocol::GenerateContent => {
            http::parse_stream_bytes(gemini::GeminiStream::for_model(model), chunks)
        }
        Protocol::Messages => {
            http::parse_stream_bytes(anthropic::AnthropicStream::for_model(model), chunks)
        }
        Protocol::Converse => understudy_wire::framing::parse_framed_bytes(
            http::Framing::aws_event_stream(bedrock::converse::event_item),
            understudy_wire::converse::stream::ConverseStream::for_model(model),
            chunks,
        ),
        // A front end's protocol no provider speaks (a test decodes each of
        // `Protocol::KINDS`).
        #[allow(unreachable_patterns, reason = "every protocol is a provider's today")]
        other => vec![Err(no_decoder(other))],
    }
}

/// Classifies a complete non-streamed response of `kind` (any status).
/// For tests and fuzzing.
pub fn decode_response(
    kind: Protocol,
    model: &str,
    status: u16,
    headers: HeaderMap,
    body: &[u8],
) -> Result<understudy_types::Completion, Failure> {
    let received = http::Received {
        status,
        headers,
        body: bytes::Bytes::copy_from_slice(body),
    };
    match kind {
        Protocol::ChatCompletions => openai_compat::parse_response(received.parts(), model),
        Protocol::Responses => {
            understudy_wire::responses::response::parse_response(received.parts(), model, "")
        }
        Protocol::GenerateContent => gemini::GeminiProtocol::bare().parse(&received, model),
        Protocol::Messages => anthropic::AnthropicProtocol::bare().parse(&received, model),
        Protocol::Converse => bedrock::converse::parse_answer(&received, model),
        // A front end's protocol no provider speaks (a test decodes each of
        // `Protocol::KINDS`).
        #[allow(unreachable_patterns, reason = "every protocol is a provider's today")]
        other => Err(no_decoder(other)),
    }
}

/// Installs ring as the process-wide rustls crypto provider. reqwest is
/// built without one (see the workspace manifest); a second call, or a
/// provider the host installed first, leaves things as they are.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The provider's configured extra headers, marked sensitive: they carry
/// secrets as much as the key does (a proxy's token, a project id), so no
/// `Debug` output of a request or a header map shows them.
pub(crate) fn extra_headers(settings: &ProviderSettings) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    // The client's own defaults, held here so that sending does not add
    // them to a copy of this map (growing it on every request); a
    // provider's `headers` may still replace them.
    headers.insert(ACCEPT, HeaderValue::from_static("*/*"));
    headers.insert(USER_AGENT, HeaderValue::from_static(http::AGENT));
    for (name, value) in &settings.headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let mut value = HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

/// A header value holding a secret: marked sensitive, so no `Debug` output
/// of the request shows it.
pub(crate) fn sensitive(value: &str) -> Result<HeaderValue, String> {
    let mut value = HeaderValue::try_from(value)
        .map_err(|_| "the API key contains characters that cannot go in a header".to_owned())?;
    value.set_sensitive(true);
    Ok(value)
}

/// Scrubs the provider's key from a failure's detail: an upstream that
/// echoes the key in its error message must not leak it into our errors,
/// events or logs.
pub(crate) fn redact(mut failure: Failure, key: Option<&Secret>) -> Failure {
    if let Some(key) = key.map(Secret::expose).filter(|k| k.len() >= 4) {
        if failure.detail.contains(key) {
            failure.detail = failure.detail.replace(key, "***");
        }
        // The detail is bounded, so a key can also stand cut short at its end.
        let body = failure.detail.trim_end_matches('…');
        if let Some(start) = (0..body.len().saturating_sub(3))
            .filter(|i| body.is_char_boundary(*i))
            .find(|i| key.starts_with(&body[*i..]))
        {
            failure.detail = format!("{}***…", &body[..start]);
        }
    }
    failure
}

#[cfg(test)]
mod tests {
    use understudy_types::FailureKind;

    use super::*;

    /// A new provider kind gets its arm in `build`, `decode_stream` and
    /// `decode_response`, or this fails (the compiler no longer asks).
    #[test]
    fn every_provider_kind_has_an_adapter_and_decoders() {
        crate::install_tls_provider();
        let settings = |kind: &str| {
            let toml = format!(
                "[providers.p]\nkind = \"{kind}\"\nbase_url = \"http://127.0.0.1:9\"\n\
                 model = \"m\"\napi_key = \"k\"\n"
            );
            let s = understudy_settings::Settings::from_toml_str(&toml, |_| None);
            s.unwrap_or_else(|e| panic!("{kind}: {e}")).providers["p"].clone()
        };
        for kind in Protocol::KINDS {
            assert!(Providers.supports(kind), "{kind}");
            let built = Providers.build(&settings(kind.as_str()));
            assert!(built.is_ok(), "{kind}: {:?}", built.err());
        }
        let undecoded = |f: &Failure| f.detail.contains("nothing decodes");
        for kind in Protocol::KINDS.into_iter().chain([Protocol::Converse]) {
            let streamed = decode_stream(kind, "m", &[]);
            assert!(
                !streamed.iter().any(|e| e.as_ref().is_err_and(undecoded)),
                "{kind}"
            );
            let answered = decode_response(kind, "m", 200, HeaderMap::new(), b"{}");
            assert!(!answered.as_ref().is_err_and(undecoded), "{kind}");
        }
        let mut converse = settings("openai");
        converse.kind = Protocol::Converse;
        let refused = Providers.build(&converse).err();
        let want = "Converse is spoken only by a `kind = \"bedrock\"` provider";
        assert_eq!(refused.as_deref(), Some(want));
    }

    #[test]
    fn redaction() {
        let key = Secret::new("sk-live-0123456789");
        let f = redact(
            Failure::new(FailureKind::Auth, "bad key sk-live-0123456789 given"),
            Some(&key),
        );
        assert_eq!(f.detail, "bad key *** given");
        let cut = redact(
            Failure::new(FailureKind::Auth, "bad key sk-live-01…"),
            Some(&key),
        );
        assert_eq!(cut.detail, "bad key ***…");
        let clean = redact(Failure::new(FailureKind::Auth, "bad key"), Some(&key));
        assert_eq!(clean.detail, "bad key");
    }
}
