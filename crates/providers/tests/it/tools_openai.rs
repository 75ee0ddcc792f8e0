//! Tools, images and structured output through the OpenAI-compatible
//! adapter, both ways.
//!
//! - Answers: recorded payloads in `tests/data/openai/` (OpenAI's own
//!   recordings from openai-python's test snapshots) and `tests/data/groq/`
//!   (Groq's, from vercel/ai's fixtures and issue reports), decoded through
//!   the same parsers a live response goes through.
//! - Requests (`tools_openai/requests.rs`): a real adapter sends to a
//!   simulator over HTTP, and the JSON the simulator received is compared
//!   whole, including that a plain request is byte for byte what it was
//!   before tools existed.
//! - Round trips: the simulator's tool calls, streamed in fragments, come
//!   back as calls whose arguments parse.
//! - Fuzz (`tools_openai/fuzz.rs`): the streamed tool-call parser
//!   reassembles any fragmentation of any calls, and never panics on soups
//!   of tool-call fragments.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use understudy_core::{Adapter, AdapterFactory};
use understudy_providers::{Providers, decode_response, decode_stream};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};
use understudy_types::{
    ChatRequest, Completion, Failure, FinishReason, Message, Protocol, StreamEvent, Tool, ToolCall,
    Usage,
};

mod fuzz;
mod requests;

// === helpers ===

fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A non-streamed body, as a 200 (or `status`).
fn answer(dir: &str, name: &str, status: u16) -> Result<Completion, Failure> {
    decode_response(
        Protocol::ChatCompletions,
        "asked-model",
        status,
        HeaderMap::new(),
        &fixture(dir, name),
    )
}

/// A streamed answer, reassembled the way a client does it, with the
/// contract of the neutral stream checked on the way.
#[derive(Debug, Default, PartialEq)]
struct Reassembled {
    text: String,
    /// `(id, name, arguments)` per call, in index order.
    calls: Vec<(String, String, String)>,
    /// `Ok((finish_reason, usage))` or `Err(failure code)`.
    end: Option<Result<(FinishReason, Option<Usage>), String>>,
}

fn reassemble(events: Vec<Result<StreamEvent, Failure>>) -> Reassembled {
    let mut out = Reassembled::default();
    let count = events.len();
    for (at, event) in events.into_iter().enumerate() {
        assert!(out.end.is_none(), "an event after the terminal one");
        match event {
            Ok(StreamEvent::Delta(text)) => out.text.push_str(&text),
            Ok(StreamEvent::Reasoning(_)) => {}
            Ok(StreamEvent::Native(e)) => {
                panic!("no native events without a native request: {e:?}")
            }
            Ok(StreamEvent::ToolCall(d)) => {
                let index = usize::try_from(d.index).unwrap();
                if index == out.calls.len() {
                    // A new call: its first fragment names it.
                    let id = d.id.expect("the first fragment of a call carries its id");
                    assert!(!id.is_empty());
                    out.calls
                        .push((id, d.name.unwrap_or_default(), String::new()));
                } else {
                    assert!(index < out.calls.len(), "index {index} skips a call");
                    assert_eq!(d.id, None, "an id on a later fragment of call {index}");
                    if let Some(name) = d.name {
                        assert!(out.calls[index].1.is_empty(), "a second name for {index}");
                        out.calls[index].1 = name;
                    }
                }
                out.calls[index].2.push_str(&d.arguments);
            }
            Ok(StreamEvent::Finish {
                finish_reason,
                usage,
                ..
            }) => out.end = Some(Ok((finish_reason, usage))),
            Err(f) => out.end = Some(Err(f.code().as_str().to_owned())),
        }
        if out.end.is_some() {
            assert_eq!(at + 1, count, "the terminal event is the last");
        }
    }
    out
}

fn stream_fixture(dir: &str, name: &str) -> Reassembled {
    let bytes = fixture(dir, name);
    let whole = reassemble(decode_stream(
        Protocol::ChatCompletions,
        "asked-model",
        &[&bytes],
    ));
    // Byte by byte, the same answer.
    let bytes_one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    let split = reassemble(decode_stream(
        Protocol::ChatCompletions,
        "asked-model",
        &bytes_one_by_one,
    ));
    assert_eq!(whole, split, "{name}: chunking changed the answer");
    whole
}

