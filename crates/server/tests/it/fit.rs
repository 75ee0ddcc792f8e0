//! Prompts only where they fit, through the real server to simulators
//! that enforce a context window with their API's own "too long" error:
//! a prompt too long for the first target's window goes to the larger one
//! with no call to the first (the event and the span say
//! `context_window`); a target whose window the gateway does not know
//! answers "too long" and the walk moves on, past a target no larger; a
//! prompt no target holds is refused at once, in each front end's shape,
//! with no call; a Responses stream that says "too long" after its 200
//! moves on too; and every simulator's "too long" (OpenAI's Chat and
//! Responses, Azure's, Anthropic's, Gemini's, Vertex's two, Bedrock's
//! InvokeModel and Converse) moves the walk on.

use serde_json::{Value, json};
use understudy_core::GenerateRequest;
use understudy_testkit::collector::Receiver;
use understudy_testkit::{
    AzureSim, BedrockSim, Protocol, Reply, SimProvider, TestGateway, TestGatewayBuilder, VertexSim,
    eventually,
};
use understudy_types::{ChatRequest, RouteSelector};

use crate::common::TestServer;

const KEY: &str = "sk-understudy-fit-test";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-fit-test");

/// About `tokens` tokens of text as the gateway and the simulators count
/// them (four characters a token).
fn prompt(tokens: usize) -> String {
    "tok ".repeat(tokens)
}

/// A Chat Completions body for the route `long`.
fn chat(tokens: usize, stream: bool) -> String {
    json!({
        "model": "long",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": prompt(tokens)}],
    })
    .to_string()
}

/// A 128 000-token GPT-4o (`small`, OpenAI's API) then a 200 000-token
/// Claude Sonnet 4.5 (`big`, Anthropic's), the windows the gateway knows
/// from its table and the simulators enforce, on the route `long`.
async fn small_then_big(extra: &str) -> (SimProvider, SimProvider, TestGatewayBuilder) {
    let small = SimProvider::openai().await.unwrap();
    small.with_context_window(128_000);
    let big = SimProvider::anthropic().await.unwrap();
    big.with_context_window(200_000);
    let builder = TestGateway::builder()
        .provider("small", &small)
        .provider("big", &big)
        .toml(&format!(
            "[routes]\nlong = [\"small:gpt-4o\", \"big:claude-sonnet-4-5\"]\n{extra}"
        ))
        .env("UNDERSTUDY_API_KEYS", KEY);
    (small, big, builder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_too_long_for_the_first_window_is_served_by_the_larger_with_no_call() {
    let receiver = Receiver::start();
    let (small, big, builder) = small_then_big("[telemetry]\nexport_every = 0.1\n").await;
    let gw = builder
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4737";
    let a = server
        .post_with(
            "/v1/chat/completions",
            &[
                AUTH,
                ("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01")),
            ],
            chat(150_000, false),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "big");
    assert_eq!(small.request_count(), 0, "the small window was called");
    assert_eq!(big.request_count(), 1);
    assert_eq!(big.violations(), Vec::<String>::new());
    // The same streamed.
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], chat(150_000, true))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "big");
    assert_eq!(small.request_count(), 0);
    // The span event and the event say why the first was passed over.
    let spans = receiver.trace(trace, 2).await;
    let skips: Vec<&Value> = spans
        .iter()
        .flat_map(|s| s["events"].as_array().into_iter().flatten())
        .filter(|e| e["name"] == "understudy.target.skipped")
        .collect();
    assert_eq!(skips.len(), 1, "{spans:#?}");
    assert_eq!(skips[0]["attributes"]["understudy.provider"], "small");
    assert_eq!(
        skips[0]["attributes"]["understudy.skip.reason"],
        "context_window"
    );
    eventually("an event naming the window", async || {
        let status = server.get_with("/v1/status", &[AUTH]).await;
        status.json()["events"].as_array().is_some_and(|events| {
            events.iter().any(|e| {
                e["provider"] == "big"
                    && e["skipped"]
                        == json!([{"provider": "small", "model": "gpt-4o", "reason": "context_window"}])
            })
        })
    })
    .await;
}

