//! Credentials that cannot be had, through the real server: a Vertex
//! token endpoint that accepts connections and never answers costs no
//! request more than the gate's bound (the route's fallback serves every
//! one, streamed, through the Gemini front end, and the skip is a span
//! event); a service-account file that is missing, not JSON or not a PEM
//! key leaves the provider unavailable with a reason that names no file
//! (`/v1/providers`, `/v1/status`, neither of which names the file for a
//! working key either), the client gets its API's ordinary
//! "no provider available" error with neither the engine's words nor the
//! file in it, `/readyz` says not ready while a route has no target that
//! can serve, and writing a good key recovers the provider without a
//! restart; the same for a missing AWS profile. A provider whose adapter
//! cannot be built is told to a client without ractor's words or the
//! file.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use understudy_testkit::collector::Receiver;
use understudy_testkit::{Protocol, Reply, SimProvider, TestGateway, VertexSim, eventually};

use crate::common::{Answer, TestServer};

const CLAUDE: &str = "claude-haiku-4-5@20251001";
const PROJECT: &str = "understudy-sim";
const REGION: &str = "us-east5";
const KEY: &str = "sk-understudy-sdk-test";
const AUTH: (&str, &str) = ("authorization", "Bearer sk-understudy-sdk-test");

/// The most a request may take here: the gate's bound (half a second) and
/// the fallback's own time, with generous slack for a loaded machine. The
/// hang it guards against cost 2–20 s.
const SLACK: Duration = Duration::from_secs(5);

/// A token endpoint that accepts connections, reads nothing and never
/// answers; counts the connections.
async fn hanging_token_endpoint() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(conn);
        }
    });
    (url, accepted)
}

/// `[providers.vertex]` with its key at `key_file`, Vertex's simulator at
/// `vertex`.
fn vertex_table(vertex: &SimProvider, key_file: &std::path::Path) -> String {
    format!(
        "[providers.vertex]\nkind = \"vertex\"\nproject = {PROJECT:?}\nregion = {REGION:?}\nbase_url = {:?}\ncredentials_file = {:?}\nmodel = {CLAUDE:?}\n",
        vertex.base_url(),
        key_file.display().to_string()
    )
}

