//! Streams and answers mean the same through HTTP, and
//! a held stream (`x-understudy-stream-commit: complete`) as the client
//! sees it, byte for byte: a refusal surfaced by policy is a refusal in
//! both modes on the OpenAI API; a provider's mid-stream error reaches a
//! Messages API client as one `error` event, not two; a primary cut after
//! 40 of 60 words is invisible to a held stream's client.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway};

use crate::common::{self, TestServer};

/// POSTs `body` to `path` with `headers`; (status, headers, body).
async fn post(
    s: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let a = s.post_with(path, headers, body.to_string()).await;
    (a.status, a.headers, a.body)
}

/// The `data:` payloads of an SSE body, in order (comments left out).
fn data(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// The gateway over `sim` alone, surfacing refusals.
async fn surfacing(name: &str, sim: &SimProvider) -> TestServer {
    let gw = TestGateway::builder()
        .provider(name, sim)
        .env("UNDERSTUDY_REFUSAL_POLICY", "surface")
        .build()
        .await
        .unwrap();
    TestServer::start(gw.engine).await
}

#[tokio::test]
async fn a_surfaced_refusal_is_a_refusal_streamed_or_not() {
    let groq = SimProvider::openai().await.unwrap();
    let s = surfacing("groq", &groq).await;
    for stream in [false, true] {
        groq.push(Reply::Refuse(Refusal::Message(
            "I can't help with that.".into(),
        )));
        let body = json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "x"}]});
        let (status, headers, body) = post(&s, "/v1/chat/completions", &[], body).await;
        assert_eq!(status, 200, "stream {stream}: {body}");
        assert_eq!(headers["x-understudy-content-filtered"], "true");
        let (finish, refusal) = if stream {
            let chunks = data(&body);
            assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"), "{body}");
            let values: Vec<Value> = chunks[..chunks.len() - 1]
                .iter()
                .map(|c| serde_json::from_str(c).unwrap())
                .collect();
            let refusal: String = values
                .iter()
                .filter_map(|v| v["choices"][0]["delta"]["refusal"].as_str())
                .collect();
            let finish = values
                .iter()
                .find_map(|v| v["choices"][0]["finish_reason"].as_str().map(str::to_owned));
            (finish, refusal)
        } else {
            let v: Value = serde_json::from_str(&body).unwrap();
            (
                v["choices"][0]["finish_reason"].as_str().map(str::to_owned),
                v["choices"][0]["message"]["refusal"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        };
        assert_eq!(finish.as_deref(), Some("content_filter"), "stream {stream}");
        assert!(
            refusal.contains("I can't help with that."),
            "stream {stream}: {refusal}"
        );
    }
}

#[tokio::test]
async fn a_mid_stream_upstream_error_is_one_error_event() {
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml("[timeouts]\nfirst_token = 2\nstream_idle = 2")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    claude.push(
        StreamSpec::new(&["Hello", " there"])
            .ending(StreamEnd::ErrorEvent)
            .reply(),
    );
    let body = json!({"model": "default", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let (status, _, body) = post(
        &s,
        "/v1/messages",
        &[("anthropic-version", "2023-06-01")],
        body,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let errors = common::anthropic_events(&body)
        .into_iter()
        .filter(|(name, _)| name == "error")
        .count();
    assert_eq!(errors, 1, "{body}");
    assert!(body.contains("Hello"), "{body}");
}

#[tokio::test]
async fn a_held_stream_hides_a_cut_primary_byte_for_byte() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let words = |p: &str| -> Vec<String> {
        (1..=60)
            .map(|i| {
                if i == 1 {
                    format!("{p}1")
                } else {
                    format!(" {p}{i}")
                }
            })
            .collect()
    };
    let (w, v) = (words("w"), words("v"));
    let spec = |chunks: &[String]| {
        let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
        StreamSpec::new(&chunks).every(Duration::from_millis(2))
    };
    groq.push(spec(&w[..40]).ending(StreamEnd::EndWithoutMarker).reply());
    claude.push(spec(&v).reply());
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml("[timeouts]\nfirst_token = 2\nstream_idle = 1")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let body =
        json!({"model": "default", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let (status, headers, body) = post(
        &s,
        "/v1/chat/completions",
        &[("x-understudy-stream-commit", "complete")],
        body,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers.get("x-understudy-provider").is_none(),
        "the headers went out before anyone served"
    );
    let chunks = data(&body);
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"), "{body}");
    let values: Vec<Value> = chunks[..chunks.len() - 1]
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    // The role chunk, one chunk per word of the fallback's answer, in
    // order, and the finish: nothing of the cut primary, nothing twice.
    assert_eq!(values.len(), 1 + 60 + 1, "{body}");
    assert_eq!(values[0]["choices"][0]["delta"]["role"], "assistant");
    let contents: Vec<&str> = values[1..61]
        .iter()
        .map(|v| v["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, v.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(values[61]["choices"][0]["finish_reason"], "stop");
    // Every chunk names the model that served.
    assert!(values.iter().all(|c| c["model"] == values[0]["model"]));
    assert_eq!(values[0]["model"], "claude-model");
    // An unknown commit mode is the client's error.
    let (status, _, _) = post(
        &s,
        "/v1/chat/completions",
        &[("x-understudy-stream-commit", "sometimes")],
        json!({"model": "default", "stream": true, "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_surfaced_400_refusal_is_the_api_s_400_error_streamed_or_not() {
    let claude = SimProvider::anthropic().await.unwrap();
    let s = surfacing("claude", &claude).await;
    for stream in [false, true] {
        claude.push(Reply::Refuse(Refusal::Status400));
        let body = json!({"model": "default", "max_tokens": 100, "stream": stream, "messages": [{"role": "user", "content": "x"}]});
        let version = [("anthropic-version", "2023-06-01")];
        let (status, _, body) = post(&s, "/v1/messages", &version, body).await;
        assert_eq!(status, 400, "messages, stream {stream}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["type"], "error", "{body}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");

        claude.push(Reply::Refuse(Refusal::Status400));
        let body = json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "x"}]});
        let (status, _, body) = post(&s, "/v1/chat/completions", &[], body).await;
        assert_eq!(status, 400, "chat, stream {stream}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "content_filter", "{body}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
    }
}
