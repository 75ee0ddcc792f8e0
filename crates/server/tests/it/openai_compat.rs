//! `POST /v1/chat/completions`, `GET /v1/models`, `GET /v1/providers`
//! through a real HTTP client against the real server.

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway};

use crate::common::TestServer;

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

/// POSTs `body` to `/v1/chat/completions`: the status, headers and body.
async fn post(
    s: &TestServer,
    body: impl Into<String>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let a = s.post("/v1/chat/completions", body).await;
    (a.status, a.headers, a.body)
}

fn chat(model: &str, stream: bool) -> String {
    json!({"model": model, "messages": [{"role": "system", "content": "Be funny."}, {"role": "user", "content": "roast me"}], "stream": stream, "stream_options": {"include_usage": true}, "temperature": 0.8, "top_p": 1, "user": "u-1"}).to_string()
}

/// The `data:` payloads of an SSE body.
fn data_lines(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn non_streamed_with_fallback() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::status(503));
    claude.push(Reply::text("You code like a caffeinated squirrel."));
    let (status, headers, body) = post(&s, chat("default", false)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["model"], "claude-model",
        "the model that answered, not the alias"
    );
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "You code like a caffeinated squirrel."
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"]["completion_tokens"], 6,
        "the serving attempt's usage"
    );
    assert_eq!(headers["x-understudy-provider"], "claude");
    assert_eq!(headers["x-understudy-fell-back"], "true");
    assert_eq!(headers["x-understudy-content-filtered"], "false");
    assert!(headers.contains_key("x-request-id"));
    assert_eq!(
        v["id"],
        format!("chatcmpl-{}", headers["x-request-id"].to_str().unwrap())
    );
    // The system message became the system prompt, upstream.
    assert_eq!(claude.received()[0].json()["system"], "Be funny.");
}

#[tokio::test]
async fn model_names_a_route_or_a_provider() {
    let (groq, claude, s) = setup().await;
    let (status, _, body) = post(&s, chat("fast", false)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(claude.received()[0].json()["model"], "claude-fast");
    let (status, _, _) = post(&s, chat("groq:llama-x", false)).await;
    assert_eq!(status, 200);
    assert_eq!(groq.received()[0].json()["model"], "llama-x");
    let (status, _, body) = post(&s, chat("gpt-99", false)).await;
    assert_eq!(status, 404);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "model_not_found");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "model");
}

#[tokio::test]
async fn streamed_with_fallback_names_the_fallback_model_in_every_chunk() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::Refuse(Refusal::FinishReason));
    claude.push(Reply::stream(&["Nice", " try."]));
    let (status, headers, body) = post(&s, chat("default", true)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-understudy-provider"], "claude");
    assert_eq!(headers["x-understudy-fell-back"], "true");
    assert_eq!(headers["x-understudy-content-filtered"], "true");
    let data = data_lines(&body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let mut text = String::new();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "claude-model");
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    assert_eq!(text, "Nice try.");
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 2);
    // include_usage reached the OpenAI-compatible upstream.
    assert_eq!(
        groq.received()[0].json()["stream_options"]["include_usage"],
        true
    );
}

#[tokio::test]
async fn a_failure_after_commit_is_an_error_event_without_done() {
    let (groq, claude, s) = setup().await;
    groq.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Cut)
            .reply(),
    );
    let (status, _, body) = post(&s, chat("default", true)).await;
    assert_eq!(status, 200);
    let data = data_lines(&body);
    assert!(!data.iter().any(|d| d == "[DONE]"), "{body}");
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted");
    assert!(last["error"]["message"].as_str().is_some());
    assert_eq!(claude.request_count(), 0);
}

