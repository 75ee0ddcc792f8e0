//! Fixed-rate open-loop rows: requests sent on a schedule whatever the
//! answers, each timed from the moment it was scheduled (so a slow answer
//! that holds up later sends shows in their latency instead of being
//! hidden: no coordinated omission), non-streamed (to the last byte) and
//! streamed (to the first token), for the upstream directly, the two relay
//! floors and the gateway, interleaved at each rate (`UNDERSTUDY_BENCH_RATES`,
//! default `1000,3000,10000`). Run alone with `UNDERSTUDY_BENCH_ONLY=rates`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use super::load::{Sender, connect, leak};
use super::process::{Gateway, Relay};
use super::report::{Row, Samples, row};
use super::{Error, GATEWAY_PATH, REQUEST};

/// Connections each open loop spreads its sends over: at 10 000 req/s a
/// connection is free again after 6.4 ms on average, far above any
/// answer's time here, so the pool itself does not hold sends back unless
/// the process behind it falls behind (and then the wait is in the figure).
const POOL: usize = 128;

/// How long each open loop sends.
const SEND_FOR: Duration = Duration::from_secs(5);

/// A rate counts as sustained when every request succeeded and the
/// answers came at this share of the rate or more (a process that falls
/// behind finishes its backlog after the schedule ends, which lowers it).
const SUSTAINED: f64 = 0.97;

/// A process this far behind its schedule (sends not yet answered) has
/// not sustained the rate; the schedule stops there, so an overloaded
/// process costs the run about a second more, not its whole backlog.
const BEHIND: Duration = Duration::from_secs(1);

/// One open loop's outcome.
pub(crate) struct Open {
    pub(crate) samples: Samples,
    pub(crate) failed: usize,
    rate: u32,
    /// When the schedule stopped because the process fell [`BEHIND`].
    gave_up: Option<Duration>,
}

impl Open {
    pub(crate) fn sustained(&self) -> bool {
        self.gave_up.is_none()
            && self.failed == 0
            && self.samples.rps() >= f64::from(self.rate) * SUSTAINED
    }

    /// "sustained", or what it managed instead.
    fn verdict(&self) -> String {
        if self.sustained() {
            "sustained".into()
        } else {
            let behind = match self.gave_up {
                Some(t) => format!(", {BEHIND:?} behind after {:.1} s", t.as_secs_f64()),
                None => String::new(),
            };
            format!(
                "NOT sustained: {:.0} answers/s, {} failed{behind}",
                self.samples.rps(),
                self.failed
            )
        }
    }
}

/// The rates to run: `UNDERSTUDY_BENCH_RATES` (comma-separated), else
/// 1 000, 3 000 and 10 000 a second.
pub(crate) fn rates() -> Vec<u32> {
    std::env::var("UNDERSTUDY_BENCH_RATES")
        .ok()
        .map(|v| v.split(',').filter_map(|r| r.trim().parse().ok()).collect())
        .filter(|v: &Vec<u32>| !v.is_empty())
        .unwrap_or_else(|| vec![1000, 3000, 10_000])
}

/// `rate` requests a second to `url` for [`SEND_FOR`], open loop; with
/// `streamed`, each asks for a stream and is timed to its first token
/// (the rest of the stream is read, untimed).
pub(crate) async fn open_loop(
    addr: SocketAddr,
    url: &str,
    streamed: bool,
    rate: u32,
) -> Result<Open, Error> {
    let body = if streamed {
        leak(&REQUEST.replace("\"messages\"", "\"stream\":true,\"messages\""))
    } else {
        REQUEST
    };
    let url = leak(url);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let failed = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..POOL {
        let mut sender = connect(addr).await?;
        let rx = Arc::clone(&rx);
        let failed = Arc::clone(&failed);
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut micros = Vec::new();
            loop {
                let next = rx.lock().await.recv().await;
                let Some(scheduled) = next else { break };
                let sent = send(&mut sender, url, body, streamed, scheduled).await;
                done.fetch_add(1, Ordering::Relaxed);
                match sent {
                    Ok(took) => micros.push(took.as_micros() as u32),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        // A broken connection is replaced; if that fails too
                        // the task stops and its share of sends waits for
                        // the others (and shows in their latency).
                        match connect(addr).await {
                            Ok(s) => sender = s,
                            Err(_) => break,
                        }
                    }
                }
            }
            micros
        }));
    }
    let started = Instant::now();
    // The schedule is kept by a thread of its own sleeping to each send's
    // time (the runtime's timer ticks in whole milliseconds).
    let answered = Arc::clone(&done);
    let scheduler = std::thread::spawn(move || {
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        let behind = (f64::from(rate) * BEHIND.as_secs_f64()) as usize;
        let mut i = 0u32;
        loop {
            let at = started + interval * i;
            if at.duration_since(started) >= SEND_FOR {
                return None;
            }
            if i as usize > answered.load(Ordering::Relaxed) + behind {
                return Some(at.duration_since(started));
            }
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if tx.send(at).is_err() {
                return None;
            }
            i += 1;
        }
    });
    let mut micros = Vec::new();
    for t in tasks {
        micros.extend(t.await?);
    }
    let gave_up = scheduler.join().ok().flatten();
    Ok(Open {
        samples: Samples {
            micros,
            elapsed: started.elapsed(),
        },
        failed: failed.load(Ordering::Relaxed),
        rate,
        gave_up,
    })
}