fn parse(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|e| panic!("{arguments:?}: {e}"))
}

/// An adapter for a simulated provider named `name` (`openai` is the one
/// that gets `max_completion_tokens`).
fn adapter(sim: &SimProvider, name: &str) -> Arc<dyn Adapter> {
    let settings = TestGateway::builder()
        .provider(name, sim)
        .settings()
        .unwrap();
    Providers.build(&settings.providers[name]).unwrap()
}

const PATIENCE: Duration = Duration::from_secs(5);

/// Sends `request` once (non-streamed) and returns the body the simulator
/// received.
async fn sent(name: &str, request: &ChatRequest) -> String {
    let sim = SimProvider::openai().await.unwrap();
    let _ = adapter(&sim, name)
        .complete(
            "p-model",
            request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await;
    let received = sim.received();
    assert_eq!(received.len(), 1);
    String::from_utf8(received[0].body.to_vec()).unwrap()
}

/// Collects a streamed answer from an adapter.
async fn collect(adapter: &Arc<dyn Adapter>, request: &ChatRequest) -> Reassembled {
    let mut stream = match adapter
        .stream(
            "p-model",
            request,
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await
    {
        Ok(s) => s,
        Err(f) => {
            return Reassembled {
                end: Some(Err(f.code().as_str().to_owned())),
                ..Reassembled::default()
            };
        }
    };
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
        events.push(event);
    }
    reassemble(events)
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("The weather in a city.".into()),
        parameters: Some(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": false
        })),
        strict: Some(true),
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn assistant_calls(text: &str, calls: Vec<ToolCall>) -> Message {
    Message {
        tool_calls: calls,
        ..Message::assistant(text)
    }
}

// === answers: recorded payloads ===

#[test]
fn a_recorded_tool_call_answer() {
    let c = answer("openai", "tool_calls.json", 200).unwrap();
    assert_eq!(c.text, "");
    assert_eq!(
        c.tool_calls,
        vec![call(
            "call_Y6qJ7ofLgOrBnMD5WbVAeiRV",
            "GetWeatherArgs",
            r#"{"city":"Edinburgh","country":"UK","units":"c"}"#
        )]
    );
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.model, "gpt-4o-2024-08-06");
    assert_eq!(
        c.usage,
        Some(Usage {
            input_tokens: 76,
            output_tokens: 24,
            ..Usage::default()
        })
    );
}

#[test]
fn recorded_parallel_tool_calls_keep_their_order_and_ids() {
    let c = answer("openai", "parallel_tool_calls.json", 200).unwrap();
    let calls: Vec<(&str, &str, Value)> = c
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), parse(&c.arguments)))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "call_fdNz3vOBKYgOIpMdWotB9MjY",
                "GetWeatherArgs",
                json!({"city": "Edinburgh", "country": "GB", "units": "c"})
            ),
            (
                "call_h1DWI1POMJLb0KwIyQHWXD4p",
                "get_stock_price",
                json!({"ticker": "AAPL", "exchange": "NASDAQ"})
            ),
        ]
    );
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn a_recorded_json_schema_answer_is_text_that_parses() {
    let c = answer("openai", "json_schema.json", 200).unwrap();
    assert_eq!(
        parse(&c.text),
        json!({"city": "San Francisco", "temperature": 58, "units": "f"})
    );
    assert!(c.tool_calls.is_empty());
    assert_eq!(c.finish_reason, FinishReason::Stop);
}

#[test]
fn a_recorded_streamed_tool_call_reassembles() {
    // The first chunk carries the role and the call's head together.
    let got = stream_fixture("openai", "stream_tool_call.sse");
    assert_eq!(got.text, "");
    assert_eq!(
        got.calls,
        vec![(
            "call_4XzlGBLtUe9dy3GVNV4jhq7h".to_owned(),
            "get_weather".to_owned(),
            r#"{"city":"New York City"}"#.to_owned()
        )]
    );
    assert_eq!(
        got.end,
        Some(Ok((
            FinishReason::ToolCalls,
            Some(Usage {
                input_tokens: 44,
                output_tokens: 16,
                ..Usage::default()
            })
        )))
    );
}

