//! Sessions keep their prompt cache, over real HTTP against Anthropic
//! simulators: a session's turns stay on the target that first served it;
//! a failover moves it once and it stays, even after the first target
//! recovers; a rate limit on a session with a large cached prefix is
//! waited out, with a tiny one it moves (the event says which and what the
//! switch would have cost); two instances on one `redis-server` agree.

use serde_json::json;
use understudy_core::GenerationEvent;
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, UsageDetail, eventually};

use crate::common::{Answer, TestServer};

/// A gateway whose default route is `a` then `b` (both Anthropic, an
/// ordered list of equivalent targets, so opted in to affinity), with
/// `redis` when given.
async fn gateway(a: &SimProvider, b: &SimProvider, redis: Option<&RedisServer>) -> TestServer {
    let mut builder = TestGateway::builder()
        .provider("a", a)
        .provider("b", b)
        .toml("[affinity]\nroutes = [\"default\"]\n")
        .affinity(true);
    if let Some(redis) = redis {
        builder = builder.env("REDIS_URL", &redis.url());
    }
    TestServer::start(builder.build().await.unwrap().engine).await
}

/// Turn `n` of a conversation whose session `header` names.
async fn turn(s: &TestServer, header: (&str, &str), n: usize) -> Answer {
    let mut messages = vec![json!({"role": "user", "content": "Plan the release."})];
    for i in 1..n {
        messages.push(json!({"role": "assistant", "content": format!("step {i}")}));
        messages.push(json!({"role": "user", "content": "go on"}));
    }
    let body = json!({
        "model": "default", "max_tokens": 64,
        "system": "You are a release manager.",
        "messages": messages,
    });
    let headers = [("anthropic-version", "2023-06-01"), header];
    let a = s
        .post_with("/v1/messages", &headers, body.to_string())
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    a
}

/// Who served `a`.
fn served_by(a: &Answer) -> &str {
    a.headers["x-understudy-provider"].to_str().unwrap()
}

/// The event of the request `a` answered.
async fn event_of(s: &TestServer, a: &Answer) -> GenerationEvent {
    let id = a.headers["x-request-id"].to_str().unwrap().to_owned();
    eventually("the request's event", async || {
        s.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| *e.request_id == *id)
    })
    .await
}

