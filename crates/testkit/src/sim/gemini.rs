//! Google's Generative Language API as it answers:
//! pretty-printed JSON, refusals as 200s, `alt=sse` streams with CRLF
//! framing and no sentinel, and raw JSON error tails mid-stream. A thinking
//! model ([`SimProvider::thinking`]) signs the first function call of each
//! answer with a `thoughtSignature` it mints and remembers, and its request
//! rules (`rules/gemini.rs`) then want that signature back.

use serde_json::{Value, json};

use super::{
    Piece, Received, Refusal, Reply, SimBody, SimProvider, StreamEnd, StreamSpec, ids, response,
};

impl SimProvider {
    /// Gemini: the simulated model thinks (Gemini 3, 2.5 thinking): the
    /// first function call of each answer carries a `thoughtSignature` this
    /// simulator mints and remembers, and each model turn of a request's
    /// current tool loop must carry its first call's signature back (a
    /// 400 `INVALID_ARGUMENT` otherwise, as Gemini 3 answers). Signatures
    /// are checked either way: one this simulator did not mint (nor
    /// Google's dummy) is "Corrupted".
    pub fn thinking(&self) -> &Self {
        self.shared.rules.set_thinking(true);
        self
    }
}

/// Whether the simulator that received `req` thinks (signs its calls).
fn thinking(req: &Received) -> bool {
    req.shared.as_ref().is_some_and(|s| s.rules.thinking())
}

fn model_of(req: &Received) -> String {
    req.path
        .split("/models/")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("gemini-sim")
        .to_owned()
}

/// The prompt's tokens, as the prompt cache counts them (`cache/prompt.rs`).
fn prompt_tokens(req: &Received) -> usize {
    super::cache::prompt::gemini(&req.json(), &model_of(req)).tokens() as usize
}

