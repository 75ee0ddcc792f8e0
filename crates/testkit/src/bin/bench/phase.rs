//! `UNDERSTUDY_BENCH_ONLY=<phase>`: one phase alone, for a profiler or a
//! closer look (`closed:<c>`, `fallback:<c>`, `tier:<c>`, `one:<c>`,
//! `three:<c>`, `sessions:<c>`, `unpinned:<c>`, `relay-closed:<c>`,
//! `stack-closed:<c>`, `stack-fallback:<c>`, `parsing-closed:<c>`,
//! `streams`, `held`, `relay-streams`, `stack-streams`; `rates` is
//! `rate.rs`'s, `tls` is `tls.rs`'s, `bodies` `bodies.rs`'s, `hedge`
//! `hedge.rs`'s).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::load::{closed_loop, fixed_count, held_streams, open_streams};
use super::process::{Gateway, Relay};
use super::report::say;
use super::{Error, GATEWAY_PATH, REQUEST, SESSION_REQUEST};

/// Runs the phase `only` names.
pub(crate) async fn one(
    only: &str,
    gateway_bin: &Path,
    out_dir: &Path,
    upstream: SocketAddr,
    cpu: Option<&str>,
) -> Result<(), Error> {
    if relay_one(only, upstream, cpu).await? {
        return Ok(());
    }
    let gw = Gateway::start(gateway_bin, out_dir, upstream, cpu).await?;
    let idle_rss = gw.rss_kib();
    if let Some(c) = only.strip_prefix("closed:") {
        return closed(&gw, GATEWAY_PATH, REQUEST, c.parse()?).await;
    }
    if let Some(c) = only.strip_prefix("sessions:") {
        // A two-target route and a session: the pin looked up and kept.
        return closed(&gw, GATEWAY_PATH, SESSION_REQUEST, c.parse()?).await;
    }
    if let Some(c) = only.strip_prefix("unpinned:") {
        // The same two-target route without sessions (`sessions:<c>`
        // minus this is the session's own cost).
        let body = SESSION_REQUEST.replace("\"pair\"", "\"unpinned\"");
        return closed(&gw, GATEWAY_PATH, &body, c.parse()?).await;
    }
    if let Some(c) = only.strip_prefix("fallback:") {
        // The route whose primary answers 503.
        let body = REQUEST.replace("\"default\"", "\"fallback\"");
        return closed(&gw, GATEWAY_PATH, &body, c.parse()?).await;
    }
    // The route that is one group of three equivalent targets, and beside
    // it a named route of one target and the same three as a plain list.
    for route in ["tier", "one", "three"] {
        if let Some(c) = only.strip_prefix(route).and_then(|c| c.strip_prefix(':')) {
            let body = REQUEST.replace("\"default\"", &format!("\"{route}\""));
            return closed(&gw, GATEWAY_PATH, &body, c.parse()?).await;
        }
    }
    match only {
        // Streams held whole (`stream_commit = "complete"`): each holds its
        // answer (a token every 100 ms for 30 s) until the upstream
        // finishes; measured 10 s in, about 110 tokens held each.
        "held" => say(&held_streams(&gw).await?),
        // Open streams alone (for profiling memory with
        // `UNDERSTUDY_BENCH_WRAP=heaptrack`); `UNDERSTUDY_BENCH_STREAMS`
        // sets how many (5 000).
        "streams" => {
            let n = std::env::var("UNDERSTUDY_BENCH_STREAMS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(5000);
            let scale = open_streams(&gw, GATEWAY_PATH, n).await?;
            say(&format!(
                "{n} open streams: gateway RSS {} KiB (idle {} KiB), {:.1} KB per open stream, CPU {:.0}% of one core, {:.1} µs per token",
                scale.rss_kib,
                idle_rss,
                scale.per_stream_kb,
                scale.cpu_percent,
                scale.cpu_per_token_us()
            ));
        }
        _ => return Err(format!("UNDERSTUDY_BENCH_ONLY: no phase `{only}`").into()),
    }
    Ok(())
}

/// Runs `only` if it names a relay floor's phase (`<relay>-closed:<c>`,
/// `<relay>-fallback:<c>`, `<relay>-streams`); false if it names none.
async fn relay_one(only: &str, upstream: SocketAddr, cpu: Option<&str>) -> Result<bool, Error> {
    // `<relay>-closed:<c>`: a relay floor in the closed loop, started like
    // the gateway (so `UNDERSTUDY_BENCH_WRAP` applies to it).
    let relay_closed = Relay::ALL.iter().find_map(|&kind| {
        let c = only.strip_prefix(kind.mode())?.strip_prefix("-closed:")?;
        Some((kind, c))
    });
    if let Some((kind, c)) = relay_closed {
        let relay = kind.start(upstream, cpu, true).await?;
        closed(&relay, "/fast/v1/chat/completions", REQUEST, c.parse()?).await?;
        return Ok(true);
    }
    // `<relay>-fallback:<c>`: the same floor making the fallback's two
    // upstream calls (the failing one read whole, then the answer), what
    // `fallback:<c>` costs before the gateway does any work of its own.
    let relay_fallback = Relay::ALL.iter().find_map(|&kind| {
        let c = only.strip_prefix(kind.mode())?.strip_prefix("-fallback:")?;
        Some((kind, c))
    });
    if let Some((kind, c)) = relay_fallback {
        let relay = kind.start(upstream, cpu, true).await?;
        closed(&relay, "/fallback/v1/chat/completions", REQUEST, c.parse()?).await?;
        return Ok(true);
    }
    // `relay-streams` (`stack-streams`): a relay floor's memory per open
    // stream (not the parsing relay's: it reads answers whole), started
    // like the gateway (under `UNDERSTUDY_BENCH_WRAP`: a heap profiler
    // sees where the floor's memory goes too).
    if let Some(&kind) = [Relay::Hyper, Relay::Stack]
        .iter()
        .find(|k| only.strip_prefix(k.mode()) == Some("-streams"))
    {
        let relay = kind.start(upstream, cpu, true).await?;
        let scale = open_streams(&relay, "/slow/v1/chat/completions", 5000).await?;
        say(&format!(
            "{}, 5000 open streams: RSS {} KiB, {:.1} KB per open stream, CPU {:.0}% of one core, {:.1} µs per token",
            kind.mode(),
            scale.rss_kib,
            scale.per_stream_kb,
            scale.cpu_percent,
            scale.cpu_per_token_us()
        ));
        return Ok(true);
    }
    Ok(false)
}

/// 10 s of one closed loop of `c` on `path`; with
/// `UNDERSTUDY_BENCH_COUNT=n`, n requests after 200 of warm-up (two counts
/// under callgrind give the instructions of one request) and the CPU they
/// cost.
async fn closed(process: &Gateway, path: &str, body: &str, c: usize) -> Result<(), Error> {
    let url = format!("http://{}{path}", process.addr);
    let count = std::env::var("UNDERSTUDY_BENCH_COUNT")
        .ok()
        .and_then(|n| n.parse::<usize>().ok());
    let s = match count {
        Some(n) => {
            fixed_count(process.addr, &url, body, c, 200).await?;
            let (user0, sys0) = process.cpu_split();
            let s = fixed_count(process.addr, &url, body, c, n).await?;
            let (user, sys) = process.cpu_split();
            say(&format!(
                "CPU {:.1} µs per request ({:.1} user, {:.1} system)",
                (user + sys - user0 - sys0) * 1e6 / n as f64,
                (user - user0) * 1e6 / n as f64,
                (sys - sys0) * 1e6 / n as f64
            ));
            s
        }
        None => closed_loop(process.addr, &url, body, c, Duration::from_secs(10)).await?,
    };
    say(&format!(
        "c={c}: {} requests, {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms",
        s.micros.len(),
        s.rps(),
        s.p50(),
        s.p99()
    ));
    Ok(())
}
