//! Rate limits, timeouts, the circuit breaker, the spend cap and
//! supervision under fault, through real HTTP with short configured times.

use std::time::{Duration, Instant, SystemTime};

use understudy_core::GenerateRequest;
use understudy_policy::breaker::BreakerState;
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway, eventually};
use understudy_types::{ChatRequest, RouteSelector};

fn ask() -> GenerateRequest {
    GenerateRequest::new(ChatRequest::user("x"))
}

/// The gap between a provider's first and second request.
fn gap(sim: &SimProvider) -> Duration {
    let r = sim.received();
    r[1].at.duration_since(r[0].at)
}

#[tokio::test]
async fn retry_after_is_honoured_in_each_form() {
    for (reply, at_least) in [
        (Reply::rate_limited("1"), Duration::from_secs(1)),
        (
            Reply::Status {
                status: 429,
                body: String::new(),
                headers: vec![("retry-after-ms".into(), "300".into())],
            },
            Duration::from_millis(300),
        ),
    ] {
        let groq = SimProvider::openai().await.unwrap();
        groq.push(reply.clone()).push(Reply::text("ok"));
        let gw = TestGateway::builder()
            .provider("groq", &groq)
            .build()
            .await
            .unwrap();
        let g = gw.engine.generate(ask()).await.unwrap();
        let kinds: Vec<_> = g.attempts.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["primary", "rate_limit_retry"], "{reply:?}");
        assert!(
            gap(&groq) >= at_least,
            "{reply:?}: retried after {:?}",
            gap(&groq)
        );
    }
    // An HTTP date names a moment, to the second: the retry waits until
    // then. Measured from when groq received the request (the first one
    // also starts groq's actor, tens of ms after `sent`), so that a date in
    // the next whole second still counts; three seconds away, so that a
    // wait that ignored the date (a jittered second) would fail.
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .build()
        .await
        .unwrap();
    let (sent, sent_at) = (SystemTime::now(), Instant::now());
    let later = httpdate::fmt_http_date(sent + Duration::from_secs(3));
    groq.push(Reply::rate_limited(&later))
        .push(Reply::text("ok"));
    gw.engine.generate(ask()).await.unwrap();
    let received = sent + groq.received()[0].at.duration_since(sent_at);
    let named = httpdate::parse_http_date(&later)
        .unwrap()
        .duration_since(received)
        .unwrap();
    assert!(
        gap(&groq) + Duration::from_millis(10) >= named,
        "retried after {:?}, the date was {named:?} away",
        gap(&groq)
    );
    // Gemini's RetryInfo.retryDelay in the body.
    let gemini = SimProvider::gemini().await.unwrap();
    let body = r#"{"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.4s"}]}}"#;
    gemini
        .push(Reply::Status {
            status: 429,
            body: body.into(),
            headers: vec![],
        })
        .push(Reply::text("ok"));
    let gw = TestGateway::builder()
        .provider("gemini", &gemini)
        .build()
        .await
        .unwrap();
    gw.engine.generate(ask()).await.unwrap();
    assert!(
        gap(&gemini) >= Duration::from_millis(400),
        "{:?}",
        gap(&gemini)
    );
}

#[tokio::test]
async fn one_rate_limit_retry_only_and_none_for_quota() {
    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::rate_limited("0"));
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(groq.request_count(), 2, "one retry, never a loop");
    assert_eq!(g.provider, "openai");
    // A spent quota is also a 429, with a Retry-After that invites a retry:
    // it gets none, because waiting will not refill it.
    groq.push(quota_exhausted());
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(groq.request_count(), 3, "no retry for a spent quota");
    assert_eq!(
        (g.provider.as_str(), g.attempts[0].outcome.as_str()),
        ("openai", "quota_exceeded")
    );
    assert_eq!(openai.request_count(), 2);
}

/// OpenAI's 429 for a spent quota, with a `retry-after` of zero.
fn quota_exhausted() -> Reply {
    Reply::Status {
        status: 429,
        body: r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.into(),
        headers: vec![("retry-after".into(), "0".into())],
    }
}

