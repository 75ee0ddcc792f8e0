//! The Converse translation as data: neutral requests and the bodies they
//! become, answers and what they mean, streams and their events.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use std::collections::VecDeque;

use serde_json::{Value, json};
use understudy_types::{
    ChatRequest, Failure, FailureKind, FinishReason, Message, Part, ResponseFormat, Role,
    StreamEvent, Tool, ToolCall, ToolChoice, Usage,
};

use super::request::{MAX_TOOL_USE_ID, tool_use_id, wire_request};
use super::response::{WireResponse, completion};
use super::stream::ConverseStream;
use crate::StreamParser;
use crate::sse::SseItem;

/// `request`'s body as JSON (`max_tokens` already clamped), read back from
/// the text that goes (an `f32` is written as the decimal it is meant to
/// be there, not widened).
fn body(request: &ChatRequest, max_tokens: Option<u32>) -> Value {
    let text = serde_json::to_string(&wire_request(request, max_tokens).unwrap()).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn weather() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: Some(json!({"properties": {"city": {"type": "string"}}})),
        strict: None,
    }
}

fn tool_loop() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::user("Weather in Oslo and Paris?"),
            Message {
                tool_calls: vec![
                    call("tooluse_1", "get_weather", r#"{"city":"Oslo"}"#),
                    call("tooluse_2", "get_weather", ""),
                ],
                ..Message::assistant("Looking.")
            },
            Message::tool_result("tooluse_1", "-3"),
            Message::tool_result("tooluse_2", ""),
            Message::user("And tomorrow?"),
        ],
        tools: vec![weather()],
        ..ChatRequest::default()
    }
}

#[test]
fn requests_become_these_bodies() {
    let mut plain = ChatRequest::user("hi").with_system("Be brief.");
    plain.temperature = Some(1.5);
    plain.top_p = Some(0.9);
    plain.stop = vec!["".into(), "END".into()];
    plain.seed = Some(7);
    plain.user = Some("u1".into());
    let mut json_mode = ChatRequest::user("hi");
    json_mode.response_format = Some(ResponseFormat::JsonObject);
    let mut mid_system = ChatRequest::user("one");
    mid_system
        .messages
        .push(Message::text(Role::System, "Stay calm."));
    mid_system.messages.push(Message::user("  "));
    mid_system.messages.push(Message::assistant("two"));
    let cases: Vec<(&str, ChatRequest, Option<u32>, Value)> = vec![
        (
            "sampling clamped to 0..1, empty stops dropped, no model and no stream",
            plain,
            Some(0),
            json!({
                "messages": [{"role": "user", "content": [{"text": "hi"}]}],
                "system": [{"text": "Be brief."}],
                "inferenceConfig": {"maxTokens": 1, "temperature": 1.0, "topP": 0.9, "stopSequences": ["END"]}
            }),
        ),
        (
            "a JSON answer is asked for in the system prompt",
            json_mode,
            None,
            json!({
                "messages": [{"role": "user", "content": [{"text": "hi"}]}],
                "system": [{"text": crate::messages::request::JSON_INSTRUCTION}]
            }),
        ),
        (
            "a system message joins its user turn, blank text goes",
            mid_system,
            None,
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": "one"}, {"text": "<system>\nStay calm.\n</system>"}]},
                    {"role": "assistant", "content": [{"text": "two"}]}
                ]
            }),
        ),
        (
            "a tool loop alternates, its results first in one user turn",
            tool_loop(),
            Some(100),
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": "Weather in Oslo and Paris?"}]},
                    {"role": "assistant", "content": [
                        {"text": "Looking."},
                        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}}},
                        {"toolUse": {"toolUseId": "tooluse_2", "name": "get_weather", "input": {}}}
                    ]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "-3"}]}},
                        {"toolResult": {"toolUseId": "tooluse_2", "content": [{"text": "(no output)"}]}},
                        {"text": "And tomorrow?"}
                    ]}
                ],
                "inferenceConfig": {"maxTokens": 100},
                "toolConfig": {"tools": [{"toolSpec": {
                    "name": "get_weather",
                    "description": "The weather in a city.",
                    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}
                }}]}
            }),
        ),
    ];
    for (what, request, max_tokens, expected) in cases {
        assert_eq!(body(&request, max_tokens), expected, "{what}");
    }
}