/// `usageMetadata` for a prompt of `prompt` words and `candidates` words
/// of answer (none: nothing was generated, and the count is left out),
/// with the simulator's token details (`UsageDetail`) as Gemini reports
/// them (genai-py `GenerateContentResponseUsageMetadata`): the cached
/// content counts among the prompt's tokens and the thoughts apart from
/// the candidates', each detail only when there is some. Gemini reports no
/// cache writes.
fn usage(req: &Received, prompt: usize, candidates: Option<usize>) -> Value {
    let detail = req.usage_detail();
    let prompt = prompt as u64 + detail.cache_read;
    let answer = candidates.map_or(0, |c| c as u64);
    let mut u = json!({"promptTokenCount": prompt,
        "totalTokenCount": prompt + answer + detail.reasoning});
    if let Some(c) = candidates {
        u["candidatesTokenCount"] = json!(c);
    }
    // What the prompt cache read, among the prompt's tokens.
    let cached = detail.cache_read + req.cached().read;
    if cached > 0 {
        u["cachedContentTokenCount"] = json!(cached);
    }
    if detail.reasoning > 0 {
        u["thoughtsTokenCount"] = json!(detail.reasoning);
    }
    u
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Renders a non-streamed reply.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let model = model_of(req);
    let prompt = prompt_tokens(req);
    let json_ct = [("content-type", "application/json; charset=UTF-8")];
    let body = match reply {
        // `countTokens` counts the words of the texts it was given.
        Reply::Text(_) if req.path.contains(":countTokens") => json!({"totalTokens": prompt}),
        Reply::Text(text) => json!({
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage(req, prompt, Some(text.split_whitespace().count())),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        Reply::Refuse(Refusal::FinishReason) => json!({
            "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [
                {"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": true}
            ]}],
            "usageMetadata": usage(req, prompt, None),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        Reply::Refuse(Refusal::Message(text)) => json!({
            "candidates": [{"finishReason": "SAFETY", "finishMessage": text, "index": 0}],
            "usageMetadata": usage(req, prompt, None),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        Reply::Refuse(Refusal::Status400 | Refusal::PromptBlocked) => json!({
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": usage(req, prompt, None),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        Reply::Refuse(Refusal::NoText) => json!({
            "candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage(req, prompt, None),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        Reply::Stream(spec) => return render(Reply::Text(spec.chunks.concat()), req),
        Reply::ToolCalls(calls) => return tool_calls(&calls, req),
        Reply::Thinking { then, .. } => return render(*then, req),
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
            let mut all: Vec<(&str, &str)> =
                vec![("content-type", "application/json; charset=UTF-8")];
            all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            return response(status, &all, body);
        }
        Reply::Garbage(body) => return response(200, &json_ct, body),
        Reply::Delay(..) | Reply::Reset | Reply::Hang | Reply::Truncated => {
            return response(500, &json_ct, error_body(500));
        }
    };
    response(200, &json_ct, pretty(&body))
}

/// The google.rpc.Status body Gemini sends for `status`.
fn error_body(status: u16) -> String {
    let (message, rpc) = match status {
        400 => ("Request contains an invalid argument.", "INVALID_ARGUMENT"),
        401 => (
            "Request had invalid authentication credentials.",
            "UNAUTHENTICATED",
        ),
        403 => ("The caller does not have permission.", "PERMISSION_DENIED"),
        404 => ("models/x is not found for API version v1beta.", "NOT_FOUND"),
        429 => (
            "You exceeded your current quota, please check your plan and billing details.",
            "RESOURCE_EXHAUSTED",
        ),
        500 => (
            "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
            "INTERNAL",
        ),
        503 => (
            "The model is overloaded. Please try again later.",
            "UNAVAILABLE",
        ),
        504 => (
            "Deadline expired before operation could complete.",
            "DEADLINE_EXCEEDED",
        ),
        _ => ("Unknown error.", "UNKNOWN"),
    };
    pretty(&json!({"error": {"code": status, "message": message, "status": rpc}}))
}

fn data(v: &Value) -> String {
    format!("data: {v}\r\n\r\n")
}

/// One chunk of the streamed answer `id` to `req` (every chunk repeats
/// the id, and the usage so far: `so_far` words).
fn text_chunk(req: &Received, id: &str, text: &str, finish: Option<&str>, so_far: usize) -> Value {
    let mut candidate =
        json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    json!({"candidates": [candidate], "usageMetadata": usage(req, prompt_tokens(req), Some(so_far)), "modelVersion": model_of(req), "responseId": id})
}

/// A streamed answer.
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    let model = model_of(req);
    let prompt = prompt_tokens(req);
    let id = ids::gemini_response();
    let mut out = Vec::new();
    let mut so_far = 0;
    for c in &spec.chunks {
        so_far += c.split_whitespace().count();
        out.push(Piece::paced(data(&text_chunk(req, &id, c, None, so_far))));
    }
    match spec.end {
        StreamEnd::Complete | StreamEnd::FinishWithoutDone => {
            out.push(Piece::text(data(&text_chunk(req, &id, "", Some("STOP"), so_far))));
        }
        StreamEnd::EndWithoutMarker => {}
        StreamEnd::Cut => out.push(Piece::Cut),
        StreamEnd::Stall => out.push(Piece::Stall),
        StreamEnd::Malformed => out.push(Piece::text("data: {\"candidates\": [{\"content\": \r\n\r\n".into())),
        // Raw, pretty-printed, no `data:` prefix, then the connection closes.
        StreamEnd::ErrorEvent => out.push(Piece::text(format!(
            "{}\n",
            pretty(&json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}))
        ))),
        StreamEnd::Refusal => out.push(Piece::text(data(&json!({
            "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH", "blocked": true}]}],
            "usageMetadata": usage(req, prompt, Some(so_far)),
            "modelVersion": model,
            "responseId": id
        })))),
    }
    out
}

