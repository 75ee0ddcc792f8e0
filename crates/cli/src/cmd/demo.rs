//! `understudy demo`: failover you can watch, with no API keys. Simulated
//! groq, gemini and claude (the testkit's simulators, real HTTP) with a
//! realistic fault profile, the real gateway in front of them, and a stream
//! of sample requests — wit roasts, chat completions, streams — with a line
//! per request and a summary at the end.
//!
//! The fault profile: groq is fast but refuses roasts (a softened retry
//! usually recovers them; one in three still refuses and falls back) and
//! has a short outage a third of the way in; gemini rate-limits now and
//! then; claude is slower but healthy.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use understudy_core::Engine;
use understudy_providers::Providers;
use understudy_settings::Settings;
use understudy_testkit::{Received, Refusal, Reply, SimProvider, StreamSpec};
use understudy_types::chat::SOFTENING_SUFFIX;

use super::{out, report};
use crate::{EXIT_FAILED, EXIT_USAGE};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How many sample requests to send.
    #[arg(long, default_value_t = 60)]
    requests: usize,
    /// How long to spread them over, in seconds.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    duration: f64,
    /// Keep the gateway and the simulators running afterwards (Ctrl-C stops).
    #[arg(long)]
    serve: bool,
    /// Where the demo gateway listens (a loopback address: the demo has no
    /// client keys).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Listen on a non-loopback address anyway (anyone who can reach it
    /// can use the demo gateway).
    #[arg(long)]
    insecure_no_auth: bool,
    /// No ANSI colours (also off when the output is not a terminal).
    #[arg(long)]
    no_color: bool,
}

const TOPICS: [&str; 8] = [
    "the borrow checker",
    "YAML indentation",
    "Monday stand-ups",
    "my cat's sleep schedule",
    "printer drivers",
    "dark mode",
    "microservices",
    "the office coffee machine",
];

const JOKES: [&str; 6] = [
    "I would tell you a UDP joke, but you might not get it.",
    "The borrow checker and I have agreed to see other people's code.",
    "My YAML file has trust issues: one wrong space and it leaves.",
    "Microservices: because one big mess was not distributed enough.",
    "Dark mode: for developers who like their bugs harder to see.",
    "The coffee machine is the only service with five nines of demand.",
];

/// What one sample request is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Roast,
    Pun,
    Chat,
    Stream,
}

pub(crate) async fn run(_config: Option<&Path>, args: Args) -> u8 {
    super::init_logging("error", false);
    if let Err(why) = check(&args) {
        report(&why);
        return EXIT_USAGE;
    }
    let color = !args.no_color && std::io::stdout().is_terminal();
    let started = Instant::now();
    let outage_from = Duration::from_secs_f64(args.duration / 3.0);
    let outage_for = Duration::from_secs_f64((args.duration / 8.0).max(2.0));
    let Some(sims) = simulators(started, outage_from, outage_for).await else {
        report("cannot start the simulated providers on loopback");
        return EXIT_FAILED;
    };
    let (addr, stop_tx, server) = match gateway(&sims, args.listen).await {
        Ok(started) => started,
        Err(code) => return code,
    };
    let base = format!("http://{addr}");
    out(&format!(
        "{}: simulated groq → gemini → claude behind the gateway at {base}\n\
         groq refuses roasts and has an outage at {:.0}s; gemini rate-limits now and then; claude is slower but healthy.\n\
         Status page: {base}/\n\n",
        paint(color, "1", "Understudy demo"),
        outage_from.as_secs_f64()
    ));
    let results = send_all(&args, &base, started, color).await;
    out(&summary(&results, started.elapsed()));
    if args.serve {
        out(&format!(
            "\nStill serving (Ctrl-C stops):\n  status page  {base}/\n  metrics      {base}/metrics\n  try          curl -s {base}/v1/wit -H 'content-type: application/json' -d '{{\"topic\":\"Mondays\",\"style\":\"roast\"}}'\n               curl -s {base}/v1/chat/completions -H 'content-type: application/json' -d '{{\"model\":\"default\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'\n"
        ));
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    drop(sims);
    0
}

/// Why the arguments cannot run a demo, if they cannot.
fn check(args: &Args) -> Result<(), String> {
    if args.requests == 0 || !(args.duration.is_finite() && args.duration >= 0.0) {
        return Err("--requests must be at least 1 and --duration a number of seconds".into());
    }
    if !args.listen.ip().is_loopback() && !args.insecure_no_auth {
        return Err(format!(
            "refusing to listen on {} without client keys: the demo gateway has none; \
             listen on a loopback address (the default, 127.0.0.1:8080) or pass --insecure-no-auth",
            args.listen
        ));
    }
    Ok(())
}

/// The simulated providers, each with its fault profile: groq refuses
/// roasts (one softened roast in three still) and is down from
/// `outage_from` for `outage_for`; gemini rate-limits one call in five;
/// claude is slower but healthy.
async fn simulators(
    started: Instant,
    outage_from: Duration,
    outage_for: Duration,
) -> Option<(SimProvider, SimProvider, SimProvider)> {
    let (Ok(groq), Ok(gemini), Ok(claude)) = (
        SimProvider::openai().await,
        SimProvider::gemini().await,
        SimProvider::anthropic().await,
    ) else {
        return None;
    };
    let roasts = Arc::new(AtomicUsize::new(0));
    let groq_roasts = Arc::clone(&roasts);
    groq.respond_with(move |r| {
        let t = started.elapsed();
        if t >= outage_from && t < outage_from + outage_for {
            return Reply::status(503);
        }
        let system = system_prompt(r);
        if system.contains("roast") {
            if !system.ends_with(SOFTENING_SUFFIX) {
                return Reply::Refuse(Refusal::Message(
                    "I can't help with mean-spirited content.".into(),
                ));
            }
            // One softened roast in three is still refused.
            if groq_roasts.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
                return Reply::Refuse(Refusal::FinishReason);
            }
        }
        answer(r, Duration::from_millis(40), Duration::from_millis(25))
    });
    let gemini_calls = AtomicUsize::new(0);
    gemini.respond_with(move |r| {
        if gemini_calls.fetch_add(1, Ordering::Relaxed) % 5 == 3 {
            return Reply::rate_limited("0.3");
        }
        answer(r, Duration::from_millis(150), Duration::from_millis(40))
    });
    claude.respond_with(|r| answer(r, Duration::from_millis(450), Duration::from_millis(60)));
    Some((groq, gemini, claude))
}

