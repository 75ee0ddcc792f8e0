//! Gemini's thought signatures through the client APIs, over real HTTP:
//! a thinking Gemini simulator (which mints a signature for each answer's
//! first call, refuses any signature it did not mint, and wants its own
//! back in the current tool loop) serves turn 1 of a tool loop; the
//! client sends the history back with the ids it got, on
//! `/v1/chat/completions` and `/v1/messages`, streamed and not.
//!
//! - The same Gemini target serves turn 2: its signature comes back byte
//!   for byte (the strict simulator accepts only what it minted).
//! - Another protocol serves turn 2 (Gemini fails): it never sees the
//!   signature, and each call still pairs with its result.
//! - Another Gemini model, or another Gemini provider, serves turn 2: it
//!   gets Google's dummy, not the first one's signature.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::TestServer;

const DUMMY: &str = "skip_thought_signature_validator";

struct Setup {
    server: TestServer,
    /// `gemini`: a thinking Gemini, as `gemini-3-flash` and `gemini-3-pro`.
    gemini: SimProvider,
    /// `vertex`: another thinking Gemini provider.
    vertex: SimProvider,
    /// `openai`: OpenAI-compatible.
    openai: SimProvider,
    /// `claude`: Anthropic.
    claude: SimProvider,
}

async fn setup() -> Setup {
    let gemini = SimProvider::gemini().await.unwrap();
    let vertex = SimProvider::gemini().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    gemini.thinking();
    vertex.thinking();
    let gw = TestGateway::builder()
        .provider("gemini", &gemini)
        .provider("vertex", &vertex)
        .provider("openai", &openai)
        .provider("claude", &claude)
        .toml(
            "[timeouts]\nattempt = 2\nrequest = 4\nfirst_token = 2\nstream_idle = 2\n\
             [routes]\n\
             flash = [\"gemini:gemini-3-flash\"]\n\
             pro = [\"gemini:gemini-3-pro\"]\n\
             vertex = [\"vertex:gemini-3-flash\"]\n\
             flash_then_openai = [\"gemini:gemini-3-flash\", \"openai\"]\n\
             flash_then_claude = [\"gemini:gemini-3-flash\", \"claude\"]\n",
        )
        .build()
        .await
        .unwrap();
    Setup {
        server: TestServer::start(gw.engine).await,
        gemini,
        vertex,
        openai,
        claude,
    }
}

/// The client API a test speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    OpenAi,
    Anthropic,
}

const CASES: [(Api, bool); 4] = [
    (Api::OpenAi, false),
    (Api::OpenAi, true),
    (Api::Anthropic, false),
    (Api::Anthropic, true),
];

/// Two parallel calls: Gemini signs only the first.
fn scripted_calls() -> Reply {
    Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
        SimToolCall::new("get_time", json!({"city": "Paris"})),
    ])
}

async fn post(s: &Setup, api: Api, body: Value) -> (u16, String) {
    let path = match api {
        Api::OpenAi => "/v1/chat/completions",
        Api::Anthropic => "/v1/messages",
    };
    let a = s
        .server
        .post_with(
            path,
            &[("anthropic-version", "2023-06-01")],
            body.to_string(),
        )
        .await;
    (a.status, a.body)
}

fn tools(api: Api) -> Value {
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let names = ["get_weather", "get_time"];
    match api {
        Api::OpenAi => names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "parameters": schema}}))
            .collect(),
        Api::Anthropic => names
            .iter()
            .map(|n| json!({"name": n, "description": n, "input_schema": schema}))
            .collect(),
    }
}

/// Turn 1 on `model`: the ids of the calls the client got.
async fn turn_one(s: &Setup, api: Api, stream: bool, model: &str) -> Vec<String> {
    let body = json!({
        "model": model, "stream": stream, "max_tokens": 512, "tools": tools(api),
        "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
    });
    let (status, text) = post(s, api, body).await;
    assert_eq!(status, 200, "{text}");
    let ids = call_ids(api, stream, &text);
    assert_eq!(ids.len(), 2, "{text}");
    for id in &ids {
        assert!(
            !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "an id in Anthropic's alphabet: {id}"
        );
    }
    ids
}

