//! The simulators' prompt caches over real HTTP, each API's own wire
//! shape and usage names: Anthropic's breakpoints (a miss writes, the same
//! prefix then reads, a prefix below the model's minimum is not cached,
//! entries expire after their TTL, two keys never share, `1h` and `5m`
//! writes apart, the 400s for bad markers) and the same through Bedrock
//! (InvokeModel and Converse's `cachePoint`) and Vertex, each a cold cache
//! of its own; OpenAI's automatic prefix caching (Chat Completions,
//! Responses, Azure) from 1 024 tokens in 128-token steps, keyed by
//! `prompt_cache_key`; Gemini's implicit cache. And the standing faults:
//! every Nth call failing, a seeded share failing, a slow first token.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use understudy_testkit::{
    AzureSim, BedrockSim, CacheTotals, Protocol, Reply, SimProvider, VertexSim, eventually,
};

/// `n` words, distinct per `tag`.
fn words(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Posts `body` to `url` with `headers`; the status and the JSON answer
/// (a stream's `message_start` message for an SSE answer).
async fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = understudy_testkit::http_client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    if let Some(start) = text.lines().find_map(|l| l.strip_prefix("data: ")) {
        let v: Value = serde_json::from_str(start).unwrap();
        return (status, v);
    }
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A Claude request: a system prompt of `system` words (a breakpoint on
/// it), then `turns` user/assistant messages, a breakpoint on the last.
fn claude(model: &str, system: usize, turns: &[&str]) -> Value {
    let messages: Vec<Value> = turns
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": [{"type": "text", "text": text}]})
        })
        .collect();
    let mut body = json!({
        "model": model, "max_tokens": 100,
        "system": [{"type": "text", "text": words("sys", system), "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    });
    let last = body["messages"].as_array().unwrap().len() - 1;
    body["messages"][last]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    body
}

/// Anthropic's usage: (input, read, written, 5m, 1h).
fn anthropic_usage(u: &Value) -> (u64, u64, u64, u64, u64) {
    let n = |v: &Value| v.as_u64().unwrap();
    (
        n(&u["input_tokens"]),
        n(&u["cache_read_input_tokens"]),
        n(&u["cache_creation_input_tokens"]),
        n(&u["cache_creation"]["ephemeral_5m_input_tokens"]),
        n(&u["cache_creation"]["ephemeral_1h_input_tokens"]),
    )
}

async fn messages(sim: &SimProvider, body: &Value, key: &str) -> Value {
    let url = format!("{}/v1/messages", sim.base_url());
    let (status, answer) = post(&url, body, &[("x-api-key", key)]).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn anthropic_writes_then_reads_a_prefix_per_key() {
    let sim = SimProvider::anthropic().await.unwrap();
    let first = claude("claude-sonnet-4-5", 2000, &["hello there"]);
    // A miss writes the whole prefix (2 000 + 2 words) at the 5m rate.
    let a = messages(&sim, &first, "sk-a").await;
    assert_eq!(anthropic_usage(&a["usage"]), (0, 0, 2002, 2002, 0), "{a}");
    // The next turn reads it back and writes only what is new.
    let second = claude(
        "claude-sonnet-4-5",
        2000,
        &["hello there", "hi", "and three more"],
    );
    let b = messages(&sim, &second, "sk-a").await;
    assert_eq!(anthropic_usage(&b["usage"]), (0, 2002, 4, 4, 0), "{b}");
    // Another key shares nothing.
    let c = messages(&sim, &second, "sk-b").await;
    assert_eq!(anthropic_usage(&c["usage"]), (0, 0, 2006, 2006, 0), "{c}");
    // A different system prompt misses; a message past the last
    // breakpoint is uncached.
    let mut tail = claude("claude-sonnet-4-5", 2000, &["hello there"]);
    tail["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "ok"}),
        json!({"role": "user", "content": "one two"}),
    ]);
    let d = messages(&sim, &tail, "sk-a").await;
    assert_eq!(anthropic_usage(&d["usage"]), (3, 2002, 0, 0, 0), "{d}");
    assert_eq!(
        sim.prompt_cache_totals(),
        CacheTotals {
            requests: 4,
            read: 4004,
            written: 4012,
            uncached: 3
        }
    );
    // Streamed: message_start carries the same counts.
    let mut streamed = second.clone();
    streamed["stream"] = json!(true);
    let s = messages(&sim, &streamed, "sk-a").await;
    assert_eq!(s["type"], "message_start", "{s}");
    assert_eq!(
        anthropic_usage(&s["message"]["usage"]),
        (0, 2006, 0, 0, 0),
        "{s}"
    );
    assert_eq!(sim.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_prefix_below_the_minimum_is_not_cached() {
    let sim = SimProvider::anthropic().await.unwrap();
    // Haiku 4.5 caches from 4 096 tokens; Sonnet 4.5 from 1 024.
    for _ in 0..2 {
        let a = messages(&sim, &claude("claude-haiku-4-5", 3000, &["hi"]), "sk").await;
        assert_eq!(anthropic_usage(&a["usage"]), (3001, 0, 0, 0, 0), "{a}");
    }
    // The system breakpoint (1 000) is short, the message's (1 025) not.
    let b = messages(
        &sim,
        &claude("claude-sonnet-4-5", 1000, &[&words("u", 25)]),
        "sk",
    )
    .await;
    assert_eq!(anthropic_usage(&b["usage"]), (0, 0, 1025, 1025, 0), "{b}");
    assert_eq!(sim.prompt_cache_entries(), 1);
}

#[tokio::test]
async fn entries_expire_after_their_ttl_and_a_hit_refreshes_them() {
    let sim = SimProvider::anthropic().await.unwrap();
    sim.prompt_cache_ttls(Duration::from_millis(300), Duration::from_secs(3600));
    let body = claude("claude-sonnet-4-5", 1500, &["hi"]);
    messages(&sim, &body, "sk").await;
    let hit = messages(&sim, &body, "sk").await;
    assert_eq!(anthropic_usage(&hit["usage"]).1, 1501, "{hit}");
    eventually("the entries to expire", async || {
        sim.prompt_cache_entries() == 0
    })
    .await;
    let miss = messages(&sim, &body, "sk").await;
    assert_eq!(
        anthropic_usage(&miss["usage"]),
        (0, 0, 1501, 1501, 0),
        "{miss}"
    );
    // Off: nothing read or written.
    sim.without_prompt_cache();
    let off = messages(&sim, &body, "sk").await;
    assert_eq!(anthropic_usage(&off["usage"]), (1501, 0, 0, 0, 0), "{off}");
    sim.clear_prompt_cache();
    assert_eq!(sim.prompt_cache_totals(), CacheTotals::default());
}

#[tokio::test]
async fn one_hour_and_five_minute_writes_are_counted_apart() {
    let sim = SimProvider::anthropic().await.unwrap();
    let mut body = claude("claude-sonnet-4-5", 1100, &[&words("q", 50)]);
    body["system"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    let a = messages(&sim, &body, "sk").await;
    assert_eq!(anthropic_usage(&a["usage"]), (0, 0, 1150, 50, 1100), "{a}");
    // Automatic caching: the top-level marker caches up to the last block.
    let mut auto = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
        "cache_control": {"type": "ephemeral"},
        "messages": [{"role": "user", "content": words("a", 1200)}]});
    let b = messages(&sim, &auto, "sk").await;
    assert_eq!(anthropic_usage(&b["usage"]), (0, 0, 1200, 1200, 0), "{b}");
    auto["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "ok"}),
        json!({"role": "user", "content": "more"}),
    ]);
    let c = messages(&sim, &auto, "sk").await;
    assert_eq!(anthropic_usage(&c["usage"]), (0, 1200, 2, 2, 0), "{c}");
}

#[tokio::test]
async fn bad_cache_markers_get_anthropics_400s() {
    let sim = SimProvider::anthropic().await.unwrap();
    let marked = |ttl: &str| json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": ttl}});
    let cases = [
        (
            json!([
                marked("5m"),
                marked("5m"),
                marked("5m"),
                marked("5m"),
                marked("5m")
            ]),
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            json!([marked("5m"), marked("1h")]),
            "messages.0.content.1.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`.",
        ),
        (
            json!([marked("10m")]),
            "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'",
        ),
    ];
    let url = format!("{}/v1/messages", sim.base_url());
    for (content, message) in cases {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": [{"role": "user", "content": content}]});
        let (status, answer) = post(&url, &body, &[("x-api-key", "sk")]).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["message"], message);
    }
    assert_eq!(sim.violations().len(), 3);
    // 1h before 5m is fine.
    let fine = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
        "messages": [{"role": "user", "content": [marked("1h"), marked("5m")]}]});
    messages(&sim, &fine, "sk").await;
}

#[tokio::test]
async fn bedrock_and_vertex_keep_caches_of_their_own() {
    let claude_sim = SimProvider::anthropic().await.unwrap();
    let account = BedrockSim::with_api_key("us-east-1", "bedrock-key");
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    let project = VertexSim::new("proj", "us-east5");
    project.allow_token("vertex-token");
    let vertex = SimProvider::vertex(Protocol::Messages, &project)
        .await
        .unwrap();
    let body = claude("claude-sonnet-4-5", 1500, &["hi"]);
    messages(&claude_sim, &body, "sk").await;
    // InvokeModel: the same body, Bedrock's version, the model in the path.
    let mut invoke = body.clone();
    let model = invoke.as_object_mut().unwrap().remove("model").unwrap();
    invoke["anthropic_version"] = json!("bedrock-2023-05-31");
    let url = format!(
        "{}/model/{}/invoke",
        bedrock.base_url(),
        model.as_str().unwrap()
    );
    let auth = [("authorization", "Bearer bedrock-key")];
    for expected in [(0, 0, 1501, 1501, 0), (0, 1501, 0, 0, 0)] {
        let (status, a) = post(&url, &invoke, &auth).await;
        assert_eq!(status, 200, "{a}");
        assert_eq!(
            anthropic_usage(&a["usage"]),
            expected,
            "a cold cache first: {a}"
        );
    }
    // Converse: cachePoint blocks, Converse's usage names.
    let converse = json!({
        "system": [{"text": words("sys", 1500)}, {"cachePoint": {"type": "default", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"text": "hello"}, {"cachePoint": {"type": "default", "ttl": "1h"}}]}],
    });
    let url = format!(
        "{}/model/{}/converse",
        bedrock.base_url(),
        model.as_str().unwrap()
    );
    let (status, c) = post(&url, &converse, &auth).await;
    assert_eq!(status, 200, "{c}");
    // The system prompt InvokeModel cached is read; the new turn written.
    let u = &c["usage"];
    assert_eq!(u["inputTokens"], 0, "{c}");
    assert_eq!(u["cacheReadInputTokens"], 1500, "{c}");
    assert_eq!(u["cacheWriteInputTokens"], 1, "{c}");
    assert_eq!(
        u["cacheDetails"],
        json!([{"ttl": "1h", "inputTokens": 1}]),
        "{c}"
    );
    // Vertex: cold too.
    let mut raw = body.clone();
    raw.as_object_mut().unwrap().remove("model");
    raw["anthropic_version"] = json!("vertex-2023-10-16");
    let url = format!(
        "{}/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:rawPredict",
        vertex.base_url()
    );
    let (status, v) = post(&url, &raw, &[("authorization", "Bearer vertex-token")]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(anthropic_usage(&v["usage"]), (0, 0, 1501, 1501, 0), "{v}");
}

/// OpenAI's Chat Completions usage: (prompt, cached).
async fn chat(sim: &SimProvider, url: &str, body: &Value, auth: (&str, &str)) -> (u64, u64) {
    let (status, a) = post(url, body, &[auth]).await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(sim.violations(), Vec::<String>::new());
    let u = &a["usage"];
    (
        u["prompt_tokens"].as_u64().unwrap(),
        u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

#[tokio::test]
async fn openai_caches_prefixes_from_1024_tokens_in_128_token_steps() {
    let sim = SimProvider::openai().await.unwrap();
    let url = format!("{}/chat/completions", sim.base_url());
    let auth = ("authorization", "Bearer sk-a");
    let short =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": words("s", 1000)}]});
    assert_eq!(chat(&sim, &url, &short, auth).await, (1000, 0));
    assert_eq!(
        chat(&sim, &url, &short, auth).await,
        (1000, 0),
        "below 1 024"
    );
    let mut long = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": words("s", 1300)},
        {"role": "user", "content": "what now"}]});
    assert_eq!(chat(&sim, &url, &long, auth).await, (1302, 0));
    long["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "this"}),
        json!({"role": "user", "content": "and then"}),
    ]);
    // 1 302 cached, rounded down to 1 280.
    assert_eq!(chat(&sim, &url, &long, auth).await, (1305, 1280));
    // Another key, or another prompt_cache_key, routes elsewhere.
    assert_eq!(
        chat(&sim, &url, &long, ("authorization", "Bearer sk-b")).await,
        (1305, 0)
    );
    long["prompt_cache_key"] = json!("session-1");
    assert_eq!(chat(&sim, &url, &long, auth).await, (1305, 0));
    assert_eq!(chat(&sim, &url, &long, auth).await, (1305, 1280));
    // No writes are billed: what is not read is uncached.
    let totals = sim.prompt_cache_totals();
    assert_eq!((totals.written, totals.read), (0, 2560), "{totals:?}");
}