/// The gateway in front of `sims`, serving on `listen`: its address, what
/// stops it, and its task; else the exit code.
async fn gateway(
    (groq, gemini, claude): &(SimProvider, SimProvider, SimProvider),
    listen: SocketAddr,
) -> Result<
    (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ),
    u8,
> {
    let settings = match demo_settings(groq, gemini, claude) {
        Ok(s) => s,
        Err(e) => {
            report(&format!("demo configuration: {e}"));
            return Err(EXIT_FAILED);
        }
    };
    let engine = match understudy_otlp::sinks(&settings) {
        Ok(sinks) => Engine::start_with(settings, Providers::factory(), sinks).await,
        Err(e) => Err(e),
    };
    let engine = match engine {
        Ok(e) => e,
        Err(e) => {
            report(&format!("cannot start the engine: {e}"));
            return Err(EXIT_FAILED);
        }
    };
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            report(&format!(
                "cannot listen on {}: {e}{}",
                listen,
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    " (the port is busy: pass --listen 127.0.0.1:0 or another port)"
                } else {
                    ""
                }
            ));
            return Err(EXIT_USAGE);
        }
    };
    let addr = listener.local_addr().map_or(listen, |a| a);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(understudy_server::serve(listener, engine, async move {
        let _ = stop_rx.await;
    }));
    Ok((addr, stop_tx, server))
}

/// Sends the sample requests, paced over the demo's duration, with a line
/// per request (and a progress bar on a terminal).
async fn send_all(args: &Args, base: &str, started: Instant, color: bool) -> Vec<Outcome> {
    let client = understudy_testkit::http_client();
    let pace = Duration::from_secs_f64(args.duration / args.requests as f64);
    let mut results: Vec<Outcome> = Vec::with_capacity(args.requests);
    for i in 0..args.requests {
        let due = started + pace * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let kind = match i % 5 {
            0 | 3 => Kind::Roast,
            1 => Kind::Chat,
            2 => Kind::Pun,
            _ => Kind::Stream,
        };
        let topic = TOPICS[i % TOPICS.len()];
        let outcome = send(&client, base, kind, topic).await;
        if color {
            out("\r\x1b[2K");
        }
        out(&format!(
            "{}\n",
            line(i + 1, args.requests, &outcome, color)
        ));
        results.push(outcome);
        if color {
            out(&progress(i + 1, args.requests));
        }
    }
    if color {
        out("\r\x1b[2K");
    }
    results
}

