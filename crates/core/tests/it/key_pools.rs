//! Key pools through real HTTP: several keys behind one target, each key's
//! own failures kept to it (the next key of the same target serves before
//! any fallback), and the budgets a provider reports steering requests
//! away from a key before it answers 429; a fleet knowing a key by its
//! secret, wherever the key sits in each instance's list; a request in
//! flight across a reload that reorders the keys keeps its pool's keys.

use std::time::Duration;

use understudy_core::{GenerateRequest, Generation};
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, eventually};
use understudy_types::{ChatRequest, StreamItem};

const A: &str = "sk-pool-key-a-0001";
const B: &str = "sk-pool-key-b-0002";
const C: &str = "sk-pool-key-c-0003";

/// A pool of `keys` on `pool`'s simulator, with `fallback` behind it.
async fn gateway(
    pool: &SimProvider,
    keys: &[&str],
    fallback: &SimProvider,
    extra: &str,
) -> TestGateway {
    gateway_with(pool, keys, fallback, extra, &[]).await
}

/// The same with these environment variables.
async fn gateway_with(
    pool: &SimProvider,
    keys: &[&str],
    fallback: &SimProvider,
    extra: &str,
    env: &[(&str, &str)],
) -> TestGateway {
    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    let mut builder = TestGateway::builder();
    for (k, v) in env {
        builder = builder.env(k, v);
    }
    builder
        .provider("openai", fallback)
        .order(&["pool", "openai"])
        .toml(&format!(
            "[providers.pool]\nkind = {:?}\nbase_url = {:?}\nmodel = \"m\"\napi_keys = [{}]\n{extra}",
            pool.protocol().as_str(),
            pool.base_url(),
            keys.join(", ")
        ))
        .build()
        .await
        .unwrap()
}

async fn ask(gw: &TestGateway) -> Generation {
    gw.engine
        .generate(GenerateRequest::new(ChatRequest::user("hello")))
        .await
        .unwrap()
}

fn sent_with(sim: &SimProvider, key: &str) -> usize {
    sim.received()
        .iter()
        .filter(|r| r.api_key() == Some(key))
        .count()
}

#[tokio::test]
async fn a_rate_limited_key_waits_out_its_retry_after_alone() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.respond_with(|r| match r.api_key() {
        Some(A) => Reply::Status {
            status: 429,
            body: String::new(),
            headers: vec![("retry-after".into(), "30".into())],
        },
        _ => Reply::text("from b"),
    });
    let gw = gateway(&pool, &[A, B], &fallback, "").await;
    for _ in 0..20 {
        let g = ask(&gw).await;
        assert_eq!((g.provider.as_str(), g.fell_back), ("pool", false), "{g:?}");
        assert_eq!(g.text, "from b");
        // A 429 on key A is followed by key B of the same target at once.
        if let [first, second] = &g.attempts[..] {
            assert_eq!(first.key.as_deref(), Some("key-1"));
            assert_eq!(first.outcome.as_str(), "rate_limited");
            assert_eq!(second.key.as_deref(), Some("key-2"));
            assert_eq!(second.kind.as_str(), "primary");
        } else {
            assert_eq!(g.attempts.len(), 1, "{:?}", g.attempts);
            assert_eq!(g.attempts[0].key.as_deref(), Some("key-2"));
        }
    }
    // Key A was called once: not again within its 30 s.
    assert!(sent_with(&pool, A) <= 1, "{}", sent_with(&pool, A));
    assert_eq!(fallback.request_count(), 0);
    let status = gw.engine.providers().await.unwrap();
    let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
    if sent_with(&pool, A) == 1 {
        assert_eq!(keys[0].out, Some("rate_limited"), "{keys:?}");
        assert!(keys[0].back_in_s.is_some_and(|s| s > 20.0), "{keys:?}");
    }
    assert!(keys[1].available, "{keys:?}");
}

#[tokio::test]
async fn a_refused_key_is_skipped_until_its_cooldown() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.respond_with(|r| match r.api_key() {
        Some(A) => Reply::status(401),
        _ => Reply::text("from b"),
    });
    let gw = gateway(&pool, &[A, B], &fallback, "key_cooldown = 60").await;
    for _ in 0..20 {
        let g = ask(&gw).await;
        assert_eq!((g.provider.as_str(), g.fell_back), ("pool", false), "{g:?}");
    }
    assert!(sent_with(&pool, A) <= 1);
    assert_eq!(sent_with(&pool, B), 20);
    assert_eq!(fallback.request_count(), 0);
}

