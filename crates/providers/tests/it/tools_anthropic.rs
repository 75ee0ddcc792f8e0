//! Tools, images and JSON output over Anthropic's Messages API:
//! recorded answers and streams (`tests/data/anthropic/`) through the public
//! decoders, the exact request JSON a simulator receives
//! (`tools_anthropic/requests.rs`), tool-call round trips through the
//! simulator, and fuzzing of the new stream parsing.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use understudy_providers::{decode_response, decode_stream};
use understudy_testkit::{Reply, SimProvider, SimToolCall};
use understudy_types::{
    ChatRequest, Completion, Failure, FinishReason, Message, Part, Protocol, Role, StreamEvent,
    Tool, ToolCall, Usage,
};

use crate::common::{adapter_for, split};

mod requests;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/anthropic/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn decode(name: &str) -> Result<Completion, Failure> {
    decode_response(
        Protocol::Messages,
        "asked-model",
        200,
        HeaderMap::new(),
        &fixture(name),
    )
}

fn args(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|e| panic!("arguments of {} do not parse: {e}", call.id))
}

/// A streamed answer put back together: its text, its tool calls (by
/// index) and how it ended.
#[derive(Debug, PartialEq)]
struct Streamed {
    text: String,
    calls: Vec<ToolCall>,
    end: Result<FinishReason, String>,
}

fn reassemble(events: &[Result<StreamEvent, Failure>]) -> Streamed {
    let mut text = String::new();
    let mut calls: BTreeMap<u32, ToolCall> = BTreeMap::new();
    let mut end = Err("no terminal event".to_owned());
    for (at, event) in events.iter().enumerate() {
        match event {
            Ok(StreamEvent::Delta(t)) => text.push_str(t),
            // The provider's own events, for a natively forwarded request.
            Ok(StreamEvent::Native(_) | StreamEvent::Reasoning(_)) => {}
            Ok(StreamEvent::ToolCall(d)) => {
                let first = !calls.contains_key(&d.index);
                assert_eq!(
                    first,
                    d.id.is_some() && d.name.is_some(),
                    "the first delta of call {} (and only it) names it: {events:?}",
                    d.index
                );
                let call = calls.entry(d.index).or_insert_with(|| ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                if let Some(id) = &d.id {
                    call.id.clone_from(id);
                }
                if let Some(name) = &d.name {
                    call.name.clone_from(name);
                }
                call.arguments.push_str(&d.arguments);
            }
            Ok(StreamEvent::Finish { finish_reason, .. }) => {
                assert_eq!(at, events.len() - 1, "events after the finish");
                end = Ok(finish_reason.clone());
            }
            Err(f) => {
                assert_eq!(at, events.len() - 1, "events after the failure");
                end = Err(f.code().as_str().to_owned());
            }
        }
    }
    let indices: Vec<u32> = calls.keys().copied().collect();
    assert_eq!(
        indices,
        (0..u32::try_from(calls.len()).unwrap()).collect::<Vec<_>>(),
        "tool calls are numbered 0, 1, … in order"
    );
    Streamed {
        text,
        calls: calls.into_values().collect(),
        end,
    }
}

fn stream_bytes(name: &str, chunks: usize) -> Vec<Result<StreamEvent, Failure>> {
    let data = fixture(name);
    let size = data.len().div_ceil(chunks.max(1)).max(1);
    let pieces: Vec<&[u8]> = data.chunks(size).collect();
    decode_stream(Protocol::Messages, "asked-model", &pieces)
}

// === tools and a tool loop, for requests and round trips ===

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: Some(json!({
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"]
        })),
        strict: None,
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// A tool loop whose history another provider wrote: OpenAI's `call_…` ids
/// and ids with characters Anthropic refuses.
fn tool_loop() -> ChatRequest {
    ChatRequest {
        system: Some("Be brief.".into()),
        messages: vec![
            Message::user("Weather in Paris and Tokyo?"),
            Message {
                role: Role::Assistant,
                content: vec![Part::Text {
                    text: "Checking both.".into(),
                }],
                tool_calls: vec![
                    call("call_abc123", "get_weather", r#"{"location": "Paris"}"#),
                    call(
                        "gemini:get_weather/1.x",
                        "get_weather",
                        r#"{"location": "Tokyo"}"#,
                    ),
                ],
                tool_call_id: None,
            },
            Message::tool_result("call_abc123", "18°C, cloudy"),
            Message::tool_result("gemini:get_weather/1.x", "25°C, sunny"),
            Message::user("And which is warmer?"),
        ],
        tools: vec![weather_tool()],
        ..ChatRequest::default()
    }
}

// === recorded answers ===

#[test]
fn a_tool_use_answer_is_a_tool_call() {
    let c = decode("tool_use.json").unwrap();
    assert_eq!(c.text, "I'll check the weather in Paris.");
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.model, "claude-sonnet-4-5-20250929");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 472,
            output_tokens: 89,
            ..Usage::default()
        })
    );
    assert_eq!(c.tool_calls.len(), 1);
    let call = &c.tool_calls[0];
    assert_eq!(call.id, "toolu_01A09q90qw90lq917835lq9", "the id as sent");
    assert_eq!(call.name, "get_weather");
    assert_eq!(
        args(call),
        json!({"location": "Paris, France", "unit": "celsius"})
    );
    assert!(
        !call.arguments.contains(": "),
        "compact JSON: {}",
        call.arguments
    );
}