#[tokio::test]
async fn a_hanging_primary_is_abandoned_at_its_timeout_and_never_retried() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::Hang);
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .provider_option("groq", "timeouts = { attempt = 0.3 }")
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(g.provider, "openai");
    assert_eq!(g.attempts[0].outcome.as_str(), "timeout");
    assert!(
        g.attempts[0].latency_ms >= 300.0 && g.attempts[0].latency_ms < 1000.0,
        "{:?}",
        g.attempts[0]
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(groq.request_count(), 1);
    // A per-request timeout bounds the whole plan.
    openai.always(Reply::Hang);
    let mut req = ask();
    req.timeout = Some(Duration::from_millis(200));
    let err = gw.engine.generate(req).await.unwrap_err();
    assert_eq!(err.code().as_str(), "deadline_exceeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_sequence_through_an_outage_and_back() {
    // Scaled down from "503 for 60 s, a request every second, cooldown 5 s".
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let outage = Duration::from_millis(1500);
    let t0 = Instant::now();
    groq.respond_with(move |_| {
        if t0.elapsed() < outage {
            Reply::status(503)
        } else {
            Reply::text("primary")
        }
    });
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[breaker]\nfailure_threshold = 3\ncooldown = 0.2")
        .build()
        .await
        .unwrap();
    let mut served = Vec::new();
    let mut saw_open = false;
    while t0.elapsed() < outage + Duration::from_millis(1000) {
        let started = t0.elapsed();
        let g = gw.engine.generate(ask()).await.unwrap();
        let primary_failed = g
            .attempts
            .iter()
            .any(|a| &*a.provider == "groq" && a.outcome.as_str() != "ok");
        served.push((started, t0.elapsed(), g.provider.clone(), primary_failed));
        if !saw_open && t0.elapsed() < outage {
            let groq_info = gw
                .engine
                .providers()
                .await
                .unwrap()
                .into_iter()
                .find(|p| p.name == "groq")
                .unwrap();
            saw_open = groq_info
                .breakers
                .iter()
                .any(|b| b.state == BreakerState::Open);
            if saw_open {
                let text = gw.engine.metrics_text(false).await;
                assert!(
                    text.contains(
                        r#"understudy_breaker_open{provider="groq",model="groq-model"} 1"#
                    ),
                    "the breaker state is a metric: {text}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(saw_open, "the breaker showed as open in the providers view");
    let during: Vec<_> = groq
        .received()
        .into_iter()
        .filter(|r| r.at.duration_since(t0) < outage)
        .collect();
    // Three failures open it; then at most one probe per 0.2 s cooldown.
    let budget = 3 + (outage.as_millis() / 200) as usize + 1;
    assert!(
        during.len() <= budget,
        "the primary saw {} requests during the outage (budget {budget})",
        during.len()
    );
    // Every request answered during the outage was the fallback's: groq
    // answered only 503s until then.
    let during_outage: Vec<_> = served.iter().filter(|(_, t, ..)| *t < outage).collect();
    assert!(
        !during_outage.is_empty() && during_outage.iter().all(|(_, _, p, _)| p == "openai"),
        "{during_outage:?}"
    );
    // Back on the primary as soon as the breaker lets a probe through,
    // counted from the last failure rather than from the clock (a loaded
    // machine makes each request slower, not the breaker later): the
    // breaker reopened at the latest when the request that last saw groq
    // fail ended, for one cooldown; every request that started after that
    // is the probe or follows it, and is served by groq.
    let last_failure = served
        .iter()
        .filter(|(.., failed)| *failed)
        .map(|(_, ended, ..)| *ended)
        .max()
        .unwrap();
    let tail: Vec<_> = served
        .iter()
        .filter(|(started, ..)| *started > last_failure + Duration::from_millis(200))
        .collect();
    assert!(
        !tail.is_empty() && tail.iter().all(|(_, _, p, _)| p == "groq"),
        "after the last failure at {last_failure:?}: {tail:?}"
    );
}

#[tokio::test]
async fn one_model_s_outage_does_not_bench_its_sibling() {
    let groq = SimProvider::openai().await.unwrap();
    groq.respond_with(|r| {
        if r.json()["model"] == "bad" {
            Reply::status(503)
        } else {
            Reply::text("good")
        }
    });
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .toml("[breaker]\nfailure_threshold = 2\ncooldown = 30\n[routes]\nsiblings = [\"groq:bad\", \"groq:good\"]")
        .build()
        .await
        .unwrap();
    let route = || ask().route(RouteSelector::Named("siblings".into()));
    for _ in 0..2 {
        assert_eq!(gw.engine.generate(route()).await.unwrap().model, "good");
    }
    // `bad` is open now: the next requests go straight to `good`.
    let before = groq.request_count();
    for _ in 0..3 {
        let g = gw.engine.generate(route()).await.unwrap();
        assert_eq!((g.model.as_str(), g.attempts.len()), ("good", 1));
    }
    assert_eq!(groq.request_count() - before, 3);
    // A pin on the good sibling is untouched too.
    let g = gw
        .engine
        .generate(ask().route(RouteSelector::pin("groq:good")))
        .await
        .unwrap();
    assert!(!g.fell_back);
}

#[tokio::test]
async fn when_every_target_is_open_the_primary_is_tried_anyway() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .order(&["groq"])
        .toml("[breaker]\nfailure_threshold = 2\ncooldown = 30")
        .build()
        .await
        .unwrap();
    for _ in 0..2 {
        gw.engine.generate(ask()).await.unwrap_err();
    }
    let err = gw.engine.generate(ask()).await.unwrap_err();
    assert_eq!(
        err.attempts().len(),
        1,
        "tried rather than failed without trying: {err}"
    );
    assert_eq!(groq.request_count(), 3);
    groq.always(Reply::text("back"));
    assert_eq!(gw.engine.generate(ask()).await.unwrap().text, "back");
}

#[tokio::test]
async fn refusals_bad_requests_and_rate_limits_never_trip_the_breaker() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[breaker]\nfailure_threshold = 2\ncooldown = 30\n[rate_limit]\nmax_wait = 1")
        .build()
        .await
        .unwrap();
    // Each failure, more times in a row than the threshold: an outage
    // would have opened groq's breaker by the third, and the plan would then
    // start with openai.
    let refused = "groq/primary/content_filter groq/softened/content_filter openai/fallback/ok";
    for (reply, want) in [
        (Reply::Refuse(Refusal::FinishReason), refused),
        (Reply::Refuse(Refusal::Message("I can't.".into())), refused),
        (Reply::Refuse(Refusal::Status400), refused),
        (
            Reply::status(400),
            "groq/primary/bad_request openai/fallback/ok",
        ),
        (
            Reply::rate_limited("0"),
            "groq/primary/rate_limited groq/rate_limit_retry/rate_limited openai/fallback/ok",
        ),
        // Longer than rate_limit.max_wait: straight to the fallback.
        (
            Reply::rate_limited("30"),
            "groq/primary/rate_limited openai/fallback/ok",
        ),
    ] {
        groq.always(reply.clone());
        for n in 1..=3 {
            let g = gw.engine.generate(ask()).await.unwrap();
            let got: Vec<String> = g
                .attempts
                .iter()
                .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
                .collect();
            assert_eq!(got.join(" "), want, "{reply:?}, request {n}");
        }
    }
    let groq_info = gw
        .engine
        .providers()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.name == "groq")
        .unwrap();
    assert!(
        groq_info
            .breakers
            .iter()
            .all(|b| b.state == BreakerState::Closed),
        "{:?}",
        groq_info.breakers
    );
    groq.always(Reply::text("still here"));
    assert_eq!(gw.engine.generate(ask()).await.unwrap().provider, "groq");
}

#[tokio::test]
async fn the_spend_cap_across_a_window_boundary() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .provider_option("openai", "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }")
        .toml("[breaker]\nfailure_threshold = 0\n[budget]\nfallback_budget_usd = 0.001\nwindow = \"2s\"")
        .build()
        .await
        .unwrap();
    // Wait for the start of a window, so the test does not straddle one.
    let window = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() / 2;
    let start = window(SystemTime::now());
    eventually("a window to start", async || {
        window(SystemTime::now()) != start
    })
    .await;
    let g = gw.engine.generate(ask()).await.unwrap();
    assert_eq!(g.provider, "openai", "the first fallback fits the budget");
    let err = gw.engine.generate(ask()).await.unwrap_err();
    assert_eq!(err.code().as_str(), "fallback_budget_exceeded", "{err}");
    assert_eq!(
        openai.request_count(),
        1,
        "no fallback once the cap is spent"
    );
    // The next window starts afresh.
    let spent_in = window(SystemTime::now());
    eventually("the next window", async || {
        window(SystemTime::now()) != spent_in
    })
    .await;
    assert_eq!(gw.engine.generate(ask()).await.unwrap().provider, "openai");
}

#[tokio::test]
async fn no_fallback_and_route_policies() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::Refuse(Refusal::FinishReason));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[routes.strict]\ntargets = [\"groq\", \"openai\"]\nrefusal_policy = \"surface\"\ntimeouts = { request = 5 }")
        .build()
        .await
        .unwrap();
    let err = gw
        .engine
        .generate(ask().route(RouteSelector::Named("strict".into())))
        .await
        .unwrap_err();
    assert_eq!(
        err.code().as_str(),
        "content_filter",
        "the route's policy: surface"
    );
    assert_eq!(err.attempts().len(), 1);
    let mut req = ask();
    req.no_fallback = true;
    let err = gw.engine.generate(req).await.unwrap_err();
    let kinds: Vec<_> = err.attempts().iter().map(|a| a.kind.as_str()).collect();
    assert_eq!(kinds, ["primary", "softened"]);
    assert_eq!(openai.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_keeps_crashing_is_benched_and_the_others_serve() {
    let (_groq, _openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    gw.engine.generate(ask()).await.unwrap();
    // Crash it until the restart budget (5 per minute) is spent; each
    // crash but the last is followed by a restart with fresh state.
    let mut crashes = 0;
    eventually("groq to be benched", async || {
        let info = gw
            .engine
            .providers()
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.name == "groq")
            .unwrap();
        if !info.available {
            assert_eq!(
                info.unavailable_reason.as_deref(),
                Some("stopped after repeated crashes")
            );
            return Ok(());
        }
        if gw.engine.inject_provider_panic("groq").await.is_ok() {
            crashes += 1;
        }
        Err(format!("still available after {crashes} crashes: {info:?}"))
    })
    .await;
    assert!(
        crashes >= 6,
        "benched after {crashes} crashes, before the budget was spent"
    );
    for _ in 0..5 {
        let g = gw.engine.generate(ask()).await.unwrap();
        assert_eq!(g.provider, "openai");
    }
}
