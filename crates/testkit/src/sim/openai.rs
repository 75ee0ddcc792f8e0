//! The OpenAI Chat Completions wire format, as OpenAI and Groq send it.

use serde_json::json;

use super::{Piece, Received, Refusal, Reply, SimBody, StreamEnd, StreamSpec, ids, response};

/// Renders a reply as an OpenAI-compatible response to `req`.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = prompt_tokens(req);
    let json_ct = [("content-type", "application/json")];
    match reply {
        Reply::Text(text) => {
            let completion_tokens = text.split_whitespace().count();
            let body = json!({
                "id": ids::chat_completion(),
                "object": "chat.completion",
                "created": 1_733_000_000,
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": "stop"
                }],
                "usage": usage(req, prompt_tokens, completion_tokens),
                "system_fingerprint": "fp_sim"
            });
            response(200, &json_ct, body.to_string())
        }
        Reply::Refuse(Refusal::FinishReason) => {
            let body = json!({
                "id": ids::chat_completion(),
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}],
                "usage": usage(req, prompt_tokens, 0)
            });
            response(200, &json_ct, body.to_string())
        }
        Reply::Refuse(Refusal::Message(text)) => {
            let body = json!({
                "id": ids::chat_completion(),
                "object": "chat.completion",
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": text}, "finish_reason": "stop"}],
                "usage": usage(req, prompt_tokens, 12)
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
        // Chat Completions carries no thinking: the answer alone.
        Reply::Thinking { then, .. } => render(*then, req),
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

/// The usage object for `prompt` and `completion` words, with the
/// simulator's token details (`UsageDetail`) and what the prompt cache
/// read: cached tokens count among the prompt tokens and reasoning tokens among the completion tokens, as
/// OpenAI counts them, and both details are always there
/// (openai-python `types/completion_usage.py`).
fn usage(req: &Received, prompt: usize, completion: usize) -> serde_json::Value {
    let detail = req.usage_detail();
    let prompt = prompt as u64 + detail.cache_read;
    let completion = completion as u64 + detail.reasoning;
    // What the prompt cache read is among the prompt's tokens.
    let cached = detail.cache_read + req.cached().read;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": detail.reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0
        }
    })
}

/// The prompt's tokens, as the prompt cache counts them (`cache/prompt.rs`).
fn prompt_tokens(req: &Received) -> usize {
    super::cache::prompt::chat(&req.json()).tokens() as usize
}

/// One chunk of the answer `id` (every chunk of an answer repeats it).
fn chunk(id: &str, model: &str, delta: serde_json::Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1_733_000_000,
        "model": model,
        "system_fingerprint": "fp_sim",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    });
    format!("data: {body}\n\n")
}

/// A streamed answer.
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = prompt_tokens(req);
    let id = ids::chat_completion();
    let mut out = vec![Piece::text(chunk(
        &id,
        &model,
        json!({"role": "assistant", "content": ""}),
        None,
    ))];
    for c in &spec.chunks {
        out.push(Piece::paced(chunk(
            &id,
            &model,
            json!({"content": c}),
            None,
        )));
    }
    let completion_tokens: usize = spec
        .chunks
        .iter()
        .map(|c| c.split_whitespace().count())
        .sum();
    let usage = json!({
        "id": id, "object": "chat.completion.chunk", "created": 1_733_000_000, "model": model,
        "choices": [],
        "usage": usage(req, prompt_tokens, completion_tokens)
    });
    match spec.end {
        StreamEnd::Complete => {
            out.push(Piece::text(chunk(&id, &model, json!({}), Some("stop"))));
            out.push(Piece::text(format!("data: {usage}\n\n")));
            out.push(Piece::text("data: [DONE]\n\n".into()));
        }
        StreamEnd::FinishWithoutDone => {
            out.push(Piece::text(chunk(&id, &model, json!({}), Some("stop"))));
            out.push(Piece::text(format!("data: {usage}\n\n")));
        }
        StreamEnd::EndWithoutMarker => {}
        StreamEnd::Cut => out.push(Piece::Cut),
        StreamEnd::Stall => out.push(Piece::Stall),
        StreamEnd::Malformed => out.push(Piece::text("data: {\"choices\": [{\"delta\": \n\n".into())),
        StreamEnd::ErrorEvent => out.push(Piece::text(
            "data: {\"error\":{\"message\":\"The server had an error processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n".into(),
        )),
        StreamEnd::Refusal => out.push(Piece::text(chunk(
            &id,
            &model,
            json!({}),
            Some("content_filter"),
        ))),
    }
    out
}

