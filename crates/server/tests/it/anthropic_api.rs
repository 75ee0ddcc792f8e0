//! `POST /v1/messages`, `POST /v1/messages/count_tokens` and `GET
//! /v1/models` with `anthropic-version`, through a real HTTP client against
//! the real server over simulated providers: what each target receives for
//! an Anthropic request, the answer and event shapes, errors and statuses
//! in Anthropic's shape, `x-api-key`, and the refusal and failover tables.

use serde_json::{Value, json};
use understudy_testkit::{
    Refusal, Reply, SimProvider, SimToolCall, StreamEnd, StreamSpec, TestGateway, eventually,
};

use crate::common::{self, Answer, TestServer};

/// An OpenAI-compatible `groq` (the primary) and an Anthropic `claude`,
/// with short timeouts.
async fn setup() -> (SimProvider, SimProvider, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml("[timeouts]\nattempt = 0.5\nrequest = 0.8\nfirst_token = 0.5\nstream_idle = 0.5\n[routes]\nfast = [\"claude:claude-fast\", \"groq\"]")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    (groq, claude, s)
}

/// An [`Answer`]'s Anthropic events.
trait Events {
    /// The `(event, data)` pairs of an SSE body, `ping`s left out; each
    /// data's `type` must be its event's name.
    fn events(&self) -> Vec<(String, Value)>;
}

impl Events for Answer {
    fn events(&self) -> Vec<(String, Value)> {
        common::anthropic_events(&self.body)
            .into_iter()
            .map(|(n, d)| (n, serde_json::from_str(&d).unwrap()))
            .collect()
    }
}

/// POSTs `body` to `path` as JSON with `anthropic-version`, then `headers`.
async fn post_to(s: &TestServer, path: &str, headers: &[(&str, &str)], body: String) -> Answer {
    let mut all = vec![("anthropic-version", "2023-06-01")];
    all.extend_from_slice(headers);
    s.post_with(path, &all, body).await
}

/// `GET /v1/models`, with or without `anthropic-version`.
async fn models(s: &TestServer, anthropic: bool) -> (u16, Value) {
    let headers: &[(&str, &str)] = if anthropic {
        &[("anthropic-version", "2023-06-01")]
    } else {
        &[]
    };
    let a = s.get_with("/v1/models", headers).await;
    (a.status, serde_json::from_str(&a.body).unwrap())
}

async fn post(s: &TestServer, body: Value) -> Answer {
    post_to(s, "/v1/messages", &[], body.to_string()).await
}

/// A plain request to `model`.
fn ask(model: &str, stream: bool) -> Value {
    json!({
        "model": model, "max_tokens": 256, "stream": stream,
        "system": "Be funny.",
        "messages": [{"role": "user", "content": "roast me"}],
    })
}

const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// A request with everything the translation handles: system blocks with
/// `cache_control`, images, a tool loop with thinking blocks, tools,
/// tool_choice, sampling settings, metadata, extended thinking.
fn everything(model: &str) -> Value {
    json!({
        "model": model, "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer briefly."}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Where is this, and what is the weather there?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/oslo.jpg"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants SECRET-THOUGHT weather.", "signature": "SIGNATURE-EqQBCgIYAhIM"},
                {"type": "redacted_thinking", "data": "REDACTED-EmwKAhgBEgy3va3pzix"},
                {"type": "text", "text": "Oslo. Let me check."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"city": "Oslo", "unit": "celsius"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": [{"type": "text", "text": "-3 degrees"}], "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "And tomorrow?"}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {"city": "Oslo", "day": "tomorrow"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "service down", "is_error": true}
            ]}
        ],
        "tools": [{
            "name": "get_weather", "description": "The weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "cache_control": {"type": "ephemeral"}
        }],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
        "temperature": 0.5, "top_p": 0.9, "top_k": 40,
        "metadata": {"user_id": "user-42"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "some_future_field": {"x": 1}
    })
}

