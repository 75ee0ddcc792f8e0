//! A client record's budget under concurrency, against the real server:
//! eight requests at once against `budget_usd = 0.05` are each reserved
//! their worst case at admission, so together they spend at most the
//! budget and one request's worst case, across two instances on one real
//! `redis-server` as on one instance alone; the rest get the 402.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, eventually_within};

use crate::common::{Answer, TestServer};

const ADMIN: &str = "admin-token-0123456789";
const KEY: &str = "sk-budget-team-0123456789";

/// One request's worst case: "hello there" (2 tokens at four characters a
/// token) and `max_tokens` 13, at USD 1 000 a million tokens: USD 0.015.
const WORST_NANOS: u64 = 15_000_000;
/// What one costs: the simulator counts words, 2 in and 10 out.
const COST_NANOS: u64 = 12_000_000;
const BUDGET_NANOS: u64 = 50_000_000;

/// An instance over `sim`, priced at USD 1 000 a million tokens, with the
/// budget record, on `redis` when given.
async fn instance(sim: &SimProvider, redis: Option<&str>) -> TestServer {
    let mut b = TestGateway::builder()
        .provider("groq", sim)
        .provider_option(
            "groq",
            "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }",
        )
        .toml(&format!(
            "[[server.clients]]\nname = \"budget-team\"\nkey = \"{KEY}\"\n\
             budget_usd = 0.05\nwindow = \"day\"\n"
        ))
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN);
    if let Some(url) = redis {
        b = b.env("REDIS_URL", url);
    }
    TestServer::start(b.build().await.unwrap().engine).await
}

/// A simulator whose every answer is ten words, slow enough that eight
/// requests sent together are all in flight together.
async fn slow_sim() -> SimProvider {
    let sim = SimProvider::openai().await.unwrap();
    sim.always(
        Reply::text("one two three four five six seven eight nine ten")
            .after(Duration::from_millis(300)),
    );
    sim
}

/// Eight requests at once, spread over `servers`.
async fn burst(servers: &[Arc<TestServer>]) -> Vec<Answer> {
    let mut all = tokio::task::JoinSet::new();
    for i in 0..8 {
        let s = Arc::clone(&servers[i % servers.len()]);
        all.spawn(async move {
            s.post_with(
                "/v1/chat/completions",
                &[("authorization", &format!("Bearer {KEY}"))],
                json!({"model": "default", "max_tokens": 13,
                       "messages": [{"role": "user", "content": "hello there"}]})
                .to_string(),
            )
            .await
        });
    }
    all.join_all().await
}

/// Checks a burst's answers: the budget holds exactly three worst cases
/// (three reserved leave USD 0.005; three settled leave USD 0.014), so
/// three are served whatever the order, and five get the 402.
fn check(answers: &[Answer]) {
    let served = answers.iter().filter(|a| a.status == 200).count();
    let refused: Vec<_> = answers.iter().filter(|a| a.status != 200).collect();
    assert_eq!(served, 3, "{:?}", refused.first().map(|a| &a.body));
    for r in refused {
        assert_eq!(r.status, 402, "{}", r.body);
        assert_eq!(r.header("x-should-retry"), Some("false"));
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("worst case of USD 0.015"),
            "the refusal says why: {message}"
        );
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The record's spend this day in Redis (nano-USD).
async fn spent_in_redis(url: &str) -> u64 {
    let key = format!(
        "understudy:{{client:budget-team}}:usd:{}",
        unix_secs() / 86_400
    );
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("GET")
        .arg(key)
        .query_async::<Option<u64>>(&mut c)
        .await
        .unwrap()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_at_once_behind_two_instances_stay_within_the_budget() {
    let redis = RedisServer::start().unwrap();
    let sim = slow_sim().await;
    let a = Arc::new(instance(&sim, Some(&redis.url())).await);
    let b = Arc::new(instance(&sim, Some(&redis.url())).await);
    let answers = burst(&[a, b]).await;
    check(&answers);
    assert_eq!(
        sim.request_count(),
        3,
        "no refused request reached a provider"
    );
    // Every reservation settled to what its answer cost.
    let spent = eventually_within(
        Duration::from_secs(20),
        "the three answers' cost in Redis",
        async || match spent_in_redis(&redis.url()).await {
            n if n == 3 * COST_NANOS => Ok(n),
            n => Err(format!("{n} nano-USD")),
        },
    )
    .await;
    assert!(spent <= BUDGET_NANOS + WORST_NANOS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_at_once_on_one_instance_without_redis_stay_within_the_budget() {
    let sim = slow_sim().await;
    let s = Arc::new(instance(&sim, None).await);
    let answers = burst(&[Arc::clone(&s)]).await;
    check(&answers);
    assert_eq!(sim.request_count(), 3);
    let spent = eventually_within(
        Duration::from_secs(20),
        "the three answers' cost",
        async || {
            let listed = s
                .get_with(
                    "/v1/admin/clients",
                    &[("authorization", &format!("Bearer {ADMIN}"))],
                )
                .await
                .json();
            let usd = listed["clients"][0]["usage"]["spent_usd"].as_f64().unwrap();
            let nanos = (usd * 1e9).round() as u64;
            if nanos == 3 * COST_NANOS {
                Ok(nanos)
            } else {
                Err(format!("{nanos} nano-USD"))
            }
        },
    )
    .await;
    assert!(spent <= BUDGET_NANOS + WORST_NANOS);
}
