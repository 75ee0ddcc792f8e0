//! What is decided before a request's body is built, against the real
//! server: a body past `server.max_parts` is each API's own 400 naming the
//! limit and its setting, and reaches no provider; a client record whose
//! minute's requests or budget are spent is refused before its body is
//! read (a malformed body gets the 429 or 402, not a 400); and on Google's
//! paths, which name the model, a record whose `models` do not cover it
//! gets Google's 403 before the body is parsed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, TestGateway, eventually, eventually_within};

use crate::common::{Answer, TestServer};

/// One gateway over an OpenAI-compatible simulator as `groq`, priced so
/// that a budget can be spent, with `toml` on top.
async fn gateway(toml: &str) -> (SimProvider, TestServer) {
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello"));
    let gw = TestGateway::builder()
        .provider("groq", &sim)
        .provider_option(
            "groq",
            "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }",
        )
        .toml(toml)
        .build()
        .await
        .unwrap();
    (sim, TestServer::start(gw.engine).await)
}

/// A front end: its path, its key headers, a body of `n` small messages.
struct Api {
    name: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: fn(usize) -> String,
    /// Whether the answer is the API's 400, naming `needle`.
    refused: fn(&Answer, &str) -> Result<(), String>,
}

const KEY: &str = "sk-parts-0123456789";

fn apis() -> Vec<Api> {
    fn messages(n: usize) -> Vec<Value> {
        (0..n)
            .map(
                |i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "hi"}),
            )
            .collect()
    }
    fn contents(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "model" }, "parts": [{"text": "hi"}]}))
            .collect()
    }
    fn openai(a: &Answer, needle: &str) -> Result<(), String> {
        let e = &a.json_or_text()["error"];
        let message = e["message"].as_str().unwrap_or_default();
        (a.status == 400 && e["code"] == "invalid_request" && message.contains(needle))
            .then_some(())
            .ok_or_else(|| format!("{} {}", a.status, a.body))
    }
    vec![
        Api {
            name: "chat completions",
            path: "/v1/chat/completions",
            headers: &[("authorization", "Bearer sk-parts-0123456789")],
            body: |n| json!({"model": "default", "messages": messages(n)}).to_string(),
            refused: openai,
        },
        Api {
            name: "responses",
            path: "/v1/responses",
            headers: &[("authorization", "Bearer sk-parts-0123456789")],
            body: |n| json!({"model": "default", "input": messages(n)}).to_string(),
            refused: openai,
        },
        Api {
            name: "messages",
            path: "/v1/messages",
            headers: &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
            body: |n| {
                json!({"model": "default", "max_tokens": 16, "messages": messages(n)}).to_string()
            },
            refused: |a, needle| {
                let v = a.json_or_text();
                let message = v["error"]["message"].as_str().unwrap_or_default();
                (a.status == 400
                    && v["type"] == "error"
                    && v["error"]["type"] == "invalid_request_error"
                    && message.contains(needle))
                .then_some(())
                .ok_or_else(|| format!("{} {}", a.status, a.body))
            },
        },
        Api {
            name: "gemini",
            path: "/v1beta/models/default:generateContent",
            headers: &[("x-goog-api-key", KEY)],
            body: |n| json!({"contents": contents(n)}).to_string(),
            refused: |a, needle| {
                let e = &a.json_or_text()["error"];
                let message = e["message"].as_str().unwrap_or_default();
                (a.status == 400
                    && e["code"] == 400
                    && e["status"] == "INVALID_ARGUMENT"
                    && message.contains(needle))
                .then_some(())
                .ok_or_else(|| format!("{} {}", a.status, a.body))
            },
        },
        Api {
            name: "neutral",
            path: "/v1/generate",
            headers: &[("authorization", "Bearer sk-parts-0123456789")],
            body: |n| json!({"messages": messages(n)}).to_string(),
            refused: openai,
        },
    ]
}

