//! Cloud twins: one client model name reaches the same Claude on the
//! Anthropic API, on AWS Bedrock and on Google Vertex AI, through a
//! pattern route (`"claude-*" = ["claude:*", "bedrock:*", "vertex:*"]`)
//! and each cloud's model map. The official anthropic SDK runs a streamed
//! (and a plain) tool loop with thinking on while the Anthropic API is
//! overloaded (529) and Bedrock, after serving a turn, is throttled: the
//! loop completes, each cloud gets its own id for the model and a body in
//! its own shape, and no platform sees another's thinking signature.

use serde_json::{Value, json};
use understudy_testkit::{
    BedrockSim, Protocol, Reply, SimProvider, SimToolCall, TestGateway, VertexSim,
};

use crate::common::{self, TestServer};

/// What the client asks for.
const MODEL: &str = "claude-sonnet-4-5";
const BEDROCK_ID: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const VERTEX_ID: &str = "claude-sonnet-4-5@20250929";
const KEY_ID: &str = "AKIDSIMULATEDTWINS";
const SECRET: &str = "simulated/Secret+Key/for-the-twins";
const PROJECT: &str = "understudy-twins";
const REGION: &str = "us-east5";

struct Fixture {
    claude: SimProvider,
    bedrock: SimProvider,
    vertex: SimProvider,
    server: TestServer,
}

/// The three providers, each table mapping [`MODEL`] to its own id, and the
/// pattern route over all three.
async fn fixture() -> Fixture {
    let claude = SimProvider::anthropic().await.unwrap();
    let bedrock_account = BedrockSim::new("us-east-1", KEY_ID, SECRET, None);
    let bedrock = SimProvider::bedrock(&bedrock_account).await.unwrap();
    let vertex_account = VertexSim::new(PROJECT, REGION);
    let vertex = SimProvider::vertex(Protocol::Messages, &vertex_account)
        .await
        .unwrap();
    let key_file = vertex_account.key_file(&format!("{}/token", vertex.base_url()));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\n\
             model = {BEDROCK_ID:?}\nmodels = {{ {MODEL:?} = {BEDROCK_ID:?} }}\n\
             aws_access_key_id = {KEY_ID:?}\naws_secret_access_key = {SECRET:?}\n\n\
             [providers.vertex]\nkind = \"vertex\"\nproject = {PROJECT:?}\nregion = {REGION:?}\n\
             base_url = {:?}\ncredentials_file = {:?}\nmodel = {VERTEX_ID:?}\n\
             models = {{ {MODEL:?} = {VERTEX_ID:?} }}\n\n\
             [routes]\n\"claude-*\" = [\"claude:*\", \"bedrock:*\", \"vertex:*\"]\n",
            bedrock.base_url(),
            vertex.base_url(),
            key_file.display().to_string(),
        ))
        .order(&["claude", "bedrock", "vertex"])
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Fixture {
        claude,
        bedrock,
        vertex,
        server,
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

fn call() -> Reply {
    Reply::ToolCalls(vec![SimToolCall::new(
        "get_weather",
        json!({"city": "Oslo"}),
    )])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thinking_tool_loop_crosses_anthropic_bedrock_and_vertex() {
    for mode in ["thinking-tools-stream", "thinking-tools"] {
        let f = fixture().await;
        // The Anthropic API is overloaded throughout; Bedrock thinks and
        // calls, then is throttled; Vertex thinks and calls, then answers.
        f.claude.always(Reply::status(529));
        f.bedrock
            .push(call().thinking_first("Oslo, so a weather call."))
            .always(Reply::status(429));
        f.vertex
            .push(call().thinking_first("Vertex checks again."))
            .push(Reply::text("-3 degrees in Oslo."));
        let v = common::run_sdk(
            "anthropic",
            "anthropic_sdk.py",
            &f.server.url,
            &format!("{mode}@{MODEL}"),
        )
        .await;
        assert_eq!(
            served(&v),
            [
                ("bedrock".to_owned(), true),
                ("vertex".to_owned(), true),
                ("vertex".to_owned(), false)
            ],
            "{mode}: {v}"
        );
        // Each platform's signature under its own name.
        let signed = |turn: usize| {
            v["turns"][turn]["content"][0]["signature"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert!(signed(0).starts_with("bedrock:"), "{mode}: {v}");
        assert!(signed(1).starts_with("vertex:"), "{mode}: {v}");
        for sim in [&f.claude, &f.bedrock, &f.vertex] {
            assert_eq!(sim.violations(), Vec::<String>::new(), "{mode}");
        }

        // Every turn asked the Anthropic API first, by the client's name.
        let to_claude = f.claude.received();
        assert_eq!(to_claude.len(), 3, "{mode}");
        assert!(to_claude.iter().all(|r| r.json()["model"] == MODEL));
        // Bedrock: its id in the path, its body (no model); throttled on
        // the second and third turns (each retried once after the wait).
        let to_bedrock = f.bedrock.received();
        assert!(to_bedrock.len() >= 3, "{mode}: {}", to_bedrock.len());
        for r in &to_bedrock {
            assert!(
                r.path.contains(&format!("/model/{BEDROCK_ID}/")),
                "{}",
                r.path
            );
            assert_eq!(r.json()["anthropic_version"], "bedrock-2023-05-31");
            assert!(r.json().get("model").is_none());
        }
        // Vertex: its id in the path; it never saw Bedrock's signature.
        // Both its turns went with thinking off: the tool loop began with
        // Bedrock's turn, whose block Vertex cannot take, and a loop with
        // thinking on must begin with a signed block. Its own block of the
        // second turn went back to it as signed.
        let to_vertex = f.vertex.received();
        assert_eq!(to_vertex.len(), 2, "{mode}");
        let verb = if mode.ends_with("stream") {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        for r in &to_vertex {
            assert!(
                r.path.ends_with(&format!("/models/{VERTEX_ID}:{verb}")),
                "{}",
                r.path
            );
            let body = String::from_utf8_lossy(&r.body);
            assert!(!body.contains("bedrock:"), "{mode}: {body}");
        }
        let first = to_vertex[0].json();
        assert_eq!(
            first["thinking"],
            json!({"type": "disabled"}),
            "{mode}: {first}"
        );
        let last = to_vertex[1].json();
        assert_eq!(
            last["thinking"],
            json!({"type": "disabled"}),
            "{mode}: {last}"
        );
        assert_eq!(
            last["messages"][1]["content"][0]["type"], "tool_use",
            "{mode}: {last}"
        );
        let own = &last["messages"][3]["content"][0];
        assert_eq!(own["type"], "thinking", "{mode}: {last}");
        assert_eq!(
            format!("vertex:{}", own["signature"].as_str().unwrap()),
            signed(1),
            "{mode}"
        );
    }
}
