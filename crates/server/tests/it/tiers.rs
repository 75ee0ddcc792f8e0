//! Tiers of equivalent targets over real HTTP: a route step that is a group
//! of simulators with weights, the group choice's split by weight, a member
//! slow to first output avoided, a member failing half its calls ejected,
//! a failure moving to the next member of the group before the next step,
//! and what `/v1/status` and the admin API show of groups (a group's own
//! hedge included).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{Reply, SimProvider, TestGateway};

use crate::common::TestServer;

/// `n` OpenAI-compatible simulators named `a`, `b`, `c`, … and a gateway
/// whose settings add `toml`.
async fn setup(n: usize, toml: &str) -> (Vec<SimProvider>, TestServer) {
    let mut sims = Vec::new();
    for _ in 0..n {
        sims.push(SimProvider::openai().await.unwrap());
    }
    let names = ["a", "b", "c", "d"];
    let mut builder = TestGateway::builder();
    for (name, sim) in names.iter().zip(&sims) {
        builder = builder.provider(name, sim);
    }
    let gw = builder.toml(toml).build().await.unwrap();
    (sims, TestServer::start(gw.engine).await)
}

/// One chat request on route `route`; its status.
async fn ask(server: &TestServer, route: &str) -> u16 {
    let body = json!({"model": route, "messages": [{"role": "user", "content": "hi"}]});
    server
        .post("/v1/chat/completions", body.to_string())
        .await
        .status
}

/// The share of all requests each simulator received.
fn shares(sims: &[SimProvider]) -> Vec<f64> {
    let counts: Vec<usize> = sims.iter().map(SimProvider::request_count).collect();
    let total: usize = counts.iter().sum();
    counts
        .iter()
        .map(|&c| c as f64 / total.max(1) as f64)
        .collect()
}

