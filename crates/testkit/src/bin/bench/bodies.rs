//! `UNDERSTUDY_BENCH_ONLY=bodies`: what large bodies cost the gateway's
//! memory, each on a gateway of its own (the high-water mark only rises):
//! how far one 31 MB body raises it — a Gemini `generateContent` body and
//! a Chat Completions body, each of many tiny parts (refused by
//! `server.max_parts` before the parse) and of parts of a kilobyte or two
//! (parsed, translated and served by the bench's upstream) — against the
//! target of at most four times the body; and the RSS 10 s after a burst
//! of 60 bodies of 2.2 MB at concurrency 8, against the target of back
//! within 50 MB of where it started. It prints the figures and whether
//! each meets its target; it asserts nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use super::Error;
use super::load::connect;
use super::process::Gateway;
use super::report::say;

/// The size of the large bodies: under the 32 MiB `server.max_body_bytes`.
const LARGE: usize = 31_000_000;
/// The size of each body of the burst.
const BURST_BODY: usize = 2_200_000;
const BURST_COUNT: usize = 60;
const BURST_CONCURRENCY: usize = 8;

/// A body shape: the API's path and a body of about `size` bytes whose
/// turns carry `text_len` characters of text each.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    path: &'static str,
    text_len: usize,
    gemini: bool,
}

const SHAPES: [Shape; 4] = [
    Shape {
        name: "Gemini generateContent, tiny contents",
        path: "/v1beta/models/default:generateContent",
        text_len: 2,
        gemini: true,
    },
    Shape {
        name: "Chat Completions, tiny messages",
        path: "/v1/chat/completions",
        text_len: 2,
        gemini: false,
    },
    // Five parts a content (`{`, `,`, `[`, `{` and the `,` after it):
    // 2 KB of text each keeps 31 MB under the default 100 000 parts.
    Shape {
        name: "Gemini generateContent, 2 KB contents",
        path: "/v1beta/models/default:generateContent",
        text_len: 2000,
        gemini: true,
    },
    // Three parts a message: 1 KB of text each is under the default.
    Shape {
        name: "Chat Completions, 1 KB messages",
        path: "/v1/chat/completions",
        text_len: 1000,
        gemini: false,
    },
];