#[tokio::test]
async fn an_outage_is_the_target_s_and_falls_back_at_once() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.always(Reply::status(503));
    let gw = gateway(&pool, &[A, B], &fallback, "").await;
    let g = ask(&gw).await;
    // One call to the target (on one key), then the fallback: a 5xx says
    // nothing about the key, and the other key is not tried.
    assert_eq!(g.provider, "openai");
    assert_eq!(pool.request_count(), 1, "{:?}", g.attempts);
    // Neither key is out: the target's breaker counts the outage.
    let status = gw.engine.providers().await.unwrap();
    let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
    assert!(keys.iter().all(|k| k.available), "{keys:?}");
}

#[tokio::test]
async fn a_key_whose_budget_reached_zero_takes_no_request_until_its_reset() {
    // OpenAI's headers (Go-duration resets) and Anthropic's (RFC 3339).
    for pool in [
        SimProvider::openai().await.unwrap(),
        SimProvider::anthropic().await.unwrap(),
    ] {
        let fallback = SimProvider::openai().await.unwrap();
        pool.limit_requests(A, 2, Duration::from_secs(20));
        pool.limit_requests(B, 1000, Duration::from_secs(20));
        let gw = gateway(&pool, &[A, B], &fallback, "").await;
        for _ in 0..40 {
            let g = ask(&gw).await;
            assert_eq!((g.provider.as_str(), g.fell_back), ("pool", false), "{g:?}");
            assert_eq!(g.attempts.len(), 1, "{:?}", g.attempts);
        }
        // A answered "0 left, reset in 20 s" on its second request and got
        // no third; no key ever saw a 429.
        let protocol = pool.protocol();
        assert!(
            sent_with(&pool, A) <= 2,
            "{protocol:?}: {}",
            sent_with(&pool, A)
        );
        assert_eq!(pool.over_limit(None), 0, "{protocol:?}");
        let status = gw.engine.providers().await.unwrap();
        let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
        if sent_with(&pool, A) == 2 {
            assert_eq!(keys[0].out, Some("budget"), "{protocol:?}: {keys:?}");
            assert_eq!(keys[0].requests_remaining, Some(0), "{keys:?}");
            assert!(keys[0].back_in_s.is_some_and(|s| s > 15.0), "{keys:?}");
        }
        assert_eq!(
            keys[1].requests_remaining,
            Some(1000 - sent_with(&pool, B) as u64)
        );
    }
}

#[tokio::test]
async fn three_keys_whose_limits_fit_the_load_see_no_429() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    // 1 200 a minute between them for 1 000 requests; spread evenly, key
    // A would get ~333 and answer 429 after its 150.
    let window = Duration::from_secs(300);
    pool.limit_requests(A, 150, window);
    pool.limit_requests(B, 350, window);
    pool.limit_requests(C, 700, window);
    let gw = gateway(&pool, &[A, B, C], &fallback, "").await;
    let engine = gw.engine.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..16 {
        let (engine, next) = (engine.clone(), next.clone());
        tasks.spawn(async move {
            let mut served = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 1000 {
                let g = engine
                    .generate(GenerateRequest::new(ChatRequest::user("hello")))
                    .await;
                served.push(g.map(|g| (g.provider, g.fell_back, g.attempts.len())));
            }
            served
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.unwrap());
    }
    assert_eq!(all.len(), 1000);
    for g in &all {
        assert_eq!(
            g.as_ref().ok(),
            Some(&("pool".to_owned(), false, 1)),
            "{g:?}"
        );
    }
    assert_eq!(pool.over_limit(None), 0);
    assert_eq!(fallback.request_count(), 0);
    let (a, b, c) = (
        sent_with(&pool, A),
        sent_with(&pool, B),
        sent_with(&pool, C),
    );
    assert_eq!(a + b + c, 1000);
    assert!(a <= 150 && b <= 350 && c <= 700, "{a} {b} {c}");
}