/// One request, timed from `scheduled` to its last byte (or, streamed, to
/// its first token).
async fn send(
    sender: &mut Sender,
    url: &'static str,
    body: &'static str,
    streamed: bool,
    scheduled: Instant,
) -> Result<Duration, Error> {
    sender.ready().await?;
    let req = Request::post(url)
        .header("content-type", "application/json")
        .header("host", "bench")
        .body(Full::new(Bytes::from_static(body.as_bytes())))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    let mut body = resp.into_body();
    let mut first = None;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        if streamed && first.is_none() {
            if let Some(data) = frame.data_ref() {
                if data.windows(3).any(|w| w == b" t0") {
                    first = Some(scheduled.elapsed());
                }
            }
        }
    }
    if !status.is_success() {
        return Err(format!("HTTP {status}").into());
    }
    Ok(first.unwrap_or_else(|| scheduled.elapsed()))
}

/// At each rate, non-streamed then streamed: the upstream directly, the
/// do-nothing relay, the axum + reqwest relay and the gateway, one after
/// the other; one row each, the processes' added p50/p99 over the direct
/// call and the gateway's over each floor in its note.
pub(crate) async fn rows(
    upstream: SocketAddr,
    gw: &Gateway,
    cpu: Option<&str>,
) -> Result<Vec<Row>, Error> {
    let relay = Relay::Hyper.start(upstream, cpu, false).await?;
    let stack = Relay::Stack.start(upstream, cpu, false).await?;
    let targets = [
        ("direct", upstream, "/fast/v1/chat/completions"),
        (
            "floor: do-nothing relay",
            relay.addr,
            "/fast/v1/chat/completions",
        ),
        (
            "floor: axum + reqwest relay",
            stack.addr,
            "/fast/v1/chat/completions",
        ),
        ("gateway", gw.addr, GATEWAY_PATH),
    ];
    let mut rows = Vec::new();
    for rate in rates() {
        for streamed in [false, true] {
            let mut runs = Vec::new();
            for (_, addr, path) in targets {
                let url = format!("http://{addr}{path}");
                runs.push(open_loop(addr, &url, streamed, rate).await?);
            }
            let kind = if streamed {
                "streamed, time to first token"
            } else {
                "non-streamed, end to end"
            };
            let direct = &runs[0].samples;
            for (i, ((name, _, _), run)) in targets.iter().zip(&runs).enumerate() {
                let s = &run.samples;
                let mut note = run.verdict();
                if i > 0 {
                    note.push_str(&format!(
                        "; added p50 {:.3} ms, p99 {:.3} ms",
                        s.p50() - direct.p50(),
                        s.p99() - direct.p99()
                    ));
                }
                if i == 3 {
                    for (floor, f) in [
                        ("do-nothing relay", &runs[1]),
                        ("axum + reqwest relay", &runs[2]),
                    ] {
                        note.push_str(&format!(
                            "; over the {floor}: p50 {:+.3} ms, p99 {:+.3} ms",
                            s.p50() - f.samples.p50(),
                            s.p99() - f.samples.p99()
                        ));
                    }
                }
                rows.push(row(
                    format!("{name}, fixed {rate} req/s open loop, {kind}"),
                    s,
                    note,
                ));
            }
        }
    }
    Ok(rows)
}
