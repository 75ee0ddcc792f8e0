//! A long Claude Code tool loop (`tests/data/claude_code_request.json`:
//! written by hand in the shape Claude Code 2.0 sent — pretty-printed, two
//! system blocks with `cache_control`, sixteen tools with JSON-schema
//! inputs, a tool loop with a signed thinking block, `cache_control` on the
//! last user block, `metadata.user_id`, extended thinking, `stream: true`)
//! posted to `/v1/messages?beta=true` with Claude Code's headers, through
//! real HTTP to the real server. A route named as the model Claude Code
//! asks for sends it to an Anthropic simulator, which gets it byte for byte
//! and whose events come back as it sent them; when that simulator fails,
//! an OpenAI-compatible simulator gets a faithful translation and the
//! client still gets Anthropic's events. Requests Claude Code 2.1.328
//! really sent, recorded through a logging upstream, are in
//! `tests/data/claude_code/` and drive `claude_code_session.rs`; the real
//! CLI itself runs in the cli crate's `claude_code` tests.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::{self, Answer, TestServer};

/// The body as Claude Code sends it.
const REQUEST: &str = include_str!("../data/claude_code_request.json");

/// The signature of the recorded request's thinking block.
const SIGNATURE: &str = "ErUBCkYIBxgCIkDq3mZ0v1yQhFh8/8nJc2Q0pLr+TgW4y1Yb0Wm7eH9kSxA5uVn3cQ2tGz6dJfR1oP8aLs0XbV4yU7iE9wCk1MnEgzT2+Zs/yq0d8RkQGEaDF7nV2pYwZQ4t3Lj9hIwK8s";

/// The client key Claude Code sends (`ANTHROPIC_API_KEY`).
const CLIENT_KEY: &str = "sk-understudy-claude-code";

