//! Google Vertex AI as a fallback, through the real server: the official
//! anthropic SDK fails over from the Anthropic API (529) and from a
//! throttled Bedrock to Claude on Vertex; Gemini on Vertex serves Chat
//! Completions. Every request the Vertex simulator receives carries a
//! bearer token its own token endpoint issued for the test service
//! account's RS256-signed JWT, and a body in rawPredict's shape. A token
//! that expires early is renewed once; a token endpoint that refuses
//! makes the request fall back at once; and a 30 s token is refreshed
//! ahead of time by the provider's actor under load, with no request
//! refused. Neither the token nor the private key reaches a client.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use understudy_testkit::{
    BedrockSim, Protocol, Reply, SimProvider, SimToolCall, TestGateway, VertexSim, eventually,
};

use crate::common::{self, TestServer};

const CLAUDE: &str = "claude-haiku-4-5@20251001";
const GEMINI: &str = "gemini-2.5-flash";
const PROJECT: &str = "understudy-sim";
const REGION: &str = "us-east5";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-sdk-test");

struct Fixture {
    claude: SimProvider,
    vertex: SimProvider,
    account: VertexSim,
    server: TestServer,
}

/// The `[providers.vertex]` table for `sim`, its key file naming the
/// simulator's token endpoint.
fn vertex_table(sim: &SimProvider, account: &VertexSim, model: &str) -> String {
    let key = account.key_file(&format!("{}/token", sim.base_url()));
    format!(
        "[providers.vertex]\nkind = \"vertex\"\nproject = {PROJECT:?}\nregion = {REGION:?}\nbase_url = {:?}\ncredentials_file = {:?}\nmodel = {model:?}\n",
        sim.base_url(),
        key.display().to_string()
    )
}

/// The Anthropic API's simulator and Vertex's (serving `protocol`), in
/// `order`.
async fn fixture(protocol: Protocol, model: &str, order: &[&str], account: VertexSim) -> Fixture {
    let claude = SimProvider::anthropic().await.unwrap();
    let vertex = SimProvider::vertex(protocol, &account).await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&vertex_table(&vertex, &account, model))
        .order(order)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Fixture {
        claude,
        vertex,
        account,
        server,
    }
}

fn account() -> VertexSim {
    VertexSim::new(PROJECT, REGION)
}

fn no_violations(f: &Fixture) {
    assert_eq!(f.vertex.violations(), Vec::<String>::new());
    assert_eq!(f.claude.violations(), Vec::<String>::new());
}

/// Neither an access token nor the private key in `text`.
fn no_secrets(account: &VertexSim, text: &str) {
    for token in account.issued_tokens() {
        assert!(!text.contains(&token), "the access token leaked: {text}");
    }
    let pem = VertexSim::private_key_pem();
    let middle = pem.lines().nth(5).unwrap();
    assert!(!text.contains(middle), "the private key leaked");
}

