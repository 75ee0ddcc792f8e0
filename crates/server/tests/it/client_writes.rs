//! The admin API's writes of client records and routing, against the real
//! server: a burst of creates that share a key or a name gets one 201 and
//! the record kept is that one (one instance alone, and two instances on
//! one real `redis-server`); without Redis the records and routing are
//! kept in the state file over a restart (and keep the gateway closed), a
//! state file that cannot be read stops the start, and a change the file
//! cannot take is a 503 that changes nothing; keys no client could send, or that open something
//! else, are a 400 that never echoes the key.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{RedisServer, Reply, SimProvider, TestGateway, eventually_within};

use crate::common::{Answer, TestServer};

const ADMIN: &str = "admin-token-0123456789";
const PLAIN: &str = "plain-key-0123456789";
const FILE_KEY: &str = "sk-file-team-0123456789";

/// A gateway over `sim` (and a second provider, `other`, over `other`),
/// with the admin token, a plain key and a file record; on `redis` when
/// given, else with its state in `state`.
fn gateway(
    sim: &SimProvider,
    other: &SimProvider,
    redis: Option<&str>,
    state: &Path,
) -> understudy_testkit::TestGatewayBuilder {
    let mut b = TestGateway::builder()
        .provider("groq", sim)
        .provider("other", other)
        .order(&["groq", "other"])
        .toml(&format!(
            "[server]\napi_keys = [\"{PLAIN}\"]\n\
             [[server.clients]]\nname = \"file-team\"\nkey = \"{FILE_KEY}\"\n"
        ))
        .env("UNDERSTUDY_ADMIN_TOKEN", ADMIN)
        .env("UNDERSTUDY_STATE_FILE", &state.display().to_string());
    if let Some(url) = redis {
        b = b.env("REDIS_URL", url);
    }
    b
}

async fn start(b: understudy_testkit::TestGatewayBuilder) -> TestServer {
    TestServer::start(b.build().await.unwrap().engine).await
}

/// Two simulators that answer, as `groq` and `other`.
async fn sims() -> (SimProvider, SimProvider) {
    let sim = SimProvider::openai().await.unwrap();
    sim.always(Reply::text("Hello"));
    let other = SimProvider::openai().await.unwrap();
    other.always(Reply::text("From the other"));
    (sim, other)
}

/// A fresh directory for one test's state file.
fn state_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "understudy-client-writes-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

async fn ask(s: &TestServer, key: &str) -> Answer {
    s.post_with(
        "/v1/chat/completions",
        &[("authorization", &format!("Bearer {key}"))],
        json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
    )
    .await
}

