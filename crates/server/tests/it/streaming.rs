//! `POST /v1/generate` with `"stream": true` through a real HTTP client:
//! `event: delta`…, then exactly one `event: done` or `event: error`.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, StreamEnd, StreamSpec, TestGateway, eventually};

use crate::common::TestServer;

async fn setup() -> (SimProvider, SimProvider, TestServer) {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .toml("[timeouts]\nfirst_token = 0.5\nstream_idle = 0.5")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    (groq, claude, s)
}

/// Parses an SSE body into (event, data) pairs.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            (name, serde_json::from_str(&data).unwrap())
        })
        .collect()
}

async fn post(s: &TestServer, body: Value) -> (u16, String, reqwest::header::HeaderMap) {
    let a = s.post("/v1/generate", body.to_string()).await;
    (a.status, a.body, a.headers)
}

#[tokio::test]
async fn a_stream_that_falls_back_before_text() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::status(503));
    claude.push(Reply::stream(&["Hello", " from", " Claude"]));
    let (status, body, headers) = post(&s, json!({"prompt": "hi", "stream": true})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["delta", "delta", "delta", "done"]);
    let text: String = evs
        .iter()
        .filter(|(n, _)| n == "delta")
        .map(|(_, d)| d["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello from Claude");
    let done = &evs[3].1;
    assert_eq!(done["provider"], "claude");
    assert_eq!(done["model"], "claude-model");
    assert_eq!(done["fell_back"], true);
    assert_eq!(done["content_filtered"], false);
    assert_eq!(done["usage"]["output_tokens"], 3);
    assert_eq!(done["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(
        headers["x-request-id"].to_str().unwrap(),
        done["request_id"].as_str().unwrap()
    );
}

#[tokio::test]
async fn a_failure_after_text_is_a_final_error_event() {
    let (groq, claude, s) = setup().await;
    groq.push(
        StreamSpec::new(&["Once", " upon"])
            .ending(StreamEnd::Cut)
            .reply(),
    );
    let (status, body, _) = post(&s, json!({"prompt": "hi", "stream": true})).await;
    assert_eq!(status, 200);
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["delta", "delta", "error"]);
    let error = &evs[2].1;
    assert_eq!(error["code"], "stream_interrupted");
    assert_eq!(error["provider"], "groq");
    assert!(
        error["message"].as_str().unwrap().contains("broke"),
        "{error}"
    );
    assert_eq!(error["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(claude.request_count(), 0);
}

#[tokio::test]
async fn every_provider_failing_before_text_is_an_http_error() {
    let (groq, claude, s) = setup().await;
    groq.push(Reply::status(503));
    claude.push(Reply::status(529));
    let (status, body, _) = post(&s, json!({"prompt": "hi", "stream": true})).await;
    assert_eq!(status, 502, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "unavailable");
    assert_eq!(v["error"]["attempts"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_client_that_disconnects_closes_the_upstream_connection() {
    let (groq, _claude, s) = setup().await;
    let words: Vec<String> = (0..500).map(|i| format!(" w{i}")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    groq.push(
        StreamSpec::new(&words)
            .every(Duration::from_millis(10))
            .reply(),
    );
    let mut resp = s
        .stream_with(
            "/v1/generate",
            &[],
            json!({"prompt": "hi", "stream": true}).to_string(),
        )
        .await;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: delta"));
    drop(resp);
    eventually(
        "the upstream stream to stop after the client left",
        async || {
            let (cancelled, open) = (groq.streams_cancelled(), groq.open_connections());
            if cancelled == 1 && open == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{cancelled} streams cancelled, {open} connections open"
                ))
            }
        },
    )
    .await;
}
