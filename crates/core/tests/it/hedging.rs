//! Hedging over real HTTP: a primary that stalls is raced by its route's
//! next target once the threshold passes; the first real output wins (a
//! preamble does not), the loser's connection is closed (the simulator
//! sees it), the share cap and an open breaker skip the backup, a group's
//! own hedge races its members only, and the configuration's example
//! loads.

use std::time::{Duration, Instant};

use understudy_core::event::GenerationEvent;
use understudy_core::{GenerateRequest, Generation};
use understudy_testkit::{Reply, SimProvider, StreamSpec, TestGateway, eventually};
use understudy_types::{ChatRequest, RouteSelector, StreamItem};

/// A gateway with `slow` (OpenAI-compatible) then `fast` (Anthropic) on
/// route `hedged`, which hedges as `hedge` says, and `fast` alone on route
/// `fast_only`.
async fn gateway(hedge: &str, extra: &str) -> (SimProvider, SimProvider, TestGateway) {
    let slow = SimProvider::openai().await.unwrap();
    let fast = SimProvider::anthropic().await.unwrap();
    let toml = format!(
        "{extra}\n[routes.hedged]\ntargets = [\"slow\", \"fast\"]\nhedge = {hedge}\n\
         [routes]\nfast_only = [\"fast\"]\n"
    );
    let gw = TestGateway::builder()
        .provider("slow", &slow)
        .provider("fast", &fast)
        .toml(&toml)
        .build()
        .await
        .unwrap();
    (slow, fast, gw)
}

fn ask(route: &str) -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("hello")).route(RouteSelector::Named(route.into()))
}

/// The event of request `id`, once published.
async fn event_of(gw: &TestGateway, id: &str) -> GenerationEvent {
    eventually("the request's event", async || {
        gw.engine
            .recent()
            .events()
            .into_iter()
            .find(|e| *e.request_id == *id)
    })
    .await
}

/// `provider/kind/outcome` of each attempt.
fn attempts(e: &GenerationEvent) -> Vec<String> {
    e.attempts
        .iter()
        .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
        .collect()
}

/// Streams `request`: who served, the text, and when the first text came.
async fn stream(gw: &TestGateway, request: GenerateRequest) -> (String, String, Instant, String) {
    let mut s = gw.engine.generate_stream(request).await.unwrap();
    let first = Instant::now();
    let (id, provider) = (s.request_id.clone(), s.provider.clone());
    let mut text = String::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("the stream stalled")
        {
            Some(StreamItem::Delta(t)) => text.push_str(&t),
            Some(StreamItem::Done(_)) => return (provider, text, first, id),
            Some(StreamItem::Error(e)) => panic!("{e:?}"),
            Some(_) => {}
            None => panic!("no end"),
        }
    }
}

/// The loser's connection closed, seen by its simulator, soon after the
/// winner's commit (`at`): waited for, then checked with loaded-CI slack.
async fn closed_soon_after(loser: &SimProvider, at: Instant) {
    let closed = eventually("the loser's connection closed", async || {
        loser.closed_mid_answer().first().copied()
    })
    .await;
    let gap = closed.saturating_duration_since(at);
    assert!(
        gap < Duration::from_secs(1),
        "closed {gap:?} after the commit"
    );
}

