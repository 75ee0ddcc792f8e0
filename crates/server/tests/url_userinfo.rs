//! `GET /v1/providers` shows base URLs without their userinfo (issue 17,
//! item 4): a password in `base_url` stays in the configuration.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

mod common;

use serde_json::Value;
use understudy_testkit::{SimProvider, TestGateway};

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
    let (server, _stop) = common::serve(gw.engine).await;
    let resp = understudy_testkit::http_client()
        .get(format!("{server}/v1/providers"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
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
