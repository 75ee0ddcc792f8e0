//! Gemini's tools, JSON output and images, both ways: recorded answers
//! (`tests/data/gemini/`) parsed into tool calls with fresh ids; the exact
//! JSON a real adapter sends the testkit's simulator over HTTP
//! (`functionDeclarations` with the schema reduced, `toolConfig`,
//! `functionCall` / `functionResponse` parts whose names are recovered from
//! the history's ids, `inlineData`, `generationConfig`); scripted calls
//! through the simulator, streamed and not; and a fuzz of the new parsing.

use std::collections::HashSet;
use std::time::Duration;

use proptest::prelude::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use understudy_providers::{decode_response, decode_stream};
use understudy_testkit::{Reply, SimProvider, SimToolCall};
use understudy_types::{
    ChatRequest, Completion, Failure, FinishReason, Message, Part, Protocol, ResponseFormat, Role,
    StreamEvent, Tool, ToolCall, ToolChoice, Usage,
};

use crate::common::{adapter_for, split};

const CONNECT: Duration = Duration::from_secs(5);

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/gemini/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn recorded(name: &str) -> Result<Completion, Failure> {
    decode_response(
        Protocol::GenerateContent,
        "asked-model",
        200,
        HeaderMap::new(),
        &fixture(name),
    )
}

/// An id the gateway minted: `call_` and 24 hex digits (then the call's
/// thought signature, when Gemini sent one).
fn is_minted(id: &str) -> bool {
    understudy_providers::signature::unsigned(id)
        .strip_prefix("call_")
        .is_some_and(|hex| hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `(name, arguments as JSON)` of each call, in order.
fn calls(tool_calls: &[ToolCall]) -> Vec<(String, Value)> {
    tool_calls
        .iter()
        .map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap()))
        .collect()
}

fn distinct_minted(ids: &[&str]) {
    assert!(ids.iter().all(|id| is_minted(id)), "{ids:?}");
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
}

// === recorded answers ===

#[test]
fn a_function_call_answer_becomes_a_tool_call() {
    let c = recorded("function_call.json").unwrap();
    assert_eq!(c.text, "");
    assert_eq!(
        calls(&c.tool_calls),
        [(
            "get_weather".to_owned(),
            json!({"city": "Paris", "unit": "celsius"})
        )]
    );
    distinct_minted(&[&c.tool_calls[0].id]);
    assert_eq!(
        c.finish_reason,
        FinishReason::ToolCalls,
        "Gemini says STOP for calls too"
    );
    assert_eq!(c.model, "gemini-3-flash-preview");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 41,
            output_tokens: 18 + 87,
            reasoning_output_tokens: 87,
            ..Usage::default()
        })
    );
}