#[test]
fn parallel_tool_use_keeps_the_order_and_leaves_thinking_out() {
    let c = decode("tool_use_parallel.json").unwrap();
    assert_eq!(c.text, "", "a thinking block is not text");
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    let got: Vec<(&str, &str, Value)> = c
        .tool_calls
        .iter()
        .map(|t| (t.id.as_str(), t.name.as_str(), args(t)))
        .collect();
    assert_eq!(
        got,
        [
            (
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "get_weather",
                json!({"location": "Paris, France"})
            ),
            (
                "toolu_01VjQ3oE8wDbHmEi8Ks2b6Ye",
                "get_weather",
                json!({"location": "Tokyo, Japan", "unit": "celsius"})
            ),
            ("toolu_01Xq5Lm0Zt3Rb8Wc2Pn6Hk4Y", "get_time", json!({})),
        ]
    );
    assert_eq!(c.tool_calls[2].arguments, "{}");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 512 + 40,
            output_tokens: 143,
            cache_read_input_tokens: 40,
            ..Usage::default()
        })
    );
}

#[test]
fn a_tool_use_input_that_is_not_an_object_is_invalid_output() {
    let f = decode("tool_use_bad_input.json").unwrap_err();
    assert_eq!(f.code().as_str(), "invalid_output", "{f}");
}

#[test]
fn a_json_answer_is_text_that_parses() {
    let c = decode("json_output.json").unwrap();
    assert_eq!(c.finish_reason, FinishReason::Stop);
    assert!(c.tool_calls.is_empty());
    let v: Value = serde_json::from_str(&c.text).unwrap();
    assert_eq!(v["city"], "Paris");
    assert_eq!(v["conditions"][1], "light rain");
}

#[test]
fn a_refusal_and_an_empty_answer_keep_their_codes() {
    assert_eq!(
        decode("refusal.json").unwrap_err().code().as_str(),
        "content_filter"
    );
    let empty = br#"{"type":"message","model":"m","content":[],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":0}}"#;
    let f = decode_response(Protocol::Messages, "m", 200, HeaderMap::new(), empty).unwrap_err();
    assert_eq!(
        f.code().as_str(),
        "empty_response",
        "no text and no tool call"
    );
}

// === recorded streams ===

fn streamed_calls() -> Vec<(String, String, Value)> {
    vec![
        (
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            "get_weather".into(),
            json!({"location": "Paris, France", "unit": "celsius"}),
        ),
        (
            "toolu_01VjQ3oE8wDbHmEi8Ks2b6Ye".into(),
            "get_weather".into(),
            json!({"location": "Tokyo, Japan"}),
        ),
        (
            "toolu_01Xq5Lm0Zt3Rb8Wc2Pn6Hk4Y".into(),
            "get_time".into(),
            json!({}),
        ),
    ]
}

#[test]
fn a_streamed_tool_use_reassembles() {
    let events = stream_bytes("stream_tool_use.sse", 1);
    let got = reassemble(&events);
    assert_eq!(
        got.text, "Let me check the weather.",
        "thinking is left out"
    );
    assert_eq!(got.end, Ok(FinishReason::ToolCalls));
    let calls: Vec<(String, String, Value)> = got
        .calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), args(c)))
        .collect();
    assert_eq!(calls, streamed_calls());
    assert_eq!(
        events.last().unwrap().as_ref().unwrap(),
        &StreamEvent::Finish {
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage {
                input_tokens: 472,
                output_tokens: 89,
                ..Usage::default()
            }),
            model: Some("claude-sonnet-4-5-20250929".into()),
        }
    );
}