#[test]
fn tool_choices_become_tool_configs() {
    let with = |choice: Option<ToolChoice>, history: bool| {
        let mut r = if history {
            tool_loop()
        } else {
            ChatRequest {
                tools: vec![weather()],
                ..ChatRequest::user("hi")
            }
        };
        r.tool_choice = choice;
        body(&r, None)["toolConfig"].clone()
    };
    let names = |config: &Value| -> Vec<String> {
        config["tools"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| t["toolSpec"]["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // Auto is the default and not every model takes the member: not sent.
    let auto = with(Some(ToolChoice::Auto), false);
    assert_eq!(names(&auto), ["get_weather"]);
    assert!(auto.get("toolChoice").is_none(), "{auto}");
    assert_eq!(
        with(Some(ToolChoice::Required), false)["toolChoice"],
        json!({"any": {}})
    );
    assert_eq!(
        with(Some(ToolChoice::Function("get_weather".into())), false)["toolChoice"],
        json!({"tool": {"name": "get_weather"}})
    );
    // No `none` member: no tools at all, unless the history needs them.
    assert_eq!(with(Some(ToolChoice::None), false), Value::Null);
    let none = with(Some(ToolChoice::None), true);
    assert_eq!(names(&none), ["get_weather"]);
    assert!(none.get("toolChoice").is_none(), "{none}");
    // Tool turns and no tools offered: the called ones declared, bare.
    let mut bare = tool_loop();
    bare.tools.clear();
    let config = body(&bare, None)["toolConfig"].clone();
    assert_eq!(
        config,
        json!({"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object", "properties": {}}}}}]})
    );
}

#[test]
fn images_go_inline_in_the_formats_converse_takes() {
    let image = |url: &str| ChatRequest {
        messages: vec![Message {
            content: vec![
                Part::Text {
                    text: "What is this?".into(),
                },
                Part::Image {
                    url: url.into(),
                    detail: None,
                },
            ],
            ..Message::user("")
        }],
        ..ChatRequest::default()
    };
    for (url, format) in [
        ("data:image/png;base64,iVBORw0KGgo=", "png"),
        ("data:image/jpg;base64,/9j/4AAQ", "jpeg"),
        ("data:image/JPEG;base64,/9j/4AAQ", "jpeg"),
        ("data:image/webp;base64,UklGRg==", "webp"),
    ] {
        let b = body(&image(url), None);
        let data = url.split_once(',').unwrap().1;
        assert_eq!(
            b["messages"][0]["content"][1],
            json!({"image": {"format": format, "source": {"bytes": data}}}),
            "{url}"
        );
    }
    for url in ["https://example.com/cat.png", "data:image/bmp;base64,Qk0="] {
        let f = wire_request(&image(url), None).unwrap_err();
        assert_eq!(f.kind, FailureKind::Unsupported, "{url}: {f:?}");
    }
}

#[test]
fn tool_use_ids_fit_bedrocks_alphabet_and_length_injectively() {
    let long = "x".repeat(80);
    let long2 = format!("{}y", "x".repeat(79));
    for id in ["call_abc", "toolu_01", "a.b/c", "", &long, &long2] {
        let wire = tool_use_id(id);
        assert!(
            !wire.is_empty()
                && wire.len() <= MAX_TOOL_USE_ID
                && wire
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{id:?} -> {wire:?}"
        );
    }
    assert_eq!(
        tool_use_id("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"),
        "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"
    );
    assert_ne!(tool_use_id(&long), tool_use_id(&long2));
    assert_ne!(tool_use_id("a.b"), tool_use_id("a_b"));
}

/// An answer body read as a completion of `m`.
fn answer(body: Value) -> Result<understudy_types::Completion, Failure> {
    let parsed: WireResponse = serde_json::from_value(body).unwrap();
    completion(&parsed, "m", 200)
}