#[test]
fn recorded_streamed_parallel_tool_calls_relay_each_fragment_in_order() {
    let bytes = fixture("openai", "stream_parallel_tool_calls.sse");
    let events = decode_stream(Protocol::ChatCompletions, "asked-model", &[&bytes]);
    // One event per fragment, in the order they came: the head of call 0
    // and its 11 pieces, then the head of call 1 and its 9, then the finish.
    let shape: Vec<(u32, bool, bool)> = events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::ToolCall(d)) => Some((d.index, d.id.is_some(), d.name.is_some())),
            _ => None,
        })
        .collect();
    let mut want = vec![(0, true, true)];
    want.extend(std::iter::repeat_n((0, false, false), 11));
    want.push((1, true, true));
    want.extend(std::iter::repeat_n((1, false, false), 9));
    assert_eq!(shape, want);
    let got = stream_fixture("openai", "stream_parallel_tool_calls.sse");
    let calls: Vec<(&str, &str, Value)> = got
        .calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), name.as_str(), parse(args)))
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "call_JMW1whyEaYG438VE1OIflxA2",
                "GetWeatherArgs",
                json!({"city": "Edinburgh", "country": "GB", "units": "c"})
            ),
            (
                "call_DNYTawLBoN8fj3KN6qU9N1Ou",
                "get_stock_price",
                json!({"ticker": "AAPL", "exchange": "NASDAQ"})
            ),
        ]
    );
    assert_eq!(
        got.end,
        Some(Ok((
            FinishReason::ToolCalls,
            Some(Usage {
                input_tokens: 149,
                output_tokens: 60,
                ..Usage::default()
            })
        )))
    );
}

#[test]
fn groq_tool_calls_recorded() {
    // Non-streamed: no `content` key at all, an id without `call_`.
    let c = answer("groq", "tool_call.json", 200).unwrap();
    assert_eq!(c.tool_calls, vec![call("ax9fskhev", "weather", "{}")]);
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    // Streamed: the whole call in one chunk, usage in `x_groq` and on top.
    let got = stream_fixture("groq", "stream_tool_call.sse");
    assert_eq!(
        got.calls,
        vec![(
            "tk85n1k4m".to_owned(),
            "weather".to_owned(),
            "{}".to_owned()
        )]
    );
    assert_eq!(
        got.end,
        Some(Ok((
            FinishReason::ToolCalls,
            Some(Usage {
                input_tokens: 210,
                output_tokens: 15,
                ..Usage::default()
            })
        )))
    );
}

#[test]
fn groq_output_failures_are_invalid_output_and_its_limits_bad_requests() {
    // The model's malformed call or invalid JSON: another target may do
    // better, and the client did nothing wrong.
    for file in ["tool_use_failed_400.json", "json_validate_failed_400.json"] {
        let f = answer("groq", file, 400).unwrap_err();
        assert_eq!(f.code().as_str(), "invalid_output", "{file}: {f}");
        assert_eq!(f.status, Some(400));
    }
    // Streamed, Groq sends it as an `error` event (anomalyco/opencode#1018).
    let got = stream_fixture("groq", "stream_tool_use_failed.sse");
    assert_eq!(got.end, Some(Err("invalid_output".to_owned())));
    // JSON mode with tools is a limit of the target: a bad request there.
    let f = answer("groq", "json_mode_with_tools_400.json", 400).unwrap_err();
    assert_eq!(f.code().as_str(), "bad_request", "{f}");
}

// === answers: what compatible servers do differently ===

