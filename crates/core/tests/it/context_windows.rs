//! The context windows of `docs/configuration.md`'s example, loaded as the
//! page shows them and then served: a prompt over the local server's
//! window skips it without a call and is served by the Azure deployment,
//! whose window the example caps.

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