#[tokio::test]
async fn an_openai_compatible_target_receives_the_translation() {
    let (groq, _claude, s) = setup().await;
    groq.push(Reply::text("Snow."));
    let a = post(&s, everything("groq")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = groq.received()[0].json();
    let text = got.to_string();
    for secret in [
        "SECRET-THOUGHT",
        "SIGNATURE",
        "REDACTED",
        "thinking",
        "cache_control",
    ] {
        assert!(!text.contains(secret), "{secret} was forwarded: {text}");
    }
    let want = json!([
        {"role": "system", "content": "You are a weather bot.\n\nAnswer briefly."},
        {"role": "user", "content": [
            {"type": "text", "text": "Where is this, and what is the weather there?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PIXEL}")}},
            {"type": "image_url", "image_url": {"url": "https://example.com/oslo.jpg"}}
        ]},
        {"role": "assistant", "content": "Oslo. Let me check.", "tool_calls": [
            {"id": "toolu_01A09q90qw90lq917835lq9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"unit\":\"celsius\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "toolu_01A09q90qw90lq917835lq9", "content": "-3 degrees"},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "toolu_02", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"day\":\"tomorrow\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "Error: service down"}
    ]);
    assert_eq!(
        common::strip_nulls(&got["messages"]),
        common::strip_nulls(&want),
        "{text}"
    );
    assert_eq!(got["tools"][0]["type"], "function");
    assert_eq!(got["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(
        got["tools"][0]["function"]["parameters"]["required"],
        json!(["city"])
    );
    assert_eq!(got["tool_choice"], "auto");
    assert_eq!(got["parallel_tool_calls"], false);
    assert_eq!(got["stop"], json!(["END"]));
    assert_eq!(got["user"], "user-42");
    assert_eq!(got["temperature"], 0.5);
    assert!(
        (got["top_p"].as_f64().unwrap() - 0.9).abs() < 1e-6,
        "{text}"
    );
    assert_eq!(got["max_tokens"], 1024);
    assert!(got.get("top_k").is_none(), "top_k has no neutral field");
}

#[tokio::test]
async fn an_anthropic_target_receives_the_body_as_sent() {
    let (_groq, claude, s) = setup().await;
    // The history's thinking block is one this Anthropic signed earlier.
    claude.accept_signature("SIGNATURE-EqQBCgIYAhIM");
    claude.push(Reply::text("Snow."));
    let sent = everything("claude").to_string();
    let a = post_to(
        &s,
        "/v1/messages",
        &[("anthropic-beta", "interleaved-thinking-2025-05-14")],
        sent.clone(),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let received = &claude.received()[0];
    // Byte for byte but for the model: thinking blocks and their
    // signatures, cache markers, unknown fields all arrive as written.
    // The final assistant turn (`toolu_02`) calls a tool without a
    // thinking block, which Anthropic refuses with thinking on: that one
    // request goes with thinking off, as Anthropic's docs advise.
    assert_eq!(
        std::str::from_utf8(&received.body).unwrap(),
        sent.replace("\"model\":\"claude\"", "\"model\":\"claude-model\"")
            .replace(
                r#""thinking":{"budget_tokens":2048,"type":"enabled"}"#,
                r#""thinking":{"type":"disabled"}"#
            )
    );
    assert_eq!(
        received.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert_eq!(received.header("anthropic-version"), Some("2023-06-01"));
}

#[tokio::test]
async fn a_non_streamed_answer_in_anthropic_s_shape() {
    let (groq, claude, s) = setup().await;
    claude.push(Reply::status(503));
    groq.push(Reply::text("You code like a caffeinated squirrel."));
    // Claude first (a pin): its outage falls back to groq, whose answer is
    // rendered in Anthropic's shape.
    let a = post(&s, ask("claude", false)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let id = a.headers["x-request-id"].to_str().unwrap();
    assert_eq!(
        v,
        json!({
            "id": format!("msg_{id}"), "type": "message", "role": "assistant",
            "model": "groq-model",
            "content": [{"type": "text", "text": "You code like a caffeinated squirrel."}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 4, "output_tokens": 6}
        })
    );
    assert_eq!(a.headers["x-understudy-provider"], "groq");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(a.headers["x-understudy-content-filtered"], "false");
    // The engine recorded it like any other request.
    let event = eventually("the request's event", async || {
        s.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| e.request_id == id)
    })
    .await;
    assert_eq!(event.provider.as_deref(), Some("groq"));
    assert!(event.fell_back);
    assert_eq!(event.api, Some(understudy_types::Protocol::Messages));
    let metrics = s.engine.metrics_text(false).await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("understudy_request_duration") && l.contains("api=\"anthropic\"")
        ),
        "{metrics}"
    );
    // Served by an Anthropic target, the answer is the provider's own body.
    claude.push(Reply::text("Natively."));
    let a = post(&s, ask("claude", false)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let served = a.headers["x-request-id"].to_str().unwrap();
    let provider_id = v["id"].as_str().unwrap();
    // The simulator's own `msg_01…` id, not one the gateway made up.
    assert!(
        provider_id.starts_with("msg_01") && provider_id != format!("msg_{served}"),
        "the provider's id, as it sent it: {provider_id}"
    );
    assert_eq!(v["content"][0]["text"], "Natively.");
    assert_eq!(a.headers["x-understudy-provider"], "claude");
}

#[tokio::test]
async fn tool_calls_answer_as_tool_use_blocks() {
    let (groq, _claude, s) = setup().await;
    groq.push(Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo"})).with_id("call_a"),
        SimToolCall::new("get_weather", json!({"city": "Paris"})).with_id("call_b"),
    ]));
    let mut body = ask("default", false);
    body["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let a = post(&s, body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["content"],
        json!([
            {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "call_b", "name": "get_weather", "input": {"city": "Paris"}}
        ])
    );
}

#[tokio::test]
async fn a_streamed_text_answer_in_anthropic_s_event_order() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::Refuse(Refusal::FinishReason));
    claude.push(Reply::stream(&["Nice", " try."]));
    let a = post(&s, ask("default", true)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    let events = a.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{}",
        a.body
    );
    let start = &events[0].1["message"];
    assert_eq!(start["model"], "claude-model");
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["stop_reason"], Value::Null);
    assert!(start["usage"]["input_tokens"].is_u64());
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = events[2..4]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, "Nice try.");
    assert_eq!(events[5].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[5].1["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn streamed_tool_calls_are_one_block_each_whose_json_reassembles() {
    let (groq, _claude, s) = setup().await;
    groq.push(Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo", "days": [1, 2]})),
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
    ]));
    let mut body = ask("default", true);
    body["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let a = post(&s, body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    let mut names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{}",
        a.body
    );
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut open = None;
    for (name, data) in &events {
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(data["index"], calls.len(), "a new index per call");
                let b = &data["content_block"];
                assert_eq!(b["type"], "tool_use");
                assert_eq!(b["input"], json!({}));
                calls.push((
                    b["id"].as_str().unwrap().to_owned(),
                    b["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
                open = Some(data["index"].clone());
            }
            "content_block_delta" => {
                assert_eq!(Some(&data["index"]), open.as_ref());
                assert_eq!(data["delta"]["type"], "input_json_delta");
                let part = data["delta"]["partial_json"].as_str().unwrap();
                calls.last_mut().unwrap().2.push_str(part);
            }
            "content_block_stop" => {
                assert_eq!(Some(&data["index"]), open.as_ref());
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(calls.len(), 2, "{}", a.body);
    let inputs: Vec<Value> = calls
        .iter()
        .map(|(id, name, json)| {
            assert!(!id.is_empty());
            assert_eq!(name, "get_weather");
            serde_json::from_str(json).unwrap()
        })
        .collect();
    assert_eq!(
        inputs,
        [
            json!({"city": "Oslo", "days": [1, 2]}),
            json!({"city": "Paris"})
        ]
    );
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn a_stream_broken_after_the_commit_ends_with_an_error_event_and_no_message_stop() {
    let (groq, claude, s) = setup().await;
    groq.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Cut)
            .reply(),
    );
    let a = post(&s, ask("default", true)).await;
    assert_eq!(a.status, 200);
    let events = a.events();
    assert!(
        !events.iter().any(|(n, _)| n == "message_stop"),
        "{}",
        a.body
    );
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "api_error");
    assert!(
        data["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_interrupted")
    );
    assert_eq!(
        claude.request_count(),
        0,
        "a committed stream never switches"
    );

    // Anthropic's own mid-stream overload, relayed as it came: its own
    // `error` event ends the stream, and no second one follows.
    claude.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::ErrorEvent)
            .reply(),
    );
    let a = post(&s, ask("claude", true)).await;
    let events = a.events();
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "error", "{}", a.body);
    assert_eq!(
        events.iter().filter(|(n, _)| n == "error").count(),
        1,
        "{}",
        a.body
    );
    assert!(
        !events.iter().any(|(n, _)| n == "message_stop"),
        "{}",
        a.body
    );
    assert_eq!(data["error"]["type"], "overloaded_error", "{}", a.body);

    // A refusal after some text ends as Anthropic ends one.
    claude.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Refusal)
            .reply(),
    );
    let a = post(&s, ask("claude", true)).await;
    let events = a.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{}",
        a.body
    );
    assert_eq!(
        events[events.len() - 2].1["delta"]["stop_reason"],
        "refusal"
    );
}

