//! The non-streamed decision table, row by row, through real
//! HTTP to simulated OpenAI-compatible providers.

use std::time::Duration;

use understudy_core::GenerateRequest;
use understudy_testkit::{Refusal, Reply, SimProvider, TestGateway};
use understudy_types::{ChatRequest, Error, RouteSelector};

/// Expected attempts as `provider/kind/outcome`.
type Want<'a> = (&'a [&'a str], Option<&'a str>);

async fn check(primary: &[Reply], fallback: &[Reply], want: Want<'_>) {
    let (want_attempts, want_served) = want;
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    for r in primary {
        groq.push(r.clone());
    }
    for r in fallback {
        openai.push(r.clone());
    }
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        // Under the 3 s of the late answer, and long enough for an
        // immediate failure to arrive in time on a loaded machine.
        .toml("[timeouts]\nattempt = 2\n[rate_limit]\nmax_wait = 1")
        .build()
        .await
        .unwrap();
    let result = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("tell me a joke")))
        .await;
    let attempts = match &result {
        Ok(g) => &g.attempts,
        Err(e) => e.attempts(),
    };
    let got: Vec<String> = attempts
        .iter()
        .map(|a| format!("{}/{}/{}", a.provider, a.kind.as_str(), a.outcome))
        .collect();
    assert_eq!(got, want_attempts, "{result:?}");
    match (&result, want_served) {
        (Ok(g), Some(p)) => {
            assert_eq!(g.provider, p);
            assert_eq!(g.fell_back, p != "groq");
        }
        (Err(_), None) => {}
        _ => panic!("served mismatch: {result:?}, wanted {want_served:?}"),
    }
}

#[tokio::test]
async fn primary_answers() {
    check(
        &[Reply::text("ha")],
        &[],
        (&["groq/primary/ok"], Some("groq")),
    )
    .await;
}

#[tokio::test]
async fn refusal_then_softened_success() {
    for refusal in [
        Refusal::FinishReason,
        Refusal::Message("I can't help with that.".into()),
        Refusal::Status400,
    ] {
        check(
            &[Reply::Refuse(refusal), Reply::text("a gentle joke")],
            &[],
            (
                &["groq/primary/content_filter", "groq/softened/ok"],
                Some("groq"),
            ),
        )
        .await;
    }
}

#[tokio::test]
async fn refusal_twice_then_fallback() {
    check(
        &[
            Reply::Refuse(Refusal::FinishReason),
            Reply::Refuse(Refusal::FinishReason),
        ],
        &[Reply::text("from openai")],
        (
            &[
                "groq/primary/content_filter",
                "groq/softened/content_filter",
                "openai/fallback/ok",
            ],
            Some("openai"),
        ),
    )
    .await;
}

#[tokio::test]
async fn softened_outage_also_falls_back() {
    check(
        &[Reply::Refuse(Refusal::FinishReason), Reply::status(503)],
        &[Reply::text("from openai")],
        (
            &[
                "groq/primary/content_filter",
                "groq/softened/unavailable",
                "openai/fallback/ok",
            ],
            Some("openai"),
        ),
    )
    .await;
}

#[tokio::test]
async fn outages_fall_back_at_once_and_are_never_retried() {
    for (reply, code) in [
        (Reply::status(503), "unavailable"),
        (Reply::status(500), "unavailable"),
        (Reply::status(529), "unavailable"),
        (Reply::status(498), "unavailable"),
        (Reply::status(401), "auth"),
        (Reply::status(403), "auth"),
        (Reply::status(400), "bad_request"),
        (Reply::status(404), "bad_request"),
        (Reply::Reset, "connection"),
        (Reply::Hang, "timeout"),
        (Reply::text("late").after(Duration::from_secs(3)), "timeout"),
        (
            Reply::Garbage("<html>oops</html>".into()),
            "malformed_response",
        ),
        (
            Reply::Garbage("{\"choices\": [".into()),
            "malformed_response",
        ),
        (Reply::Garbage("{\"choices\": []}".into()), "empty_response"),
        (Reply::Truncated, "connection"),
    ] {
        let first = format!("groq/primary/{code}");
        check(
            &[reply],
            &[Reply::text("ok")],
            (&[first.as_str(), "openai/fallback/ok"], Some("openai")),
        )
        .await;
    }
}