fn hi(stream: bool) -> String {
    json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

async fn chat(server: &TestServer, stream: bool) -> Answer {
    server
        .post_with("/v1/chat/completions", &[AUTH], hi(stream))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_token_endpoint_costs_no_request_more_than_the_bound() {
    let (token_uri, accepted) = hanging_token_endpoint().await;
    let account = VertexSim::new(PROJECT, REGION);
    let vertex = SimProvider::vertex(Protocol::Messages, &account)
        .await
        .unwrap();
    let claude = SimProvider::anthropic().await.unwrap();
    claude.always(Reply::text("From the fallback."));
    let receiver = Receiver::start();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&vertex_table(&vertex, &account.key_file(&token_uri)))
        .toml("[telemetry]\nexport_every = 0.1\n")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .order(&["vertex", "claude"])
        .env("UNDERSTUDY_API_KEYS", KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let server = Arc::new(server);
    // First a burst: 120 requests in waves of 8 every 100 ms, every one
    // arriving while the exchange the actor began at start hangs.
    let burst = send_paced(&server, 15, 8, Duration::from_millis(100)).await;
    served_by_the_fallback(burst, 120).await;
    // Then a steady load for a minute: 120 requests at 2 per second,
    // through the hung exchange's timeout, the window that passes the
    // target over after it, and the fetches that follow (each hangs too).
    let steady = send_paced(&server, 120, 1, Duration::from_millis(500)).await;
    served_by_the_fallback(steady, 120).await;
    // A stream, and a request through the Gemini front end: the same.
    let asked = Instant::now();
    let a = chat(&server, true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert!(a.body.contains("fallback"), "{}", a.body);
    assert!(
        asked.elapsed() < SLACK,
        "the stream took {:?}",
        asked.elapsed()
    );
    let asked = Instant::now();
    let a = server
        .post_with(
            "/v1beta/models/default:generateContent",
            &[("x-goog-api-key", KEY)],
            json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert!(
        asked.elapsed() < SLACK,
        "Gemini's took {:?}",
        asked.elapsed()
    );
    // Vertex was never sent a request without a token, and the hanging
    // exchange was not started again by each request.
    assert_eq!(vertex.request_count(), 0);
    // Over the run's minute, an exchange is tried once per hang and
    // window (about every 20 s), not once per request.
    let tried = accepted.load(Ordering::SeqCst);
    assert!((1..=8).contains(&tried), "{tried} exchanges tried");
    // The skip is a span event that says why.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let a = server
        .post_with(
            "/v1/chat/completions",
            &[
                AUTH,
                ("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01")),
            ],
            hi(false),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let spans = receiver.trace(trace, 2).await;
    let skips: Vec<&Value> = spans
        .iter()
        .filter(|s| s["kind"] == 2)
        .flat_map(|s| s["events"].as_array().unwrap().iter())
        .filter(|e| e["name"] == "understudy.target.skipped")
        .collect();
    assert_eq!(skips.len(), 1, "{spans:#?}");
    assert_eq!(skips[0]["attributes"]["understudy.provider"], "vertex");
    assert_eq!(
        skips[0]["attributes"]["understudy.skip.reason"],
        "credentials"
    );
    // And the requests' events (what the sinks record) name the target
    // passed over and why.
    eventually_within_minute("an event naming the skipped target", async || {
        let status = server.get_with("/v1/status", &[AUTH]).await;
        status.json()["events"].as_array().is_some_and(|events| {
            events.iter().any(|e| {
                e["provider"] == "claude"
                    && e["skipped"]
                        == json!([{"provider": "vertex", "model": CLAUDE, "reason": "credentials"}])
            })
        })
    })
    .await;
}

/// One request's answer and how long it took.
type Timed = tokio::task::JoinHandle<(Answer, Duration)>;

/// `waves` waves of `each` plain chat requests, a wave every `every`; each
/// request on a task of its own (a slow one delays no other), timed.
async fn send_paced(
    server: &Arc<TestServer>,
    waves: usize,
    each: usize,
    every: Duration,
) -> Vec<Timed> {
    let mut sent = Vec::with_capacity(waves * each);
    let mut tick = tokio::time::interval(every);
    for _ in 0..waves {
        tick.tick().await;
        for _ in 0..each {
            let server = Arc::clone(server);
            sent.push(tokio::spawn(async move {
                let asked = Instant::now();
                let a = chat(&server, false).await;
                (a, asked.elapsed())
            }));
        }
    }
    sent
}

/// Every one of `sent` (`expected` of them) was served by the fallback
/// within the bound plus its own time.
async fn served_by_the_fallback(sent: Vec<Timed>, expected: usize) {
    let mut served = 0;
    for task in sent {
        let (a, took) = task.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "claude", "{}", a.body);
        assert!(took < SLACK, "a request took {took:?}");
        served += 1;
    }
    assert_eq!(served, expected);
}

/// What a broken key file holds: missing, not JSON, not a PEM key.
const BROKEN: [(&str, Option<&str>); 3] = [
    ("missing", None),
    ("not-json", Some("{\"type\": \"service_acc")),
    (
        "not-pem",
        Some(
            "{\"type\": \"service_account\", \"client_email\": \"broken@understudy-sim.iam.gserviceaccount.com\", \"private_key\": \"-----BEGIN RSA PRIVATE KEY-----\\nnope\\n-----END RSA PRIVATE KEY-----\\n\", \"token_uri\": \"http://127.0.0.1:9/token\"}",
        ),
    ),
];

/// Neither the engine's words nor the file in a client's answer.
fn private(body: &str, file: &std::path::Path) {
    let lower = body.to_lowercase();
    for word in ["actor", "panic"] {
        assert!(!lower.contains(word), "`{word}` reached a client: {body}");
    }
    let dir = file.parent().unwrap().to_string_lossy().to_string();
    assert!(
        !body.contains(&dir),
        "the file's path reached a client: {body}"
    );
    assert!(
        !body.contains(&*file.file_name().unwrap().to_string_lossy()),
        "the file's name reached a client: {body}"
    );
}

/// What the gateway serves about its providers — `/v1/providers` (the
/// key's and the credentials' source included), `/v1/status` and the
/// status page — names no key file; `provider`'s credentials are told by
/// `source`.
async fn served_privately(
    server: &TestServer,
    provider: &str,
    file: &std::path::Path,
    source: &str,
) {
    for path in ["/v1/providers", "/v1/status", "/"] {
        let a = server.get_with(path, &[AUTH]).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        private(&a.body, file);
    }
    let v = server.get_with("/v1/providers", &[AUTH]).await.json();
    let p = v["providers"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == provider).cloned())
        .unwrap_or_default();
    let shown = p["stats"]["credentials"]["source"]
        .as_str()
        .or(p["key"]["source"].as_str())
        .unwrap_or_default();
    assert!(shown.starts_with(source), "{source}: {p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_key_file_is_unavailable_loud_private_and_recovers() {
    for (what, text) in BROKEN {
        let account = VertexSim::new(PROJECT, REGION);
        let vertex = SimProvider::vertex(Protocol::Messages, &account)
            .await
            .unwrap();
        vertex.always(Reply::text("From Vertex."));
        let claude = SimProvider::anthropic().await.unwrap();
        claude.always(Reply::text("From the fallback."));
        // A good key file, then broken as the case says.
        let file = account.key_file(&format!("{}/token", vertex.base_url()));
        let good = std::fs::read_to_string(&file).unwrap();
        match text {
            None => std::fs::remove_file(&file).unwrap(),
            Some(text) => std::fs::write(&file, text).unwrap(),
        }
        // `only-vertex` has no other target; the default route falls back.
        let gw = TestGateway::builder()
            .provider("claude", &claude)
            .toml(&vertex_table(&vertex, &file))
            .toml(&format!("[routes]\nonly-vertex = [\"vertex:{CLAUDE}\"]\n"))
            .order(&["vertex", "claude"])
            .env("UNDERSTUDY_API_KEYS", KEY)
            .build()
            .await
            .unwrap();
        let server = TestServer::start(gw.engine).await;

        // Unavailable (once the actor's first read has failed: "not
        // fetched yet" until then), with a reason that names no file.
        let providers = eventually("vertex shown unusable", async || {
            let a = server.get_with("/v1/providers", &[AUTH]).await;
            let v = a.json();
            let p = v["providers"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| p["name"] == "vertex").cloned());
            match p {
                Some(p)
                    if p["available"] == false
                        && p["unavailable_reason"]
                            .as_str()
                            .is_some_and(|r| r.starts_with("credentials unusable")) =>
                {
                    Ok(p)
                }
                p => Err(format!("{p:?}")),
            }
        })
        .await;
        let reason = providers["unavailable_reason"].as_str().unwrap();
        assert!(
            reason.starts_with("credentials unusable"),
            "{what}: {reason}"
        );
        private(reason, &file);
        private(
            &providers["stats"]["credentials"]["error"].to_string(),
            &file,
        );
        let status = server.get_with("/v1/status", &[AUTH]).await;
        let vertex_status = status.json()["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "vertex")
            .cloned()
            .unwrap();
        assert_eq!(vertex_status["available"], false, "{what}");
        private(vertex_status["unavailable_reason"].as_str().unwrap(), &file);
        served_privately(&server, "vertex", &file, "service account key file").await;

        // Its only route cannot serve: the ordinary unavailable error, in
        // each API's shape.
        let only = json!({"model": "only-vertex", "messages": [{"role": "user", "content": "hi"}]});
        let a = server
            .post_with("/v1/chat/completions", &[AUTH], only.to_string())
            .await;
        assert_eq!(a.status, 503, "{what}: {}", a.body);
        assert_eq!(
            a.json()["error"]["code"],
            "no_provider_available",
            "{}",
            a.body
        );
        private(&a.body, &file);
        let mut streamed = only.clone();
        streamed["stream"] = true.into();
        let a = server
            .post_with("/v1/chat/completions", &[AUTH], streamed.to_string())
            .await;
        assert_eq!(a.status, 503, "{what}: {}", a.body);
        private(&a.body, &file);
        let a = server
            .post_with(
                "/v1/messages",
                &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")],
                json!({"model": "only-vertex", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}).to_string(),
            )
            .await;
        // The gateway's Anthropic shape for no provider available.
        assert_eq!(a.status, 500, "{what}: {}", a.body);
        assert_eq!(a.json()["type"], "error", "{}", a.body);
        assert_eq!(a.json()["error"]["type"], "api_error", "{}", a.body);
        private(&a.body, &file);
        let a = server
            .post_with(
                "/v1beta/models/only-vertex:generateContent",
                &[("x-goog-api-key", KEY)],
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string(),
            )
            .await;
        assert_eq!(a.status, 503, "{what}: {}", a.body);
        assert_eq!(a.json()["error"]["status"], "UNAVAILABLE", "{}", a.body);
        private(&a.body, &file);
        // The default route serves from its fallback, never sending Vertex
        // a request without a token.
        let a = chat(&server, false).await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.headers["x-understudy-provider"], "claude");
        assert_eq!(vertex.request_count(), 0);

        // Not ready: `only-vertex` has no target that can serve; the
        // default route is not named.
        let a = server.get("/readyz").await;
        assert_eq!(a.status, 503, "{what}: {}", a.body);
        let unready = &a.json()["checks"]["routes"]["unready"];
        let routes: Vec<&str> = unready
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["route"].as_str().unwrap())
            .collect();
        assert_eq!(routes, ["only-vertex"], "{}", a.body);
        assert_eq!(
            unready[0]["targets"][0]["reason"], "credentials unusable",
            "{}",
            a.body
        );
        private(&a.body, &file);
        // Liveness is not readiness.
        assert_eq!(server.get("/healthz").await.status, 200);

        // The file fixed: the provider recovers without a restart (a
        // request past the fall-back-at-once window, or the actor's next
        // try, reads it again).
        std::fs::write(&file, &good).unwrap();
        eventually_within_minute("Vertex serves again", async || {
            let a = server
                .post_with("/v1/chat/completions", &[AUTH], only.to_string())
                .await;
            a.status == 200 && a.headers["x-understudy-provider"] == "vertex"
        })
        .await;
        let a = server.get("/readyz").await;
        assert_eq!(a.status, 200, "{what}: {}", a.body);
        assert_eq!(a.json()["status"], "ready");
        let a = server.get_with("/v1/providers", &[AUTH]).await;
        let v = a.json();
        let p = v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "vertex")
            .unwrap();
        assert_eq!(p["available"], true, "{what}: {p}");
        served_privately(
            &server,
            "vertex",
            &file,
            &format!("service account {}", understudy_testkit::TEST_CLIENT_EMAIL),
        )
        .await;
        assert_eq!(vertex.violations(), Vec::<String>::new());
    }
}

