//! `/v1/responses` to targets that speak the Responses API themselves
//! (`responses_api = true`), over real HTTP against the strict Responses
//! simulator: the client's body goes byte for byte but for `model`; the
//! answer and the events come back as the target sent them (reasoning ids
//! tagged with the target); a reasoning item with `encrypted_content` goes
//! back in the next turn only to the target that made it — never to
//! another Responses target nor to a target of another protocol; the
//! failover from a native target to a translated one (Anthropic); and a
//! Responses target serving a translated client (Chat Completions).

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, StreamSpec, TestGateway};

use crate::common::{self, TestServer};

/// The server over `sims` (name, simulator), in that order.
async fn gateway(sims: &[(&str, &SimProvider)]) -> TestServer {
    let mut builder = TestGateway::builder();
    for (name, sim) in sims {
        builder = builder.provider(name, sim);
    }
    let gw = builder.build().await.unwrap();
    TestServer::start(gw.engine).await
}

async fn post(
    gw: &TestServer,
    path: &str,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let a = gw.post(path, body).await;
    (a.status, a.headers, a.body)
}

/// The SSE body's `(event, data)` pairs.
fn sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (!data.is_empty()).then(|| (name, serde_json::from_str(&data).unwrap()))
        })
        .collect()
}

/// `rs_us<8 hex>_rest` → `Some(rs_rest)`.
fn untagged(id: &str) -> Option<String> {
    let marked = id.strip_prefix("rs_us")?;
    let (tag, rest) = marked.split_at_checked(8)?;
    let rest = rest.strip_prefix('_')?;
    tag.bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then(|| format!("rs_{rest}"))
}

fn assert_clean(sims: &[&SimProvider]) {
    for sim in sims {
        assert!(sim.violations().is_empty(), "{:?}", sim.violations());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_native_target_gets_the_body_as_sent_and_answers_as_it_sent() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    let answer = r#"{"id":"resp_abc","object":"response","status":"completed","model":"gpt-sim","output":[{"id":"rs_r1","type":"reasoning","summary":[]},{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there","annotations":[]}]}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5},"custom_field":{"kept":true}}"#;
    oai.push(Reply::Garbage(answer.into()));
    let body = r#"{ "model":"default" , "input":[{"role":"user","content":"hi"}], "metadata": {"a": "b"}, "reasoning": {"effort": "low", "summary": "auto"}, "service_tier": "flex" }"#;
    let (status, headers, text) = post(&gw, "/v1/responses", body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "oai");
    let sent = std::str::from_utf8(&oai.received()[0].body)
        .unwrap()
        .to_owned();
    assert_eq!(
        sent,
        body.replace(r#""model":"default""#, r#""model":"oai-model""#)
    );
    // As sent, but for the reasoning item's id, tagged with its target.
    let got: Value = serde_json::from_str(&text).unwrap();
    let tagged = got["output"][0]["id"].as_str().unwrap();
    assert_eq!(untagged(tagged).as_deref(), Some("rs_r1"), "{tagged}");
    assert_eq!(text.replace(tagged, "rs_r1"), answer);
    assert_clean(&[&oai, &claude]);
}

#[tokio::test(flavor = "multi_thread")]
async fn native_events_come_back_as_the_target_sent_them() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    oai.push(Reply::Thinking {
        thinking: "Let me see".into(),
        then: Box::new(Reply::Stream(StreamSpec::new(&["Hello", " world"]))),
    });
    let body = json!({"model": "default", "input": "hi", "stream": true,
        "include": ["reasoning.encrypted_content"], "store": false})
    .to_string();
    let (status, headers, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "oai");
    let events = sse(&text);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"));
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert!(
        kinds.contains(&"response.reasoning_summary_text.delta"),
        "{kinds:?}"
    );
    for (i, (kind, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], kind.as_str());
        assert_eq!(data["sequence_number"], i, "the target's own numbers");
    }
    let done = &events.last().unwrap().1["response"];
    // The target's response, as it sent it (its id, not the gateway's).
    assert_eq!(done["id"], events[0].1["response"]["id"]);
    assert!(done["id"].as_str().unwrap().starts_with("resp_"), "{done}");
    let reasoning = &done["output"][0];
    assert!(
        untagged(reasoning["id"].as_str().unwrap()).is_some(),
        "{reasoning}"
    );
    assert_eq!(done["output"][1]["content"][0]["text"], "Hello world");
    assert_clean(&[&oai, &claude]);
}

