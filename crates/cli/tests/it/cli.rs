//! The real `understudy` binary against simulated providers (the
//! `providers` command's tests in `cli/providers.rs`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use understudy_testkit::{Refusal, Reply, SimProvider};

mod providers;

const GROQ_KEY: &str = "gsk_cli_test_secret_key_123";
const OPENAI_KEY: &str = "sk-cli-test-secret-key-456";

fn understudy(groq: &SimProvider, openai: &SimProvider) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
    cmd.env_clear()
        .env("GROQ_BASE_URL", groq.base_url())
        .env("GROQ_API_KEY", GROQ_KEY)
        .env("GROQ_MODEL", "llama-test")
        .env("OPENAI_BASE_URL", openai.base_url())
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("AI_DEFAULT_PROVIDER", "groq")
        .env("AI_PROVIDER_FALLBACK_ORDER", "groq,openai")
        // No load balancer waits on a test's gateway: SIGTERM stops it
        // without the drain's grace.
        .env("UNDERSTUDY_DRAIN_GRACE", "0");
    cmd
}

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn assert_no_keys(out: &Output) {
    for stream in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(stream);
        assert!(
            !text.contains(GROQ_KEY) && !text.contains(OPENAI_KEY),
            "a key leaked: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_prints_the_answer() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(Reply::text("Why did the gateway cross the road?"));
    let mut cmd = understudy(&groq, &openai);
    cmd.args([
        "ask",
        "--system",
        "Be brief.",
        "--temperature",
        "0.5",
        "--max-tokens",
        "50",
        "tell me a joke",
    ]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Why did the gateway cross the road?\n"
    );
    let sent = groq.received()[0].json();
    assert_eq!(sent["model"], "llama-test");
    assert_eq!(sent["max_tokens"], 50);
    assert_eq!(sent["messages"][0]["content"], "Be brief.");
    assert_no_keys(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_json_shows_the_fallback() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(Reply::Refuse(Refusal::Message("no".into())))
        .push(Reply::status(503));
    openai.push(Reply::text("from openai"));
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "--json", "roast me"]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["success"], true);
    assert_eq!(v["text"], "from openai");
    assert_eq!(v["provider"], "openai");
    assert_eq!(v["fell_back"], true);
    assert_eq!(v["content_filtered"], true);
    assert_eq!(v["error_code"], Value::Null);
    let attempts: Vec<String> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{}:{}/{}/{}",
                a["provider"].as_str().unwrap(),
                a["model"].as_str().unwrap(),
                a["kind"].as_str().unwrap(),
                a["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            "groq:llama-test/primary/content_filter",
            "groq:llama-test/softened/unavailable",
            "openai:gpt-4o-mini/fallback/ok"
        ]
    );
    assert!(v["attempts"][0]["latency_ms"].as_f64().is_some());
    assert!(
        v["attempts"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("refused")
    );
    assert!(v["usage"]["output_tokens"].as_u64().is_some());
    assert_no_keys(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_exits_1_when_no_provider_answers() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(401));
    openai.always(Reply::status(503));
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "--json", "hi"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["success"], false);
    assert_eq!(v["error_code"], "unavailable");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2);
    assert_no_keys(&out);

    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "hi"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("every provider failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_usage_and_configuration_exit_2() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    for (extra_env, args, needle) in [
        (
            vec![("AI_PROVIDER_FALLBACK_ORDER", "groq,nope")],
            vec!["ask", "hi"],
            "AI_PROVIDER_FALLBACK_ORDER",
        ),
        (
            vec![("UNDERSTUDY_CONFIG", "/nonexistent.toml")],
            vec!["ask", "hi"],
            "cannot read /nonexistent.toml",
        ),
        (
            vec![],
            vec!["ask", "--route", "nope", "hi"],
            "unknown route",
        ),
        (
            vec![],
            vec!["ask", "--provider", "nope", "hi"],
            "unknown provider",
        ),
        (
            vec![],
            vec!["ask", "--temperature", "9", "hi"],
            "temperature",
        ),
        (vec![], vec!["ask"], "PROMPT"),
        (
            vec![],
            vec!["ask", "--refusal-policy", "maybe", "hi"],
            "maybe",
        ),
        (vec![], vec!["serve", "--listen", "nowhere"], "invalid"),
    ] {
        let mut cmd = understudy(&groq, &openai);
        for (k, v) in &extra_env {
            cmd.env(k, v);
        }
        cmd.args(&args);
        let out = run(cmd).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let dir = std::env::temp_dir().join(format!("understudy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[routing]\ndefault = 3\n").unwrap();
    let mut cmd = understudy(&groq, &openai);
    cmd.env_remove("AI_DEFAULT_PROVIDER")
        .arg("--config")
        .arg(&bad)
        .args(["ask", "hi"]);
    let out = run(cmd).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml") && err.contains("line 2"), "{err}");
    assert_eq!(groq.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_and_stops_on_sigterm() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.always(Reply::status(503));
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (url, lines) = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        loop {
            let line = lines
                .next()
                .expect("serve exited before listening")
                .unwrap();
            if let Some(url) = line.split("listening on ").nth(1) {
                return (url.trim().to_owned(), lines);
            }
        }
    })
    .await
    .unwrap();
    let client = understudy_testkit::http_client();
    let resp = client
        .post(format!("{url}/v1/generate"))
        .header("content-type", "application/json")
        .body(r#"{"prompt": "hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(v["provider"], "openai");
    assert_eq!(v["fell_back"], true);
    // A request's log lines name it.
    let bad = client
        .post(format!("{url}/v1/generate"))
        .header("content-type", "application/json")
        .header("x-request-id", "test-req-42")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);

    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        (status, rest)
    });
    let (status, rest) = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?} {rest:?}");
    assert!(!rest.join("\n").contains(GROQ_KEY));
    let failed = rest
        .iter()
        .find(|l| l.contains("request failed"))
        .unwrap_or_else(|| panic!("no log line of the bad request: {rest:?}"));
    assert!(failed.ends_with("request_id=test-req-42"), "{failed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_stream_prints_text_as_it_arrives() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(Reply::status(503));
    openai.push(Reply::stream(&["Knock", " knock."]));
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "--stream", "joke"]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Knock knock.\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("served by openai") && err.contains("fell back: true"),
        "{err}"
    );
    assert_no_keys(&out);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_stream_json_lines() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(Reply::stream(&["a", "b"]));
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "--stream", "--json", "x"]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], serde_json::json!({"delta": "a"}));
    assert_eq!(lines[1], serde_json::json!({"delta": "b"}));
    assert_eq!(lines[2]["done"]["provider"], "groq");
    assert_eq!(lines[2]["done"]["fell_back"], false);
    assert_eq!(lines.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_stream_exits_1_when_the_stream_breaks_after_text() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    groq.push(
        understudy_testkit::StreamSpec::new(&["partial"])
            .ending(understudy_testkit::StreamEnd::ErrorEvent)
            .reply(),
    );
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["ask", "--stream", "--json", "x"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], serde_json::json!({"delta": "partial"}));
    assert_eq!(lines[1]["error"]["code"], "stream_interrupted");
    assert_eq!(lines[1]["error"]["provider"], "groq");
    assert_eq!(openai.request_count(), 0);

    let mut cmd = understudy(&groq, &openai);
    groq.push(Reply::status(503));
    openai.push(Reply::status(503));
    cmd.args(["ask", "--stream", "x"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unavailable"));
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_refuses_a_public_address_without_client_keys() {
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["serve", "--listen", "0.0.0.0:0"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("UNDERSTUDY_API_KEYS") && err.contains("--insecure-no-auth"),
        "{err}"
    );

    // With keys, or explicitly insecure, it starts.
    for (env, flag) in [
        (Some(("UNDERSTUDY_API_KEYS", "sk-a-long-client-key")), None),
        (None, Some("--insecure-no-auth")),
    ] {
        let mut cmd = understudy(&groq, &openai);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        cmd.args(["serve", "--listen", "0.0.0.0:0", "--log-format", "json"])
            .args(flag)
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let started = tokio::task::spawn_blocking(move || {
            BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .take(20)
                .any(|l| l.contains("listening on http://"))
        });
        let started = tokio::time::timeout(Duration::from_secs(10), started)
            .await
            .unwrap()
            .unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        assert!(started, "{env:?} {flag:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn events_tail_follows_the_stream() {
    let redis = understudy_testkit::RedisServer::start().unwrap();
    let groq = SimProvider::openai().await.unwrap();
    let openai = SimProvider::openai().await.unwrap();
    let mut tail = understudy(&groq, &openai);
    tail.env("REDIS_URL", redis.url()).args([
        "events",
        "tail",
        "--json",
        "--from-start",
        "--limit",
        "2",
    ]);
    let tail = tokio::task::spawn_blocking(move || tail.output().unwrap());
    groq.push(Reply::status(503));
    for prompt in ["one", "two"] {
        let mut ask = understudy(&groq, &openai);
        ask.env("REDIS_URL", redis.url()).args(["ask", prompt]);
        assert!(run(ask).await.status.success());
    }
    let out = tokio::time::timeout(Duration::from_secs(15), tail)
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["provider"], "openai");
    assert_eq!(events[0]["fell_back"], true);
    assert_eq!(events[1]["provider"], "groq");
    assert_eq!(events[1]["primary"], "groq");
    assert_no_keys(&out);

    // Without REDIS_URL it says what to do.
    let mut cmd = understudy(&groq, &openai);
    cmd.args(["events", "tail"]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("REDIS_URL"));
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_runs_without_keys_and_summarises() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
    cmd.env_clear().args([
        "demo",
        "--requests",
        "12",
        "--duration",
        "3",
        "--listen",
        "127.0.0.1:0",
        "--no-color",
    ]);
    let out = run(cmd).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("Summary: 12/12 answered"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with('[')).count(),
        12,
        "one line per request: {text}"
    );
    assert!(text.contains("refusals recovered by softening"), "{text}");
    assert!(text.contains("| groq |"), "{text}");
    assert!(!text.contains('\x1b'), "no colour codes without a terminal");

    // A busy port says what to do.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
    cmd.env_clear().args([
        "demo",
        "--requests",
        "1",
        "--duration",
        "0",
        "--listen",
        &addr,
    ]);
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--listen"),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_listens_beyond_loopback_only_when_told() {
    // The demo has no client keys: like `serve`, it refuses a non-loopback
    // address…
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
        cmd.env_clear().args([
            "demo",
            "--serve",
            "--requests",
            "1",
            "--duration",
            "0",
            "--listen",
            addr,
        ]);
        // Refused, it exits at once; started, it would serve until killed.
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
        let Ok(out) = tokio::time::timeout(Duration::from_secs(20), waited).await else {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("demo --serve on {addr} was not refused");
        };
        let out = out.unwrap().unwrap();
        assert_eq!(out.status.code(), Some(2), "{addr}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("refusing") && err.contains("--insecure-no-auth"),
            "{addr}: {err}"
        );
        assert!(out.stdout.is_empty(), "{addr}: it started: {out:?}");
    }
    // …unless told otherwise.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_understudy"));
    cmd.env_clear().args([
        "demo",
        "--requests",
        "1",
        "--duration",
        "0",
        "--listen",
        "0.0.0.0:0",
        "--insecure-no-auth",
        "--no-color",
    ]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Summary: 1/1 answered"),
        "{out:?}"
    );
}

#[test]
fn help_is_complete() {
    for args in [
        &["--help"][..],
        &["ask", "--help"],
        &["serve", "--help"],
        &["providers", "--help"],
        &["demo", "--help"],
        &["events", "tail", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_understudy"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage:"), "{args:?}: {text}");
    }
    let top = Command::new(env!("CARGO_BIN_EXE_understudy"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&top.stdout);
    for sub in ["ask", "serve", "providers", "demo", "events"] {
        assert!(text.contains(sub), "{sub} missing from --help");
    }
}
