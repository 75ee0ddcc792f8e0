//! Two gateway instances (two engines) against one real `redis-server` and
//! shared simulators behave as one gateway: breakers, the half-open probe,
//! the spend cap and the response cache are shared, and Redis trouble never
//! fails a request.

#![allow(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]

use std::time::{Duration, Instant};

use understudy_core::policy::breaker::BreakerState;
use understudy_core::{ChatRequest, GenerateRequest};
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway};

fn ask() -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x"))
}

async fn instance(
    groq: &SimProvider,
    openai: &SimProvider,
    redis: &RedisServer,
    extra: &str,
    cache: bool,
) -> TestGateway {
    TestGateway::builder()
        .provider("groq", groq)
        .provider("openai", openai)
        .provider_option(
            "openai",
            "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }",
        )
        .env("REDIS_URL", &redis.url())
        .toml(extra)
        .cache(cache)
        .build()
        .await
        .unwrap()
}

async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn groq_breaker(gw: &TestGateway) -> BreakerState {
    let info = gw
        .engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "groq")
        .unwrap();
    info.breakers
        .first()
        .map_or(BreakerState::Closed, |b| b.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_a_is_honoured_by_b() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let breaker = "[breaker]\nfailure_threshold = 3\ncooldown = 10";
    let a = instance(&groq, &openai, &redis, breaker, false).await;
    let b = instance(&groq, &openai, &redis, breaker, false).await;
    // B has talked to groq once (so its actor exists), then A opens the breaker.
    b.engine.generate(ask()).await.unwrap();
    for _ in 0..3 {
        a.engine.generate(ask()).await.unwrap();
    }
    until("B to see the breaker open", async || {
        groq_breaker(&b).await == BreakerState::Open
    })
    .await;
    let before = groq.request_count();
    for _ in 0..5 {
        assert_eq!(b.engine.generate(ask()).await.unwrap().provider, "openai");
    }
    assert_eq!(
        groq.request_count(),
        before,
        "B does not contact the failing primary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_honours_breakers_the_fleet_opened_before_it_started() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let breaker = "[breaker]\nfailure_threshold = 3\ncooldown = 10";
    let a = instance(&groq, &openai, &redis, breaker, false).await;
    for _ in 0..3 {
        assert_eq!(a.engine.generate(ask()).await.unwrap().provider, "openai");
    }
    // A publishes its open breaker without waiting: wait for the key.
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    until("A to publish the open breaker", async || {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("understudy:{breaker:groq:*}:open")
            .query_async(&mut conn)
            .await
            .unwrap();
        !keys.is_empty()
    })
    .await;
    // B starts now, has never used groq, and is asked at once.
    let before = groq.request_count();
    let b = instance(&groq, &openai, &redis, breaker, false).await;
    for _ in 0..2 {
        let g = b.engine.generate(ask()).await.unwrap();
        assert_eq!(g.provider, "openai");
        assert_eq!(g.attempts.len(), 1, "the primary was left out of the plan");
    }
    assert_eq!(
        groq.request_count(),
        before,
        "B sends the target the fleet opened nothing"
    );
    assert_eq!(groq_breaker(&b).await, BreakerState::Open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_probe_per_cooldown_across_the_fleet_and_recovery_for_all() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let breaker = "[breaker]\nfailure_threshold = 2\ncooldown = 0.4";
    let a = instance(&groq, &openai, &redis, breaker, false).await;
    let b = instance(&groq, &openai, &redis, breaker, false).await;
    b.engine.generate(ask()).await.unwrap();
    for _ in 0..2 {
        a.engine.generate(ask()).await.unwrap();
    }
    until("B to see it open", async || {
        groq_breaker(&b).await == BreakerState::Open
    })
    .await;
    // Both hammer the gateway for 2 s while groq stays down.
    let opened = Instant::now();
    let before = groq.request_count();
    let load = |gw: TestGateway| {
        tokio::spawn(async move {
            while opened.elapsed() < Duration::from_secs(2) {
                assert_eq!(gw.engine.generate(ask()).await.unwrap().provider, "openai");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            gw
        })
    };
    let (ta, tb) = (load(a), load(b));
    let (a, b) = (ta.await.unwrap(), tb.await.unwrap());
    let probes = groq.request_count() - before;
    // The load ran 2 s and then some: a request started just before 2 s
    // ends later, the more so on a busy machine.
    let span = opened.elapsed();
    let windows = (span.as_secs_f64() / 0.4).ceil() as usize;
    eprintln!("probes across the fleet in {span:?}: {probes} ({windows} cooldown windows)");
    // At most one probe per 0.4 s cooldown window, fleet-wide (plus the
    // window the breaker opened in); two instances probing on their own
    // would make twice as many.
    assert!(
        probes <= windows + 1,
        "{probes} probes in {span:?} ({windows} windows) across two instances"
    );
    assert!(probes >= 2, "the breaker kept probing ({probes})");

    // Groq recovers: one instance's probe closes it, and both follow.
    groq.always(Reply::text("back"));
    until("A back on groq", async || {
        a.engine.generate(ask()).await.unwrap().provider == "groq"
    })
    .await;
    until("B back on groq", async || {
        b.engine.generate(ask()).await.unwrap().provider == "groq"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spend_cap_holds_across_the_fleet() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    // Each fallback answer costs 0.005 USD at the test price (5 tokens).
    let budget =
        "[breaker]\nfailure_threshold = 0\n[budget]\nfallback_budget_usd = 0.008\nwindow = \"1h\"";
    let a = instance(&groq, &openai, &redis, budget, false).await;
    let b = instance(&groq, &openai, &redis, budget, false).await;
    assert_eq!(a.engine.generate(ask()).await.unwrap().provider, "openai");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(b.engine.generate(ask()).await.unwrap().provider, "openai");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Each instance spent under the cap alone; together they are over it.
    for gw in [&a, &b] {
        let err = gw.engine.generate(ask()).await.unwrap_err();
        assert_eq!(err.code().as_str(), "fallback_budget_exceeded", "{err}");
    }
    assert_eq!(openai.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_entry_written_through_a_is_a_hit_through_b() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let a = instance(&groq, &openai, &redis, "", true).await;
    let b = instance(&groq, &openai, &redis, "", true).await;
    let first = a.engine.generate(ask()).await.unwrap();
    assert!(!first.cached);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = b.engine.generate(ask()).await.unwrap();
    assert!(second.cached, "B answered from A's cache entry");
    assert_eq!(second.text, first.text);
    assert_eq!(groq.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lost_under_load_fails_nothing_and_sharing_resumes() {
    let mut redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let breaker = "[breaker]\nfailure_threshold = 3\ncooldown = 10";
    let a = instance(&groq, &openai, &redis, breaker, true).await;
    let b = instance(&groq, &openai, &redis, breaker, true).await;
    let unique = |i: usize| GenerateRequest::new(ChatRequest::user(format!("unique {i}")));
    a.engine.generate(unique(1)).await.unwrap();
    b.engine.generate(unique(2)).await.unwrap();
    redis.stop();
    let started = Instant::now();
    for i in 0..100 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let g = gw
            .engine
            .generate(GenerateRequest::new(ChatRequest::user(format!("n{i}"))))
            .await;
        assert!(g.is_ok(), "request {i} failed while Redis was down: {g:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "Redis trouble slowed requests: {:?}",
        started.elapsed()
    );
    let metrics = a.engine.metrics_text(false).await;
    assert!(metrics.contains("understudy_redis_degraded 1"), "{metrics}");

    // Redis is back: each instance returns to shared state by itself.
    redis.restart().unwrap();
    until("the degradation to clear", async || {
        a.engine
            .metrics_text(false)
            .await
            .contains("understudy_redis_degraded 0")
    })
    .await;
    groq.always(Reply::status(503));
    let mut n = 1000;
    until("A to share again", async || {
        n += 1;
        a.engine.generate(unique(n)).await.unwrap();
        groq_breaker(&b).await == BreakerState::Open
    })
    .await;
    let metrics = a.engine.metrics_text(false).await;
    assert!(metrics.contains("understudy_redis_degraded 0"), "{metrics}");
}
