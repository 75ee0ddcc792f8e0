//! The full run (`cargo xtask bench`): the gateway against direct calls,
//! beside its floors (interleaved rounds, and open loops at fixed rates),
//! on the fallback path, for the
//! first streamed byte, under 100 000 requests and 5 000 open streams, and
//! over TLS; printed as one table and written to `latest.json`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::load::{Scale, closed_loop, fixed_count, held_streams, open_streams, ttfb};
use super::process::{Gateway, Relay, with_cpu};
use super::relay::ping_pong;
use super::report::{Row, Samples, render, row};
use super::{Error, GATEWAY_PATH, REQUEST, SESSION_REQUEST, rate, tls};

/// Where the load goes: the upstream directly, and the gateway.
struct Urls {
    direct: String,
    gateway: String,
}

pub(crate) async fn run(
    gateway_bin: &Path,
    out_dir: &Path,
    upstream: SocketAddr,
    cpu: Option<&str>,
) -> Result<(), Error> {
    let gw = Gateway::start(gateway_bin, out_dir, upstream, cpu).await?;
    let idle = gw.rss_kib();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let urls = Urls {
        direct: format!("http://{upstream}/fast/v1/chat/completions"),
        gateway: format!("http://{}{GATEWAY_PATH}", gw.addr),
    };
    // Warm up both paths.
    closed_loop(
        upstream,
        &urls.direct,
        REQUEST,
        8,
        Duration::from_millis(500),
    )
    .await?;
    closed_loop(
        gw.addr,
        &urls.gateway,
        REQUEST,
        8,
        Duration::from_millis(800),
    )
    .await?;

    against_direct(upstream, &gw, &urls, &mut rows).await?;
    for (label, cpu) in [
        ("across cores", cpu),
        ("on one core", Some("1").filter(|_| cpu.is_some())),
    ] {
        let s = ping_pong(cpu).await?;
        rows.push(row(
            format!("floor: TCP round trip {label} (blocking ping-pong)"),
            &s,
            String::new(),
        ));
    }
    beside_the_floors(upstream, &gw, &urls, cpu, &mut rows).await?;
    rows.extend(rate::rows(upstream, &gw, cpu).await?);
    fallback_and_first_byte(upstream, &gw, &urls, &mut rows).await?;
    let memory = memory(upstream, (gw, idle), &urls, cpu, &mut rows, &mut notes).await?;
    tls::phase(gateway_bin, out_dir, cpu, &mut rows, &mut notes).await?;
    let _ = std::io::stdout().write_all(render(&rows, &notes).as_bytes());
    let json = json!({
        "rows": rows.iter().map(|r| json!({"name": r.name, "rps": r.rps, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "note": r.note})).collect::<Vec<_>>(),
        "idle_rss_kib": memory.idle,
        "rss_after_100k_kib": memory.after_load,
        "rss_before_100k_kib": memory.before_load,
        "peak_rss_kib": memory.peak,
        "open_streams": memory.gateway.json(),
        "relay_open_streams": memory.relay.json(),
        "stack_relay_open_streams": memory.stack.json(),
        "pinned": cpu.is_some(),
    });
    std::fs::write(
        out_dir.join("latest.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(())
}

/// The gateway against the upstream directly, in closed loops of 1, 16
/// and 64.
async fn against_direct(
    upstream: SocketAddr,
    gw: &Gateway,
    urls: &Urls,
    rows: &mut Vec<Row>,
) -> Result<(), Error> {
    let added = |d: &Samples, g: &Samples| {
        format!(
            "added p50 {:.3} ms, p99 {:.3} ms",
            g.p50() - d.p50(),
            g.p99() - d.p99()
        )
    };
    for c in [1usize, 16, 64] {
        let d = closed_loop(upstream, &urls.direct, REQUEST, c, Duration::from_secs(3)).await?;
        let g = closed_loop(gw.addr, &urls.gateway, REQUEST, c, Duration::from_secs(3)).await?;
        rows.push(row(format!("direct, concurrency {c}"), &d, String::new()));
        rows.push(row(format!("gateway, concurrency {c}"), &g, added(&d, &g)));
    }
    Ok(())
}

/// The floors: a do-nothing HTTP/1.1 relay (hyper server and client, one
/// upstream connection per client connection, no parsing) pinned like the
/// gateway — what any proxy process pays on this rig — and the floor of
/// the gateway's fixed shape, the same relay on axum and a pooled reqwest
/// client. The gateway runs beside both, interleaved (relay, stack,
/// gateway, relay, …) so that all see the same machine: throughput, CPU
/// per request (user + system, from /proc), added p50. Then the relay's
/// two upstream calls, the fallback's floor.
async fn beside_the_floors(
    upstream: SocketAddr,
    gw: &Gateway,
    urls: &Urls,
    cpu: Option<&str>,
    rows: &mut Vec<Row>,
) -> Result<(), Error> {
    let relay = Relay::Hyper.start(upstream, cpu, false).await?;
    let relay_url = format!("http://{}/fast/v1/chat/completions", relay.addr);
    let stack = Relay::Stack.start(upstream, cpu, false).await?;
    let stack_url = format!("http://{}/fast/v1/chat/completions", stack.addr);
    let d = closed_loop(upstream, &urls.direct, REQUEST, 1, Duration::from_secs(3)).await?;
    for c in [1usize, 64] {
        let mut rounds = Vec::new();
        for _ in 0..2 {
            let mut round = Vec::new();
            for (process, url) in [
                (&relay, &relay_url),
                (&stack, &stack_url),
                (gw, &urls.gateway),
            ] {
                let load = closed_loop(process.addr, url, REQUEST, c, Duration::from_secs(3));
                round.push(with_cpu(process, load).await?);
            }
            rounds.push(round);
        }
        for (i, round) in rounds.iter().enumerate() {
            if let [relay, stack, gateway] = &round[..] {
                rows.extend(round_rows(c, i + 1, &d, relay, stack, gateway));
            }
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
    Ok(())
}

/// The rows of one round: each process's samples and CPU µs per request.
fn round_rows(
    c: usize,
    round: usize,
    direct: &Samples,
    (r, rcpu): &(Samples, f64),
    (s, scpu): &(Samples, f64),
    (g, gcpu): &(Samples, f64),
) -> [Row; 3] {
    [
        row(
            format!("floor: do-nothing relay, concurrency {c} (round {round})"),
            r,
            format!(
                "added p50 {:.3} ms, p99 {:.3} ms; CPU {rcpu:.1} µs per request",
                r.p50() - direct.p50(),
                r.p99() - direct.p99()
            ),
        ),
        row(
            format!("floor: axum + reqwest relay, concurrency {c} (round {round})"),
            s,
            format!(
                "{:.2}× the relay's req/s; CPU {scpu:.1} µs per request ({:.2}× the relay's); added p50 {:+.3} ms over the relay's",
                s.rps() / r.rps(),
                scpu / rcpu,
                s.p50() - r.p50()
            ),
        ),
        row(
            format!("gateway beside them, concurrency {c} (round {round})"),
            g,
            format!(
                "{:.2}× the relay's req/s; CPU {gcpu:.1} µs per request ({:.2}× the relay's, {:.2}× the axum + reqwest relay's); added p50 {:+.3} ms over the relay's, {:+.3} ms over the axum + reqwest relay's",
                g.rps() / r.rps(),
                gcpu / rcpu,
                gcpu / scpu,
                g.p50() - r.p50(),
                g.p50() - s.p50()
            ),
        ),
    ]
}

/// The fallback route (503, then answer) at concurrency 1, the tier route
/// beside the one-target route, and the first streamed byte, each against
/// the upstream directly.
async fn fallback_and_first_byte(
    upstream: SocketAddr,
    gw: &Gateway,
    urls: &Urls,
    rows: &mut Vec<Row>,
) -> Result<(), Error> {
    let fallback_body = REQUEST.replace("\"default\"", "\"fallback\"");
    let d = closed_loop(upstream, &urls.direct, REQUEST, 1, Duration::from_secs(3)).await?;
    let f = closed_loop(
        gw.addr,
        &urls.gateway,
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
    // One group of three equivalent targets (weights 2:1:1), beside the
    // one-target route: the cost of the group choice.
    let tier_body = REQUEST.replace("\"default\"", "\"tier\"");
    let t = closed_loop(
        gw.addr,
        &urls.gateway,
        &tier_body,
        1,
        Duration::from_secs(3),
    )
    .await?;
    let g = closed_loop(gw.addr, &urls.gateway, REQUEST, 1, Duration::from_secs(3)).await?;
    rows.push(row(
        "tier of three equivalent targets, c=1".into(),
        &t,
        format!(
            "p50 {:+.3} ms beside the one-target route (p99 {:+.3} ms)",
            t.p50() - g.p50(),
            t.p99() - g.p99()
        ),
    ));
    let s = closed_loop(
        gw.addr,
        &urls.gateway,
        SESSION_REQUEST,
        1,
        Duration::from_secs(3),
    )
    .await?;
    rows.push(row(
        "a session on a two-target route, c=1".into(),
        &s,
        format!(
            "added p50 {:.3} ms over one direct call (its pin looked up and kept)",
            s.p50() - d.p50()
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
    Ok(())
}

/// What the memory phase measured (for `latest.json`).
struct Memory {
    idle: u64,
    before_load: u64,
    after_load: u64,
    peak: u64,
    gateway: Scale,
    relay: Scale,
    stack: Scale,
}

/// 100 000 requests, then 5 000 open streams and 1 000 held ones on the
/// gateway (`idle`: its RSS when it had just started; it is stopped
/// afterwards), then 5 000 open streams on each relay floor.
async fn memory(
    upstream: SocketAddr,
    (gw, idle): (Gateway, u64),
    urls: &Urls,
    cpu: Option<&str>,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> Result<Memory, Error> {
    let before_load = gw.rss_kib();
    let many = fixed_count(gw.addr, &urls.gateway, REQUEST, 64, 100_000).await?;
    let after_load = gw.rss_kib();
    let peak_load = gw.hwm_kib();
    rows.push(row(
        "gateway, 100 000 requests, c=64".into(),
        &many,
        format!("RSS {before_load} → {after_load} KiB"),
    ));
    let gateway = open_streams(&gw, GATEWAY_PATH, 5000).await?;
    let held = held_streams(&gw).await?;
    let peak = gw.hwm_kib();
    drop(gw);
    let relay = Relay::Hyper.start(upstream, cpu, false).await?;
    let idle_relay = relay.rss_kib();
    let relay_scale = open_streams(&relay, "/slow/v1/chat/completions", 5000).await?;
    drop(relay);
    let stack = Relay::Stack.start(upstream, cpu, false).await?;
    let stack_scale = open_streams(&stack, "/slow/v1/chat/completions", 5000).await?;
    drop(stack);
    notes.push(format!(
        "5 000 open streams (a token every 100 ms): gateway RSS {} KiB (idle {idle} KiB), {:.1} KB per open stream, CPU {:.0}% of one core, {:.1} µs per token ({:.2}× the do-nothing relay's, {:.2}× the axum + reqwest relay's)",
        gateway.rss_kib,
        gateway.per_stream_kb,
        gateway.cpu_percent,
        gateway.cpu_per_token_us(),
        gateway.cpu_per_token_us() / relay_scale.cpu_per_token_us(),
        gateway.cpu_per_token_us() / stack_scale.cpu_per_token_us()
    ));
    notes.push(held);
    notes.push(format!(
        "floor: the do-nothing relay with 5 000 open streams: RSS {} KiB (idle {idle_relay} KiB), {:.1} KB per open stream, CPU {:.0}% of one core, {:.1} µs per token",
        relay_scale.rss_kib,
        relay_scale.per_stream_kb,
        relay_scale.cpu_percent,
        relay_scale.cpu_per_token_us()
    ));
    notes.push(format!(
        "floor: the axum + reqwest relay with 5 000 open streams: RSS {} KiB, {:.1} KB per open stream, CPU {:.0}% of one core, {:.1} µs per token",
        stack_scale.rss_kib,
        stack_scale.per_stream_kb,
        stack_scale.cpu_percent,
        stack_scale.cpu_per_token_us()
    ));
    notes.push(format!(
        "RSS: idle {idle} KiB; after 100 000 requests {after_load} KiB (before them {before_load} KiB); peak under request load {peak_load} KiB; peak overall {peak} KiB"
    ));
    Ok(Memory {
        idle,
        before_load,
        after_load,
        peak,
        gateway,
        relay: relay_scale,
        stack: stack_scale,
    })
}
