//! The OpenAI Agents SDK (the `agents` Python package) with its default
//! model — the Responses API — runs a tool-using agent through the real
//! server: the primary (Anthropic) asks for the tool and then fails, and
//! Gemini finishes the run with the tool's result in its history.

use serde_json::json;
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::{self, TestServer};

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_with_a_tool_runs_through_a_failing_primary() {
    let claude = SimProvider::anthropic().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("gemini", &gemini)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    claude.push(Reply::ToolCalls(vec![SimToolCall::new(
        "get_weather",
        json!({"city": "Oslo"}),
    )]));
    claude.always(Reply::status(529));
    gemini.always(Reply::text("It is 21 degrees and sunny in Oslo."));
    let v = common::run_sdk("agents", "openai_agents.py", &s.url, "weather").await;
    assert_eq!(v["final"], "It is 21 degrees and sunny in Oslo.", "{v}");
    assert_eq!(v["tool_calls"], json!(["Oslo"]));
    assert_eq!(v["responses"].as_array().unwrap().len(), 2, "{v}");
    // Gemini got the call and the tool's result, and the instructions.
    let body = gemini.received()[0].json().to_string();
    assert!(body.contains("\"functionResponse\""), "{body}");
    assert!(body.contains("21 degrees and sunny in Oslo"), "{body}");
    assert!(body.contains("get_weather tool"), "{body}");
    assert!(claude.violations().is_empty() && gemini.violations().is_empty());
}