#[tokio::test]
async fn error_statuses_in_openai_shape() {
    let (groq, claude, s) = setup().await;
    let check = |status: u16, body: &str, code: &str| {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{body}"));
        assert_eq!(v["error"]["code"], code, "{body}");
        for field in ["message", "type", "param", "code"] {
            assert!(v["error"].get(field).is_some(), "{field} missing: {body}");
        }
        let _ = status;
    };
    groq.push(Reply::status(503));
    claude.push(Reply::status(529));
    let (status, _, body) = post(&s, chat("default", false)).await;
    assert_eq!(status, 502);
    check(status, &body, "unavailable");
    assert!(
        body.contains("groq") && body.contains("claude"),
        "the attempts are summarised: {body}"
    );

    groq.push(Reply::rate_limited("60"));
    claude.push(Reply::rate_limited("60"));
    let (status, _, body) = post(&s, chat("default", false)).await;
    assert_eq!(status, 429);
    check(status, &body, "rate_limited");

    groq.push(Reply::Hang);
    claude.push(Reply::Hang);
    let (status, _, body) = post(&s, chat("default", false)).await;
    assert_eq!(status, 504, "{body}");
    check(status, &body, "deadline_exceeded");

    for (bad, param) in [
        (
            json!({"model": "default", "messages": []}),
            Value::from("messages"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "narrator", "content": "x"}]}),
            Value::from("messages[0].role"),
        ),
        // A tool result needs the call it answers, made earlier.
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "x"}]}),
            Value::from("messages"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]}),
            Value::from("messages"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}, {"role": "user", "content": "x"}]}),
            Value::from("messages[0].content"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}]}]}),
            Value::from("messages"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
            Value::from("messages[0].content"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]}),
            Value::from("tools[0]"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "has space"}}]}),
            Value::from("tools"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "sometimes"}),
            Value::from("tool_choice"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            Value::from("tool_choice"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
            Value::from("response_format"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}),
            Value::from("response_format"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}),
            Value::from("functions"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "top_p": 3}),
            Value::from("top_p"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "temperature": 5}),
            Value::from("temperature"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            Value::from("temperature"),
        ),
        (
            json!({"model": "default", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            Value::from("n"),
        ),
        (
            json!({"model": "default", "messages": "x"}),
            Value::from("messages"),
        ),
    ] {
        let (status, _, body) = post(&s, bad.to_string()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["param"], param, "{bad}: {body}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let (status, _, body) = post(&s, "{oops").await;
    assert_eq!(status, 400);
    check(status, &body, "invalid_request");
    let huge = json!({"model": "default", "messages": [{"role": "user", "content": "a".repeat(33 << 20)}]}).to_string();
    let (status, _, body) = post(&s, huge).await;
    assert_eq!(status, 413);
    check(status, &body, "invalid_request");
}

#[tokio::test]
async fn surfaced_refusals_are_content_filter_answers() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .env("UNDERSTUDY_REFUSAL_POLICY", "surface")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    groq.push(Reply::Refuse(Refusal::FinishReason));
    let (status, headers, body) = post(&s, chat("default", false)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
    assert_eq!(headers["x-understudy-content-filtered"], "true");
    // The neutral API says 422.
    groq.push(Reply::Refuse(Refusal::FinishReason));
    let a = s
        .post("/v1/generate", json!({"prompt": "x"}).to_string())
        .await;
    assert_eq!(a.status, 422);
}

#[tokio::test]
async fn models_and_providers() {
    let (_groq, _claude, s) = setup().await;
    let text = s.get("/v1/models").await.body;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"default") && ids.contains(&"fast") && ids.contains(&"groq:groq-model"),
        "{ids:?}"
    );
    // Each entry says, per target, what it supports.
    let fast = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "fast")
        .unwrap();
    assert_eq!(
        fast["supports"],
        json!([
            {"target": "claude:claude-fast", "tools": true, "vision": true, "remote_images": true, "json_schema": true},
            {"target": "groq:groq-model", "tools": true, "vision": true, "remote_images": true, "json_schema": true},
        ]),
        "{fast}"
    );
    let text = s.get("/v1/providers").await.body;
    let v: Value = serde_json::from_str(&text).unwrap();
    let groq = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "groq")
        .unwrap()
        .clone();
    assert_eq!(groq["available"], true);
    assert_eq!(groq["key"]["state"], "set");
    assert!(!text.contains("test-key-groq"), "no key in the output");
    let gemini = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "gemini")
        .unwrap()
        .clone();
    assert_eq!(gemini["unavailable_reason"], "no API key");
}