impl Shape {
    /// A body of about `size` bytes.
    fn body(self, size: usize) -> Bytes {
        let text = "a".repeat(self.text_len);
        let turn = |i: usize| {
            if self.gemini {
                let role = if i % 2 == 0 { "user" } else { "model" };
                format!(r#"{{"role":"{role}","parts":[{{"text":"{text}"}}]}}"#)
            } else {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                format!(r#"{{"role":"{role}","content":"{text}"}}"#)
            }
        };
        let (head, tail) = if self.gemini {
            (r#"{"contents":["#, "]}")
        } else {
            (r#"{"model":"default","messages":["#, "]}")
        };
        let mut out = String::with_capacity(size + 1024);
        out.push_str(head);
        let mut i = 0;
        while out.len() + tail.len() < size {
            if i > 0 {
                out.push(',');
            }
            // End on a user's turn, which every API takes last.
            out.push_str(&turn(i));
            i += 1;
        }
        if i % 2 == 0 {
            out.push(',');
            out.push_str(&turn(i));
        }
        out.push_str(tail);
        Bytes::from(out)
    }
}

/// Runs the phase, printing a line per measurement.
pub(crate) async fn run(
    gateway_bin: &Path,
    out_dir: &Path,
    upstream: SocketAddr,
    cpu: Option<&str>,
) -> Result<(), Error> {
    let mut all_pass = true;
    for shape in SHAPES {
        let gw = Gateway::start(gateway_bin, out_dir, upstream, cpu).await?;
        let body = shape.body(LARGE);
        settle().await;
        let (hwm0, rss0) = (gw.hwm_kib(), gw.rss_kib());
        let status = send(gw.addr, shape.path, body.clone()).await?;
        let rise = gw.hwm_kib().saturating_sub(hwm0);
        let size_kib = body.len() as u64 / 1024;
        let pass = rise <= 4 * size_kib;
        all_pass &= pass;
        say(&format!(
            "one {:.1} MB body, {}: HTTP {status}; high-water mark +{} KiB ({:.2}x the body; RSS {} KiB before, {} KiB after): {}",
            body.len() as f64 / 1e6,
            shape.name,
            rise,
            rise as f64 / size_kib as f64,
            rss0,
            gw.rss_kib(),
            verdict(pass, "at most 4x the body")
        ));
    }
    worst_under_the_limit(gateway_bin, out_dir, upstream, cpu).await?;
    for shape in [SHAPES[0], SHAPES[2]] {
        let gw = Gateway::start(gateway_bin, out_dir, upstream, cpu).await?;
        let body = shape.body(BURST_BODY);
        settle().await;
        let start = gw.rss_kib();
        let statuses = burst(gw.addr, shape.path, body.clone()).await?;
        let peak = gw.hwm_kib();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = gw.rss_kib();
        let pass = after <= start + 50 * 1024;
        all_pass &= pass;
        say(&format!(
            "{BURST_COUNT} bodies of {:.1} MB at concurrency {BURST_CONCURRENCY}, {}: HTTP {statuses}; RSS {start} KiB before, peak {peak} KiB, {after} KiB 10 s after (+{} KiB): {}",
            body.len() as f64 / 1e6,
            shape.name,
            after.saturating_sub(start),
            verdict(pass, "back within 50 MB of the start")
        ));
    }
    say(&format!(
        "bodies: {}",
        if all_pass {
            "every target met"
        } else {
            "a target missed"
        }
    ));
    Ok(())
}

/// The costliest body the default `server.max_parts` lets through that
/// this bench knows: a tool whose schema (a free-form JSON value) holds
/// 49 000 one-member objects, just under 100 000 parts. No target: the
/// figure is what one part can cost at worst.
async fn worst_under_the_limit(
    gateway_bin: &Path,
    out_dir: &Path,
    upstream: SocketAddr,
    cpu: Option<&str>,
) -> Result<(), Error> {
    let objects = vec![r#"{"a":1}"#; 49_000].join(",");
    let body = format!(
        r#"{{"model":"default","messages":[{{"role":"user","content":"hi"}}],"tools":[{{"type":"function","function":{{"name":"t","parameters":{{"type":"object","properties":{{"x":{{"enum":[{objects}]}}}}}}}}}}]}}"#
    );
    let gw = Gateway::start(gateway_bin, out_dir, upstream, cpu).await?;
    settle().await;
    let hwm0 = gw.hwm_kib();
    let size = body.len();
    let status = send(gw.addr, "/v1/chat/completions", Bytes::from(body)).await?;
    let rise = gw.hwm_kib().saturating_sub(hwm0);
    say(&format!(
        "one {:.2} MB Chat body of about 98 000 parts in a tool's schema (the costliest shape known under the default limit): HTTP {status}; high-water mark +{rise} KiB ({:.0} bytes a part)",
        size as f64 / 1e6,
        rise as f64 * 1024.0 / 98_000.0
    ));
    Ok(())
}

fn verdict(pass: bool, target: &str) -> String {
    format!("{} ({target})", if pass { "pass" } else { "FAIL" })
}

/// A moment for the gateway's start-up to settle before the baseline.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Sends `body` once on a connection of its own; the answer's status.
async fn send(addr: SocketAddr, path: &str, body: Bytes) -> Result<u16, Error> {
    let mut sender = connect(addr).await?;
    sender.ready().await?;
    let req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("host", "bench")
        .body(Full::new(body))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await?;
    Ok(status)
}

/// [`BURST_COUNT`] sends of `body` at [`BURST_CONCURRENCY`]; the statuses
/// seen, counted (`200×60`).
async fn burst(addr: SocketAddr, path: &str, body: Bytes) -> Result<String, Error> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..BURST_CONCURRENCY {
        let (next, body, path) = (Arc::clone(&next), body.clone(), path.to_owned());
        workers.spawn(async move {
            let mut seen = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < BURST_COUNT {
                seen.push(send(addr, &path, body.clone()).await?);
            }
            Ok::<_, Error>(seen)
        });
    }
    let mut counts = std::collections::BTreeMap::<u16, usize>::new();
    while let Some(done) = workers.join_next().await {
        for status in done?? {
            *counts.entry(status).or_default() += 1;
        }
    }
    Ok(counts
        .iter()
        .map(|(status, n)| format!("{status}×{n}"))
        .collect::<Vec<_>>()
        .join(", "))
}
