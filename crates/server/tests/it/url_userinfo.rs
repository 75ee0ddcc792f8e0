//! `GET /v1/providers` shows base URLs without their userinfo:
//! a password in `base_url` stays in the configuration.

use serde_json::Value;
use understudy_testkit::{SimProvider, TestGateway};

use crate::common::TestServer;

#[tokio::test]
async fn providers_route_shows_no_userinfo() {
    const PASSWORD: &str = "url-password-0123456789";
    let groq = SimProvider::openai().await.unwrap();
    let url = groq
        .base_url()
        .replacen("://", &format!("://user:{PASSWORD}@"), 1);
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .toml(&format!(
            "[providers.locked]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"m\""
        ))
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let a = s.get("/v1/providers").await;
    assert_eq!(a.status, 200);
    let text = a.body;
    assert!(!text.contains(PASSWORD), "the URL's password shows: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let locked = v
        .as_array()
        .or_else(|| v["providers"].as_array())
        .and_then(|a| a.iter().find(|p| p["name"] == "locked"))
        .unwrap_or_else(|| panic!("no `locked` in {text}"));
    let shown = locked["base_url"].as_str().unwrap();
    assert!(shown.starts_with("http://***@127.0.0.1:"), "{shown}");
}
