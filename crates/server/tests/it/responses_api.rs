//! `/v1/responses` through a real HTTP client: the stream's events in the
//! documented order with increasing `sequence_number`s (text, tool calls,
//! and a committed stream that breaks: `response.failed`, never a clean
//! end); a Codex-shaped request (developer messages, a `namespace` of
//! tools flattened and reversed, a `custom` tool, a hosted `web_search`
//! left out and named in `x-understudy-omitted-tools`); errors in OpenAI's
//! shape; stored responses kept apart by client key; `store: false`.

use serde_json::{Value, json};
use understudy_testkit::{
    Refusal, Reply, SimProvider, SimToolCall, StreamEnd, StreamSpec, TestGateway,
};

use crate::common::TestServer;

const KEY_A: &str = "sk-understudy-a";
const KEY_B: &str = "sk-understudy-b";

struct Two {
    claude: SimProvider,
    openai: SimProvider,
    server: TestServer,
}

/// Anthropic (the primary) and OpenAI-compatible simulators, two client
/// keys.
async fn two() -> Two {
    let claude = SimProvider::anthropic().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("openai", &openai)
        .env("UNDERSTUDY_API_KEYS", &format!("{KEY_A},{KEY_B}"))
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

async fn call(
    method: reqwest::Method,
    url: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = understudy_testkit::http_client()
        .request(method, url)
        .bearer_auth(key);
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap())
}

async fn create(t: &Two, body: Value) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("{}/v1/responses", t.server.url);
    call(reqwest::Method::POST, &url, KEY_A, Some(body)).await
}

/// An SSE body's events: every `event:` name equals its data's `type`,
/// and the sequence numbers count up from 0.
fn events(body: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for block in body.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let (mut name, mut data) = (None, String::new());
        for line in block.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_owned());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push_str(d);
            }
        }
        if data.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(Some(v["type"].as_str().unwrap().to_owned()), name, "{v}");
        assert_eq!(v["sequence_number"], out.len(), "{body}");
        out.push(v);
    }
    out
}

