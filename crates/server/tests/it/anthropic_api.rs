//! `POST /v1/messages`, `POST /v1/messages/count_tokens` and `GET
//! /v1/models` with `anthropic-version`, through a real HTTP client against
//! the real server over simulated providers: what each target receives for
//! an Anthropic request, the answer and event shapes (streams in
//! `anthropic_api/streams.rs`), errors and statuses in Anthropic's shape
//! (`anthropic_api/errors.rs`), `x-api-key`, and the refusal and failover
//! tables.

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, SimToolCall, TestGateway, eventually};

use crate::common::{self, Answer, TestServer};

mod errors;
mod streams;

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
            .find(|e| *e.request_id == *id)
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
