//! The OpenAI Chat Completions wire format, as OpenAI and Groq send it
//! (wire-formats §1–2).

use serde_json::json;

use super::{Piece, Received, Refusal, Reply, SimBody, StreamEnd, StreamSpec, response};

/// Renders a reply as an OpenAI-compatible response to `req`.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = words(&asked["messages"]);
    let json_ct = [("content-type", "application/json")];
    match reply {
        Reply::Text(text) => {
            let completion_tokens = text.split_whitespace().count();
            let body = json!({
                "id": "chatcmpl-sim",
                "object": "chat.completion",
                "created": 1_733_000_000,
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": "stop"
                }],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens
                },
                "system_fingerprint": "fp_sim"
            });
            response(200, &json_ct, body.to_string())
        }
        Reply::Refuse(Refusal::FinishReason) => {
            let body = json!({
                "id": "chatcmpl-sim",
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 0, "total_tokens": prompt_tokens}
            });
            response(200, &json_ct, body.to_string())
        }
        Reply::Refuse(Refusal::Message(text)) => {
            let body = json!({
                "id": "chatcmpl-sim",
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12}
            });
            response(200, &json_ct, body.to_string())
        }
        Reply::Refuse(Refusal::NoText) => render(Reply::Text(String::new()), req),
        Reply::Refuse(Refusal::Status400 | Refusal::PromptBlocked) => {
            let body = json!({"error": {
                "message": "The response was filtered due to the prompt triggering the content management policy.",
                "type": null, "param": "prompt", "code": "content_filter", "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation"}
            }});
            response(400, &json_ct, body.to_string())
        }
        Reply::Status {
            status,
            body,
            headers,
        } => {
            let body = if body.is_empty() {
                error_body(status, &model)
            } else {
                body
            };
            let mut all: Vec<(&str, &str)> = vec![("content-type", "application/json")];
            all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            response(status, &all, body)
        }
        Reply::Stream(spec) => render(Reply::Text(spec.chunks.concat()), req),
        Reply::ToolCalls(calls) => tool_calls(&calls, req),
        // Handled by the caller; kept total for safety.
        Reply::Garbage(body) => response(200, &json_ct, body),
        Reply::Delay(..) | Reply::Reset | Reply::Hang | Reply::Truncated => {
            response(500, &json_ct, error_body(500, &model))
        }
    }
}

/// The error body OpenAI or Groq sends for `status`.
fn error_body(status: u16, model: &str) -> String {
    let (message, kind, code) = match status {
        400 => (
            "Invalid request.".to_owned(),
            "invalid_request_error",
            Some("invalid_request"),
        ),
        401 => (
            "Invalid API Key".to_owned(),
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        403 => ("Permission denied.".to_owned(), "permission_error", None),
        404 => (
            format!("The model `{model}` does not exist or you do not have access to it."),
            "invalid_request_error",
            Some("model_not_found"),
        ),
        429 => (
            format!(
                "Rate limit reached for model `{model}` on requests per minute (RPM): Limit 30, Used 30, Requested 1."
            ),
            "requests",
            Some("rate_limit_exceeded"),
        ),
        498 => (
            "`flex` tier capacity exceeded".to_owned(),
            "capacity_exceeded",
            Some("capacity_exceeded"),
        ),
        500 => (
            "The server had an error processing your request. Sorry about that!".to_owned(),
            "server_error",
            None,
        ),
        503 => (
            format!(
                "{model} is currently over capacity. Please try again and back off exponentially."
            ),
            "internal_server_error",
            None,
        ),
        _ => (format!("HTTP {status}"), "server_error", None),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}}).to_string()
}

/// A rough token count: words across every message.
fn words(messages: &serde_json::Value) -> usize {
    messages
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    m["content"]
                        .as_str()
                        .unwrap_or("")
                        .split_whitespace()
                        .count()
                })
                .sum()
        })
        .unwrap_or(0)
}

fn chunk(model: &str, delta: serde_json::Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "chatcmpl-sim",
        "object": "chat.completion.chunk",
        "created": 1_733_000_000,
        "model": model,
        "system_fingerprint": "fp_sim",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    });
    format!("data: {body}\n\n")
}

/// A streamed answer (wire-formats §1.3).
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = words(&asked["messages"]);
    let mut out = vec![Piece::text(chunk(
        &model,
        json!({"role": "assistant", "content": ""}),
        None,
    ))];
    for c in &spec.chunks {
        out.push(Piece::paced(chunk(&model, json!({"content": c}), None)));
    }
    let completion_tokens: usize = spec
        .chunks
        .iter()
        .map(|c| c.split_whitespace().count())
        .sum();
    let usage = json!({
        "id": "chatcmpl-sim", "object": "chat.completion.chunk", "created": 1_733_000_000, "model": model,
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
    });
    match spec.end {
        StreamEnd::Complete => {
            out.push(Piece::text(chunk(&model, json!({}), Some("stop"))));
            out.push(Piece::text(format!("data: {usage}\n\n")));
            out.push(Piece::text("data: [DONE]\n\n".into()));
        }
        StreamEnd::FinishWithoutDone => {
            out.push(Piece::text(chunk(&model, json!({}), Some("stop"))));
            out.push(Piece::text(format!("data: {usage}\n\n")));
        }
        StreamEnd::EndWithoutMarker => {}
        StreamEnd::Cut => out.push(Piece::Cut),
        StreamEnd::Stall => out.push(Piece::Stall),
        StreamEnd::Malformed => out.push(Piece::text("data: {\"choices\": [{\"delta\": \n\n".into())),
        StreamEnd::ErrorEvent => out.push(Piece::text(
            "data: {\"error\":{\"message\":\"The server had an error processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n".into(),
        )),
        StreamEnd::Refusal => out.push(Piece::text(chunk(&model, json!({}), Some("content_filter")))),
    }
    out
}

/// A refusal at the start of a stream.
pub(super) fn refusal_stream(refusal: &Refusal, req: &Received) -> Vec<Piece> {
    let model = req.json()["model"]
        .as_str()
        .unwrap_or("sim-model")
        .to_owned();
    match refusal {
        Refusal::Message(text) => {
            let mut out = vec![Piece::text(chunk(
                &model,
                json!({"role": "assistant", "content": null, "refusal": ""}),
                None,
            ))];
            for w in super::split_words(text) {
                out.push(Piece::text(chunk(&model, json!({"refusal": w}), None)));
            }
            out.push(Piece::text(chunk(&model, json!({}), Some("stop"))));
            out.push(Piece::text("data: [DONE]\n\n".into()));
            out
        }
        _ => vec![
            Piece::text(chunk(
                &model,
                json!({"role": "assistant", "content": ""}),
                None,
            )),
            Piece::text(chunk(&model, json!({}), Some("content_filter"))),
            Piece::text("data: [DONE]\n\n".into()),
        ],
    }
}

// PLACEHOLDER (issue 15, in progress): the protocol's tool-call shapes.
/// A non-streamed answer that calls `calls`.
pub(super) fn tool_calls(calls: &[super::SimToolCall], req: &Received) -> hyper::Response<SimBody> {
    let _ = (calls, req);
    response(501, &[], String::new())
}

/// A streamed answer that calls `calls`.
pub(super) fn tool_calls_stream(calls: &[super::SimToolCall], req: &Received) -> Vec<Piece> {
    let _ = (calls, req);
    Vec::new()
}