/// A stream of `data:` events made of these deltas, then a finish chunk
/// (`finish`), then `[DONE]`.
fn sse(deltas: &[Value], finish: &str) -> Vec<u8> {
    let mut out = String::new();
    for d in deltas {
        let chunk = json!({"choices": [{"index": 0, "delta": d, "finish_reason": null}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]});
    out.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    out.into_bytes()
}

fn decode(bytes: &[u8]) -> Reassembled {
    reassemble(decode_stream(Protocol::ChatCompletions, "m", &[bytes]))
}

#[test]
fn several_fragments_in_one_chunk_are_relayed_in_order() {
    let got = decode(&sse(
        &[
            json!({"tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": "{\"x\":"}},
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "b", "arguments": "{\"y\":"}}
            ]}),
            json!({"tool_calls": [
                {"index": 1, "function": {"arguments": "2}"}},
                {"index": 0, "function": {"arguments": "1}"}}
            ]}),
        ],
        "tool_calls",
    ));
    assert_eq!(
        got.calls,
        vec![
            ("call_a".into(), "a".into(), "{\"x\":1}".into()),
            ("call_b".into(), "b".into(), "{\"y\":2}".into())
        ]
    );
}

#[test]
fn text_before_the_calls_is_kept() {
    let got = decode(&sse(
        &[
            json!({"role": "assistant", "content": "Let me check."}),
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": "{}"}}]}),
        ],
        "tool_calls",
    ));
    assert_eq!(got.text, "Let me check.");
    assert_eq!(got.calls.len(), 1);
    assert!(matches!(got.end, Some(Ok((FinishReason::ToolCalls, _)))));
}

