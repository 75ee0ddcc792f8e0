//! Claude on AWS Bedrock as a fallback, through the real server: the
//! official anthropic SDK's conversations and tool loops fail over from
//! the Anthropic API (529) to Bedrock; every request Bedrock's simulator
//! receives is signed (SigV4, recomputed there from the bytes received)
//! and in Bedrock's body shape, and its streams come back in AWS's event
//! stream. Bedrock's own failures (a throttle, a bad signature, an
//! exception frame, an expired session token) mean what they mean.

use std::io::Write as _;

use serde_json::{Value, json};
use understudy_testkit::{
    BedrockSim, Reply, SimProvider, SimToolCall, StreamEnd, StreamSpec, TestGateway,
};

use crate::common::{self, TestServer};

const MODEL: &str = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
const KEY_ID: &str = "AKIDSIMULATEDBEDROCK";
const SECRET: &str = "simulated/Secret+Key/for-the-bedrock-test";

fn an_account(token: Option<&str>) -> BedrockSim {
    BedrockSim::new("us-east-1", KEY_ID, SECRET, token)
}

struct Fixture {
    claude: SimProvider,
    bedrock: SimProvider,
    server: TestServer,
}

/// The Anthropic API's simulator (the primary) and Bedrock's, the
/// provider's table ending in `lines` (its credentials).
async fn fixture(account: &BedrockSim, lines: &str) -> Fixture {
    let claude = SimProvider::anthropic().await.unwrap();
    let bedrock = SimProvider::bedrock(account).await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {MODEL:?}\n{lines}",
            bedrock.base_url()
        ))
        .order(&["claude", "bedrock"])
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Fixture {
        claude,
        bedrock,
        server,
    }
}

fn key_lines() -> String {
    format!("aws_access_key_id = {KEY_ID:?}\naws_secret_access_key = {SECRET:?}\n")
}

const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-sdk-test");

/// The text of a streamed Chat Completions answer.
fn streamed_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

