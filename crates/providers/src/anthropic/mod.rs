//! Anthropic's Messages API (`claude`).
//!
//! Refusals (wire-formats §4.4): `stop_reason: "refusal"` on a 200, with or
//! without partial text and `stop_details`; and "Output blocked by content
//! filtering policy", which arrives as a 400 `invalid_request_error` (or as
//! an `error` event mid-stream) but is a content filter, not a bad request.
//!
//! Tools, images and JSON output (issue 15), as the API takes them
//! (anthropic-sdk-python `types/`: `tool_param`, `tool_choice_*_param`,
//! `tool_use_block_param`, `tool_result_block_param`, `*_image_source_param`,
//! `metadata_param`, `output_config_param`):
//! - `tools` become `{name, description, input_schema}`; `tool_choice`
//!   becomes `auto` / `none` / `any` / `{"type":"tool","name"}`, with
//!   `disable_parallel_tool_use` for `parallel_tool_calls: false`.
//! - Assistant tool calls become `tool_use` blocks (`input` is the parsed
//!   arguments object); tool messages become `tool_result` blocks in a user
//!   turn. Consecutive turns of one role are merged, and in a user turn the
//!   tool results come first, as the API requires.
//! - Tool-call ids are sent with every character outside `[a-zA-Z0-9_-]`
//!   mapped to `_`, the same way in `tool_use.id` and
//!   `tool_result.tool_use_id`: a history whose ids another provider minted
//!   is accepted, and the ids the client sees never change.
//! - A history with tool calls but no `tools` declares the called tools with
//!   an empty schema and `tool_choice: none`: the API refuses tool blocks
//!   without tool definitions.
//! - `json_schema` output uses structured outputs (`output_config.format`),
//!   with the schema reduced to the subset the API accepts (as the SDK's
//!   `transform_schema` does); `json_object`, and a schema that cannot be
//!   reduced, get an instruction in the system prompt instead.
//! - Answers: `tool_use` blocks become tool calls (arguments: the compact
//!   JSON of `input`), `stop_reason: "tool_use"` is
//!   [`FinishReason::ToolCalls`]; streamed, each `tool_use` block is one
//!   tool call (numbered 0, 1, … in order) and its `input_json_delta`
//!   fragments are its arguments. `thinking` blocks are left out.
//!
//! Layout: `request.rs` builds the Messages body, `schema.rs` reduces a JSON
//! Schema for structured outputs, `response.rs` reads an answer,
//! `stream.rs` parses the event stream, and `error.rs` classifies error
//! objects.

mod error;
mod request;
mod response;
mod schema;
mod stream;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use understudy_core::{ChatRequest, Completion, Failure, FailureKind, ProviderSettings};

pub use crate::anthropic_native::with_model;
use crate::classify;
use crate::http::{HttpAdapter, Protocol, Received};

use error::{WireErrorEnvelope, classify_error_object};
pub use request::JSON_INSTRUCTION;
use request::wire_request;
use response::{WireResponse, WireUsage, finish_reason, refusal_detail, tool_call_of};
pub(crate) use stream::AnthropicStream;

/// Sent when the request sets no `max_tokens` and the model's output limit
/// is unknown (neither configured nor built in): the Messages API requires
/// one, and every current Claude model allows at least this many.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The API version this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

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
    headers.insert(
        "anthropic-version",
        HeaderValue::from_static(ANTHROPIC_VERSION),
    );
    if let Some(key) = &settings.api_key {
        headers.insert("x-api-key", crate::sensitive(key.expose())?);
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
    fn native_headers(&self, native: &understudy_core::NativeRequest) -> HeaderMap {
        let mut headers = self.headers.clone();
        for (name, value) in &native.headers {
            let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) else {
                continue;
            };
            if name.as_str().starts_with("anthropic-") {
                headers.insert(name, value);
            }
        }
        headers
    }
}

impl Protocol for AnthropicProtocol {
    type Parser = AnthropicStream;