#[tokio::test]
async fn the_responses_api_and_azure_report_cached_input() {
    let sim = SimProvider::openai_responses().await.unwrap();
    let url = format!("{}/responses", sim.base_url());
    let body = json!({"model": "gpt-5", "instructions": words("i", 1100), "input": "hello"});
    let auth = [("authorization", "Bearer sk")];
    for cached in [0, 1024] {
        let (status, a) = post(&url, &body, &auth).await;
        assert_eq!(status, 200, "{a}");
        assert_eq!(a["usage"]["input_tokens"], 1101, "{a}");
        assert_eq!(
            a["usage"]["input_tokens_details"]["cached_tokens"], cached,
            "{a}"
        );
    }
    // Azure: a cache per resource, never OpenAI's.
    let resource = AzureSim::new("azure-key", &["gpt-5"]);
    let azure = SimProvider::azure(&resource, Protocol::ChatCompletions)
        .await
        .unwrap();
    let url = format!("{}/openai/v1/chat/completions", azure.base_url());
    let chat_body =
        json!({"model": "gpt-5", "messages": [{"role": "user", "content": words("z", 1200)}]});
    for cached in [0, 1152] {
        let (status, a) = post(&url, &chat_body, &[("api-key", "azure-key")]).await;
        assert_eq!(status, 200, "{a}");
        assert_eq!(
            a["usage"]["prompt_tokens_details"]["cached_tokens"], cached,
            "{a}"
        );
    }
}

