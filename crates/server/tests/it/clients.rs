//! Client records (`[[server.clients]]` and the admin API) against the real
//! server: two instances on one real `redis-server` admit exactly a
//! record's `rpm` in a minute and keep the counts over a Redis restart; a
//! spent budget is a 402 that the official SDKs do not retry; models,
//! expiry and the `x-ratelimit-*` headers in each API's shape; records
//! made, changed and revoked at run time reach every instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, eventually_within};

use crate::common::{self, Answer, TestServer};

const ADMIN: &str = "admin-token-0123456789";

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One instance over `sim` with `toml` (client records), on `redis` when
/// given, with an admin token.
async fn instance(sim: &SimProvider, toml: &str, redis: Option<&str>) -> TestServer {
    let mut b = TestGateway::builder()
        .provider("groq", sim)
        .provider_option(
            "groq",
            "price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }",
        )
        .toml(toml)
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN);
    if let Some(url) = redis {
        b = b.env("REDIS_URL", url);
    }
    TestServer::start(b.build().await.unwrap().engine).await
}

fn chat(stream: bool) -> String {
    json!({"model": "default", "stream": stream,
           "messages": [{"role": "user", "content": "hello there"}]})
    .to_string()
}

async fn ask(s: &TestServer, key: &str) -> Answer {
    let bearer = format!("Bearer {key}");
    s.post_with(
        "/v1/chat/completions",
        &[("authorization", &bearer)],
        chat(false),
    )
    .await
}

/// A Redis connection patient enough for a loaded machine.
async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let patient = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&patient)
        .await
        .unwrap()
}

