//! Natively forwarded requests: a body a client wrote in Anthropic's
//! protocol reaches an Anthropic target byte for byte but for the model,
//! with its `anthropic-*` headers, and the answer (or every streamed event)
//! comes back as the provider sent it; other protocols get the neutral
//! fields, translated. Through real HTTP to the testkit's simulators.

use std::sync::Arc;
use std::time::Duration;

use understudy_testkit::{Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, NativeRequest, Protocol, StreamEvent};

use crate::common::adapter_for;

/// Odd spacing, key order, unicode and a thinking block with a signature:
/// everything must arrive as written.
const BODY: &str = r#"{ "max_tokens" : 1024,
  "system": [{"type":"text","text":"You are Claude Code, Anthropic's CLI.","cache_control":{"type":"ephemeral"}}],
  "model":   "claude-sonnet-4-5-20250929" ,
  "thinking": {"type": "enabled", "budget_tokens": 2048},
  "messages": [
    {"role":"user","content":"Fix the bug — ünïcode too"},
    {"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","signature":"EqQBCkYIBxgCKkA+sig/ABC=="},{"type":"text","text":"Looking."}]},
    {"role":"user","content":"go on"}
  ]}"#;

fn native_request(stream: bool) -> ChatRequest {
    let body = if stream {
        BODY.replacen(
            "\"max_tokens\" : 1024,",
            "\"max_tokens\" : 1024, \"stream\": true,",
            1,
        )
    } else {
        BODY.to_owned()
    };
    ChatRequest {
        native: Some(Arc::new({
            let mut n = NativeRequest::new(Protocol::Messages, body);
            n.headers = vec![
                (
                    "anthropic-beta".into(),
                    "interleaved-thinking-2025-05-14".into(),
                ),
                ("anthropic-version".into(), "2023-06-01".into()),
                // Never forwarded: only `anthropic-*` headers are.
                ("x-api-key".into(), "sk-client-must-not-pass".into()),
            ];
            n
        })),
        // The neutral form, for targets of other protocols.
        ..ChatRequest::user("Fix the bug — ünïcode too")
    }
}

#[test]
fn only_the_model_changes() {
    let spliced = understudy_providers::anthropic::with_model(BODY, "claude-opus").unwrap();
    assert_eq!(
        spliced,
        BODY.replace("\"claude-sonnet-4-5-20250929\"", "\"claude-opus\"")
    );
    // A model with characters JSON must escape.
    let spliced = understudy_providers::anthropic::with_model(BODY, "a\"b").unwrap();
    assert!(spliced.contains(r#""model":   "a\"b" ,"#), "{spliced}");
    // Not an object, no model, or two models: not forwarded natively.
    for bad in [
        "[1]",
        "{\"max_tokens\": 1}",
        "{\"model\":\"a\",\"model\":\"b\"}",
        "{oops",
    ] {
        assert!(
            understudy_providers::anthropic::with_model(bad, "m").is_none(),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn an_anthropic_target_gets_the_body_as_sent_and_answers_as_it_answered() {
    let sim = SimProvider::anthropic().await.unwrap();
    // The fixture's thinking block was signed by "Anthropic", not this
    // simulator.
    sim.accept_signature("EqQBCkYIBxgCKkA+sig/ABC==");
    sim.push(Reply::text("Fixed."));
    let adapter = adapter_for(&sim).await;
    let c = adapter
        .complete(
            "claude-target",
            &native_request(false),
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let received = sim.received();
    let sent = std::str::from_utf8(&received[0].body).unwrap();
    assert_eq!(
        sent,
        BODY.replace("\"claude-sonnet-4-5-20250929\"", "\"claude-target\"")
    );
    assert_eq!(
        received[0].header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert_eq!(received[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        received[0].header("x-api-key"),
        Some(TestGateway::key_for("p").as_str()),
        "the provider's key, never the client's header"
    );
    // The answer as the provider sent it, and parsed for the engine.
    assert_eq!(c.text, "Fixed.");
    let native: serde_json::Value = serde_json::from_str(c.native.as_deref().unwrap()).unwrap();
    assert_eq!(native["type"], "message");
    assert_eq!(native["content"][0]["text"], "Fixed.");
}

#[tokio::test]
async fn a_native_stream_passes_every_event_on_before_the_parsed_ones() {
    let sim = SimProvider::anthropic().await.unwrap();
    // The fixture's thinking block was signed by "Anthropic", not this
    // simulator.
    sim.accept_signature("EqQBCkYIBxgCKkA+sig/ABC==");
    sim.push(Reply::stream(&["Fixed", " it."]));
    let adapter = adapter_for(&sim).await;
    let mut stream = adapter
        .stream(
            "claude-target",
            &native_request(true),
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let mut names = Vec::new();
    let mut text = String::new();
    let mut natives_text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
        {
            Some(Ok(StreamEvent::Native(e))) => {
                let data: serde_json::Value = serde_json::from_str(&e.data).unwrap();
                assert_eq!(data["type"], e.event.as_str(), "the event name as sent");
                if let Some(t) = data["delta"]["text"].as_str() {
                    natives_text.push_str(t);
                }
                names.push(e.event);
            }
            Some(Ok(StreamEvent::Delta(t))) => {
                assert!(
                    natives_text.ends_with(&t),
                    "a text delta follows its own native event"
                );
                text.push_str(&t);
            }
            Some(Ok(StreamEvent::Finish { .. })) => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(text, "Fixed it.");
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
    let sent = std::str::from_utf8(&sim.received()[0].body)
        .unwrap()
        .to_owned();
    assert!(sent.contains("\"signature\":\"EqQBCkYIBxgCKkA+sig/ABC==\""));
}

#[tokio::test]
async fn other_protocols_get_the_neutral_request() {
    let sim = SimProvider::openai().await.unwrap();
    sim.push(Reply::text("Fixed."));
    let adapter = adapter_for(&sim).await;
    let c = adapter
        .complete(
            "gpt",
            &native_request(false),
            &understudy_core::CallOptions::connect(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(c.native.is_none());
    let body = sim.received()[0].json();
    assert_eq!(body["model"], "gpt");
    assert_eq!(body["messages"][0]["content"], "Fix the bug — ünïcode too");
    assert!(sim.received()[0].header("anthropic-beta").is_none());
}
