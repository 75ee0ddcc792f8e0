//! Two gateway instances (two engines) against one real `redis-server` and
//! shared simulators behave as one gateway: breakers, the half-open probe,
//! the spend cap and the response cache are shared, and Redis trouble never
//! fails a request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use understudy_core::{Engine, GenerateRequest};
use understudy_policy::breaker::BreakerState;
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, eventually};
use understudy_types::ChatRequest;

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

/// The fleet's keys matching `pattern`, and their values.
async fn redis_values(redis: &RedisServer, pattern: &str) -> Vec<(String, String)> {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for key in keys {
        let value: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.extend(value.map(|v| (key, v)));
    }
    out
}

/// The fleet's fallback spend (USD) across all windows, as Redis holds it.
async fn fleet_spend(redis: &RedisServer) -> f64 {
    redis_values(redis, "understudy:{budget}:spend:*")
        .await
        .iter()
        .map(|(_, v)| v.parse::<f64>().unwrap())
        .sum()
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
    eventually("B to see the breaker open", async || {
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
    eventually("A to publish the open breaker", async || {
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

/// The engine's `understudy_redis_degraded` gauge: its sample line (the
/// HELP line says "1 while Redis is unreachable", so no substring test).
async fn redis_degraded(engine: &Engine) -> bool {
    let text = engine.metrics_text(false).await;
    match text
        .lines()
        .find_map(|l| l.strip_prefix("understudy_redis_degraded "))
    {
        Some(v) => v == "1",
        None => panic!("no understudy_redis_degraded gauge in:\n{text}"),
    }
}

/// The probe test's breaker cooldown.
const COOLDOWN: Duration = Duration::from_millis(400);

/// Watches `engine`'s `understudy_redis_degraded` until `stop`, and returns
/// each stretch in which its Redis link may have been degraded: from the
/// last sample that read healthy to the first that read healthy again. A
/// degradation lasts at least half a second (the link waits before it
/// reconnects), so samples closer than that cannot miss one; a longer gap
/// between samples (this task starved) counts as degraded, since nothing
/// was seen.
fn watch_degraded(engine: Engine, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Duration>> {
    const BLIND: Duration = Duration::from_millis(400);
    tokio::spawn(async move {
        let mut stretches = Vec::new();
        let mut since: Option<Instant> = None;
        let mut last = Instant::now();
        loop {
            let done = stop.load(Ordering::Relaxed);
            let degraded = redis_degraded(&engine).await;
            let now = Instant::now();
            if degraded || now - last > BLIND {
                since.get_or_insert(last);
            } else if let Some(from) = since.take() {
                stretches.push(now - from);
            }
            last = now;
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stretches.extend(since.map(|from| last - from));
        stretches
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_probe_per_cooldown_across_the_fleet_and_recovery_for_all() {
    let redis = RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let breaker = format!(
        "[breaker]\nfailure_threshold = 2\ncooldown = {}",
        COOLDOWN.as_secs_f64()
    );
    let a = instance(&groq, &openai, &redis, &breaker, false).await;
    let b = instance(&groq, &openai, &redis, &breaker, false).await;
    b.engine.generate(ask()).await.unwrap();
    for _ in 0..2 {
        a.engine.generate(ask()).await.unwrap();
    }
    eventually("B to see it open", async || {
        groq_breaker(&b).await == BreakerState::Open
    })
    .await;
    // Both hammer the gateway for 2 s while groq stays down, each watching
    // whether its Redis link is degraded meanwhile.
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
    let stop = Arc::new(AtomicBool::new(false));
    let (wa, wb) = (
        watch_degraded(a.engine.clone(), Arc::clone(&stop)),
        watch_degraded(b.engine.clone(), Arc::clone(&stop)),
    );
    let (ta, tb) = (load(a), load(b));
    let (a, b) = (ta.await.unwrap(), tb.await.unwrap());
    stop.store(true, Ordering::Relaxed);
    let (degraded_a, degraded_b) = (wa.await.unwrap(), wb.await.unwrap());
    let probes = groq.request_count() - before;
    // The bound is counted from time measured, not assumed: the load ran
    // 2 s and then some (a request started just before 2 s ends later, the
    // more so on a busy machine). While Redis answers, every probe holds
    // the fleet's lock (`SET NX PX` = the cooldown, timed by Redis), so
    // the probes' lock times are at least a cooldown apart: at most
    // `span / cooldown + 1` of them in the span. Two instances probing on
    // their own would make twice as many.
    let span = opened.elapsed();
    let windows = (span.as_secs_f64() / COOLDOWN.as_secs_f64()).ceil() as usize;
    // While an instance's Redis calls fail (a call over its 250 ms bound
    // on a loaded machine, say), it probes on its local breaker without
    // the lock, by design: at most one probe per local cooldown during
    // each stretch it was seen degraded. A run where Redis kept up allows
    // nothing extra.
    let unlocked: usize = degraded_a
        .iter()
        .chain(&degraded_b)
        .map(|d| (d.as_secs_f64() / COOLDOWN.as_secs_f64()).floor() as usize + 1)
        .sum();
    eprintln!(
        "probes across the fleet in {span:?}: {probes} ({windows} cooldown windows; \
         Redis degraded in A {degraded_a:?}, in B {degraded_b:?}: {unlocked} unlocked allowed)"
    );
    assert!(
        probes <= windows + 1 + unlocked,
        "{probes} probes in {span:?} ({windows} windows, {unlocked} allowed while Redis was \
         degraded: A {degraded_a:?}, B {degraded_b:?}) across two instances"
    );
    assert!(probes >= 2, "the breaker kept probing ({probes})");

    // Groq recovers: one instance's probe closes it, and both follow.
    groq.always(Reply::text("back"));
    eventually("A back on groq", async || {
        a.engine.generate(ask()).await.unwrap().provider == "groq"
    })
    .await;
    eventually("B back on groq", async || {
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
    // Each instance adds its spend to the fleet's without waiting: wait
    // for it to land before the other reads it.
    assert_eq!(a.engine.generate(ask()).await.unwrap().provider, "openai");
    eventually("A's spend in Redis", async || {
        match fleet_spend(&redis).await {
            usd if usd >= 0.005 - 1e-9 => Ok(()),
            usd => Err(format!("{usd} USD")),
        }
    })
    .await;
    assert_eq!(b.engine.generate(ask()).await.unwrap().provider, "openai");
    eventually("B's spend in Redis", async || {
        match fleet_spend(&redis).await {
            usd if usd >= 0.01 - 1e-9 => Ok(()),
            usd => Err(format!("{usd} USD")),
        }
    })
    .await;
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
    // A writes the entry without waiting: wait for it to land.
    eventually("A's cache entry in Redis", async || {
        !redis_values(&redis, "understudy:cache:*").await.is_empty()
    })
    .await;
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
    assert!(redis_degraded(&a.engine).await, "A shows Redis degraded");

    // Redis is back: each instance returns to shared state by itself.
    redis.restart().unwrap();
    eventually("the degradation to clear", async || {
        !redis_degraded(&a.engine).await
    })
    .await;
    groq.always(Reply::status(503));
    let mut n = 1000;
    eventually("A to share again", async || {
        n += 1;
        a.engine.generate(unique(n)).await.unwrap();
        groq_breaker(&b).await == BreakerState::Open
    })
    .await;
    assert!(!redis_degraded(&a.engine).await, "A shows Redis back");
}
