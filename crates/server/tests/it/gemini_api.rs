//! The Gemini API (`/v1beta/models/{model}:…`) through a real HTTP client
//! against the real server over strict simulators: the two stream
//! framings, `?key=`, Google's error shape, a surfaced refusal, a stream
//! cut past the commit, the softened retry on a natively forwarded body,
//! what only Gemini can carry, `countTokens` counted or estimated, and a
//! body Google would refuse refused with Google's own 400.

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, StreamEnd, StreamSpec, TestGateway};

use crate::common::TestServer;

/// A Gemini `gemini` and an OpenAI-compatible `openai`; the route `gem`
/// is Gemini then OpenAI, `oai` OpenAI only; client key `key-gemini-1`.
async fn setup() -> (SimProvider, SimProvider, TestServer) {
    let gemini = SimProvider::gemini().await.expect("gemini sim");
    let openai = SimProvider::openai().await.expect("openai sim");
    let gw = TestGateway::builder()
        .provider("gemini", &gemini)
        .provider("openai", &openai)
        .toml(
            "[server]\napi_keys = [\"key-gemini-1\"]\n[timeouts]\nattempt = 2\nrequest = 4\n\
             [routes]\ngem = [\"gemini:gemini-x\", \"openai:gpt-x\"]\noai = [\"openai:gpt-x\"]",
        )
        .build()
        .await
        .expect("gateway");
    (gemini, openai, TestServer::start(gw.engine).await)
}

const KEY: (&str, &str) = ("x-goog-api-key", "key-gemini-1");

fn hello() -> String {
    json!({"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}).to_string()
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The `data:` payloads of an SSE body.
fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(json_of)
        .collect()
}

/// The text of a list of chunks.
fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_stream_is_sse_with_alt_sse_and_a_json_array_without() {
    let (_gemini, openai, s) = setup().await;
    openai.push(Reply::stream(&["Hi", " you"]));
    let a = s
        .post_with(
            "/v1beta/models/oai:streamGenerateContent?alt=sse",
            &[KEY],
            hello(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "text/event-stream");
    assert_eq!(a.headers["x-understudy-provider"], "openai");
    let chunks = sse_data(&a.body);
    assert_eq!(text_of(&chunks), "Hi you");
    let last = chunks.last().expect("chunks");
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(last["usageMetadata"]["totalTokenCount"].is_u64(), "{last}");

    openai.push(Reply::stream(&["Hi", " again"]));
    let a = s
        .post_with("/v1/models/oai:streamGenerateContent", &[KEY], hello())
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["content-type"], "application/json");
    let chunks: Vec<Value> = serde_json::from_str(&a.body).expect("one JSON array");
    assert_eq!(text_of(&chunks), "Hi again");
    assert!(openai.violations().is_empty(), "{:?}", openai.violations());
}

#[tokio::test]
async fn keys_come_from_the_header_or_the_query_and_errors_are_googles() {
    let (gemini, _openai, s) = setup().await;
    gemini.always(Reply::text("fine"));
    let a = s
        .post(
            "/v1beta/models/gem:generateContent?key=key-gemini-1",
            hello(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        json_of(&a.body)["candidates"][0]["content"]["parts"][0]["text"],
        "fine"
    );
    // The gateway's own key never goes upstream; the provider's does.
    let sent = gemini.received();
    assert!(
        sent.iter().all(|r| !r.path.contains("key-gemini-1")),
        "{:?}",
        sent[0].path
    );

    // (path, headers, status, Google's status name)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], u16, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            "/v1beta/models/gem:generateContent?key=wrong",
            &[],
            401,
            "UNAUTHENTICATED",
        ),
        (
            "/v1beta/models/gem:generateContent",
            &[],
            401,
            "UNAUTHENTICATED",
        ),
        ("/v1beta/models/gem:embedContent", &[KEY], 404, "NOT_FOUND"),
        (
            "/v1beta/models/nothing:generateContent",
            &[KEY],
            404,
            "NOT_FOUND",
        ),
    ];
    for (path, headers, status, name) in cases {
        let a = s.post_with(path, headers, hello()).await;
        assert_eq!(a.status, status, "{path}: {}", a.body);
        let e = json_of(&a.body);
        assert_eq!(e["error"]["status"], name, "{path}: {e}");
        assert_eq!(e["error"]["code"], status, "{path}");
    }
    let bad = json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]});
    let a = s
        .post_with(
            "/v1beta/models/gem:generateContent",
            &[KEY],
            bad.to_string(),
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let e = json_of(&a.body);
    assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(
        e["error"]["message"], "Please use a valid role: user, model.",
        "{e}"
    );
}

