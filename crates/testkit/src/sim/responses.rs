//! OpenAI's Responses API (`POST /v1/responses`; the
//! openai SDK's `types/responses/`): a `response` object, or the semantic
//! event stream (`response.created`, `response.in_progress`, per output
//! item `response.output_item.added` … `response.output_item.done`,
//! `response.completed`), each event with its `sequence_number`.
//!
//! [`Reply::Thinking`] answers with a `reasoning` item first: an id
//! (`rs_…`) and, when the request's `include` asks for
//! `reasoning.encrypted_content`, an encrypted content this simulator mints
//! and remembers — its rules then accept that item back only as it was
//! handed out (see `rules/responses.rs`).

use serde_json::{Value, json};

use super::{
    Piece, Received, Refusal, Reply, SimBody, SimToolCall, StreamEnd, StreamSpec, UsageDetail,
};
use super::{response, split_words};

/// What the simulated model produced.
#[derive(Default)]
struct Output {
    reasoning: Option<String>,
    text: Option<String>,
    calls: Vec<SimToolCall>,
}

/// The ids and texts of one answer, fixed before it is rendered.
struct Answer {
    id: String,
    model: String,
    items: Vec<Value>,
    input_tokens: usize,
    output_tokens: usize,
    /// The simulator's token details (`UsageDetail`).
    detail: UsageDetail,
    /// What the prompt cache read (among `input_tokens`).
    cache_read: u64,
}

/// A fresh id with `prefix` (unique in the process).
fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mixed = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (n >> 7);
    format!("{prefix}_{mixed:016x}{n:08x}")
}