#[test]
fn servers_that_bend_the_shape_still_give_clean_calls() {
    // A repeated id and name on every fragment, `"stop"` as the finish
    // reason of a tool-call answer, and arguments sent as an object.
    let got = decode(&sse(
        &[
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": "{\"x\""}}]}),
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "a", "arguments": ":1}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "b", "arguments": {"y": 2}}}]}),
        ],
        "stop",
    ));
    assert_eq!(
        got.calls,
        vec![
            ("call_a".into(), "a".into(), "{\"x\":1}".into()),
            ("call_b".into(), "b".into(), "{\"y\":2}".into())
        ]
    );
    assert!(matches!(got.end, Some(Ok((FinishReason::ToolCalls, _)))));
    // Every call at index 0, told apart by their ids; no index at all.
    let got = decode(&sse(
        &[
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "a", "arguments": "{}"}}]}),
            json!({"tool_calls": [{"index": 0, "id": "call_b", "function": {"name": "b", "arguments": "{"}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}),
            json!({"tool_calls": [{"id": "call_c", "function": {"name": "c", "arguments": "{"}}]}),
            json!({"tool_calls": [{"function": {"arguments": "}"}}]}),
        ],
        "tool_calls",
    ));
    assert_eq!(
        got.calls,
        vec![
            ("call_a".into(), "a".into(), "{}".into()),
            ("call_b".into(), "b".into(), "{}".into()),
            ("call_c".into(), "c".into(), "{}".into())
        ]
    );
    // No id: one is minted, once per call.
    let got = decode(&sse(
        &[
            json!({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{}"}}]}),
            json!({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]}),
        ],
        "tool_calls",
    ));
    assert_eq!(got.calls.len(), 2);
    assert!(got.calls.iter().all(|(id, ..)| id.starts_with("call_")));
    assert_ne!(got.calls[0].0, got.calls[1].0);
    // The same, not streamed.
    let body = json!({"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "a", "arguments": {"x": 1}}}
    ]}, "finish_reason": "stop"}]});
    let c = decode_response(
        Protocol::ChatCompletions,
        "m",
        200,
        HeaderMap::new(),
        body.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(c.tool_calls.len(), 1);
    assert!(c.tool_calls[0].id.starts_with("call_"));
    assert_eq!(parse(&c.tool_calls[0].arguments), json!({"x": 1}));
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn an_answer_with_neither_text_nor_calls_is_still_empty() {
    let got = decode(&sse(
        &[json!({"role": "assistant", "content": null, "tool_calls": []})],
        "stop",
    ));
    assert_eq!(got.end, Some(Err("empty_response".to_owned())));
    let body = br#"{"choices": [{"message": {"content": null, "tool_calls": null}, "finish_reason": "stop"}]}"#;
    let f =
        decode_response(Protocol::ChatCompletions, "m", 200, HeaderMap::new(), body).unwrap_err();
    assert_eq!(f.code().as_str(), "empty_response");
}

// === round trips through the simulator ===

fn scripted_calls() -> Vec<SimToolCall> {
    vec![
        SimToolCall::new("get_weather", json!({"city": "Paris", "units": "c"}))
            .with_id("call_scripted00000000000000"),
        SimToolCall::new("get_weather", json!({"city": "Zürich", "units": "c"})),
    ]
}

#[tokio::test]
async fn streamed_parallel_tool_calls_round_trip() {
    let sim = SimProvider::openai().await.unwrap();
    sim.push(Reply::ToolCalls(scripted_calls()));
    let request = ChatRequest {
        tools: vec![weather_tool()],
        ..ChatRequest::user("Weather in Paris and Zürich?")
    };
    let got = collect(&adapter(&sim, "p"), &request).await;
    assert_eq!(got.text, "");
    assert_eq!(got.calls.len(), 2);
    assert_eq!(got.calls[0].0, "call_scripted00000000000000");
    let minted = &got.calls[1].0;
    assert!(
        minted.starts_with("call_") && minted.len() == 29,
        "{minted}"
    );
    for ((_, name, args), want) in got.calls.iter().zip(["Paris", "Zürich"]) {
        assert_eq!(name, "get_weather");
        assert_eq!(parse(args), json!({"city": want, "units": "c"}));
    }
    let Some(Ok((FinishReason::ToolCalls, Some(usage)))) = got.end else {
        panic!("{:?}", got.end);
    };
    assert!(usage.output_tokens > 0);
    // The arguments really came in pieces.
    let sent = String::from_utf8(sim.received()[0].body.to_vec()).unwrap();
    assert!(sent.contains(r#""stream":true"#));
}

#[tokio::test]
async fn non_streamed_tool_calls_round_trip() {
    let sim = SimProvider::openai().await.unwrap();
    sim.push(Reply::ToolCalls(scripted_calls()));
    let c = adapter(&sim, "p")
        .complete(
            "p-model",
            &ChatRequest::user("Weather?"),
            &understudy_core::CallOptions::connect(PATIENCE),
        )
        .await
        .unwrap();
    assert_eq!(c.text, "");
    assert_eq!(c.finish_reason, FinishReason::ToolCalls);
    assert_eq!(c.tool_calls.len(), 2);
    assert_eq!(c.tool_calls[0].id, "call_scripted00000000000000");
    assert!(c.tool_calls[1].id.starts_with("call_"));
    assert_eq!(
        parse(&c.tool_calls[1].arguments),
        json!({"city": "Zürich", "units": "c"})
    );
}

/// The simulator's stream is OpenAI's: a head per call with empty
/// arguments, then at least two fragments, `tool_calls` as the finish
/// reason, usage only when asked for, `[DONE]`.
#[tokio::test]
async fn the_simulator_streams_openai_s_tool_call_shape() {
    let sim = SimProvider::openai().await.unwrap();
    sim.push(Reply::ToolCalls(scripted_calls()));
    let body =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let response = understudy_testkit::http_client()
        .post(format!("{}/chat/completions", sim.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    let data: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    let mut fragments: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    for c in &chunks[1..chunks.len() - 1] {
        let call = &c["choices"][0]["delta"]["tool_calls"][0];
        fragments
            .entry(call["index"].as_u64().unwrap())
            .or_default()
            .push(call.clone());
    }
    for (index, calls) in &fragments {
        assert_eq!(calls[0]["type"], "function", "{index}");
        assert_eq!(calls[0]["function"]["arguments"], "", "{index}");
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
        assert!(
            calls.len() >= 3,
            "call {index} in {} fragments",
            calls.len() - 1
        );
        assert!(calls[1..].iter().all(|c| c.get("id").is_none()));
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "usage unasked"
    );
}
