//! Unit tests of the Responses API protocol: the native body's splices and
//! reasoning-item rule, the translation, answers and event streams.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use http::HeaderMap;
use serde_json::{Value, json};
use understudy_types::passthrough::{Gated, GatedSet};
use understudy_types::{
    ChatRequest, Completion, Failure, FailureKind, FinishReason, Message, NativeEvent, Part,
    ResponseFormat, Role, StreamEvent, ToolCall,
};

use super::native::{prepare_native, tagged_id, target_tag, untagged_id};
use super::request::translate;
use super::stream::ResponsesStream;

/// An answer as the provider sent it: its status and body.
struct Received(u16, String);

fn received(status: u16, body: &str) -> Received {
    Received(status, body.to_owned())
}

fn parse_response(received: &Received, model: &str, tag: &str) -> Result<Completion, Failure> {
    let headers = HeaderMap::new();
    super::response::parse_response((received.0, &headers, received.1.as_bytes()), model, tag)
}

#[test]
fn tags_round_trip_and_name_their_target() {
    let mine = target_tag("oai", "gpt-5");
    let other = target_tag("oai2", "gpt-5");
    assert_ne!(mine, other);
    assert_eq!(mine.len(), 8);
    let tagged = tagged_id("rs_abc123", &mine).unwrap();
    assert_eq!(untagged_id(&tagged, &mine), Ok("rs_abc123".to_owned()));
    assert_eq!(untagged_id(&tagged, &other), Err(true));
    assert_eq!(untagged_id("rs_abc123", &mine), Err(false));
}

#[test]
fn the_native_body_changes_only_in_model_and_foreign_reasoning() {
    let tag = target_tag("oai", "gpt-5");
    let other = target_tag("other", "gpt-5");
    let body =
        r#"{ "model" : "client-model",  "stream": true, "input": "hi", "max_output_tokens": 50 }"#;
    let out = prepare_native(body, "gpt-5", &tag, Some(100), GatedSet::NONE).unwrap();
    assert_eq!(
        out,
        r#"{ "model" : "gpt-5",  "stream": true, "input": "hi", "max_output_tokens": 50 }"#
    );
    let out = prepare_native(body, "gpt-5", &tag, Some(10), GatedSet::NONE).unwrap();
    assert!(out.ends_with(r#""max_output_tokens": 10 }"#), "{out}");

    let mine = tagged_id("rs_1", &tag).unwrap();
    let theirs = tagged_id("rs_2", &other).unwrap();
    let body = format!(
        r#"{{"model":"m","input":[ {{"role":"user","content":"q"}}, {{"type":"reasoning","id":"{mine}","summary":[],"encrypted_content":"E1"}}, {{"type":"reasoning","id":"{theirs}","summary":[],"encrypted_content":"E2"}}, {{"type":"reasoning","id":"rs_3","summary":[],"encrypted_content":"E3"}}, {{"type":"reasoning","id":"rs_4","summary":[]}}, {{"type":"function_call","call_id":"c","name":"f","arguments":"{{}}"}} ]}}"#
    );
    let out = prepare_native(&body, "gpt-5", &tag, None, GatedSet::NONE).unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    let input = v["input"].as_array().unwrap();
    let ids: Vec<&str> = input.iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids, ["rs_1", "rs_4"], "{out}");
    assert_eq!(input.len(), 4);
    assert_eq!(v["model"], "gpt-5");
    // Without reasoning items, the input is untouched byte for byte.
    let body = r#"{"model":"m","input":[ {"role":"user","content":"q"} ]}"#;
    assert_eq!(
        prepare_native(body, "x", &tag, None, GatedSet::NONE).unwrap(),
        r#"{"model":"x","input":[ {"role":"user","content":"q"} ]}"#
    );
    assert_eq!(prepare_native("[1]", "x", &tag, None, GatedSet::NONE), None);
    assert_eq!(
        prepare_native(r#"{"input":"hi"}"#, "x", &tag, None, GatedSet::NONE),
        None
    );
}

#[test]
fn hosted_tools_stay_only_where_the_operator_allows_them() {
    let tag = target_tag("oai", "m");
    let body = r#"{"model":"x","input":"hi","tools":[{"type":"function","name":"f"}, {"type":"web_search"},{"type":"image_generation"},{"type":"namespace","name":"n","tools":[]}]}"#;
    let out = prepare_native(body, "m", &tag, None, GatedSet::NONE).unwrap();
    assert_eq!(
        out,
        r#"{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[]}]}"#
    );
    let mut allowed = GatedSet::NONE;
    allowed.insert(Gated::WebSearch);
    let out = prepare_native(body, "m", &tag, None, allowed).unwrap();
    assert!(out.contains(r#"{"type":"web_search"}"#), "{out}");
    assert!(!out.contains("image_generation"), "{out}");
    // Client-run tools only: the tools go byte for byte.
    let body = r#"{"model":"x","tools":[ {"type":"function","name":"f"} ]}"#;
    let out = prepare_native(body, "m", &tag, None, GatedSet::NONE).unwrap();
    assert_eq!(
        out,
        r#"{"model":"m","tools":[ {"type":"function","name":"f"} ]}"#
    );
}

#[test]
fn the_translation_speaks_the_responses_api() {
    let request = ChatRequest {
        system: Some("be brief".into()),
        messages: vec![
            Message::user("weather?"),
            Message {
                role: Role::Assistant,
                content: vec![],
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "get".into(),
                    arguments: "{}".into(),
                }],
                tool_call_id: None,
            },
            Message {
                role: Role::Tool,
                content: vec![Part::Text {
                    text: "sunny".into(),
                }],
                tool_calls: vec![],
                tool_call_id: Some("call_1".into()),
            },
        ],
        tools: vec![understudy_types::Tool {
            name: "get".into(),
            description: None,
            parameters: None,
            strict: None,
        }],
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::default()
    };
    let body = translate(&request, "gpt-5", Some(64), true).unwrap();
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["input"][0]["content"][0]["type"], "input_text");
    assert_eq!(body["input"][1]["type"], "function_call");
    assert_eq!(body["input"][2]["type"], "function_call_output");
    assert_eq!(body["input"][2]["call_id"], "call_1");
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["text"]["format"]["type"], "json_object");
    assert_eq!(body["max_output_tokens"], 64);
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
}

