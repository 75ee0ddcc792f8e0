//! The official `openai` Python SDK's Responses API (`client.responses`)
//! against the real server, every case with the primary failing and a
//! target of another protocol serving: text, the stream helper and its
//! accumulated final response, a three-turn function-tool loop (history as
//! items, streamed and not; Anthropic serves turn 1 and fails, Gemini turn
//! 2 and fails, an OpenAI-compatible target turn 3), the same loop over
//! `previous_response_id` (then retrieve, `input_items`, delete),
//! `responses.parse` with a Pydantic model (the primary's answer breaks
//! the schema), an image; and `previous_response_id` answered by the other
//! instance of a two-instance fleet sharing a real `redis-server`.

use serde_json::{Value, json};
use understudy_testkit::{RedisServer, Reply, SimProvider, SimToolCall, TestGateway, eventually};
use understudy_types::Protocol;

use crate::common::{self, TestServer};

struct Three {
    claude: SimProvider,
    gemini: SimProvider,
    openai: SimProvider,
    server: TestServer,
}

/// Anthropic (the primary), Gemini and OpenAI-compatible simulators, and
/// the server in front of them (with `REDIS_URL` when given).
async fn three_with(redis: Option<&RedisServer>) -> Three {
    let claude = SimProvider::anthropic().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let mut builder = TestGateway::builder()
        .provider("claude", &claude)
        .provider("gemini", &gemini)
        .provider("openai", &openai)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test");
    if let Some(redis) = redis {
        builder = builder.env("REDIS_URL", &redis.url());
    }
    let gw = builder.build().await.unwrap();
    let server = TestServer::start(gw.engine).await;
    Three {
        claude,
        gemini,
        openai,
        server,
    }
}

async fn three() -> Three {
    three_with(None).await
}

async fn sdk(url: &str, mode: &str) -> Value {
    common::run_sdk("openai", "openai_responses.py", url, mode).await
}

fn weather(city: &str) -> SimToolCall {
    SimToolCall::new("get_weather", json!({"city": city}))
}

/// Turn 1 by Anthropic (then 529), turn 2 by Gemini (then 503), turn 3
/// by the OpenAI-compatible target, which answers in words.
fn script_loop(t: &Three) {
    t.claude
        .push(Reply::ToolCalls(vec![weather("Oslo"), weather("Paris")]));
    t.claude.always(Reply::status(529));
    t.gemini
        .push(Reply::ToolCalls(vec![weather("Rome"), weather("Madrid")]));
    t.gemini.always(Reply::status(503));
    t.openai.always(Reply::text("21 degrees in all six cities"));
}

/// The loop's answers as the SDK saw them, and what each target received.
fn check_loop(t: &Three, v: &Value) {
    let turns = v["turns"].as_array().unwrap();
    let cities = [vec!["Oslo", "Paris"], vec!["Rome", "Madrid"], vec![]];
    for (i, want) in cities.iter().enumerate() {
        let got: Vec<&str> = turns[i]["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                assert_eq!(c["name"], "get_weather", "{c}");
                assert!(c["id"].as_str().unwrap().starts_with("fc_"), "{c}");
                c["parsed"]["city"].as_str().unwrap()
            })
            .collect();
        assert_eq!(&got, want, "turn {i}: {v}");
        assert_eq!(turns[i]["status"], "completed", "{v}");
        assert!(turns[i]["id"].as_str().unwrap().starts_with("resp_"));
    }
    assert_eq!(turns[2]["text"], "21 degrees in all six cities", "{v}");
    assert_eq!(turns[2]["model"], "openai-model");
    // Gemini got turn 1's calls and results; the OpenAI-compatible target
    // got every earlier call id as its results' tool_call_id.
    let to_gemini = t.gemini.received()[0].json().to_string();
    assert!(to_gemini.contains("\"functionResponse\""), "{to_gemini}");
    let to_openai = t.openai.received()[0].json().to_string();
    for turn in &turns[..2] {
        for c in turn["calls"].as_array().unwrap() {
            let id = c["call_id"].as_str().unwrap();
            assert!(
                to_openai.contains(&format!("\"tool_call_id\":\"{id}\"")),
                "{id}: {to_openai}"
            );
        }
    }
    for sim in [&t.claude, &t.gemini, &t.openai] {
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    }
}

/// The documented order of a text answer's events.
const TEXT_EVENTS: [&str; 4] = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
];