#[tokio::test]
async fn what_google_refuses_is_refused_with_googles_400_and_never_forwarded() {
    let (gemini, openai, s) = setup().await;
    gemini.always(Reply::text("fine"));
    openai.always(Reply::text("fine"));
    let call_turn = json!({"role": "model", "parts": [
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "skip_thought_signature_validator"}
    ]});
    // (body, Google's message)
    let cases = [
        (
            json!({"contents": [{"role": "user", "parts": [{"text": "hi", "foo": 1}]}]}),
            "Invalid JSON payload received. Unknown name \"foo\" at 'contents[0].parts[0]': Cannot find field.",
        ),
        (
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "foo": 1}),
            "Invalid JSON payload received. Unknown name \"foo\": Cannot find field.",
        ),
        (
            json!({"contents": [
                {"role": "user", "parts": [{"text": "call f"}]},
                call_turn,
                {"role": "function", "parts": [{"functionResponse": {"name": "f", "response": {"result": 1}}}]}
            ]}),
            "Please use a valid role: user, model.",
        ),
        (
            json!({"contents": [
                {"role": "user", "parts": [{"text": "call f"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": 42}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"result": 1}}}]}
            ]}),
            "Invalid value at 'contents[1].parts[0].thought_signature' (TYPE_BYTES), 42",
        ),
        (
            json!({"contents": [{"role": "user", "parts": [{"thought": true}]}]}),
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized field\n",
        ),
    ];
    for (body, message) in &cases {
        for route in ["gem", "oai"] {
            for method in [
                "generateContent",
                "streamGenerateContent?alt=sse",
                "countTokens",
            ] {
                let path = format!("/v1beta/models/{route}:{method}");
                let a = s.post_with(&path, &[KEY], body.to_string()).await;
                assert_eq!(a.status, 400, "{path} {body}: {}", a.body);
                assert_eq!(
                    json_of(&a.body),
                    json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}),
                    "{path} {body}"
                );
            }
        }
    }
    assert_eq!(gemini.request_count(), 0, "nothing reached Gemini");
    assert_eq!(openai.request_count(), 0, "nothing reached OpenAI");

    // The simulator, Google's stand-in, refuses the same bodies itself.
    let client = reqwest::Client::new();
    for (body, _) in &cases {
        let url = format!(
            "{}/v1beta/models/gemini-x:generateContent",
            gemini.base_url()
        );
        let r = client
            .post(&url)
            .header("x-goog-api-key", "sim")
            .body(body.to_string())
            .send()
            .await
            .expect("the simulator answers");
        assert_eq!(r.status(), 400, "{body}");
        let e = json_of(&r.text().await.expect("Google's error"));
        assert_eq!(e["error"]["status"], "INVALID_ARGUMENT", "{body}: {e}");
    }
}