#[test]
fn answers_text_calls_and_endings() {
    let tag = target_tag("oai", "gpt-5");
    let body = r#"{"id":"resp_1","object":"response","status":"completed","model":"gpt-5-2025","output":[{"type":"reasoning","id":"rs_9","summary":[],"encrypted_content":"E"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}"#;
    let c = parse_response(&received(200, body), "gpt-5", &tag).unwrap();
    assert_eq!(c.text, "Hello");
    assert_eq!(c.model, "gpt-5-2025");
    assert_eq!(c.finish_reason, FinishReason::Stop);
    assert_eq!(c.usage.unwrap().output_tokens, 2);
    let native = c.native.unwrap();
    assert!(native.contains(&format!("\"rs_us{tag}_9\"")), "{native}");
    assert_eq!(native.replace(&format!("rs_us{tag}_9"), "rs_9"), body);

    let body = r#"{"status":"completed","output":[{"type":"function_call","id":"fc_1","call_id":"call_7","name":"get","arguments":"{\"a\":1}"}]}"#;
    let c = parse_response(&received(200, body), "m", &tag).unwrap();
    assert_eq!(c.tool_calls[0].id, "call_7");
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.native, None);

    let body = r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"message","content":[{"type":"output_text","text":"Hel"}]}]}"#;
    let c = parse_response(&received(200, body), "m", &tag).unwrap();
    assert_eq!(c.finish_reason, FinishReason::Length);

    let body = r#"{"status":"failed","error":{"code":"rate_limit_exceeded","message":"slow down"},"output":[]}"#;
    let f = parse_response(&received(200, body), "m", &tag).unwrap_err();
    assert!(matches!(f.kind, FailureKind::RateLimited { .. }), "{f:?}");

    let f = parse_response(
        &received(
            400,
            r#"{"error":{"message":"Item with id 'rs_x' not found.","type":"invalid_request_error","param":"input","code":null}}"#,
        ),
        "m",
        &tag,
    )
    .unwrap_err();
    assert_eq!(f.kind, FailureKind::BadRequest);
    let f = parse_response(&received(500, "oops"), "m", &tag).unwrap_err();
    assert_eq!(f.kind, FailureKind::Unavailable { retry_after: None });
    let f = parse_response(&received(200, "{"), "m", &tag).unwrap_err();
    assert_eq!(f.kind, FailureKind::MalformedResponse);
}

fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        let kind = e["type"].as_str().unwrap();
        out.extend_from_slice(format!("event: {kind}\ndata: {e}\n\n").as_bytes());
    }
    out
}

fn stream(native: bool, bytes: &[u8]) -> Vec<Result<StreamEvent, Failure>> {
    let parser = ResponsesStream::new("gpt-5", native, target_tag("oai", "gpt-5"));
    crate::framing::parse_stream_bytes(parser, &[bytes])
}