#[tokio::test]
async fn a_body_past_max_parts_is_each_api_s_own_400_and_reaches_no_provider() {
    let toml = format!("[server]\nmax_parts = 1000\napi_keys = [\"{KEY}\"]\n");
    let (sim, s) = gateway(&toml).await;
    for api in apis() {
        // A small body passes the same route: the limit is what refuses.
        let small = s.post_with(api.path, api.headers, (api.body)(3)).await;
        let over = s.post_with(api.path, api.headers, (api.body)(2000)).await;
        let served = sim.request_count();
        (api.refused)(&over, "server.max_parts").unwrap_or_else(|e| panic!("{}: {e}", api.name));
        (api.refused)(&over, "more than 1000 JSON parts")
            .unwrap_or_else(|e| panic!("{}: {e}", api.name));
        assert!(
            small.status == 200 || (api.refused)(&small, "server.max_parts").is_err(),
            "{}: {} {}",
            api.name,
            small.status,
            small.body
        );
        // The refused body reached no provider (the count is read after
        // both answers).
        assert_eq!(sim.request_count(), served, "{}", api.name);
    }
    // The chat body of three messages was served.
    assert!(sim.request_count() >= 1);
    // A count refuses as a generation does.
    let count = s
        .post_with(
            "/v1/messages/count_tokens",
            &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
            json!({"model": "default", "messages": (0..2000).map(|_| json!({"role": "user", "content": "hi"})).collect::<Vec<_>>()})
                .to_string(),
        )
        .await;
    assert_eq!(count.status, 400, "{}", count.body);
    assert!(count.body.contains("server.max_parts"), "{}", count.body);
    // Nesting past what the parser takes is refused with its reason.
    let deep = format!(
        "{{\"model\": \"default\", \"messages\": [], \"x\": {}{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let nested = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-parts-0123456789")],
            deep,
        )
        .await;
    assert_eq!(nested.status, 400, "{}", nested.body);
    assert!(nested.body.contains("deeper than 127"), "{}", nested.body);
}

