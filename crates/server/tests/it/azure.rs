//! Azure OpenAI as a fallback, through the real server: the official
//! openai SDK's chat completions and Responses calls fail over from
//! OpenAI (503) to Azure, on the v1 API and on classic deployment URLs;
//! every request Azure's simulator receives carries the `api-key` header
//! (and, classic, `api-version`). Azure's own signals mean what they
//! mean: its content filter is a refusal (the softened retry), its stream
//! preamble is not the first token, a missing deployment falls back, and
//! the key is in no answer.

use serde_json::{Value, json};
use understudy_testkit::{
    AzureSim, Protocol, Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway,
};

use crate::common::{self, TestServer};

const DEPLOYMENT: &str = "my-deployment";
const KEY: &str = "azure-simulated-key-5f1c9a7e";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-sdk-test");

struct Fixture {
    openai: SimProvider,
    azure: SimProvider,
    server: TestServer,
}

/// How the Azure provider is set up.
#[derive(Clone, Copy)]
struct Shape {
    protocol: Protocol,
    /// The classic deployment URLs (`api_version` set), else the v1 API.
    classic: bool,
    /// Azure is the primary (else OpenAI is, and Azure the fallback).
    azure_first: bool,
}

const V1: Shape = Shape {
    protocol: Protocol::ChatCompletions,
    classic: false,
    azure_first: false,
};

/// OpenAI's simulator and Azure's (serving `shape.protocol`), the Azure
/// provider's table using `key`, and the server in front of both.
async fn fixture(shape: Shape, key: &str) -> Fixture {
    let openai = match shape.protocol {
        Protocol::Responses => SimProvider::openai_responses().await.unwrap(),
        _ => SimProvider::openai().await.unwrap(),
    };
    let resource = AzureSim::new(KEY, &[DEPLOYMENT]);
    let azure = SimProvider::azure(&resource, shape.protocol).await.unwrap();
    let mut table = format!(
        "[providers.azure]\nkind = \"azure\"\nbase_url = {:?}\nmodel = {DEPLOYMENT:?}\napi_key = {key:?}\n",
        azure.base_url()
    );
    if shape.classic {
        table.push_str("api_version = \"2025-04-01-preview\"\n");
    }
    if shape.protocol == Protocol::Responses {
        table.push_str("responses_api = true\n");
    }
    let order: &[&str] = if shape.azure_first {
        &["azure", "openai"]
    } else {
        &["openai", "azure"]
    };
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .toml(&table)
        .order(order)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Fixture {
        openai,
        azure,
        server,
    }
}

fn no_violations(f: &Fixture) {
    assert_eq!(f.azure.violations(), Vec::<String>::new());
    assert_eq!(f.openai.violations(), Vec::<String>::new());
}

