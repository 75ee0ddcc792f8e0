//! `understudy-bench`: measures what the gateway costs. Run it through
//! `cargo xtask bench`, which builds everything in release mode and pins the
//! gateway to core 0 and this process (load generator and upstream) to
//! core 1.
//!
//! It starts a minimal OpenAI-compatible upstream (fixed answers, no
//! parsing beyond what is needed), the real `understudy serve` binary, and a
//! load generator on persistent HTTP/1.1 connections, all on loopback, and
//! prints a table (also written as JSON to `target/bench/latest.json`). It
//! never asserts on timing.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

mod stack;
mod tls;

type Error = Box<dyn std::error::Error + Send + Sync>;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1733000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Benchmarks are jokes that take themselves seriously.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}"#;
const FAILURE: &str = r#"{"error":{"message":"over capacity","type":"internal_server_error"}}"#;
/// The gateway's OpenAI-compatible endpoint.
const GATEWAY_PATH: &str = "/v1/chat/completions";
const REQUEST: &str = r#"{"model":"default","messages":[{"role":"user","content":"Tell me a joke about benchmarks."}]}"#;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = if args.get(1).map(String::as_str) == Some("--relay") {
        relay(args.get(2), args.get(3)).await
    } else if args.get(1).map(String::as_str) == Some("--stack-relay") {
        stack::relay(&args[2..]).await
    } else if args.get(1).map(String::as_str) == Some("--tls-relay") {
        tls::relay(&args[2..]).await
    } else if args.get(1).map(String::as_str) == Some("--echo") {
        echo(args.get(2))
    } else {
        run().await
    };
    if let Err(e) = result {
        let _ = writeln!(std::io::stderr(), "understudy-bench: {e}");
        std::process::exit(1);
    }
}

struct Row {
    name: String,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    note: String,
}

async fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let gateway_bin = PathBuf::from(
        args.get(1)
            .ok_or("usage: understudy-bench <understudy binary> <out dir> [gateway cpu]")?,
    );
    let out_dir = PathBuf::from(
        args.get(2)
            .ok_or("usage: understudy-bench <understudy binary> <out dir>")?,
    );
    let gateway_cpu = args.get(3).cloned();
    std::fs::create_dir_all(&out_dir)?;

    let upstream = start_upstream().await?;
    // `UNDERSTUDY_BENCH_ONLY=streams` runs only the open-streams phase (for
    // profiling memory with `UNDERSTUDY_BENCH_WRAP=heaptrack`).
    let only = std::env::var("UNDERSTUDY_BENCH_ONLY").unwrap_or_default();
    if only == "tls" {
        return tls::only(&gateway_bin, &out_dir, gateway_cpu.as_deref()).await;
    }
    // `relay-closed:<concurrency>` (`stack-closed:`, `parsing-closed:`): a
    // relay floor in the closed loop, started like the gateway (so
    // `UNDERSTUDY_BENCH_WRAP` applies to it).
    let relay_mode = Relay::ALL.iter().find_map(|&kind| {
        let rest = only.strip_prefix(kind.mode())?.strip_prefix("-closed:")?;
        Some((kind, rest.to_owned()))
    });
    let gw = match &relay_mode {
        Some((kind, _)) => Relay::start(*kind, upstream, gateway_cpu.as_deref(), true).await?,
        None => Gateway::start(&gateway_bin, &out_dir, upstream, gateway_cpu.as_deref()).await?,
    };
    let idle_rss = gw.rss_kib();
    if let Some(c) = only
        .strip_prefix("closed:")
        .or(only.strip_prefix("fallback:"))
        .or(relay_mode.as_ref().map(|(_, c)| c.as_str()))
    {
        // `closed:<concurrency>` (or `fallback:<concurrency>`, the 503-then-
        // answer route): 10 s of one closed loop, for a profiler; with
        // `UNDERSTUDY_BENCH_COUNT=n`, n requests after 200 of warm-up (two
        // counts under callgrind give the instructions of one request).
        let body = if only.starts_with("fallback:") {
            REQUEST.replace("\"default\"", "\"fallback\"")
        } else {
            REQUEST.to_owned()
        };
        let c: usize = c.parse()?;
        let url = match relay_mode {
            Some(_) => format!("http://{}/fast/v1/chat/completions", gw.addr),
            None => format!("http://{}/v1/chat/completions", gw.addr),
        };
        let count = std::env::var("UNDERSTUDY_BENCH_COUNT")
            .ok()
            .and_then(|n| n.parse::<usize>().ok());
        let s = match count {
            Some(n) => {
                fixed_count(gw.addr, &url, &body, c, 200).await?;
                let (user0, sys0) = gw.cpu_split();
                let s = fixed_count(gw.addr, &url, &body, c, n).await?;
                let (user, sys) = gw.cpu_split();
                say(&format!(
                    "CPU {:.1} µs per request ({:.1} user, {:.1} system)",
                    (user + sys - user0 - sys0) * 1e6 / n as f64,
                    (user - user0) * 1e6 / n as f64,
                    (sys - sys0) * 1e6 / n as f64
                ));
                s
            }
            None => closed_loop(gw.addr, &url, &body, c, Duration::from_secs(10)).await?,
        };
        say(&format!(
            "c={c}: {} requests, {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms",
            s.micros.len(),
            s.rps(),
            s.p50(),
            s.p99()
        ));
        return Ok(());
    }
    // `relay-streams` (`stack-streams`): a relay floor's memory per open
    // stream (not the parsing relay's: it reads answers whole).
    if let Some(&kind) = [Relay::Hyper, Relay::Stack]
        .iter()
        .find(|k| only.strip_prefix(k.mode()) == Some("-streams"))
    {
        drop(gw);
        let relay = Relay::start(kind, upstream, gateway_cpu.as_deref(), false).await?;
        let scale = open_streams(&relay, "/slow/v1/chat/completions", 5000).await?;
        say(&format!(
            "{}, 5000 open streams: RSS {} KiB, {:.1} KB per open stream, CPU {:.0}% of one core",
            kind.mode(),
            scale.rss_kib,
            scale.per_stream_kb,
            scale.cpu_percent
        ));
        return Ok(());
    }
    if only == "held" {
        // Streams held whole (`stream_commit = "complete"`): each holds its
        // answer (a token every 100 ms for 30 s) until the upstream
        // finishes; measured 10 s in, about 110 tokens held each.
        let scale = held_streams(&gw).await?;
        say(&scale);
        return Ok(());
    }
    if only == "streams" {
        let n = std::env::var("UNDERSTUDY_BENCH_STREAMS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(5000);
        let scale = open_streams(&gw, GATEWAY_PATH, n).await?;
        say(&format!(
            "{n} open streams: gateway RSS {} KiB (idle {} KiB), {:.1} KB per open stream, CPU {:.0}% of one core",
            scale.rss_kib, idle_rss, scale.per_stream_kb, scale.cpu_percent
        ));
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();

    let direct_url = format!("http://{upstream}/fast/v1/chat/completions");
    let gateway_url = format!("http://{}/v1/chat/completions", gw.addr);
    let fallback_body = REQUEST.replace("\"default\"", "\"fallback\"");

    // Warm up both paths.
    closed_loop(
        upstream,
        &direct_url,
        REQUEST,
        8,
        Duration::from_millis(500),
    )
    .await?;
    closed_loop(
        gw.addr,
        &gateway_url,
        REQUEST,
        8,
        Duration::from_millis(800),
    )
    .await?;

    for c in [1usize, 16, 64] {
        let d = closed_loop(upstream, &direct_url, REQUEST, c, Duration::from_secs(3)).await?;
        let g = closed_loop(gw.addr, &gateway_url, REQUEST, c, Duration::from_secs(3)).await?;
        rows.push(row(format!("direct, concurrency {c}"), &d, String::new()));
        rows.push(row(
            format!("gateway, concurrency {c}"),
            &g,
            format!(
                "added p50 {:.3} ms, p99 {:.3} ms",
                g.p50() - d.p50(),
                g.p99() - d.p99()
            ),
        ));
    }
    let d = open_loop(upstream, &direct_url, REQUEST, 1000, Duration::from_secs(5)).await?;
    let g = open_loop(gw.addr, &gateway_url, REQUEST, 1000, Duration::from_secs(5)).await?;
    rows.push(row("direct, fixed 1000 req/s".into(), &d, String::new()));
    rows.push(row(
        "gateway, fixed 1000 req/s".into(),
        &g,
        format!(
            "added p50 {:.3} ms, p99 {:.3} ms",
            g.p50() - d.p50(),
            g.p99() - d.p99()
        ),
    ));

    // Below every floor: one TCP round trip between two pinned processes
    // with blocking sockets, across the two cores and on one core.
    for (label, cpu) in [
        ("across cores", gateway_cpu.as_deref()),
        ("on one core", Some("1").filter(|_| gateway_cpu.is_some())),
    ] {
        let s = ping_pong(cpu).await?;
        rows.push(row(
            format!("floor: TCP round trip {label} (blocking ping-pong)"),
            &s,
            String::new(),
        ));
    }

    // The floor: a do-nothing HTTP/1.1 relay (hyper server and client, one
    // upstream connection per client connection, no parsing) pinned like
    // the gateway. What it adds is what any proxy process pays on this rig.
    // Beside it the floor of the gateway's fixed shape: the same relay on
    // axum and a pooled reqwest client, doing nothing else.
    let relay = Relay::Hyper
        .start(upstream, gateway_cpu.as_deref(), false)
        .await?;
    let relay_url = format!("http://{}/fast/v1/chat/completions", relay.addr);
    let stack = Relay::Stack
        .start(upstream, gateway_cpu.as_deref(), false)
        .await?;
    let stack_url = format!("http://{}/fast/v1/chat/completions", stack.addr);
    // The gateway against both, interleaved (relay, stack, gateway, relay,
    // …) so that all see the same machine: throughput, CPU per request
    // (user + system, from /proc), added p50.
    let d = closed_loop(upstream, &direct_url, REQUEST, 1, Duration::from_secs(3)).await?;
    for c in [1usize, 64] {
        let mut rounds = Vec::new();
        for _ in 0..2 {
            let mut round = Vec::new();
            for (process, url) in [
                (&relay, &relay_url),
                (&stack, &stack_url),
                (&gw, &gateway_url),
            ] {
                let load = closed_loop(process.addr, url, REQUEST, c, Duration::from_secs(3));
                round.push(with_cpu(process, load).await?);
            }
            rounds.push(round);
        }
        for (i, round) in rounds.iter().enumerate() {
            let [(r, rcpu), (s, scpu), (g, gcpu)] = &round[..] else {
                continue;
            };
            rows.push(row(
                format!("floor: do-nothing relay, concurrency {c} (round {})", i + 1),
                r,
                format!(
                    "added p50 {:.3} ms, p99 {:.3} ms; CPU {rcpu:.1} µs per request",
                    r.p50() - d.p50(),
                    r.p99() - d.p99()
                ),
            ));
            rows.push(row(
                format!("floor: axum + reqwest relay, concurrency {c} (round {})", i + 1),
                s,
                format!(
                    "{:.2}× the relay's req/s; CPU {scpu:.1} µs per request ({:.2}× the relay's); added p50 {:+.3} ms over the relay's",
                    s.rps() / r.rps(),
                    scpu / rcpu,
                    s.p50() - r.p50()
                ),
            ));
            rows.push(row(
                format!("gateway beside them, concurrency {c} (round {})", i + 1),
                g,
                format!(
                    "{:.2}× the relay's req/s; CPU {gcpu:.1} µs per request ({:.2}× the relay's, {:.2}× the axum + reqwest relay's); added p50 {:+.3} ms over the relay's, {:+.3} ms over the axum + reqwest relay's",
                    g.rps() / r.rps(),
                    gcpu / rcpu,
                    gcpu / scpu,
                    g.p50() - r.p50(),
                    g.p50() - s.p50()
                ),
            ));
        }
    }
    drop(stack);
    let relay_fallback = format!("http://{}/fallback/v1/chat/completions", relay.addr);
    let r2 = closed_loop(
        relay.addr,
        &relay_fallback,
        REQUEST,
        1,
        Duration::from_secs(3),
    )
    .await?;
    rows.push(row(
        "floor: relay, two upstream calls (503, then answer)".into(),
        &r2,
        format!(
            "added p50 {:.3} ms over one direct call",
            r2.p50() - d.p50()
        ),
    ));
    drop(relay);

    let d = closed_loop(upstream, &direct_url, REQUEST, 1, Duration::from_secs(3)).await?;
    let f = closed_loop(
        gw.addr,
        &gateway_url,
        &fallback_body,
        1,
        Duration::from_secs(3),
    )
    .await?;
    rows.push(row(
        "fallback (503, then answer), c=1".into(),
        &f,
        format!(
            "added p50 {:.3} ms over one direct call (p99 {:.3} ms)",
            f.p50() - d.p50(),
            f.p99() - d.p99()
        ),
    ));

    let (direct_ttfb, gateway_ttfb) = ttfb(upstream, gw.addr, 300).await?;
    rows.push(Row {
        name: "streamed, time to first byte (p50)".into(),
        rps: 0.0,
        p50_ms: gateway_ttfb.p50(),
        p99_ms: gateway_ttfb.p99(),
        note: format!(
            "direct p50 {:.3} ms, added {:.3} ms",
            direct_ttfb.p50(),
            gateway_ttfb.p50() - direct_ttfb.p50()
        ),
    });

    // Memory: 100 000 requests, then 5 000 open streams.
    let before_load = gw.rss_kib();
    let many = fixed_count(gw.addr, &gateway_url, REQUEST, 64, 100_000).await?;
    let after_load = gw.rss_kib();
    let peak_load = gw.hwm_kib();
    rows.push(row(
        "gateway, 100 000 requests, c=64".into(),
        &many,
        format!("RSS {} → {} KiB", before_load, after_load),
    ));
    let scale = open_streams(&gw, GATEWAY_PATH, 5000).await?;
    notes.push(format!(
        "5 000 open streams (a token every 100 ms): gateway RSS {} KiB (idle {} KiB), {:.1} KB per open stream, CPU {:.0}% of one core",
        scale.rss_kib, idle_rss, scale.per_stream_kb, scale.cpu_percent
    ));
    notes.push(held_streams(&gw).await?);
    let peak = gw.hwm_kib();
    drop(gw);
    let relay = Relay::Hyper
        .start(upstream, gateway_cpu.as_deref(), false)
        .await?;
    let idle_relay = relay.rss_kib();
    let relay_scale = open_streams(&relay, "/slow/v1/chat/completions", 5000).await?;
    drop(relay);
    let stack = Relay::Stack
        .start(upstream, gateway_cpu.as_deref(), false)
        .await?;
    let stack_scale = open_streams(&stack, "/slow/v1/chat/completions", 5000).await?;
    drop(stack);
    notes.push(format!(
        "floor: the do-nothing relay with 5 000 open streams: RSS {} KiB (idle {} KiB), {:.1} KB per open stream, CPU {:.0}% of one core",
        relay_scale.rss_kib, idle_relay, relay_scale.per_stream_kb, relay_scale.cpu_percent
    ));
    notes.push(format!(
        "floor: the axum + reqwest relay with 5 000 open streams: RSS {} KiB, {:.1} KB per open stream, CPU {:.0}% of one core",
        stack_scale.rss_kib, stack_scale.per_stream_kb, stack_scale.cpu_percent
    ));
    notes.push(format!(
        "RSS: idle {idle_rss} KiB; after 100 000 requests {after_load} KiB (before them {before_load} KiB); peak under request load {peak_load} KiB; peak overall {peak} KiB"
    ));

    tls::phase(
        &gateway_bin,
        &out_dir,
        gateway_cpu.as_deref(),
        &mut rows,
        &mut notes,
    )
    .await?;
    let table = render(&rows, &notes);
    let _ = std::io::stdout().write_all(table.as_bytes());
    let json = json!({
        "rows": rows.iter().map(|r| json!({"name": r.name, "rps": r.rps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "note": r.note})).collect::<Vec<_>>(),
        "idle_rss_kib": idle_rss,
        "rss_after_100k_kib": after_load,
        "rss_before_100k_kib": before_load,
        "peak_rss_kib": peak,
        "open_streams": {"count": 5000, "rss_kib": scale.rss_kib, "kb_per_stream": scale.per_stream_kb, "cpu_percent": scale.cpu_percent},
        "relay_open_streams": {"count": 5000, "rss_kib": relay_scale.rss_kib, "kb_per_stream": relay_scale.per_stream_kb, "cpu_percent": relay_scale.cpu_percent},
        "stack_relay_open_streams": {"count": 5000, "rss_kib": stack_scale.rss_kib, "kb_per_stream": stack_scale.per_stream_kb, "cpu_percent": stack_scale.cpu_percent},
        "pinned": gateway_cpu.is_some(),
    });
    std::fs::write(
        out_dir.join("latest.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// `load`'s samples and the CPU time (user + system) `gw` spent per
/// request meanwhile, in µs.
async fn with_cpu(
    gw: &Gateway,
    load: impl std::future::Future<Output = Result<Samples, Error>>,
) -> Result<(Samples, f64), Error> {
    let before = gw.cpu_seconds();
    let s = load.await?;
    let cpu = (gw.cpu_seconds() - before) * 1e6 / s.micros.len().max(1) as f64;
    Ok((s, cpu))
}

/// One line on standard output.
fn say(line: &str) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn row(name: String, s: &Samples, note: String) -> Row {
    Row {
        name,
        rps: s.rps(),
        p50_ms: s.p50(),
        p99_ms: s.p99(),
        note,
    }
}

fn render(rows: &[Row], notes: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| measurement | req/s | p50 ms | p99 ms | note |");
    let _ = writeln!(out, "|---|---:|---:|---:|---|");
    for r in rows {
        let rps = if r.rps > 0.0 {
            format!("{:.0}", r.rps)
        } else {
            "–".into()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {} |",
            r.name, rps, r.p50_ms, r.p99_ms, r.note
        );
    }
    for n in notes {
        let _ = writeln!(out, "\n{n}");
    }
    out
}

// === samples ===

struct Samples {
    micros: Vec<u32>,
    elapsed: Duration,
}

impl Samples {
    fn pct(&self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        let mut v = self.micros.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        f64::from(v[i]) / 1000.0
    }
    fn p50(&self) -> f64 {
        self.pct(0.50)
    }
    fn p99(&self) -> f64 {
        self.pct(0.99)
    }
    fn rps(&self) -> f64 {
        self.micros.len() as f64 / self.elapsed.as_secs_f64()
    }
}

// === the upstream ===

/// A minimal OpenAI-compatible upstream. `/fast/...` answers at once,
/// `/fail/...` answers 503 at once, `/slow/...` streams a token every
/// 100 ms for 30 s; any path streams when the body asks for it.
async fn start_upstream() -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(upstream_handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn upstream_handle(req: Request<Incoming>) -> Result<Response<UpBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let streamed = memchr_stream(&body);
    let full = |status: u16, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
        r.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    if path.starts_with("/fail/") {
        return Ok(full(503, FAILURE));
    }
    if !streamed {
        return Ok(full(200, ANSWER));
    }
    let (tokens, every) = if path.starts_with("/slow/") {
        (300, Duration::from_millis(100))
    } else {
        (8, Duration::ZERO)
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        let chunk = |delta: &str, finish: &str| {
            Bytes::from(format!(
                "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
            ))
        };
        if tx
            .send(Ok(Frame::data(chunk(
                r#"{"role":"assistant","content":""}"#,
                "null",
            ))))
            .await
            .is_err()
        {
            return;
        }
        for i in 0..tokens {
            if !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            if tx
                .send(Ok(Frame::data(chunk(
                    &format!(r#"{{"content":" t{i}"}}"#),
                    "null",
                ))))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = tx.send(Ok(Frame::data(chunk("{}", "\"stop\"")))).await;
        let _ = tx
            .send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
            .await;
    });
    let stream = ReceiverStream(rx);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    Ok(r)
}

/// Whether the request body asks for a stream (no JSON parse: the fast
/// upstream must cost as little as possible).
fn memchr_stream(body: &[u8]) -> bool {
    body.windows(13).any(|w| w == b"\"stream\":true")
        || body.windows(14).any(|w| w == b"\"stream\": true")
}

struct ReceiverStream<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for ReceiverStream<T> {
    type Item = T;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

// === the gateway ===

struct Gateway {
    child: Child,
    addr: SocketAddr,
}

impl Gateway {
    async fn start(
        bin: &std::path::Path,
        dir: &std::path::Path,
        upstream: SocketAddr,
        cpu: Option<&str>,
    ) -> Result<Self, Error> {
        let config = dir.join("gateway.toml");
        std::fs::write(
            &config,
            format!(
                r#"[server]
# The load generator sends `Host: bench`; an open gateway on loopback
# answers only hosts it knows.
allowed_hosts = ["bench"]
# 5 000 open streams are measured; the default cap (1 024) would keep the
# rest waiting in the accept queue.
max_connections = 10000

[routing]
default = "fast"
order = ["fast"]

[providers.fast]
kind = "openai"
base_url = "http://{upstream}/fast/v1"
model = "bench-model"

[providers.fail]
kind = "openai"
base_url = "http://{upstream}/fail/v1"
model = "bench-model"

[providers.slow]
kind = "openai"
base_url = "http://{upstream}/slow/v1"
model = "bench-model"

[routes]
fallback = ["fail", "fast"]
slowstream = ["slow"]

[breaker]
failure_threshold = 0

[timeouts]
stream_idle = 60
request = 120

[cache]
enabled = false
"#
            ),
        )?;
        Self::spawn(bin, &serve_args(&config)?, cpu, true, "the gateway").await
    }

    /// `program args <a free address>` (it listens there), pinned to `cpu`,
    /// its environment cleared but for `PATH` and `RUST_LOG=warn`, under
    /// `UNDERSTUDY_BENCH_WRAP` (a profiler; the process's RSS and CPU
    /// figures are then the wrapper's) when `wrapped` and that is set;
    /// returned once it accepts connections. Every process the bench
    /// measures — gateways and relays — starts here.
    async fn spawn(
        program: impl AsRef<std::ffi::OsStr>,
        args: &[std::ffi::OsString],
        cpu: Option<&str>,
        wrapped: bool,
        what: &str,
    ) -> Result<Self, Error> {
        let addr = free_addr()?;
        let wrap = std::env::var("UNDERSTUDY_BENCH_WRAP")
            .ok()
            .filter(|_| wrapped);
        let mut cmd = match &wrap {
            Some(w) => {
                let mut c = pinned(cpu, w);
                c.arg(program);
                c
            }
            None => pinned(cpu, program),
        };
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .args(args)
            .arg(addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn()?;
        wait_listening(addr, what).await?;
        Ok(Self { child, addr })
    }

    fn status_kib(&self, field: &str) -> u64 {
        let pid = gateway_pid(&self.child);
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(field))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }

    fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    fn hwm_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// User + system CPU seconds so far.
    fn cpu_seconds(&self) -> f64 {
        let (user, sys) = self.cpu_split();
        user + sys
    }

    /// User and system CPU seconds so far.
    fn cpu_split(&self) -> (f64, f64) {
        let pid = gateway_pid(&self.child);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        let field = |i: usize| f.get(i).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0);
        (field(11) / 100.0, field(12) / 100.0)
    }
}

/// The gateway's pid (taskset execs it, so the child's pid is the gateway's).
fn gateway_pid(child: &Child) -> u32 {
    child.id()
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// === the floor: a do-nothing relay ===

/// A relay floor as a child process (this binary with `--relay` or
/// `--stack-relay`), pinned like the gateway; measured through the same
/// handle.
#[derive(Debug, Clone, Copy)]
enum Relay {
    /// hyper's server and client, one upstream connection per client
    /// connection, nothing parsed: what any proxy process pays.
    Hyper,
    /// The gateway's stack doing nothing: hyper's server, an axum router, a
    /// pooled reqwest client (`stack.rs`).
    Stack,
    /// [`Relay::Stack`] reading both bodies as JSON and writing them again.
    Parsing,
}

impl Relay {
    const ALL: [Relay; 3] = [Relay::Hyper, Relay::Stack, Relay::Parsing];

    /// The `UNDERSTUDY_BENCH_ONLY` prefix (`<mode>-closed:<c>`, `<mode>-streams`).
    fn mode(self) -> &'static str {
        match self {
            Relay::Hyper => "relay",
            Relay::Stack => "stack",
            Relay::Parsing => "parsing",
        }
    }

    /// The relay, under `UNDERSTUDY_BENCH_WRAP` when `wrapped` (for
    /// `<mode>-closed:<c>`).
    async fn start(
        self,
        upstream: SocketAddr,
        cpu: Option<&str>,
        wrapped: bool,
    ) -> Result<Gateway, Error> {
        let mut args: Vec<std::ffi::OsString> = match self {
            Relay::Hyper => vec!["--relay".into()],
            Relay::Stack => vec!["--stack-relay".into()],
            Relay::Parsing => vec!["--stack-relay".into(), "--parse".into()],
        };
        args.push(upstream.to_string().into());
        let what = format!("the {} relay", self.mode());
        Gateway::spawn(std::env::current_exe()?, &args, cpu, wrapped, &what).await
    }
}

/// `understudy --config <config> serve --listen` (the address follows, from
/// [`Gateway::spawn`]).
fn serve_args(config: &std::path::Path) -> Result<Vec<std::ffi::OsString>, Error> {
    Ok(vec![
        "--config".into(),
        config.as_os_str().to_owned(),
        "serve".into(),
        "--listen".into(),
    ])
}

/// `program`, pinned to `cpu` with `taskset` when one is given.
fn pinned(cpu: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// A loopback address with a port that was free a moment ago.
fn free_addr() -> Result<SocketAddr, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// Waits (at most 30 s: a profiler starts slowly) until `addr` accepts connections.
async fn wait_listening(addr: SocketAddr, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            return Err(format!("{what} did not start listening").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Forwards every request on a client connection over its own upstream
/// connection, bodies collected, nothing parsed.
async fn relay(upstream: Option<&String>, listen: Option<&String>) -> Result<(), Error> {
    let upstream: SocketAddr = upstream.ok_or("--relay <upstream> <listen>")?.parse()?;
    let listen: SocketAddr = listen.ok_or("--relay <upstream> <listen>")?.parse()?;
    let listener = TcpListener::bind(listen).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(sender) = connect(upstream).await else {
                return;
            };
            let sender = Arc::new(tokio::sync::Mutex::new(sender));
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let sender = Arc::clone(&sender);
                async move {
                    let (mut parts, body) = req.into_parts();
                    let body = body.collect().await?.to_bytes();
                    let mut sender = sender.lock().await;
                    // `/fallback/...`: one call to the failing path first, as
                    // the gateway's fallback path does.
                    if let Some(rest) = parts.uri.path().strip_prefix("/fallback") {
                        let fast: hyper::Uri = format!("/fast{rest}").parse().unwrap_or_default();
                        let mut fail = Request::new(Full::new(body.clone()));
                        *fail.method_mut() = hyper::Method::POST;
                        *fail.uri_mut() = format!("/fail{rest}").parse().unwrap_or_default();
                        *fail.headers_mut() = parts.headers.clone();
                        sender.ready().await?;
                        let failed = sender.send_request(fail).await?;
                        let _ = failed.into_body().collect().await?;
                        parts.uri = fast;
                    }
                    let req = Request::from_parts(parts, Full::new(body));
                    sender.ready().await?;
                    // The answer's body is passed through as it arrives.
                    sender.send_request(req).await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A blocking TCP echo on `listen` for one connection (the ping-pong floor).
fn echo(listen: Option<&String>) -> Result<(), Error> {
    use std::io::Read as _;
    let listen: SocketAddr = listen.ok_or("--echo <listen>")?.parse()?;
    let listener = std::net::TcpListener::bind(listen)?;
    let (mut stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut buf = [0u8; 64];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n])?;
    }
}

/// 20 000 blocking round trips of 4 bytes to an echo process pinned to
/// `cpu`, from this process (pinned to core 1 by xtask).
async fn ping_pong(cpu: Option<&str>) -> Result<Samples, Error> {
    let addr = free_addr()?;
    let mut cmd = pinned(cpu, std::env::current_exe()?);
    cmd.arg("--echo")
        .arg(addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    let result = tokio::task::spawn_blocking(move || -> Result<Samples, Error> {
        use std::io::Read as _;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match std::net::TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nodelay(true)?;
        let mut buf = [0u8; 4];
        let started = Instant::now();
        let mut micros = Vec::with_capacity(20_000);
        for _ in 0..20_000 {
            let t = Instant::now();
            stream.write_all(b"ping")?;
            stream.read_exact(&mut buf)?;
            micros.push(t.elapsed().as_micros() as u32);
        }
        Ok(Samples {
            micros,
            elapsed: started.elapsed(),
        })
    })
    .await?;
    let _ = child.kill();
    let _ = child.wait();
    result
}

// === the load generator ===

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, Error> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn one(sender: &mut Sender, url: &str, body: &'static str) -> Result<(), Error> {
    sender.ready().await?;
    let req = Request::post(url)
        .header("content-type", "application/json")
        .header("host", "bench")
        .body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let _ = resp.into_body().collect().await?;
    if !status.is_success() {
        return Err(format!("HTTP {status}").into());
    }
    Ok(())
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// `c` connections, each sending requests back to back for `d`.
async fn closed_loop(
    addr: SocketAddr,
    url: &str,
    body: &str,
    c: usize,
    d: Duration,
) -> Result<Samples, Error> {
    back_to_back(addr, url, body, c, Until::Elapsed(d)).await
}

/// `n` requests over `c` connections, as fast as they go.
async fn fixed_count(
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
enum Until {
    Elapsed(Duration),
    Sent(usize),
}

async fn back_to_back(
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

/// A fixed arrival rate for `d`, spread over 64 connections, so a slow
/// response does not delay the next send (no coordinated omission).
async fn open_loop(
    addr: SocketAddr,
    url: &str,
    body: &str,
    rate: u32,
    d: Duration,
) -> Result<Samples, Error> {
    let body = leak(body);
    let url = leak(url);
    let pool = 64;
    let (tx, rx) = async_channel(rate as usize * 2);
    let mut tasks = Vec::new();
    for _ in 0..pool {
        let mut sender = connect(addr).await?;
        let rx = Arc::clone(&rx);
        tasks.push(tokio::spawn(async move {
            let mut micros = Vec::new();
            loop {
                let next = rx.lock().await.recv().await;
                let Some(_scheduled) = next else { break };
                // Timed from the send: tokio's timer has a 1 ms resolution, so
                // lateness against the schedule would be mostly timer noise;
                // the 64 connections keep queueing out of the picture at this rate.
                let t = Instant::now();
                one(&mut sender, url, body).await?;
                micros.push(t.elapsed().as_micros() as u32);
            }
            Ok::<_, Error>(micros)
        }));
    }
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut i = 0u32;
    while started.elapsed() < d {
        let at = started + interval * i;
        tokio::time::sleep_until(at.into()).await;
        if tx.send(at).await.is_err() {
            break;
        }
        i += 1;
    }
    drop(tx);
    let mut micros = Vec::new();
    for t in tasks {
        micros.extend(t.await??);
    }
    Ok(Samples {
        micros,
        elapsed: started.elapsed(),
    })
}

type Shared<T> = Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<T>>>;

fn async_channel<T>(n: usize) -> (tokio::sync::mpsc::Sender<T>, Shared<T>) {
    let (tx, rx) = tokio::sync::mpsc::channel(n);
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

/// Time to the first streamed text, direct and through the gateway.
async fn ttfb(
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

struct Scale {
    rss_kib: u64,
    per_stream_kb: f64,
    cpu_percent: f64,
}

/// Opens `n` streams through `gw` (the gateway, or the relay with `path`
/// `/slow/v1/chat/completions`), a token every 100 ms each, and measures
/// it while they are all open.
async fn open_streams(gw: &Gateway, path: &str, n: usize) -> Result<Scale, Error> {
    open_streams_with(gw, path, n, &[], Duration::ZERO).await
}

/// 1 000 streams held under `stream_commit = "complete"`, measured 10 s
/// in, against the per-stream budget of held events.
async fn held_streams(gw: &Gateway) -> Result<String, Error> {
    const HELD: &[(&str, &str)] = &[("x-understudy-stream-commit", "complete")];
    let n = 1000;
    let scale = open_streams_with(gw, GATEWAY_PATH, n, HELD, Duration::from_secs(6)).await?;
    Ok(format!(
        "{n} streams held under stream_commit = \"complete\" (a token every 100 ms, measured 10 s in: about 100 tokens held each): gateway RSS {} KiB, {:.1} KB per held stream (budget of held events: {} KiB per stream), CPU {:.0}% of one core",
        scale.rss_kib,
        scale.per_stream_kb,
        understudy_core::policy::stream::HELD_BYTES / 1024,
        scale.cpu_percent
    ))
}

/// As [`open_streams`], with extra request headers, measuring `hold` later
/// (so that a held stream has held that much more of its answer).
async fn open_streams_with(
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
    let mut tasks = Vec::new();
    for i in 0..n {
        let stop = Arc::clone(&stop);
        let opened = Arc::clone(&opened);
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
                    Ok(Some(Ok(_))) | Err(_) => {}
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
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = (gw.cpu_seconds() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let rss = gw.rss_kib();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let per = (rss.saturating_sub(base)) as f64 * 1.024 / n as f64;
    Ok(Scale {
        rss_kib: rss,
        per_stream_kb: per,
        cpu_percent: cpu,
    })
}