    fn request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
        stream: bool,
    ) -> Result<reqwest::RequestBuilder, Failure> {
        if let Some(native) = request
            .native
            .as_deref()
            .filter(|_| self.forwards_native(request))
        {
            let limit = self.limits.limit(model);
            if let Some(prepared) = crate::anthropic_native::prepare(&native.body, model, limit) {
                if prepared.thinking_off {
                    tracing::debug!(
                        model,
                        "thinking off for this request: its final tool-use turn has no signed thinking block (another provider served it)"
                    );
                }
                // The client's own body, byte for byte but for what
                // `prepare` made valid for this target (and Gemini thought
                // signatures cut from tool ids), with its protocol headers
                // (`anthropic-version`, betas) and query (`beta`).
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
        }
        // A client's limit meant for a larger model is clamped; a request
        // with none gets the model's own (the API requires one).
        let max_tokens = match (request.max_tokens, self.limits.limit(model)) {
            (Some(n), Some(limit)) => n.min(limit),
            (Some(n), None) => n,
            (None, Some(limit)) => limit,
            (None, None) => DEFAULT_MAX_TOKENS,
        };
        let body = wire_request(model, request, stream, max_tokens)?;
        crate::http::json_post(client, self.url.clone(), &self.headers, &body)
    }

    fn count_request(
        &self,
        client: &reqwest::Client,
        model: &str,
        request: &ChatRequest,
    ) -> Option<reqwest::RequestBuilder> {
        let native = request
            .native
            .as_deref()
            .filter(|_| self.forwards_native(request))?;
        let body = crate::signature::unsigned_json_owned(
            crate::anthropic_native::prepare(&native.body, model, None)?.body,
        );
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

    fn forwards_native(&self, request: &ChatRequest) -> bool {
        request
            .native
            .as_deref()
            .is_some_and(|n| n.kind == understudy_core::ProviderKind::Anthropic)
    }

    fn parse(&self, received: &Received, model: &str) -> Result<Completion, Failure> {
        let Received {
            status, headers, ..
        } = received;
        let parsed: WireResponse =
            crate::http::answer_body(received, "an Anthropic message", |s, h, b| {
                self.classify_error(s, h, b)
            })?;
        if let Some(error) = &parsed.error {
            return Err(classify_error_object(500, headers, error));
        }
        let blocks = parsed.content.as_deref().unwrap_or_default();
        let text: String = blocks
            .iter()
            .filter(|b| b.kind == "text")
            .filter_map(|b| b.text.as_deref())
            .collect();
        let stop = parsed.stop_reason.as_deref();
        if stop == Some("refusal") {
            return Err(Failure::new(
                FailureKind::ContentFilter,
                refusal_detail(parsed.stop_details.as_ref()),
            )
            .with_status(*status));
        }
        let tool_calls = blocks
            .iter()
            .filter(|b| b.kind == "tool_use")
            .enumerate()
            .map(|(i, b)| tool_call_of(i, b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|f| f.with_status(*status))?;
        if text.trim().is_empty() && tool_calls.is_empty() {
            return Err(Failure::new(
                FailureKind::EmptyResponse,
                format!(
                    "the answer has no text (stop_reason {})",
                    stop.unwrap_or("null")
                ),
            )
            .with_status(*status));
        }
        Ok(Completion {
            native: None,
            tool_calls,
            text,
            model: parsed.model.clone().unwrap_or_else(|| model.to_owned()),
            finish_reason: finish_reason(stop),
            usage: parsed.usage.as_ref().map(WireUsage::to_usage),
        })
    }

    fn classify_error(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        match serde_json::from_slice::<WireErrorEnvelope>(body) {
            Ok(WireErrorEnvelope { error: Some(error) }) => {
                classify_error_object(status, headers, &error)
            }
            _ => classify::unreadable(status, headers, body),
        }
    }

    fn parser(&self, model: &str, native: bool) -> AnthropicStream {
        AnthropicStream::for_model(model).with_native(native)
    }
}