/// Claude Code's headers (its user agent, its SDK's `x-stainless-*`, the
/// betas it turns on), with the client key as `x-api-key`.
const HEADERS: &[(&str, &str)] = &[
    ("accept", "application/json"),
    ("anthropic-version", "2023-06-01"),
    (
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
    ),
    ("anthropic-dangerous-direct-browser-access", "true"),
    ("content-type", "application/json"),
    ("user-agent", "claude-cli/2.0.14 (external, cli)"),
    ("x-api-key", CLIENT_KEY),
    ("x-app", "cli"),
    ("x-stainless-helper-method", "stream"),
    ("x-stainless-lang", "js"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-timeout", "600"),
];

/// The model Claude Code asks for, and the route named after it.
const MODEL: &str = "claude-sonnet-4-5-20250929";

struct Setup {
    claude: SimProvider,
    openai: SimProvider,
    server: TestServer,
}

/// An Anthropic simulator and an OpenAI-compatible one behind a route
/// named as Claude Code's model, and the server with a client key.
async fn setup() -> Setup {
    let claude = SimProvider::anthropic().await.unwrap();
    // The recorded history's thinking block is this Anthropic's own.
    claude.accept_signature(SIGNATURE);
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        // The fallback's model takes at most 16 384 output tokens (as
        // gpt-4o-mini): Claude Code's 32 000 must be clamped for it.
        .provider_option("openai", "capabilities = { max_output_tokens = 16384 }")
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .toml(&format!(
            "[routes]\n\"{MODEL}\" = [\"claude:{MODEL}\", \"openai\"]"
        ))
        .build()
        .await
        .unwrap();
    Setup {
        claude,
        openai,
        server: TestServer::start(gw.engine).await,
    }
}

/// Posts the recorded request with Claude Code's headers.
async fn post(s: &TestServer) -> Answer {
    s.post_with("/v1/messages?beta=true", HEADERS, REQUEST)
        .await
}

/// What Anthropic streams for Claude Code's next step: a thinking block
/// (thinking deltas, then its signature), a text block, then an `Edit`
/// call whose input arrives in fragments.
fn anthropic_answer() -> String {
    let edit = json!({
        "file_path": "/home/dev/tinyparse/src/lexer.rs",
        "old_string": "        let c = self.src[self.pos];\n        if self.pos >= self.src.len() {\n            return Token::Eof;\n        }",
        "new_string": "        if self.pos >= self.src.len() {\n            return Token::Eof;\n        }\n        let c = self.src[self.pos];"
    })
    .to_string();
    let (a, rest) = edit.split_at(40);
    let (b, c) = rest.split_at(60);
    let events = [
        json!({"type": "message_start", "message": {
            "id": "msg_01XkQ8wRb3nTfLz2VcYp7HsM", "type": "message", "role": "assistant",
            "model": MODEL, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 9214, "output_tokens": 2,
                      "service_tier": "standard"}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The index happens before the bounds check,"}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": " so empty input panics. Swap them."}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqMBCkYIBxgCIkB9s/K2+fQ=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "`next_token` reads `self.src[self.pos]` before"}}),
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": " checking the bounds. Moving the check first:"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_01QzW4mEr7TnYb2KcVa9PdLs",
                              "name": "Edit", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": a}}),
        json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": b}}),
        json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": c}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 187}}),
        json!({"type": "message_stop"}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn claude_code_s_request_reaches_anthropic_byte_identical() {
    let s = setup().await;
    // The simulator sends a scripted body as it is; the adapter reads an
    // event stream whatever its content type.
    let sent = anthropic_answer();
    s.claude.push(Reply::Garbage(sent.clone()));
    let a = post(&s.server).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(a.headers["x-understudy-fell-back"], "false");

    let received = s.claude.received();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    // Byte for byte: the route's target names the model Claude Code asked
    // for, so not even the model changes.
    assert_eq!(std::str::from_utf8(&r.body).unwrap(), REQUEST);
    assert!(r.path.starts_with("/v1/messages"), "{}", r.path);
    assert_eq!(
        r.header("anthropic-beta"),
        Some(
            "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
        )
    );
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    // The provider's key, never the client's; Claude Code's other headers
    // stay with the gateway.
    assert_eq!(
        r.header("x-api-key"),
        Some(TestGateway::key_for("claude").as_str())
    );
    for (name, value) in &r.headers {
        assert!(!value.contains(CLIENT_KEY), "the client key in {name}");
    }
    for name in [
        "x-app",
        "anthropic-dangerous-direct-browser-access",
        "x-stainless-helper-method",
    ] {
        assert!(r.header(name).is_none(), "{name} was forwarded");
    }
    assert_eq!(s.openai.request_count(), 0);

    // Every event as the simulator sent it, in order, data byte for byte.
    assert_eq!(
        common::anthropic_events(&a.body),
        common::anthropic_events(&sent),
        "{}",
        a.body
    );
}

#[tokio::test]
async fn claude_code_s_request_is_translated_for_an_openai_compatible_fallback() {
    let s = setup().await;
    let fixture: Value = serde_json::from_str(REQUEST).unwrap();
    let edit = json!({
        "file_path": "/home/dev/tinyparse/src/lexer.rs",
        "old_string": "let c = self.src[self.pos];",
        "new_string": "let Some(&c) = self.src.get(self.pos) else { return Token::Eof };"
    });
    for status in [529, 503] {
        s.claude.push(Reply::status(status));
        s.openai.push(Reply::ToolCalls(vec![
            SimToolCall::new("Edit", edit.clone()).with_id("call_edit_1"),
        ]));
        let a = post(&s.server).await;
        assert_eq!(a.status, 200, "{status}: {}", a.body);
        assert_eq!(a.headers["content-type"], "text/event-stream");
        assert_eq!(a.headers["x-understudy-provider"], "openai", "{status}");
        assert_eq!(a.headers["x-understudy-fell-back"], "true");

        // Anthropic's events: one tool_use block whose fragments make the
        // call's input, then stop_reason tool_use.
        let events: Vec<(String, Value)> = common::anthropic_events(&a.body)
            .into_iter()
            .map(|(n, d)| (n, serde_json::from_str(&d).unwrap()))
            .collect();
        let mut names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        names.dedup();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "{}",
            a.body
        );
        assert_eq!(events[0].1["message"]["model"], "openai-model");
        assert_eq!(
            events[1].1["content_block"],
            json!({"type": "tool_use", "id": "call_edit_1", "name": "Edit", "input": {}})
        );
        let input: String = events
            .iter()
            .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), edit);
        assert_eq!(
            events[events.len() - 2].1["delta"]["stop_reason"],
            "tool_use"
        );
    }
    assert_eq!(s.claude.request_count(), 2);

    let received = s.openai.received();
    assert_eq!(received.len(), 2);
    for r in &received {
        let text = std::str::from_utf8(&r.body).unwrap();
        let got = r.json();
        // Nothing Anthropic-only leaks: no cache markers, no thinking (its
        // text, its signature, its settings), no metadata but the user.
        for secret in [
            "cache_control",
            "ephemeral",
            "thinking",
            "signature",
            "ErUBCkYIBxgC",
            "Let me find where next_token",
            "budget_tokens",
            "metadata",
            "input_schema",
            "claude-code-20250219",
        ] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(r.header("anthropic-beta").is_none());
        assert!(r.header("anthropic-version").is_none());
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {}", TestGateway::key_for("openai")).as_str())
        );
        for (name, value) in &r.headers {
            assert!(!value.contains(CLIENT_KEY), "the client key in {name}");
        }
        assert_eq!(got["model"], "openai-model");
        assert_eq!(got["stream"], true);
        // The user id is longer than OpenAI's 64 characters: a stable hash.
        let user = got["user"].as_str().unwrap();
        assert!(
            user.len() <= 64 && user.starts_with("u-"),
            "{user} for {}",
            fixture["metadata"]["user_id"]
        );
        assert_eq!(got["temperature"], 1.0);
        assert_eq!(
            got["max_tokens"]
                .as_u64()
                .or(got["max_completion_tokens"].as_u64()),
            Some(16384),
            "{text}"
        );

        // Every tool, in order, as a function with its schema.
        let tools = got["tools"].as_array().unwrap();
        let want = fixture["tools"].as_array().unwrap();
        assert_eq!(tools.len(), want.len());
        assert_eq!(tools.len(), 16);
        for (tool, want) in tools.iter().zip(want) {
            assert_eq!(tool["type"], "function", "{tool}");
            assert_eq!(tool["function"]["name"], want["name"]);
            assert_eq!(tool["function"]["description"], want["description"]);
            assert_eq!(
                tool["function"]["parameters"], want["input_schema"],
                "{tool}"
            );
        }

        // The system blocks joined; the turns in order, tool calls and
        // results by Anthropic's ids; the thinking block gone.
        let system = |i: usize| fixture["system"][i]["text"].as_str().unwrap();
        let block = |m: usize, b: usize| fixture["messages"][m]["content"][b].clone();
        let want = json!([
            {"role": "system", "content": format!("{}\n\n{}", system(0), system(1))},
            {"role": "user", "content": [
                {"type": "text", "text": block(0, 0)["text"]},
                {"type": "text", "text": block(0, 1)["text"]}
            ]},
            {"role": "assistant", "content": block(1, 1)["text"], "tool_calls": [
                {"id": "toolu_01VxPq3NnR8sT2wYbZcK4dLm", "type": "function", "function": {
                    "name": "Grep", "arguments": block(1, 2)["input"].to_string()}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_01VxPq3NnR8sT2wYbZcK4dLm",
             "content": block(2, 0)["content"]},
            {"role": "assistant", "tool_calls": [
                {"id": "toolu_01HgT7wXe2MbQ9aJr5UyFc3P", "type": "function", "function": {
                    "name": "Read", "arguments": block(3, 0)["input"].to_string()}}
            ]},
            {"role": "tool", "tool_call_id": "toolu_01HgT7wXe2MbQ9aJr5UyFc3P",
             "content": block(4, 0)["content"]},
            {"role": "user", "content": block(4, 1)["text"]}
        ]);
        assert_eq!(common::strip_nulls(&got["messages"]), want, "{text}");
    }
}