#[tokio::test]
async fn a_stream_refused_on_one_key_opens_on_the_next() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.respond_with(|r| match r.api_key() {
        Some(A) => Reply::status(429),
        _ => Reply::stream(&["from ", "b"]),
    });
    let gw = gateway(&pool, &[A, B], &fallback, "").await;
    for _ in 0..5 {
        let mut s = gw
            .engine
            .generate_stream(GenerateRequest::new(ChatRequest::user("hello")))
            .await
            .unwrap();
        assert_eq!((s.provider.as_str(), s.fell_back), ("pool", false));
        let mut text = String::new();
        while let Some(item) = s.next().await {
            match item {
                StreamItem::Delta(t) => text.push_str(&t),
                StreamItem::Done(done) => {
                    assert!(done.attempts.iter().all(|a| a.key.is_some()), "{done:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(text, "from b");
    }
    assert!(sent_with(&pool, A) <= 1);
    assert_eq!(fallback.request_count(), 0);
}

#[tokio::test]
async fn a_conversation_keeps_its_key() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    let gw = gateway(&pool, &[A, B, C], &fallback, "sticky = \"conversation\"").await;
    for conversation in 0..6 {
        let first = format!("conversation {conversation}: hello");
        let before = pool.request_count();
        for turn in 0..5 {
            let mut chat = ChatRequest::user(&first);
            for t in 0..turn {
                chat.messages
                    .push(understudy_types::chat::Message::assistant(format!(
                        "answer {t}"
                    )));
                chat.messages
                    .push(understudy_types::chat::Message::user(format!("turn {t}")));
            }
            gw.engine
                .generate(GenerateRequest::new(chat))
                .await
                .unwrap();
        }
        let keys: Vec<Option<String>> = pool.received()[before..]
            .iter()
            .map(|r| r.api_key().map(str::to_owned))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
    }
}

#[tokio::test]
async fn a_key_refused_on_one_instance_is_out_on_every_instance() {
    let redis = RedisServer::start().unwrap();
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.respond_with(|r| match r.api_key() {
        Some(A) => Reply::status(401),
        _ => Reply::text("from b"),
    });
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let one = gateway_with(&pool, &[A, B], &fallback, "", &env).await;
    let two = gateway_with(&pool, &[A, B], &fallback, "", &env).await;
    // Instance one meets key A's 401 (its first request, or a later one).
    eventually("instance one to call key A", async || {
        ask(&one).await;
        sent_with(&pool, A) == 1
    })
    .await;
    // Instance two hears of it through Redis, before calling A itself.
    eventually("instance two to hold key A out", async || {
        let status = two.engine.providers().await.unwrap();
        let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
        keys[0].out == Some("auth")
    })
    .await;
    for _ in 0..20 {
        assert_eq!(ask(&two).await.provider, "pool");
    }
    assert_eq!(sent_with(&pool, A), 1, "key A was called again");
}

#[tokio::test]
async fn the_fleet_knows_a_key_by_its_secret_not_its_place() {
    // Mid-rotation: instance two's list dropped B and put C first, so A is
    // its `key-2` where it is instance one's `key-1`.
    let redis = RedisServer::start().unwrap();
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    pool.respond_with(|r| match r.api_key() {
        Some(A) => Reply::status(401),
        _ => Reply::text("from another key"),
    });
    let url = redis.url();
    let env = [("REDIS_URL", url.as_str())];
    let one = gateway_with(&pool, &[A, B], &fallback, "", &env).await;
    let two = gateway_with(&pool, &[C, A], &fallback, "", &env).await;
    eventually("instance one to call key A", async || {
        ask(&one).await;
        sent_with(&pool, A) == 1
    })
    .await;
    eventually(
        "instance two to hold key A out, by its secret",
        async || {
            let status = two.engine.providers().await.unwrap();
            let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
            (keys[1].name == "key-2" && keys[1].out == Some("auth"))
                .then_some(())
                .ok_or(format!("{keys:?}"))
        },
    )
    .await;
    let status = two.engine.providers().await.unwrap();
    let keys = &status.iter().find(|p| p.name == "pool").unwrap().keys;
    assert!(keys[0].available, "key C was held out for A: {keys:?}");
    for _ in 0..10 {
        assert_eq!(ask(&two).await.provider, "pool");
    }
    assert_eq!(sent_with(&pool, A), 1, "key A was called again");
}

#[tokio::test]
async fn every_key_rate_limited_is_the_target_rate_limited() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    let limited = |secs: &str| Reply::Status {
        status: 429,
        body: String::new(),
        headers: vec![("retry-after".into(), secs.into())],
    };
    // Both keys answer 429 for 1 s: the request waits it out (within
    // `rate_limit.max_wait`) and the retry goes to the key back first.
    pool.push(limited("1"));
    pool.push(limited("1"));
    let gw = gateway(&pool, &[A, B], &fallback, "[rate_limit]\nmax_wait = 3").await;
    let g = ask(&gw).await;
    assert_eq!((g.provider.as_str(), g.fell_back), ("pool", false), "{g:?}");
    let kinds: Vec<&str> = g.attempts.iter().map(|a| a.kind.as_str()).collect();
    assert_eq!(kinds, ["primary", "primary", "rate_limit_retry"], "{g:?}");
    assert_eq!(pool.request_count(), 3);

    // Both out for 30 s, past the wait cap: the next request falls back
    // without calling either key again.
    pool.push(limited("30"));
    pool.push(limited("30"));
    let g = ask(&gw).await;
    assert_eq!(g.provider, "openai", "{g:?}");
    let before = pool.request_count();
    let g = ask(&gw).await;
    assert_eq!(g.provider, "openai", "{g:?}");
    assert_eq!(pool.request_count(), before, "a key out was called");
    let first = &g.attempts[0];
    assert_eq!(first.outcome.as_str(), "rate_limited");
    assert!(
        first
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("not called")),
        "{first:?}"
    );
}