/// A refusal at the start of a stream.
pub(super) fn refusal_stream(refusal: &Refusal, req: &Received) -> Vec<Piece> {
    let model = req.json()["model"]
        .as_str()
        .unwrap_or("sim-model")
        .to_owned();
    let id = ids::chat_completion();
    match refusal {
        Refusal::Message(text) => {
            let mut out = vec![Piece::text(chunk(
                &id,
                &model,
                json!({"role": "assistant", "content": null, "refusal": ""}),
                None,
            ))];
            for w in super::split_words(text) {
                out.push(Piece::text(chunk(&id, &model, json!({"refusal": w}), None)));
            }
            out.push(Piece::text(chunk(&id, &model, json!({}), Some("stop"))));
            out.push(Piece::text("data: [DONE]\n\n".into()));
            out
        }
        _ => vec![
            Piece::text(chunk(
                &id,
                &model,
                json!({"role": "assistant", "content": ""}),
                None,
            )),
            Piece::text(chunk(&id, &model, json!({}), Some("content_filter"))),
            Piece::text("data: [DONE]\n\n".into()),
        ],
    }
}

/// The id of `call`: its scripted one, else one minted in OpenAI's style
/// (`call_` and 24 letters and digits, unique in the process).
fn call_id(call: &super::SimToolCall) -> String {
    call.id.clone().unwrap_or_else(ids::openai_call)
}

/// A rough token count for the calls: words of the names and arguments.
fn call_tokens(calls: &[super::SimToolCall]) -> usize {
    calls
        .iter()
        .map(|c| 1 + c.arguments.split([' ', ',', ':']).count())
        .sum()
}

/// A non-streamed answer that calls `calls` (openai-python
/// `chat_completion_message.py`; a recorded body is in its
/// `tests/lib/chat/test_completions.py`): `content: null`, one
/// `tool_calls` entry per call, `finish_reason: "tool_calls"`.
pub(super) fn tool_calls(calls: &[super::SimToolCall], req: &Received) -> hyper::Response<SimBody> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = prompt_tokens(req);
    let completion_tokens = call_tokens(calls);
    let tool_calls: Vec<serde_json::Value> = calls
        .iter()
        .map(|c| {
            json!({
                "id": call_id(c),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}
            })
        })
        .collect();
    let body = json!({
        "id": ids::chat_completion(),
        "object": "chat.completion",
        "created": 1_733_000_000,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": tool_calls,
                "refusal": null
            },
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": usage(req, prompt_tokens, completion_tokens),
        "system_fingerprint": "fp_sim"
    });
    response(
        200,
        &[("content-type", "application/json")],
        body.to_string(),
    )
}

/// Splits `text` into `n` pieces or fewer (never empty ones), on character
/// boundaries.
fn fragments(text: &str, n: usize) -> Vec<&str> {
    let chars = text.chars().count();
    let size = chars.div_ceil(n.max(1)).max(1);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .nth(size)
            .map_or(rest.len(), |(at, _)| at);
        let (piece, tail) = rest.split_at(cut);
        out.push(piece);
        rest = tail;
    }
    out
}

/// A streamed answer that calls `calls`, in OpenAI's order (a recorded
/// stream is openai-python `.inline-snapshot/external/f82268f2fefd….bin`):
/// the role chunk; for each call a first chunk with its `index`, `id`,
/// `type` and `function.name` and empty `arguments`, then its arguments in
/// three fragments; the `finish_reason: "tool_calls"` chunk; the usage
/// chunk when the request asked for it; `data: [DONE]`.
pub(super) fn tool_calls_stream(calls: &[super::SimToolCall], req: &Received) -> Vec<Piece> {
    let asked = req.json();
    let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
    let prompt_tokens = prompt_tokens(req);
    let id = ids::chat_completion();
    let mut out = vec![Piece::text(chunk(
        &id,
        &model,
        json!({"role": "assistant", "content": null}),
        None,
    ))];
    for (index, call) in calls.iter().enumerate() {
        out.push(Piece::paced(chunk(
            &id,
            &model,
            json!({"tool_calls": [{
                "index": index,
                "id": call_id(call),
                "type": "function",
                "function": {"name": call.name, "arguments": ""}
            }]}),
            None,
        )));
        for piece in fragments(&call.arguments, 3) {
            out.push(Piece::paced(chunk(
                &id,
                &model,
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                None,
            )));
        }
    }
    out.push(Piece::text(chunk(
        &id,
        &model,
        json!({}),
        Some("tool_calls"),
    )));
    if asked["stream_options"]["include_usage"] == serde_json::Value::Bool(true) {
        let completion_tokens = call_tokens(calls);
        let usage = json!({
            "id": id, "object": "chat.completion.chunk", "created": 1_733_000_000, "model": model,
            "choices": [],
            "usage": usage(req, prompt_tokens, completion_tokens)
        });
        out.push(Piece::text(format!("data: {usage}\n\n")));
    }
    out.push(Piece::text("data: [DONE]\n\n".into()));
    out
}

#[cfg(test)]
mod tests {
    use super::fragments;

    #[test]
    fn fragments_cover_the_text_on_character_boundaries() {
        let text = r#"{"city":"Zürich","units":"c"}"#;
        let pieces = fragments(text, 3);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces.concat(), text);
        assert_eq!(fragments("{}", 3), vec!["{", "}"]);
        assert!(fragments("", 3).is_empty());
    }
}
