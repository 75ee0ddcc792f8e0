//! The context windows of `docs/configuration.md`'s example, loaded as the
//! page shows them and then served: a prompt over the local server's
//! window skips it without a call and is served by the Azure deployment,
//! whose window the example caps. And a "too long" answer to a softened
//! retry, which passes no target over.

use understudy_core::GenerateRequest;
use understudy_settings::windows::limits_of;
use understudy_testkit::{AzureSim, Protocol, SimProvider, TestGateway};
use understudy_types::{ChatRequest, RouteSelector};

/// The TOML block of `docs/configuration.md` under "### Context windows".
fn doc_example() -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = doc.split("### Context windows").nth(1).unwrap();
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    section[start..][..section[start..].find("```").unwrap()].to_owned()
}

#[test]
fn the_docs_example_sets_the_windows_it_says() {
    let s = crate::settings_with(&doc_example(), &[("AZURE_OPENAI_API_KEY", "az-doc")]).unwrap();
    let azure = limits_of(&s.providers["azure"], "gpt-41-deployment").unwrap();
    assert_eq!(
        (azure.context_window, azure.max_output),
        (128_000, Some(32_768))
    );
    let local = limits_of(&s.providers["local"], "qwen3-32b").unwrap();
    assert_eq!(local.context_window, 32_768);
    // The built-in table for the route's Claude.
    let claude = limits_of(&s.providers["claude"], "claude-sonnet-4-5").unwrap();
    assert_eq!(claude.context_window, 200_000);
}

#[tokio::test]
async fn a_prompt_over_the_local_window_is_served_by_the_deployment() {
    let local = SimProvider::openai().await.unwrap();
    local.with_context_window(32_768);
    let resource = AzureSim::new("az-doc-key-0123456789", &["gpt-41-deployment"]);
    let azure = SimProvider::azure(&resource, Protocol::ChatCompletions)
        .await
        .unwrap();
    azure.with_context_window(128_000);
    let toml = doc_example()
        .replace("https://my-resource.openai.azure.com", &azure.base_url())
        .replace("http://127.0.0.1:8000/v1", &local.base_url());
    let gw = TestGateway::builder()
        .toml(&toml)
        .env("AZURE_OPENAI_API_KEY", "az-doc-key-0123456789")
        .build()
        .await
        .unwrap();
    // About 40 000 tokens: over the local 32 768, within the deployment.
    let mut chat = ChatRequest::user("tok ".repeat(40_000));
    chat.max_tokens = Some(1000);
    let g = gw
        .engine
        .generate(GenerateRequest {
            route: RouteSelector::Named("long".into()),
            ..GenerateRequest::new(chat)
        })
        .await
        .unwrap();
    assert_eq!(g.provider, "azure");
    assert_eq!(local.request_count(), 0);
    assert_eq!(azure.request_count(), 1);
    assert_eq!(azure.violations(), Vec::<String>::new());
    // A short one is the local server's, as before.
    let g = gw
        .engine
        .generate(GenerateRequest {
            route: RouteSelector::Named("long".into()),
            ..GenerateRequest::new(ChatRequest::user("hi"))
        })
        .await
        .unwrap();
    assert_eq!(g.provider, "local");
}

/// A "too long" answer to the primary's softened retry hands over as any
/// failure of it does: the next target is called, and no event says it
/// was passed over for its window.
#[tokio::test]
async fn a_softened_retry_too_long_passes_nothing_over() {
    use understudy_testkit::{Refusal, Reply};
    use understudy_types::RefusalPolicy;
    let primary = SimProvider::openai().await.unwrap();
    let second = SimProvider::openai().await.unwrap();
    let third = SimProvider::openai().await.unwrap();
    let too_long = serde_json::json!({"error": {
        "message": "This model's maximum context length is 4000 tokens.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}});
    primary
        .push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::Status {
            status: 400,
            body: too_long.to_string(),
            headers: Vec::new(),
        });
    second.always(Reply::text("from second"));
    let gw = TestGateway::builder()
        .provider("primary", &primary)
        .provider("second", &second)
        .provider("third", &third)
        .order(&["primary", "second", "third"])
        .provider_option("primary", "capabilities = { context_window = 4000 }")
        .provider_option("second", "capabilities = { context_window = 4000 }")
        .provider_option("third", "capabilities = { context_window = 8000 }")
        .build()
        .await
        .unwrap();
    let request = GenerateRequest::new(ChatRequest::user("x"))
        .refusal_policy(RefusalPolicy::SoftenThenFallback);
    let g = gw.engine.generate(request).await.unwrap();
    assert_eq!(g.provider, "second");
    let kinds: Vec<String> = g
        .attempts
        .iter()
        .map(|a| format!("{}/{}", a.provider, a.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        ["primary/primary", "primary/softened", "second/fallback"]
    );
    let event = understudy_testkit::eventually("the request's event", async || {
        gw.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| e.request_id == g.request_id)
    })
    .await;
    assert!(event.skipped.is_empty(), "{:?}", event.skipped);
}