fn no_violations(f: &Fixture) {
    assert_eq!(f.bedrock.violations(), Vec::<String>::new());
    assert_eq!(f.claude.violations(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_sdk_falls_over_from_a_529_to_bedrock_streamed_and_not() {
    let account = an_account(None);
    let f = fixture(&account, &key_lines()).await;
    f.claude.always(Reply::status(529));
    f.bedrock.always(Reply::text("Bedrock answers the joke."));
    let v = common::run_sdk("anthropic", "anthropic_sdk.py", &f.server.url, "text").await;
    for mode in ["plain", "stream"] {
        for turn in v[mode].as_array().unwrap() {
            assert_eq!(turn["provider"], "bedrock", "{mode}: {turn}");
            assert_eq!(turn["model"], MODEL, "{turn}");
            assert_eq!(turn["stop_reason"], "end_turn");
            let text: String = turn["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            assert_eq!(text, "Bedrock answers the joke.");
        }
    }
    // The streamed answer came in pieces through the event stream.
    assert!(
        v["stream"][1]["text_stream"].as_array().unwrap().len() > 2,
        "{v}"
    );
    no_violations(&f);
    let sent = f.bedrock.received();
    assert_eq!(sent.len(), 4);
    for r in &sent {
        let auth = r.header("authorization").unwrap();
        assert!(
            auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={KEY_ID}/")),
            "{auth}"
        );
        let body = r.json();
        assert_eq!(body["anthropic_version"], "bedrock-2023-05-31");
        assert!(
            body.get("model").is_none() && body.get("stream").is_none(),
            "{body}"
        );
        // The client's own body, its cache marker kept.
        assert_eq!(
            body["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }
    assert!(
        sent[2].path.ends_with("/invoke-with-response-stream"),
        "{}",
        sent[2].path
    );
    assert!(
        sent[0].path.ends_with(&format!("/model/{MODEL}/invoke")),
        "{}",
        sent[0].path
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_is_served_by_bedrock_with_its_tool_results() {
    let account = an_account(Some("session-token-one"));
    let f = fixture(
        &account,
        &format!("{}aws_session_token = \"session-token-one\"\n", key_lines()),
    )
    .await;
    f.claude.always(Reply::status(529));
    let calls = Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo"})),
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
    ]);
    for _ in 0..2 {
        f.bedrock
            .push(calls.clone())
            .push(Reply::text("Both are mild."));
    }
    let v = common::run_sdk("anthropic", "anthropic_sdk.py", &f.server.url, "tools").await;
    for mode in ["plain", "stream"] {
        let turns = &v[mode];
        assert_eq!(turns[0]["provider"], "bedrock", "{mode}: {v}");
        assert_eq!(turns[0]["stop_reason"], "tool_use");
        let cities: Vec<&str> = turns[0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| b["input"]["city"].as_str().unwrap())
            .collect();
        assert_eq!(cities, ["Oslo", "Paris"], "{mode}");
        assert_eq!(turns[1]["content"][0]["text"], "Both are mild.");
    }
    no_violations(&f);
    // The session token went with every request, signed.
    for r in f.bedrock.received() {
        assert_eq!(r.header("x-amz-security-token"), Some("session-token-one"));
    }
    let second = f.bedrock.received()[1].json();
    let results: Vec<&Value> = second["messages"][2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|b| b["type"] == "tool_result"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bedrock_api_key_goes_as_a_bearer() {
    let account = BedrockSim::with_api_key("us-east-1", "bedrock-api-key-simulated");
    let f = fixture(&account, "api_key = \"bedrock-api-key-simulated\"\n").await;
    f.claude.always(Reply::status(529));
    f.bedrock.always(Reply::text("Bearer accepted."));
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "Bearer accepted."
    );
    assert_eq!(
        f.bedrock.received()[0].header("authorization"),
        Some("Bearer bedrock-api-key-simulated")
    );
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_secret_is_refused_by_the_signature_check_and_falls_back() {
    let account = an_account(None);
    let lines =
        format!("aws_access_key_id = {KEY_ID:?}\naws_secret_access_key = \"not-the-secret\"\n");
    let f = fixture(&account, &lines).await;
    f.claude.always(Reply::text("The fallback signs nothing."));
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            json!({"model": "bedrock", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    // Pinned to Bedrock, whose signature check fails it: the fallback
    // (claude, 529 once, then its answer) serves.
    assert_eq!(a.status, 200, "{}", a.body);
    let violations = f.bedrock.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("InvalidSignatureException"),
        "{violations:?}"
    );
    assert!(!a.body.contains("not-the-secret"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_bedrock_falls_back_and_an_exception_frame_is_the_streams_failure() {
    let account = an_account(None);
    let f = fixture(&account, &key_lines()).await;
    // Bedrock primary (pinned), the Anthropic API behind it.
    f.bedrock.always(Reply::Status {
        status: 429,
        body: r#"{"message":"Too many tokens, please wait before trying again."}"#.into(),
        headers: vec![(
            "x-amzn-errortype".into(),
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/".into(),
        )],
    });
    f.claude
        .always(Reply::text("Anthropic after the throttle."));
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            json!({"model": "bedrock", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    // A throttle is a rate limit: one retry on Bedrock, then the fallback.
    assert_eq!(f.bedrock.request_count(), 2);

    // A stream whose first frame is an exception falls back; one whose
    // exception comes after text ends in the in-band error.
    let account = an_account(None);
    let f = fixture(&account, &key_lines()).await;
    f.bedrock.push(Reply::Stream(
        StreamSpec::new(&[]).ending(StreamEnd::ErrorEvent),
    ));
    f.claude.always(Reply::text("Served after the exception."));
    let body = json!({"model": "bedrock", "stream": true, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], body.clone())
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(
        streamed_text(&a.body),
        "Served after the exception.",
        "{}",
        a.body
    );
    assert_eq!(a.headers["x-understudy-provider"], "claude");

    f.bedrock.push(Reply::Stream(
        StreamSpec::new(&["Half ", "an answer"]).ending(StreamEnd::ErrorEvent),
    ));
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], body)
        .await;
    assert_eq!(streamed_text(&a.body), "Half an answer", "{}", a.body);
    assert!(
        a.body.contains("\"error\""),
        "the in-band error: {}",
        a.body
    );
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_session_token_reads_the_profile_again_once() {
    let dir = std::env::temp_dir().join(format!("understudy-bedrock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("credentials");
    let write = |token: &str| {
        let mut f = std::fs::File::create(&file).unwrap();
        writeln!(f, "[sim]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\naws_session_token = {token}").unwrap();
    };
    write("token-before");
    let account = an_account(Some("token-before"));
    // The profile is read from the file the environment names.
    let claude = SimProvider::anthropic().await.unwrap();
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {MODEL:?}\naws_profile = \"sim\"\n",
            bedrock.base_url()
        ))
        .env("AWS_SHARED_CREDENTIALS_FILE", file.to_str().unwrap())
        .order(&["bedrock", "claude"])
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    bedrock.always(Reply::text("Signed with the new token."));
    claude.always(Reply::text("the fallback"));
    let ask = || async {
        server
            .post_with(
                "/v1/chat/completions",
                &[AUTH],
                json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            )
            .await
    };
    let a = ask().await;
    assert_eq!(a.headers["x-understudy-provider"], "bedrock", "{}", a.body);
    // The token expires and the file gets a new one (an SSO login, a
    // credential process): the next request is refused once, the file is
    // read again, and the same request goes to Bedrock signed anew.
    account.expire_session_token("token-before");
    account.add_keys(KEY_ID, SECRET, Some("token-after"));
    write("token-after");
    let a = ask().await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "bedrock", "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "Signed with the new token."
    );
    let tokens: Vec<_> = bedrock
        .received()
        .iter()
        .map(|r| {
            r.header("x-amz-security-token")
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(tokens, ["token-before", "token-before", "token-after"]);
    assert_eq!(claude.request_count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
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
async fn thinking_signatures_stay_on_the_platform_that_signed_them() {
    let call = || {
        Reply::ToolCalls(vec![SimToolCall::new(
            "get_weather",
            json!({"city": "Oslo"}),
        )])
    };
    for mode in ["thinking-tools", "thinking-tools-stream"] {
        let f = fixture(&an_account(None), &key_lines()).await;
        // The Anthropic API thinks and calls; overloaded for the next step,
        // which Bedrock thinks through and calls; the Anthropic API answers.
        f.claude
            .push(call().thinking_first("Oslo, so a weather call."))
            .push(Reply::status(529))
            .push(Reply::text("-3 degrees in Oslo."));
        f.bedrock
            .push(call().thinking_first("Bedrock checks again."));
        let v = common::run_sdk("anthropic", "anthropic_sdk.py", &f.server.url, mode).await;
        assert_eq!(
            served(&v),
            [
                ("claude".to_owned(), true),
                ("bedrock".to_owned(), true),
                ("claude".to_owned(), false)
            ],
            "{mode}: {v}"
        );
        // The client holds Bedrock's signature under Bedrock's name.
        let signature = v["turns"][1]["content"][0]["signature"].as_str().unwrap();
        assert!(signature.starts_with("bedrock:"), "{mode}: {signature}");
        // Bedrock never saw the Anthropic API's signature: its turn went
        // with thinking off, the history's tool turn having no block it
        // signed; the Anthropic API never saw Bedrock's block, and kept
        // thinking on (the tool loop started with its own signed block).
        let to_bedrock = f.bedrock.received()[0].json();
        assert_eq!(
            to_bedrock["thinking"],
            json!({"type": "disabled"}),
            "{mode}: {to_bedrock}"
        );
        assert!(
            !to_bedrock.to_string().contains("\"signature\""),
            "{mode}: {to_bedrock}"
        );
        let last = f.claude.received()[2].json();
        assert!(!last.to_string().contains("bedrock:"), "{mode}: {last}");
        assert_eq!(last["thinking"]["type"], "enabled", "{mode}");
        assert_eq!(
            last["messages"][1]["content"][0]["type"], "thinking",
            "{mode}: {last}"
        );
        assert_eq!(
            last["messages"][3]["content"][0]["type"], "tool_use",
            "{mode}: {last}"
        );
        no_violations(&f);
    }
}