/// The status's entry for target `provider` (its model: `m`).
async fn member(server: &TestServer, provider: &str) -> Value {
    let status: Value = serde_json::from_str(&server.get("/v1/status").await.body).unwrap();
    status["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["provider"] == provider)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_weighted_group_splits_by_its_weights() {
    let (sims, server) = setup(
        3,
        "[routes]\ntier = [{ group = [\"a:m\", \"b:m\", \"c:m\"], weights = [2, 1, 1] }]\n",
    )
    .await;
    // Alike members answer alike: each after the same 40 ms, so that a
    // loaded machine's pauses (a few ms to tens of ms, smoothed) stay far
    // from making one member clearly cheaper (1.5 times and 10 ms), which
    // is what the choice would rightly act on.
    for sim in &sims {
        sim.always(Reply::text("alike").after(Duration::from_millis(40)));
    }
    for _ in 0..300 {
        assert_eq!(ask(&server, "tier").await, 200);
    }
    let got = shares(&sims);
    eprintln!("2:1:1 group over 300 requests: {got:?}");
    // Within a tenth of each weight's share: the seeds are a low-discrepancy
    // sequence, so alike members split by their weights over any run of
    // requests, not only on average.
    for (share, want) in got.iter().zip([0.5, 0.25, 0.25]) {
        assert!((share - want).abs() <= want / 10.0, "{got:?}");
    }
    // The status shows each member's smoothed time to first output.
    let a = member(&server, "a").await;
    assert!(a["ttft_ms"].as_f64().is_some(), "{a}");
    assert_eq!(a["in_flight"], 0);
    let metrics = server.get("/metrics").await.body;
    assert!(
        metrics.contains("understudy_balance_choices_total{route=\"tier\",provider=\"a\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_member_five_times_slower_to_answer_is_avoided() {
    let (sims, server) = setup(
        3,
        "[routes]\ntier = [{ group = [\"a:m\", \"b:m\", \"c:m\"] }]\n",
    )
    .await;
    let fast = Duration::from_millis(20);
    sims[0].always(Reply::text("fast").after(fast));
    sims[1].always(Reply::text("slow").after(fast * 5));
    sims[2].always(Reply::text("fast").after(fast));
    let n = 150;
    for _ in 0..n {
        assert_eq!(ask(&server, "tier").await, 200);
    }
    let got = shares(&sims);
    // Round robin (equal weights, no health) would give each a third: the
    // mean time to answer would be (20 + 100 + 20) / 3 ms.
    let balanced_ms = 20.0 * (got[0] + got[2]) + 100.0 * got[1];
    eprintln!(
        "one member 5x slower, {n} requests: shares {got:?}; mean answer time \
         {balanced_ms:.1} ms balanced, {:.1} ms round robin (shares 1/3 each)",
        140.0 / 3.0
    );
    assert!(got[1] <= 0.10, "{got:?}");
}

#[tokio::test]
async fn a_member_failing_half_its_calls_is_ejected() {
    let (sims, server) = setup(
        2,
        "[breaker]\nfailure_threshold = 0\n[routes]\ntier = [{ group = [\"a:m\", \"b:m\"] }]\n",
    )
    .await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    sims[1].respond_with(move |_| match seen.fetch_add(1, Ordering::Relaxed) % 2 {
        0 => Reply::status(503),
        _ => Reply::text("every other"),
    });
    let mut ejected_at = None;
    for _ in 0..200 {
        // A failure moves to the other member: every request is served.
        assert_eq!(ask(&server, "tier").await, 200);
        if member(&server, "b").await["ejected"] == true {
            ejected_at = Some(calls.load(Ordering::Relaxed));
            break;
        }
    }
    let ejected_at = ejected_at.expect("the failing member is ejected");
    eprintln!("a member failing every other call: ejected after {ejected_at} calls to it");
    assert!(ejected_at <= 20, "{ejected_at}");
    // Ejected: it gets only its floor of the group's first places.
    let before = calls.load(Ordering::Relaxed);
    for _ in 0..50 {
        assert_eq!(ask(&server, "tier").await, 200);
    }
    let during = calls.load(Ordering::Relaxed) - before;
    assert!(during <= 6, "{during} calls while ejected");
}

#[tokio::test]
async fn a_failure_moves_to_the_next_member_before_the_next_step() {
    let (sims, server) = setup(
        3,
        "[breaker]\nfailure_threshold = 0\n[routes]\ntier = [{ group = [\"a:m\", \"b:m\"] }, \"c:m\"]\n",
    )
    .await;
    sims[0].always(Reply::status(503));
    for _ in 0..30 {
        assert_eq!(ask(&server, "tier").await, 200);
    }
    assert!(
        sims[0].request_count() >= 1,
        "the failing member was chosen"
    );
    assert_eq!(
        sims[1].request_count(),
        30,
        "the group's other member served"
    );
    assert_eq!(sims[2].request_count(), 0, "the next step was never needed");
}

#[tokio::test]
async fn the_admin_api_keeps_groups_and_replaces_them_with_plain_lists() {
    const TOKEN: &str = "admin-token-0123456789";
    let sim = SimProvider::openai().await.unwrap();
    let other = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("a", &sim)
        .provider("b", &other)
        .env("UNDERSTUDY_ADMIN_TOKEN", TOKEN)
        .toml(
            "[routes]\ntier = [{ group = [\"a:m\", \"b:m\"], weights = [3, 1], \
             hedge = { after = \"p95\", fallback = \"800ms\" } }]\n",
        )
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let c = understudy_testkit::http_client();
    let url = format!("{}/v1/admin/routing", server.url);
    let put = |body: Value| {
        c.put(&url)
            .header("content-type", "application/json")
            .bearer_auth(TOKEN)
            .body(body.to_string())
            .send()
    };
    let table: Value = c
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap();
    // The group's hedge is written back in the file's shape too.
    let grouped = json!([{
        "group": ["a:m", "b:m"],
        "weights": [3, 1],
        "hedge": {"after": "p95", "fallback": "800ms"},
    }]);
    assert_eq!(table["routes"]["tier"], grouped);
    // What was read writes back unchanged: the group stays.
    let answer = put(json!({"routes": table["routes"]})).await.unwrap();
    assert_eq!(answer.status(), 200);
    let table: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(table["routes"]["tier"], grouped);
    // A plain list has no group.
    let answer = put(json!({"routes": {"tier": ["a:m", "b:m"]}}))
        .await
        .unwrap();
    let table: Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(table["routes"]["tier"], json!(["a:m", "b:m"]));
    let bad = json!({"routes": {"tier": [{"group": ["a:m"], "weights": [1, 2]}]}});
    let answer = put(bad).await.unwrap();
    assert_eq!(answer.status(), 400);
    let text = answer.text().await.unwrap();
    assert!(text.contains("weights"), "{text}");
    let bad = json!({"routes": {"tier": [{"group": ["a:m"], "hedge": {"after": "soon"}}]}});
    let answer = put(bad).await.unwrap();
    assert_eq!(answer.status(), 400);
    let text = answer.text().await.unwrap();
    assert!(text.contains("tier[0].hedge.after"), "{text}");
}

#[tokio::test]
async fn a_pattern_routes_group_keeps_its_members_stats() {
    // The members as written (`a:*`) serve the model the client named
    // (`claude-x`): their stats are the written members'.
    let (sims, server) = setup(
        2,
        "[routes]\n\"claude-*\" = [{ group = [\"a:*\", \"b:*\"] }]\n",
    )
    .await;
    for _ in 0..20 {
        assert_eq!(ask(&server, "claude-x").await, 200);
    }
    assert!(
        sims.iter().all(|s| s.request_count() > 0),
        "{:?}",
        shares(&sims)
    );
    for name in ["a", "b"] {
        let m = member(&server, name).await;
        assert!(m["ttft_ms"].as_f64().is_some(), "{m}");
    }
}