#[tokio::test(flavor = "multi_thread")]
async fn create_text_falls_back_to_another_protocol() {
    let t = three().await;
    t.claude.always(Reply::status(529));
    t.gemini.always(Reply::text("Hello!"));
    let v = sdk(&t.server.url, "text").await;
    assert_eq!(v["provider"], "gemini", "{v}");
    assert_eq!(v["fell_back"], "true");
    assert_eq!(v["text"], "Hello!");
    assert_eq!(v["status"], "completed");
    assert!(v["usage"]["total_tokens"].as_u64().is_some(), "{v}");
    // Instructions became the system prompt.
    let body = t.gemini.received()[0].json();
    assert!(body.to_string().contains("Be brief."), "{body}");
    let event = eventually("the event", async || {
        t.server.engine.recent().events().into_iter().next()
    })
    .await;
    assert_eq!(event.api, Some(Protocol::Responses));
    assert_eq!(
        understudy_types::protocol::api_label(event.api),
        "responses"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_helper_accumulates_a_streamed_answer() {
    let t = three().await;
    t.claude.always(Reply::status(529));
    t.gemini.always(Reply::stream(&["Hel", "lo ", "there"]));
    let v = sdk(&t.server.url, "stream").await;
    assert_eq!(v["text"], "Hello there", "{v}");
    assert_eq!(v["deltas"], "Hello there");
    assert_eq!(v["status"], "completed");
    let types: Vec<&str> = v["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types[..4], TEXT_EVENTS, "{types:?}");
    let tail = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ];
    assert_eq!(types[types.len() - 4..], tail, "{types:?}");
    assert!(
        types[4..types.len() - 4]
            .iter()
            .all(|t| *t == "response.output_text.delta"),
        "{types:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_survives_two_provider_changes() {
    let t = three().await;
    script_loop(&t);
    let v = sdk(&t.server.url, "loop").await;
    let providers: Vec<&str> = (0..3)
        .map(|i| v["turns"][i]["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["claude", "gemini", "openai"], "{v}");
    check_loop(&t, &v);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_tool_loop_survives_two_provider_changes() {
    let t = three().await;
    script_loop(&t);
    let v = sdk(&t.server.url, "loop-stream").await;
    check_loop(&t, &v);
    let types: Vec<&str> = v["turns"][0]["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    // Two calls, each: added, argument deltas, arguments done, item done.
    let added = types
        .iter()
        .filter(|t| **t == "response.output_item.added")
        .count();
    assert_eq!(added, 2, "{types:?}");
    assert!(types.contains(&"response.function_call_arguments.delta"));
    assert!(types.contains(&"response.function_call_arguments.done"));
    assert_eq!(types.last(), Some(&"response.completed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn previous_response_id_continues_on_another_provider() {
    let t = three().await;
    script_loop(&t);
    let v = sdk(&t.server.url, "previous").await;
    let providers: Vec<&str> = (0..3)
        .map(|i| v["turns"][i]["provider"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["claude", "gemini", "openai"], "{v}");
    check_loop(&t, &v);
    // The last turn's target got the whole conversation from the store.
    let to_openai = t.openai.received()[0].json();
    let roles: Vec<&str> = to_openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "tool"
        ],
        "{to_openai}"
    );
    assert_eq!(v["stored"]["text"], "21 degrees in all six cities");
    assert_eq!(
        v["input_items"],
        json!(["function_call_output", "function_call_output"])
    );
    assert_eq!(v["deleted_is_gone"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn parse_with_a_pydantic_model_falls_back_on_a_broken_schema() {
    let t = three().await;
    t.claude.always(Reply::text(r#"{"city": "Oslo"}"#));
    t.gemini
        .always(Reply::text(r#"{"city": "Oslo", "celsius": -3.5}"#));
    let v = sdk(&t.server.url, "parse").await;
    assert_eq!(v["provider"], "gemini", "{v}");
    assert_eq!(v["fell_back"], "true");
    assert_eq!(v["city"], "Oslo");
    assert_eq!(v["celsius"], -3.5);
    let gemini = t.gemini.received()[0].json();
    assert_eq!(
        gemini["generationConfig"]["responseMimeType"], "application/json",
        "{gemini}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_reaches_the_fallback_in_its_format() {
    let t = three().await;
    t.claude.always(Reply::status(529));
    t.gemini.always(Reply::text("a red pixel"));
    let v = sdk(&t.server.url, "image").await;
    assert_eq!(v["provider"], "gemini", "{v}");
    assert_eq!(v["text"], "a red pixel");
    let claude = t.claude.received()[0].json();
    let image = claude["messages"][0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "image")
        .cloned()
        .unwrap();
    assert_eq!(image["source"]["media_type"], "image/png");
    let gemini = t.gemini.received()[0].json();
    let parts = gemini["contents"][0]["parts"].as_array().unwrap();
    assert!(
        parts
            .iter()
            .any(|p| p["inlineData"]["mimeType"] == "image/png"),
        "{gemini}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn previous_response_id_works_across_a_fleet() {
    let Ok(redis) = RedisServer::start() else {
        panic!("this test needs redis-server (cargo xtask test provisions it)");
    };
    let a = three_with(Some(&redis)).await;
    let b = three_with(Some(&redis)).await;
    a.claude.always(Reply::text("Noted: Oslo."));
    b.claude.always(Reply::status(529));
    b.gemini.always(Reply::text("Snow in Oslo tomorrow."));
    let first = sdk(&a.server.url, "first").await;
    let id = first["id"].as_str().unwrap();
    let second = sdk(&b.server.url, &format!("second={id}")).await;
    assert_eq!(second["provider"], "gemini", "{second}");
    assert_eq!(second["text"], "Snow in Oslo tomorrow.");
    // Instance b's fallback got instance a's turn from Redis.
    let body = b.gemini.received()[0].json().to_string();
    assert!(body.contains("Remember: the city is Oslo."), "{body}");
    assert!(body.contains("Noted: Oslo."), "{body}");
}