/// Turn 1 from `first`, with its sealed reasoning item; returns the
/// output items.
async fn turn_one(gw: &TestServer, first: &SimProvider) -> Vec<Value> {
    first.push(Reply::Thinking {
        thinking: "Think".into(),
        then: Box::new(Reply::text("Four.")),
    });
    let body = json!({"model": "default", "input": "2+2?", "store": false,
        "include": ["reasoning.encrypted_content"]});
    let (status, _, text) = post(gw, "/v1/responses", &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    let got: Value = serde_json::from_str(&text).unwrap();
    let output = got["output"].as_array().unwrap().clone();
    assert_eq!(output[0]["type"], "reasoning");
    assert!(output[0]["encrypted_content"].is_string(), "{got}");
    output
}

fn turn_two(output: &[Value]) -> String {
    let mut input = vec![json!({"role": "user", "content": "2+2?"})];
    input.extend(output.iter().cloned());
    input.push(json!({"role": "user", "content": "and 3+3?"}));
    json!({"model": "default", "input": input, "store": false,
        "include": ["reasoning.encrypted_content"]})
    .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sealed_reasoning_item_goes_back_only_to_the_target_that_made_it() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let other = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("other", &other), ("claude", &claude)]).await;
    let output = turn_one(&gw, &oai).await;
    let tagged = output[0]["id"].as_str().unwrap();

    // Turn 2 on the same target: the item goes back, its id as it made it.
    oai.push(Reply::text("Six."));
    let (status, _, text) = post(&gw, "/v1/responses", &turn_two(&output)).await;
    assert_eq!(status, 200, "{text}");
    let sent = oai.received()[1].json();
    let items = sent["input"].as_array().unwrap();
    let reasoning: Vec<&Value> = items.iter().filter(|i| i["type"] == "reasoning").collect();
    assert_eq!(reasoning.len(), 1, "{sent}");
    assert_eq!(reasoning[0]["id"].as_str(), untagged(tagged).as_deref());
    assert_eq!(
        reasoning[0]["encrypted_content"],
        output[0]["encrypted_content"]
    );

    // The same turn when that target fails: another Responses target and
    // an Anthropic one get the conversation without the item.
    oai.push(Reply::status(500));
    other.push(Reply::status(500));
    claude.push(Reply::text("Six."));
    let (status, headers, text) = post(&gw, "/v1/responses", &turn_two(&output)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "claude");
    let sent = other.received()[0].json();
    assert!(
        sent["input"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["type"] != "reasoning"),
        "{sent}"
    );
    assert_eq!(sent["input"].as_array().unwrap().len(), 3, "{sent}");
    let sent = std::str::from_utf8(&claude.received()[0].body)
        .unwrap()
        .to_owned();
    let sealed = output[0]["encrypted_content"].as_str().unwrap();
    assert!(!sent.contains(sealed) && !sent.contains("rs_"), "{sent}");
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["output"][0]["content"][0]["text"], "Six.");
    assert_clean(&[&oai, &other, &claude]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_native_primary_that_fails_falls_back_to_a_translated_stream() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    oai.push(Reply::status(500));
    claude.push(Reply::stream(&["From", " Claude"]));
    let body = json!({"model": "default", "input": "hi", "stream": true}).to_string();
    let (status, headers, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "claude");
    assert_eq!(headers["x-understudy-fell-back"], "true");
    let events = sse(&text);
    let done = &events.last().unwrap().1;
    assert_eq!(done["type"], "response.completed", "{text}");
    assert!(
        done["response"]["id"]
            .as_str()
            .unwrap()
            .starts_with("resp_")
    );
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "From Claude"
    );
    assert_eq!(oai.received().len(), 1);
    assert_clean(&[&oai, &claude]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_responses_target_serves_translated_clients() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let gw = gateway(&[("oai", &oai)]).await;
    oai.push(Reply::text("Plain answer"));
    let body = json!({"model": "default", "max_tokens": 100, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"}
    ]})
    .to_string();
    let (status, _, text) = post(&gw, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{text}");
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["choices"][0]["message"]["content"], "Plain answer");
    let sent = oai.received()[0].clone();
    assert_eq!(sent.path, "/v1/responses");
    let sent = sent.json();
    assert_eq!(sent["instructions"], "Be brief.");
    assert_eq!(sent["input"][0]["content"][0]["text"], "hi");
    assert_eq!(sent["max_output_tokens"], 100);

    // Streamed, with a tool call.
    oai.push(Reply::ToolCalls(vec![
        understudy_testkit::SimToolCall::new("get_weather", json!({"city": "Oslo"})),
    ]));
    let body = json!({"model": "default", "stream": true,
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})
    .to_string();
    let (status, _, text) = post(&gw, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("get_weather") && text.contains("tool_calls"),
        "{text}"
    );
    assert_clean(&[&oai]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_refuses_what_openai_refuses() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let post_sim = |body: Value| {
        let url = format!("{}/responses", oai.base_url());
        async move {
            let resp = understudy_testkit::http_client()
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let cases = [
        (
            json!({"input": "hi"}),
            "Missing required parameter: 'model'.",
        ),
        (
            json!({"model": "m", "input": [{"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "e"}]}),
            "Item with id 'rs_x' not found",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}),
            "No tool call found for function call output with call_id c1.",
        ),
        (
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_gw"}),
            "Previous response with id 'resp_gw' not found.",
        ),
        (
            json!({"model": "m", "input": "hi", "system": "x"}),
            "Unknown parameter: 'system'.",
        ),
    ];
    for (body, message) in cases {
        let (status, text) = post_sim(body.clone()).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(message), "{body}: {text}");
    }
    assert_eq!(oai.violations().len(), 5);
}

/// The openai SDK's tool loop with `store: false` and sealed reasoning:
/// turn 1 streamed and turn 2 by the native primary (its reasoning item
/// goes back to it), turn 3 after the primary fails, by Anthropic (which
/// gets the conversation without reasoning).
#[tokio::test(flavor = "multi_thread")]
async fn the_openai_sdk_loops_through_a_native_target_and_falls_back() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    let call =
        |city: &str| understudy_testkit::SimToolCall::new("get_weather", json!({"city": city}));
    for city in ["Oslo", "Paris"] {
        oai.push(Reply::Thinking {
            thinking: format!("I should look up {city}"),
            then: Box::new(Reply::ToolCalls(vec![call(city)])),
        });
    }
    oai.push(Reply::status(500));
    claude.push(Reply::text("21 degrees in both"));
    let v = common::run_sdk("openai", "openai_responses_native.py", &gw.url, "loop").await;
    let turns = v["turns"].as_array().unwrap();
    assert_eq!(
        turns[0]["output_types"],
        json!(["reasoning", "function_call"]),
        "{v}"
    );
    let types = turns[0]["types"].as_array().unwrap();
    assert!(
        types.contains(&json!("response.reasoning_summary_text.delta")),
        "{v}"
    );
    assert_eq!(types.last().unwrap(), "response.completed");
    assert_eq!(turns[1]["provider"], "oai");
    assert_eq!(turns[2]["provider"], "claude");
    assert_eq!(turns[2]["text"], "21 degrees in both");
    // Turn 2's reasoning item went back to its own target, as it made it.
    let second = oai.received()[1].json();
    let reasoning: Vec<&Value> = second["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .collect();
    assert_eq!(reasoning.len(), 1, "{second}");
    let tagged = turns[0]["reasoning_ids"][0].as_str().unwrap();
    assert_eq!(reasoning[0]["id"].as_str(), untagged(tagged).as_deref());
    // The third turn: both reasoning items go to the native target, none
    // to Anthropic.
    let third = oai.received()[2].json();
    let n = third["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning");
    assert_eq!(n.count(), 2, "{third}");
    let sent = std::str::from_utf8(&claude.received()[0].body)
        .unwrap()
        .to_owned();
    assert!(
        !sent.contains("rs_") && !sent.contains("I should look up"),
        "{sent}"
    );
    assert_clean(&[&oai, &claude]);
}

/// `previous_response_id` with a native target: the target gets the stored
/// conversation as its input (its own reasoning item back under the id it
/// made), never the gateway's id; a later turn the target cannot serve
/// goes translated to Anthropic.
#[tokio::test(flavor = "multi_thread")]
async fn previous_response_id_reaches_a_native_target_as_the_conversation() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    oai.push(Reply::Thinking {
        thinking: "Hmm".into(),
        then: Box::new(Reply::text("Noted: Oslo.")),
    });
    let body = json!({"model": "default", "input": "The city is Oslo."}).to_string();
    let (status, _, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    let first: Value = serde_json::from_str(&text).unwrap();
    let first_id = first["id"].as_str().unwrap();

    oai.push(Reply::text("Sunny in Oslo."));
    let body = json!({"model": "default", "input": "Weather there?",
        "previous_response_id": first_id, "metadata": {"turn": "2"}})
    .to_string();
    let (status, headers, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "oai");
    let sent = oai.received()[1].json();
    assert_eq!(sent.get("previous_response_id"), None, "{sent}");
    assert_eq!(sent["metadata"]["turn"], "2");
    assert_eq!(sent["model"], "oai-model");
    let input = sent["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["message", "reasoning", "message", "message"],
        "{sent}"
    );
    let tagged = first["output"][0]["id"].as_str().unwrap();
    assert_eq!(input[1]["id"].as_str(), untagged(tagged).as_deref());
    let second: Value = serde_json::from_str(&text).unwrap();

    oai.push(Reply::status(500));
    claude.push(Reply::text("Still sunny."));
    let body = json!({"model": "default", "input": "Tomorrow?",
        "previous_response_id": second["id"]})
    .to_string();
    let (status, headers, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "claude");
    let sent = claude.received()[0].json();
    assert_eq!(sent["messages"].as_array().unwrap().len(), 5, "{sent}");
    assert_clean(&[&oai, &claude]);
}

/// A native stream that fails before any output (its `error` event after
/// `response.created`) is not committed: Anthropic serves, translated.
#[tokio::test(flavor = "multi_thread")]
async fn a_native_stream_that_fails_before_output_falls_back() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    oai.push(Reply::Stream(
        StreamSpec::new(&[]).ending(understudy_testkit::StreamEnd::ErrorEvent),
    ));
    claude.push(Reply::stream(&["Saved", " by Claude"]));
    let body = json!({"model": "default", "input": "hi", "stream": true}).to_string();
    let (status, _, text) = post(&gw, "/v1/responses", &body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "response.created").count(),
        1,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"error"), "{kinds:?}");
    let done = &events.last().unwrap().1;
    assert_eq!(done["type"], "response.completed", "{text}");
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "Saved by Claude"
    );
    assert_clean(&[&oai, &claude]);
}