/// One error case: the request, the status and Anthropic error type it
/// gets, and a word its message must contain.
async fn check(s: &TestServer, body: String, status: u16, kind: &str, says: &str) {
    let a = post_to(s, "/v1/messages", &[], body.clone()).await;
    assert_eq!(a.status, status, "{body}: {}", a.body);
    let v = a.json();
    assert_eq!(v["type"], "error", "{}", a.body);
    assert_eq!(v["error"]["type"], kind, "{body}: {}", a.body);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{says}: {}", a.body);
}

#[tokio::test]
async fn errors_in_anthropic_s_shape_and_statuses() {
    let (groq, claude, s) = setup().await;
    let with = |extra: Value| {
        let mut v = ask("default", false);
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let invalid = "invalid_request_error";
    for (body, says) in [
        (with(json!({"max_tokens": null})), "max_tokens"),
        (with(json!({"model": null})), "model"),
        (with(json!({"messages": []})), "messages"),
        (with(json!({"messages": "hi"})), "messages"),
        (with(json!({"temperature": 1.5})), "temperature"),
        (
            with(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool"}}),
            ),
            "tool_choice",
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]}),
            ),
            "toolu_9",
        ),
        ("{oops".to_owned(), "JSON"),
    ] {
        check(&s, body, 400, invalid, says).await;
    }
    check(
        &s,
        with(json!({"model": "gpt-99"})),
        404,
        "not_found_error",
        "gpt-99",
    )
    .await;
    // What only Anthropic can take (a role, a block, a server tool, a file
    // id) is no reason to refuse when an Anthropic target may serve; on a
    // route without one it is a 400 that says, per target, what it lacks.
    for (extra, lacks) in [
        (
            json!({"messages": [{"role": "developer", "content": "x"}]}),
            "role only Anthropic knows",
        ),
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]}),
            "server tools",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}]}),
            "content block types only Anthropic knows",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "file_1"}}]}]}),
            "Files API id",
        ),
    ] {
        let mut body = serde_json::from_str::<Value>(&with(extra)).unwrap();
        body["model"] = json!("groq");
        let a = post_to(
            &s,
            "/v1/messages",
            &[("x-understudy-no-fallback", "true")],
            body.to_string(),
        )
        .await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("groq:groq-model lacks") && message.contains(lacks),
            "{message}"
        );
    }

    // Every target down: Anthropic's overload, so its clients back off
    // and retry as they would for Anthropic itself.
    groq.push(Reply::status(503));
    claude.push(Reply::status(529));
    check(&s, with(json!({})), 529, "overloaded_error", "claude").await;
    groq.push(Reply::rate_limited("60"));
    claude.push(Reply::rate_limited("60"));
    check(&s, with(json!({})), 429, "rate_limit_error", "rate").await;
    groq.push(Reply::Hang);
    claude.push(Reply::Hang);
    check(&s, with(json!({})), 504, "timeout_error", "deadline").await;
    groq.push(Reply::status(400));
    claude.push(Reply::status(400));
    check(&s, with(json!({})), 400, invalid, "bad_request").await;
    groq.push(Reply::status(401));
    claude.push(Reply::status(500));
    check(&s, with(json!({})), 529, "overloaded_error", "auth").await;
    groq.push(Reply::status(503));
    claude.push(Reply::status(401));
    check(&s, with(json!({})), 500, "api_error", "auth").await;

    // Streamed: a failure before anything was sent is an ordinary error.
    groq.push(Reply::status(503));
    claude.push(Reply::status(529));
    let mut body = ask("default", true);
    body["max_tokens"] = json!(10);
    check(&s, body.to_string(), 529, "overloaded_error", "unavailable").await;

    // An unknown path under /v1/messages/ answers in the same shape.
    let a = post_to(&s, "/v1/messages/batches", &[], "{}".into()).await;
    assert_eq!(a.status, 404);
    assert_eq!(a.json()["error"]["type"], "not_found_error");
}

