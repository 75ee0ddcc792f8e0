//! Every generation is recorded: exact Prometheus values at `/metrics` and
//! one Redis stream entry per request, field by field, against a real
//! `redis-server`; Redis killed under load loses nothing; overflow is
//! counted exactly; the response cache.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_core::sink::redis::from_fields;
use understudy_core::{GenerateRequest, GenerationEvent};
use understudy_testkit::{
    RedisServer, Refusal, Reply, SimProvider, TestGateway, eventually_within,
};
use understudy_types::{ChatRequest, StreamItem};

use crate::common::TestServer;

/// The entries of stream `key`, or what went wrong reading them (which
/// [`at_least`] takes as "not yet"). The reader's timeouts are generous:
/// redis-rs gives up on an answer after 500 ms by default, which a loaded
/// machine can miss reading a thousand entries.
async fn stream_entries(url: &str, key: &str) -> Result<Vec<GenerationEvent>, String> {
    let client = redis::Client::open(url).unwrap();
    let patient = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&patient)
        .await
        .map_err(|e| format!("cannot connect to Redis: {e}"))?;
    let raw: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("cannot read the stream: {e}"))?;
    Ok(raw
        .into_iter()
        .map(|(_, fields)| from_fields(&fields).unwrap())
        .collect())
}

/// How long to wait for the sinks, which write in the background: longer
/// than the testkit's default, because the Redis writer reconnects with
/// backoff after a restart.
const SINK_PATIENCE: Duration = Duration::from_secs(20);

/// The stream's entries once there are at least `n`.
async fn at_least(url: &str, n: usize) -> Result<Vec<GenerationEvent>, String> {
    let e = stream_entries(url, "understudy:events").await?;
    if e.len() >= n {
        Ok(e)
    } else {
        Err(format!("{} of {n} events", e.len()))
    }
}

/// The scripted mix: success, softened success, fallback, all failed,
/// stream, cache hit. Returns what each request produced.
async fn mix(gw: &TestGateway, groq: &SimProvider, claude: &SimProvider) -> Vec<Value> {
    let mut out = Vec::new();
    let req = |p: &str| GenerateRequest::new(ChatRequest::user(p));
    groq.push(Reply::text("one two three"));
    out.push(json!(gw.engine.generate(req("success")).await.unwrap()));
    groq.push(Reply::Refuse(Refusal::FinishReason))
        .push(Reply::text("soft"));
    out.push(json!(gw.engine.generate(req("softened")).await.unwrap()));
    groq.push(Reply::status(503));
    claude.push(Reply::text("from claude"));
    out.push(json!(gw.engine.generate(req("fallback")).await.unwrap()));
    groq.push(Reply::status(503));
    claude.push(Reply::status(529));
    let err = gw.engine.generate(req("all failed")).await.unwrap_err();
    out.push(json!({"error_code": err.code(), "attempts": err.attempts()}));
    groq.push(Reply::stream(&["s1", " s2"]));
    let mut s = gw.engine.generate_stream(req("stream")).await.unwrap();
    while let Some(item) = s.next().await {
        if let StreamItem::Done(d) = item {
            out.push(json!({"request_id": d.request_id, "provider": d.provider, "streamed": true}));
        }
    }
    let hit = gw.engine.generate(req("success")).await.unwrap();
    assert!(hit.cached, "the repeat of the first request is a cache hit");
    out.push(json!(hit));
    out
}