fn demo_settings(
    groq: &SimProvider,
    gemini: &SimProvider,
    claude: &SimProvider,
) -> Result<Settings, String> {
    let mut text = String::from(
        "[routing]\ndefault = \"groq\"\norder = [\"groq\", \"gemini\", \"claude\"]\n\
         [breaker]\nfailure_threshold = 3\ncooldown = 3\n\
         [timeouts]\nattempt = 10\nrequest = 20\n\
         [rate_limit]\nmax_wait = 1\n\
         [cache]\nenabled = false\n\
         [server]\ndrain_grace = 0\n",
    );
    for (name, kind, sim) in [
        ("groq", "openai", groq),
        ("gemini", "gemini", gemini),
        ("claude", "anthropic", claude),
    ] {
        text.push_str(&format!(
            "[providers.{name}]\nkind = {kind:?}\nbase_url = {:?}\nmodel = \"{name}-model\"\napi_key = \"demo-key-{name}\"\n",
            sim.base_url()
        ));
    }
    Settings::from_toml_str(&text, |_| None).map_err(|e| e.to_string())
}

fn system_prompt(r: &Received) -> String {
    let v = r.json();
    v["messages"][0]["content"]
        .as_str()
        .or_else(|| v["systemInstruction"]["parts"][0]["text"].as_str())
        .or_else(|| v["system"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// A joke, streamed word by word when asked for, after `delay`.
fn answer(r: &Received, delay: Duration, every: Duration) -> Reply {
    let n = r.body.len() % JOKES.len();
    let words: Vec<String> = understudy_split(JOKES[n]);
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    StreamSpec::new(&refs).every(every).reply().after(delay)
}

fn understudy_split(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, w) in text.split(' ').enumerate() {
        out.push(if i == 0 {
            w.to_owned()
        } else {
            format!(" {w}")
        });
    }
    out
}

/// What a sample request produced.
#[derive(Debug, Clone)]
struct Outcome {
    kind: Kind,
    provider: Option<String>,
    fell_back: bool,
    filtered: bool,
    softened: bool,
    outage: bool,
    error: Option<String>,
    latency: Duration,
    text: String,
}

async fn send(client: &reqwest::Client, base: &str, kind: Kind, topic: &str) -> Outcome {
    let started = Instant::now();
    let (url, body) = request(base, kind, topic);
    let mut o = Outcome {
        kind,
        provider: None,
        fell_back: false,
        filtered: false,
        softened: false,
        outage: false,
        error: None,
        latency: Duration::ZERO,
        text: String::new(),
    };
    let resp = match client
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            o.error = Some(e.to_string());
            return o;
        }
    };
    let served_by = resp
        .headers()
        .get("x-understudy-provider")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    o.latency = started.elapsed();
    if !status.is_success() {
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        o.error = Some(v["error"]["code"].as_str().unwrap_or("error").to_owned());
        return o;
    }
    match kind {
        Kind::Stream => read_stream(&text, &mut o),
        Kind::Chat => {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            o.text = v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            o.provider = served_by;
            // The OpenAI shape has no attempts: the headers tell the story.
            o.fell_back = o.provider.as_deref() != Some("groq");
            o.outage = o.fell_back;
        }
        Kind::Roast | Kind::Pun => {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            o.text = v["text"].as_str().unwrap_or_default().to_owned();
            o.provider = v["provider"].as_str().map(str::to_owned);
            o.fell_back = v["fell_back"] == true;
            o.filtered = v["content_filtered"] == true;
            // /v1/wit shows no attempts; a refusal served by groq was softened.
            o.softened = o.filtered && !o.fell_back;
            o.outage = o.fell_back && !o.filtered;
        }
    }
    o
}

/// The URL and body of a sample request of `kind` about `topic`.
fn request(base: &str, kind: Kind, topic: &str) -> (String, Value) {
    match kind {
        Kind::Roast => (
            format!("{base}/v1/wit"),
            json!({"topic": topic, "style": "roast"}),
        ),
        Kind::Pun => (
            format!("{base}/v1/wit"),
            json!({"topic": topic, "style": "pun"}),
        ),
        Kind::Chat => (
            format!("{base}/v1/chat/completions"),
            json!({"model": "default", "messages": [{"role": "user", "content": format!("One line about {topic}")}]}),
        ),
        Kind::Stream => (
            format!("{base}/v1/generate"),
            json!({"prompt": format!("A story about {topic}"), "stream": true}),
        ),
    }
}

