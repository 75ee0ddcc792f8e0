//! Anthropic's Messages API as it answers (wire-formats §4): compact JSON,
//! refusals as `stop_reason: "refusal"` on a 200 or as a 400 "Output
//! blocked by content filtering policy", and the named-event stream.

use serde_json::{Value, json};

use super::{Piece, Received, Refusal, Reply, SimBody, StreamEnd, StreamSpec, response};

fn model_of(req: &Received) -> String {
    req.json()["model"]
        .as_str()
        .unwrap_or("claude-sim")
        .to_owned()
}

fn prompt_tokens(req: &Received) -> usize {
    let v = req.json();
    let system = v["system"]
        .as_str()
        .unwrap_or("")
        .split_whitespace()
        .count();
    let messages: usize = v["messages"]
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
        .unwrap_or(0);
    system + messages
}

fn message(
    model: &str,
    content: Value,
    stop: &str,
    details: Value,
    input: usize,
    output: usize,
) -> Value {
    let mut m = json!({
        "id": "msg_sim", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    });
    if !details.is_null() {
        m["stop_details"] = details;
    }
    m
}

fn refusal_details() -> Value {
    json!({"type": "refusal", "category": "general_harms", "explanation": null})
}

/// Renders a non-streamed reply.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let model = model_of(req);
    let input = prompt_tokens(req);
    let json_ct = [("content-type", "application/json")];
    let body = match reply {
        Reply::Text(text) => {
            let n = text.split_whitespace().count();
            message(
                &model,
                json!([{"type": "text", "text": text}]),
                "end_turn",
                Value::Null,
                input,
                n,
            )
        }
        Reply::Refuse(Refusal::FinishReason) => {
            message(&model, json!([]), "refusal", Value::Null, input, 0)
        }
        Reply::Refuse(Refusal::Message(text)) => message(
            &model,
            json!([{"type": "text", "text": text}]),
            "refusal",
            refusal_details(),
            input,
            3,
        ),
        Reply::Refuse(Refusal::PromptBlocked) => {
            message(&model, json!([]), "refusal", refusal_details(), input, 0)
        }
        Reply::Refuse(Refusal::NoText) => {
            message(&model, json!([]), "end_turn", Value::Null, input, 0)
        }
        Reply::Refuse(Refusal::Status400) => {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Output blocked by content filtering policy"}, "request_id": "req_sim"});
            return response(400, &json_ct, body.to_string());
        }
        Reply::Stream(spec) => return render(Reply::Text(spec.chunks.concat()), req),
        Reply::ToolCalls(calls) => return tool_calls(&calls, req),
        Reply::Status {
            status,
            body,
            headers,
        } => {
            let body = if body.is_empty() {
                error_body(status)
            } else {
                body
            };
            let mut all: Vec<(&str, &str)> = vec![("content-type", "application/json")];
            all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            return response(status, &all, body);
        }
        Reply::Garbage(body) => return response(200, &json_ct, body),
        Reply::Delay(..) | Reply::Reset | Reply::Hang | Reply::Truncated => {
            return response(500, &json_ct, error_body(500));
        }
    };
    response(200, &json_ct, body.to_string())
}

/// The error body Anthropic sends for `status`.
fn error_body(status: u16) -> String {
    let (kind, message) = match status {
        400 => (
            "invalid_request_error",
            "messages: at least one message is required",
        ),
        401 => ("authentication_error", "invalid x-api-key"),
        402 => ("billing_error", "Your credit balance is too low."),
        403 => (
            "permission_error",
            "Your API key does not have permission to use the specified resource.",
        ),
        404 => ("not_found_error", "model: not found"),
        413 => (
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        ),
        429 => (
            "rate_limit_error",
            "This request would exceed your account's rate limit. Please try again later.",
        ),
        504 => ("timeout_error", "Request timed out."),
        529 => ("overloaded_error", "Overloaded"),
        _ => ("api_error", "Internal server error"),
    };
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_sim"})
        .to_string()
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn opening(model: &str, input: usize) -> Vec<Piece> {
    let start = message(model, json!([]), "", Value::Null, input, 1);
    let mut start_msg = start.clone();
    start_msg["stop_reason"] = Value::Null;
    vec![
        Piece::text(event(
            "message_start",
            &json!({"type": "message_start", "message": start_msg}),
        )),
        Piece::text(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        )),
        Piece::text(event("ping", &json!({"type": "ping"}))),
    ]
}

fn message_delta(stop: &str, details: Value, output: usize) -> Piece {
    Piece::text(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null, "stop_details": details}, "usage": {"output_tokens": output}}),
    ))
}

fn message_stop() -> Piece {
    Piece::text(event("message_stop", &json!({"type": "message_stop"})))
}

/// A streamed answer (wire-formats §4.3, §4.7).
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    let model = model_of(req);
    let mut out = opening(&model, prompt_tokens(req));
    let mut output = 0;
    for c in &spec.chunks {
        output += c.split_whitespace().count();
        out.push(Piece::paced(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": c}}),
        )));
    }
    let block_stop = Piece::text(event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    match spec.end {
        StreamEnd::Complete | StreamEnd::FinishWithoutDone => {
            out.push(block_stop);
            out.push(message_delta("end_turn", Value::Null, output));
            out.push(message_stop());
        }
        StreamEnd::EndWithoutMarker => {}
        StreamEnd::Cut => out.push(Piece::Cut),
        StreamEnd::Stall => out.push(Piece::Stall),
        StreamEnd::Malformed => out.push(Piece::text("event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"delta\": \n\n".into())),
        StreamEnd::ErrorEvent => out.push(Piece::text(event(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ))),
        StreamEnd::Refusal => {
            out.push(block_stop);
            out.push(message_delta("refusal", refusal_details(), output));
            out.push(message_stop());
        }
    }
    out
}

/// A refusal at the start of a stream: no content block at all, then the
/// refusal (vercel's `anthropic-refusal.chunks.txt` shape).
pub(super) fn refusal_stream(_refusal: &Refusal, req: &Received) -> Vec<Piece> {
    let model = model_of(req);
    let start = message(&model, json!([]), "", Value::Null, prompt_tokens(req), 1);
    let mut start_msg = start.clone();
    start_msg["stop_reason"] = Value::Null;
    vec![
        Piece::text(event(
            "message_start",
            &json!({"type": "message_start", "message": start_msg}),
        )),
        Piece::text(event("ping", &json!({"type": "ping"}))),
        message_delta("refusal", refusal_details(), 0),
        message_stop(),
    ]
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