#[tokio::test]
async fn gemini_caches_implicitly_from_the_models_minimum() {
    let sim = SimProvider::gemini().await.unwrap();
    let url = format!("{}/models/gemini-2.5-flash:generateContent", sim.base_url());
    let body = json!({
        "systemInstruction": {"parts": [{"text": words("g", 2100)}]},
        "contents": [{"role": "user", "parts": [{"text": "hello there"}]}]
    });
    let key = [("x-goog-api-key", "g-key")];
    let (_, first) = post(&url, &body, &key).await;
    assert_eq!(first["usageMetadata"]["promptTokenCount"], 2102, "{first}");
    assert!(
        first["usageMetadata"]
            .get("cachedContentTokenCount")
            .is_none(),
        "{first}"
    );
    let (_, second) = post(&url, &body, &key).await;
    assert_eq!(
        second["usageMetadata"]["cachedContentTokenCount"], 2102,
        "{second}"
    );
    // Gemini 3 needs 4 096.
    let url = format!("{}/models/gemini-3-pro:generateContent", sim.base_url());
    for _ in 0..2 {
        let (_, a) = post(&url, &body, &key).await;
        assert!(
            a["usageMetadata"].get("cachedContentTokenCount").is_none(),
            "{a}"
        );
    }
}

#[tokio::test]
async fn standing_faults_fail_calls_deterministically_and_slow_the_first_token() {
    let sim = SimProvider::openai().await.unwrap();
    let url = format!("{}/chat/completions", sim.base_url());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let auth = [("authorization", "Bearer k")];
    sim.fail_every(3, 503);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(post(&url, &body, &auth).await.0);
    }
    assert_eq!(statuses, [200, 200, 503, 200, 200, 503]);
    // A seeded share: the same seed fails the same calls.
    let mut runs = Vec::new();
    for _ in 0..2 {
        sim.fail_share(0.5, 7, 500);
        let mut run = Vec::new();
        for _ in 0..40 {
            run.push(post(&url, &body, &auth).await.0 == 500);
        }
        runs.push(run);
    }
    assert_eq!(runs[0], runs[1]);
    let failed = runs[0].iter().filter(|f| **f).count();
    assert!((10..=30).contains(&failed), "{failed} of 40");
    sim.stop_failing();
    assert_eq!(post(&url, &body, &auth).await.0, 200);
    assert_eq!(sim.failed_calls(), 2 + 2 * failed as u64);
    // A slow first token: the answer waits at least the delay.
    sim.first_token_delay(Duration::from_millis(200));
    let started = Instant::now();
    sim.always(Reply::stream(&["a", "b"]));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    assert_eq!(post(&url, &streamed, &auth).await.0, 200);
    assert!(started.elapsed() >= Duration::from_millis(200));
}
