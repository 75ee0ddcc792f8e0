//! A client record's counters in a real `redis-server`: a reservation
//! (tokens and the budget's worst case) settled there from the answer's
//! usage and cost, and spend made while Redis was away sent to the fleet
//! once it is back (never lost, never charged twice), by the instance's
//! sync without waiting for another admission; a budget count grown old
//! refuses nothing before the body is read.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use understudy_fleet::shared::SharedState;
use understudy_fleet::tenants::{Tenants, Used};
use understudy_record::sink::metrics::Metrics;
use understudy_settings::RawClient;
use understudy_settings::Settings;
use understudy_testkit::{RedisServer, SimProvider, TestGateway, eventually, eventually_within};
use understudy_types::{ChatRequest, RouteSelector};

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

/// A record whose budget is USD 1 a day.
fn budget_record() -> understudy_settings::ClientRecord {
    RawClient {
        name: Some("held".into()),
        key: Some("sk-held-0123456789abcdef".into()),
        budget_usd: Some(1.0),
        window: Some("day".into()),
        ..RawClient::default()
    }
    .read("", &|_| None)
    .unwrap()
}

/// One instance's counters on `redis`, holding `budget_record`.
fn instance(redis: &RedisServer) -> Arc<Tenants> {
    let mut server = Settings::load(None, |_| None).unwrap().server;
    server.clients = vec![budget_record()];
    let metrics = Arc::new(Metrics::new());
    let shared = Arc::new(SharedState::new(
        redis::Client::open(redis.url()).unwrap(),
        Arc::clone(&metrics),
    ));
    Arc::new(Tenants::new(&server, Some(shared), metrics))
}

/// 400 characters (100 tokens) and max_tokens 900, at USD 1 000 a million
/// tokens either way: a worst case of USD 1, the whole budget.
fn whole_budget() -> (ChatRequest, [(f64, f64); 1]) {
    let chat = ChatRequest {
        max_tokens: Some(900),
        ..ChatRequest::user("x".repeat(400))
    };
    (chat, [(1000.0, 1000.0)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_given_back_on_another_instance_is_not_refused_early_for_long() {
    let redis = RedisServer::start().unwrap();
    let (a, b) = (instance(&redis), instance(&redis));
    let (ra, rb) = (a.named("held").unwrap(), b.named("held").unwrap());
    let (chat, priced) = whole_budget();
    // B's request in flight holds the whole budget; A reads the fleet's
    // count at its admission, and refuses early from it.
    let held = b
        .admit(&rb, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    let refused = a
        .admit(&ra, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("budget"), "{refused}");
    assert!(a.spent(&ra).is_err(), "refused early from a fresh count");
    // B gives it back; A never hears of it but by its next admission.
    held.settle(Used::Nothing);
    let usd = format!("understudy:{{client:held}}:usd:{}", unix() / 86_400);
    eventually("B's give-back in Redis", async || {
        get(&redis, &usd).await == Some(0)
    })
    .await;
    // A's count grows old, so the request reaches admission, which reads
    // the fleet again and admits it.
    eventually_within(
        Duration::from_secs(20),
        "A lets the key through",
        async || a.spent(&ra).is_ok(),
    )
    .await;
    let ticket = a
        .admit(&ra, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    ticket.settle(Used::Nothing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_redis_missed_reaches_it_without_another_admission() {
    let mut redis = RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &sim)
        .env("REDIS_URL", &redis.url())
        .toml(
            "[[server.clients]]\nname = \"held\"\nkey = \"sk-held-0123456789abcdef\"\n\
             budget_usd = 1.0\nwindow = \"day\"\n",
        )
        .build()
        .await
        .unwrap();
    let tenants = gw.engine.tenants();
    let record = tenants.named("held").unwrap();
    let (chat, priced) = whole_budget();
    let usd = format!("understudy:{{client:held}}:usd:{}", unix() / 86_400);
    let held = tenants
        .admit(&record, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    assert_eq!(get(&redis, &usd).await, Some(1_000_000_000));
    // Redis goes away as the request ends: its give-back is kept here.
    redis.stop();
    held.settle(Used::Nothing);
    let wait = Duration::from_secs(20);
    eventually_within(wait, "the give-back kept for the fleet", async || {
        tenants.unsent_nanos(&record) == Some(-1_000_000_000)
    })
    .await;
    redis.restart().unwrap();
    // No admission of the record: the instance's sync sends it.
    eventually_within(wait, "the give-back in Redis", async || {
        get(&redis, &usd).await == Some(0)
    })
    .await;
    assert_eq!(tenants.unsent_nanos(&record), None);
    // A request that ends where no runtime runs (the process stopping)
    // keeps its give-back for the sync as well.
    let held = tenants
        .admit(&record, &RouteSelector::Default, &chat, &priced)
        .await
        .unwrap();
    assert_eq!(get(&redis, &usd).await, Some(1_000_000_000));
    std::thread::spawn(move || held.settle(Used::Nothing))
        .join()
        .unwrap();
    eventually_within(wait, "the give-back made without a runtime", async || {
        get(&redis, &usd).await == Some(0)
    })
    .await;
    gw.engine.shutdown().await;
}