#[test]
fn parallel_function_calls_keep_their_order_and_get_distinct_ids() {
    let c = recorded("parallel_function_calls.json").unwrap();
    assert_eq!(c.text, "Checking both cities.");
    assert_eq!(
        calls(&c.tool_calls),
        [
            ("get_weather".to_owned(), json!({"city": "Paris"})),
            ("get_weather".to_owned(), json!({"city": "Tokyo"})),
            ("get_time".to_owned(), json!({})),
        ]
    );
    assert_eq!(c.tool_calls[2].arguments, "{}", "compact JSON text");
    let again = recorded("parallel_function_calls.json").unwrap();
    let ids: Vec<&str> = c
        .tool_calls
        .iter()
        .chain(&again.tool_calls)
        .map(|t| t.id.as_str())
        .collect();
    distinct_minted(&ids);
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn a_json_mode_answer_is_text_that_parses() {
    let c = recorded("json_mode.json").unwrap();
    let parsed: Value = serde_json::from_str(&c.text).unwrap();
    assert_eq!(
        parsed,
        json!({"city": "Paris", "temperature": 21.5, "conditions": ["sunny", "breezy"]})
    );
    assert!(c.tool_calls.is_empty());
    assert_eq!(c.finish_reason, FinishReason::Stop);
}

#[test]
fn a_malformed_function_call_is_invalid_output_not_a_refusal() {
    let f = recorded("malformed_function_call.json").unwrap_err();
    assert_eq!(f.code().as_str(), "invalid_output", "{f}");
    assert!(f.detail.contains("MALFORMED_FUNCTION_CALL"), "{f}");
}

/// The events of a stream, ids replaced by `<id>` once checked: every
/// call's id is minted and distinct.
fn without_ids(events: Vec<Result<StreamEvent, Failure>>) -> Vec<String> {
    let mut ids = Vec::new();
    let out = events
        .into_iter()
        .map(|e| match e {
            Ok(StreamEvent::ToolCall(mut c)) => {
                ids.push(c.id.take().unwrap_or_default());
                format!("{:?}", StreamEvent::ToolCall(c))
            }
            other => format!("{other:?}"),
        })
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    distinct_minted(&ids);
    out
}

#[test]
fn streamed_function_calls_arrive_whole_in_order() {
    let bytes = fixture("stream_function_calls.sse");
    let events = decode_stream(Protocol::GenerateContent, "asked-model", &[&bytes]);
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    let mut end = None;
    for e in events {
        match e.unwrap() {
            StreamEvent::Native(n) => panic!("Gemini never forwards natively: {n:?}"),
            StreamEvent::Reasoning(_) => {}
            StreamEvent::ToolCall(c) => {
                ids.push(c.id.clone().unwrap());
                seen.push((
                    c.index,
                    c.name.unwrap(),
                    serde_json::from_str::<Value>(&c.arguments).unwrap(),
                ));
            }
            StreamEvent::Finish {
                finish_reason,
                usage,
                model,
            } => end = Some((finish_reason, usage, model)),
            StreamEvent::Delta(t) => panic!("unexpected text {t:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            (0, "get_weather".to_owned(), json!({"city": "Paris"})),
            (
                1,
                "get_weather".to_owned(),
                json!({"city": "Tokyo", "unit": "celsius"})
            ),
            (2, "get_time".to_owned(), json!({"zone": "Asia/Tokyo"})),
        ]
    );
    distinct_minted(&ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        end,
        Some((
            FinishReason::ToolCalls,
            Some(Usage {
                input_tokens: 41,
                output_tokens: 27 + 48,
                reasoning_output_tokens: 48,
                ..Usage::default()
            }),
            Some("gemini-3-flash-preview".to_owned())
        ))
    );
}

// === what the adapter sends ===

/// The body a real adapter sends the simulator for `request`.
async fn sent(request: &ChatRequest) -> Value {
    let sim = SimProvider::start(Protocol::GenerateContent).await.unwrap();
    let adapter = adapter_for(&sim).await;
    adapter
        .complete(
            "gemini-test",
            request,
            &understudy_core::CallOptions::connect(CONNECT),
        )
        .await
        .unwrap();
    let received = sim.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].path,
        "/v1beta/models/gemini-test:generateContent"
    );
    received[0].json()
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: Some(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string", "description": "The city.", "examples": ["Paris"]},
                "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", null], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7, "exclusiveMaximum": 8, "format": "int32"},
                "kind": {"const": "forecast"},
                "at": {"$ref": "#/$defs/place"},
                "when": {"type": "string", "format": "uri"}
            },
            "required": ["city", "nowhere"],
            "$defs": {
                "place": {
                    "type": "object",
                    "description": "A place.",
                    "properties": {"lat": {"type": "number", "format": "double"}, "lon": {"type": "number"}},
                    "required": ["lat", "lon"],
                    "additionalProperties": false
                }
            }
        })),
        strict: Some(true),
    }
}

fn time_tool() -> Tool {
    Tool {
        name: "get_time".into(),
        description: None,
        parameters: Some(
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        strict: None,
    }
}

fn with_tools(choice: Option<ToolChoice>) -> ChatRequest {
    ChatRequest {
        tools: vec![weather_tool(), time_tool()],
        tool_choice: choice,
        parallel_tool_calls: Some(false),
        ..ChatRequest::user("What's the weather in Paris?")
    }
}

#[tokio::test]
async fn tools_go_out_as_function_declarations_with_the_schema_reduced() {
    let body = sent(&with_tools(Some(ToolChoice::Auto))).await;
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations": [
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": {
                    "type": "OBJECT",
                    "properties": {
                        "city": {"type": "STRING", "description": "The city."},
                        "unit": {"type": "STRING", "enum": ["celsius", "fahrenheit"], "nullable": true},
                        "days": {"type": "INTEGER", "minimum": 1, "maximum": 7, "format": "int32"},
                        "kind": {"type": "STRING", "enum": ["forecast"]},
                        "at": {
                            "type": "OBJECT",
                            "description": "A place.",
                            "properties": {"lat": {"type": "NUMBER", "format": "double"}, "lon": {"type": "NUMBER"}},
                            "required": ["lat", "lon"]
                        },
                        "when": {"type": "STRING"}
                    },
                    "required": ["city"]
                }
            },
            // No parameters: Gemini rejects an OBJECT with empty properties.
            {"name": "get_time", "description": ""}
        ]}])
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "AUTO"}})
    );
    // parallel_tool_calls has no Gemini equivalent.
    assert!(!body.to_string().contains("parallel"), "{body}");
}

