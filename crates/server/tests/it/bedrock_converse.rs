//! The models on Bedrock that are not Anthropic's, through Converse, in
//! the real server: Chat Completions served by Llama on Bedrock after an
//! OpenAI 503 (plain and streamed), a tool loop, an image, a guardrail's
//! refusal (the softened retry, then the fallback), an exception frame in
//! a 200 ConverseStream, and one Bedrock provider serving Claude through
//! InvokeModel and Llama through Converse on one route. Bedrock's
//! simulator checks every signature and every Converse body as
//! bedrock-runtime does; no test leaves it a violation.

use serde_json::{Value, json};
use understudy_testkit::{
    BedrockSim, Refusal, Reply, SimProvider, SimToolCall, StreamEnd, StreamSpec, TestGateway,
};

use crate::common::TestServer;

const LLAMA: &str = "meta.llama3-1-70b-instruct-v1:0";
const CLAUDE: &str = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
const KEY_ID: &str = "AKIDSIMULATEDCONVERSE";
const SECRET: &str = "simulated/Secret+Key/for-the-converse-test";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-sdk-test");
/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

struct Fixture {
    openai: SimProvider,
    bedrock: SimProvider,
    account: BedrockSim,
    server: TestServer,
}

/// OpenAI's simulator and Bedrock's (Llama its default model), in
/// `order`, with `extra` settings (routes).
async fn fixture(order: &[&str], extra: &str) -> Fixture {
    let account = BedrockSim::new("us-east-1", KEY_ID, SECRET, None);
    let openai = SimProvider::openai().await.unwrap();
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {LLAMA:?}\naws_access_key_id = {KEY_ID:?}\naws_secret_access_key = {SECRET:?}\n{extra}",
            bedrock.base_url()
        ))
        .order(order)
        .env("UNDERSTUDY_API_KEYS", "sk-understudy-sdk-test")
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    Fixture {
        openai,
        bedrock,
        account,
        server,
    }
}

fn no_violations(f: &Fixture) {
    assert_eq!(f.bedrock.violations(), Vec::<String>::new());
    assert_eq!(f.openai.violations(), Vec::<String>::new());
}

/// A Chat Completions body for the default route.
fn ask(messages: Value, stream: bool) -> String {
    json!({"model": "default", "stream": stream, "messages": messages}).to_string()
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
async fn chat_completions_fall_over_from_openai_to_llama_on_bedrock() {
    let f = fixture(&["openai", "bedrock"], "").await;
    f.openai.always(Reply::status(503));
    f.bedrock.always(Reply::text("Llama answers from Bedrock."));
    let messages = json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."}
    ]);
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            ask(messages.clone(), false),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "bedrock");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "Llama answers from Bedrock."
    );
    let s = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(messages, true))
        .await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(
        streamed_text(&s.body),
        "Llama answers from Bedrock.",
        "{}",
        s.body
    );
    assert!(s.body.contains("[DONE]"), "{}", s.body);
    let sent = f.bedrock.received();
    assert_eq!(sent.len(), 2);
    assert!(
        sent[0].path.ends_with(&format!("/model/{LLAMA}/converse")),
        "{}",
        sent[0].path
    );
    assert!(
        sent[1]
            .path
            .ends_with(&format!("/model/{LLAMA}/converse-stream")),
        "{}",
        sent[1].path
    );
    for r in &sent {
        let auth = r.header("authorization").unwrap();
        assert!(
            auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={KEY_ID}/")),
            "{auth}"
        );
        let body = r.json();
        assert!(
            body.get("model").is_none() && body.get("modelId").is_none(),
            "{body}"
        );
        assert_eq!(body["system"], json!([{"text": "Be brief."}]));
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": [{"text": "Say hello."}]}])
        );
    }
    no_violations(&f);
}

