//! The trust boundaries over real HTTP against the real server: the
//! response cache keeps each client key's entries to itself unless
//! `[cache] shared`.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, TestGateway};

use crate::common::TestServer;

const KEY_A: &str = "sk-client-a-for-trust-tests";
const KEY_B: &str = "sk-client-b-for-trust-tests";

/// A gateway over one simulated groq with two client keys and `toml`
/// added; returns the simulator and the server.
async fn gateway(toml: &str) -> (SimProvider, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    groq.respond_with(|_| Reply::text("ok"));
    let toml = format!("[server]\napi_keys = [\"{KEY_A}\", \"{KEY_B}\"]\n{toml}");
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .cache(true)
        .toml(&toml)
        .build()
        .await
        .unwrap();
    (groq, TestServer::start(gw.engine).await)
}

/// POSTs `body` to `path` with client key `key`; the status and JSON body.
async fn post(s: &TestServer, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let a = s
        .post_with(path, &[("authorization", &auth)], body.to_string())
        .await;
    (a.status, a.json_or_text())
}

/// (`[cache]` table, whether key B is answered from key A's entry)
#[tokio::test]
async fn a_client_key_never_reads_another_keys_cache_entry_unless_shared() {
    for (cache, b_hits) in [("", false), ("[cache]\nshared = true\n", true)] {
        let (groq, s) = gateway(cache).await;
        let ask = json!({"prompt": "the same question"});
        let (status, first) = post(&s, "/v1/generate", KEY_A, &ask).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(first["cached"], false);
        let (_, again) = post(&s, "/v1/generate", KEY_A, &ask).await;
        assert_eq!(again["cached"], true, "A reads its own entry");
        let (_, other) = post(&s, "/v1/generate", KEY_B, &ask).await;
        assert_eq!(other["cached"], b_hits, "{cache:?}: {other}");
        let calls = if b_hits { 1 } else { 2 };
        assert_eq!(groq.request_count(), calls, "{cache:?}");
    }
}

