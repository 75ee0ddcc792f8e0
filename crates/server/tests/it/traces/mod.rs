//! Traces against a receiver that decodes OTLP with the OpenTelemetry
//! project's own messages (the testkit's `collector::Receiver`, `opentelemetry-proto`):
//! a request with the caller's `traceparent` whose primary fails and whose
//! fallback answers is one SERVER span under the caller's span and two
//! CLIENT spans under it, on each front end, streamed or not; a refusal
//! recovered by the softened retry; two instances into one receiver; a
//! receiver that refuses costs counted drops and no request.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::collector::Receiver;
use understudy_testkit::{
    Refusal, Reply, SimProvider, TestGateway, UsageDetail, eventually_within,
};

use crate::common::TestServer;

mod detail;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// groq (OpenAI's protocol) first, claude (Anthropic's) as its fallback,
/// exporting to `receiver`.
async fn gateway(groq: &SimProvider, claude: &SimProvider, receiver: &Receiver) -> TestServer {
    let gw = TestGateway::builder()
        .provider("groq", groq)
        .provider("claude", claude)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_SERVICE_NAME", "understudy-test")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci")
        .toml("[telemetry]\nexport_every = 0.1\n[breaker]\nfailure_threshold = 0\n")
        .build()
        .await
        .unwrap();
    TestServer::start(gw.engine).await
}

fn traceparent(span: &str) -> String {
    format!("00-{CALLER_TRACE}-{span}-01")
}

/// A chat request's body.
fn hi() -> String {
    json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}).to_string()
}

/// A chat request under the caller's span `caller_span`.
async fn chat_in(s: &TestServer, caller_span: &str) -> crate::common::Answer {
    s.post_with(
        "/v1/chat/completions",
        &[("traceparent", &traceparent(caller_span))],
        hi(),
    )
    .await
}

fn kind(spans: &[Value], k: i64) -> Vec<&Value> {
    spans.iter().filter(|s| s["kind"] == k).collect()
}

/// The client spans, in the order they started.
fn attempts(spans: &[Value]) -> Vec<&Value> {
    let mut clients = kind(spans, 3);
    clients.sort_by_key(|s| s["start"].as_u64());
    clients
}