/// Every request Azure received was authorized with the key, at the URL
/// `shape` calls for, with the deployment where that URL puts it.
fn check_azure_requests(f: &Fixture, shape: Shape, op: &str) {
    let sent = f.azure.received();
    assert!(!sent.is_empty());
    for r in &sent {
        assert_eq!(r.header("api-key"), Some(KEY));
        assert_eq!(r.header("authorization"), None);
        assert_eq!(r.json()["model"], DEPLOYMENT);
        let want = match (shape.classic, op) {
            (false, _) => format!("/openai/v1/{op}"),
            (true, "chat/completions") => {
                format!(
                    "/openai/deployments/{DEPLOYMENT}/chat/completions?api-version=2025-04-01-preview"
                )
            }
            (true, _) => format!("/openai/{op}?api-version=2025-04-01-preview"),
        };
        assert_eq!(r.path, want);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdks_chat_completions_fall_over_to_azure_v1_and_classic() {
    for classic in [false, true] {
        let shape = Shape { classic, ..V1 };
        let f = fixture(shape, KEY).await;
        f.openai.always(Reply::status(503));
        f.azure.always(Reply::text("Azure answers the call"));
        let v = common::run_sdk("openai", "openai_sdk.py", &f.server.url, "").await;
        assert_eq!(v["text"], "Azure answers the call", "{v}");
        assert_eq!(v["provider_header"], "azure");
        assert_eq!(v["fell_back_header"], "true");
        assert_eq!(v["finish_reason"], "stop");
        // The stream came through Azure's preamble whole.
        assert_eq!(v["streamed_text"], "Azure answers the call");
        assert_eq!(v["streamed_models"], json!([DEPLOYMENT]));
        no_violations(&f);
        assert_eq!(f.azure.received().len(), 3);
        check_azure_requests(&f, shape, "chat/completions");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdks_responses_fall_over_to_azure_v1_and_classic() {
    for classic in [false, true] {
        let shape = Shape {
            protocol: Protocol::Responses,
            classic,
            azure_first: false,
        };
        let f = fixture(shape, KEY).await;
        f.openai.always(Reply::status(503));
        f.azure.always(Reply::text("Azure responds"));
        let text = common::run_sdk("openai", "openai_responses.py", &f.server.url, "text").await;
        assert_eq!(text["text"], "Azure responds", "{text}");
        assert_eq!(text["provider"], "azure");
        assert_eq!(text["fell_back"], "true");
        assert_eq!(text["status"], "completed");
        let stream =
            common::run_sdk("openai", "openai_responses.py", &f.server.url, "stream").await;
        assert_eq!(stream["text"], "Azure responds", "{stream}");
        assert_eq!(stream["deltas"], "Azure responds");
        let types = stream["types"].as_array().unwrap();
        assert_eq!(types.last().unwrap(), "response.completed", "{stream}");
        no_violations(&f);
        assert_eq!(f.azure.received().len(), 2);
        check_azure_requests(&f, shape, "responses");
    }
}

/// A Chat Completions request to the server.
fn ask(stream: bool) -> String {
    json!({
        "model": "default",
        "messages": [
            {"role": "system", "content": "Be funny."},
            {"role": "user", "content": "Roast my code"}
        ],
        "temperature": 1.0,
        "stream": stream,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_azure_content_filter_400_gets_the_softened_retry() {
    let shape = Shape {
        azure_first: true,
        ..V1
    };
    let f = fixture(shape, KEY).await;
    f.azure.push(Reply::Refuse(Refusal::Status400));
    f.azure.push(Reply::text("A gentle roast."));
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(false))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "A gentle roast."
    );
    assert_eq!(a.headers["x-understudy-provider"], "azure");
    assert_eq!(a.headers["x-understudy-fell-back"], "false");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    let sent = f.azure.received();
    assert_eq!(sent.len(), 2);
    let system = |r: &understudy_testkit::Received| {
        r.json()["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(system(&sent[0]), "Be funny.");
    assert!(system(&sent[1]).starts_with("Be funny."));
    assert!(
        system(&sent[1]).contains("Keep it light"),
        "{}",
        system(&sent[1])
    );
    let temperature = |r: &understudy_testkit::Received| r.json()["temperature"].as_f64().unwrap();
    assert_eq!(temperature(&sent[0]), 1.0);
    assert!(temperature(&sent[1]) < 1.0, "{}", sent[1].json());
    assert!(f.openai.received().is_empty());
    no_violations(&f);
}

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

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_preamble_is_not_the_first_token() {
    let shape = Shape {
        azure_first: true,
        ..V1
    };
    let f = fixture(shape, KEY).await;
    for end in [StreamEnd::ErrorEvent, StreamEnd::Cut] {
        // Azure sends its preamble, then fails before any text.
        f.azure.push(Reply::Stream(StreamSpec {
            chunks: Vec::new(),
            interval: std::time::Duration::ZERO,
            end,
        }));
        f.openai.push(Reply::text("OpenAI takes over"));
        let a = f
            .server
            .post_with("/v1/chat/completions", &[AUTH], ask(true))
            .await;
        assert_eq!(a.status, 200, "{end:?}: {}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "openai", "{end:?}");
        assert_eq!(a.headers["x-understudy-fell-back"], "true");
        assert_eq!(streamed_text(&a.body), "OpenAI takes over", "{end:?}");
        assert!(!a.body.contains("prompt_filter_results"), "{}", a.body);
    }
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_deployment_falls_back_and_says_why() {
    let shape = Shape {
        azure_first: true,
        ..V1
    };
    let openai = SimProvider::openai().await.unwrap();
    let resource = AzureSim::new(KEY, &["another-deployment"]);
    let azure = SimProvider::azure(&resource, shape.protocol).await.unwrap();
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .toml(&format!(
            "[providers.azure]\nkind = \"azure\"\nbase_url = {:?}\nmodel = {DEPLOYMENT:?}\napi_key = {KEY:?}\n",
            azure.base_url()
        ))
        .order(&["azure", "openai"])
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    openai.always(Reply::text("Served elsewhere"));
    for _ in 0..2 {
        let a = server
            .post_with("/v1/chat/completions", &[AUTH], ask(false))
            .await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "openai");
    }
    // A config error, not an outage: Azure is still tried every time.
    assert_eq!(azure.received().len(), 2);
    assert!(azure.violations()[0].contains("DeploymentNotFound"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_is_in_no_answer() {
    // A wrong key: Azure's 401, then OpenAI's 503; the error names neither key.
    let wrong = "azure-wrong-key-9d3e0b71c2";
    let f = fixture(V1, wrong).await;
    f.openai.always(Reply::status(503));
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(false))
        .await;
    assert!(a.status >= 400, "{}", a.body);
    assert!(
        !a.body.contains(wrong) && !a.body.contains(KEY),
        "{}",
        a.body
    );
    assert!(
        f.azure.violations()[0].contains("401"),
        "{:?}",
        f.azure.violations()
    );
    // An upstream that echoes the key in its error message.
    let f = fixture(V1, KEY).await;
    f.openai.always(Reply::status(503));
    f.azure.always(Reply::Status {
        status: 400,
        body: json!({"error": {"code": "invalid_request", "message": format!("bad request for key {KEY}")}})
            .to_string(),
        headers: Vec::new(),
    });
    for stream in [false, true] {
        let a = f
            .server
            .post_with("/v1/chat/completions", &[AUTH], ask(stream))
            .await;
        assert!(!a.body.contains(KEY), "{}", a.body);
        assert!(!a.body.contains(&KEY[..12]), "{}", a.body);
    }
}