fn with_content(content: Value, stop: &str) -> Value {
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 18, "outputTokens": 12, "totalTokens": 30, "cacheReadInputTokens": 2, "cacheWriteInputTokens": 0},
        "metrics": {"latencyMs": 412}
    })
}

#[test]
fn answers_mean_what_their_stop_reasons_say() {
    let ok = answer(with_content(
        json!([{"text": "Hello"}, {"text": " there"}]),
        "end_turn",
    ))
    .unwrap();
    assert_eq!(ok.text, "Hello there");
    assert_eq!(ok.finish_reason, FinishReason::Stop);
    assert_eq!(
        ok.usage,
        Some(Usage {
            input_tokens: 20,
            output_tokens: 12,
            cache_read_input_tokens: 2,
            ..Usage::default()
        })
    );
    let calls = answer(with_content(
        json!([{"text": "Let me check."}, {"toolUse": {"toolUseId": "tooluse_a", "name": "get_weather", "input": {"city": "Oslo"}}}, {"toolUse": {"toolUseId": "tooluse_b", "name": "get_weather", "input": null}}]),
        "tool_use",
    ))
    .unwrap();
    assert_eq!(calls.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        calls.tool_calls,
        [
            call("tooluse_a", "get_weather", r#"{"city":"Oslo"}"#),
            call("tooluse_b", "get_weather", "{}")
        ]
    );
    let finishes = [
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("model_context_window_exceeded", FinishReason::Length),
        ("something_new", FinishReason::Other("something_new".into())),
    ];
    for (stop, finish) in finishes {
        let c = answer(with_content(json!([{"text": "x"}]), stop)).unwrap();
        assert_eq!(c.finish_reason, finish, "{stop}");
    }
    let failures = [
        (
            "guardrail_intervened",
            json!([{"text": "Sorry, the model cannot answer this question."}]),
            FailureKind::ContentFilter,
        ),
        ("content_filtered", json!([]), FailureKind::ContentFilter),
        (
            "malformed_tool_use",
            json!([{"text": "x"}]),
            FailureKind::InvalidOutput,
        ),
        (
            "malformed_model_output",
            json!([{"text": "x"}]),
            FailureKind::InvalidOutput,
        ),
        (
            "end_turn",
            json!([{"text": "  "}]),
            FailureKind::EmptyResponse,
        ),
        (
            "tool_use",
            json!([{"toolUse": {"toolUseId": "t", "name": "w", "input": [1]}}]),
            FailureKind::InvalidOutput,
        ),
        (
            "tool_use",
            json!([{"toolUse": {"toolUseId": "t", "input": {}}}]),
            FailureKind::InvalidOutput,
        ),
    ];
    for (stop, content, kind) in failures {
        let f = answer(with_content(content.clone(), stop)).unwrap_err();
        assert_eq!(f.kind, kind, "{stop} {content}: {f:?}");
        assert_eq!(f.status, Some(200));
    }
    // The guardrail's words are in the refusal's detail.
    let f = answer(with_content(
        json!([{"text": "Sorry, the model cannot answer this question."}]),
        "guardrail_intervened",
    ))
    .unwrap_err();
    assert!(
        f.detail.contains("guardrail_intervened") && f.detail.contains("Sorry"),
        "{}",
        f.detail
    );
}

/// The events a stream of `(event type, payload)` gives.
fn stream(events: &[(&str, Value)]) -> Vec<Result<StreamEvent, Failure>> {
    let mut parser = ConverseStream::for_model("meta.llama3-1-8b-instruct-v1:0");
    let mut out = VecDeque::new();
    for (name, payload) in events {
        let ends = |out: &VecDeque<Result<StreamEvent, Failure>>| {
            out.iter()
                .any(|e| matches!(e, Err(_) | Ok(StreamEvent::Finish { .. })))
        };
        if ends(&out) {
            break;
        }
        parser.on_item(
            SseItem::Event {
                event: Some((*name).to_owned()),
                data: payload.to_string(),
            },
            &mut out,
        );
    }
    if !out
        .iter()
        .any(|e| matches!(e, Err(_) | Ok(StreamEvent::Finish { .. })))
    {
        parser.on_eof(&mut out);
    }
    out.into()
}

fn text_events(text: &[&str]) -> Vec<(&'static str, Value)> {
    let mut events = vec![(
        "messageStart",
        json!({"role": "assistant", "p": "abcdefgh"}),
    )];
    for t in text {
        events.push((
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": t}, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}),
        ));
    }
    events.push(("contentBlockStop", json!({"contentBlockIndex": 0})));
    events
}

fn metadata() -> (&'static str, Value) {
    (
        "metadata",
        json!({"usage": {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12}, "metrics": {"latencyMs": 300}, "p": "abc"}),
    )
}

#[test]
fn a_text_stream_finishes_with_the_usage_that_follows_message_stop() {
    let mut events = text_events(&["Hel", "lo"]);
    events.push(("messageStop", json!({"stopReason": "end_turn"})));
    events.push(metadata());
    let got = stream(&events);
    assert_eq!(
        got,
        [
            Ok(StreamEvent::Delta("Hel".into())),
            Ok(StreamEvent::Delta("lo".into())),
            Ok(StreamEvent::Finish {
                finish_reason: FinishReason::Stop,
                usage: Some(Usage {
                    input_tokens: 9,
                    output_tokens: 3,
                    ..Usage::default()
                }),
                model: Some("meta.llama3-1-8b-instruct-v1:0".into()),
            })
        ]
    );
    // Without `metadata`: finished all the same, without a usage.
    events.pop();
    assert!(matches!(
        stream(&events).last(),
        Some(Ok(StreamEvent::Finish { usage: None, .. }))
    ));
    // Without `messageStop`: cut.
    events.pop();
    assert!(matches!(
        stream(&events).last(),
        Some(Err(f)) if f.kind == FailureKind::StreamInterrupted
    ));
}

#[test]
fn a_tool_call_streams_in_fragments_under_its_start() {
    let events = [
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Oslo."}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_x", "name": "get_weather"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"city\":"}}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "\"Oslo\"}"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 1})),
        (
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_y", "name": "now"}}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 2})),
        ("messageStop", json!({"stopReason": "tool_use"})),
        metadata(),
    ];
    let got = stream(&events);
    let delta = |index, id: Option<&str>, name: Option<&str>, arguments: &str| {
        Ok(StreamEvent::ToolCall(understudy_types::ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
        }))
    };
    assert_eq!(
        got[..6],
        [
            Ok(StreamEvent::Reasoning("Oslo.".into())),
            delta(0, Some("tooluse_x"), Some("get_weather"), ""),
            delta(0, None, None, "{\"city\":"),
            delta(0, None, None, "\"Oslo\"}"),
            delta(1, Some("tooluse_y"), Some("now"), ""),
            delta(1, None, None, "{}"),
        ]
    );
    assert!(
        matches!(
            got.last(),
            Some(Ok(StreamEvent::Finish {
                finish_reason: FinishReason::ToolCalls,
                ..
            }))
        ),
        "{got:?}"
    );
}

#[test]
fn a_refused_empty_or_malformed_stream_fails() {
    type Events = Vec<(&'static str, Value)>;
    let cases: [(&str, Events, FailureKind); 4] = [
        (
            "a guardrail",
            text_events(&["Sorry."]),
            FailureKind::ContentFilter,
        ),
        ("a filter", text_events(&[]), FailureKind::ContentFilter),
        ("nothing said", text_events(&[]), FailureKind::EmptyResponse),
        (
            "bad JSON",
            vec![("contentBlockDelta", json!("not an object"))],
            FailureKind::MalformedResponse,
        ),
    ];
    let stops = [
        "guardrail_intervened",
        "content_filtered",
        "end_turn",
        "end_turn",
    ];
    for ((what, mut events, kind), stop) in cases.into_iter().zip(stops) {
        events.push(("messageStop", json!({"stopReason": stop})));
        let got = stream(&events);
        assert!(
            matches!(got.last(), Some(Err(f)) if f.kind == kind),
            "{what}: {got:?}"
        );
    }
}