#[tokio::test]
async fn metrics_after_a_scripted_mix() {
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .provider_option(
            "groq",
            "price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }",
        )
        .cache(true)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine.clone()).await;
    mix(&gw, &groq, &claude).await;
    assert_eq!(groq.request_count(), 6, "the cache hit reached no provider");
    let text = eventually_within(
        SINK_PATIENCE,
        "the metrics writer",
        async || {
            let text = s.client().get(s.at("/metrics")).send().await.ok()?.text().await.ok()?;
            text.contains(r#"understudy_generations_total{provider="groq",success="true",fell_back="false",content_filtered="false"} 3"#).then_some(text)
        },
    )
    .await;
    for line in [
        "# TYPE understudy_generations_total counter",
        r#"understudy_generations_total{provider="groq",success="true",fell_back="false",content_filtered="false"} 3"#,
        r#"understudy_generations_total{provider="groq",success="true",fell_back="false",content_filtered="true"} 1"#,
        r#"understudy_generations_total{provider="claude",success="true",fell_back="true",content_filtered="false"} 1"#,
        r#"understudy_generations_total{provider="groq",success="false",fell_back="false",content_filtered="false"} 1"#,
        r#"understudy_attempts_total{provider="groq",kind="primary",outcome="ok"} 2"#,
        r#"understudy_attempts_total{provider="groq",kind="primary",outcome="content_filter"} 1"#,
        r#"understudy_attempts_total{provider="groq",kind="softened",outcome="ok"} 1"#,
        r#"understudy_attempts_total{provider="groq",kind="primary",outcome="unavailable"} 2"#,
        r#"understudy_attempts_total{provider="claude",kind="fallback",outcome="ok"} 1"#,
        r#"understudy_attempts_total{provider="claude",kind="fallback",outcome="unavailable"} 1"#,
        r#"understudy_request_duration_seconds_count{provider="groq",streamed="false",api="neutral"} 4"#,
        r#"understudy_request_duration_seconds_count{provider="groq",streamed="true",api="neutral"} 1"#,
        r#"understudy_request_duration_seconds_count{provider="claude",streamed="false",api="neutral"} 1"#,
        r#"understudy_time_to_first_token_seconds_count{provider="groq"} 1"#,
        r#"understudy_tokens_total{provider="groq",direction="output"} 9"#,
        r#"understudy_provider_up{provider="groq"} 1"#,
        r#"understudy_provider_up{provider="gemini"} 0"#,
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing `{line}` in:\n{text}"
        );
    }
    assert!(
        !text.contains("provider=\"\"") && !text.contains("None"),
        "{text}"
    );
    assert!(!text.contains("# EOF"));
    // OpenMetrics when asked.
    let om = s
        .get_with("/metrics", &[("accept", "application/openmetrics-text")])
        .await;
    assert!(
        om.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    assert!(om.body.ends_with("# EOF\n"));
}

#[tokio::test]
async fn events_in_redis_match_the_requests_field_by_field() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("claude", &claude)
        .provider_option(
            "claude",
            "price = { input_per_mtok = 3.0, output_per_mtok = 15.0 }",
        )
        .env("REDIS_URL", &redis.url())
        .cache(true)
        .build()
        .await
        .unwrap();
    let results = mix(&gw, &groq, &claude).await;
    let events = eventually_within(SINK_PATIENCE, "six events in Redis", async || {
        at_least(&redis.url(), 6).await
    })
    .await;
    assert_eq!(events.len(), 6);
    let expect = [
        (Some("groq"), true, false, false, false, false, None, 1),
        (Some("groq"), true, false, true, false, false, None, 2),
        (Some("claude"), true, true, false, false, false, None, 2),
        (
            None,
            false,
            false,
            false,
            false,
            false,
            Some("unavailable"),
            2,
        ),
        (Some("groq"), true, false, false, true, false, None, 1),
        (Some("groq"), true, false, false, false, true, None, 0),
    ];
    for (i, (e, want)) in events.iter().zip(expect).enumerate() {
        let (provider, success, fell_back, filtered, streamed, cached, code, attempts) = want;
        assert_eq!(e.provider.as_deref(), provider, "event {i}: {e:?}");
        assert_eq!(
            (
                e.success,
                e.fell_back,
                e.content_filtered,
                e.streamed,
                e.cached
            ),
            (success, fell_back, filtered, streamed, cached),
            "event {i}"
        );
        assert_eq!(e.error_code.map(|c| c.as_str()), code, "event {i}");
        assert_eq!(e.attempts.len(), attempts, "event {i}");
        assert_eq!(&*e.primary, "groq");
        assert_eq!(e.route, "default");
        assert!(e.timestamp.ends_with('Z') && e.latency_ms >= 0.0);
        if let Some(id) = results[i]["request_id"].as_str() {
            assert_eq!(&*e.request_id, id, "event {i}");
        }
    }
    assert!(events[4].ttft_ms.is_some());
    assert!(events[2].cost_usd.unwrap() > 0.0, "claude has a price");
    assert!(events[3].error_detail.as_deref().unwrap().len() <= 520);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_loses_nothing_and_keeps_order() {
    let mut redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .env("REDIS_URL", &redis.url())
        .build()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..1000 {
        if i == 300 {
            redis.stop();
        }
        if i == 650 {
            redis.restart().unwrap();
        }
        let g = gw
            .engine
            .generate(GenerateRequest::new(ChatRequest::user(format!("n{i}"))))
            .await
            .unwrap();
        ids.push(g.request_id);
    }
    let events = eventually_within(SINK_PATIENCE, "1000 events after the restart", async || {
        at_least(&redis.url(), 1000).await
    })
    .await;
    let got: Vec<&str> = events.iter().map(|e| &*e.request_id).collect();
    assert_eq!(got.len(), 1000, "no duplicates, none lost");
    assert_eq!(
        got,
        ids.iter().map(|id| &**id).collect::<Vec<_>>(),
        "order kept"
    );
}

