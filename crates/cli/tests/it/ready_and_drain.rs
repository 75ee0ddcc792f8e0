//! Readiness and the drain, on the real binary: `/readyz` is 200 while
//! every route can serve and the configured `redis-server` answers, 503
//! naming Redis once it is stopped (200 again when it is back, or
//! `degraded` when the operator says the gateway is ready without it);
//! on SIGTERM `/readyz` turns 503 `draining` at once, new requests are
//! served for the grace period (their responses saying `Connection:
//! close`), then new connections are refused while
//! an open stream finishes whole before the process exits 0; a stream
//! that would outlive the drain's deadline is cut and the process exits;
//! a second SIGTERM stops at once.

use std::time::Duration;

use serde_json::{Value, json};
use understudy_testkit::{
    RedisServer, Reply, SimProvider, StreamSpec, eventually, eventually_within,
};

use crate::common::{Gateway, Scratch, plain};

const KEY: &str = "sk-drain-client-0123456789";

/// A gateway's configuration: one route over `sim`, and `extra`.
fn config(sim: &SimProvider, extra: &str) -> String {
    format!(
        "[routing]\ndefault = \"sim\"\norder = [\"sim\"]\n\
         [providers.sim]\nkind = \"openai\"\nbase_url = {:?}\napi_key = \"key-sim-0123456789\"\nmodel = \"sim-model\"\n\
         {extra}\n",
        sim.base_url()
    )
}

/// Starts the gateway (the prober and the cache off: the simulator sees
/// only the test's requests; no drain grace unless `env` sets
/// `UNDERSTUDY_DRAIN_GRACE`).
fn start(scratch: &Scratch, toml: &str, env: &[(&str, &str)]) -> Gateway {
    let mut all = vec![("UNDERSTUDY_PROBE", "off"), ("UNDERSTUDY_CACHE", "off")];
    all.extend_from_slice(env);
    Gateway::start_with(scratch, toml, KEY, &all)
}

/// `/readyz`'s status and body (on a connection of its own), or why it
/// could not be had.
async fn readyz(url: &str) -> Result<(u16, Value), String> {
    let resp = understudy_testkit::http_client()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    let body = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    Ok((status, body))
}

/// Waits for `/readyz` to answer `status` with `word`; returns its body.
async fn readyz_turns(url: &str, status: u16, word: &str) -> Value {
    eventually(
        &format!("/readyz {status} {word}"),
        async || match readyz(url).await {
            Ok((s, v)) if s == status && v["status"] == word => Ok(v),
            Ok((s, v)) => Err(format!("{s} {v}")),
            Err(e) => Err(e),
        },
    )
    .await
}

/// A chat request on a connection of its own.
fn chat(url: &str, stream: bool) -> reqwest::RequestBuilder {
    understudy_testkit::http_client()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(
            json!({"messages": [{"role": "user", "content": "hi"}], "stream": stream}).to_string(),
        )
}

/// The simulator's answers: a slow stream of `chunks` chunks (`c00 `,
/// `c01 `, …, one every 200 ms) to a streamed request, a plain text to
/// any other.
fn slow_streams(sim: &SimProvider, chunks: usize) {
    let names: Vec<String> = (0..chunks).map(|i| format!("c{i:02} ")).collect();
    sim.respond_with(move |r| {
        if r.json()["stream"] == true {
            let chunks: Vec<&str> = names.iter().map(String::as_str).collect();
            StreamSpec::new(&chunks)
                .every(Duration::from_millis(200))
                .reply()
        } else {
            Reply::text("served in the grace")
        }
    });
}

/// Opens a stream and waits for its first bytes; the task reads it to
/// its end and returns all it got (up to an error, if it was cut).
async fn open_stream(url: &str) -> tokio::task::JoinHandle<String> {
    let mut resp = chat(url, true).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().unwrap_or_default();
    assert!(!first.is_empty(), "the stream sent nothing");
    tokio::spawn(async move {
        let mut got = String::from_utf8_lossy(&first).into_owned();
        while let Ok(Some(bytes)) = resp.chunk().await {
            got.push_str(&String::from_utf8_lossy(&bytes));
        }
        got
    })
}

/// Waits for the process to exit (at most `within`); its status.
async fn exits(gw: &mut Gateway, within: Duration) -> std::process::ExitStatus {
    let log = gw.log();
    eventually_within(within, "the gateway to exit", async || {
        gw.exited()
            .ok_or_else(|| format!("still running; log:\n{log}"))
    })
    .await
}

