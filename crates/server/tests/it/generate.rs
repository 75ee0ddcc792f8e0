//! `POST /v1/generate` and `GET /healthz` through a real HTTP client against
//! the real server, over simulated providers.

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};

use crate::common::TestServer;

async fn two_providers() -> (SimProvider, SimProvider, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[timeouts]\nattempt = 0.5\nrequest = 2")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    (groq, openai, s)
}

/// POSTs `body` to `/v1/generate`: the status, the JSON answer, the
/// headers.
async fn post(s: &TestServer, body: impl Into<String>) -> (u16, Value, reqwest::header::HeaderMap) {
    let a = s.post("/v1/generate", body).await;
    (a.status, a.json(), a.headers)
}

#[tokio::test]
async fn a_fallback_is_visible_in_the_answer() {
    let (groq, _openai, s) = two_providers().await;
    groq.push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::Refuse(Refusal::FinishReason));
    let body = json!({"system": "Be funny.", "messages": [{"role": "user", "content": "roast me"}], "temperature": 0.9});
    let (status, v, headers) = post(&s, body.to_string()).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["success"], true);
    assert_eq!(v["provider"], "openai");
    assert_eq!(v["model"], "openai-model");
    assert_eq!(v["fell_back"], true);
    assert_eq!(v["content_filtered"], true);
    assert_eq!(v["text"], "Hello from the simulator.");
    let kinds: Vec<_> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}/{}",
                a["kind"].as_str().unwrap(),
                a["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "primary/content_filter",
            "softened/content_filter",
            "fallback/ok"
        ]
    );
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        headers.get("x-request-id").unwrap().to_str().unwrap(),
        v["request_id"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_caller_request_id_is_echoed() {
    let (_groq, _openai, s) = two_providers().await;
    let a = s
        .post_with(
            "/v1/generate",
            &[("x-request-id", "abc-123")],
            json!({"prompt": "hi"}).to_string(),
        )
        .await;
    assert_eq!(a.headers["x-request-id"], "abc-123");
}

async fn check_error(
    s: &TestServer,
    body: impl Into<String>,
    want_status: u16,
    want_code: &str,
) -> Value {
    let (status, v, _) = post(s, body).await;
    assert_eq!(status, want_status, "{v}");
    assert_eq!(v["error"]["code"], want_code, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    v
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx() {
    let (groq, _openai, s) = two_providers().await;
    check_error(&s, "{not json", 400, "invalid_request").await;
    check_error(&s, "[]", 400, "invalid_request").await;
    check_error(
        &s,
        json!({"messages": []}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"messages": "hi"}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"messages": [{"role": "bot", "content": "x"}]}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"messages": [{"role": "system", "content": "x"}]}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "temperature": 7}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "temperature": "hot"}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "max_tokens": -1}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "colour": "red"}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "route": "a", "provider": "b"}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "refusal_policy": "maybe"}).to_string(),
        400,
        "invalid_request",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "route": "nope"}).to_string(),
        404,
        "not_found",
    )
    .await;
    check_error(
        &s,
        json!({"prompt": "x", "provider": "nope:m"}).to_string(),
        404,
        "not_found",
    )
    .await;
    let huge = format!("{{\"prompt\": \"{}\"}}", "a".repeat(33 * 1024 * 1024));
    check_error(&s, huge, 413, "invalid_request").await;
    assert_eq!(groq.request_count(), 0, "no bad input reaches a provider");
}

#[tokio::test]
async fn engine_failures_map_to_statuses() {
    let (groq, openai, s) = two_providers().await;
    let prompt = json!({"prompt": "x"}).to_string();

    groq.push(Reply::status(503));
    openai.push(Reply::status(500));
    let v = check_error(&s, prompt.clone(), 502, "unavailable").await;
    assert_eq!(v["error"]["attempts"].as_array().unwrap().len(), 2);

    groq.push(Reply::rate_limited("60"));
    openai.push(Reply::rate_limited("60"));
    check_error(&s, prompt.clone(), 429, "rate_limited").await;

    groq.push(Reply::Refuse(Refusal::FinishReason));
    check_error(
        &s,
        json!({"prompt": "x", "refusal_policy": "surface"}).to_string(),
        422,
        "content_filter",
    )
    .await;

    // Both targets time out (0.5 s each, within the 2 s request timeout):
    // every provider failed, and the last failure names the code.
    groq.push(Reply::Hang);
    openai.push(Reply::Hang);
    let v = check_error(&s, prompt.clone(), 502, "timeout").await;
    let outcomes: Vec<&str> = v["error"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["timeout", "timeout"], "{v}");

    // The request's own deadline runs out first: 504.
    groq.push(Reply::Hang);
    check_error(
        &s,
        json!({"prompt": "x", "timeout_ms": 300}).to_string(),
        504,
        "deadline_exceeded",
    )
    .await;
}

#[tokio::test]
async fn no_provider_available_is_503() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider_without_key("groq", &groq)
        .order(&["groq"])
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    check_error(
        &s,
        json!({"prompt": "x"}).to_string(),
        503,
        "no_provider_available",
    )
    .await;
}

#[tokio::test]
async fn health_and_unknown_paths() {
    let (_groq, _openai, s) = two_providers().await;
    let text = s.get("/healthz").await.body;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["available_providers"], json!(["groq", "openai"]));
    let a = s.get("/nope").await;
    assert_eq!(a.status, 404);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["error"]["code"], "not_found");
    assert_eq!(s.get("/v1/generate").await.status, 405);
}