#[tokio::test]
async fn overflow_beyond_the_buffer_is_counted_exactly() {
    let mut redis = RedisServer::start().unwrap();
    redis.stop();
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .env("REDIS_URL", &redis.url())
        .toml("[events]\nredis_buffer = 50")
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine.clone()).await;
    let mut ids = Vec::new();
    for i in 0..80 {
        ids.push(
            gw.engine
                .generate(GenerateRequest::new(ChatRequest::user(format!("n{i}"))))
                .await
                .unwrap()
                .request_id,
        );
    }
    let line = r#"understudy_events_dropped_total{sink="redis"} 30"#;
    eventually_within(SINK_PATIENCE, "30 dropped events", async || {
        let text = s
            .client()
            .get(s.at("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines().any(|l| l == line).then_some(())
    })
    .await;
    redis.restart().unwrap();
    let events = eventually_within(SINK_PATIENCE, "the 50 buffered events", async || {
        at_least(&redis.url(), 50).await
    })
    .await;
    let got: Vec<&str> = events.iter().map(|e| &*e.request_id).collect();
    assert_eq!(
        got,
        ids[30..].iter().map(|id| &**id).collect::<Vec<_>>(),
        "the newest 50, in order"
    );
    let text = s.get("/metrics").await.body;
    assert!(text.lines().any(|l| l == line), "still exactly 30");
}

#[tokio::test]
async fn the_response_cache() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .cache(true)
        .build()
        .await
        .unwrap();
    let ask = |p: &str| GenerateRequest::new(ChatRequest::user(p));
    let first = gw.engine.generate(ask("same")).await.unwrap();
    let second = gw.engine.generate(ask("same")).await.unwrap();
    assert!(!first.cached && second.cached);
    assert_eq!(second.text, first.text);
    assert_ne!(second.request_id, first.request_id);
    assert_eq!(groq.request_count(), 1);
    // A different temperature is a different request.
    gw.engine
        .generate(GenerateRequest::new(
            ChatRequest::user("same").with_temperature(0.1),
        ))
        .await
        .unwrap();
    assert_eq!(groq.request_count(), 2);
    // Opted out.
    let mut opt_out = ask("same");
    opt_out.cache = false;
    assert!(!gw.engine.generate(opt_out).await.unwrap().cached);
    assert_eq!(groq.request_count(), 3);
    // Streams bypass it.
    for _ in 0..2 {
        let mut s = gw.engine.generate_stream(ask("same")).await.unwrap();
        while s.next().await.is_some() {}
    }
    assert_eq!(groq.request_count(), 5);
    // Over HTTP: Cache-Control: no-cache and "cache": false.
    let s = TestServer::start(gw.engine.clone()).await;
    let post = async |body: Value, no_cache: bool| -> Value {
        let headers: &[(&str, &str)] = if no_cache {
            &[("cache-control", "no-cache")]
        } else {
            &[]
        };
        s.post_with("/v1/generate", headers, body.to_string())
            .await
            .json()
    };
    let v = post(json!({"prompt": "same"}), false).await;
    assert_eq!(v["cached"], true);
    let v = post(json!({"prompt": "same"}), true).await;
    assert_eq!(v["cached"], false);
    let v = post(json!({"prompt": "same", "cache": false}), false).await;
    assert_eq!(v["cached"], false);
    assert_eq!(groq.request_count(), 7);
}
