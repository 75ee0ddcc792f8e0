//! A whole Claude Code session through the gateway, from requests Claude
//! Code 2.1.328 really sent (recorded through a logging upstream:
//! `tests/data/claude_code/turn1.json`, its headers in
//! `turn1.headers.txt`, and `turn2.json`, the next turn after a `Write`
//! tool call with a signed thinking block): a `system` message inside
//! `messages`, `thinking: {"type": "adaptive"}`, `context_management`,
//! `output_config.effort`, tools without `type`, `cache_control`,
//! `metadata.user_id` of ~150 characters, `max_tokens: 128000`, streamed to
//! `/v1/messages?beta=true`. Also the output limits each target gets,
//! Anthropic-native structured output on a fallback, what only Anthropic
//! can take, the body limit, and Claude model names served without a route
//! per name.

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, SimToolCall, TestGateway};

use crate::common::{self, Answer, TestServer};

/// Turn one as Claude Code sent it: the user's task, then a `system`
/// message (the environment, the agent list).
const TURN1: &str = include_str!("../data/claude_code/turn1.json");
/// Turn two: the assistant's signed thinking and `Write` call, the result.
const TURN2: &str = include_str!("../data/claude_code/turn2.json");
/// The request line and headers of turn one.
const TURN1_HEADERS: &str = include_str!("../data/claude_code/turn1.headers.txt");

const CLIENT_KEY: &str = "sk-understudy-claude-code";