impl Answer {
    fn of(out: Output, req: &Received) -> Self {
        let asked = req.json();
        let model = asked["model"].as_str().unwrap_or("sim-model").to_owned();
        let mut items = Vec::new();
        let mut output_tokens = 0;
        if let Some(thinking) = out.reasoning {
            let id = new_id("rs");
            let wants_sealed = asked["include"]
                .as_array()
                .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
            let mut item = json!({
                "id": id, "type": "reasoning",
                "summary": [{"type": "summary_text", "text": thinking}],
            });
            if let Some(shared) = &req.shared {
                shared.rules.remember_signature(format!("id:{id}"));
            }
            if wants_sealed {
                let sealed = format!("{id}.{}", super::rules::mint_signature(req));
                if let Some(shared) = &req.shared {
                    shared.rules.remember_signature(sealed.clone());
                }
                item["encrypted_content"] = json!(sealed);
            }
            items.push(item);
        }
        if let Some(text) = out.text {
            output_tokens += text.split_whitespace().count();
            items.push(json!({
                "id": new_id("msg"), "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }));
        }
        for call in out.calls {
            output_tokens += 8;
            let call_id = call.id.clone().unwrap_or_else(|| new_id("call"));
            items.push(json!({
                "id": new_id("fc"), "type": "function_call", "status": "completed",
                "call_id": call_id, "name": call.name, "arguments": call.arguments,
            }));
        }
        // The prompt's tokens as the prompt cache counts them, and what
        // it read among them (`cache/prompt.rs`).
        let input_tokens = super::cache::prompt::responses(&asked).tokens() as usize;
        Self {
            id: new_id("resp"),
            model,
            items,
            input_tokens,
            output_tokens,
            detail: req.usage_detail(),
            cache_read: req.cached().read,
        }
    }

    /// The `response` object with `status` and these `output` items. Its
    /// usage counts the cached tokens among the input tokens and the
    /// reasoning tokens among the output tokens, as OpenAI does
    /// (openai-python `types/responses/response_usage.py`).
    fn object(&self, status: &str, output: &[Value], incomplete: Option<&str>) -> Value {
        let input = self.input_tokens as u64 + self.detail.cache_read;
        let output_tokens = self.output_tokens as u64 + self.detail.reasoning;
        json!({
            "id": self.id, "object": "response", "created_at": 1_733_000_000,
            "status": status, "error": null,
            "incomplete_details": incomplete.map(|r| json!({"reason": r})),
            "model": self.model, "output": output, "parallel_tool_calls": true,
            "tool_choice": "auto", "tools": [],
            "usage": {
                "input_tokens": input, "output_tokens": output_tokens,
                "total_tokens": input + output_tokens,
                "input_tokens_details": {"cached_tokens": self.detail.cache_read + self.cache_read},
                "output_tokens_details": {"reasoning_tokens": self.detail.reasoning},
            },
        })
    }
}

/// Renders a reply as a (non-streamed) Responses API answer.
pub(super) fn render(reply: Reply, req: &Received) -> hyper::Response<SimBody> {
    let json_ct = [("content-type", "application/json")];
    let out = match reply {
        Reply::Text(text) => Output {
            text: Some(text),
            ..Output::default()
        },
        Reply::Stream(spec) => Output {
            text: Some(spec.chunks.concat()),
            ..Output::default()
        },
        Reply::ToolCalls(calls) => Output {
            calls,
            ..Output::default()
        },
        Reply::Thinking { thinking, then } => {
            let mut out = output_of(*then);
            out.reasoning = Some(thinking);
            out
        }
        Reply::Refuse(Refusal::Status400 | Refusal::PromptBlocked) => {
            let body = json!({"error": {
                "message": "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
                "type": "invalid_request_error", "param": null, "code": "invalid_prompt",
            }});
            return response(400, &json_ct, body.to_string());
        }
        Reply::Refuse(_) => {
            let answer = Answer::of(Output::default(), req);
            let body = answer.object("incomplete", &[], Some("content_filter"));
            return response(200, &json_ct, body.to_string());
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
    let answer = Answer::of(out, req);
    let body = answer.object("completed", &answer.items, None);
    response(200, &json_ct, body.to_string())
}

/// What a reply that follows thinking produces.
fn output_of(reply: Reply) -> Output {
    match reply {
        Reply::Text(text) => Output {
            text: Some(text),
            ..Output::default()
        },
        Reply::Stream(spec) => Output {
            text: Some(spec.chunks.concat()),
            ..Output::default()
        },
        Reply::ToolCalls(calls) => Output {
            calls,
            ..Output::default()
        },
        _ => Output::default(),
    }
}

/// The error body OpenAI sends for `status`.
fn error_body(status: u16) -> String {
    let (message, kind, code) = match status {
        400 => (
            "Invalid request.",
            "invalid_request_error",
            Some("invalid_request"),
        ),
        401 => (
            "Invalid API key.",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        429 => (
            "Rate limit reached.",
            "requests",
            Some("rate_limit_exceeded"),
        ),
        _ => (
            "The server had an error processing your request. Sorry about that!",
            "server_error",
            None,
        ),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}}).to_string()
}

/// The events of one streamed answer, numbered.
struct Events {
    seq: u64,
    pieces: Vec<Piece>,
}

impl Events {
    fn push(&mut self, kind: &str, mut data: Value, paced: bool) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        let text = format!("event: {kind}\ndata: {data}\n\n");
        self.pieces.push(if paced {
            Piece::paced(text)
        } else {
            Piece::text(text)
        });
    }

    /// One output item's events, its text in `chunks` (messages).
    fn item(&mut self, i: usize, item: &Value, chunks: &[String]) {
        self.push(
            "response.output_item.added",
            json!({"output_index": i, "item": in_progress(item)}),
            false,
        );
        let at = json!({"item_id": item["id"], "output_index": i});
        for (kind, extra, paced) in inner_events(item, chunks) {
            let mut data = at.clone();
            if let (Some(o), Value::Object(e)) = (data.as_object_mut(), extra) {
                o.extend(e);
            }
            self.push(kind, data, paced);
        }
        self.push(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
            false,
        );
    }
}

/// `item` as `response.output_item.added` announces it: in progress, its
/// content still empty.
fn in_progress(item: &Value) -> Value {
    let mut added = item.clone();
    match item["type"].as_str() {
        Some("message") => {
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
        }
        Some("function_call") => {
            added["status"] = json!("in_progress");
            added["arguments"] = json!("");
        }
        Some("reasoning") => added["summary"] = json!([]),
        _ => {}
    }
    added
}

/// One event inside an item: its type, its own fields, whether paced.
type Inner = (&'static str, Value, bool);

/// The events between an item's `added` and `done`.
fn inner_events(item: &Value, chunks: &[String]) -> Vec<Inner> {
    match item["type"].as_str() {
        Some("message") => {
            let part =
                json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            let mut out = vec![(
                "response.content_part.added",
                json!({"content_index": 0, "part": part}),
                false,
            )];
            for c in chunks {
                let delta = json!({"content_index": 0, "delta": c, "logprobs": []});
                out.push(("response.output_text.delta", delta, true));
            }
            let text = &item["content"][0]["text"];
            let done = json!({"content_index": 0, "text": text, "logprobs": []});
            out.push(("response.output_text.done", done, false));
            let part = json!({"content_index": 0, "part": item["content"][0]});
            out.push(("response.content_part.done", part, false));
            out
        }
        Some("function_call") => {
            let args = item["arguments"].as_str().unwrap_or_default();
            let cut = (args.len() / 2..=args.len())
                .find(|&k| args.is_char_boundary(k))
                .unwrap_or(0);
            let mut out: Vec<Inner> = [&args[..cut], &args[cut..]]
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(|p| {
                    (
                        "response.function_call_arguments.delta",
                        json!({"delta": p}),
                        true,
                    )
                })
                .collect();
            let done = json!({"arguments": args, "name": item["name"]});
            out.push(("response.function_call_arguments.done", done, false));
            out
        }
        Some("reasoning") => {
            let text = &item["summary"][0]["text"];
            let empty = json!({"type": "summary_text", "text": ""});
            vec![
                (
                    "response.reasoning_summary_part.added",
                    json!({"summary_index": 0, "part": empty}),
                    false,
                ),
                (
                    "response.reasoning_summary_text.delta",
                    json!({"summary_index": 0, "delta": text}),
                    true,
                ),
                (
                    "response.reasoning_summary_text.done",
                    json!({"summary_index": 0, "text": text}),
                    false,
                ),
                (
                    "response.reasoning_summary_part.done",
                    json!({"summary_index": 0, "part": item["summary"][0]}),
                    false,
                ),
            ]
        }
        _ => Vec::new(),
    }
}

/// The streamed events of `out`, ending as `end` says; `chunks` are the
/// message's text deltas.
fn events(out: Output, chunks: &[String], end: StreamEnd, req: &Received) -> Vec<Piece> {
    let answer = Answer::of(out, req);
    let mut ev = Events {
        seq: 0,
        pieces: Vec::new(),
    };
    let start = answer.object("in_progress", &[], None);
    ev.push("response.created", json!({"response": start}), false);
    ev.push("response.in_progress", json!({"response": start}), false);
    for (i, item) in answer.items.iter().enumerate() {
        ev.item(i, item, chunks);
    }
    match end {
        StreamEnd::Complete | StreamEnd::FinishWithoutDone => {
            let done = answer.object("completed", &answer.items, None);
            ev.push("response.completed", json!({"response": done}), false);
        }
        StreamEnd::EndWithoutMarker => {}
        StreamEnd::Cut => ev.pieces.push(Piece::Cut),
        StreamEnd::Stall => ev.pieces.push(Piece::Stall),
        StreamEnd::Malformed => ev.pieces.push(Piece::text("data: {\"type\": \n\n".into())),
        StreamEnd::ErrorEvent => ev.push(
            "error",
            json!({"code": "server_error", "message": "The server had an error processing your request.", "param": null}),
            false,
        ),
        StreamEnd::Refusal => {
            let done = answer.object("incomplete", &answer.items, Some("content_filter"));
            ev.push("response.incomplete", json!({"response": done}), false);
        }
    }
    ev.pieces
}

/// A streamed text answer.
pub(super) fn stream(spec: &StreamSpec, req: &Received) -> Vec<Piece> {
    let out = Output {
        text: Some(spec.chunks.concat()),
        ..Output::default()
    };
    events(out, &spec.chunks, spec.end, req)
}

/// A streamed answer that calls `calls`.
pub(super) fn tool_calls_stream(calls: &[SimToolCall], req: &Received) -> Vec<Piece> {
    let out = Output {
        calls: calls.to_vec(),
        ..Output::default()
    };
    events(out, &[], StreamEnd::Complete, req)
}

/// A streamed answer that reasons first, then does `then`.
pub(super) fn thinking_stream(thinking: &str, then: Reply, req: &Received) -> Vec<Piece> {
    let mut out = output_of(then);
    let chunks = out.text.as_deref().map(split_words).unwrap_or_default();
    out.reasoning = Some(thinking.to_owned());
    events(out, &chunks, StreamEnd::Complete, req)
}

/// A refusal at the start of a stream: `response.incomplete`
/// (`content_filter`) with no output.
pub(super) fn refusal_stream(_refusal: &Refusal, req: &Received) -> Vec<Piece> {
    events(Output::default(), &[], StreamEnd::Refusal, req)
}
