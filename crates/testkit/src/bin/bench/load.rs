//! The load generator: closed loops on persistent HTTP/1.1 connections
//! (the open loops are `rate.rs`'s), time to first byte, and open streams with the memory they
//! cost.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::process::Gateway;
use super::report::Samples;
use super::{Error, GATEWAY_PATH, REQUEST};

pub(crate) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

pub(crate) async fn connect(addr: SocketAddr) -> Result<Sender, Error> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// The `authorization` every request carries under
/// `UNDERSTUDY_BENCH_CLIENT` (see [`crate::process::client_settings`]).
fn client_header() -> Option<&'static str> {
    static HEADER: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *HEADER.get_or_init(|| {
        crate::process::client_settings().map(|(_, key, _)| leak(&format!("Bearer {key}")))
    })
}

pub(crate) async fn one(sender: &mut Sender, url: &str, body: &'static str) -> Result<(), Error> {
    sender.ready().await?;
    let mut req = Request::post(url)
        .header("content-type", "application/json")
        .header("host", "bench");
    if let Some(key) = client_header() {
        req = req.header("authorization", key);
    }
    let req = req.body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let _ = resp.into_body().collect().await?;
    if !status.is_success() {
        return Err(format!("HTTP {status}").into());
    }
    Ok(())
}

pub(crate) fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// `c` connections, each sending requests back to back for `d`.
pub(crate) async fn closed_loop(
    addr: SocketAddr,
    url: &str,
    body: &str,
    c: usize,
    d: Duration,
) -> Result<Samples, Error> {
    back_to_back(addr, url, body, c, Until::Elapsed(d)).await
}

/// `n` requests over `c` connections, as fast as they go.
pub(crate) async fn fixed_count(
    addr: SocketAddr,
    url: &str,
    body: &str,
    c: usize,
    n: usize,
) -> Result<Samples, Error> {
    back_to_back(addr, url, body, c, Until::Sent(n)).await
}

/// When a back-to-back load stops.
#[derive(Clone, Copy)]
pub(crate) enum Until {
    Elapsed(Duration),
    Sent(usize),
}

pub(crate) async fn back_to_back(
    addr: SocketAddr,
    url: &str,
    body: &str,
    c: usize,
    until: Until,
) -> Result<Samples, Error> {
    let body = leak(body);
    let url = leak(url);
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(match until {
        Until::Sent(n) => n,
        Until::Elapsed(_) => usize::MAX,
    }));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let mut sender = connect(addr).await?;
        let left = Arc::clone(&left);
        tasks.push(tokio::spawn(async move {
            let mut micros = Vec::with_capacity(100_000);
            let more = || match until {
                Until::Elapsed(d) => started.elapsed() < d,
                Until::Sent(_) => left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| l.checked_sub(1))
                    .is_ok(),
            };
            while more() {
                let t = Instant::now();
                one(&mut sender, url, body).await?;
                micros.push(t.elapsed().as_micros() as u32);
            }
            Ok::<_, Error>(micros)
        }));
    }
    let mut micros = Vec::new();
    for t in tasks {
        micros.extend(t.await??);
    }
    Ok(Samples {
        micros,
        elapsed: started.elapsed(),
    })
}

/// Time to the first streamed text, direct and through the gateway.
pub(crate) async fn ttfb(
    upstream: SocketAddr,
    gateway: SocketAddr,
    n: usize,
) -> Result<(Samples, Samples), Error> {
    let body = leak(&REQUEST.replace("\"messages\"", "\"stream\":true,\"messages\""));
    let mut out = Vec::new();
    for (addr, url) in [
        (
            upstream,
            format!("http://{upstream}/fast/v1/chat/completions"),
        ),
        (gateway, format!("http://{gateway}/v1/chat/completions")),
    ] {
        let mut sender = connect(addr).await?;
        let mut micros = Vec::new();
        let started = Instant::now();
        for _ in 0..n {
            sender.ready().await?;
            let req = Request::post(&url)
                .header("content-type", "application/json")
                .header("host", "bench")
                .body(Full::new(Bytes::from_static(body.as_bytes())))?;
            let t = Instant::now();
            let resp = sender.send_request(req).await?;
            let mut body = resp.into_body();
            let mut first = None;
            while let Some(frame) = body.frame().await {
                let frame = frame?;
                if let Some(data) = frame.data_ref() {
                    if first.is_none() && data.windows(3).any(|w| w == b" t0") {
                        first = Some(t.elapsed());
                    }
                }
            }
            micros.push(first.unwrap_or_else(|| t.elapsed()).as_micros() as u32);
        }
        out.push(Samples {
            micros,
            elapsed: started.elapsed(),
        });
    }
    let g = out.pop().ok_or("no samples")?;
    let d = out.pop().ok_or("no samples")?;
    Ok((d, g))
}