#[tokio::test]
async fn the_default_max_parts_takes_a_long_agent_session() {
    let (sim, s) = gateway(&format!("[server]\napi_keys = [\"{KEY}\"]\n")).await;
    // Two thousand messages, a hundred tools with schemas: about 30 000
    // parts, well under the default.
    let tools: Vec<Value> = (0..100)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
                "parameters": {"type": "object", "properties": {
                    "path": {"type": "string"}, "lines": {"type": "array", "items": {"type": "integer"}}},
                    "required": ["path"]}}})
        })
        .collect();
    let messages: Vec<Value> = (0..2000)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("turn {i}")}))
        .collect();
    let body = json!({"model": "default", "messages": messages, "tools": tools}).to_string();
    let a = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-parts-0123456789")],
            body,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(sim.request_count(), 1);
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn a_record_whose_rpm_is_spent_gets_429_for_a_malformed_body() {
    let toml =
        "[[server.clients]]\nname = \"one-a-minute\"\nkey = \"sk-one-a-minute-0123\"\nrpm = 1\n";
    let (sim, s) = gateway(toml).await;
    let bearer = [("authorization", "Bearer sk-one-a-minute-0123")];
    // Both requests in one minute (they take milliseconds).
    eventually_within(
        Duration::from_secs(10),
        "the first 55 seconds of a minute",
        async || unix_secs() % 60 < 55,
    )
    .await;
    let first = s
        .post_with(
            "/v1/chat/completions",
            &bearer,
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let malformed = s
        .post_with("/v1/chat/completions", &bearer, "{\"messages\": [nope")
        .await;
    assert_eq!(malformed.status, 429, "{}", malformed.body);
    assert_eq!(malformed.json()["error"]["code"], "rate_limit_exceeded");
    assert!(malformed.header("retry-after").is_some());
    assert_eq!(
        malformed.header("x-ratelimit-remaining-requests"),
        Some("0")
    );
    // Google's shape on Google's path, Anthropic's on Anthropic's.
    let gemini = s
        .post_with(
            "/v1beta/models/default:generateContent",
            &[("x-goog-api-key", "sk-one-a-minute-0123")],
            "{{{",
        )
        .await;
    assert_eq!(gemini.status, 429, "{}", gemini.body);
    assert_eq!(gemini.json()["error"]["status"], "RESOURCE_EXHAUSTED");
    let messages = s
        .post_with(
            "/v1/messages",
            &[
                ("x-api-key", "sk-one-a-minute-0123"),
                ("anthropic-version", "2023-06-01"),
            ],
            "not json",
        )
        .await;
    assert_eq!(messages.status, 429, "{}", messages.body);
    assert_eq!(messages.json()["error"]["type"], "rate_limit_error");
    // A count is not held to the rate: its malformed body is a 400.
    let count = s
        .post_with(
            "/v1/messages/count_tokens",
            &[
                ("x-api-key", "sk-one-a-minute-0123"),
                ("anthropic-version", "2023-06-01"),
            ],
            "not json",
        )
        .await;
    assert_eq!(count.status, 400, "{}", count.body);
    assert_eq!(sim.request_count(), 1);
}

#[tokio::test]
async fn a_spent_budget_is_a_402_before_the_body() {
    let key = "sk-budget-0123456789";
    let toml = format!(
        "[[server.clients]]\nname = \"small\"\nkey = \"{key}\"\nbudget_usd = 0.01\nwindow = \"day\"\n"
    );
    let (sim, s) = gateway(&toml).await;
    // An answer far longer than the `max_tokens` admission priced.
    sim.always(Reply::text("word ".repeat(50)));
    let bearer = format!("Bearer {key}");
    let headers = [("authorization", bearer.as_str())];
    // At USD 1000 a million tokens, "hello there" with `max_tokens = 1`
    // has a worst case of about USD 0.004, within the budget; its answer
    // of 50 words costs about USD 0.05, so the one request admitted
    // spends the budget (only usage above the estimate can).
    {
        let a = s
            .post_with(
                "/v1/chat/completions",
                &headers,
                json!({"model": "default", "max_tokens": 1, "messages": [{"role": "user", "content": "hello there"}]})
                    .to_string(),
            )
            .await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let refused = eventually("a malformed body refused for the budget", async || {
        let a = s
            .post_with("/v1/chat/completions", &headers, "{\"model\": ")
            .await;
        match a.status {
            402 => Ok(a),
            _ => Err(format!("{} {}", a.status, a.body)),
        }
    })
    .await;
    assert_eq!(refused.json()["error"]["code"], "insufficient_quota");
    assert_eq!(refused.header("x-should-retry"), Some("false"));
    let gemini = s
        .post_with(
            "/v1beta/models/default:streamGenerateContent",
            &[("x-goog-api-key", key)],
            "[]",
        )
        .await;
    assert_eq!(gemini.status, 402, "{}", gemini.body);
    assert_eq!(gemini.json()["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(sim.request_count(), 1);
}

#[tokio::test]
async fn a_gemini_model_outside_the_record_s_models_is_a_403_before_the_parse() {
    let toml = "[routes]\nfast = [\"groq\"]\n\
        [[server.clients]]\nname = \"scoped\"\nkey = \"sk-scoped-0123456789\"\n\
        models = [\"fast\"]\n";
    let (sim, s) = gateway(toml).await;
    let key = [("x-goog-api-key", "sk-scoped-0123456789")];
    for method in ["generateContent", "streamGenerateContent", "countTokens"] {
        // Not JSON at all: refused for the model, so never parsed.
        let denied = s
            .post_with(
                &format!("/v1beta/models/groq:{method}"),
                &key,
                "{{{ not json",
            )
            .await;
        assert_eq!(denied.status, 403, "{method}: {}", denied.body);
        let e = &denied.json()["error"];
        assert_eq!(
            e["status"], "PERMISSION_DENIED",
            "{method}: {}",
            denied.body
        );
        assert_eq!(e["code"], 403);
        // Within the scope, the same body is parsed, and refused for it.
        let parsed = s
            .post_with(&format!("/v1/models/fast:{method}"), &key, "{{{ not json")
            .await;
        assert_eq!(parsed.status, 400, "{method}: {}", parsed.body);
    }
    // A generation's route override is what is asked for.
    let overridden = s
        .post_with(
            "/v1beta/models/fast:generateContent",
            &[
                ("x-goog-api-key", "sk-scoped-0123456789"),
                ("x-understudy-route", "groq"),
            ],
            "{{{",
        )
        .await;
    assert_eq!(overridden.status, 403, "{}", overridden.body);
    let served = s
        .post_with(
            "/v1beta/models/fast:generateContent",
            &key,
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string(),
        )
        .await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(sim.request_count(), 1);
}
