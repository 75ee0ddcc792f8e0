//! The official `anthropic` Python SDK against the real server's Messages
//! API: non-streamed and streamed text, a two-turn tool loop (each also
//! streamed), an image, count_tokens, the model list and errors. Every
//! second turn goes to an Anthropic simulator that fails it with 529, so an
//! OpenAI-compatible simulator serves it, and the SDK cannot tell. Extended
//! thinking, streamed and not: a signed thinking block replayed in the
//! second turn reaches Anthropic byte-identical when it serves both turns,
//! and never reaches the OpenAI-compatible simulator when it does not. The
//! Python is found as in `openai_sdk.rs` (`common::python_with`).

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::{self, TestServer};

struct Two {
    claude: SimProvider,
    openai: SimProvider,
    server: TestServer,
}

/// An Anthropic simulator (the primary) and an OpenAI-compatible one, and
/// the server in front of them.
async fn two() -> Two {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Two {
        claude,
        openai,
        server,
    }
}

async fn sdk(url: &str, mode: &str) -> Value {
    common::run_sdk("anthropic", "anthropic_sdk.py", url, mode).await
}

/// The text of an answer's text blocks.
fn text_of(turn: &Value) -> String {
    turn["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn text_streamed_and_not_survives_an_anthropic_529() {
    let t = two().await;
    for _ in 0..2 {
        t.claude
            .push(Reply::text("A gateway walks into a bar."))
            .push(Reply::status(529));
    }
    t.openai
        .always(Reply::text("The bar was down, so it fell back."));
    let v = sdk(&t.server.url, "text").await;
    for mode in ["plain", "stream"] {
        let turns = &v[mode];
        assert_eq!(turns[0]["provider"], "claude", "{mode}: {v}");
        assert_eq!(turns[0]["model"], "claude-model");
        assert_eq!(text_of(&turns[0]), "A gateway walks into a bar.");
        assert_eq!(turns[1]["provider"], "openai", "{mode}: {v}");
        assert_eq!(turns[1]["model"], "openai-model");
        assert_eq!(text_of(&turns[1]), "The bar was down, so it fell back.");
        for turn in turns.as_array().unwrap() {
            assert_eq!(turn["stop_reason"], "end_turn", "{turn}");
            assert!(turn["id"].as_str().unwrap().starts_with("msg_"));
            assert!(
                turn["usage"]["output_tokens"].as_u64().unwrap() > 0,
                "{turn}"
            );
        }
    }
    // The SDK's text_stream saw the answer in pieces.
    let pieces = v["stream"][1]["text_stream"].as_array().unwrap();
    assert!(pieces.len() > 2, "{v}");
    // Claude got the SDK's body as sent (its cache marker kept); the
    // OpenAI-compatible fallback got the system blocks as the system prompt.
    let to_claude = t.claude.received()[0].json();
    assert_eq!(
        to_claude["system"],
        json!([{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]),
        "{to_claude}"
    );
    let to_openai = t.openai.received()[0].json();
    assert_eq!(
        to_openai["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Tell me a joke about gateways."},
            {"role": "assistant", "content": "A gateway walks into a bar."},
            {"role": "user", "content": "Another one, please."}
        ]),
        "{to_openai}"
    );
    assert_eq!(v["count_tokens"]["estimate"], "true");
    assert_eq!(v["count_tokens"]["input_tokens"], 8, "30 characters / 4");
    let models: Vec<&str> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(
        models,
        ["default", "claude:claude-model", "openai:openai-model"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_two_turn_tool_loop_survives_an_anthropic_529() {
    let t = two().await;
    let calls = || {
        Reply::ToolCalls(vec![
            SimToolCall::new("get_weather", json!({"city": "Oslo"})),
            SimToolCall::new("get_weather", json!({"city": "Paris"})),
        ])
    };
    for _ in 0..2 {
        t.claude.push(calls()).push(Reply::status(529));
    }
    t.openai
        .always(Reply::text("Oslo is 21 degrees, and so is Paris."));
    let v = sdk(&t.server.url, "tools").await;
    for mode in ["plain", "stream"] {
        let [first, second] = [&v[mode][0], &v[mode][1]];
        assert_eq!(first["provider"], "claude", "{mode}: {v}");
        assert_eq!(first["stop_reason"], "tool_use");
        let uses: Vec<&Value> = first["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .collect();
        let cities: Vec<&str> = uses
            .iter()
            .map(|b| {
                assert!(b["id"].as_str().unwrap().starts_with("toolu_"), "{b}");
                assert_eq!(b["name"], "get_weather");
                b["input"]["city"].as_str().unwrap()
            })
            .collect();
        assert_eq!(cities, ["Oslo", "Paris"], "{mode}: {first}");
        assert_eq!(second["provider"], "openai", "{mode}: {v}");
        assert_eq!(second["stop_reason"], "end_turn");
        assert_eq!(text_of(second), "Oslo is 21 degrees, and so is Paris.");
    }
    // The OpenAI-compatible provider got the calls and their results, by
    // the ids Anthropic minted.
    for (i, mode) in ["plain", "stream"].iter().enumerate() {
        let got = t.openai.received()[i].json();
        let messages = got["messages"].as_array().unwrap();
        let ids: Vec<&str> = v[mode][0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["id"].as_str())
            .collect();
        let called: Vec<&str> = messages[1]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(called, ids, "{got}");
        let answered: Vec<&str> = messages[2..]
            .iter()
            .map(|m| {
                assert_eq!(m["role"], "tool", "{got}");
                m["tool_call_id"].as_str().unwrap()
            })
            .collect();
        assert_eq!(answered, ids, "{got}");
        assert_eq!(got["tools"][0]["function"]["name"], "get_weather");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_survives_an_anthropic_529() {
    let t = two().await;
    t.claude
        .push(Reply::text("A red pixel."))
        .push(Reply::status(529));
    t.openai.always(Reply::text("Red."));
    let v = sdk(&t.server.url, "image").await;
    let turns = &v["turns"];
    assert_eq!(turns[0]["provider"], "claude", "{v}");
    assert_eq!(text_of(&turns[0]), "A red pixel.");
    assert_eq!(turns[1]["provider"], "openai", "{v}");
    assert_eq!(text_of(&turns[1]), "Red.");
    // Anthropic got its own image block; the fallback an image_url with
    // the same bytes as a data: URL.
    let to_claude = t.claude.received()[0].json();
    let block = &to_claude["messages"][0]["content"][0];
    assert_eq!(block["type"], "image", "{to_claude}");
    assert_eq!(block["source"]["type"], "base64");
    assert_eq!(block["source"]["media_type"], "image/png");
    let to_openai = t.openai.received()[0].json();
    let part = &to_openai["messages"][0]["content"][0];
    assert_eq!(part["type"], "image_url", "{to_openai}");
    let url = part["image_url"]["url"].as_str().unwrap();
    assert_eq!(
        url,
        format!(
            "data:image/png;base64,{}",
            block["source"]["data"].as_str().unwrap()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_raises_its_own_error_classes() {
    let t = two().await;
    t.claude.push(Reply::status(529));
    t.openai.push(Reply::status(503));
    let v = sdk(&t.server.url, "errors").await;
    assert_eq!(
        v,
        json!({
            "down": {"class": "OverloadedError", "status": 529, "type": "overloaded_error"},
            "wrong_key": {"class": "AuthenticationError", "status": 401, "type": "authentication_error"},
            "server_tool": {"class": "BadRequestError", "status": 400, "type": "invalid_request_error"},
        })
    );
}

/// The thinking of the scripted first answer: quotes, a newline and a
/// backslash, so the replay must keep JSON escapes as they were.
const THOUGHT: &str =
    "Split it: 27 * 453 = 27 * 400 + 27 * 53.\n10800 + 1431 = 12231, \"exactly\" \\ no carry.";

/// A signature as Anthropic sends one: base64 with `+`, `/` and `=`.
const SIGNATURE: &str = "EqQBCkgIBRABGAIiQFx0T+/3r2sIm9cJzQ1x0aV3pQ4lHkq8u7rXl2h/9hGZt0e1mC6wz5dYb4rN8sKf2JvE3yA0iP7oEgz+Xc/1Tw==";

/// The first answer, not streamed: a signed thinking block, then the text.
fn thinking_answer() -> String {
    json!({
        "id": "msg_01ThinkSim", "type": "message", "role": "assistant",
        "model": "claude-model",
        "content": [
            {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
            {"type": "text", "text": "12231."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 14, "output_tokens": 40}
    })
    .to_string()
}

/// The same answer streamed as Anthropic streams thinking: a `thinking`
/// block of `thinking_delta`s closed by a `signature_delta`, then a text
/// block.
fn thinking_stream() -> String {
    let (first, rest) = THOUGHT.split_at(20);
    let events = [
        json!({"type": "message_start", "message": {
            "id": "msg_01ThinkSim", "type": "message", "role": "assistant",
            "model": "claude-model", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 14, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": first}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": rest}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "12231."}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 40}}),
        json!({"type": "message_stop"}),
    ];
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// The first answer for `mode` (`thinking` or `thinking-stream`). The
/// simulator sends a scripted body as it is, whatever the request; the
/// adapter reads an event stream whatever its content type.
fn first_answer(mode: &str) -> Reply {
    Reply::Garbage(if mode == "thinking-stream" {
        thinking_stream()
    } else {
        thinking_answer()
    })
}

/// The raw JSON text (quotes and escapes as written) of every string value
/// of a member named `key` in `body`; members whose value is not a string
/// are skipped.
fn raw_strings<'a>(body: &'a str, key: &str) -> Vec<&'a str> {
    let needle = format!("\"{key}\"");
    let mut out = Vec::new();
    for (at, _) in body.match_indices(&needle) {
        let rest = body[at + needle.len()..].trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            continue; // a value, not a member name
        };
        let rest = rest.trim_start();
        if !rest.starts_with('"') {
            continue;
        }
        let start = body.len() - rest.len();
        let mut escaped = false;
        for (i, c) in rest.char_indices().skip(1) {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    out.push(&body[start..=start + i]);
                    break;
                }
                _ => {}
            }
        }
    }
    out
}

/// The SDK saw the first answer's thinking block, and (streamed) its
/// thinking and signature events.
fn saw_the_thinking(mode: &str, first: &Value) {
    assert_eq!(first["provider"], "claude", "{mode}: {first}");
    assert_eq!(
        first["content"][0],
        json!({"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE}),
        "{mode}: {first}"
    );
    assert_eq!(text_of(first), "12231.");
    if mode == "thinking-stream" {
        let events: Vec<&str> = first["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(events, ["thinking", "thinking", "signature", "text"]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_thinking_block_comes_back_to_anthropic_byte_identical() {
    let t = two().await;
    // The scripted answers carry this signature: the simulator made it.
    t.claude.accept_signature(SIGNATURE);
    let modes = ["thinking", "thinking-stream"];
    let mut version = Value::Null;
    for mode in modes {
        t.claude
            .push(first_answer(mode))
            .push(Reply::text("It is 4077."));
        let v = sdk(&t.server.url, mode).await;
        version = v["anthropic_version"].clone();
        let [first, second] = [&v["turns"][0], &v["turns"][1]];
        saw_the_thinking(mode, first);
        assert_eq!(second["provider"], "claude", "{mode}: {v}");
        assert_eq!(text_of(second), "It is 4077.");
    }
    assert_eq!(t.openai.request_count(), 0);
    let received = t.claude.received();
    assert_eq!(received.len(), 4);
    for (i, mode) in modes.iter().enumerate() {
        let [asked, replayed] = [&received[2 * i], &received[2 * i + 1]];
        for r in [asked, replayed] {
            assert_eq!(
                r.json()["thinking"],
                json!({"type": "enabled", "budget_tokens": 1024}),
                "{mode}"
            );
        }
        // The signed block arrives as the simulator wrote it: the raw bytes
        // of its signature and of its thinking, escapes included.
        let sent = thinking_answer();
        let body = std::str::from_utf8(&replayed.body).unwrap();
        assert_eq!(
            raw_strings(body, "signature"),
            raw_strings(&sent, "signature"),
            "{mode}: {body}"
        );
        assert_eq!(
            raw_strings(body, "signature"),
            [format!("\"{SIGNATURE}\"")],
            "{mode}"
        );
        assert_eq!(
            raw_strings(body, "thinking"),
            raw_strings(&sent, "thinking"),
            "{mode}: {body}"
        );
        assert_eq!(
            raw_strings(body, "thinking"),
            [Value::from(THOUGHT).to_string()],
            "{mode}"
        );
        let v = replayed.json();
        assert_eq!(
            v["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
                {"type": "text", "text": "12231."}
            ]}),
            "{mode}: {v}"
        );
        assert_eq!(v["messages"][2]["content"], "And divided by 3?");
        // The SDK's own API version, forwarded as it sent it.
        assert_eq!(
            replayed.header("anthropic-version"),
            Some(version.as_str().unwrap())
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thinking_turn_falls_back_without_its_thinking() {
    let t = two().await;
    // The scripted answers carry this signature: the simulator made it.
    t.claude.accept_signature(SIGNATURE);
    let modes = ["thinking", "thinking-stream"];
    for mode in modes {
        t.claude.push(first_answer(mode)).push(Reply::status(529));
        t.openai.push(Reply::text("It is 4077."));
        let v = sdk(&t.server.url, mode).await;
        let [first, second] = [&v["turns"][0], &v["turns"][1]];
        saw_the_thinking(mode, first);
        assert_eq!(second["provider"], "openai", "{mode}: {v}");
        assert_eq!(second["stop_reason"], "end_turn");
        assert_eq!(text_of(second), "It is 4077.");
        if mode == "thinking-stream" {
            assert_eq!(second["events"], json!(["text", "text", "text"]), "{v}");
        }
    }
    // The OpenAI-compatible simulator got the conversation without the
    // thinking: no thinking text, no signature, no thinking settings.
    let received = t.openai.received();
    assert_eq!(received.len(), 2);
    for (r, mode) in received.iter().zip(modes) {
        let body = std::str::from_utf8(&r.body).unwrap();
        for secret in [
            "Split it",
            "no carry",
            &SIGNATURE[..12],
            "signature",
            "thinking",
            "budget_tokens",
        ] {
            assert!(!body.contains(secret), "{mode}: {secret} leaked: {body}");
        }
        assert_eq!(
            r.json()["messages"],
            json!([
                {"role": "user", "content": "What is 27 * 453?"},
                {"role": "assistant", "content": "12231."},
                {"role": "user", "content": "And divided by 3?"}
            ]),
            "{mode}: {body}"
        );
    }
}

/// The providers that served each turn of a `thinking-tools` run, and
/// whether each turn's content started with a thinking block.
fn served(v: &Value) -> Vec<(String, bool)> {
    v["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["provider"].as_str().unwrap().to_owned(),
                t["content"][0]["type"] == "thinking",
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thinking_tool_loop_crosses_protocols_both_ways_without_an_upstream_400() {
    let call = || {
        Reply::ToolCalls(vec![SimToolCall::new(
            "get_weather",
            json!({"city": "Oslo"}),
        )])
    };
    for mode in ["thinking-tools", "thinking-tools-stream"] {
        // Another protocol serves the first tool turn, then Anthropic: the
        // history's final tool turn has no thinking block, so Anthropic
        // gets that request with thinking off; its own tool turn then
        // carries signed thinking, and the OpenAI-compatible target serves
        // the last turn without it.
        let t = two().await;
        t.claude
            .push(Reply::status(529))
            .push(call().thinking_first("Oslo, so a weather call."))
            .push(Reply::status(529));
        t.openai
            .push(call())
            .push(Reply::text("-3 degrees in Oslo."));
        let v = sdk(&t.server.url, mode).await;
        assert_eq!(
            served(&v),
            [
                ("openai".to_owned(), false),
                ("claude".to_owned(), true),
                ("openai".to_owned(), false)
            ],
            "{mode}: {v}"
        );
        let to_claude = t.claude.received();
        assert_eq!(to_claude[1].json()["thinking"], json!({"type": "disabled"}));
        for sim in [&t.claude, &t.openai] {
            assert!(
                sim.violations().is_empty(),
                "{mode}: {:?}",
                sim.violations()
            );
        }

        // The reverse: Anthropic thinks and calls, the fallback serves the
        // next step of the same tool loop, and Anthropic, recovered, answers
        // the last: the loop is one assistant turn, and it started with
        // Anthropic's signed thinking, so thinking stays on.
        let t = two().await;
        t.claude
            .push(call().thinking_first("Oslo, so a weather call."))
            .push(Reply::status(529))
            .push(Reply::text("-3 degrees in Oslo."));
        t.openai.push(call());
        let v = sdk(&t.server.url, mode).await;
        assert_eq!(
            served(&v),
            [
                ("claude".to_owned(), true),
                ("openai".to_owned(), false),
                ("claude".to_owned(), false)
            ],
            "{mode}: {v}"
        );
        let to_claude = t.claude.received();
        // The first turn's thinking went to Anthropic's later requests as
        // the SDK returned it, thinking on.
        assert_eq!(to_claude[1].json()["thinking"]["type"], "enabled");
        assert_eq!(to_claude[2].json()["thinking"]["type"], "enabled");
        assert_eq!(
            to_claude[2].json()["messages"][1]["content"][0]["type"],
            "thinking"
        );
        // The OpenAI-compatible target never saw thinking.
        let to_openai = t.openai.received()[0].body.clone();
        assert!(
            !String::from_utf8_lossy(&to_openai).contains("Oslo, so a weather call."),
            "{mode}"
        );
        for sim in [&t.claude, &t.openai] {
            assert!(
                sim.violations().is_empty(),
                "{mode}: {:?}",
                sim.violations()
            );
        }
    }
}