#[tokio::test]
async fn a_surfaced_refusal_is_a_safety_stop_streamed_or_not() {
    let (gemini, _openai, s) = setup().await;
    gemini.always(Reply::Refuse(Refusal::FinishReason));
    let surface = ("x-understudy-refusal-policy", "surface");
    let a = s
        .post_with(
            "/v1beta/models/gem:generateContent",
            &[KEY, surface],
            hello(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-content-filtered"], "true");
    assert_eq!(json_of(&a.body)["candidates"][0]["finishReason"], "SAFETY");
    let a = s
        .post_with(
            "/v1beta/models/gem:streamGenerateContent?alt=sse",
            &[KEY, surface],
            hello(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let chunks = sse_data(&a.body);
    assert_eq!(chunks.len(), 1, "{}", a.body);
    assert_eq!(chunks[0]["candidates"][0]["finishReason"], "SAFETY");
}

#[tokio::test]
async fn a_stream_cut_past_the_commit_ends_with_an_error_object() {
    let (_gemini, openai, s) = setup().await;
    openai.push(Reply::Stream(
        StreamSpec::new(&["partial", " answer"]).ending(StreamEnd::Cut),
    ));
    let a = s
        .post_with(
            "/v1beta/models/oai:streamGenerateContent?alt=sse",
            &[KEY],
            hello(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let chunks = sse_data(&a.body);
    let last = chunks.last().expect("chunks");
    assert!(
        last["error"]["code"].is_u64(),
        "never a clean end: {}",
        a.body
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["candidates"][0]["finishReason"].is_null()),
        "{}",
        a.body
    );
}

#[tokio::test]
async fn a_softened_retry_edits_the_native_body_where_gemini_keeps_things() {
    let (gemini, _openai, s) = setup().await;
    gemini.push(Reply::Refuse(Refusal::FinishReason));
    gemini.push(Reply::text("a kind joke"));
    let body = json!({
        "systemInstruction": {"role": "user", "parts": [{"text": "Be a comedian."}]},
        "contents": [{"role": "user", "parts": [{"text": "roast me"}]}],
        "generationConfig": {"temperature": 0.9, "topK": 40}
    });
    let a = s
        .post_with(
            "/v1beta/models/gem:generateContent",
            &[KEY],
            body.to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "gemini");
    let sent = gemini.received();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].json(),
        body,
        "the first attempt is the body as sent"
    );
    let softened = sent[1].json();
    let parts = &softened["systemInstruction"]["parts"];
    assert_eq!(parts[0]["text"], "Be a comedian.");
    assert!(
        parts[1]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Keep it light")),
        "{softened}"
    );
    assert_eq!(softened["generationConfig"]["temperature"], json!(0.7));
    assert_eq!(softened["generationConfig"]["topK"], 40);
    assert_eq!(softened.get("system"), None, "never Anthropic's field");
    assert!(gemini.violations().is_empty(), "{:?}", gemini.violations());
}

#[tokio::test]
async fn what_only_gemini_carries_goes_only_to_gemini() {
    let (gemini, openai, s) = setup().await;
    gemini.always(Reply::text("sure"));
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "run it"}]}],
        "tools": [{"codeExecution": {}}]
    });
    // OpenAI cannot serve it; Gemini may not either, unless the operator
    // allows code execution.
    for route in ["oai", "gem"] {
        let a = s
            .post_with(
                &format!("/v1beta/models/{route}:generateContent"),
                &[KEY],
                body.to_string(),
            )
            .await;
        assert!(a.status >= 400, "{route}: {}", a.body);
        assert!(
            json_of(&a.body)["error"]["status"].is_string(),
            "{}",
            a.body
        );
    }
    assert_eq!(openai.request_count(), 0);
    assert_eq!(gemini.request_count(), 0);
}

#[tokio::test]
async fn count_tokens_is_counted_by_gemini_or_estimated() {
    let (gemini, _openai, s) = setup().await;
    let a = s
        .post_with("/v1beta/models/gem:countTokens", &[KEY], hello())
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(json_of(&a.body), json!({"totalTokens": 2}));
    assert_eq!(a.headers["x-understudy-provider"], "gemini");
    assert!(
        gemini.received()[0]
            .path
            .ends_with("/models/gemini-x:countTokens")
    );

    let a = s
        .post_with("/v1beta/models/oai:countTokens", &[KEY], hello())
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-estimate"], "true");
    assert!(json_of(&a.body)["totalTokens"].is_u64());
}