#[tokio::test]
async fn readyz_says_whether_redis_is_reachable_unless_told_it_may_be_missing() {
    let sim = SimProvider::openai().await.unwrap();
    let mut redis = RedisServer::start().unwrap();
    let url = redis.url();
    let scratch = Scratch::new("ready", "redis");
    let gw = start(&scratch, &config(&sim, ""), &[("REDIS_URL", &url)]);

    // Ready: routes served, Redis reachable, not draining.
    let v = readyz_turns(&gw.url, 200, "ready").await;
    for check in ["config", "routes", "redis", "draining"] {
        assert_eq!(v["checks"][check]["ok"], true, "{check}: {v}");
        assert!(v["checks"][check]["reason"].is_string(), "{check}: {v}");
    }
    assert_eq!(chat(&gw.url, false).send().await.unwrap().status(), 200);

    // Redis stopped: not ready, naming Redis and not its address.
    redis.stop();
    let v = readyz_turns(&gw.url, 503, "not_ready").await;
    assert_eq!(v["checks"]["redis"]["ok"], false, "{v}");
    assert_eq!(v["checks"]["routes"]["ok"], true, "{v}");
    let reason = v["checks"]["redis"]["reason"].as_str().unwrap();
    assert!(reason.contains("Redis"), "{reason}");
    let text = v.to_string();
    assert!(
        !text.contains(&redis.port().to_string()) && !text.contains("redis://"),
        "{text}"
    );
    // Alive all the same.
    let health = understudy_testkit::http_client()
        .get(format!("{}/healthz", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // Back: ready again without a restart.
    redis.restart().unwrap();
    readyz_turns(&gw.url, 200, "ready").await;

    // The operator says degraded is fine: 200 while Redis is down.
    redis.stop();
    let scratch = Scratch::new("ready", "redis-optional");
    let toml = config(&sim, "[server]\nready_without_redis = true");
    let optional = start(&scratch, &toml, &[("REDIS_URL", &url)]);
    let v = readyz_turns(&optional.url, 200, "degraded").await;
    assert_eq!(v["checks"]["redis"]["ok"], false, "{v}");
    assert_eq!(v["checks"]["redis"]["required"], false, "{v}");
    assert_eq!(
        chat(&optional.url, false).send().await.unwrap().status(),
        200
    );
}

/// A response's `Connection` header.
fn close_of(resp: &reqwest::Response) -> Option<&str> {
    resp.headers()
        .get("connection")
        .and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn sigterm_turns_unready_serves_the_grace_then_finishes_open_streams() {
    let sim = SimProvider::openai().await.unwrap();
    // 40 chunks, 8 s: the stream outlives the grace by far.
    slow_streams(&sim, 40);
    let scratch = Scratch::new("drain", "stream");
    // The drain's settings from the environment, as a container sets them.
    let env = [
        ("UNDERSTUDY_DRAIN_GRACE", "2"),
        ("UNDERSTUDY_DRAIN_TIMEOUT", "60"),
    ];
    let mut gw = start(&scratch, &config(&sim, ""), &env);
    readyz_turns(&gw.url, 200, "ready").await;
    let stream = open_stream(&gw.url).await;
    let kept = understudy_testkit::http_client()
        .get(format!("{}/healthz", gw.url))
        .send()
        .await
        .unwrap();
    assert_ne!(
        close_of(&kept),
        Some("close"),
        "keep-alive before the drain"
    );

    gw.signal("TERM");
    // Unready at once, alive, and still serving new connections.
    let v = readyz_turns(&gw.url, 503, "draining").await;
    assert_eq!(v["checks"]["draining"]["ok"], false, "{v}");
    let health = understudy_testkit::http_client()
        .get(format!("{}/healthz", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "alive while draining");
    // Keep-alive clients are told to take their next request elsewhere.
    assert_eq!(close_of(&health), Some("close"));
    let served = chat(&gw.url, false).send().await.unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(close_of(&served), Some("close"));
    assert!(served.text().await.unwrap().contains("served in the grace"));

    // After the grace: new connections are refused while the stream is
    // still open.
    let addr = gw.url.trim_start_matches("http://").to_owned();
    eventually("new connections refused", async || {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    assert!(
        !stream.is_finished(),
        "the stream ended before the grace did"
    );

    // The stream finishes whole, then the process exits 0.
    let body = stream.await.unwrap();
    assert!(body.contains("c39") && body.contains("[DONE]"), "{body}");
    let status = exits(&mut gw, Duration::from_secs(30)).await;
    assert!(status.success(), "{status}; log:\n{}", gw.log());
    assert!(!gw.log().contains("cut"), "{}", gw.log());
}

#[tokio::test]
async fn the_drain_deadline_cuts_a_stream_that_would_outlive_it() {
    let sim = SimProvider::openai().await.unwrap();
    // 300 chunks, a minute: far past the deadline.
    slow_streams(&sim, 300);
    let scratch = Scratch::new("drain", "deadline");
    let toml = config(&sim, "[server]\ndrain_timeout = 1");
    let mut gw = start(&scratch, &toml, &[]);
    let stream = open_stream(&gw.url).await;

    gw.signal("TERM");
    let status = exits(&mut gw, Duration::from_secs(20)).await;
    assert!(status.success(), "{status}; log:\n{}", gw.log());
    let body = stream.await.unwrap();
    assert!(!body.contains("c299") && !body.contains("[DONE]"), "{body}");
    let log = plain(&gw.log());
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("cut=1")),
        "{log}"
    );
}

#[tokio::test]
async fn a_second_sigterm_stops_at_once() {
    let sim = SimProvider::openai().await.unwrap();
    let scratch = Scratch::new("drain", "second");
    // A grace and a deadline longer than the wait below.
    let toml = config(&sim, "[server]\ndrain_timeout = 600");
    let mut gw = start(&scratch, &toml, &[("UNDERSTUDY_DRAIN_GRACE", "600")]);
    gw.signal("TERM");
    readyz_turns(&gw.url, 503, "draining").await;
    gw.signal("TERM");
    let status = exits(&mut gw, understudy_testkit::eventually::PATIENCE).await;
    assert!(status.success(), "{status}; log:\n{}", gw.log());
    assert!(gw.log().contains("second"), "{}", gw.log());
}
