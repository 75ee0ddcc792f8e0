//! Anthropic's Messages API as it answers: compact JSON,
//! refusals as `stop_reason: "refusal"` on a 200 or as a 400 "Output
//! blocked by content filtering policy", and the named-event stream. Tool
//! calls are `tool_use` blocks with `stop_reason: "tool_use"`; streamed, each
//! is a `tool_use` block whose arguments arrive as `input_json_delta`
//! fragments. A reply may think first: a `thinking` block whose signature
//! the simulator mints and remembers (its rules accept only those back).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::rules::mint_signature;
use super::{
    Piece, Received, Refusal, Reply, SimBody, SimToolCall, StreamEnd, StreamSpec, ids, response,
};

fn model_of(req: &Received) -> String {
    req.json()["model"]
        .as_str()
        .unwrap_or("claude-sim")
        .to_owned()
}

// === prompt cache ===

/// The prompt's tokens, as the prompt cache counts them (`cache/prompt.rs`).
fn prompt_tokens(req: &Received) -> u64 {
    super::cache::prompt::messages(&req.json()).tokens()
}

/// The usage's input and cache counts: `input_tokens` leaves out what the
/// prompt cache read and wrote (`cache_read_input_tokens`,
/// `cache_creation_input_tokens`, the latter split by TTL in
/// `cache_creation`); the simulator's scripted details come on top.
fn input_usage(req: &Received) -> Value {
    let (detail, cached) = (req.usage_detail(), req.cached());
    let input = prompt_tokens(req).saturating_sub(cached.read + cached.written());
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": detail.cache_write + cached.written(),
        "cache_read_input_tokens": detail.cache_read + cached.read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": detail.cache_write + cached.write_short,
            "ephemeral_1h_input_tokens": cached.write_long,
        },
    })
}

// === end prompt cache ===

/// The answer to `req` (a fresh `msg_…` id, the model it asked for), with
/// `output` words of output.
fn message(req: &Received, content: Value, stop: &str, details: Value, output: usize) -> Value {
    let mut m = json!({
        "id": ids::message(), "type": "message", "role": "assistant", "model": model_of(req),
        "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": usage(req, output)
    });
    if !details.is_null() {
        m["stop_details"] = details;
    }
    if stop == "refusal" {
        m["stop_details"] = super::anthropic_credit::refusal_details(req, m["stop_details"].take());
    }
    m
}

/// The usage of an answer to `req` with `output` words of output, with the
/// simulator's token details (`UsageDetail`), as Anthropic counts them
/// (anthropic-sdk-python `types/usage.py`): `input_tokens` leaves out the
/// cache, whose reads and writes are always there beside it (with
/// `cache_creation`'s split by TTL); thinking is
/// counted among `output_tokens` and broken out when there is some. A
/// stream's `message_delta` carries the same counts, cumulative.
fn usage(req: &Received, output: usize) -> Value {
    let detail = req.usage_detail();
    let mut u = input_usage(req);
    u["output_tokens"] = json!(output as u64 + detail.reasoning);
    if detail.reasoning > 0 {
        u["output_tokens_details"] = json!({"thinking_tokens": detail.reasoning});
    }
    if let Some(credit) = super::anthropic_credit::usage(req) {
        u["fallback_credit"] = credit;
    }
    u
}

/// A complete answer with this text.
fn text_message(req: &Received, text: String) -> Value {
    let n = text.split_whitespace().count();
    message(
        req,
        json!([{"type": "text", "text": text}]),
        "end_turn",
        Value::Null,
        n,
    )
}

fn refusal_details() -> Value {
    json!({"type": "refusal", "category": "general_harms", "explanation": null})
}