pub(crate) struct Scale {
    pub(crate) rss_kib: u64,
    pub(crate) per_stream_kb: f64,
    pub(crate) cpu_percent: f64,
    /// Chunks the clients received per second while measured.
    pub(crate) tokens_per_second: f64,
}

impl Scale {
    /// CPU per streamed token, in µs: the process's CPU time over the
    /// measured seconds divided by the chunks its clients received then.
    pub(crate) fn cpu_per_token_us(&self) -> f64 {
        self.cpu_percent * 1e4 / self.tokens_per_second.max(1.0)
    }

    /// Its `latest.json` entry (every phase opens 5 000 streams).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "count": 5000,
            "rss_kib": self.rss_kib,
            "kb_per_stream": self.per_stream_kb,
            "cpu_percent": self.cpu_percent,
            "cpu_us_per_token": self.cpu_per_token_us(),
        })
    }
}

/// Opens `n` streams through `gw` (the gateway, or the relay with `path`
/// `/slow/v1/chat/completions`), a token every 100 ms each, and measures
/// it while they are all open.
pub(crate) async fn open_streams(gw: &Gateway, path: &str, n: usize) -> Result<Scale, Error> {
    open_streams_with(gw, path, n, &[], Duration::ZERO).await
}

/// 1 000 streams held under `stream_commit = "complete"`, measured 10 s
/// in, against the per-stream budget of held events.
pub(crate) async fn held_streams(gw: &Gateway) -> Result<String, Error> {
    pub(crate) const HELD: &[(&str, &str)] = &[("x-understudy-stream-commit", "complete")];
    let n = 1000;
    let scale = open_streams_with(gw, GATEWAY_PATH, n, HELD, Duration::from_secs(6)).await?;
    Ok(format!(
        "{n} streams held under stream_commit = \"complete\" (a token every 100 ms, measured 10 s in: about 100 tokens held each): gateway RSS {} KiB, {:.1} KB per held stream (budget of held events: {} KiB per stream), CPU {:.0}% of one core",
        scale.rss_kib,
        scale.per_stream_kb,
        understudy_policy::stream::HELD_BYTES / 1024,
        scale.cpu_percent
    ))
}

/// As [`open_streams`], with extra request headers, measuring `hold` later
/// (so that a held stream has held that much more of its answer).
pub(crate) async fn open_streams_with(
    gw: &Gateway,
    path: &str,
    n: usize,
    headers: &'static [(&'static str, &'static str)],
    hold: Duration,
) -> Result<Scale, Error> {
    let gateway = gw.addr;
    let base = gw.rss_kib();
    let body = leak(
        &REQUEST
            .replace("\"default\"", "\"slowstream\"")
            .replace("\"messages\"", "\"stream\":true,\"messages\""),
    );
    let url = leak(&format!("http://{gateway}{path}"));
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(Semaphore::new(0));
    let chunks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..n {
        let stop = Arc::clone(&stop);
        let opened = Arc::clone(&opened);
        let chunks = Arc::clone(&chunks);
        tasks.push(tokio::spawn(async move {
            let Ok(mut sender) = connect(gateway).await else {
                return;
            };
            let mut req = Request::post(url)
                .header("content-type", "application/json")
                .header("host", "bench");
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let Ok(req) = req.body(Full::new(Bytes::from_static(body.as_bytes()))) else {
                return;
            };
            let Ok(resp) = sender.send_request(req).await else {
                return;
            };
            opened.add_permits(1);
            let mut body = resp.into_body();
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(Duration::from_millis(500), body.frame()).await {
                    Ok(Some(Ok(_))) => {
                        chunks.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                    _ => break,
                }
            }
            let _ = i;
        }));
        if i % 200 == 199 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let all = opened.acquire_many(n as u32);
    let _ = tokio::time::timeout(Duration::from_secs(30), all).await;
    tokio::time::sleep(Duration::from_secs(1) + hold).await;
    let cpu0 = gw.cpu_seconds();
    let chunks0 = chunks.load(Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (gw.cpu_seconds() - cpu0) / secs * 100.0;
    let tokens_per_second = (chunks.load(Ordering::Relaxed) - chunks0) as f64 / secs;
    let rss = gw.rss_kib();
    // `UNDERSTUDY_BENCH_HOLD=<seconds>`: the streams kept open that much
    // longer after the measurement, for a look at the process meanwhile
    // (`gdb -p`, a heap profiler's snapshot); the upstream ends each
    // stream 30 s after it began.
    if let Some(secs) = std::env::var("UNDERSTUDY_BENCH_HOLD")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        super::report::say(&format!(
            "holding {n} open streams for {secs} s (pid {})",
            gw.child.id()
        ));
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let per = (rss.saturating_sub(base)) as f64 * 1.024 / n as f64;
    Ok(Scale {
        rss_kib: rss,
        per_stream_kb: per,
        cpu_percent: cpu,
        tokens_per_second,
    })
}