#[tokio::test]
async fn tool_choice_becomes_function_calling_config() {
    for (choice, want) in [
        (None, Value::Null),
        (
            Some(ToolChoice::None),
            json!({"functionCallingConfig": {"mode": "NONE"}}),
        ),
        (
            Some(ToolChoice::Required),
            json!({"functionCallingConfig": {"mode": "ANY"}}),
        ),
        (
            Some(ToolChoice::Function("get_time".into())),
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}}),
        ),
    ] {
        let body = sent(&with_tools(choice.clone())).await;
        assert_eq!(body["toolConfig"], want, "{choice:?}");
    }
}

#[tokio::test]
async fn a_tool_loop_with_anthropic_ids_recovers_the_function_names() {
    let request = ChatRequest {
        tools: vec![weather_tool(), time_tool()],
        messages: vec![
            Message::user("Weather in Paris, and the time?"),
            Message {
                role: Role::Assistant,
                content: vec![Part::Text {
                    text: "Let me check.".into(),
                }],
                tool_calls: vec![
                    ToolCall {
                        id: "toolu_01A09q90qw90lq917835lq9".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                    ToolCall {
                        id: "toolu_01B77x".into(),
                        name: "get_time".into(),
                        arguments: String::new(),
                    },
                ],
                tool_call_id: None,
            },
            Message::tool_result(
                "toolu_01A09q90qw90lq917835lq9",
                r#"{"temp": 21, "sky": "clear"}"#,
            ),
            Message::tool_result("toolu_01B77x", "14:05"),
            Message::user("Thanks! Summarise."),
        ],
        ..ChatRequest::default()
    };
    let body = sent(&request).await;
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Weather in Paris, and the time?"}]},
            {"role": "model", "parts": [
                {"text": "Let me check."},
                {
                    "functionCall": {"id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "args": {"city": "Paris"}},
                    "thoughtSignature": "skip_thought_signature_validator"
                },
                {"functionCall": {"id": "toolu_01B77x", "name": "get_time", "args": {}}}
            ]},
            // Both results in one user turn (and the next user text with them).
            {"role": "user", "parts": [
                {"functionResponse": {"id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "response": {"temp": 21, "sky": "clear"}}},
                {"functionResponse": {"id": "toolu_01B77x", "name": "get_time", "response": {"result": "14:05"}}},
                {"text": "Thanks! Summarise."}
            ]}
        ])
    );
}

#[tokio::test]
async fn images_go_inline_and_sampling_settings_into_generation_config() {
    let request = ChatRequest {
        system: Some("Be brief.".into()),
        messages: vec![Message {
            role: Role::User,
            content: vec![
                Part::Text {
                    text: "What is this?".into(),
                },
                Part::Image {
                    url: "data:image/jpeg;base64,/9j/4AAQSkZJRg==".into(),
                    detail: Some("high".into()),
                },
            ],
            tool_calls: Vec::new(),
            tool_call_id: None,
        }],
        temperature: Some(0.5),
        max_tokens: Some(100),
        stop: vec!["END".into()],
        top_p: Some(0.25),
        seed: Some(42),
        presence_penalty: Some(0.5),
        frequency_penalty: Some(-0.5),
        user: Some("user-123".into()),
        ..ChatRequest::default()
    };
    let body = sent(&request).await;
    assert_eq!(
        body,
        json!({
            "contents": [{"role": "user", "parts": [
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}}
            ]}],
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "generationConfig": {
                "temperature": 0.5,
                "topP": 0.25,
                "maxOutputTokens": 100,
                "stopSequences": ["END"],
                "seed": 42,
                "presencePenalty": 0.5,
                "frequencyPenalty": -0.5
            }
        }),
        "`user` and the image `detail` have no Gemini equivalent"
    );
}