#[test]
fn streamed_tool_call_deltas_are_shaped_like_openai_s() {
    let events = stream_bytes("stream_tool_use.sse", 1);
    let deltas: Vec<(u32, Option<&str>, Option<&str>, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::ToolCall(d)) => Some((
                d.index,
                d.id.as_deref(),
                d.name.as_deref(),
                d.arguments.as_str(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        [
            (
                0,
                Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6"),
                Some("get_weather"),
                ""
            ),
            (0, None, None, "{\"location\":"),
            (0, None, None, " \"Paris, Fra"),
            (0, None, None, "nce\", \"unit\": \"celsius\"}"),
            (
                1,
                Some("toolu_01VjQ3oE8wDbHmEi8Ks2b6Ye"),
                Some("get_weather"),
                ""
            ),
            (1, None, None, "{\"location\": \"To"),
            (1, None, None, "kyo, Japan\"}"),
            (
                2,
                Some("toolu_01Xq5Lm0Zt3Rb8Wc2Pn6Hk4Y"),
                Some("get_time"),
                ""
            ),
            // No arguments at all: `{}`, so that they parse.
            (2, None, None, "{}"),
        ],
        "the index counts tool_use blocks, not content blocks"
    );
}

#[test]
fn a_streamed_tool_use_cut_short_is_interrupted() {
    let data = String::from_utf8(fixture("stream_tool_use.sse")).unwrap();
    let cut = data
        .find("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}")
        .unwrap();
    let events = decode_stream(Protocol::Messages, "m", &[&data.as_bytes()[..cut]]);
    let got = reassemble(&events);
    assert_eq!(got.end, Err("stream_interrupted".into()));
    assert_eq!(got.calls.len(), 2, "what arrived was relayed");
}

#[test]
fn a_tool_use_block_that_starts_with_its_input_keeps_it() {
    let sse = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"a\":1}}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    let got = reassemble(&decode_stream(Protocol::Messages, "m", &[sse.as_bytes()]));
    assert_eq!(got.end, Ok(FinishReason::ToolCalls));
    assert_eq!(got.calls[0].arguments, "{\"a\":1}");
}

// === round trips through the simulator ===

fn scripted_calls() -> Vec<SimToolCall> {
    vec![
        SimToolCall::new(
            "get_weather",
            json!({"location": "Paris, France", "unit": "celsius", "days": [1, 2, 3]}),
        ),
        SimToolCall::new("get_time", json!({})).with_id("toolu_01FixedId"),
    ]
}

#[tokio::test]
async fn a_tool_call_answer_from_the_simulator() {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.push(Reply::ToolCalls(scripted_calls()));
    let adapter = adapter_for(&sim).await;
    let c = adapter
        .complete(
            "claude-test",
            &tool_loop(),
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.tool_calls.len(), 2);
    assert!(
        c.tool_calls[0].id.starts_with("toolu_"),
        "{:?}",
        c.tool_calls
    );
    assert_eq!(c.tool_calls[1].id, "toolu_01FixedId");
    assert_eq!(
        args(&c.tool_calls[0]),
        json!({"location": "Paris, France", "unit": "celsius", "days": [1, 2, 3]})
    );
    assert_eq!(args(&c.tool_calls[1]), json!({}));
}

#[tokio::test]
async fn a_streamed_tool_call_round_trip() {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.push(Reply::ToolCalls(scripted_calls()));
    let adapter = adapter_for(&sim).await;
    let mut stream = adapter
        .stream(
            "claude-test",
            &tool_loop(),
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
    {
        events.push(event);
    }
    let got = reassemble(&events);
    assert_eq!(got.end, Ok(FinishReason::ToolCalls), "{events:?}");
    assert_eq!(got.text, "");
    assert_eq!(got.calls.len(), 2);
    assert!(got.calls[0].id.starts_with("toolu_"));
    assert_eq!(got.calls[0].name, "get_weather");
    assert_eq!(
        args(&got.calls[0]),
        json!({"location": "Paris, France", "unit": "celsius", "days": [1, 2, 3]})
    );
    assert_eq!(got.calls[1].id, "toolu_01FixedId");
    assert_eq!(args(&got.calls[1]), json!({}));
    let fragments = events
        .iter()
        .filter(|e| {
            matches!(e, Ok(StreamEvent::ToolCall(d)) if d.index == 0 && !d.arguments.is_empty())
        })
        .count();
    assert!(
        fragments >= 3,
        "the arguments came in {fragments} fragments"
    );
    assert_eq!(sim.received()[0].json()["stream"], true);
}

// === fuzzing ===

/// Whole events of tool-use streams (and some that break the rules), so
/// that random sequences of them reach deep paths of the parser.
const EVENTS: &[&str] = &[
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"input\":{\"a\":[1]}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"tool_use\",\"id\":7}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"1}\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":9,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"}\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\"}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"refusal\"}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    "data: {\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":\"tool_use\"}}\n\n",
    "data: {\"type\":\"content_block_delta\",\"index\":18446744073709551616}\n\n",
    "data: {\n\n",
    "{\n",
    "\n",
];

fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(EVENTS), 0..40)
        .prop_map(|parts| parts.concat().into_bytes())
}

proptest! {
    #[test]
    fn any_split_of_a_recorded_tool_stream_reassembles_the_same(cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let data = fixture("stream_tool_use.sse");
        let whole = reassemble(&decode_stream(Protocol::Messages, "m", &[data.as_slice()]));
        let chunks = split(&data, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let events = decode_stream(Protocol::Messages, "m", &refs);
        let pieces = reassemble(&events);
        prop_assert_eq!(&pieces, &whole);
        prop_assert_eq!(pieces.end, Ok(FinishReason::ToolCalls));
        prop_assert_eq!(pieces.calls.len(), 3);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_end_once(
        data in prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), soup()],
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let chunks = split(&data, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let events = decode_stream(Protocol::Messages, "m", &refs);
        let terminal = |e: &Result<StreamEvent, Failure>| {
            matches!(e, Err(_) | Ok(StreamEvent::Finish { .. }))
        };
        prop_assert_eq!(events.iter().filter(|e| terminal(e)).count(), 1, "{:?}", events);
        prop_assert!(events.last().is_some_and(terminal));
        // Each call is named by its first delta only, and numbered 0, 1, ….
        let _ = reassemble(&events);
    }
}