#[tokio::test]
async fn failover_from_an_anthropic_529_to_an_openai_compatible_target() {
    let (groq, claude, s) = setup().await;
    for stream in [false, true] {
        claude.push(Reply::status(529));
        groq.push(Reply::text("Served by the understudy."));
        let a = post(&s, ask("fast", stream)).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "groq");
        assert_eq!(a.headers["x-understudy-fell-back"], "true");
        let text = if stream {
            a.events()
                .iter()
                .filter_map(|(_, d)| d["delta"]["text"].as_str().map(str::to_owned))
                .collect::<String>()
        } else {
            assert_eq!(a.json()["model"], "groq-model");
            a.json()["content"][0]["text"].as_str().unwrap().to_owned()
        };
        assert_eq!(text, "Served by the understudy.");
    }
    // The route's first target got its model.
    assert_eq!(claude.received()[0].json()["model"], "claude-fast");
}

#[tokio::test]
async fn the_refusal_table_holds_on_this_api() {
    const SOFTENING: &str = "IMPORTANT: Keep it light";
    // A refusal from the primary gets the softened retry, which serves.
    let (groq, claude, s) = setup().await;
    groq.push(Reply::Refuse(Refusal::FinishReason));
    groq.push(Reply::text("A gentle roast."));
    let a = post(&s, ask("default", false)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["content"][0]["text"], "A gentle roast.");
    assert_eq!(a.headers["x-understudy-provider"], "groq");
    assert_eq!(a.headers["x-understudy-fell-back"], "false");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    let sent = groq.received();
    assert_eq!(sent.len(), 2);
    let system = |r: &understudy_testkit::Received| {
        r.json()["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(system(&sent[0]), "Be funny.");
    assert!(system(&sent[1]).starts_with("Be funny."));
    assert!(system(&sent[1]).contains(SOFTENING), "{}", system(&sent[1]));

    // On an Anthropic target (which gets the client's body) the softened
    // retry keeps the system blocks as they were and adds one text block.
    claude.push(Reply::Refuse(Refusal::FinishReason));
    claude.push(Reply::text("A gentle roast, natively."));
    let mut body = ask("claude", false);
    body["system"] =
        json!([{"type": "text", "text": "Be funny.", "cache_control": {"type": "ephemeral"}}]);
    let a = post(&s, body.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let sent = claude.received();
    assert_eq!(sent[0].json()["system"], body["system"]);
    let softened = sent[1].json();
    let blocks = softened["system"].as_array().unwrap();
    assert_eq!(blocks.len(), 2, "{softened}");
    assert_eq!(
        blocks[0], body["system"][0],
        "the client's block, cache marker kept"
    );
    assert_eq!(blocks[1]["type"], "text");
    assert!(blocks[1]["text"].as_str().unwrap().starts_with(SOFTENING));
    let claude_before = sent.len();

    // Refused again: the fallback gets the original request.
    groq.push_n(2, Reply::Refuse(Refusal::FinishReason));
    claude.push(Reply::text("A roast from elsewhere."));
    let a = post(&s, ask("default", false)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["content"][0]["text"], "A roast from elsewhere.");
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    assert_eq!(
        claude.received()[claude_before].json()["system"],
        "Be funny."
    );

    // Surfaced by policy: a 200 with stop_reason "refusal", streamed or not.
    groq.push(Reply::Refuse(Refusal::FinishReason));
    let headers = [("x-understudy-refusal-policy", "surface")];
    let a = post_to(
        &s,
        "/v1/messages",
        &headers,
        ask("default", false).to_string(),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["stop_reason"], "refusal");
    assert_eq!(v["content"], json!([]));
    assert_eq!(v["model"], "groq-model");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    groq.push(Reply::Refuse(Refusal::FinishReason));
    let a = post_to(
        &s,
        "/v1/messages",
        &headers,
        ask("default", true).to_string(),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "message_delta", "message_stop"]);
    assert_eq!(events[1].1["delta"]["stop_reason"], "refusal");
}

#[tokio::test]
async fn x_api_key_and_bearer_both_authenticate() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text("hi"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .env("UNDERSTUDY_API_KEYS", "sk-one-key,sk-two-key")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let body = ask("default", false).to_string();
    for (headers, status) in [
        (vec![], 401),
        (vec![("x-api-key", "sk-wrong-key")], 401),
        (vec![("authorization", "Bearer sk-wrong-key")], 401),
        (vec![("x-api-key", "sk-one-key")], 200),
        (vec![("authorization", "Bearer sk-two-key")], 200),
        // One good credential is enough.
        (
            vec![
                ("x-api-key", "sk-wrong-key"),
                ("authorization", "Bearer sk-one-key"),
            ],
            200,
        ),
    ] {
        let a = post_to(&s, "/v1/messages", &headers, body.clone()).await;
        assert_eq!(a.status, status, "{headers:?}: {}", a.body);
        if status == 401 {
            assert_eq!(a.json()["type"], "error");
            assert_eq!(a.json()["error"]["type"], "authentication_error");
        }
    }
    // Every API route takes x-api-key, each answering in its own shape.
    let client = understudy_testkit::http_client();
    let resp = client
        .post(format!("{}/v1/chat/completions", s.url))
        .header("x-api-key", "sk-one-key")
        .header("content-type", "application/json")
        .body(
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (status, v) = models(&s, true).await;
    assert_eq!(status, 401);
    assert_eq!(v["error"]["type"], "authentication_error");
    let (status, v) = models(&s, false).await;
    assert_eq!(status, 401);
    assert_eq!(v["error"]["code"], "invalid_api_key", "OpenAI's shape: {v}");
}

#[tokio::test]
async fn count_tokens_asks_an_anthropic_target_or_estimates() {
    let (groq, claude, s) = setup().await;
    // The thinking blocks of the histories below are this Anthropic's own.
    claude.accept_signature("s");
    let s = &s;
    let count = |body: Value| async move {
        post_to(s, "/v1/messages/count_tokens", &[], body.to_string()).await
    };
    // The route's Anthropic target counts, given the body as sent.
    claude.push(Reply::Garbage(r#"{"input_tokens": 4242}"#.into()));
    let asked = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
    let a = count(asked.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json(), json!({"input_tokens": 4242}));
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert!(a.headers.get("x-understudy-estimate").is_none());
    let received = &claude.received()[0];
    assert!(
        received.path.ends_with("/v1/messages/count_tokens"),
        "{}",
        received.path
    );
    assert_eq!(
        std::str::from_utf8(&received.body).unwrap(),
        asked
            .to_string()
            .replace("\"model\":\"default\"", "\"model\":\"claude-model\"")
    );
    // When it cannot, the gateway estimates and says so.
    claude.always(Reply::status(529));
    // 40 characters of text: 10 tokens, no max_tokens needed.
    let a = count(json!({
        "model": "default",
        "system": [{"type": "text", "text": "0123456789"}],
        "messages": [
            {"role": "user", "content": "0123456789"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "0123456789", "signature": "s"}]},
            {"role": "user", "content": [{"type": "text", "text": "0123456789"}]}
        ]
    }))
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json(), json!({"input_tokens": 10}));
    assert_eq!(a.headers["x-understudy-estimate"], "true");
    // An image counts as a flat 1600; a tool's definition counts too.
    let a = count(json!({
        "model": "default",
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
            {"type": "text", "text": "abcd"}
        ]}],
        "tools": [{"name": "abcd", "input_schema": {}}]
    }))
    .await;
    assert_eq!(a.json(), json!({"input_tokens": 1600 + 1 + 2}));
    let a = count(json!({"messages": [{"role": "user", "content": "x"}]})).await;
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["error"]["type"], "invalid_request_error");
    // Only Anthropic targets count; groq was never asked.
    assert_eq!(groq.request_count(), 0);
    assert_eq!(claude.request_count(), 3);
}

#[tokio::test]
async fn models_in_anthropic_s_list_shape_with_anthropic_version() {
    let (_groq, _claude, s) = setup().await;
    let (status, v) = models(&s, true).await;
    assert_eq!(status, 200, "{v}");
    let data = v["data"].as_array().unwrap();
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["default", "fast", "groq:groq-model", "claude:claude-model"],
        "{v}"
    );
    for m in data {
        assert_eq!(m["type"], "model");
        assert!(m["display_name"].is_string());
        assert_eq!(m["created_at"], "1970-01-01T00:00:00Z");
    }
    assert_eq!(
        data[1]["display_name"],
        "fast (claude:claude-fast, groq:groq-model)"
    );
    assert_eq!(v["has_more"], false);
    assert_eq!(v["first_id"], "default");
    assert_eq!(v["last_id"], "claude:claude-model");
    // Without the header, OpenAI's list, unchanged.
    let (_, v) = models(&s, false).await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["object"], "model");
}