/// The tool calls of a Chat Completions answer, `(id, arguments)`, whole
/// or put together from their streamed fragments.
fn calls_of(answer: &crate::common::Answer, stream: bool) -> Vec<(String, Value)> {
    if !stream {
        let v = answer.json();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
        return calls
            .iter()
            .map(|c| {
                let args = c["function"]["arguments"].as_str().unwrap();
                (
                    c["id"].as_str().unwrap().to_owned(),
                    serde_json::from_str(args).unwrap(),
                )
            })
            .collect();
    }
    let mut by_index: Vec<(String, String)> = Vec::new();
    for d in answer.body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<Value>(d) else {
            continue;
        };
        for c in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = usize::try_from(c["index"].as_u64().unwrap()).unwrap();
            if i == by_index.len() {
                by_index.push((c["id"].as_str().unwrap().to_owned(), String::new()));
            }
            by_index[i]
                .1
                .push_str(c["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    by_index
        .into_iter()
        .map(|(id, args)| (id, serde_json::from_str(&args).unwrap()))
        .collect()
}

/// The last Converse body Bedrock got: its results in one user turn, each
/// answering its `toolUse` of the turn before, under Bedrock's own ids.
fn assert_results_answer_their_calls(bedrock: &SimProvider) {
    let body = bedrock.received().last().unwrap().json();
    let turns = body["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "{body}");
    let ids = |turn: &Value, member: &str| -> Vec<String> {
        turn["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b[member]["toolUseId"].as_str().map(str::to_owned))
            .collect()
    };
    let uses = ids(&turns[1], "toolUse");
    assert_eq!(uses.len(), 2, "{body}");
    assert_eq!(uses, ids(&turns[2], "toolResult"), "{body}");
    assert!(uses.iter().all(|id| id.starts_with("tooluse_")), "{uses:?}");
    assert_eq!(
        body["toolConfig"]["tools"][0]["toolSpec"]["name"],
        "get_weather"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_goes_through_converse() {
    let f = fixture(&["openai", "bedrock"], "").await;
    f.openai.always(Reply::status(503));
    let calls = Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo"})),
        SimToolCall::new("get_weather", json!({"city": "Paris"})),
    ]);
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }}]);
    let question = json!({"role": "user", "content": "Weather in Oslo and Paris?"});
    for stream in [false, true] {
        f.bedrock
            .push(calls.clone())
            .push(Reply::text("Both are mild."));
        let first =
            json!({"model": "default", "stream": stream, "tools": tools, "messages": [question]});
        let a = f
            .server
            .post_with("/v1/chat/completions", &[AUTH], first.to_string())
            .await;
        assert_eq!(a.status, 200, "{}", a.body);
        let called = calls_of(&a, stream);
        assert_eq!(called.len(), 2, "{stream}: {}", a.body);
        assert_eq!(called[0].1, json!({"city": "Oslo"}));
        assert_eq!(called[1].1, json!({"city": "Paris"}));
        let assistant_calls: Vec<Value> = called.iter().map(|(id, args)| json!({
            "id": id, "type": "function", "function": {"name": "get_weather", "arguments": args.to_string()}
        })).collect();
        let second = json!({"model": "default", "stream": stream, "tools": tools, "messages": [
            question,
            {"role": "assistant", "content": null, "tool_calls": assistant_calls},
            {"role": "tool", "tool_call_id": called[0].0, "content": "-3 C"},
            {"role": "tool", "tool_call_id": called[1].0, "content": "{\"celsius\": 12}"}
        ]});
        let b = f
            .server
            .post_with("/v1/chat/completions", &[AUTH], second.to_string())
            .await;
        assert_eq!(b.status, 200, "{}", b.body);
        let text = if stream {
            streamed_text(&b.body)
        } else {
            b.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "Both are mild.", "{stream}");
        assert_results_answer_their_calls(&f.bedrock);
    }
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_goes_inline_and_a_remote_one_goes_elsewhere() {
    let f = fixture(&["bedrock", "openai"], "").await;
    f.bedrock.always(Reply::text("A single pixel."));
    f.openai.always(Reply::text("OpenAI fetched the image."));
    let with_image = |url: &str| {
        ask(
            json!([{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url}}
            ]}]),
            false,
        )
    };
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            with_image(&format!("data:image/png;base64,{PNG}")),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "bedrock");
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "A single pixel."
    );
    let body = f.bedrock.received()[0].json();
    assert_eq!(
        body["messages"][0]["content"][1],
        json!({"image": {"format": "png", "source": {"bytes": PNG}}}),
        "{body}"
    );
    // Converse fetches no URL (nor does the gateway): the next target serves it.
    let a = f
        .server
        .post_with(
            "/v1/chat/completions",
            &[AUTH],
            with_image("https://example.com/cat.png"),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    assert_eq!(f.bedrock.request_count(), 1);
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guardrail_gets_the_softened_retry_then_the_fallback() {
    let f = fixture(&["bedrock", "openai"], "").await;
    f.bedrock.always(Reply::Refuse(Refusal::FinishReason));
    f.openai.always(Reply::text("OpenAI, gently."));
    let messages = json!([
        {"role": "system", "content": "Be funny."},
        {"role": "user", "content": "Roast my code."}
    ]);
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(messages, false))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "OpenAI, gently."
    );
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    assert_eq!(a.headers["x-understudy-fell-back"], "true");
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    // Bedrock refused twice: as asked, then softened.
    let sent = f.bedrock.received();
    assert_eq!(sent.len(), 2);
    let system = |i: usize| {
        sent[i].json()["system"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(system(0), "Be funny.");
    assert!(
        system(1).starts_with("Be funny.") && system(1).contains("Keep it light"),
        "{}",
        system(1)
    );
    no_violations(&f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttling_exception_frame_before_text_falls_back() {
    let f = fixture(&["bedrock", "openai"], "").await;
    f.account.stream_exception("throttlingException");
    f.bedrock.always(Reply::Stream(
        StreamSpec::new(&[]).ending(StreamEnd::ErrorEvent),
    ));
    f.openai.always(Reply::text("Served after the throttle."));
    let hi = json!([{"role": "user", "content": "hi"}]);
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(hi.clone(), true))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        streamed_text(&a.body),
        "Served after the throttle.",
        "{}",
        a.body
    );
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    assert!(f.bedrock.request_count() >= 1);
    assert!(
        f.bedrock
            .received()
            .iter()
            .all(|r| r.path.ends_with("/converse-stream"))
    );
    // After text, the exception is the in-band error.
    let f = fixture(&["bedrock", "openai"], "").await;
    f.account.stream_exception("modelStreamErrorException");
    f.bedrock.push(Reply::Stream(
        StreamSpec::new(&["Half ", "an answer"]).ending(StreamEnd::ErrorEvent),
    ));
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], ask(hi, true))
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
async fn one_bedrock_provider_serves_claude_and_llama_each_in_its_api() {
    let routes = format!("\n[routes]\n\"mixed\" = [\"bedrock:{CLAUDE}\", \"bedrock:{LLAMA}\"]\n");
    let f = fixture(&["bedrock", "openai"], &routes).await;
    // Claude overloaded on InvokeModel; Llama answers on Converse. The
    // Anthropic simulator behind both sees each as a Messages request,
    // the model in its body.
    f.bedrock.respond_with(|r| {
        if r.json()["model"] == CLAUDE {
            Reply::status(529)
        } else {
            Reply::text("Llama, after Claude was overloaded.")
        }
    });
    let body =
        json!({"model": "mixed", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let a = f
        .server
        .post_with("/v1/chat/completions", &[AUTH], body)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        "Llama, after Claude was overloaded."
    );
    let paths: Vec<String> = f
        .bedrock
        .received()
        .iter()
        .map(|r| r.path.clone())
        .collect();
    let last = paths.last().unwrap();
    assert!(
        paths[0].ends_with(&format!("/model/{CLAUDE}/invoke")),
        "{paths:?}"
    );
    assert!(
        last.ends_with(&format!("/model/{LLAMA}/converse")),
        "{paths:?}"
    );
    assert_eq!(
        f.bedrock.received()[0].json()["anthropic_version"],
        "bedrock-2023-05-31"
    );
    no_violations(&f);
}