/// The `anthropic-*` headers Claude Code sent, and its other headers that
/// the gateway must not forward.
fn recorded_headers() -> Vec<(String, String)> {
    TURN1_HEADERS
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !matches!(
                k.as_str(),
                "host" | "content-length" | "connection" | "accept-encoding" | "x-api-key"
            )
        })
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Posts `body` as Claude Code does (`?beta=true`, its headers, the client
/// key as `x-api-key`), or with `extra` headers.
async fn post(s: &TestServer, body: String, extra: &[(&str, &str)]) -> Answer {
    // Its own request: the recorded headers carry the content type, so
    // `TestServer::post_with` (which adds one) would send it twice.
    let mut req = s
        .client()
        .post(s.at("/v1/messages?beta=true"))
        .header("x-api-key", CLIENT_KEY);
    for (k, v) in recorded_headers() {
        req = req.header(k, v);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    Answer::read(req.body(body).send().await.unwrap()).await
}

struct Setup {
    claude: SimProvider,
    openai: SimProvider,
    gemini: SimProvider,
    server: TestServer,
}

/// Anthropic, OpenAI-compatible and Gemini simulators; every Claude model
/// name Claude Code asks for is served by the Anthropic target with that
/// model (`claude:*`), then `gpt-4o-mini` (16 384 output tokens), then
/// Gemini. `extra` is more TOML.
async fn setup(extra: &str) -> Setup {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gemini = SimProvider::gemini().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        .provider("gemini", &gemini)
        .provider_option("claude", "capabilities = { max_output_tokens = 128000 }")
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .toml(&format!(
            "[routes]\n\"claude-*\" = [\"claude:*\", \"openai:gpt-4o-mini\", \"gemini:gemini-2.5-flash\"]\n{extra}"
        ))
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    // Claude Code's model takes 128 000 output tokens, and its recorded
    // turn two replays a signature Anthropic made.
    claude
        .with_max_output_tokens(128_000)
        .accept_signature("c2lnbmVkLWJ5LWFudGhyb3BpYw==");
    Setup {
        claude,
        openai,
        gemini,
        server,
    }
}

/// Text from whichever target serves.
fn answer_everywhere(s: &Setup, text: &str) {
    for sim in [&s.claude, &s.openai, &s.gemini] {
        sim.always(Reply::text(text));
    }
}

#[tokio::test]
async fn claude_code_s_first_request_reaches_anthropic_as_sent() {
    let s = setup("").await;
    answer_everywhere(&s, "Done.");
    let a = post(&s.server, TURN1.to_owned(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    let received = s.claude.received();
    let r = &received[0];
    // The body byte for byte: `claude:*` serves the model Claude Code
    // asked for, and 128 000 is within the target's limit.
    assert_eq!(std::str::from_utf8(&r.body).unwrap(), TURN1);
    assert_eq!(r.path, "/v1/messages?beta=true");
    let betas = recorded_headers()
        .into_iter()
        .find(|(k, _)| k == "anthropic-beta")
        .unwrap()
        .1;
    assert_eq!(r.header("anthropic-beta"), Some(betas.as_str()));
    assert_eq!(s.openai.request_count(), 0);
    assert!(
        s.claude.violations().is_empty(),
        "{:?}",
        s.claude.violations()
    );
}

#[tokio::test]
async fn an_openai_compatible_fallback_gets_a_request_it_accepts() {
    let s = setup("").await;
    s.claude.always(Reply::status(529));
    s.openai.always(Reply::text("Done."));
    let a = post(&s.server, TURN1.to_owned(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    let sent = s.openai.received()[0].json();
    let messages = sent["messages"].as_array().unwrap();
    // The system blocks first, then the user's turn, then the `system`
    // message where Claude Code put it.
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "system"], "{sent}");
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("# Environment"),
        "{sent}"
    );
    // 128 000 clamped to gpt-4o-mini's 16 384; the ~150-character user id
    // as a stable hash OpenAI accepts.
    // (OpenAI itself takes `max_completion_tokens`.)
    assert_eq!(sent["max_completion_tokens"], 16_384);
    let user = sent["user"].as_str().unwrap();
    assert!(user.len() <= 64 && user.starts_with("u-"), "{user}");
    // Claude Code's 12 tools, without `defer_loading` or other Anthropic
    // fields.
    assert_eq!(sent["tools"].as_array().unwrap().len(), 12, "{sent}");
    assert!(
        s.openai.violations().is_empty(),
        "{:?}",
        s.openai.violations()
    );
    // The same user id the next time.
    let again = post(&s.server, TURN1.to_owned(), &[]).await;
    assert_eq!(again.status, 200);
    assert_eq!(s.openai.received()[1].json()["user"], sent["user"]);
}

#[tokio::test]
async fn gemini_gets_the_system_message_as_marked_user_text() {
    let s = setup("").await;
    s.claude.always(Reply::status(529));
    s.openai.always(Reply::status(503));
    s.gemini.always(Reply::text("Done."));
    let a = post(&s.server, TURN1.to_owned(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "gemini");
    let sent = s.gemini.received()[0].json();
    let contents = sent["contents"].as_array().unwrap();
    // One user turn: the task, then the system message marked as such.
    assert_eq!(contents.len(), 1, "{sent}");
    let parts = contents[0]["parts"].as_array().unwrap();
    let last = parts.last().unwrap()["text"].as_str().unwrap();
    assert!(last.starts_with("<system>\n# Environment"), "{last}");
    assert!(last.ends_with("</system>"), "{last}");
    assert_eq!(
        sent["generationConfig"]["maxOutputTokens"], 65_536,
        "{sent}"
    );
    assert!(
        s.gemini.violations().is_empty(),
        "{:?}",
        s.gemini.violations()
    );
}

#[tokio::test]
async fn thinking_is_turned_off_only_for_a_turn_another_provider_served() {
    let s = setup("").await;
    answer_everywhere(&s, "Done.");
    // Turn two as recorded: the final assistant turn holds Anthropic's
    // signed thinking, so it goes as sent.
    let a = post(&s.server, TURN2.to_owned(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        std::str::from_utf8(&s.claude.received()[0].body).unwrap(),
        TURN2
    );

    // The same turn as if an OpenAI-compatible target had served turn one:
    // no thinking block before its tool call.
    let mut v: Value = serde_json::from_str(TURN2).unwrap();
    let messages = v["messages"].as_array_mut().unwrap();
    let assistant = messages
        .iter_mut()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assistant["content"]
        .as_array_mut()
        .unwrap()
        .retain(|b| b["type"] != "thinking");
    let foreign = v.to_string();
    let a = post(&s.server, foreign.clone(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let sent = s.claude.received()[1].json();
    assert_eq!(sent["thinking"], json!({"type": "disabled"}));
    // Its only context edit needs thinking on, so it goes too.
    assert!(sent.get("context_management").is_none(), "{sent}");
    // Everything else as the client sent it.
    let mut want = v.clone();
    want["thinking"] = json!({"type": "disabled"});
    want.as_object_mut().unwrap().remove("context_management");
    assert_eq!(sent, want);
    assert!(
        s.claude.violations().is_empty(),
        "{:?}",
        s.claude.violations()
    );
}

#[tokio::test]
async fn anthropic_structured_output_carries_over_and_prose_is_invalid_output() {
    let s = setup("").await;
    s.claude.always(Reply::status(529));
    s.openai
        .always(Reply::text("Sure! Here is the weather: sunny."));
    s.gemini
        .always(Reply::text(r#"{"city": "Oslo", "celsius": -3}"#));
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
        "additionalProperties": false
    });
    for field in ["output_config", "output_format"] {
        let format = json!({"type": "json_schema", "schema": schema});
        let body = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1000,
            "messages": [{"role": "user", "content": "Weather in Oslo as JSON"}],
            field: if field == "output_config" { json!({"format": format}) } else { format },
        });
        let a = post(&s.server, body.to_string(), &[]).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "gemini");
        let to_openai = s.openai.received().last().unwrap().json();
        assert_eq!(
            to_openai["response_format"]["json_schema"]["schema"], schema,
            "{to_openai}"
        );
        let to_gemini = s.gemini.received().last().unwrap().json();
        assert_eq!(
            to_gemini["generationConfig"]["responseMimeType"],
            "application/json"
        );
        let text = a.json()["content"][0]["text"].as_str().unwrap().to_owned();
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["city"],
            "Oslo"
        );
    }
    // The prose answer was `invalid_output`, not a 200 the client cannot
    // parse.
    let metrics = s.server.get("/metrics").await.body;
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("outcome=\"invalid_output\"") && l.contains("provider=\"openai\"")),
        "{metrics}"
    );
}

#[tokio::test]
async fn output_limits_are_clamped_and_a_request_without_one_gets_the_target_s() {
    let s = setup("").await;
    answer_everywhere(&s, "Done.");
    s.claude.push(Reply::status(529));
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 32000,
        "messages": [{"role": "user", "content": "hi"}],
    });
    let a = post(&s.server, body.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    // 32 000 for claude-sonnet-4-5 (64 000 allowed) goes as sent; the
    // fallback gets 16 384.
    assert_eq!(s.claude.received()[0].json()["max_tokens"], 32000);
    assert_eq!(
        s.openai.received()[0].json()["max_completion_tokens"],
        16_384
    );

    // Through the OpenAI API without a limit: the Anthropic target gets its
    // own (128 000 as configured), not 1 024.
    let resp = understudy_testkit::http_client()
        .post(s.server.at("/v1/chat/completions"))
        .bearer_auth(CLIENT_KEY)
        .header("content-type", "application/json")
        .body(
            json!({
                "model": "claude-opus-4-1",
                "messages": [{"role": "user", "content": "Write a long story."}]
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent = s.claude.received().last().unwrap().json();
    assert_eq!(sent["model"], "claude-opus-4-1");
    assert_eq!(sent["max_tokens"], 128_000, "{sent}");
}

#[tokio::test]
async fn what_only_anthropic_can_take_goes_to_anthropic_and_is_unsupported_elsewhere() {
    let s = setup("").await;
    s.claude.push(Reply::text("A document about gateways."));
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 500,
        "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Gateways."}},
            {"type": "text", "text": "Summarise."}
        ]}],
    });
    let a = post(&s.server, body.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    // With Anthropic down, the others cannot carry a document: one 529
    // then two `unsupported` attempts, never called.
    s.claude.push(Reply::status(529));
    let a = post(&s.server, body.to_string(), &[]).await;
    assert_eq!(s.openai.request_count() + s.gemini.request_count(), 0);
    assert!(a.status >= 500, "{}: {}", a.status, a.body);
    assert!(a.body.contains("unsupported"), "{}", a.body);
}