#[tokio::test]
async fn context_length_and_quota_fall_back_without_retry() {
    let context = Reply::Status {
        status: 400,
        body: r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#.into(),
        headers: vec![],
    };
    check(
        &[context],
        &[Reply::text("ok")],
        (
            &["groq/primary/context_length", "openai/fallback/ok"],
            Some("openai"),
        ),
    )
    .await;
    let quota = Reply::Status {
        status: 429,
        body: r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.into(),
        headers: vec![("retry-after".into(), "0".into())],
    };
    check(
        &[quota],
        &[Reply::text("ok")],
        (
            &["groq/primary/quota_exceeded", "openai/fallback/ok"],
            Some("openai"),
        ),
    )
    .await;
}

#[tokio::test]
async fn rate_limit_gets_one_retry_then_falls_back() {
    check(
        &[Reply::rate_limited("0"), Reply::text("second time lucky")],
        &[],
        (
            &["groq/primary/rate_limited", "groq/rate_limit_retry/ok"],
            Some("groq"),
        ),
    )
    .await;
    check(
        &[Reply::rate_limited("0"), Reply::rate_limited("0")],
        &[Reply::text("ok")],
        (
            &[
                "groq/primary/rate_limited",
                "groq/rate_limit_retry/rate_limited",
                "openai/fallback/ok",
            ],
            Some("openai"),
        ),
    )
    .await;
    // Longer than rate_limit.max_wait (1 s here): straight to the fallback.
    check(
        &[Reply::rate_limited("30")],
        &[Reply::text("ok")],
        (
            &["groq/primary/rate_limited", "openai/fallback/ok"],
            Some("openai"),
        ),
    )
    .await;
}

#[tokio::test]
async fn all_failed_lists_every_attempt_in_order() {
    check(
        &[Reply::Refuse(Refusal::FinishReason), Reply::status(503)],
        &[Reply::status(500)],
        (
            &[
                "groq/primary/content_filter",
                "groq/softened/unavailable",
                "openai/fallback/unavailable",
            ],
            None,
        ),
    )
    .await;

    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::status(503));
    openai.always(Reply::status(401));
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ProvidersFailed { .. }), "{err:?}");
    assert_eq!(err.code().as_str(), "auth", "the last attempt's code");
    let text = err.to_string();
    assert!(
        text.contains("groq:groq-model (primary) unavailable"),
        "{text}"
    );
    assert!(
        text.contains("openai:openai-model (fallback) auth"),
        "{text}"
    );
}

#[tokio::test]
async fn every_target_rate_limited_is_rate_limited() {
    let (groq, openai, gw) = TestGateway::groq_and_openai().await.unwrap();
    groq.always(Reply::rate_limited("60"));
    openai.always(Reply::rate_limited("60"));
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "rate_limited");
}

#[tokio::test]
async fn a_provider_without_a_key_is_never_contacted() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let local = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider_without_key("openai", &openai)
        .provider("local", &local)
        .build()
        .await
        .unwrap();
    let g = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap();
    assert_eq!(g.provider, "local");
    assert_eq!(openai.request_count(), 0);
    let providers = gw.engine.providers().await.unwrap();
    let openai_info = providers.iter().find(|p| p.name == "openai").unwrap();
    assert!(!openai_info.available);
    assert_eq!(
        openai_info.unavailable_reason.as_deref(),
        Some("no API key")
    );
}

#[tokio::test]
async fn no_available_provider_is_a_clear_error() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider_without_key("groq", &groq)
        .order(&["groq"])
        .build()
        .await
        .unwrap();
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "no_provider_available");
    assert!(err.to_string().contains("groq (no API key)"), "{err}");
    assert_eq!(groq.request_count(), 0);
}

