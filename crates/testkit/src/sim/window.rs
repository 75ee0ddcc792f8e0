//! A simulated model's context window: a request whose prompt (its body's
//! length at four characters a token) does not fit is refused with the
//! API's own "too long" error, as the provider words it, before any model
//! sees it — OpenAI's `context_length_exceeded` (Chat Completions, Azure,
//! Groq; the Responses API's, as a 400 or, when asked, inside a stream
//! after its 200), Anthropic's "prompt is too long" and "input length and
//! `max_tokens` exceed context limit", Gemini's and Vertex's token-count
//! 400, Bedrock's `ValidationException` (InvokeModel's "Input is too long
//! for requested model.", Converse's wrapped Anthropic text).
//!
//! The fit is the provider's: Anthropic's and OpenAI's APIs count the
//! input plus the request's output limit, Gemini's the input alone. Not a
//! broken rule (it is not in `violations()`): the request is counted as
//! received, as the provider bills nothing for it but did see it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

use super::body::response;
use super::{Dialect, Received, SimBody, SimProvider};

/// The window a simulated model has (0: none, anything fits).
#[derive(Default)]
pub(super) struct Window {
    tokens: AtomicU64,
    /// The Responses API answers a streamed request 200 and says "too
    /// long" in the stream.
    in_stream: AtomicBool,
}

// === impl SimProvider ===

impl SimProvider {
    /// Gives the simulated model a context window of `tokens`: a longer
    /// request is refused with the API's own "too long" error.
    pub fn with_context_window(&self, tokens: u64) -> &Self {
        self.shared.window.tokens.store(tokens, Ordering::SeqCst);
        self
    }

    /// The Responses API's other way of refusing: a streamed request too
    /// long for the window gets its 200, `response.created`, then an
    /// `error` event with `context_length_exceeded`.
    pub fn too_long_in_stream(&self) -> &Self {
        self.shared.window.in_stream.store(true, Ordering::SeqCst);
        self
    }
}

// === impl Window ===

impl Window {
    /// The provider's refusal of `req` (as the protocol reads it; `wire`
    /// as it was sent, through any cloud) when it does not fit.
    pub(super) fn refuse(
        &self,
        dialect: Dialect,
        req: &Received,
        wire: &Received,
    ) -> Option<hyper::Response<SimBody>> {
        let window = self.tokens.load(Ordering::SeqCst);
        if window == 0 {
            return None;
        }
        let input = wire.body.len() as u64 / 4;
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let output = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
            .iter()
            .find_map(|k| body[*k].as_u64())
            .unwrap_or(0);
        let counted = match dialect {
            Dialect::GenerateContent => input,
            _ => input + output,
        };
        if counted <= window {
            return None;
        }
        let streamed = body["stream"].as_bool() == Some(true);
        Some(match dialect {
            _ if wire.path.starts_with("/model/") => bedrock(wire, input, output, window),
            Dialect::ChatCompletions => openai(input, output, window),
            Dialect::Responses if streamed && self.in_stream.load(Ordering::SeqCst) => {
                responses_stream()
            }
            Dialect::Responses => json_error(400, &json!({"error": responses_error()})),
            Dialect::Messages | Dialect::Converse => json_error(
                400,
                &json!({
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": anthropic(input, output, window)},
                    "request_id": "req_sim_window",
                }),
            ),
            Dialect::GenerateContent => json_error(
                400,
                &json!({"error": {
                    "code": 400,
                    "message": format!("The input token count ({input}) exceeds the maximum number of tokens allowed ({window})."),
                    "status": "INVALID_ARGUMENT",
                }}),
            ),
        })
    }
}

/// OpenAI's 400, in its two wordings (with and without an output limit).
fn openai(input: u64, output: u64, window: u64) -> hyper::Response<SimBody> {
    let message = if output == 0 {
        format!(
            "This model's maximum context length is {window} tokens. However, your messages \
             resulted in {input} tokens. Please reduce the length of the messages."
        )
    } else {
        format!(
            "This model's maximum context length is {window} tokens. However, you requested {} \
             tokens ({input} in the messages, {output} in the completion). Please reduce the \
             length of the messages or completion.",
            input + output
        )
    };
    json_error(
        400,
        &json!({"error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }}),
    )
}

/// The Responses API's error object.
fn responses_error() -> Value {
    json!({
        "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    })
}

/// A 200 stream that opens and then says "too long".
fn responses_stream() -> hyper::Response<SimBody> {
    let created = json!({
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_sim_window", "object": "response", "status": "in_progress", "output": []},
    });
    let error = json!({"type": "error", "sequence_number": 1, "error": responses_error()});
    let text =
        format!("event: response.created\ndata: {created}\n\nevent: error\ndata: {error}\n\n");
    response(200, &[("content-type", "text/event-stream")], text)
}

/// Anthropic's message: the prompt alone too long, or with `max_tokens`.
fn anthropic(input: u64, output: u64, window: u64) -> String {
    if input > window {
        format!("prompt is too long: {input} tokens > {window} maximum")
    } else {
        format!(
            "input length and `max_tokens` exceed context limit: {input} + {output} > {window}, \
             decrease input length or `max_tokens` and try again"
        )
    }
}

/// Bedrock's `ValidationException`: InvokeModel's own words, or
/// Converse's wrapping of the model's.
fn bedrock(wire: &Received, input: u64, output: u64, window: u64) -> hyper::Response<SimBody> {
    let path = wire.path.split('?').next().unwrap_or_default();
    let message = if path.ends_with("/converse") || path.ends_with("/converse-stream") {
        format!(
            "The model returned the following errors: {}",
            anthropic(input, output, window)
        )
    } else {
        "Input is too long for requested model.".to_owned()
    };
    response(
        400,
        &[
            ("content-type", "application/json"),
            (
                "x-amzn-errortype",
                "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            ),
        ],
        json!({ "message": message }).to_string(),
    )
}

fn json_error(status: u16, body: &Value) -> hyper::Response<SimBody> {
    response(
        status,
        &[("content-type", "application/json")],
        body.to_string(),
    )
}
