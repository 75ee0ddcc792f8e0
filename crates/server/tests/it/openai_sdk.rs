//! The official `openai` Python package (from PyPI) makes a non-streamed and
//! a streamed call against the real server, parses both, and sees the
//! fallback's model name. The Python is `$UNDERSTUDY_PYTHON` (`cargo xtask
//! test` sets it to the venv it provisions in `target/test-venv`), else that
//! venv when a previous run made it, else `python3`.

use std::process::Command;

use serde_json::Value;
use understudy_testkit::{Reply, SimProvider, TestGateway};

use crate::common::{self, TestServer};

#[tokio::test(flavor = "multi_thread")]
async fn the_official_openai_sdk_works_against_the_server() {
    let python = common::python_with("openai");
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::status(503));
    claude.always(Reply::text("Hello from the fallback"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let url = s.url.clone();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python).arg(script).arg(url).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["text"], "Hello from the fallback");
    assert_eq!(v["model"], "claude-model");
    assert_eq!(v["finish_reason"], "stop");
    assert_eq!(v["completion_tokens"], 4);
    assert_eq!(v["provider_header"], "claude");
    assert_eq!(v["fell_back_header"], "true");
    assert_eq!(v["streamed_text"], "Hello from the fallback");
    assert_eq!(v["streamed_models"], serde_json::json!(["claude-model"]));
    assert_eq!(v["streamed_usage"], 4);
}
