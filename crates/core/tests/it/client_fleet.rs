//! A client record's counters in a real `redis-server`: a reservation
//! (tokens and the budget's worst case) settled there from the answer's
//! usage and cost, and spend made while Redis was away sent to the fleet
//! once it is back (never lost, never charged twice).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use understudy_core::settings::RawClient;
use understudy_core::shared::SharedState;
use understudy_core::sink::metrics::Metrics;
use understudy_core::tenants::{Tenants, Used};
use understudy_core::{ChatRequest, RouteSelector, Settings};
use understudy_testkit::{RedisServer, eventually_within};

fn unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn get(redis: &RedisServer, key: &str) -> Option<u64> {
    let client = redis::Client::open(redis.url()).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    redis::cmd("GET")
        .arg(key)
        .query_async::<Option<u64>>(&mut conn)
        .await
        .ok()?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_reach_redis_and_spend_made_while_it_was_away_follows() {
    let mut redis = RedisServer::start().unwrap();
    let record = RawClient {
        name: Some("fleet-team".into()),
        key: Some("sk-fleet-team-0123456789".into()),
        tpm: Some(100_000),
        budget_usd: Some(10.0),
        window: Some("day".into()),
        ..RawClient::default()
    }
    .read("", &|_| None)
    .unwrap();
    let mut server = Settings::load(None, |_| None).unwrap().server;
    server.clients = vec![record];
    let metrics = Arc::new(Metrics::new());
    let shared = Arc::new(SharedState::new(
        redis::Client::open(redis.url()).unwrap(),
        Arc::clone(&metrics),
    ));
    let tenants = Arc::new(Tenants::new(&server, Some(shared), metrics));
    let record = tenants.named("fleet-team").unwrap();
    // 400 characters (100 tokens) and max_tokens 900: 1 000 reserved.
    let chat = ChatRequest {
        max_tokens: Some(900),
        ..ChatRequest::user("x".repeat(400))
    };
    let minute = unix() / 60;
    let (tpm, usd) = (
        format!("understudy:{{client:fleet-team}}:tpm:{minute}"),
        format!("understudy:{{client:fleet-team}}:usd:{}", unix() / 86_400),
    );
    // At USD 1 000 a million tokens either way the worst case is USD 1.
    let priced = [(1000.0, 1000.0)];
    let ticket = tenants
        .admit(&record, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    let same_minute = || unix() / 60 == minute;
    if same_minute() {
        assert_eq!(get(&redis, &tpm).await, Some(1000));
    }
    assert_eq!(
        get(&redis, &usd).await,
        Some(1_000_000_000),
        "the worst case reserved at admission"
    );
    ticket.settle(Used::Known {
        tokens: 150,
        cost_usd: 0.25,
    });
    let wait = Duration::from_secs(20);
    eventually_within(wait, "the cost in Redis for the reservation", async || {
        get(&redis, &usd).await == Some(250_000_000)
    })
    .await;
    if same_minute() {
        assert_eq!(get(&redis, &tpm).await, Some(150), "the estimate replaced");
    }
    // Redis away: admitted and settled here; the fleet hears of the spend
    // with the next admission that reaches it, once.
    redis.stop();
    let local = tenants
        .admit(&record, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    local.settle(Used::Known {
        tokens: 100,
        cost_usd: 0.25,
    });
    redis.restart().unwrap();
    assert_eq!(
        get(&redis, &usd).await,
        Some(250_000_000),
        "kept over the restart"
    );
    eventually_within(wait, "the spend made while Redis was away", async || {
        // An admission that reaches Redis sends what it did not hear of.
        let t = tenants
            .admit(&record, &RouteSelector::Default, &chat, &[])
            .await;
        if let Ok(t) = t {
            t.settle(Used::Nothing);
        }
        get(&redis, &usd).await == Some(500_000_000)
    })
    .await;
    if same_minute() {
        // The local reservation never touched Redis's tokens.
        let tokens = get(&redis, &tpm).await.unwrap_or(0);
        assert!(tokens <= 150 + 1000, "{tokens}");
    }
}