/// The tool-call ids of an answer, in order.
fn call_ids(api: Api, stream: bool, text: &str) -> Vec<String> {
    let events: Vec<Value> = if stream {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    } else {
        vec![serde_json::from_str(text).unwrap()]
    };
    let mut ids = Vec::new();
    for v in &events {
        let found: Vec<&Value> = match (api, stream) {
            (Api::OpenAi, false) => v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .map(|a| a.iter().map(|c| &c["id"]).collect())
                .unwrap_or_default(),
            (Api::OpenAi, true) => v["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .map(|a| a.iter().map(|c| &c["id"]).collect())
                .unwrap_or_default(),
            (Api::Anthropic, false) => v["content"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|b| b["type"] == "tool_use")
                        .map(|b| &b["id"])
                        .collect()
                })
                .unwrap_or_default(),
            (Api::Anthropic, true) => {
                if v["type"] == "content_block_start" && v["content_block"]["type"] == "tool_use" {
                    vec![&v["content_block"]["id"]]
                } else {
                    Vec::new()
                }
            }
        };
        ids.extend(
            found
                .into_iter()
                .filter_map(Value::as_str)
                .map(str::to_owned),
        );
    }
    ids
}

/// Turn 2 on `model`: the history with the calls (by the ids the client
/// got) and their results.
async fn turn_two(s: &Setup, api: Api, stream: bool, model: &str, ids: &[String]) -> String {
    let messages = match api {
        Api::OpenAi => json!([
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": ids[0], "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": ids[1], "type": "function", "function": {"name": "get_time", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": ids[0], "content": "21C"},
            {"role": "tool", "tool_call_id": ids[1], "content": "14:05"}
        ]),
        Api::Anthropic => json!([
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": ids[0], "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": ids[1], "name": "get_time", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": ids[0], "content": "21C"},
                {"type": "tool_result", "tool_use_id": ids[1], "content": "14:05"}
            ]}
        ]),
    };
    let body = json!({
        "model": model, "stream": stream, "max_tokens": 512, "tools": tools(api),
        "messages": messages,
    });
    let (status, text) = post(s, api, body).await;
    assert_eq!(status, 200, "{api:?} stream={stream}: {text}");
    assert!(
        !text.contains("\"error\""),
        "{api:?} stream={stream}: {text}"
    );
    text
}