/// A committed native stream that is cut ends with the gateway's
/// `response.failed`, numbered after the target's last event; one that
/// ends with the target's own `error` event ends there, as sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_committed_native_stream_that_breaks_ends_failed() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    let body = json!({"model": "default", "input": "hi", "stream": true}).to_string();
    for (end, last) in [
        (understudy_testkit::StreamEnd::Cut, "response.failed"),
        (understudy_testkit::StreamEnd::ErrorEvent, "error"),
    ] {
        oai.push(Reply::Stream(
            StreamSpec::new(&["Hello", " there"]).ending(end),
        ));
        let (status, _, text) = post(&gw, "/v1/responses", &body).await;
        assert_eq!(status, 200, "{text}");
        let events = sse(&text);
        let (kind, data) = events.last().unwrap();
        assert_eq!(kind, last, "{text}");
        assert_eq!(data["sequence_number"], events.len() - 1, "{text}");
        assert_eq!(
            events.iter().filter(|(k, _)| k == last).count(),
            1,
            "{text}"
        );
        assert!(text.contains("Hello"), "{text}");
    }
    assert!(
        claude.received().is_empty(),
        "never stitched to another target"
    );
    assert_clean(&[&oai, &claude]);
}

/// A Codex-shaped body (`store: false`, sealed reasoning asked for, a
/// `namespace`, a hosted `web_search`) goes natively: the hosted tool is
/// left out for a target whose `passthrough` does not allow it, kept for
/// one that does; everything else byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn hosted_tools_reach_a_native_target_only_where_the_operator_allows() {
    let body = r#"{"model":"default","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"Be a coder."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{}},"strict":false},{"type":"web_search","external_web_access":false}],"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"k"}"#;
    for (allow, kept) in [(false, false), (true, true)] {
        let oai = SimProvider::openai_responses().await.unwrap();
        let mut builder = TestGateway::builder().provider("oai", &oai);
        if allow {
            builder = builder.provider_option("oai", "passthrough = [\"web_search\"]");
        }
        let gw = builder.build().await.unwrap();
        let gw = TestServer::start(gw.engine).await;
        oai.push(Reply::stream(&["Done."]));
        let (status, _, text) = post(&gw, "/v1/responses", body).await;
        assert_eq!(status, 200, "{text}");
        let sent = std::str::from_utf8(&oai.received()[0].body)
            .unwrap()
            .to_owned();
        let web = r#",{"type":"web_search","external_web_access":false}"#;
        let mut want = body.replace(r#""model":"default""#, r#""model":"oai-model""#);
        if !kept {
            want = want.replace(web, "");
        }
        assert_eq!(sent, want, "allowed: {allow}");
        assert!(text.contains("response.completed"), "{text}");
        assert_clean(&[&oai]);
    }
}