/// The admin API's records as `name` → `key_sha256_prefix`.
async fn records(s: &TestServer) -> Vec<(String, String)> {
    let listed = admin(s, "GET", "/v1/admin/clients", None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    listed.json()["clients"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["source"] == "admin")
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["key_sha256_prefix"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Eight creates at once, spread over `servers`: `body(i)` is the i-th.
/// Returns each body with its answer.
async fn burst(servers: &[Arc<TestServer>], body: impl Fn(usize) -> Value) -> Vec<(Value, Answer)> {
    let mut all = tokio::task::JoinSet::new();
    for i in 0..8 {
        let s = Arc::clone(&servers[i % servers.len()]);
        let b = body(i);
        all.spawn(async move {
            let answer = admin(&s, "POST", "/v1/admin/clients", Some(b.clone())).await;
            (b, answer)
        });
    }
    all.join_all().await
}

/// The body and answer of the one create of a burst that made a record;
/// every other is a 409.
fn one_created(answers: &[(Value, Answer)]) -> (Value, Value) {
    let created: Vec<_> = answers.iter().filter(|(_, a)| a.status == 201).collect();
    assert_eq!(
        created.len(),
        1,
        "{:?}",
        answers.iter().map(|(_, a)| &a.body).collect::<Vec<_>>()
    );
    for (_, a) in answers.iter().filter(|(_, a)| a.status != 201) {
        assert_eq!(a.status, 409, "{}", a.body);
    }
    (created[0].0.clone(), created[0].1.json())
}

/// Bursts of creates sharing a key, then sharing a name, five times each:
/// one 201 a burst, and the record kept (on every server) is the one that
/// got it.
async fn bursts_keep_the_record_that_got_201(servers: &[Arc<TestServer>]) {
    for round in 0..5 {
        let key = format!("sk-shared-key-{round}-0123456789");
        let answers = burst(
            servers,
            |i| json!({"name": format!("key-{round}-{i}"), "key": key}),
        )
        .await;
        let (body, created) = one_created(&answers);
        let winner = body["name"].as_str().unwrap().to_owned();
        let prefix = created["client"]["key_sha256_prefix"]
            .as_str()
            .unwrap()
            .to_owned();
        for s in servers {
            eventually_within(
                Duration::from_secs(20),
                "every server to keep the record that got 201, alone",
                async || {
                    let holding: Vec<_> = records(s)
                        .await
                        .into_iter()
                        .filter(|(_, p)| *p == prefix)
                        .collect();
                    holding == [(winner.clone(), prefix.clone())]
                },
            )
            .await;
            assert_eq!(ask(s, &key).await.status, 200);
        }
        let name = format!("name-{round}");
        let answers = burst(
            servers,
            |i| json!({"name": name, "key": format!("sk-name-{round}-{i}-0123456789")}),
        )
        .await;
        let (body, _) = one_created(&answers);
        let kept_key = body["key"].as_str().unwrap().to_owned();
        for s in servers {
            eventually_within(
                Duration::from_secs(20),
                "every server to serve the key of the record that got 201",
                async || ask(s, &kept_key).await.status == 200,
            )
            .await;
            for (b, _) in &answers {
                let key = b["key"].as_str().unwrap();
                if key != kept_key {
                    assert_eq!(ask(s, key).await.status, 401, "a 409's key is no key");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_creates_keeps_one_record_on_one_instance() {
    let (sim, other) = sims().await;
    let dir = state_dir("burst");
    let s = Arc::new(start(gateway(&sim, &other, None, &dir.join("state.json"))).await);
    bursts_keep_the_record_that_got_201(&[Arc::clone(&s)]).await;
    // What the file keeps is what was answered.
    let kept = std::fs::read_to_string(dir.join("state.json")).unwrap();
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["clients"].as_array().unwrap().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_creates_keeps_one_record_across_the_fleet() {
    let redis = RedisServer::start().unwrap();
    let (sim, other) = sims().await;
    let dir = state_dir("fleet");
    let state = dir.join("state.json");
    let a = Arc::new(start(gateway(&sim, &other, Some(&redis.url()), &state)).await);
    let b = Arc::new(start(gateway(&sim, &other, Some(&redis.url()), &state)).await);
    bursts_keep_the_record_that_got_201(&[a, b]).await;
    assert!(!state.exists(), "with Redis, Redis keeps the records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_records_and_routing_outlive_a_restart() {
    let (sim, other) = sims().await;
    let dir = state_dir("restart");
    let state = dir.join("state.json");
    let first = start(gateway(&sim, &other, None, &state)).await;
    let made = admin(
        &first,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "kept-team", "rpm": 50})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(made.json()["kept_in"], "state_file");
    let key = made.json()["key"].as_str().unwrap().to_owned();
    let routed = admin(
        &first,
        "PUT",
        "/v1/admin/routing",
        Some(json!({"default": "other", "order": ["other", "groq"]})),
    )
    .await;
    assert_eq!(routed.status, 200, "{}", routed.body);
    let text = std::fs::read_to_string(&state).unwrap();
    assert!(!text.contains(&key), "the file keeps the key's hash only");
    first.engine.shutdown().await;
    drop(first);
    // A new engine and server on the same file.
    let second = start(gateway(&sim, &other, None, &state)).await;
    let served = ask(&second, &key).await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(served.header("x-understudy-provider"), Some("other"));
    assert_eq!(served.header("x-ratelimit-limit-requests"), Some("50"));
    let routing = admin(&second, "GET", "/v1/admin/routing", None).await;
    assert_eq!(routing.json()["default"], "other", "{}", routing.body);
    let listed = admin(&second, "GET", "/v1/admin/clients", None).await;
    assert_eq!(listed.json()["kept_in"], "state_file");
    // Revoked, restarted: still revoked.
    let gone = admin(&second, "DELETE", "/v1/admin/clients/kept-team", None).await;
    assert_eq!(gone.status, 200, "{}", gone.body);
    second.engine.shutdown().await;
    drop(second);
    let third = start(gateway(&sim, &other, None, &state)).await;
    assert_eq!(ask(&third, &key).await.status, 401);
    assert_eq!(
        ask(&third, FILE_KEY).await.header("x-understudy-provider"),
        Some("other")
    );
}

#[tokio::test]
async fn a_state_file_that_cannot_be_read_stops_the_start() {
    let (sim, other) = sims().await;
    let dir = state_dir("corrupt");
    let state = dir.join("state.json");
    std::fs::write(&state, "{\"understudy_state\": 1, \"clients\": [").unwrap();
    let e = gateway(&sim, &other, None, &state)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&state.display().to_string()),
        "names the file: {e}"
    );
    assert!(e.contains("admin API"), "says what it holds: {e}");
}

#[tokio::test]
async fn a_change_the_state_file_cannot_take_is_a_503_that_changes_nothing() {
    let (sim, other) = sims().await;
    let dir = state_dir("refused");
    let s = start(gateway(
        &sim,
        &other,
        None,
        &dir.join("blocked").join("state.json"),
    ))
    .await;
    // The file's directory becomes a file: nothing can be written there.
    std::fs::write(dir.join("blocked"), "").unwrap();
    let made = admin(
        &s,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "lost-team", "key": "sk-lost-team-0123456789"})),
    )
    .await;
    assert_eq!(made.status, 503, "{}", made.body);
    assert!(made.body.contains("not made"), "{}", made.body);
    assert!(records(&s).await.is_empty());
    assert_eq!(ask(&s, "sk-lost-team-0123456789").await.status, 401);
    let routed = admin(
        &s,
        "PUT",
        "/v1/admin/routing",
        Some(json!({"default": "other"})),
    )
    .await;
    assert_eq!(routed.status, 503, "{}", routed.body);
    // The admin is the operator: the answer names the file and says the
    // change was not made.
    assert!(
        routed.body.contains("state.json") && routed.body.contains("not made"),
        "{}",
        routed.body
    );
    let routing = admin(&s, "GET", "/v1/admin/routing", None).await;
    assert_eq!(routing.json()["default"], "groq", "the change was undone");
    assert_eq!(
        ask(&s, FILE_KEY).await.header("x-understudy-provider"),
        Some("groq")
    );
}

#[tokio::test]
async fn keys_no_client_could_send_or_that_open_more_are_refused() {
    let (sim, other) = sims().await;
    let dir = state_dir("keys");
    let s = start(gateway(&sim, &other, None, &dir.join("state.json"))).await;
    let admin_hash = understudy_settings::hex(&understudy_settings::sha256(ADMIN.as_bytes()));
    // (the key field and its value, what the message says)
    let long = "k".repeat(257);
    let cases: [(&str, &str, &str); 9] = [
        ("key", "sk-short", "16 to 256 characters"),
        ("key", &long, "16 to 256 characters"),
        ("key", "sk-with a-space-0123", "printable ASCII"),
        ("key", "sk-with-nul\0-0123456", "printable ASCII"),
        ("key", "sk-with-tab\t-0123456", "printable ASCII"),
        ("key", "sk-non-ascii-é-0123456", "printable ASCII"),
        ("key", ADMIN, "admin token"),
        ("key", PLAIN, "server.api_keys"),
        ("key_sha256", &admin_hash, "admin token"),
    ];
    for (i, (field, key, says)) in cases.into_iter().enumerate() {
        let made = admin(
            &s,
            "POST",
            "/v1/admin/clients",
            Some(json!({"name": format!("bad-{i}"), field: key})),
        )
        .await;
        assert_eq!(made.status, 400, "{key:?}: {}", made.body);
        let message = made.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(says), "{key:?}: {message}");
        assert!(message.starts_with(field), "names the field: {message}");
        assert!(
            !made.body.contains(key),
            "never echoes the key: {}",
            made.body
        );
    }
    assert!(records(&s).await.is_empty());
    // A change to such a key is refused as a new record would be.
    let made = admin(
        &s,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "good", "key": "sk-good-team-0123456789"})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let changed = admin(
        &s,
        "PUT",
        "/v1/admin/clients/good",
        Some(json!({"key": ADMIN})),
    )
    .await;
    assert_eq!(changed.status, 400, "{}", changed.body);
    assert!(!changed.body.contains(ADMIN));
    assert_eq!(ask(&s, "sk-good-team-0123456789").await.status, 200);
    // The admin token is not a client key.
    assert_eq!(ask(&s, ADMIN).await.status, 401);
}

#[tokio::test]
async fn kept_records_keep_the_gateway_closed() {
    let (sim, other) = sims().await;
    let dir = state_dir("closed");
    let state = dir.join("state.json");
    let first = start(gateway(&sim, &other, None, &state)).await;
    let made = admin(
        &first,
        "POST",
        "/v1/admin/clients",
        Some(json!({"name": "kept-team"})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let key = made.json()["key"].as_str().unwrap().to_owned();
    first.engine.shutdown().await;
    drop(first);
    // The settings now hold no key of their own: the kept record's key is
    // still asked for, and nothing gets in without a key.
    let bare = start(
        TestGateway::builder()
            .provider("groq", &sim)
            .env("UNDERSTUDY_STATE_FILE", &state.display().to_string()),
    )
    .await;
    assert_eq!(ask(&bare, &key).await.status, 200);
    let open = bare
        .post(
            "/v1/chat/completions",
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    assert_eq!(open.status, 401, "{}", open.body);
}

#[tokio::test]
async fn a_write_whose_caller_is_gone_is_kept_and_applied_alike() {
    let (sim, other) = sims().await;
    let dir = state_dir("dropped");
    let path = dir.join("state.json");
    let engine = gateway(&sim, &other, None, &path)
        .build()
        .await
        .unwrap()
        .engine;
    let raw =
        serde_json::from_value(json!({"name": "gone-team", "key": "sk-gone-team-0123456789"}))
            .unwrap();
    // The admin's connection drops while the write is under way: its
    // handler's future is polled once (the write begins) and dropped.
    {
        let mut write = std::pin::pin!(engine.create_client(raw));
        std::future::poll_fn(|cx| {
            let _ = write.as_mut().poll(cx);
            std::task::Poll::Ready(())
        })
        .await;
    }
    // The write runs to its end: the record is in force and in the file,
    // never in one alone.
    let kept = || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .contains("gone-team")
    };
    let applied = || {
        engine
            .list_clients()
            .iter()
            .any(|c| c.record.name == "gone-team")
    };
    eventually_within(
        Duration::from_secs(20),
        "the record kept and applied",
        async || kept() && applied(),
    )
    .await;
    engine.shutdown().await;
}