#[tokio::test]
async fn json_output_sets_the_mime_type_and_the_schema() {
    let json_object = ChatRequest {
        response_format: Some(ResponseFormat::JsonObject),
        ..ChatRequest::user("A city as JSON.")
    };
    assert_eq!(
        sent(&json_object).await["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    let json_schema = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "city".into(),
            strict: true,
            schema: json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "title": "City",
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "population": {"type": "integer", "minimum": 0, "default": 0},
                    "kind": {"const": "city"},
                    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "uniqueItems": true}
                },
                "required": ["name", "population"],
                "additionalProperties": false,
                "$defs": {"tag": {"type": ["string", "null"], "examples": ["old"]}}
            }),
        }),
        temperature: Some(0.0),
        ..ChatRequest::user("A city as JSON.")
    };
    assert_eq!(
        sent(&json_schema).await["generationConfig"],
        json!({
            "temperature": 0.0,
            "responseMimeType": "application/json",
            "responseJsonSchema": {
                "title": "City",
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "population": {"type": "integer", "minimum": 0},
                    "kind": {"enum": ["city"]},
                    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}}
                },
                "required": ["name", "population"],
                "additionalProperties": false,
                "$defs": {"tag": {"type": ["string", "null"]}}
            }
        })
    );
}

#[tokio::test]
async fn what_gemini_cannot_take_is_a_bad_request_and_never_sent() {
    let remote_image = ChatRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![Part::Image {
                url: "https://example.com/cat.png".into(),
                detail: None,
            }],
            tool_calls: Vec::new(),
            tool_call_id: None,
        }],
        ..ChatRequest::default()
    };
    let call_with = |arguments: &str| ChatRequest {
        messages: vec![
            Message::user("hi"),
            Message {
                role: Role::Assistant,
                content: Vec::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "get_time".into(),
                    arguments: arguments.into(),
                }],
                tool_call_id: None,
            },
            Message::tool_result("call_1", "14:05"),
        ],
        ..ChatRequest::default()
    };
    let orphan = ChatRequest {
        messages: vec![Message::user("hi"), Message::tool_result("nowhere", "x")],
        ..ChatRequest::default()
    };
    for request in [
        remote_image,
        call_with("{not json"),
        call_with("[1, 2]"),
        orphan,
    ] {
        let sim = SimProvider::start(Protocol::GenerateContent).await.unwrap();
        let adapter = adapter_for(&sim).await;
        for stream in [false, true] {
            let failure = if stream {
                adapter
                    .stream(
                        "m",
                        &request,
                        &understudy_core::CallOptions::connect(CONNECT),
                    )
                    .await
                    .err()
                    .unwrap()
            } else {
                adapter
                    .complete(
                        "m",
                        &request,
                        &understudy_core::CallOptions::connect(CONNECT),
                    )
                    .await
                    .unwrap_err()
            };
            assert_eq!(failure.code().as_str(), "bad_request", "{failure}");
        }
        assert!(sim.received().is_empty(), "nothing is sent");
    }
}

// === scripted calls through the simulator ===

fn scripted() -> Vec<SimToolCall> {
    vec![
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
        SimToolCall::new("get_weather", json!({"city": "Tokyo", "unit": "celsius"})),
        // Gemini 3 may send an id of its own; the client still gets ours.
        SimToolCall::new("get_time", json!({})).with_id("gemini-own-id"),
    ]
}

fn scripted_calls() -> Vec<(String, Value)> {
    vec![
        ("get_weather".into(), json!({"city": "Paris"})),
        (
            "get_weather".into(),
            json!({"city": "Tokyo", "unit": "celsius"}),
        ),
        ("get_time".into(), json!({})),
    ]
}

#[tokio::test]
async fn scripted_calls_round_trip_non_streamed() {
    let sim = SimProvider::start(Protocol::GenerateContent).await.unwrap();
    sim.push(Reply::ToolCalls(scripted()));
    let adapter = adapter_for(&sim).await;
    let c = adapter
        .complete(
            "gemini-test",
            &with_tools(None),
            &understudy_core::CallOptions::connect(CONNECT),
        )
        .await
        .unwrap();
    assert_eq!(calls(&c.tool_calls), scripted_calls());
    let ids: Vec<&str> = c.tool_calls.iter().map(|t| t.id.as_str()).collect();
    distinct_minted(&ids);
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.text, "");
}