#[tokio::test]
async fn a_too_long_answer_moves_on_past_windows_no_larger() {
    // `first`'s window is unknown to the gateway (its simulator's is 1000
    // tokens); `second`'s and `third`'s are configured at 4000, and
    // `last`'s is unknown.
    let first = SimProvider::openai().await.unwrap();
    first.with_context_window(1_000);
    let second = SimProvider::openai().await.unwrap();
    second.with_context_window(1_000);
    let third = SimProvider::anthropic().await.unwrap();
    third.with_context_window(1_000);
    let last = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("first", &first)
        .provider("second", &second)
        .provider("third", &third)
        .provider("last", &last)
        .provider_option("second", "capabilities = { context_window = 4000 }")
        .provider_option("third", "capabilities = { context_window = 4000 }")
        .toml("[routes]\nlong = [\"first\", \"last\"]\nknown = [\"second\", \"third\", \"last\"]\n")
        .env("UNDERSTUDY_API_KEYS", KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    // An unknown window that says "too long": the next target.
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], chat(2_500, false))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "last");
    assert_eq!((first.request_count(), last.request_count()), (1, 1));
    // A known window that says "too long": past those no larger.
    let body = chat(2_500, false).replace("\"long\"", "\"known\"");
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], body)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "last");
    assert_eq!(
        (second.request_count(), third.request_count()),
        (1, 0),
        "a window no larger than the one that refused was called"
    );
    for sim in [&first, &second, &third, &last] {
        assert_eq!(sim.violations(), Vec::<String>::new());
    }
    eventually("an event naming the window passed over", async || {
        let status = server.get_with("/v1/status", &[AUTH]).await;
        status.json()["events"].as_array().is_some_and(|events| {
            events.iter().any(|e| {
                e["route"] == "known"
                    && e["skipped"][0]["provider"] == "third"
                    && e["skipped"][0]["reason"] == "context_window"
            })
        })
    })
    .await;
}

#[tokio::test]
async fn a_prompt_no_target_holds_is_refused_at_once_in_each_apis_shape() {
    let (small, big, builder) = small_then_big("").await;
    let gw = builder.build().await.unwrap();
    let server = TestServer::start(gw.engine).await;
    let text = prompt(300_000);
    // Chat Completions and Responses: OpenAI's `context_length_exceeded`.
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], chat(300_000, false))
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let e = &a.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert_eq!(e["param"], "messages", "{e}");
    assert!(e["message"].as_str().unwrap().contains("200000"), "{e}");
    let a = server
        .post_with(
            "/v1/responses",
            &[AUTH],
            json!({"model": "long", "input": text}).to_string(),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.json()["error"]["code"], "context_length_exceeded");
    // Messages: Anthropic's "prompt is too long".
    let a = server
        .post_with(
            "/v1/messages",
            &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
            json!({
                "model": "long", "max_tokens": 1024,
                "messages": [{"role": "user", "content": text}],
            })
            .to_string(),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let v = a.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("prompt is too long: "), "{message}");
    assert!(message.contains("> 200000 maximum"), "{message}");
    // Gemini: INVALID_ARGUMENT.
    let a = server
        .post_with(
            "/v1beta/models/long:generateContent",
            &[("x-goog-api-key", KEY)],
            json!({"contents": [{"role": "user", "parts": [{"text": text}]}]}).to_string(),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.json()["error"]["status"], "INVALID_ARGUMENT");
    // Nothing was called.
    assert_eq!((small.request_count(), big.request_count()), (0, 0));
}

#[tokio::test]
async fn a_responses_stream_too_long_after_its_200_moves_on() {
    let responses = SimProvider::openai_responses().await.unwrap();
    responses.with_context_window(1_000).too_long_in_stream();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("responses", &responses)
        .provider("claude", &claude)
        .toml("[routes]\nlong = [\"responses\", \"claude\"]\n")
        .env("UNDERSTUDY_API_KEYS", KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], chat(2_500, true))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert!(a.body.contains("\"content\":\"Hello\""), "{}", a.body);
    assert!(a.body.contains("[DONE]"), "{}", a.body);
    assert_eq!((responses.request_count(), claude.request_count()), (1, 1));
    // The Responses API was asked for a stream: its "too long" came after
    // the 200.
    assert_eq!(responses.received()[0].json()["stream"], true);
    assert_eq!(responses.violations(), Vec::<String>::new());
}

const KEY_ID: &str = "AKIDSIMULATEDFIT";
const SECRET: &str = "simulated/Secret+Key/for-the-fit";
const PROJECT: &str = "understudy-fit";
const REGION: &str = "us-east5";