/// Renders a non-streamed reply.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let json_ct = [("content-type", "application/json")];
    let body = match reply {
        Reply::Text(text) => text_message(req, text),
        Reply::Refuse(Refusal::FinishReason) => message(req, json!([]), "refusal", Value::Null, 0),
        Reply::Refuse(Refusal::Message(text)) => message(
            req,
            json!([{"type": "text", "text": text}]),
            "refusal",
            refusal_details(),
            3,
        ),
        Reply::Refuse(Refusal::PromptBlocked) => {
            message(req, json!([]), "refusal", refusal_details(), 0)
        }
        Reply::Refuse(Refusal::NoText) => message(req, json!([]), "end_turn", Value::Null, 0),
        Reply::Refuse(Refusal::Status400) => {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Output blocked by content filtering policy"}, "request_id": "req_sim"});
            return response(400, &json_ct, body.to_string());
        }
        Reply::Stream(spec) => return render(Reply::Text(spec.chunks.concat()), req),
        Reply::ToolCalls(calls) => return tool_calls(&calls, req),
        Reply::Thinking { thinking, then } => {
            let mut body = match *then {
                Reply::Text(text) => text_message(req, text),
                Reply::Stream(spec) => text_message(req, spec.chunks.concat()),
                Reply::ToolCalls(calls) => tool_calls_message(&calls, req),
                other => return render(other, req),
            };
            let block =
                json!({"type": "thinking", "thinking": thinking, "signature": mint_signature(req)});
            if let Some(content) = body["content"].as_array_mut() {
                content.insert(0, block);
            }
            body
        }
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

/// `message_start`: the message so far, its usage the input's and the
/// first output token's (thinking, if any, is not counted yet).
fn message_start(req: &Received) -> Piece {
    let mut start = message(req, json!([]), "", Value::Null, 1);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    if let Some(u) = start["usage"].as_object_mut() {
        u.remove("output_tokens_details");
    }
    Piece::text(event(
        "message_start",
        &json!({"type": "message_start", "message": start}),
    ))
}

/// The start of a text answer: `message_start`, then (after a thinking
/// block when `thinking` is given) the text block at its index, and a ping;
/// returns the pieces and the text block's index.
fn opening(req: &Received, thinking: Option<&str>) -> (Vec<Piece>, usize) {
    let mut out = vec![message_start(req)];
    let index = match thinking {
        Some(thinking) => {
            out.extend(thinking_block(thinking, req, 0));
            1
        }
        None => 0,
    };
    out.push(Piece::text(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
    )));
    out.push(Piece::text(event("ping", &json!({"type": "ping"}))));
    (out, index)
}

/// A streamed thinking block at `index` (the streaming docs' shape): its
/// start, the thinking in a few `thinking_delta`s, one `signature_delta`
/// with a signature minted for it, its stop.
fn thinking_block(thinking: &str, req: &Received, index: usize) -> Vec<Piece> {
    let mut out = vec![Piece::text(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
    ))];
    for piece in fragments(thinking) {
        out.push(Piece::paced(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": piece}}),
        )));
    }
    out.push(Piece::text(event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": mint_signature(req)}}),
    )));
    out.push(Piece::text(event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )));
    out
}

/// A streamed answer that thinks first, then does `then` (text, a stream
/// or tool calls; anything else is sent as it would be without thinking).
pub(super) fn thinking_stream(thinking: &str, then: Reply, req: &Received) -> Vec<Piece> {
    match then {
        Reply::Text(text) => {
            let spec = StreamSpec {
                chunks: super::split_words(&text),
                ..StreamSpec::new(&[])
            };
            text_stream(&spec, req, Some(thinking))
        }
        Reply::Stream(spec) => text_stream(&spec, req, Some(thinking)),
        Reply::ToolCalls(calls) => calls_stream(&calls, req, Some(thinking)),
        Reply::Refuse(refusal) => refusal_stream(&refusal, req),
        _ => text_stream(&StreamSpec::new(&[]), req, Some(thinking)),
    }
}

/// `message_delta` with the usage of `output` words of output, all its
/// counts cumulative (the streaming docs' shape).
fn message_delta(req: &Received, stop: &str, details: Value, output: usize) -> Piece {
    let details = match stop {
        "refusal" => super::anthropic_credit::refusal_details(req, details),
        _ => details,
    };
    Piece::text(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null, "stop_details": details}, "usage": usage(req, output)}),
    ))
}

fn message_stop() -> Piece {
    Piece::text(event("message_stop", &json!({"type": "message_stop"})))
}

/// A streamed answer.
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    text_stream(spec, req, None)
}