async fn redis_get(url: &str, key: &str) -> Option<u64> {
    let mut c = redis_conn(url).await;
    redis::cmd("GET")
        .arg(key)
        .query_async::<Option<u64>>(&mut c)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpm_60_behind_two_instances_admits_exactly_60_a_minute() {
    let mut redis = RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello from the fleet"));
    // One record per try: a try that straddles a minute is run again on a
    // fresh record.
    let toml = (1..=3)
        .map(|i| {
            format!(
                "[[server.clients]]\nname = \"team-{i}\"\nkey = \"sk-team-{i}-0123456789\"\nrpm = 60\n"
            )
        })
        .collect::<String>();
    let a = Arc::new(instance(&sim, &toml, Some(&redis.url())).await);
    let b = Arc::new(instance(&sim, &toml, Some(&redis.url())).await);
    for i in 1..=3 {
        // Start early enough in a minute that 100 requests fit in it.
        eventually_within(
            Duration::from_secs(45),
            "the first half of a minute",
            async || unix_secs() % 60 < 30,
        )
        .await;
        let minute = unix_secs() / 60;
        let key = format!("sk-team-{i}-0123456789");
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..8 {
            let (a, b, next, key) = (a.clone(), b.clone(), next.clone(), key.clone());
            workers.spawn(async move {
                let mut seen = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < 100 {
                    let s = if w % 2 == 0 { &a } else { &b };
                    seen.push((ask(s, &key).await, unix_secs()));
                }
                seen
            });
        }
        let answers: Vec<(Answer, u64)> = workers.join_all().await.into_iter().flatten().collect();
        if unix_secs() / 60 != minute {
            continue;
        }
        let admitted: Vec<_> = answers.iter().filter(|(a, _)| a.status == 200).collect();
        let refused: Vec<_> = answers.iter().filter(|(a, _)| a.status != 200).collect();
        assert_eq!(admitted.len(), 60, "{:?}", refused.first());
        assert_eq!(refused.len(), 40);
        for (r, at) in &refused {
            assert_eq!(r.status, 429, "{}", r.body);
            let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
            let wait_ms: u64 = r.header("retry-after-ms").unwrap().parse().unwrap();
            // Until the minute's end, seen from when the answer came.
            assert!((1..=60).contains(&wait), "{wait}");
            assert!(wait <= 60 - at % 60 + 1, "{wait} s at {}", at % 60);
            assert_eq!(wait, wait_ms.div_ceil(1000));
            let e = r.json()["error"].clone();
            assert_eq!(e["code"], "rate_limit_exceeded");
            assert_eq!(e["type"], "requests");
            assert!(
                e["message"]
                    .as_str()
                    .unwrap()
                    .contains("60 requests per minute")
            );
            assert_eq!(r.header("x-ratelimit-limit-requests"), Some("60"));
            assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
        }
        let ok = &admitted[0].0;
        assert_eq!(ok.header("x-ratelimit-limit-requests"), Some("60"));
        assert!(
            ok.header("x-ratelimit-reset-requests")
                .unwrap()
                .ends_with('s')
        );
        // The counters survive a Redis restart, as the fleet's breakers do.
        let counter = format!("understudy:{{client:team-{i}}}:rpm:{minute}");
        redis.stop();
        redis.restart().unwrap();
        assert_eq!(redis_get(&redis.url(), &counter).await, Some(60));
        let again = ask(&a, &key).await;
        if unix_secs() / 60 == minute {
            assert_eq!(again.status, 429, "{}", again.body);
        }
        return;
    }
    panic!("three tries each straddled a minute: the machine is far too slow");
}

/// The spend of `name`'s daily budget in Redis (nano-USD).
async fn spent(url: &str, name: &str) -> u64 {
    let key = format!("understudy:{{client:{name}}}:usd:{}", unix_secs() / 86_400);
    redis_get(url, &key).await.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_a_402_the_sdks_send_once() {
    let redis = RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello from the budget"));
    let key = "sk-budget-0123456789";
    let toml = format!(
        "[[server.clients]]\nname = \"small\"\nkey = \"{key}\"\nbudget_usd = 0.012\nwindow = \"day\"\n"
    );
    let s = instance(&sim, &toml, Some(&redis.url())).await;
    // "hello there" (2 tokens) and at most 4 answer tokens at USD 1000 a
    // million: USD 0.006 a request at worst. The first two fit; together
    // they spend it.
    let capped = |stream: bool| {
        json!({"model": "default", "stream": stream, "max_tokens": 4,
               "messages": [{"role": "user", "content": "hello there"}]})
        .to_string()
    };
    let bearer = format!("Bearer {key}");
    let first = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", &bearer)],
            capped(false),
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let streamed = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", &bearer)],
            capped(true),
        )
        .await;
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    assert!(streamed.body.contains("Hello"));
    eventually_within(
        Duration::from_secs(20),
        "both answers' spend in Redis",
        async || match spent(&redis.url(), "small").await {
            n if n >= 10_000_000 => Ok(n),
            n => Err(format!("{n} nano-USD")),
        },
    )
    .await;
    let over = ask(&s, key).await;
    assert_eq!(over.status, 402, "{}", over.body);
    assert_eq!(over.header("x-should-retry"), Some("false"));
    assert_eq!(over.header("retry-after"), None, "never a long Retry-After");
    let e = over.json()["error"].clone();
    assert_eq!(e["code"], "insufficient_quota");
    assert!(e["message"].as_str().unwrap().contains("budget"));
    // Anthropic's shape.
    let messages = s
        .post_with(
            "/v1/messages",
            &[("x-api-key", key), ("anthropic-version", "2023-06-01")],
            json!({"model": "default", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        )
        .await;
    assert_eq!(messages.status, 402, "{}", messages.body);
    assert_eq!(messages.json()["error"]["type"], "billing_error");
    // The official SDKs, with their default retries, send it once each.
    let refused_before = budget_refusals(&s).await;
    let sdks = common::run_sdk("openai", "client_limits.py", &s.url, key).await;
    assert_eq!(sdks["openai_status"], 402, "{sdks}");
    assert_eq!(sdks["anthropic_status"], 402, "{sdks}");
    assert_eq!(budget_refusals(&s).await - refused_before, 2.0, "{sdks}");
    assert_eq!(
        sim.request_count(),
        2,
        "no refused request reached a provider"
    );
}

/// `understudy_client_refused_total{client="small",limit="budget"}`.
async fn budget_refusals(s: &TestServer) -> f64 {
    let m = s.get("/metrics").await.body;
    m.lines()
        .find(|l| {
            l.starts_with("understudy_client_refused_total")
                && l.contains("client=\"small\"")
                && l.contains("limit=\"budget\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn models_expiry_and_headers_in_each_api_s_shape() {
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello"));
    let toml = "[routes]\nfast = [\"groq\"]\n\
        [[server.clients]]\nname = \"scoped-team\"\nkey = \"sk-scoped-0123456789\"\n\
        models = [\"fast\"]\nrpm = 100\ntpm = 100000\n\
        [[server.clients]]\nname = \"expired-team\"\nkey = \"sk-old-0123456789ab\"\n\
        expires = \"2020-01-01T00:00:00Z\"\n";
    let s = instance(&sim, toml, None).await;
    let body = |model: &str| {
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": 16})
        .to_string()
    };
    let bearer = [("authorization", "Bearer sk-scoped-0123456789")];
    let ok = s
        .post_with("/v1/chat/completions", &bearer, body("fast"))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-ratelimit-limit-requests"), Some("100"));
    assert_eq!(ok.header("x-ratelimit-remaining-requests"), Some("99"));
    assert_eq!(ok.header("x-ratelimit-limit-tokens"), Some("100000"));
    let left: u64 = ok
        .header("x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!((100_000 - 20..100_000).contains(&left), "{left}");
    let denied = s
        .post_with("/v1/chat/completions", &bearer, body("groq"))
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    assert_eq!(denied.json()["error"]["code"], "model_not_allowed");
    // Even a request refused before admission says the client's limits.
    let bad = s.post_with("/v1/chat/completions", &bearer, "{}").await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.header("x-ratelimit-limit-requests"), Some("100"));
    let anthropic = s
        .post_with(
            "/v1/messages",
            &[
                ("x-api-key", "sk-scoped-0123456789"),
                ("anthropic-version", "2023-06-01"),
            ],
            body("groq"),
        )
        .await;
    assert_eq!(anthropic.status, 403, "{}", anthropic.body);
    assert_eq!(anthropic.json()["error"]["type"], "permission_error");
    let expired = s
        .post_with(
            "/v1/responses",
            &[("authorization", "Bearer sk-old-0123456789ab")],
            json!({"model": "default", "input": "hi"}).to_string(),
        )
        .await;
    assert_eq!(expired.status, 401, "{}", expired.body);
    assert_eq!(expired.json()["error"]["code"], "expired_api_key");
    let gemini = s
        .post_with(
            "/v1beta/models/default:generateContent",
            &[("x-goog-api-key", "sk-old-0123456789ab")],
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string(),
        )
        .await;
    assert_eq!(gemini.status, 401, "{}", gemini.body);
    assert_eq!(gemini.json()["error"]["status"], "UNAUTHENTICATED");
    // No answer names another tenant.
    for a in [&denied, &anthropic] {
        assert!(!a.body.contains("expired-team"), "{}", a.body);
    }
    for a in [&expired, &gemini] {
        assert!(!a.body.contains("scoped-team"), "{}", a.body);
    }
    // A count is scoped as a generation is.
    let count = s
        .post_with(
            "/v1/messages/count_tokens",
            &[
                ("x-api-key", "sk-scoped-0123456789"),
                ("anthropic-version", "2023-06-01"),
            ],
            body("groq"),
        )
        .await;
    assert_eq!(count.status, 403, "{}", count.body);
    assert_eq!(sim.request_count(), 1);
}

#[tokio::test]
async fn a_pinned_model_falls_back_only_within_the_record_s_models() {
    let groq = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let backup = SimProvider::openai().await.unwrap();
    backup.always(Reply::text("From the backup"));
    let gw = TestGateway::builder()
        .provider("groq", &groq)
        .provider("backup", &backup)
        .toml(
            "[[server.clients]]\nname = \"groq-only\"\nkey = \"sk-groq-only-0123456789\"\n\
             models = [\"groq:*\"]\n\
             [[server.clients]]\nname = \"anything\"\nkey = \"sk-anything-0123456789\"\n",
        )
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let body = json!({"model": "groq:groq-model", "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
    let scoped = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-groq-only-0123456789")],
            body.clone(),
        )
        .await;
    assert_ne!(scoped.status, 200, "{}", scoped.body);
    assert_eq!(
        backup.request_count(),
        0,
        "backup is outside the record's models"
    );
    // A key without a scope falls back as a pin does.
    let open = s
        .post_with(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-anything-0123456789")],
            body,
        )
        .await;
    assert_eq!(open.status, 200, "{}", open.body);
    assert_eq!(open.header("x-understudy-provider"), Some("backup"));
}

async fn admin(s: &TestServer, method: &str, path: &str, body: Option<Value>) -> Answer {
    let mut req = s
        .client()
        .request(method.parse().unwrap(), s.at(path))
        .header("authorization", format!("Bearer {ADMIN}"));
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    Answer::read(req.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_changes_records_and_routing_for_the_whole_fleet() {
    let redis = RedisServer::start().unwrap();
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello"));
    let other = SimProvider::openai().await.unwrap();
    other.always(Reply::text("From the other"));
    let toml = format!(
        "[providers.other]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"other-model\"\napi_key = \"other-key-0123456789\"\n\
         [[server.clients]]\nname = \"file-team\"\nkey = \"sk-file-team-0123456789\"\n",
        other.base_url()
    );
    let a = instance(&sim, &toml, Some(&redis.url())).await;
    let b = instance(&sim, &toml, Some(&redis.url())).await;
    // Made on A, with a key the gateway makes and shows once.
    let made = admin(
        &a,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "new-team", "rpm": 5})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let key = made.json()["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("us-") && key.len() >= 40);
    assert_eq!(made.json()["client"]["rpm"], 5);
    // Served by B within a second or so.
    eventually_within(
        Duration::from_secs(20),
        "B to know the new record",
        async || ask(&b, &key).await.status == 200,
    )
    .await;
    let listed = admin(&b, "GET", "/v1/admin/clients", None).await;
    assert_eq!(listed.status, 200);
    assert!(!listed.body.contains(&key), "the key is shown once only");
    let names: Vec<String> = listed.json()["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c["name"].as_str().unwrap(),
                c["source"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["file-team:file", "new-team:admin"]);
    // Changed on B: A applies the new rate.
    let changed = admin(
        &b,
        "PUT",
        "/v1/admin/clients/new-team",
        Some(json!({"rpm": 1000})),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert!(changed.json().get("key").is_none());
    eventually_within(
        Duration::from_secs(20),
        "A to apply the new rpm",
        async || ask(&a, &key).await.header("x-ratelimit-limit-requests") == Some("1000"),
    )
    .await;
    // The file's record is the file's.
    let file = admin(&a, "DELETE", "/v1/admin/clients/file-team", None).await;
    assert_eq!(file.status, 409, "{}", file.body);
    let dup = admin(
        &a,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "dup", "key": "sk-file-team-0123456789"})),
    )
    .await;
    assert_eq!(dup.status, 409, "{}", dup.body);
    let bad = admin(
        &a,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "neg", "budget_usd": -1})),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("budget_usd"), "{}", bad.body);
    // Revoked on A: refused by both.
    let gone = admin(&a, "DELETE", "/v1/admin/clients/new-team", None).await;
    assert_eq!(gone.status, 200, "{}", gone.body);
    eventually_within(
        Duration::from_secs(20),
        "B to refuse the revoked key",
        async || ask(&b, &key).await.status == 401,
    )
    .await;
    assert_eq!(ask(&a, &key).await.status, 401);
    // Routing set on A reaches B.
    let routing = admin(
        &a,
        "PUT",
        "/v1/admin/routing",
        Some(json!({"default": "other", "order": ["other", "groq"]})),
    )
    .await;
    assert_eq!(routing.status, 200, "{}", routing.body);
    eventually_within(
        Duration::from_secs(20),
        "B to route to `other`",
        async || {
            ask(&b, "sk-file-team-0123456789")
                .await
                .header("x-understudy-provider")
                == Some("other")
        },
    )
    .await;
}

#[tokio::test]
async fn an_open_gateway_adds_no_records() {
    let sim = SimProvider::openai().await.unwrap();
    let gw = TestGateway::builder()
        .provider("groq", &sim)
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN)
        .build()
        .await
        .unwrap();
    let s = TestServer::start(gw.engine).await;
    let made = admin(&s, "POST", "/v1/admin/clients", Some(json!({"name": "x"}))).await;
    assert_eq!(made.status, 409, "{}", made.body);
    assert!(made.body.contains("open"), "{}", made.body);
}

#[tokio::test]
async fn rate_refusals_in_anthropic_s_and_google_s_shapes() {
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello"));
    let toml = "[[server.clients]]\nname = \"one-a-minute\"\nkey = \"sk-one-a-minute-0123\"\nrpm = 1\n\
        [[server.clients]]\nname = \"few-tokens\"\nkey = \"sk-few-tokens-012345\"\ntpm = 100\n";
    let s = instance(&sim, toml, None).await;
    let gemini = |key: &'static str| {
        let s = &s;
        async move {
            s.post_with(
                "/v1beta/models/default:generateContent",
                &[("x-goog-api-key", key)],
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string(),
            )
            .await
        }
    };
    let first = gemini("sk-one-a-minute-0123").await;
    let second = gemini("sk-one-a-minute-0123").await;
    // The minute may have turned between the two: then both pass.
    if second.status != 200 {
        assert_eq!(first.status, 200, "{}", first.body);
        assert_eq!(second.status, 429, "{}", second.body);
        assert_eq!(second.json()["error"]["status"], "RESOURCE_EXHAUSTED");
        assert!(second.header("retry-after").is_some());
        assert_eq!(second.header("x-ratelimit-remaining-requests"), Some("0"));
    }
    // One request larger than the whole tpm: not worth a retry.
    let messages = s
        .post_with(
            "/v1/messages",
            &[
                ("x-api-key", "sk-few-tokens-012345"),
                ("anthropic-version", "2023-06-01"),
            ],
            json!({"model": "default", "max_tokens": 5000,
                   "messages": [{"role": "user", "content": "hi"}]})
            .to_string(),
        )
        .await;
    assert_eq!(messages.status, 429, "{}", messages.body);
    assert_eq!(messages.json()["error"]["type"], "rate_limit_error");
    assert_eq!(messages.header("x-should-retry"), Some("false"));
    assert_eq!(messages.header("retry-after"), None);
    assert!(
        messages.body.contains("100 tokens per minute"),
        "{}",
        messages.body
    );
}
