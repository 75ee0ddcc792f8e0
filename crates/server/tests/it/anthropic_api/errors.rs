//! Errors on `POST /v1/messages` in Anthropic's shape and statuses.

use super::*;

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