/// A turn another protocol served (Anthropic's tool call, rendered by the
/// gateway) goes back to the native target in the next turn as the client
/// holds it, and the target accepts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_translated_turn_goes_back_to_the_native_target() {
    let oai = SimProvider::openai_responses().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = gateway(&[("oai", &oai), ("claude", &claude)]).await;
    let tools = json!([{"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    oai.push(Reply::status(500));
    claude.push(Reply::ToolCalls(vec![
        understudy_testkit::SimToolCall::new("get_weather", json!({"city": "Oslo"})),
    ]));
    let mut input = vec![json!({"role": "user", "content": "Weather in Oslo?"})];
    let body = json!({"model": "default", "input": input, "tools": tools, "store": false});
    let (status, headers, text) = post(&gw, "/v1/responses", &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "claude");
    let first: Value = serde_json::from_str(&text).unwrap();
    let call = first["output"][0].clone();
    assert_eq!(call["type"], "function_call", "{first}");
    input.push(call.clone());
    input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": "21"}));
    oai.push(Reply::text("21 degrees."));
    let body = json!({"model": "default", "input": input, "tools": tools, "store": false});
    let (status, headers, text) = post(&gw, "/v1/responses", &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-understudy-provider"], "oai");
    let sent = oai.received()[1].json();
    assert_eq!(sent["input"][1], call, "as the client holds it");
    assert_clean(&[&oai, &claude]);
}
