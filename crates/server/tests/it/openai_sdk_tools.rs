//! The official `openai` Python SDK against the real server with tools,
//! structured output and images, across all three wire protocols and their
//! failovers: a three-turn parallel tool loop (Anthropic serves turn 1,
//! fails with 529 so Gemini serves turn 2 with Anthropic's ids in its
//! history, then an OpenAI-compatible provider serves turn 3), streamed and
//! not; `chat.completions.parse` with a Pydantic model through each
//! protocol and a fallback on a schema-breaking answer; a `data:` image in
//! each protocol's own format. The Python is found as in `openai_sdk.rs`.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway, eventually};

use crate::common::{self, TestServer};

struct Three {
    claude: SimProvider,
    gemini: SimProvider,
    openai: SimProvider,
    server: TestServer,
}

/// Anthropic, Gemini and OpenAI-compatible simulators, in that order, and
/// the server in front of them.
async fn three() -> Three {
    let claude = SimProvider::anthropic().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("gemini", &gemini)
        .provider("openai", &openai)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Three {
        claude,
        gemini,
        openai,
        server,
    }
}

async fn sdk(url: &str, mode: &str) -> Value {
    common::run_sdk("openai", "openai_sdk_tools.py", url, mode).await
}

fn weather(city: &str) -> SimToolCall {
    SimToolCall::new("get_weather", json!({"city": city}))
}