#[test]
fn streams_text_reasoning_calls_and_the_end() {
    let events = [
        json!({"type": "response.created", "sequence_number": 0, "response": {"status": "in_progress", "model": "gpt-5-x", "output": []}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "reasoning", "id": "rs_5", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "sequence_number": 2, "item_id": "rs_5", "output_index": 0, "summary_index": 0, "delta": "think"}),
        json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": "Hi"}),
        json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 5, "item_id": "fc_1", "output_index": 2, "delta": "{}"}),
        json!({"type": "response.completed", "sequence_number": 6, "response": {"status": "completed", "model": "gpt-5-x", "output": [{"type": "reasoning", "id": "rs_5", "summary": []}], "usage": {"input_tokens": 1, "output_tokens": 2}}}),
    ];
    let out = stream(false, &sse(&events));
    let out: Vec<StreamEvent> = out.into_iter().map(Result::unwrap).collect();
    assert_eq!(out[0], StreamEvent::Reasoning("think".into()));
    assert_eq!(out[1], StreamEvent::Delta("Hi".into()));
    assert!(matches!(&out[2], StreamEvent::ToolCall(d) if d.id.as_deref() == Some("call_1")));
    assert!(matches!(&out[3], StreamEvent::ToolCall(d) if d.arguments == "{}" && d.index == 0));
    assert!(matches!(
        &out[4],
        StreamEvent::Finish { finish_reason: FinishReason::ToolCalls, model: Some(m), .. } if m == "gpt-5-x"
    ));

    // Native: every event first as sent, reasoning ids tagged.
    let out = stream(true, &sse(&events));
    let natives: Vec<&NativeEvent> = out
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Native(n)) => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(natives.len(), events.len());
    assert_eq!(natives[0].event, "response.created");
    assert_eq!(natives[0].data, events[0].to_string());
    let tag = target_tag("oai", "gpt-5");
    assert!(natives[1].data.contains(&format!("rs_us{tag}_5")));
    assert!(natives[2].data.contains(&format!("rs_us{tag}_5")));
    assert!(natives[6].data.contains(&format!("rs_us{tag}_5")));
    assert!(matches!(out.last(), Some(Ok(StreamEvent::Finish { .. }))));
}

#[test]
fn streams_that_fail_say_why() {
    let failed = sse(&[
        json!({"type": "response.output_text.delta", "delta": "Hi", "output_index": 0}),
        json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []}}),
    ]);
    let out = stream(false, &failed);
    assert!(
        matches!(out.last(), Some(Err(f)) if f.kind == FailureKind::Unavailable { retry_after: None }),
        "{out:?}"
    );
    let error = sse(&[json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow"})]);
    let out = stream(false, &error);
    assert!(
        matches!(out.last(), Some(Err(f)) if matches!(f.kind, FailureKind::RateLimited { .. }))
    );
    let cut =
        sse(&[json!({"type": "response.output_text.delta", "delta": "Hi", "output_index": 0})]);
    let out = stream(false, &cut);
    assert!(matches!(out.last(), Some(Err(f)) if f.kind == FailureKind::StreamInterrupted));
    let out = stream(false, b"data: {not json\n\n");
    assert!(matches!(out.last(), Some(Err(f)) if f.kind == FailureKind::MalformedResponse));
    let incomplete = sse(&[
        json!({"type": "response.output_text.delta", "delta": "Hi", "output_index": 0}),
        json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}}),
    ]);
    let out = stream(false, &incomplete);
    assert!(matches!(
        out.last(),
        Some(Ok(StreamEvent::Finish {
            finish_reason: FinishReason::Length,
            ..
        }))
    ));
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// Event-ish text: fragments of real events, JSON punctuation and noise.
    fn eventish() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "event: response.output_text.delta\n",
            "data: ",
            "{\"type\":\"response.output_text.delta\",\"delta\":\"a\"}",
            "{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}}",
            "{\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"delta\":\"{\"}",
            "{\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[{\"type\":\"reasoning\",\"id\":\"rs_1\"}]}}",
            "{\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":null}}",
            "{\"type\":\"error\",\"code\":7}",
            "\"rs_1\"",
            "\n\n",
            "\n",
            "{",
            "}",
            "[DONE]",
            "é",
        ]);
        prop::collection::vec(pieces, 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn the_stream_parser_is_total(text in eventish(), native in any::<bool>()) {
            let events = stream(native, text.as_bytes());
            let ends = events.iter().filter(|e| !matches!(e, Ok(StreamEvent::Delta(_) | StreamEvent::Reasoning(_) | StreamEvent::ToolCall(_) | StreamEvent::Native(_)))).count();
            prop_assert_eq!(ends, 1, "{:?}", events);
        }

        #[test]
        fn native_bodies_and_answers_never_panic(text in eventish(), raw in ".{0,64}") {
            let tag = target_tag("p", "m");
            let _ = prepare_native(&text, "m", &tag, Some(10), GatedSet::NONE);
            let _ = prepare_native(&raw, "m", &tag, Some(10), GatedSet::NONE);
            let body = format!("{{\"model\":\"x\",\"input\":[{text}]}}");
            let _ = prepare_native(&body, "m", &tag, None, GatedSet::NONE);
            let _ = parse_response(&received(200, &text), "m", &tag);
            let _ = untagged_id(&raw, &tag);
        }
    }
}