#[tokio::test]
async fn the_primary_is_never_its_own_fallback() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    openai.always(Reply::status(503));
    // The order lists the primary in the middle; it must still be tried once.
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .order(&["groq", "openai", "groq"])
        .build()
        .await;
    assert!(
        gw.is_err(),
        "a provider listed twice is a configuration error"
    );
    let gw = TestGateway::builder()
        .provider("openai", &openai)
        .provider("groq", &groq)
        .toml("")
        .env("AI_DEFAULT_PROVIDER", "groq")
        .build()
        .await
        .unwrap();
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    let who: Vec<_> = err
        .attempts()
        .iter()
        .map(|a| (&*a.provider, a.kind.as_str()))
        .collect();
    assert_eq!(who, [("groq", "primary"), ("openai", "fallback")]);
    assert_eq!(groq.request_count(), 1);
}

#[tokio::test]
async fn pins_and_named_routes() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .toml("[routes]\nsiblings = [\"openai:big\", \"openai:small\", \"groq\"]")
        .build()
        .await
        .unwrap();
    // A pin: openai with a chosen model first, then the rest of the order.
    openai.push(Reply::status(503));
    let g = gw
        .engine
        .generate(
            GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::pin("openai:gpt-x")),
        )
        .await
        .unwrap();
    assert_eq!(openai.received()[0].json()["model"], "gpt-x");
    assert_eq!((g.provider.as_str(), g.fell_back), ("groq", true));

    // A named route with two models of one provider: the sibling serves.
    openai.push(Reply::status(503));
    let g = gw
        .engine
        .generate(
            GenerateRequest::new(ChatRequest::user("x"))
                .route(RouteSelector::Named("siblings".into())),
        )
        .await
        .unwrap();
    let models: Vec<_> = openai
        .received()
        .iter()
        .skip(1)
        .map(|r| r.json()["model"].clone())
        .collect();
    assert_eq!(models, ["big", "small"]);
    assert_eq!((g.model.as_str(), g.fell_back), ("small", true));

    let err = gw
        .engine
        .generate(
            GenerateRequest::new(ChatRequest::user("x")).route(RouteSelector::Named("nope".into())),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownRoute(_)));
}

#[tokio::test]
async fn the_request_deadline_bounds_the_whole_plan() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::Hang);
    openai.always(Reply::Hang);
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        // The deadline falls half a second into the second attempt, and
        // half a second before that attempt's own timeout.
        .toml("[timeouts]\nattempt = 1\nrequest = 1.5")
        .build()
        .await
        .unwrap();
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    assert_eq!(err.code().as_str(), "deadline_exceeded", "{err}");
    let outcomes: Vec<_> = err.attempts().iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["timeout", "timeout"]);
}

#[tokio::test]
async fn invalid_input_never_reaches_a_provider() {
    let groq = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .build()
        .await
        .unwrap();
    for bad in [
        ChatRequest::default(),
        ChatRequest::user("x").with_temperature(3.0),
    ] {
        let err = gw
            .engine
            .generate(GenerateRequest::new(bad))
            .await
            .unwrap_err();
        assert_eq!(err.code().as_str(), "invalid_request");
    }
    assert_eq!(groq.request_count(), 0);
}

#[tokio::test]
async fn keys_travel_in_headers_and_never_in_output() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let key = TestGateway::key_for("groq");
    // An upstream that echoes the key back in its error message.
    groq.always(Reply::Status {
        status: 401,
        body: format!(r#"{{"error":{{"message":"Incorrect API key provided: {key}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#),
        headers: vec![],
    });
    openai.always(Reply::status(500));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("openai", &openai)
        .build()
        .await
        .unwrap();
    let err = gw
        .engine
        .generate(GenerateRequest::new(ChatRequest::user("x")))
        .await
        .unwrap_err();
    assert_eq!(
        groq.received()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    assert!(!groq.received()[0].path.contains(&key));
    for text in [
        err.to_string(),
        format!("{err:?}"),
        format!("{:?}", gw.engine.settings()),
    ] {
        assert!(!text.contains(&key), "{text}");
    }
    assert!(
        err.to_string().contains("Incorrect API key provided: ***"),
        "{err}"
    );
}