/// The pool's settings, as [`gateway`] writes them, with `keys`.
fn pool_settings(
    pool: &SimProvider,
    keys: &[&str],
    fallback: &SimProvider,
) -> understudy_settings::Settings {
    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    TestGateway::builder()
        .provider("openai", fallback)
        .order(&["pool", "openai"])
        .toml(&format!(
            "[providers.pool]\nkind = {:?}\nbase_url = {:?}\nmodel = \"m\"\napi_keys = [{}]\n",
            pool.protocol().as_str(),
            pool.base_url(),
            keys.join(", ")
        ))
        .settings()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_in_flight_across_a_reload_that_reorders_the_keys_keeps_them_apart() {
    let pool = SimProvider::openai().await.unwrap();
    let fallback = SimProvider::openai().await.unwrap();
    // The first call is rate limited, answered once the reload below is
    // done (a reload takes milliseconds); every later call serves.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    pool.respond_with(move |_| {
        if calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            Reply::rate_limited("30").after(Duration::from_secs(3))
        } else {
            Reply::text("served")
        }
    });
    let gw = gateway(&pool, &[A, B], &fallback, "").await;
    let engine = gw.engine.clone();
    let asked = tokio::spawn(async move {
        engine
            .generate(GenerateRequest::new(ChatRequest::user("hello")))
            .await
            .unwrap()
    });
    eventually("the first call to be in flight", async || {
        pool.request_count() == 1
    })
    .await;
    // The same keys, the other way round: the provider is rebuilt.
    let stamp = understudy_core::ConfigStamp {
        sha256: "reordered".into(),
        loaded_at: "2026-12-06T00:00:00Z".into(),
    };
    let reloaded = gw
        .engine
        .reload(pool_settings(&pool, &[B, A], &fallback), stamp)
        .await
        .unwrap();
    assert_eq!(reloaded.providers.rebuilt, vec!["pool".to_owned()]);
    let g = asked.await.unwrap();
    assert_eq!(
        (g.provider.as_str(), g.text.as_str()),
        ("pool", "served"),
        "{g:?}"
    );
    // The retry went to the other key, under the name its plan gave it:
    // not the rate-limited key again through the new key order.
    let keys: Vec<_> = pool
        .received()
        .iter()
        .map(|r| r.api_key().map(str::to_owned))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_ne!(keys[0], keys[1], "{keys:?}");
    let names: Vec<_> = g.attempts.iter().map(|a| a.key.clone()).collect();
    assert_eq!(names.len(), 2, "{:?}", g.attempts);
    assert_ne!(names[0], names[1], "{:?}", g.attempts);
    assert_eq!(fallback.request_count(), 0);
}