/// Reads a streamed answer's events into `o`: its text, who served, and
/// what its attempts show.
fn read_stream(text: &str, o: &mut Outcome) {
    for block in text.split("\n\n") {
        let (event, data) = block.lines().fold((None, String::new()), |(e, d), l| {
            if let Some(v) = l.strip_prefix("event: ") {
                (Some(v.to_owned()), d)
            } else if let Some(v) = l.strip_prefix("data: ") {
                (e, d + v)
            } else {
                (e, d)
            }
        });
        let v: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        match event.as_deref() {
            Some("delta") => o.text.push_str(v["text"].as_str().unwrap_or_default()),
            Some("done") => {
                o.provider = v["provider"].as_str().map(str::to_owned);
                o.fell_back = v["fell_back"] == true;
                o.filtered = v["content_filtered"] == true;
                note_attempts(o, &v);
            }
            Some("error") => o.error = v["code"].as_str().map(str::to_owned),
            _ => {}
        }
    }
}

/// Notes what an answer's `attempts` show: a softened retry that served,
/// an outage passed over.
fn note_attempts(o: &mut Outcome, v: &Value) {
    let attempts = v["attempts"].as_array().cloned().unwrap_or_default();
    o.softened = attempts
        .iter()
        .any(|a| a["kind"] == "softened" && a["outcome"] == "ok");
    o.outage = attempts.iter().any(|a| {
        matches!(
            a["outcome"].as_str(),
            Some("unavailable" | "timeout" | "connection" | "rate_limited")
        )
    });
}

fn paint(on: bool, code: &str, text: &str) -> String {
    if on {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

fn line(n: usize, total: usize, o: &Outcome, color: bool) -> String {
    let kind = match o.kind {
        Kind::Roast => "wit roast",
        Kind::Pun => "wit pun",
        Kind::Chat => "chat",
        Kind::Stream => "stream",
    };
    let width = total.to_string().len();
    let served = match (&o.provider, &o.error) {
        (Some(p), None) => paint(
            color,
            if o.fell_back { "33" } else { "32" },
            &format!("{p:<6}"),
        ),
        (_, Some(e)) => paint(color, "31", &format!("error: {e}")),
        (None, None) => "?".into(),
    };
    let mut flags = Vec::new();
    if o.fell_back {
        flags.push("fell back");
    }
    if o.softened {
        flags.push("softened");
    }
    if o.filtered {
        flags.push("filtered");
    }
    let text: String = o.text.chars().take(48).collect();
    format!(
        "[{n:>width$}/{total}] {kind:<9} → {served} {:<28} {:>6.0} ms  {}",
        flags.join(", "),
        o.latency.as_secs_f64() * 1000.0,
        paint(color, "2", &text)
    )
}

fn progress(done: usize, total: usize) -> String {
    let width = 30;
    let filled = done * width / total;
    format!(
        "[{}{}] {done}/{total}",
        "#".repeat(filled),
        "-".repeat(width - filled)
    )
}

fn summary(results: &[Outcome], took: Duration) -> String {
    let mut served: BTreeMap<&str, usize> = BTreeMap::new();
    for o in results {
        if o.error.is_none() {
            *served
                .entry(o.provider.as_deref().unwrap_or("?"))
                .or_default() += 1;
        }
    }
    let ok = results.iter().filter(|o| o.error.is_none()).count();
    let mut lat: Vec<f64> = results
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.latency.as_secs_f64() * 1000.0)
        .collect();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        lat.get(((lat.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let by_softening = results.iter().filter(|o| o.filtered && o.softened).count();
    let by_fallback = results
        .iter()
        .filter(|o| o.filtered && o.fell_back && o.error.is_none())
        .count();
    let outages = results
        .iter()
        .filter(|o| o.outage && o.error.is_none())
        .count();
    let mut s = format!(
        "\nSummary: {ok}/{} answered in {:.1} s\n\n",
        results.len(),
        took.as_secs_f64()
    );
    s.push_str("| served by | requests | share |\n|---|---:|---:|\n");
    for (p, n) in &served {
        s.push_str(&format!(
            "| {p} | {n} | {:.0}% |\n",
            100.0 * *n as f64 / ok.max(1) as f64
        ));
    }
    s.push_str(&format!(
        "\nrefusals recovered by softening: {by_softening}\nrefusals recovered by fallback:  {by_fallback}\noutages and rate limits absorbed: {outages}\nlatency p50 {:.0} ms, p99 {:.0} ms\n",
        pct(0.5),
        pct(0.99)
    ));
    s
}
