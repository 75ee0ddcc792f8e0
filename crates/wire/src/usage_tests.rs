//! Every protocol's answer id and token details (cached input read and
//! written, reasoning output), non-streamed and streamed, from bodies in
//! the shapes the providers send (as the SDKs' usage types read them):
//! what arrives in the
//! `Completion`, in the stream's `Finish` and from `StreamParser::response_id`.
//! The totals keep their meaning: cached tokens are part of
//! `input_tokens`, reasoning tokens part of `output_tokens`.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::collections::VecDeque;

use http::HeaderMap;
use serde_json::{Value, json};
use understudy_types::{Completion, Failure, StreamEvent, Usage};

use crate::StreamParser;
use crate::sse::{SseDecoder, SseItem};

/// Runs `parser` over SSE `bytes` (all of them: the parser is kept, to be
/// asked for its id afterwards) and returns its events.
fn run(parser: &mut impl StreamParser, bytes: &str) -> Vec<Result<StreamEvent, Failure>> {
    let mut decoder = SseDecoder::new();
    let mut items = Vec::new();
    decoder.feed(bytes.as_bytes(), &mut items).unwrap();
    decoder.finish(&mut items).unwrap();
    run_items(parser, items)
}

fn run_items(
    parser: &mut impl StreamParser,
    items: Vec<SseItem>,
) -> Vec<Result<StreamEvent, Failure>> {
    let mut out = VecDeque::new();
    for item in items {
        parser.on_item(item, &mut out);
    }
    out.into()
}

/// The usage of the stream's `Finish`, which must be its last event.
fn finish_usage(events: &[Result<StreamEvent, Failure>]) -> Option<Usage> {
    match events.last() {
        Some(Ok(StreamEvent::Finish { usage, .. })) => *usage,
        other => panic!("the stream did not finish: {other:?} (all: {events:?})"),
    }
}

/// `data:` events, one per JSON value (OpenAI's and Gemini's framing).
fn data_events(values: &[Value]) -> String {
    values.iter().map(|v| format!("data: {v}\n\n")).collect()
}

/// Named events, each named by its `type` (Anthropic's and the Responses
/// API's framing).
fn named_events(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
        .collect()
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: cache_read,
        cache_write_input_tokens: cache_write,
        reasoning_output_tokens: reasoning,
    }
}

// === Chat Completions ===

/// A reasoning model's answer with a prompt-cache hit (openai-python
/// `types/completion_usage.py`; the body's shape as in
/// `tests/data/openai/text.json`).
fn chat_body(usage: Value) -> String {
    json!({
        "id": "chatcmpl-C1sAzDuXb4EoSM6RcAEGp3Pz0RwXj",
        "object": "chat.completion",
        "created": 1_754_400_000,
        "model": "o4-mini-2025-04-16",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "Paris.", "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": null
    })
    .to_string()
}

fn chat_answer(body: &str) -> Completion {
    let headers = HeaderMap::new();
    crate::chat_completions::response::parse_response((200, &headers, body.as_bytes()), "o4-mini")
        .unwrap()
}