/// The affinity outcome of `a`'s event.
async fn outcome(s: &TestServer, a: &Answer) -> String {
    let e = event_of(s, a).await;
    e.affinity
        .map(|n| n.outcome.into_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stays_where_it_was_served_and_moves_once() {
    let a = SimProvider::anthropic().await.unwrap();
    let b = SimProvider::anthropic().await.unwrap();
    let s = gateway(&a, &b, None).await;
    let one = ("x-understudy-session", "session-one");
    let two = ("x-claude-code-session-id", "session-two");
    // Session one's first turn finds `a` out: `b` serves and keeps it.
    a.push(Reply::status(503));
    let first = turn(&s, one, 1).await;
    assert_eq!(served_by(&first), "b");
    assert_eq!(outcome(&s, &first).await, "new");
    // Session two starts on `a`, the route's primary.
    let started = turn(&s, two, 1).await;
    assert_eq!(served_by(&started), "a");
    for n in 2..5 {
        let on_one = turn(&s, one, n).await;
        assert_eq!(served_by(&on_one), "b", "session one, turn {n}");
        assert_eq!(outcome(&s, &on_one).await, "hit");
        assert_eq!(
            served_by(&turn(&s, two, n).await),
            "a",
            "session two, turn {n}"
        );
    }
    // A streamed turn stays too, and its end refreshes the pin.
    let body = json!({
        "model": "default", "max_tokens": 64, "stream": true,
        "system": "You are a release manager.",
        "messages": [{"role": "user", "content": "Plan the release."}],
    });
    let headers = [("anthropic-version", "2023-06-01"), one];
    let streamed = s
        .post_with("/v1/messages", &headers, body.to_string())
        .await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert_eq!(served_by(&streamed), "b");
    assert_eq!(outcome(&s, &streamed).await, "hit");
    assert_eq!(served_by(&turn(&s, one, 5).await), "b");
    // Mid-session, `a` fails: session two moves to `b` once…
    a.push(Reply::status(503));
    let moved = turn(&s, two, 5).await;
    assert_eq!(served_by(&moved), "b");
    let e = event_of(&s, &moved).await;
    let note = e.affinity.unwrap();
    assert_eq!(note.outcome, "moved");
    let pinned = note.pinned.as_ref().map(ToString::to_string);
    assert_eq!(pinned.as_deref(), Some("a:a-model"));
    assert_eq!(note.source, "client_header");
    assert!(!note.session.contains("session"), "a hash, not the value");
    // …and stays there though `a` answers again.
    let a_before = a.request_count();
    for n in 6..9 {
        let later = turn(&s, two, n).await;
        assert_eq!(served_by(&later), "b", "session two, turn {n}");
        assert_eq!(outcome(&s, &later).await, "hit");
    }
    assert_eq!(a.request_count(), a_before, "the session never flips back");
    let metrics = s.engine.metrics_text(false).await;
    for outcome in ["new", "hit", "moved"] {
        assert!(
            metrics.contains(&format!(
                "understudy_affinity_total{{outcome=\"{outcome}\"}}"
            )),
            "{outcome}: {metrics}"
        );
    }
}

/// A session whose first turn left `cached` tokens in `a`'s cache, then
/// `wait` (a 429 or a 529, with `Retry-After: 2`) on its second turn: who
/// served, and the event.
async fn told_to_wait_with(wait: Reply, cached: u64) -> (String, GenerationEvent) {
    let a = SimProvider::anthropic().await.unwrap();
    let b = SimProvider::anthropic().await.unwrap();
    a.with_usage_detail(UsageDetail {
        cache_read: cached,
        ..UsageDetail::default()
    });
    let s = gateway(&a, &b, None).await;
    let session = ("x-understudy-session", "agent-7");
    assert_eq!(served_by(&turn(&s, session, 1).await), "a");
    a.push(wait);
    let second = turn(&s, session, 2).await;
    (served_by(&second).to_owned(), event_of(&s, &second).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_waited_out_for_a_large_cache_and_left_for_a_tiny_one() {
    // 50 000 cached tokens at the assumed $3 per million: leaving costs
    // 50 000 × 3e-6 × (0.9 + 0.25) ≈ $0.17, more than 2 s at $0.01.
    let (served, e) = told_to_wait_with(Reply::rate_limited("2"), 50_000).await;
    assert_eq!(served, "a", "waited and stayed");
    let note = e.affinity.unwrap();
    assert_eq!(note.wait_or_switch.as_deref(), Some("wait"));
    assert_eq!(note.outcome, "hit");
    let cost = note.switch_cost_usd.unwrap();
    assert!((0.15..0.2).contains(&cost), "{cost}");
    // 100 cached tokens: leaving costs a third of a tenth of a cent.
    let (served, e) = told_to_wait_with(Reply::rate_limited("2"), 100).await;
    assert_eq!(served, "b", "switched");
    let note = e.affinity.unwrap();
    assert_eq!(note.wait_or_switch.as_deref(), Some("switch"));
    assert_eq!(note.outcome, "moved");
    assert!(note.switch_cost_usd.unwrap() < 0.02);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overload_that_says_when_is_weighed_like_a_rate_limit() {
    // Anthropic's 529 `overloaded_error` with `Retry-After: 2`: the large
    // cache waits and stays, the tiny one leaves at once.
    let (served, e) = told_to_wait_with(Reply::overloaded(529, "2"), 50_000).await;
    assert_eq!(served, "a", "waited and stayed");
    let note = e.affinity.unwrap();
    assert_eq!(note.wait_or_switch.as_deref(), Some("wait"));
    assert_eq!(note.outcome, "hit");
    let kinds: Vec<_> = e.attempts.iter().map(|a| a.kind.as_str()).collect();
    assert_eq!(kinds, ["primary", "rate_limit_retry"], "{:?}", e.attempts);
    let (served, e) = told_to_wait_with(Reply::overloaded(529, "2"), 100).await;
    assert_eq!(served, "b", "switched");
    assert_eq!(
        e.affinity.unwrap().wait_or_switch.as_deref(),
        Some("switch")
    );
}

/// The same with `a` a pool of two keys that both answer 429 with
/// `Retry-After: 2`: the pool's whole rest is the wait that is weighed.
async fn pool_rate_limited_with(cached: u64) -> (String, GenerationEvent) {
    let a = SimProvider::anthropic().await.unwrap();
    let b = SimProvider::anthropic().await.unwrap();
    a.with_usage_detail(UsageDetail {
        cache_read: cached,
        ..UsageDetail::default()
    });
    let builder = TestGateway::builder()
        .provider("b", &b)
        .order(&["a", "b"])
        .toml(&format!(
            "[providers.a]\nkind = \"anthropic\"\nbase_url = {:?}\nmodel = \"m\"\n\
             api_keys = [\"sk-ant-one\", \"sk-ant-two\"]\n\
             [affinity]\nroutes = [\"default\"]\n",
            a.base_url()
        ))
        .affinity(true);
    let s = TestServer::start(builder.build().await.unwrap().engine).await;
    let session = ("x-understudy-session", "agent-9");
    assert_eq!(served_by(&turn(&s, session, 1).await), "a");
    a.push_n(2, Reply::rate_limited("2"));
    let second = turn(&s, session, 2).await;
    (served_by(&second).to_owned(), event_of(&s, &second).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_resting_every_key_is_weighed_as_a_rate_limit() {
    // Both keys rest for 2 s: with a large cache the request waits for the
    // pool and stays; with a tiny one it leaves at once.
    let (served, e) = pool_rate_limited_with(50_000).await;
    assert_eq!(served, "a", "waited for the pool and stayed");
    assert_eq!(e.affinity.unwrap().wait_or_switch.as_deref(), Some("wait"));
    let (served, e) = pool_rate_limited_with(100).await;
    assert_eq!(served, "b", "switched");
    assert_eq!(
        e.affinity.unwrap().wait_or_switch.as_deref(),
        Some("switch")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_keep_a_session_on_one_target() {
    let redis = RedisServer::start().unwrap();
    let a = SimProvider::anthropic().await.unwrap();
    let b = SimProvider::anthropic().await.unwrap();
    let one = gateway(&a, &b, Some(&redis)).await;
    let two = gateway(&a, &b, Some(&redis)).await;
    let session = ("x-claude-code-session-id", "fleet-session");
    // The first turn lands on `b` (a is out for it); every later turn, on
    // either instance, follows.
    a.push(Reply::status(503));
    assert_eq!(served_by(&turn(&one, session, 1).await), "b");
    let a_before = a.request_count();
    for n in 2..8 {
        let instance = if n % 2 == 0 { &two } else { &one };
        let answer = turn(instance, session, n).await;
        assert_eq!(served_by(&answer), "b", "turn {n}");
        assert_eq!(outcome(instance, &answer).await, "hit", "turn {n}");
    }
    assert_eq!(a.request_count(), a_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_response_carries_its_session_to_the_next_turn() {
    let a = SimProvider::anthropic().await.unwrap();
    let b = SimProvider::anthropic().await.unwrap();
    let s = gateway(&a, &b, None).await;
    // The first turn names its session and lands on `b` (a is out).
    a.push(Reply::status(503));
    let body = json!({"model": "default", "input": "Plan the release."});
    let first = s
        .post_with(
            "/v1/responses",
            &[("session_id", "codex-thread")],
            body.to_string(),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(served_by(&first), "b");
    // The next turn names only the response it continues.
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let body = json!({"model": "default", "input": "go on", "previous_response_id": id});
    let next = s.post("/v1/responses", body.to_string()).await;
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(served_by(&next), "b");
    let note = event_of(&s, &next).await.affinity.unwrap();
    assert_eq!(
        (&*note.source, &*note.outcome),
        ("previous_response", "hit")
    );
}