/// A 1.4 KB schema: twelve levels of `anyOf` over four `$ref`s
/// to the level below (16.7 million paths when nothing matches).
fn nested_any_of(levels: usize) -> Value {
    let mut defs = serde_json::Map::new();
    defs.insert(
        "a0".into(),
        json!({"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}}),
    );
    for i in 1..=levels {
        let below = json!({"$ref": format!("#/$defs/a{}", i - 1)});
        defs.insert(
            format!("a{i}"),
            json!({"anyOf": [below, below, below, below]}),
        );
    }
    json!({"$defs": defs, "$ref": format!("#/$defs/a{levels}")})
}

fn chat_with_schema(schema: &Value) -> Value {
    json!({
        "model": "default",
        "messages": [{"role": "user", "content": "answer in JSON"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    })
}

#[tokio::test]
async fn schemas_that_would_be_weapons_are_400s_before_any_provider_is_called() {
    let (groq, s) = gateway("").await;
    let backtracking =
        json!({"type": "array", "items": {"type": "string", "pattern": "^(a|aa)+\\1$"}});
    for schema in [nested_any_of(12), backtracking] {
        let (status, body) = post(
            &s,
            "/v1/chat/completions",
            KEY_A,
            &chat_with_schema(&schema),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("json_schema.schema"), "{body}");
    }
    assert_eq!(groq.request_count(), 0);
}

#[tokio::test]
async fn an_answer_that_breaks_an_accepted_schema_is_the_target_s_invalid_output() {
    let (groq, s) = gateway("").await;
    groq.respond_with(|_| Reply::text(r#"{"y": 1}"#));
    let (status, body) = post(
        &s,
        "/v1/chat/completions",
        KEY_A,
        &chat_with_schema(&nested_any_of(5)),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("invalid_output"), "{body}");
    assert!(groq.request_count() >= 1);
}

/// A gateway over a simulated groq and claude with two client keys and
/// `toml` added.
async fn two_protocols(toml: &str) -> (SimProvider, SimProvider, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    groq.respond_with(|_| Reply::text("ok"));
    let claude = SimProvider::anthropic().await.unwrap();
    claude.respond_with(|_| Reply::text("ok"));
    let toml = format!("[server]\napi_keys = [\"{KEY_A}\", \"{KEY_B}\"]\n{toml}");
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml(&toml)
        .build()
        .await
        .unwrap();
    (groq, claude, TestServer::start(gw.engine).await)
}

/// POSTs `body` with extra headers; the status and JSON body.
async fn post_with(
    s: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Value) {
    let mut all = vec![("x-api-key", KEY_A), ("anthropic-version", "2023-06-01")];
    all.extend_from_slice(headers);
    let a = s.post_with(path, &all, body.to_string()).await;
    (a.status, a.json_or_text())
}

#[tokio::test]
async fn a_client_s_own_mistakes_are_400s_in_each_api_s_shape_on_every_route() {
    let (groq, claude, s) = two_protocols("").await;
    let bad_call = |arguments: &str| {
        json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": arguments}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ])
    };
    let tools =
        json!([{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]);
    // OpenAI's API, on a route to each protocol: arguments that are not an
    // object, and an image that is not one.
    for model in ["groq", "claude"] {
        for arguments in ["[1, 2]", "\"Oslo\"", "{\"city\": "] {
            let body = json!({"model": model, "messages": bad_call(arguments), "tools": tools});
            let (status, v) = post_with(&s, "/v1/chat/completions", &[], &body).await;
            assert_eq!(status, 400, "{model} {arguments}: {v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        }
        for image in [
            "data:text/html;base64,PGI+aGk8L2I+",
            "data:image/png;base64,iVBORw0KG",
        ] {
            let body = json!({"model": model, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": image}}
            ]}]});
            let (status, v) = post_with(&s, "/v1/chat/completions", &[], &body).await;
            assert_eq!(status, 400, "{model} {image}: {v}");
        }
    }
    // Anthropic's API: a tool_use whose input is a string, on both
    // endpoints that take a Messages body, on a route to each protocol.
    for model in ["groq", "claude"] {
        let body = json!({"model": model, "max_tokens": 100, "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": "Oslo"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}
        ], "tools": [{"name": "w", "input_schema": {"type": "object"}}]});
        for path in ["/v1/messages", "/v1/messages/count_tokens"] {
            let (status, v) = post_with(&s, path, &[], &body).await;
            assert_eq!(status, 400, "{model} {path}: {v}");
            assert_eq!(v["type"], "error", "Anthropic's shape: {v}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        }
    }
    assert_eq!(groq.request_count() + claude.request_count(), 0);
    // count_tokens takes a body without max_tokens, as Anthropic's does.
    claude.push(Reply::Garbage(r#"{"input_tokens": 7}"#.into()));
    let count = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]});
    let (status, v) = post_with(&s, "/v1/messages/count_tokens", &[], &count).await;
    assert_eq!((status, &v), (200, &json!({"input_tokens": 7})));
}

#[tokio::test]
async fn repeated_anthropic_beta_headers_are_merged() {
    let (_groq, claude, s) = two_protocols("").await;
    let body = json!({"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
    let betas = [
        ("anthropic-beta", "claude-code-20250219"),
        ("anthropic-beta", "interleaved-thinking-2025-05-14"),
    ];
    let (status, v) = post_with(&s, "/v1/messages", &betas, &body).await;
    assert_eq!(status, 200, "{v}");
    let received = claude.received();
    let forwarded = received[0].header("anthropic-beta").unwrap_or_default();
    assert_eq!(
        forwarded, "claude-code-20250219,interleaved-thinking-2025-05-14",
        "{received:?}"
    );
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_a_413_at_once_and_huge_headers_a_431() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A body that never comes would be a 408 after body_timeout; the 413
    // comes from the declared length alone.
    let (_groq, s) = gateway("max_body_bytes = 1024\nbody_timeout = 5\n").await;
    let addr = s.addr();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {KEY_A}\r\n\
         Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = conn.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("max_body_bytes"), "{answer}");
    // One header value over 16 KiB.
    let long = "x".repeat(17 * 1024);
    let (status, v) = post_with(
        &s,
        "/v1/chat/completions",
        &[("x-padding", &long)],
        &json!({"model": "groq", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 431, "{v}");
}
