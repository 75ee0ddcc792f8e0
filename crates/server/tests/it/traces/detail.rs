//! Traces in detail, against the same receiver: message content only when
//! the operator opts in; `traceparent` sent to the providers whose settings
//! say so, naming the attempt's exported span; a target passed over for
//! its breaker as an event; the refusal policy on the request's span; the
//! samplers and `follow_traceparent`; a `traceresponse` that says whether
//! anything was recorded; and the spans held at shutdown sent.

use serde_json::{Value, json};
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};

use understudy_testkit::collector::Receiver;

use super::{CALLER_SPAN, CALLER_TRACE, attempts, chat_in, hi, kind, traceparent};
use crate::common::TestServer;

/// groq first, claude as its fallback, exporting to `receiver`, with
/// `toml` and `env` on top.
async fn gateway_with(
    groq: &SimProvider,
    claude: &SimProvider,
    receiver: &Receiver,
    configure: impl FnOnce(
        understudy_testkit::TestGatewayBuilder,
    ) -> understudy_testkit::TestGatewayBuilder,
    toml: &str,
) -> TestServer {
    let builder = TestGateway::builder()
        .provider("groq", groq)
        .provider("claude", claude)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .toml(&format!("[telemetry]\nexport_every = 0.1\n{toml}"));
    let gw = configure(builder).build().await.unwrap();
    TestServer::start(gw.engine).await
}

/// A receiver, groq down (503), claude answering, and a gateway over
/// them exporting to the receiver (`configure` and `toml` as for
/// [`gateway_with`]).
async fn fallback_setup(
    configure: impl FnOnce(
        understudy_testkit::TestGatewayBuilder,
    ) -> understudy_testkit::TestGatewayBuilder,
    toml: &str,
) -> (Receiver, SimProvider, SimProvider, TestServer) {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::status(503));
    claude.always(Reply::text("Hello from the fallback"));
    let s = gateway_with(&groq, &claude, &receiver, configure, toml).await;
    (receiver, groq, claude, s)
}

