//! Traces through the real binary, as docs/operations.md says to turn them
//! on (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`): a request
//! under a caller's `traceparent` reaches a real OTLP receiver (the
//! OpenTelemetry project's own messages decode it) as the caller's child,
//! and what is held when `serve` gets SIGTERM is sent before it exits.

use serde_json::json;
use understudy_testkit::collector::Receiver;
use understudy_testkit::{Reply, SimProvider};

use crate::common::{Gateway, Scratch, providers};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

#[tokio::test(flavor = "multi_thread")]
async fn serve_exports_spans_as_documented_and_sends_the_held_ones_on_sigterm() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::status(503));
    claude.always(Reply::text("Hello from the fallback"));
    let scratch = Scratch::new("traces", "sigterm");
    // Held an hour: only the shutdown can send them.
    let toml = format!(
        "{}[telemetry]\nexport_every = 3600\n",
        providers(&[("groq", "openai", &groq), ("claude", "anthropic", &claude)])
    );
    let mut gateway = Gateway::start_with(
        &scratch,
        &toml,
        "sk-traces",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("OTEL_SERVICE_NAME", "understudy"),
        ],
    );
    let answer = understudy_testkit::http_client()
        .post(format!("{}/v1/chat/completions", gateway.url))
        .bearer_auth("sk-traces")
        .header(
            "traceparent",
            format!("00-{CALLER_TRACE}-00f067aa0ba902b7-01"),
        )
        .header("content-type", "application/json")
        .body(
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let back = answer.headers()["traceresponse"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(back.starts_with(&format!("00-{CALLER_TRACE}-")), "{back}");
    let status = gateway.terminate().await;
    assert!(status.success(), "{status:?}\n{}", gateway.log());
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let server = spans
        .iter()
        .find(|s| s["kind"] == 2)
        .expect("the request's span");
    assert_eq!(server["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(server["resource"]["service.name"], "understudy");
    let providers: Vec<&str> = spans
        .iter()
        .filter(|s| s["kind"] == 3)
        .map(|s| s["attributes"]["gen_ai.provider.name"].as_str().unwrap())
        .collect();
    assert_eq!(providers.len(), 2, "{spans:#?}");
    assert!(
        providers.contains(&"groq") && providers.contains(&"anthropic"),
        "{providers:?}"
    );
}