#[tokio::test]
async fn claude_model_names_need_no_route_each() {
    // No pattern route: an unknown `claude-…` name goes to the Anthropic
    // provider with that model, the default order behind it.
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    claude.push(Reply::text("Opus here."));
    claude.push(Reply::status(529));
    openai.push(Reply::text("Fallback here."));
    for (model, served) in [
        ("claude-opus-5-5", "claude"),
        ("claude-haiku-4-5-20251001", "openai"),
    ] {
        let body = json!({"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
        let a = post(&server, body.to_string(), &[]).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], served);
    }
    let models: Vec<Value> = claude
        .received()
        .iter()
        .map(|r| r.json()["model"].clone())
        .collect();
    assert_eq!(
        models,
        [json!("claude-opus-5-5"), json!("claude-haiku-4-5-20251001")]
    );
    // Any other unknown name is still a 404.
    let body = json!({"model": "gpt-99", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&server, body.to_string(), &[]).await.status, 404);
}

#[tokio::test]
async fn long_sessions_fit_and_a_body_over_the_limit_is_a_413_in_anthropic_s_shape() {
    // 5 MB of text is some 1.3 M tokens, more than any built-in window
    // holds (such a prompt is refused at once): this model's is larger.
    let s = setup(
        "[providers.claude.model_capabilities.\"claude-sonnet-4-5\"]\ncontext_window = 2000000",
    )
    .await;
    answer_everywhere(&s, "Done.");
    // 5 MB of history, as a long session with screenshots reaches.
    let big = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "messages": [{"role": "user", "content": "a ".repeat(5 << 19)}],
    })
    .to_string();
    assert!(big.len() > 5_000_000);
    let a = post(&s.server, big.clone(), &[]).await;
    assert_eq!(a.status, 200, "{}", &a.body[..a.body.len().min(300)]);

    // Over a configured limit: Anthropic's error shape.
    let small = setup("[server]\nmax_body_bytes = 1000000").await;
    let a = post(&small.server, big, &[]).await;
    assert_eq!(a.status, 413);
    let v = a.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "request_too_large", "{v}");
    assert_eq!(small.claude.request_count(), 0);
}