async fn chat(server: &TestServer, body: Value) -> common::Answer {
    server
        .post_with("/v1/chat/completions", &[AUTH], body.to_string())
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_sdk_falls_over_from_a_529_to_vertex_text_and_tools() {
    let f = fixture(Protocol::Messages, CLAUDE, &["claude", "vertex"], account()).await;
    f.claude.always(Reply::status(529));
    f.vertex.always(Reply::text("Vertex answers the joke."));
    let v = common::run_sdk("anthropic", "anthropic_sdk.py", &f.server.url, "text").await;
    for mode in ["plain", "stream"] {
        for turn in v[mode].as_array().unwrap() {
            assert_eq!(turn["provider"], "vertex", "{mode}: {turn}");
            let text: String = turn["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            assert_eq!(text, "Vertex answers the joke.");
        }
    }
    no_violations(&f);
    let sent = f.vertex.received();
    assert_eq!(sent.len(), 4);
    for r in &sent {
        assert!(
            r.header("authorization")
                .unwrap()
                .starts_with("Bearer ya29.sim-")
        );
        let body = r.json();
        assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
        assert!(body.get("model").is_none(), "{body}");
    }
    let base =
        format!("/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}");
    assert_eq!(sent[0].path, format!("{base}:rawPredict"));
    assert_eq!(sent[2].path, format!("{base}:streamRawPredict"));
    assert_eq!(sent[2].json()["stream"], true);
    // One exchange served them all.
    assert_eq!(f.account.exchanges(), 1);

    let calls = Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo"})),
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
    ]);
    for _ in 0..2 {
        f.vertex
            .push(calls.clone())
            .push(Reply::text("Both are mild."));
    }
    let v = common::run_sdk("anthropic", "anthropic_sdk.py", &f.server.url, "tools").await;
    for mode in ["plain", "stream"] {
        let turns = &v[mode];
        assert_eq!(turns[0]["provider"], "vertex", "{mode}: {v}");
        assert_eq!(turns[0]["stop_reason"], "tool_use");
        assert_eq!(turns[1]["content"][0]["text"], "Both are mild.");
    }
    no_violations(&f);
    no_secrets(&f.account, &v.to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_bedrock_falls_over_to_vertex() {
    let bedrock_account = BedrockSim::new("us-east-1", "AKIDSIMULATEDBEDROCK", "sim/secret", None);
    let bedrock = SimProvider::bedrock(&bedrock_account).await.unwrap();
    let account = account();
    let vertex = SimProvider::vertex(Protocol::Messages, &account)
        .await
        .unwrap();
    let gw = TestGateway::builder()
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = \"us.anthropic.claude-haiku-4-5-20251001-v1:0\"\naws_access_key_id = \"AKIDSIMULATEDBEDROCK\"\naws_secret_access_key = \"sim/secret\"\n{}",
            bedrock.base_url(),
            vertex_table(&vertex, &account, CLAUDE)
        ))
        .order(&["bedrock", "vertex"])
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    bedrock.always(Reply::Status {
        status: 429,
        body: r#"{"message":"Too many tokens, please wait before trying again."}"#.into(),
        headers: vec![(
            "x-amzn-errortype".into(),
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/".into(),
        )],
    });
    vertex.always(Reply::text("Vertex after the throttle."));
    for stream in [false, true] {
        let a = chat(
            &server,
            json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "vertex");
        assert!(a.body.contains("throttle"), "{}", a.body);
        no_secrets(&account, &a.body);
    }
    assert_eq!(vertex.violations(), Vec::<String>::new());
    assert_eq!(bedrock.violations(), Vec::<String>::new());
    let sent = vertex.received();
    assert!(sent[0].path.ends_with(":rawPredict"), "{}", sent[0].path);
    assert!(
        sent[1].path.ends_with(":streamRawPredict"),
        "{}",
        sent[1].path
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_on_vertex_serves_chat_completions() {
    let f = fixture(
        Protocol::GenerateContent,
        GEMINI,
        &["vertex", "claude"],
        account(),
    )
    .await;
    f.vertex.always(Reply::text("Gemini on Vertex."));
    let a = chat(
        &f.server,
        json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "Gemini on Vertex."
    );
    assert_eq!(a.headers["x-understudy-provider"], "vertex");
    let a = chat(
        &f.server,
        json!({"model": "default", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.body.contains("Vertex") && a.body.contains("[DONE]"),
        "{}",
        a.body
    );
    no_violations(&f);
    let sent = f.vertex.received();
    let base =
        format!("/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/{GEMINI}");
    assert_eq!(sent[0].path, format!("{base}:generateContent"));
    assert_eq!(
        sent[1].path,
        format!("{base}:streamGenerateContent?alt=sse")
    );
    assert!(sent.iter().all(|r| r.header("x-goog-api-key").is_none()));
    assert!(
        sent[0]
            .header("authorization")
            .unwrap()
            .starts_with("Bearer ya29.sim-")
    );
    assert_eq!(f.claude.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_expired_early_is_renewed_once_and_the_same_request_succeeds() {
    let f = fixture(Protocol::Messages, CLAUDE, &["vertex", "claude"], account()).await;
    f.vertex.always(Reply::text("From Vertex."));
    f.claude.always(Reply::text("From the fallback."));
    let hi = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
    let a = chat(&f.server, hi.clone()).await;
    assert_eq!(a.headers["x-understudy-provider"], "vertex", "{}", a.body);
    let before = f.account.exchanges();
    assert_eq!(before, 1);
    // Google revokes the token early (or the clock lied).
    f.account.expire_tokens();
    for stream in [false, true] {
        let mut body = hi.clone();
        body["stream"] = stream.into();
        let a = chat(&f.server, body).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "vertex", "{}", a.body);
        assert!(
            a.headers
                .get("x-understudy-fell-back")
                .is_none_or(|v| v == "false")
        );
        no_secrets(&f.account, &a.body);
        f.account.expire_tokens();
    }
    // Each expiry: one 401, one re-exchange, the same request again.
    assert_eq!(f.account.exchanges(), before + 2);
    let violations = f.vertex.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(
        violations.iter().all(|v| v.contains("UNAUTHENTICATED")),
        "{violations:?}"
    );
    assert_eq!(f.claude.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_token_endpoint_falls_back() {
    let account = account();
    account.refuse_exchanges(true);
    let f = fixture(Protocol::Messages, CLAUDE, &["vertex", "claude"], account).await;
    f.claude.always(Reply::text("The fallback needs no token."));
    for stream in [false, true, false, true] {
        let a = chat(
            &f.server,
            json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "claude");
        no_secrets(&f.account, &a.body);
    }
    // Vertex itself was never asked: no token, no request. And the
    // refused exchange was not tried again by each request: after one
    // failure, requests fall back at once until the cooldown ends.
    assert_eq!(f.vertex.request_count(), 0);
    assert!(
        (1..=3).contains(&f.account.refused_exchanges()),
        "{} exchanges tried",
        f.account.refused_exchanges()
    );
    // The endpoint comes back: the actor's next refresh (backing off from
    // 2 s), or a request finding none held, fetches a token, and Vertex
    // serves again.
    f.account.refuse_exchanges(false);
    f.vertex.always(Reply::text("Vertex is back."));
    let hi = json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]});
    eventually("Vertex serves again", async || {
        chat(&f.server, hi.clone()).await.headers["x-understudy-provider"] == "vertex"
    })
    .await;
    assert!(f.account.exchanges() >= 1);
    assert_eq!(f.vertex.violations(), Vec::<String>::new());
}

// Wall-clock time, not paused: a 30 s token and a minute of load at
// concurrency 16 cover the actor's refreshes at about 22.5 s and 45 s,
// each while the token before is still good (the paused-time unit test
// in the providers crate checks a longer run of them in no time).
#[tokio::test(flavor = "multi_thread")]
async fn a_30s_token_is_refreshed_ahead_of_time_under_load() {
    let account = account();
    account.set_token_lifetime(Duration::from_secs(30));
    let f = fixture(Protocol::Messages, CLAUDE, &["vertex", "claude"], account).await;
    f.vertex.always(Reply::text("Fresh."));
    f.claude.always(Reply::text("Fell back."));
    // The provider's actor starts with its first request.
    let a = chat(
        &f.server,
        json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(a.headers["x-understudy-provider"], "vertex", "{}", a.body);
    eventually("the first exchange", async || f.account.exchanges() >= 1).await;
    let end = Instant::now() + Duration::from_secs(60);
    let url = format!("{}/v1/chat/completions", f.server.url);
    let client = understudy_testkit::http_client();
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                while Instant::now() < end {
                    let r = client
                        .post(&url)
                        .header(AUTH.0, AUTH.1)
                        .header("content-type", "application/json")
                        .body(json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}).to_string())
                        .send()
                        .await
                        .unwrap();
                    let provider = r.headers().get("x-understudy-provider").cloned();
                    let status = r.status().as_u16();
                    done.push((status, provider.map(|p| p.to_str().unwrap_or_default().to_owned())));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                done
            })
        })
        .collect();
    let mut answers = Vec::new();
    for worker in workers {
        answers.extend(worker.await.unwrap());
    }
    assert!(answers.len() > 16 * 10, "{} requests", answers.len());
    let off: Vec<_> = answers
        .iter()
        .filter(|(status, provider)| *status != 200 || provider.as_deref() != Some("vertex"))
        .collect();
    assert!(
        off.is_empty(),
        "{} requests not served by Vertex: {:?}",
        off.len(),
        &off[..off.len().min(5)]
    );
    // No request met an expired token (no 401), so none renewed one.
    assert_eq!(f.vertex.violations(), Vec::<String>::new());
    let exchanges = f.account.exchanges();
    assert!(
        (3..=4).contains(&exchanges),
        "{exchanges} exchanges in 60 s of 30 s tokens"
    );
    // Each new token was fetched while the one before was still good:
    // no request could have met an expired one or waited for its
    // replacement.
    assert_eq!(f.account.late_exchanges(), 0);
}