/// The tool-call ids of every turn the SDK saw.
fn ids(v: &Value, turn: usize) -> Vec<String> {
    v["turns"][turn]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn tool_loop(stream: bool) {
    let t = three().await;
    t.claude
        .push(Reply::ToolCalls(vec![weather("Oslo"), weather("Paris")]));
    t.claude.always(Reply::status(529));
    t.gemini
        .push(Reply::ToolCalls(vec![weather("Rome"), weather("Madrid")]));
    t.gemini.always(Reply::status(503));
    t.openai
        .always(Reply::ToolCalls(vec![weather("Berlin"), weather("Lisbon")]));
    let v = sdk(&t.server.url, if stream { "loop-stream" } else { "loop" }).await;
    let providers: Vec<&str> = (0..3)
        .map(|i| v["turns"][i]["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["claude", "gemini", "openai"], "{v}");
    let cities = [["Oslo", "Paris"], ["Rome", "Madrid"], ["Berlin", "Lisbon"]];
    for (i, want) in cities.iter().enumerate() {
        let turn = &v["turns"][i];
        assert_eq!(turn["finish_reason"], "tool_calls", "turn {i}: {turn}");
        let got: Vec<&str> = turn["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                assert_eq!(c["name"], "get_weather");
                // Anthropic and OpenAI stream arguments in fragments;
                // Gemini sends each call whole.
                if stream && i != 1 {
                    assert!(
                        c["fragments"].as_u64().unwrap() >= 2,
                        "turn {i}: arguments arrive in fragments: {c}"
                    );
                }
                c["parsed"]["city"].as_str().unwrap()
            })
            .collect();
        assert_eq!(got, want, "turn {i}");
    }
    // Ids: Anthropic's, then ones minted for Gemini (which has none), then
    // the OpenAI-compatible provider's; all distinct.
    assert!(ids(&v, 0).iter().all(|id| id.starts_with("toolu_")), "{v}");
    let mut all: Vec<String> = (0..3).flat_map(|i| ids(&v, i)).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 6, "{v}");
    // Gemini got turn 1's calls and results with their names recovered
    // from the Anthropic ids.
    let to_gemini = t.gemini.received()[0].json();
    let text = to_gemini.to_string();
    assert!(text.contains("\"functionCall\""), "{text}");
    assert!(text.contains("\"functionResponse\""), "{text}");
    assert!(!text.contains("\"name\":null"), "{text}");
    // The OpenAI-compatible provider got every earlier id, unchanged.
    let to_openai = t.openai.received()[0].json();
    let text = to_openai.to_string();
    for id in ids(&v, 0).iter().chain(&ids(&v, 1)) {
        assert!(
            text.contains(&format!("\"tool_call_id\":\"{id}\"")),
            "{id}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_survives_two_provider_changes() {
    tool_loop(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_tool_loop_survives_two_provider_changes() {
    tool_loop(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parse_with_a_pydantic_model_through_each_protocol_and_a_fallback() {
    let t = three().await;
    let valid = r#"{"city": "Oslo", "celsius": -3.5}"#;
    // Pinned to each provider (four requests: one per pin, then the
    // default route, whose primary leaves out a required field).
    t.claude.push(Reply::text(valid));
    t.claude.push(Reply::text(r#"{"city": "Oslo"}"#));
    t.gemini.always(Reply::text(valid));
    t.openai.always(Reply::text(valid));
    let v = sdk(&t.server.url, "parse").await;
    for model in ["claude", "gemini", "openai"] {
        assert_eq!(v[model]["provider"], model, "{v}");
        assert_eq!(v[model]["city"], "Oslo");
        assert_eq!(v[model]["celsius"], -3.5);
    }
    assert_eq!(v["default"]["provider"], "gemini", "{v}");
    assert_eq!(v["default"]["fell_back"], "true");
    // Each protocol received the schema in its own form.
    let claude_body = t.claude.received()[0].json().to_string();
    assert!(claude_body.contains("celsius"), "{claude_body}");
    let gemini_body = t.gemini.received()[0].json();
    assert_eq!(
        gemini_body["generationConfig"]["responseMimeType"], "application/json",
        "{gemini_body}"
    );
    let openai_body = t.openai.received()[0].json();
    assert_eq!(openai_body["response_format"]["type"], "json_schema");
    // The fallback's reason is in the event and the metrics.
    let event = eventually("the fallback's event", async || {
        t.server
            .engine
            .recent()
            .events()
            .into_iter()
            .find(|e| e.fell_back)
    })
    .await;
    let outcomes: Vec<String> = event
        .attempts
        .iter()
        .map(|a| a.outcome.to_string())
        .collect();
    assert_eq!(outcomes, ["invalid_output", "ok"]);
    let metrics = eventually("the invalid_output attempt in the metrics", async || {
        let text = t.server.engine.metrics_text(false).await;
        text.lines()
            .any(|l| {
                l.starts_with("understudy_attempts_total")
                    && l.contains("outcome=\"invalid_output\"")
                    && l.contains("provider=\"claude\"")
            })
            .then_some(text)
    })
    .await;
    assert!(metrics.contains("invalid_output"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_url_image_arrives_in_each_protocol_s_format() {
    let t = three().await;
    t.claude.always(Reply::text("a red pixel"));
    t.gemini.always(Reply::text("a red pixel"));
    t.openai.always(Reply::text("a red pixel"));
    let v = sdk(&t.server.url, "image").await;
    for model in ["claude", "gemini", "openai"] {
        assert_eq!(v[model], "a red pixel", "{v}");
    }
    let claude = t.claude.received()[0].json();
    let block = &claude["messages"][0]["content"];
    let image = block
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "image")
        .unwrap();
    assert_eq!(image["source"]["type"], "base64");
    assert_eq!(image["source"]["media_type"], "image/png");
    let gemini = t.gemini.received()[0].json();
    let parts = gemini["contents"][0]["parts"].as_array().unwrap();
    let inline = parts
        .iter()
        .find(|p| p.get("inlineData").is_some())
        .unwrap();
    assert_eq!(inline["inlineData"]["mimeType"], "image/png");
    let openai = t.openai.received()[0].json();
    let parts = openai["messages"][0]["content"].as_array().unwrap();
    let image = parts.iter().find(|p| p["type"] == "image_url").unwrap();
    assert!(
        image["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,")
    );
}