#[tokio::test]
async fn a_turn_served_elsewhere_then_by_anthropic_keeps_the_tool_loop_valid() {
    // Anthropic serves a tool call; the next turn is served by the
    // OpenAI-compatible fallback; Anthropic, recovered, serves the third.
    let s = setup("").await;
    s.claude.push(Reply::ToolCalls(vec![SimToolCall::new(
        "Read",
        json!({"file_path": "/tmp/a.txt"}),
    )]));
    let mut conv: Value = serde_json::from_str(TURN1).unwrap();
    conv["stream"] = json!(false);
    let a = post(&s.server, conv.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let turn = a.json();
    let call = turn["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap()
        .clone();
    let push = |conv: &mut Value, assistant: Value, id: &str| {
        let m = conv["messages"].as_array_mut().unwrap();
        m.push(json!({"role": "assistant", "content": assistant}));
        m.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "hello"}
        ]}));
    };
    push(
        &mut conv,
        turn["content"].clone(),
        call["id"].as_str().unwrap(),
    );

    s.claude.push(Reply::status(529));
    s.openai.push(Reply::ToolCalls(vec![SimToolCall::new(
        "Bash",
        json!({"command": "cat /tmp/a.txt"}),
    )]));
    let a = post(&s.server, conv.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    let turn = a.json();
    let call = turn["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap()
        .clone();
    push(
        &mut conv,
        turn["content"].clone(),
        call["id"].as_str().unwrap(),
    );

    s.claude.push(Reply::text("The file says hello."));
    let a = post(&s.server, conv.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    let last = s.claude.received().last().unwrap().json();
    assert_eq!(last["thinking"], json!({"type": "disabled"}), "{last}");
    for sim in [&s.claude, &s.openai] {
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    }
}

#[tokio::test]
async fn what_fetches_urls_or_runs_code_on_the_operator_s_key_needs_the_operator_s_word() {
    let s = setup("").await;
    answer_everywhere(&s, "Done.");
    let ask = |extra: Value| {
        let mut v = json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100,
            "messages": [{"role": "user", "content": "What is new today?"}],
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let cases = [
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}),
            &[][..],
            "web_search",
        ),
        (
            json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
            &[][..],
            "web_fetch",
        ),
        (
            json!({"mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "x"}]}),
            &[("anthropic-beta", "mcp-client-2025-04-04")][..],
            "mcp",
        ),
        (
            json!({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
            &[("anthropic-beta", "code-execution-2025-08-25")][..],
            "code_execution",
        ),
    ];
    for (extra, headers, feature) in cases {
        let a = post(&s.server, ask(extra.clone()), headers).await;
        assert_eq!(a.status, 400, "{extra}: {}", a.body);
        let v = a.json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "add \"{feature}\" to the provider's `passthrough` setting"
            )),
            "{message}"
        );
    }
    // A gated beta alone on a route whose only target is Anthropic.
    let only = setup("[routes.anthropic-only]\ntargets = [\"claude:claude-sonnet-4-5\"]").await;
    let body = json!({
        "model": "anthropic-only", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    });
    let a = post(
        &only.server,
        body.to_string(),
        &[("anthropic-beta", "files-api-2025-04-14")],
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("\\\"files\\\""), "{}", a.body);
    assert_eq!(s.claude.request_count() + only.claude.request_count(), 0);

    // Allowed by the operator: forwarded as sent.
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider_option("claude", "passthrough = [\"web_search\"]")
        .env("UNDERSTUDY_API_KEYS", CLIENT_KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    claude.lenient().always(Reply::text("Searched."));
    let body = ask(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}));
    let a = post(&server, body.clone(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        std::str::from_utf8(&claude.received()[0].body).unwrap(),
        body
    );
}

#[tokio::test]
async fn ids_another_provider_minted_reach_anthropic_in_its_alphabet() {
    // A history whose tool calls another provider served with ids
    // Anthropic refuses (Kimi/Groq style `functions.get:0`), sent as
    // written by the client: the strict simulator sees valid, distinct,
    // paired ids.
    let s = setup("").await;
    answer_everywhere(&s, "Done.");
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Paris?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "functions.get:0", "name": "get", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "functions.get:1", "name": "get", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "functions.get:0", "content": "-3"},
                {"type": "tool_result", "tool_use_id": "functions.get:1", "content": "12"}
            ]}
        ],
        "tools": [{"name": "get", "input_schema": {"type": "object"}}]
    });
    let a = post(&s.server, body.to_string(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert!(
        s.claude.violations().is_empty(),
        "{:?}",
        s.claude.violations()
    );
    let sent = s.claude.received()[0].json();
    let ids: Vec<&str> = sent["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_thinking_session_is_not_cut_by_the_first_token_timer() {
    // First text only after the first-token timeout, but thinking flowing
    // before it: the target is working, not down, and serves the turn.
    let s = setup("[timeouts]\nfirst_token = 0.5\nstream_idle = 2").await;
    s.openai.always(Reply::text("The fallback."));
    s.claude.push(
        understudy_testkit::StreamSpec::new(&["Thought", " it", " through."])
            .every(std::time::Duration::from_millis(300))
            .reply()
            .thinking_first("Let me weigh every option before answering."),
    );
    let a = post(&s.server, TURN1.to_owned(), &[]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(s.openai.request_count(), 0);
    // The thinking reached Claude Code as Anthropic sent it.
    let thinking: String = common::anthropic_events(&a.body)
        .iter()
        .filter_map(|(_, d)| {
            let v: Value = serde_json::from_str(d).ok()?;
            v["delta"]["thinking"].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(thinking, "Let me weigh every option before answering.");
    assert!(a.body.contains("through."), "{}", a.body);
}