fn text_stream(spec: &StreamSpec, req: &Received, thinking: Option<&str>) -> Vec<Piece> {
    let (mut out, index) = opening(req, thinking);
    let mut output = 0;
    for c in &spec.chunks {
        output += c.split_whitespace().count();
        out.push(Piece::paced(event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": c}}),
        )));
    }
    let block_stop = Piece::text(event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    ));
    match spec.end {
        StreamEnd::Complete | StreamEnd::FinishWithoutDone => {
            out.push(block_stop);
            out.push(message_delta(req, "end_turn", Value::Null, output));
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
            out.push(message_delta(req, "refusal", refusal_details(), output));
            out.push(message_stop());
        }
    }
    out
}

/// A refusal at the start of a stream: no content block at all, then the
/// refusal (vercel's `anthropic-refusal.chunks.txt` shape).
pub(super) fn refusal_stream(_refusal: &Refusal, req: &Received) -> Vec<Piece> {
    vec![
        message_start(req),
        Piece::text(event("ping", &json!({"type": "ping"}))),
        message_delta(req, "refusal", refusal_details(), 0),
        message_stop(),
    ]
}

/// Ids the simulator mints for tool calls scripted without one.
static NEXT_TOOL_ID: AtomicU64 = AtomicU64::new(1);

/// The id of a scripted call: its own, or a fresh `toolu_…` one.
fn tool_id(call: &SimToolCall) -> String {
    call.id.clone().unwrap_or_else(|| {
        let n = NEXT_TOOL_ID.fetch_add(1, Ordering::Relaxed);
        format!("toolu_01Sim{n:0>19}")
    })
}

/// A scripted call's `input`: its arguments object. Arguments that are not
/// a JSON object (which the API never sends) go as a string, so that tests
/// can script output a client cannot use.
fn tool_input(call: &SimToolCall) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(call.arguments.clone()),
    }
}

/// A non-streamed answer that calls `calls`: one `tool_use` block each,
/// `stop_reason: "tool_use"`.
pub(super) fn tool_calls(calls: &[SimToolCall], req: &Received) -> hyper::Response<SimBody> {
    response(
        200,
        &[("content-type", "application/json")],
        tool_calls_message(calls, req).to_string(),
    )
}

/// The message of a non-streamed answer that calls `calls`.
fn tool_calls_message(calls: &[SimToolCall], req: &Received) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|c| {
            json!({"type": "tool_use", "id": tool_id(c), "name": c.name, "input": tool_input(c)})
        })
        .collect();
    let output = calls.iter().map(|c| c.arguments.len() / 4 + 5).sum();
    message(req, Value::Array(content), "tool_use", Value::Null, output)
}

/// `text` in about three pieces, cut at character boundaries.
fn fragments(text: &str) -> Vec<&str> {
    let chars = text.chars().count();
    let size = chars.div_ceil(3).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for (n, (at, _)) in text.char_indices().enumerate() {
        if n > 0 && n % size == 0 {
            out.push(&text[start..at]);
            start = at;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// A streamed answer that calls `calls` (the streaming docs' tool-use
/// shape): per call a `tool_use` block that starts with `input: {}`, an
/// empty `input_json_delta`, then the arguments JSON in several fragments;
/// then `stop_reason: "tool_use"`.
pub(super) fn tool_calls_stream(calls: &[SimToolCall], req: &Received) -> Vec<Piece> {
    calls_stream(calls, req, None)
}

fn calls_stream(calls: &[SimToolCall], req: &Received, thinking: Option<&str>) -> Vec<Piece> {
    let mut out = vec![
        message_start(req),
        Piece::text(event("ping", &json!({"type": "ping"}))),
    ];
    let first = match thinking {
        Some(thinking) => {
            out.extend(thinking_block(thinking, req, 0));
            1
        }
        None => 0,
    };
    let mut output = 0;
    for (index, call) in (first..).zip(calls) {
        out.push(Piece::text(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": tool_id(call), "name": call.name, "input": {}}}),
        )));
        let pieces = std::iter::once("").chain(fragments(&call.arguments));
        for fragment in pieces {
            out.push(Piece::paced(event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
            )));
        }
        out.push(Piece::text(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )));
        output += call.arguments.len() / 4 + 5;
    }
    out.push(message_delta(req, "tool_use", Value::Null, output));
    out.push(message_stop());
    out
}
