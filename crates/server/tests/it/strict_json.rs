//! One strict JSON parse for request bodies: trailing
//! characters after the body are a 400 on every JSON route, and a body
//! error names the offending field (`param`) when there is one, and no
//! field (`param: null`, never `"?"`) when the body is not JSON at all.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, TestGateway};

use crate::common::TestServer;

struct Server {
    server: TestServer,
    groq: SimProvider,
}

async fn setup() -> Server {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::text("fine"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .build()
        .await
        .unwrap();
    Server {
        server: TestServer::start(gw.engine).await,
        groq,
    }
}

async fn post(s: &Server, path: &str, body: &str) -> (u16, Value) {
    let a = s
        .server
        .post_with(path, &[("anthropic-version", "2023-06-01")], body)
        .await;
    (a.status, a.json())
}

/// A valid body for each JSON route.
fn routes() -> [(&'static str, Value); 3] {
    let messages = json!([{"role": "user", "content": "hi"}]);
    [
        (
            "/v1/chat/completions",
            json!({"model": "groq", "messages": messages}),
        ),
        ("/v1/generate", json!({"messages": messages})),
        (
            "/v1/messages",
            json!({"model": "groq", "max_tokens": 16, "messages": messages}),
        ),
    ]
}

/// The error's message, in whichever shape the route answers.
fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn trailing_characters_are_a_400_on_every_route() {
    let s = setup().await;
    for (path, body) in routes() {
        // The valid body itself is answered...
        let (status, v) = post(&s, path, &body.to_string()).await;
        assert_eq!(status, 200, "{path}: {v}");
        // ... but not with anything after it.
        for trailing in [" xyz", "{}", " ]", "\n\"more\""] {
            let bad = format!("{body}{trailing}");
            let (status, v) = post(&s, path, &bad).await;
            assert_eq!(status, 400, "{path} {bad}: {v}");
            let m = message(&v);
            assert!(m.contains("trailing characters"), "{path}: {v}");
            if path == "/v1/chat/completions" {
                assert_eq!(v["error"]["param"], Value::Null, "{v}");
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            }
            if path == "/v1/messages" {
                assert_eq!(v["type"], "error", "{v}");
                assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
            }
        }
        // Trailing white space is still fine.
        let (status, v) = post(&s, path, &format!("{body} \n\t")).await;
        assert_eq!(status, 200, "{path}: {v}");
    }
    // Only the valid bodies reached the provider.
    assert_eq!(s.groq.request_count(), 6);
}

#[tokio::test]
async fn body_errors_name_the_field_or_say_there_is_none() {
    let s = setup().await;
    // Not JSON at all: no field, and never `?`.
    for (path, _) in routes() {
        for bad in ["{oops", "", "xyz", "[1, 2]", "\"text\""] {
            let (status, v) = post(&s, path, bad).await;
            assert_eq!(status, 400, "{path} {bad:?}: {v}");
            let m = message(&v);
            assert!(m.contains("JSON"), "{path} {bad:?}: {v}");
            assert!(!m.contains('?') || bad.is_empty(), "{path} {bad:?}: {v}");
            assert!(v["error"]["param"].is_null(), "{path} {bad:?}: {v}");
        }
    }
    // A wrong field names it, in both shapes.
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "groq", "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "groq", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}),
            "max_tokens",
        ),
        (
            "/v1/generate",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}),
            "max_tokens",
        ),
        (
            "/v1/messages",
            json!({"model": "groq", "max_tokens": "many", "messages": [{"role": "user", "content": "x"}]}),
            "max_tokens",
        ),
        (
            "/v1/messages",
            json!({"model": "groq", "max_tokens": 16, "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "groq", "messages": [{"role": "user", "content": "x"}], "stop": 5}),
            "stop",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "groq", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}),
            "messages[0].content[0].text",
        ),
    ];
    for (path, bad, field) in cases {
        let (status, v) = post(&s, path, &bad.to_string()).await;
        assert_eq!(status, 400, "{path} {bad}: {v}");
        let m = message(&v);
        assert!(!m.contains('?'), "{path} {bad}: {v}");
        assert!(
            !v["error"]["param"]
                .as_str()
                .is_some_and(|p| p.contains('?')),
            "{v}"
        );
        // Every shape says the field first; OpenAI's also as `param`.
        assert!(m.starts_with(&format!("{field}: ")), "{path} {bad}: {v}");
        if path == "/v1/chat/completions" {
            assert_eq!(v["error"]["param"], field, "{path} {bad}: {v}");
        }
    }
}
