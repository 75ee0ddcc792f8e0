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

mod bodies;
mod full;
mod hedge;
mod load;
mod phase;
mod process;
mod rate;
mod relay;
mod report;
mod stack;
mod tls;
mod upstream;

use std::io::Write as _;
use std::path::PathBuf;

type Error = Box<dyn std::error::Error + Send + Sync>;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1733000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Benchmarks are jokes that take themselves seriously.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}"#;
const FAILURE: &str = r#"{"error":{"message":"over capacity","type":"internal_server_error"}}"#;
/// The gateway's OpenAI-compatible endpoint.
const GATEWAY_PATH: &str = "/v1/chat/completions";
const REQUEST: &str = r#"{"model":"default","messages":[{"role":"user","content":"Tell me a joke about benchmarks."}]}"#;
/// [`REQUEST`] on a two-target route, naming its session: each request
/// looks its pin up and moves it (the session lookup's cost, beside
/// `closed:1`).
const SESSION_REQUEST: &str = r#"{"model":"pair","prompt_cache_key":"bench-session","messages":[{"role":"user","content":"Tell me a joke about benchmarks."}]}"#;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = if args.get(1).map(String::as_str) == Some("--relay") {
        relay::relay(args.get(2), args.get(3)).await
    } else if args.get(1).map(String::as_str) == Some("--stack-relay") {
        stack::relay(&args[2..]).await
    } else if args.get(1).map(String::as_str) == Some("--tls-relay") {
        tls::relay(&args[2..]).await
    } else if args.get(1).map(String::as_str) == Some("--echo") {
        relay::echo(args.get(2))
    } else {
        run().await
    };
    if let Err(e) = result {
        let _ = writeln!(std::io::stderr(), "understudy-bench: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let usage = "usage: understudy-bench <understudy binary> <out dir> [gateway cpu]";
    let args: Vec<String> = std::env::args().collect();
    let gateway_bin = PathBuf::from(args.get(1).ok_or(usage)?);
    let out_dir = PathBuf::from(args.get(2).ok_or(usage)?);
    let cpu = args.get(3).map(String::as_str);
    std::fs::create_dir_all(&out_dir)?;

    let upstream = upstream::start().await?;
    let only = std::env::var("UNDERSTUDY_BENCH_ONLY").unwrap_or_default();
    match only.as_str() {
        "" => full::run(&gateway_bin, &out_dir, upstream, cpu).await,
        "tls" => tls::only(&gateway_bin, &out_dir, cpu).await,
        "bodies" => bodies::run(&gateway_bin, &out_dir, upstream, cpu).await,
        "hedge" => hedge::run(&gateway_bin, &out_dir, cpu).await,
        "rates" => {
            let gw = process::Gateway::start(&gateway_bin, &out_dir, upstream, cpu).await?;
            let rows = rate::rows(upstream, &gw, cpu).await?;
            report::say(&report::render(&rows, &[]));
            Ok(())
        }
        only => phase::one(only, &gateway_bin, &out_dir, upstream, cpu).await,
    }
}