/// The model turn Gemini got back in its `n`th request: its two
/// `functionCall` parts.
fn replayed_calls(sim: &SimProvider, n: usize) -> Vec<Value> {
    let body = sim.received()[n].json();
    let contents = body["contents"].as_array().unwrap().clone();
    let model = contents
        .iter()
        .find(|c| c["role"] == "model")
        .unwrap_or_else(|| panic!("no model turn: {body}"));
    model["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("functionCall").is_some())
        .cloned()
        .collect()
}

/// The call ids and the result ids a fallback of `kind` got, in order.
fn paired_ids(kind: &str, got: &Value) -> (Vec<String>, Vec<String>) {
    let messages = got["messages"].as_array().unwrap();
    let ids = |items: Vec<&Value>| -> Vec<String> {
        items
            .into_iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    if kind == "openai" {
        let calls = messages
            .iter()
            .filter_map(|m| m["tool_calls"].as_array())
            .flatten()
            .map(|c| &c["id"])
            .collect();
        let results = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| &m["tool_call_id"])
            .collect();
        return (ids(calls), ids(results));
    }
    let blocks: Vec<&Value> = messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .collect();
    let of = |kind: &str, key: &str| {
        ids(blocks
            .iter()
            .filter(|b| b["type"] == kind)
            .map(|b| &b[key])
            .collect())
    };
    (of("tool_use", "id"), of("tool_result", "tool_use_id"))
}

fn no_violations(sims: &[&SimProvider]) {
    for sim in sims {
        assert_eq!(sim.violations(), Vec::<String>::new(), "{sim:?}");
    }
}

#[tokio::test]
async fn the_gemini_target_that_signed_gets_its_signature_back_byte_for_byte() {
    for (api, stream) in CASES {
        let s = setup().await;
        s.gemini.push(scripted_calls());
        let ids = turn_one(&s, api, stream, "flash").await;
        s.gemini.push(Reply::text("It is 21C and 14:05 in Paris."));
        let answer = turn_two(&s, api, stream, "flash", &ids).await;
        assert!(answer.contains("21C"), "{answer}");
        let calls = replayed_calls(&s.gemini, 1);
        let signature = calls[0]["thoughtSignature"].as_str().unwrap();
        assert_ne!(signature, DUMMY, "{api:?} stream={stream}");
        assert!(
            calls[1].get("thoughtSignature").is_none(),
            "only the first of parallel calls is signed: {calls:?}"
        );
        // Gemini gets the ids without the signature in them.
        for (call, id) in calls.iter().zip(&ids) {
            let sent = call["functionCall"]["id"].as_str().unwrap();
            assert!(id.starts_with(sent) && sent.len() < id.len() || sent == id);
            assert!(!sent.contains("__thought__"), "{sent}");
        }
        // Accepted by the simulator: the signature is exactly one it minted.
        no_violations(&[&s.gemini]);
        assert_eq!(s.gemini.request_count(), 2);
    }
}

#[tokio::test]
async fn another_protocol_never_sees_the_signature_and_calls_keep_their_results() {
    for (api, stream) in CASES {
        for fallback in ["openai", "claude"] {
            let s = setup().await;
            s.gemini.push(scripted_calls());
            let ids = turn_one(&s, api, stream, "flash").await;
            s.gemini.push(Reply::status(503));
            let sim = match fallback {
                "openai" => &s.openai,
                _ => &s.claude,
            };
            sim.push(Reply::ToolCalls(vec![
                SimToolCall::new("get_weather", json!({"city": "Lyon"}))
                    .with_id("call_fallback_0001"),
            ]));
            let route = format!("flash_then_{fallback}");
            let answer = turn_two(&s, api, stream, &route, &ids).await;
            // The fallback's own call reaches the client with its own id.
            assert_eq!(
                call_ids(api, stream, &answer),
                ["call_fallback_0001"],
                "{answer}"
            );
            // Gemini was tried first, with its own signature.
            let signature = replayed_calls(&s.gemini, 1)[0]["thoughtSignature"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_ne!(signature, DUMMY);
            let got = sim.received()[0].json();
            let text = got.to_string();
            assert!(!text.contains(&signature), "{fallback}: {text}");
            assert!(!text.contains("__thought__"), "{fallback}: {text}");
            let (calls, results) = paired_ids(fallback, &got);
            assert_eq!(calls.len(), 2, "{fallback}: {text}");
            assert_eq!(calls, results, "each call pairs with its result: {text}");
            // Each id as the target's alphabet and length take it (a
            // signature cut off, mapped injectively: see providers' ids.rs
            // and signature.rs).
            for (sent, id) in calls.iter().zip(&ids) {
                assert!(
                    sent.len() <= 64
                        && sent
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                    "{sent} for {id}"
                );
            }
            assert_ne!(calls[0], calls[1]);
            no_violations(&[&s.gemini, sim]);
        }
    }
}

#[tokio::test]
async fn another_gemini_model_or_provider_gets_the_dummy() {
    for (api, stream) in CASES {
        let s = setup().await;
        s.gemini.push(scripted_calls());
        let ids = turn_one(&s, api, stream, "flash").await;
        // The same provider, another model.
        s.gemini.push(Reply::text("It is 21C and 14:05 in Paris."));
        turn_two(&s, api, stream, "pro", &ids).await;
        assert!(
            s.gemini.received()[1]
                .path
                .contains("/models/gemini-3-pro:")
        );
        let calls = replayed_calls(&s.gemini, 1);
        assert_eq!(calls[0]["thoughtSignature"], DUMMY, "{calls:?}");
        assert!(calls[1].get("thoughtSignature").is_none());
        // Another provider (which refuses any signature it did not mint).
        s.vertex.push(Reply::text("It is 21C and 14:05 in Paris."));
        turn_two(&s, api, stream, "vertex", &ids).await;
        let calls = replayed_calls(&s.vertex, 0);
        assert_eq!(calls[0]["thoughtSignature"], DUMMY, "{calls:?}");
        no_violations(&[&s.gemini, &s.vertex]);
        // And back on the target that signed: its own again.
        s.gemini.push(Reply::text("It is 21C and 14:05 in Paris."));
        turn_two(&s, api, stream, "flash", &ids).await;
        let calls = replayed_calls(&s.gemini, 2);
        assert_ne!(calls[0]["thoughtSignature"], DUMMY, "{calls:?}");
        no_violations(&[&s.gemini]);
    }
}

// === the strict simulator ===

/// A raw `generateContent` request straight to `sim`.
async fn raw(sim: &SimProvider, contents: Value) -> (u16, Value) {
    let resp = understudy_testkit::http_client()
        .post(format!(
            "{}/models/gemini-3-flash:generateContent",
            sim.base_url()
        ))
        .header("content-type", "application/json")
        .body(json!({"contents": contents}).to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (
        status,
        serde_json::from_str(&resp.text().await.unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn the_thinking_simulator_refuses_what_gemini_3_refuses() {
    let sim = SimProvider::gemini().await.unwrap();
    sim.thinking();
    let user = json!({"role": "user", "parts": [{"text": "Weather in Paris?"}]});
    let call = |signature: Option<&str>| {
        let mut part = json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}});
        if let Some(s) = signature {
            part["thoughtSignature"] = json!(s);
        }
        json!({"role": "model", "parts": [part]})
    };
    let result = |name: &str| json!({"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"result": "21C"}}}]});
    let cases = [
        (
            json!([user, call(None), result("get_weather")]),
            "missing a thought_signature",
        ),
        (
            json!([user, call(Some("bm90LW1pbnRlZA==")), result("get_weather")]),
            "Corrupted thought signature.",
        ),
        (
            json!([user, call(Some(DUMMY)), result("get_time")]),
            "function response turn answers the function calls",
        ),
        (
            json!([user, result("get_weather")]),
            "comes immediately after a function call turn",
        ),
        (
            json!([{"role": "assistant", "parts": [{"text": "hi"}]}, user]),
            "Please use a valid role: user, model.",
        ),
    ];
    for (i, (contents, message)) in cases.iter().enumerate() {
        let (status, body) = raw(&sim, contents.clone()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
        let got = body["error"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{got}");
        assert_eq!(sim.violations().len(), i + 1);
    }
    // A signed call from an earlier turn (before the last user text) is not
    // checked; the dummy is always accepted.
    let ok = [
        json!([user, call(None), result("get_weather"), user]),
        json!([user, call(Some(DUMMY)), result("get_weather")]),
    ];
    for contents in ok {
        sim.push(Reply::text("fine"));
        let (status, body) = raw(&sim, contents).await;
        assert_eq!(status, 200, "{body}");
    }
    // What it mints, it takes back.
    sim.push(scripted_calls());
    let (status, body) = raw(&sim, json!([user])).await;
    assert_eq!(status, 200, "{body}");
    let parts = &body["candidates"][0]["content"]["parts"];
    let minted = parts[0]["thoughtSignature"].as_str().unwrap();
    assert!(parts[1].get("thoughtSignature").is_none());
    sim.push(Reply::text("fine"));
    let (status, body) = raw(
        &sim,
        json!([user, call(Some(minted)), result("get_weather")]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A simulator that does not think signs nothing.
    let plain = SimProvider::gemini().await.unwrap();
    plain.push(scripted_calls());
    let (_, body) = raw(&plain, json!([user])).await;
    assert!(
        body["candidates"][0]["content"]["parts"][0]
            .get("thoughtSignature")
            .is_none()
    );
}
