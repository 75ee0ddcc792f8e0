//! Anthropic's fallback credit through the real binary: a refusal's
//! credit is redeemed by the fallback on the same account, streamed or
//! not, and the token reaches no log line (at `trace`, the HTTP client's
//! own lines too), no event and no span (with content capture on), while
//! the event and the attempt's span say `redeemed`.

use serde_json::{Value, json};
use understudy_testkit::collector::Receiver;
use understudy_testkit::{Refusal, Reply, SimProvider};

use crate::common::{Gateway, Scratch, providers};

const KEY: &str = "sk-credit";
const PLAIN_TRACE: &str = "5bf92f3577b34da6a3ce929d0e0e4736";
const STREAM_TRACE: &str = "6bf92f3577b34da6a3ce929d0e0e4736";

/// Posts `body` to the gateway's `path` under trace `trace`; returns the
/// answer's text once it is whole.
async fn post(gateway: &Gateway, path: &str, trace: &str, body: Value) -> String {
    let answer = understudy_testkit::http_client()
        .post(format!("{}{path}", gateway.url))
        .bearer_auth(KEY)
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_credit_is_redeemed_and_reaches_no_log_event_or_span() {
    let receiver = Receiver::start();
    let claude = SimProvider::anthropic().await.unwrap();
    claude.respond_with(|req| {
        if req.json()["model"] == "claude-fable-5" {
            Reply::Refuse(Refusal::Message("I can't help with that.".into()))
        } else {
            Reply::text("here you go")
        }
    });
    let scratch = Scratch::new("credit", "no-leak");
    let toml = format!(
        "{}[routes]\ncredit = [\"claude:claude-fable-5\", \"claude:claude-opus-4-8\"]\n\
         [telemetry]\nexport_every = 3600\ncapture_content = true\n",
        providers(&[("claude", "anthropic", &claude)])
    );
    let mut gateway = Gateway::start_with(
        &scratch,
        &toml,
        KEY,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("RUST_LOG", "trace"),
        ],
    );
    let message = json!([{"role": "user", "content": "tell me"}]);
    let plain = post(
        &gateway,
        "/v1/chat/completions",
        PLAIN_TRACE,
        json!({"model": "credit", "messages": message}),
    )
    .await;
    assert!(plain.contains("here you go"), "{plain}");
    let streamed = post(
        &gateway,
        "/v1/messages",
        STREAM_TRACE,
        json!({"model": "credit", "max_tokens": 256, "stream": true, "messages": message}),
    )
    .await;
    assert!(streamed.contains("message_stop"), "{streamed}");
    // Each request's fallback sent a credit back.
    let tokens: Vec<String> = claude
        .received()
        .iter()
        .filter_map(|r| {
            r.json()["fallback_credit_token"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(tokens.len(), 2, "{:?}", claude.received());
    let leaked = |text: &str| tokens.iter().find(|t| text.contains(t.as_str())).cloned();

    let status = understudy_testkit::http_client()
        .get(format!("{}/v1/status", gateway.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let status: Value = serde_json::from_str(&status).unwrap();
    let events = status["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 2, "{status}");
    for event in &events {
        assert_eq!(event["fallback_credit"], "redeemed", "{event}");
    }
    assert_eq!(leaked(&status.to_string()), None, "in an event: {status}");

    let exited = gateway.terminate().await;
    assert!(exited.success(), "{exited:?}\n{}", gateway.log());
    let log = gateway.log();
    // The log really is at trace (the HTTP client's own lines too).
    assert!(log.contains("TRACE") && log.contains("upstream"), "{log}");
    assert_eq!(leaked(&log), None, "in the log:\n{log}");

    // The request's span and one per attempt: refused, softened and
    // fallback; a stream is not softened.
    for (trace, n) in [(PLAIN_TRACE, 4), (STREAM_TRACE, 3)] {
        let spans = receiver.trace(trace, n).await;
        let redeemed = spans
            .iter()
            .filter(|s| s["attributes"]["understudy.fallback_credit"] == "redeemed")
            .count();
        assert_eq!(redeemed, 1, "{spans:#?}");
        let text = serde_json::to_string(&spans).unwrap();
        assert_eq!(leaked(&text), None, "in a span: {text}");
    }
    assert!(claude.violations().is_empty(), "{:?}", claude.violations());
}