/// A refusal at the start of a stream: the same single object as the
/// non-streamed answer, as the only event.
pub(super) fn refusal_stream(refusal: &Refusal, req: &Received) -> Vec<Piece> {
    let model = model_of(req);
    let prompt = prompt_tokens(req);
    let body = match refusal {
        Refusal::PromptBlocked | Refusal::Status400 => json!({
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": usage(req, prompt, None), "modelVersion": model, "responseId": ids::gemini_response()
        }),
        Refusal::NoText => json!({
            "candidates": [{"content": {"role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": usage(req, prompt, None), "modelVersion": model, "responseId": ids::gemini_response()
        }),
        Refusal::Message(text) => json!({
            "candidates": [{"finishReason": "SAFETY", "finishMessage": text, "index": 0}], "usageMetadata": usage(req, prompt, None), "modelVersion": model, "responseId": ids::gemini_response()
        }),
        Refusal::FinishReason => json!({
            "candidates": [{"finishReason": "SAFETY", "index": 0}], "usageMetadata": usage(req, prompt, None), "modelVersion": model, "responseId": ids::gemini_response()
        }),
    };
    vec![Piece::text(data(&body))]
}

/// Each scripted call as a `functionCall` part (`args` is an object on the
/// wire), or `None` when some call's arguments are not a JSON object: Gemini
/// cannot send those, it fails the answer with `MALFORMED_FUNCTION_CALL`.
/// A thinking model signs the first call (an opaque base64 blob, minted
/// and remembered; on parallel calls only the first is signed).
fn call_parts(calls: &[super::SimToolCall], req: &Received) -> Option<Vec<Value>> {
    let mut parts = calls
        .iter()
        .map(|c| {
            let args: Value = serde_json::from_str(&c.arguments).ok()?;
            if !args.is_object() {
                return None;
            }
            let mut call = json!({"name": c.name, "args": args});
            // Gemini 3 may send an id; the script decides.
            if let Some(id) = &c.id {
                call["id"] = json!(id);
            }
            Some(json!({"functionCall": call}))
        })
        .collect::<Option<Vec<_>>>()?;
    if let Some(first) = parts.first_mut().filter(|_| thinking(req)) {
        first["thoughtSignature"] = json!(super::rules::mint_signature(req));
    }
    Some(parts)
}

/// Gemini's answer to a function call it could not form.
fn malformed_call(req: &Received) -> Value {
    json!({
        "candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL", "finishMessage": "Malformed function call: the arguments are not a JSON object.", "index": 0}],
        "usageMetadata": usage(req, prompt_tokens(req), None),
        "modelVersion": model_of(req),
        "responseId": ids::gemini_response()
    })
}

fn calls_tokens(calls: &[super::SimToolCall]) -> usize {
    calls.iter().map(|c| 2 + c.arguments.len() / 4).sum()
}

/// A non-streamed answer that calls `calls`: `functionCall` parts, and
/// `finishReason: "STOP"` as for any other answer.
pub(super) fn tool_calls(calls: &[super::SimToolCall], req: &Received) -> hyper::Response<SimBody> {
    let model = model_of(req);
    let prompt = prompt_tokens(req);
    let body = match call_parts(calls, req) {
        Some(parts) => json!({
            "candidates": [{
                "content": {"parts": parts, "role": "model"},
                "finishReason": "STOP",
                "index": 0,
                "finishMessage": "Model generated function call(s)."
            }],
            "usageMetadata": usage(req, prompt, Some(calls_tokens(calls))),
            "modelVersion": model,
            "responseId": ids::gemini_response()
        }),
        None => malformed_call(req),
    };
    response(
        200,
        &[("content-type", "application/json; charset=UTF-8")],
        pretty(&body),
    )
}

/// A streamed answer that calls `calls`. Gemini sends each call whole,
/// never in fragments: the first call in one chunk, the others (parallel
/// calls) together in a second, then an empty text part with
/// `finishReason: "STOP"`.
pub(super) fn tool_calls_stream(calls: &[super::SimToolCall], req: &Received) -> Vec<Piece> {
    let model = model_of(req);
    let prompt = prompt_tokens(req);
    let Some(mut parts) = call_parts(calls, req) else {
        return vec![Piece::text(data(&malformed_call(req)))];
    };
    let tokens = calls_tokens(calls);
    let id = ids::gemini_response();
    let chunk = |parts: Vec<Value>| {
        json!({
            "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
            "usageMetadata": usage(req, prompt, Some(tokens)),
            "modelVersion": model,
            "responseId": id
        })
    };
    let rest = parts.split_off(parts.len().min(1));
    let mut out = Vec::new();
    if !parts.is_empty() {
        out.push(Piece::paced(data(&chunk(parts))));
    }
    if !rest.is_empty() {
        out.push(Piece::paced(data(&chunk(rest))));
    }
    out.push(Piece::text(data(&text_chunk(
        req,
        &id,
        "",
        Some("STOP"),
        tokens,
    ))));
    out
}
