//! A natively forwarded request through the whole engine: an Anthropic
//! target's own stream events reach the reader only once that target has
//! committed (a target that fails first leaves none behind), a fallback of
//! another protocol gets the neutral request, and the softened retry keeps
//! the client's system blocks, adding one. Through real HTTP to simulators.

use std::sync::Arc;

use understudy_core::GenerateRequest;
use understudy_testkit::{Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway};
use understudy_types::{ChatRequest, NativeRequest, Protocol, StreamItem};

const BODY: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}"#;

fn native(body: &str) -> GenerateRequest {
    GenerateRequest::new(ChatRequest {
        native: Some(Arc::new({
            let mut n = NativeRequest::new(Protocol::Messages, body);
            n.headers = vec![("anthropic-version".into(), "2023-06-01".into())];
            n
        })),
        ..ChatRequest::user("hi").with_system("You are terse.")
    })
}

async fn items(gw: &TestGateway, request: GenerateRequest) -> (String, Vec<StreamItem>) {
    let mut s = gw.engine.generate_stream(request).await.unwrap();
    let provider = s.provider.clone();
    let mut out = Vec::new();
    while let Some(item) = s.next().await {
        out.push(item);
    }
    (provider, out)
}

#[tokio::test]
async fn the_committed_target_s_own_events_reach_the_reader_in_order() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude.push(Reply::stream(&["Hello", " there"]));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .build()
        .await
        .unwrap();
    let (provider, items) = items(&gw, native(BODY)).await;
    assert_eq!(provider, "claude");
    let natives: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Native(e) => Some(e.event.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(natives.first().map(String::as_str), Some("message_start"));
    assert_eq!(natives.last().map(String::as_str), Some("message_stop"));
    assert!(matches!(items.first(), Some(StreamItem::Native(_))));
    assert!(matches!(items.last(), Some(StreamItem::Done(_))));
    let text: String = items
        .iter()
        .filter_map(|i| match i {
            StreamItem::Delta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello there");
}

#[tokio::test]
async fn a_target_that_fails_before_its_text_leaves_no_events_behind() {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    // message_start and an error event, no text.
    claude.push(StreamSpec::new(&[]).ending(StreamEnd::ErrorEvent).reply());
    openai.push(Reply::stream(&["From", " OpenAI"]));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        .build()
        .await
        .unwrap();
    let (provider, items) = items(&gw, native(BODY)).await;
    assert_eq!(provider, "openai");
    assert!(
        !items.iter().any(|i| matches!(i, StreamItem::Native(_))),
        "{items:?}"
    );
    // The fallback got the neutral request, translated.
    let body = openai.received()[0].json();
    assert_eq!(body["messages"][0]["content"], "You are terse.");
}

#[tokio::test]
async fn the_softened_retry_keeps_the_system_blocks_and_adds_one() {
    let claude = SimProvider::anthropic().await.unwrap();
    claude
        .push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::text("A gentle answer."));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .build()
        .await
        .unwrap();
    let plain = BODY.replace(",\"stream\":true", "");
    let g = gw.engine.generate(native(&plain)).await.unwrap();
    assert_eq!(g.text, "A gentle answer.");
    let received = claude.received();
    assert_eq!(
        std::str::from_utf8(&received[0].body).unwrap(),
        plain.replace("claude-sonnet-4-5", "claude-model"),
        "the first attempt is the client's body but for the model"
    );
    let softened = received[1].json();
    let system = softened["system"].as_array().unwrap();
    assert_eq!(system.len(), 2);
    assert_eq!(system[0]["cache_control"]["type"], "ephemeral");
    assert!(
        system[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("IMPORTANT: Keep it light")
    );
    assert!(
        g.native.is_some(),
        "the softened answer is returned as sent"
    );
}