#[tokio::test]
async fn a_stalled_stream_is_won_by_the_backup_and_the_primary_cancelled() {
    let (slow, fast, gw) = gateway(r#"{ after = "150ms" }"#, "").await;
    slow.first_token_delay(Duration::from_secs(5));
    let (provider, text, first, id) = stream(&gw, ask("hedged")).await;
    assert_eq!(provider, "fast");
    assert!(!text.is_empty());
    closed_soon_after(&slow, first).await;
    let e = event_of(&gw, &id).await;
    let hedge = e.hedge.as_ref().unwrap();
    assert_eq!(hedge.outcome, "won_backup");
    assert_eq!(hedge.after_ms, 150.0);
    assert!(hedge.backup.starts_with("fast:"), "{}", hedge.backup);
    assert_eq!(
        attempts(&e),
        ["slow/primary/cancelled", "fast/fallback/ok"],
        "{e:?}"
    );
    assert!(e.fell_back);
    assert_eq!(fast.request_count(), 1);
    eventually("the hedge counted", async || {
        let metrics = gw.engine.metrics_text(false).await;
        [
            "understudy_hedges_total{outcome=\"started\"} 1",
            "understudy_hedges_total{outcome=\"won_backup\"} 1",
        ]
        .iter()
        .all(|line| metrics.contains(line))
    })
    .await;
    assert!(slow.violations().is_empty() && fast.violations().is_empty());
}

#[tokio::test]
async fn a_stalled_answer_is_won_by_the_backup_and_the_primary_cancelled() {
    let (slow, _fast, gw) = gateway(r#"{ after = "150ms" }"#, "").await;
    slow.first_token_delay(Duration::from_secs(5));
    let started = Instant::now();
    let g: Generation = gw.engine.generate(ask("hedged")).await.unwrap();
    let answered = Instant::now();
    assert_eq!(g.provider, "fast");
    assert!(answered - started < Duration::from_secs(4), "it waited");
    closed_soon_after(&slow, answered).await;
    let e = event_of(&gw, &g.request_id).await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "won_backup");
    assert_eq!(attempts(&e), ["slow/primary/cancelled", "fast/fallback/ok"]);
}

#[tokio::test]
async fn a_preamble_does_not_commit() {
    // The backup opens its stream at once (`message_start`, an empty
    // block) but writes its first text only after 1.5 s; the primary's
    // text comes at 0.4 s: the primary wins, the backup is cancelled.
    let (slow, fast, gw) = gateway(r#"{ after = "100ms" }"#, "").await;
    slow.first_token_delay(Duration::from_millis(400));
    fast.respond_with(|_| {
        StreamSpec::new(&["late", " words"])
            .every(Duration::from_millis(1500))
            .reply()
    });
    let (provider, _, first, id) = stream(&gw, ask("hedged")).await;
    assert_eq!(provider, "slow");
    closed_soon_after(&fast, first).await;
    let e = event_of(&gw, &id).await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "won_primary");
    assert_eq!(attempts(&e), ["fast/fallback/cancelled", "slow/primary/ok"]);
    assert!(!e.fell_back);
}

#[tokio::test]
async fn the_share_cap_and_an_open_breaker_skip_the_backup() {
    // One hedge is allowed ahead; at a 1 % share the second slow request
    // of a quiet route is not hedged.
    let (slow, fast, gw) = gateway(r#"{ after = "100ms", max_share = 0.01 }"#, "").await;
    slow.first_token_delay(Duration::from_millis(600));
    for (n, outcome) in [(1, "won_backup"), (2, "skipped_share")] {
        let g = gw.engine.generate(ask("hedged")).await.unwrap();
        let e = event_of(&gw, &g.request_id).await;
        assert_eq!(e.hedge.as_ref().unwrap().outcome, outcome, "request {n}");
    }
    assert_eq!(fast.request_count(), 1);

    // The backup's breaker opens while the primary is silent: the hedge
    // is skipped and the primary serves.
    let (slow, fast, gw) = gateway(
        r#"{ after = "500ms" }"#,
        "[breaker]\nfailure_threshold = 1\ncooldown = 60",
    )
    .await;
    slow.first_token_delay(Duration::from_secs(1));
    fast.fail_every(1, 503);
    let engine = gw.engine.clone();
    let hedged = tokio::spawn(async move { engine.generate(ask("hedged")).await });
    eventually("the primary's call", async || slow.request_count() == 1).await;
    assert!(gw.engine.generate(ask("fast_only")).await.is_err());
    let g = hedged.await.unwrap().unwrap();
    assert_eq!(g.provider, "slow");
    let e = event_of(&gw, &g.request_id).await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "skipped_breaker");
    assert_eq!(fast.request_count(), 1, "only the failing call");
}

#[tokio::test]
async fn after_p95_waits_for_observations_then_hedges_the_tail() {
    // Until the primary has 20 observations there is no hedge (no
    // fallback threshold); then its p95 (~0.1 s) starts the backup for
    // the one slow call.
    let (slow, fast, gw) = gateway(r#"{ after = "p95" }"#, "").await;
    slow.first_token_delay(Duration::from_millis(100));
    for _ in 0..20 {
        let g = gw.engine.generate(ask("hedged")).await.unwrap();
        assert_eq!(g.provider, "slow");
    }
    assert_eq!(fast.request_count(), 0);
    slow.slow_every(1, Duration::from_secs(5));
    let g = gw.engine.generate(ask("hedged")).await.unwrap();
    assert_eq!(g.provider, "fast");
    let e = event_of(&gw, &g.request_id).await;
    let hedge = e.hedge.unwrap();
    assert_eq!(hedge.outcome, "won_backup");
    assert!(hedge.after_ms > 90.0 && hedge.after_ms < 400.0, "{hedge:?}");
}

/// A gateway with `slow` (OpenAI-compatible, first output after
/// `delay`), `fast` (Anthropic) and `next` (OpenAI-compatible) and the
/// routes `routes` (a `[routes]` table's lines).
async fn three(delay: Duration, routes: &str) -> ([SimProvider; 3], TestGateway) {
    let slow = SimProvider::openai().await.unwrap();
    let fast = SimProvider::anthropic().await.unwrap();
    let next = SimProvider::openai().await.unwrap();
    slow.first_token_delay(delay);
    let gw = TestGateway::builder()
        .provider("slow", &slow)
        .provider("fast", &fast)
        .provider("next", &next)
        .toml(&format!("[routes]\n{routes}\n"))
        .build()
        .await
        .unwrap();
    ([slow, fast, next], gw)
}

/// Asks route `route` until its group chose `slow` first (the group's
/// choice is by chance; `slow` weighs 50 to `fast`'s 1): that request's
/// answer and event, and how many requests before it `fast` served
/// first (each checked unhedged, each one call of `fast`).
async fn until_slow_first(gw: &TestGateway, route: &str) -> (Generation, GenerationEvent, usize) {
    for fast_first in 0..20 {
        let g = gw.engine.generate(ask(route)).await.unwrap();
        let e = event_of(gw, &g.request_id).await;
        if e.attempts.first().is_some_and(|a| &*a.provider == "fast") {
            assert_eq!(e.hedge, None, "{e:?}");
            assert_eq!(attempts(&e), ["fast/primary/ok"]);
            continue;
        }
        return (g, e, fast_first);
    }
    panic!("the group never chose `slow` first");
}

#[tokio::test]
async fn a_groups_own_hedge_races_its_members_and_nothing_else() {
    // The group hedges: a silent `slow` is raced by `fast`, the next
    // member, and `fast` serves; the next step is never called.
    let routes = "pair = [{ group = [\"slow\", \"fast\"], weights = [50, 1], \
                  hedge = { after = \"150ms\" } }, \"next\"]";
    let ([slow, fast, next], gw) = three(Duration::from_secs(5), routes).await;
    let (g, e, _) = until_slow_first(&gw, "pair").await;
    assert_eq!(g.provider, "fast");
    let hedge = e.hedge.as_ref().unwrap();
    assert_eq!(hedge.outcome, "won_backup");
    assert!(hedge.backup.starts_with("fast:"), "{}", hedge.backup);
    assert_eq!(attempts(&e), ["slow/primary/cancelled", "fast/fallback/ok"]);
    closed_soon_after(&slow, Instant::now()).await;
    assert_eq!(next.request_count(), 0);
    assert!(slow.violations().is_empty() && fast.violations().is_empty());

    // A group without a hedge of its own on a route without one: `slow`
    // serves late, alone.
    let routes = "plain = [{ group = [\"slow\", \"fast\"], weights = [50, 1] }, \"next\"]";
    let ([_slow, fast, next], gw) = three(Duration::from_millis(400), routes).await;
    let (g, e, fast_first) = until_slow_first(&gw, "plain").await;
    assert_eq!(g.provider, "slow");
    assert_eq!(e.hedge, None);
    assert_eq!(attempts(&e), ["slow/primary/ok"]);
    // `fast` answered only the requests the group sent it first.
    assert_eq!(fast.request_count(), fast_first);
    assert_eq!(next.request_count(), 0);

    // The group's own hedge wins over the route's for its members, and
    // never races its last member against the next step: `slow` serves
    // late although the route hedges after 100 ms.
    let routes = "[routes.edge]\ntargets = [{ group = [\"slow\"], hedge = { after = \"150ms\" } }, \"next\"]\n\
                  hedge = { after = \"100ms\" }";
    let ([_slow, _fast, next], gw) = three(Duration::from_millis(400), routes).await;
    let g = gw.engine.generate(ask("edge")).await.unwrap();
    assert_eq!(g.provider, "slow");
    let e = event_of(&gw, &g.request_id).await;
    assert_eq!(e.hedge, None);
    assert_eq!(next.request_count(), 0);
}

/// The TOML block of `docs/configuration.md` under `heading`.
fn doc_example(heading: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = doc.split(heading).nth(1).unwrap();
    let start = section.find("```toml\n").unwrap() + "```toml\n".len();
    section[start..][..section[start..].find("```").unwrap()].to_owned()
}

#[test]
fn the_hedging_example_of_the_docs_loads_as_it_says() {
    use understudy_settings::HedgeAfter;
    let s = super::settings_with(
        &doc_example("### Hedging"),
        &[
            ("OPENAI_API_KEY", "sk-doc"),
            ("ANTHROPIC_API_KEY", "sk-ant-doc"),
            ("GROQ_API_KEY", "gsk-doc"),
        ],
    )
    .unwrap();
    let chat = s.route_options["chat"].hedge.unwrap();
    assert_eq!(
        chat.after,
        HedgeAfter::P95 {
            until_known: Some(Duration::from_millis(800))
        }
    );
    assert_eq!(chat.max_share_ppm, 50_000);
    let fixed = s.route_options["fixed"].hedge.unwrap();
    assert_eq!(fixed.after, HedgeAfter::Fixed(Duration::from_millis(1500)));
    // A group's own: the route does not hedge, the group's members do.
    assert!(s.route_options["tiered"].hedge.is_none());
    let group = &s.route_groups["tiered"][0];
    assert_eq!(group.weights, [3, 1]);
    let own = group.hedge.unwrap();
    assert_eq!(own.after, HedgeAfter::Fixed(Duration::from_millis(600)));
    assert_eq!(own.max_share_ppm, 100_000);
    // A bad value names its TOML path.
    let e = super::settings_with(
        "[routes.r]\ntargets = [\"openai\"]\nhedge = { after = \"soon\" }",
        &[("OPENAI_API_KEY", "sk-doc")],
    )
    .unwrap_err();
    assert!(e.to_string().contains("routes.r.hedge.after"), "{e}");
    let e = super::settings_with(
        "[routes]\npair = [{ group = [\"openai\"], hedge = { after = \"p95\", fallback = \"0s\" } }]",
        &[("OPENAI_API_KEY", "sk-doc")],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("routes.pair[0].hedge.fallback"),
        "{e}"
    );
}

#[tokio::test]
async fn failures_before_and_during_a_hedge() {
    // The primary fails before the threshold: the usual fallback, no hedge.
    let (slow, _fast, gw) = gateway(r#"{ after = "300ms" }"#, "").await;
    slow.fail_every(1, 503);
    let g = gw.engine.generate(ask("hedged")).await.unwrap();
    assert_eq!(g.provider, "fast");
    let e = event_of(&gw, &g.request_id).await;
    assert_eq!(e.hedge, None);
    assert_eq!(
        attempts(&e),
        ["slow/primary/unavailable", "fast/fallback/ok"]
    );

    // The backup fails while the primary is silent: the primary goes on
    // and serves.
    let (slow, fast, gw) = gateway(r#"{ after = "100ms" }"#, "").await;
    slow.first_token_delay(Duration::from_millis(500));
    fast.fail_every(1, 503);
    let (provider, _, _, id) = stream(&gw, ask("hedged")).await;
    assert_eq!(provider, "slow");
    let e = event_of(&gw, &id).await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "won_primary");
    assert_eq!(
        attempts(&e),
        ["fast/fallback/unavailable", "slow/primary/ok"]
    );

    // Both fail: the request fails as its last failure says, never
    // calling the backup twice.
    let (slow, fast, gw) = gateway(r#"{ after = "100ms" }"#, "").await;
    slow.push(Reply::status(503).after(Duration::from_millis(400)));
    fast.fail_every(1, 503);
    let error = gw.engine.generate(ask("hedged")).await.unwrap_err();
    assert_eq!(error.code().as_str(), "unavailable", "{error:?}");
    let e = eventually("the failed request's event", async || {
        gw.engine.recent().events().into_iter().find(|e| !e.success)
    })
    .await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "failed");
    assert_eq!(
        attempts(&e),
        ["fast/fallback/unavailable", "slow/primary/unavailable"]
    );
    assert_eq!((slow.request_count(), fast.request_count()), (1, 1));
}

#[tokio::test]
async fn a_pattern_routes_p95_is_kept_and_read_under_its_targets_as_written() {
    // The route's targets are patterns (`slow:*`): each call resolves them
    // to the model asked, while the stats are kept under the route as
    // written. The p95 learnt from the first calls is found, and the slow
    // call is hedged after it.
    let slow = SimProvider::openai().await.unwrap();
    let fast = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("slow", &slow)
        .provider("fast", &fast)
        .toml(
            "[routes.\"chat-*\"]\ntargets = [\"slow:*\", \"fast:*\"]\n\
             hedge = { after = \"p95\" }\n",
        )
        .build()
        .await
        .unwrap();
    let ask = || {
        GenerateRequest::new(ChatRequest::user("hello"))
            .route(RouteSelector::Model("chat-small".into()))
    };
    slow.first_token_delay(Duration::from_millis(100));
    for _ in 0..20 {
        let g = gw.engine.generate(ask()).await.unwrap();
        assert_eq!(
            (g.provider.as_str(), g.model.as_str()),
            ("slow", "chat-small")
        );
    }
    assert_eq!(fast.request_count(), 0);
    slow.slow_every(1, Duration::from_secs(5));
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(g.provider, "fast");
    let e = event_of(&gw, &g.request_id).await;
    let hedge = e.hedge.unwrap();
    assert_eq!(hedge.outcome, "won_backup");
    assert_eq!(hedge.backup, "fast:chat-small");
    assert!(hedge.after_ms > 90.0 && hedge.after_ms < 400.0, "{hedge:?}");
}

/// The value of the metric line that starts with `prefix`, if any.
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn the_losers_estimate_is_the_clients_spend_too() {
    let slow = SimProvider::openai().await.unwrap();
    let fast = SimProvider::openai().await.unwrap();
    let price = "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }";
    let gw = TestGateway::builder()
        .provider("slow", &slow)
        .provider("fast", &fast)
        .provider_option("slow", price)
        .provider_option("fast", price)
        .toml(
            "[[server.clients]]\nname = \"team\"\nkey = \"sk-team-0123456789abcdef\"\n\
             tpm = 1000000\n\
             [routes.hedged]\ntargets = [\"slow\", \"fast\"]\n\
             hedge = { after = \"100ms\" }\n",
        )
        .build()
        .await
        .unwrap();
    slow.first_token_delay(Duration::from_secs(5));
    let record = gw.engine.tenants().named("team").unwrap();
    let mut request = ask("hedged");
    request.tenant = Some(std::sync::Arc::clone(&record));
    let g = gw.engine.generate(request).await.unwrap();
    assert_eq!(g.provider, "fast");
    let e = event_of(&gw, &g.request_id).await;
    let hedge = e.hedge.as_deref().unwrap();
    assert_eq!(hedge.outcome, "won_backup");
    let loser = hedge.loser_cost_usd.expect("the loser's estimate");
    assert!(loser > 0.0 && hedge.loser_tokens > 0, "{hedge:?}");
    let served = e.cost_usd.unwrap();
    // The record's tokens this minute: the answer's and the loser's
    // (unless the minute turned since, which leaves a fresh count).
    let usage = e.usage.unwrap();
    let (limit, left) = gw
        .engine
        .tenants()
        .remaining(&record)
        .unwrap()
        .tokens
        .unwrap();
    let used = usage.input_tokens + usage.output_tokens + hedge.loser_tokens;
    assert!(limit - left == used || left == limit, "{left} of {limit}");
    // Its spend and the loser's provider's cost, in the metrics.
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    eventually("the costs counted", async || {
        let text = gw.engine.metrics_text(false).await;
        let client = metric(&text, "understudy_client_cost_usd_total{client=\"team\"}")?;
        let slow_cost = metric(&text, "understudy_cost_usd_total{provider=\"slow\"}")?;
        (close(client, served + loser) && close(slow_cost, loser)).then_some(())
    })
    .await;
}

/// OpenAI's "too long" 400, after `delay`.
fn too_long_after(delay: Duration) -> Reply {
    let body = serde_json::json!({"error": {
        "message": "This model's maximum context length is 1000 tokens.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}});
    Reply::Status {
        status: 400,
        body: body.to_string(),
        headers: Vec::new(),
    }
    .after(delay)
}

#[tokio::test]
async fn a_too_long_primary_cancels_a_backup_no_larger_and_moves_to_a_larger() {
    // `slow` (1 000 tokens) answers "too long" once the hedge runs;
    // `small`, its backup (500), would answer the same: it is cancelled,
    // and the walk goes on past `mid` (800, no larger than the window
    // that refused) to `big` (4 000).
    let slow = SimProvider::openai().await.unwrap();
    let small = SimProvider::openai().await.unwrap();
    let mid = SimProvider::openai().await.unwrap();
    let big = SimProvider::openai().await.unwrap();
    let window = |w: u32| format!("capabilities = {{ context_window = {w} }}");
    let gw = TestGateway::builder()
        .provider("slow", &slow)
        .provider("small", &small)
        .provider("mid", &mid)
        .provider("big", &big)
        .provider_option("slow", &window(1000))
        .provider_option("small", &window(500))
        .provider_option("mid", &window(800))
        .provider_option("big", &window(4000))
        .toml(
            "[routes.hedged]\ntargets = [\"slow\", \"small\", \"mid\", \"big\"]\n\
             hedge = { after = \"100ms\" }\n",
        )
        .build()
        .await
        .unwrap();
    slow.push(too_long_after(Duration::from_millis(400)));
    small.first_token_delay(Duration::from_secs(5));
    let engine = gw.engine.clone();
    let asked = tokio::spawn(async move { engine.generate(ask("hedged")).await });
    eventually("the backup's call", async || small.request_count() == 1).await;
    let g = asked.await.unwrap().unwrap();
    assert_eq!(g.provider, "big");
    let e = event_of(&gw, &g.request_id).await;
    assert_eq!(e.hedge.as_ref().unwrap().outcome, "failed");
    assert_eq!(
        attempts(&e),
        [
            "slow/primary/context_length",
            "small/fallback/cancelled",
            "big/fallback/ok"
        ],
        "{e:?}"
    );
    assert_eq!(mid.request_count(), 0);
    eventually("the small backup's connection closed", async || {
        !small.closed_mid_answer().is_empty()
    })
    .await;
}