#[tokio::test]
async fn scripted_calls_round_trip_streamed() {
    let sim = SimProvider::start(Protocol::GenerateContent).await.unwrap();
    sim.push(Reply::ToolCalls(scripted()));
    let adapter = adapter_for(&sim).await;
    let mut stream = adapter
        .stream(
            "gemini-test",
            &with_tools(None),
            &understudy_core::CallOptions::connect(CONNECT),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut ids = Vec::new();
    let mut finish = None;
    while let Some(event) = tokio::time::timeout(CONNECT, stream.next()).await.unwrap() {
        match event.unwrap() {
            StreamEvent::Native(n) => panic!("Gemini never forwards natively: {n:?}"),
            StreamEvent::Reasoning(_) => {}
            StreamEvent::ToolCall(c) => {
                assert_eq!(c.index as usize, seen.len(), "indexes count up");
                ids.push(c.id.unwrap());
                seen.push((
                    c.name.unwrap(),
                    serde_json::from_str::<Value>(&c.arguments).unwrap(),
                ));
            }
            StreamEvent::Finish { finish_reason, .. } => finish = Some(finish_reason),
            StreamEvent::Delta(t) => panic!("unexpected text {t:?}"),
        }
    }
    assert_eq!(seen, scripted_calls());
    distinct_minted(&ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(finish, Some(FinishReason::ToolCalls));
    assert!(
        sim.received()[0]
            .path
            .ends_with(":streamGenerateContent?alt=sse")
    );
}

#[tokio::test]
async fn a_scripted_call_gemini_cannot_form_is_invalid_output() {
    let broken = SimToolCall {
        id: None,
        name: "get_time".into(),
        arguments: "{broken".into(),
    };
    for stream in [false, true] {
        let sim = SimProvider::start(Protocol::GenerateContent).await.unwrap();
        sim.push(Reply::ToolCalls(vec![broken.clone()]));
        let adapter = adapter_for(&sim).await;
        let request = with_tools(None);
        let failure = if stream {
            let mut s = adapter
                .stream(
                    "m",
                    &request,
                    &understudy_core::CallOptions::connect(CONNECT),
                )
                .await
                .unwrap();
            s.next().await.unwrap().unwrap_err()
        } else {
            adapter
                .complete(
                    "m",
                    &request,
                    &understudy_core::CallOptions::connect(CONNECT),
                )
                .await
                .unwrap_err()
        };
        assert_eq!(failure.code().as_str(), "invalid_output", "{failure}");
    }
}

// === fuzz ===

/// Fragments of Gemini answers with calls, so random inputs reach deep.
const FRAGMENTS: &[&str] = &[
    "data: ",
    "\r\n\r\n",
    "\n\n",
    "\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "1",
    "\"functionCall\"",
    "\"name\"",
    "\"args\"",
    "\"get_weather\"",
    "\"thoughtSignature\"",
    "\"finishReason\"",
    "\"STOP\"",
    "\"MALFORMED_FUNCTION_CALL\"",
    "{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":1}}}]}}]}",
    "{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\"}},{\"functionCall\":{}}]},\"finishReason\":\"STOP\"}]}",
    "{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":[1]}}]},\"finishReason\":\"STOP\"}]}",
    "{\"candidates\":[{\"finishReason\":\"MALFORMED_FUNCTION_CALL\"}]}",
    "é",
];

fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..60)
        .prop_map(|parts| parts.concat().into_bytes())
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), soup()]
}

proptest! {
    #[test]
    fn parsing_never_panics_and_calls_are_well_formed(data in bytes(), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        if let Ok(c) = decode_response(Protocol::GenerateContent, "m", 200, HeaderMap::new(), &data) {
            for call in &c.tool_calls {
                prop_assert!(is_minted(&call.id));
                prop_assert!(!call.name.is_empty());
                prop_assert!(serde_json::from_str::<Value>(&call.arguments).is_ok());
            }
        }
        let chunks = split(&data, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        for event in decode_stream(Protocol::GenerateContent, "m", &refs) {
            if let Ok(StreamEvent::ToolCall(c)) = event {
                prop_assert!(c.id.as_deref().is_some_and(is_minted));
                prop_assert!(c.name.as_deref().is_some_and(|n| !n.is_empty()));
                prop_assert!(serde_json::from_str::<Value>(&c.arguments).is_ok());
            }
        }
    }

    #[test]
    fn any_split_of_the_recorded_stream_gives_the_same_calls(cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let bytes = fixture("stream_function_calls.sse");
        let whole = without_ids(decode_stream(Protocol::GenerateContent, "m", &[&bytes]));
        let chunks = split(&bytes, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let pieces = without_ids(decode_stream(Protocol::GenerateContent, "m", &refs));
        prop_assert_eq!(&whole, &pieces);
        prop_assert_eq!(whole.len(), 4, "{:?}", whole);
    }
}