/// [`eventually`] with room for the fall-back-at-once window (5 s) on a
/// loaded machine.
async fn eventually_within_minute(what: &str, check: impl AsyncFnMut() -> bool) {
    understudy_testkit::eventually_within(Duration::from_secs(60), what, check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_cannot_start_is_told_without_the_engines_words_or_its_file() {
    let claude = SimProvider::anthropic().await.unwrap();
    let file =
        std::env::temp_dir().join(format!("understudy-broken-ca-{}.pem", std::process::id()));
    // Shaped like a certificate, so the settings load; the adapter cannot
    // be built with it.
    std::fs::write(
        &file,
        "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .provider_option(
            "claude",
            &format!("ca_file = {:?}", file.display().to_string()),
        )
        .env("UNDERSTUDY_API_KEYS", KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    for stream in [false, true] {
        let a = chat(&server, stream).await;
        // Every target failed as unavailable: the gateway's 502.
        assert_eq!(a.status, 502, "{}", a.body);
        private(&a.body, &file);
        assert!(
            a.body.contains("ca_file"),
            "the setting is named: {}",
            a.body
        );
    }
    let _ = std::fs::remove_file(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_aws_profile_is_unavailable_and_recovers_when_written() {
    const MODEL: &str = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
    const KEY_ID: &str = "AKIDSIMULATEDBEDROCK";
    const SECRET: &str = "simulated/Secret+Key/for-the-credentials-test";
    let dir =
        std::env::temp_dir().join(format!("understudy-credentials-aws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A name no message would hold by chance.
    let file = dir.join("aws-shared-file");
    let _ = std::fs::remove_file(&file);
    let account = understudy_testkit::BedrockSim::new("us-east-1", KEY_ID, SECRET, None);
    let bedrock = SimProvider::bedrock(&account).await.unwrap();
    bedrock.always(Reply::text("From Bedrock."));
    let claude = SimProvider::anthropic().await.unwrap();
    claude.always(Reply::text("From the fallback."));
    let gw = TestGateway::builder()
        .provider("claude", &claude)
        .toml(&format!(
            "[providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = {:?}\nmodel = {MODEL:?}\naws_profile = \"sim\"\n",
            bedrock.base_url()
        ))
        .env("AWS_SHARED_CREDENTIALS_FILE", file.to_str().unwrap())
        .order(&["bedrock", "claude"])
        .env("UNDERSTUDY_API_KEYS", KEY)
        .build()
        .await
        .unwrap();
    let server = TestServer::start(gw.engine).await;
    let p = eventually("bedrock shown unusable", async || {
        let v = server.get_with("/v1/providers", &[AUTH]).await.json();
        match v["providers"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "bedrock").cloned())
        {
            Some(p)
                if p["unavailable_reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("credentials unusable")) =>
            {
                Ok(p)
            }
            p => Err(format!("{p:?}")),
        }
    })
    .await;
    assert_eq!(p["available"], false);
    private(p["unavailable_reason"].as_str().unwrap(), &file);
    served_privately(&server, "bedrock", &file, "AWS profile `sim`").await;
    // Requests fall back without signing with nothing.
    let a = chat(&server, false).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.headers["x-understudy-provider"], "claude");
    assert_eq!(bedrock.request_count(), 0);
    // The profile written: Bedrock serves again, without a restart.
    std::fs::write(
        &file,
        format!("[sim]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    eventually_within_minute("Bedrock serves again", async || {
        chat(&server, false).await.headers["x-understudy-provider"] == "bedrock"
    })
    .await;
    served_privately(&server, "bedrock", &file, "AWS profile `sim`").await;
    assert_eq!(bedrock.violations(), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}