/// One SERVER span under the caller's, and CLIENT spans under it: the
/// first groq's failed with a 503, the last claude's with its tokens.
fn check_fallback(spans: &[Value], caller_span: &str, route: &str, streamed: bool) {
    let servers = kind(spans, 2);
    assert_eq!(servers.len(), 1, "{spans:#?}");
    let server = servers[0];
    assert_eq!(server["parent_span_id"], caller_span);
    assert_eq!(server["trace_state"], "congo=t61rcWkgMzE");
    assert_eq!(server["name"], format!("POST {route}"));
    let a = &server["attributes"];
    assert_eq!(a["http.route"], route);
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["understudy.fell_back"], true);
    assert_eq!(a["understudy.served_by"], "claude");
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(server["resource"]["service.name"], "understudy-test");
    assert_eq!(server["resource"]["deployment.environment"], "ci");
    let clients = attempts(spans);
    assert_eq!(clients.len(), 2, "{spans:#?}");
    for c in &clients {
        assert_eq!(c["parent_span_id"], server["span_id"]);
        assert!(c["end"].as_u64() >= c["start"].as_u64());
    }
    let (first, second) = (&clients[0]["attributes"], &clients[1]["attributes"]);
    assert_eq!(clients[0]["name"], "chat groq-model");
    assert_eq!(first["gen_ai.provider.name"], "groq");
    assert_eq!(first["gen_ai.request.model"], "groq-model");
    assert_eq!(first["error.type"], "unavailable");
    assert_eq!(first["http.response.status_code"], 503);
    assert_eq!(first["understudy.attempt.kind"], "primary");
    assert_eq!(clients[0]["status"]["code"], 2, "an ERROR status");
    assert_eq!(first["server.address"], "127.0.0.1");
    assert_eq!(second["gen_ai.provider.name"], "anthropic");
    assert_eq!(second["understudy.attempt.kind"], "fallback");
    assert_eq!(second["gen_ai.response.model"], "claude-model");
    assert!(
        second["gen_ai.usage.output_tokens"].as_i64().unwrap() > 0,
        "{second}"
    );
    assert!(
        second["gen_ai.usage.input_tokens"].as_i64().is_some(),
        "{second}"
    );
    assert!(second.get("error.type").is_none());
    // The answer's own id, how it ended, and the parts of its tokens the
    // provider reported (the simulator reports them as Anthropic does).
    let id = second["gen_ai.response.id"].as_str().unwrap_or_default();
    assert!(id.starts_with("msg_01"), "{second}");
    assert_eq!(second["gen_ai.response.finish_reasons"], json!(["stop"]));
    assert_eq!(second["gen_ai.usage.cache_read.input_tokens"], 1024);
    assert_eq!(second["gen_ai.usage.cache_creation.input_tokens"], 256);
    assert_eq!(second["gen_ai.usage.reasoning.output_tokens"], 64);
    assert!(first.get("gen_ai.response.id").is_none());
    if streamed {
        assert_eq!(second["gen_ai.request.stream"], true);
        assert!(
            second["gen_ai.response.time_to_first_chunk"]
                .as_f64()
                .is_some()
        );
    }
    // No key, ever.
    let text = serde_json::to_string(spans).unwrap();
    assert!(!text.contains(&TestGateway::key_for("groq")), "{text}");
    assert!(!text.contains(&TestGateway::key_for("claude")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_is_one_server_span_and_two_attempts_under_the_caller_s_span() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::status(503));
    claude
        .always(Reply::text("Hello from the fallback"))
        .with_usage_detail(UsageDetail {
            cache_read: 1024,
            cache_write: 256,
            reasoning: 64,
        });
    let s = gateway(&groq, &claude, &receiver).await;
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}),
            false,
        ),
        (
            "/v1/chat/completions",
            json!({"model": "default", "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}),
            true,
        ),
        (
            "/v1/messages",
            json!({"model": "default", "max_tokens": 32,
                   "messages": [{"role": "user", "content": "hi"}]}),
            false,
        ),
        (
            "/v1/messages",
            json!({"model": "default", "max_tokens": 32, "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}),
            true,
        ),
        (
            "/v1/responses",
            json!({"model": "default", "input": "hi"}),
            false,
        ),
    ];
    for (i, (route, body, streamed)) in cases.iter().enumerate() {
        // Each case its own caller span, so its spans stand apart.
        let caller_span = format!("{:016x}", 0x00f0_67aa_0ba9_0200_u64 + i as u64);
        let answer = s
            .post_with(
                route,
                &[
                    ("traceparent", &traceparent(&caller_span)),
                    ("tracestate", "congo=t61rcWkgMzE"),
                    ("anthropic-version", "2023-06-01"),
                ],
                body.to_string(),
            )
            .await;
        assert_eq!(answer.status, 200, "{route}: {}", answer.body);
        let back = answer
            .header("traceresponse")
            .expect("the trace id comes back");
        assert!(back.starts_with(&format!("00-{CALLER_TRACE}-")), "{back}");
        let spans = request_spans(&receiver, &caller_span, back).await;
        check_fallback(&spans, &caller_span, route, *streamed);
    }
    // The GenAI client metrics, on /metrics too (written by their own sink
    // from the same events: waited for, not assumed).
    let series = [
        "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"groq\",gen_ai_request_model=\"groq-model\",error_type=\"unavailable\"} 5",
        "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"anthropic\",gen_ai_request_model=\"claude-model\",error_type=\"\"} 5",
        "gen_ai_client_token_usage_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"anthropic\",gen_ai_request_model=\"claude-model\",gen_ai_token_type=\"output\"} 5",
    ];
    eventually_within(
        Duration::from_secs(20),
        "the GenAI client metrics",
        async || {
            let m = s.get("/metrics").await.body;
            match series.iter().find(|line| !m.contains(*line)) {
                None => Ok(()),
                Some(missing) => Err(format!("{missing} not in {m}")),
            }
        },
    )
    .await;
}

/// The three spans of the request whose caller span is `caller_span` and
/// whose own span `traceresponse` names.
async fn request_spans(receiver: &Receiver, caller_span: &str, traceresponse: &str) -> Vec<Value> {
    let own = traceresponse.split('-').nth(2).unwrap_or_default();
    receiver
        .spans_where(3, |s| {
            s["trace_id"] == CALLER_TRACE
                && (s["parent_span_id"] == caller_span || s["parent_span_id"] == own)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_recovered_by_softening_is_two_attempts_of_one_provider() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::text("softened answer"));
    let s = gateway(&groq, &claude, &receiver).await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let clients = attempts(&spans);
    let kinds: Vec<&Value> = clients
        .iter()
        .map(|c| &c["attributes"]["understudy.attempt.kind"])
        .collect();
    assert_eq!(kinds, [&json!("primary"), &json!("softened")]);
    assert_eq!(clients[0]["attributes"]["error.type"], "content_filter");
    let server = kind(&spans, 2)[0];
    assert_eq!(server["attributes"]["understudy.content_filtered"], true);
    assert_eq!(server["attributes"]["understudy.fell_back"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_traceparent_starts_a_trace_and_two_instances_share_a_receiver() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let a = gateway(&groq, &claude, &receiver).await;
    let b = gateway(&groq, &claude, &receiver).await;
    let body = hi();
    let mut traces = Vec::new();
    for s in [&a, &b] {
        let answer = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let back = answer.header("traceresponse").unwrap().to_owned();
        let trace = back.split('-').nth(1).unwrap().to_owned();
        assert_ne!(trace, CALLER_TRACE);
        traces.push(trace);
    }
    for trace in &traces {
        let spans = receiver.trace(trace, 2).await;
        let server = kind(&spans, 2)[0];
        assert_eq!(server["parent_span_id"], "", "a root span");
    }
    // One caller's trace through both instances: each request's span under
    // the caller's span it came with, in one receiver.
    for (i, s) in [&a, &b].into_iter().enumerate() {
        let caller_span = format!("{:016x}", 0xabc0_u64 + i as u64);
        let answer = chat_in(s, &caller_span).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    let spans = receiver.trace(CALLER_TRACE, 4).await;
    let mut parents: Vec<&str> = kind(&spans, 2)
        .iter()
        .map(|s| s["parent_span_id"].as_str().unwrap())
        .collect();
    parents.sort_unstable();
    assert_eq!(parents, ["000000000000abc0", "000000000000abc1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_refuses_costs_counted_drops_and_no_request() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let s = gateway(&groq, &claude, &receiver).await;
    receiver.set("down").await;
    let body = hi();
    for _ in 0..20 {
        let answer = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    spans_counted(&s, "dropped", 40.0).await;
    receiver.set("up").await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200);
    receiver.trace(CALLER_TRACE, 2).await;
    // The receiver has them before the gateway has read its answer: the
    // count follows.
    spans_counted(&s, "exported", 2.0).await;
}

/// `understudy_otlp_spans_total{outcome}` on `s`'s /metrics, once it is at
/// least `at_least`.
async fn spans_counted(s: &TestServer, outcome: &str, at_least: f64) -> f64 {
    let series = format!("understudy_otlp_spans_total{{outcome=\"{outcome}\"}}");
    eventually_within(
        Duration::from_secs(20),
        &format!("{outcome} spans counted"),
        async || {
            let m = s.get("/metrics").await.body;
            match counter(&m, &series) {
                n if n >= at_least => Ok(n),
                n => Err(format!("{n} {outcome}")),
            }
        },
    )
    .await
}

fn counter(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap_or(0.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_wait_is_an_event_of_the_retry() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.push(Reply::rate_limited("1"))
        .push(Reply::text("after the wait"));
    let s = gateway(&groq, &claude, &receiver).await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let clients = attempts(&spans);
    assert_eq!(clients[0]["attributes"]["error.type"], "rate_limited");
    assert_eq!(clients[0]["attributes"]["http.response.status_code"], 429);
    assert_eq!(
        clients[1]["attributes"]["understudy.attempt.kind"],
        "rate_limit_retry"
    );
    let wait = &clients[1]["events"][0];
    assert_eq!(wait["name"], "understudy.retry_after.wait");
    let waited = wait["attributes"]["understudy.wait_s"].as_f64().unwrap();
    assert!(waited >= 0.9, "waited {waited} s for a Retry-After of 1 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_stopped_for_30_s_under_load_costs_no_request() {
    let receiver = Receiver::start();
    let port: u16 = receiver.url.rsplit(':').next().unwrap().parse().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let s = std::sync::Arc::new(gateway(&groq, &claude, &receiver).await);
    drop(receiver);
    let body = hi();
    // Load at concurrency 4 while the collector is gone for 30 s.
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (s, body) = (s.clone(), body.clone());
        load.spawn(async move {
            let mut statuses = Vec::new();
            while tokio::time::Instant::now() < until {
                statuses.push(s.post("/v1/chat/completions", body.clone()).await.status);
            }
            statuses
        });
    }
    let statuses: Vec<u16> = load.join_all().await.into_iter().flatten().collect();
    assert!(statuses.len() > 40, "{} requests", statuses.len());
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let m = s.get("/metrics").await.body;
    let dropped = counter(&m, "understudy_otlp_spans_total{outcome=\"dropped\"}")
        + counter(&m, "understudy_events_dropped_total{sink=\"otlp\"}") * 2.0;
    assert!(dropped > 0.0, "{m}");
    // Back on the same port: export resumes.
    let receiver = Receiver::start_on(port);
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200);
    receiver.trace(CALLER_TRACE, 2).await;
}
