//! `UNDERSTUDY_BENCH_ONLY=hedge`: what hedging does to a slow tail. Two
//! simulated OpenAI-compatible providers behind the real gateway: a
//! primary whose first token comes at 0.3 s, one call in fifty at 5 s, and
//! a backup at 0.3 s. The same streamed requests go through a route
//! without hedging and one hedging after the primary's observed p95; the
//! table gives the time to first token through the gateway (p50, p99) and
//! the upstream calls each made, and the simulator's record of when the
//! losing connections closed, against when the winning backup's first
//! token left its simulator. Optional (about half a minute), so the full
//! run stays as it was.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use understudy_testkit::SimProvider;

use super::Error;
use super::process::{Gateway, serve_args};
use super::report::{Samples, say};

/// Requests measured per route, after the warm-up.
const REQUESTS: usize = 1000;
/// Requests in flight at once.
const CONCURRENCY: usize = 25;
/// Requests before the measured ones (the primary's p95 is learnt).
const WARM_UP: usize = 100;

/// What one route's run measured.
struct Run {
    ttft: Samples,
    /// Upstream calls (primary, backup) during the measured requests.
    calls: (usize, usize),
}

/// Runs the phase.
pub(crate) async fn run(
    gateway_bin: &Path,
    out_dir: &Path,
    cpu: Option<&str>,
) -> Result<(), Error> {
    let wall = Instant::now();
    let primary = SimProvider::openai().await?;
    let backup = SimProvider::openai().await?;
    primary.first_token_delay(Duration::from_millis(300));
    backup.first_token_delay(Duration::from_millis(300));
    let config = out_dir.join("hedge.toml");
    std::fs::write(&config, config_text(&primary, &backup))?;
    let gw = Gateway::spawn_with(
        gateway_bin,
        &serve_args(&config)?,
        cpu,
        false,
        "the hedging gateway",
        &[],
    )
    .await?;
    let plain = route(gw.addr, "plain", &primary, &backup).await?;
    let (closed_before, backups_before) =
        (primary.closed_mid_answer().len(), backup.request_count());
    let hedged = route(gw.addr, "hedged", &primary, &backup).await?;
    // A backup's first token leaves the simulator 0.3 s after its request
    // came: the winner's commit. Each primary connection closed since is
    // matched to the nearest (backups are a few per second at most).
    let commits: Vec<Instant> = backup.received()[backups_before..]
        .iter()
        .map(|r| r.at + Duration::from_millis(300))
        .collect();
    let closed = primary.closed_mid_answer();
    let closed = &closed[closed_before.min(closed.len())..];
    let worst_gap = closed
        .iter()
        .map(|&c| nearest_ms(c, &commits))
        .fold(0.0, f64::max);
    for (name, r) in [("without hedging", &plain), ("hedging after p95", &hedged)] {
        say(&format!(
            "{name}: TTFT p50 {:.0} ms, p99 {:.0} ms; upstream calls {} (primary {}, backup {})",
            r.ttft.p50(),
            r.ttft.p99(),
            r.calls.0 + r.calls.1,
            r.calls.0,
            r.calls.1
        ));
    }
    let fall = 100.0 * (1.0 - hedged.ttft.p99() / plain.ttft.p99());
    let more = 100.0
        * ((hedged.calls.0 + hedged.calls.1) as f64 / (plain.calls.0 + plain.calls.1) as f64 - 1.0);
    say(&format!(
        "hedging: p99 TTFT {fall:.0} % lower, {more:.1} % more upstream calls; {} slow primary \
         connections closed by the gateway, the latest {worst_gap:.0} ms from its backup's \
         first token; phase wall time {:.0} s",
        closed.len(),
        wall.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The gateway's settings: the two simulators, a plain route and a hedged
/// one over them.
fn config_text(primary: &SimProvider, backup: &SimProvider) -> String {
    format!(
        r#"[routing]
default = "primary"
order = ["primary", "backup"]

[providers.primary]
kind = "openai"
base_url = "{}"
model = "bench-model"
api_key = "sk-bench-primary"

[providers.backup]
kind = "openai"
base_url = "{}"
model = "bench-model"
api_key = "sk-bench-backup"

[routes]
plain = ["primary", "backup"]

[routes.hedged]
targets = ["primary", "backup"]
hedge = {{ after = "p95", max_share = 0.05 }}

[breaker]
failure_threshold = 0

[cache]
enabled = false
"#,
        primary.base_url(),
        backup.base_url()
    )
}

/// The warm-up, then the measured requests of `route`, with the
/// primary's slow tail restarted for each (one call in fifty at 5 s).
async fn route(
    addr: SocketAddr,
    route: &str,
    primary: &SimProvider,
    backup: &SimProvider,
) -> Result<Run, Error> {
    understudy_providers::install_tls_provider();
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let url = format!("http://{addr}/v1/chat/completions");
    let body = format!(
        r#"{{"model":"{route}","stream":true,"messages":[{{"role":"user","content":"Tell me a joke about benchmarks."}}]}}"#
    );
    primary.slow_every(50, Duration::from_secs(5));
    load(&client, &url, &body, WARM_UP).await?;
    let before = (primary.request_count(), backup.request_count());
    let started = Instant::now();
    let firsts = load(&client, &url, &body, REQUESTS).await?;
    let elapsed = started.elapsed();
    let calls = (
        primary.request_count() - before.0,
        backup.request_count() - before.1,
    );
    let micros = firsts
        .iter()
        .map(|(sent, first)| first.duration_since(*sent).as_micros() as u32)
        .collect();
    Ok(Run {
        ttft: Samples { micros, elapsed },
        calls,
    })
}

/// `n` streamed requests, [`CONCURRENCY`] at a time: when each was sent
/// and when its first text came.
async fn load(
    client: &reqwest::Client,
    url: &str,
    body: &str,
    n: usize,
) -> Result<Vec<(Instant, Instant)>, Error> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, url, body, next) = (
            client.clone(),
            url.to_owned(),
            body.to_owned(),
            std::sync::Arc::clone(&next),
        );
        tasks.spawn(async move {
            let mut out = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                out.push(first_text(&client, &url, &body).await?);
            }
            Ok::<_, Error>(out)
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        all.extend(done??);
    }
    Ok(all)
}

/// One streamed request: when it was sent and when its first text came
/// (read to its end).
async fn first_text(
    client: &reqwest::Client,
    url: &str,
    body: &str,
) -> Result<(Instant, Instant), Error> {
    let sent = Instant::now();
    let mut resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(format!("the gateway answered {}", resp.status()).into());
    }
    let mut first = None;
    while let Some(chunk) = resp.chunk().await? {
        if first.is_none() && has_text(&chunk) {
            first = Some(Instant::now());
        }
    }
    Ok((sent, first.ok_or("a stream without text")?))
}

/// Whether an SSE chunk carries text (`"content":"` and a character).
fn has_text(chunk: &[u8]) -> bool {
    let needle = b"\"content\":\"";
    chunk
        .windows(needle.len() + 1)
        .any(|w| &w[..needle.len()] == needle && w[needle.len()] != b'"')
}

/// Milliseconds from `at` to the nearest of `commits`.
fn nearest_ms(at: Instant, commits: &[Instant]) -> f64 {
    commits
        .iter()
        .map(|&f| {
            let d = if f > at { f - at } else { at - f };
            d.as_secs_f64() * 1000.0
        })
        .fold(f64::INFINITY, f64::min)
}
