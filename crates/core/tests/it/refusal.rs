//! The softened retry: its exact prompt and temperature, and that
//! fallbacks get the original request.

use understudy_core::GenerateRequest;
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};
use understudy_types::chat::SOFTENING_SUFFIX;
use understudy_types::{ChatRequest, RefusalPolicy};

async fn gateway(groq: &SimProvider, openai: &SimProvider, groq_option: &str) -> TestGateway {
    TestGateway::builder()
        .provider("groq", groq)
        .provider("openai", openai)
        .provider_option("groq", groq_option)
        .build()
        .await
        .unwrap()
}

/// Refuses once, then answers; returns the softened request's system
/// prompt and temperature as received.
async fn softened(request: ChatRequest, extra: &str) -> (serde_json::Value, serde_json::Value) {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::text("gentle"));
    let gw = gateway(&groq, &openai, extra).await;
    let g = gw
        .engine
        .generate(GenerateRequest::new(request))
        .await
        .unwrap();
    assert!(g.content_filtered && !g.fell_back);
    let second = groq.received()[1].json();
    let system = second["messages"][0].clone();
    (system, second["temperature"].clone())
}

#[tokio::test]
async fn softened_prompt_and_temperature() {
    let (system, t) = softened(
        ChatRequest::user("roast me")
            .with_system("You are a comedian.")
            .with_temperature(0.7),
        "",
    )
    .await;
    assert_eq!(system["role"], "system");
    assert_eq!(
        system["content"],
        format!("You are a comedian.{SOFTENING_SUFFIX}")
    );
    assert_eq!(t, serde_json::json!(0.5));

    // The 0.3 floor.
    let (_, t) = softened(
        ChatRequest::user("roast me")
            .with_system("S")
            .with_temperature(0.4),
        "",
    )
    .await;
    assert_eq!(t, serde_json::json!(0.3));

    // No temperature: the provider's default (1.0 unless configured) minus 0.2.
    let (system, t) = softened(ChatRequest::user("roast me"), "").await;
    assert_eq!(system["content"], SOFTENING_SUFFIX);
    assert_eq!(t, serde_json::json!(0.8));
    let (_, t) = softened(ChatRequest::user("roast me"), "temperature = 0.6").await;
    assert_eq!(t, serde_json::json!(0.4));
}

#[tokio::test]
async fn fallbacks_get_the_original_request() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::Refuse(Refusal::Message("no".into())));
    let gw = gateway(&groq, &openai, "").await;
    let req = ChatRequest::user("roast me")
        .with_system("You are a comedian.")
        .with_temperature(0.9);
    let g = gw.engine.generate(GenerateRequest::new(req)).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert!(
        g.content_filtered,
        "content_filtered stays true whoever serves"
    );
    assert_eq!(groq.request_count(), 2, "exactly one softened retry");
    let sent = openai.received()[0].json();
    assert_eq!(sent["messages"][0]["content"], "You are a comedian.");
    assert_eq!(sent["messages"][1]["content"], "roast me");
    assert_eq!(sent["temperature"], serde_json::json!(0.9));
}

#[tokio::test]
async fn refusal_policies() {
    for (policy, want) in [
        (
            RefusalPolicy::SoftenThenFallback,
            &["groq/primary", "groq/softened", "openai/fallback"][..],
        ),
        (
            RefusalPolicy::SoftenOnly,
            &["groq/primary", "groq/softened"][..],
        ),
        (
            RefusalPolicy::FallbackOnly,
            &["groq/primary", "openai/fallback"][..],
        ),
        (RefusalPolicy::Surface, &["groq/primary"][..]),
    ] {
        let groq = SimProvider::openai().await.unwrap();
        let openai = SimProvider::openai().await.unwrap();
        groq.always(Reply::Refuse(Refusal::FinishReason));
        let gw = gateway(&groq, &openai, "").await;
        let result = gw
            .engine
            .generate(GenerateRequest::new(ChatRequest::user("x")).refusal_policy(policy))
            .await;
        let attempts = match &result {
            Ok(g) => g.attempts.clone(),
            Err(e) => {
                assert_eq!(e.code().as_str(), "content_filter", "{policy}");
                e.attempts().to_vec()
            }
        };
        let got: Vec<String> = attempts
            .iter()
            .map(|a| format!("{}/{}", a.provider, a.kind.as_str()))
            .collect();
        assert_eq!(got, want, "{policy}");
    }
}