#[test]
fn chat_completions_answer_id_and_details() {
    let c = chat_answer(&chat_body(json!({
        "prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    })));
    assert_eq!(
        c.response_id.as_deref(),
        Some("chatcmpl-C1sAzDuXb4EoSM6RcAEGp3Pz0RwXj")
    );
    // prompt_tokens already include the cached ones, completion_tokens the
    // reasoning ones.
    assert_eq!(c.usage, Some(usage(2006, 300, 1920, 0, 256)));
    // Compatible servers leave the details out, or send them null.
    for plain in [
        json!({"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}),
        json!({"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
            "prompt_tokens_details": null, "completion_tokens_details": null}),
        json!({"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
            "prompt_tokens_details": {"cached_tokens": null}}),
    ] {
        assert_eq!(
            chat_answer(&chat_body(plain)).usage,
            Some(usage(9, 3, 0, 0, 0))
        );
    }
}

#[test]
fn chat_completions_stream_id_and_details() {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-C1sB0", "object": "chat.completion.chunk", "created": 1_754_400_000,
            "model": "o4-mini-2025-04-16", "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let bytes = data_events(&[
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        ),
        chunk(json!({"content": "Paris."}), Value::Null),
        chunk(json!({}), json!("stop")),
        // The usage chunk `stream_options.include_usage` asks for.
        json!({"id": "chatcmpl-C1sB0", "object": "chat.completion.chunk", "created": 1_754_400_000,
            "model": "o4-mini-2025-04-16", "choices": [],
            "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0,
                    "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}}),
    ]) + "data: [DONE]\n\n";
    let mut parser = crate::chat_completions::stream::OpenAiStream::for_model("o4-mini");
    assert_eq!(parser.response_id(), None, "nothing named it yet");
    let events = run(&mut parser, &bytes);
    assert_eq!(finish_usage(&events), Some(usage(2006, 300, 1920, 0, 256)));
    assert_eq!(parser.response_id(), Some("chatcmpl-C1sB0"));
}

// === Messages ===

#[test]
fn messages_answer_id_and_details() {
    // anthropic-sdk-python `types/usage.py`: input_tokens leaves the cache
    // out; output_tokens includes the thinking that its details break out.
    let body = json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "thinking", "thinking": "Capital of France.", "signature": "EqQB"},
            {"type": "text", "text": "Paris."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 1024,
            "cache_read_input_tokens": 2048,
            "cache_creation": {"ephemeral_5m_input_tokens": 1024, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 310, "output_tokens_details": {"thinking_tokens": 250},
            "service_tier": "standard"}
    });
    let parsed: crate::messages::response::WireResponse = serde_json::from_value(body).unwrap();
    let c =
        crate::messages::response::completion(&parsed, "claude", 200, &HeaderMap::new()).unwrap();
    assert_eq!(
        c.response_id.as_deref(),
        Some("msg_01XFDUDYJgAACzvnptvVoYEL")
    );
    assert_eq!(c.usage, Some(usage(12 + 1024 + 2048, 310, 2048, 1024, 250)));
}

/// A text stream whose `message_delta` carries `delta_usage`.
fn messages_stream(delta_usage: &Value) -> String {
    named_events(&[
        json!({"type": "message_start", "message": {"id": "msg_014p7gG3wDgGV9EUtLvnow3U",
            "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 472, "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 2048, "output_tokens": 2}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Paris."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": delta_usage}),
        json!({"type": "message_stop"}),
    ])
}

#[test]
fn messages_stream_id_and_details() {
    let check = |delta_usage: Value, want: Usage| {
        let mut parser = crate::messages::stream::AnthropicStream::for_model("claude");
        let events = run(&mut parser, &messages_stream(&delta_usage));
        assert_eq!(finish_usage(&events), Some(want), "{delta_usage}");
        assert_eq!(parser.response_id(), Some("msg_014p7gG3wDgGV9EUtLvnow3U"));
    };
    // The cumulative counts of the streaming docs' `message_delta`.
    check(
        json!({"input_tokens": 472, "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 2048, "output_tokens": 510,
            "output_tokens_details": {"thinking_tokens": 300}}),
        usage(472 + 100 + 2048, 510, 2048, 100, 300),
    );
    // Only the output so far (`tests/data/anthropic/stream_tool_use.sse`):
    // the cache counts stay `message_start`'s.
    check(
        json!({"output_tokens": 15}),
        usage(472 + 100 + 2048, 15, 2048, 100, 0),
    );
    // A compaction's delta counts 0 at the top: the counts never shrink.
    check(
        json!({"input_tokens": 0, "output_tokens": 0,
            "iterations": [{"type": "compaction", "input_tokens": 54_453, "output_tokens": 883}]}),
        usage(472 + 100 + 2048, 0, 2048, 100, 0),
    );
}

// === generateContent ===

#[test]
fn generate_content_answer_id_and_details() {
    // genai-py `GenerateContentResponseUsageMetadata`: promptTokenCount
    // includes the cached content, candidatesTokenCount leaves the
    // thoughts out.
    let body = json!({
        "candidates": [{"content": {"parts": [{"text": "Paris."}], "role": "model"},
            "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 4100, "candidatesTokenCount": 28,
            "totalTokenCount": 4372, "cachedContentTokenCount": 4000, "thoughtsTokenCount": 244,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 4100}],
            "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 4000}]},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "UxQ6aM_sKbjFnvgPocrJaA"
    });
    let parsed: crate::generate_content::response::WireResponse =
        serde_json::from_value(body).unwrap();
    assert_eq!(
        parsed.response_id.as_deref(),
        Some("UxQ6aM_sKbjFnvgPocrJaA")
    );
    assert_eq!(
        crate::generate_content::response::usage(&parsed),
        Some(usage(4100, 28 + 244, 4000, 0, 244))
    );
}

#[test]
fn generate_content_stream_id_and_details() {
    // Each chunk repeats the id and the cumulative usage.
    let chunk = |text: &str, finish: Option<&str>, candidates: u64, thoughts: u64| {
        let mut candidate =
            json!({"content": {"parts": [{"text": text}], "role": "model"}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 4100, "candidatesTokenCount": candidates,
                "totalTokenCount": 4100 + candidates + thoughts,
                "cachedContentTokenCount": 4000, "thoughtsTokenCount": thoughts},
            "modelVersion": "gemini-2.5-flash", "responseId": "uSfx5eGePPv5gU7TxA5vEm"})
    };
    let bytes = data_events(&[
        chunk("Why did", None, 2, 48),
        chunk(" the chicken cross?", None, 5, 48),
        chunk("", Some("STOP"), 5, 48),
    ]);
    let mut parser = crate::generate_content::stream::GeminiStream::for_model("gemini");
    let events = run(&mut parser, &bytes);
    assert_eq!(
        finish_usage(&events),
        Some(usage(4100, 5 + 48, 4000, 0, 48))
    );
    assert_eq!(parser.response_id(), Some("uSfx5eGePPv5gU7TxA5vEm"));
}

// === Responses API ===

/// A `response` object (openai-python `types/responses/response_usage.py`:
/// input_tokens includes the cached tokens, output_tokens the reasoning).
fn response_object(status: &str, output: &Value, usage: &Value) -> Value {
    json!({"id": "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b", "object": "response",
        "created_at": 1_756_315_696, "status": status, "error": null, "incomplete_details": null,
        "model": "gpt-5-2025-08-07", "output": output, "usage": usage})
}

fn responses_usage() -> Value {
    json!({"input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920},
        "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 256},
        "total_tokens": 2306})
}

fn responses_message() -> Value {
    json!({"id": "msg_68af4033", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Paris.", "annotations": []}]})
}

#[test]
fn responses_answer_id_and_details() {
    let body = response_object(
        "completed",
        &json!([responses_message()]),
        &responses_usage(),
    );
    let headers = HeaderMap::new();
    let c = crate::responses::response::parse_response(
        (200, &headers, body.to_string().as_bytes()),
        "gpt-5",
        "",
    )
    .unwrap();
    assert_eq!(
        c.response_id.as_deref(),
        Some("resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b")
    );
    assert_eq!(c.usage, Some(usage(2006, 300, 1920, 0, 256)));
}

#[test]
fn responses_stream_id_and_details() {
    let message = responses_message();
    let bytes = named_events(&[
        json!({"type": "response.created", "sequence_number": 0,
            "response": response_object("in_progress", &json!([]), &Value::Null)}),
        json!({"type": "response.in_progress", "sequence_number": 1,
            "response": response_object("in_progress", &json!([]), &Value::Null)}),
        json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
            "item": {"id": "msg_68af4033", "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "sequence_number": 3,
            "item_id": "msg_68af4033", "output_index": 0, "content_index": 0, "delta": "Paris."}),
        json!({"type": "response.output_item.done", "sequence_number": 4, "output_index": 0,
            "item": message}),
        json!({"type": "response.completed", "sequence_number": 5,
            "response": response_object("completed", &json!([message]), &responses_usage())}),
    ]);
    let mut parser = crate::responses::stream::ResponsesStream::new("gpt-5", false, String::new());
    let events = run(
        &mut parser,
        &bytes[..bytes.find("event: response.in_progress").unwrap()],
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        parser.response_id(),
        Some("resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"),
        "named by response.created"
    );
    let mut parser = crate::responses::stream::ResponsesStream::new("gpt-5", false, String::new());
    let events = run(&mut parser, &bytes);
    assert_eq!(finish_usage(&events), Some(usage(2006, 300, 1920, 0, 256)));
    assert_eq!(
        parser.response_id(),
        Some("resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b")
    );
}

// === Converse ===

/// AWS `TokenUsage`: `inputTokens` leaves the cache out.
fn converse_usage() -> Value {
    json!({"inputTokens": 18, "outputTokens": 12, "totalTokens": 3102,
        "cacheReadInputTokens": 2048, "cacheWriteInputTokens": 1024})
}

#[test]
fn converse_answer_details_and_no_id() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [{"text": "Paris."}]}},
        "stopReason": "end_turn",
        "usage": converse_usage(),
        "metrics": {"latencyMs": 412}
    });
    let parsed: crate::converse::response::WireResponse = serde_json::from_value(body).unwrap();
    let c = crate::converse::response::completion(&parsed, "m", 200).unwrap();
    assert_eq!(c.response_id, None, "a Converse answer has no id");
    assert_eq!(c.usage, Some(usage(18 + 2048 + 1024, 12, 2048, 1024, 0)));
}

#[test]
fn converse_stream_details_and_no_id() {
    // The framing hands each event-stream message over named by its
    // `:event-type`.
    let item = |name: &str, payload: Value| SseItem::Event {
        event: Some(name.to_owned()),
        data: payload.to_string(),
    };
    let items = vec![
        item("messageStart", json!({"role": "assistant", "p": "abc"})),
        item(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Paris."}, "p": "abcd"}),
        ),
        item("contentBlockStop", json!({"contentBlockIndex": 0})),
        item("messageStop", json!({"stopReason": "end_turn"})),
        item(
            "metadata",
            json!({"usage": converse_usage(), "metrics": {"latencyMs": 300}}),
        ),
    ];
    let mut parser = crate::converse::stream::ConverseStream::for_model("m");
    let events = run_items(&mut parser, items);
    assert_eq!(
        finish_usage(&events),
        Some(usage(18 + 2048 + 1024, 12, 2048, 1024, 0))
    );
    assert_eq!(parser.response_id(), None);
}