fn parsed(attribute: &Value) -> Value {
    serde_json::from_str(attribute.as_str().expect("a JSON string")).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_in_spans_only_when_the_operator_opts_in() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::text("softened answer"));
    let s = gateway_with(&groq, &claude, &receiver, |b| b, "capture_content = true").await;
    let body = json!({"model": "default", "messages": [
        {"role": "system", "content": "You roast code."},
        {"role": "user", "content": "roast my regex"}]});
    let answer = s
        .post_with(
            "/v1/chat/completions",
            &[("traceparent", &traceparent(CALLER_SPAN))],
            body.to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let server = &kind(&spans, 2)[0]["attributes"];
    assert_eq!(
        parsed(&server["gen_ai.input.messages"]),
        json!([{"role": "user", "parts": [{"type": "text", "content": "roast my regex"}]}])
    );
    assert_eq!(
        parsed(&server["gen_ai.system_instructions"]),
        json!([{"type": "text", "content": "You roast code."}])
    );
    let clients = attempts(&spans);
    let softened = &clients[1]["attributes"];
    assert_eq!(softened["understudy.attempt.kind"], "softened");
    let system = parsed(&softened["gen_ai.system_instructions"]);
    let text = system[0]["content"].as_str().unwrap();
    assert!(
        text.starts_with("You roast code.") && text.contains("Keep it light"),
        "the softened prompt: {text}"
    );
    assert_eq!(
        parsed(&softened["gen_ai.output.messages"]),
        json!([{"role": "assistant", "finish_reason": "stop",
                "parts": [{"type": "text", "content": "softened answer"}]}])
    );
    assert!(
        clients[0]["attributes"]
            .get("gen_ai.output.messages")
            .is_none()
    );

    // A stream's answer is what the client was sent.
    groq.push(Reply::text("streamed answer"));
    let answer = s
        .post_with(
            "/v1/chat/completions",
            &[("traceparent", &traceparent("00f067aa0ba90300"))],
            json!({"model": "default", "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("streamed"),
        "groq got {} requests: {}",
        groq.request_count(),
        answer.body
    );
    let own = answer
        .header("traceresponse")
        .unwrap()
        .split('-')
        .nth(2)
        .unwrap()
        .to_owned();
    let spans = receiver
        .spans_where(1, |s| s["parent_span_id"] == own.as_str())
        .await;
    let output = parsed(&spans[0]["attributes"]["gen_ai.output.messages"]);
    assert_eq!(output[0]["parts"][0]["content"], "streamed answer");

    // Off by default: no content anywhere.
    let plain_receiver = Receiver::start();
    groq.always(Reply::text("Hello"));
    let plain = gateway_with(&groq, &claude, &plain_receiver, |b| b, "").await;
    let answer = plain
        .post_with(
            "/v1/chat/completions",
            &[("traceparent", &traceparent(CALLER_SPAN))],
            body.to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = plain_receiver.trace(CALLER_TRACE, 2).await;
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("roast my regex"), "{text}");
    assert!(!text.contains("gen_ai.input.messages"), "{text}");
    assert!(!text.contains("Hello"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traceparent_reaches_only_the_providers_that_forward_it() {
    let (receiver, groq, claude, s) = fallback_setup(
        |b| b.provider_option("claude", "forward_traceparent = true"),
        "[breaker]\nfailure_threshold = 0",
    )
    .await;
    for (i, stream) in [false, true].into_iter().enumerate() {
        let caller_span = format!("{:016x}", 0x00f0_67aa_0ba9_0400_u64 + i as u64);
        let answer = s
            .post_with(
                "/v1/chat/completions",
                &[
                    ("traceparent", &traceparent(&caller_span)),
                    ("tracestate", "congo=t61rcWkgMzE"),
                ],
                json!({"model": "default", "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let own = answer
            .header("traceresponse")
            .unwrap()
            .split('-')
            .nth(2)
            .unwrap()
            .to_owned();
        let spans = receiver
            .spans_where(2, |s| s["parent_span_id"] == own.as_str())
            .await;
        let claude_span = spans
            .iter()
            .find(|s| s["attributes"]["understudy.provider"] == "claude")
            .expect("claude's attempt span");
        let sent = claude.received();
        let last = sent.last().expect("claude was called");
        let header = |name: &str| {
            last.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            header("traceparent").as_deref(),
            Some(
                format!(
                    "00-{CALLER_TRACE}-{}-01",
                    claude_span["span_id"].as_str().unwrap()
                )
                .as_str()
            ),
            "claude is told the span of its own attempt"
        );
        assert_eq!(header("tracestate").as_deref(), Some("congo=t61rcWkgMzE"));
    }
    for r in groq.received() {
        assert!(
            !r.headers
                .iter()
                .any(|(n, _)| n == "traceparent" || n == "tracestate"),
            "groq does not forward: {:?}",
            r.headers
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_behind_an_open_breaker_is_an_event_and_the_policy_an_attribute() {
    let (receiver, _groq, _claude, s) =
        fallback_setup(|b| b, "[breaker]\nfailure_threshold = 1\ncooldown = 600").await;
    // The first request opens groq's breaker; the second passes it over.
    let first = s.post("/v1/chat/completions", hi()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let answer = s
        .post_with(
            "/v1/chat/completions",
            &[
                ("traceparent", &traceparent(CALLER_SPAN)),
                ("x-understudy-refusal-policy", "fallback_only"),
            ],
            hi(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 2).await;
    let server = kind(&spans, 2)[0];
    assert_eq!(
        server["attributes"]["understudy.refusal_policy"],
        "fallback_only"
    );
    let skips: Vec<&Value> = server["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "understudy.target.skipped")
        .collect();
    assert_eq!(skips.len(), 1, "{server:#}");
    let skip = &skips[0]["attributes"];
    assert_eq!(skip["understudy.provider"], "groq");
    assert_eq!(skip["gen_ai.request.model"], "groq-model");
    assert_eq!(skip["understudy.skip.reason"], "breaker_open");
    let clients = attempts(&spans);
    assert_eq!(clients.len(), 1, "only claude was called: {spans:#?}");
    assert_eq!(clients[0]["attributes"]["understudy.provider"], "claude");
    // A request without the header runs under the configured policy.
    let answer = chat_in(&s, "00f067aa0ba90500").await;
    assert_eq!(answer.status, 200);
    let spans = receiver
        .spans_where(1, |s| s["parent_span_id"] == "00f067aa0ba90500")
        .await;
    assert_eq!(
        spans[0]["attributes"]["understudy.refusal_policy"],
        "soften_then_fallback"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samplers_decide_what_is_recorded_and_traceresponse_says_so() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let s = gateway_with(
        &groq,
        &claude,
        &receiver,
        |b| {
            b.env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
                .env("OTEL_TRACES_SAMPLER_ARG", "0")
                .env("UNDERSTUDY_API_KEYS", "sk-test-client")
        },
        "",
    )
    .await;
    let key = ("authorization", "Bearer sk-test-client");
    // A root (ratio 0) and a caller that does not sample: not recorded.
    let root = s.post_with("/v1/chat/completions", &[key], hi()).await;
    assert_eq!(root.status, 200, "{}", root.body);
    let root_trace = root.header("traceresponse").unwrap().to_owned();
    assert!(root_trace.ends_with("-00"), "{root_trace}");
    let unsampled_parent = format!("00-{CALLER_TRACE}-00f067aa0ba90600-00");
    let unsampled = s
        .post_with(
            "/v1/chat/completions",
            &[key, ("traceparent", &unsampled_parent)],
            hi(),
        )
        .await;
    assert!(unsampled.header("traceresponse").unwrap().ends_with("-00"));
    // A caller that samples: recorded.
    let sampled = s
        .post_with(
            "/v1/chat/completions",
            &[key, ("traceparent", &traceparent("00f067aa0ba90601"))],
            hi(),
        )
        .await;
    assert!(sampled.header("traceresponse").unwrap().ends_with("-01"));
    receiver
        .spans_where(1, |s| s["parent_span_id"] == "00f067aa0ba90601")
        .await;
    // Those before it were never sent: spans go out in the order requests
    // end, and the sampled one's are in.
    let all = receiver.spans().await;
    let root_id = root_trace.split('-').nth(1).unwrap();
    assert!(
        all.iter()
            .all(|s| s["trace_id"] != root_id && s["parent_span_id"] != "00f067aa0ba90600"),
        "{all:#?}"
    );
    assert_eq!(kind(&all, 2).len(), 1, "{all:#?}");
    // A request refused before the engine (no key) records nothing, and
    // says so.
    let refused = chat_in(&s, "00f067aa0ba90602").await;
    assert_eq!(refused.status, 401);
    assert!(refused.header("traceresponse").unwrap().ends_with("-00"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_does_not_follow_callers_starts_its_own_traces() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let s = gateway_with(
        &groq,
        &claude,
        &receiver,
        |b| b,
        "follow_traceparent = false",
    )
    .await;
    let answer = s
        .post_with(
            "/v1/chat/completions",
            &[
                (
                    "traceparent",
                    &format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00"),
                ),
                ("tracestate", "congo=t61rcWkgMzE"),
            ],
            hi(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let back = answer.header("traceresponse").unwrap();
    let trace = back.split('-').nth(1).unwrap();
    assert_ne!(trace, CALLER_TRACE);
    // The caller's unsampled flag did not stop the default sampler.
    assert!(back.ends_with("-01"), "{back}");
    let spans = receiver.trace(trace, 2).await;
    let server = kind(&spans, 2)[0];
    assert_eq!(server["parent_span_id"], "");
    assert_eq!(server["trace_state"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_held_at_shutdown_are_sent() {
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::text("Hello"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        // Held an hour: only the shutdown sends them.
        .toml("[telemetry]\nexport_every = 3600\n")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    for i in 0..3 {
        let caller_span = format!("{:016x}", 0x00f0_67aa_0ba9_0700_u64 + i);
        let answer = chat_in(&s, &caller_span).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    s.engine.shutdown().await;
    let spans = receiver.trace(CALLER_TRACE, 6).await;
    assert_eq!(kind(&spans, 2).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_exporter_a_forwarding_provider_still_gets_the_caller_s_context() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    claude.always(Reply::text("Hello"));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider("groq", &groq)
        .provider_option("claude", "forward_traceparent = true")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Nothing is recorded here, and the answer says so.
    assert!(answer.header("traceresponse").unwrap().ends_with("-00"));
    let sent = claude.received();
    let (_, parent) = sent[0]
        .headers
        .iter()
        .find(|(n, _)| n == "traceparent")
        .expect("claude receives traceparent");
    let parts: Vec<&str> = parent.split('-').collect();
    assert_eq!(parts[1], CALLER_TRACE);
    assert_eq!(
        parts[2], CALLER_SPAN,
        "the caller's span: none of this gateway's is exported"
    );
    assert_eq!(parts[3], "01", "the caller's sampled flag");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_go_over_grpc_with_the_configured_headers() {
    let receiver = Receiver::start_grpc();
    let grpc_url = receiver.grpc_url.clone().expect("a gRPC side");
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    groq.always(Reply::status(503));
    claude.always(Reply::text("Hello from the fallback"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &grpc_url)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=collector-secret")
        .toml("[telemetry]\nexport_every = 0.1\n[breaker]\nfailure_threshold = 0\n")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let server = kind(&spans, 2)[0];
    assert_eq!(server["parent_span_id"], CALLER_SPAN);
    assert_eq!(server["headers"]["x-api-key"], "collector-secret");
    let providers: Vec<&Value> = attempts(&spans)
        .iter()
        .map(|c| &c["attributes"]["understudy.provider"])
        .collect();
    assert_eq!(providers, [&json!("groq"), &json!("claude")]);
    // The collector's grpc-status 0 (a trailer) is read as delivered.
    super::spans_counted(&s, "exported", 3.0).await;
    // A collector that answers UNAVAILABLE (in grpc-status): counted drops,
    // and every request still answered.
    receiver.set("down").await;
    for _ in 0..5 {
        assert_eq!(s.post("/v1/chat/completions", hi()).await.status, 200);
    }
    super::spans_counted(&s, "dropped", 1.0).await;
    receiver.set("up").await;
    let answer = chat_in(&s, "00f067aa0ba90800").await;
    assert_eq!(answer.status, 200);
    receiver
        .spans_where(1, |s| s["parent_span_id"] == "00f067aa0ba90800")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_nobody_serves_says_its_code_never_the_providers_words() {
    const ECHO: &str = "your prompt was: my secret plan";
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let failing = |status: u16, body: &str| Reply::Status {
        status,
        body: body.to_owned(),
        headers: Vec::new(),
    };
    groq.always(failing(
        503,
        &json!({"error": {"message": ECHO, "type": "server_error"}}).to_string(),
    ));
    claude.always(failing(
        529,
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": ECHO}})
            .to_string(),
    ));
    let s = gateway_with(
        &groq,
        &claude,
        &receiver,
        |b| b,
        "[breaker]\nfailure_threshold = 0",
    )
    .await;
    let answer = chat_in(&s, CALLER_SPAN).await;
    assert_eq!(answer.status, 502, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let server = kind(&spans, 2)[0];
    assert_eq!(server["status"]["code"], 2, "an ERROR status");
    assert_eq!(server["status"]["message"], "unavailable");
    assert_eq!(server["attributes"]["error.type"], "unavailable");
    let text = serde_json::to_string(&spans).unwrap();
    assert!(!text.contains("secret plan"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_stream_s_answer_is_the_continuation_s() {
    use understudy_testkit::{StreamEnd, StreamSpec};
    let receiver = Receiver::start();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    // Cut after two words, with no end; claude continues from the prefill.
    groq.push(
        StreamSpec::new(&["one", " two"])
            .ending(StreamEnd::EndWithoutMarker)
            .reply(),
    );
    claude.push(Reply::stream(&[" three", " four"]));
    let s = gateway_with(
        &groq,
        &claude,
        &receiver,
        |b| b,
        "capture_content = true\n[timeouts]\nstream_idle = 0.5",
    )
    .await;
    let answer = s
        .post_with(
            "/v1/chat/completions",
            &[
                ("traceparent", &traceparent(CALLER_SPAN)),
                ("x-understudy-continue-after-cut", "true"),
            ],
            json!({"model": "default", "stream": true,
                   "messages": [{"role": "user", "content": "count"}]})
            .to_string(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let spans = receiver.trace(CALLER_TRACE, 3).await;
    let clients = attempts(&spans);
    let continued = clients
        .iter()
        .find(|c| c["attributes"]["understudy.attempt.kind"] == "continuation")
        .expect("the continuation's span");
    let a = &continued["attributes"];
    assert!(
        a["gen_ai.response.id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("msg_01"),
        "the continuation's own id: {a}"
    );
    let output = parsed(&a["gen_ai.output.messages"]);
    assert_eq!(output[0]["parts"][0]["content"], "one two three four");
}
