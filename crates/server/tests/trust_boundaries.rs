//! Issue 23's trust boundaries over real HTTP against the real server: the
//! response cache keeps each client key's entries to itself unless
//! `[cache] shared`.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, TestGateway};

const KEY_A: &str = "sk-client-a-for-trust-tests";
const KEY_B: &str = "sk-client-b-for-trust-tests";

/// A gateway over one simulated groq with two client keys and `toml`
/// added; returns the simulator, the base URL and the sender whose drop
/// stops it.
async fn gateway(toml: &str) -> (SimProvider, String, tokio::sync::oneshot::Sender<()>) {
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
    let (url, stop) = common::serve(gw.engine).await;
    (groq, url, stop)
}

/// POSTs `body` to `path` with client key `key`; the status and JSON body.
async fn post(url: &str, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let r = understudy_testkit::http_client()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// (`[cache]` table, whether key B is answered from key A's entry)
#[tokio::test]
async fn a_client_key_never_reads_another_keys_cache_entry_unless_shared() {
    for (cache, b_hits) in [("", false), ("[cache]\nshared = true\n", true)] {
        let (groq, url, _stop) = gateway(cache).await;
        let ask = json!({"prompt": "the same question"});
        let (status, first) = post(&url, "/v1/generate", KEY_A, &ask).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(first["cached"], false);
        let (_, again) = post(&url, "/v1/generate", KEY_A, &ask).await;
        assert_eq!(again["cached"], true, "A reads its own entry");
        let (_, other) = post(&url, "/v1/generate", KEY_B, &ask).await;
        assert_eq!(other["cached"], b_hits, "{cache:?}: {other}");
        let calls = if b_hits { 1 } else { 2 };
        assert_eq!(groq.request_count(), calls, "{cache:?}");
    }
}

/// The issue's 1.4 KB schema: twelve levels of `anyOf` over four `$ref`s
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
    let (groq, url, _stop) = gateway("").await;
    let backtracking =
        json!({"type": "array", "items": {"type": "string", "pattern": "^(a|aa)+\\1$"}});
    for schema in [nested_any_of(12), backtracking] {
        let (status, body) = post(
            &url,
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
    let (groq, url, _stop) = gateway("").await;
    groq.respond_with(|_| Reply::text(r#"{"y": 1}"#));
    let (status, body) = post(
        &url,
        "/v1/chat/completions",
        KEY_A,
        &chat_with_schema(&nested_any_of(5)),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("invalid_output"), "{body}");
    assert!(groq.request_count() >= 1);
}