fn types(evs: &[Value]) -> Vec<&str> {
    evs.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_text_follows_the_documented_sequence() {
    let t = two().await;
    t.claude.push(Reply::stream(&["Hello", " there"]));
    let body = json!({"model": "default", "input": "hi", "stream": true});
    let (status, headers, text) = create(&t, body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let evs = events(&text);
    assert_eq!(
        types(&evs),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(evs[0]["response"]["status"], "in_progress");
    assert_eq!(evs[6]["text"], "Hello there");
    let done = &evs[9]["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "Hello there");
    assert_eq!(done["output"][0]["status"], "completed");
    let id = done["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"));
    assert!(
        done["output"][0]["id"]
            .as_str()
            .unwrap()
            .starts_with("msg_")
    );
    assert!(done["usage"]["output_tokens"].is_u64(), "{done}");
    // Stored by default: readable back.
    let url = format!("{}/v1/responses/{id}", t.server.url);
    let (status, _, stored) = call(reqwest::Method::GET, &url, KEY_A, None).await;
    assert_eq!(status, 200, "{stored}");
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["output"][0]["content"][0]["text"], "Hello there");
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_tool_calls_follow_the_documented_sequence() {
    let t = two().await;
    t.claude.push(Reply::ToolCalls(vec![
        SimToolCall::new("get_weather", json!({"city": "Oslo"})),
        SimToolCall::new("get_weather", json!({"city": "Rome"})),
    ]));
    let tool = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let body = json!({"input": "weather?", "tools": [tool], "stream": true});
    let (status, _, text) = create(&t, body).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let names = types(&evs);
    let mut per_item: Vec<Vec<&str>> = Vec::new();
    for (e, n) in evs.iter().zip(&names) {
        if let Some(i) = e["output_index"].as_u64() {
            let i = i as usize;
            if per_item.len() <= i {
                per_item.resize(i + 1, Vec::new());
            }
            per_item[i].push(n);
        }
    }
    assert_eq!(per_item.len(), 2, "{names:?}");
    for item in &per_item {
        assert_eq!(item[0], "response.output_item.added");
        assert!(
            item[1..item.len() - 2]
                .iter()
                .all(|n| *n == "response.function_call_arguments.delta")
        );
        assert_eq!(
            item[item.len() - 2..],
            [
                "response.function_call_arguments.done",
                "response.output_item.done"
            ]
        );
    }
    let done = &evs.last().unwrap()["response"];
    assert_eq!(evs.last().unwrap()["type"], "response.completed");
    let calls = done["output"].as_array().unwrap();
    assert_eq!(calls[0]["type"], "function_call");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(calls[0]["name"], "get_weather");
    assert_eq!(calls[1]["arguments"], r#"{"city":"Rome"}"#);
    assert_ne!(calls[0]["call_id"], calls[1]["call_id"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_stream_that_breaks_ends_with_response_failed() {
    let t = two().await;
    t.claude.push(
        StreamSpec::new(&["Hello", " the"])
            .ending(StreamEnd::Cut)
            .reply(),
    );
    t.openai.always(Reply::text("never stitched"));
    let (status, _, text) = create(&t, json!({"input": "hi", "stream": true})).await;
    assert_eq!(status, 200);
    let evs = events(&text);
    let names = types(&evs);
    assert_eq!(names.last(), Some(&"response.failed"), "{names:?}");
    assert!(!names.contains(&"response.completed"));
    let failed = &evs.last().unwrap()["response"];
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_interrupted")
    );
    assert_eq!(failed["output"][0]["status"], "incomplete");
    assert!(!text.contains("never stitched"));
    assert_eq!(t.openai.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_request_is_translated_and_its_tools_mapped_back() {
    let t = two().await;
    t.claude.always(Reply::status(529));
    t.openai.push(Reply::ToolCalls(vec![
        SimToolCall::new("multi_agent_v1__spawn_agent", json!({"task": "x"})),
        SimToolCall::new(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** End Patch"}),
        ),
    ]));
    let body = json!({
        "model": "default",
        "stream": false,
        "input": [
            {"type": "message", "id": "msg_1", "role": "developer",
             "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "strict": false,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
             "tools": [{"type": "function", "name": "spawn_agent",
                        "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}]},
            {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
            {"type": "web_search", "external_web_access": false},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "reasoning": {"summary": "auto"},
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "abc",
        "client_metadata": {"x": "y"},
    });
    let (status, headers, text) = create(&t, body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-omitted-tools"], "web_search");
    let event = understudy_testkit::eventually("the event", async || {
        t.server.engine.recent().events().into_iter().next()
    })
    .await;
    assert_eq!(event.omitted_tools, ["web_search"]);
    assert_eq!(event.api, Some(understudy_types::Protocol::Responses));
    assert!(event.fell_back);
    assert_eq!(headers["x-understudy-provider"], "openai");
    let v: Value = serde_json::from_str(&text).unwrap();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out[0]["type"], "function_call", "{v}");
    assert_eq!(out[0]["name"], "spawn_agent");
    assert_eq!(out[0]["namespace"], "multi_agent_v1");
    assert_eq!(out[1]["type"], "custom_tool_call");
    assert_eq!(out[1]["input"], "*** Begin Patch\n*** End Patch");
    // What the OpenAI-compatible target got.
    let sent = t.openai.received()[0].json();
    assert_eq!(sent["messages"][0]["role"], "system", "{sent}");
    assert!(
        sent["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("You are Codex.")
    );
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch"]
    );
    assert!(
        !sent.to_string().contains("opaque"),
        "reasoning items are dropped"
    );
    // store: false keeps nothing.
    let url = format!(
        "{}/v1/responses/{}",
        t.server.url,
        v["id"].as_str().unwrap()
    );
    let (status, _, _) = call(reqwest::Method::GET, &url, KEY_A, None).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_come_in_openai_s_shape() {
    let t = two().await;
    let cases = [
        (
            json!({"model": "no-such-model", "input": "hi"}),
            404,
            Some("model"),
        ),
        (
            json!({"input": [{"type": "message", "role": "robot", "content": "x"}]}),
            400,
            Some("input[0].role"),
        ),
        (
            json!({"input": "hi", "tool_choice": {"type": "web_search"},
                "tools": [{"type": "web_search"}]}),
            400,
            Some("tool_choice"),
        ),
        // OpenAI's answer to an unknown `previous_response_id`: a 400
        // with the code clients recover on (checked below).
        (
            json!({"input": "hi", "previous_response_id": "resp_nope"}),
            400,
            Some("previous_response_id"),
        ),
        (
            json!({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}),
            400,
            Some("text.format"),
        ),
    ];
    for (body, want, param) in cases {
        let (status, _, text) = create(&t, body.clone()).await;
        assert_eq!(status, want, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let e = &v["error"];
        assert!(
            e["message"].is_string()
                && e["type"].is_string()
                && e.get("param").is_some()
                && e.get("code").is_some(),
            "{v}"
        );
        if let Some(param) = param {
            assert_eq!(e["param"], param, "{v}");
        }
        if param == Some("previous_response_id") {
            assert_eq!(e["code"], "previous_response_not_found", "{v}");
            assert_eq!(e["type"], "invalid_request_error", "{v}");
            assert_eq!(
                e["message"], "Previous response with id 'resp_nope' not found.",
                "{v}"
            );
        }
    }
    for path in [
        "/v1/responses/resp_nope",
        "/v1/responses/resp_nope/input_items",
        "/v1/responses/a/b/c",
        // An endpoint the gateway does not have, probed by an OpenAI client.
        "/v1/embeddings",
    ] {
        let url = format!("{}{path}", t.server.url);
        let (status, _, text) = call(reqwest::Method::GET, &url, KEY_A, None).await;
        assert_eq!(status, 404, "{path}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(v["error"].get("param").is_some(), "{v}");
    }
    assert_eq!(t.claude.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_key_sees_only_its_own_responses() {
    let t = two().await;
    t.claude.always(Reply::text("mine"));
    let (status, _, text) = create(&t, json!({"input": "hi"})).await;
    assert_eq!(status, 200, "{text}");
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("{}/v1/responses/{id}", t.server.url);
    let (status, _, _) = call(reqwest::Method::GET, &url, KEY_B, None).await;
    assert_eq!(status, 404);
    let cont = json!({"input": "more", "previous_response_id": id});
    let (status, _, text) = call(
        reqwest::Method::POST,
        &format!("{}/v1/responses", t.server.url),
        KEY_B,
        Some(cont),
    )
    .await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "previous_response_not_found", "{v}");
    let (status, _, _) = call(reqwest::Method::DELETE, &url, KEY_B, None).await;
    assert_eq!(status, 404);
    let (status, _, items) = call(
        reqwest::Method::GET,
        &format!("{url}/input_items"),
        KEY_A,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let items: Value = serde_json::from_str(&items).unwrap();
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "hi", "{items}");
    let (status, _, text) = call(reqwest::Method::DELETE, &url, KEY_A, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["deleted"],
        true
    );
    let (status, _, _) = call(reqwest::Method::GET, &url, KEY_A, None).await;
    assert_eq!(status, 404);
}

/// The owner of a stored response is the key the gateway accepted, however
/// the client sent it: here a valid `x-api-key` beside a bearer token that
/// is no client key (the bearer is not what owns the response).
#[tokio::test(flavor = "multi_thread")]
async fn a_response_belongs_to_the_key_that_was_accepted() {
    let t = two().await;
    t.claude.always(Reply::text("mine"));
    let resp = understudy_testkit::http_client()
        .post(format!("{}/v1/responses", t.server.url))
        .header("x-api-key", KEY_A)
        .bearer_auth("not-a-client-key")
        .header("content-type", "application/json")
        .body(json!({"input": "hi"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    let id = body["id"].as_str().unwrap().to_owned();
    let url = format!("{}/v1/responses/{id}", t.server.url);
    let (status, _, text) = call(reqwest::Method::GET, &url, KEY_A, None).await;
    assert_eq!(status, 200, "{text}");
    let (status, _, _) = call(reqwest::Method::GET, &url, KEY_B, None).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_s_reasoning_streams_as_a_reasoning_item() {
    let t = two().await;
    t.claude
        .push(Reply::stream(&["The answer."]).thinking_first("Let me think."));
    let (status, _, text) = create(&t, json!({"input": "hi", "stream": true})).await;
    assert_eq!(status, 200, "{text}");
    let evs = events(&text);
    let done = &evs.last().unwrap()["response"];
    assert_eq!(evs.last().unwrap()["type"], "response.completed", "{text}");
    let output = done["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "reasoning", "{done}");
    assert!(output[0]["id"].as_str().unwrap().starts_with("rs_"));
    assert_eq!(output[0]["content"][0]["text"], "Let me think.");
    assert_eq!(output[1]["content"][0]["text"], "The answer.");
    assert!(types(&evs).contains(&"response.reasoning_text.delta"));
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_end_incomplete_with_content_filter() {
    let t = two().await;
    let surface = |stream: bool| {
        let body = json!({"input": "hi", "stream": stream});
        understudy_testkit::http_client()
            .post(format!("{}/v1/responses", t.server.url))
            .bearer_auth(KEY_A)
            .header("content-type", "application/json")
            .header("x-understudy-refusal-policy", "surface")
            .body(body.to_string())
            .send()
    };
    // Surfaced by policy, not streamed: an incomplete response whose
    // message is the refusal.
    t.claude
        .push(Reply::Refuse(Refusal::Message("I cannot help.".into())));
    let text = surface(false).await.unwrap().text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(v["incomplete_details"]["reason"], "content_filter");
    assert_eq!(v["output"][0]["content"][0]["type"], "refusal");
    // Streamed: the same, as events.
    t.claude
        .push(Reply::Refuse(Refusal::Message("I cannot help.".into())));
    let text = surface(true).await.unwrap().text().await.unwrap();
    let evs = events(&text);
    assert_eq!(evs.last().unwrap()["type"], "response.incomplete", "{text}");
    assert!(types(&evs).contains(&"response.refusal.delta"), "{text}");
    // A safety stop after the commit: incomplete, not failed.
    t.claude.push(
        StreamSpec::new(&["Once upon"])
            .ending(StreamEnd::Refusal)
            .reply(),
    );
    let (status, _, text) = create(&t, json!({"input": "hi", "stream": true})).await;
    assert_eq!(status, 200);
    let evs = events(&text);
    let last = evs.last().unwrap();
    assert_eq!(last["type"], "response.incomplete", "{text}");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "content_filter"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn input_items_are_listed_in_pages() {
    let t = two().await;
    t.claude.always(Reply::text("ok"));
    let input: Vec<Value> = (0..5)
        .map(|i| json!({"role": "user", "content": format!("m{i}")}))
        .collect();
    let (_, _, text) = create(&t, json!({"input": input})).await;
    let id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let list = async |query: &str| {
        let url = format!("{}/v1/responses/{id}/input_items?{query}", t.server.url);
        let (status, _, text) = call(reqwest::Method::GET, &url, KEY_A, None).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let texts: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        (texts, v)
    };
    let (newest, v) = list("limit=2").await;
    assert_eq!(newest, ["m4", "m3"]);
    assert_eq!(v["has_more"], true);
    let after = v["last_id"].as_str().unwrap().to_owned();
    let (next, v) = list(&format!("limit=2&after={after}")).await;
    assert_eq!(next, ["m2", "m1"]);
    assert_eq!(v["has_more"], true);
    let (all, v) = list("order=asc").await;
    assert_eq!(all, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(v["has_more"], false);
    let url = format!("{}/v1/responses/{id}/input_items?limit=0", t.server.url);
    let (status, _, _) = call(reqwest::Method::GET, &url, KEY_A, None).await;
    assert_eq!(status, 400);
}