/// One simulator of each API, behind its cloud where it has one, with a
/// window of 1000 tokens, and the table that configures it as `primary`.
async fn each_api() -> Vec<(&'static str, SimProvider, String)> {
    let mut all = Vec::new();
    for (name, protocol) in [
        ("openai", Protocol::ChatCompletions),
        ("responses", Protocol::Responses),
        ("anthropic", Protocol::Messages),
        ("gemini", Protocol::GenerateContent),
    ] {
        let sim = SimProvider::start(protocol).await.unwrap();
        let kind = protocol.as_str();
        let table = format!(
            "[providers.primary]\nkind = {kind:?}\nbase_url = {:?}\nmodel = \"sim-model\"\napi_key = \"sk-primary-0123456789\"\n",
            sim.base_url()
        );
        all.push((name, sim, table));
    }
    let azure_resource = AzureSim::new("azure-key-0123456789", &["fit-deployment"]);
    let azure = SimProvider::azure(&azure_resource, Protocol::ChatCompletions)
        .await
        .unwrap();
    let table = format!(
        "[providers.primary]\nkind = \"azure\"\nbase_url = {:?}\nmodel = \"fit-deployment\"\napi_key = \"azure-key-0123456789\"\n",
        azure.base_url()
    );
    all.push(("azure", azure, table));
    for (name, model) in [
        (
            "bedrock invoke",
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        ),
        ("bedrock converse", "meta.llama3-1-70b-instruct-v1:0"),
    ] {
        let account = BedrockSim::new("us-east-1", KEY_ID, SECRET, None);
        let sim = SimProvider::bedrock(&account).await.unwrap();
        let table = format!(
            "[providers.primary]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {model:?}\naws_access_key_id = {KEY_ID:?}\naws_secret_access_key = {SECRET:?}\n",
            sim.base_url()
        );
        all.push((name, sim, table));
    }
    for (name, protocol, model) in [
        (
            "vertex claude",
            Protocol::Messages,
            "claude-sonnet-4-5@20250929",
        ),
        (
            "vertex gemini",
            Protocol::GenerateContent,
            "gemini-2.5-flash",
        ),
    ] {
        let account = VertexSim::new(PROJECT, REGION);
        let sim = SimProvider::vertex(protocol, &account).await.unwrap();
        let key_file = account.key_file(&format!("{}/token", sim.base_url()));
        let table = format!(
            "[providers.primary]\nkind = \"vertex\"\nproject = {PROJECT:?}\nregion = {REGION:?}\nbase_url = {:?}\ncredentials_file = {:?}\nmodel = {model:?}\n",
            sim.base_url(),
            key_file.display().to_string(),
        );
        all.push((name, sim, table));
    }
    for (_, sim, _) in &all {
        sim.with_context_window(1_000);
    }
    all
}

#[tokio::test]
async fn every_simulators_too_long_moves_the_walk_on() {
    for (name, sim, table) in each_api().await {
        let fallback = SimProvider::openai().await.unwrap();
        fallback.push(Reply::text("from the fallback"));
        let gw = TestGateway::builder()
            .provider("fallback", &fallback)
            .toml(&table)
            .order(&["primary", "fallback"])
            .build()
            .await
            .unwrap();
        let g = gw
            .engine
            .generate(GenerateRequest {
                route: RouteSelector::Default,
                ..GenerateRequest::new(ChatRequest::user(prompt(2_500)))
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<String> = g
            .attempts
            .iter()
            .map(|a| format!("{}/{}", a.provider, a.outcome))
            .collect();
        assert_eq!(
            got,
            ["primary/context_length", "fallback/ok"],
            "{name}: {:?}",
            g.attempts
        );
        assert_eq!(sim.request_count(), 1, "{name}");
        assert_eq!(sim.violations(), Vec::<String>::new(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_in_a_short_body_are_counted_for_the_fit() {
    // 150 images at about a thousand tokens each, in a body of a few
    // kilobytes: its length does not bound them, the estimate does.
    let (small, big, builder) = small_then_big("").await;
    let gw = builder.build().await.unwrap();
    let server = TestServer::start(gw.engine).await;
    let image = json!({"type": "image_url",
                       "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    let mut content = vec![json!({"type": "text", "text": "what are these?"})];
    content.extend(std::iter::repeat_n(image, 150));
    let body = json!({"model": "long", "max_tokens": 1024,
                      "messages": [{"role": "user", "content": content}]})
    .to_string();
    assert!(body.len() < 20_000, "{}", body.len());
    let a = server
        .post_with("/v1/chat/completions", &[AUTH], body)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "big", "{}", a.body);
    assert_eq!(small.request_count(), 0, "the small window was called");
    assert_eq!(big.violations(), Vec::<String>::new());
}
